-- 0050: the next lease to expire is asked at most twice a second per
-- session (issue 40, item 6: a snapshot held for half an hour).
--
-- Under a held snapshot, the idle relay's question (outbox.next_due_ms)
-- asked, after every claim that found nothing (under a trickle: about once
-- per intent), min(lease_expires_at) of the in-flight rows from 2 s before
-- the take-over floor (0047). intents_in_flight is ordered by
-- lease_expires_at, and every row delivered within the last lease period
-- left the entry of its in-flight version there with an expiry still to
-- come: dead to every snapshot, yet neither vacuum nor a scan may remove or
-- mark it while the snapshot lives (both need its xmax behind the xmin
-- horizon). Each question stepped over rate x lease of them, a heap visit
-- each: 400 intents/s under a 30 s lease, about 13,000 per question (4,000
-- on average by the fifteenth minute of a 30-minute hold, the largest count
-- of index tuples read in that bench). Without a hold the first scan marks
-- them dead and the next skip them.
--
-- What the answer may lag by: a lease term is set only when a lease is
-- taken or renewed, to the taking transaction's now() plus its lease, and
-- a lease is at least 1 s (--lease-ms, whose least value is 1000). So the
-- minimum read at a moment r holds for every lease then visible; a lease
-- taken after r expires no sooner than r + 1 s; a renewal only moves one
-- later (a stale minimum then wakes the relay early, to ask again). A
-- session that says so (the custom setting outbox.lease_reuse = 'on',
-- which the relay sets in the statement of its question: relay/sql.h,
-- STMT_NEXT_DUE) keeps the minimum it read, and its time, in the custom
-- setting outbox.lease_min ({"m": minimum or null, "r": now() of the read};
-- in the session, as 0047's floors, not in a table whose rows a held
-- snapshot would keep), and reads it again when any of these holds:
--   * it is 500 ms old (lease_kept): before any lease taken since could
--     expire, provided the relay asks again in between; it asks after
--     every empty claim and at every poll, so at worst a lease taken just
--     after a read under the least lease (1 s) is taken over at the next
--     poll, as any expiry that no answer announced;
--   * the minimum it holds is now() or earlier: an expired lease waits for
--     its take-over, and every question until then reads again (as before
--     this migration: the relay then polls at once);
--   * it was read in this transaction (now() = r: the tests' calls in one
--     transaction see their own changes; the relay makes one call per
--     transaction);
--   * it was never read in this session.
-- A lease whose transaction began before a read and committed after it
-- (a claim of more than half a second) is seen at the next read.
--
-- "Nothing in flight" (a NULL minimum) is kept the same way: a relay waits
-- at its poll interval either way. Only --exit-when-idle acts on the NULL,
-- and exits on it: that relay does not say outbox.lease_reuse (relay/sql.h,
-- STMT_NEXT_DUE_EXACT), so it exits as before only once no row is in
-- flight anywhere. Nor does any other caller (operators, tests, an older
-- relay): for them next_due_ms and take_over are exact, as before.
--
-- take_over (at every poll of every relay, 2 s by default) read the same
-- index from 2 s before its floor up to now(): the entries of every row
-- delivered in the 2 to 4 s a lease ago. When the session keeps a minimum
-- that is fresh (as above) and later than now(), no lease visible then has
-- expired, and none taken since can have: take_over takes nothing and
-- reads nothing, and moves its floor to now() as a scan that found nothing
-- would. Its sweep from the start keeps its period (0047): the sweep is
-- never skipped.
--
-- Plans as in 0035 and 0047: next_due_ms's statements are planned once per
-- connection; its question of due rows is unchanged, and the in-flight
-- minimum, its own statement now, runs only when read again. Signatures,
-- answers and grants are unchanged.

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
    lease_from timestamptz := CASE WHEN tf ->> 'f' IS NULL OR (tf ->> 't')::timestamptz = now()
                                   THEN '-infinity'::timestamptz
                                   ELSE (tf ->> 'f')::timestamptz - interval '2 seconds' END;
    reuse  boolean := coalesce(current_setting('outbox.lease_reuse', true) = 'on', false);   -- 0050
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

-- take_over: nothing to read while the session's minimum says no lease has
-- expired (see the top of this migration); otherwise as in 0047.
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
    lm      jsonb := CASE WHEN current_setting('outbox.lease_reuse', true) = 'on'   -- 0050
                          THEN coalesce(nullif(current_setting('outbox.lease_min', true), ''), '{}')
                          ELSE '{}' END::jsonb;
    began   timestamptz := clock_timestamp();
    got     integer;
BEGIN
    -- 0050: the session keeps the next lease to expire (it said
    -- outbox.lease_reuse), read within 500 ms, in an earlier transaction,
    -- from no later than from_at (the floor only moves forward), and it
    -- lies after now() (or there was none): nothing to take over.
    IF from_at > '-infinity' AND (lm ->> 'r')::timestamptz < now()
       AND now() < (lm ->> 'r')::timestamptz + interval '500 milliseconds'
       AND coalesce((lm ->> 'm')::timestamptz > now(), true) THEN
        PERFORM set_config('outbox.take_over_floor', (tf || jsonb_build_object('f', now(), 't', now()))::text, false);
        RETURN;
    END IF;
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

COMMENT ON FUNCTION outbox.next_due_ms(p_targets text[]) IS 'Milliseconds until something this relay can take is due (a row of the given targets past its gate, a lease to take over, an unknown row to reconcile); 0 now, NULL nothing. With the setting outbox.lease_reuse = on (the relay), the next lease to expire is read at most every 500 ms per session (0050).';
