-- 17_redrive: safe redrive (migrations/0014_redrive.sql; `outbox-relay redrive`).
--   outbox.attempt_may_have_executed: the whitelist of attempts known not to have executed
--   outbox.redrive(target, since, until, dry_run, limit, by) moves to pending exactly the failed
--     intents of the target settled in [since, until) with no attempt that may have executed:
--     never unknown, never failed with an ambiguous attempt (also one a status URL cleared),
--     nothing outside the window, nothing of another target, no other state
--   a fresh delivery: attempts 0, no first attempt, due now, no response, last_error into history;
--     a relay claims it as attempt 1 with a new first attempt
--   one history row per redriven intent: class resolved, by p_by or session_user, naming the
--     session user and the last error
--   the dry run lists the same rows and changes nothing; bounded by p_limit, oldest first
--   refusals: 22023 (arguments), OR002 (unknown target), OR007 (disabled target)
--   only outbox_admin may call it
-- Rows are made directly, as the superuser.
BEGIN;
SELECT plan(54);

INSERT INTO outbox.targets (name, url) VALUES ('hook', 'https://hook.test/in');
INSERT INTO outbox.targets (name, url) VALUES ('other', 'https://other.test/in');
INSERT INTO outbox.targets (name, url) VALUES ('many', 'https://many.test/in');
INSERT INTO outbox.targets (name, url, enabled) VALUES ('off', 'https://off.test/in', false);

-- mk KEY TARGET STATE SETTLED_AGO [AMBIGUOUS] [ATTEMPTS]: an intent settled (updated_at) that long ago.
CREATE FUNCTION pg_temp.mk(k text, tgt text, st outbox.intent_state, ago interval, amb boolean DEFAULT false,
                           n integer DEFAULT 1) RETURNS bigint
LANGUAGE sql AS $$
    INSERT INTO outbox.intents (key, target, payload, fingerprint, state, attempts, ambiguous, first_attempt_at,
                                next_attempt_at, updated_at, created_at, last_error, response_status, response_body)
    VALUES (k, tgt, jsonb_build_object('k', k), '\x00', st, n, amb, now() - ago - interval '1 hour',
            now() - ago, now() - ago, now() - ago - interval '2 hours',
            CASE WHEN st = 'failed' THEN 'HTTP 400' END, CASE WHEN st = 'failed' THEN 400 END,
            CASE WHEN st = 'failed' THEN '{"error": "bad"}' END)
    RETURNING id
$$;
-- att KEY CLASS SENT HTTP [RECORDED]: one attempts row of the key
CREATE FUNCTION pg_temp.att(k text, c outbox.attempt_class, sent boolean, http integer, rec boolean DEFAULT true)
RETURNS void LANGUAGE sql AS $$
    INSERT INTO outbox.attempts (intent_id, attempt, relay, class, request_sent, http_status, recorded, at)
    SELECT i.id, (SELECT count(*) + 1 FROM outbox.attempts a WHERE a.intent_id = i.id), 'relay-x', c, sent, http,
           rec, now() - interval '3 hours'
      FROM outbox.intents i WHERE i.key = k
$$;
CREATE FUNCTION pg_temp.st(k text) RETURNS text LANGUAGE sql AS $$ SELECT state::text FROM outbox.intents WHERE key = k $$;

SELECT has_function('outbox', 'redrive', ARRAY['text', 'timestamp with time zone', 'timestamp with time zone',
                                               'boolean', 'integer', 'text'],
                    'outbox.redrive(text, timestamptz, timestamptz, boolean, integer, text) exists');
SELECT ok((SELECT prosecdef AND 'search_path=pg_catalog, pg_temp' = ANY (proconfig) FROM pg_proc
            WHERE oid = 'outbox.redrive(text,timestamptz,timestamptz,boolean,integer,text)'::regprocedure),
          'redrive is SECURITY DEFINER with a pinned search_path');

-- ---------------------------------------------------------------------------
-- The rule, per attempts row.
SELECT set_eq(
    $$SELECT c::text, s, h FROM unnest(enum_range(NULL::outbox.attempt_class)) AS c,
             unnest(ARRAY[false, true, NULL]) AS s, unnest(ARRAY[NULL, 200, 400, 409, 422, 429, 500]) AS h
       WHERE NOT outbox.attempt_may_have_executed(c, s, h)$$,
    $$SELECT 'not_sent' AS c, false AS s, h FROM unnest(ARRAY[NULL, 200, 400, 409, 422, 429, 500]) AS h
      UNION ALL SELECT 'resolved', false, h FROM unnest(ARRAY[NULL, 200, 400, 409, 422, 429, 500]) AS h
      UNION ALL SELECT c, s, h FROM unnest(ARRAY['retry_later', 'key_conflict', 'permanent_failure']) AS c,
                                    unnest(ARRAY[false, true, NULL]) AS s, unnest(ARRAY[400, 409, 422, 429]) AS h$$,
    'known not executed: not_sent with nothing sent, a 4xx answer, a decision; nothing else');
SELECT ok(outbox.attempt_may_have_executed('ambiguous', false, NULL), 'ambiguous may have executed, even "not sent"');
SELECT ok(outbox.attempt_may_have_executed('ambiguous', NULL, NULL), 'a lease take-over (sent unknown) may have executed');
SELECT ok(outbox.attempt_may_have_executed('not_sent', NULL, NULL), 'not_sent with sent unknown: may have executed');
SELECT ok(outbox.attempt_may_have_executed('not_sent', true, NULL), 'not_sent that says it sent: may have executed');
SELECT ok(outbox.attempt_may_have_executed('permanent_failure', true, NULL), 'a 4xx class without a 4xx status: may have');
SELECT ok(outbox.attempt_may_have_executed('reconciled_not_executed', true, 404),
          'a status check that cleared a doubt: still counts (it follows an ambiguous attempt)');
SELECT ok(NOT has_function_privilege('outbox_admin', 'outbox.attempt_may_have_executed(outbox.attempt_class,boolean,integer)', 'EXECUTE'),
          'the rule itself is internal (redrive applies it)');

-- ---------------------------------------------------------------------------
-- The rows. Window: [now() - 1 hour, now() - 1 minute).
-- safe: moved
SELECT pg_temp.mk('s-400', 'hook', 'failed', '30 minutes') \g /dev/null
SELECT pg_temp.att('s-400', 'permanent_failure', true, 400);
SELECT pg_temp.mk('s-refused', 'hook', 'failed', '20 minutes', false, 3) \g /dev/null
SELECT pg_temp.att('s-refused', 'not_sent', false, NULL) FROM generate_series(1, 3);
SELECT pg_temp.mk('s-mixed', 'hook', 'failed', '10 minutes', false, 4) \g /dev/null
SELECT pg_temp.att('s-mixed', 'resolved', false, NULL);            -- approved by a person
SELECT pg_temp.att('s-mixed', 'not_sent', false, NULL);
SELECT pg_temp.att('s-mixed', 'retry_later', true, 429);
SELECT pg_temp.att('s-mixed', 'retry_later', true, 409);
SELECT pg_temp.att('s-mixed', 'key_conflict', true, 422);
SELECT pg_temp.mk('s-at-since', 'hook', 'failed', '1 hour') \g /dev/null
SELECT pg_temp.att('s-at-since', 'permanent_failure', true, 403);
-- not moved: doubt
SELECT pg_temp.mk('u-unknown', 'hook', 'unknown', '15 minutes', true) \g /dev/null
SELECT pg_temp.att('u-unknown', 'ambiguous', true, NULL);
SELECT pg_temp.mk('u-unknown-plain', 'hook', 'unknown', '15 minutes', false) \g /dev/null
SELECT pg_temp.att('u-unknown-plain', 'not_sent', false, NULL);
SELECT pg_temp.mk('f-resolved', 'hook', 'failed', '25 minutes', true, 2) \g /dev/null
SELECT pg_temp.att('f-resolved', 'ambiguous', true, 500);
SELECT pg_temp.att('f-resolved', 'permanent_failure', true, 400);
SELECT pg_temp.att('f-resolved', 'resolved', false, NULL);
SELECT pg_temp.mk('f-reconciled', 'hook', 'failed', '24 minutes', false, 2) \g /dev/null
SELECT pg_temp.att('f-reconciled', 'ambiguous', true, NULL);
SELECT pg_temp.att('f-reconciled', 'reconciled_not_executed', true, 404);
SELECT pg_temp.att('f-reconciled', 'permanent_failure', true, 400);
SELECT pg_temp.mk('f-takeover', 'hook', 'failed', '23 minutes', false, 2) \g /dev/null
SELECT pg_temp.att('f-takeover', 'ambiguous', NULL, NULL);
SELECT pg_temp.att('f-takeover', 'not_sent', false, NULL);
SELECT pg_temp.mk('f-late', 'hook', 'failed', '22 minutes', false, 2) \g /dev/null
SELECT pg_temp.att('f-late', 'not_sent', false, NULL);
SELECT pg_temp.att('f-late', 'ambiguous', true, NULL, false);     -- a late outcome, fenced out
SELECT pg_temp.mk('f-sent-unknown', 'hook', 'failed', '21 minutes') \g /dev/null
SELECT pg_temp.att('f-sent-unknown', 'not_sent', NULL, NULL);
SELECT pg_temp.mk('f-flagged', 'hook', 'failed', '19 minutes', true) \g /dev/null
SELECT pg_temp.att('f-flagged', 'permanent_failure', true, 400);
-- not moved: outside the window, another target, another state
SELECT pg_temp.mk('o-before', 'hook', 'failed', '2 hours') \g /dev/null
SELECT pg_temp.att('o-before', 'permanent_failure', true, 400);
SELECT pg_temp.mk('o-at-until', 'hook', 'failed', '1 minute') \g /dev/null
SELECT pg_temp.att('o-at-until', 'permanent_failure', true, 400);
SELECT pg_temp.mk('o-after', 'hook', 'failed', '10 seconds') \g /dev/null
SELECT pg_temp.att('o-after', 'permanent_failure', true, 400);
SELECT pg_temp.mk('x-other', 'other', 'failed', '30 minutes') \g /dev/null
SELECT pg_temp.att('x-other', 'permanent_failure', true, 400);
SELECT pg_temp.mk('x-succeeded', 'hook', 'succeeded', '30 minutes') \g /dev/null
SELECT pg_temp.att('x-succeeded', 'succeeded', true, 200);
SELECT pg_temp.mk('x-cancelled', 'hook', 'cancelled', '30 minutes', false, 0) \g /dev/null
SELECT pg_temp.mk('x-pending', 'hook', 'pending', '30 minutes') \g /dev/null
SELECT pg_temp.att('x-pending', 'not_sent', false, NULL);

CREATE TEMP TABLE before_rows AS SELECT * FROM outbox.intents;
CREATE TEMP TABLE before_attempts AS SELECT * FROM outbox.attempts;

-- ---------------------------------------------------------------------------
-- Dry run: the list, nothing changed.
SELECT results_eq(
    $$SELECT key, target, settled_at, attempts, last_error
        FROM outbox.redrive('hook', now() - interval '1 hour', now() - interval '1 minute', true)$$,
    $$VALUES ('s-at-since'::text, 'hook'::text, now() - interval '1 hour', 1, 'HTTP 400'::text),
             ('s-400', 'hook', now() - interval '30 minutes', 1, 'HTTP 400'),
             ('s-refused', 'hook', now() - interval '20 minutes', 3, 'HTTP 400'),
             ('s-mixed', 'hook', now() - interval '10 minutes', 4, 'HTTP 400')$$,
    'dry run: exactly the safe failed rows of the target in [since, until), oldest settled first');
SELECT is_empty($$SELECT * FROM outbox.intents EXCEPT SELECT * FROM before_rows$$, 'dry run: no intent changed');
SELECT is((SELECT count(*) FROM outbox.attempts), (SELECT count(*) FROM before_attempts), 'dry run: no history row');
SELECT results_eq(
    $$SELECT key FROM outbox.redrive('hook', now() - interval '1 hour', now() - interval '1 minute', true, 2)$$,
    $$VALUES ('s-at-since'::text), ('s-400')$$, 'dry run with a limit: the oldest ones');

-- ---------------------------------------------------------------------------
-- The redrive.
SELECT results_eq(
    $$SELECT key, target, settled_at, attempts, last_error
        FROM outbox.redrive('hook', now() - interval '1 hour', now() - interval '1 minute', false, 10000, 'alice')$$,
    $$VALUES ('s-at-since'::text, 'hook'::text, now() - interval '1 hour', 1, 'HTTP 400'::text),
             ('s-400', 'hook', now() - interval '30 minutes', 1, 'HTTP 400'),
             ('s-refused', 'hook', now() - interval '20 minutes', 3, 'HTTP 400'),
             ('s-mixed', 'hook', now() - interval '10 minutes', 4, 'HTTP 400')$$,
    'redrive returns the rows it moved: those the dry run listed');
SELECT set_eq($$SELECT key COLLATE "default" FROM outbox.intents WHERE state = 'pending' AND key LIKE 's-%'$$,
              $$VALUES ('s-at-since'), ('s-400'), ('s-refused'), ('s-mixed')$$,
              'the safe rows are pending');
SELECT results_eq(
    $$SELECT count(*)::int FROM outbox.intents
       WHERE key LIKE 's-%' AND state = 'pending' AND next_attempt_at = now() AND attempts = 0
         AND first_attempt_at IS NULL AND lease_owner IS NULL AND response_status IS NULL
         AND response_body IS NULL AND last_error IS NULL AND NOT ambiguous AND updated_at = now()$$,
    $$VALUES (4)$$,
    'a fresh delivery: due now, attempts 0, no first attempt, no response, no last error');
SELECT is_empty(
    $$SELECT * FROM outbox.intents WHERE key NOT LIKE 's-%'
      EXCEPT SELECT * FROM before_rows$$,
    'no other row changed: unknown, failed with doubt, outside the window, another target, other states');
SELECT results_eq(
    $$SELECT key COLLATE "default", state::text FROM outbox.intents WHERE key NOT LIKE 's-%' ORDER BY key$$,
    $$VALUES ('f-flagged'::text, 'failed'::text), ('f-late', 'failed'), ('f-reconciled', 'failed'),
             ('f-resolved', 'failed'), ('f-sent-unknown', 'failed'), ('f-takeover', 'failed'),
             ('o-after', 'failed'), ('o-at-until', 'failed'), ('o-before', 'failed'),
             ('u-unknown', 'unknown'), ('u-unknown-plain', 'unknown'),
             ('x-cancelled', 'cancelled'), ('x-other', 'failed'), ('x-pending', 'pending'),
             ('x-succeeded', 'succeeded')$$,
    'unknown stays unknown; a failed row with an attempt that may have executed stays failed');
SELECT is((SELECT status FROM outbox.outcome('s-400')), 'pending', 'the agent sees pending again');

-- History.
SELECT results_eq(
    $$SELECT i.key COLLATE "default", a.attempt, a.relay, a.class::text, a.request_sent, a.http_status, a.key_sent, a.recorded, a.at
        FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
       WHERE a.id NOT IN (SELECT id FROM before_attempts) ORDER BY i.key$$,
    $$VALUES ('s-400'::text, 1, 'alice'::text, 'resolved'::text, false, NULL::int, NULL::boolean, true, now()),
             ('s-at-since', 1, 'alice', 'resolved', false, NULL, NULL, true, now()),
             ('s-mixed', 4, 'alice', 'resolved', false, NULL, NULL, true, now()),
             ('s-refused', 3, 'alice', 'resolved', false, NULL, NULL, true, now())$$,
    'one history row per redriven intent: class resolved, by p_by, numbered as the attempts before');
SELECT matches(
    (SELECT a.error FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
      WHERE i.key = 's-refused' AND a.class = 'resolved'),
    '^redriven by alice \(session user postgres\): failed -> pending, a fresh delivery \(settled \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ after 3 attempt\(s\), none of which may have executed; counted from 0 again\); last error: HTTP 400$',
    'the history row names the person and the session user, the settle time, the attempts before and the last error');
SELECT results_eq(
    $$SELECT a.class::text FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
       WHERE i.key = 's-refused' ORDER BY a.id$$,
    $$VALUES ('not_sent'::text), ('not_sent'), ('not_sent'), ('resolved')$$,
    'the key''s history reads as one life: the attempts, then the redrive');

-- Again: nothing left.
SELECT is_empty($$SELECT * FROM outbox.redrive('hook', now() - interval '1 hour', now() - interval '1 minute')$$,
                'a second redrive of the window moves nothing');

-- A relay takes them as first attempts with a new horizon.
SELECT results_eq(
    $$SELECT key, attempt, ambiguous FROM outbox.claim('r1', ARRAY['hook'], ARRAY[100], 100, 30000)
       WHERE key LIKE 's-%' ORDER BY key$$,
    $$VALUES ('s-400'::text, 1, false), ('s-at-since', 1, false), ('s-mixed', 1, false), ('s-refused', 1, false)$$,
    'a relay claims them as attempt 1, not ambiguous');
SELECT is((SELECT count(*)::int FROM outbox.intents WHERE key LIKE 's-%' AND first_attempt_at = now()), 4,
          'the claim starts a new first attempt: the retry horizon runs from the redrive');

-- A failed redriven row that fails again (a 4xx) can be redriven again.
UPDATE outbox.intents SET state = 'failed', lease_owner = NULL, lease_expires_at = NULL, last_error = 'HTTP 404',
                          updated_at = now() - interval '5 minutes'
 WHERE key = 's-400';
SELECT pg_temp.att('s-400', 'permanent_failure', true, 404);
SELECT results_eq($$SELECT key, attempts, last_error FROM outbox.redrive('hook', now() - interval '6 minutes', now() - interval '4 minutes')$$,
                  $$VALUES ('s-400'::text, 1, 'HTTP 404'::text)$$,
                  'redriven before, failed again with a 4xx: redriven again (its own redrive row is no doubt)');
SELECT is((SELECT a.relay FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
            WHERE i.key = 's-400' ORDER BY a.id DESC LIMIT 1), 'postgres', 'without p_by: the session user');

-- ---------------------------------------------------------------------------
-- The limit: oldest first, the rest on the next call.
SELECT pg_temp.mk('m-' || g, 'many', 'failed', (40 - g) * interval '1 minute') FROM generate_series(1, 3) g \g /dev/null
SELECT pg_temp.att('m-' || g, 'not_sent', false, NULL) FROM generate_series(1, 3) g;
SELECT results_eq($$SELECT key FROM outbox.redrive('many', now() - interval '1 day', now(), false, 2, 'bob')$$,
                  $$VALUES ('m-1'::text), ('m-2')$$, 'p_limit 2: the two oldest');
SELECT is(pg_temp.st('m-3'), 'failed', 'the third waits');
SELECT results_eq($$SELECT key FROM outbox.redrive('many', now() - interval '1 day', now(), false, 2, 'bob')$$,
                  $$VALUES ('m-3'::text)$$, 'the next call takes the rest');
SELECT is((SELECT count(*)::int FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
            WHERE i.target = 'many' AND a.class = 'resolved' AND a.relay = 'bob'), 3,
          'one history row each, no more');

-- another target, by its own name
SELECT results_eq($$SELECT key FROM outbox.redrive('other', now() - interval '1 hour', now())$$,
                  $$VALUES ('x-other'::text)$$, 'the other target''s row, by its own redrive');

-- ---------------------------------------------------------------------------
-- Refusals.
SELECT throws_ok($$SELECT * FROM outbox.redrive('hook', now(), now() - interval '1 hour')$$, '22023', NULL,
                 'since after until: 22023');
SELECT throws_ok($$SELECT * FROM outbox.redrive('hook', now(), now())$$, '22023', NULL, 'an empty window: 22023');
SELECT throws_ok($$SELECT * FROM outbox.redrive(NULL, now() - interval '1 hour', now())$$, '22023', NULL,
                 'no target: 22023');
SELECT throws_ok($$SELECT * FROM outbox.redrive('hook', NULL, now())$$, '22023', NULL, 'no since: 22023');
SELECT throws_ok($$SELECT * FROM outbox.redrive('hook', now() - interval '1 hour', NULL)$$, '22023', NULL,
                 'no until: 22023');
SELECT throws_ok($$SELECT * FROM outbox.redrive('hook', now() - interval '1 hour', now(), NULL)$$, '22023', NULL,
                 'dry_run NULL: 22023');
SELECT throws_ok($$SELECT * FROM outbox.redrive('hook', now() - interval '1 hour', now(), false, 0)$$, '22023',
                 'outbox.redrive: limit must be between 1 and 1000000, got 0', 'limit 0: 22023');
SELECT throws_ok($$SELECT * FROM outbox.redrive('hook', now() - interval '1 hour', now(), false, 1000001)$$, '22023',
                 NULL, 'limit over a million: 22023');
SELECT throws_ok($$SELECT * FROM outbox.redrive('nope', now() - interval '1 hour', now())$$, 'OR002',
                 'outbox.redrive: unknown target ''nope''', 'an unknown target: OR002');
SELECT pg_temp.mk('d-1', 'off', 'failed', '5 minutes') \g /dev/null
SELECT pg_temp.att('d-1', 'permanent_failure', true, 400);
SELECT throws_ok($$SELECT * FROM outbox.redrive('off', now() - interval '1 hour', now())$$, 'OR007',
                 'outbox.redrive: target ''off'' is disabled: nothing would be sent', 'a disabled target: OR007');
SELECT throws_ok($$SELECT * FROM outbox.redrive('off', now() - interval '1 hour', now(), true)$$, 'OR007', NULL,
                 'also for the dry run: it lists what a redrive would move');
SELECT is(pg_temp.st('d-1'), 'failed', 'the refused row is unchanged');
UPDATE outbox.targets SET enabled = true WHERE name = 'off';
SELECT results_eq($$SELECT key FROM outbox.redrive('off', now() - interval '1 hour', now())$$,
                  $$VALUES ('d-1'::text)$$, 'once enabled, it goes');

-- ---------------------------------------------------------------------------
-- Roles: outbox_admin only.
SELECT pg_temp.mk('r-1', 'hook', 'failed', '5 minutes') \g /dev/null
SELECT pg_temp.att('r-1', 'permanent_failure', true, 400);
SET ROLE outbox_operator;
SELECT throws_ok($$SELECT * FROM outbox.redrive('hook', now() - interval '1 hour', now(), true)$$, '42501',
                 'permission denied for function redrive', 'an operator cannot redrive, not even a dry run');
RESET ROLE;
SET ROLE outbox_app;
SELECT throws_ok($$SELECT * FROM outbox.redrive('hook', now() - interval '1 hour', now())$$, '42501',
                 'permission denied for function redrive', 'the app cannot redrive');
RESET ROLE;
SET ROLE outbox_relay;
SELECT throws_ok($$SELECT * FROM outbox.redrive('hook', now() - interval '1 hour', now())$$, '42501',
                 'permission denied for function redrive', 'a relay cannot redrive');
RESET ROLE;
SET ROLE outbox_admin;
SELECT results_eq($$SELECT key FROM outbox.redrive('hook', now() - interval '6 minutes', now() - interval '4 minutes', true)$$,
                  $$VALUES ('r-1'::text)$$, 'an admin can: dry run');
SELECT results_eq($$SELECT key FROM outbox.redrive('hook', now() - interval '6 minutes', now() - interval '4 minutes', false, 10, 'carol')$$,
                  $$VALUES ('r-1'::text)$$, 'an admin can: redrive');
RESET ROLE;
SELECT is(pg_temp.st('r-1'), 'pending', 'the admin''s redrive took effect');
SELECT ok((SELECT a.error LIKE 'redriven by carol (session user ' || session_user || ')%'
             FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id
            WHERE i.key = 'r-1' AND a.class = 'resolved'),
          'the history row names the session user, not the function''s owner');
SELECT ok(NOT has_function_privilege('public', 'outbox.redrive(text,timestamptz,timestamptz,boolean,integer,text)', 'EXECUTE'),
          'PUBLIC cannot execute redrive');

SELECT * FROM finish();
ROLLBACK;
