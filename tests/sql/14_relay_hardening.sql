-- 14_relay_hardening: the relay's writes, hardened (migrations/0011_relay_hardening.sql).
--   record             at most one outcome per row and batch (a delivery's before a take-over's);
--                      the others are history with recorded = false; outcomes of intents deleted
--                      meanwhile are skipped instead of failing the batch; key_sent is kept
--   take_over          never a row the caller says it still holds
--   retry_now          refuses an unknown row whose maybe-executed attempt went without a key,
--                      even after the target was switched to keyed
BEGIN;
SELECT plan(17);

INSERT INTO outbox.targets (name, url) VALUES ('hk', 'https://hk.test/hook');
INSERT INTO outbox.targets (name, url, key_header) VALUES ('hl', 'https://hl.test/hook', NULL);
SELECT outbox.enqueue('hk-' || n, 'hk', jsonb_build_object('n', n)) FROM generate_series(1, 4) n \g /dev/null
SELECT outbox.enqueue('hl-1', 'hl', '{"n": 1}') \g /dev/null
CREATE TEMP TABLE c AS SELECT * FROM outbox.claim('r1', ARRAY['hk', 'hl'], ARRAY[10, 10], 10, 30000);
CREATE FUNCTION pg_temp.id(k text) RETURNS bigint LANGUAGE sql AS $$ SELECT id FROM outbox.intents WHERE key = k $$;

-- ---------------------------------------------------------------------------
-- record: two outcomes of one row in one batch (a take-over, then the delivery)
SELECT is(outbox.record('r1',
            ARRAY[pg_temp.id('hk-1'), pg_temp.id('hk-1'), pg_temp.id('hk-2')], ARRAY[1, 1, 1],
            ARRAY['pending', 'succeeded', 'succeeded']::outbox.intent_state[], ARRAY[100, NULL, NULL],
            ARRAY[true, false, false], ARRAY['ambiguous', 'succeeded', 'succeeded']::outbox.attempt_class[],
            ARRAY[NULL, true, true], ARRAY[NULL, 200, 200], ARRAY['lease of relay r1 expired', NULL, NULL],
            ARRAY[0, 5, 6], ARRAY[NULL, '{"ok":1}', '{"ok":2}'], ARRAY[NULL, true, true]),
          2, 'two rows changed, not three');
SELECT results_eq($$SELECT state::text, ambiguous, response_body FROM outbox.intents WHERE key = 'hk-1'$$,
                  $$VALUES ('succeeded', false, '{"ok":1}'::text)$$,
                  'the delivery''s outcome is applied, not the take-over''s');
SELECT results_eq($$SELECT class::text, recorded, key_sent FROM outbox.attempts
                     WHERE intent_id = pg_temp.id('hk-1') ORDER BY id$$,
                  $$VALUES ('ambiguous', false, NULL::boolean), ('succeeded', true, true)$$,
                  'both are history; only the applied one says recorded');

-- two deliveries' outcomes for one row: the first buffered wins
SELECT is(outbox.record('r1', ARRAY[pg_temp.id('hk-3'), pg_temp.id('hk-3')], ARRAY[1, 1],
            ARRAY['failed', 'succeeded']::outbox.intent_state[], ARRAY[NULL, NULL]::integer[], ARRAY[false, false],
            ARRAY['permanent_failure', 'succeeded']::outbox.attempt_class[], ARRAY[true, true], ARRAY[400, 200],
            ARRAY['HTTP 400', NULL], ARRAY[1, 1], ARRAY[NULL, NULL]::text[], ARRAY[true, true]),
          1, 'one row changed');
SELECT is((SELECT count(*)::int FROM outbox.attempts WHERE intent_id = pg_temp.id('hk-3') AND recorded), 1,
          'exactly one history row of it is recorded');

-- an intent deleted by hand while in flight: its outcome is skipped, the rest of the batch applies
DELETE FROM outbox.intents WHERE key = 'hk-4';
SELECT lives_ok($$SELECT outbox.record('r1', ARRAY[(SELECT id FROM c WHERE key = 'hk-4'), pg_temp.id('hl-1')], ARRAY[1, 1],
            ARRAY['succeeded', 'unknown']::outbox.intent_state[], ARRAY[NULL, 30000], ARRAY[false, true],
            ARRAY['succeeded', 'ambiguous']::outbox.attempt_class[], ARRAY[true, true], ARRAY[200, NULL],
            ARRAY[NULL, 'timeout after send'], ARRAY[1, 10000], ARRAY['{}', NULL], ARRAY[true, false])$$,
                'a batch with the outcome of a deleted intent does not fail');
SELECT is((SELECT state::text FROM outbox.intents WHERE key = 'hl-1'), 'unknown', 'the other outcome of the batch is applied');
SELECT is((SELECT count(*)::int FROM outbox.attempts WHERE intent_id = (SELECT id FROM c WHERE key = 'hk-4')), 0,
          'no history row for the deleted intent');
SELECT is((SELECT key_sent FROM outbox.attempts WHERE intent_id = pg_temp.id('hl-1')), false,
          'key_sent = false: the legacy target''s request carried no key');

-- ---------------------------------------------------------------------------
-- take_over: never the caller's own rows
SELECT outbox.enqueue('hk-' || n, 'hk', jsonb_build_object('n', n)) FROM generate_series(5, 6) n \g /dev/null
SELECT count(*) FROM outbox.claim('r1', ARRAY['hk'], ARRAY[10], 10, 1) \g /dev/null
UPDATE outbox.intents SET lease_expires_at = now() - interval '1 second' WHERE key IN ('hk-5', 'hk-6');
SELECT is_empty($$SELECT * FROM outbox.take_over('r1', 10, 30000, ARRAY[pg_temp.id('hk-5'), pg_temp.id('hk-6')])$$,
                'rows the caller holds are not taken over, whatever their lease says');
SELECT results_eq($$SELECT key, previous_owner FROM outbox.take_over('r1', 10, 30000, ARRAY[pg_temp.id('hk-5')])$$,
                  $$VALUES ('hk-6'::text, 'r1'::text)$$,
                  'a row it no longer holds (a previous incarnation''s) is taken over');
SELECT results_eq($$SELECT key FROM outbox.take_over('r2', 10, 30000, '{}')$$,
                  $$VALUES ('hk-5'::text)$$, 'another relay takes over the expired row');

-- ---------------------------------------------------------------------------
-- retry_now after a keyless attempt that may have executed
UPDATE outbox.targets SET key_header = 'Idempotency-Key' WHERE name = 'hl';
SELECT throws_ok($$SELECT outbox.retry_now('hl-1', 'alice')$$, 'OR007',
                 'outbox.retry_now: key ''hl-1'' has an unknown outcome and an attempt that may have executed was sent without a key (target ''hl'' had no key header then): the target cannot recognise it, and sending it again could execute it twice; find out from the target whether it acted, then resolve it',
                 'retry_now refuses: the maybe-executed attempt carried no key, whatever the target''s header now');
-- the status URL said "not executed" after it: the doubt is gone
INSERT INTO outbox.attempts (intent_id, attempt, relay, class, request_sent, recorded)
VALUES (pg_temp.id('hl-1'), 1, 'r1', 'reconciled_not_executed', true, true);
SELECT is(outbox.retry_now('hl-1', 'alice')::text, 'pending', 'once a status check disproved it, retry_now may send it');

-- ---------------------------------------------------------------------------
-- secret_env: OUTBOX_SECRET_ names only
SELECT throws_ok($$INSERT INTO outbox.targets (name, url, secret_env) VALUES ('hs1', 'https://hs.test', 'DATABASE_URL')$$,
                 '23514', 'new row for relation "targets" violates check constraint "targets_secret_env_prefix"',
                 'secret_env may not name DATABASE_URL');
SELECT throws_ok($$UPDATE outbox.targets SET secret_env = 'PGPASSWORD' WHERE name = 'hk'$$,
                 '23514', 'new row for relation "targets" violates check constraint "targets_secret_env_prefix"',
                 'nor be changed to PGPASSWORD');
SELECT lives_ok($$INSERT INTO outbox.targets (name, url, secret_env) VALUES ('hs2', 'https://hs.test', 'OUTBOX_SECRET_HS2')$$,
                'an OUTBOX_SECRET_ name is accepted');

SELECT * FROM finish();
ROLLBACK;
