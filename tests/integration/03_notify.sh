#!/usr/bin/env bash
# An intent enqueued while the relay idles (poll interval 10 s) is delivered
# within 1 s: the idle flag makes the trigger NOTIFY, and the relay wakes.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start keyed
target_add api "http://127.0.0.1:$RECV_PORT_keyed/calls"
relay_start idle --poll-interval-ms 10000
ok "relay registers as idle" wait_for 10 "SELECT idle FROM outbox.relays WHERE relay_id = 'relay-idle'" t

for i in 1 2 3; do
    start=$(date +%s%N)
    sql "SELECT outbox.enqueue('notify:$i', 'api', '{\"i\": $i}')" >/dev/null
    wait_for 5 "SELECT state FROM outbox.intents WHERE key = 'notify:$i'" succeeded
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    echo "# notify:$i delivered and recorded in $ms ms"
    ok "intent $i delivered within 1 s of commit (took $ms ms)" test "$ms" -lt 1000
done
is "$(receiver_stat keyed effects_total)" 3 "three effects"

# Approval also wakes the relay: approve is an UPDATE to a due pending row.
sql "UPDATE outbox.targets SET approval_rule = '\$.amount > 100' WHERE name = 'api'" >/dev/null
sleep 11 # the relay reloads targets (enqueue reads the rule itself; this only settles the relay)
sql "SELECT outbox.enqueue('notify:big', 'api', '{\"amount\": 1000}')" >/dev/null
sleep 0.5
is "$(sql "SELECT state FROM outbox.intents WHERE key = 'notify:big'")" awaiting_approval "held for approval"
is "$(receiver_stat keyed effects_total)" 3 "nothing sent while awaiting approval"
start=$(date +%s%N)
sql "SELECT outbox.approve('notify:big', 'alice')" >/dev/null
wait_for 5 "SELECT state FROM outbox.intents WHERE key = 'notify:big'" succeeded
ms=$(( ($(date +%s%N) - start) / 1000000 ))
ok "approved intent delivered within 1 s (took $ms ms)" test "$ms" -lt 1000

kill -TERM "$RELAY_PID_idle"; relay_wait idle 20
is "$?" 0 "relay exits 0 on SIGTERM"
ok "no sanitizer report" relay_logs_clean
itest_done
