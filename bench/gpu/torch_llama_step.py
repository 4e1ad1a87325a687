#!/usr/bin/python3
"""PyTorch's side of the Llama GPU benchmark (bench/gpu/run-llama.sh): the
model bench_gpu_llama_step trains, as one would run it in PyTorch eager:
HF LlamaForCausalLM's architecture written out (RMSNorm, rotate_half RoPE
with Llama 3.1 frequency scaling, grouped-query attention through
F.scaled_dot_product_attention(is_causal=True), PyTorch's flash kernel,
with the KV heads repeated for it, SwiGLU, no biases, tied LM head by
default). A step: zero_grad(set_to_none), forward and mean cross-entropy
under bf16 autocast (fp32 master weights), backward, clip_grad_norm_(1.0),
fused AdamW (betas 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices and
embeddings). Defaults: Llama 3.2 1B's shape at T 2048.

Prints one JSON object: torch version, params, batch, seq, median and best
ms per step (after torch.cuda.synchronize), tokens/s at the median, peak
GPU memory. --device cpu runs a small shape on the CPU (a smoke test of
the script; no timing claims).
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def rope_inv_freq(hd, theta, factor, low, high, orig):
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    if factor > 0:
        wl = 2 * math.pi / inv
        low_wl, high_wl = orig / low, orig / high
        smooth = (orig / wl - low) / (high - low)
        scaled = torch.where(wl > low_wl, inv / factor, inv)
        mid = (wl <= low_wl) & (wl >= high_wl)
        inv = torch.where(mid, (1 - smooth) * inv / factor + smooth * inv, scaled)
    return inv


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.h, self.kv, self.hd = a.heads, a.kv_heads, a.embd // a.heads
        self.input_layernorm = RMSNorm(a.embd, 1e-5)
        self.q_proj = nn.Linear(a.embd, a.heads * self.hd, bias=False)
        self.k_proj = nn.Linear(a.embd, a.kv_heads * self.hd, bias=False)
        self.v_proj = nn.Linear(a.embd, a.kv_heads * self.hd, bias=False)
        self.o_proj = nn.Linear(a.heads * self.hd, a.embd, bias=False)
        self.post_attention_layernorm = RMSNorm(a.embd, 1e-5)
        self.gate_proj = nn.Linear(a.embd, a.ffn, bias=False)
        self.up_proj = nn.Linear(a.embd, a.ffn, bias=False)
        self.down_proj = nn.Linear(a.ffn, a.embd, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(B, T, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(h).view(B, T, self.kv, self.hd).transpose(1, 2)
        v = self.v_proj(h).view(B, T, self.kv, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(self.h // self.kv, dim=1)
        v = v.repeat_interleave(self.h // self.kv, dim=1)
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # PyTorch before 2.0 (the CPU smoke test on Debian 12's 1.13)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(self.hd)
            att = att.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
            y = att.softmax(-1) @ v
        x = x + self.o_proj(y.transpose(1, 2).reshape(B, T, C))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed_tokens = nn.Embedding(a.vocab, a.embd)
        self.layers = nn.ModuleList(Block(a) for _ in range(a.layers))
        self.norm = RMSNorm(a.embd, 1e-5)
        self.lm_head = nn.Linear(a.embd, a.vocab, bias=False)
        if a.tied:
            self.lm_head.weight = self.embed_tokens.weight
        hd = a.embd // a.heads
        inv = rope_inv_freq(hd, 500000.0, 32.0, 1.0, 4.0, 8192)
        ang = torch.arange(a.seq, dtype=torch.float64)[:, None] * inv[None, :]
        ang = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", ang.cos().float(), persistent=False)
        self.register_buffer("sin", ang.sin().float(), persistent=False)
        for n, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * a.layers) if n.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.embed_tokens(idx)
        cos, sin = self.cos[:T].to(x.dtype), self.sin[:T].to(x.dtype)
        for blk in self.layers:
            x = blk(x, cos, sin)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--embd", type=int, default=2048)
    ap.add_argument("--ffn", type=int, default=8192)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--tied", type=int, default=1)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    model = Llama(a).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, **({"fused": True} if a.device == "cuda" else {}))
    times = []
    for it in range(a.warmup + a.steps):
        idx = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
        tgt = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
        if a.device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=a.device, dtype=torch.bfloat16):
            loss = model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if a.device == "cuda":
            torch.cuda.synchronize()
        if it >= a.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    med = statistics.median(times)
    peak = torch.cuda.max_memory_allocated() / 2**30 if a.device == "cuda" else 0.0
    print(json.dumps({"torch": torch.__version__, "device": a.device, "params": n_params, "batch": a.batch,
                      "seq": a.seq, "median_ms": med, "best_ms": min(times),
                      "tokens_per_s": a.batch * a.seq / (med / 1e3), "peak_gpu_gib": peak,
                      "last_loss": float(loss)}))


if __name__ == "__main__":
    main()
