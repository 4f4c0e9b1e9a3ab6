#!/usr/bin/env python3
"""tests/mutants/mutate.py — the mutation list of `make mutants` (tests/mutants/mutations).

  mutate.py list MUTATIONS                  one line per mutation: NAME<TAB>TESTS
  mutate.py apply MUTATIONS NAME TREE       apply NAME to the copy at TREE; prints the file it
                                            changed; exit 2 (with the reason) if the mutation is
                                            stale: its text is not found exactly once

A stanza of the list (blank lines separate stanzas, '#' lines are comments):

  mutation  NAME
  why       what would go wrong (free text)
  in        relay/outcome.c                  a file of the tree, or
  in        sql outbox.record(p_relay text   the newest migration that defines a function
                                             whose signature starts so; only that
                                             definition's body (up to its closing $$;) is
                                             searched and changed
  find      exact text (\\n: a line break)
  replace   its replacement (may be empty)
  tests     sql:23 unit integration:52 ...
"""
import pathlib
import re
import sys


def parse(path):
    stanzas, cur = [], {}
    for line in pathlib.Path(path).read_text().splitlines() + [""]:
        if line.startswith("#"):
            continue
        if not line.strip():
            if cur:
                stanzas.append(cur)
                cur = {}
            continue
        m = re.match(r"(\w+)\s?(.*)$", line)
        if not m:
            sys.exit(f"mutate.py: cannot read line {line!r}")
        cur[m.group(1)] = m.group(2).strip()
    for s in stanzas:
        for key in ("mutation", "in", "find", "tests"):
            if key not in s:
                sys.exit(f"mutate.py: stanza {s.get('mutation', '?')} has no '{key}'")
        s.setdefault("replace", "")
    names = [s["mutation"] for s in stanzas]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        sys.exit(f"mutate.py: names used twice: {', '.join(sorted(dupes))}")
    return stanzas


def unescape(text):
    return text.replace("\\n", "\n")


def region_of_function(tree, signature):
    """(path, start, end) of the newest migration's definition of the function."""
    pattern = re.compile(r"^CREATE (?:OR REPLACE )?FUNCTION " + re.escape(signature), re.M)
    for path in sorted((tree / "migrations").glob("[0-9]*.sql"), reverse=True):
        text = path.read_text()
        starts = [m.start() for m in pattern.finditer(text)]
        if not starts:
            continue
        start = starts[-1]
        end = text.find("\n$$;", start)
        if end < 0:
            return path, None, None
        return path, start, end + len("\n$$;")
    return None, None, None


def apply(stanza, tree):
    where = stanza["in"]
    find, replace = unescape(stanza["find"]), unescape(stanza["replace"])
    if where.startswith("sql "):
        path, start, end = region_of_function(tree, where[4:].strip())
        if path is None:
            return None, f"no migration defines {where[4:]}"
        if start is None:
            return None, f"{path.name}: the definition of {where[4:]} has no closing $$;"
    else:
        path = tree / where
        if not path.is_file():
            return None, f"{where}: no such file"
        start, end = 0, None
    text = path.read_text()
    end = len(text) if end is None else end
    body = text[start:end]
    n = body.count(find)
    if n != 1:
        return None, f"{path.relative_to(tree)}: the text to find occurs {n} times, not once"
    path.write_text(text[:start] + body.replace(find, replace) + text[end:])
    return path.relative_to(tree), None


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "list":
        for s in parse(sys.argv[2]):
            print(f"{s['mutation']}\t{s['tests']}")
        return 0
    if len(sys.argv) == 5 and sys.argv[1] == "apply":
        stanzas = {s["mutation"]: s for s in parse(sys.argv[2])}
        if sys.argv[3] not in stanzas:
            sys.exit(f"mutate.py: no mutation {sys.argv[3]}")
        changed, stale = apply(stanzas[sys.argv[3]], pathlib.Path(sys.argv[4]))
        if stale:
            print(stale)
            return 2
        print(changed)
        return 0
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main())
