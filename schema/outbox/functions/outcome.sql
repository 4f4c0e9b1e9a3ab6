CREATE FUNCTION outbox.outcome(p_key text) RETURNS TABLE(status text, response_status integer, response_body text, attempts integer, last_error text, message text, state outbox.intent_state, target text, updated_at timestamp with time zone)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF starts_with(p_key, 'mcp:') AND NOT outbox.operator_session() THEN
        PERFORM outbox.refuse_front_door('outcome', 'key', p_key);
    END IF;
    RETURN QUERY SELECT * FROM outbox.outcome_any(p_key);
END
$$;

COMMENT ON FUNCTION outbox.outcome(p_key text) IS 'The agent-visible outcome of a key, also of a pruned one while its tombstone lasts: no row for an unknown (or forgotten) key, or, for an isolated login, another login''s.';

REVOKE ALL ON FUNCTION outbox.outcome(p_key text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.outcome(p_key text) TO outbox_app;
GRANT ALL ON FUNCTION outbox.outcome(p_key text) TO outbox_admin;
GRANT ALL ON FUNCTION outbox.outcome(p_key text) TO outbox_relay;
GRANT ALL ON FUNCTION outbox.outcome(p_key text) TO outbox_operator;
