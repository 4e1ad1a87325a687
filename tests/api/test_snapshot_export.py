#!/usr/bin/python3
"""`ringctl export` checked with PyTorch as the reference.

snap_fixture writes a tiny GPT-2 (HF names and shapes) as snapshots under
ROOT/job-export/: step 7 (world size 3, intact), step 9 (world size 2, one
shard corrupted after commit) and an uncommitted step-00000011.tmp. This
script:

  1. reads every shard of step 7 with its own safetensors parser
     (struct + json + torch.frombuffer) and reassembles the flat buffers,
     checking each shard's header against the manifest;
  2. runs the real `ringctl export` as a user would: by job id under --root
     (must pick step 7, passing over the corrupt step 9 with a warning naming
     the file, never the .tmp), by --step, by folder, and the error cases;
  3. parses the exported file: exactly the manifest's tensors under their HF
     names and shapes, F32, metadata format "pt", contiguous offsets, an
     8-aligned header, every tensor bit-identical to the flat buffer slice;
  4. loads it into the project's PyTorch GPT-2 reference (GPT2Ref in
     tests/worker/engine/torch/test_torch_reference.py, LM head tied to wte)
     and runs a forward: logits (B, T, vocab), finite, and a loss near
     ln(vocab) as random GPT-2-scale weights give.

If Hugging Face transformers is installed, the file is also loaded into
GPT2LMHeadModel and its logits compared with GPT2Ref's (skipped otherwise).

Usage: test_snapshot_export.py --fixture PATH --ringctl PATH --reference DIR
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import torch

FAILED = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILED.append(what)


def read_safetensors(path):
    """Returns (metadata, {name: (dtype, shape, tensor)}, header_len), parsed by hand."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    assert 8 + n <= len(data), f"{path}: header length {n} past the end"
    header = json.loads(data[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    body = data[8 + n:]
    out = {}
    spans = []
    for name, info in header.items():
        b, e = info["data_offsets"]
        assert 0 <= b <= e <= len(body), f"{path}: {name} offsets {b},{e} out of range"
        assert info["dtype"] == "F32", f"{path}: {name} dtype {info['dtype']}"
        numel = math.prod(info["shape"]) if info["shape"] else 1
        assert e - b == 4 * numel, f"{path}: {name} size"
        t = torch.frombuffer(bytearray(body[b:e]), dtype=torch.float32) if e > b else torch.zeros(0)
        out[name] = (info["dtype"], list(info["shape"]), t.reshape(info["shape"]))
        spans.append((b, e))
    spans.sort()
    pos = 0
    for b, e in spans:
        assert b == pos, f"{path}: data not contiguous at {b} (expected {pos})"
        pos = e
    assert pos == len(body), f"{path}: {len(body) - pos} bytes after the last tensor"
    return meta, out, n


def run(cmd, env=None):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=60, env=env)
    return p.returncode, p.stdout, p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixture", required=True)
    ap.add_argument("--ringctl", required=True)
    ap.add_argument("--reference", required=True, help="folder of test_torch_reference.py")
    args = ap.parse_args()
    sys.path.insert(0, args.reference)
    from test_torch_reference import GPT2Ref  # the project's PyTorch GPT-2

    torch.manual_seed(0)
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory(prefix="snap-export-") as tmp:
        root = os.path.join(tmp, "ckpt")
        job = "job-export"
        rc, out, err = run([args.fixture, root, job])
        sys.stdout.write(out + err)
        if rc != 0:
            sys.exit(f"snap_fixture exited with {rc}")
        step7 = os.path.join(root, job, "step-00000007")

        # 1. The shards, read independently.
        with open(os.path.join(step7, "manifest.json")) as f:
            man = json.load(f)
        n = man["n_params"]
        flat = {k: torch.full((n,), float("nan")) for k in ("params", "adam_m", "adam_v")}
        covered = 0
        for fe in man["files"]:
            path = os.path.join(step7, fe["name"])
            meta, tensors, hlen = read_safetensors(path)
            check(hlen % 8 == 0 and os.path.getsize(path) == fe["bytes"],
                  f"{fe['name']}: 8-aligned header, size as in the manifest")
            check(meta.get("format") == "ringmaster-shard-1" and meta.get("rank") == str(fe["rank"])
                  and meta.get("lo") == str(fe["lo"]) and meta.get("count") == str(fe["count"])
                  and meta.get("step") == "7" and meta.get("world_size") == "3",
                  f"{fe['name']}: metadata agrees with the manifest")
            check(sorted(tensors) == ["adam_m", "adam_v", "params"], f"{fe['name']}: three tensors")
            for k, (_, shape, t) in tensors.items():
                check(shape == [fe["count"]], f"{fe['name']}: {k} has shape [{fe['count']}]")
                flat[k][fe["lo"]:fe["lo"] + fe["count"]] = t
            covered += fe["count"]
        check(covered == n and not torch.isnan(flat["params"]).any(),
              f"the shards cover all {n} parameters")

        # 2. ringctl export as a user runs it.
        out_path = os.path.join(tmp, "model.safetensors")
        env = dict(os.environ, RINGMASTER_CHECKPOINT_ROOT="/nonexistent-root")
        rc, out, err = run([args.ringctl, "export", job, "--root", root, "-o", out_path], env)
        sys.stdout.write(out + err)
        check(rc == 0, "export by job id exits 0")
        check("step 7" in out and f"{len(man['tensors'])} tensors" in out and f"{n} parameters" in out,
              "it prints the step, tensors and parameters it wrote")
        check("step 9" in err and "rank-1-of-2.safetensors" in err and "checksum" in err,
              "it warns that the corrupt step 9 was passed over, naming the file")
        check("step 11" not in out + err, "the uncommitted step 11 is never considered")

        env2 = dict(os.environ, RINGMASTER_CHECKPOINT_ROOT=root)
        out2 = os.path.join(tmp, "by-env.safetensors")
        rc, o, e = run([args.ringctl, "export", job, "--step", "7", "-o", out2], env2)
        check(rc == 0 and open(out2, "rb").read() == open(out_path, "rb").read(),
              "--step 7 with the root from RINGMASTER_CHECKPOINT_ROOT gives the same file")
        rc, o, e = run([args.ringctl, "--json", "export", step7, "-o", out2])
        check(rc == 0 and json.loads(o)["step"] == 7 and json.loads(o)["params"] == n,
              "export of a step folder path, --json summary")
        rc, o, e = run([args.ringctl, "export", os.path.join(root, job, "step-00000009"), "-o", out2])
        check(rc == 1 and "checksum mismatch" in e and "rank-1-of-2.safetensors" in e,
              f"a corrupt snapshot is refused naming the file: {e.strip()}")
        rc, o, e = run([args.ringctl, "export", job, "--root", root, "--step", "11", "-o", out2])
        check(rc == 1 and "no committed snapshot step-00000011" in e and "uncommitted" in e,
              f"--step of an uncommitted snapshot: {e.strip()}")
        rc, o, e = run([args.ringctl, "export", "no-such-job", "--root", root, "-o", out2])
        check(rc == 1 and "no such job folder" in e, f"a missing job: {e.strip()}")
        os.makedirs(os.path.join(root, "empty-job"))
        rc, o, e = run([args.ringctl, "export", "empty-job", "--root", root, "-o", out2])
        check(rc == 1 and "no committed snapshot" in e, f"a job without snapshots: {e.strip()}")
        rc, o, e = run([args.ringctl, "export", job, "--root", root])
        check(rc == 64 and "-o" in e, "a missing -o is a usage error")

        # 3. The exported file.
        meta, tensors, hlen = read_safetensors(out_path)
        check(meta.get("format") == "pt" and meta.get("ringmaster.step") == "7",
              f"export metadata: {meta}")
        cfg = json.loads(meta["ringmaster.model"])
        check(cfg == man["model"], "the model config travels in the metadata")
        check(hlen % 8 == 0, "the export's header is 8-aligned")
        want_names = [t["name"] for t in man["tensors"]]
        expected = {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"}
        for layer in range(cfg["n_layer"]):
            for s in ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                      "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                      "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"):
                expected.add(f"h.{layer}.{s}")
        check(list(tensors) == want_names and set(want_names) == expected,
              "the export holds exactly the HF GPT-2 names, in table order")
        C = cfg["n_embd"]
        check(tensors["h.0.attn.c_attn.weight"][1] == [C, 3 * C]
              and tensors["wte.weight"][1] == [cfg["vocab_size"], C],
              "HF Conv1D shapes: c_attn.weight is (C, 3C), wte is (V, C)")
        bad = []
        for t in man["tensors"]:
            dtype, shape, data = tensors[t["name"]]
            ref = flat["params"][t["offset"]:t["offset"] + data.numel()].reshape(t["shape"])
            if dtype != "F32" or shape != t["shape"] or not torch.equal(
                    data.view(torch.int32), ref.contiguous().view(torch.int32)):
                bad.append(t["name"])
        check(not bad, f"every tensor is bit-identical to the snapshot's params (bad: {bad})")

        # 4. It loads as a model.
        table = [{"name": k, "shape": v[1]} for k, v in tensors.items()]
        model = GPT2Ref(cfg, table, torch.float32)
        with torch.no_grad():
            for name, (_, _, data) in tensors.items():
                model.p(name).copy_(data)
        B, T, V = 2, cfg["seq_len"], cfg["vocab_size"]
        idx = torch.randint(0, V, (B, T))
        tgt = torch.randint(0, V, (B, T))
        with torch.no_grad():
            logits, loss = model(idx, tgt)
        check(tuple(logits.shape) == (B, T, V) and torch.isfinite(logits).all(),
              f"GPT2Ref forward: logits {tuple(logits.shape)}, finite")
        check(abs(loss.item() - math.log(V)) < 0.5,
              f"loss {loss.item():.4f} is near ln(vocab) = {math.log(V):.4f} for GPT-2-scale random weights")

        try:
            import transformers  # noqa: F401
        except ImportError:
            print("skip transformers GPT2LMHeadModel check: transformers is not installed")
        else:
            from transformers import GPT2Config, GPT2LMHeadModel
            hf = GPT2LMHeadModel(GPT2Config(n_layer=cfg["n_layer"], n_head=cfg["n_head"],
                                            n_embd=C, vocab_size=V, n_positions=cfg["seq_len"],
                                            activation_function="gelu_new", resid_pdrop=0.0,
                                            embd_pdrop=0.0, attn_pdrop=0.0))
            missing, unexpected = hf.transformer.load_state_dict(
                {k: v[2] for k, v in tensors.items()}, strict=False)
            hf.tie_weights()
            hf.eval()
            with torch.no_grad():
                hf_logits = hf(idx).logits
            check(not unexpected and all(k.endswith("attn.bias") or k.endswith("masked_bias")
                                         for k in missing),
                  f"GPT2LMHeadModel takes every tensor (missing {missing}, unexpected {unexpected})")
            check(torch.allclose(hf_logits, logits, atol=1e-4, rtol=1e-4),
                  "GPT2LMHeadModel's logits equal GPT2Ref's")

    if FAILED:
        print(f"{len(FAILED)} check(s) failed")
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
