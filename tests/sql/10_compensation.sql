-- 10_compensation: compensation as a new action, the links both ways, and abandoning a run
-- (migrations/0007_compensation_health.sql).
--   compensate(original, key, target, payload)  only for a succeeded or unknown original (else OR007,
--                        no original OR008); enqueue's rules (same call again: the same intent; other
--                        payload or target: OR001; approval rule; unknown target); the key of another
--                        action: OR001; intents.compensates links it; run_id inherited
--   compensations(key), links(key)  list the link from both sides
--   cancel_run(run, reason)  cancels exactly the never-sent rows of the run, one attempts row each
--   roles               app: compensate, cancel_run, links, compensations; operator: links, compensations
--   across connections (dblink; this part commits, in the throwaway database run.sh made):
--     two transactions compensate with one key at once -> one compensation, the second gets it
--     (or OR001 when it names another original); cancel_run waits for a relay recording a row
--     of the run and then sees the attempt that relay committed (that row is not cancelled)
-- The rest is one transaction (now() is one instant); rows are put in a given state directly,
-- as the superuser.
SELECT plan(79);

-- ---------------------------------------------------------------------------
-- across connections
\ir lib/sessions.sql
CREATE TEMP TABLE conn (name text PRIMARY KEY, pid int);
INSERT INTO conn SELECT n, pg_temp.open(n) FROM unnest(ARRAY['a', 'b']) AS n;
CREATE FUNCTION pg_temp.pid(n text) RETURNS int LANGUAGE sql AS $$ SELECT pid FROM conn WHERE name = n $$;
CREATE TEMP TABLE res (who text, intent_id bigint, inserted boolean);

-- committed setup (this session is not in a transaction yet)
INSERT INTO outbox.targets (name, url) VALUES ('cc', 'https://cc.test/hook');
SELECT outbox.enqueue(k, 'cc', '{}') FROM unnest(ARRAY['cc-orig', 'cc-orig2']) AS k \g /dev/null
UPDATE outbox.intents SET state = 'succeeded' WHERE key IN ('cc-orig', 'cc-orig2');
SELECT outbox.enqueue('cc-run-' || n, 'cc', jsonb_build_object('step', n), 'run-cc') FROM generate_series(1, 2) AS n \g /dev/null

-- one compensation key, two transactions at once
SELECT dblink_exec('a', 'BEGIN') \g /dev/null
INSERT INTO res SELECT 'a', * FROM dblink('a', $$SELECT intent_id, inserted FROM outbox.compensate('cc-orig', 'cc-undo', 'cc', '{"u": 1}')$$)
                                   AS t(intent_id bigint, inserted boolean);
SELECT is(dblink_send_query('b', $$SELECT intent_id, inserted FROM outbox.compensate('cc-orig', 'cc-undo', 'cc', '{"u": 1}')$$), 1,
          'concurrent compensate: the second call is sent');
SELECT ok(pg_temp.waits_on_lock(pg_temp.pid('b'), 5), 'concurrent compensate: the second waits for the first transaction');
SELECT dblink_exec('a', 'COMMIT') \g /dev/null
INSERT INTO res SELECT 'b', * FROM dblink_get_result('b') AS t(intent_id bigint, inserted boolean);
SELECT * FROM dblink_get_result('b', false) AS t(intent_id bigint, inserted boolean) \g /dev/null
SELECT results_eq($$SELECT who, inserted FROM res ORDER BY who$$, $$VALUES ('a'::text, true), ('b', false)$$,
                  'concurrent compensate: the first inserted, the second found it');
SELECT is((SELECT count(DISTINCT intent_id)::int FROM res), 1, 'concurrent compensate: one intent');
SELECT results_eq($$SELECT count(*)::int, min(compensates COLLATE "default") FROM outbox.intents WHERE key = 'cc-undo'$$,
                  $$VALUES (1, 'cc-orig'::text)$$, 'concurrent compensate: one row, linked');

-- one key for two originals at once: the second gets OR001 once the first commits
SELECT dblink_exec('a', 'BEGIN') \g /dev/null
SELECT * FROM dblink('a', $$SELECT inserted FROM outbox.compensate('cc-orig', 'cc-undo-x', 'cc', '{"u": 2}')$$) AS t(i boolean) \g /dev/null
SELECT is(dblink_send_query('b', $$SELECT intent_id, inserted FROM outbox.compensate('cc-orig2', 'cc-undo-x', 'cc', '{"u": 2}')$$), 1,
          'one key, two originals: the second call is sent');
SELECT ok(pg_temp.waits_on_lock(pg_temp.pid('b'), 5), 'one key, two originals: the second waits');
SELECT dblink_exec('a', 'COMMIT') \g /dev/null
SELECT throws_ok($$SELECT * FROM dblink_get_result('b') AS t(intent_id bigint, inserted boolean)$$, 'OR001',
                 'outbox.compensate: key ''cc-undo-x'' is already used for another action (the compensation of ''cc-orig'')',
                 'one key, two originals: the second gets OR001');
SELECT * FROM dblink_get_result('b', false) AS t(intent_id bigint, inserted boolean) \g /dev/null

-- cancel_run and a relay recording a row of the run at the same moment
SELECT dblink_exec('a', 'BEGIN') \g /dev/null
SELECT dblink_exec('a', $$UPDATE outbox.intents SET attempts = 1, updated_at = now() WHERE key = 'cc-run-1';
                         INSERT INTO outbox.attempts (intent_id, attempt, relay, class, request_sent, http_status)
                         SELECT id, 1, 'r1', 'ambiguous', true, 503 FROM outbox.intents WHERE key = 'cc-run-1'$$) \g /dev/null
SELECT is(dblink_send_query('b', $$SELECT outbox.cancel_run('run-cc', 'abandoned')$$), 1, 'cancel_run is sent');
SELECT ok(pg_temp.waits_on_lock(pg_temp.pid('b'), 5), 'cancel_run waits for the relay holding a row of the run');
SELECT dblink_exec('a', 'COMMIT') \g /dev/null
SELECT is((SELECT n FROM dblink_get_result('b') AS t(n int)), 1,
          'cancel_run then sees the attempt committed meanwhile: 1 cancelled, not 2');
SELECT * FROM dblink_get_result('b', false) AS t(n int) \g /dev/null
SELECT results_eq($$SELECT key COLLATE "default", state::text FROM outbox.intents WHERE run_id = 'run-cc' ORDER BY key$$,
                  $$VALUES ('cc-run-1'::text, 'pending'::text), ('cc-run-2', 'cancelled')$$,
                  'the row sent meanwhile (HTTP 503: it may have executed) stays pending; the other is cancelled');
SELECT dblink_disconnect(name) FROM conn \g /dev/null

BEGIN;

INSERT INTO outbox.targets (name, url) VALUES ('pay', 'https://pay.test/refunds');
INSERT INTO outbox.targets (name, url, approval_rule) VALUES ('appr', 'https://appr.test/hook', '$.amount > 100000');
INSERT INTO outbox.targets (name, url, on_mismatch) VALUES ('keep', 'https://keep.test/hook', 'keep_original');

CREATE FUNCTION pg_temp.mk(k text, st outbox.intent_state DEFAULT 'pending', run text DEFAULT NULL,
                           amb boolean DEFAULT false) RETURNS bigint
LANGUAGE sql AS $$
    SELECT intent_id FROM outbox.enqueue(k, 'pay', jsonb_build_object('k', k), run);
    UPDATE outbox.intents SET state = st, ambiguous = amb,
                              lease_owner = CASE WHEN st = 'in_flight' THEN 'r1' END,
                              lease_expires_at = CASE WHEN st = 'in_flight' THEN now() + interval '30 s' END
     WHERE key = k RETURNING id;
$$;
CREATE FUNCTION pg_temp.st(k text) RETURNS text LANGUAGE sql AS $$ SELECT state::text FROM outbox.intents WHERE key = k $$;
CREATE FUNCTION pg_temp.attempt(k text, n int, cls outbox.attempt_class, sent boolean) RETURNS void LANGUAGE sql AS $$
    INSERT INTO outbox.attempts (intent_id, attempt, relay, class, request_sent)
    SELECT id, n, 'r1', cls, sent FROM outbox.intents WHERE key = k;
    UPDATE outbox.intents SET attempts = greatest(attempts, n) WHERE key = k;
$$;

-- ---------------------------------------------------------------------------
-- the functions: signatures, SECURITY DEFINER with a safe search_path
SELECT has_function('outbox', f, a, format('outbox.%s(%s) exists', f, array_to_string(a, ', ')))
  FROM (VALUES ('compensate', ARRAY['text', 'text', 'text', 'jsonb']),
               ('compensations', ARRAY['text']),
               ('links', ARRAY['text']),
               ('cancel_run', ARRAY['text', 'text'])) AS v(f, a);
SELECT is((SELECT count(*)::int FROM pg_proc
            WHERE pronamespace = 'outbox'::regnamespace AND proname IN ('compensate', 'compensations', 'links', 'cancel_run')
              AND prosecdef AND proconfig = ARRAY['search_path=pg_catalog, pg_temp']),
          4, 'all four are SECURITY DEFINER with search_path = pg_catalog, pg_temp');

-- ---------------------------------------------------------------------------
-- compensate: which originals
SELECT pg_temp.mk('o-ok', 'succeeded', 'run-1') \g /dev/null
SELECT pg_temp.mk('o-unknown', 'unknown', NULL, true) \g /dev/null
SELECT pg_temp.mk('o-pending') \g /dev/null
SELECT pg_temp.mk('o-pending-amb', 'pending', NULL, true) \g /dev/null
SELECT pg_temp.mk('o-flight', 'in_flight') \g /dev/null
SELECT pg_temp.mk('o-failed', 'failed') \g /dev/null
SELECT pg_temp.mk('o-cancelled', 'cancelled') \g /dev/null
SELECT pg_temp.mk('o-await', 'awaiting_approval') \g /dev/null

SELECT results_eq($$SELECT key, target, status, inserted FROM outbox.compensate('o-ok', 'o-ok:undo', 'pay', '{"refund_of": "o-ok"}')$$,
                  $$VALUES ('o-ok:undo'::text, 'pay'::text, 'pending'::text, true)$$,
                  'compensate a succeeded intent: a new pending intent');
SELECT results_eq($$SELECT compensates COLLATE "default", run_id COLLATE "default", state::text, payload FROM outbox.intents WHERE key = 'o-ok:undo'$$,
                  $$VALUES ('o-ok'::text, 'run-1'::text, 'pending'::text, '{"refund_of": "o-ok"}'::jsonb)$$,
                  'the compensation links its original (compensates) and inherits its run_id');
SELECT is(pg_temp.st('o-ok'), 'succeeded', 'the original is unchanged');
SELECT results_eq($$SELECT key, inserted FROM outbox.compensate('o-unknown', 'o-unknown:undo', 'pay', '{"undo": 1}')$$,
                  $$VALUES ('o-unknown:undo'::text, true)$$, 'compensate an unknown intent (it may have acted)');

SELECT throws_ok($$SELECT outbox.compensate('o-pending', 'x1', 'pay', '{}')$$, 'OR007',
                 'outbox.compensate: key ''o-pending'' is pending; only a succeeded or unknown intent can be compensated',
                 'compensate a pending intent: OR007 with a clear message');
SELECT throws_ok($$SELECT outbox.compensate('o-pending-amb', 'x2', 'pay', '{}')$$, 'OR007',
                 'outbox.compensate: key ''o-pending-amb'' is pending after an ambiguous attempt (its outcome is not settled yet); only a succeeded or unknown intent can be compensated',
                 'compensate a pending intent after an ambiguous attempt: OR007');
SELECT throws_ok($$SELECT outbox.compensate('o-flight', 'x3', 'pay', '{}')$$, 'OR007', NULL, 'compensate an in_flight intent: OR007');
SELECT throws_ok($$SELECT outbox.compensate('o-failed', 'x4', 'pay', '{}')$$, 'OR007',
                 'outbox.compensate: key ''o-failed'' is failed; only a succeeded or unknown intent can be compensated',
                 'compensate a failed intent: OR007');
SELECT throws_ok($$SELECT outbox.compensate('o-cancelled', 'x5', 'pay', '{}')$$, 'OR007', NULL, 'compensate a cancelled intent: OR007');
SELECT throws_ok($$SELECT outbox.compensate('o-await', 'x6', 'pay', '{}')$$, 'OR007', NULL,
                 'compensate an intent awaiting approval: OR007');
-- the hint says what to do instead
CREATE FUNCTION pg_temp.hint_of(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE h text;
BEGIN
    EXECUTE q;
    RETURN NULL;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS h = PG_EXCEPTION_HINT;
    RETURN h;
END $$;
SELECT matches(pg_temp.hint_of($$SELECT outbox.compensate('o-pending', 'x1', 'pay', '{}')$$), 'cancel it instead',
               'OR007 hint for a never-sent original: cancel it instead');
SELECT matches(pg_temp.hint_of($$SELECT outbox.compensate('o-failed', 'x4', 'pay', '{}')$$), 'nothing to compensate',
               'OR007 hint for a failed original: nothing to compensate');
SELECT throws_ok($$SELECT outbox.compensate('no-such-key', 'x7', 'pay', '{}')$$, 'OR008',
                 'outbox.compensate: no intent with key ''no-such-key''', 'compensate an unknown key: OR008');
SELECT throws_ok($$SELECT outbox.compensate(NULL, 'x8', 'pay', '{}')$$, 'OR008', NULL, 'compensate a NULL key: OR008');
SELECT is((SELECT count(*)::int FROM outbox.intents WHERE key LIKE 'x_'), 0, 'refused compensations enqueue nothing');

-- ---------------------------------------------------------------------------
-- compensate: enqueue's rules
SELECT results_eq($$SELECT key, intent_id = (SELECT id FROM outbox.intents WHERE key = 'o-ok:undo'), status, inserted
                      FROM outbox.compensate('o-ok', 'o-ok:undo', 'pay', '{"refund_of": "o-ok"}')$$,
                  $$VALUES ('o-ok:undo'::text, true, 'pending'::text, false)$$,
                  'same key, original and payload again: the existing compensation');
SELECT results_eq($$SELECT inserted FROM outbox.compensate('o-ok', 'o-ok:undo', 'pay', '{ "refund_of" : "o-ok" }')$$,
                  $$VALUES (false)$$, 'same payload spelled differently: the existing compensation');
SELECT is((SELECT count(*)::int FROM outbox.intents WHERE compensates = 'o-ok'), 1, 'still one compensation of o-ok');
UPDATE outbox.intents SET state = 'succeeded', response_status = 201, response_body = '{"refund": "R-1"}' WHERE key = 'o-ok:undo';
SELECT results_eq($$SELECT status, inserted, response_status, response_body
                      FROM outbox.compensate('o-ok', 'o-ok:undo', 'pay', '{"refund_of": "o-ok"}')$$,
                  $$VALUES ('succeeded'::text, false, 201, '{"refund": "R-1"}'::text)$$,
                  'a retried compensate gets the saved response of the compensation');
SELECT throws_ok($$SELECT outbox.compensate('o-ok', 'o-ok:undo', 'pay', '{"refund_of": "o-ok", "amount": 2}')$$, 'OR001',
                 'outbox.enqueue: key ''o-ok:undo'' was already used with a different payload (fields that differ: amount)',
                 'same key and original, another payload: OR001 naming the fields');
SELECT throws_ok($$SELECT outbox.compensate('o-ok', 'o-ok:undo', 'appr', '{"refund_of": "o-ok"}')$$, 'OR001', NULL,
                 'same key and original, another target: OR001');
SELECT throws_ok($$SELECT outbox.compensate('o-unknown', 'o-ok:undo', 'pay', '{"refund_of": "o-ok"}')$$, 'OR001',
                 'outbox.compensate: key ''o-ok:undo'' is already used for another action (the compensation of ''o-ok'')',
                 'same key for another original: OR001');
SELECT throws_ok($$SELECT outbox.compensate('o-ok', 'o-pending', 'pay', '{"k": "o-pending"}')$$, 'OR001',
                 'outbox.compensate: key ''o-pending'' is already used for another action (an intent that compensates nothing)',
                 'the key of an ordinary intent: OR001');
SELECT throws_ok($$SELECT outbox.compensate('o-ok', 'o-ok', 'pay', '{"k": "o-ok"}')$$, 'OR001',
                 'outbox.compensate: key ''o-ok'' cannot compensate itself', 'an intent cannot compensate itself: OR001');
SELECT is((SELECT compensates FROM outbox.intents WHERE key = 'o-pending'), NULL, '(the ordinary intent is not linked)');
SELECT throws_ok($$SELECT outbox.compensate('o-ok', 'o-ok:undo2', 'nowhere', '{}')$$, 'OR002', NULL,
                 'unknown target: OR002 (enqueue''s validation)');
SELECT throws_ok($$SELECT outbox.compensate('o-ok', E'o-ok:\nundo', 'pay', '{}')$$, 'OR004', NULL,
                 'a key with a control character: OR004');
SELECT throws_ok($$SELECT outbox.compensate('o-ok', 'o-ok:undo3', 'pay', '[1]')$$, 'OR005', NULL, 'a payload that is no object: OR005');
SELECT results_eq($$SELECT status FROM outbox.compensate('o-ok', 'o-ok:big-refund', 'appr', '{"amount": 500000}')$$,
                  $$VALUES ('awaiting_approval'::text)$$, 'the approval rule of the compensation''s target applies');
-- keep_original: a mismatch is recorded, the compensation stays one row
SELECT outbox.compensate('o-ok', 'o-ok:keep', 'keep', '{"a": 1}') \g /dev/null
SELECT results_eq($$SELECT inserted, mismatch_fields FROM outbox.compensate('o-ok', 'o-ok:keep', 'keep', '{"a": 2}')$$,
                  $$VALUES (false, ARRAY['a'])$$, 'on_mismatch = keep_original: the existing compensation, the mismatch noted');

-- ---------------------------------------------------------------------------
-- a compensation can be compensated in turn (it is an intent like any other)
SELECT results_eq($$SELECT inserted FROM outbox.compensate('o-ok:undo', 'o-ok:undo:undo', 'pay', '{"redo": true}')$$,
                  $$VALUES (true)$$, 'a succeeded compensation can be compensated');

-- ---------------------------------------------------------------------------
-- compensations(key) and links(key): both directions
SELECT results_eq($$SELECT key, target, status FROM outbox.compensations('o-ok')$$,
                  $$VALUES ('o-ok:undo'::text, 'pay'::text, 'succeeded'::text),
                           ('o-ok:big-refund', 'appr', 'awaiting_approval'),
                           ('o-ok:keep', 'keep', 'pending')$$,
                  'compensations(original): its compensations, oldest first, with their status');
SELECT is_empty($$SELECT * FROM outbox.compensations('o-pending')$$, 'compensations of an uncompensated key: none');
SELECT is_empty($$SELECT * FROM outbox.compensations('no-such-key')$$, 'compensations of an unknown key: none');
SELECT results_eq($$SELECT key, relation, other_key, other_status FROM outbox.links('o-ok')$$,
                  $$VALUES ('o-ok'::text, 'compensated_by'::text, 'o-ok:undo'::text, 'succeeded'::text),
                           ('o-ok', 'compensated_by', 'o-ok:big-refund', 'awaiting_approval'),
                           ('o-ok', 'compensated_by', 'o-ok:keep', 'pending')$$,
                  'links(original): compensated_by each compensation');
SELECT results_eq($$SELECT key, relation, other_key, other_status FROM outbox.links('o-ok:undo')$$,
                  $$VALUES ('o-ok:undo'::text, 'compensates'::text, 'o-ok'::text, 'succeeded'::text),
                           ('o-ok:undo', 'compensated_by', 'o-ok:undo:undo', 'pending')$$,
                  'links(compensation): compensates its original (first), and its own compensation');
SELECT results_eq($$SELECT key, relation, other_key, other_status FROM outbox.links('o-unknown:undo')$$,
                  $$VALUES ('o-unknown:undo'::text, 'compensates'::text, 'o-unknown'::text, 'reconciling'::text)$$,
                  'links show the agent-visible status of the other side');
SELECT is_empty($$SELECT * FROM outbox.links('o-pending')$$, 'links of an unlinked key: none');
SELECT is_empty($$SELECT * FROM outbox.links('no-such-key')$$, 'links of an unknown key: none');
SELECT results_eq($$SELECT status FROM outbox.outcome('o-ok:undo')$$, $$VALUES ('succeeded'::text)$$,
                  'outcome(key) of a compensation works as for any key');

-- ---------------------------------------------------------------------------
-- cancel_run: only what was never sent
SELECT pg_temp.mk('r-new', 'pending', 'run-9') \g /dev/null
SELECT pg_temp.mk('r-await', 'awaiting_approval', 'run-9') \g /dev/null
SELECT pg_temp.mk('r-not-sent', 'pending', 'run-9') \g /dev/null
SELECT pg_temp.attempt('r-not-sent', 1, 'not_sent', false) \g /dev/null
SELECT pg_temp.mk('r-429', 'pending', 'run-9') \g /dev/null
SELECT pg_temp.attempt('r-429', 1, 'retry_later', true) \g /dev/null
SELECT pg_temp.mk('r-taken-over', 'pending', 'run-9') \g /dev/null
SELECT pg_temp.attempt('r-taken-over', 1, 'not_sent', NULL) \g /dev/null
SELECT pg_temp.mk('r-amb', 'pending', 'run-9', true) \g /dev/null
SELECT pg_temp.mk('r-flight', 'in_flight', 'run-9') \g /dev/null
SELECT pg_temp.mk('r-unknown', 'unknown', 'run-9', true) \g /dev/null
SELECT pg_temp.mk('r-ok', 'succeeded', 'run-9') \g /dev/null
SELECT pg_temp.mk('r-failed', 'failed', 'run-9') \g /dev/null
SELECT outbox.compensate('r-ok', 'r-ok:undo', 'pay', '{"undo": "r-ok"}') \g /dev/null
SELECT pg_temp.mk('other-run', 'pending', 'run-10') \g /dev/null
SELECT pg_temp.mk('no-run', 'pending') \g /dev/null
SELECT is((SELECT run_id FROM outbox.intents WHERE key = 'r-ok:undo'), 'run-9', '(the compensation belongs to run-9)');

SELECT is(outbox.cancel_run('run-9', 'user abandoned the conversation'), 3,
          'cancel_run returns how many it cancelled: 3');
SELECT set_eq($$SELECT key COLLATE "default" FROM outbox.intents WHERE state = 'cancelled' AND run_id = 'run-9'$$,
              $$VALUES ('r-new'), ('r-await'), ('r-not-sent')$$,
              'cancelled: pending, awaiting approval, and pending after an attempt known not sent');
SELECT results_eq($$SELECT key COLLATE "default", state::text FROM outbox.intents
                     WHERE key IN ('r-429', 'r-taken-over', 'r-amb', 'r-flight', 'r-unknown', 'r-ok', 'r-failed', 'r-ok:undo',
                                   'other-run', 'no-run') ORDER BY key$$,
                  $$VALUES ('no-run'::text, 'pending'::text), ('other-run', 'pending'), ('r-429', 'pending'),
                           ('r-amb', 'pending'), ('r-failed', 'failed'), ('r-flight', 'in_flight'), ('r-ok', 'succeeded'),
                           ('r-ok:undo', 'pending'), ('r-taken-over', 'pending'), ('r-unknown', 'unknown')$$,
                  'left alone: sent (request_sent true), maybe sent (NULL), ambiguous, in flight, unknown, final, '
                  'the run''s compensation, other runs');
SELECT results_eq($$SELECT status, last_error FROM outbox.outcome('r-new')$$,
                  $$VALUES ('cancelled'::text, 'cancelled: user abandoned the conversation'::text)$$,
                  'outcome of a cancelled row: cancelled, with the reason');
SELECT results_eq($$SELECT i.key COLLATE "default", a.class::text, a.request_sent, a.error FROM outbox.attempts a
                      JOIN outbox.intents i ON i.id = a.intent_id
                     WHERE i.run_id = 'run-9' AND a.class = 'resolved' ORDER BY i.id$$,
                  $$VALUES ('r-new'::text, 'resolved'::text, false, 'cancelled with run run-9: user abandoned the conversation'::text),
                           ('r-await', 'resolved', false, 'cancelled with run run-9: user abandoned the conversation'),
                           ('r-not-sent', 'resolved', false, 'cancelled with run run-9: user abandoned the conversation')$$,
                  'one attempts row per cancelled intent (class resolved, as outbox.cancel leaves)');
SELECT is((SELECT attempt FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
            WHERE i.key = 'r-not-sent' AND a.class = 'resolved'), 1, 'the trail row carries the intent''s attempt number');
SELECT is((SELECT decided_by FROM outbox.intents WHERE key = 'r-new'), session_user::text, 'decided_by: who cancelled');
SELECT is(outbox.cancel_run('run-9', 'again'), 0, 'cancel_run again: nothing left to cancel, 0');
SELECT is((SELECT count(*)::int FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
            WHERE i.run_id = 'run-9' AND a.class = 'resolved'), 3, 'a repeated cancel_run leaves no further rows');
SELECT is(pg_temp.st('r-ok:undo'), 'pending', 'the run''s compensation is still pending');
SELECT is(outbox.cancel_run('no-such-run', NULL), 0, 'an unknown run: 0');
SELECT throws_ok($$SELECT outbox.cancel_run(NULL, 'x')$$, '22023', 'outbox.cancel_run: say which run (p_run_id)', 'a NULL run: 22023');
SELECT throws_ok($$SELECT outbox.cancel_run('', 'x')$$, '22023', NULL, 'an empty run: 22023');
SELECT results_eq($$SELECT status FROM outbox.outcome('other-run')$$, $$VALUES ('pending'::text)$$, '(other-run untouched)');

-- ---------------------------------------------------------------------------
-- roles: the application compensates and abandons its runs; the operator reads the links
SELECT pg_temp.mk('role-ok', 'succeeded', 'run-r') \g /dev/null
SELECT pg_temp.mk('role-next', 'pending', 'run-r') \g /dev/null
SET ROLE outbox_app;
SELECT results_eq($$SELECT inserted FROM outbox.compensate('role-ok', 'role-ok:undo', 'pay', '{"undo": 1}')$$,
                  $$VALUES (true)$$, 'outbox_app can compensate');
SELECT is(outbox.cancel_run('run-r', 'orchestrator gave up'), 1, 'outbox_app can cancel its run');
SELECT results_eq($$SELECT relation, other_key FROM outbox.links('role-ok')$$, $$VALUES ('compensated_by'::text, 'role-ok:undo'::text)$$,
                  'outbox_app can read the links');
RESET ROLE;
SET ROLE outbox_operator;
SELECT results_eq($$SELECT key FROM outbox.compensations('role-ok')$$, $$VALUES ('role-ok:undo'::text)$$,
                  'outbox_operator can list compensations');
SELECT throws_ok($$SELECT outbox.compensate('role-ok', 'role-ok:undo2', 'pay', '{}')$$, '42501',
                 'permission denied for function compensate', 'outbox_operator cannot compensate');
SELECT throws_ok($$SELECT outbox.cancel_run('run-r', 'x')$$, '42501', 'permission denied for function cancel_run',
                 'outbox_operator cannot cancel a run');
RESET ROLE;
SET ROLE outbox_relay;
SELECT throws_ok($$SELECT outbox.compensate('role-ok', 'role-ok:undo3', 'pay', '{}')$$, '42501',
                 'permission denied for function compensate', 'outbox_relay cannot compensate');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
