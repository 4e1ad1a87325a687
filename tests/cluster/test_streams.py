"""Server-Sent Events (docs/coordinator.md "Live streams") with the real
ringmasterd (--max-streams 4, --stream-keepalive-ms 500) and agent, and a
2-rank CPU job:
- GET /v1/jobs/{id}/stream, cut after a few events and resumed with
  Last-Event-ID, loses and repeats nothing: its events, metrics rows and
  log lines are contiguous runs of the REST lists (the metrics up to the
  last step), the ids strictly increase, and it ends with `end` once the
  job succeeds, then the server closes it;
- a stream opened on a finished job sends `state` and `end` at once and
  closes; a Last-Event-ID the server never issued gets `reset`;
- GET /v1/stream carries `job` objects for the job's changes and a
  `worker` object (as GET /v1/workers shows it) when an agent registers;
- GET /v1/jobs/{id}/logs?follow=1 on a finished job (also one with more
  than a page of 1000 stored lines) sends its lines as
  `log` events, then `end`;
- the cap holds: with 4 open the 5th gets 503 with Retry-After, and /metrics
  shows ringmaster_http_streams_open and ..._rejected_total;
- an idle stream gets `: keep-alive` comments;
- SIGTERM with a stream open: the stream ends and ringmasterd exits 0."""
import http.client
import json
import socket
import time

from cluster import check, log, run, tiny_spec, wait_workers


class Sse:
    """One open SSE response, read frame by frame."""

    def __init__(self, d, path, last_event_id=None, timeout=30):
        self.conn = http.client.HTTPConnection(d.http_host, d.port, timeout=timeout)
        headers = dict(d.auth_headers(), Accept="text/event-stream")
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        self.conn.request("GET", path, headers=headers)
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.comments = 0
        self.closed = False

    def next(self):
        """The next frame {id, event, data} (None at the end of the stream)."""
        frame = {}
        while True:
            line = self.resp.readline()
            if not line:
                self.closed = True
                return None
            line = line.decode().rstrip("\n")
            if line == "":
                if frame:
                    return frame
                continue
            if line.startswith(":"):
                self.comments += 1
                continue
            k, _, v = line.partition(": ")
            if k == "id":
                frame["id"] = int(v)
            elif k == "event":
                frame["event"] = v
            elif k == "data":
                frame["data"] = json.loads(v)

    def close(self):
        self.conn.close()


def contiguous_run(part, whole, what):
    """`part` must equal whole[i:i+len(part)] for some i; returns i."""
    if not part:
        return 0
    for i, x in enumerate(whole):
        if x == part[0]:
            check(whole[i:i + len(part)] == part, "%s: the stream's %d items are not a contiguous run of the "
                  "REST list (%d items) from index %d" % (what, len(part), len(whole), i))
            return i
    raise AssertionError("%s: %r not in the REST list" % (what, part[0]))


def main(c, _args):
    d = c.start_daemon(["--max-streams", "4", "--stream-keepalive-ms", "500"])
    c.start_agent("s1", devices="cpu:2")
    wait_workers(d, ["s1"])

    g = Sse(d, "/v1/stream")
    check(g.status == 200, "GET /v1/stream: %s" % g.status)
    c.start_agent("s2", devices="cpu:1")  # its registration is a `worker` event
    wait_workers(d, ["s1", "s2"])
    steps = 60
    job = d.submit(tiny_spec("streams", 2, 4, steps))["id"]

    # ---- a job stream cut and resumed ----
    s1 = Sse(d, "/v1/jobs/%s/stream" % job)
    check(s1.status == 200, "GET stream: %s" % s1.status)
    frames = []
    first = s1.next()
    check(first["event"] == "state" and first["data"]["job"] == job, "the first frame %r" % first)
    while True:
        f = s1.next()
        check(f is not None, "stream 1 ended early")
        frames.append(f)
        if f["event"] == "metrics" and f["data"]["step"] >= 5:
            break
    s1.close()
    cut = frames[-1]["id"]
    log("stream 1 cut after %d frames at id %d" % (len(frames), cut))
    time.sleep(0.3)  # a few steps go by unseen
    s2 = Sse(d, "/v1/jobs/%s/stream" % job, last_event_id=cut)
    while True:
        f = s2.next()
        check(f is not None, "stream 2 closed before `end`")
        frames.append(f)
        if f["event"] == "end":
            break
    check(frames[-1]["data"] == {"job": job, "state": "succeeded"}, "end %r" % frames[-1])
    check(s2.next() is None, "stream 2 still open after `end`")
    ids = [f["id"] for f in frames]
    check(all(a < b for a, b in zip(ids, ids[1:])), "ids not strictly increasing: %s" % ids)
    check({f["event"] for f in frames} <= {"state", "event", "metrics", "log", "end"},
          "event types %s" % {f["event"] for f in frames})

    rest_metrics = d.json("GET", "/v1/jobs/%s/metrics?limit=10000" % job)["metrics"]
    got_metrics = [f["data"] for f in frames if f["event"] == "metrics"]
    i = contiguous_run(got_metrics, rest_metrics, "metrics")
    check(i + len(got_metrics) == len(rest_metrics), "metrics: the stream missed the last rows")
    check(got_metrics[-1]["step"] == steps, "last metrics step %r" % got_metrics[-1]["step"])
    rest_events = d.events(job)
    got_events = [f["data"] for f in frames if f["event"] == "event"]
    i = contiguous_run(got_events, rest_events, "events")
    check(i + len(got_events) == len(rest_events), "events: the stream missed the last ones")
    states = [f["data"]["state"] for f in frames if f["event"] == "state"]
    check(states[-1] == "succeeded", "states %s" % states)
    time.sleep(1)
    rest_lines = d.json("GET", "/v1/jobs/%s/logs" % job)["lines"]
    got_lines = [f["data"] for f in frames if f["event"] == "log"]
    check(got_lines, "no log line on the stream")
    contiguous_run(got_lines, rest_lines, "log lines")
    log("streams 1+2: %d metrics rows (to step %d), %d events, %d log lines, no gap, no repeat" %
        (len(got_metrics), steps, len(got_events), len(got_lines)))

    # ---- a finished job: state and end at once ----
    s3 = Sse(d, "/v1/jobs/%s/stream" % job)
    a, b = s3.next(), s3.next()
    check(a["event"] == "state" and a["data"]["state"] == "succeeded", "finished job, first frame %r" % a)
    check(b["event"] == "end" and b["data"]["state"] == "succeeded", "finished job, second frame %r" % b)
    check(s3.next() is None, "the stream of a finished job stays open")
    s4 = Sse(d, "/v1/jobs/%s/stream" % job, last_event_id=10 ** 12)
    f = s4.next()
    check(f["event"] == "reset", "an id the server never issued: %r" % f)
    s4.close()

    # ---- logs follow=1 of a finished job ----
    s5 = Sse(d, "/v1/jobs/%s/logs?follow=1&rank=0" % job)
    check(s5.status == 200, "follow=1: %s" % s5.status)
    lines = []
    while True:
        f = s5.next()
        check(f is not None, "follow=1 closed without `end`")
        if f["event"] == "end":
            break
        check(f["event"] == "log", "follow=1 sent %r" % f)
        lines.append(f["data"])
    check(lines == [l for l in d.json("GET", "/v1/jobs/%s/logs?rank=0" % job)["lines"]], "follow=1 lines")
    check(s5.next() is None, "follow=1 stays open after end")

    # ---- follow=1 of a job with more stored lines than one page (1000) ----
    long_job = d.submit(tiny_spec("streams-long", 1, 4, 1200))["id"]
    d.wait_state(long_job, {"succeeded"}, timeout=300)

    def all_stored():
        lines, since = [], 0
        while True:
            page = d.json("GET", "/v1/jobs/%s/logs?since=%d" % (long_job, since))
            if not page["lines"]:
                return lines
            lines += page["lines"]
            since = page["next"]
    # the agent forwards a rank's last lines after the job's state changed:
    # wait until the stored lines stop growing
    stored = all_stored()
    deadline = time.time() + 30
    while time.time() < deadline:
        time.sleep(1)
        again = all_stored()
        if len(again) == len(stored):
            break
        stored = again
    check(len(stored) > 1000, "the long job stored only %d lines" % len(stored))
    s6 = Sse(d, "/v1/jobs/%s/logs?follow=1" % long_job)
    followed = []
    while True:
        f = s6.next()
        check(f is not None, "follow=1 of the long job closed without `end`")
        if f["event"] == "end":
            break
        followed.append(f["data"])
    s6.close()
    check(followed == stored, "follow=1 sent %d lines, %d stored (first seq %r / %r, last %r / %r)"
          % (len(followed), len(stored), followed[0]["seq"] if followed else None, stored[0]["seq"],
             followed[-1]["seq"] if followed else None, stored[-1]["seq"]))
    log("follow=1 of a finished job with %d stored lines sent each once" % len(stored))

    # ---- the global stream ----
    seen, workers = [], []
    while True:
        f = g.next()
        check(f is not None, "the global stream closed")
        check(f["event"] in ("job", "worker"), "global event %r" % f)
        if f["event"] == "worker":
            workers.append(f["data"])
        if f["event"] == "job" and f["data"]["id"] == job:
            seen.append(f["data"]["state"])
            if f["data"]["state"] == "succeeded":
                break
    check("running" in seen, "global stream states of the job: %s" % seen)
    rest_s2 = [w for w in d.workers() if w["node"] == "s2"][0]
    got_s2 = [w for w in workers if w["node"] == "s2"]
    check(got_s2 and got_s2[0]["state"] == "alive", "no `worker` event for s2's registration: %r" % workers)
    check(set(got_s2[0]) == set(rest_s2) and got_s2[0]["devices"] == rest_s2["devices"],
          "worker event %r vs GET /v1/workers %r" % (got_s2[0], rest_s2))

    # ---- keep-alive on the idle global stream ----
    g.conn.sock.settimeout(5)
    before = g.comments
    deadline = time.time() + 3
    while g.comments == before and time.time() < deadline:
        try:
            line = g.resp.readline()
        except socket.timeout:
            break
        if line.startswith(b":"):
            g.comments += 1
    check(g.comments > before, "no keep-alive within 3 s (interval 500 ms)")

    # ---- the cap: g + 3 open, the 5th refused ----
    job2 = d.submit(tiny_spec("streams-2", 2, 4, 2000))["id"]
    open_ = [Sse(d, "/v1/jobs/%s/stream" % job2) for _ in range(3)]
    check(all(s.status == 200 for s in open_), "streams under the cap: %s" % [s.status for s in open_])
    st, body = d.request("GET", "/metrics")
    body = body.decode()
    check("ringmaster_http_streams_open 4" in body, "/metrics with 4 open:\n%s" % body[:600])
    over = Sse(d, "/v1/jobs/%s/stream" % job2)
    check(over.status == 503, "the 5th stream: %s" % over.status)
    check(over.resp.getheader("Retry-After"), "503 without Retry-After")
    check("max_streams" in json.loads(over.resp.read())["detail"], "503 detail")
    over.close()
    st, body = d.request("GET", "/metrics")
    body = body.decode()
    check("ringmaster_http_streams_rejected_total 1" in body, "rejected counter:\n%s" % body[:800])
    for s in open_:
        s.close()
    g.close()
    d.request("POST", "/v1/jobs/%s/cancel" % job2)
    time.sleep(1.5)  # closed streams are noticed at their next write (keep-alive 500 ms)
    st, body = d.request("GET", "/metrics")
    body = body.decode()
    check("ringmaster_http_streams_open 0" in body, "/metrics after closing:\n%s" % body[:600])
    again = Sse(d, "/v1/jobs/%s/stream" % job2)
    check(again.status == 200, "a stream once the others closed: %s" % again.status)

    # ---- SIGTERM with a stream open: the stream ends, the daemon exits 0 ----
    proc = d.proc
    t0 = time.time()
    proc.terminate()
    code = proc.wait(20)
    check(code == 0, "ringmasterd exited %s with a stream open" % code)
    log("ringmasterd stopped in %.2f s with a stream open" % (time.time() - t0))
    while again.next() is not None:
        pass
    again.close()


if __name__ == "__main__":
    run(main)
