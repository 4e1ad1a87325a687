"""From `sbatch` to the job's success, against the same job submitted
directly (bench/slurm/run.sh runs this). The two-node Slurm of
tests/cluster/slurmlab.py (slurmctld, two slurmd in network namespaces,
munge), the same 2-rank tiny GPT-2 job (one rank per node) each time:

  direct   ringmasterd and an agent per node already running (in the nodes'
           namespaces); `ringctl submit -q --wait` timed from start to exit
  sbatch   `sbatch -N 2 packaging/slurm/ringmaster.sbatch spec.json` (the
           script starts ringmasterd on the batch host, an agent step per
           node, submits, follows); timed from sbatch to the batch job's
           COMPLETED seen by scontrol (polled every 0.1 s)
  site     the same sbatch with RINGMASTER_COORDINATOR: a long-running
           coordinator, the script only starts the agents

Prints one line per run and the medians; --json FILE writes them."""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "cluster"))

from cluster import Failure, make_text_data, tiny_spec  # noqa: E402
import slurmlab  # noqa: E402

SCRIPT = os.path.join(ROOT, "packaging", "slurm", "ringmaster.sbatch")


def spawn(prefix, args, logpath):
    f = open(logpath, "ab")
    p = subprocess.Popen(prefix + args, stdout=f, stderr=subprocess.STDOUT)
    f.close()
    return p


def stop(p):
    if p and p.poll() is None:
        p.terminate()
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def wait_token(path, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(path) and open(path).read().strip():
            return open(path).read().strip()
        time.sleep(0.05)
    raise Failure("no admin token at %s" % path)


def ctl(lab, key, bins, env, *args, timeout=300):
    e = dict(os.environ)
    e.update(env)
    return subprocess.run(lab.enter(key) + [bins["ringctl"]] + list(args), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, env=e, timeout=timeout)


def enroll(lab, key, bins, env):
    """A join token for two agents (stdout only: the advice goes to stderr)."""
    e = dict(os.environ)
    e.update(env)
    r = subprocess.run(lab.enter(key) + [bins["ringctl"], "worker", "enroll", "--uses", "2"],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=e, timeout=30)
    return r.stdout.decode().strip()


def ready(lab, key, bins, env):
    deadline = time.time() + 20
    while time.time() < deadline:
        if ctl(lab, key, bins, env, "workers").returncode == 0:
            return
        time.sleep(0.1)
    raise Failure("coordinator not answering")


def direct_runs(lab, w, bins, spec, runs):
    """A coordinator in ns A (REST on its loopback), agents in A and B."""
    st = os.path.join(w, "direct")
    os.makedirs(st, exist_ok=True)
    addr = lab.addr["A"]
    d = spawn(lab.enter("A"), [bins["ringmasterd"], "--db", os.path.join(st, "rm.db"), "--listen",
                               "127.0.0.1:18180", "--broker", "tcp://%s:18181" % addr, "--submit-rate", "0"],
              os.path.join(st, "ringmasterd.log"))
    agents = []
    try:
        env = {"RINGMASTER_SERVER": "http://127.0.0.1:18180",
               "RINGMASTER_TOKEN": wait_token(os.path.join(st, "admin.token"))}
        ready(lab, "A", bins, env)
        tok = enroll(lab, "A", bins, env)
        for node, key in (("rmn1", "A"), ("rmn2", "B")):
            agents.append(spawn(lab.enter(key), [bins["ringworker"], "agent", "--coordinator",
                                                 "tcp://%s:18181" % addr, "--node", node, "--devices", "cpu:1",
                                                 "--gpus", "none", "--join-token", tok, "--state-dir",
                                                 os.path.join(st, "agent-" + node), "--data-root",
                                                 os.path.join(w, "data"), "--checkpoint-root",
                                                 os.path.join(st, "ckpt")],
                                os.path.join(st, "agent-%s.log" % node)))
        deadline = time.time() + 30
        while time.time() < deadline:
            out = ctl(lab, "A", bins, env, "--json", "workers").stdout.decode()
            if out.count('"alive"') >= 2:
                break
            time.sleep(0.1)
        else:
            raise Failure("agents not registered: %s" % out)
        times = []
        for i in range(runs):
            t0 = time.time()
            r = ctl(lab, "A", bins, env, "submit", "-q", "--wait", spec)
            dt = time.time() - t0
            if r.returncode != 0:
                raise Failure("direct run %d: ringctl exit %d: %s" % (i, r.returncode, r.stdout.decode()[-2000:]))
            print("direct %d: %.2f s" % (i + 1, dt), flush=True)
            times.append(dt)
        return times
    finally:
        for a in agents:
            stop(a)
        stop(d)


def sbatch_runs(lab, w, bins, spec, runs, name, extra_env):
    times = []
    for i in range(runs):
        env = {"RINGMASTERD": bins["ringmasterd"], "RINGWORKER": bins["ringworker"], "RINGCTL": bins["ringctl"],
               "RINGMASTER_STATE": os.path.join(w, "state-" + name), "RINGMASTER_DATA_ROOT": os.path.join(w, "data"),
               "RINGMASTER_DEVICES": "cpu:1", "RINGMASTER_AGENT_ARGS": "--gpus none"}
        env.update(extra_env)
        t0 = time.time()
        job = lab.sbatch(["-N", "2", "--ntasks-per-node=1", "-o", os.path.join(w, "batch-%j.out")], SCRIPT, [spec], env)
        deadline = t0 + 300
        while True:
            j = lab.job(job)
            if j.get("JobState") not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", None, ""):
                break
            if time.time() > deadline:
                raise Failure("%s run %d: batch job %s still %s" % (name, i, job, j.get("JobState")))
            time.sleep(0.1)
        dt = time.time() - t0
        if j.get("JobState") != "COMPLETED":
            raise Failure("%s run %d: batch job %s %s %s" % (name, i, job, j.get("JobState"), j.get("ExitCode")))
        print("%s %d: %.2f s (slurm job %s)" % (name, i + 1, dt, job), flush=True)
        times.append(dt)
    return times


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--json")
    args = p.parse_args()
    bins = {"ringmasterd": os.path.join(args.build, "coordinatord", "ringmasterd"),
            "ringworker": os.path.join(args.build, "worker", "ringworker"),
            "ringctl": os.path.join(args.build, "clients", "ringctl")}
    slurmlab.check_available()
    w = tempfile.mkdtemp(prefix="rm-bench-slurm-")
    os.chmod(w, 0o755)
    make_text_data(os.path.join(w, "data", "tiny"))
    spec = os.path.join(w, "spec.json")
    with open(spec, "w") as f:
        json.dump(tiny_spec("bench-slurm", world_size=2, batch_size=4, steps=args.steps), f)
    lab = slurmlab.Lab(w, cpus=2)
    site = None
    try:
        lab.start()
        res = {"direct": direct_runs(lab, w, bins, spec, args.runs)}
        res["sbatch"] = sbatch_runs(lab, w, bins, spec, args.runs, "sbatch", {})
        # a long-running coordinator in ns C, REST on the bridge address
        st = os.path.join(w, "site")
        os.makedirs(st)
        c = lab.addr["C"]
        site = spawn(lab.enter("C"), [bins["ringmasterd"], "--db", os.path.join(st, "rm.db"), "--listen",
                                      "%s:18280" % c, "--broker", "tcp://%s:18281" % c, "--submit-rate", "0"],
                     os.path.join(st, "ringmasterd.log"))
        env = {"RINGMASTER_SERVER": "http://%s:18280" % c, "RINGMASTER_TOKEN": wait_token(os.path.join(st, "admin.token"))}
        ready(lab, "C", bins, env)
        tok = enroll(lab, "C", bins, env)
        env.update({"RINGMASTER_COORDINATOR": "tcp://%s:18281" % c, "RINGMASTER_JOIN_TOKEN": tok})
        res["site"] = sbatch_runs(lab, w, bins, spec, args.runs, "site", env)
        print("medians over %d runs, %d steps: direct %.2f s, sbatch %.2f s, sbatch against a running coordinator %.2f s"
              % (args.runs, args.steps, statistics.median(res["direct"]), statistics.median(res["sbatch"]),
                 statistics.median(res["site"])))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=1)
    finally:
        stop(site)
        lab.stop()
        shutil.rmtree(w, ignore_errors=True)


if __name__ == "__main__":
    main()
