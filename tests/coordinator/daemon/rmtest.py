"""Helpers for the ringmasterd integration tests: start the real binary on a
free port with a temporary database, talk HTTP with http.client, clean up.
Standard library only (the suite runs with /usr/bin/python3)."""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

SPEC = {"name": "tiny", "data": {"train": "data/tiny/train.bin"}}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


# request(token=...) default: the daemon's admin token
ADMIN = object()


class Daemon:
    """One ringmasterd process. `workdir` holds its database and log.

    Authentication is on by default: once the daemon is ready, `token` holds
    the admin token it wrote to admin.token beside its database (None when
    there is none, as with --auth off on a fresh folder), and request(),
    json() and submit() send it as "Authorization: Bearer" unless told
    otherwise (token=None: no credential; token="rmt_...": that one; an
    Authorization header given by the caller wins).
    """

    def __init__(self, binary, workdir, db=None, extra_args=(), env=None):
        self.binary = binary
        self.workdir = workdir
        self.db = db or os.path.join(workdir, "state", "rm.db")
        self.extra_args = list(extra_args)
        self.env = env
        self.proc = None
        self.port = None
        self.log_path = None
        self.n_starts = 0
        self.token = None

    @property
    def admin_token_path(self):
        return os.path.join(os.path.dirname(self.db), "admin.token")

    def read_token(self):
        """The admin token from admin.token (None when the file is absent)."""
        try:
            with open(self.admin_token_path) as f:
                self.token = f.read().strip() or None
        except FileNotFoundError:
            self.token = None
        return self.token

    def auth_headers(self, token=ADMIN):
        """{"Authorization": "Bearer ..."} for `token` (ADMIN: the admin token; None: {})."""
        t = self.token if token is ADMIN else token
        return {"Authorization": "Bearer " + t} if t else {}

    def ctl_env(self, token=ADMIN):
        """The environment to run ringctl against this daemon: RINGMASTER_SERVER
        and RINGMASTER_TOKEN (the admin token unless told)."""
        env = dict(os.environ)
        env["RINGMASTER_SERVER"] = "http://127.0.0.1:%d" % self.port
        env.pop("RINGMASTER_TOKEN", None)
        t = self.token if token is ADMIN else token
        if t:
            env["RINGMASTER_TOKEN"] = t
        return env

    def make_token(self, name, role, expires_in_s=None):
        """A new token of `role` made with the admin token: its 201 document (with "token")."""
        body = {"name": name, "role": role}
        if expires_in_s is not None:
            body["expires_in_s"] = expires_in_s
        _, _, doc = self.json("POST", "/v1/tokens", body, expect=201)
        return doc

    def start(self, wait=True):
        self.port = free_port()
        bport = self.broker_port = free_port()
        self.n_starts += 1
        self.log_path = os.path.join(self.workdir, "daemon-%d.log" % self.n_starts)
        args = [self.binary, "--listen", "127.0.0.1:%d" % self.port,
                "--broker", "tcp://127.0.0.1:%d" % bport, "--db", self.db,
                "--log-level", os.environ.get("RM_LOG_LEVEL", "info"),
                "--submit-rate", "0"] + self.extra_args
        self.log = open(self.log_path, "wb")
        env = dict(os.environ)
        if self.env:
            env.update(self.env)
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise Failure("ringmasterd exited with %s at start:\n%s" % (self.proc.returncode, self.logtext()))
            try:
                st, _, _ = self.request("GET", "/readyz", timeout=2, token=None)
                if st == 200:
                    self.read_token()
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise Failure("ringmasterd not ready after %ss:\n%s" % (timeout, self.logtext()))

    def logtext(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")[-4000:]
        except OSError:
            return ""

    def conn(self, timeout=30):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=30, token=ADMIN):
        """One request on a new connection: (status, headers dict lower-case, body bytes)."""
        c = self.conn(timeout)
        try:
            h = self.auth_headers(token)
            h.update(headers or {})
            if isinstance(body, (dict, list)):
                body = json.dumps(body).encode()
                h.setdefault("Content-Type", "application/json")
            elif isinstance(body, str):
                body = body.encode()
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            data = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, data
        finally:
            c.close()

    def json(self, method, path, body=None, headers=None, expect=None, token=ADMIN):
        st, h, data = self.request(method, path, body, headers, token=token)
        if expect is not None:
            check(st == expect, "%s %s: expected %s, got %s: %r" % (method, path, expect, st, data[:500]))
        try:
            doc = json.loads(data) if data else None
        except ValueError:
            raise Failure("%s %s: body is not JSON: %r" % (method, path, data[:300]))
        return st, h, doc

    def submit(self, spec=None, headers=None, expect=201, token=ADMIN):
        _, _, doc = self.json("POST", "/v1/jobs", spec or SPEC, headers, expect, token=token)
        return doc

    def stop(self, sig=signal.SIGTERM, timeout=20):
        if not self.proc or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise Failure("ringmasterd did not stop within %ss:\n%s" % (timeout, self.logtext()))
        self.log.close()
        return rc

    def kill9(self):
        self.proc.kill()
        self.proc.wait()
        self.log.close()


def problem_of(h, data, status):
    """Check a problem+json answer and return it as a dict."""
    ct = h.get("content-type", "")
    check(ct.startswith("application/problem+json"),
          "expected application/problem+json, got %r for %r" % (ct, data[:300]))
    doc = json.loads(data)
    check(doc.get("status") == status, "problem status %r != %r" % (doc.get("status"), status))
    check(isinstance(doc.get("title"), str) and doc["title"], "problem without title: %r" % doc)
    check(isinstance(doc.get("detail"), str) and doc["detail"], "problem without detail: %r" % doc)
    return doc


_daemons = []  # run()'s daemons, for on_sigterm


def on_sigterm(signum, frame):
    """meson's timeout sends SIGTERM, and SIGKILL half a second later: say
    at once where the test was waiting and what the daemons last logged."""
    text = "killed by SIGTERM (the test's timeout) here:\n" + "".join(traceback.format_stack(frame))
    for d in _daemons:
        text += "---- end of %s ----\n%s\n" % (d.log_path, d.logtext()[-1500:])
    sys.stderr.write(text)
    sys.stderr.flush()
    raise Failure("killed by SIGTERM (the test's timeout)")


def run(main):
    """Run `main(binary, workdir)` in a temporary folder; exit 0/1."""
    if len(sys.argv) < 2:
        print("usage: %s RINGMASTERD [ARGS...]" % sys.argv[0], file=sys.stderr)
        sys.exit(2)
    binary = os.path.abspath(sys.argv[1])
    workdir = tempfile.mkdtemp(prefix="rm-daemon-test-")
    daemons = _daemons
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        main(binary, workdir, daemons, *sys.argv[2:])
        print("ok")
        code = 0
    except Failure as e:
        print("FAIL: %s" % e)
        for d in daemons:
            print("---- log of %s ----\n%s" % (d.log_path, d.logtext()))
        sys.stdout.flush()
        code = 1
    finally:
        for d in daemons:
            if d.proc and d.proc.poll() is None:
                d.proc.kill()
                d.proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)
    sys.exit(code)
