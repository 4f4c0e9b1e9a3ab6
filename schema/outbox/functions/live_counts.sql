CREATE FUNCTION outbox.live_counts() RETURNS TABLE(state outbox.intent_state, intents bigint, oldest_due_age_s double precision)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RETURN QUERY
    SELECT 'pending'::outbox.intent_state, count(*),
           coalesce(extract(epoch FROM now() - min(i.next_attempt_at) FILTER (WHERE i.next_attempt_at <= now()))::float8, 0)
      FROM outbox.intents i WHERE i.state = 'pending'
    UNION ALL
    SELECT 'in_flight', count(*), NULL FROM outbox.intents i WHERE i.state = 'in_flight'
    UNION ALL
    SELECT 'unknown', count(*), NULL FROM outbox.intents i WHERE i.state = 'unknown'
    UNION ALL
    SELECT 'awaiting_approval', count(*), NULL FROM outbox.intents i WHERE i.state = 'awaiting_approval';
END
$$;

REVOKE ALL ON FUNCTION outbox.live_counts() FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.live_counts() TO outbox_relay;
GRANT ALL ON FUNCTION outbox.live_counts() TO outbox_operator;
