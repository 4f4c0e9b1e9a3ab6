#!/usr/bin/env python3
"""tests/lib/commit-subjects.py — commit subjects stay short (HACKING.md,
"Commit messages"): at most 72 characters, and no measurement in them (a
number with a unit: 875 ms, 20 MiB, 12 %); the figures go in the body.

Only commits that the cutoff does not reach are checked (git rev-list HEAD
--not CUTOFF): the history before the rule was written stays as it is. The
cutoff is main's commit when the rule came (67a6407), or CUTOFF=rev.
Runnable in any clone: when the tree is not a git clone, the clone is shallow
or the cutoff commit is not in it, the check says so and passes (it cannot
tell which commits are new), so a CI that clones one commit is not failed.

Run by the lint suite; prints each offending commit and exits 1.
ROOT=dir checks another clone (how the self-test plants a long subject).
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("ROOT") or os.path.normpath(os.path.join(HERE, "..", ".."))
CUTOFF = os.environ.get("CUTOFF") or "67a64079b8231bfd527c27b4007ffb21ad1c1549"
LIMIT = 72
# seconds only with a space ("9 s"): "401s" is the plural of a status code
MEASUREMENT = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)?(?:\s?(?:ns|µs|us|ms|min|KiB|MiB|GiB|kB|KB|MB|GB|%|×|x)|\ss)(?!\w)")


def git(*args):
    return subprocess.run(["git", "-C", ROOT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, encoding="utf-8", errors="replace")


def main():
    if git("rev-parse", "--is-inside-work-tree").stdout.strip() != "true":
        print("commit-subjects: %s is not a git clone: not checked" % ROOT)
        return 0
    if git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        print("commit-subjects: the clone is shallow (the cutoff %s may be cut off): not checked" % CUTOFF[:7])
        return 0
    if git("cat-file", "-e", CUTOFF + "^{commit}").returncode != 0:
        print("commit-subjects: the cutoff commit %s is not in this clone: not checked" % CUTOFF[:7])
        return 0
    listed = git("rev-list", "--format=%H%x09%s", "--no-commit-header", "HEAD", "--not", CUTOFF)
    if listed.returncode != 0:
        listed = git("log", "--format=%H%x09%s", "HEAD", "--not", CUTOFF)  # git before 2.33
    if listed.returncode != 0:
        print("commit-subjects: git cannot list the commits after %s: %s" % (CUTOFF[:7], listed.stderr.strip()))
        return 1
    bad, n = [], 0
    for line in listed.stdout.split("\n"):
        if "\t" not in line:
            continue
        sha, subject = line.split("\t", 1)
        n += 1
        if len(subject) > LIMIT:
            bad.append("%s: the subject has %d characters (at most %d; the rest goes in the body): %s"
                       % (sha[:7], len(subject), LIMIT, subject))
        m = MEASUREMENT.search(subject)
        if m:
            bad.append("%s: the subject names a measurement (%s): it goes in the body: %s"
                       % (sha[:7], m.group(0), subject))
    for b in bad:
        print("commit-subjects: " + b)
    if not bad:
        print("commit-subjects: %d commits after %s have short subjects" % (n, CUTOFF[:7]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
