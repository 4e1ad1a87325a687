"""GET /v1/jobs/{id}/metrics?max_points=N against the real ringmasterd: rows
written straight into its SQLite database (the daemon is the only writer in
production; here the test plays the ranks' METRICS), then the downsampled
answer checked: at most N rows, in step order, first and last included,
evenly spread, validation-loss rows kept, bad values refused naming the
parameter; and the dashboard's embedded files served with their headers.

Usage: test_metrics_sampling.py RINGMASTERD
"""
import json
import sqlite3
import time

from rmtest import Daemon, check, problem_of, run

N_ROWS = 5000


def insert_rows(db, job_id, steps, val_every):
    con = sqlite3.connect(db, timeout=30)
    with con:
        con.executemany(
            "INSERT INTO metrics (job_id, attempt, rank, step, loss, lr, grad_norm, tokens_per_s, ms, val_loss, at_us)"
            " VALUES (?, 1, 0, ?, ?, 0.001, 1.0, 1000.0, 10.0, ?, ?)",
            [(job_id, s, 5.0 / (1 + s), (4.0 if s % val_every == 0 else None), int(time.time() * 1e6))
             for s in steps])
    con.close()


def metrics(d, job, query):
    st, h, doc = d.json("GET", "/v1/jobs/%s/metrics?%s" % (job, query))
    check(st == 200, "metrics?%s: %s %r" % (query, st, doc))
    return doc


def check_sampling(d, job):
    for n in (2, 3, 10, 500, 4999):
        doc = metrics(d, job, "max_points=%d" % n)
        rows = doc["metrics"]
        steps = [r["step"] for r in rows]
        check(len(rows) <= n, "max_points=%d gave %d rows" % (n, len(rows)))
        check(len(rows) == n, "max_points=%d gave only %d of %d rows" % (n, len(rows), N_ROWS))
        check(steps == sorted(steps) and len(set(steps)) == len(steps), "rows not in step order: %r" % steps[:20])
        check(steps[0] == 1 and steps[-1] == N_ROWS, "first/last missing: %r..%r" % (steps[:3], steps[-3:]))
        check(doc["next_since_step"] is None, "a sampled answer has no next page: %r" % doc["next_since_step"])
        if n >= 10:
            # evenly spread: no gap more than twice the mean gap
            gaps = [b - a for a, b in zip(steps, steps[1:])]
            mean = (N_ROWS - 1) / (n - 1)
            check(max(gaps) <= 2 * mean + 1, "max_points=%d: a gap of %d (mean %.1f)" % (n, max(gaps), mean))
    # validation rows (every 50th step, 100 of them) survive a 500-row sample
    rows = metrics(d, job, "max_points=500")["metrics"]
    vals = [r["step"] for r in rows if r["val_loss"] is not None]
    check(len(vals) == N_ROWS // 50, "val rows kept: %d of %d" % (len(vals), N_ROWS // 50))
    # more points than rows: every row, exactly as without max_points
    all_rows = metrics(d, job, "max_points=100000")["metrics"]
    paged = metrics(d, job, "limit=10000")["metrics"]
    check(all_rows == paged and len(all_rows) == N_ROWS, "max_points above the row count differs from all rows")
    # with since_step: sampled among the later rows
    rows = metrics(d, job, "since_step=4001&max_points=20")["metrics"]
    check(len(rows) == 20 and rows[0]["step"] == 4001 and rows[-1]["step"] == N_ROWS,
          "since_step + max_points: %r" % [r["step"] for r in rows])


def check_refusals(d, job):
    for q, field in (("max_points=1", "max_points"), ("max_points=100001", "max_points"),
                     ("max_points=abc", "max_points"), ("max_points=10&limit=5", "max_points")):
        st, h, data = d.request("GET", "/v1/jobs/%s/metrics?%s" % (job, q))
        check(st == 400, "metrics?%s answered %s" % (q, st))
        doc = problem_of(h, data, 400)
        check(doc.get("pointer") == field, "metrics?%s names %r, not %s" % (q, doc.get("pointer"), field))
    st, _, _ = d.request("GET", "/v1/jobs/j-nosuchjob/metrics?max_points=10")
    check(st == 404, "unknown job: %s" % st)


def check_dashboard(d):
    st, h, body = d.request("GET", "/")
    check(st == 200 and h["content-type"].startswith("text/html") and b"/assets/app.js" in body,
          "GET /: %s %r" % (st, h))
    check("default-src 'self'" in h.get("content-security-policy", ""), "no CSP: %r" % h)
    check(h.get("cache-control") == "no-cache" and h.get("etag", "").startswith('"'), "cache headers: %r" % h)
    st, h2, _ = d.request("GET", "/", headers={"If-None-Match": h["etag"]})
    check(st == 304, "If-None-Match with the ETag: %s" % st)
    for name, ctype in (("app.js", "text/javascript"), ("uPlot.esm.js", "text/javascript"),
                        ("uPlot.min.css", "text/css"), ("uPlot-LICENSE.txt", "text/plain"),
                        ("default.json", "application/json")):
        st, h, body = d.request("GET", "/assets/" + name)
        check(st == 200 and h["content-type"].startswith(ctype) and body, "/assets/%s: %s %r" % (name, st, h))
    spec = json.loads(d.request("GET", "/assets/default.json")[2])
    check(spec["parallel"]["world_size"] >= 1, "default.json: %r" % spec)
    st, h, data = d.request("GET", "/assets/nope.js")
    problem_of(h, data, 404)
    st, h, data = d.request("GET", "/assets/routes.json")
    rows = {(r["method"], r["path"]) for r in json.loads(data)["routes"]}
    check(("GET", "/v1/jobs/{id}/metrics") in rows and ("GET", "/") in rows, "routes.json: %r" % rows)


def main(binary, workdir, daemons):
    d = Daemon(binary, workdir)
    daemons.append(d)
    d.start()
    job = d.submit()["id"]
    insert_rows(d.db, job, range(1, N_ROWS + 1), 50)
    check_sampling(d, job)
    check_refusals(d, job)
    check_dashboard(d)


if __name__ == "__main__":
    run(main)
