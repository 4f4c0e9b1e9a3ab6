CREATE FUNCTION outbox.resolve(p_key text, p_outcome text, p_note text) RETURNS outbox.intent_state
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    row outbox.intents := outbox.ordering_locked_intent(p_key, 'resolve');   -- the group's settle lock too
BEGIN
    IF p_outcome IS NULL OR p_outcome NOT IN ('succeeded', 'failed') THEN
        RAISE EXCEPTION 'outbox.resolve: outcome must be succeeded or failed, got %',
                        coalesce(quote_literal(p_outcome), 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF p_note IS NULL OR p_note = '' THEN
        RAISE EXCEPTION 'outbox.resolve: a note with the evidence is required' USING ERRCODE = '22023';
    END IF;
    IF row.state <> 'unknown' THEN
        RAISE EXCEPTION 'outbox.resolve: key % is %, not unknown', quote_literal(p_key), row.state
            USING ERRCODE = 'OR007';
    END IF;
    UPDATE outbox.intents
       SET state = p_outcome::outbox.intent_state,
           last_error = CASE WHEN p_outcome = 'failed' THEN 'resolved by an operator: ' || p_note END,
           decided_by = session_user, decision_note = p_note,
           lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
     WHERE id = row.id;
    PERFORM outbox.note_decision(row.id, row.attempts, session_user, 'resolved ' || p_outcome || ': ' || p_note);
    PERFORM outbox.settle(ARRAY[row.id], ARRAY[p_outcome::outbox.intent_state], ARRAY[row.ordering_key]);
    RETURN p_outcome::outbox.intent_state;
END
$$;

REVOKE ALL ON FUNCTION outbox.resolve(p_key text, p_outcome text, p_note text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.resolve(p_key text, p_outcome text, p_note text) TO outbox_admin;
