CREATE FUNCTION outbox.prune(p_limit integer DEFAULT 5000) RETURNS bigint
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT pruned::bigint FROM outbox.prune_step(p_limit)
$$;

COMMENT ON FUNCTION outbox.prune(p_limit integer) IS 'Prunes at most p_limit final intents past their target''s retain_for (tombstones keep their keys); returns how many. One short transaction: call again while it returns p_limit.';

REVOKE ALL ON FUNCTION outbox.prune(p_limit integer) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.prune(p_limit integer) TO outbox_relay;
GRANT ALL ON FUNCTION outbox.prune(p_limit integer) TO outbox_admin;
