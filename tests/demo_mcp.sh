#!/usr/bin/env bash
# tests/demo_mcp.sh — `make demo-mcp`: an agent host calling tools over MCP
# through a network that loses answers, and each action executed once.
#
# A throwaway PostgreSQL (migrated by a non-superuser owner), a receiver that
# counts effects per key, a relay, the MCP front door, and the official
# TypeScript SDK client (Node 22, tests/lib/install-node.sh) making
# DEMO_MCP_CALLS (300) tool calls through tests/mcp/cut_proxy.py, which lets
# every 5th call happen and then resets the connection instead of passing the
# answer on. The host retries with the same key. Printed: calls, retries,
# what the client was told after a lost answer, effects at the receiver (one
# per key). Then the same for a host that cannot set _meta (issue 37): a tool
# whose key_source is 'arguments', DEMO_MCP_NO_META_CALLS (100) calls with no
# key at all through a proxy that loses every 5th first answer, the host
# calling again with the same arguments: one effect per call. Then
# (step 9, DEMO_MCP_UPSTREAM_CALLS, 40) an upstream MCP server
# behind the front door (an SDK McpServer that acts, then loses the answer
# of each key's first call, and honours the key in _meta): imported with
# mcp-import, called through the front door, one effect per key. Everything
# started is stopped at the end.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
. tests/lib/pgcluster.sh
N=${DEMO_MCP_CALLS:-300}
NM=${DEMO_MCP_NO_META_CALLS:-100}
D=$(mktemp -d /tmp/outbox-demo-mcp.XXXXXX)
chmod 755 "$D"
# The logs the script reads while their writers start: made first, so that a
# read before a background job has opened its file finds it empty, not missing
# (under set -e a missing file would end the demo).
( cd "$D" && touch recv.out relay.log mcp.log proxy.log proxy2.log up.out up.err )
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    pgcluster_stop "$D/pg"
    rm -rf "$D"
}
trap cleanup EXIT

say() { printf '\033[1m%s\033[0m\n' "$*"; }
q() { psql -X -q -tA -v ON_ERROR_STOP=1 -c "$1"; }
num() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p"; }

say "1. Node 22 and the official MCP SDK (tests/lib/install-node.sh)"
tests/lib/install-node.sh
. tests/lib/install-node.sh

say "2. a throwaway PostgreSQL in $D, migrated by a non-superuser owner"
pgcluster_start "$D/pg"
build/outbox-relay migrate --db "$OWNER_URL" --migrations-dir migrations | tail -1 | sed 's/^/   /'

say "3. a receiver, a tool and a client"
build/test-receiver --dedupe >"$D/recv.out" 2>&1 &
PIDS+=($!)
sleep 0.3
PR=$(sed -n 's/^listening 127.0.0.1://p' "$D/recv.out")
TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
q "INSERT INTO outbox.targets (name, url) VALUES ('payments.refund', 'http://127.0.0.1:$PR/refunds')"
q "INSERT INTO outbox.mcp_tools (tool, target, description, input_schema) VALUES ('refund', 'payments.refund',
     'Refund an amount to an account, once per key.',
     '{\"type\": \"object\", \"properties\": {\"account\": {\"type\": \"integer\"}, \"amount_cents\": {\"type\": \"integer\", \"minimum\": 1}},
       \"required\": [\"account\", \"amount_cents\"], \"additionalProperties\": false}')"
q "SELECT outbox.mcp_client('demo-agent', '$TOKEN', ARRAY['refund'])" >/dev/null
q "CREATE ROLE demo_front_door LOGIN; GRANT outbox_mcp TO demo_front_door"
echo "   tool refund → payments.refund → 127.0.0.1:$PR; client demo-agent (token stored as a SHA-256)"

say "4. the relay, the front door, and a proxy that loses the first answer of every 5th call"
build/outbox-relay run --relay-id demo --admin-listen "" --log-level warn 2>"$D/relay.log" &
PIDS+=($!)
build/outbox-relay mcp --db "postgresql://demo_front_door@127.0.0.1:$PGPORT/postgres" --mcp-listen 127.0.0.1:0 \
    >"$D/mcp.log" 2>&1 &
PIDS+=($!)
MP=""
for _ in $(seq 1 50); do
    MP=$(sed -n 's/.*"event":"mcp_listening".*"port":\([0-9]*\).*/\1/p' "$D/mcp.log" | head -1)
    [ -n "$MP" ] && curl -sf "http://127.0.0.1:$MP/readyz" -o /dev/null && break
    sleep 0.1
done
CUT_EVERY=5 python3 tests/mcp/cut_proxy.py "$MP" 600 >"$D/proxy.log" 2>&1 &
PIDS+=($!)
PP=""
for _ in $(seq 1 50); do
    PP=$(sed -n 's/^listening 127.0.0.1://p' "$D/proxy.log")
    [ -n "$PP" ] && break
    sleep 0.1
done
echo "   front door 127.0.0.1:$MP; the agent host talks to the proxy at 127.0.0.1:$PP"

say "5. the agent host makes $N tool calls (8 at a time), retrying with the same key after an error"
mkdir -p "$D/sdk"
ln -s "$SDK_DIR/node_modules" "$D/sdk/node_modules"
cp tests/mcp/sdk/demo_client.mjs "$D/sdk/"
(cd "$D/sdk" && MCP_URL="http://127.0.0.1:$PP/mcp" MCP_TOKEN="$TOKEN" CALLS="$N" timeout 300 "$NODE_BIN" demo_client.mjs) \
    >"$D/client.out" 2>"$D/client.err" || { cat "$D/client.err" >&2; exit 1; }
awk '!/^SUMMARY/ && n++ < 5' "$D/client.out" # (grep | head: SIGPIPE under pipefail)
echo "   (… $(grep -vc '^SUMMARY' "$D/client.out") calls needed a retry in all)"

say "6. summary"
summary=$(grep '^SUMMARY' "$D/client.out")
stats=$(curl -s "127.0.0.1:$PR/_stats")
echo "   tool calls made by the host:          $(sed -n 's/.*calls=\([0-9]*\).*/\1/p' <<<"$summary")"
echo "   answers lost by the proxy:            $(grep -c '^cut ' "$D/proxy.log")"
echo "   retries by the host (same key):       $(sed -n 's/.*retries=\([0-9]*\).*/\1/p' <<<"$summary")"
echo "   told succeeded in the end:            $(sed -n 's/.*succeeded=\([0-9]*\).*/\1/p' <<<"$summary")"
echo "   intents in the outbox:                $(q "SELECT count(*) FROM outbox.intents")"
echo "   effects at the receiver:              $(num effects_total <<<"$stats") over $(num keys <<<"$stats") keys"
echo "   keys with a duplicate effect:         $(num keys_with_duplicate_effects <<<"$stats")"

say "7. a host that cannot set _meta: tool refund_by_args takes its key from the arguments"
q "INSERT INTO outbox.mcp_tools (tool, target, description, input_schema, key_source) VALUES ('refund_by_args',
     'payments.refund', 'Refund an amount to an account.',
     '{\"type\": \"object\", \"properties\": {\"account\": {\"type\": \"integer\"}, \"amount_cents\": {\"type\": \"integer\", \"minimum\": 1},
       \"reference\": {\"type\": \"string\"}, \"reason\": {\"type\": \"string\", \"x-outbox-volatile\": true}},
       \"required\": [\"account\", \"amount_cents\"], \"additionalProperties\": false}', 'arguments')"
q "UPDATE outbox.mcp_clients SET tools = array_append(tools, 'refund_by_args') WHERE name = 'demo-agent'"
CUT_WITHOUT_KEY=1 CUT_EVERY=5 python3 tests/mcp/cut_proxy.py "$MP" 600 >"$D/proxy2.log" 2>&1 &
PIDS+=($!)
PP2=""
for _ in $(seq 1 50); do
    PP2=$(sed -n 's/^listening 127.0.0.1://p' "$D/proxy2.log")
    [ -n "$PP2" ] && break
    sleep 0.1
done
echo "   key_source 'arguments' (window 10 minutes), \"reason\" marked x-outbox-volatile; a second proxy at 127.0.0.1:$PP2"
cp tests/mcp/sdk/demo_no_meta_client.mjs "$D/sdk/"
(cd "$D/sdk" && MCP_URL="http://127.0.0.1:$PP2/mcp" MCP_TOKEN="$TOKEN" CALLS="$NM" timeout 300 "$NODE_BIN" demo_no_meta_client.mjs) \
    >"$D/client2.out" 2>"$D/client2.err" || { cat "$D/client2.err" >&2; exit 1; }
awk '!/^SUMMARY/ && n++ < 3' "$D/client2.out"
echo "   (… $(grep -vc '^SUMMARY' "$D/client2.out") calls needed a retry in all)"

say "8. summary, without _meta"
summary=$(grep '^SUMMARY' "$D/client2.out")
curl -s "127.0.0.1:$PR/_effects" >"$D/effects.json"
effects=$(python3 -c 'import json,sys; e={k:v for k,v in json.load(open(sys.argv[1])).items() if ":args-" in k}
print(sum(e.values()), "over", len(e), "keys;", sum(1 for v in e.values() if v > 1), "with a duplicate")' "$D/effects.json")
echo "   without _meta, tool calls made:        $(sed -n 's/.*calls=\([0-9]*\).*/\1/p' <<<"$summary")"
echo "   without _meta, answers lost:           $(grep -c '^cut ' "$D/proxy2.log")"
echo "   without _meta, retries (same args):    $(sed -n 's/.*retries=\([0-9]*\).*/\1/p' <<<"$summary")"
echo "   without _meta, told succeeded:         $(sed -n 's/.*succeeded=\([0-9]*\).*/\1/p' <<<"$summary")"
echo "   without _meta, intents:                $(q "SELECT count(*) FROM outbox.intents WHERE key LIKE 'mcp:demo-agent:args-%'")"
echo "   without _meta, effects:                $effects"

# ---- step 9: an upstream MCP server behind the front door (issue 36) ----------------------------
say "9. an upstream MCP server behind the front door, losing the answer of every key's first call"
NU=${DEMO_MCP_UPSTREAM_CALLS:-40}
(cd "$D/sdk" && cp "$ROOT/tests/mcp/sdk/upstream_server.mjs" . &&
    exec env MODE=drop DEDUPE=1 EFFECTS="$D/up-effects" "$NODE_BIN" upstream_server.mjs) >"$D/up.out" 2>"$D/up.err" &
PIDS+=($!)
UP=""
for _ in $(seq 1 100); do
    UP=$(sed -n 's/^listening //p' "$D/up.out")
    [ -n "$UP" ] && break
    sleep 0.1
done
q "INSERT INTO outbox.targets (name, url, protocol, key_header, backoff_base_ms, backoff_cap_ms) VALUES
     ('tickets', 'http://127.0.0.1:$UP/mcp', 'mcp', 'Idempotency-Key', 100, 500)"
q "CREATE ROLE demo_admin LOGIN; GRANT outbox_admin TO demo_admin"
build/outbox-relay mcp-import tickets --only create_ticket \
    --db "postgresql://demo_admin@127.0.0.1:$PGPORT/postgres" 2>&1 | sed 's/^/   /'
q "SELECT outbox.mcp_client('demo-agent-2', '$TOKEN-2', ARRAY['tickets.create_ticket'])" >/dev/null
echo "   an SDK McpServer at 127.0.0.1:$UP (acts, then drops the first answer of each key; honours the key)"
(cd "$D/sdk" && MCP_URL="http://127.0.0.1:$MP/mcp" MCP_TOKEN="$TOKEN-2" CALLS="$NU" TOOL=tickets.create_ticket \
    RUN=ticket-run timeout 300 "$NODE_BIN" demo_client.mjs) >"$D/client3.out" 2>"$D/client3.err" ||
    { cat "$D/client3.err" >&2; exit 1; }
summary=$(grep '^SUMMARY' "$D/client3.out")
eff() { grep '^effect create_ticket ' "$D/up-effects" || true; }
echo "   upstream: tool calls by the host:     $(sed -n 's/.*calls=\([0-9]*\).*/\1/p' <<<"$summary")"
echo "   upstream: told succeeded:             $(sed -n 's/.*succeeded=\([0-9]*\).*/\1/p' <<<"$summary")"
echo "   upstream: calls it received:          $(grep -c '^call create_ticket ' "$D/up-effects") (each key's first answer lost, sent again)"
echo "   upstream: effects:                    $(eff | wc -l) over $(eff | sort -u | wc -l) keys"
echo "   upstream: keys with a duplicate:      $(eff | sort | uniq -d | wc -l)"
# ---- end of step 9 --------------------------------------------------------------------------------
