"""packaging/slurm/ringmaster.sbatch against a real Slurm: Debian's slurm-wlm
(slurmctld and two slurmd in network namespaces) and munge, configured by
tests/cluster/slurmlab.py in the test's temporary folder.

1. `sbatch -N 2 ringmaster.sbatch spec.json`: the script starts ringmasterd on
   the batch host and one `ringworker agent` step per node (srun), submits a
   2-rank CPU job and follows it: the batch job COMPLETED with exit code 0,
   one rank ran on each node.
2. A long job, and `scancel JOB.STEP` of node rmn2's agent step once the
   job has committed a snapshot: the script starts that agent step again,
   the ringmaster job recovers (its attempt 2 trains); then it is cancelled
   with ringctl: the batch job FAILED with exit code 4 (the job's
   `cancelled`), `ringctl show` counts the restart.
3. A job whose data is missing: the batch job FAILED with exit code 3 (the
   job's `failed`), not 0.
4. `scontrol requeue` of a running batch job after a committed snapshot: the
   script stops on SIGTERM and leaves the ringmaster job; the batch runs
   again (same Slurm job id, Restarts=1), submits with the same idempotency
   key, follows the same ringmaster job (no second one), which resumes from
   its snapshot and trains; then it is cancelled (exit 4).

The long jobs are cancelled once the test has seen what it checks, so the
test does not depend on how fast the machine trains.

Needs root, slurm-wlm, munge and network namespaces, else it exits 77 (a
skip). Every daemon it started is stopped by pid and the namespaces are
deleted, on failure too."""
import json
import os
import re
import time

from cluster import Failure, Skip, check, log, run, tiny_spec, wait_until
import slurmlab

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "packaging", "slurm", "ringmaster.sbatch")
# a job that outlasts the test on any machine: 2 and 4 cancel it once they
# have seen what they check
LONG = 1000000


def write_spec(workdir, name, steps, every=0, train="tiny/train.txt"):
    spec = tiny_spec(name, world_size=2, batch_size=4, steps=steps, max_restarts=3)
    spec["data"]["train"] = train
    if every:
        spec["checkpoint"] = {"every_steps": every, "keep_last": 2}
    path = os.path.join(workdir, name + ".json")
    with open(path, "w") as f:
        json.dump(spec, f)
    return path


def batch_output(workdir, job_id):
    try:
        with open(os.path.join(workdir, "batch-%s.out" % job_id), errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def committed(out):
    """The ringmaster job id once rank 0 said a snapshot is committed (the
    coordinator's commit: a restart resumes from it), else None."""
    m = re.search(r"snapshot of step \d+ committed: \S*/([^/\s]+)/step-", out)
    return m and m.group(1)


def rm_cancel(lab, out, env, rm_job):
    """ringctl cancel against the coordinator the script started on rmn1
    (REST on that namespace's loopback, the admin token in its state)."""
    m = re.findall(r"REST (http://127\.0\.0\.1:\d+)", out)
    check(m, "no REST address in the batch output:\n%s" % out)
    with open(os.path.join(env["RINGMASTER_STATE"], "admin.token")) as f:
        token = f.read().strip()
    e = dict(os.environ, RINGMASTER_SERVER=m[-1], RINGMASTER_TOKEN=token)
    r = slurmlab.sh(*lab.enter("A"), env["RINGCTL"], "cancel", rm_job, check_rc=False, env=e)
    check(r.returncode == 0, "ringctl cancel %s: exit %d: %s" % (rm_job, r.returncode, r.stdout.decode()))


def run_batch(lab, workdir, env, spec, timeout, during=None):
    """sbatch the script; `during(job_id)` runs while it does; return
    (slurm job id, its scontrol fields, its output)."""
    job = lab.sbatch(["-N", "2", "--ntasks-per-node=1", "--open-mode=append",
                      "-o", os.path.join(workdir, "batch-%j.out")],
                     SCRIPT, [spec], env)
    t0 = time.time()
    if during:
        during(job)
    fields = lab.wait_job(job, timeout)
    out = batch_output(workdir, job)
    log("slurm job %s: %s exit %s after %.1f s" % (job, fields.get("JobState"), fields.get("ExitCode"),
                                                   time.time() - t0))
    return job, fields, out


def main(cluster, args):
    slurmlab.check_available()
    for b in ("ringmasterd", "ringworker", "ringctl"):
        if not cluster.bins.get(b):
            raise Skip("--%s not given" % b)
    w = cluster.workdir
    lab = slurmlab.Lab(w, cpus=2)
    try:
        lab.start()
        env = {"RINGMASTERD": cluster.bins["ringmasterd"], "RINGWORKER": cluster.bins["ringworker"],
               "RINGCTL": cluster.bins["ringctl"], "RINGMASTER_STATE": os.path.join(w, "rmstate"),
               "RINGMASTER_DATA_ROOT": cluster.data_root,
               "RINGMASTER_CHECKPOINT_ROOT": os.path.join(w, "ckpt"),
               "RINGMASTER_DEVICES": "cpu:1", "RINGMASTER_AGENT_ARGS": "--gpus none"}

        # 1. a 2-rank job to success
        job, fields, out = run_batch(lab, w, env, write_spec(w, "slurm-ok", 10), 60)
        check(fields.get("JobState") == "COMPLETED" and fields.get("ExitCode") == "0:0",
              "batch job %s: %s %s, expected COMPLETED 0:0:\n%s" % (job, fields.get("JobState"),
                                                                    fields.get("ExitCode"), out))
        check(re.search(r"ringmaster job \S+ succeeded", out), "no success line:\n%s" % out)
        for node in ("rmn1", "rmn2"):
            check(re.search(r"agent %s: spawned rank" % node, out),
                  "no rank ran on %s:\n%s" % (node, out))

        # 2. scancel of node rmn2's agent step while the job runs. The job
        # is long (LONG steps: minutes even on a quiet machine), so the
        # scancel lands in it however fast the machine is; once its attempt
        # 2 trains, it is cancelled: the batch job's exit code is 4.
        cancelled = {}

        def cancel_step(job_id):
            rm_job = wait_until("a committed snapshot of the second job",
                                lambda: committed(batch_output(w, job_id)), 90)
            steps = [s for s in lab.steps(job_id) if s[1] == "ringworker-rmn2"]
            check(steps, "no agent step on rmn2: %r" % lab.steps(job_id))
            log("ringmaster job %s has a snapshot; scancel %s (%s on %s)" % (rm_job, steps[0][0], steps[0][1],
                                                                            steps[0][2]))
            lab.slurm("scancel", steps[0][0])
            cancelled["step"] = steps[0][0]
            wait_until("attempt 2 of %s training after the scancel" % rm_job,
                       lambda: re.search(r"\[rank %s/2/0\] step \d+/" % re.escape(rm_job), batch_output(w, job_id)),
                       90)
            log("ringmaster job %s trains again in attempt 2: cancelling it" % rm_job)
            rm_cancel(lab, batch_output(w, job_id), env, rm_job)

        job, fields, out = run_batch(lab, w, env, write_spec(w, "slurm-scancel", LONG, every=10), 200,
                                     during=cancel_step)
        check(fields.get("JobState") == "FAILED" and fields.get("ExitCode") == "4:0",
              "batch job %s after scancel of step %s and a cancel: %s %s, expected FAILED 4:0:\n%s" %
              (job, cancelled.get("step"), fields.get("JobState"), fields.get("ExitCode"), out))
        check("the agent step on rmn2 ended" in out and "starting it again" in out,
              "the script did not start rmn2's agent again:\n%s" % out)
        m = re.search(r"^restarts:\s+(\d+)", out, re.M)
        check(m and int(m.group(1)) >= 1, "the ringmaster job shows no restart after the scancel:\n%s" % out)

        # 3. a failed job is the batch job's failure, with its own exit code
        job, fields, out = run_batch(lab, w, env, write_spec(w, "slurm-bad", 5, train="tiny/missing.txt"), 60)
        check(fields.get("JobState") == "FAILED" and fields.get("ExitCode") == "3:0",
              "batch job %s of a failing job: %s %s, expected FAILED 3:0:\n%s" %
              (job, fields.get("JobState"), fields.get("ExitCode"), out))
        # 4. scontrol requeue: the batch gets SIGTERM (agents and coordinator
        # stopped, the ringmaster job left), runs again with the same Slurm
        # job id and follows the same ringmaster job, which resumes from its
        # snapshot; then it is cancelled (a long job, as in 2)
        first = {}

        def requeue(job_id):
            rm_job = wait_until("a committed snapshot of the requeued job",
                                lambda: committed(batch_output(w, job_id)), 90)
            first["rm_job"] = rm_job
            log("ringmaster job %s has a snapshot; scontrol requeue %s" % (rm_job, job_id))
            lab.slurm("scontrol", "requeue", str(job_id))
            resumed = r"resumed from \S*%s/step-(?s:.*)\[rank %s/\d+/0\] step \d+/" % (re.escape(rm_job),
                                                                                   re.escape(rm_job))
            wait_until("%s resumed from its snapshot after the requeue" % rm_job,
                       lambda: re.search(resumed, batch_output(w, job_id)), 120)
            log("ringmaster job %s resumed from its snapshot in the requeued batch: cancelling it" % rm_job)
            rm_cancel(lab, batch_output(w, job_id), env, rm_job)

        job, fields, out = run_batch(lab, w, env, write_spec(w, "slurm-requeue", LONG, every=10), 200,
                                     during=requeue)
        check(fields.get("JobState") == "FAILED" and fields.get("ExitCode") == "4:0",
              "requeued batch job %s, cancelled: %s %s, expected FAILED 4:0:\n%s" %
              (job, fields.get("JobState"), fields.get("ExitCode"), out))
        check(fields.get("Restarts") == "1", "batch job %s: Restarts=%s, expected 1" % (job, fields.get("Restarts")))
        check("SIGTERM: stopping the agents" in out, "the script did not see the requeue's SIGTERM:\n%s" % out)
        check("requeued batch: following ringmaster job %s again" % first["rm_job"] in out,
              "the requeued batch did not follow ringmaster job %s:\n%s" % (first["rm_job"], out))
        check(out.count("submitted ringmaster job") == 1,
              "the requeued batch submitted a second ringmaster job:\n%s" % out)
    except Failure:
        print(lab.logs())
        for name in sorted(os.listdir(w)):
            if name.startswith("batch-"):
                print("---- %s ----\n%s" % (name, batch_output(w, name[6:-4])[-6000:]))
        raise
    finally:
        lab.stop()


if __name__ == "__main__":
    run(main)
