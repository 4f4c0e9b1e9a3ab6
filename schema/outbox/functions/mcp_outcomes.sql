CREATE FUNCTION outbox.mcp_outcomes(p_intent_keys text[]) RETURNS SETOF outbox.mcp_answer
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RETURN;
END
$$;

COMMENT ON FUNCTION outbox.mcp_outcomes(p_intent_keys text[]) IS 'Retired in 0036 (it read any client''s outcome without a token): answers no row; kept for the 0.1.0 front door, dropped in the next release.';

CREATE FUNCTION outbox.mcp_outcomes(p_token_hashes bytea[], p_intent_keys text[]) RETURNS SETOF outbox.mcp_answer
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    h      bytea;
    k      text;
    client text;
BEGIN
    IF cardinality(p_token_hashes) IS DISTINCT FROM cardinality(p_intent_keys) THEN
        RAISE EXCEPTION 'outbox.mcp_outcomes: % token hashes for % keys', cardinality(p_token_hashes),
                        cardinality(p_intent_keys)
            USING ERRCODE = '22023';
    END IF;
    FOR h, k IN SELECT x.h, x.k FROM unnest(p_token_hashes, p_intent_keys) AS x(h, k) LOOP
        client := (SELECT c.name FROM outbox.mcp_clients c WHERE c.token_hash = h);
        CONTINUE WHEN client IS NULL OR NOT starts_with(k, 'mcp:' || client || ':');
        RETURN NEXT outbox.mcp_answer_of(client, substr(k, length('mcp:' || client || ':') + 1), NULL, false, false);
    END LOOP;
END
$$;

COMMENT ON FUNCTION outbox.mcp_outcomes(p_token_hashes bytea[], p_intent_keys text[]) IS 'The MCP front door''s batched look-up: the answer for each (token hash, intent key) whose key is that client''s (0036).';

REVOKE ALL ON FUNCTION outbox.mcp_outcomes(p_intent_keys text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_outcomes(p_intent_keys text[]) TO outbox_mcp;

REVOKE ALL ON FUNCTION outbox.mcp_outcomes(p_token_hashes bytea[], p_intent_keys text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_outcomes(p_token_hashes bytea[], p_intent_keys text[]) TO outbox_mcp;
