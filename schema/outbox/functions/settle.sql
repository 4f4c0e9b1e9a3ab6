CREATE FUNCTION outbox.settle(p_ids bigint[], p_states outbox.intent_state[], p_groups text[], p_keys text[] DEFAULT NULL::text[]) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    moving text[];
    ev     jsonb;
    keys   text;
    k      text;
BEGIN
    IF cardinality(p_ids) IS DISTINCT FROM cardinality(p_states)
       OR cardinality(p_ids) IS DISTINCT FROM cardinality(p_groups) THEN
        RAISE EXCEPTION 'outbox.settle: % ids, % states and % groups: one of each per intent',
                        cardinality(p_ids), cardinality(p_states), cardinality(p_groups)
            USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_states) AS s WHERE s IS NULL OR s NOT IN ('succeeded', 'failed', 'cancelled')) THEN
        RAISE EXCEPTION 'outbox.settle: only succeeded, failed or cancelled is final, got %', p_states
            USING ERRCODE = '22023';
    END IF;

    -- Events for people (outbox_events): a failed intent, from the outcome
    -- that made it failed (the newest recorded row of its history); not when
    -- that row is a person's resolution. Built before the groups move on, so
    -- 'blocks' counts the group as it stood. Only asked when one is failed.
    IF 'failed' = ANY (p_states) THEN
        FOR ev IN
            SELECT outbox.intent_event(i, a.class, a.http_status, a.error)
              FROM unnest(p_ids, p_states) WITH ORDINALITY AS s(id, state, ord)
              JOIN outbox.intents i ON i.id = s.id
              CROSS JOIN LATERAL (SELECT h.class, h.http_status, h.error
                                    FROM outbox.attempts h
                                   WHERE h.intent_id = s.id AND h.recorded
                                   ORDER BY h.id DESC
                                   LIMIT 1) AS a
             WHERE s.state = 'failed' AND a.class <> 'resolved'
             ORDER BY s.ord
        LOOP
            PERFORM pg_notify('outbox_events', ev::text);
            IF ev ? 'blocks' THEN
                PERFORM pg_notify('outbox_events',
                                  jsonb_build_object('event', 'group_blocked', 'group', ev->>'ordering_key',
                                                     'head', ev->>'key', 'blocks', ev->'blocks',
                                                     'at', ev->>'at')::text);
            END IF;
        END LOOP;
    END IF;

    -- Ordered delivery: the next intent of a group is due once this one
    -- succeeded or was cancelled; a failed one keeps the group waiting.
    IF array_remove(p_groups, NULL) <> '{}' THEN
        SELECT array_agg(DISTINCT s.grp) INTO moving
          FROM unnest(p_states, p_groups) AS s(state, grp)
         WHERE s.grp IS NOT NULL AND s.state IN ('succeeded', 'cancelled');
        IF moving IS NOT NULL THEN
            PERFORM outbox.ordering_release(moving);
        END IF;
    END IF;

    -- Waiters (0041): the relays' admin ports hold ?wait= requests and
    -- LISTEN outbox_outcomes; one NOTIFY per call names the keys, a JSON
    -- array, or several when they do not fit in one payload. The keys come
    -- from the caller (0048: record has them from its UPDATE), or, when it
    -- passes NULL, from the rows.
    IF p_keys IS NULL THEN
        p_keys := ARRAY(SELECT i.key FROM outbox.intents i WHERE i.id = ANY (p_ids));
    END IF;
    IF cardinality(p_keys) > 0 THEN
        keys := to_json(p_keys)::text;
        IF octet_length(keys) <= 7002 THEN
            PERFORM pg_notify('outbox_outcomes', keys);
        ELSE
            keys := NULL;
            FOREACH k IN ARRAY p_keys LOOP
                k := to_json(k)::text;
                IF octet_length(keys) + octet_length(k) > 7000 THEN
                    PERFORM pg_notify('outbox_outcomes', '[' || keys || ']');
                    keys := NULL;
                END IF;
                keys := CASE WHEN keys IS NULL THEN k ELSE keys || ',' || k END;
            END LOOP;
            PERFORM pg_notify('outbox_outcomes', '[' || keys || ']');
        END IF;
    END IF;
END
$$;

COMMENT ON FUNCTION outbox.settle(p_ids bigint[], p_states outbox.intent_state[], p_groups text[], p_keys text[]) IS 'What follows an intent becoming final (succeeded, failed, cancelled), called once by each path that makes intents final, with their ids, new states, ordering groups and keys (NULL: read from the rows): the events for people (intent_failed, group_blocked), the release of the groups that may move on, and the NOTIFY outbox_outcomes that wakes waiters (0041).';

REVOKE ALL ON FUNCTION outbox.settle(p_ids bigint[], p_states outbox.intent_state[], p_groups text[], p_keys text[]) FROM PUBLIC;
