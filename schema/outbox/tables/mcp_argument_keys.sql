CREATE TABLE outbox.mcp_argument_keys (
    client text NOT NULL,
    tool text NOT NULL,
    argument_hash bytea NOT NULL,
    key text NOT NULL COLLATE pg_catalog."C",
    first_at timestamp with time zone NOT NULL,
    CONSTRAINT mcp_argument_keys_argument_hash_check CHECK ((octet_length(argument_hash) = 32))
);

COMMENT ON TABLE outbox.mcp_argument_keys IS 'key_source arguments: the key of one client''s calls of one tool with the same canonical arguments, and when its window began (0040).';

ALTER TABLE ONLY outbox.mcp_argument_keys
    ADD CONSTRAINT mcp_argument_keys_pkey PRIMARY KEY (client, tool, argument_hash);

GRANT SELECT ON TABLE outbox.mcp_argument_keys TO outbox_operator;
