"""A user's own PyTorch program under ringmaster (issue 26): the DDP script
tests/cluster/programs/ddp_train.py, written as torchrun's users write it
(env:// init_process_group("gloo"), DistributedSampler, torch.save snapshots
to RINGMASTER_CHECKPOINT_DIR loaded at start, metrics JSON lines on
RINGMASTER_METRICS_FD), run by the real ringmasterd and one real enrolled
agent (2 CPU slots, --allow-program /usr/bin/python3, --data-root holding
the script, --checkpoint-root) as a program job at world size 2:

  (f) argv[0] the agent does not allow (/bin/sh): the job fails, its reason
      says the program is not allowed;
  (a) the job succeeds; GET /v1/jobs/{id}/logs has both ranks' lines (each
      on its own rank: torchrun's environment as the script saw it, past
      init_process_group, done); GET /v1/jobs/{id}/metrics has rank 0's fd
      rows, one per step, each loss the one the script printed;
  (b) the same script, same arguments, under torchrun (--nnodes 1
      --nproc_per_node 2 --max_restarts 3) succeeds too;
  (c) rank 1 killed with SIGKILL after the first snapshot: the whole gang is
      stopped (the old rank 0 process exits) and started again, both ranks
      see TORCHELASTIC_RESTART_COUNT=1 and resume from the snapshot (epoch
      >= 2), the job succeeds;
  (d) ringmasterd killed -9 and restarted on the same ports mid-run: the
      program's processes train on (same pids, no restart) and the job
      succeeds;
  (e) cancel of a job whose ranks have DataLoader worker children: no
      process of the program is left (found by RINGMASTER_JOB_ID in
      /proc/PID/environ), the job is cancelled.

Skipped (77) when /usr/bin/python3 cannot import torch (Debian's
python3-torch). No timing is asserted; waits are generous (2 shared cores)."""
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.parse

from cluster import Skip, check, free_port, log, run, wait_until, wait_workers

PY = "/usr/bin/python3"
HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "programs", "ddp_train.py")
STEPS_PER_EPOCH = 16  # --samples 512 / 2 ranks / --batch-size 16

ENV_RE = re.compile(r"^ddp_train: rank (\d+) pid (\d+) env (.*)$")
STEP_RE = re.compile(r"^ddp_train: rank (\d+) restart (\d+) epoch (\d+) step (\d+) loss ([\d.]+) at ")
RESUME_RE = re.compile(r"^ddp_train: rank (\d+) resumed from snapshot at epoch (\d+) ")


def spec(name, script_args, max_restarts=2, argv0=PY):
    return {"name": name,
            "program": {"argv": [argv0, "ddp_train.py"] + script_args},
            "parallel": {"world_size": 2, "device": "cpu"},
            "restart": {"max_restarts": max_restarts}}


def all_lines(d, job):
    """Every log line of the job so far (paging with since/next)."""
    out, since = [], 0
    while True:
        page = d.json("GET", "/v1/jobs/%s/logs?%s" % (job, urllib.parse.urlencode({"since": since})))
        out += page["lines"]
        if not page["lines"]:
            return out
        since = page["next"]


def settled_lines(d, job):
    """All lines once none came for 1 s (the agent batches them)."""
    prev = all_lines(d, job)
    while True:
        time.sleep(1.0)
        cur = all_lines(d, job)
        if len(cur) == len(prev):
            return cur
        prev = cur


def envs(lines):
    """[(rank field of the line, rank printed, pid, {name: value})] of the
    script's start lines."""
    out = []
    for l in lines:
        m = ENV_RE.match(l["text"])
        if m:
            kv = dict(x.split("=", 1) for x in m.group(3).split(" ") if "=" in x)
            out.append((l["rank"], int(m.group(1)), int(m.group(2)), kv))
    return out


def program_pids(job):
    """Live processes (zombies excluded) whose environment has
    RINGMASTER_JOB_ID=job: the program's ranks and their children."""
    want = ("RINGMASTER_JOB_ID=%s" % job).encode()
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % d, "rb") as f:
                env = f.read().split(b"\0")
            with open("/proc/%s/stat" % d) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if want in env and state != "Z":
            out.append(int(d))
    return sorted(out)


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def has_line(d, job, pattern):
    rx = re.compile(pattern)
    return [l for l in all_lines(d, job) if rx.search(l["text"])]


def check_not_allowed(d):
    """(f) argv[0] the agent does not allow."""
    job = d.submit(spec("not-allowed", [], max_restarts=0, argv0="/bin/sh"))["id"]
    j = d.wait_state(job, {"failed"}, timeout=120)
    reasons = [j.get("state_reason") or ""] + [e.get("reason") or "" for e in d.events(job)]
    log("not allowed: %r" % reasons[0])
    check(any("allow" in r.lower() for r in reasons),
          "the failure of a /bin/sh program does not say it is not allowed: %r" % reasons)
    check(not program_pids(job), "a process of the refused program exists")


def check_success(d, args):
    """(a) to success; logs and metrics. Returns the last loss of rank 0."""
    job = d.submit(spec("ddp-ok", args))["id"]
    d.wait_state(job, {"succeeded"}, timeout=300)
    lines = settled_lines(d, job)
    seen = envs(lines)
    check(sorted(r for _, r, _, _ in seen) == [0, 1], "start lines of ranks %r" % [s[:2] for s in seen])
    for field_rank, rank, _, env in seen:
        check(field_rank == rank, "rank %d's start line is on rank %r's log" % (rank, field_rank))
        for k, v in (("RANK", str(rank)), ("LOCAL_RANK", str(rank)), ("WORLD_SIZE", "2"),
                     ("LOCAL_WORLD_SIZE", "2"), ("GROUP_RANK", "0"), ("ROLE_RANK", str(rank)),
                     ("ROLE_WORLD_SIZE", "2"), ("TORCHELASTIC_RESTART_COUNT", "0"),
                     ("TORCHELASTIC_MAX_RESTARTS", "2"), ("TORCHELASTIC_RUN_ID", job),
                     ("TORCHELASTIC_USE_AGENT_STORE", "False"), ("RINGMASTER_JOB_ID", job)):
            check(env.get(k) == v, "rank %d saw %s=%r, expected %r" % (rank, k, env.get(k), v))
        for k in ("MASTER_ADDR", "MASTER_PORT", "RINGMASTER_CHECKPOINT_DIR", "RINGMASTER_METRICS_FD"):
            check(env.get(k), "rank %d did not see %s: %r" % (rank, k, env))
        check(29500 <= int(env["MASTER_PORT"]) <= 29999, "MASTER_PORT %s" % env["MASTER_PORT"])
    for rank in (0, 1):
        for what in ("init_process_group done", "done: %d steps" % (4 * STEPS_PER_EPOCH)):
            check(any(l["rank"] == rank and ("rank %d %s" % (rank, what)) in l["text"] for l in lines),
                  "rank %d's log has no %r line" % (rank, what))
    printed = {}
    for l in lines:
        m = STEP_RE.match(l["text"])
        if m and m.group(1) == "0":
            printed[int(m.group(4))] = float(m.group(5))
    check(sorted(printed) == list(range(1, 4 * STEPS_PER_EPOCH + 1)), "rank 0 printed steps %r" % sorted(printed))
    rows = d.all_losses(job)
    check(sorted(rows) == sorted(printed), "metrics steps %r, printed %r" % (sorted(rows), sorted(printed)))
    for step, losses in rows.items():
        check(len(losses) == 1 and abs(losses[0] - printed[step]) < 2e-6,
              "step %d: metrics %r, printed %r" % (step, losses, printed[step]))
    tps = [r.get("tokens_per_s") for r in d.metrics(job)]
    check(any(x and x > 0 for x in tps), "no tokens_per_s in the metrics rows: %r" % tps[:5])
    log("job %s: both ranks logged, %d metrics rows from the fd" % (job, len(rows)))
    return printed[max(printed)]


def check_torchrun(args, workdir):
    """(b) the same script under torchrun."""
    folder = os.path.join(workdir, "torchrun")
    os.makedirs(folder)
    cmd = [PY, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
           "--max_restarts", "3", "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
           # Debian's torch 1.13 on Python 3.11 fails with --redirects 0 (the default)
           "--redirects", "2", "--tee", "1", "--log_dir", os.path.join(folder, "logs"),
           SCRIPT] + args
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for k in [k for k in env if k.startswith("RINGMASTER_")]:
        del env[k]
    p = subprocess.run(cmd, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=300)
    out = p.stdout.decode("utf-8", "replace")
    check(p.returncode == 0, "torchrun exited %d:\n%s" % (p.returncode, out[-3000:]))
    for rank in (0, 1):
        check("ddp_train: rank %d done: %d steps" % (rank, 4 * STEPS_PER_EPOCH) in out,
              "torchrun: rank %d did not finish:\n%s" % (rank, out[-3000:]))
    check(os.path.exists(os.path.join(folder, "snapshot", "snapshot.pt")), "torchrun: no snapshot")
    m = re.findall(r"rank 0 restart 0 epoch \d+ step %d loss ([\d.]+)" % (4 * STEPS_PER_EPOCH), out)
    log("torchrun run succeeded, last loss %s" % m)


def check_rank_killed(d):
    """(c) rank 1 killed after the first snapshot: the gang restarts and
    resumes from it."""
    job = d.submit(spec("ddp-kill", ["--epochs", "8", "--step-sleep", "0.05"]))["id"]
    wait_until("job %s's first snapshot" % job,
               lambda: has_line(d, job, r"^ddp_train: rank 0 snapshot saved at epoch 2 "), 240)
    first = envs(all_lines(d, job))
    pids = {rank: pid for _, rank, pid, env in first if env.get("TORCHELASTIC_RESTART_COUNT") == "0"}
    check(sorted(pids) == [0, 1], "start lines of attempt 1: %r" % first)
    with open("/proc/%d/environ" % pids[1], "rb") as f:
        penv = f.read().split(b"\0")
    check(("RINGMASTER_JOB_ID=%s" % job).encode() in penv and b"RANK=1" in penv,
          "pid %d is not rank 1 of %s" % (pids[1], job))
    os.kill(pids[1], signal.SIGKILL)
    log("rank 1 of %s (pid %d) killed after the epoch 2 snapshot" % (job, pids[1]))
    wait_until("a step of the restarted gang", lambda: has_line(d, job, r"^ddp_train: rank \d restart 1 "), 240)
    wait_until("the old rank 0 (pid %d) to be stopped" % pids[0], lambda: not alive(pids[0]), 60)
    j = d.wait_state(job, {"succeeded"}, timeout=300)
    lines = settled_lines(d, job)
    again = [(rank, env) for _, rank, _, env in envs(lines) if env.get("TORCHELASTIC_RESTART_COUNT") == "1"]
    check(sorted(r for r, _ in again) == [0, 1], "ranks started with TORCHELASTIC_RESTART_COUNT=1: %r" % again)
    check(not [1 for _, _, _, env in envs(lines) if env.get("TORCHELASTIC_RESTART_COUNT") not in ("0", "1")],
          "more than one restart")
    resumed = {}
    for l in lines:
        m = RESUME_RE.match(l["text"])
        if m:
            resumed[int(m.group(1))] = int(m.group(2))
    check(sorted(resumed) == [0, 1] and resumed[0] == resumed[1] and resumed[0] >= 2,
          "resumed from snapshot at epochs %r" % resumed)
    after = [int(m.group(3)) for m in (STEP_RE.match(l["text"]) for l in lines) if m and m.group(2) == "1"]
    check(after and min(after) == resumed[0], "the restarted gang's first epoch %r, snapshot %d" %
          (min(after) if after else None, resumed[0]))
    for rank in (0, 1):
        check(any(("ddp_train: rank %d done: %d steps" % (rank, 8 * STEPS_PER_EPOCH)) in l["text"] for l in lines),
              "rank %d did not finish after the restart" % rank)
    log("job %s: restarted once (%s), resumed at epoch %d, succeeded" % (job, j.get("state_reason"), resumed[0]))


def check_coordinator_killed(d):
    """(d) ringmasterd killed -9 and restarted: the program goes on."""
    # 6 epochs of 16 steps at 0.1 s: about 10 s, which outlasts the kill, the
    # 1.5 s check and the restart with room to spare
    job = d.submit(spec("ddp-outage", ["--epochs", "6", "--step-sleep", "0.1"]))["id"]
    wait_until("both ranks stepping", lambda: len({l["rank"] for l in has_line(d, job, r" restart 0 epoch ")}) == 2, 240)
    pids = program_pids(job)
    check(len(pids) == 2, "program processes of %s: %r" % (job, pids))
    d.kill9()
    log("ringmasterd killed while program job %s runs (pids %r)" % (job, pids))
    time.sleep(1.5)
    check(program_pids(job) == pids, "the program did not run on without the coordinator: %r" % program_pids(job))
    d.start(same_ports=True)
    log("ringmasterd restarted on the same ports")
    d.wait_state(job, {"succeeded"}, timeout=300)
    lines = settled_lines(d, job)
    check(not [1 for _, _, _, env in envs(lines) if env.get("TORCHELASTIC_RESTART_COUNT") != "0"],
          "the program was restarted after the coordinator's restart")
    log("job %s succeeded across the coordinator's restart" % job)


def check_cancel(d):
    """(e) cancel leaves no process of the program (ranks and children)."""
    job = d.submit(spec("ddp-cancel", ["--epochs", "100", "--step-sleep", "0.1", "--num-workers", "1"]))["id"]
    wait_until("both ranks stepping", lambda: len({l["rank"] for l in has_line(d, job, r" restart 0 epoch ")}) == 2, 240)
    pids = program_pids(job)
    check(len(pids) >= 4, "ranks and DataLoader workers of %s: %r" % (job, pids))
    d.json("POST", "/v1/jobs/%s/cancel" % job, {})
    d.wait_state(job, {"cancelled"}, timeout=60)
    wait_until("no process of %s left (%r)" % (job, pids), lambda: not program_pids(job), 60)
    log("job %s cancelled; its %d processes are gone" % (job, len(pids)))


def main(cluster, args):
    if subprocess.run([PY, "-c", "import torch, torch.distributed"], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode != 0:
        raise Skip("%s cannot import torch (apt-get install python3-torch)" % PY)
    shutil.copy(SCRIPT, os.path.join(cluster.data_root, "ddp_train.py"))
    d = cluster.start_daemon(["--heartbeat-ms", "200", "--heartbeat-misses", "3",
                              "--restart-backoff-ms", "100"])
    ck = os.path.join(cluster.workdir, "checkpoints")
    cluster.start_agent("p1", "cpu:2", extra_args=["--allow-program", PY, "--checkpoint-root", ck])
    wait_workers(d, ["p1"])
    check_not_allowed(d)
    args4 = ["--epochs", "4", "--save-every", "2"]
    check_success(d, args4)
    check_torchrun(args4, tempfile.mkdtemp(dir=cluster.workdir))
    check_rank_killed(d)
    check_coordinator_killed(d)
    check_cancel(d)
    for j in d.json("GET", "/v1/jobs")["jobs"]:
        check(not program_pids(j["id"]), "job %s left processes" % j["id"])


if __name__ == "__main__":
    run(main)
