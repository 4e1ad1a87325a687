"""The step-time watchdog through the whole system (DESIGN.md's fault table:
"collective hangs: rank-side watchdog on step time, reported to the
coordinator"): the real ringmasterd, one agent given --step-timeout-ms, and
a 1-rank job (so no peer's collective timeout can notice anything: only the
watchdog can). No snapshots: a stalled snapshot write on a loaded machine
must not look like a hang at this short bound.

The rank's training thread alone is frozen (ptrace PTRACE_SEIZE +
PTRACE_INTERRUPT of the main thread; its watcher thread keeps running), as a
compute or I/O hang would freeze it. The watcher sees no step end within the
bound, reports FAILED naming the watchdog and exits with status 8; the job
restarts in a new process and succeeds, every loss bitwise the
uninterrupted run's. Needs ptrace rights over the rank (root, or
ptrace_scope 0); else skipped with status 77.
"""
import ctypes
import os
import time

from cluster import Failure, Skip, check, log, rank_pid, run, tiny_spec, wait_until, wait_workers

STEPS = 60
PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207
WALL = 0x40000000  # __WALL


def spec(name):
    s = tiny_spec(name, world_size=1, batch_size=4, steps=STEPS, seed=5, max_restarts=2)
    # a step takes a few tens of milliseconds: the freeze lands mid-run
    s["model"] = {"n_layer": 4, "n_head": 4, "n_embd": 128, "vocab_size": 256, "seq_len": 64}
    return s


def freeze_main_thread(pid):
    """Stop thread `pid` (a process's main thread) alone; its other threads
    run on. Returns False when ptrace is not allowed."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.restype = ctypes.c_long
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    if libc.ptrace(PTRACE_SEIZE, pid, None, None) != 0:
        log("ptrace(PTRACE_SEIZE, %d): %s" % (pid, os.strerror(ctypes.get_errno())))
        return False
    check(libc.ptrace(PTRACE_INTERRUPT, pid, None, None) == 0,
          "ptrace(PTRACE_INTERRUPT): %s" % os.strerror(ctypes.get_errno()))
    return True


def reap_traced(pid, timeout):
    """Wait, as its tracer, until the traced thread is gone (the real parent,
    the agent, hears of the exit only once the tracer has reaped it). Stops
    are left as they are: the thread stays frozen."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            got, status = os.waitpid(pid, os.WNOHANG | WALL)
        except ChildProcessError:
            return
        if got == pid and (os.WIFEXITED(status) or os.WIFSIGNALED(status)):
            return
        time.sleep(0.01)
    raise Failure("rank pid %d still alive %s s after its training thread froze" % (pid, timeout))


def main(c, _args):
    d = c.start_daemon(["--heartbeat-ms", "200", "--restart-backoff-ms", "100"])
    c.start_agent("n1", devices="cpu:1", extra_args=["--step-timeout-ms", "3000"])
    wait_workers(d, ["n1"])

    ref = d.submit(spec("reference"))["id"]
    d.wait_state(ref, {"succeeded"}, timeout=300)
    want = d.losses(ref)
    check(sorted(want) == list(range(1, STEPS + 1)), "reference steps %s" % sorted(want))

    job = d.submit(spec("frozen"))["id"]
    wait_until("step 10 of %s" % job, lambda: max(d.losses(job) or [0]) >= 10, 120)
    pid = wait_until("rank 0 of %s" % job, lambda: rank_pid(job, 0), 30)
    if not freeze_main_thread(pid):
        raise Skip("ptrace is not allowed here (needs root or kernel.yama.ptrace_scope 0)")
    t0 = time.time()
    log("froze the training thread of rank 0 (pid %d)" % pid)
    reap_traced(pid, 30)
    ev = wait_until("recovery of %s" % job,
                    lambda: [e for e in d.events(job) if e.get("type") == "recovered"], 60)[0]
    text = ev.get("reason") or ""
    log("%.1f s after the freeze: %s" % (time.time() - t0, text))
    check("watchdog: step" in text and "the training thread is stuck" in text,
          "the recovery names the watchdog: %r" % text)
    d.wait_state(job, {"succeeded"}, timeout=300)
    check(rank_pid(job, 0) != pid, "a new process for the stuck rank")
    for step, losses in d.all_losses(job).items():
        for loss in losses:
            check(loss == want[step], "step %d: loss %r, uninterrupted %r" % (step, loss, want[step]))
    log("the job recovered from the hang; every loss is the uninterrupted run's")


if __name__ == "__main__":
    run(main)
