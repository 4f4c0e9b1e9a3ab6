CREATE FUNCTION outbox.fingerprint_doc(payload jsonb, volatile_paths text[]) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    AS $$
DECLARE
    doc  jsonb := payload;
    path text;
BEGIN
    FOREACH path IN ARRAY coalesce(volatile_paths, '{}'::text[]) LOOP
        doc := doc #- path::text[];
    END LOOP;
    -- jsonb prints 1e0 as 1; only a trailing zero after a decimal point
    -- can spell a number differently. Skip the walk when there is none.
    IF doc::text ~ '[0-9]\.[0-9]*0' THEN
        doc := outbox.canonical(doc);
    END IF;
    RETURN doc;
END
$$;

REVOKE ALL ON FUNCTION outbox.fingerprint_doc(payload jsonb, volatile_paths text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.fingerprint_doc(payload jsonb, volatile_paths text[]) TO outbox_app;
GRANT ALL ON FUNCTION outbox.fingerprint_doc(payload jsonb, volatile_paths text[]) TO outbox_relay;
GRANT ALL ON FUNCTION outbox.fingerprint_doc(payload jsonb, volatile_paths text[]) TO outbox_operator;
GRANT ALL ON FUNCTION outbox.fingerprint_doc(payload jsonb, volatile_paths text[]) TO outbox_admin;
