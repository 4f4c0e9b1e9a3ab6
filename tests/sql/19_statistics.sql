-- 19_statistics: statistics that keep up with a table that grows from empty
-- (migrations/0019_fresh_statistics.sql).
--   refresh_statistics  ANALYZE intents once it has more than doubled (plus 1 MB)
--                       since its statistics were taken; false when fresh
--   relay_heartbeat     calls it
BEGIN;
SELECT plan(8);

INSERT INTO outbox.targets (name, url) VALUES ('st', 'https://st.test/hook');
ANALYZE outbox.intents;   -- statistics of an empty table, as a new outbox has them

SELECT is(outbox.refresh_statistics(), false, 'an empty table with fresh statistics: nothing to do');
SELECT is((SELECT relpages FROM pg_class WHERE oid = 'outbox.intents'::regclass), 0, 'the statistics say: no pages');

SELECT count(*) FROM (SELECT outbox.enqueue('st:' || g, 'st', jsonb_build_object('n', g, 'pad', repeat('x', 200)))
                        FROM generate_series(1, 6000) g) x \g /dev/null
SELECT ok(pg_relation_size('outbox.intents') / current_setting('block_size')::int > 128,
          'after 6,000 enqueues the table has more than 128 pages');
SELECT is(outbox.refresh_statistics(), true, 'grown past twice its known size plus 1 MB: analyzed');
SELECT cmp_ok((SELECT reltuples FROM pg_class WHERE oid = 'outbox.intents'::regclass)::int, '>=', 5000,
              'the statistics now count the rows');
SELECT is(outbox.refresh_statistics(), false, 'right after: fresh, nothing to do');
-- stale again; owned by a role that may not analyze intents, it does not try (ANALYZE would warn)
SELECT count(*) FROM (SELECT outbox.enqueue('st2:' || g, 'st', jsonb_build_object('n', g, 'pad', repeat('x', 200)))
                        FROM generate_series(1, 20000) g) x \g /dev/null
CREATE ROLE st_not_owner;
GRANT USAGE ON SCHEMA outbox TO st_not_owner;
ALTER FUNCTION outbox.refresh_statistics() OWNER TO st_not_owner;
SELECT is(outbox.refresh_statistics(), false, 'an owner that may not analyze intents: false, no attempt');

SELECT matches(pg_get_functiondef('outbox.relay_heartbeat(text, boolean)'::regprocedure),
               'PERFORM outbox\.refresh_statistics\(\)', 'the relay''s heartbeat refreshes stale statistics');

SELECT * FROM finish();
ROLLBACK;
