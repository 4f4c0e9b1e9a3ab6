#!/usr/bin/env bash
# Issue 36, item 3's end: read-only tools of an MCP upstream passed straight
# through (0045). The upstream is an SDK server (tests/mcp/sdk/import_server.mjs,
# the low-level Server, 2025-11-25) that logs each call it gets.
#   - mcp-import --passthrough-readonly marks only the readOnlyHint tools;
#     an import without it leaves them so; a destructive tool cannot be
#     marked (the trigger's exact words);
#   - tools/list says so (the sentence, readOnlyHint, no outputSchema);
#   - a passthrough call answers the upstream's content at once, with no
#     row in outbox.intents and no relay running; a key in _meta is ignored
#     (not sent upstream); the upstream counts exactly the calls made;
#   - a write tool of the same upstream is still an intent;
#   - the 2025-11-25 era with a session (Mcp-Session-Id): one session for two
#     calls, and a new one when the upstream forgets it (404, then the call
#     once more); the 2026-07-28 era ('auto', server/discover): the front
#     door as its own upstream;
#   - an upstream that is down: -32603 with the exact message;
#   - /metrics counts the calls by result; the token is never logged.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

itest_node_sdk

sql "CREATE ROLE itest_admin LOGIN; GRANT outbox_admin TO itest_admin" >/dev/null
ADMIN_DB="postgresql://itest_admin@127.0.0.1:$PGPORT/postgres"
import() {
    "$RELAY_BIN" mcp-import "$@" --db "$ADMIN_DB" >"$T/out" 2>"$T/err"
    RC=$?
    sed 's/^/# out: /' "$T/out"
    sed 's/^/# err: /' "$T/err"
}
# server_start NAME VAR=VALUE...: import_server.mjs; sets PORT_<NAME> and PID_<NAME>
server_start() {
    local name=$1 i port=""
    shift
    : >"$T/srv-$name.out"
    (cd "$T/sdk" && exec env LOG="$T/log-$name" "$@" "$NODE_BIN" import_server.mjs) \
        >"$T/srv-$name.out" 2>"$T/srv-$name.err" &
    ITEST_PIDS+=("$!")
    printf -v "PID_$name" '%s' "$!"
    touch "$T/log-$name"
    for i in $(seq 1 200); do
        port=$(sed -n 's/^listening //p' "$T/srv-$name.out" 2>/dev/null)
        [ -n "$port" ] && break
        sleep 0.05
    done
    [ -n "$port" ] || { sed 's/^/# /' "$T/srv-$name.err"; bail "server $name did not start"; }
    printf -v "PORT_$name" '%s' "$port"
}

cat >"$T/tools.json" <<'JSON'
[
 {"name": "get_ticket", "description": "Read a ticket.",
  "inputSchema": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
  "annotations": {"readOnlyHint": true}},
 {"name": "create_ticket", "description": "Open a ticket.",
  "inputSchema": {"type": "object", "properties": {"title": {"type": "string"}}}},
 {"name": "close_ticket", "description": "Close it for good.",
  "inputSchema": {"type": "object"}, "annotations": {"destructiveHint": true}},
 {"name": "count_tickets", "description": "How many.",
  "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true, "destructiveHint": false}}
]
JSON
UP_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
AGENT_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
server_start up TOOLS="$T/tools.json" TOKEN="$UP_TOKEN"
server_start sess TOOLS="$T/tools.json" MODE=stateful
target_add up "http://127.0.0.1:$PORT_up/mcp" "protocol='mcp'" "auth_secret='OUTBOX_SECRET_PT_UP'" timeout_ms=5000
target_add sess "http://127.0.0.1:$PORT_sess/mcp" "protocol='mcp'" "mcp_version='2025-11-25'" timeout_ms=5000
refusing_port DOWN_PORT
target_add down "http://127.0.0.1:$DOWN_PORT/mcp" "protocol='mcp'" timeout_ms=2000
sql "SELECT outbox.mcp_client('agent', '$AGENT_TOKEN')" >/dev/null
export OUTBOX_SECRET_PT_UP="$UP_TOKEN"

# ---- the import ---------------------------------------------------------------------------------
import up --passthrough-readonly
is "$RC" 0 "import --passthrough-readonly: exit 0"
ok "a read-only tool: added, and the line says it is passthrough" \
    grep -qx "up.get_ticket: added: passthrough (read-only: called straight through, no intent)" "$T/out"
ok "a write: added, no more" grep -qx "up.create_ticket: added" "$T/out"
is "$(sql "SELECT string_agg(tool || '=' || passthrough, ' ' ORDER BY tool) FROM outbox.mcp_tools")" \
    "up.close_ticket=false up.count_tickets=true up.create_ticket=false up.get_ticket=true" \
    "only the readOnlyHint tools are passthrough"
import up
is "$RC" 0 "an import without the option: exit 0"
is "$(grep -c ': unchanged' "$T/out")" 4 "every tool unchanged"
is "$(sql "SELECT count(*) FROM outbox.mcp_tools WHERE passthrough")" 2 "the passthrough tools stay so"
import sess --passthrough-readonly
is "$RC" 0 "the stateful upstream's tools: exit 0"
psql -X -q -tA -c "UPDATE outbox.mcp_tools SET passthrough = true WHERE tool = 'up.close_ticket'" 2>"$T/err"
is "$(sed -n 's/^ERROR:  //p' "$T/err")" \
    "outbox.mcp_tools: tool 'up.close_ticket' cannot be passthrough: it is destructive (only a read-only tool, destructive false, is called without an intent)" \
    "a destructive tool cannot be marked passthrough (the trigger's words)"
target_add self "http://127.0.0.1:1/mcp" "protocol='mcp'" "auth_secret='OUTBOX_SECRET_PT_SELF'" # its url is set once the front door listens
sql "INSERT INTO outbox.mcp_tools (tool, target, description, destructive, passthrough, upstream_tool) VALUES
       ('down.read', 'down', 'A read of an upstream that is down.', false, true, 'get_ticket'),
       ('self.get', 'self', 'A read through the front door itself.', false, true, 'up.get_ticket')" >/dev/null

# ---- the front door -----------------------------------------------------------------------------
export OUTBOX_SECRET_PT_SELF="$AGENT_TOKEN"
mcp_start --mcp-wait-ms 4000
unset OUTBOX_SECRET_PT_UP OUTBOX_SECRET_PT_SELF
sql "UPDATE outbox.targets SET url = 'http://127.0.0.1:$MCP_PORT/mcp' WHERE name = 'self'" >/dev/null
call() { python3 "$ITEST_ROOT/tests/mcp/pt_call.py" "$MCP_PORT" "$AGENT_TOKEN" "$@"; }
field() { python3 -c "import json,sys; d=json.loads(sys.stdin.read()); print($1)"; }

python3 "$ITEST_ROOT/tests/mcp/mcp_call.py" "$MCP_PORT" "$AGENT_TOKEN" list >"$T/list.json"
tool_field() { python3 -c "import json; t=[t for t in json.load(open('$T/list.json'))['result']['tools'] if t['name']=='$1'][0]; print($2)"; }
ok "tools/list: a passthrough tool's description says it is a read passed straight through" \
    bash -c "[ \"\$(python3 -c \"import json; t=[t for t in json.load(open('$T/list.json'))['result']['tools'] if t['name']=='up.get_ticket'][0]; print(t['description'])\")\" = 'Read a ticket. This tool is a read passed straight through to the upstream MCP server: no idempotency key is needed (a key in _meta is ignored), nothing is recorded and no outcome is saved; calling it again reads again.' ]"
is "$(tool_field up.get_ticket "t['annotations']['readOnlyHint'], 'outputSchema' in t")" "True False" \
    "read-only, and no outputSchema (the result is the upstream's)"
is "$(tool_field up.create_ticket "t['annotations']['readOnlyHint'], 'outputSchema' in t")" "False True" \
    "a write tool is listed as before"

# ---- passthrough calls: 2025-11-25, stateless (auto: server/discover, then initialize) ---------
R=$(call up.get_ticket '{"id": "T-1"}')
echo "# $R"
is "$(echo "$R" | field "d['result']['content'][0]['text'], d['result']['isError']")" "called get_ticket False" \
    "a passthrough call answers the upstream's content"
R=$(call up.get_ticket '{"id": "T-1"}' k-ignored)
is "$(echo "$R" | field "d['result']['content'][0]['text']")" "called get_ticket" "again, with a key in _meta"
R=$(call up.count_tickets '{}')
is "$(echo "$R" | field "d['result']['content'][0]['text']")" "called count_tickets" "another read-only tool"
is "$(sql "SELECT count(*) FROM outbox.intents")" 0 "no intent for any of them (and no relay runs)"
is "$(grep -c '^call ' "$T/log-up")" 3 "the upstream got exactly the three calls"
is "$(grep -c '^call get_ticket (no key)$' "$T/log-up")" 2 "each without a key (the one in _meta was not sent)"
R=$(call up.get_ticket '{}')
is "$(echo "$R" | field "d['result']['isError'], d['result']['structuredContent']['status']")" "True invalid_arguments" \
    "arguments against the tool's schema are refused before the upstream"
is "$(grep -c '^call ' "$T/log-up")" 3 "and the upstream is not called"

# ---- a write is still an intent ------------------------------------------------------------------
R=$(call up.create_ticket '{"title": "t"}' w-1)
echo "# $R"
is "$(sql "SELECT target || ' ' || state FROM outbox.intents WHERE key = 'mcp:agent:w-1'")" "up pending" \
    "a write tool of the same upstream is enqueued"
is "$(grep -c '^call create_ticket' "$T/log-up")" 0 "and not called by the front door"

# ---- 2025-11-25 with a session -------------------------------------------------------------------
: >"$T/log-sess" # the import's session is not the front door's
R=$(call sess.get_ticket '{"id": "S-1"}')
is "$(echo "$R" | field "d['result']['content'][0]['text']")" "called get_ticket" "a stateful upstream: answered"
call sess.count_tickets '{}' >/dev/null
is "$(grep -c '^session ' "$T/log-sess")" 1 "one session for two calls"
is "$(grep -c '^call ' "$T/log-sess")" 2 "two calls"
kill "$PID_sess"
wait "$PID_sess" 2>/dev/null
mv "$T/log-sess" "$T/log-sess-1"
server_start sess TOOLS="$T/tools.json" MODE=stateful PORT="$PORT_sess"
R=$(call sess.get_ticket '{"id": "S-2"}')
echo "# $R"
is "$(echo "$R" | field "d['result']['content'][0]['text']")" "called get_ticket" \
    "the upstream restarted (its sessions forgotten): the call is answered"
is "$(grep -c '^session ' "$T/log-sess")" 1 "in a new session (the 404 to the old one started it)"
is "$(grep -c '^call ' "$T/log-sess")" 1 "one call"

# ---- 2026-07-28: the front door as its own upstream ---------------------------------------------
R=$(call self.get '{"id": "T-9"}' - modern)
echo "# $R"
is "$(echo "$R" | field "d['result']['content'][0]['text'], d['result']['resultType']")" "called get_ticket complete" \
    "through the front door itself (2026-07-28, server/discover): the upstream's content"
is "$(grep -c '^call get_ticket' "$T/log-up")" 3 "the SDK server got that call too"
is "$(sql "SELECT count(*) FROM outbox.intents")" 1 "still only the write's intent"

# ---- an upstream that is down --------------------------------------------------------------------
R=$(call down.read '{}')
echo "# $R"
is "$(echo "$R" | field "d['error']['code'], d['error']['message']")" \
    "-32603 Internal error: the upstream MCP server could not be reached; nothing was recorded (this tool is a read passed straight through, with no intent), so calling it again is safe" \
    "an upstream that is down: -32603, nothing recorded, a read may be called again"
is "$(sql "SELECT count(*) FROM outbox.intents")" 1 "no intent for it"

# ---- metrics, log, stop ---------------------------------------------------------------------------
curl -s "http://127.0.0.1:$MCP_PORT/metrics" >"$T/metrics"
grep '^outbox_mcp_passthrough' "$T/metrics" | sed 's/^/# /'
is "$(sed -n 's/^outbox_mcp_passthrough_calls_total{result="ok"} //p' "$T/metrics")" 8 \
    "passthrough calls answered ok: 8 (the self call is two)"
is "$(sed -n 's/^outbox_mcp_passthrough_calls_total{result="unreachable"} //p' "$T/metrics")" 1 "unreachable: 1"
ok "the upstreams' tokens are never in the front door's log" \
    bash -c "! grep -q -e '$UP_TOKEN' -e '$AGENT_TOKEN' '$T/mcp.log'"
kill -TERM "$MCP_PID"
wait "$MCP_PID"
is "$?" 0 "the front door stops on SIGTERM with exit 0 (its upstream connections closed)"
ok "no sanitizer report" bash -c "! grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' '$T/mcp.log'"
itest_done
