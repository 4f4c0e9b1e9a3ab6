#!/usr/bin/env bash
# An agent's numbers reach the target as it wrote them (issue 35, item 1).
# Through the MCP front door, a tools/call with 19.99, 0.1, 1e400, -0,
# 9007199254740993, 123456789012345678901234567890 and 12345678901234567.5
# must deliver the body that outbox.enqueue from SQL delivers for the same
# payload (jsonb keeps numerics exactly; PostgreSQL writes 1e400 as its
# digits and -0 as 0, the same values), with the same fingerprint. The tool's
# schema judges exact values: multipleOf 0.01 takes 19.99 and refuses
# 19.991, maximum 12345678901234567.5 refuses 12345678901234567.6 (the same
# double), type integer takes 1e400. An integer above 2^63 is accepted (it
# was -32700), and a number jsonb cannot hold is refused with -32602 saying
# why, before anything is enqueued.
# And back (issue 35): tools/list shows a schema's maximum 19.99 and
# multipleOf 0.01 as written (jansson wrote 19.989999999999998), and a
# target's answer {"refunded": 19.99, "big": 1234...890, "tiny": 1e-7,
# "huge": 1e400} comes back to the agent with those numbers as the target
# wrote them, in structuredContent.response and in the text block, from
# tools/call, tasks/result (2025-11-25) and tasks/get (2026-07-28) (jansson
# rewrote 19.99, and could not read the big ones: the response was a string).
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start r --dedupe
target_add pay "http://127.0.0.1:$RECV_PORT_r/pay"
sql "INSERT INTO outbox.mcp_tools (tool, target, description, input_schema) VALUES
       ('pay', 'pay', 'Pay an amount.',
        '{\"type\": \"object\", \"properties\": {
            \"amount\": {\"type\": \"number\", \"multipleOf\": 0.01},
            \"cap\": {\"maximum\": 12345678901234567.5},
            \"whole\": {\"type\": \"integer\"}}}')" >/dev/null
TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
sql "SELECT outbox.mcp_client('agent', '$TOKEN')" >/dev/null

relay_start a --poll-interval-ms 200
mcp_start --mcp-wait-ms 10000

mcp() { python3 "$ITEST_ROOT/tests/mcp/mcp_call.py" "$@"; }
field() { python3 -c 'import json, sys
doc = json.loads(sys.stdin.read())
for part in sys.argv[1].split("."):
    doc = doc.get(part) if isinstance(doc, dict) else None
print("" if doc is None else (json.dumps(doc) if isinstance(doc, (dict, list, bool)) else doc))' "$1"; }
# the body the receiver got for a key, byte for byte
body_of() { curl -s "http://127.0.0.1:$RECV_PORT_r/_requests/$1" |
    python3 -c 'import json, sys; sys.stdout.write(json.load(sys.stdin)["last_body"])'; }

ARGS='{"amount": 19.99, "tenth": 0.1, "whole": 1e400, "zero": -0, "odd": 9007199254740993,
       "big": 123456789012345678901234567890, "half": 12345678901234567.5, "cap": 12345678901234567.5}'

# ---------------------------------------------------------------- the same body as SQL's
out=$(mcp "$MCP_PORT" "$TOKEN" call pay "run-1:pay" "$ARGS" --raw)
is "$(field result.structuredContent.status <<<"$out")" succeeded \
    "the call with 19.99, 0.1, 1e400, -0, 2^53+1, 10^29-ish, 12345678901234567.5 succeeded"
sql "SELECT outbox.enqueue('sql:pay', 'pay', '$ARGS'::jsonb)" >/dev/null
wait_for 20 "SELECT state FROM outbox.intents WHERE key = 'sql:pay'" succeeded
mcp_body=$(body_of "mcp:agent:run-1:pay")
sql_body=$(body_of "sql:pay")
ok "the target received a body from the front door" test -n "$mcp_body"
is "$mcp_body" "$sql_body" "it is byte for byte what outbox.enqueue from SQL delivers for the same payload"
python3 - "$mcp_body" >"$T/values.out" <<'EOF'
import json, sys
from decimal import Decimal
doc = json.loads(sys.argv[1], parse_float=Decimal, parse_int=Decimal)
want = {"amount": "19.99", "tenth": "0.1", "whole": "1e400", "zero": "0", "odd": "9007199254740993",
        "big": "123456789012345678901234567890", "half": "12345678901234567.5",
        "cap": "12345678901234567.5"}
for k, v in want.items():
    print("%s %s" % (k, "exact" if doc.get(k) == Decimal(v) else "got %s" % doc.get(k)))
EOF
is "$(cat "$T/values.out")" "amount exact
tenth exact
whole exact
zero exact
odd exact
big exact
half exact
cap exact" "every number arrived with its exact value"
ok "19.99 arrived as 19.99, not 19.989999999999998" grep -Eq '"amount": 19.99[,}]' <<<"$mcp_body"
is "$(sql "SELECT (SELECT fingerprint FROM outbox.intents WHERE key = 'mcp:agent:run-1:pay')
               = (SELECT fingerprint FROM outbox.intents WHERE key = 'sql:pay')")" t \
    "the fingerprint is the one of the SQL enqueue"
out=$(mcp "$MCP_PORT" "$TOKEN" call pay "run-1:pay" "$ARGS" --raw)
is "$(field result.structuredContent.status <<<"$out")" succeeded \
    "the same call again is the same call (no key_conflict from a rewritten number)"
is "$(receiver_stat r deliveries_total)" 2 "two deliveries: the front door's and SQL's"


# numbers jansson could read, which it rewrote (19.989999999999998, 0.10000000000000001)
SMALL='{"amount": 19.99, "tenth": 0.1, "half": 12345678901234567.5, "odd": 9007199254740993}'
out=$(mcp "$MCP_PORT" "$TOKEN" call pay "run-1:small" "$SMALL" --raw)
is "$(field result.structuredContent.status <<<"$out")" succeeded "a call with 19.99, 0.1 and 12345678901234567.5 succeeded"
sql "SELECT outbox.enqueue('sql:small', 'pay', '$SMALL'::jsonb)" >/dev/null
wait_for 20 "SELECT state FROM outbox.intents WHERE key = 'sql:small'" succeeded
is "$(body_of "mcp:agent:run-1:small")" "$(body_of "sql:small")" "its body too is what SQL's enqueue delivers"
is "$(body_of "mcp:agent:run-1:small")" \
    '{"odd": 9007199254740993, "half": 12345678901234567.5, "tenth": 0.1, "amount": 19.99}' \
    "19.99 as 19.99, 0.1 as 0.1, 12345678901234567.5 as 12345678901234567.5"

# ---------------------------------------------------------------- the schema judges exact values
out=$(mcp "$MCP_PORT" "$TOKEN" call pay "run-2:pay" '{"amount": 19.991}' --raw)
is "$(field result.structuredContent.status <<<"$out")" invalid_arguments "19.991 is refused"
is "$(field result.structuredContent.message <<<"$out")" \
    "invalid arguments: /amount: must be a multiple of 0.01. Nothing was sent." \
    "with the exact message: not a multiple of 0.01"
out=$(mcp "$MCP_PORT" "$TOKEN" call pay "run-3:pay" '{"amount": 1.00, "cap": 12345678901234567.6}' --raw)
is "$(field result.structuredContent.message <<<"$out")" \
    "invalid arguments: /cap: must be <= 12345678901234567.5. Nothing was sent." \
    "12345678901234567.6 is above 12345678901234567.5 (a double holds both as one number)"
out=$(mcp "$MCP_PORT" "$TOKEN" call pay "run-4:pay" '{"whole": 1.5e400}' --raw)
is "$(field result.structuredContent.status <<<"$out")" succeeded "1.5e400 is an integer"
out=$(mcp "$MCP_PORT" "$TOKEN" call pay "run-5:pay" '{"whole": 1.0000000000000000001}' --raw)
is "$(field result.structuredContent.message <<<"$out")" \
    "invalid arguments: /whole: must be integer, got number. Nothing was sent." \
    "1.0000000000000000001 is not an integer (its double is 1.0)"

# ---------------------------------------------------------------- past 2^63, and past numeric
out=$(mcp "$MCP_PORT" "$TOKEN" call pay "run-6:pay" '{"n": 18446744073709551616}' --raw)
is "$(field result.structuredContent.status <<<"$out")" succeeded "an integer above 2^63 is accepted (it was -32700)"
wait_for 20 "SELECT payload->>'n' FROM outbox.intents WHERE key = 'mcp:agent:run-6:pay'" 18446744073709551616
out=$(mcp "$MCP_PORT" "$TOKEN" call pay "run-7:pay" '{"amount": 1, "tiny": 1e-16384}' --raw)
is "$(field error.code <<<"$out")" -32602 "a number PostgreSQL's numeric cannot hold: -32602"
is "$(field error.message <<<"$out")" \
    "Invalid params: the number 1e-16384 in the arguments cannot be stored: it has more than 16383 digits after the decimal point (PostgreSQL's numeric holds no more). Nothing was sent." \
    "saying which number and why"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE key LIKE 'mcp:agent:run-7:%'")" 0 "and nothing was enqueued"
out=$(mcp "$MCP_PORT" "$TOKEN" call pay "run-8:pay" '{"note": "a\u0000b"}' --raw)
is "$(field error.code <<<"$out")" -32700 "\\u0000, which jsonb cannot store: refused as before (-32700), never -32603"

# ---------------------------------------------------------------- and back to the agent
sql "INSERT INTO outbox.mcp_tools (tool, target, description, input_schema) VALUES
       ('refund', 'pay', 'Refund an amount.',
        '{\"type\": \"object\", \"properties\": {
            \"amount\": {\"type\": \"number\", \"maximum\": 19.99, \"multipleOf\": 0.01}}}')" >/dev/null
# raw: the front door's bytes, as they came (Python's json would read 19.99 as a float)
cat >"$T/raw.py" <<'EOF'
import http.client, json, sys
port, token, what = int(sys.argv[1]), sys.argv[2], sys.argv[3]
headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
           "Authorization": "Bearer " + token}
modern = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
          "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
          "io.modelcontextprotocol/clientInfo": {"name": "itest70", "version": "1"}}
if what == "list":  # tools/list, 2025-11-25
    msg = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers["MCP-Protocol-Version"] = "2025-11-25"
elif what == "list2026":
    msg = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": modern}}
    headers.update({"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"})
else:  # get2026 TASK_ID
    msg = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get",
           "params": {"_meta": modern, "taskId": sys.argv[4]}}
    headers.update({"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tasks/get",
                    "Mcp-Name": sys.argv[4]})
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=90)
conn.request("POST", "/mcp", body=json.dumps(msg), headers=headers)
print(conn.getresponse().read().decode())
EOF
raw() { python3 "$T/raw.py" "$@"; }
# the numbers at a path of an answer, as their texts ("#19.99"), never a float's digits;
# with "text": the JSON of a text block (after its message and line break), its response
texts() { python3 -c 'import json, sys
mark = lambda s: "#" + s
doc = json.loads(sys.stdin.read(), parse_float=mark, parse_int=mark, parse_constant=mark)
for part in sys.argv[1].split("."):
    doc = doc[int(part)] if isinstance(doc, list) else (doc.get(part) if isinstance(doc, dict) else None)
if sys.argv[2:] == ["text"]:
    doc = json.loads(doc.split("\n", 1)[1], parse_float=mark, parse_int=mark)["response"]
print(json.dumps(doc, sort_keys=True))' "$@"; }
schema_of_refund() { python3 -c 'import json, sys
mark = lambda s: "#" + s
doc = json.loads(sys.stdin.read(), parse_float=mark, parse_int=mark)
tool = [t for t in doc["result"]["tools"] if t["name"] == "refund"][0]
print(json.dumps(tool["inputSchema"]["properties"]["amount"], sort_keys=True))'; }
want_schema='{"maximum": "#19.99", "multipleOf": "#0.01", "type": "number"}'
out=$(raw "$MCP_PORT" "$TOKEN" list)
is "$(schema_of_refund <<<"$out")" "$want_schema" \
    "tools/list (2025-11-25) shows maximum 19.99 and multipleOf 0.01 as written"
ok "its bytes say \"maximum\":19.99 and \"multipleOf\":0.01, never 19.989999999999998" \
    bash -c 'grep -qF "\"maximum\":19.99," <<<"$1" && grep -qF "\"multipleOf\":0.01}" <<<"$1" &&
             ! grep -qF 19.98999 <<<"$1"' _ "$out"
out=$(raw "$MCP_PORT" "$TOKEN" list2026)
is "$(schema_of_refund <<<"$out")" "$want_schema" "tools/list (2026-07-28) too"

ANSWER='{\"refunded\": 19.99, \"big\": 123456789012345678901234567890, \"tiny\": 1e-7, \"huge\": 1e400}'
want_response='{"big": "#123456789012345678901234567890", "huge": "#1e400", "refunded": "#19.99", "tiny": "#1e-7"}'
out=$(mcp "$MCP_PORT" "$TOKEN" call refund "back:1" "{\"amount\": 5, \"_answer\": \"$ANSWER\"}" --raw)
is "$(field result.structuredContent.status <<<"$out")" succeeded \
    "a refund whose target answers 19.99, 10^29-ish, 1e-7 and 1e400 succeeded"
is "$(sql "SELECT response_body FROM outbox.intents WHERE key = 'mcp:agent:back:1'")" \
    '{"refunded": 19.99, "big": 123456789012345678901234567890, "tiny": 1e-7, "huge": 1e400}' \
    "(the relay saved the target's answer as it came)"
is "$(texts result.structuredContent.response <<<"$out")" "$want_response" \
    "tools/call: structuredContent.response has the target's numbers as written (an object, not a string)"
is "$(texts result.content.0.text text <<<"$out")" "$want_response" "and so has the text block"
ok "the bytes: compact, in the target's order, and sorted in the text block" \
    bash -c 'grep -qF "\"response\":{\"refunded\":19.99,\"big\":123456789012345678901234567890,\"tiny\":1e-7,\"huge\":1e400}" <<<"$1" &&
             grep -qF "\\\"response\\\":{\\\"big\\\":123456789012345678901234567890,\\\"huge\\\":1e400,\\\"refunded\\\":19.99,\\\"tiny\\\":1e-7}" <<<"$1"' _ "$out"

out=$(mcp "$MCP_PORT" "$TOKEN" call refund "back:small" '{"amount": 1, "_answer": "{\"refunded\": 19.99}"}' --raw)
is "$(texts result.structuredContent.response <<<"$out")" '{"refunded": "#19.99"}' \
    "a target's {\"refunded\": 19.99} (which jansson read, and rewrote as 19.989999999999998) comes back as written"
is "$(texts result.content.0.text text <<<"$out")" '{"refunded": "#19.99"}' "in the text block too"

out=$(mcp "$MCP_PORT" "$TOKEN" call refund "back:2" "{\"amount\": 19.99, \"_answer\": \"$ANSWER\"}" --raw --task)
task=$(field result.task.taskId <<<"$out")
ok "a task-augmented refund (2025-11-25) is a task" test -n "$task"
out=$(mcp "$MCP_PORT" "$TOKEN" result "$task")
is "$(texts result.structuredContent.response <<<"$out")" "$want_response" \
    "tasks/result (2025-11-25): structuredContent.response has the target's numbers as written"
is "$(texts result.content.0.text text <<<"$out")" "$want_response" "and so has its text block"
out=$(raw "$MCP_PORT" "$TOKEN" get2026 "$task")
is "$(field result.status <<<"$out")" completed "tasks/get (2026-07-28) of that task: completed"
is "$(texts result.result.structuredContent.response <<<"$out")" "$want_response" \
    "tasks/get (2026-07-28): its result's structuredContent.response has the target's numbers as written"
is "$(texts result.result.content.0.text text <<<"$out")" "$want_response" "and so has its text block"

ok "the log has no argument" bash -c "! grep -qF -e '19.99' -e '12345678901234567' '$T/mcp.log'"
kill -TERM "$MCP_PID"
for i in $(seq 1 100); do kill -0 "$MCP_PID" 2>/dev/null || break; sleep 0.1; done
wait "$MCP_PID"
is "$?" 0 "the front door stops on SIGTERM with exit 0 (sanitizers clean)"
itest_done
