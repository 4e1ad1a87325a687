"""2D parallelism on the GPU rows, through the whole system on cudaemu
(tests/cudaemu): one agent that is ringworker-cudaemu with four fake GPUs
(tests/worker/gpus), and 4-rank jobs of tensor 2 x data 2 whose ranks train
on four emulated GPUs over emulated NCCL: the TP group's collectives inside
the CUDA rows, the DP group's ZeRO over the TP ranks' local buffers, the
gradient norm over both groups, and snapshots in the logical layout.

For GPT-2 and Llama (GQA, tied embeddings), 6 steps each:
  1. the reference: tensor 1 x data 2, sharding none;
  2. tensor 2 x data 2 with zero1 and with zero3: every step's loss within
     2e-3 relative of the reference's (the same logical weights and
     batches; bf16 GEMM inputs split differently over the group round
     differently: measured about 1e-5), step 1's gradient norm within 2%
     of the reference's (the trainer's sum over both groups, replicated
     tensors once: measured 1e-5), and zero3's losses within 1e-5
     relative of zero1's (ZeRO changes where state lives; the streamed
     rows add a few gradients in another order: measured 1e-7);
  3. a tensor 1 x data 2 job that resumes from zero3's snapshot of step 4
     (resume_from): its steps 5 and 6 within 2e-3 of zero3's, so a
     snapshot taken at t = 2 on GPUs resumes at t = 1.
"""
import os

from cluster import check, fake_gpus, log, run, wait_workers
from test_cluster_cudaemu import losses, norm_at_1, spec

STEPS = 6
GPUS = ";".join("NVIDIA H100 80GB HBM3|85520809984|GPU-%d1111111-2222-3333-4444-555555555555" % i
                for i in range(4))


def job(d, name, arch, sharding, tensor, world, resume=None):
    s = spec(name, sharding, arch, tensor)
    s["parallel"]["world_size"] = world
    s["train"]["steps"] = STEPS
    s["checkpoint"] = {"every_steps": 2, "keep_last": 3}
    if resume:
        s["resume_from"] = resume
    job_id = d.submit(s)["id"]
    d.wait_state(job_id, {"succeeded"}, timeout=400)
    got = {st: loss for st, loss, _ in losses(d, job_id)}
    log("%s (%s, %s, tensor %d x data %d): %s" % (name, arch, sharding, tensor, world // tensor,
                                                 ["%.6f" % got[k] for k in sorted(got)]))
    return job_id, got


def close(a, b, steps, what):
    for st in steps:
        rel = abs(a[st] - b[st]) / abs(b[st])
        check(rel < 2e-3, "%s: step %d loss %.6f against %.6f (relative %.1e)" % (what, st, a[st], b[st], rel))


def main(c, args):
    fake_dir = os.path.abspath(args[args.index("--fake-nvml") + 1])
    d = c.start_daemon(["--heartbeat-ms", "500"])
    ck = os.path.join(c.workdir, "checkpoints")
    with fake_gpus(fake_dir, GPUS):
        c.start_agent("gpu1", devices="cpu:1", extra_args=["--gpus", "auto", "--checkpoint-root", ck,
                                                           "--comm-timeout-ms", "30000"])
    wait_workers(d, ["gpu1"])
    for arch in ("gpt2", "llama"):
        ref_id, ref = job(d, "ref", arch, "none", 1, 2)
        check(sorted(ref) == list(range(1, STEPS + 1)), "reference steps %s" % sorted(ref))
        z1_id, z1 = job(d, "2d-zero1", arch, "zero1", 2, 4)
        close(z1, ref, range(1, STEPS + 1), "%s zero1 at tensor 2 x data 2 against tensor 1" % arch)
        norms = (norm_at_1(d, z1_id), norm_at_1(d, ref_id))  # replicated tensors counted once
        check(abs(norms[0] - norms[1]) < 2e-2 * norms[1], "%s: step 1's gradient norm %.6f at 2D, %.6f"
              " at tensor 1" % ((arch,) + norms))
        z3_id, z3 = job(d, "2d-zero3", arch, "zero3", 2, 4)
        for st in z1:  # the streamed rows sum a few gradients in other orders
            check(abs(z3[st] - z1[st]) <= 1e-5 * abs(z1[st]),
                  "%s: step %d: zero3's loss %.8f, zero1's %.8f" % (arch, st, z3[st], z1[st]))
        _, back = job(d, "resume-t1", arch, "none", 1, 2, resume={"job": z3_id, "step": 4})
        check(sorted(back) == [5, 6], "%s: the resumed job reported steps %s" % (arch, sorted(back)))
        close(back, z3, (5, 6), "%s resumed at tensor 1 from tensor 2's snapshot" % arch)
        log("%s: 2D zero1/zero3 within 2e-3 of tensor 1, zero3 within 1e-5 of zero1, resume at t=1 ok" % arch)


if __name__ == "__main__":
    run(main)
