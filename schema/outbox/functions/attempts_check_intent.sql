CREATE FUNCTION outbox.attempts_check_intent() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    PERFORM 1 FROM outbox.intents i WHERE i.id = NEW.intent_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'outbox.attempts: intent % does not exist', coalesce(NEW.intent_id::text, 'NULL')
            USING ERRCODE = 'foreign_key_violation',
                  DETAIL = 'Every attempts row belongs to a row of outbox.intents (attempts.intent_id = intents.id).';
    END IF;
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION outbox.attempts_check_intent() IS 'Row-level reference check attempts.intent_id → intents.id on INSERT, skipped by outbox.record (0048: a statement trigger''s transition table copied every row, even when its WHEN skipped it).';

REVOKE ALL ON FUNCTION outbox.attempts_check_intent() FROM PUBLIC;
