-- 08_next_due: outbox.next_due_ms(targets), the relay's sleep timer (the argumentless
-- version of 0003, retired in 0009, is dropped by 0028):
-- "When the next row becomes due (a pending retry, or an in_flight lease that
-- will expire and need taking over), in ms from now; NULL when there is none."
-- A relay told 0 when nothing is due wakes at once, again and again; one not
-- told about a lease expiry sleeps through the take-over until the fallback poll.
-- One transaction: now() is one instant, so the values are exact.
BEGIN;
SELECT plan(8);

INSERT INTO outbox.targets (name, url) VALUES ('td', 'https://td.test/hook');
CREATE FUNCTION pg_temp.mk(k text, due interval DEFAULT '0') RETURNS bigint LANGUAGE sql AS $$
    SELECT intent_id FROM outbox.enqueue(k, 'td', jsonb_build_object('k', k));
    UPDATE outbox.intents SET next_attempt_at = now() + due WHERE key = k RETURNING id;
$$;

SELECT is(outbox.next_due_ms(ARRAY['td']), NULL, 'no rows at all: NULL');

SELECT pg_temp.mk('nd-wait', '-1 hour') \g /dev/null
UPDATE outbox.intents SET state = 'awaiting_approval' WHERE key = 'nd-wait';
SELECT pg_temp.mk('nd-done', '-1 hour') \g /dev/null
UPDATE outbox.intents SET state = 'succeeded' WHERE key = 'nd-done';
SELECT is(outbox.next_due_ms(ARRAY['td']), NULL, 'only rows awaiting approval or final: NULL');

SELECT pg_temp.mk('nd-10s', '10 seconds') \g /dev/null
SELECT is(outbox.next_due_ms(ARRAY['td']), 10000::bigint, 'a pending row due in 10 s: 10000');

SELECT pg_temp.mk('nd-lease', '-1 hour') \g /dev/null
UPDATE outbox.intents SET state = 'in_flight', attempts = 1, lease_owner = 'r1', lease_expires_at = now() + interval '4 seconds'
 WHERE key = 'nd-lease';
SELECT is(outbox.next_due_ms(ARRAY['td']), 4000::bigint, 'an in_flight lease expiring in 4 s comes first (not its old next_attempt_at): 4000');

UPDATE outbox.intents SET lease_expires_at = now() + interval '20 seconds' WHERE key = 'nd-lease';
SELECT is(outbox.next_due_ms(ARRAY['td']), 10000::bigint, 'the earlier of the two wins: the pending row in 10 s');

UPDATE outbox.intents SET state = 'unknown', lease_owner = NULL, lease_expires_at = NULL WHERE key = 'nd-lease';
UPDATE outbox.intents SET state = 'cancelled' WHERE key = 'nd-10s';
SELECT is(outbox.next_due_ms(ARRAY['td']), NULL, 'neither pending nor in_flight rows: NULL');

SELECT pg_temp.mk('nd-late', '-1 minute') \g /dev/null
SELECT is(outbox.next_due_ms(ARRAY['td']), 0::bigint, 'an overdue pending row: 0');
UPDATE outbox.intents SET state = 'in_flight', attempts = 1, lease_owner = 'r1', lease_expires_at = now() - interval '1 second'
 WHERE key = 'nd-late';
SELECT is(outbox.next_due_ms(ARRAY['td']), 0::bigint, 'an expired lease: 0');

SELECT * FROM finish();
ROLLBACK;
