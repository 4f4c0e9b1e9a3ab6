CREATE FUNCTION outbox.prune_target(p_target text, p_retain_for interval, p_dedupe_window interval, p_limit integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    doomed bigint[];
BEGIN
    SELECT array_agg(d.id) INTO doomed
      FROM (SELECT i.id
              FROM outbox.intents i
             WHERE i.target = p_target AND i.state IN ('succeeded', 'failed', 'cancelled')
               AND i.updated_at < now() - p_retain_for
               AND i.compensates IS NULL
               AND NOT EXISTS (SELECT 1 FROM outbox.intents c WHERE c.compensates = i.key)
               -- 0024: a failed intent of an ordering group stays, with or without later
               -- steps: it holds its group until a person cancels it (then the group goes on)
               AND NOT (i.state = 'failed' AND i.ordering_key IS NOT NULL)
             ORDER BY i.updated_at
             LIMIT p_limit
               FOR UPDATE SKIP LOCKED) d;
    RETURN outbox.prune_ids(doomed, p_dedupe_window);
END
$$;

REVOKE ALL ON FUNCTION outbox.prune_target(p_target text, p_retain_for interval, p_dedupe_window interval, p_limit integer) FROM PUBLIC;
