"""Failures, cancellation and scheduling policy at the wire level, against
the real ringmasterd (wire_shell.c plays two agents and their ranks):

- with restart.max_restarts 0 (restarts are tested in test_recovery.py): a
  rank killed by a signal, a rank exiting with a status and an error line (3,
  a data error: never retried), a rank reporting FAILED: the job fails with
  the exact cause, the attempt's connected ranks get ABORT and its agents
  (only those) get KILL rank -1;
- cancel of a running job spread over two nodes: ABORT and KILL the same way;
- gang placement, priority then FIFO, a job that does not fit holding back
  later jobs of its kind, a job wider than the cluster not holding anyone;
- the coordinator stopped (SIGSTOP) for longer than the liveness window
  while a job runs on both agents: the silence is its own, so when it
  resumes nobody is declared dead and the job runs on;
- an agent that stops heartbeating: declared dead, its job failed with
  "restart.max_restarts (0) reached: node NAME lost: no heartbeat for 1.0 s",
  the other agent stays alive, the
  dead agent is told to REGISTER, and on REGISTER its stale rank gets KILL;
- bad agent messages get ERROR; the daemon keeps serving throughout."""
import signal
import time

from rmtest import Daemon, check, run
from wireshell import Shell, cpus, register, spec, wait_state


def main(binary, workdir, daemons, shell_bin):
    d = Daemon(binary, workdir, extra_args=["--broker-auth", "off", "--heartbeat-ms", "250", "--heartbeat-misses", "4"])
    daemons.append(d)
    d.start()
    sh = Shell(shell_bin, "tcp://127.0.0.1:%d" % d.broker_port)
    try:
        scenario(d, sh)
    finally:
        sh.quit()
    check(d.stop() == 0, "clean stop")


NO_RESTART = "restart.max_restarts (0) reached: "


def spec0(name, world_size=1):
    """A job spec without restarts: a failure fails the job."""
    s = spec(name, world_size=world_size)
    s["restart"] = {"max_restarts": 0}
    return s


def join_all(d, sh, jid, spawns, attempt=1):
    names = []
    for p in spawns:
        name = "%s-r%d" % (jid[-6:], p["rank"])
        sh.dealer(name, "rank/%s/%d/%d" % (jid, attempt, p["rank"]))
        sh.send(name, "JOIN", {"job": jid, "attempt": attempt, "rank": p["rank"]})
        sh.expect(name, "JOINED")
        names.append(name)
    wait_state(d, jid, "running")
    return names


def spawns_of(sh, agent, n, jid):
    out = []
    for _ in range(n):
        p = sh.expect(agent, "SPAWN", what="SPAWN of %s" % jid)
        check(p["job"] == jid, "SPAWN for %s, expected %s" % (p["job"], jid))
        out.append(p)
    return out


def expect_kill(sh, agent, jid, attempt=1, rank=-1):
    p = sh.expect(agent, "KILL", what="KILL of %s" % jid)
    check(p == {"job": jid, "attempt": attempt, "rank": rank}, "KILL %r" % p)


def fails_with(d, sh, jid, ranks, agent, cause):
    doc = wait_state(d, jid, "failed")
    check(doc["state_reason"] == cause, "cause %r, expected %r" % (doc["state_reason"], cause))
    for name in ranks:
        a = sh.expect(name, "ABORT", what="ABORT of %s" % name)
        check(a["job"] == jid and a["attempt"] == 1 and a["reason"] == cause, "ABORT %r" % a)
    expect_kill(sh, agent, jid)


def scenario(d, sh):
    # bad agent messages
    sh.dealer("x", "agent/n9")
    sh.send("x", "HEARTBEAT", {"node": "n9"})
    e = sh.expect("x", "ERROR")
    check(e["code"] == 404 and "REGISTER" in e["detail"], "heartbeat before REGISTER %r" % e)
    sh.send("x", "REGISTER", {"node": "n9", "devices": [{"kind": "tpu", "index": 0}], "ranks": []})
    e = sh.expect("x", "ERROR")
    check(e["code"] == 400 and "devices[0].kind" in e["detail"], "bad device %r" % e)
    sh.send("x", "REGISTER", {"node": "n8", "devices": [], "ranks": []})
    check(sh.expect("x", "ERROR")["code"] == 400, "node does not match the identity")
    sh.send("x", "REGISTER", {"node": "n9", "devices": cpus(1) + cpus(1), "ranks": []})
    check(sh.expect("x", "ERROR")["code"] == 400, "a device listed twice")
    sh.send("x", "REGISTER", {"node": "n9", "devices": [], "ranks": [{"job": 1}]})
    check(sh.expect("x", "ERROR")["code"] == 400, "a bad ranks entry")
    sh.send("x", "JOIN", {"job": "j-x", "attempt": 1, "rank": 0})
    check(sh.expect("x", "ERROR")["code"] == 400, "an agent sending JOIN")
    sh.send("x", "ERROR", {"code": 404, "detail": "an agent does not take this message type"})
    sh.silent("x", 300, "an ERROR is never answered")
    sh.dealer("anon", "someone")
    sh.send("anon", "HEARTBEAT", {"node": "n9"})
    check(sh.expect("anon", "ERROR")["code"] == 400, "an unknown kind of peer")
    sh.close("x")
    sh.close("anon")

    register(sh, "a1", "n1", cpus(2), beat_ms=100)
    register(sh, "a2", "n2", cpus(1), beat_ms=100)

    # killed by a signal
    jid = d.submit(spec0("sig", world_size=2))["id"]
    ranks = join_all(d, sh, jid, spawns_of(sh, "a1", 2, jid))
    sh.send("a1", "RANK_EXITED", {"job": jid, "attempt": 1, "rank": 1, "exit_code": -1, "signal": 9, "error": ""})
    fails_with(d, sh, jid, ranks, "a1", NO_RESTART + "rank 1 exited: killed by signal 9")
    sh.silent("a2", 300, "no KILL for an agent without ranks of the job")

    # exit status with the rank's error line
    jid = d.submit(spec("status", world_size=1))["id"]  # restarts left, but status 3 is never retried
    ranks = join_all(d, sh, jid, spawns_of(sh, "a1", 1, jid))  # most free first: n1
    sh.send("a1", "RANK_EXITED", {"job": jid, "attempt": 1, "rank": 0, "exit_code": 3, "signal": 0,
                                  "error": "error: data.train: no such file"})
    fails_with(d, sh, jid, ranks, "a1",
               "rank 0 exited with status 3: error: data.train: no such file (a data error: not retried)")

    # FAILED from the rank
    jid = d.submit(spec0("nan", world_size=1))["id"]
    ranks = join_all(d, sh, jid, spawns_of(sh, "a1", 1, jid))
    sh.send(ranks[0], "FAILED", {"reason": "loss is NaN at step 7"})
    fails_with(d, sh, jid, ranks, "a1", NO_RESTART + "rank 0 failed: loss is NaN at step 7")

    # a clean exit without DONE: failed once the grace for a late DONE (2 s) is over
    jid = d.submit(spec0("quiet", world_size=1))["id"]
    ranks = join_all(d, sh, jid, spawns_of(sh, "a1", 1, jid))
    t0 = time.time()
    sh.send("a1", "RANK_EXITED", {"job": jid, "attempt": 1, "rank": 0, "exit_code": 0, "signal": 0, "error": ""})
    fails_with(d, sh, jid, ranks, "a1", NO_RESTART + "rank 0 exited with status 0 before reporting DONE")
    check(time.time() - t0 >= 1.8, "failed before the grace for DONE was over")

    # cancel of a running job on two nodes
    jid = d.submit(spec("wide", world_size=3))["id"]
    sp = spawns_of(sh, "a1", 2, jid) + spawns_of(sh, "a2", 1, jid)
    check(sorted(p["rank"] for p in sp) == [0, 1, 2] and sp[2]["device"] == {"kind": "cpu", "index": 0},
          "3 ranks over n1 (2) and n2 (1): %r" % sp)
    check({p["rank"] for p in sp[:2]} == {0, 1}, "ranks 0-1 on the node with the most free devices")
    ranks = join_all(d, sh, jid, sp)
    _, _, doc = d.json("POST", "/v1/jobs/%s/cancel" % jid, expect=200)
    check(doc["state"] == "cancelled", "cancel %r" % doc)
    for name in ranks:
        a = sh.expect(name, "ABORT")
        check(a["reason"] == "cancelled by request", "cancel ABORT %r" % a)
    expect_kill(sh, "a1", jid)
    expect_kill(sh, "a2", jid)

    # scheduling policy: fill the cluster, then queue
    full = d.submit(spec("full", world_size=3))["id"]
    sp_full = spawns_of(sh, "a1", 2, full) + spawns_of(sh, "a2", 1, full)
    low = d.submit(spec("low", world_size=1, priority=0))["id"]
    high = d.submit(spec("high", world_size=1, priority=5))["id"]
    huge = d.submit(spec("huge", world_size=4))["id"]  # wider than the cluster: waits, holds no one
    time.sleep(0.3)
    for j in (low, high, huge):
        wait_state(d, j, "queued")
    d.json("POST", "/v1/jobs/%s/cancel" % full, expect=200)
    expect_kill(sh, "a1", full)
    expect_kill(sh, "a2", full)
    p1 = sh.expect("a1", "SPAWN")
    p2 = sh.expect("a1", "SPAWN")
    check(p1["job"] == high and p1["device"]["index"] == 0 and p2["job"] == low and p2["device"]["index"] == 1,
          "priority first, then FIFO, packed on n1: %r %r" % (p1, p2))
    wait_state(d, huge, "queued")
    # a job that could fit once devices free up holds back later jobs of its kind
    blocker = d.submit(spec("blocker", world_size=3))["id"]
    later = d.submit(spec("later", world_size=1))["id"]
    sh.silent("a2", 500, "no placement past a waiting job")
    wait_state(d, later, "queued")
    d.json("POST", "/v1/jobs/%s/cancel" % high, expect=200)
    expect_kill(sh, "a1", high)
    d.json("POST", "/v1/jobs/%s/cancel" % low, expect=200)
    expect_kill(sh, "a1", low)
    sp = spawns_of(sh, "a1", 2, blocker) + spawns_of(sh, "a2", 1, blocker)
    wait_state(d, later, "queued")
    d.json("POST", "/v1/jobs/%s/cancel" % blocker, expect=200)
    expect_kill(sh, "a1", blocker)
    expect_kill(sh, "a2", blocker)
    p = sh.expect("a1", "SPAWN")
    check(p["job"] == later, "the later job goes once the blocker is gone: %r" % p)
    for j in (later, huge):
        d.json("POST", "/v1/jobs/%s/cancel" % j, expect=200)
    expect_kill(sh, "a1", later)

    # the coordinator stops for 2.5 s (a stalled disk, a paused VM), longer
    # than the 1.0 s liveness window, while a job runs on both agents, which
    # beat on into its socket meanwhile
    jid = d.submit(spec0("paused", world_size=3))["id"]
    ranks = join_all(d, sh, jid, spawns_of(sh, "a1", 2, jid) + spawns_of(sh, "a2", 1, jid))
    d.proc.send_signal(signal.SIGSTOP)
    try:
        sh.sleep(2500)
    finally:
        d.proc.send_signal(signal.SIGCONT)
    sh.sleep(4000)  # past the grace it gives on waking (the stall + the 1.0 s window)
    with open(d.log_path, "rb") as f:
        log = f.read().decode("utf-8", "replace")
    check("declared dead" not in log and "heard nothing for" in log,
          "a stopped coordinator took its own silence for the agents': %s" % log[-1500:])
    doc = d.json("GET", "/v1/jobs/" + jid, expect=200)[2]
    check(doc["state"] == "running", "the job after the pause: %s %r" % (doc["state"], doc.get("state_reason")))
    _, _, w = d.json("GET", "/v1/workers", expect=200)
    check(all(x["state"] == "alive" for x in w["workers"]), "workers after the pause %r" % w)
    d.json("POST", "/v1/jobs/%s/cancel" % jid, expect=200)
    for name in ranks:
        sh.expect(name, "ABORT")
    expect_kill(sh, "a1", jid)
    expect_kill(sh, "a2", jid)

    # agent death: a1 falls silent while its job runs
    jid = d.submit(spec0("lost", world_size=2))["id"]
    ranks = join_all(d, sh, jid, spawns_of(sh, "a1", 2, jid))
    sh.beat("a1", "n1", 0)
    t0 = time.time()
    doc = wait_state(d, jid, "failed", timeout=10)
    took = time.time() - t0
    check(doc["state_reason"] == NO_RESTART + "node n1 lost: no heartbeat for 1.0 s", "cause %r" % doc["state_reason"])
    check(0.8 <= took <= 4.0, "declared dead after %.2f s (dead_after 1.0 s)" % took)
    for name in ranks:
        check(sh.expect(name, "ABORT")["reason"] == doc["state_reason"], "ABORT after node loss")
    _, _, w = d.json("GET", "/v1/workers", expect=200)
    states = {x["node"]: x["state"] for x in w["workers"]}
    check(states == {"n1": "dead", "n2": "alive"}, "worker states %r" % states)
    _, _, body = d.request("GET", "/metrics")
    check(b'ringmaster_workers{state="dead"} 1\n' in body, "dead workers gauge")
    # the dead agent speaks again: told to REGISTER; on REGISTER its stale rank is killed
    sh.send("a1", "HEARTBEAT", {"node": "n1"})
    e = sh.expect("a1", "ERROR")
    check(e["code"] == 404 and "dead" in e["detail"], "heartbeat of a dead agent %r" % e)
    sh.send("a1", "REGISTER", {"node": "n1", "devices": cpus(2),
                               "ranks": [{"job": jid, "attempt": 1, "rank": 0, "pid": 4242}]})
    sh.expect("a1", "REGISTERED")
    expect_kill(sh, "a1", jid, rank=0)
    sh.beat("a1", "n1", 100)
    _, _, w = d.json("GET", "/v1/workers", expect=200)
    check(all(x["state"] == "alive" for x in w["workers"]), "alive again %r" % w)
    # n2 kept heartbeating the whole time: never declared dead
    check("agent n2 declared dead" not in d.logtext(), "false expiry of n2")
    d.json("GET", "/readyz", expect=200)


if __name__ == "__main__":
    run(main)
