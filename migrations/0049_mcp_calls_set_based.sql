-- 0049: the agent's call, set-based (issue 40, item 2).
--
-- After 0046 a batch of the front door's calls (outbox.mcp_calls) was one
-- transaction, but still mcp_call and enqueue_any per call: two SECURITY
-- DEFINER functions with SET search_path each (a GUC level pushed and popped
-- per call), eight statements started per call (the client, the tool, the
-- target's protocol, the key's intent, the INSERT, the tombstone, the idle
-- relays, relay_alive), and as many again for each call's wake-up look-up
-- (outbox.mcp_outcomes, mcp_answer_of per key). What the database did per
-- call, not what it wrote, was most of its CPU (docs/performance.md, "The
-- agent's call").
--
--   - outbox.mcp_calls: the calls that are plainly new (a known client and
--     tool, a key given, no task, no ordering key, no key from the
--     arguments, a key and a traceparent that pass enqueue's checks, a
--     payload within the target's limits, at READ COMMITTED) are inserted
--     by one INSERT for the whole batch, in the batch's order, and answered
--     from it: the same rows, fingerprints, states, NOTIFY and answers as
--     mcp_call and enqueue_any give them one by one. Every other call (a key
--     already used, a task, a refusal, a key its INSERT did not take, a key a
--     tombstone remembers) goes through mcp_call as before, after the
--     INSERT: its answer and its error are unchanged, and an error still
--     fails the whole batch (the front door then sends each call alone).
--     The target lock of 0010 is taken, shared, for the batch's targets
--     before the INSERT's statement begins, as enqueue takes it.
--   - outbox.mcp_outcomes: the keys whose intent is final (succeeded,
--     failed, cancelled: what a settle NOTIFY wakes a call for) are
--     answered by one query; the others by mcp_answer_of as before. Same
--     answers.
--   - Neither plans its set-based statements again per batch: a custom plan
--     (the arrays' lengths known) looked cheaper than the generic one and
--     was made for every call of the function; plan_cache_mode keeps the
--     generic plan for them.
--
-- synchronous_commit stays on (docs/performance.md says why).
--
-- Locks: none on tables (two functions replaced). Signatures, answers and
-- grants are unchanged: front doors and relays of 0046 and later work with
-- it, and it changes nothing for those before.

CREATE OR REPLACE FUNCTION outbox.mcp_calls(p_token_hashes bytea[], p_tools text[], p_keys text[], p_arguments jsonb[],
                                            p_run_ids text[], p_ordering_keys text[], p_traceparents text[],
                                            p_tasks boolean[], p_task_ttl_ms bigint[], p_argument_hashes bytea[])
RETURNS TABLE (ord integer, answer outbox.mcp_answer)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    n         integer := coalesce(cardinality(p_token_hashes), 0);
    pos       integer;
    flag      text;      -- set_config's answer, unused
    due       boolean;   -- a new intent is pending and due
    alive     boolean;
    f_ord     integer[]; -- the calls the INSERT took: their places,
    f_id      bigint[];  -- intents,
    f_key     text[];    -- intent keys,
    f_client  text[];
    f_target  text[];
    f_state   outbox.intent_state[];
    f_payload jsonb[];   -- (an intent held for approval: its payload, for the note)
    gone      bigint[];  -- inserted, but a tombstone remembers the key
    fast      integer[] := '{}';
    locked    text[];    -- the targets whose lock (0010) this batch holds
    plan_mode text := current_setting('plan_cache_mode');
BEGIN
    IF n > 256 OR coalesce(cardinality(p_tools), 0) <> n OR coalesce(cardinality(p_keys), 0) <> n
       OR coalesce(cardinality(p_arguments), 0) <> n OR coalesce(cardinality(p_run_ids), 0) <> n
       OR coalesce(cardinality(p_ordering_keys), 0) <> n OR coalesce(cardinality(p_traceparents), 0) <> n
       OR coalesce(cardinality(p_tasks), 0) <> n OR coalesce(cardinality(p_task_ttl_ms), 0) <> n
       OR coalesce(cardinality(p_argument_hashes), 0) <> n THEN
        RAISE EXCEPTION 'outbox.mcp_calls: the arrays must have the same length, at most 256 (% token hashes)', n
            USING ERRCODE = '22023';
    END IF;

    -- 0049: the plainly new calls, one INSERT. At READ COMMITTED only (the
    -- other levels take row locks first: mcp_call does). The target lock of
    -- 0010 first, in a statement of its own: the INSERT's snapshot then
    -- follows every guard that held the target.
    IF n > 0 AND current_setting('transaction_isolation') = 'read committed' THEN
        -- These statements' plans are kept: a custom plan sees the arrays'
        -- lengths, costs less than the generic one (which assumes 100
        -- calls), and would be made again for every batch.
        flag := set_config('plan_cache_mode', 'force_generic_plan', true);
        -- The targets locked are the targets inserted for: a tool pointed
        -- elsewhere since this look-up sends its calls through mcp_call.
        locked := ARRAY(SELECT DISTINCT m.target FROM outbox.mcp_tools m
                         WHERE m.tool = ANY (p_tools) AND m.enabled ORDER BY m.target);
        PERFORM pg_advisory_xact_lock_shared(1330774017, hashtext(l.target))
           FROM unnest(locked) WITH ORDINALITY AS l(target, o) ORDER BY l.o;
        flag := set_config('outbox.in_enqueue', 'on', true);   -- 0021: the INSERT trigger's WHEN
        WITH x AS (
            -- enqueue_any's checks, as filters: a call that fails one goes
            -- through mcp_call below, which raises what it raised alone
            SELECT DISTINCT ON (y.ikey) y.*
              FROM (SELECT u.o::integer AS o, c.name AS client, m.target, t.approval_rule, t.volatile_paths,
                           t.max_payload_bytes, t.protocol,
                           ('mcp:' || c.name || ':' || u.k) COLLATE "C" AS ikey,
                           'mcp:' || c.name || ':' || u.run AS run_id,
                           coalesce(u.trace, nullif(current_setting('outbox.traceparent', true), '')) AS trace,
                           p.payload, p.payload::text AS payload_text
                      FROM unnest(p_token_hashes, p_tools, p_keys, p_arguments, p_run_ids, p_ordering_keys,
                                  p_traceparents, p_tasks, p_argument_hashes)
                           WITH ORDINALITY AS u(h, tool, k, args, run, grp, trace, task, arg_hash, o)
                      JOIN outbox.mcp_clients c ON c.token_hash = u.h
                      JOIN outbox.mcp_tools m ON m.tool = u.tool AND m.enabled
                                             AND (c.tools IS NULL OR m.tool = ANY (c.tools))
                                             AND m.target = ANY (locked)
                      JOIN outbox.targets t ON t.name = m.target AND t.enabled
                     CROSS JOIN LATERAL (
                           -- 0037: an mcp target is called with the upstream tool's name and the arguments
                           SELECT CASE WHEN t.protocol = 'mcp'
                                       THEN jsonb_build_object('tool', coalesce(m.upstream_tool, m.tool),
                                                               'arguments', coalesce(u.args, '{}'::jsonb))
                                       ELSE coalesce(u.args, '{}'::jsonb) END) AS p(payload)
                     WHERE u.arg_hash IS NULL AND u.task IS NOT TRUE AND u.grp IS NULL AND u.k <> ''
                       -- a key an earlier call of the batch also names goes in the batch's
                       -- order, through mcp_call: the earlier call, fast or not, has it first
                       AND NOT EXISTS (SELECT 1 FROM unnest(p_token_hashes, p_keys) WITH ORDINALITY AS v(h, k, o)
                                         JOIN outbox.mcp_clients c2 ON c2.token_hash = v.h
                                        WHERE c2.name = c.name AND v.k = u.k AND v.o < u.o)) AS y
             WHERE octet_length(y.ikey) <= 255
               AND NOT y.ikey ~ '^ | $|^\.\.?$|[\u0001-\u001f\u007f-\u00a0\u00ad\u034f\u061c\u115f\u1160\u1680\u17b4\u17b5\u180b-\u180f\u2000-\u200f\u2028-\u202f\u205f-\u206f\u3000\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\ufffe\uffff\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]'
               AND (y.trace IS NULL OR (y.trace ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
                                        AND substr(y.trace, 4, 32) <> '00000000000000000000000000000000'
                                        AND substr(y.trace, 37, 16) <> '0000000000000000'))
               AND jsonb_typeof(y.payload) = 'object'
               AND octet_length(y.payload_text) <= y.max_payload_bytes
               AND 2 * octet_length(y.payload_text) - octet_length(replace(y.payload_text, '{', ''))
                     - octet_length(replace(y.payload_text, '[', '')) <= 100
               AND (y.protocol = 'http' OR outbox.mcp_payload_ok(y.payload))
             ORDER BY y.ikey, y.o
        ), ins AS (
            INSERT INTO outbox.intents AS it (key, target, payload, fingerprint, state, run_id, next_attempt_at,
                                              traceparent)
            SELECT x.ikey, x.target, x.payload,
                   CASE WHEN cardinality(x.volatile_paths) = 0
                             AND (strpos(x.payload_text, '.') = 0 OR x.payload_text !~ '[0-9]\.[0-9]*0')
                        THEN sha256(convert_to(x.payload_text, 'UTF8'))
                        ELSE outbox.fingerprint(x.payload, x.volatile_paths) END,
                   CASE WHEN x.approval_rule IS NOT NULL AND outbox.needs_approval(x.payload, x.approval_rule)
                        THEN 'awaiting_approval'::outbox.intent_state
                        ELSE 'pending'::outbox.intent_state END,
                   x.run_id, now(), x.trace
              FROM x
             ORDER BY x.o   -- the ids keep the front door's round robin
            ON CONFLICT (key) DO NOTHING
            RETURNING it.id, it.key, it.state, it.next_attempt_at
        )
        SELECT array_agg(x.o ORDER BY x.o), array_agg(ins.id ORDER BY x.o), array_agg(ins.key ORDER BY x.o),
               array_agg(x.client ORDER BY x.o), array_agg(x.target ORDER BY x.o),
               array_agg(ins.state ORDER BY x.o),
               array_agg(CASE WHEN ins.state = 'awaiting_approval' THEN x.payload END ORDER BY x.o),
               coalesce(bool_or(ins.state = 'pending' AND ins.next_attempt_at <= now()), false)
          INTO f_ord, f_id, f_key, f_client, f_target, f_state, f_payload, due
          FROM ins JOIN x ON x.ikey = ins.key;
        flag := set_config('outbox.in_enqueue', 'off', true);

        IF f_ord IS NOT NULL THEN
            -- 0012: a pruned key is remembered: its row goes, and its call
            -- goes through mcp_call, which answers from the tombstone.
            SELECT array_agg(g.id) INTO gone
              FROM unnest(f_id, f_key) AS g(id, key)
             WHERE EXISTS (SELECT 1 FROM outbox.tombstones s
                            WHERE s.key_hash = substring(sha256(convert_to(g.key, 'UTF8')) FROM 1 FOR 16)
                              AND s.forget_at > now());
            IF gone IS NOT NULL THEN
                DELETE FROM outbox.intents WHERE id = ANY (gone);
            END IF;
            IF due AND EXISTS (SELECT 1 FROM outbox.relays WHERE idle AND heartbeat_at > now() - interval '2 minutes') THEN
                PERFORM pg_notify('outbox_intents', '');
            END IF;
            alive := outbox.relay_alive();
            -- what mcp_call answers a new intent (no second look)
            RETURN QUERY
            SELECT f.o,
                   ROW(f.client, p_keys[f.o], f.key, p_tools[f.o], f.target, f.state::text, f.state, false, true,
                       NULL::integer, NULL::text, 0,
                       -- (mcp_message inlined: no argument that calls a function, 0046)
                       CASE WHEN f.state = 'awaiting_approval'
                            THEN outbox.mcp_message('awaiting_approval', outbox.mcp_held_by(f.target, f.payload), NULL)
                            ELSE outbox.mcp_message(f.state::text, CASE WHEN alive THEN 'waiting for delivery'
                                                                        ELSE 'no relay has claimed it yet: none is running' END,
                                                    NULL) END,
                       NULL::text[], NULL::text, NULL::timestamptz, NULL::bigint, now())::outbox.mcp_answer
              FROM unnest(f_ord, f_id, f_key, f_client, f_target, f_state, f_payload)
                   AS f(o, id, key, client, target, state, payload)
             WHERE gone IS NULL OR f.id <> ALL (gone)
             ORDER BY f.o;
            fast := ARRAY(SELECT f.o FROM unnest(f_ord, f_id) AS f(o, id) WHERE gone IS NULL OR f.id <> ALL (gone));
        END IF;
        flag := set_config('plan_cache_mode', plan_mode, true);   -- mcp_call below plans as before
    END IF;

    -- Every other call as it goes alone (0046).
    FOR pos IN 1 .. n LOOP
        CONTINUE WHEN pos = ANY (fast);
        ord := pos;
        answer := outbox.mcp_call(p_token_hashes[pos], p_tools[pos], p_keys[pos], p_arguments[pos], p_run_ids[pos],
                                  p_ordering_keys[pos], p_traceparents[pos], coalesce(p_tasks[pos], false),
                                  p_task_ttl_ms[pos], p_argument_hashes[pos]);
        RETURN NEXT;
    END LOOP;
END
$fn$;

-- plan_cache_mode: its look-up's plan is kept (as mcp_calls' INSERT above).
CREATE OR REPLACE FUNCTION outbox.mcp_outcomes(p_token_hashes bytea[], p_intent_keys text[]) RETURNS SETOF outbox.mcp_answer
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $fn$
DECLARE
    h        bytea;
    k        text;
    client   text;
    settled  outbox.mcp_answer[];
    answered integer[];
BEGIN
    IF cardinality(p_token_hashes) IS DISTINCT FROM cardinality(p_intent_keys) THEN
        RAISE EXCEPTION 'outbox.mcp_outcomes: % token hashes for % keys', cardinality(p_token_hashes),
                        cardinality(p_intent_keys)
            USING ERRCODE = '22023';
    END IF;
    -- 0049: the final ones in one query (mcp_answer_of's answer for them:
    -- no task asked for, the status is the state, the note the last error
    -- of a failed or cancelled one)
    SELECT array_agg(ROW(c.name, substr(x.k, length('mcp:' || c.name || ':') + 1), x.k, NULL::text, i.target,
                         i.state::text, i.state, true, false,
                         CASE WHEN i.state IN ('succeeded', 'failed') THEN i.response_status END,
                         CASE WHEN i.state IN ('succeeded', 'failed') THEN i.response_body END,
                         i.attempts,
                         outbox.mcp_message(i.state::text,
                                            CASE WHEN i.state IN ('failed', 'cancelled') THEN i.last_error END, NULL),
                         NULL::text[], NULL::text, NULL::timestamptz, NULL::bigint, i.updated_at)::outbox.mcp_answer
                     ORDER BY x.o),
           array_agg(x.o::integer)
      INTO settled, answered
      FROM unnest(p_token_hashes, p_intent_keys) WITH ORDINALITY AS x(h, k, o)
      JOIN outbox.mcp_clients c ON c.token_hash = x.h
      JOIN outbox.intents i ON i.key = x.k
     WHERE starts_with(x.k, 'mcp:' || c.name || ':') AND i.state IN ('succeeded', 'failed', 'cancelled');
    IF settled IS NOT NULL THEN
        RETURN QUERY SELECT * FROM unnest(settled);
    END IF;
    FOR h, k IN SELECT x.h, x.k FROM unnest(p_token_hashes, p_intent_keys) WITH ORDINALITY AS x(h, k, o)
                 WHERE answered IS NULL OR x.o <> ALL (answered) LOOP
        client := (SELECT c.name FROM outbox.mcp_clients c WHERE c.token_hash = h);
        CONTINUE WHEN client IS NULL OR NOT starts_with(k, 'mcp:' || client || ':');
        RETURN NEXT outbox.mcp_answer_of(client, substr(k, length('mcp:' || client || ':') + 1), NULL, false, false);
    END LOOP;
END
$fn$;
