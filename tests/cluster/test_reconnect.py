"""The coordinator dies and comes back: agents notice the silence (no message
for dead_after heartbeat intervals), reconnect with backoff and REGISTER again
listing the ranks they still run; the ranks train on through the outage (the
coordinator is not on the data path) and the job still succeeds.

ringmasterd runs with --heartbeat-ms 200 (dead after 3 misses); it is killed
with SIGKILL while a 2-rank job trains and restarted 1.5 s later on the same
ports and database."""
import re
import time

from cluster import check, log, rank_processes, run, tiny_spec, wait_no_ranks, wait_workers

STEPS = 1500


def main(cluster, args):
    d = cluster.start_daemon(["--heartbeat-ms", "200", "--heartbeat-misses", "3"])
    agent = cluster.start_agent("r1", "cpu:2")
    wait_workers(d, ["r1"])
    job_id = d.submit(tiny_spec("reconnect", 2, 4, STEPS))["id"]
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


if __name__ == "__main__":
    run(main)
