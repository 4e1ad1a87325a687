"""nginx in front of ringmasterd, with packaging/nginx/ringmaster.conf as
shipped (only its port, certificate paths and upstream address changed): nginx
runs as the test user from a temporary prefix on a high port with a
self-signed certificate made here; a job is submitted and fetched through it
over TLS, and an event stream delivers its events through it unbuffered.
Exits 77 (skipped) when nginx or openssl is not installed."""
import json
import os
import re
import shutil
import subprocess
import sys
import time

import rmtest
import tlsutil
from rmtest import check


def nginx_binary():
    for p in (shutil.which("nginx"), "/usr/sbin/nginx"):
        if p and os.access(p, os.X_OK):
            return p
    return None


def adapt(conf, port, upstream_port, cert, key):
    """The packaged file with this test's port, certificate and upstream."""
    subs = [(r"listen 443 ssl;", "listen 127.0.0.1:%d ssl;" % port),
            (r"server 127\.0\.0\.1:8080;", "server 127.0.0.1:%d;" % upstream_port),
            (r"ssl_certificate\s+/etc/ringmaster/tls\.crt;", "ssl_certificate %s;" % cert),
            (r"ssl_certificate_key\s+/etc/ringmaster/tls\.key;", "ssl_certificate_key %s;" % key)]
    for pat, rep in subs:
        conf, n = re.subn(pat, rep, conf)
        check(n == 1, "packaging/nginx/ringmaster.conf: %r not found once" % pat)
    return conf


def start_nginx(binary, prefix, site_conf):
    for d in ("logs", "tmp"):
        os.makedirs(os.path.join(prefix, d), exist_ok=True)
    with open(os.path.join(prefix, "ringmaster.conf"), "w") as f:
        f.write(site_conf)
    main_conf = os.path.join(prefix, "nginx.conf")
    with open(main_conf, "w") as f:
        f.write("""pid %(p)s/nginx.pid;
error_log %(p)s/logs/error.log info;
worker_processes 1;
events { worker_connections 256; }
http {
    access_log %(p)s/logs/access.log;
    client_body_temp_path %(p)s/tmp/body;
    proxy_temp_path %(p)s/tmp/proxy;
    fastcgi_temp_path %(p)s/tmp/fastcgi;
    uwsgi_temp_path %(p)s/tmp/uwsgi;
    scgi_temp_path %(p)s/tmp/scgi;
    include %(p)s/ringmaster.conf;
}
""" % {"p": prefix})
    log = open(os.path.join(prefix, "logs", "stderr.log"), "wb")
    return subprocess.Popen([binary, "-p", prefix, "-e", os.path.join(prefix, "logs", "error.log"),
                             "-c", main_conf, "-g", "daemon off;"], stdout=log, stderr=subprocess.STDOUT)


def nginx_log(prefix):
    out = ""
    for name in ("stderr.log", "error.log"):
        try:
            with open(os.path.join(prefix, "logs", name)) as f:
                out += f.read()[-2000:]
        except OSError:
            pass
    return out


class ViaNginx(rmtest.Daemon):
    """Requests to a daemon go through nginx (HTTPS) instead."""

    def __init__(self, inner, port, cafile):
        self.inner, self.nginx_port = inner, port
        self.ctx = tlsutil.client_context(cafile)
        self.token = getattr(inner, "token", None)

    def conn(self, timeout=30):
        import http.client
        return http.client.HTTPSConnection("localhost", self.nginx_port, timeout=timeout, context=self.ctx)

    def request(self, method, path, body=None, headers=None, timeout=30, token=rmtest.ADMIN):
        return rmtest.Daemon.request(self, method, path, body, headers, timeout, token=token)


def main(binary, workdir, daemons):
    nginx = nginx_binary()
    if not nginx or not shutil.which("openssl"):
        print("SKIP: nginx or openssl is not installed (scripts/deps installs both)")
        sys.exit(77)
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "packaging", "nginx",
                       "ringmaster.conf")
    with open(src) as f:
        packaged = f.read()
    cert, key = tlsutil.make_cert(workdir)

    d = rmtest.Daemon(binary, workdir)
    daemons.append(d)
    d.start()
    port = rmtest.free_port()
    prefix = os.path.join(workdir, "nginx")
    ng = start_nginx(nginx, prefix, adapt(packaged, port, d.port, cert, key))
    try:
        v = ViaNginx(d, port, cert)
        deadline = time.time() + 15
        while True:
            check(ng.poll() is None, "nginx exited with %s:\n%s" % (ng.returncode, nginx_log(prefix)))
            try:
                if v.request("GET", "/healthz", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            check(time.time() < deadline, "nginx not answering:\n" + nginx_log(prefix))
            time.sleep(0.1)

        job = v.submit()
        st, h, doc = v.json("GET", "/v1/jobs/" + job["id"], expect=200)
        check(doc["id"] == job["id"] and doc["state"] == "queued", "job through nginx: %r" % doc)
        st2, _, direct = d.json("GET", "/v1/jobs/" + job["id"], expect=200)
        check(direct == doc, "nginx changed the job's JSON")
        st, h, body = v.request("GET", "/v1/jobs/j-nosuchjob")
        check(st == 404 and h.get("content-type", "").startswith("application/problem+json"),
              "a 404 through nginx: %s %r" % (st, h))

        # an event stream through nginx: the state now, the end after cancel
        c = v.conn(timeout=20)
        hd = {"Accept": "text/event-stream"}
        if v.token:
            hd["Authorization"] = "Bearer " + v.token
        c.request("GET", "/v1/jobs/%s/stream" % job["id"], headers=hd)
        r = c.getresponse()
        check(r.status == 200, "stream through nginx: %s" % r.status)
        events = []

        def next_event(deadline):
            ev = None
            while time.time() < deadline:
                line = r.fp.readline().decode()
                check(line != "", "the stream through nginx closed early after %r" % events)
                if line.startswith("event:"):
                    ev = line[6:].strip()
                elif line.startswith("data:"):
                    events.append(ev)
                    return ev, json.loads(line[5:])
            raise rmtest.Failure("no event through nginx within the deadline: %r" % events)

        ev, data = next_event(time.time() + 10)
        check(ev == "state", "first event through nginx: %r %r" % (ev, data))
        v.json("POST", "/v1/jobs/%s/cancel" % job["id"], expect=200)
        deadline = time.time() + 10
        while ev != "end":
            ev, data = next_event(deadline)
        check(data.get("state") == "cancelled", "end event through nginx: %r" % data)
        c.close()
        check(d.proc.poll() is None and ng.poll() is None, "a server died")
    finally:
        if ng.poll() is None:
            ng.terminate()
            try:
                ng.wait(10)
            except subprocess.TimeoutExpired:
                ng.kill()
                ng.wait()
    check(d.stop() == 0, "stop")


rmtest.run(main)
