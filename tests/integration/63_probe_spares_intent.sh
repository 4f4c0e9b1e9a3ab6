#!/usr/bin/env bash
# A failed circuit probe is evidence about the target, not about the intent
# it carried (issue 24, item 10). With max_attempts 1: a probe that could not
# reach the target (connection refused) goes back unsent with its attempt
# not counted; a probe answered "try later" (429) counts but never fails the
# intent. Once
# the target is back, each probe intent is delivered once. Before: the first
# refused probe failed its intent for good.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

refusing_port DOWN_PORT
receiver_start up --dedupe
receiver_start sick --dedupe --mode-status 503
target_add down "http://127.0.0.1:$DOWN_PORT/act" max_attempts=1 circuit_failure_threshold=3 circuit_probe_max_ms=300
target_add sick "http://127.0.0.1:$RECV_PORT_sick/act" max_attempts=1 circuit_failure_threshold=3 circuit_probe_max_ms=300
circuit() { sql "SELECT circuit FROM outbox.target_health WHERE target = '$1'"; }

# Three intents each: max_attempts 1, so each ends at once (down: failed, not
# sent; sick: unknown, a 503 may have executed); the third opens the circuit.
enqueue_many down "first:" 3
enqueue_many sick "first:s" 3
relay_start one --poll-interval-ms 100 --targets-refresh-ms 200
ok "down: three intents failed, the circuit is open" wait_for 10 \
    "SELECT count(*) FROM outbox.intents WHERE target = 'down' AND state = 'failed'" 3
ok "sick: three intents ended unknown" wait_for 10 \
    "SELECT count(*) FROM outbox.intents WHERE target = 'sick' AND state = 'unknown'" 3
ok "both circuits open" wait_cmd 5 test "$(circuit down)$(circuit sick)" != closedclosed

# sick now answers 429 with Retry-After 8: "busy, try later" (the target pauses 8 s,
# time enough to look before it is asked again).
curl -s -X POST -d '{"status": 429, "retry_after": "8"}' "http://127.0.0.1:$RECV_PORT_sick/_mode" >/dev/null
# One more intent each: it becomes the probe, again and again while the target is down.
sql "SELECT outbox.enqueue('probe:down', 'down', '{}'), outbox.enqueue('probe:sick', 'sick', '{}')" >/dev/null
given_back() { [ "$(grep -c '"event":"probe_given_back".*"key":"probe:down"' "$T/relay-one.log")" -ge 3 ]; }
ok "down: the probe intent went out as a probe at least 3 times, each given back" wait_cmd 15 given_back
is "$(sql "SELECT state || ' ' || attempts FROM outbox.intents WHERE key = 'probe:down'")" "pending 0" \
    "down: the probe intent is pending with no attempt counted, not failed"
is "$(sql "SELECT count(*) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id WHERE i.key = 'probe:down'")" 0 \
    "down: no attempt in its history (nothing left this host)"
is "$(circuit down)" open "down: the circuit heard the refusals and stays open"
ok "sick: the probe intent was answered 429 as a probe" wait_for 10 \
    "SELECT count(*) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
      WHERE i.key = 'probe:sick' AND a.class = 'retry_later' AND a.http_status = 429" 1
is "$(sql "SELECT state || ' ' || attempts FROM outbox.intents WHERE key = 'probe:sick'")" "pending 1" \
    "sick: the 429 to the probe counts, but the intent is not failed (max_attempts 1)"

# The targets come back: down is repointed at a listening receiver, sick leaves its outage.
sql "UPDATE outbox.targets SET url = 'http://127.0.0.1:$RECV_PORT_up/act' WHERE name = 'down'"
curl -s -X POST -d '{}' "http://127.0.0.1:$RECV_PORT_sick/_mode" >/dev/null
ok "down: the probe intent is delivered" wait_for 15 \
    "SELECT state || ' ' || attempts FROM outbox.intents WHERE key = 'probe:down'" "succeeded 1"
ok "sick: the probe intent is delivered" wait_for 15 \
    "SELECT state FROM outbox.intents WHERE key = 'probe:sick'" succeeded
is "$(receiver_stat up effects_total)" 1 "down: one effect at the target"
is "$(receiver_stat sick effects_total)" 1 "sick: one effect at the target"
is "$(circuit down)$(circuit sick)" closedclosed "both circuits closed by a successful probe"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE key LIKE 'first:%' AND state IN ('failed', 'unknown')")" 6 \
    "the intents that ended before the circuit opened stay so (their own attempts)"
kill -TERM "$RELAY_PID_one"; relay_wait one 20
is "$?" 0 "relay exits 0"
ok "no sanitizer report" relay_logs_clean
itest_done
