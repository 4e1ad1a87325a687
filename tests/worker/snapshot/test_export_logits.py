#!/usr/bin/python3
"""A trained snapshot, exported, gives the engine's logits in PyTorch.

  1. `ringworker train --steps 6 --checkpoint-dir DIR` trains a tiny GPT-2
     on a small text corpus, with a snapshot every 3 steps: the weights of
     DIR/step-00000006 are trained, not the initial ones.
  2. snap_logits (a C program linking the engine and the snapshot format)
     loads that snapshot into the engine and writes its logits on a fixed
     batch, with the token ids (layout at the top of snap_logits.c).
  3. `ringctl export DIR/step-00000006 -o model.safetensors`, as a user runs
     it; the file is parsed with tests/api/test_snapshot_export.py's reader
     (struct + json + torch.frombuffer, no safetensors package) and loaded
     into the project's PyTorch GPT-2 (GPT2Ref, tests/worker/engine/torch),
     which takes the HF Conv1D layout (in, out) as it is.
  4. GPT2Ref's logits on the same token ids, in float32 as exported and in
     float64, are compared with the engine's.

Tolerance: max |engine - torch| <= 1e-4 * max |torch logit|, elementwise
over all B*T*V logits. Both sides are fp32 with different summation orders
(oneDNN's GEMMs against PyTorch's), so the expected difference is a few fp32
ulps of the largest logit, times the depth (~1e-6 relative); 1e-4 leaves
room without letting a wrong layout, transpose or missing bias through (those
differ by O(1)). The argmax token must agree at all but 1 in 16 positions
(near ties may flip).

Usage: test_export_logits.py --ringworker PATH --ringctl PATH
       --snap-logits PATH --reference DIR --api-tests DIR
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import torch

TOLERANCE = 1e-4  # max abs difference, relative to max |logit|
STEPS = 6

FAILED = []

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A ring of workers trains a small language model.",
    "Snapshots are written every few steps and exported at the end.",
    "Every tensor keeps its Hugging Face name and shape.",
    "The coordinator hands out jobs and the workers report back.",
]


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILED.append(what)


def corpus(n_bytes, seed):
    out, x, size = [], seed, 0
    while size < n_bytes:
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        s = SENTENCES[(x >> 8) % len(SENTENCES)]
        out.append(s + ("\n" if (x >> 4) % 3 == 0 else " "))
        size += len(out[-1])
    return "".join(out)[:n_bytes]


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=90, env=dict(os.environ, OMP_NUM_THREADS="2"))
    sys.stdout.write(p.stdout + p.stderr)
    if p.returncode != 0:
        sys.exit(f"{cmd[0]} exited with {p.returncode}")
    return p


def read_logits(path):
    """snap_logits' OUT.bin: (tokens (B, T) int64, logits (B, T, V) float32)."""
    with open(path, "rb") as f:
        data = f.read()
    magic, version, B, T, V = struct.unpack("<8sIiii", data[:24])
    if magic != b"RMLOGIT1" or version != 1:
        sys.exit(f"{path}: magic {magic!r} version {version}, expected RMLOGIT1 1: rebuild snap_logits")
    n_tok, n_log = B * T, B * T * V
    if len(data) != 24 + 4 * n_tok + 4 * n_log:
        sys.exit(f"{path}: {len(data)} bytes, expected {24 + 4 * n_tok + 4 * n_log} for B={B} T={T} V={V}")
    tokens = torch.frombuffer(bytearray(data[24:24 + 4 * n_tok]), dtype=torch.int32)
    logits = torch.frombuffer(bytearray(data[24 + 4 * n_tok:]), dtype=torch.float32)
    return tokens.reshape(B, T).long(), logits.reshape(B, T, V)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ringworker", required=True)
    ap.add_argument("--ringctl", required=True)
    ap.add_argument("--snap-logits", required=True)
    ap.add_argument("--reference", required=True, help="folder of test_torch_reference.py")
    ap.add_argument("--api-tests", required=True, help="folder of test_snapshot_export.py")
    args = ap.parse_args()
    sys.path.insert(0, args.reference)
    sys.path.insert(0, args.api_tests)
    from test_torch_reference import GPT2Ref  # the project's PyTorch GPT-2
    from test_snapshot_export import read_safetensors  # the hand-written reader

    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory(prefix="export-logits-") as tmp:
        # 1. Train, with snapshots.
        with open(os.path.join(tmp, "train.txt"), "w") as f:
            f.write(corpus(20000, 1))
        with open(os.path.join(tmp, "val.txt"), "w") as f:
            f.write(corpus(4000, 2))
        spec = {
            "name": "export-logits",
            "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 256, "seq_len": 32},
            "data": {"train": "train.txt", "val": "val.txt", "format": "text"},
            "train": {"steps": STEPS, "batch_size": 4, "lr": 3e-3, "warmup_steps": 2,
                      "min_lr": 3e-4, "eval_every": 3, "eval_batches": 2, "seed": 7},
            "checkpoint": {"every_steps": 3, "keep_last": 2},
        }
        spec_path = os.path.join(tmp, "spec.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        ck = os.path.join(tmp, "ck")
        run([args.ringworker, "train", "--spec", spec_path, "--data-root", tmp,
             "--steps", str(STEPS), "--checkpoint-dir", ck])
        snaps = sorted(os.listdir(ck))
        check(snaps == ["step-00000003", "step-00000006"], f"snapshots of steps 3 and 6: {snaps}")
        step_dir = os.path.join(ck, f"step-{STEPS:08d}")

        # 2. The engine's logits for that snapshot.
        out_bin = os.path.join(tmp, "logits.bin")
        run([args.snap_logits, step_dir, out_bin])
        tokens, want = read_logits(out_bin)
        B, T, V = want.shape
        check(V == spec["model"]["vocab_size"] and T == 16 and B == 2,
              f"snap_logits wrote (B, T, V) = {(B, T, V)}")
        check(bool(torch.isfinite(want).all()), "the engine's logits are finite")

        # 3. Export and load into GPT2Ref.
        st_path = os.path.join(tmp, "model.safetensors")
        run([args.ringctl, "export", step_dir, "-o", st_path])
        meta, tensors, _ = read_safetensors(st_path)
        cfg = json.loads(meta["ringmaster.model"])
        check(meta.get("ringmaster.step") == str(STEPS), f"export of step {meta.get('ringmaster.step')}")
        check(all(cfg[k] == v for k, v in spec["model"].items()), f"model config {cfg}")

        # Trained, not initial: the step-3 and step-6 weights differ.
        early = os.path.join(tmp, "early.safetensors")
        run([args.ringctl, "export", os.path.join(ck, "step-00000003"), "-o", early])
        _, early_tensors, _ = read_safetensors(early)
        moved = max((tensors[k][2] - early_tensors[k][2]).abs().max().item() for k in tensors)
        check(moved > 1e-4, f"the weights moved between steps 3 and 6 (max change {moved:.3e})")

        table = [{"name": k, "shape": v[1]} for k, v in tensors.items()]
        targets = torch.zeros(B, T, dtype=torch.long)  # GPT2Ref wants targets; the loss is unused
        got = {}
        for dtype in (torch.float32, torch.float64):
            model = GPT2Ref(cfg, table, dtype)
            with torch.no_grad():
                for name, (_, _, data) in tensors.items():
                    # HF Conv1D (in, out), as GPT2Ref computes x @ W: no transpose
                    model.p(name).copy_(data.to(dtype))
                logits, _ = model(tokens, targets)
            got[dtype] = logits

        # 4. Compare.
        for dtype, name in ((torch.float32, "float32"), (torch.float64, "float64")):
            ref = got[dtype].double()
            diff = (want.double() - ref).abs()
            scale = ref.abs().max().item()
            worst = diff.max().item()
            where = [int(i) for i in torch.nonzero(diff == worst)[0]]
            print(f"PyTorch {name}: max |logit| {scale:.4f}, max |engine - torch| {worst:.3e} "
                  f"at (b, t, v) = {tuple(where)}, relative {worst / scale:.3e}, "
                  f"mean {diff.mean().item():.3e}")
            check(worst <= TOLERANCE * scale,
                  f"engine vs PyTorch {name}: {worst:.3e} <= {TOLERANCE:.0e} * {scale:.4f}")
            agree = (want.argmax(-1) == ref.argmax(-1)).sum().item()
            check(agree >= B * T - max(1, B * T // 16),
                  f"argmax agrees at {agree} of {B * T} positions ({name})")

    if FAILED:
        print(f"{len(FAILED)} check(s) failed")
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
