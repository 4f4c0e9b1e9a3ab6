CREATE FUNCTION outbox.reject(p_key text, p_by text, p_reason text) RETURNS outbox.intent_state
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    row outbox.intents := outbox.ordering_locked_intent(p_key, 'reject');   -- the group's settle lock too
BEGIN
    IF p_by IS NULL OR p_by = '' THEN
        RAISE EXCEPTION 'outbox.reject: say who rejects (p_by)' USING ERRCODE = '22023';
    END IF;
    IF row.state <> 'awaiting_approval' THEN
        RAISE EXCEPTION 'outbox.reject: key % is %, not awaiting_approval', quote_literal(p_key), row.state
            USING ERRCODE = 'OR007';
    END IF;
    UPDATE outbox.intents
       SET state = 'cancelled', decided_by = p_by,
           last_error = 'rejected: ' || coalesce(p_reason, 'no reason given'),
           decision_note = p_reason, updated_at = now()
     WHERE id = row.id;
    PERFORM outbox.note_decision(row.id, row.attempts, p_by,
                                 format('rejected by %s (session user %s): %s', p_by, session_user, coalesce(p_reason, '')));
    PERFORM outbox.settle(ARRAY[row.id], ARRAY['cancelled'::outbox.intent_state], ARRAY[row.ordering_key]);
    RETURN 'cancelled';
END
$$;

REVOKE ALL ON FUNCTION outbox.reject(p_key text, p_by text, p_reason text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.reject(p_key text, p_by text, p_reason text) TO outbox_admin;
