"""Launch and recovery of a user's torchrun script: ringmaster against
torchrun, the same script (tests/cluster/programs/ddp_train.py), the same run,
on the same machine.

Each run measures, from the script's own time stamps (time.time() printed on
stdout, so log transport adds nothing):
  (i)  launch: from the driver starting the launcher (torchrun: Popen;
       ringmaster: POST /v1/jobs) until every rank printed
       "init_process_group done";
  (ii) recovery: from the driver's SIGKILL of rank 1 (after the first
       snapshot, epoch 2) until the first step printed by a rank of the
       restarted gang (TORCHELASTIC_RESTART_COUNT 1); the run then goes on to
       success, resuming from the script's snapshot.
For each, the share that is `import torch`: the script prints how long its
own imports took (slowest rank of the gang); a bare `python3 -c "import
torch"` is also timed, median of --imports runs.

torchrun: `python3 -m torch.distributed.run --nnodes 1 --nproc_per_node 2
--max_restarts 3` (PyTorch 1.13 spells the options with underscores), static
rendezvous on a free port, `--redirects 2 --tee 1` (Debian's torch 1.13 on
Python 3.11 fails with the default --redirects 0: its Std flag lookup misses
0 and 3), default --monitor_interval (5 s) unless --monitor-interval.

ringmaster: the real ringmasterd and one enrolled `ringworker agent` (2 CPU
slots, --allow-program PYTHON, --data-root with the script, --checkpoint-root),
a program job {"program": {"argv": [PYTHON, "ddp_train.py", ...]},
"parallel": {"world_size": 2, "device": "cpu"}, "restart": {"max_restarts": 3}};
lines are read back with GET /v1/jobs/{id}/logs.

  bench/program/launch_recovery.py --build build [--runs 3] [--only torchrun|ringmaster]

Prints a markdown table of medians (ms; each column its own median; "the
rest" is each run's total minus its import, then the median: the launcher's
own share) and the raw numbers as JSON. import torch dominates both totals
on a loaded machine: compare "the rest".
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "cluster"))
from cluster import Agent, Daemon, free_port, join_args, wait_workers  # noqa: E402

SCRIPT = os.path.join(ROOT, "tests", "cluster", "programs", "ddp_train.py")
SCRIPT_ARGS = ["--epochs", "6", "--save-every", "2", "--step-sleep", "0.05"]

PID_RE = re.compile(r"ddp_train: rank (\d+) pid (\d+) env .*TORCHELASTIC_RESTART_COUNT=(\d+)")
IMPORT_RE = re.compile(r"ddp_train: rank (\d+) import torch took (\d+) ms")
INIT_RE = re.compile(r"ddp_train: rank (\d+) init_process_group done at ([\d.]+) \(world size \d+, restart (\d+)\)")
STEP_RE = re.compile(r"ddp_train: rank (\d+) restart (\d+) epoch (\d+) step (\d+) loss \S+ at ([\d.]+)")
RESUME_RE = re.compile(r"ddp_train: rank (\d+) resumed from snapshot at epoch (\d+)")
SAVED_RE = re.compile(r"ddp_train: rank 0 snapshot saved at epoch (\d+)")


class Lines:
    """The script's stdout lines seen so far; `fetch` returns new lines."""

    def __init__(self, fetch):
        self.fetch = fetch
        self.all = []

    def poll(self):
        self.all += self.fetch()
        return self.all

    def find(self, regex, pred=lambda m: True):
        return [m for m in (regex.search(l) for l in self.all) if m and pred(m)]

    def wait(self, what, regex, pred=lambda m: True, n=1, timeout=300, alive=None):
        deadline = time.time() + timeout
        while time.time() < deadline:
            self.poll()
            got = self.find(regex, pred)
            if len(got) >= n:
                return got
            if alive is not None and not alive():
                raise RuntimeError("%s: the run ended first" % what)
            time.sleep(0.02)
        raise RuntimeError("%s: not within %s s" % (what, timeout))


def measure(lines, t_launch, alive, finished):
    """Drive one run whose lines come from `lines`: return its numbers."""
    init = lines.wait("every rank past init_process_group", INIT_RE, lambda m: m.group(3) == "0", 2,
                      alive=alive)
    r = {"launch_ms": (max(float(m.group(2)) for m in init) - t_launch) * 1e3,
         "launch_import_ms": max(int(m.group(2)) for m in lines.find(IMPORT_RE)[:2])}
    lines.wait("the first snapshot", SAVED_RE, alive=alive)
    pid = int(lines.wait("rank 1's pid", PID_RE, lambda m: m.group(1) == "1" and m.group(3) == "0")[0].group(2))
    t_kill = time.time()
    os.kill(pid, signal.SIGKILL)
    first = lines.wait("a step after the restart", STEP_RE, lambda m: m.group(2) == "1", alive=alive)
    r["recovery_ms"] = (min(float(m.group(5)) for m in first) - t_kill) * 1e3
    imports = lines.wait("imports after the restart", IMPORT_RE, n=4)
    r["recovery_import_ms"] = max(int(m.group(2)) for m in imports[2:4])
    resumed = lines.wait("the resume", RESUME_RE, n=2, alive=alive)
    r["resumed_epoch"] = int(resumed[0].group(2))
    r["launch_rest_ms"] = r["launch_ms"] - r["launch_import_ms"]
    r["recovery_rest_ms"] = r["recovery_ms"] - r["recovery_import_ms"]
    r["succeeded"] = finished()
    lines.poll()
    r["restart_count_1_seen"] = bool(lines.find(PID_RE, lambda m: m.group(3) == "1"))
    return r


def torchrun_once(args, workdir):
    os.makedirs(workdir)
    out_path = os.path.join(workdir, "stdout.log")
    out = open(out_path, "wb")
    cmd = [args.python, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
           "--max_restarts", "3", "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
           "--redirects", "2", "--tee", "1", "--log_dir", os.path.join(workdir, "logs")]
    if args.monitor_interval is not None:
        cmd += ["--monitor_interval", str(args.monitor_interval)]
    cmd += [SCRIPT] + SCRIPT_ARGS
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.pop("RINGMASTER_CHECKPOINT_DIR", None)
    t_launch = time.time()
    p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=workdir, env=env,
                         start_new_session=True)
    pos = [0]

    def fetch():
        with open(out_path, "rb") as f:
            f.seek(pos[0])
            data = f.read()
        cut = data.rfind(b"\n") + 1
        pos[0] += cut
        return data[:cut].decode("utf-8", "replace").splitlines()

    try:
        return measure(Lines(fetch), t_launch, lambda: p.poll() is None,
                       lambda: p.wait(300) == 0)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        out.close()


def ringmaster_once(args, workdir):
    data = os.path.join(workdir, "data")
    os.makedirs(data)
    shutil.copy(SCRIPT, data)
    d = Daemon(os.path.join(args.build, "coordinatord", "ringmasterd"), workdir,
               ["--restart-backoff-ms", "100"]).start()
    agent = Agent(os.path.join(args.build, "worker", "ringworker"), workdir, d.endpoint, "n1", "cpu:2",
                  data, ["--allow-program", args.python, "--checkpoint-root", os.path.join(workdir, "ck")] +
                  join_args(d, workdir, "n1")).start()
    try:
        wait_workers(d, ["n1"])
        spec = {"name": "launch-recovery-bench",
                "program": {"argv": [args.python, "ddp_train.py"] + SCRIPT_ARGS},
                "parallel": {"world_size": 2, "device": "cpu"},
                "restart": {"max_restarts": 3}}
        t_launch = time.time()
        job = d.submit(spec)["id"]
        since = [0]

        def fetch():
            page = d.json("GET", "/v1/jobs/%s/logs?since=%d" % (job, since[0]))
            since[0] = page["next"]
            return [l["text"] for l in page["lines"]]

        def alive():
            return d.job(job)["state"] not in ("succeeded", "failed", "cancelled")

        def finished():
            deadline = time.time() + 300
            while alive() and time.time() < deadline:
                time.sleep(0.2)
            return d.job(job)["state"] == "succeeded"

        return measure(Lines(fetch), t_launch, alive, finished)
    finally:
        agent.stop()
        d.stop()


def import_torch(args):
    out = []
    for _ in range(args.imports):
        t = time.time()
        subprocess.run([args.python, "-c", "import torch"], check=True)
        out.append((time.time() - t) * 1e3)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="the meson build folder (ringmaster half)")
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--imports", type=int, default=5)
    ap.add_argument("--only", choices=["torchrun", "ringmaster"])
    ap.add_argument("--monitor-interval", type=float, help="torchrun's --monitor_interval (default: its own, 5 s)")
    args = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="rm-bench-program-", dir="/var/tmp")
    os.chmod(workdir, 0o755)
    print("load average before: %s, %d cores" % (open("/proc/loadavg").read().split()[:3], os.cpu_count()))
    imports = import_torch(args)
    results = {}
    for name, fn in (("ringmaster", ringmaster_once), ("torchrun", torchrun_once)):
        if args.only and args.only != name:
            continue
        results[name] = []
        for i in range(args.runs):
            r = fn(args, os.path.join(workdir, "%s-%d" % (name, i)))
            print("%s run %d: %s" % (name, i + 1, json.dumps(r)), file=sys.stderr, flush=True)
            results[name].append(r)
    print("load average after: %s" % open("/proc/loadavg").read().split()[:3])
    print("`python3 -c \"import torch\"`: median %.0f ms of %d (%s)" %
          (statistics.median(imports), len(imports), ", ".join("%.0f" % x for x in imports)))
    print()
    print("| launcher | launch to every rank past init_process_group | of which import torch | the rest | "
          "SIGKILL of rank 1 to first step after restart | of which import torch | the rest | "
          "resumed at epoch | succeeded |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, rows in results.items():
        def med(k):
            return statistics.median(r[k] for r in rows)
        label = name
        if name == "torchrun":
            label += " (--monitor_interval %s)" % (args.monitor_interval if args.monitor_interval is not None else "5 default")
        print("| %s | **%.0f** | %.0f | %.0f | **%.0f** | %.0f | %.0f | %s | %d/%d |" % (
            label, med("launch_ms"), med("launch_import_ms"), med("launch_rest_ms"),
            med("recovery_ms"), med("recovery_import_ms"), med("recovery_rest_ms"),
            sorted(set(r["resumed_epoch"] for r in rows)), sum(r["succeeded"] for r in rows), len(rows)))
    print()
    print("raw: %s" % json.dumps(results))
    shutil.rmtree(workdir, ignore_errors=True)
    ok = all(r["succeeded"] and r["restart_count_1_seen"] for rows in results.values() for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
