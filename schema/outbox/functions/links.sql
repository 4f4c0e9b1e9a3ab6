CREATE FUNCTION outbox.links(p_key text) RETURNS TABLE(key text, relation text, other_key text, other_status text)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT l.key, l.relation, l.other_key, l.other_status
      FROM (SELECT i.key, 'compensates'::text AS relation, o.key AS other_key,
                   outbox.visible_status(o.state, o.ambiguous) AS other_status, 0 AS side, o.id
              FROM outbox.intents i
              JOIN outbox.intents o ON o.key = i.compensates
             WHERE i.key = p_key
               AND outbox.caller_may_see(i.enqueued_by) AND outbox.caller_may_see(o.enqueued_by)   -- 0026
            UNION ALL
            SELECT p_key, 'compensated_by', c.key, outbox.visible_status(c.state, c.ambiguous), 1, c.id
              FROM outbox.intents c
             WHERE c.compensates = p_key
               AND outbox.caller_may_see(c.enqueued_by)) AS l   -- 0026
     ORDER BY l.side, l.id
$$;

COMMENT ON FUNCTION outbox.links(p_key text) IS 'Compensation links of a key, both ways: (key, ''compensates'', original, its status) and (key, ''compensated_by'', compensation, its status).';

REVOKE ALL ON FUNCTION outbox.links(p_key text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.links(p_key text) TO outbox_app;
GRANT ALL ON FUNCTION outbox.links(p_key text) TO outbox_operator;
GRANT ALL ON FUNCTION outbox.links(p_key text) TO outbox_admin;
