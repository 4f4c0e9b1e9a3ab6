#!/usr/bin/env bash
# Migration 0032 (issue 26) on the user's path: a live outbox at 0031, in a
# database whose locale sorts as words (en_US.UTF-8, what most production
# databases have), with intents in every state, migrated as the schema owner
# while a relay runs:
#   - every row keeps its state, and the operator views (stuck, approvals,
#     target_health) answer as before, with their grants;
#   - the five identifiers are in the "C" collation and so are their indexes;
#   - the relay delivers what was pending, once each; a replayed key is
#     answered from its row; the MCP settle trigger still fires;
#   - the one change users see: ORDER BY key sorts by bytes.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

# en_US.UTF-8 must exist for the database; Debian's locales data has it.
if ! locale -a 2>/dev/null | grep -qi '^en_US\.utf-\?8$'; then
    localedef -i en_US -f UTF-8 en_US.UTF-8 >/dev/null 2>&1 ||
        bail "en_US.UTF-8 is not available (localedef failed)"
    pgcluster_restart "$T/pg" || bail "PostgreSQL did not restart" # a server maps its locales at start
fi

mkdir -p "$T/m31"
cp "$ITEST_ROOT"/migrations/00[0-2][0-9]_*.sql "$ITEST_ROOT"/migrations/003[01]_*.sql "$T/m31/"
psql -X -q -v ON_ERROR_STOP=1 -d postgres \
    -c "CREATE DATABASE wordy OWNER outbox_owner TEMPLATE template0 LOCALE 'en_US.UTF-8'" >/dev/null ||
    bail "cannot create an en_US.UTF-8 database"
WURL="postgresql://outbox_owner@127.0.0.1:$PGPORT/wordy"
"$RELAY_BIN" migrate --db "$WURL" --migrations-dir "$T/m31" >"$T/m31.log" 2>&1
is "$?" 0 "a database at 0031 (en_US.UTF-8)"
wsql() { psql -X -q -tA -v ON_ERROR_STOP=1 -d wordy -c "$1"; }
delivered_to_pay() { test "$(wsql "SELECT count(*) FROM outbox.intents WHERE target = 'pay' AND state = 'succeeded'")" = "$1"; }
is "$(wsql "SELECT datcollate FROM pg_database WHERE datname = current_database()")" "en_US.UTF-8" \
    "its locale sorts as words"

receiver_start plain
wsql "INSERT INTO outbox.targets (name, url) VALUES
        ('pay', 'http://127.0.0.1:$RECV_PORT_plain/effects'),
        ('held', 'http://127.0.0.1:9/')" >/dev/null
wsql "UPDATE outbox.targets SET approval_rule = '\$.amount > 100' WHERE name = 'held'" >/dev/null
# Rows in every state: enqueued as an application does, then set as the relay
# and people would have left them (no relay runs yet).
wsql "SELECT count(*) FROM (SELECT outbox.enqueue(k, t, p::jsonb, r, NULL, o) FROM (VALUES
        ('Run-B:step-1', 'pay', '{\"n\": 1}', 'Run-B', NULL),
        ('run-a:step-1', 'pay', '{\"n\": 2}', 'run-a', 'grp-a'),
        ('run-a:step-2', 'pay', '{\"n\": 3}', 'run-a', 'grp-a'),
        ('z:flight', 'held', '{\"amount\": 1}', NULL, NULL),
        ('z:unknown', 'held', '{\"amount\": 2}', NULL, NULL),
        ('z:await', 'held', '{\"amount\": 500}', NULL, NULL),
        ('z:ok', 'held', '{\"amount\": 3}', NULL, NULL),
        ('z:failed', 'held', '{\"amount\": 4}', NULL, NULL),
        ('z:cancelled', 'held', '{\"amount\": 5}', NULL, NULL)) AS v(k, t, p, r, o)) s" >/dev/null
wsql "UPDATE outbox.intents SET state = 'in_flight', attempts = 1, lease_owner = 'gone',
             lease_expires_at = now() + interval '1 hour', first_attempt_at = now() WHERE key = 'z:flight';
      UPDATE outbox.intents SET state = 'unknown', attempts = 1, ambiguous = true,
             next_attempt_at = 'infinity', first_attempt_at = now() WHERE key = 'z:unknown';
      UPDATE outbox.intents SET state = 'succeeded', attempts = 1, response_status = 200 WHERE key = 'z:ok';
      UPDATE outbox.intents SET state = 'failed', attempts = 1, response_status = 400 WHERE key = 'z:failed';
      UPDATE outbox.intents SET state = 'cancelled' WHERE key = 'z:cancelled'" >/dev/null
is "$(wsql "SELECT string_agg(state::text, ',' ORDER BY state::text) FROM (SELECT DISTINCT state FROM outbox.intents) s")" \
    "awaiting_approval,cancelled,failed,in_flight,pending,succeeded,unknown" "rows in every state"
is "$(wsql "SELECT string_agg(key, ',' ORDER BY key) FROM outbox.intents WHERE target = 'pay'")" \
    "run-a:step-1,run-a:step-2,Run-B:step-1" "before: ORDER BY key sorts as words (en_US.UTF-8)"

snapshot() {
    wsql "SELECT string_agg(format('%s %s %s %s', key, state, attempts, coalesce(ordering_key, '-')), E'\n' ORDER BY id)
            FROM outbox.intents WHERE target <> 'pay'" >"$T/$1.intents"
    wsql "SELECT string_agg(format('%s %s', key, reason), E'\n' ORDER BY key COLLATE \"C\") FROM outbox.stuck" >"$T/$1.stuck"
    wsql "SELECT string_agg(key, E'\n' ORDER BY key COLLATE \"C\") FROM outbox.approvals" >"$T/$1.approvals"
    wsql "SELECT string_agg(format('%s %s %s', target, pending, in_flight), E'\n' ORDER BY target COLLATE \"C\")
            FROM outbox.target_health WHERE target = 'held'" >"$T/$1.health"
    wsql "SELECT string_agg(format('%s %s', c.relname, c.relacl), E'\n' ORDER BY c.relname)
            FROM pg_class c WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind = 'v'" >"$T/$1.grants"
}
snapshot before

# A relay runs during the upgrade (outbox_relay's login), as in a rollout.
psql -X -q -v ON_ERROR_STOP=1 -d wordy -c "GRANT CONNECT ON DATABASE wordy TO itest_relay" >/dev/null
relay_start live --db "postgresql://itest_relay@127.0.0.1:$PGPORT/wordy"
wait_cmd 30 delivered_to_pay 3
is "$?" 0 "the relay of this release delivers at 0031 (a group of two in order, and one more)"

"$RELAY_BIN" migrate --db "$WURL" --migrations-dir "$ITEST_ROOT/migrations" >"$T/m32.log" 2>&1
is "$?" 0 "migrate to 0032 as the schema owner, with the relay running"
is "$(wsql "SELECT string_agg(a.attname || '=' || c.collname, ',' ORDER BY a.attname)
              FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation
             WHERE a.attrelid = 'outbox.intents'::regclass
               AND a.attname IN ('key', 'target', 'ordering_key', 'run_id', 'compensates')")" \
    "compensates=C,key=C,ordering_key=C,run_id=C,target=C" "the five identifiers are in the C collation"
is "$(wsql "SELECT count(*) FROM pg_index i, unnest(i.indcollation) AS u(coll)
             WHERE i.indrelid = 'outbox.intents'::regclass AND u.coll <> 0
               AND u.coll <> 'pg_catalog.\"C\"'::regcollation")" 0 "and so is every index of intents on text"

wsql "SELECT count(*) FROM (SELECT outbox.enqueue(k, 'pay', '{\"n\": 4}'::jsonb, 'run-a', NULL, o) FROM (VALUES
        ('run-a:step-3', 'grp-a'), ('run-a:step-4', 'grp-a'), ('Run-C:step-1', NULL)) AS v(k, o)) s" >/dev/null
wait_cmd 30 delivered_to_pay 6
is "$?" 0 "after the upgrade the running relay delivers what is enqueued, the group in order"
is "$(wsql "SELECT string_agg(i.key, ',' ORDER BY a.at, a.id) FROM outbox.intents i JOIN outbox.attempts a ON a.intent_id = i.id
             WHERE i.ordering_key = 'grp-a'")" "run-a:step-1,run-a:step-2,run-a:step-3,run-a:step-4" \
    "... one attempt each, in the group's order"
snapshot after
for f in stuck approvals health grants; do
    is "$(diff "$T/before.$f" "$T/after.$f" && echo same)" same "the $f view answers as before (or its grants)"
done
is "$(diff "$T/before.intents" "$T/after.intents" && echo same)" same \
    "the rows no relay touched keep their states and attempts"
is "$(wsql "SELECT status || ' ' || inserted FROM outbox.enqueue('z:ok', 'held', '{\"amount\": 3}')")" "succeeded false" \
    "a replayed key is answered from its row"
is "$(wsql "SELECT count(*) FROM outbox.intents")" 12 "... and no row was added"
is "$(wsql "SELECT string_agg(key, ',' ORDER BY key) FROM outbox.intents WHERE target = 'pay'")" \
    "Run-B:step-1,Run-C:step-1,run-a:step-1,run-a:step-2,run-a:step-3,run-a:step-4" \
    "after: ORDER BY key sorts by bytes (upper case first)"
is "$(wsql "SELECT tgname FROM pg_trigger WHERE tgrelid = 'outbox.intents'::regclass AND tgname = 'intents_mcp_settled'")" \
    intents_mcp_settled "the MCP settle trigger is there again"
is "$(receiver_stat plain effects_total):$(receiver_stat plain deliveries_total)" "6:6" \
    "six effects at the receiver, one delivery each"
kill -TERM "$RELAY_PID_live"
relay_wait live 30
is "$?" 0 "the relay exits 0"
ok "no sanitizer report" relay_logs_clean
itest_done
