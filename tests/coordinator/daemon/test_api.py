"""ringmasterd REST API: submit, list (state filter, limit, cursor paging over
250 jobs), show, cancel (twice -> 409), events, workers, healthz/readyz,
metrics, 404/405, idempotency keys."""
import json
import re
import sys
import threading

from rmtest import Daemon, SPEC, check, problem_of, run

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
JOB_KEYS = {"id", "name", "state", "priority", "world_size", "attempt", "restarts", "spec",
            "created_at", "updated_at", "state_reason", "submitted_by", "cancelled_by"}


def check_job(job):
    check(set(job) == JOB_KEYS, "job keys %s" % sorted(job))
    check(re.match(r"^j-[a-z2-7]{20}$", job["id"]), "job id %r" % job["id"])
    check(RFC3339.match(job["created_at"]) and RFC3339.match(job["updated_at"]), "times %r" % job)
    spec = job["spec"]
    for section in ("model", "data", "train", "parallel", "checkpoint", "restart"):
        check(section in spec, "spec misses defaults for %s: %r" % (section, spec))


def main(binary, workdir, daemons):
    d = Daemon(binary, workdir).start()
    daemons.append(d)

    # health
    st, h, doc = d.json("GET", "/healthz", expect=200)
    check(doc == {"status": "ok"}, "healthz %r" % doc)
    d.json("GET", "/readyz", expect=200)
    _, _, doc = d.json("GET", "/v1/workers", expect=200)
    check(doc == {"workers": []}, "workers %r" % doc)

    # submit + show
    spec = {"name": "first job", "data": {"train": "data/x/train.bin"}, "priority": 5,
            "parallel": {"world_size": 2}}
    st, h, job = d.json("POST", "/v1/jobs", spec, expect=201)
    check_job(job)
    check(job["state"] == "queued" and job["name"] == "first job" and job["priority"] == 5
          and job["world_size"] == 2 and job["attempt"] == 0 and job["restarts"] == 0
          and job["state_reason"] is None, "job %r" % job)
    check(h.get("location") == "/v1/jobs/" + job["id"], "location %r" % h.get("location"))
    check(h["content-type"].startswith("application/json"), "content type %r" % h["content-type"])
    st, _, raw = d.request("GET", "/v1/jobs/" + job["id"])
    shown = json.loads(raw)
    # the single-job view adds the ranks of the current attempt (none yet)
    check(st == 200 and shown.pop("ranks", None) == [] and shown == job, "show differs from submit: %r" % raw)
    check(raw.endswith(b',"ranks":[]}'), "ranks is the last member: %r" % raw[-40:])

    # checkpoints: none yet; 404 for an unknown job
    _, _, doc = d.json("GET", "/v1/jobs/%s/checkpoints" % job["id"], expect=200)
    check(doc == {"checkpoints": []}, "checkpoints of a new job %r" % doc)
    st, h, raw = d.request("GET", "/v1/jobs/j-aaaaaaaaaaaaaaaaaaaa/checkpoints")
    problem_of(h, raw, 404)
    st, h, raw = d.request("GET", "/v1/jobs/nope/checkpoints")
    problem_of(h, raw, 404)
    st, h, raw = d.request("POST", "/v1/jobs/%s/checkpoints" % job["id"], {})
    check(st == 405 and h.get("allow") == "GET", "POST checkpoints: %s %r" % (st, h.get("allow")))

    # content type with parameters is fine
    d.json("POST", "/v1/jobs", json.dumps(SPEC), {"Content-Type": "Application/JSON; charset=utf-8"}, expect=201)

    # 250 jobs from 4 threads, some cancelled; paging
    ids = []
    lock = threading.Lock()
    errors = []

    def burst(n):
        try:
            c = d.conn()
            for i in range(n):
                c.request("POST", "/v1/jobs", body=json.dumps({"name": "bulk", "data": {"train": "t.bin"}}),
                          headers=dict(d.auth_headers(), **{"Content-Type": "application/json"}))
                r = c.getresponse()
                body = r.read()
                if r.status != 201:
                    errors.append((r.status, body))
                    return
                with lock:
                    ids.append(json.loads(body)["id"])
            c.close()
        except Exception as e:  # noqa
            errors.append(repr(e))

    threads = [threading.Thread(target=burst, args=(62,)) for _ in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    check(not errors, "burst errors: %r" % errors[:3])
    all_ids = []
    cursor = None
    pages = 0
    while True:
        path = "/v1/jobs?limit=37" + ("&cursor=" + cursor if cursor else "")
        _, _, page = d.json("GET", path, expect=200)
        check(set(page) == {"jobs", "next_cursor"}, "page keys %r" % list(page))
        check(len(page["jobs"]) <= 37, "page too long")
        all_ids += [j["id"] for j in page["jobs"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
        check(pages < 100, "paging does not end")
    check(len(all_ids) == 250 and len(set(all_ids)) == 250, "paged %d ids (%d unique)" % (len(all_ids), len(set(all_ids))))
    check(all_ids[0] == job["id"], "list is not in submission order")
    check(set(ids) <= set(all_ids), "some submitted jobs missing from the list")
    _, _, page = d.json("GET", "/v1/jobs", expect=200)
    check(len(page["jobs"]) == 100 and page["next_cursor"], "default limit 100")
    _, _, page = d.json("GET", "/v1/jobs?limit=1000", expect=200)
    check(len(page["jobs"]) == 250 and page["next_cursor"] is None, "limit 1000")

    # cancel, cancel again
    st, _, cj = d.json("POST", "/v1/jobs/%s/cancel" % job["id"], expect=200)
    check(cj["state"] == "cancelled" and cj["id"] == job["id"], "cancel %r" % cj)
    check(cj["state_reason"], "cancelled job has no reason")
    st, h, raw = d.request("POST", "/v1/jobs/%s/cancel" % job["id"])
    check(st == 409, "second cancel: %s" % st)
    p = problem_of(h, raw, 409)
    check("cancelled" in p["detail"], "409 detail should name the state: %r" % p)
    for jid in ids[:10]:
        d.json("POST", "/v1/jobs/%s/cancel" % jid, expect=200)
    _, _, page = d.json("GET", "/v1/jobs?state=cancelled&limit=1000", expect=200)
    check(len(page["jobs"]) == 11 and all(j["state"] == "cancelled" for j in page["jobs"]), "state filter")
    _, _, page = d.json("GET", "/v1/jobs?state=queued&limit=1000", expect=200)
    check(len(page["jobs"]) == 239, "queued: %d" % len(page["jobs"]))
    st, h, raw = d.request("GET", "/v1/jobs?state=bogus")
    check(st == 400 and problem_of(h, raw, 400).get("pointer") == "state", "bad state")
    for bad in ("limit=0", "limit=1001", "limit=abc", "limit=-5", "cursor=%%%", "cursor=abc", "cursor=djE6eA"):
        st, h, raw = d.request("GET", "/v1/jobs?" + bad)
        check(st == 400, "%s gave %s" % (bad, st))
        problem_of(h, raw, 400)
    st, h, raw = d.request("POST", "/v1/jobs/j-aaaaaaaaaaaaaaaaaaaa/cancel")
    check(st == 404, "cancel unknown: %s" % st)
    problem_of(h, raw, 404)

    # events
    _, _, ev = d.json("GET", "/v1/jobs/%s/events" % job["id"], expect=200)
    check(set(ev) == {"events", "next_cursor"} and ev["next_cursor"] is None, "events %r" % ev)
    types = [e["type"] for e in ev["events"]]
    check(types[0] == "submitted" and len(types) >= 2, "event types %r" % types)
    last = ev["events"][-1]
    check(set(last) == {"id", "type", "at", "from", "to", "reason", "attempt", "actor"}, "event keys %r" % last)
    check(last["actor"] == "admin" and ev["events"][0]["actor"] == "admin", "event actors %r" % ev["events"])
    check(last["to"] == "cancelled" and last["from"] == "queued", "cancel event %r" % last)
    check(RFC3339.match(last["at"]), "event time %r" % last["at"])
    _, _, ev1 = d.json("GET", "/v1/jobs/%s/events?limit=1" % job["id"], expect=200)
    check(len(ev1["events"]) == 1 and ev1["next_cursor"], "events paging")
    _, _, ev2 = d.json("GET", "/v1/jobs/%s/events?limit=1&cursor=%s" % (job["id"], ev1["next_cursor"]), expect=200)
    check(ev2["events"][0]["id"] == ev["events"][1]["id"], "events page 2")
    st, h, raw = d.request("GET", "/v1/jobs/j-aaaaaaaaaaaaaaaaaaaa/events")
    check(st == 404, "events of unknown job: %s" % st)
    problem_of(h, raw, 404)

    # 404 / 405
    for path in ("/nope", "/v1/jobs/j-aaaaaaaaaaaaaaaaaaaa", "/v1/jobs/", "/v1/jobs/x/y", "/v1/job",
                 "/v1/jobs/" + "z" * 5000):
        st, h, raw = d.request("GET", path)
        check(st == 404, "GET %s: %s" % (path[:40], st))
        problem_of(h, raw, 404)
    for method, path, allow in (("DELETE", "/v1/jobs", "GET, POST"), ("PUT", "/v1/jobs/j-abc", "GET"),
                                ("GET", "/v1/jobs/j-abc/cancel", "POST"), ("POST", "/healthz", "GET"),
                                ("POST", "/metrics", "GET"), ("PATCH", "/v1/workers", "GET")):
        st, h, raw = d.request(method, path)
        check(st == 405, "%s %s: %s" % (method, path, st))
        check(h.get("allow") == allow, "%s %s: Allow %r" % (method, path, h.get("allow")))
        problem_of(h, raw, 405)

    # idempotency
    key = {"Idempotency-Key": "retry-me-1"}
    body = json.dumps({"name": "idem", "data": {"train": "i.bin"}})
    st1, h1, r1 = d.request("POST", "/v1/jobs", body, dict(key, **{"Content-Type": "application/json"}))
    st2, h2, r2 = d.request("POST", "/v1/jobs", body, dict(key, **{"Content-Type": "application/json"}))
    check(st1 == 201 and st2 == 201 and r1 == r2, "replay: %s %s %r %r" % (st1, st2, r1[:80], r2[:80]))
    check(h2.get("idempotent-replayed") == "true", "replay header missing")
    st3, h3, r3 = d.request("POST", "/v1/jobs", body.replace("idem", "other"),
                            dict(key, **{"Content-Type": "application/json"}))
    check(st3 == 409, "same key, other body: %s" % st3)
    problem_of(h3, r3, 409)
    for bad_key in ("", "x" * 256, "caf\u00e9"):
        st, h, raw = d.request("POST", "/v1/jobs", body, {"Idempotency-Key": bad_key.encode("utf-8").decode("latin-1"),
                                                          "Content-Type": "application/json"})
        check(st == 400, "bad key %r: %s" % (bad_key[:10], st))
        problem_of(h, raw, 400)
    # concurrent retries with one key give one job
    results = []

    def retry():
        results.append(d.request("POST", "/v1/jobs", body, {"Idempotency-Key": "concurrent-key",
                                                            "Content-Type": "application/json"}))
    threads = [threading.Thread(target=retry) for _ in range(6)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    check(all(r[0] == 201 for r in results) and len({r[2] for r in results}) == 1,
          "concurrent retries: %r" % [(r[0], r[2][:40]) for r in results])

    # metrics
    st, h, raw = d.request("GET", "/metrics")
    check(st == 200 and h["content-type"].startswith("text/plain"), "metrics %s %r" % (st, h.get("content-type")))
    text = raw.decode()
    line_re = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\])*"(,[a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\])*")*\})? [-+0-9.eEInfa]+$')
    names = set()
    for line in text.splitlines():
        if not line or line.startswith("# HELP ") or line.startswith("# TYPE "):
            continue
        check(line_re.match(line), "bad metrics line %r" % line)
        check(line.startswith("ringmaster_"), "unprefixed metric %r" % line)
        names.add(line.split("{")[0].split(" ")[0])
    for want in ("ringmaster_jobs", "ringmaster_http_requests_total", "ringmaster_build_info",
                 "ringmaster_http_request_duration_seconds_bucket",
                 "ringmaster_http_request_duration_seconds_sum",
                 "ringmaster_http_request_duration_seconds_count", "ringmaster_up"):
        check(want in names, "metric %s missing" % want)
    for state in ("queued", "scheduled", "running", "recovering", "succeeded", "failed", "cancelled"):
        check('ringmaster_jobs{state="%s"}' % state in text, "jobs gauge for %s missing" % state)
    check('ringmaster_jobs{state="cancelled"} 11' in text, "cancelled gauge")
    check('route="/v1/jobs/{id}",method="GET",status="200"' in text, "route template label missing")
    check("j-" not in text, "raw ids leak into metric labels")

    rc = d.stop()
    check(rc == 0, "exit status %s after SIGTERM:\n%s" % (rc, d.logtext()))


if __name__ == "__main__":
    run(main)
