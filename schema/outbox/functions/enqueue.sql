CREATE FUNCTION outbox.enqueue(p_key text, p_target text, p_payload jsonb, p_run_id text DEFAULT NULL::text, p_not_before timestamp with time zone DEFAULT NULL::timestamp with time zone, p_ordering_key text DEFAULT NULL::text, p_traceparent text DEFAULT NULL::text) RETURNS outbox.enqueue_result
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF starts_with(p_key, 'mcp:') THEN
        PERFORM outbox.refuse_front_door('enqueue', 'key', p_key);
    ELSIF starts_with(p_run_id, 'mcp:') THEN
        PERFORM outbox.refuse_front_door('enqueue', 'run id', p_run_id);
    ELSIF starts_with(p_ordering_key, 'mcp:') THEN
        PERFORM outbox.refuse_front_door('enqueue', 'ordering key', p_ordering_key);
    END IF;
    RETURN outbox.enqueue_any(p_key, p_target, p_payload, p_run_id, p_not_before, p_ordering_key, p_traceparent);
END
$$;

COMMENT ON FUNCTION outbox.enqueue(p_key text, p_target text, p_payload jsonb, p_run_id text, p_not_before timestamp with time zone, p_ordering_key text, p_traceparent text) IS 'Enqueue an intent in the caller''s transaction (idempotent by key); p_ordering_key: ordered delivery; p_traceparent (or the setting outbox.traceparent): W3C trace context.';

REVOKE ALL ON FUNCTION outbox.enqueue(p_key text, p_target text, p_payload jsonb, p_run_id text, p_not_before timestamp with time zone, p_ordering_key text, p_traceparent text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.enqueue(p_key text, p_target text, p_payload jsonb, p_run_id text, p_not_before timestamp with time zone, p_ordering_key text, p_traceparent text) TO outbox_app;
GRANT ALL ON FUNCTION outbox.enqueue(p_key text, p_target text, p_payload jsonb, p_run_id text, p_not_before timestamp with time zone, p_ordering_key text, p_traceparent text) TO outbox_admin;
