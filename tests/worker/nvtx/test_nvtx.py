#!/usr/bin/python3
"""NVTX ranges from `ringworker train` (worker/trace.c, builds with CUDA).

usage: test_nvtx.py --ringworker PATH --inject LIB

Runs a tiny 3-step job (validation at steps 2 and 3) twice: plainly, and with
NVTX_INJECTION64_PATH naming nvtx_inject (the way Nsight Systems attaches),
which logs every nvtxRangePushA / nvtxRangePop. Checks that every push is
popped, that the top-level ranges are exactly "step 1" to "step 3" in order,
that each holds the phases of a step (zero_grad, data, forward, backward,
clip, optimizer; eval where validation runs) one level deep and nothing
deeper, and that the two runs' losses, gradient norms and validation losses
are the same bits.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

PHASES = {"zero_grad", "data", "forward", "backward", "grad_reduce", "clip", "optimizer", "param_gather",
          "eval", "snapshot"}


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def text(n, seed):
    words = "the ring master trains a small model on bytes of text and every rank sums".split()
    out, x = [], seed
    while sum(len(w) + 1 for w in out) < n:
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        out.append(words[(x >> 8) % len(words)])
    return " ".join(out)


def train(ringworker, folder, env_extra):
    env = dict(os.environ, OMP_NUM_THREADS="2", **env_extra)
    r = subprocess.run([ringworker, "train", "--spec", os.path.join(folder, "spec.json"), "--data-root", folder,
                        "--json"], capture_output=True, text=True, timeout=120, env=env)
    if r.returncode != 0:
        fail("ringworker train exited %d:\n%s" % (r.returncode, r.stderr))
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    return [(x["step"], x["loss"], x["grad_norm"], x.get("val_loss")) for x in rows]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ringworker", required=True)
    ap.add_argument("--inject", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "train.txt"), "w") as f:
            f.write(text(20000, 1))
        with open(os.path.join(d, "val.txt"), "w") as f:
            f.write(text(4000, 2))
        spec = {"name": "nvtx", "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 256,
                                          "seq_len": 32},
                "data": {"train": "train.txt", "val": "val.txt", "format": "text"},
                "train": {"steps": 3, "batch_size": 4, "warmup_steps": 1, "eval_every": 2, "eval_batches": 2}}
        with open(os.path.join(d, "spec.json"), "w") as f:
            json.dump(spec, f)
        log = os.path.join(d, "nvtx.log")
        plain = train(args.ringworker, d, {})
        if os.path.exists(log):
            fail("ranges logged without the injection library")
        traced = train(args.ringworker, d, {"NVTX_INJECTION64_PATH": os.path.abspath(args.inject),
                                            "NVTX_TEST_LOG": log})
        if plain != traced:
            fail("NVTX changed the results:\n%r\n%r" % (plain, traced))
        if not os.path.exists(log):
            fail("the injection library was not loaded: no NVTX call reached it")
        with open(log) as f:
            lines = f.read().splitlines()
    stack, steps, phases = [], [], {}
    for line in lines:
        if line == "pop":
            if not stack:
                fail("pop without a push")
            stack.pop()
            continue
        if not line.startswith("push "):
            fail("bad log line %r" % line)
        name = line[5:]
        if not stack:
            steps.append(name)
            phases[name] = []
        elif len(stack) == 1:
            if name not in PHASES:
                fail("unknown phase %r in %s" % (name, stack[0]))
            phases[stack[0]].append(name)
        else:
            fail("%r nested in %r: phases do not nest" % (name, stack))
        stack.append(name)
    if stack:
        fail("ranges left open: %r" % stack)
    if steps != ["step 1", "step 2", "step 3"]:
        fail("step ranges %r" % steps)
    for s, names in phases.items():
        want = {"zero_grad", "data", "forward", "backward", "clip", "optimizer"}
        if s in ("step 2", "step 3"):
            want.add("eval")
        if set(names) != want:
            fail("%s has phases %r, want %r" % (s, names, sorted(want)))
    print("ok: %d ranges, steps %s, step 2: %s" % (len(lines) // 2, steps, phases["step 2"]))


if __name__ == "__main__":
    main()
