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
                 THEN 'outcome unknown: needs a person to settle it. The target may have acted, and it cannot be asked '
                      'whether it did, so a person will check and settle this call. Do not repeat the action; tell the '
                      'user it may have happened and that a person is confirming it. You may ask for the outcome of '
                      'this same call later.'
                 ELSE 'outcome unknown, being confirmed: the target may have acted, and it is being asked whether it did. '
                      'Wait, then ask for the outcome of this same call; do not repeat the action; tell the user it is '
                      'being confirmed.' END
        WHEN 'delivering' THEN 'not yet confirmed: being delivered to the target. Wait, then ask for the outcome of '
                               'this same call; do not repeat the action; tell the user it is being confirmed.'
        WHEN 'pending' THEN 'not yet confirmed: ' || coalesce(p_outcome_message, 'waiting for delivery')
                            || '. Wait, then ask for the outcome of this same call; do not repeat the action; tell '
                               'the user it is being confirmed.'
        WHEN 'awaiting_approval' THEN 'not yet confirmed: held until a person approves it'
                                      || coalesce(' (' || p_outcome_message || ')', '')
                                      || '. Wait, then ask for the outcome of this same call; do not repeat the '
                                         'action; tell the user it is waiting for a person''s approval.'
        ELSE p_status END
$$;

REVOKE ALL ON FUNCTION outbox.mcp_message(p_status text, p_outcome_message text, p_person_reason text) FROM PUBLIC;
