-- 0031: one settle step (issue 25, item 2).
--
-- Five paths make an intent final: outbox.record (the relay: succeeded or
-- failed), outbox.resolve (a person: succeeded or failed), outbox.cancel,
-- outbox.cancel_run and outbox.reject (cancelled). Each did the same thing
-- afterwards in its own words: when ordered delivery came, each of them was
-- restated to release its group, and the next feature that must happen "when
-- an intent becomes final" would have restated all five again.
--
-- Now each path does its own UPDATE (what it writes differs: a response, a
-- decision and who made it) and then calls outbox.settle once, with the ids
-- it made final, their new states and their ordering groups. What follows a
-- settle lives there and nowhere else. Today that is the ordering rule: a
-- group moves on past an intent that succeeded or was cancelled, and stays
-- behind one that failed until a person cancels it. The MCP front door's
-- notification stays a row trigger (intents_mcp_settled): it must also see
-- a state that is not final (unknown).
--
-- The rule is kept by tests/sql/26_settle.sql: the functions that set an
-- intent's state are listed there by what they may set, and every one that
-- may set a final state must call outbox.settle; a new function that sets a
-- state fails that test until it is classified.
--
-- Behaviour is unchanged, with one exception in cancel_run: it released every
-- group it had locked, also when it cancelled nothing in it; it now releases
-- the groups of what it cancelled (a group in which nothing changed has
-- nothing to release).
--
-- The bodies restated here cite objects, not the migrations that once added
-- their lines: `git log -p schema/outbox/functions/<name>.sql` is their history.
--
-- Locks: none on tables (functions replaced; settle is new). The relay of
-- 0.1.0 calls the same record.

CREATE FUNCTION outbox.settle(p_ids bigint[], p_states outbox.intent_state[], p_groups text[])
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    moving text[];
BEGIN
    IF cardinality(p_ids) IS DISTINCT FROM cardinality(p_states)
       OR cardinality(p_ids) IS DISTINCT FROM cardinality(p_groups) THEN
        RAISE EXCEPTION 'outbox.settle: % ids, % states and % groups: one of each per intent',
                        cardinality(p_ids), cardinality(p_states), cardinality(p_groups)
            USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_states) AS s WHERE s IS NULL OR s NOT IN ('succeeded', 'failed', 'cancelled')) THEN
        RAISE EXCEPTION 'outbox.settle: only succeeded, failed or cancelled is final, got %', p_states
            USING ERRCODE = '22023';
    END IF;

    -- Ordered delivery: the next intent of a group is due once this one
    -- succeeded or was cancelled; a failed one keeps the group waiting.
    SELECT array_agg(DISTINCT s.grp) INTO moving
      FROM unnest(p_states, p_groups) AS s(state, grp)
     WHERE s.grp IS NOT NULL AND s.state IN ('succeeded', 'cancelled');
    IF moving IS NOT NULL THEN
        PERFORM outbox.ordering_release(moving);
    END IF;
END
$$;
COMMENT ON FUNCTION outbox.settle(bigint[], outbox.intent_state[], text[]) IS
    'What follows an intent becoming final (succeeded, failed, cancelled), called once by each path that makes intents final, with their ids, new states and ordering groups: today, the release of the groups that may move on.';
REVOKE ALL ON FUNCTION outbox.settle(bigint[], outbox.intent_state[], text[]) FROM PUBLIC;

-- record: the final rows of the batch go to settle (was: the groups of the
-- rows that succeeded, to ordering_release).
CREATE OR REPLACE FUNCTION outbox.record(p_relay text, p_ids bigint[], p_attempts integer[],
                                         p_states outbox.intent_state[], p_delay_ms integer[],
                                         p_ambiguous boolean[], p_classes outbox.attempt_class[],
                                         p_sent boolean[], p_http integer[], p_errors text[],
                                         p_latency_ms integer[], p_bodies text[], p_key_sent boolean[])
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    flag    text;      -- set_config's answer, unused (an assignment keeps FOUND)
    updated integer := 0;
    applied boolean[] := array_fill(false, ARRAY[coalesce(cardinality(p_ids), 0)]);
    o       bigint;
    r_id    bigint;
    r_state outbox.intent_state;
    grp     text;
    ev      jsonb;
    final_ids    bigint[] := '{}';   -- for outbox.settle
    final_states outbox.intent_state[] := '{}';
    final_groups text[] := '{}';
BEGIN
    -- One outcome per row: a delivery's (sent known) before a take-over's,
    -- then the first buffered; fenced by (lease owner, attempt).
    FOR o, r_id, r_state, grp, ev IN
        WITH u AS (
            SELECT x.*,
                   row_number() OVER (PARTITION BY x.id ORDER BY x.sent IS NULL, x.ord) = 1 AS chosen
              FROM unnest(p_ids, p_attempts, p_states, p_delay_ms, p_ambiguous, p_classes, p_sent,
                          p_http, p_errors, p_bodies) WITH ORDINALITY
                   AS x(id, attempt, state, delay_ms, ambiguous, class, sent, http, error, body, ord)
        )
        UPDATE outbox.intents i
           SET state = u.state,
               next_attempt_at = CASE WHEN u.state IN ('pending', 'unknown')
                                      THEN now() + coalesce(u.delay_ms, 0) * interval '1 millisecond'
                                      ELSE i.next_attempt_at END,
               lease_owner = NULL,
               lease_expires_at = NULL,
               ambiguous = CASE WHEN u.class = 'reconciled_not_executed' THEN false
                                ELSE i.ambiguous OR u.ambiguous END,
               response_status = CASE WHEN u.state IN ('succeeded', 'failed') THEN u.http
                                      ELSE i.response_status END,
               response_body = CASE WHEN u.state IN ('succeeded', 'failed') THEN u.body
                                    ELSE i.response_body END,
               last_error = u.error,
               updated_at = now()
          FROM u
         WHERE u.chosen AND i.id = u.id AND i.state IN ('in_flight', 'unknown') AND i.lease_owner = p_relay
           AND i.attempts = u.attempt
        RETURNING u.ord, i.id, u.state, i.ordering_key,
                  -- what a person may have to act on (outbox.intent_event)
                  CASE WHEN u.state = 'failed'
                         OR (u.state = 'unknown' AND u.class NOT IN ('reconcile_inconclusive', 'reconciled_executed',
                                                                      'reconciled_not_executed'))
                       THEN outbox.intent_event(i, u.class, u.http, u.error) END
    LOOP
        applied[o] := true;
        updated := updated + 1;
        IF r_state IN ('succeeded', 'failed') THEN
            final_ids := final_ids || r_id;
            final_states := final_states || r_state;
            final_groups := final_groups || grp;
        END IF;
        IF ev IS NOT NULL THEN
            PERFORM pg_notify('outbox_events', ev::text);
            IF ev ? 'blocks' THEN
                PERFORM pg_notify('outbox_events',
                                  jsonb_build_object('event', 'group_blocked', 'group', ev->>'ordering_key',
                                                     'head', ev->>'key', 'blocks', ev->'blocks',
                                                     'at', ev->>'at')::text);
            END IF;
        END IF;
    END LOOP;

    -- The intents of outcomes not applied are kept from being deleted until
    -- this commits (the INSERT below is not reference-checked).
    IF updated < coalesce(cardinality(p_ids), 0) THEN
        PERFORM 1 FROM outbox.intents i
         WHERE i.id IN (SELECT x.id FROM unnest(p_ids) WITH ORDINALITY AS x(id, ord) WHERE NOT applied[x.ord])
           FOR KEY SHARE OF i;
    END IF;

    -- Every outcome into the history, in the order the relay saw them; not
    -- for an intent deleted meanwhile (its history would break the reference).
    flag := set_config('outbox.in_record', 'on', true);     -- the trigger attempts_reference_insert's WHEN
    INSERT INTO outbox.attempts (intent_id, attempt, relay, class, request_sent, http_status,
                                 error, latency_ms, response_body, key_sent, recorded)
    SELECT x.id, x.attempt, p_relay, x.class, x.sent, x.http, x.error, x.latency_ms,
           left(x.body, 4096), x.key_sent, applied[x.ord]
      FROM unnest(p_ids, p_attempts, p_classes, p_sent, p_http, p_errors, p_latency_ms, p_bodies,
                  p_key_sent) WITH ORDINALITY
           AS x(id, attempt, class, sent, http, error, latency_ms, body, key_sent, ord)
     WHERE applied[x.ord] OR EXISTS (SELECT 1 FROM outbox.intents i WHERE i.id = x.id)
     ORDER BY x.ord;
    flag := set_config('outbox.in_record', 'off', true);

    IF cardinality(final_ids) > 0 THEN
        PERFORM outbox.settle(final_ids, final_states, final_groups);
    END IF;
    RETURN updated;
END
$$;

-- resolve: a person's verdict on an unknown intent.
CREATE OR REPLACE FUNCTION outbox.resolve(p_key text, p_outcome text, p_note text)
RETURNS outbox.intent_state
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    row outbox.intents := outbox.ordering_locked_intent(p_key, 'resolve');   -- the group's settle lock too
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
    PERFORM outbox.settle(ARRAY[row.id], ARRAY[p_outcome::outbox.intent_state], ARRAY[row.ordering_key]);
    RETURN p_outcome::outbox.intent_state;
END
$$;

-- reject: an approver says no.
CREATE OR REPLACE FUNCTION outbox.reject(p_key text, p_by text, p_reason text)
RETURNS outbox.intent_state
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    row outbox.intents := outbox.ordering_locked_intent(p_key, 'reject');   -- the group's settle lock too
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
    PERFORM outbox.note_decision(row.id, row.attempts, p_by,
                                 format('rejected by %s (session user %s): %s', p_by, session_user, coalesce(p_reason, '')));
    PERFORM outbox.settle(ARRAY[row.id], ARRAY['cancelled'::outbox.intent_state], ARRAY[row.ordering_key]);
    RETURN 'cancelled';
END
$$;

-- cancel: one intent the target never acted on, or a failed head of a group.
CREATE OR REPLACE FUNCTION outbox.cancel(p_key text, p_reason text DEFAULT NULL)
RETURNS outbox.intent_state
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
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

-- cancel_run: every intent of a run that the target never acted on; settles
-- what it cancelled at the end, in one call.
CREATE OR REPLACE FUNCTION outbox.cancel_run(p_run_id text, p_reason text DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
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
