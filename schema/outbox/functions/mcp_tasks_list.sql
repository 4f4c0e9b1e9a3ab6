CREATE FUNCTION outbox.mcp_tasks_list(p_token_hash bytea, p_after_created timestamp with time zone DEFAULT NULL::timestamp with time zone, p_after_id text DEFAULT NULL::text, p_limit integer DEFAULT 50) RETURNS SETOF outbox.mcp_answer
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    client_name text;
    tk outbox.mcp_tasks;
BEGIN
    SELECT name INTO client_name FROM outbox.mcp_clients WHERE token_hash = p_token_hash;
    IF client_name IS NULL THEN
        RAISE EXCEPTION 'outbox.mcp_tasks_list: unknown client' USING ERRCODE = 'OR022';
    END IF;
    FOR tk IN SELECT * FROM outbox.mcp_tasks
               WHERE client = client_name
                 AND (created_at, task_id) < (coalesce(p_after_created, 'infinity'), coalesce(p_after_id, ''))
                 AND (expires_at IS NULL OR expires_at > now())
               ORDER BY created_at DESC, task_id DESC
               LIMIT greatest(1, least(coalesce(p_limit, 50), 200)) LOOP
        RETURN NEXT outbox.mcp_answer_of(client_name, substr(tk.intent_key, length('mcp:' || client_name || ':') + 1),
                                         tk.tool, false);
    END LOOP;
END
$$;

REVOKE ALL ON FUNCTION outbox.mcp_tasks_list(p_token_hash bytea, p_after_created timestamp with time zone, p_after_id text, p_limit integer) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_tasks_list(p_token_hash bytea, p_after_created timestamp with time zone, p_after_id text, p_limit integer) TO outbox_mcp;
