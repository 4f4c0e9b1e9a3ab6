-- 12_flow_control: the shared half of flow control (migrations/0009_flow_control.sql).
--   target_state        one row per target, made by a trigger; enabling a target closes its circuit
--   claim               an open circuit claims nothing until its probe time, then exactly one row (the
--                       probe, returned with probe = true) for one relay; a pause claims nothing; a
--                       rate limit hands out tokens for exactly the rows claimed (a bucket of 2.5 %)
--   next_due_ms(t[])    only the targets asked for, enabled ones, and only once their gate opens
--   target_event        open (from closed only), probe_failed (owner only, interval doubles up to
--                       circuit_probe_max_ms), probe_succeeded (owner only), gone (disables the target),
--                       pause; unknown events are refused
--   stuck               pending rows of a target whose circuit is open: "target unavailable since …"
--   defaults            retry_for 3 days, max_attempts NULL, max_in_flight 1024, threshold 10
-- One transaction: now() is one instant; times are set relative to it.
BEGIN;
SELECT plan(49);

INSERT INTO outbox.targets (name, url) VALUES ('fa', 'https://fa.test/hook'), ('fb', 'https://fb.test/hook');
INSERT INTO outbox.targets (name, url, rate_limit_per_s) VALUES ('fr', 'https://fr.test/hook', 200);
INSERT INTO outbox.targets (name, url, enabled) VALUES ('fd', 'https://fd.test/hook', false);
SELECT count(*) FROM (SELECT outbox.enqueue(t || '-' || n, t, jsonb_build_object('n', n))
                        FROM unnest(ARRAY['fa', 'fb', 'fr']) t, generate_series(1, 30) n) x \g /dev/null
INSERT INTO outbox.intents (key, target, payload, fingerprint) VALUES ('fd-1', 'fd', '{}', '\x00');
-- due a second ago, so that the oldest-first order is defined
UPDATE outbox.intents SET next_attempt_at = now() - interval '1 second' - (substring(key from '[0-9]+$')::int * interval '1 ms');

-- ---------------------------------------------------------------------------
-- defaults and target_state rows
SELECT results_eq($$SELECT retry_for, max_attempts, max_in_flight, circuit_failure_threshold, circuit_probe_max_ms, rate_limit_per_s
                      FROM outbox.targets WHERE name = 'fa'$$,
                  $$VALUES (interval '3 days', NULL::integer, 1024, 10, 30000, NULL::real)$$,
                  'defaults: retry for 3 days, no cap on attempts, 1024 in flight, threshold 10, probes up to 30 s, no rate limit');
SELECT is((SELECT count(*)::int FROM outbox.target_state), 4, 'every target has a target_state row');
SELECT is((SELECT array_agg(DISTINCT circuit) FROM outbox.target_state), ARRAY['closed'], 'new targets start closed');

-- ---------------------------------------------------------------------------
-- next_due_ms with targets
SELECT is(outbox.next_due_ms(ARRAY['fa']), 0::bigint, 'a due row of a target asked for: 0');
SELECT is(outbox.next_due_ms(ARRAY['fd']), NULL::bigint, 'a disabled target''s backlog is not due for anyone: NULL');
SELECT is(outbox.next_due_ms(ARRAY[]::text[]), NULL::bigint,
          'no target with room (all at their cap, or disabled): NULL, not 0 (the busy loop of the old form)');

-- ---------------------------------------------------------------------------
-- an open circuit
SELECT results_eq($$SELECT circuit, gate_ms FROM outbox.target_event('r1', 'fa', 'open', '10 failures in a row; last: refused', 0)$$,
                  $$VALUES ('open'::text, 1000::bigint)$$, 'open: the first probe in 1 s');
SELECT is((SELECT circuit_reason FROM outbox.target_state WHERE target = 'fa'), '10 failures in a row; last: refused',
          'the reason is kept');
SELECT is_empty($$SELECT * FROM outbox.claim('r1', ARRAY['fa'], ARRAY[10], 10, 30000)$$,
                'open, before the probe time: nothing is claimed');
SELECT is(outbox.next_due_ms(ARRAY['fa']), 1000::bigint, 'next_due_ms: the probe time, not the due rows');
SELECT is((SELECT count(*)::int FROM outbox.claim('r1', ARRAY['fa', 'fb'], ARRAY[5, 5], 10, 30000) WHERE target = 'fb'), 5,
          'another target is claimed as usual beside an open one');
SELECT is((SELECT key FROM outbox.stuck WHERE target = 'fa' ORDER BY key LIMIT 1), 'fa-1', 'stuck lists the open target''s pending rows');
SELECT matches((SELECT reason FROM outbox.stuck WHERE key = 'fa-1'),
               '^target unavailable since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(circuit open: 10 failures in a row; last: refused\)$',
               'stuck: "target unavailable since …" with the circuit and its reason');

UPDATE outbox.target_state SET probe_at = now() - interval '1 ms' WHERE target = 'fa';
CREATE TEMP TABLE p1 AS SELECT * FROM outbox.claim('r1', ARRAY['fa'], ARRAY[10], 10, 30000);
SELECT results_eq($$SELECT key, probe FROM p1$$, $$VALUES ('fa-30'::text, true)$$,
                  'at the probe time: one row, the oldest due, flagged probe');
SELECT results_eq($$SELECT circuit, probe_owner, probe_expires_at FROM outbox.target_state WHERE target = 'fa'$$,
                  $$VALUES ('half_open'::text, 'r1'::text, now() + interval '30 seconds')$$,
                  'half_open, owned by the prober until its lease ends');
SELECT is_empty($$SELECT * FROM outbox.claim('r2', ARRAY['fa'], ARRAY[10], 10, 30000)$$,
                'while a probe is out, no other relay claims (not even a probe)');
SELECT is(outbox.next_due_ms(ARRAY['fa']), 30000::bigint, 'next_due_ms while half_open: the probe''s lease');

SELECT results_eq($$SELECT circuit FROM outbox.target_event('r2', 'fa', 'probe_failed', 'not mine', 0)$$,
                  $$VALUES ('half_open'::text)$$, 'probe_failed from a relay without the probe changes nothing');
SELECT results_eq($$SELECT circuit, gate_ms FROM outbox.target_event('r1', 'fa', 'probe_failed', 'HTTP 503', 0)$$,
                  $$VALUES ('open'::text, 2000::bigint)$$, 'probe_failed: open again, the interval doubled to 2 s');
UPDATE outbox.target_state SET probe_interval_ms = 20000 WHERE target = 'fa';
UPDATE outbox.target_state SET circuit = 'half_open', probe_owner = 'r1', probe_expires_at = now() + interval '1 s' WHERE target = 'fa';
SELECT results_eq($$SELECT circuit, gate_ms FROM outbox.target_event('r1', 'fa', 'probe_failed', 'HTTP 503', 0)$$,
                  $$VALUES ('open'::text, 30000::bigint)$$, 'the interval stops at circuit_probe_max_ms (30 s)');
SELECT results_eq($$SELECT circuit FROM outbox.target_event('r1', 'fa', 'open', 'again', 0)$$,
                  $$VALUES ('open'::text)$$, 'open on an open circuit: no change ...');
SELECT is((SELECT probe_interval_ms FROM outbox.target_state WHERE target = 'fa'), 30000, '... the probe interval is kept');

UPDATE outbox.target_state SET circuit = 'half_open', probe_owner = 'r1', probe_expires_at = now() + interval '1 s' WHERE target = 'fa';
SELECT results_eq($$SELECT circuit FROM outbox.target_event('r2', 'fa', 'probe_succeeded', '', 0)$$,
                  $$VALUES ('half_open'::text)$$, 'probe_succeeded from another relay changes nothing');
SELECT results_eq($$SELECT circuit, gate_ms FROM outbox.target_event('r1', 'fa', 'probe_succeeded', '', 0)$$,
                  $$VALUES ('closed'::text, NULL::bigint)$$, 'probe_succeeded: closed');
SELECT is((SELECT count(*)::int FROM outbox.claim('r1', ARRAY['fa'], ARRAY[10], 10, 30000)), 10,
          'closed again: claimed as usual');
SELECT is((SELECT count(*)::int FROM outbox.stuck WHERE target = 'fa'), 0, 'nothing stuck once the circuit closed');

-- ---------------------------------------------------------------------------
-- a half-open probe whose relay died: another relay probes after the lease
UPDATE outbox.target_state SET circuit = 'half_open', probe_owner = 'dead', probe_expires_at = now() - interval '1 ms'
 WHERE target = 'fa';
SELECT results_eq($$SELECT count(*)::int, bool_and(probe) FROM outbox.claim('r2', ARRAY['fa'], ARRAY[10], 10, 30000)$$,
                  $$VALUES (1, true)$$, 'an expired probe: another relay sends the next probe');
SELECT is((SELECT probe_owner FROM outbox.target_state WHERE target = 'fa'), 'r2', 'and owns it');

-- ---------------------------------------------------------------------------
-- pause (Retry-After)
SELECT results_eq($$SELECT circuit, gate_ms FROM outbox.target_event('r1', 'fb', 'pause', 'HTTP 429', 3000)$$,
                  $$VALUES ('closed'::text, 3000::bigint)$$, 'pause: 3 s');
SELECT is_empty($$SELECT * FROM outbox.claim('r1', ARRAY['fb'], ARRAY[10], 10, 30000)$$, 'a paused target is not claimed');
SELECT is(outbox.next_due_ms(ARRAY['fb']), 3000::bigint, 'next_due_ms: the end of the pause');
SELECT results_eq($$SELECT gate_ms FROM outbox.target_event('r1', 'fb', 'pause', 'HTTP 429', 1000)$$,
                  $$VALUES (3000::bigint)$$, 'a shorter pause does not cut a longer one');
-- a target with a gate and nothing pending is not due (the relay with --exit-when-idle waited forever)
UPDATE outbox.target_state SET paused_until = now() - interval '1 second' WHERE target = 'fd';
UPDATE outbox.targets SET enabled = true WHERE name = 'fd';
UPDATE outbox.intents SET state = 'succeeded' WHERE target = 'fd';
SELECT is(outbox.next_due_ms(ARRAY['fd']), outbox.next_due_ms(ARRAY[]::text[]),
          'a pause that ended, no pending row: the target adds nothing due (only the other rows'' times remain)');
UPDATE outbox.targets SET enabled = false WHERE name = 'fd';

-- ---------------------------------------------------------------------------
-- rate limit: 200/s, a bucket of 5, claims of at least 2
SELECT is((SELECT count(*)::int FROM outbox.claim('r1', ARRAY['fr'], ARRAY[100], 100, 30000)), 5,
          'a full bucket: 5 rows (2.5 % of the rate), not the room of 100');
SELECT is((SELECT tokens FROM outbox.target_state WHERE target = 'fr'), 0::double precision, 'the tokens are spent');
SELECT is_empty($$SELECT * FROM outbox.claim('r2', ARRAY['fr'], ARRAY[100], 100, 30000)$$,
                'another relay in the same instant: no tokens, nothing');
SELECT is(outbox.next_due_ms(ARRAY['fr']), 10::bigint, 'next_due_ms: when 2 tokens are back (10 ms at 200/s)');
UPDATE outbox.target_state SET tokens = 4.5, tokens_at = now() WHERE target = 'fr';
SELECT is((SELECT count(*)::int FROM outbox.claim('r2', ARRAY['fr'], ARRAY[3], 100, 30000)), 3, 'the room still caps a claim');
SELECT is((SELECT tokens FROM outbox.target_state WHERE target = 'fr'), 1.5::double precision,
          'tokens are taken for the rows claimed only');

-- ---------------------------------------------------------------------------
-- 410 Gone
SELECT results_eq($$SELECT circuit FROM outbox.target_event('r1', 'fb', 'gone', 'HTTP 410 Gone', 0)$$,
                  $$VALUES ('open'::text)$$, 'gone: open');
SELECT is((SELECT enabled FROM outbox.targets WHERE name = 'fb'), false, 'gone: the target is disabled');
UPDATE outbox.targets SET enabled = true WHERE name = 'fb';
SELECT results_eq($$SELECT circuit, paused_until FROM outbox.target_state WHERE target = 'fb'$$,
                  $$VALUES ('closed'::text, NULL::timestamptz)$$, 'an admin enables it: closed, no pause');

SELECT throws_ok($$SELECT * FROM outbox.target_event('r1', 'fb', 'explode', '', 0)$$, '22023',
                 'outbox.target_event: unknown event ''explode''', 'an unknown event is refused');

-- roles: the relay reports and asks; the application does neither
SET ROLE outbox_relay;
SELECT lives_ok($$SELECT * FROM outbox.target_event('r1', 'fa', 'pause', 'x', 1)$$, 'outbox_relay may report a target event');
SELECT lives_ok($$SELECT outbox.next_due_ms(ARRAY['fa'])$$, 'outbox_relay may ask next_due_ms(targets)');
SELECT lives_ok($$SELECT count(*) FROM outbox.target_state$$, 'outbox_relay may read target_state');
RESET ROLE;
SET ROLE outbox_app;
SELECT throws_ok($$SELECT * FROM outbox.target_event('r1', 'fa', 'open', 'x', 0)$$, '42501',
                 'permission denied for function target_event', 'outbox_app cannot report target events');
SELECT throws_ok($$UPDATE outbox.target_state SET circuit = 'closed'$$, '42501',
                 'permission denied for table target_state', 'outbox_app cannot write target_state');
RESET ROLE;
SET ROLE outbox_operator;
SELECT throws_ok($$UPDATE outbox.target_state SET circuit = 'closed'$$, '42501',
                 'permission denied for table target_state', 'outbox_operator reads target_state, cannot write it');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
