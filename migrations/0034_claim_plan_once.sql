-- 0034: the claim is planned once per connection, not at every call (issue 26:
-- PostgreSQL's share of a delivery).
--
-- outbox.claim_due ran one statement: a CTE that chose and locked the due rows
-- of each target (a LATERAL index scan with SKIP LOCKED), updated them, and
-- spent the gates' tokens and probes. plpgsql caches a statement's plan only if
-- its generic plan (made without the parameters' values) is estimated to cost
-- about as much as the plans made with them. For this statement it never was:
-- without values PostgreSQL takes unnest(p_targets, rooms) for ten targets and
-- LIMIT p_limit for a tenth of the table, and prices the update of the chosen
-- rows as a hash join over all of intents. So every claim was planned again,
-- with each partial index of intents weighed against its conditions: about
-- 1 ms of the backend's CPU per claim, measured with pg_stat_statements
-- (track_planning) during a drain. That is 4-10 us per delivery when claims
-- take 256 rows, and 13 us when a slow target lets a relay claim 70 rows at a
-- time. Forcing the generic plan on that statement would have made it worse:
-- its hash join reads every row of intents.
--
-- The function now runs two statements, each with a plan that does not depend
-- on the parameters' values:
--   1. choose and lock: the same LATERAL scan of intents_due per target, with
--      SKIP LOCKED, into two arrays (the ids, and whether each request carries
--      the key);
--   2. update the rows by id: unnest of the arrays, one primary-key probe per
--      row, and the gates' bookkeeping as before.
-- plan_cache_mode = force_generic_plan on the function keeps the first plan of
-- each statement for the life of the connection. A claim that finds nothing
-- (an idle relay's, after each delivery of a trickle) stops after the first,
-- unless a rate-limited target's tokens are to be booked. The rows stay locked from the
-- first statement to the second (one transaction), so no other claim, record
-- or cancel can change them in between.
--
-- The signature, the answer and the grants are unchanged. outbox.claim, the
-- claim of relays before 0025 kept for a rollback, is left as it was.

CREATE OR REPLACE FUNCTION outbox.claim_due(p_relay text, p_targets text[], p_rooms integer[], p_limit integer,
                                            p_lease_ms integer)
RETURNS TABLE (id bigint, key text, target text, payload text, attempt integer, ambiguous boolean,
               first_attempt_ms bigint, probe boolean, traceparent text, key_sent boolean)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    rooms    integer[] := p_rooms;
    probing  text[] := '{}';
    metered  text[] := '{}';
    avail    double precision[] := '{}';
    due_ids  bigint[];
    keyed    boolean[];
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

    -- 1. The due rows, oldest first within each target, locked.
    SELECT coalesce(array_agg(c.id), '{}'), coalesce(array_agg(c.keyed), '{}')
      INTO due_ids, keyed
      FROM (SELECT d.id, tg.key_header IS NOT NULL AS keyed
              FROM unnest(p_targets, rooms) AS t(name, room)
              JOIN outbox.targets AS tg ON tg.name = t.name AND tg.enabled -- disabled: rows wait
             CROSS JOIN LATERAL (
                   SELECT i.id
                     FROM outbox.intents i
                    WHERE i.state = 'pending' AND i.target = t.name AND i.next_attempt_at <= now()
                    ORDER BY i.next_attempt_at
                    LIMIT coalesce(t.room, 0)
                      FOR UPDATE SKIP LOCKED) AS d
             LIMIT p_limit) AS c;

    -- Nothing due and no tokens to book: an idle relay's claim ends here.
    IF cardinality(due_ids) = 0 AND cardinality(metered) = 0 THEN
        RETURN;
    END IF;

    -- 2. Leased by their ids; the gates' probes and tokens.
    RETURN QUERY
    WITH claimed AS (
        UPDATE outbox.intents i
           SET state = 'in_flight',
               attempts = i.attempts + 1,
               lease_owner = p_relay,
               lease_expires_at = now() + p_lease_ms * interval '1 millisecond',
               first_attempt_at = coalesce(i.first_attempt_at, now()),
               key_sent = due.keyed,
               updated_at = now()
          FROM unnest(due_ids, keyed) AS due(id, keyed)
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
