CREATE FUNCTION outbox.retries_due_now(p_target text) RETURNS integer
    LANGUAGE sql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    WITH waiting AS (
        SELECT i.id FROM outbox.intents i   -- intents_due
         WHERE i.state = 'pending' AND i.target = p_target
           AND i.next_attempt_at > now() AND i.next_attempt_at < 'infinity' AND i.attempts > 0
           FOR UPDATE SKIP LOCKED
    ), moved AS (
        UPDATE outbox.intents i SET next_attempt_at = now()
          FROM waiting w
         WHERE i.id = w.id
        RETURNING 1
    )
    SELECT count(*)::integer FROM moved
$$;

COMMENT ON FUNCTION outbox.retries_due_now(p_target text) IS 'After a target''s circuit closed or it was enabled again: its pending retries waiting on their back-off are due now (0023).';

REVOKE ALL ON FUNCTION outbox.retries_due_now(p_target text) FROM PUBLIC;
