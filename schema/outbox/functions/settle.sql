CREATE FUNCTION outbox.settle(p_ids bigint[], p_states outbox.intent_state[], p_groups text[]) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    moving text[];
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

    -- Ordered delivery: the next intent of a group is due once this one
    -- succeeded or was cancelled; a failed one keeps the group waiting.
    SELECT array_agg(DISTINCT s.grp) INTO moving
      FROM unnest(p_states, p_groups) AS s(state, grp)
     WHERE s.grp IS NOT NULL AND s.state IN ('succeeded', 'cancelled');
    IF moving IS NOT NULL THEN
        PERFORM outbox.ordering_release(moving);
    END IF;
END
$$;

COMMENT ON FUNCTION outbox.settle(p_ids bigint[], p_states outbox.intent_state[], p_groups text[]) IS 'What follows an intent becoming final (succeeded, failed, cancelled), called once by each path that makes intents final, with their ids, new states and ordering groups: today, the release of the groups that may move on.';

REVOKE ALL ON FUNCTION outbox.settle(p_ids bigint[], p_states outbox.intent_state[], p_groups text[]) FROM PUBLIC;
