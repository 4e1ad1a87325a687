"""The route table, exercised from the table itself (nothing listed by hand):

- `ringmasterd --print-routes` prints routes.c's table (METHOD PATH per row);
  every path of it is sent every method it does not allow and must answer
  405 with an Allow header listing exactly the table's methods for the path,
  in table order, and a problem+json body; the methods it does allow must not
  answer 405 (POST to cancel is left to the last check).
- A POST to every job route that does not take one, and to job sub-paths no
  route serves, leaves the job's state and its events unchanged (checked by
  GET); only POST .../cancel cancels it.
"""
import http.client
import subprocess

from rmtest import Daemon, check, problem_of, run

METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]
UNKNOWN_JOB_SUBPATHS = ["/x", "/cancel/x", "/", "/Cancel", "/cancel/", "/events/cancel", "/stop"]


def table(binary):
    out = subprocess.run([binary, "--print-routes"], stdout=subprocess.PIPE, check=True, timeout=30).stdout.decode()
    routes = {}
    for line in out.splitlines():
        method, path = line.split(" ", 1)
        routes.setdefault(path, []).append(method)
    check(len(routes) >= 9, "too few routes printed: %r" % out)
    return routes


def job_view(d, job_id):
    _, _, job = d.json("GET", "/v1/jobs/%s" % job_id, expect=200)
    _, _, events = d.json("GET", "/v1/jobs/%s/events" % job_id, expect=200)
    return job["state"], job["updated_at"], [e["id"] for e in events["events"]]


def main(binary, workdir, daemons):
    routes = table(binary)
    d = Daemon(binary, workdir)
    daemons.append(d)
    d.start()
    job_id = d.submit()["id"]
    before = job_view(d, job_id)
    check(before[0] == "queued", "a new job is %r" % before[0])

    n_checked = 0
    for path, allowed in routes.items():
        url = path.replace("{id}", job_id)
        allow = ", ".join(allowed)
        for method in METHODS:
            if method in allowed:
                if method == "POST" and path.endswith("/cancel"):
                    continue
                if method == "GET" and path.endswith("/stream"):
                    # an event stream does not end: its status and type only
                    c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=10)
                    c.request("GET", url, headers=d.auth_headers())
                    r = c.getresponse()
                    check(r.status == 200 and r.getheader("Content-Type") == "text/event-stream",
                          "GET %s: %s %s" % (url, r.status, r.getheader("Content-Type")))
                    c.close()
                    continue
                st, h, raw = d.request(method, url, b"{}" if method == "POST" else None,
                                       {"Content-Type": "application/json"} if method == "POST" else None)
                check(st != 405, "%s %s is in the table but answered 405" % (method, url))
                continue
            st, h, raw = d.request(method, url, b"{}" if method != "HEAD" else None,
                                   {"Content-Type": "application/json"})
            check(st == 405, "%s %s (allowed: %s): %s %r" % (method, url, allow, st, raw[:200]))
            check(h.get("allow") == allow, "%s %s: Allow %r, the table says %r" % (method, url, h.get("allow"), allow))
            if method != "HEAD":
                doc = problem_of(h, raw, 405)
                check(method in doc["detail"] and path in doc["detail"], "405 detail %r" % doc["detail"])
            n_checked += 1
    check(n_checked >= len(routes) * 4, "only %d method/route pairs checked" % n_checked)

    # POST to the job routes that take none, and to job paths no route serves
    job_paths = [p for p in routes if p.startswith("/v1/jobs/{id}")]
    posts = [(p.replace("{id}", job_id), 405) for p in job_paths if "POST" not in routes[p]]
    posts += [("/v1/jobs/%s%s" % (job_id, s), 404) for s in UNKNOWN_JOB_SUBPATHS]
    check(len(posts) >= 5, "too few POST targets: %r" % posts)
    for url, want in posts:
        for body in (None, b"{}"):
            st, h, raw = d.request("POST", url, body, {"Content-Type": "application/json"})
            check(st == want, "POST %s: %s, expected %s: %r" % (url, st, want, raw[:200]))
            problem_of(h, raw, want)
        check(job_view(d, job_id) == before, "POST %s changed the job: %r -> %r"
              % (url, before, job_view(d, job_id)))

    # the one POST that does change it, so the checks above could fail
    cancels = [p for p in job_paths if "POST" in routes[p]]
    check(cancels == ["/v1/jobs/{id}/cancel"], "job routes taking POST: %r" % cancels)
    d.json("POST", "/v1/jobs/%s/cancel" % job_id, expect=200)
    check(job_view(d, job_id)[0] == "cancelled", "cancel did not cancel")


if __name__ == "__main__":
    run(main)
