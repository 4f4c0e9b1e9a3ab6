CREATE FUNCTION outbox.targets_state_row() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO outbox.target_state (target) VALUES (NEW.name) ON CONFLICT DO NOTHING;
    ELSE
        -- Enabled again by an admin: whatever opened the circuit (410 Gone, say) is over.
        UPDATE outbox.target_state
           SET circuit = 'closed', circuit_since = now(), circuit_reason = NULL, probe_interval_ms = 0,
               probe_at = NULL, probe_owner = NULL, probe_expires_at = NULL, paused_until = NULL
         WHERE target = NEW.name AND circuit <> 'closed';
        PERFORM outbox.retries_due_now(NEW.name);   -- 0023
    END IF;
    RETURN NULL;
END
$$;

REVOKE ALL ON FUNCTION outbox.targets_state_row() FROM PUBLIC;
