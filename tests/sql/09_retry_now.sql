-- 09_retry_now: "send now, only where safe" (migrations/0006_cli.sql; `outbox-relay retry KEY`).
--   pending             due now; attempts, ambiguity and the key clock kept
--   unknown             pending again only on a target that honours keys, first attempt within key_ttl:
--                       same key, still ambiguous, attempts and first_attempt_at kept, lease cleared
--                       otherwise OR007 (no key header, past key_ttl, no first attempt), row unchanged
--   failed              pending again with attempts from 0, only if no attempt may have executed
--   other states        OR007; unknown key OR008; disabled target OR007
--   every retry leaves an attempts row of class 'resolved'; refusals leave none
--   only outbox_admin may call it
-- Rows are put in a given state directly, as the superuser.
BEGIN;
SELECT plan(48);

INSERT INTO outbox.targets (name, url) VALUES ('keyed', 'https://keyed.test/hook');
INSERT INTO outbox.targets (name, url, key_header) VALUES ('legacy', 'https://legacy.test/hook', NULL);
INSERT INTO outbox.targets (name, url, key_ttl) VALUES ('short', 'https://short.test/hook', '1 hour');
INSERT INTO outbox.targets (name, url) VALUES ('off', 'https://off.test/hook');
INSERT INTO outbox.targets (name, url, approval_rule) VALUES ('appr', 'https://appr.test/hook', '$.amount > 100000');

CREATE FUNCTION pg_temp.mk(k text, tgt text DEFAULT 'keyed', doc jsonb DEFAULT '{"x": 1}') RETURNS bigint
LANGUAGE sql AS $$ SELECT intent_id FROM outbox.enqueue(k, tgt, doc) $$;
CREATE FUNCTION pg_temp.st(k text) RETURNS text LANGUAGE sql AS $$ SELECT state::text FROM outbox.intents WHERE key = k $$;
CREATE FUNCTION pg_temp.notes(k text) RETURNS bigint LANGUAGE sql AS $$
    SELECT count(*) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id WHERE i.key = k
$$;

SELECT has_function('outbox', 'retry_now', ARRAY['text', 'text'], 'outbox.retry_now(text, text) exists');
SELECT ok((SELECT prosecdef AND 'search_path=pg_catalog, pg_temp' = ANY (proconfig) FROM pg_proc
            WHERE oid = 'outbox.retry_now(text,text)'::regprocedure),
          'retry_now is SECURITY DEFINER with a pinned search_path');
SELECT throws_ok($$SELECT outbox.retry_now('no-such-key', 'alice')$$,
                 'OR008', 'outbox.retry_now: no intent with key ''no-such-key''', 'retry of an unknown key: OR008');
SELECT throws_ok($$SELECT outbox.retry_now(NULL, 'alice')$$, 'OR008', NULL, 'retry of a NULL key: OR008');

-- ---------------------------------------------------------------------------
-- pending: due now.
SELECT pg_temp.mk('p-later') \g /dev/null
UPDATE outbox.intents SET next_attempt_at = now() + interval '1 hour', attempts = 2,
                          first_attempt_at = now() - interval '5 minutes', last_error = 'connect refused'
 WHERE key = 'p-later';
SELECT is(outbox.retry_now('p-later', 'alice')::text, 'pending', 'retry of a pending row returns pending');
SELECT results_eq($$SELECT state::text, next_attempt_at, attempts, first_attempt_at, ambiguous FROM outbox.intents WHERE key = 'p-later'$$,
                  $$VALUES ('pending'::text, now(), 2, now() - interval '5 minutes', false)$$,
                  'pending: due now; attempts and first attempt kept');
SELECT results_eq($$SELECT a.class::text, a.relay, a.attempt, a.request_sent, a.error FROM outbox.attempts a
                      JOIN outbox.intents i ON i.id = a.intent_id WHERE i.key = 'p-later'$$,
                  $$VALUES ('resolved'::text, 'alice'::text, 2, false, 'retry requested: pending, due now'::text)$$,
                  'pending: an attempts row of class resolved, by p_by');

SELECT pg_temp.mk('p-amb') \g /dev/null
UPDATE outbox.intents SET next_attempt_at = now() + interval '10 minutes', attempts = 1, ambiguous = true,
                          first_attempt_at = now() - interval '1 minute' WHERE key = 'p-amb';
SELECT is(outbox.retry_now('p-amb', 'alice')::text, 'pending', 'retry of a pending row after an ambiguous attempt');
SELECT results_eq($$SELECT next_attempt_at, ambiguous, attempts FROM outbox.intents WHERE key = 'p-amb'$$,
                  $$VALUES (now(), true, 1)$$, 'it stays ambiguous (same key again), due now');
SELECT is((SELECT status FROM outbox.outcome('p-amb')), 'reconciling', 'the agent still sees reconciling');

-- ---------------------------------------------------------------------------
-- unknown on a target that honours keys, within key_ttl: same key again.
SELECT pg_temp.mk('u-keyed') \g /dev/null
UPDATE outbox.intents SET state = 'unknown', ambiguous = true, attempts = 3,
                          first_attempt_at = now() - interval '20 minutes', next_attempt_at = now() + interval '1 hour',
                          lease_owner = 'r-reconciling', lease_expires_at = now() + interval '30 seconds',
                          last_error = 'timeout after send'
 WHERE key = 'u-keyed';
SELECT is(outbox.retry_now('u-keyed', 'bob')::text, 'pending', 'retry of unknown on a key-honouring target, within key_ttl');
SELECT results_eq($$SELECT state::text, next_attempt_at, ambiguous, attempts, first_attempt_at, lease_owner, lease_expires_at
                      FROM outbox.intents WHERE key = 'u-keyed'$$,
                  $$VALUES ('pending'::text, now(), true, 3, now() - interval '20 minutes', NULL::text, NULL::timestamptz)$$,
                  'unknown -> pending: due now, still ambiguous, attempts and first attempt kept, lease cleared');
SELECT is((SELECT status FROM outbox.outcome('u-keyed')), 'reconciling', 'the agent sees reconciling, not pending');
SELECT matches((SELECT a.error FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id WHERE i.key = 'u-keyed'),
               '^retry requested: unknown -> pending with the same key \(target keyed honours keys; first attempt 00:20:00 ago, key_ttl 24:00:00\)$',
               'the attempts row says why it was safe');
SELECT results_eq($$SELECT key, attempt, ambiguous FROM outbox.claim('r1', ARRAY['keyed'], ARRAY[10], 10, 30000) WHERE key = 'u-keyed'$$,
                  $$VALUES ('u-keyed'::text, 4, true)$$,
                  'a relay claims it next, as attempt 4, told it is ambiguous (so it re-checks key_ttl)');
SELECT results_eq($$SELECT first_attempt_at FROM outbox.intents WHERE key = 'u-keyed'$$,
                  $$VALUES (now() - interval '20 minutes')$$, 'the claim keeps the first attempt (the key clock)');

-- unknown, not safe: refused, row unchanged, no attempts row.
SELECT pg_temp.mk('u-legacy', 'legacy') \g /dev/null
UPDATE outbox.intents SET state = 'unknown', ambiguous = true, attempts = 1, first_attempt_at = now() - interval '1 minute'
 WHERE key = 'u-legacy';
SELECT throws_ok($$SELECT outbox.retry_now('u-legacy', 'bob')$$, 'OR007',
                 'outbox.retry_now: key ''u-legacy'' has an unknown outcome and target ''legacy'' cannot deduplicate (no key header): sending it again could execute it twice; find out from the target whether it acted, then resolve it',
                 'unknown on a target without a key header: OR007, saying why and pointing to resolve');

SELECT pg_temp.mk('u-expired', 'short') \g /dev/null
UPDATE outbox.intents SET state = 'unknown', ambiguous = true, attempts = 2, first_attempt_at = now() - interval '2 hours'
 WHERE key = 'u-expired';
SELECT throws_ok($$SELECT outbox.retry_now('u-expired', 'bob')$$, 'OR007',
                 'outbox.retry_now: key ''u-expired'' has an unknown outcome and its first attempt was 02:00:00 ago, past target ''short''''s key_ttl of 01:00:00: the target may have forgotten the key, and sending it again could execute it twice; find out from the target whether it acted, then resolve it',
                 'unknown past the target''s key_ttl: OR007, saying why');

SELECT pg_temp.mk('u-edge', 'short') \g /dev/null
UPDATE outbox.intents SET state = 'unknown', ambiguous = true, attempts = 1, first_attempt_at = now() - interval '1 hour'
 WHERE key = 'u-edge';
SELECT throws_ok($$SELECT outbox.retry_now('u-edge', 'bob')$$, 'OR007', NULL,
                 'unknown exactly key_ttl after the first attempt: refused (the key may be gone)');

SELECT pg_temp.mk('u-nofirst') \g /dev/null
UPDATE outbox.intents SET state = 'unknown', ambiguous = true, attempts = 1, first_attempt_at = NULL WHERE key = 'u-nofirst';
SELECT throws_like($$SELECT outbox.retry_now('u-nofirst', 'bob')$$,
                   '%has an unknown outcome and no recorded first attempt, so whether target ''keyed'' still remembers the key cannot be told%',
                   'unknown with no recorded first attempt: refused (the key clock is unknown)');

SELECT results_eq($$SELECT key COLLATE "default", state::text, ambiguous, attempts FROM outbox.intents
                    WHERE key IN ('u-legacy', 'u-expired', 'u-edge', 'u-nofirst') ORDER BY key$$,
                  $$VALUES ('u-edge'::text, 'unknown'::text, true, 1), ('u-expired', 'unknown', true, 2),
                           ('u-legacy', 'unknown', true, 1), ('u-nofirst', 'unknown', true, 1)$$,
                  'refused retries change nothing');
SELECT is((SELECT count(*)::int FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
            WHERE i.key IN ('u-legacy', 'u-expired', 'u-edge', 'u-nofirst')),
          0, 'refused retries leave no attempts row');

-- ---------------------------------------------------------------------------
-- failed: pending again with attempts from 0, only if no attempt may have executed.
SELECT pg_temp.mk('f-clean', 'legacy') \g /dev/null
UPDATE outbox.intents SET state = 'failed', attempts = 8, first_attempt_at = now() - interval '3 days',
                          next_attempt_at = now() - interval '1 day', response_status = 404,
                          response_body = 'no such account', last_error = 'HTTP 404: permanent'
 WHERE key = 'f-clean';
SELECT is(outbox.retry_now('f-clean', 'carol')::text, 'pending',
          'retry of a failed row with no ambiguous attempt (even on a target without keys, past key_ttl)');
SELECT results_eq($$SELECT state::text, attempts, first_attempt_at, next_attempt_at, ambiguous, response_status, response_body
                      FROM outbox.intents WHERE key = 'f-clean'$$,
                  $$VALUES ('pending'::text, 0, NULL::timestamptz, now(), false, NULL::int, NULL::text)$$,
                  'failed -> pending: attempts from 0, no first attempt, due now, saved response cleared');
SELECT results_eq($$SELECT a.class::text, a.relay, a.attempt, a.error FROM outbox.attempts a
                      JOIN outbox.intents i ON i.id = a.intent_id WHERE i.key = 'f-clean'$$,
                  $$VALUES ('resolved'::text, 'carol'::text, 8,
                            'retry requested: failed -> pending (no attempt may have executed; 8 attempt(s) before, counted from 0 again)'::text)$$,
                  'the attempts row keeps the old attempt number and says what changed');
SELECT is((SELECT status FROM outbox.outcome('f-clean')), 'pending', 'the agent sees pending again');

SELECT pg_temp.mk('f-amb') \g /dev/null
UPDATE outbox.intents SET state = 'unknown', ambiguous = true, attempts = 2, first_attempt_at = now() - interval '1 minute'
 WHERE key = 'f-amb';
SELECT outbox.resolve('f-amb', 'failed', 'the PSP shows no charge') \g /dev/null
SELECT throws_ok($$SELECT outbox.retry_now('f-amb', 'carol')$$, 'OR007',
                 'outbox.retry_now: key ''f-amb'' failed after an attempt that may have executed: sending it again could execute it twice',
                 'failed after an ambiguous attempt (resolved by a person): OR007');
SELECT results_eq($$SELECT state::text, attempts FROM outbox.intents WHERE key = 'f-amb'$$,
                  $$VALUES ('failed'::text, 2)$$, 'and it stays failed');

-- ---------------------------------------------------------------------------
-- other states: refused.
SELECT pg_temp.mk('o-flight') \g /dev/null
UPDATE outbox.intents SET state = 'in_flight', attempts = 1, lease_owner = 'r1', lease_expires_at = now() + interval '30 s',
                          first_attempt_at = now() WHERE key = 'o-flight';
SELECT throws_ok($$SELECT outbox.retry_now('o-flight', 'x')$$, 'OR007',
                 'outbox.retry_now: key ''o-flight'' is in_flight, being delivered now', 'retry of an in_flight row: OR007');
SELECT pg_temp.mk('o-await', 'appr', '{"amount": 500000}') \g /dev/null
SELECT throws_ok($$SELECT outbox.retry_now('o-await', 'x')$$, 'OR007',
                 'outbox.retry_now: key ''o-await'' is awaiting_approval, approve it instead',
                 'retry of a row awaiting approval: OR007');
SELECT pg_temp.mk('o-ok') \g /dev/null
UPDATE outbox.intents SET state = 'succeeded', attempts = 1, response_status = 200 WHERE key = 'o-ok';
SELECT throws_ok($$SELECT outbox.retry_now('o-ok', 'x')$$, 'OR007',
                 'outbox.retry_now: key ''o-ok'' is succeeded, the target acted; nothing to retry',
                 'retry of a succeeded row: OR007');
SELECT pg_temp.mk('o-cancelled') \g /dev/null
SELECT outbox.cancel('o-cancelled', 'changed my mind') \g /dev/null
SELECT throws_ok($$SELECT outbox.retry_now('o-cancelled', 'x')$$, 'OR007',
                 'outbox.retry_now: key ''o-cancelled'' is cancelled, it is final; nothing to retry',
                 'retry of a cancelled row: OR007');
SELECT results_eq($$SELECT key COLLATE "default", state::text FROM outbox.intents WHERE key IN ('o-flight', 'o-await', 'o-ok', 'o-cancelled') ORDER BY key$$,
                  $$VALUES ('o-await'::text, 'awaiting_approval'::text), ('o-cancelled', 'cancelled'),
                           ('o-flight', 'in_flight'), ('o-ok', 'succeeded')$$,
                  'refused retries change nothing');

-- a disabled target: nothing would be sent.
SELECT pg_temp.mk('d-pending', 'off') \g /dev/null
UPDATE outbox.targets SET enabled = false WHERE name = 'off';
UPDATE outbox.intents SET next_attempt_at = now() + interval '1 hour' WHERE key = 'd-pending';
SELECT throws_ok($$SELECT outbox.retry_now('d-pending', 'x')$$, 'OR007',
                 'outbox.retry_now: target ''off'' of key ''d-pending'' is disabled: nothing would be sent',
                 'retry on a disabled target: OR007');
SELECT is((SELECT next_attempt_at FROM outbox.intents WHERE key = 'd-pending'), now() + interval '1 hour',
          'and the row keeps its schedule');

-- ---------------------------------------------------------------------------
-- who: p_by, else the session user.
SELECT pg_temp.mk('w-null') \g /dev/null
SELECT pg_temp.mk('w-empty') \g /dev/null
SELECT outbox.retry_now('w-null') \g /dev/null
SELECT outbox.retry_now('w-empty', '') \g /dev/null
SELECT results_eq($$SELECT i.key COLLATE "default", a.relay FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
                    WHERE i.key IN ('w-null', 'w-empty') ORDER BY i.key$$,
                  $$VALUES ('w-empty'::text, session_user::text COLLATE "default"), ('w-null', session_user::text COLLATE "default")$$,
                  'no p_by (NULL or empty): the attempts row names the session user');
SELECT is(pg_temp.notes('w-null'), 1::bigint, 'one attempts row per retry');
SELECT is(outbox.retry_now('w-null', 'again')::text, 'pending', 'a second retry of a pending row is fine');
SELECT is(pg_temp.notes('w-null'), 2::bigint, 'and leaves a second attempts row');

-- ---------------------------------------------------------------------------
-- roles: only outbox_admin.
SELECT pg_temp.mk('r-admin') \g /dev/null
SELECT pg_temp.mk('r-other') \g /dev/null
SELECT ok(has_function_privilege('outbox_admin', 'outbox.retry_now(text,text)', 'EXECUTE'), 'outbox_admin may retry');
SELECT ok(NOT has_function_privilege('outbox_operator', 'outbox.retry_now(text,text)', 'EXECUTE'), 'outbox_operator may not');
SELECT ok(NOT has_function_privilege('outbox_app', 'outbox.retry_now(text,text)', 'EXECUTE'), 'outbox_app may not');
SELECT ok(NOT has_function_privilege('outbox_relay', 'outbox.retry_now(text,text)', 'EXECUTE'), 'outbox_relay may not');
SELECT is_empty($$SELECT 1 FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
                   WHERE p.oid = 'outbox.retry_now(text,text)'::regprocedure AND a.grantee = 0$$,
                'PUBLIC may not');
SET ROLE outbox_admin;
SELECT is(outbox.retry_now('r-admin', 'admin')::text, 'pending', 'as outbox_admin: works');
RESET ROLE;
SET ROLE outbox_operator;
SELECT throws_ok($$SELECT outbox.retry_now('r-other', 'op')$$, '42501', 'permission denied for function retry_now',
                 'as outbox_operator: permission denied');
RESET ROLE;
SET ROLE outbox_app;
SELECT throws_ok($$SELECT outbox.retry_now('r-other', 'app')$$, '42501', 'permission denied for function retry_now',
                 'as outbox_app: permission denied');
RESET ROLE;
SET ROLE outbox_relay;
SELECT throws_ok($$SELECT outbox.retry_now('r-other', 'relay')$$, '42501', 'permission denied for function retry_now',
                 'as outbox_relay: permission denied');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
