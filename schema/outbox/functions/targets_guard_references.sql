CREATE FUNCTION outbox.targets_guard_references() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.name = OLD.name THEN
        RETURN NEW;
    END IF;
    -- Waits for the enqueues of this target that have not ended (they hold
    -- the shared form) and holds new ones off until this transaction ends.
    PERFORM pg_advisory_xact_lock(1330774017, hashtext(OLD.name));
    IF EXISTS (SELECT 1 FROM outbox.intents WHERE target = OLD.name AND state = 'pending')       -- intents_due
       OR EXISTS (SELECT 1 FROM outbox.intents WHERE target = OLD.name
                     AND state IN ('succeeded', 'failed', 'cancelled'))                         -- intents_target
       OR EXISTS (SELECT 1 FROM outbox.intents WHERE target = OLD.name AND state = 'in_flight')   -- intents_in_flight
       OR EXISTS (SELECT 1 FROM outbox.intents WHERE target = OLD.name AND state = 'unknown')     -- intents_unknown
       OR EXISTS (SELECT 1 FROM outbox.intents WHERE target = OLD.name
                     AND state = 'awaiting_approval') THEN                                       -- intents_awaiting
        RAISE EXCEPTION 'outbox.targets: target % is named by intents; disable it instead (enabled = false)',
                        quote_literal(OLD.name)
            USING ERRCODE = 'foreign_key_violation',
                  HINT = 'Intents keep the name of their target for their whole history.';
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'outbox.targets: delete or rename target % at READ COMMITTED: this % transaction cannot see intents enqueued after it began',
                        quote_literal(OLD.name), current_setting('transaction_isolation')
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
END
$$;

COMMENT ON FUNCTION outbox.targets_guard_references() IS 'Refuses to delete or rename a target that intents name (replaces the intents.target foreign key; advisory lock per target name since migration 0010).';

REVOKE ALL ON FUNCTION outbox.targets_guard_references() FROM PUBLIC;
