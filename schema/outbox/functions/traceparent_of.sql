CREATE FUNCTION outbox.traceparent_of(p_key text) RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT i.traceparent FROM outbox.intents i
     WHERE i.key = p_key AND outbox.caller_may_see(i.enqueued_by)   -- 0026
       AND (NOT starts_with(p_key, 'mcp:') OR outbox.operator_session())   -- 0036
$$;

REVOKE ALL ON FUNCTION outbox.traceparent_of(p_key text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.traceparent_of(p_key text) TO outbox_app;
GRANT ALL ON FUNCTION outbox.traceparent_of(p_key text) TO outbox_operator;
