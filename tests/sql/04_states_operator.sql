-- 04_states_operator: the agent-visible outcome and people's decisions
-- (docs/design.md, "States", "Public contract").
--   outbox.outcome(key)   status mapping, saved response, reason only for final states, no row for an unknown key
--   approve / reject      awaiting_approval -> pending / cancelled; otherwise OR007; unknown key OR008
--   cancel                only never-sent intents (not in flight, not after an ambiguous attempt)
--   resolve               unknown -> succeeded | failed, with a note
--   outbox.stuck          unknown, in flight past the lease, pending over 5 minutes past due, awaiting approval over 24 hours
-- Rows are put in a given state directly, as the superuser.
BEGIN;
SELECT plan(60);

INSERT INTO outbox.targets (name, url) VALUES ('t1', 'https://t1.test/hook');
INSERT INTO outbox.targets (name, url, approval_rule) VALUES ('appr', 'https://appr.test/hook', '$.amount > 100000');

CREATE FUNCTION pg_temp.mk(k text, tgt text DEFAULT 't1', doc jsonb DEFAULT '{"x": 1}') RETURNS bigint
LANGUAGE sql AS $$ SELECT intent_id FROM outbox.enqueue(k, tgt, doc) $$;
CREATE FUNCTION pg_temp.st(k text) RETURNS text LANGUAGE sql AS $$ SELECT state::text FROM outbox.intents WHERE key = k $$;

-- ---------------------------------------------------------------------------
-- outcome(key): one row, the agent-visible status.
SELECT pg_temp.mk('o-pending') \g /dev/null
UPDATE outbox.intents SET last_error = 'connect refused (will retry)', attempts = 1, response_status = 503,
                          response_body = 'try later' WHERE key = 'o-pending';
SELECT results_eq($$SELECT status, response_status, response_body, attempts, last_error, message FROM outbox.outcome('o-pending')$$,
                  $$VALUES ('pending'::text, NULL::int, NULL::text, 1, NULL::text, 'waiting for delivery'::text)$$,
                  'outcome pending: no response and no raw transport error (last_error only for final states)');

SELECT pg_temp.mk('o-flight') \g /dev/null
UPDATE outbox.intents SET state = 'in_flight', attempts = 1, lease_owner = 'r1', lease_expires_at = now() + interval '30 s',
                          last_error = 'x' WHERE key = 'o-flight';
SELECT results_eq($$SELECT status, last_error, message FROM outbox.outcome('o-flight')$$,
                  $$VALUES ('delivering'::text, NULL::text, 'being delivered'::text)$$, 'outcome in_flight: delivering');

SELECT pg_temp.mk('o-flight-amb') \g /dev/null
UPDATE outbox.intents SET state = 'in_flight', attempts = 2, ambiguous = true, lease_owner = 'r1',
                          lease_expires_at = now() + interval '30 s' WHERE key = 'o-flight-amb';
SELECT results_eq($$SELECT status, message FROM outbox.outcome('o-flight-amb')$$,
                  $$VALUES ('reconciling'::text, 'outcome unknown, reconciling'::text)$$,
                  'outcome in_flight after an ambiguous attempt: reconciling');

SELECT pg_temp.mk('o-pending-amb') \g /dev/null
UPDATE outbox.intents SET ambiguous = true, attempts = 1, last_error = 'timeout after send' WHERE key = 'o-pending-amb';
SELECT results_eq($$SELECT status, last_error, message FROM outbox.outcome('o-pending-amb')$$,
                  $$VALUES ('reconciling'::text, NULL::text, 'outcome unknown, reconciling'::text)$$,
                  'outcome pending after an ambiguous attempt: reconciling, no raw error');

SELECT pg_temp.mk('o-unknown') \g /dev/null
UPDATE outbox.intents SET state = 'unknown', ambiguous = true, attempts = 1, last_error = 'timeout after send'
 WHERE key = 'o-unknown';
SELECT results_eq($$SELECT status, response_status, last_error, message FROM outbox.outcome('o-unknown')$$,
                  $$VALUES ('reconciling'::text, NULL::int, NULL::text, 'outcome unknown: needs a person — no status URL, and no first attempt is recorded to tell whether the target still remembers the key'::text)$$,
                  'outcome unknown: reconciling, "outcome unknown: needs a person" (no status URL: 0023), never failed');

SELECT pg_temp.mk('o-ok') \g /dev/null
UPDATE outbox.intents SET state = 'succeeded', attempts = 2, response_status = 200, response_body = '{"id": "r-1"}'
 WHERE key = 'o-ok';
SELECT results_eq($$SELECT status, response_status, response_body, attempts, last_error, message FROM outbox.outcome('o-ok')$$,
                  $$VALUES ('succeeded'::text, 200, '{"id": "r-1"}'::text, 2, NULL::text, 'the target acted'::text)$$,
                  'outcome succeeded: with the saved response');

SELECT pg_temp.mk('o-failed') \g /dev/null
UPDATE outbox.intents SET state = 'failed', attempts = 1, response_status = 404, response_body = 'no such order',
                          last_error = 'HTTP 404: permanent' WHERE key = 'o-failed';
SELECT results_eq($$SELECT status, response_status, response_body, last_error FROM outbox.outcome('o-failed')$$,
                  $$VALUES ('failed'::text, 404, 'no such order'::text, 'HTTP 404: permanent'::text)$$,
                  'outcome failed: with last_error and the response');

SELECT pg_temp.mk('o-await', 'appr', '{"amount": 500000}') \g /dev/null
SELECT results_eq($$SELECT status, last_error FROM outbox.outcome('o-await')$$,
                  $$VALUES ('awaiting_approval'::text, NULL::text)$$, 'outcome awaiting_approval');

SELECT is_empty($$SELECT * FROM outbox.outcome('no-such-key')$$, 'outcome of an unknown key: no row');
SELECT is((SELECT count(*)::int FROM outbox.outcome('o-ok')), 1, 'outcome of a key: exactly one row');

-- ---------------------------------------------------------------------------
-- approve / reject
SELECT pg_temp.mk('a1', 'appr', '{"amount": 200000}') \g /dev/null
SELECT pg_temp.mk('a2', 'appr', '{"amount": 300000}') \g /dev/null
SELECT pg_temp.mk('a3', 'appr', '{"amount": 1}') \g /dev/null
UPDATE outbox.intents SET next_attempt_at = now() - interval '1 hour' WHERE key = 'a1';
SELECT is(pg_temp.st('a1'), 'awaiting_approval', 'a1 awaits approval');
SELECT throws_ok($$SELECT outbox.approve('a1', '')$$, '22023', NULL, 'approve needs a name (p_by)');
SELECT is(outbox.approve('a1', 'alice')::text, 'pending', 'approve returns pending');
SELECT results_eq($$SELECT state::text, decided_by, next_attempt_at FROM outbox.intents WHERE key = 'a1'$$,
                  $$VALUES ('pending'::text, 'alice'::text, now())$$, 'approve: pending, due now, decided_by recorded');
SELECT results_eq($$SELECT a.class::text, a.relay, a.recorded FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
                     WHERE i.key = 'a1'$$,
                  $$VALUES ('resolved'::text, 'alice'::text, true)$$, 'approve leaves an attempts row (the trail)');
SELECT is((SELECT status FROM outbox.outcome('a1')), 'pending', 'outcome after approve: pending');
SELECT throws_ok($$SELECT outbox.approve('a1', 'alice')$$,
                 'OR007', 'outbox.approve: key ''a1'' is pending, not awaiting_approval', 'approve of a pending row: OR007');
SELECT throws_ok($$SELECT outbox.approve('a3', 'alice')$$, 'OR007', NULL,
                 'approve of a row that never needed approval: OR007');
SELECT throws_ok($$SELECT outbox.approve('no-such-key', 'alice')$$,
                 'OR008', 'outbox.approve: no intent with key ''no-such-key''', 'approve of an unknown key: OR008');
SELECT throws_ok($$SELECT outbox.approve(NULL, 'alice')$$, 'OR008', NULL, 'approve of a NULL key: OR008');

SELECT is(outbox.reject('a2', 'bob', 'over the limit')::text, 'cancelled', 'reject returns cancelled');
SELECT results_eq($$SELECT state::text, decided_by, last_error FROM outbox.intents WHERE key = 'a2'$$,
                  $$VALUES ('cancelled'::text, 'bob'::text, 'rejected: over the limit'::text)$$, 'reject: cancelled with the reason');
SELECT results_eq($$SELECT status, last_error FROM outbox.outcome('a2')$$,
                  $$VALUES ('cancelled'::text, 'rejected: over the limit'::text)$$, 'outcome after reject: cancelled, with the reason');
SELECT throws_ok($$SELECT outbox.reject('a2', 'bob', 'again')$$,
                 'OR007', 'outbox.reject: key ''a2'' is cancelled, not awaiting_approval', 'reject of a cancelled row: OR007');
SELECT throws_ok($$SELECT outbox.reject('a3', 'bob', 'no')$$, 'OR007', NULL, 'reject of a pending row: OR007');
SELECT throws_ok($$SELECT outbox.reject('no-such-key', 'bob', 'no')$$,
                 'OR008', 'outbox.reject: no intent with key ''no-such-key''', 'reject of an unknown key: OR008');
SELECT throws_ok($$SELECT outbox.approve('a2', 'alice')$$, 'OR007', NULL, 'a rejected intent cannot be approved');

-- ---------------------------------------------------------------------------
-- cancel: only intents that were never sent.
SELECT pg_temp.mk('c-pending') \g /dev/null
SELECT pg_temp.mk('c-await', 'appr', '{"amount": 999999}') \g /dev/null
SELECT is(outbox.cancel('c-pending', 'user changed their mind')::text, 'cancelled', 'cancel of a pending row');
SELECT results_eq($$SELECT state::text, last_error FROM outbox.intents WHERE key = 'c-pending'$$,
                  $$VALUES ('cancelled'::text, 'cancelled: user changed their mind'::text)$$, 'cancel: cancelled with the reason');
SELECT is(outbox.cancel('c-await')::text, 'cancelled', 'cancel of a row awaiting approval (reason optional)');
SELECT throws_ok($$SELECT outbox.cancel('o-flight', 'x')$$,
                 'OR007', 'outbox.cancel: key ''o-flight'' is in_flight, cannot cancel', 'cancel of an in_flight row: OR007');
SELECT throws_ok($$SELECT outbox.cancel('o-pending-amb', 'x')$$,
                 'OR007', 'outbox.cancel: key ''o-pending-amb'' is pending after an ambiguous attempt (it may have executed), cannot cancel',
                 'cancel of a pending row after an ambiguous attempt: OR007');
SELECT throws_ok($$SELECT outbox.cancel('o-unknown', 'x')$$, 'OR007', NULL, 'cancel of an unknown row: OR007');
SELECT throws_ok($$SELECT outbox.cancel('o-ok', 'x')$$, 'OR007', NULL, 'cancel of a succeeded row: OR007');
SELECT throws_ok($$SELECT outbox.cancel('c-pending', 'x')$$, 'OR007', NULL, 'cancel of a cancelled row: OR007');
SELECT throws_ok($$SELECT outbox.cancel('no-such-key', 'x')$$,
                 'OR008', 'outbox.cancel: no intent with key ''no-such-key''', 'cancel of an unknown key: OR008');
SELECT results_eq($$SELECT state::text FROM outbox.intents WHERE key IN ('o-flight', 'o-pending-amb', 'o-unknown', 'o-ok') ORDER BY key$$,
                  $$VALUES ('in_flight'::text), ('succeeded'), ('pending'), ('unknown')$$,
                  'refused cancels change nothing');

-- ---------------------------------------------------------------------------
-- resolve: a person settles an unknown outcome.
SELECT pg_temp.mk('r-ok') \g /dev/null
SELECT pg_temp.mk('r-fail') \g /dev/null
UPDATE outbox.intents SET state = 'unknown', ambiguous = true, attempts = 3 WHERE key IN ('r-ok', 'r-fail');
SELECT throws_ok($$SELECT outbox.resolve('r-ok', 'done', 'x')$$,
                 '22023', 'outbox.resolve: outcome must be succeeded or failed, got ''done''', 'resolve to another outcome: 22023');
SELECT throws_ok($$SELECT outbox.resolve('r-ok', 'succeeded', '')$$, '22023', NULL, 'resolve needs a note');
SELECT throws_ok($$SELECT outbox.resolve('r-ok', 'succeeded', NULL)$$, '22023', NULL, 'resolve needs a note (NULL)');
SELECT is(outbox.resolve('r-ok', 'succeeded', 'refund r-9 seen in the PSP dashboard')::text, 'succeeded', 'resolve to succeeded');
SELECT results_eq($$SELECT state::text, last_error, decision_note FROM outbox.intents WHERE key = 'r-ok'$$,
                  $$VALUES ('succeeded'::text, NULL::text, 'refund r-9 seen in the PSP dashboard'::text)$$,
                  'resolve succeeded: the state and the evidence');
SELECT is((SELECT status FROM outbox.outcome('r-ok')), 'succeeded', 'outcome after resolve: succeeded');
SELECT is(outbox.resolve('r-fail', 'failed', 'PSP has no such refund')::text, 'failed', 'resolve to failed');
SELECT results_eq($$SELECT status, last_error FROM outbox.outcome('r-fail')$$,
                  $$VALUES ('failed'::text, 'resolved by an operator: PSP has no such refund'::text)$$,
                  'outcome after resolve failed: failed with the reason');
SELECT ok((SELECT count(*) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
            WHERE i.key = 'r-fail' AND a.class = 'resolved' AND a.error LIKE '%PSP has no such refund%') = 1,
          'resolve leaves an attempts row with the note');
SELECT throws_ok($$SELECT outbox.resolve('r-ok', 'failed', 'changed my mind')$$,
                 'OR007', 'outbox.resolve: key ''r-ok'' is succeeded, not unknown', 'resolve of a settled row: OR007');
SELECT throws_ok($$SELECT outbox.resolve('o-pending', 'succeeded', 'x')$$, 'OR007', NULL, 'resolve of a pending row: OR007');
SELECT throws_ok($$SELECT outbox.resolve('o-flight', 'succeeded', 'x')$$, 'OR007', NULL, 'resolve of an in_flight row: OR007');
SELECT throws_ok($$SELECT outbox.resolve('no-such-key', 'succeeded', 'x')$$,
                 'OR008', 'outbox.resolve: no intent with key ''no-such-key''', 'resolve of an unknown key: OR008');

-- ---------------------------------------------------------------------------
-- outbox.stuck: one row per key that needs a look, with the reason.
DELETE FROM outbox.attempts;
DELETE FROM outbox.intents;
SELECT pg_temp.mk(k) FROM unnest(ARRAY['s-unknown', 's-lease-gone', 's-lease-ok', 's-old', 's-4min', 's-fresh', 's-later',
                                       's-ok', 's-failed', 's-cancelled']) AS k \g /dev/null
SELECT pg_temp.mk('s-await-old', 'appr', '{"amount": 200000}') \g /dev/null
SELECT pg_temp.mk('s-await-new', 'appr', '{"amount": 200000}') \g /dev/null
UPDATE outbox.intents SET state = 'unknown', ambiguous = true WHERE key = 's-unknown';
UPDATE outbox.intents SET state = 'in_flight', lease_owner = 'r-dead', lease_expires_at = now() - interval '1 minute'
 WHERE key = 's-lease-gone';
UPDATE outbox.intents SET state = 'in_flight', lease_owner = 'r-live', lease_expires_at = now() + interval '1 minute'
 WHERE key = 's-lease-ok';
UPDATE outbox.intents SET next_attempt_at = now() - interval '6 minutes' WHERE key = 's-old';
UPDATE outbox.intents SET next_attempt_at = now() - interval '4 minutes' WHERE key = 's-4min';
UPDATE outbox.intents SET next_attempt_at = now() + interval '1 hour', created_at = now() - interval '2 days' WHERE key = 's-later';
UPDATE outbox.intents SET state = 'succeeded', created_at = now() - interval '2 days' WHERE key = 's-ok';
UPDATE outbox.intents SET state = 'failed', created_at = now() - interval '2 days' WHERE key = 's-failed';
UPDATE outbox.intents SET state = 'cancelled', created_at = now() - interval '2 days' WHERE key = 's-cancelled';
UPDATE outbox.intents SET created_at = now() - interval '25 hours' WHERE key = 's-await-old';
SELECT set_eq($$SELECT key COLLATE "default", reason FROM outbox.stuck$$,
              $$VALUES ('s-unknown'::text, 'outcome unknown: needs a person — no status URL, and no first attempt is recorded to tell whether the target still remembers the key'::text),
                       ('s-lease-gone', 'in flight past its lease'),
                       ('s-old', 'pending for over 5 minutes'),
                       ('s-await-old', 'awaiting approval for over 24 hours')$$,
              'stuck lists unknown, in flight past the lease, pending over 5 minutes past due, awaiting approval over 24 hours');
SELECT is((SELECT count(*)::int FROM outbox.stuck WHERE key = 's-unknown'), 1, 'stuck: an unknown row is listed');
SELECT is((SELECT count(*)::int FROM outbox.stuck WHERE key = 's-lease-gone'), 1, 'stuck: an in_flight row past its lease is listed');
SELECT is((SELECT count(*)::int FROM outbox.stuck WHERE key = 's-old'), 1, 'stuck: a pending row due over 5 minutes ago is listed');
SELECT is((SELECT count(*)::int FROM outbox.stuck WHERE key = 's-fresh'), 0, 'stuck: a fresh pending row is not listed');
SELECT is((SELECT count(*)::int FROM outbox.stuck WHERE key = 's-4min'), 0, 'stuck: a pending row due 4 minutes ago is not listed');
SELECT is((SELECT count(*)::int FROM outbox.stuck WHERE key = 's-later'), 0, 'stuck: an old row scheduled for later is not listed');
SELECT is((SELECT count(*)::int FROM outbox.stuck WHERE key = 's-lease-ok'), 0, 'stuck: an in_flight row within its lease is not listed');
SELECT is((SELECT count(*)::int FROM outbox.stuck WHERE key IN ('s-ok', 's-failed', 's-cancelled')), 0,
          'stuck: final rows are not listed');
SELECT results_eq($$SELECT target COLLATE "default", state::text, age FROM outbox.stuck WHERE key = 's-await-old'$$,
                  $$VALUES ('appr'::text, 'awaiting_approval'::text, interval '25 hours')$$,
                  'stuck rows carry target, state and age');

SELECT * FROM finish();
ROLLBACK;
