"""Profiling (docs/profiling.md): a 4-step 2-rank CPU job with profile
{start_step: 2, end_step: 4}, validation every 3 steps (and at the last) and
one snapshot (at the last step), run by the real ringmasterd and agent. GET /v1/jobs/{id}/trace is a Chrome trace: valid
JSON with both ranks (pids 0 and 1, named by process_name metadata),
exactly steps 2..4 on each, every step a "step N" slice with its phases
(zero_grad, data, forward, backward, grad_reduce, clip, optimizer; eval on
steps 3 and 4, snapshot on step 4) inside it with dur > 0 where they do
work, no two phases of a step overlapping on a rank, the ranks on one
timeline (their step 2 starts within a second of each other, each rank's
steps in order). ?rank and ?attempt filter; bad query parameters get 400.
`ringctl trace -o FILE` writes the same JSON; a job without a profile
answers 404 with a detail saying how to ask for one, and so does ringctl; a
spec whose profile runs past train.steps is refused with 400."""
import json
import os
import subprocess

from cluster import check, log, run, tiny_spec, wait_workers

EPS_US = 0.5  # ts are ~1.8e15 us: as Python floats (doubles) they resolve only 0.25 us


def get(d, path):
    st, body = d.request("GET", path)
    return st, body


def phases_by_step(trace):
    """{(pid, step): {"step": X event, "phases": [X events by ts]}}"""
    out = {}
    for e in trace["traceEvents"]:
        if e["ph"] != "X":
            continue
        key = (e["pid"], e["args"]["step"])
        slot = out.setdefault(key, {"step": None, "phases": []})
        if e["cat"] == "step":
            check(slot["step"] is None, "two step events for %r" % (key,))
            slot["step"] = e
        else:
            check(e["cat"] == "phase", "unknown cat %r" % e)
            slot["phases"].append(e)
    for slot in out.values():
        slot["phases"].sort(key=lambda e: e["ts"])
    return out


def check_trace(trace, want_pids, want_steps):
    check(trace.get("displayTimeUnit") == "ms", "displayTimeUnit %r" % trace.get("displayTimeUnit"))
    events = trace["traceEvents"]
    meta = {(e["pid"], e["name"]): e["args"] for e in events if e["ph"] == "M"}
    for pid in want_pids:
        check(meta.get((pid, "process_name")) == {"name": "rank %d" % pid},
              "no process_name for rank %d: %r" % (pid, meta))
    for e in events:
        check(e["tid"] == 0 and e["pid"] in want_pids, "event outside the ranks asked for: %r" % e)
        if e["ph"] == "X":
            check(e["args"]["attempt"] == 1, "attempt %r" % e)
            check(isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)) and e["dur"] >= 0,
                  "ts/dur %r" % e)
    steps = phases_by_step(trace)
    check(sorted(steps) == sorted((p, s) for p in want_pids for s in want_steps),
          "steps traced: %s, want ranks %s x steps %s" % (sorted(steps), want_pids, want_steps))
    for (pid, step), slot in sorted(steps.items()):
        st = slot["step"]
        check(st is not None and st["name"] == "step %d" % step, "rank %d step %d: no step slice" % (pid, step))
        names = [e["name"] for e in slot["phases"]]
        for must in ("zero_grad", "data", "forward", "backward", "grad_reduce", "clip", "optimizer"):
            check(must in names, "rank %d step %d: no %s phase in %s" % (pid, step, must, names))
        check(("eval" in names) == (step in (3, 4)), "rank %d step %d: eval phase %s" % (pid, step, names))
        check(("snapshot" in names) == (step == 4), "rank %d step %d: snapshot phase %s" % (pid, step, names))
        for must in ("forward", "backward", "optimizer", "eval"):
            for e in slot["phases"]:
                if e["name"] == must:
                    check(e["dur"] > 0, "rank %d step %d: %s lasted %r" % (pid, step, must, e["dur"]))
        prev_end = None
        for e in slot["phases"]:
            check(e["ts"] >= st["ts"] - EPS_US and e["ts"] + e["dur"] <= st["ts"] + st["dur"] + EPS_US,
                  "rank %d step %d: %s [%f, +%f] outside the step [%f, +%f]" %
                  (pid, step, e["name"], e["ts"], e["dur"], st["ts"], st["dur"]))
            if prev_end is not None:
                check(e["ts"] >= prev_end - EPS_US,
                      "rank %d step %d: %s starts at %f, before the previous phase ends (%f)" %
                      (pid, step, e["name"], e["ts"], prev_end))
            prev_end = e["ts"] + e["dur"]
    for pid in want_pids:
        for a, b in zip(want_steps, want_steps[1:]):
            sa, sb = steps[(pid, a)]["step"], steps[(pid, b)]["step"]
            check(sb["ts"] >= sa["ts"] + sa["dur"] - EPS_US, "rank %d: step %d starts before step %d ends" %
                  (pid, b, a))
    return steps


def main(c, args):
    d = c.start_daemon()
    ck = os.path.join(c.workdir, "checkpoints")
    c.start_agent("p1", "cpu:2", extra_args=["--checkpoint-root", ck])
    wait_workers(d, ["p1"])
    ringctl = c.bins["ringctl"]
    check(ringctl, "--ringctl is required")

    # a profile past train.steps is refused at submission
    bad = tiny_spec("profile-bad", 2, 4, 6)
    bad["profile"] = {"start_step": 2, "end_step": 7}
    st, body = d.request("POST", "/v1/jobs", bad)
    check(st == 400, "profile past train.steps: %s %r" % (st, body))
    problem = json.loads(body)
    check("profile.end_step (7) must be at most train.steps (6)" in problem["detail"], "detail %r" % problem)

    # One snapshot only (every_steps past the end: the last step's): two
    # SNAPSHOT_COMMITs arriving together are not what this test is about.
    spec = tiny_spec("profile", 2, 4, 4, eval_every=3)
    spec["checkpoint"] = {"every_steps": 100}
    spec["profile"] = {"start_step": 2, "end_step": 4}
    job = d.submit(spec)["id"]
    plain = d.submit(tiny_spec("no-profile", 2, 4, 3))["id"]
    d.wait_state(job, {"succeeded"}, timeout=180)
    d.wait_state(plain, {"succeeded"}, timeout=180)

    st, body = get(d, "/v1/jobs/%s/trace" % job)
    check(st == 200, "GET trace: %s %r" % (st, body[:300]))
    trace = json.loads(body)
    check(trace.get("otherData", {}).get("job") == job, "otherData %r" % trace.get("otherData"))
    steps = check_trace(trace, [0, 1], [2, 3, 4])
    starts = [steps[(p, 2)]["step"]["ts"] for p in (0, 1)]
    check(abs(starts[0] - starts[1]) < 1e6, "ranks not on one timeline: step 2 starts at %s" % starts)
    log("trace: %d events, step 2 of rank 0: %s" %
        (len(trace["traceEvents"]), [(e["name"], round(e["dur"], 1)) for e in steps[(0, 2)]["phases"]]))

    # filters
    st, body = get(d, "/v1/jobs/%s/trace?rank=1" % job)
    check(st == 200, "?rank=1: %s %r" % (st, body[:300]))
    check_trace(json.loads(body), [1], [2, 3, 4])
    st, body = get(d, "/v1/jobs/%s/trace?attempt=1&rank=0" % job)
    check(st == 200, "?attempt=1&rank=0: %s" % st)
    check_trace(json.loads(body), [0], [2, 3, 4])
    st, body = get(d, "/v1/jobs/%s/trace?attempt=2" % job)
    check(st == 404 and "no trace for attempt 2" in json.loads(body)["detail"], "?attempt=2: %s %r" % (st, body))
    for q, field in (("rank=-1", "rank"), ("rank=x", "rank"), ("attempt=0", "attempt"), ("bogus=1", None)):
        st, body = get(d, "/v1/jobs/%s/trace?%s" % (job, q))
        p = json.loads(body)
        check(st == 400 and p.get("pointer") == field, "?%s: %s %r" % (q, st, body))

    # ringctl trace: the same JSON in a file
    out = os.path.join(c.workdir, "trace.json")
    r = subprocess.run([ringctl, "--server", d.url, "trace", job, "-o", out], capture_output=True, text=True,
                       timeout=60, env=d.ctl_env())
    check(r.returncode == 0, "ringctl trace: %s %s" % (r.returncode, r.stderr))
    check("wrote %s" % out in r.stdout and "steps 2 to 4 on 2 rank(s)" in r.stdout, "stdout %r" % r.stdout)
    with open(out) as f:
        check(json.load(f) == trace, "ringctl's file differs from GET /v1/jobs/%s/trace" % job)
    r = subprocess.run([ringctl, "--server", d.url, "trace", "--rank", "0", job], capture_output=True,
                       text=True, timeout=60, env=d.ctl_env())
    check(r.returncode == 0, "ringctl trace --rank 0: %s %s" % (r.returncode, r.stderr))
    check_trace(json.loads(r.stdout), [0], [2, 3, 4])

    # no profile: 404 saying how to get one, through REST and ringctl
    st, body = get(d, "/v1/jobs/%s/trace" % plain)
    check(st == 404, "trace of a job without profile: %s %r" % (st, body))
    p = json.loads(body)
    check("set profile: {start_step, end_step} in the job spec" in p["detail"], "detail %r" % p)
    r = subprocess.run([ringctl, "--server", d.url, "trace", plain, "-o", out + ".none"], capture_output=True,
                       text=True, timeout=60, env=d.ctl_env())
    check(r.returncode == 1 and "set profile: {start_step, end_step}" in r.stderr and not os.path.exists(out + ".none"),
          "ringctl trace without profile: %s %r" % (r.returncode, r.stderr))
    st, body = get(d, "/v1/jobs/j-nosuchjobnosuchjob22/trace")
    check(st == 404 and "no job" in json.loads(body)["detail"], "unknown job: %s %r" % (st, body))
    check("not stored" not in d.logtext(200000), "the daemon refused a trace:\n%s" % d.logtext())


if __name__ == "__main__":
    run(main)
