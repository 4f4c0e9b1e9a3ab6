-- 0052: the sweep apart from the claims (issue 40).
--
-- 0047 gave the claim a floor per target and a sweep from the start of
-- the index now and then (at most every second, and a hundred times as
-- long as the last sweep took), both made by the same call on the relay's
-- main connection. Under a held snapshot a sweep steps over every index
-- entry the hold keeps: the bench's 30-minute hold at 400 intents a second
-- logged sweeps of 47 ms growing to 135 ms. The claims, lease renewals and
-- NOTIFY-driven claims on that connection queued behind each one, and the
-- p99 from commit to settled followed the sweep's duration (375 ms in the
-- twenty-ninth minute against 5.6 ms before the hold).
--
-- Now the caller says which scan it wants, in the session's setting
-- outbox.claim_scan (or a sixth argument, p_scan, which sets it for the
-- call). A setting, not an argument of the relay's call: a relay of this
-- release serving one database (--db) still runs against an older schema,
-- whose claim_due ignores it (integration 66 runs it at 0031):
--   'floor'  from the session's floor, with no periodic sweep but of a
--            gated target (below; and a first claim of a target in a
--            session, which has no floor yet, still scans from the start):
--            the relay's main connection, whose claims must never wait
--            behind a long scan;
--   'sweep'  from the start of every target, always, up to floor_window
--            (2 s) before now(): what the floor claims' re-reads of that
--            window cannot reach, so that a sweep does not race them for
--            the fresh rows. The session's floors are neither read nor
--            written. Gated targets (an open circuit, a pause, a rate
--            limit) are left out: their gate is a row lock held to the end
--            of the call, so a sweep would make their floor claims wait for
--            its whole scan; their floor claims sweep them in line, as
--            before 0052. The relay's sweep connection (a third one,
--            outbox-relay/sweep, which also takes over expired leases)
--            runs it side by side with the floor claims: both SKIP LOCKED,
--            and the relay splits the rooms between the calls on the wire
--            so that together they never exceed them;
--   'auto'   as 0051: the floor, and a sweep when its period has passed;
--            what a session that does not say gets (an older relay in the
--            rollback window, a DBA's session, the tests of 0047 and 0051);
--            a relay whose sweep connection is down claims so on its main
--            connection.
-- Anything else is refused (22023), naming the three.
--
-- The body is 0051's but for the scan's start (froms) and end (upto), the
-- floors' bookkeeping (a sweep skips it), and the gates: a target without
-- room is not locked, and a sweep locks none (it leaves gated targets out),
-- so that no floor claim waits behind a sweep for a gate either. (A floor
-- claim that sweeps a gated target in line holds its gate through that
-- scan, as every claim did before 0052.) The answer, the five-argument
-- signature and its grants are unchanged; the six-argument form is new,
-- for the relay's role too.

-- The six-argument form: the scan said in an argument (a DBA's session, the
-- tests). It sets outbox.claim_scan for the call and puts the session's
-- back. (Before the five-argument body, which tests/mutants/mutate.py
-- finds as the last definition of claim_due here.)
CREATE FUNCTION outbox.claim_due(p_relay text, p_targets text[], p_rooms integer[], p_limit integer, p_lease_ms integer, p_scan text)
RETURNS TABLE (id bigint, key text, target text, payload text, attempt integer, ambiguous boolean,
               first_attempt_ms bigint, probe boolean, traceparent text, key_sent boolean)
LANGUAGE plpgsql SECURITY INVOKER   -- plpgsql: schema/outbox/load.sql may create it first
SET search_path = pg_catalog, pg_temp
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

COMMENT ON FUNCTION outbox.claim_due(p_relay text, p_targets text[], p_rooms integer[], p_limit integer, p_lease_ms integer, p_scan text) IS
    'outbox.claim_due with the scan as an argument: floor, sweep or auto (0052; setting outbox.claim_scan).';

REVOKE ALL ON FUNCTION outbox.claim_due(p_relay text, p_targets text[], p_rooms integer[], p_limit integer, p_lease_ms integer, p_scan text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox.claim_due(p_relay text, p_targets text[], p_rooms integer[], p_limit integer, p_lease_ms integer, p_scan text) TO outbox_relay;

-- The body: the scan from the session's setting outbox.claim_scan ('auto'
-- when it is not set).
CREATE OR REPLACE FUNCTION outbox.claim_due(p_relay text, p_targets text[], p_rooms integer[], p_limit integer,
                                            p_lease_ms integer)
RETURNS TABLE (id bigint, key text, target text, payload text, attempt integer, ambiguous boolean,
               first_attempt_ms bigint, probe boolean, traceparent text, key_sent boolean)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
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

COMMENT ON FUNCTION outbox.claim_due(p_relay text, p_targets text[], p_rooms integer[], p_limit integer, p_lease_ms integer) IS
    'Claim due rows of the given targets within their rooms and gates (circuit, pause, rate), with leases; stamps and returns whether each request carries the key (key_sent). The scan is the session''s setting outbox.claim_scan (0052): floor (from the session''s floor, setting outbox.claim_floor: 0047, 0051; gated targets swept in line), sweep (from the start, rows due 2 s ago or more, no floor, no gated target) or auto, the default (the floor, and a periodic sweep).';

-- next_due_ms: where the next lease to expire is looked for (0047, 0050).
-- It began 2 s behind the session's take-over floor, and read every
-- in-flight entry when the session had none. The relay's take-overs now go
-- on its sweep connection, so its main session, which asks this, has none:
-- under the bench's held snapshot each read walked every entry the hold
-- kept (50 ms after three minutes, every 500 ms, on the connection whose
-- claims 0052 is about). A session that reuses the lease (the relay's,
-- 0050) now looks 2 s back from now() instead; an expired lease older than
-- that is taken over at the next poll, which does not need this to wake it.
-- The exact question of --exit-when-idle still reads them all. Signature
-- and grants unchanged.

CREATE OR REPLACE FUNCTION outbox.next_due_ms(p_targets text[]) RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    lease_kept constant interval := interval '500 milliseconds';   -- 0050
    due_ms bigint;
    name   text;
    floors jsonb := coalesce(nullif(current_setting('outbox.claim_floor', true), ''), '{}')::jsonb;
    f      jsonb;
    froms  timestamptz[] := '{}';
    n      integer;
    tf     jsonb := coalesce(nullif(current_setting('outbox.take_over_floor', true), ''), '{}')::jsonb;
    reuse  boolean := coalesce(current_setting('outbox.lease_reuse', true) = 'on', false);   -- 0050
    -- 0052: a relay takes over on its sweep connection, so its main session
    -- (which asks this, lease_reuse on) has no take-over floor: it looks 2 s
    -- back, as it did from that floor; an older expired lease is the
    -- take-over's at its next poll anyway. A session without the setting
    -- (--exit-when-idle's exact question) still reads them all.
    lease_from timestamptz := CASE WHEN tf ->> 'f' IS NOT NULL AND (tf ->> 't')::timestamptz <> now()
                                   THEN (tf ->> 'f')::timestamptz - interval '2 seconds'
                                   WHEN reuse THEN now() - interval '2 seconds'
                                   ELSE '-infinity'::timestamptz END;
    lm     jsonb := CASE WHEN reuse THEN coalesce(nullif(current_setting('outbox.lease_min', true), ''), '{}')
                         ELSE '{}' END::jsonb;
    lease_next timestamptz;
BEGIN
    FOR n IN 1 .. coalesce(cardinality(p_targets), 0) LOOP   -- 0047
        f := floors -> p_targets[n];
        IF f IS NULL OR (f ->> 't')::timestamptz = now() THEN
            froms := froms || '-infinity'::timestamptz;
        ELSE
            froms := froms || ((f ->> 'f')::timestamptz - interval '2 seconds');
        END IF;
    END LOOP;
    -- 0050: the next lease to expire, as this session last read it while
    -- that is fresh (see the top of migration 0050).
    IF (lm ->> 'r')::timestamptz < now() AND now() < (lm ->> 'r')::timestamptz + lease_kept
       AND coalesce((lm ->> 'm')::timestamptz > now(), true) THEN
        lease_next := (lm ->> 'm')::timestamptz;
    ELSE
        lease_next := (SELECT min(lease_expires_at) FROM outbox.intents
                        WHERE state = 'in_flight' AND lease_expires_at >= lease_from);   -- 0047
        IF reuse THEN
            PERFORM set_config('outbox.lease_min', jsonb_build_object('m', lease_next, 'r', now())::text, false);
        END IF;
    END IF;
    due_ms := (SELECT CASE WHEN due IS NOT NULL
                   THEN greatest(0, (extract(epoch FROM (due - now())) * 1000)::bigint) END
      FROM (SELECT least(
                (SELECT min(greatest(d.due, outbox.target_gate(s, t.rate_limit_per_s)))
                   FROM unnest(p_targets, froms) AS u(name, from_at)
                   JOIN outbox.targets t ON t.name = u.name AND t.enabled
                   LEFT JOIN outbox.target_state s ON s.target = u.name
                  CROSS JOIN LATERAL (SELECT min(i.next_attempt_at) AS due FROM outbox.intents i
                                       WHERE i.state = 'pending' AND i.target = u.name
                                         AND i.next_attempt_at >= u.from_at   -- 0047
                                         AND i.next_attempt_at < 'infinity') d   -- 0013: held rows are not due
                  WHERE d.due IS NOT NULL),   -- a gate alone (a pause that ended) is nothing due
                lease_next,   -- 0050
                (SELECT min(greatest(i.next_attempt_at, coalesce(i.lease_expires_at, i.next_attempt_at)))
                   FROM outbox.intents i JOIN outbox.targets t ON t.name = i.target
                  WHERE i.state = 'unknown' AND (t.status_url IS NOT NULL OR t.status_tool IS NOT NULL) AND t.enabled)) AS due) AS next);   -- 0037
    IF due_ms = 0 THEN
        RETURN 0;
    END IF;
    -- An enqueue holds the shared form of its target's lock until its
    -- transaction ends (outbox.enqueue); the exclusive form is free only
    -- when none does. Taken at session level so that it is released at once.
    FOR name IN
        SELECT t.name FROM unnest(p_targets) AS u(name)
          JOIN outbox.targets t ON t.name = u.name AND t.enabled
          LEFT JOIN outbox.target_state s ON s.target = u.name
         WHERE s.target IS NULL OR coalesce(outbox.target_gate(s, t.rate_limit_per_s) <= now(), true)
    LOOP
        IF pg_try_advisory_lock(1330774017, hashtext(name)) THEN
            PERFORM pg_advisory_unlock(1330774017, hashtext(name));
        ELSE
            RETURN 0;
        END IF;
    END LOOP;
    RETURN due_ms;
END
$$;
