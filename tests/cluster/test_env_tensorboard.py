"""Per-job environment and TensorBoard files (issue 25) with the real
ringmasterd and agent.

Environment: the agent has defaults from --env and --env-file; a 2-rank job
sets its own env, one name overriding an agent default and one (OMP_*)
new; each rank's log line "ringworker rank: environment: ..." (read back
through GET /v1/jobs/{id}/logs) shows the job's value over the agent's,
the agent's other defaults, and the agent's own OMP_NUM_THREADS (a job
may not set it: 422 with /env/OMP_NUM_THREADS). A program job
(/usr/bin/env, which prints what it sees) gets the same layers with its
program.env on top.

TensorBoard: the agent has --tensorboard-root. A job with
tensorboard.dir "runs" writes <root>/runs/<job>/events.out.tfevents.*; a
job without the section writes <root>/<job>/ (the agent-wide default).
Each file is read with an independent reader (tboard/tbread.py: CRC32C
written in Python, events decoded by protoc's Python code for the
published field numbers): every record's CRCs, the first event's
file_version "brain.Event:2", one event per step 1..N in order, and each
step's loss, lr, grad_norm and tokens_per_s against the job's stored
metrics (REST), and mfu against tflops and the agent's --peak-tflops. The
float32 of
simple_value against the stored double: relative 1e-6 (float32 keeps 24
bits, 6e-8 relative; the margin covers printing)."""
import os
import re
import shutil
import sys

from cluster import Skip, check, log, run, tiny_spec, wait_until, wait_workers

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tboard"))


def env_line(d, job, rank):
    st, body = d.request("GET", "/v1/jobs/%s/logs?rank=%d&tail=200" % (job, rank))
    check(st == 200, "logs of %s: %s" % (job, st))
    import json
    for line in json.loads(body)["lines"]:
        if line["text"].startswith("ringworker rank: environment:"):
            return dict(kv.split("=", 1) for kv in line["text"].split(": ", 2)[2].split(" "))
    return None


PEAK_TFLOPS = 0.001  # a made-up peak, so that the MFU of a tiny CPU model is not 0 in float32


def program_env(d, job):
    """NAME=VALUE lines the program printed, once its last line is there."""
    import json
    st, body = d.request("GET", "/v1/jobs/%s/logs?rank=0&tail=1000" % job)
    check(st == 200, "logs of %s: %s" % (job, st))
    lines = [l["text"] for l in json.loads(body)["lines"] if l["stream"] == "stdout"]
    env = dict(l.split("=", 1) for l in lines if "=" in l)
    return env if "WORLD_SIZE" in env and "NCCL_DEBUG" in env else None


def check_env(d, job):
    for rank in (0, 1):
        env = wait_until("rank %d's environment line of %s" % (rank, job), lambda: env_line(d, job, rank), 20)
        log("rank %d sees %s" % (rank, env))
        check(env.get("NCCL_DEBUG") == "INFO", "the job's NCCL_DEBUG must win over the agent's: %r" % env)
        check(env.get("NCCL_NET_PLUGIN") == "none", "the agent's --env-file default: %r" % env)
        check(env.get("NCCL_SOCKET_IFNAME") == "lo", "the agent's --env default: %r" % env)
        check(env.get("OMP_DISPLAY_ENV") == "FALSE", "the job's own OMP_ variable: %r" % env)
        check(env.get("OMP_NUM_THREADS", "").isdigit(), "the agent's own thread count: %r" % env)


def check_events(d, job, folder, steps):
    import tbread
    files = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    check(len(files) == 1 and re.match(r"^events\.out\.tfevents\.\d+\.[^.]+.*\.\d+\.\d+$", files[0]),
          "one event file in %s, got %r" % (folder, files))
    events = tbread.read_events(os.path.join(folder, files[0]), shutil.which("protoc"))
    check(events[0][2] == "brain.Event:2" and events[0][1] == 0, "first event %r" % (events[0],))
    scalars = events[1:]
    check([e[1] for e in scalars] == list(range(1, steps + 1)),
          "steps %r" % [e[1] for e in scalars])
    check(all(e[2] is None for e in scalars), "a second file_version")
    check(all(e[0] >= events[0][0] - 1 for e in scalars), "wall times before the file's")
    stored = {int(r["step"]): r for r in d.metrics(job)}
    check(len(stored) >= 2, "stored metric rows %r" % sorted(stored))
    for _, step, _, v in scalars:
        check({"loss", "lr", "grad_norm", "tokens_per_s", "tflops", "mfu"} <= set(v),
              "step %d tags %r" % (step, sorted(v)))
        # mfu = tflops / (--peak-tflops x world size): two float32 roundings
        want_mfu = v["tflops"] / (PEAK_TFLOPS * 2)
        check(v["tflops"] > 0 and abs(v["mfu"] - want_mfu) <= 1e-6 * want_mfu,
              "step %d mfu %r, tflops %r" % (step, v["mfu"], v["tflops"]))
        row = stored.get(step)
        if row is None:
            continue
        for tag in ("loss", "lr", "grad_norm", "tokens_per_s"):
            want = row[tag]
            check(abs(v[tag] - want) <= 1e-6 * abs(want) + 1e-12,
                  "step %d %s: event %r, stored %r" % (step, tag, v[tag], want))
        if row.get("val_loss") is not None:
            check(abs(v["val_loss"] - row["val_loss"]) <= 1e-6 * abs(row["val_loss"]),
                  "step %d val_loss: event %r, stored %r" % (step, v.get("val_loss"), row["val_loss"]))
    with_val = [e[1] for e in scalars if "val_loss" in e[3]]
    check(with_val, "no val_loss scalar")
    log("%s: %d events, steps 1..%d, val_loss at %s, losses equal to the stored rows" %
        (files[0], len(events), steps, with_val))


def main(c, _args):
    try:
        import tbread
        tbread.event_class(shutil.which("protoc") or "protoc")
    except (ImportError, OSError, Exception) as e:  # no protoc or python3-protobuf
        raise Skip("protobuf-compiler and python3-protobuf are needed: %s" % e)
    d = c.start_daemon()
    envfile = os.path.join(c.workdir, "ringworker.env")
    with open(envfile, "w") as f:
        f.write("# site defaults for every job\n\nexport NCCL_NET_PLUGIN=none\nNCCL_DEBUG=WARN\n")
    tbroot = os.path.join(c.workdir, "tb")
    c.start_agent("n1", devices="cpu:2",
                  extra_args=["--allow-program", "/usr/bin/env", "--env-file", envfile, "--env", "NCCL_SOCKET_IFNAME=lo",
                              "--tensorboard-root", tbroot, "--peak-tflops", str(PEAK_TFLOPS), "--checkpoint-root", os.path.join(c.workdir, "ckpt")])
    wait_workers(d, ["n1"])

    st, body = d.request("POST", "/v1/jobs", dict(tiny_spec("omp", 2, 4, 4), env={"OMP_NUM_THREADS": "8"}))
    check(st == 422 and b"/env/OMP_NUM_THREADS" in body, "env OMP_NUM_THREADS: %s %r" % (st, body[:300]))

    steps = 8
    spec = tiny_spec("env-tb", 2, 4, steps, eval_every=4)
    spec["env"] = {"NCCL_DEBUG": "INFO", "OMP_DISPLAY_ENV": "FALSE"}
    spec["tensorboard"] = {"dir": "runs"}
    job = d.submit(spec)["id"]
    d.wait_state(job, {"succeeded"}, timeout=180)
    check_env(d, job)
    check_events(d, job, os.path.join(tbroot, "runs", job), steps)

    # a program job: the same layers, program.env on top of the job's env
    # (/usr/bin/env prints what the program sees)
    prog = d.submit({"name": "env-prog", "program": {"argv": ["/usr/bin/env"],
                                                      "env": {"NCCL_DEBUG": "TRACE", "PYTHONHASHSEED": "0"}},
                     "env": {"NCCL_DEBUG": "INFO", "GLOO_SOCKET_IFNAME": "lo"}})["id"]
    d.wait_state(prog, {"succeeded"}, timeout=60)
    seen = wait_until("the program's output", lambda: program_env(d, prog), 20)
    check(seen.get("NCCL_DEBUG") == "TRACE", "program.env over env: %r" % seen.get("NCCL_DEBUG"))
    check(seen.get("GLOO_SOCKET_IFNAME") == "lo" and seen.get("PYTHONHASHSEED") == "0", "the job's env")
    check(seen.get("NCCL_NET_PLUGIN") == "none" and seen.get("NCCL_SOCKET_IFNAME") == "lo", "the agent's defaults")
    check(seen.get("RANK") == "0" and seen.get("WORLD_SIZE") == "1", "torchrun's variables")

    # the agent-wide default: a job without a tensorboard section
    job2 = d.submit(tiny_spec("tb-default", 2, 4, 3, eval_every=3))["id"]
    d.wait_state(job2, {"succeeded"}, timeout=180)
    check_events(d, job2, os.path.join(tbroot, job2), 3)


if __name__ == "__main__":
    run(main)
