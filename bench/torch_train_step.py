#!/usr/bin/python3
"""PyTorch's side of the training benchmark: the same GPT-2 (or Llama, --arch
llama) and the same step as bench_train_step, so run-train-bench.sh can put
them side by side.

The model is nanoGPT-style PyTorch as one would tune it for the CPU:
nn.Linear layers, tanh GELU, causal attention with a precomputed mask, LM
head tied to the token embedding. A step is zero_grad(set_to_none), forward,
mean cross-entropy, backward, clip_grad_norm_(1.0) and AdamW (betas 0.9/0.95,
eps 1e-8, weight decay 0.1 on matrices and embeddings only, foreach kernels).
--precision bf16 runs forward and loss under
torch.cpu.amp.autocast(dtype=torch.bfloat16) with fp32 master weights (the
engine's bf16 mode keeps fp32 weights too). Threads: torch.set_num_threads
(--threads, default 2).

--arch llama: Llama 3 as one would tune it for the CPU in plain PyTorch:
fused q/k/v and gate/up nn.Linear layers (bias-free; the same products as
separate ones, fewer launches), RMSNorm in fp32, RoPE in HF's rotate_half
form with cos/sin tables precomputed once, grouped-query attention with the
KV heads repeated (scaled_dot_product_attention where PyTorch has it, else
the masked softmax), SwiGLU, untied LM head (--tied 1: tied). Same step and
optimizer as GPT-2's.

Prints one JSON object: median and best ms/step, tokens/s at the median,
achieved GFLOP/s (6N + 6LCT per token, as gpt2_flops_per_token; Llama:
torchtitan's 6N + 12LCT with N less the token embedding when untied, as
llama_flops_per_token) and the peak resident set size.

--device cuda runs the same model on the GPU (bench/gpu/run.sh's peer):
autocast to bf16 on cuda, fused AdamW, the clock read after
torch.cuda.synchronize(), and peak GPU memory instead of the RSS.
--attention sdpa there swaps the masked softmax for
F.scaled_dot_product_attention(is_causal=True), PyTorch's flash kernel, as
nanoGPT runs it (PyTorch 2.x).
"""
import argparse
import json
import math
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, n_embd, n_head, seq, sdpa=False):
        super().__init__()
        self.n_head = n_head
        self.sdpa = sdpa
        self.ln_1 = nn.LayerNorm(n_embd, eps=1e-5)
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.ln_2 = nn.LayerNorm(n_embd, eps=1e-5)
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.mlp_proj = nn.Linear(4 * n_embd, n_embd)
        mask = torch.full((seq, seq), float("-inf")).triu(1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        nh = self.n_head
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q = q.view(B, T, nh, C // nh).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, nh, C // nh).transpose(1, 2)
        v = v.view(B, T, nh, C // nh).transpose(1, 2)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // nh)) + self.mask[:T, :T]
            y = att.softmax(dim=-1) @ v
        y = y.transpose(1, 2).reshape(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, n_layer, n_head, n_embd, vocab, seq, sdpa=False):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(seq, n_embd)
        self.h = nn.ModuleList(Block(n_embd, n_head, seq, sdpa) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd, eps=1e-5)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # (B, T, V)
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))


def rms_norm(x, w, eps=1e-5):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)) * w


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self, n_embd, n_head, n_kv, ffn, seq):
        super().__init__()
        self.nh, self.nkv, self.hd, self.ffn = n_head, n_kv, n_embd // n_head, ffn
        self.attn_norm = nn.Parameter(torch.ones(n_embd))
        self.wqkv = nn.Linear(n_embd, n_embd + 2 * n_kv * self.hd, bias=False)
        self.wo = nn.Linear(n_embd, n_embd, bias=False)
        self.mlp_norm = nn.Parameter(torch.ones(n_embd))
        self.w_gate_up = nn.Linear(n_embd, 2 * ffn, bias=False)
        self.w_down = nn.Linear(ffn, n_embd, bias=False)
        mask = torch.full((seq, seq), float("-inf")).triu(1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        nh, nkv, hd = self.nh, self.nkv, self.hd
        q, k, v = self.wqkv(rms_norm(x, self.attn_norm)).split([C, nkv * hd, nkv * hd], dim=2)
        q = q.view(B, T, nh, hd).transpose(1, 2)
        k = k.view(B, T, nkv, hd).transpose(1, 2)
        v = v.view(B, T, nkv, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(nh // nkv, dim=1)
        v = v.repeat_interleave(nh // nkv, dim=1)
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd)) + self.mask[:T, :T]
            y = att.softmax(dim=-1) @ v
        x = x + self.wo(y.transpose(1, 2).reshape(B, T, C))
        g, u = self.w_gate_up(rms_norm(x, self.mlp_norm)).split(self.ffn, dim=2)
        return x + self.w_down(F.silu(g) * u)


class Llama(nn.Module):
    def __init__(self, n_layer, n_head, n_kv, n_embd, ffn, vocab, seq, theta, tied):
        super().__init__()
        self.embed = nn.Embedding(vocab, n_embd)
        self.layers = nn.ModuleList(LlamaBlock(n_embd, n_head, n_kv, ffn, seq)
                                    for _ in range(n_layer))
        self.norm = nn.Parameter(torch.ones(n_embd))
        self.lm_head = None if tied else nn.Linear(n_embd, vocab, bias=False)
        hd = n_embd // n_head
        inv = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        ang = torch.outer(torch.arange(seq, dtype=torch.float64), inv)
        ang = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", ang.cos().float(), persistent=False)
        self.register_buffer("sin", ang.sin().float(), persistent=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                resid = name.endswith("wo.weight") or name.endswith("w_down.weight")
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer) if resid else 0.02)

    def forward(self, idx, targets):
        T = idx.shape[1]
        cos, sin = self.cos[:T], self.sin[:T]
        x = self.embed(idx)
        for block in self.layers:
            x = block(x, cos, sin)
        head = self.embed.weight if self.lm_head is None else self.lm_head.weight
        logits = F.linear(rms_norm(x, self.norm), head)
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))


def adamw(model, cuda):
    """AdamW as the engine runs it: lr 6e-4, betas 0.9/0.95, eps 1e-8, weight
    decay 0.1 on matrices and embeddings only, foreach kernels (fused on
    cuda)."""
    kernels = {"fused": True} if cuda else {"foreach": True}
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=6e-4, betas=(0.9, 0.95), eps=1e-8, **kernels)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--embd", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--attention", choices=["mask", "sdpa"], default="mask")
    ap.add_argument("--arch", choices=["gpt2", "llama"], default="gpt2")
    ap.add_argument("--kv-heads", type=int, default=0, help="llama: KV heads (default: --heads)")
    ap.add_argument("--ffn", type=int, default=0, help="llama: FFN width (default: Llama's rule)")
    ap.add_argument("--rope-theta", type=float, default=500000.0)
    ap.add_argument("--tied", type=int, default=0)
    args = ap.parse_args()
    if args.steps < 1 or args.embd % args.heads:
        sys.exit("torch_train_step: --steps must be >= 1 and --embd divisible by --heads")
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("torch_train_step: --device cuda but torch sees no CUDA GPU")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if args.arch == "llama":
        kv = args.kv_heads or args.heads
        ffn = args.ffn or (8 * args.embd // 3 + 255) // 256 * 256
        model = Llama(args.layers, args.heads, kv, args.embd, ffn, args.vocab, args.seq,
                      args.rope_theta, bool(args.tied)).to(args.device)
    else:
        model = GPT2(args.layers, args.heads, args.embd, args.vocab, args.seq,
                     args.attention == "sdpa").to(args.device)
    model.train()
    opt = adamw(model, cuda)
    n_params = sum(p.numel() for p in model.parameters())
    if args.arch == "llama":
        counted = n_params - (0 if args.tied else args.vocab * args.embd)
        flops_per_token = 6.0 * counted + 12.0 * args.layers * args.embd * args.seq
    else:
        flops_per_token = 6.0 * n_params + 6.0 * args.layers * args.embd * args.seq
    autocast = args.precision == "bf16"
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    times_ms = []
    loss = None
    for step in range(args.warmup + args.steps):
        idx = torch.randint(0, args.vocab, (args.batch, args.seq), device=args.device)
        tgt = torch.randint(0, args.vocab, (args.batch, args.seq), device=args.device)
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(args.device, enabled=autocast, dtype=torch.bfloat16):
            loss = model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync()
        dt = (time.perf_counter() - t0) * 1e3
        if step >= args.warmup:
            times_ms.append(dt)
        print(f"step {step}: {dt:.1f} ms, loss {loss.item():.4f}", file=sys.stderr)

    median_ms = statistics.median(times_ms)
    tok_s = args.batch * args.seq / (median_ms * 1e-3)
    print(json.dumps({
        "program": "pytorch", "torch": torch.__version__, "arch": args.arch,
        "precision": args.precision,
        "layers": args.layers, "heads": args.heads, "embd": args.embd, "vocab": args.vocab,
        "batch": args.batch, "seq": args.seq, "threads": torch.get_num_threads(),
        "num_params": n_params, "steps": args.steps, "warmup": args.warmup,
        "median_ms": round(median_ms, 2), "min_ms": round(min(times_ms), 2),
        "tokens_per_s": round(tok_s, 1), "flops_per_token": flops_per_token,
        "gflops": round(flops_per_token * tok_s / 1e9, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
        "device": torch.cuda.get_device_name() if cuda else "cpu", "attention": args.attention,
        "peak_gpu_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
        "last_loss": round(loss.item(), 4),
    }))


if __name__ == "__main__":
    main()
