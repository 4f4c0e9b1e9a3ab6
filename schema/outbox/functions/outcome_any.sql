CREATE FUNCTION outbox.outcome_any(p_key text) RETURNS TABLE(status text, response_status integer, response_body text, attempts integer, last_error text, message text, state outbox.intent_state, target text, updated_at timestamp with time zone)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    stone outbox.tombstones;
BEGIN
    RETURN QUERY
    SELECT outbox.visible_status(i.state, i.ambiguous),
           CASE WHEN i.state IN ('succeeded', 'failed') THEN i.response_status END,
           CASE WHEN i.state IN ('succeeded', 'failed') THEN i.response_body END,
           i.attempts,
           -- A raw transport error is never the outcome: only final states carry a reason.
           CASE WHEN i.state IN ('failed', 'cancelled') THEN i.last_error END,
           CASE outbox.visible_status(i.state, i.ambiguous)
               WHEN 'reconciling' THEN coalesce(CASE WHEN i.state = 'unknown'   -- 0023
                                                     THEN 'outcome unknown: ' || outbox.needs_person(i.id, i.target, i.first_attempt_at) END,
                                                'outcome unknown, reconciling')
               WHEN 'awaiting_approval' THEN 'waiting for approval'
               WHEN 'pending' THEN CASE WHEN i.next_attempt_at = 'infinity' AND i.ordering_key IS NOT NULL
                                        THEN outbox.ordering_waits_for(i.ordering_key, i.id)   -- 0013
                                        ELSE 'waiting for delivery' END
               WHEN 'delivering' THEN 'being delivered'
               WHEN 'succeeded' THEN 'the target acted'
               WHEN 'failed' THEN 'the target did not act and will not'
               WHEN 'cancelled' THEN coalesce('cancelled after ' || (SELECT d.story FROM outbox.delivery_summary(i.id) d),
                                              'cancelled before it was sent')   -- 0026
           END,
           i.state, i.target, i.updated_at
      FROM outbox.intents i
     WHERE i.key = p_key
       AND (starts_with(p_key, 'mcp:') OR outbox.caller_may_see(i.enqueued_by));   -- 0026, 0036
    IF FOUND THEN
        RETURN;
    END IF;
    stone := outbox.tombstone_of(p_key);
    IF stone.intent_id IS NULL
       OR NOT (starts_with(p_key, 'mcp:') OR outbox.caller_may_see(stone.enqueued_by)) THEN   -- 0026, 0036
        RETURN;
    END IF;
    status := outbox.visible_status(stone.state, false);
    response_status := CASE WHEN stone.state IN ('succeeded', 'failed') THEN stone.response_status END;
    response_body := NULL;
    attempts := NULL;
    last_error := NULL;
    message := format('%s; its details were pruned at %s (the key is remembered until %s)',
                      CASE stone.state
                          WHEN 'succeeded' THEN 'the target acted'
                          WHEN 'failed' THEN 'the target did not act and will not'
                          ELSE 'cancelled (the target did not act)' END,   -- 0026: whether it was sent is not kept
                      outbox.utc_text(stone.pruned_at), outbox.utc_text(stone.forget_at));
    state := stone.state;
    target := stone.target;
    updated_at := stone.settled_at;
    RETURN NEXT;
END
$$;

COMMENT ON FUNCTION outbox.outcome_any(p_key text) IS 'outbox.outcome without the reservation of mcp: keys, for the front door''s functions only (0036); executable by no role.';

REVOKE ALL ON FUNCTION outbox.outcome_any(p_key text) FROM PUBLIC;
