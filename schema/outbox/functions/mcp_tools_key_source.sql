CREATE FUNCTION outbox.mcp_tools_key_source() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.server_keys AND NEW.key_source = 'meta' THEN
            NEW.key_source := 'minted';
        ELSIF NEW.server_keys AND NEW.key_source <> 'minted' THEN
            RAISE EXCEPTION 'outbox.mcp_tools: tool % has server_keys true and key_source %: server_keys is key_source ''minted''',
                            quote_literal(NEW.tool), quote_literal(NEW.key_source)
                USING ERRCODE = '22023';
        END IF;
    ELSIF NEW.key_source IS NOT DISTINCT FROM OLD.key_source
          AND NEW.server_keys IS DISTINCT FROM OLD.server_keys THEN
        NEW.key_source := CASE WHEN NEW.server_keys THEN 'minted' ELSE 'meta' END;
    END IF;
    NEW.server_keys := NEW.key_source = 'minted';
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION outbox.mcp_tools_key_source() FROM PUBLIC;
