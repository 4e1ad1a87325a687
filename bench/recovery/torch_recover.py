"""torchrun's side of the recovery benchmark: a DDP training script that
checkpoints and resumes the way a torchrun user writes it.

Each worker prints JSON lines with wall-clock times to its stdout (torchrun
tees them into its log folder): "start" before importing torch, "init" after
init_process_group, "loaded" after loading the latest checkpoint (step 0:
none), and "step" after every optimizer step. Rank 0 writes a checkpoint
(model and AdamW state, torch.save to a temporary name, fsync, rename) every
--every steps, so a restart resumes from the last complete one. The model and
the step are bench/torch_train_step.py's GPT-2 with DDP over gloo, as in
bench/ddp/torch_ddp_step.py; random tokens. Every worker writes its pid to
<out>/pid-<restart>-<rank> so that the driver can kill one.
"""
import json
import os
import sys
import time

T_START = time.time()
OUT = sys.argv[1]
RANK = int(os.environ["RANK"])
RESTART = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def say(event, **kw):
    print(json.dumps(dict(event=event, t=time.time(), rank=RANK, restart=RESTART, **kw)), flush=True)


print(json.dumps(dict(event="start", t=T_START, rank=RANK, restart=RESTART)), flush=True)
with open(os.path.join(OUT, "pid-%d-%d" % (RESTART, RANK)), "w") as f:
    f.write(str(os.getpid()))

import argparse  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from torch_train_step import GPT2, adamw  # noqa: E402  (bench/torch_train_step.py)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--embd", type=int, default=384)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--steps", type=int, default=1000000)
    ap.add_argument("--every", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    say("init")
    world = dist.get_world_size()
    torch.manual_seed(1337)
    model = GPT2(args.layers, args.heads, args.embd, args.vocab, args.seq)
    model.train()
    ddp = DistributedDataParallel(model, gradient_as_bucket_view=True)
    opt = adamw(model)
    ckpt = os.path.join(args.out, "ckpt.pt")
    step = 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step = state["step"]
    dist.barrier()
    say("loaded", step=step)
    g = torch.Generator().manual_seed(RANK)
    while step < args.steps:
        idx = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g)
        tgt = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g)
        opt.zero_grad(set_to_none=True)
        loss = ddp(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if RANK == 0 and step % args.every == 0:
            tmp = ckpt + ".tmp"
            with open(tmp, "wb") as f:
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, ckpt)
            say("saved", step=step)
        say("step", step=step, world=world)


if __name__ == "__main__":
    main()
