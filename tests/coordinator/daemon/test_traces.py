"""The coordinator's side of profiling (coordinatord/traces.c), against the
real ringmasterd with fake ranks over the wire: TRACEs of a running job whose
spec has profile {start_step: 2, end_step: 4} are stored and served by
GET /v1/jobs/{id}/trace as a Chrome trace (a "step N" slice per rank and
step at the rank's start_unix_us, its phases at start + ts_us, exact to the
nanosecond digit; process_name metadata; names JSON-escaped); a repeated
step keeps the first; malformed TRACEs (step 0, more than 64 events, names
empty or over 64 bytes, negative or non-numeric times, events not objects,
a missing start_unix_us) get ERROR 400 and store nothing; ?attempt / ?rank
filter, bad values get 400; before any TRACE, and for a job without a
profile, 404 with a detail that says why; a restart of ringmasterd keeps
the rows."""
import json
import time

from rmtest import Daemon, check, free_port, problem_of, run
from wireshell import Shell, cpus, register, spec, wait_state

START = 1763900000123456  # a step's start, Unix microseconds


def trace_msg(step, rank, events=None, start=None, dur=5000.25):
    if events is None:
        events = [{"name": "forward", "ts_us": 1.5, "dur_us": 100.125},
                  {"name": "backward", "ts_us": 101.625, "dur_us": 200},
                  {"name": "optimizer", "ts_us": 4000, "dur_us": 999.999}]
    return {"step": step, "start_unix_us": start if start is not None else START + 10000 * step + rank,
            "dur_us": dur, "events": events}


def get_trace(d, jid, query=""):
    return d.request("GET", "/v1/jobs/%s/trace%s" % (jid, query))


def wait_trace(d, jid, n_steps, timeout=5):
    """The trace once it holds n_steps step slices."""
    deadline = time.time() + timeout
    doc = None
    while time.time() < deadline:
        st, h, raw = get_trace(d, jid)
        if st == 200:
            doc = json.loads(raw)
            if sum(1 for e in doc["traceEvents"] if e.get("cat") == "step") == n_steps:
                check(h["content-type"].startswith("application/json"), "content type %r" % h)
                return doc, raw
        time.sleep(0.05)
    check(False, "trace with %d steps not there after %ss: %r" % (n_steps, timeout, doc))


def main(binary, workdir, daemons, shell_bin):
    endpoint = "tcp://127.0.0.1:%d" % free_port()
    d = Daemon(binary, workdir, extra_args=["--broker-auth", "off", "--heartbeat-ms", "200", "--heartbeat-misses", "5",
                                            "--broker", endpoint])
    daemons.append(d)
    d.start()
    sh = Shell(shell_bin, endpoint)
    try:
        scenario(d, sh)
    finally:
        sh.quit()
    check(d.stop() == 0, "clean stop")


def scenario(d, sh):
    register(sh, "a1", "n1", cpus(4), beat_ms=100)
    profiled = dict(spec("traced", world_size=2), train={"steps": 10, "warmup_steps": 1},
                    profile={"start_step": 2, "end_step": 4})
    jid = d.submit(profiled)["id"]
    plain = d.submit(spec("plain", world_size=2))["id"]
    for _ in range(4):
        sh.expect("a1", "SPAWN")
    for r in range(2):
        sh.dealer("r%d" % r, "rank/%s/1/%d" % (jid, r))
        sh.send("r%d" % r, "JOIN", {"job": jid, "attempt": 1, "rank": r})
        sh.expect("r%d" % r, "JOINED")
    wait_state(d, jid, "running")

    # nothing yet: 404 saying so; a job without profile: 404 saying how
    st, h, raw = get_trace(d, jid)
    p = problem_of(h, raw, 404)
    check("has no trace yet: its profile covers steps 2 to 4" in p["detail"] and "running" in p["detail"],
          "before any TRACE: %r" % p)
    st, h, raw = get_trace(d, plain)
    p = problem_of(h, raw, 404)
    check("set profile: {start_step, end_step} in the job spec" in p["detail"], "no profile: %r" % p)
    st, h, raw = get_trace(d, "j-aaaaaaaaaaaaaaaaaaaa")
    check("no job" in problem_of(h, raw, 404)["detail"], "unknown job")

    # two ranks, step 2; an awkward name on rank 1
    sh.send("r0", "TRACE", trace_msg(2, 0))
    odd = [{"name": "all\"reduce \u00e9\\n", "ts_us": 0, "dur_us": 0}]
    sh.send("r1", "TRACE", trace_msg(2, 1, events=odd, dur=0))
    sh.silent("r0", 200, "a stored TRACE gets no answer")
    doc, raw = wait_trace(d, jid, 2)
    check(doc["displayTimeUnit"] == "ms" and doc["otherData"] == {"job": jid}, "envelope %r" % doc)
    x = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    m = {(e["pid"], e["name"]): e["args"] for e in doc["traceEvents"] if e["ph"] == "M"}
    check(m.get((0, "process_name")) == {"name": "rank 0"} and m.get((1, "process_name")) == {"name": "rank 1"} and
          m.get((1, "process_sort_index")) == {"sort_index": 1}, "metadata %r" % m)
    step0 = [e for e in x if e["pid"] == 0 and e["cat"] == "step"]
    check(step0 == [{"name": "step 2", "cat": "step", "ph": "X", "ts": START + 20000, "dur": 5000.25, "pid": 0,
                     "tid": 0, "args": {"step": 2, "attempt": 1}}], "step slice %r" % step0)
    phases0 = [(e["name"], e["ts"], e["dur"]) for e in x if e["pid"] == 0 and e["cat"] == "phase"]
    check(phases0 == [("forward", START + 20000 + 1.5, 100.125), ("backward", START + 20000 + 101.625, 200),
                      ("optimizer", START + 20000 + 4000, 999.999)], "phases %r" % phases0)
    # exact digits, not a double's rounding of ~1.7e15 + 1.5
    check(b'"ts":%d.500,' % (START + 20001) in raw, "ts digits in %r" % raw[:400])
    phases1 = [e["name"] for e in x if e["pid"] == 1 and e["cat"] == "phase"]
    check(phases1 == [odd[0]["name"]], "escaped name %r" % phases1)

    # a repeat of a stored step: the first is kept
    sh.send("r0", "TRACE", trace_msg(2, 0, dur=1))
    sh.silent("r0", 200, "a repeated TRACE gets no answer")
    doc, _ = wait_trace(d, jid, 2)
    check([e["dur"] for e in doc["traceEvents"] if e.get("cat") == "step" and e["pid"] == 0] == [5000.25],
          "the repeat replaced the first")

    # malformed: ERROR 400 naming the problem, nothing stored
    ev = {"name": "x", "ts_us": 0, "dur_us": 0}
    bad = [
        (trace_msg(0, 0), "step must be an integer >= 1"),
        (trace_msg(3, 0, events=[ev] * 65), "more than 64"),
        (trace_msg(3, 0, events=[dict(ev, name="")]), "events[0]: name must be a string of 1 to 64 bytes"),
        (trace_msg(3, 0, events=[ev, dict(ev, name="n" * 65)]), "events[1]: name must be a string of 1 to 64"),
        (trace_msg(3, 0, events=[dict(ev, name=7)]), "name must be a string"),
        (trace_msg(3, 0, events=[dict(ev, ts_us=-1)]), "ts_us must be a finite number >= 0"),
        (trace_msg(3, 0, events=[dict(ev, dur_us="1")]), "dur_us must be a finite number >= 0"),
        (trace_msg(3, 0, events=[{"name": "x", "ts_us": 0}]), "dur_us must be"),
        (trace_msg(3, 0, events=["forward"]), "events[0]: must be an object"),
        ({"step": 3, "dur_us": 1, "events": []}, "start_unix_us"),
        (trace_msg(3, 0, dur=-2), "dur_us"),
    ]
    for msg, want in bad:
        sh.send("r0", "TRACE", msg)
        e = sh.expect("r0", "ERROR", what="bad TRACE %s" % want)
        check(e["code"] == 400 and want in e["detail"], "bad TRACE (%s): %r" % (want, e))
    # 64 events of 64-byte names are fine
    sh.send("r1", "TRACE", trace_msg(3, 1, events=[dict(ev, name="n" * 64)] * 64))
    sh.silent("r1", 200, "64 events")
    doc, _ = wait_trace(d, jid, 3)
    check(not any(e.get("args", {}).get("step") == 3 and e["pid"] == 0 for e in doc["traceEvents"]),
          "a refused TRACE was stored")

    # filters
    st, h, raw = get_trace(d, jid, "?rank=1")
    check(st == 200 and {e["pid"] for e in json.loads(raw)["traceEvents"]} == {1}, "?rank=1: %s" % st)
    st, h, raw = get_trace(d, jid, "?attempt=1&rank=0")
    got = json.loads(raw)["traceEvents"] if st == 200 else []
    check(st == 200 and {e["pid"] for e in got} == {0} and
          sum(1 for e in got if e.get("cat") == "step") == 1, "?attempt=1&rank=0: %s %r" % (st, raw[:200]))
    st, h, raw = get_trace(d, jid, "?attempt=2")
    p = problem_of(h, raw, 404)
    check("no trace for attempt 2" in p["detail"] and "3 step(s)" in p["detail"], "?attempt=2: %r" % p)
    st, h, raw = get_trace(d, jid, "?rank=5&attempt=1")
    check("no trace for attempt 1, rank 5" in problem_of(h, raw, 404)["detail"], "?rank=5")
    for q, ptr in (("?rank=-1", "rank"), ("?rank=1x", "rank"), ("?attempt=0", "attempt"), ("?rank=65536", "rank")):
        st, h, raw = get_trace(d, jid, q)
        check(problem_of(h, raw, 400).get("pointer") == ptr, "%s: %r" % (q, raw))
    st, h, raw = get_trace(d, jid, "?rank=1&rank=0")
    problem_of(h, raw, 400)
    st, h, raw = get_trace(d, jid, "?step=2")
    check("unknown query parameter" in problem_of(h, raw, 400)["detail"], "?step")
    st, h, raw = d.request("POST", "/v1/jobs/%s/trace" % jid, {})
    check(st == 405 and h.get("allow") == "GET", "POST: %s %r" % (st, h))

    # a restart of ringmasterd keeps the rows
    before = wait_trace(d, jid, 3)[0]
    check(d.stop() == 0, "stop")
    d.start()
    after = wait_trace(d, jid, 3)[0]
    check(after == before, "trace changed over a restart")


if __name__ == "__main__":
    run(main)
