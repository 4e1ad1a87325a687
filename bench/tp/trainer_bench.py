#!/usr/bin/python3
"""bench/tp/trainer_bench.py: tensor parallelism through the whole system
(the real ringmasterd, one agent, the ranks it spawns; issue 24), beside
bench/tp/engine.sh's engine-level figures.

  step    the same GPT-2 job (one global batch) as t = 2 (one tensor-parallel
          pair) and as dp = 2 (two data-parallel ranks), alternating, on the
          agent's same 2 CPU slots in the same run: the median step time of
          each (metrics rows' ms, the first steps left out as warm-up).
  memory  the job at t = 1, 2 and 4 (one rank per slot, 4 slots): what each
          rank reports holding (the job's ranks[].memory: parameters,
          gradients, optimizer state, activations), per rank.

Prints one JSON line per measurement and a Markdown table at the end.
  bench/tp/trainer_bench.py --build build [--steps 30] [--rounds 2]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "cluster"))
from cluster import Cluster, tiny_spec, wait_workers  # noqa: E402

MODEL = {"n_layer": 4, "n_head": 8, "n_embd": 256, "vocab_size": 256, "seq_len": 256}
GLOBAL_BATCH = 8
WARMUP = 5


def spec(name, world_size, tensor, steps):
    s = tiny_spec(name, world_size, GLOBAL_BATCH // (world_size // tensor), steps, seed=1, tensor=tensor)
    s["model"] = dict(MODEL)
    s["train"]["warmup_steps"] = 2
    return s


def step_ms(d, job_id):
    rows = d.json("GET", "/v1/jobs/%s/metrics?limit=1000" % job_id)["metrics"]
    ms = [r["ms"] for r in rows if r.get("ms") is not None and int(r["step"]) > WARMUP]
    return statistics.median(ms), len(ms)


def memory(d, job_id):
    ranks = d.job(job_id).get("ranks") or []
    return [r.get("memory") for r in ranks]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    b = os.path.abspath(a.build)
    bins = {"ringmasterd": os.path.join(b, "coordinatord", "ringmasterd"),
            "ringworker": os.path.join(b, "worker", "ringworker"),
            "ringctl": os.path.join(b, "clients", "ringctl")}
    workdir = tempfile.mkdtemp(prefix="rm-tp-bench-")
    c = Cluster(bins, workdir)
    out = []
    try:
        d = c.start_daemon()
        c.start_agent("b1", devices="cpu:2")
        wait_workers(d, ["b1"])
        times = {"t2": [], "dp2": []}
        for r in range(a.rounds):
            for name, tensor in (("t2", 2), ("dp2", 1)):
                jid = d.submit(spec("bench-%s-%d" % (name, r), 2, tensor, a.steps))["id"]
                d.wait_state(jid, {"succeeded"}, timeout=1800)
                ms, n = step_ms(d, jid)
                times[name].append(ms)
                line = {"bench": "tp_step", "config": name, "round": r, "median_ms": round(ms, 2),
                        "steps": n, "model": MODEL, "global_batch": GLOBAL_BATCH}
                print(json.dumps(line), flush=True)
                out.append(line)
        for a_ in c.agents:
            a_.stop()
        c.agents = []
        c.start_agent("b2", devices="cpu:4")
        wait_workers(d, ["b2"])
        mem = {}
        for t in (1, 2, 4):
            jid = d.submit(spec("bench-mem-t%d" % t, t, t, 3))["id"]
            d.wait_state(jid, {"succeeded"}, timeout=1800)
            mem[t] = memory(d, jid)
            line = {"bench": "tp_memory", "tensor": t, "per_rank": mem[t], "model": MODEL,
                    "batch": GLOBAL_BATCH}
            print(json.dumps(line), flush=True)
        print("\n| config | median step ms per round |")
        print("| --- | --- |")
        for k, v in times.items():
            print("| %s | %s |" % (k, ", ".join("%.1f" % x for x in v)))
        print("\n| t | params MiB | grads MiB | optimizer MiB | activations MiB (rank 0) |")
        print("| --- | --- | --- | --- | --- |")
        for t, ranks in mem.items():
            m = ranks[0] or {}
            print("| %d | %.2f | %.2f | %.2f | %.2f |" % (
                t, m.get("params_bytes", 0) / 2**20, m.get("grads_bytes", 0) / 2**20,
                m.get("optim_bytes", 0) / 2**20, m.get("activations_bytes", 0) / 2**20))
    finally:
        c.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
