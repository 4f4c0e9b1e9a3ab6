#!/usr/bin/env bash
# Issue 24, item 2: one transient database error must not drop a delivered
# outcome. An application holds the intent's row lock (FOR UPDATE in an open
# transaction) longer than the record's statement timeout while the target
# answers 200: the record is cancelled (57014), and must be kept and written
# again once the lock is gone — not dropped and later taken over as "may have
# executed". The database's default isolation is REPEATABLE READ, which the
# relay's sessions must not inherit.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

sql "ALTER DATABASE postgres SET default_transaction_isolation = 'repeatable read'" >/dev/null
receiver_start r --delay-ms 1500
target_add t "http://127.0.0.1:$RECV_PORT_r/act" timeout_ms=5000
sql "SELECT outbox.enqueue('held:1', 't', '{\"n\": 1}')" >/dev/null
# --query-timeout-ms 1000: the server cancels a statement after 500 ms.
relay_start a --query-timeout-ms 1000 --lease-ms 4000 --poll-interval-ms 100 --admin-listen 127.0.0.1:0
ADMIN=$(relay_admin_port a)
ok "the intent is claimed" wait_for 10 "SELECT state FROM outbox.intents WHERE key = 'held:1'" in_flight
# While the target works (1.5 s), take the row's lock and keep it for 4 s.
psql -X -q -c "BEGIN; SELECT 1 FROM outbox.intents WHERE key = 'held:1' FOR UPDATE; SELECT pg_sleep(4); COMMIT;" \
    >/dev/null 2>&1 &
locker=$!
ok "the record waits for the lock, is cancelled, and is retried" \
    wait_cmd 10 grep -q '"event":"record_retry","sqlstate":"57014"' "$T/relay-a.log"
wait "$locker"
ok "once the lock is gone the outcome is recorded: succeeded" \
    wait_for 20 "SELECT state FROM outbox.intents WHERE key = 'held:1'" succeeded
is "$(sql "SELECT attempts || ' ' || response_status FROM outbox.intents WHERE key = 'held:1'")" "1 200" \
    "one attempt, the target's 200 kept"
is "$(sql "SELECT count(*) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id WHERE i.key = 'held:1'")" \
    1 "one history row"
is "$(receiver_stat r effects_total)" 1 "one effect at the target"
ok "nothing was dropped" bash -c "! grep -q '\"event\":\"record_dropped\"' '$T/relay-a.log'"
ok "nothing was taken over" bash -c "! grep -q '\"event\":\"take_over\"' '$T/relay-a.log'"
retries=$(curl -s "http://127.0.0.1:$ADMIN/metrics" | awk '$1 == "outbox_record_retries_total" { print $2 }')
ok "outbox_record_retries_total counts the retries ($retries)" test "${retries:-0}" -ge 1
is "$retries" "$(grep -c '"event":"record_retry"' "$T/relay-a.log")" "and equals the record_retry lines"

# A refusal that is about the outcome itself is still halved and dropped
# (27_record_hardening covers it); a deadlock (40P01) or serialization
# failure (40001) is transient like a timeout: the classification is unit-free
# SQLSTATE prefixes in relay.c, covered by the next two checks' class.
sql "SELECT outbox.enqueue('held:2', 't', '{\"n\": 2}')" >/dev/null
ok "the next intent goes through as usual" wait_for 20 "SELECT state FROM outbox.intents WHERE key = 'held:2'" succeeded
kill -TERM "$RELAY_PID_a"
relay_wait a 20
is "$?" 0 "the relay stops cleanly"
itest_done
