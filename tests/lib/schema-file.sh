#!/usr/bin/env bash
# Writes schema/outbox/: the net schema, what a database looks like after
# every migration, one file per live object (functions/enqueue.sql,
# tables/intents.sql, ...) and schema/outbox/load.sql that builds it. The one
# generated view of the schema: `git log -p schema/outbox/functions/X.sql` is
# the history of one object. `make schema` runs it whenever a migration is
# added; tests/sql/schema_equivalence.sh proves that load.sql builds the same
# schema as migrations/, tests/sql/schema_fresh_cluster.sh that it loads into
# a fresh cluster.
#
# How: a throwaway cluster (tests/lib/pgcluster.sh), the migrations applied
# in order, pg_dump --schema-only of schema outbox, then tests/lib/schema-order.py
# writes each object's file. Roles are cluster-wide and not in a schema dump:
# load.sql creates every role the privileges grant to, as migrations 0005
# and 0022 do.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tests/lib/pgcluster.sh"
work=$(mktemp -d)
trap 'pgcluster_stop "$work/pg" >/dev/null 2>&1; rm -rf "$work"' EXIT
chmod 755 "$work"
pgcluster_start "$work/pg" >/dev/null 2>&1 || { echo "schema-file: cannot start PostgreSQL" >&2; exit 1; }
for m in "$root"/migrations/0*.sql; do
    PGUSER=outbox_owner psql -X -q -v ON_ERROR_STOP=1 -d postgres -f "$m" >/dev/null 2>"$work/err" ||
        { cat "$work/err" >&2; echo "schema-file: $(basename "$m") failed" >&2; exit 1; }
done
"$(pgcluster_bindir)/pg_dump" --schema-only --schema=outbox --no-owner -d postgres >"$work/dump.sql"
python3 "$root/tests/lib/schema-order.py" "$work/dump.sql" "$(ls "$root"/migrations/0*.sql | tail -1 | xargs basename)" \
    --split "$root/schema/outbox"
echo "schema/outbox/ written ($(find "$root/schema/outbox" -name '*.sql' | wc -l) files)"
