"""Time to recover from a rank's death: ringmaster against torchrun, same
model, same step, same machine, in one run.

Both train a 2-rank data-parallel GPT-2 (one thread per rank) and write a
checkpoint every --every steps. Once a checkpoint exists, the driver kills
rank 1 with SIGKILL and measures, from the kill, until the first optimizer
step completed after resuming; --kills times per run.

ringmaster: the real ringmasterd and one `ringworker agent` (2 CPU slots,
--checkpoint-root); the job's `recovered` event gives the split the
coordinator measures (detection: death to the agent's report reaching it;
respawn: to the new attempt's SPAWN; start: to rank 0's JOIN; rendezvous;
snapshot load; first step). The total here is from the driver's kill to the
time of that event (the coordinator writes it when rank 0's first step
report arrives).

torchrun: `torch.distributed.run --nproc_per_node 2 --max_restarts K
--monitor_interval 0.1` (its default is 5 s; 0.1 is its best) with
bench/recovery/torch_recover.py, which saves model and AdamW state with
torch.save (fsync'ed) every --every steps and loads the latest at start. Its
split, from the workers' own time stamps: detection + respawn (kill to the
new rank 0 process starting), start (importing torch), rendezvous
(init_process_group), checkpoint load (and the DDP/optimizer set-up before
it), first step.

Prints a markdown table of medians over the kills, and the raw numbers.
"""
import argparse
import datetime
import glob
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "cluster"))
from cluster import Agent, Daemon, free_port, join_args, rank_pid, wait_workers  # noqa: E402

SHAPES = {
    "small": {"n_layer": 6, "n_head": 6, "n_embd": 384, "vocab_size": 50257, "seq_len": 64},
    "124m": {"n_layer": 12, "n_head": 12, "n_embd": 768, "vocab_size": 50257, "seq_len": 64},
}
REASON = re.compile(r"in (\d+) ms \(detection (\d+) ms, respawn (\d+) ms, start (\d+) ms, "
                    r"rendezvous (\d+) ms, snapshot load (\d+) ms, first step (\d+) ms\)")


def rfc3339(s):
    return datetime.datetime.strptime(s.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def tokens(path, vocab):
    import random
    import struct
    rng = random.Random(1337)
    with open(path, "wb") as f:
        f.write(struct.pack("<%dH" % 1000000, *(rng.randrange(vocab) for _ in range(1000000))))


def wait(what, fn, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.01)
    raise RuntimeError("%s: not within %s s" % (what, timeout))


def ours(args, shape, workdir):
    data = os.path.join(workdir, "data")
    os.makedirs(data)
    tokens(os.path.join(data, "tokens.bin"), shape["vocab_size"])
    d = Daemon(args.ringmasterd, workdir, ["--restart-backoff-ms", "100"]).start()
    agent = Agent(args.ringworker, workdir, d.endpoint, "n1", "cpu:2", data,
                  ["--checkpoint-root", os.path.join(workdir, "ck")] + join_args(d, workdir, "n1")).start()
    results = []
    try:
        wait_workers(d, ["n1"])
        spec = {"name": "recovery-bench", "model": shape,
                "data": {"train": "tokens.bin", "format": "nanogpt"},
                "train": {"steps": 1000000, "batch_size": 8, "lr": 6e-4, "warmup_steps": 1,
                          "eval_every": 0},
                "parallel": {"world_size": 2},
                "checkpoint": {"every_steps": args.every, "keep_last": 2},
                "restart": {"max_restarts": args.kills + 1}}
        job = d.submit(spec)["id"]
        def checkpointed():
            # running, with a checkpoint committed by the current attempt
            j = d.job(job)
            cps = d.json("GET", "/v1/jobs/%s/checkpoints" % job)["checkpoints"]
            return j["state"] == "running" and cps and cps[0]["attempt"] == j["attempt"]

        for k in range(args.kills):
            wait("a checkpoint of %s's current attempt" % job, checkpointed, 600)
            time.sleep(0.3)
            pid = wait("rank 1", lambda: rank_pid(job, 1), 60)
            t_kill = time.time()
            os.kill(pid, signal.SIGKILL)
            ev = wait("recovery %d" % (k + 1),
                      lambda: [e for e in d.events(job) if e.get("type") == "recovered"][k:k + 1], 600)[0]
            m = REASON.search(ev["reason"])
            parts = dict(zip(["event_total", "detection", "respawn", "start", "rendezvous", "load", "first_step"],
                             [int(x) for x in m.groups()]))
            parts["total"] = (rfc3339(ev["at"]) - t_kill) * 1e3
            results.append(parts)
            print("ringmaster kill %d: %s" % (k + 1, ev["reason"]), file=sys.stderr)
        d.json("POST", "/v1/jobs/%s/cancel" % job, {})
    finally:
        agent.stop()
        d.stop()
    return results


def torch_side(args, shape, workdir):
    out = os.path.join(workdir, "torch")
    logs = os.path.join(out, "logs")
    os.makedirs(logs)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    port = free_port()
    cmd = [args.python, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
           "--max_restarts", str(args.kills + 1), "--monitor_interval", "0.1",
           "--rdzv_backend", "c10d", "--rdzv_endpoint", "127.0.0.1:%d" % port,
           "--redirects", "1", "--tee", "2", "--log_dir", logs,
           os.path.join(HERE, "torch_recover.py"), out,
           "--layers", str(shape["n_layer"]), "--heads", str(shape["n_head"]),
           "--embd", str(shape["n_embd"]), "--vocab", str(shape["vocab_size"]),
           "--seq", str(shape["seq_len"]), "--every", str(args.every)]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                         start_new_session=True)

    def read_events():
        """Every JSON line the workers printed (torchrun --redirects 1 puts each
        worker's stdout in <logs>/<run>/attempt_<k>/<rank>/stdout.log)."""
        evs = []
        for path in glob.glob(os.path.join(logs, "*", "attempt_*", "*", "stdout.log")):
            with open(path, errors="replace") as f:
                for line in f:
                    if line.startswith("{"):
                        try:
                            evs.append(json.loads(line))
                        except ValueError:
                            pass
        return evs

    results = []
    try:
        for k in range(args.kills):
            wait("torch checkpoint",
                 lambda: any(e["event"] == "saved" and e["restart"] == k for e in read_events()), 600)
            time.sleep(0.3)
            pid = int(open(os.path.join(out, "pid-%d-1" % k)).read())
            t_kill = time.time()
            os.kill(pid, signal.SIGKILL)

            def mine(ev, rank=0):
                return [e for e in read_events()
                        if e["restart"] == k + 1 and e["rank"] == rank and e["event"] == ev]
            first = wait("torch recovery %d" % (k + 1), lambda: mine("step"), 600)[0]
            start, init, loaded = mine("start")[0], mine("init")[0], mine("loaded")[0]
            results.append({
                "total": (first["t"] - t_kill) * 1e3,
                "detect_respawn": (start["t"] - t_kill) * 1e3,
                "start": (init["t"] - start["t"]) * 1e3,  # imports torch, then init_process_group
                "load": (loaded["t"] - init["t"]) * 1e3,
                "first_step": (first["t"] - loaded["t"]) * 1e3,
                "resumed_step": loaded["step"],
            })
            print("torchrun kill %d: %s" % (k + 1, json.dumps(results[-1])), file=sys.stderr)
    finally:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
    return results


def med(rows, key):
    return statistics.median(r[key] for r in rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ringmasterd", required=True)
    ap.add_argument("--ringworker", required=True)
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="small")
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--every", type=int, default=5)
    args = ap.parse_args()
    shape = SHAPES[args.shape]
    workdir = tempfile.mkdtemp(prefix="rm-bench-recovery-", dir="/var/tmp")
    os.chmod(workdir, 0o755)
    a = ours(args, shape, os.path.join(workdir, "ours"))
    b = torch_side(args, shape, workdir)
    print("shape %s (%s), 2 ranks, checkpoint every %d steps, %d kills each; medians in ms" %
          (args.shape, json.dumps(shape), args.every, args.kills))
    print()
    print("| system | kill to first step after resuming | detection | respawn | start | rendezvous | load | first step |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    print("| ringmaster | **%.0f** | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |" % (
        med(a, "total"), med(a, "detection"), med(a, "respawn"), med(a, "start"), med(a, "rendezvous"),
        med(a, "load"), med(a, "first_step")))
    print("| torchrun (--monitor_interval 0.1) | **%.0f** | %.0f (with respawn) | | %.0f (imports, init_process_group) | | %.0f | %.0f |" % (
        med(b, "total"), med(b, "detect_respawn"), med(b, "start"), med(b, "load"), med(b, "first_step")))
    print()
    print("speed-up (torchrun total / ringmaster total): %.1fx" % (med(b, "total") / med(a, "total")))
    print("ringmaster runs: %s" % json.dumps(a))
    print("torchrun runs: %s" % json.dumps(b))
    print("raw: %s" % workdir)


if __name__ == "__main__":
    main()
