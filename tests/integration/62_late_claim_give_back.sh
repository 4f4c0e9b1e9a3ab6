#!/usr/bin/env bash
# A claim answered after half the lease gives its rows back at once, ahead
# of the next claim, keeps their leases renewed until the database has them,
# and counts what the database released (issue 24, item 4). Before: the
# give-back queued behind the next, equally slow claim, the leases lapsed,
# another relay took the rows over as "may have executed" although none had
# been sent, and the relay logged them as released.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start svc --dedupe
# A rate limit makes every claim lock the target's gate row: a session that
# holds that lock makes the claim slow, as a busy database would.
target_add svc "http://127.0.0.1:$RECV_PORT_svc/calls" rate_limit_per_s=10000
enqueue_many svc "late:" 5

hold_gate() { # hold_gate SECONDS NAME: lock svc's gate row for SECONDS, in the background
    psql -X -q -v ON_ERROR_STOP=1 >"$T/hold-$2.out" 2>&1 <<SQL &
BEGIN;
SELECT 1 FROM outbox.target_state WHERE target = 'svc' FOR UPDATE;
SELECT pg_sleep($1);
COMMIT;
SQL
    ITEST_PIDS+=("$!")
}
hold_gate 3 first
ok "the gate row is held" wait_for 5 \
    "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(3)%' AND state = 'active'" 1
relay_start a --lease-ms 4000 --poll-interval-ms 100
ok "the relay's claim waits on the gate" wait_for 5 \
    "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%outbox.claim%' AND wait_event_type = 'Lock'" 1
# Next in the lock's queue, behind the claim: the relay's next claim will
# wait behind this one for 6 s, past the leases of the first claim's rows.
hold_gate 6 second
ok "the second hold queues behind the claim" wait_for 5 \
    "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%FOR UPDATE%' AND query LIKE '%target_state%'
        AND wait_event_type = 'Lock' AND application_name = 'psql'" 1
ok "the claim is answered late (after 3 s of a 4 s lease)" wait_cmd 10 \
    grep -q '"event":"claim_answer_late".*"rows":5' "$T/relay-a.log"
sleep 2.5 # the first claim's leases would have lapsed by now
is "$(sql "SET ROLE outbox_relay; SELECT count(*) FROM outbox.take_over('relay-other', 100, 60000, '{}')")" 0 \
    "another relay finds nothing to take over: the rows were given back in time"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE state = 'pending' AND attempts = 0")" 5 \
    "the rows are pending again, their attempt given back"
is "$(receiver_stat svc deliveries_total)" 0 "nothing was sent meanwhile"
ok "all delivered once the gate is free" wait_for 20 \
    "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded'" 5
is "$(receiver_stat svc effects_total)" 5 "one effect per key"
is "$(sql "SELECT count(*) FROM outbox.attempts WHERE class = 'ambiguous'")" 0 "no attempt was taken for one that may have executed"
is "$(sql "SELECT max(attempts) FROM outbox.intents")" 1 "each intent counts one attempt"
kill -TERM "$RELAY_PID_a"; relay_wait a 20
is "$?" 0 "the relay exits 0"
late=$(grep -c '"event":"claim_answer_late"' "$T/relay-a.log")
late_rows=$(sed -n 's/.*"event":"claim_answer_late".*"rows":\([0-9]*\).*/\1/p' "$T/relay-a.log" | paste -sd+ | bc)
is "$(sed -n 's/.*"event":"relay_stopped".*"released":\([0-9]*\).*/\1/p' "$T/relay-a.log")" "$late_rows" \
    "the relay counts as released what its $late late claim(s) gave back and the database released"
is "$(grep -c '"event":"release_partial"' "$T/relay-a.log")" 0 "no release fell short"
ok "no sanitizer report" relay_logs_clean
itest_done
