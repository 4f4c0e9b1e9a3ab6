#!/usr/bin/env bash
# The MCP front door under the faults that make a call's outcome uncertain:
#   A. a keyless target with no status URL that hangs: the call answers
#      "outcome unknown: needs a person", never failed, isError false; a task
#      of such a call stays working until an operator resolves the intent,
#      then completes with the resolution;
#   B. the front door killed (-9) while a call waits: nothing is lost; a new
#      front door answers the same key with the outcome, one effect;
#   C. the wait is woken by the outcome's commit (NOTIFY), not by the 1 s
#      fallback poll: counted by the front door (outbox_mcp_wakeups_total),
#      never timed. A call during whose wait no recheck woke any call was
#      answered by a wake-up of its NOTIFY, exactly one.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start hang --delay-ms 4000
receiver_start slow --dedupe --delay-ms 1500
receiver_start fast --dedupe
target_add legacy "http://127.0.0.1:$RECV_PORT_hang/act" key_header=NULL timeout_ms=500 max_attempts=3
target_add slow "http://127.0.0.1:$RECV_PORT_slow/act" timeout_ms=5000
target_add fast "http://127.0.0.1:$RECV_PORT_fast/act"
sql "INSERT INTO outbox.mcp_tools (tool, target, description) VALUES
       ('legacy_action', 'legacy', 'A target that cannot deduplicate'),
       ('slow_action', 'slow', 'A slow target'), ('fast_action', 'fast', 'A fast target')" >/dev/null
TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
sql "SELECT outbox.mcp_client('agent', '$TOKEN')" >/dev/null
sql "CREATE ROLE front_door LOGIN; GRANT outbox_mcp TO front_door" >/dev/null

mcp_start() { # mcp_start NAME: a front door, MCP_PORT_<NAME> and MCP_PID_<NAME> set
    "$RELAY_BIN" mcp --db "postgresql://front_door@127.0.0.1:$PGPORT/postgres" --mcp-listen 127.0.0.1:0 \
        --mcp-wait-ms "${2:-3000}" >>"$T/mcp-$1.log" 2>&1 &
    local pid=$! port="" i
    ITEST_PIDS+=("$pid")
    for i in $(seq 1 50); do
        port=$(sed -n 's/.*"event":"mcp_listening".*"port":\([0-9]*\).*/\1/p' "$T/mcp-$1.log" | tail -1)
        [ -n "$port" ] && break
        sleep 0.1
    done
    [ -n "$port" ] || bail "front door $1 did not start"
    wait_cmd 10 curl -sf "http://127.0.0.1:$port/readyz" -o /dev/null || bail "front door $1 not ready"
    printf -v "MCP_PORT_$1" '%s' "$port"
    printf -v "MCP_PID_$1" '%s' "$pid"
}
mcp() { python3 "$ITEST_ROOT/tests/mcp/mcp_call.py" "$@"; }
field() { python3 -c 'import json, sys
doc = json.loads(sys.stdin.read())
for part in sys.argv[1].split("."):
    doc = doc.get(part) if isinstance(doc, dict) else None
print("" if doc is None else (json.dumps(doc) if isinstance(doc, (dict, list, bool)) else doc))' "$1"; }

relay_start a --poll-interval-ms 200
mcp_start one 55000

# ---------------------------------------------------------------- A. unknown, needs a person
out=$(mcp "$MCP_PORT_one" "$TOKEN" call legacy_action "run-A:1" '{"n": 1}')
is "$(field result.structuredContent.status <<<"$out")" reconciling "A: the hanging keyless target: reconciling"
is "$(field result.isError <<<"$out")" false "A: not an error"
# The order of two events, not a duration: the answer came before the wait's
# deadline (55 s, the most --mcp-wait-ms allows), by the front door's own
# count of the call's milliseconds; a call held to the end says 55000 or more.
took=$(grep '"event":"mcp_call".*"tool":"legacy_action"' "$T/mcp-one.log" | head -1 |
    sed -n 's/.*"ms":\([0-9]*\).*/\1/p')
ok "A: answered as soon as the outcome became unknown with nothing to settle it, before its wait ended" \
    test "${took:-55000}" -lt 55000
ok "A: the message says the target cannot be asked, a person will settle it, and not to repeat the action" \
    grep -q 'outcome unknown: needs a person to settle it. The target may have acted, and it cannot be asked whether it did, so a person will check and settle this call. Do not repeat the action; tell the user it may have happened and that a person is confirming it.' <<<"$out"
is "$(receiver_stat hang effects_total)" 1 "A: the target acted once (its answer was lost)"
out=$(mcp "$MCP_PORT_one" "$TOKEN" call legacy_action "run-A:1" '{"n": 1}')
is "$(field result.structuredContent.status <<<"$out")" reconciling "A: calling again with the key: still reconciling"
is "$(receiver_stat hang deliveries_total)" 1 "A: and nothing was sent again to a target that cannot deduplicate"

task=$(mcp "$MCP_PORT_one" "$TOKEN" call legacy_action "run-A:2" '{"n": 2}' --task)
tid=$(field result.task.taskId <<<"$task")
ok "A: a task-augmented call returns its task at once" test -n "$tid"
wait_for 20 "SELECT state FROM outbox.intents WHERE key = 'mcp:agent:run-A:2'" unknown
is "$(mcp "$MCP_PORT_one" "$TOKEN" get "$tid" | field result.status)" working \
    "A: the task of an unknown outcome stays working, never failed"
sql "SELECT outbox.resolve('mcp:agent:run-A:2', 'succeeded', 'checked with the target''s owner')" >/dev/null
is "$(mcp "$MCP_PORT_one" "$TOKEN" get "$tid" | field result.status)" completed \
    "A: once an operator resolves it succeeded, the task is completed"
out=$(mcp "$MCP_PORT_one" "$TOKEN" result "$tid")
is "$(field result.structuredContent.status <<<"$out")" succeeded "A: and tasks/result gives the outcome"

# ---------------------------------------------------------------- B. the front door killed mid-wait
mcp "$MCP_PORT_one" "$TOKEN" call slow_action "run-B:1" '{"n": 1}' >"$T/b1.out" 2>&1 &
caller=$!
wait_for 10 "SELECT count(*) FROM outbox.intents WHERE key = 'mcp:agent:run-B:1'" 1
kill -9 "$MCP_PID_one"
wait "$caller"
is "$?" 1 "B: the caller whose front door died saw its connection fail"
ok "B: the intent was committed before the wait" \
    wait_for 10 "SELECT state FROM outbox.intents WHERE key = 'mcp:agent:run-B:1'" succeeded
mcp_start two 3000
out=$(mcp "$MCP_PORT_two" "$TOKEN" call slow_action "run-B:1" '{"n": 1}')
is "$(field result.structuredContent.status <<<"$out")" succeeded "B: a new front door answers the same key with the outcome"
is "$(receiver_stat slow effects_total)" 1 "B: one effect"

# ---------------------------------------------------------------- C. woken by the commit
# The fallback (every waiting call, once a second) and the NOTIFY both wake a
# call; which one answered is a race only when a recheck happened during the
# wait. So a call counts when the recheck count did not move across it: then
# it was answered by a wake-up, and that wake-up was its NOTIFY. Up to 30
# calls, until 6 such ones (with NOTIFY lost every wait ends by a recheck).
wakeups() { curl -s "http://127.0.0.1:$MCP_PORT_two/metrics" |
    awk -v by="$1" '$1 == "outbox_mcp_wakeups_total{by=\"" by "\"}" { print $2 }'; }
clean=0 raced=0 wrong=0
for i in $(seq 1 30); do
    n0=$(wakeups notify) r0=$(wakeups recheck)
    status=$(mcp "$MCP_PORT_two" "$TOKEN" call fast_action "run-C:$i" '{"n": 1}' | field result.structuredContent.status)
    n1=$(wakeups notify) r1=$(wakeups recheck)
    [ "$status" = succeeded ] || wrong=$((wrong + 1))
    if [ "${r1:-x}" != "${r0:-y}" ]; then
        raced=$((raced + 1))
    elif [ $((n1 - n0)) = 1 ]; then
        clean=$((clean + 1))
    else
        wrong=$((wrong + 1))
        echo "# run-C:$i: answered with $((n1 - n0)) NOTIFY wake-ups and no recheck"
    fi
    [ "$clean" -ge 6 ] && break
    sleep 0.3 # the relay goes idle between calls, as it would with a trickle
done
echo "# $clean calls woken by their NOTIFY alone, $raced with a recheck during the wait"
is "$wrong" 0 "C: every call succeeded, and each answered with no recheck was woken by one NOTIFY"
ok "C: 6 calls were answered by their NOTIFY, not by the fallback recheck" test "$clean" -ge 6

kill -TERM "$MCP_PID_two"
for i in $(seq 1 100); do kill -0 "$MCP_PID_two" 2>/dev/null || break; sleep 0.1; done
wait "$MCP_PID_two"
is "$?" 0 "the front door stops on SIGTERM with exit 0"
itest_done
