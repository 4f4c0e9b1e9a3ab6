#!/usr/bin/env bash
# Retention without re-execution (migrations/0012_retention.sql).
#   A. 200 delivered intents on a target with retain_for = 1 second are
#      pruned by outbox.prune(): none of their intents or attempts rows is
#      left; outcome of a pruned key still says succeeded; enqueueing all 200
#      again with the same arguments delivers nothing (the receiver counts one
#      effect per key); one of them with other arguments is refused (OR001).
#   B. The relay prunes by itself (--prune-interval-ms): a log line per run,
#      metrics, and one relay at a time; outbox-relay prune --dry-run lists,
#      outbox-relay prune prunes.
#   C. The migration from the schema before 0012 keeps every row in every
#      state (a database filled through 0011, then migrated), and the relay
#      delivers its pending rows afterwards.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start r
target_add keyed "http://127.0.0.1:$RECV_PORT_r/act" "retain_for='1 second'" "dedupe_window='1 hour'"

# ---------------------------------------------------------------- A. prune, then the same keys again
enqueue_many keyed "p:" 200
relay_start one --poll-interval-ms 200 --prune-interval-ms 0 --admin-listen 127.0.0.1:0
ok "A: 200 delivered" wait_for 20 "SELECT count(*) FROM outbox.intents WHERE key LIKE 'p:%' AND state = 'succeeded'" 200
sleep 1.2
is "$(sql "SELECT outbox.prune()")" 200 "A: outbox.prune() prunes the 200"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE key LIKE 'p:%'")" 0 "A: no intents row of theirs is left"
is "$(sql "SELECT count(*) FROM outbox.attempts")" 0 "A: no attempts row of theirs is left"
is "$(sql "SELECT status || ' ' || response_status FROM outbox.outcome('p:17')")" "succeeded 200" \
    "A: outcome of a pruned key still says succeeded"
ok "A: and that its details were pruned" \
    bash -c "psql -X -tA -c \"SELECT message FROM outbox.outcome('p:17')\" | grep -q 'its details were pruned at'"
again=$(sql "SELECT string_agg(DISTINCT r.status || '/' || r.inserted, ',')
               FROM generate_series(1, 200) g,
                    LATERAL outbox.enqueue('p:' || g, 'keyed', jsonb_build_object('n', g)) r")
is "$again" "succeeded/false" "A: enqueueing the 200 again answers succeeded, inserts nothing"
sleep 1
is "$(sql "SELECT count(*) FROM outbox.intents WHERE key LIKE 'p:%'")" 0 "A: no intent is created for them"
is "$(receiver_stat r deliveries_total)" 200 "A: the receiver got 200 requests, no more"
effects_table r
is "$(sql "SELECT count(*) || ' ' || max(n) FROM effects WHERE key LIKE 'p:%'")" "200 1" \
    "A: one effect per key at the receiver"
err=$(psql -X -q -tA -c "SELECT outbox.enqueue('p:17', 'keyed', '{\"n\": 18}')" 2>&1)
ok "A: other arguments are refused with OR001 ($(head -1 <<<"$err"))" \
    grep -qE "key 'p:17' was already used with a different payload \(its intent was pruned at [0-9-]{10}T[0-9:]{8}Z: the fields that differ are no longer known\)" <<<"$err"
code=$(psql -X -q -tA -c "\\set VERBOSITY verbose" -c "SELECT outbox.enqueue('p:17', 'keyed', '{\"n\": 18}')" 2>&1 | sed -n 's/^ERROR:  \(OR[0-9]*\):.*/\1/p')
is "$code" "OR001" "A: SQLSTATE OR001"

# ---------------------------------------------------------------- B. the relay and the CLI prune
kill -TERM "$RELAY_PID_one"; relay_wait one 30
is "$?" 0 "B: relay one exits 0"
relay_start two --poll-interval-ms 200 --prune-interval-ms 500 --admin-listen 127.0.0.1:0
relay_start three --poll-interval-ms 200 --prune-interval-ms 500
port=$(relay_admin_port two)
enqueue_many keyed "q:" 100
ok "B: 100 more delivered" wait_for 20 "SELECT count(*) FROM outbox.intents WHERE key LIKE 'q:%' AND state = 'succeeded'" 100
ok "B: the relays prune them by themselves" wait_for 10 "SELECT count(*) FROM outbox.intents WHERE key LIKE 'q:%'" 0
is "$(sql "SELECT count(*) FROM outbox.tombstones")" 300 "B: 300 tombstones"
runs=$(cat "$T/relay-two.log" "$T/relay-three.log" | grep -c '"event":"prune_run"')
ok "B: a log line per prune run ($runs)" test "$runs" -ge 2
pruned_logged=$(cat "$T/relay-two.log" "$T/relay-three.log" | sed -n 's/.*"event":"prune_run",.*"pruned":\([0-9]*\).*/\1/p' | awk '{ n += $1 } END { print n + 0 }')
is "$pruned_logged" 100 "B: the log lines of both relays add up to the 100 pruned (one relay at a time)"
metrics=$(curl -s "http://127.0.0.1:$port/metrics")
ok "B: /metrics has outbox_pruned_total" grep -q '^outbox_pruned_total [0-9]' <<<"$metrics"
# Relay two's runs either pruned (done) or found relay three pruning (locked_out).
runs_two=$(sed -n 's/^outbox_prune_runs_total{result="\(done\|locked_out\)"} \([0-9]*\)$/\2/p' <<<"$metrics" |
           awk '{ n += $1 } END { print n + 0 }')
ok "B: /metrics counts relay two's prune runs, done or locked out ($runs_two)" test "$runs_two" -ge 2
ok "B: /metrics has the time of the last successful run" \
    grep -qE '^outbox_prune_last_success_timestamp_seconds [0-9]' <<<"$metrics"
for r in two three; do pid_var=RELAY_PID_$r; kill -TERM "${!pid_var}"; done
for r in two three; do relay_wait $r 30; is "$?" 0 "B: relay $r exits 0"; done

sql "INSERT INTO outbox.targets (name, url, retain_for) VALUES ('other', 'http://127.0.0.1:9/x', '1 second')" >/dev/null
sql "SELECT outbox.enqueue('d:' || g, 'other', '{}') FROM generate_series(1, 7) g" >/dev/null
sql "UPDATE outbox.intents SET state = 'cancelled', updated_at = now() - interval '1 minute' WHERE key LIKE 'd:%'" >/dev/null
dry=$("$RELAY_BIN" prune --dry-run 2>&1)
echo "$dry" | sed 's/^/# /'
ok "B: prune --dry-run lists the target and state" grep -qE '^other +cancelled +7 ' <<<"$dry"
ok "B: prune --dry-run gives the total" grep -q '^dry run: would prune 7 intents and forget 0 expired keys$' <<<"$dry"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE key LIKE 'd:%'")" 7 "B: the dry run removed nothing"
out=$("$RELAY_BIN" prune --prune-batch 3 2>&1)
is "$out" "pruned 7 intents and forgot 0 expired keys (3 transactions)" "B: prune in batches of 3"
is "$(sql "SELECT count(*) FROM outbox.intents WHERE key LIKE 'd:%'")" 0 "B: they are gone"
json=$("$RELAY_BIN" prune --json 2>&1 | tr -d ' \n')
is "$json" '{"pruned":0,"forgotten":0,"steps":1,"locked_out":false}' "B: prune --json"

# ---------------------------------------------------------------- C. the migration from the schema before 0012
mkdir -p "$T/m11"
cp "$ITEST_ROOT"/migrations/00{01,02,03,04,05,06,07,08,09,10,11}_*.sql "$T/m11/"
old_url=$(pgcluster_owner_db old) || bail "cannot create database old"
"$RELAY_BIN" migrate --db "$old_url" --migrations-dir "$T/m11" >"$T/m11.log" 2>&1
is "$?" 0 "C: a database at 0011"
osql() { psql -X -q -tA -v ON_ERROR_STOP=1 -d old -c "$1"; }
osql "INSERT INTO outbox.targets (name, url) VALUES ('t', 'http://127.0.0.1:$RECV_PORT_r/act');
      INSERT INTO outbox.targets (name, url, on_mismatch, approval_rule)
      VALUES ('k', 'http://127.0.0.1:$RECV_PORT_r/act', 'keep_original', '\$.amount > 100')" >/dev/null
osql "SELECT outbox.enqueue('old:' || g, 't', jsonb_build_object('n', g)) FROM generate_series(1, 70) g" >/dev/null
osql "SELECT outbox.enqueue('old:approve', 'k', '{\"amount\": 500}')" >/dev/null
osql "SELECT outbox.enqueue('old:keep', 'k', '{\"amount\": 1}'); SELECT outbox.enqueue('old:keep', 'k', '{\"amount\": 2}')" >/dev/null
# Spread the rows over every state, with history, as a relay would leave them.
osql "UPDATE outbox.intents SET
        state = (ARRAY['pending','in_flight','succeeded','failed','unknown','cancelled','pending'])[1 + (substr(key, 5)::int % 7)]::outbox.intent_state,
        attempts = 1 + (substr(key, 5)::int % 3),
        lease_owner = CASE WHEN substr(key, 5)::int % 7 = 1 THEN 'gone-relay' END,
        lease_expires_at = CASE WHEN substr(key, 5)::int % 7 = 1 THEN now() + interval '1 hour' END,
        ambiguous = substr(key, 5)::int % 7 = 4,
        response_status = CASE WHEN substr(key, 5)::int % 7 IN (2, 3) THEN 200 + substr(key, 5)::int END,
        updated_at = now() - (substr(key, 5)::int || ' days')::interval
      WHERE key ~ '^old:[0-9]+\$'" >/dev/null
osql "INSERT INTO outbox.attempts (intent_id, attempt, relay, class, request_sent, http_status)
      SELECT id, a, 'old-relay', 'ambiguous', true, 503 FROM outbox.intents, generate_series(1, attempts) a
       WHERE key LIKE 'old:%'" >/dev/null
osql "SELECT outbox.compensate('old:2', 'old:2:undo', 't', '{\"undo\": 2}')" >/dev/null
snapshot() {
    psql -X -q -tA -d old -c "SELECT md5(string_agg(concat_ws('|', id, key, target, payload, fingerprint, state, attempts,
                next_attempt_at, lease_owner, lease_expires_at, ambiguous, first_attempt_at, response_status,
                response_body, last_error, run_id, compensates, mismatches, created_at, updated_at), E'\n' ORDER BY id))
              || ' ' || count(*) || ' ' || (SELECT count(*) FROM outbox.attempts) || ' '
              || (SELECT count(*) FROM outbox.mismatches)
              FROM outbox.intents"
}
states_before=$(psql -X -q -tA -d old -c "SELECT string_agg(state || '=' || n, ' ' ORDER BY state) FROM (SELECT state, count(*) n FROM outbox.intents GROUP BY 1) x")
before=$(snapshot)
"$RELAY_BIN" migrate --db "$old_url" --migrations-dir "$ITEST_ROOT/migrations" >"$T/m12.log" 2>&1
is "$?" 0 "C: migrate applies 0012 and later to the filled database"
after=$(snapshot)
echo "# states: $states_before"
is "$after" "$before" "C: every intent, attempt and mismatch is kept, unchanged"
is "$(psql -X -q -tA -d old -c "SELECT count(DISTINCT state) FROM outbox.intents")" 7 "C: rows in all seven states"
is "$(psql -X -q -tA -d old -c "SELECT retain_for || ' ' || dedupe_window FROM outbox.targets WHERE name = 't'")" \
    "7 days 30 days" "C: existing targets get the default retention"
is "$(psql -X -q -tA -d old -c "SELECT count(*) FROM outbox.tombstones")" 0 "C: nothing is pruned by the migration"
due=$(psql -X -q -tA -d old -c "SELECT count(*) FROM outbox.intents WHERE state = 'pending'")
relay_start four --db "dbname=old" --poll-interval-ms 200 --prune-interval-ms 0
ok "C: the relay delivers the $due pending rows after the migration" bash -c "for i in \$(seq 1 200); do
    [ \"\$(psql -X -q -tA -d old -c \"SELECT count(*) FROM outbox.intents WHERE state = 'pending'\")\" = 0 ] && exit 0
    sleep 0.1; done; exit 1"
kill -TERM "$RELAY_PID_four"; relay_wait four 30
is "$?" 0 "C: relay four exits 0"

ok "no sanitizer report" relay_logs_clean
itest_done
