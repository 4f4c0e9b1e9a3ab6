#!/usr/bin/env bash
# The calls that reach the front door in one turn of its loop are enqueued
# together, with its database connections idle (issue 40, item 2;
# relay/mcp/mcp_admission.c, 5.), and the batch's new calls are one INSERT
# (migrations/0049_mcp_calls_set_based.sql).
# `mcp --stdio` (its four database connections free) reads eight tools/call
# lines written in one write: one read, one turn. Before, a batch formed only
# while every connection was busy: the first three went alone, then a batch of
# five (four transactions); and each call of a batch went through mcp_call and
# enqueue_any. Now:
#   - the eight are enqueued in one transaction (their intents share
#     created_at, the transaction's now());
#   - enqueue_any ran for none of them (track_functions, read once the front
#     door's backends have exited);
#   - each was answered succeeded, and the target acted once per key.
# The tool's schema is read first by a call it refuses (cached a second, so
# that the eight need no look-up of their own).
. "$(dirname "$0")/../lib/itest.sh"
itest_setup track_functions=all

receiver_start fast --dedupe
target_add fast "http://127.0.0.1:$RECV_PORT_fast/act"
sql "INSERT INTO outbox.mcp_tools (tool, target, description, input_schema) VALUES ('act', 'fast', 'Act once per key',
       '{\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\"}}, \"required\": [\"n\"]}')" >/dev/null
TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
sql "SELECT outbox.mcp_client('desktop', '$TOKEN')" >/dev/null
sql "CREATE ROLE front_door LOGIN; GRANT outbox_mcp TO front_door" >/dev/null
relay_start a --poll-interval-ms 200

# answered FROM TO: how many of the ids FROM..TO have an answer line with a result
answered() {
    python3 - "$T/out.jsonl" "$1" "$2" <<'PY'
import json, sys
ids = set()
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if "result" in m or "error" in m:
        ids.add(m.get("id"))
print(sum(1 for i in range(int(sys.argv[2]), int(sys.argv[3]) + 1) if i in ids))
PY
}
wait_answered() { # wait_answered FROM TO COUNT SECONDS
    local i
    for i in $(seq 1 $(($4 * 20))); do
        [ "$(answered "$1" "$2")" -ge "$3" ] && return 0
        sleep 0.05
    done
    return 1
}

for i in 1 2 3 4 5 6 7 8; do
    printf '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"act","arguments":{"n":%d},"_meta":{"outbox-relay/idempotency-key":"t:%d"}}}\n' \
        $((i + 10)) "$i" "$i"
done >"$T/eight.jsonl"
mkfifo "$T/in"
OUTBOX_MCP_TOKEN=$TOKEN timeout -k 5 120 "$RELAY_BIN" mcp --stdio \
    --db "postgresql://front_door@127.0.0.1:$PGPORT/postgres" <"$T/in" >"$T/out.jsonl" 2>"$T/stdio.err" &
door=$!
ITEST_PIDS+=("$door")
exec 3>"$T/in"
printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t94","version":"1"}}}' \
    '{"jsonrpc":"2.0","method":"notifications/initialized"}' \
    '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"act","arguments":{"n":"not a number"},"_meta":{"outbox-relay/idempotency-key":"t:warm"}}}' >&3
# (grep, not python: the eight must follow within the second the schema is cached)
for i in $(seq 1 600); do
    grep -q '"id": *2[,}]' "$T/out.jsonl" && break
    sleep 0.05
done
grep -q '"id": *2[,}]' "$T/out.jsonl" || bail "the front door did not answer the refused call ($(cat "$T/stdio.err"))"
cat "$T/eight.jsonl" >&3 # one write (under PIPE_BUF), so one read
wait_answered 11 18 8 60
is "$(answered 11 18)" 8 "the eight calls were answered"
is "$(python3 -c 'import json, sys; print(sum(1 for l in open(sys.argv[1]) if 11 <= (json.loads(l).get("id") or 0) <= 18 and '"'"'"status":"succeeded"'"'"' in l))' "$T/out.jsonl")" 8 \
    "each succeeded"
exec 3>&-
wait "$door"
is "$?" 0 "end of input: the front door exits 0"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE key LIKE 'mcp:desktop:t:%'")" 8 "eight intents, none for the refused call"
is "$(sql "SELECT count(DISTINCT created_at) FROM outbox.intents WHERE key LIKE 'mcp:desktop:t:%'")" 1 \
    "read in one turn, with the connections free: enqueued in one transaction"
# The backends' statistics are written as they exit, after the front door.
for i in $(seq 1 200); do
    [ "$(sql "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions WHERE funcname = 'mcp_calls'")" -ge 1 ] && break
    sleep 0.05
done
is "$(sql "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions WHERE funcname = 'enqueue_any'")" 0 \
    "the batch's new calls were one INSERT: no call of enqueue_any"
ok "outbox.mcp_calls did it ($(sql "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions WHERE funcname = 'mcp_calls'") calls)" \
    test "$(sql "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions WHERE funcname = 'mcp_calls'")" -ge 1
effects_table fast
is "$(sql "SELECT count(*) || ' ' || sum(n) || ' ' || max(n) FROM effects")" "8 8 1" "the target acted once per key"
itest_done
