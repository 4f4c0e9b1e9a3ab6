#!/usr/bin/env bash
# A claim answered late gives its rows back unsent (the model's T3).
#
# The database stamps a lease at the start of the claim's transaction. Here,
# while the relay drains 3,000 intents, a session holds the target's
# flow-control row (a rate-limited target's claim locks it) for 5 s, so the
# relay's next claim waits on the lock and answers with rows whose 6 s leases
# have at most 3 s left. Sending them would race a take-over; the relay must
# release them and claim them again.
#   - the relay logs claim_answer_late and counts it in /metrics;
#   - the rows of that claim are given back unsent, and then succeed;
#   - the keyless receiver saw each intent exactly once.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start slow
# max_in_flight 64: the relay has room, and so a claim under way, at every
# moment of the drain. A claim is late when it answers after half the lease
# (3 s), so it must start waiting within the first two seconds of the 5 s lock
# (0047's sweeps come at least once a second even where a floor passed rows);
# at the default 1,024 in flight a loaded machine could leave the relay full
# through that second (CI saw no late claim once).
target_add slow "http://127.0.0.1:$RECV_PORT_slow/act" key_header=NULL rate_limit_per_s=100000 max_in_flight=64
relay_start one --lease-ms 6000 --poll-interval-ms 200 --admin-listen 127.0.0.1:0
ok "relay up" wait_for 10 "SELECT count(*) FROM outbox.relays WHERE relay_id = 'relay-one'" 1
port=$(relay_admin_port one)

enqueue_many slow "late:" 3000
ok "the drain is under way" wait_for 20 \
    "SELECT count(*) >= 200 FROM outbox.intents WHERE key LIKE 'late:%' AND state = 'succeeded'" t
psql -X -q -tA -v ON_ERROR_STOP=1 >"$T/locker.out" 2>&1 <<'SQL' &
BEGIN;
SELECT 1 FROM outbox.target_state WHERE target = 'slow' FOR UPDATE;
SELECT pg_sleep(5);
COMMIT;
SQL
locker=$!
ITEST_PIDS+=("$locker")
wait "$locker"
is "$?" 0 "a session held the target's row for 5 s"

ok "all 3,000 are delivered in the end" wait_for 30 \
    "SELECT count(*) FROM outbox.intents WHERE key LIKE 'late:%' AND state = 'succeeded'" 3000
ok "the relay logged claim_answer_late" grep -q '"event":"claim_answer_late"' "$T/relay-one.log"
late_rows=$(sed -n 's/.*"event":"claim_answer_late","rows":\([0-9]*\).*/\1/p' "$T/relay-one.log" |
            awk '{ n += $1 } END { print n + 0 }')
ok "a late claim held rows ($late_rows)" test "$late_rows" -ge 1
is "$(sql "SELECT count(*) FROM outbox.intents i
           WHERE key LIKE 'late:%' AND (SELECT count(*) FROM outbox.attempts a
                                        WHERE a.intent_id = i.id AND a.class = 'succeeded') <> 1")" 0 \
    "one delivery each"
is "$(receiver_stat slow deliveries_total)" 3000 "the keyless receiver saw 3,000 requests, no more"
late=$(curl -s "http://127.0.0.1:$port/metrics" | sed -n 's/^outbox_claims_late_total \([0-9]*\)$/\1/p')
ok "outbox_claims_late_total counts the late claim ($late)" test "${late:-0}" -ge 1

kill -TERM "$RELAY_PID_one"; relay_wait one 30
is "$?" 0 "relay exits 0"
released=$(sed -n 's/.*"event":"relay_stopped".*"released":\([0-9]*\).*/\1/p' "$T/relay-one.log")
is "$released" "$late_rows" "the relay gave back every row of the late claims unsent"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE key LIKE 'late:%' AND attempts <> 1")" 0 \
    "a released claim does not count as an attempt"
ok "no sanitizer report" relay_logs_clean
itest_done
