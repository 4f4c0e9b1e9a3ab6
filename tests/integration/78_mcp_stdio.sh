#!/usr/bin/env bash
# `outbox-relay mcp --stdio` as local hosts start it (issue 37, item 2):
# tests/mcp/sdk/stdio_client.mjs spawns the front door with the official SDK
# 1.32's StdioClientTransport (2025-11-25) and @modelcontextprotocol/client
# 2.x's (2026-07-28): initialize or server/discover, tools/list, tools/call
# with a key, the replay of the saved outcome, a task; then by hand: stdout
# carries only JSON-RPC lines, a task's settle is a notifications/tasks/status
# line, a bad line gets an error line, notifications/cancelled silences a
# waiting call, end of input answers the calls in flight and exits 0, --mcp-client-calls holds lines back instead of refusing
# them, an unknown token exits 1 and a missing one 2, with the reason on
# stderr and nothing on stdout. Here: one effect per key at the receiver.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

itest_node_sdk

receiver_start r --dedupe
receiver_start slow --dedupe --delay-ms 6000
target_add refund "http://127.0.0.1:$RECV_PORT_r/refunds" timeout_ms=2000
target_add slow "http://127.0.0.1:$RECV_PORT_slow/refunds" timeout_ms=30000
SCHEMA='{"type": "object", "properties": {"account": {"type": "integer"},
          "amount_cents": {"type": "integer", "minimum": 1}}, "required": ["account", "amount_cents"],
          "additionalProperties": false}'
sql "INSERT INTO outbox.mcp_tools (tool, target, description, input_schema) VALUES
       ('refund', 'refund', 'Refund an amount to an account, once per key.', '$SCHEMA'),
       ('slow_refund', 'slow', 'The same, through a target that takes 6 s.', '$SCHEMA')" >/dev/null
TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
sql "SELECT outbox.mcp_client('desktop', '$TOKEN')" >/dev/null
sql "CREATE ROLE front_door LOGIN; GRANT outbox_mcp TO front_door" >/dev/null
relay_start a --poll-interval-ms 200

(cd "$T/sdk" && RELAY_BIN="$RELAY_BIN" MCP_DB="postgresql://front_door@127.0.0.1:$PGPORT/postgres" \
    MCP_TOKEN="$TOKEN" MCP_CLIENT=desktop KEY_PREFIX=s: timeout -k 5 300 "$NODE_BIN" stdio_client.mjs) >"$T/client.out" 2>"$T/client.err"
rc=$?
while IFS=$'\t' read -r status desc detail; do
    case "$status" in
    ok) TAP_COUNT=$((TAP_COUNT + 1)); echo "ok $TAP_COUNT - $desc" ;;
    "not ok")
        TAP_COUNT=$((TAP_COUNT + 1)); echo "not ok $TAP_COUNT - $desc"
        [ -n "$detail" ] && echo "#   $detail"
        TAP_FAILED=$((TAP_FAILED + 1))
        ;;
    *) echo "# $status $desc $detail" ;;
    esac
done <"$T/client.out"
is "$rc" 0 "the stdio client ran to the end"
[ "$rc" = 0 ] || sed 's/^/# /' "$T/client.err" | tail -n 20
is "$(grep -c "^ok" "$T/client.out")" 32 "the stdio client printed all its checks (32)"

# ---- stdin and stdout as files (uv_fs_read, uv_fs_write), not pipes --------------------------
printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"file","version":"1"}}}' \
    '{"jsonrpc":"2.0","id":2,"method":"tools/list"}' >"$T/requests.jsonl"
OUTBOX_MCP_TOKEN=$TOKEN timeout -k 5 60 "$RELAY_BIN" mcp --stdio --db "postgresql://front_door@127.0.0.1:$PGPORT/postgres" \
    <"$T/requests.jsonl" >"$T/answers.jsonl" 2>"$T/file-stdio.err"
is "$?" 0 "stdin and stdout redirected to files: exit 0 at the end of the file"
is "$(python3 -c "import json,sys; print(' '.join(sorted(str(json.loads(l)['id']) + ':' + ('result' if 'result' in json.loads(l) else 'error') for l in open(sys.argv[1]))))" "$T/answers.jsonl")" \
    "1:result 2:result" "the file of answers holds one JSON-RPC line per request (answers come as they are ready)"
OUTBOX_MCP_TOKEN=$TOKEN timeout -k 5 60 "$RELAY_BIN" mcp --stdio --db "postgresql://front_door@127.0.0.1:$PGPORT/postgres" \
    </dev/null >"$T/empty.out" 2>"$T/empty.err"
is "$?" 0 "stdin from /dev/null: exit 0"
is "$(wc -c <"$T/empty.out")" 0 "and nothing on stdout"

# ---- one effect per key ----------------------------------------------------------------------
# The calls answered at the end of input may still be delivering: wait for them.
wait_for 60 "SELECT count(*) FROM outbox.intents WHERE state <> 'succeeded'" 0 ||
    echo "# $(sql "SELECT string_agg(key || ' ' || state, ', ') FROM outbox.intents WHERE state <> 'succeeded'")"
effects_table r slow
is "$(sql "SELECT string_agg(key || '=' || n, ' ' ORDER BY key) FROM effects")" \
    "mcp:desktop:s:1=1 mcp:desktop:s:2=1 mcp:desktop:s:cancel-1=1 mcp:desktop:s:eof-1=1 mcp:desktop:s:eof-2=1 mcp:desktop:s:eof-3=1 mcp:desktop:s:raw-task=1 mcp:desktop:s:task=1" \
    "the receiver acted once per key (replays included), under the client's namespace, and on nothing else"
is "$(receiver_stat r keys_with_duplicate_effects) $(receiver_stat slow keys_with_duplicate_effects)" "0 0" "no key had two effects"
ok "the relay's log has no sanitizer report" relay_logs_clean
itest_done
