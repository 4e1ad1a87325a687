#!/usr/bin/python3
"""Bench: the dashboard's job page of a job with N metric rows (default
100,000) loads and draws in headless Chromium (Debian's /usr/bin/chromium
through playwright-core from clients/web/node_modules, as tests/web).

A real ringmasterd on a temporary database; one job submitted over REST, its
N rows (a validation loss every 100 steps) and a few events written
straight into the SQLite file, as the daemon would have from METRICS. Then
`job_page.mjs` opens the job page once in a fresh browser (reported
apart: the first tab starts a renderer and compiles the modules), then RUNS
times in fresh tabs, and reports, per
load, the time from the navigation start to the loss chart drawn with its
downsampled points (performance.now() after two animation frames), plus the
time of the REST answers the page asks for.

Usage: bench/web/job_page.py [--rows N] [--runs R] [--ringmasterd build/coordinatord/ringmasterd]
"""
import argparse
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


TOKEN = {}


def http(method, url, body=None):
    req = urllib.request.Request(url, method=method, data=json.dumps(body).encode() if body else None,
                                 headers={"Content-Type": "application/json",
                                          "Authorization": "Bearer " + TOKEN["admin"]})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=100000)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--ringmasterd", default=os.path.join(ROOT, "build", "coordinatord", "ringmasterd"))
    a = p.parse_args()
    work = tempfile.mkdtemp(prefix="rm-bench-web-")
    port, bport = free_port(), free_port()
    db = os.path.join(work, "rm.db")
    log = open(os.path.join(work, "d.log"), "wb")
    d = subprocess.Popen([a.ringmasterd, "--listen", "127.0.0.1:%d" % port, "--broker",
                          "tcp://127.0.0.1:%d" % bport, "--db", db, "--log-level", "warn"],
                         stdout=log, stderr=subprocess.STDOUT)
    url = "http://127.0.0.1:%d" % port
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(url + "/readyz", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        with open(os.path.join(work, "admin.token")) as f:
            TOKEN["admin"] = f.read().strip()
        spec = json.load(open(os.path.join(ROOT, "jobs", "default.json")))
        spec["train"]["steps"] = a.rows
        job = http("POST", url + "/v1/jobs", spec)["id"]
        con = sqlite3.connect(db, timeout=30)
        now = int(time.time() * 1e6)
        with con:
            con.executemany(
                "INSERT INTO metrics (job_id, attempt, rank, step, loss, lr, grad_norm, tokens_per_s, ms,"
                " val_loss, at_us) VALUES (?, 1, 0, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(job, s, 5.5 * (1 + s) ** -0.2, 6e-4, 1.0 + (s % 7) / 10, 24000.0 + (s % 13) * 100, 170.0,
                  (5.4 * (1 + s) ** -0.2 if s % 100 == 0 else None), now - (a.rows - s) * 170000)
                 for s in range(1, a.rows + 1)])
        con.close()
        # what the page asks the daemon for the charts
        t = time.perf_counter()
        rows = http("GET", url + "/v1/jobs/%s/metrics?max_points=2000" % job)["metrics"]
        t_sampled = (time.perf_counter() - t) * 1000
        env = dict(os.environ, RM_URL=url, RM_JOB=job, RM_TOKEN=TOKEN["admin"], RM_RUNS=str(a.runs),
                   NODE_PATH=os.path.join(ROOT, "clients", "web", "node_modules"),
                   RM_PROFILE=os.path.join(work, "profile"))
        out = subprocess.run(["node", os.path.join(ROOT, "bench", "web", "job_page.mjs")], env=env,
                             stdout=subprocess.PIPE, timeout=600, check=True).stdout.decode()
        res = json.loads(out.strip().splitlines()[-1])
        loads = sorted(res["loads_ms"])
        print("rows in the database:           %d" % a.rows)
        print("GET metrics?max_points=2000:    %.1f ms, %d rows" % (t_sampled, len(rows)))
        print("first load (fresh browser):     %.0f ms" % res["cold_ms"])
        print("job page load to chart drawn:   median %.0f ms, max %.0f ms, runs %s" %
              (loads[len(loads) // 2], loads[-1], ", ".join("%.0f" % x for x in res["loads_ms"])))
        print("points on the loss chart:       %s" % res["points"])
        print("console errors:                 %d" % len(res["errors"]))
        print("load average (1, 5, 15 min):    %s" % " ".join(open("/proc/loadavg").read().split()[:3]))
        if res["errors"]:
            print(json.dumps(res["errors"]))
            return 1
    finally:
        d.terminate()
        d.wait()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
