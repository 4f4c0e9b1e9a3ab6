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
    key_source text DEFAULT 'meta'::text NOT NULL,
    argument_window interval DEFAULT '00:10:00'::interval NOT NULL,
    passthrough boolean DEFAULT false NOT NULL,
    CONSTRAINT mcp_tools_argument_window_check CHECK (((argument_window > '00:00:00'::interval) AND (argument_window <= '7 days'::interval))),
    CONSTRAINT mcp_tools_key_source_check CHECK ((key_source = ANY (ARRAY['meta'::text, 'arguments'::text, 'minted'::text]))),
    CONSTRAINT mcp_tools_passthrough_read_only CHECK (((NOT passthrough) OR (NOT destructive))),
    CONSTRAINT mcp_tools_tool_check CHECK ((tool ~ '^[A-Za-z0-9_.-]{1,128}$'::text)),
    CONSTRAINT mcp_tools_upstream_tool_check CHECK ((upstream_tool ~ '^[^[:cntrl:]]{1,128}$'::text))
);

COMMENT ON TABLE outbox.mcp_tools IS 'Targets exposed as MCP tools (outbox-relay mcp): name, description, the JSON Schema of the arguments (a documented subset).';

COMMENT ON COLUMN outbox.mcp_tools.server_keys IS 'Deprecated (0040): key_source = ''minted'', kept in step by a trigger for 0.1.0 front doors; dropped in the next release.';

COMMENT ON COLUMN outbox.mcp_tools.upstream_tool IS 'For a tool whose target is an mcp target: the upstream''s name of the tool; NULL = this tool''s name (0037).';

COMMENT ON COLUMN outbox.mcp_tools.key_source IS 'Where the key of a call that carries none comes from: meta (nowhere: refused), arguments (the same canonical arguments within argument_window are one action), minted (a new key per call) (0040).';

COMMENT ON COLUMN outbox.mcp_tools.argument_window IS 'key_source arguments: how long, from the first call, the same arguments are the same action (0040).';

COMMENT ON COLUMN outbox.mcp_tools.passthrough IS 'A read-only tool (destructive false) of an mcp target that the front door calls straight through: no intent, no key, no saved outcome (0045).';

ALTER TABLE ONLY outbox.mcp_tools
    ADD CONSTRAINT mcp_tools_pkey PRIMARY KEY (tool);

GRANT SELECT ON TABLE outbox.mcp_tools TO outbox_operator;
GRANT INSERT,DELETE,UPDATE ON TABLE outbox.mcp_tools TO outbox_admin;
