-- 06_relay_functions: the relay's side (migrations/0003_relay.sql).
--   claim              due pending rows only, oldest first, per-target rooms and an overall limit;
--                      sets in_flight, attempts + 1, lease owner and expiry
--   record             fenced by (lease owner, attempt number): a late or foreign writer changes
--                      nothing, but its attempts row is still written (recorded = false)
--   release            back to pending with the attempt number restored
--   take_over          only rows whose lease expired; returns the previous owner; fences the old owner out
--   renew_leases       only the caller's in-flight rows
--   relay_heartbeat / relay_gone   (next_due_ms: 08_next_due.sql)
-- The whole file runs in one transaction, so now() is one instant: leases and
-- due times are compared exactly.
BEGIN;
SELECT plan(69);

INSERT INTO outbox.targets (name, url)
SELECT t, format('https://%s.test/hook', t) FROM unnest(ARRAY['ta', 'tb', 'tc', 'td']) AS t;

CREATE FUNCTION pg_temp.id(k text) RETURNS bigint LANGUAGE sql AS $$ SELECT id FROM outbox.intents WHERE key = k $$;
CREATE FUNCTION pg_temp.mk(k text, tgt text, due interval DEFAULT '0') RETURNS bigint LANGUAGE sql AS $$
    SELECT intent_id FROM outbox.enqueue(k, tgt, jsonb_build_object('k', k));
    UPDATE outbox.intents SET next_attempt_at = now() + due WHERE key = k RETURNING id;
$$;
-- one-element record() call
CREATE FUNCTION pg_temp.rec(relay text, k text, attempt int, st outbox.intent_state, cls outbox.attempt_class,
                            http int DEFAULT NULL, body text DEFAULT NULL, amb boolean DEFAULT false,
                            delay_ms int DEFAULT NULL, err text DEFAULT NULL) RETURNS int LANGUAGE sql AS $$
    SELECT outbox.record(relay, ARRAY[pg_temp.id(k)], ARRAY[attempt], ARRAY[st], ARRAY[delay_ms], ARRAY[amb], ARRAY[cls],
                         ARRAY[http IS NOT NULL OR amb], ARRAY[http], ARRAY[err], ARRAY[42], ARRAY[body], NULL::boolean[]);
$$;

-- ---------------------------------------------------------------------------
-- claim
SELECT pg_temp.mk('a1', 'ta', '-1 minute'), pg_temp.mk('a2', 'ta', '-2 minutes'), pg_temp.mk('a3', 'ta', '-3 minutes'),
       pg_temp.mk('b1', 'tb', '-1 minute'), pg_temp.mk('b2', 'tb', '-2 minutes'), pg_temp.mk('b3', 'tb', '-3 minutes'),
       pg_temp.mk('a-now', 'ta', '0'), pg_temp.mk('a-later', 'ta', '1 second'), pg_temp.mk('a-wait', 'ta', '-1 hour'),
       pg_temp.mk('c1', 'tc', '-1 hour') \g /dev/null
UPDATE outbox.intents SET state = 'awaiting_approval' WHERE key = 'a-wait';

CREATE TEMP TABLE c1 AS SELECT * FROM outbox.claim('r1', ARRAY['ta', 'tb'], ARRAY[2, 1], 10, 30000);
SELECT set_eq($$SELECT key FROM c1$$, ARRAY['a3', 'a2', 'b3'],
              'claim: at most rooms[i] per target (2 of ta, 1 of tb), the oldest due first');
SELECT results_eq($$SELECT DISTINCT attempt, ambiguous, first_attempt_ms FROM c1$$,
                  $$VALUES (1, false, (extract(epoch FROM now()) * 1000)::bigint)$$,
                  'claim returns attempt 1, not ambiguous, first attempt now');
SELECT results_eq($$SELECT c1.payload::jsonb, c1.target FROM c1 WHERE key = 'a3'$$,
                  $$VALUES ('{"k": "a3"}'::jsonb, 'ta'::text)$$, 'claim returns the payload and target');
SELECT results_eq($$SELECT DISTINCT i.state::text, i.attempts, i.lease_owner, i.lease_expires_at, i.first_attempt_at
                      FROM outbox.intents i JOIN c1 USING (id)$$,
                  $$VALUES ('in_flight'::text, 1, 'r1'::text, now() + interval '30 seconds', now())$$,
                  'claimed rows: in_flight, attempts + 1, lease_owner, lease_expires_at = now + lease, first_attempt_at');
SELECT results_eq($$SELECT state::text, attempts, lease_owner FROM outbox.intents WHERE key IN ('a1', 'b1', 'b2') ORDER BY key$$,
                  $$VALUES ('pending'::text, 0, NULL::text), ('pending', 0, NULL), ('pending', 0, NULL)$$,
                  'rows beyond the rooms stay pending, untouched');

CREATE TEMP TABLE c2 AS SELECT * FROM outbox.claim('r2', ARRAY['ta', 'tb'], ARRAY[10, 10], 2, 30000);
SELECT is((SELECT count(*)::int FROM c2), 2, 'claim: the overall limit caps the batch across targets');
SELECT is((SELECT count(*)::int FROM c2 WHERE key IN (SELECT key FROM c1)), 0, 'claim never returns a claimed row again');
CREATE TEMP TABLE c3 AS SELECT * FROM outbox.claim('r3', ARRAY['ta', 'tb'], ARRAY[10, 10], 10, 30000);
SELECT set_eq($$SELECT key FROM c1 UNION ALL SELECT key FROM c2 UNION ALL SELECT key FROM c3$$,
              ARRAY['a1', 'a2', 'a3', 'a-now', 'b1', 'b2', 'b3'],
              'all due pending rows get claimed once: due now counts, future, awaiting_approval and unlisted targets do not');
SELECT is((SELECT state::text FROM outbox.intents WHERE key = 'a-later'), 'pending', 'a row due in the future stays pending');
SELECT is((SELECT state::text FROM outbox.intents WHERE key = 'a-wait'), 'awaiting_approval', 'a row awaiting approval is not claimed');
SELECT is((SELECT state::text FROM outbox.intents WHERE key = 'c1'), 'pending', 'a target not asked for is not claimed');
SELECT is_empty($$SELECT * FROM outbox.claim('r4', ARRAY['ta', 'tb'], ARRAY[10, 10], 10, 30000)$$,
                'nothing left to claim: in_flight rows are not claimed again');
SELECT is_empty($$SELECT * FROM outbox.claim('r4', ARRAY['tc'], ARRAY[0], 10, 30000)$$, 'a room of 0 claims nothing');
SELECT is_empty($$SELECT * FROM outbox.claim('r4', ARRAY['tc'], ARRAY[5], 0, 30000)$$, 'a limit of 0 claims nothing');

-- A retry after an ambiguous attempt is claimed as such, keeping its first attempt time.
UPDATE outbox.intents SET state = 'pending', ambiguous = true, attempts = 1, lease_owner = NULL, lease_expires_at = NULL,
                          first_attempt_at = now() - interval '10 minutes', next_attempt_at = now() - interval '1 second'
 WHERE key = 'c1';
SELECT results_eq($$SELECT key, attempt, ambiguous, first_attempt_ms FROM outbox.claim('r4', ARRAY['tc'], ARRAY[5], 5, 1000)$$,
                  $$VALUES ('c1'::text, 2, true, (extract(epoch FROM now() - interval '10 minutes') * 1000)::bigint)$$,
                  'claim of a retry: attempt 2, ambiguous, first_attempt_ms kept');
SELECT results_eq($$SELECT attempts, lease_expires_at, first_attempt_at FROM outbox.intents WHERE key = 'c1'$$,
                  $$VALUES (2, now() + interval '1 second', now() - interval '10 minutes')$$,
                  'the retry row: attempts 2, the new lease, first_attempt_at kept');

-- ---------------------------------------------------------------------------
-- record: fenced by (lease owner, attempt number)
SELECT pg_temp.mk('rec1', 'td') \g /dev/null
SELECT key FROM outbox.claim('r1', ARRAY['td'], ARRAY[1], 1, 30000) \g /dev/null
SELECT is(pg_temp.rec('r2', 'rec1', 1, 'succeeded', 'succeeded', 200, 'from r2'), 0,
          'record by another relay (wrong lease owner): 0 rows changed');
SELECT results_eq($$SELECT state::text, lease_owner, attempts, response_status FROM outbox.intents WHERE key = 'rec1'$$,
                  $$VALUES ('in_flight'::text, 'r1'::text, 1, NULL::int)$$, 'wrong owner: the intent is unchanged');
SELECT is(pg_temp.rec('r1', 'rec1', 2, 'failed', 'permanent_failure', 400, 'from attempt 2'), 0,
          'record with the wrong attempt number: 0 rows changed');
SELECT results_eq($$SELECT state::text, lease_owner, attempts, response_status FROM outbox.intents WHERE key = 'rec1'$$,
                  $$VALUES ('in_flight'::text, 'r1'::text, 1, NULL::int)$$, 'wrong attempt: the intent is unchanged');
SELECT results_eq($$SELECT relay, attempt, class::text, http_status, recorded FROM outbox.attempts
                     WHERE intent_id = pg_temp.id('rec1') ORDER BY id$$,
                  $$VALUES ('r2'::text, 1, 'succeeded'::text, 200, false), ('r1', 2, 'permanent_failure', 400, false)$$,
                  'fenced-out records still leave attempts rows, with recorded = false');
SELECT is(pg_temp.rec('r1', 'rec1', 1, 'succeeded', 'succeeded', 201, '{"id": 9}'), 1, 'record by the owner: 1 row changed');
SELECT results_eq($$SELECT state::text, lease_owner, lease_expires_at, response_status, response_body, attempts, last_error
                      FROM outbox.intents WHERE key = 'rec1'$$,
                  $$VALUES ('succeeded'::text, NULL::text, NULL::timestamptz, 201, '{"id": 9}'::text, 1, NULL::text)$$,
                  'record succeeded: state, response saved, lease released');
SELECT results_eq($$SELECT relay, attempt, class::text, request_sent, http_status, latency_ms, response_body, recorded
                      FROM outbox.attempts WHERE intent_id = pg_temp.id('rec1') ORDER BY id DESC LIMIT 1$$,
                  $$VALUES ('r1'::text, 1, 'succeeded'::text, true, 201, 42, '{"id": 9}'::text, true)$$,
                  'the owner''s attempts row: recorded = true with status, latency and body');
SELECT is(pg_temp.rec('r1', 'rec1', 1, 'failed', 'permanent_failure', 500, 'late'), 0,
          'a late duplicate record after the row is final: 0 rows changed');
SELECT results_eq($$SELECT state::text, response_status FROM outbox.intents WHERE key = 'rec1'$$,
                  $$VALUES ('succeeded'::text, 201)$$, 'a late writer cannot overwrite a final state');
SELECT is((SELECT count(*)::int FROM outbox.attempts WHERE intent_id = pg_temp.id('rec1')), 4,
          'every record call left its attempts row (4)');

-- Retry after an ambiguous attempt: pending, due after the delay, ambiguous, no response kept.
SELECT pg_temp.mk('rec2', 'td') \g /dev/null
SELECT key FROM outbox.claim('r1', ARRAY['td'], ARRAY[1], 1, 30000) \g /dev/null
SELECT is(pg_temp.rec('r1', 'rec2', 1, 'pending', 'ambiguous', 503, 'oops', true, 5000, 'HTTP 503'), 1,
          'record a retry');
SELECT results_eq($$SELECT state::text, next_attempt_at, ambiguous, response_status, lease_owner, last_error
                      FROM outbox.intents WHERE key = 'rec2'$$,
                  $$VALUES ('pending'::text, now() + interval '5 seconds', true, NULL::int, NULL::text, 'HTTP 503'::text)$$,
                  'retry: pending, due after the delay, ambiguous, no response saved for a non-final state');
SELECT is((SELECT status FROM outbox.outcome('rec2')), 'reconciling', 'retry after an ambiguous attempt: the agent sees reconciling');
SELECT is_empty($$SELECT * FROM outbox.claim('r1', ARRAY['td'], ARRAY[5], 5, 30000)$$, 'the retry is not due before its delay');
UPDATE outbox.intents SET next_attempt_at = now() WHERE key = 'rec2';
SELECT results_eq($$SELECT key, attempt, ambiguous FROM outbox.claim('r1', ARRAY['td'], ARRAY[5], 5, 30000)$$,
                  $$VALUES ('rec2'::text, 2, true)$$, 'once due, the retry is claimed as attempt 2');
SELECT is(pg_temp.rec('r1', 'rec2', 2, 'succeeded', 'succeeded', 200, 'ok', false), 1, 'record success of attempt 2');
SELECT results_eq($$SELECT state::text, ambiguous, attempts FROM outbox.intents WHERE key = 'rec2'$$,
                  $$VALUES ('succeeded'::text, true, 2)$$, 'ambiguous is sticky: a later clean attempt does not clear it');

-- Unknown: no blind retry; due for reconciliation after the delay.
SELECT pg_temp.mk('rec3', 'td') \g /dev/null
SELECT key FROM outbox.claim('r1', ARRAY['td'], ARRAY[1], 1, 30000) \g /dev/null
SELECT is(pg_temp.rec('r1', 'rec3', 1, 'unknown', 'ambiguous', NULL, NULL, true, 60000, 'timeout after send'), 1,
          'record unknown');
SELECT results_eq($$SELECT state::text, next_attempt_at, ambiguous, lease_owner FROM outbox.intents WHERE key = 'rec3'$$,
                  $$VALUES ('unknown'::text, now() + interval '60 seconds', true, NULL::text)$$,
                  'unknown: due for reconciliation after the delay, lease released');

-- A batch: parallel arrays, each element fenced on its own; attempts bodies are bounded.
SELECT pg_temp.mk('rb1', 'td'), pg_temp.mk('rb2', 'td') \g /dev/null
SELECT key FROM outbox.claim('r1', ARRAY['td'], ARRAY[2], 2, 30000) \g /dev/null
SELECT is(outbox.record('r1', ARRAY[pg_temp.id('rb1'), pg_temp.id('rb2')], ARRAY[1, 7],
                        ARRAY['failed', 'succeeded']::outbox.intent_state[], ARRAY[NULL, NULL]::int[], ARRAY[false, false],
                        ARRAY['permanent_failure', 'succeeded']::outbox.attempt_class[], ARRAY[true, true], ARRAY[404, 200],
                        ARRAY['HTTP 404', NULL], ARRAY[5, 6], ARRAY[repeat('x', 5000), 'ok'], NULL::boolean[]),
          1, 'record a batch: only the element with the right attempt counts');
SELECT results_eq($$SELECT key COLLATE "default", state::text, last_error, response_status FROM outbox.intents WHERE key IN ('rb1', 'rb2') ORDER BY key$$,
                  $$VALUES ('rb1'::text, 'failed'::text, 'HTTP 404'::text, 404), ('rb2', 'in_flight', NULL, NULL)$$,
                  'batch: rb1 failed with its reason, rb2 untouched');
SELECT results_eq($$SELECT i.key COLLATE "default", a.recorded, length(a.response_body) FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
                     WHERE i.key IN ('rb1', 'rb2') ORDER BY i.key$$,
                  $$VALUES ('rb1'::text, true, 4096), ('rb2', false, 2)$$,
                  'batch: one attempts row each; bodies in attempts bounded to 4096');

-- ---------------------------------------------------------------------------
-- release: claimed but never sent -> pending, attempt number restored
SELECT pg_temp.mk('rel1', 'td') \g /dev/null
CREATE TEMP TABLE rel1 AS SELECT * FROM outbox.claim('r1', ARRAY['td'], ARRAY[1], 1, 30000);
SELECT is((SELECT key FROM rel1), 'rel1', '(rel1 claimed)');
SELECT is(outbox.release('r2', ARRAY[pg_temp.id('rel1')], ARRAY[1]), 0, 'release by another relay: nothing');
SELECT is(outbox.release('r1', ARRAY[pg_temp.id('rel1')], ARRAY[2]), 0, 'release with the wrong attempt number: nothing');
SELECT results_eq($$SELECT state::text, lease_owner, attempts FROM outbox.intents WHERE key = 'rel1'$$,
                  $$VALUES ('in_flight'::text, 'r1'::text, 1)$$, 'refused releases change nothing');
SELECT is(outbox.release('r1', ARRAY[pg_temp.id('rel1')], ARRAY[1]), 1, 'release by the owner: 1 row');
SELECT results_eq($$SELECT state::text, attempts, lease_owner, lease_expires_at, first_attempt_at, next_attempt_at
                      FROM outbox.intents WHERE key = 'rel1'$$,
                  $$VALUES ('pending'::text, 0, NULL::text, NULL::timestamptz, NULL::timestamptz, now())$$,
                  'released: pending, attempts restored to 0, no lease, no first attempt, due now');
SELECT is(outbox.release('r1', ARRAY[pg_temp.id('rel1')], ARRAY[1]), 0, 'releasing twice: nothing');
SELECT results_eq($$SELECT key, attempt FROM outbox.claim('r2', ARRAY['td'], ARRAY[1], 1, 30000)$$,
                  $$VALUES ('rel1'::text, 1)$$, 'a released row is claimed again with the same attempt number');
-- release of a second attempt keeps the first attempt time
UPDATE outbox.intents SET attempts = 2, first_attempt_at = now() - interval '1 hour' WHERE key = 'rel1';
SELECT is(outbox.release('r2', ARRAY[pg_temp.id('rel1')], ARRAY[2]), 1, 'release of attempt 2');
SELECT results_eq($$SELECT attempts, first_attempt_at FROM outbox.intents WHERE key = 'rel1'$$,
                  $$VALUES (1, now() - interval '1 hour')$$, 'attempt 2 released: attempts 1, first_attempt_at kept');

-- ---------------------------------------------------------------------------
-- take_over: only expired leases; returns the previous owner; fences it out
DELETE FROM outbox.attempts;
DELETE FROM outbox.intents;
SELECT pg_temp.mk(k, 'td') FROM unnest(ARRAY['to-old', 'to-older', 'to-live', 'to-unknown', 'to-pending']) AS k \g /dev/null
UPDATE outbox.intents SET state = 'in_flight', attempts = 3, lease_owner = 'r-dead', first_attempt_at = now() - interval '1 hour',
                          lease_expires_at = now() - interval '1 second' WHERE key = 'to-old';
UPDATE outbox.intents SET state = 'in_flight', attempts = 1, lease_owner = 'r-dead2', first_attempt_at = now() - interval '2 hours',
                          lease_expires_at = now() - interval '1 minute' WHERE key = 'to-older';
UPDATE outbox.intents SET state = 'in_flight', attempts = 1, lease_owner = 'r-live',
                          lease_expires_at = now() + interval '1 second' WHERE key = 'to-live';
UPDATE outbox.intents SET state = 'unknown', attempts = 1, lease_owner = 'r-dead',
                          lease_expires_at = now() - interval '1 hour' WHERE key = 'to-unknown';
UPDATE outbox.intents SET next_attempt_at = now() - interval '1 hour' WHERE key = 'to-pending';
SELECT results_eq($$SELECT key, attempt, previous_owner, first_attempt_ms FROM outbox.take_over('r9', 1, 45000, '{}')$$,
                  $$VALUES ('to-older'::text, 1, 'r-dead2'::text, (extract(epoch FROM now() - interval '2 hours') * 1000)::bigint)$$,
                  'take_over: the limit applies, the longest-expired lease first, with its previous owner');
SELECT results_eq($$SELECT key, attempt, previous_owner FROM outbox.take_over('r9', 10, 45000, '{}')$$,
                  $$VALUES ('to-old'::text, 3, 'r-dead'::text)$$,
                  'take_over: only in_flight rows whose lease expired (not live leases, unknown or pending rows)');
SELECT results_eq($$SELECT key COLLATE "default", state::text, attempts, lease_owner, lease_expires_at FROM outbox.intents ORDER BY key$$,
                  $$VALUES ('to-live'::text, 'in_flight'::text, 1, 'r-live'::text, now() + interval '1 second'),
                           ('to-old', 'in_flight', 3, 'r9', now() + interval '45 seconds'),
                           ('to-older', 'in_flight', 1, 'r9', now() + interval '45 seconds'),
                           ('to-pending', 'pending', 0, NULL, NULL),
                           ('to-unknown', 'unknown', 1, 'r-dead', now() - interval '1 hour')$$,
                  'taken-over rows: new owner and lease, same attempt number; the others untouched');
SELECT is_empty($$SELECT * FROM outbox.take_over('r10', 10, 45000, '{}')$$, 'a fresh lease is not taken over again');
SELECT is(pg_temp.rec('r-dead', 'to-old', 3, 'succeeded', 'succeeded', 200, 'late'), 0,
          'the previous owner''s late record is fenced out');
SELECT is((SELECT state::text FROM outbox.intents WHERE key = 'to-old'), 'in_flight', '...and changes nothing');
SELECT is((SELECT recorded FROM outbox.attempts WHERE intent_id = pg_temp.id('to-old')), false, '...but is in the history');
SELECT is(pg_temp.rec('r9', 'to-old', 3, 'unknown', 'ambiguous', NULL, NULL, true, 1000, 'lease expired mid-flight'), 1,
          'the new owner records the taken-over attempt');
SELECT results_eq($$SELECT state::text, ambiguous FROM outbox.intents WHERE key = 'to-old'$$,
                  $$VALUES ('unknown'::text, true)$$, '...as unknown and ambiguous');

-- ---------------------------------------------------------------------------
-- renew_leases: only the caller's in-flight rows
UPDATE outbox.intents SET state = 'in_flight', attempts = 1, lease_owner = 'r1', lease_expires_at = now() + interval '5 seconds'
 WHERE key = 'to-pending';
SELECT set_eq(format('SELECT * FROM outbox.renew_leases(''r1'', ARRAY[%s, %s, %s, %s], 90000)',
                     pg_temp.id('to-pending'), pg_temp.id('to-live'), pg_temp.id('to-unknown'), pg_temp.id('to-older')),
              ARRAY[pg_temp.id('to-pending')],
              'renew_leases returns only the ids the caller still holds');
SELECT results_eq($$SELECT key COLLATE "default", lease_owner, lease_expires_at FROM outbox.intents WHERE key IN ('to-pending', 'to-live', 'to-older') ORDER BY key$$,
                  $$VALUES ('to-live'::text, 'r-live'::text, now() + interval '1 second'),
                           ('to-older', 'r9', now() + interval '45 seconds'),
                           ('to-pending', 'r1', now() + interval '90 seconds')$$,
                  'renew_leases extends the caller''s lease and leaves the others alone');
SELECT is_empty(format('SELECT * FROM outbox.renew_leases(''r-dead'', ARRAY[%s], 90000)', pg_temp.id('to-unknown')),
                'renew_leases: a row that is no longer in flight is not renewed');
SELECT is((SELECT lease_expires_at FROM outbox.intents WHERE key = 'to-unknown'), now() - interval '1 hour',
          '...and is left alone');

-- 0020: record skips the reference check of its own history INSERT through
-- outbox.in_record, on for that INSERT only (0021: set_config, then 'off').
SELECT is(coalesce(nullif(current_setting('outbox.in_record', true), ''), 'off'), 'off',
          'outbox.in_record is not left on after record returns');
SELECT is(outbox.record('r1', ARRAY[-777]::bigint[], ARRAY[1], ARRAY['succeeded']::outbox.intent_state[], ARRAY[0],
                        ARRAY[false], ARRAY['succeeded']::outbox.attempt_class[], ARRAY[true], ARRAY[200],
                        ARRAY[NULL]::text[], ARRAY[1], ARRAY['x'], ARRAY[true]),
          0, 'record of an outcome for an intent that does not exist applies nothing...');
SELECT is((SELECT count(*)::int FROM outbox.attempts WHERE intent_id = -777), 0, '...and writes no history row for it');

-- ---------------------------------------------------------------------------
-- relay presence
SELECT outbox.relay_heartbeat('r1', true) \g /dev/null
SELECT results_eq($$SELECT relay_id, idle FROM outbox.relays$$, $$VALUES ('r1'::text, true)$$, 'heartbeat registers the relay, idle');
UPDATE outbox.relays SET heartbeat_at = now() - interval '1 minute';
SELECT outbox.relay_heartbeat('r1', false) \g /dev/null
SELECT results_eq($$SELECT relay_id, idle, heartbeat_at FROM outbox.relays$$, $$VALUES ('r1'::text, false, now())$$,
                  'a second heartbeat updates idle and heartbeat_at, still one row');
INSERT INTO outbox.relays (relay_id, idle, heartbeat_at) VALUES ('r-stale', true, now() - interval '2 days');
SELECT outbox.relay_heartbeat('r2', true) \g /dev/null
SELECT set_eq($$SELECT relay_id FROM outbox.relays$$, ARRAY['r1', 'r2'], 'a heartbeat drops relays silent for over a day');
SELECT outbox.relay_gone('r1') \g /dev/null
SELECT set_eq($$SELECT relay_id FROM outbox.relays$$, ARRAY['r2'], 'relay_gone removes the relay');

SELECT * FROM finish();
ROLLBACK;
