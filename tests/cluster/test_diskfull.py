"""A full disk under the snapshots (DESIGN.md's fault table: "snapshot write
torn / disk full: previous snapshot stays latest; job event; never resumes
from a torn snapshot"), through the whole system: the real ringmasterd, one
agent with two CPU slots whose --checkpoint-root is a tmpfs mounted small
enough for one snapshot of the job and not two.

A 2-rank job snapshots every 10 steps: step 10 commits; from step 20 on the
writes fail with ENOSPC (one rank's or both: "disk full writing ..."), so those snapshots never
commit, the job gets a `snapshot_failed` event naming the step and the
error, and GET /v1/jobs/{id}/checkpoints still lists step 10 alone. Then a
rank is killed -9: the job recovers from step 10 (not from a torn later
one) and succeeds, every loss bitwise the uninterrupted run's. Needs root
(mount); else skipped with status 77.
"""
import os
import signal
import subprocess

from cluster import Skip, check, log, rank_pid, run, tiny_spec, wait_until, wait_workers

STEPS = 60
TMPFS_KIB = 2048


def spec(name):
    s = tiny_spec(name, world_size=2, batch_size=4, steps=STEPS, seed=3, max_restarts=2)
    # about 120k parameters: a snapshot (fp32 params, Adam m and v) is ~1.4 MB
    # in two shards; the tmpfs holds one and not two
    s["model"] = {"n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 256, "seq_len": 64}
    s["checkpoint"] = {"every_steps": 10, "keep_last": 1}
    return s


def last_step(d, job_id):
    return max(d.losses(job_id) or [0])


def main(c, _args):
    ck = os.path.join(c.workdir, "small-disk")
    os.makedirs(ck)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dk" % TMPFS_KIB, "tmpfs", ck],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        raise Skip("cannot mount a tmpfs (needs root): %s" % r.stdout.decode().strip())
    try:
        run_on(c, ck)
    finally:
        c.stop()
        subprocess.run(["umount", "-l", ck])


def run_on(c, ck):
    d = c.start_daemon(["--heartbeat-ms", "200", "--restart-backoff-ms", "100"])
    c.start_agent("n1", devices="cpu:2", extra_args=["--checkpoint-root", ck])
    wait_workers(d, ["n1"])

    # the uninterrupted run; its snapshots fail from step 20 on too, which
    # changes no loss
    ref = d.submit(spec("reference"))["id"]
    d.wait_state(ref, {"succeeded"}, timeout=300)
    want = d.losses(ref)
    check(sorted(want) == list(range(1, STEPS + 1)), "reference steps %s" % sorted(want))
    subprocess.run(["rm", "-rf", os.path.join(ck, ref)])

    job = d.submit(spec("full"))["id"]
    ev = wait_until("a snapshot_failed event of %s" % job,
                    lambda: [e for e in d.events(job) if e.get("type") == "snapshot_failed"], 120)[0]
    text = ev.get("reason") or ""
    log("event: %s" % text)
    check(text.startswith("snapshot of step 20 failed on rank ") and "disk full writing " in text
          and "the latest committed snapshot stays step 10" in text,
          "snapshot_failed names the step, the error and the snapshot kept: %r" % text)
    wait_until("step 35 of %s" % job, lambda: last_step(d, job) >= 35, 120)
    cps = [cp["step"] for cp in d.json("GET", "/v1/jobs/%s/checkpoints" % job)["checkpoints"]]
    check(cps == [10], "only step 10 is committed: %r" % cps)
    committed = sorted(n for n in os.listdir(os.path.join(ck, job)) if not n.endswith(".tmp"))
    check(committed == ["step-00000010"], "committed folders on the full disk: %r" % committed)

    pid = wait_until("rank 1 of %s" % job, lambda: rank_pid(job, 1), 30)
    os.kill(pid, signal.SIGKILL)
    log("killed rank 1 (pid %d) at step %d" % (pid, last_step(d, job)))
    rec = wait_until("recovery of %s" % job,
                     lambda: [e for e in d.events(job) if e.get("type") == "recovered"], 120)[0]
    log("event: %s" % rec.get("reason"))
    check("resumed from snapshot step 10 " in (rec.get("reason") or ""),
          "resumed from the last committed snapshot: %r" % rec)
    d.wait_state(job, {"succeeded"}, timeout=300)
    for step, losses in d.all_losses(job).items():
        for loss in losses:
            check(loss == want[step], "step %d: loss %r, uninterrupted %r" % (step, loss, want[step]))
    log("the job succeeded on a full disk; every loss is the uninterrupted run's")


if __name__ == "__main__":
    run(main)
