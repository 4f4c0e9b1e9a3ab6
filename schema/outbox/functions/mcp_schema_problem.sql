CREATE FUNCTION outbox.mcp_schema_problem(p_schema jsonb, p_path text DEFAULT ''::text) RETURNS text
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
    SELECT CASE WHEN outbox.mcp_schema_too_deep(p_schema)
                THEN 'the schema is nested deeper than 64 levels'
                ELSE outbox.mcp_schema_problem_at(
                         p_schema, p_schema, p_path, ARRAY[]::text[],
                         CASE WHEN p_schema ->> '$schema' ~ '/draft-0[67]/' THEN 'old'
                              WHEN p_schema ->> '$schema' ~ '/2019-09/' THEN '2019'
                              ELSE '2020' END) END
$_$;

COMMENT ON FUNCTION outbox.mcp_schema_problem(p_schema jsonb, p_path text) IS 'NULL when the JSON Schema uses only the supported subset, else what is wrong and where.';

REVOKE ALL ON FUNCTION outbox.mcp_schema_problem(p_schema jsonb, p_path text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_schema_problem(p_schema jsonb, p_path text) TO outbox_admin;
