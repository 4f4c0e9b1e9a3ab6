-- 0003: the relay's side of the contract: presence, claim, lease upkeep, record, release.
--
-- The relay decides what an attempt means (relay/outcome.c, pure and unit
-- tested); these functions apply its decisions atomically and in batches.
-- Every write to a claimed row is fenced by (lease_owner, attempts): a relay
-- that lost its lease, or a late writer, changes nothing.

-- A relay says it is alive, and whether it is idle (wants a NOTIFY on enqueue).
-- (plpgsql, like every function the relay calls often: its plans are cached.)
CREATE FUNCTION outbox.relay_heartbeat(p_relay text, p_idle boolean) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO outbox.relays AS r (relay_id, idle) VALUES (p_relay, p_idle)
    ON CONFLICT (relay_id) DO UPDATE SET idle = excluded.idle, heartbeat_at = now();
    DELETE FROM outbox.relays WHERE heartbeat_at < now() - interval '1 day';
END
$$;

CREATE FUNCTION outbox.relay_gone(p_relay text) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    DELETE FROM outbox.relays WHERE relay_id = p_relay;
$$;

-- Claim due pending intents, at most p_rooms[i] for target p_targets[i] and
-- p_limit in all. SKIP LOCKED: relays never wait for each other and never
-- claim the same row. The per-target subquery walks intents_due in order.
-- Plans: PostgreSQL keeps custom plans for this statement (its generic plan,
-- a hash join over a full scan of intents, costs far more); pinning that with
-- a function-level plan_cache_mode cost latency on every claim, so it is not.
CREATE FUNCTION outbox.claim(p_relay text, p_targets text[], p_rooms integer[], p_limit integer,
                             p_lease_ms integer)
RETURNS TABLE (id bigint, key text, target text, payload text, attempt integer, ambiguous boolean,
               first_attempt_ms bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN QUERY
    WITH due AS (
        SELECT c.id
          FROM unnest(p_targets, p_rooms) AS t(name, room)
          JOIN outbox.targets AS tg ON tg.name = t.name AND tg.enabled -- disabled: rows wait
         CROSS JOIN LATERAL (
               SELECT i.id
                 FROM outbox.intents i
                WHERE i.state = 'pending' AND i.target = t.name AND i.next_attempt_at <= now()
                ORDER BY i.next_attempt_at
                LIMIT coalesce(t.room, 0)
                  FOR UPDATE SKIP LOCKED) AS c
         LIMIT p_limit
    )
    UPDATE outbox.intents i
       SET state = 'in_flight',
           attempts = i.attempts + 1,
           lease_owner = p_relay,
           lease_expires_at = now() + p_lease_ms * interval '1 millisecond',
           first_attempt_at = coalesce(i.first_attempt_at, now()),
           updated_at = now()
      FROM due
     WHERE i.id = due.id
    RETURNING i.id, i.key, i.target, i.payload::text, i.attempts, i.ambiguous,
              (extract(epoch FROM i.first_attempt_at) * 1000)::bigint;
END
$$;

-- Take over rows whose relay died mid-flight (lease expired while in_flight).
-- The new owner must treat each as an ambiguous attempt: it may have executed.
CREATE FUNCTION outbox.take_over_expired(p_relay text, p_limit integer, p_lease_ms integer)
RETURNS TABLE (id bigint, key text, target text, attempt integer, ambiguous boolean,
               first_attempt_ms bigint, previous_owner text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN QUERY
    WITH expired AS (
        SELECT i.id, i.lease_owner
          FROM outbox.intents i
         WHERE i.state = 'in_flight' AND i.lease_expires_at < now()
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

-- Extend the leases this relay holds. Returns the ids it still holds.
CREATE FUNCTION outbox.renew_leases(p_relay text, p_ids bigint[], p_lease_ms integer)
RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN QUERY
    UPDATE outbox.intents
       SET lease_expires_at = now() + p_lease_ms * interval '1 millisecond'
     WHERE id = ANY (p_ids) AND state = 'in_flight' AND lease_owner = p_relay
    RETURNING id;
END
$$;

-- Record a batch of attempt outcomes (deliveries, take-overs and
-- reconciliations). Arrays are parallel, one element per attempt. The intent
-- row changes only if this relay still holds the lease for that attempt
-- number (in_flight, or unknown while it reconciles); the attempts row is written either way, with
-- recorded = false when fenced out, so the history stays complete.
-- p_delay_ms: for a next state of pending or unknown, when it is next due.
-- Returns how many intents were updated.
CREATE FUNCTION outbox.record(p_relay text, p_ids bigint[], p_attempts integer[],
                              p_states outbox.intent_state[], p_delay_ms integer[],
                              p_ambiguous boolean[], p_classes outbox.attempt_class[],
                              p_sent boolean[], p_http integer[], p_errors text[],
                              p_latency_ms integer[], p_bodies text[])
RETURNS integer
-- Generic plan always: a custom plan made with statistics that saw no
-- in_flight row estimates one match and joins by a sequential scan, which
-- turned quadratic on large batches (2,000 outcomes: 6.8 s; generic: 35 ms).
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    updated integer;
BEGIN
    WITH u AS (
        SELECT *
          FROM unnest(p_ids, p_attempts, p_states, p_delay_ms, p_ambiguous, p_classes, p_sent,
                      p_http, p_errors, p_latency_ms, p_bodies)
               AS u(id, attempt, state, delay_ms, ambiguous, class, sent, http, error, latency_ms, body)
    ), changed AS (
        UPDATE outbox.intents i
           SET state = u.state,
               next_attempt_at = CASE WHEN u.state IN ('pending', 'unknown')
                                      THEN now() + coalesce(u.delay_ms, 0) * interval '1 millisecond'
                                      ELSE i.next_attempt_at END,
               lease_owner = NULL,
               lease_expires_at = NULL,
               -- Sticky: once an attempt may have executed, only the target's own
               -- status URL saying "not executed" clears the doubt.
               ambiguous = CASE WHEN u.class = 'reconciled_not_executed' THEN false
                                ELSE i.ambiguous OR u.ambiguous END,
               response_status = CASE WHEN u.state IN ('succeeded', 'failed') THEN u.http
                                      ELSE i.response_status END,
               response_body = CASE WHEN u.state IN ('succeeded', 'failed') THEN u.body
                                    ELSE i.response_body END,
               last_error = u.error,
               updated_at = now()
          FROM u
         WHERE i.id = u.id AND i.state IN ('in_flight', 'unknown') AND i.lease_owner = p_relay
           AND i.attempts = u.attempt
        RETURNING i.id
    ), history AS (
        INSERT INTO outbox.attempts (intent_id, attempt, relay, class, request_sent, http_status,
                                     error, latency_ms, response_body, recorded)
        SELECT u.id, u.attempt, p_relay, u.class, u.sent, u.http, u.error, u.latency_ms,
               left(u.body, 4096), changed.id IS NOT NULL
          FROM u LEFT JOIN changed ON changed.id = u.id
        RETURNING recorded
    )
    SELECT count(*) FILTER (WHERE recorded) INTO updated FROM history;
    RETURN updated;
END
$$;

-- Give back claimed rows that were never sent (shutdown before sending):
-- they return to pending with their attempt number restored.
CREATE FUNCTION outbox.release(p_relay text, p_ids bigint[], p_attempts integer[])
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    released integer;
BEGIN
    UPDATE outbox.intents i
       SET state = 'pending',
           attempts = i.attempts - 1,
           first_attempt_at = CASE WHEN i.attempts = 1 THEN NULL ELSE i.first_attempt_at END,
           lease_owner = NULL,
           lease_expires_at = NULL,
           next_attempt_at = now(),
           updated_at = now()
      FROM unnest(p_ids, p_attempts) AS u(id, attempt)
     WHERE i.id = u.id AND i.state = 'in_flight' AND i.lease_owner = p_relay
       AND i.attempts = u.attempt;
    GET DIAGNOSTICS released = ROW_COUNT;
    RETURN released;
END
$$;

-- Claim unknown rows due for reconciliation whose target has a status URL.
-- The row stays `unknown` (the agent keeps seeing "reconciling"); the lease
-- only keeps two relays from asking at once, and expires if this one dies.
CREATE FUNCTION outbox.claim_unknown(p_relay text, p_limit integer, p_lease_ms integer)
RETURNS TABLE (id bigint, key text, target text, attempt integer, first_attempt_ms bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN QUERY
    WITH due AS (
        SELECT i.id
          FROM outbox.intents i
          JOIN outbox.targets t ON t.name = i.target
         WHERE i.state = 'unknown' AND i.next_attempt_at <= now()
           AND t.status_url IS NOT NULL AND t.enabled
           AND (i.lease_expires_at IS NULL OR i.lease_expires_at < now())
         ORDER BY i.next_attempt_at
         LIMIT p_limit
           FOR UPDATE OF i SKIP LOCKED
    )
    UPDATE outbox.intents i
       SET lease_owner = p_relay,
           lease_expires_at = now() + p_lease_ms * interval '1 millisecond',
           updated_at = now()
      FROM due
     WHERE i.id = due.id
    RETURNING i.id, i.key, i.target, i.attempts,
              (extract(epoch FROM i.first_attempt_at) * 1000)::bigint;
END
$$;

-- Put claimed rows back unsent, due again after p_delay_ms: a target's retry
-- budget is spent. Retries wait; they are never dropped and never multiply.
CREATE FUNCTION outbox.defer(p_relay text, p_ids bigint[], p_attempts integer[], p_delay_ms integer)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    deferred integer;
BEGIN
    UPDATE outbox.intents i
       SET state = 'pending',
           attempts = i.attempts - 1,
           lease_owner = NULL,
           lease_expires_at = NULL,
           next_attempt_at = now() + p_delay_ms * interval '1 millisecond',
           updated_at = now()
      FROM unnest(p_ids, p_attempts) AS u(id, attempt)
     WHERE i.id = u.id AND i.state = 'in_flight' AND i.lease_owner = p_relay
       AND i.attempts = u.attempt;
    GET DIAGNOSTICS deferred = ROW_COUNT;
    RETURN deferred;
END
$$;

-- When the next row becomes due (a pending retry, an in_flight lease that
-- will expire and need taking over, or an unknown row to reconcile through a
-- status URL), in ms from now; NULL when there is none.
CREATE FUNCTION outbox.next_due_ms() RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN (SELECT CASE WHEN due IS NOT NULL
                THEN greatest(0, (extract(epoch FROM (due - now())) * 1000)::bigint) END
      FROM (SELECT least((SELECT min(next_attempt_at) FROM outbox.intents WHERE state = 'pending'),
                         (SELECT min(lease_expires_at) FROM outbox.intents WHERE state = 'in_flight'),
                         (SELECT min(greatest(i.next_attempt_at, coalesce(i.lease_expires_at, i.next_attempt_at)))
                            FROM outbox.intents i JOIN outbox.targets t ON t.name = i.target
                           WHERE i.state = 'unknown' AND t.status_url IS NOT NULL AND t.enabled))
                   AS due) AS next);
END
$$;
