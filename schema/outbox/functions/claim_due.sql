CREATE FUNCTION outbox.claim_due(p_relay text, p_targets text[], p_rooms integer[], p_limit integer, p_lease_ms integer) RETURNS TABLE(id bigint, key text, target text, payload text, attempt integer, ambiguous boolean, first_attempt_ms bigint, probe boolean, traceparent text, key_sent boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    p_scan   text := coalesce(nullif(current_setting('outbox.claim_scan', true), ''), 'auto');   -- 0052
    floor_window  constant interval := interval '2 seconds';
    floor_lag     constant interval := interval '250 milliseconds';
    floor_recheck constant interval := interval '50 milliseconds';
    sweep_least   constant interval := interval '1 second';
    sweep_most    constant interval := interval '10 minutes';
    rooms    integer[] := p_rooms;
    probing  text[] := '{}';
    metered  text[] := '{}';
    avail    double precision[] := '{}';
    due_ids  bigint[];
    keyed    boolean[];
    due_tgts text[];
    due_at   timestamptz[];
    froms    timestamptz[] := '{}';
    swept    boolean[] := '{}';
    gated    integer[] := '{}';   -- 0052: the targets whose gate this call holds
    -- 0052: a sweep leaves the last floor_window to the floor claims (their
    -- re-reads look that far back): it takes only what they cannot reach,
    -- and does not race them for every fresh row.
    upto     timestamptz := CASE WHEN p_scan = 'sweep' THEN now() - floor_window ELSE now() END;
    floors   jsonb := CASE WHEN p_scan = 'sweep' THEN '{}'::jsonb
                       ELSE coalesce(nullif(current_setting('outbox.claim_floor', true), ''), '{}')::jsonb END;
    f        jsonb;
    g        record;
    a        double precision;
    n        integer;
    got      integer;
    last_at  timestamptz;
    old_at   timestamptz;
    began    timestamptz;
    took     interval;
BEGIN
    IF p_scan IS NULL OR p_scan NOT IN ('auto', 'floor', 'sweep') THEN
        RAISE EXCEPTION 'claim_due: the scan must be ''auto'', ''floor'' or ''sweep'', not %',
              quote_literal(p_scan)
              USING ERRCODE = '22023', HINT = 'It is the setting outbox.claim_scan, or the sixth argument.';
    END IF;

    -- 0052: a sweep leaves the gated targets (an open circuit, a pause, a
    -- rate limit) to the floor claims, which sweep them in line now and then
    -- as before: a sweep would hold their gate (the probe, the token bucket)
    -- for its whole scan, and their floor claims would wait for it. Read
    -- without a lock: a gate that closes meanwhile is the floor claims' too.
    IF p_scan = 'sweep' THEN
        FOR n IN
            SELECT u.ord
              FROM unnest(p_targets) WITH ORDINALITY AS u(name, ord)
              JOIN outbox.target_state s ON s.target = u.name
              JOIN outbox.targets t ON t.name = u.name
             WHERE s.circuit <> 'closed' OR s.paused_until > now() OR t.rate_limit_per_s IS NOT NULL
        LOOP
            rooms[n] := 0;
        END LOOP;
    END IF;

    -- Gated targets, locked in name order (two relays never lock in opposite
    -- orders): their rooms shrink to what the gate allows. (0052: a target
    -- without room is not locked: a sweep locks none.)
    FOR g IN
        SELECT u.ord, s.target, s.circuit, s.probe_at, s.probe_expires_at, s.paused_until,
               s.tokens, s.tokens_at, t.rate_limit_per_s AS rate
          FROM unnest(p_targets) WITH ORDINALITY AS u(name, ord)
          JOIN outbox.target_state s ON s.target = u.name
          JOIN outbox.targets t ON t.name = u.name
         WHERE (s.circuit <> 'closed' OR s.paused_until > now() OR t.rate_limit_per_s IS NOT NULL)
           AND coalesce(rooms[u.ord], 0) > 0
         ORDER BY u.name
           FOR UPDATE OF s
    LOOP
        gated := gated || g.ord::integer;
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

    -- 0047: a disabled (or unknown) target is not scanned; no room keeps its floor.
    FOR n IN
        SELECT u.ord FROM unnest(p_targets) WITH ORDINALITY AS u(name, ord)
          LEFT JOIN outbox.targets t ON t.name = u.name
         WHERE t.enabled IS NOT TRUE
    LOOP
        rooms[n] := 0;
    END LOOP;

    -- 0047: where each target's scan starts. f: the floor; s: when the last
    -- sweep began; g: the sweep period; w: when the scan last started
    -- floor_window before the floor; t: the now() of the claim that wrote
    -- them (a later claim in the same transaction, which the relay never
    -- makes, sees rows that transaction made due behind the floor: it sweeps).
    FOR n IN 1 .. coalesce(cardinality(p_targets), 0) LOOP
        f := floors -> p_targets[n];
        -- 0052: a sweep always starts at the start; a floor claim sweeps by
        -- the period only a gated target (the sweep connection does the rest).
        IF p_scan = 'sweep' OR f IS NULL
           OR ((p_scan = 'auto' OR n = ANY (gated))
               AND (f ->> 's')::timestamptz + (f ->> 'g')::interval <= now())
           OR (f ->> 't')::timestamptz = now() THEN   -- an earlier claim of this transaction
            froms := froms || '-infinity'::timestamptz;
            swept := swept || true;
        ELSIF (f ->> 'w')::timestamptz + floor_recheck <= now() THEN
            froms := froms || ((f ->> 'f')::timestamptz - floor_window);
            swept := swept || false;
        ELSE
            froms := froms || (f ->> 'f')::timestamptz;
            swept := swept || false;
        END IF;
    END LOOP;

    -- 1. The due rows, oldest first within each target from its floor, locked.
    began := clock_timestamp();
    SELECT coalesce(array_agg(c.id), '{}'), coalesce(array_agg(c.keyed), '{}'),
           coalesce(array_agg(c.target), '{}'), coalesce(array_agg(c.next_attempt_at), '{}')
      INTO due_ids, keyed, due_tgts, due_at
      FROM (SELECT d.id, tg.key_header IS NOT NULL AS keyed, t.name AS target, d.next_attempt_at
              FROM unnest(p_targets, rooms, froms) AS t(name, room, from_at)
              JOIN outbox.targets AS tg ON tg.name = t.name AND tg.enabled -- disabled: rows wait
             CROSS JOIN LATERAL (
                   SELECT i.id, i.next_attempt_at
                     FROM outbox.intents i
                    WHERE i.state = 'pending' AND i.target = t.name
                      AND i.next_attempt_at >= t.from_at AND i.next_attempt_at <= upto
                    ORDER BY i.next_attempt_at
                    LIMIT coalesce(t.room, 0)
                      FOR UPDATE SKIP LOCKED) AS d
             LIMIT p_limit) AS c;
    took := clock_timestamp() - began;

    -- The floors (see the tops of migrations 0047 and 0051); a sweep keeps
    -- none (0052).
    FOR n IN 1 .. coalesce(cardinality(p_targets), 0) LOOP
        EXIT WHEN p_scan = 'sweep';
        CONTINUE WHEN coalesce(rooms[n], 0) <= 0;
        f := coalesce(floors -> p_targets[n],
                      jsonb_build_object('f', '-infinity'::timestamptz, 's', now(), 'g', sweep_least::text,
                                         'w', now()));
        old_at := (f ->> 'f')::timestamptz;
        SELECT count(*), max(u.at) INTO got, last_at
          FROM unnest(due_tgts, due_at) AS u(target, at) WHERE u.target = p_targets[n];
        IF got < rooms[n] AND cardinality(due_ids) < p_limit THEN
            -- Nothing visible was left up to now(): forward only, and never
            -- past now() - floor_lag (an enqueue that began before this
            -- claim and commits after it has a next_attempt_at behind now(),
            -- and its NOTIFY's claim must still reach it).
            f := jsonb_set(f, '{f}', to_jsonb(greatest(old_at, now() - floor_lag)));
        ELSIF got >= rooms[n] OR due_tgts[cardinality(due_tgts)] = p_targets[n] THEN
            -- 0051: this target's scan stopped at its last row (its room
            -- full, or p_limit cut it there: the rows come target by target
            -- and its row is the last): it saw nothing after that row, so
            -- the floor goes there, back if the scan began behind the floor
            -- (a re-read of the window, a sweep) and found a backlog there.
            f := jsonb_set(f, '{f}', to_jsonb(least(last_at, now() - floor_lag)));
        ELSIF last_at IS NOT NULL THEN
            -- p_limit cut the call at a later target, after this one ran out
            -- of rows: forward only, to its last row, as 0047 did.
            f := jsonb_set(f, '{f}', to_jsonb(greatest(old_at, least(last_at, now() - floor_lag))));
        END IF;
        -- (a target the scan did not reach, p_limit spent before it, keeps its floor)
        IF swept[n] THEN
            f := f || jsonb_build_object('s', now(), 'g',
                                         least(sweep_most, greatest(sweep_least, took * 100))::text);
        END IF;
        -- 0051: w says when the scan last began floor_window before the
        -- floor, so only such a scan (or a sweep) sets it. 0047 set it
        -- whenever the floor moved past where the scan began, so a relay
        -- claiming more often than every 50 ms, its floor moving at each
        -- claim, never re-read the window.
        IF froms[n] < old_at THEN
            f := jsonb_set(f, '{w}', to_jsonb(now()));
        END IF;
        floors := jsonb_set(floors, ARRAY[p_targets[n]], f || jsonb_build_object('t', now()));
    END LOOP;
    IF p_scan <> 'sweep' THEN
        PERFORM set_config('outbox.claim_floor', floors::text, false);
    END IF;

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

COMMENT ON FUNCTION outbox.claim_due(p_relay text, p_targets text[], p_rooms integer[], p_limit integer, p_lease_ms integer) IS 'Claim due rows of the given targets within their rooms and gates (circuit, pause, rate), with leases; stamps and returns whether each request carries the key (key_sent). The scan is the session''s setting outbox.claim_scan (0052): floor (from the session''s floor, setting outbox.claim_floor: 0047, 0051; gated targets swept in line), sweep (from the start, rows due 2 s ago or more, no floor, no gated target) or auto, the default (the floor, and a periodic sweep).';

CREATE FUNCTION outbox.claim_due(p_relay text, p_targets text[], p_rooms integer[], p_limit integer, p_lease_ms integer, p_scan text) RETURNS TABLE(id bigint, key text, target text, payload text, attempt integer, ambiguous boolean, first_attempt_ms bigint, probe boolean, traceparent text, key_sent boolean)
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    was text := current_setting('outbox.claim_scan', true);
BEGIN
    IF p_scan IS NULL THEN
        RAISE EXCEPTION 'claim_due: the scan must be ''auto'', ''floor'' or ''sweep'', not NULL'
              USING ERRCODE = '22023';
    END IF;
    PERFORM set_config('outbox.claim_scan', p_scan, false);
    RETURN QUERY SELECT * FROM outbox.claim_due(p_relay, p_targets, p_rooms, p_limit, p_lease_ms);
    PERFORM set_config('outbox.claim_scan', coalesce(was, ''), false);
END
$$;

COMMENT ON FUNCTION outbox.claim_due(p_relay text, p_targets text[], p_rooms integer[], p_limit integer, p_lease_ms integer, p_scan text) IS 'outbox.claim_due with the scan as an argument: floor, sweep or auto (0052; setting outbox.claim_scan).';

REVOKE ALL ON FUNCTION outbox.claim_due(p_relay text, p_targets text[], p_rooms integer[], p_limit integer, p_lease_ms integer) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.claim_due(p_relay text, p_targets text[], p_rooms integer[], p_limit integer, p_lease_ms integer) TO outbox_relay;

REVOKE ALL ON FUNCTION outbox.claim_due(p_relay text, p_targets text[], p_rooms integer[], p_limit integer, p_lease_ms integer, p_scan text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.claim_due(p_relay text, p_targets text[], p_rooms integer[], p_limit integer, p_lease_ms integer, p_scan text) TO outbox_relay;
