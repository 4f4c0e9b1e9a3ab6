-- 0039: outbox.settle builds every final-state event (issue 39, deliverable 6).
--
-- 0031 made outbox.settle the one place for what follows an intent becoming
-- final, but outbox.record still built the intent_failed event itself (and
-- the group_blocked that follows it when the intent heads a group), in its
-- RETURNING, beside the settle call. Now settle builds them, for the failed
-- intents it is handed, from the outcome that made each one failed: the
-- newest recorded row of its history (outbox.attempts, through its primary
-- key (intent_id, id)), which record has written before it calls settle,
-- with the same class, HTTP status and error record used to pass.
--
-- The events are the same (tests/sql/30_settle_events.sql listens to them
-- across real connections; tests/integration/36_events.sh end to end):
--   - intent_failed for every intent record makes failed, with its fields
--     and 'blocks' as before, then group_blocked when it holds a group back;
--   - intent_unknown stays in record: unknown is not final, settle never
--     sees it;
--   - outbox.resolve to failed (a person's decision, its history row
--     'resolved') sends none, as before; cancel, cancel_run and reject make
--     cancelled, which has no event.
-- One difference in order only: inside one record batch, its intent_failed
-- events now come after its intent_unknown events (NOTIFY keeps the order
-- of one transaction; no reader relied on the order across intents).
--
-- Locks: none on tables (two functions replaced, signatures unchanged). The
-- relays of 0.1.0 and of 0038 call the same record.

CREATE OR REPLACE FUNCTION outbox.settle(p_ids bigint[], p_states outbox.intent_state[], p_groups text[])
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    moving text[];
    ev     jsonb;
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

    -- Events for people (outbox_events): a failed intent, from the outcome
    -- that made it failed (the newest recorded row of its history); not when
    -- that row is a person's resolution. Built before the groups move on, so
    -- 'blocks' counts the group as it stood.
    FOR ev IN
        SELECT outbox.intent_event(i, a.class, a.http_status, a.error)
          FROM unnest(p_ids, p_states) WITH ORDINALITY AS s(id, state, ord)
          JOIN outbox.intents i ON i.id = s.id
          CROSS JOIN LATERAL (SELECT h.class, h.http_status, h.error
                                FROM outbox.attempts h
                               WHERE h.intent_id = s.id AND h.recorded
                               ORDER BY h.id DESC
                               LIMIT 1) AS a
         WHERE s.state = 'failed' AND a.class <> 'resolved'
         ORDER BY s.ord
    LOOP
        PERFORM pg_notify('outbox_events', ev::text);
        IF ev ? 'blocks' THEN
            PERFORM pg_notify('outbox_events',
                              jsonb_build_object('event', 'group_blocked', 'group', ev->>'ordering_key',
                                                 'head', ev->>'key', 'blocks', ev->'blocks',
                                                 'at', ev->>'at')::text);
        END IF;
    END LOOP;

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
    'What follows an intent becoming final (succeeded, failed, cancelled), called once by each path that makes intents final, with their ids, new states and ordering groups: the events for people (intent_failed, group_blocked) and the release of the groups that may move on.';

-- record: intent_unknown only; the failed rows' events come from settle.
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
                  -- what a person may have to act on (outbox.intent_event); a failed
                  -- intent's event is built by outbox.settle, with every final state's
                  CASE WHEN u.state = 'unknown' AND u.class NOT IN ('reconcile_inconclusive', 'reconciled_executed',
                                                                     'reconciled_not_executed')
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

