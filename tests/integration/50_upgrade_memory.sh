#!/usr/bin/env bash
# Issue 24, items 1 and 5, on the user's path (migrate as the schema owner,
# outbox-relay prune as an operator would run it):
#   A. a database at 0011 with an intent settled 40 days before the upgrade:
#      after migrate to the latest schema and a prune, its key still answers
#      "succeeded, inserted=f" (0012's retention did forget it at once); with
#      targets.forget_pre_retention an admin opts in to forgetting it;
#   B. a failed step of an ordering group, 400 days old, with no later step:
#      the prune keeps it, and the group's next step waits behind it, until
#      a person cancels the failed step.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

# ---------------------------------------------------------------- A
mkdir -p "$T/m11"
cp "$ITEST_ROOT"/migrations/00{01,02,03,04,05,06,07,08,09,10,11}_*.sql "$T/m11/"
old=$(pgcluster_owner_db old) || bail "cannot create database old"
"$RELAY_BIN" migrate --db "$old" --migrations-dir "$T/m11" >"$T/m11.log" 2>&1
is "$?" 0 "A: a database at 0011"
osql() { psql -X -q -tA -v ON_ERROR_STOP=1 -d old -c "$1"; }
osql "INSERT INTO outbox.targets (name, url) VALUES ('t', 'http://127.0.0.1:9/'), ('u', 'http://127.0.0.1:9/')" >/dev/null
osql "SELECT outbox.enqueue('old:1', 't', '{\"n\": 1}'), outbox.enqueue('old:2', 'u', '{\"n\": 2}')" >/dev/null
osql "UPDATE outbox.intents SET state = 'succeeded', attempts = 1, response_status = 200,
             updated_at = now() - interval '40 days', created_at = now() - interval '40 days'" >/dev/null
is "$(osql "SELECT status || ' ' || inserted FROM outbox.enqueue('old:1', 't', '{\"n\": 1}')")" "succeeded false" \
    "A: before the upgrade the key is remembered"
"$RELAY_BIN" migrate --db "$old" --migrations-dir "$ITEST_ROOT/migrations" >"$T/mall.log" 2>&1
is "$?" 0 "A: migrate to the latest schema"
osql "UPDATE outbox.targets SET forget_pre_retention = true WHERE name = 'u'" >/dev/null
out=$(PGDATABASE=old "$RELAY_BIN" prune --db "postgresql://postgres@127.0.0.1:$PGPORT/old" 2>&1)
echo "# prune: $out"
is "$(osql "SELECT count(*) FROM outbox.intents")" 0 "A: the prune pruned both old intents (their details)"
is "$(osql "SELECT status || ' ' || inserted FROM outbox.enqueue('old:1', 't', '{\"n\": 1}')")" "succeeded false" \
    "A: after the upgrade and a prune, the key of target t is still remembered: nothing is executed again"
is "$(osql "SELECT forget_at = 'infinity' FROM outbox.tombstones WHERE key_hash = outbox.key_hash('old:1')")" t \
    "A: its tombstone is kept for good"
is "$(osql "SELECT status || ' ' || inserted FROM outbox.enqueue('old:2', 'u', '{\"n\": 2}')")" "pending true" \
    "A: target u opted in (forget_pre_retention): its old key was forgotten"

# ---------------------------------------------------------------- B
target_add ordered http://127.0.0.1:9/   # no relay runs here: nothing is sent
sql "SELECT outbox.enqueue('runC:step-1', 'ordered', '{\"n\": 1}', p_ordering_key => 'runC')" >/dev/null
sql "UPDATE outbox.intents SET state = 'failed', attempts = 1, response_status = 400,
            updated_at = now() - interval '400 days' WHERE key = 'runC:step-1'" >/dev/null
"$RELAY_BIN" prune >"$T/prune-b.log" 2>&1
is "$(sql "SELECT state FROM outbox.intents WHERE key = 'runC:step-1'")" failed \
    "B: a failed step of an ordering group with no later step is not pruned, however old"
sql "SELECT outbox.enqueue('runC:step-2', 'ordered', '{\"n\": 2}', p_ordering_key => 'runC')" >/dev/null
is "$(sql "SELECT next_attempt_at = 'infinity' FROM outbox.intents WHERE key = 'runC:step-2'")" t \
    "B: the group's next step waits behind it (not due)"
sql "SELECT outbox.cancel('runC:step-1', 'checked: skip it')" >/dev/null
is "$(sql "SELECT next_attempt_at <= now() FROM outbox.intents WHERE key = 'runC:step-2'")" t \
    "B: once a person cancels the failed step, the next one is due"
sql "UPDATE outbox.intents SET updated_at = now() - interval '400 days' WHERE key = 'runC:step-1'" >/dev/null
"$RELAY_BIN" prune >"$T/prune-b2.log" 2>&1
is "$(sql "SELECT count(*) FROM outbox.intents WHERE key = 'runC:step-1'")" 0 \
    "B: and the cancelled step is pruned once past retain_for, like any cancelled intent"
itest_done
