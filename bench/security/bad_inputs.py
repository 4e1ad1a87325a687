#!/usr/bin/python3
"""The bad-input table of bench/RESULTS.md: throw each class of hostile or
malformed input at a real ringmasterd, count the answers, and check that the
daemon stayed alive and nothing stored was lost or changed.

Usage: bench/security/bad_inputs.py BUILD_DIR [--rounds N]

It starts ringmasterd from BUILD_DIR (no agents: the jobs it submits stay
queued, so their rows must come out exactly as they went in), reads the
admin token the first start writes beside the database, makes a viewer and
an operator token, submits a few good jobs, then for each class sends N
inputs (default 200, fewer for the expensive ones) and tallies the status
codes. After all of them: /healthz answers, every job is still there with
the same state, name and submitter, and SQLite's integrity_check says ok.
Prints a Markdown table; exits 1 when an answer was not the expected one or
anything was lost.
"""
import argparse
import collections
import http.client
import json
import os
import random
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Daemon:
    def __init__(self, build, workdir):
        self.port = free_port()
        self.db = os.path.join(workdir, "state", "rm.db")
        self.log = open(os.path.join(workdir, "ringmasterd.log"), "ab")
        args = [os.path.join(build, "coordinatord", "ringmasterd"),
                "--listen", "127.0.0.1:%d" % self.port,
                "--broker", "tcp://127.0.0.1:%d" % free_port(),
                "--db", self.db, "--submit-rate", "60", "--submit-burst", "250"]
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                if self.request("GET", "/healthz", token=None)[0] == 200:
                    break
            except OSError:
                time.sleep(0.1)
        with open(os.path.join(os.path.dirname(self.db), "admin.token")) as f:
            self.admin = f.read().strip()

    def request(self, method, path, body=None, token="admin", headers=None, timeout=20):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = dict(headers or {})
        if token == "admin":
            token = self.admin
        if token:
            h["Authorization"] = "Bearer " + token
        if body is not None and not isinstance(body, bytes):
            body = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)


def raw(port, data, timeout=10):
    """Send raw bytes, return the status code of the answer (0: closed)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        got = b""
        while b"\r\n" not in got:
            chunk = s.recv(4096)
            if not chunk:
                return 0
            got += chunk
        return int(got.split(b" ", 2)[1])
    except (OSError, ValueError, IndexError):
        return 0
    finally:
        s.close()


GOOD_SPEC = {"name": "good", "data": {"train": "tiny/train.txt", "val": "tiny/val.txt", "format": "text"},
             "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 256, "seq_len": 32},
             "train": {"steps": 10, "batch_size": 2, "warmup_steps": 2}, "parallel": {"world_size": 1, "device": "cpu"}}


def spec_with(path, value):
    doc = json.loads(json.dumps(GOOD_SPEC))
    cur = doc
    parts = path.split(".")
    for p in parts[:-1]:
        cur = cur.setdefault(p, {})
    cur[parts[-1]] = value
    return doc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build")
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args()
    n = args.rounds
    rng = random.Random(22)
    work = tempfile.mkdtemp(prefix="rm-bad-")
    d = Daemon(args.build, work)
    rows = []  # (class, count, expected, Counter)
    ok = True

    def tally(name, expected, statuses):
        nonlocal ok
        c = collections.Counter(statuses)
        good = all(s in expected for s in c)
        ok = ok and good
        rows.append((name, sum(c.values()), "/".join(str(e) for e in expected), c, good))
        print("%-55s %s" % (name, dict(c)), file=sys.stderr, flush=True)

    try:
        st, body = d.request("POST", "/v1/tokens", {"name": "viewer1", "role": "viewer"})
        viewer = json.loads(body)["token"]
        st, body = d.request("POST", "/v1/tokens", {"name": "op1", "role": "operator"})
        operator = json.loads(body)["token"]
        st, body = d.request("POST", "/v1/tokens", {"name": "gone", "role": "operator"})
        gone = json.loads(body)
        d.request("POST", "/v1/tokens/%s/revoke" % gone["id"], b"")
        jobs = []
        for i in range(5):
            st, body = d.request("POST", "/v1/jobs", spec_with("name", "keep-%d" % i), token=operator)
            jobs.append(json.loads(body))
        before = {j["id"]: (j["state"], j["name"], j.get("submitted_by")) for j in jobs}

        routes = subprocess.run([os.path.join(args.build, "coordinatord", "ringmasterd"), "--print-routes"],
                                capture_output=True, text=True).stdout.split("\n")
        protected = []
        for line in routes:
            parts = line.split()
            if len(parts) >= 2 and parts[1].startswith("/v1/") and not parts[1].startswith("/v1/session"):
                protected.append((parts[0], parts[1].replace("{id}", jobs[0]["id"])))
        tally("no credential, every /v1 route", (401,),
              [d.request(m, p, b"" if m == "POST" else None, token=None)[0] for m, p in protected])
        tally("random bearer tokens", (401,),
              [d.request("GET", "/v1/jobs", token="rmt_" + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789-_")
                                                             for _ in range(rng.randint(0, 60))))[0]
               for _ in range(n)])
        tally("a revoked token", (401,), [d.request("GET", "/v1/jobs", token=gone["token"])[0] for _ in range(20)])
        tally("viewer submits or cancels", (403,),
              [d.request("POST", "/v1/jobs", GOOD_SPEC, token=viewer)[0] for _ in range(10)] +
              [d.request("POST", "/v1/jobs/%s/cancel" % jobs[0]["id"], b"", token=viewer)[0] for _ in range(10)])
        tally("operator manages tokens", (403,),
              [d.request("POST", "/v1/tokens", {"name": "x", "role": "admin"}, token=operator)[0] for _ in range(10)])

        n_ops = [0]

        def op():
            """A fresh operator token: submissions are rate-limited per token."""
            n_ops[0] += 1
            return json.loads(d.request("POST", "/v1/tokens", {"name": "op-%d" % n_ops[0], "role": "operator"})[1])["token"]

        def garbage():
            kind = rng.randrange(4)
            if kind == 0:
                return bytes(rng.randrange(256) for _ in range(rng.randint(1, 300)))
            if kind == 1:
                return json.dumps(GOOD_SPEC).encode()[:rng.randint(1, 100)]
            if kind == 2:
                depth = rng.randint(100, 5000)
                return b"[" * depth + b"]" * depth
            return json.dumps({"name": 1, "train": "x"}).encode()
        tok = op()
        tally("malformed JSON bodies", (400, 422),
              [d.request("POST", "/v1/jobs", garbage(), token=tok,
                         headers={"Content-Type": "application/json"})[0] for _ in range(n)])
        traversal = [("data.train", "/etc/passwd"), ("data.train", "../../etc/passwd"),
                     ("data.train", "tiny/../../../etc/shadow"), ("data.val", "/proc/self/environ"),
                     ("data.train", "/etc/*"), ("data.val", "tiny/../../etc/passwd")]
        tok = op()
        tally("data paths escaping the data root", (400,),
              [d.request("POST", "/v1/jobs", spec_with(f, v), token=tok)[0]
               for f, v in traversal for _ in range(5)])
        tally("train.steps out of range", (400,),
              [d.request("POST", "/v1/jobs", spec_with("train.steps", s), token=tok)[0]
               for s in (0, -1, 10 ** 12, 10 ** 18, 2 ** 63)])
        tally("body over max_body_bytes (2 MiB)", (413,),
              [raw(d.port, b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                           b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n{"
                   % (operator.encode(), 2 << 20)) for _ in range(5)])
        tally("10 KB URL", (414,), [d.request("GET", "/v1/jobs/" + "a" * 10240)[0] for _ in range(20)])
        tally("64 KB of headers", (413, 431, 0),
              [raw(d.port, b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\n" +
                   b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 1000) for i in range(64)) + b"\r\n")
               for _ in range(10)])
        tally("cross-origin POST with a cookie and no CSRF header", (401, 403),
              [d.request("POST", "/v1/jobs/%s/cancel" % jobs[0]["id"], b"", token=None,
                         headers={"Origin": "http://evil.example", "Cookie": "rm_session=guess%d" % i})[0]
               for i in range(20)])
        tally("Host header of another name (DNS rebinding)", (401, 403, 421),
              [d.request("POST", "/v1/session", {"token": d.admin}, token=None,
                         headers={"Host": "evil.example:%d" % d.port})[0] for _ in range(10)])
        tok = op()
        flood = [d.request("POST", "/v1/jobs", spec_with("name", "flood"), token=tok)[0] for _ in range(300)]
        tally("submission flood past --submit-burst 250", (201, 429), flood)
        if 429 not in flood:
            ok = False
        socks = []
        for _ in range(300):  # from 127.0.0.2: the per-address cap keeps 127.0.0.1's reserve
            try:
                s = socket.create_connection(("127.0.0.1", d.port), timeout=5, source_address=("127.0.0.2", 0))
                s.sendall(b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\n")
                socks.append(s)
            except OSError:
                break
        t0 = time.time()
        health = d.request("GET", "/healthz", token=None, timeout=10)[0]
        health_ms = (time.time() - t0) * 1000
        for s in socks:
            s.close()
        tally("300 half-sent connections from one address, then /healthz from another", (200,), [health])
    finally:
        alive = d.proc.poll() is None
        after = {}
        if alive:
            for jid in list(before) if "before" in dir() else []:
                st, body = d.request("GET", "/v1/jobs/" + jid)
                if st == 200:
                    j = json.loads(body)
                    after[jid] = (j["state"], j["name"], j.get("submitted_by"))
        d.stop()
        integrity = sqlite3.connect(d.db).execute("PRAGMA integrity_check").fetchone()[0]

    print("| Class | Inputs | Expected | Answers | |")
    print("|---|---:|---|---|---|")
    for name, count, expected, c, good in rows:
        answers = ", ".join("%s x%d" % (k, v) for k, v in sorted(c.items()))
        print("| %s | %d | %s | %s | %s |" % (name, count, expected, answers, "ok" if good else "**unexpected**"))
    print()
    lost = [j for j in before if before[j] != after.get(j)]
    print("daemon alive throughout: %s; /healthz with 300 half-sent connections open: %d in %.0f ms"
          % ("yes" if alive else "NO", health, health_ms))
    print("jobs kept unchanged: %d of %d; SQLite integrity_check: %s" % (len(before) - len(lost), len(before),
                                                                        integrity))
    return 0 if ok and alive and not lost and integrity == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
