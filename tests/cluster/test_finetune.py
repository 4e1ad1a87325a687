"""Pretrained weights out and in through the whole system (issue 23, item 4):
the real ringmasterd, one agent with two CPU slots, a checkpoint root and a
data root, and the real `ringctl export`.

  1. Job A, a tiny Llama (2 layers, width 32, 2 heads sharing 1 KV head)
     at 2 ranks, trains 5 steps; its last snapshot is step 5's. Its data
     repeats with a period of seq_len bytes, so every window, hence every
     batch, is the same: a step's loss is a function of the weights alone.
     Job A6 resumes A's snapshot for one more step (resume_from): its loss
     at step 6 is the loss of A's final weights, the loss A's next step
     would have reported.
  2. `ringctl export A -o DATA_ROOT/ft/a` writes model.safetensors
     and config.json (LlamaForCausalLM, the spec's shape). The exported
     tensors, in table order, are the snapshot's flat parameter buffer bit
     for bit (so the logits of any model loading them are the snapshot's).
  3. Job F: the same spec with "init": {"safetensors": "ft/a/model.safetensors"}.
     Its first loss (the exported weights on the repeated batch) equals A6's
     step 6 exactly, bit for bit: same weights, same batch, same world
     size, so the same fp32 operations in the same order. (A step reports
     the loss of the weights it starts from, so a job's own last loss is
     that of the weights before its last update; comparing with A6 checks
     the export of A's final weights.) Rank 0's log says
     "init: 21 tensors from ft/a/model.safetensors".
  4. The export split into a sharded set (two files and a
     model.safetensors.index.json, written here), loaded by a ZeRO-3 job
     whose ranks each read only their range of the flat buffer: its first
     loss is F's (the same weights; bitwise, as the first forward pass under
     ZeRO-3 gathers the same floats).
  5. `ringctl export --dtype bf16`: every tensor BF16, each value the fp32
     weight rounded to nearest even (checked against the F32 export), and
     config.json's torch_dtype "bfloat16"; a job starts from it, its first
     loss within 1% of F's (bf16 keeps 8 bits of mantissa: the weights move
     by up to 2^-9 relative, the loss of this model by far less than 1%).
  6. A job of another width with the same init fails, its reason naming the
     first tensor whose shape differs and both shapes; no step runs.
"""
import json
import os
import struct
import subprocess

from cluster import check, log, run, tiny_spec, wait_workers

SEQ = 32


def spec(name, steps):
    s = tiny_spec(name, world_size=2, batch_size=2, steps=steps, seed=3, arch="llama")
    s["data"] = {"train": "tiny/periodic.txt", "format": "text"}
    s["checkpoint"] = {"every_steps": 5, "keep_last": 3}
    return s


def losses(d, job_id):
    doc = d.json("GET", "/v1/jobs/%s/metrics?limit=1000" % job_id)
    return {int(r["step"]): r["loss"] for r in doc["metrics"] if r.get("loss") is not None}


def safetensors_tensors(path):
    """[(name, dtype, shape, bytes)] in file order (offsets)."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    items = [(k, v) for k, v in header.items() if k != "__metadata__"]
    items.sort(key=lambda kv: kv[1]["data_offsets"][0])
    return [(k, v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in items]


def write_safetensors(path, tensors):
    """tensors: [(name, dtype, shape, bytes)]."""
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(t[3] for t in tensors))


def main(c, _args):
    d = c.start_daemon()
    ck = os.path.join(c.workdir, "checkpoints")
    agent = c.start_agent("n1", devices="cpu:2", extra_args=["--checkpoint-root", ck])
    wait_workers(d, ["n1"])
    line = ("The ring master trains a Llama. " * 2)[:SEQ]
    with open(os.path.join(c.data_root, "tiny", "periodic.txt"), "w") as f:
        f.write(line * 400)

    a = d.submit(spec("ft-a", 5))["id"]
    d.wait_state(a, {"succeeded"}, timeout=300)
    la = losses(d, a)
    check(sorted(la) == list(range(1, 6)), "A's steps: %s" % sorted(la))
    check(la[5] < la[1], "A's loss did not fall: %r" % la)
    a6s = spec("ft-a6", 6)
    a6s["resume_from"] = {"job": a, "step": 5}
    a6 = d.submit(a6s)["id"]
    d.wait_state(a6, {"succeeded"}, timeout=300)
    la[6] = losses(d, a6).get(6)

    cps = [cp["step"] for cp in d.json("GET", "/v1/jobs/%s/checkpoints" % a)["checkpoints"]]
    log("A's checkpoints: %r; on disk %r" % (cps, sorted(os.listdir(os.path.join(ck, a)))))
    out = os.path.join(c.data_root, "ft", "a")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    r = subprocess.run([c.bins["ringctl"], "export", a, "-o", out], env=d.ctl_env(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    log(r.stdout.strip())
    check(r.returncode == 0, "ringctl export: %s" % r.stdout)
    # -o naming a file: a Llama export is a folder
    r2 = subprocess.run([c.bins["ringctl"], "export", a, "-o", os.path.join(out, "config.json")],
                        env=d.ctl_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                        timeout=60)
    check(r2.returncode != 0 and "is not a folder: a Llama export is a folder" in r2.stdout,
          "export onto a file: rc %d, %r" % (r2.returncode, r2.stdout))
    with open(os.path.join(out, "config.json")) as f:
        cfg = json.load(f)
    want = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
            "intermediate_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1,
            "num_hidden_layers": 2, "vocab_size": 256, "max_position_embeddings": SEQ,
            "rope_theta": 10000.0, "rope_scaling": None, "rms_norm_eps": 1e-5,
            "tie_word_embeddings": False, "hidden_act": "silu", "attention_bias": False,
            "mlp_bias": False, "torch_dtype": "float32"}
    for k, v in want.items():
        check(cfg.get(k) == v, "config.json %s: %r, want %r" % (k, cfg.get(k), v))

    # the export is the snapshot's flat buffer, bit for bit
    tensors = safetensors_tensors(os.path.join(out, "model.safetensors"))
    check(len(tensors) == 21 and tensors[0][0] == "model.embed_tokens.weight" and
          tensors[-1][0] == "lm_head.weight" and all(t[1] == "F32" for t in tensors),
          "exported tensors: %r" % [(t[0], t[1], t[2]) for t in tensors])
    flat = b"".join(t[3] for t in tensors)
    snap = os.path.join(ck, a, "step-00000005")
    shards = b"".join(t[3] for r_ in range(2)
                      for t in safetensors_tensors(os.path.join(snap, "rank-%d-of-2.safetensors" % r_))
                      if t[0] == "params")
    check(flat == shards, "the export differs from the snapshot's parameters (%d vs %d bytes)" %
          (len(flat), len(shards)))
    log("export: %d tensors, %d floats, bitwise the snapshot's parameters" % (len(tensors), len(flat) // 4))

    fs = spec("ft-f", 3)
    fs["init"] = {"safetensors": "ft/a/model.safetensors"}
    f_id = d.submit(fs)["id"]
    check(d.job(f_id)["spec"].get("init") == fs["init"], "F's stored spec: %r" % d.job(f_id)["spec"])
    d.wait_state(f_id, {"succeeded"}, timeout=300)
    lf = losses(d, f_id)
    log("A's losses %s, A6's step 6 %.9g" % (" ".join("%.9g" % la[s] for s in range(1, 6)), la[6]))
    log("F's losses %s" % " ".join("%.9g" % lf[s] for s in sorted(lf)))
    check(lf.get(1) == la[6], "F's first loss %r, A6's step 6 %r: not bitwise equal" % (lf.get(1), la[6]))
    check(any("init: 21 tensors from ft/a/model.safetensors" in ln
              for ln in agent.logtext(400000).splitlines()), "no 'init: 21 tensors' line in the agent's log")
    log("F's first loss equals A6's step 6 (A's final weights) bit for bit: %.9g" % la[6])

    # a sharded set, read range by range by ZeRO-3 ranks
    sharded = os.path.join(c.data_root, "ft", "a-sharded")
    os.makedirs(sharded)
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    half = len(tensors) // 2
    write_safetensors(os.path.join(sharded, names[0]), tensors[:half])
    write_safetensors(os.path.join(sharded, names[1]), tensors[half:])
    with open(os.path.join(sharded, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": len(flat)},
                   "weight_map": {t[0]: names[i >= half] for i, t in enumerate(tensors)}}, f)
    zs = spec("ft-zero3", 2)
    zs["parallel"]["sharding"] = "zero3"
    zs["init"] = {"safetensors": "ft/a-sharded/model.safetensors.index.json"}
    z_id = d.submit(zs)["id"]
    d.wait_state(z_id, {"succeeded"}, timeout=300)
    lz = losses(d, z_id)
    check(lz.get(1) == lf[1], "ZeRO-3 from the sharded set: first loss %r, F's %r" % (lz.get(1), lf[1]))
    check(any("init: 21 tensors from ft/a-sharded/model.safetensors.index.json (2 files)" in ln
              for ln in agent.logtext(400000).splitlines()), "no 'init: ... (2 files)' line in the agent's log")
    log("ZeRO-3 from a 2-file sharded set: first loss %.9g, F's bit for bit" % lz[1])

    # bf16 export, and a job from it
    out16 = os.path.join(c.data_root, "ft", "a-bf16")
    r = subprocess.run([c.bins["ringctl"], "export", a, "--dtype", "bf16", "-o", out16], env=d.ctl_env(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    check(r.returncode == 0, "ringctl export --dtype bf16: %s" % r.stdout)
    t16 = safetensors_tensors(os.path.join(out16, "model.safetensors"))
    check([t[0] for t in t16] == [t[0] for t in tensors] and all(t[1] == "BF16" for t in t16),
          "bf16 export: %r" % [(t[0], t[1]) for t in t16])
    f32 = struct.unpack("<%dI" % (len(flat) // 4), flat)
    want16 = bytes(b"".join(struct.pack("<H", ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF)
                            for u in f32))
    check(b"".join(t[3] for t in t16) == want16, "bf16 export is not the fp32 weights rounded to nearest even")
    with open(os.path.join(out16, "config.json")) as f:
        check(json.load(f).get("torch_dtype") == "bfloat16", "bf16 config.json's torch_dtype")
    hs = spec("ft-from-bf16", 2)
    hs["init"] = {"safetensors": "ft/a-bf16/model.safetensors"}
    h_id = d.submit(hs)["id"]
    d.wait_state(h_id, {"succeeded"}, timeout=300)
    lh = losses(d, h_id)
    check(lh.get(1) is not None and abs(lh[1] - lf[1]) <= 0.01 * lf[1],
          "from the bf16 export: first loss %r, F's %r (more than 1%% apart)" % (lh.get(1), lf[1]))
    log("from the bf16 export: first loss %.9g (F's %.9g, from F32)" % (lh[1], lf[1]))

    bad = spec("ft-wrong-width", 3)
    bad["model"]["n_embd"] = 64
    bad["model"]["ffn_dim"] = 128
    bad["init"] = fs["init"]
    b_id = d.submit(bad)["id"]
    failed = d.wait_state(b_id, {"failed"}, timeout=120)
    reason = failed.get("state_reason") or ""
    text = reason + agent.logtext(400000)
    check("tensor \"model.embed_tokens.weight\" in 'ft/a/model.safetensors' has shape (256, 32) but the"
          " model's is (256, 64)" in text, "wrong width: reason %r" % reason)
    check(not losses(d, b_id), "the job with a mismatching init trained")
    log("wrong width: %s" % reason)


if __name__ == "__main__":
    run(main)
