CREATE FUNCTION outbox.fingerprint(payload jsonb, volatile_paths text[]) RETURNS bytea
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    AS $$
DECLARE
    doc  jsonb := payload;
    path text;
    t    text;
BEGIN
    FOREACH path IN ARRAY coalesce(volatile_paths, '{}'::text[]) LOOP
        doc := doc #- path::text[];
    END LOOP;
    t := doc::text;
    IF t ~ '[0-9]\.[0-9]*0' THEN
        -- (the same rewrite as in outbox.canonical)
        t := replace(replace(t, '\\', E'\x01'), '\"', E'\x02');
        IF t ~ '^(?:[^"]*"[^"]*")*[^"]*"[^"]*\.[0-9]*0' THEN
            t := regexp_replace(t, '("[^"]*")|([0-9]\.[0-9]*[1-9])0+\M|\.0+\M', '\1\2', 'g');
        ELSE
            t := regexp_replace(regexp_replace(replace(replace(replace(t, '.0,', ','), '.0]', ']'), '.0}', '}'),
                                               '([0-9]\.[0-9]*[1-9])0+\M', '\1', 'g'),
                                '\.0+\M', '', 'g');
        END IF;
        t := replace(replace(t, E'\x02', '\"'), E'\x01', '\\');
    END IF;
    RETURN sha256(convert_to(t, 'UTF8'));
END
$$;

COMMENT ON FUNCTION outbox.fingerprint(payload jsonb, volatile_paths text[]) IS 'SHA-256 of the canonical payload without the target''s volatile paths.';

REVOKE ALL ON FUNCTION outbox.fingerprint(payload jsonb, volatile_paths text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.fingerprint(payload jsonb, volatile_paths text[]) TO outbox_app;
GRANT ALL ON FUNCTION outbox.fingerprint(payload jsonb, volatile_paths text[]) TO outbox_relay;
GRANT ALL ON FUNCTION outbox.fingerprint(payload jsonb, volatile_paths text[]) TO outbox_operator;
GRANT ALL ON FUNCTION outbox.fingerprint(payload jsonb, volatile_paths text[]) TO outbox_admin;
