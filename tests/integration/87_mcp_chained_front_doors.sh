#!/usr/bin/env bash
# Issue 36, item 6: our own front door as the upstream of another front
# door's relay, one effect per key end to end:
#
#   agent → front door A ──(tool 'chain', an 'mcp' target)──▶ relay
#         → cut_proxy.py (loses the first answer of each key)
#         → front door B (tool 'refund'/'refund_slow', webhooks) → relay → receiver
#
#   - a lost answer between the relay and front door B: the relay sends the
#     call again with the same key (the target has a key header), B answers
#     its saved outcome, one effect at the receiver; the agent's replay of its
#     key gets the same answer and no new effect;
#   - a slow webhook behind B (B's --mcp-wait-ms ends first): B answers
#     "delivering", which is not the tool's outcome. B says so in the result's
#     _meta["outbox-relay/final"] (false); the relay takes it as ambiguous and
#     asks again with the same key until B's outcome is final: the agent is
#     told "succeeded" only once the webhook acted (before the fix, the first
#     answer "delivering" was saved as succeeded).
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start fast --dedupe
receiver_start slow --dedupe --delay-ms 3000
target_add refund "http://127.0.0.1:$RECV_PORT_fast/refunds" timeout_ms=10000
target_add refund_slow "http://127.0.0.1:$RECV_PORT_slow/refunds" timeout_ms=10000

AGENT_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
RELAY_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
sql "SELECT outbox.mcp_client('agent', '$AGENT_TOKEN'), outbox.mcp_client('relay-b', '$RELAY_TOKEN')" >/dev/null

# Front door B: a short wait, so that its answer for the slow webhook is not final.
mcp_start --mcp-wait-ms 300
B_PORT=$MCP_PORT B_PID=$MCP_PID
mv "$T/mcp.log" "$T/mcp-b.log" # B keeps writing there; mcp_start reads A's port from a new mcp.log
python3 "$ITEST_ROOT/tests/mcp/cut_proxy.py" "$B_PORT" 200 >"$T/proxy.log" 2>"$T/proxy.err" &
ITEST_PIDS+=("$!")
PROXY_PORT=""
for i in $(seq 1 100); do
    PROXY_PORT=$(sed -n 's/^listening 127.0.0.1://p' "$T/proxy.log")
    [ -n "$PROXY_PORT" ] && break
    sleep 0.05
done
[ -n "$PROXY_PORT" ] || bail "the cutting proxy did not start"
# Front door A: the agent waits for the end.
mcp_start --mcp-wait-ms 30000
A_PORT=$MCP_PORT A_PID=$MCP_PID

target_add fd-b "http://127.0.0.1:$PROXY_PORT/mcp" "protocol='mcp'" "key_header='Idempotency-Key'" \
    "auth_secret='OUTBOX_SECRET_FD_B'" timeout_ms=10000 backoff_base_ms=100 backoff_cap_ms=300 max_attempts=100
sql "INSERT INTO outbox.mcp_tools (tool, target, description, upstream_tool) VALUES
       ('refund', 'refund', 'Refund (a webhook, behind front door B).', NULL),
       ('refund_slow', 'refund_slow', 'Refund, slowly (a webhook, behind front door B).', NULL),
       ('chain', 'fd-b', 'Refund through front door B.', 'refund'),
       ('chain_slow', 'fd-b', 'Refund slowly through front door B.', 'refund_slow')" >/dev/null
export OUTBOX_SECRET_FD_B="$RELAY_TOKEN"
relay_start a --poll-interval-ms 200
unset OUTBOX_SECRET_FD_B

call_a() { python3 "$ITEST_ROOT/tests/mcp/mcp_call.py" "$A_PORT" "$AGENT_TOKEN" call "$1" "$2" "$3" >"$T/$2.json"; }
field() { python3 -c "import json,sys; r=json.load(open('$T/$1.json'))['result']; print($2)"; }
history() {
    sql "SELECT string_agg(class::text, ',' ORDER BY a.attempt) FROM outbox.attempts a
           JOIN outbox.intents i ON i.id = a.intent_id WHERE i.key = '$1'"
}

# ---- a lost answer in the middle ------------------------------------------------------------------
call_a chain c-1 '{"amount": 5}'
sed 's/^/# agent: /' "$T/c-1.json"
is "$(field c-1 "r['structuredContent']['status']")" succeeded "the agent's call through two front doors succeeded"
is "$(field c-1 "r['structuredContent']['response']['status']")" succeeded \
    "its response is front door B's final answer (succeeded)"
is "$(grep -c '^cut tools/call mcp:agent:c-1 200 ' "$T/proxy.log")" 1 \
    "the first answer of front door B to the relay was lost (read whole, then the connection reset)"
is "$(sql "SELECT state || ' ' || attempts FROM outbox.intents WHERE key = 'mcp:agent:c-1'")" "succeeded 2" \
    "front door A's intent: sent again with the same key after the lost answer"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE key LIKE 'mcp:relay-b:%c-1'")" 1 \
    "one intent behind front door B for the key (the relay's key, namespaced)"
call_a chain c-1 '{"amount": 5}'
is "$(field c-1 "r['structuredContent']['status']")" succeeded "the agent's replay of c-1: the saved outcome"
effects_table fast
is "$(sql "SELECT string_agg(key || '=' || n, ' ') FROM effects")" "mcp:relay-b:mcp:agent:c-1=1" \
    "one effect at the webhook, under the chained key"

# ---- front door B's wait ends first: its answer is not the tool's outcome -------------------------
call_a chain_slow c-2 '{"amount": 6}'
sed 's/^/# agent: /' "$T/c-2.json"
is "$(field c-2 "r['structuredContent']['status']")" succeeded "the slow call through two front doors succeeded"
is "$(field c-2 "r['structuredContent']['response']['status']")" succeeded \
    "and the response is front door B's final outcome, not 'delivering'"
is "$(sql "SELECT state FROM outbox.intents WHERE key = 'mcp:relay-b:mcp:agent:c-2'")" succeeded \
    "behind front door B, the webhook's intent succeeded"
ok "front door A's intent went through an answer that was not final (ambiguous), then succeeded" \
    bash -c "[[ '$(history mcp:agent:c-2)' =~ ^ambiguous(,ambiguous)*,succeeded$ ]]"
ok "the relay said why: the upstream gateway's call was not final" \
    grep -q "not final yet" <(sql "SELECT string_agg(coalesce(error, ''), ' ') FROM outbox.attempts a
                                     JOIN outbox.intents i ON i.id = a.intent_id WHERE i.key = 'mcp:agent:c-2'")
sql "DROP TABLE effects" >/dev/null
effects_table slow
is "$(sql "SELECT string_agg(key || '=' || n, ' ') FROM effects")" "mcp:relay-b:mcp:agent:c-2=1" \
    "one effect at the slow webhook"

kill -TERM "$A_PID" "$B_PID"
wait "$A_PID"
is "$?" 0 "front door A stops on SIGTERM with exit 0 (sanitizers clean)"
wait "$B_PID"
is "$?" 0 "front door B stops on SIGTERM with exit 0 (sanitizers clean)"
ok "the relay's log has no sanitizer report" relay_logs_clean
itest_done
