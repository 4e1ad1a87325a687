#!/usr/bin/python3
"""Check that api/jobspec.c and schema/jobspec.schema.json agree.

Every example under jobspec_examples/ is run through the C validator (the
jobspec_check tool) and through the JSON schema (python3-jsonschema,
draft 2020-12):

  valid/        both accept
  invalid/      both refuse; the C error pointer and the schema error's path
                lie on one branch (one is a prefix of the other)
  cross_field/  the schema accepts, the C validator refuses: rules the schema
                cannot express (n_embd % n_head, min_lr <= lr, ...), byte
                lengths, and integers written as reals (8.0)

The schema side reads the file as the C side does: strict UTF-8, no
duplicate keys, no NaN/Infinity, no lone surrogates. Also checks that the
schema's "default" keywords equal the defaults the C library fills in.
Exits 0 when all agree, 1 otherwise, 77 (skip) without python3-jsonschema.
"""
import argparse
import json
import pathlib
import subprocess
import sys

try:
    import jsonschema
except ImportError:
    print("python3-jsonschema is not installed; skipping")
    sys.exit(77)

MIN_VALID, MIN_INVALID = 15, 30


class NotJSON(Exception):
    pass


def strict_load(raw):
    """Parse bytes as RFC 8259 JSON the way jansson does, or raise NotJSON."""
    def no_dupes(pairs):
        obj = {}
        for k, v in pairs:
            if k in obj:
                raise NotJSON("duplicate key %r" % k)
            obj[k] = v
        return obj

    def no_constants(name):
        raise NotJSON("%s is not JSON" % name)

    def check_strings(v):
        if isinstance(v, str):
            v.encode("utf-8")  # lone surrogates raise
        elif isinstance(v, dict):
            for k, x in v.items():
                check_strings(k)
                check_strings(x)
        elif isinstance(v, list):
            for x in v:
                check_strings(x)

    try:
        text = raw.decode("utf-8")
        value = json.loads(text, object_pairs_hook=no_dupes, parse_constant=no_constants)
        check_strings(value)
        return value
    except (ValueError, UnicodeError, RecursionError, NotJSON) as e:
        raise NotJSON(str(e)) from e


def schema_verdict(validator, path):
    """(accepted, pointer, message) from the schema side."""
    try:
        doc = strict_load(path.read_bytes())
    except NotJSON as e:
        return False, "", "not JSON: %s" % e
    error = jsonschema.exceptions.best_match(validator.iter_errors(doc))
    if error is None:
        return True, None, None
    pointer = "".join("/" + str(p).replace("~", "~0").replace("/", "~1")
                      for p in error.absolute_path)
    return False, pointer, error.message


def c_verdict(tool, path, dump=False):
    args = [tool] + (["--dump"] if dump else []) + [str(path)]
    out = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         timeout=30, check=False)
    line = out.stdout.decode("utf-8", "replace").rstrip("\n")
    if out.returncode == 0 and line.startswith("ok"):
        return True, None, line[3:] if dump else None
    if out.returncode == 1 and line.startswith("error "):
        pointer, _, message = line[len("error "):].partition(" ")
        return False, "" if pointer == '""' else pointer, message
    raise RuntimeError("%s: unexpected output from jobspec_check (rc %d): %r %r"
                       % (path, out.returncode, line, out.stderr))


def on_one_branch(a, b):
    sa, sb = a.split("/"), b.split("/")
    n = min(len(sa), len(sb))
    return sa[:n] == sb[:n]


def schema_defaults(schema):
    """The document the schema's "default" keywords describe, per section."""
    out = {}
    for key, prop in schema["properties"].items():
        if "properties" in prop:
            out[key] = {k: v["default"] for k, v in prop["properties"].items() if "default" in v}
        elif "default" in prop:
            out[key] = prop["default"]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", required=True, help="the jobspec_check binary")
    ap.add_argument("--schema", required=True)
    ap.add_argument("--examples", required=True)
    args = ap.parse_args()

    schema = json.loads(pathlib.Path(args.schema).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    root = pathlib.Path(args.examples)

    failures = []
    counts = {}
    for kind in ("valid", "invalid", "cross_field"):
        files = sorted((root / kind).glob("*.json"))
        counts[kind] = len(files)
        for path in files:
            s_ok, s_ptr, s_msg = schema_verdict(validator, path)
            c_ok, c_ptr, c_msg = c_verdict(args.check, path)
            name = "%s/%s" % (kind, path.name)
            if kind == "valid":
                good = s_ok and c_ok
            elif kind == "invalid":
                good = not s_ok and not c_ok and on_one_branch(s_ptr, c_ptr)
            else:
                good = s_ok and not c_ok
            status = "ok  " if good else "FAIL"
            print("%s %-48s schema: %-8s C: %s" % (
                status, name,
                "accepts" if s_ok else "refuses",
                "accepts" if c_ok else "refuses %s %s" % (c_ptr or '""', c_msg)))
            if not s_ok:
                print("     %-48s schema says: %s %s" % ("", s_ptr or '""', s_msg[:160]))
            if not good:
                failures.append(name)

    if counts["valid"] < MIN_VALID or counts["invalid"] < MIN_INVALID:
        failures.append("too few examples: %d valid (want %d), %d invalid (want %d)"
                        % (counts["valid"], MIN_VALID, counts["invalid"], MIN_INVALID))

    # The schema's defaults are the ones the C library fills in.
    minimal = root / "valid" / "minimal.json"
    ok, _, dumped = c_verdict(args.check, minimal, dump=True)
    c_doc = json.loads(dumped) if ok else {}
    want = schema_defaults(schema)
    for section, value in want.items():
        got = c_doc.get(section)
        if isinstance(value, dict):
            for key, default in value.items():
                if (got or {}).get(key) != default:
                    failures.append("default of %s.%s: schema %r, C %r"
                                    % (section, key, default, (got or {}).get(key)))
        elif got != value:
            failures.append("default of %s: schema %r, C %r" % (section, value, got))
    # Every field the C library writes is described by the schema.
    for section, value in c_doc.items():
        props = schema["properties"].get(section)
        if props is None:
            failures.append("C writes %s, the schema does not describe it" % section)
        elif isinstance(value, dict):
            for key in value:
                if key not in props.get("properties", {}):
                    failures.append("C writes %s.%s, the schema does not describe it"
                                    % (section, key))

    print("%d valid, %d invalid, %d cross_field examples"
          % (counts["valid"], counts["invalid"], counts["cross_field"]))
    if failures:
        print("DISAGREEMENTS:")
        for f in failures:
            print("  " + f)
        return 1
    print("C validator and schema agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
