#!/usr/bin/python3
"""PyTorch DDP's side of the data-parallel benchmark: the same GPT-2 and the
same step as bench_ddp_step, one process per rank, so bench/ddp/run.sh can
put them side by side.

The model is bench/torch_train_step.py's (nanoGPT-style, tuned for the CPU),
wrapped in torch.nn.parallel.DistributedDataParallel over the gloo backend
(process group from a file:// init, so no launcher is needed), with
gradient_as_bucket_view=True; DDP all-reduces gradient buckets (25 MiB by
default) while backward is still running. A step is zero_grad(set_to_none),
forward, mean cross-entropy, backward (with the all-reduces),
clip_grad_norm_(1.0) and AdamW (betas 0.9/0.95, eps 1e-8, weight decay 0.1 on
matrices and embeddings only, foreach kernels); --batch sequences of random
tokens per rank. Threads: torch.set_num_threads(--threads, default 1).

Rank 0 prints one JSON object: median and best ms/step, tokens/s of the whole
group at the median (batch x seq x world per step), GFLOP/s, peak RSS.
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from torch_train_step import GPT2, adamw  # noqa: E402  (bench/torch_train_step.py)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--init", required=True, help="a file path for the file:// rendezvous (must not exist yet)")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--embd", type=int, default=384)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1337)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method="file://" + args.init, rank=args.rank,
                            world_size=args.world)
    torch.manual_seed(args.seed)
    model = GPT2(args.layers, args.heads, args.embd, args.vocab, args.seq)
    model.train()
    ddp = DistributedDataParallel(model, gradient_as_bucket_view=True)
    opt = adamw(model, cuda=False)
    n_params = sum(p.numel() for p in model.parameters())
    flops_per_token = 6.0 * n_params + 6.0 * args.layers * args.embd * args.seq

    gen = torch.Generator().manual_seed(args.seed + 1000 * args.rank)
    times_ms = []
    loss = None
    for step in range(args.warmup + args.steps):
        idx = torch.randint(0, args.vocab, (args.batch, args.seq), generator=gen)
        tgt = torch.randint(0, args.vocab, (args.batch, args.seq), generator=gen)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = ddp(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        dt = (time.perf_counter() - t0) * 1e3
        if step >= args.warmup:
            times_ms.append(dt)
        if args.rank == 0:
            print(f"step {step}: {dt:.1f} ms, loss {loss.item():.4f}", file=sys.stderr)

    dist.barrier()
    if args.rank == 0:
        median_ms = statistics.median(times_ms)
        tok_s = args.batch * args.seq * args.world / (median_ms * 1e-3)
        print(json.dumps({
            "program": "pytorch-ddp", "torch": torch.__version__, "precision": "fp32",
            "world": args.world, "layers": args.layers, "heads": args.heads, "embd": args.embd,
            "vocab": args.vocab, "batch_per_rank": args.batch, "seq": args.seq,
            "threads_per_rank": torch.get_num_threads(), "num_params": n_params,
            "steps": args.steps, "warmup": args.warmup,
            "median_ms": round(median_ms, 2), "min_ms": round(min(times_ms), 2),
            "tokens_per_s": round(tok_s, 1), "gflops": round(flops_per_token * tok_s / 1e9, 1),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
            "last_loss": round(loss.item(), 4),
        }))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
