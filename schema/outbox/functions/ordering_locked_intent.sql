CREATE FUNCTION outbox.ordering_locked_intent(p_key text, p_operation text) RETURNS outbox.intents
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    grp  text;
    held boolean;
    row  outbox.intents;
BEGIN
    SELECT i.ordering_key, i.state = 'pending' AND i.next_attempt_at = 'infinity' INTO grp, held
      FROM outbox.intents i WHERE i.key = p_key;
    IF grp IS NOT NULL AND held THEN
        PERFORM outbox.ordering_lock_groups(ARRAY[grp]);
    END IF;
    row := outbox.locked_intent(p_key, p_operation);
    IF row.ordering_key IS NOT NULL THEN
        PERFORM outbox.ordering_lock_groups(ARRAY[row.ordering_key]);
    END IF;
    RETURN row;
END
$$;

REVOKE ALL ON FUNCTION outbox.ordering_locked_intent(p_key text, p_operation text) FROM PUBLIC;
