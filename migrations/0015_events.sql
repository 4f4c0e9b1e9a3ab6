-- 0015: events for operators (issue 15, item 6; docs/design.md, "Events").
--
-- Changes that need a person are NOTIFYed on the channel outbox_events, one
-- JSON object per event, so that tooling can LISTEN and page:
--   {"event": "intent_unknown", "key", "target", "class", "http_status", "error", "at",
--    "ordering_key"?, "blocks"?}        an intent became unknown (outcome unknown, reconciling)
--   {"event": "intent_failed", ...same fields}   an intent ended failed
--   {"event": "group_blocked", "group", "head", "blocks", "at"}
--                                        the head of an ordering group became failed or unknown
--                                        while later intents of the group wait behind it
--   {"event": "circuit_opened", "target", "reason", "at"}
--   {"event": "circuit_closed", "target", "at"}
-- The error text is cut to 200 characters; keys are at most 255 bytes, so an
-- event stays far below NOTIFY's 8,000-byte limit. Nothing is sent for a
-- status check that stays inconclusive (the row was unknown already), nor for
-- operators' own decisions (they made them).
--
-- NOTIFY is transactional: an event is delivered when the record that caused
-- it commits, and never for one that rolled back. A listener that was not
-- connected misses events; outbox.stuck remains the list to reconcile against.
-- A transaction that notifies takes a short global lock at commit: only
-- records that hold such an outcome pay it, and a target that fails every
-- request soon has its circuit open (nothing is claimed for it).
--
-- outbox.record is redefined (as in 0013, the additions marked 0015); the
-- circuit events come from a trigger on target_state (row level, with a WHEN
-- clause: the claims that only spend rate tokens run no function).

-- The event of one intent that became unknown or failed.
CREATE FUNCTION outbox.intent_event(i outbox.intents, p_class outbox.attempt_class, p_http integer,
                                    p_error text)
RETURNS jsonb
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT jsonb_strip_nulls(jsonb_build_object(
               'event', CASE WHEN i.state = 'failed' THEN 'intent_failed' ELSE 'intent_unknown' END,
               'key', i.key, 'target', i.target, 'class', p_class, 'http_status', p_http,
               'error', left(p_error, 200), 'at', outbox.utc_text(now()),
               'ordering_key', i.ordering_key,
               'blocks', CASE WHEN i.ordering_key IS NOT NULL THEN
                             nullif((SELECT count(*) FROM outbox.intents l
                                      WHERE l.ordering_key = i.ordering_key AND l.id > i.id
                                        AND l.state NOT IN ('succeeded', 'cancelled')), 0) END))
$$;

CREATE OR REPLACE FUNCTION outbox.record(p_relay text, p_ids bigint[], p_attempts integer[],
                                         p_states outbox.intent_state[], p_delay_ms integer[],
                                         p_ambiguous boolean[], p_classes outbox.attempt_class[],
                                         p_sent boolean[], p_http integer[], p_errors text[],
                                         p_latency_ms integer[], p_bodies text[], p_key_sent boolean[])
RETURNS integer
-- Generic plan always, as the 12-array form (0003). Two statements, each
-- linear in the batch: the generic plan guesses 10 rows for an unnest and
-- would join two CTEs of the batch in a nested loop (quadratic: 380 ms for
-- 1,500 outcomes); which outcomes were applied travels in an array indexed
-- by their place in the batch instead.
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    updated integer := 0;
    applied boolean[] := array_fill(false, ARRAY[coalesce(cardinality(p_ids), 0)]);
    o       bigint;
    grp     text;     -- 0013
    settled text[];   -- 0013: groups whose intent succeeded here
    ev      jsonb;    -- 0015
BEGIN
    -- One outcome per row: a delivery's (sent known) before a take-over's,
    -- then the first buffered; fenced by (lease owner, attempt).
    FOR o, grp, ev IN
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
        RETURNING u.ord, CASE WHEN u.state = 'succeeded' THEN i.ordering_key END,  -- 0013
                  -- 0015: what a person may have to act on
                  CASE WHEN u.state = 'failed'
                         OR (u.state = 'unknown' AND u.class NOT IN ('reconcile_inconclusive', 'reconciled_executed',
                                                                      'reconciled_not_executed'))
                       THEN outbox.intent_event(i, u.class, u.http, u.error) END
    LOOP
        applied[o] := true;
        updated := updated + 1;
        IF grp IS NOT NULL THEN          -- 0013
            settled := settled || grp;
        END IF;
        IF ev IS NOT NULL THEN           -- 0015
            PERFORM pg_notify('outbox_events', ev::text);
            IF ev ? 'blocks' THEN
                PERFORM pg_notify('outbox_events',
                                  jsonb_build_object('event', 'group_blocked', 'group', ev->>'ordering_key',
                                                     'head', ev->>'key', 'blocks', ev->'blocks',
                                                     'at', ev->>'at')::text);
            END IF;
        END IF;
    END LOOP;

    -- Every outcome into the history, in the order the relay saw them; not
    -- for an intent deleted meanwhile (its history would break the reference).
    INSERT INTO outbox.attempts (intent_id, attempt, relay, class, request_sent, http_status,
                                 error, latency_ms, response_body, key_sent, recorded)
    SELECT x.id, x.attempt, p_relay, x.class, x.sent, x.http, x.error, x.latency_ms,
           left(x.body, 4096), x.key_sent, applied[x.ord]
      FROM unnest(p_ids, p_attempts, p_classes, p_sent, p_http, p_errors, p_latency_ms, p_bodies,
                  p_key_sent) WITH ORDINALITY
           AS x(id, attempt, class, sent, http, error, latency_ms, body, key_sent, ord)
     WHERE EXISTS (SELECT 1 FROM outbox.intents i WHERE i.id = x.id)
     ORDER BY x.ord;

    -- 0013: the next intent of each group whose intent succeeded is due now.
    IF settled IS NOT NULL THEN
        PERFORM outbox.ordering_release(settled);
    END IF;
    RETURN updated;
END
$$;

CREATE FUNCTION outbox.notify_circuit_change() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM pg_notify('outbox_events', jsonb_strip_nulls(jsonb_build_object(
        'event', CASE WHEN NEW.circuit = 'closed' THEN 'circuit_closed' ELSE 'circuit_opened' END,
        'target', NEW.target, 'reason', NEW.circuit_reason,
        'at', outbox.utc_text(now())))::text);
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION outbox.notify_circuit_change() IS
    'NOTIFY outbox_events when a target''s circuit opens (from closed) or closes (0015).';
CREATE TRIGGER target_state_circuit_events AFTER UPDATE OF circuit ON outbox.target_state
    FOR EACH ROW
    WHEN ((OLD.circuit = 'closed' AND NEW.circuit = 'open') OR (OLD.circuit <> 'closed' AND NEW.circuit = 'closed'))
    EXECUTE FUNCTION outbox.notify_circuit_change();

REVOKE ALL ON FUNCTION outbox.intent_event(outbox.intents, outbox.attempt_class, integer, text),
                       outbox.notify_circuit_change()
       FROM PUBLIC;
