"""End to end: a coordinator, two agents as separate processes (cpu:2 each),
a 2-rank job submitted with ringctl and a 4-rank job submitted with curl.
Both must succeed with their metrics and events stored; GET /v1/workers
(and `ringctl workers`) show both nodes; no rank process is left behind."""
import json
import os
import re
import subprocess
import time

from cluster import check, log, run, tiny_spec, wait_no_ranks, wait_workers

STEPS = 12


def wait_clean_exits(cluster, job_id, world_size, timeout=15):
    """Every rank of the job exited with status 0, as its agent logged."""
    pat = re.compile(r"rank %s/\d+/(\d+) \(pid \d+\) exited with status 0" % re.escape(job_id))
    deadline = time.time() + timeout
    while True:
        ranks = set()
        for a in cluster.agents:
            ranks |= {int(r) for r in pat.findall(a.logtext(1000000))}
        if ranks == set(range(world_size)):
            return
        check(time.time() < deadline, "job %s: ranks %s exited with status 0, expected all %d" %
              (job_id, sorted(ranks), world_size))
        time.sleep(0.05)


def check_job(d, job_id, world_size):
    job = d.wait_state(job_id, {"succeeded"}, timeout=180)
    log("job %s (world %d) succeeded: %s" % (job_id, world_size, job.get("state_reason")))
    losses = d.losses(job_id)
    check(sorted(losses) == list(range(1, STEPS + 1)),
          "job %s: metrics for steps %s, expected 1..%d" % (job_id, sorted(losses), STEPS))
    check(all(isinstance(v, float) and 0 < v < 10 for v in losses.values()),
          "job %s: odd losses %r" % (job_id, losses))
    check(losses[STEPS] < losses[1], "job %s: loss did not fall: %r" % (job_id, losses))
    events = d.events(job_id)
    tos = [e.get("to") for e in events]
    for state in ("queued", "scheduled", "running", "succeeded"):
        check(state in tos, "job %s: no event into %s: %r" % (job_id, state, tos))
    # The ranks exit right after DONE (they need not have when the job is
    # marked succeeded); none may linger.
    wait_no_ranks(job_id, 15)


def main(cluster, args):
    d = cluster.start_daemon()
    cluster.start_agent("n1", "cpu:2")
    cluster.start_agent("n2", "cpu:2")
    wait_workers(d, ["n1", "n2"])

    ctl = cluster.bins["ringctl"]
    env = d.ctl_env()

    # A 2-rank job with ringctl.
    spec2 = os.path.join(cluster.workdir, "two.json")
    with open(spec2, "w") as f:
        json.dump(tiny_spec("e2e-two", 2, 4, STEPS), f)
    p = subprocess.run([ctl, "submit", "--quiet", spec2], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=30)
    check(p.returncode == 0, "ringctl submit: %s" % p.stdout.decode())
    job2 = p.stdout.decode().strip()

    # A 4-rank job with curl.
    p = subprocess.run(["curl", "-sS", "-X", "POST", "-H", "Content-Type: application/json",
                        "-H", "Authorization: Bearer " + d.token,
                        "--data-binary", json.dumps(tiny_spec("e2e-four", 4, 2, STEPS)),
                        d.url + "/v1/jobs"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=30)
    check(p.returncode == 0, "curl POST /v1/jobs: %s" % p.stdout.decode())
    job4 = json.loads(p.stdout)["id"]
    log("submitted %s (2 ranks) and %s (4 ranks)" % (job2, job4))

    t0 = time.time()
    check_job(d, job2, 2)
    check_job(d, job4, 4)
    wait_clean_exits(cluster, job2, 2)
    wait_clean_exits(cluster, job4, 4)
    log("both jobs done in %.1f s" % (time.time() - t0))

    # The 4-rank job needs both nodes (2 slots each): both agents spawned ranks.
    for a in cluster.agents:
        check("spawned rank %s/" % job4 in a.logtext(100000),
              "agent %s spawned no rank of %s" % (a.node, job4))

    workers = {w["node"]: w for w in d.workers()}
    check({"n1", "n2"} <= set(workers), "GET /v1/workers: %r" % workers)
    for n in ("n1", "n2"):
        check(len(workers[n].get("devices", [])) == 2, "worker %s devices: %r" % (n, workers[n]))
    p = subprocess.run([ctl, "workers"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=30)
    out = p.stdout.decode()
    check(p.returncode == 0 and "n1" in out and "n2" in out, "ringctl workers:\n%s" % out)
    check(d.proc.poll() is None, "ringmasterd died")
    for a in cluster.agents:
        check(a.proc.poll() is None, "agent %s died: %s" % (a.node, a.logtext()))
    # A clean stop: SIGTERM, exit 0.
    for a in cluster.agents:
        rc = a.stop()
        check(rc == 0, "agent %s exited %s after SIGTERM" % (a.node, rc))


if __name__ == "__main__":
    run(main)
