CREATE FUNCTION outbox.mcp_calls(p_token_hashes bytea[], p_tools text[], p_keys text[], p_arguments jsonb[], p_run_ids text[], p_ordering_keys text[], p_traceparents text[], p_tasks boolean[], p_task_ttl_ms bigint[], p_argument_hashes bytea[]) RETURNS TABLE(ord integer, answer outbox.mcp_answer)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    n integer := coalesce(cardinality(p_token_hashes), 0);
    i integer;
BEGIN
    IF n > 256 OR coalesce(cardinality(p_tools), 0) <> n OR coalesce(cardinality(p_keys), 0) <> n
       OR coalesce(cardinality(p_arguments), 0) <> n OR coalesce(cardinality(p_run_ids), 0) <> n
       OR coalesce(cardinality(p_ordering_keys), 0) <> n OR coalesce(cardinality(p_traceparents), 0) <> n
       OR coalesce(cardinality(p_tasks), 0) <> n OR coalesce(cardinality(p_task_ttl_ms), 0) <> n
       OR coalesce(cardinality(p_argument_hashes), 0) <> n THEN
        RAISE EXCEPTION 'outbox.mcp_calls: the arrays must have the same length, at most 256 (% token hashes)', n
            USING ERRCODE = '22023';
    END IF;
    FOR i IN 1 .. n LOOP
        ord := i;
        answer := outbox.mcp_call(p_token_hashes[i], p_tools[i], p_keys[i], p_arguments[i], p_run_ids[i],
                                  p_ordering_keys[i], p_traceparents[i], coalesce(p_tasks[i], false),
                                  p_task_ttl_ms[i], p_argument_hashes[i]);
        RETURN NEXT;
    END LOOP;
END
$$;

COMMENT ON FUNCTION outbox.mcp_calls(p_token_hashes bytea[], p_tools text[], p_keys text[], p_arguments jsonb[], p_run_ids text[], p_ordering_keys text[], p_traceparents text[], p_tasks boolean[], p_task_ttl_ms bigint[], p_argument_hashes bytea[]) IS 'The MCP front door''s batched tools/call: outbox.mcp_call of each element in one transaction (0046).';

REVOKE ALL ON FUNCTION outbox.mcp_calls(p_token_hashes bytea[], p_tools text[], p_keys text[], p_arguments jsonb[], p_run_ids text[], p_ordering_keys text[], p_traceparents text[], p_tasks boolean[], p_task_ttl_ms bigint[], p_argument_hashes bytea[]) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_calls(p_token_hashes bytea[], p_tools text[], p_keys text[], p_arguments jsonb[], p_run_ids text[], p_ordering_keys text[], p_traceparents text[], p_tasks boolean[], p_task_ttl_ms bigint[], p_argument_hashes bytea[]) TO outbox_mcp;
