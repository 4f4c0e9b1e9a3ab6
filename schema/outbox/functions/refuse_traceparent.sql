CREATE FUNCTION outbox.refuse_traceparent(p_value text, p_from_setting boolean) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RAISE EXCEPTION 'outbox.enqueue: invalid traceparent % (from %)', quote_literal(left(p_value, 80)),
                    CASE WHEN p_from_setting THEN 'the setting outbox.traceparent' ELSE 'p_traceparent' END
        USING ERRCODE = 'OR012',
              HINT = 'A W3C traceparent of version 00: 00-<32 hex trace id, not all zeros>-<16 hex parent id, not all zeros>-<2 hex flags>, lower case.';
END
$$;

REVOKE ALL ON FUNCTION outbox.refuse_traceparent(p_value text, p_from_setting boolean) FROM PUBLIC;
