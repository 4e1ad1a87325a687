"""Program jobs (issue 26) against the real ringmasterd, with fake agents
over raw ZeroMQ (wire_shell): placement only on agents that allow programs
(and at most parallel.ranks_per_node per node), SPAWN's program and torch
objects with a distinct MASTER_PORT per concurrent job, RANK_STARTED ->
running, every rank exiting 0 -> succeeded, one rank failing -> KILL of the
gang and a new attempt with restart_count + 1, max_restarts -> failed,
rank 0's PROGRAM_METRICS in /v1/jobs/{id}/metrics (another agent's
refused), a coordinator kill -9 and restart keeping the running gang,
cancel, and program.env against env_allow (422)."""
import json
import time

from rmtest import Daemon, check, free_port, problem_of, run
from wireshell import Shell, cpus, events, wait_state


def pspec(name, world_size=2, max_restarts=2, env=None, ranks_per_node=None):
    s = {"name": name, "program": {"argv": ["/usr/bin/python3", "ddp.py", "--epochs", "3"], "cwd": "proj"},
         "parallel": {"world_size": world_size}, "restart": {"max_restarts": max_restarts}}
    if env is not None:
        s["program"]["env"] = env
    if ranks_per_node:
        s["parallel"]["ranks_per_node"] = ranks_per_node
    return s


def reg(sh, name, node, n, programs, ports=None, ranks=(), connect=True):
    if connect:
        sh.dealer(name, "agent/" + node)
    p = {"node": node, "devices": cpus(n), "ranks": list(ranks), "advertise": "10.0.0.%d" % (ord(node[-1]) - 48)}
    if programs:
        p["programs"] = True
    if ports:
        p["program_ports"] = ports
    sh.send(name, "REGISTER", p)
    sh.expect(name, "REGISTERED", what="REGISTER of %s" % node)


def spawns(sh, name, n, what):
    out = []
    for _ in range(n):
        out.append(sh.expect(name, "SPAWN", what=what))
    return sorted(out, key=lambda p: p["rank"])


def started(sh, name, jid, att, ranks):
    for r in ranks:
        sh.send(name, "RANK_STARTED", {"job": jid, "attempt": att, "rank": r, "pid": 1000 + r})


def exited(sh, name, jid, att, r, code, sig=0):
    sh.send(name, "RANK_EXITED", {"job": jid, "attempt": att, "rank": r, "exit_code": code, "signal": sig,
                                  "error": "" if code == 0 else "RuntimeError: boom"})


def main(binary, workdir, daemons, shell_bin):
    endpoint = "tcp://127.0.0.1:%d" % free_port()
    d = Daemon(binary, workdir, extra_args=["--broker-auth", "off", "--heartbeat-ms", "200", "--heartbeat-misses", "5",
                                            "--restart-grace-ms", "1000", "--restart-backoff-ms", "0",
                                            "--broker", endpoint])
    daemons.append(d)
    d.start()
    sh = Shell(shell_bin, endpoint)
    try:
        scenario(d, sh)
    finally:
        sh.quit()
    check(d.stop() == 0, "clean stop")


def submission(d):
    # env names: the default allow-list, names the agent sets, bad shapes
    for name, status in (("NCCL_DEBUG", 201), ("RINGMASTER_USER_X", 201), ("LD_PRELOAD", 422),
                         ("MASTER_PORT", 422), ("RANK", 422), ("OMP_NUM_THREADS", 422),
                         ("CUDA_VISIBLE_DEVICES", 422), ("TORCHELASTIC_RUN_ID", 422), ("RINGMASTER_JOB_ID", 422),
                         ("PATH", 422)):
        st, h, data = d.request("POST", "/v1/jobs", pspec("env-" + name, env={name: "1"}))
        check(st == status, "program.env %s: %d %r" % (name, st, data[:300]))
        if status == 422:
            doc = problem_of(h, data, 422)
            check(doc.get("pointer") == "/program/env/" + name, "pointer %r" % doc)
        else:
            d.json("POST", "/v1/jobs/%s/cancel" % json.loads(data)["id"], expect=200)
    for bad, pointer in (({"program": {"argv": ["x"]}, "model": {}}, "/model"),
                         ({"program": {"argv": []}}, "/program/argv"),
                         ({"program": {"argv": ["x"], "cwd": "../up"}}, "/program/cwd"),
                         ({"program": {"argv": ["x"], "cwd": "/etc"}}, "/program/cwd")):
        _, h, data = d.request("POST", "/v1/jobs", bad)
        doc = problem_of(h, data, 400)
        check(doc.get("pointer") == pointer, "refusal of %r: %r" % (bad, doc))


def scenario(d, sh):
    submission(d)
    # a REGISTER with a bad program_ports or advertise is refused, naming it
    sh.dealer("bad", "agent/nbad")
    for extra, field in (({"program_ports": [10, 5]}, "program_ports"), ({"program_ports": [30000]}, "program_ports"),
                         ({"programs": True, "advertise": "a b"}, "advertise")):
        p = {"node": "nbad", "devices": cpus(1), "ranks": []}
        p.update(extra)
        sh.send("bad", "REGISTER", p)
        e = sh.expect("bad", "ERROR", what="REGISTER with %r" % extra)
        check(e["code"] == 400 and field in e["detail"], "refusal %r" % e)
    sh.close("bad")
    # n1 runs the built-in trainer only; n2 and n3 allow programs
    reg(sh, "a1", "n1", 4, programs=False)
    sh.beat("a1", "n1", 100)
    jw = d.submit(pspec("waits", world_size=2))["id"]
    doc = wait_state(d, jw, "queued")
    deadline = time.time() + 5
    while "allows programs" not in (doc.get("state_reason") or "") and time.time() < deadline:
        time.sleep(0.05)
        _, _, doc = d.json("GET", "/v1/jobs/" + jw, expect=200)
    check("no worker allows programs" in doc["state_reason"], "wait reason %r" % doc)
    sh.silent("a1", 300, "no SPAWN of a program on an agent without --allow-program")

    reg(sh, "a2", "n2", 2, programs=True, ports=[30000, 30001])
    sh.beat("a2", "n2", 100)
    sp = spawns(sh, "a2", 2, "SPAWN of the program on n2")
    check(all(p["job"] == jw and p["attempt"] == 1 for p in sp), "spawns %r" % sp)
    t0, t1 = sp[0]["torch"], sp[1]["torch"]
    check(sp[0]["program"] == {"argv": ["/usr/bin/python3", "ddp.py", "--epochs", "3"], "cwd": "proj", "env": {}},
          "program object %r" % sp[0])
    check(t0 == {"master_addr": "10.0.0.2", "master_port": 30000, "local_rank": 0, "local_world_size": 2,
                 "group_rank": 0, "group_world_size": 1, "restart_count": 0, "max_restarts": 2, "run_id": jw}, "torch of rank 0 %r" % t0)
    check(t1["local_rank"] == 1 and t1["master_port"] == 30000, "torch of rank 1 %r" % t1)
    sh.silent("a1", 200, "nothing for n1")

    # a second program job at the same time: another port on n2's range;
    # n2 is full, so it waits for devices; a third agent with programs and
    # ranks_per_node 1 spreads a job over two nodes
    reg(sh, "a3", "n3", 2, programs=True, ports=[30000, 30002])
    sh.beat("a3", "n3", 100)
    reg(sh, "a4", "n4", 2, programs=True, ports=[30000, 30001])
    sh.beat("a4", "n4", 100)
    js = d.submit(pspec("spread", world_size=2, ranks_per_node=1))["id"]
    s3 = sh.expect("a3", "SPAWN", what="rank 0 of the spread job on n3")
    s4 = sh.expect("a4", "SPAWN", what="rank 1 of the spread job on n4")
    check(s3["rank"] == 0 and s4["rank"] == 1, "one rank per node %r %r" % (s3, s4))
    check(s3["torch"]["group_rank"] == 0 and s4["torch"]["group_rank"] == 1 and
          s4["torch"]["local_rank"] == 0 and s4["torch"]["group_world_size"] == 2 and s4["torch"]["local_world_size"] == 1 and
          s4["torch"]["master_addr"] == "10.0.0.3", "torch across nodes %r %r" % (s3, s4))
    # a third job lands on n3/n4 again (rank 0 on n3): n3's port 30000 is held
    jt = d.submit(pspec("third", world_size=2, ranks_per_node=1))["id"]
    t3 = sh.expect("a3", "SPAWN", what="third job on n3")
    sh.expect("a4", "SPAWN", what="third job on n4")
    check(t3["torch"]["master_port"] == 30001 and s3["torch"]["master_port"] == 30000,
          "distinct ports on one node: %r vs %r" % (t3["torch"], s3["torch"]))

    # RANK_STARTED x2 -> running; both exit 0 -> succeeded
    started(sh, "a2", jw, 1, [0])
    time.sleep(0.2)
    check(wait_state(d, jw, "scheduled")["state"] == "scheduled", "one rank started: not running yet")
    started(sh, "a2", jw, 1, [1])
    check(wait_state(d, jw, "running")["state_reason"] == "all 2 rank(s) started", "running")

    # metrics: rank 0's rows stored; rank 1's ignored; from another agent refused
    sh.send("a2", "PROGRAM_METRICS", {"job": jw, "attempt": 1, "rank": 0,
                                      "row": {"step": 10, "loss": 2.5, "lr": 0.001, "mfu": 0.3}})
    sh.send("a2", "PROGRAM_METRICS", {"job": jw, "attempt": 1, "rank": 1, "row": {"step": 11, "loss": 9.0}})
    sh.send("a3", "PROGRAM_METRICS", {"job": jw, "attempt": 1, "rank": 0, "row": {"step": 12, "loss": 7.0}})
    e = sh.expect("a3", "ERROR", what="PROGRAM_METRICS from another agent")
    check(e["code"] == 403, "refused %r" % e)
    sh.send("a3", "RANK_STARTED", {"job": jw, "attempt": 1, "rank": 0, "pid": 1})
    check(sh.expect("a3", "ERROR")["code"] == 403, "RANK_STARTED from another agent refused")
    sh.send("a2", "PROGRAM_METRICS", {"job": jw, "attempt": 1, "rank": 0, "row": {"step": "x", "loss": 1}})
    check(sh.expect("a2", "ERROR")["code"] == 400, "a bad row is refused")
    sh.send("a2", "PROGRAM_METRICS", {"job": jw, "attempt": 1, "rank": 0, "row": {"step": 20, "loss": 2.0}})
    deadline = time.time() + 5
    while True:
        _, _, m = d.json("GET", "/v1/jobs/%s/metrics" % jw, expect=200)
        if len(m["metrics"]) >= 2 or time.time() > deadline:
            break
        time.sleep(0.05)
    rows = [(x["step"], x["loss"]) for x in m["metrics"]]
    check(rows == [(10, 2.5), (20, 2.0)], "rank 0's rows only %r" % m)
    exited(sh, "a2", jw, 1, 1, 0)
    time.sleep(0.2)
    check(wait_state(d, jw, "running")["state"] == "running", "one rank done: still running")
    exited(sh, "a2", jw, 1, 0, 0)
    check("exited with status 0" in wait_state(d, jw, "succeeded")["state_reason"], "succeeded")

    # a rank fails: KILL of the other, new attempt with restart_count 1
    started(sh, "a3", js, 1, [0])
    started(sh, "a4", js, 1, [1])
    wait_state(d, js, "running")
    exited(sh, "a4", js, 1, 1, 1)
    k = sh.expect("a3", "KILL", what="KILL of the surviving rank")
    check(k == {"job": js, "attempt": 1, "rank": 0}, "kill %r" % k)
    doc = wait_state(d, js, "recovering")
    check("rank 1 of the program exited with status 1: RuntimeError: boom" in doc["state_reason"], "cause %r" % doc)
    exited(sh, "a3", js, 1, 0, -1, 15)
    r3 = sh.expect("a3", "SPAWN", what="attempt 2 on n3")
    sh.expect("a4", "SPAWN", what="attempt 2 on n4")
    check(r3["attempt"] == 2 and r3["torch"]["restart_count"] == 1 and "adopt" not in r3, "attempt 2 %r" % r3)
    check(r3["torch"]["master_port"] == 30002, "a new port for the new attempt %r" % r3["torch"])
    doc = wait_state(d, js, "scheduled")
    check(doc["attempt"] == 2 and doc["restarts"] == 1, "restarted %r" % doc)

    # exit status 2 (the built-in trainer's "spec error") means nothing special
    # for a program: restart 2, then max_restarts (2) reached -> failed
    exited(sh, "a3", js, 2, 0, 2)
    sh.expect("a4", "KILL", what="KILL at attempt 2")
    exited(sh, "a4", js, 2, 1, -1, 15)
    sh.expect("a3", "SPAWN", what="attempt 3")
    sh.expect("a4", "SPAWN", what="attempt 3")
    doc = wait_state(d, js, "scheduled")
    check(doc["attempt"] == 3 and doc["restarts"] == 2, "attempt 3 %r" % doc)
    exited(sh, "a4", js, 3, 1, -1, 9)
    doc = wait_state(d, js, "failed")
    check("restart.max_restarts (2) reached" in doc["state_reason"], "failed %r" % doc)
    check(any(e["type"] == "recovering" for e in events(d, js)), "recovering events")
    for a in ("a3", "a4"):
        k = sh.expect(a, "KILL", what="the failed job's KILL on " + a)
        check(k == {"job": js, "attempt": 3, "rank": -1}, "kill of the failed job %r" % k)

    # cancel kills all: the third job's ranks on n3 and n4
    started(sh, "a3", jt, 1, [0])
    started(sh, "a4", jt, 1, [1])
    wait_state(d, jt, "running")
    d.json("POST", "/v1/jobs/%s/cancel" % jt, expect=200)
    for a in ("a3", "a4"):
        k = sh.expect(a, "KILL", what="cancel's KILL on " + a)
        check(k["job"] == jt, "kill %r" % k)
    wait_state(d, jt, "cancelled")

    # coordinator kill -9 and restart: the agent lists its ranks: kept running
    jr = d.submit(pspec("survives", world_size=2))["id"]
    sp = spawns(sh, "a2", 2, "SPAWN before the crash")
    started(sh, "a2", jr, 1, [0, 1])
    wait_state(d, jr, "running")
    # and a job whose only rank was spawned on n3 but not started yet
    jl = d.submit(pspec("late", world_size=1))["id"]
    sl = sh.expect("a3", "SPAWN", what="the late job's SPAWN")
    d.kill9()
    d.start()
    reg(sh, "a3", "n3", 2, programs=True, ports=[30000, 30002], connect=False)
    again = sh.expect("a3", "SPAWN", what="the late job's rank spawned again after the restart")
    check(again == sl, "the same SPAWN (same MASTER_PORT): %r vs %r" % (again, sl))
    d.json("POST", "/v1/jobs/%s/cancel" % jl, expect=200)
    check(sh.expect("a3", "KILL")["job"] == jl, "cancel of the late job")
    doc = wait_state(d, jr, "running")
    check(doc["attempt"] == 1, "attempt kept %r" % doc)
    reg(sh, "a2", "n2", 4, programs=True, ports=[30000, 30001], connect=False,
        ranks=[{"job": jr, "attempt": 1, "rank": r, "pid": 1000 + r} for r in range(2)])
    sh.silent("a2", 500, "no KILL or SPAWN for the program's live ranks")
    check(wait_state(d, jr, "running")["attempt"] == 1, "still running")
    # the restored attempt still holds its MASTER_PORT (from its program_port event)
    check(any(e["type"] == "program_port" and e["reason"].startswith("MASTER_PORT 30000 on node n2")
              for e in events(d, jr)), "program_port event %r" % events(d, jr))
    ja = d.submit(pspec("after-restart", world_size=2))["id"]
    sa = spawns(sh, "a2", 2, "a second job on n2 after the restart")
    check(all(p["job"] == ja and p["torch"]["master_port"] == 30001 for p in sa), "not jr's port: %r" % sa)
    d.json("POST", "/v1/jobs/%s/cancel" % ja, expect=200)
    check(sh.expect("a2", "KILL")["job"] == ja, "cancel of the second job")
    exited(sh, "a2", jr, 1, 0, 0)
    exited(sh, "a2", jr, 1, 1, 0)
    doc = wait_state(d, jr, "succeeded")
    check(doc["restarts"] == 0, "no restart %r" % doc)

    # ranks_per_node holds for a built-in job too: one rank on n1, one on n2;
    # its SPAWN has no program or torch
    jb = d.submit({"name": "builtin", "data": {"train": "data/tiny/train.bin"},
                   "parallel": {"world_size": 2, "ranks_per_node": 1}})["id"]
    b1 = sh.expect("a1", "SPAWN", what="built-in rank on n1")
    b2 = sh.expect("a2", "SPAWN", what="built-in rank on n2")
    check(b1["job"] == jb and b2["job"] == jb and {b1["rank"], b2["rank"]} == {0, 1}, "spread %r %r" % (b1, b2))
    check("program" not in b1 and "torch" not in b1, "built-in SPAWN unchanged %r" % b1)
    d.json("POST", "/v1/jobs/%s/cancel" % jb, expect=200)
    for a in ("a1", "a2"):
        sh.expect(a, "KILL", what="cancel of the built-in job")

    # a node of a running program stops heartbeating: the gang restarts elsewhere
    jn = d.submit(pspec("node-dies", world_size=2, ranks_per_node=1))["id"]
    n2 = sh.expect("a2", "SPAWN", what="rank 0 on n2")
    n3 = sh.expect("a3", "SPAWN", what="rank 1 on n3")
    check(n2["rank"] == 0 and n3["rank"] == 1, "placed %r %r" % (n2, n3))
    started(sh, "a2", jn, 1, [0])
    started(sh, "a3", jn, 1, [1])
    wait_state(d, jn, "running")
    sh.beat("a3", "n3", 0)
    k = sh.expect("a2", "KILL", timeout_ms=8000, what="KILL of rank 0 when n3 dies")
    check(k == {"job": jn, "attempt": 1, "rank": 0}, "kill %r" % k)
    doc = wait_state(d, jn, "recovering")
    check("n3" in doc["state_reason"], "cause names the node %r" % doc)
    exited(sh, "a2", jn, 1, 0, -1, 15)
    r0 = sh.expect("a2", "SPAWN", what="attempt 2 rank 0 on n2")
    r1 = sh.expect("a4", "SPAWN", what="attempt 2 rank 1 on n4")
    check(r0["attempt"] == 2 and r1["attempt"] == 2 and r1["torch"]["restart_count"] == 1 and
          r1["torch"]["group_rank"] == 1, "the gang again, on n2 and n4: %r %r" % (r0, r1))


if __name__ == "__main__":
    run(main)
