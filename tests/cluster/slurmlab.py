"""A two-node Slurm on one machine, for tests/cluster/test_slurm.py and
bench/slurm: Debian's slurm-wlm (slurmctld, two slurmd) and munge, each
configured in a temporary folder (its own slurm.conf, munge key and socket,
state and spool folders, ports), nothing from /etc used.

The two nodes are two network namespaces joined by a bridge in a third, as
tests/cluster/test_netns.py does, because Debian's slurmd is not built with
multiple-slurmd support (two slurmd on one address):

    ns C: br0 10.232.<n>.1/24  slurmctld
    ns A: veth 10.232.<n>.2    slurmd -N rmn1 (node rmn1)
    ns B: veth 10.232.<n>.3    slurmd -N rmn2 (node rmn2)

munged runs in the root namespace; its socket is a file, reached from every
namespace. Slurm's client commands (sbatch, squeue, scancel, scontrol) run
in ns C with SLURM_CONF set (Lab.slurm()). Lab.stop() stops every daemon this
module started (by pid) and deletes the namespaces, on failure too.

Standard library only."""
import os
import shutil
import signal
import socket
import subprocess
import time

from cluster import Failure, Skip, log

NEEDED = ("nsenter", "munged", "slurmctld", "slurmd", "sbatch", "srun", "scancel", "squeue", "scontrol")


def sh(*args, check_rc=True, timeout=30, env=None):
    p = subprocess.run(list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                       env=env)
    if check_rc and p.returncode != 0:
        raise Failure("%s: exit %d: %s" % (" ".join(args), p.returncode, p.stdout.decode().strip()))
    return p


def find(name):
    for d in ("/usr/sbin", "/usr/bin", "/sbin"):
        p = os.path.join(d, name)
        if os.access(p, os.X_OK):
            return p
    return shutil.which(name)


def check_available():
    """Raise Skip when this machine cannot run the lab."""
    if os.geteuid() != 0:
        raise Skip("needs root (network namespaces, slurmd runs jobs as their user)")
    missing = [n for n in NEEDED if not find(n)]
    if missing:
        raise Skip("Slurm or munge is not installed (missing %s: apt-get install slurm-wlm munge)" %
                   ", ".join(missing))
    if not shutil.which("ip"):
        raise Skip("`ip` (iproute2) is not installed")


class Lab:
    """Two Slurm nodes (rmn1, rmn2) with `cpus` CPUs each in one partition."""

    def __init__(self, workdir, cpus=2):
        self.workdir = workdir
        self.dir = os.path.join(workdir, "slurm")
        self.cpus = cpus
        tag = "rms%d" % (os.getpid() % 100000)
        self.ns = {"C": tag + "c", "A": tag + "a", "B": tag + "b"}
        self.net = "10.232.%d" % (os.getpid() % 200 + 1)
        self.addr = {"C": self.net + ".1", "A": self.net + ".2", "B": self.net + ".3"}
        self.nodes = {"rmn1": "A", "rmn2": "B"}
        self.made = []
        self.procs = []
        self.conf = os.path.join(self.dir, "slurm.conf")
        self.socket = os.path.join(self.dir, "munge", "munge.socket")

    # ---- network ----------------------------------------------------------
    def _net(self):
        probe = self.ns["C"] + "p"
        p = subprocess.run(["ip", "netns", "add", probe], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if p.returncode != 0:
            raise Skip("`ip netns add` does not work here: %s" % p.stdout.decode().strip())
        sh("ip", "netns", "del", probe)
        C, A, B = self.ns["C"], self.ns["A"], self.ns["B"]
        for ns in (C, A, B):
            sh("ip", "netns", "add", ns)
            self.made.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", C, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", C, "addr", "add", self.addr["C"] + "/24", "dev", "br0")
        sh("ip", "-n", C, "link", "set", "br0", "up")
        for key in ("A", "B"):
            ns = self.ns[key]
            sh("ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", "p" + key, "netns", C)
            sh("ip", "-n", C, "link", "set", "p" + key, "master", "br0")
            sh("ip", "-n", C, "link", "set", "p" + key, "up")
            sh("ip", "-n", ns, "addr", "add", self.addr[key] + "/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")

    # ---- configuration ----------------------------------------------------
    def _write_conf(self):
        for sub in ("munge", "ctld", "spool-rmn1", "spool-rmn2", "log"):
            os.makedirs(os.path.join(self.dir, sub), exist_ok=True)
        os.chmod(self.dir, 0o755)
        os.chmod(os.path.join(self.dir, "munge"), 0o700)
        key = os.path.join(self.dir, "munge", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        host = socket.gethostname().split(".")[0]
        base = 16000 + (os.getpid() % 2000) * 2
        d = self.dir
        lines = [
            "# written by tests/cluster/slurmlab.py",
            "ClusterName=rmtest",
            "SlurmctldHost=%s(%s)" % (host, self.addr["C"]),
            "SlurmctldPort=%d" % base,
            "SlurmdPort=%d" % (base + 1),
            "AuthType=auth/munge",
            "CredType=cred/munge",
            # cred_expire: also how long a requeued job waits before it may
            # start again (120 s by default)
            "AuthInfo=socket=%s,cred_expire=10" % self.socket,
            "SlurmUser=root",
            "SlurmdUser=root",
            "StateSaveLocation=%s/ctld" % d,
            "SlurmdSpoolDir=%s/spool-%%n" % d,
            "SlurmctldPidFile=%s/slurmctld.pid" % d,
            "SlurmdPidFile=%s/slurmd-%%n.pid" % d,
            "SlurmctldLogFile=%s/log/slurmctld.log" % d,
            "SlurmdLogFile=%s/log/slurmd-%%n.log" % d,
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "SchedulerType=sched/builtin",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "ReturnToService=2",
            "SlurmdTimeout=30",
            "InactiveLimit=0",
            "KillWait=5",
            "MinJobAge=600",
            "SchedulerParameters=sched_interval=1",
            "NodeName=rmn1 NodeAddr=%s CPUs=%d State=UNKNOWN" % (self.addr["A"], self.cpus),
            "NodeName=rmn2 NodeAddr=%s CPUs=%d State=UNKNOWN" % (self.addr["B"], self.cpus),
            "PartitionName=rm Nodes=rmn1,rmn2 Default=YES MaxTime=INFINITE State=UP",
        ]
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")

    def _spawn(self, name, args):
        logf = open(os.path.join(self.dir, "log", name + ".out"), "ab")
        p = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        logf.close()
        self.procs.append((name, p))
        return p

    def enter(self, key):
        """The command prefix that runs in namespace `key` ("C", "A", "B").
        nsenter, not `ip netns exec`: that one mounts a fresh /sys, without
        the cgroup file systems slurmd's cgroup plugin looks for."""
        return ["nsenter", "--net=/run/netns/" + self.ns[key]]

    def env(self):
        e = dict(os.environ)
        e["SLURM_CONF"] = self.conf
        return e

    def start(self):
        self._net()
        self._write_conf()
        m = os.path.join(self.dir, "munge")
        self._spawn("munged", [find("munged"), "-F", "--force", "--socket=" + self.socket,
                               "--key-file=" + os.path.join(m, "munge.key"),
                               "--pid-file=" + os.path.join(m, "munged.pid"),
                               "--seed-file=" + os.path.join(m, "munged.seed"),
                               "--log-file=" + os.path.join(self.dir, "log", "munged.log")])
        deadline = time.time() + 10
        while not os.path.exists(self.socket):
            if time.time() > deadline:
                raise Failure("munged did not make its socket:\n%s" % self.logs())
            time.sleep(0.05)
        self._spawn("slurmctld", self.enter("C") + [find("slurmctld"), "-D", "-i", "-f", self.conf])
        for node, key in self.nodes.items():
            self._spawn("slurmd-" + node, self.enter(key) + [find("slurmd"), "-D", "-f", self.conf,
                                                   "-N", node])
        deadline = time.time() + 30
        out = ""
        while time.time() < deadline:
            for name, p in self.procs:
                if p.poll() is not None:
                    raise Failure("%s exited with %s at start:\n%s" % (name, p.returncode, self.logs()))
            r = self.slurm("sinfo", "-h", "-N", "-o", "%N %T", check_rc=False)
            out = r.stdout.decode()
            states = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
            if all(states.get(n) == "idle" for n in self.nodes):
                log("slurm: nodes idle: %s" % states)
                return self
            time.sleep(0.2)
        raise Failure("slurm nodes not idle after 30 s (sinfo: %r):\n%s" % (out, self.logs()))

    def slurm(self, *args, check_rc=True, timeout=30):
        """Run a Slurm client command in ns C."""
        return sh(*self.enter("C"), find(args[0]) or args[0], *args[1:],
                  check_rc=check_rc, timeout=timeout, env=self.env())

    def sbatch(self, args, script, script_args=(), env=None):
        """Submit; return the Slurm job id."""
        e = self.env()
        e.update(env or {})
        p = subprocess.run(self.enter("C") + [find("sbatch"), "--parsable"] + list(args) +
                           [script] + list(script_args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           env=e, timeout=30, cwd=self.workdir)
        if p.returncode != 0:
            raise Failure("sbatch: exit %d: %s" % (p.returncode, p.stdout.decode()))
        return p.stdout.decode().strip().split(";")[0]

    def job(self, job_id):
        """{field: value} of `scontrol show job -o ID`."""
        r = self.slurm("scontrol", "show", "job", "-o", str(job_id), check_rc=False)
        out = {}
        for tok in r.stdout.decode().split():
            k, _, v = tok.partition("=")
            out.setdefault(k, v)
        return out

    def wait_job(self, job_id, timeout):
        """Wait until the batch job ends; return its scontrol fields."""
        deadline = time.time() + timeout
        j = {}
        while time.time() < deadline:
            j = self.job(job_id)
            if j.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                                     "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"):
                return j
            time.sleep(0.2)
        raise Failure("slurm job %s not ended after %s s: %s" % (job_id, timeout, j.get("JobState")))

    def steps(self, job_id):
        """[(step id, step name, node list)] of the job's running steps."""
        r = self.slurm("squeue", "-h", "-s", "-j", str(job_id), "-o", "%i %j %N", check_rc=False)
        out = []
        for line in r.stdout.decode().splitlines():
            parts = line.split()
            if len(parts) == 3:
                out.append(tuple(parts))
        return out

    def logs(self, n=3000):
        out = []
        d = os.path.join(self.dir, "log")
        for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            try:
                with open(os.path.join(d, name), errors="replace") as f:
                    text = f.read()
            except OSError:
                continue
            if text.strip():
                out.append("---- %s ----\n%s" % (name, text[-n:]))
        return "\n".join(out)

    def stop(self):
        """Cancel what is left, stop every daemon by pid (TERM, then KILL),
        delete the namespaces."""
        if any(n == "slurmctld" and p.poll() is None for n, p in self.procs):
            self.slurm("scancel", "--full", "--partition=rm", check_rc=False)
            time.sleep(0.5)
        for name, p in reversed(self.procs):
            if p.poll() is None:
                # the session's process group: slurmd and the slurmstepd it forked
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except OSError:
                    pass
        for name, p in reversed(self.procs):
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
                p.wait()
        self.procs = []
        for ns in self.made:
            # whatever still runs in a namespace (a step's leftover) goes with it
            pids = sh("ip", "netns", "pids", ns, check_rc=False).stdout.decode().split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (OSError, ValueError):
                    pass
            p = sh("ip", "netns", "del", ns, check_rc=False)
            if p.returncode != 0:
                log("ip netns del %s: %s" % (ns, p.stdout.decode().strip()))
        self.made = []
