#!/usr/bin/python3
"""ringctl against a mock coordinator (stdlib http.server).

The mock answers with shapes the real daemon may not produce today: extra
fields, missing optional ones, several pages, problem+json with a pointer, a
proxy's HTML error page, a body that is not JSON, worker lists. It also
records what ringctl sends (headers, escaped paths, query strings).

Also: the log lines of GET /v1/jobs/{id}/logs (api/openapi.yaml's LogLine: seq,
rank, attempt, stream, time, text; since/tail/rank/attempt; 400 naming a
bad parameter), jobs that move to succeeded, failed and cancelled as they
are read (logs -f, wait, submit --wait), a job list that changes (jobs
--watch) and checkpoint lists whose paths point at real snapshots written by
tests/api's snap_fixture (export JOB without --root).

Usage: test_mock.py RINGCTL SNAP_FIXTURE
"""
import http.server
import json
import os
import pty
import select
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse

RINGCTL = None
SNAP_FIXTURE = None
SNAP_ROOT = None  # made by MockTest.setUpClass: SNAP_ROOT/ex/step-00000007 (intact), step-00000009 (corrupt)

JOB = {
    "id": "j1", "name": "tiny", "state": "queued", "priority": 3, "world_size": 2,
    "attempt": 0, "created_at": "2025-06-01T12:00:00.123456Z",
    "updated_at": "2025-06-01T12:00:01.000000Z", "state_reason": None,
    "owner": "alice",  # a field ringctl does not know
    "spec": {"name": "tiny", "data": {"train": "x.bin"}, "train": {"lr": 0.0003},
             "parallel": {"world_size": 2}},
}
# Missing optional fields: no priority, world_size only in the spec, no times.
SPARSE_JOB = {"id": "j2", "name": "sparse", "state": "running",
              "spec": {"parallel": {"world_size": 4}}}


def page_jobs(cursor):
    if cursor in (None, ""):
        return {"jobs": [JOB], "next_cursor": "p2", "extra": 1}
    if cursor == "p2":
        return {"jobs": [SPARSE_JOB], "next_cursor": "p3"}
    if cursor == "p3":
        return {"jobs": [dict(JOB, id="j3", name="third\x1b[31m\nline")], "next_cursor": None}
    return None


def metric(step, val=None):
    return {"step": step, "loss": 5.0 - step / 10, "lr": 1e-3, "grad_norm": 1.25,
            "tokens_per_s": 4000.0, "ms": 500.5, "val_loss": val, "attempt": 1,
            "time": "2025-06-01T12:00:00Z"}


# Job "run": each GET of the job moves it on; a step more is visible each
# time, and it ends succeeded after 4 reads. "bad" is failed from the start.
FOLLOW = {"reads": 0}


def metrics_page(job, since, visible):
    rows = [metric(s, 4.2 if s % 3 == 0 else None) for s in range(1, visible + 1)]
    rows = [r for r in rows if r["step"] >= since]
    page, rest = rows[:2], rows[2:]  # pages of two rows
    return {"metrics": page, "next_since_step": page[-1]["step"] + 1 if rest else None}


def chrome_trace(ranks, steps):
    """A Chrome trace shaped like GET /v1/jobs/{id}/trace's."""
    events = []
    for r in ranks:
        for s in steps:
            t0 = 1748779200000000 + 1000 * s
            events.append({"name": "step %d" % s, "cat": "step", "ph": "X", "ts": t0, "dur": 900.5,
                           "pid": r, "tid": 0, "args": {"step": s, "attempt": 1}})
            events.append({"name": "forward", "cat": "phase", "ph": "X", "ts": t0 + 1.25, "dur": 300,
                           "pid": r, "tid": 0, "args": {"step": s, "attempt": 1}})
        events.append({"name": "process_name", "ph": "M", "pid": r, "tid": 0, "args": {"name": "rank %d" % r}})
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"job": "j1"}}


# Per-job read counters of the moving jobs below; reset before each test.
READS = {}


def log_line(seq, rank, stream, text, attempt=1):
    return {"seq": seq, "rank": rank, "attempt": attempt, "stream": stream,
            "time": "2026-11-27T08:00:00.%06dZ" % seq, "text": text}


# "lj": a finished job with lines of two ranks and two attempts (seq with gaps).
LJ_LINES = [log_line(3, 0, "stdout", "step 1 loss 5.1"),
            log_line(4, 1, "stderr", "warning: slow data"),
            log_line(7, 0, "stdout", "step 2 loss 4.9"),
            log_line(9, 1, "stdout", "red \x1b[31mtext"),
            log_line(12, 0, "stdout", "restarted", attempt=2),
            log_line(15, 1, "stdout", "tab\there", attempt=2)]


def lf_lines():
    """"lf": a running job; each read of the job shows two more lines, it is
    succeeded from the third read, and one last line lands only on the
    second read of its logs after that (as an agent's last batch may)."""
    reads = READS.get("lf", 0)
    if reads >= 3:
        READS["lf-logs-after-end"] = READS.get("lf-logs-after-end", 0) + 1
    n = min(2 * reads, 6) + (1 if READS.get("lf-logs-after-end", 0) >= 2 else 0)
    return [log_line(10 + i, i % 2, "stdout", "lf line %d" % i) for i in range(n)]


def logs_answer(lines, q):
    """GET .../logs as api/openapi.yaml says; None + the bad parameter's name when a
    value is bad."""
    def num(name, lo, hi):
        v = q.get(name, [None])[0]
        if v is None:
            return None
        if not v.isdigit() or not lo <= int(v) <= hi:
            raise ValueError(name)
        return int(v)
    rank, attempt = num("rank", 0, 1 << 30), num("attempt", 1, 1 << 30)
    tail, since = num("tail", 1, 10000), num("since", 0, 1 << 62)
    rows = [l for l in lines if (rank is None or l["rank"] == rank)
            and (attempt is None or l["attempt"] == attempt)]
    if since is not None:
        rows = [l for l in rows if l["seq"] > since][:3]  # pages of 3 (the daemon's are 1000)
    if tail is not None:
        rows = rows[-tail:]
    nxt = rows[-1]["seq"] if rows else (since or 0)
    return {"lines": rows, "next": nxt, "dropped": 2 if lines is LJ_LINES else 0}


def checkpoints_of(job):
    snap = lambda step: {"step": step, "committed_at": "2026-11-27T08:00:00.000000Z", "bytes": 1000,
                         "world_size": 3, "attempt": 1,
                         "path": os.path.join(SNAP_ROOT, "ex", "step-%08d" % step)}
    if job == "ex":
        return [snap(9), snap(7)]
    if job == "exfar":
        return [dict(snap(12), path="/nonexistent/node-b/ckpt/exfar/step-00000012")]
    if job == "exnone":
        return []
    return None


def moving_job(job_id):
    """The job object of a job whose state moves as it is read."""
    READS[job_id] = READS.get(job_id, 0) + 1
    r = READS[job_id]
    if job_id == "lf":
        return dict(JOB, id="lf", state="succeeded" if r >= 3 else "running")
    if job_id == "gone":  # cancelled, no state_reason: the cause is in its events
        return dict(JOB, id="gone", state="cancelled" if r >= 2 else "running", state_reason=None)
    if job_id == "slow":
        return dict(JOB, id="slow", state="running")
    return None


def watch_list():
    """GET /v1/jobs?state=watch: j1 queued for two reads, then running; a
    second job appears on the fourth read."""
    READS["watch"] = READS.get("watch", 0) + 1
    r = READS["watch"]
    jobs = [dict(JOB, state="queued" if r <= 2 else "running")]
    if r >= 4:
        jobs.append(dict(SPARSE_JOB, state="queued"))
    return {"jobs": jobs, "next_cursor": None}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    requests = []

    def log_message(self, *args):
        pass

    def reply(self, status, body, ctype="application/json"):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def problem(self, status, title, detail, pointer=None):
        body = {"type": "about:blank", "title": title, "status": status, "detail": detail}
        if pointer:
            body["pointer"] = pointer
        self.reply(status, body, "application/problem+json")

    def record(self, body=b""):
        Handler.requests.append({"method": self.command, "path": self.path,
                                 "headers": dict(self.headers), "body": body})

    def do_GET(self):
        self.record()
        url = urllib.parse.urlsplit(self.path)
        q = urllib.parse.parse_qs(url.query)
        if url.path == "/v1/jobs" and q.get("state") == ["watch"]:
            return self.reply(200, watch_list())
        if url.path == "/v1/jobs":
            page = page_jobs(q.get("cursor", [None])[0])
            if page is None:
                return self.problem(400, "Bad Request", "bad cursor", "cursor")
            return self.reply(200, page)
        if url.path == "/v1/jobs/j1":
            return self.reply(200, JOB)
        parts = url.path.split("/")
        if len(parts) >= 4 and parts[3] in ("lf", "gone", "slow"):
            if len(parts) == 4:
                return self.reply(200, moving_job(parts[3]))
            if parts[4] == "events" and parts[3] == "gone":
                if q.get("cursor") == ["g2"]:
                    return self.reply(200, {"events": [
                        {"id": 3, "type": "state", "at": "2026-11-27T08:00:05.0Z", "from": "running",
                         "to": "cancelled", "reason": "cancelled by alice", "attempt": 1},
                        {"id": 4, "type": "note", "at": "2026-11-27T08:00:06.0Z", "reason": None}],
                        "next_cursor": None})
                return self.reply(200, {"events": [
                    {"id": 1, "type": "submitted", "at": "2026-11-27T08:00:00.0Z", "from": None,
                     "to": "queued", "reason": "first page", "attempt": 0}], "next_cursor": "g2"})
            if parts[4] == "metrics":
                return self.reply(200, metrics_page(url.path, int(q.get("since_step", ["0"])[0]),
                                                    1 + READS.get(parts[3], 0)))
        if len(parts) == 5 and parts[4] == "logs" and parts[3] in ("lj", "lf", "bad"):
            lines = {"lj": LJ_LINES, "lf": lf_lines(), "bad": [log_line(1, 1, "stderr", "Traceback")]}[parts[3]]
            try:
                return self.reply(200, logs_answer(lines, q))
            except ValueError as e:
                return self.problem(400, "Bad Request", "query parameter %s: out of range" % e, str(e))
        if len(parts) == 5 and parts[4] == "logs" and parts[3] == "j1":
            return self.reply(200, {"lines": [], "next": 0, "dropped": 0})
        if len(parts) == 5 and parts[4] == "checkpoints" and checkpoints_of(parts[3]) is not None:
            return self.reply(200, {"checkpoints": checkpoints_of(parts[3])})
        if url.path == "/v1/jobs/j2":
            return self.reply(200, SPARSE_JOB)
        if url.path == "/v1/jobs/a%2Fb%20c":
            return self.reply(200, dict(JOB, id="a/b c"))
        if url.path == "/v1/jobs/html":
            return self.reply(502, b"<html>\n<body>Bad gateway</body>\n</html>\n", "text/html")
        if url.path == "/v1/jobs/notjson":
            return self.reply(200, b"hello", "text/plain")
        if url.path == "/v1/jobs/j1/events":
            if q.get("cursor") == ["e2"]:
                return self.reply(200, {"events": [
                    {"id": 2, "type": "state", "at": "2025-06-01T12:00:05.5Z", "from": "queued",
                     "to": "cancelled", "reason": "cancelled by user", "attempt": 0}],
                    "next_cursor": None})
            return self.reply(200, {"events": [
                {"id": 1, "type": "submitted", "at": "2025-06-01T12:00:00.1Z", "from": None,
                 "to": "queued", "reason": None, "attempt": 0}], "next_cursor": "e2"})
        if url.path == "/v1/jobs/run":
            FOLLOW["reads"] += 1
            state = "succeeded" if FOLLOW["reads"] >= 4 else "running"
            return self.reply(200, dict(JOB, id="run", state=state))
        if url.path == "/v1/jobs/bad":
            return self.reply(200, dict(JOB, id="bad", state="failed",
                                        state_reason="rank 1 exited: killed by signal 9"))
        if url.path in ("/v1/jobs/run/metrics", "/v1/jobs/bad/metrics", "/v1/jobs/j1/metrics"):
            since = int(q.get("since_step", ["0"])[0])
            visible = {"run": 1 + FOLLOW["reads"], "bad": 2, "j1": 5}[url.path.split("/")[3]]
            return self.reply(200, metrics_page(url.path, since, visible))
        if url.path == "/v1/jobs/j1/trace":
            ranks = [int(q["rank"][0])] if "rank" in q else [0, 1]
            # a body as the server writes it: compact, no newline at the end
            return self.reply(200, json.dumps(chrome_trace(ranks, [2, 3]), separators=(",", ":")).encode())
        if url.path == "/v1/jobs/j2/trace":
            return self.problem(404, "Not Found", "job j2 has no trace: its spec asks for none; set profile: "
                                "{start_step, end_step} in the job spec to record the phases of those steps")
        if url.path == "/v1/workers":
            return self.reply(200, {"workers": [
                {"id": "node-a", "state": "ready", "devices": [{"kind": "cuda"}, {"kind": "cuda"}],
                 "running_ranks": 1, "last_heartbeat": "2025-06-01T12:00:00.999Z"},
                {"node": "node-b", "state": "lost", "devices": 8}]})
        if url.path == "/v1/loop":
            return self.reply(200, {"jobs": [], "next_cursor": "same"})
        self.problem(404, "Not Found", "no route " + url.path)

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n) if n else b""
        self.record(body)
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/v1/jobs":
            try:
                spec = json.loads(body)
            except ValueError:
                return self.problem(400, "Bad Request", "not JSON")
            if spec.get("model", {}).get("n_head") == 5:
                return self.problem(400, "Bad Request",
                                    "model.n_embd (64) must be divisible by model.n_head (5)",
                                    "/model/n_head")
            waits = {"follow-me": "lf", "fail-me": "bad"}
            if spec.get("name") in waits:
                return self.reply(201, dict(JOB, id=waits[spec["name"]], name=spec["name"]))
            return self.reply(201, dict(JOB, name=spec.get("name", "unnamed")))
        if url.path == "/v1/jobs/j1/cancel":
            return self.reply(200, dict(JOB, state="cancelled"))
        if url.path == "/v1/jobs/done/cancel":
            return self.problem(409, "Conflict", "job done is already succeeded")
        self.problem(404, "Not Found", "no route " + url.path)


class MockTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        cls.url = "http://127.0.0.1:%d" % cls.server.server_address[1]
        cls.thread = threading.Thread(target=cls.server.serve_forever, daemon=True)
        cls.thread.start()

    @classmethod
    def tearDownClass(cls):
        cls.server.shutdown()
        cls.server.server_close()

    def setUp(self):
        Handler.requests.clear()
        READS.clear()

    def ctl(self, *args, stdin=None, env_extra=None, server=True):
        env = {k: v for k, v in os.environ.items()
               if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
        env.pop("RINGMASTER_SERVER", None)
        env.pop("RINGMASTER_TOKEN", None)
        env.pop("RINGMASTER_CHECKPOINT_ROOT", None)
        env.update(env_extra or {})
        argv = [RINGCTL] + (["--server", self.url] if server else []) + list(args)
        r = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=30, env=env)
        self.assertNotIn("Sanitizer", r.stderr)
        self.assertNotIn("runtime error:", r.stderr)
        return r

    def test_jobs_all_follows_cursors(self):
        r = self.ctl("jobs", "--all", "--limit", "1", "--state", "queued")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0].split(), ["ID", "NAME", "STATE", "PRIO", "WORLD", "CREATED"])
        self.assertEqual(len(lines), 4, r.stdout)
        # Column starts line up with the header's.
        for col in ("STATE", "PRIO", "WORLD", "CREATED"):
            start = lines[0].index(col)
            for row in lines[1:]:
                self.assertNotEqual(row[start], " ", (col, row))
                self.assertEqual(row[start - 1], " ", (col, row))
        self.assertIn("2025-06-01T12:00:00Z", lines[1])
        self.assertEqual(lines[2].split(), ["j2", "sparse", "running", "-", "4", "-"])
        self.assertNotIn("\x1b", r.stdout)
        self.assertIn("third?[31m?line", lines[3])
        self.assertEqual(r.stderr, "")
        paths = [q["path"] for q in Handler.requests]
        self.assertEqual(paths, ["/v1/jobs?state=queued&limit=1",
                                 "/v1/jobs?state=queued&limit=1&cursor=p2",
                                 "/v1/jobs?state=queued&limit=1&cursor=p3"])

    def test_jobs_one_page_hints_more(self):
        r = self.ctl("jobs")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(r.stdout.splitlines()), 2)
        self.assertIn("--cursor p2", r.stderr)

    def test_jobs_json_one_page_is_the_servers_body(self):
        r = self.ctl("--json", "jobs")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout), page_jobs(None))

    def test_jobs_json_all_merges_pages(self):
        r = self.ctl("jobs", "--all", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual([j["id"] for j in doc["jobs"]], ["j1", "j2", "j3"])
        self.assertIsNone(doc["next_cursor"])
        self.assertEqual(doc["jobs"][0]["spec"]["train"]["lr"], 0.0003)

    def test_show_prints_known_and_extra_fields_and_spec(self):
        r = self.ctl("show", "j1")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertTrue(lines[0].startswith("id:"), lines)
        keys = [l.split(":")[0] for l in lines if l and not l.startswith(" ")]
        self.assertEqual(keys, ["id", "name", "state", "state_reason", "priority", "world_size",
                                "attempt", "created_at", "updated_at", "owner", "spec"])
        self.assertIn("owner:", r.stdout)
        values = {l.split(":", 1)[0]: l.split(":", 1)[1].strip() for l in lines
                  if l and not l.startswith(" ") and l != "spec:"}
        self.assertEqual(values["state_reason"], "-")
        self.assertEqual(values["created_at"], "2025-06-01T12:00:00.123456Z")
        spec_text = "\n".join(lines[lines.index("spec:") + 1:])
        self.assertEqual(json.loads(spec_text), JOB["spec"])
        self.assertIn('"lr": 0.0003', spec_text)
        # Values are aligned.
        starts = {len(l) - len(l.split(":", 1)[1].lstrip()) for l in lines[:10]}
        self.assertEqual(len(starts), 1, lines[:10])

    def test_show_sparse_job(self):
        r = self.ctl("show", "j2")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("state: running", r.stdout)

    def test_ids_are_escaped(self):
        r = self.ctl("show", "a/b c")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(Handler.requests[0]["path"], "/v1/jobs/a%2Fb%20c")

    def test_submit_sends_json_key_and_token(self):
        spec = '{"name": "from-stdin", "data": {"train": "x"}}'
        r = self.ctl("submit", "--idempotency-key", "k-1", "-", stdin=spec,
                     env_extra={"RINGMASTER_TOKEN": "s3cret"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "submitted job j1 (from-stdin): queued\n")
        req = Handler.requests[0]
        self.assertEqual(req["method"], "POST")
        self.assertEqual(req["headers"]["Content-Type"], "application/json")
        self.assertEqual(req["headers"]["Idempotency-Key"], "k-1")
        self.assertEqual(req["headers"]["Authorization"], "Bearer s3cret")
        self.assertEqual(req["body"].decode(), spec)  # sent byte for byte

    def test_submit_quiet_prints_only_the_id(self):
        r = self.ctl("submit", "-q", "-", stdin='{"data": {"train": "x"}}')
        self.assertEqual((r.returncode, r.stdout), (0, "j1\n"), r.stderr)

    def test_submit_problem_with_pointer(self):
        r = self.ctl("submit", "-", stdin='{"model": {"n_embd": 64, "n_head": 5}}')
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stdout, "")
        self.assertEqual(r.stderr, "ringctl: 400 Bad Request: model.n_embd (64) must be "
                                   "divisible by model.n_head (5) (at /model/n_head)\n")

    def test_submit_local_syntax_error(self):
        r = self.ctl("submit", "-", stdin='{"data": {"train": "x"},\n  oops}')
        self.assertEqual(r.returncode, 1)
        self.assertTrue(r.stderr.startswith("ringctl: <stdin>:2:"), r.stderr)
        self.assertEqual(Handler.requests, [])

    def test_submit_missing_file(self):
        r = self.ctl("submit", "/nonexistent/spec.json")
        self.assertEqual(r.returncode, 1)
        self.assertIn("/nonexistent/spec.json", r.stderr)

    def test_cancel(self):
        r = self.ctl("cancel", "j1")
        self.assertEqual((r.returncode, r.stdout), (0, "job j1: cancelled\n"), r.stderr)
        self.assertEqual(Handler.requests[0]["method"], "POST")
        self.assertEqual(Handler.requests[0]["body"], b"")

    def test_cancel_conflict(self):
        r = self.ctl("cancel", "done")
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr, "ringctl: 409 Conflict: job done is already succeeded\n")

    def test_events_all(self):
        r = self.ctl("events", "j1", "--all")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0].split(), ["ID", "AT", "TYPE", "FROM", "TO", "ATTEMPT", "REASON"])
        self.assertEqual(len(lines), 3)
        self.assertTrue(lines[2].endswith("cancelled by user"), lines[2])
        self.assertIn("2025-06-01T12:00:05Z", lines[2])

    def test_metrics_table_pages(self):
        r = self.ctl("metrics", "j1")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0].split(),
                         ["STEP", "LOSS", "VAL_LOSS", "LR", "GRAD_NORM", "TOKENS/S", "MS"])
        self.assertEqual([l.split()[0] for l in lines[1:]], ["1", "2", "3", "4", "5"])
        self.assertEqual(lines[1].split(), ["1", "4.9000", "-", "1.000e-03", "1.250", "4000",
                                            "500.5"])
        self.assertEqual(lines[3].split()[2], "4.2000")
        paths = [q["path"] for q in Handler.requests]
        self.assertIn("/v1/jobs/j1/metrics?since_step=0", paths)
        self.assertIn("/v1/jobs/j1/metrics?since_step=3", paths)

    def test_metrics_since_and_json(self):
        r = self.ctl("--json", "metrics", "--since", "4", "j1")
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = [json.loads(l) for l in r.stdout.splitlines()]
        self.assertEqual([x["step"] for x in rows], [4, 5])

    def test_metrics_follow_until_succeeded(self):
        FOLLOW["reads"] = 0
        r = self.ctl("metrics", "--follow", "run")
        self.assertEqual(r.returncode, 0, r.stderr)
        steps = [l.split()[0] for l in r.stdout.splitlines()[1:]]
        self.assertEqual(steps, ["1", "2", "3", "4", "5"])  # each once, in order
        self.assertIn("job run succeeded", r.stderr)

    def test_metrics_follow_failed_job(self):
        r = self.ctl("metrics", "-f", "bad")
        self.assertEqual(r.returncode, 1)
        self.assertIn("failed: rank 1 exited: killed by signal 9", r.stderr)
        self.assertEqual(len(r.stdout.splitlines()), 3)

    def test_metrics_bad_since(self):
        r = self.ctl("metrics", "--since", "-1", "j1")
        self.assertEqual(r.returncode, 64)
        self.assertIn("--since needs an integer >= 0", r.stderr)
        r = self.ctl("metrics")
        self.assertEqual(r.returncode, 64)
        self.assertIn("missing argument", r.stderr)

    def test_trace_to_file_is_the_servers_body(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "t.json")
            r = self.ctl("trace", "j1", "-o", out)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout, "wrote %s: 4 phases of steps 2 to 3 on 2 rank(s); open it in "
                                       "https://ui.perfetto.dev\n" % out)
            with open(out, "rb") as f:
                data = f.read()
            self.assertEqual(data, json.dumps(chrome_trace([0, 1], [2, 3]), separators=(",", ":")).encode() + b"\n")
            self.assertEqual(os.listdir(d), ["t.json"])  # no temporary file left
            # an existing file is replaced
            r = self.ctl("trace", "--output", out, "--rank", "1", "j1")
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(out) as f:
                self.assertEqual(json.load(f), chrome_trace([1], [2, 3]))
        self.assertEqual(Handler.requests[-1]["path"], "/v1/jobs/j1/trace?rank=1")

    def test_trace_to_stdout_with_filters(self):
        r = self.ctl("trace", "--attempt", "2", "--rank", "0", "j1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout), chrome_trace([0], [2, 3]))
        self.assertEqual(Handler.requests[-1]["path"], "/v1/jobs/j1/trace?attempt=2&rank=0")
        r = self.ctl("trace", "-o", "-", "j1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout), chrome_trace([0, 1], [2, 3]))

    def test_trace_errors(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "t.json")
            r = self.ctl("trace", "j2", "-o", out)
            self.assertEqual(r.returncode, 1)
            self.assertIn("404 Not Found: job j2 has no trace", r.stderr)
            self.assertIn("set profile: {start_step, end_step}", r.stderr)
            self.assertEqual(os.listdir(d), [])
            r = self.ctl("trace", "j1", "-o", os.path.join(d, "missing", "t.json"))
            self.assertEqual(r.returncode, 1)
            self.assertIn("cannot write %s" % os.path.join(d, "missing", "t.json"), r.stderr)
        for args, msg in ((["--rank", "-1", "j1"], "--rank needs an integer >= 0"),
                          (["--attempt", "0", "j1"], "--attempt needs an integer >= 1"),
                          (["--rank", "x", "j1"], "--rank needs an integer >= 0"),
                          ([], "missing argument"), (["j1", "-o"], "needs a value")):
            r = self.ctl("trace", *args)
            self.assertEqual(r.returncode, 64, (args, r.stderr))
            self.assertIn(msg, r.stderr)

    def test_workers(self):
        r = self.ctl("workers")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0].split(), ["ID", "STATE", "DEVICES", "RANKS", "LAST", "SEEN"])
        self.assertEqual(lines[1].split(), ["node-a", "ready", "2", "1", "2025-06-01T12:00:00Z"])
        self.assertEqual(lines[2].split(), ["node-b", "lost", "8", "-", "-"])

    def test_non_json_error_body(self):
        r = self.ctl("show", "html")
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr, "ringctl: 502 Bad Gateway: <html> <body>Bad gateway</body> "
                                   "</html>\n")

    def test_non_json_success_body(self):
        r = self.ctl("show", "notjson")
        self.assertEqual(r.returncode, 1)
        self.assertIn("not JSON", r.stderr)

    def test_not_found(self):
        r = self.ctl("show", "nope")
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr, "ringctl: 404 Not Found: no route /v1/jobs/nope\n")

    def test_server_from_env_and_flag_wins(self):
        r = self.ctl("jobs", server=False, env_extra={"RINGMASTER_SERVER": self.url + "/"})
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.ctl("jobs", "--server", self.url, server=False,
                     env_extra={"RINGMASTER_SERVER": "http://127.0.0.1:1"})
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_bad_server_url(self):
        r = self.ctl("jobs", "--server", "ftp://example.invalid/", server=False)
        self.assertEqual(r.returncode, 64, r.stderr)

    # ---- logs ------------------------------------------------------------

    def log_queries(self):
        return [urllib.parse.parse_qs(urllib.parse.urlsplit(r["path"]).query)
                for r in Handler.requests if urllib.parse.urlsplit(r["path"]).path.endswith("/logs")]

    def test_logs_prints_prefixed_lines_and_pages_by_since(self):
        r = self.ctl("logs", "lj")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "[r0 a1 out] step 1 loss 5.1\n"
                                   "[r1 a1 err] warning: slow data\n"
                                   "[r0 a1 out] step 2 loss 4.9\n"
                                   "[r1 a1 out] red \x1b[31mtext\n"  # not a terminal: as printed
                                   "[r0 a2 out] restarted\n"
                                   "[r1 a2 out] tab\there\n")
        self.assertIn("dropped 2 lines of job lj", r.stderr)
        # pages of 3: since=0, then since=the first page's next (7), ...
        sinces = [q["since"][0] for q in self.log_queries()]
        self.assertEqual(sinces[:2], ["0", "7"], sinces)

    def test_logs_filters_and_tail(self):
        r = self.ctl("logs", "--rank", "1", "--attempt", "2", "lj")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "[r1 a2 out] tab\there\n")
        q = self.log_queries()[0]
        self.assertEqual((q["rank"], q["attempt"]), (["1"], ["2"]))
        Handler.requests.clear()
        r = self.ctl("logs", "--tail", "2", "lj")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines(), ["[r0 a2 out] restarted", "[r1 a2 out] tab\there"])
        self.assertEqual(self.log_queries()[0].get("tail"), ["2"])

    def test_logs_json_is_one_line_per_log_line(self):
        r = self.ctl("--json", "logs", "lj")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([json.loads(l) for l in r.stdout.splitlines()], LJ_LINES)

    def test_logs_on_a_terminal_hides_control_characters(self):
        master, slave = pty.openpty()
        p = subprocess.Popen([RINGCTL, "--server", self.url, "logs", "lj"], stdout=slave,
                             stderr=subprocess.PIPE, env=self.env())
        os.close(slave)
        out = self.read_pty(master, p, 10)
        self.assertEqual(p.wait(10), 0)
        self.assertIn("[r1 a1 out] red ?[31mtext", out)
        self.assertNotIn("\x1b", out)

    def test_logs_follow_until_the_job_ends(self):
        r = self.ctl("logs", "-f", "lf")
        self.assertEqual(r.returncode, 0, r.stderr)
        # every line once, in order, the one that came after the end included
        self.assertEqual(r.stdout.splitlines(), ["[r%d a1 out] lf line %d" % (i % 2, i) for i in range(7)])
        self.assertEqual(r.stderr, "ringctl: job lf succeeded\n")
        self.assertTrue(all("since" in q for q in self.log_queries()))

    def test_logs_errors(self):
        r = self.ctl("logs", "nope")
        self.assertEqual((r.returncode, r.stderr), (1, "ringctl: 404 Not Found: no route /v1/jobs/nope/logs\n"))
        for args in (["--tail", "0", "lj"], ["--tail", "10001", "lj"], ["--rank", "x", "lj"],
                     ["--attempt", "0", "lj"], ["lj", "extra"], []):
            r = self.ctl("logs", *args)
            self.assertEqual(r.returncode, 64, (args, r.stderr))

    # ---- wait, submit --wait -----------------------------------------------

    def test_wait_succeeded(self):
        r = self.ctl("wait", "lf")
        self.assertEqual((r.returncode, r.stdout, r.stderr), (0, "job lf: succeeded\n", ""))

    def test_wait_failed_prints_the_reason(self):
        r = self.ctl("wait", "bad")
        self.assertEqual(r.returncode, 3)
        self.assertEqual(r.stderr, "ringctl: job bad failed: rank 1 exited: killed by signal 9\n")

    def test_wait_cancelled_takes_the_last_events_reason(self):
        r = self.ctl("wait", "gone")
        self.assertEqual(r.returncode, 4)
        self.assertEqual(r.stderr, "ringctl: job gone cancelled: cancelled by alice\n")

    def test_wait_timeout_and_errors(self):
        r = self.ctl("wait", "--timeout", "1.2", "slow")
        self.assertEqual(r.returncode, 5)
        self.assertIn("job slow is still running after 1.2 s", r.stderr)
        self.assertEqual(self.ctl("wait", "nope").returncode, 1)
        self.assertEqual(self.ctl("wait", "--timeout", "-1", "slow").returncode, 64)

    def test_submit_wait_follows_logs(self):
        r = self.ctl("submit", "--wait", "-", stdin='{"name": "follow-me", "data": {"train": "x"}}')
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0], "submitted job lf (follow-me): queued")
        self.assertEqual(lines[1:], ["[r%d a1 out] lf line %d" % (i % 2, i) for i in range(7)])
        self.assertEqual(r.stderr, "ringctl: job lf succeeded\n")

    def test_submit_wait_metrics(self):
        r = self.ctl("submit", "--wait", "--metrics", "-", stdin='{"name": "follow-me", "data": {"train": "x"}}')
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[1].split()[:2], ["STEP", "LOSS"])
        steps = [int(l.split()[0]) for l in lines[2:]]
        self.assertEqual(steps, sorted(set(steps)))
        self.assertGreaterEqual(len(steps), 3)
        self.assertNotIn("/logs", " ".join(x["path"] for x in Handler.requests))

    def test_submit_wait_failed_job(self):
        r = self.ctl("submit", "--wait", "-", stdin='{"name": "fail-me", "data": {"train": "x"}}')
        self.assertEqual(r.returncode, 3)
        self.assertEqual(r.stdout.splitlines()[1:], ["[r1 a1 err] Traceback"])
        self.assertEqual(r.stderr, "ringctl: job bad failed: rank 1 exited: killed by signal 9\n")
        Handler.requests.clear()
        r = self.ctl("submit", "--metrics", "-", stdin="{}")
        self.assertEqual(r.returncode, 64)
        self.assertEqual(Handler.requests, [])

    # ---- jobs --watch ------------------------------------------------------

    def env(self):
        env = {k: v for k, v in os.environ.items()
               if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
        env.pop("RINGMASTER_SERVER", None)
        return env

    @staticmethod
    def read_fd(fd, proc, seconds, done=lambda out: False, settled=lambda: True):
        """Reads fd until done(text so far) and then settled() (to see that
        nothing else comes meanwhile), or until seconds have passed or it
        closed."""
        out = b""
        end = time.monotonic() + seconds
        finished = False
        while time.monotonic() < end and not (finished and settled()):
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
                finished = finished or done(out.decode("utf-8", "replace"))
            elif proc.poll() is not None:
                break
        return out.decode("utf-8", "replace")

    def read_pty(self, master, proc, seconds):
        try:
            return self.read_fd(master, proc, seconds)
        finally:
            os.close(master)

    def watch(self, tty, done):
        """Runs jobs --watch on the moving list until done(output) and two
        more reads of the list (that change nothing); returns its output."""
        argv = [RINGCTL, "--server", self.url, "jobs", "--watch", "--state", "watch"]
        if tty:
            master, slave = pty.openpty()
            p = subprocess.Popen(argv, stdout=slave, stderr=subprocess.PIPE, env=self.env())
            os.close(slave)
            fd = master
        else:
            p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env())
            fd = p.stdout.fileno()
        try:
            return self.read_fd(fd, p, 30, done, lambda: READS.get("watch", 0) >= 6)
        finally:
            p.terminate()
            p.wait(10)
            if tty:
                os.close(master)
            else:
                p.stdout.close()
            p.stderr.close()

    def test_jobs_watch_prints_changed_rows(self):
        out = self.watch(False, lambda out: "j2" in out and out.endswith("\n"))
        rows = [l.split()[:3] for l in out.splitlines() if not l.startswith("ID")]
        # j1 queued once, j1 running once (when it changed), j2 once (when it came)
        self.assertEqual(rows, [["j1", "tiny", "queued"], ["j1", "tiny", "running"],
                                ["j2", "sparse", "queued"]], out)
        self.assertGreaterEqual(READS["watch"], 6)

    def test_jobs_watch_on_a_terminal_redraws_on_change(self):
        out = self.watch(True, lambda out: out.count("\x1b[H\x1b[2J") >= 3 and "j2" in out)
        draws = out.split("\x1b[H\x1b[2J")[1:]
        self.assertEqual(len(draws), 3, out)  # the first list, j1 running, j2 added; no redraw after
        self.assertGreaterEqual(READS["watch"], 6)
        self.assertIn("queued", draws[0])
        self.assertNotIn("j2", draws[1])
        self.assertIn("running", draws[1])
        self.assertIn("j2", draws[2])

    def test_jobs_watch_unknown_state_ends(self):
        r = self.ctl("jobs", "--watch", "--cursor", "bogus")
        self.assertEqual(r.returncode, 1, r.stderr)

    # ---- export JOB where the coordinator lists it ----------------------------

    def test_export_reads_the_listed_snapshot(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "m.safetensors")
            r = self.ctl("export", "ex", "--step", "7", "-o", out,
                         env_extra={"RINGMASTER_CHECKPOINT_ROOT": ""})
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("exported step 7 from %s/ex/step-00000007" % SNAP_ROOT, r.stdout)
            self.assertGreater(os.path.getsize(out), 1000)
            self.assertIn("/v1/jobs/ex/checkpoints", [x["path"] for x in Handler.requests])
            # the newest listed (9) is the corrupt one: it is refused, not passed over silently
            r = self.ctl("export", "ex", "-o", out)
            self.assertEqual(r.returncode, 1)
            self.assertIn("step-00000009", r.stderr)

    def test_export_unreadable_path_is_named(self):
        r = self.ctl("export", "exfar", "-o", "/dev/null")
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr, "ringctl: job exfar's snapshot of step 12 is at "
                         "/nonexistent/node-b/ckpt/exfar/step-00000012 (as the coordinator lists it), which "
                         "this host cannot read (No such file or directory); run ringctl export on the node "
                         "that has it, or give --root DIR with the checkpoint root as mounted here\n")
        r = self.ctl("export", "exnone", "-o", "/dev/null")
        self.assertEqual((r.returncode, r.stderr),
                         (1, "ringctl: job exnone has no committed checkpoint yet (the coordinator lists none)\n"))
        r = self.ctl("export", "ex", "--step", "8", "-o", "/dev/null")
        self.assertEqual(r.returncode, 1)
        self.assertIn("no committed checkpoint of step 8", r.stderr)
        r = self.ctl("export", "nojob", "-o", "/dev/null")
        self.assertEqual((r.returncode, r.stderr), (1, "ringctl: 404 Not Found: no route /v1/jobs/nojob/checkpoints\n"))

    def test_export_root_does_not_ask_the_coordinator(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "m.safetensors")
            r = self.ctl("export", "ex", "--root", SNAP_ROOT, "-o", out)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("passing over step 9", r.stderr)
            self.assertIn("exported step 7", r.stdout)
            r = self.ctl("export", "ex", "-o", out, env_extra={"RINGMASTER_CHECKPOINT_ROOT": SNAP_ROOT})
            self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(Handler.requests, [])

    def test_export_unreachable_coordinator_tries_the_default_root(self):
        r = self.ctl("export", "ex", "-o", "/dev/null", "--server", "http://127.0.0.1:1", server=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("trying the default checkpoint root /var/lib/ringmaster/checkpoints", r.stderr)
        self.assertIn("no such job folder /var/lib/ringmaster/checkpoints/ex", r.stderr)


def main():
    global RINGCTL, SNAP_FIXTURE, SNAP_ROOT
    RINGCTL = sys.argv.pop(1)
    SNAP_FIXTURE = sys.argv.pop(1)
    with tempfile.TemporaryDirectory(prefix="ringctl-mock-") as tmp:
        SNAP_ROOT = os.path.join(tmp, "ckpt")
        r = subprocess.run([SNAP_FIXTURE, SNAP_ROOT, "ex"], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("snap_fixture exited with %d: %s" % (r.returncode, r.stderr))
        unittest.main(verbosity=2)


if __name__ == "__main__":
    main()
