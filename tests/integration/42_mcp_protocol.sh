#!/usr/bin/env bash
# The MCP front door (`outbox-relay mcp`) over real HTTP with no SDK: both
# protocol eras, tools and their schemas, keys and their namespaces, tokens,
# tasks and every refusal (tests/mcp/protocol_checks.py has the checks). The
# front door logs in as a member of outbox_mcp only; a relay delivers to a
# real receiver. Then: its metrics against the calls made, and its log has
# the keys but never the arguments or a token.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start r --dedupe
target_add refund "http://127.0.0.1:$RECV_PORT_r/refunds" timeout_ms=2000
target_add note "http://127.0.0.1:$RECV_PORT_r/notes" "volatile_paths=ARRAY['{sent_at}']"
sql "INSERT INTO outbox.mcp_tools (tool, target, description, input_schema) VALUES
       ('refund', 'refund', 'Refund an amount to an account, once per key.',
        '{\"type\": \"object\", \"properties\": {\"account\": {\"type\": \"integer\"},
          \"amount_cents\": {\"type\": \"integer\", \"minimum\": 1}}, \"required\": [\"account\", \"amount_cents\"],
          \"additionalProperties\": false}'),
       ('note', 'note', 'Write a note.', '{\"type\": \"object\", \"properties\": {\"text\": {\"type\": \"string\", \"maxLength\": 200}}}')" >/dev/null
sql "INSERT INTO outbox.mcp_tools (tool, target, description, server_keys) VALUES
       ('ping_note', 'note', 'A tool whose host cannot set _meta: the front door mints keys.', true)" >/dev/null
TOKEN_A=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
TOKEN_B=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
TOKEN_C=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
sql "SELECT outbox.mcp_client('agent-a', '$TOKEN_A'), outbox.mcp_client('agent-b', '$TOKEN_B'),
            outbox.mcp_client('agent-c', '$TOKEN_C', ARRAY['note'])" >/dev/null
is "$(sql "SELECT count(*) FROM outbox.mcp_clients WHERE token_hash = sha256(convert_to('$TOKEN_A', 'UTF8'))
            AND position(convert_to('$TOKEN_A', 'UTF8') IN token_hash) = 0")" 1 \
    "only a hash of a client's token is stored"
sql "CREATE ROLE front_door LOGIN; GRANT outbox_mcp TO front_door" >/dev/null
ok "outbox_mcp cannot read intents directly" \
    bash -c "! psql -X -q -U front_door -c 'SELECT 1 FROM outbox.intents LIMIT 1' 2>/dev/null"

relay_start a --poll-interval-ms 200
mcp_start --mcp-wait-ms 10000
ok "the front door is ready (port $MCP_PORT)" test -n "$MCP_PORT"

MCP_PORT=$MCP_PORT RECV_PORT=$RECV_PORT_r TOKEN_A=$TOKEN_A TOKEN_B=$TOKEN_B TOKEN_C=$TOKEN_C \
    timeout 300 python3 "$ITEST_ROOT/tests/mcp/protocol_checks.py" >"$T/checks.out" 2>"$T/checks.err"
rc=$?
while IFS=$'\t' read -r status desc detail; do
    TAP_COUNT=$((TAP_COUNT + 1))
    if [ "$status" = ok ]; then
        echo "ok $TAP_COUNT - $desc"
    else
        echo "not ok $TAP_COUNT - $desc"
        [ -n "$detail" ] && echo "#   $detail"
        TAP_FAILED=$((TAP_FAILED + 1))
    fi
done <"$T/checks.out"
is "$rc" 0 "the checks ran to the end"
[ "$rc" = 0 ] || sed 's/^/# /' "$T/checks.err"

metrics=$(curl -s "http://127.0.0.1:$MCP_PORT/metrics")
calls_logged=$(grep -c '"event":"mcp_call".*"tool":"refund".*"status":"succeeded"' "$T/mcp.log")
is "$(awk '$1 == "outbox_mcp_calls_total{tool=\"refund\",status=\"succeeded\"}" { print $2 }' <<<"$metrics")" \
    "$calls_logged" "outbox_mcp_calls_total{refund,succeeded} = the succeeded calls logged ($calls_logged)"
# Refusals are logged at most once a second per reason; the ones not
# logged are counted by mcp_refusals_suppressed lines (written once the
# second is over).
auth_logged() {
    awk '/"event":"mcp_refused","reason":"auth"/ { n++ }
         /"event":"mcp_refusals_suppressed","reason":"auth"/ { match($0, /"count":[0-9]+/); n += substr($0, RSTART + 8, RLENGTH - 8) }
         END { print n + 0 }' "$T/mcp.log"
}
auth_metric() {
    curl -s "http://127.0.0.1:$MCP_PORT/metrics" | awk '$1 == "outbox_mcp_refusals_total{reason=\"auth\"}" { print $2 }'
}
for i in $(seq 1 30); do [ "$(auth_metric)" = "$(auth_logged)" ] && break; sleep 0.1; done
is "$(auth_metric)" "$(auth_logged)" \
    "outbox_mcp_refusals_total{auth} = the authentication refusals logged (lines and suppressed counts)"
ok "the log has the keys of the calls" grep -q '"key":"run-1:step-1"' "$T/mcp.log"
ok "and never a token" bash -c "! grep -q -e '$TOKEN_A' -e '$TOKEN_B' -e '$TOKEN_C' '$T/mcp.log'"
ok "nor the arguments" bash -c "! grep -q -e 'amount_cents' '$T/mcp.log'"

kill -TERM "$MCP_PID"
for i in $(seq 1 100); do kill -0 "$MCP_PID" 2>/dev/null || break; sleep 0.1; done
wait "$MCP_PID"
is "$?" 0 "the front door stops on SIGTERM with exit 0 (sanitizers clean)"
itest_done
