-- 0046: the agent's call at the database's floor (issue 40, item 2).
--
-- What a tools/call cost PostgreSQL was mostly not the insert. Measured per
-- call (pg_stat_user_functions, the backend's CPU from /proc): a
-- transaction of its own with its commit's WAL flush, the plpgsql
-- expressions of mcp_call and enqueue_any set up again in every
-- transaction, and two SQL functions parsed and planned again in every
-- call's transaction (a SQL function that is not inlined keeps no plan
-- across transactions):
--   - outbox.relay_alive(), LANGUAGE sql with SET search_path (a SET keeps a
--     function from being inlined): now plpgsql, whose plan is kept for the
--     session. Same signature and answer.
--   - outbox.mcp_message(...), called by mcp_call with an argument that calls
--     functions (so not inlined): mcp_call now computes that note into a
--     variable first. Same answers.
-- And a new function, outbox.mcp_calls, for the front door: the calls that
-- wait for a database connection at the same moment go in one statement and
-- one transaction (one commit, expressions set up once), each exactly as
-- outbox.mcp_call would have answered it alone. The front door sends a call
-- alone when it waited alone, and every call of a batch alone again when the
-- batch failed (nothing of it was committed).
--
-- synchronous_commit stays on for these transactions: an enqueue a target
-- may act on must survive a crash (docs/performance.md).
--
-- Locks: none on tables (functions replaced and one created). Relays and
-- front doors of 0.1.0 and of 0044 call relay_alive and mcp_call as before
-- and do not call mcp_calls.

CREATE OR REPLACE FUNCTION outbox.relay_alive()
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM outbox.relays WHERE heartbeat_at > now() - interval '2 minutes');
END
$$;

CREATE OR REPLACE FUNCTION outbox.mcp_call(p_token_hash bytea, p_tool text, p_key text, p_arguments jsonb, p_run_id text, p_ordering_key text, p_traceparent text, p_task boolean, p_task_ttl_ms bigint, p_argument_hash bytea) RETURNS outbox.mcp_answer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    c      outbox.mcp_clients;
    m      outbox.mcp_tools;
    r      outbox.enqueue_result;
    a      outbox.mcp_answer;
    ikey   text;
    args   jsonb := coalesce(p_arguments, '{}'::jsonb);
    existing_payload jsonb;
    existing_target  text;
    existing_group   text;
    stone  outbox.tombstones;
    fields text[] := '{}';
    why    text[] := '{}';
    others text;
    grp    text;
    run    text;
    derived boolean := p_argument_hash IS NOT NULL;
    call_key text := p_key;
    note   text;   -- 0046: the message's note, so that mcp_message is inlined
BEGIN
    SELECT * INTO c FROM outbox.mcp_clients WHERE token_hash = p_token_hash;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'outbox.mcp_call: unknown client' USING ERRCODE = 'OR022';
    END IF;
    SELECT * INTO m FROM outbox.mcp_tools
     WHERE tool = p_tool AND enabled AND (c.tools IS NULL OR tool = ANY (c.tools));
    IF NOT FOUND THEN
        RAISE EXCEPTION 'outbox.mcp_call: no tool % for client %', quote_literal(p_tool), quote_literal(c.name)
            USING ERRCODE = 'OR023';
    END IF;
    -- 0037: an mcp target is called with the upstream tool's name and the arguments.
    IF (SELECT t.protocol FROM outbox.targets t WHERE t.name = m.target) = 'mcp' THEN
        args := jsonb_build_object('tool', coalesce(m.upstream_tool, m.tool), 'arguments', args);
    END IF;
    -- 0040: a key from the arguments (p_argument_hash, the SHA-256 of their
    -- canonical form without volatile properties, written by the front
    -- door): the key of their window. With p_key too, p_key is the key the
    -- front door derived so earlier in this same call (a task made after the
    -- wait). Either way, an intent of that key is the call's, whatever its
    -- volatile properties said: the first call's arguments stand.
    IF derived THEN
        IF m.key_source <> 'arguments' THEN
            RAISE EXCEPTION 'outbox.mcp_call: no idempotency key (tool % takes keys from %, not from the arguments)',
                            quote_literal(p_tool), m.key_source
                USING ERRCODE = 'OR004';
        END IF;
        IF octet_length(p_argument_hash) <> 32 THEN
            RAISE EXCEPTION 'outbox.mcp_call: an argument hash is 32 bytes (SHA-256), not %',
                            octet_length(p_argument_hash)
                USING ERRCODE = '22023';
        END IF;
        IF call_key IS NULL OR call_key = '' THEN
            call_key := outbox.mcp_argument_key(c.name, m.tool, m.argument_window, p_argument_hash);
        END IF;
    END IF;
    IF call_key IS NULL OR call_key = '' THEN
        RAISE EXCEPTION 'outbox.mcp_call: no idempotency key' USING ERRCODE = 'OR004';
    END IF;
    ikey := 'mcp:' || c.name || ':' || call_key;
    -- A client's ordering groups and runs are its own, like its keys: another
    -- client naming the same group neither waits behind it nor holds it.
    grp := 'mcp:' || c.name || ':' || p_ordering_key;
    run := 'mcp:' || c.name || ':' || p_run_id;
    IF octet_length(ikey) > 255 THEN
        RAISE EXCEPTION 'the idempotency key is % bytes long; the limit for client % is % bytes',
                        octet_length(call_key), quote_literal(c.name), 255 - octet_length(ikey) + octet_length(call_key)
            USING ERRCODE = 'OR004';
    END IF;
    -- The same call again (the same key and arguments): its answer, with no
    -- enqueue. A new key: enqueue, with no subtransaction (a concurrent call
    -- of the same key with other arguments then raises OR001 to the caller,
    -- which answers key_conflict). Other arguments for a known key: enqueue
    -- decides (volatile fields, keep_original), and OR001 is caught here to
    -- name what differs.
    SELECT i.payload, i.target, i.ordering_key INTO existing_payload, existing_target, existing_group
      FROM outbox.intents i WHERE i.key = ikey;
    IF derived AND (FOUND OR (outbox.tombstone_of(ikey)).key_hash IS NOT NULL) THEN
        r.inserted := false;   -- the first call's intent (or what its tombstone remembers): no enqueue
    ELSIF FOUND AND existing_payload = args AND existing_target = m.target
       AND existing_group IS NOT DISTINCT FROM grp AND NOT p_task THEN
        RETURN outbox.mcp_answer_of(c.name, call_key, p_tool, false, false);
    ELSIF existing_payload IS NULL THEN
        r := outbox.enqueue_any(ikey, m.target, args, run, NULL, grp, p_traceparent);
    ELSE BEGIN
        r := outbox.enqueue_any(ikey, m.target, args, run, NULL, grp, p_traceparent);
    EXCEPTION WHEN SQLSTATE 'OR001' THEN
        a.client := c.name;
        a.key := call_key;
        a.intent_key := ikey;
        a.tool := p_tool;
        a.target := m.target;
        a.status := 'key_conflict';
        a.final := true;
        a.inserted := false;
        SELECT i.payload, i.target, i.ordering_key INTO existing_payload, existing_target, existing_group
          FROM outbox.intents i WHERE i.key = ikey;
        IF NOT FOUND THEN   -- pruned since: what its tombstone remembers
            stone := outbox.tombstone_of(ikey);
            existing_target := stone.target;
            existing_group := grp;
        END IF;
        -- 0036: another tool (its target differs), another ordering group,
        -- then the arguments' fields.
        IF existing_target IS DISTINCT FROM m.target THEN
            fields := fields || 'tool'::text;
            others := (SELECT string_agg(quote_literal(t.tool), ' or ' ORDER BY t.tool) FROM outbox.mcp_tools t
                        WHERE t.target = existing_target AND (c.tools IS NULL OR t.tool = ANY (c.tools)));
            why := why || ('it was used with another tool' || coalesce(' (' || others || ')', '') || ', not '
                           || quote_literal(p_tool));
        END IF;
        IF existing_group IS DISTINCT FROM grp THEN
            fields := fields || 'ordering_key'::text;
            why := why || ('it was used ' || CASE WHEN existing_group IS NULL THEN 'without an ordering key'
                                                  ELSE 'with another ordering key' END);
        END IF;
        IF existing_payload IS NOT NULL AND existing_payload <> args THEN
            fields := fields || outbox.differing_fields(existing_payload, args);
            why := why || ('it was used with other arguments'
                           || coalesce(' (fields that differ: '
                                       || array_to_string(outbox.differing_fields(existing_payload, args), ', ') || ')', ''));
        END IF;
        a.conflict_fields := nullif(fields, '{}');
        a.message := 'key_conflict: this key was already used for another action: '
                     || coalesce(nullif(array_to_string(why, '; '), ''), 'it was used with other arguments')
                     || '; nothing was sent. Use the same tool and arguments, or a new key for a new action.';
        RETURN a;
    END;
    END IF;
    IF p_task THEN
        -- 0036: an expired task of this key is replaced (a new id); a live one stays.
        INSERT INTO outbox.mcp_tasks AS k (task_id, client, intent_key, tool, ttl_ms, expires_at)
        VALUES ('task-' || replace(gen_random_uuid()::text, '-', '') || replace(gen_random_uuid()::text, '-', ''),
                c.name, ikey, p_tool, p_task_ttl_ms, now() + p_task_ttl_ms * interval '1 millisecond')
        ON CONFLICT (client, intent_key) DO UPDATE
           SET task_id = excluded.task_id, tool = excluded.tool, ttl_ms = excluded.ttl_ms,
               expires_at = excluded.expires_at, created_at = now()
         WHERE k.expires_at <= now();
    END IF;
    IF r.inserted AND NOT p_task THEN
        -- A new intent: what enqueue said is all there is to say (no second look).
        a.client := c.name;
        a.key := call_key;
        a.intent_key := ikey;
        a.tool := p_tool;
        a.target := m.target;
        a.status := r.status;
        a.state := r.status::outbox.intent_state;
        a.final := false;
        a.inserted := true;
        a.attempts := 0;
        -- 0046: the note first, then mcp_message of plain variables (an
        -- argument with function calls kept it from being inlined: parsed
        -- and planned again in every call's transaction).
        note := CASE WHEN r.status = 'awaiting_approval' THEN outbox.mcp_held_by(m.target, args)
                     WHEN r.status = 'pending' AND NOT outbox.relay_alive()
                         THEN 'no relay has claimed it yet: none is running'
                     WHEN r.status = 'pending' THEN 'waiting for delivery' END;
        a.message := outbox.mcp_message(r.status, note, NULL);
        a.updated_at := now();
        RETURN a;
    END IF;
    RETURN outbox.mcp_answer_of(c.name, call_key, p_tool, r.inserted, p_task);
END
$$;

-- The front door's batch: element i is outbox.mcp_call of the i-th of every
-- array, answered in a row with ord = i, in the order given (the front
-- door's round robin: the intents' ids keep its fairness). Any error fails
-- the whole batch (one transaction): the front door then sends each call
-- alone, and each gets its own answer or error. That covers the one lock
-- order problem too: two batches on two connections that hold the same two
-- new keys in opposite orders (a client that sent both calls twice at once)
-- deadlock, one of them fails, and its calls go alone.
CREATE FUNCTION outbox.mcp_calls(p_token_hashes bytea[], p_tools text[], p_keys text[], p_arguments jsonb[],
                                 p_run_ids text[], p_ordering_keys text[], p_traceparents text[],
                                 p_tasks boolean[], p_task_ttl_ms bigint[], p_argument_hashes bytea[])
RETURNS TABLE (ord integer, answer outbox.mcp_answer)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n integer := coalesce(cardinality(p_token_hashes), 0);
    i integer;
BEGIN
    IF n > 256 OR coalesce(cardinality(p_tools), 0) <> n OR coalesce(cardinality(p_keys), 0) <> n
       OR coalesce(cardinality(p_arguments), 0) <> n OR coalesce(cardinality(p_run_ids), 0) <> n
       OR coalesce(cardinality(p_ordering_keys), 0) <> n OR coalesce(cardinality(p_traceparents), 0) <> n
       OR coalesce(cardinality(p_tasks), 0) <> n OR coalesce(cardinality(p_task_ttl_ms), 0) <> n
       OR coalesce(cardinality(p_argument_hashes), 0) <> n THEN
        RAISE EXCEPTION 'outbox.mcp_calls: the arrays must have the same length, at most 256 (% token hashes)', n
            USING ERRCODE = '22023';
    END IF;
    FOR i IN 1 .. n LOOP
        ord := i;
        answer := outbox.mcp_call(p_token_hashes[i], p_tools[i], p_keys[i], p_arguments[i], p_run_ids[i],
                                  p_ordering_keys[i], p_traceparents[i], coalesce(p_tasks[i], false),
                                  p_task_ttl_ms[i], p_argument_hashes[i]);
        RETURN NEXT;
    END LOOP;
END
$$;

COMMENT ON FUNCTION outbox.mcp_calls(bytea[], text[], text[], jsonb[], text[], text[], text[], boolean[], bigint[], bytea[]) IS
    'The MCP front door''s batched tools/call: outbox.mcp_call of each element in one transaction (0046).';

REVOKE ALL ON FUNCTION outbox.mcp_calls(bytea[], text[], text[], jsonb[], text[], text[], text[], boolean[], bigint[], bytea[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox.mcp_calls(bytea[], text[], text[], jsonb[], text[], text[], text[], boolean[], bigint[], bytea[]) TO outbox_mcp;
