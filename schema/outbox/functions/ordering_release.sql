CREATE FUNCTION outbox.ordering_release(p_groups text[]) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    released integer;
    emptied  text[];
BEGIN
    PERFORM outbox.ordering_lock_groups(p_groups);
    -- New statements from here on: they see what settled before the locks were granted.
    UPDATE outbox.intents i
       SET next_attempt_at = greatest(now(), coalesce(i.not_before, now())), updated_at = now()
      FROM (SELECT DISTINCT g FROM unnest(p_groups) AS g WHERE g IS NOT NULL) AS u
     CROSS JOIN LATERAL (SELECT h.id FROM outbox.intents h
                          WHERE h.ordering_key = u.g AND h.state NOT IN ('succeeded', 'cancelled')
                          ORDER BY h.id LIMIT 1) AS head
     WHERE i.id = head.id AND i.state = 'pending' AND i.next_attempt_at = 'infinity';
    GET DIAGNOSTICS released = ROW_COUNT;

    SELECT array_agg(e.ordering_key) INTO emptied
      FROM (SELECT o.ordering_key FROM outbox.ordering_groups o
             WHERE o.ordering_key = ANY (p_groups)
               AND NOT EXISTS (SELECT 1 FROM outbox.intents l
                                WHERE l.ordering_key = o.ordering_key AND l.state NOT IN ('succeeded', 'cancelled'))
               FOR UPDATE SKIP LOCKED) AS e;
    IF emptied IS NOT NULL THEN
        -- Locked: no enqueue can add to these groups now; look again with a new snapshot.
        DELETE FROM outbox.ordering_groups o
         WHERE o.ordering_key = ANY (emptied)
           AND NOT EXISTS (SELECT 1 FROM outbox.intents l
                            WHERE l.ordering_key = o.ordering_key AND l.state NOT IN ('succeeded', 'cancelled'));
    END IF;
    RETURN released;
END
$$;

REVOKE ALL ON FUNCTION outbox.ordering_release(p_groups text[]) FROM PUBLIC;
