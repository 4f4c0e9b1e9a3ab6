CREATE FUNCTION outbox.enqueue_remembered(p_key text, p_target text, p_fingerprint bytea, s outbox.tombstones) RETURNS outbox.enqueue_result
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    result outbox.enqueue_result;
BEGIN
    IF s.enqueued_by IS DISTINCT FROM session_user::text AND NOT starts_with(p_key, 'mcp:')   -- 0036
       AND outbox.isolated() THEN   -- 0026
        PERFORM outbox.refuse_others_key('enqueue', p_key);
    END IF;
    IF s.target <> p_target THEN
        RAISE EXCEPTION 'outbox.enqueue: key % is already used for target %, not %',
                        quote_literal(p_key), quote_literal(s.target), quote_literal(p_target)
            USING ERRCODE = 'OR001',
                  DETAIL = format('Its intent settled %s at %s and was pruned at %s; the key is remembered until %s.',
                                  s.state, outbox.utc_text(s.settled_at), outbox.utc_text(s.pruned_at),
                                  outbox.utc_text(s.forget_at)),
                  HINT = 'An idempotency key names one action; use a new key for a new action.';
    END IF;
    IF s.fingerprint <> substring(p_fingerprint FROM 1 FOR 16)
       AND (SELECT t.on_mismatch FROM outbox.targets t WHERE t.name = p_target) IS DISTINCT FROM 'keep_original' THEN
        RAISE EXCEPTION 'outbox.enqueue: key % was already used with a different payload (its intent was pruned at %: the fields that differ are no longer known)',
                        quote_literal(p_key), outbox.utc_text(s.pruned_at)
            USING ERRCODE = 'OR001',
                  DETAIL = format('target %s, on_mismatch = reject; the key is remembered until %s', s.target,
                                  outbox.utc_text(s.forget_at)),
                  HINT = 'An idempotency key names one action; use a new key for a new action, or send the same arguments.';
    END IF;
    result := (p_key, s.intent_id, s.target, outbox.visible_status(s.state, false), false,
               CASE WHEN s.state IN ('succeeded', 'failed') THEN s.response_status END, NULL, NULL);
    RETURN result;
END
$$;

REVOKE ALL ON FUNCTION outbox.enqueue_remembered(p_key text, p_target text, p_fingerprint bytea, s outbox.tombstones) FROM PUBLIC;
