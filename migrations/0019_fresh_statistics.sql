-- 0019: statistics that keep up with a table that grows from empty (issue 17;
-- docs/design.md, "Cost per delivery").
--
-- A new outbox (or one emptied by a TRUNCATE) starts with statistics that
-- describe an empty table. Under load the table grows by tens of megabytes a
-- minute, and until autovacuum analyzes it (its launcher looks once a minute)
-- the relay's statements are planned for a table of a few rows:
--   - record keeps a generic plan (0003: custom plans made with such
--     statistics turned quadratic), and a generic plan made while intents was
--     tiny joins the batch by scanning the whole table: about a second per
--     record batch at 50,000 rows;
--   - renew_leases walks intents_in_flight, which without statistics looks
--     like one row and in fact carries every dead in-flight entry since the
--     start: 3 to 4 seconds per call.
-- Measured in `make bench` (retention scenario, 2,000 enqueues/s into an empty
-- table, one relay with default options): 387 deliveries/s in the first
-- minute against 2,000 enqueued, and 3,890/s in the second while it caught up.
--
-- outbox.refresh_statistics() runs ANALYZE on intents when the table has more
-- than doubled (plus 1 MB) since its statistics were taken (pg_class.relpages
-- against the pages it has now: no cumulative-statistics counters, which lag
-- and are flushed only at commit). ANALYZE sends the invalidation that makes
-- every cached plan over intents be made again. It never waits: a relay
-- that holds its advisory lock (a class of its own, 1330774020) is already at
-- it, and a 50 ms lock_timeout gives way to autovacuum (which is then not
-- cancelled on our account) and to DDL. It does nothing when its owner may not
-- analyze intents (ANALYZE would only warn, at every heartbeat). The
-- relay calls it with its heartbeat (every 10 s and on each idle change), so a
-- growing table is analyzed about once per doubling; at steady size,
-- autovacuum's own analyses keep relpages current and the call does nothing.

CREATE FUNCTION outbox.refresh_statistics() RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET lock_timeout = '50ms' AS $$
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
COMMENT ON FUNCTION outbox.refresh_statistics() IS
    'ANALYZE outbox.intents if it has more than doubled (plus 1 MB) since its statistics were taken; never waits. True if it ran. Called by outbox.relay_heartbeat (no role calls it directly).';
REVOKE ALL ON FUNCTION outbox.refresh_statistics() FROM PUBLIC;

-- The heartbeat, as in 0003, refreshes the statistics when they are stale.
CREATE OR REPLACE FUNCTION outbox.relay_heartbeat(p_relay text, p_idle boolean) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO outbox.relays AS r (relay_id, idle) VALUES (p_relay, p_idle)
    ON CONFLICT (relay_id) DO UPDATE SET idle = excluded.idle, heartbeat_at = now();
    DELETE FROM outbox.relays WHERE heartbeat_at < now() - interval '1 day';
    PERFORM outbox.refresh_statistics();   -- 0019
END
$$;
