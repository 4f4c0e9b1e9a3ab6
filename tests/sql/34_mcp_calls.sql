-- 34_mcp_calls: the front door's batched enqueue and the call's plans kept
-- (migrations/0046_mcp_call_floor.sql; issue 40, item 2).
--   mcp_calls    the front door's login calls it; an application cannot. Each element is
--                answered in a row with its place (ord) and the answer mcp_call gives alone:
--                new keys enqueued, the same call again answered with no enqueue, a key
--                already used with other arguments key_conflict, a task made; the arrays'
--                lengths must agree; an error in one element fails the whole batch and
--                nothing of it is kept (the front door then sends each call alone)
--   messages     mcp_call's note, mcp_message no longer given function calls: the same text
--                ("no relay has claimed it yet" while none is alive, "waiting for delivery"
--                once one is)
--   plans        relay_alive is plpgsql (a SQL function with SET is parsed and planned in
--                every call's transaction): same answer
-- The logins are real LOGIN roles created in this transaction (rolled back, roles too).
BEGIN;
SELECT plan(24);

INSERT INTO outbox.targets (name, url, key_header) VALUES ('t-pay', 'https://p.test/pay', NULL);
INSERT INTO outbox.mcp_tools (tool, target, description) VALUES ('pay', 't-pay', 'Pay');
SELECT outbox.mcp_client('alpha', repeat('a', 40)) \g /dev/null
SELECT outbox.mcp_client('beta', repeat('b', 40)) \g /dev/null
CREATE FUNCTION pg_temp.h(c text) RETURNS bytea LANGUAGE sql AS $$ SELECT sha256(convert_to(repeat(c, 40), 'UTF8')) $$;
GRANT EXECUTE ON FUNCTION pg_temp.h(text) TO PUBLIC;
CREATE ROLE outbox_t34_app LOGIN;
CREATE ROLE outbox_t34_fd LOGIN;
GRANT outbox_app TO outbox_t34_app;
GRANT outbox_mcp TO outbox_t34_fd;

SELECT is((SELECT prosecdef FROM pg_proc WHERE proname = 'mcp_calls' AND pronamespace = 'outbox'::regnamespace),
          true, 'mcp_calls runs as the schema''s owner (SECURITY DEFINER)');
SELECT ok(has_function_privilege('outbox_mcp', 'outbox.mcp_calls(bytea[], text[], text[], jsonb[], text[], text[], text[], boolean[], bigint[], bytea[])', 'EXECUTE'),
          'outbox_mcp may call mcp_calls');
SELECT ok(NOT has_function_privilege('outbox_app', 'outbox.mcp_calls(bytea[], text[], text[], jsonb[], text[], text[], text[], boolean[], bigint[], bytea[])', 'EXECUTE'),
          'an application may not');
SELECT ok(NOT has_function_privilege('public', 'outbox.mcp_calls(bytea[], text[], text[], jsonb[], text[], text[], text[], boolean[], bigint[], bytea[])', 'EXECUTE'),
          'nor PUBLIC');
SELECT is((SELECT l.lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
            WHERE p.oid = 'outbox.relay_alive()'::regprocedure), 'plpgsql',
          'relay_alive is plpgsql: its plan is kept across transactions');

-- ---- an earlier call, then a batch --------------------------------------------------------
SET SESSION AUTHORIZATION outbox_t34_fd;
SELECT outbox.mcp_call(pg_temp.h('a'), 'pay', 'k0', '{"amount": 1}') \g /dev/null
SELECT outbox.mcp_call(pg_temp.h('a'), 'pay', 'k9', '{"amount": 9}') \g /dev/null
CREATE TEMP TABLE b AS
SELECT x.ord, (x.answer).* FROM outbox.mcp_calls(
    ARRAY[pg_temp.h('a'), pg_temp.h('b'), pg_temp.h('a'), pg_temp.h('a'), pg_temp.h('b')],
    ARRAY['pay', 'pay', 'pay', 'pay', 'pay'],
    ARRAY['k2', 'k1', 'k0', 'k9', 'k3'],
    ARRAY['{"amount": 2}', '{"amount": 1}', '{"amount": 1}', '{"amount": 10}', '{"amount": 3}']::jsonb[],
    ARRAY[NULL, NULL, NULL, NULL, NULL]::text[], ARRAY[NULL, NULL, NULL, NULL, NULL]::text[],
    ARRAY[NULL, NULL, NULL, NULL, NULL]::text[], ARRAY[false, false, false, false, true],
    ARRAY[NULL, NULL, NULL, NULL, 60000]::bigint[], ARRAY[NULL, NULL, NULL, NULL, NULL]::bytea[]) x;
SELECT results_eq($$SELECT ord, client, key FROM b ORDER BY ord$$,
                  $$VALUES (1, 'alpha', 'k2'), (2, 'beta', 'k1'), (3, 'alpha', 'k0'), (4, 'alpha', 'k9'), (5, 'beta', 'k3')$$,
                  'one row per call, its place in ord, its client and key');
SELECT results_eq($$SELECT ord, status, inserted, final FROM b WHERE ord IN (1, 2) ORDER BY ord$$,
                  $$VALUES (1, 'pending', true, false), (2, 'pending', true, false)$$,
                  'new keys: enqueued, pending');
SELECT is((SELECT intent_key FROM b WHERE ord = 2), 'mcp:beta:k1', 'a key is its client''s (beta''s k1 is not alpha''s)');
SELECT results_eq($$SELECT status, inserted FROM b WHERE ord = 3$$, $$VALUES ('pending', false)$$,
                  'the same call again: answered, no enqueue');
SELECT results_eq($$SELECT status, conflict_fields::text FROM b WHERE ord = 4$$,
                  $$VALUES ('key_conflict', '{amount}')$$, 'a key used with other arguments: key_conflict, naming the field');
SELECT ok((SELECT task_id LIKE 'task-%' FROM b WHERE ord = 5), 'a task asked for is made');
SELECT is((SELECT count(*)::integer FROM outbox.mcp_call(pg_temp.h('a'), 'pay', 'k2', '{"amount": 2}')), 1,
          'mcp_call alone finds the batch''s intent');
SELECT results_eq($$SELECT status, inserted FROM outbox.mcp_call(pg_temp.h('a'), 'pay', 'k2', '{"amount": 2}')$$,
                  $$VALUES ('pending', false)$$, 'and answers it as the same call');

-- ---- errors fail the batch ------------------------------------------------------------------
SELECT throws_ok($$SELECT * FROM outbox.mcp_calls(ARRAY[pg_temp.h('a')], ARRAY['pay', 'pay'], ARRAY['k5'],
                   ARRAY['{}']::jsonb[], ARRAY[NULL]::text[], ARRAY[NULL]::text[], ARRAY[NULL]::text[],
                   ARRAY[false], ARRAY[NULL]::bigint[], ARRAY[NULL]::bytea[])$$,
                 '22023', 'outbox.mcp_calls: the arrays must have the same length, at most 256 (1 token hashes)',
                 'arrays of different lengths are refused');
SELECT throws_ok($$SELECT * FROM outbox.mcp_calls(ARRAY[pg_temp.h('a'), pg_temp.h('z')], ARRAY['pay', 'pay'],
                   ARRAY['k6', 'k7'], ARRAY['{"amount": 6}', '{"amount": 7}']::jsonb[], ARRAY[NULL, NULL]::text[],
                   ARRAY[NULL, NULL]::text[], ARRAY[NULL, NULL]::text[], ARRAY[false, false],
                   ARRAY[NULL, NULL]::bigint[], ARRAY[NULL, NULL]::bytea[])$$,
                 'OR022', 'outbox.mcp_call: unknown client', 'an unknown token in one element fails the batch');
SELECT throws_ok($$SELECT * FROM outbox.mcp_calls(ARRAY[pg_temp.h('a'), pg_temp.h('a')], ARRAY['pay', 'nope'],
                   ARRAY['k6', 'k7'], ARRAY['{"amount": 6}', '{"amount": 7}']::jsonb[], ARRAY[NULL, NULL]::text[],
                   ARRAY[NULL, NULL]::text[], ARRAY[NULL, NULL]::text[], ARRAY[false, false],
                   ARRAY[NULL, NULL]::bigint[], ARRAY[NULL, NULL]::bytea[])$$,
                 'OR023', NULL, 'an unknown tool in one element fails the batch');
SELECT is((SELECT status FROM outbox.mcp_outcomes(ARRAY[pg_temp.h('a')], ARRAY['mcp:alpha:k6'])), 'not_found',
          'nothing of a failed batch is kept');
SELECT is((SELECT count(*)::integer FROM outbox.mcp_calls('{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}')), 0,
          'an empty batch answers nothing');
SELECT throws_ok($$SELECT * FROM outbox.mcp_calls(array_fill(pg_temp.h('a'), ARRAY[257]), array_fill('pay'::text, ARRAY[257]),
                   array_fill('k'::text, ARRAY[257]), array_fill('{}'::jsonb, ARRAY[257]), array_fill(NULL::text, ARRAY[257]),
                   array_fill(NULL::text, ARRAY[257]), array_fill(NULL::text, ARRAY[257]), array_fill(false, ARRAY[257]),
                   array_fill(NULL::bigint, ARRAY[257]), array_fill(NULL::bytea, ARRAY[257]))$$,
                 '22023', NULL, 'at most 256 calls a batch');

-- ---- an application cannot ------------------------------------------------------------------
SET SESSION AUTHORIZATION outbox_t34_app;
SELECT throws_ok($$SELECT * FROM outbox.mcp_calls(ARRAY[pg_temp.h('a')], ARRAY['pay'], ARRAY['k8'], ARRAY['{}']::jsonb[],
                   ARRAY[NULL]::text[], ARRAY[NULL]::text[], ARRAY[NULL]::text[], ARRAY[false], ARRAY[NULL]::bigint[],
                   ARRAY[NULL]::bytea[])$$, '42501', NULL, 'an application cannot call mcp_calls');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT message FROM b WHERE ord = 1),
          outbox.mcp_message('pending', 'no relay has claimed it yet: none is running', NULL),
          'the message of a new call while no relay is alive is unchanged');

-- ---- relay_alive, and the message once a relay is alive --------------------------------------
SELECT is(outbox.relay_alive(), false, 'relay_alive: no relay, false');
INSERT INTO outbox.relays (relay_id, heartbeat_at) VALUES ('t34-relay', now());
SELECT is(outbox.relay_alive(), true, 'relay_alive: a relay''s heartbeat, true');
SET SESSION AUTHORIZATION outbox_t34_fd;
CREATE TEMP TABLE b2 AS
SELECT (x.answer).message FROM outbox.mcp_calls(ARRAY[pg_temp.h('a')], ARRAY['pay'], ARRAY['k11'],
        ARRAY['{"amount": 11}']::jsonb[], ARRAY[NULL]::text[], ARRAY[NULL]::text[], ARRAY[NULL]::text[], ARRAY[false],
        ARRAY[NULL]::bigint[], ARRAY[NULL]::bytea[]) x;
RESET SESSION AUTHORIZATION;
SELECT is((SELECT message FROM b2), outbox.mcp_message('pending', 'waiting for delivery', NULL),
          'with a relay alive: waiting for delivery');

SELECT * FROM finish();
ROLLBACK;
