#!/usr/bin/env bash
# A backlog behind the claim's floor is claimed a room per claim (migration
# 0051, a defect of 0047).
#
# One transaction enqueues 320 intents (they share its now() as their
# next_attempt_at) and commits 4 s later. Meanwhile a relay's session claims,
# as the relay does, one claim per transaction: its floor passes the start of
# that transaction by more than the 2 s window its re-reads look back. When
# the rows commit, a sweep finds them. Asserted, by counting the rows each
# claim takes (room 64), through the relay's own login:
#   - the first claim that finds the backlog takes a full room;
#   - the next four claims, made at once, take a full room each: before 0051
#     they took nothing (the floor stayed ahead of the backlog, which went one
#     room per sweep, about a second each);
#   - then nothing is left: 320 claimed once each.
# The waits only order the two sessions; nothing asserts an elapsed time.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

target_add fx "http://127.0.0.1:9/unused"

# The enqueuing transaction, held open after its rows are written.
PGAPPNAME=itest-enqueue psql -X -q -v ON_ERROR_STOP=1 >"$T/enqueue.out" 2>&1 <<'SQL' &
BEGIN;
SELECT count(*) FROM (SELECT outbox.enqueue('backlog:' || g, 'fx', jsonb_build_object('n', g))
                        FROM generate_series(1, 320) g) x;
SELECT pg_sleep(4);
COMMIT;
SQL
enqueuer=$!
ITEST_PIDS+=("$enqueuer")
ok "the enqueuing transaction wrote its rows and waits" wait_for 30 \
    "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'itest-enqueue' AND query LIKE '%pg_sleep%'" 1

# The relay's session: one psql, one claim per transaction, as the relay's login.
coproc CLAIMER { psql -X -q -tA -v ON_ERROR_STOP=1 "$RELAY_DB_URL" 2>&1; }
ITEST_PIDS+=("$CLAIMER_PID")
claim() {
    echo "SELECT count(*) FROM outbox.claim_due('relay-x', '{fx}', '{64}', 64, 60000);" >&"${CLAIMER[1]}"
    local n
    read -r -t 30 n <&"${CLAIMER[0]}" || n="no answer"
    echo "$n"
}

is "$(claim)" 0 "a claim while the rows are uncommitted takes nothing"
sleep 3
is "$(claim)" 0 "so does one 3 s later: its floor is now past the rows' next_attempt_at by over 2 s"
wait "$enqueuer"
is "$?" 0 "the enqueuing transaction commits"

first=0
for i in $(seq 1 100); do
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

exec {CLAIMER[1]}>&-
wait "$CLAIMER_PID" 2>/dev/null
itest_done
