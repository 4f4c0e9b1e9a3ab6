CREATE FUNCTION outbox.relay_alive() RETURNS boolean
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM outbox.relays WHERE heartbeat_at > now() - interval '2 minutes');
END
$$;

COMMENT ON FUNCTION outbox.relay_alive() IS 'Whether some relay sent a heartbeat in the last 2 minutes (0036).';

REVOKE ALL ON FUNCTION outbox.relay_alive() FROM PUBLIC;
