"""Several hosts: three network namespaces joined by a bridge. The coordinator
runs in one (its REST API on that namespace's loopback, its broker on the
bridge address), an agent with cpu:1 in each of the other two, so a 2-rank
job must span both "hosts": its ranks find each other through the addresses
their agents advertise (one given with --advertise, the other found from the
route to the coordinator) and train over Gloo across the bridge.

Needs root and `ip netns`; otherwise it exits 77 (a skip for meson) saying
why. The namespaces are deleted at the end, on failure too.

    ns C: br0 10.231.<n>.1/24  ringmasterd (HTTP 127.0.0.1:18080, broker :15555)
    ns A: veth 10.231.<n>.2    ringworker agent --advertise 10.231.<n>.2
    ns B: veth 10.231.<n>.3    ringworker agent (advertise from the route)
"""
import json
import os
import shutil
import subprocess

from cluster import ADMIN, Daemon, Failure, Skip, check, log, run, tiny_spec, wait_no_ranks, wait_workers

HTTP_PORT = 18080
BROKER_PORT = 15555


def sh(*args, check_rc=True):
    p = subprocess.run(list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
    if check_rc and p.returncode != 0:
        raise Failure("%s: exit %d: %s" % (" ".join(args), p.returncode, p.stdout.decode().strip()))
    return p


class NetnsDaemon(Daemon):
    """ringmasterd inside namespace `ns`; HTTP goes through curl run there."""

    def __init__(self, binary, workdir, ns, addr, extra_args=()):
        super().__init__(binary, workdir, extra_args, host=addr, prefix=["ip", "netns", "exec", ns])
        self.ns = ns

    def start(self, http_host="127.0.0.1"):
        """Start on the fixed ports the other namespaces were told about."""
        self.port = HTTP_PORT
        self.broker_port = BROKER_PORT
        return super().start(http_host, same_ports=True)

    def request(self, method, path, body=None, timeout=30, token=ADMIN):
        args = ["ip", "netns", "exec", self.ns, "curl", "-sS", "-m", str(timeout), "-X", method,
                "-o", "-", "-w", "\n%{http_code}"]
        for k, v in self.auth_headers(token).items():
            args += ["-H", "%s: %s" % (k, v)]
        data = None
        if body is not None:
            args += ["-H", "Content-Type: application/json", "--data-binary", "@-"]
            data = json.dumps(body).encode()
        args.append("http://127.0.0.1:%d%s" % (self.port, path))
        p = subprocess.run(args, input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=timeout + 5)
        if p.returncode != 0:
            raise OSError("curl: %s" % p.stderr.decode().strip())
        out, _, code = p.stdout.rpartition(b"\n")
        return int(code), out


def main(cluster, args):
    if os.geteuid() != 0:
        raise Skip("needs root to create network namespaces (CI runs it as root)")
    if not shutil.which("ip"):
        raise Skip("`ip` (iproute2) is not installed")
    tag = "rmt%d" % (os.getpid() % 100000)
    probe = subprocess.run(["ip", "netns", "add", tag + "p"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
    if probe.returncode != 0:
        raise Skip("`ip netns add` does not work here: %s" % probe.stdout.decode().strip())
    sh("ip", "netns", "del", tag + "p")

    net = "10.231.%d" % (os.getpid() % 200 + 1)
    C, A, B = tag + "c", tag + "a", tag + "b"
    made = []
    try:
        for ns in (C, A, B):
            sh("ip", "netns", "add", ns)
            made.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", C, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", C, "addr", "add", net + ".1/24", "dev", "br0")
        sh("ip", "-n", C, "link", "set", "br0", "up")
        for ns, host in ((A, 2), (B, 3)):
            sh("ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name",
               "p" + ns[-1], "netns", C)
            sh("ip", "-n", C, "link", "set", "p" + ns[-1], "master", "br0")
            sh("ip", "-n", C, "link", "set", "p" + ns[-1], "up")
            sh("ip", "-n", ns, "addr", "add", "%s.%d/24" % (net, host), "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")

        d = NetnsDaemon(cluster.bins["ringmasterd"], cluster.workdir, C, net + ".1")
        cluster.daemon = d
        d.start()
        a = cluster.start_agent("ns-a", "cpu:1", ["--advertise", net + ".2"],
                                prefix=["ip", "netns", "exec", A])
        b = cluster.start_agent("ns-b", "cpu:1", prefix=["ip", "netns", "exec", B])
        wait_workers(d, ["ns-a", "ns-b"], timeout=30)
        check("advertise %s.3" % net in b.logtext(),
              "agent B should advertise %s.3 (its route to the coordinator):\n%s" % (net, b.logtext()))

        job_id = d.submit(tiny_spec("netns-two-hosts", 2, 4, 8))["id"]
        job = d.wait_state(job_id, {"succeeded"}, timeout=180)
        log("job %s across namespaces: %s (%s)" % (job_id, job["state"], job.get("state_reason")))
        losses = d.losses(job_id)
        check(sorted(losses) == list(range(1, 9)), "metrics steps %s" % sorted(losses))
        for agent in (a, b):
            check("spawned rank %s/" % job_id in agent.logtext(100000),
                  "agent %s ran no rank of the job" % agent.node)
        check("advertise %s.2" % net in a.logtext(), "agent A should advertise %s.2" % net)
        wait_no_ranks(job_id, 15)
    finally:
        cluster.stop()  # run() stops them again (a no-op) and prints their logs on failure
        for ns in made:
            p = sh("ip", "netns", "del", ns, check_rc=False)
            if p.returncode != 0:
                log("ip netns del %s: %s" % (ns, p.stdout.decode().strip()))


if __name__ == "__main__":
    run(main)
