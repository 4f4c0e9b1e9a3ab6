CREATE FUNCTION outbox.mcp_schema_too_deep(p_schema jsonb) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    WITH RECURSIVE walk (v, depth) AS (
        SELECT p_schema, 0
        UNION ALL
        SELECT c.value, w.depth + 1
          FROM walk w,
               LATERAL (SELECT e.value FROM jsonb_each(CASE WHEN jsonb_typeof(w.v) = 'object' THEN w.v END) e
                        UNION ALL
                        SELECT a.value FROM jsonb_array_elements(CASE WHEN jsonb_typeof(w.v) = 'array' THEN w.v END) a) c
         WHERE w.depth <= 64)
    SELECT EXISTS (SELECT 1 FROM walk WHERE depth > 64)
$$;

COMMENT ON FUNCTION outbox.mcp_schema_too_deep(p_schema jsonb) IS 'Whether a schema nests deeper than the 64 levels relay/mcp/json_schema.c accepts.';

REVOKE ALL ON FUNCTION outbox.mcp_schema_too_deep(p_schema jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_schema_too_deep(p_schema jsonb) TO outbox_admin;
