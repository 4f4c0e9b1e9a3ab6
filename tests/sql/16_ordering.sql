-- 16_ordering: ordered delivery per ordering key (migrations/0013_ordering.sql; docs/design.md, "Ordered delivery").
--   enqueue       p_ordering_key (6th argument; the 5-argument form is gone); the first live intent of a group
--                 is due, the others are held (pending, next_attempt_at = infinity); OR011 for a bad ordering key;
--                 the same key again: the same intent, or OR001 for another group
--   claim         only a group's head; groups do not wait for each other; held rows are never claimed or due
--   record        succeeded releases the next intent (skipping cancelled ones); a retry, unknown or failed holds
--   decisions     cancel (also of a failed head), resolve succeeded, reject, cancel_run release the group;
--                 resolve failed keeps it blocked; approve of a later intent holds it; retry_now refuses a held one
--   visibility    outbox.stuck: "blocks N later intents of group G"; outbox.outcome of a held intent names the head
--   groups        ordering_groups has a row while the group has live intents
--   concurrency   (dblink) a second enqueue into a group waits for the first transaction and gets the later place;
--                 a head settled while an enqueue is open releases the new intent at its commit; a record waits for
--                 an enqueue's commit-time check; settling the head and cancelling the next at once release the one
--                 after; REPEATABLE READ behind a concurrent enqueue: 40001
-- Nothing runs in one wrapping transaction: the commit-time check must fire, and the concurrency tests need
-- commits (the database is a throwaway copy made by run.sh).
SELECT plan(93);

-- ---------------------------------------------------------------------------
-- helpers
INSERT INTO outbox.targets (name, url) VALUES ('o1', 'https://o1.test/hook'), ('o2', 'https://o2.test/hook');
INSERT INTO outbox.targets (name, url, approval_rule) VALUES ('oa', 'https://oa.test/hook', '$.amount > 100');

CREATE FUNCTION pg_temp.enq(k text, grp text, tgt text DEFAULT 'o1', doc jsonb DEFAULT '{}') RETURNS text
LANGUAGE sql AS $$ SELECT status FROM outbox.enqueue(k, tgt, doc || jsonb_build_object('k', k), p_ordering_key => grp) $$;
-- held: pending behind its group's head
CREATE FUNCTION pg_temp.held(k text) RETURNS boolean LANGUAGE sql AS $$
    SELECT state = 'pending' AND next_attempt_at = 'infinity' FROM outbox.intents WHERE key = k $$;
CREATE FUNCTION pg_temp.due(k text) RETURNS boolean LANGUAGE sql AS $$
    SELECT state = 'pending' AND next_attempt_at <= now() FROM outbox.intents WHERE key = k $$;
CREATE FUNCTION pg_temp.st(k text) RETURNS text LANGUAGE sql AS $$ SELECT state::text FROM outbox.intents WHERE key = k $$;
-- claim by relay r of targets o1, o2, oa: the keys, in order
CREATE FUNCTION pg_temp.claim(r text DEFAULT 'r1') RETURNS text[] LANGUAGE sql AS $$
    SELECT coalesce(array_agg(key ORDER BY key), '{}')
      FROM outbox.claim(r, ARRAY['o1', 'o2', 'oa'], ARRAY[100, 100, 100], 300, 30000) $$;
-- record one outcome of an in_flight row as its relay
CREATE FUNCTION pg_temp.rec(k text, st outbox.intent_state, cls outbox.attempt_class, http int DEFAULT 200,
                            delay_ms int DEFAULT 0) RETURNS int LANGUAGE sql AS $$
    SELECT outbox.record(lease_owner, ARRAY[id], ARRAY[attempts], ARRAY[st], ARRAY[delay_ms], ARRAY[false], ARRAY[cls],
                         ARRAY[true], ARRAY[http], ARRAY[CASE WHEN st = 'succeeded' THEN NULL ELSE 'HTTP ' || http END],
                         ARRAY[3], ARRAY['{}'::text], ARRAY[true])
      FROM outbox.intents WHERE key = k AND state = 'in_flight' $$;
CREATE FUNCTION pg_temp.reason(k text) RETURNS text LANGUAGE sql AS $$ SELECT reason FROM outbox.stuck WHERE key = k $$;

-- ---------------------------------------------------------------------------
-- schema
SELECT has_column('outbox', 'intents', 'ordering_key', 'intents.ordering_key');
SELECT has_index('outbox', 'intents', 'intents_ordering', 'intents_ordering: the live intents of each group, in order');
SELECT has_function('outbox', 'enqueue', ARRAY['text', 'text', 'jsonb', 'text', 'timestamp with time zone', 'text', 'text'],
                    'enqueue takes p_ordering_key as its 6th argument (and p_traceparent, 0016, as its 7th)');
SELECT hasnt_function('outbox', 'enqueue', ARRAY['text', 'text', 'jsonb', 'text', 'timestamp with time zone'],
                      'the 5-argument enqueue is gone (calls with defaults would be ambiguous)');
SELECT ok(has_function_privilege('outbox_app', 'outbox.enqueue(text,text,jsonb,text,timestamptz,text,text)', 'EXECUTE')
          AND NOT has_function_privilege('public', 'outbox.enqueue(text,text,jsonb,text,timestamptz,text,text)', 'EXECUTE'),
          'outbox_app may enqueue with an ordering key; PUBLIC may not');
SELECT is_empty($$SELECT p.proname FROM pg_proc p
                   WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname LIKE 'ordering%'
                     AND has_function_privilege('public', p.oid, 'EXECUTE')$$,
                'the ordering internals are not executable by PUBLIC');

-- ---------------------------------------------------------------------------
-- enqueue
SELECT is(pg_temp.enq('a:1', 'A'), 'pending', 'the first intent of a group: pending');
SELECT ok(pg_temp.due('a:1'), '... and due (it is the head)');
SELECT is(pg_temp.enq('a:2', 'A', 'o2'), 'pending', 'the second (another target): status pending');
SELECT ok(pg_temp.held('a:2'), '... held: next_attempt_at = infinity');
SELECT pg_temp.enq('a:3', 'A') \g /dev/null
SELECT pg_temp.enq('a:4', 'A') \g /dev/null
SELECT is((SELECT array_agg(key ORDER BY id) FROM outbox.intents WHERE ordering_key = 'A'), ARRAY['a:1', 'a:2', 'a:3', 'a:4'],
          'places in the group follow the order of enqueue');
SELECT is((SELECT enqueued FROM outbox.ordering_groups WHERE ordering_key = 'A'), 4::bigint, 'ordering_groups counts the enqueues of the group');
SELECT lives_ok($$SELECT outbox.enqueue('u:1', 'o1', '{}')$$, 'an unordered enqueue as before');
SELECT ok(pg_temp.due('u:1') AND (SELECT ordering_key IS NULL FROM outbox.intents WHERE key = 'u:1'), '... due, no ordering key');

SELECT results_eq($$SELECT inserted, status FROM outbox.enqueue('a:3', 'o1', '{"k": "a:3"}', p_ordering_key => 'A')$$,
                  $$VALUES (false, 'pending'::text)$$, 'the same key, arguments and group again: the existing intent');
SELECT throws_ok($$SELECT outbox.enqueue('a:3', 'o1', '{"k": "a:3"}', p_ordering_key => 'B')$$, 'OR001',
                 'outbox.enqueue: key ''a:3'' is already used in ordering group ''A'', not in ordering group ''B''',
                 'the same key in another group: OR001');
SELECT throws_ok($$SELECT outbox.enqueue('a:3', 'o1', '{"k": "a:3"}')$$, 'OR001',
                 'outbox.enqueue: key ''a:3'' is already used in ordering group ''A'', not without one',
                 'the same key without its group: OR001');
SELECT throws_ok($$SELECT outbox.enqueue('bad:1', 'o1', '{}', p_ordering_key => '')$$, 'OR011',
                 'outbox.enqueue: ordering key '''' for key ''bad:1'' is empty', 'an empty ordering key: OR011');
SELECT throws_ok($$SELECT outbox.enqueue('bad:2', 'o1', '{}', p_ordering_key => repeat('g', 256))$$, 'OR011', NULL,
                 'an ordering key over 255 bytes: OR011');
SELECT throws_ok($$SELECT outbox.enqueue('bad:3', 'o1', '{}', p_ordering_key => E'g\n1')$$, 'OR011', NULL,
                 'an ordering key with a control character: OR011');

-- ---------------------------------------------------------------------------
-- claim, next_due_ms, record
SELECT pg_temp.enq('b:1', 'B') \g /dev/null
SELECT pg_temp.enq('b:2', 'B') \g /dev/null
SELECT is(pg_temp.claim(), ARRAY['a:1', 'b:1', 'u:1'], 'a claim takes the head of each group (and unordered rows), nothing held');
SELECT is(pg_temp.claim('r2'), '{}'::text[], 'another relay finds nothing of a group whose head is in flight');
SELECT is(outbox.next_due_ms(ARRAY['o1', 'o2']) > 1000, true,
          'next_due_ms: held rows are never due (the next thing is a lease expiry)');
SELECT is(pg_temp.rec('u:1', 'succeeded', 'succeeded'), 1, 'record (unordered): as before');
SELECT is(pg_temp.rec('b:1', 'pending', 'retry_later', 429, 60000), 1, 'record: the head of B is retried later');
SELECT ok(pg_temp.held('b:2'), '... its next intent stays held');
SELECT is(pg_temp.rec('a:1', 'succeeded', 'succeeded'), 1, 'record: the head of A succeeded');
SELECT ok(pg_temp.due('a:2') AND pg_temp.held('a:3'), '... the next intent of A is due, the one after stays held');
SELECT is(outbox.next_due_ms(ARRAY['o2']), 0::bigint, 'next_due_ms: the released intent is due');
SELECT is(pg_temp.claim(), ARRAY['a:2'], 'a claim takes it (B waits for its retry; no group waits for another)');
SELECT is(pg_temp.rec('a:2', 'failed', 'permanent_failure', 400), 1, 'record: it failed (HTTP 400)');
SELECT ok(pg_temp.held('a:3') AND pg_temp.held('a:4'), '... the rest of the group waits');
SELECT is(pg_temp.reason('a:2'), 'blocks 2 later intents of group A', 'stuck: the failed head, "blocks 2 later intents of group A"');
SELECT results_eq($$SELECT status, message FROM outbox.outcome('a:4')$$,
                  $$VALUES ('pending'::text, 'waiting for a:2 (failed), the head of ordering group A: it is sent once that one succeeded or was cancelled'::text)$$,
                  'outcome of a waiting intent: pending, and the intent it waits for');
SELECT is(pg_temp.reason('a:3'), NULL, 'stuck: the waiting intents themselves are not listed');

-- cancel: a held intent is skipped; the failed head is cancelled and the group moves on
SELECT is(outbox.cancel('a:3', 'not needed')::text, 'cancelled', 'cancel of a waiting (never sent) intent');
SELECT ok(pg_temp.held('a:4'), '... the intent after it still waits for the head');
SELECT is(pg_temp.reason('a:2'), 'blocks 1 later intent of group A', 'stuck: the head now blocks 1');
SELECT is(outbox.cancel('a:2', 'skip step 2')::text, 'cancelled', 'cancel of the failed head');
SELECT matches((SELECT last_error FROM outbox.intents WHERE key = 'a:2'), '^cancelled: skip step 2 \(it had failed: HTTP 400\)$',
               '... its reason keeps the failure');
SELECT ok(pg_temp.due('a:4'), '... and the group moves on past the cancelled intent');
SELECT is(pg_temp.reason('a:2'), NULL, 'stuck: the group is no longer listed');
SELECT pg_temp.enq('u:f', NULL) \g /dev/null
UPDATE outbox.intents SET state = 'failed' WHERE key = 'u:f';
SELECT throws_ok($$SELECT outbox.cancel('u:f')$$, 'OR007', 'outbox.cancel: key ''u:f'' is failed, cannot cancel',
                 'cancel of an unordered failed intent: OR007, as before');
SELECT is(pg_temp.claim(), ARRAY['a:4'], 'the last intent of A is claimed');
SELECT is(pg_temp.rec('a:4', 'succeeded', 'succeeded'), 1, 'and succeeds');
SELECT is((SELECT count(*)::int FROM outbox.ordering_groups WHERE ordering_key = 'A'), 0,
          'a group with no live intent has no ordering_groups row');
SELECT is(pg_temp.enq('a:5', 'A'), 'pending', 'a later enqueue into the group ...');
SELECT ok(pg_temp.due('a:5') AND (SELECT enqueued FROM outbox.ordering_groups WHERE ordering_key = 'A') = 1,
          '... is its head at once, and the row is made again');

-- ---------------------------------------------------------------------------
-- unknown head: resolve failed keeps the group blocked, resolve succeeded releases it
SELECT pg_temp.enq('c:1', 'C') \g /dev/null
SELECT pg_temp.enq('c:2', 'C') \g /dev/null
SELECT pg_temp.claim() \g /dev/null
SELECT pg_temp.rec('c:1', 'unknown', 'ambiguous', 504) \g /dev/null
SELECT matches(pg_temp.reason('c:1'), '^blocks 1 later intent of group C; outcome unknown: needs a person — no status URL; ',
               'stuck: an unknown head, with both reasons');
SELECT is(outbox.resolve('c:1', 'failed', 'the order service has no such order')::text, 'failed', 'resolve failed');
SELECT ok(pg_temp.held('c:2'), '... the group stays blocked (n+1 goes only after n succeeded or was cancelled)');
UPDATE outbox.intents SET state = 'unknown' WHERE key = 'c:1';
SELECT is(outbox.resolve('c:1', 'succeeded', 'order 55 exists')::text, 'succeeded', 'resolve succeeded');
SELECT ok(pg_temp.due('c:2'), '... releases the next intent');

-- approval: a head awaiting approval blocks; a later one approved early waits its turn
SELECT pg_temp.enq('d:1', 'D', 'oa', '{"amount": 500}') \g /dev/null
SELECT pg_temp.enq('d:2', 'D', 'oa', '{"amount": 600}') \g /dev/null
SELECT pg_temp.enq('d:3', 'D', 'o1') \g /dev/null
SELECT is(pg_temp.st('d:1') || ',' || pg_temp.st('d:2'), 'awaiting_approval,awaiting_approval', 'both need approval');
SELECT is(pg_temp.reason('d:1'), 'blocks 2 later intents of group D', 'stuck: the head awaiting approval blocks the group');
SELECT is(pg_temp.reason('d:2'), NULL, 'stuck: a later intent awaiting approval blocks nothing yet');
SELECT is(outbox.approve('d:2', 'alice')::text, 'pending', 'approve the second first');
SELECT ok(pg_temp.held('d:2'), '... it is pending and waits for the head');
SELECT throws_ok($$SELECT outbox.retry_now('d:2')$$, 'OR007', NULL, 'retry_now of a waiting intent: OR007');
SELECT matches((SELECT message FROM outbox.outcome('d:2')), '^waiting for d:1 \(awaiting_approval\)',
               'outcome: it waits for the head, awaiting approval');
SELECT is(outbox.reject('d:1', 'alice', 'too much')::text, 'cancelled', 'reject the head');
SELECT ok(pg_temp.due('d:2') AND pg_temp.held('d:3'), '... the group moves on to the approved intent');

-- not_before of a waiting intent applies when its turn comes
SELECT pg_temp.enq('e:1', 'E') \g /dev/null
SELECT outbox.enqueue('e:2', 'o1', '{}', p_not_before => now() + interval '1 hour', p_ordering_key => 'E') \g /dev/null
SELECT pg_temp.claim() \g /dev/null
SELECT pg_temp.rec('e:1', 'succeeded', 'succeeded') \g /dev/null
SELECT ok((SELECT next_attempt_at BETWEEN now() + interval '59 minutes' AND now() + interval '61 minutes'
             FROM outbox.intents WHERE key = 'e:2'), 'released: due at its not_before');

-- a release lost to a manual change: listed, and retry_now releases it
SELECT pg_temp.enq('f:1', 'F') \g /dev/null
SELECT pg_temp.enq('f:2', 'F') \g /dev/null
DELETE FROM outbox.intents WHERE key = 'f:1';
SELECT is(pg_temp.reason('f:2'), 'its turn in group F came but it was not released: outbox.retry_now releases it',
          'stuck: a held intent with nothing before it');
SELECT is(outbox.retry_now('f:2')::text, 'pending', 'retry_now releases it');
SELECT ok(pg_temp.due('f:2'), '... due now');

-- cancel_run: the run's waiting intents, and the group's row goes
SELECT outbox.enqueue('g:' || n, 'o1', jsonb_build_object('n', n), 'run-g', NULL, 'G') FROM generate_series(1, 3) AS n \g /dev/null
SELECT is(outbox.cancel_run('run-g', 'abandoned'), 3, 'cancel_run cancels the head and the waiting intents');
SELECT is((SELECT count(*)::int FROM outbox.ordering_groups WHERE ordering_key = 'G'), 0, '... and the group''s row goes');

-- retention: a failed intent of an ordering group is not pruned, with or without a later
-- step (0024: a later step must never go after it); once a person cancels it, it is
UPDATE outbox.targets SET retain_for = '1 second' WHERE name = 'o1';
SELECT pg_temp.enq('p:' || n, 'P') FROM generate_series(1, 2) AS n \g /dev/null
UPDATE outbox.intents SET state = 'failed', updated_at = now() - interval '1 hour' WHERE key = 'p:1';
SELECT outbox.prune() \g /dev/null
SELECT is((SELECT state::text FROM outbox.intents WHERE key = 'p:1'), 'failed', 'prune keeps a failed head that blocks its group');
SELECT outbox.cancel('p:2', 'not needed') \g /dev/null
SELECT outbox.prune() \g /dev/null
SELECT is((SELECT state::text FROM outbox.intents WHERE key = 'p:1'), 'failed',
          '... and keeps it when nothing waits behind it (a later step may still come)');
SELECT outbox.cancel('p:1', 'skip it') \g /dev/null
UPDATE outbox.intents SET updated_at = now() - interval '1 hour' WHERE key = 'p:1';
SELECT outbox.prune() \g /dev/null
SELECT is((SELECT count(*)::int FROM outbox.intents WHERE key = 'p:1'), 0, '... and prunes it once a person cancelled it');
SELECT is((SELECT inserted FROM outbox.enqueue('p:1', 'o1', '{"k": "p:1"}', p_ordering_key => 'P')), false,
          'the pruned key again: answered from its tombstone ...');
SELECT is((SELECT count(*)::int FROM outbox.ordering_groups WHERE ordering_key = 'P'), 0, '... and its group keeps no row');
UPDATE outbox.targets SET retain_for = DEFAULT WHERE name = 'o1';

-- several intents of a group in one statement (one transaction)
SELECT outbox.enqueue('h:' || n, 'o2', jsonb_build_object('n', n), p_ordering_key => 'H') FROM generate_series(1, 5) AS n \g /dev/null
SELECT is((SELECT string_agg(CASE WHEN next_attempt_at = 'infinity' THEN 'held' ELSE 'due' END, ',' ORDER BY id)
             FROM outbox.intents WHERE ordering_key = 'H'), 'due,held,held,held,held',
          'five in one statement: the first due, the rest held');

-- ---------------------------------------------------------------------------
-- concurrency, with real connections
\ir lib/sessions.sql
CREATE FUNCTION pg_temp.q(conn text, query text) RETURNS bigint LANGUAGE sql AS $$
    SELECT n FROM dblink(conn, format('SELECT count(*) FROM (%s) AS q', query)) AS t(n bigint)
$$;
CREATE TEMP TABLE conn (name text PRIMARY KEY, pid int);
INSERT INTO conn SELECT n, pg_temp.open(n) FROM unnest(ARRAY['a', 'b']) AS n;
CREATE FUNCTION pg_temp.pid(n text) RETURNS int LANGUAGE sql AS $$ SELECT pid FROM conn WHERE name = n $$;

-- Two transactions enqueue into one group: the second waits for the first to end (it cannot
-- overtake it), so the later-committed one has the later place.
SELECT dblink_exec('a', 'BEGIN') \g /dev/null
SELECT pg_temp.q('a', $$SELECT outbox.enqueue('k:a', 'o1', '{}', p_ordering_key => 'K')$$) \g /dev/null
SELECT dblink_exec('b', 'BEGIN') \g /dev/null
SELECT is(dblink_send_query('b', $$SELECT status FROM outbox.enqueue('k:b', 'o1', '{}', p_ordering_key => 'K')$$), 1,
          'concurrent enqueues of one group: the second is sent while the first is open');
SELECT ok(pg_temp.waits_on_lock(pg_temp.pid('b'), 5), '... and waits for the first transaction');
SELECT pg_sleep(0.2) \g /dev/null
SELECT dblink_exec('a', 'COMMIT') \g /dev/null
SELECT is((SELECT status FROM dblink_get_result('b') AS t(status text)), 'pending', '... then enqueues once it committed');
SELECT * FROM dblink_get_result('b', false) AS t(status text) \g /dev/null
SELECT dblink_exec('b', 'COMMIT') \g /dev/null
SELECT ok((SELECT (SELECT id FROM outbox.intents WHERE key = 'k:a') < (SELECT id FROM outbox.intents WHERE key = 'k:b')),
          'the later-committed transaction has the later place');
SELECT ok(pg_temp.due('k:a') AND pg_temp.held('k:b'), '... the first is the head, the second waits for it');

-- The head settles while an enqueue into its group is open: the new intent is released at its commit.
SELECT dblink_exec('a', 'BEGIN') \g /dev/null
SELECT pg_temp.q('a', $$SELECT outbox.enqueue('k:c', 'o1', '{}', p_ordering_key => 'K')$$) \g /dev/null
SELECT pg_temp.claim() \g /dev/null
SELECT pg_temp.rec('k:a', 'succeeded', 'succeeded') \g /dev/null
SELECT pg_temp.claim() \g /dev/null
SELECT is(pg_temp.rec('k:b', 'succeeded', 'succeeded'), 1,
          'while an enqueue into K is open, its last live intent succeeds (and does not wait for it)');
SELECT ok(pg_temp.held('k:c') IS NULL, '... the new intent is not visible yet');
SELECT dblink_exec('a', 'COMMIT') \g /dev/null
SELECT ok(pg_temp.due('k:c'), 'at its commit the new intent finds nothing before it: due');

-- The commit-time check holds the head until the commit: a record of the head waits for it, then releases.
SELECT pg_temp.enq('l:1', 'L') \g /dev/null
SELECT pg_temp.claim() \g /dev/null
SELECT dblink_exec('a', 'BEGIN') \g /dev/null
SELECT pg_temp.q('a', $$SELECT outbox.enqueue('l:2', 'o1', '{}', p_ordering_key => 'L')$$) \g /dev/null
-- the commit-time check, run now (SET CONSTRAINTS ... IMMEDIATE), so that the record comes between it and the commit
SELECT dblink_exec('a', 'SET CONSTRAINTS ALL IMMEDIATE') \g /dev/null
SELECT is(dblink_send_query('b', $$SELECT outbox.record(lease_owner, ARRAY[id], ARRAY[attempts], ARRAY['succeeded'::outbox.intent_state],
            ARRAY[0], ARRAY[false], ARRAY['succeeded'::outbox.attempt_class], ARRAY[true], ARRAY[200], ARRAY[NULL::text], ARRAY[3],
            ARRAY['{}'::text], ARRAY[true]) FROM outbox.intents WHERE key = 'l:1'$$), 1, 'a record of the head is sent');
SELECT ok(pg_temp.waits_on_lock(pg_temp.pid('b'), 5), '... it waits for the enqueuing transaction, which holds the head');
SELECT dblink_exec('a', 'COMMIT') \g /dev/null
SELECT is((SELECT n FROM dblink_get_result('b') AS t(n int)), 1, '... records once it committed');
SELECT * FROM dblink_get_result('b', false) AS t(n int) \g /dev/null
SELECT ok(pg_temp.due('l:2'), '... and releases the new intent');

-- The head succeeds and the next intent is cancelled at once: the one after is released.
SELECT pg_temp.enq('m:' || n, 'M') FROM generate_series(1, 3) AS n \g /dev/null
SELECT pg_temp.claim() \g /dev/null
SELECT dblink_exec('a', 'BEGIN') \g /dev/null
SELECT pg_temp.q('a', $$SELECT outbox.record(lease_owner, ARRAY[id], ARRAY[attempts], ARRAY['succeeded'::outbox.intent_state],
            ARRAY[0], ARRAY[false], ARRAY['succeeded'::outbox.attempt_class], ARRAY[true], ARRAY[200], ARRAY[NULL::text], ARRAY[3],
            ARRAY['{}'::text], ARRAY[true]) FROM outbox.intents WHERE key = 'm:1'$$) \g /dev/null
SELECT is(dblink_send_query('b', $$SELECT outbox.cancel('m:2', 'not needed')::text$$), 1, 'cancel of the next intent is sent');
SELECT ok(pg_temp.waits_on_lock(pg_temp.pid('b'), 5), '... it waits for the group''s settle lock');
SELECT dblink_exec('a', 'COMMIT') \g /dev/null
SELECT is((SELECT s FROM dblink_get_result('b') AS t(s text)), 'cancelled', '... cancels once the record committed');
SELECT * FROM dblink_get_result('b', false) AS t(s text) \g /dev/null
SELECT ok(pg_temp.due('m:3'), '... and the intent after it is released');

-- REPEATABLE READ: a snapshot taken before another enqueue into the group committed cannot place the intent.
SELECT dblink_exec('a', 'BEGIN ISOLATION LEVEL REPEATABLE READ') \g /dev/null
SELECT pg_temp.q('a', 'SELECT 1') \g /dev/null
SELECT pg_temp.enq('n:1', 'N') \g /dev/null
SELECT throws_ok($$SELECT * FROM dblink('a', $q$SELECT status FROM outbox.enqueue('n:2', 'o1', '{}', p_ordering_key => 'N')$q$) AS t(s text)$$,
                 '40001', NULL, 'REPEATABLE READ behind a concurrent enqueue into the group: 40001 (retry)');
SELECT dblink_exec('a', 'ROLLBACK') \g /dev/null
SELECT dblink_exec('a', 'BEGIN ISOLATION LEVEL REPEATABLE READ') \g /dev/null
SELECT is((SELECT s FROM dblink('a', $q$SELECT status FROM outbox.enqueue('n:2', 'o1', '{}', p_ordering_key => 'N')$q$) AS t(s text)),
          'pending', 'REPEATABLE READ with a fresh snapshot: enqueued');
SELECT dblink_exec('a', 'COMMIT') \g /dev/null
SELECT ok(pg_temp.held('n:2'), '... behind the head');

SELECT dblink_disconnect(name) FROM conn \g /dev/null
SELECT * FROM finish();
