#!/usr/bin/python3
"""bench/tp/zero_memory.py: 2D parallelism's ZeRO stages through the whole
system (the real ringmasterd, one agent with 4 CPU slots, the ranks it
spawns): the same GPT-2 job (trainer_bench.py's model, one global batch) at
t = 2 x dp = 2 with parallel.sharding none, zero1, zero2 and zero3, a few
steps each; what every rank reports holding (the job's ranks[].memory:
parameters, gradients, optimizer state, activations) and the last loss.

Prints one JSON line per job and a Markdown table (the largest rank's
bytes) at the end.
  bench/tp/zero_memory.py --build build [--steps 3] [--arch gpt2|llama] [--n-layer 4]
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "cluster"))
sys.path.insert(0, HERE)
from cluster import Cluster, model_section, wait_workers  # noqa: E402
from trainer_bench import MODEL, spec  # noqa: E402

KEYS = ("params_bytes", "grads_bytes", "optim_bytes", "activations_bytes")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--arch", default="gpt2", choices=("gpt2", "llama"))
    p.add_argument("--n-layer", type=int, default=MODEL["n_layer"])
    a = p.parse_args()
    b = os.path.abspath(a.build)
    bins = {"ringmasterd": os.path.join(b, "coordinatord", "ringmasterd"),
            "ringworker": os.path.join(b, "worker", "ringworker"),
            "ringctl": os.path.join(b, "clients", "ringctl")}
    workdir = tempfile.mkdtemp(prefix="rm-tp-zero-bench-")
    c = Cluster(bins, workdir)
    rows = {}
    try:
        d = c.start_daemon()
        c.start_agent("b1", devices="cpu:4")
        wait_workers(d, ["b1"])
        for sharding in ("none", "zero1", "zero2", "zero3"):
            s = spec("bench-tp-%s" % sharding, 4, 2, a.steps)
            s["model"] = model_section(a.arch, a.n_layer, MODEL["n_head"], MODEL["n_embd"], MODEL["seq_len"])
            s["parallel"]["sharding"] = sharding
            jid = d.submit(s)["id"]
            d.wait_state(jid, {"succeeded"}, timeout=1800)
            ranks = [r.get("memory") or {} for r in d.job(jid).get("ranks") or []]
            met = d.json("GET", "/v1/jobs/%s/metrics?limit=1000" % jid)["metrics"]
            loss = [r["loss"] for r in met if int(r["step"]) == a.steps]
            rows[sharding] = {k: max(r.get(k, 0) for r in ranks) for k in KEYS}
            line = {"bench": "tp_zero_memory", "arch": a.arch, "tensor": 2, "data": 2, "sharding": sharding,
                    "per_rank": ranks, "loss_last": loss[0] if loss else None, "model": s["model"]}
            print(json.dumps(line), flush=True)
        print("\n| sharding (t=2 x dp=2) | params MiB | grads MiB | optimizer MiB | activations MiB |"
              " params+grads+optimizer MiB |")
        print("| --- | --- | --- | --- | --- | --- |")
        for sh, m in rows.items():
            print("| %s | %.3f | %.3f | %.3f | %.3f | %.3f |" % (
                sh, *(m[k] / 2**20 for k in KEYS), sum(m[k] for k in KEYS[:3]) / 2**20))
    finally:
        c.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
