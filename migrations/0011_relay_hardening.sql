-- 0011: the relay's writes, hardened (issue "Hardening", items 5, 6 and 14).
--
-- 1. outbox.record keeps at most one outcome per row and batch. A batch that
--    held two outcomes of one row (a finished delivery and a take-over of
--    the same lease, when the record connection was held down) applied one
--    of them and wrote every history row with recorded = true. Now the row
--    takes one outcome (a delivery's before a take-over's, then the first
--    buffered) and the other history rows say recorded = false.
-- 2. outbox.record skips outcomes of intents that no longer exist (deleted by
--    hand): their history rows would break the attempts → intents reference
--    (0008) and with it the whole batch, so that one missing row made every
--    other outcome of the batch wait, then end as a take-over. The relay
--    also isolates any other failing outcome by halving its batch.
-- 3. outbox.take_over_expired(relay, limit, lease, held): never the rows the
--    caller still holds (delivering, or finished and waiting to be recorded),
--    whatever their lease says: a relay whose record connection was down
--    took its own finished rows over as "lease expired".
-- 4. attempts.key_sent: whether the request carried the idempotency key. A
--    decision that a re-send is safe reads the key header at the time of the
--    attempt, not the target's current one: a target switched to keyed after
--    a keyless attempt that may have executed cannot recognise that attempt.
--    outbox.retry_now refuses such a row. NULL: not known (rows before 0011,
--    and lease take-overs, where the dead relay's request is not known; those
--    keep following the target's header, as before).
--
-- 5. targets.secret_env names a variable of the prefix OUTBOX_SECRET_ (the
--    relay reads no other): a row naming DATABASE_URL would have made the
--    database password a signing key. NOT VALID: existing rows are kept (the
--    relay refuses to read them and logs target_secret_refused); new and
--    changed rows must comply. Static header values may be {"env": "NAME"}
--    with the same prefix, so that credentials stay out of the table.
--
-- The previous signatures (record with 12 arrays, take_over_expired with 3
-- arguments) stay for relays of the previous release during a rollback.

ALTER TABLE outbox.attempts ADD COLUMN key_sent boolean;

ALTER TABLE outbox.targets ADD CONSTRAINT targets_secret_env_prefix
    CHECK (secret_env ~ '^OUTBOX_SECRET_[A-Za-z0-9_]+$') NOT VALID;
COMMENT ON COLUMN outbox.targets.secret_env IS
    'Name of the relay environment variable holding the signing secret (never the secret itself); it must start with OUTBOX_SECRET_.';
COMMENT ON COLUMN outbox.attempts.key_sent IS
    'The request carried the idempotency key header (NULL: not known: before migration 0011, lease take-overs, decisions).';

-- ---------------------------------------------------------------------------
-- 1, 2, 4. record

CREATE FUNCTION outbox.record(p_relay text, p_ids bigint[], p_attempts integer[],
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
BEGIN
    -- One outcome per row: a delivery's (sent known) before a take-over's,
    -- then the first buffered; fenced by (lease owner, attempt).
    FOR o IN
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
        RETURNING u.ord
    LOOP
        applied[o] := true;
        updated := updated + 1;
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
    RETURN updated;
END
$$;
COMMENT ON FUNCTION outbox.record(text, bigint[], integer[], outbox.intent_state[], integer[], boolean[],
                                  outbox.attempt_class[], boolean[], integer[], text[], integer[], text[], boolean[]) IS
    'Apply a batch of attempt outcomes, fenced by (lease owner, attempt); at most one per row; every attempt in the history. Returns rows updated.';

-- ---------------------------------------------------------------------------
-- 3. take_over_expired, never the caller's own live rows

CREATE FUNCTION outbox.take_over_expired(p_relay text, p_limit integer, p_lease_ms integer, p_held bigint[])
RETURNS TABLE (id bigint, key text, target text, attempt integer, ambiguous boolean,
               first_attempt_ms bigint, previous_owner text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN QUERY
    WITH expired AS (
        SELECT i.id, i.lease_owner
          FROM outbox.intents i
         WHERE i.state = 'in_flight' AND i.lease_expires_at < now()
           AND i.id <> ALL (coalesce(p_held, '{}'))
         ORDER BY i.lease_expires_at
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    )
    UPDATE outbox.intents i
       SET lease_owner = p_relay,
           lease_expires_at = now() + p_lease_ms * interval '1 millisecond',
           updated_at = now()
      FROM expired
     WHERE i.id = expired.id
    RETURNING i.id, i.key, i.target, i.attempts, i.ambiguous,
              (extract(epoch FROM i.first_attempt_at) * 1000)::bigint, expired.lease_owner;
END
$$;

-- ---------------------------------------------------------------------------
-- 3b. renew_leases joins the ids it is given, and skips rows locked by
--     another transaction. The relay now renews the rows it holds finished
--     too (thousands in a drain): `id = ANY (ids)` as a filter was quadratic,
--     and a renewal that waited for the record connection's transaction on
--     the same rows (locked in another order) deadlocked with it, one of the
--     two cancelled after deadlock_timeout: 1.9 s a call, a drain at a tenth
--     of its speed. A row locked right now is being recorded; it is renewed
--     next time if that record fails.

CREATE OR REPLACE FUNCTION outbox.renew_leases(p_relay text, p_ids bigint[], p_lease_ms integer)
RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN QUERY
    WITH held AS (
        SELECT i.id
          FROM outbox.intents i
          JOIN (SELECT DISTINCT h.id FROM unnest(p_ids) AS h(id)) AS h ON h.id = i.id
         WHERE i.state = 'in_flight' AND i.lease_owner = p_relay
           FOR UPDATE OF i SKIP LOCKED
    )
    UPDATE outbox.intents i
       SET lease_expires_at = now() + p_lease_ms * interval '1 millisecond'
      FROM held
     WHERE i.id = held.id
    RETURNING i.id;
END
$$;

-- ---------------------------------------------------------------------------
-- 4. retry_now: a keyless attempt that may have executed is never re-sent

CREATE OR REPLACE FUNCTION outbox.retry_now(p_key text, p_by text DEFAULT NULL) RETURNS outbox.intent_state
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    row outbox.intents := outbox.locked_intent(p_key, 'retry_now');
    tgt outbox.targets;
    who text := coalesce(nullif(p_by, ''), session_user);
    first_age interval;
    note text;
BEGIN
    SELECT * INTO tgt FROM outbox.targets WHERE name = row.target;
    first_age := date_trunc('second', now() - row.first_attempt_at);

    IF row.state = 'pending' THEN
        note := 'retry requested: pending, due now';
    ELSIF row.state = 'unknown' THEN
        IF tgt.key_header IS NULL THEN
            RAISE EXCEPTION 'outbox.retry_now: key % has an unknown outcome and target % cannot deduplicate (no key header): sending it again could execute it twice; find out from the target whether it acted, then resolve it',
                            quote_literal(p_key), quote_literal(row.target)
                USING ERRCODE = 'OR007',
                      HINT = 'outbox.resolve(key, ''succeeded'' | ''failed'', note), or: outbox-relay resolve KEY succeeded|failed --note TEXT';
        END IF;
        IF EXISTS (SELECT 1 FROM outbox.attempts a
                    WHERE a.intent_id = row.id AND a.key_sent = false
                      AND a.class = 'ambiguous' AND a.request_sent IS DISTINCT FROM false
                      AND NOT EXISTS (SELECT 1 FROM outbox.attempts r
                                       WHERE r.intent_id = row.id AND r.id > a.id
                                         AND r.class = 'reconciled_not_executed')) THEN
            RAISE EXCEPTION 'outbox.retry_now: key % has an unknown outcome and an attempt that may have executed was sent without a key (target % had no key header then): the target cannot recognise it, and sending it again could execute it twice; find out from the target whether it acted, then resolve it',
                            quote_literal(p_key), quote_literal(row.target)
                USING ERRCODE = 'OR007',
                      HINT = 'outbox.resolve(key, ''succeeded'' | ''failed'', note), or: outbox-relay resolve KEY succeeded|failed --note TEXT';
        END IF;
        IF row.first_attempt_at IS NULL THEN
            RAISE EXCEPTION 'outbox.retry_now: key % has an unknown outcome and no recorded first attempt, so whether target % still remembers the key cannot be told: sending it again could execute it twice; find out from the target whether it acted, then resolve it',
                            quote_literal(p_key), quote_literal(row.target)
                USING ERRCODE = 'OR007',
                      HINT = 'outbox.resolve(key, ''succeeded'' | ''failed'', note), or: outbox-relay resolve KEY succeeded|failed --note TEXT';
        END IF;
        IF now() - row.first_attempt_at >= tgt.key_ttl THEN
            RAISE EXCEPTION 'outbox.retry_now: key % has an unknown outcome and its first attempt was % ago, past target %''s key_ttl of %: the target may have forgotten the key, and sending it again could execute it twice; find out from the target whether it acted, then resolve it',
                            quote_literal(p_key), first_age, quote_literal(row.target), tgt.key_ttl
                USING ERRCODE = 'OR007',
                      HINT = 'outbox.resolve(key, ''succeeded'' | ''failed'', note), or: outbox-relay resolve KEY succeeded|failed --note TEXT';
        END IF;
        note := format('retry requested: unknown -> pending with the same key (target %s honours keys; first attempt %s ago, key_ttl %s)',
                       row.target, first_age, tgt.key_ttl);
    ELSIF row.state = 'failed' THEN
        IF row.ambiguous THEN
            RAISE EXCEPTION 'outbox.retry_now: key % failed after an attempt that may have executed: sending it again could execute it twice',
                            quote_literal(p_key)
                USING ERRCODE = 'OR007',
                      HINT = 'A new action needs a new key.';
        END IF;
        note := format('retry requested: failed -> pending (no attempt may have executed; %s attempt(s) before, counted from 0 again)',
                       row.attempts);
    ELSE
        RAISE EXCEPTION 'outbox.retry_now: key % is %, %', quote_literal(p_key), row.state,
                        CASE row.state
                            WHEN 'in_flight' THEN 'being delivered now'
                            WHEN 'awaiting_approval' THEN 'approve it instead'
                            WHEN 'succeeded' THEN 'the target acted; nothing to retry'
                            ELSE 'it is final; nothing to retry'
                        END
            USING ERRCODE = 'OR007';
    END IF;

    IF NOT tgt.enabled THEN
        RAISE EXCEPTION 'outbox.retry_now: target % of key % is disabled: nothing would be sent',
                        quote_literal(row.target), quote_literal(p_key)
            USING ERRCODE = 'OR007', HINT = 'Enable the target first (outbox.targets.enabled).';
    END IF;

    IF row.state = 'failed' THEN
        UPDATE outbox.intents
           SET state = 'pending', next_attempt_at = now(), attempts = 0, first_attempt_at = NULL,
               response_status = NULL, response_body = NULL, updated_at = now()
         WHERE id = row.id;
    ELSE
        UPDATE outbox.intents
           SET state = 'pending', next_attempt_at = now(), lease_owner = NULL,
               lease_expires_at = NULL, updated_at = now()
         WHERE id = row.id;
    END IF;
    PERFORM outbox.note_decision(row.id, row.attempts, who, note);
    RETURN 'pending';
END
$$;

-- ---------------------------------------------------------------------------
-- grants (0005's roles)

REVOKE ALL ON FUNCTION outbox.record(text, bigint[], integer[], outbox.intent_state[], integer[], boolean[],
                                     outbox.attempt_class[], boolean[], integer[], text[], integer[], text[], boolean[]),
                       outbox.take_over_expired(text, integer, integer, bigint[])
       FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox.record(text, bigint[], integer[], outbox.intent_state[], integer[], boolean[],
                                        outbox.attempt_class[], boolean[], integer[], text[], integer[], text[], boolean[]),
                          outbox.take_over_expired(text, integer, integer, bigint[])
      TO outbox_relay;
