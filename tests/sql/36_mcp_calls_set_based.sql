-- 36_mcp_calls_set_based: the batch's plainly new calls in one INSERT, the wake-up's final
-- outcomes in one query (migrations/0049_mcp_calls_set_based.sql; issue 40, item 2).
--   counts       a batch of new calls calls neither mcp_call nor enqueue_any (one INSERT);
--                a call that is not plainly new (the same call again) still goes through
--                mcp_call; mcp_outcomes of final intents calls no mcp_answer_of
--                (track_functions, this transaction's calls)
--   rows         what the INSERT writes is what enqueue writes alone: payload, fingerprint,
--                state, run id, traceparent, due now, the login; ids in the batch's order;
--                an mcp target's payload {"tool", "arguments"}; an approval rule holds it
--   answers      each as mcp_call answers it alone: a new key (message with and without a
--                relay alive), held for approval (the rule's note), the same key twice in one
--                batch (the second is the same call again), a key a tombstone remembers
--                (answered from it, no intent kept), a task beside new calls
--   refusals     a key outside the alphabet (OR009), a payload over the target's limit
--                (OR006), a disabled target (OR003): the batch fails with mcp_call's error and
--                keeps nothing
--   outcomes     mcp_outcomes answers succeeded, failed and cancelled intents exactly as
--                mcp_answer_of does, pending ones and unknown keys as before, and nothing for
--                another client's key
-- The logins are real LOGIN roles created in this transaction (rolled back, roles too).
BEGIN;
SELECT plan(26);
SET LOCAL track_functions = 'all';

INSERT INTO outbox.targets (name, url, key_header) VALUES ('t-pay', 'https://p.test/pay', NULL);
INSERT INTO outbox.targets (name, url, max_payload_bytes) VALUES ('t-small', 'https://p.test/small', 40);
INSERT INTO outbox.targets (name, url, approval_rule) VALUES ('t-held', 'https://p.test/held', '$.amount > 100');
INSERT INTO outbox.targets (name, url, protocol, mcp_version) VALUES ('t-up', 'https://p.test/mcp', 'mcp', '2025-11-25');
INSERT INTO outbox.targets (name, url, enabled) VALUES ('t-off', 'https://p.test/off', false);
INSERT INTO outbox.mcp_tools (tool, target, description) VALUES ('pay', 't-pay', 'Pay'), ('small', 't-small', 'Small'),
       ('held', 't-held', 'Held'), ('off', 't-off', 'Off');
INSERT INTO outbox.mcp_tools (tool, target, description, upstream_tool) VALUES ('ticket', 't-up', 'Ticket', 'create_ticket');
SELECT outbox.mcp_client('alpha', repeat('a', 40)) \g /dev/null
SELECT outbox.mcp_client('beta', repeat('b', 40)) \g /dev/null
CREATE FUNCTION pg_temp.h(c text) RETURNS bytea LANGUAGE sql AS $$ SELECT sha256(convert_to(repeat(c, 40), 'UTF8')) $$;
GRANT EXECUTE ON FUNCTION pg_temp.h(text) TO PUBLIC;
-- calls of an outbox function in this transaction (track_functions)
CREATE FUNCTION pg_temp.calls(f text) RETURNS bigint LANGUAGE sql AS $$
    SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_xact_user_functions WHERE schemaname = 'outbox' AND funcname = f $$;
GRANT EXECUTE ON FUNCTION pg_temp.calls(text) TO PUBLIC;
-- a batch of calls with no run, group, task or argument hash: (ord, answer) rows
CREATE FUNCTION pg_temp.batch(hs bytea[], tools text[], keys text[], args jsonb[], traces text[] DEFAULT NULL)
RETURNS TABLE (ord integer, answer outbox.mcp_answer) LANGUAGE sql AS $$
    SELECT * FROM outbox.mcp_calls(hs, tools, keys, args, array_fill(NULL::text, ARRAY[cardinality(hs)]),
                                   array_fill(NULL::text, ARRAY[cardinality(hs)]),
                                   coalesce(traces, array_fill(NULL::text, ARRAY[cardinality(hs)])),
                                   array_fill(false, ARRAY[cardinality(hs)]),
                                   array_fill(NULL::bigint, ARRAY[cardinality(hs)]),
                                   array_fill(NULL::bytea, ARRAY[cardinality(hs)])) $$;
GRANT EXECUTE ON FUNCTION pg_temp.batch(bytea[], text[], text[], jsonb[], text[]) TO PUBLIC;
CREATE ROLE outbox_t36_fd LOGIN;
GRANT outbox_mcp TO outbox_t36_fd;

-- ---- counts ----------------------------------------------------------------------------------
SET SESSION AUTHORIZATION outbox_t36_fd;
SELECT outbox.mcp_call(pg_temp.h('a'), 'pay', 'k0', '{"amount": 1}') \g /dev/null
RESET SESSION AUTHORIZATION;
CREATE TEMP TABLE before_calls AS SELECT pg_temp.calls('mcp_call') AS mcp_call, pg_temp.calls('enqueue_any') AS enqueue_any;
SET SESSION AUTHORIZATION outbox_t36_fd;
CREATE TEMP TABLE b AS
SELECT x.ord, (x.answer).* FROM pg_temp.batch(
    ARRAY[pg_temp.h('a'), pg_temp.h('b'), pg_temp.h('a'), pg_temp.h('a')], ARRAY['pay', 'pay', 'pay', 'ticket'],
    ARRAY['k2', 'k1', 'k0', 'k3'],
    ARRAY['{"amount": 2}', '{"amount": 1.50}', '{"amount": 1}', '{"title": "t"}']::jsonb[],
    ARRAY['00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', NULL, NULL, NULL]) x;
RESET SESSION AUTHORIZATION;
SELECT is(pg_temp.calls('enqueue_any') - (SELECT enqueue_any FROM before_calls), 0::bigint,
          'a batch of three new calls and one again: enqueue_any is not called (one INSERT)');
SELECT is(pg_temp.calls('mcp_call') - (SELECT mcp_call FROM before_calls), 1::bigint,
          'mcp_call is called once: for the call that is not new');

-- ---- rows ------------------------------------------------------------------------------------
SELECT results_eq($$SELECT ord, client, key, intent_key, tool, target, status, state::text, final, inserted, attempts
                      FROM b ORDER BY ord$$,
                  $$VALUES (1, 'alpha', 'k2', 'mcp:alpha:k2', 'pay', 't-pay', 'pending', 'pending', false, true, 0),
                           (2, 'beta', 'k1', 'mcp:beta:k1', 'pay', 't-pay', 'pending', 'pending', false, true, 0),
                           (3, 'alpha', 'k0', 'mcp:alpha:k0', 'pay', 't-pay', 'pending', 'pending', false, false, 0),
                           (4, 'alpha', 'k3', 'mcp:alpha:k3', 'ticket', 't-up', 'pending', 'pending', false, true, 0)$$,
                  'each call answered in its place: three new, one again');
SELECT is((SELECT message FROM b WHERE ord = 1),
          outbox.mcp_message('pending', 'no relay has claimed it yet: none is running', NULL),
          'a new call''s message while no relay is alive is mcp_call''s');
SELECT ok((SELECT bool_and(updated_at = now()) FROM b WHERE inserted), 'updated now, as mcp_call answers');
SELECT ok((SELECT (SELECT id FROM outbox.intents WHERE key = 'mcp:alpha:k2') < (SELECT id FROM outbox.intents WHERE key = 'mcp:beta:k1')
              AND (SELECT id FROM outbox.intents WHERE key = 'mcp:beta:k1') < (SELECT id FROM outbox.intents WHERE key = 'mcp:alpha:k3')),
          'the intents'' ids follow the batch''s order');
SELECT results_eq($$SELECT payload, fingerprint = sha256(convert_to(payload::text, 'UTF8')), state::text, run_id COLLATE "default", traceparent,
                           next_attempt_at = now(), enqueued_by = 'outbox_t36_fd', ordering_key IS NULL, not_before IS NULL
                      FROM outbox.intents WHERE key = 'mcp:alpha:k2'$$,
                  $$VALUES ('{"amount": 2}'::jsonb, true, 'pending', NULL::text,
                            '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', true, true, true, true)$$,
                  'the row: payload, fingerprint of its text, pending, due now, the traceparent, the login');
SET SESSION AUTHORIZATION outbox_t36_fd;
SELECT outbox.mcp_call(pg_temp.h('b'), 'pay', 'k1-alone', '{"amount": 1.50}') \g /dev/null
RESET SESSION AUTHORIZATION;
SELECT is((SELECT fingerprint FROM outbox.intents WHERE key = 'mcp:beta:k1'),
          (SELECT fingerprint FROM outbox.intents WHERE key = 'mcp:beta:k1-alone'),
          'a payload with a trailing zero: the fingerprint enqueue gives it alone');
SELECT is((SELECT payload FROM outbox.intents WHERE key = 'mcp:alpha:k3'),
          '{"tool": "create_ticket", "arguments": {"title": "t"}}'::jsonb,
          'an mcp target''s intent: the upstream tool and the arguments');

-- ---- answers ---------------------------------------------------------------------------------
INSERT INTO outbox.tombstones (key_hash, intent_id, target, fingerprint, state, response_status, settled_at, forget_at)
VALUES (substring(sha256(convert_to('mcp:alpha:gone1', 'UTF8')) FROM 1 FOR 16), 999999, 't-pay',
        substring(sha256(convert_to('{"amount": 5}', 'UTF8')) FROM 1 FOR 16), 'succeeded', 200, now(), now() + interval '1 day');
INSERT INTO outbox.relays (relay_id, heartbeat_at) VALUES ('t36-relay', now());
SET SESSION AUTHORIZATION outbox_t36_fd;
CREATE TEMP TABLE b2 AS
SELECT x.ord, (x.answer).* FROM outbox.mcp_calls(
    ARRAY[pg_temp.h('a'), pg_temp.h('a'), pg_temp.h('a'), pg_temp.h('a'), pg_temp.h('a')],
    ARRAY['held', 'pay', 'pay', 'pay', 'pay'], ARRAY['h1', 'd1', 'd1', 'task1', 'gone1'],
    ARRAY['{"amount": 500}', '{"amount": 3}', '{"amount": 3}', '{"amount": 4}', '{"amount": 5}']::jsonb[],
    ARRAY['run-1', NULL, NULL, NULL, NULL], ARRAY[NULL, NULL, NULL, NULL, NULL]::text[],
    ARRAY[NULL, NULL, NULL, NULL, NULL]::text[], ARRAY[false, false, false, true, false],
    ARRAY[NULL, NULL, NULL, 60000, NULL]::bigint[], ARRAY[NULL, NULL, NULL, NULL, NULL]::bytea[]) x;
CREATE TEMP TABLE alone AS
SELECT * FROM outbox.mcp_call(pg_temp.h('a'), 'held', 'h2', '{"amount": 500}', 'run-1');
RESET SESSION AUTHORIZATION;
SELECT results_eq($$SELECT status, state::text, inserted, message, tool, target FROM b2 WHERE ord = 1$$,
                  $$SELECT status, state::text, inserted, message, tool, target FROM alone$$,
                  'held for approval: answered as mcp_call answers it alone, the rule''s note included');
SELECT is((SELECT run_id FROM outbox.intents WHERE key = 'mcp:alpha:h1'), 'mcp:alpha:run-1', 'the run is the client''s');
SELECT results_eq($$SELECT ord, status, inserted, message FROM b2 WHERE ord IN (2, 3) ORDER BY ord$$,
                  $$VALUES (2, 'pending', true, outbox.mcp_message('pending', 'waiting for delivery', NULL)),
                           (3, 'pending', false, outbox.mcp_message('pending', 'waiting for delivery', NULL))$$,
                  'the same key twice in one batch: one new (a relay alive: waiting for delivery), then the same call again');
SELECT is((SELECT count(*)::integer FROM outbox.intents WHERE key = 'mcp:alpha:d1'), 1, 'and one intent');
SELECT ok((SELECT task_id LIKE 'task-%' AND inserted FROM b2 WHERE ord = 4), 'a task beside them: enqueued and made');
SELECT results_eq($$SELECT status, inserted, final, response_status FROM b2 WHERE ord = 5$$,
                  $$VALUES ('succeeded', false, true, 200)$$, 'a key a tombstone remembers: answered from it');
SELECT is((SELECT count(*)::integer FROM outbox.intents WHERE key = 'mcp:alpha:gone1'), 0, 'and no intent is kept for it');

-- ---- refusals --------------------------------------------------------------------------------
SET SESSION AUTHORIZATION outbox_t36_fd;
SELECT throws_ok($$SELECT * FROM pg_temp.batch(ARRAY[pg_temp.h('a'), pg_temp.h('a')], ARRAY['pay', 'pay'],
                   ARRAY['r1', 'r2 '], ARRAY['{}', '{}']::jsonb[])$$,
                 'OR009', NULL, 'a key outside the alphabet fails the batch (OR009)');
SELECT throws_ok($$SELECT * FROM pg_temp.batch(ARRAY[pg_temp.h('a'), pg_temp.h('a')], ARRAY['pay', 'small'],
                   ARRAY['r3', 'r4'], ARRAY['{}', jsonb_build_object('text', repeat('x', 60))]::jsonb[])$$,
                 'OR006', NULL, 'a payload over the target''s limit fails the batch (OR006)');
SELECT throws_ok($$SELECT * FROM pg_temp.batch(ARRAY[pg_temp.h('a'), pg_temp.h('a')], ARRAY['pay', 'off'],
                   ARRAY['r5', 'r6'], ARRAY['{}', '{}']::jsonb[])$$,
                 'OR003', NULL, 'a disabled target fails the batch (OR003)');
-- a key an earlier call of the batch names, that earlier call going through mcp_call (an
-- ordering key): the earlier call has the key first, as it would alone
SELECT * FROM outbox.mcp_calls(ARRAY[pg_temp.h('a'), pg_temp.h('a')], ARRAY['pay', 'pay'],
                               ARRAY['og1', 'og1'], ARRAY['{"amount": 1}', '{"amount": 1}']::jsonb[], ARRAY[NULL, NULL]::text[],
                               ARRAY['grp', NULL]::text[], ARRAY[NULL, NULL]::text[], ARRAY[false, false],
                               ARRAY[NULL, NULL]::bigint[], ARRAY[NULL, NULL]::bytea[]) \g /dev/null
RESET SESSION AUTHORIZATION;
SELECT is((SELECT ordering_key FROM outbox.intents WHERE key = 'mcp:alpha:og1'), 'mcp:alpha:grp',
          'the same key, first with an ordering key, then without: the first call has it, in its group');
SELECT is((SELECT count(*)::integer FROM outbox.intents WHERE key IN ('mcp:alpha:r1', 'mcp:alpha:r3', 'mcp:alpha:r5')), 0,
          'nothing of a failed batch is kept, its new calls included');

-- ---- outcomes --------------------------------------------------------------------------------
UPDATE outbox.intents SET state = 'succeeded', attempts = 1, response_status = 200, response_body = '{"ok":true}'
 WHERE key = 'mcp:alpha:k2';
UPDATE outbox.intents SET state = 'failed', attempts = 2, response_status = 422, response_body = '{"no":1}',
       last_error = 'the target said no' WHERE key = 'mcp:beta:k1';
UPDATE outbox.intents SET state = 'cancelled', last_error = 'cancelled by a person' WHERE key = 'mcp:alpha:k3';
SELECT pg_temp.calls('mcp_answer_of') AS n \gset before_
SELECT results_eq($$SELECT * FROM outbox.mcp_outcomes(ARRAY[pg_temp.h('a'), pg_temp.h('b'), pg_temp.h('a')],
                                                       ARRAY['mcp:alpha:k2', 'mcp:beta:k1', 'mcp:alpha:k3'])
                     ORDER BY intent_key$$,
                  $$SELECT * FROM (SELECT * FROM outbox.mcp_answer_of('alpha', 'k2', NULL, false, false)
                                   UNION ALL SELECT * FROM outbox.mcp_answer_of('beta', 'k1', NULL, false, false)
                                   UNION ALL SELECT * FROM outbox.mcp_answer_of('alpha', 'k3', NULL, false, false)) x
                     ORDER BY intent_key$$,
                  'succeeded, failed, cancelled: mcp_outcomes answers as mcp_answer_of');
SELECT is(pg_temp.calls('mcp_answer_of') - :before_n, 3::bigint,
          'with one query: mcp_answer_of ran only for the comparison''s three');
SELECT results_eq($$SELECT * FROM outbox.mcp_outcomes(ARRAY[pg_temp.h('a'), pg_temp.h('a')], ARRAY['mcp:alpha:d1', 'mcp:alpha:nope'])
                     ORDER BY intent_key$$,
                  $$SELECT * FROM (SELECT * FROM outbox.mcp_answer_of('alpha', 'd1', NULL, false, false)
                                   UNION ALL SELECT * FROM outbox.mcp_answer_of('alpha', 'nope', NULL, false, false)) x
                     ORDER BY intent_key$$,
                  'pending and unknown keys: answered as before');
SELECT is((SELECT count(*)::integer FROM outbox.mcp_outcomes(ARRAY[pg_temp.h('b')], ARRAY['mcp:alpha:k2'])), 0,
          'another client''s key: no answer');
SELECT is((SELECT count(*)::integer FROM outbox.mcp_outcomes(ARRAY[pg_temp.h('a'), pg_temp.h('a')],
                                                             ARRAY['mcp:alpha:k2', 'mcp:alpha:k2'])), 2,
          'a key asked twice is answered twice, as before');

SELECT * FROM finish();
ROLLBACK;
