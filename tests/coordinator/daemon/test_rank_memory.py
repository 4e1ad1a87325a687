"""Per-rank memory over the wire, against the real ringmasterd: rank 0's
METRICS rows carry its memory, rank 1 sends one memory-only METRICS (step +
the four *_bytes fields). GET /v1/jobs/{id} shows every rank's memory, the
Prometheus page has ringmaster_rank_memory_bytes per rank and kind, rank 1's
message stores no metrics row, malformed memory fields get ERROR 400, and
`ringctl show` prints the ranks' memory. wire_shell.c plays the agent and the
ranks over real DEALER sockets."""
import subprocess
import time

from rmtest import Daemon, check, run
from wireshell import Shell, cpus, register, spec, wait_state

MEM0 = {"params_bytes": 497664, "grads_bytes": 995328, "optim_bytes": 995328, "activations_bytes": 1 << 20}
MEM1 = {"params_bytes": 497664, "grads_bytes": 746496, "optim_bytes": 497664, "activations_bytes": 1 << 20}


def main(binary, workdir, daemons, shell_bin, ringctl):
    d = Daemon(binary, workdir, extra_args=["--broker-auth", "off", "--heartbeat-ms", "200", "--heartbeat-misses", "5"])
    daemons.append(d)
    d.start()
    sh = Shell(shell_bin, "tcp://127.0.0.1:%d" % d.broker_port)
    try:
        scenario(d, sh, ringctl)
    finally:
        sh.quit()
    check(d.stop() == 0, "clean stop")


def wait_for(what, fn, timeout=5):
    deadline = time.time() + timeout
    while True:
        v = fn()
        if v or time.time() > deadline:
            check(v, "%s within %ss" % (what, timeout))
            return v
        time.sleep(0.05)


def scenario(d, sh, ringctl):
    register(sh, "a1", "n1", cpus(2), beat_ms=150)
    jid = d.submit(spec("mem", world_size=2))["id"]
    for _ in range(2):
        sh.expect("a1", "SPAWN")
    # placed: the job shows its ranks, memory not yet known
    _, _, doc = d.json("GET", "/v1/jobs/" + jid, expect=200)
    check([(r["rank"], r["node"], r["device"], r["state"], r["memory"]) for r in doc["ranks"]] ==
          [(0, "n1", {"kind": "cpu", "index": 0}, "placed", None),
           (1, "n1", {"kind": "cpu", "index": 1}, "placed", None)], "ranks before memory %r" % doc["ranks"])
    for r in range(2):
        sh.dealer("r%d" % r, "rank/%s/1/%d" % (jid, r))
        sh.send("r%d" % r, "JOIN", {"job": jid, "attempt": 1, "rank": r})
        sh.expect("r%d" % r, "JOINED")
    wait_state(d, jid, "running")

    # rank 1: one memory-only METRICS at its first step; rank 0: rows with memory
    sh.send("r1", "METRICS", dict(MEM1, step=1))
    for step in (1, 2):
        sh.send("r0", "METRICS", dict(MEM0, step=step, loss=3.0 - step, lr=1e-3, grad_norm=1.0,
                                      tokens_per_s=100.0, ms=10.0))

    def both_known():
        _, _, job = d.json("GET", "/v1/jobs/" + jid, expect=200)
        return job if all(r["memory"] is not None for r in job["ranks"]) else None
    job = wait_for("both ranks' memory", both_known)
    check([r["memory"] for r in job["ranks"]] == [MEM0, MEM1], "memory %r" % job["ranks"])
    check([r["state"] for r in job["ranks"]] == ["joined", "joined"], "states %r" % job["ranks"])

    # ringctl show: a table of the ranks with their memory, in binary units
    out = subprocess.run([ringctl, "--server", "http://127.0.0.1:%d" % d.port, "show", jid],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30, env=d.ctl_env())
    text = out.stdout.decode()
    check(out.returncode == 0, "ringctl show: %s %s" % (out.returncode, out.stderr.decode()))
    lines = text.splitlines()
    check("ranks:" in lines, "no ranks table in\n" + text)
    head = lines.index("ranks:") + 1
    check(lines[head].split() == ["RANK", "NODE", "DEVICE", "STATE", "PARAMS", "GRADS", "OPTIMIZER", "ACTIVATIONS"],
          "ranks header %r" % lines[head])
    check(lines[head + 1].split() == ["0", "n1", "cpu:0", "joined", "486.0", "KiB", "972.0", "KiB", "972.0", "KiB",
                                      "1.0", "MiB"], "rank 0 row %r" % lines[head + 1])
    check(lines[head + 2].split()[:4] == ["1", "n1", "cpu:1", "joined"] and "729.0 KiB" in lines[head + 2],
          "rank 1 row %r" % lines[head + 2])

    # rank 1's message stored no metrics row: only rank 0's two steps
    _, _, m = d.json("GET", "/v1/jobs/%s/metrics" % jid, expect=200)
    check([(r["step"], r["loss"]) for r in m["metrics"]] == [(1, 2.0), (2, 1.0)], "metrics rows %r" % m)

    # Prometheus: one gauge per rank and kind, with HELP and TYPE
    _, _, body = d.request("GET", "/metrics")
    text = body.decode()
    check("# HELP ringmaster_rank_memory_bytes " in text and
          "# TYPE ringmaster_rank_memory_bytes gauge\n" in text, "HELP/TYPE:\n%s" % text[-2000:])
    for rank, mem in ((0, MEM0), (1, MEM1)):
        for kind, key in (("params", "params_bytes"), ("grads", "grads_bytes"), ("optimizer", "optim_bytes"),
                          ("activations", "activations_bytes")):
            line = 'ringmaster_rank_memory_bytes{job="%s",rank="%d",kind="%s"} %d\n' % (jid, rank, kind, mem[key])
            check(line in text, "missing %r in\n%s" % (line, text[-2000:]))
    check(text.count("# TYPE ringmaster_rank_memory_bytes") == 1, "one TYPE line")

    # a changed figure replaces the old one
    sh.send("r1", "METRICS", dict(MEM1, step=3, activations_bytes=7))
    wait_for("rank 1's new memory",
             lambda: d.json("GET", "/v1/jobs/" + jid, expect=200)[2]["ranks"][1]["memory"]["activations_bytes"] == 7)

    # malformed memory fields: ERROR 400 naming the field, nothing stored
    for bad, field in (({"step": 4, "params_bytes": -1, "grads_bytes": 0, "optim_bytes": 0,
                         "activations_bytes": 0}, "params_bytes"),
                       ({"step": 4, "params_bytes": 1.5, "grads_bytes": 0, "optim_bytes": 0,
                         "activations_bytes": 0}, "params_bytes"),
                       ({"step": 4, "params_bytes": 1, "grads_bytes": 1, "optim_bytes": 1}, "activations_bytes"),
                       ({"step": 4}, "params_bytes")):
        sh.send("r1", "METRICS", bad)
        e = sh.expect("r1", "ERROR", what="bad METRICS %r" % bad)
        check(e["code"] == 400 and field in e["detail"], "ERROR for %r: %r" % (bad, e))
    _, _, job = d.json("GET", "/v1/jobs/" + jid, expect=200)
    check(job["ranks"][1]["memory"] == dict(MEM1, activations_bytes=7), "memory after bad input %r" % job["ranks"])

    # a finished job leaves the gauges; GET still shows what its ranks held
    for r in range(2):
        sh.send("r%d" % r, "DONE", {"step": 3, "loss": 1.0})
    wait_state(d, jid, "succeeded")
    _, _, body = d.request("GET", "/metrics")
    check("ringmaster_rank_memory_bytes{job=\"%s\"" % jid not in body.decode(), "finished job still has memory gauges")
    _, _, job = d.json("GET", "/v1/jobs/" + jid, expect=200)
    check(job["ranks"][0]["memory"] == MEM0 and job["ranks"][0]["state"] == "done", "after done %r" % job["ranks"])


if __name__ == "__main__":
    run(main)
