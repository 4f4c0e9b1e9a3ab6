#!/usr/bin/env bash
# The next lease to expire, asked under a held snapshot (issue 40, item 6;
# migration 0050).
#
# A session sits in `BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1` (a
# forgotten BEGIN) while 1,500 intents are enqueued one per transaction and
# a relay delivers them. Every delivered row leaves the entry of its
# in-flight version in intents_in_flight, which nothing may remove or mark
# dead while the snapshot lives. Asserted:
#   - outbox.next_due_ms, asked as the idle relay asks it (its statement,
#     once per transaction, many times a second), reads those entries at
#     most twice a second: the index tuples it reads per call
#     (pg_stat_user_indexes) stay under a fifth of what one call of anyone
#     else reads (before 0050 every call read them all);
#   - it still answers NULL when nothing is in flight, and a lease taken
#     since its last read is still taken over: a lease left by a relay that
#     never answers ("relay-ghost", 3 s) is taken over by a running relay
#     while intents flow, and delivered;
#   - --exit-when-idle still waits for a lease of another relay: a relay
#     started beside a ghost's lease takes it over, delivers it, then exits 0.
# Counts only: no assertion on elapsed time.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

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
# the index tuples read in intents_in_flight so far (written by sessions that ended)
in_flight_read() {
    sql "SELECT idx_tup_read FROM pg_stat_user_indexes WHERE indexrelid = 'outbox.intents_in_flight'::regclass"
}
# ghost_lease KEY: KEY enqueued and leased for 3 s by a relay that never answers
ghost_lease() {
    sql "SELECT outbox.enqueue('$1', 'fx', '{\"n\": 0}'::jsonb)" >/dev/null
    sql "SELECT count(*) FROM outbox.intents WHERE key = '$1' AND state = 'pending'"
    sql "SELECT count(*) FROM outbox.claim_due('relay-ghost', ARRAY['fx'], ARRAY[1], 1, 3000)"
}

# -- the hold -----------------------------------------------------------------
PGAPPNAME=itest-hold psql -X -q >/dev/null 2>&1 <<'SQL' &
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT 1;
SELECT pg_sleep(600);
SQL
ITEST_PIDS+=("$!")
ok "a session holds its snapshot" wait_for 60 \
    "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'itest-hold' AND backend_xmin IS NOT NULL" 1

# -- 1,500 intents under the hold ----------------------------------------------
updates_before=$(sql "SELECT n_tup_upd FROM pg_stat_user_tables WHERE relid = 'outbox.relays'::regclass")
trickle 'a:' 1500
ok "the 1,500 are delivered" wait_for 300 "$(succeeded a:)" 1500
kill -TERM "$RELAY_PID_a"
relay_wait a 20
is "$?" "0" "the relay stops cleanly"
sleep 0.5 # its backends' statistics are written as they exit
echo "# the relay's row in outbox.relays was updated" \
    "$(($(sql "SELECT n_tup_upd FROM pg_stat_user_tables WHERE relid = 'outbox.relays'::regclass") - updates_before))" \
    "times during the trickle (the idle flag and heartbeats)"

# -- the question, as the idle relay asks it ------------------------------------
before=$(in_flight_read)
is "$(sql "SELECT coalesce(outbox.next_due_ms(ARRAY['fx'])::text, 'none')")" "none" \
    "nothing pending, nothing in flight: next_due_ms answers NULL"
sleep 0.5
first=$(($(in_flight_read) - before))
ok "a call reads $first entries of intents_in_flight: the hold kept the delivered rows'" \
    test "$first" -ge 1000
before=$(in_flight_read)
for i in $(seq 1 60); do
    # the relay's statement (relay/sql.h, STMT_NEXT_DUE)
    echo "WITH reuse AS MATERIALIZED (SELECT set_config('outbox.lease_reuse', 'on', false))
          SELECT coalesce(outbox.next_due_ms(ARRAY['fx'])::text, 'none') FROM reuse;"
    echo "SELECT pg_sleep(0.01);"
done | psql -X -q -tA -v ON_ERROR_STOP=1 >"$T/next-due.out"
sleep 0.5
many=$(($(in_flight_read) - before))
is "$(grep -c '^none$' "$T/next-due.out")" "60" "60 calls, one per transaction, each answered NULL"
ok "the relay's 60 calls read $many entries: on average under a fifth of that call's $first" \
    test $((many * 5)) -lt $((60 * first))

# -- a lease taken since the last read is taken over -----------------------------
is "$(ghost_lease ghost:1 | tr '\n' ' ')" "1 1 " "a ghost relay leases ghost:1 for 3 s"
relay_start b
trickle 'b:' 300 0.01
ok "the 300 enqueued meanwhile are delivered" wait_for 120 "$(succeeded b:)" 300
ok "the ghost's lease is taken over and ghost:1 delivered" wait_for 120 "$(succeeded ghost:1)" 1
is "$(sql "SELECT count(*) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
            WHERE i.key = 'ghost:1' AND a.error LIKE 'lease of relay relay-ghost expired%'")" "1" \
    "by a take-over naming the ghost"
kill -TERM "$RELAY_PID_b"
relay_wait b 20
is "$?" "0" "the relay stops cleanly"

# -- --exit-when-idle waits for another relay's lease ------------------------------
is "$(ghost_lease ghost:2 | tr '\n' ' ')" "1 1 " "a ghost relay leases ghost:2 for 3 s"
relay_start e --exit-when-idle
relay_wait e 120
is "$?" "0" "a relay with --exit-when-idle exits 0"
is "$(sql "$(succeeded ghost:2)")" "1" "only after taking over the ghost's lease and delivering ghost:2"

effects_table fx
is "$(sql "SELECT count(*) || ' ' || sum(n) || ' ' || max(n) FROM effects WHERE key NOT LIKE 'ghost:%'")" \
    "1800 1800 1" "each of the 1,800 intents took effect once"
is "$(sql "SELECT count(*) || ' ' || sum(n) FROM effects WHERE key LIKE 'ghost:%'")" "2 2" \
    "so did each ghost's, sent once (by the relay that took it over)"

# -- the hold ends ---------------------------------------------------------------
is "$(sql "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'itest-hold'")" \
    "1" "the hold ends"
ok "no sanitizer report" relay_logs_clean
itest_done
