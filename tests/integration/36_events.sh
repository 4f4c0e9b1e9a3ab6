#!/usr/bin/env bash
# Events for operators on the channel outbox_events (migrations/0015_events.sql),
# received by a real LISTEN session (psql, as docs/operations.md shows it):
#   - a 400 makes intent_failed (with http_status 400);
#   - a dropped answer on a keyless target makes intent_unknown;
#   - the head of an ordering group that fails makes group_blocked (blocks 2);
#   - a target that is down opens its circuit (circuit_opened), and closes it
#     when it recovers (circuit_closed);
#   - a delivery that succeeds sends nothing; every payload is JSON.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start ok
receiver_start down --mode-status 503
# A POST to /_mode with a body that is no mode answers 400 (as 31_ordering uses it).
target_add bad "http://127.0.0.1:$RECV_PORT_ok/_mode" timeout_ms=1000
target_add keyless "http://127.0.0.1:$RECV_PORT_ok/act" key_header=NULL
target_add good "http://127.0.0.1:$RECV_PORT_ok/act"
target_add flaky "http://127.0.0.1:$RECV_PORT_down/act" circuit_failure_threshold=3 backoff_base_ms=50 \
    backoff_cap_ms=100

# psql prints the notifications it received after each command it runs.
{ echo 'LISTEN outbox_events;'; yes 'SELECT pg_sleep(0.2);'; } |
    psql -X -qAt >"$T/listener.out" 2>"$T/listener.err" &
listener=$!
ITEST_PIDS+=("$listener")
sleep 0.5

relay_start one --poll-interval-ms 200
sql "SELECT outbox.enqueue('ev:good', 'good', '{\"n\": 1}')" >/dev/null
sql "SELECT outbox.enqueue('ev:bad', 'bad', '{\"n\": 2}')" >/dev/null
sql "SELECT outbox.enqueue('ev:drop', 'keyless', '{\"_fault\": \"drop_after\"}')" >/dev/null
sql "SELECT outbox.enqueue('g:' || s, 'bad', jsonb_build_object('step', s), p_ordering_key => 'grp-7')
       FROM generate_series(1, 3) s" >/dev/null
sql "SELECT outbox.enqueue('fl:' || g, 'flaky', '{}') FROM generate_series(1, 5) g" >/dev/null

events() { grep -o 'payload "{.*}" received' "$T/listener.out" | sed 's/^payload "//; s/" received$//'; }
has() { events | grep -q "$1"; }
ok "intent_failed for the 400" wait_cmd 20 has '"key": "ev:bad".*"event": "intent_failed"'
ok "it carries the HTTP status" bash -c "grep -o 'payload \"{.*\"key\": \"ev:bad\".*}\"' '$T/listener.out' | grep -q '\"http_status\": 400'"
ok "intent_unknown for the dropped answer on the keyless target" \
    wait_cmd 20 has '"key": "ev:drop".*"event": "intent_unknown"'
ok "group_blocked for the failed head of grp-7, with the two steps behind it" \
    wait_cmd 20 has '"head": "g:1", "event": "group_blocked", "group": "grp-7", "blocks": 2'
ok "circuit_opened for the target that is down" wait_cmd 20 has '"event": "circuit_opened".*"target": "flaky"'
curl -s -X POST -d '{"status": 0}' "http://127.0.0.1:$RECV_PORT_down/_mode" >/dev/null
ok "circuit_closed once it recovers" wait_cmd 30 has '"event": "circuit_closed", "target": "flaky"'
ok "the flaky target's intents are delivered" wait_for 30 \
    "SELECT count(*) FROM outbox.intents WHERE key LIKE 'fl:%' AND state = 'succeeded'" 5
sleep 0.5
ok "nothing for the intent that succeeded" bash -c "! grep -q 'ev:good' '$T/listener.out'"
ok "every payload is a JSON object with an event" \
    bash -c "grep -o 'payload \"{.*}\" received' '$T/listener.out' | sed 's/^payload \"//; s/\" received\$//' |
             python3 -c 'import json,sys; [json.loads(l)[\"event\"] for l in sys.stdin]'"
echo "# events received: $(events | wc -l)"
events | sed 's/^/#   /' | head -20

kill -TERM "$RELAY_PID_one"; relay_wait one 30
is "$?" 0 "relay exits 0"
ok "no sanitizer report" relay_logs_clean
itest_done
