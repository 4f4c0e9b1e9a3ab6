#!/usr/bin/env python3
"""Checks the documents' tables of contents and section links (lint suite).

docs/design.md opens with a "Contents:" paragraph that must list every "## "
section, in order; `--fix` rewrites it. In every Markdown file of the project
(README, HACKING, CHANGELOG, docs/, deploy/, tests/*/README.md), a link to a
section (#anchor, or file.md#anchor) must name a heading that exists, with
GitHub's anchors (lower case, punctuation dropped, spaces as hyphens).
Prints what is wrong and exits 1. ROOT=dir checks another tree (how a planted
contradiction is tried: tests/lib/lint-selftest.sh).
"""
import os
import re
import sys

ROOT = os.environ.get("ROOT") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def anchor(heading):
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def headings(path):
    out, fence = [], False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fence = not fence
        m = re.match(r"^(#{1,6}) (.*)$", line) if not fence else None
        if m:
            out.append((len(m.group(1)), m.group(2).strip()))
    return out


def anchors(path):
    seen, out = {}, set()
    for _, h in headings(path):
        a = anchor(h)
        n = seen.get(a, 0)
        out.add(a if n == 0 else "%s-%d" % (a, n))
        seen[a] = n + 1
    return out


def contents_of(path):
    secs = [h for level, h in headings(path) if level == 2]
    return "Contents: " + " ·\n".join("[%s](#%s)" % (h, anchor(h)) for h in secs)


def main():
    fix = "--fix" in sys.argv
    bad = 0
    design = os.path.join(ROOT, "docs", "design.md")
    text = open(design, encoding="utf-8").read()
    m = re.search(r"^Contents: .*?(?=\n\n)", text, re.S | re.M)
    want = contents_of(design)
    if not m:
        print("docs-toc: docs/design.md has no 'Contents:' paragraph")
        bad = 1
    elif m.group(0) != want:
        if fix:
            text = text[: m.start()] + want + text[m.end():]
            open(design, "w", encoding="utf-8").write(text)
            print("docs-toc: docs/design.md's contents rewritten")
        else:
            print("docs-toc: docs/design.md's contents do not list its sections in order "
                  "(tests/lib/docs-toc.py --fix rewrites them)")
            bad = 1
    files = []
    for base in ["README.md", "HACKING.md", "CHANGELOG.md"]:
        files.append(os.path.join(ROOT, base))
    for folder in ["docs", "deploy", "tests"]:
        for dirpath, dirs, names in os.walk(os.path.join(ROOT, folder)):
            dirs[:] = [d for d in dirs if d != "node_modules"]
            files += [os.path.join(dirpath, n) for n in names if n.endswith(".md")]
    cache = {}
    for f in files:
        if not os.path.exists(f):
            continue
        for target, frag in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", open(f, encoding="utf-8").read()):
            path = os.path.normpath(os.path.join(os.path.dirname(f), target)) if target else f
            if not path.endswith(".md") or not os.path.exists(path):
                continue
            if path not in cache:
                cache[path] = anchors(path)
            if frag not in cache[path]:
                print("docs-toc: %s links to %s#%s, which has no such section"
                      % (os.path.relpath(f, ROOT), os.path.relpath(path, ROOT), frag))
                bad = 1
    if not bad:
        print("docs-toc: contents and section links check out (%d files)" % len(files))
    return bad


if __name__ == "__main__":
    sys.exit(main())
