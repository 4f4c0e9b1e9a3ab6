CREATE FUNCTION outbox.cancel_run(p_run_id text, p_reason text DEFAULT NULL::text) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    candidate bigint;
    grp       text;
    groups    text[];
    locked    boolean := false;
    row       outbox.intents;
    everyone  boolean := NOT outbox.isolated();   -- else only the caller's own intents (enqueued_by)
    story     text;
    final_ids    bigint[] := '{}';   -- for outbox.settle
    final_groups text[] := '{}';
BEGIN
    IF p_run_id IS NULL OR p_run_id = '' THEN
        RAISE EXCEPTION 'outbox.cancel_run: say which run (p_run_id)' USING ERRCODE = '22023';
    END IF;
    -- 0036: an MCP client's run is the front door's (an operator may still cancel it).
    IF starts_with(p_run_id, 'mcp:') AND NOT outbox.operator_session() THEN
        PERFORM outbox.refuse_front_door('cancel_run', 'run id', p_run_id);
    END IF;
    -- Lock the candidates (in id order: two cancel_runs cannot deadlock), waiting for a
    -- relay that is recording one of them. Once a row is locked, the UPDATE below looks
    -- again with a fresh snapshot, so it sees the attempts row a relay committed with the
    -- change we waited for; while we hold the lock, no relay can claim the row.
    -- Unordered candidates first (waiting for their locks), then the ordered ones, after
    -- the settle locks of their groups (all at once, in one order: outbox.ordering_lock_groups),
    -- and only rows nobody else holds: a relay recording one waits for those locks.
    SELECT array_agg(DISTINCT i.ordering_key) INTO groups FROM outbox.intents i
     WHERE i.run_id = p_run_id AND i.state IN ('pending', 'awaiting_approval')
       AND NOT i.ambiguous AND i.compensates IS NULL AND i.ordering_key IS NOT NULL
       AND (everyone OR i.enqueued_by = session_user::text);
    FOR candidate, grp IN
        SELECT i.id, i.ordering_key FROM outbox.intents i
         WHERE i.run_id = p_run_id AND i.state IN ('pending', 'awaiting_approval')
           AND NOT i.ambiguous AND i.compensates IS NULL
           AND (everyone OR i.enqueued_by = session_user::text)
         ORDER BY i.ordering_key IS NOT NULL, i.id
    LOOP
        IF grp IS NULL THEN
            PERFORM 1 FROM outbox.intents i WHERE i.id = candidate FOR UPDATE;
        ELSE
            CONTINUE WHEN NOT grp = ANY (groups);   -- no longer a candidate when groups was read
            IF NOT locked THEN
                PERFORM outbox.ordering_lock_groups(groups);
                locked := true;
            END IF;
            PERFORM 1 FROM outbox.intents i WHERE i.id = candidate FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;
        END IF;
        -- As outbox.cancel: no attempt that may have executed; what they were goes
        -- into the reason.
        story := (SELECT d.story FROM outbox.delivery_summary(candidate) d);
        UPDATE outbox.intents i
           SET state = 'cancelled',
               last_error = 'cancelled: ' || coalesce(p_reason, 'no reason given') || coalesce(' (after ' || story || ')', ''),
               decision_note = p_reason, decided_by = session_user, updated_at = now()
         WHERE i.id = candidate AND i.state IN ('pending', 'awaiting_approval') AND NOT i.ambiguous
           AND NOT EXISTS (SELECT 1 FROM outbox.attempts a
                            WHERE a.intent_id = i.id
                              AND outbox.attempt_may_have_executed(a.class, a.request_sent, a.http_status))
        RETURNING i.* INTO row;
        IF FOUND THEN
            PERFORM outbox.note_decision(row.id, row.attempts, session_user,
                                         format('cancelled with run %s: %s', p_run_id, coalesce(p_reason, ''))
                                         || coalesce(' (after ' || story || ')', ''));
            final_ids := final_ids || row.id;
            final_groups := final_groups || row.ordering_key;
        END IF;
    END LOOP;
    IF cardinality(final_ids) > 0 THEN
        PERFORM outbox.settle(final_ids, array_fill('cancelled'::outbox.intent_state, ARRAY[cardinality(final_ids)]),
                              final_groups);
    END IF;
    RETURN cardinality(final_ids);
END
$$;

COMMENT ON FUNCTION outbox.cancel_run(p_run_id text, p_reason text) IS 'Cancel the intents of a run that the target never acted on (pending or awaiting approval, not ambiguous, no attempt that may have executed: never sent, or refused with a 4xx); compensations are kept; an isolated login cancels only its own. Returns how many.';

REVOKE ALL ON FUNCTION outbox.cancel_run(p_run_id text, p_reason text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.cancel_run(p_run_id text, p_reason text) TO outbox_app;
GRANT ALL ON FUNCTION outbox.cancel_run(p_run_id text, p_reason text) TO outbox_admin;
