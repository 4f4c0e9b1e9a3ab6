#!/usr/bin/env python3
"""tests/lib/tests-readme.py — tests/README.md, the index of tests by behaviour,
stays true. Checked, by rules a reader can apply:
  1. every mutation of tests/mutants/mutations is named in tests/README.md, as
     `name` in backquotes;
  2. the line naming a mutation names the test files its `tests` line runs:
     sql:NN is tests/sql/NN_*.sql, integration:NN tests/integration/NN_*.sh,
     unit any file under tests/unit/ (the mutation does not say which);
  3. every file tests/README.md names (a path under tests/ ending in .sh, .sql,
     .c, .h, .py) exists.
Why a script and not a generated file: the index is written for a reader, by
behaviour; only the facts a mutation states and the paths are checkable, so
those are checked. Run by the lint suite (tests/run.sh); prints what is wrong
and exits 1. ROOT=dir checks another tree (how a planted contradiction is tried).
"""
import glob
import os
import re
import sys

root = os.environ.get("ROOT") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
os.chdir(root)
bad = []
readme = open("tests/README.md").read()
lines = readme.split("\n")

mutations = []  # (name, [test specs])
name = None
for line in open("tests/mutants/mutations"):
    words = line.split()
    if len(words) >= 2 and words[0] == "mutation":
        name = words[1]
    elif len(words) >= 2 and words[0] == "tests" and name:
        mutations.append((name, words[1:]))
        name = None
if not mutations:
    bad.append("tests/mutants/mutations: no mutation read (the format changed?)")

for name, specs in mutations:
    rows = [l for l in lines if "`%s`" % name in l]
    if not rows:
        bad.append("mutation %s is not named in tests/README.md" % name)
        continue
    row = rows[0]
    for spec in specs:
        for part in spec.split():
            kind, _, nums = part.partition(":")
            if kind == "unit":
                if "tests/unit/" not in row:
                    bad.append("mutation %s: its line names no tests/unit/ file (tests: unit)" % name)
                continue
            folder, ext = {"sql": ("sql", "sql"), "integration": ("integration", "sh")}.get(kind, (None, None))
            if folder is None:
                bad.append("mutation %s: unknown test kind %r" % (name, kind))
                continue
            for n in nums.split(","):
                files = glob.glob("tests/%s/%s_*.%s" % (folder, n, ext))
                if len(files) != 1:
                    bad.append("mutation %s: %s:%s is %d files" % (name, kind, n, len(files)))
                elif files[0] not in row:
                    bad.append("mutation %s: its line in tests/README.md does not name %s" % (name, files[0]))

for path in sorted(set(re.findall(r"tests/[A-Za-z0-9_./-]+\.(?:sh|sql|c|h|py)\b", readme))):
    if not os.path.isfile(path):
        bad.append("tests/README.md names %s, which does not exist" % path)

for b in bad:
    print("tests-readme: " + b)
sys.exit(1 if bad else 0)
