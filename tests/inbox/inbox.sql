-- tests/inbox/inbox.sql — pgTAP tests of schema/inbox.sql, the receiver-side inbox.
-- Run in a fresh database with schema/inbox.sql, pgtap and dblink installed
-- (tests/integration/17_inbox.sh does: pg_prove -d DB tests/inbox/inbox.sql). Commits:
-- the COMMIT-time check and concurrent duplicates need real transactions (dblink).
--   begin              claims a new key (duplicate = false); stored answer for a processed key
--                      (duplicate = true, no claim); IB001 for another request; IB004 for a bad key;
--                      IB003 for a second begin of a claimed key in one transaction
--   finish             stores the answer; IB003 without a claim, or twice; 22023 for a bad status
--   COMMIT             a claim without an answer does not commit (IB003), and takes the effect with it
--   rollback           a rolled-back claim leaves nothing: the key is processed afresh
--   concurrency        a duplicate waits for the first transaction, then gets its answer (or claims
--                      the key if the first rolled back); try_begin gives up at once: IB002
--   lookup, prune      the stored answer by key; forgetting old answers
SELECT plan(47);

CREATE FUNCTION pg_temp.connstr() RETURNS text LANGUAGE sql AS $$
    SELECT format('host=%s port=%s dbname=%s user=%s application_name=inbox_test',
                  coalesce(host(inet_server_addr()), split_part(current_setting('unix_socket_directories'), ',', 1)),
                  current_setting('port'), current_database(), current_user)
$$;
CREATE FUNCTION pg_temp.open(name text) RETURNS int LANGUAGE plpgsql AS $$
DECLARE pid int;
BEGIN
    PERFORM dblink_connect(name, pg_temp.connstr());
    PERFORM dblink_exec(name, 'SET statement_timeout = ''20s''');
    SELECT p INTO pid FROM dblink(name, 'SELECT pg_backend_pid()') AS t(p int);
    RETURN pid;
END $$;
CREATE FUNCTION pg_temp.waits_on_lock(p_pid int, secs float8) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE deadline timestamptz := clock_timestamp() + secs * interval '1 second';
BEGIN
    LOOP
        PERFORM pg_stat_clear_snapshot();
        IF EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = p_pid AND wait_event_type = 'Lock') THEN
            RETURN true;
        END IF;
        IF clock_timestamp() > deadline THEN RETURN false; END IF;
        PERFORM pg_sleep(0.01);
    END LOOP;
END $$;
CREATE TEMP TABLE conn (name text PRIMARY KEY, pid int);
INSERT INTO conn SELECT n, pg_temp.open(n) FROM unnest(ARRAY['a', 'b']) AS n;
CREATE FUNCTION pg_temp.pid(n text) RETURNS int LANGUAGE sql AS $$ SELECT pid FROM conn WHERE name = n $$;

-- the receiver's own tables, as an example service would have them
CREATE TABLE accounts (id int PRIMARY KEY, balance numeric NOT NULL);
CREATE TABLE effects (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, key text NOT NULL);
INSERT INTO accounts VALUES (1, 100);
-- one request the way a receiver handles it: begin, effect, finish -> the answer
-- (a regular function: the dblink connections call it too)
CREATE FUNCTION handle(k text, req jsonb) RETURNS TABLE (duplicate boolean, status int, response jsonb)
LANGUAGE plpgsql AS $$
DECLARE b record; bal numeric;
BEGIN
    SELECT * INTO b FROM inbox.begin(k, req);
    IF b.duplicate THEN
        RETURN QUERY SELECT true, b.status, b.response; RETURN;
    END IF;
    UPDATE accounts SET balance = balance - (req->>'amount')::numeric WHERE id = (req->>'account')::int RETURNING balance INTO bal;
    INSERT INTO effects (key) VALUES (k);
    PERFORM inbox.finish(k, 200, jsonb_build_object('balance', bal));
    RETURN QUERY SELECT false, 200, jsonb_build_object('balance', bal);
END $$;

-- ---------------------------------------------------------------------------
SELECT has_table('inbox', 'processed', 'inbox.processed exists');
SELECT has_function('inbox', f, a, format('inbox.%s(%s) exists', f, array_to_string(a, ', ')))
  FROM (VALUES ('begin', ARRAY['text', 'jsonb']), ('try_begin', ARRAY['text', 'jsonb']),
               ('finish', ARRAY['text', 'integer', 'jsonb']), ('lookup', ARRAY['text']),
               ('prune', ARRAY['interval'])) AS v(f, a);

-- first delivery, then a duplicate: one effect, the same answer
SELECT results_eq($$SELECT * FROM handle('k1', '{"account": 1, "amount": 5}')$$,
                  $$VALUES (false, 200, '{"balance": 95}'::jsonb)$$, 'a new key: claimed, the effect, the answer');
SELECT results_eq($$SELECT * FROM handle('k1', '{"amount": 5, "account": 1}')$$,
                  $$VALUES (true, 200, '{"balance": 95}'::jsonb)$$,
                  'the same key and request again (keys in another order): the stored answer, duplicate = true');
SELECT results_eq($$SELECT * FROM handle('k1', '{ "account" : 1 , "amount" : 5 }')$$,
                  $$VALUES (true, 200, '{"balance": 95}'::jsonb)$$, '...and again (other whitespace)');
SELECT is((SELECT count(*)::int FROM effects WHERE key = 'k1'), 1, 'one effect for three deliveries');
SELECT is((SELECT balance FROM accounts WHERE id = 1), 95::numeric, 'the balance moved once');
SELECT throws_ok($$SELECT * FROM handle('k1', '{"account": 1, "amount": 6}')$$, 'IB001',
                 'inbox.begin: key ''k1'' was already used with a different request',
                 'the same key with another request: IB001');
SELECT is((SELECT count(*)::int FROM effects WHERE key = 'k1'), 1, '...and no effect');
SELECT results_eq($$SELECT status, response FROM inbox.lookup('k1')$$, $$VALUES (200, '{"balance": 95}'::jsonb)$$,
                  'lookup: the stored answer');
SELECT is_empty($$SELECT * FROM inbox.lookup('never-seen')$$, 'lookup of a key never processed: no row');

-- keys
SELECT throws_ok($$SELECT * FROM inbox.begin('', '{}')$$, 'IB004', NULL, 'an empty key: IB004');
SELECT throws_ok($$SELECT * FROM inbox.begin(NULL, '{}')$$, 'IB004', NULL, 'a NULL key: IB004');
SELECT throws_ok($$SELECT * FROM inbox.begin(repeat('k', 1025), '{}')$$, 'IB004', NULL, 'a key over 1024 bytes: IB004');
SELECT lives_ok($$SELECT inbox.finish(repeat('k', 1024), 200, '{}') FROM inbox.begin(repeat('k', 1024), '{}')$$,
                'a key of 1024 bytes is accepted');

-- misuse within one transaction
SELECT throws_ok($$SELECT inbox.finish('nobody-claimed', 200, '{}')$$, 'IB003',
                 'inbox.finish: key ''nobody-claimed'' was not claimed: call inbox.begin first, in this transaction',
                 'finish without a claim: IB003');
SELECT throws_ok($$SELECT inbox.finish('k1', 200, '{}')$$, 'IB003', 'inbox.finish: key ''k1'' already has an answer',
                 'finish of a key already answered: IB003');
SELECT throws_ok($$SELECT * FROM inbox.begin('k2', '{}') UNION ALL SELECT * FROM inbox.begin('k2', '{}')$$, 'IB003', NULL,
                 'begin twice for one key in one transaction: IB003');
SELECT throws_ok($$SELECT inbox.finish(k, NULL, '{}') FROM inbox.begin('k3', '{}'), (VALUES ('k3')) AS v(k)$$, '22023', NULL,
                 'finish with a NULL status: 22023');
SELECT throws_ok($$SELECT inbox.finish(k, 1000, '{}') FROM inbox.begin('k3', '{}'), (VALUES ('k3')) AS v(k)$$, '22023', NULL,
                 'finish with a status that is no HTTP status: 22023');

-- a business refusal is an answer too: stored, repeated
SELECT lives_ok($$SELECT inbox.finish('k4', 409, '{"error": "insufficient funds"}') FROM inbox.begin('k4', '{"amount": 1e9}')$$,
                'a refusal is finished like any answer');
SELECT results_eq($$SELECT * FROM inbox.begin('k4', '{"amount": 1e9}')$$,
                  $$VALUES (true, 409, '{"error": "insufficient funds"}'::jsonb)$$, 'a duplicate gets the same refusal');

-- ---------------------------------------------------------------------------
-- COMMIT: a claim without an answer does not commit, and takes the effect with it
SELECT dblink_exec('a', 'BEGIN') \g /dev/null
SELECT * FROM dblink('a', $$SELECT duplicate FROM inbox.begin('c1', '{"account": 1, "amount": 1}')$$) AS t(d boolean) \g /dev/null
SELECT dblink_exec('a', $$INSERT INTO effects (key) VALUES ('c1')$$) \g /dev/null
SELECT throws_ok($$SELECT dblink_exec('a', 'COMMIT')$$, 'IB003',
                 'inbox: key ''c1'' was claimed (inbox.begin) but has no answer (inbox.finish) at commit',
                 'COMMIT of a claim without an answer fails: IB003');
SELECT is((SELECT count(*)::int FROM effects WHERE key = 'c1'), 0, '...and its effect is rolled back with it');
SELECT is((SELECT count(*)::int FROM inbox.processed WHERE key = 'c1'), 0, '...and so is the claim');

-- a rolled-back claim leaves nothing: the next delivery processes the key
SELECT dblink_exec('a', 'BEGIN') \g /dev/null
SELECT * FROM dblink('a', $$SELECT duplicate FROM handle('r1', '{"account": 1, "amount": 1}')$$) AS t(d boolean) \g /dev/null
SELECT dblink_exec('a', 'ROLLBACK') \g /dev/null
SELECT results_eq($$SELECT duplicate FROM handle('r1', '{"account": 1, "amount": 1}')$$, $$VALUES (false)$$,
                  'after a rollback the key is new again');
SELECT is((SELECT count(*)::int FROM effects WHERE key = 'r1'), 1, 'one effect for r1');

-- ---------------------------------------------------------------------------
-- concurrent duplicates
CREATE TABLE res (who text, duplicate boolean, status int, response jsonb);
SELECT dblink_exec('a', 'BEGIN') \g /dev/null
SELECT dblink_exec('a', $$CREATE TEMP TABLE got AS SELECT duplicate FROM inbox.begin('d1', '{"account": 1, "amount": 2}')$$) \g /dev/null
SELECT dblink_exec('a', $$UPDATE accounts SET balance = balance - 2 WHERE id = 1; INSERT INTO effects (key) VALUES ('d1')$$) \g /dev/null
SELECT dblink_exec('b', 'BEGIN') \g /dev/null
SELECT is(dblink_send_query('b', $$SELECT * FROM inbox.begin('d1', '{"account": 1, "amount": 2}')$$), 1,
          'a duplicate arrives while the first is still in its transaction');
SELECT ok(pg_temp.waits_on_lock(pg_temp.pid('b'), 5), 'the duplicate waits for the first transaction');
SELECT * FROM dblink('a', $$SELECT inbox.finish('d1', 201, '{"done": true}')::text$$) AS t(x text) \g /dev/null
SELECT dblink_exec('a', 'COMMIT') \g /dev/null
INSERT INTO res SELECT 'b', * FROM dblink_get_result('b') AS t(duplicate boolean, status int, response jsonb);
SELECT * FROM dblink_get_result('b', false) AS t(duplicate boolean, status int, response jsonb) \g /dev/null
SELECT dblink_exec('b', 'COMMIT') \g /dev/null
SELECT results_eq($$SELECT duplicate, status, response FROM res WHERE who = 'b'$$, $$VALUES (true, 201, '{"done": true}'::jsonb)$$,
                  'once the first commits, the duplicate gets its answer');
SELECT is((SELECT count(*)::int FROM effects WHERE key = 'd1'), 1, 'one effect for the concurrent pair');

-- the first rolls back: the waiting duplicate claims the key
SELECT dblink_exec('a', 'BEGIN') \g /dev/null
SELECT dblink_exec('a', $$CREATE TEMP TABLE got2 AS SELECT duplicate FROM inbox.begin('d2', '{}')$$) \g /dev/null
SELECT dblink_exec('b', 'BEGIN') \g /dev/null
SELECT is(dblink_send_query('b', $$SELECT * FROM inbox.begin('d2', '{}')$$), 1, 'rollback: a duplicate is sent');
SELECT ok(pg_temp.waits_on_lock(pg_temp.pid('b'), 5), 'rollback: the duplicate waits');
SELECT dblink_exec('a', 'ROLLBACK') \g /dev/null
INSERT INTO res SELECT 'b2', * FROM dblink_get_result('b') AS t(duplicate boolean, status int, response jsonb);
SELECT * FROM dblink_get_result('b', false) AS t(duplicate boolean, status int, response jsonb) \g /dev/null
SELECT results_eq($$SELECT duplicate, status FROM res WHERE who = 'b2'$$, $$VALUES (false, NULL::int)$$,
                  'rollback: the duplicate claims the key itself (it will do the effect)');
SELECT throws_ok($$SELECT dblink_exec('b', 'COMMIT')$$, 'IB003', NULL,
                 'rollback: (b claimed d2 and commits without an answer: refused)');
SELECT is((SELECT count(*)::int FROM inbox.processed WHERE key = 'd2'), 0, 'rollback: nothing stored for d2');

-- try_begin: no long wait, IB002
SELECT dblink_exec('a', 'BEGIN') \g /dev/null
SELECT dblink_exec('a', $$CREATE TEMP TABLE got3 AS SELECT duplicate FROM inbox.begin('d3', '{}')$$) \g /dev/null
CREATE TEMP TABLE t0 AS SELECT clock_timestamp() AS t, current_setting('lock_timeout') AS lock_timeout;
SELECT throws_ok($$SELECT * FROM inbox.try_begin('d3', '{}')$$, 'IB002',
                 'inbox.try_begin: key ''d3'' is being processed by another transaction',
                 'try_begin while another transaction holds the key: IB002 (answer 409)');
SELECT ok((SELECT clock_timestamp() - t < interval '2 seconds' FROM t0), 'try_begin gave up quickly');
SELECT is(current_setting('lock_timeout'), (SELECT lock_timeout FROM t0), 'try_begin leaves the caller''s lock_timeout as it was');
SELECT * FROM dblink('a', $$SELECT inbox.finish('d3', 200, '{"n": 3}')::text$$) AS t(x text) \g /dev/null
SELECT dblink_exec('a', 'COMMIT') \g /dev/null
SELECT results_eq($$SELECT * FROM inbox.try_begin('d3', '{}')$$, $$VALUES (true, 200, '{"n": 3}'::jsonb)$$,
                  'try_begin of a finished key: the stored answer');

-- ---------------------------------------------------------------------------
-- prune
UPDATE inbox.processed SET created_at = now() - interval '3 days', finished_at = now() - interval '3 days' WHERE key = 'k4';
SELECT throws_ok($$SELECT inbox.prune('1 minute')$$, '22023', NULL, 'prune keeps answers for at least an hour');
SELECT is(inbox.prune('2 days'), 1::bigint, 'prune forgets answers older than the given age');
SELECT is((SELECT count(*)::int FROM inbox.processed WHERE key = 'k1'), 1, 'newer answers stay');

SELECT dblink_disconnect(name) FROM conn \g /dev/null
SELECT * FROM finish();
