#!/usr/bin/env bash
# Trace context through the outbox (migrations/0016_trace_context.sql, relay/deliver.c):
#   - an intent enqueued with p_traceparent reaches the receiver with a
#     traceparent header: the caller's trace id and flags, a parent id of
#     the relay's own, a new one for each attempt (a 500, then a success);
#   - SET LOCAL outbox.traceparent does the same for a caller that cannot
#     pass the argument;
#   - the relay logs the trace id with the key; outbox-relay status shows it;
#   - an intent without one is sent without the header.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start r
target_add api "http://127.0.0.1:$RECV_PORT_r/act" backoff_base_ms=1500 backoff_cap_ms=1500
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
ok "the first attempt of tr:retried arrives (it gets 500)" wait_for 10 \
    "SELECT attempts FROM outbox.intents WHERE key = 'tr:retried' AND state = 'pending'" 1
first=$(header_of 'tr:retried')
ok "tr:retried succeeds on its second attempt" wait_for 15 \
    "SELECT state || ' ' || attempts FROM outbox.intents WHERE key = 'tr:retried'" "succeeded 2"
second=$(header_of 'tr:retried')
echo "# attempt 1: $first"
echo "# attempt 2: $second"
ok "attempt 1 carries the caller's trace id and flags" \
    bash -c "[[ '$first' =~ ^00-$TRACE-[0-9a-f]{16}-01\$ ]]"
ok "attempt 2 carries them too" bash -c "[[ '$second' =~ ^00-$TRACE-[0-9a-f]{16}-01\$ ]]"
p1=$(cut -d- -f3 <<<"$first")
p2=$(cut -d- -f3 <<<"$second")
ok "a parent id per attempt ($p1, $p2)" test -n "$p1" -a "$p1" != "$p2"
ok "neither is the caller's own parent id" test "$p1" != "$CALLER_PARENT" -a "$p2" != "$CALLER_PARENT"
ok "SET LOCAL outbox.traceparent reaches the receiver" wait_cmd 10 \
    bash -c "[[ \"\$(curl -s http://127.0.0.1:$RECV_PORT_r/_requests/tr:orm)\" == *'00-11111111111111111111111111111111-'*'-00'* ]]"
ok "tr:none is delivered" wait_for 10 "SELECT state FROM outbox.intents WHERE key = 'tr:none'" succeeded
is "$(header_of 'tr:none')" "" "an intent without trace context is sent without the header"
ok "the relay logs the trace id with the key, for each attempt" \
    test "$(grep '"key":"tr:retried"' "$T/relay-one.log" | grep -c "\"trace_id\":\"$TRACE\"")" -ge 2
ok "the logged span id is the parent id the receiver saw" \
    grep -q "\"key\":\"tr:retried\".*\"span_id\":\"$p2\"" "$T/relay-one.log"
status=$("$RELAY_BIN" status 'tr:retried' 2>&1)
ok "outbox-relay status shows the trace context" grep -q "traceparent.*00-$TRACE-$CALLER_PARENT-01" <<<"$status"

kill -TERM "$RELAY_PID_one"; relay_wait one 30
is "$?" 0 "relay exits 0"
ok "no sanitizer report" relay_logs_clean
itest_done
