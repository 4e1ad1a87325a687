"""ringmasterd's ZeroMQ ROUTER answers malformed messages with the ERROR code
api/wire.h gives them (wire_probe.c: wrong version, unknown type, missing
and wrong-typed fields, oversized payload, too many and too few frames, ...),
answers a rank of an unknown job with ERROR 404 and a JOIN with an attempt
that is not live with ABORT (wire_shell.c), and keeps running throughout."""
import subprocess

from rmtest import Daemon, check, run
from wireshell import Shell


def main(binary, workdir, daemons, probe, shell_bin):
    d = Daemon(binary, workdir, extra_args=["--broker-auth", "off"])  # fake agents speak raw ZeroMQ
    daemons.append(d)
    d.start()
    endpoint = "tcp://127.0.0.1:%d" % d.broker_port
    p = subprocess.run([probe, endpoint], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    out = p.stdout.decode()
    check(p.returncode == 0, "wire probe failed:\n%s" % out)
    d.json("GET", "/readyz", expect=200)

    job = d.submit()  # queued: no agent, attempt 0
    sh = Shell(shell_bin, endpoint)
    try:
        sh.dealer("ghost", "rank/j-cccccccccccccccccccc/1/0")
        sh.send("ghost", "JOIN", {"job": "j-cccccccccccccccccccc", "attempt": 1, "rank": 0})
        e = sh.expect("ghost", "ERROR")
        check(e["code"] == 404, "rank of an unknown job: %r" % e)
        sh.dealer("stale", "rank/%s/1/0" % job["id"])
        sh.send("stale", "JOIN", {"job": job["id"], "attempt": 1, "rank": 0})
        a = sh.expect("stale", "ABORT")
        check(a["job"] == job["id"] and a["attempt"] == 1 and "queued" in a["reason"],
              "JOIN of an attempt that is not live: %r" % a)
        sh.dealer("bad", "rank/not-an-identity")
        sh.send("bad", "JOIN", {"job": "x", "attempt": 1, "rank": 0})
        check(sh.expect("bad", "ERROR")["code"] == 400, "malformed rank identity")
    finally:
        sh.quit()
    d.json("GET", "/readyz", expect=200)
    _, _, doc = d.json("GET", "/v1/jobs/" + job["id"], expect=200)
    check(doc["state"] == "queued", "the job is untouched: %r" % doc["state"])
    check(d.stop() == 0, "clean stop")


if __name__ == "__main__":
    run(main)
