-- 07_concurrency: behaviour across real connections (dblink), so nothing here
-- runs in one wrapping transaction: every setup commits (the database is a
-- throwaway copy made by run.sh).
--   two transactions enqueue one key at once  -> one row; the second waits, then gets the first's intent
--   (or inserts, if the first rolls back; or OR001 if the payloads differ)
--   two relays claim at once                  -> disjoint rows, the second does not wait (SKIP LOCKED)
--   the NOTIFY trigger                        -> outbox_intents only while a live relay says it is idle
--                                                and the statement left a row pending and due; at
--                                                commit, once per transaction
SELECT plan(50);

-- ---------------------------------------------------------------------------
-- helpers
\ir lib/sessions.sql
-- true if the async query on conn is still running after secs
CREATE FUNCTION pg_temp.still_busy(conn text, secs float8) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE deadline timestamptz := clock_timestamp() + secs * interval '1 second';
BEGIN
    LOOP
        IF dblink_is_busy(conn) = 0 THEN RETURN false; END IF;
        IF clock_timestamp() > deadline THEN RETURN true; END IF;
        PERFORM pg_sleep(0.01);
    END LOOP;
END $$;
-- notifications on outbox_intents received by conn: waits up to secs for the
-- first one (then a little longer for stragglers), or the whole time for none
CREATE FUNCTION pg_temp.notes(conn text, secs float8) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    deadline timestamptz := clock_timestamp() + secs * interval '1 second';
    n int := 0;
BEGIN
    LOOP
        n := n + (SELECT count(*) FROM dblink_get_notify(conn) WHERE notify_name = 'outbox_intents');
        EXIT WHEN clock_timestamp() > deadline;
        IF n > 0 THEN
            deadline := least(deadline, clock_timestamp() + interval '200 milliseconds');
        END IF;
        PERFORM pg_sleep(0.02);
    END LOOP;
    RETURN n;
END $$;
-- run a row-returning statement on conn (dblink_exec refuses those); returns its row count
CREATE FUNCTION pg_temp.q(conn text, query text) RETURNS bigint LANGUAGE sql AS $$
    SELECT n FROM dblink(conn, format('SELECT count(*) FROM (%s) AS q', query)) AS t(n bigint)
$$;
CREATE TEMP TABLE conn (name text PRIMARY KEY, pid int);
INSERT INTO conn SELECT n, pg_temp.open(n) FROM unnest(ARRAY['a', 'b', 's', 'l', 'w']) AS n;
CREATE FUNCTION pg_temp.pid(n text) RETURNS int LANGUAGE sql AS $$ SELECT pid FROM conn WHERE name = n $$;

SELECT dblink_exec('s', $$INSERT INTO outbox.targets (name, url) VALUES ('t1', 'https://t1.test/hook'),
                                                                         ('t2', 'https://t2.test/hook')$$) \g /dev/null

-- ---------------------------------------------------------------------------
-- Same key, same payload, two transactions at once: one row, both succeed.
CREATE TEMP TABLE res (test text, who text, intent_id bigint, inserted boolean, status text);
SELECT dblink_exec('a', 'BEGIN') \g /dev/null
SELECT dblink_exec('b', 'BEGIN') \g /dev/null
INSERT INTO res SELECT 'same', 'a', * FROM dblink('a', $$SELECT intent_id, inserted, status FROM outbox.enqueue('ck1', 't1', '{"amount": 10}')$$)
                                         AS t(intent_id bigint, inserted boolean, status text);
SELECT is(dblink_send_query('b', $$SELECT intent_id, inserted, status FROM outbox.enqueue('ck1', 't1', '{"amount": 10.0}')$$), 1,
          'same key: the second transaction''s enqueue is sent');
SELECT ok(pg_temp.waits_on_lock(pg_temp.pid('b'), 5), 'same key: the second enqueue waits for the first transaction');
SELECT is(dblink_is_busy('b'), 1, 'same key: ...and has not returned');
SELECT dblink_exec('a', 'COMMIT') \g /dev/null
SELECT lives_ok($$INSERT INTO res SELECT 'same', 'b', * FROM dblink_get_result('b') AS t(intent_id bigint, inserted boolean, status text)$$,
                'same key: the second enqueue succeeds once the first commits (no error)');
SELECT * FROM dblink_get_result('b', false) AS t(intent_id bigint, inserted boolean, status text) \g /dev/null
SELECT dblink_exec('b', 'COMMIT') \g /dev/null
SELECT results_eq($$SELECT who, inserted, status FROM res WHERE test = 'same' ORDER BY who$$,
                  $$VALUES ('a'::text, true, 'pending'::text), ('b', false, 'pending')$$,
                  'same key: the first inserted, the second found it (inserted = false)');
SELECT is((SELECT count(DISTINCT intent_id)::int FROM res WHERE test = 'same'), 1, 'same key: both calls return the same intent_id');
SELECT is((SELECT count(*)::int FROM outbox.intents WHERE key = 'ck1'), 1, 'same key: exactly one row');

-- The first transaction rolls back: the second inserts.
SELECT dblink_exec('a', 'BEGIN') \g /dev/null
SELECT dblink_exec('b', 'BEGIN') \g /dev/null
INSERT INTO res SELECT 'rollback', 'a', * FROM dblink('a', $$SELECT intent_id, inserted, status FROM outbox.enqueue('ck2', 't1', '{"amount": 10}')$$)
                                             AS t(intent_id bigint, inserted boolean, status text);
SELECT is(dblink_send_query('b', $$SELECT intent_id, inserted, status FROM outbox.enqueue('ck2', 't1', '{"amount": 10}')$$), 1,
          'rollback: the second enqueue is sent');
SELECT ok(pg_temp.waits_on_lock(pg_temp.pid('b'), 5), 'rollback: the second enqueue waits');
SELECT dblink_exec('a', 'ROLLBACK') \g /dev/null
SELECT lives_ok($$INSERT INTO res SELECT 'rollback', 'b', * FROM dblink_get_result('b') AS t(intent_id bigint, inserted boolean, status text)$$,
                'rollback: the second enqueue succeeds');
SELECT * FROM dblink_get_result('b', false) AS t(intent_id bigint, inserted boolean, status text) \g /dev/null
SELECT dblink_exec('b', 'COMMIT') \g /dev/null
SELECT is((SELECT inserted FROM res WHERE test = 'rollback' AND who = 'b'), true,
          'rollback: the second transaction inserts the intent');
SELECT results_eq($$SELECT count(*)::int, min(id) FROM outbox.intents WHERE key = 'ck2'$$,
                  $$SELECT 1, intent_id FROM res WHERE test = 'rollback' AND who = 'b'$$,
                  'rollback: one row, the second transaction''s');

-- Same key, different payload at once: the second gets OR001 once the first commits.
SELECT dblink_exec('a', 'BEGIN') \g /dev/null
SELECT pg_temp.q('a', $$SELECT outbox.enqueue('ck3', 't1', '{"amount": 10}')$$) \g /dev/null
SELECT is(dblink_send_query('b', $$SELECT intent_id, inserted, status FROM outbox.enqueue('ck3', 't1', '{"amount": 20}')$$), 1,
          'mismatch: the second enqueue is sent');
SELECT ok(pg_temp.waits_on_lock(pg_temp.pid('b'), 5), 'mismatch: the second enqueue waits');
SELECT dblink_exec('a', 'COMMIT') \g /dev/null
SELECT throws_ok($$SELECT * FROM dblink_get_result('b') AS t(intent_id bigint, inserted boolean, status text)$$,
                 'OR001', 'outbox.enqueue: key ''ck3'' was already used with a different payload (fields that differ: amount)',
                 'mismatch: the second enqueue fails with OR001 once the first commits');
SELECT * FROM dblink_get_result('b', false) AS t(intent_id bigint, inserted boolean, status text) \g /dev/null
SELECT results_eq($$SELECT count(*)::int, min(payload::text) FROM outbox.intents WHERE key = 'ck3'$$,
                  $$VALUES (1, '{"amount": 10}'::text)$$, 'mismatch: one row, the first payload');

-- ---------------------------------------------------------------------------
-- Two relays claim at once: disjoint rows, and the second does not wait (SKIP LOCKED).
SELECT pg_temp.q('s', $$SELECT outbox.enqueue('sk' || i, 't2', jsonb_build_object('i', i)) FROM generate_series(1, 4) AS i$$) \g /dev/null
CREATE TEMP TABLE claimed (who text, id bigint, key text);
SELECT dblink_exec('a', 'BEGIN') \g /dev/null
INSERT INTO claimed SELECT 'ra', * FROM dblink('a', $$SELECT id, key FROM outbox.claim('ra', ARRAY['t2'], ARRAY[2], 2, 30000)$$)
                                         AS t(id bigint, key text);
SELECT is(dblink_send_query('b', $$SELECT id, key FROM outbox.claim('rb', ARRAY['t2'], ARRAY[10], 10, 30000)$$), 1,
          'claim: the second relay''s claim is sent while the first has not committed');
SELECT ok(NOT pg_temp.still_busy('b', 5), 'claim: the second relay does not wait for the first (SKIP LOCKED)');
INSERT INTO claimed SELECT 'rb', * FROM dblink_get_result('b') AS t(id bigint, key text);
SELECT * FROM dblink_get_result('b', false) AS t(id bigint, key text) \g /dev/null
SELECT dblink_exec('a', 'COMMIT') \g /dev/null
SELECT results_eq($$SELECT who, count(*)::int FROM claimed GROUP BY who ORDER BY who$$,
                  $$VALUES ('ra'::text, 2), ('rb', 2)$$, 'claim: each relay got two rows');
SELECT set_eq($$SELECT key FROM claimed$$, ARRAY['sk1', 'sk2', 'sk3', 'sk4'],
              'claim: together all four, no row twice');
SELECT results_eq($$SELECT lease_owner, count(*)::int, min(attempts), max(attempts) FROM outbox.intents
                     WHERE key LIKE 'sk%' AND state = 'in_flight' GROUP BY lease_owner ORDER BY lease_owner$$,
                  $$VALUES ('ra'::text, 2, 1, 1), ('rb', 2, 1, 1)$$,
                  'claim: the rows are in flight under the relay that returned them, attempt 1');

-- ---------------------------------------------------------------------------
-- The NOTIFY trigger: only while a live relay says it is idle, and only for a
-- statement that left a row pending and due (a relay must not be woken by its
-- own empty claim, nor for rows it cannot send yet).
SELECT dblink_exec('s', $$INSERT INTO outbox.targets (name, url, approval_rule)
                          VALUES ('tap', 'https://tap.test/hook', '$.amount > 100')$$) \g /dev/null
SELECT dblink_exec('l', 'LISTEN outbox_intents') \g /dev/null
SELECT pg_temp.notes('l', 0.2) \g /dev/null
SELECT pg_temp.q('w', $$SELECT outbox.enqueue('n1', 't1', '{}')$$) \g /dev/null
SELECT is(pg_temp.notes('l', 0.4), 0, 'no relay registered: an enqueue does not notify');
SELECT pg_temp.q('w', $$SELECT outbox.relay_heartbeat('r1', false)$$) \g /dev/null
SELECT pg_temp.q('w', $$SELECT outbox.enqueue('n2', 't1', '{}')$$) \g /dev/null
SELECT is(pg_temp.notes('l', 0.4), 0, 'a busy relay (idle = false) is not notified: it polls');
SELECT pg_temp.q('w', $$SELECT outbox.relay_heartbeat('r1', true)$$) \g /dev/null
SELECT is(pg_temp.notes('l', 0.3), 0, 'a heartbeat itself does not notify');
SELECT pg_temp.q('w', $$SELECT outbox.enqueue('n3', 't1', '{}')$$) \g /dev/null
SELECT cmp_ok(pg_temp.notes('l', 5), '>=', 1, 'an idle relay: an enqueue notifies channel outbox_intents');

SELECT dblink_exec('w', 'BEGIN') \g /dev/null
SELECT pg_temp.q('w', $$SELECT outbox.enqueue('n4', 't1', '{}')$$) \g /dev/null
SELECT pg_temp.q('w', $$SELECT outbox.enqueue('n5', 't1', '{}')$$) \g /dev/null
SELECT pg_temp.q('w', $$SELECT outbox.enqueue('n6', 't1', '{}')$$) \g /dev/null
SELECT is(pg_temp.notes('l', 0.4), 0, 'no notification before the enqueuing transaction commits');
SELECT dblink_exec('w', 'COMMIT') \g /dev/null
SELECT is(pg_temp.notes('l', 5), 1, 'one notification per committed transaction (three enqueues)');

SELECT dblink_exec('w', 'BEGIN') \g /dev/null
SELECT pg_temp.q('w', $$SELECT outbox.enqueue('n7', 't1', '{}')$$) \g /dev/null
SELECT dblink_exec('w', 'ROLLBACK') \g /dev/null
SELECT is(pg_temp.notes('l', 0.4), 0, 'a rolled-back enqueue does not notify');

SELECT pg_temp.q('w', $$SELECT outbox.enqueue('n3', 't1', '{}')$$) \g /dev/null
SELECT is(pg_temp.notes('l', 0.4), 0, 'enqueue of an existing key (nothing inserted) does not notify');
SELECT pg_temp.q('w', $$SELECT outbox.enqueue('n-later', 't1', '{}', NULL, now() + interval '1 hour')$$) \g /dev/null
SELECT is(pg_temp.notes('l', 0.4), 0, 'an intent not due yet (p_not_before) does not notify');
SELECT pg_temp.q('w', $$SELECT outbox.enqueue('n-big', 'tap', '{"amount": 1000}')$$) \g /dev/null
SELECT is(pg_temp.notes('l', 0.4), 0, 'an intent awaiting approval does not notify');
SELECT pg_temp.q('w', $$SELECT outbox.approve('n-big', 'alice')$$) \g /dev/null
SELECT cmp_ok(pg_temp.notes('l', 5), '>=', 1, 'approval (awaiting_approval -> pending, due now) notifies');
SELECT pg_temp.q('w', $$SELECT outbox.cancel('n1', 'no longer needed')$$) \g /dev/null
SELECT is(pg_temp.notes('l', 0.4), 0, 'a state change to cancelled does not notify');

CREATE TEMP TABLE nclaim AS
SELECT * FROM dblink('w', $$SELECT key, attempt FROM outbox.claim('rn', ARRAY['t1', 'tap'], ARRAY[100, 100], 100, 30000)$$)
           AS t(key text, attempt int);
SELECT set_eq($$SELECT key FROM nclaim$$, ARRAY['n2', 'n3', 'n4', 'n5', 'n6', 'n-big', 'ck1', 'ck2', 'ck3'],
              '(the relay claims every due row)');
SELECT is(pg_temp.notes('l', 0.4), 0, 'a claim (pending -> in_flight) does not notify');
SELECT pg_temp.q('w', $$SELECT * FROM outbox.claim('rn', ARRAY['t1', 'tap'], ARRAY[100, 100], 100, 30000)$$) \g /dev/null
SELECT is(pg_temp.notes('l', 0.4), 0, 'a claim that finds nothing does not notify (no self-wake spin)');
CREATE FUNCTION pg_temp.retry_sql(k text, delay_ms int) RETURNS text LANGUAGE sql AS $$
    SELECT format($f$SELECT outbox.record('rn', ARRAY[(SELECT id FROM outbox.intents WHERE key = %L)], ARRAY[1],
                                          ARRAY['pending']::outbox.intent_state[], ARRAY[%s], ARRAY[false],
                                          ARRAY['not_sent']::outbox.attempt_class[], ARRAY[false], ARRAY[NULL::int],
                                          ARRAY['connect refused'], ARRAY[3], ARRAY[NULL::text], NULL::boolean[])$f$, k, delay_ms)
$$;
SELECT is((SELECT n FROM dblink('w', pg_temp.retry_sql('n2', 60000)) AS t(n int)), 1, '(a retry in 60 s is recorded)');
SELECT is(pg_temp.notes('l', 0.4), 0, 'a retry that is not due yet does not notify');
SELECT is((SELECT n FROM dblink('w', pg_temp.retry_sql('n3', 0)) AS t(n int)), 1, '(a retry due now is recorded)');
SELECT cmp_ok(pg_temp.notes('l', 5), '>=', 1, 'a retry that is due now notifies');

SELECT pg_temp.q('w', $$SELECT outbox.relay_heartbeat('r1', true)$$) \g /dev/null
SELECT dblink_exec('w', $$UPDATE outbox.relays SET heartbeat_at = now() - interval '3 minutes'$$) \g /dev/null
SELECT pg_temp.q('w', $$SELECT outbox.enqueue('n8', 't1', '{}')$$) \g /dev/null
SELECT is(pg_temp.notes('l', 0.4), 0, 'an idle relay silent for over 2 minutes is not notified (presumed dead)');
SELECT pg_temp.q('w', $$SELECT outbox.relay_heartbeat('r1', true)$$) \g /dev/null
SELECT pg_temp.q('w', $$SELECT outbox.relay_gone('r1')$$) \g /dev/null
SELECT pg_temp.q('w', $$SELECT outbox.enqueue('n9', 't1', '{}')$$) \g /dev/null
SELECT is(pg_temp.notes('l', 0.4), 0, 'a relay that said it is gone is not notified');

SELECT pg_temp.q('w', $$SELECT outbox.relay_heartbeat('r2', true)$$) \g /dev/null
SELECT dblink_exec('w', 'SET ROLE outbox_app') \g /dev/null
SELECT pg_temp.q('w', $$SELECT outbox.enqueue('n10', 't1', '{}')$$) \g /dev/null
SELECT cmp_ok(pg_temp.notes('l', 5), '>=', 1, 'an enqueue by outbox_app notifies too (the trigger needs no table rights)');
SELECT dblink_exec('w', 'RESET ROLE') \g /dev/null

-- Rows written without enqueue (the table owner's backfill): the statement
-- trigger wakes an idle relay for a row due now, not for one due later.
SELECT dblink_exec('w', $$INSERT INTO outbox.intents (key, target, payload, fingerprint)
                          VALUES ('raw1', 't1', '{}', '\x00')$$) \g /dev/null
SELECT cmp_ok(pg_temp.notes('l', 5), '>=', 1, 'a raw INSERT of a due row notifies an idle relay (statement trigger)');
SELECT dblink_exec('w', $$INSERT INTO outbox.intents (key, target, payload, fingerprint, next_attempt_at)
                          VALUES ('raw2', 't1', '{}', '\x00', now() + interval '1 hour')$$) \g /dev/null
SELECT is(pg_temp.notes('l', 0.4), 0, 'a raw INSERT of a row due later does not notify');

-- ---------------------------------------------------------------------------
-- 0020: record's history INSERT is not reference-checked; the intent of an
-- outcome it did not apply (here a foreign relay's late outcome for a settled
-- intent) is locked FOR KEY SHARE until record commits, so a delete waits and
-- then takes that history row with the intent: no attempts row is orphaned.
SELECT pg_temp.q('s', $$SELECT outbox.enqueue('fk1', 't1', '{}')$$) \g /dev/null
SELECT pg_temp.q('s', $$SELECT * FROM outbox.claim('ra', ARRAY['t1'], ARRAY[50], 50, 30000)$$) \g /dev/null
SELECT pg_temp.q('s', format($$SELECT outbox.record('ra', ARRAY[%s], ARRAY[1], ARRAY['succeeded']::outbox.intent_state[],
                                    ARRAY[0], ARRAY[false], ARRAY['succeeded']::outbox.attempt_class[], ARRAY[true],
                                    ARRAY[200], ARRAY[NULL]::text[], ARRAY[5], ARRAY['ok'], ARRAY[true])$$,
                             (SELECT id FROM outbox.intents WHERE key = 'fk1'))) \g /dev/null
SELECT dblink_exec('a', 'BEGIN') \g /dev/null
SELECT is((SELECT n FROM dblink('a', format($$SELECT outbox.record('rz', ARRAY[%s], ARRAY[1], ARRAY['succeeded']::outbox.intent_state[],
                                    ARRAY[0], ARRAY[false], ARRAY['succeeded']::outbox.attempt_class[], ARRAY[true],
                                    ARRAY[200], ARRAY[NULL]::text[], ARRAY[5], ARRAY['late'], ARRAY[true])$$,
                             (SELECT id FROM outbox.intents WHERE key = 'fk1'))) AS t(n int)),
          0, 'a foreign relay''s late outcome for a settled intent is not applied');
SELECT is(dblink_send_query('b', $$DELETE FROM outbox.intents WHERE key = 'fk1'$$), 1,
          'a delete of that intent is sent while the record is open');
SELECT ok(pg_temp.waits_on_lock(pg_temp.pid('b'), 5),
          'the delete waits for the record (its intent is locked FOR KEY SHARE)');
SELECT dblink_exec('a', 'COMMIT') \g /dev/null
SELECT lives_ok($$SELECT * FROM dblink_get_result('b') AS t(r text)$$, 'the delete goes through once the record commits');
SELECT * FROM dblink_get_result('b', false) AS t(r text) \g /dev/null
SELECT is((SELECT count(*)::int FROM outbox.attempts a WHERE NOT EXISTS (SELECT 1 FROM outbox.intents i WHERE i.id = a.intent_id)),
          0, 'no attempts row is left without its intent (the late outcome''s row went with it)');

SELECT dblink_disconnect(name) FROM conn \g /dev/null
SELECT * FROM finish();
