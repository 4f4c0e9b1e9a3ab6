#!/usr/bin/env python3
"""tests/lib/docs-names.py — the documents name only what exists.

A reader copies names out of the documents: a function to call, a command
to run, an option to set. This lint fails when README.md, docs/*.md or
deploy/README.md names
  - an `outbox.NAME` that the live schema (the generated schema/outbox/:
    functions, tables, views, types, and the settings its functions read)
    does not have, or `outbox.TABLE.COLUMN` whose table has no such column;
  - a command of `outbox-relay` (in a code block or a `span`) that
    `outbox-relay --help` does not list;
  - an option that the binary does not take: every `--name` written after
    `outbox-relay` on a command line, and every `span` that is an option by
    itself (`--mcp-wait-ms`), against the options and the commands' flags of
    `outbox-relay --help` and `outbox-relay COMMAND --help`.
Options of other tools are left alone when they follow another command
(`kubectl ... --from-file`); the few written alone are listed in OTHER_TOOLS.
A name written with `*` (`outbox.mcp_*`, `--mcp-*`) must be the prefix of
one that exists. And the other way: docs/targets.md names every column of
outbox.targets, docs/mcp.md every column of outbox.mcp_tools (a column added
by a migration is documented, or this fails), and the command table of
docs/operations.md has a row for every command of --help. Why from the generated schema and the binary, not from the
C or the migrations: they are what a user's database and shell have.

Run by the lint suite; prints file:line and what is wrong, exits 1.
ROOT=dir checks another tree (how a planted contradiction is tried);
RELAY_BIN picks the binary (default build/outbox-relay).
"""
import glob
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("ROOT") or os.path.normpath(os.path.join(HERE, "..", ".."))

# The reference of a table names every one of its columns, in backquotes.
COLUMNS_DOCUMENTED = {"targets": "docs/targets.md", "mcp_tools": "docs/mcp.md"}

# Options that the documents write alone and that belong to another program.
OTHER_TOOLS = {
    "--order-log": "the test receiver's (tests/receiver/)",
    "--write": "tests/lib/options-doc.py's",
}


def relay_help():
    binary = os.environ.get("RELAY_BIN") or os.path.join(HERE, "..", "..", "build", "outbox-relay")
    if not os.access(binary, os.X_OK):
        sys.exit("docs-names: no relay binary at %s (make build/outbox-relay, or RELAY_BIN=...)" % binary)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0")

    def run(*args):
        return subprocess.run([binary, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=env).stdout
    text = run("--help")
    commands = set()
    section = None
    for line in text.split("\n"):
        if line.startswith("commands:") or line.startswith("operator commands"):
            section = "commands"
        elif line.startswith("options"):
            section = None
        elif line.startswith("  exit codes"):
            section = None
        elif section and re.match(r"^  [a-z]", line):
            commands.add(line.split()[0])
    options = set(re.findall(r"--[a-z][a-z0-9-]*", text))
    for c in sorted(commands):
        options |= set(re.findall(r"--[a-z][a-z0-9-]*", run(c, "--help")))
    commands.add("help")
    return commands, options


def schema_names():
    objects, columns = set(), {}
    base = os.path.join(ROOT, "schema", "outbox")
    for kind in ("functions", "tables", "views", "types"):
        for path in glob.glob(os.path.join(base, kind, "*.sql")):
            name = os.path.basename(path)[:-4]
            objects.add(name)
            if kind in ("tables", "views"):
                columns[name] = open(path, encoding="utf-8").read()
    settings = set()
    for path in glob.glob(os.path.join(base, "**", "*.sql"), recursive=True):
        settings |= set(re.findall(r"(?:current_setting|set_config)\s*\(\s*'outbox\.([a-z_]+)'",
                                   open(path, encoding="utf-8").read()))
    return objects, columns, settings


def documents():
    files = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "deploy", "README.md")]
    files += sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    return [f for f in files if os.path.exists(f)]


def spans(text):
    """(line number, text) of every code-block line and every `span` outside blocks;
    a code line ending in a backslash is joined with the next."""
    out, fence, pending = [], False, None
    for n, line in enumerate(text.split("\n"), 1):
        if line.startswith("```"):
            fence = not fence
            continue
        if fence:
            if pending:
                line = pending[1] + " " + line
                n = pending[0]
                pending = None
            if line.rstrip().endswith("\\"):
                pending = (n, line.rstrip()[:-1])
                continue
            out.append((n, line, True))
        else:
            for m in re.finditer(r"`([^`]+)`", line):
                out.append((n, m.group(1), False))
    return out


def main():
    commands, options = relay_help()
    objects, columns, settings = schema_names()
    if not objects or len(commands) < 5 or len(options) < 5:
        print("docs-names: could not read the schema (%d objects) or --help (%d commands)"
              % (len(objects), len(commands)))
        return 1
    bad = []
    for path in documents():
        rel = os.path.relpath(path, ROOT)
        text = open(path, encoding="utf-8").read()
        # outbox.NAME anywhere, prose included.
        for n, line in enumerate(text.split("\n"), 1):
            for m in re.finditer(r"(?<![\w/.-])outbox\.([a-z_][a-z0-9_]*)(\*|\.[a-z_][a-z0-9_]*)?", line):
                name, rest = m.group(1), m.group(2) or ""
                if rest == "*":
                    if not any(o.startswith(name) for o in objects):
                        bad.append("%s:%d: outbox.%s* matches nothing in the schema" % (rel, n, name))
                    continue
                if name in objects or name in settings:
                    if rest and name in columns and not re.search(r"\b%s\b" % re.escape(rest[1:]), columns[name]):
                        bad.append("%s:%d: outbox.%s%s: %s has no column %s"
                                   % (rel, n, name, rest, name, rest[1:]))
                    continue
                bad.append("%s:%d: outbox.%s is not in the schema (schema/outbox/)" % (rel, n, name))
        # Commands and options of outbox-relay, in code and spans.
        for n, span, code in spans(text):
            for m in re.finditer(r"(?:^|[\s/(])outbox-relay((?: +[^\s|;&#]+)*)", span):
                words = m.group(1).split()
                if words and re.match(r"^[a-z][a-z-]*$", words[0]) and words[0] not in commands:
                    bad.append("%s:%d: outbox-relay %s: no such command in --help" % (rel, n, words[0]))
                for w in words:
                    o = re.match(r"^(--[a-z][a-z0-9-]*)", w)
                    if o and o.group(1) not in options:
                        bad.append("%s:%d: outbox-relay ... %s: no such option in --help" % (rel, n, o.group(1)))
            if code:
                continue
            m = re.match(r"^(--[a-z][a-z0-9-]*)(\*)?(?:[= ].*)?$", span)
            if m:
                opt = m.group(1)
                if m.group(2):
                    if not any(o.startswith(opt) for o in options):
                        bad.append("%s:%d: %s* matches no option in --help" % (rel, n, opt))
                elif opt not in options and opt not in OTHER_TOOLS:
                    bad.append("%s:%d: %s: no such option in outbox-relay --help" % (rel, n, opt))
    for table, doc in sorted(COLUMNS_DOCUMENTED.items()):
        path = os.path.join(ROOT, doc)
        if table not in columns or not os.path.exists(path):
            bad.append("%s or outbox.%s is missing" % (doc, table))
            continue
        text = open(path, encoding="utf-8").read()
        body = re.search(r"CREATE TABLE outbox\.%s \((.*?)\n\);" % table, columns[table], re.S)
        for col in re.findall(r"^    ([a-z_][a-z0-9_]*) ", body.group(1) if body else "", re.M):
            if "`%s`" % col not in text:
                bad.append("%s does not name the column %s of outbox.%s" % (doc, col, table))
    ops = os.path.join(ROOT, "docs", "operations.md")
    ops_text = open(ops, encoding="utf-8").read() if os.path.exists(ops) else ""
    for command in sorted(commands - {"help"}):
        if not re.search(r"^\| `%s[ `]" % re.escape(command), ops_text, re.M):
            bad.append("docs/operations.md's command table has no row for %s" % command)
    for b in bad:
        print("docs-names: " + b)
    if not bad:
        print("docs-names: the documents name %d schema objects, %d commands and %d options that exist"
              % (len(objects), len(commands), len(options)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
