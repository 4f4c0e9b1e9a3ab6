CREATE FUNCTION outbox.utc_text(p_at timestamp with time zone) RETURNS text
    LANGUAGE sql STABLE STRICT
    AS $$
    SELECT CASE WHEN isfinite(p_at) THEN to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
                ELSE 'forever' END
$$;

REVOKE ALL ON FUNCTION outbox.utc_text(p_at timestamp with time zone) FROM PUBLIC;
