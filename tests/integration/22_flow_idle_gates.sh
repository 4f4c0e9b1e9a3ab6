#!/usr/bin/env bash
# Flow control, the idle gates: a relay with a backlog it cannot send does not
# spin the database.
#   - a disabled target with 1,000 due intents: the relay neither claims them nor
#     wakes up for them (before 0009 it committed ~1,700 transactions/s, forever:
#     next_due_ms counted rows the relay would not claim, and re-armed at 1 ms);
#   - a target at its cap (max_in_flight = 1) with a backlog and a slow receiver:
#     one claim per finished delivery, not thousands per second;
#   - enabling the target again drains its backlog at once.
# Every setting is a default (the relay's and the target's) but for the cap.
# Commits are counted in pg_stat_database over a 10 s window.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start slow --delay-ms 500
receiver_start fast
target_add parked "http://127.0.0.1:$RECV_PORT_fast/act" enabled=false
target_add narrow "http://127.0.0.1:$RECV_PORT_slow/act" max_in_flight=1
# the backlog of the disabled target, written as the table owner would (enqueue refuses a disabled target)
sql "INSERT INTO outbox.intents (key, target, payload, fingerprint)
     SELECT 'parked:' || g, 'parked', jsonb_build_object('n', g), '\\x00' FROM generate_series(1, 1000) g" >/dev/null

commits() { sql "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"; }
metric() { curl -s "http://127.0.0.1:$admin_port/metrics" | sed -n "s/^$1 \([0-9.e+]*\)$/\1/p"; }
# commit_rate SECONDS → commits per second over the window (statistics are
# flushed by busy backends every second: a window of 10 s is exact to ~10 %)
commit_rate() {
    local c0 c1
    sleep 1.5
    c0=$(commits)
    sleep "$1"
    sleep 1.5
    c1=$(commits)
    echo $(( (c1 - c0) / ($1 + 3) ))
}

started=$(date +%s)
relay_start one --admin-listen "127.0.0.1:0"
admin_port=$(relay_admin_port one)
ok "the relay is up (admin port)" test -n "$admin_port"
ok "the relay says it is idle (nothing it can send)" wait_for 10 \
    "SELECT idle FROM outbox.relays WHERE relay_id = 'relay-one'" t

rate=$(commit_rate 10)
echo "# disabled target with 1000 due intents: $rate commits/s"
ok "a disabled target's backlog: fewer than 20 commits/s ($rate)" test "$rate" -lt 20
is "$(sql "SELECT count(*) FROM outbox.intents WHERE target = 'parked' AND state = 'pending' AND attempts = 0")" 1000 \
    "the disabled target's rows are untouched: pending, no attempt"
claims=$(metric 'outbox_claim_duration_seconds_count')
window=$(($(date +%s) - started + 1)) # whole seconds since the relay started, rounded up
echo "# claim statements so far: $claims in $window s"
# A count against the window it was counted in (a slow machine makes the window
# longer and the bound looser, never tighter): the poll ticks every 2 s; at
# most two claims a tick (the tick's, and the one after the idle flag), plus 5.
ok "no claim loop: at most a claim per poll tick (${claims:-?} in $window s)" \
    test "${claims:-999}" -le $((2 * (window / 2 + 1) + 5))

# ---------------------------------------------------------------- a target at its cap
enqueue_many narrow "narrow:" 200
sleep 2
rate=$(commit_rate 10)
claimed_before=$(metric 'outbox_claimed_total')
claims_before=$(metric 'outbox_claim_duration_seconds_count')
delivered_since() { test $(($(metric 'outbox_claimed_total') - claimed_before)) -ge "$1"; }
# Until 10 rows more were claimed (one at a time, ~2/s: about 5 s), however
# long that takes: what is counted is claims per row, not rows per second.
wait_cmd 60 delivered_since 10
claimed_after=$(metric 'outbox_claimed_total')
claims_after=$(metric 'outbox_claim_duration_seconds_count')
rows=$((claimed_after - claimed_before)); stmts=$((claims_after - claims_before))
echo "# target at its cap (1 in flight, 500 ms per request): $rate commits/s; $stmts claims for $rows rows"
ok "a target at its cap: fewer than 20 commits/s ($rate)" test "$rate" -lt 20
ok "rows were delivered meanwhile (one at a time): $rows" test "$rows" -ge 10
ok "about one claim per row, not a loop ($stmts claims for $rows rows)" test "$stmts" -le $((3 * rows + 5))
is "$(sql "SELECT count(*) FROM outbox.intents WHERE target = 'narrow' AND state = 'in_flight'")" 1 \
    "never more than the cap in flight"

# ---------------------------------------------------------------- enabling the target drains it
sql "UPDATE outbox.targets SET enabled = true WHERE name = 'parked'" >/dev/null
start=$(date +%s)
ok "enabled again: its 1000 intents are delivered (the relay reloads targets every 10 s)" wait_for 120 \
    "SELECT count(*) FROM outbox.intents WHERE target = 'parked' AND state = 'succeeded'" 1000
echo "# parked target drained $(( $(date +%s) - start )) s after it was enabled"
is "$(receiver_stat fast keys_with_duplicate_effects)" 0 "no duplicate effects"

kill -TERM "$RELAY_PID_one"; relay_wait one 30
is "$?" 0 "relay exits 0"
ok "no sanitizer report" relay_logs_clean
itest_done
