"""Enrollment through the real binaries (issue 22, part C): an agent started
with a join token makes its key pair (agent.key 0600), enrolls, registers
and runs a 2-rank job over CURVE; restarted without the token it comes back
with its enrolled key; its ranks get the key folder's path, never a key, on
their command line; an agent given a used token says so and exits (with
another token live: "already used"; with none: the coordinator refused its
key); `ringctl worker keys` lists the enrolled key; after `ringctl worker
revoke` the node is dropped and cannot register again."""
import os
import stat
import subprocess
import time

from cluster import Agent, check, log, rank_processes, run, tiny_spec, wait_no_ranks, wait_workers


def agent_with(cluster, node, token):
    state = os.path.join(cluster.workdir, "agent-state-%s" % node)
    return Agent(cluster.bins["ringworker"], cluster.workdir, cluster.daemon.endpoint, node, "cpu:1",
                 cluster.data_root, ["--state-dir", state, "--join-token", token])


def wait_exit(agent, timeout=30):
    try:
        agent.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        check(False, "agent %s still runs with a used token:\n%s" % (agent.node, agent.logtext()))
    return agent.proc.returncode


def ctl(cluster, *args):
    return subprocess.run([cluster.bins["ringctl"], "--server", cluster.daemon.url] + list(args),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30, text=True,
                          env=cluster.daemon.ctl_env())


def main(cluster, _args):
    d = cluster.start_daemon(["--heartbeat-ms", "200"])
    # the enrollment of n1 uses its one-time token
    a1 = cluster.start_agent("n1", "cpu:2")  # cluster.py gets it a join token
    wait_workers(d, ["n1"])
    state = os.path.join(cluster.workdir, "agent-state-n1")
    mode = stat.S_IMODE(os.stat(os.path.join(state, "agent.key")).st_mode)
    check(mode == 0o600, "agent.key mode %o" % mode)
    check(os.path.exists(os.path.join(state, "enrolled")), "enrolled recorded")
    token = [a for a in a1.args if a.startswith("rmj_")][0]

    jid = d.submit(tiny_spec("enrolled", 2, 4, 100000))["id"]
    deadline = time.time() + 60
    while time.time() < deadline and len(rank_processes(jid)) < 2:
        time.sleep(0.05)
    pids = rank_processes(jid)
    check(len(pids) == 2, "2 rank processes, got %r" % pids)
    with open(os.path.join(state, "agent.key")) as f:
        secret = f.read().split()[1]
    for pid in pids:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            argv = f.read().decode("utf-8", "replace")
        check(secret not in argv and "rmj_" not in argv, "rank %d's command line holds a secret" % pid)
    deadline = time.time() + 60
    while time.time() < deadline and not d.losses(jid):
        time.sleep(0.1)
    check(d.losses(jid), "metrics arrive over CURVE")
    d.json("POST", "/v1/jobs/%s/cancel" % jid)
    wait_no_ranks(jid, 30)
    log("job %s trained over CURVE (ranks with their agent's key)" % jid)

    # restarted without the token: it comes back with its key
    a1.stop()
    a1.args = [a for a in a1.args if a != "--join-token" and a != token]
    a1.start()
    deadline = time.time() + 30
    while time.time() < deadline and a1.logtext(1000000).count("registered with") < 2:
        time.sleep(0.1)
    check(a1.logtext(1000000).count("registered with") == 2, "n1 registers again without its token")

    # the used token: refused, and the agent says so
    live = d.json("POST", "/v1/workers/join-tokens", {}, expect=201)["token"]
    a2 = agent_with(cluster, "n2", token).start()
    cluster.agents.append(a2)
    rc = wait_exit(a2)
    check(rc != 0 and "already used" in a2.logtext(), "used token, another live: rc %s %r" % (rc, a2.logtext()))
    a3 = agent_with(cluster, "n3", live).start()  # spends the live token
    cluster.agents.append(a3)
    wait_workers(d, ["n1", "n3"])
    # no token live at all: the coordinator refuses the key at the handshake
    a4 = agent_with(cluster, "n4", live).start()
    cluster.agents.append(a4)
    rc = wait_exit(a4, 60)
    check(rc != 0 and "refused this key" in a4.logtext(), "no token live: rc %s %r" % (rc, a4.logtext()))
    check("refused key" in d.logtext(100000), "the coordinator logs the refusal")

    # ringctl worker keys / revoke
    out = ctl(cluster, "worker", "keys")
    check(out.returncode == 0 and " n1 " in out.stdout and " n3 " in out.stdout, "keys: %r" % out.stdout)
    keys = {k["node"]: k for k in d.json("GET", "/v1/workers/keys")["keys"]}
    out = ctl(cluster, "worker", "revoke", str(keys["n3"]["id"]))
    check(out.returncode == 0, "revoke: %r %r" % (out.stdout, out.stderr))
    deadline = time.time() + 10
    while time.time() < deadline:
        ws = {w["node"]: w for w in d.workers()}
        if ws["n3"]["state"] == "dead":
            break
        time.sleep(0.1)
    check(ws["n3"]["state"] == "dead", "revoked n3: %r" % ws["n3"])
    time.sleep(2)  # its reconnects are refused: it stays dead
    ws = {w["node"]: w for w in d.workers()}
    check(ws["n3"]["state"] == "dead" and ws["n1"]["state"] == "alive", "after revoke: %r" % ws)


if __name__ == "__main__":
    run(main)
