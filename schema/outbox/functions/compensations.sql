CREATE FUNCTION outbox.compensations(p_key text) RETURNS TABLE(key text, target text, status text, state outbox.intent_state, attempts integer, created_at timestamp with time zone, updated_at timestamp with time zone)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT c.key, c.target, outbox.visible_status(c.state, c.ambiguous), c.state, c.attempts,
           c.created_at, c.updated_at
      FROM outbox.intents c
     WHERE c.compensates = p_key
       AND outbox.caller_may_see(c.enqueued_by)   -- 0026
     ORDER BY c.id
$$;

COMMENT ON FUNCTION outbox.compensations(p_key text) IS 'The compensating intents of a key, oldest first, with their agent-visible status. No row: none (or no such key).';

REVOKE ALL ON FUNCTION outbox.compensations(p_key text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.compensations(p_key text) TO outbox_app;
GRANT ALL ON FUNCTION outbox.compensations(p_key text) TO outbox_operator;
GRANT ALL ON FUNCTION outbox.compensations(p_key text) TO outbox_admin;
