CREATE FUNCTION outbox.mcp_argument_key(p_client text, p_tool text, p_window interval, p_hash bytea) RETURNS text
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    k text;
BEGIN
    INSERT INTO outbox.mcp_argument_keys AS a (client, tool, argument_hash, key, first_at)
    VALUES (p_client, p_tool, p_hash,
            'args-' || left(encode(sha256(convert_to(p_tool, 'UTF8') || '\x00'::bytea || p_hash), 'hex'), 32)
                    || '-' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD"T"HH24MISS.US"Z"'),
            now())
    ON CONFLICT (client, tool, argument_hash) DO UPDATE
       SET key = excluded.key, first_at = excluded.first_at
     WHERE a.first_at + p_window <= now()
    RETURNING a.key INTO k;
    IF k IS NULL THEN   -- within the window: the row is ours (locked), its key stands
        SELECT a.key INTO k FROM outbox.mcp_argument_keys a
         WHERE a.client = p_client AND a.tool = p_tool AND a.argument_hash = p_hash;
    END IF;
    RETURN k;
END
$$;

REVOKE ALL ON FUNCTION outbox.mcp_argument_key(p_client text, p_tool text, p_window interval, p_hash bytea) FROM PUBLIC;
