CREATE FUNCTION outbox.refresh_statistics() RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET lock_timeout TO '50ms'
    AS $$
DECLARE
    known_pages integer;
    pages       bigint;
BEGIN
    -- ANALYZE by a role that does not own the table only warns: then never try.
    SELECT c.relpages INTO known_pages FROM pg_class c
     WHERE c.oid = 'outbox.intents'::regclass AND pg_has_role(c.relowner, 'USAGE');
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    BEGIN
        pages := pg_relation_size('outbox.intents'::regclass) / current_setting('block_size')::integer;
        IF pages <= 2 * greatest(known_pages, 0) + 128
           OR NOT pg_try_advisory_xact_lock(1330774020, 0) THEN
            RETURN false;   -- fresh enough, or another relay is at it
        END IF;
        ANALYZE outbox.intents;
    EXCEPTION WHEN lock_not_available THEN
        RETURN false;   -- autovacuum, another ANALYZE or DDL holds the table: not now
    END;
    RETURN true;
END
$$;

COMMENT ON FUNCTION outbox.refresh_statistics() IS 'ANALYZE outbox.intents if it has more than doubled (plus 1 MB) since its statistics were taken; never waits. True if it ran. Called by outbox.relay_heartbeat (no role calls it directly).';

REVOKE ALL ON FUNCTION outbox.refresh_statistics() FROM PUBLIC;
