CREATE FUNCTION outbox.note_decision(p_intent bigint, p_attempt integer, p_who text, p_note text) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    INSERT INTO outbox.attempts (intent_id, attempt, relay, class, request_sent, error)
    VALUES (p_intent, p_attempt, coalesce(p_who, session_user), 'resolved', false, p_note);
$$;

REVOKE ALL ON FUNCTION outbox.note_decision(p_intent bigint, p_attempt integer, p_who text, p_note text) FROM PUBLIC;
