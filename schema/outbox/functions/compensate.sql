CREATE FUNCTION outbox.compensate(p_original_key text, p_key text, p_target text, p_payload jsonb) RETURNS outbox.enqueue_result
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    original outbox.intents;
    existing outbox.intents;
    result   outbox.enqueue_result;
BEGIN
    -- 0036: the front door's keys are its own.
    IF starts_with(p_key, 'mcp:') THEN
        PERFORM outbox.refuse_front_door('compensate', 'key', p_key);
    END IF;
    IF starts_with(p_original_key, 'mcp:') AND NOT outbox.operator_session() THEN
        PERFORM outbox.refuse_front_door('compensate', 'key', p_original_key);
    END IF;
    PERFORM outbox.refuse_key('compensate', p_key);

    -- 0012: locked, as the foreign key on compensates did (see above).
    SELECT * INTO original FROM outbox.intents WHERE key = p_original_key FOR KEY SHARE;
    IF NOT FOUND
       OR (original.enqueued_by IS DISTINCT FROM session_user::text AND outbox.isolated()) THEN   -- 0026
        RAISE EXCEPTION 'outbox.compensate: no intent with key %', coalesce(quote_literal(p_original_key), 'NULL')
            USING ERRCODE = 'OR008', HINT = 'A compensation undoes an intent that exists: name its key.';
    END IF;

    -- The key exists already: a retried call (same original: enqueue's rules decide
    -- on target and payload and return it), or a key reused for another action.
    SELECT * INTO existing FROM outbox.intents WHERE key = p_key;
    IF FOUND THEN
        IF existing.enqueued_by IS DISTINCT FROM session_user::text AND outbox.isolated() THEN   -- 0026
            PERFORM outbox.refuse_others_key('compensate', p_key);
        END IF;
        IF existing.id = original.id THEN
            RAISE EXCEPTION 'outbox.compensate: key % cannot compensate itself', quote_literal(p_key)
                USING ERRCODE = 'OR001', HINT = 'A compensation is a new action: give it its own key, e.g. {original key}:undo.';
        END IF;
        IF existing.compensates IS DISTINCT FROM p_original_key THEN
            RAISE EXCEPTION 'outbox.compensate: key % is already used for another action (%)', quote_literal(p_key),
                            CASE WHEN existing.compensates IS NULL THEN 'an intent that compensates nothing'
                                 ELSE 'the compensation of ' || quote_literal(existing.compensates) END
                USING ERRCODE = 'OR001', HINT = 'An idempotency key names one action; use a new key for a new action.';
        END IF;
        RETURN outbox.enqueue(p_key, p_target, p_payload, original.run_id);
    END IF;

    IF original.state NOT IN ('succeeded', 'unknown') THEN
        RAISE EXCEPTION 'outbox.compensate: key % is %; only a succeeded or unknown intent can be compensated',
                        quote_literal(p_original_key),
                        CASE WHEN original.state = 'pending' AND original.ambiguous
                             THEN 'pending after an ambiguous attempt (its outcome is not settled yet)'
                             ELSE original.state::text END
            USING ERRCODE = 'OR007',
                  HINT = CASE
                      WHEN original.state IN ('pending', 'awaiting_approval') AND NOT original.ambiguous
                           AND (SELECT d.may_have_executed FROM outbox.delivery_summary(original.id) d) = 0   -- 0026
                          THEN 'The target has not acted on it: cancel it instead (outbox.cancel, outbox.cancel_run).'
                      WHEN original.state IN ('pending', 'in_flight', 'awaiting_approval')
                          THEN 'It is being delivered: compensate once its outcome is succeeded or unknown.'
                      ELSE 'The target did not act on it: there is nothing to compensate.'
                  END;
    END IF;

    result := outbox.enqueue(p_key, p_target, p_payload, original.run_id);
    IF result.inserted THEN
        UPDATE outbox.intents SET compensates = p_original_key WHERE id = result.intent_id;
    ELSE
        -- Enqueued by a concurrent transaction after our look (enqueue waited for it to
        -- commit, and has checked target and payload): is it the same compensation?
        SELECT * INTO existing FROM outbox.intents WHERE id = result.intent_id;
        IF existing.compensates IS DISTINCT FROM p_original_key THEN
            RAISE EXCEPTION 'outbox.compensate: key % is already used for another action (%)', quote_literal(p_key),
                            CASE WHEN existing.compensates IS NULL THEN 'an intent that compensates nothing'
                                 ELSE 'the compensation of ' || quote_literal(existing.compensates) END
                USING ERRCODE = 'OR001', HINT = 'An idempotency key names one action; use a new key for a new action.';
        END IF;
    END IF;
    RETURN result;
END
$$;

COMMENT ON FUNCTION outbox.compensate(p_original_key text, p_key text, p_target text, p_payload jsonb) IS 'Enqueue a compensating intent for a succeeded or unknown one (intents.compensates = original key), by the rules of outbox.enqueue.';

REVOKE ALL ON FUNCTION outbox.compensate(p_original_key text, p_key text, p_target text, p_payload jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.compensate(p_original_key text, p_key text, p_target text, p_payload jsonb) TO outbox_app;
GRANT ALL ON FUNCTION outbox.compensate(p_original_key text, p_key text, p_target text, p_payload jsonb) TO outbox_admin;
