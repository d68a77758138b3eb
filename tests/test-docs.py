#!/usr/bin/python3
"""The documentation holds together: README.md is short (at most 16 KB) and
opens with the two commands; every relative link in README.md, CHANGES.md and
doc/*.md reaches a file (and its #anchor); every key the configuration loader
accepts is documented in doc/configuration.md as its table says; the reference pages exist.

Usage: test-docs.py SOURCE_ROOT LANEPACK"""
import glob
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import check, finish  # noqa: E402

root, lanepack = sys.argv[1], sys.argv[2]
# 16 KB: a README read in five minutes (issue 27); the reference lives in doc/.
README_MAX_BYTES = 16 * 1024
# The two commands must be met at once: within the README's first lines.
COMMANDS_WITHIN_LINES = 15
COMMANDS = ["bash scripts/demo.sh", "bash scripts/test.sh"]
PAGES = ["api", "configuration", "failures", "metrics", "tuning", "benchmarks", "deployment",
         "scaling", "design", "alerts", "index", "tracing", "live-view", "clients"]


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


readme_path = os.path.join(root, "README.md")
readme = read(readme_path)
size = os.path.getsize(readme_path)
check("README.md is at most %d bytes" % README_MAX_BYTES, size <= README_MAX_BYTES, "%d bytes" % size)

lines = readme.split("\n")
fence = [i for i, ln in enumerate(lines) if ln.startswith("```")]
first = lines[fence[0] + 1:fence[1]] if len(fence) >= 2 else []
cmds = [ln.split("#")[0].strip() for ln in first]
check("README's first code block is the two commands", cmds == COMMANDS, first)
check("within its first %d lines" % COMMANDS_WITHIN_LINES,
      fence and fence[0] < COMMANDS_WITHIN_LINES, fence[:1])

for p in PAGES:
    check("doc/%s.md exists" % p, os.path.isfile(os.path.join(root, "doc", p + ".md")))
check("CHANGES.md exists", os.path.isfile(os.path.join(root, "CHANGES.md")))


def slug(title):
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes."""
    t = re.sub(r"`|\*|\[|\]\([^)]*\)", "", title.strip().lower())
    t = re.sub(r"[^\w\- ]", "", t)
    return t.replace(" ", "-")


def anchors(path):
    out, seen, in_code = set(), {}, False
    for ln in read(path).split("\n"):
        if ln.startswith("```"):
            in_code = not in_code
        m = None if in_code else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", ln)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else "%s-%d" % (s, n))
    return out


docs = [readme_path, os.path.join(root, "CHANGES.md")] + sorted(glob.glob(os.path.join(root, "doc", "*.md")))
nlinks = 0
for path in docs:
    if not os.path.isfile(path):
        continue
    text = re.sub(r"```[\s\S]*?```", "", read(path))
    for target in re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        nlinks += 1
        file_part, _, frag = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        rel = os.path.relpath(path, root)
        if not os.path.exists(dest):
            check("%s: link %s" % (rel, target), False, "no such file")
            continue
        if frag and dest.endswith(".md"):
            check("%s: link %s" % (rel, target), frag in anchors(dest), "no heading with that anchor")
check("the docs link to each other", nlinks > 0, nlinks)

# Source files the docs name (`src/...c`, `loadgen/...`, `bench/...`) exist: the tree moves.
for path in docs:
    if not os.path.isfile(path):
        continue
    for f in sorted(set(re.findall(r"\b((?:src|loadgen|bench|tests|scripts|deploy)/[\w./-]+\.(?:c|h|py|sh|mjs|yml))\b", read(path)))):
        check("%s: names %s" % (os.path.relpath(path, root), f), os.path.exists(os.path.join(root, f)),
              "no such file")



def documented(source, pattern, page, what):
    """Every name the pattern finds in the source file appears in backquotes on the page."""
    names = sorted(set(re.findall(pattern, read(os.path.join(root, *source.split("/"))))))
    check("%s found in %s" % (what, source), len(names) > 20, names)
    path = os.path.join(root, *page.split("/"))
    doc = read(path) if os.path.isfile(path) else ""
    for n in names:
        check("%s documents `%s`" % (page, n), "`%s`" % n in doc)


# Keys: the loader's table, as `lanepack --config-keys` lists it (name, type,
# default, range, when it applies, what it does), is doc/configuration.md's
# tables row for row: a key added, changed or dropped in the table and not on
# the page fails here (regenerate the rows with `lanepack --config-keys`).
listing = subprocess.run([lanepack, "--config-keys"], capture_output=True, text=True, timeout=30)
check("lanepack --config-keys exits 0", listing.returncode == 0, listing.stderr)
conf_doc = read(os.path.join(root, "doc", "configuration.md")).split("\n")
rows = [ln for ln in listing.stdout.split("\n") if ln.startswith("| `")]
check("the listing has the keys", len(rows) > 60, len(rows))
at = [conf_doc.index(r) if r in conf_doc else -1 for r in rows]
for r, i in zip(rows, at):
    check("doc/configuration.md has the row %s" % r.split(" | ")[0].strip("| "), i >= 0, r)
check("doc/configuration.md has the rows in the table's order", at == sorted(at), at)
documented_rows = [ln for ln in conf_doc if re.match(r"\| `[a-z0-9_.]+` \| ", ln) and ln.count(" | ") == 5]
extra = sorted(set(documented_rows) - set(rows))
check("doc/configuration.md lists no key the table does not have", not extra, extra)
# Metrics the status page exports.
documented("src/proxy/front/pages.c", r'"(lanepack_[a-z0-9_]+)"', "doc/metrics.md", "metrics")
finish()
