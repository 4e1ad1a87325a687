"""Stream fan-out benchmark (issue 21): the real ringmasterd and agent, a
1-rank CPU job reporting a metrics row every step, and N (default 200) open
GET /v1/jobs/{id}/stream connections read by one selector loop. Reports the
extra CPU of ringmasterd (/proc/PID/stat, per second of a window) with the
streams open against the same window without them, and the delay from a
metrics row's `time` (when the coordinator stored it, just before its
transaction commits) to its receipt on each stream: p50, p99, max over
every row on every stream.

usage: python3 bench/streams/fanout.py --ringmasterd build/coordinatord/ringmasterd \
           --ringworker build/worker/ringworker [--streams 200] [--window 10] [--model small|tiny]
"""
import argparse
import datetime
import json
import os
import selectors
import socket
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "cluster"))
from cluster import Cluster, tiny_spec, wait_workers  # noqa: E402


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def parse_time(s):
    return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


class Stream:
    """A raw HTTP/1.1 SSE connection: de-chunks and splits frames."""

    def __init__(self, port, path, token):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.sendall(("GET %s HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n"
                           "Authorization: Bearer %s\r\n\r\n" % (path, token)).encode())
        self.sock.setblocking(False)
        self.raw = b""
        self.body = b""
        self.headers_done = False

    def feed(self, data, now, delays):
        self.raw += data
        if not self.headers_done:
            i = self.raw.find(b"\r\n\r\n")
            if i < 0:
                return
            self.raw = self.raw[i + 4:]
            self.headers_done = True
        while True:  # chunks: HEX\r\nDATA\r\n
            i = self.raw.find(b"\r\n")
            if i < 0:
                break
            n = int(self.raw[:i].split(b";")[0], 16)
            if len(self.raw) < i + 2 + n + 2:
                break
            self.body += self.raw[i + 2:i + 2 + n]
            self.raw = self.raw[i + 2 + n + 2:]
        while True:
            j = self.body.find(b"\n\n")
            if j < 0:
                break
            frame, self.body = self.body[:j], self.body[j + 2:]
            lines = frame.decode().split("\n")
            if "event: metrics" in lines:
                data = json.loads([l for l in lines if l.startswith("data: ")][0][6:])
                delays.append(now - parse_time(data["time"]))


def last_step(d, job):
    since, last = 0, 0
    while True:
        doc = d.json("GET", "/v1/jobs/%s/metrics?limit=10000&since_step=%d" % (job, since))
        last = max([r["step"] for r in doc["metrics"]] + [last])
        if not doc.get("next_since_step"):
            return last
        since = doc["next_since_step"]


def window(d, secs):
    c0, t0 = cpu_s(d.proc.pid), time.time()
    time.sleep(secs)
    return (cpu_s(d.proc.pid) - c0) / (time.time() - t0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ringmasterd", required=True)
    p.add_argument("--ringworker", required=True)
    p.add_argument("--streams", type=int, default=200)
    p.add_argument("--window", type=float, default=10.0)
    p.add_argument("--model", choices=["tiny", "small"], default="small",
                   help="tiny: steps of a few ms (hundreds of rows/s); small: tens of ms")
    args = p.parse_args()
    bins = {"ringmasterd": os.path.abspath(args.ringmasterd), "ringworker": os.path.abspath(args.ringworker),
            "ringctl": None}
    c = Cluster(bins, tempfile.mkdtemp(prefix="rm-bench-fanout-"))
    try:
        d = c.start_daemon()
        c.start_agent("f1", devices="cpu:1")
        wait_workers(d, ["f1"])
        spec = tiny_spec("fanout", 1, 8, 1000000)
        if args.model == "small":  # steps of tens of ms: a row every step at a rate a real job has
            spec["model"] = {"n_layer": 4, "n_head": 4, "n_embd": 128, "vocab_size": 256, "seq_len": 64}
        job = d.submit(spec)["id"]
        d.wait_state(job, {"running"}, timeout=60)
        time.sleep(2)
        s0 = last_step(d, job)
        base = window(d, args.window)
        steps_base = last_step(d, job) - s0
        sel = selectors.DefaultSelector()
        streams = [Stream(d.port, "/v1/jobs/%s/stream" % job, d.token) for _ in range(args.streams)]
        for s in streams:
            sel.register(s.sock, selectors.EVENT_READ, s)
        delays = []
        c0, t0 = cpu_s(d.proc.pid), time.time()
        while time.time() - t0 < args.window:
            for key, _ in sel.select(timeout=0.5):
                try:
                    data = key.fileobj.recv(65536)
                except BlockingIOError:
                    continue
                key.data.feed(data, time.time(), delays)
        loaded = (cpu_s(d.proc.pid) - c0) / (time.time() - t0)
        for s in streams:
            s.sock.close()
        delays.sort()
        res = {"streams": args.streams, "window_s": args.window, "metrics_rows_per_s": steps_base / args.window,
               "ringmasterd_cpu_base": base, "ringmasterd_cpu_streams": loaded,
               "extra_cpu_of_one_core": loaded - base, "deliveries": len(delays),
               "delay_p50_ms": 1000 * delays[len(delays) // 2] if delays else None,
               "delay_p99_ms": 1000 * delays[int(len(delays) * 0.99)] if delays else None,
               "delay_max_ms": 1000 * delays[-1] if delays else None,
               "delay_mean_ms": 1000 * statistics.mean(delays) if delays else None}
        print(json.dumps(res))
    finally:
        c.stop()


if __name__ == "__main__":
    main()
