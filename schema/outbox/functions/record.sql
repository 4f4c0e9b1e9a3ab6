CREATE FUNCTION outbox.record(p_relay text, p_ids bigint[], p_attempts integer[], p_states outbox.intent_state[], p_delay_ms integer[], p_ambiguous boolean[], p_classes outbox.attempt_class[], p_sent boolean[], p_http integer[], p_errors text[], p_latency_ms integer[], p_bodies text[], p_key_sent boolean[]) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    flag    text;      -- set_config's answer, unused
    n       integer := coalesce(cardinality(p_ids), 0);
    updated integer;
    applied boolean[];
    ords    bigint[];
    o       bigint;
    ev      jsonb;
    evs     jsonb[];
    final_ids    bigint[];   -- for outbox.settle
    final_states outbox.intent_state[];
    final_groups text[];
    final_keys   text[];
BEGIN
    -- One outcome per row: a delivery's (sent known) before a take-over's,
    -- then the first buffered; fenced by (lease owner, attempt). What the
    -- update did is gathered in the same statement (0048: no plpgsql step
    -- per row), in the order the relay saw the outcomes.
    WITH u AS (
        SELECT x.*,
               row_number() OVER (PARTITION BY x.id ORDER BY x.sent IS NULL, x.ord) = 1 AS chosen
          FROM unnest(p_ids, p_attempts, p_states, p_delay_ms, p_ambiguous, p_classes, p_sent,
                      p_http, p_errors, p_bodies) WITH ORDINALITY
               AS x(id, attempt, state, delay_ms, ambiguous, class, sent, http, error, body, ord)
    ), done AS (
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
        RETURNING u.ord, i.id, u.state, i.ordering_key, i.key,
                  -- what a person may have to act on (outbox.intent_event); a failed
                  -- intent's event is built by outbox.settle, with every final state's
                  CASE WHEN u.state = 'unknown' AND u.class NOT IN ('reconcile_inconclusive', 'reconciled_executed',
                                                                     'reconciled_not_executed')
                       THEN outbox.intent_event(i, u.class, u.http, u.error) END AS ev
    )
    SELECT count(*),
           array_agg(d.ord),
           array_agg(d.id) FILTER (WHERE d.state IN ('succeeded', 'failed')),
           array_agg(d.state) FILTER (WHERE d.state IN ('succeeded', 'failed')),
           array_agg(d.ordering_key) FILTER (WHERE d.state IN ('succeeded', 'failed')),
           array_agg(d.key) FILTER (WHERE d.state IN ('succeeded', 'failed')),
           array_agg(d.ev) FILTER (WHERE d.ev IS NOT NULL)
      INTO updated, ords, final_ids, final_states, final_groups, final_keys, evs
      FROM (SELECT * FROM done ORDER BY done.ord) AS d;

    IF evs IS NOT NULL THEN
        FOREACH ev IN ARRAY evs LOOP
            PERFORM pg_notify('outbox_events', ev::text);
            IF ev ? 'blocks' THEN
                PERFORM pg_notify('outbox_events',
                                  jsonb_build_object('event', 'group_blocked', 'group', ev->>'ordering_key',
                                                     'head', ev->>'key', 'blocks', ev->'blocks',
                                                     'at', ev->>'at')::text);
            END IF;
        END LOOP;
    END IF;

    IF updated = n THEN
        applied := array_fill(true, ARRAY[n]);
    ELSE
        applied := array_fill(false, ARRAY[n]);
        IF ords IS NOT NULL THEN
            FOREACH o IN ARRAY ords LOOP
                applied[o] := true;
            END LOOP;
        END IF;
        -- The intents of outcomes not applied are kept from being deleted until
        -- this commits (the INSERT below is not reference-checked).
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

    IF final_ids IS NOT NULL THEN
        PERFORM outbox.settle(final_ids, final_states, final_groups, final_keys);
    END IF;
    RETURN updated;
END
$$;

COMMENT ON FUNCTION outbox.record(p_relay text, p_ids bigint[], p_attempts integer[], p_states outbox.intent_state[], p_delay_ms integer[], p_ambiguous boolean[], p_classes outbox.attempt_class[], p_sent boolean[], p_http integer[], p_errors text[], p_latency_ms integer[], p_bodies text[], p_key_sent boolean[]) IS 'Apply a batch of attempt outcomes, fenced by (lease owner, attempt); at most one per row; every attempt in the history. Returns rows updated.';

REVOKE ALL ON FUNCTION outbox.record(p_relay text, p_ids bigint[], p_attempts integer[], p_states outbox.intent_state[], p_delay_ms integer[], p_ambiguous boolean[], p_classes outbox.attempt_class[], p_sent boolean[], p_http integer[], p_errors text[], p_latency_ms integer[], p_bodies text[], p_key_sent boolean[]) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.record(p_relay text, p_ids bigint[], p_attempts integer[], p_states outbox.intent_state[], p_delay_ms integer[], p_ambiguous boolean[], p_classes outbox.attempt_class[], p_sent boolean[], p_http integer[], p_errors text[], p_latency_ms integer[], p_bodies text[], p_key_sent boolean[]) TO outbox_relay;
