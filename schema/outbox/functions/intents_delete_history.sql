CREATE FUNCTION outbox.intents_delete_history() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    ids      bigint[];
    keys     text[];
    dangling text;
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        TRUNCATE outbox.attempts, outbox.mismatches;
        RETURN NULL;
    END IF;
    SELECT array_agg(o.id), array_agg(o.key) INTO ids, keys FROM old_intents o;
    DELETE FROM outbox.attempts a WHERE a.intent_id = ANY (ids);
    DELETE FROM outbox.mismatches m WHERE m.key = ANY (keys);
    SELECT c.key INTO dangling FROM outbox.intents c WHERE c.compensates = ANY (keys) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'outbox.intents: intent % compensates a deleted intent', quote_literal(dangling)
            USING ERRCODE = 'foreign_key_violation',
                  DETAIL = 'intents.compensates names the key of an existing intent; delete both together.';
    END IF;
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION outbox.intents_delete_history() IS 'Deleting intents deletes their attempts and mismatches, and refuses to leave a compensation without its original (0012; replaces ON DELETE CASCADE and the foreign keys on intents.key).';

REVOKE ALL ON FUNCTION outbox.intents_delete_history() FROM PUBLIC;
