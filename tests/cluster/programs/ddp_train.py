"""A DDP training script written the way torchrun's users write it (the
PyTorch DDP tutorial's pattern), used unchanged under `torchrun` and under
ringmaster's program jobs (tests/cluster/test_program.py,
bench/program/launch_recovery.py).

- init_process_group("gloo") from the environment (env://: MASTER_ADDR,
  MASTER_PORT, RANK, WORLD_SIZE);
- a small MLP on synthetic, deterministic regression data, a
  DistributedSampler (set_epoch each epoch), DistributedDataParallel, a
  DataLoader (with --num-workers N: N worker processes, the rank's children);
- a snapshot (model, optimizer, epochs run) saved by rank 0 with torch.save
  every --save-every epochs into RINGMASTER_CHECKPOINT_DIR if set, else
  --snapshot-dir (default ./snapshot), and loaded at start when present;
- progress lines on stdout, every one prefixed "ddp_train: rank R"; on start
  the torchrun environment it sees; the wall-clock time (time.time()) it
  passed init_process_group and each step, for the benchmark;
- when RINGMASTER_METRICS_FD is set, one JSON line per step
  {"step": N, "loss": x, "tokens_per_s": y} written to that descriptor.

Options to fail on purpose are deliberately absent: the tests kill a rank
with a signal, as a real failure would.
"""
T_START = __import__("time").time()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402
from torch.utils.data.distributed import DistributedSampler  # noqa: E402

T_IMPORTED = time.time()

ENV_SHOWN = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
             "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME",
             "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
             "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
             "TORCHELASTIC_USE_AGENT_STORE", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES",
             "RINGMASTER_JOB_ID", "RINGMASTER_CHECKPOINT_DIR", "RINGMASTER_METRICS_FD")


def say(rank, msg):
    print("ddp_train: rank %s %s" % (rank, msg), flush=True)


def dataset(n, dim, seed):
    """Deterministic synthetic regression: y = sin(x . w) + 0.1 noise."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g)
    w = torch.randn(dim, 1, generator=g)
    y = torch.sin(x @ w) + 0.1 * torch.randn(n, 1, generator=g)
    return TensorDataset(x, y)


def model(dim, hidden):
    return torch.nn.Sequential(torch.nn.Linear(dim, hidden), torch.nn.GELU(),
                               torch.nn.Linear(hidden, hidden), torch.nn.GELU(),
                               torch.nn.Linear(hidden, 1))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--save-every", type=int, default=2, help="snapshot every N epochs")
    p.add_argument("--batch-size", type=int, default=16, help="per rank")
    p.add_argument("--samples", type=int, default=512)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--num-workers", type=int, default=0,
                   help="DataLoader worker processes (children of the rank, kept across epochs)")
    p.add_argument("--step-sleep", type=float, default=0.0,
                   help="seconds to sleep after each step (stretches a run without using CPU)")
    p.add_argument("--snapshot-dir", default="snapshot",
                   help="used when RINGMASTER_CHECKPOINT_DIR is not set")
    a = p.parse_args()

    rank = int(os.environ["RANK"])
    say(rank, "pid %d env %s" % (os.getpid(), " ".join(
        "%s=%s" % (k, os.environ[k]) for k in ENV_SHOWN if k in os.environ)))
    say(rank, "import torch took %.0f ms (started at %.6f)" %
        ((T_IMPORTED - T_START) * 1e3, T_START))
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))

    dist.init_process_group("gloo")  # env:// from MASTER_ADDR/PORT, RANK, WORLD_SIZE
    say(rank, "init_process_group done at %.6f (world size %d, restart %d)" %
        (time.time(), dist.get_world_size(), restart))

    folder = os.environ.get("RINGMASTER_CHECKPOINT_DIR") or a.snapshot_dir
    path = os.path.join(folder, "snapshot.pt")
    torch.manual_seed(0)
    net = model(a.dim, a.hidden)
    opt = torch.optim.AdamW(net.parameters(), lr=a.lr)
    epochs_run = 0
    if os.path.exists(path):
        snap = torch.load(path, map_location="cpu")
        net.load_state_dict(snap["model"])
        opt.load_state_dict(snap["optimizer"])
        epochs_run = snap["epochs_run"]
        say(rank, "resumed from snapshot at epoch %d (%s)" % (epochs_run, path))
    else:
        say(rank, "no snapshot at %s: starting at epoch 0" % path)
    ddp = DDP(net)

    metrics = None
    if os.environ.get("RINGMASTER_METRICS_FD"):
        metrics = os.fdopen(int(os.environ["RINGMASTER_METRICS_FD"]), "w", buffering=1)

    data = dataset(a.samples, a.dim, seed=1234)
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=a.batch_size, sampler=sampler, shuffle=False,
                        num_workers=a.num_workers, persistent_workers=a.num_workers > 0)
    step = epochs_run * len(loader)
    loss = None
    for epoch in range(epochs_run, a.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            t0 = time.time()
            opt.zero_grad(set_to_none=True)
            loss = F.mse_loss(ddp(x), y)
            loss.backward()
            opt.step()
            step += 1
            t1 = time.time()
            lv = loss.item()
            say(rank, "restart %d epoch %d step %d loss %.6f at %.6f" % (restart, epoch, step, lv, t1))
            if metrics:
                metrics.write(json.dumps({"step": step, "loss": lv,
                                          "tokens_per_s": round(len(x) / max(t1 - t0, 1e-9), 1)}) + "\n")
            if a.step_sleep:
                time.sleep(a.step_sleep)
        if rank == 0 and (epoch + 1) % a.save_every == 0:
            os.makedirs(folder, exist_ok=True)
            tmp = path + ".tmp"
            with open(tmp, "wb") as f:
                torch.save({"model": net.state_dict(), "optimizer": opt.state_dict(),
                            "epochs_run": epoch + 1}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            say(rank, "snapshot saved at epoch %d (%s)" % (epoch + 1, path))
    dist.barrier()
    say(rank, "done: %d steps, last loss %s" % (step, "%.6f" % loss.item() if loss is not None else "-"))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
