CREATE FUNCTION outbox.release(p_relay text, p_ids bigint[], p_attempts integer[]) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    released integer;
BEGIN
    UPDATE outbox.intents i
       SET state = 'pending',
           attempts = i.attempts - 1,
           first_attempt_at = CASE WHEN i.attempts = 1 THEN NULL ELSE i.first_attempt_at END,
           lease_owner = NULL,
           lease_expires_at = NULL,
           next_attempt_at = now(),
           updated_at = now()
      FROM unnest(p_ids, p_attempts) AS u(id, attempt)
     WHERE i.id = u.id AND i.state IS NOT DISTINCT FROM 'in_flight'   -- not intents_in_flight: by id
       AND i.lease_owner = p_relay
       AND i.attempts = u.attempt;
    GET DIAGNOSTICS released = ROW_COUNT;
    RETURN released;
END
$$;

REVOKE ALL ON FUNCTION outbox.release(p_relay text, p_ids bigint[], p_attempts integer[]) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.release(p_relay text, p_ids bigint[], p_attempts integer[]) TO outbox_relay;
