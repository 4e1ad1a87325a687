"""ringctl following real jobs (issue 21): the real ringmasterd, one real
`ringworker agent` (2 CPU slots, a checkpoint root) and the ranks it
spawns, on loopback, through tests/cluster/cluster.py.

  submit --wait --metrics  a 2-rank 6-step job: its metrics rows, exit 0
  submit --wait --metrics  a job whose data file is missing: the rank fails,
                           exit 3 and the rank's error line on stderr
  wait                     0 for the succeeded job, 3 for the failed one,
                           5 (--timeout) for a job that cannot be placed
  export JOB               no --root: the snapshot is read where the
                           coordinator lists it (the agent's checkpoint root)
  logs, submit --wait      the log lines of the succeeded job, each
                           "[rR aN out|err] text", ranks 0 and 1; only when
                           the daemon serves GET /v1/jobs/{id}/logs (its
                           --print-routes says), else said and passed over

Usage: test_ringctl_jobs.py --ringmasterd BIN --ringworker BIN --ringctl BIN
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cluster"))
from cluster import check, log, run, tiny_spec, wait_workers  # noqa: E402

LINE = re.compile(r"^\[r(\d+) a(\d+) (out|err)\] ")


def ctl(c, *args, stdin=None, timeout=180):
    env = {k: v for k, v in os.environ.items()
           if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
           and k not in ("RINGMASTER_SERVER", "RINGMASTER_TOKEN", "RINGMASTER_CHECKPOINT_ROOT")}
    if c.daemon.token:
        env["RINGMASTER_TOKEN"] = c.daemon.token
    argv = [c.bins["ringctl"], "--server", c.daemon.url] + list(args)
    r = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout, env=env)
    log("ringctl %s -> %d\n%s%s" % (" ".join(args), r.returncode, r.stdout[-1500:], r.stderr[-1500:]))
    check("Sanitizer" not in r.stderr and "runtime error:" not in r.stderr, "sanitizer report: %s" % r.stderr)
    return r


def has_logs_route(c):
    r = subprocess.run([c.bins["ringmasterd"], "--print-routes"], capture_output=True, text=True, timeout=30)
    return "/v1/jobs/{id}/logs" in r.stdout


def main(c, _args):
    ck = os.path.join(c.workdir, "checkpoints")
    c.start_daemon()
    c.start_agent("n1", "cpu:2", extra_args=["--checkpoint-root", ck])
    wait_workers(c.daemon, ["n1"])

    # A job that succeeds: its metrics rows while it runs, then exit 0.
    spec = tiny_spec("ctl-wait-ok", 2, 4, 6)
    spec["checkpoint"] = {"every_steps": 3}
    r = ctl(c, "submit", "--wait", "--metrics", "-", stdin=json.dumps(spec))
    check(r.returncode == 0, "submit --wait of a good job: %d %s" % (r.returncode, r.stderr))
    lines = r.stdout.splitlines()
    m = re.match(r"^submitted job (\S+) \(ctl-wait-ok\): queued$", lines[0])
    check(m, "first line: %r" % lines[0])
    ok_id = m.group(1)
    check(lines[1].split()[:2] == ["STEP", "LOSS"], "metrics header: %r" % lines[1:2])
    steps = [int(l.split()[0]) for l in lines[2:]]
    check(steps == sorted(set(steps)) and steps and steps[-1] == 6, "metrics steps: %r" % steps)
    check(r.stderr == "ringctl: job %s succeeded\n" % ok_id, "stderr: %r" % r.stderr)

    # A job whose rank fails: exit 3, the rank's error line as the cause.
    bad = tiny_spec("ctl-wait-bad", 2, 4, 5)
    bad["data"]["train"] = "tiny/missing.txt"
    r = ctl(c, "submit", "-q", "--wait", "--metrics", "-", stdin=json.dumps(bad))
    check(r.returncode == 3, "submit --wait of a failing job: %d %s" % (r.returncode, r.stderr))
    bad_id = r.stdout.splitlines()[0].strip()
    check(re.match(r"^ringctl: job %s failed: .*missing\.txt" % re.escape(bad_id), r.stderr),
          "the cause should name the missing file: %r" % r.stderr)

    # wait on jobs already ended, and on one that cannot start.
    r = ctl(c, "wait", ok_id)
    check((r.returncode, r.stdout) == (0, "job %s: succeeded\n" % ok_id), "wait ok: %r" % r)
    r = ctl(c, "wait", bad_id)
    check(r.returncode == 3 and "missing.txt" in r.stderr, "wait bad: %r" % r)
    big = c.daemon.submit(tiny_spec("ctl-wait-never", 8, 8, 5))["id"]
    r = ctl(c, "wait", "--timeout", "1", big)
    check(r.returncode == 5 and "after 1 s (--timeout)" in r.stderr, "wait --timeout: %r" % r)
    check(ctl(c, "cancel", big).returncode == 0, "cancel")
    r = ctl(c, "wait", big)
    check(r.returncode == 4 and r.stderr.startswith("ringctl: job %s cancelled: " % big), "wait cancelled: %r" % r)

    # export without --root: where the coordinator lists the snapshot.
    listed = c.daemon.json("GET", "/v1/jobs/%s/checkpoints" % ok_id)["checkpoints"]
    check(listed and listed[0]["step"] == 6, "checkpoints: %r" % listed)
    out = os.path.join(c.workdir, "model.safetensors")
    r = ctl(c, "export", ok_id, "-o", out)
    check(r.returncode == 0, "export: %r" % r)
    check("exported step 6 from %s\n" % listed[0]["path"] in r.stdout, "export said: %r" % r.stdout)
    check(os.path.getsize(out) > 10000, "export wrote %d bytes" % os.path.getsize(out))
    r = ctl(c, "export", ok_id, "--step", "3", "-o", out)
    check(r.returncode == 0 and "exported step 3" in r.stdout, "export --step 3: %r" % r)

    # logs: once the daemon serves them.
    if not has_logs_route(c):
        log("ringmasterd has no GET /v1/jobs/{id}/logs yet: logs tests passed over")
        return
    r = ctl(c, "logs", ok_id)
    check(r.returncode == 0 and r.stdout, "logs: %r" % r)
    ranks = set()
    for line in r.stdout.splitlines():
        m = LINE.match(line)
        check(m and m.group(2) == "1", "log line %r" % line)
        ranks.add(int(m.group(1)))
    check(ranks == {0, 1}, "ranks in the logs: %r" % ranks)
    r = ctl(c, "logs", "--rank", "1", "--tail", "2", ok_id)
    check(r.returncode == 0 and 1 <= len(r.stdout.splitlines()) <= 2
          and all(l.startswith("[r1 a1 ") for l in r.stdout.splitlines()), "logs --rank 1 --tail 2: %r" % r)
    r = ctl(c, "logs", "-f", bad_id)
    check(r.returncode == 0 and "missing.txt" in r.stdout and r.stderr.endswith("failed\n"), "logs -f bad: %r" % r)
    r = ctl(c, "submit", "--wait", "-", stdin=json.dumps(dict(spec, name="ctl-wait-logs")))
    check(r.returncode == 0 and all(LINE.match(l) for l in r.stdout.splitlines()[1:]) and
          len(r.stdout.splitlines()) > 1, "submit --wait (logs): %r" % r)


if __name__ == "__main__":
    run(main)
