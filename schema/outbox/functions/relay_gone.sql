CREATE FUNCTION outbox.relay_gone(p_relay text) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    DELETE FROM outbox.relays WHERE relay_id = p_relay;
$$;

REVOKE ALL ON FUNCTION outbox.relay_gone(p_relay text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.relay_gone(p_relay text) TO outbox_relay;
