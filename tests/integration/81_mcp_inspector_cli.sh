#!/usr/bin/env bash
# The official MCP Inspector's command line (npm @modelcontextprotocol/inspector
# 2.x, `--cli`; issue 37, item 4) against the front door, as a person checks a
# server by hand: tools/list and tools/call over stdio (the Inspector spawns
# `outbox-relay mcp --stdio`, its token passed with -e) and over HTTP (the
# front door's POST /mcp with a bearer token). The key rides in the call's
# _meta (--tool-metadata); the same key again returns the saved outcome; one
# effect per key at the receiver. Node 22 and the Inspector come from
# tests/lib/install-node.sh (no network: this scenario fails, it does not skip).
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

ok "Node 22 and the official MCP packages are installed (tests/lib/install-node.sh)" \
    bash -c "'$ITEST_ROOT/tests/lib/install-node.sh' 2>'$T/install-node.err'"
[ "$TAP_FAILED" = 0 ] || { sed 's/^/# /' "$T/install-node.err"; bail "no Node 22 or no MCP packages: cannot run"; }
. "$ITEST_ROOT/tests/lib/install-node.sh"
INSPECTOR=$SDK_DIR/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js
# The Inspector keeps a catalog and secrets under the home directory: a
# throwaway one, so that nothing of this run is written outside $T.
mkdir -p "$T/home"

receiver_start r --dedupe
target_add refund "http://127.0.0.1:$RECV_PORT_r/refunds" timeout_ms=2000
sql "INSERT INTO outbox.mcp_tools (tool, target, description, input_schema) VALUES
       ('refund', 'refund', 'Refund an amount to an account, once per key.',
        '{\"type\": \"object\", \"properties\": {\"account\": {\"type\": \"integer\"},
          \"amount_cents\": {\"type\": \"integer\", \"minimum\": 1}}, \"required\": [\"account\", \"amount_cents\"],
          \"additionalProperties\": false}')" >/dev/null
TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
sql "SELECT outbox.mcp_client('inspector', '$TOKEN')" >/dev/null
relay_start a --poll-interval-ms 200
mcp_start --mcp-wait-ms 10000
MCP_DB="postgresql://front_door@127.0.0.1:$PGPORT/postgres"

# inspector NAME ARGS...: the Inspector's CLI, at most two minutes; its
# stdout in $T/NAME.json, stderr in $T/NAME.err; its exit status.
inspector() {
    local name=$1
    shift
    (cd "$T" && HOME="$T/home" MCP_CATALOG_PATH="$T/home/mcp.json" timeout -k 5 120 \
        "$NODE_BIN" "$INSPECTOR" --cli "$@") >"$T/$name.json" 2>"$T/$name.err"
}
# jq-less reads of the Inspector's JSON output
jget() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@" 2>/dev/null; }
STDIO=(-e "OUTBOX_MCP_TOKEN=$TOKEN" -- "$RELAY_BIN" mcp --stdio --db "$MCP_DB" --mcp-wait-ms 10000)
HTTP=(--transport http --server-url "http://127.0.0.1:$MCP_PORT/mcp" --header "Authorization: Bearer $TOKEN")

for via in stdio http; do
    if [ "$via" = stdio ]; then T_ARGS=("${STDIO[@]}"); else T_ARGS=("${HTTP[@]}"); fi
    inspector "list-$via" --method tools/list "${T_ARGS[@]}"
    is "$?" 0 "$via: the Inspector's tools/list exits 0"
    is "$(jget "$T/list-$via.json" "[t['name'] for t in d['tools']]")" "['refund']" \
        "$via: tools/list shows the refund tool"
    is "$(jget "$T/list-$via.json" "d['tools'][0]['inputSchema']['required']")" "['account', 'amount_cents']" \
        "$via: with its inputSchema"
    for n in 1 2; do
        inspector "call-$via-$n" --method tools/call --tool-name refund --tool-arg account=42 amount_cents=250 \
            --tool-metadata "outbox-relay/idempotency-key=insp-$via" "${T_ARGS[@]}"
        is "$?" 0 "$via: the Inspector's tools/call ($n) exits 0"
        is "$(jget "$T/call-$via-$n.json" "d['structuredContent']['status'] + ' ' + d['structuredContent']['key']")" \
            "succeeded insp-$via" "$via: tools/call ($n) is succeeded, with the key from _meta"
    done
    is "$(jget "$T/call-$via-2.json" "d['structuredContent']")" "$(jget "$T/call-$via-1.json" "d['structuredContent']")" \
        "$via: the second call with the same key returned the saved outcome"
    [ "$TAP_FAILED" = 0 ] || for f in "$T"/*-"$via"*; do echo "# $f:"; head -c 1500 "$f" | sed 's/^/#   /'; echo; done
done
ok "the token is not in what the Inspector printed" bash -c "! grep -q '$TOKEN' '$T'/list-*.json '$T'/call-*.json"

effects_table r
is "$(sql "SELECT string_agg(key || '=' || n, ' ' ORDER BY key) FROM effects")" \
    "mcp:inspector:insp-http=1 mcp:inspector:insp-stdio=1" \
    "the receiver acted once per key, over stdio and over HTTP"
ok "the relay's log has no sanitizer report" relay_logs_clean
itest_done
