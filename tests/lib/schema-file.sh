#!/usr/bin/env bash
# Writes schema/outbox.sql: the header below, then every migration in order
# under a banner. `make schema` runs it; tests/sql/schema_equivalence.sh
# proves the result builds the same schema as migrations/.
set -euo pipefail
cd "$(dirname "$0")/../.."
{
cat <<'HEADER'
-- schema/outbox.sql — the whole outbox schema, as the migrations build it.
--
-- Read this file to learn the data model; apply migrations/ (outbox-relay
-- migrate, or psql -f of each file in order) to build it. A test
-- (tests/sql/schema_equivalence.sh) proves that a database built from this
-- file and one built from migrations/ have the same schema. Regenerate it
-- with `make schema` whenever a migration is added.
--
-- The design is in docs/design.md. Comments of the older migrations cite it
-- as DESIGN.md; applied migrations are never edited (migrate checks them).
--
-- Sections: 1 tables and states · 2 enqueue, fingerprint, outcome, NOTIFY ·
-- 3 relay functions · 4 operator functions and the stuck view · 5 roles.

HEADER
n=1
for f in migrations/0*.sql; do
    echo "-- ==================================================================== $n. from $(basename "$f")"
    echo
    cat "$f"
    echo
    n=$((n + 1))
done
} > schema/outbox.sql
