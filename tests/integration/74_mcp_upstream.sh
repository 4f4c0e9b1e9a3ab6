#!/usr/bin/env bash
# The durable MCP gateway (issue 36, items 1, 2, 4): intents for 'mcp' targets
# delivered as the upstream's tools/call, to MCP servers written with the
# official TypeScript SDK's McpServer (tests/mcp/sdk/upstream_server.mjs):
#   - stateless (JSON answers), found by mcp_version 'auto' (server/discover
#     is refused, initialize follows): two tickets, one effect each, the
#     result saved; an isError tool → failed with its text;
#   - stateful (Mcp-Session-Id), mcp_version '2025-11-25', a bearer token from
#     auth_secret: one initialize for several calls; the server forgets its
#     sessions → the next call gets 404, is retried after a new initialize,
#     one effect;
#   - answering as an event stream (a progress notification first);
#   - acting, then dropping the connection before the answer: without a key
#     header → unknown, sent once (a person settles it, or, with
#     targets.status_tool, the upstream's status tool says it executed:
#     succeeded); with the key honoured in _meta → re-sent, the upstream
#     answers its first result, one effect;
#   - our own front door as the upstream (2026-07-28, found by
#     server/discover): the key in _meta is the front door's key, one effect
#     at the webhook behind it;
#   - the agent's path: an agent calls a front-door tool whose target is the
#     stateless server; the answer carries the upstream's content block and
#     its structuredContent as the response.
# Effects are counted at each upstream (one line per effect), states in
# outbox.intents.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

itest_node_sdk

# upstream_start NAME VAR=VALUE...: the SDK server in a mode; sets UP_PORT_<NAME>, UP_PID_<NAME>.
upstream_start() {
    local name=$1 i port=""
    shift
    (cd "$T/sdk" && exec env EFFECTS="$T/effects-$name" "$@" "$NODE_BIN" upstream_server.mjs) \
        >"$T/up-$name.out" 2>"$T/up-$name.err" &
    local pid=$!
    ITEST_PIDS+=("$pid")
    : >"$T/effects-$name"
    for i in $(seq 1 200); do
        port=$(sed -n 's/^listening //p' "$T/up-$name.out" 2>/dev/null)
        [ -n "$port" ] && break
        sleep 0.05
    done
    [ -n "$port" ] || { sed 's/^/# /' "$T/up-$name.err"; bail "upstream $name did not start"; }
    printf -v "UP_PORT_$name" '%s' "$port"
    printf -v "UP_PID_$name" '%s' "$pid"
}
# effects NAME [PATTERN]: lines of the upstream's effect log matching PATTERN
effects() { grep -c "${2:-^effect }" "$T/effects-$1"; }
state_of() { sql "SELECT state || ' ' || attempts FROM outbox.intents WHERE key = '$1'"; }
wait_state() { wait_for 30 "SELECT state FROM outbox.intents WHERE key = '$1'" "$2"; }

UP_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
upstream_start stateless MODE=stateless
upstream_start session MODE=stateful TOKEN="$UP_TOKEN"
upstream_start sse MODE=sse
upstream_start drop MODE=drop
upstream_start dropkeyed MODE=drop DEDUPE=1

common=("protocol='mcp'" timeout_ms=5000 backoff_base_ms=100 backoff_cap_ms=200)
target_add up-stateless "http://127.0.0.1:$UP_PORT_stateless/mcp" key_header=NULL "${common[@]}"
target_add up-session "http://127.0.0.1:$UP_PORT_session/mcp" key_header=NULL \
    "mcp_version='2025-11-25'" "auth_secret='OUTBOX_SECRET_UP'" "${common[@]}"
target_add up-sse "http://127.0.0.1:$UP_PORT_sse/mcp" key_header=NULL "${common[@]}"
target_add up-drop "http://127.0.0.1:$UP_PORT_drop/mcp" key_header=NULL "${common[@]}"
target_add up-dropstatus "http://127.0.0.1:$UP_PORT_drop/mcp" key_header=NULL "status_tool='ticket_status'" \
    reconcile_delay_ms=300 "${common[@]}"
target_add up-dropkeyed "http://127.0.0.1:$UP_PORT_dropkeyed/mcp" "key_header='Idempotency-Key'" "${common[@]}"
export OUTBOX_SECRET_UP="$UP_TOKEN"
relay_start a --poll-interval-ms 200
unset OUTBOX_SECRET_UP

ticket() { sql "SELECT outbox.enqueue('$1', '$2', '{\"tool\": \"create_ticket\", \"arguments\": {\"title\": \"$3\"}}')" >/dev/null; }

# ---- stateless, 'auto' ---------------------------------------------------------------------------
ticket s-1 up-stateless "printer on fire"
ticket s-2 up-stateless "coffee machine"
sql "SELECT outbox.enqueue('s-3', 'up-stateless', '{\"tool\": \"close_account\", \"arguments\": {\"account\": 7}}')" >/dev/null
wait_state s-1 succeeded
wait_state s-2 succeeded
wait_state s-3 failed
is "$(state_of s-1) / $(state_of s-2)" "succeeded 1 / succeeded 1" "stateless: both tickets succeeded at the first attempt"
is "$(effects stateless '^effect create_ticket s-')" 2 "one effect each at the upstream, under its key (the key went in _meta)"
is "$(sql "SELECT response_body::jsonb -> 'structuredContent' ->> 'title' FROM outbox.intents WHERE key = 's-1'")" \
    "printer on fire" "the whole result is saved as the response (its structuredContent)"
is "$(sql "SELECT response_body::jsonb -> 'content' -> 0 ->> 'type' FROM outbox.intents WHERE key = 's-1'")" \
    text "with its content blocks"
is "$(state_of s-3)" "failed 1" "isError: true → failed, not retried"
is "$(sql "SELECT last_error FROM outbox.intents WHERE key = 's-3'")" \
    "the tool said: account 7 is already closed" "with the tool's text as the error"
ok "auto on an SDK 1.32 server: server/discover refused, initialize followed (2025 era)" \
    grep -q '"event":"mcp_session".*"target":"up-stateless".*"era":"2025-11-25"' "$T/relay-a.log"

# ---- stateful, a token, a lost session ---------------------------------------------------------------
ticket m-1 up-session "one"
ticket m-2 up-session "two"
wait_state m-1 succeeded
wait_state m-2 succeeded
is "$(effects session '^effect create_ticket m-')" 2 "session: one effect per call"
is "$(effects session '^session ')" 1 "one initialize for both calls (the session is kept)"
ok "the token is never in the relay's log" bash -c "! grep -q '$UP_TOKEN' '$T/relay-a.log'"
kill -USR1 "$UP_PID_session"
wait_cmd 10 grep -q 'sessions forgotten' "$T/effects-session"
ticket m-3 up-session "three"
wait_state m-3 succeeded
is "$(state_of m-3)" "succeeded 2" "after the server forgot the session: 404, then a new initialize and a second attempt"
is "$(sql "SELECT string_agg(class::text || ':' || coalesce(http_status::text, '-'), ',' ORDER BY attempt)
            FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id WHERE i.key = 'm-3'")" \
    "retry_later:404,succeeded:200" "the 404 was not executed (retry_later), the second attempt succeeded"
is "$(effects session '^effect create_ticket m-3')" 1 "one effect for it"
is "$(effects session '^session ')" 2 "and a second session"

# ---- an event stream ---------------------------------------------------------------------------------
ticket e-1 up-sse "streamed"
wait_state e-1 succeeded
is "$(state_of e-1)" "succeeded 1" "an answer as text/event-stream (a progress notification first) succeeded"
is "$(sql "SELECT response_body::jsonb -> 'structuredContent' ->> 'title' FROM outbox.intents WHERE key = 'e-1'")" \
    streamed "its result read from the stream"
is "$(effects sse)" 1 "one effect"

# ---- the lost answer ---------------------------------------------------------------------------------
ticket d-1 up-drop "lost, no key header"
ticket k-1 up-dropkeyed "lost, key honoured"
wait_state d-1 unknown
wait_state k-1 succeeded
is "$(state_of d-1)" "unknown 1" "acted, answer lost, no key header: unknown after one attempt, never re-sent"
is "$(sql "SELECT ambiguous FROM outbox.intents WHERE key = 'd-1'")" t "flagged ambiguous"
is "$(sql "SELECT outbox.needs_person(i.id, i.target, i.first_attempt_at) IS NOT NULL FROM outbox.intents i WHERE key = 'd-1'")" \
    t "a person must settle it (no status URL or tool to ask)"
is "$(effects drop '^effect create_ticket d-1$')" 1 "one effect at that upstream"
is "$(sql "SELECT state FROM outbox.intents WHERE key = 'k-1'")" succeeded \
    "with the key honoured in _meta: succeeded"
# Sent again by the relay (attempt 2) or, on a reused connection, by libcurl
# within attempt 1 (deliver.c: allowed for a target with a key header).
is "$(effects dropkeyed 'call create_ticket k-1')" 2 "the upstream got the call twice (the first answer was lost)"
is "$(effects dropkeyed)" 1 "one effect for the key"
is "$(sql "SELECT response_body::jsonb -> 'structuredContent' ->> 'ticket' FROM outbox.intents WHERE key = 'k-1'")" \
    T-1 "the saved result is the first one's"

# ---- the lost answer, reconciled through the upstream's status tool -----------------------------
ticket st-1 up-dropstatus "lost, asked"
wait_state st-1 succeeded
is "$(state_of st-1)" "succeeded 1" "acted, answer lost, no key header, a status_tool: reconciled succeeded, never re-sent"
is "$(effects drop '^asked st-1$')" 1 "the status tool was asked about the key (once)"
is "$(effects drop '^effect create_ticket st-1$')" 1 "one effect"
is "$(sql "SELECT string_agg(class::text, ',' ORDER BY a.at, a.id) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
            WHERE i.key = 'st-1'")" "ambiguous,reconciled_executed" "its history: ambiguous, then reconciled_executed"

# ---- the agent's path, and our own front door as the upstream -------------------------------------
receiver_start r --dedupe
target_add refund "http://127.0.0.1:$RECV_PORT_r/refunds" timeout_ms=2000
AGENT_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
RELAY_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
sql "INSERT INTO outbox.mcp_tools (tool, target, description, upstream_tool) VALUES
       ('ticket', 'up-stateless', 'Open a ticket upstream.', 'create_ticket'),
       ('refund', 'refund', 'Refund, a webhook.', NULL)" >/dev/null
sql "SELECT outbox.mcp_client('agent', '$AGENT_TOKEN'), outbox.mcp_client('relay-b', '$RELAY_TOKEN')" >/dev/null
mcp_start --mcp-wait-ms 10000
python3 "$ITEST_ROOT/tests/mcp/mcp_call.py" "$MCP_PORT" "$AGENT_TOKEN" call ticket a-1 '{"title": "from an agent"}' \
    >"$T/agent.json"
sed 's/^/# agent: /' "$T/agent.json"
agent() { python3 -c "import json,sys; r=json.load(open('$T/agent.json'))['result']; print($1)"; }
is "$(agent "r['structuredContent']['status']")" succeeded "the agent's call of a tool whose target is an MCP server succeeded"
is "$(agent "len(r['content'])")" 2 "the answer has the status block and the upstream's content block"
is "$(agent "r['content'][1]['text']")" "ticket T-3 opened: from an agent" "the upstream's own words come second"
is "$(agent "r['structuredContent']['response']['title']")" "from an agent" "its structuredContent is the response"
is "$(agent "r['structuredContent']['key']")" a-1 "the envelope is unchanged (key)"
is "$(effects stateless '^effect create_ticket mcp:agent:a-1')" 1 "one effect at the upstream, under the front door's key"

target_add frontdoor "http://127.0.0.1:$MCP_PORT/mcp" "key_header='Idempotency-Key'" \
    "auth_secret='OUTBOX_SECRET_FD'" "${common[@]}"
kill -TERM "$RELAY_PID_a"
wait "$RELAY_PID_a"
export OUTBOX_SECRET_FD="$RELAY_TOKEN" OUTBOX_SECRET_UP="$UP_TOKEN"
relay_start a --poll-interval-ms 200
unset OUTBOX_SECRET_FD OUTBOX_SECRET_UP
sql "SELECT outbox.enqueue('f-1', 'frontdoor', '{\"tool\": \"refund\", \"arguments\": {\"n\": 1}}')" >/dev/null
wait_state f-1 succeeded
is "$(state_of f-1)" "succeeded 1" "our own front door as an MCP upstream: the call succeeded"
ok "found 2026-07-28 by server/discover" \
    grep -q '"event":"mcp_session".*"target":"frontdoor".*"era":"2026-07-28"' "$T/relay-a.log"
is "$(sql "SELECT state FROM outbox.intents WHERE key = 'mcp:relay-b:f-1'")" succeeded \
    "the key in _meta became the front door's key (one intent behind it)"
effects_table r
is "$(sql "SELECT string_agg(key || '=' || n, ' ') FROM effects")" "mcp:relay-b:f-1=1" "one effect at the webhook behind it"
is "$(sql "SELECT response_body::jsonb -> 'structuredContent' ->> 'status' FROM outbox.intents WHERE key = 'f-1'")" \
    succeeded "the saved result is the front door's answer"

kill -TERM "$MCP_PID"
wait "$MCP_PID"
is "$?" 0 "the front door stops on SIGTERM with exit 0 (sanitizers clean)"
ok "the relay's log has no sanitizer report" relay_logs_clean
itest_done
