CREATE TABLE outbox.mcp_tasks (
    task_id text NOT NULL,
    client text NOT NULL,
    intent_key text NOT NULL,
    tool text NOT NULL,
    ttl_ms bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone
);

COMMENT ON TABLE outbox.mcp_tasks IS 'MCP tasks: an unguessable id per (client, intent), durable before it is returned.';

ALTER TABLE ONLY outbox.mcp_tasks
    ADD CONSTRAINT mcp_tasks_client_intent_key_key UNIQUE (client, intent_key);

ALTER TABLE ONLY outbox.mcp_tasks
    ADD CONSTRAINT mcp_tasks_pkey PRIMARY KEY (task_id);

CREATE INDEX mcp_tasks_expiry ON outbox.mcp_tasks USING btree (expires_at) WHERE (expires_at IS NOT NULL);

CREATE INDEX mcp_tasks_list ON outbox.mcp_tasks USING btree (client, created_at, task_id);

GRANT SELECT ON TABLE outbox.mcp_tasks TO outbox_operator;
