CREATE FUNCTION outbox.notify_relays_row() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM outbox.relays WHERE idle AND heartbeat_at > now() - interval '2 minutes') THEN
        PERFORM pg_notify('outbox_intents', '');
    END IF;
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION outbox.notify_relays_row() IS 'Wakes idle relays (NOTIFY outbox_intents) when an UPDATE made a row pending and due; runs only for such rows (the trigger''s WHEN clause).';

REVOKE ALL ON FUNCTION outbox.notify_relays_row() FROM PUBLIC;
