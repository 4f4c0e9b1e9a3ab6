CREATE FUNCTION outbox.canonical(doc jsonb) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
DECLARE
    t text := doc::text;
BEGIN
    IF t !~ '[0-9]\.[0-9]*0' THEN
        RETURN doc;
    END IF;
    -- (the same rewrite as in outbox.fingerprint)
    t := replace(replace(t, '\\', E'\x01'), '\"', E'\x02');
    IF t ~ '^(?:[^"]*"[^"]*")*[^"]*"[^"]*\.[0-9]*0' THEN
        t := regexp_replace(t, '("[^"]*")|([0-9]\.[0-9]*[1-9])0+\M|\.0+\M', '\1\2', 'g');
    ELSE
        t := regexp_replace(regexp_replace(replace(replace(replace(t, '.0,', ','), '.0]', ']'), '.0}', '}'),
                                           '([0-9]\.[0-9]*[1-9])0+\M', '\1', 'g'),
                            '\.0+\M', '', 'g');
    END IF;
    RETURN replace(replace(t, E'\x02', '\"'), E'\x01', '\\')::jsonb;
END
$$;

COMMENT ON FUNCTION outbox.canonical(doc jsonb) IS 'Canonical form of a JSON document: numbers at their shortest scale (jsonb orders keys and drops whitespace). Linear in the text; any depth.';

REVOKE ALL ON FUNCTION outbox.canonical(doc jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.canonical(doc jsonb) TO outbox_app;
GRANT ALL ON FUNCTION outbox.canonical(doc jsonb) TO outbox_relay;
GRANT ALL ON FUNCTION outbox.canonical(doc jsonb) TO outbox_operator;
GRANT ALL ON FUNCTION outbox.canonical(doc jsonb) TO outbox_admin;
