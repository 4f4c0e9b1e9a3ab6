CREATE FUNCTION outbox.mcp_task(p_token_hash bytea, p_task_id text) RETURNS outbox.mcp_answer
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    client_name text;
    tk outbox.mcp_tasks;
    a  outbox.mcp_answer;
BEGIN
    SELECT name INTO client_name FROM outbox.mcp_clients WHERE token_hash = p_token_hash;
    IF client_name IS NULL THEN
        RAISE EXCEPTION 'outbox.mcp_task: unknown client' USING ERRCODE = 'OR022';
    END IF;
    SELECT * INTO tk FROM outbox.mcp_tasks
     WHERE task_id = p_task_id AND client = client_name AND (expires_at IS NULL OR expires_at > now());   -- 0036
    IF NOT FOUND THEN
        a.client := client_name;
        a.status := 'not_found';
        a.final := false;
        a.message := 'no such task';
        RETURN a;
    END IF;
    RETURN outbox.mcp_answer_of(client_name, substr(tk.intent_key, length('mcp:' || client_name || ':') + 1),
                                tk.tool, false);
END
$$;

REVOKE ALL ON FUNCTION outbox.mcp_task(p_token_hash bytea, p_task_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_task(p_token_hash bytea, p_task_id text) TO outbox_mcp;
