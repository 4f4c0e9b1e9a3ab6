CREATE FUNCTION outbox.mcp_outcomes(p_intent_keys text[]) RETURNS SETOF outbox.mcp_answer
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    k      text;
    client text;
BEGIN
    FOREACH k IN ARRAY coalesce(p_intent_keys, '{}') LOOP
        CONTINUE WHEN NOT starts_with(k, 'mcp:');
        client := split_part(k, ':', 2);
        RETURN NEXT outbox.mcp_answer_of(client, substr(k, length('mcp:' || client || ':') + 1), NULL, false,
                                         false);
    END LOOP;
END
$$;

REVOKE ALL ON FUNCTION outbox.mcp_outcomes(p_intent_keys text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_outcomes(p_intent_keys text[]) TO outbox_mcp;
