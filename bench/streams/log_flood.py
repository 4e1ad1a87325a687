"""Log flood benchmark (issue 21): a 1-rank CPU job run by the real
ringmasterd and agent, once quiet and once with its rank printing
RINGMASTER_BENCH_LOG_FLOOD lines per second on stdout (a benchmark knob of
worker/rank.c). For each run, once the job runs: the rank's median step time
(the metrics rows' ms) over a window with nothing else going on, with the
CPU of ringmasterd and of the agent (/proc/PID/stat) in it; then the rate of
GET /v1/jobs/{id} answered to one keep-alive client looping for a window of
the same length; the lines stored and dropped (GET /v1/jobs/{id}/logs).

usage: python3 bench/streams/log_flood.py --ringmasterd build/coordinatord/ringmasterd \
           --ringworker build/worker/ringworker [--lines-per-s 10000] [--window 10] [--model small|tiny]
"""
import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "cluster"))
from cluster import Cluster, tiny_spec, wait_workers  # noqa: E402


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def hammer(port, job, stop, out, token):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Authorization": "Bearer " + token}
    n, lat = 0, []
    while not stop.is_set():
        t = time.perf_counter()
        conn.request("GET", "/v1/jobs/%s" % job, headers=headers)
        r = conn.getresponse()
        r.read()
        lat.append(time.perf_counter() - t)
        if r.status == 200:
            n += 1
    out["n"], out["lat"] = n, lat


def last_step(d, job):
    rows = d.json("GET", "/v1/jobs/%s/metrics?limit=10000&since_step=0" % job)["metrics"]
    return max((r["step"] for r in rows), default=0), rows


def one_run(args, flood):
    """One cluster: a long job; `window` s of steps with nothing else going
    on, then `window` s of a GET /v1/jobs/{id} loop; then the job is cancelled."""
    workdir = tempfile.mkdtemp(prefix="rm-bench-flood-")
    bins = {"ringmasterd": args.ringmasterd, "ringworker": args.ringworker, "ringctl": None}
    c = Cluster(bins, workdir)
    if flood:
        os.environ["RINGMASTER_BENCH_LOG_FLOOD"] = str(args.lines_per_s)
    else:
        os.environ.pop("RINGMASTER_BENCH_LOG_FLOOD", None)
    try:
        d = c.start_daemon()
        agent = c.start_agent("b1", devices="cpu:1")
        wait_workers(d, ["b1"])
        spec = tiny_spec("flood" if flood else "quiet", 1, 8, 1000000)
        if args.model == "small":  # steps of tens of ms
            spec["model"] = {"n_layer": 4, "n_head": 4, "n_embd": 128, "vocab_size": 256, "seq_len": 64}
        job = d.submit(spec)["id"]
        d.wait_state(job, {"running"}, timeout=60)
        time.sleep(2)
        d_cpu0, a_cpu0 = cpu_s(d.proc.pid), cpu_s(agent.proc.pid)
        s0, _ = last_step(d, job)
        time.sleep(args.window)
        s1, rows = last_step(d, job)
        d_cpu, a_cpu = cpu_s(d.proc.pid) - d_cpu0, cpu_s(agent.proc.pid) - a_cpu0
        ms = [r["ms"] for r in rows if s0 < r["step"] <= s1 and r.get("ms")]
        stop, got = threading.Event(), {}
        th = threading.Thread(target=hammer, args=(d.port, job, stop, got, d.token))
        h0 = time.time()
        th.start()
        time.sleep(args.window)
        stop.set()
        th.join()
        h_s = time.time() - h0
        lg = d.json("GET", "/v1/jobs/%s/logs?tail=1" % job)
        d.request("POST", "/v1/jobs/%s/cancel" % job)
        lat = sorted(got["lat"])
        return {
            "flood": flood, "steps": len(ms), "step_ms_median": statistics.median(ms),
            "step_ms_mean": statistics.mean(ms), "get_per_s": got["n"] / h_s,
            "get_p99_ms": lat[int(len(lat) * 0.99)] * 1000 if lat else None,
            "last_line_seq": lg["lines"][-1]["seq"] if lg["lines"] else 0, "lines_dropped": lg["dropped"],
            "ringmasterd_cpu_s_per_s": d_cpu / args.window, "agent_cpu_s_per_s": a_cpu / args.window,
        }
    finally:
        c.stop()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ringmasterd", required=True)
    p.add_argument("--ringworker", required=True)
    p.add_argument("--lines-per-s", type=int, default=10000)
    p.add_argument("--window", type=float, default=10.0, help="seconds of steps measured, then of GETs")
    p.add_argument("--model", choices=["tiny", "small"], default="small",
                   help="tiny: steps of ~2 ms; small: tens of ms")
    args = p.parse_args()
    args.ringmasterd = os.path.abspath(args.ringmasterd)
    args.ringworker = os.path.abspath(args.ringworker)
    res = [one_run(args, False), one_run(args, True)]
    for r in res:
        print(json.dumps(r))
    q, f = res
    print("step time: %.2f ms quiet, %.2f ms flooding (%+.1f%%); GET /v1/jobs/{id}: %.0f/s quiet, %.0f/s flooding"
          % (q["step_ms_median"], f["step_ms_median"], 100 * (f["step_ms_median"] / q["step_ms_median"] - 1),
             q["get_per_s"], f["get_per_s"]))


if __name__ == "__main__":
    main()
