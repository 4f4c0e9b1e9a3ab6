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
# per key). Then (step 7, DEMO_MCP_UPSTREAM_CALLS, 40) an upstream MCP server
# behind the front door (an SDK McpServer that acts, then loses the answer
# of each key's first call, and honours the key in _meta): imported with
# mcp-import, called through the front door, one effect per key. Everything
# started is stopped at the end.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
. tests/lib/pgcluster.sh
N=${DEMO_MCP_CALLS:-300}
D=$(mktemp -d /tmp/outbox-demo-mcp.XXXXXX)
chmod 755 "$D"
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

# ---- step 7: an upstream MCP server behind the front door (issue 36) ----------------------------
say "7. an upstream MCP server behind the front door, losing the answer of every key's first call"
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
    RUN=ticket-run timeout 300 "$NODE_BIN" demo_client.mjs) >"$D/client2.out" 2>"$D/client2.err" ||
    { cat "$D/client2.err" >&2; exit 1; }
summary=$(grep '^SUMMARY' "$D/client2.out")
eff() { grep '^effect create_ticket ' "$D/up-effects" || true; }
echo "   upstream: tool calls by the host:     $(sed -n 's/.*calls=\([0-9]*\).*/\1/p' <<<"$summary")"
echo "   upstream: told succeeded:             $(sed -n 's/.*succeeded=\([0-9]*\).*/\1/p' <<<"$summary")"
echo "   upstream: calls it received:          $(grep -c '^call create_ticket ' "$D/up-effects") (each key's first answer lost, sent again)"
echo "   upstream: effects:                    $(eff | wc -l) over $(eff | sort -u | wc -l) keys"
echo "   upstream: keys with a duplicate:      $(eff | sort | uniq -d | wc -l)"
# ---- end of step 7 --------------------------------------------------------------------------------
