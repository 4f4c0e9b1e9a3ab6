CREATE FUNCTION outbox.redrive(p_target text, p_since timestamp with time zone, p_until timestamp with time zone, p_dry_run boolean DEFAULT false, p_limit integer DEFAULT 10000, p_by text DEFAULT NULL::text) RETURNS TABLE(key text, target text, settled_at timestamp with time zone, attempts integer, last_error text)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    tgt outbox.targets;
    who text := coalesce(nullif(p_by, ''), session_user);
BEGIN
    IF p_target IS NULL OR p_since IS NULL OR p_until IS NULL OR p_dry_run IS NULL THEN
        RAISE EXCEPTION 'outbox.redrive: target, since, until and dry_run are required'
            USING ERRCODE = '22023';
    END IF;
    IF p_since >= p_until THEN
        RAISE EXCEPTION 'outbox.redrive: since (%) must be before until (%)',
                        outbox.utc_text(p_since), outbox.utc_text(p_until)
            USING ERRCODE = '22023', HINT = 'The window is [since, until): settled at or after since, before until.';
    END IF;
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 1000000 THEN
        RAISE EXCEPTION 'outbox.redrive: limit must be between 1 and 1000000, got %', coalesce(p_limit::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    SELECT * INTO tgt FROM outbox.targets t WHERE t.name = p_target;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'outbox.redrive: unknown target %', quote_literal(p_target)
            USING ERRCODE = 'OR002', HINT = 'outbox-relay targets lists them.';
    END IF;
    IF NOT tgt.enabled THEN
        RAISE EXCEPTION 'outbox.redrive: target % is disabled: nothing would be sent', quote_literal(p_target)
            USING ERRCODE = 'OR007', HINT = 'Enable the target first (outbox.targets.enabled).';
    END IF;

    RETURN QUERY
    WITH chosen AS (
        SELECT i.id, i.key, i.updated_at, i.attempts, i.last_error
          FROM outbox.intents i
         WHERE i.target = p_target AND i.state = 'failed'
           AND i.updated_at >= p_since AND i.updated_at < p_until
           AND NOT i.ambiguous
           AND NOT EXISTS (SELECT 1 FROM outbox.attempts a
                            WHERE a.intent_id = i.id
                              AND outbox.attempt_may_have_executed(a.class, a.request_sent, a.http_status))
         ORDER BY i.updated_at, i.id
         LIMIT p_limit
           FOR UPDATE OF i SKIP LOCKED
    ), moved AS (
        UPDATE outbox.intents i
           SET state = 'pending', next_attempt_at = now(), attempts = 0, first_attempt_at = NULL,
               lease_owner = NULL, lease_expires_at = NULL, response_status = NULL, response_body = NULL,
               last_error = NULL, updated_at = now()
          FROM chosen c
         WHERE i.id = c.id AND NOT p_dry_run
        RETURNING c.*
    ), noted AS (
        INSERT INTO outbox.attempts (intent_id, attempt, relay, class, request_sent, error)
        SELECT m.id, m.attempts, who, 'resolved', false,
               format('redriven by %s (session user %s): failed -> pending, a fresh delivery (settled %s after %s attempt(s), none of which may have executed; counted from 0 again); last error: %s',
                      who, session_user, outbox.utc_text(m.updated_at), m.attempts,
                      coalesce(m.last_error, '-'))
          FROM moved m
        RETURNING intent_id
    )
    SELECT c.key, p_target, c.updated_at, c.attempts, c.last_error
      FROM chosen c
     WHERE p_dry_run OR c.id IN (SELECT n.intent_id FROM noted n)
     ORDER BY c.updated_at, c.id;
END
$$;

COMMENT ON FUNCTION outbox.redrive(p_target text, p_since timestamp with time zone, p_until timestamp with time zone, p_dry_run boolean, p_limit integer, p_by text) IS 'Puts back to pending (a fresh delivery) the failed intents of a target settled in [since, until) with no attempt that may have executed; at most p_limit, oldest first; one history row each. The dry run lists them and changes nothing.';

REVOKE ALL ON FUNCTION outbox.redrive(p_target text, p_since timestamp with time zone, p_until timestamp with time zone, p_dry_run boolean, p_limit integer, p_by text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.redrive(p_target text, p_since timestamp with time zone, p_until timestamp with time zone, p_dry_run boolean, p_limit integer, p_by text) TO outbox_admin;
