#!/usr/bin/env bash
# tests/lib/changelog-migrations.sh — CHANGELOG.md is the one release record.
#
# What an upgrade does to a database is written once, in CHANGELOG.md; the
# deployment guide links to it. Checked here, by rules a reader can apply:
#   1. every migration (migrations/NNNN_*.sql) is named in CHANGELOG.md by its
#      number, as a whole number ("0033", "(0033)", "0033_renew_leases_by_id.sql";
#      not "10033"). A released one (listed in migrations/released) may instead
#      lie in a range "AAAA–BBBB" (en dash or hyphen, as the 0.1.0 entry's
#      "0001–0024"); one not yet released is named by its own number, so that a
#      range at the top of an entry never stands for its notes;
#   2. deploy/README.md names no migration by its number (a whole number
#      that is a migration's, "0033" or "0033–0035") except on a line that
#      links to CHANGELOG.md; a file name in an example of output
#      ("applied 0001_tables.sql") is not a note and is allowed.
# Run by the lint suite (tests/run.sh); prints what is wrong and exits 1.
# ROOT=dir checks another tree (how a planted contradiction is tried).
set -u
root=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root" || exit 1
bad=0
changelog=CHANGELOG.md guide=deploy/README.md
released=$(awk '!/^#/ && NF { print $2 }' migrations/released 2>/dev/null)

# The ranges written in the changelog, one "AAAA BBBB" a line.
ranges=$(grep -oE '(^|[^0-9])[0-9]{4}(–|-)[0-9]{4}([^0-9]|$)' "$changelog" |
    sed -E 's/^[^0-9]*([0-9]{4})(–|-)([0-9]{4}).*/\1 \3/')

in_range() { # in_range NNNN: a range of the changelog holds it
    local a b
    while read -r a b; do
        [ -n "$a" ] || continue
        [[ ! "$1" < "$a" && ! "$1" > "$b" ]] && return 0
    done <<<"$ranges"
    return 1
}

n=0
for f in migrations/[0-9][0-9][0-9][0-9]_*.sql; do
    [ -e "$f" ] || continue
    name=$(basename "$f")
    num=${name:0:4}
    n=$((n + 1))
    grep -qE "(^|[^0-9])$num([^0-9]|$)" "$changelog" && continue
    if grep -qxF "$name" <<<"$released" && in_range "$num"; then
        continue
    fi
    if grep -qxF "$name" <<<"$released"; then
        echo "changelog-migrations: migrations/$name is not named in $changelog (by $num or a range)"
    else
        echo "changelog-migrations: migrations/$name is not named in $changelog:" \
            "say under the unreleased version what $num does to a database and to the relays"
    fi
    bad=1
done

numbers=$(for f in migrations/[0-9][0-9][0-9][0-9]_*.sql; do b=$(basename "$f"); echo "${b:0:4}"; done |
    paste -sd '|')
if [ -n "$numbers" ]; then
    while IFS= read -r hit; do
        echo "changelog-migrations: $guide:${hit%%:*} names a migration without linking to" \
            "$changelog (upgrade notes live there; link to its entry): ${hit#*:}"
        bad=1
    done < <(grep -nE "(^|[^0-9])($numbers)([^0-9_]|$)" "$guide" | grep -vF "$changelog#")
fi

[ "$bad" = 0 ] && echo "changelog-migrations: $n migrations named in $changelog; $guide links to it"
exit "$bad"
