CREATE FUNCTION outbox.mcp_passthrough(p_token_hash bytea, p_tool text) RETURNS TABLE(client text, tool text, target text, upstream_tool text, url text, mcp_version text, auth_secret text, timeout_ms integer, headers jsonb, http_version text, ca_file text, client_cert_file text, client_key_file text)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT c.name, m.tool, m.target, coalesce(m.upstream_tool, m.tool), t.url, t.mcp_version,
           t.auth_secret, t.timeout_ms, t.headers, t.http_version, t.ca_file,
           t.client_cert_file, t.client_key_file
      FROM outbox.mcp_clients c
      JOIN outbox.mcp_tools m
        ON m.tool = p_tool AND m.enabled AND m.passthrough AND NOT m.destructive
       AND (c.tools IS NULL OR m.tool = ANY (c.tools))
      JOIN outbox.targets t ON t.name = m.target AND t.enabled AND t.protocol = 'mcp'
     WHERE c.token_hash = p_token_hash
$$;

COMMENT ON FUNCTION outbox.mcp_passthrough(p_token_hash bytea, p_tool text) IS 'The MCP front door''s look-up of a passthrough tool (0045): the target''s address and settings for a call with no intent; auth_secret is the name of the variable, never the token. No row: not passthrough, or not this client''s.';

REVOKE ALL ON FUNCTION outbox.mcp_passthrough(p_token_hash bytea, p_tool text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_passthrough(p_token_hash bytea, p_tool text) TO outbox_mcp;
