#!/usr/bin/env python3
"""The man pages (docs/meson.build renders them from docs/*.md): each renders
with man-db and groff without a warning (the check lintian makes), and says
everything its program's help or schema names, so that a new option or spec
field without documentation fails here.

usage: check_man.py PAGE --help-of PROGRAM [ARG...]   every --option that
                                                       `PROGRAM [ARG...] --help` prints
       check_man.py PAGE --schema FILE.json           every property name in the schema
       check_man.py --completion FILE RINGCTL         the bash completion offers
                                                       ringctl's commands and options
"""
import json
import os
import re
import shutil
import subprocess
import sys


def render_warnings(page):
	"""What man --warnings says about the page (lintian's command)."""
	env = dict(os.environ, LC_ALL="C.UTF-8", MANROFFSEQ="", MANWIDTH="80")
	r = subprocess.run(["man", "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z", page],
	                   env=env, capture_output=True, text=True)
	out = r.stderr.strip()
	if r.returncode != 0 and not out:
		out = "man exited with status %d" % r.returncode
	return out


def render_text(page):
	"""The page as plain text, wide and unhyphenated, without font escapes."""
	r = subprocess.run(["groff", "-man", "-Tutf8", "-rLL=250n", "-rHY=0", "-P-cbou", page],
	                   capture_output=True, text=True, check=True)
	return r.stdout


def help_options(argv):
	r = subprocess.run(argv + ["--help"], capture_output=True, text=True, timeout=30)
	text = r.stdout + r.stderr
	opts = sorted(set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text)))
	if len(opts) < 3:
		sys.exit("FAIL: `%s --help` printed %d options: %s" % (" ".join(argv), len(opts), text[:300]))
	return opts


def schema_names(path):
	names = set()

	def walk(node):
		if isinstance(node, dict):
			for k, v in node.get("properties", {}).items():
				names.add(k)
				walk(v)
			for k, v in node.items():
				if k != "properties":
					walk(v)
		elif isinstance(node, list):
			for v in node:
				walk(v)
	with open(path) as f:
		walk(json.load(f))
	return sorted(names)


def check_page(page, kind, rest):
	warnings = render_warnings(page)
	if warnings:
		print("FAIL: man --warnings on %s:\n%s" % (page, warnings))
		return 1
	print("ok: %s renders without warnings" % os.path.basename(page))
	text = render_text(page)
	if kind == "--help-of":
		wanted = help_options(rest)
		missing = [o for o in wanted if not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(o), text)]
		what = "options of `%s --help`" % " ".join(os.path.basename(a) for a in rest)
	else:
		wanted = schema_names(rest[0])
		missing = [n for n in wanted if not re.search(r"(?<![\w])%s(?![\w])" % re.escape(n), text)]
		what = "properties of %s" % os.path.basename(rest[0])
	if missing:
		print("FAIL: %s lacks %d of the %d %s: %s (document them in the doc the page is made from,"
		      " docs/meson.build)" % (os.path.basename(page), len(missing), len(wanted), what,
		                              " ".join(missing)))
		return 1
	print("ok: all %d %s are in %s" % (len(wanted), what, os.path.basename(page)))
	return 0


def check_completion(script, ringctl):
	"""Completes `ringctl <TAB>`, `ringctl submit --<TAB>` and `ringctl worker <TAB>`."""
	def complete(*words):
		line = " ".join(words)
		prog = ('source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); '
		        'COMP_LINE="%s"; _ringctl; printf "%%s\\n" "${COMPREPLY[@]}"' % line)
		r = subprocess.run(["bash", "-c", prog, "complete", script, ringctl] + list(words[1:]),
		                   capture_output=True, text=True, timeout=30)
		if r.returncode != 0:
			sys.exit("FAIL: the completion failed: %s" % r.stderr)
		return set(r.stdout.split())

	errors = 0
	commands = complete("ringctl", "")
	for c in ("submit", "jobs", "logs", "worker", "token", "export"):
		if c not in commands:
			print("FAIL: `ringctl <TAB>` does not offer %s (got %s)" % (c, sorted(commands)))
			errors += 1
	opts = complete("ringctl", "submit", "--")
	for o in ("--wait", "--idempotency-key", "--quiet", "--json"):
		if o not in opts:
			print("FAIL: `ringctl submit --<TAB>` does not offer %s (got %s)" % (o, sorted(opts)))
			errors += 1
	sub = complete("ringctl", "worker", "")
	if sub != {"enroll", "keys", "add-key", "revoke"}:
		print("FAIL: `ringctl worker <TAB>` offers %s" % sorted(sub))
		errors += 1
	if not errors:
		print("ok: the completion offers %d commands, submit's options and worker's subcommands" %
		      len(commands))
	return errors


def main():
	for tool in ("man", "groff", "bash"):
		if not shutil.which(tool):
			print("FAIL: %s is missing: run scripts/deps (man-db, groff-base)" % tool)
			return 1
	args = sys.argv[1:]
	if args[:1] == ["--completion"] and len(args) == 3:
		return 1 if check_completion(args[1], args[2]) else 0
	if len(args) < 3 or args[1] not in ("--help-of", "--schema"):
		sys.exit(__doc__)
	return check_page(args[0], args[1], args[2:])


if __name__ == "__main__":
	sys.exit(main())
