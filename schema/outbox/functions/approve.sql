CREATE FUNCTION outbox.approve(p_key text, p_by text) RETURNS outbox.intent_state
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    row outbox.intents := outbox.ordering_locked_intent(p_key, 'approve');   -- 0013
BEGIN
    IF p_by IS NULL OR p_by = '' THEN
        RAISE EXCEPTION 'outbox.approve: say who approves (p_by)' USING ERRCODE = '22023';
    END IF;
    IF row.state <> 'awaiting_approval' THEN
        RAISE EXCEPTION 'outbox.approve: key % is %, not awaiting_approval', quote_literal(p_key), row.state
            USING ERRCODE = 'OR007';
    END IF;
    UPDATE outbox.intents
       SET state = 'pending',
           next_attempt_at = CASE WHEN (outbox.ordering_head_before(row.ordering_key, row.id)).id IS NOT NULL
                                  THEN 'infinity' ELSE now() END,   -- 0013: held behind its group's head
           decided_by = p_by, decision_note = 'approved', updated_at = now()
     WHERE id = row.id;
    PERFORM outbox.note_decision(row.id, row.attempts, p_by,
                                 format('approved by %s (session user %s)', p_by, session_user));
    RETURN 'pending';
END
$$;

REVOKE ALL ON FUNCTION outbox.approve(p_key text, p_by text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.approve(p_key text, p_by text) TO outbox_admin;
