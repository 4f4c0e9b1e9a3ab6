CREATE FUNCTION outbox.mcp_oauth_client(p_name text) RETURNS TABLE(client text, token_hash bytea)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT c.name, c.token_hash FROM outbox.mcp_clients c WHERE c.name = p_name
$$;

COMMENT ON FUNCTION outbox.mcp_oauth_client(p_name text) IS 'The MCP front door''s look-up of the client an OAuth access token names (0043): its name and the hash its statements authenticate with.';

REVOKE ALL ON FUNCTION outbox.mcp_oauth_client(p_name text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_oauth_client(p_name text) TO outbox_mcp;
