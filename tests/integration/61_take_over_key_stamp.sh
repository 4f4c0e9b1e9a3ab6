#!/usr/bin/env bash
# A lease take-over decides by what the request that may have executed
# carried (the claim's key stamp), never by the target's key header today
# (issue 24, item 3): a request sent without a key by a relay that died is
# not re-sent after an admin adds key_header; a row claimed by a relay older
# than 0025 (stamp NULL) is not re-sent either; retry_now refuses both; a
# keyed request is re-sent with its key as before.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start svc --dedupe --delay-ms 2500
target_add svc "http://127.0.0.1:$RECV_PORT_svc/calls" key_header=NULL timeout_ms=20000 \
    backoff_base_ms=10 backoff_cap_ms=100
receiver_start keyed --dedupe --delay-ms 2500
target_add keyed "http://127.0.0.1:$RECV_PORT_keyed/calls" timeout_ms=20000 backoff_base_ms=10 backoff_cap_ms=100
enqueue_many svc "s:" 10
enqueue_many keyed "k:" 10

relay_start victim --lease-ms 2000 --poll-interval-ms 100
ok "the first relay's requests are in flight" wait_for 10 \
    "SELECT count(*) FROM outbox.intents WHERE state = 'in_flight'" 20
is "$(sql "SELECT count(*) FILTER (WHERE target = 'svc' AND key_sent = false)
                || '/' || count(*) FILTER (WHERE target = 'keyed' AND key_sent)
             FROM outbox.intents WHERE state = 'in_flight'")" "10/10" \
    "the claim stamped each row: no key for svc, the key for keyed"
both_arrived() { [ "$(receiver_stat svc deliveries_total)" = 10 ] && [ "$(receiver_stat keyed deliveries_total)" = 10 ]; }
ok "the receivers got the requests" wait_cmd 5 both_arrived
kill -9 "$RELAY_PID_victim"
wait "$RELAY_PID_victim" 2>/dev/null

# An admin gives svc a key header while the dead relay's leases run out.
sql "UPDATE outbox.targets SET key_header = 'Idempotency-Key' WHERE name = 'svc'"

relay_start heir --lease-ms 2000 --poll-interval-ms 100
ok "nothing stays in flight" wait_for 30 \
    "SELECT count(*) FROM outbox.intents WHERE state = 'in_flight'" 0
ok "keyed: re-sent with the key, succeeded" wait_for 30 \
    "SELECT count(*) FROM outbox.intents WHERE target = 'keyed' AND state = 'succeeded'" 10
is "$(receiver_stat keyed effects_total)" 10 "keyed: one effect per key"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE target = 'svc' AND state = 'unknown'")" 10 \
    "svc: sent without a key, so the take-over leaves it unknown although svc has a key header now"
sleep 1 # a wrong re-send would have reached the receiver by now
is "$(receiver_stat svc deliveries_total)" 10 "svc: nothing was sent again"
is "$(sql "SELECT count(*) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
             WHERE i.target = 'svc' AND a.request_sent IS NULL AND a.key_sent = false")" 10 \
    "each take-over's attempt records that the request went without the key"
is "$(sql "SELECT count(*) FROM outbox.stuck WHERE target = 'svc' AND reason =
             'outcome unknown: needs a person — no status URL, and an attempt that may have executed went without the key'")" \
    10 "outbox.stuck says why a person is needed"
err=$(psql -X -q -tA -c "SELECT outbox.retry_now('s:1')" 2>&1)
is "$(sed -n 's/^ERROR:  //p' <<<"$err")" \
    "outbox.retry_now: key 's:1' has an unknown outcome and an attempt that may have executed was sent without a key (target 'svc' had no key header then): the target cannot recognise it, and sending it again could execute it twice; find out from the target whether it acted, then resolve it" \
    "retry_now refuses: the request that may have executed had no key"
kill -TERM "$RELAY_PID_heir"; relay_wait heir 20
is "$?" 0 "heir exits 0"

# A relay of the previous release claims through outbox.claim: no stamp.
enqueue_many keyed "old:" 3
is "$(sql "SET ROLE outbox_relay; SELECT count(*) FROM outbox.claim('relay-old', ARRAY['keyed'], ARRAY[3], 3, 300)")" \
    3 "the previous relay's claim takes 3 rows"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE key LIKE 'old:%' AND state = 'in_flight' AND key_sent IS NULL")" \
    3 "its rows carry no stamp"
relay_start heir2 --lease-ms 2000 --poll-interval-ms 100
ok "the expired leases are taken over: unknown, not re-sent" wait_for 20 \
    "SELECT count(*) FROM outbox.intents WHERE key LIKE 'old:%' AND state = 'unknown'" 3
is "$(receiver_stat keyed deliveries_total)" 20 "keyed: none of them was sent (10 + 10 re-sent before)"
err=$(psql -X -q -tA -c "SELECT outbox.retry_now('old:1')" 2>&1)
is "$(sed -n 's/^ERROR:  //p' <<<"$err")" \
    "outbox.retry_now: key 'old:1' has an unknown outcome and whether an attempt that may have executed carried the key was not recorded (a lease taken over from a relay older than 0025, or an attempt before 0011): target 'keyed' may not recognise it, and sending it again could execute it twice; find out from the target whether it acted, then resolve it" \
    "retry_now refuses: whether the key went is not recorded"
is "$(sql "SELECT count(*) FROM outbox.stuck WHERE key LIKE 'old:%' AND reason =
             'outcome unknown: needs a person — no status URL, and whether an attempt that may have executed carried the key was not recorded'")" \
    3 "outbox.stuck says why"
kill -TERM "$RELAY_PID_heir2"; relay_wait heir2 20
is "$?" 0 "heir2 exits 0"
ok "no sanitizer report" relay_logs_clean
itest_done
