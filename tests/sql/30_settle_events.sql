-- 30_settle_events: the events for people on outbox_events, as a LISTEN session
-- receives them across real connections (dblink; migrations/0039_settle_every_event.sql,
-- 0015_events.sql; issue 39, deliverable 6).
--   one batch     outbox.record with a 400, a 422 on the head of a group of three, an
--                 ambiguous timeout and a success: intent_failed for both failures with
--                 their class, status and error, group_blocked (blocks 2) right after the
--                 head's, intent_unknown for the timeout, nothing for the success; each
--                 with 'at' (the same events record built itself before 0039)
--   a person      outbox.resolve to failed sends nothing (as before)
--   who sends     outbox.settle: with settle replaced by one that does nothing, a failed
--                 outcome sends no intent_failed (before 0039 record sent it)
-- Nothing runs in one wrapping transaction: every setup commits (the database is a
-- throwaway copy made by run.sh).
SELECT plan(10);

\ir lib/sessions.sql
-- the payloads on outbox_events received by conn, in order: waits up to secs for
-- the first (then 300 ms for the rest), or the whole time for none
CREATE FUNCTION pg_temp.events(conn text, secs float8) RETURNS jsonb[] LANGUAGE plpgsql AS $$
DECLARE
    deadline timestamptz := clock_timestamp() + secs * interval '1 second';
    got jsonb[] := '{}';
BEGIN
    LOOP
        got := got || coalesce((SELECT array_agg(extra::jsonb) FROM dblink_get_notify(conn)
                                 WHERE notify_name = 'outbox_events'), '{}');
        EXIT WHEN clock_timestamp() > deadline;
        IF cardinality(got) > 0 THEN
            deadline := least(deadline, clock_timestamp() + interval '300 milliseconds');
        END IF;
        PERFORM pg_sleep(0.02);
    END LOOP;
    RETURN got;
END $$;
CREATE FUNCTION pg_temp.id(k text) RETURNS bigint LANGUAGE sql AS $$ SELECT id FROM outbox.intents WHERE key = k $$;
-- in flight, leased to relay r1, first attempt: as a claim leaves it
CREATE FUNCTION pg_temp.in_flight(keys text[]) RETURNS void LANGUAGE sql AS $$
    UPDATE outbox.intents SET state = 'in_flight', attempts = 1, lease_owner = 'r1',
                              lease_expires_at = now() + interval '1 hour'
     WHERE key = ANY (keys) $$;
-- outbox.record(...) as text, for a dblink session: one outcome per key
CREATE FUNCTION pg_temp.record_call(keys text[], states text[], classes text[], http int[], errors text[])
RETURNS text LANGUAGE sql AS $$
    SELECT format('SELECT outbox.record(%L, %L::bigint[], %L::int[], %L::outbox.intent_state[], %L::int[], %L::boolean[], '
                  '%L::outbox.attempt_class[], %L::boolean[], %L::int[], %L::text[], %L::int[], %L::text[], %L::boolean[])',
                  'r1', (SELECT array_agg(pg_temp.id(k) ORDER BY o) FROM unnest(keys) WITH ORDINALITY AS x(k, o)),
                  array_fill(1, ARRAY[cardinality(keys)]), states, array_fill(0, ARRAY[cardinality(keys)]),
                  (SELECT array_agg(c = 'ambiguous' ORDER BY o) FROM unnest(classes) WITH ORDINALITY AS x(c, o)),
                  classes, array_fill(true, ARRAY[cardinality(keys)]), http, errors,
                  array_fill(5, ARRAY[cardinality(keys)]), array_fill('body'::text, ARRAY[cardinality(keys)]),
                  array_fill(true, ARRAY[cardinality(keys)])) $$;

SELECT pg_temp.open('r') \g /dev/null
SELECT pg_temp.open('l') \g /dev/null
SELECT dblink_exec('l', 'LISTEN outbox_events') \g /dev/null

INSERT INTO outbox.targets (name, url) VALUES ('t1', 'https://t1.test/hook');
SELECT outbox.enqueue(k, 't1', '{"n": 1}', NULL, NULL, g)
  FROM (VALUES ('ev:a', NULL), ('ev:b', 'g'), ('ev:b2', 'g'), ('ev:b3', 'g'), ('ev:c', NULL), ('ev:d', NULL),
               ('ev:e', NULL), ('ev:f', NULL)) AS x(k, g) \g /dev/null
SELECT pg_temp.in_flight(ARRAY['ev:a', 'ev:b', 'ev:c', 'ev:d']) \g /dev/null

-- ---------------------------------------------------------------------------
-- one batch
SELECT is((SELECT n FROM dblink('r', pg_temp.record_call(ARRAY['ev:a', 'ev:b', 'ev:c', 'ev:d'],
                                                         ARRAY['failed', 'failed', 'unknown', 'succeeded'],
                                                         ARRAY['permanent_failure', 'permanent_failure', 'ambiguous', 'succeeded'],
                                                         ARRAY[400, 422, NULL, 200],
                                                         ARRAY['HTTP 400', 'HTTP 422', 'timeout after send', NULL]))
                               AS t(n int)), 4, 'record applies the batch of four');
CREATE TEMP TABLE got AS SELECT e, o FROM unnest(pg_temp.events('l', 10)) WITH ORDINALITY AS x(e, o);
SELECT set_eq($$SELECT e - 'at' FROM got$$,
              $$VALUES ('{"event": "intent_failed", "key": "ev:a", "target": "t1", "class": "permanent_failure",
                          "http_status": 400, "error": "HTTP 400"}'::jsonb),
                       ('{"event": "intent_failed", "key": "ev:b", "target": "t1", "class": "permanent_failure",
                          "http_status": 422, "error": "HTTP 422", "ordering_key": "g", "blocks": 2}'),
                       ('{"event": "group_blocked", "group": "g", "head": "ev:b", "blocks": 2}'),
                       ('{"event": "intent_unknown", "key": "ev:c", "target": "t1", "class": "ambiguous",
                          "error": "timeout after send"}')$$,
              'the batch sends intent_failed twice (one with blocks), group_blocked, intent_unknown; nothing for the success');
SELECT is((SELECT count(*) FROM got), 4::bigint, 'four events, each once');
SELECT is_empty($$SELECT e FROM got WHERE NOT e ? 'at' OR (e->>'at')::timestamptz IS NULL$$, 'every event says when');
SELECT is((SELECT g.e->>'event' FROM got g JOIN got f ON g.o = f.o + 1 WHERE f.e->>'key' = 'ev:b'), 'group_blocked',
          'group_blocked comes right after the intent_failed of the head it names');
SELECT is((SELECT string_agg(state::text, ' ' ORDER BY key) FROM outbox.intents WHERE key IN ('ev:a', 'ev:b', 'ev:c', 'ev:d')),
          'failed failed unknown succeeded', 'the rows are in the states recorded');

-- ---------------------------------------------------------------------------
-- a person's resolve to failed sends nothing
UPDATE outbox.intents SET state = 'unknown', attempts = 1, ambiguous = true WHERE key = 'ev:e';
SELECT is((SELECT s FROM dblink('r', $$SELECT outbox.resolve('ev:e', 'failed', 'the target says it never ran')::text$$)
                         AS t(s text)), 'failed', 'resolve makes ev:e failed');
SELECT is(cardinality(pg_temp.events('l', 1)), 0, 'outbox.resolve to failed sends no event');

-- ---------------------------------------------------------------------------
-- who sends: outbox.settle (replaced here by one that does nothing; a new session,
-- so that no plan of the real one is cached)
ALTER FUNCTION outbox.settle(bigint[], outbox.intent_state[], text[], text[]) RENAME TO settle_real;
CREATE FUNCTION outbox.settle(p_ids bigint[], p_states outbox.intent_state[], p_groups text[],
                              p_keys text[] DEFAULT NULL) RETURNS void
LANGUAGE sql AS $$ SELECT $$;
SELECT pg_temp.open('r2') \g /dev/null
SELECT pg_temp.in_flight(ARRAY['ev:f']) \g /dev/null
SELECT is((SELECT n FROM dblink('r2', pg_temp.record_call(ARRAY['ev:f'], ARRAY['failed'], ARRAY['permanent_failure'],
                                                          ARRAY[400], ARRAY['HTTP 400'])) AS t(n int)),
          1, 'without outbox.settle, a failed outcome is still recorded');
SELECT is(cardinality(pg_temp.events('l', 1)), 0, 'and it sends no intent_failed: outbox.settle builds it');
DROP FUNCTION outbox.settle(bigint[], outbox.intent_state[], text[], text[]);
ALTER FUNCTION outbox.settle_real(bigint[], outbox.intent_state[], text[], text[]) RENAME TO settle;

SELECT * FROM finish();
