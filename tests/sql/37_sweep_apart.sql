-- 37_sweep_apart: outbox.claim_due's p_scan (0052, issue 40), as the relay's login calls it.
--   refused        a p_scan other than auto, floor or sweep: 22023, naming the three
--   floor          a row behind the floor and its 2 s window is not taken by a floor claim,
--                  not even once the sweep period has passed (the sweep connection takes it)
--   sweep          takes that row; leaves a row younger than 2 s to the floor claims; does
--                  not read or write the session's floors
--   auto           the five-argument claim_due without the setting: a floor claim that
--                  sweeps once the period has passed, as 0051
--   the setting    outbox.claim_scan says the five-argument call's scan (the relay's
--                  statement sets it); the six-argument form puts it back
--   next_due_ms    a session that reuses the lease (the relay's main one, which no longer
--                  takes over) looks for expired leases 2 s back; the exact question all
--   gates          a sweep leaves a gated target (here rate-limited) out, without locking
--                  its gate: it does not wait while another claim holds it; the floor
--                  claims sweep that target in line once its period has passed
-- Nothing runs in one wrapping transaction: each statement is a claim of its own, with its
-- own now(), as the relay's are; where two statements must share a now(), they are one
-- transaction.
SELECT plan(23);

\ir lib/sessions.sql

INSERT INTO outbox.targets (name, url) VALUES ('t1', 'https://t1.test/hook');
INSERT INTO outbox.targets (name, url, rate_limit_per_s) VALUES ('tr', 'https://tr.test/hook', 100);

-- a row made due a minute ago: one whose transaction committed long after its start
CREATE FUNCTION pg_temp.due_long_ago(k text, t text) RETURNS void LANGUAGE sql AS $$
    SELECT outbox.enqueue(k, t, '{}');
    UPDATE outbox.intents SET next_attempt_at = now() - interval '1 minute' WHERE key = k;
$$;
-- the session's floor of target t with its last sweep an hour ago (over) or now (not over)
CREATE FUNCTION pg_temp.sweep_period(over boolean, t text DEFAULT 't1') RETURNS void LANGUAGE sql AS $$
    SELECT set_config('outbox.claim_floor',
                      jsonb_set(current_setting('outbox.claim_floor')::jsonb, ARRAY[t, 's'],
                                to_jsonb(CASE WHEN over THEN now() - interval '1 hour' ELSE now() END))::text,
                      false);
$$;

SET ROLE outbox_relay;
SELECT throws_ok($$SELECT * FROM outbox.claim_due('r1', '{t1}', '{10}', 10, 30000, 'nope')$$, '22023',
                 'claim_due: the scan must be ''auto'', ''floor'' or ''sweep'', not ''nope''',
                 'an unknown p_scan is refused, naming the three');
SELECT throws_ok($$SELECT * FROM outbox.claim_due('r1', '{t1}', '{10}', 10, 30000, NULL)$$, '22023',
                 'claim_due: the scan must be ''auto'', ''floor'' or ''sweep'', not NULL',
                 'so is NULL');
RESET ROLE;

-- floor: the first claim of the session has no floor and scans from the start
SELECT outbox.enqueue('fresh-0', 't1', '{}');
SET ROLE outbox_relay;
SELECT results_eq($$SELECT key FROM outbox.claim_due('r1', '{t1}', '{10}', 10, 30000, 'floor')$$,
                  ARRAY['fresh-0'], 'floor: the session''s first claim takes the due row');
RESET ROLE;
SELECT pg_temp.due_long_ago('late-1', 't1');
SET ROLE outbox_relay;
SELECT is_empty($$SELECT * FROM outbox.claim_due('r1', '{t1}', '{10}', 10, 30000, 'floor')$$,
                'floor: a row due a minute ago, behind the floor and its window, is not taken');
SELECT pg_temp.sweep_period(true);
SELECT is_empty($$SELECT * FROM outbox.claim_due('r1', '{t1}', '{10}', 10, 30000, 'floor')$$,
                'floor: nor once the sweep period has passed (no periodic sweep)');

-- sweep
SELECT pg_temp.sweep_period(true);
SELECT current_setting('outbox.claim_floor') AS floors_before \gset
SELECT results_eq($$SELECT key, attempt FROM outbox.claim_due('r1', '{t1}', '{10}', 10, 30000, 'sweep')$$,
                  $$VALUES ('late-1'::text, 1)$$, 'sweep: takes the row behind the floor');
SELECT is(current_setting('outbox.claim_floor'), :'floors_before',
          'sweep: the session''s floors are neither read nor written');
RESET ROLE;
BEGIN; -- the enqueue and the sweep share a now(): the row is due exactly then
SELECT outbox.enqueue('fresh-2', 't1', '{}');
SET LOCAL ROLE outbox_relay;
SELECT is_empty($$SELECT * FROM outbox.claim_due('r1', '{t1}', '{10}', 10, 30000, 'sweep')$$,
                'sweep: a row due less than 2 s ago is left to the floor claims');
COMMIT;
SET ROLE outbox_relay;
SELECT results_eq($$SELECT key FROM outbox.claim_due('r1', '{t1}', '{10}', 10, 30000, 'floor')$$,
                  ARRAY['fresh-2'], 'which take it');

-- auto: the five-argument form
RESET ROLE;
SELECT pg_temp.due_long_ago('late-3', 't1');
SET ROLE outbox_relay;
BEGIN; -- the period's start and the claim share a now()
SELECT pg_temp.sweep_period(false);
SELECT is_empty($$SELECT * FROM outbox.claim_due('r1', '{t1}', '{10}', 10, 30000)$$,
                'auto: before the sweep period is over, a row behind the floor waits');
COMMIT;
SELECT pg_temp.sweep_period(true);
SELECT results_eq($$SELECT key FROM outbox.claim_due('r1', '{t1}', '{10}', 10, 30000)$$,
                  ARRAY['late-3'], 'auto: once it is over, the claim sweeps and takes it (as 0051)');
RESET ROLE;

-- the setting: what the relay's statement sets before the five-argument call
RESET ROLE;
SELECT pg_temp.due_long_ago('late-4', 't1');
SET ROLE outbox_relay;
SELECT set_config('outbox.claim_scan', 'floor', false) \g /dev/null
SELECT pg_temp.sweep_period(true);
SELECT is_empty($$SELECT * FROM outbox.claim_due('r1', '{t1}', '{10}', 10, 30000)$$,
                'outbox.claim_scan floor: the five-argument claim does not sweep');
SELECT set_config('outbox.claim_scan', 'sweep', false) \g /dev/null
SELECT results_eq($$SELECT key FROM outbox.claim_due('r1', '{t1}', '{10}', 10, 30000)$$,
                  ARRAY['late-4'], 'outbox.claim_scan sweep: it sweeps');
SELECT set_config('outbox.claim_scan', 'floor', false) \g /dev/null
SELECT is_empty($$SELECT * FROM outbox.claim_due('r1', '{t1}', '{10}', 10, 30000, 'sweep')$$,
                'the six-argument form, sweep: nothing more behind the floor');
SELECT is(current_setting('outbox.claim_scan'), 'floor',
          'and it puts the session''s setting back');
SELECT set_config('outbox.claim_scan', '', false) \g /dev/null
RESET ROLE;

-- gates: a sweep leaves a gated target to the floor claims
SET ROLE outbox_relay;
SELECT is_empty($$SELECT * FROM outbox.claim_due('r1', '{t1,tr}', '{10,10}', 20, 30000, 'floor')$$,
                'floor: the rate-limited target''s first claim in the session, nothing due');
RESET ROLE;
SELECT pg_temp.due_long_ago('gate-1', 'tr');
SELECT pg_temp.open('holder') \g /dev/null
SELECT dblink_exec('holder', 'BEGIN');
SELECT is((SELECT count(*)::int FROM dblink('holder', $$SELECT 1 FROM outbox.target_state
                                                        WHERE target = 'tr' FOR UPDATE$$) AS x(n int)), 1,
          'another session holds the rate-limited target''s gate');
SET ROLE outbox_relay;
SET lock_timeout = '2s';
SELECT is_empty($$SELECT * FROM outbox.claim_due('r1', '{t1,tr}', '{10,10}', 20, 30000, 'sweep')$$,
                'sweep: the gated target is left out, without waiting for its gate (lock_timeout 2 s)');
RESET lock_timeout;
RESET ROLE;
SELECT dblink_exec('holder', 'COMMIT') \g /dev/null
SET ROLE outbox_relay;
SELECT is_empty($$SELECT * FROM outbox.claim_due('r1', '{t1,tr}', '{10,10}', 20, 30000, 'sweep')$$,
                'sweep: nor once the gate is free: a gated target is the floor claims''');
BEGIN; -- the period's start and the claim share a now()
SELECT pg_temp.sweep_period(false, 'tr');
SELECT is_empty($$SELECT * FROM outbox.claim_due('r1', '{t1,tr}', '{10,10}', 20, 30000, 'floor')$$,
                'floor: a gated target''s row behind the floor waits for its sweep period');
COMMIT;
SELECT pg_temp.sweep_period(true, 'tr');
SELECT results_eq($$SELECT key FROM outbox.claim_due('r1', '{t1,tr}', '{10,10}', 20, 30000, 'floor')$$,
                  ARRAY['gate-1'], 'floor: then it sweeps the gated target in line and takes the row');
RESET ROLE;

-- next_due_ms: the relay's main session takes over nothing now (its sweep connection does),
-- so it has no take-over floor to look back from
RESET ROLE;
SELECT outbox.enqueue('ghost-1', 't1', '{}');
UPDATE outbox.intents SET state = 'in_flight', attempts = 1, lease_owner = 'ghost',
                          lease_expires_at = now() - interval '1 hour'
 WHERE key = 'ghost-1';
SET ROLE outbox_relay;
SELECT set_config('outbox.lease_reuse', 'on', false) \g /dev/null
SELECT cmp_ok(outbox.next_due_ms(ARRAY['t1']), '>', 0::bigint,
              'next_due_ms, lease reused (the relay''s main session): looks 2 s back, an hour-old expired lease is the take-over''s');
SELECT set_config('outbox.lease_reuse', 'off', false) \g /dev/null
SELECT is(outbox.next_due_ms(ARRAY['t1']), 0::bigint,
          'next_due_ms, the exact question (--exit-when-idle): reads every lease, that one is due now');
RESET ROLE;

SELECT * FROM finish();
