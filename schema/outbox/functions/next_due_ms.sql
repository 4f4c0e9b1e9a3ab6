CREATE FUNCTION outbox.next_due_ms(p_targets text[]) RETURNS bigint
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
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

COMMENT ON FUNCTION outbox.next_due_ms(p_targets text[]) IS 'Milliseconds until something this relay can take is due (a row of the given targets past its gate, a lease to take over, an unknown row to reconcile); 0 now, NULL nothing. With the setting outbox.lease_reuse = on (the relay), the next lease to expire is read at most every 500 ms per session (0050).';

REVOKE ALL ON FUNCTION outbox.next_due_ms(p_targets text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.next_due_ms(p_targets text[]) TO outbox_relay;
