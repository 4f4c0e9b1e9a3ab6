#!/usr/bin/env bash
# Three relays on one database drain 10,000 intents: SKIP LOCKED and the
# lease fence mean no intent is delivered twice (receiver cannot deduplicate).
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start plain
target_add legacy "http://127.0.0.1:$RECV_PORT_plain/effects" key_header=NULL
enqueue_many legacy "three:" 10000

for r in a b c; do relay_start $r --batch-size 64 --poll-interval-ms 100; done
ok "all rows succeeded within 90 s" wait_for 90 \
    "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded'" 10000
for r in a b c; do pid_var=RELAY_PID_$r; kill -TERM "${!pid_var}"; done
for r in a b c; do relay_wait $r 30; is "$?" 0 "relay $r exits 0 on SIGTERM"; done

is "$(receiver_stat plain effects_total)" 10000 "exactly 10,000 effects"
is "$(receiver_stat plain deliveries_total)" 10000 "exactly 10,000 deliveries: none twice"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE attempts <> 1")" 0 "every row has one attempt"
is "$(sql "SELECT count(DISTINCT relay) FROM outbox.attempts")" 3 "all three relays delivered"
is "$(sql "SELECT count(*) FROM outbox.relays")" 0 "relays said goodbye"
ok "no sanitizer report" relay_logs_clean
itest_done
