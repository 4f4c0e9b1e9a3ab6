CREATE FUNCTION outbox.notify_relays() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM outbox.relays WHERE idle AND heartbeat_at > now() - interval '2 minutes') THEN
        RETURN NULL; -- every relay is busy (or none runs): they claim again on their own
    END IF;
    IF TG_OP = 'INSERT' THEN
        -- Rows enqueued due by this transaction have next_attempt_at = now(): one
        -- probe of intents_due per enabled target finds them.
        IF EXISTS (SELECT 1 FROM outbox.targets t
                    WHERE t.enabled
                      AND EXISTS (SELECT 1 FROM outbox.intents i
                                   WHERE i.state = 'pending' AND i.target = t.name
                                     AND i.next_attempt_at = now())) THEN
            PERFORM pg_notify('outbox_intents', '');
        END IF;
    ELSIF EXISTS (SELECT 1 FROM changed_rows WHERE state = 'pending' AND next_attempt_at <= now()) THEN
        PERFORM pg_notify('outbox_intents', '');
    END IF;
    RETURN NULL;
END
$$;

REVOKE ALL ON FUNCTION outbox.notify_relays() FROM PUBLIC;
