#!/usr/bin/env bash
# tests/bench/designs/run.sh — `make bench-designs`: what one delivered intent
# writes (WAL records by type, B-tree entries, heap updates HOT / non-HOT) and
# costs in backend CPU, under today's schema and under the "queue table"
# designs D1, D2 and D2b (tests/bench/designs/README.md says what each is).
#
# Self-contained like tests/bench/run.sh: its own PostgreSQL on a free port
# (tests/lib/pgcluster.sh) in a temp dir, the schema from
# `build/outbox-relay migrate` (built if missing), one template database per
# design (sql/common.sql, sql/q_common.sql for the queue designs, then
# sql/DESIGN.sql), then DESIGNS_ROUNDS rounds in which every design runs once,
# in the order of DESIGNS: a fresh database from the design's template and
# sql/measure.sql in it (load, ANALYZE, CHECKPOINT, drain; WAL read back with
# pg_walinspect, CPU from /proc/self/schedstat of the backend). Then
# analyze.py prints the tables. The cluster is stopped and the temp dir removed
# in the EXIT trap.
#
# Knobs (environment): DESIGNS_ROUNDS (3), DESIGNS_N (intents per run, 30000;
# at most 512000, what bench.drain's bounded loop can drain), DESIGNS (the
# designs, in the order they run within a round; default below),
# DESIGNS_KEEP=1 (keep the temp dir: results/*.csv, analysis.md, logs).
#
# Exit status: 0 when every run finished and the tables were printed; 1 when
# something broke (its logs are then kept).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
cd "$ROOT"
# shellcheck source=tests/lib/pgcluster.sh disable=SC1091  # followed with shellcheck -x from the root
. tests/lib/pgcluster.sh

ROUNDS=${DESIGNS_ROUNDS:-3}
N=${DESIGNS_N:-30000}
DESIGNS=${DESIGNS:-d0 d1 d2 d2b d0s d1f d2f d2bf d0e}
KEEP=${DESIGNS_KEEP:-}
RELAY=$ROOT/build/outbox-relay

say() { printf '== %s\n' "$*" >&2; }
die() { printf 'bench-designs: %s\n' "$*" >&2; exit 1; }

if ! [[ "$ROUNDS" =~ ^[0-9]+$ ]] || [ "$ROUNDS" -lt 1 ] || [ "$ROUNDS" -gt 100 ]; then
    die "DESIGNS_ROUNDS must be 1-100, not '$ROUNDS'"
fi
if ! [[ "$N" =~ ^[0-9]+$ ]] || [ "$N" -lt 256 ] || [ "$N" -gt 512000 ]; then
    die "DESIGNS_N must be 256-512000, not '$N'"
fi
for d in $DESIGNS; do
    if ! [[ "$d" =~ ^d[0-9a-z]+$ ]] || [ ! -f "$HERE/sql/$d.sql" ]; then
        die "no design '$d' (one of: d0 d0s d0e d1 d1f d2 d2f d2b d2bf)"
    fi
done
command -v python3 >/dev/null || die "python3 is needed for analyze.py"

if [ ! -x "$RELAY" ]; then
    say "building build/outbox-relay"
    make --no-print-directory build/outbox-relay >&2 || die "could not build build/outbox-relay"
fi

T=$(mktemp -d /tmp/outbox-designs.XXXXXX)
chmod 755 "$T"
RES=$T/results
mkdir -p "$RES"
OK=
cleanup() {
    pgcluster_stop "$T/pg"
    if [ -n "$KEEP" ] || [ -z "$OK" ]; then
        echo "bench-designs: logs and results kept in $T" >&2
    else
        rm -rf "$T"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# fsync, synchronous_commit and full_page_writes on, as in production (the
# full-page images are part of what a delivery writes after a checkpoint).
# autovacuum=off: no autovacuum WAL or CPU may land inside a measured range
# (each run is a fresh database of 2 x 30,000 rows; nothing needs vacuuming).
# wal_keep_size=4GB: measure.sql runs a CHECKPOINT between the load and the
# drain, which would otherwise recycle the load's WAL segments before
# pg_walinspect reads them back at the end of the run.
say "starting PostgreSQL in $T/pg"
pgcluster_start "$T/pg" fsync=on synchronous_commit=on full_page_writes=on autovacuum=off wal_keep_size=4GB ||
    die "PostgreSQL did not start"
export PGOPTIONS='-c client_min_messages=warning'
pq() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }

# The schema as users get it: migrated as outbox_owner (OWNER_URL's role)
# into a database of its own, which every design's template then copies.
say "migrating ($("$RELAY" --version 2>/dev/null || echo outbox-relay))"
base_url=$(pgcluster_owner_db designs_base) || die "could not create the database designs_base"
"$RELAY" migrate --db "$base_url" >"$T/migrate.log" 2>&1 || { cat "$T/migrate.log" >&2; die "migrate failed"; }

# One template per design: common.sql (target, pg_walinspect, CPU helpers; as
# postgres, a superuser, which pg_walinspect and pg_read_file need), the
# queue designs' copies of intents and attempts, then the design's own file.
template() {
    local d=$1
    pq -d postgres -c "CREATE DATABASE tmpl_$d TEMPLATE designs_base OWNER outbox_owner" || return 1
    pq -d "tmpl_$d" -f "$HERE/sql/common.sql" || return 1
    case $d in
    d1* | d2*) pq -d "tmpl_$d" -f "$HERE/sql/q_common.sql" || return 1 ;;
    esac
    pq -d "tmpl_$d" -f "$HERE/sql/$d.sql"
}
for d in $DESIGNS; do
    template "$d" >>"$T/templates.log" 2>&1 || { cat "$T/templates.log" >&2; die "template tmpl_$d failed"; }
done
say "templates ready: $DESIGNS"

# Rounds: every design once per round, in the order of DESIGNS, so that the
# machine's other load falls on all designs alike (analyze.py pairs the CPU
# figures by round). measure.sql appends to the CSV files of its working
# directory, hence the cd into results/.
STARTED=$SECONDS
for ((r = 1; r <= ROUNDS; r++)); do
    for d in $DESIGNS; do
        say "round $r/$ROUNDS: $d ($N intents, $((SECONDS - STARTED)) s so far)"
        db=r_${d}_$r
        pq -d postgres -c "CREATE DATABASE $db TEMPLATE tmpl_$d" >>"$T/measure.log" 2>&1 ||
            { tail -20 "$T/measure.log" >&2; die "could not create $db"; }
        (cd "$RES" && pq -v design="$d" -v run="$r" -v n="$N" -d "$db" -f "$HERE/sql/measure.sql") \
            >>"$T/measure.log" 2>&1 || { tail -20 "$T/measure.log" >&2; die "run $d/$r failed"; }
        pq -d postgres -c "DROP DATABASE $db" >>"$T/measure.log" 2>&1 || die "could not drop $db"
    done
done
say "$ROUNDS round(s) of $DESIGNS done in $((SECONDS - STARTED)) s"

python3 "$HERE/analyze.py" "$RES" >"$T/analysis.md" || { cat "$T/analysis.md" >&2; die "analyze.py failed"; }
cat "$T/analysis.md"
left=$(awk -F, '$14 != 0 { n++ } END { print n + 0 }' "$RES/summary.csv")
[ "$left" = 0 ] || die "$left run(s) left intents not succeeded (summary.csv column 14)"
OK=1
