"""The coordinator dies and comes back: agents notice the silence (no message
for dead_after heartbeat intervals), reconnect with backoff and REGISTER again
listing the ranks they still run; the ranks train on through the outage (the
coordinator is not on the data path) and the job still succeeds.

ringmasterd runs with --heartbeat-ms 200 (dead after 3 misses); it is killed
with SIGKILL while a 2-rank job trains and restarted 1.5 s later on the same
ports and database.

Nothing is lost: the same job run before without an outage gives the
reference. The interrupted job (snapshots every 100 steps) has one metrics
row for every step (rows lost with the coordinator are sent again by rank 0
when the coordinator asks, METRICS_RESEND), each loss bit for bit the
reference's, and the checkpoints it
lists are the reference's (the last 3 snapshot steps), each on disk."""
import os
import re
import time

from cluster import check, log, rank_processes, run, tiny_spec, wait_no_ranks, wait_workers

STEPS = 1500


def spec(name):
    s = tiny_spec(name, 2, 4, STEPS)
    s["checkpoint"] = {"every_steps": 100, "keep_last": 3}
    return s


def checkpoint_steps(d, job_id):
    return [c["step"] for c in d.json("GET", "/v1/jobs/%s/checkpoints" % job_id)["checkpoints"]]


def main(cluster, args):
    d = cluster.start_daemon(["--heartbeat-ms", "200", "--heartbeat-misses", "3"])
    ck = os.path.join(cluster.workdir, "checkpoints")
    agent = cluster.start_agent("r1", "cpu:2", extra_args=["--checkpoint-root", ck])
    wait_workers(d, ["r1"])
    ref = d.submit(spec("reference"))["id"]
    d.wait_state(ref, {"succeeded"}, timeout=240)
    want = d.all_losses(ref)
    check(sorted(want) == list(range(1, STEPS + 1)), "reference run misses steps")
    want_cps = checkpoint_steps(d, ref)
    check(want_cps == [1500, 1400, 1300], "reference checkpoints %r" % want_cps)
    job_id = d.submit(spec("reconnect"))["id"]
    d.wait_state(job_id, {"running"}, timeout=60)
    deadline = time.time() + 60
    while not d.losses(job_id):
        check(time.time() < deadline, "no metrics from job %s" % job_id)
        time.sleep(0.05)
    pids = sorted(rank_processes(job_id))
    check(len(pids) == 2, "rank processes of %s: %r" % (job_id, pids))

    d.kill9()
    t_kill = time.time()
    log("ringmasterd killed while job %s trains (ranks %r)" % (job_id, pids))
    time.sleep(1.5)
    check(sorted(rank_processes(job_id)) == pids, "the ranks did not train on without the coordinator")
    d.start(same_ports=True)
    log("ringmasterd restarted on the same ports %.2f s after the kill" % (time.time() - t_kill))

    # The agent notices the silence, reconnects and registers again, listing
    # both ranks (the restarted coordinator logs what the REGISTER said).
    deadline = time.time() + 60
    while True:
        text = agent.logtext(1000000)
        if text.count("registered with") >= 2 and "2 running rank(s)" in d.logtext(100000):
            break
        check(time.time() < deadline, "agent r1 did not register again with its 2 ranks:\n%s" %
              text[-3000:])
        time.sleep(0.05)
    log("agent r1 registered again %.2f s after the kill, with its 2 ranks" % (time.time() - t_kill))
    check(re.search(r"no word from the coordinator for \d+ ms; reconnecting", text),
          "the agent log does not show the reconnect")
    w = {x["node"]: x for x in d.workers()}.get("r1")
    check(w and w.get("state") == "alive", "GET /v1/workers after the restart: %r" % w)

    job = d.wait_state(job_id, {"succeeded"}, timeout=240)
    log("job %s: %s (%s)" % (job_id, job["state"], job.get("state_reason")))
    wait_no_ranks(job_id, 15)

    got = d.all_losses(job_id)
    missing = sorted(set(range(1, STEPS + 1)) - set(got))
    check(not missing, "%d steps have no metrics row after the outage: %s" % (len(missing), missing[:20]))
    dups = sorted(step for step, losses in got.items() if len(losses) != 1)
    check(not dups, "steps with more than one metrics row: %s" % dups[:20])
    for step, losses in got.items():
        check(all(x == want[step][0] for x in losses),
              "step %d: losses %r, reference %r" % (step, losses, want[step]))
    log("all %d steps have metrics rows, every loss bitwise the reference's" % STEPS)
    cps = checkpoint_steps(d, job_id)
    check(cps == want_cps, "checkpoints after the outage %r, reference %r" % (cps, want_cps))
    for step in cps:
        check(os.path.isdir(os.path.join(ck, job_id, "step-%08d" % step)),
              "checkpoint %d is listed but not on disk" % step)


if __name__ == "__main__":
    run(main)
