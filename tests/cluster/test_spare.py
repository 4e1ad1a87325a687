"""A node stops and a spare takes over (issue 6): two agents with two CPU
slots each and a checkpoint root; a 2-rank job (snapshots every 10 steps,
max_restarts 2) is placed on one of them. That agent is stopped with
SIGSTOP (its ranks go on running, as on a node whose agent hangs): after
the heartbeat timeout the coordinator declares the node lost, aborts the
old ranks, and places the job again on the spare agent, which resumes it
from the latest committed snapshot. The job succeeds there, its losses are
bit for bit those of the same job run without a fault, and no rank process
is left behind on either node.
"""
import os
import signal
import time

from cluster import Failure, check, log, rank_processes, run, tiny_spec, wait_no_ranks, wait_workers

STEPS = 400


def spec(name):
    s = tiny_spec(name, world_size=2, batch_size=4, steps=STEPS, seed=5, max_restarts=2)
    s["checkpoint"] = {"every_steps": 10, "keep_last": 2}
    return s


def main(c, _args):
    d = c.start_daemon(["--heartbeat-ms", "200", "--heartbeat-misses", "3", "--restart-backoff-ms", "100"])
    ck = os.path.join(c.workdir, "checkpoints")
    a1 = c.start_agent("n1", devices="cpu:2", extra_args=["--checkpoint-root", ck])
    wait_workers(d, ["n1"])

    ref = d.submit(spec("reference"))["id"]
    d.wait_state(ref, {"succeeded"}, timeout=300)
    want = d.all_losses(ref)

    a2 = c.start_agent("n2", devices="cpu:2", extra_args=["--checkpoint-root", ck])
    wait_workers(d, ["n1", "n2"])
    job = d.submit(spec("spare"))["id"]
    d.wait_state(job, {"running"}, timeout=60)
    placed = {r["node"] for r in d.job(job)["ranks"]}
    check(len(placed) == 1, "the job is spread over %s" % placed)
    node = placed.pop()
    stopped, spare = (a1, "n2") if node == "n1" else (a2, "n1")
    deadline = time.time() + 120
    while not d.json("GET", "/v1/jobs/%s/checkpoints" % job)["checkpoints"]:
        check(time.time() < deadline, "no checkpoint committed")
        time.sleep(0.02)
    os.kill(stopped.proc.pid, signal.SIGSTOP)
    t_stop = time.time()
    log("SIGSTOP to agent %s (job %s on it)" % (stopped.node, job))
    try:
        deadline = time.time() + 120
        while not [e for e in d.events(job) if e.get("type") == "recovered"]:
            check(time.time() < deadline, "no recovery within 120 s")
            time.sleep(0.05)
        ev = [e for e in d.events(job) if e.get("type") == "recovered"][0]
        log("%.2f s after SIGSTOP: %s" % (time.time() - t_stop, ev["reason"]))
        check("lost" in ev["reason"], "the cause is not the lost node: %r" % ev["reason"])
        nodes = {r["node"] for r in d.job(job)["ranks"]}
        check(nodes == {spare}, "the new attempt runs on %s, not the spare %s" % (nodes, spare))
        final = d.wait_state(job, {"succeeded"}, timeout=300)
        check(final["restarts"] == 1, "restarts %r" % final["restarts"])
    finally:
        os.kill(stopped.proc.pid, signal.SIGCONT)
    got = d.all_losses(job)
    check(sorted(got) == list(range(1, STEPS + 1)), "steps missing: %s" %
          sorted(set(range(1, STEPS + 1)) - set(got))[:20])
    for step, ls in got.items():
        check(all(x == want[step][0] for x in ls), "step %d: %r, reference %r" % (step, ls, want[step]))
    log("every loss of the %d steps, before and after the move, is the reference's" % STEPS)
    wait_no_ranks(job, 30)
    check(not rank_processes(job), "rank processes left: %r" % rank_processes(job))


if __name__ == "__main__":
    run(main)
