#!/usr/bin/env bash
# Flow control: a target that answers 410 Gone, and one that answers 429 with
# Retry-After.
#   410 (the Standard Webhooks convention: stop sending to this endpoint): the
#       target is disabled and its circuit opened, for every relay, until an
#       admin enables it again; its intents wait as pending (a 410 did not act),
#       none is failed; once enabled, they are delivered.
#   429 + Retry-After: 3 pauses the whole target for 3 s (not only the intent
#       that got it): nothing else is sent to it meanwhile; then it drains.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start gone --dedupe --mode-status 410
receiver_start busy --dedupe --mode-status 429 --mode-retry-after 3
target_add gone "http://127.0.0.1:$RECV_PORT_gone/act"
target_add busy "http://127.0.0.1:$RECV_PORT_busy/act" max_in_flight=5
relay_start one --admin-listen "127.0.0.1:0"
admin_port=$(relay_admin_port one)
metric() { curl -s "http://127.0.0.1:$admin_port/metrics" | sed -n "s/^$1 \([0-9.e+]*\)$/\1/p"; }
ok "relay up" test -n "$admin_port"

# ---------------------------------------------------------------- 410 Gone
enqueue_many gone "gone:" 40
ok "a 410 disables the target" wait_for 10 "SELECT enabled FROM outbox.targets WHERE name = 'gone'" f
is "$(sql "SELECT circuit FROM outbox.target_health WHERE target = 'gone'")" open "its circuit is open"
is "$(sql "SELECT circuit_reason FROM outbox.target_health WHERE target = 'gone'")" \
    "HTTP 410 Gone: the target asked not to be sent more" "with the reason"
sleep 3
sent=$(receiver_stat gone deliveries_total)
is "$(sql "SELECT count(*) FROM outbox.intents WHERE target = 'gone' AND state = 'pending'")" 40 \
    "every intent of the gone target waits as pending (a 410 did not act): none failed"
sleep 3
is "$(receiver_stat gone deliveries_total)" "$sent" "nothing more is sent to a gone target ($sent requests in all)"
ok "outbox.stuck: target unavailable" test "$(sql "SELECT count(*) FROM outbox.stuck
    WHERE target = 'gone' AND reason LIKE 'target unavailable since % (circuit open: HTTP 410 Gone%'")" = 40
is "$(metric 'outbox_target_circuit_open{target="gone"}')" 1 "metric outbox_target_circuit_open{target=\"gone\"} 1"
is "$(sql "SELECT count(*) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
           WHERE i.target = 'gone' AND a.class = 'retry_later' AND a.http_status = 410")" "$sent" \
    "each 410 recorded as retry_later with its status"

curl -s -X POST -d '{}' "http://127.0.0.1:$RECV_PORT_gone/_mode" >/dev/null
sql "UPDATE outbox.targets SET enabled = true WHERE name = 'gone'" >/dev/null
is "$(sql "SELECT circuit FROM outbox.target_health WHERE target = 'gone'")" closed "an admin enables it: the circuit closes"
ok "its intents are delivered (the relay reloads targets every 10 s)" wait_for 30 \
    "SELECT count(*) FROM outbox.intents WHERE target = 'gone' AND state = 'succeeded'" 40
is "$(receiver_stat gone keys)" 40 "40 effects, one per key"

# ---------------------------------------------------------------- 429 + Retry-After
enqueue_many busy "busy:" 200
for i in $(seq 1 50); do
    [ "$(receiver_stat busy mode_answers_total)" -ge 1 ] && break
    sleep 0.1
done
sleep 0.3
curl -s -X POST -d '{}' "http://127.0.0.1:$RECV_PORT_busy/_mode" >/dev/null
d0=$(receiver_stat busy deliveries_total)
ok "the pause is shared: target_health.paused_until is set" \
    test "$(sql "SELECT paused_until > now() FROM outbox.target_health WHERE target = 'busy'")" = t
ok "metric outbox_target_paused{target=\"busy\"} 1" test "$(metric 'outbox_target_paused{target="busy"}')" = 1
sleep 1.5
d1=$(receiver_stat busy deliveries_total)
echo "# 429 + Retry-After 3: $d0 requests before the pause, $d1 after 1.5 s more"
is "$d1" "$d0" "paused: no request to the target while Retry-After lasts (the answer is normal again)"
ok "after the pause, the 200 intents are delivered" wait_for 20 \
    "SELECT count(*) FROM outbox.intents WHERE target = 'busy' AND state = 'succeeded'" 200
is "$(receiver_stat busy keys_with_duplicate_effects)" 0 "no duplicate effects"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE state IN ('failed', 'unknown')")" 0 "none failed, none unknown"

kill -TERM "$RELAY_PID_one"; relay_wait one 30
is "$?" 0 "relay exits 0"
ok "no sanitizer report" relay_logs_clean
itest_done
