#!/usr/bin/env bash
# A target that is down gets fewer requests, not more, and does not hold back
# a healthy one (the guard that replaced the retry budget): once its circuit
# opens, it is sent probes only (one at a time, at doubling intervals), its
# intents wait as pending without spending attempts, and the healthy target
# drains as if the other did not exist. Default target settings.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start up
refusing_port closed_port
target_add down "http://127.0.0.1:$closed_port/act"
target_add up "http://127.0.0.1:$RECV_PORT_up/act"
enqueue_many down "down:" 100
enqueue_many up "up:" 400

relay_start one --admin-listen "127.0.0.1:0"
admin_port=$(relay_admin_port one)
ok "the healthy target drains while the other is down" wait_for 10 \
    "SELECT count(*) FROM outbox.intents WHERE target = 'up' AND state = 'succeeded'" 400
ok "the down target's circuit opens" wait_for 10 \
    "SELECT circuit <> 'closed' FROM outbox.target_health WHERE target = 'down'" t
sleep 1
probes() { grep -c '"event":"circuit_probe","target":"down"' "$T/relay-one.log"; }
before=$(sql "SELECT count(*) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id WHERE i.target = 'down'")
probes_before=$(probes)
sleep 7
after=$(sql "SELECT count(*) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id WHERE i.target = 'down'")
probes_after=$(probes)
probed=$((probes_after - probes_before))
echo "# down target: $before attempts until the circuit opened (one burst of the first claim), then $probed probes in 7 s"
ok "the first burst is bounded by one claim: at most 100 attempts for 100 intents, and a probe ($before)" test "$before" -le 101
ok "then probes only: at most 4 in 7 s ($probed)" test "$probed" -le 4
ok "probes go out at all: at least 2 in 7 s ($probed)" test "$probed" -ge 2
is "$after" "$before" "a refused probe spends no attempt of the intent it carried (given back)"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE target = 'down' AND state = 'pending'")" 100 \
    "the down target's intents wait in pending: none dropped, none failed"
is "$(sql "SELECT max(attempts) <= 2 FROM outbox.intents WHERE target = 'down'")" t "no intent used more than 2 attempts"
is "$(sql "SELECT count(*) FROM (SELECT intent_id, attempt FROM outbox.attempts GROUP BY 1, 2 HAVING count(*) > 1) d")" 0 \
    "no attempt number used twice"
window=$(curl -s "http://127.0.0.1:$admin_port/metrics" | sed -n 's/^outbox_target_concurrency_limit{target="down"} \([0-9]*\)$/\1/p')
echo "# the relay's window for the down target: $window"
ok "the relay's window for the down target shrank: halved by each burst of failures ($window <= 256)" \
    test "${window:-9999}" -le 256
kill -TERM "$RELAY_PID_one"; relay_wait one 20
is "$?" 0 "relay exits 0"
ok "no sanitizer report" relay_logs_clean
itest_done
