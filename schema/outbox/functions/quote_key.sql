CREATE FUNCTION outbox.quote_key(p_key text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    c   text;
    out text := '';
BEGIN
    IF p_key IS NULL THEN
        RETURN 'NULL';
    END IF;
    IF p_key !~ '[\u0001-\u001f\u007f-\u009f]' THEN
        RETURN quote_literal(p_key);
    END IF;
    FOREACH c IN ARRAY regexp_split_to_array(p_key, '') LOOP
        out := out || CASE WHEN c = '\' THEN '\\'
                           WHEN c = '''' THEN '\'''
                           WHEN c = E'\n' THEN '\n'
                           WHEN c = E'\r' THEN '\r'
                           WHEN c = E'\t' THEN '\t'
                           WHEN c ~ '[\u0001-\u001f\u007f-\u009f]' THEN '\u' || lpad(upper(to_hex(ascii(c))), 4, '0')
                           ELSE c END;
    END LOOP;
    RETURN 'E''' || out || '''';
END
$$;

COMMENT ON FUNCTION outbox.quote_key(p_key text) IS 'A key quoted for a message; with a control character, as an escape string (E''a\nb''), never raw (0023).';

REVOKE ALL ON FUNCTION outbox.quote_key(p_key text) FROM PUBLIC;
