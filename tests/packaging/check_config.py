#!/usr/bin/python3
"""Checks packaging/ringmasterd.conf, the example configuration.

It must be INI with one section, [server], holding exactly the keys the
daemon knows, each with a valid value and a comment above it. (The
integration test in tests/clients starts the real daemon with this file,
which proves the daemon accepts it.)

Usage: check_config.py CONF
"""
import configparser
import re
import sys

KEYS = {
    "listen": lambda v: re.fullmatch(r"(\[[0-9a-fA-F:]+\]|[^:\s]+):[0-9]{1,5}", v)
    and int(v.rsplit(":", 1)[1]) <= 65535,
    "broker": lambda v: "://" in v,
    "db": lambda v: v.startswith("/"),
    "log_level": lambda v: v in ("error", "warn", "info", "debug"),
    "max_body_bytes": lambda v: v.isdigit() and 1024 <= int(v) <= 1 << 30,
    "http_threads": lambda v: v.isdigit() and 1 <= int(v) <= 256,
    "max_connections": lambda v: v.isdigit() and 16 <= int(v) <= 1000000,
    "max_connections_per_ip": lambda v: v.isdigit() and 1 <= int(v) <= 1000000,
    "idle_timeout_s": lambda v: v.isdigit() and 1 <= int(v) <= 3600,
    "max_header_bytes": lambda v: v.isdigit() and 1024 <= int(v) <= 1048576,
    "submit_rate": lambda v: v.isdigit() and int(v) <= 1000000,
    "submit_burst": lambda v: v.isdigit() and 1 <= int(v) <= 1000000,
    "auth": lambda v: v in ("on", "off"),
    "insecure": lambda v: v in ("on", "off"),
    "metrics_auth": lambda v: v in ("loopback", "token", "open"),
    "allowed_hosts": lambda v: " " not in v,
    "max_queued_per_token": lambda v: v.isdigit() and 1 <= int(v) <= 10000000,
    "broker_auth": lambda v: v in ("on", "off"),
    "env_allow": lambda v: re.fullmatch(r"[A-Za-z0-9_]+\*?(,[A-Za-z0-9_]+\*?)*", v) is not None,
    "job_env_allow": lambda v: re.fullmatch(r"[A-Za-z0-9_]+\*?(,[A-Za-z0-9_]+\*?)*", v) is not None,
}
DEFAULTS = {"listen": "127.0.0.1:8080", "broker": "tcp://127.0.0.1:5555",
            "log_level": "info", "max_body_bytes": "1048576", "http_threads": "4",
            "max_connections": "1024", "max_connections_per_ip": "64", "idle_timeout_s": "30",
            "max_header_bytes": "16384", "submit_rate": "60", "submit_burst": "30",
            "auth": "on", "insecure": "off", "metrics_auth": "loopback", "max_queued_per_token": "1000",
            "broker_auth": "on",
            "env_allow": "NCCL_*,CUDA_*,OMP_*,GLOO_*,LD_LIBRARY_PATH,PYTHON*,TORCH_*,RINGMASTER_USER_*",
            "job_env_allow": "NCCL_*,CUDA_*,OMP_*,GLOO_*,LD_LIBRARY_PATH"}


def main():
    path = sys.argv[1]
    errors = []
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    with open(path) as f:
        text = f.read()
    parser.read_string(text)
    if parser.sections() != ["server"]:
        errors.append("sections must be exactly [server] (got %s)" % parser.sections())
    else:
        server = parser["server"]
        if set(server) != set(KEYS):
            errors.append("keys must be %s (got %s)" % (sorted(KEYS), sorted(server)))
        for key, ok in KEYS.items():
            if key in server and not ok(server[key]):
                errors.append("%s = %s is not a valid value" % (key, server[key]))
        for key, value in DEFAULTS.items():
            if server.get(key) != value:
                errors.append("%s should show the default %s (got %s)" % (key, value, server.get(key)))
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"(\w+)\s*=", line)
        if m and (i == 0 or not lines[i - 1].startswith("#")):
            errors.append("line %d: key %s has no comment above it" % (i + 1, m.group(1)))
    for e in errors:
        print("FAIL:", e)
    if not errors:
        print("ok: %s has [server] with every key, valid and commented" % path)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
