#!/usr/bin/env bash
# outbox-relay mcp-import (issue 36, item 3; and item 6's server no one here
# wrote): the tools of an upstream MCP server registered in outbox.mcp_tools.
#   - an SDK server (tests/mcp/sdk/import_server.mjs, the low-level Server:
#     McpServer lists every tool in one answer) answering tools/list two
#     tools a page, behind a bearer token: every page read (nextCursor), each
#     tool added as TARGET.name with its description, schema, title and
#     annotations; a name that does not fit and a schema outside the front
#     door's subset (OR020's message) are skipped, the others imported;
#   - run again: unchanged; the upstream changes a description and drops a
#     tool: updated, disabled (the row stays); lists it again: it stays
#     disabled (a person enables it);
#   - --only and --prefix, on a stateful (Mcp-Session-Id) target that wants
#     a header of targets.headers (its value from an OUTBOX_SECRET_ variable);
#   - the 2026-07-28 era (server/discover, the _meta envelope): our own
#     front door as the upstream;
#   - the role: an operator's login is refused with the hint, outbox_admin's
#     works; no such target, an http target, a missing token: errors;
#   - @modelcontextprotocol/server-everything (npm, pinned in
#     tests/mcp/sdk/package.json) in its Streamable HTTP mode: its tools
#     imported, echo called through the front door with a key, the key
#     replayed: one call upstream, the saved answer.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

itest_node_sdk

sql "CREATE ROLE itest_admin LOGIN; GRANT outbox_admin TO itest_admin;
     CREATE ROLE itest_operator LOGIN; GRANT outbox_operator TO itest_operator" >/dev/null
ADMIN_DB="postgresql://itest_admin@127.0.0.1:$PGPORT/postgres"
OPERATOR_DB="postgresql://itest_operator@127.0.0.1:$PGPORT/postgres"
# import ARGS...: mcp-import as the admin; output in $T/out, exit code in $RC
import() {
    "$RELAY_BIN" mcp-import "$@" --db "$ADMIN_DB" >"$T/out" 2>"$T/err"
    RC=$?
    sed 's/^/# out: /' "$T/out"
    sed 's/^/# err: /' "$T/err"
}
row() { sql "SELECT concat_ws(' | ', target, upstream_tool, coalesce(title, '-'), description, destructive, enabled) FROM outbox.mcp_tools WHERE tool = '$1'"; }

# server_start NAME VAR=VALUE...: import_server.mjs; sets PORT_<NAME>
server_start() {
    local name=$1 i port=""
    shift
    (cd "$T/sdk" && exec env LOG="$T/log-$name" "$@" "$NODE_BIN" import_server.mjs) \
        >"$T/srv-$name.out" 2>"$T/srv-$name.err" &
    ITEST_PIDS+=("$!")
    : >"$T/log-$name"
    for i in $(seq 1 200); do
        port=$(sed -n 's/^listening //p' "$T/srv-$name.out" 2>/dev/null)
        [ -n "$port" ] && break
        sleep 0.05
    done
    [ -n "$port" ] || { sed 's/^/# /' "$T/srv-$name.err"; bail "server $name did not start"; }
    printf -v "PORT_$name" '%s' "$port"
}

cat >"$T/tools.json" <<'EOF'
[
 {"name": "create_ticket", "description": "Open a ticket.",
  "inputSchema": {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}},
 {"name": "get_ticket", "description": "Read a ticket.",
  "inputSchema": {"type": "object", "properties": {"id": {"type": "string", "format": "uuid"}}},
  "annotations": {"title": "Get a ticket", "readOnlyHint": true}},
 {"name": "close_ticket", "title": "Close a ticket", "description": "Close it for good.",
  "inputSchema": {"type": "object", "properties": {"id": {"type": "string"}}},
  "annotations": {"destructiveHint": true}},
 {"name": "has space", "description": "Its name does not fit.", "inputSchema": {"type": "object"}},
 {"name": "conditional", "description": "A keyword the front door does not take.",
  "inputSchema": {"type": "object", "if": {"required": ["a"]}, "then": {"required": ["b"]}}}
]
EOF
TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
server_start up TOOLS="$T/tools.json" PAGE=2 TOKEN="$TOKEN"
server_start sess TOOLS="$T/tools.json" PAGE=2 MODE=stateful HEADER=X-Tenant:acme
target_add up "http://127.0.0.1:$PORT_up/mcp" "protocol='mcp'" "auth_secret='OUTBOX_SECRET_IMPORT_UP'" \
    timeout_ms=5000
target_add sess "http://127.0.0.1:$PORT_sess/mcp" "protocol='mcp'" "mcp_version='2025-11-25'" timeout_ms=5000 \
    "headers='{\"X-Tenant\": {\"env\": \"OUTBOX_SECRET_TENANT\"}}'"
export OUTBOX_SECRET_TENANT=acme
target_add hook "http://127.0.0.1:1/hook"

ok "outbox-relay --help lists mcp-import" bash -c "'$RELAY_BIN' --help | grep -q '^  mcp-import TARGET'"

# ---- errors before anything is read ------------------------------------------------------------
import up
is "$RC" 1 "the token's variable is not set: exit 1"
ok "the message names the variable" grep -q "auth_secret names OUTBOX_SECRET_IMPORT_UP, which is not set" "$T/err"
import nosuch
is "$RC" 3 "no such target: exit 3"
import hook
is "$RC" 2 "an http target: exit 2"
ok "it says why" grep -q "target 'hook' is not an mcp target" "$T/err"
export OUTBOX_SECRET_IMPORT_UP="$TOKEN"
"$RELAY_BIN" mcp-import up --db "$OPERATOR_DB" >"$T/out" 2>"$T/err"
is "$?" 1 "as an operator (no INSERT on mcp_tools): exit 1"
ok "with the hint naming outbox_admin" grep -q "needs outbox_admin" "$T/err"
is "$(sql "SELECT count(*) FROM outbox.mcp_tools")" 0 "nothing registered"

# ---- the first import ---------------------------------------------------------------------------
: >"$T/log-up" # the operator's run read the list too
import up
is "$RC" 0 "import: exit 0 (two tools skipped, the others imported)"
is "$(grep -c '' "$T/log-up")" 3 "tools/list read three pages"
is "$(tr '\n' ' ' <"$T/log-up")" "list - list 2 list 4 " "following nextCursor"
ok "up.create_ticket: added" grep -qx "up.create_ticket: added" "$T/out"
ok "up.get_ticket: added" grep -qx "up.get_ticket: added" "$T/out"
ok "up.close_ticket: added" grep -qx "up.close_ticket: added" "$T/out"
ok "a name that does not fit is skipped, and why" \
    grep -qxF 'has space: skipped: the name with the prefix does not fit mcp_tools.tool (^[A-Za-z0-9_.-]{1,128}$)' "$T/out"
ok "a schema outside the subset is skipped with OR020's message" \
    grep -qF "up.conditional: skipped: outbox.mcp_tools: the input_schema of tool 'up.conditional' is refused: unsupported keyword \"if\"" "$T/out"
ok "the summary line" grep -qx "3 added, 0 updated, 0 unchanged, 0 disabled, 2 skipped (target 'up', 2025-11-25)" "$T/out"
is "$(row up.create_ticket)" "up | create_ticket | - | Open a ticket. | t | t" \
    "create_ticket: upstream_tool, description; no annotations → destructive"
is "$(row up.get_ticket)" "up | get_ticket | Get a ticket | Read a ticket. | f | t" \
    "get_ticket: title from annotations; readOnlyHint → not destructive"
is "$(row up.close_ticket)" "up | close_ticket | Close a ticket | Close it for good. | t | t" "close_ticket: its title"
is "$(sql "SELECT input_schema->'properties'->'id'->>'format' FROM outbox.mcp_tools WHERE tool = 'up.get_ticket'")" \
    uuid "the input schema as the upstream gave it"
is "$(sql "SELECT count(*) FROM outbox.mcp_tools")" 3 "three rows"

# ---- again; then the upstream changes ------------------------------------------------------------
import up
is "$RC" 0 "again: exit 0"
is "$(grep -c ': unchanged$' "$T/out")" 3 "each imported tool: unchanged"
python3 - "$T/tools.json" <<'EOF'
import json, sys
tools = [t for t in json.load(open(sys.argv[1])) if t["name"] != "close_ticket"]
tools[0]["description"] = "Open a ticket (now with a priority)."
json.dump(tools, open(sys.argv[1], "w"))
EOF
import up
is "$RC" 0 "after the upstream changed: exit 0"
ok "the changed description: updated" grep -qx "up.create_ticket: updated" "$T/out"
ok "the dropped tool: disabled" grep -qx "up.close_ticket: disabled: the upstream no longer lists it" "$T/out"
ok "the other: unchanged" grep -qx "up.get_ticket: unchanged" "$T/out"
is "$(row up.close_ticket)" "up | close_ticket | Close a ticket | Close it for good. | t | f" "the row stays, disabled"
is "$(sql "SELECT description FROM outbox.mcp_tools WHERE tool = 'up.create_ticket'")" \
    "Open a ticket (now with a priority)." "the new description"
python3 - "$T/tools.json" <<'EOF'
import json, sys
tools = json.load(open(sys.argv[1]))
tools.append({"name": "close_ticket", "title": "Close a ticket", "description": "Close it for good.",
              "inputSchema": {"type": "object", "properties": {"id": {"type": "string"}}},
              "annotations": {"destructiveHint": True}})
json.dump(tools, open(sys.argv[1], "w"))
EOF
import up
ok "the upstream lists it again: it stays disabled, and the line says how to enable it" \
    grep -qx "up.close_ticket: unchanged: disabled here; UPDATE outbox.mcp_tools SET enabled = true enables it" "$T/out"
is "$(sql "SELECT enabled FROM outbox.mcp_tools WHERE tool = 'up.close_ticket'")" f "still disabled"

# ---- --only, --prefix, a session ---------------------------------------------------------------
import sess --only get_ticket,gone --prefix ro_
is "$RC" 0 "--only --prefix on a stateful server: exit 0"
ok "only the named tool, with the prefix" grep -qx "ro_get_ticket: added" "$T/out"
ok "a name --only gives that the upstream does not list: said" \
    grep -qx "gone: skipped: --only names it; the upstream does not list it" "$T/out"
is "$(sql "SELECT string_agg(tool, ',' ORDER BY tool) FROM outbox.mcp_tools WHERE target = 'sess'")" ro_get_ticket \
    "one row for that target"
is "$(grep -c '^session ' "$T/log-sess")" 1 "one session (initialize, then tools/list with its Mcp-Session-Id)"
OUTBOX_SECRET_TENANT=other import sess --only get_ticket --prefix ro_
is "$RC" 1 "the target's header with another value: the upstream refuses (403), nothing read: exit 1"
ok "saying what failed" grep -q "cannot read the tools of 'sess': initialize: HTTP 403" "$T/err"

# ---- through the front door ---------------------------------------------------------------------
AGENT_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
sql "SELECT outbox.mcp_client('agent', '$AGENT_TOKEN')" >/dev/null
relay_start a --poll-interval-ms 200
mcp_start --mcp-wait-ms 10000
python3 "$ITEST_ROOT/tests/mcp/mcp_call.py" "$MCP_PORT" "$AGENT_TOKEN" list >"$T/list.json"
ok "tools/list offers the imported tools, not the disabled one" python3 -c "
import json; names = {t['name'] for t in json.load(open('$T/list.json'))['result']['tools']}
assert {'up.create_ticket', 'up.get_ticket', 'ro_get_ticket'} <= names and 'up.close_ticket' not in names, names"
call() { python3 "$ITEST_ROOT/tests/mcp/mcp_call.py" "$MCP_PORT" "$AGENT_TOKEN" call "$@"; }
call up.create_ticket t-1 '{"title": "imported"}' >"$T/call1.json"
call up.create_ticket t-1 '{"title": "imported"}' >"$T/call2.json"
sed 's/^/# call: /' "$T/call1.json"
field() { python3 -c "import json; r=json.load(open('$1'))['result']; print($2)"; }
is "$(field "$T/call1.json" "r['structuredContent']['status']")" succeeded "the imported tool's call succeeded"
is "$(field "$T/call1.json" "r['content'][1]['text']")" "called create_ticket" "the upstream was called by its own name"
is "$(grep -c '^call create_ticket mcp:agent:t-1$' "$T/log-up")" 1 "one call upstream for the key"
is "$(field "$T/call2.json" "r['structuredContent']")" "$(field "$T/call1.json" "r['structuredContent']")" \
    "the replayed key gets the saved answer"

# ---- the 2026-07-28 era: our own front door as the upstream ---------------------------------------
target_add fd "http://127.0.0.1:$MCP_PORT/mcp" "protocol='mcp'" "auth_secret='OUTBOX_SECRET_IMPORT_FD'" timeout_ms=5000
OUTBOX_SECRET_IMPORT_FD="$AGENT_TOKEN" import fd --only up.get_ticket
is "$RC" 0 "our front door as the upstream: exit 0"
ok "found 2026-07-28 by server/discover, tools/list with the _meta envelope" \
    grep -qx "1 added, 0 updated, 0 unchanged, 0 disabled, 0 skipped (target 'fd', 2026-07-28)" "$T/out"
ok "fd.up.get_ticket: added" grep -qx "fd.up.get_ticket: added" "$T/out"
is "$(row fd.up.get_ticket)" "fd | up.get_ticket | Get a ticket | Read a ticket. | f | t" \
    "what the front door lists comes back as it was imported"

# ---- @modelcontextprotocol/server-everything -----------------------------------------------------
EV_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
(cd "$T/sdk" && exec env PORT="$EV_PORT" "$NODE_BIN" --import ./loopback.mjs \
    node_modules/@modelcontextprotocol/server-everything/dist/index.js streamableHttp) \
    >"$T/everything.out" 2>"$T/everything.err" &
ITEST_PIDS+=("$!")
wait_cmd 30 grep -q "listening on port $EV_PORT" "$T/everything.err" ||
    { sed 's/^/# /' "$T/everything.err"; bail "server-everything did not start"; }
target_add everything "http://127.0.0.1:$EV_PORT/mcp" "protocol='mcp'" timeout_ms=10000
import everything --prefix ev.
is "$RC" 0 "server-everything: import exit 0"
ok "its echo tool added" grep -qx "ev.echo: added" "$T/out"
ok "its get-sum tool added" grep -qx "ev.get-sum: added" "$T/out"
is "$(row ev.echo)" "everything | echo | Echo Tool | Echoes back the input string | f | t" \
    "echo: title, description, readOnlyHint → not destructive"
ok "its schema (zod's, with \$schema and additionalProperties) registered" \
    test "$(sql "SELECT input_schema->'properties'->'message'->>'type' FROM outbox.mcp_tools WHERE tool = 'ev.echo'")" = string
import everything --prefix ev.
is "$(grep -c ': added$\|: updated$' "$T/out")" 0 "again: nothing added or updated"
call ev.echo e-1 '{"message": "hello"}' >"$T/ev1.json"
call ev.echo e-1 '{"message": "hello"}' >"$T/ev2.json"
sed 's/^/# call: /' "$T/ev1.json"
is "$(field "$T/ev1.json" "r['structuredContent']['status']")" succeeded "ev.echo through the front door: succeeded"
is "$(field "$T/ev1.json" "r['content'][1]['text']")" "Echo: hello" "with server-everything's own words"
is "$(sql "SELECT state || ' ' || attempts FROM outbox.intents WHERE key = 'mcp:agent:e-1'")" "succeeded 1" \
    "one intent, one attempt"
is "$(field "$T/ev2.json" "r['structuredContent']")" "$(field "$T/ev1.json" "r['structuredContent']")" \
    "the replayed key gets the saved answer"

kill -TERM "$MCP_PID"
wait "$MCP_PID"
is "$?" 0 "the front door stops on SIGTERM with exit 0"
ok "the relay's log has no sanitizer report" relay_logs_clean
ok "the token is in no output" bash -c "! grep -rq '$TOKEN' '$T'/out '$T'/err '$T'/relay-a.log"
itest_done
