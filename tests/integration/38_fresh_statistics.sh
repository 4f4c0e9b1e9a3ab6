#!/usr/bin/env bash
# A new outbox under load: intents grows from empty while a relay with default
# options delivers (migration 0019). Autovacuum is off for intents here, so only
# the relay's heartbeat can refresh its statistics: it must analyze the grown
# table (without it, record keeps a plan made for a table of a few rows and
# scans the whole table for every batch), and every intent is delivered once.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start plain
target_add fresh "http://127.0.0.1:$RECV_PORT_plain/effects"
sql "ALTER TABLE outbox.intents SET (autovacuum_enabled = false)" >/dev/null
sql "ANALYZE outbox.intents" >/dev/null
sql "SELECT pg_stat_reset_single_table_counters('outbox.intents'::regclass)" >/dev/null
is "$(sql "SELECT relpages || ':' || outbox.refresh_statistics() FROM pg_class WHERE oid = 'outbox.intents'::regclass")" \
    "0:false" "an empty outbox with the statistics of an empty table: nothing to refresh"

relay_start one
for round in 1 2 3 4; do
    enqueue_many fresh "fresh:$round:" 5000
    sleep 1
done
ok "20,000 intents enqueued while the relay ran are delivered" \
    wait_for 120 "SELECT count(*) FROM outbox.intents WHERE state = 'succeeded'" 20000
ok "the relay's heartbeat analyzed the grown table (autovacuum is off)" \
    wait_for 30 "SELECT analyze_count > 0 FROM pg_stat_user_tables WHERE relid = 'outbox.intents'::regclass" t
is "$(sql "SELECT autoanalyze_count FROM pg_stat_user_tables WHERE relid = 'outbox.intents'::regclass")" 0 \
    "and not autovacuum"
ok "the statistics are no more than half as old as the table (its pages at most 2 x relpages + 128)" \
    wait_for 30 "SELECT pg_relation_size(oid) / current_setting('block_size')::int <= 2 * relpages + 128 FROM pg_class WHERE oid = 'outbox.intents'::regclass" t
# A plan is made from the density seen at the last ANALYZE (reltuples over
# relpages) scaled to the table's current size. The heartbeat analyzes again
# only once the table has more than doubled, and delivery's updates double the
# pages without adding live rows, so reltuples alone may hold half of the rows:
# the assertion is on the planner's estimate, the figure a plan is made from.
planned_rows=$(sql "EXPLAIN SELECT * FROM outbox.intents" | sed -n '1s/.* rows=\([0-9]*\) .*/\1/p')
echo "# the planner's estimate for a scan of intents: ${planned_rows:-none} rows ($(sql "SELECT relpages || ' pages, ' || reltuples::bigint || ' rows at the last ANALYZE; ' || pg_relation_size(oid) / current_setting('block_size')::int || ' pages now' FROM pg_class WHERE oid = 'outbox.intents'::regclass"))"
ok "the planner's estimate counts the rows the table now has (10,000 to 40,000)" \
    test "${planned_rows:-0}" -ge 10000 -a "${planned_rows:-0}" -le 40000
is "$(receiver_stat plain effects_total):$(receiver_stat plain deliveries_total)" "20000:20000" \
    "20,000 effects at the receiver, one delivery each"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE attempts <> 1")" 0 "every intent took one attempt"
kill -TERM "$RELAY_PID_one"
relay_wait one 30
is "$?" 0 "SIGTERM: the relay exits 0"
ok "no sanitizer report" relay_logs_clean
itest_done
