#!/usr/bin/env bash
# Retry budget: a target that is down may retry at most floor + ratio x its
# first attempts per 10 s window; retries over the budget wait (deferred, not
# dropped, not multiplied), and the outage does not starve a healthy target.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start up
closed_port=$(( RECV_PORT_up + 1 ))
while ! pgcluster_port_free "$closed_port"; do closed_port=$((closed_port + 1)); done
target_add down "http://127.0.0.1:$closed_port/act" max_attempts=5 backoff_base_ms=10 \
    backoff_cap_ms=20 retry_budget_ratio=0.25 retry_budget_floor=5
target_add up "http://127.0.0.1:$RECV_PORT_up/act"
enqueue_many down "down:" 100
enqueue_many up "up:" 400

relay_start one --poll-interval-ms 100 --admin-listen "127.0.0.1:0"
admin_port=$(relay_admin_port one)
ok "the healthy target drains while the other is down" wait_for 10 \
    "SELECT count(*) FROM outbox.intents WHERE target = 'up' AND state = 'succeeded'" 400
sleep 4
retries=$(sql "SELECT count(*) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
               WHERE i.target = 'down' AND a.attempt > 1")
firsts=$(sql "SELECT count(*) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
              WHERE i.target = 'down' AND a.attempt = 1")
echo "# down target after ~5 s: $firsts first attempts, $retries retries (budget 5 + 0.25 x firsts per 10 s)"
is "$firsts" 100 "every intent of the down target had its first attempt"
ok "retries stayed within the budget ($retries <= 5 + 25 + slack of one batch)" test "$retries" -le 31
ok "retries went out at all (the floor)" test "$retries" -ge 5
is "$(sql "SELECT count(*) FROM outbox.intents WHERE target = 'down' AND state IN ('pending', 'in_flight')")" 100 \
    "over-budget retries wait in pending: none dropped, none failed early"
deferred=$(curl -s "http://127.0.0.1:$admin_port/metrics" | sed -n 's/^outbox_retry_budget_exhausted_total{target="down"} \([0-9]*\)$/\1/p')
echo "# deferred by the budget: $deferred"
ok "the budget deferred retries (metric outbox_retry_budget_exhausted_total)" test "${deferred:-0}" -gt 0
is "$(sql "SELECT count(*) FROM (SELECT intent_id, attempt FROM outbox.attempts GROUP BY 1, 2 HAVING count(*) > 1) d")" 0 \
    "no attempt number used twice: deferral gives the attempt back"
is "$(sql "SELECT max(attempts) <= 5 FROM outbox.intents WHERE target = 'down'")" t "never more than max_attempts"
kill -TERM "$RELAY_PID_one"; relay_wait one 20
is "$?" 0 "relay exits 0"
ok "no sanitizer report" relay_logs_clean
itest_done
