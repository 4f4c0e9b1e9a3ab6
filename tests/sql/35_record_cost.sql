-- 35_record_cost: what outbox.record does per batch after 0048 (issue 40, items 3 and 7),
-- across real connections (dblink), as a relay and a waiter see it.
--   one batch      four successes and an outcome fenced out (another relay's lease): record
--                  applies four; every outcome is in the history, the fenced one with
--                  recorded false; the waiters' NOTIFY outbox_outcomes names exactly the four
--                  keys, one JSON array, once
--   the keys       settle with the keys handed over (record) and without them (cancel): the
--                  same payload shape; a key with a quote is JSON-escaped
--   many keys      more keys than fit in one payload: several NOTIFYs, each a JSON array
--                  under 8,000 bytes, together every key once
--   the history    attempts_reference_insert is a row trigger without a transition table
--                  (PostgreSQL copied every history row of record into one before 0048); a
--                  history row for an intent that does not exist is still refused, 23503 with
--                  the message; record's own rows are not checked row by row (its WHEN)
-- Nothing runs in one wrapping transaction: every setup commits (the database is a
-- throwaway copy made by run.sh).
SELECT plan(14);

\ir lib/sessions.sql
-- the payloads on outbox_outcomes received by conn: waits up to secs for the first
-- (then 300 ms for the rest)
CREATE FUNCTION pg_temp.outcomes(conn text, secs float8) RETURNS jsonb[] LANGUAGE plpgsql AS $$
DECLARE
    deadline timestamptz := clock_timestamp() + secs * interval '1 second';
    got jsonb[] := '{}';
BEGIN
    LOOP
        got := got || coalesce((SELECT array_agg(extra::jsonb) FROM dblink_get_notify(conn)
                                 WHERE notify_name = 'outbox_outcomes'), '{}');
        EXIT WHEN clock_timestamp() > deadline;
        IF cardinality(got) > 0 THEN
            deadline := least(deadline, clock_timestamp() + interval '300 milliseconds');
        END IF;
        PERFORM pg_sleep(0.02);
    END LOOP;
    RETURN got;
END $$;
CREATE FUNCTION pg_temp.id(k text) RETURNS bigint LANGUAGE sql AS $$ SELECT id FROM outbox.intents WHERE key = k $$;
-- in flight, leased to relay `owner`, first attempt: as a claim leaves it
CREATE FUNCTION pg_temp.in_flight(keys text[], owner text) RETURNS void LANGUAGE sql AS $$
    UPDATE outbox.intents SET state = 'in_flight', attempts = 1, lease_owner = owner,
                              lease_expires_at = now() + interval '1 hour'
     WHERE key = ANY (keys) $$;
-- outbox.record(...) by relay r1 as text, for a dblink session: one success per key
CREATE FUNCTION pg_temp.record_call(keys text[]) RETURNS text LANGUAGE sql AS $$
    SELECT format('SELECT outbox.record(%L, %L::bigint[], %L::int[], %L::outbox.intent_state[], %L::int[], %L::boolean[], '
                  '%L::outbox.attempt_class[], %L::boolean[], %L::int[], %L::text[], %L::int[], %L::text[], %L::boolean[])',
                  'r1', (SELECT array_agg(pg_temp.id(k) ORDER BY o) FROM unnest(keys) WITH ORDINALITY AS x(k, o)),
                  array_fill(1, ARRAY[n]), array_fill('succeeded'::text, ARRAY[n]), array_fill(0, ARRAY[n]),
                  array_fill(false, ARRAY[n]), array_fill('succeeded'::text, ARRAY[n]), array_fill(true, ARRAY[n]),
                  array_fill(200, ARRAY[n]), array_fill(NULL::text, ARRAY[n]), array_fill(5, ARRAY[n]),
                  array_fill('{"ok":true}'::text, ARRAY[n]), array_fill(true, ARRAY[n]))
      FROM (SELECT cardinality(keys) AS n) c $$;

SELECT pg_temp.open('r') \g /dev/null
SELECT pg_temp.open('l') \g /dev/null
SELECT dblink_exec('l', 'LISTEN outbox_outcomes') \g /dev/null

INSERT INTO outbox.targets (name, url) VALUES ('t1', 'https://t1.test/hook');
SELECT outbox.enqueue(k, 't1', '{"n": 1}')
  FROM unnest(ARRAY['rc:a', 'rc:b', 'rc:c', 'rc:d', 'rc:fenced', 'rc:"q"', 'rc:cancel']) AS k \g /dev/null
SELECT outbox.enqueue('rc:many:' || lpad(g::text, 4, '0') || repeat('x', 60), 't1', '{"n": 1}')
  FROM generate_series(1, 150) AS g \g /dev/null
SELECT pg_temp.in_flight(ARRAY['rc:a', 'rc:b', 'rc:c', 'rc:d', 'rc:"q"'], 'r1') \g /dev/null
SELECT pg_temp.in_flight(ARRAY['rc:fenced'], 'r2') \g /dev/null
SELECT pg_temp.in_flight(ARRAY(SELECT key FROM outbox.intents WHERE key LIKE 'rc:many:%'), 'r1') \g /dev/null

-- ---------------------------------------------------------------------------
-- one batch
SELECT is((SELECT n FROM dblink('r', pg_temp.record_call(ARRAY['rc:a', 'rc:b', 'rc:fenced', 'rc:c', 'rc:d']))
                               AS t(n int)), 4, 'record applies four outcomes of five (one is fenced out)');
SELECT is((SELECT string_agg(i.key || ':' || i.state || ':' || a.recorded, ' ' ORDER BY a.id)
             FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id WHERE i.key LIKE 'rc:_'
               OR i.key = 'rc:fenced'),
          'rc:a:succeeded:true rc:b:succeeded:true rc:fenced:in_flight:false rc:c:succeeded:true rc:d:succeeded:true',
          'every outcome is in the history, in the order of the batch; the fenced one not recorded');
CREATE TEMP TABLE got AS SELECT e FROM unnest(pg_temp.outcomes('l', 10)) AS x(e);
SELECT is((SELECT count(*) FROM got), 1::bigint, 'one NOTIFY outbox_outcomes for the batch');
SELECT is((SELECT e FROM got), '["rc:a", "rc:b", "rc:c", "rc:d"]'::jsonb,
          'it names the four keys applied, a JSON array in the order of the batch');

-- ---------------------------------------------------------------------------
-- the keys: from record's UPDATE, or read by settle (a cancel)
SELECT is((SELECT n FROM dblink('r', pg_temp.record_call(ARRAY['rc:"q"'])) AS t(n int)), 1,
          'record applies the outcome of a key with quotes');
SELECT is(pg_temp.outcomes('l', 10), ARRAY['["rc:\"q\""]'::jsonb], 'its key is JSON-escaped in the payload');
SELECT is((SELECT s FROM dblink('r', $$SELECT outbox.cancel('rc:cancel')::text$$) AS t(s text)), 'cancelled',
          'cancel of a pending intent');
SELECT is(pg_temp.outcomes('l', 10), ARRAY['["rc:cancel"]'::jsonb],
          'settle reads the key itself when the caller hands none over');

-- ---------------------------------------------------------------------------
-- many keys
SELECT is((SELECT n FROM dblink('r', pg_temp.record_call(ARRAY(SELECT key FROM outbox.intents
                                                                WHERE key LIKE 'rc:many:%' ORDER BY key)))
                               AS t(n int)), 150, 'record applies 150 outcomes with long keys');
CREATE TEMP TABLE many AS SELECT e FROM unnest(pg_temp.outcomes('l', 10)) AS x(e);
SELECT cmp_ok((SELECT count(*) FROM many), '>', 1::bigint, 'they do not fit in one payload: several NOTIFYs');
SELECT is_empty($$SELECT e FROM many WHERE jsonb_typeof(e) <> 'array' OR octet_length(e::text) > 8000$$,
                'each is a JSON array under 8,000 bytes');
SELECT bag_eq($$SELECT k FROM many, jsonb_array_elements_text(e) AS k$$,
              $$SELECT key FROM outbox.intents WHERE key LIKE 'rc:many:%'$$,
              'together they name every key, once');

-- ---------------------------------------------------------------------------
-- the history's reference check
SELECT ok((SELECT (t.tgtype & 1) = 1 AND t.tgnewtable IS NULL AND t.tgoldtable IS NULL
             FROM pg_trigger t WHERE t.tgrelid = 'outbox.attempts'::regclass AND t.tgname = 'attempts_reference_insert'),
          'attempts_reference_insert is a row trigger without a transition table');
SELECT throws_ok($$INSERT INTO outbox.attempts (intent_id, attempt, relay, class) VALUES (-7, 1, 'x', 'succeeded')$$,
                 '23503', 'outbox.attempts: intent -7 does not exist',
                 'a history row for an intent that does not exist is refused');

SELECT * FROM finish();
