#!/usr/bin/env bash
# The MCP front door driven by the REAL official clients (issue 23): the
# TypeScript SDK 1.32 client in the 2025-11-25 era (tests/mcp/sdk/
# legacy_client.mjs: tools, keys, conflicts, a task) and
# @modelcontextprotocol/client 2.x in the 2026-07-28 era (modern_client.mjs),
# each with its own token; the receiver must show one effect per key.
# Then the founding scenario: tests/mcp/cut_proxy.py in front of the front
# door lets the first call of a key happen and resets the connection instead
# of answering; the SDK client sees an error, calls again with the same key
# and is told the saved outcome; one effect at the receiver, one intent, one
# delivery. Node 22 and the packages come from tests/lib/install-node.sh
# (npm registry; no network: this scenario fails, it does not skip).
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

# ---- Node 22 and the official packages -----------------------------------------------------
itest_node_sdk

# tap_lines FILE: the "ok<TAB>desc" / "not ok<TAB>desc<TAB>detail" lines of a
# client as TAP; "told<TAB>attempt<TAB>text" lines as comments.
tap_lines() {
    local status desc detail
    while IFS=$'\t' read -r status desc detail; do
        case "$status" in
        ok)
            TAP_COUNT=$((TAP_COUNT + 1))
            echo "ok $TAP_COUNT - $desc"
            ;;
        "not ok")
            TAP_COUNT=$((TAP_COUNT + 1))
            echo "not ok $TAP_COUNT - $desc"
            [ -n "$detail" ] && echo "#   $detail"
            TAP_FAILED=$((TAP_FAILED + 1))
            ;;
        told) echo "# the client was told ($desc): $detail" ;;
        *) echo "# $status $desc $detail" ;;
        esac
    done <"$1"
}

# run_client NAME SCRIPT [VAR=VALUE...]: run a client script under Node 22,
# at most two minutes, and print its checks as TAP.
run_client() {
    local name=$1 script=$2 rc
    shift 2
    (cd "$T/sdk" && env "$@" timeout -k 5 120 "$NODE_BIN" "$script") >"$T/$name.out" 2>"$T/$name.err"
    rc=$?
    tap_lines "$T/$name.out"
    is "$rc" 0 "$name: the client ran to the end"
    [ "$rc" = 0 ] || sed 's/^/# /' "$T/$name.err" | tail -n 20
}

# ---- the fixture: a receiver, a target, a tool, three clients, a relay, the front door -----
receiver_start r --dedupe
target_add refund "http://127.0.0.1:$RECV_PORT_r/refunds" timeout_ms=2000
sql "INSERT INTO outbox.mcp_tools (tool, target, description, input_schema) VALUES
       ('refund', 'refund', 'Refund an amount to an account, once per key.',
        '{\"type\": \"object\", \"properties\": {\"account\": {\"type\": \"integer\"},
          \"amount_cents\": {\"type\": \"integer\", \"minimum\": 1}}, \"required\": [\"account\", \"amount_cents\"],
          \"additionalProperties\": false}')" >/dev/null
token() { head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
TOKEN_LEGACY=$(token)
TOKEN_MODERN=$(token)
TOKEN_CUT=$(token)
sql "SELECT outbox.mcp_client('sdk-legacy', '$TOKEN_LEGACY'), outbox.mcp_client('sdk-modern', '$TOKEN_MODERN'),
            outbox.mcp_client('sdk-cut', '$TOKEN_CUT', ARRAY['refund'])" >/dev/null
sql "CREATE ROLE front_door LOGIN; GRANT outbox_mcp TO front_door" >/dev/null

relay_start a --poll-interval-ms 200
mcp_start --mcp-wait-ms 10000
ok "the front door is ready (port $MCP_PORT)" test -n "$MCP_PORT"
MCP_URL=http://127.0.0.1:$MCP_PORT/mcp

# ---- the two official clients --------------------------------------------------------------
run_client "SDK 1.32 (2025-11-25)" legacy_client.mjs MCP_URL="$MCP_URL" MCP_TOKEN="$TOKEN_LEGACY" KEY_PREFIX=run-1:
run_client "client 2.x (2026-07-28)" modern_client.mjs MCP_URL="$MCP_URL" MCP_TOKEN="$TOKEN_MODERN" KEY_PREFIX=run-2:

# ---- the founding scenario: the answer is lost, the call is not repeated -------------------
python3 "$ITEST_ROOT/tests/mcp/cut_proxy.py" "$MCP_PORT" 200 >"$T/proxy.log" 2>"$T/proxy.err" &
ITEST_PIDS+=("$!")
PROXY_PORT=""
for i in $(seq 1 100); do
    PROXY_PORT=$(sed -n 's/^listening 127.0.0.1://p' "$T/proxy.log")
    [ -n "$PROXY_PORT" ] && break
    sleep 0.05
done
[ -n "$PROXY_PORT" ] || bail "the cutting proxy did not start"
CUT_KEY=refund-run-7f3a:step-4
run_client "cut" cut_client.mjs MCP_URL="http://127.0.0.1:$PROXY_PORT/mcp" MCP_TOKEN="$TOKEN_CUT" KEY="$CUT_KEY"
sed 's/^/# proxy: /' "$T/proxy.log"
is "$(grep -c "^cut tools/call $CUT_KEY 200 " "$T/proxy.log")" 1 \
    "the proxy read the front door's whole answer (200) to the first call and reset the client instead"
is "$(grep -c "^pass tools/call $CUT_KEY 200$" "$T/proxy.log")" 1 "the second call's answer was passed on"
NS_CUT="mcp:sdk-cut:$CUT_KEY"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE key = '$NS_CUT'")" 1 "one intent for the key in the database"
is "$(sql "SELECT count(*) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
            WHERE i.key = '$NS_CUT'")" 1 "one delivery attempt for it"
is "$(sql "SELECT state FROM outbox.intents WHERE key = '$NS_CUT'")" succeeded "and it is succeeded"

# ---- the README's host step, as written there, through the same proxy ------------------------
python3 - "$ITEST_ROOT/README.md" "$T/sdk/refund-step.mjs" <<'PY' || bail "README.md has no host step block"
import re, sys
text = open(sys.argv[1]).read()
section = text[text.index("## For agents: MCP"):]
block = re.search(r"```js\n(// refund-step\.mjs.*?)```", section, re.S).group(1)
open(sys.argv[2], "w").write(block)
PY
(cd "$T/sdk" && MCP_URL="http://127.0.0.1:$PROXY_PORT/mcp" OUTBOX_MCP_TOKEN="$TOKEN_CUT" RUN_ID=readme-run \
    timeout -k 5 120 "$NODE_BIN" refund-step.mjs) >"$T/readme-step.out" 2>"$T/readme-step.err"
is "$?" 0 "the README's host step runs"
ok "and prints the outcome: succeeded, the target acted" \
    grep -q '^succeeded succeeded: the target acted' "$T/readme-step.out"
is "$(grep -c '^cut tools/call readme-run:step-4 200 ' "$T/proxy.log")" 1 \
    "its first answer was lost (the proxy reset the connection after the front door answered)"
is "$(sql "SELECT count(*) || ' ' || max(attempts) FROM outbox.intents WHERE key = 'mcp:sdk-cut:readme-run:step-4'")" \
    "1 1" "one intent, sent once"

# ---- one effect per key at the receiver ----------------------------------------------------
effects_table r
is "$(sql "SELECT string_agg(key || '=' || n, ' ' ORDER BY key) FROM effects")" \
    "mcp:sdk-cut:readme-run:step-4=1 mcp:sdk-cut:$CUT_KEY=1 mcp:sdk-legacy:run-1:1=1 mcp:sdk-legacy:run-1:task=1 mcp:sdk-modern:run-2:1=1 mcp:sdk-modern:run-2:auto=1" \
    "the receiver acted once per key, under each client's namespace, and on nothing else"
is "$(sql "SELECT count(*) FROM outbox.intents i LEFT JOIN effects e ON e.key = i.key
            WHERE e.n IS DISTINCT FROM 1")" 0 "every intent in the database had exactly one effect"
is "$(receiver_stat r keys_with_duplicate_effects)" 0 "no key had two effects"

kill -TERM "$MCP_PID"
for i in $(seq 1 100); do kill -0 "$MCP_PID" 2>/dev/null || break; sleep 0.1; done
wait "$MCP_PID"
is "$?" 0 "the front door stops on SIGTERM with exit 0 (sanitizers clean)"
ok "the relay's log has no sanitizer report" relay_logs_clean
itest_done
