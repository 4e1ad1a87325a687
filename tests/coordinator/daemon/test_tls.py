"""HTTPS served by ringmasterd itself (--tls-cert, --tls-key): a certificate
made here with openssl, a REST round trip and an event stream over TLS with
Python's ssl, ringctl --cacert, plain HTTP to the TLS port refused cleanly, a
wrong CA refused by ringctl with a message that says what to do, and bad
certificate/key files refused at start naming the file."""
import json
import os
import socket
import ssl
import subprocess
import time

import rmtest
import tlsutil
from rmtest import check


def token_env(d):
    env = dict(os.environ)
    if getattr(d, "token", None):
        env["RINGMASTER_TOKEN"] = d.token
    return env


def start_refused(binary, workdir, args, expect):
    """ringmasterd with `args` must exit non-zero at start, saying `expect`."""
    p = subprocess.run([binary, "--listen", "127.0.0.1:%d" % rmtest.free_port(),
                        "--broker", "tcp://127.0.0.1:%d" % rmtest.free_port(),
                        "--db", os.path.join(workdir, "refused", "rm.db")] + args,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=20)
    out = p.stdout.decode("utf-8", "replace")
    check(p.returncode != 0, "ringmasterd started with %r:\n%s" % (args, out))
    check(expect in out, "refusal of %r does not say %r:\n%s" % (args, expect, out))
    check("BEGIN" not in out.replace("-----BEGIN CERTIFICATE-----", "").replace("-----BEGIN PRIVATE KEY-----", ""),
          "the refusal quotes a file's contents:\n%s" % out)
    return out


def read_event(resp, deadline):
    """The first SSE event (event name, data) from an http.client response."""
    event = None
    while time.time() < deadline:
        line = resp.fp.readline().decode()
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            return event, json.loads(line[5:])
    raise rmtest.Failure("no event within the deadline")


def main(binary, workdir, daemons, ringctl):
    tlsutil.need_openssl()
    cert, key = tlsutil.make_cert(workdir)
    other_cert, _ = tlsutil.make_cert(workdir, "other", "other-ca")

    # bad files: each refused at start, naming the file
    start_refused(binary, workdir, ["--tls-cert", cert], "tls_key")
    start_refused(binary, workdir, ["--tls-key", key], "tls_cert")
    start_refused(binary, workdir, ["--tls-cert", cert, "--tls-key", "/nonexistent/x.key"],
                  "cannot read --tls-key /nonexistent/x.key")
    start_refused(binary, workdir, ["--tls-cert", key, "--tls-key", key], "--tls-cert %s holds no PEM certificate" % key)
    start_refused(binary, workdir, ["--tls-cert", cert, "--tls-key", cert], "--tls-key %s holds no usable PEM private key" % cert)
    _, other_key = tlsutil.make_cert(workdir, "mismatch")
    start_refused(binary, workdir, ["--tls-cert", cert, "--tls-key", other_key], "cannot be used with --tls-cert")

    # a key readable by others: served, but warned about
    loose_cert, loose_key = tlsutil.make_cert(workdir, "loose")
    os.chmod(loose_key, 0o644)
    d0 = tlsutil.TlsDaemon(binary, os.path.join(workdir, "d0"), loose_cert, loose_key)
    os.makedirs(d0.workdir)
    daemons.append(d0)
    d0.start()
    check("can be read by group or others" in d0.logtext(), "no warning for a 0644 key:\n" + d0.logtext())
    d0.stop()

    d = tlsutil.TlsDaemon(binary, os.path.join(workdir, "d"), cert, key)
    os.makedirs(d.workdir)
    daemons.append(d)
    d.start()
    check("serving https://" in d.logtext(), "the start line does not say https:\n" + d.logtext())
    check("can be read by group" not in d.logtext(), "a 0600 key was warned about")

    # REST round trip over TLS
    job = d.submit()
    st, _, doc = d.json("GET", "/v1/jobs/" + job["id"], expect=200)
    check(doc["id"] == job["id"], "GET over TLS: %r" % doc)

    # an event stream over TLS: the job's state arrives, then cancel ends it
    c = d.conn(timeout=20)
    h = {"Accept": "text/event-stream"}
    if getattr(d, "token", None):
        h["Authorization"] = "Bearer " + d.token
    c.request("GET", "/v1/jobs/%s/stream" % job["id"], headers=h)
    r = c.getresponse()
    check(r.status == 200 and r.getheader("Content-Type", "").startswith("text/event-stream"),
          "stream over TLS: %s %s" % (r.status, r.getheader("Content-Type")))
    ev, data = read_event(r, time.time() + 10)
    check(ev == "state", "first stream event over TLS: %r %r" % (ev, data))
    d.json("POST", "/v1/jobs/%s/cancel" % job["id"], expect=200)
    deadline = time.time() + 10
    while True:
        ev, data = read_event(r, deadline)
        if ev == "end":
            break
    check(data.get("state") == "cancelled", "stream end over TLS: %r" % data)
    c.close()

    # plain HTTP to the TLS port: no HTTP answer, and the daemon keeps serving
    s = socket.create_connection(("127.0.0.1", d.port), timeout=5)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        got = s.recv(4096)
    except (ConnectionResetError, socket.timeout):
        got = b""
    s.close()
    check(not got.startswith(b"HTTP/"), "plain HTTP on the TLS port got an HTTP answer: %r" % got[:100])
    # a TLS client that does not trust the certificate is refused by the handshake
    try:
        with socket.create_connection(("127.0.0.1", d.port), timeout=5) as raw:
            with ssl.create_default_context().wrap_socket(raw, server_hostname="localhost"):
                raise rmtest.Failure("an untrusted self-signed certificate was accepted")
    except ssl.SSLCertVerificationError:
        pass
    st, _, _ = d.request("GET", "/healthz")
    check(st == 200, "healthz after plain HTTP and a failed handshake: %s" % st)

    # ringctl --cacert: trusted; without it or with another CA: a clear refusal
    env = token_env(d)
    p = subprocess.run([ringctl, "--server", d.url(), "--cacert", cert, "--json", "show", job["id"]],
                       capture_output=True, env=env, timeout=30)
    check(p.returncode == 0 and job["id"].encode() in p.stdout, "ringctl --cacert: %d %r %r" % (p.returncode, p.stdout[:300], p.stderr))
    for args in (["--cacert", other_cert], []):
        p = subprocess.run([ringctl, "--server", d.url()] + args + ["jobs"], capture_output=True, env=env, timeout=30)
        err = p.stderr.decode()
        check(p.returncode == 2, "ringctl with %r: exit %d, %r" % (args, p.returncode, err))
        check("cannot open a trusted TLS connection" in err and "--cacert" in err,
              "ringctl with %r does not say what is wrong: %r" % (args, err))
    check(d.proc.poll() is None, "the daemon died")
    rc = d.stop()
    check(rc == 0, "stop: %s" % rc)


rmtest.run(main)
