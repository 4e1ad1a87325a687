"""The dashboard in real headless Chromium (Debian's /usr/bin/chromium,
driven by playwright-core from clients/web/node_modules; nothing is
downloaded) against the real ringmasterd and a real `ringworker agent` with
two CPU slots (tests/cluster/cluster.py starts them on free ports).
dashboard.mjs drives the browser through: the login page (a wrong token
refused, the admin token signs in; the cookie is HttpOnly and SameSite=Strict),
the jobs page, the submit form
(prefilled with the default job; a bad spec shows its error at the field;
a small job submitted), the job page (the loss chart gains points, a rank
killed -9 shows the recovery on the timeline and the job goes on, logs,
checkpoints), the workers page, a cross-origin page's POST with the cookie
refused (403: Origin, CSRF), a request with the cookie and a foreign Host
refused (421), a cancel with its confirmation, and a sign-in by the
one-time code of `/?code=...` (the code leaves the address bar and works
once); no console errors on any page beyond the expected 401s. Screenshots of each page go to SHOT_DIR.

Usage: test_dashboard.py --ringmasterd BIN --ringworker BIN --shots DIR
Exit 77 (skipped) only when node or chromium is not installed.
"""
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "cluster"))

from cluster import Failure, Skip, log, run, tiny_spec, wait_workers  # noqa: E402

CHROMIUM = "/usr/bin/chromium"


def spec(name, steps, max_restarts):
    s = tiny_spec(name, world_size=2, batch_size=4, steps=steps, seed=11, eval_every=10,
                  max_restarts=max_restarts)
    # a few tens of ms per step on one core: the page sees the run live
    s["model"] = {"n_layer": 4, "n_head": 4, "n_embd": 128, "vocab_size": 256, "seq_len": 64}
    s["checkpoint"] = {"every_steps": 10, "keep_last": 3}
    return s


def main(cluster, rest):
    shots = None
    if "--shots" in rest:
        shots = rest[rest.index("--shots") + 1]
    node = shutil.which("node")
    if not node:
        raise Skip("node is not installed (scripts/deps installs it)")
    if not os.access(CHROMIUM, os.X_OK):
        raise Skip("%s is not installed (scripts/deps installs Debian's chromium)" % CHROMIUM)
    pw = os.path.join(ROOT, "clients", "web", "node_modules", "playwright-core")
    if not os.path.isdir(pw):
        raise Failure("%s is missing: run scripts/deps (npm ci in clients/web)" % pw)
    d = cluster.start_daemon(["--restart-backoff-ms", "100", "--restart-grace-ms", "2000"])
    ck = os.path.join(cluster.workdir, "checkpoints")
    cluster.start_agent("node-a", devices="cpu:2", extra_args=["--checkpoint-root", ck, "--comm-timeout-ms", "5000"])
    wait_workers(d, ["node-a"])
    shots = shots or os.path.join(cluster.workdir, "screenshots")
    os.makedirs(shots, exist_ok=True)
    env = dict(os.environ)
    env.update({
        "RM_URL": d.url,
        "RM_TOKEN": d.token,
        "RM_SHOTS": shots,
        "RM_CHROMIUM": CHROMIUM,
        "RM_PROFILE": os.path.join(cluster.workdir, "chromium-profile"),
        "RM_SPEC_LONG": json.dumps(spec("web-recovery", 3000, 3)),
        "RM_SPEC_BAD": json.dumps(dict(spec("web-bad", 10, 0), train=dict(spec("x", 10, 0)["train"], steps=-5))),
        "NODE_PATH": os.path.join(ROOT, "clients", "web", "node_modules"),
    })
    log("driving chromium against %s, screenshots in %s" % (d.url, shots))
    r = subprocess.run([node, os.path.join(HERE, "dashboard.mjs")], env=env, timeout=400)
    if r.returncode != 0:
        raise Failure("dashboard.mjs failed (rc %d)" % r.returncode)


if __name__ == "__main__":
    run(main)
