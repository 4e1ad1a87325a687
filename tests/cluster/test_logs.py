"""Job logs (docs/coordinator.md "Job logs"): a 2-rank CPU job run by the
real ringmasterd and agent; GET /v1/jobs/{id}/logs returns what the ranks
printed: rank 0's per-step lines on stdout ("step N/M | loss ...") in order,
with the right rank, attempt and stream, seq increasing, and each rank's
stderr lines; ?rank, ?attempt, ?tail and ?since filter and page; bad
parameters get 400 naming the parameter, an unknown job 404. Then a job
whose rank 1 is killed with SIGKILL recovers: the lines of attempt 2 carry
attempt 2 (rank 0 survives in its process and prints attempt 2's steps
from step 1 again), attempt 1's lines stay attempt 1, and every line of
attempt 2 of rank 0 comes after those of attempt 1."""
import json
import os
import re
import signal
import time
import urllib.parse

from cluster import check, log, rank_pid, run, tiny_spec, wait_until, wait_workers

STEP_RE = re.compile(r"^step (\d+)/(\d+) \| loss ")


def logs(d, job, **q):
    path = "/v1/jobs/%s/logs" % job
    if q:
        path += "?" + urllib.parse.urlencode(q)
    st, body = d.request("GET", path)
    check(st == 200, "GET %s: %s %r" % (path, st, body[:300]))
    return json.loads(body)


def all_lines(d, job, **q):
    """Every line, paging with since/next."""
    out, since = [], 0
    while True:
        page = logs(d, job, since=since, **q)
        out += page["lines"]
        check(page["next"] == (page["lines"][-1]["seq"] if page["lines"] else since),
              "next %r after since=%d with %d lines" % (page["next"], since, len(page["lines"])))
        if not page["lines"]:
            return out
        check(len(page["lines"]) <= 1000, "a page of %d lines" % len(page["lines"]))
        since = page["next"]


def settled_lines(d, job):
    """All lines once no new one came for 0.5 s (the agent sends a batch at
    most 200 ms after its first line, and a rank's last before its exit)."""
    prev = all_lines(d, job)
    while True:
        time.sleep(0.5)
        cur = all_lines(d, job)
        if cur == prev:
            return cur
        prev = cur


def step_numbers(lines):
    return [int(STEP_RE.match(l["text"]).group(1)) for l in lines if STEP_RE.match(l["text"])]


def check_shapes(lines):
    prev = 0
    for l in lines:
        check(set(l) == {"seq", "rank", "attempt", "stream", "time", "text"}, "line fields %r" % l)
        check(l["seq"] > prev, "seq not increasing: %r after %d" % (l, prev))
        prev = l["seq"]
        check(l["stream"] in ("stdout", "stderr"), "stream %r" % l)
        check(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$", l["time"]), "time %r" % l)
        check("\n" not in l["text"], "newline in %r" % l)


def bad_params(d, job):
    for q, name in [("rank=-1", "rank"), ("rank=x", "rank"), ("attempt=0", "attempt"),
                    ("tail=0", "tail"), ("tail=10001", "tail"), ("since=-3", "since"),
                    ("since=1.5", "since"), ("follow=2", "follow"), ("bogus=1", "bogus")]:
        st, body = d.request("GET", "/v1/jobs/%s/logs?%s" % (job, q))
        check(st == 400, "?%s: %s %r" % (q, st, body[:200]))
        problem = json.loads(body)
        check(name in problem.get("detail", ""), "?%s: the problem does not name %s: %r" % (q, name, problem))
    st, body = d.request("GET", "/v1/jobs/j-nosuchjob234/logs")
    check(st == 404, "unknown job: %s %r" % (st, body[:200]))


def main(c, _args):
    d = c.start_daemon(["--heartbeat-ms", "200", "--restart-backoff-ms", "100"])
    c.start_agent("n1", devices="cpu:2", extra_args=["--comm-timeout-ms", "5000"])
    wait_workers(d, ["n1"])

    # ---- a job that runs to its end ----
    steps = 12
    job = d.submit(tiny_spec("logs", 2, 4, steps))["id"]
    d.wait_state(job, {"succeeded"}, timeout=180)
    # the job succeeds at its ranks' DONE; their last lines follow within
    # 200 ms (the agent's batch), before their RANK_EXITED
    wait_until("rank 0's last step line of %s" % job,
               lambda: ("step %d/%d" % (steps, steps)) in [l["text"][:len("step %d/%d" % (steps, steps))]
                                                          for l in logs(d, job, rank=0, tail=50)["lines"]], 10)
    wait_until("the ranks of %s gone" % job, lambda: not rank_pid(job, 0) and not rank_pid(job, 1), 30)
    lines = settled_lines(d, job)
    check_shapes(lines)
    r0_out = [l for l in lines if l["rank"] == 0 and l["stream"] == "stdout"]
    check(step_numbers(r0_out) == list(range(1, steps + 1)),
          "rank 0's step lines: %s" % step_numbers(r0_out))
    check(all(l["attempt"] == 1 for l in lines), "attempts %s" % {l["attempt"] for l in lines})
    check(any(l["rank"] == 1 and l["stream"] == "stderr" for l in lines), "no stderr line of rank 1")
    check(not step_numbers([l for l in lines if l["rank"] == 1]), "rank 1 printed steps (it is quiet)")
    log("job %s: %d lines, rank 0 printed steps 1..%d" % (job, len(lines), steps))

    # filters
    r1 = all_lines(d, job, rank=1)
    check(r1 and r1 == [l for l in lines if l["rank"] == 1], "?rank=1 differs from the full list filtered")
    check(all_lines(d, job, attempt=2) == [], "?attempt=2 of a job with one attempt")
    tail = logs(d, job, tail=3)
    check(tail["lines"] == lines[-3:], "?tail=3: %r, want %r" % (tail["lines"], lines[-3:]))
    tail0 = logs(d, job, tail=2, rank=0)
    check(tail0["lines"] == [l for l in lines if l["rank"] == 0][-2:], "?tail=2&rank=0")
    mid = lines[len(lines) // 2]["seq"]
    check(logs(d, job, since=mid)["lines"] == [l for l in lines if l["seq"] > mid], "?since=%d" % mid)
    last = logs(d, job, since=lines[-1]["seq"])
    check(last["lines"] == [] and last["next"] == lines[-1]["seq"], "since the last line: %r" % last)
    check(logs(d, job)["dropped"] == 0, "lines dropped from a quiet job")
    bad_params(d, job)

    # ---- a job whose rank 1 is killed: attempt 2 ----
    job2 = d.submit(tiny_spec("logs-recover", 2, 4, 400, max_restarts=1))["id"]
    wait_until("rank 0 of %s printing step 3" % job2,
               lambda: len(step_numbers(logs(d, job2, rank=0)["lines"])) >= 3, 120)
    pid = wait_until("rank 1 of %s" % job2, lambda: rank_pid(job2, 1), 30)
    os.kill(pid, signal.SIGKILL)
    log("killed rank 1 (pid %d) of %s" % (pid, job2))
    final = d.wait_state(job2, {"succeeded", "failed"}, timeout=300)
    check(final["state"] == "succeeded", "job 2 ended %r" % final)
    wait_until("the ranks of %s gone" % job2, lambda: not rank_pid(job2, 0) and not rank_pid(job2, 1), 30)
    check(int(final.get("attempt") or 0) == 2, "job 2 attempt %r" % final.get("attempt"))
    lines2 = settled_lines(d, job2)
    check_shapes(lines2)
    a1 = [l for l in lines2 if l["attempt"] == 1 and l["rank"] == 0 and l["stream"] == "stdout"]
    a2 = [l for l in lines2 if l["attempt"] == 2 and l["rank"] == 0 and l["stream"] == "stdout"]
    s1, s2 = step_numbers(a1), step_numbers(a2)
    check(s1 and s1 == list(range(1, len(s1) + 1)) and len(s1) < 400, "attempt 1's steps: %s" % s1)
    check(s2 and s2[-1] == 400 and s2 == list(range(s2[0], 401)), "attempt 2's steps: %s" % s2)
    check(a2[0]["seq"] > a1[-1]["seq"], "attempt 2's first line before attempt 1's last")
    check(any(l["attempt"] == 2 and l["rank"] == 1 for l in lines2), "no line of attempt 2's rank 1")
    check(all_lines(d, job2, attempt=2) == [l for l in lines2 if l["attempt"] == 2], "?attempt=2")
    check(all_lines(d, job2, attempt=1, rank=0) == [l for l in lines2 if l["attempt"] == 1 and l["rank"] == 0],
          "?attempt=1&rank=0")
    log("job %s: attempt 1 printed steps 1..%d, attempt 2 steps %d..400" % (job2, s1[-1], s2[0]))


if __name__ == "__main__":
    run(main)
