#!/usr/bin/env bash
# Flow control: a target that answers 410 Gone, and one that answers 429 with
# Retry-After.
#   410: many APIs answer it for one resource that is gone, so one 410 fails
#       the intent it answered (permanent_failure, not retried) and says
#       nothing about the target: it stays enabled and delivers the next
#       intents; 410s interleaved with other answers never disable it. Only
#       5 different intents in a row answered 410, with no other answer
#       between them (FLOW_GONE_INTENTS), or a 410 to the circuit probe,
#       disable the target and open its circuit, for every relay, until an
#       admin enables it again.
#   429 + Retry-After: 3 pauses the whole target for 3 s (not only the intent
#       that got it): nothing else is sent to it meanwhile; then it drains.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start gone --dedupe
receiver_start probe --dedupe --mode-status 500
receiver_start busy --dedupe --mode-status 429 --mode-retry-after 3
target_add gone "http://127.0.0.1:$RECV_PORT_gone/act"
target_add probe "http://127.0.0.1:$RECV_PORT_probe/act" circuit_failure_threshold=3
target_add busy "http://127.0.0.1:$RECV_PORT_busy/act" max_in_flight=5
relay_start one --admin-listen "127.0.0.1:0"
admin_port=$(relay_admin_port one)
metric() { curl -s "http://127.0.0.1:$admin_port/metrics" | sed -n "s/^$1 \([0-9.e+]*\)$/\1/p"; }
ok "relay up" test -n "$admin_port"

GONE_TEXT='HTTP 410 Gone: the target refused this intent as gone (it did not act); a 410 is not retried'
FAULT_410='{"_fault": "status_410", "_fault_times": 1000}'
enabled() { sql "SELECT enabled FROM outbox.targets WHERE name = 'gone'"; }
circuit() { sql "SELECT circuit FROM outbox.target_health WHERE target = '$1'"; }

# ---------------------------------------------------------------- one intent's 410
enqueue_many gone "one410:" 1 "$FAULT_410"
ok "one intent's 410 fails that intent" wait_for 10 \
    "SELECT state FROM outbox.intents WHERE key = 'one410:1'" failed
is "$(sql "SELECT last_error FROM outbox.intents WHERE key = 'one410:1'")" "$GONE_TEXT" \
    "its error names the 410 and says it is not retried"
is "$(sql "SELECT string_agg(class || ' ' || http_status, ',') FROM outbox.attempts a
           JOIN outbox.intents i ON i.id = a.intent_id WHERE i.key = 'one410:1'")" "permanent_failure 410" \
    "one attempt, recorded as permanent_failure with its status"
is "$(enabled)" t "the target is still enabled"
is "$(circuit gone)" closed "its circuit is still closed"
enqueue_many gone "after:" 20
ok "the next 20 intents are delivered" wait_for 15 \
    "SELECT count(*) FROM outbox.intents WHERE key LIKE 'after:%' AND state = 'succeeded'" 20
is "$(receiver_stat gone status_410)" 1 "the 410 was not retried (one 410 answered in all)"

# ---------------------------------------------------------------- 410s between other answers
# Three rounds of 4 intents answered 410 (one fewer than it takes), each round
# followed by one delivered intent: 12 410s, never 5 in a row.
for round in 1 2 3; do
    enqueue_many gone "mixed$round:" 4 "$FAULT_410"
    wait_for 10 "SELECT count(*) FROM outbox.intents WHERE key LIKE 'mixed$round:%' AND state = 'failed'" 4 ||
        echo "# round $round: the 410s did not all fail"
    enqueue_many gone "ok$round:" 1
    wait_for 10 "SELECT state FROM outbox.intents WHERE key = 'ok$round:1'" succeeded ||
        echo "# round $round: the 200 was not delivered"
done
is "$(sql "SELECT count(*) FROM outbox.intents WHERE key LIKE 'mixed%' AND state = 'failed'")" 12 \
    "12 intents answered 410 between 200s: each failed"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE key LIKE 'ok_:1' AND state = 'succeeded'")" 3 \
    "the 200s between them delivered"
is "$(enabled)" t "410s interleaved with 200s never disable the target"
is "$(circuit gone)" closed "nor open its circuit"
is "$(metric 'outbox_target_circuit_open{target="gone"}')" 0 "metric outbox_target_circuit_open{target=\"gone\"} 0"

# ---------------------------------------------------------------- 5 different intents in a row
enqueue_many gone "run:" 5 "$FAULT_410"
ok "5 different intents in a row answered 410: the target is disabled" wait_for 10 "SELECT enabled FROM outbox.targets WHERE name = 'gone'" f
is "$(circuit gone)" open "its circuit is open"
is "$(sql "SELECT circuit_reason FROM outbox.target_health WHERE target = 'gone'")" \
    "HTTP 410 Gone to 5 different intents in a row, no other answer between them: the endpoint is gone" \
    "with the reason"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE key LIKE 'run:%' AND state = 'failed' AND last_error = '$GONE_TEXT'")" 5 \
    "the 5 intents failed, each with the 410's error"
ok "metric outbox_target_circuit_open{target=\"gone\"} 1" wait_cmd 5 \
    test "$(metric 'outbox_target_circuit_open{target="gone"}')" = 1
err=$(sql "SELECT outbox.enqueue('refused:1', 'gone', '{}')" 2>&1)
ok "enqueue refuses new intents for the disabled target" grep -q "target 'gone' is disabled" <<<"$err"
is "$(receiver_stat gone status_410)" 18 "18 410s answered in all, each once"

sql "UPDATE outbox.targets SET enabled = true WHERE name = 'gone'" >/dev/null
is "$(circuit gone)" closed "an admin enables it: the circuit closes"
enqueue_many gone "back:" 20
ok "its next intents are delivered (the relay reloads targets every 10 s)" wait_for 30 \
    "SELECT count(*) FROM outbox.intents WHERE key LIKE 'back:%' AND state = 'succeeded'" 20
is "$(receiver_stat gone keys)" 43 "43 keys acted on (20 + 3 + 20), one effect each"
is "$(receiver_stat gone keys_with_duplicate_effects)" 0 "no duplicate effects"

# ---------------------------------------------------------------- 410 to the circuit probe
# Three 500s open the circuit of target probe; the endpoint then answers
# 410 to everything: the probe's 410 is evidence about the endpoint.
enqueue_many probe "probe:" 3
ok "three 500s open the circuit" wait_for 10 "SELECT circuit FROM outbox.target_health WHERE target = 'probe'" open
curl -s -X POST -d '{"status": 410}' "http://127.0.0.1:$RECV_PORT_probe/_mode" >/dev/null
ok "the probe's 410 disables the target" wait_for 20 "SELECT enabled FROM outbox.targets WHERE name = 'probe'" f
is "$(sql "SELECT circuit_reason FROM outbox.target_health WHERE target = 'probe'")" \
    "HTTP 410 Gone to the circuit probe: the endpoint is gone" "with the reason"
sleep 2
is "$(sql "SELECT count(*) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
           WHERE i.target = 'probe' AND a.http_status = 410")" 1 "one 410 (the probe's), then nothing more (2 s later)"
is "$(sql "SELECT state FROM outbox.intents i WHERE target = 'probe'
            AND EXISTS (SELECT 1 FROM outbox.attempts a WHERE a.intent_id = i.id AND a.http_status = 410)")" unknown \
    "the probe's intent, ambiguous after its 500, is unknown, never failed"

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
is "$(sql "SELECT count(*) FROM outbox.intents WHERE target = 'busy' AND state IN ('failed', 'unknown')")" 0 "none failed, none unknown"

kill -TERM "$RELAY_PID_one"; relay_wait one 30
is "$?" 0 "relay exits 0"
ok "no sanitizer report" relay_logs_clean
itest_done
