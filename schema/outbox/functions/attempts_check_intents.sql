CREATE FUNCTION outbox.attempts_check_intents() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    missing bigint;
BEGIN
    SELECT a.intent_id INTO missing
      FROM new_attempts a
     WHERE NOT EXISTS (SELECT 1 FROM outbox.intents i WHERE i.id = a.intent_id)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'outbox.attempts: intent % does not exist', coalesce(missing::text, 'NULL')
            USING ERRCODE = 'foreign_key_violation',
                  DETAIL = 'Every attempts row belongs to a row of outbox.intents (attempts.intent_id = intents.id).';
    END IF;
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION outbox.attempts_check_intents() IS 'Statement-level reference check attempts.intent_id → intents.id (replaces a per-row foreign key; see migration 0008).';

REVOKE ALL ON FUNCTION outbox.attempts_check_intents() FROM PUBLIC;
