#!/usr/bin/env bash
# The front door enqueues the calls that wait for a database connection
# together, in one statement (outbox.mcp_calls, migration 0046;
# relay/mcp/mcp_admission.c; issue 40, item 2). One database connection and
# calls that arrive at once (tests/mcp/admission_load.py: all sent, then all
# read): the first goes alone, the others wait in the fair queue together.
#   A. 24 calls: enqueued in batches (outbox_mcp_enqueue_batches_total ok,
#      outbox_mcp_enqueue_batched_calls_total), no batch failed, every one
#      answered 200 and succeeded, one intent and one attempt per key;
#   B. 24 calls, the last with arguments over the target's max_payload_bytes
#      (which the front door does not know: the database refuses it, OR006).
#      A batch that holds it fails and its calls go again alone: the big one
#      is refused with nothing enqueued, the 23 others succeeded once each,
#      and the front door logged no database error. (Whether it was in a
#      batch depends on which call came first: the counts are printed.)
# The batch's semantics call by call (answers, a failed batch keeps
# nothing): tests/sql/34_mcp_calls.sql.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start fast --dedupe
target_add fast "http://127.0.0.1:$RECV_PORT_fast/act" max_payload_bytes=2000
sql "INSERT INTO outbox.mcp_tools (tool, target, description) VALUES ('act', 'fast', 'A target that answers at once')" >/dev/null
TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
sql "SELECT outbox.mcp_client('agent', '$TOKEN')" >/dev/null
load() { python3 "$ITEST_ROOT/tests/mcp/admission_load.py" "$@"; }
mcp() { python3 "$ITEST_ROOT/tests/mcp/mcp_call.py" "$@"; }
metric() { # metric 'NAME{LABELS}': the front door's sample (0 when absent)
    curl -s "http://127.0.0.1:$MCP_PORT/metrics" | awk -v n="$1" '$1 == n { v = $2 } END { print v + 0 }'
}
relay_start a --poll-interval-ms 200
mcp_start --mcp-db-connections 1 --mcp-wait-ms 10000
mcp "$MCP_PORT" "$TOKEN" call act warm '{}' | grep -q '"status": *"succeeded"' || bail "the warm-up call did not succeed"
two_hundreds() { python3 -c 'import json, sys; print(json.load(sys.stdin).get("200", 0))' <"$1"; }

# ---------------------------------------------------------------- A. batches
load calls "$MCP_PORT" "$TOKEN" act 24 300 a >"$T/a.out"
echo "# A: answers $(cat "$T/a.out"); batches $(metric 'outbox_mcp_enqueue_batches_total{result="ok"}'), calls in them $(metric outbox_mcp_enqueue_batched_calls_total)"
ok "A: at least one batch went" test "$(metric 'outbox_mcp_enqueue_batches_total{result="ok"}')" -ge 1
ok "A: calls were enqueued in batches" test "$(metric outbox_mcp_enqueue_batched_calls_total)" -ge 2
is "$(metric 'outbox_mcp_enqueue_batches_total{result="failed"}')" 0 "A: no batch failed"
is "$(two_hundreds "$T/a.out")" 24 "A: 24 answers of 200"
wait_for 20 "SELECT count(*) FROM outbox.intents WHERE key LIKE 'mcp:agent:a:%' AND state = 'succeeded'" 24 || true
is "$(sql "SELECT count(*) FROM outbox.intents WHERE key LIKE 'mcp:agent:a:%' AND state = 'succeeded'")" 24 \
    "A: one intent per key, each succeeded"
is "$(sql "SELECT count(*) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
            WHERE i.key LIKE 'mcp:agent:a:%'")" 24 "A: one attempt per key"

# ---------------------------------------------------------------- B. one call refused
ADMISSION_LAST_BYTES=3000 load calls "$MCP_PORT" "$TOKEN" act 24 300 b >"$T/b.out"
echo "# B: answers $(cat "$T/b.out"); failed batches $(metric 'outbox_mcp_enqueue_batches_total{result="failed"}')"
is "$(two_hundreds "$T/b.out")" 24 "B: 24 answers of 200"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE key = 'mcp:agent:b:24'")" 0 \
    "B: the call over max_payload_bytes was not enqueued"
ok "B: it was answered refused" grep -q '"mcp_call".*"key":"b:24","status":"refused"' "$T/mcp.log"
wait_for 20 "SELECT count(*) FROM outbox.intents WHERE key LIKE 'mcp:agent:b:%' AND state = 'succeeded'" 23 || true
is "$(sql "SELECT count(*) FROM outbox.intents WHERE key LIKE 'mcp:agent:b:%' AND state = 'succeeded'")" 23 \
    "B: the other 23 were enqueued once each and succeeded"
ok "A and B: the front door logged no database error" bash -c "! grep -q mcp_db_error '$T/mcp.log'"

itest_done
