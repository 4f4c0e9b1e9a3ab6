#!/usr/bin/env bash
# Every waiter woken by the commit (issue 40, item 5; migrations/0041, part 2;
# relay/admin/admin.c, LONG-POLLS). GET /v1/intents/{key}?wait= on relay W's
# admin port is woken by the NOTIFY outbox_outcomes of the commit that
# changed the key's outcome, not by the once-a-second fallback re-check:
#   - an outcome recorded by another relay (D; W never claimed the intent);
#   - an operator's reject, cancel and resolve (outbox-relay CLI);
#   - an operator's approve (not final: the wait goes on, woken once by it).
# Counted, never timed: W's /metrics says what ended each wait
# (outbox_admin_waits_total{ended_by}) and what woke the waiting requests
# (outbox_admin_wait_wakeups_total{by}). A wait that the fallback happened
# to end first (its tick between the commit and the NOTIFY) is tried again
# with a new key, at most 3 times; ended by the NOTIFY every time is the
# pass. A NOTIFY that names another key wakes no one.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start slow --delay-ms 8000
target_add slow "http://127.0.0.1:$RECV_PORT_slow/act" timeout_ms=30000
target_add appr "http://127.0.0.1:$RECV_PORT_slow/act" timeout_ms=30000 approval_rule="'\$.amount > 100'"

W_PORT=""
w_start() {
    [ ! -e "$T/relay-w.log" ] || mv "$T/relay-w.log" "$T/relay-w-$(date +%s%N).log"
    relay_start w --poll-interval-ms 3600000 --admin-listen 127.0.0.1:0
    W_PORT=$(relay_admin_port w)
    wait_cmd 20 curl -sf "http://127.0.0.1:$W_PORT/readyz" -o /dev/null || bail "relay W is not ready"
}
w_stop() { kill -TERM "$RELAY_PID_w"; relay_wait w 30 >/dev/null; }
metric() { relay_metric "$W_PORT" "$1"; }
ended() { local v; v=$(metric "outbox_admin_waits_total{ended_by=\"$1\"}"); echo "${v:-0}"; }
woken() { local v; v=$(metric "outbox_admin_wait_wakeups_total{by=\"$1\"}"); echo "${v:-0}"; }
woken_more() { [ "$(woken "$1")" -gt "$2" ]; } # woken_more BY N: more than N wake-ups by BY
cli() { "$RELAY_BIN" "$@" --db "$DATABASE_URL" >"$T/cli.out" 2>&1 || { cat "$T/cli.out" >&2; return 1; }; }

# wait_start KEY: a 60 s wait in the background (answer in $T/wait.out, headers
# in $T/wait.h); returns once it is parked (a fallback re-check woke it).
wait_start() {
    local r0
    r0=$(woken recheck)
    rm -f "$T/wait.h" "$T/wait.out"
    curl -s -m 90 -D "$T/wait.h" -o "$T/wait.out" "http://127.0.0.1:$W_PORT/v1/intents/$1?wait=60s" &
    WAIT_PID=$!
    ITEST_PIDS+=("$WAIT_PID")
    wait_cmd 30 woken_more recheck "$r0" || bail "the wait for $1 was never parked"
}
# wait_end: ANSWER="STATUS OUTBOX-WAIT" of the answer (not in a subshell: it waits for curl)
wait_end() {
    wait "$WAIT_PID"
    ANSWER=$(printf '%s %s' "$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("status"))' "$T/wait.out" 2>/dev/null)" \
        "$(tr -d '\r' <"$T/wait.h" | sed -n 's/^Outbox-Wait: //p')")
}

# ---------------------------------------------------------------- another relay's record
# D claims the intent before W starts (W cannot take it: it is leased), and
# records it 8 s later (the receiver's delay) while W holds the wait.
relay_start d --poll-interval-ms 100
result=raced
for try in 1 2 3; do
    sql "SELECT outbox.enqueue('other:$try', 'slow', '{}')" >/dev/null
    ok_claim=$(wait_for 30 "SELECT lease_owner FROM outbox.intents WHERE key = 'other:$try'" relay-d && echo y)
    [ "$ok_claim" = y ] || bail "relay D did not claim other:$try"
    w_start
    wait_start "other:$try"
    wait_end
    answer=$ANSWER
    echo "# other:$try: $answer; ended by notify $(ended notify), recheck $(ended recheck), first $(ended first), record $(ended record)"
    if [ "$answer" = "succeeded final" ] && [ "$(ended notify)" = 1 ] && [ "$(ended recheck)$(ended first)$(ended record)" = 000 ]; then
        result=notify
        break
    fi
    w_stop
done
is "$result" notify "an outcome recorded by another relay ends the wait by its NOTIFY (not the fallback)"
is "$(sql "SELECT attempts FROM outbox.intents WHERE key LIKE 'other:%' AND state = 'succeeded' ORDER BY key DESC LIMIT 1")" 1 \
    "attempted once"
kill -TERM "$RELAY_PID_d"; relay_wait d 30 >/dev/null

# ---------------------------------------------------------------- operators
# operator_case NAME FINAL PREPARE_SQL CLI... : KEY is op:NAME:TRY in both.
operator_case() {
    local name=$1 final=$2 prepare=$3 try key n0 r0 answer
    shift 3
    for try in 1 2 3; do
        key="op:$name:$try"
        sql "${prepare//KEY/$key}" >/dev/null || bail "could not prepare $key"
        wait_start "$key"
        n0=$(ended notify) r0=$(ended recheck)
        local args=("${@//KEY/$key}")
        cli "${args[@]}" || bail "outbox-relay ${args[*]} failed"
        wait_end
        answer=$ANSWER
        echo "# $key: $answer; ended by notify +$(($(ended notify) - n0)), recheck +$(($(ended recheck) - r0))"
        if [ "$(ended recheck)" = "$r0" ]; then
            is "$answer:$(($(ended notify) - n0))" "$final final:1" "$name by an operator ends the wait by its NOTIFY"
            return
        fi
    done
    is "raced 3 times" "$name" "$name by an operator ends the wait by its NOTIFY"
}
[ "$result" = notify ] || w_start
APPR="SELECT outbox.enqueue('KEY', 'appr', '{\"amount\": 500}')"
LATER="SELECT outbox.enqueue('KEY', 'slow', '{}', NULL, now() + interval '1 hour')"
UNKNOWN="$LATER; UPDATE outbox.intents SET state = 'unknown' WHERE key = 'KEY'"
operator_case reject cancelled "$APPR" reject KEY --by op --reason no
operator_case cancel cancelled "$LATER" cancel KEY --reason no
operator_case resolve succeeded "$UNKNOWN" resolve KEY succeeded --note "seen at the target"
is "$(sql "SELECT string_agg(DISTINCT state::text, ',') FROM outbox.intents WHERE key LIKE 'op:%'")" \
    "cancelled,succeeded" "the operators' decisions took"

# Approve: not final, so the wait goes on; its NOTIFY wakes it once.
sql "SELECT outbox.enqueue('op:approve', 'appr', '{\"amount\": 500}')" >/dev/null
wait_start op:approve
w0=$(woken notify)
cli approve op:approve --by op || bail "approve failed"
ok "the approval's NOTIFY wakes the waiting request" wait_cmd 20 woken_more notify "$w0"
ok "and the wait goes on (pending is not final)" kill -0 "$WAIT_PID"
wait_end
is "$ANSWER" "succeeded final" "the wait ends when the approved intent is delivered"

# A NOTIFY naming other keys wakes no one.
sql "SELECT outbox.enqueue('op:quiet', 'slow', '{}', NULL, now() + interval '1 hour')" >/dev/null
wait_start op:quiet
w0=$(woken notify)
sql "SELECT pg_notify('outbox_outcomes', '[\"someone:else\"]')" >/dev/null
sql "SELECT pg_notify('outbox_outcomes', '[\"op:quiet\"]')" >/dev/null
ok "a NOTIFY naming the key wakes it" wait_cmd 20 woken_more notify "$w0"
is "$(($(woken notify) - w0))" 1 "and one naming another key did not"
cli cancel op:quiet --reason done
wait_end
is "$ANSWER" "cancelled final" "cancelled: the wait ends"

w_stop
ok "no sanitizer report" relay_logs_clean
itest_done
