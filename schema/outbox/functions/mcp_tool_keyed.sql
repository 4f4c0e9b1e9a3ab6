CREATE FUNCTION outbox.mcp_tool_keyed(p_token_hash bytea, p_tool text) RETURNS TABLE(client text, tool text, target text, input_schema jsonb, key_source text, argument_window_s double precision)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RETURN QUERY
    SELECT c.name, m.tool, m.target, m.input_schema, m.key_source, extract(epoch FROM m.argument_window)::float8
      FROM outbox.mcp_clients c
      LEFT JOIN outbox.mcp_tools m
        ON m.tool = p_tool AND m.enabled AND (c.tools IS NULL OR m.tool = ANY (c.tools))
     WHERE c.token_hash = p_token_hash;
END
$$;

REVOKE ALL ON FUNCTION outbox.mcp_tool_keyed(p_token_hash bytea, p_tool text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_tool_keyed(p_token_hash bytea, p_tool text) TO outbox_mcp;
