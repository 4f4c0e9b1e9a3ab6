#!/usr/bin/env bash
# Keys from the arguments, for hosts that cannot send one (issue 37, items 1
# and 4; migration 0040). The official SDK 1.32 client, with no _meta at all,
# calls tools whose key_source is 'arguments' (tests/mcp/sdk/args_client.mjs):
#   - through tests/mcp/cut_proxy.py (CUT_WITHOUT_KEY=1), a real proxy that
#     lets the first call happen, reads the front door's whole answer and
#     resets the client instead: the host sees an error and calls again with
#     the same arguments: one effect at the receiver, one intent, one
#     attempt, and the retry is told the saved outcome;
#   - a volatile property ("x-outbox-volatile": true) reworded: the same
#     action; other arguments, or a new "reference": a new one; two
#     identical calls at once: one intent; a key in _meta wins; the same
#     arguments after a short window (2 s): a second effect; a 'minted' tool
#     still mints per call;
#   - tools/list appends the sentence, naming "reference";
#   - the volatile property still reaches the target (as the first call
#     wrote it);
#   - the upgrade: a 0039 database with server_keys true gets key_source
#     'minted', and false gets 'meta'.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

itest_node_sdk

# ---- the fixture -----------------------------------------------------------------------------
receiver_start r --dedupe
target_add refund "http://127.0.0.1:$RECV_PORT_r/refunds" timeout_ms=2000
SCHEMA='{"type": "object", "properties": {"account": {"type": "integer"},
          "amount_cents": {"type": "integer", "minimum": 1},
          "reference": {"type": "string", "description": "your reference for this refund"},
          "reason": {"type": "string", "x-outbox-volatile": true}},
         "required": ["account", "amount_cents"], "additionalProperties": false}'
sql "INSERT INTO outbox.mcp_tools (tool, target, description, input_schema, key_source) VALUES
       ('refund', 'refund', 'Refund an amount to an account.', '$SCHEMA', 'arguments')" >/dev/null
sql "INSERT INTO outbox.mcp_tools (tool, target, description, input_schema, key_source, argument_window) VALUES
       ('refund_short', 'refund', 'Refund, a short window.', '$SCHEMA', 'arguments', '2 seconds')" >/dev/null
sql "INSERT INTO outbox.mcp_tools (tool, target, description, input_schema, key_source) VALUES
       ('refund_minted', 'refund', 'Refund, minted keys.', '$SCHEMA', 'minted')" >/dev/null
TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
sql "SELECT outbox.mcp_client('no-meta', '$TOKEN')" >/dev/null
relay_start a --poll-interval-ms 200
mcp_start --mcp-wait-ms 10000
MCP_URL=http://127.0.0.1:$MCP_PORT/mcp
CUT_WITHOUT_KEY=1 python3 "$ITEST_ROOT/tests/mcp/cut_proxy.py" "$MCP_PORT" 200 >"$T/proxy.log" 2>"$T/proxy.err" &
ITEST_PIDS+=("$!")
PROXY_PORT=""
for i in $(seq 1 100); do
    PROXY_PORT=$(sed -n 's/^listening 127.0.0.1://p' "$T/proxy.log")
    [ -n "$PROXY_PORT" ] && break
    sleep 0.05
done
[ -n "$PROXY_PORT" ] || bail "the cutting proxy did not start"

# ---- the host -----------------------------------------------------------------------------
(cd "$T/sdk" && PROXY_URL="http://127.0.0.1:$PROXY_PORT/mcp" MCP_URL="$MCP_URL" MCP_TOKEN="$TOKEN" \
    timeout -k 5 180 "$NODE_BIN" args_client.mjs) >"$T/client.out" 2>"$T/client.err"
rc=$?
while IFS=$'\t' read -r status desc detail; do
    case "$status" in
    ok) ok "$desc" true ;;
    "not ok")
        ok "$desc" false
        echo "#   $detail"
        ;;
    told) echo "# the host was told ($desc): $detail" ;;
    esac
done <"$T/client.out"
is "$rc" 0 "the host ran to the end"
[ "$rc" = 0 ] || sed 's/^/# /' "$T/client.err" | tail -n 20
key() { sed -n "s/^key\t$1\t//p" "$T/client.out"; }
sed 's/^/# proxy: /' "$T/proxy.log"

FIRST=$(key first)
is "$(grep -c '^cut tools/call args:refund:' "$T/proxy.log")" 1 \
    "the proxy read the front door's whole answer to the first call and reset the client instead"
is "$(sql "SELECT count(*) || ' ' || max(attempts) || ' ' || min(state::text) FROM outbox.intents
            WHERE key = 'mcp:no-meta:$FIRST'")" "1 1 succeeded" "one intent for the lost answer's call, sent once, succeeded"
is "$(sql "SELECT payload->>'reason' FROM outbox.intents WHERE key = 'mcp:no-meta:$FIRST'")" "customer-asked" \
    "the volatile property reached the target as the first call wrote it"
is "$(sql "SELECT count(DISTINCT key) FROM outbox.intents WHERE key IN
            ('mcp:no-meta:$(key race)', 'mcp:no-meta:$(key other)', 'mcp:no-meta:$(key second)')")" 3 \
    "other arguments, a new reference and the race each made one intent"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE payload @> '{\"account\": 78}'")" 1 \
    "two identical calls at once: one intent"
is "$(sql "SELECT count(*) FROM outbox.mcp_argument_keys WHERE client = 'no-meta' AND tool = 'refund'")" 4 \
    "one argument key per distinct arguments of refund (the _meta call made none)"

# ---- effects at the receiver --------------------------------------------------------------
ok "every intent succeeded" wait_for 60 "SELECT count(*) FROM outbox.intents WHERE state <> 'succeeded'" 0
effects_table r
is "$(sql "SELECT count(*) || ' ' || sum(n) FROM effects")" \
    "$(sql "SELECT count(*) || ' ' || count(*) FROM outbox.intents")" "one effect per intent, and one intent per action"
is "$(sql "SELECT n FROM effects WHERE key = 'mcp:no-meta:$FIRST'")" 1 \
    "the lost answer's call had one effect, its retries none"
is "$(sql "SELECT count(*) FROM effects WHERE key IN ('mcp:no-meta:$(key short1)', 'mcp:no-meta:$(key short2)')")" 2 \
    "the same arguments after the window: a second effect"
is "$(sql "SELECT count(*) FROM effects WHERE key IN ('mcp:no-meta:$(key minted1)', 'mcp:no-meta:$(key minted2)')")" 2 \
    "minted: two calls, two effects"
is "$(sql "SELECT count(*) FROM effects WHERE key = 'mcp:no-meta:host-key-77'")" 1 "the _meta key's call: one effect"
is "$(receiver_stat r keys_with_duplicate_effects)" 0 "no key had two effects"

# ---- the upgrade from 0039 ------------------------------------------------------------------
mkdir -p "$T/m39"
cp "$ITEST_ROOT"/migrations/00[0-2][0-9]_*.sql "$ITEST_ROOT"/migrations/003[0-9]_*.sql "$T/m39/"
psql -X -q -v ON_ERROR_STOP=1 -d postgres -c "CREATE DATABASE up39 OWNER outbox_owner" >/dev/null ||
    bail "cannot create a database"
UURL="postgresql://outbox_owner@127.0.0.1:$PGPORT/up39"
"$RELAY_BIN" migrate --db "$UURL" --migrations-dir "$T/m39" >"$T/m39.log" 2>&1
is "$?" 0 "a database at 0039"
usql() { psql -X -q -tA -v ON_ERROR_STOP=1 -d up39 -c "$1"; }
usql "INSERT INTO outbox.targets (name, url) VALUES ('t', 'http://127.0.0.1:9/');
      INSERT INTO outbox.mcp_tools (tool, target, server_keys) VALUES ('keyed', 't', false), ('mints', 't', true)" >/dev/null
"$RELAY_BIN" migrate --db "$UURL" --migrations-dir "$ITEST_ROOT/migrations" >"$T/m40.log" 2>&1
is "$?" 0 "migrated to 0040"
is "$(usql "SELECT string_agg(tool || '=' || key_source || '/' || server_keys, ' ' ORDER BY tool) FROM outbox.mcp_tools")" \
    "keyed=meta/false mints=minted/true" "server_keys true became key_source minted, false meta (server_keys kept)"

kill -TERM "$MCP_PID"
for i in $(seq 1 100); do kill -0 "$MCP_PID" 2>/dev/null || break; sleep 0.1; done
wait "$MCP_PID"
is "$?" 0 "the front door stops on SIGTERM with exit 0"
ok "the relay's log has no sanitizer report" relay_logs_clean
itest_done
