#!/usr/bin/env bash
# tests/lib/released-migrations.sh — what was released stays as released.
#
#   1. every migration listed in migrations/released has exactly the listed
#      SHA-256 (a database that applied it recorded that text);
#   2. no migration outside the list sorts before the last listed one (a new
#      migration never slips in between released ones);
#   3. the migrations of a listed release, at its tag vX.Y.Z or, in a clone
#      without the tag, at the commit that migrations/released names for it
#      ("# commit X.Y.Z SHA"), are the listed ones, byte for byte;
#   4. relay/version.h and the newest heading of CHANGELOG.md name the same
#      version ("## 0.2.0-dev — unreleased" for work after 0.1.0).
# Run by the lint suite (tests/run.sh); prints what differs and exits 1.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
bad=0
last=""
while read -r release file sum; do
    case $release in '#'* | '') continue ;; esac
    if [ ! -f "migrations/$file" ]; then
        echo "released-migrations: migrations/$file (released in $release) is missing"; bad=1; continue
    fi
    have=$(sha256sum "migrations/$file" | cut -c1-64)
    if [ "$have" != "$sum" ]; then
        echo "released-migrations: migrations/$file was released in $release and has changed since" \
            "(sha256 $have, released $sum): write a new migration instead"
        bad=1
    fi
    at=""
    if git rev-parse -q --verify "refs/tags/v$release" >/dev/null 2>&1; then
        at="v$release"
    else
        at=$(sed -n "s/^# commit $release \([0-9a-f]\{40\}\)$/\1/p" migrations/released)
        if [ -n "$at" ] && ! git cat-file -e "$at^{commit}" 2>/dev/null; then
            at=""   # a shallow clone: the commit is not here
        fi
    fi
    if [ -n "$at" ]; then
        tagged=$(git show "$at:migrations/$file" 2>/dev/null | sha256sum | cut -c1-64)
        if [ "$tagged" != "$sum" ]; then
            echo "released-migrations: migrations/$file differs from its text at $at (release $release)"; bad=1
        fi
    fi
    last=$file
done <migrations/released
listed=$(awk '!/^#/ && NF { print $2 }' migrations/released)
for f in migrations/0*.sql; do
    name=$(basename "$f")
    grep -qxF "$name" <<<"$listed" && continue
    if [[ -n "$last" && "$name" < "$last" ]]; then
        echo "released-migrations: $name is not released but sorts before the released $last"; bad=1
    fi
done
version=$(sed -n 's/^#define OUTBOX_RELAY_VERSION "\(.*\)"$/\1/p' relay/version.h)
heading=$(sed -n 's/^## \([0-9][^ ]*\).*/\1/p' CHANGELOG.md | head -1)
if [ -z "$version" ] || [ "$version" != "$heading" ]; then
    echo "released-migrations: relay/version.h says '$version', CHANGELOG.md's newest heading '$heading'"; bad=1
fi
[ "$bad" = 0 ] && echo "released-migrations: $(grep -c '^[0-9]' migrations/released) released migrations unchanged; version $version"
exit "$bad"
