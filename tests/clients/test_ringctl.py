#!/usr/bin/python3
"""ringctl driving the real ringmasterd on loopback.

Starts ringmasterd on free ports with a temporary database and the example
configuration (packaging/ringmasterd.conf, so this also proves the daemon
accepts that file), then uses ringctl as a person or a script would: submit,
jobs, show, cancel, events, workers, --json, RINGMASTER_SERVER, problem
details from an invalid spec, an unreachable server and bad usage.

Usage: test_ringctl.py RINGCTL RINGMASTERD SPEC_DIR CONF
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

RINGCTL = RINGMASTERD = SPEC_DIR = CONF = None


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(extra=None):
    env = {k: v for k, v in os.environ.items()
           if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
           and k not in ("RINGMASTER_SERVER", "RINGMASTER_TOKEN", "NOTIFY_SOCKET",
                         "WATCHDOG_USEC", "WATCHDOG_PID")}
    env["RINGCTL_CONFIG"] = "/nonexistent/ringctl.conf"  # the user's own file stays out of the tests
    env.update(extra or {})
    return env


class RingctlTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ringctl-test-")
        cls.port = free_port()
        cls.url = "http://127.0.0.1:%d" % cls.port
        cls.log_path = os.path.join(cls.tmp, "ringmasterd.log")
        cls.log = open(cls.log_path, "w")
        argv = [RINGMASTERD, "--config", CONF,
                "--listen", "127.0.0.1:%d" % cls.port,
                "--broker", "tcp://127.0.0.1:%d" % free_port(),
                "--db", os.path.join(cls.tmp, "x.db")]
        cls.daemon = subprocess.Popen(argv, stdout=cls.log, stderr=subprocess.STDOUT,
                                      env=clean_env())
        deadline = time.monotonic() + 20
        while True:
            if cls.daemon.poll() is not None:
                raise RuntimeError("ringmasterd exited with %d:\n%s"
                                   % (cls.daemon.returncode, cls.daemon_log()))
            try:
                with urllib.request.urlopen(cls.url + "/healthz", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                cls.stop_daemon()
                raise RuntimeError("ringmasterd not serving after 20 s:\n" + cls.daemon_log())
            time.sleep(0.05)
        with open(os.path.join(cls.tmp, "admin.token")) as f:
            cls.token = f.read().strip()

    @classmethod
    def daemon_log(cls):
        cls.log.flush()
        with open(cls.log_path) as f:
            return f.read()[-4000:]

    @classmethod
    def stop_daemon(cls):
        if cls.daemon.poll() is None:
            cls.daemon.terminate()
            try:
                cls.daemon.wait(timeout=10)
            except subprocess.TimeoutExpired:
                cls.daemon.kill()
                cls.daemon.wait()

    @classmethod
    def tearDownClass(cls):
        cls.stop_daemon()
        rc = cls.daemon.returncode
        cls.log.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        if rc != 0:
            raise RuntimeError("ringmasterd exited with %d after SIGTERM" % rc)

    def ctl(self, *args, stdin=None, env=None, server=True, cwd=None):
        """ringctl with the admin token in RINGMASTER_TOKEN unless env names one
        (env={"RINGMASTER_TOKEN": ""}: no token)."""
        argv = [RINGCTL] + (["--server", self.url] if server else []) + list(args)
        env = dict({"RINGMASTER_TOKEN": self.token}, **(env or {}))
        if not env["RINGMASTER_TOKEN"]:
            del env["RINGMASTER_TOKEN"]
        r = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=30,
                           env=clean_env(env), cwd=cwd)
        self.assertNotIn("Sanitizer", r.stderr)
        self.assertNotIn("runtime error:", r.stderr)
        return r

    def ok(self, *args, **kw):
        r = self.ctl(*args, **kw)
        self.assertEqual(r.returncode, 0, "ringctl %s: %s" % (" ".join(args), r.stderr))
        return r

    def submit(self, spec_name="spec-tiny.json"):
        r = self.ok("--json", "submit", os.path.join(SPEC_DIR, spec_name))
        job = json.loads(r.stdout)
        self.assertEqual(job["state"], "queued")
        return job

    # ---- the happy path -------------------------------------------------

    def test_submit_jobs_show_cancel_events(self):
        spec = os.path.join(SPEC_DIR, "spec-small.json")
        r = self.ok("submit", spec)
        self.assertRegex(r.stdout, r"^submitted job \S+ \(gpt2-tiny-cpu\): queued\n$")
        job_id = r.stdout.split()[2]

        # jobs: a header and our job, in aligned columns.
        r = self.ok("jobs", "--limit", "100")
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0].split(), ["ID", "NAME", "STATE", "PRIO", "WORLD", "CREATED"])
        rows = [l for l in lines[1:] if l.split()[0] == job_id]
        self.assertEqual(len(rows), 1, r.stdout)
        self.assertEqual(rows[0].split()[1:5], ["gpt2-tiny-cpu", "queued", "5", "2"])
        for col in ("NAME", "STATE", "PRIO", "WORLD", "CREATED"):
            start = lines[0].index(col)
            self.assertEqual(rows[0][start - 2:start], "  ", (col, rows[0]))
            self.assertNotEqual(rows[0][start], " ", (col, rows[0]))

        # show: key: value lines and the spec with defaults filled in.
        r = self.ok("show", job_id)
        lines = r.stdout.splitlines()
        fields = {l.split(":", 1)[0]: l.split(":", 1)[1].strip()
                  for l in lines if l and not l.startswith(" ") and l != "spec:"}
        self.assertEqual(fields["id"], job_id)
        self.assertEqual(fields["name"], "gpt2-tiny-cpu")
        self.assertEqual(fields["state"], "queued")
        spec_doc = json.loads("\n".join(lines[lines.index("spec:") + 1:]))
        self.assertEqual(spec_doc["data"]["train"], "data/tiny/train.bin")
        self.assertEqual(spec_doc["train"]["lr"], 0.0003)
        self.assertIn("n_layer", spec_doc["model"])

        # cancel, then the job says so everywhere.
        r = self.ok("cancel", job_id)
        self.assertEqual(r.stdout, "job %s: cancelled\n" % job_id)
        self.assertRegex(self.ok("show", job_id).stdout, r"(?m)^state: +cancelled$")
        r = self.ok("--json", "jobs", "--state", "cancelled", "--all")
        self.assertIn(job_id, [j["id"] for j in json.loads(r.stdout)["jobs"]])
        r = self.ok("jobs", "--state", "queued", "--all")
        self.assertNotIn(job_id, r.stdout)

        # events: a table whose rows include the move to cancelled.
        r = self.ok("events", job_id)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0].split()[:3], ["ID", "AT", "TYPE"])
        self.assertGreaterEqual(len(lines), 2, r.stdout)
        self.assertIn("cancelled", r.stdout)
        doc = json.loads(self.ok("events", job_id, "--json").stdout)
        self.assertIn("cancelled", [e.get("to") for e in doc["events"]])

        # A second cancel: done already (0) or refused with a problem (1).
        r = self.ctl("cancel", job_id)
        self.assertIn(r.returncode, (0, 1), r.stderr)
        if r.returncode == 1:
            self.assertRegex(r.stderr, r"^ringctl: 4\d\d [^\n]+\n$")

    def test_json_output_is_the_servers_json(self):
        job = self.submit()
        shown = json.loads(self.ok("show", job["id"], "--json").stdout)
        self.assertEqual(shown["id"], job["id"])
        self.assertEqual(shown["spec"], job["spec"])
        listed = json.loads(self.ok("--json", "jobs").stdout)
        self.assertIsInstance(listed["jobs"], list)
        self.assertIn("next_cursor", listed)
        cancelled = json.loads(self.ok("--json", "cancel", job["id"]).stdout)
        self.assertEqual(cancelled["state"], "cancelled")
        workers = json.loads(self.ok("--json", "workers").stdout)
        self.assertIsInstance(workers["workers"], list)

    def test_workers_table(self):
        r = self.ok("workers")
        self.assertEqual(r.stdout.splitlines()[0].split(), ["ID", "STATE", "DEVICES", "RANKS", "LAST", "SEEN"])

    def test_submit_stdin_quiet_and_idempotency(self):
        with open(os.path.join(SPEC_DIR, "spec-tiny.json")) as f:
            spec = f.read()
        key = "ringctl-test-%d" % os.getpid()
        first = self.ok("submit", "-q", "--idempotency-key", key, "-", stdin=spec).stdout.strip()
        again = self.ok("submit", "-q", "--idempotency-key", key, "-", stdin=spec).stdout.strip()
        self.assertTrue(first)
        self.assertEqual(first, again)
        other = self.ok("submit", "-q", "-", stdin=spec).stdout.strip()
        self.assertNotEqual(first, other)

    def test_paging_all(self):
        ids = {self.submit()["id"] for _ in range(3)}
        r = self.ok("jobs", "--limit", "1")
        self.assertEqual(len(r.stdout.splitlines()), 2)
        self.assertIn("--all", r.stderr)
        r = self.ok("jobs", "--limit", "1", "--all")
        self.assertEqual(r.stderr, "")
        listed = {l.split()[0] for l in r.stdout.splitlines()[1:]}
        self.assertTrue(ids <= listed, (ids, listed))
        doc = json.loads(self.ok("--json", "jobs", "--limit", "2", "--all").stdout)
        self.assertIsNone(doc["next_cursor"])
        self.assertTrue(ids <= {j["id"] for j in doc["jobs"]})
        self.assertEqual(len(doc["jobs"]), len({j["id"] for j in doc["jobs"]}))

    def test_names_are_shown_safely(self):
        spec = json.dumps({"name": "evil\n\x1b[31mred", "data": {"train": "x.bin"}})
        job_id = self.ok("submit", "-q", "-", stdin=spec).stdout.strip()
        r = self.ok("jobs", "--all")
        self.assertNotIn("\x1b", r.stdout)
        self.assertIn("evil??[31mred", r.stdout)
        shown = json.loads(self.ok("--json", "show", job_id).stdout)
        self.assertEqual(shown["name"], "evil\n\x1b[31mred")  # stored exactly

    # ---- tokens -----------------------------------------------------------

    def test_token_create_list_revoke(self):
        r = self.ok("token", "create", "--name", "ci-viewer", "--role", "viewer", "--expires", "30d")
        viewer = r.stdout.strip()
        self.assertRegex(viewer, r"^rmt_[A-Za-z0-9_-]{43}$")
        self.assertIn("Store it now", r.stderr)
        self.assertNotIn(viewer, r.stderr)
        r = self.ok("token", "list")
        rows = [l.split() for l in r.stdout.splitlines()]
        self.assertEqual(rows[0][:4], ["ID", "NAME", "ROLE", "PREFIX"])
        mine = [row for row in rows if row[1] == "ci-viewer"]
        self.assertEqual(len(mine), 1, r.stdout)
        self.assertEqual(mine[0][2:4], ["viewer", viewer[:12]])
        self.assertNotIn(viewer, r.stdout)  # never the secret
        listed = json.loads(self.ok("--json", "token", "list").stdout)["tokens"]
        self.assertTrue(all("token" not in t for t in listed))
        # the viewer reads but may not submit: 403 with what to do
        self.ok("jobs", env={"RINGMASTER_TOKEN": viewer})
        r = self.ctl("submit", os.path.join(SPEC_DIR, "spec-tiny.json"), env={"RINGMASTER_TOKEN": viewer})
        self.assertEqual(r.returncode, 1)
        self.assertIn("403", r.stderr)
        self.assertIn("operator", r.stderr)
        self.assertIn("ask an admin", r.stderr)
        # a duplicate name is refused
        r = self.ctl("token", "create", "--name", "ci-viewer", "--role", "viewer")
        self.assertEqual(r.returncode, 1)
        self.assertIn("409", r.stderr)
        # revoke by name: refused from the next request on
        r = self.ok("token", "revoke", "ci-viewer")
        self.assertRegex(r.stdout, r"^token \d+ \(ci-viewer\) revoked\n$")
        r = self.ctl("jobs", env={"RINGMASTER_TOKEN": viewer})
        self.assertEqual(r.returncode, 1)
        self.assertIn("401", r.stderr)
        self.assertIn("revoked", r.stderr)
        r = self.ctl("token", "revoke", "ci-viewer")
        self.assertEqual(r.returncode, 1)
        self.assertIn("no token named", r.stderr)
        # bad usage
        for args in (["token"], ["token", "create", "--name", "x"], ["token", "create", "--name", "x", "--role",
                     "viewer", "--expires", "soon"], ["token", "frob"]):
            r = self.ctl(*args)
            self.assertEqual(r.returncode, 64, "%r: %s" % (args, r.stderr))

    def test_no_token_says_what_to_do(self):
        r = self.ctl("jobs", env={"RINGMASTER_TOKEN": ""})
        self.assertEqual(r.returncode, 1)
        self.assertIn("401", r.stderr)
        self.assertIn("RINGMASTER_TOKEN", r.stderr)
        r = self.ctl("jobs", env={"RINGMASTER_TOKEN": "rmt_" + "A" * 43})
        self.assertEqual(r.returncode, 1)
        self.assertIn("not known", r.stderr)

    def test_token_from_config_file_and_admin_token_file(self):
        conf = os.path.join(self.tmp, "ringctl.conf")
        with open(conf, "w") as f:
            f.write("# ringctl\n[ringctl]\nserver = %s\ntoken = %s\n" % (self.url, self.token))
        self.ok("jobs", server=False, env={"RINGMASTER_TOKEN": "", "RINGCTL_CONFIG": conf})
        with open(conf, "w") as f:
            f.write("tokn = x\n")
        r = self.ctl("jobs", env={"RINGCTL_CONFIG": conf})
        self.assertEqual(r.returncode, 64)
        self.assertIn("ringctl.conf:1: unknown key", r.stderr)
        # ./state/admin.token of the folder ringctl runs in (the daemon's default db folder)
        here = os.path.join(self.tmp, "cwd")
        os.makedirs(os.path.join(here, "state"), exist_ok=True)
        with open(os.path.join(here, "state", "admin.token"), "w") as f:
            f.write(self.token + "\n")
        self.ok("jobs", env={"RINGMASTER_TOKEN": ""}, cwd=here)

    # ---- where to find the server ---------------------------------------

    def test_server_from_environment(self):
        job = self.submit()
        r = self.ok("show", job["id"], server=False, env={"RINGMASTER_SERVER": self.url})
        self.assertIn(job["id"], r.stdout)
        # --server beats the environment.
        r = self.ok("--server", self.url, "show", job["id"], server=False,
                    env={"RINGMASTER_SERVER": "http://127.0.0.1:1"})
        self.assertIn(job["id"], r.stdout)

    def test_unreachable_server_exits_2(self):
        dead = "http://127.0.0.1:%d" % free_port()
        r = self.ctl("jobs", server=False, env={"RINGMASTER_SERVER": dead})
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stdout, "")
        self.assertIn(dead + "/v1/jobs", r.stderr)
        self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)

    # ---- errors from the server -----------------------------------------

    def test_invalid_spec_prints_problem_detail(self):
        r = self.ctl("submit", os.path.join(SPEC_DIR, "spec-bad-heads.json"))
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stdout, "")
        self.assertRegex(r.stderr, r"^ringctl: 400 [^\n]*n_head[^\n]* \(at /model/n_head\)\n$")

    def test_missing_train_and_unknown_field(self):
        r = self.ctl("submit", "-", stdin='{"name": "no-data"}')
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stderr, r"^ringctl: 400 [^\n]*train[^\n]*\n$")
        r = self.ctl("submit", "-", stdin='{"data": {"train": "x"}, "nmae": "typo"}')
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stderr, r"^ringctl: 400 [^\n]*nmae[^\n]*\n$")

    def test_unknown_job_is_404(self):
        for cmd in ("show", "cancel", "events"):
            r = self.ctl(cmd, "no-such-job")
            self.assertEqual(r.returncode, 1, cmd)
            self.assertRegex(r.stderr, r"^ringctl: 404 [^\n]+\n$", cmd)

    def test_bad_state_filter_is_the_servers_400(self):
        r = self.ctl("jobs", "--state", "sleeping")
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stderr, r"^ringctl: 400 [^\n]*state[^\n]*\n$")

    def test_local_syntax_error_is_not_sent(self):
        r = self.ctl("submit", "-", stdin='{"data": ')
        self.assertEqual(r.returncode, 1)
        self.assertIn("not valid JSON", r.stderr)

    # ---- usage ----------------------------------------------------------

    def test_bad_usage_exits_64(self):
        for args in ([], ["frobnicate"], ["show"], ["show", "a", "b"], ["jobs", "--limit", "0"],
                     ["jobs", "--bogus"], ["--bogus", "jobs"], ["submit"], ["jobs", "extra"],
                     ["--server"]):
            r = self.ctl(*args)
            self.assertEqual(r.returncode, 64, (args, r.stderr))
            self.assertEqual(r.stdout, "", args)
            self.assertIn("Usage: ringctl", r.stderr, args)

    def test_help_and_version(self):
        r = self.ok("--help", server=False)
        for cmd in ("submit", "jobs", "show", "cancel", "events", "workers"):
            self.assertIn("  " + cmd, r.stdout)
        self.assertIn("Usage: ringctl", self.ok("jobs", "--help").stdout)
        self.assertRegex(self.ok("--version", server=False).stdout, r"^ringctl \d+\.\d+\.\d+")


def main():
    global RINGCTL, RINGMASTERD, SPEC_DIR, CONF
    if len(sys.argv) < 5:
        print(__doc__, file=sys.stderr)
        return 2
    RINGCTL, RINGMASTERD, SPEC_DIR, CONF = (os.path.abspath(a) for a in sys.argv[1:5])
    del sys.argv[1:5]
    unittest.main(verbosity=2)


if __name__ == "__main__":
    main()
