-- 0037: MCP targets, the durable MCP gateway (issue 36, items 1 and 4;
-- docs/design.md, "The gateway's reach (fourth round)").
--
-- outbox.targets.protocol: 'http' (the default, what every target was) or
-- 'mcp': the url is a Streamable HTTP MCP endpoint, and the relay delivers
-- an intent as that upstream's tools/call (relay/mcp_upstream.c).
-- targets.mcp_version: 'auto' (the default: ask server/discover, 2026-07-28,
-- and fall back to initialize, 2025-11-25), '2026-07-28' or '2025-11-25'.
-- targets.auth_secret: the name of an OUTBOX_SECRET_... variable of the
-- relay's environment holding a bearer token for the upstream (the rule of
-- secret_env: the token is never in the database, never logged).
-- targets.status_tool: for an mcp target, the upstream tool the relay asks
-- about an unknown intent, as a status URL is asked: it takes {"key": KEY}
-- and answers structuredContent {"executed": true|false} (anything else:
-- ask again later). claim_unknown, next_due_ms and needs_person take it as
-- they take a status URL.
--
-- An intent for an 'mcp' target has the payload {"tool": NAME, "arguments":
-- {...}} and nothing else: outbox.enqueue refuses anything else with
-- OR027 (no trigger: intents has no BEFORE trigger, the hot paths), so that backend teams can enqueue MCP calls from SQL
-- and a malformed one fails at enqueue, not at the upstream. The front
-- door's outbox.mcp_call wraps an agent's arguments so for a tool whose
-- target is 'mcp' (mcp_tools.upstream_tool: the upstream's name of the
-- tool, NULL = the tool's own name).
--
-- Locks: ADD COLUMN with constant defaults (no rewrite) on targets and
-- mcp_tools (ACCESS EXCLUSIVE, brief). Functions replaced take no table lock.

ALTER TABLE outbox.targets
    ADD COLUMN protocol text NOT NULL DEFAULT 'http'
        CONSTRAINT targets_protocol_check CHECK (protocol IN ('http', 'mcp')),
    ADD COLUMN mcp_version text NOT NULL DEFAULT 'auto'
        CONSTRAINT targets_mcp_version_check CHECK (mcp_version IN ('auto', '2026-07-28', '2025-11-25')),
    ADD COLUMN auth_secret text
        CONSTRAINT targets_auth_secret_check CHECK (auth_secret ~ '^OUTBOX_SECRET_[A-Za-z0-9_]{1,113}$'),
    ADD COLUMN status_tool text
        CONSTRAINT targets_status_tool_check CHECK (status_tool ~ '^[^[:cntrl:]]{1,128}$'),
    ADD CONSTRAINT targets_mcp_is_post CHECK (protocol = 'http' OR method = 'POST'),
    ADD CONSTRAINT targets_status_tool_mcp CHECK (status_tool IS NULL OR protocol = 'mcp');
COMMENT ON COLUMN outbox.targets.protocol IS
    '''http'' (a webhook) or ''mcp'' (url is a Streamable HTTP MCP endpoint; an intent''s payload is {"tool": NAME, "arguments": {...}}, delivered as tools/call) (0037).';
COMMENT ON COLUMN outbox.targets.mcp_version IS
    'For an mcp target: ''auto'' (server/discover, else initialize), ''2026-07-28'' (stateless) or ''2025-11-25'' (initialize, a session) (0037).';
COMMENT ON COLUMN outbox.targets.auth_secret IS
    'For an mcp target: the name of an OUTBOX_SECRET_... variable of the relay''s environment holding the upstream''s bearer token (never the token) (0037).';

COMMENT ON COLUMN outbox.targets.status_tool IS
    'For an mcp target: the upstream tool asked about an unknown intent ({"key": KEY} → structuredContent {"executed": true|false}), as a status URL is (0037).';

ALTER TABLE outbox.mcp_tools
    ADD COLUMN upstream_tool text
        CONSTRAINT mcp_tools_upstream_tool_check CHECK (upstream_tool ~ '^[^[:cntrl:]]{1,128}$');
COMMENT ON COLUMN outbox.mcp_tools.upstream_tool IS
    'For a tool whose target is an mcp target: the upstream''s name of the tool; NULL = this tool''s name (0037).';

-- Whether a payload is a tools/call: {"tool": NAME, "arguments": {...}} and nothing else.
CREATE FUNCTION outbox.mcp_payload_ok(p_payload jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT jsonb_typeof(p_payload) = 'object'
           AND (SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(p_payload) k) = '{arguments,tool}'
           AND jsonb_typeof(p_payload -> 'tool') = 'string'
           AND p_payload ->> 'tool' ~ '^[^[:cntrl:]]{1,128}$'
           AND jsonb_typeof(p_payload -> 'arguments') = 'object'
$$;
COMMENT ON FUNCTION outbox.mcp_payload_ok(jsonb) IS
    'Whether a payload is {"tool": NAME, "arguments": {...}} and nothing else: what an mcp target takes (0037).';
REVOKE ALL ON FUNCTION outbox.mcp_payload_ok(jsonb) FROM PUBLIC;



-- enqueue_any as in 0036, and: an mcp target takes a tools/call payload only (OR027).
CREATE OR REPLACE FUNCTION outbox.enqueue_any(p_key text, p_target text, p_payload jsonb, p_run_id text DEFAULT NULL::text, p_not_before timestamp with time zone DEFAULT NULL::timestamp with time zone, p_ordering_key text DEFAULT NULL::text, p_traceparent text DEFAULT NULL::text) RETURNS outbox.enqueue_result
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
DECLARE
    flag      text;     -- 0021: set_config's answer, unused (an assignment keeps FOUND)
    wake      boolean;
    tgt       outbox.targets;
    existing  outbox.intents;
    stone     outbox.tombstones;
    fp        bytea;
    new_id    bigint;
    new_state outbox.intent_state := 'pending';
    fields    text[];
    result    outbox.enqueue_result;
    payload_text text;
    too_deep  boolean := false;
    locked    boolean;
    wait      boolean := false;   -- 0013: held behind a live intent of its group
    trace     text := coalesce(p_traceparent, nullif(current_setting('outbox.traceparent', true), ''));   -- 0016
BEGIN
    -- Every key outside the alphabet matches this (outbox.refuse_key says why).
    IF p_key IS NULL OR p_key = '' OR octet_length(p_key) > 255
       OR p_key ~ '^ | $|^\.\.?$|[\u0001-\u001f\u007f-\u00a0\u00ad\u034f\u061c\u115f\u1160\u1680\u17b4\u17b5\u180b-\u180f\u2000-\u200f\u2028-\u202f\u205f-\u206f\u3000\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\ufffe\uffff\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]' THEN
        PERFORM outbox.refuse_key('enqueue', p_key);
    END IF;
    -- 0016: the caller's W3C trace context, checked (outbox.refuse_traceparent says why).
    IF trace IS NOT NULL AND (trace !~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
                              OR substr(trace, 4, 32) = '00000000000000000000000000000000'
                              OR substr(trace, 37, 16) = '0000000000000000') THEN
        PERFORM outbox.refuse_traceparent(trace, p_traceparent IS NULL);
    END IF;
    payload_text := p_payload::text;
    -- Only a payload with more than 100 opening brackets can be nested that
    -- deep (replace() counts them faster than anything else here).
    IF 2 * octet_length(payload_text) - octet_length(replace(payload_text, '{', ''))
                                      - octet_length(replace(payload_text, '[', '')) > 100 THEN
        too_deep := jsonb_path_exists(p_payload, 'strict $.**{100} ? (@.type() == "object" || @.type() == "array")');
    END IF;

    -- The target lock of 0010; see there.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        PERFORM 1 FROM outbox.targets WHERE name = p_target FOR KEY SHARE;
        -- 0012: a prune of this key committed after our snapshot fails this with 40001.
        PERFORM 1 FROM outbox.intents WHERE key = p_key FOR KEY SHARE;
    END IF;
    locked := pg_advisory_xact_lock_shared(1330774017, hashtext(p_target)) IS NOT NULL;
    -- 0013: an ordered intent takes its place in its group (the group's lock, until
    -- this transaction ends: the id drawn below follows every earlier enqueue of the
    -- group); wait: an earlier intent of the group is live, the new one is held.
    IF p_ordering_key IS NOT NULL THEN
        wait := outbox.ordering_place(p_key, p_ordering_key);
    END IF;

    flag := set_config('outbox.in_enqueue', 'on', true);    -- 0021: the INSERT trigger's WHEN
    INSERT INTO outbox.intents AS i (key, target, payload, fingerprint, state, run_id, next_attempt_at,
                                     ordering_key, not_before, traceparent)   -- 0013, 0016
    SELECT p_key, t.name, p_payload,
           CASE WHEN cardinality(t.volatile_paths) = 0
                     AND (strpos(payload_text, '.') = 0 OR payload_text !~ '[0-9]\.[0-9]*0')
                THEN sha256(convert_to(payload_text, 'UTF8'))
                ELSE outbox.fingerprint(p_payload, t.volatile_paths) END,
           CASE WHEN t.approval_rule IS NOT NULL AND outbox.needs_approval(p_payload, t.approval_rule)
                THEN 'awaiting_approval'::outbox.intent_state
                ELSE 'pending'::outbox.intent_state END,
           p_run_id, CASE WHEN wait THEN 'infinity' ELSE greatest(now(), coalesce(p_not_before, now())) END,   -- 0013
           p_ordering_key, CASE WHEN wait THEN p_not_before END, trace   -- 0013, 0016
      FROM outbox.targets t
     WHERE t.name = p_target AND t.enabled AND jsonb_typeof(p_payload) = 'object'
       AND octet_length(payload_text) <= t.max_payload_bytes AND NOT too_deep
       AND (t.protocol = 'http' OR outbox.mcp_payload_ok(p_payload))   -- 0037
    ON CONFLICT (key) DO NOTHING
    RETURNING i.id, i.state, i.fingerprint,
              i.state = 'pending' AND i.next_attempt_at <= now()
              AND EXISTS (SELECT 1 FROM outbox.relays
                           WHERE idle AND heartbeat_at > now() - interval '2 minutes')
         INTO new_id, new_state, fp, wake;
    flag := set_config('outbox.in_enqueue', 'off', true);  -- 0021
    IF FOUND THEN
        -- 0012: a pruned key is remembered: take the row back, answer from the tombstone.
        SELECT s.* INTO stone FROM outbox.tombstones s   -- 0017: inline, was outbox.tombstone_of
         WHERE s.key_hash = substring(sha256(convert_to(p_key, 'UTF8')) FROM 1 FOR 16) AND s.forget_at > now()
         ORDER BY s.pruned_at DESC LIMIT 1;
        IF stone.intent_id IS NOT NULL THEN
            DELETE FROM outbox.intents WHERE id = new_id;
            RETURN outbox.enqueue_remembered(p_key, p_target, fp, stone);
        END IF;
        IF wake THEN
            PERFORM pg_notify('outbox_intents', '');
        END IF;
        result := (p_key, new_id, p_target, new_state::text, true, NULL, NULL, NULL);
        RETURN result;
    END IF;

    -- The careful path (as in 0008).
    new_state := 'pending';
    SELECT * INTO tgt FROM outbox.targets WHERE name = p_target;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'outbox.enqueue: unknown target %', coalesce(quote_literal(p_target), 'NULL')
            USING ERRCODE = 'OR002', HINT = 'Targets are registered by an admin in outbox.targets.';
    END IF;
    IF NOT tgt.enabled THEN
        RAISE EXCEPTION 'outbox.enqueue: target % is disabled', quote_literal(p_target)
            USING ERRCODE = 'OR003';
    END IF;
    IF p_payload IS NULL OR jsonb_typeof(p_payload) <> 'object' THEN
        RAISE EXCEPTION 'outbox.enqueue: payload for key % must be a JSON object, got %',
                        quote_literal(p_key), coalesce(jsonb_typeof(p_payload), 'NULL')
            USING ERRCODE = 'OR005';
    END IF;
    IF octet_length(payload_text) > tgt.max_payload_bytes THEN
        RAISE EXCEPTION 'outbox.enqueue: payload for key % is % bytes; target % accepts at most %',
                        quote_literal(p_key), octet_length(payload_text), quote_literal(p_target),
                        tgt.max_payload_bytes
            USING ERRCODE = 'OR006';
    END IF;
    IF too_deep THEN
        RAISE EXCEPTION 'outbox.enqueue: payload for key % is nested deeper than 100 levels', quote_literal(p_key)
            USING ERRCODE = 'OR010',
                  HINT = 'At most 100 objects and arrays may enclose one another in a payload.';
    END IF;

    -- 0037: an mcp target's payload is a tools/call.
    IF tgt.protocol = 'mcp' AND NOT outbox.mcp_payload_ok(p_payload) THEN
        RAISE EXCEPTION 'outbox.enqueue: target % speaks MCP: the payload must be {"tool": NAME, "arguments": {...}} and nothing else',
                        quote_literal(p_target)
            USING ERRCODE = 'OR027',
                  DETAIL = 'An intent for an mcp target is delivered as that server''s tools/call: "tool" names the upstream tool (a string of 1 to 128 characters), "arguments" is its arguments object.',
                  HINT = 'Send e.g. {"tool": "create_ticket", "arguments": {"title": "..."}}.';
    END IF;

    IF cardinality(tgt.volatile_paths) = 0
       AND (strpos(payload_text, '.') = 0 OR payload_text !~ '[0-9]\.[0-9]*0') THEN
        fp := sha256(convert_to(payload_text, 'UTF8'));
    ELSE
        fp := outbox.fingerprint(p_payload, tgt.volatile_paths);
    END IF;
    IF tgt.approval_rule IS NOT NULL AND outbox.needs_approval(p_payload, tgt.approval_rule) THEN
        new_state := 'awaiting_approval';
    END IF;

    -- Not inserted above, yet every check passed: the key is taken, or the
    -- target changed between the two statements. Insert once more (the
    -- latter), or find the existing row (the former).
    flag := set_config('outbox.in_enqueue', 'on', true);    -- 0021: the INSERT trigger's WHEN
    INSERT INTO outbox.intents AS i (key, target, payload, fingerprint, state, run_id, next_attempt_at,
                                     ordering_key, not_before, traceparent)   -- 0013, 0016
    VALUES (p_key, p_target, p_payload, fp, new_state, p_run_id,
            CASE WHEN wait THEN 'infinity' ELSE greatest(now(), coalesce(p_not_before, now())) END,   -- 0013
            p_ordering_key, CASE WHEN wait THEN p_not_before END, trace)   -- 0013, 0016
    ON CONFLICT (key) DO NOTHING
    RETURNING * INTO existing;
    flag := set_config('outbox.in_enqueue', 'off', true);  -- 0021
    IF FOUND THEN
        -- 0012: as on the fast path.
        SELECT s.* INTO stone FROM outbox.tombstones s   -- 0017: inline, was outbox.tombstone_of
         WHERE s.key_hash = substring(sha256(convert_to(p_key, 'UTF8')) FROM 1 FOR 16) AND s.forget_at > now()
         ORDER BY s.pruned_at DESC LIMIT 1;
        IF stone.intent_id IS NOT NULL THEN
            DELETE FROM outbox.intents WHERE id = existing.id;
            RETURN outbox.enqueue_remembered(p_key, p_target, fp, stone);
        END IF;
        IF existing.state = 'pending' AND existing.next_attempt_at <= now()
           AND EXISTS (SELECT 1 FROM outbox.relays WHERE idle AND heartbeat_at > now() - interval '2 minutes') THEN
            PERFORM pg_notify('outbox_intents', '');
        END IF;
        result := (existing.key, existing.id, existing.target, new_state::text, true, NULL, NULL, NULL);
        RETURN result;
    END IF;

    SELECT * INTO existing FROM outbox.intents WHERE key = p_key;
    IF NOT FOUND THEN
        -- 0012: pruned after our INSERT saw it.
        SELECT s.* INTO stone FROM outbox.tombstones s   -- 0017: inline, was outbox.tombstone_of
         WHERE s.key_hash = substring(sha256(convert_to(p_key, 'UTF8')) FROM 1 FOR 16) AND s.forget_at > now()
         ORDER BY s.pruned_at DESC LIMIT 1;
        IF stone.intent_id IS NOT NULL THEN
            RETURN outbox.enqueue_remembered(p_key, p_target, fp, stone);
        END IF;
        RAISE EXCEPTION 'outbox.enqueue: key % was enqueued by a concurrent transaction not visible to this snapshot',
                        quote_literal(p_key)
            USING ERRCODE = '40001', HINT = 'Retry the transaction.';
    END IF;

    -- 0026: another login's key, for an isolated caller: taken, and nothing more.
    -- 0036: not for the front door's keys (its isolation is by MCP client, in the key).
    IF existing.enqueued_by IS DISTINCT FROM session_user::text AND NOT starts_with(p_key, 'mcp:')
       AND outbox.isolated() THEN
        PERFORM outbox.refuse_others_key('enqueue', p_key);
    END IF;

    IF existing.target <> p_target THEN
        RAISE EXCEPTION 'outbox.enqueue: key % is already used for target %, not %',
                        quote_literal(p_key), quote_literal(existing.target), quote_literal(p_target)
            USING ERRCODE = 'OR001',
                  HINT = 'An idempotency key names one action; use a new key for a new action.';
    END IF;

    -- 0013: the ordering key is part of the action, as the target is.
    IF existing.ordering_key IS DISTINCT FROM p_ordering_key THEN
        RAISE EXCEPTION 'outbox.enqueue: key % is already used %, not %', quote_literal(p_key),
                        coalesce('in ordering group ' || quote_literal(existing.ordering_key), 'without an ordering key'),
                        coalesce('in ordering group ' || quote_literal(p_ordering_key), 'without one')
            USING ERRCODE = 'OR001',
                  HINT = 'An idempotency key names one action; use a new key for a new action.';
    END IF;

    IF existing.fingerprint <> fp THEN
        fields := outbox.differing_fields(outbox.fingerprint_doc(existing.payload, tgt.volatile_paths),
                                          outbox.fingerprint_doc(p_payload, tgt.volatile_paths));
        IF tgt.on_mismatch = 'keep_original' THEN
            INSERT INTO outbox.mismatches (key, payload, fingerprint, fields)
            VALUES (p_key, p_payload, fp, fields);
            UPDATE outbox.intents SET mismatches = mismatches + 1 WHERE id = existing.id;
        ELSE
            RAISE EXCEPTION 'outbox.enqueue: key % was already used with a different payload (fields that differ: %)',
                            quote_literal(p_key), array_to_string(fields, ', ')
                USING ERRCODE = 'OR001',
                      DETAIL = format('target %s, on_mismatch = reject', existing.target),
                      HINT = 'An idempotency key names one action; use a new key for a new action, or send the same arguments.';
        END IF;
    END IF;

    result := (existing.key, existing.id, existing.target,
               outbox.visible_status(existing.state, existing.ambiguous), false,
               CASE WHEN existing.state IN ('succeeded', 'failed') THEN existing.response_status END,
               CASE WHEN existing.state IN ('succeeded', 'failed') THEN existing.response_body END,
               fields);
    RETURN result;
END
$_$;

-- mcp_call as in 0036, and: for a tool whose target speaks MCP, the payload is
-- {"tool": upstream name, "arguments": the agent's arguments}.
CREATE OR REPLACE FUNCTION outbox.mcp_call(p_token_hash bytea, p_tool text, p_key text, p_arguments jsonb, p_run_id text DEFAULT NULL::text, p_ordering_key text DEFAULT NULL::text, p_traceparent text DEFAULT NULL::text, p_task boolean DEFAULT false, p_task_ttl_ms bigint DEFAULT NULL::bigint) RETURNS outbox.mcp_answer
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
    IF p_key IS NULL OR p_key = '' THEN
        RAISE EXCEPTION 'outbox.mcp_call: no idempotency key' USING ERRCODE = 'OR004';
    END IF;
    ikey := 'mcp:' || c.name || ':' || p_key;
    -- A client's ordering groups and runs are its own, like its keys: another
    -- client naming the same group neither waits behind it nor holds it.
    grp := 'mcp:' || c.name || ':' || p_ordering_key;
    run := 'mcp:' || c.name || ':' || p_run_id;
    IF octet_length(ikey) > 255 THEN
        RAISE EXCEPTION 'the idempotency key is % bytes long; the limit for client % is % bytes',
                        octet_length(p_key), quote_literal(c.name), 255 - octet_length(ikey) + octet_length(p_key)
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
    IF FOUND AND existing_payload = args AND existing_target = m.target
       AND existing_group IS NOT DISTINCT FROM grp AND NOT p_task THEN
        RETURN outbox.mcp_answer_of(c.name, p_key, p_tool, false, false);
    END IF;
    IF existing_payload IS NULL THEN
        r := outbox.enqueue_any(ikey, m.target, args, run, NULL, grp, p_traceparent);
    ELSE BEGIN
        r := outbox.enqueue_any(ikey, m.target, args, run, NULL, grp, p_traceparent);
    EXCEPTION WHEN SQLSTATE 'OR001' THEN
        a.client := c.name;
        a.key := p_key;
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
        a.key := p_key;
        a.intent_key := ikey;
        a.tool := p_tool;
        a.target := m.target;
        a.status := r.status;
        a.state := r.status::outbox.intent_state;
        a.final := false;
        a.inserted := true;
        a.attempts := 0;
        a.message := outbox.mcp_message(r.status,
                                        CASE WHEN r.status = 'awaiting_approval' THEN outbox.mcp_held_by(m.target, args)
                                             WHEN r.status = 'pending' AND NOT outbox.relay_alive()
                                                 THEN 'no relay has claimed it yet: none is running'
                                             WHEN r.status = 'pending' THEN 'waiting for delivery' END, NULL);
        a.updated_at := now();
        RETURN a;
    END IF;
    RETURN outbox.mcp_answer_of(c.name, p_key, p_tool, r.inserted, p_task);
END
$$;

-- claim_unknown, next_due_ms, needs_person as before, and: a status_tool is asked as a status URL is.

CREATE OR REPLACE FUNCTION outbox.claim_unknown(p_relay text, p_limit integer, p_lease_ms integer) RETURNS TABLE(id bigint, key text, target text, attempt integer, first_attempt_ms bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RETURN QUERY
    WITH due AS (
        SELECT i.id
          FROM outbox.intents i
          JOIN outbox.targets t ON t.name = i.target
         WHERE i.state = 'unknown' AND i.next_attempt_at <= now()
           AND (t.status_url IS NOT NULL OR t.status_tool IS NOT NULL) AND t.enabled   -- 0037
           AND (i.lease_expires_at IS NULL OR i.lease_expires_at < now())
         ORDER BY i.next_attempt_at
         LIMIT p_limit
           FOR UPDATE OF i SKIP LOCKED
    )
    UPDATE outbox.intents i
       SET lease_owner = p_relay,
           lease_expires_at = now() + p_lease_ms * interval '1 millisecond',
           updated_at = now()
      FROM due
     WHERE i.id = due.id
    RETURNING i.id, i.key, i.target, i.attempts,
              (extract(epoch FROM i.first_attempt_at) * 1000)::bigint;
END
$$;

CREATE OR REPLACE FUNCTION outbox.next_due_ms(p_targets text[]) RETURNS bigint
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    due_ms bigint;
    name   text;
BEGIN
    due_ms := (SELECT CASE WHEN due IS NOT NULL
                   THEN greatest(0, (extract(epoch FROM (due - now())) * 1000)::bigint) END
      FROM (SELECT least(
                (SELECT min(greatest(d.due, outbox.target_gate(s, t.rate_limit_per_s)))
                   FROM unnest(p_targets) AS u(name)
                   JOIN outbox.targets t ON t.name = u.name AND t.enabled
                   LEFT JOIN outbox.target_state s ON s.target = u.name
                  CROSS JOIN LATERAL (SELECT min(i.next_attempt_at) AS due FROM outbox.intents i
                                       WHERE i.state = 'pending' AND i.target = u.name
                                         AND i.next_attempt_at < 'infinity') d   -- 0013: held rows are not due
                  WHERE d.due IS NOT NULL),   -- a gate alone (a pause that ended) is nothing due
                (SELECT min(lease_expires_at) FROM outbox.intents WHERE state = 'in_flight'),
                (SELECT min(greatest(i.next_attempt_at, coalesce(i.lease_expires_at, i.next_attempt_at)))
                   FROM outbox.intents i JOIN outbox.targets t ON t.name = i.target
                  WHERE i.state = 'unknown' AND (t.status_url IS NOT NULL OR t.status_tool IS NOT NULL) AND t.enabled)) AS due) AS next);   -- 0037
    IF due_ms = 0 THEN
        RETURN 0;
    END IF;
    -- An enqueue holds the shared form of its target's lock until its
    -- transaction ends (outbox.enqueue); the exclusive form is free only
    -- when none does. Taken at session level so that it is released at once.
    FOR name IN
        SELECT t.name FROM unnest(p_targets) AS u(name)
          JOIN outbox.targets t ON t.name = u.name AND t.enabled
          LEFT JOIN outbox.target_state s ON s.target = u.name
         WHERE s.target IS NULL OR coalesce(outbox.target_gate(s, t.rate_limit_per_s) <= now(), true)
    LOOP
        IF pg_try_advisory_lock(1330774017, hashtext(name)) THEN
            PERFORM pg_advisory_unlock(1330774017, hashtext(name));
        ELSE
            RETURN 0;
        END IF;
    END LOOP;
    RETURN due_ms;
END
$$;

CREATE OR REPLACE FUNCTION outbox.needs_person(p_intent bigint, p_target text, p_first_attempt_at timestamp with time zone) RETURNS text
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    t outbox.targets;
    unkeyed text;   -- 0025
BEGIN
    SELECT * INTO t FROM outbox.targets WHERE name = p_target;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF t.status_url IS NOT NULL OR t.status_tool IS NOT NULL THEN   -- 0037: or its status tool
        IF t.enabled THEN
            RETURN NULL;   -- the relay asks the status URL (or tool)
        END IF;
        RETURN 'needs a person — the target is disabled, so its status URL is not asked: enable it, or resolve the key';
    END IF;
    IF t.key_header IS NULL THEN
        RETURN 'needs a person — no status URL, no key';
    END IF;
    unkeyed := outbox.unkeyed_attempt(p_intent);   -- 0025
    IF unkeyed = 'without' THEN
        RETURN 'needs a person — no status URL, and an attempt that may have executed went without the key';
    ELSIF unkeyed = 'not recorded' THEN
        RETURN 'needs a person — no status URL, and whether an attempt that may have executed carried the key was not recorded';
    END IF;
    IF p_first_attempt_at IS NULL THEN
        RETURN 'needs a person — no status URL, and no first attempt is recorded to tell whether the target still remembers the key';
    END IF;
    IF now() - p_first_attempt_at >= t.key_ttl THEN
        RETURN format('needs a person — no status URL, and the key is past the target''s key_ttl (%s): the target may have forgotten it',
                      t.key_ttl);
    END IF;
    RETURN format('needs a person — no status URL; the target remembers the key until %s, so a retry with it is safe until then (outbox-relay retry KEY)',
                  outbox.utc_text(p_first_attempt_at + t.key_ttl));
END
$$;
