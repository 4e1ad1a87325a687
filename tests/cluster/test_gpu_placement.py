"""GPU devices and placement (issue 7), on any machine: no GPU is needed.

1. A CPU-only cluster (one agent started with --gpus none, so that the test
   means the same on a GPU machine): a job with parallel.device "cuda"
   stays queued, and GET /v1/jobs/{id} says why in state_reason (it needs 1
   cuda device, the alive workers have 0, no worker offers a GPU) with one
   queued -> queued state event, not one per scheduling pass. A CPU job
   submitted after it runs to the end meanwhile (the cuda job holds no CPU
   job back). `ringworker agent --gpus 64` refuses to start, saying how many
   usable GPUs the node has and why.
2. With --fake-nvml DIR (meson passes tests/worker/gpus, where the test-only
   stand-in for libnvidia-ml.so.1 is built): a second agent finds two fake
   GPUs through it and advertises them (GET /v1/workers lists cuda 0 and
   cuda 1 beside its cpu slot); the waiting cuda job is placed there, on
   cuda:0 and only on a GPU. Its rank, started with CUDA_VISIBLE_DEVICES set
   to that GPU's UUID, finds no usable CUDA GPU behind the fake NVML and
   fails at once with exit 1 and the line docs/gpu.md gives, naming that
   UUID; with restart.max_restarts 0 the job fails with it as the cause. A
   3-rank cuda job then waits, saying the workers have only 2 GPUs; it is
   cancelled and no rank process is left.
"""
import os
import subprocess
import time

from cluster import Failure, check, fake_gpus, log, run, tiny_spec, wait_no_ranks, wait_workers

FAKE_H100 = "NVIDIA H100 80GB HBM3|85520809984|GPU-11111111-2222-3333-4444-555555555555"
FAKE_A100 = "NVIDIA A100-SXM4-40GB|42949672960|GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"


def cuda_spec(name, world_size, steps=1000000):
    s = tiny_spec(name, world_size=world_size, batch_size=4 * world_size, steps=steps)
    s["parallel"]["device"] = "cuda"
    s["train"]["precision"] = "bf16"  # what parallel.device cuda asks for (docs/gpu.md)
    return s


def wait_reason(d, job_id, prefix, timeout=15):
    """Poll the job until its state_reason starts with `prefix`; return it."""
    deadline = time.time() + timeout
    job = None
    while time.time() < deadline:
        job = d.job(job_id)
        if (job.get("state_reason") or "").startswith(prefix):
            return job
        time.sleep(0.1)
    raise Failure("job %s: no reason starting %r after %s s: %r" % (job_id, prefix, timeout, job))


def waiting_events(d, job_id):
    return [e for e in d.events(job_id)
            if e["type"] == "state" and e.get("from") == "queued" and e.get("to") == "queued"]


def cpu_only(c, d):
    c.start_agent("cpu1", devices="cpu:2", extra_args=["--gpus", "none"])
    workers = wait_workers(d, ["cpu1"])
    kinds = {dev["kind"] for dev in workers[0]["devices"]}
    check(kinds == {"cpu"}, "a --gpus none agent advertises %r" % workers[0]["devices"])

    job_id = d.submit(cuda_spec("wants-a-gpu", 1))["id"]
    job = wait_reason(d, job_id, "waiting: ")
    want = ("waiting: the job needs 1 cuda device(s), more than the alive workers have (no alive worker "
            "offers a GPU; an agent offers the NVIDIA GPUs it finds, see --gpus in docs/workers.md)")
    check(job["state"] == "queued" and job["attempt"] == 0 and job["ranks"] == [], "cuda job %r" % job)
    check(job["state_reason"] == want, "reason %r" % job["state_reason"])
    log("cuda job on a CPU-only cluster: %s" % job["state_reason"])

    # A CPU job is not held back, and the cuda job's reason is written once.
    cpu_job = d.submit(tiny_spec("cpu-meanwhile", 1, 4, 5))["id"]
    d.wait_state(cpu_job, {"succeeded"}, timeout=120)
    job = d.job(job_id)
    check(job["state"] == "queued" and job["state_reason"] == want, "cuda job after the CPU job %r" % job)
    ev = waiting_events(d, job_id)
    check(len(ev) == 1 and ev[0]["reason"] == want, "waiting events %r" % ev)

    # An agent asked for more GPUs than the node has does not start.
    p = subprocess.run([c.bins["ringworker"], "agent", "--coordinator", d.endpoint, "--node", "greedy",
                        "--gpus", "64"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
    out = p.stdout.decode()
    check(p.returncode == 1 and "--gpus 64, but this node has" in out and "usable GPU(s)" in out,
          "ringworker agent --gpus 64: status %s: %s" % (p.returncode, out))
    log("--gpus 64: %s" % out.strip())
    return job_id


def with_fake_gpus(c, d, fake_dir, job_id):
    with fake_gpus(fake_dir, FAKE_H100 + ";" + FAKE_A100):
        agent = c.start_agent("gpu1", devices="cpu:1", extra_args=["--gpus", "auto"])
    workers = {w["node"]: w for w in wait_workers(d, ["cpu1", "gpu1"])}
    devs = sorted((dev["kind"], dev["index"]) for dev in workers["gpu1"]["devices"])
    check(devs == [("cpu", 0), ("cuda", 0), ("cuda", 1)], "gpu1 advertises %r" % workers["gpu1"]["devices"])
    text = agent.logtext()
    check("GPU cuda:0: NVIDIA H100 80GB HBM3, 79.6 GiB, GPU-11111111" in text, "agent log:\n%s" % text)

    job = d.wait_state(job_id, {"failed"}, timeout=60)
    placed = [e["reason"] for e in d.events(job_id) if e["type"] == "state" and e.get("to") == "scheduled"]
    check(len(placed) == 1 and "gpu1 [0:cuda0]" in placed[0], "placement events %r" % placed)
    log("cuda job placed: %s" % placed[0])
    check("spawned rank %s/1/0 of 1 on cuda:0 GPU-11111111" % job_id in agent.logtext(100000),
          "agent log does not show the spawn on cuda:0")

    # The rank saw only its GPU, named by UUID, and no CUDA behind it (or,
    # in a build without CUDA, said so).
    reason = job.get("state_reason") or ""
    no_gpu = ("parallel.device is cuda but this worker has no usable CUDA GPU: " in reason
              and reason.endswith("(CUDA_VISIBLE_DEVICES=GPU-11111111-2222-3333-4444-555555555555)"))
    no_cuda = "parallel.device is cuda but this worker was built without CUDA" in reason
    check(reason.startswith("restart.max_restarts (0) reached: rank 0 failed: ") and (no_gpu or no_cuda),
          "failed cuda job's reason %r" % reason)
    log("cuda rank without CUDA: %s" % reason)

    # Two GPUs in all: a 3-rank cuda job waits.
    wide = d.submit(cuda_spec("three-gpus", 3))["id"]
    job = wait_reason(d, wide, "waiting: the job needs 3 cuda device(s)")
    log("wide job: %s" % job["state_reason"])
    d.json("POST", "/v1/jobs/%s/cancel" % wide, expect=200)
    d.wait_state(wide, {"cancelled"}, timeout=30)
    wait_no_ranks(job_id, 30)


def main(c, rest):
    fake_dir = None
    if "--fake-nvml" in rest:
        fake_dir = os.path.abspath(rest[rest.index("--fake-nvml") + 1])
    d = c.start_daemon()
    job_id = cpu_only(c, d)
    if fake_dir:
        with_fake_gpus(c, d, fake_dir, job_id)
    else:
        d.json("POST", "/v1/jobs/%s/cancel" % job_id, expect=200)
        check(d.job(job_id)["state"] == "cancelled", "cuda job not cancelled")


if __name__ == "__main__":
    run(main)
