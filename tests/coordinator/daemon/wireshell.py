"""Drive wire_shell (wire_shell.c): agents and ranks over real ZeroMQ DEALER
sockets against ringmasterd, from the standard library only."""
import json
import queue
import subprocess
import threading
import time

from rmtest import Failure, check

# How long wire_shell may take to answer a command beyond the wait the
# command asks for (recv and sleep): a wedged shell fails the test, naming
# the command, instead of running into meson's timeout without a word.
ANSWER_SLACK_S = 30


class Shell:
    def __init__(self, binary, endpoint):
        self.endpoint = endpoint
        self.proc = subprocess.Popen([binary], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, bufsize=1)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for out in self.proc.stdout:
            self.lines.put(out)
        self.lines.put("")  # end of output: the shell exited

    def cmd(self, line):
        words = line.split(" ")
        wait_ms = 0
        if words[0] == "sleep" and len(words) > 1:
            wait_ms = int(words[1])
        elif words[0] == "recv" and len(words) > 2:
            wait_ms = int(words[2])
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        limit = wait_ms / 1000 + ANSWER_SLACK_S
        try:
            out = self.lines.get(timeout=limit)
        except queue.Empty:
            raise Failure("wire_shell did not answer within %.0f s (command %r)" % (limit, line[:200]))
        if not out:
            raise Failure("wire_shell exited (command %r)" % line[:200])
        return out.rstrip("\n")

    def ok(self, line):
        out = self.cmd(line)
        check(out == "OK", "wire_shell %r: %s" % (line[:200], out))

    def dealer(self, name, identity):
        self.ok("dealer %s %s %s" % (name, identity, self.endpoint))

    def curve_dealer(self, name, identity, server_key, public, secret):
        """A DEALER that connects as a CURVE client with these Z85 keys."""
        self.ok("curve %s %s %s %s %s %s" % (name, identity, self.endpoint, server_key, public, secret))

    def keypair(self):
        """A new CURVE key pair (public, secret), Z85."""
        out = self.cmd("keypair")
        check(out.startswith("KEY "), "wire_shell keypair: %s" % out)
        _, pub, sec = out.split(" ")
        return pub, sec

    def send(self, name, type_, payload):
        text = payload if isinstance(payload, str) else json.dumps(payload)
        self.ok("send %s %s %s" % (name, type_, text))

    def beat(self, name, node, ms):
        self.ok("beat %s %s %d" % (name, node, ms))

    def recv(self, name, timeout_ms=5000, type_=None):
        """(type, payload dict), or (None, None) on timeout."""
        out = self.cmd("recv %s %d%s" % (name, timeout_ms, " " + type_ if type_ else ""))
        if out == "TIMEOUT":
            return None, None
        check(out.startswith("MSG "), "wire_shell recv: %s" % out)
        _, t, payload = out.split(" ", 2)
        return t, json.loads(payload)

    def expect(self, name, type_, timeout_ms=5000, what=""):
        t, p = self.recv(name, timeout_ms)
        check(t == type_, "%s: expected %s on %s, got %s %r" % (what or "message", type_, name, t, p))
        return p

    def silent(self, name, ms, what=""):
        t, p = self.recv(name, ms)
        check(t is None, "%s: expected nothing on %s, got %s %r" % (what or "silence", name, t, p))

    def count(self, name, type_):
        return int(self.cmd("count %s %s" % (name, type_)))

    def close(self, name):
        self.ok("close %s" % name)

    def sleep(self, ms):
        self.ok("sleep %d" % ms)

    def quit(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def register(sh, name, node, devices, ranks=(), beat_ms=None):
    """Connect agent/<node>, REGISTER, check REGISTERED; start heartbeats."""
    sh.dealer(name, "agent/" + node)
    sh.send(name, "REGISTER", {"node": node, "devices": devices, "ranks": list(ranks)})
    p = sh.expect(name, "REGISTERED", what="REGISTER of %s" % node)
    if beat_ms:
        sh.beat(name, node, beat_ms)
    return p


def cpus(n, kind="cpu"):
    return [{"kind": kind, "index": i} for i in range(n)]


def spec(name, world_size=1, device="cpu", priority=0):
    return {"name": name, "data": {"train": "data/tiny/train.bin"}, "priority": priority,
            "parallel": {"world_size": world_size, "device": device}}


def wait_state(d, job_id, state, timeout=10):
    deadline = time.time() + timeout
    doc = None
    while time.time() < deadline:
        _, _, doc = d.json("GET", "/v1/jobs/" + job_id, expect=200)
        if doc["state"] == state:
            return doc
        time.sleep(0.05)
    raise Failure("job %s: state %s after %ss, expected %s (reason %r)"
                  % (job_id, doc and doc["state"], timeout, state, doc and doc.get("state_reason")))


def events(d, job_id):
    _, _, doc = d.json("GET", "/v1/jobs/%s/events" % job_id, expect=200)
    return doc["events"]
