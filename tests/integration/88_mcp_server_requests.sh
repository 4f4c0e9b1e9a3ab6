#!/usr/bin/env bash
# Issue 36, item 1: a request of the server on the upstream's event stream
# (sampling, elicitation, roots/list) is answered with a JSON-RPC error that
# says the gateway cannot answer it, POSTed back to the upstream as the
# Streamable HTTP transport says (with the call's Mcp-Session-Id and the
# target's bearer token), while the call's stream is still open.
#
# The upstream is an SDK McpServer (tests/mcp/sdk/upstream_server.mjs,
# MODE=sse, sessions, a token) whose tool "summarize" asks the client for a
# sampling, an elicitation and its roots during the call, one after the
# other, and acts once it has the three answers. Before, the relay counted
# the requests and never answered: the SDK waited (60 s), the relay's
# timeout (20 s) ended the call, ambiguous, then unknown, with no effect.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

itest_node_sdk

UP_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
(cd "$T/sdk" && exec env EFFECTS="$T/effects" MODE=sse TOKEN="$UP_TOKEN" "$NODE_BIN" upstream_server.mjs) \
    >"$T/up.out" 2>"$T/up.err" &
ITEST_PIDS+=("$!")
: >"$T/effects"
UP_PORT=""
for i in $(seq 1 200); do
    UP_PORT=$(sed -n 's/^listening //p' "$T/up.out" 2>/dev/null)
    [ -n "$UP_PORT" ] && break
    sleep 0.05
done
[ -n "$UP_PORT" ] || { sed 's/^/# /' "$T/up.err"; bail "the upstream did not start"; }

target_add up "http://127.0.0.1:$UP_PORT/mcp" "protocol='mcp'" key_header=NULL "auth_secret='OUTBOX_SECRET_UP'" \
    timeout_ms=20000 backoff_base_ms=100 backoff_cap_ms=200
export OUTBOX_SECRET_UP="$UP_TOKEN"
relay_start a --poll-interval-ms 200
unset OUTBOX_SECRET_UP

sql "SELECT outbox.enqueue('q-1', 'up', '{\"tool\": \"summarize\", \"arguments\": {\"text\": \"a long report\"}}')" >/dev/null
wait_for 60 "SELECT state FROM outbox.intents WHERE key = 'q-1' AND state <> 'pending'" succeeded
sed 's/^/# upstream: /' "$T/effects"
is "$(sql "SELECT state || ' ' || attempts FROM outbox.intents WHERE key = 'q-1'")" "succeeded 1" \
    "a tool that asks the client three things during the call: succeeded at the first attempt"
for m in sampling/createMessage elicitation/create roots/list; do
    is "$(grep -c "^asked $m: -32601 .*cannot answer $m: it is a gateway" "$T/effects")" 1 \
        "the server's $m was answered with -32601, saying the gateway cannot answer it"
done
is "$(grep -c '^effect summarize q-1$' "$T/effects")" 1 "then the tool acted, once, under the key"
is "$(sql "SELECT response_body::jsonb -> 'content' -> 0 ->> 'text' FROM outbox.intents WHERE key = 'q-1'")" \
    "summary of 13 characters, without the host" "its result is saved"
is "$(grep -c '"event":"mcp_server_request_refused".*"target":"up".*"http_status":202' "$T/relay-a.log")" 3 \
    "the relay logged three answers POSTed back, each accepted (202: with the session id and the token)"
ok "the token is never in the relay's log" bash -c "! grep -q '$UP_TOKEN' '$T/relay-a.log'"

kill -TERM "$RELAY_PID_a"
relay_wait a 30
is "$?" 0 "the relay stops on SIGTERM with exit 0 (every reply handle closed)"
ok "the relay's log has no sanitizer report" relay_logs_clean
itest_done
