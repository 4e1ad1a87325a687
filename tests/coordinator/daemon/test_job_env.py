"""The spec's env and tensorboard sections at submission (issue 25), against
the real ringmasterd: env names against job_env_allow (default NCCL_*,
CUDA_*, OMP_*, GLOO_*, LD_LIBRARY_PATH) with 422 and the pointer
/env/NAME for a name outside it or one the agent sets itself
(OMP_NUM_THREADS, CUDA_VISIBLE_DEVICES, RINGMASTER_*); a program job's env
against the same list while its program.env keeps env_allow's wider one;
bad shapes answered 400 with their pointer; the sections stored with the
job; --job-env-allow replacing the list."""
import os

from rmtest import Daemon, check, problem_of, run


def trainer(name, **extra):
    s = {"name": name, "data": {"train": "tiny/train.txt", "format": "text"}}
    s.update(extra)
    return s


def program(name, **extra):
    s = {"name": name, "program": {"argv": ["/usr/bin/python3", "train.py"]}}
    s.update(extra)
    return s


def expect_refused(d, spec, status, pointer, words=()):
    _, h, data = d.request("POST", "/v1/jobs", spec)
    doc = problem_of(h, data, status)
    check(doc.get("pointer") == pointer, "%r: pointer %r, want %r" % (spec, doc, pointer))
    for w in words:
        check(w in doc["detail"], "%r: %r does not say %r" % (spec, doc["detail"], w))


def defaults(d):
    for name in ("NCCL_DEBUG", "NCCL_NET_PLUGIN", "GLOO_SOCKET_IFNAME", "CUDA_LAUNCH_BLOCKING", "OMP_PROC_BIND",
                 "LD_LIBRARY_PATH"):
        job = d.submit(trainer("ok-" + name, env={name: "x"}))
        check(job["spec"].get("env") == {name: "x"}, "stored env %r" % job["spec"])
    for name in ("PYTHONPATH", "LD_PRELOAD", "PATH", "RINGMASTER_USER_X", "NCCLX"):
        expect_refused(d, trainer("no-" + name, env={"NCCL_DEBUG": "INFO", name: "1"}), 422, "/env/" + name,
                       ("env." + name, "job_env_allow"))
    for name in ("OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "RINGMASTER_JOB_ID", "MASTER_PORT"):
        expect_refused(d, trainer("reserved-" + name, env={name: "1"}), 422, "/env/" + name,
                       ("set by the agent itself",))
    # a program job: env against job_env_allow, program.env against env_allow
    job = d.submit(program("prog", env={"NCCL_DEBUG": "INFO"},
                           program={"argv": ["/usr/bin/python3", "t.py"], "env": {"PYTHONPATH": "/p"}}))
    check(job["spec"]["env"] == {"NCCL_DEBUG": "INFO"} and job["spec"]["program"]["env"] == {"PYTHONPATH": "/p"},
          "program job's spec %r" % job["spec"])
    expect_refused(d, program("prog-py", env={"PYTHONPATH": "/p"}), 422, "/env/PYTHONPATH")
    expect_refused(d, program("prog-env", program={"argv": ["x"], "env": {"LD_PRELOAD": "/x"}}), 422,
                   "/program/env/LD_PRELOAD")


def shapes(d):
    for spec, pointer in ((trainer("a", env=["NCCL_DEBUG=1"]), "/env"),
                          (trainer("b", env={"1NCCL": "x"}), "/env"),
                          (trainer("c", env={"NCCL-X": "x"}), "/env"),
                          (trainer("d", env={"NCCL_DEBUG": 1}), "/env/NCCL_DEBUG"),
                          (trainer("e", env={"NCCL_DEBUG": "x" * 4097}), "/env/NCCL_DEBUG"),
                          (trainer("f", env={"N%d" % i: "x" for i in range(257)}), "/env"),
                          (trainer("g", tensorboard={"dir": "../up"}), "/tensorboard/dir"),
                          (trainer("h", tensorboard={"dir": "/abs"}), "/tensorboard/dir"),
                          (trainer("i", tensorboard={"dir": ""}), "/tensorboard/dir"),
                          (trainer("j", tensorboard={"dir": 3}), "/tensorboard/dir"),
                          (trainer("k", tensorboard={"logdir": "x"}), "/tensorboard/logdir"),
                          (trainer("l", tensorboard="runs"), "/tensorboard"),
                          (program("m", tensorboard={"dir": "runs"}), "/tensorboard")):
        expect_refused(d, spec, 400, pointer)
    job = d.submit(trainer("tb", tensorboard={"dir": "runs/a"}))
    check(job["spec"].get("tensorboard") == {"dir": "runs/a"}, "stored tensorboard %r" % job["spec"])
    job = d.submit(trainer("tb-default", tensorboard={}))
    check(job["spec"].get("tensorboard") == {"dir": "tensorboard"}, "tensorboard's default dir %r" % job["spec"])
    _, _, got = d.json("GET", "/v1/jobs/%s" % job["id"], expect=200)
    check(got["spec"]["tensorboard"] == {"dir": "tensorboard"}, "GET %r" % got["spec"])
    plain = d.submit(trainer("plain"))
    check("env" not in plain["spec"] and "tensorboard" not in plain["spec"], "absent sections %r" % plain["spec"])


def main(binary, workdir, daemons):
    for sub in ("a", "b", "c"):
        os.makedirs(os.path.join(workdir, sub))
    d = Daemon(binary, workdir + "/a")
    daemons.append(d)
    d.start()
    defaults(d)
    shapes(d)
    check(d.stop() == 0, "clean stop")
    # the operator's own list
    d2 = Daemon(binary, workdir + "/b", extra_args=["--job-env-allow", "FOO_*,BAR"])
    daemons.append(d2)
    d2.start()
    d2.submit(trainer("foo", env={"FOO_X": "1", "BAR": "2"}))
    expect_refused(d2, trainer("nccl", env={"NCCL_DEBUG": "INFO"}), 422, "/env/NCCL_DEBUG", ("FOO_*,BAR",))
    expect_refused(d2, trainer("omp", env={"OMP_NUM_THREADS": "1"}), 422, "/env/OMP_NUM_THREADS")
    check(d2.stop() == 0, "clean stop")
    bad = Daemon(binary, workdir + "/c", extra_args=["--job-env-allow", "A B"])
    bad.start(wait=False)
    rc = bad.proc.wait(timeout=20)
    check(rc != 0 and "job_env_allow" in bad.logtext(), "a bad --job-env-allow: rc %r, log %r" % (rc, bad.logtext()))


if __name__ == "__main__":
    run(main)
