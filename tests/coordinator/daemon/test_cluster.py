"""The workers' protocol end to end at the wire level, against the real
ringmasterd: an agent registers and heartbeats, a job is placed on it as
SPAWNs, its ranks JOIN (scheduled -> running), rendezvous through the KV
store (set, get, a parked get woken by a set, a get that times out), report
METRICS (stored for rank 0, served by GET /v1/jobs/{id}/metrics and
/metrics), and finish with DONE (succeeded). wire_shell.c plays the agent and
the ranks over real DEALER sockets."""
import time

from rmtest import Daemon, check, problem_of, run
from wireshell import Shell, cpus, events, register, spec, wait_state


def main(binary, workdir, daemons, shell_bin):
    d = Daemon(binary, workdir, extra_args=["--broker-auth", "off", "--heartbeat-ms", "200", "--heartbeat-misses", "5",
                                            "--metrics-every", "5"])
    daemons.append(d)
    d.start()
    sh = Shell(shell_bin, "tcp://127.0.0.1:%d" % d.broker_port)
    try:
        scenario(d, sh)
    finally:
        sh.quit()
    check(d.stop() == 0, "clean stop")


def scenario(d, sh):
    reg = register(sh, "a1", "n1", cpus(2), beat_ms=150)
    check(reg == {"heartbeat_ms": 200, "dead_after": 5}, "REGISTERED %r" % reg)
    # the coordinator heartbeats the agent too
    t, hb = sh.recv("a1", 2000, "HEARTBEAT")
    check(t == "HEARTBEAT" and hb == {"node": "n1"}, "coordinator HEARTBEAT %r" % hb)

    _, _, doc = d.json("GET", "/v1/workers", expect=200)
    ws = doc["workers"]
    check(len(ws) == 1 and ws[0]["node"] == "n1" and ws[0]["state"] == "alive", "workers %r" % ws)
    check(ws[0]["devices"] == cpus(2) and ws[0]["running_ranks"] == 0 and ws[0]["ranks"] == [],
          "worker devices %r" % ws[0])
    check(isinstance(ws[0]["last_heartbeat"], str) and ws[0]["last_heartbeat"].endswith("Z"),
          "last_heartbeat %r" % ws[0]["last_heartbeat"])

    # a job of two ranks: both SPAWNed on n1's two cpus
    job = d.submit(spec("pair", world_size=2))
    jid = job["id"]
    spawns = [sh.expect("a1", "SPAWN", what="placement") for _ in range(2)]
    spawns.sort(key=lambda p: p["rank"])
    for r, p in enumerate(spawns):
        check(p == {"job": jid, "attempt": 1, "rank": r, "world_size": 2,
                    "device": {"kind": "cpu", "index": r}}, "SPAWN %r" % p)
    doc = wait_state(d, jid, "scheduled")
    check(doc["attempt"] == 1, "attempt %r" % doc["attempt"])
    check("n1" in doc["state_reason"] and "placed 2 rank(s) on 1 node(s)" in doc["state_reason"],
          "placement reason %r" % doc["state_reason"])
    _, _, doc = d.json("GET", "/v1/workers", expect=200)
    w = doc["workers"][0]
    check(w["running_ranks"] == 2 and [r["rank"] for r in w["ranks"]] == [0, 1] and
          w["ranks"][0]["job"] == jid and w["ranks"][0]["device"] == {"kind": "cpu", "index": 0},
          "worker ranks %r" % w)

    # ranks join: JOINED with the spec; running once both have joined
    for r in range(2):
        sh.dealer("r%d" % r, "rank/%s/1/%d" % (jid, r))
    sh.send("r0", "JOIN", {"job": jid, "attempt": 1, "rank": 0})
    joined = sh.expect("r0", "JOINED")
    check(joined["job"] == jid and joined["attempt"] == 1 and joined["rank"] == 0 and
          joined["world_size"] == 2 and joined["metrics_every"] == 5 and
          joined["spec"]["parallel"]["world_size"] == 2 and joined["spec"]["name"] == "pair",
          "JOINED %r" % joined)
    doc = wait_state(d, jid, "scheduled")
    sh.send("r1", "JOIN", {"job": jid, "attempt": 1, "rank": 1})
    check(sh.expect("r1", "JOINED")["rank"] == 1, "JOINED rank 1")
    doc = wait_state(d, jid, "running")
    check(doc["state_reason"] == "all 2 rank(s) joined", "running reason %r" % doc["state_reason"])
    # a JOIN whose payload does not match the identity is refused
    sh.send("r1", "JOIN", {"job": jid, "attempt": 1, "rank": 0})
    check(sh.expect("r1", "ERROR")["code"] == 400, "mismatched JOIN")

    # KV: a parked get is answered by the set; get-now; a get that times out
    sh.send("r1", "KV_GET", {"key": "nccl_id", "timeout_ms": 5000})
    sh.silent("r1", 200, "parked KV_GET")
    sh.send("r0", "KV_SET", {"key": "nccl_id", "value": "aGVsbG8="})
    check(sh.expect("r0", "KV_OK") == {"key": "nccl_id"}, "KV_OK")
    check(sh.expect("r1", "KV_VALUE") == {"key": "nccl_id", "found": True, "value": "aGVsbG8="},
          "parked KV_GET woken")
    sh.send("r1", "KV_GET", {"key": "nccl_id", "timeout_ms": 0})
    check(sh.expect("r1", "KV_VALUE")["found"] is True, "KV_GET of a set key")
    sh.send("r0", "KV_GET", {"key": "missing", "timeout_ms": 0})
    check(sh.expect("r0", "KV_VALUE") == {"key": "missing", "found": False, "value": ""}, "KV_GET now")
    t0 = time.time()
    sh.send("r0", "KV_GET", {"key": "missing", "timeout_ms": 400})
    v = sh.expect("r0", "KV_VALUE", 3000)
    took = time.time() - t0
    check(v["found"] is False and 0.35 <= took <= 2.0, "KV_GET timeout: %r after %.3f s" % (v, took))
    sh.send("r0", "KV_GET", {"key": "k", "timeout_ms": -1})
    check(sh.expect("r0", "ERROR")["code"] == 400, "negative timeout")
    # overwriting a key: the newest value wins
    sh.send("r0", "KV_SET", {"key": "nccl_id", "value": "d29ybGQ="})
    sh.expect("r0", "KV_OK")
    sh.send("r1", "KV_GET", {"key": "nccl_id", "timeout_ms": 0})
    check(sh.expect("r1", "KV_VALUE")["value"] == "d29ybGQ=", "KV overwrite")

    # METRICS: rank 0's rows are stored, rank 1's are not
    for step in range(1, 11):
        m = {"step": step, "loss": 5.0 - 0.25 * step, "lr": 6e-4, "grad_norm": 1.25,
             "tokens_per_s": 1000.0 + step, "ms": 20.5}
        if step == 5:
            m["val_loss"] = 4.0
        sh.send("r0", "METRICS", m)
        sh.send("r1", "METRICS", dict(m, loss=99.0))
    deadline = time.time() + 5
    while time.time() < deadline:
        _, _, doc = d.json("GET", "/v1/jobs/%s/metrics" % jid, expect=200)
        if len(doc["metrics"]) >= 10:
            break
        time.sleep(0.05)
    rows = doc["metrics"]
    check([r["step"] for r in rows] == list(range(1, 11)), "metrics steps %r" % [r["step"] for r in rows])
    check(all(r["loss"] != 99.0 for r in rows), "rank 1's metrics were stored")
    check(rows[0]["loss"] == 4.75 and rows[0]["lr"] == 6e-4 and rows[0]["grad_norm"] == 1.25 and
          rows[0]["tokens_per_s"] == 1001.0 and rows[0]["ms"] == 20.5 and rows[0]["val_loss"] is None and
          rows[0]["attempt"] == 1 and rows[0]["time"].endswith("Z"), "row %r" % rows[0])
    check(rows[4]["val_loss"] == 4.0, "val_loss %r" % rows[4])
    check(doc["next_since_step"] is None, "one page")
    _, _, doc = d.json("GET", "/v1/jobs/%s/metrics?since_step=5&limit=3" % jid, expect=200)
    check([r["step"] for r in doc["metrics"]] == [5, 6, 7] and doc["next_since_step"] == 8, "page %r" % doc)
    for q, name in (("since_step=x", "since_step"), ("limit=0", "limit"), ("limit=10001", "limit"),
                    ("since_step=-3", "since_step")):
        st, h, body = d.request("GET", "/v1/jobs/%s/metrics?%s" % (jid, q))
        check(st == 400 and problem_of(h, body, 400).get("pointer") == name, "%s: %s %r" % (q, st, body))
    st, h, body = d.request("GET", "/v1/jobs/%s/metrics?step=1" % jid)
    check(st == 400 and "step" in problem_of(h, body, 400)["detail"], "unknown parameter: %r" % body)
    st, h, body = d.request("GET", "/v1/jobs/j-aaaaaaaaaaaaaaaaaaaa/metrics")
    check(st == 404, "metrics of an unknown job: %s" % st)
    st, _, body = d.request("GET", "/metrics")
    text = body.decode()
    check(st == 200 and 'ringmaster_job_step{job="%s"} 10\n' % jid in text, "job step gauge:\n%s" % text[-1500:])
    check('ringmaster_job_loss{job="%s"} 2.5\n' % jid in text, "job loss gauge")
    check('ringmaster_job_tokens_per_second{job="%s"} 1010\n' % jid in text, "tokens/s gauge")
    check('ringmaster_workers{state="alive"} 1\n' in text and 'ringmaster_workers{state="dead"} 0\n' in text,
          "workers gauge")

    # DONE from every rank: succeeded
    sh.send("r0", "DONE", {"step": 10, "loss": 2.5})
    time.sleep(0.2)
    doc = wait_state(d, jid, "running")
    # rank 1's exit (status 0) overtakes its DONE: the DONE still counts
    sh.send("a1", "RANK_EXITED", {"job": jid, "attempt": 1, "rank": 1, "exit_code": 0, "signal": 0, "error": ""})
    time.sleep(0.3)
    wait_state(d, jid, "running")
    sh.send("r1", "DONE", {"step": 10, "loss": 2.5})
    doc = wait_state(d, jid, "succeeded")
    check(doc["state_reason"].startswith("all 2 rank(s) done at step 10"), "reason %r" % doc["state_reason"])
    evs = [(e["type"], e["from"], e["to"]) for e in events(d, jid)]
    check(evs == [("submitted", None, "queued"), ("state", "queued", "scheduled"),
                  ("state", "scheduled", "running"), ("state", "running", "succeeded")], "events %r" % evs)
    st, _, body = d.request("GET", "/metrics")
    check('ringmaster_job_step{job="%s"}' % jid not in body.decode(), "finished job still has gauges")
    _, _, doc = d.json("GET", "/v1/workers", expect=200)
    check(doc["workers"][0]["running_ranks"] == 0, "ranks still listed %r" % doc["workers"][0])

    # a rank of the finished attempt is told to go; a rank of an unknown job gets 404
    sh.send("r0", "KV_GET", {"key": "nccl_id", "timeout_ms": 0})
    a = sh.expect("r0", "ABORT")
    check(a["job"] == jid and a["attempt"] == 1 and "succeeded" in a["reason"], "ABORT %r" % a)
    sh.dealer("ghost", "rank/j-bbbbbbbbbbbbbbbbbbbb/1/0")
    sh.send("ghost", "JOIN", {"job": "j-bbbbbbbbbbbbbbbbbbbb", "attempt": 1, "rank": 0})
    e = sh.expect("ghost", "ERROR")
    check(e["code"] == 404 and "j-bbbbbbbbbbbbbbbbbbbb" in e["detail"], "unknown job %r" % e)
    # a second job runs on the freed devices: attempt 1 again (a new job), placed at once
    job2 = d.submit(spec("solo", world_size=1))
    p = sh.expect("a1", "SPAWN")
    check(p["job"] == job2["id"] and p["device"] == {"kind": "cpu", "index": 0}, "second SPAWN %r" % p)
    sh.dealer("s0", "rank/%s/1/0" % job2["id"])
    # a JOIN with a stale attempt number (0 is before the first) is told to exit
    sh.dealer("stale", "rank/%s/0/0" % job2["id"])
    sh.send("stale", "JOIN", {"job": job2["id"], "attempt": 0, "rank": 0})
    a = sh.expect("stale", "ABORT")
    check(a["attempt"] == 0 and "stale" in a["reason"], "stale ABORT %r" % a)
    # a rank number past the world size
    sh.dealer("wide", "rank/%s/1/5" % job2["id"])
    sh.send("wide", "JOIN", {"job": job2["id"], "attempt": 1, "rank": 5})
    check(sh.expect("wide", "ERROR")["code"] == 404, "rank out of range")
    sh.send("s0", "JOIN", {"job": job2["id"], "attempt": 1, "rank": 0})
    sh.expect("s0", "JOINED")
    wait_state(d, job2["id"], "running")
    sh.send("s0", "DONE", {"step": 1, "loss": 1.0})
    wait_state(d, job2["id"], "succeeded")
    d.json("GET", "/readyz", expect=200)


if __name__ == "__main__":
    run(main)
