#!/usr/bin/env bash
# An intent enqueued while the relay idles is delivered because the idle flag
# makes the trigger NOTIFY and the relay wakes: the relay polls once an hour
# and reloads its targets once an hour (each of which also claims), so a
# delivery within the scenario's bounded waits is one a NOTIFY started. No
# clock is read: what is asserted is that it happened, not how fast.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start keyed
target_add api "http://127.0.0.1:$RECV_PORT_keyed/calls"
relay_start idle --poll-interval-ms 3600000 --targets-refresh-ms 3600000
ok "relay registers as idle" wait_for 10 "SELECT idle FROM outbox.relays WHERE relay_id = 'relay-idle'" t

for i in 1 2 3; do
    sql "SELECT outbox.enqueue('notify:$i', 'api', '{\"i\": $i}')" >/dev/null
    ok "intent $i delivered: its commit's NOTIFY woke the idle relay (no poll for an hour)" \
        wait_for 30 "SELECT state FROM outbox.intents WHERE key = 'notify:$i'" succeeded
done
is "$(receiver_stat keyed effects_total)" 3 "three effects"

# Approval also wakes the relay: approve is an UPDATE to a due pending row.
sql "UPDATE outbox.targets SET approval_rule = '\$.amount > 100' WHERE name = 'api'" >/dev/null
sql "SELECT outbox.enqueue('notify:big', 'api', '{\"amount\": 1000}')" >/dev/null
sleep 0.5
is "$(sql "SELECT state FROM outbox.intents WHERE key = 'notify:big'")" awaiting_approval "held for approval"
is "$(receiver_stat keyed effects_total)" 3 "nothing sent while awaiting approval"
sql "SELECT outbox.approve('notify:big', 'alice')" >/dev/null
ok "approved intent delivered: the approval's NOTIFY woke the relay" \
    wait_for 30 "SELECT state FROM outbox.intents WHERE key = 'notify:big'" succeeded

kill -TERM "$RELAY_PID_idle"; relay_wait idle 20
is "$?" 0 "relay exits 0 on SIGTERM"
ok "no sanitizer report" relay_logs_clean
itest_done
