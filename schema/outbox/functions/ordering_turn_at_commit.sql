CREATE FUNCTION outbox.ordering_turn_at_commit() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    head_id bigint;
    held    boolean;
BEGIN
    SELECT h.id, h.state = 'pending' AND h.next_attempt_at = 'infinity' INTO head_id, held
      FROM outbox.intents h
     WHERE h.ordering_key = NEW.ordering_key AND h.state NOT IN ('succeeded', 'cancelled')
     ORDER BY h.id
     LIMIT 1
       FOR SHARE;
    IF held THEN
        UPDATE outbox.intents i
           SET next_attempt_at = greatest(now(), coalesce(i.not_before, now())), updated_at = now()
         WHERE i.id = head_id AND i.state = 'pending' AND i.next_attempt_at = 'infinity';
    ELSIF head_id IS NULL THEN
        -- Nothing live in the group (the intent was answered from a tombstone and taken
        -- back, say): its row goes. This transaction holds the row's lock.
        DELETE FROM outbox.ordering_groups g WHERE g.ordering_key = NEW.ordering_key;
    END IF;
    RETURN NULL;
END
$$;

REVOKE ALL ON FUNCTION outbox.ordering_turn_at_commit() FROM PUBLIC;
