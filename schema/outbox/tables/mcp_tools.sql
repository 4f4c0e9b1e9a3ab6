CREATE TABLE outbox.mcp_tools (
    tool text NOT NULL,
    target text NOT NULL,
    title text,
    description text DEFAULT ''::text NOT NULL,
    input_schema jsonb DEFAULT '{"type": "object"}'::jsonb NOT NULL,
    destructive boolean DEFAULT true NOT NULL,
    server_keys boolean DEFAULT false NOT NULL,
    enabled boolean DEFAULT true NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    upstream_tool text,
    CONSTRAINT mcp_tools_tool_check CHECK ((tool ~ '^[A-Za-z0-9_.-]{1,128}$'::text)),
    CONSTRAINT mcp_tools_upstream_tool_check CHECK ((upstream_tool ~ '^[^[:cntrl:]]{1,128}$'::text))
);

COMMENT ON TABLE outbox.mcp_tools IS 'Targets exposed as MCP tools (outbox-relay mcp): name, description, the JSON Schema of the arguments (a documented subset).';

COMMENT ON COLUMN outbox.mcp_tools.upstream_tool IS 'For a tool whose target is an mcp target: the upstream''s name of the tool; NULL = this tool''s name (0037).';

ALTER TABLE ONLY outbox.mcp_tools
    ADD CONSTRAINT mcp_tools_pkey PRIMARY KEY (tool);

GRANT SELECT ON TABLE outbox.mcp_tools TO outbox_operator;
GRANT INSERT,DELETE,UPDATE ON TABLE outbox.mcp_tools TO outbox_admin;
