CREATE FUNCTION outbox.ordering_waits_for(p_group text, p_id bigint) RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT coalesce((SELECT CASE WHEN starts_with(p_group, 'mcp:') OR outbox.caller_may_see(h.enqueued_by)
                                 THEN format('waiting for %s (%s), the head of ordering group %s: it is sent once that one succeeded or was cancelled',
                                             h.key, outbox.visible_status(h.state, h.ambiguous), p_group)
                                 ELSE format('waiting for its turn in ordering group %s, behind an intent of another login',
                                             p_group) END
                       FROM outbox.ordering_head_before(p_group, p_id) h WHERE h.id IS NOT NULL),
                    'waiting for its turn in ordering group ' || p_group)
$$;

REVOKE ALL ON FUNCTION outbox.ordering_waits_for(p_group text, p_id bigint) FROM PUBLIC;
