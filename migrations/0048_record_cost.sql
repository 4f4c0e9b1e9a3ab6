-- 0048: a delivery's record costs PostgreSQL less (issue 40, items 3 and 7).
--
-- What one delivered intent writes stays the same (two non-HOT row versions,
-- seven B-tree entries, one history row, the same WAL to within a byte per
-- intent: docs/performance.md, "Writes"); what changes is the CPU that
-- outbox.record spends around those writes, per row and per call:
--
-- 1. outbox.record gathers what its UPDATE did (the rows applied, the final
--    ones with their groups and keys, the intent_unknown events) in the same
--    statement, with aggregates, in the order the relay saw the outcomes. It
--    used to step through the UPDATE's rows in plpgsql, appending to four
--    arrays per row. When every outcome applied (a drain), the history
--    INSERT gets an array of true; otherwise the same lock and check as
--    before for the ones that did not.
-- 2. outbox.settle(ids, states, groups, keys DEFAULT NULL) takes the
--    intents' keys, which record has from its UPDATE: the NOTIFY
--    outbox_outcomes payload is to_json(keys) (the same JSON array), with no
--    second look-up of every row by its primary key. The other callers
--    (cancel, cancel_run, reject, resolve) pass three arguments, as before,
--    and settle reads the keys. The query for failed intents' events runs
--    only when one is failed, the ordering groups' only when one has a
--    group. (A fourth parameter with a default: the function is dropped and
--    made again, still internal, EXECUTE for its owner only.)
-- 3. attempts_reference_insert is a row trigger with the same WHEN: as a
--    statement trigger with a transition table, PostgreSQL copied every
--    inserted history row into a tuplestore, record's too, although its
--    WHEN then skipped the check. The check (outbox.attempts_check_intent,
--    one primary-key probe per row) and its error are unchanged for the
--    paths that insert history outside record (note_decision, redrive).
--
-- Events, NOTIFY payloads and rows written are the same; inside one record
-- call the intent_unknown events now come in the order of the outcomes.
--
-- Locks: the trigger's swap takes an ACCESS EXCLUSIVE lock on
-- outbox.attempts for a moment (no rewrite, no scan, whatever the table's
-- size); it waits for the history statements running and holds the new
-- ones (records, and readers of attempts) until the migration commits.
-- outbox.record keeps its signature: the relays of 0.1.0 onwards call it
-- as before; settle is internal (no role but the owner calls it).

DROP FUNCTION outbox.settle(bigint[], outbox.intent_state[], text[]);
CREATE FUNCTION outbox.settle(p_ids bigint[], p_states outbox.intent_state[], p_groups text[],
                              p_keys text[] DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    moving text[];
    ev     jsonb;
    keys   text;
    k      text;
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
    -- 'blocks' counts the group as it stood. Only asked when one is failed.
    IF 'failed' = ANY (p_states) THEN
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
    END IF;

    -- Ordered delivery: the next intent of a group is due once this one
    -- succeeded or was cancelled; a failed one keeps the group waiting.
    IF array_remove(p_groups, NULL) <> '{}' THEN
        SELECT array_agg(DISTINCT s.grp) INTO moving
          FROM unnest(p_states, p_groups) AS s(state, grp)
         WHERE s.grp IS NOT NULL AND s.state IN ('succeeded', 'cancelled');
        IF moving IS NOT NULL THEN
            PERFORM outbox.ordering_release(moving);
        END IF;
    END IF;

    -- Waiters (0041): the relays' admin ports hold ?wait= requests and
    -- LISTEN outbox_outcomes; one NOTIFY per call names the keys, a JSON
    -- array, or several when they do not fit in one payload. The keys come
    -- from the caller (0048: record has them from its UPDATE), or, when it
    -- passes NULL, from the rows.
    IF p_keys IS NULL THEN
        p_keys := ARRAY(SELECT i.key FROM outbox.intents i WHERE i.id = ANY (p_ids));
    END IF;
    IF cardinality(p_keys) > 0 THEN
        keys := to_json(p_keys)::text;
        IF octet_length(keys) <= 7002 THEN
            PERFORM pg_notify('outbox_outcomes', keys);
        ELSE
            keys := NULL;
            FOREACH k IN ARRAY p_keys LOOP
                k := to_json(k)::text;
                IF octet_length(keys) + octet_length(k) > 7000 THEN
                    PERFORM pg_notify('outbox_outcomes', '[' || keys || ']');
                    keys := NULL;
                END IF;
                keys := CASE WHEN keys IS NULL THEN k ELSE keys || ',' || k END;
            END LOOP;
            PERFORM pg_notify('outbox_outcomes', '[' || keys || ']');
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION outbox.settle(bigint[], outbox.intent_state[], text[], text[]) IS
    'What follows an intent becoming final (succeeded, failed, cancelled), called once by each path that makes intents final, with their ids, new states, ordering groups and keys (NULL: read from the rows): the events for people (intent_failed, group_blocked), the release of the groups that may move on, and the NOTIFY outbox_outcomes that wakes waiters (0041).';
REVOKE ALL ON FUNCTION outbox.settle(bigint[], outbox.intent_state[], text[], text[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION outbox.record(p_relay text, p_ids bigint[], p_attempts integer[], p_states outbox.intent_state[],
                                         p_delay_ms integer[], p_ambiguous boolean[], p_classes outbox.attempt_class[],
                                         p_sent boolean[], p_http integer[], p_errors text[], p_latency_ms integer[],
                                         p_bodies text[], p_key_sent boolean[])
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
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

CREATE FUNCTION outbox.attempts_check_intent() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM 1 FROM outbox.intents i WHERE i.id = NEW.intent_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'outbox.attempts: intent % does not exist', coalesce(NEW.intent_id::text, 'NULL')
            USING ERRCODE = 'foreign_key_violation',
                  DETAIL = 'Every attempts row belongs to a row of outbox.intents (attempts.intent_id = intents.id).';
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION outbox.attempts_check_intent() IS
    'Row-level reference check attempts.intent_id → intents.id on INSERT, skipped by outbox.record (0048: a statement trigger''s transition table copied every row, even when its WHEN skipped it).';
REVOKE ALL ON FUNCTION outbox.attempts_check_intent() FROM PUBLIC;
DROP TRIGGER attempts_reference_insert ON outbox.attempts;
CREATE TRIGGER attempts_reference_insert AFTER INSERT ON outbox.attempts
    FOR EACH ROW WHEN (current_setting('outbox.in_record', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION outbox.attempts_check_intent();
