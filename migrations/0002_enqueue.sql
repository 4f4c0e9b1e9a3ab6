-- 0002: the application's side of the contract: enqueue, outcome, and the NOTIFY trigger.
--
-- Errors carry the project's own SQLSTATEs (class "OR", implementation-defined):
--   OR001 key reused with a different payload or target
--   OR002 unknown target          OR003 target disabled
--   OR004 invalid key             OR005 invalid payload
--   OR006 payload too large       OR007 wrong state for this operation
--   OR008 no intent with this key

-- Numbers spelled 1, 1.0 and 1e0 are one value: rewrite every number to its
-- shortest scale. jsonb already drops whitespace and orders keys.
CREATE FUNCTION outbox.canonical(doc jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    result jsonb;
BEGIN
    CASE jsonb_typeof(doc)
    WHEN 'number' THEN
        RETURN to_jsonb(trim_scale(doc::numeric));
    WHEN 'object' THEN
        SELECT coalesce(jsonb_object_agg(e.key, outbox.canonical(e.value)), '{}'::jsonb)
          INTO result FROM jsonb_each(doc) AS e;
        RETURN result;
    WHEN 'array' THEN
        SELECT coalesce(jsonb_agg(outbox.canonical(e.value) ORDER BY e.ord), '[]'::jsonb)
          INTO result FROM jsonb_array_elements(doc) WITH ORDINALITY AS e(value, ord);
        RETURN result;
    ELSE
        RETURN doc;
    END CASE;
END
$$;
COMMENT ON FUNCTION outbox.canonical(jsonb) IS 'Canonical form of a JSON document: numbers at their shortest scale (jsonb orders keys and drops whitespace).';

-- The payload as it counts for the fingerprint: volatile paths removed, canonical.
CREATE FUNCTION outbox.fingerprint_doc(payload jsonb, volatile_paths text[]) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    doc  jsonb := payload;
    path text;
BEGIN
    FOREACH path IN ARRAY coalesce(volatile_paths, '{}'::text[]) LOOP
        doc := doc #- path::text[];
    END LOOP;
    -- jsonb prints 1e0 as 1; only a trailing zero after a decimal point
    -- can spell a number differently. Skip the walk when there is none.
    IF doc::text ~ '[0-9]\.[0-9]*0' THEN
        doc := outbox.canonical(doc);
    END IF;
    RETURN doc;
END
$$;

-- plpgsql rather than sql here and below: these run inside every enqueue, and
-- a LANGUAGE sql function that cannot be inlined is parsed and planned on
-- every call (the bench's profile showed a quarter of enqueue's CPU there).
CREATE FUNCTION outbox.fingerprint(payload jsonb, volatile_paths text[]) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN sha256(convert_to(outbox.fingerprint_doc(payload, volatile_paths)::text, 'UTF8'));
END
$$;
COMMENT ON FUNCTION outbox.fingerprint(jsonb, text[]) IS 'SHA-256 of the canonical payload without the target''s volatile paths.';

-- Top-level fields whose values differ between two payloads (for the mismatch message).
CREATE FUNCTION outbox.differing_fields(a jsonb, b jsonb) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(k ORDER BY k), '{}')
      FROM (SELECT jsonb_object_keys(a) AS k UNION SELECT jsonb_object_keys(b)) AS keys
     WHERE a -> k IS DISTINCT FROM b -> k
$$;

-- What an agent sees of a row (DESIGN.md, "Agent-visible status").
CREATE FUNCTION outbox.visible_status(state outbox.intent_state, ambiguous boolean) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN CASE
        WHEN state = 'unknown' THEN 'reconciling'
        WHEN state IN ('pending', 'in_flight') AND ambiguous THEN 'reconciling'
        WHEN state = 'in_flight' THEN 'delivering'
        ELSE state::text
    END;
END
$$;

CREATE TYPE outbox.enqueue_result AS (
    key             text,
    intent_id       bigint,
    target          text,
    status          text,    -- agent-visible status (outbox.visible_status)
    inserted        boolean, -- true: this call created the intent
    response_status integer, -- saved response, once there is one
    response_body   text,
    mismatch_fields text[]   -- under keep_original: the fields that differed, else NULL
);

CREATE FUNCTION outbox.enqueue(p_key text, p_target text, p_payload jsonb,
                               p_run_id text DEFAULT NULL, p_not_before timestamptz DEFAULT NULL)
RETURNS outbox.enqueue_result
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    tgt       outbox.targets;
    existing  outbox.intents;
    fp        bytea;
    new_state outbox.intent_state := 'pending';
    fields    text[];
    result    outbox.enqueue_result;
    payload_text text;
BEGIN
    IF p_key IS NULL OR p_key = '' THEN
        RAISE EXCEPTION 'outbox.enqueue: the key must not be empty'
            USING ERRCODE = 'OR004', HINT = 'Make the key in the deterministic layer, e.g. {run_id}:{step_id}.';
    END IF;
    IF octet_length(p_key) > 255 THEN
        RAISE EXCEPTION 'outbox.enqueue: key is % bytes long; the limit is 255', octet_length(p_key)
            USING ERRCODE = 'OR004';
    END IF;
    IF p_key ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'outbox.enqueue: key % contains a control character', quote_literal(p_key)
            USING ERRCODE = 'OR004', HINT = 'Keys travel in HTTP headers; control characters are refused.';
    END IF;

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
    payload_text := p_payload::text;
    IF octet_length(payload_text) > tgt.max_payload_bytes THEN
        RAISE EXCEPTION 'outbox.enqueue: payload for key % is % bytes; target % accepts at most %',
                        quote_literal(p_key), octet_length(payload_text), quote_literal(p_target),
                        tgt.max_payload_bytes
            USING ERRCODE = 'OR006';
    END IF;

    -- The common case in one step: no volatile paths and no number that could
    -- be spelled otherwise, so the canonical text is the jsonb text itself
    -- (exactly what outbox.fingerprint computes then).
    IF cardinality(tgt.volatile_paths) = 0 AND payload_text !~ '[0-9]\.[0-9]*0' THEN
        fp := sha256(convert_to(payload_text, 'UTF8'));
    ELSE
        fp := outbox.fingerprint(p_payload, tgt.volatile_paths);
    END IF;
    IF tgt.approval_rule IS NOT NULL AND outbox.needs_approval(p_payload, tgt.approval_rule) THEN
        new_state := 'awaiting_approval';
    END IF;

    INSERT INTO outbox.intents AS i (key, target, payload, fingerprint, state, run_id, next_attempt_at)
    VALUES (p_key, p_target, p_payload, fp, new_state, p_run_id, greatest(now(), coalesce(p_not_before, now())))
    ON CONFLICT (key) DO NOTHING
    RETURNING * INTO existing;
    IF FOUND THEN
        -- A new row is pending or awaiting_approval, never ambiguous: its
        -- visible status is its state.
        result := (existing.key, existing.id, existing.target, new_state::text, true, NULL, NULL, NULL);
        RETURN result;
    END IF;

    -- The key exists (ON CONFLICT waited for its writer to commit).
    SELECT * INTO existing FROM outbox.intents WHERE key = p_key;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'outbox.enqueue: key % was enqueued by a concurrent transaction not visible to this snapshot',
                        quote_literal(p_key)
            USING ERRCODE = '40001', HINT = 'Retry the transaction.';
    END IF;

    IF existing.target <> p_target THEN
        RAISE EXCEPTION 'outbox.enqueue: key % is already used for target %, not %',
                        quote_literal(p_key), quote_literal(existing.target), quote_literal(p_target)
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
$$;
COMMENT ON FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz) IS
    'Insert or find the intent for a key, inside the caller''s transaction. Same key and payload: the existing intent and its outcome.';

-- An approval rule is a jsonpath predicate ($.amount > 100000) or a filter
-- path ($ ? (@.amount > 100000)); both forms are accepted. Fail closed: a
-- rule that cannot be evaluated on this payload (unknown, e.g. a string
-- compared with a number, or an error) holds the intent for a person.
CREATE FUNCTION outbox.needs_approval(payload jsonb, rule jsonpath) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    matched boolean;
BEGIN
    BEGIN
        matched := jsonb_path_match(payload, rule);
    EXCEPTION WHEN OTHERS THEN
        BEGIN
            matched := jsonb_path_exists(payload, rule);
        EXCEPTION WHEN OTHERS THEN
            matched := NULL;
        END;
    END;
    RETURN coalesce(matched, true);
END
$$;

CREATE FUNCTION outbox.outcome(p_key text)
RETURNS TABLE (status text, response_status integer, response_body text, attempts integer,
               last_error text, message text, state outbox.intent_state, target text, updated_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN QUERY
    SELECT outbox.visible_status(i.state, i.ambiguous),
           CASE WHEN i.state IN ('succeeded', 'failed') THEN i.response_status END,
           CASE WHEN i.state IN ('succeeded', 'failed') THEN i.response_body END,
           i.attempts,
           -- A raw transport error is never the outcome: only final states carry a reason.
           CASE WHEN i.state IN ('failed', 'cancelled') THEN i.last_error END,
           CASE outbox.visible_status(i.state, i.ambiguous)
               WHEN 'reconciling' THEN 'outcome unknown, reconciling'
               WHEN 'awaiting_approval' THEN 'waiting for approval'
               WHEN 'pending' THEN 'waiting for delivery'
               WHEN 'delivering' THEN 'being delivered'
               WHEN 'succeeded' THEN 'the target acted'
               WHEN 'failed' THEN 'the target did not act and will not'
               WHEN 'cancelled' THEN 'cancelled before it was sent'
           END,
           i.state, i.target, i.updated_at
      FROM outbox.intents i
     WHERE i.key = p_key;
END
$$;
COMMENT ON FUNCTION outbox.outcome(text) IS 'The agent-visible outcome of a key: no row for an unknown key.';

-- NOTIFY only while a live relay has said it is idle: a NOTIFY in every
-- enqueuing transaction serializes commits (DESIGN.md, "Enqueue semantics").
-- Only rows that became due count: statement-level triggers fire even for
-- statements that changed nothing (a claim that found no row), and a relay
-- woken by its own empty claim would spin.
CREATE FUNCTION outbox.notify_relays() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM outbox.relays WHERE idle AND heartbeat_at > now() - interval '2 minutes')
       AND EXISTS (SELECT 1 FROM changed_rows WHERE state = 'pending' AND next_attempt_at <= now()) THEN
        PERFORM pg_notify('outbox_intents', '');
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER intents_notify_insert AFTER INSERT ON outbox.intents
    REFERENCING NEW TABLE AS changed_rows
    FOR EACH STATEMENT EXECUTE FUNCTION outbox.notify_relays();
CREATE TRIGGER intents_notify_update AFTER UPDATE ON outbox.intents
    REFERENCING NEW TABLE AS changed_rows
    FOR EACH STATEMENT EXECUTE FUNCTION outbox.notify_relays();
