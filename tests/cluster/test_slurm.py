"""packaging/slurm/ringmaster.sbatch against a real Slurm: Debian's slurm-wlm
(slurmctld and two slurmd in network namespaces) and munge, configured by
tests/cluster/slurmlab.py in the test's temporary folder.

1. `sbatch -N 2 ringmaster.sbatch spec.json`: the script starts ringmasterd on
   the batch host and one `ringworker agent` step per node (srun), submits a
   2-rank CPU job and follows it: the batch job COMPLETED with exit code 0,
   one rank ran on each node.
2. The same with a longer job, and `scancel JOB.STEP` of node rmn2's agent
   step once the job has written a snapshot: the script starts that agent
   step again, the ringmaster job recovers its ranks from the snapshot
   (a restart in `ringctl show`) and succeeds, the batch job COMPLETED 0:0.
3. A job whose data is missing: the batch job FAILED with exit code 3 (the
   job's `failed`), not 0.
4. `scontrol requeue` of a running batch job: the script stops on SIGTERM
   and leaves the ringmaster job; the batch runs again (same Slurm job id),
   submits with the same idempotency key, follows the same ringmaster job,
   which resumes from its snapshot and succeeds: COMPLETED 0:0, Restarts=1.

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

        # 2. scancel of node rmn2's agent step while the job runs
        cancelled = {}

        def cancel_step(job_id):
            rm_job = wait_until("a committed snapshot of the second job",
                                lambda: committed(batch_output(w, job_id)), 60)
            steps = [s for s in lab.steps(job_id) if s[1] == "ringworker-rmn2"]
            check(steps, "no agent step on rmn2: %r" % lab.steps(job_id))
            log("ringmaster job %s has a snapshot; scancel %s (%s on %s)" % (rm_job, steps[0][0], steps[0][1],
                                                                            steps[0][2]))
            lab.slurm("scancel", steps[0][0])
            cancelled["step"] = steps[0][0]

        job, fields, out = run_batch(lab, w, env, write_spec(w, "slurm-scancel", 30, every=5), 120,
                                     during=cancel_step)
        check(fields.get("JobState") == "COMPLETED" and fields.get("ExitCode") == "0:0",
              "batch job %s after scancel of step %s: %s %s, expected COMPLETED 0:0:\n%s" %
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
        # snapshot
        first = {}

        def requeue(job_id):
            first["rm_job"] = wait_until("a committed snapshot of the requeued job",
                                         lambda: committed(batch_output(w, job_id)), 60)
            log("ringmaster job %s has a snapshot; scontrol requeue %s" % (first["rm_job"], job_id))
            lab.slurm("scontrol", "requeue", str(job_id))

        job, fields, out = run_batch(lab, w, env, write_spec(w, "slurm-requeue", 30, every=5), 120,
                                     during=requeue)
        check(fields.get("JobState") == "COMPLETED" and fields.get("ExitCode") == "0:0",
              "requeued batch job %s: %s %s, expected COMPLETED 0:0:\n%s" %
              (job, fields.get("JobState"), fields.get("ExitCode"), out))
        check(fields.get("Restarts") == "1", "batch job %s: Restarts=%s, expected 1" % (job, fields.get("Restarts")))
        check("SIGTERM: stopping the agents" in out, "the script did not see the requeue's SIGTERM:\n%s" % out)
        check("requeued batch: following ringmaster job %s again" % first["rm_job"] in out,
              "the requeued batch did not follow ringmaster job %s:\n%s" % (first["rm_job"], out))
        check(re.search(r"resumed from \S*%s/step-" % re.escape(first["rm_job"]), out),
              "the ringmaster job did not resume from its snapshot after the requeue:\n%s" % out)
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
