#!/usr/bin/python3
"""The CPU engine (GPT-2 and Llama) checked against a PyTorch reference (llm.c's check_tensor).

torch_dump (a C program linking the engine) builds a tiny model from a seed,
writes its flat parameters with their tensor table, a batch, the logits, the
loss and every gradient of one forward+backward, then the losses of N AdamW
steps (lr schedule from optim_lr_at, weight decay on the tensors flagged
`decay`, global-norm clipping at 1.0). This script builds the same GPT-2 in
plain PyTorch (HF Conv1D layout y = x @ W + b with W (in, out), LayerNorm eps
1e-5, tanh GELU, causal attention, LM head tied to wte), loads the same
weights and compares.

The reference runs in float64, so what is measured is the engine's own error.
Error of a tensor = ||engine - ref||_2 / max(||ref||_2, 1e-30) (norm-wise
relative, over the whole tensor). Tolerances:

  fp32 engine (--precision fp32):
    logits, loss, each of the gradients      <= 1e-4
    loss of each of the AdamW steps          <= 1e-4 (relative, |a-b|/|b|)
    each parameter tensor after the last step <= 1e-3
    (looser than the rest: the key part of attn.c_attn.bias has an exactly
    zero true gradient, softmax being blind to a per-row shift, so its
    computed gradient is rounding noise, which Adam's m/sqrt(v) turns into
    lr-sized steps; PyTorch's own float32 against float64 differs by 1.5e-4)
  bf16 engine (--precision bf16: bf16 GEMM inputs, fp32 accumulation,
  fp32 master weights), against the same float64 reference:
    logits                                   <= 1e-2
    loss, loss of each AdamW step            <= 1e-3 (relative)
    each of the gradients                    <= 3e-2
    (bf16 keeps 8 significant bits, ~2e-3 relative per rounding, and a
    gradient goes through several rounded GEMMs; measured at this shape:
    logits 2.3e-3, gradients 4.9e-3 worst, step losses 7.7e-5 worst. The
    parameters after the steps are not compared: Adam's m/sqrt(v) turns
    small gradient differences into lr-sized ones.)

Llama (--arch llama): torch_dump's tiny Llama (GQA: 4 heads, 2 KV heads;
RoPE theta 100 with Llama 3.1 scaling whose three bands all occur at head
size 8), untied and then tied (--tied), 20 AdamW steps each, against
LlamaRef below: written from the published architecture (Meta's
reference model: RMSNorm, rotary embeddings applied as complex
multiplication of interleaved pairs, repeat_kv grouped-query attention,
SwiGLU, nn.Linear y = x @ W^T, no biases). The engine stores and rotates
q_proj/k_proj in Hugging Face's rotate_half layout; the reference applies
HF's published permutation (convert_llama_weights_to_hf's permute,
inverted) to the loaded q/k weights before Meta's interleaved rotation, so
agreement checks that the engine's layout is HF's. The permutation is
applied inside forward, so autograd carries the gradients back to HF's
layout for the comparison. Same tolerances as GPT-2 (no Llama tensor has an
exactly-zero true gradient; measured at this shape: see the printed worst
errors).

The tensor table must hold exactly the HF names of the architecture, with the decay flag
set on the 2-D tensors only. The learning-rate schedule is checked separately: the rates torch_dump used
must equal llm.c's convention (linear warmup lr*(s+1)/warmup, then cosine to
min_lr) to 1e-12.

Usage: test_torch_reference.py --dump PATH/torch_dump --precision fp32|bf16
Exit 0 when every check passes; each check prints one line.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

MAGIC = "ringmaster-torch-dump"
VERSION = 2

TOLERANCES = {
    "fp32": {"logits": 1e-4, "loss": 1e-4, "grad": 1e-4, "step_loss": 1e-4, "final_param": 1e-3},
    "bf16": {"logits": 1e-2, "loss": 1e-3, "grad": 3e-2, "step_loss": 1e-3, "final_param": None},
}


class GPT2Ref(torch.nn.Module):
    """GPT-2 with HF names and shapes, parameters in a ParameterDict.

    Names contain dots, which ParameterDict refuses, so they are stored with
    '/' and looked up through p()."""

    def __init__(self, cfg, tensors, dtype):
        super().__init__()
        self.cfg = cfg
        self.params = torch.nn.ParameterDict()
        for t in tensors:
            self.params[t["name"].replace(".", "/")] = torch.nn.Parameter(
                torch.zeros(t["shape"], dtype=dtype))

    def p(self, name):
        return self.params[name.replace(".", "/")]

    def forward(self, idx, targets):
        cfg = self.cfg
        B, T = idx.shape
        C, nh = cfg["n_embd"], cfg["n_head"]
        hs = C // nh
        pos = torch.arange(T)
        x = self.p("wte.weight")[idx] + self.p("wpe.weight")[pos]  # (B, T, C)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        for layer in range(cfg["n_layer"]):
            h = f"h.{layer}."
            a = F.layer_norm(x, (C,), self.p(h + "ln_1.weight"), self.p(h + "ln_1.bias"), 1e-5)
            qkv = a @ self.p(h + "attn.c_attn.weight") + self.p(h + "attn.c_attn.bias")  # (B, T, 3C)
            q, k, v = qkv.split(C, dim=2)
            q = q.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
            k = k.view(B, T, nh, hs).transpose(1, 2)
            v = v.view(B, T, nh, hs).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)  # (B, nh, T, T)
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(B, T, C)
            x = x + y @ self.p(h + "attn.c_proj.weight") + self.p(h + "attn.c_proj.bias")
            a = F.layer_norm(x, (C,), self.p(h + "ln_2.weight"), self.p(h + "ln_2.bias"), 1e-5)
            f = a @ self.p(h + "mlp.c_fc.weight") + self.p(h + "mlp.c_fc.bias")  # (B, T, 4C)
            f = F.gelu(f, approximate="tanh")
            x = x + f @ self.p(h + "mlp.c_proj.weight") + self.p(h + "mlp.c_proj.bias")
        x = F.layer_norm(x, (C,), self.p("ln_f.weight"), self.p("ln_f.bias"), 1e-5)
        logits = x @ self.p("wte.weight").t()  # (B, T, V)
        loss = F.cross_entropy(logits.view(B * T, -1), targets.reshape(-1))
        return logits, loss


def meta_from_hf(w, n_heads):
    """HF's q/k row order back to Meta's: convert_llama_weights_to_hf.py
    permutes Meta's (n_heads * hd, C) rows with
    w.view(n_heads, hd // 2, 2, C).transpose(1, 2); this is its inverse."""
    rows, cols = w.shape
    return w.view(n_heads, 2, rows // n_heads // 2, cols).transpose(1, 2).reshape(rows, cols)


def llama3_inv_freq(cfg):
    """Rotary frequencies as Meta's llama3 reference computes them
    (precompute_freqs_cis with apply_scaling), in float64."""
    hd = cfg["n_embd"] // cfg["n_head"]
    freqs = [1.0 / (cfg["rope_theta"] ** (i / hd)) for i in range(0, hd, 2)]
    sc = cfg["rope_scaling"]
    if sc["factor"] > 0:
        old, low, high = sc["original_max_position"], sc["low_freq_factor"], sc["high_freq_factor"]
        low_wl, high_wl = old / low, old / high
        out = []
        for f in freqs:
            wl = 2 * math.pi / f
            if wl < high_wl:
                out.append(f)
            elif wl > low_wl:
                out.append(f / sc["factor"])
            else:
                smooth = (old / wl - low) / (high - low)
                out.append((1 - smooth) * f / sc["factor"] + smooth * f)
        freqs = out
    return torch.tensor(freqs, dtype=torch.float64)


class LlamaRef(GPT2Ref):
    """Llama 3 (Meta's reference architecture) over HF-named parameters."""

    def rms(self, x, w):
        eps = self.cfg["norm_eps"]
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    @staticmethod
    def rotate(x, freqs_cis):
        """Meta's apply_rotary_emb: consecutive pairs as complex numbers."""
        xc = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
        return torch.view_as_real(xc * freqs_cis).flatten(-2)

    def forward(self, idx, targets):
        cfg = self.cfg
        B, T = idx.shape
        C, nh, nkv = cfg["n_embd"], cfg["n_head"], cfg["n_kv_head"]
        hd, rep = C // nh, nh // nkv
        t = torch.arange(T, dtype=torch.float64)
        freqs_cis = torch.polar(torch.ones(T, hd // 2, dtype=torch.float64),
                                torch.outer(t, llama3_inv_freq(cfg)))  # (T, hd/2)
        freqs_cis = freqs_cis.view(1, T, 1, hd // 2)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        x = self.p("model.embed_tokens.weight")[idx]
        for layer in range(cfg["n_layer"]):
            h = f"model.layers.{layer}."
            a = self.rms(x, self.p(h + "input_layernorm.weight"))
            wq = meta_from_hf(self.p(h + "self_attn.q_proj.weight"), nh)
            wk = meta_from_hf(self.p(h + "self_attn.k_proj.weight"), nkv)
            q = self.rotate((a @ wq.t()).view(B, T, nh, hd), freqs_cis)
            k = self.rotate((a @ wk.t()).view(B, T, nkv, hd), freqs_cis)
            v = (a @ self.p(h + "self_attn.v_proj.weight").t()).view(B, T, nkv, hd)
            # repeat_kv: query head i reads KV head i // rep
            k = k[:, :, :, None, :].expand(B, T, nkv, rep, hd).reshape(B, T, nh, hd)
            v = v[:, :, :, None, :].expand(B, T, nkv, rep, hd).reshape(B, T, nh, hd)
            q, k, v = (z.transpose(1, 2) for z in (q, k, v))  # (B, nh, T, hd)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(B, T, C)
            x = x + y @ self.p(h + "self_attn.o_proj.weight").t()
            a = self.rms(x, self.p(h + "post_attention_layernorm.weight"))
            g = F.silu(a @ self.p(h + "mlp.gate_proj.weight").t())
            u = a @ self.p(h + "mlp.up_proj.weight").t()
            x = x + (g * u) @ self.p(h + "mlp.down_proj.weight").t()
        x = self.rms(x, self.p("model.norm.weight"))
        head = "model.embed_tokens.weight" if cfg["tie_embeddings"] else "lm_head.weight"
        logits = x @ self.p(head).t()
        loss = F.cross_entropy(logits.view(B * T, -1), targets.reshape(-1))
        return logits, loss


def expected_names(arch, cfg):
    """The HF names the tensor table must hold, exactly."""
    if arch == "gpt2":
        names = {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"}
        per_layer = ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                     "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                     "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")
        prefix = "h.{}."
    else:
        names = {"model.embed_tokens.weight", "model.norm.weight"}
        if not cfg["tie_embeddings"]:
            names.add("lm_head.weight")
        per_layer = ("input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                     "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                     "post_attention_layernorm.weight", "mlp.gate_proj.weight",
                     "mlp.up_proj.weight", "mlp.down_proj.weight")
        prefix = "model.layers.{}."
    for layer in range(cfg["n_layer"]):
        for s in per_layer:
            names.add(prefix.format(layer) + s)
    return names


def lr_at(step, total, warmup, lr, min_lr):
    """llm.c's schedule: linear warmup, then cosine decay to min_lr."""
    if step < warmup:
        return lr * (step + 1) / warmup
    ratio = (step - warmup) / max(total - warmup, 1)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def rel_err(a, b):
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    return float(np.linalg.norm(a - b) / max(float(np.linalg.norm(b)), 1e-30))


class Checker:
    def __init__(self):
        self.n_failed = 0
        self.n_passed = 0
        self.worst = {}

    def check(self, what, err, tol, group=None, quiet=False):
        ok = err <= tol and math.isfinite(err)
        if ok:
            self.n_passed += 1
        else:
            self.n_failed += 1
        if group is not None:
            self.worst[group] = max(self.worst.get(group, 0.0), err)
        if not ok or not quiet:
            print(f"{'ok  ' if ok else 'FAIL'} {what}: error {err:.3e} (tolerance {tol:.0e})")


def load_dump(d):
    with open(os.path.join(d, "index.json"), encoding="utf-8") as f:
        index = json.load(f)
    if index.get("magic") != MAGIC or index.get("version") != VERSION:
        sys.exit(f"{d}/index.json: expected magic {MAGIC} version {VERSION}, "
                 f"got {index.get('magic')} {index.get('version')}: rebuild torch_dump")

    def arr(name, dtype):
        return np.fromfile(os.path.join(d, name), dtype=dtype)

    n = index["num_params"]
    B, T, V = index["B"], index["T"], index["config"]["vocab_size"]
    data = {
        "params": arr("params.f32", "<f4"),
        "grads": arr("grads.f32", "<f4"),
        "logits": arr("logits.f32", "<f4"),
        "inputs": arr("inputs.i32", "<i4"),
        "targets": arr("targets.i32", "<i4"),
        "final_params": arr("final_params.f32", "<f4"),
    }
    for key, want in (("params", n), ("grads", n), ("final_params", n),
                      ("logits", B * T * V), ("inputs", B * T), ("targets", B * T)):
        if data[key].size != want:
            sys.exit(f"{d}: {key} has {data[key].size} values, expected {want}")
    return index, data


def cpu_has_avx512():
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " avx512bw" in line for line in f)
    except OSError:
        return False


def run_one(args, tied, chk):
    """Dump one model and compare it; the checks go into chk."""
    tol = TOLERANCES[args.precision]
    dtype = torch.float64
    cmd = [args.dump, "--precision", args.precision, "--arch", args.arch]
    if args.arch == "llama":
        cmd += ["--steps", "20"] + (["--tied"] if tied else [])
    with tempfile.TemporaryDirectory(prefix="torch-ref-") as tmp:
        out = os.path.join(args.keep, "tied" if tied else "untied") if args.keep else tmp
        os.makedirs(out, exist_ok=True)
        proc = subprocess.run(cmd + ["--out", out], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=100)
        sys.stdout.write(proc.stdout)
        if proc.returncode != 0:
            sys.exit(f"torch_dump exited with {proc.returncode}")
        index, data = load_dump(out)

    cfg, B, T = index["config"], index["B"], index["T"]
    tensors = index["tensors"]
    print(f"model {index['arch']} {cfg}, B={B} T={T}, {index['num_params']} parameters in "
          f"{len(tensors)} tensors, precision {args.precision}")
    if index["arch"] != args.arch:
        sys.exit(f"torch_dump wrote arch {index['arch']}, asked for {args.arch}")

    model = (GPT2Ref if args.arch == "gpt2" else LlamaRef)(cfg, tensors, dtype)
    names = {t["name"] for t in tensors}
    chk.check(f"tensor table has exactly the HF {args.arch} names",
              0.0 if names == expected_names(args.arch, cfg) else 1.0, 0.0)
    for t in tensors:
        want_decay = len(t["shape"]) == 2
        if bool(t["decay"]) != want_decay:
            chk.check(f"decay flag of {t['name']} (shape {t['shape']})", 1.0, 0.0)

    def view(flat, t):
        return flat[t["offset"]:t["offset"] + t["numel"]].reshape(t["shape"])

    with torch.no_grad():
        for t in tensors:
            model.p(t["name"]).copy_(torch.from_numpy(view(data["params"], t).astype(np.float64)))

    idx = torch.from_numpy(data["inputs"].astype(np.int64)).view(B, T)
    tgt = torch.from_numpy(data["targets"].astype(np.int64)).view(B, T)

    # One forward + backward.
    logits, loss = model(idx, tgt)
    loss.backward()
    chk.check("logits (B, T, V)", rel_err(data["logits"], logits.detach().numpy()), tol["logits"])
    chk.check(f"loss {index['loss']:.7f} vs {loss.item():.7f}",
              abs(index["loss"] - loss.item()) / abs(loss.item()), tol["loss"])
    for t in tensors:
        g = model.p(t["name"]).grad.numpy()
        chk.check(f"grad {t['name']} {tuple(t['shape'])}", rel_err(view(data["grads"], t), g),
                  tol["grad"], group="grad", quiet=True)
    print(f"{'ok  ' if chk.worst['grad'] <= tol['grad'] else 'FAIL'} all {len(tensors)} gradients: "
          f"worst error {chk.worst['grad']:.3e} (tolerance {tol['grad']:.0e})")

    # The learning-rate schedule torch_dump used.
    tr = index["train"]
    lrs = [lr_at(s, tr["steps"], tr["warmup_steps"], tr["lr"], tr["min_lr"]) for s in range(tr["steps"])]
    lr_err = max(abs(a - b) for a, b in zip(lrs, tr["lrs"]))
    chk.check("lr schedule (linear warmup, cosine to min_lr)", lr_err, 1e-12)

    # AdamW steps from the same initial weights, on the same batch.
    with torch.no_grad():
        for t in tensors:
            model.p(t["name"]).copy_(torch.from_numpy(view(data["params"], t).astype(np.float64)))
    decay = [model.p(t["name"]) for t in tensors if t["decay"]]
    no_decay = [model.p(t["name"]) for t in tensors if not t["decay"]]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": tr["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=tr["lr"], betas=(0.9, 0.95), eps=1e-8)
    for step in range(tr["steps"]):
        for group in opt.param_groups:
            group["lr"] = tr["lrs"][step]
        opt.zero_grad(set_to_none=True)
        _, loss = model(idx, tgt)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), tr["grad_clip"]).item()
        opt.step()
        got = tr["losses"][step]
        err = abs(got - loss.item()) / abs(loss.item())
        chk.check(f"step {step}: lr {tr['lrs'][step]:.3e} loss {got:.6f} vs {loss.item():.6f} "
                  f"(grad norm {tr['grad_norms'][step]:.4f} vs {norm:.4f})", err, tol["step_loss"])
    if tol["final_param"] is not None:
        worst, worst_name = 0.0, ""
        for t in tensors:
            err = rel_err(view(data["final_params"], t), model.p(t["name"]).detach().numpy())
            if err >= worst:
                worst, worst_name = err, t["name"]
        chk.check(f"parameters after {tr['steps']} AdamW steps (worst tensor: {worst_name})", worst,
                  tol["final_param"])



def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True, help="path of the torch_dump program")
    ap.add_argument("--arch", choices=["gpt2", "llama"], default="gpt2")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--keep", help="write the dumps here and keep them (default: a temporary folder)")
    args = ap.parse_args()

    if args.precision == "bf16" and not cpu_has_avx512():
        # oneDNN has no bf16 matmul here: the engine widens the operands to
        # fp32 (worker/engine/matmul.c), which this checks the same way.
        print("note: this CPU has no AVX-512 (no avx512bw in /proc/cpuinfo): bf16 GEMMs run widened")

    torch.manual_seed(0)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    chk = Checker()
    # GPT-2's LM head is always tied; Llama is checked untied, then tied.
    for tied in ([False] if args.arch == "gpt2" else [False, True]):
        chk.worst = {}
        run_one(args, tied, chk)
    print(f"torch reference ({args.arch}, {args.precision}): {chk.n_passed} checks ok, "
          f"{chk.n_failed} failed")
    return 1 if chk.n_failed else 0


if __name__ == "__main__":
    sys.exit(main())
