#!/usr/bin/env bash
# Where a claim's floor goes (migration 0051, two defects of 0047).
#
# One psql session claims as the relay does (one claim per transaction, as
# the relay's login, room 64) while other sessions enqueue; two advisory
# locks the claiming session holds make the other transactions commit only
# when the scenario says, so the sessions' order does not depend on the
# machine's speed. Asserted, by counting the rows each claim takes:
#   1. a backlog behind the floor: one transaction enqueues 320 intents (they
#      share its now() as their next_attempt_at) and commits only after the
#      floor has passed its start by more than the 2 s window the re-reads
#      look back. A sweep finds the backlog and takes a full room; the next
#      four claims, made at once, take a full room each (before 0051 they
#      took nothing: the floor stayed ahead, one room per sweep);
#   2. a late commit while the relay claims more often than every 50 ms: an
#      intent whose transaction commits 0.3 to 1.5 s after its start (behind
#      the floor, inside the window) just after a sweep is taken within 20
#      claims 10 ms apart of its commit (before 0051 only the next sweep,
#      about a second later, took it: each claim moved the floor and so put
#      off the window's re-read).
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

target_add fx "http://127.0.0.1:9/unused"

# The relay's session: one psql, one statement per transaction.
coproc CLAIMER { psql -X -q -tA -v ON_ERROR_STOP=1 "$RELAY_DB_URL" 2>&1; }
ITEST_PIDS+=("$CLAIMER_PID")
# ask SQL: one statement (no ";"), its one line of answer
ask() {
    echo "$1;" >&"${CLAIMER[1]}"
    local line
    read -r -t 30 line <&"${CLAIMER[0]}" || line="no answer"
    echo "$line"
}
claim() { ask "SELECT count(*) FROM outbox.claim_due('relay-x', '{fx}', '{64}', 64, 60000)"; }
# claim_late: the rows a claim takes, and how many of them are late:*
claim_late() {
    ask "SELECT count(*) || ' ' || count(*) FILTER (WHERE key LIKE 'late:%')
           FROM outbox.claim_due('relay-x', '{fx}', '{64}', 64, 60000)"
}
waiting_on_lock() {
    echo "SELECT count(*) FROM pg_stat_activity WHERE application_name = '$1' AND wait_event = 'advisory'"
}
is "$(ask "SELECT pg_advisory_lock(9501)")$(ask "SELECT pg_advisory_lock(9502)")" "" \
    "the claiming session holds the two locks"

# -- 1. a backlog behind the floor --------------------------------------------
PGAPPNAME=itest-backlog psql -X -q -v ON_ERROR_STOP=1 >"$T/backlog.out" 2>&1 <<'SQL' &
BEGIN;
SELECT count(*) FROM (SELECT outbox.enqueue('backlog:' || g, 'fx', jsonb_build_object('n', g))
                        FROM generate_series(1, 320) g) x;
SELECT pg_advisory_lock(9501);
COMMIT;
SQL
backlog=$!
ITEST_PIDS+=("$backlog")
ok "the enqueuing transaction wrote its rows and waits" wait_for 30 "$(waiting_on_lock itest-backlog)" 1

is "$(claim)" 0 "a claim while the rows are uncommitted takes nothing"
sleep 3
is "$(claim)" 0 "so does one 3 s later: its floor is now past the rows' next_attempt_at by over 2 s"
ask "SELECT pg_advisory_unlock(9501)" >/dev/null
wait "$backlog"
is "$?" 0 "the enqueuing transaction commits"

first=0
for _ in $(seq 1 100); do
    first=$(claim)
    [ "$first" != 0 ] && break
    sleep 0.1
done
is "$first" 64 "a sweep finds the backlog behind the floor and takes a full room"
is "$(claim) $(claim) $(claim) $(claim)" "64 64 64 64" \
    "the next four claims, at once, take a full room each (the floor went back to the backlog)"
is "$(claim)" 0 "then nothing is left"
is "$(sql "SELECT count(*) || ' ' || count(*) FILTER (WHERE attempts = 1 AND lease_owner = 'relay-x')
             FROM outbox.intents WHERE key LIKE 'backlog:%' AND state = 'in_flight'")" "320 320" \
    "the 320 rows are in flight, leased once each to the claiming relay"

# -- 2. a late commit while claims come faster than every 50 ms -----------------
PGAPPNAME=itest-late psql -X -q -v ON_ERROR_STOP=1 >"$T/late.out" 2>&1 <<'SQL' &
BEGIN;
SELECT outbox.enqueue('late:1', 'fx', '{}'::jsonb);
SELECT pg_advisory_lock(9502);
COMMIT;
SQL
late=$!
ITEST_PIDS+=("$late")
ok "the late transaction wrote its row and waits" wait_for 30 "$(waiting_on_lock itest-late)" 1
# Claims every 10 ms (each moves the floor past the row's start once 250 ms
# have gone), until one that sweeps 0.3 s or more after the row's start (the
# session's floor says when its last sweep was): the next sweep is then a
# second away, and the row is behind the floor, inside the window.
started=$(sql "SELECT xact_start FROM pg_stat_activity WHERE application_name = 'itest-late'")
swept=f last_s=""
for _ in $(seq 1 400); do
    claim >/dev/null
    IFS='|' read -r s past <<<"$(ask "SELECT (current_setting('outbox.claim_floor')::jsonb -> 'fx' ->> 's')
        || '|' || (now() > '$started'::timestamptz + interval '300 milliseconds')")"
    if [ -n "$last_s" ] && [ "$s" != "$last_s" ] && [ "$past" = true ]; then
        swept=t
        break
    fi
    last_s=$s
    sleep 0.01
done
is "$swept" t "a claim swept (the next sweep is at least a second away)"
ask "SELECT pg_advisory_unlock(9502)" >/dev/null
wait "$late"
is "$?" 0 "the late transaction commits, 0.3 s or more after its start"
claims=0 got=""
while [ "$claims" -lt 300 ]; do
    claims=$((claims + 1))
    got=$(claim_late)
    [ "$got" = "1 1" ] && break
    sleep 0.01
done
is "$got" "1 1" "a claim takes the late intent"
ok "within 20 claims of its commit, before the next sweep (it took $claims)" test "$claims" -le 20

exec {CLAIMER[1]}>&-
wait "$CLAIMER_PID" 2>/dev/null
itest_done
