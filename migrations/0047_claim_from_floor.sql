-- 0047: the claim starts its scan where its last claim ended (issue 40, item 6:
-- a snapshot held for half an hour).
--
-- A forgotten BEGIN, a long report or a stuck migration holds back the xmin
-- horizon. Every row a claim leases leaves the index entry of its pending
-- version in intents_due (target, next_attempt_at); while the snapshot lives
-- that entry can be neither vacuumed nor marked dead by the scans that pass
-- it (kill_prior_tuple needs the version dead to every snapshot). The claim
-- read intents_due from the oldest next_attempt_at of its target, so it
-- stepped over every row leased since the hold began, each a heap visit:
-- 5,000 such entries cost a claim of one row 803 buffers (34 ms on a loaded
-- 2-core machine); 400 enqueues/s make 720,000 of them in 30 minutes.
--
-- Now each claim starts the scan of a target at a floor: the next_attempt_at
-- up to which this session (the relay's connection) already took every row
-- it could see. The entries behind the floor are not read again, so a claim
-- costs what the rows after the floor cost, however long the hold.
--
-- What can be pending and due behind the floor (the rows a plain keyset scan
-- would lose), and what brings them back:
--   * a row whose transaction committed after the floor passed its
--     next_attempt_at (an enqueue's is its transaction's start; so is a
--     retry's, a release's, a redrive's, an ordering turn's): at most every
--     50 ms (floor_recheck) the scan starts floor_window (2 s) before the
--     floor, so a transaction up to 2 s long is claimed as promptly as before;
--   * anything else (a longer transaction, a row another claim had locked
--     and gave back, a row that another session's floor passed): a sweep from
--     the start of the target's range, as the claim always did. Its period
--     follows its cost: at least 1 s, and at least 100 times what the last
--     sweep took, so sweeps take at most about 1 % of the claim's time. With
--     no hold a sweep is cheap (the entries of leased rows are dead to every
--     snapshot and the first scan marks them so): 1 s. After 30 minutes of a
--     hold at 400/s one sweep reads 720,000 entries; it then runs once every
--     couple of minutes instead of at every claim.
-- Every due row is still claimed: within one sweep period at worst, and
-- every row the scan reaches is taken in next_attempt_at order as before.
-- The floor is a position in the scan, not a state of any row: ordering
-- (held rows wait at next_attempt_at 'infinity'), leases, take-over,
-- reconciliation and the gates are untouched.
--
-- Where the floor lives: in the session, as the custom setting
-- outbox.claim_floor (set_config, not local), a small JSON object keyed by
-- target. Not in a table: a row updated at every claim is itself a chain of
-- versions that a held snapshot keeps (the problem this migration solves).
-- A new connection has none, and its first claim of a target sweeps. A claim
-- that fails rolls the setting back with its transaction. A second claim in
-- one transaction (the relay makes one per transaction; tests make several)
-- sweeps: now() has not moved, and rows that transaction made due may lie
-- behind the floor its first claim set.
--
-- How the floor moves (only forward): after a scan of a target with room,
-- to its last row claimed when the scan filled the room (rows after it may
-- be due), or to now() when it found fewer (nothing visible was left up to
-- now(): rows that become due later have a later next_attempt_at, or are
-- late and come back as above); in both cases never past now() minus
-- floor_lag (250 ms). Without that lag, any enqueue whose transaction began
-- before a claim and committed after it sat behind the floor until the next
-- re-read of the window: under a steady stream of short transactions (the
-- front door's calls) that is most of them, and each waited up to 50 ms or
-- the next sweep. The lag costs a held snapshot the entries of 250 ms of
-- claimed rows per claim, a bound that does not grow with the hold. A target
-- without room (gated, paused, disabled) keeps its floor.
--
-- Locks and plans as in 0034: the two statements, each planned once per
-- connection (plan_cache_mode = force_generic_plan); the scan's index
-- condition gains a lower bound (next_attempt_at >= the floor), same index.
-- The signature, the answer and the grants are unchanged.

CREATE OR REPLACE FUNCTION outbox.claim_due(p_relay text, p_targets text[], p_rooms integer[], p_limit integer,
                                            p_lease_ms integer)
RETURNS TABLE (id bigint, key text, target text, payload text, attempt integer, ambiguous boolean,
               first_attempt_ms bigint, probe boolean, traceparent text, key_sent boolean)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
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
    floors   jsonb := coalesce(nullif(current_setting('outbox.claim_floor', true), ''), '{}')::jsonb;
    f        jsonb;
    g        record;
    a        double precision;
    n        integer;
    got      integer;
    last_at  timestamptz;
    began    timestamptz;
    took     interval;
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
        IF f IS NULL OR (f ->> 's')::timestamptz + (f ->> 'g')::interval <= now()
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
                      AND i.next_attempt_at >= t.from_at AND i.next_attempt_at <= now()
                    ORDER BY i.next_attempt_at
                    LIMIT coalesce(t.room, 0)
                      FOR UPDATE SKIP LOCKED) AS d
             LIMIT p_limit) AS c;
    took := clock_timestamp() - began;

    -- The floors move forward (see the top of migration 0047).
    FOR n IN 1 .. coalesce(cardinality(p_targets), 0) LOOP
        CONTINUE WHEN coalesce(rooms[n], 0) <= 0;
        f := coalesce(floors -> p_targets[n],
                      jsonb_build_object('f', '-infinity'::timestamptz, 's', now(), 'g', sweep_least::text,
                                         'w', now()));
        SELECT count(*), max(u.at) INTO got, last_at
          FROM unnest(due_tgts, due_at) AS u(target, at) WHERE u.target = p_targets[n];
        IF got < rooms[n] AND cardinality(due_ids) < p_limit THEN
            last_at := now();   -- nothing visible was left up to now()
        END IF;
        -- Never past now() - floor_lag: an enqueue that began before this
        -- claim and commits after it has a next_attempt_at behind now(),
        -- and its NOTIFY's claim must still reach it.
        -- (least() would skip a NULL: a target the scan did not reach,
        -- its room cut by p_limit, keeps its floor)
        IF last_at IS NOT NULL THEN
            last_at := least(last_at, now() - floor_lag);
        END IF;
        IF last_at IS NOT NULL AND last_at > (f ->> 'f')::timestamptz THEN
            f := jsonb_set(f, '{f}', to_jsonb(last_at));
        END IF;
        IF swept[n] THEN
            f := f || jsonb_build_object('s', now(), 'g',
                                         least(sweep_most, greatest(sweep_least, took * 100))::text);
        END IF;
        IF froms[n] < (f ->> 'f')::timestamptz THEN
            f := jsonb_set(f, '{w}', to_jsonb(now()));
        END IF;
        floors := jsonb_set(floors, ARRAY[p_targets[n]], f || jsonb_build_object('t', now()));
    END LOOP;
    PERFORM set_config('outbox.claim_floor', floors::text, false);

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

COMMENT ON FUNCTION outbox.claim_due(p_relay text, p_targets text[], p_rooms integer[], p_limit integer, p_lease_ms integer) IS 'Claim due rows of the given targets within their rooms and gates (circuit, pause, rate), with leases; stamps and returns whether each request carries the key (key_sent). Scans each target from the session''s floor (setting outbox.claim_floor, 0047), with a periodic sweep from the start.';

-- The idle relay's question, outbox.next_due_ms, read intents_due from the
-- start of each target's range too (min(next_attempt_at) of its pending
-- rows): under the hold it stepped over the same entries after every claim
-- that found nothing. It now looks from floor_window before the session's
-- floor (from the start without one, or after a claim of this transaction),
-- and its in-flight half from 2 s before the take-over floor (below). A row
-- behind them is found by a sweep: the relay claims and takes over at every
-- poll (--poll-interval-ms) whatever next_due_ms answers.
CREATE OR REPLACE FUNCTION outbox.next_due_ms(p_targets text[]) RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    due_ms bigint;
    name   text;
    floors jsonb := coalesce(nullif(current_setting('outbox.claim_floor', true), ''), '{}')::jsonb;
    f      jsonb;
    froms  timestamptz[] := '{}';
    n      integer;
    tf     jsonb := coalesce(nullif(current_setting('outbox.take_over_floor', true), ''), '{}')::jsonb;
    lease_from timestamptz := CASE WHEN tf ->> 'f' IS NULL OR (tf ->> 't')::timestamptz = now()
                                   THEN '-infinity'::timestamptz
                                   ELSE (tf ->> 'f')::timestamptz - interval '2 seconds' END;
BEGIN
    FOR n IN 1 .. coalesce(cardinality(p_targets), 0) LOOP   -- 0047
        f := floors -> p_targets[n];
        IF f IS NULL OR (f ->> 't')::timestamptz = now() THEN
            froms := froms || '-infinity'::timestamptz;
        ELSE
            froms := froms || ((f ->> 'f')::timestamptz - interval '2 seconds');
        END IF;
    END LOOP;
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
                (SELECT min(lease_expires_at) FROM outbox.intents
                  WHERE state = 'in_flight' AND lease_expires_at >= lease_from),   -- 0047
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

-- Take-over and the in-flight half of next_due_ms read intents_in_flight
-- (lease_expires_at) from its start: under the hold, the entry of every row
-- that left in_flight since it began (its lease ran out meanwhile, or soon
-- will) lies before the leases to take over. take_over runs at each poll of
-- every relay (2 s by default). It now starts at the session's take-over
-- floor (setting outbox.take_over_floor) less 2 s: the now() of its last
-- run that took fewer rows than its limit (every lease visible as expired
-- then was taken, but the caller's own). Leases are set to now() plus a
-- lease of seconds, so one that commits behind the floor is rare; the sweep
-- from the start, on the same terms as the claim's (at least every second,
-- at least 100 times what the last took), finds it and the caller's own
-- rows once it no longer holds them.
CREATE OR REPLACE FUNCTION outbox.take_over(p_relay text, p_limit integer, p_lease_ms integer, p_held bigint[])
RETURNS TABLE (id bigint, key text, target text, attempt integer, ambiguous boolean, first_attempt_ms bigint,
               previous_owner text, key_sent boolean)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tf      jsonb := coalesce(nullif(current_setting('outbox.take_over_floor', true), ''), '{}')::jsonb;
    from_at timestamptz := CASE WHEN tf ->> 'f' IS NULL OR (tf ->> 's')::timestamptz + (tf ->> 'g')::interval <= now()
                                  OR (tf ->> 't')::timestamptz = now()
                                THEN '-infinity'::timestamptz   -- a sweep
                                ELSE (tf ->> 'f')::timestamptz - interval '2 seconds' END;
    began   timestamptz := clock_timestamp();
    got     integer;
BEGIN
    RETURN QUERY
    WITH expired AS (
        SELECT i.id, i.lease_owner
          FROM outbox.intents i
         WHERE i.state = 'in_flight' AND i.lease_expires_at < now()
           AND i.lease_expires_at >= from_at   -- 0047
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
    GET DIAGNOSTICS got = ROW_COUNT;
    IF from_at = '-infinity' THEN
        tf := tf || jsonb_build_object('s', now(), 'g', least(interval '10 minutes',
                    greatest(interval '1 second', (clock_timestamp() - began) * 100))::text);
    END IF;
    IF got < p_limit THEN
        tf := tf || jsonb_build_object('f', now());
    END IF;
    PERFORM set_config('outbox.take_over_floor', (tf || jsonb_build_object('t', now()))::text, false);
END
$$;
