CREATE TABLE outbox.targets (
    name text NOT NULL,
    url text NOT NULL,
    method text DEFAULT 'POST'::text NOT NULL,
    key_header text DEFAULT 'Idempotency-Key'::text,
    key_ttl interval DEFAULT '24:00:00'::interval NOT NULL,
    status_url text,
    timeout_ms integer DEFAULT 10000 NOT NULL,
    max_attempts integer,
    backoff_base_ms integer DEFAULT 500 NOT NULL,
    backoff_cap_ms integer DEFAULT 300000 NOT NULL,
    reconcile_delay_ms integer,
    max_in_flight integer DEFAULT 1024 NOT NULL,
    max_payload_bytes integer DEFAULT 1048576 NOT NULL,
    approval_rule jsonpath,
    volatile_paths text[] DEFAULT '{}'::text[] NOT NULL,
    on_mismatch text DEFAULT 'reject'::text NOT NULL,
    headers jsonb DEFAULT '{}'::jsonb NOT NULL,
    secret_env text,
    enabled boolean DEFAULT true NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    rate_limit_per_s real,
    retry_for interval DEFAULT '3 days'::interval NOT NULL,
    circuit_failure_threshold integer DEFAULT 10 NOT NULL,
    circuit_probe_max_ms integer DEFAULT 30000 NOT NULL,
    retain_for interval DEFAULT '7 days'::interval NOT NULL,
    dedupe_window interval DEFAULT '30 days'::interval NOT NULL,
    forget_pre_retention boolean DEFAULT false NOT NULL,
    ca_file text,
    client_cert_file text,
    client_key_file text,
    http_version text DEFAULT '1.1'::text NOT NULL,
    protocol text DEFAULT 'http'::text NOT NULL,
    mcp_version text DEFAULT 'auto'::text NOT NULL,
    auth_secret text,
    status_tool text,
    CONSTRAINT targets_auth_secret_check CHECK ((auth_secret ~ '^OUTBOX_SECRET_[A-Za-z0-9_]{1,113}$'::text)),
    CONSTRAINT targets_backoff_base_ms_check CHECK (((backoff_base_ms >= 1) AND (backoff_base_ms <= 3600000))),
    CONSTRAINT targets_backoff_cap_ms_check CHECK (((backoff_cap_ms >= 1) AND (backoff_cap_ms <= 86400000))),
    CONSTRAINT targets_ca_file_path CHECK (((ca_file ~ '^/[^[:cntrl:]]*$'::text) AND (octet_length(ca_file) <= 4095))),
    CONSTRAINT targets_check CHECK ((backoff_cap_ms >= backoff_base_ms)),
    CONSTRAINT targets_circuit_failure_threshold_check CHECK (((circuit_failure_threshold >= 1) AND (circuit_failure_threshold <= 100000))),
    CONSTRAINT targets_circuit_probe_max_ms_check CHECK (((circuit_probe_max_ms >= 100) AND (circuit_probe_max_ms <= 3600000))),
    CONSTRAINT targets_client_cert_and_key CHECK (((client_cert_file IS NULL) = (client_key_file IS NULL))),
    CONSTRAINT targets_client_cert_file_path CHECK (((client_cert_file ~ '^/[^[:cntrl:]]*$'::text) AND (octet_length(client_cert_file) <= 4095))),
    CONSTRAINT targets_client_key_file_path CHECK (((client_key_file ~ '^/[^[:cntrl:]]*$'::text) AND (octet_length(client_key_file) <= 4095))),
    CONSTRAINT targets_dedupe_window_covers_retention CHECK ((dedupe_window >= retain_for)),
    CONSTRAINT targets_headers_check CHECK ((jsonb_typeof(headers) = 'object'::text)),
    CONSTRAINT targets_http2_needs_key CHECK (((http_version = '1.1'::text) OR (key_header IS NOT NULL))),
    CONSTRAINT targets_http_version_check CHECK ((http_version = ANY (ARRAY['1.1'::text, '2'::text]))),
    CONSTRAINT targets_key_header_check CHECK ((key_header ~ '^[A-Za-z0-9-]{1,64}$'::text)),
    CONSTRAINT targets_key_ttl_check CHECK ((key_ttl > '00:00:00'::interval)),
    CONSTRAINT targets_max_attempts_check CHECK (((max_attempts >= 1) AND (max_attempts <= 1000))),
    CONSTRAINT targets_max_in_flight_check CHECK (((max_in_flight >= 1) AND (max_in_flight <= 100000))),
    CONSTRAINT targets_max_payload_bytes_check CHECK (((max_payload_bytes >= 2) AND (max_payload_bytes <= 67108864))),
    CONSTRAINT targets_mcp_is_post CHECK (((protocol = 'http'::text) OR (method = 'POST'::text))),
    CONSTRAINT targets_mcp_version_check CHECK ((mcp_version = ANY (ARRAY['auto'::text, '2026-07-28'::text, '2025-11-25'::text]))),
    CONSTRAINT targets_method_check CHECK ((method = ANY (ARRAY['POST'::text, 'PUT'::text, 'PATCH'::text, 'DELETE'::text]))),
    CONSTRAINT targets_name_check CHECK ((name ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$'::text)),
    CONSTRAINT targets_on_mismatch_check CHECK ((on_mismatch = ANY (ARRAY['reject'::text, 'keep_original'::text]))),
    CONSTRAINT targets_protocol_check CHECK ((protocol = ANY (ARRAY['http'::text, 'mcp'::text]))),
    CONSTRAINT targets_rate_limit_per_s_check CHECK (((rate_limit_per_s > (0)::double precision) AND (rate_limit_per_s <= (1000000)::double precision))),
    CONSTRAINT targets_reconcile_delay_ms_check CHECK ((reconcile_delay_ms >= 0)),
    CONSTRAINT targets_retain_for_check CHECK ((retain_for >= '00:00:01'::interval)),
    CONSTRAINT targets_retry_for_check CHECK ((retry_for > '00:00:00'::interval)),
    CONSTRAINT targets_secret_env_check CHECK ((secret_env ~ '^[A-Za-z_][A-Za-z0-9_]{0,127}$'::text)),
    CONSTRAINT targets_status_tool_check CHECK ((status_tool ~ '^[^[:cntrl:]]{1,128}$'::text)),
    CONSTRAINT targets_status_tool_mcp CHECK (((status_tool IS NULL) OR (protocol = 'mcp'::text))),
    CONSTRAINT targets_status_url_check CHECK ((status_url ~ '^https?://[^[:space:]]*\{key\}[^[:space:]]*$'::text)),
    CONSTRAINT targets_timeout_ms_check CHECK (((timeout_ms >= 1) AND (timeout_ms <= 600000))),
    CONSTRAINT targets_url_check CHECK ((url ~ '^https?://[^[:space:]]+$'::text))
);

COMMENT ON TABLE outbox.targets IS 'Delivery targets, registered by admins. Intents name a target, never a URL.';

COMMENT ON COLUMN outbox.targets.key_header IS 'Header carrying the idempotency key; NULL = the target cannot deduplicate.';

COMMENT ON COLUMN outbox.targets.status_url IS 'Reconciliation URL template; {key} is replaced by the percent-encoded key. NULL = none.';

COMMENT ON COLUMN outbox.targets.max_attempts IS 'Optional cap on attempts (NULL = none: retry_for bounds the retries).';

COMMENT ON COLUMN outbox.targets.volatile_paths IS 'Paths (#- syntax, e.g. {meta,ts}) left out of the payload fingerprint.';

COMMENT ON COLUMN outbox.targets.secret_env IS 'Name of the relay environment variable holding the signing secret (never the secret itself); it must start with OUTBOX_SECRET_.';

COMMENT ON COLUMN outbox.targets.rate_limit_per_s IS 'Requests per second to this target, all relays together (NULL = unlimited). No 1-second window carries more than 1.025 x this, plus one.';

COMMENT ON COLUMN outbox.targets.retry_for IS 'Retry horizon: an intent not sent, or told to retry later, is retried until this long after its first attempt.';

COMMENT ON COLUMN outbox.targets.circuit_failure_threshold IS 'Consecutive failures not of the intent''s making (refused, timeout, reset, 5xx) that open the circuit.';

COMMENT ON COLUMN outbox.targets.circuit_probe_max_ms IS 'While the circuit is open, one probe goes after 1 s, then at doubling intervals up to this.';

COMMENT ON COLUMN outbox.targets.retain_for IS 'How long a final intent (succeeded, failed, cancelled) keeps its row, payload, response and history before outbox.prune removes them.';

COMMENT ON COLUMN outbox.targets.dedupe_window IS 'How long a key is remembered after its intent settled (a tombstone once pruned): an enqueue of it within the window never delivers again. At least retain_for.';

COMMENT ON COLUMN outbox.targets.forget_pre_retention IS 'false (default): keys of intents that settled before retention began (0012) are remembered for good once pruned; true: forgotten after dedupe_window like the others.';

COMMENT ON COLUMN outbox.targets.ca_file IS 'Absolute path, on the relay''s host, of a PEM bundle of the CAs that verify the target''s certificate instead of the system store; NULL = the system store. Verification is always on.';

COMMENT ON COLUMN outbox.targets.client_cert_file IS 'Absolute path, on the relay''s host, of the PEM client certificate the relay presents (mutual TLS); set with client_key_file. NULL = none. Never the certificate itself.';

COMMENT ON COLUMN outbox.targets.client_key_file IS 'Absolute path, on the relay''s host, of the unencrypted PEM private key of client_cert_file, readable by the relay''s user only. NULL = none. Never the key itself.';

COMMENT ON COLUMN outbox.targets.http_version IS 'HTTP the relay speaks to the target: ''1.1''; ''2'' (h2 offered by ALPN over TLS, HTTP/1.1 if the target refuses it; http:// URLs stay on 1.1). ''2'' only with a key_header. Requests to an h2 target share at most 4 connections.';

COMMENT ON COLUMN outbox.targets.protocol IS '''http'' (a webhook) or ''mcp'' (url is a Streamable HTTP MCP endpoint; an intent''s payload is {"tool": NAME, "arguments": {...}}, delivered as tools/call) (0037).';

COMMENT ON COLUMN outbox.targets.mcp_version IS 'For an mcp target: ''auto'' (server/discover, else initialize), ''2026-07-28'' (stateless) or ''2025-11-25'' (initialize, a session) (0037).';

COMMENT ON COLUMN outbox.targets.auth_secret IS 'For an mcp target: the name of an OUTBOX_SECRET_... variable of the relay''s environment holding the upstream''s bearer token (never the token) (0037).';

COMMENT ON COLUMN outbox.targets.status_tool IS 'For an mcp target: the upstream tool asked about an unknown intent ({"key": KEY} → structuredContent {"executed": true|false}), as a status URL is (0037).';

ALTER TABLE outbox.targets
    ADD CONSTRAINT targets_mcp_not_signed CHECK (((protocol = 'http'::text) OR (secret_env IS NULL))) NOT VALID;

ALTER TABLE ONLY outbox.targets
    ADD CONSTRAINT targets_pkey PRIMARY KEY (name);

ALTER TABLE outbox.targets
    ADD CONSTRAINT targets_secret_env_prefix CHECK ((secret_env ~ '^OUTBOX_SECRET_[A-Za-z0-9_]+$'::text)) NOT VALID;

GRANT SELECT ON TABLE outbox.targets TO outbox_relay;
GRANT SELECT ON TABLE outbox.targets TO outbox_operator;
GRANT INSERT,DELETE,UPDATE ON TABLE outbox.targets TO outbox_admin;
