#!/usr/bin/env bash
# Who may use the front door's memory, connections and database
# (relay/mcp/mcp_admission.c, relay/lib/http_server.c):
#   A. 30 concurrent 1 MB bodies with a made-up token: all 401, the front
#      door's peak RSS (VmHWM, /proc) stays under the stated bound and far
#      from the 64 MiB limit deploy/ ships (before: 436-554 MB), and the
#      database was asked about the token once;
#   B. 100 concurrent calls of 600 KB with a valid token that wait for their
#      outcome: each is answered, or refused with 429/503 and Retry-After;
#      the peak stays under the bound, and RSS comes back down after;
#   C. 100 requests with a wrong token cost the database one statement
#      (pg_stat_statements), write at most a line a second (the rest counted
#      in mcp_refusals_suppressed lines, which add up to the metric), and a
#      notification or a JSON-RPC response with it gets 401, not 202;
#   D. one client with 60 calls queued does not starve another: the other's
#      call reaches the database among the first (the intents' ids), not
#      after the 60; and past --mcp-client-calls a client gets 429;
#   E. a flood of silent sockets past --mcp-max-connections evicts its own
#      oldest, another client is still answered, the shedding is counted and
#      logged; a connection that sends nothing is closed after
#      --mcp-header-timeout-ms.
# Memory is measured on the -O2 build (ADM_RELAY_BIN), not the sanitizer
# build, whose allocator keeps freed memory on purpose.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup shared_preload_libraries=pg_stat_statements pg_stat_statements.track=all
ADM_RELAY_BIN=${ADM_RELAY_BIN:-$ITEST_ROOT/build/outbox-relay}
sql "CREATE EXTENSION pg_stat_statements" >/dev/null

receiver_start fast --dedupe
target_add fast "http://127.0.0.1:$RECV_PORT_fast/act"
target_add nowhere "http://127.0.0.1:9/act"
sql "INSERT INTO outbox.mcp_tools (tool, target, description) VALUES
       ('fast_action', 'fast', 'A target that answers at once'),
       ('held_action', 'nowhere', 'Nothing delivers it in this test: its calls wait')" >/dev/null
TOKEN_A=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
TOKEN_B=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
sql "SELECT outbox.mcp_client('agent-a', '$TOKEN_A'), outbox.mcp_client('agent-b', '$TOKEN_B')" >/dev/null
load() { python3 "$ITEST_ROOT/tests/mcp/admission_load.py" "$@"; }
mcp() { python3 "$ITEST_ROOT/tests/mcp/mcp_call.py" "$@"; }
status_of() { # status_of KEY → what the JSON of load's counts says for KEY (0 when absent)
    python3 -c 'import json, sys; print(json.loads(sys.argv[1]).get(sys.argv[2], 0))' "$1" "$2"
}
kb_of() { awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status"; }
metric() { curl -s "http://127.0.0.1:$MCP_PORT/metrics" | awk -v n="$1" 'index($0, n " ") == 1 { print $2 }'; }
front_door_statements() { # calls of every statement the front door's login ran
    sql "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid
          WHERE r.rolname = 'front_door'"
}
DOORS=0
door_start() { # mcp_start with a log of its own ($T/mcp.log; the previous ones kept as mcp-N.log)
    DOORS=$((DOORS + 1))
    [ ! -e "$T/mcp.log" ] || mv "$T/mcp.log" "$T/mcp-$DOORS.log"
    mcp_start "$@"
}
stop_front_door() {
    kill -TERM "$MCP_PID"
    for i in $(seq 1 100); do kill -0 "$MCP_PID" 2>/dev/null || break; sleep 0.1; done
    wait "$MCP_PID"
}
# The bound deploy/README.md states: 12 MiB at rest + 1.25 x --mcp-memory-bytes
# + 80 KiB x --mcp-max-connections (defaults: 20 MiB, 256) = 57 MiB.
BOUND_KB=$(((12 + 25 + 20) * 1024))

# ---------------------------------------------------------------- A. strangers' bodies
RELAY_BIN_SAVED=$RELAY_BIN
RELAY_BIN=$ADM_RELAY_BIN door_start --mcp-wait-ms 3000
at_rest=$(kb_of "$MCP_PID" VmRSS)
out=$(load calls "$MCP_PORT" "$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')" fast_action 30 1000000 a)
echo "# 30 x 1 MB, a made-up token: $out; RSS at rest $at_rest kB"
is "$(status_of "$out" 401)" 30 "A: 30 concurrent 1 MB bodies with a made-up token: all 401"
peak=$(kb_of "$MCP_PID" VmHWM)
echo "# peak RSS of the front door: $peak kB (bound $BOUND_KB kB; the shipped limit is 65536 kB)"
ok "A: the front door's peak RSS ($peak kB) stays under the bound ($BOUND_KB kB)" test "$peak" -lt "$BOUND_KB"
ok "A: and under 24 MiB: the bodies were never read ($peak kB)" test "$peak" -lt $((24 * 1024))
is "$(metric outbox_mcp_token_questions_total)" 1 "A: the database was asked about the made-up token once"

# ---------------------------------------------------------------- B. waiting calls of a client
out=$(load calls "$MCP_PORT" "$TOKEN_A" held_action 100 600000 b strings)
echo "# 100 x 600 KB waiting calls, a valid token: $out"
answered=$(status_of "$out" 200)
refused=$(($(status_of "$out" 429) + $(status_of "$out" 503)))
is "$((answered + refused))" 100 "B: every call is answered (200: $answered) or refused with 429/503 ($refused)"
is "$(status_of "$out" retry_after)" "$refused" "B: every refusal carries Retry-After"
ok "B: some calls were let in ($answered)" test "$answered" -ge 1
is "$(sql "SELECT count(*) FROM outbox.intents WHERE key LIKE 'mcp:agent-a:b:%'")" "$answered" \
    "B: the calls answered are the ones enqueued"
peak=$(kb_of "$MCP_PID" VmHWM)
echo "# peak RSS of the front door: $peak kB (bound $BOUND_KB kB)"
ok "B: the front door's peak RSS ($peak kB) stays under the bound ($BOUND_KB kB)" test "$peak" -lt "$BOUND_KB"
sleep 1 # the trim runs once the charges are down
after=$(kb_of "$MCP_PID" VmRSS)
echo "# RSS after the burst: $after kB (at rest before: $at_rest kB; trims: $(metric outbox_mcp_memory_trims_total))"
ok "B: the memory is given back after the burst ($after kB, at rest $at_rest kB)" \
    test "$after" -lt $((at_rest + 12 * 1024))
is "$(metric outbox_mcp_memory_charged_bytes)" 0 "B: nothing is charged once every call is answered"
stop_front_door
is "$?" 0 "A, B: the front door stops on SIGTERM with exit 0"
RELAY_BIN=$RELAY_BIN_SAVED

# ---------------------------------------------------------------- C. a wrong token, 100 times
door_start --mcp-wait-ms 3000
before=$(front_door_statements)
lines_before=$(grep -c '"event":"mcp_refused","reason":"auth"' "$T/mcp.log")
began=$(date +%s)
out=$(load bad "$MCP_PORT" 100)
took=$(($(date +%s) - began + 1)) # whole seconds, rounded up
echo "# 100 pings, a notification and a response with a made-up token: $out"
is "$(status_of "$out" "ping 401")" 100 "C: 100 requests with a wrong token: 401"
is "$(status_of "$out" notification)" 401 "C: a notification with an unknown token: 401, not 202"
is "$(status_of "$out" response)" 401 "C: a JSON-RPC response with an unknown token: 401, not 202"
sleep 1.2 # pg_stat_statements counts a statement once its backend reports; and the log's second passes
cost=$(($(front_door_statements) - before))
echo "# statements the front door ran for them: $cost"
# a verdict is kept 5 s: one question per 5 s begun
ok "C: the wrong token cost the database one statement per 5 s, not one a request ($cost in ${took} s)" \
    test "$cost" -le $((1 + took / 5))
lines=$(($(grep -c '"event":"mcp_refused","reason":"auth"' "$T/mcp.log") - lines_before))
echo "# log lines for 102 refusals: $lines"
ok "C: at most a line a second, not one a request ($lines lines in ${took} s)" test "$lines" -le "$took"
sum_logged() {
    awk '/"event":"mcp_refused","reason":"auth"/ { n++ }
         /"event":"mcp_refusals_suppressed","reason":"auth"/ { match($0, /"count":[0-9]+/); n += substr($0, RSTART + 8, RLENGTH - 8) }
         END { print n + 0 }' "$T/mcp.log"
}
ok "C: the lines and the suppressed counts add up to outbox_mcp_refusals_total{auth}" \
    wait_cmd 5 bash -c "[ \"\$(curl -s http://127.0.0.1:$MCP_PORT/metrics | awk '\$1 == \"outbox_mcp_refusals_total{reason=\\\"auth\\\"}\" { print \$2 }')\" = \"\$(awk '/\"event\":\"mcp_refused\",\"reason\":\"auth\"/ { n++ } /\"event\":\"mcp_refusals_suppressed\",\"reason\":\"auth\"/ { match(\$0, /\"count\":[0-9]+/); n += substr(\$0, RSTART + 8, RLENGTH - 8) } END { print n + 0 }' '$T/mcp.log')\" ]"
echo "# logged + suppressed: $(sum_logged), metric: $(metric 'outbox_mcp_refusals_total{reason="auth"}')"
stop_front_door

# ---------------------------------------------------------------- D. one client, many calls
# The database is made to hold every enqueue (a lock on intents) while
# agent-a's 60 calls pile up, then agent-b calls; once the lock goes, the
# order of the intents' ids is the order the calls reached the database.
relay_start d --poll-interval-ms 200
fairness_round() { # fairness_round PREFIX [mcp options] → sets A_OUT, B_RANK
    local prefix=$1
    shift
    door_start --mcp-wait-ms 2000 "$@"
    mcp "$MCP_PORT" "$TOKEN_B" call fast_action "$prefix-warm" '{}' >/dev/null # agent-b's token and tool known
    psql -X -q -v ON_ERROR_STOP=1 >/dev/null 2>&1 <<SQL &
BEGIN;
LOCK TABLE outbox.intents IN SHARE ROW EXCLUSIVE MODE;
\! sh -c 'while [ ! -e "$T/$prefix.release" ]; do sleep 0.05; done'
COMMIT;
SQL
    local locker=$!
    wait_for 10 "SELECT count(*) > 0 FROM pg_locks WHERE relation = 'outbox.intents'::regclass AND mode = 'ShareRowExclusiveLock' AND granted" t
    load calls "$MCP_PORT" "$TOKEN_A" fast_action 60 2000 "$prefix-a" >"$T/$prefix-a.out" &
    local a_pid=$!
    wait_for 20 "SELECT count(*) FROM pg_stat_activity WHERE usename = 'front_door' AND wait_event_type = 'Lock'" 4
    # agent-a's calls have arrived (queued, or held in a batch on a
    # connection: the per-client gauge counts both)
    wait_cmd 10 bash -c "[ \"\$(curl -s http://127.0.0.1:$MCP_PORT/metrics | awk '\$1 == \"outbox_mcp_client_requests{client=\\\"agent-a\\\"}\" { print \$2 }')\" -ge 20 ] 2>/dev/null" ||
        sleep 2 # (a front door without the gauge: time for the 60 to arrive)
    # agent-b's request has arrived once a statement of its is queued (its
    # token's question, or its tool's: agent-a's are all held, the count
    # moves only for agent-b)
    local queued
    queued=$(metric outbox_mcp_db_queued)
    mcp "$MCP_PORT" "$TOKEN_B" call fast_action "$prefix-b" '{"n": 1}' >"$T/$prefix-b.out" &
    local b_pid=$!
    wait_cmd 5 bash -c "[ \"\$(curl -s http://127.0.0.1:$MCP_PORT/metrics | awk '\$1 == \"outbox_mcp_db_queued\" { print \$2 }')\" -gt '${queued:-0}' ] 2>/dev/null" ||
        sleep 2 # (a front door without the gauge: time for agent-b's request to arrive)
    touch "$T/$prefix.release"
    wait "$locker" "$a_pid" "$b_pid"
    A_OUT=$(cat "$T/$prefix-a.out")
    # The transactions that enqueued before agent-b's, agent-b's included:
    # the calls that waited together go in one statement and one
    # transaction (outbox.mcp_calls), which share created_at.
    B_RANK=$(sql "SELECT count(DISTINCT created_at) FROM outbox.intents
                   WHERE key LIKE 'mcp:agent-_:$prefix-%' AND key NOT LIKE '%-warm'
                     AND id <= (SELECT id FROM outbox.intents WHERE key = 'mcp:agent-b:$prefix-b')")
    stop_front_door
}
OUTBOX_RELAY_MCP_CLIENT_CALLS=100 fairness_round d1 # (as variables: a front door from before them still runs)
echo "# agent-a's 60 calls: $A_OUT; agent-b's intent was enqueued in transaction number $B_RANK"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE key LIKE 'mcp:agent-a:d1-a:%'")" 60 "D: agent-a's 60 calls were all enqueued"
# agent-b's call is three statements in turn (its token's question if its
# verdict expired, its tool, its enqueue); while each runs, the other three
# connections take one statement of agent-a's (one call, or a batch of the
# calls that waited together): 4 held + 3 x 3 = 13 transactions at most.
ok "D: agent-b's call was enqueued in one of the first 16 transactions, not behind agent-a's 60 (number $B_RANK)" \
    test -n "$B_RANK" -a "${B_RANK:-99}" -le 16
ok "D: agent-b's call to a target that answers at once came back succeeded" \
    grep -q '"status": *"succeeded"' "$T/d1-b.out"
OUTBOX_RELAY_MCP_CLIENT_CALLS=32 fairness_round d2
echo "# agent-a's 60 calls with --mcp-client-calls 32: $A_OUT"
is "$(status_of "$A_OUT" 429)" 28 "D: past --mcp-client-calls (32) agent-a's calls get 429"
is "$(status_of "$A_OUT" retry_after)" 28 "D: with Retry-After"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE key LIKE 'mcp:agent-a:d2-a:%'")" 32 "D: and 32 were enqueued"
ok "D: agent-b was not refused: its share is its own (number $B_RANK)" grep -q '"status": *"succeeded"' "$T/d2-b.out"

# ---------------------------------------------------------------- E. silent sockets
OUTBOX_RELAY_MCP_MAX_CONNECTIONS=20 OUTBOX_RELAY_MCP_HEADER_TIMEOUT_MS=1000 door_start
python3 "$ITEST_ROOT/tests/mcp/admission_load.py" silent "$MCP_PORT" 200 >"$T/silent.out" 2>&1 & # (not through a function: $! is python's)
flood=$!
ITEST_PIDS+=("$flood")
wait_cmd 10 grep -q '^open 200' "$T/silent.out"
out=$(curl -s --interface 127.0.0.2 -H "Authorization: Bearer $TOKEN_A" -H 'Content-Type: application/json' \
    -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2025-11-25' \
    -d '{"jsonrpc":"2.0","id":1,"method":"ping"}' "http://127.0.0.1:$MCP_PORT/mcp")
is "$out" '{"jsonrpc":"2.0","id":1,"result":{}}' "E: with 200 silent sockets open from one address, another client is answered"
shed=$(metric 'outbox_mcp_connections_shed_total{reason="silent"}')
ok "E: the silent ones past the cap of 20 were evicted and counted ($shed)" test "${shed:-0}" -ge 180
ok "E: and logged" grep -q '"event":"mcp_connection_shed","reason":"silent"' "$T/mcp.log"
ok "E: the cap holds: at most 20 connections open ($(metric outbox_mcp_connections))" \
    test "$(metric outbox_mcp_connections)" -le 20
ok "E: a connection that sends nothing is closed after --mcp-header-timeout-ms (1 s), not the 30 s keep-alive" \
    wait_cmd 5 bash -c "tail -1 '$T/silent.out' | grep -q '^closed 200'"
kill "$flood"
stop_front_door
is "$?" 0 "the front door stops on SIGTERM with exit 0 (sanitizers clean)"
ok "no sanitizer report in the front door's log" bash -c "! grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' '$T'/mcp*.log"
itest_done
