CREATE FUNCTION outbox.visible_status(state outbox.intent_state, ambiguous boolean) RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    AS $$
BEGIN
    RETURN CASE
        WHEN state = 'unknown' THEN 'reconciling'
        WHEN state IN ('pending', 'in_flight') AND ambiguous THEN 'reconciling'
        WHEN state = 'in_flight' THEN 'delivering'
        ELSE state::text
    END;
END
$$;

REVOKE ALL ON FUNCTION outbox.visible_status(state outbox.intent_state, ambiguous boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.visible_status(state outbox.intent_state, ambiguous boolean) TO outbox_app;
GRANT ALL ON FUNCTION outbox.visible_status(state outbox.intent_state, ambiguous boolean) TO outbox_relay;
GRANT ALL ON FUNCTION outbox.visible_status(state outbox.intent_state, ambiguous boolean) TO outbox_operator;
GRANT ALL ON FUNCTION outbox.visible_status(state outbox.intent_state, ambiguous boolean) TO outbox_admin;
