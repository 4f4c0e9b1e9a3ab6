-- 0007: compensations, abandoning a run, and per-target health.
--
-- Compensation is a new action, never an edit of the old one (DESIGN.md, "Data model":
-- "optional link to the intent it compensates"):
--   outbox.compensate(original, key, target, payload)
--       enqueues a compensating intent through outbox.enqueue (same key rules, same
--       validation, approval rule, fingerprint) and links it: intents.compensates = original.
--       Allowed only while the original is succeeded or unknown (it acted, or may have):
--       anything else is OR007, naming the state and what to do instead; no original, OR008.
--       The same key again for the same original, target and payload returns the existing
--       compensation (a retried call compensates once). The key already used for another
--       action (another original, or an intent that is no compensation): OR001.
--       The compensation inherits the original's run_id, so a run's history stays in one
--       place; outbox.cancel_run never cancels compensations (see below).
--       A compensation of an *unknown* original may be delivered while the original is
--       still being reconciled: the compensating target must treat "nothing to undo" as
--       an answer, not an error.
--   outbox.compensations(key)   the compensations of a key, with their agent-visible status
--   outbox.links(key)           both directions: 'compensates' (this key undoes other_key)
--                               and 'compensated_by' (other_key undoes this key)
--   outbox.cancel_run(run_id, reason)
--       cancels every intent of the run that was never sent: pending or awaiting_approval,
--       not ambiguous, and no attempts row with request_sent true or NULL (a request
--       that reached, or may have reached, the target). Leaves a 'resolved' attempts row
--       per cancelled intent, as outbox.cancel does, and returns how many it cancelled.
--       Rows in flight, unknown, sent before, or final are left alone (compensate the ones
--       that acted); so are compensations: abandoning a run is what they are for, and a
--       repeated cancel_run must not cancel them.
--
-- Operator SQL:
--   outbox.target_health   one row per target: live rows by state (partial indexes),
--       rows that reached a final state in the last 5 minutes, delivery attempts, success
--       ratio and p95 latency over the last 5 minutes, the age of the oldest due pending
--       row, and an approximation of the retry budget left. Its cost follows the live rows
--       and the last 5 minutes of activity, never the history (tests/sql/scale_views.sh).

-- ---------------------------------------------------------------------------
-- compensation

CREATE FUNCTION outbox.compensate(p_original_key text, p_key text, p_target text, p_payload jsonb)
RETURNS outbox.enqueue_result
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    original outbox.intents;
    existing outbox.intents;
    result   outbox.enqueue_result;
BEGIN
    SELECT * INTO original FROM outbox.intents WHERE key = p_original_key;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'outbox.compensate: no intent with key %', coalesce(quote_literal(p_original_key), 'NULL')
            USING ERRCODE = 'OR008', HINT = 'A compensation undoes an intent that exists: name its key.';
    END IF;

    -- The key exists already: a retried call (same original: enqueue's rules decide
    -- on target and payload and return it), or a key reused for another action.
    SELECT * INTO existing FROM outbox.intents WHERE key = p_key;
    IF FOUND THEN
        IF existing.id = original.id THEN
            RAISE EXCEPTION 'outbox.compensate: key % cannot compensate itself', quote_literal(p_key)
                USING ERRCODE = 'OR001', HINT = 'A compensation is a new action: give it its own key, e.g. {original key}:undo.';
        END IF;
        IF existing.compensates IS DISTINCT FROM p_original_key THEN
            RAISE EXCEPTION 'outbox.compensate: key % is already used for another action (%)', quote_literal(p_key),
                            CASE WHEN existing.compensates IS NULL THEN 'an intent that compensates nothing'
                                 ELSE 'the compensation of ' || quote_literal(existing.compensates) END
                USING ERRCODE = 'OR001', HINT = 'An idempotency key names one action; use a new key for a new action.';
        END IF;
        RETURN outbox.enqueue(p_key, p_target, p_payload, original.run_id);
    END IF;

    IF original.state NOT IN ('succeeded', 'unknown') THEN
        RAISE EXCEPTION 'outbox.compensate: key % is %; only a succeeded or unknown intent can be compensated',
                        quote_literal(p_original_key),
                        CASE WHEN original.state = 'pending' AND original.ambiguous
                             THEN 'pending after an ambiguous attempt (its outcome is not settled yet)'
                             ELSE original.state::text END
            USING ERRCODE = 'OR007',
                  HINT = CASE
                      WHEN original.state IN ('pending', 'awaiting_approval') AND NOT original.ambiguous
                          THEN 'It was never sent: cancel it instead (outbox.cancel, outbox.cancel_run).'
                      WHEN original.state IN ('pending', 'in_flight')
                          THEN 'It is being delivered: compensate once its outcome is succeeded or unknown.'
                      ELSE 'The target did not act on it: there is nothing to compensate.'
                  END;
    END IF;

    result := outbox.enqueue(p_key, p_target, p_payload, original.run_id);
    IF result.inserted THEN
        UPDATE outbox.intents SET compensates = p_original_key WHERE id = result.intent_id;
    ELSE
        -- Enqueued by a concurrent transaction after our look (enqueue waited for it to
        -- commit, and has checked target and payload): is it the same compensation?
        SELECT * INTO existing FROM outbox.intents WHERE id = result.intent_id;
        IF existing.compensates IS DISTINCT FROM p_original_key THEN
            RAISE EXCEPTION 'outbox.compensate: key % is already used for another action (%)', quote_literal(p_key),
                            CASE WHEN existing.compensates IS NULL THEN 'an intent that compensates nothing'
                                 ELSE 'the compensation of ' || quote_literal(existing.compensates) END
                USING ERRCODE = 'OR001', HINT = 'An idempotency key names one action; use a new key for a new action.';
        END IF;
    END IF;
    RETURN result;
END
$$;
COMMENT ON FUNCTION outbox.compensate(text, text, text, jsonb) IS
    'Enqueue a compensating intent for a succeeded or unknown one (intents.compensates = original key), by the rules of outbox.enqueue.';

CREATE FUNCTION outbox.compensations(p_key text)
RETURNS TABLE (key text, target text, status text, state outbox.intent_state, attempts integer,
               created_at timestamptz, updated_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT c.key, c.target, outbox.visible_status(c.state, c.ambiguous), c.state, c.attempts,
           c.created_at, c.updated_at
      FROM outbox.intents c
     WHERE c.compensates = p_key
     ORDER BY c.id
$$;
COMMENT ON FUNCTION outbox.compensations(text) IS
    'The compensating intents of a key, oldest first, with their agent-visible status. No row: none (or no such key).';

CREATE FUNCTION outbox.links(p_key text)
RETURNS TABLE (key text, relation text, other_key text, other_status text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT l.key, l.relation, l.other_key, l.other_status
      FROM (SELECT i.key, 'compensates'::text AS relation, o.key AS other_key,
                   outbox.visible_status(o.state, o.ambiguous) AS other_status, 0 AS side, o.id
              FROM outbox.intents i
              JOIN outbox.intents o ON o.key = i.compensates
             WHERE i.key = p_key
            UNION ALL
            SELECT p_key, 'compensated_by', c.key, outbox.visible_status(c.state, c.ambiguous), 1, c.id
              FROM outbox.intents c
             WHERE c.compensates = p_key) AS l
     ORDER BY l.side, l.id
$$;
COMMENT ON FUNCTION outbox.links(text) IS
    'Compensation links of a key, both ways: (key, ''compensates'', original, its status) and (key, ''compensated_by'', compensation, its status).';

CREATE FUNCTION outbox.cancel_run(p_run_id text, p_reason text DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    candidate bigint;
    row       outbox.intents;
    cancelled integer := 0;
BEGIN
    IF p_run_id IS NULL OR p_run_id = '' THEN
        RAISE EXCEPTION 'outbox.cancel_run: say which run (p_run_id)' USING ERRCODE = '22023';
    END IF;
    -- Lock the candidates (in id order: two cancel_runs cannot deadlock), waiting for a
    -- relay that is recording one of them. Once a row is locked, the UPDATE below looks
    -- again with a fresh snapshot, so it sees the attempts row a relay committed with the
    -- change we waited for; while we hold the lock, no relay can claim the row.
    FOR candidate IN
        SELECT i.id FROM outbox.intents i
         WHERE i.run_id = p_run_id AND i.state IN ('pending', 'awaiting_approval')
           AND NOT i.ambiguous AND i.compensates IS NULL
         ORDER BY i.id
           FOR UPDATE
    LOOP
        UPDATE outbox.intents i
           SET state = 'cancelled', last_error = 'cancelled: ' || coalesce(p_reason, 'no reason given'),
               decision_note = p_reason, decided_by = session_user, updated_at = now()
         WHERE i.id = candidate AND i.state IN ('pending', 'awaiting_approval') AND NOT i.ambiguous
           AND NOT EXISTS (SELECT 1 FROM outbox.attempts a
                            WHERE a.intent_id = i.id AND a.request_sent IS DISTINCT FROM false)
        RETURNING i.* INTO row;
        IF FOUND THEN
            PERFORM outbox.note_decision(row.id, row.attempts, session_user,
                                         format('cancelled with run %s: %s', p_run_id, coalesce(p_reason, '')));
            cancelled := cancelled + 1;
        END IF;
    END LOOP;
    RETURN cancelled;
END
$$;
COMMENT ON FUNCTION outbox.cancel_run(text, text) IS
    'Cancel the intents of a run that were never sent (pending or awaiting approval, not ambiguous, no attempt that reached or may have reached the target); compensations are kept. Returns how many.';

-- ---------------------------------------------------------------------------
-- per-target health

-- Rows that reached a final state, by when: the view counts the last 5 minutes of
-- them without reading the history. A final row is not updated again, so an entry
-- is written once, when the row settles.
CREATE INDEX intents_settled ON outbox.intents (updated_at)
    WHERE state IN ('succeeded', 'failed', 'cancelled');

CREATE VIEW outbox.target_health AS
WITH live_rows AS (        -- every row not final, each state through its partial index (0001)
    SELECT i.id, i.target, i.state, i.next_attempt_at, i.updated_at
      FROM outbox.intents i WHERE i.state = 'pending'
    UNION ALL
    SELECT i.id, i.target, i.state, i.next_attempt_at, i.updated_at
      FROM outbox.intents i WHERE i.state = 'in_flight'
    UNION ALL
    SELECT i.id, i.target, i.state, i.next_attempt_at, i.updated_at
      FROM outbox.intents i WHERE i.state = 'unknown'
    UNION ALL
    SELECT i.id, i.target, i.state, i.next_attempt_at, i.updated_at
      FROM outbox.intents i WHERE i.state = 'awaiting_approval'
), settled_rows AS (       -- intents_settled: rows that reached a final state in the last 5 minutes
    SELECT i.id, i.target, i.state
      FROM outbox.intents i
     WHERE i.state IN ('succeeded', 'failed', 'cancelled') AND i.updated_at > now() - interval '5 minutes'
), live AS (
    SELECT l.target,
           count(*) FILTER (WHERE l.state = 'pending') AS pending,
           count(*) FILTER (WHERE l.state = 'in_flight') AS in_flight,
           count(*) FILTER (WHERE l.state = 'unknown') AS unknown,
           count(*) FILTER (WHERE l.state = 'awaiting_approval') AS awaiting_approval,
           min(l.next_attempt_at) FILTER (WHERE l.state = 'pending' AND l.next_attempt_at <= now()) AS oldest_due
      FROM live_rows l GROUP BY l.target
), settled AS (
    SELECT s.target,
           count(*) FILTER (WHERE s.state = 'succeeded') AS succeeded,
           count(*) FILTER (WHERE s.state = 'failed') AS failed,
           count(*) FILTER (WHERE s.state = 'cancelled') AS cancelled
      FROM settled_rows s GROUP BY s.target
), recent_intents AS (
    -- The intents that can have an attempt in the last 5 minutes: recording an attempt sets
    -- the intent's updated_at (outbox.record), so they are the rows changed in the last 5
    -- minutes. Found through the indexes above, so the attempts of the window are joined to
    -- their target without a lookup per attempt and without reading the history. (Not
    -- counted: a late attempt from a relay fenced out of a row unchanged for 5 minutes.)
    SELECT s.id, s.target FROM settled_rows s
    UNION ALL
    SELECT l.id, l.target FROM live_rows l WHERE l.updated_at > now() - interval '5 minutes'
), deliveries AS (         -- attempts_at: delivery attempts of the last 5 minutes
    SELECT r.target,
           count(*) AS n,
           count(*) FILTER (WHERE a.class = 'succeeded') AS succeeded,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY a.latency_ms) AS p95_ms,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY a.latency_ms) FILTER (WHERE a.class = 'succeeded') AS p95_ok_ms,
           count(*) FILTER (WHERE a.attempt = 1 AND a.at > now() - interval '10 seconds') AS firsts_10s,
           count(*) FILTER (WHERE a.attempt > 1 AND a.at > now() - interval '10 seconds') AS retries_10s
      FROM outbox.attempts a
      JOIN recent_intents r ON r.id = a.intent_id
     WHERE a.at > now() - interval '5 minutes'
       AND a.class IN ('not_sent', 'ambiguous', 'succeeded', 'retry_later', 'key_conflict', 'permanent_failure')
     GROUP BY r.target
)
SELECT t.name AS target,
       t.enabled,
       coalesce(l.pending, 0) AS pending,
       coalesce(l.in_flight, 0) AS in_flight,
       coalesce(l.unknown, 0) AS unknown,
       coalesce(l.awaiting_approval, 0) AS awaiting_approval,
       coalesce(s.succeeded, 0) AS succeeded_5m,
       coalesce(s.failed, 0) AS failed_5m,
       coalesce(s.cancelled, 0) AS cancelled_5m,
       coalesce(d.n, 0) AS attempts_5m,
       coalesce(d.succeeded, 0) AS attempts_succeeded_5m,
       round(d.succeeded::numeric / nullif(d.n, 0), 4) AS success_ratio_5m,
       round(d.p95_ms::numeric, 1) AS p95_latency_ms_5m,
       round(d.p95_ok_ms::numeric, 1) AS p95_succeeded_latency_ms_5m,
       coalesce(now() - l.oldest_due, interval '0') AS oldest_pending_age,
       greatest(0, floor(t.retry_budget_floor + t.retry_budget_ratio * coalesce(d.firsts_10s, 0)
                         - coalesce(d.retries_10s, 0)))::integer AS retry_budget_left
  FROM outbox.targets t
  LEFT JOIN live l ON l.target = t.name
  LEFT JOIN settled s ON s.target = t.name
  LEFT JOIN deliveries d ON d.target = t.name;
COMMENT ON VIEW outbox.target_health IS
    'Per target: live rows by state; rows settled, delivery attempts, success ratio and p95 latency over the last 5 minutes; '
    'the age of the oldest due pending row; the retry budget left (approximation: retry_budget_floor + retry_budget_ratio x '
    'first attempts - retries, over the last 10 s of recorded attempts of all relays; each relay keeps its own).';
COMMENT ON COLUMN outbox.target_health.oldest_pending_age IS
    'How long the oldest due pending row has waited past its due time (0 when none is due): the target''s lag.';
COMMENT ON COLUMN outbox.target_health.success_ratio_5m IS
    'Delivery attempts of class succeeded / all delivery attempts (not reconciliations or decisions), last 5 minutes; NULL without any.';
COMMENT ON COLUMN outbox.target_health.p95_latency_ms_5m IS
    'p95 (percentile_cont, to 0.1 ms) of latency_ms over the delivery attempts of the last 5 minutes; NULL without any.';

-- ---------------------------------------------------------------------------
-- grants (0005's roles)

REVOKE ALL ON FUNCTION outbox.compensate(text, text, text, jsonb), outbox.compensations(text), outbox.links(text),
                       outbox.cancel_run(text, text)
       FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox.compensate(text, text, text, jsonb), outbox.cancel_run(text, text)
      TO outbox_app, outbox_admin;
GRANT EXECUTE ON FUNCTION outbox.compensations(text), outbox.links(text)
      TO outbox_app, outbox_operator, outbox_admin;
REVOKE ALL ON outbox.target_health FROM PUBLIC;
GRANT SELECT ON outbox.target_health TO outbox_operator;
