#!/usr/bin/env bash
# What a relay asks of PostgreSQL while its deliveries wait on a slow target
# (issue 26, 0034):
#   - the claim is planned once for each connection (the main one and, since
#     0052, the sweep's): outbox.claim_due's two
#     statements keep their first plan (before 0034 its one statement was
#     planned again at every call, about 1 ms of the backend each), and a
#     claim that finds nothing stops after the first;
#   - so is the question of an idle relay, outbox.next_due_ms (0035), and
#     outbox.target_gate is inlined into it (before, each call of it was a
#     query planned on its own);
#   - leases are not sent for renewal while they are young: 300 deliveries
#     held for 5 s under a 60 s lease make no renewal call while they wait
#     (before: one call a second, every row held in each); the calls that
#     remain list outcomes waiting for their record;
#   - leases are still renewed when a delivery outlasts them: answers after
#     8 s under a 6 s lease, two relays side by side (either would take over
#     a lease the other let lapse), each intent delivered once, at its first
#     attempt.
# pg_stat_statements (track_planning) counts the plans, track_functions the
# calls.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup shared_preload_libraries=pg_stat_statements pg_stat_statements.track=all \
    pg_stat_statements.track_planning=on track_functions=all
sql "CREATE EXTENSION pg_stat_statements" >/dev/null || bail "pg_stat_statements is not available"
calls_of() { sql "SELECT coalesce((SELECT sum(calls) FROM pg_stat_user_functions WHERE funcname = '$1'), 0)"; }
renewals() { calls_of renew_leases; }
# calls and plans of the nested statement of claim_due that starts with $1
plans_of() {
    sql "SELECT coalesce(sum(calls), 0) || ' ' || coalesce(sum(plans), 0) FROM pg_stat_statements
          WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
            AND query LIKE '$1%'"
}

# -- 300 deliveries answered after 5 s, a 60 s lease -------------------------
receiver_start slow --delay-ms 5000
target_add slow "http://127.0.0.1:$RECV_PORT_slow/effects"
enqueue_many slow "wait:" 300
sql "SELECT pg_stat_statements_reset()" >/dev/null
relay_start a --lease-ms 60000 --exit-when-idle
relay_wait a 60
is "$?" "0" "the relay delivers the 300 and exits"
sleep 0.5 # its backends' statistics are written as they exit
effects_table slow
is "$(sql "SELECT count(*) || ' ' || sum(n) || ' ' || max(n) FROM effects")" "300 300 1" \
    "each intent took effect once"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded' AND attempts = 1")" "300" \
    "each succeeded at its first attempt"
# Claims come on two connections (main and sweep, 0052): once on each at most.
read -r calls plans <<<"$(plans_of 'WITH claimed AS')"
ok "the claim's update ran $calls times, planned once a connection ($plans)" \
    test "$calls" -ge 2 -a "$plans" -ge 1 -a "$plans" -le 2
read -r calls plans <<<"$(plans_of 'SELECT coalesce(array_agg(c.id)')"
ok "the claim's choice of rows ran $calls times, planned once a connection ($plans)" \
    test "$calls" -ge 2 -a "$plans" -ge 1 -a "$plans" -le 2
chose=$calls
read -r calls plans <<<"$(plans_of 'WITH claimed AS')"
ok "claims that found nothing ended before the update: $calls updates for $chose claims" test "$calls" -lt "$chose"
read -r calls plans <<<"$(plans_of 'due_ms := (SELECT')"
ok "the idle relay's question ran $calls times, planned once ($plans)" test "$calls" -ge 2 -a "$plans" = 1
ok "target_gate is inlined: $(calls_of target_gate) calls of it as a function, $(calls_of next_due_ms) of next_due_ms" \
    test "$(calls_of target_gate)" = 0 -a "$(calls_of next_due_ms)" -ge 2
held=$(renewals)
ok "no renewal call while the rows were young: $held calls over 5 s (one a second sent every row)" \
    test "$held" -le 2

# -- answers after 8 s, a 6 s lease: renewed ---------------------------------
receiver_start slower --delay-ms 8000
target_add slower "http://127.0.0.1:$RECV_PORT_slower/effects"
enqueue_many slower "outlast:" 20
relay_start b --lease-ms 6000
relay_start c --lease-ms 6000
ok "the 20 are delivered" wait_for 40 "SELECT count(*) FROM outbox.intents WHERE target = 'slower' AND state = 'succeeded'" 20
kill -TERM "$RELAY_PID_b" "$RELAY_PID_c"
relay_wait b 20
is "$?" "0" "one relay stops cleanly"
relay_wait c 20
is "$?" "0" "so does the other"
sleep 0.5
ok "their leases were renewed: $(($(renewals) - held)) calls" test "$(($(renewals) - held))" -ge 4
sql "DROP TABLE effects" >/dev/null
effects_table slower
is "$(sql "SELECT count(*) || ' ' || sum(n) || ' ' || max(n) FROM effects")" "20 20 1" \
    "each intent took effect once"
is "$(sql "SELECT count(*) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
            WHERE i.target = 'slower' AND a.class = 'succeeded' AND a.attempt = 1")" "20" \
    "each succeeded at its first attempt: no lease lapsed, nothing was taken over"
is "$(sql "SELECT count(*) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
            WHERE i.target = 'slower'")" "20" "and no other attempt was recorded"
ok "no sanitizer report" relay_logs_clean
itest_done
