#!/usr/bin/env bash
# tests/sql/schema_equivalence.sh — schema/outbox/load.sql must build exactly the schema
# that migrations/*.sql (applied in order) build.
#
# Builds one database from each, dumps schema "outbox" of both with
#   pg_dump --schema-only --schema=outbox --no-owner
# normalizes the dumps (drops "--" comment lines, blank lines, SET and
# set_config lines, and the \restrict/\unrestrict lines with their random key
# that recent pg_dump releases write) and diffs them. Prints the diff and exits 1 if they differ.
#
# Self-check, so the comparison cannot pass vacuously: a copy of the migrated
# database with one extra column must compare as different, and both dumps must
# actually contain the outbox tables.
#
# Needs the PG* environment of a running cluster (see tests/lib/pgcluster.sh).
# OUTBOX_SCHEMA_FILE overrides the schema file (default: schema/outbox/load.sql).

set -u -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
schema_file=${OUTBOX_SCHEMA_FILE:-$repo/schema/outbox/load.sql}
export PGUSER=${PGUSER:-postgres}

prefix="outbox_schemaeq_$$"
db_mig="${prefix}_mig"
db_sch="${prefix}_sch"
db_neg="${prefix}_neg"
work=$(mktemp -d)

cleanup() {
    local db
    for db in "$db_mig" "$db_sch" "$db_neg"; do
        psql -X -q -d postgres -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1
    done
    rm -rf "$work"
}
trap cleanup EXIT

fail() { echo "schema_equivalence: $*" >&2; exit 1; }
sql() { PGOPTIONS="${PGOPTIONS:-} -c client_min_messages=warning" psql -X -q -v ON_ERROR_STOP=1 "$@"; }

[ -f "$schema_file" ] || fail "$schema_file is missing (the reviewed schema; it must match migrations/)"

# pg_dump of the server's major version when the Debian layout has it.
major=$(psql -X -At -d postgres -c "SELECT current_setting('server_version_num')::int / 10000") ||
    fail "cannot reach the cluster"
pg_dump=pg_dump
[ -x "/usr/lib/postgresql/$major/bin/pg_dump" ] && pg_dump="/usr/lib/postgresql/$major/bin/pg_dump"

createdb_() { sql -d postgres -c "CREATE DATABASE \"$1\" OWNER outbox_owner TEMPLATE ${2:-template0}" >/dev/null; }

dump() { # dump DB OUT: the normalized schema-only dump of schema outbox
    "$pg_dump" --schema-only --schema=outbox --no-owner -d "$1" >"$work/$1.raw" ||
        fail "pg_dump of $1 failed"
    grep -v -E '^--|^[[:space:]]*$|^SET |^SELECT pg_catalog\.set_config|^\\(un)?restrict ' \
        "$work/$1.raw" >"$2"
    return 0
}

createdb_ "$db_mig" || fail "cannot create database $db_mig"
for m in "$repo"/migrations/*.sql; do
    PGUSER=outbox_owner sql -d "$db_mig" -f "$m" >/dev/null || fail "migration $(basename "$m") failed (as outbox_owner)"
done
createdb_ "$db_sch" || fail "cannot create database $db_sch"
PGUSER=outbox_owner sql -d "$db_sch" -f "$schema_file" >/dev/null || fail "$schema_file does not apply cleanly"

dump "$db_mig" "$work/mig.sql"
dump "$db_sch" "$work/sch.sql"

# Not vacuous: both dumps hold the schema (a failed or empty dump must not "match").
for f in "$work/mig.sql" "$work/sch.sql"; do
    for obj in 'CREATE TABLE outbox.targets' 'CREATE TABLE outbox.intents' 'CREATE TABLE outbox.attempts' \
        'CREATE FUNCTION outbox.enqueue' 'CREATE VIEW outbox.stuck' 'CREATE TRIGGER intents_notify'; do
        grep -q "^$obj" "$f" || fail "$(basename "$f" .sql) dump has no '$obj'"
    done
done

# Self-check: the comparison sees a one-column difference.
createdb_ "$db_neg" "\"$db_mig\"" || fail "cannot create database $db_neg"
sql -d "$db_neg" -c 'ALTER TABLE outbox.targets ADD COLUMN x int' >/dev/null || fail "self-check ALTER failed"
dump "$db_neg" "$work/neg.sql"
diff "$work/mig.sql" "$work/neg.sql" >"$work/neg.diff"
if [ $? != 1 ] || [ "$(grep -c '^[<>]' "$work/neg.diff")" != 1 ] || ! grep -q '^> *x integer' "$work/neg.diff"; then
    cat "$work/neg.diff" >&2
    fail "self-check: the comparison should see exactly one added line ('x integer') after ALTER TABLE outbox.targets ADD COLUMN x int"
fi

if diff -u --label "migrations/*.sql" --label "${schema_file#"$repo"/}" "$work/mig.sql" "$work/sch.sql"; then
    echo "schema_equivalence: ${schema_file#"$repo"/} matches migrations/ ($(wc -l <"$work/mig.sql") normalized dump lines)"
    exit 0
fi
echo "schema_equivalence: ${schema_file#"$repo"/} differs from migrations/ (diff above: - migrations, + schema file)" >&2
exit 1
