#!/usr/bin/env bash
# One relay, databases that come and go:
#  - "bad" refuses the relay's login (a wrong OUTBOX_SECRET_BAD): the relay
#    retries with back-off every few hundred ms and logs it once (once a
#    minute), never the password; "good" and "secret" (whose password comes
#    from OUTBOX_SECRET_SECRET) drain meanwhile and /readyz is ready; /ui
#    lists bad with why, and bad's own page answers 503;
#  - SIGHUP with a file that adds "late" and removes "slow" while "slow"
#    holds leases (its receiver takes 4 s): "late" starts and drains; "slow"
#    claims nothing more, its deliveries in flight end and are recorded by
#    this relay (one attempt each, no take-over), it says goodbye
#    (outbox.relays) and stops; the others are not interrupted.
. "$(dirname "$0")/../lib/itest.sh"
. "$(dirname "$0")/../lib/multidb.sh"
itest_setup

for name in good secret bad slow late; do multidb_add "$name"; done
multidb_migrate
# A login with a password: scram for it alone (the cluster trusts the rest).
sed -i '1i host all itest_pw 127.0.0.1/32 scram-sha-256' "$T/pg/data/pg_hba.conf"
sql "CREATE ROLE itest_pw LOGIN PASSWORD 'right-horse-battery'; GRANT outbox_relay TO itest_pw; SELECT pg_reload_conf()" >/dev/null
PORT=${MULTIDB_PORT[good]}
{
    echo "# the relay's databases"
    echo "good postgresql://itest_relay@127.0.0.1:$PORT/good"
    echo "secret host=127.0.0.1 port=$PORT dbname=secret user=itest_pw"
    echo "bad host=127.0.0.1 port=$PORT dbname=bad user=itest_pw"
    echo "slow postgresql://itest_relay@127.0.0.1:$PORT/slow"
} >"$T/relay.databases"

receiver_start r --delay-ms 20
receiver_start slowr --delay-ms 4000
for name in good secret bad late; do dtarget "$name" hook "http://127.0.0.1:$RECV_PORT_r/effects"; done
dtarget slow hook "http://127.0.0.1:$RECV_PORT_slowr/effects"
# Four at a time, 4 s each: slow holds leases for the whole scenario.
dsql slow "UPDATE outbox.targets SET max_in_flight = 4" >/dev/null
denqueue good hook 300
denqueue secret hook 300
denqueue bad hook 50
denqueue slow hook 40
denqueue late hook 200

succeeded() { dsql "$1" "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded'"; }
drained() { test "$(succeeded "$1")" = "$2"; }
export OUTBOX_SECRET_SECRET=right-horse-battery OUTBOX_SECRET_BAD=wrong-horse-battery
relay_start one --databases "$T/relay.databases" --max-in-flight 64 --reconnect-max-ms 300 \
    --admin-listen 127.0.0.1:0 --lease-ms 3000
unset OUTBOX_SECRET_SECRET OUTBOX_SECRET_BAD
ADMIN=$(relay_admin_port one)
[ -n "$ADMIN" ] || bail "the admin port did not open"

ok "good drains" wait_cmd 120 drained good 300
ok "secret drains (its password from OUTBOX_SECRET_SECRET)" wait_cmd 120 drained secret 300
refusals() { grep -c 'password authentication failed for user "itest_pw"' "$T/pg/server.log"; }
retried() { test "$(refusals)" -ge 6; }
ok "bad is retried (at least 6 refused logins in the server's log)" wait_cmd 60 retried
is "$(grep '"event":"db_connect_failed","connection":"main"' "$T/relay-one.log" | grep -c '"database":"bad"')" 1 \
    "...and logged once (the same failure again waits a minute)"
ok "the line says why" grep -q '"event":"db_connect_failed","connection":"main".*password authentication failed.*"database":"bad"' "$T/relay-one.log"
ok "no password in the log" test "$(grep -c 'horse-battery' "$T/relay-one.log")" = 0
is "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$ADMIN/readyz")" 200 "/readyz ready with bad down"
ok "/readyz lists each database's state" grep -q '"status":"ready","databases":{"good":"ready","secret":"ready","bad":"database not connected: authentication failed","slow":"ready"}' \
    <<<"$(curl -s "http://127.0.0.1:$ADMIN/readyz")"
is "$(succeeded bad)" 0 "bad delivered nothing"
intent() { curl -s "http://127.0.0.1:$ADMIN/v1/intents/$1"; }
code() { curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$ADMIN/v1/intents/$1"; }
ok "/v1/intents/{key}?database=good answers from good" \
    grep -q '"state" *: *"succeeded"' <<<"$(intent 'good:7?database=good')"
is "$(code 'good:7?database=secret')" 404 "...and 404 in another database"
ok "without ?database= it says to name one" grep -q 'add ?database=NAME' <<<"$(intent good:7)"
is "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$ADMIN/v1/intents/good:7?database=Nope")" 400 "a malformed NAME is a 400"
is "$(curl -s -m 10 -o "$T/ui.html" -w '%{http_code}' "http://127.0.0.1:$ADMIN/ui")" 200 \
    "/ui lists the databases"
ok "...each linked to its page, bad with why it cannot be read" \
    grep -q 'href="/ui?database=bad">bad</a></td><td class="text">database not connected: authentication failed' "$T/ui.html"
is "$(curl -s -m 20 -o "$T/ui-bad.html" -w '%{http_code}' "http://127.0.0.1:$ADMIN/ui?database=bad")" 503 \
    "bad's own page: 503, it cannot be reached"
ok "...and says so, without the password" eval 'grep -q "The database cannot be reached" "$T/ui-bad.html" &&
    ! grep -q wrong-horse-battery "$T/ui-bad.html"'

inflight() { dsql slow "SELECT count(*) FROM outbox.intents WHERE state = 'in_flight'"; }
holding() { test "$(inflight)" -gt 0; }
ok "slow holds leases" wait_cmd 60 holding
held=$(inflight)
grep -v '^slow ' "$T/relay.databases" >"$T/relay.databases.new"
echo "late postgresql://itest_relay@127.0.0.1:$PORT/late" >>"$T/relay.databases.new"
mv "$T/relay.databases.new" "$T/relay.databases"
kill -HUP "$RELAY_PID_one"
ok "SIGHUP: late added, slow removed" wait_cmd 20 grep -q '"event":"databases_reloaded","added":1,"removed":1' "$T/relay-one.log"
ok "late drains" wait_cmd 120 drained late 200
ok "slow stops once its deliveries are recorded" wait_cmd 60 grep -q '"event":"database_stopped","database":"slow"' "$T/relay-one.log"
is "$(dsql slow "SELECT count(*) FROM outbox.intents WHERE state = 'in_flight'")" 0 "slow: nothing left in flight"
is "$(dsql slow "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded' AND attempts = 1")" "$(succeeded slow)" \
    "slow: what it delivered succeeded at its first attempt (no take-over)"
ok "slow: at least what it held when removed was delivered" test "$(succeeded slow)" -ge "$held"
is "$(dsql slow "SELECT count(*) FROM outbox.intents WHERE state = 'pending' AND attempts <> 0")" 0 \
    "slow: the rest never claimed"
is "$(dsql slow "SELECT count(*) FROM outbox.intents WHERE state NOT IN ('pending', 'succeeded')")" 0 "slow: no other state"
is "$(dsql slow "SELECT count(*) FROM outbox.relays")" 0 "slow: the relay said goodbye"
is "$(dsql good "SELECT count(*) FROM outbox.relays")" 1 "good: the relay is still there"
is "$(receiver_stat r keys_with_duplicate_effects)/$(receiver_stat slowr keys_with_duplicate_effects)" 0/0 "no key acted on twice"
# A ?database= long-poll is woken by its database's NOTIFY outbox_outcomes
# (the wait is held on "NAME\x1fkey"; the notification names the key).
woken() { local v; v=$(relay_metric "$ADMIN" "outbox_admin_wait_wakeups_total{by=\"$1\"}"); echo "${v:-0}"; }
woken_more() { [ "$(woken "$1")" -gt "$2" ]; }
dsql good "SELECT outbox.enqueue('good:later', 'hook', '{}', NULL, now() + interval '1 hour')" >/dev/null
r0=$(woken recheck)
curl -s -m 90 -o "$T/wait.out" "http://127.0.0.1:$ADMIN/v1/intents/good:later?database=good&wait=60s" &
WAIT_PID=$!
ITEST_PIDS+=("$WAIT_PID")
wait_cmd 30 woken_more recheck "$r0" || bail "the ?database= wait was never parked"
n0=$(woken notify)
dsql good "SELECT pg_notify('outbox_outcomes', '[\"good:later\"]')" >/dev/null
ok "a ?database= wait is woken by its database's NOTIFY" wait_cmd 20 woken_more notify "$n0"
kill "$WAIT_PID" 2>/dev/null
wait "$WAIT_PID" 2>/dev/null
kill -TERM "$RELAY_PID_one"; relay_wait one 30
is "$?" 0 "exit 0"
ok "no sanitizer report" relay_logs_clean
itest_done
