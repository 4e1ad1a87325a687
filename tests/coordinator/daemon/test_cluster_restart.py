"""A coordinator restart loses nothing on the workers' side: a running job,
its placement and its agent are restored from the database; the agent keeps
heartbeating (ZeroMQ reconnects by itself), may REGISTER again listing its
ranks (kept: no KILL, no new SPAWN), and the ranks finish the job. An agent
that stays silent across a restart is declared dead dead_after intervals
after the start and its job goes recovering (restarts left), waiting for
devices; it stays recovering across another coordinator restart and is
placed again (attempt 2) once the agent registers again."""
import time

from rmtest import Daemon, check, free_port, run
from wireshell import Shell, cpus, register, spec, wait_state


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
    register(sh, "a1", "n1", cpus(2), beat_ms=100)
    jid = d.submit(spec("survivor", world_size=2))["id"]
    for _ in range(2):
        sh.expect("a1", "SPAWN")
    for r in range(2):
        sh.dealer("r%d" % r, "rank/%s/1/%d" % (jid, r))
        sh.send("r%d" % r, "JOIN", {"job": jid, "attempt": 1, "rank": r})
        sh.expect("r%d" % r, "JOINED")
    wait_state(d, jid, "running")

    check(d.stop() == 0, "stop")
    d.start()
    doc = wait_state(d, jid, "running")
    check(doc["attempt"] == 1, "attempt kept %r" % doc)
    check("restored 1 agent(s) and 1 live attempt(s)" in d.logtext(), "restore logged:\n" + d.logtext())
    # the agent re-registers with the ranks it runs: nothing to kill or spawn
    sh.send("a1", "REGISTER", {"node": "n1", "devices": cpus(2),
                               "ranks": [{"job": jid, "attempt": 1, "rank": r, "pid": 100 + r} for r in range(2)]})
    sh.expect("a1", "REGISTERED")
    sh.silent("a1", 400, "no KILL or SPAWN for ranks that are live")
    # the ranks carry on: metrics, then done
    sh.send("r0", "METRICS", {"step": 1, "loss": 3.0, "lr": 1e-3, "grad_norm": 1.0, "tokens_per_s": 10.0, "ms": 1.0})
    for r in range(2):
        sh.send("r%d" % r, "DONE", {"step": 1, "loss": 3.0})
    wait_state(d, jid, "succeeded")
    _, _, m = d.json("GET", "/v1/jobs/%s/metrics" % jid, expect=200)
    check([x["step"] for x in m["metrics"]] == [1], "metrics after restart %r" % m)

    # a job whose agent falls silent while the coordinator is down
    jid2 = d.submit(spec("orphan", world_size=1))["id"]
    sh.expect("a1", "SPAWN")
    check(d.stop() == 0, "stop")
    sh.beat("a1", "n1", 0)
    t0 = time.time()
    d.start()
    doc = wait_state(d, jid2, "recovering", timeout=10)
    took = time.time() - t0
    check(doc["state_reason"] == "node n1 lost: no heartbeat for 1.0 s", "cause %r" % doc["state_reason"])
    check(doc["restarts"] == 1 and doc["attempt"] == 1, "restart 1 decided %r" % doc)
    check(took >= 0.9, "declared dead too early: %.2f s after the start" % took)
    _, _, w = d.json("GET", "/v1/workers", expect=200)
    check([x["state"] for x in w["workers"]] == ["dead"], "workers %r" % w)
    time.sleep(0.3)
    check(wait_state(d, jid2, "recovering")["attempt"] == 1, "no device: the restart waits")

    # recovering survives a coordinator restart; the agent comes back: attempt 2
    check(d.stop() == 0, "stop")
    d.start()
    wait_state(d, jid2, "recovering")
    sh.send("a1", "REGISTER", {"node": "n1", "devices": cpus(2), "ranks": []})
    sh.expect("a1", "REGISTERED")
    sh.beat("a1", "n1", 100)
    p = sh.expect("a1", "SPAWN", what="SPAWN of the restarted attempt")
    check(p["job"] == jid2 and p["attempt"] == 2, "attempt 2 spawned %r" % p)
    doc = wait_state(d, jid2, "scheduled")
    check(doc["attempt"] == 2 and doc["restarts"] == 1, "placed again %r" % doc)
    sh.dealer("o0", "rank/%s/2/0" % jid2)
    sh.send("o0", "JOIN", {"job": jid2, "attempt": 2, "rank": 0})
    check(sh.expect("o0", "JOINED")["resume"] is None, "no checkpoint to resume from")
    sh.send("o0", "DONE", {"step": 1, "loss": 3.0})
    wait_state(d, jid2, "succeeded")


if __name__ == "__main__":
    run(main)
