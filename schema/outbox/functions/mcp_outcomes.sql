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
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    h        bytea;
    k        text;
    client   text;
    settled  outbox.mcp_answer[];
    answered integer[];
BEGIN
    IF cardinality(p_token_hashes) IS DISTINCT FROM cardinality(p_intent_keys) THEN
        RAISE EXCEPTION 'outbox.mcp_outcomes: % token hashes for % keys', cardinality(p_token_hashes),
                        cardinality(p_intent_keys)
            USING ERRCODE = '22023';
    END IF;
    -- 0049: the final ones in one query (mcp_answer_of's answer for them:
    -- no task asked for, the status is the state, the note the last error
    -- of a failed or cancelled one)
    SELECT array_agg(ROW(c.name, substr(x.k, length('mcp:' || c.name || ':') + 1), x.k, NULL::text, i.target,
                         i.state::text, i.state, true, false,
                         CASE WHEN i.state IN ('succeeded', 'failed') THEN i.response_status END,
                         CASE WHEN i.state IN ('succeeded', 'failed') THEN i.response_body END,
                         i.attempts,
                         outbox.mcp_message(i.state::text,
                                            CASE WHEN i.state IN ('failed', 'cancelled') THEN i.last_error END, NULL),
                         NULL::text[], NULL::text, NULL::timestamptz, NULL::bigint, i.updated_at)::outbox.mcp_answer
                     ORDER BY x.o),
           array_agg(x.o::integer)
      INTO settled, answered
      FROM unnest(p_token_hashes, p_intent_keys) WITH ORDINALITY AS x(h, k, o)
      JOIN outbox.mcp_clients c ON c.token_hash = x.h
      JOIN outbox.intents i ON i.key = x.k
     WHERE starts_with(x.k, 'mcp:' || c.name || ':') AND i.state IN ('succeeded', 'failed', 'cancelled');
    IF settled IS NOT NULL THEN
        RETURN QUERY SELECT * FROM unnest(settled);
    END IF;
    FOR h, k IN SELECT x.h, x.k FROM unnest(p_token_hashes, p_intent_keys) WITH ORDINALITY AS x(h, k, o)
                 WHERE answered IS NULL OR x.o <> ALL (answered) LOOP
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
