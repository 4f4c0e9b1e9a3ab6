#!/usr/bin/env bash
# The sweep on a connection of its own (issue 40, migration 0052; relay_db.c,
# "Two lanes"). Under a held snapshot a sweep of the claim takes as long as
# the hold is old, and the claims that queued behind it on the main
# connection made the p99. The relay now has three connections; the floor
# claims never sweep, the sweep connection does. Faults are real: the sweep
# connection's backend is stopped (SIGSTOP) so that what is sent to it waits,
# and later terminated while a connection limit keeps it from coming back.
#   1. three connections, main, record and sweep, all as the relay's login;
#   2. while the sweep's backend is stopped, fresh intents are delivered: the
#      floor claims do not wait for it;
#   3. a transaction that commits 3 s after it began (its row behind the
#      claims' floor and the 2 s their re-reads look back) is not delivered
#      while the sweep's backend is stopped, not even after 3 s more (the
#      floor claims do not sweep), and is delivered once it runs again; it is
#      the one row outbox_swept_total counts;
#   4. while the sweep connection is down, the floor claims sweep in line
#      ('auto'): such a row is delivered without it; the connection comes
#      back when the limit is lifted.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start r
target_add t "http://127.0.0.1:$RECV_PORT_r/act"
# A query timeout well past the time the sweep's backend stays stopped: the
# relay would otherwise drop that connection and open a new one.
relay_start a --poll-interval-ms 100 --prune-interval-ms 0 --reconnect-max-ms 300 \
    --query-timeout-ms 120000 --admin-listen 127.0.0.1:0
ADMIN=$(relay_admin_port a)
[ -n "$ADMIN" ] || bail "the relay's admin port did not open"
conns="SELECT string_agg(application_name || ' ' || usename, ',' ORDER BY application_name)
         FROM pg_stat_activity WHERE application_name LIKE 'outbox-relay/%'"
ok "three connections, main, record and sweep, as itest_relay" wait_for 10 "$conns" \
    "outbox-relay/main itest_relay,outbox-relay/record itest_relay,outbox-relay/sweep itest_relay"
sweep_pid() { sql "SELECT pid FROM pg_stat_activity WHERE application_name = 'outbox-relay/sweep'"; }
# queued PID: true once the relay sent backend PID bytes it has not read
# (the Recv-Q of its socket)
queued() {
    local port bytes
    port=$(sql "SELECT client_port FROM pg_stat_activity WHERE pid = $1")
    bytes=$(ss -Htn state established "( sport = :$PGPORT and dport = :$port )" | awk '{ print $1 }')
    [ "${bytes:-0}" -gt 0 ]
}

# late KEY: a transaction that enqueues KEY and commits 3 s after it began
late() {
    psql -X -q -v ON_ERROR_STOP=1 -c "BEGIN" \
        -c "SELECT outbox.enqueue('$1', 't', '{}')" -c "SELECT pg_sleep(3)" -c "COMMIT" \
        >>"$T/late.log" 2>&1
}
state_of() { sql "SELECT state FROM outbox.intents WHERE key = '$1'"; }

# -- 2. the sweep's backend stopped: fresh intents go on ---------------------
pid=$(sweep_pid)
[ -n "$pid" ] || bail "no sweep connection"
kill -STOP "$pid"
STOPPED=$pid
trap '[ -n "${STOPPED:-}" ] && kill -CONT "$STOPPED" 2>/dev/null; itest_cleanup' EXIT
ok "a statement is sent to the stopped backend and waits unread (a take-over, a sweep)" \
    wait_cmd 10 queued "$pid"
enqueue_many t "fresh:" 20
ok "while the sweep's backend is stopped, 20 fresh intents are delivered" \
    wait_for 10 "SELECT count(*) FROM outbox.intents WHERE key LIKE 'fresh:%' AND state = 'succeeded'" 20

# -- 3. a late commit waits for the sweep ------------------------------------
late late:1
is "$(sql "SELECT (now() - next_attempt_at > interval '2.5 seconds')::text || ' ' || state
             FROM outbox.intents WHERE key = 'late:1'")" "true pending" \
    "a row committed 3 s after its transaction began: due that long ago, pending"
sql "SELECT outbox.enqueue('fresh:21', 't', '{}')" >/dev/null
ok "a fresh intent after it is delivered" wait_for 10 "$(printf "SELECT state FROM outbox.intents WHERE key = 'fresh:21'")" succeeded
sleep 3
is "$(state_of late:1)/$(receiver_stat r effects_total)" "pending/21" \
    "3 s later the late row is still pending, not sent: the floor claims do not sweep"
is "$(ps -o stat= -p "$pid" | cut -c1)/$(grep -c '"event":"db_lost","connection":"sweep"' "$T/relay-a.log")" "T/0" \
    "the sweep's backend was stopped all along, and its connection kept"
kill -CONT "$pid"
STOPPED=
ok "once the sweep's backend runs again, the late row is delivered" wait_for 10 \
    "SELECT state FROM outbox.intents WHERE key = 'late:1'" succeeded
is "$(relay_metric "$ADMIN" outbox_swept_total)/$(relay_metric "$ADMIN" outbox_claimed_total)" "1/22" \
    "outbox_swept_total counts that one row (outbox_claimed_total all 22)"
is "$(receiver_stat r effects_total)/$(sql "SELECT count(*) FROM outbox.attempts")" "22/22" \
    "22 effects, 22 attempts rows: each intent once"

# -- 4. the sweep connection down: the floor claims sweep in line -------------
# The limit admits no new connection of the login; main and record stay.
sql "ALTER ROLE itest_relay CONNECTION LIMIT 2" >/dev/null
is "$(sql "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                                  WHERE application_name = 'outbox-relay/sweep') x")" 1 \
    "the sweep connection's backend is terminated"
ok "its reconnects are refused by the limit" wait_cmd 10 \
    grep -q '"event":"db_connect_failed","connection":"sweep".*too many connections for role' "$T/relay-a.log"
late late:2
ok "a late row is delivered without the sweep connection (the main one sweeps)" wait_for 10 \
    "SELECT state FROM outbox.intents WHERE key = 'late:2'" succeeded
is "$(relay_metric "$ADMIN" outbox_swept_total)" 1 "not by the sweep connection"
sql "ALTER ROLE itest_relay CONNECTION LIMIT -1" >/dev/null
ok "after the limit is lifted the sweep connection is back" wait_for 10 \
    "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'outbox-relay/sweep'" 1
is "$(receiver_stat r effects_total)/$(sql "SELECT count(*) FROM outbox.attempts")" "23/23" \
    "23 effects, 23 attempts rows"

kill -TERM "$RELAY_PID_a"
relay_wait a 20
is "$?" 0 "the relay stops cleanly"
is "$(grep -c '"event":"claim_failed".*"scan":"floor"' "$T/relay-a.log")" 0 "no floor claim failed"
ok "no sanitizer report" relay_logs_clean
itest_done
