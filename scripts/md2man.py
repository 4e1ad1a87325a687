#!/usr/bin/env python3
"""Renders man pages from the docs (docs/*.md), so that the two cannot drift.

The build (docs/meson.build) runs it once per page; the docs are the one
source. Each input is FILE (the whole file), FILE#Heading (that `##` section
with its subsections) or FILE#^ (the file's opening, before its first `##`).
The first input's opening becomes DESCRIPTION; every other opening a section
named after its file's `#` title. Only the Markdown the docs use is handled:
`#`..`####` headings, paragraphs, `-`/`*`/`1.` lists (one level of nesting),
fenced code, `>` quotes and pipe tables (a table row becomes a .TP entry: its
first cell the tag, the others its text, labelled by their column header
when there are more than two). Inline: `code` bold, *em*/_em_ italic,
**strong** bold, [text](link) as text (the address kept for http links).
Everything else is escaped, non-ASCII characters as \\[uXXXX], so groff sees
only ASCII and plain text lines.

usage: md2man.py --name ringctl --section 1 --summary TEXT [--version V]
                 -o OUT INPUT...
"""
import argparse
import re
import sys


def escape(text):
	"""Text to roff: backslashes, minus signs, non-ASCII as named glyphs."""
	out = []
	for ch in text:
		if ch == "\\":
			out.append("\\e")
		elif ch == "-":
			out.append("\\-")
		elif ord(ch) > 127:
			out.append("\\[u%04X]" % ord(ch))
		else:
			out.append(ch)
	return "".join(out)


INLINE = re.compile(r"(`+)(.+?)\1|\*\*(.+?)\*\*|(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])|"
                    r"(?<!\w)_(?!\s)(.+?)(?<!\s)_(?!\w)|\[([^\]]+)\]\(([^)\s]+)\)")


URL = re.compile(r"https?://[^\s>)]+")


def breakable(text):
	"""Escaped text whose web addresses may break after a slash (roff's \\:),
	so an address longer than the page's line does not stop troff."""
	return URL.sub(lambda m: m.group(0).replace("/", "/\\:"), escape(text))


def inline(text):
	"""One paragraph's Markdown inline markup to roff font changes."""
	out = []
	pos = 0
	for m in INLINE.finditer(text):
		out.append(breakable(text[pos:m.start()]))
		if m.group(1):
			# a long code span may break after a comma or a slash (roff's \\:
			# break point), never at a hyphen, so an option stays whole
			code = escape(m.group(2).strip()).replace(",", ",\\:").replace("/", "/\\:")
			out.append("\\fB" + code + "\\fR")
		elif m.group(3):
			out.append("\\fB" + inline(m.group(3)) + "\\fR")
		elif m.group(4) or m.group(5):
			out.append("\\fI" + inline(m.group(4) or m.group(5)) + "\\fR")
		else:
			label, target = m.group(6), m.group(7)
			out.append(inline(label))
			if target.startswith(("http://", "https://")) and target != label:
				out.append(" <" + breakable(target) + ">")
		pos = m.end()
	out.append(breakable(text[pos:]))
	return "".join(out)


def text_line(roff):
	"""A filled text line: one starting with . or ' would be a request."""
	if roff.startswith((".", "'")):
		return "\\&" + roff
	return roff


def macro_arg(text):
	return '"' + inline(text).replace('"', "\\(dq") + '"'


def split_row(line):
	"""A pipe-table row's cells (\\| is a literal bar inside a cell)."""
	line = line.strip()
	if line.startswith("|"):
		line = line[1:]
	if line.endswith("|") and not line.endswith("\\|"):
		line = line[:-1]
	cells = re.split(r"(?<!\\)\|", line)
	return [c.strip().replace("\\|", "|") for c in cells]


def plain(text):
	return re.sub(r"[`*]", "", text).strip()


class Renderer:
	"""Markdown lines in, roff lines out (self.out)."""

	def __init__(self):
		self.out = []

	def heading(self, level, title):
		if level <= 2:
			self.out.append(".SH " + macro_arg(plain(title).upper()))
		else:
			self.out.append(".SS " + macro_arg(title))

	def paragraph(self, lines):
		if lines:
			self.out.append(".PP")
			self.out.append(text_line(inline(" ".join(l.strip() for l in lines))))

	def code(self, lines):
		self.out += [".PP", ".RS 4", ".nf"]
		for l in lines:
			self.out.append(text_line(escape(l.expandtabs(8))))
		self.out += [".fi", ".RE"]

	def table(self, rows):
		header = split_row(rows[0])
		body = [split_row(r) for r in rows[2:]]
		for cells in body:
			self.out.append(".TP")
			self.out.append(text_line(inline(cells[0]) or "\\&"))
			rest = cells[1:]
			if len(header) <= 2:
				self.out.append(text_line(inline(" ".join(rest))))
			else:
				parts = []
				for name, cell in zip(header[1:], rest):
					if cell:
						parts.append("%s: %s" % (plain(name), cell))
				self.out.append(text_line(inline("; ".join(parts)) or "\\&"))

	def item(self, marker, lines, nested):
		tag = "\\(bu" if marker in ("-", "*") else marker
		if nested:
			self.out += [".RS 4", ".IP %s 4" % tag]
		else:
			self.out.append(".IP %s 4" % tag)
		self.out.append(text_line(inline(" ".join(l.strip() for l in lines))))
		if nested:
			self.out.append(".RE")

	def quote(self, lines):
		self.out += [".RS 4", text_line(inline(" ".join(lines))), ".RE"]

	def render(self, lines):
		"""Renders a block of Markdown lines (no `#` title among them)."""
		i = 0
		n = len(lines)
		para = []

		def flush():
			self.paragraph(para)
			para.clear()

		item_re = re.compile(r"^( *)([-*]|\d+\.) +(.*)$")
		while i < n:
			line = lines[i]
			stripped = line.strip()
			if stripped.startswith("<!--"):
				flush()
				while i < n and "-->" not in lines[i]:
					i += 1
				i += 1
				continue
			if stripped.startswith("```"):
				flush()
				j = i + 1
				while j < n and not lines[j].strip().startswith("```"):
					j += 1
				self.code(lines[i + 1:j])
				i = j + 1
				continue
			m = re.match(r"^(#{2,6}) +(.*)$", line)
			if m:
				flush()
				self.heading(len(m.group(1)), m.group(2))
				i += 1
				continue
			if stripped.startswith("|") and i + 1 < n and re.match(r"^\s*\|[\s:|-]+\|\s*$", lines[i + 1]):
				flush()
				j = i
				while j < n and lines[j].strip().startswith("|"):
					j += 1
				self.table(lines[i:j])
				i = j
				continue
			m = item_re.match(line)
			if m and (not para or not m.group(1)):
				flush()
				nested = len(m.group(1)) >= 2
				body = [m.group(3)]
				i += 1
				while i < n and lines[i].strip() and not item_re.match(lines[i]) \
						and lines[i].startswith("  ") and not lines[i].strip().startswith("```"):
					body.append(lines[i])
					i += 1
				self.item(m.group(2), body, nested)
				continue
			if stripped.startswith(">"):
				flush()
				body = []
				while i < n and lines[i].strip().startswith(">"):
					body.append(lines[i].strip()[1:].strip())
					i += 1
				self.quote(body)
				continue
			if not stripped:
				flush()
			else:
				para.append(line)
			i += 1
		flush()


def select(path, which):
	"""(title, lines) of FILE, FILE#^ or FILE#Heading; title is the `#` title
	for a whole file or an opening, None for a section."""
	with open(path, encoding="utf-8") as f:
		lines = f.read().split("\n")
	title = None
	fence = False
	body = []
	sections = []  # (index of a `##` line, its title)
	for idx, line in enumerate(lines):
		if line.strip().startswith("```"):
			fence = not fence
		if fence:
			continue
		m = re.match(r"^(#{1,2}) +(.*)$", line)
		if m and m.group(1) == "#" and title is None:
			title = m.group(2)
		elif m and m.group(1) == "##":
			sections.append((idx, m.group(2).strip()))
	start = next((i for i, l in enumerate(lines) if l.startswith("# ")), -1) + 1
	if which is None:
		body = lines[start:]
	elif which == "^":
		end = sections[0][0] if sections else len(lines)
		body = lines[start:end]
	else:
		match = [k for k, (_, t) in enumerate(sections) if plain(t) == plain(which)]
		if not match:
			sys.exit("md2man: %s has no section '## %s' (sections: %s)" %
			         (path, which, ", ".join(t for _, t in sections)))
		k = match[0]
		end = sections[k + 1][0] if k + 1 < len(sections) else len(lines)
		body = lines[sections[k][0]:end]
		title = None
	return title, body


def main():
	ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
	ap.add_argument("--name", required=True)
	ap.add_argument("--section", required=True)
	ap.add_argument("--summary", required=True)
	ap.add_argument("--version", default="")
	ap.add_argument("-o", "--output", required=True)
	ap.add_argument("inputs", nargs="+")
	args = ap.parse_args()

	r = Renderer()
	r.out += [
		'.\\" Generated by scripts/md2man.py from %s: edit those, not this file.' %
		" ".join(a.split("#")[0] for a in dict.fromkeys(args.inputs)),
		".TH %s %s \"\" %s \"ringmaster manual\"" % (
			macro_arg(args.name.upper()), args.section, macro_arg("ringmaster " + args.version)),
		".nh", ".ad l",
		".SH NAME",
		text_line(escape(args.name) + " \\- " + inline(args.summary)),
	]
	for k, spec in enumerate(args.inputs):
		path, _, which = spec.partition("#")
		title, body = select(path, which or None)
		if title is not None:
			r.out.append(".SH " + (macro_arg("DESCRIPTION") if k == 0 else macro_arg(plain(title).upper())))
		r.render(body)
	r.out += [".SH \"SEE ALSO\"",
	          text_line(", ".join("\\fB%s\\fR(%s)" % p for p in
	                              [("ringmasterd", "8"), ("ringworker", "8"), ("ringctl", "1"),
	                               ("ringmaster-jobspec", "5")] if p[0] != args.name) + ".")]
	with open(args.output, "w", encoding="ascii") as f:
		f.write("\n".join(r.out) + "\n")


if __name__ == "__main__":
	main()
