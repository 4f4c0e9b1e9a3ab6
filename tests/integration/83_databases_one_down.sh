#!/usr/bin/env bash
# One relay, four databases, one of them in a cluster of its own that is
# stopped with pg_ctl stop -m immediate mid-drain (a crash: no checkpoint, no
# goodbye). The other three keep draining to the end while it is down (their
# claims, records and wake-ups never wait for it); /readyz stays ready; its
# outcomes wait in memory; restarted, it resumes. In every database: every
# intent succeeded once, 0 duplicate effects, 0 lost.
. "$(dirname "$0")/../lib/itest.sh"
. "$(dirname "$0")/../lib/multidb.sh"
itest_setup
# The crashed cluster commits durably: pgcluster's synchronous_commit=off would
# lose the last claims and records in a crash, and their rows be sent again.
multidb_cluster "$T/pg2" synchronous_commit=on

for name in a b c; do multidb_add "$name"; done
multidb_add d "$T/pg2"
multidb_migrate

receiver_start r --delay-ms 20
N=2000
for name in a b c d; do
    dtarget "$name" hook "http://127.0.0.1:$RECV_PORT_r/effects"
    denqueue "$name" hook $N
done

succeeded() { dsql "$1" "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded'"; }
at_least() { test "$(succeeded "$1")" -ge "$2"; }
relay_start one --databases "$T/relay.databases" --max-in-flight 48 --batch-size 16 \
    --admin-listen 127.0.0.1:0 --reconnect-max-ms 500
ADMIN=$(relay_admin_port one)
[ -n "$ADMIN" ] || bail "the admin port did not open"

ok "d drains with the others" wait_cmd 120 at_least d 200
multidb_crash "$T/pg2" || bail "pg_ctl stop -m immediate failed"
left=$(( 3 * N - $(succeeded a) - $(succeeded b) - $(succeeded c) ))
echo "# d stopped; $left intents left in a, b and c"
ok "a, b and c still had work when d went down" test "$left" -gt 600
for name in a b c; do
    ok "$name drains to the end while d is down" wait_cmd 300 at_least "$name" $N
done
ok "d is still down meanwhile" test ! -f "$T/pg2/data/postmaster.pid"
is "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$ADMIN/readyz")" 200 \
    "/readyz ready while one database is down"
ok "the relay saw d go" grep -q '"event":"db_lost","connection":"main".*"database":"d"' "$T/relay-one.log"
is "$(grep '"event":"db_lost"' "$T/relay-one.log" | grep -vc '"database":"d"')" 0 "no other database lost a connection"

pgcluster_restart "$T/pg2" || bail "d did not restart"
ok "d resumes and drains" wait_cmd 300 at_least d $N
for name in a b c d; do
    read -r keys effects dups <<<"$(effects_of "$name" r)"
    is "$keys/$effects/$dups" "$N/$N/0" "$name: $N keys acted on once each, 0 duplicate, 0 lost"
    is "$(dsql "$name" "SELECT count(*) FROM outbox.intents WHERE state <> 'succeeded'")" 0 "$name: every intent succeeded"
done
kill -TERM "$RELAY_PID_one"; relay_wait one 30
is "$?" 0 "exit 0"
ok "no sanitizer report" relay_logs_clean
itest_done
