CREATE FUNCTION outbox.mcp_tools_passthrough() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF NOT NEW.passthrough THEN
        RETURN NEW;
    END IF;
    IF NEW.destructive THEN
        RAISE EXCEPTION 'outbox.mcp_tools: tool % cannot be passthrough: it is destructive (only a read-only tool, destructive false, is called without an intent)',
                        quote_literal(NEW.tool)
            USING ERRCODE = 'OR020';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM outbox.targets t WHERE t.name = NEW.target AND t.protocol = 'mcp') THEN
        RAISE EXCEPTION 'outbox.mcp_tools: tool % cannot be passthrough: its target % is not an mcp target',
                        quote_literal(NEW.tool), quote_literal(NEW.target)
            USING ERRCODE = 'OR020';
    END IF;
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION outbox.mcp_tools_passthrough() FROM PUBLIC;
