#!/usr/bin/env bash
# tests/sql/scale_views.sh — the operator views stay cheap over a large history.
#
# Starts its own throwaway cluster (tests/lib/pgcluster.sh), applies migrations/,
# bulk-loads a history of SCALE_INTENTS (default 1,000,000) final intents with one
# attempts row each, spread over 3 targets and 30 days, of which SCALE_RECENT (default
# 100,000) settled in the last 5 minutes (about 333 deliveries a second), plus a few
# thousand live rows (pending, in flight, unknown, awaiting approval; some with an
# attempt a minute ago), then VACUUM ANALYZE. Nothing is disabled: every index, constraint and trigger of the
# schema is in place while loading.
#
# Then, for SELECT * FROM outbox.stuck and SELECT * FROM outbox.target_health:
# the plan of EXPLAIN (ANALYZE, BUFFERS) as TAP comments, its execution time, and
# the median of 3 timed runs through psql (\timing); asserts that no plan has a
# Seq Scan on outbox.intents and that each query touches fewer pages (shared
# buffers hit or read, from EXPLAIN's BUFFERS) than half of what outbox.intents
# holds (target_health reads the last 5 minutes' 100,000 intents and their
# attempts: 17,460 pages of about 58,000): a guard against a plan that reads the whole table,
# counted, not timed (a busy 2-core machine once took 508 ms for a plan that
# takes 300 alone; the times are printed, and judged by make bench). Also
# checks the view's numbers against direct counts. How long the script took is
# printed.
#
# Output: TAP (ok N - ..., then 1..N). Exit status 0 only if every test passed.
set -u -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
. "$repo/tests/lib/pgcluster.sh"

N=${SCALE_INTENTS:-1000000}
RECENT=${SCALE_RECENT:-100000}

tap_n=0
tap_failed=0
ok() { # ok DESC CMD...
    local desc=$1; shift
    tap_n=$((tap_n + 1))
    if "$@"; then echo "ok $tap_n - $desc"; else echo "not ok $tap_n - $desc"; tap_failed=$((tap_failed + 1)); fi
}
is() { # is GOT WANT DESC
    tap_n=$((tap_n + 1))
    if [ "$1" = "$2" ]; then echo "ok $tap_n - $3"; else
        echo "not ok $tap_n - $3"; echo "#   got:  '$1'"; echo "#   want: '$2'"; tap_failed=$((tap_failed + 1)); fi
}
bail() { echo "Bail out! $*"; exit 1; }

dir=$(mktemp -d /tmp/outbox-scale.XXXXXX)
chmod 755 "$dir"
cleanup() {
    pgcluster_stop "$dir/pg"
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Room for the load (fewer checkpoints, a faster VACUUM); the queries run with the default
# shared_buffers and work_mem. Nothing is disabled.
# shellcheck disable=SC2086
pgcluster_start "$dir/pg" max_wal_size=4GB checkpoint_timeout=30min maintenance_work_mem=256MB \
    ${SCALE_PG_SETTINGS:-} || bail "PostgreSQL did not start"
export PGDATABASE=scale
psql -X -q -d postgres -c "CREATE DATABASE scale OWNER outbox_owner" >/dev/null || bail "cannot create the database"
sql() { PGOPTIONS="-c client_min_messages=warning" psql -X -q -tA -v ON_ERROR_STOP=1 "$@"; }
for m in "$repo"/migrations/*.sql; do
    PGUSER=outbox_owner sql -f "$m" >/dev/null || bail "migration $(basename "$m") failed (as outbox_owner)"
done

# --- the load ----------------------------------------------------------------------
t0=$SECONDS
sql -v n="$N" -v recent="$RECENT" <<'SQL' >/dev/null || bail "the load failed"
INSERT INTO outbox.targets (name, url) VALUES ('scale-0', 'https://s0.test/hook'), ('scale-1', 'https://s1.test/hook'),
                                              ('scale-2', 'https://s2.test/hook');
-- History: final rows from 30 days ago up to 10 minutes ago; then :recent rows in the last 5 minutes.
INSERT INTO outbox.intents (key, target, payload, fingerprint, state, attempts, next_attempt_at, first_attempt_at,
                            response_status, response_body, created_at, updated_at)
SELECT 'hist:' || lpad(g::text, 9, '0'), 'scale-' || (g % 3),
       jsonb_build_object('order', g, 'amount_cents', g % 100000), sha256(int8send(g)),
       s.state, 1, ts, ts, CASE WHEN s.state = 'succeeded' THEN 200 WHEN s.state = 'failed' THEN 404 END,
       CASE WHEN s.state = 'succeeded' THEN '{"ok":true}' END, ts - interval '200 milliseconds', ts
  FROM generate_series(1, :n) AS g
 CROSS JOIN LATERAL (SELECT CASE WHEN g % 53 = 0 THEN 'failed' WHEN g % 97 = 0 THEN 'cancelled'
                                 ELSE 'succeeded' END::outbox.intent_state AS state) AS s
 CROSS JOIN LATERAL (SELECT CASE WHEN g <= :n - :recent
                                 THEN now() - interval '30 days' + (g::float8 / (:n - :recent)) * (interval '30 days' - interval '10 minutes')
                                 ELSE now() - interval '295 seconds' + ((g - (:n - :recent))::float8 / :recent) * interval '290 seconds'
                            END AS ts) AS t;
-- One attempts row per final row: its delivery, or the decision that cancelled it.
INSERT INTO outbox.attempts (intent_id, attempt, relay, class, request_sent, http_status, latency_ms, at)
SELECT i.id, 1, 'relay-' || (i.id % 4),
       CASE i.state WHEN 'succeeded' THEN 'succeeded' WHEN 'failed' THEN 'permanent_failure' ELSE 'resolved' END::outbox.attempt_class,
       i.state <> 'cancelled', i.response_status,
       CASE WHEN i.state <> 'cancelled' THEN 5 + (hashint8(i.id) & 1023) % 400 END, i.updated_at
  FROM outbox.intents i;
-- Live rows: 2,000 pending (100 due over 5 minutes ago), 100 in flight (10 past their lease),
-- 200 unknown, 50 awaiting approval (5 for over 24 hours).
INSERT INTO outbox.intents (key, target, payload, fingerprint, state, attempts, next_attempt_at, lease_owner,
                            lease_expires_at, ambiguous, created_at, updated_at)
SELECT 'live:' || g, 'scale-' || (g % 3), jsonb_build_object('n', g), sha256(int8send(-g)), st, a, due, owner, lease, amb,
       now() - interval '1 hour', now() - interval '1 minute'
  FROM generate_series(1, 2350) AS g
 CROSS JOIN LATERAL (SELECT
        CASE WHEN g <= 2000 THEN 'pending' WHEN g <= 2100 THEN 'in_flight' WHEN g <= 2300 THEN 'unknown'
             ELSE 'awaiting_approval' END::outbox.intent_state AS st,
        CASE WHEN g <= 2000 THEN 0 ELSE 1 END AS a,
        CASE WHEN g <= 100 THEN now() - interval '6 minutes' WHEN g <= 2000 THEN now() + (g % 60) * interval '1 second'
             ELSE now() END AS due,
        CASE WHEN g > 2000 AND g <= 2100 THEN 'relay-' || (g % 4) END AS owner,
        CASE WHEN g > 2000 AND g <= 2010 THEN now() - interval '1 minute'
             WHEN g > 2010 AND g <= 2100 THEN now() + interval '10 minutes' END AS lease,
        g > 2100 AND g <= 2300 AS amb) AS l;
UPDATE outbox.intents SET created_at = now() - interval '25 hours' WHERE key IN ('live:2301', 'live:2302', 'live:2303', 'live:2304', 'live:2305');
-- Live rows that were tried a minute ago: pending retries (not sent), unknown (ambiguous).
INSERT INTO outbox.attempts (intent_id, attempt, relay, class, request_sent, latency_ms, at)
SELECT i.id, 1, 'relay-0', CASE i.state WHEN 'pending' THEN 'not_sent' ELSE 'ambiguous' END::outbox.attempt_class,
       i.state <> 'pending', CASE i.state WHEN 'pending' THEN 3 ELSE 10000 END, i.updated_at
  FROM outbox.intents i
 WHERE i.key LIKE 'live:%' AND i.state IN ('pending', 'unknown') AND i.next_attempt_at > now();
SQL
load_s=$((SECONDS - t0))
t0=$SECONDS
sql -c "VACUUM ANALYZE" >/dev/null || bail "VACUUM ANALYZE failed"
vacuum_s=$((SECONDS - t0))

counts=$(sql -c "SELECT (SELECT count(*) FROM outbox.intents WHERE state IN ('succeeded', 'failed', 'cancelled')) || '|' ||
                        (SELECT count(*) FROM outbox.attempts) || '|' ||
                        (SELECT count(DISTINCT target) FROM outbox.intents) || '|' ||
                        pg_size_pretty(pg_total_relation_size('outbox.intents')) || '|' ||
                        pg_size_pretty(pg_total_relation_size('outbox.attempts'))")
IFS='|' read -r n_final n_attempts n_targets size_intents size_attempts <<<"$counts"
echo "# loaded $n_final final intents and $n_attempts attempts over $n_targets targets in ${load_s} s" \
     "(intents $size_intents, attempts $size_attempts with indexes); VACUUM ANALYZE ${vacuum_s} s"
ok "history of at least $N final intents and $N attempts over 3 targets" \
    test "$n_final" -ge "$N" -a "$n_attempts" -ge "$N" -a "$n_targets" = 3

# --- the views ---------------------------------------------------------------------
no_seq_scan_on_intents() { ! grep -q 'Seq Scan on intents' <<<"$1"; }

# explain_and_time NAME QUERY: the plan as comments, then the tests.
explain_and_time() {
    local name=$1 query=$2 plan exec_ms times median buffers
    sql -c "$query" >/dev/null || { ok "$name runs" false; return; }   # warm the cache once
    plan=$(sql -c "EXPLAIN (ANALYZE, BUFFERS) $query") || { ok "$name: EXPLAIN ANALYZE" false; return; }
    sed 's/^/#   /' <<<"$plan"
    exec_ms=$(sed -n 's/^Execution Time: \([0-9.]*\) ms$/\1/p' <<<"$plan")
    times=$(for _ in 1 2 3; do
                printf '\\timing on\n%s \\g /dev/null\n' "$query" | psql -X -q -d scale 2>&1 |
                    sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p'
            done | sort -n)
    median=$(sed -n 2p <<<"$times")
    echo "# $name: EXPLAIN ANALYZE execution time ${exec_ms} ms; timed runs (psql timing): $(tr '\n' ' ' <<<"$times")ms, median ${median} ms"
    ok "$name: no Seq Scan on outbox.intents" no_seq_scan_on_intents "$plan"
    # The top node's first Buffers line counts its children's too.
    buffers=$(grep -m1 -E '^ *Buffers: shared' <<<"$plan" |
        awk '{ n = 0; for (i = 1; i <= NF; i++) if ($i ~ /^(hit|read)=/) { split($i, kv, "="); n += kv[2] } print n }')
    ok "$name: ${buffers:-?} pages touched, under half of the $table_pages pages of outbox.intents" \
        test "${buffers:-999999999}" -lt $((table_pages / 2))
}

table_pages=$(sql -c "SELECT relpages FROM pg_class WHERE oid = 'outbox.intents'::regclass")
explain_and_time "outbox.stuck" "SELECT * FROM outbox.stuck"
explain_and_time "outbox.target_health" "SELECT * FROM outbox.target_health"

# The numbers, against direct counts taken in the same statement (one now()).
echo "# target_health:"
sql -c "SELECT target, pending, in_flight, unknown, awaiting_approval, succeeded_5m, failed_5m, cancelled_5m, attempts_5m,
               success_ratio_5m, p95_latency_ms_5m, oldest_pending_age, circuit
          FROM outbox.target_health ORDER BY target" -F ' | ' | sed 's/^/#   /'
mismatch=$(sql -c "
    WITH v AS (SELECT sum(pending) p, sum(in_flight) f, sum(unknown) u, sum(awaiting_approval) w, sum(succeeded_5m) s,
                      sum(failed_5m) x, sum(cancelled_5m) c, sum(attempts_5m) a FROM outbox.target_health),
         d AS (SELECT count(*) FILTER (WHERE state = 'pending') p, count(*) FILTER (WHERE state = 'in_flight') f,
                      count(*) FILTER (WHERE state = 'unknown') u, count(*) FILTER (WHERE state = 'awaiting_approval') w,
                      count(*) FILTER (WHERE state = 'succeeded' AND updated_at > now() - interval '5 minutes') s,
                      count(*) FILTER (WHERE state = 'failed' AND updated_at > now() - interval '5 minutes') x,
                      count(*) FILTER (WHERE state = 'cancelled' AND updated_at > now() - interval '5 minutes') c,
                      (SELECT count(*) FROM outbox.attempts WHERE at > now() - interval '5 minutes'
                          AND class IN ('not_sent', 'ambiguous', 'succeeded', 'retry_later', 'key_conflict',
                                        'permanent_failure')) a
                 FROM outbox.intents)
    SELECT CASE WHEN (v.*)::text = (d.*)::text THEN 'same' ELSE 'view ' || (v.*)::text || ' direct ' || (d.*)::text END FROM v, d")
is "$mismatch" same "target_health agrees with direct counts over the whole table"
is "$(sql -c "SELECT count(*) FILTER (WHERE reason = 'in flight past its lease') || ' ' ||
                     count(*) FILTER (WHERE reason LIKE 'outcome unknown%') || ' ' ||
                     count(*) FILTER (WHERE reason = 'pending for over 5 minutes') || ' ' ||
                     count(*) FILTER (WHERE reason = 'awaiting approval for over 24 hours') FROM outbox.stuck")" \
   "10 200 100 5" "stuck lists the crafted live rows: 10 past lease, 200 unknown, 100 overdue pending, 5 old approvals"

echo "# the whole script took ${SECONDS} s"
echo "1..$tap_n"
[ "$tap_failed" = 0 ]
