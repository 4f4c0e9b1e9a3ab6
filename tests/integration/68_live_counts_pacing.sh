#!/usr/bin/env bash
# The live counts of /metrics hold the claiming connection no more than a
# twentieth of the time (issue 26): outbox.live_counts reads every live row,
# 0.5 ms per thousand pending rows, so a backlog of millions makes it take
# seconds on the connection that claims. Here the count is made slow on
# purpose (the function sleeps 0.6 s and counts its calls in a sequence):
#   - a relay with its admin port open refreshes the gauges every 5 s while
#     the count is quick (over a window of W s: at least 1, at most W/5 + 1);
#   - once a count takes 0.6 s the next waits 12 s (over W s: at most
#     W/12 + 1, where every 5 s would make W/5).
# Each window is measured, and only the bound that a slow machine loosens is
# asserted (a slower loop makes fewer calls, never more).
#   - the gauges still report what the table holds, and deliveries go on.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start plain
target_add t "http://127.0.0.1:$RECV_PORT_plain/effects"
enqueue_many t "pace:" 3
sql "CREATE SEQUENCE public.live_counts_calls; GRANT USAGE ON SEQUENCE public.live_counts_calls TO PUBLIC" >/dev/null

# The calls are counted by a wrapper, made before the relay connects (its
# prepared statement names the function); the sleep is a setting of the
# wrapper, 0 for now.
sql "ALTER FUNCTION outbox.live_counts() RENAME TO live_counts_real" >/dev/null
sql "CREATE FUNCTION outbox.live_counts() RETURNS TABLE(state outbox.intent_state, intents bigint, oldest_due_age_s double precision)
       LANGUAGE plpgsql STABLE SECURITY DEFINER
       SET search_path = pg_catalog, pg_temp SET outbox_test.live_counts_sleep = '0' AS \$\$
     BEGIN
         PERFORM nextval('public.live_counts_calls');
         PERFORM pg_sleep(current_setting('outbox_test.live_counts_sleep')::float8);
         RETURN QUERY SELECT * FROM outbox.live_counts_real();
     END \$\$;
     GRANT EXECUTE ON FUNCTION outbox.live_counts() TO outbox_relay" >/dev/null

relay_start a --admin-listen 127.0.0.1:0
ADMIN=$(relay_admin_port a)
[ -n "$ADMIN" ] || bail "the relay's admin port did not open"
metric() { curl -s "http://127.0.0.1:$ADMIN/metrics" | awk -v n="$1" 'index($0, n " ") == 1 { print $2 }'; }
calls() { sql "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM public.live_counts_calls"; }
nothing_pending_on_metrics() { test "$(metric 'outbox_intents{state="pending"}')" = 0; }
called_since() { test "$(($(calls) - $1))" -ge 1; }

ok "the deliveries succeed" wait_for 15 "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded'" 3
ok "the gauges report the table" wait_cmd 15 nothing_pending_on_metrics
c0=$(calls) t0=$(date +%s)
sleep 11
quick=$(($(calls) - c0)) w=$(($(date +%s) - t0))
ok "quick counts come every 5 s: $quick calls in $w s" test "$quick" -ge 1 -a "$quick" -le $((w / 5 + 1))

# Slow counts from the next call on.
sql "ALTER FUNCTION outbox.live_counts() SET outbox_test.live_counts_sleep = '0.6'" >/dev/null
c0=$(calls)
ok "a slow count starts" wait_cmd 10 called_since "$c0"
c1=$(calls) t1=$(date +%s)
sleep 22
slow=$(($(calls) - c1)) w=$(($(date +%s) - t1))
ok "after a count that took 0.6 s the next waits 12 s: $slow calls in $w s (every 5 s: $((w / 5)))" \
    test "$slow" -le $((w / 12 + 1))
enqueue_many t "pace-late:" 2
ok "deliveries go on meanwhile" wait_for 15 "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded'" 5
ok "the gauges still report the table" wait_cmd 30 nothing_pending_on_metrics
is "$(metric outbox_live_counts_failures_total)" "0" "no refresh failed"

kill -TERM "$RELAY_PID_a"
relay_wait a 20
is "$?" "0" "the relay stops cleanly"
itest_done
