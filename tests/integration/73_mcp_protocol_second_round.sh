#!/usr/bin/env bash
# The MCP front door, second round (issue 35, items 8, 9, 12), over raw HTTP
# (tests/mcp/protocol_second_round.py has the checks):
#   8. tasks/result (2025-11-25) blocks until the task is terminal, past
#      --mcp-wait-ms, the connection kept alive (SSE comments, or blank lines
#      before JSON); a client that goes away is let go, and SIGTERM answers
#      an error that says to ask again; a new front door then gives the
#      results: nothing lost, one effect each;
#   9. an Idempotency-Key header that is not UTF-8: -32602, saying so;
#  12. errors whose id cannot be read carry "id": null; two Host,
#      Authorization or Idempotency-Key headers: 400.
# Then the official TypeScript SDK 1.32 reads a streamed tasks/result
# (tests/mcp/sdk/task_result_client.mjs; Node from tests/lib/install-node.sh,
# as 43 does: no network, this scenario fails).
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start r --dedupe
receiver_start slow --dedupe --delay-ms 3000
receiver_start stuck --dedupe --delay-ms 12000
target_add refund "http://127.0.0.1:$RECV_PORT_r/refunds" timeout_ms=2000
target_add slow "http://127.0.0.1:$RECV_PORT_slow/refunds" timeout_ms=10000
target_add stuck "http://127.0.0.1:$RECV_PORT_stuck/refunds" timeout_ms=30000
schema='{"type": "object", "properties": {"n": {"type": "integer"}}}'
sql "INSERT INTO outbox.mcp_tools (tool, target, description, input_schema) VALUES
       ('refund', 'refund', 'Refund at once.', '$schema'),
       ('slow_refund', 'slow', 'Refund, answered after 3 s.', '$schema'),
       ('stuck_refund', 'stuck', 'Refund, answered after 12 s.', '$schema')" >/dev/null
TOKEN_A=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
sql "SELECT outbox.mcp_client('agent-a', '$TOKEN_A')" >/dev/null

relay_start a --poll-interval-ms 200
mcp_start --mcp-wait-ms 1000
ok "the front door is ready (port $MCP_PORT, --mcp-wait-ms 1000)" test -n "$MCP_PORT"

# checks PHASE: the Python checks as TAP
checks() {
    local rc status desc detail
    PHASE=$1 MCP_PORT=$MCP_PORT MCP_PID=$MCP_PID TOKEN_A=$TOKEN_A TASKS_FILE=$T/tasks.json \
        RECV_PORT_slow=$RECV_PORT_slow RECV_PORT_stuck=$RECV_PORT_stuck \
        timeout 180 python3 "$ITEST_ROOT/tests/mcp/protocol_second_round.py" >"$T/checks-$1.out" 2>"$T/checks-$1.err"
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
    done <"$T/checks-$1.out"
    is "$rc" 0 "the checks of phase $1 ran to the end"
    [ "$rc" = 0 ] || sed 's/^/# /' "$T/checks-$1.err"
}

checks 1
# The last check sent SIGTERM while a tasks/result blocked (if the checks
# stopped before it, it is sent here).
for i in $(seq 1 100); do kill -0 "$MCP_PID" 2>/dev/null || break; sleep 0.1; done
kill -TERM "$MCP_PID" 2>/dev/null && sleep 1
wait "$MCP_PID"
is "$?" 0 "the front door stopped on SIGTERM with exit 0 (sanitizers clean)"
ok "it logged the blocked tasks/result as answered at the stop" \
    grep -q '"event":"mcp_call".*"status":"shutting_down"' "$T/mcp.log"

mv "$T/mcp.log" "$T/mcp-first.log" # mcp_start reads the port from mcp.log
mcp_start --mcp-wait-ms 1000
checks 2

# ---- the official SDK reads the streamed tasks/result --------------------------------------
itest_node_sdk
(cd "$T/sdk" && MCP_URL=http://127.0.0.1:$MCP_PORT/mcp MCP_TOKEN=$TOKEN_A TOOL=slow_refund KEY=r8:sdk \
    timeout -k 5 120 "$NODE_BIN" task_result_client.mjs) >"$T/sdk.out" 2>"$T/sdk.err"
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
done <"$T/sdk.out"
is "$rc" 0 "the SDK client ran to the end"
[ "$rc" = 0 ] || sed 's/^/# /' "$T/sdk.err" | tail -n 20
itest_done
