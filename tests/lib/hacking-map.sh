#!/usr/bin/env bash
# tests/lib/hacking-map.sh — HACKING.md names only what exists: every
# `path:function` is a function defined in that file, and every path in
# backquotes under relay/, schema/, migrations/, tests/ or docs/ exists.
# Run by the lint suite; prints what is missing and exits 1.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
bad=0 n=0
while read -r ref; do
    file=${ref%%:*} fn=${ref#*:}
    n=$((n + 1))
    if [ ! -f "$file" ]; then
        echo "hacking-map: HACKING.md names $file, which does not exist"; bad=1
    elif ! grep -qE "^[a-z].*[ *]$fn\(" "$file"; then
        echo "hacking-map: HACKING.md names $fn in $file, which defines no such function"; bad=1
    fi
done < <(grep -oE '`(relay|tests)/[A-Za-z0-9_/.-]+\.c:[A-Za-z_][A-Za-z0-9_]*`' HACKING.md | tr -d '`' | sort -u)
while read -r path; do
    n=$((n + 1))
    [ -e "$path" ] || { echo "hacking-map: HACKING.md names $path, which does not exist"; bad=1; }
done < <(grep -oE '`(relay|schema|migrations|tests|docs|deploy)/[A-Za-z0-9_/.-]*[A-Za-z0-9_]`' HACKING.md |
    tr -d '`' | grep -v -e '[*]' -e NNNN | sort -u)
[ "$bad" = 0 ] && echo "hacking-map: HACKING.md's $n references exist"
exit "$bad"
