"""Confinement (issue 22): a job may read only what lies beneath its agent's
--data-root, and what it writes beneath --checkpoint-root is its owner's.

The real daemon and a real agent. A job reading /etc/passwd by an absolute
path or through '..' is refused at submission (400 naming the field); one
reading it through a symbolic link inside the data root, a glob through a
linked folder, or a passwd-like file read as an llm.c shard fails at once
with a data error naming the field (not retried, max_restarts 2); neither
the API nor any log holds a line of the file. A link that stays inside the
root works, and that job's snapshot files are 0600 in 0700 folders. A model
that cannot fit (the rank exits 4, out of memory) is not retried either."""
import json
import os
import stat

from cluster import check, log, run, tiny_spec, wait_workers

STEPS = 4


def spec_with(name, max_restarts=2, **data):
    s = tiny_spec(name, 1, 4, STEPS, max_restarts=max_restarts)
    s["data"].update(data)
    return s


def passwd_lines():
    """Lines of /etc/passwd that must never show: its first entries."""
    with open("/etc/passwd") as f:
        return [l.strip() for l in f if l.strip()][:3]


def check_clean(text, where, secrets):
    check("root:" not in text, "%s holds 'root:' (a line of /etc/passwd)" % where)
    check("1953460082" not in text, "%s holds the bytes 'root' as a number" % where)
    for s in secrets:
        check(s not in text, "%s holds a line of /etc/passwd: %r" % (where, s))


def main(cluster, args):
    secrets = passwd_lines()
    root = cluster.data_root
    os.symlink("/etc/passwd", os.path.join(root, "evil.txt"))        # an absolute link out
    os.symlink("/etc", os.path.join(root, "etc"))                    # a folder link out
    os.symlink("../../../../../../../../etc/passwd", os.path.join(root, "up.txt"))  # '..' out
    os.symlink("tiny", os.path.join(root, "current"))                # inside: works
    with open("/etc/passwd", "rb") as f:
        body = f.read()
    with open(os.path.join(root, "fake.bin"), "wb") as f:            # passwd's bytes, inside
        f.write((body * (4096 // max(len(body), 1) + 2))[:4096])
    ck = os.path.join(cluster.workdir, "ck")

    d = cluster.start_daemon()
    # --memory-bytes: the agent offers far more than it has, so that the
    # coordinator's memory fit lets the too-big job of part 4 through to the
    # rank's own check (exit 4)
    cluster.start_agent("c1", "cpu:2", extra_args=["--checkpoint-root", ck,
                                                   "--memory-bytes", str(10 ** 17)])
    wait_workers(d, ["c1"])

    # 1. Refused at submission: absolute paths and '..', each naming its field.
    bad = [({"train": "/etc/passwd"}, "data.train"),
           ({"train": "../../../../etc/passwd"}, "data.train"),
           ({"train": "tiny/../../etc/passwd"}, "data.train"),
           ({"train": "/etc/pass*"}, "data.train"),
           ({"val": "/etc/passwd"}, "data.val"),
           ({"val": "tiny/../../../etc/passwd"}, "data.val")]
    for data, field in bad:
        st, out = d.request("POST", "/v1/jobs", spec_with("bad", **data))
        text = out.decode("utf-8", "replace")
        check(st == 400, "%r: expected 400, got %s: %s" % (data, st, text))
        check(field in text and "--data-root" in text, "%r: the problem names %s: %s" %
              (data, field, text))
        check_clean(text, "the 400 for %r" % (data,), secrets)
    log("%d absolute or '..' paths refused at submission with 400" % len(bad))

    # 2. Refused by the agent: links and globs out of the root, and a file
    # that is not the format it claims. Data errors: failed at once.
    cases = [({"train": "evil.txt"}, "data.train", "leaves the data root"),
             ({"train": "up.txt"}, "data.train", "leaves the data root"),
             ({"train": "etc/pass*"}, "data.train", "leaves the data root"),
             ({"val": "evil.txt"}, "data.val", "leaves the data root"),
             ({"train": "fake.bin", "val": None, "format": "llmc"}, "data.train",
              "not an llm.c shard")]
    for data, field, phrase in cases:
        job_id = d.submit(spec_with("link", **data))["id"]
        job = d.wait_state(job_id, {"failed"}, timeout=120)
        reason = job.get("state_reason") or ""
        check(field in reason and phrase in reason, "%r: reason %r should name %s and say %r" %
              (data, reason, field, phrase))
        check("not retried" in reason and job["restarts"] == 0,
              "%r: a data error is not retried: restarts %s, %r" % (data, job["restarts"], reason))
        everything = json.dumps(job) + json.dumps(d.events(job_id))
        st, logs = d.request("GET", "/v1/jobs/%s/logs" % job_id)
        everything += logs.decode("utf-8", "replace")
        check_clean(everything, "job %s (%r) in the API" % (job_id, data), secrets)
        log("%r: failed: %s" % (data, reason))

    # 3. A link inside the root works, and the snapshot is the owner's only.
    s = spec_with("inside", max_restarts=0, train="current/train.txt", val="current/val.txt")
    s["checkpoint"] = {"every_steps": 2}
    job_id = d.submit(s)["id"]
    d.wait_state(job_id, {"succeeded"}, timeout=180)
    job_dir = os.path.join(ck, job_id)
    n_files = 0
    for top, dirs, files in os.walk(ck):
        for name in dirs:
            mode = stat.S_IMODE(os.stat(os.path.join(top, name)).st_mode)
            check(mode == 0o700, "folder %s is %o, expected 0700" % (os.path.join(top, name), mode))
        for name in files:
            mode = stat.S_IMODE(os.stat(os.path.join(top, name)).st_mode)
            check(mode == 0o600, "file %s is %o, expected 0600" % (os.path.join(top, name), mode))
            n_files += 1
    check(os.path.isdir(job_dir) and n_files >= 2, "no snapshot written under %s" % job_dir)
    log("a link inside the root trained; %d snapshot files, all 0600 in 0700 folders" % n_files)

    # 4. A model that cannot fit: exit 4, failed at once despite max_restarts.
    with open(os.path.join(root, "big.txt"), "w") as f:
        f.write("abcdefghij" * 7000)
    s = spec_with("huge", max_restarts=3, train="big.txt", val=None)
    s["model"].update({"seq_len": 65536})
    s["train"]["batch_size"] = 65536
    job_id = d.submit(s)["id"]
    job = d.wait_state(job_id, {"failed"}, timeout=120)
    reason = job.get("state_reason") or ""
    check("not retried" in reason and job["restarts"] == 0,
          "an out-of-memory exit (4) was retried: restarts %s, %r" % (job["restarts"], reason))
    log("the model that cannot fit failed at once: %s" % reason)

    for path in [d.log_path] + [a.log_path for a in cluster.agents]:
        with open(path, errors="replace") as f:
            check_clean(f.read(), path, secrets)
    log("no line of /etc/passwd in the daemon's or the agent's log")


if __name__ == "__main__":
    run(main)
