CREATE FUNCTION outbox.mcp_outcome(p_token_hash bytea, p_key text) RETURNS outbox.mcp_answer
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    client_name text;
BEGIN
    SELECT name INTO client_name FROM outbox.mcp_clients WHERE token_hash = p_token_hash;
    IF client_name IS NULL THEN
        RAISE EXCEPTION 'outbox.mcp_outcome: unknown client' USING ERRCODE = 'OR022';
    END IF;
    RETURN outbox.mcp_answer_of(client_name, p_key, NULL, false, false);
END
$$;

REVOKE ALL ON FUNCTION outbox.mcp_outcome(p_token_hash bytea, p_key text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_outcome(p_token_hash bytea, p_key text) TO outbox_mcp;
