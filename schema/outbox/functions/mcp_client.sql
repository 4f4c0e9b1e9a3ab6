CREATE FUNCTION outbox.mcp_client(p_name text, p_token text, p_tools text[] DEFAULT NULL::text[]) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
DECLARE
    unknown_tools text[];
BEGIN
    IF p_name IS NULL OR p_name !~ '^[A-Za-z0-9_.-]{1,64}$' THEN
        RAISE EXCEPTION 'outbox.mcp_client: a client name is 1 to 64 of A-Z a-z 0-9 _ . -, got %',
                        coalesce(quote_literal(p_name), 'NULL')
            USING ERRCODE = 'OR021';
    END IF;
    IF p_token IS NULL OR octet_length(p_token) < 32 THEN
        RAISE EXCEPTION 'outbox.mcp_client: the token of client % must be at least 32 bytes', quote_literal(p_name)
            USING ERRCODE = 'OR021', HINT = 'For example: openssl rand -hex 32';
    END IF;
    SELECT array_agg(t) INTO unknown_tools
      FROM unnest(p_tools) t WHERE NOT EXISTS (SELECT 1 FROM outbox.mcp_tools m WHERE m.tool = t);
    IF unknown_tools IS NOT NULL THEN
        RAISE EXCEPTION 'outbox.mcp_client: no such tool: %', array_to_string(unknown_tools, ', ')
            USING ERRCODE = 'OR021';
    END IF;
    INSERT INTO outbox.mcp_clients AS c (name, token_hash, tools)
    VALUES (p_name, sha256(convert_to(p_token, 'UTF8')), p_tools)
    ON CONFLICT (name) DO UPDATE SET token_hash = EXCLUDED.token_hash, tools = EXCLUDED.tools, rotated_at = now();
    RETURN p_name;
END
$_$;

COMMENT ON FUNCTION outbox.mcp_client(p_name text, p_token text, p_tools text[]) IS 'Create an MCP client or rotate its token (only its SHA-256 is stored); p_tools: the tools it may use (NULL = all).';

REVOKE ALL ON FUNCTION outbox.mcp_client(p_name text, p_token text, p_tools text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_client(p_name text, p_token text, p_tools text[]) TO outbox_admin;
