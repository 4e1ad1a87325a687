"""Recovery (issue 6) at the wire level, against the real ringmasterd with
fake agents and ranks (wire_shell.c):

- a rank killed by signal 9 while running (restart.max_restarts 2): the job
  goes recovering (a `recovering` event naming the cause and the attempt),
  the surviving rank gets ABORT "recovering: ..." with rejoin: true (no
  KILL); its messages get that ABORT again, snapshot reports ERROR 409, and
  nothing changes; once it answers PARKED, attempt 2 is placed on the same
  devices: the agent gets SPAWN {adopt: 1} for the parked rank and a plain
  SPAWN for the dead one, and the parked rank REJOIN {attempt: 2} on its old
  identity (its late messages of attempt 1 are dropped); attempt 2's JOINED carries resume {step, path} of the checkpoint
  committed by attempt 1 (null in attempt 1's); rank 0's first METRICS gives
  a `recovered` event with the time split; DONE from both ranks ->
  succeeded; restarts shows in REST and /metrics;
- a rank failing before all ranks joined (scheduled) recovers too, with
  resume null when nothing was committed; a survivor that exits instead of
  parking is replaced by a new process; the second restart waits out the
  backoff; FAILED without exit_code waits for the agent's exit status; a
  survivor that neither parks nor exits within the restart grace gets a
  plain ABORT and its agent a KILL of just that rank, and is replaced;
  restarts exhausted -> failed "restart.max_restarts (2) reached: ...";
- exit statuses 2, 3, 5 (spec, data, diverged): failed at once, not retried;
  max_restarts 0: failed at once;
- the agent lost with a spare agent registered: attempt 2 lands on the
  spare."""
import os
import re
import subprocess
import time

from rmtest import Daemon, check, free_port, run
from wireshell import Shell, cpus, events, register, spec, wait_state

BACKOFF_MS = 300


def config_checks(binary, workdir):
    """The restart settings are refused out of range, from the command line
    and from the file, naming the key."""
    out = subprocess.run([binary, "--restart-backoff-ms", "-1"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, timeout=10)
    check(out.returncode == 1 and b"restart_backoff_ms must be an integer from 0 to 3600000" in out.stderr,
          "bad --restart-backoff-ms: %r" % out.stderr)
    path = os.path.join(workdir, "bad.conf")
    with open(path, "w") as f:
        f.write("[server]\nrestart_grace_ms = 600001\n")
    out = subprocess.run([binary, "--config", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=10)
    check(out.returncode == 1 and b"bad.conf" in out.stderr and b"restart_grace_ms must be an integer from 0 to 600000" in out.stderr,
          "bad restart_grace_ms: %r" % out.stderr)
    out = subprocess.run([binary, "--help"], stdout=subprocess.PIPE, timeout=10)
    check(b"--restart-backoff-max-ms" in out.stdout, "--help lists the restart options")


def main(binary, workdir, daemons, shell_bin):
    config_checks(binary, workdir)
    endpoint = "tcp://127.0.0.1:%d" % free_port()
    d = Daemon(binary, workdir, extra_args=["--broker-auth", "off", "--heartbeat-ms", "100", "--heartbeat-misses", "5",
                                            "--broker", endpoint,
                                            "--restart-backoff-ms", str(BACKOFF_MS),
                                            "--restart-grace-ms", "3000"])
    daemons.append(d)
    d.start()
    sh = Shell(shell_bin, endpoint)
    try:
        scenario(d, sh)
    finally:
        sh.quit()
    check(d.stop() == 0, "clean stop")


def rspec(name, world_size, max_restarts):
    s = spec(name, world_size=world_size)
    s["restart"] = {"max_restarts": max_restarts}
    return s


def now_us():
    return int(time.time() * 1e6)


def spawns(sh, agent, n, jid, attempt):
    out = []
    for _ in range(n):
        p = sh.expect(agent, "SPAWN", what="SPAWN of %s attempt %d" % (jid, attempt))
        check(p["job"] == jid and p["attempt"] == attempt, "SPAWN %r, expected %s attempt %d" % (p, jid, attempt))
        out.append(p)
    return sorted(out, key=lambda p: p["rank"])


def join(sh, jid, attempt, ranks, tag):
    """Connect and JOIN ranks of an attempt; their JOINED payloads by rank."""
    joined = {}
    for r in ranks:
        name = "%s-a%d-r%d" % (tag, attempt, r)
        sh.dealer(name, "rank/%s/%d/%d" % (jid, attempt, r))
        sh.send(name, "JOIN", {"job": jid, "attempt": attempt, "rank": r})
        joined[r] = sh.expect(name, "JOINED", what="JOINED of %s" % name)
    return joined


def exited(sh, agent, jid, attempt, rank, code=-1, sig=9, error="", at_us=None):
    p = {"job": jid, "attempt": attempt, "rank": rank, "exit_code": code, "signal": sig, "error": error}
    if at_us is not None:
        p["exited_at_us"] = at_us
    sh.send(agent, "RANK_EXITED", p)


def job(d, jid):
    return d.json("GET", "/v1/jobs/" + jid, expect=200)[2]


def of_type(d, jid, type_):
    return [e for e in events(d, jid) if e["type"] == type_]


def wait_event(d, jid, type_, n=1, timeout=5):
    deadline = time.time() + timeout
    while time.time() < deadline:
        evs = of_type(d, jid, type_)
        if len(evs) >= n:
            return evs
        time.sleep(0.05)
    check(False, "no %d %r event(s) for %s: %r" % (n, type_, jid, events(d, jid)))


def metrics_row(step, **extra):
    p = {"step": step, "loss": 2.5, "lr": 1e-3, "grad_norm": 1.0, "tokens_per_s": 100.0, "ms": 10.0}
    p.update(extra)
    return p


def scenario(d, sh):
    register(sh, "a1", "n1", cpus(2), beat_ms=50)
    register(sh, "a2", "n2", cpus(2), beat_ms=50)
    signal_with_snapshot(d, sh)
    scheduled_backoff_exhausted(d, sh)
    not_retried(d, sh)
    agent_lost_spare(d, sh)
    d.json("GET", "/readyz", expect=200)


def signal_with_snapshot(d, sh):
    jid = d.submit(rspec("sig", 2, 2))["id"]
    sp = spawns(sh, "a1", 2, jid, 1)  # n1 and n2 tie: n1, by name
    check([p["device"]["index"] for p in sp] == [0, 1], "attempt 1 on cpu0, cpu1: %r" % sp)
    j1 = join(sh, jid, 1, [0, 1], "s")
    check(all(j["resume"] is None for j in j1.values()), "attempt 1: resume null %r" % j1)
    wait_state(d, jid, "running")
    doc = job(d, jid)
    check(doc["attempt"] == 1 and doc["restarts"] == 0, "attempt 1, restarts 0: %r" % doc)
    r0, r1 = "s-a1-r0", "s-a1-r1"

    # attempt 1 commits step 10
    for r, name in ((0, r0), (1, r1)):
        sh.send(name, "SNAPSHOT_WRITTEN", {"step": 10, "file": "rank-%d-of-2.safetensors" % r,
                                           "bytes": 1000, "xxh3": "%016x" % (0xab0 + r)})
    check(sh.expect(r0, "SNAPSHOT_COMMIT")["step"] == 10, "commit 10")
    sh.send(r0, "SNAPSHOT_COMMITTED", {"step": 10, "bytes": 2000, "path": "/ck/%s/step-00000010" % jid,
                                       "deleted": []})
    wait_event(d, jid, "checkpoint")
    sh.send(r0, "METRICS", metrics_row(12))

    # rank 1 is killed: recovering
    cause = "rank 1 exited: killed by signal 9"
    exited(sh, "a1", jid, 1, 1, at_us=now_us() - 5000)
    doc = wait_state(d, jid, "recovering")
    check(doc["state_reason"] == cause and doc["restarts"] == 1 and doc["attempt"] == 1, "recovering %r" % doc)
    rec = of_type(d, jid, "recovering")
    check(len(rec) == 1 and rec[0]["attempt"] == 1 and
          rec[0]["reason"] == "attempt 1 failed: %s; restart 1 of 2 (backoff 0 ms)" % cause,
          "recovering event %r" % rec)
    ask = {"job": jid, "attempt": 1, "reason": "recovering: " + cause, "rejoin": True}
    a = sh.expect(r0, "ABORT", what="ABORT of %s" % r0)
    check(a == ask, "the survivor is asked to rejoin: %r" % a)
    sh.silent(r1, 200, "nothing for the dead rank")
    sh.silent("a1", 200, "no KILL: the survivor is kept")
    sh.silent("a2", 10, "nothing for the agent without ranks of the job")

    # the old attempt is refused while the survivor stops training
    sh.send(r0, "METRICS", metrics_row(13))
    check(sh.expect(r0, "ABORT") == ask, "METRICS of the failed attempt: asked again")
    sh.send(r0, "SNAPSHOT_WRITTEN", {"step": 20, "file": "rank-0-of-2.safetensors", "bytes": 1000,
                                     "xxh3": "%016x" % 0xab0})
    e = sh.expect(r0, "ERROR")
    check(e["code"] == 409 and "recovering" in e["detail"], "snapshot report of the failed attempt %r" % e)
    sh.send(r0, "DONE", {"step": 13, "loss": 2.0})
    check(sh.expect(r0, "ABORT") == ask, "DONE of the failed attempt")
    # rank 0 has not parked yet: no restart (grace 3 s)
    sh.silent("a1", 400, "no SPAWN before the survivor parked")
    check(job(d, jid)["state"] == "recovering", "still recovering")

    # rank 0 parks: attempt 2 at once on the same devices (no backoff for the
    # 1st restart), rank 0 adopted in its process
    t0 = time.time()
    sh.send(r0, "PARKED", {"step": 13})
    sp2 = spawns(sh, "a1", 2, jid, 2)
    check(time.time() - t0 < 1.0, "first restart without backoff")
    check([(p["rank"], p["device"]["index"]) for p in sp2] == [(0, 0), (1, 1)], "same devices %r" % sp2)
    check(sp2[0].get("adopt") == 1 and "adopt" not in sp2[1], "rank 0 adopted, rank 1 spawned: %r" % sp2)
    check(sh.expect(r0, "REJOIN") == {"job": jid, "attempt": 2}, "REJOIN to the parked rank")
    # the kept rank may still be finishing its step in attempt 1: its late
    # messages are dropped, never answered with an ABORT that would end it
    sh.send(r0, "METRICS", metrics_row(14))
    sh.silent(r0, 300, "a kept rank's late METRICS of the attempt it leaves")
    doc = wait_state(d, jid, "scheduled")
    check(doc["attempt"] == 2 and doc["restarts"] == 1 and "restart 1 of 2 after " + cause in doc["state_reason"]
          and "1 rank(s) rejoin in their process" in doc["state_reason"], "attempt 2 placed %r" % doc)
    j2 = join(sh, jid, 2, [0, 1], "s")
    want = {"step": 10, "path": "/ck/%s/step-00000010" % jid}
    check(all(j["resume"] == want for j in j2.values()), "attempt 2 resumes from step 10: %r" % j2)
    wait_state(d, jid, "running")
    n0, n1 = "s-a2-r0", "s-a2-r1"

    # stale messages of attempt 1 never touch attempt 2
    sh.send(r1, "KV_SET", {"key": "nccl", "value": "AAAA"})
    a = sh.expect(r1, "ABORT")
    check(a["attempt"] == 1 and "stale" in a["reason"], "stale KV_SET %r" % a)
    sh.send(n0, "KV_GET", {"key": "nccl", "timeout_ms": 0})
    check(sh.expect(n0, "KV_VALUE")["found"] is False, "attempt 2's KV is its own")
    sh.send(r0, "SNAPSHOT_COMMITTED", {"step": 20, "bytes": 1, "path": "/x", "deleted": [10]})
    check(sh.expect(r0, "ERROR")["code"] == 409, "stale SNAPSHOT_COMMITTED")
    sh.send(r1, "FAILED", {"reason": "late failure of attempt 1"})
    check(sh.expect(r1, "ABORT")["attempt"] == 1, "stale FAILED")
    exited(sh, "a1", jid, 1, 1)  # a repeated report of the old attempt
    time.sleep(0.2)
    doc = job(d, jid)
    check(doc["state"] == "running" and doc["attempt"] == 2 and doc["restarts"] == 1, "attempt 2 untouched %r" % doc)
    check([c["step"] for c in d.json("GET", "/v1/jobs/%s/checkpoints" % jid, expect=200)[2]["checkpoints"]] == [10],
          "checkpoints untouched")

    # rank 0's first METRICS: recovered
    sh.send(n1, "METRICS", {"step": 11, "params_bytes": 1, "grads_bytes": 1, "optim_bytes": 1,
                            "activations_bytes": 1})
    time.sleep(0.2)
    check(of_type(d, jid, "recovered") == [], "rank 1's METRICS is not the recovery")
    sh.send(n0, "METRICS", metrics_row(11, resumed_from_step=10, load_ms=15.2, rendezvous_ms=40.4))
    ev = wait_event(d, jid, "recovered")
    check(len(ev) == 1 and ev[0]["attempt"] == 2, "one recovered event %r" % ev)
    text = ev[0]["reason"]
    m = re.match(r"^recovered from rank 1 exited: killed by signal 9: attempt 2 resumed from snapshot step 10 "
                 r"in (\d+) ms \(detection (\d+) ms, respawn (\d+) ms, start (\d+) ms, rendezvous 40 ms, "
                 r"snapshot load 15 ms, first step (\d+) ms\)$", text)
    check(m, "recovered event %r" % text)
    total, det, respawn, start, first = (int(x) for x in m.groups())
    check(det >= 4, "detection from exited_at_us (>= 5 ms ago): %r" % text)
    check(abs(det + respawn + start + 40 + 15 + first - total) <= 3, "the parts add up: %r" % text)
    check(text in d.logtext(), "recovered line logged")
    sh.send(n0, "METRICS", metrics_row(12, resumed_from_step=10, load_ms=1, rendezvous_ms=1))
    time.sleep(0.2)
    check(len(of_type(d, jid, "recovered")) == 1, "only the first METRICS of the attempt")
    _, _, body = d.request("GET", "/metrics")
    check(('ringmaster_job_restarts_total{job="%s"} 1\n' % jid).encode() in body, "restarts counter")

    for name in (n0, n1):
        sh.send(name, "DONE", {"step": 20, "loss": 2.0})
    doc = wait_state(d, jid, "succeeded")
    check(doc["attempt"] == 2 and doc["restarts"] == 1, "succeeded after one restart %r" % doc)
    for r in (0, 1):
        exited(sh, "a1", jid, 2, r, code=0, sig=0)
    for name in (r0, r1, n0, n1):
        sh.close(name)


def scheduled_backoff_exhausted(d, sh):
    jid = d.submit(rspec("flaky", 2, 2))["id"]
    spawns(sh, "a1", 2, jid, 1)
    j = join(sh, jid, 1, [0], "f")
    check(j[0]["resume"] is None, "no checkpoint: null")
    # rank 1 dies before it joined: the job was scheduled
    exited(sh, "a1", jid, 1, 1)
    doc = wait_state(d, jid, "recovering")
    check(doc["restarts"] == 1, "restart 1 %r" % doc)
    a = sh.expect("f-a1-r0", "ABORT")
    check(a["reason"] == "recovering: rank 1 exited: killed by signal 9" and a["rejoin"] is True, "ABORT %r" % a)
    # the survivor exits instead of parking: both ranks are new processes
    exited(sh, "a1", jid, 1, 0, code=7, sig=0)
    sp = spawns(sh, "a1", 2, jid, 2)
    check(not any("adopt" in p for p in sp), "no rank adopted: %r" % sp)
    j = join(sh, jid, 2, [0, 1], "f")
    check(all(x["resume"] is None for x in j.values()), "attempt 2 of a job without checkpoint: null %r" % j)
    wait_state(d, jid, "running")
    sh.send("f-a2-r0", "METRICS", metrics_row(1, resumed_from_step=0, load_ms=0, rendezvous_ms=3))
    ev = wait_event(d, jid, "recovered")
    check("attempt 2 started from step 0 (no snapshot)" in ev[0]["reason"], "fresh start %r" % ev)

    # FAILED without exit_code: the agent's exit status decides (6: a collective failed, retried)
    sh.send("f-a2-r1", "FAILED", {"reason": "all-reduce failed at step 3"})
    time.sleep(0.2)
    check(job(d, jid)["state"] == "running", "FAILED waits for the exit status")
    exited(sh, "a1", jid, 2, 1, code=6, sig=0)
    doc = wait_state(d, jid, "recovering")
    cause = "rank 1 failed: all-reduce failed at step 3"
    check(doc["state_reason"] == cause and doc["restarts"] == 2, "second restart %r" % doc)
    rec = of_type(d, jid, "recovering")
    check(rec[-1]["reason"] == "attempt 2 failed: %s; restart 2 of 2 (backoff %d ms)" % (cause, BACKOFF_MS),
          "backoff named %r" % rec[-1])
    a = sh.expect("f-a2-r0", "ABORT")
    check(a["attempt"] == 2 and a["rejoin"] is True, "ABORT attempt 2 %r" % a)
    # rank 0 neither parks nor exits: at the grace (3 s) it is stopped
    k = sh.expect("a1", "KILL", timeout_ms=5000)
    t0 = time.time()
    check(k == {"job": jid, "attempt": 2, "rank": 0}, "KILL of the rank that did not park %r" % k)
    a = sh.expect("f-a2-r0", "ABORT")
    check(a["attempt"] == 2 and "rejoin" not in a and "did not park" in a["reason"], "plain ABORT %r" % a)
    exited(sh, "a1", jid, 2, 0, code=7, sig=0)
    sp = spawns(sh, "a1", 2, jid, 3)
    waited = time.time() - t0
    check(not any("adopt" in p for p in sp), "no rank adopted: %r" % sp)
    check(waited >= BACKOFF_MS / 1000.0 - 0.05, "second restart after the backoff (%.3f s)" % waited)
    join(sh, jid, 3, [0, 1], "f")
    wait_state(d, jid, "running")

    # a third failure: restarts exhausted
    exited(sh, "a1", jid, 3, 0)
    doc = wait_state(d, jid, "failed")
    want = "restart.max_restarts (2) reached: rank 0 exited: killed by signal 9"
    check(doc["state_reason"] == want and doc["restarts"] == 2 and doc["attempt"] == 3, "exhausted %r" % doc)
    check(sh.expect("f-a3-r1", "ABORT")["reason"] == want, "ABORT with the last cause")
    check(sh.expect("a1", "KILL")["attempt"] == 3, "KILL attempt 3")
    exited(sh, "a1", jid, 3, 1, code=7, sig=0)
    st = [e for e in events(d, jid) if e["type"] == "state"]
    path = [e["to"] for e in st]
    check(path == ["scheduled", "recovering", "scheduled", "running", "recovering", "scheduled", "running",
                   "failed"], "state path %r" % path)
    for a in (1, 2, 3):
        for r in (0, 1):
            if not (a == 1 and r == 1):
                sh.close("f-a%d-r%d" % (a, r))


def not_retried(d, sh):
    cases = [
        ("exit 2", lambda jid, name: exited(sh, "a1", jid, 1, 0, code=2, sig=0, error="error: bad spec"),
         "rank 0 exited with status 2: error: bad spec (a job spec error: not retried)"),
        ("FAILED 3", lambda jid, name: sh.send(name, "FAILED", {"reason": "no data", "exit_code": 3}),
         "rank 0 failed: no data (a data error: not retried)"),
        ("FAILED then 5", lambda jid, name: (sh.send(name, "FAILED", {"reason": "loss is NaN"}),
                                             exited(sh, "a1", jid, 1, 0, code=5, sig=0)),
         "rank 0 failed: loss is NaN (training diverged: not retried)"),
    ]
    for tag, fail, cause in cases:
        jid = d.submit(rspec(tag.replace(" ", "-"), 1, 3))["id"]
        spawns(sh, "a1", 1, jid, 1)
        name = "n%s-a1-r0" % tag[-1]
        join(sh, jid, 1, [0], "n" + tag[-1])
        wait_state(d, jid, "running")
        fail(jid, name)
        doc = wait_state(d, jid, "failed")
        check(doc["state_reason"] == cause and doc["restarts"] == 0, "%s: %r" % (tag, doc))
        check(of_type(d, jid, "recovering") == [], "%s: not recovering" % tag)
        check(sh.expect(name, "ABORT")["reason"] == cause, "%s: ABORT" % tag)
        check(sh.expect("a1", "KILL")["job"] == jid, "%s: KILL" % tag)
        sh.close(name)
    # max_restarts 0: the first failure fails the job
    jid = d.submit(rspec("never", 1, 0))["id"]
    spawns(sh, "a1", 1, jid, 1)
    join(sh, jid, 1, [0], "z")
    exited(sh, "a1", jid, 1, 0)
    doc = wait_state(d, jid, "failed")
    check(doc["state_reason"] == "restart.max_restarts (0) reached: rank 0 exited: killed by signal 9",
          "max_restarts 0 %r" % doc)
    check(sh.expect("a1", "KILL")["job"] == jid, "max_restarts 0: KILL")
    sh.close("z-a1-r0")


def agent_lost_spare(d, sh):
    jid = d.submit(rspec("lost", 2, 1))["id"]
    spawns(sh, "a1", 2, jid, 1)
    join(sh, jid, 1, [0, 1], "l")
    wait_state(d, jid, "running")
    sh.beat("a1", "n1", 0)  # n1 falls silent: dead after 5 x 100 ms
    # its ranks are gone with it: no wait for exits; attempt 2 on the spare n2
    # (recovering is passed through at once: no backoff for the 1st restart)
    sp = spawns(sh, "a2", 2, jid, 2)
    cause = "node n1 lost: no heartbeat for 0.5 s"
    st = [e for e in events(d, jid) if e["type"] == "state" and e["to"] == "recovering"]
    check(len(st) == 1 and st[0]["reason"] == cause and st[0]["from"] == "running", "agent lost %r" % st)
    check(sorted(p["device"]["index"] for p in sp) == [0, 1], "both ranks on n2 %r" % sp)
    doc = wait_state(d, jid, "scheduled")
    check("n2 [0:cpu0 1:cpu1]" in doc["state_reason"], "placed on the spare %r" % doc)
    join(sh, jid, 2, [0, 1], "l")
    wait_state(d, jid, "running")
    sh.send("l-a2-r0", "METRICS", metrics_row(5, resumed_from_step=0, load_ms=0, rendezvous_ms=1))
    ev = wait_event(d, jid, "recovered")
    m = re.search(r"detection (\d+) ms", ev[0]["reason"])
    check(ev[0]["reason"].startswith("recovered from " + cause) and m and int(m.group(1)) >= 400,
          "detection is the time since the last heartbeat: %r" % ev)
    for r in (0, 1):
        sh.send("l-a2-r%d" % r, "DONE", {"step": 5, "loss": 2.0})
    wait_state(d, jid, "succeeded")


if __name__ == "__main__":
    run(main)
