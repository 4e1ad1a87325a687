"""A cuda job through the whole system on this machine's GPU (issue 7,
items 3 and 5): the real ringmasterd, an agent (`ringworker agent --gpus
auto`) that finds the GPU through the driver's NVML and offers it, a
1-rank job with parallel.device cuda placed on it, training on it with
snapshots, and a Chrome trace of steps 2..4 over REST.

  - the agent advertises one cuda device besides its CPU slot, and its log
    names the GPU as nvidia-smi does (name and UUID);
  - the job is placed on cuda:0, the rank is spawned with that GPU's UUID,
    it succeeds, its loss falls, snapshots 6 and 12 are committed;
  - GET /v1/jobs/{id}/trace holds rank 0's steps 2, 3 and 4, each a step
    slice with forward, backward and optimizer phases that took time.

Where there is no GPU (no /dev/nvidia0 and nvidia-smi lists none) it prints
"no CUDA GPU: ...; skipping" and exits 77. A GPU that is there but that the
agent does not find fails the test. With --fake-nvml DIR it runs against
the test-only fake NVML with one fake GPU instead (the cudaemu variant,
with ringworker-cudaemu), which checks this script where there is no GPU.
"""
import json
import os
import subprocess
import sys

from cluster import check, fake_gpus, log, run, tiny_spec, wait_workers
from test_profile import phases_by_step

STEPS = 12
FAKE = "NVIDIA H100 80GB HBM3|85520809984|GPU-11111111-2222-3333-4444-555555555555"


def real_gpu():
    """(name, uuid) of GPU 0 as nvidia-smi names it, or None when there is
    none to be seen."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,uuid", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        out = None
    if out is not None and out.returncode == 0 and out.stdout.strip():
        name, uuid = [f.strip() for f in out.stdout.strip().splitlines()[0].split(",")]
        return name, uuid
    check(not os.path.exists("/dev/nvidia0"), "/dev/nvidia0 is there but nvidia-smi lists no GPU")
    return None


def spec():
    s = tiny_spec("gpu-cluster", world_size=1, batch_size=4, steps=STEPS, seed=7, eval_every=4)
    s["model"] = {"n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 256, "seq_len": 32}
    s["parallel"]["device"] = "cuda"
    s["train"]["precision"] = "bf16"
    s["checkpoint"] = {"every_steps": 6, "keep_last": 3}
    s["profile"] = {"start_step": 2, "end_step": 4}
    return s


def check_trace(trace):
    """{step: {"step": X event, "phases": [X events]}} of rank 0, checked."""
    by_key = phases_by_step(trace)
    check(sorted(by_key) == [(0, 2), (0, 3), (0, 4)], "steps traced: %s, want rank 0's 2, 3, 4" % sorted(by_key))
    steps = {step: slot for (_, step), slot in by_key.items()}
    for step, slot in sorted(steps.items()):
        check(slot["step"] is not None, "step %d: no step slice" % step)
        phases = {e["name"]: e for e in slot["phases"]}
        for must in ("forward", "backward", "optimizer"):
            e = phases.get(must)
            check(e is not None and e["dur"] > 0, "step %d: %s phase %r" % (step, must, e))
    return steps


def main(c, args):
    fake_dir = os.path.abspath(args[args.index("--fake-nvml") + 1]) if "--fake-nvml" in args else None
    if fake_dir:
        name, uuid = FAKE.split("|")[0], FAKE.split("|")[2]
    else:
        gpu = real_gpu()
        if gpu is None:
            print("no CUDA GPU: nvidia-smi lists none and there is no /dev/nvidia0; skipping")
            sys.exit(77)
        name, uuid = gpu
    d = c.start_daemon()
    ck = os.path.join(c.workdir, "checkpoints")
    agent_args = ["--gpus", "auto", "--checkpoint-root", ck]
    if fake_dir:
        with fake_gpus(fake_dir, FAKE):
            agent = c.start_agent("gpu1", devices="cpu:1", extra_args=agent_args)
    else:
        agent = c.start_agent("gpu1", devices="cpu:1", extra_args=agent_args)
    workers = {w["node"]: w for w in wait_workers(d, ["gpu1"])}
    devs = sorted((dev["kind"], dev["index"]) for dev in workers["gpu1"]["devices"])
    check(devs == [("cpu", 0), ("cuda", 0)], "gpu1 advertises %r (one GPU expected)" % workers["gpu1"]["devices"])
    text = agent.logtext()
    check("GPU cuda:0: %s, " % name in text and uuid[:12] in text, "agent log does not name %s %s:\n%s"
          % (name, uuid, text))
    log("agent found GPU cuda:0: %s %s" % (name, uuid))

    job = d.submit(spec())["id"]
    final = d.wait_state(job, {"succeeded", "failed"}, timeout=600)
    check(final["state"] == "succeeded", "job %s: %s (%s)" % (job, final["state"], final.get("state_reason")))
    placed = [e["reason"] for e in d.events(job) if e["type"] == "state" and e.get("to") == "scheduled"]
    check(len(placed) == 1 and "gpu1 [0:cuda0]" in placed[0], "placement events %r" % placed)
    check("spawned rank %s/1/0 of 1 on cuda:0 %s" % (job, uuid[:12]) in agent.logtext(200000),
          "agent log does not show the rank spawned on cuda:0 %s" % uuid[:12])
    rows = d.json("GET", "/v1/jobs/%s/metrics?limit=1000" % job)["metrics"]
    loss = {int(r["step"]): r["loss"] for r in rows if r.get("loss") is not None}
    check(sorted(loss) == list(range(1, STEPS + 1)), "steps reported %s" % sorted(loss))
    check(loss[STEPS] < loss[1] - 0.2, "loss %.4f -> %.4f: not learning" % (loss[1], loss[STEPS]))
    listed = [cp["step"] for cp in d.json("GET", "/v1/jobs/%s/checkpoints" % job)["checkpoints"]]
    check(listed[:2] == [12, 6], "checkpoints %r" % listed)
    log("job %s on cuda:0: loss %.4f -> %.4f, snapshots %s" % (job, loss[1], loss[STEPS], listed))

    st, body = d.request("GET", "/v1/jobs/%s/trace" % job)
    check(st == 200, "GET trace: %s %r" % (st, body[:300]))
    steps = check_trace(json.loads(body))
    durs = {e["name"]: e["dur"] for e in steps[3]["phases"]}
    log("trace: steps %s, forward %.0f us, backward %.0f us at step 3"
        % (sorted(steps), durs["forward"], durs["backward"]))


if __name__ == "__main__":
    run(main)
