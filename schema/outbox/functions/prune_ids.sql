CREATE FUNCTION outbox.prune_ids(p_ids bigint[], p_dedupe_window interval) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    n integer;
BEGIN
    IF p_ids IS NULL THEN
        RETURN 0;
    END IF;
    WITH gone AS (
        DELETE FROM outbox.intents i
         WHERE i.id = ANY (p_ids)
        RETURNING i.id, i.key, i.target, i.fingerprint, i.state, i.response_status, i.updated_at,
                  i.enqueued_by   -- 0026
    )
    -- 0036: an MCP client's task goes with its intent (the key is remembered by
    -- the tombstone; the same key called again gets a new task).
    , tasks AS (
        DELETE FROM outbox.mcp_tasks k
         USING gone g
         WHERE starts_with(g.key, 'mcp:') AND k.client = split_part(g.key, ':', 2)
           AND k.intent_key = g.key COLLATE "default"
    )
    INSERT INTO outbox.tombstones (key_hash, intent_id, target, fingerprint, state, response_status,
                                   settled_at, forget_at, enqueued_by)   -- 0026
    SELECT outbox.key_hash(g.key), g.id, g.target, substring(g.fingerprint FROM 1 FOR 16), g.state,
           g.response_status, g.updated_at,
           -- 0024: a key that settled before retention began is remembered for good,
           -- unless an admin lets the target forget such keys (forget_pre_retention)
           CASE WHEN g.updated_at < (SELECT e.began FROM outbox.retention_epoch e) AND NOT t.forget_pre_retention
                THEN 'infinity'::timestamptz
                ELSE g.updated_at + coalesce(p_dedupe_window, t.dedupe_window) END,
           g.enqueued_by   -- 0026
      FROM gone g
      JOIN outbox.targets t ON t.name = g.target;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

REVOKE ALL ON FUNCTION outbox.prune_ids(p_ids bigint[], p_dedupe_window interval) FROM PUBLIC;
