CREATE FUNCTION outbox.notify_approved() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    PERFORM pg_notify('outbox_outcomes', '[' || to_json(NEW.key)::text || ']');
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION outbox.notify_approved() IS 'Wakes the relays'' waiters on a key that left awaiting_approval (NOTIFY outbox_outcomes, 0041); final states are settle''s.';

REVOKE ALL ON FUNCTION outbox.notify_approved() FROM PUBLIC;
