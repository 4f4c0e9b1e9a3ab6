CREATE FUNCTION outbox.claim_unknown(p_relay text, p_limit integer, p_lease_ms integer) RETURNS TABLE(id bigint, key text, target text, attempt integer, first_attempt_ms bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RETURN QUERY
    WITH due AS (
        SELECT i.id
          FROM outbox.intents i
          JOIN outbox.targets t ON t.name = i.target
         WHERE i.state = 'unknown' AND i.next_attempt_at <= now()
           AND (t.status_url IS NOT NULL OR t.status_tool IS NOT NULL) AND t.enabled   -- 0037
           AND (i.lease_expires_at IS NULL OR i.lease_expires_at < now())
         ORDER BY i.next_attempt_at
         LIMIT p_limit
           FOR UPDATE OF i SKIP LOCKED
    )
    UPDATE outbox.intents i
       SET lease_owner = p_relay,
           lease_expires_at = now() + p_lease_ms * interval '1 millisecond',
           updated_at = now()
      FROM due
     WHERE i.id = due.id
    RETURNING i.id, i.key, i.target, i.attempts,
              (extract(epoch FROM i.first_attempt_at) * 1000)::bigint;
END
$$;

REVOKE ALL ON FUNCTION outbox.claim_unknown(p_relay text, p_limit integer, p_lease_ms integer) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.claim_unknown(p_relay text, p_limit integer, p_lease_ms integer) TO outbox_relay;
