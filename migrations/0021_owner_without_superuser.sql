-- 0021: every migration applies as a non-superuser owner, and the live
-- counts behind the gauges work (issue 22).
--
-- 1. enqueue and record turned a custom setting on for their own duration
--    with a SET clause (outbox.in_enqueue since 0008, outbox.in_record since
--    0020): the WHEN of a statement trigger reads it to skip work that the
--    function does itself (the INSERT NOTIFY on intents, the reference check
--    on attempts). PostgreSQL 15 lets only a superuser (or a role granted SET
--    on that parameter, which only a superuser can grant) attach a custom
--    setting to a function, so a CREATEROLE owner, all that a managed
--    PostgreSQL gives, stopped at 0008. The earlier migrations now create
--    those functions without the clause (their old text is still accepted
--    from a database that applied it: migrations/amended); here both turn
--    the setting on with set_config(…, true) just before the INSERT whose
--    trigger reads it, and off right after, so that it covers exactly that
--    statement, as the SET clause covered the call. An error in between ends
--    the statement's (sub)transaction, which takes the setting back with it.
--    The value is assigned to a variable, not PERFORMed: PERFORM would set
--    FOUND, which enqueue reads right after its INSERT.
--
-- 2. outbox.live_counts (0004) has failed on every call: its result column
--    "state" is also a plpgsql variable, and an unqualified state in the
--    queries is ambiguous. The relay dropped the error, and every
--    outbox_intents gauge read 0. The queries name their table now.
--
-- Locks: CREATE OR REPLACE FUNCTION takes no lock on tables; calls already
-- running finish with the old body.

-- ---------------------------------------------------------------------------
-- 1. enqueue (as last defined in 0017) and record (0020), without SET clauses

CREATE OR REPLACE FUNCTION outbox.enqueue(p_key text, p_target text, p_payload jsonb,
                               p_run_id text DEFAULT NULL, p_not_before timestamptz DEFAULT NULL,
                               p_ordering_key text DEFAULT NULL,   -- 0013
                               p_traceparent text DEFAULT NULL)    -- 0016
RETURNS outbox.enqueue_result
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    flag      text;     -- 0021: set_config's answer, unused (an assignment keeps FOUND)
    wake      boolean;
    tgt       outbox.targets;
    existing  outbox.intents;
    stone     outbox.tombstones;
    fp        bytea;
    new_id    bigint;
    new_state outbox.intent_state := 'pending';
    fields    text[];
    result    outbox.enqueue_result;
    payload_text text;
    too_deep  boolean := false;
    locked    boolean;
    wait      boolean := false;   -- 0013: held behind a live intent of its group
    trace     text := coalesce(p_traceparent, nullif(current_setting('outbox.traceparent', true), ''));   -- 0016
BEGIN
    -- Every key outside the alphabet matches this (outbox.refuse_key says why).
    IF p_key IS NULL OR p_key = '' OR octet_length(p_key) > 255
       OR p_key ~ '^ | $|^\.\.?$|[\u0001-\u001f\u007f-\u00a0\u00ad\u034f\u061c\u115f\u1160\u1680\u17b4\u17b5\u180b-\u180f\u2000-\u200f\u2028-\u202f\u205f-\u206f\u3000\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\ufffe\uffff\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]' THEN
        PERFORM outbox.refuse_key('enqueue', p_key);
    END IF;
    -- 0016: the caller's W3C trace context, checked (outbox.refuse_traceparent says why).
    IF trace IS NOT NULL AND (trace !~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
                              OR substr(trace, 4, 32) = '00000000000000000000000000000000'
                              OR substr(trace, 37, 16) = '0000000000000000') THEN
        PERFORM outbox.refuse_traceparent(trace, p_traceparent IS NULL);
    END IF;
    payload_text := p_payload::text;
    -- Only a payload with more than 100 opening brackets can be nested that
    -- deep (replace() counts them faster than anything else here).
    IF 2 * octet_length(payload_text) - octet_length(replace(payload_text, '{', ''))
                                      - octet_length(replace(payload_text, '[', '')) > 100 THEN
        too_deep := jsonb_path_exists(p_payload, 'strict $.**{100} ? (@.type() == "object" || @.type() == "array")');
    END IF;

    -- The target lock of 0010; see there.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        PERFORM 1 FROM outbox.targets WHERE name = p_target FOR KEY SHARE;
        -- 0012: a prune of this key committed after our snapshot fails this with 40001.
        PERFORM 1 FROM outbox.intents WHERE key = p_key FOR KEY SHARE;
    END IF;
    locked := pg_advisory_xact_lock_shared(1330774017, hashtext(p_target)) IS NOT NULL;
    -- 0013: an ordered intent takes its place in its group (the group's lock, until
    -- this transaction ends: the id drawn below follows every earlier enqueue of the
    -- group); wait: an earlier intent of the group is live, the new one is held.
    IF p_ordering_key IS NOT NULL THEN
        wait := outbox.ordering_place(p_key, p_ordering_key);
    END IF;

    flag := set_config('outbox.in_enqueue', 'on', true);    -- 0021: the INSERT trigger's WHEN
    INSERT INTO outbox.intents AS i (key, target, payload, fingerprint, state, run_id, next_attempt_at,
                                     ordering_key, not_before, traceparent)   -- 0013, 0016
    SELECT p_key, t.name, p_payload,
           CASE WHEN cardinality(t.volatile_paths) = 0
                     AND (strpos(payload_text, '.') = 0 OR payload_text !~ '[0-9]\.[0-9]*0')
                THEN sha256(convert_to(payload_text, 'UTF8'))
                ELSE outbox.fingerprint(p_payload, t.volatile_paths) END,
           CASE WHEN t.approval_rule IS NOT NULL AND outbox.needs_approval(p_payload, t.approval_rule)
                THEN 'awaiting_approval'::outbox.intent_state
                ELSE 'pending'::outbox.intent_state END,
           p_run_id, CASE WHEN wait THEN 'infinity' ELSE greatest(now(), coalesce(p_not_before, now())) END,   -- 0013
           p_ordering_key, CASE WHEN wait THEN p_not_before END, trace   -- 0013, 0016
      FROM outbox.targets t
     WHERE t.name = p_target AND t.enabled AND jsonb_typeof(p_payload) = 'object'
       AND octet_length(payload_text) <= t.max_payload_bytes AND NOT too_deep
    ON CONFLICT (key) DO NOTHING
    RETURNING i.id, i.state, i.fingerprint,
              i.state = 'pending' AND i.next_attempt_at <= now()
              AND EXISTS (SELECT 1 FROM outbox.relays
                           WHERE idle AND heartbeat_at > now() - interval '2 minutes')
         INTO new_id, new_state, fp, wake;
    flag := set_config('outbox.in_enqueue', 'off', true);  -- 0021
    IF FOUND THEN
        -- 0012: a pruned key is remembered: take the row back, answer from the tombstone.
        SELECT s.* INTO stone FROM outbox.tombstones s   -- 0017: inline, was outbox.tombstone_of
         WHERE s.key_hash = substring(sha256(convert_to(p_key, 'UTF8')) FROM 1 FOR 16) AND s.forget_at > now()
         ORDER BY s.pruned_at DESC LIMIT 1;
        IF stone.intent_id IS NOT NULL THEN
            DELETE FROM outbox.intents WHERE id = new_id;
            RETURN outbox.enqueue_remembered(p_key, p_target, fp, stone);
        END IF;
        IF wake THEN
            PERFORM pg_notify('outbox_intents', '');
        END IF;
        result := (p_key, new_id, p_target, new_state::text, true, NULL, NULL, NULL);
        RETURN result;
    END IF;

    -- The careful path (as in 0008).
    new_state := 'pending';
    SELECT * INTO tgt FROM outbox.targets WHERE name = p_target;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'outbox.enqueue: unknown target %', coalesce(quote_literal(p_target), 'NULL')
            USING ERRCODE = 'OR002', HINT = 'Targets are registered by an admin in outbox.targets.';
    END IF;
    IF NOT tgt.enabled THEN
        RAISE EXCEPTION 'outbox.enqueue: target % is disabled', quote_literal(p_target)
            USING ERRCODE = 'OR003';
    END IF;
    IF p_payload IS NULL OR jsonb_typeof(p_payload) <> 'object' THEN
        RAISE EXCEPTION 'outbox.enqueue: payload for key % must be a JSON object, got %',
                        quote_literal(p_key), coalesce(jsonb_typeof(p_payload), 'NULL')
            USING ERRCODE = 'OR005';
    END IF;
    IF octet_length(payload_text) > tgt.max_payload_bytes THEN
        RAISE EXCEPTION 'outbox.enqueue: payload for key % is % bytes; target % accepts at most %',
                        quote_literal(p_key), octet_length(payload_text), quote_literal(p_target),
                        tgt.max_payload_bytes
            USING ERRCODE = 'OR006';
    END IF;
    IF too_deep THEN
        RAISE EXCEPTION 'outbox.enqueue: payload for key % is nested deeper than 100 levels', quote_literal(p_key)
            USING ERRCODE = 'OR010',
                  HINT = 'At most 100 objects and arrays may enclose one another in a payload.';
    END IF;

    IF cardinality(tgt.volatile_paths) = 0
       AND (strpos(payload_text, '.') = 0 OR payload_text !~ '[0-9]\.[0-9]*0') THEN
        fp := sha256(convert_to(payload_text, 'UTF8'));
    ELSE
        fp := outbox.fingerprint(p_payload, tgt.volatile_paths);
    END IF;
    IF tgt.approval_rule IS NOT NULL AND outbox.needs_approval(p_payload, tgt.approval_rule) THEN
        new_state := 'awaiting_approval';
    END IF;

    -- Not inserted above, yet every check passed: the key is taken, or the
    -- target changed between the two statements. Insert once more (the
    -- latter), or find the existing row (the former).
    flag := set_config('outbox.in_enqueue', 'on', true);    -- 0021: the INSERT trigger's WHEN
    INSERT INTO outbox.intents AS i (key, target, payload, fingerprint, state, run_id, next_attempt_at,
                                     ordering_key, not_before, traceparent)   -- 0013, 0016
    VALUES (p_key, p_target, p_payload, fp, new_state, p_run_id,
            CASE WHEN wait THEN 'infinity' ELSE greatest(now(), coalesce(p_not_before, now())) END,   -- 0013
            p_ordering_key, CASE WHEN wait THEN p_not_before END, trace)   -- 0013, 0016
    ON CONFLICT (key) DO NOTHING
    RETURNING * INTO existing;
    flag := set_config('outbox.in_enqueue', 'off', true);  -- 0021
    IF FOUND THEN
        -- 0012: as on the fast path.
        SELECT s.* INTO stone FROM outbox.tombstones s   -- 0017: inline, was outbox.tombstone_of
         WHERE s.key_hash = substring(sha256(convert_to(p_key, 'UTF8')) FROM 1 FOR 16) AND s.forget_at > now()
         ORDER BY s.pruned_at DESC LIMIT 1;
        IF stone.intent_id IS NOT NULL THEN
            DELETE FROM outbox.intents WHERE id = existing.id;
            RETURN outbox.enqueue_remembered(p_key, p_target, fp, stone);
        END IF;
        IF existing.state = 'pending' AND existing.next_attempt_at <= now()
           AND EXISTS (SELECT 1 FROM outbox.relays WHERE idle AND heartbeat_at > now() - interval '2 minutes') THEN
            PERFORM pg_notify('outbox_intents', '');
        END IF;
        result := (existing.key, existing.id, existing.target, new_state::text, true, NULL, NULL, NULL);
        RETURN result;
    END IF;

    SELECT * INTO existing FROM outbox.intents WHERE key = p_key;
    IF NOT FOUND THEN
        -- 0012: pruned after our INSERT saw it.
        SELECT s.* INTO stone FROM outbox.tombstones s   -- 0017: inline, was outbox.tombstone_of
         WHERE s.key_hash = substring(sha256(convert_to(p_key, 'UTF8')) FROM 1 FOR 16) AND s.forget_at > now()
         ORDER BY s.pruned_at DESC LIMIT 1;
        IF stone.intent_id IS NOT NULL THEN
            RETURN outbox.enqueue_remembered(p_key, p_target, fp, stone);
        END IF;
        RAISE EXCEPTION 'outbox.enqueue: key % was enqueued by a concurrent transaction not visible to this snapshot',
                        quote_literal(p_key)
            USING ERRCODE = '40001', HINT = 'Retry the transaction.';
    END IF;

    IF existing.target <> p_target THEN
        RAISE EXCEPTION 'outbox.enqueue: key % is already used for target %, not %',
                        quote_literal(p_key), quote_literal(existing.target), quote_literal(p_target)
            USING ERRCODE = 'OR001',
                  HINT = 'An idempotency key names one action; use a new key for a new action.';
    END IF;

    -- 0013: the ordering key is part of the action, as the target is.
    IF existing.ordering_key IS DISTINCT FROM p_ordering_key THEN
        RAISE EXCEPTION 'outbox.enqueue: key % is already used %, not %', quote_literal(p_key),
                        coalesce('in ordering group ' || quote_literal(existing.ordering_key), 'without an ordering key'),
                        coalesce('in ordering group ' || quote_literal(p_ordering_key), 'without one')
            USING ERRCODE = 'OR001',
                  HINT = 'An idempotency key names one action; use a new key for a new action.';
    END IF;

    IF existing.fingerprint <> fp THEN
        fields := outbox.differing_fields(outbox.fingerprint_doc(existing.payload, tgt.volatile_paths),
                                          outbox.fingerprint_doc(p_payload, tgt.volatile_paths));
        IF tgt.on_mismatch = 'keep_original' THEN
            INSERT INTO outbox.mismatches (key, payload, fingerprint, fields)
            VALUES (p_key, p_payload, fp, fields);
            UPDATE outbox.intents SET mismatches = mismatches + 1 WHERE id = existing.id;
        ELSE
            RAISE EXCEPTION 'outbox.enqueue: key % was already used with a different payload (fields that differ: %)',
                            quote_literal(p_key), array_to_string(fields, ', ')
                USING ERRCODE = 'OR001',
                      DETAIL = format('target %s, on_mismatch = reject', existing.target),
                      HINT = 'An idempotency key names one action; use a new key for a new action, or send the same arguments.';
        END IF;
    END IF;

    result := (existing.key, existing.id, existing.target,
               outbox.visible_status(existing.state, existing.ambiguous), false,
               CASE WHEN existing.state IN ('succeeded', 'failed') THEN existing.response_status END,
               CASE WHEN existing.state IN ('succeeded', 'failed') THEN existing.response_body END,
               fields);
    RETURN result;
END
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
    flag      text;     -- 0021: set_config's answer, unused (an assignment keeps FOUND)
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

    -- 0020: the intents of outcomes not applied are kept from being deleted
    -- until this commits (the INSERT below is not reference-checked).
    IF updated < coalesce(cardinality(p_ids), 0) THEN
        PERFORM 1 FROM outbox.intents i
         WHERE i.id IN (SELECT x.id FROM unnest(p_ids) WITH ORDINALITY AS x(id, ord) WHERE NOT applied[x.ord])
           FOR KEY SHARE OF i;
    END IF;

    -- Every outcome into the history, in the order the relay saw them; not
    -- for an intent deleted meanwhile (its history would break the reference).
    flag := set_config('outbox.in_record', 'on', true);     -- 0021: the INSERT trigger's WHEN
    INSERT INTO outbox.attempts (intent_id, attempt, relay, class, request_sent, http_status,
                                 error, latency_ms, response_body, key_sent, recorded)
    SELECT x.id, x.attempt, p_relay, x.class, x.sent, x.http, x.error, x.latency_ms,
           left(x.body, 4096), x.key_sent, applied[x.ord]
      FROM unnest(p_ids, p_attempts, p_classes, p_sent, p_http, p_errors, p_latency_ms, p_bodies,
                  p_key_sent) WITH ORDINALITY
           AS x(id, attempt, class, sent, http, error, latency_ms, body, key_sent, ord)
     WHERE applied[x.ord] OR EXISTS (SELECT 1 FROM outbox.intents i WHERE i.id = x.id)   -- 0020
     ORDER BY x.ord;
    flag := set_config('outbox.in_record', 'off', true);   -- 0021

    -- 0013: the next intent of each group whose intent succeeded is due now.
    IF settled IS NOT NULL THEN
        PERFORM outbox.ordering_release(settled);
    END IF;
    RETURN updated;
END
$$;

-- ---------------------------------------------------------------------------
-- 2. live_counts: columns qualified

CREATE OR REPLACE FUNCTION outbox.live_counts()
RETURNS TABLE (state outbox.intent_state, intents bigint, oldest_due_age_s double precision)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN QUERY
    SELECT 'pending'::outbox.intent_state, count(*),
           coalesce(extract(epoch FROM now() - min(i.next_attempt_at) FILTER (WHERE i.next_attempt_at <= now()))::float8, 0)
      FROM outbox.intents i WHERE i.state = 'pending'
    UNION ALL
    SELECT 'in_flight', count(*), NULL FROM outbox.intents i WHERE i.state = 'in_flight'
    UNION ALL
    SELECT 'unknown', count(*), NULL FROM outbox.intents i WHERE i.state = 'unknown'
    UNION ALL
    SELECT 'awaiting_approval', count(*), NULL FROM outbox.intents i WHERE i.state = 'awaiting_approval';
END
$$;
