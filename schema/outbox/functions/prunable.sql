CREATE FUNCTION outbox.prunable() RETURNS TABLE(target text, state outbox.intent_state, intents bigint, oldest_settled timestamp with time zone, newest_settled timestamp with time zone, retain_for interval)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT i.target, i.state, count(*), min(i.updated_at), max(i.updated_at), t.retain_for
      FROM outbox.targets t
      JOIN outbox.intents i ON i.target = t.name
     WHERE i.state IN ('succeeded', 'failed', 'cancelled') AND i.updated_at < now() - t.retain_for
       AND NOT EXISTS (SELECT 1 FROM outbox.intents o JOIN outbox.targets ot ON ot.name = o.target
                        WHERE o.key = i.compensates
                          AND NOT (o.state IN ('succeeded', 'failed', 'cancelled')
                                   AND o.updated_at < now() - ot.retain_for))
       AND NOT EXISTS (SELECT 1 FROM outbox.intents c JOIN outbox.targets ct ON ct.name = c.target
                        WHERE c.compensates = i.key
                          AND NOT (c.state IN ('succeeded', 'failed', 'cancelled')
                                   AND c.updated_at < now() - ct.retain_for))
       -- 0024: as in prune_target, a failed intent of an ordering group stays
       AND NOT (i.state = 'failed' AND i.ordering_key IS NOT NULL)
     GROUP BY i.target, i.state, t.retain_for
     ORDER BY i.target, i.state
$$;

COMMENT ON FUNCTION outbox.prunable() IS 'What outbox.prune would remove now, per target and final state.';

REVOKE ALL ON FUNCTION outbox.prunable() FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.prunable() TO outbox_operator;
