CREATE FUNCTION outbox.refuse_front_door(p_function text, p_what text, p_value text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RAISE EXCEPTION 'outbox.%: the % % starts with "mcp:", which is reserved for the MCP front door',
                    p_function, p_what, outbox.quote_key(p_value)
        USING ERRCODE = 'OR026',
              DETAIL = 'Keys, run ids and ordering keys that start with "mcp:" are the MCP clients'' (outbox-relay mcp names them mcp:<client>:<key>); only the front door''s functions (outbox.mcp_*) make, read or cancel them.',
              HINT = 'Use a key, run id or ordering key that does not start with "mcp:", e.g. one that starts with your service''s name.';
END
$$;

COMMENT ON FUNCTION outbox.refuse_front_door(p_function text, p_what text, p_value text) IS 'Raises OR026 for a key, run id or ordering key of the MCP front door (mcp:…) given to a function an application calls (0036).';

REVOKE ALL ON FUNCTION outbox.refuse_front_door(p_function text, p_what text, p_value text) FROM PUBLIC;
