"""The routes ringmasterd serves (ringmasterd --print-routes, which prints
coordinatord/routes.c's table, one METHOD PATH line per row) are exactly the
paths and methods of api/openapi.yaml."""
import re
import subprocess
import sys

from rmtest import check, run

METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


def openapi_routes(path):
    text = open(path, encoding="utf-8").read()
    try:
        import yaml  # python3-yaml, when installed
        doc = yaml.safe_load(text)
        return {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops if m in METHODS}
    except ImportError:
        pass
    # Without PyYAML: the block under a top-level "paths:" key, paths at one
    # indent level, methods at the next.
    routes = set()
    in_paths = False
    path_indent = None
    current = None
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 0:
            in_paths = line.rstrip() == "paths:"
            continue
        if not in_paths:
            continue
        m = re.match(r"^(\s*)(['\"]?)(/[^'\"]*)\2:\s*$", line)
        if m and (path_indent is None or indent == path_indent):
            path_indent = indent
            current = m.group(3)
            continue
        m = re.match(r"^\s*([a-z]+):", line)
        if current and m and m.group(1) in METHODS and indent > path_indent:
            routes.add((m.group(1).upper(), current))
    return routes


def main(binary, workdir, daemons, spec_path):
    out = subprocess.run([binary, "--print-routes"], stdout=subprocess.PIPE, check=True, timeout=30).stdout.decode()
    served = {tuple(line.split(" ", 1)) for line in out.splitlines() if line.strip()}
    check(len(served) >= 9, "too few routes printed: %r" % served)
    documented = openapi_routes(spec_path)
    only_served = served - documented
    only_documented = documented - served
    check(not only_served and not only_documented,
          "served but not in openapi.yaml: %s; in openapi.yaml but not served: %s"
          % (sorted(only_served), sorted(only_documented)))


if __name__ == "__main__":
    run(main)
