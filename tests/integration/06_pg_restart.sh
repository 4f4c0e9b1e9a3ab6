#!/usr/bin/env bash
# PostgreSQL restarted mid-drain: in-flight HTTP carries on, outcomes wait in
# memory, the relay reconnects with back-off and every intent ends recorded,
# with no duplicate effect at a receiver that cannot deduplicate.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start plain --delay-ms 5
target_add legacy "http://127.0.0.1:$RECV_PORT_plain/effects" key_header=NULL
enqueue_many legacy "restart:" 10000
relay_start one --poll-interval-ms 200 --batch-size 100 --max-in-flight 200
ok "draining" wait_for 30 "SELECT count(*) > 500 FROM outbox.intents WHERE state = 'succeeded'" t
pgcluster_restart "$T/pg"
ok "PostgreSQL is back" wait_for 30 "SELECT 1" 1
ok "every intent recorded succeeded" wait_for 120 \
    "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded'" 10000
ok "relay noticed the loss" grep -q '"event":"db_lost"' "$T/relay-one.log"
is "$(grep '"event":"db_ready"' "$T/relay-one.log" | grep -c '"connection":"main"')" 2 "main connection reconnected once"
is "$(grep '"event":"db_ready"' "$T/relay-one.log" | grep -c '"connection":"record"')" 2 "record connection reconnected once"
ok "relay process still running" kill -0 "$RELAY_PID_one"
is "$(receiver_stat plain effects_total)" 10000 "10,000 effects"
is "$(receiver_stat plain deliveries_total)" 10000 "no delivery twice"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE attempts <> 1")" 0 "one attempt each"
kill -TERM "$RELAY_PID_one"; relay_wait one 20
is "$?" 0 "exit 0"
ok "no sanitizer report" relay_logs_clean
itest_done
