CREATE TABLE outbox.mcp_clients (
    name text NOT NULL,
    token_hash bytea NOT NULL,
    tools text[],
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    rotated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT mcp_clients_name_check CHECK ((name ~ '^[A-Za-z0-9_.-]{1,64}$'::text)),
    CONSTRAINT mcp_clients_token_hash_check CHECK ((octet_length(token_hash) = 32))
);

COMMENT ON TABLE outbox.mcp_clients IS 'MCP clients: the SHA-256 of each bearer token (never the token) and the tools each may see and call.';

ALTER TABLE ONLY outbox.mcp_clients
    ADD CONSTRAINT mcp_clients_pkey PRIMARY KEY (name);

ALTER TABLE ONLY outbox.mcp_clients
    ADD CONSTRAINT mcp_clients_token_hash_key UNIQUE (token_hash);

GRANT DELETE ON TABLE outbox.mcp_clients TO outbox_admin;

GRANT SELECT(name) ON TABLE outbox.mcp_clients TO outbox_operator;

GRANT SELECT(tools) ON TABLE outbox.mcp_clients TO outbox_operator;

GRANT SELECT(created_at) ON TABLE outbox.mcp_clients TO outbox_operator;

GRANT SELECT(rotated_at) ON TABLE outbox.mcp_clients TO outbox_operator;
