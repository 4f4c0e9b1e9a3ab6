#!/usr/bin/env bash
# Intents flow while a snapshot is held (issue 40, item 6; migration 0047).
#
# A session sits in `BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1` (a
# forgotten BEGIN) while intents are enqueued one per transaction and a relay
# delivers them. Vacuum can remove nothing the snapshot might see, so the index
# entry of every row leased since the hold began stays in intents_due. Asserted:
#   - every intent is delivered exactly once, at its first attempt;
#   - the claim does not step over those entries: the buffers its scan reads
#     per claim (pg_stat_statements, shared_blks_hit of claim_due's choice of
#     rows) stay a small fraction of what one scan of the target's range from
#     its start reads at the end (EXPLAIN (ANALYZE, BUFFERS) of the scan as it
#     was before 0047), which grows with every row delivered under the hold;
#   - an intent whose transaction commits after the claims' floor has passed
#     its next_attempt_at is still claimed: one that commits 0.5 s after its
#     start (inside the floor's window) and one that commits 3 s after (behind
#     it: the sweep finds it);
#   - when the hold ends, VACUUM brings the dead versions back to nothing.
# Counts only: no assertion on elapsed time.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup shared_preload_libraries=pg_stat_statements pg_stat_statements.track=all
sql "CREATE EXTENSION pg_stat_statements" >/dev/null || bail "pg_stat_statements is not available"

receiver_start fx
target_add fx "http://127.0.0.1:$RECV_PORT_fx/effects"
relay_start a
wait_for 120 "SELECT count(*) FROM outbox.relays WHERE relay_id = 'relay-a'" 1 || bail "the relay did not start"

# trickle PREFIX N [SLEEP]: N intents, one per transaction (psql's autocommit)
trickle() {
    local i
    for i in $(seq 1 "$2"); do
        echo "SELECT outbox.enqueue('$1$i', 'fx', '{\"n\": $i}'::jsonb);"
        [ -z "${3:-}" ] || echo "SELECT pg_sleep($3);"
    done | psql -X -q -v ON_ERROR_STOP=1 >/dev/null
}
succeeded() { echo "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded' AND key LIKE '$1%'"; }

# -- the hold -----------------------------------------------------------------
PGAPPNAME=itest-hold psql -X -q >/dev/null 2>&1 <<'SQL' &
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT 1;
SELECT pg_sleep(600);
SQL
ITEST_PIDS+=("$!")
ok "a session holds its snapshot" wait_for 60 \
    "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'itest-hold' AND backend_xmin IS NOT NULL" 1

# -- 2,000 intents under the hold ----------------------------------------------
trickle 'a:' 2000
ok "the first 2,000 are delivered" wait_for 300 "$(succeeded a:)" 2000
sql "SELECT pg_stat_statements_reset()" >/dev/null

# -- 500 more, paced, with two late commits among them -------------------------
psql -X -q >/dev/null 2>&1 <<'SQL' &
BEGIN;
SELECT outbox.enqueue('late:window', 'fx', '{}'::jsonb);
SELECT pg_sleep(0.5);
COMMIT;
SQL
late_a=$!
ITEST_PIDS+=("$late_a")
psql -X -q >/dev/null 2>&1 <<'SQL' &
BEGIN;
SELECT outbox.enqueue('late:sweep', 'fx', '{}'::jsonb);
SELECT pg_sleep(3);
COMMIT;
SQL
late_b=$!
ITEST_PIDS+=("$late_b")
trickle 'b:' 500 0.01
wait "$late_a" "$late_b"
ok "the next 500 are delivered" wait_for 300 "$(succeeded b:)" 500
ok "an intent committed 0.5 s after its next_attempt_at is delivered" \
    wait_for 300 "$(succeeded late:window)" 1
ok "an intent committed 3 s after it (behind the floor) is delivered" \
    wait_for 300 "$(succeeded late:sweep)" 1

read -r calls hits <<<"$(sql "SELECT coalesce(sum(calls), 0) || ' ' || coalesce(sum(shared_blks_hit + shared_blks_read), 0)
    FROM pg_stat_statements
   WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
     AND query LIKE 'SELECT coalesce(array_agg(c.id)%'")"
full=$(psql -X -q -tA -c "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
    SELECT i.id FROM outbox.intents i
     WHERE i.state = 'pending' AND i.target = 'fx' AND i.next_attempt_at <= now()
     ORDER BY i.next_attempt_at LIMIT 100" |
    python3 -c 'import json,sys; p=json.load(sys.stdin)[0]["Plan"]; print(p["Shared Hit Blocks"] + p["Shared Read Blocks"])')
ok "a scan from the start of the range reads $full buffers: the hold kept the leased rows' entries" \
    test "$full" -ge 100
ok "the claim's scan read $hits buffers in $calls claims: on average under a fifth of that" \
    test "$calls" -ge 10 -a $((hits * 5)) -lt $((calls * full))

effects_table fx
is "$(sql "SELECT count(*) || ' ' || sum(n) || ' ' || max(n) FROM effects")" "2502 2502 1" \
    "each of the 2,502 intents took effect once"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded' AND attempts = 1")" "2502" \
    "each succeeded at its first attempt"

# -- the hold ends ---------------------------------------------------------------
is "$(sql "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'itest-hold'")" \
    "1" "the hold ends"
wait_for 60 "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'itest-hold'" 0
sql "VACUUM outbox.intents" >/dev/null
is "$(sql "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'outbox.intents'::regclass")" "0" \
    "one VACUUM after the hold leaves no dead version"
kill -TERM "$RELAY_PID_a"
relay_wait a 20
is "$?" "0" "the relay stops cleanly"
ok "no sanitizer report" relay_logs_clean
itest_done
