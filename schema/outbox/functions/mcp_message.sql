CREATE FUNCTION outbox.mcp_message(p_status text, p_outcome_message text, p_person_reason text) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE p_status
        WHEN 'succeeded' THEN 'succeeded: the target acted; this is its saved response'
        WHEN 'failed' THEN 'failed: the target did not act and will not: ' || coalesce(p_outcome_message, 'no reason recorded')
        WHEN 'cancelled' THEN 'cancelled: the target did not act, and nothing more will be sent: '
                              || coalesce(p_outcome_message, 'no reason recorded')
        WHEN 'reconciling' THEN
            CASE WHEN p_person_reason IS NOT NULL
                 THEN 'outcome unknown: ' || p_person_reason || ': do not retry with a new key; calling again with the same key is safe'
                 ELSE 'outcome unknown, reconciling: do not retry with a new key; calling again with the same key is safe' END
        WHEN 'delivering' THEN 'not yet confirmed: being delivered; calling again with the same key is safe'
        WHEN 'pending' THEN 'not yet confirmed: ' || coalesce(p_outcome_message, 'waiting for delivery')
                            || '; calling again with the same key is safe'
        WHEN 'awaiting_approval' THEN 'not yet confirmed: waiting for a person to approve it; calling again with the same key is safe'
        ELSE p_status END
$$;

REVOKE ALL ON FUNCTION outbox.mcp_message(p_status text, p_outcome_message text, p_person_reason text) FROM PUBLIC;
