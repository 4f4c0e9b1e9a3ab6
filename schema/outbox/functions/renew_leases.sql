CREATE FUNCTION outbox.renew_leases(p_relay text, p_ids bigint[], p_lease_ms integer) RETURNS SETOF bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RETURN QUERY
    WITH held AS (
        SELECT i.id
          FROM (SELECT DISTINCT h.id FROM unnest(p_ids) AS h(id)) AS h
          JOIN outbox.intents i ON i.id = h.id
         WHERE i.state IS NOT DISTINCT FROM 'in_flight'   -- not intents_in_flight: by id
           AND i.lease_owner = p_relay
           AND i.lease_expires_at < now() + p_lease_ms * interval '1 millisecond' * 5 / 6
           FOR UPDATE OF i SKIP LOCKED
    )
    UPDATE outbox.intents i
       SET lease_expires_at = now() + p_lease_ms * interval '1 millisecond'
      FROM held
     WHERE i.id = held.id
    RETURNING i.id;
END
$$;

REVOKE ALL ON FUNCTION outbox.renew_leases(p_relay text, p_ids bigint[], p_lease_ms integer) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.renew_leases(p_relay text, p_ids bigint[], p_lease_ms integer) TO outbox_relay;
