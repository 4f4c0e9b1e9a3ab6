#!/usr/bin/env bash
# Proves: /readyz answers 503 naming the record connection while only that connection is down, and 200 once it is back.
# The relay logs in as itest_relay, a login with only outbox_relay (itest.sh);
# its record connection is found in pg_stat_activity by application_name and
# terminated while the database stays up. A connection limit on the login
# keeps it from coming back at once, so the answer can be read; the main
# connection stays up and keeps serving (a lookup of a key answers 200).
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start r
target_add t "http://127.0.0.1:$RECV_PORT_r/act"
sql "SELECT outbox.enqueue('ready:1', 't', '{\"n\": 1}')" >/dev/null
relay_start a --poll-interval-ms 100 --prune-interval-ms 0 --reconnect-max-ms 300 --admin-listen 127.0.0.1:0
ADMIN=$(relay_admin_port a)
[ -n "$ADMIN" ] || bail "the relay's admin port did not open"
readyz() { curl -s -w ' %{http_code}' "http://127.0.0.1:$ADMIN/readyz"; }

ok "ready once both connections are up" wait_cmd 10 bash -c "[ \"\$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:$ADMIN/readyz)\" = 200 ]"
is "$(readyz)" '{"status":"ready"} 200' "/readyz: 200 ready"
ok "the first intent is delivered" wait_for 10 "SELECT state FROM outbox.intents WHERE key = 'ready:1'" succeeded
ok "three connections, main, record and sweep, all as itest_relay (only outbox_relay)" \
    wait_for 10 "SELECT string_agg(application_name || ' ' || usename, ',' ORDER BY application_name)
                   FROM pg_stat_activity WHERE application_name LIKE 'outbox-relay/%'" \
    "outbox-relay/main itest_relay,outbox-relay/record itest_relay,outbox-relay/sweep itest_relay"
is "$(sql "SELECT string_agg(b.rolname, ',' ORDER BY b.rolname) FROM pg_auth_members m
             JOIN pg_roles u ON u.oid = m.member JOIN pg_roles b ON b.oid = m.roleid
            WHERE u.rolname = 'itest_relay'")|$(sql "SELECT rolsuper FROM pg_roles WHERE rolname = 'itest_relay'")" \
    "outbox_relay|f" "itest_relay is a member of outbox_relay alone, not a superuser"

# Only the record connection goes: the limit admits no new connection of the
# login, the three it has stay.
sql "ALTER ROLE itest_relay CONNECTION LIMIT 1" >/dev/null
is "$(sql "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                                  WHERE application_name = 'outbox-relay/record') x")" 1 \
    "the record connection's backend is terminated"
ok "the relay notices the record connection is lost" \
    wait_cmd 10 grep -q '"event":"db_lost","connection":"record"' "$T/relay-a.log"
ok "its reconnects are refused by the limit" \
    wait_cmd 10 grep -q '"event":"db_connect_failed","connection":"record".*too many connections for role' "$T/relay-a.log"
is "$(readyz)" '{"status":"not ready","reason":"record connection not connected: too many connections"} 503' \
    "/readyz: 503, the record connection named with the reason"
is "$(relay_metric "$ADMIN" outbox_ready)/$(relay_metric "$ADMIN" outbox_db_connected)" "0/0" \
    "outbox_ready 0, outbox_db_connected 0"
is "$(sql "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'outbox-relay/main'")" 1 \
    "the main connection is still there"
is "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$ADMIN/v1/intents/ready:1")" 200 \
    "and serves: the outcome of a key is looked up on it (200)"
is "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$ADMIN/healthz")" 200 "/healthz stays 200 (alive)"

# Outcomes wait in memory meanwhile and are written after the reconnect.
sql "SELECT outbox.enqueue('ready:2', 't', '{\"n\": 2}')" >/dev/null
ok "a delivery goes on while the record connection is down" wait_cmd 10 \
    bash -c "[ \"\$(curl -s http://127.0.0.1:$RECV_PORT_r/_stats | sed -n 's/.*\"effects_total\":\([0-9]*\).*/\1/p')\" = 2 ]"
is "$(relay_metric "$ADMIN" outbox_unrecorded_outcomes)" 1 "its outcome waits unrecorded"
is "$(sql "SELECT state FROM outbox.intents WHERE key = 'ready:2'")" in_flight "the row stays in flight"

sql "ALTER ROLE itest_relay CONNECTION LIMIT -1" >/dev/null
ok "after the limit is lifted, /readyz is 200 again" wait_cmd 10 \
    bash -c "[ \"\$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:$ADMIN/readyz)\" = 200 ]"
is "$(readyz)" '{"status":"ready"} 200' "/readyz: 200 ready"
ok "the waiting outcome is recorded" wait_for 10 "SELECT state FROM outbox.intents WHERE key = 'ready:2'" succeeded
is "$(relay_metric "$ADMIN" outbox_ready)/$(relay_metric "$ADMIN" outbox_db_connected)" "1/1" \
    "outbox_ready 1, outbox_db_connected 1"
is "$(receiver_stat r effects_total)/$(sql "SELECT count(*) FROM outbox.attempts")" "2/2" \
    "two effects, two attempts rows"
kill -TERM "$RELAY_PID_a"
relay_wait a 20
is "$?" 0 "the relay stops cleanly"
ok "no sanitizer report" relay_logs_clean
itest_done
