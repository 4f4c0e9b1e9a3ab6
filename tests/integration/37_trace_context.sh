#!/usr/bin/env bash
# Trace context through the outbox (migrations/0016_trace_context.sql, relay/deliver.c):
#   - an intent enqueued with p_traceparent reaches the receiver with a
#     traceparent header: the caller's trace id and flags, a parent id of
#     the relay's own, a new one for each attempt (a 500, then a success; the
#     relay's log gives each attempt's parent id, the receiver the last one);
#   - SET LOCAL outbox.traceparent does the same for a caller that cannot
#     pass the argument;
#   - the relay logs the trace id with the key; outbox-relay status shows it;
#   - an intent without one is sent without the header.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start r
target_add api "http://127.0.0.1:$RECV_PORT_r/act" backoff_base_ms=200 backoff_cap_ms=200
TRACE=4bf92f3577b34da6a3ce929d0e0e4736
CALLER_PARENT=00f067aa0ba902b7

sql "SELECT outbox.enqueue('tr:retried', 'api', '{\"_fault\": \"status_500\"}',
                           p_traceparent => '00-$TRACE-$CALLER_PARENT-01')" >/dev/null
sql "BEGIN; SET LOCAL outbox.traceparent = '00-11111111111111111111111111111111-2222222222222222-00';
     SELECT outbox.enqueue('tr:orm', 'api', '{}'); COMMIT;" >/dev/null
sql "SELECT outbox.enqueue('tr:none', 'api', '{}')" >/dev/null
relay_start one --poll-interval-ms 100 --log-level debug

header_of() { # header_of KEY → the traceparent of the key's last request
    curl -s "http://127.0.0.1:$RECV_PORT_r/_requests/$1" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["last_headers"].get("traceparent", ""))'
}
ok "tr:retried succeeds on its second attempt (the first got 500)" wait_for 30 \
    "SELECT state || ' ' || attempts FROM outbox.intents WHERE key = 'tr:retried'" "succeeded 2"
last=$(header_of 'tr:retried')
echo "# the receiver's last traceparent for tr:retried: $last"
ok "the request carries the caller's trace id and flags" \
    bash -c "[[ '$last' =~ ^00-$TRACE-[0-9a-f]{16}-01\$ ]]"
# The parent id of each attempt, as the relay logged it (the receiver keeps the last request's).
spans=$(grep '"key":"tr:retried"' "$T/relay-one.log" | grep '"event":"attempt"' |
        sed -n "s/.*\"trace_id\":\"$TRACE\",\"span_id\":\"\([0-9a-f]*\)\".*/\1/p")
echo "# logged parent ids: $(echo $spans)"
is "$(wc -l <<<"$spans" | tr -d ' ')" 2 "both attempts logged with the caller's trace id"
is "$(sort -u <<<"$spans" | wc -l | tr -d ' ')" 2 "a new parent id per attempt"
is "$(tail -1 <<<"$spans")" "$(cut -d- -f3 <<<"$last")" "the last one is the parent id the receiver saw"
ok "neither is the caller's own parent id" bash -c "! grep -q '$CALLER_PARENT' <<<'$spans'"
ok "SET LOCAL outbox.traceparent reaches the receiver" wait_cmd 10 \
    bash -c "[[ \"\$(curl -s http://127.0.0.1:$RECV_PORT_r/_requests/tr:orm)\" == *'00-11111111111111111111111111111111-'*'-00'* ]]"
ok "tr:none is delivered" wait_for 10 "SELECT state FROM outbox.intents WHERE key = 'tr:none'" succeeded
is "$(header_of 'tr:none')" "" "an intent without trace context is sent without the header"
status=$("$RELAY_BIN" status 'tr:retried' 2>&1)
ok "outbox-relay status shows the trace context" grep -q "traceparent.*00-$TRACE-$CALLER_PARENT-01" <<<"$status"

kill -TERM "$RELAY_PID_one"; relay_wait one 30
is "$?" 0 "relay exits 0"
ok "no sanitizer report" relay_logs_clean
itest_done
