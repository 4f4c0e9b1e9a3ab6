CREATE FUNCTION outbox.ordering_head_before(p_group text, p_id bigint) RETURNS outbox.intents
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT h.* FROM outbox.intents h
     WHERE p_group IS NOT NULL AND h.ordering_key = p_group AND h.id < p_id
       AND h.state NOT IN ('succeeded', 'cancelled')
     ORDER BY h.id LIMIT 1
$$;

REVOKE ALL ON FUNCTION outbox.ordering_head_before(p_group text, p_id bigint) FROM PUBLIC;
