CREATE FUNCTION outbox.relay_heartbeat(p_relay text, p_idle boolean) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    INSERT INTO outbox.relays AS r (relay_id, idle) VALUES (p_relay, p_idle)
    ON CONFLICT (relay_id) DO UPDATE SET idle = excluded.idle, heartbeat_at = now();
    DELETE FROM outbox.relays WHERE heartbeat_at < now() - interval '1 day';
    PERFORM outbox.refresh_statistics();   -- 0019
END
$$;

REVOKE ALL ON FUNCTION outbox.relay_heartbeat(p_relay text, p_idle boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.relay_heartbeat(p_relay text, p_idle boolean) TO outbox_relay;
