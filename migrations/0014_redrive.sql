-- 0014: safe redrive (issue 15, item 4; docs/design.md, "Redrive").
--
-- outbox.redrive(target, since, until, dry_run, limit, by) puts back to
-- pending the intents of one target that ended failed, settled (updated_at)
-- within [since, until), with no attempt that may have executed: the ones a
-- broken target refused (a 4xx) or never received (connection refused, DNS,
-- TLS). `outbox-relay redrive --target T --since TS --until TS [--dry-run]`
-- calls it.
--
-- 1. "May have executed", per attempts row (outbox.attempt_may_have_executed).
--    The rule is a whitelist, so that a class added later, or a row whose
--    facts contradict its class, counts as "may have executed" until someone
--    decides otherwise. Known NOT to have executed are only:
--      not_sent with request_sent = false      no request byte left the relay;
--      retry_later, key_conflict or            the target answered the request
--      permanent_failure with a 4xx status     with a 4xx: it did not act;
--      resolved with request_sent = false      a person's decision (approve,
--                                              retry, redrive, ...): no request.
--    Everything else may have: ambiguous (whatever request_sent says: a
--    lease take-over has NULL), succeeded, reconciled_executed, a status
--    check of either other kind (there is one only after an ambiguous
--    attempt), released, request_sent NULL or true with not_sent, a 4xx
--    class without a 4xx status. An intent is redriven only if none of its
--    attempts may have executed and its ambiguous flag is false. This is
--    stricter than outbox.retry_now (0006), which takes a failed row whose
--    flag a status URL cleared ("not executed"): the status URL may have
--    answered while the target was still working on the request, so a batch
--    never re-sends such a row; `outbox-relay retry KEY` does, one key at a
--    time, for a person who checked. unknown rows are never touched (state
--    = 'failed' only), nor failed rows a person resolved (their flag is set).
-- 2. A fresh delivery. As retry_now does for failed: attempts from 0 and no
--    first attempt (claim sets it again, so the retry horizon, retry_for and
--    max_attempts, starts at the redrive, not at the first delivery), due
--    now, no saved response, no lease. last_error moves into the history row
--    (the intent's is cleared: a pending row carries no reason). The history
--    row is one attempts row per intent, class resolved, request_sent false,
--    attempt = the attempts before (as every decision writes), relay = p_by
--    or else session_user, and error = what happened, naming the session
--    user, the settle time, the attempts before and the last error. Read in
--    id order the key's attempts stay one life: the first delivery's
--    attempts, the redrive, then attempt 1, 2, ... of the new one.
-- 3. Bounded and one statement. At most p_limit (default 10000, at most
--    1000000) intents, oldest settled first, taken FOR UPDATE SKIP LOCKED:
--    a row locked by someone else (a prune, an operator) is left for the
--    next call, and a redrive never waits. Found through the index of final
--    rows per target and settle time (intents_target_settled, 0012). The dry
--    run is the same statement without the writes: it lists exactly what a
--    redrive at that moment would move (it locks those rows for the length
--    of its statement, or of the caller's transaction). Returns key, target,
--    settled_at, attempts (before), last_error, oldest settled first.
-- 4. Refusals: a NULL argument, since >= until, a limit out of range
--    (22023); an unknown target (OR002); a disabled target (OR007: nothing
--    would be sent; enable it first). The rows made pending and due wake an
--    idle relay through the UPDATE trigger of 0002/0008.
-- 5. Granted to outbox_admin only.

CREATE FUNCTION outbox.attempt_may_have_executed(p_class outbox.attempt_class, p_request_sent boolean,
                                                 p_http_status integer)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT NOT coalesce(
        (p_class = 'not_sent' AND p_request_sent = false)
        OR (p_class IN ('retry_later', 'key_conflict', 'permanent_failure') AND p_http_status BETWEEN 400 AND 499)
        OR (p_class = 'resolved' AND p_request_sent = false),
        false)
$$;
COMMENT ON FUNCTION outbox.attempt_may_have_executed(outbox.attempt_class, boolean, integer) IS
    'Whether an attempts row leaves open that the target acted: true unless it is not_sent with nothing sent, a 4xx answer (retry_later, key_conflict, permanent_failure) or a decision that sent nothing.';

CREATE FUNCTION outbox.redrive(p_target text, p_since timestamptz, p_until timestamptz,
                               p_dry_run boolean DEFAULT false, p_limit integer DEFAULT 10000,
                               p_by text DEFAULT NULL)
RETURNS TABLE (key text, target text, settled_at timestamptz, attempts integer, last_error text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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
COMMENT ON FUNCTION outbox.redrive(text, timestamptz, timestamptz, boolean, integer, text) IS
    'Puts back to pending (a fresh delivery) the failed intents of a target settled in [since, until) with no attempt that may have executed; at most p_limit, oldest first; one history row each. The dry run lists them and changes nothing.';

REVOKE ALL ON FUNCTION outbox.attempt_may_have_executed(outbox.attempt_class, boolean, integer),
                       outbox.redrive(text, timestamptz, timestamptz, boolean, integer, text)
       FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox.redrive(text, timestamptz, timestamptz, boolean, integer, text) TO outbox_admin;
