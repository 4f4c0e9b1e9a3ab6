CREATE FUNCTION outbox.enqueue_any(p_key text, p_target text, p_payload jsonb, p_run_id text DEFAULT NULL::text, p_not_before timestamp with time zone DEFAULT NULL::timestamp with time zone, p_ordering_key text DEFAULT NULL::text, p_traceparent text DEFAULT NULL::text) RETURNS outbox.enqueue_result
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

COMMENT ON FUNCTION outbox.enqueue_any(p_key text, p_target text, p_payload jsonb, p_run_id text, p_not_before timestamp with time zone, p_ordering_key text, p_traceparent text) IS 'outbox.enqueue without the reservation of mcp: keys, for the front door''s functions only (0036); executable by no role.';


SET default_tablespace = '';

SET default_table_access_method = heap;

REVOKE ALL ON FUNCTION outbox.enqueue_any(p_key text, p_target text, p_payload jsonb, p_run_id text, p_not_before timestamp with time zone, p_ordering_key text, p_traceparent text) FROM PUBLIC;
