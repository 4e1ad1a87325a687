"""Queue limits (issue 22), with the real daemon and real agents.

Write amplification: 200 queued jobs wider than the cluster, then 20 agent
registrations and deaths (10 agents that come and go). The waiting reason
holds no live count, so the events table grows by O(registrations), not by
one `state` event (and one log line) per queued job per registration
(before the fix: 200 x 20 = 4,000 events). The queue cap
(--max-queued-jobs) answers 429 naming the cap; train.steps past 10^9 is a
400 naming the field; dead worker rows are pruned after
--dead-worker-retention-s. `ringctl jobs` shows a name's bidirectional and
C1 controls escaped (\\u202e), never raw."""
import json
import os
import sqlite3
import subprocess
import time

from cluster import check, log, run, tiny_spec, wait_until, wait_workers

N_JOBS = 200
N_FLAPS = 10  # agents that register and die: 20 changes of the cluster
CAP = N_JOBS + 5


def count_events(db):
    c = sqlite3.connect("file:%s?mode=ro" % db, uri=True, timeout=10)
    try:
        return c.execute("SELECT count(*) FROM events").fetchone()[0]
    finally:
        c.close()


def log_lines(d, needle):
    with open(d.log_path, errors="replace") as f:
        return sum(1 for line in f if needle in line)


def main(cluster, args):
    d = cluster.start_daemon(["--heartbeat-ms", "200", "--max-queued-jobs", str(CAP),
                              "--dead-worker-retention-s", "2"])
    cluster.start_agent("base", "cpu:1")
    wait_workers(d, ["base"])

    ids = [d.submit(tiny_spec("wide-%d" % i, 8, 4, 4))["id"] for i in range(N_JOBS - 1)]
    # one name a terminal would show as "evilexe.png" (Trojan Source)
    ids.append(d.submit(tiny_spec("\x9b[1mevil\u202egnp.exe\u2066", 8, 4, 4))["id"])

    def all_waiting():
        return all((d.job(j).get("state_reason") or "").startswith("waiting") for j in ids[-3:])
    wait_until("the queued jobs' waiting reasons", all_waiting, 60)
    time.sleep(1.0)  # a few scheduling passes more: nothing may change
    e0, l0 = count_events(d.db), log_lines(d, "waiting")
    log("%d jobs queued, waiting (%r); %d events" % (N_JOBS, d.job(ids[0])["state_reason"], e0))

    for i in range(N_FLAPS):
        a = cluster.start_agent("flap%d" % i, "cpu:1")
        wait_workers(d, ["base", "flap%d" % i])
        a.stop()
        wait_until("flap%d dead" % i, lambda: not any(
            w["node"] == "flap%d" % i and w["state"] == "alive" for w in d.workers()), 30)
    time.sleep(1.0)
    e1, l1 = count_events(d.db), log_lines(d, "waiting")
    changes = 2 * N_FLAPS
    log("%d registrations and deaths: %d events, %d 'waiting' log lines more" %
        (changes, e1 - e0, l1 - l0))
    check(e1 - e0 <= 2 * changes,
          "%d cluster changes wrote %d events with %d queued jobs: O(jobs x changes), expected "
          "O(changes)" % (changes, e1 - e0, N_JOBS))
    check(l1 - l0 <= 2 * changes, "%d cluster changes logged %d 'waiting' lines" %
          (changes, l1 - l0))

    # The queue cap: CAP - N_JOBS more fit, the next is 429 naming the cap.
    for i in range(CAP - N_JOBS):
        d.submit(tiny_spec("fill-%d" % i, 8, 4, 4))
    st, body = d.request("POST", "/v1/jobs", tiny_spec("one-too-many", 8, 4, 4))
    text = body.decode("utf-8", "replace")
    check(st == 429 and "max_queued_jobs" in text and str(CAP) in text,
          "submission past the cap: %s %s" % (st, text))
    log("job %d refused: %s" % (CAP + 1, json.loads(body).get("detail")))

    # train.steps is bounded (10^9).
    spec = tiny_spec("forever", 1, 4, 4)
    spec["train"]["steps"] = 10 ** 9 + 1
    st, body = d.request("POST", "/v1/jobs", spec)
    text = body.decode("utf-8", "replace")
    check(st == 400 and "train.steps" in text and "1000000000" in text,
          "train.steps 10^9+1: %s %s" % (st, text))
    spec["train"]["steps"] = 10 ** 12
    st, body = d.request("POST", "/v1/jobs", spec)
    check(st == 400, "train.steps 10^12: %s" % st)
    log("train.steps past 10^9 refused: %s" % json.loads(body).get("detail"))

    # ringctl jobs: a name with bidi and C1 controls is shown escaped.
    env = {k: v for k, v in os.environ.items() if k not in ("RINGMASTER_SERVER", "RINGMASTER_TOKEN")}
    if getattr(d, "token", None):
        env["RINGMASTER_TOKEN"] = d.token
    r = subprocess.run([cluster.bins["ringctl"], "--server", d.url, "jobs", "--state", "queued", "--all"],
                       capture_output=True, timeout=60, env=env)
    out = r.stdout.decode("utf-8", "replace")
    check(r.returncode == 0, "ringctl jobs: %d %s" % (r.returncode, r.stderr))
    check("\\u202e" in out and "\\u2066" in out and "\\u009b" in out,
          "ringctl jobs shows the controls escaped: %r" % out[-600:])
    for raw in ("\u202e", "\u2066", "\x9b"):
        check(raw not in out, "ringctl jobs printed %r raw" % raw)
    log("ringctl jobs shows %r" % [l for l in out.splitlines() if "gnp" in l][:1])

    # Dead workers' rows go after --dead-worker-retention-s (2 s here).
    wait_until("dead workers pruned", lambda: {w["node"] for w in d.workers()} == {"base"}, 30)
    log("dead worker rows pruned; left: %s" % [w["node"] for w in d.workers()])


if __name__ == "__main__":
    run(main)
