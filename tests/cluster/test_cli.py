"""`ringworker agent` and `ringworker rank` command lines: bad options are
refused with exit status 1 and one line saying what is wrong; --help
documents both commands. No coordinator needed."""
import subprocess
import sys

from cluster import check


def run(args, timeout=20):
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def main(rw):
    rc, out, _ = run([rw, "--help"])
    check(rc == 0 and "ringworker agent --coordinator" in out and "--advertise" in out,
          "--help should document the agent:\n%s" % out)
    cases = [
        (["agent"], "--coordinator tcp://HOST:PORT is required"),
        (["agent", "--coordinator", "tcp://127.0.0.1:1", "--devices", "gpu:2"], "--devices wants cpu:N or auto"),
        (["agent", "--coordinator", "tcp://127.0.0.1:1", "--devices", "cpu:0"], "--devices wants an integer >= 1"),
        (["agent", "--coordinator", "tcp://127.0.0.1:1", "--kill-grace-ms", "x"], "--kill-grace-ms"),
        (["agent", "--coordinator", "127.0.0.1:5555"], "is not tcp://HOST:PORT"),
        (["agent", "--coordinator", "tcp://127.0.0.1:1", "--node", "a/b"], "without '/'"),
        (["agent", "--coordinator", "tcp://127.0.0.1:1", "extra"], "unexpected argument 'extra'"),
        (["rank"], "needs --coordinator"),
        (["rank", "--coordinator", "tcp://127.0.0.1:1", "--job", "j", "--attempt", "1", "--rank", "2",
          "--world-size", "2"], "rank < world size"),
        (["rank", "--coordinator", "tcp://127.0.0.1:1", "--job", "j", "--attempt", "-1", "--rank", "0",
          "--world-size", "2"], "--attempt wants an integer >= 0"),
    ]
    for args, want in cases:
        rc, out, err = run([rw] + args)
        check(rc == 1, "%s: exit %d, expected 1 (stderr %r)" % (args, rc, err))
        check(want in err, "%s: stderr should say %r, got %r" % (args, want, err))
        check("error" in err, "%s: no error line: %r" % (args, err))
    print("ok")


if __name__ == "__main__":
    try:
        main(sys.argv[1])
    except Exception as e:  # a Failure or an unexpected error: both fail the test
        print("FAIL: %s" % e)
        sys.exit(1)
