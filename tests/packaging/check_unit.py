#!/usr/bin/python3
"""Checks packaging/systemd/ringmasterd.service (or, with --agent,
packaging/systemd/ringworker-agent.service: its own directives below).

1. The directives the service depends on are there with the right values
   (Type=notify, WatchdogSec, ProtectSystem=strict, NoNewPrivileges,
   Restart=on-failure, DynamicUser or User, StateDirectory, ExecStart naming
   --config and a --db inside the state directory).
2. `systemd-analyze verify` finds nothing to say about the unit. verify needs
   ExecStart's binary to exist, so it runs on a copy whose ExecStart is the
   built ringmasterd (or /bin/true when the daemon is not built yet). Its
   exit status is 0 even for unknown keys, so any message naming the copy
   fails the test; messages about other units on this machine are shown only.
   A copy with a deliberate typo must be flagged, proving the check can fail.
3. `systemd-analyze security --offline` rates the sandbox at most 2.0.

The agent's unit is checked for: Restart=on-failure, a User= of its own
(never root, never DynamicUser: checkpoints outlive the service), a
StateDirectory (its enrolled key pair), ProtectSystem=strict, NoNewPrivileges,
ExecStart running `ringworker agent --coordinator`, the same exposure bound.

Usage: check_unit.py [--agent] UNIT [BINARY]
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

EXPOSURE_MAX = 2.0


def parse_unit(text):
    """{section: [(key, value), ...]}, keys in order, repeats kept."""
    sections, current = {}, None
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        while line.endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line[:-1] + " " + lines[i].strip()
        i += 1
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
            sections.setdefault(current, [])
            continue
        if current is None or "=" not in line:
            raise ValueError("bad line: " + line)
        key, value = line.split("=", 1)
        sections[current].append((key.strip(), value.strip()))
    return sections


def check_directives(sections):
    errors = []
    service = sections.get("Service", [])

    def values(key):
        return [v for k, v in service if k == key]

    def want(key, expected):
        got = values(key)
        if not got or got[-1] != expected:
            errors.append("[Service] %s=%s expected (got %s)" % (key, expected, got or "nothing"))

    want("Type", "notify")
    want("ProtectSystem", "strict")
    want("NoNewPrivileges", "yes")
    want("Restart", "on-failure")
    want("PrivateTmp", "yes")
    want("ProtectHome", "yes")
    wd = values("WatchdogSec")
    if not wd or not re.fullmatch(r"[1-9][0-9]*s?", wd[-1]):
        errors.append("[Service] WatchdogSec= must be a positive number of seconds (got %s)" % wd)
    if values("DynamicUser") != ["yes"] and not values("User"):
        errors.append("[Service] needs DynamicUser=yes or User= (never run as root)")
    state = values("StateDirectory")
    if not state:
        errors.append("[Service] StateDirectory= missing")
    for key in ("TimeoutStopSec", "RestartSec", "SystemCallFilter", "RestrictAddressFamilies"):
        if not values(key):
            errors.append("[Service] %s= missing" % key)
    exec_start = values("ExecStart")
    if len(exec_start) != 1:
        errors.append("[Service] exactly one ExecStart= expected (got %s)" % exec_start)
    else:
        argv = exec_start[0].split()
        if not argv[0].startswith("/") or not argv[0].endswith("/ringmasterd"):
            errors.append("ExecStart must run ringmasterd by absolute path (got %s)" % argv[0])
        if "--config" not in argv or "--db" not in argv:
            errors.append("ExecStart must pass --config and --db (got %s)" % exec_start[0])
        elif state and not argv[argv.index("--db") + 1].startswith("/var/lib/%s/" % state[-1]):
            errors.append("--db must be inside StateDirectory /var/lib/%s/" % state[-1])
    families = " ".join(values("RestrictAddressFamilies")).split()
    for family in ("AF_UNIX", "AF_INET", "AF_INET6"):
        if family not in families:
            errors.append("RestrictAddressFamilies must allow %s (sd_notify, TCP)" % family)
    if ("WantedBy", "multi-user.target") not in sections.get("Install", []):
        errors.append("[Install] WantedBy=multi-user.target missing")
    return errors


def check_agent_directives(sections):
    errors = []
    service = sections.get("Service", [])

    def values(key):
        return [v for k, v in service if k == key]

    for key, expected in (("Restart", "on-failure"), ("ProtectSystem", "strict"),
                          ("NoNewPrivileges", "yes"), ("PrivateTmp", "yes"), ("ProtectHome", "yes")):
        got = values(key)
        if not got or got[-1] != expected:
            errors.append("[Service] %s=%s expected (got %s)" % (key, expected, got or "nothing"))
    user = values("User")
    if not user or user[-1] in ("root", "0"):
        errors.append("[Service] needs User= of its own (got %s)" % (user or "nothing"))
    if values("DynamicUser") == ["yes"]:
        errors.append("[Service] DynamicUser=yes would orphan the checkpoints' owner")
    if not values("StateDirectory"):
        errors.append("[Service] StateDirectory= missing (the agent's key pair)")
    exec_start = values("ExecStart")
    if len(exec_start) != 1:
        errors.append("[Service] exactly one ExecStart= expected (got %s)" % exec_start)
    else:
        argv = exec_start[0].split()
        if not argv[0].startswith("/") or not argv[0].endswith("/ringworker") or argv[1:2] != ["agent"]:
            errors.append("ExecStart must run `ringworker agent` by absolute path (got %s)" % exec_start[0])
        if "--coordinator" not in argv:
            errors.append("ExecStart must pass --coordinator")
    if ("WantedBy", "multi-user.target") not in sections.get("Install", []):
        errors.append("[Install] WantedBy=multi-user.target missing")
    return errors


def verify(unit_path):
    """Runs systemd-analyze verify; returns (lines about this unit, other lines)."""
    env = dict(os.environ, SYSTEMD_LOG_LEVEL="info",
               SYSTEMD_LOG_COLOR="0", SYSTEMD_PAGER="")
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", unit_path],
                       capture_output=True, text=True, env=env, timeout=30)
    ours, others = [], []
    name = os.path.basename(unit_path)
    for line in (r.stdout + r.stderr).splitlines():
        if not line.strip():
            continue
        (ours if unit_path in line or name in line else others).append(line)
    if r.returncode != 0 and not ours:
        ours.append("systemd-analyze verify exited %d" % r.returncode)
    return ours, others


def exposure(unit_path):
    """The overall exposure score, or None where --offline is not supported."""
    r = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager", unit_path],
                       capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, SYSTEMD_LOG_COLOR="0", SYSTEMD_COLORS="0"))
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", r.stdout + r.stderr)
    return float(m.group(1)) if m else None


def main():
    args = sys.argv[1:]
    agent = bool(args) and args[0] == "--agent"
    if agent:
        args = args[1:]
    if len(args) not in (1, 2):
        print(__doc__, file=sys.stderr)
        return 2
    unit_src = args[0]
    daemon = args[1] if len(args) == 2 and args[1] else None
    with open(unit_src) as f:
        text = f.read()

    errors = (check_agent_directives if agent else check_directives)(parse_unit(text))
    for e in errors:
        print("FAIL:", e)
    if not errors:
        print("ok: required directives present")

    if not shutil.which("systemd-analyze"):
        print("SKIP: systemd-analyze not found; verify not run")
        return 1 if errors else 77
    target = os.path.abspath(daemon) if daemon else shutil.which("true")
    if not daemon:
        print("note: the binary is not built; verifying with ExecStart=%s" % target)
    with tempfile.TemporaryDirectory(prefix="rm-unit-") as tmp:
        copy = os.path.join(tmp, os.path.basename(unit_src))
        new_text, n = re.subn(r"(?m)^ExecStart=\S+", "ExecStart=" + target, text)
        if n != 1:
            print("FAIL: cannot rewrite ExecStart in the copy")
            return 1
        with open(copy, "w") as f:
            f.write(new_text)
        ours, others = verify(copy)
        for line in others:
            print("note (not this unit):", line)
        for line in ours:
            print("FAIL: verify:", line)
            errors.append(line)
        if not ours:
            print("ok: systemd-analyze verify is silent about the unit")

        # The check must be able to fail: a typo has to show up.
        with open(copy, "w") as f:
            f.write(new_text.replace("[Service]\n", "[Service]\nProtectSystm=strict\n", 1))
        bad, _ = verify(copy)
        if not any("ProtectSystm" in line for line in bad):
            print("FAIL: verify did not flag a deliberate typo; the check is blind")
            errors.append("blind verify")
        else:
            print("ok: a deliberate typo is flagged")

        with open(copy, "w") as f:
            f.write(new_text)
        score = exposure(copy)
        if score is None:
            print("note: systemd-analyze security --offline not supported here; score not checked")
        elif score > EXPOSURE_MAX:
            print("FAIL: exposure %.1f is above %.1f" % (score, EXPOSURE_MAX))
            errors.append("exposure")
        else:
            print("ok: exposure %.1f (at most %.1f)" % (score, EXPOSURE_MAX))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
