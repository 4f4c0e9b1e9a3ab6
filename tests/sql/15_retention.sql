-- 15_retention: pruning without re-execution (migrations/0012_retention.sql).
--   prune        removes final intents past retain_for (and their attempts, mismatches),
--                never a live one (pending, in_flight, unknown, awaiting_approval), nor one
--                younger than retain_for; a compensation and its original go together
--   tombstones   enqueue of a pruned key: the same arguments answer the remembered result
--                and insert nothing; other arguments or another target: OR001; outcome says
--                the final state and that the details were pruned; after dedupe_window the
--                key is forgotten
--   limits       retain_for >= 1 s, dedupe_window >= retain_for, prune's limit
BEGIN;
SELECT plan(33);

INSERT INTO outbox.targets (name, url, retain_for, dedupe_window)
VALUES ('rt', 'https://rt.test/hook', '1 hour', '2 days'),
       ('long', 'https://long.test/hook', '30 days', '60 days');
INSERT INTO outbox.targets (name, url, retain_for, on_mismatch)
VALUES ('keep', 'https://keep.test/hook', '1 hour', 'keep_original');

-- One intent in every state on rt, all settled (or last touched) two hours ago.
SELECT outbox.enqueue('r-' || s, 'rt', jsonb_build_object('s', s))
  FROM unnest(ARRAY['succeeded', 'failed', 'cancelled', 'pending', 'in_flight', 'unknown',
                    'awaiting_approval', 'fresh']) s \g /dev/null
UPDATE outbox.intents
   SET state = CASE WHEN key = 'r-fresh' THEN 'succeeded' ELSE substr(key, 3)::outbox.intent_state END,
       lease_owner = CASE WHEN key = 'r-in_flight' THEN 'r1' END,
       lease_expires_at = CASE WHEN key = 'r-in_flight' THEN now() - interval '1 hour' END,
       response_status = CASE WHEN key IN ('r-succeeded', 'r-fresh') THEN 201 WHEN key = 'r-failed' THEN 400 END,
       response_body = '{"id": 7}',
       updated_at = CASE WHEN key = 'r-fresh' THEN now() - interval '10 minutes' ELSE now() - interval '2 hours' END
 WHERE target = 'rt';
INSERT INTO outbox.attempts (intent_id, attempt, relay, class, request_sent, http_status)
SELECT id, 1, 'r1', 'succeeded', true, 201 FROM outbox.intents WHERE key = 'r-succeeded';
-- A final intent of a target that keeps history for 30 days.
SELECT outbox.enqueue('l-1', 'long', '{"n": 1}') \g /dev/null
UPDATE outbox.intents SET state = 'succeeded', updated_at = now() - interval '2 days' WHERE key = 'l-1';

SELECT results_eq($$SELECT target, state::text, intents FROM outbox.prunable()$$,
                  $$VALUES ('rt', 'succeeded', 1::bigint), ('rt', 'failed', 1::bigint), ('rt', 'cancelled', 1::bigint)$$,
                  'prunable: the three final rows past retain_for');
SELECT is(outbox.prune(), 3::bigint, 'prune removes three intents');
SELECT results_eq($$SELECT key COLLATE "default" FROM outbox.intents ORDER BY key$$,
                  $$VALUES ('l-1'), ('r-awaiting_approval'), ('r-fresh'), ('r-in_flight'), ('r-pending'), ('r-unknown')$$,
                  'live rows, a row younger than retain_for and a target with a longer retain_for survive');
SELECT is((SELECT count(*) FROM outbox.attempts), 0::bigint, 'the attempts of pruned intents are gone');
SELECT is((SELECT count(*) FROM outbox.tombstones), 3::bigint, 'one tombstone per pruned intent');
SELECT is(outbox.prune(), 0::bigint, 'a second prune finds nothing');

-- Every live state survives however old it is.
UPDATE outbox.intents SET updated_at = now() - interval '400 days', created_at = now() - interval '400 days'
 WHERE key IN ('r-pending', 'r-in_flight', 'r-unknown', 'r-awaiting_approval');
SELECT is(outbox.prune(), 0::bigint, 'live rows 400 days old: nothing pruned');
SELECT is((SELECT count(*) FROM outbox.intents
            WHERE state IN ('pending', 'in_flight', 'unknown', 'awaiting_approval')), 4::bigint,
          'pending, in_flight, unknown and awaiting_approval survive');

-- ---------------------------------------------------------------------------
-- tombstones

SELECT results_eq($$SELECT status, response_status, response_body, state::text, target FROM outbox.outcome('r-succeeded')$$,
                  $$VALUES ('succeeded', 201, NULL::text, 'succeeded', 'rt')$$,
                  'outcome of a pruned key: its final state and status, no body');
SELECT matches((SELECT message FROM outbox.outcome('r-succeeded')),
               '^the target acted; its details were pruned at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(the key is remembered until \d{4}-',
               'outcome says the details were pruned, and when');
SELECT results_eq($$SELECT status, response_status FROM outbox.outcome('r-failed')$$,
                  $$VALUES ('failed', 400)$$, 'a pruned failure stays failed');
SELECT results_eq($$SELECT intent_id IS NOT NULL, status, inserted, response_status
                      FROM outbox.enqueue('r-succeeded', 'rt', '{"s": "succeeded"}')$$,
                  $$VALUES (true, 'succeeded', false, 201)$$,
                  'enqueue with the same arguments: the remembered result, not inserted');
SELECT is((SELECT count(*) FROM outbox.intents WHERE key = 'r-succeeded'), 0::bigint,
          'and no intent is created');
SELECT results_eq($$SELECT status, inserted FROM outbox.enqueue('r-cancelled', 'rt', '{"s": "cancelled"}')$$,
                  $$VALUES ('cancelled', false)$$, 'a pruned cancellation is remembered too');
SELECT throws_ok($$SELECT outbox.enqueue('r-succeeded', 'rt', '{"s": "other"}')$$, 'OR001',
                 NULL, 'other arguments: OR001');
SELECT throws_like($$SELECT outbox.enqueue('r-succeeded', 'rt', '{"s": "other"}')$$,
                   '%already used with a different payload (its intent was pruned at %',
                   'and the message says the intent was pruned');
SELECT throws_like($$SELECT outbox.enqueue('r-succeeded', 'long', '{"s": "succeeded"}')$$,
                   '%key ''r-succeeded'' is already used for target ''rt'', not ''long''%',
                   'another target: OR001 naming the target');
SELECT is((SELECT count(*) FROM outbox.intents WHERE key = 'r-succeeded'), 0::bigint,
          'refused enqueues leave no row');

-- keep_original: a pruned key with other arguments answers the remembered result.
SELECT outbox.enqueue('k-1', 'keep', '{"n": 1}') \g /dev/null
UPDATE outbox.intents SET state = 'succeeded', response_status = 200, updated_at = now() - interval '2 hours' WHERE key = 'k-1';
SELECT outbox.prune() \g /dev/null
SELECT results_eq($$SELECT status, inserted FROM outbox.enqueue('k-1', 'keep', '{"n": 2}')$$,
                  $$VALUES ('succeeded', false)$$, 'keep_original: other arguments get the remembered result');

-- After dedupe_window the key is forgotten.
UPDATE outbox.tombstones SET forget_at = now() - interval '1 second' WHERE state = 'failed';
SELECT is((SELECT count(*) FROM outbox.outcome('r-failed')), 0::bigint, 'an expired tombstone answers nothing');
SELECT is((SELECT forgotten FROM outbox.prune_step(100)), 1, 'prune_step forgets the expired tombstone');
SELECT results_eq($$SELECT status, inserted FROM outbox.enqueue('r-failed', 'rt', '{"s": "again"}')$$,
                  $$VALUES ('pending', true)$$, 'a forgotten key is a new intent');
SELECT is((SELECT forget_at - settled_at FROM outbox.tombstones WHERE state = 'succeeded' AND target = 'rt'),
          interval '2 days', 'a tombstone lasts dedupe_window from when the intent settled');

-- ---------------------------------------------------------------------------
-- compensation links: pruned together, once both ends may go

SELECT outbox.enqueue('c-orig', 'rt', '{"n": 1}') \g /dev/null
UPDATE outbox.intents SET state = 'succeeded', updated_at = now() - interval '2 hours' WHERE key = 'c-orig';
SELECT outbox.compensate('c-orig', 'c-undo', 'long', '{"undo": 1}') \g /dev/null
UPDATE outbox.intents SET state = 'succeeded', updated_at = now() - interval '2 days' WHERE key = 'c-undo';
SELECT is(outbox.prune(), 0::bigint, 'original prunable, its compensation not yet (30 days): neither goes');
SELECT is((SELECT count(*) FROM outbox.intents WHERE key IN ('c-orig', 'c-undo')), 2::bigint, 'both stay');
UPDATE outbox.intents SET updated_at = now() - interval '31 days' WHERE key = 'c-undo';
SELECT is(outbox.prune(), 2::bigint, 'both prunable: both go, in one statement');
SELECT is((SELECT count(*) FROM outbox.tombstones WHERE target IN ('rt', 'long') AND state = 'succeeded'), 3::bigint,
          'with their tombstones');

-- ---------------------------------------------------------------------------
-- limits

SELECT throws_ok($$SELECT outbox.prune(0)$$, '22023', 'outbox.prune: limit must be from 1 to 100000, got 0',
                 'a limit below 1 is refused');
SELECT throws_ok($$INSERT INTO outbox.targets (name, url, retain_for, dedupe_window)
                   VALUES ('bad', 'https://b.test/', '10 days', '1 day')$$, '23514', NULL,
                 'dedupe_window shorter than retain_for is refused');
SELECT throws_ok($$INSERT INTO outbox.targets (name, url, retain_for) VALUES ('bad', 'https://b.test/', '0')$$,
                 '23514', NULL, 'retain_for of 0 is refused');
SELECT is((SELECT count(*) FROM outbox.intents WHERE key = 'r-fresh'), 1::bigint,
          'a row settled 10 minutes ago with retain_for 1 hour is still there');
SELECT results_eq($$SELECT pruned, forgotten, locked FROM outbox.prune_step(10)$$,
                  $$VALUES (0, 0, true)$$, 'prune_step reports its step');
SELECT ok(has_function_privilege('outbox_relay', 'outbox.prune_step(integer)', 'EXECUTE')
          AND NOT has_function_privilege('outbox_app', 'outbox.prune(integer)', 'EXECUTE'),
          'the relay may prune; an application may not');

SELECT * FROM finish();
ROLLBACK;
