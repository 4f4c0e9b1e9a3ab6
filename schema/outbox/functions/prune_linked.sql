CREATE FUNCTION outbox.prune_linked(p_limit integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    members bigint[];
    kept    bigint[];
BEGIN
    -- Candidates: prunable compensations and the prunable intents they undo.
    SELECT array_agg(DISTINCT x.id) INTO members
      FROM (SELECT c.id, o.id AS oid
              FROM outbox.intents c
              JOIN outbox.targets tc ON tc.name = c.target
              JOIN outbox.intents o ON o.key = c.compensates
              JOIN outbox.targets t_o ON t_o.name = o.target
             WHERE c.compensates IS NOT NULL
               AND c.state IN ('succeeded', 'failed', 'cancelled') AND c.updated_at < now() - tc.retain_for
               AND o.state IN ('succeeded', 'failed', 'cancelled') AND o.updated_at < now() - t_o.retain_for
               -- 0024: a failed intent of an ordering group stays (it holds its group)
               AND NOT (c.state = 'failed' AND c.ordering_key IS NOT NULL)
               AND NOT (o.state = 'failed' AND o.ordering_key IS NOT NULL)
             LIMIT p_limit) pairs
      CROSS JOIN LATERAL (VALUES (pairs.id), (pairs.oid)) AS x(id);
    IF members IS NULL THEN
        RETURN 0;
    END IF;
    -- Drop every member linked to an intent outside the set, until none is
    -- (a chain: a compensation of a compensation).
    LOOP
        SELECT array_agg(m.id) INTO kept
          FROM outbox.intents m
         WHERE m.id = ANY (members)
           AND NOT EXISTS (SELECT 1 FROM outbox.intents o
                            WHERE o.key = m.compensates AND NOT (o.id = ANY (members)))
           AND NOT EXISTS (SELECT 1 FROM outbox.intents c
                            WHERE c.compensates = m.key AND NOT (c.id = ANY (members)));
        EXIT WHEN coalesce(cardinality(kept), 0) = cardinality(members);
        members := kept;
        IF members IS NULL THEN
            RETURN 0;
        END IF;
    END LOOP;

    -- All of them or none: a member locked by someone else waits for the next run.
    SELECT array_agg(l.id) INTO kept
      FROM (SELECT i.id FROM outbox.intents i WHERE i.id = ANY (members) FOR UPDATE SKIP LOCKED) l;
    IF coalesce(cardinality(kept), 0) <> cardinality(members) THEN
        RETURN 0;
    END IF;
    RETURN outbox.prune_ids(members, NULL);
END
$$;

REVOKE ALL ON FUNCTION outbox.prune_linked(p_limit integer) FROM PUBLIC;
