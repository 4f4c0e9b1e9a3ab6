CREATE FUNCTION outbox.prune_step(p_limit integer DEFAULT 5000) RETURNS TABLE(pruned integer, forgotten integer, locked boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    t      record;
    budget integer := p_limit;
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 100000 THEN
        RAISE EXCEPTION 'outbox.prune: limit must be from 1 to 100000, got %', coalesce(p_limit::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    pruned := 0;
    forgotten := 0;
    locked := pg_try_advisory_xact_lock(1330774018, 0);
    IF NOT locked THEN
        RETURN NEXT;
        RETURN;
    END IF;
    -- Oldest retention first across targets would need a sort over all of
    -- them; targets are few, so each gets the budget that is left in turn.
    FOR t IN SELECT name, retain_for, dedupe_window FROM outbox.targets ORDER BY name LOOP
        EXIT WHEN budget <= 0;
        budget := budget - outbox.prune_target(t.name, t.retain_for, t.dedupe_window, budget);
    END LOOP;
    IF budget > 0 THEN
        budget := budget - outbox.prune_linked(budget);
    END IF;
    pruned := p_limit - budget;

    DELETE FROM outbox.tombstones s
     WHERE s.ctid = ANY (ARRAY(SELECT x.ctid FROM outbox.tombstones x
                                WHERE x.forget_at < now() LIMIT p_limit));
    GET DIAGNOSTICS forgotten = ROW_COUNT;
    -- 0036: MCP tasks past their TTL (not counted: forgotten counts tombstones).
    DELETE FROM outbox.mcp_tasks k
     WHERE k.ctid = ANY (ARRAY(SELECT x.ctid FROM outbox.mcp_tasks x
                                WHERE x.expires_at <= now() LIMIT p_limit));
    -- 0040: argument keys past their tool's window.
    DELETE FROM outbox.mcp_argument_keys k
     WHERE k.ctid = ANY (ARRAY(SELECT x.ctid FROM outbox.mcp_argument_keys x
                                 JOIN outbox.mcp_tools m ON m.tool = x.tool
                                WHERE x.first_at + m.argument_window <= now() LIMIT p_limit));
    RETURN NEXT;
END
$$;

COMMENT ON FUNCTION outbox.prune_step(p_limit integer) IS 'One bounded step of retention (pruned intents, forgotten tombstones); call again while pruned = the limit.';

REVOKE ALL ON FUNCTION outbox.prune_step(p_limit integer) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.prune_step(p_limit integer) TO outbox_relay;
GRANT ALL ON FUNCTION outbox.prune_step(p_limit integer) TO outbox_admin;
