-- 27_renew_leases: lease renewal after 0033 (issue 26), called as the relay's role.
--   - a lease in its first sixth is left as it is (no new row version: its ctid stays); past
--     it, the lease is renewed to a whole one; the boundary is exact;
--   - the rows are found by their ids, one primary-key probe per id held,
--     never by a walk of intents_in_flight, even when the statistics say that
--     nothing is in flight (the table analyzed while every row was pending:
--     the drain of a backlog, where the old plan compared every row in flight
--     with every id held and one call took seconds);
--   - duplicate ids, other relays' rows and rows no longer in flight are not
--     renewed;
--   - outbox.release finds its rows by id as well.
-- One transaction: now() is one instant, so leases compare exactly.
BEGIN;
SELECT plan(14);

INSERT INTO outbox.targets (name, url) VALUES ('t', 'https://t.test/hook');
CREATE FUNCTION pg_temp.id(k text) RETURNS bigint LANGUAGE sql AS $$ SELECT id FROM outbox.intents WHERE key = k $$;
CREATE FUNCTION pg_temp.hold(k text, owner text, lease_left interval) RETURNS void LANGUAGE sql AS $$
    SELECT outbox.enqueue(k, 't', jsonb_build_object('k', k));
    UPDATE outbox.intents SET state = 'in_flight', attempts = 1, lease_owner = owner,
                              lease_expires_at = now() + lease_left
     WHERE key = k;
$$;
-- index scans started in this transaction (each probe of a nested loop is one)
CREATE FUNCTION pg_temp.scans(ix text) RETURNS bigint LANGUAGE sql AS $$
    SELECT pg_stat_get_xact_numscans(('outbox.' || ix)::regclass)
$$;

-- ---------------------------------------------------------------------------
-- young leases are left alone (a 30 s lease: renewed once less than 25 s is left)
SELECT pg_temp.hold('fresh', 'r1', '30 seconds'), pg_temp.hold('edge', 'r1', '25 seconds'),
       pg_temp.hold('past-edge', 'r1', '24.999 seconds'), pg_temp.hold('old', 'r1', '2 seconds'),
       pg_temp.hold('other', 'r2', '1 second'), pg_temp.hold('done', 'r1', '1 second') \g /dev/null
UPDATE outbox.intents SET state = 'succeeded', lease_owner = NULL, lease_expires_at = NULL WHERE key = 'done';
CREATE TEMP TABLE before AS SELECT key, ctid::text AS version, lease_expires_at FROM outbox.intents;
GRANT SELECT ON before TO outbox_relay;

SELECT pg_temp.id('fresh') AS fresh, pg_temp.id('edge') AS edge, pg_temp.id('past-edge') AS past_edge,
       pg_temp.id('old') AS old, pg_temp.id('other') AS other, pg_temp.id('done') AS done \gset
SET ROLE outbox_relay;
SELECT set_eq(format('SELECT * FROM outbox.renew_leases(''r1'', ARRAY[%s, %s, %s, %s, %s, %s, %s], 30000)',
                     :fresh, :edge, :past_edge, :old, :old, :other, :done),
              ARRAY[:past_edge, :old]::bigint[],
              'renewed: the caller''s rows in flight with less than five sixths of the lease left, each once');
RESET ROLE;
SELECT results_eq($$SELECT i.key COLLATE "default", i.ctid::text = b.version, i.lease_expires_at
                      FROM outbox.intents i JOIN before b USING (key) ORDER BY i.key$$,
                  $$VALUES ('done'::text, true, NULL::timestamptz),
                           ('edge', true, now() + interval '25 seconds'),
                           ('fresh', true, now() + interval '30 seconds'),
                           ('old', false, now() + interval '30 seconds'),
                           ('other', true, now() + interval '1 second'),
                           ('past-edge', false, now() + interval '30 seconds')$$,
                  'a young lease keeps its row version; a renewed one gets a whole lease; '
                  'other relays'' rows and settled rows are untouched');

-- A short lease (the relay ticks every lease_ms / 3): the same sixth.
SELECT pg_temp.hold('short', 'r1', '834 milliseconds'), pg_temp.hold('short-old', 'r1', '833 milliseconds') \g /dev/null
SELECT pg_temp.id('short') AS short, pg_temp.id('short-old') AS short_old \gset
SET ROLE outbox_relay;
SELECT set_eq(format('SELECT * FROM outbox.renew_leases(''r1'', ARRAY[%s, %s], 1000)', :short, :short_old),
              ARRAY[:short_old]::bigint[],
              'a 1 s lease is renewed once less than 833.3 ms of it is left');
RESET ROLE;

-- ---------------------------------------------------------------------------
-- found by id, whatever the statistics say
SELECT count(outbox.enqueue('bulk:' || g, 't', jsonb_build_object('n', g))) FROM generate_series(1, 20000) g \g /dev/null
ANALYZE outbox.intents;   -- every row pending: nothing in flight, say the statistics
UPDATE outbox.intents SET state = 'in_flight', attempts = 1, lease_owner = 'r1', lease_expires_at = now() + interval '1 second'
 WHERE key LIKE 'bulk:%' AND substr(key, 6)::int <= 3000;
UPDATE outbox.intents SET state = 'in_flight', attempts = 1, lease_owner = 'r2', lease_expires_at = now() + interval '1 second'
 WHERE key LIKE 'bulk:%' AND substr(key, 6)::int BETWEEN 3001 AND 4000;
SELECT cmp_ok((SELECT reltuples FROM pg_class WHERE oid = 'outbox.intents_in_flight'::regclass), '<', 100::real,
              'the statistics say that next to nothing is in flight (4,007 rows are)');

CREATE TEMP TABLE held AS   -- r1's 3,000 rows, 500 of them twice, and 1,000 of r2's
SELECT id FROM outbox.intents WHERE key LIKE 'bulk:%' AND substr(key, 6)::int <= 4000
UNION ALL SELECT id FROM outbox.intents WHERE key LIKE 'bulk:%' AND substr(key, 6)::int <= 500;
GRANT SELECT ON held TO outbox_relay;
CREATE TEMP TABLE scans_before AS
SELECT pg_temp.scans('intents_in_flight') AS in_flight, pg_temp.scans('intents_pkey') AS pkey;

SET ROLE outbox_relay;
SELECT is((SELECT count(*) FROM outbox.renew_leases('r1', (SELECT array_agg(id) FROM held), 30000)), 3000::bigint,
          'every one of the caller''s 3,000 rows is renewed once');
RESET ROLE;
SELECT is(pg_temp.scans('intents_in_flight') - (SELECT in_flight FROM scans_before), 0::bigint,
          'intents_in_flight is not read');
SELECT cmp_ok(pg_temp.scans('intents_pkey') - (SELECT pkey FROM scans_before), '<=', 8000::bigint,
              'the work is linear: at most a primary-key probe per distinct id held and one per row renewed');
SELECT is((SELECT count(*) FROM outbox.intents
            WHERE key LIKE 'bulk:%' AND lease_owner = 'r1' AND lease_expires_at = now() + interval '30 seconds'),
          3000::bigint, 'their leases are whole again');
SELECT is((SELECT count(*) FROM outbox.intents
            WHERE key LIKE 'bulk:%' AND lease_owner = 'r2' AND lease_expires_at = now() + interval '1 second'),
          1000::bigint, 'another relay''s rows among the ids keep their leases');

-- the same call again: every lease is whole, nothing is written
CREATE TEMP TABLE versions AS SELECT id, ctid::text AS version FROM outbox.intents WHERE lease_owner = 'r1';
SET ROLE outbox_relay;
SELECT is_empty($$SELECT * FROM outbox.renew_leases('r1', (SELECT array_agg(id) FROM held), 30000)$$,
                'renewed again at once: nothing to renew');
RESET ROLE;
SELECT is((SELECT count(*) FROM outbox.intents i JOIN versions v USING (id) WHERE i.ctid::text <> v.version), 0::bigint,
          '...and no row has a new version');
SELECT is((SELECT count(*) FROM outbox.intents WHERE state = 'in_flight'), 4007::bigint,
          'every row in flight is still in flight');

-- release finds its rows the same way (the rows a relay gives back unsent)
CREATE TEMP TABLE give_back AS
SELECT id, attempts FROM outbox.intents WHERE key LIKE 'bulk:%' AND substr(key, 6)::int BETWEEN 2501 AND 3500;
GRANT SELECT ON give_back TO outbox_relay;
UPDATE scans_before SET in_flight = pg_temp.scans('intents_in_flight');
SET ROLE outbox_relay;
SELECT is(outbox.release('r1', (SELECT array_agg(id) FROM give_back), (SELECT array_agg(attempts) FROM give_back)), 500,
          'release gives back the caller''s 500 rows among 1,000 ids (the other 500 are r2''s)');
RESET ROLE;
SELECT is(pg_temp.scans('intents_in_flight') - (SELECT in_flight FROM scans_before), 0::bigint,
          '...without reading intents_in_flight');

SELECT * FROM finish();
ROLLBACK;
