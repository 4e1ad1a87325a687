"""Rendezvous latency: ringmaster against torchrun, same process counts, same
run. Driven by bench/rendezvous/run.sh; prints a markdown table.

ringmaster: a ringmasterd and one `ringworker agent --devices cpu:N` are up
(as on a cluster); a job of N ranks (tiny GPT-2, 1 step) is submitted. The
clock starts when the coordinator places it (its "scheduled" event) and stops
when the last rank has its Gloo communicator (each rank prints
"communicator ready at <unix time>" to stderr, which its agent logs). So it
covers fork/exec of the ranks, JOIN, the key-value rendezvous through the
coordinator and Gloo's full-mesh connect.

torchrun: `python3 -m torch.distributed.run --nproc_per_node N --rdzv_backend
c10d ...` of a script that records the time after
dist.init_process_group('gloo') and a barrier; the clock starts just before
torchrun is launched (torchrun has no "placed" moment: launching it is the
placement). That covers torchrun's own start, its c10d rendezvous, the
workers' start (Python + torch import) and Gloo's connect.

Medians of REPEATS runs per size. Standard library only (+ torch for the
torchrun side), /usr/bin/python3.
"""
import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "cluster"))
from cluster import Agent, Daemon, join_args, make_text_data, tiny_spec, free_port, wait_workers, wait_no_ranks  # noqa: E402

TORCH_SCRIPT = r"""
import os, sys, time
import torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
t = time.time()
with open(os.path.join(sys.argv[1], "rank-%s" % os.environ["RANK"]), "w") as f:
    f.write("%.6f\n" % t)
dist.destroy_process_group()
"""

READY = re.compile(r"^\[rank ([^/]+)/(\d+)/(\d+)\] ringworker rank: communicator ready at ([0-9.]+)")


def rfc3339(s):
    return datetime.datetime.strptime(s.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def ours_once(d, agent, n, seq):
    spec = tiny_spec("rdzv-%d-%d" % (n, seq), n, 1, 1)
    spec["train"]["warmup_steps"] = 0
    job_id = d.submit(spec)["id"]
    d.wait_state(job_id, {"succeeded"}, timeout=300)
    placed = [rfc3339(e["at"]) for e in d.events(job_id) if e.get("to") == "scheduled"]
    if not placed:
        raise RuntimeError("job %s has no 'scheduled' event" % job_id)
    ready = {}
    with open(agent.log_path, errors="replace") as f:
        for line in f:
            m = READY.match(line)
            if m and m.group(1) == job_id:
                ready[int(m.group(3))] = float(m.group(4))
    if len(ready) != n:
        raise RuntimeError("job %s: %d of %d ranks logged their communicator" % (job_id, len(ready), n))
    wait_no_ranks(job_id, 60)
    return max(ready.values()) - placed[0]


def torch_once(n, workdir, seq, py):
    out = os.path.join(workdir, "torch-%d-%d" % (n, seq))
    logs = os.path.join(out, "logs")
    os.makedirs(logs)
    script = os.path.join(workdir, "torch_rdzv.py")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    port = free_port()
    t0 = time.time()
    p = subprocess.run([py, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", str(n),
                        "--rdzv_backend", "c10d", "--rdzv_endpoint", "127.0.0.1:%d" % port,
                        "--redirects", "1", "--tee", "2", "--log_dir", logs, script, out],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=600)
    if p.returncode != 0:
        raise RuntimeError("torchrun failed (%d):\n%s" % (p.returncode, p.stdout.decode()[-3000:]))
    times = []
    for r in range(n):
        with open(os.path.join(out, "rank-%d" % r)) as f:
            times.append(float(f.read()))
    return max(times) - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ringmasterd", required=True)
    ap.add_argument("--ringworker", required=True)
    ap.add_argument("--sizes", default="2,8,32")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--python", default="/usr/bin/python3", help="the Python with torch for torchrun")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    workdir = tempfile.mkdtemp(prefix="rm-bench-rdzv-")
    with open(os.path.join(workdir, "torch_rdzv.py"), "w") as f:
        f.write(TORCH_SCRIPT)
    data_root = os.path.join(workdir, "data")
    make_text_data(os.path.join(data_root, "tiny"))
    d = Daemon(os.path.abspath(args.ringmasterd), workdir)
    agent = None
    rows = []
    try:
        d.start()
        agent = Agent(os.path.abspath(args.ringworker), workdir, d.endpoint, "bench",
                      "cpu:%d" % max(sizes), data_root, join_args(d, workdir, "bench")).start()
        wait_workers(d, ["bench"])
        ours_one = ours_once(d, agent, 2, 0)  # warm the page cache; not counted
        print("warm-up (2 ranks): %.1f ms" % (ours_one * 1e3), file=sys.stderr)
        for n in sizes:
            ours, theirs = [], []
            for i in range(args.repeats):
                ours.append(ours_once(d, agent, n, i + 1))
                theirs.append(torch_once(n, workdir, i, args.python))
                print("n=%d run %d: ringmaster %.1f ms, torchrun %.1f ms" %
                      (n, i + 1, ours[-1] * 1e3, theirs[-1] * 1e3), file=sys.stderr)
            rows.append((n, statistics.median(ours), statistics.median(theirs), ours, theirs))
    finally:
        if agent:
            agent.stop()
        d.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    print("| ranks | ringmaster: placed to all communicators (median) | torchrun: launch to all "
          "init_process_group + barrier (median) | speed-up | runs (ours / torchrun, ms) |")
    print("| ---: | ---: | ---: | ---: | --- |")
    for n, o, t, os_, ts in rows:
        print("| %d | %.1f ms | %.1f ms | %.0fx | %s / %s |" %
              (n, o * 1e3, t * 1e3, t / o, ", ".join("%.0f" % (x * 1e3) for x in os_),
               ", ".join("%.0f" % (x * 1e3) for x in ts)))
    print()
    print("load average after the run: %s" % " ".join("%.2f" % x for x in os.getloadavg()))
    print(json.dumps({"sizes": sizes, "repeats": args.repeats}), file=sys.stderr)


if __name__ == "__main__":
    main()
