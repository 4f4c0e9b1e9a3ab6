CREATE FUNCTION outbox.take_over_expired(p_relay text, p_limit integer, p_lease_ms integer, p_held bigint[]) RETURNS TABLE(id bigint, key text, target text, attempt integer, ambiguous boolean, first_attempt_ms bigint, previous_owner text)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RETURN QUERY
    WITH expired AS (
        SELECT i.id, i.lease_owner
          FROM outbox.intents i
         WHERE i.state = 'in_flight' AND i.lease_expires_at < now()
           AND i.id <> ALL (coalesce(p_held, '{}'))
         ORDER BY i.lease_expires_at
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    )
    UPDATE outbox.intents i
       SET lease_owner = p_relay,
           lease_expires_at = now() + p_lease_ms * interval '1 millisecond',
           updated_at = now()
      FROM expired
     WHERE i.id = expired.id
    RETURNING i.id, i.key, i.target, i.attempts, i.ambiguous,
              (extract(epoch FROM i.first_attempt_at) * 1000)::bigint, expired.lease_owner;
END
$$;

REVOKE ALL ON FUNCTION outbox.take_over_expired(p_relay text, p_limit integer, p_lease_ms integer, p_held bigint[]) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.take_over_expired(p_relay text, p_limit integer, p_lease_ms integer, p_held bigint[]) TO outbox_relay;
