"""The authenticated worker channel (issue 22, part C), against the real
ringmasterd with fake agents and ranks that speak CurveZMQ (wire_shell's
`curve` sockets): the broker key pair is made at first start (broker.key
0600); a peer without an enrolled key cannot register (the ZAP handler
refuses it, the log says so, once per key per minute); a join token enrolls
a key once (a used or unknown token is refused); a key speaks for one node;
an enrolled agent cannot report for another agent's rank or another job
(refused, logged, job unchanged); a forged SNAPSHOT_COMMITTED path is not
stored (the coordinator derives the path); another key cannot take a live
agent or rank identity over (no ROUTER handover with keys), and a rank
identity spoken by another key once its connection is gone fails the
attempt (the silenced rank is noticed); a revoked key is
dropped and refused; --broker-auth off is refused on a non-loopback
endpoint."""
import json
import os
import stat
import subprocess
import time

from rmtest import Daemon, check, free_port, run
from wireshell import Shell, cpus, spec, wait_state


def main(binary, workdir, daemons, shell_bin):
    endpoint = "tcp://127.0.0.1:%d" % free_port()
    d = Daemon(binary, workdir, extra_args=["--heartbeat-ms", "200", "--heartbeat-misses", "5",
                                            "--broker", endpoint])
    daemons.append(d)
    d.start()
    sh = Shell(shell_bin, endpoint)
    try:
        scenario(d, sh)
    finally:
        sh.quit()
    check(d.stop() == 0, "clean stop")
    refuse_off_outside_loopback(binary, workdir)


def wait_log(d, text, timeout=5):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if text in full_log(d):
            return
        time.sleep(0.05)
    check(False, "the log does not say %r:\n%s" % (text, d.logtext()[-3000:]))


def full_log(d):
    with open(d.log_path, "rb") as f:
        return f.read().decode("utf-8", "replace")


def sh_bin(sh):
    return sh.proc.args[0]


def send_refused(sh, name, type_, payload):
    """Send on a socket whose handshake the broker may refuse: the send
    succeeds (queued) or times out (no connection), never more."""
    out = sh.cmd("send %s %s %s" % (name, type_, json.dumps(payload)))
    check(out in ("OK", "ERR send failed"), "send on %s: %s" % (name, out))


def workers(d):
    return {w["node"]: w for w in d.json("GET", "/v1/workers", expect=200)[2]["workers"]}


def scenario(d, sh):
    folder = os.path.dirname(d.db)
    key_mode = stat.S_IMODE(os.stat(os.path.join(folder, "broker.key")).st_mode)
    check(key_mode == 0o600, "broker.key mode %o" % key_mode)
    with open(os.path.join(folder, "broker.pub")) as f:
        broker = f.read().strip()
    check(len(broker) == 40, "broker.pub %r" % broker)

    # 1. no enrolled key, no live join token: refused at the handshake
    x_pub, x_sec = sh.keypair()
    sh.curve_dealer("x", "agent/x", broker, x_pub, x_sec)
    send_refused(sh, "x", "REGISTER", {"node": "x", "devices": cpus(4096), "ranks": []})
    sh.silent("x", 1500, "REGISTER with an unknown key")
    wait_log(d, "refused key %s" % x_pub)
    check(full_log(d).count("refused key %s" % x_pub) == 1, "one refusal line per key per minute")
    sh.dealer("p", "agent/p")  # no CURVE at all
    send_refused(sh, "p", "REGISTER", {"node": "p", "devices": cpus(1), "ranks": []})
    sh.silent("p", 800, "REGISTER without CURVE")
    check(workers(d) == {}, "nobody registered: %r" % workers(d))

    # a peer making a new key per connection cannot flood the log: at
    # most 60 lines a minute for unknown keys in all
    sh2 = Shell(sh_bin(sh), sh.endpoint)
    try:
        fresh = []
        for i in range(62):
            pub, sec = sh2.keypair()
            sh2.curve_dealer("k%d" % i, "agent/flood%d" % i, broker, pub, sec)
            fresh.append(pub)
        sh2.sleep(1500)
    finally:
        sh2.quit()
    text = full_log(d)
    logged = sum(1 for pub in fresh if "refused key %s" % pub in text)
    check(0 < logged < 62, "refusals of 62 new keys logged %d times (cap: 60 lines a minute)" % logged)

    # 2. enrollment: a join token enrolls one key, once
    st, _, err = d.json("POST", "/v1/workers/join-tokens", {"uses": 0})
    check(st == 400 and err["pointer"] == "/uses" if "pointer" in err else st == 400, "uses 0: %s %r" % (st, err))
    tok = d.json("POST", "/v1/workers/join-tokens", {"uses": 1, "expires_in_s": 600}, expect=201)[2]
    check(tok["token"].startswith("rmj_") and tok["uses"] == 1 and tok["broker_public_key"] == broker,
          "join token %r" % {k: v for k, v in tok.items() if k != "token"})
    e_pub, e_sec = sh.keypair()
    sh.curve_dealer("e", "enroll/n1", broker, e_pub, e_sec)
    sh.send("e", "ENROLL", {"node": "n1", "token": tok["token"]})
    enrolled = sh.expect("e", "ENROLLED", what="ENROLL with a fresh token")
    check(enrolled["node"] == "n1" and enrolled["key_id"] > 0, "ENROLLED %r" % enrolled)
    check(tok["token"] not in full_log(d), "the token is never logged")
    # the same token again (another token is live, so the key may ENROLL)
    d.json("POST", "/v1/workers/join-tokens", {}, expect=201)
    f_pub, f_sec = sh.keypair()
    sh.curve_dealer("f", "enroll/n9", broker, f_pub, f_sec)
    sh.send("f", "ENROLL", {"node": "n9", "token": tok["token"]})
    e = sh.expect("f", "ERROR", what="ENROLL with a used token")
    check(e["code"] == 403 and "already used" in e["detail"], "used token: %r" % e)
    sh.send("f", "ENROLL", {"node": "n9", "token": "rmj_" + "0" * 64 + "x" * 43})
    e = sh.expect("f", "ERROR", what="ENROLL with an unknown token")
    check(e["code"] == 403 and "unknown" in e["detail"], "unknown token: %r" % e)
    sh.send("f", "REGISTER", {"node": "n9", "devices": cpus(8), "ranks": []})
    e = sh.expect("f", "ERROR", what="REGISTER from a pending key")
    check(e["code"] == 401, "pending key REGISTER: %r" % e)
    check("n9" not in workers(d), "a pending key registers nothing")

    # 3. agents: n1 with its enrolled key, n2 with a key an admin added
    sh.curve_dealer("a1", "agent/n1", broker, e_pub, e_sec)
    sh.send("a1", "REGISTER", {"node": "n1", "devices": cpus(1), "ranks": [], "checkpoint_root": "/ck/n1"})
    sh.expect("a1", "REGISTERED", what="REGISTER of the enrolled n1")
    sh.beat("a1", "n1", 100)
    g_pub, g_sec = sh.keypair()
    st, _, err = d.json("POST", "/v1/workers/keys", {"name": "n2", "public_key": "short"})
    check(st == 400 and "public_key" in err["detail"], "bad public key: %s %r" % (st, err))
    g = d.json("POST", "/v1/workers/keys", {"name": "n2", "public_key": g_pub}, expect=201)[2]
    check(g["node"] == "n2" and g["revoked_at_us"] is None, "added key %r" % g)
    sh.curve_dealer("a2", "agent/n2", broker, g_pub, g_sec)
    sh.send("a2", "REGISTER", {"node": "n2", "devices": cpus(1), "ranks": [], "checkpoint_root": "/ck/n2"})
    sh.expect("a2", "REGISTERED", what="REGISTER of the admin-added n2")
    sh.beat("a2", "n2", 100)
    ws = workers(d)
    check(ws["n1"]["key"]["id"] == enrolled["key_id"] and ws["n2"]["key"]["id"] == g["id"], "keys %r" % ws)
    # n2's key claiming n1: refused (and n1 keeps its registration)
    sh.curve_dealer("a2x", "agent/n1x", broker, g_pub, g_sec)
    sh.send("a2x", "REGISTER", {"node": "n1x", "devices": cpus(8), "ranks": []})
    e = sh.expect("a2x", "ERROR", what="a key registering another node")
    check(e["code"] == 403 and "enrolled for node n2" in e["detail"], "key for another node: %r" % e)
    check("n1x" not in workers(d), "no second node for a key")

    # 4. a job across both; each rank speaks with its agent's key
    jid = d.submit(spec("auth", world_size=2))["id"]
    placed = {}
    for name, pub, sec in (("a1", e_pub, e_sec), ("a2", g_pub, g_sec)):
        sp = sh.expect(name, "SPAWN", what="SPAWN on %s" % name)
        placed[sp["rank"]] = (name, pub, sec)
    for r, (name, pub, sec) in placed.items():
        sh.curve_dealer("r%d" % r, "rank/%s/1/%d" % (jid, r), broker, pub, sec)
        sh.send("r%d" % r, "JOIN", {"job": jid, "attempt": 1, "rank": r})
        sh.expect("r%d" % r, "JOINED")
    wait_state(d, jid, "running")
    on_a1 = [r for r, v in placed.items() if v[0] == "a1"][0]
    on_a2 = 1 - on_a1
    # n2 reports for n1's rank, for a job that is not there, and logs for it
    sh.send("a2", "RANK_EXITED", {"job": jid, "attempt": 1, "rank": on_a1, "exit_code": 1, "signal": 0,
                                  "error": "forged"})
    e = sh.expect("a2", "ERROR", what="RANK_EXITED for another agent's rank")
    check(e["code"] == 403, "forged RANK_EXITED: %r" % e)
    sh.send("a2", "RANK_EXITED", {"job": "j-aaaaaaaaaaaaaaaaaaaa", "attempt": 1, "rank": 0, "exit_code": 1,
                                  "signal": 0, "error": "forged"})
    check(sh.expect("a2", "ERROR")["code"] == 403, "RANK_EXITED for another job")
    sh.send("a2", "LOGS", {"job": jid, "attempt": 1, "rank": on_a1, "dropped": 0,
                           "lines": [{"stream": "stdout", "time_us": 1, "text": "forged line"}]})
    check(sh.expect("a2", "ERROR")["code"] == 403, "LOGS for another agent's rank")
    wait_log(d, "refused RANK_EXITED from agent n2 about rank %d" % on_a1)
    sh.sleep(300)
    doc = d.json("GET", "/v1/jobs/" + jid, expect=200)[2]
    check(doc["state"] == "running", "forged reports change nothing: %s %r" % (doc["state"], doc.get("state_reason")))
    logs = d.json("GET", "/v1/jobs/%s/logs" % jid, expect=200)[2]
    check("forged line" not in str(logs), "forged log line stored")

    # a forged snapshot folder is not stored; the derived one is
    r0_node = "n1" if placed[0][0] == "a1" else "n2"
    for r in (0, 1):
        sh.send("r%d" % r, "SNAPSHOT_WRITTEN", {"step": 10, "file": "rank-%d-of-2.safetensors" % r,
                                               "bytes": 100, "xxh3": "%016x" % (r + 1)})
    sh.expect("r0", "SNAPSHOT_COMMIT", what="commit of step 10")
    sh.send("r0", "SNAPSHOT_COMMITTED", {"step": 10, "bytes": 200, "path": "/etc", "deleted": []})
    e = sh.expect("r0", "ERROR", what="SNAPSHOT_COMMITTED with /etc")
    check(e["code"] == 400, "forged path: %r" % e)
    cps = d.json("GET", "/v1/jobs/%s/checkpoints" % jid, expect=200)[2]["checkpoints"]
    check(cps == [], "forged path stored: %r" % cps)
    wait_log(d, "path /etc is not")
    good = "/ck/%s/%s/step-00000010" % (r0_node, jid)
    sh.send("r0", "SNAPSHOT_COMMITTED", {"step": 10, "bytes": 200, "path": good, "deleted": []})
    deadline = time.time() + 5
    while time.time() < deadline and not cps:
        cps = d.json("GET", "/v1/jobs/%s/checkpoints" % jid, expect=200)[2]["checkpoints"]
        time.sleep(0.05)
    check([c["path"] for c in cps] == [good], "derived path %r" % cps)

    # n2's key speaking as n1 or as n1's rank: the broker hands no live
    # identity to another connection (no ROUTER handover with keys), so
    # nothing arrives and nobody is displaced
    sh.curve_dealer("evil_a", "agent/n1", broker, g_pub, g_sec)
    send_refused(sh, "evil_a", "REGISTER", {"node": "n1", "devices": cpus(64), "ranks": []})
    sh.curve_dealer("evil", "rank/%s/1/%d" % (jid, on_a1), broker, g_pub, g_sec)
    send_refused(sh, "evil", "DONE", {"step": 10, "loss": 0.1})
    sh.silent("evil", 1500, "DONE on a live rank's identity from another key")
    doc = d.json("GET", "/v1/jobs/" + jid, expect=200)[2]
    check(doc["state"] == "running", "identity takeover: %s %r" % (doc["state"], doc.get("state_reason")))
    check(workers(d)["n1"]["state"] == "alive" and workers(d)["n1"]["devices"] == cpus(1),
          "n1 undisturbed: %r" % workers(d)["n1"])
    sh.send("r%d" % on_a1, "KV_SET", {"key": "still-here", "value": "AAEC"})
    sh.expect("r%d" % on_a1, "KV_OK", what="the real rank is still heard")
    sh.close("evil")
    sh.close("evil_a")
    # once the real rank's connection is gone, another key speaking on its
    # identity is refused, and the rank nobody hears any more fails its
    # attempt (a rank death) instead of leaving the job running forever
    sh.close("r%d" % on_a1)
    sh.sleep(300)
    sh.curve_dealer("evil2", "rank/%s/1/%d" % (jid, on_a1), broker, g_pub, g_sec)
    sh.send("evil2", "DONE", {"step": 10, "loss": 0.1})
    e = sh.expect("evil2", "ERROR", what="DONE from another key on a free rank identity")
    check(e["code"] == 403, "forged DONE: %r" % e)
    wait_log(d, "refused DONE on identity rank/%s/1/%d" % (jid, on_a1))
    deadline = time.time() + 5
    while time.time() < deadline:
        doc = d.json("GET", "/v1/jobs/" + jid, expect=200)[2]
        if "taken over" in (doc.get("state_reason") or ""):
            break
        time.sleep(0.05)
    check(doc["state"] != "succeeded" and "taken over" in (doc.get("state_reason") or ""),
          "the silenced rank is noticed: %s %r" % (doc["state"], doc.get("state_reason")))
    sh.close("evil2")

    # 5. revocation: n2 is dropped and refused at its next handshake
    st, _, _ = d.json("POST", "/v1/workers/keys/%d/revoke" % g["id"])
    check(st == 200, "revoke status %s" % st)
    deadline = time.time() + 5
    while time.time() < deadline and workers(d)["n2"]["state"] != "dead":
        time.sleep(0.05)
    check(workers(d)["n2"]["state"] == "dead", "revoked agent dropped: %r" % workers(d)["n2"])
    st, _, _ = d.json("POST", "/v1/workers/keys/%d/revoke" % g["id"])
    check(st == 409, "second revoke: %s" % st)
    sh.beat("a2", "n2", 0)
    sh.close("a2")
    sh.curve_dealer("a2b", "agent/n2", broker, g_pub, g_sec)
    send_refused(sh, "a2b", "REGISTER", {"node": "n2", "devices": cpus(1), "ranks": []})
    sh.silent("a2b", 1000, "REGISTER with a revoked key")
    wait_log(d, "revoked")
    check(workers(d)["n2"]["state"] == "dead", "revoked key cannot register again")
    keys = {k["id"]: k for k in d.json("GET", "/v1/workers/keys", expect=200)[2]["keys"]}
    check(keys[g["id"]]["revoked_at_us"] and keys[enrolled["key_id"]]["node"] == "n1", "keys %r" % keys)
    check(all("token" not in k for k in keys.values()), "no secrets in the key list")


def refuse_off_outside_loopback(binary, workdir):
    args = [binary, "--listen", "127.0.0.1:%d" % free_port(), "--broker", "tcp://0.0.0.0:%d" % free_port(),
            "--db", os.path.join(workdir, "off", "rm.db"), "--broker-auth", "off"]
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=20)
    out = p.stdout.decode()
    check(p.returncode != 0 and "--broker-auth off" in out and "--insecure" in out,
          "--broker-auth off on 0.0.0.0: rc %s %r" % (p.returncode, out[-500:]))


if __name__ == "__main__":
    run(main)
