CREATE FUNCTION outbox.mcp_task_cancel(p_token_hash bytea, p_task_id text) RETURNS outbox.mcp_answer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    client_name text;
    tk outbox.mcp_tasks;
    i  outbox.intents;
BEGIN
    SELECT name INTO client_name FROM outbox.mcp_clients WHERE token_hash = p_token_hash;
    IF client_name IS NULL THEN
        RAISE EXCEPTION 'outbox.mcp_task_cancel: unknown client' USING ERRCODE = 'OR022';
    END IF;
    SELECT * INTO tk FROM outbox.mcp_tasks
     WHERE task_id = p_task_id AND client = client_name AND (expires_at IS NULL OR expires_at > now());   -- 0036
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no such task' USING ERRCODE = 'OR024';
    END IF;
    -- No row lock here: outbox.cancel takes the group's lock before the row's
    -- (ordering_locked_intent), as every settle does; taking the row's first
    -- would deadlock with a relay settling the group's head.
    SELECT * INTO i FROM outbox.intents WHERE key = tk.intent_key;
    IF FOUND AND i.state IN ('pending', 'awaiting_approval') AND i.attempts = 0 AND NOT i.ambiguous THEN
        PERFORM outbox.cancel(tk.intent_key, 'cancelled by MCP client ' || client_name);
    ELSIF FOUND AND i.state NOT IN ('succeeded', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'the call cannot be cancelled: it may already have been sent (%)',
                        outbox.visible_status(i.state, i.ambiguous)
            USING ERRCODE = 'OR007';
    ELSIF FOUND THEN
        RAISE EXCEPTION 'Cannot cancel task: already in terminal status ''%''', i.state USING ERRCODE = 'OR025';
    END IF;
    RETURN outbox.mcp_answer_of(client_name, substr(tk.intent_key, length('mcp:' || client_name || ':') + 1),
                                tk.tool, false);
END
$$;

REVOKE ALL ON FUNCTION outbox.mcp_task_cancel(p_token_hash bytea, p_task_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_task_cancel(p_token_hash bytea, p_task_id text) TO outbox_mcp;
