CREATE FUNCTION outbox.take_over(p_relay text, p_limit integer, p_lease_ms integer, p_held bigint[]) RETURNS TABLE(id bigint, key text, target text, attempt integer, ambiguous boolean, first_attempt_ms bigint, previous_owner text, key_sent boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
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

COMMENT ON FUNCTION outbox.take_over(p_relay text, p_limit integer, p_lease_ms integer, p_held bigint[]) IS 'Take over in-flight rows whose lease expired (never the caller''s own, p_held), with the key stamp of the request that may have executed.';

REVOKE ALL ON FUNCTION outbox.take_over(p_relay text, p_limit integer, p_lease_ms integer, p_held bigint[]) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.take_over(p_relay text, p_limit integer, p_lease_ms integer, p_held bigint[]) TO outbox_relay;
