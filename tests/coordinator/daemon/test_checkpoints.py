"""The coordinator's side of the snapshot commit protocol (api/wire.h),
against the real ringmasterd with fake ranks over the wire: two ranks of a
running job report SNAPSHOT_WRITTEN for step 10; only then rank 0 gets
SNAPSHOT_COMMIT with both files; its SNAPSHOT_COMMITTED records the
checkpoint (GET /v1/jobs/{id}/checkpoints, a "checkpoint" event). A step
only one rank reported never commits (and is dropped when a newer step
starts); repeats are idempotent; conflicting, stale-attempt and out-of-turn
reports get ERROR 409; `deleted` hides rows; a restart of ringmasterd keeps
the committed rows; `ringctl checkpoints` lists them as a table."""
import json
import re
import subprocess
import time

from rmtest import Daemon, check, free_port, problem_of, run
from wireshell import Shell, cpus, events, register, spec, wait_state

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def main(binary, workdir, daemons, shell_bin, ringctl):
    endpoint = "tcp://127.0.0.1:%d" % free_port()
    d = Daemon(binary, workdir, extra_args=["--broker-auth", "off", "--heartbeat-ms", "200", "--heartbeat-misses", "5",
                                            "--broker", endpoint])
    daemons.append(d)
    d.start()
    sh = Shell(shell_bin, endpoint)
    try:
        scenario(d, sh, ringctl)
    finally:
        sh.quit()
    check(d.stop() == 0, "clean stop")


def written(sh, rank, step, xxh3=None, nbytes=None):
    sh.send("r%d" % rank, "SNAPSHOT_WRITTEN",
            {"step": step, "file": "rank-%d-of-2.safetensors" % rank,
             "bytes": nbytes if nbytes is not None else 1000 + rank,
             "xxh3": xxh3 or ("%016x" % (0xabc0 + 16 * step + rank))})


def files(step):
    return [{"rank": r, "file": "rank-%d-of-2.safetensors" % r, "bytes": 1000 + r,
             "xxh3": "%016x" % (0xabc0 + 16 * step + r)} for r in range(2)]


def committed(sh, step, deleted=(), rank=0):
    sh.send("r%d" % rank, "SNAPSHOT_COMMITTED",
            {"step": step, "bytes": 2001 + 100, "path": "/ck/job/step-%08d" % step, "deleted": list(deleted)})


def checkpoints(d, jid):
    return d.json("GET", "/v1/jobs/%s/checkpoints" % jid, expect=200)[2]["checkpoints"]


def wait_steps(d, jid, steps, timeout=5):
    deadline = time.time() + timeout
    got = None
    while time.time() < deadline:
        got = [c["step"] for c in checkpoints(d, jid)]
        if got == steps:
            return
        time.sleep(0.05)
    check(False, "checkpoints %r, expected %r" % (got, steps))


def checkpoint_events(d, jid):
    return [e for e in events(d, jid) if e["type"] == "checkpoint"]


def ctl(d, ringctl, *args):
    out = subprocess.run([ringctl, "--server", "http://127.0.0.1:%d" % d.port] + list(args),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30, env=d.ctl_env())
    return out.returncode, out.stdout.decode(), out.stderr.decode()


def scenario(d, sh, ringctl):
    register(sh, "a1", "n1", cpus(2), beat_ms=100)
    # keep_last 4: the coordinator applies retention to its records too
    jid = d.submit(dict(spec("snap", world_size=2), checkpoint={"keep_last": 4}))["id"]
    for _ in range(2):
        sh.expect("a1", "SPAWN")
    for r in range(2):
        sh.dealer("r%d" % r, "rank/%s/1/%d" % (jid, r))
        sh.send("r%d" % r, "JOIN", {"job": jid, "attempt": 1, "rank": r})
        sh.expect("r%d" % r, "JOINED")
    wait_state(d, jid, "running")
    check(checkpoints(d, jid) == [], "no checkpoint yet")
    rc, out, err = ctl(d, ringctl, "checkpoints", jid)
    check(rc == 0 and out == "no committed checkpoints\n", "ringctl with none: %s %r %r" % (rc, out, err))

    # one rank of two: no commit
    written(sh, 0, 10)
    sh.silent("r0", 400, "SNAPSHOT_COMMIT after one rank of two")
    check(checkpoints(d, jid) == [], "nothing recorded before the commit")
    # both: rank 0 (only) gets SNAPSHOT_COMMIT with both files in rank order
    written(sh, 1, 10)
    c = sh.expect("r0", "SNAPSHOT_COMMIT", what="commit of step 10")
    check(c == {"job": jid, "attempt": 1, "step": 10, "files": files(10)}, "SNAPSHOT_COMMIT %r" % c)
    sh.silent("r1", 200, "rank 1 hears nothing")
    check(checkpoints(d, jid) == [], "written is not committed")
    # a repeated report is idempotent; it gives rank 0 the commit again
    written(sh, 1, 10)
    check(sh.expect("r0", "SNAPSHOT_COMMIT") == c, "repeat gives the same commit")
    # the same rank with another checksum for the step: 409
    written(sh, 1, 10, xxh3="ffffffffffffffff")
    e = sh.expect("r1", "ERROR")
    check(e["code"] == 409 and "already reported step 10" in e["detail"], "conflicting report %r" % e)
    # only rank 0 commits; and only a step that was sent to it in a SNAPSHOT_COMMIT
    committed(sh, 10, rank=1)
    check(sh.expect("r1", "ERROR")["code"] == 400, "SNAPSHOT_COMMITTED from rank 1")
    committed(sh, 11)
    e = sh.expect("r0", "ERROR")
    check(e["code"] == 409 and "step 11" in e["detail"], "COMMITTED of an unsent step %r" % e)
    check(checkpoints(d, jid) == [], "refused commits record nothing")

    # rank 0 commits: recorded, with an event
    committed(sh, 10)
    wait_steps(d, jid, [10])
    cp = checkpoints(d, jid)[0]
    check(set(cp) == {"step", "committed_at", "bytes", "world_size", "attempt", "path"} and
          cp["bytes"] == 2101 and cp["world_size"] == 2 and cp["attempt"] == 1 and
          cp["path"] == "/ck/job/step-00000010" and RFC3339.match(cp["committed_at"]), "checkpoint %r" % cp)
    evs = checkpoint_events(d, jid)
    check(len(evs) == 1 and "step 10" in evs[0]["reason"] and "2101 bytes" in evs[0]["reason"] and
          evs[0]["attempt"] == 1, "checkpoint event %r" % evs)
    # a repeated COMMITTED is idempotent: no second row or event
    committed(sh, 10)
    sh.silent("r0", 300, "repeated SNAPSHOT_COMMITTED")
    check(len(checkpoint_events(d, jid)) == 1 and [c["step"] for c in checkpoints(d, jid)] == [10],
          "repeat recorded twice")
    # reports of a step already committed are ignored
    written(sh, 0, 10)
    written(sh, 1, 10)
    sh.silent("r0", 300, "reports of a committed step")

    # a torn snapshot: step 20 gets one report, step 30 starts a new set;
    # 20 never commits, not even when its missing report comes late
    written(sh, 0, 20)
    written(sh, 1, 30)
    written(sh, 0, 30)
    c30 = sh.expect("r0", "SNAPSHOT_COMMIT", what="commit of step 30")
    check(c30["step"] == 30 and c30["files"] == files(30), "commit 30 %r" % c30)
    written(sh, 1, 20)
    sh.silent("r0", 300, "late report of the torn step 20")
    committed(sh, 20)
    check(sh.expect("r0", "ERROR")["code"] == 409, "COMMITTED of the torn step 20")
    committed(sh, 30)
    wait_steps(d, jid, [30, 10])

    # pipelined: step 45's set completes while rank 0 still commits step 40;
    # both confirmations count. Step 40 comes with retention deleting step
    # 10: hidden, newest first.
    written(sh, 0, 40)
    written(sh, 1, 40)
    check(sh.expect("r0", "SNAPSHOT_COMMIT")["step"] == 40, "commit 40")
    written(sh, 1, 45)
    written(sh, 0, 45)
    check(sh.expect("r0", "SNAPSHOT_COMMIT")["step"] == 45, "commit 45")
    committed(sh, 40, deleted=[10, 7])  # 7 was never recorded: ignored
    committed(sh, 45)
    wait_steps(d, jid, [45, 40, 30])
    evs = checkpoint_events(d, jid)
    check(len(evs) == 4 and "step 40" in evs[2]["reason"] and "deleted step(s) 10" in evs[2]["reason"] and
          "step 45" in evs[3]["reason"] and "deleted" not in evs[3]["reason"], "events %r" % evs)

    # malformed reports: ERROR 400, nothing recorded
    sh.send("r1", "SNAPSHOT_WRITTEN", {"step": 50, "file": "../x", "bytes": 1, "xxh3": "0123456789abcdef"})
    check(sh.expect("r1", "ERROR")["code"] == 400, "file with a slash")
    sh.send("r1", "SNAPSHOT_WRITTEN", {"step": 50, "file": "f", "bytes": 1, "xxh3": "0123456789ABCDEF"})
    e = sh.expect("r1", "ERROR")
    check(e["code"] == 400 and "xxh3" in e["detail"], "upper-case checksum %r" % e)
    sh.send("r0", "SNAPSHOT_COMMITTED", {"step": 50, "bytes": 1, "path": "/p", "deleted": [-1]})
    check(sh.expect("r0", "ERROR")["code"] == 400, "negative deleted step")
    # a stale attempt's report: 409, not recorded
    sh.dealer("old", "rank/%s/0/0" % jid)
    sh.send("old", "SNAPSHOT_WRITTEN", {"step": 60, "file": "f", "bytes": 1, "xxh3": "0123456789abcdef"})
    e = sh.expect("old", "ERROR")
    check(e["code"] == 409 and "stale" in e["detail"], "stale attempt %r" % e)
    # an unknown job
    st, h, raw = d.request("GET", "/v1/jobs/j-aaaaaaaaaaaaaaaaaaaa/checkpoints")
    problem_of(h, raw, 404)

    # a restart keeps the committed rows (and loses nothing else)
    before = checkpoints(d, jid)
    check(d.stop() == 0, "stop")
    d.start()
    check(checkpoints(d, jid) == before, "after restart %r != %r" % (checkpoints(d, jid), before))
    check(len(checkpoint_events(d, jid)) == 4, "events after restart")
    wait_state(d, jid, "running")
    # the restored attempt takes reports again (pending ones died with the process)
    written(sh, 0, 50)
    written(sh, 1, 50)
    check(sh.expect("r0", "SNAPSHOT_COMMIT", 8000)["step"] == 50, "commit after restart")
    committed(sh, 50)
    wait_steps(d, jid, [50, 45, 40, 30])
    # ringctl checkpoints: a table, newest first; --json is the server's JSON
    rc, out, err = ctl(d, ringctl, "checkpoints", jid)
    lines = out.splitlines()
    check(rc == 0 and lines[0].split() == ["STEP", "COMMITTED", "SIZE", "WORLD", "ATTEMPT", "PATH"],
          "ringctl checkpoints: %s %r %r" % (rc, out, err))
    rows = [ln.split() for ln in lines[1:]]
    check([r[0] for r in rows] == ["50", "45", "40", "30"], "ringctl rows %r" % rows)
    check(rows[0][2:] == ["2.1", "KiB", "2", "1", "/ck/job/step-00000050"] and rows[0][1].endswith("Z"),
          "ringctl row %r" % rows[0])
    rc, out, _ = ctl(d, ringctl, "--json", "checkpoints", jid)
    check(rc == 0 and [c["step"] for c in json.loads(out)["checkpoints"]] == [50, 45, 40, 30],
          "ringctl --json %r" % out)
    rc, _, err = ctl(d, ringctl, "checkpoints", "j-aaaaaaaaaaaaaaaaaaaa")
    check(rc == 1 and "404" in err, "ringctl checkpoints of an unknown job: %s %r" % (rc, err))
    # a commit whose report names no deletion still gets retention on the
    # coordinator's records (a report lost with a dying rank 0 cannot leave
    # a deleted snapshot listed): keep_last 4 drops 30
    written(sh, 0, 55)
    written(sh, 1, 55)
    check(sh.expect("r0", "SNAPSHOT_COMMIT")["step"] == 55, "commit 55")
    committed(sh, 55)
    wait_steps(d, jid, [55, 50, 45, 40])
    evs = checkpoint_events(d, jid)
    check("step 55" in evs[-1]["reason"] and "retention deleted step(s) 30" in evs[-1]["reason"],
          "coordinator retention event %r" % evs[-1])
    for r in range(2):
        sh.send("r%d" % r, "DONE", {"step": 55, "loss": 1.0})
    wait_state(d, jid, "succeeded")
    # the attempt is over: a late report gets 409
    written(sh, 0, 60)
    e = sh.expect("r0", "ERROR")
    check(e["code"] == 409 and "no live attempt" in e["detail"], "report after the end %r" % e)
    check([c["step"] for c in checkpoints(d, jid)] == [55, 50, 45, 40], "finished job keeps its checkpoints")


if __name__ == "__main__":
    run(main)
