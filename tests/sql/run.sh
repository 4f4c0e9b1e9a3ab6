#!/usr/bin/env bash
# tests/sql/run.sh — the SQL suite: every pgTAP file in tests/sql/*.sql, then the
# schema-equivalence check (migrations/ vs schema/outbox/load.sql).
#
# Needs the PG* environment of a running cluster, as tests/lib/pgcluster.sh leaves
# it (superuser "postgres", trust over 127.0.0.1). With no PGPORT set it starts
# its own throwaway cluster and stops it on exit.
#
# Isolation: the migrations are applied once, to a template database; every test
# file then gets its own fresh copy (CREATE DATABASE ... TEMPLATE), so files are
# independent and may commit (the concurrency tests must: they use real
# connections through dblink). All databases are dropped on exit.
#
# Output: pg_prove's report per file, the equivalence check's, and as the very
# last line "N passed, N failed" (test files + the equivalence check).
# Exit status: 0 only if everything passed.

set -u -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

own_cluster=
dbs=()
cleanup() {
    local db
    if [ -n "${PGPORT:-}" ]; then
        for db in "${dbs[@]}"; do
            psql -X -q -d postgres -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1
        done
    fi
    if [ -n "$own_cluster" ]; then
        pgcluster_stop "$own_cluster"
        rm -rf "$own_cluster"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -z "${PGPORT:-}" ]; then
    . "$repo/tests/lib/pgcluster.sh"
    own_cluster=$(mktemp -d)
    pgcluster_start "$own_cluster" || { echo "run.sh: could not start a cluster" >&2; echo "0 passed, 1 failed"; exit 1; }
fi
export PGUSER=${PGUSER:-postgres}

prefix="outbox_sqltest_$$"
template="${prefix}_tmpl"

sql() { PGOPTIONS="${PGOPTIONS:-} -c client_min_messages=warning" psql -X -q -v ON_ERROR_STOP=1 "$@"; }

# --- the template: migrations in order, then the test extensions -------------
dbs+=("$template")
# The migrations run as the schema owner, a CREATEROLE non-superuser
# (tests/lib/pgcluster.sh creates it); the test extensions as postgres.
owner=${OUTBOX_OWNER:-outbox_owner}
if ! sql -d postgres -c "CREATE DATABASE \"$template\" OWNER $owner TEMPLATE template0" >/dev/null; then
    echo "run.sh: cannot create databases (is a cluster running at ${PGHOST:-?}:${PGPORT}?)" >&2
    echo "0 passed, 1 failed"
    exit 1
fi
setup_ok=1
for m in "$repo"/migrations/*.sql; do
    PGUSER=$owner sql -d "$template" -f "$m" >/dev/null || { echo "run.sh: migration $(basename "$m") failed" >&2; setup_ok=0; break; }
done
if [ "$setup_ok" = 1 ]; then
    sql -d "$template" -c "CREATE EXTENSION pgtap; CREATE EXTENSION dblink;" >/dev/null ||
        { echo "run.sh: cannot create the pgtap/dblink extensions" >&2; setup_ok=0; }
fi

passed=0
failed=0

# --- pgTAP files, one database each ------------------------------------------
if [ "$setup_ok" = 1 ]; then
    n=0
    for f in "$here"/*.sql; do
        [ -e "$f" ] || continue
        n=$((n + 1))
        db="${prefix}_$n"
        dbs+=("$db")
        if sql -d postgres -c "CREATE DATABASE \"$db\" TEMPLATE \"$template\"" >/dev/null &&
            PGOPTIONS="${PGOPTIONS:-} -c statement_timeout=60s -c lock_timeout=30s" \
                timeout 180 pg_prove --dbname "$db" "$f"; then
            passed=$((passed + 1))
        else
            failed=$((failed + 1))
        fi
        psql -X -q -d postgres -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1
    done
else
    for f in "$here"/*.sql; do [ -e "$f" ] && failed=$((failed + 1)); done
fi

# --- schema/outbox/ (one file per object, built through load.sql) == migrations/
echo "--- schema equivalence (migrations/ vs ${OUTBOX_SCHEMA_FILE:-schema/outbox/load.sql})"
if "$here/schema_equivalence.sh"; then
    echo "schema_equivalence .. ok"
    passed=$((passed + 1))
else
    echo "schema_equivalence .. FAILED"
    failed=$((failed + 1))
fi

# --- the generated schema loads into a fresh cluster (no outbox_* role yet) ----
echo "--- schema/outbox/load.sql in a fresh cluster"
if "$here/schema_fresh_cluster.sh"; then
    echo "schema_fresh_cluster .. ok"
    passed=$((passed + 1))
else
    echo "schema_fresh_cluster .. FAILED"
    failed=$((failed + 1))
fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
