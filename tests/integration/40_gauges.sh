#!/usr/bin/env bash
# Every live gauge of /metrics against the rows it counts (issue 22): a relay
# running as a login that has only outbox_relay, rows in each live state that
# it will not touch (a disabled target, a lease held by a relay that is not
# running, an unknown with no status URL, an intent awaiting approval):
#   - outbox_intents{state} equals count(*) of that state, for all four;
#   - outbox_oldest_pending_age_seconds is the age of the oldest due row;
#   - the gauges follow the table when it changes;
#   - a refresh that fails is logged (live_counts_failed, with the error),
#     counted (outbox_live_counts_failures_total) and leaves the gauges out
#     rather than at 0; they come back when the refresh answers again.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

sql "CREATE ROLE gauge_relay LOGIN; GRANT outbox_relay TO gauge_relay" >/dev/null
target_add live http://127.0.0.1:9/never enabled=true
target_add gate http://127.0.0.1:9/never "approval_rule='\$.amount > 100'"
enqueue_many live g:p 5
enqueue_many live g:x 7
sql "SELECT outbox.enqueue('g:a' || g, 'gate', jsonb_build_object('amount', 1000 + g)) FROM generate_series(1, 3) g" >/dev/null
sql "UPDATE outbox.targets SET enabled = false WHERE name = 'live'" >/dev/null
sql "UPDATE outbox.intents SET state = 'in_flight', lease_owner = 'gone-relay', attempts = 1,
                               lease_expires_at = now() + interval '1 hour'
      WHERE key IN ('g:x1', 'g:x2', 'g:x3', 'g:x4')" >/dev/null
sql "UPDATE outbox.intents SET state = 'unknown', ambiguous = true, attempts = 1,
                               next_attempt_at = now() + interval '1 hour'
      WHERE key IN ('g:x5', 'g:x6')" >/dev/null
sql "UPDATE outbox.intents SET state = 'succeeded', attempts = 1, response_status = 200 WHERE key = 'g:x7'" >/dev/null
sql "UPDATE outbox.intents SET next_attempt_at = now() - interval '15 minutes' WHERE key = 'g:p1'" >/dev/null

relay_start a --db "postgresql://gauge_relay@127.0.0.1:$PGPORT/postgres" --admin-listen 127.0.0.1:0
ADMIN=$(relay_admin_port a)
[ -n "$ADMIN" ] || bail "the relay's admin port did not open"

metric() { # metric NAME [LABELS] → the value, or nothing when absent
    local series=$1
    [ -n "${2:-}" ] && series="$1{$2}"
    curl -s "http://127.0.0.1:$ADMIN/metrics" | awk -v n="$series" 'index($0, n " ") == 1 { print $2 }'
}
counted() { sql "SELECT count(*) FROM outbox.intents WHERE state = '$1'"; }
gauges_match() {
    local s
    for s in pending in_flight unknown awaiting_approval; do
        [ "$(metric outbox_intents "state=\"$s\"")" = "$(counted "$s")" ] || return 1
    done
}

wait_cmd 15 gauges_match
for s in pending in_flight unknown awaiting_approval; do
    is "$(metric outbox_intents "state=\"$s\"")" "$(counted "$s")" "outbox_intents{state=\"$s\"} = the rows in $s"
done
is "$(counted pending)/$(counted in_flight)/$(counted unknown)/$(counted awaiting_approval)" "5/4/2/3" \
    "the table holds 5 pending, 4 in flight, 2 unknown, 3 awaiting approval (not vacuous)"
age=$(metric outbox_oldest_pending_age_seconds)
db_age=$(sql "SELECT extract(epoch FROM now() - min(next_attempt_at))::int FROM outbox.intents
               WHERE state = 'pending' AND next_attempt_at <= now()")
# Orders, not a freshness window: the row was made 15 minutes due before the
# gauge was refreshed (so at least 899 s), and the gauge was read before the
# database's own age (so not above it, but for rounding).
ok "outbox_oldest_pending_age_seconds ($age) is the oldest due row's age ($db_age s), as of its refresh" \
    awk -v a="$age" -v b="$db_age" 'BEGIN { exit !(a != "" && a >= 899 && a <= b + 1) }'
is "$(metric outbox_live_counts_failures_total)" "0" "no refresh failed"

# The table changes: the gauges follow within a refresh or two.
sql "UPDATE outbox.intents SET state = 'unknown', lease_owner = NULL, lease_expires_at = NULL,
                               next_attempt_at = now() + interval '1 hour'
      WHERE key IN ('g:x1', 'g:x2')" >/dev/null
ok "after two in-flight rows become unknown, the gauges follow (2 in flight, 4 unknown)" \
    wait_cmd 15 bash -c "[ \"\$(curl -s http://127.0.0.1:$ADMIN/metrics | grep -c -e '^outbox_intents{state=\"in_flight\"} 2\$' \
        -e '^outbox_intents{state=\"unknown\"} 4\$')\" = 2 ]"

# A refresh that fails: logged, counted, and no gauge reads 0 meanwhile.
sql "REVOKE EXECUTE ON FUNCTION outbox.live_counts() FROM outbox_relay" >/dev/null
ok "a failing refresh is logged with its error" \
    wait_cmd 15 grep -q '"event":"live_counts_failed".*permission denied for function live_counts' "$T/relay-a.log"
ok "it is counted in outbox_live_counts_failures_total" \
    wait_cmd 5 bash -c "[ \"\$(curl -s http://127.0.0.1:$ADMIN/metrics | awk '\$1 == \"outbox_live_counts_failures_total\" { print \$2 }')\" -ge 1 ]"
is "$(metric outbox_intents 'state="pending"')|$(metric outbox_oldest_pending_age_seconds)" "|" \
    "while it fails, the gauges are absent, not 0"
sleep 6
is "$(grep -c '"event":"live_counts_failed"' "$T/relay-a.log")" "1" "a refresh failing every 5 s is logged once a minute, not each time"
sql "GRANT EXECUTE ON FUNCTION outbox.live_counts() TO outbox_relay" >/dev/null
ok "when it answers again the gauges come back, equal to the table" wait_cmd 15 gauges_match
ok "and the recovery is logged" grep -q '"event":"live_counts_recovered"' "$T/relay-a.log"

kill -TERM "$RELAY_PID_a"
relay_wait a 20
is "$?" "0" "the relay stops cleanly"
itest_done
