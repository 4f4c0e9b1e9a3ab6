CREATE FUNCTION outbox.tombstone_of(p_key text) RETURNS outbox.tombstones
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT s.* FROM outbox.tombstones s
     WHERE s.key_hash = outbox.key_hash(p_key) AND s.forget_at > now()
     ORDER BY s.pruned_at DESC LIMIT 1
$$;

REVOKE ALL ON FUNCTION outbox.tombstone_of(p_key text) FROM PUBLIC;
