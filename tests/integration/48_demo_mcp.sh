#!/usr/bin/env bash
# `make demo-mcp` (tests/demo_mcp.sh) with 60 calls: it exits 0, every call
# ends succeeded, every 5th answer was lost and retried with its key, the
# receiver acted once per key, and nothing is left running on its directory.
# Then 40 calls of a host with no _meta (key_source 'arguments', issue 37):
# every 5th answer lost, retried with the same arguments, one effect each.
# Step 9 (20 calls): an upstream MCP server behind the front door that loses
# each key's first answer: every call told succeeded, one effect per key.
. "$(dirname "$0")/../lib/itest.sh"
T=$(mktemp -d /tmp/outbox-itest.XXXXXX)
trap 'rm -rf "$T"' EXIT
out=$T/demo.out
(cd "$ITEST_ROOT" && DEMO_MCP_CALLS=60 DEMO_MCP_NO_META_CALLS=40 DEMO_MCP_UPSTREAM_CALLS=20 timeout 600 tests/demo_mcp.sh) >"$out" 2>&1
is "$?" 0 "the MCP demo exits 0"
line() { sed -n "s/^   $1: *//p" "$out"; }
is "$(line 'tool calls made by the host')" 60 "60 tool calls"
is "$(line 'answers lost by the proxy')" 12 "the proxy lost 12 answers (every 5th call's first)"
is "$(line 'retries by the host (same key)')" 12 "the host retried each of them once, with the same key"
is "$(line 'told succeeded in the end')" 60 "every call was told succeeded in the end"
is "$(line 'intents in the outbox')" 60 "one intent per call"
is "$(line 'effects at the receiver')" "60 over 60 keys" "one effect per key"
is "$(line 'keys with a duplicate effect')" 0 "no key with a duplicate effect"
is "$(line 'without _meta, tool calls made')" 40 "without _meta: 40 tool calls"
is "$(line 'without _meta, answers lost')" 8 "without _meta: the proxy lost 8 answers"
is "$(line 'without _meta, retries (same args)')" 8 "without _meta: the host retried each once, with the same arguments"
is "$(line 'without _meta, told succeeded')" 40 "without _meta: every call was told succeeded in the end"
is "$(line 'without _meta, intents')" 40 "without _meta: one intent per call"
is "$(line 'without _meta, effects')" "40 over 40 keys; 0 with a duplicate" "without _meta: one effect per call"
is "$(line 'upstream: tool calls by the host')" 20 "upstream MCP server: 20 tool calls through the front door"
is "$(line 'upstream: told succeeded')" 20 "every one told succeeded"
is "$(line 'upstream: calls it received' | cut -d' ' -f1)" 40 "the upstream received each call twice (the first answer lost)"
is "$(line 'upstream: effects')" "20 over 20 keys" "one effect per key at the upstream"
is "$(line 'upstream: keys with a duplicate')" 0 "no key with a duplicate effect upstream"
dir=$(sed -n 's/.*a throwaway PostgreSQL in \([^,]*\),.*/\1/p' "$out" | sed 's/\x1b\[[0-9;]*m//g')
ok "the demo's directory is removed" test ! -e "$dir"
is "$(pgrep -f -- "-D $dir/pg/data" || true)" "" "no PostgreSQL is left running on it"
[ "$TAP_FAILED" = 0 ] || sed 's/^/# /' "$out"
itest_done
