-- 0004: people's side of the contract: approve, reject, cancel, resolve, and the stuck view.
-- Each decision is checked against the row's state (OR007) and leaves an attempts row.

CREATE FUNCTION outbox.locked_intent(p_key text, p_operation text) RETURNS outbox.intents
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    row outbox.intents;
BEGIN
    SELECT * INTO row FROM outbox.intents WHERE key = p_key FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'outbox.%: no intent with key %', p_operation, coalesce(quote_literal(p_key), 'NULL')
            USING ERRCODE = 'OR008';
    END IF;
    RETURN row;
END
$$;

CREATE FUNCTION outbox.note_decision(p_intent bigint, p_attempt integer, p_who text, p_note text)
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    INSERT INTO outbox.attempts (intent_id, attempt, relay, class, request_sent, error)
    VALUES (p_intent, p_attempt, coalesce(p_who, session_user), 'resolved', false, p_note);
$$;

CREATE FUNCTION outbox.approve(p_key text, p_by text) RETURNS outbox.intent_state
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    row outbox.intents := outbox.locked_intent(p_key, 'approve');
BEGIN
    IF p_by IS NULL OR p_by = '' THEN
        RAISE EXCEPTION 'outbox.approve: say who approves (p_by)' USING ERRCODE = '22023';
    END IF;
    IF row.state <> 'awaiting_approval' THEN
        RAISE EXCEPTION 'outbox.approve: key % is %, not awaiting_approval', quote_literal(p_key), row.state
            USING ERRCODE = 'OR007';
    END IF;
    UPDATE outbox.intents
       SET state = 'pending', next_attempt_at = now(), decided_by = p_by,
           decision_note = 'approved', updated_at = now()
     WHERE id = row.id;
    PERFORM outbox.note_decision(row.id, row.attempts, p_by, 'approved');
    RETURN 'pending';
END
$$;

CREATE FUNCTION outbox.reject(p_key text, p_by text, p_reason text) RETURNS outbox.intent_state
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    row outbox.intents := outbox.locked_intent(p_key, 'reject');
BEGIN
    IF p_by IS NULL OR p_by = '' THEN
        RAISE EXCEPTION 'outbox.reject: say who rejects (p_by)' USING ERRCODE = '22023';
    END IF;
    IF row.state <> 'awaiting_approval' THEN
        RAISE EXCEPTION 'outbox.reject: key % is %, not awaiting_approval', quote_literal(p_key), row.state
            USING ERRCODE = 'OR007';
    END IF;
    UPDATE outbox.intents
       SET state = 'cancelled', decided_by = p_by,
           last_error = 'rejected: ' || coalesce(p_reason, 'no reason given'),
           decision_note = p_reason, updated_at = now()
     WHERE id = row.id;
    PERFORM outbox.note_decision(row.id, row.attempts, p_by, 'rejected: ' || coalesce(p_reason, ''));
    RETURN 'cancelled';
END
$$;

-- Cancel an intent that was never sent. A row that may have executed
-- (ambiguous) or is being delivered cannot be cancelled: resolve it instead.
CREATE FUNCTION outbox.cancel(p_key text, p_reason text DEFAULT NULL) RETURNS outbox.intent_state
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    row outbox.intents := outbox.locked_intent(p_key, 'cancel');
BEGIN
    IF row.state NOT IN ('pending', 'awaiting_approval') OR row.ambiguous THEN
        RAISE EXCEPTION 'outbox.cancel: key % is %, cannot cancel', quote_literal(p_key),
                        CASE WHEN row.ambiguous AND row.state = 'pending' THEN 'pending after an ambiguous attempt (it may have executed)'
                             ELSE row.state::text END
            USING ERRCODE = 'OR007', HINT = 'Only intents that were never sent can be cancelled.';
    END IF;
    UPDATE outbox.intents
       SET state = 'cancelled', last_error = 'cancelled: ' || coalesce(p_reason, 'no reason given'),
           decision_note = p_reason, decided_by = session_user, updated_at = now()
     WHERE id = row.id;
    PERFORM outbox.note_decision(row.id, row.attempts, session_user, 'cancelled: ' || coalesce(p_reason, ''));
    RETURN 'cancelled';
END
$$;

-- A person settles an intent whose outcome is unknown, with evidence from the target.
CREATE FUNCTION outbox.resolve(p_key text, p_outcome text, p_note text) RETURNS outbox.intent_state
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    row outbox.intents := outbox.locked_intent(p_key, 'resolve');
BEGIN
    IF p_outcome IS NULL OR p_outcome NOT IN ('succeeded', 'failed') THEN
        RAISE EXCEPTION 'outbox.resolve: outcome must be succeeded or failed, got %',
                        coalesce(quote_literal(p_outcome), 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF p_note IS NULL OR p_note = '' THEN
        RAISE EXCEPTION 'outbox.resolve: a note with the evidence is required' USING ERRCODE = '22023';
    END IF;
    IF row.state <> 'unknown' THEN
        RAISE EXCEPTION 'outbox.resolve: key % is %, not unknown', quote_literal(p_key), row.state
            USING ERRCODE = 'OR007';
    END IF;
    UPDATE outbox.intents
       SET state = p_outcome::outbox.intent_state,
           last_error = CASE WHEN p_outcome = 'failed' THEN 'resolved by an operator: ' || p_note END,
           decided_by = session_user, decision_note = p_note,
           lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
     WHERE id = row.id;
    PERFORM outbox.note_decision(row.id, row.attempts, session_user, 'resolved ' || p_outcome || ': ' || p_note);
    RETURN p_outcome::outbox.intent_state;
END
$$;

-- One row per key that needs a look, with the reason.
CREATE VIEW outbox.stuck AS
SELECT i.key, i.target, i.state, s.reason, now() - i.created_at AS age, i.attempts, i.last_error,
       i.updated_at
  FROM outbox.intents i
 CROSS JOIN LATERAL (SELECT CASE
        WHEN i.state = 'in_flight' AND i.lease_expires_at < now() THEN 'in flight past its lease'
        WHEN i.state = 'unknown' THEN 'outcome unknown'
        WHEN i.state = 'pending' THEN 'pending for over 5 minutes'
        WHEN i.state = 'awaiting_approval' THEN 'awaiting approval for over 24 hours'
    END AS reason) AS s
 WHERE (i.state = 'in_flight' AND i.lease_expires_at < now())
    OR i.state = 'unknown'
    OR (i.state = 'pending' AND i.next_attempt_at < now() - interval '5 minutes')
    OR (i.state = 'awaiting_approval' AND i.created_at < now() - interval '24 hours');
COMMENT ON VIEW outbox.stuck IS 'Keys that need a look: in flight past the lease, unknown, pending over 5 minutes past due, awaiting approval over 24 hours.';

-- Rows in each live state and the age of the oldest due pending row, for
-- metrics. Each count walks one partial index, so the cost follows the live
-- rows, not the history of terminal ones.
CREATE FUNCTION outbox.live_counts()
RETURNS TABLE (state outbox.intent_state, intents bigint, oldest_due_age_s double precision)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN QUERY
    SELECT 'pending'::outbox.intent_state, count(*),
           coalesce(extract(epoch FROM now() - min(next_attempt_at) FILTER (WHERE next_attempt_at <= now()))::float8, 0)
      FROM outbox.intents WHERE state = 'pending'
    UNION ALL
    SELECT 'in_flight', count(*), NULL FROM outbox.intents WHERE state = 'in_flight'
    UNION ALL
    SELECT 'unknown', count(*), NULL FROM outbox.intents WHERE state = 'unknown'
    UNION ALL
    SELECT 'awaiting_approval', count(*), NULL FROM outbox.intents WHERE state = 'awaiting_approval';
END
$$;
