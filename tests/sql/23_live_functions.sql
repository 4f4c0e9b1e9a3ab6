-- 23_live_functions: the versions of the relay's functions that the relay calls
-- today (relay/sql.h), called as the role it runs as, outbox_relay. The older
-- files test overloads kept for rollbacks (06: the 12-array record, 08: the
-- next_due_ms without targets, 12 the claim of relays before 0025); these are
-- the live ones:
--   record(13 arrays)      fenced by (lease owner, attempt): a wrong owner or attempt changes
--                          nothing; the outcome still goes into the history (recorded = false,
--                          key_sent kept); an outcome of an intent deleted meanwhile is skipped
--   next_due_ms(targets)   the reconciliation term: an unknown row of an enabled target with a
--                          status URL, due soon, brings the answer in (not after a lease it has)
--   claim_unknown          unknown rows only, due, of enabled targets with a status URL; a live
--                          lease is respected, an expired one is not; the limit, oldest first;
--                          the row stays unknown; a row another transaction holds is skipped
--                          without waiting (SKIP LOCKED)
--   renew_leases           only the caller's in-flight rows; each id once
--   release                only the caller's rows of that attempt; the attempt is given back
--                          (first_attempt_at too when it was the first); the exact count
--   take_over              expired leases only, never a row the caller holds (p_held)
--   claim_due              the gates: an open circuit claims nothing before its probe time, then
--                          one probe; a paused target nothing; a rate limit its tokens' worth
-- Rows are claimed with claim_due, as the relay does. The key_sent stamp of
-- claim_due and take_over is tested with migration 0025, not here.
-- The first part (SKIP LOCKED) commits, as it needs a second real connection;
-- the rest is one transaction, so now() is one instant and times compare exactly.
SELECT plan(56);

INSERT INTO outbox.targets (name, url) VALUES ('tl', 'https://tl.test/hook');   -- no status URL
INSERT INTO outbox.targets (name, url, status_url)
VALUES ('ts', 'https://ts.test/hook', 'https://ts.test/status/{key}'),
       ('tsoff', 'https://tsoff.test/hook', 'https://tsoff.test/status/{key}');
UPDATE outbox.targets SET enabled = false WHERE name = 'tsoff';

-- an intent due at now() + due, in a given state; returns its id
-- (a disabled target refuses enqueues: it is enabled for the moment)
CREATE FUNCTION pg_temp.mk(k text, tgt text, st outbox.intent_state DEFAULT 'pending', due interval DEFAULT '0')
RETURNS bigint LANGUAGE sql AS $$
    UPDATE outbox.targets SET enabled = true WHERE name = tgt AND NOT enabled AND tgt = 'tsoff';
    SELECT intent_id FROM outbox.enqueue(k, tgt, jsonb_build_object('k', k));
    UPDATE outbox.targets SET enabled = false WHERE name = 'tsoff' AND enabled;
    UPDATE outbox.intents
       SET state = st, next_attempt_at = now() + due,
           attempts = CASE WHEN st = 'unknown' THEN 1 ELSE attempts END,
           ambiguous = st = 'unknown',
           first_attempt_at = CASE WHEN st = 'unknown' THEN now() - interval '1 minute' END
     WHERE key = k RETURNING id;
$$;
-- one outcome through the live record (13 arrays), as the relay sends it
CREATE FUNCTION pg_temp.rec(relay text, id bigint, attempt int, st outbox.intent_state, cls outbox.attempt_class,
                            http int DEFAULT NULL, body text DEFAULT NULL, key_sent boolean DEFAULT true)
RETURNS int LANGUAGE sql AS $$
    SELECT outbox.record(relay, ARRAY[id], ARRAY[attempt], ARRAY[st], ARRAY[NULL::int], ARRAY[false], ARRAY[cls],
                         ARRAY[true], ARRAY[http], ARRAY['from ' || relay], ARRAY[7], ARRAY[body], ARRAY[key_sent]);
$$;
CREATE FUNCTION pg_temp.id(k text) RETURNS bigint LANGUAGE sql AS $$ SELECT id FROM outbox.intents WHERE key = k $$;
CREATE FUNCTION pg_temp.row_of(k text) RETURNS text LANGUAGE sql AS $$
    SELECT format('%s %s %s %s', state, attempts, coalesce(lease_owner, '-'), coalesce(last_error, '-'))
      FROM outbox.intents WHERE key = k
$$;

-- ---------------------------------------------------------------------------
-- claim_unknown skips a row another transaction holds, without waiting
SELECT pg_temp.mk('sk-held', 'ts', 'unknown', '-2 minutes'), pg_temp.mk('sk-free', 'ts', 'unknown', '-1 minute') \g /dev/null
SELECT dblink_connect('holder', format('host=%s port=%s dbname=%s user=%s',
                      coalesce(host(inet_server_addr()), split_part(current_setting('unix_socket_directories'), ',', 1)),
                      current_setting('port'), current_database(), current_user)) \g /dev/null
SELECT dblink_exec('holder', 'BEGIN') \g /dev/null
SELECT * FROM dblink('holder', $$SELECT id FROM outbox.intents WHERE key = 'sk-held' FOR UPDATE$$) AS t(id bigint) \g /dev/null
CREATE TEMP TABLE skipped (id bigint, key text, target text, attempt int, first_attempt_ms bigint);
GRANT ALL ON skipped TO outbox_relay;
SET ROLE outbox_relay;
SET lock_timeout = '3s';
SELECT lives_ok($$INSERT INTO skipped SELECT * FROM outbox.claim_unknown('r1', 10, 30000)$$,
                'claim_unknown does not wait for a row another transaction holds');
RESET lock_timeout;
RESET ROLE;
SELECT is((SELECT string_agg(key, ',') FROM skipped), 'sk-free', 'claim_unknown: the held row is skipped, the free one claimed');
SELECT dblink_exec('holder', 'ROLLBACK') \g /dev/null
SELECT dblink_disconnect('holder') \g /dev/null
UPDATE outbox.intents SET state = 'succeeded', lease_owner = NULL, lease_expires_at = NULL WHERE key LIKE 'sk-%';

BEGIN;
-- ---------------------------------------------------------------------------
-- next_due_ms(targets): the reconciliation term
SET ROLE outbox_relay;
SELECT is(outbox.next_due_ms(ARRAY['tl', 'ts']), NULL, 'next_due_ms: nothing to do: NULL');
RESET ROLE;
SELECT pg_temp.mk('nd-pending', 'ts', 'pending', '60 seconds') AS nd_pending,
       pg_temp.mk('nd-unknown', 'ts', 'unknown', '3 seconds') AS nd_unknown,
       pg_temp.mk('nd-nourl', 'tl', 'unknown', '1 second') AS nd_nourl,
       pg_temp.mk('nd-off', 'tsoff', 'unknown', '1 second') AS nd_off \gset
SET ROLE outbox_relay;
SELECT is(outbox.next_due_ms(ARRAY['tl', 'ts']), 3000::bigint,
          'an unknown row of a target with a status URL due in 3 s comes before a pending row due in 60 s');
SELECT is(outbox.next_due_ms('{}'), 3000::bigint,
          'reconciliation is due whatever targets the relay has room for (claim_unknown is not per target)');
RESET ROLE;
UPDATE outbox.intents SET lease_owner = 'r9', lease_expires_at = now() + interval '5 seconds' WHERE id = :nd_unknown;
SET ROLE outbox_relay;
SELECT is(outbox.next_due_ms(ARRAY['tl', 'ts']), 5000::bigint,
          'an unknown row being checked is due when its lease ends (5 s), not before');
RESET ROLE;
UPDATE outbox.intents SET state = 'cancelled', lease_owner = NULL, lease_expires_at = NULL WHERE id = :nd_unknown;
SET ROLE outbox_relay;
SELECT is(outbox.next_due_ms(ARRAY['tl', 'ts']), 60000::bigint,
          'unknown rows of a target without a status URL, or of a disabled one, are never due (60 s: the pending row)');
RESET ROLE;
UPDATE outbox.intents SET state = 'cancelled' WHERE id IN (:nd_pending, :nd_nourl, :nd_off);

-- ---------------------------------------------------------------------------
-- claim_unknown
SELECT pg_temp.mk('cu-old', 'ts', 'unknown', '-3 minutes') AS cu_old,
       pg_temp.mk('cu-due', 'ts', 'unknown', '-1 minute') AS cu_due,
       pg_temp.mk('cu-later', 'ts', 'unknown', '1 hour') AS cu_later,
       pg_temp.mk('cu-nourl', 'tl', 'unknown', '-1 hour') AS cu_nourl,
       pg_temp.mk('cu-off', 'tsoff', 'unknown', '-1 hour') AS cu_off,
       pg_temp.mk('cu-pending', 'ts', 'pending', '-1 hour') AS cu_pending,
       pg_temp.mk('cu-leased', 'ts', 'unknown', '-1 hour') AS cu_leased,
       pg_temp.mk('cu-lapsed', 'ts', 'unknown', '-2 minutes') AS cu_lapsed \gset
UPDATE outbox.intents SET lease_owner = 'r2', lease_expires_at = now() + interval '10 seconds' WHERE id = :cu_leased;
UPDATE outbox.intents SET lease_owner = 'r2', lease_expires_at = now() - interval '1 second' WHERE id = :cu_lapsed;
UPDATE outbox.intents SET attempts = 3 WHERE id = :cu_old;
SET ROLE outbox_relay;
SELECT results_eq($$SELECT key, attempt, first_attempt_ms FROM outbox.claim_unknown('r1', 1, 20000)$$,
                  $$VALUES ('cu-old'::text, 3, (extract(epoch FROM now() - interval '1 minute') * 1000)::bigint)$$,
                  'claim_unknown: the limit, the oldest due first, with its attempt number and first attempt');
SELECT set_eq($$SELECT key FROM outbox.claim_unknown('r1', 10, 20000)$$, ARRAY['cu-due', 'cu-lapsed'],
              'claim_unknown: only due unknown rows of enabled targets with a status URL, not under a live lease');
SELECT is_empty($$SELECT * FROM outbox.claim_unknown('r3', 10, 20000)$$,
                'claim_unknown: rows just claimed are under a live lease: nothing for another relay');
RESET ROLE;
SELECT results_eq($$SELECT key COLLATE "default", state::text, attempts, lease_owner, lease_expires_at FROM outbox.intents
                     WHERE key IN ('cu-old', 'cu-due', 'cu-lapsed') ORDER BY key$$,
                  $$VALUES ('cu-due'::text, 'unknown'::text, 1, 'r1'::text, now() + interval '20 seconds'),
                           ('cu-lapsed', 'unknown', 1, 'r1', now() + interval '20 seconds'),
                           ('cu-old', 'unknown', 3, 'r1', now() + interval '20 seconds')$$,
                  'claimed unknown rows stay unknown with their attempt count, leased to the caller');
SELECT results_eq($$SELECT key COLLATE "default", state::text, lease_owner FROM outbox.intents
                     WHERE key IN ('cu-later', 'cu-nourl', 'cu-off', 'cu-pending', 'cu-leased') ORDER BY key$$,
                  $$VALUES ('cu-later'::text, 'unknown'::text, NULL::text), ('cu-leased', 'unknown', 'r2'),
                           ('cu-nourl', 'unknown', NULL), ('cu-off', 'unknown', NULL), ('cu-pending', 'pending', NULL)$$,
                  'rows not due, without a status URL, of a disabled target, not unknown, or leased: untouched');

-- the fence applies to a status check's outcome too
SET ROLE outbox_relay;
SELECT is(pg_temp.rec('r2', :cu_due, 1, 'succeeded', 'reconciled_executed', 200), 0,
          'record of a status check by a relay that does not hold it: 0 rows');
SELECT is(pg_temp.rec('r1', :cu_due, 1, 'succeeded', 'reconciled_executed', 200), 1,
          'record of a status check by its holder: 1 row');
RESET ROLE;
SELECT is(pg_temp.row_of('cu-due'), 'succeeded 1 - from r1', 'the holder''s answer is applied');
UPDATE outbox.intents SET state = 'cancelled', lease_owner = NULL, lease_expires_at = NULL WHERE key LIKE 'cu-%';

-- ---------------------------------------------------------------------------
-- record (13 arrays): the fence
SELECT pg_temp.mk('rf-1', 'tl') AS rf_1 \gset
SET ROLE outbox_relay;
SELECT results_eq($$SELECT key, attempt FROM outbox.claim_due('r1', ARRAY['tl'], ARRAY[1], 1, 30000)$$,
                  $$VALUES ('rf-1'::text, 1)$$, '(r1 claims rf-1, attempt 1)');
SELECT is(pg_temp.rec('r2', :rf_1, 1, 'succeeded', 'succeeded', 200, 'by r2'), 0,
          'record by a relay that does not hold the lease: 0 rows');
RESET ROLE;
SELECT results_eq($$SELECT state::text, attempts, lease_owner, lease_expires_at, response_status, response_body, last_error
                      FROM outbox.intents WHERE key = 'rf-1'$$,
                  $$VALUES ('in_flight'::text, 1, 'r1'::text, now() + interval '30 seconds', NULL::int, NULL::text, NULL::text)$$,
                  'wrong owner: the intent is unchanged (state, lease, response, error)');
SET ROLE outbox_relay;
SELECT is(pg_temp.rec('r1', :rf_1, 2, 'failed', 'permanent_failure', 400, 'attempt 2'), 0,
          'record by the holder for another attempt number: 0 rows');
SELECT is(pg_temp.rec('r1', :rf_1, 0, 'pending', 'not_sent'), 0,
          'record by the holder for an earlier attempt number: 0 rows');
RESET ROLE;
SELECT results_eq($$SELECT state::text, attempts, lease_owner, lease_expires_at, response_status, response_body, last_error
                      FROM outbox.intents WHERE key = 'rf-1'$$,
                  $$VALUES ('in_flight'::text, 1, 'r1'::text, now() + interval '30 seconds', NULL::int, NULL::text, NULL::text)$$,
                  'wrong attempt: the intent is unchanged');
SELECT results_eq($$SELECT relay, attempt, class::text, http_status, response_body, key_sent, recorded
                      FROM outbox.attempts WHERE intent_id = pg_temp.id('rf-1') ORDER BY id$$,
                  $$VALUES ('r2'::text, 1, 'succeeded'::text, 200, 'by r2'::text, true, false),
                           ('r1', 2, 'permanent_failure', 400, 'attempt 2', true, false),
                           ('r1', 0, 'not_sent', NULL, NULL, true, false)$$,
                  'fenced-out outcomes are history all the same: recorded = false, key_sent kept');
SET ROLE outbox_relay;
SELECT is(pg_temp.rec('r1', :rf_1, 1, 'succeeded', 'succeeded', 201, '{"ok": 1}', false), 1,
          'record by the holder for its attempt: 1 row');
RESET ROLE;
SELECT results_eq($$SELECT state::text, attempts, lease_owner, lease_expires_at, response_status, response_body, last_error
                      FROM outbox.intents WHERE key = 'rf-1'$$,
                  $$VALUES ('succeeded'::text, 1, NULL::text, NULL::timestamptz, 201, '{"ok": 1}'::text, 'from r1'::text)$$,
                  'the holder''s outcome: state, response, error, lease cleared');
SELECT results_eq($$SELECT relay, attempt, key_sent, recorded FROM outbox.attempts WHERE intent_id = pg_temp.id('rf-1') ORDER BY id DESC LIMIT 1$$,
                  $$VALUES ('r1'::text, 1, false, true)$$, 'its history row: recorded = true, key_sent as sent');
SET ROLE outbox_relay;
SELECT is(pg_temp.rec('r1', :rf_1, 1, 'failed', 'permanent_failure', 500), 0,
          'the same outcome written twice (a retried record): 0 rows the second time');
RESET ROLE;
SELECT is(pg_temp.row_of('rf-1'), 'succeeded 1 - from r1', 'a final state is never overwritten');
SELECT is((SELECT count(*)::int FROM outbox.attempts WHERE intent_id = :rf_1), 5, 'every call left one history row (5)');

-- a batch: each outcome fenced on its own; one of an intent deleted meanwhile is skipped
SELECT pg_temp.mk('rf-2', 'tl') AS rf_2, pg_temp.mk('rf-3', 'tl') AS rf_3, pg_temp.mk('rf-4', 'tl') AS rf_4 \gset
SET ROLE outbox_relay;
SELECT set_eq($$SELECT key FROM outbox.claim_due('r1', ARRAY['tl'], ARRAY[3], 3, 30000)$$, ARRAY['rf-2', 'rf-3', 'rf-4'],
              '(r1 claims rf-2, rf-3, rf-4)');
RESET ROLE;
DELETE FROM outbox.intents WHERE id = :rf_4;
SET ROLE outbox_relay;
SELECT is(outbox.record('r1', ARRAY[:rf_2, :rf_3, :rf_4]::bigint[], ARRAY[1, 2, 1],
                        ARRAY['succeeded', 'succeeded', 'succeeded']::outbox.intent_state[], ARRAY[NULL, NULL, NULL]::int[],
                        ARRAY[false, false, false], ARRAY['succeeded', 'succeeded', 'succeeded']::outbox.attempt_class[],
                        ARRAY[true, true, true], ARRAY[200, 200, 200], ARRAY[NULL, NULL, NULL]::text[], ARRAY[1, 1, 1],
                        ARRAY['a', 'b', 'c'], ARRAY[true, true, true]),
          1, 'a batch of three: one applied, one fenced out (attempt 2), one of a deleted intent');
RESET ROLE;
SELECT results_eq($$SELECT i.key COLLATE "default", i.state::text, a.recorded FROM outbox.intents i JOIN outbox.attempts a ON a.intent_id = i.id
                     WHERE i.key IN ('rf-2', 'rf-3') ORDER BY i.key$$,
                  $$VALUES ('rf-2'::text, 'succeeded'::text, true), ('rf-3', 'in_flight', false)$$,
                  'the batch: rf-2 applied, rf-3 unchanged with its history row unrecorded');
SELECT is((SELECT count(*)::int FROM outbox.attempts WHERE intent_id = :rf_4), 0,
          'no history row for the deleted intent (it would break the reference)');
UPDATE outbox.intents SET state = 'cancelled', lease_owner = NULL, lease_expires_at = NULL WHERE key LIKE 'rf-%';

-- ---------------------------------------------------------------------------
-- renew_leases
SELECT pg_temp.mk('rn-1', 'tl', 'pending', '-3 minutes') AS rn_1, pg_temp.mk('rn-2', 'tl', 'pending', '-2 minutes') AS rn_2,
       pg_temp.mk('rn-other', 'tl', 'pending', '-1 minute') AS rn_other,
       pg_temp.mk('rn-unknown', 'ts', 'unknown', '-1 minute') AS rn_unknown \gset
SET ROLE outbox_relay;
SELECT set_eq($$SELECT key FROM outbox.claim_due('r1', ARRAY['tl'], ARRAY[2], 2, 1000)$$, ARRAY['rn-1', 'rn-2'],
              '(r1 claims rn-1 and rn-2 for 1 s)');
SELECT set_eq($$SELECT key FROM outbox.claim_due('r2', ARRAY['tl'], ARRAY[1], 1, 1000)$$, ARRAY['rn-other'],
              '(r2 claims rn-other for 1 s)');
SELECT set_eq($$SELECT key FROM outbox.claim_unknown('r1', 1, 1000)$$, ARRAY['rn-unknown'],
              '(r1 claims rn-unknown for a status check, 1 s)');
SELECT results_eq(format('SELECT * FROM outbox.renew_leases(''r1'', ARRAY[%s, %s, %s, %s, %s, -5]::bigint[], 45000) ORDER BY 1',
                         :rn_1, :rn_2, :rn_other, :rn_unknown, :rn_1),
                  format('VALUES (%s::bigint), (%s)', :rn_1, :rn_2),
                  'renew_leases answers the caller''s in-flight rows, each once');
RESET ROLE;
SELECT results_eq($$SELECT key COLLATE "default", lease_owner, lease_expires_at FROM outbox.intents
                     WHERE key LIKE 'rn-%' ORDER BY key$$,
                  $$VALUES ('rn-1'::text, 'r1'::text, now() + interval '45 seconds'),
                           ('rn-2', 'r1', now() + interval '45 seconds'),
                           ('rn-other', 'r2', now() + interval '1 second'),
                           ('rn-unknown', 'r1', now() + interval '1 second')$$,
                  'only they get the new lease: another relay''s row and a status check''s lease are not extended');
SET ROLE outbox_relay;
SELECT is_empty(format('SELECT * FROM outbox.renew_leases(''r3'', ARRAY[%s, %s]::bigint[], 45000)', :rn_1, :rn_2),
                'renew_leases by a relay that holds none of them: nothing');
RESET ROLE;
UPDATE outbox.intents SET state = 'cancelled', lease_owner = NULL, lease_expires_at = NULL WHERE key LIKE 'rn-%';

-- ---------------------------------------------------------------------------
-- release
SELECT pg_temp.mk('rl-first', 'tl', 'pending', '-3 minutes') AS rl_first,
       pg_temp.mk('rl-third', 'tl', 'pending', '-2 minutes') AS rl_third,
       pg_temp.mk('rl-other', 'tl', 'pending', '-1 minute') AS rl_other \gset
UPDATE outbox.intents SET attempts = 2, first_attempt_at = now() - interval '10 minutes' WHERE id = :rl_third;
SET ROLE outbox_relay;
SELECT results_eq($$SELECT key, attempt FROM outbox.claim_due('r1', ARRAY['tl'], ARRAY[2], 2, 30000) ORDER BY key$$,
                  $$VALUES ('rl-first'::text, 1), ('rl-third', 3)$$, '(r1 claims rl-first, attempt 1, and rl-third, attempt 3)');
SELECT results_eq($$SELECT key FROM outbox.claim_due('r2', ARRAY['tl'], ARRAY[1], 1, 30000)$$,
                  $$VALUES ('rl-other'::text)$$, '(r2 claims rl-other)');
SELECT is(outbox.release('r1', ARRAY[:rl_first, :rl_third]::bigint[], ARRAY[2, 2]), 0,
          'release with the wrong attempt numbers: 0');
SELECT is(outbox.release('r1', ARRAY[:rl_other]::bigint[], ARRAY[1]), 0, 'release of another relay''s row: 0');
SELECT is(outbox.release('r1', ARRAY[:rl_first, :rl_third, :rl_other]::bigint[], ARRAY[1, 3, 1]), 2,
          'release of two own rows and one of another relay: exactly 2');
RESET ROLE;
SELECT results_eq($$SELECT key COLLATE "default", state::text, attempts, first_attempt_at, lease_owner, lease_expires_at, next_attempt_at
                      FROM outbox.intents WHERE key LIKE 'rl-%' ORDER BY key$$,
                  $$VALUES ('rl-first'::text, 'pending'::text, 0, NULL::timestamptz, NULL::text, NULL::timestamptz, now()),
                           ('rl-other', 'in_flight', 1, now(), 'r2', now() + interval '30 seconds', now() - interval '1 minute'),
                           ('rl-third', 'pending', 2, now() - interval '10 minutes', NULL, NULL, now())$$,
                  'released rows: pending, due now, the attempt given back (and the first attempt time when it was the first); the other relay''s row untouched');
SET ROLE outbox_relay;
SELECT is(outbox.release('r1', ARRAY[:rl_first]::bigint[], ARRAY[1]), 0, 'releasing a released row again: 0');
RESET ROLE;

-- ---------------------------------------------------------------------------
-- take_over: expired leases only, never a row the caller still holds
SELECT pg_temp.mk('to-held', 'tl', 'pending', '-3 minutes') AS to_held,
       pg_temp.mk('to-dead', 'tl', 'pending', '-2 minutes') AS to_dead,
       pg_temp.mk('to-live', 'tl', 'pending', '-1 minute') AS to_live \gset
SET ROLE outbox_relay;
SELECT is((SELECT count(*)::int FROM outbox.claim_due('r1', ARRAY['tl'], ARRAY[3], 3, 30000)), 3, '(r1 claims three rows)');
RESET ROLE;
UPDATE outbox.intents SET lease_expires_at = now() - interval '1 second' WHERE key IN ('to-held', 'to-dead');
SET ROLE outbox_relay;
SELECT results_eq(format('SELECT key, attempt, previous_owner FROM outbox.take_over(''r1'', 10, 20000, ARRAY[%s]::bigint[])', :to_held),
                  $$VALUES ('to-dead'::text, 1, 'r1'::text)$$,
                  'take_over: the expired row it does not hold, not the one it holds, not a live lease');
RESET ROLE;
SELECT results_eq($$SELECT key COLLATE "default", lease_owner, lease_expires_at FROM outbox.intents WHERE key LIKE 'to-%' ORDER BY key$$,
                  $$VALUES ('to-dead'::text, 'r1'::text, now() + interval '20 seconds'),
                           ('to-held', 'r1', now() - interval '1 second'),
                           ('to-live', 'r1', now() + interval '30 seconds')$$,
                  'the taken-over row has the new lease; the others are untouched');
UPDATE outbox.intents SET state = 'cancelled', lease_owner = NULL, lease_expires_at = NULL WHERE key LIKE 'to-%';

-- ---------------------------------------------------------------------------
-- claim_due: the gates (a circuit, a pause, a rate limit) shrink the rooms
INSERT INTO outbox.targets (name, url) VALUES ('gc', 'https://gc.test/hook'), ('gp', 'https://gp.test/hook');
INSERT INTO outbox.targets (name, url, rate_limit_per_s) VALUES ('gr', 'https://gr.test/hook', 200);
SELECT pg_temp.mk(t || '-' || n, t, 'pending', -n * interval '1 second')
  FROM unnest(ARRAY['gc', 'gp', 'gr']) t, generate_series(1, 8) n \g /dev/null
SET ROLE outbox_relay;
SELECT results_eq($$SELECT circuit, gate_ms FROM outbox.target_event('r1', 'gc', 'open', '10 failures', 0)$$,
                  $$VALUES ('open'::text, 1000::bigint)$$, '(gc''s circuit opens: a probe in 1 s)');
SELECT is_empty($$SELECT * FROM outbox.claim_due('r1', ARRAY['gc'], ARRAY[10], 10, 30000)$$,
                'claim_due: an open circuit before its probe time: nothing');
RESET ROLE;
UPDATE outbox.target_state SET probe_at = now() - interval '1 ms' WHERE target = 'gc';
SET ROLE outbox_relay;
SELECT results_eq($$SELECT key, probe FROM outbox.claim_due('r1', ARRAY['gc'], ARRAY[10], 10, 30000)$$,
                  $$VALUES ('gc-8'::text, true)$$, 'claim_due: at the probe time one row, the oldest, flagged probe');
SELECT results_eq($$SELECT gate_ms FROM outbox.target_event('r1', 'gp', 'pause', 'HTTP 429', 3000)$$,
                  $$VALUES (3000::bigint)$$, '(gp is paused for 3 s)');
SELECT is_empty($$SELECT * FROM outbox.claim_due('r1', ARRAY['gp'], ARRAY[10], 10, 30000)$$,
                'claim_due: a paused target: nothing');
SELECT is((SELECT count(*)::int FROM outbox.claim_due('r1', ARRAY['gr'], ARRAY[100], 100, 30000)), 5,
          'claim_due: a rate limit of 200/s: a bucket of 5 rows, not the room of 100');
SELECT is_empty($$SELECT * FROM outbox.claim_due('r2', ARRAY['gr'], ARRAY[100], 100, 30000)$$,
                'claim_due: the bucket spent, another relay in the same instant gets nothing');
RESET ROLE;
SELECT results_eq($$SELECT target COLLATE "default", count(*)::int FROM outbox.intents WHERE target IN ('gc', 'gp', 'gr') AND state = 'in_flight'
                     GROUP BY target ORDER BY target$$,
                  $$VALUES ('gc'::text, 1), ('gr', 5)$$, 'in flight: the probe and the bucket, nothing of the paused target');

SELECT * FROM finish();
ROLLBACK;
