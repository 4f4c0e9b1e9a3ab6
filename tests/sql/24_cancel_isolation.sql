-- 24_cancel_isolation: what cancel says and allows, and isolation by login
-- (migrations/0026_isolation_by_login.sql; issue 24, items 8 and 9).
--   cancel, cancel_run   the same rule: pending or awaiting approval, not ambiguous, no
--                        attempt that may have executed (never sent, or refused with a 4xx);
--                        an intent whose doubt only a status URL cleared is refused by cancel
--                        (OR007, saying so) and left by cancel_run
--   what happened        the reason, the history row and outcome's message say whether and
--                        how it was sent ("cancelled before it was sent" only when nothing was)
--   isolation            a login in outbox.isolated_logins sees and acts on only the intents it
--                        enqueued: another login's key reads as no key (outcome, traceparent_of,
--                        compensations, links; its tombstone too), is refused as taken (enqueue,
--                        compensate: OR001 naming nothing of it), is no original (compensate:
--                        OR008); cancel_run cancels its own intents of a shared run id; an
--                        ordering head of another login is not named. A login not listed, or a
--                        member of outbox_operator or outbox_relay, keeps today's view.
-- Deliveries are recorded through outbox.record, as the relay records them (the claim is
-- played by an UPDATE, to pick the key). The logins are real LOGIN roles, created in this
-- transaction (rolled back at the end, roles included); SET SESSION AUTHORIZATION makes
-- one the session's login (session_user), which is what isolation looks at.
BEGIN;
SELECT plan(57);

INSERT INTO outbox.targets (name, url, status_url, backoff_base_ms)
VALUES ('t', 'https://t.test/hook', 'https://t.test/status/{key}', 100);

-- one delivery of key k as the relay makes it: claimed (attempt + 1), then recorded
CREATE FUNCTION pg_temp.send(k text, cls outbox.attempt_class, st outbox.intent_state, amb boolean, http int,
                             body text DEFAULT NULL) RETURNS int
LANGUAGE sql AS $$
    UPDATE outbox.intents SET state = 'in_flight', attempts = attempts + 1, lease_owner = 'r24',
                              lease_expires_at = now() + interval '30 s', first_attempt_at = coalesce(first_attempt_at, now())
     WHERE key = k;
    SELECT outbox.record('r24', ARRAY[id], ARRAY[attempts], ARRAY[st], ARRAY[0], ARRAY[amb], ARRAY[cls], ARRAY[true],
                         ARRAY[http], ARRAY['HTTP ' || http], ARRAY[5], ARRAY[body], ARRAY[true])
      FROM outbox.intents WHERE key = k;
$$;
-- the status check of an unknown key k, as claim_unknown and record make it: 404, "not executed"
CREATE FUNCTION pg_temp.status_says_no(k text) RETURNS int
LANGUAGE sql AS $$
    UPDATE outbox.intents SET lease_owner = 'r24', lease_expires_at = now() + interval '30 s' WHERE key = k;
    SELECT outbox.record('r24', ARRAY[id], ARRAY[attempts], ARRAY['pending']::outbox.intent_state[], ARRAY[0],
                         ARRAY[false], ARRAY['reconciled_not_executed']::outbox.attempt_class[], ARRAY[true],
                         ARRAY[404], ARRAY['status check: not executed'], ARRAY[3], ARRAY[NULL::text], ARRAY[NULL::boolean])
      FROM outbox.intents WHERE key = k;
$$;
CREATE FUNCTION pg_temp.st(k text) RETURNS text LANGUAGE sql AS $$ SELECT state::text FROM outbox.intents WHERE key = k $$;

-- ===========================================================================
-- 8. cancel says what happened, and agrees with cancel_run

-- sent once, refused with a 429: the target did not act; cancel takes it and says so
SELECT outbox.enqueue('c:429', 't', '{"n": 1}') \g /dev/null
SELECT pg_temp.send('c:429', 'retry_later', 'pending', false, 429) \g /dev/null
SELECT is(outbox.cancel('c:429', 'not needed')::text, 'cancelled', 'cancel of an intent the target refused with a 429');
SELECT results_eq($$SELECT status, last_error, message FROM outbox.outcome('c:429')$$,
                  $$VALUES ('cancelled'::text,
                            'cancelled: not needed (after 1 attempt was sent: the target refused it with HTTP 429 and did not act)'::text,
                            'cancelled after 1 attempt was sent: the target refused it with HTTP 429 and did not act'::text)$$,
                  'its outcome says it was sent and refused, not "cancelled before it was sent"');
SELECT is((SELECT a.error FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
            WHERE i.key = 'c:429' AND a.class = 'resolved'),
          'cancelled: not needed (after 1 attempt was sent: the target refused it with HTTP 429 and did not act)',
          'the history row says the same');

-- two refusals
SELECT outbox.enqueue('c:408-429', 't', '{"n": 2}') \g /dev/null
SELECT pg_temp.send('c:408-429', 'retry_later', 'pending', false, 408) \g /dev/null
SELECT pg_temp.send('c:408-429', 'retry_later', 'pending', false, 429) \g /dev/null
SELECT outbox.cancel('c:408-429') \g /dev/null
SELECT is((SELECT message FROM outbox.outcome('c:408-429')),
          'cancelled after 2 attempts were sent: the target refused each, the last with HTTP 429, and did not act',
          'two refusals: both counted, the last status named');

-- never sent: as before
SELECT outbox.enqueue('c:new', 't', '{"n": 3}') \g /dev/null
SELECT outbox.cancel('c:new', 'typo') \g /dev/null
SELECT results_eq($$SELECT last_error, message FROM outbox.outcome('c:new')$$,
                  $$VALUES ('cancelled: typo'::text, 'cancelled before it was sent'::text)$$,
                  'never sent: "cancelled before it was sent", the reason alone');

-- the issue's case: an attempt that may have executed (503), an unknown outcome, then the
-- status URL said "not executed": pending again, not ambiguous, and refused
SELECT outbox.enqueue('c:url', 't', '{"n": 4}') \g /dev/null
SELECT pg_temp.send('c:url', 'ambiguous', 'unknown', true, 503) \g /dev/null
SELECT pg_temp.status_says_no('c:url') \g /dev/null
SELECT results_eq($$SELECT state::text, ambiguous FROM outbox.intents WHERE key = 'c:url'$$,
                  $$VALUES ('pending'::text, false)$$, '(the status URL cleared the doubt: pending, not ambiguous)');
SELECT throws_ok($$SELECT outbox.cancel('c:url', 'x')$$, 'OR007',
                 'outbox.cancel: key ''c:url'' is pending after 1 attempt was sent: the target''s status URL reported that it did not execute (it may have answered while the target was still working on a request), cannot cancel',
                 'cancel refuses it, saying what happened and why');
SELECT is(pg_temp.st('c:url'), 'pending', 'it stays pending (it is sent again, with its key)');

-- an ambiguous pending row: refused as before
SELECT outbox.enqueue('c:amb', 't', '{"n": 5}') \g /dev/null
SELECT pg_temp.send('c:amb', 'ambiguous', 'pending', true, 502) \g /dev/null
SELECT throws_ok($$SELECT outbox.cancel('c:amb', 'x')$$, 'OR007',
                 'outbox.cancel: key ''c:amb'' is pending after an ambiguous attempt (it may have executed), cannot cancel',
                 'an ambiguous pending row: the message of before');

-- cancel_run agrees: of a run with the same four shapes, it takes the never-sent and the
-- refused ones, and leaves the status-URL and the ambiguous ones
SELECT outbox.enqueue('r8:new', 't', '{"n": 1}', 'run-8') \g /dev/null
SELECT outbox.enqueue('r8:429', 't', '{"n": 2}', 'run-8') \g /dev/null
SELECT outbox.enqueue('r8:url', 't', '{"n": 3}', 'run-8') \g /dev/null
SELECT outbox.enqueue('r8:amb', 't', '{"n": 4}', 'run-8') \g /dev/null
SELECT pg_temp.send('r8:429', 'retry_later', 'pending', false, 429) \g /dev/null
SELECT pg_temp.send('r8:url', 'ambiguous', 'unknown', true, 503) \g /dev/null
SELECT pg_temp.status_says_no('r8:url') \g /dev/null
SELECT pg_temp.send('r8:amb', 'ambiguous', 'pending', true, 502) \g /dev/null
SELECT is(outbox.cancel_run('run-8', 'abandoned'), 2, 'cancel_run: 2 (never sent, and refused with a 429)');
SELECT results_eq($$SELECT key COLLATE "default", state::text FROM outbox.intents WHERE run_id = 'run-8' ORDER BY key$$,
                  $$VALUES ('r8:429'::text, 'cancelled'::text), ('r8:amb', 'pending'), ('r8:new', 'cancelled'),
                           ('r8:url', 'pending')$$,
                  'the same as cancel: refused with a 429 cancelled; status-URL-cleared and ambiguous left');
SELECT results_eq($$SELECT i.key COLLATE "default", i.last_error, a.error FROM outbox.intents i
                      JOIN outbox.attempts a ON a.intent_id = i.id AND a.class = 'resolved'
                     WHERE i.run_id = 'run-8' ORDER BY i.key$$,
                  $$VALUES ('r8:429'::text,
                            'cancelled: abandoned (after 1 attempt was sent: the target refused it with HTTP 429 and did not act)'::text,
                            'cancelled with run run-8: abandoned (after 1 attempt was sent: the target refused it with HTTP 429 and did not act)'::text),
                           ('r8:new', 'cancelled: abandoned', 'cancelled with run run-8: abandoned')$$,
                  'cancel_run''s reason and history row say what happened, as cancel''s do');
SELECT is((SELECT message FROM outbox.outcome('r8:429')),
          'cancelled after 1 attempt was sent: the target refused it with HTTP 429 and did not act',
          'and so does the outcome');

-- the rule, key by key: cancel takes exactly what cancel_run took
SELECT outbox.enqueue('r9:' || s, 't', jsonb_build_object('s', s), 'run-9')
  FROM unnest(ARRAY['new', '429', 'url', 'amb']) s \g /dev/null
SELECT pg_temp.send('r9:429', 'retry_later', 'pending', false, 429) \g /dev/null
SELECT pg_temp.send('r9:url', 'ambiguous', 'unknown', true, 503) \g /dev/null
SELECT pg_temp.status_says_no('r9:url') \g /dev/null
SELECT pg_temp.send('r9:amb', 'ambiguous', 'pending', true, 502) \g /dev/null
CREATE FUNCTION pg_temp.cancels(k text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM outbox.cancel(k, 'one by one');
    RETURN true;
EXCEPTION WHEN SQLSTATE 'OR007' THEN
    RETURN false;
END $$;
SELECT results_eq($$SELECT s, pg_temp.cancels('r9:' || s) FROM unnest(ARRAY['new', '429', 'url', 'amb']) s ORDER BY s$$,
                  $$VALUES ('429'::text, true), ('amb', false), ('new', true), ('url', false)$$,
                  'cancel, key by key, takes exactly what cancel_run took');

-- a failed intent of an ordering group (0013): still cancelled, and told right
SELECT outbox.enqueue('c:grp', 't', '{"n": 6}', NULL, NULL, 'grp-8') \g /dev/null
SELECT pg_temp.send('c:grp', 'permanent_failure', 'failed', false, 400) \g /dev/null
SELECT outbox.cancel('c:grp', 'skip it') \g /dev/null
SELECT results_eq($$SELECT last_error, message FROM outbox.outcome('c:grp')$$,
                  $$VALUES ('cancelled: skip it (it had failed: HTTP 400)'::text,
                            'cancelled after 1 attempt was sent: the target refused it with HTTP 400 and did not act'::text)$$,
                  'a failed step of a group: cancelled, "it had failed", and the outcome says it was sent');

-- an intent cancelled before 0026 after the status URL cleared it reads right too
SELECT outbox.enqueue('c:old', 't', '{"n": 7}') \g /dev/null
SELECT pg_temp.send('c:old', 'ambiguous', 'unknown', true, 503) \g /dev/null
SELECT pg_temp.status_says_no('c:old') \g /dev/null
UPDATE outbox.intents SET state = 'cancelled', last_error = 'cancelled: x' WHERE key = 'c:old';
SELECT is((SELECT message FROM outbox.outcome('c:old')),
          'cancelled after 1 attempt was sent: the target''s status URL reported that it did not execute',
          'an intent cancelled by the old rule: the outcome says what its attempts were');

-- compensate's hint for a pending original: "cancel it instead" only when cancel would
CREATE FUNCTION pg_temp.hint_of(stmt text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE h text;
BEGIN
    EXECUTE stmt;
    RETURN NULL;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS h = PG_EXCEPTION_HINT;
    RETURN h;
END $$;
SELECT is(pg_temp.hint_of($$SELECT outbox.compensate('r8:url', 'r8:url:undo', 't', '{}')$$),
          'It is being delivered: compensate once its outcome is succeeded or unknown.',
          'compensate of a status-URL-cleared pending original: not "cancel it instead"');
SELECT outbox.enqueue('c:429b', 't', '{"n": 8}') \g /dev/null
SELECT pg_temp.send('c:429b', 'retry_later', 'pending', false, 429) \g /dev/null
SELECT is(pg_temp.hint_of($$SELECT outbox.compensate('c:429b', 'c:429b:undo', 't', '{}')$$),
          'The target has not acted on it: cancel it instead (outbox.cancel, outbox.cancel_run).',
          'compensate of a refused pending original: cancel it instead');

-- ===========================================================================
-- 9. isolation by login

CREATE ROLE outbox_t24_a LOGIN;    -- isolated
CREATE ROLE outbox_t24_b LOGIN;    -- not isolated
CREATE ROLE outbox_t24_op LOGIN;   -- listed, but an operator: never isolated
CREATE ROLE outbox_t24_relay LOGIN;   -- listed, but a relay: never isolated
GRANT outbox_app TO outbox_t24_a, outbox_t24_b, outbox_t24_op;
GRANT outbox_operator TO outbox_t24_op;
GRANT outbox_relay TO outbox_t24_relay;
INSERT INTO outbox.isolated_logins (login, note)
VALUES ('outbox_t24_a', 'test'), ('outbox_t24_op', 'test'), ('outbox_t24_relay', 'test');

-- b's intents: a succeeded one with a saved response, its compensation, one of a run
-- a shares the name of, one pruned (a tombstone), and the head of an ordering group
SET SESSION AUTHORIZATION outbox_t24_b;
SELECT outbox.enqueue('b:1', 't', '{"amount": 10}', 'run-shared', p_traceparent => '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01') \g /dev/null
SELECT outbox.enqueue('b:run', 't', '{"step": 2}', 'run-shared') \g /dev/null
SELECT outbox.enqueue('b:old', 't', '{"old": true}') \g /dev/null
SELECT outbox.enqueue('b:o1', 't', '{"o": 1}', NULL, NULL, 'g-shared') \g /dev/null
RESET SESSION AUTHORIZATION;
SELECT pg_temp.send('b:1', 'succeeded', 'succeeded', false, 200, '{"card": "4111-xxxx", "secret": "b"}') \g /dev/null
SELECT pg_temp.send('b:old', 'succeeded', 'succeeded', false, 200, '{"old": "b"}') \g /dev/null
SET SESSION AUTHORIZATION outbox_t24_b;
SELECT outbox.compensate('b:1', 'b:1:undo', 't', '{"undo": 10}') \g /dev/null
RESET SESSION AUTHORIZATION;
UPDATE outbox.targets SET retain_for = '1 hour' WHERE name = 't';
UPDATE outbox.intents SET updated_at = now() - interval '2 hours' WHERE key = 'b:old';
SELECT is((SELECT pruned FROM outbox.prune_step(1000)) >= 1, true, '(b:old is pruned: its key is a tombstone)');
SELECT is((SELECT enqueued_by FROM outbox.tombstones WHERE intent_id IS NOT NULL ORDER BY pruned_at DESC LIMIT 1),
          'outbox_t24_b', 'the tombstone keeps the login of its intent');
UPDATE outbox.targets SET retain_for = '7 days' WHERE name = 't';

SELECT results_eq($$SELECT key COLLATE "default", enqueued_by FROM outbox.intents WHERE key IN ('b:1', 'b:1:undo', 'b:run') ORDER BY key$$,
                  $$VALUES ('b:1'::text, 'outbox_t24_b'::text), ('b:1:undo', 'outbox_t24_b'), ('b:run', 'outbox_t24_b')$$,
                  'enqueue and compensate store the login (session_user)');

-- a, isolated
SET SESSION AUTHORIZATION outbox_t24_a;
SET ROLE outbox_app;   -- SET ROLE does not change the login
SELECT outbox.enqueue('a:1', 't', '{"amount": 20}') \g /dev/null
SELECT outbox.enqueue('a:run', 't', '{"step": 1}', 'run-shared') \g /dev/null
SELECT outbox.enqueue('a:o2', 't', '{"o": 2}', NULL, NULL, 'g-shared') \g /dev/null
SELECT is_empty($$SELECT * FROM outbox.outcome('b:1')$$, 'isolated: outcome of another login''s key: no row, as for no key');
SELECT is_empty($$SELECT * FROM outbox.outcome('b:old')$$, 'isolated: nor of its tombstone');
SELECT is(outbox.traceparent_of('b:1'), NULL, 'isolated: traceparent_of another login''s key: NULL');
SELECT is_empty($$SELECT * FROM outbox.compensations('b:1')$$, 'isolated: no compensations of another login''s key');
SELECT is_empty($$SELECT * FROM outbox.links('b:1')$$, 'isolated: no links of another login''s key');
SELECT is_empty($$SELECT * FROM outbox.links('b:1:undo')$$, 'isolated: nor of its compensation');
SELECT throws_ok($$SELECT outbox.enqueue('b:1', 't', '{"amount": 10}')$$, 'OR001',
                 'outbox.enqueue: key ''b:1'' is already used by another login',
                 'isolated: enqueue of another login''s key with its very payload: refused, no saved response');
SELECT throws_ok($$SELECT outbox.enqueue('b:1', 't', '{"amount": 99}', NULL, NULL, 'g-x')$$, 'OR001',
                 'outbox.enqueue: key ''b:1'' is already used by another login',
                 'isolated: with another payload and group: the same refusal (no fields, no group, no target named)');
SELECT throws_ok($$SELECT outbox.enqueue('b:old', 't', '{"old": true}')$$, 'OR001',
                 'outbox.enqueue: key ''b:old'' is already used by another login',
                 'isolated: another login''s remembered (pruned) key: the same refusal');
SELECT throws_ok($$SELECT outbox.compensate('b:1', 'a:undo-b', 't', '{}')$$, 'OR008',
                 'outbox.compensate: no intent with key ''b:1''',
                 'isolated: another login''s intent is no original to compensate (OR008, as for no key)');
SELECT is((SELECT message FROM outbox.outcome('a:o2')),
          'waiting for its turn in ordering group g-shared, behind an intent of another login',
          'isolated: held behind another login''s head: not named');
SELECT is(outbox.cancel_run('run-shared', 'a gives up'), 1, 'isolated: cancel_run of a shared run id cancels its own intent only');
SELECT results_eq($$SELECT status FROM outbox.outcome('a:1')$$, $$VALUES ('pending'::text)$$, 'isolated: its own outcome');
SELECT results_eq($$SELECT inserted, status FROM outbox.enqueue('a:1', 't', '{"amount": 20}')$$,
                  $$VALUES (false, 'pending'::text)$$, 'isolated: its own key again: the same intent');
RESET SESSION AUTHORIZATION;

SELECT results_eq($$SELECT key COLLATE "default", state::text FROM outbox.intents WHERE run_id = 'run-shared' ORDER BY key$$,
                  $$VALUES ('a:run'::text, 'cancelled'::text), ('b:1', 'succeeded'), ('b:1:undo', 'pending'),
                           ('b:run', 'pending')$$,
                  'the other login''s intents of the run are untouched');
SELECT results_eq($$SELECT key COLLATE "default", enqueued_by FROM outbox.intents WHERE key IN ('a:1', 'a:run') ORDER BY key$$,
                  $$VALUES ('a:1'::text, 'outbox_t24_a'::text), ('a:run', 'outbox_t24_a')$$,
                  'the login is stored, not the role it SET');
SELECT pg_temp.send('a:1', 'succeeded', 'succeeded', false, 201, '{"a": "own"}') \g /dev/null

SET SESSION AUTHORIZATION outbox_t24_a;
SELECT results_eq($$SELECT status, response_status, response_body FROM outbox.outcome('a:1')$$,
                  $$VALUES ('succeeded'::text, 201, '{"a": "own"}'::text)$$, 'isolated: its own saved response');
SELECT results_eq($$SELECT inserted, response_body FROM outbox.enqueue('a:1', 't', '{"amount": 20}')$$,
                  $$VALUES (false, '{"a": "own"}'::text)$$, 'isolated: a retry of its own key gets its saved response');
SELECT throws_ok($$SELECT outbox.compensate('a:1', 'b:1:undo', 't', '{"undo": 10}')$$, 'OR001',
                 'outbox.compensate: key ''b:1:undo'' is already used by another login',
                 'isolated: a compensation under another login''s key: refused without naming what it compensates');
SELECT results_eq($$SELECT inserted FROM outbox.compensate('a:1', 'a:1:undo', 't', '{"undo": 20}')$$,
                  $$VALUES (true)$$, 'isolated: it compensates its own intent');
SELECT results_eq($$SELECT key FROM outbox.compensations('a:1')$$, $$VALUES ('a:1:undo'::text)$$,
                  'isolated: and sees its own compensations');
SELECT results_eq($$SELECT relation, other_key FROM outbox.links('a:1:undo')$$,
                  $$VALUES ('compensates'::text, 'a:1'::text)$$, 'isolated: and its own links');
RESET SESSION AUTHORIZATION;

-- an intent enqueued before 0026 has no login: no isolated login's
SELECT outbox.enqueue('legacy:1', 't', '{"l": 1}') \g /dev/null
UPDATE outbox.intents SET enqueued_by = NULL WHERE key = 'legacy:1';
SET SESSION AUTHORIZATION outbox_t24_a;
SELECT is_empty($$SELECT * FROM outbox.outcome('legacy:1')$$, 'isolated: an intent of no recorded login is not its own');
RESET SESSION AUTHORIZATION;

-- b, not isolated: today's behaviour, also towards an isolated login's intents
SET SESSION AUTHORIZATION outbox_t24_b;
SELECT results_eq($$SELECT status, response_body FROM outbox.outcome('a:1')$$,
                  $$VALUES ('succeeded'::text, '{"a": "own"}'::text)$$, 'not isolated: reads any key (as before 0026)');
SELECT results_eq($$SELECT inserted, response_body FROM outbox.enqueue('a:1', 't', '{"amount": 20}')$$,
                  $$VALUES (false, '{"a": "own"}'::text)$$, 'not isolated: enqueue of another login''s key as before');
SELECT results_eq($$SELECT status FROM outbox.outcome('b:old')$$, $$VALUES ('succeeded'::text)$$,
                  'not isolated: its tombstones as before');
SELECT results_eq($$SELECT status FROM outbox.outcome('legacy:1')$$, $$VALUES ('pending'::text)$$,
                  'not isolated: intents of no recorded login as before');
SELECT alike((SELECT message FROM outbox.outcome('a:o2')), 'waiting for b:o1 (pending), the head of ordering group g-shared%',
             'not isolated: the head of a group is named');
SELECT is(outbox.traceparent_of('b:1'), '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', 'not isolated: traceparent_of');
SELECT is(outbox.cancel_run('run-shared', 'b gives up'), 1, 'not isolated: cancel_run as before');
RESET SESSION AUTHORIZATION;

-- listed, but able to read every intent anyway: never isolated
SET SESSION AUTHORIZATION outbox_t24_op;
SELECT results_eq($$SELECT status, response_body FROM outbox.outcome('b:1')$$,
                  $$VALUES ('succeeded'::text, '{"card": "4111-xxxx", "secret": "b"}'::text)$$,
                  'an operator login in the list is not isolated (it reads outbox.intents anyway)');
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION outbox_t24_relay;
SELECT results_eq($$SELECT status FROM outbox.outcome('b:1')$$, $$VALUES ('succeeded'::text)$$,
                  'a relay login in the list is not isolated (its admin port answers outcomes)');
RESET SESSION AUTHORIZATION;

-- the list: admins write it, operators read it, the app neither
SET ROLE outbox_app;
SELECT throws_ok($$SELECT * FROM outbox.isolated_logins$$, '42501', NULL, 'the app cannot read the list');
SELECT throws_ok($$DELETE FROM outbox.isolated_logins$$, '42501', NULL, 'the app cannot take itself off the list');
RESET ROLE;
SET ROLE outbox_operator;
SELECT results_eq($$SELECT login, isolated_by FROM outbox.isolated_logins ORDER BY login$$,
                  $$VALUES ('outbox_t24_a'::text, session_user::text COLLATE "default"),
                           ('outbox_t24_op', session_user::text COLLATE "default"),
                           ('outbox_t24_relay', session_user::text COLLATE "default")$$,
                  'operators read the list, with who listed each');
RESET ROLE;
SET ROLE outbox_admin;
DELETE FROM outbox.isolated_logins WHERE login = 'outbox_t24_a';
RESET ROLE;
SET SESSION AUTHORIZATION outbox_t24_a;
SELECT results_eq($$SELECT status FROM outbox.outcome('b:1')$$, $$VALUES ('succeeded'::text)$$,
                  'off the list (an admin deleted its row): it reads every key again');
RESET SESSION AUTHORIZATION;

SELECT * FROM finish();
ROLLBACK;
