"""REST authentication against the real daemon, route by route from
`--print-routes` (nothing listed by hand but the public routes):

- without a credential every route answers 401 (problem+json,
  WWW-Authenticate: Bearer) but /healthz, /readyz, / and /assets/{name} and
  POST /v1/session (and /metrics from loopback by default; with
  --metrics-auth token it needs a token too);
- malformed credentials (another scheme, an empty bearer, a 10 KB one, a
  valid token with one character changed, another prefix) are 401 and the
  daemon goes on;
- an expired token (made with expires_in_s 1, waited out) and a revoked one
  are 401 on every protected route, the revocation at once even right after
  a use; a viewer gets 403 naming the role on every POST but the session's;
  an operator submits and cancels but gets 403 on the token routes;
- admin.token: mode 0600, its path logged and never the token, kept across a
  restart; last_used_at written on use;
- jobs record submitted_by and cancelled_by, events their actor;
  --max-queued-per-token answers 429 naming the cap, per token;
- --auth off works on loopback (every caller an admin) and is refused at
  start on a non-loopback address unless --insecure, which is logged.
"""
import os
import stat
import subprocess
import time

from rmtest import SPEC, Daemon, check, problem_of, run

PUBLIC = {("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/"), ("GET", "/assets/{name}"),
          ("POST", "/v1/session")}


def routes(binary):
    out = subprocess.run([binary, "--print-routes"], stdout=subprocess.PIPE, check=True, timeout=30)
    return [tuple(line.split(" ", 1)) for line in out.stdout.decode().splitlines() if line]


def url_of(path, job_id):
    return path.replace("{id}", job_id if "/jobs/" in path else "1").replace("{name}", "app.js")


def send(d, method, path, token, job_id):
    body = {} if method == "POST" else None
    if path.endswith("/stream"):
        # an event stream that is let in does not end: its status and headers only
        c = d.conn(10)
        try:
            c.request(method, url_of(path, job_id), headers=d.auth_headers(token))
            r = c.getresponse()
            h = {k.lower(): v for k, v in r.getheaders()}
            return r.status, h, r.read() if r.status != 200 else b""
        finally:
            c.close()
    return d.request(method, url_of(path, job_id), body, token=token)


def expect_401(d, table, token, job_id, words, label):
    n = 0
    for method, path in table:
        if (method, path) in PUBLIC or path == "/metrics":
            continue
        st, h, raw = send(d, method, path, token, job_id)
        check(st == 401, "%s: %s %s answered %s: %r" % (label, method, path, st, raw[:200]))
        check(h.get("www-authenticate", "").startswith("Bearer"), "%s: %s %s without WWW-Authenticate" %
              (label, method, path))
        p = problem_of(h, raw, 401)
        check(words in p["detail"], "%s: %s %s detail %r lacks %r" % (label, method, path, p["detail"], words))
        check(not token or token not in p["detail"], "the 401 echoes the token")
        n += 1
    return n


def sub(workdir, name):
    path = os.path.join(workdir, name)
    os.makedirs(path, exist_ok=True)
    return path


def admin_only(method, path):
    """The admin's routes: tokens, and changing the workers' keys."""
    return path.startswith("/v1/tokens") or (method == "POST" and path.startswith("/v1/workers/"))


def main(binary, workdir, daemons):
    table = routes(binary)
    check(len(table) >= 20, "only %d routes" % len(table))
    d = Daemon(binary, workdir)
    daemons.append(d)
    d.start()

    # admin.token: 0600, the path logged, never the token
    mode = stat.S_IMODE(os.stat(d.admin_token_path).st_mode)
    check(mode == 0o600, "admin.token mode %o" % mode)
    check(d.token and d.token.startswith("rmt_") and len(d.token) == 47, "admin token %r" % d.token)
    log = d.logtext()
    check(d.admin_token_path in log, "the log does not name admin.token:\n" + log)
    check(d.token not in log and d.token[4:20] not in log, "the log shows the token")
    job_id = d.submit()["id"]

    # no credential: 401 everywhere but the public routes
    n = expect_401(d, table, None, job_id, "needs an API token", "no token")
    check(n >= 15, "only %d protected routes" % n)
    for method, path in PUBLIC:
        if method == "GET":
            st, _, _ = send(d, method, path, None, job_id)
            check(st == 200, "public %s %s: %s" % (method, path, st))
    st, _, _ = d.request("GET", "/metrics", token=None)
    check(st == 200, "/metrics from loopback: %s" % st)

    # malformed credentials: 401, the daemon goes on
    bad = ["Basic YWRtaW46YWRtaW4=", "Bearer", "Bearer ", "Bearer " + "a" * 10000,
           "Bearer " + d.token[:-1] + ("A" if d.token[-1] != "A" else "B"), "Bearer rmx_" + d.token[4:],
           "bearer  " + d.token + " extra", "Bearer " + d.token + "\t"]
    for value in bad:
        st, h, raw = d.request("GET", "/v1/jobs", headers={"Authorization": value}, token=None)
        check(st in (400, 401), "Authorization %r: %s" % (value[:40], st))
        if st == 401:
            problem_of(h, raw, 401)
    st, _, _ = d.request("GET", "/v1/jobs", headers={"Authorization": "BEARER " + d.token}, token=None)
    check(st == 200, "the scheme is case-insensitive: %s" % st)
    check(d.proc.poll() is None, "the daemon died on a bad credential")

    # tokens of each role
    viewer = d.make_token("ci-viewer", "viewer")["token"]
    operator = d.make_token("ci-operator", "operator")["token"]
    short = d.make_token("ci-short", "operator", expires_in_s=1)
    d.json("GET", "/v1/jobs", token=short["token"], expect=200)
    check(short["expires_at"] is not None, "an expiring token without expires_at")
    revoked = d.make_token("ci-revoked", "admin")
    d.json("GET", "/v1/jobs", token=revoked["token"], expect=200)  # cached now
    d.json("POST", "/v1/tokens/%d/revoke" % revoked["id"], expect=200)
    expect_401(d, table, revoked["token"], job_id, "revoked", "revoked token")
    time.sleep(1.2)
    expect_401(d, table, short["token"], job_id, "expired", "expired token")

    # bad token bodies
    for body, field in [({"name": "x y", "role": "viewer"}, "/name"), ({"name": "x", "role": "root"}, "/role"),
                        ({"name": "x", "role": "viewer", "expires_in_s": 0}, "/expires_in_s"),
                        ({"name": "x", "role": "viewer", "expires_in_s": "1d"}, "/expires_in_s"),
                        ({"name": "x", "role": "viewer", "extra": 1}, ""), ([], ""),
                        ({"name": "ci-viewer", "role": "viewer"}, "/name")]:
        st, h, raw = d.request("POST", "/v1/tokens", body)
        check(st in (400, 409), "token body %r: %s" % (body, st))
        check(problem_of(h, raw, st).get("pointer") == field, "token body %r: pointer %r" % (body, raw))
    st, h, raw = d.request("POST", "/v1/tokens/999/revoke")
    check(st == 404, "revoke of no token: %s" % st)
    st, h, raw = d.request("POST", "/v1/tokens/abc/revoke")
    check(st == 404, "revoke of a bad id: %s" % st)

    # the viewer: every GET; 403 naming the role on the POSTs beyond its own session's
    for method, path in table:
        if (method, path) in PUBLIC:
            continue
        st, h, raw = send(d, method, path, viewer, job_id)
        if method == "GET" and path != "/v1/tokens":
            check(st not in (401, 403), "viewer %s %s: %s %r" % (method, path, st, raw[:200]))
        elif path in ("/v1/session/logout", "/v1/session/codes"):
            check(st in (200, 201), "viewer %s %s: %s" % (method, path, st))
        else:
            check(st == 403, "viewer %s %s: %s %r" % (method, path, st, raw[:200]))
            need = "admin" if admin_only(method, path) else "operator"
            check(("needs the %s role" % need) in problem_of(h, raw, 403)["detail"], "403 detail %r" % raw)
    # the operator: submits and cancels; the token routes are the admin's
    job = d.submit(token=operator)
    check(job["submitted_by"] == "ci-operator" and job["cancelled_by"] is None, "submitted_by %r" % job)
    for method, path in table:
        if admin_only(method, path):
            st, h, raw = send(d, method, path, operator, job_id)
            check(st == 403 and "admin" in problem_of(h, raw, 403)["detail"], "operator %s %s: %s" %
                  (method, path, st))
    _, _, cancelled = d.json("POST", "/v1/jobs/%s/cancel" % job["id"], expect=200)
    check(cancelled["cancelled_by"] == "admin" and cancelled["submitted_by"] == "ci-operator",
          "cancelled job %r" % cancelled)
    _, _, ev = d.json("GET", "/v1/jobs/%s/events" % job["id"], token=viewer, expect=200)
    actors = [(e["type"], e["to"], e["actor"]) for e in ev["events"]]
    check(actors[0] == ("submitted", "queued", "ci-operator") and ("state", "cancelled", "admin") in actors,
          "event actors %r" % actors)

    # last use is recorded; listing never shows a secret
    _, _, listed = d.json("GET", "/v1/tokens", expect=200)
    by_name = {t["name"]: t for t in listed["tokens"]}
    check(by_name["ci-operator"]["last_used_at"] is not None, "last_used_at not written: %r" % by_name)
    check(by_name["ci-revoked"]["revoked_at"] is not None, "revoked_at %r" % by_name["ci-revoked"])
    check(all("token" not in t and "hash" not in t for t in listed["tokens"]), "a listing shows a secret")
    check(by_name["admin"]["prefix"] == d.token[:12], "the admin token's prefix")

    # restart: admin.token kept, its path logged again
    with open(d.admin_token_path) as f:
        before = f.read()
    d.stop()
    d.start()
    with open(d.admin_token_path) as f:
        check(f.read() == before, "admin.token changed at restart")
    check(d.admin_token_path in d.logtext(), "the restart does not log admin.token's path")
    d.json("GET", "/v1/jobs", token=operator, expect=200)
    d.stop()

    # a new database beside an old admin.token that is a symlink planted
    # elsewhere: the link is replaced by a new 0600 file, its target untouched
    fresh = Daemon(binary, sub(workdir, "fresh"))
    daemons.append(fresh)
    os.makedirs(os.path.dirname(fresh.db), exist_ok=True)
    target = os.path.join(workdir, "fresh", "victim")
    with open(target, "w") as f:
        f.write("precious\n")
    os.symlink(target, fresh.admin_token_path)
    fresh.start()
    check(not os.path.islink(fresh.admin_token_path), "admin.token is still a symlink")
    check(stat.S_IMODE(os.stat(fresh.admin_token_path).st_mode) == 0o600, "the new admin.token's mode")
    with open(target) as f:
        check(f.read() == "precious\n", "the symlink's target was written")
    check("removed" in fresh.logtext(), "the stale admin.token's removal is not logged")
    fresh.json("GET", "/v1/jobs", expect=200)
    fresh.stop()

    # the per-token cap on queued jobs
    capped = Daemon(binary, sub(workdir, "capped"), extra_args=["--max-queued-per-token", "2",
                                                                          "--metrics-auth", "token"])
    daemons.append(capped)
    capped.start()
    capped.submit()
    capped.submit()
    st, h, raw = capped.request("POST", "/v1/jobs", SPEC)
    check(st == 429, "a third queued job: %s %r" % (st, raw[:200]))
    check("max_queued_per_token 2" in problem_of(h, raw, 429)["detail"], "429 detail %r" % raw)
    other = capped.make_token("second", "operator")["token"]
    capped.submit(token=other)
    st, _, _ = capped.request("GET", "/metrics", token=None)
    check(st == 401, "/metrics with --metrics-auth token and no token: %s" % st)
    capped.json("GET", "/readyz", expect=200)
    st, _, _ = capped.request("GET", "/metrics")
    check(st == 200, "/metrics with a token: %s" % st)
    capped.stop()

    # --auth off: loopback works, anyone is an admin
    off = Daemon(binary, sub(workdir, "off"), extra_args=["--auth", "off"])
    daemons.append(off)
    off.start()
    check("authentication is off" in off.logtext(), "--auth off is not logged")
    job = off.submit(token=None)
    check(job["submitted_by"] is None, "submitted_by with auth off: %r" % job["submitted_by"])
    off.json("GET", "/v1/tokens", token=None, expect=200)
    off.stop()

    # --auth off on a non-loopback address: refused at start, unless --insecure
    p = subprocess.run([binary, "--auth", "off", "--listen", "0.0.0.0:0", "--db",
                        os.path.join(workdir, "x", "rm.db")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=30)
    out = p.stdout.decode()
    check(p.returncode == 1 and "refusing --auth off on 0.0.0.0" in out and "--insecure" in out,
          "--auth off on 0.0.0.0: %s %r" % (p.returncode, out))
    check(not os.path.exists(os.path.join(workdir, "x", "rm.db")), "a refused start created the database")
    loud = Daemon(binary, sub(workdir, "loud"), extra_args=["--auth", "off", "--insecure"])
    daemons.append(loud)
    loud.start()
    loud.stop()
    p = subprocess.Popen([binary, "--auth", "off", "--insecure", "--listen", "0.0.0.0:0", "--broker",
                          "tcp://127.0.0.1:0", "--db", os.path.join(workdir, "y", "rm.db")],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    time.sleep(1.0)
    p.terminate()
    out = p.communicate(timeout=20)[0].decode()
    check("INSECURE" in out and "0.0.0.0" in out, "--insecure is not logged loudly: %r" % out)
    for value in ("maybe", ""):
        p = subprocess.run([binary, "--auth", value, "--print-routes"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=30)
        check(p.returncode == 1 and "auth must be on or off" in p.stdout.decode(), "--auth %r: %r" % (value, p.stdout))


if __name__ == "__main__":
    run(main)
