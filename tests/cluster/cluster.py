"""Helpers for the cluster tests: the real ringmasterd, real `ringworker
agent` processes and the ranks they spawn, on loopback (or in network
namespaces, test_netns.py). Standard library only; runs with /usr/bin/python3.

The daemon part follows tests/coordinator/daemon/rmtest.py (copied, not
imported, so the two suites can change independently)."""
import contextlib
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback


class Failure(Exception):
    pass


class Skip(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def log(msg):
    print("%.3f %s" % (time.time(), msg), flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def make_text_data(folder, seed=7, n_train=60000, n_val=6000):
    """Deterministic English-like text (byte tokens) in folder/train.txt and
    folder/val.txt."""
    os.makedirs(folder, exist_ok=True)
    words = ("the a ring master trains models on many ranks and every rank "
             "keeps its slice of the batch while gradients travel around the "
             "ring so that all of them agree on the same weights at each step "
             "loss falls slowly then faster when the learning rate warms up").split()
    rng = random.Random(seed)

    def text(n):
        out = []
        size = 0
        while size < n:
            sentence = " ".join(rng.choice(words) for _ in range(rng.randint(4, 12)))
            sentence = sentence[0].upper() + sentence[1:] + ".\n"
            out.append(sentence)
            size += len(sentence)
        return "".join(out)[:n]

    with open(os.path.join(folder, "train.txt"), "w") as f:
        f.write(text(n_train))
    with open(os.path.join(folder, "val.txt"), "w") as f:
        f.write(text(n_val))


def arch_of(args):
    """The architecture a parametrised test runs: --arch gpt2 (default) or
    llama among the test's extra arguments (meson passes it per variant)."""
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument("--arch", choices=["gpt2", "llama"], default="gpt2")
    return p.parse_known_args(args)[0].arch


def tensor_of(args):
    """The tensor-parallel size a parametrised test runs its first job at:
    --tensor T among the test's extra arguments (default 1)."""
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument("--tensor", type=int, default=1)
    return p.parse_known_args(args)[0].tensor


def model_section(arch, n_layer, n_head, n_embd, seq_len):
    """The model section of a test job: GPT-2, or a Llama of the same width
    and depth (grouped-query attention with half the heads as KV heads,
    SwiGLU width 2 n_embd, RoPE base 10000)."""
    m = {"n_layer": n_layer, "n_head": n_head, "n_embd": n_embd, "vocab_size": 256, "seq_len": seq_len}
    if arch == "llama":
        m = dict(m, arch="llama", n_kv_head=max(1, n_head // 2), ffn_dim=2 * n_embd, rope_theta=10000)
    return m


def tiny_spec(name, world_size, batch_size, steps, seed=1337, eval_every=0, max_restarts=0,
              arch="gpt2", tensor=1):
    """A tiny GPT-2 (or Llama, arch "llama") on the text made by
    make_text_data (paths relative to the agents' --data-root); tensor > 1:
    parallel.tensor (world_size is tensor x the data-parallel size,
    batch_size per data-parallel replica)."""
    s = {
        "name": name,
        "model": model_section(arch, 2, 2, 32, 32),
        "data": {"train": "tiny/train.txt", "val": "tiny/val.txt", "format": "text"},
        "train": {"steps": steps, "batch_size": batch_size, "grad_accum": 1, "lr": 3e-3,
                  "warmup_steps": 2, "seed": seed, "eval_every": eval_every, "eval_batches": 2},
        "parallel": {"world_size": world_size, "device": "cpu"},
        "checkpoint": {"every_steps": 0},
        "restart": {"max_restarts": max_restarts},
    }
    if tensor > 1:
        s["parallel"]["tensor"] = tensor
    return s


# request(token=...) default: the daemon's admin token
ADMIN = object()


class Daemon:
    """One ringmasterd process; `workdir` holds its database and log.

    Authentication is on by default: once the daemon is ready, `token` holds
    the admin token it wrote to admin.token beside its database, and
    request(), json() and submit() send it as "Authorization: Bearer"
    (token=None: no credential; token="rmt_...": that one). ctl_env() is the
    environment for ringctl (RINGMASTER_SERVER and RINGMASTER_TOKEN).
    """

    def __init__(self, binary, workdir, extra_args=(), host="127.0.0.1", prefix=()):
        self.binary = binary
        self.workdir = workdir
        self.db = os.path.join(workdir, "state", "rm.db")
        self.extra_args = list(extra_args)
        self.host = host
        self.prefix = list(prefix)  # e.g. ["ip", "netns", "exec", NS]
        self.proc = None
        self.log_path = os.path.join(workdir, "ringmasterd.log")
        self.token = None

    @property
    def admin_token_path(self):
        return os.path.join(os.path.dirname(self.db), "admin.token")

    def read_token(self):
        try:
            with open(self.admin_token_path) as f:
                self.token = f.read().strip() or None
        except FileNotFoundError:
            self.token = None
        return self.token

    def auth_headers(self, token=ADMIN):
        t = self.token if token is ADMIN else token
        return {"Authorization": "Bearer " + t} if t else {}

    def ctl_env(self, token=ADMIN, base=None):
        """The environment to run ringctl against this daemon."""
        env = dict(base if base is not None else os.environ)
        env["RINGMASTER_SERVER"] = self.url
        env.pop("RINGMASTER_TOKEN", None)
        t = self.token if token is ADMIN else token
        if t:
            env["RINGMASTER_TOKEN"] = t
        return env

    @property
    def endpoint(self):
        return "tcp://%s:%d" % (self.host, self.broker_port)

    @property
    def url(self):
        return "http://%s:%d" % (self.http_host, self.port)

    def start(self, http_host="127.0.0.1", same_ports=False):
        """Start (again, with same_ports: on the ports of the last start)."""
        if not same_ports:
            self.port = free_port()
            self.broker_port = free_port()
        self.http_host = http_host
        args = self.prefix + [self.binary, "--listen", "%s:%d" % (http_host, self.port),
                              "--broker", "tcp://%s:%d" % (self.host, self.broker_port),
                              "--db", self.db, "--log-level", "info", "--submit-rate", "0"] + self.extra_args
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise Failure("ringmasterd exited with %s at start:\n%s" %
                              (self.proc.returncode, self.logtext()))
            try:
                st, _ = self.request("GET", "/readyz", timeout=2, token=None)
                if st == 200:
                    self.read_token()
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        raise Failure("ringmasterd not ready after 20 s:\n%s" % self.logtext())

    def logtext(self, n=6000):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")[-n:]
        except OSError:
            return ""

    def request(self, method, path, body=None, timeout=30, token=ADMIN):
        c = http.client.HTTPConnection(self.http_host, self.port, timeout=timeout)
        try:
            h = self.auth_headers(token)
            if body is not None:
                body = json.dumps(body).encode()
                h["Content-Type"] = "application/json"
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def json(self, method, path, body=None, expect=200, token=ADMIN):
        st, data = self.request(method, path, body, token=token)
        check(st == expect, "%s %s: expected %s, got %s: %r" % (method, path, expect, st, data[:500]))
        return json.loads(data) if data else None

    def submit(self, spec):
        return self.json("POST", "/v1/jobs", spec, expect=201)

    def job(self, job_id):
        return self.json("GET", "/v1/jobs/%s" % job_id)

    def wait_state(self, job_id, states, timeout=120):
        """Poll until the job is in one of `states`; return the job. A job that
        ends in another final state fails at once."""
        final = {"succeeded", "failed", "cancelled"}
        deadline = time.time() + timeout
        job = None
        while time.time() < deadline:
            job = self.job(job_id)
            if job["state"] in states:
                return job
            if job["state"] in final:
                raise Failure("job %s ended %s (%s), expected %s" %
                              (job_id, job["state"], job.get("state_reason"), states))
            time.sleep(0.05)
        raise Failure("job %s still %s after %s s, expected %s" %
                      (job_id, job and job["state"], timeout, states))

    def metrics(self, job_id):
        """The job's metric rows, oldest first (GET /v1/jobs/{id}/metrics)."""
        doc = self.json("GET", "/v1/jobs/%s/metrics" % job_id)
        rows = doc.get("metrics", doc.get("points")) if isinstance(doc, dict) else doc
        check(isinstance(rows, list), "metrics: unexpected shape %r" % (doc,))
        return rows

    def losses(self, job_id):
        """{step: loss} from the job's metrics (one row per step)."""
        out = {}
        for row in self.metrics(job_id):
            if row.get("loss") is not None:
                out[int(row["step"])] = row["loss"]
        return out

    def all_losses(self, job_id):
        """{step: [the loss of every row of that step]} over every page of
        GET /v1/jobs/{id}/metrics (a step has one row per attempt that ran it)."""
        out, since = {}, None
        while True:
            doc = self.json("GET", "/v1/jobs/%s/metrics?limit=1000" % job_id +
                            ("&since_step=%d" % since if since else ""))
            for row in doc["metrics"]:
                if row.get("loss") is not None:
                    out.setdefault(int(row["step"]), []).append(row["loss"])
            since = doc.get("next_since_step")
            if since is None:
                return out

    def events(self, job_id):
        return self.json("GET", "/v1/jobs/%s/events?limit=1000" % job_id)["events"]

    def workers(self):
        return self.json("GET", "/v1/workers")["workers"]

    def kill9(self):
        self.proc.kill()
        self.proc.wait()
        self.log.close()
        self.proc = None

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            self.log.close()
            self.proc = None


class Agent:
    """One `ringworker agent` process."""

    def __init__(self, binary, workdir, coordinator, node, devices="cpu:2", data_root=None,
                 extra_args=(), prefix=()):
        self.args = list(prefix) + [binary, "agent", "--coordinator", coordinator, "--node", node,
                                    "--devices", devices] + list(extra_args)
        # CPU slots only unless the test says otherwise, so that a test means
        # the same on a machine with GPUs (the agent's default is --gpus auto).
        if "--gpus" not in extra_args:
            self.args += ["--gpus", "none"]
        if data_root:
            self.args += ["--data-root", data_root]
        self.node = node
        self.log_path = os.path.join(workdir, "agent-%s.log" % node)
        self.proc = None

    def start(self):
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT)
        return self

    def logtext(self, n=8000):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")[-n:]
        except OSError:
            return ""

    def stop(self, timeout=20):
        if not self.proc:
            return None
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
            except OSError:
                pass
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise Failure("agent %s did not stop within %s s after SIGTERM" % (self.node, timeout))
        self.log.close()
        return self.proc.returncode


def rank_processes(job_id=None):
    """PIDs of live `ringworker rank` processes (of one job when given), from
    /proc (zombies excluded)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                argv = f.read().split(b"\0")
            with open("/proc/%s/stat" % d) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if len(argv) < 2 or argv[1] != b"rank" or not argv[0].endswith(b"ringworker"):
            continue
        if state == "Z":
            continue
        if job_id is not None:
            try:
                i = argv.index(b"--job")
            except ValueError:
                continue
            if argv[i + 1].decode() != job_id:
                continue
        out.append(int(d))
    return out


def rank_pid(job_id, rank):
    """The pid of rank `rank` of the job's running attempt, or None."""
    for pid in rank_processes(job_id):
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        i = argv.index(b"--rank")
        if argv[i + 1] == str(rank).encode():
            return pid
    return None


@contextlib.contextmanager
def fake_gpus(fake_dir, gpus):
    """While in the block (an agent started there keeps them): the test-only
    fake NVML (tests/worker/gpus, built into fake_dir) on LD_LIBRARY_PATH,
    offering `gpus` (FAKE_NVML_GPUS: "name|bytes|uuid;..."), and no
    CUDA_VISIBLE_DEVICES."""
    saved = {k: os.environ.get(k) for k in ("LD_LIBRARY_PATH", "FAKE_NVML_GPUS", "CUDA_VISIBLE_DEVICES")}
    os.environ["LD_LIBRARY_PATH"] = fake_dir + (":" + saved["LD_LIBRARY_PATH"] if saved["LD_LIBRARY_PATH"] else "")
    os.environ["FAKE_NVML_GPUS"] = gpus
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def wait_until(what, fn, timeout):
    """Poll fn() every 20 ms until it returns something true (returned), or
    fail naming `what` after `timeout` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.02)
    raise Failure("%s: not within %s s" % (what, timeout))


def wait_no_ranks(job_id, timeout):
    """Wait until no rank process of the job is alive; return that time."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not rank_processes(job_id):
            return time.time()
        time.sleep(0.05)
    raise Failure("job %s: rank processes %r still alive %s s later" %
                  (job_id, rank_processes(job_id), timeout))


def wait_workers(daemon, nodes, timeout=30):
    deadline = time.time() + timeout
    seen = []
    while time.time() < deadline:
        seen = [w for w in daemon.workers() if w.get("node") in nodes and w.get("state") == "alive"]
        if len(seen) == len(nodes):
            return seen
        time.sleep(0.05)
    raise Failure("workers %s not all registered after %s s: %r" % (nodes, timeout, daemon.workers()))


def join_args(daemon, workdir, node):
    """--state-dir and, for a node not enrolled yet, --join-token: every
    agent of the cluster tests (and benchmarks) enrolls its own CURVE key
    for real (a one-time join token from POST /v1/workers/join-tokens),
    unless the daemon runs with --broker-auth off."""
    state_dir = os.path.join(workdir, "agent-state-%s" % node)
    args = ["--state-dir", state_dir]
    extra = daemon.extra_args
    auth_off = any(a == "--broker-auth" and i + 1 < len(extra) and extra[i + 1] == "off"
                   for i, a in enumerate(extra))
    if not auth_off and not os.path.exists(os.path.join(state_dir, "enrolled")):
        tok = daemon.json("POST", "/v1/workers/join-tokens", {"uses": 1}, expect=201)
        args += ["--join-token", tok["token"]]
    return args


class Cluster:
    """A daemon and agents in a temporary folder; everything is stopped and
    logs printed on failure by run()."""

    def __init__(self, bins, workdir):
        self.bins = bins
        self.workdir = workdir
        self.daemon = None
        self.agents = []
        self.data_root = os.path.join(workdir, "data")
        make_text_data(os.path.join(self.data_root, "tiny"))

    def start_daemon(self, extra_args=(), **kw):
        self.daemon = Daemon(self.bins["ringmasterd"], self.workdir, extra_args, **kw).start()
        return self.daemon

    def join_args(self, node):
        return join_args(self.daemon, self.workdir, node)

    def start_agent(self, node, devices="cpu:2", extra_args=(), **kw):
        a = Agent(self.bins["ringworker"], self.workdir, self.daemon.endpoint, node, devices,
                  self.data_root, list(extra_args) + self.join_args(node), **kw).start()
        self.agents.append(a)
        return a

    def stop(self):
        for a in self.agents:
            try:
                a.stop()
            except Failure as e:
                log(str(e))
        if self.daemon:
            self.daemon.stop()

    def check_sanitizers(self):
        """Fail on any sanitizer report in the daemon's, agents' or ranks'
        output (the ranks' stderr is in their agent's log)."""
        marks = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")
        logs = ([self.daemon.log_path] if self.daemon else []) + [a.log_path for a in self.agents]
        for path in logs:
            try:
                with open(path, errors="replace") as f:
                    text = f.read()
            except OSError:
                continue
            for m in marks:
                i = text.find(m)
                if i >= 0:
                    raise Failure("sanitizer report in %s:\n%s" % (path, text[max(0, i - 200):i + 3000]))

    def dump_logs(self):
        if self.daemon:
            print("---- ringmasterd log ----\n%s" % self.daemon.logtext())
        for a in self.agents:
            print("---- agent %s log ----\n%s" % (a.node, a.logtext()))


def on_sigterm(signum, frame):
    sys.stderr.write("killed by SIGTERM (the test's timeout?) here:\n" + "".join(traceback.format_stack(frame)))
    sys.stderr.flush()
    sys.exit("FAIL: terminated (timeout?)")


def run(main):
    """Parse --ringmasterd/--ringworker/--ringctl, run main(cluster, args) in a
    temporary folder, exit 0 (ok), 1 (failure) or 77 (skipped)."""
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument("--ringmasterd", required=True)
    p.add_argument("--ringworker", required=True)
    p.add_argument("--ringctl")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args, rest = p.parse_known_args()
    bins = {"ringmasterd": os.path.abspath(args.ringmasterd),
            "ringworker": os.path.abspath(args.ringworker),
            "ringctl": os.path.abspath(args.ringctl) if args.ringctl else None}
    # meson stops a test that runs too long with SIGTERM: say where it was
    # waiting, then unwind through the finally below so that processes (and
    # namespaces) are cleaned up.
    signal.signal(signal.SIGTERM, on_sigterm)
    workdir = tempfile.mkdtemp(prefix="rm-cluster-test-")
    os.chmod(workdir, 0o755)
    cluster = Cluster(bins, workdir)
    code = 1
    try:
        main(cluster, rest)
        cluster.stop()
        cluster.check_sanitizers()
        print("ok")
        code = 0
    except Skip as e:
        print("SKIP: %s" % e)
        code = 77
    except Failure as e:
        print("FAIL: %s" % e)
        cluster.dump_logs()
    except Exception:
        traceback.print_exc()
        cluster.dump_logs()
    finally:
        cluster.stop()
        if args.keep:
            print("kept %s" % workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    sys.stdout.flush()
    sys.exit(code)
