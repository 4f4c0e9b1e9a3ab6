CREATE FUNCTION outbox.notify_circuit_change() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    PERFORM pg_notify('outbox_events', jsonb_strip_nulls(jsonb_build_object(
        'event', CASE WHEN NEW.circuit = 'closed' THEN 'circuit_closed' ELSE 'circuit_opened' END,
        'target', NEW.target, 'reason', NEW.circuit_reason,
        'at', outbox.utc_text(now())))::text);
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION outbox.notify_circuit_change() IS 'NOTIFY outbox_events when a target''s circuit opens (from closed) or closes (0015).';

REVOKE ALL ON FUNCTION outbox.notify_circuit_change() FROM PUBLIC;
