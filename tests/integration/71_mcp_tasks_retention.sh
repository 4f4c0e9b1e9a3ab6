#!/usr/bin/env bash
# The MCP front door, second round (issue 35, items 6, 7, 19; migrations/0036), through
# two real front doors logged in as two different logins, both listed in
# outbox.isolated_logins (what the design notes suggest for replicas), each with a
# 55 s --mcp-wait-ms (the most it allows):
#   19. with no relay running, a call answers at once "pending", saying that no relay
#       has claimed it yet; a call held by an approval rule answers at once
#       "awaiting_approval" with the rule that holds it. Both are the answer to the
#       call, not a wait cut short: a 55 s wait that ran out would say neither.
#   7.  a task-augmented call retried through the other replica is the same task (no
#       key_conflict), a plain retry gets the same outcome, and a 2026-07-28 call with
#       the tasks extension gets the same task id through either, never an empty one.
#   6.  a task whose intent retention pruned is gone from tasks/list and tasks/get, and
#       the same key called again gets a new task id (the outcome from the tombstone);
#       a task past its TTL is gone at once, and prune_step deletes it.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start fast --dedupe
target_add fast "http://127.0.0.1:$RECV_PORT_fast/act"
target_add held "http://127.0.0.1:$RECV_PORT_fast/held" "approval_rule='\$.amount > 100'"
sql "INSERT INTO outbox.mcp_tools (tool, target, description) VALUES
       ('pay', 'fast', 'Pay'), ('big_pay', 'held', 'Pay, approved above 100')" >/dev/null
TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
sql "SELECT outbox.mcp_client('agent', '$TOKEN')" >/dev/null
sql "CREATE ROLE door_one LOGIN; CREATE ROLE door_two LOGIN; GRANT outbox_mcp TO door_one, door_two;
     INSERT INTO outbox.isolated_logins (login, note) VALUES ('door_one', 'replica 1'), ('door_two', 'replica 2')" >/dev/null

door_start() { # door_start NAME LOGIN: a front door, DOOR_<NAME> its port
    "$RELAY_BIN" mcp --db "postgresql://$2@127.0.0.1:$PGPORT/postgres" --mcp-listen 127.0.0.1:0 \
        --mcp-wait-ms 55000 >>"$T/mcp-$1.log" 2>&1 &
    local pid=$! port="" i
    ITEST_PIDS+=("$pid")
    for i in $(seq 1 50); do
        port=$(sed -n 's/.*"event":"mcp_listening".*"port":\([0-9]*\).*/\1/p' "$T/mcp-$1.log" | tail -1)
        [ -n "$port" ] && break
        sleep 0.1
    done
    [ -n "$port" ] || bail "front door $1 did not start"
    wait_cmd 10 curl -sf "http://127.0.0.1:$port/readyz" -o /dev/null || bail "front door $1 not ready"
    printf -v "DOOR_$1" '%s' "$port"
}
mcp() { python3 "$ITEST_ROOT/tests/mcp/mcp_call.py" "$@"; }
# tasks/list (2025-11-25), and a 2026-07-28 tools/call declaring the tasks extension
cat >"$T/mcp2.py" <<'EOF'
import http.client, json, sys
port, token, what = int(sys.argv[1]), sys.argv[2], sys.argv[3]
headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
           "Authorization": "Bearer " + token}
if what == "list":
    params = {"cursor": sys.argv[4]} if len(sys.argv) > 4 else {}
    msg = {"jsonrpc": "2.0", "id": 1, "method": "tasks/list", "params": params}
    headers["MCP-Protocol-Version"] = "2025-11-25"
else:  # modern TOOL KEY ARGS
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
            "io.modelcontextprotocol/clientInfo": {"name": "itest71", "version": "1"},
            "outbox-relay/idempotency-key": sys.argv[5]}
    msg = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
           "params": {"_meta": meta, "name": sys.argv[4], "arguments": json.loads(sys.argv[6])}}
    headers.update({"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": sys.argv[4]})
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=90)
conn.request("POST", "/mcp", body=json.dumps(msg), headers=headers)
print(conn.getresponse().read().decode())
EOF
mcp2() { python3 "$T/mcp2.py" "$@"; }
field() { python3 -c 'import json, sys
doc = json.loads(sys.stdin.read())
for part in sys.argv[1].split("."):
    doc = doc[int(part)] if isinstance(doc, list) else (doc.get(part) if isinstance(doc, dict) else None)
print("" if doc is None else (json.dumps(doc) if isinstance(doc, (dict, list, bool)) else doc))' "$1"; }
task_ids() { python3 -c 'import json, sys; print(" ".join(t["taskId"] for t in json.load(sys.stdin)["result"]["tasks"]))'; }
lacks() { local s; s=$(cat); [ -n "$s" ] && ! grep -qw "$1" <<<"$s"; }
all_ids() { python3 -c 'import json, sys
tasks = json.load(sys.stdin)["result"]["tasks"]
sys.exit(0 if tasks and all(t["taskId"] and t["createdAt"] for t in tasks) else 1)'; }

door_start one door_one
door_start two door_two

# ---------------------------------------------------------------- 19. no relay, held
is "$(sql "SELECT count(*) FROM outbox.relays")" 0 "19: (no relay has ever run)"
out=$(mcp "$DOOR_one" "$TOKEN" call pay "nr:1" '{"amount": 5}')
is "$(field result.structuredContent.status <<<"$out")" pending "19: with no relay running, the call answers pending"
is "$(field result.structuredContent.message <<<"$out")" \
    "not yet confirmed: no relay has claimed it yet: none is running. Wait, then ask for the outcome of this same call; do not repeat the action; tell the user it is being confirmed." \
    "19: saying that no relay has claimed it yet, and what the model should do"
ok "19: the text block starts with that sentence, then the JSON" \
    test "$(field result.content.0.text <<<"$out" | head -1)" = "$(field result.structuredContent.message <<<"$out")"
out=$(mcp "$DOOR_two" "$TOKEN" call big_pay "held:1" '{"amount": 500}')
is "$(field result.structuredContent.status <<<"$out")" awaiting_approval "19: a held call answers awaiting_approval"
is "$(field result.structuredContent.message <<<"$out")" \
    "not yet confirmed: held until a person approves it (rule \$.amount > 100: the rule is true for this payload). Wait, then ask for the outcome of this same call; do not repeat the action; tell the user it is waiting for a person's approval." \
    "19: with the rule that holds it"
is "$(field result.isError <<<"$out")" false "19: not an error"

# ---------------------------------------------------------------- 7. the other replica
task=$(mcp "$DOOR_one" "$TOKEN" call big_pay "iso:1" '{"amount": 200}' --task)
tid=$(field result.task.taskId <<<"$task")
ok "7: a task-augmented call through replica one returns its task" test -n "$tid"
again=$(mcp "$DOOR_two" "$TOKEN" call big_pay "iso:1" '{"amount": 200}' --task)
is "$(field result.task.taskId <<<"$again")" "$tid" "7: retried through replica two (another isolated login): the same task"
is "$(field result.structuredContent.status <<<"$again")" "" "7: not a key_conflict"
is "$(mcp "$DOOR_two" "$TOKEN" get "$tid" | field result.status)" working "7: tasks/get of it through replica two: working"
plain=$(mcp "$DOOR_two" "$TOKEN" call big_pay "iso:1" '{"amount": 200}')
is "$(field result.structuredContent.status <<<"$plain")" awaiting_approval \
    "7: a plain retry through replica two: its outcome, not a key_conflict"
m1=$(mcp2 "$DOOR_one" "$TOKEN" modern big_pay "iso:2" '{"amount": 300}')
mtid=$(field result.taskId <<<"$m1")
is "$(field result.resultType <<<"$m1")" task "7: 2026-07-28 with the tasks extension, a held call: a task"
ok "7: with an id" test -n "$mtid"
m2=$(mcp2 "$DOOR_two" "$TOKEN" modern big_pay "iso:2" '{"amount": 300}')
is "$(field result.taskId <<<"$m2")" "$mtid" "7: the same call through replica two: the same task id, not an empty one"
is "$(field result.status <<<"$m2")" working "7: working"

# ---------------------------------------------------------------- 6. retention and TTL
relay_start a --poll-interval-ms 200
wait_for 20 "SELECT state FROM outbox.intents WHERE key = 'mcp:agent:nr:1'" succeeded ||
    bail "the relay did not deliver nr:1"
task=$(mcp "$DOOR_one" "$TOKEN" call pay "ret:1" '{"amount": 7}' --task)
t1=$(field result.task.taskId <<<"$task")
wait_for 20 "SELECT state FROM outbox.intents WHERE key = 'mcp:agent:ret:1'" succeeded ||
    bail "the relay did not deliver ret:1"
ok "6: tasks/list shows the task" grep -qw "$t1" <<<"$(mcp2 "$DOOR_two" "$TOKEN" list | task_ids)"
sql "UPDATE outbox.targets SET retain_for = '1 second' WHERE name = 'fast';
     UPDATE outbox.intents SET updated_at = now() - interval '1 hour' WHERE key = 'mcp:agent:ret:1'" >/dev/null
is "$(sql "SELECT pruned > 0 FROM outbox.prune_step(1000)")" t "6: (retention prunes its intent)"
is "$(sql "SELECT count(*) FROM outbox.tombstones WHERE key_hash = outbox.key_hash('mcp:agent:ret:1')")" 1 \
    "6: (its key is remembered by a tombstone)"
ok "6: once pruned, tasks/list does not show it" lacks "$t1" <<<"$(mcp2 "$DOOR_one" "$TOKEN" list | task_ids)"
ok "6: and every row of tasks/list has its id and time" all_ids <<<"$(mcp2 "$DOOR_two" "$TOKEN" list)"
is "$(mcp "$DOOR_one" "$TOKEN" get "$t1" | field error.message)" "Invalid params: no such task" "6: tasks/get: no such task"
again=$(mcp "$DOOR_two" "$TOKEN" call pay "ret:1" '{"amount": 7}' --task)
t1b=$(field result.task.taskId <<<"$again")
ok "6: the same key called again gets a new task id" test -n "$t1b" -a "$t1b" != "$t1"
is "$(mcp "$DOOR_two" "$TOKEN" result "$t1b" | field result.structuredContent.status)" succeeded \
    "6: whose result is the remembered outcome"
is "$(receiver_stat fast effects_total)" 2 "6: and nothing was sent again (two effects: nr:1 and ret:1)"

task=$(mcp "$DOOR_one" "$TOKEN" call pay "ttl:1" '{"amount": 8}' --task)
t2=$(field result.task.taskId <<<"$task")
is "$(sql "SELECT ttl_ms || ' ' || (expires_at - created_at)::text FROM outbox.mcp_tasks WHERE task_id = '$t2'")" \
    "600000 00:10:00" "6: a task's TTL is kept as its expiry"
sql "UPDATE outbox.mcp_tasks SET created_at = created_at - interval '11 minutes', expires_at = expires_at - interval '11 minutes'
      WHERE task_id = '$t2'" >/dev/null
ok "6: past its TTL, tasks/list does not show it" lacks "$t2" <<<"$(mcp2 "$DOOR_one" "$TOKEN" list | task_ids)"
is "$(mcp "$DOOR_one" "$TOKEN" get "$t2" | field error.message)" "Invalid params: no such task" \
    "6: past its TTL, tasks/get: no such task"
sql "SELECT outbox.prune_step(1000)" >/dev/null
is "$(sql "SELECT count(*) FROM outbox.mcp_tasks WHERE task_id = '$t2'")" 0 "6: prune_step deleted it"

ok "no sanitizer report in the relay's log" relay_logs_clean
ok "no sanitizer report in the front doors' logs" bash -c "! grep -lE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' '$T'/mcp-*.log"
itest_done
