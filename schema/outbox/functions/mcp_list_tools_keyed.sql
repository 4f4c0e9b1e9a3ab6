CREATE FUNCTION outbox.mcp_list_tools_keyed(p_token_hash bytea) RETURNS TABLE(client text, tool text, title text, description text, input_schema jsonb, destructive boolean, key_source text, argument_window_s double precision)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RETURN QUERY
    SELECT c.name, m.tool, m.title, m.description, m.input_schema, m.destructive, m.key_source,
           extract(epoch FROM m.argument_window)::float8
      FROM outbox.mcp_clients c
      LEFT JOIN outbox.mcp_tools m
        ON m.enabled AND (c.tools IS NULL OR m.tool = ANY (c.tools))
       AND EXISTS (SELECT 1 FROM outbox.targets t WHERE t.name = m.target AND t.enabled)
     WHERE c.token_hash = p_token_hash
     ORDER BY m.tool COLLATE "C";
END
$$;

REVOKE ALL ON FUNCTION outbox.mcp_list_tools_keyed(p_token_hash bytea) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_list_tools_keyed(p_token_hash bytea) TO outbox_mcp;
