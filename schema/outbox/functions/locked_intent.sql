CREATE FUNCTION outbox.locked_intent(p_key text, p_operation text) RETURNS outbox.intents
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    row outbox.intents;
BEGIN
    SELECT * INTO row FROM outbox.intents WHERE key = p_key FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'outbox.%: no intent with key %', p_operation, coalesce(quote_literal(p_key), 'NULL')
            USING ERRCODE = 'OR008';
    END IF;
    RETURN row;
END
$$;

REVOKE ALL ON FUNCTION outbox.locked_intent(p_key text, p_operation text) FROM PUBLIC;
