#!/usr/bin/env python3
"""tests/lib/options-doc.py — docs/options.md is generated from the relay's
option table, and the lint suite checks that it still is.

The option table (relay/config.c, one OPT row per option) and the operator
commands' table (relay/cli/cli.c) print themselves in `outbox-relay --help`
and `outbox-relay COMMAND --help`; this script reads those, not the C, so
what it documents is what the binary a user runs says. Like PgBouncer's
optscan, the check compares both ways, by name: every option and command of
--help is in docs/options.md with the same variable, default and help, and
docs/options.md names nothing --help does not have. Then the whole file must
be what --write would write (its prose included).

  options-doc.py --write   rewrite docs/options.md (make docs-options)
  options-doc.py           check; prints each difference, exits 1 on any
RELAY_BIN picks the binary (default build/outbox-relay); ROOT=dir checks
another tree's docs/options.md (how a planted contradiction is tried).
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("ROOT") or os.path.normpath(os.path.join(HERE, "..", ".."))
DOC = os.path.join(ROOT, "docs", "options.md")


def relay_bin():
    b = os.environ.get("RELAY_BIN") or os.path.join(HERE, "..", "..", "build", "outbox-relay")
    if not os.access(b, os.X_OK):
        sys.exit("options-doc: no relay binary at %s (make build/outbox-relay, or RELAY_BIN=...)" % b)
    return b


def run_help(binary, *args):
    out = subprocess.run([binary, *args, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, env=dict(os.environ, ASAN_OPTIONS="detect_leaks=0"))
    return out.stdout


def parse_help(text):
    """--help's text -> (commands, operator commands, options)."""
    commands, operators, options = [], [], []
    section = None
    for line in text.split("\n"):
        if line.startswith("commands:"):
            section = "commands"
        elif line.startswith("operator commands"):
            section = "operators"
        elif line.startswith("options"):
            section = "options"
        elif section == "commands" and line.startswith("  "):
            m = re.match(r"^  (\S+)\s+(.*)$", line)
            if m and not line.startswith("   "):
                commands.append([m.group(1), m.group(2).strip()])
            elif commands:
                commands[-1][1] += " " + line.strip()
        elif section == "operators" and line.startswith("  "):
            if line.strip().startswith("exit codes:"):
                section = "exits"
                continue
            m = re.match(r"^  (\S.*?)(?:\s{2,}(\S.*))?$", line)
            if not line.startswith("   ") and m:
                operators.append([m.group(1).strip(), (m.group(2) or "").strip()])
            elif operators:
                operators[-1][1] = (operators[-1][1] + " " + line.strip()).strip()
        elif section == "options":
            m = re.match(r"^  --([a-z0-9-]+)(=VALUE)?\s+(.*)$", line)
            e = re.match(r"^\s+env (OUTBOX_RELAY_[A-Z0-9_]+), default '(.*)'$", line)
            if m:
                options.append({"name": m.group(1), "value": bool(m.group(2)), "help": m.group(3).strip()})
            elif e and options:
                options[-1]["env"], options[-1]["default"] = e.group(1), e.group(2)
    return commands, operators, options


def flags_of(usage):
    return sorted(set(re.findall(r"--[a-z][a-z0-9-]*", usage)))


def cell(text):
    return text.replace("|", "\\|")


def generate(binary):
    commands, operators, options = parse_help(run_help(binary))
    usages = {}
    for usage, _ in operators:
        name = usage.split()[0]
        m = re.search(r"usage: outbox-relay (.*?) \[connection options\]", run_help(binary, name))
        usages[name] = m.group(1) if m else usage
    out = ["# outbox-relay: options", "",
           "Generated from `outbox-relay --help` (the option table of `relay/config.c` and the commands",
           "of `relay/cli/cli.c`) by `tests/lib/options-doc.py --write` (`make docs-options`); the",
           "lint suite fails when this file and the binary disagree. Edit the tables in the C, not",
           "this file. What each command is for: [operations.md](operations.md#the-command-line).",
           "",
           "Every option is a flag, `--NAME=VALUE` or `--NAME VALUE`, and an environment variable",
           "`OUTBOX_RELAY_<NAME>`; the flag wins. A bad value stops the command at start-up, naming",
           "the flag and the variable. The operator commands take the same options (for them only",
           "the connection matters: `--db`, else `DATABASE_URL`, else libpq's `PG*` variables).",
           "",
           "## Commands", "",
           "| command | what it does |", "|---|---|"]
    for name, text in commands:
        out.append("| `%s` | %s |" % (name, cell(text)))
    for usage, text in operators:
        out.append("| `%s` | %s |" % (cell(usages[usage.split()[0]]), cell(text)))
    for kind, title, pick in (
            ("all", "Options of every command", lambda o: not o["help"].startswith("mcp: ")),
            ("mcp", "Options of the MCP front door (mcp)", lambda o: o["help"].startswith("mcp: "))):
        out += ["", "## " + title, ""]
        if kind == "mcp":
            out += ["Read by `outbox-relay mcp` only.", ""]
        out += ["| option | variable | default | what it sets |", "|---|---|---|---|"]
        for o in options:
            if not pick(o):
                continue
            text = o["help"][5:] if kind == "mcp" else o["help"]
            flag = "--%s" % o["name"] if not o["value"] else "--%s=VALUE" % o["name"]
            default = "`%s`" % o["default"] if o["default"] else "(empty)"
            out.append("| `%s` | `%s` | %s | %s |" % (flag, o["env"], default, cell(text)))
    out += ["", "## Flags of the operator commands", "",
            "Each operator command's own flags, besides the options above.", "",
            "| command | flags |", "|---|---|"]
    for usage, _ in operators:
        name = usage.split()[0]
        flags = flags_of(usages[name])
        out.append("| `%s` | %s |" % (name, ", ".join("`%s`" % f for f in flags) or "(none)"))
    return "\n".join(out) + "\n", commands, operators, options


def parse_doc(text):
    """docs/options.md -> {option: (variable, default, help)}, set of commands."""
    opts, cmds = {}, set()
    for line in text.split("\n"):
        m = re.match(r"^\| `--([a-z0-9-]+)(?:=VALUE)?` \| `([^`]*)` \| (.*?) \| (.*) \|$", line)
        if m:
            default = m.group(3)
            default = "" if default == "(empty)" else default.strip("`")
            opts[m.group(1)] = (m.group(2), default, m.group(4).replace("\\|", "|"))
            continue
        m = re.match(r"^\| `([a-z][a-z-]*)[ `]", line)
        if m:
            cmds.add(m.group(1))
    return opts, cmds


def main():
    binary = relay_bin()
    want, commands, operators, options = generate(binary)
    if "--write" in sys.argv:
        open(DOC, "w", encoding="utf-8").write(want)
        print("options-doc: docs/options.md written (%d options, %d commands)"
              % (len(options), len(commands) + len(operators)))
        return 0
    if not options or not commands or not operators:
        print("options-doc: could not read the options and commands of %s --help" % binary)
        return 1
    if not os.path.exists(DOC):
        print("options-doc: docs/options.md is missing (tests/lib/options-doc.py --write)")
        return 1
    have = open(DOC, encoding="utf-8").read()
    doc_opts, doc_cmds = parse_doc(have)
    bad = []
    for o in options:
        helptext = o["help"][5:] if o["help"].startswith("mcp: ") else o["help"]
        if o["name"] not in doc_opts:
            bad.append("--%s is in --help, not in docs/options.md" % o["name"])
            continue
        env, default, text = doc_opts[o["name"]]
        if env != o["env"]:
            bad.append("--%s: docs/options.md says variable %s, --help %s" % (o["name"], env, o["env"]))
        if default != o["default"]:
            bad.append("--%s: docs/options.md says default '%s', --help '%s'" % (o["name"], default, o["default"]))
        if text != helptext:
            bad.append("--%s: docs/options.md's help differs from --help's" % o["name"])
    names = {o["name"] for o in options}
    for name in sorted(set(doc_opts) - names):
        bad.append("docs/options.md documents --%s, which --help does not have" % name)
    cmd_names = {c[0] for c in commands} | {u.split()[0] for u, _ in operators}
    for name in sorted(cmd_names - doc_cmds):
        bad.append("command %s is in --help, not in docs/options.md" % name)
    for name in sorted(doc_cmds - cmd_names):
        bad.append("docs/options.md documents command %s, which --help does not have" % name)
    if not bad and have != want:
        bad.append("docs/options.md is not what --help generates (tests/lib/options-doc.py --write)")
    for b in bad:
        print("options-doc: " + b)
    if not bad:
        print("options-doc: docs/options.md agrees with --help (%d options, %d commands)"
              % (len(options), len(cmd_names)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
