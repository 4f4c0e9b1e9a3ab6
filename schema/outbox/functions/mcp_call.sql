CREATE FUNCTION outbox.mcp_call(p_token_hash bytea, p_tool text, p_key text, p_arguments jsonb, p_run_id text DEFAULT NULL::text, p_ordering_key text DEFAULT NULL::text, p_traceparent text DEFAULT NULL::text, p_task boolean DEFAULT false, p_task_ttl_ms bigint DEFAULT NULL::bigint) RETURNS outbox.mcp_answer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN   -- plpgsql, not sql: schema/outbox/load.sql may create it before the ten-argument form
    RETURN outbox.mcp_call(p_token_hash, p_tool, p_key, p_arguments, p_run_id, p_ordering_key, p_traceparent,
                           p_task, p_task_ttl_ms, NULL::bytea);
END
$$;

CREATE FUNCTION outbox.mcp_call(p_token_hash bytea, p_tool text, p_key text, p_arguments jsonb, p_run_id text, p_ordering_key text, p_traceparent text, p_task boolean, p_task_ttl_ms bigint, p_argument_hash bytea) RETURNS outbox.mcp_answer
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

REVOKE ALL ON FUNCTION outbox.mcp_call(p_token_hash bytea, p_tool text, p_key text, p_arguments jsonb, p_run_id text, p_ordering_key text, p_traceparent text, p_task boolean, p_task_ttl_ms bigint) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_call(p_token_hash bytea, p_tool text, p_key text, p_arguments jsonb, p_run_id text, p_ordering_key text, p_traceparent text, p_task boolean, p_task_ttl_ms bigint) TO outbox_mcp;

REVOKE ALL ON FUNCTION outbox.mcp_call(p_token_hash bytea, p_tool text, p_key text, p_arguments jsonb, p_run_id text, p_ordering_key text, p_traceparent text, p_task boolean, p_task_ttl_ms bigint, p_argument_hash bytea) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_call(p_token_hash bytea, p_tool text, p_key text, p_arguments jsonb, p_run_id text, p_ordering_key text, p_traceparent text, p_task boolean, p_task_ttl_ms bigint, p_argument_hash bytea) TO outbox_mcp;
