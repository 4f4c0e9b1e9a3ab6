-- 28_mcp_second_round: the MCP front door in the database, second round
-- (migrations/0036_mcp_second_round.sql; issue 35, items 5, 6, 7, 11, 13, 18, 19).
--   5  mcp: keys     enqueue, compensate, cancel_run and outcome refuse a key, run id or
--                    ordering key of the front door's to an application (OR026, saying so);
--                    the agent's next call is not taken; operators still read, approve and
--                    cancel; the bodies behind the public functions are no role's
--   6  tasks        a task goes with its intent (prune) and at its TTL; then it is not
--                    listed or found, the same key gets a new task id; a row of tasks/list
--                    always has its id and time (the cursor); a page reads a page of tasks
--   7  replicas     two front-door logins, both isolated: one's task and outcome are the
--                    other's (no false key_conflict), also once pruned, also in a group
--   11 key_conflict  another tool or ordering group is named (conflict_fields, message)
--   13 outcomes     the batched look-up answers a key only with its client's token; the
--                    0.1.0 one (no token) answers nothing
--   18, 19 texts    what the model reads: wait, ask again, do not repeat, tell the user;
--                    a person settles what the target cannot be asked; the rule that holds
--                    a call; "no relay has claimed it yet" while none is alive
-- The logins are real LOGIN roles created in this transaction (rolled back, roles too);
-- SET SESSION AUTHORIZATION makes one the session's login, as a deployment's would be.
BEGIN;
SELECT plan(62);

INSERT INTO outbox.targets (name, url, key_header) VALUES
    ('t-pay', 'https://p.test/pay', NULL), ('t-pay2', 'https://p2.test/pay', 'Idempotency-Key'),
    ('t-app', 'https://a.test/hook', 'Idempotency-Key');
INSERT INTO outbox.targets (name, url, approval_rule) VALUES ('t-held', 'https://h.test/pay', '$.amount > 100');
INSERT INTO outbox.mcp_tools (tool, target, description) VALUES
    ('pay', 't-pay', 'Pay'), ('payb', 't-pay2', 'Pay via b'), ('held', 't-held', 'Pay, approved');
SELECT outbox.mcp_client('alpha', repeat('a', 40)) \g /dev/null
SELECT outbox.mcp_client('beta', repeat('b', 40)) \g /dev/null
CREATE FUNCTION pg_temp.h(c text) RETURNS bytea LANGUAGE sql AS $$ SELECT sha256(convert_to(repeat(c, 40), 'UTF8')) $$;
GRANT EXECUTE ON FUNCTION pg_temp.h(text) TO PUBLIC;

CREATE ROLE outbox_t28_app LOGIN;       -- an application
CREATE ROLE outbox_t28_op LOGIN;        -- an operator
CREATE ROLE outbox_t28_admin LOGIN;     -- an admin
CREATE ROLE outbox_t28_fd1 LOGIN;       -- the front door, replica 1
CREATE ROLE outbox_t28_fd2 LOGIN;       -- the front door, replica 2
GRANT outbox_app TO outbox_t28_app;
GRANT outbox_operator TO outbox_t28_op;
GRANT outbox_admin TO outbox_t28_admin;
GRANT outbox_mcp TO outbox_t28_fd1, outbox_t28_fd2;
-- what the design notes suggest for replicas, and what made item 7
-- (the application is not listed: isolation would hide the agent's intents from it, and
-- the reservation must hold without it)
INSERT INTO outbox.isolated_logins (login, note) VALUES ('outbox_t28_fd1', 'test'), ('outbox_t28_fd2', 'test');

-- ===========================================================================
-- 5. mcp: keys belong to the front door

SET SESSION AUTHORIZATION outbox_t28_fd1;
SELECT outbox.mcp_call(pg_temp.h('a'), 'pay', 'r9', '{"amount": 5}', p_run_id => 'run-9', p_ordering_key => 'g') \g /dev/null
SELECT outbox.mcp_call(pg_temp.h('a'), 'pay', 'r9t', '{"amount": 5}',
                       p_traceparent => '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01') \g /dev/null
SET SESSION AUTHORIZATION outbox_t28_app;
SELECT throws_ok($$SELECT outbox.enqueue('mcp:alpha:r10', 't-pay', '{"amount": 6}')$$, 'OR026',
                 'outbox.enqueue: the key ''mcp:alpha:r10'' starts with "mcp:", which is reserved for the MCP front door',
                 'enqueue refuses an agent''s future key to an application');
SELECT throws_ok($$SELECT outbox.enqueue('app:1', 't-app', '{}', 'mcp:alpha:run-9')$$, 'OR026',
                 'outbox.enqueue: the run id ''mcp:alpha:run-9'' starts with "mcp:", which is reserved for the MCP front door',
                 'enqueue refuses an agent''s run id');
SELECT throws_ok($$SELECT outbox.enqueue('app:2', 't-app', '{}', NULL, NULL, 'mcp:alpha:g')$$, 'OR026',
                 'outbox.enqueue: the ordering key ''mcp:alpha:g'' starts with "mcp:", which is reserved for the MCP front door',
                 'enqueue refuses an agent''s ordering group (it cannot block it)');
SELECT throws_ok($$SELECT * FROM outbox.outcome('mcp:alpha:r9')$$, 'OR026',
                 'outbox.outcome: the key ''mcp:alpha:r9'' starts with "mcp:", which is reserved for the MCP front door',
                 'outcome refuses an agent''s saved outcome to an application');
SELECT throws_ok($$SELECT outbox.cancel_run('mcp:alpha:run-9')$$, 'OR026',
                 'outbox.cancel_run: the run id ''mcp:alpha:run-9'' starts with "mcp:", which is reserved for the MCP front door',
                 'cancel_run refuses an agent''s run to an application');
SELECT is(outbox.traceparent_of('mcp:alpha:r9t'), NULL, 'traceparent_of: an agent''s trace context reads as no key''s');
SELECT throws_ok($$SELECT outbox.compensate('mcp:alpha:r9', 'app:undo', 't-app', '{}')$$, 'OR026', NULL,
                 'compensate refuses an agent''s intent as the original');
SELECT throws_ok($$SELECT outbox.compensate('app:1', 'mcp:alpha:undo', 't-app', '{}')$$, 'OR026', NULL,
                 'compensate refuses a front-door key as the new one');
SELECT throws_ok($$SELECT outbox.enqueue_any('mcp:alpha:r10', 't-pay', '{"amount": 6}')$$, '42501', NULL,
                 'the body behind enqueue is no application''s');
SELECT throws_ok($$SELECT * FROM outbox.outcome_any('mcp:alpha:r9')$$, '42501', NULL,
                 'the body behind outcome is no application''s');
SELECT throws_ok($$SET ROLE outbox_mcp$$, '42501', NULL, 'an application cannot become the front door');
SELECT lives_ok($$SELECT outbox.enqueue('app:3', 't-app', '{"n": 3}', 'run-app', NULL, 'g-app')$$,
                'the application''s own keys, runs and groups are as before');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT state::text FROM outbox.intents WHERE key = 'mcp:alpha:r9'), 'pending', 'the agent''s intent is untouched');
SET SESSION AUTHORIZATION outbox_t28_fd1;
SELECT is((SELECT status || ' ' || inserted FROM outbox.mcp_call(pg_temp.h('a'), 'pay', 'r10', '{"amount": 6}')),
          'pending true', 'the agent''s next call gets its key');
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION outbox_t28_op;
SELECT is((SELECT status FROM outbox.outcome('mcp:alpha:r9')), 'pending', 'an operator still reads an agent''s outcome');
SELECT is(outbox.traceparent_of('mcp:alpha:r9t'), '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
          'and its trace context');
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION outbox_t28_fd1;
SELECT is((SELECT status FROM outbox.mcp_call(pg_temp.h('a'), 'held', 'h1', '{"amount": 500}')), 'awaiting_approval',
          '(a held call)');
SET SESSION AUTHORIZATION outbox_t28_admin;
SELECT is(outbox.approve('mcp:alpha:h1', 'ops')::text, 'pending', 'an admin still approves an agent''s held call');
SELECT is(outbox.cancel_run('mcp:alpha:run-9', 'stopped by ops'), 1, 'an admin still cancels an agent''s run');
RESET SESSION AUTHORIZATION;

-- ===========================================================================
-- 11. key_conflict names the tool or the ordering group

SET SESSION AUTHORIZATION outbox_t28_fd1;
SELECT results_eq($$SELECT status, conflict_fields, message FROM outbox.mcp_call(pg_temp.h('a'), 'payb', 'r10', '{"amount": 6}')$$,
                  $$VALUES ('key_conflict'::text, ARRAY['tool'],
                            'key_conflict: this key was already used for another action: it was used with another tool (''pay''), not ''payb''; nothing was sent. Use the same tool and arguments, or a new key for a new action.'::text)$$,
                  'another tool under the same key: the field is "tool", and the message names the tool it was used with');
SELECT results_eq($$SELECT status, conflict_fields FROM outbox.mcp_call(pg_temp.h('a'), 'payb', 'r10', '{"amount": 7}')$$,
                  $$VALUES ('key_conflict'::text, ARRAY['tool', 'amount'])$$,
                  'another tool and other arguments: both named');
SELECT results_eq($$SELECT status, conflict_fields, message FROM outbox.mcp_call(pg_temp.h('a'), 'pay', 'r10', '{"amount": 6}',
                                                                                  p_ordering_key => 'g2')$$,
                  $$VALUES ('key_conflict'::text, ARRAY['ordering_key'],
                            'key_conflict: this key was already used for another action: it was used without an ordering key; nothing was sent. Use the same tool and arguments, or a new key for a new action.'::text)$$,
                  'another ordering group under the same key: named');
SELECT results_eq($$SELECT status, conflict_fields FROM outbox.mcp_call(pg_temp.h('a'), 'pay', 'r10', '{"amount": 8}')$$,
                  $$VALUES ('key_conflict'::text, ARRAY['amount'])$$, 'other arguments: the fields, as before');
RESET SESSION AUTHORIZATION;

-- ===========================================================================
-- 7. two replicas, two logins, both isolated: the identity is the MCP client

SET SESSION AUTHORIZATION outbox_t28_fd1;
CREATE TEMP TABLE t7 AS SELECT task_id FROM outbox.mcp_call(pg_temp.h('a'), 'pay', 'iso1', '{"amount": 1}', p_task => true);
GRANT SELECT ON t7 TO PUBLIC;
SELECT outbox.mcp_call(pg_temp.h('a'), 'pay', 'iso-o1', '{"amount": 1}', p_ordering_key => 'og') \g /dev/null
SELECT outbox.mcp_call(pg_temp.h('a'), 'pay', 'iso-o2', '{"amount": 2}', p_ordering_key => 'og') \g /dev/null
SET SESSION AUTHORIZATION outbox_t28_fd2;
SELECT results_eq($$SELECT status, task_id FROM outbox.mcp_call(pg_temp.h('a'), 'pay', 'iso1', '{"amount": 1}', p_task => true)$$,
                  $$SELECT 'pending'::text, task_id FROM t7$$,
                  'the same task retried through the other replica: its task, not a key_conflict');
SELECT is((SELECT status FROM outbox.mcp_call(pg_temp.h('a'), 'pay', 'iso1', '{"amount": 1}')), 'pending',
          'and the same call, plainly');
SELECT is((SELECT status FROM outbox.mcp_outcome(pg_temp.h('a'), 'iso1')), 'pending', 'its outcome through the other replica');
SELECT is((SELECT task_id FROM outbox.mcp_task(pg_temp.h('a'), (SELECT task_id FROM t7))), (SELECT task_id FROM t7),
          'its task through the other replica');
SELECT matches((SELECT message FROM outbox.mcp_outcome(pg_temp.h('a'), 'iso-o2')),
               '^not yet confirmed: waiting for mcp:alpha:iso-o1 \(pending\), the head of ordering group mcp:alpha:og',
               'a call held in its group names the head the other replica enqueued');
RESET SESSION AUTHORIZATION;

-- ===========================================================================
-- 6. tasks go away with their intents, and at their TTL

SET SESSION AUTHORIZATION outbox_t28_fd1;
CREATE TEMP TABLE t6 AS SELECT task_id FROM outbox.mcp_call(pg_temp.h('a'), 'payb', 'old', '{"amount": 3}', p_task => true,
                                                            p_task_ttl_ms => 3600000);
GRANT SELECT ON t6 TO PUBLIC;
RESET SESSION AUTHORIZATION;
UPDATE outbox.intents SET state = 'succeeded', attempts = 1, response_status = 200, response_body = '{"paid": 3}',
                          updated_at = now() - interval '2 hours'
 WHERE key = 'mcp:alpha:old';
UPDATE outbox.targets SET retain_for = '1 hour' WHERE name = 't-pay2';
SELECT ok((SELECT pruned FROM outbox.prune_step(1000)) >= 1, '(the intent is pruned: its key is a tombstone)');
SELECT is((SELECT count(*)::int FROM outbox.mcp_tasks WHERE intent_key = 'mcp:alpha:old'), 0, 'its task went with it');
SET SESSION AUTHORIZATION outbox_t28_fd2;
SELECT is((SELECT status FROM outbox.mcp_task(pg_temp.h('a'), (SELECT task_id FROM t6))), 'not_found',
          'tasks/get of it: no such task');
SELECT is((SELECT count(*)::int FROM outbox.mcp_tasks_list(pg_temp.h('a')) WHERE task_id = (SELECT task_id FROM t6) OR key = 'old'),
          0, 'tasks/list does not show it');
SELECT results_eq($$SELECT status, response_status, task_id <> (SELECT task_id FROM t6), task_id ~ '^task-[0-9a-f]{64}$'
                      FROM outbox.mcp_call(pg_temp.h('a'), 'payb', 'old', '{"amount": 3}', p_task => true)$$,
                  $$VALUES ('succeeded'::text, 200, true, true)$$,
                  'the same key called again (through the other replica, once pruned): its remembered outcome, with a new task');
RESET SESSION AUTHORIZATION;

-- a task past its TTL: gone at once, replaced by a new one, and deleted by prune_step
SET SESSION AUTHORIZATION outbox_t28_fd1;
CREATE TEMP TABLE t6b AS SELECT task_id FROM outbox.mcp_call(pg_temp.h('a'), 'pay', 'ttl', '{"amount": 4}', p_task => true,
                                                             p_task_ttl_ms => 1000);
GRANT SELECT ON t6b TO PUBLIC;
RESET SESSION AUTHORIZATION;
SELECT is((SELECT expires_at - created_at FROM outbox.mcp_tasks WHERE task_id = (SELECT task_id FROM t6b)), interval '1 second',
          'a task expires at its TTL after it was made');
UPDATE outbox.mcp_tasks SET created_at = created_at - interval '2 seconds', expires_at = expires_at - interval '2 seconds'
 WHERE task_id = (SELECT task_id FROM t6b);
SET SESSION AUTHORIZATION outbox_t28_fd1;
SELECT is((SELECT status FROM outbox.mcp_task(pg_temp.h('a'), (SELECT task_id FROM t6b))), 'not_found',
          'past its TTL: no such task');
SELECT is((SELECT count(*)::int FROM outbox.mcp_tasks_list(pg_temp.h('a')) WHERE key = 'ttl'), 0, 'past its TTL: not listed');
SELECT throws_ok(format($$SELECT outbox.mcp_task_cancel(pg_temp.h('a'), %L)$$, (SELECT task_id FROM t6b)), 'OR024',
                 'no such task', 'past its TTL: it cannot be cancelled');
SELECT is((SELECT status FROM outbox.mcp_outcome(pg_temp.h('a'), 'ttl')), 'pending', 'the call itself is not forgotten');
RESET SESSION AUTHORIZATION;
UPDATE outbox.mcp_tasks SET expires_at = now() - interval '1 second' WHERE intent_key = 'mcp:alpha:iso1';
SELECT outbox.prune_step(1000) \g /dev/null
SELECT is((SELECT count(*)::int FROM outbox.mcp_tasks WHERE intent_key IN ('mcp:alpha:ttl', 'mcp:alpha:iso1')), 0,
          'prune_step deletes the tasks past their TTL');
SET SESSION AUTHORIZATION outbox_t28_fd1;
SELECT ok((SELECT task_id FROM outbox.mcp_call(pg_temp.h('a'), 'pay', 'ttl', '{"amount": 4}', p_task => true))
          NOT IN (SELECT task_id FROM t6b), 'the same key called again past its TTL: a new task');
RESET SESSION AUTHORIZATION;
-- an expired task still in the table (prune_step not run yet) is replaced, not kept
UPDATE outbox.mcp_tasks SET expires_at = now() - interval '1 second' WHERE intent_key = 'mcp:alpha:ttl';
CREATE TEMP TABLE t6c AS SELECT task_id FROM outbox.mcp_tasks WHERE intent_key = 'mcp:alpha:ttl';
GRANT SELECT ON t6c TO PUBLIC;
SET SESSION AUTHORIZATION outbox_t28_fd1;
SELECT ok((SELECT task_id FROM outbox.mcp_call(pg_temp.h('a'), 'pay', 'ttl', '{"amount": 4}', p_task => true, p_task_ttl_ms => 60000))
          NOT IN (SELECT task_id FROM t6c), 'an expired task not yet deleted is replaced by a new one');
RESET SESSION AUTHORIZATION;

-- tasks/list pages: every row has its id and time, a cursor on a task that is gone
-- still pages on, and a page reads a page (an index), not every task
INSERT INTO outbox.mcp_tasks (task_id, client, intent_key, tool, created_at)
SELECT format('task-b%s', lpad(n::text, 5, '0')), 'beta', format('mcp:beta:k%s', n), 'pay',
       now() - interval '1 day' + n * interval '1 second'
  FROM generate_series(1, 5000) n;
ANALYZE outbox.mcp_tasks;
CREATE TEMP TABLE page1 AS SELECT task_id, task_created_at FROM outbox.mcp_tasks_list(pg_temp.h('b'));
SELECT is((SELECT count(*)::int FROM page1 WHERE task_id IS NOT NULL AND task_created_at IS NOT NULL), 50,
          'a page of 50, each row with its task id and time (even a task whose intent is gone)');
SELECT is((SELECT min(task_id) FROM page1), 'task-b04951', 'newest first');
DELETE FROM outbox.mcp_tasks WHERE task_id = 'task-b04951';
SELECT is((SELECT max(task_id) FROM outbox.mcp_tasks_list(pg_temp.h('b'), (SELECT task_created_at FROM page1 WHERE task_id = 'task-b04951'),
                                                        'task-b04951')),
          'task-b04950', 'a cursor on a task that is gone still pages on');
CREATE TEMP TABLE before28 AS
SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) AS n FROM pg_stat_xact_user_tables
 WHERE relid = 'outbox.mcp_tasks'::regclass;
SELECT count(*) FROM outbox.mcp_tasks_list(pg_temp.h('b'), now() - interval '1 day' + interval '2500 seconds', 'task-b02500') \g /dev/null
SELECT cmp_ok((SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables
                WHERE relid = 'outbox.mcp_tasks'::regclass) - (SELECT n FROM before28), '<=', 200::bigint,
              'a page in the middle of 5,000 tasks reads about a page of them (the index), not all');

-- ===========================================================================
-- 13. the batched look-up is scoped by token

SET SESSION AUTHORIZATION outbox_t28_fd1;
SELECT is((SELECT count(*)::int FROM outbox.mcp_outcomes(ARRAY[pg_temp.h('b')], ARRAY['mcp:alpha:r10'])), 0,
          'another client''s token: no row for alpha''s key');
SELECT is((SELECT count(*)::int FROM outbox.mcp_outcomes(ARRAY[sha256('nobody')], ARRAY['mcp:alpha:r10'])), 0,
          'an unknown token: no row');
SELECT results_eq($$SELECT intent_key, status FROM outbox.mcp_outcomes(ARRAY[pg_temp.h('a'), pg_temp.h('b'), pg_temp.h('a')],
                                                                       ARRAY['mcp:alpha:r10', 'mcp:alpha:r9', 'mcp:alpha:iso1'])$$,
                  $$VALUES ('mcp:alpha:r10'::text, 'pending'::text), ('mcp:alpha:iso1', 'pending')$$,
                  'each key with its own client''s token: its answer; with another''s: none');
SELECT throws_ok($$SELECT * FROM outbox.mcp_outcomes(ARRAY[pg_temp.h('a')], ARRAY['mcp:alpha:r10', 'mcp:alpha:r9'])$$,
                 '22023', 'outbox.mcp_outcomes: 1 token hashes for 2 keys', 'the two arrays must pair up');
SELECT is((SELECT count(*)::int FROM outbox.mcp_outcomes(ARRAY['mcp:alpha:r10', 'mcp:beta:k1'])), 0,
          'the 0.1.0 look-up without a token answers nothing');
RESET SESSION AUTHORIZATION;

-- ===========================================================================
-- 18, 19. What the model reads

SELECT is(outbox.mcp_message('pending', NULL, NULL),
          'not yet confirmed: waiting for delivery. Wait, then ask for the outcome of this same call; do not repeat the action; tell the user it is being confirmed.',
          'pending: wait, ask for the outcome of this same call, do not repeat, tell the user');
SELECT is(outbox.mcp_message('reconciling', NULL, 'needs a person — no status URL, no key'),
          'outcome unknown: needs a person to settle it. The target may have acted, and it cannot be asked whether it did, so a person will check and settle this call. Do not repeat the action; tell the user it may have happened and that a person is confirming it. You may ask for the outcome of this same call later.',
          'an unknown only a person can settle: the target cannot be asked, a person will settle it');
SELECT is(outbox.mcp_message('reconciling', NULL, NULL),
          'outcome unknown, being confirmed: the target may have acted, and it is being asked whether it did. Wait, then ask for the outcome of this same call; do not repeat the action; tell the user it is being confirmed.',
          'an unknown being reconciled: wait and ask again');
SELECT is((SELECT count(*)::int FROM unnest(ARRAY['pending', 'delivering', 'awaiting_approval', 'reconciling']) s,
                                    unnest(ARRAY[NULL, 'needs a person — no status URL, no key']) p
            WHERE outbox.mcp_message(s, NULL, p) ~* 'same key|retry|no key|calling again'), 0,
          'no text for a call that is not final speaks of keys or retries (the model controls no key)');
SELECT is((SELECT count(*)::int FROM unnest(ARRAY['pending', 'delivering', 'awaiting_approval', 'reconciling']) s
            WHERE outbox.mcp_message(s, NULL, NULL) !~ 'do not repeat the action'), 0,
          'every text for a call that is not final says not to repeat the action');

-- held for approval: the rule that holds it, at once and later
SET SESSION AUTHORIZATION outbox_t28_fd1;
SELECT results_eq($$SELECT status, message FROM outbox.mcp_call(pg_temp.h('a'), 'held', 'h2', '{"amount": 700}')$$,
                  $$VALUES ('awaiting_approval'::text,
                            'not yet confirmed: held until a person approves it (rule $.amount > 100: the rule is true for this payload). Wait, then ask for the outcome of this same call; do not repeat the action; tell the user it is waiting for a person''s approval.'::text)$$,
                  'a held call says which rule holds it and why');
SELECT is((SELECT message FROM outbox.mcp_outcome(pg_temp.h('a'), 'h2')),
          'not yet confirmed: held until a person approves it (rule $.amount > 100: the rule is true for this payload). Wait, then ask for the outcome of this same call; do not repeat the action; tell the user it is waiting for a person''s approval.',
          'and so does its outcome later');

-- no relay alive: "no relay has claimed it yet"; with one alive, waiting for delivery
SELECT is((SELECT message FROM outbox.mcp_call(pg_temp.h('a'), 'pay', 'nr1', '{"amount": 9}')),
          'not yet confirmed: no relay has claimed it yet: none is running. Wait, then ask for the outcome of this same call; do not repeat the action; tell the user it is being confirmed.',
          'a new call while no relay is alive says no relay has claimed it');
SELECT is((SELECT message FROM outbox.mcp_outcome(pg_temp.h('a'), 'nr1')),
          'not yet confirmed: no relay has claimed it yet: none is running. Wait, then ask for the outcome of this same call; do not repeat the action; tell the user it is being confirmed.',
          'and so does its outcome');
RESET SESSION AUTHORIZATION;
INSERT INTO outbox.relays (relay_id, heartbeat_at) VALUES ('gone', now() - interval '5 minutes');
SET SESSION AUTHORIZATION outbox_t28_fd1;
SELECT matches((SELECT message FROM outbox.mcp_outcome(pg_temp.h('a'), 'nr1')), 'no relay has claimed it yet',
               'a relay whose last heartbeat is 5 minutes old is not alive');
RESET SESSION AUTHORIZATION;
INSERT INTO outbox.relays (relay_id) VALUES ('alive');
SET SESSION AUTHORIZATION outbox_t28_fd1;
SELECT is((SELECT message FROM outbox.mcp_outcome(pg_temp.h('a'), 'nr1')),
          'not yet confirmed: waiting for delivery. Wait, then ask for the outcome of this same call; do not repeat the action; tell the user it is being confirmed.',
          'with a relay alive: waiting for delivery');
SELECT is((SELECT message FROM outbox.mcp_call(pg_temp.h('a'), 'pay', 'nr2', '{"amount": 9}')),
          'not yet confirmed: waiting for delivery. Wait, then ask for the outcome of this same call; do not repeat the action; tell the user it is being confirmed.',
          'and a new call too');
RESET SESSION AUTHORIZATION;

SELECT * FROM finish();
ROLLBACK;
