CREATE FUNCTION outbox.defer(p_relay text, p_ids bigint[], p_attempts integer[], p_delay_ms integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    deferred integer;
BEGIN
    UPDATE outbox.intents i
       SET state = 'pending',
           attempts = i.attempts - 1,
           lease_owner = NULL,
           lease_expires_at = NULL,
           next_attempt_at = now() + p_delay_ms * interval '1 millisecond',
           updated_at = now()
      FROM unnest(p_ids, p_attempts) AS u(id, attempt)
     WHERE i.id = u.id AND i.state = 'in_flight' AND i.lease_owner = p_relay
       AND i.attempts = u.attempt;
    GET DIAGNOSTICS deferred = ROW_COUNT;
    RETURN deferred;
END
$$;

COMMENT ON FUNCTION outbox.defer(p_relay text, p_ids bigint[], p_attempts integer[], p_delay_ms integer) IS 'Retired in 0009 with the retry budget. Kept for relays of earlier releases.';

REVOKE ALL ON FUNCTION outbox.defer(p_relay text, p_ids bigint[], p_attempts integer[], p_delay_ms integer) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.defer(p_relay text, p_ids bigint[], p_attempts integer[], p_delay_ms integer) TO outbox_relay;
