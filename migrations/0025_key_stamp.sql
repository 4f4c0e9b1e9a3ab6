-- 0025: a re-send is decided by what the attempt that may have executed
-- carried, never by the target's settings today (issue 24, item 3).
--
-- Before: when a relay died with a request on the wire, the relay that took
-- its lease over decided "send it again with the key" or "outcome unknown"
-- by the target's key_header as it is now. A request sent without a key,
-- by a relay that died, was re-sent with a key if an admin had added
-- key_header since: the target could not recognise the first request and
-- executed the action twice. outbox.retry_now accepted the same case,
-- because a take-over's attempt row had key_sent NULL.
--
-- Now the claim stamps on the row whether the request it hands out carries
-- the key (intents.key_sent, from the target's key_header at the moment of
-- the claim, in the claim's own snapshot), and returns the stamp. The relay
-- sends the key exactly when the stamp says so: a row whose stamp disagrees
-- with the relay's cached target (a reload raced the claim) is given back
-- unsent. The take-over returns the stamp, and decides "may re-send" only
-- for a request stamped as keyed; a row stamped NULL (claimed by a relay
-- older than this migration, through outbox.claim) is never re-sent: its
-- outcome is unknown, and the status URL or a person settles it. The
-- take-over's attempt row records the stamp, and retry_now and needs_person
-- treat an attempt that may have executed and whose key is not recorded
-- like one sent without a key.
--
-- Compatibility: outbox.claim and outbox.take_over_expired keep their
-- signatures for a relay of the previous release (rolling upgrade or
-- rollback); claim now clears the stamp, so a stale stamp from an earlier
-- attempt never speaks for a request it did not see. The relay of this
-- release calls outbox.claim_due and outbox.take_over.
--
-- Cost: one boolean more in the claim's UPDATE (not indexed: the update
-- stays as HOT as it was) and in its answer.
--
-- Locks: ADD COLUMN without a default takes intents' ACCESS EXCLUSIVE lock
-- for a moment (catalog only, no rewrite).

ALTER TABLE outbox.intents ADD COLUMN key_sent boolean;
COMMENT ON COLUMN outbox.intents.key_sent IS
    'Whether the request of the current attempt carries the idempotency key header, stamped by the claim (outbox.claim_due); NULL: not recorded (never claimed, or claimed by a relay before 0025).';

-- ---------------------------------------------------------------------------
-- The previous relay's claim, as in 0016, clearing the stamp.

CREATE OR REPLACE FUNCTION outbox.claim(p_relay text, p_targets text[], p_rooms integer[], p_limit integer,
                             p_lease_ms integer)
RETURNS TABLE (id bigint, key text, target text, payload text, attempt integer, ambiguous boolean,
               first_attempt_ms bigint, probe boolean, traceparent text)   -- 0016
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    rooms    integer[] := p_rooms;
    probing  text[] := '{}';
    metered  text[] := '{}';
    avail    double precision[] := '{}';
    g        record;
    a        double precision;
BEGIN
    -- Gated targets, locked in name order (two relays never lock in opposite
    -- orders): their rooms shrink to what the gate allows.
    FOR g IN
        SELECT u.ord, s.target, s.circuit, s.probe_at, s.probe_expires_at, s.paused_until,
               s.tokens, s.tokens_at, t.rate_limit_per_s AS rate
          FROM unnest(p_targets) WITH ORDINALITY AS u(name, ord)
          JOIN outbox.target_state s ON s.target = u.name
          JOIN outbox.targets t ON t.name = u.name
         WHERE s.circuit <> 'closed' OR s.paused_until > now() OR t.rate_limit_per_s IS NOT NULL
         ORDER BY u.name
           FOR UPDATE OF s
    LOOP
        IF g.paused_until > now() THEN
            rooms[g.ord] := 0;
        ELSIF (g.circuit = 'open' AND g.probe_at <= now())
           OR (g.circuit = 'half_open' AND g.probe_expires_at <= now()) THEN
            rooms[g.ord] := least(rooms[g.ord], 1);   -- one probe, by this relay
            probing := probing || g.target;
        ELSIF g.circuit <> 'closed' THEN
            rooms[g.ord] := 0;
        END IF;
        IF g.rate IS NOT NULL AND rooms[g.ord] > 0 THEN
            a := least(outbox.rate_burst(g.rate),
                       coalesce(g.tokens + g.rate * extract(epoch FROM now() - g.tokens_at),
                                outbox.rate_burst(g.rate)));
            IF a < outbox.rate_claim_at_least(g.rate) THEN
                rooms[g.ord] := 0;   -- next_due_ms says when there will be enough
            ELSE
                rooms[g.ord] := least(rooms[g.ord], floor(a)::integer);
            END IF;
            metered := metered || g.target;
            avail := avail || a;
        END IF;
    END LOOP;

    RETURN QUERY
    WITH due AS (
        SELECT c.id
          FROM unnest(p_targets, rooms) AS t(name, room)
          JOIN outbox.targets AS tg ON tg.name = t.name AND tg.enabled -- disabled: rows wait
         CROSS JOIN LATERAL (
               SELECT i.id
                 FROM outbox.intents i
                WHERE i.state = 'pending' AND i.target = t.name AND i.next_attempt_at <= now()
                ORDER BY i.next_attempt_at
                LIMIT coalesce(t.room, 0)
                  FOR UPDATE SKIP LOCKED) AS c
         LIMIT p_limit
    ), claimed AS (
        UPDATE outbox.intents i
           SET state = 'in_flight',
               attempts = i.attempts + 1,
               lease_owner = p_relay,
               lease_expires_at = now() + p_lease_ms * interval '1 millisecond',
               first_attempt_at = coalesce(i.first_attempt_at, now()),
               key_sent = NULL,   -- 0025: this relay does not say
               updated_at = now()
          FROM due
         WHERE i.id = due.id
        RETURNING i.id, i.key, i.target, i.payload::text AS payload, i.attempts, i.ambiguous,
                  (extract(epoch FROM i.first_attempt_at) * 1000)::bigint AS first_attempt_ms,
                  i.traceparent   -- 0016
    ), probed AS (
        -- A probe is out only if a row was claimed for it.
        UPDATE outbox.target_state s
           SET circuit = 'half_open', probe_owner = p_relay,
               probe_expires_at = now() + p_lease_ms * interval '1 millisecond'
         WHERE s.target = ANY (probing) AND EXISTS (SELECT 1 FROM claimed c WHERE c.target = s.target)
        RETURNING s.target
    ), spent AS (
        UPDATE outbox.target_state s
           SET tokens = m.avail - (SELECT count(*) FROM claimed c WHERE c.target = s.target),
               tokens_at = now()
          FROM unnest(metered, avail) AS m(target, avail)
         WHERE s.target = m.target
        RETURNING s.target
    )
    SELECT c.id, c.key, c.target, c.payload, c.attempts, c.ambiguous, c.first_attempt_ms,
           c.target = ANY (probing), c.traceparent   -- 0016
      FROM claimed c;
END
$$;

-- ---------------------------------------------------------------------------
-- The claim of this release: as outbox.claim, and the stamp.

COMMENT ON FUNCTION outbox.claim(text, text[], integer[], integer, integer) IS
    'The claim of relays before 0025 (kept for a rolling upgrade or a rollback): as outbox.claim_due, without the key stamp (it clears intents.key_sent).';

CREATE FUNCTION outbox.claim_due(p_relay text, p_targets text[], p_rooms integer[], p_limit integer,
                                 p_lease_ms integer)
RETURNS TABLE (id bigint, key text, target text, payload text, attempt integer, ambiguous boolean,
               first_attempt_ms bigint, probe boolean, traceparent text, key_sent boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    rooms    integer[] := p_rooms;
    probing  text[] := '{}';
    metered  text[] := '{}';
    avail    double precision[] := '{}';
    g        record;
    a        double precision;
BEGIN
    -- Gated targets, locked in name order (two relays never lock in opposite
    -- orders): their rooms shrink to what the gate allows.
    FOR g IN
        SELECT u.ord, s.target, s.circuit, s.probe_at, s.probe_expires_at, s.paused_until,
               s.tokens, s.tokens_at, t.rate_limit_per_s AS rate
          FROM unnest(p_targets) WITH ORDINALITY AS u(name, ord)
          JOIN outbox.target_state s ON s.target = u.name
          JOIN outbox.targets t ON t.name = u.name
         WHERE s.circuit <> 'closed' OR s.paused_until > now() OR t.rate_limit_per_s IS NOT NULL
         ORDER BY u.name
           FOR UPDATE OF s
    LOOP
        IF g.paused_until > now() THEN
            rooms[g.ord] := 0;
        ELSIF (g.circuit = 'open' AND g.probe_at <= now())
           OR (g.circuit = 'half_open' AND g.probe_expires_at <= now()) THEN
            rooms[g.ord] := least(rooms[g.ord], 1);   -- one probe, by this relay
            probing := probing || g.target;
        ELSIF g.circuit <> 'closed' THEN
            rooms[g.ord] := 0;
        END IF;
        IF g.rate IS NOT NULL AND rooms[g.ord] > 0 THEN
            a := least(outbox.rate_burst(g.rate),
                       coalesce(g.tokens + g.rate * extract(epoch FROM now() - g.tokens_at),
                                outbox.rate_burst(g.rate)));
            IF a < outbox.rate_claim_at_least(g.rate) THEN
                rooms[g.ord] := 0;   -- next_due_ms says when there will be enough
            ELSE
                rooms[g.ord] := least(rooms[g.ord], floor(a)::integer);
            END IF;
            metered := metered || g.target;
            avail := avail || a;
        END IF;
    END LOOP;

    RETURN QUERY
    WITH due AS (
        SELECT c.id, tg.key_header IS NOT NULL AS keyed
          FROM unnest(p_targets, rooms) AS t(name, room)
          JOIN outbox.targets AS tg ON tg.name = t.name AND tg.enabled -- disabled: rows wait
         CROSS JOIN LATERAL (
               SELECT i.id
                 FROM outbox.intents i
                WHERE i.state = 'pending' AND i.target = t.name AND i.next_attempt_at <= now()
                ORDER BY i.next_attempt_at
                LIMIT coalesce(t.room, 0)
                  FOR UPDATE SKIP LOCKED) AS c
         LIMIT p_limit
    ), claimed AS (
        UPDATE outbox.intents i
           SET state = 'in_flight',
               attempts = i.attempts + 1,
               lease_owner = p_relay,
               lease_expires_at = now() + p_lease_ms * interval '1 millisecond',
               first_attempt_at = coalesce(i.first_attempt_at, now()),
               key_sent = due.keyed,
               updated_at = now()
          FROM due
         WHERE i.id = due.id
        RETURNING i.id, i.key, i.target, i.payload::text AS payload, i.attempts, i.ambiguous,
                  (extract(epoch FROM i.first_attempt_at) * 1000)::bigint AS first_attempt_ms,
                  i.traceparent, i.key_sent
    ), probed AS (
        -- A probe is out only if a row was claimed for it.
        UPDATE outbox.target_state s
           SET circuit = 'half_open', probe_owner = p_relay,
               probe_expires_at = now() + p_lease_ms * interval '1 millisecond'
         WHERE s.target = ANY (probing) AND EXISTS (SELECT 1 FROM claimed c WHERE c.target = s.target)
        RETURNING s.target
    ), spent AS (
        UPDATE outbox.target_state s
           SET tokens = m.avail - (SELECT count(*) FROM claimed c WHERE c.target = s.target),
               tokens_at = now()
          FROM unnest(metered, avail) AS m(target, avail)
         WHERE s.target = m.target
        RETURNING s.target
    )
    SELECT c.id, c.key, c.target, c.payload, c.attempts, c.ambiguous, c.first_attempt_ms,
           c.target = ANY (probing), c.traceparent, c.key_sent
      FROM claimed c;
END
$$;
COMMENT ON FUNCTION outbox.claim_due(text, text[], integer[], integer, integer) IS
    'Claim due rows of the given targets within their rooms and gates (circuit, pause, rate), with leases; stamps and returns whether each request carries the key (key_sent).';

-- ---------------------------------------------------------------------------
-- The take-over of this release: as take_over_expired (0011), and the stamp
-- of the request that may have executed.

CREATE FUNCTION outbox.take_over(p_relay text, p_limit integer, p_lease_ms integer, p_held bigint[])
RETURNS TABLE (id bigint, key text, target text, attempt integer, ambiguous boolean,
               first_attempt_ms bigint, previous_owner text, key_sent boolean)
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
              (extract(epoch FROM i.first_attempt_at) * 1000)::bigint, expired.lease_owner, i.key_sent;
END
$$;
COMMENT ON FUNCTION outbox.take_over(text, integer, integer, bigint[]) IS
    'Take over in-flight rows whose lease expired (never the caller''s own, p_held), with the key stamp of the request that may have executed.';

-- ---------------------------------------------------------------------------
-- An attempt that may have executed without a key the target recognises.

-- 'without': an attempt that may have executed was sent without the key;
-- 'not recorded': whether it carried the key is not known (a take-over of a
-- row claimed before 0025, an attempt before 0011); NULL: none of either
-- (an attempt that the status URL later showed did not execute is not one).
CREATE FUNCTION outbox.unkeyed_attempt(p_intent bigint) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN bool_or(a.key_sent = false) THEN 'without' ELSE 'not recorded' END
      FROM outbox.attempts a
     WHERE a.intent_id = p_intent AND a.key_sent IS NOT TRUE
       AND a.class = 'ambiguous' AND a.request_sent IS DISTINCT FROM false
       AND NOT EXISTS (SELECT 1 FROM outbox.attempts r
                        WHERE r.intent_id = p_intent AND r.id > a.id
                          AND r.class = 'reconciled_not_executed')
    HAVING count(*) > 0
$$;
COMMENT ON FUNCTION outbox.unkeyed_attempt(bigint) IS
    'Whether an attempt of the intent that may have executed went without the key (''without'') or without a record of it (''not recorded''); NULL: neither.';

-- needs_person as in 0023, with both cases.
CREATE OR REPLACE FUNCTION outbox.needs_person(p_intent bigint, p_target text, p_first_attempt_at timestamptz)
RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t outbox.targets;
    unkeyed text;   -- 0025
BEGIN
    SELECT * INTO t FROM outbox.targets WHERE name = p_target;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF t.status_url IS NOT NULL THEN
        IF t.enabled THEN
            RETURN NULL;   -- the relay asks the status URL
        END IF;
        RETURN 'needs a person — the target is disabled, so its status URL is not asked: enable it, or resolve the key';
    END IF;
    IF t.key_header IS NULL THEN
        RETURN 'needs a person — no status URL, no key';
    END IF;
    unkeyed := outbox.unkeyed_attempt(p_intent);   -- 0025
    IF unkeyed = 'without' THEN
        RETURN 'needs a person — no status URL, and an attempt that may have executed went without the key';
    ELSIF unkeyed = 'not recorded' THEN
        RETURN 'needs a person — no status URL, and whether an attempt that may have executed carried the key was not recorded';
    END IF;
    IF p_first_attempt_at IS NULL THEN
        RETURN 'needs a person — no status URL, and no first attempt is recorded to tell whether the target still remembers the key';
    END IF;
    IF now() - p_first_attempt_at >= t.key_ttl THEN
        RETURN format('needs a person — no status URL, and the key is past the target''s key_ttl (%s): the target may have forgotten it',
                      t.key_ttl);
    END IF;
    RETURN format('needs a person — no status URL; the target remembers the key until %s, so a retry with it is safe until then (outbox-relay retry KEY)',
                  outbox.utc_text(p_first_attempt_at + t.key_ttl));
END
$$;

-- retry_now as in 0013, refusing both cases.
CREATE OR REPLACE FUNCTION outbox.retry_now(p_key text, p_by text DEFAULT NULL) RETURNS outbox.intent_state
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    row outbox.intents := outbox.ordering_locked_intent(p_key, 'retry_now');   -- 0013
    tgt outbox.targets;
    who text := coalesce(nullif(p_by, ''), session_user);
    first_age interval;
    note text;
    head outbox.intents;   -- 0013
    unkeyed text;          -- 0025
BEGIN
    SELECT * INTO tgt FROM outbox.targets WHERE name = row.target;
    first_age := date_trunc('second', now() - row.first_attempt_at);
    head := outbox.ordering_head_before(row.ordering_key, row.id);   -- 0013

    IF row.state = 'pending' AND head.id IS NOT NULL THEN   -- 0013
        RAISE EXCEPTION 'outbox.retry_now: key % waits for % (%), the head of its ordering group %: it is sent after that one succeeds or is cancelled',
                        quote_literal(p_key), quote_literal(head.key), outbox.visible_status(head.state, head.ambiguous),
                        quote_literal(row.ordering_key)
            USING ERRCODE = 'OR007',
                  HINT = 'Settle the head: resolve or cancel it (outbox-relay stuck lists it).';
    ELSIF row.state = 'pending' THEN
        note := 'retry requested: pending, due now';
    ELSIF row.state = 'unknown' THEN
        IF tgt.key_header IS NULL THEN
            RAISE EXCEPTION 'outbox.retry_now: key % has an unknown outcome and target % cannot deduplicate (no key header): sending it again could execute it twice; find out from the target whether it acted, then resolve it',
                            quote_literal(p_key), quote_literal(row.target)
                USING ERRCODE = 'OR007',
                      HINT = 'outbox.resolve(key, ''succeeded'' | ''failed'', note), or: outbox-relay resolve KEY succeeded|failed --note TEXT';
        END IF;
        unkeyed := outbox.unkeyed_attempt(row.id);   -- 0025
        IF unkeyed = 'without' THEN
            RAISE EXCEPTION 'outbox.retry_now: key % has an unknown outcome and an attempt that may have executed was sent without a key (target % had no key header then): the target cannot recognise it, and sending it again could execute it twice; find out from the target whether it acted, then resolve it',
                            quote_literal(p_key), quote_literal(row.target)
                USING ERRCODE = 'OR007',
                      HINT = 'outbox.resolve(key, ''succeeded'' | ''failed'', note), or: outbox-relay resolve KEY succeeded|failed --note TEXT';
        ELSIF unkeyed = 'not recorded' THEN
            RAISE EXCEPTION 'outbox.retry_now: key % has an unknown outcome and whether an attempt that may have executed carried the key was not recorded (a lease taken over from a relay older than 0025, or an attempt before 0011): target % may not recognise it, and sending it again could execute it twice; find out from the target whether it acted, then resolve it',
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
           SET state = 'pending', next_attempt_at = CASE WHEN head.id IS NOT NULL THEN 'infinity' ELSE now() END,   -- 0013
               attempts = 0, first_attempt_at = NULL,
               response_status = NULL, response_body = NULL, updated_at = now()
         WHERE id = row.id;
    ELSE
        UPDATE outbox.intents
           SET state = 'pending', next_attempt_at = CASE WHEN head.id IS NOT NULL THEN 'infinity' ELSE now() END,   -- 0013
               lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
         WHERE id = row.id;
    END IF;
    PERFORM outbox.note_decision(row.id, row.attempts, who, note);
    RETURN 'pending';
END
$$;

-- ---------------------------------------------------------------------------
-- Grants (as 0005: nothing to PUBLIC)

REVOKE ALL ON FUNCTION outbox.claim_due(text, text[], integer[], integer, integer),
                       outbox.take_over(text, integer, integer, bigint[]),
                       outbox.unkeyed_attempt(bigint)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox.claim_due(text, text[], integer[], integer, integer),
                          outbox.take_over(text, integer, integer, bigint[])
    TO outbox_relay;
GRANT EXECUTE ON FUNCTION outbox.unkeyed_attempt(bigint) TO outbox_operator, outbox_admin;

COMMENT ON COLUMN outbox.attempts.key_sent IS
    'The request carried the idempotency key header; for a lease take-over, the request that may have executed did (0025). NULL: not known (before 0011, take-overs before 0025) or no request (decisions).';
