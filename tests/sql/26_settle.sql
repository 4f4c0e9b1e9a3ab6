-- 26_settle: one settle step (migrations/0031_settle.sql; issue 25, item 2).
--   the rule       the functions that set an intent's state are classified here by what
--                  they may set; each that may set a final state calls outbox.settle, and
--                  no other function does. A new function that sets a state fails this
--                  file until it is added to one of the two lists.
--   every path     with outbox.settle wrapped by a spy, each path that makes intents final
--                  hands it exactly the ids it made final, with their states and groups,
--                  once per call: record (a mixed batch, a fenced-out outcome), resolve,
--                  cancel (also of a failed head), reject, cancel_run (several at once);
--                  outcomes that are not final (a retry, unknown) and refusals hand it
--                  nothing
--   its effect     a group moves on past succeeded and cancelled, not past failed
--   bad calls      arrays of different lengths, a state that is not final: 22023, said
-- One transaction, rolled back (the spy too).
BEGIN;
SELECT plan(30);

-- ---------------------------------------------------------------------------
-- the rule, read from the functions' source
--
-- An assignment to state: in the SET list of an UPDATE of outbox.intents (the text from
-- UPDATE to its first FROM, WHERE or RETURNING). The only INSERT into intents (enqueue)
-- writes pending or awaiting_approval.
CREATE FUNCTION pg_temp.set_lists(src text) RETURNS SETOF text LANGUAGE sql IMMUTABLE AS $$
    SELECT m[1] FROM regexp_matches(src, '(UPDATE\s+?outbox\.intents\M.*?\m(?:FROM|WHERE|RETURNING)\M)', 'gi') AS m $$;

CREATE TEMP VIEW sets_state AS
SELECT p.proname::text AS name, p.prosrc ~ '\moutbox\.settle\s*\(' AS calls_settle
  FROM pg_proc p
 WHERE p.pronamespace = 'outbox'::regnamespace
   AND EXISTS (SELECT 1 FROM pg_temp.set_lists(p.prosrc) AS l WHERE l ~* '(\mSET|,)\s*state\s*=');

SELECT set_eq($$SELECT name FROM sets_state$$,
              $$VALUES ('record'), ('resolve'), ('cancel'), ('cancel_run'), ('reject'),
                       ('approve'), ('claim'), ('claim_due'), ('redrive'), ('release'), ('retry_now')$$,
              'the functions that set an intent''s state are the ones classified here (a new one must be added)');
SELECT set_eq($$SELECT name FROM sets_state WHERE calls_settle$$,
              $$VALUES ('record'), ('resolve'), ('cancel'), ('cancel_run'), ('reject')$$,
              'those that may make an intent final (succeeded, failed, cancelled) call outbox.settle');
SELECT is_empty($$SELECT p.proname FROM pg_proc p
                   WHERE p.pronamespace = 'outbox'::regnamespace AND p.prosrc ~ '\moutbox\.settle\s*\('
                     AND p.proname NOT IN ('record', 'resolve', 'cancel', 'cancel_run', 'reject')$$,
                'no other function calls outbox.settle (approve, claims, releases, redrive and retry_now set live states)');
SELECT is_empty($$SELECT p.proname FROM pg_proc p
                   WHERE p.pronamespace = 'outbox'::regnamespace AND p.prosrc ~ '\moutbox\.ordering_release\s*\('
                     AND p.proname <> 'settle'$$,
                'groups are released by outbox.settle only');
SELECT ok(NOT has_function_privilege('public', 'outbox.settle(bigint[], outbox.intent_state[], text[], text[])', 'EXECUTE')
          AND NOT has_function_privilege('outbox_app', 'outbox.settle(bigint[], outbox.intent_state[], text[], text[])', 'EXECUTE')
          AND NOT has_function_privilege('outbox_relay', 'outbox.settle(bigint[], outbox.intent_state[], text[], text[])', 'EXECUTE'),
          'outbox.settle is internal: nobody outside the owner may call it');

-- ---------------------------------------------------------------------------
-- bad calls
SELECT throws_ok($$SELECT outbox.settle(ARRAY[1, 2]::bigint[], ARRAY['succeeded']::outbox.intent_state[], ARRAY[NULL, NULL]::text[])$$,
                 '22023', 'outbox.settle: 2 ids, 1 states and 2 groups: one of each per intent',
                 'arrays of different lengths are refused');
SELECT throws_ok($$SELECT outbox.settle(ARRAY[1]::bigint[], ARRAY['pending']::outbox.intent_state[], ARRAY[NULL]::text[])$$,
                 '22023', 'outbox.settle: only succeeded, failed or cancelled is final, got {pending}',
                 'a state that is not final is refused');

-- ---------------------------------------------------------------------------
-- every path, through a spy: outbox.settle logs each call, then does its work
CREATE TABLE public.settled (call int, id bigint, state text, grp text);
GRANT ALL ON public.settled TO PUBLIC;   -- the spy runs as whoever owns its caller
ALTER FUNCTION outbox.settle(bigint[], outbox.intent_state[], text[], text[]) RENAME TO settle_real;
CREATE FUNCTION outbox.settle(p_ids bigint[], p_states outbox.intent_state[], p_groups text[],
                              p_keys text[] DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    n int := (SELECT coalesce(max(call), 0) + 1 FROM public.settled);
BEGIN
    INSERT INTO public.settled SELECT n, x.id, x.state::text, x.grp FROM unnest(p_ids, p_states, p_groups) AS x(id, state, grp);
    PERFORM outbox.settle_real(p_ids, p_states, p_groups, p_keys);
END $$;
-- what the last call handed over: "key:state:group" in key order, or NULL when there was none since
CREATE FUNCTION pg_temp.last_settle() RETURNS text LANGUAGE sql AS $$
    SELECT string_agg(i.key || ':' || s.state || ':' || coalesce(s.grp, '-'), ' ' ORDER BY i.key)
      FROM public.settled s JOIN outbox.intents i ON i.id = s.id
     WHERE s.call = (SELECT max(call) FROM public.settled) AND s.call > coalesce(current_setting('t.seen', true), '0')::int $$;
CREATE FUNCTION pg_temp.seen() RETURNS void LANGUAGE sql AS $$
    SELECT set_config('t.seen', (SELECT coalesce(max(call), 0)::text FROM public.settled), false) $$;
CREATE FUNCTION pg_temp.calls() RETURNS bigint LANGUAGE sql AS $$ SELECT count(DISTINCT call) FROM public.settled $$;

INSERT INTO outbox.targets (name, url, backoff_base_ms) VALUES ('s', 'https://s.test/hook', 100);
INSERT INTO outbox.targets (name, url, approval_rule) VALUES ('sa', 'https://sa.test/hook', '$.amount > 100');

CREATE FUNCTION pg_temp.enq(k text, grp text DEFAULT NULL, tgt text DEFAULT 's', doc jsonb DEFAULT '{}',
                            run text DEFAULT NULL) RETURNS text
LANGUAGE sql AS $$ SELECT status FROM outbox.enqueue(k, tgt, doc || jsonb_build_object('k', k), run, p_ordering_key => grp) $$;
-- claimed as the relay claims: in flight, attempt + 1, leased by relay r
CREATE FUNCTION pg_temp.claimed(keys text[], r text DEFAULT 'r26') RETURNS void LANGUAGE sql AS $$
    UPDATE outbox.intents SET state = 'in_flight', attempts = attempts + 1, lease_owner = r,
                              lease_expires_at = now() + interval '30 s', first_attempt_at = coalesce(first_attempt_at, now())
     WHERE key = ANY (keys) $$;
-- one batch of outcomes as relay r records it: keys with their states (http 200 for succeeded, 500 else)
CREATE FUNCTION pg_temp.rec(keys text[], states outbox.intent_state[], r text DEFAULT 'r26') RETURNS int LANGUAGE sql AS $$
    SELECT outbox.record(r, array_agg(i.id ORDER BY x.n), array_agg(i.attempts ORDER BY x.n), array_agg(x.st ORDER BY x.n),
                         array_agg(0 ORDER BY x.n), array_agg(x.st = 'unknown' ORDER BY x.n),
                         array_agg(CASE x.st WHEN 'succeeded' THEN 'succeeded' WHEN 'failed' THEN 'permanent_failure'
                                             WHEN 'unknown' THEN 'ambiguous' ELSE 'retry_later' END::outbox.attempt_class ORDER BY x.n),
                         array_agg(true ORDER BY x.n),
                         array_agg(CASE WHEN x.st = 'succeeded' THEN 200 WHEN x.st = 'unknown' THEN NULL ELSE 500 END ORDER BY x.n),
                         array_agg(CASE WHEN x.st = 'succeeded' THEN NULL ELSE 'HTTP 500' END ORDER BY x.n),
                         array_agg(5 ORDER BY x.n), array_agg('{}'::text ORDER BY x.n), array_agg(true ORDER BY x.n))
      FROM unnest(keys, states) WITH ORDINALITY AS x(k, st, n) JOIN outbox.intents i ON i.key = x.k $$;
CREATE FUNCTION pg_temp.st(k text) RETURNS text LANGUAGE sql AS $$ SELECT state::text FROM outbox.intents WHERE key = k $$;
CREATE FUNCTION pg_temp.due(k text) RETURNS boolean LANGUAGE sql AS $$
    SELECT state = 'pending' AND next_attempt_at <= now() FROM outbox.intents WHERE key = k $$;

-- record: one batch with a success, a retry, an unknown and a failure; groups g1 (head
-- succeeds) and g2 (head fails), each with a held second step
SELECT pg_temp.enq('g1:1', 'g1'), pg_temp.enq('g1:2', 'g1'), pg_temp.enq('g2:1', 'g2'), pg_temp.enq('g2:2', 'g2'),
       pg_temp.enq('u:retry'), pg_temp.enq('u:unknown') \g /dev/null
SELECT pg_temp.claimed(ARRAY['g1:1', 'g2:1', 'u:retry', 'u:unknown']) \g /dev/null
SELECT pg_temp.seen() \g /dev/null
SELECT is(pg_temp.rec(ARRAY['g1:1', 'u:retry', 'u:unknown', 'g2:1'],
                      ARRAY['succeeded', 'pending', 'unknown', 'failed']::outbox.intent_state[]), 4,
          'record: a batch of four outcomes applied');
SELECT is(pg_temp.last_settle(), 'g1:1:succeeded:g1 g2:1:failed:g2',
          'record: one settle call with the two intents it made final, their states and groups (not the retry, not unknown)');
SELECT ok(pg_temp.due('g1:2'), 'record: the group whose head succeeded moved on');
SELECT ok(pg_temp.st('g2:2') = 'pending' AND NOT pg_temp.due('g2:2'), 'record: the group whose head failed waits');

-- record: an outcome fenced out (another relay's lease) settles nothing
SELECT pg_temp.claimed(ARRAY['u:retry'], 'r-other') \g /dev/null
SELECT pg_temp.seen() \g /dev/null
SELECT is(pg_temp.rec(ARRAY['u:retry'], ARRAY['succeeded']::outbox.intent_state[]), 0, 'record: a fenced-out outcome applies nothing');
SELECT is(pg_temp.last_settle(), NULL, 'record: and settles nothing');
-- a batch of only live outcomes: no call at all
SELECT pg_temp.seen() \g /dev/null
SELECT is(pg_temp.rec(ARRAY['u:retry'], ARRAY['pending']::outbox.intent_state[], 'r-other'), 1, 'record: a retry applied');
SELECT is(pg_temp.last_settle(), NULL, 'record: a batch with nothing final calls no settle');

-- resolve
SELECT pg_temp.enq('g3:1', 'g3'), pg_temp.enq('g3:2', 'g3') \g /dev/null
SELECT pg_temp.claimed(ARRAY['g3:1']) \g /dev/null
SELECT pg_temp.rec(ARRAY['g3:1'], ARRAY['unknown']::outbox.intent_state[]) \g /dev/null
SELECT pg_temp.seen() \g /dev/null
SELECT is(outbox.resolve('g3:1', 'succeeded', 'the target''s ledger shows it')::text, 'succeeded', 'resolve succeeded');
SELECT is(pg_temp.last_settle(), 'g3:1:succeeded:g3', 'resolve: settle gets the intent, succeeded, its group');
SELECT ok(pg_temp.due('g3:2'), 'resolve: its group moved on');
SELECT pg_temp.seen() \g /dev/null
SELECT is(outbox.resolve('u:unknown', 'failed', 'the target has no trace of it')::text, 'failed', 'resolve failed');
SELECT is(pg_temp.last_settle(), 'u:unknown:failed:-', 'resolve: settle gets the intent, failed, no group');

-- cancel: a pending intent; a failed head (its group moves on); a refusal settles nothing
SELECT pg_temp.enq('c:1') \g /dev/null
SELECT pg_temp.seen() \g /dev/null
SELECT outbox.cancel('c:1', 'not needed') \g /dev/null
SELECT is(pg_temp.last_settle(), 'c:1:cancelled:-', 'cancel: settle gets the intent, cancelled');
SELECT pg_temp.seen() \g /dev/null
SELECT outbox.cancel('g2:1', 'skip it') \g /dev/null
SELECT is(pg_temp.last_settle(), 'g2:1:cancelled:g2', 'cancel of a failed head: settle gets it, cancelled, with its group');
SELECT ok(pg_temp.due('g2:2'), 'cancel of a failed head: its group moved on');
SELECT pg_temp.seen() \g /dev/null
SELECT throws_ok($$SELECT outbox.cancel('g1:1')$$, 'OR007', NULL, 'cancel of a succeeded intent is refused');
SELECT is(pg_temp.last_settle(), NULL, 'a refused cancel settles nothing');

-- reject
SELECT pg_temp.enq('a:1', 'g4', 'sa', '{"amount": 500}'), pg_temp.enq('a:2', 'g4', 'sa', '{"amount": 1}') \g /dev/null
SELECT pg_temp.seen() \g /dev/null
SELECT outbox.reject('a:1', 'approver@example', 'too much') \g /dev/null
SELECT is(pg_temp.last_settle(), 'a:1:cancelled:g4', 'reject: settle gets the intent, cancelled, its group');
SELECT ok(pg_temp.due('a:2'), 'reject: its group moved on');

-- cancel_run: three intents of a run (one ordered) in one settle call; one sent and in
-- flight is left alone
SELECT pg_temp.enq('r:1', NULL, 's', '{}', 'run-9'), pg_temp.enq('r:2', NULL, 's', '{}', 'run-9'),
       pg_temp.enq('r:3', 'g5', 's', '{}', 'run-9'), pg_temp.enq('r:4', 'g5', 's', '{}', 'run-other'),
       pg_temp.enq('r:5', NULL, 's', '{}', 'run-9') \g /dev/null
SELECT pg_temp.claimed(ARRAY['r:5']) \g /dev/null
SELECT pg_temp.seen() \g /dev/null
SELECT is(outbox.cancel_run('run-9', 'abandoned'), 3, 'cancel_run cancels the three never sent');
SELECT is(pg_temp.last_settle() || ' / calls: ' || pg_temp.calls(), 'r:1:cancelled:- r:2:cancelled:- r:3:cancelled:g5 / calls: 7',
          'cancel_run: one settle call with all three, cancelled, with their groups');
SELECT ok(pg_temp.due('r:4'), 'cancel_run: the group moved on to the next run''s step');

SELECT * FROM finish();
ROLLBACK;
