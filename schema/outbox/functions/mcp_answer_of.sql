CREATE FUNCTION outbox.mcp_answer_of(p_client text, p_key text, p_tool text, p_inserted boolean, p_task boolean DEFAULT true) RETURNS outbox.mcp_answer
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    a    outbox.mcp_answer;
    i    outbox.intents;
    o    record;
    tk   outbox.mcp_tasks;
    note text;
    person text;   -- why only a person can settle it (outbox.needs_person, 0023), or NULL
BEGIN
    a.client := p_client;
    a.key := p_key;
    a.intent_key := 'mcp:' || p_client || ':' || p_key;
    a.tool := p_tool;
    a.inserted := p_inserted;
    IF p_task THEN
        SELECT * INTO tk FROM outbox.mcp_tasks
         WHERE client = p_client AND intent_key = a.intent_key AND (expires_at IS NULL OR expires_at > now());
        IF FOUND THEN
            a.task_id := tk.task_id;
            a.task_created_at := tk.created_at;
            a.task_ttl_ms := tk.ttl_ms;
            a.tool := coalesce(a.tool, tk.tool);
        END IF;
    END IF;
    SELECT * INTO i FROM outbox.intents WHERE key = a.intent_key;
    IF FOUND AND NOT (i.state = 'pending' AND i.next_attempt_at = 'infinity' AND i.ordering_key IS NOT NULL) THEN
        a.status := outbox.visible_status(i.state, i.ambiguous);
        a.state := i.state;
        a.target := i.target;
        a.attempts := i.attempts;
        a.updated_at := i.updated_at;
        IF i.state IN ('succeeded', 'failed') THEN
            a.response_status := i.response_status;
            a.response_body := i.response_body;
        END IF;
        IF i.state IN ('failed', 'cancelled') THEN
            note := i.last_error;
        ELSIF i.state = 'awaiting_approval' THEN
            note := outbox.mcp_held_by(i.target, i.payload);
        ELSIF i.state = 'pending' AND i.attempts = 0 AND NOT i.ambiguous AND NOT outbox.relay_alive() THEN
            note := 'no relay has claimed it yet: none is running';
        END IF;
    ELSE
        SELECT * INTO o FROM outbox.outcome_any(a.intent_key);
        IF NOT FOUND THEN
            a.status := 'not_found';
            a.final := false;
            a.message := 'no call with this key';
            a.updated_at := a.task_created_at;
            RETURN a;
        END IF;
        a.status := o.status;
        a.state := o.state;
        a.target := o.target;
        a.response_status := o.response_status;
        a.response_body := o.response_body;
        a.attempts := o.attempts;
        a.updated_at := o.updated_at;
        note := coalesce(o.last_error, o.message);
    END IF;
    a.final := a.status IN ('succeeded', 'failed', 'cancelled');
    IF a.state = 'unknown' THEN   -- the same reason as outcome and stuck give
        person := outbox.needs_person(i.id, a.target, i.first_attempt_at);
    END IF;
    a.message := outbox.mcp_message(a.status, note, person);
    IF a.task_id IS NOT NULL THEN
        a.updated_at := greatest(a.updated_at, a.task_created_at);   -- a task made after its intent's last change
    END IF;
    RETURN a;
END
$$;

REVOKE ALL ON FUNCTION outbox.mcp_answer_of(p_client text, p_key text, p_tool text, p_inserted boolean, p_task boolean) FROM PUBLIC;
