#!/usr/bin/env bash
# Proves: claims stop while more than 8 x --batch-size outcomes wait unrecorded (design.md, Record), and resume, one effect each, once they are written.
# The record connection cannot come back (terminated; a connection limit on
# the relay's login refuses the reconnect) while the main one claims and
# renews. With --batch-size 2 and --max-in-flight 4 the relay may have sent
# at most 8 x 2 + 4 = 20 requests before it stops claiming: a claim goes out
# only while at most 16 outcomes wait, for at most the room left in flight.
# Without that back-pressure it would send all 100 with nowhere to write them.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start r
target_add t "http://127.0.0.1:$RECV_PORT_r/act"
relay_start a --batch-size 2 --max-in-flight 4 --poll-interval-ms 100 --prune-interval-ms 0 \
    --reconnect-max-ms 300 --admin-listen 127.0.0.1:0
ADMIN=$(relay_admin_port a)
[ -n "$ADMIN" ] || bail "the relay's admin port did not open"
ok "ready" wait_cmd 10 bash -c "[ \"\$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:$ADMIN/readyz)\" = 200 ]"

sql "ALTER ROLE itest_relay CONNECTION LIMIT 1" >/dev/null
sql "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'outbox-relay/record'" >/dev/null
ok "the record connection is down and cannot come back" \
    wait_cmd 10 grep -q '"event":"db_connect_failed","connection":"record"' "$T/relay-a.log"

enqueue_many t "unrec:" 100
deliveries() { receiver_stat r deliveries_total; }
ok "the relay delivers while nothing can be recorded" wait_cmd 10 bash -c "[ \"\$(curl -s http://127.0.0.1:$RECV_PORT_r/_stats | sed -n 's/.*\"deliveries_total\":\([0-9]*\).*/\1/p')\" -gt 16 ]"
sleep 3 # a poll every 100 ms: 30 chances to claim more
stopped_at=$(deliveries)
ok "it stopped at the limit: $stopped_at requests, more than 16 and at most 8 x 2 + 4 = 20" \
    test "$stopped_at" -gt 16 -a "$stopped_at" -le 20
sleep 2
is "$(deliveries)" "$stopped_at" "2 s later, not one request more"
is "$(relay_metric "$ADMIN" outbox_unrecorded_outcomes)" "$stopped_at" \
    "outbox_unrecorded_outcomes: every delivered outcome waits in memory"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE state = 'in_flight'")/$(sql "SELECT count(*) FROM outbox.intents WHERE state = 'pending'")" \
    "$stopped_at/$((100 - stopped_at))" "their rows stay in flight (leases renewed), the rest pending, unclaimed"
is "$(sql "SELECT count(*) FROM outbox.attempts")" 0 "nothing is recorded"

sql "ALTER ROLE itest_relay CONNECTION LIMIT -1" >/dev/null
ok "once the record connection is back, everything is recorded" \
    wait_for 30 "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded'" 100
is "$(receiver_stat r deliveries_total)/$(receiver_stat r effects_total)/$(receiver_stat r keys_with_duplicate_effects)" \
    "100/100/0" "100 requests, 100 effects, no key twice"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE attempts = 1 AND NOT ambiguous")" 100 "each at its first attempt"
is "$(sql "SELECT count(*) FILTER (WHERE class = 'succeeded' AND recorded) || '/' || count(*) FROM outbox.attempts")" \
    "100/100" "one attempts row each, succeeded and applied"
is "$(relay_metric "$ADMIN" outbox_unrecorded_outcomes)/$(relay_metric "$ADMIN" outbox_taken_over_total)" "0/0" \
    "nothing waits, nothing was taken over"
kill -TERM "$RELAY_PID_a"
relay_wait a 20
is "$?" 0 "the relay stops cleanly"
ok "no sanitizer report" relay_logs_clean
itest_done
