CREATE FUNCTION outbox.cancel(p_key text, p_reason text DEFAULT NULL::text) RETURNS outbox.intent_state
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    row outbox.intents := outbox.ordering_locked_intent(p_key, 'cancel');   -- the group's settle lock too
    d   record;   -- outbox.delivery_summary: what the attempts were
BEGIN
    IF (row.state NOT IN ('pending', 'awaiting_approval') OR row.ambiguous)
       AND NOT (row.state = 'failed' AND row.ordering_key IS NOT NULL) THEN
        RAISE EXCEPTION 'outbox.cancel: key % is %, cannot cancel', quote_literal(p_key),
                        CASE WHEN row.ambiguous AND row.state = 'pending' THEN 'pending after an ambiguous attempt (it may have executed)'
                             ELSE row.state::text END
            USING ERRCODE = 'OR007', HINT = 'Only intents that were never sent (or, in an ordering group, that failed) can be cancelled.';
    END IF;
    SELECT * INTO d FROM outbox.delivery_summary(row.id);
    IF row.state <> 'failed' AND d.may_have_executed > 0 THEN
        RAISE EXCEPTION 'outbox.cancel: key % is % after %, cannot cancel', quote_literal(p_key), row.state,
                        d.story || CASE WHEN d.status_url_said_no
                                        THEN ' (it may have answered while the target was still working on a request)'
                                        ELSE '' END
            USING ERRCODE = 'OR007',
                  HINT = 'An attempt may have executed: it is sent again (with its key, if the target takes one), and once its outcome is known it can be compensated (outbox.compensate). Only an intent the target never acted on can be cancelled: never sent, or refused with a 4xx (or, in an ordering group, failed).';
    END IF;
    UPDATE outbox.intents
       SET state = 'cancelled',
           last_error = 'cancelled: ' || coalesce(p_reason, 'no reason given')
                        || CASE WHEN row.state = 'failed' THEN ' (it had failed: ' || coalesce(row.last_error, 'no reason recorded') || ')'
                                ELSE coalesce(' (after ' || d.story || ')', '') END,
           decision_note = p_reason, decided_by = session_user, updated_at = now()
     WHERE id = row.id;
    PERFORM outbox.note_decision(row.id, row.attempts, session_user,
                                 'cancelled: ' || coalesce(p_reason, '') || coalesce(' (after ' || d.story || ')', ''));
    PERFORM outbox.settle(ARRAY[row.id], ARRAY['cancelled'::outbox.intent_state], ARRAY[row.ordering_key]);
    RETURN 'cancelled';
END
$$;

COMMENT ON FUNCTION outbox.cancel(p_key text, p_reason text) IS 'Cancel an intent the target never acted on (pending or awaiting approval, not ambiguous, no attempt that may have executed: never sent, or refused with a 4xx), or a failed intent of an ordering group (the group moves on). OR007 otherwise, saying why.';

REVOKE ALL ON FUNCTION outbox.cancel(p_key text, p_reason text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.cancel(p_key text, p_reason text) TO outbox_admin;
