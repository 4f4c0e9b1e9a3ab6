-- 20_new_user: what a new user's deployment hit first (issue 22).
--   migrations   applied by a CREATEROLE owner that is not a superuser (the
--                harness migrates so: tests/sql/run.sh), and no function
--                carries a SET clause of a custom setting (only a superuser
--                may create one on PostgreSQL 15)
--   live_counts  answers, for the relay and the operator, the rows it counts
--   the flags    outbox.in_enqueue / outbox.in_record cover their INSERT
--                only: on while it runs, off after, whatever the path
BEGIN;
SELECT plan(17);

-- ---- the owner ---------------------------------------------------------------
SELECT is((SELECT r.rolsuper FROM pg_namespace n JOIN pg_roles r ON r.oid = n.nspowner
            WHERE n.nspname = 'outbox'), false,
          'schema outbox belongs to a role that is not a superuser (the migrations ran as it)');
SELECT is((SELECT r.rolsuper FROM pg_proc p JOIN pg_roles r ON r.oid = p.proowner
            WHERE p.oid = 'outbox.enqueue(text, text, jsonb, text, timestamptz, text, text)'::regprocedure),
          false, 'enqueue was created by that owner');
SELECT is((SELECT count(*)::int FROM pg_proc p, unnest(p.proconfig) c
            WHERE p.pronamespace = 'outbox'::regnamespace AND c LIKE 'outbox.%'), 0,
          'no function of the schema sets a custom setting in a SET clause');

-- ---- live_counts -------------------------------------------------------------
INSERT INTO outbox.targets (name, url, enabled) VALUES ('lc', 'https://lc.test/hook', true),
                                                       ('lc-gate', 'https://lc.test/gate', true);
UPDATE outbox.targets SET approval_rule = '$.amount > 100' WHERE name = 'lc-gate';
SELECT count(*) FROM (SELECT outbox.enqueue('lc:p' || g, 'lc', jsonb_build_object('n', g))
                        FROM generate_series(1, 3) g) x \g /dev/null
SELECT count(*) FROM (SELECT outbox.enqueue('lc:a' || g, 'lc-gate', jsonb_build_object('amount', 500 + g))
                        FROM generate_series(1, 2) g) x \g /dev/null
SELECT count(*) FROM (SELECT outbox.enqueue('lc:x' || g, 'lc', jsonb_build_object('n', g))
                        FROM generate_series(1, 9) g) x \g /dev/null
-- of the nine: four in flight, two unknown, three succeeded (not live)
UPDATE outbox.intents SET state = 'in_flight', lease_owner = 'r1', lease_expires_at = now() + interval '1 minute',
                          attempts = 1
 WHERE key IN ('lc:x1', 'lc:x2', 'lc:x3', 'lc:x4');
UPDATE outbox.intents SET state = 'unknown', ambiguous = true, attempts = 1 WHERE key IN ('lc:x5', 'lc:x6');
UPDATE outbox.intents SET state = 'succeeded', attempts = 1, response_status = 200
 WHERE key IN ('lc:x7', 'lc:x8', 'lc:x9');
-- the oldest pending row has been due for ten minutes
UPDATE outbox.intents SET next_attempt_at = now() - interval '10 minutes' WHERE key = 'lc:p1';

SET LOCAL ROLE outbox_relay;
SELECT results_eq($$SELECT state::text, intents FROM outbox.live_counts() ORDER BY 1$$,
                  $$VALUES ('awaiting_approval', 2::bigint), ('in_flight', 4::bigint), ('pending', 3::bigint),
                           ('unknown', 2::bigint)$$,
                  'live_counts as outbox_relay: each live state with its rows');
SELECT cmp_ok((SELECT oldest_due_age_s FROM outbox.live_counts() WHERE state = 'pending'), '>=', 599.0::float8,
              'the oldest due pending row is ten minutes old');
RESET ROLE;
SET LOCAL ROLE outbox_operator;
SELECT results_eq($$SELECT state::text, intents FROM outbox.live_counts() ORDER BY 1$$,
                  $$SELECT state::text, count(*) FROM outbox.intents
                     WHERE state IN ('pending', 'in_flight', 'unknown', 'awaiting_approval') GROUP BY 1 ORDER BY 1$$,
                  'live_counts as outbox_operator: the same as counting the table');
RESET ROLE;

-- ---- the flags ----------------------------------------------------------------
SELECT is(nullif(current_setting('outbox.in_enqueue', true), 'off'), NULL, 'in_enqueue is not on before');
SELECT is((outbox.enqueue('lc:f1', 'lc', '{"n": 1}')).inserted, true, 'an enqueue (the new-key path)');
SELECT is(current_setting('outbox.in_enqueue', true), 'off', 'in_enqueue is off after it');
SELECT is((outbox.enqueue('lc:f1', 'lc', '{"n": 1}')).inserted, false, 'an enqueue of a known key');
SELECT is(current_setting('outbox.in_enqueue', true), 'off', 'in_enqueue is off after it too');
SELECT throws_ok($$SELECT outbox.enqueue('lc:f1', 'lc', '{"n": 2}')$$, 'OR001', NULL, 'a key conflict');
SELECT is(current_setting('outbox.in_enqueue', true), 'off', 'in_enqueue is off after the error');

-- While enqueue's INSERT runs, the setting is on: a trigger of the test sees it.
CREATE TEMP TABLE seen (flag text);
GRANT INSERT ON seen TO PUBLIC;   -- the trigger runs as enqueue's owner
CREATE FUNCTION pg_temp.see_flag() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO seen VALUES (current_setting('outbox.in_enqueue', true));
    RETURN NULL;
END $$;
CREATE TRIGGER zz_see_flag AFTER INSERT ON outbox.intents FOR EACH STATEMENT EXECUTE FUNCTION pg_temp.see_flag();
SELECT outbox.enqueue('lc:f2', 'lc', '{"n": 2}') \g /dev/null
INSERT INTO outbox.intents (key, target, payload, fingerprint) VALUES ('lc:raw', 'lc', '{}', '\x00');
SELECT results_eq($$SELECT flag FROM seen$$, $$VALUES ('on'), ('off')$$,
                  'the INSERT of enqueue runs with the setting on; a raw INSERT after it with it off');
DROP TRIGGER zz_see_flag ON outbox.intents;

-- record: on for its history INSERT only.
UPDATE outbox.intents SET state = 'in_flight', lease_owner = 'r1', lease_expires_at = now() + interval '1 minute',
                          attempts = 1
 WHERE key = 'lc:f2';
SELECT is(outbox.record('r1', ARRAY[(SELECT id FROM outbox.intents WHERE key = 'lc:f2')], ARRAY[1],
                        ARRAY['succeeded']::outbox.intent_state[], ARRAY[0], ARRAY[false],
                        ARRAY['succeeded']::outbox.attempt_class[], ARRAY[true], ARRAY[200], ARRAY[NULL::text],
                        ARRAY[5], ARRAY['{}'], ARRAY[true]), 1, 'record applies one outcome');
SELECT is(current_setting('outbox.in_record', true), 'off', 'in_record is off after record');
SELECT is((SELECT count(*)::int FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
            WHERE i.key = 'lc:f2'), 1, 'its history row is written');

SELECT * FROM finish();
ROLLBACK;
