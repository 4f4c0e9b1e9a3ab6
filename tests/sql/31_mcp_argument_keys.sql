-- 31_mcp_argument_keys: keys from the arguments, for hosts that cannot send one
-- (migrations/0040_mcp_argument_keys.sql; issue 37, item 1).
--   columns      mcp_tools.key_source ('meta' default | 'arguments' | 'minted') and
--                argument_window (10 minutes default, more than 0, at most 7 days), checked
--   server_keys  kept in step with key_source both ways (true is 'minted'), for 0.1.0
--   schemas      "x-outbox-volatile" is accepted as a boolean annotation, refused otherwise
--   mcp_call     with p_argument_hash: the same hash within the window is the first call's
--                intent and answer (other volatile properties too: no key_conflict, the first
--                arguments stand); another hash, or after the window (counted from the first
--                call, the boundary included), a new action; a key the call carries wins;
--                a 'meta' or 'minted' tool refuses a hash; a task made from a derived key
--   race         two identical calls at once (two real connections): one key, one intent
--   prune        prune_step deletes the argument keys past their window, and no other
-- Nothing here runs in one wrapping transaction (the race needs real connections): the
-- database is a throwaway copy made by run.sh.
SELECT plan(44);
\ir lib/sessions.sql

INSERT INTO outbox.targets (name, url, key_header) VALUES ('t-pay', 'https://p.test/pay', NULL);
INSERT INTO outbox.mcp_tools (tool, target, description, key_source, argument_window) VALUES
    ('pay', 't-pay', 'Pay', 'arguments', '10 minutes'), ('pay2', 't-pay', 'Pay too', 'arguments', '1 hour');
INSERT INTO outbox.mcp_tools (tool, target, description) VALUES ('paymeta', 't-pay', 'Pay, keyed');
SELECT outbox.mcp_client('alpha', repeat('a', 40)) \g /dev/null
SELECT outbox.mcp_client('beta', repeat('b', 40)) \g /dev/null
CREATE FUNCTION pg_temp.h(c text) RETURNS bytea LANGUAGE sql AS $$ SELECT sha256(convert_to(repeat(c, 40), 'UTF8')) $$;
-- an argument hash (any 32 bytes: the front door writes them)
CREATE FUNCTION pg_temp.ah(t text) RETURNS bytea LANGUAGE sql AS $$ SELECT sha256(convert_to(t, 'UTF8')) $$;
CREATE FUNCTION pg_temp.call(client text, tool text, args jsonb, hash text, k text DEFAULT NULL,
                             task boolean DEFAULT false)
RETURNS outbox.mcp_answer LANGUAGE sql AS $$
    SELECT outbox.mcp_call(pg_temp.h(left(client, 1)), tool, k, args, NULL, NULL, NULL, task, CASE WHEN task THEN 60000 END,
                           pg_temp.ah(hash))
$$;

-- ---- columns ----------------------------------------------------------------------------
SELECT col_default_is('outbox', 'mcp_tools', 'key_source', 'meta', 'key_source defaults to meta (today''s rule)');
SELECT col_default_is('outbox', 'mcp_tools', 'argument_window', '00:10:00', 'argument_window defaults to 10 minutes');
SELECT throws_ok($$INSERT INTO outbox.mcp_tools (tool, target, key_source) VALUES ('x1', 't-pay', 'header')$$,
                 '23514', NULL, 'key_source is meta, arguments or minted');
SELECT throws_ok($$INSERT INTO outbox.mcp_tools (tool, target, argument_window) VALUES ('x2', 't-pay', '0')$$,
                 '23514', NULL, 'argument_window is more than 0');
SELECT throws_ok($$INSERT INTO outbox.mcp_tools (tool, target, argument_window) VALUES ('x3', 't-pay', '8 days')$$,
                 '23514', NULL, 'argument_window is at most 7 days');

-- ---- server_keys in step ------------------------------------------------------------------
INSERT INTO outbox.mcp_tools (tool, target, server_keys) VALUES ('sk', 't-pay', true);
SELECT is((SELECT key_source FROM outbox.mcp_tools WHERE tool = 'sk'), 'minted',
          'a tool inserted with server_keys true (a 0.1.0 admin script) is minted');
UPDATE outbox.mcp_tools SET server_keys = false WHERE tool = 'sk';
SELECT is((SELECT key_source FROM outbox.mcp_tools WHERE tool = 'sk'), 'meta', 'server_keys false makes it meta');
UPDATE outbox.mcp_tools SET key_source = 'minted' WHERE tool = 'sk';
SELECT is((SELECT server_keys FROM outbox.mcp_tools WHERE tool = 'sk'), true,
          'key_source minted reads as server_keys true (0.1.0 front doors mint)');
UPDATE outbox.mcp_tools SET key_source = 'arguments' WHERE tool = 'sk';
SELECT is((SELECT server_keys FROM outbox.mcp_tools WHERE tool = 'sk'), false,
          'key_source arguments reads as server_keys false (a 0.1.0 front door refuses a call without a key)');
SELECT throws_ok($$INSERT INTO outbox.mcp_tools (tool, target, server_keys, key_source) VALUES ('sk2', 't-pay', true, 'arguments')$$,
                 '22023', NULL, 'server_keys true beside another key_source is refused');
SELECT is((SELECT server_keys FROM outbox.mcp_tool(pg_temp.h('a'), 'sk')), false,
          'the 0.1.0 mcp_tool still answers, with server_keys');
SELECT results_eq($$SELECT key_source, argument_window_s FROM outbox.mcp_tool_keyed(pg_temp.h('a'), 'pay2')$$,
                  $$VALUES ('arguments'::text, 3600::float8)$$, 'mcp_tool_keyed gives key_source and the window in seconds');
SELECT results_eq($$SELECT tool, key_source FROM outbox.mcp_list_tools_keyed(pg_temp.h('a')) WHERE tool LIKE 'pay%'$$,
                  $$VALUES ('pay'::text, 'arguments'::text), ('pay2', 'arguments'), ('paymeta', 'meta')$$,
                  'mcp_list_tools_keyed lists them with key_source');

-- ---- x-outbox-volatile --------------------------------------------------------------------
SELECT lives_ok($$INSERT INTO outbox.mcp_tools (tool, target, input_schema) VALUES ('vol', 't-pay',
                    '{"type": "object", "properties": {"ts": {"type": "string", "x-outbox-volatile": true},
                      "n": {"$ref": "#/$defs/n", "x-outbox-volatile": false}}, "$defs": {"n": {"type": "integer"}}}')$$,
                'a schema marking properties "x-outbox-volatile" is accepted (beside $ref too)');
SELECT is(outbox.mcp_schema_problem('{"type": "object", "properties": {"ts": {"x-outbox-volatile": "yes"}}}'),
          '/properties/ts/x-outbox-volatile: must be true or false', '"x-outbox-volatile" must be a boolean');

-- ---- mcp_call with an argument hash -------------------------------------------------------
CREATE TEMP TABLE ans AS SELECT 'first'::text AS step, * FROM pg_temp.call('alpha', 'pay', '{"amount": 5, "ts": "t1"}', 'A');
SELECT matches((SELECT key FROM ans WHERE step = 'first'), '^args-[0-9a-f]{32}-[0-9]{8}T[0-9]{6}\.[0-9]{6}Z$',
               'the first call gets a key derived from its arguments and its window''s start');
SELECT results_eq($$SELECT inserted, status FROM ans WHERE step = 'first'$$, $$VALUES (true, 'pending'::text)$$,
                  'and a new intent');
SELECT is((SELECT intent_key FROM ans WHERE step = 'first'), 'mcp:alpha:' || (SELECT key FROM ans WHERE step = 'first'),
          'the key is namespaced like the others');
INSERT INTO ans SELECT 'again', * FROM pg_temp.call('alpha', 'pay', '{"amount": 5, "ts": "t1"}', 'A');
SELECT results_eq($$SELECT a.key = f.key, a.inserted FROM ans a, ans f WHERE a.step = 'again' AND f.step = 'first'$$,
                  $$VALUES (true, false)$$, 'the same arguments again: the first call''s key and intent');
INSERT INTO ans SELECT 'volatile', * FROM pg_temp.call('alpha', 'pay', '{"amount": 5, "ts": "t2"}', 'A');
SELECT results_eq($$SELECT a.key = f.key, a.inserted, a.status FROM ans a, ans f WHERE a.step = 'volatile' AND f.step = 'first'$$,
                  $$VALUES (true, false, 'pending'::text)$$,
                  'a volatile property differs (the same hash): the same action, not a key_conflict');
SELECT is((SELECT payload FROM outbox.intents WHERE key = 'mcp:alpha:' || (SELECT key FROM ans WHERE step = 'first')),
          '{"amount": 5, "ts": "t1"}'::jsonb, 'the first call''s arguments stand');
UPDATE outbox.intents SET state = 'succeeded', response_status = 200, response_body = '{"ok": true}'
 WHERE key = 'mcp:alpha:' || (SELECT key FROM ans WHERE step = 'first');
INSERT INTO ans SELECT 'saved', * FROM pg_temp.call('alpha', 'pay', '{"amount": 5, "ts": "t3"}', 'A');
SELECT results_eq($$SELECT status, final, response_status, response_body FROM ans WHERE step = 'saved'$$,
                  $$VALUES ('succeeded'::text, true, 200, '{"ok": true}'::text)$$,
                  'a retry after the outcome is told the saved outcome');
INSERT INTO ans SELECT 'other', * FROM pg_temp.call('alpha', 'pay', '{"amount": 6}', 'B');
SELECT results_eq($$SELECT a.key <> f.key, a.inserted FROM ans a, ans f WHERE a.step = 'other' AND f.step = 'first'$$,
                  $$VALUES (true, true)$$, 'other arguments (another hash): a new action');
INSERT INTO ans SELECT 'tool2', * FROM pg_temp.call('alpha', 'pay2', '{"amount": 5, "ts": "t1"}', 'A');
SELECT results_eq($$SELECT a.key <> f.key, a.inserted FROM ans a, ans f WHERE a.step = 'tool2' AND f.step = 'first'$$,
                  $$VALUES (true, true)$$, 'the same arguments to another tool: another action');
INSERT INTO ans SELECT 'beta', * FROM pg_temp.call('beta', 'pay', '{"amount": 5, "ts": "t1"}', 'A');
SELECT results_eq($$SELECT a.intent_key <> f.intent_key, a.inserted FROM ans a, ans f WHERE a.step = 'beta' AND f.step = 'first'$$,
                  $$VALUES (true, true)$$, 'the same arguments from another client: its own action');
INSERT INTO ans SELECT 'meta', * FROM pg_temp.call('alpha', 'pay', '{"amount": 5, "ts": "t1"}', 'A', 'host-key-1');
SELECT results_eq($$SELECT key, inserted FROM ans WHERE step = 'meta'$$, $$VALUES ('host-key-1'::text, true)$$,
                  'a key the call carries wins over the arguments');
SELECT results_eq($$SELECT key, inserted FROM outbox.mcp_call(pg_temp.h('a'), 'pay', 'host-key-2', '{"amount": 5}')$$,
                  $$VALUES ('host-key-2'::text, true)$$, 'and without a hash, as before (the nine-argument form)');
SELECT throws_ok($$SELECT pg_temp.call('alpha', 'paymeta', '{"amount": 5}', 'A')$$, 'OR004', NULL,
                 'a meta tool refuses a key from the arguments');
SELECT throws_ok($$SELECT outbox.mcp_call(pg_temp.h('a'), 'pay', NULL, '{}', NULL, NULL, NULL, false, NULL, '\x00'::bytea)$$,
                 '22023', NULL, 'an argument hash is 32 bytes');
SELECT throws_ok($$SELECT outbox.mcp_call(pg_temp.h('a'), 'pay', NULL, '{}')$$, 'OR004', NULL,
                 'no key and no hash: refused, as before');

-- the window, counted from the first call; its end belongs to the next window
UPDATE outbox.mcp_argument_keys SET first_at = now() - interval '10 minutes' + interval '1 second'
 WHERE client = 'alpha' AND tool = 'pay' AND argument_hash = pg_temp.ah('A');
INSERT INTO ans SELECT 'late', * FROM pg_temp.call('alpha', 'pay', '{"amount": 5, "ts": "t4"}', 'A');
SELECT results_eq($$SELECT a.key = f.key, a.inserted FROM ans a, ans f WHERE a.step = 'late' AND f.step = 'first'$$,
                  $$VALUES (true, false)$$, 'a second before the window ends: still the first call''s');
BEGIN;   -- one transaction, one now(): the call comes exactly at the window's end
UPDATE outbox.mcp_argument_keys SET first_at = now() - interval '10 minutes'
 WHERE client = 'alpha' AND tool = 'pay' AND argument_hash = pg_temp.ah('A');
INSERT INTO ans SELECT 'after', * FROM pg_temp.call('alpha', 'pay', '{"amount": 5, "ts": "t5"}', 'A');
COMMIT;
SELECT results_eq($$SELECT a.key <> f.key, a.inserted, a.status FROM ans a, ans f WHERE a.step = 'after' AND f.step = 'first'$$,
                  $$VALUES (true, true, 'pending'::text)$$, 'exactly at the window''s end: a new action, a new key');
SELECT is((SELECT key FROM outbox.mcp_argument_keys WHERE client = 'alpha' AND tool = 'pay' AND argument_hash = pg_temp.ah('A')),
          (SELECT key FROM ans WHERE step = 'after'), 'whose window the row now holds');
INSERT INTO ans SELECT 'after2', * FROM pg_temp.call('alpha', 'pay', '{"amount": 5, "ts": "t6"}', 'A');
SELECT results_eq($$SELECT a.key = f.key, a.inserted FROM ans a, ans f WHERE a.step = 'after2' AND f.step = 'after'$$,
                  $$VALUES (true, false)$$, 'and its retry is that new action');

-- a task (2026: made after a wait; legacy: params.task) from a derived key, volatile differing
INSERT INTO ans SELECT 'task', * FROM pg_temp.call('alpha', 'pay', '{"amount": 5, "ts": "t7"}', 'A',
                                                   (SELECT key FROM ans WHERE step = 'after'), true);
SELECT results_eq($$SELECT a.key = f.key, a.inserted, a.task_id IS NOT NULL FROM ans a, ans f
                     WHERE a.step = 'task' AND f.step = 'after'$$,
                  $$VALUES (true, false, true)$$, 'a task of a derived key: the same intent, and a task');

-- ---- two identical calls at once ----------------------------------------------------------
CREATE TEMP TABLE conn (name text PRIMARY KEY, pid int);
INSERT INTO conn SELECT n, pg_temp.open(n) FROM unnest(ARRAY['a', 'b']) AS n;
CREATE FUNCTION pg_temp.pid(n text) RETURNS int LANGUAGE sql AS $$ SELECT pid FROM conn WHERE name = n $$;
CREATE TEMP TABLE race (who text, key text, inserted boolean);
SELECT dblink_exec('a', 'BEGIN') \g /dev/null
INSERT INTO race SELECT 'a', * FROM dblink('a', format(
    $$SELECT key, inserted FROM outbox.mcp_call(%L::bytea, 'pay', NULL, '{"amount": 9}', NULL, NULL, NULL, false, NULL, %L::bytea)$$,
    pg_temp.h('a'), pg_temp.ah('R'))) AS t(key text, inserted boolean);
SELECT is(dblink_send_query('b', format(
    $$SELECT key, inserted FROM outbox.mcp_call(%L::bytea, 'pay', NULL, '{"amount": 9}', NULL, NULL, NULL, false, NULL, %L::bytea)$$,
    pg_temp.h('a'), pg_temp.ah('R'))), 1, 'race: the second identical call is sent while the first is not committed');
SELECT ok(pg_temp.waits_on_lock(pg_temp.pid('b'), 5), 'race: it waits for the first call''s transaction');
SELECT dblink_exec('a', 'COMMIT') \g /dev/null
INSERT INTO race SELECT 'b', * FROM dblink_get_result('b') AS t(key text, inserted boolean);
SELECT * FROM dblink_get_result('b', false) AS t(key text, inserted boolean) \g /dev/null
SELECT results_eq($$SELECT who, inserted FROM race ORDER BY who$$, $$VALUES ('a'::text, true), ('b', false)$$,
                  'race: the first inserted the intent, the second found it');
SELECT is((SELECT count(DISTINCT key)::int FROM race), 1, 'race: one key');
SELECT is((SELECT count(*)::int FROM outbox.intents WHERE key = 'mcp:alpha:' || (SELECT key FROM race WHERE who = 'a')),
          1, 'race: one intent');
-- the first rolls back: the second makes the action
SELECT dblink_exec('a', 'BEGIN') \g /dev/null
SELECT * FROM dblink('a', format(
    $$SELECT key FROM outbox.mcp_call(%L::bytea, 'pay', NULL, '{"amount": 10}', NULL, NULL, NULL, false, NULL, %L::bytea)$$,
    pg_temp.h('a'), pg_temp.ah('S'))) AS t(key text) \g /dev/null
SELECT dblink_send_query('b', format(
    $$SELECT key, inserted FROM outbox.mcp_call(%L::bytea, 'pay', NULL, '{"amount": 10}', NULL, NULL, NULL, false, NULL, %L::bytea)$$,
    pg_temp.h('a'), pg_temp.ah('S'))) \g /dev/null
SELECT ok(pg_temp.waits_on_lock(pg_temp.pid('b'), 5), 'rollback: the second call waits');
SELECT dblink_exec('a', 'ROLLBACK') \g /dev/null
INSERT INTO race SELECT 'b-after-rollback', * FROM dblink_get_result('b') AS t(key text, inserted boolean);
SELECT * FROM dblink_get_result('b', false) AS t(key text, inserted boolean) \g /dev/null
SELECT is((SELECT inserted FROM race WHERE who = 'b-after-rollback'), true,
          'rollback: the second call inserts the intent (the first left nothing)');

-- ---- prune --------------------------------------------------------------------------------
UPDATE outbox.mcp_argument_keys SET first_at = now() - interval '2 hours' WHERE argument_hash = pg_temp.ah('B');
UPDATE outbox.mcp_argument_keys SET first_at = now() - interval '30 minutes' WHERE tool = 'pay2';
SELECT * FROM outbox.prune_step() \g /dev/null
SELECT is((SELECT count(*)::int FROM outbox.mcp_argument_keys WHERE argument_hash = pg_temp.ah('B')), 0,
          'prune_step deletes an argument key past its window');
SELECT is((SELECT count(*)::int FROM outbox.mcp_argument_keys WHERE tool = 'pay2'), 1,
          'and keeps one within its tool''s window (1 hour)');

SELECT dblink_disconnect(name) FROM conn \g /dev/null
SELECT * FROM finish();
