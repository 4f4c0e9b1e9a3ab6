-- 11_target_health: outbox.target_health on a small crafted dataset (migrations/0007_compensation_health.sql,
-- recreated with the circuit in 0009_flow_control.sql).
--   live rows by state           pending, in_flight, unknown, awaiting_approval: all of them
--   final rows                   succeeded/failed/cancelled that settled in the last 5 minutes only
--   attempts                     delivery classes in the last 5 minutes: count, success ratio, p95 latency
--                                (percentile_cont, to 0.1 ms); reconciliations and people's decisions do not count
--   oldest_pending_age           how long the oldest *due* pending row has waited; 0 when none is due
--   circuit                      closed, open (since, reason, next probe) or half_open, from target_state;
--                                paused_until only while a Retry-After pause lasts; rate_limit_per_s
--   an idle target               a row of zeros (NULL ratio and latency)
--   the relay's own functions    a claim + outbox.record show up at once (the view finds the attempts
--                                of the window through the intents changed in it: record sets updated_at)
--   access                       outbox_operator (and so outbox_admin) may read it; app and relay may not
-- Cost at scale (no Seq Scan on intents, under 500 ms over a million rows): tests/sql/scale_views.sh.
-- One transaction: now() is one instant, so every number is exact.
BEGIN;
SELECT plan(26);

INSERT INTO outbox.targets (name, url) VALUES ('h1', 'https://h1.test/hook');
INSERT INTO outbox.targets (name, url, rate_limit_per_s) VALUES ('h2', 'https://h2.test/hook', 50);
INSERT INTO outbox.targets (name, url) VALUES ('h3', 'https://h3.test/hook');
INSERT INTO outbox.targets (name, url, enabled) VALUES ('idle', 'https://idle.test/hook', false);

-- a row in a given state, last changed `ago` before now, due at now() + due
CREATE FUNCTION pg_temp.mk(tgt text, k text, st outbox.intent_state, ago interval DEFAULT '0', due interval DEFAULT '0')
RETURNS void LANGUAGE sql AS $$
    INSERT INTO outbox.intents (key, target, payload, fingerprint, state, next_attempt_at, lease_owner, lease_expires_at,
                                created_at, updated_at)
    VALUES (k, tgt, '{}', '\x00', st, now() + due,
            CASE WHEN st = 'in_flight' THEN 'r1' END, CASE WHEN st = 'in_flight' THEN now() + interval '30 s' END,
            now() - ago - interval '1 hour', now() - ago);
$$;
-- an attempts row for key k: attempt number n, class, latency, `ago` before now
CREATE FUNCTION pg_temp.att(k text, n int, cls outbox.attempt_class, latency int, ago interval) RETURNS void LANGUAGE sql AS $$
    INSERT INTO outbox.attempts (intent_id, attempt, relay, class, request_sent, latency_ms, at)
    SELECT id, n, 'r1', cls, cls <> 'not_sent', latency, now() - ago FROM outbox.intents WHERE key = k;
$$;

-- ---------------------------------------------------------------------------
-- h1: live rows
SELECT pg_temp.mk('h1', 'p-old', 'pending', '0', '-2 minutes') \g /dev/null
SELECT pg_temp.mk('h1', 'p-new', 'pending', '0', '-30 seconds') \g /dev/null
SELECT pg_temp.mk('h1', 'p-later', 'pending', '0', '1 hour') \g /dev/null
SELECT pg_temp.mk('h1', 'f-' || n, 'in_flight') FROM generate_series(1, 2) n \g /dev/null
SELECT pg_temp.mk('h1', 'u-1', 'unknown') \g /dev/null
SELECT pg_temp.mk('h1', 'w-1', 'awaiting_approval') \g /dev/null
-- h1: final rows, recent and old (the old ones are history: not counted)
SELECT pg_temp.mk('h1', 's-' || n, 'succeeded', n * interval '1 minute') FROM generate_series(1, 4) n \g /dev/null
SELECT pg_temp.mk('h1', 's-old-' || n, 'succeeded', interval '10 minutes' + n * interval '1 hour') FROM generate_series(1, 5) n \g /dev/null
SELECT pg_temp.mk('h1', 'x-1', 'failed', '30 seconds') \g /dev/null
SELECT pg_temp.mk('h1', 'x-old', 'failed', '6 minutes') \g /dev/null
SELECT pg_temp.mk('h1', 'c-' || n, 'cancelled', '2 minutes') FROM generate_series(1, 2) n \g /dev/null
-- h1: ten delivery attempts 1..4 minutes ago, latencies 10..100 ms: 8 succeeded (20..90 ms),
-- one not sent (10 ms), one ambiguous (100 ms)
SELECT pg_temp.att('s-1', 1, CASE n WHEN 1 THEN 'not_sent' WHEN 10 THEN 'ambiguous' ELSE 'succeeded' END::outbox.attempt_class,
                   n * 10, interval '1 minute' + n * interval '15 seconds')
  FROM generate_series(1, 10) n \g /dev/null
-- not counted: older than 5 minutes, reconciliations, people's decisions, released claims
SELECT pg_temp.att('s-old-1', 1, 'succeeded', 5000, '6 minutes') \g /dev/null
SELECT pg_temp.att('s-old-2', 1, 'permanent_failure', 5000, '5 minutes 1 second') \g /dev/null
SELECT pg_temp.att('u-1', 1, 'reconciled_executed', 99999, '1 minute') \g /dev/null
SELECT pg_temp.att('u-1', 1, 'reconcile_inconclusive', 99999, '1 minute') \g /dev/null
SELECT pg_temp.att('x-1', 1, 'reconciled_not_executed', 99999, '1 minute') \g /dev/null
SELECT pg_temp.att('c-1', 0, 'resolved', NULL, '2 minutes') \g /dev/null
SELECT pg_temp.att('p-new', 1, 'released', NULL, '3 seconds') \g /dev/null

-- h2: in the last 10 s: 5 first attempts (succeeded, 1..5 ms) and 3 retries
-- (retry_later, 6..8 ms) -> 2 + 0.5 x 5 - 3 = 1.5 -> 1; a reconciliation (attempt 1) is no first attempt.
SELECT pg_temp.mk('h2', 'b-' || n, 'succeeded', '1 second') FROM generate_series(1, 8) n \g /dev/null
SELECT pg_temp.att('b-' || n, CASE WHEN n <= 5 THEN 1 ELSE 2 END,
                   CASE WHEN n <= 5 THEN 'succeeded' ELSE 'retry_later' END::outbox.attempt_class, n, interval '2 seconds')
  FROM generate_series(1, 8) n \g /dev/null
SELECT pg_temp.att('b-1', 1, 'reconciled_executed', 3, '2 seconds') \g /dev/null
-- first attempts 11 s ago (inside the 5 minutes)
SELECT pg_temp.mk('h2', 'b-9', 'succeeded', '11 seconds') \g /dev/null
SELECT pg_temp.att('b-9', 1, 'succeeded', 9, '11 seconds') \g /dev/null

-- h3: 6 failed retries; its circuit opened 30 s ago, the next probe in 2 s
UPDATE outbox.target_state SET circuit = 'open', circuit_since = now() - interval '30 seconds',
       circuit_reason = 'connect refused', probe_at = now() + interval '2 seconds', probe_interval_ms = 4000
 WHERE target = 'h3';
-- h2: paused by a Retry-After for 5 more seconds; idle: a pause that is over
SELECT pg_temp.mk('h3', 'e-1', 'pending', '0', '10 seconds') \g /dev/null
SELECT pg_temp.att('e-1', n, 'ambiguous', 1000, interval '1 second') FROM generate_series(2, 7) n \g /dev/null
UPDATE outbox.target_state SET paused_until = now() + interval '5 seconds' WHERE target = 'h2';
UPDATE outbox.target_state SET paused_until = now() - interval '1 second' WHERE target = 'idle';

-- ---------------------------------------------------------------------------
SELECT has_view('outbox', 'target_health', 'outbox.target_health exists');
SELECT columns_are('outbox', 'target_health',
       ARRAY['target', 'enabled', 'pending', 'in_flight', 'unknown', 'awaiting_approval', 'succeeded_5m', 'failed_5m',
             'cancelled_5m', 'attempts_5m', 'attempts_succeeded_5m', 'success_ratio_5m', 'p95_latency_ms_5m',
             'p95_succeeded_latency_ms_5m', 'oldest_pending_age', 'circuit', 'circuit_since', 'circuit_reason',
             'next_probe_at', 'paused_until', 'rate_limit_per_s'],
       'target_health has the documented columns');
SELECT has_index('outbox', 'intents', 'intents_target_settled', ARRAY['target', 'updated_at'],
                 'settled rows by target and updated_at (read target by target for the 5-minute counts)');
SELECT hasnt_index('outbox', 'intents', 'intents_settled',
                   'no index of settled rows by updated_at alone (0017: it duplicated intents_target_settled)');

SELECT is((SELECT count(*)::int FROM outbox.target_health), 4, 'one row per target');
SELECT results_eq($$SELECT pending, in_flight, unknown, awaiting_approval FROM outbox.target_health WHERE target = 'h1'$$,
                  $$VALUES (3::bigint, 2::bigint, 1::bigint, 1::bigint)$$,
                  'h1 live rows: 3 pending (due or not), 2 in flight, 1 unknown, 1 awaiting approval');
SELECT results_eq($$SELECT succeeded_5m, failed_5m, cancelled_5m FROM outbox.target_health WHERE target = 'h1'$$,
                  $$VALUES (4::bigint, 1::bigint, 2::bigint)$$,
                  'h1 final rows of the last 5 minutes: 4 succeeded, 1 failed, 2 cancelled (older ones not counted)');
SELECT results_eq($$SELECT attempts_5m, attempts_succeeded_5m, success_ratio_5m FROM outbox.target_health WHERE target = 'h1'$$,
                  $$VALUES (10::bigint, 8::bigint, 0.8000::numeric)$$,
                  'h1 attempts: 10 deliveries, 8 succeeded, ratio 0.8 (reconciliations, decisions, releases and older attempts left out)');
SELECT is((SELECT p95_latency_ms_5m FROM outbox.target_health WHERE target = 'h1'), 95.5::numeric,
          'h1 p95 latency over all deliveries (10..100 ms): 95.5');
SELECT is((SELECT p95_succeeded_latency_ms_5m FROM outbox.target_health WHERE target = 'h1'), 86.5::numeric,
          'h1 p95 latency over succeeded deliveries (20..90 ms): 86.5');
SELECT is((SELECT oldest_pending_age FROM outbox.target_health WHERE target = 'h1'), interval '2 minutes',
          'h1 oldest pending age: the row due 2 minutes ago (the one due in an hour does not count)');
SELECT results_eq($$SELECT circuit, circuit_since, circuit_reason, next_probe_at, paused_until, rate_limit_per_s
                      FROM outbox.target_health WHERE target = 'h1'$$,
                  $$SELECT 'closed'::text, circuit_since, NULL::text, NULL::timestamptz, NULL::timestamptz, NULL::real
                      FROM outbox.target_state WHERE target = 'h1'$$,
                  'h1 circuit: closed, no probe, no pause, no rate limit');

SELECT results_eq($$SELECT pending, succeeded_5m, attempts_5m, attempts_succeeded_5m, success_ratio_5m
                      FROM outbox.target_health WHERE target = 'h2'$$,
                  $$VALUES (0::bigint, 9::bigint, 9::bigint, 6::bigint, 0.6667::numeric)$$,
                  'h2: 9 settled, 9 deliveries (6 succeeded, 3 retry_later): ratio 0.6667');
SELECT is((SELECT p95_latency_ms_5m FROM outbox.target_health WHERE target = 'h2'), 8.6::numeric,
          'h2 p95 latency over 1..9 ms: 8.6');
SELECT results_eq($$SELECT circuit, paused_until, rate_limit_per_s FROM outbox.target_health WHERE target = 'h2'$$,
                  $$VALUES ('closed'::text, now() + interval '5 seconds', 50::real)$$,
                  'h2: closed, paused for 5 more seconds, 50 requests/s');
SELECT results_eq($$SELECT circuit, circuit_since, circuit_reason, next_probe_at FROM outbox.target_health WHERE target = 'h3'$$,
                  $$VALUES ('open'::text, now() - interval '30 seconds', 'connect refused'::text, now() + interval '2 seconds')$$,
                  'h3: circuit open for 30 s with its reason and the time of the next probe');
SELECT results_eq($$SELECT pending, oldest_pending_age, success_ratio_5m FROM outbox.target_health WHERE target = 'h3'$$,
                  $$VALUES (1::bigint, interval '0', 0.0000::numeric)$$,
                  'h3: a pending row not yet due -> oldest_pending_age 0; only ambiguous attempts -> ratio 0');

SELECT results_eq($$SELECT enabled, pending, in_flight, unknown, awaiting_approval, succeeded_5m, failed_5m, cancelled_5m,
                           attempts_5m, attempts_succeeded_5m, success_ratio_5m, p95_latency_ms_5m, oldest_pending_age,
                           circuit, paused_until
                      FROM outbox.target_health WHERE target = 'idle'$$,
                  $$VALUES (false, 0::bigint, 0::bigint, 0::bigint, 0::bigint, 0::bigint, 0::bigint, 0::bigint, 0::bigint, 0::bigint,
                            NULL::numeric, NULL::numeric, interval '0', 'closed'::text, NULL::timestamptz)$$,
                  'an idle (disabled) target: zeros, no ratio or latency, closed, a pause that is over is not shown');

-- the row follows the state: one settles, one becomes due
UPDATE outbox.intents SET state = 'succeeded', updated_at = now() WHERE key = 'u-1';
UPDATE outbox.intents SET next_attempt_at = now() - interval '7 minutes' WHERE key = 'p-later';
SELECT results_eq($$SELECT unknown, succeeded_5m, oldest_pending_age FROM outbox.target_health WHERE target = 'h1'$$,
                  $$VALUES (0::bigint, 5::bigint, interval '7 minutes')$$,
                  'h1 after changes: unknown 0, succeeded 5, oldest due pending 7 minutes');

-- through the relay's own functions: a claim and a recorded retry show up at once
INSERT INTO outbox.targets (name, url) VALUES ('h4', 'https://h4.test/hook');
SELECT outbox.enqueue('r-' || n, 'h4', jsonb_build_object('n', n)) FROM generate_series(1, 2) n \g /dev/null
CREATE TEMP TABLE claimed AS SELECT * FROM outbox.claim('relay-9', ARRAY['h4'], ARRAY[10], 10, 30000);
SELECT is(outbox.record('relay-9', array_agg(id ORDER BY key), array_agg(attempt ORDER BY key),
                        ARRAY['pending', 'succeeded']::outbox.intent_state[], ARRAY[1000, NULL], ARRAY[false, false],
                        ARRAY['not_sent', 'succeeded']::outbox.attempt_class[], ARRAY[false, true], ARRAY[NULL, 200],
                        ARRAY['connect refused', NULL], ARRAY[7, 42], ARRAY[NULL, '{}'], NULL::boolean[]), 2,
          '(outbox.record of one retry and one success)')
  FROM claimed;
SELECT results_eq($$SELECT pending, in_flight, succeeded_5m, attempts_5m, attempts_succeeded_5m, success_ratio_5m,
                           p95_succeeded_latency_ms_5m, circuit
                      FROM outbox.target_health WHERE target = 'h4'$$,
                  $$VALUES (1::bigint, 0::bigint, 1::bigint, 2::bigint, 1::bigint, 0.5000::numeric, 42.0::numeric, 'closed'::text)$$,
                  'attempts recorded by outbox.record are counted (the row it changed carries the target)');

-- ---------------------------------------------------------------------------
-- access
SELECT ok(has_table_privilege('outbox_operator', 'outbox.target_health', 'SELECT'), 'outbox_operator may read target_health');
SELECT ok(has_table_privilege('outbox_admin', 'outbox.target_health', 'SELECT'), 'outbox_admin may read target_health (operator rights)');
SET ROLE outbox_operator;
SELECT is((SELECT count(*)::int FROM outbox.target_health), 5, 'outbox_operator reads target_health');
RESET ROLE;
SET ROLE outbox_app;
SELECT throws_ok($$SELECT * FROM outbox.target_health$$, '42501', 'permission denied for view target_health',
                 'outbox_app cannot read target_health');
RESET ROLE;
SET ROLE outbox_relay;
SELECT throws_ok($$SELECT * FROM outbox.target_health$$, '42501', 'permission denied for view target_health',
                 'outbox_relay cannot read target_health');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
