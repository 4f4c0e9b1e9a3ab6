#!/usr/bin/env bash
# tests/sql/schema_fresh_cluster.sh — the generated schema loads into a fresh
# cluster: a new initdb'd cluster (tests/lib/pgcluster.sh), where none of the
# outbox_* roles exist yet, a new database owned by outbox_owner, and the
# generated schema (schema/outbox/load.sql) loaded as `psql -f FILE` would
# load it: no ON_ERROR_STOP, so every failing statement
# is seen. Passes when psql exits 0, stderr holds no ERROR, and the database
# then has the outbox tables and the grants to every role.
#
# Why its own cluster: schema_equivalence.sh loads the file into the suite's
# cluster, where migrations/ have already created every role (roles are
# cluster-wide), so a role missing from the file's header goes unseen there
# (issue #39: outbox_mcp was granted to but never created).
set -u -o pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
. "$repo/tests/lib/pgcluster.sh"
work=$(mktemp -d)
trap 'pgcluster_stop "$work/pg" >/dev/null 2>&1; rm -rf "$work"' EXIT
chmod 755 "$work"
fail() { echo "schema_fresh_cluster: $*" >&2; exit 1; }

pgcluster_start "$work/pg" >/dev/null 2>&1 || fail "cannot start a fresh cluster"
n=0
for file in "$repo/schema/outbox/load.sql"; do
    n=$((n + 1))
    db="fresh_$n"
    psql -X -q -v ON_ERROR_STOP=1 -d postgres -c "CREATE DATABASE $db OWNER outbox_owner" >/dev/null ||
        fail "cannot create $db"
    # As psql -f would: from the file's folder is not needed (\ir is relative to the file).
    if ! PGUSER=outbox_owner psql -X -q -d "$db" -f "$file" >"$work/out" 2>"$work/err"; then
        cat "$work/err" >&2
        fail "psql -f ${file#"$repo"/} exited non-zero in a fresh cluster"
    fi
    if grep -q "ERROR" "$work/err"; then
        cat "$work/err" >&2
        fail "psql -f ${file#"$repo"/} printed an ERROR in a fresh cluster"
    fi
    # Not vacuous: the schema is there, and so is every role it grants to.
    got=$(psql -X -At -d "$db" -c "SELECT count(*) FROM pg_tables WHERE schemaname = 'outbox'
                                    AND tablename IN ('targets', 'intents', 'attempts', 'mcp_tools')") ||
        fail "cannot read $db"
    [ "$got" = 4 ] || fail "${file#"$repo"/} left $got of the 4 probe tables in $db"
    for role in outbox_app outbox_relay outbox_operator outbox_admin outbox_mcp; do
        psql -X -At -d "$db" -c "SELECT has_schema_privilege('$role', 'outbox', 'USAGE')" | grep -qx t ||
            fail "${file#"$repo"/}: $role has no USAGE on schema outbox in $db"
    done
    echo "schema_fresh_cluster: ${file#"$repo"/} loads (exit 0, no ERROR)"
done
