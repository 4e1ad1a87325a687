"""ringmasterd's ZeroMQ ROUTER answers malformed or not-yet-served messages
with an ERROR reply and keeps running (wire_probe.c sends them)."""
import subprocess

from rmtest import Daemon, check, run


def main(binary, workdir, daemons, probe):
    d = Daemon(binary, workdir)
    daemons.append(d)
    d.start()
    p = subprocess.run([probe, "tcp://127.0.0.1:%d" % d.broker_port], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=60)
    out = p.stdout.decode()
    check(p.returncode == 0, "wire probe failed:\n%s" % out)
    d.json("GET", "/readyz", expect=200)
    d.submit()
    check(d.stop() == 0, "clean stop")


if __name__ == "__main__":
    run(main)
