CREATE FUNCTION outbox.refuse_others_key(p_function text, p_key text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RAISE EXCEPTION 'outbox.%: key % is already used by another login', p_function, outbox.quote_key(p_key)
        USING ERRCODE = 'OR001',
              DETAIL = 'This login is isolated (outbox.isolated_logins): it sees and acts on only the intents it enqueued, and is not told what another login''s key is for or how it ended.',
              HINT = 'An idempotency key names one action; use a new key, e.g. one that starts with your service''s name.';
END
$$;

COMMENT ON FUNCTION outbox.refuse_others_key(p_function text, p_key text) IS 'Raises OR001 for a key another login enqueued, called by an isolated login that needs the key free (0026).';

REVOKE ALL ON FUNCTION outbox.refuse_others_key(p_function text, p_key text) FROM PUBLIC;
