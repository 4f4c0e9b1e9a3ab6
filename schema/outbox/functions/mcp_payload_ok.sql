CREATE FUNCTION outbox.mcp_payload_ok(p_payload jsonb) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
    SELECT jsonb_typeof(p_payload) = 'object'
           AND (SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(p_payload) k) = '{arguments,tool}'
           AND jsonb_typeof(p_payload -> 'tool') = 'string'
           AND p_payload ->> 'tool' ~ '^[^[:cntrl:]]{1,128}$'
           AND jsonb_typeof(p_payload -> 'arguments') = 'object'
$_$;

COMMENT ON FUNCTION outbox.mcp_payload_ok(p_payload jsonb) IS 'Whether a payload is {"tool": NAME, "arguments": {...}} and nothing else: what an mcp target takes (0037).';

REVOKE ALL ON FUNCTION outbox.mcp_payload_ok(p_payload jsonb) FROM PUBLIC;
