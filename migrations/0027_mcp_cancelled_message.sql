-- 0027: what the MCP front door tells a model about a cancelled call.
--
-- 0022 said "cancelled: it was not sent and will not be". Since 0026 an
-- intent is cancelled when the target never acted on it, which includes
-- one that was sent and refused (a 4xx, a 429 waited out): the model must
-- not be told it was never sent. The message now says what holds in every
-- case (the target did not act, and nothing more will be sent), followed
-- by the reason that cancel recorded, which says whether anything was sent.
-- Nothing else of mcp_message changes.
--
-- Locks: none (a function replaced).

-- mcp_message as in 0022, but for 'cancelled'.
-- (No SET clause: a sql function with one cannot be inlined and is planned
-- on every call; this one names nothing outside pg_catalog.)
CREATE OR REPLACE FUNCTION outbox.mcp_message(p_status text, p_outcome_message text, p_person_reason text)
RETURNS text
LANGUAGE sql IMMUTABLE AS $$
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
