-- schema/outbox.sql — the net schema of outbox-relay: what a database looks
-- like after every migration up to and including 0039_settle_every_event.sql.
--
-- Read it to learn the data model; build databases with migrations/
-- (`outbox-relay migrate`), which also records what is applied. The file is
-- written by `make schema` (tests/lib/schema-file.sh: the migrations applied
-- to a throwaway cluster, pg_dump, regrouped for reading by
-- tests/lib/schema-order.py); tests/sql/schema_equivalence.sh proves that it
-- builds the same schema as migrations/. Do not edit it by hand.
--
-- Why migrations stay the source: applied migrations are checksummed by
-- `outbox-relay migrate` and never edited, so a function redefined by a later
-- migration has several bodies in migrations/ and one here. The design is in
-- docs/design.md; why each change was made is in the header of its migration.
--
-- Sections: 1 roles and the schema · 2 types · 3 tables (each with its constraints, indexes
-- and comments) · 4 functions · 5 views · 6 triggers · 7 privileges.

SET check_function_bodies = false;
SET client_min_messages = warning;

-- ====================================================================== 1. roles and the schema
-- Roles are cluster-wide, so not part of a schema dump: created when missing, as
-- migrations 0005 and 0022 do (every role the privileges below grant to).
DO $$
DECLARE
    role_name text;
BEGIN
    FOREACH role_name IN ARRAY ARRAY['outbox_app', 'outbox_relay', 'outbox_operator', 'outbox_admin', 'outbox_mcp'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = role_name) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', role_name);
        END IF;
    END LOOP;
END
$$;
GRANT outbox_operator TO outbox_admin;

CREATE SCHEMA outbox;
COMMENT ON SCHEMA outbox IS 'Transactional outbox: intents enqueued in business transactions, delivered by outbox-relay.';

-- ====================================================================== 2. types
CREATE TYPE outbox.attempt_class AS ENUM (
    'not_sent',
    'ambiguous',
    'succeeded',
    'retry_later',
    'key_conflict',
    'permanent_failure',
    'reconciled_executed',
    'reconciled_not_executed',
    'reconcile_inconclusive',
    'resolved',
    'released'
);

CREATE TYPE outbox.enqueue_result AS (
	key text,
	intent_id bigint,
	target text,
	status text,
	inserted boolean,
	response_status integer,
	response_body text,
	mismatch_fields text[]
);

CREATE TYPE outbox.intent_state AS ENUM (
    'awaiting_approval',
    'pending',
    'in_flight',
    'succeeded',
    'failed',
    'unknown',
    'cancelled'
);

CREATE TYPE outbox.mcp_answer AS (
	client text,
	key text,
	intent_key text,
	tool text,
	target text,
	status text,
	state outbox.intent_state,
	final boolean,
	inserted boolean,
	response_status integer,
	response_body text,
	attempts integer,
	message text,
	conflict_fields text[],
	task_id text,
	task_created_at timestamp with time zone,
	task_ttl_ms bigint,
	updated_at timestamp with time zone
);

-- ====================================================================== 3. tables
-- ---------------------------------------------------------------------- targets
-- Delivery targets, registered by admins. Intents name a target, never a URL.
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

ALTER TABLE ONLY outbox.targets
    ADD CONSTRAINT targets_pkey PRIMARY KEY (name);

ALTER TABLE outbox.targets
    ADD CONSTRAINT targets_secret_env_prefix CHECK ((secret_env ~ '^OUTBOX_SECRET_[A-Za-z0-9_]+$'::text)) NOT VALID;

-- ---------------------------------------------------------------------- intents
-- One row per logical action. Written by outbox.enqueue inside the caller's
-- transaction.
CREATE TABLE outbox.intents (
    id bigint NOT NULL,
    key text NOT NULL COLLATE pg_catalog."C",
    target text NOT NULL COLLATE pg_catalog."C",
    payload jsonb NOT NULL,
    fingerprint bytea NOT NULL,
    state outbox.intent_state DEFAULT 'pending'::outbox.intent_state NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    next_attempt_at timestamp with time zone DEFAULT now() NOT NULL,
    lease_owner text,
    lease_expires_at timestamp with time zone,
    ambiguous boolean DEFAULT false NOT NULL,
    first_attempt_at timestamp with time zone,
    response_status integer,
    response_body text,
    last_error text,
    run_id text COLLATE pg_catalog."C",
    compensates text COLLATE pg_catalog."C",
    mismatches integer DEFAULT 0 NOT NULL,
    decided_by text,
    decision_note text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    ordering_key text COLLATE pg_catalog."C",
    not_before timestamp with time zone,
    traceparent text,
    key_sent boolean,
    enqueued_by text DEFAULT SESSION_USER,
    CONSTRAINT intents_check CHECK (((state <> 'in_flight'::outbox.intent_state) OR ((lease_owner IS NOT NULL) AND (lease_expires_at IS NOT NULL))))
)
WITH (fillfactor='50');

COMMENT ON TABLE outbox.intents IS 'One row per logical action. Written by outbox.enqueue inside the caller''s transaction.';

COMMENT ON COLUMN outbox.intents.ambiguous IS 'Some attempt may have executed: never reported failed, never re-sent blindly.';

COMMENT ON COLUMN outbox.intents.ordering_key IS 'Group of intents delivered one at a time in enqueue (commit) order; NULL = unordered. The place in the group is the id.';

COMMENT ON COLUMN outbox.intents.not_before IS 'p_not_before of an ordered intent enqueued behind a live one: applied when its turn comes (NULL otherwise).';

COMMENT ON COLUMN outbox.intents.traceparent IS 'The W3C traceparent the caller enqueued with (version 00), sent on every attempt with a new parent id; NULL: none.';

COMMENT ON COLUMN outbox.intents.key_sent IS 'Whether the request of the current attempt carries the idempotency key header, stamped by the claim (outbox.claim_due); NULL: not recorded (never claimed, or claimed by a relay before 0025).';

COMMENT ON COLUMN outbox.intents.enqueued_by IS 'The login (session_user) whose enqueue or compensate made the intent; NULL: enqueued before 0026. An isolated login (outbox.isolated_logins) sees only its own.';

ALTER TABLE outbox.intents ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME outbox.intents_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY outbox.intents
    ADD CONSTRAINT intents_key_key UNIQUE (key);

ALTER TABLE ONLY outbox.intents
    ADD CONSTRAINT intents_pkey PRIMARY KEY (id);

CREATE INDEX intents_awaiting ON outbox.intents USING btree (created_at) WHERE (state = 'awaiting_approval'::outbox.intent_state);

CREATE INDEX intents_compensates ON outbox.intents USING btree (compensates) WHERE (compensates IS NOT NULL);

CREATE INDEX intents_due ON outbox.intents USING btree (target, next_attempt_at) WHERE (state = 'pending'::outbox.intent_state);

CREATE INDEX intents_in_flight ON outbox.intents USING btree (lease_expires_at) WHERE (state = 'in_flight'::outbox.intent_state);

CREATE INDEX intents_ordering ON outbox.intents USING btree (ordering_key, id) WHERE ((ordering_key IS NOT NULL) AND (state <> ALL (ARRAY['succeeded'::outbox.intent_state, 'cancelled'::outbox.intent_state])));

CREATE INDEX intents_run ON outbox.intents USING btree (run_id) WHERE (run_id IS NOT NULL);

CREATE INDEX intents_target_settled ON outbox.intents USING btree (target, updated_at) WHERE (state = ANY (ARRAY['succeeded'::outbox.intent_state, 'failed'::outbox.intent_state, 'cancelled'::outbox.intent_state]));

CREATE INDEX intents_unknown ON outbox.intents USING btree (next_attempt_at) WHERE (state = 'unknown'::outbox.intent_state);

-- ---------------------------------------------------------------------- attempts
-- One row per delivery, lease take-over, reconciliation or resolution: the
-- traceable life of a key.
CREATE TABLE outbox.attempts (
    id bigint NOT NULL,
    intent_id bigint NOT NULL,
    attempt integer NOT NULL,
    relay text NOT NULL,
    class outbox.attempt_class NOT NULL,
    request_sent boolean,
    http_status integer,
    error text,
    latency_ms integer,
    response_body text,
    recorded boolean DEFAULT true NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL,
    key_sent boolean
);

COMMENT ON TABLE outbox.attempts IS 'One row per delivery, lease take-over, reconciliation or resolution: the traceable life of a key.';

COMMENT ON COLUMN outbox.attempts.key_sent IS 'The request carried the idempotency key header; for a lease take-over, the request that may have executed did (0025). NULL: not known (before 0011, take-overs before 0025) or no request (decisions).';

ALTER TABLE outbox.attempts ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME outbox.attempts_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY outbox.attempts
    ADD CONSTRAINT attempts_pkey PRIMARY KEY (intent_id, id);

CREATE INDEX attempts_at_range ON outbox.attempts USING brin (at);

CREATE INDEX attempts_failures ON outbox.attempts USING btree (at) WHERE (class = ANY (ARRAY['not_sent'::outbox.attempt_class, 'ambiguous'::outbox.attempt_class, 'retry_later'::outbox.attempt_class, 'key_conflict'::outbox.attempt_class, 'permanent_failure'::outbox.attempt_class, 'reconcile_inconclusive'::outbox.attempt_class]));

-- ---------------------------------------------------------------------- target_state
-- Flow control state shared by all relays: circuit breaker, Retry-After
-- pause, rate-limit tokens. Written by outbox.claim and outbox.target_event.
CREATE TABLE outbox.target_state (
    target text NOT NULL,
    circuit text DEFAULT 'closed'::text NOT NULL,
    circuit_since timestamp with time zone DEFAULT now() NOT NULL,
    circuit_reason text,
    probe_interval_ms integer DEFAULT 0 NOT NULL,
    probe_at timestamp with time zone,
    probe_owner text,
    probe_expires_at timestamp with time zone,
    paused_until timestamp with time zone,
    tokens double precision,
    tokens_at timestamp with time zone,
    CONSTRAINT target_state_check CHECK (((circuit <> 'open'::text) OR (probe_at IS NOT NULL))),
    CONSTRAINT target_state_check1 CHECK (((circuit <> 'half_open'::text) OR ((probe_owner IS NOT NULL) AND (probe_expires_at IS NOT NULL)))),
    CONSTRAINT target_state_circuit_check CHECK ((circuit = ANY (ARRAY['closed'::text, 'open'::text, 'half_open'::text])))
);

COMMENT ON TABLE outbox.target_state IS 'Flow control state shared by all relays: circuit breaker, Retry-After pause, rate-limit tokens. Written by outbox.claim and outbox.target_event.';

ALTER TABLE ONLY outbox.target_state
    ADD CONSTRAINT target_state_pkey PRIMARY KEY (target);

-- ---------------------------------------------------------------------- tombstones
-- Keys of pruned intents, remembered until forget_at (settled_at +
-- dedupe_window): enqueue and outcome answer from them.
CREATE TABLE outbox.tombstones (
    key_hash bytea NOT NULL,
    intent_id bigint NOT NULL,
    target text NOT NULL,
    fingerprint bytea NOT NULL,
    state outbox.intent_state NOT NULL,
    response_status integer,
    settled_at timestamp with time zone NOT NULL,
    pruned_at timestamp with time zone DEFAULT now() NOT NULL,
    forget_at timestamp with time zone NOT NULL,
    enqueued_by text,
    CONSTRAINT tombstones_state_check CHECK ((state = ANY (ARRAY['succeeded'::outbox.intent_state, 'failed'::outbox.intent_state, 'cancelled'::outbox.intent_state])))
);

COMMENT ON TABLE outbox.tombstones IS 'Keys of pruned intents, remembered until forget_at (settled_at + dedupe_window): enqueue and outcome answer from them.';

COMMENT ON COLUMN outbox.tombstones.enqueued_by IS 'intents.enqueued_by of the pruned intent (NULL: pruned before 0026, or enqueued before it).';

CREATE INDEX tombstones_forget ON outbox.tombstones USING brin (forget_at);

CREATE INDEX tombstones_key ON outbox.tombstones USING btree (key_hash);

-- ---------------------------------------------------------------------- mismatches
-- Enqueues that reused a key with another payload under on_mismatch =
-- keep_original.
CREATE TABLE outbox.mismatches (
    id bigint NOT NULL,
    key text NOT NULL,
    payload jsonb NOT NULL,
    fingerprint bytea NOT NULL,
    fields text[] NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL
);

COMMENT ON TABLE outbox.mismatches IS 'Enqueues that reused a key with another payload under on_mismatch = keep_original.';

ALTER TABLE outbox.mismatches ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME outbox.mismatches_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY outbox.mismatches
    ADD CONSTRAINT mismatches_pkey PRIMARY KEY (id);

CREATE INDEX mismatches_key ON outbox.mismatches USING btree (key);

-- ---------------------------------------------------------------------- relays
-- Running relays. The enqueue trigger notifies only while some live relay
-- says it is idle.
CREATE TABLE outbox.relays (
    relay_id text NOT NULL,
    idle boolean DEFAULT false NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    heartbeat_at timestamp with time zone DEFAULT now() NOT NULL
);

COMMENT ON TABLE outbox.relays IS 'Running relays. The enqueue trigger notifies only while some live relay says it is idle.';

ALTER TABLE ONLY outbox.relays
    ADD CONSTRAINT relays_pkey PRIMARY KEY (relay_id);

-- ---------------------------------------------------------------------- isolated_logins
-- Logins that see and act on only the intents they enqueued (outcome,
-- enqueue, compensate, compensations, links, traceparent_of, cancel_run);
-- written by admins. Members of outbox_operator or outbox_relay are never
-- isolated.
CREATE TABLE outbox.isolated_logins (
    login text NOT NULL,
    isolated_at timestamp with time zone DEFAULT now() NOT NULL,
    isolated_by text DEFAULT SESSION_USER NOT NULL,
    note text,
    CONSTRAINT isolated_logins_login_check CHECK ((login <> ''::text))
);

COMMENT ON TABLE outbox.isolated_logins IS 'Logins that see and act on only the intents they enqueued (outcome, enqueue, compensate, compensations, links, traceparent_of, cancel_run); written by admins. Members of outbox_operator or outbox_relay are never isolated.';

ALTER TABLE ONLY outbox.isolated_logins
    ADD CONSTRAINT isolated_logins_pkey PRIMARY KEY (login);

-- ---------------------------------------------------------------------- mcp_clients
-- MCP clients: the SHA-256 of each bearer token (never the token) and the
-- tools each may see and call.
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

-- ---------------------------------------------------------------------- mcp_tasks
-- MCP tasks: an unguessable id per (client, intent), durable before it is
-- returned.
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

-- ---------------------------------------------------------------------- mcp_tools
-- Targets exposed as MCP tools (outbox-relay mcp): name, description, the
-- JSON Schema of the arguments (a documented subset).
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

-- ---------------------------------------------------------------------- ordering_groups
-- One row per ordering group with live intents: an enqueue holds its row lock
-- until it commits, so enqueues of one group commit in the order of their
-- ids. Deleted when the group has no live intent.
CREATE TABLE outbox.ordering_groups (
    ordering_key text NOT NULL,
    enqueued bigint DEFAULT 1 NOT NULL,
    last_enqueue_at timestamp with time zone DEFAULT now() NOT NULL
);

COMMENT ON TABLE outbox.ordering_groups IS 'One row per ordering group with live intents: an enqueue holds its row lock until it commits, so enqueues of one group commit in the order of their ids. Deleted when the group has no live intent.';

ALTER TABLE ONLY outbox.ordering_groups
    ADD CONSTRAINT ordering_groups_pkey PRIMARY KEY (ordering_key);

-- ---------------------------------------------------------------------- retention_epoch
-- When retention began (0012) on a database that already had intents: keys of
-- intents settled before it are remembered for good.
CREATE TABLE outbox.retention_epoch (
    one boolean DEFAULT true NOT NULL,
    began timestamp with time zone NOT NULL,
    CONSTRAINT retention_epoch_one_check CHECK (one)
);

COMMENT ON TABLE outbox.retention_epoch IS 'When retention began (0012) on a database that already had intents: keys of intents settled before it are remembered for good.';

ALTER TABLE ONLY outbox.retention_epoch
    ADD CONSTRAINT retention_epoch_pkey PRIMARY KEY (one);

ALTER TABLE ONLY outbox.mcp_tasks
    ADD CONSTRAINT mcp_tasks_client_fkey FOREIGN KEY (client) REFERENCES outbox.mcp_clients(name) ON DELETE CASCADE;

ALTER TABLE ONLY outbox.mcp_tools
    ADD CONSTRAINT mcp_tools_target_fkey FOREIGN KEY (target) REFERENCES outbox.targets(name) ON UPDATE CASCADE;

ALTER TABLE ONLY outbox.target_state
    ADD CONSTRAINT target_state_target_fkey FOREIGN KEY (target) REFERENCES outbox.targets(name) ON UPDATE CASCADE ON DELETE CASCADE;

-- ====================================================================== 4. functions
CREATE FUNCTION outbox.approval_reason(p_payload jsonb, p_rule jsonpath) RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
DECLARE
    step_re  constant text := '(?:\.[A-Za-z_][A-Za-z0-9_]*|\."(?:[^"\\]|\\.)*"|\[[^]]*\]|\.\*\*(?:\{[^}]*\})?|\.\*)';
    lit_re   constant text := '(-?[0-9][0-9.eE+-]*|"(?:[^"\\]|\\.)*"|true|false|null)';
    op_re    constant text := '(==|!=|<>|<=|>=|<|>)';
    written  text;
    body     text;
    base     text;
    m        text[];
    seen     text[] := '{}';
    reasons  text[] := '{}';
    p        text;        -- the path as written
    abs_path text;        -- the same from the root
    quoted   text;        -- p as a regular expression
    lit      text;
    want     text;        -- the JSON type p is compared with, if the rule says
    strict_v jsonb;
    lax_v    jsonb;
    v        jsonb;
    is_pred  boolean;
    answer   boolean;
    failure  text;
BEGIN
    IF p_rule IS NULL THEN
        RETURN 'the target has no approval rule now (it had one when the intent was enqueued)';
    END IF;
    IF p_payload IS NULL THEN
        RETURN 'no payload';
    END IF;
    written := p_rule::text;
    body := regexp_replace(written, '^(strict|lax) ', '');

    BEGIN
        -- as needs_approval tells a predicate ($.a > 1) from a path ($ ? (@.a > 1))
        v := jsonb_path_query_array('{}', p_rule, '{}', true);
        is_pred := jsonb_array_length(v) = 1 AND jsonb_typeof(v -> 0) IN ('boolean', 'null');
        answer := CASE WHEN is_pred THEN jsonb_path_match(p_payload, p_rule, '{}', true)
                       ELSE jsonb_path_exists(p_payload, p_rule, '{}', true) END;
        IF answer THEN
            RETURN 'the rule is true for this payload';
        END IF;
        -- Not silent: an error that only hid the answer says what it is.
        PERFORM CASE WHEN is_pred THEN jsonb_path_match(p_payload, p_rule)
                     ELSE jsonb_path_exists(p_payload, p_rule) END;
    EXCEPTION WHEN OTHERS THEN
        failure := SQLERRM;
    END;

    base := (regexp_match(body, '^\s*(\$' || step_re || '*)\s*\?\s*\('))[1];
    FOR m IN SELECT regexp_matches(body, '([$@]' || step_re || '*)(\s*\()?', 'g') LOOP
        p := m[1];
        IF m[2] IS NOT NULL THEN   -- $.a.size(): the last step is a method
            p := regexp_replace(p, '\.[A-Za-z_][A-Za-z0-9_]*$', '');
        END IF;
        CONTINUE WHEN length(p) < 2 OR p = ANY (seen);
        seen := seen || p;
        IF left(p, 1) = '@' THEN
            CONTINUE WHEN base IS NULL;
            abs_path := base || substr(p, 2);
        ELSE
            abs_path := p;
        END IF;
        BEGIN
            strict_v := jsonb_path_query_array(p_payload, ('strict ' || abs_path)::jsonpath, '{}', true);
            lax_v := jsonb_path_query_array(p_payload, ('lax ' || abs_path)::jsonpath, '{}', true);
        EXCEPTION WHEN OTHERS THEN
            CONTINUE;   -- not a path on its own
        END;
        -- as people write it: $.amount_cents, not the canonical $."amount_cents"
        abs_path := regexp_replace(abs_path, '\."([A-Za-z_][A-Za-z0-9_]*)"', '.\1', 'g');
        IF jsonb_array_length(lax_v) = 0 THEN
            reasons := reasons || (abs_path || ' is missing');
            CONTINUE;
        END IF;
        IF jsonb_array_length(strict_v) = 0 THEN
            reasons := reasons || (abs_path || ' does not exist as written (strict): an array on the way without [*], or an item without it');
            CONTINUE;
        END IF;
        -- $.items[*].price: fewer values than items
        IF p ~ ('\[\*\]' || step_re || '$') AND jsonb_array_length(lax_v) <
               jsonb_array_length(jsonb_path_query_array(p_payload, ('lax ' || regexp_replace(abs_path, step_re || '$', ''))::jsonpath,
                                                         '{}', true)) THEN
            reasons := reasons || (abs_path || ' is missing in some items');
            CONTINUE;
        END IF;
        -- What the rule compares it with: p OP literal, or literal OP p.
        quoted := regexp_replace(p, '([.^$*+?(){}|\\\[\]])', '\\\1', 'g');
        lit := coalesce((regexp_match(body, quoted || '\s*' || op_re || '\s*' || lit_re))[2],
                        (regexp_match(body, lit_re || '\s*' || op_re || '\s*' || quoted))[1]);
        want := CASE WHEN lit IS NULL THEN
                         CASE WHEN body ~ (quoted || '\s+(like_regex|starts\s+with)') THEN 'string' END
                     WHEN lit ~ '^-?[0-9]' THEN 'number'
                     WHEN lit ~ '^"' THEN 'string'
                     WHEN lit IN ('true', 'false') THEN 'boolean' END;
        FOR v IN SELECT jsonb_array_elements(strict_v) LOOP
            IF jsonb_typeof(v) = 'null' THEN
                reasons := reasons || (abs_path || ' is null');
                EXIT;
            ELSIF want IS NOT NULL AND jsonb_typeof(v) <> want THEN
                reasons := reasons || format('%s is %s %s, compared with a %s', abs_path,
                                             CASE WHEN jsonb_typeof(v) IN ('object', 'array') THEN 'an' ELSE 'a' END,
                                             jsonb_typeof(v), want);
                EXIT;
            END IF;
        END LOOP;
    END LOOP;

    IF cardinality(reasons) > 0 THEN
        RETURN array_to_string(reasons, '; ');
    END IF;
    IF failure IS NOT NULL THEN
        RETURN 'the rule cannot be evaluated on this payload: ' || failure;
    END IF;
    IF NOT outbox.needs_approval(p_payload, p_rule) THEN
        RETURN 'the rule does not hold it now (it changed since the intent was enqueued)';
    END IF;
    RETURN 'the rule is neither true nor false for this payload (an unknown comparison or an error inside it), so it holds';
EXCEPTION WHEN OTHERS THEN
    RETURN 'the rule is neither true nor false for this payload, so it holds';
END
$_$;

CREATE FUNCTION outbox.approve(p_key text, p_by text) RETURNS outbox.intent_state
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    row outbox.intents := outbox.ordering_locked_intent(p_key, 'approve');   -- 0013
BEGIN
    IF p_by IS NULL OR p_by = '' THEN
        RAISE EXCEPTION 'outbox.approve: say who approves (p_by)' USING ERRCODE = '22023';
    END IF;
    IF row.state <> 'awaiting_approval' THEN
        RAISE EXCEPTION 'outbox.approve: key % is %, not awaiting_approval', quote_literal(p_key), row.state
            USING ERRCODE = 'OR007';
    END IF;
    UPDATE outbox.intents
       SET state = 'pending',
           next_attempt_at = CASE WHEN (outbox.ordering_head_before(row.ordering_key, row.id)).id IS NOT NULL
                                  THEN 'infinity' ELSE now() END,   -- 0013: held behind its group's head
           decided_by = p_by, decision_note = 'approved', updated_at = now()
     WHERE id = row.id;
    PERFORM outbox.note_decision(row.id, row.attempts, p_by,
                                 format('approved by %s (session user %s)', p_by, session_user));
    RETURN 'pending';
END
$$;

CREATE FUNCTION outbox.attempt_may_have_executed(p_class outbox.attempt_class, p_request_sent boolean, p_http_status integer) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT NOT coalesce(
        (p_class = 'not_sent' AND p_request_sent = false)
        OR (p_class IN ('retry_later', 'key_conflict', 'permanent_failure') AND p_http_status BETWEEN 400 AND 499)
        OR (p_class = 'resolved' AND p_request_sent = false),
        false)
$$;

-- Statement-level reference check attempts.intent_id → intents.id (replaces a
-- per-row foreign key; see migration 0008).
CREATE FUNCTION outbox.attempts_check_intents() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    missing bigint;
BEGIN
    SELECT a.intent_id INTO missing
      FROM new_attempts a
     WHERE NOT EXISTS (SELECT 1 FROM outbox.intents i WHERE i.id = a.intent_id)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'outbox.attempts: intent % does not exist', coalesce(missing::text, 'NULL')
            USING ERRCODE = 'foreign_key_violation',
                  DETAIL = 'Every attempts row belongs to a row of outbox.intents (attempts.intent_id = intents.id).';
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION outbox.attempts_check_intents() IS 'Statement-level reference check attempts.intent_id → intents.id (replaces a per-row foreign key; see migration 0008).';

CREATE FUNCTION outbox.caller_may_see(p_enqueued_by text) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
    SELECT p_enqueued_by IS NOT DISTINCT FROM session_user::text OR NOT outbox.isolated()
$$;

CREATE FUNCTION outbox.cancel(p_key text, p_reason text DEFAULT NULL::text) RETURNS outbox.intent_state
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    row outbox.intents := outbox.ordering_locked_intent(p_key, 'cancel');   -- the group's settle lock too
    d   record;   -- outbox.delivery_summary: what the attempts were
BEGIN
    IF (row.state NOT IN ('pending', 'awaiting_approval') OR row.ambiguous)
       AND NOT (row.state = 'failed' AND row.ordering_key IS NOT NULL) THEN
        RAISE EXCEPTION 'outbox.cancel: key % is %, cannot cancel', quote_literal(p_key),
                        CASE WHEN row.ambiguous AND row.state = 'pending' THEN 'pending after an ambiguous attempt (it may have executed)'
                             ELSE row.state::text END
            USING ERRCODE = 'OR007', HINT = 'Only intents that were never sent (or, in an ordering group, that failed) can be cancelled.';
    END IF;
    SELECT * INTO d FROM outbox.delivery_summary(row.id);
    IF row.state <> 'failed' AND d.may_have_executed > 0 THEN
        RAISE EXCEPTION 'outbox.cancel: key % is % after %, cannot cancel', quote_literal(p_key), row.state,
                        d.story || CASE WHEN d.status_url_said_no
                                        THEN ' (it may have answered while the target was still working on a request)'
                                        ELSE '' END
            USING ERRCODE = 'OR007',
                  HINT = 'An attempt may have executed: it is sent again (with its key, if the target takes one), and once its outcome is known it can be compensated (outbox.compensate). Only an intent the target never acted on can be cancelled: never sent, or refused with a 4xx (or, in an ordering group, failed).';
    END IF;
    UPDATE outbox.intents
       SET state = 'cancelled',
           last_error = 'cancelled: ' || coalesce(p_reason, 'no reason given')
                        || CASE WHEN row.state = 'failed' THEN ' (it had failed: ' || coalesce(row.last_error, 'no reason recorded') || ')'
                                ELSE coalesce(' (after ' || d.story || ')', '') END,
           decision_note = p_reason, decided_by = session_user, updated_at = now()
     WHERE id = row.id;
    PERFORM outbox.note_decision(row.id, row.attempts, session_user,
                                 'cancelled: ' || coalesce(p_reason, '') || coalesce(' (after ' || d.story || ')', ''));
    PERFORM outbox.settle(ARRAY[row.id], ARRAY['cancelled'::outbox.intent_state], ARRAY[row.ordering_key]);
    RETURN 'cancelled';
END
$$;

CREATE FUNCTION outbox.cancel_run(p_run_id text, p_reason text DEFAULT NULL::text) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    candidate bigint;
    grp       text;
    groups    text[];
    locked    boolean := false;
    row       outbox.intents;
    everyone  boolean := NOT outbox.isolated();   -- else only the caller's own intents (enqueued_by)
    story     text;
    final_ids    bigint[] := '{}';   -- for outbox.settle
    final_groups text[] := '{}';
BEGIN
    IF p_run_id IS NULL OR p_run_id = '' THEN
        RAISE EXCEPTION 'outbox.cancel_run: say which run (p_run_id)' USING ERRCODE = '22023';
    END IF;
    -- 0036: an MCP client's run is the front door's (an operator may still cancel it).
    IF starts_with(p_run_id, 'mcp:') AND NOT outbox.operator_session() THEN
        PERFORM outbox.refuse_front_door('cancel_run', 'run id', p_run_id);
    END IF;
    -- Lock the candidates (in id order: two cancel_runs cannot deadlock), waiting for a
    -- relay that is recording one of them. Once a row is locked, the UPDATE below looks
    -- again with a fresh snapshot, so it sees the attempts row a relay committed with the
    -- change we waited for; while we hold the lock, no relay can claim the row.
    -- Unordered candidates first (waiting for their locks), then the ordered ones, after
    -- the settle locks of their groups (all at once, in one order: outbox.ordering_lock_groups),
    -- and only rows nobody else holds: a relay recording one waits for those locks.
    SELECT array_agg(DISTINCT i.ordering_key) INTO groups FROM outbox.intents i
     WHERE i.run_id = p_run_id AND i.state IN ('pending', 'awaiting_approval')
       AND NOT i.ambiguous AND i.compensates IS NULL AND i.ordering_key IS NOT NULL
       AND (everyone OR i.enqueued_by = session_user::text);
    FOR candidate, grp IN
        SELECT i.id, i.ordering_key FROM outbox.intents i
         WHERE i.run_id = p_run_id AND i.state IN ('pending', 'awaiting_approval')
           AND NOT i.ambiguous AND i.compensates IS NULL
           AND (everyone OR i.enqueued_by = session_user::text)
         ORDER BY i.ordering_key IS NOT NULL, i.id
    LOOP
        IF grp IS NULL THEN
            PERFORM 1 FROM outbox.intents i WHERE i.id = candidate FOR UPDATE;
        ELSE
            CONTINUE WHEN NOT grp = ANY (groups);   -- no longer a candidate when groups was read
            IF NOT locked THEN
                PERFORM outbox.ordering_lock_groups(groups);
                locked := true;
            END IF;
            PERFORM 1 FROM outbox.intents i WHERE i.id = candidate FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;
        END IF;
        -- As outbox.cancel: no attempt that may have executed; what they were goes
        -- into the reason.
        story := (SELECT d.story FROM outbox.delivery_summary(candidate) d);
        UPDATE outbox.intents i
           SET state = 'cancelled',
               last_error = 'cancelled: ' || coalesce(p_reason, 'no reason given') || coalesce(' (after ' || story || ')', ''),
               decision_note = p_reason, decided_by = session_user, updated_at = now()
         WHERE i.id = candidate AND i.state IN ('pending', 'awaiting_approval') AND NOT i.ambiguous
           AND NOT EXISTS (SELECT 1 FROM outbox.attempts a
                            WHERE a.intent_id = i.id
                              AND outbox.attempt_may_have_executed(a.class, a.request_sent, a.http_status))
        RETURNING i.* INTO row;
        IF FOUND THEN
            PERFORM outbox.note_decision(row.id, row.attempts, session_user,
                                         format('cancelled with run %s: %s', p_run_id, coalesce(p_reason, ''))
                                         || coalesce(' (after ' || story || ')', ''));
            final_ids := final_ids || row.id;
            final_groups := final_groups || row.ordering_key;
        END IF;
    END LOOP;
    IF cardinality(final_ids) > 0 THEN
        PERFORM outbox.settle(final_ids, array_fill('cancelled'::outbox.intent_state, ARRAY[cardinality(final_ids)]),
                              final_groups);
    END IF;
    RETURN cardinality(final_ids);
END
$$;

CREATE FUNCTION outbox.canonical(doc jsonb) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
DECLARE
    t text := doc::text;
BEGIN
    IF t !~ '[0-9]\.[0-9]*0' THEN
        RETURN doc;
    END IF;
    -- (the same rewrite as in outbox.fingerprint)
    t := replace(replace(t, '\\', E'\x01'), '\"', E'\x02');
    IF t ~ '^(?:[^"]*"[^"]*")*[^"]*"[^"]*\.[0-9]*0' THEN
        t := regexp_replace(t, '("[^"]*")|([0-9]\.[0-9]*[1-9])0+\M|\.0+\M', '\1\2', 'g');
    ELSE
        t := regexp_replace(regexp_replace(replace(replace(replace(t, '.0,', ','), '.0]', ']'), '.0}', '}'),
                                           '([0-9]\.[0-9]*[1-9])0+\M', '\1', 'g'),
                            '\.0+\M', '', 'g');
    END IF;
    RETURN replace(replace(t, E'\x02', '\"'), E'\x01', '\\')::jsonb;
END
$$;

CREATE FUNCTION outbox.claim(p_relay text, p_targets text[], p_rooms integer[], p_limit integer, p_lease_ms integer) RETURNS TABLE(id bigint, key text, target text, payload text, attempt integer, ambiguous boolean, first_attempt_ms bigint, probe boolean, traceparent text)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    rooms    integer[] := p_rooms;
    probing  text[] := '{}';
    metered  text[] := '{}';
    avail    double precision[] := '{}';
    g        record;
    a        double precision;
BEGIN
    -- Gated targets, locked in name order (two relays never lock in opposite
    -- orders): their rooms shrink to what the gate allows.
    FOR g IN
        SELECT u.ord, s.target, s.circuit, s.probe_at, s.probe_expires_at, s.paused_until,
               s.tokens, s.tokens_at, t.rate_limit_per_s AS rate
          FROM unnest(p_targets) WITH ORDINALITY AS u(name, ord)
          JOIN outbox.target_state s ON s.target = u.name
          JOIN outbox.targets t ON t.name = u.name
         WHERE s.circuit <> 'closed' OR s.paused_until > now() OR t.rate_limit_per_s IS NOT NULL
         ORDER BY u.name
           FOR UPDATE OF s
    LOOP
        IF g.paused_until > now() THEN
            rooms[g.ord] := 0;
        ELSIF (g.circuit = 'open' AND g.probe_at <= now())
           OR (g.circuit = 'half_open' AND g.probe_expires_at <= now()) THEN
            rooms[g.ord] := least(rooms[g.ord], 1);   -- one probe, by this relay
            probing := probing || g.target;
        ELSIF g.circuit <> 'closed' THEN
            rooms[g.ord] := 0;
        END IF;
        IF g.rate IS NOT NULL AND rooms[g.ord] > 0 THEN
            a := least(outbox.rate_burst(g.rate),
                       coalesce(g.tokens + g.rate * extract(epoch FROM now() - g.tokens_at),
                                outbox.rate_burst(g.rate)));
            IF a < outbox.rate_claim_at_least(g.rate) THEN
                rooms[g.ord] := 0;   -- next_due_ms says when there will be enough
            ELSE
                rooms[g.ord] := least(rooms[g.ord], floor(a)::integer);
            END IF;
            metered := metered || g.target;
            avail := avail || a;
        END IF;
    END LOOP;

    RETURN QUERY
    WITH due AS (
        SELECT c.id
          FROM unnest(p_targets, rooms) AS t(name, room)
          JOIN outbox.targets AS tg ON tg.name = t.name AND tg.enabled -- disabled: rows wait
         CROSS JOIN LATERAL (
               SELECT i.id
                 FROM outbox.intents i
                WHERE i.state = 'pending' AND i.target = t.name AND i.next_attempt_at <= now()
                ORDER BY i.next_attempt_at
                LIMIT coalesce(t.room, 0)
                  FOR UPDATE SKIP LOCKED) AS c
         LIMIT p_limit
    ), claimed AS (
        UPDATE outbox.intents i
           SET state = 'in_flight',
               attempts = i.attempts + 1,
               lease_owner = p_relay,
               lease_expires_at = now() + p_lease_ms * interval '1 millisecond',
               first_attempt_at = coalesce(i.first_attempt_at, now()),
               key_sent = NULL,   -- 0025: this relay does not say
               updated_at = now()
          FROM due
         WHERE i.id = due.id
        RETURNING i.id, i.key, i.target, i.payload::text AS payload, i.attempts, i.ambiguous,
                  (extract(epoch FROM i.first_attempt_at) * 1000)::bigint AS first_attempt_ms,
                  i.traceparent   -- 0016
    ), probed AS (
        -- A probe is out only if a row was claimed for it.
        UPDATE outbox.target_state s
           SET circuit = 'half_open', probe_owner = p_relay,
               probe_expires_at = now() + p_lease_ms * interval '1 millisecond'
         WHERE s.target = ANY (probing) AND EXISTS (SELECT 1 FROM claimed c WHERE c.target = s.target)
        RETURNING s.target
    ), spent AS (
        UPDATE outbox.target_state s
           SET tokens = m.avail - (SELECT count(*) FROM claimed c WHERE c.target = s.target),
               tokens_at = now()
          FROM unnest(metered, avail) AS m(target, avail)
         WHERE s.target = m.target
        RETURNING s.target
    )
    SELECT c.id, c.key, c.target, c.payload, c.attempts, c.ambiguous, c.first_attempt_ms,
           c.target = ANY (probing), c.traceparent   -- 0016
      FROM claimed c;
END
$$;

CREATE FUNCTION outbox.claim_due(p_relay text, p_targets text[], p_rooms integer[], p_limit integer, p_lease_ms integer) RETURNS TABLE(id bigint, key text, target text, payload text, attempt integer, ambiguous boolean, first_attempt_ms bigint, probe boolean, traceparent text, key_sent boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    rooms    integer[] := p_rooms;
    probing  text[] := '{}';
    metered  text[] := '{}';
    avail    double precision[] := '{}';
    due_ids  bigint[];
    keyed    boolean[];
    g        record;
    a        double precision;
BEGIN
    -- Gated targets, locked in name order (two relays never lock in opposite
    -- orders): their rooms shrink to what the gate allows.
    FOR g IN
        SELECT u.ord, s.target, s.circuit, s.probe_at, s.probe_expires_at, s.paused_until,
               s.tokens, s.tokens_at, t.rate_limit_per_s AS rate
          FROM unnest(p_targets) WITH ORDINALITY AS u(name, ord)
          JOIN outbox.target_state s ON s.target = u.name
          JOIN outbox.targets t ON t.name = u.name
         WHERE s.circuit <> 'closed' OR s.paused_until > now() OR t.rate_limit_per_s IS NOT NULL
         ORDER BY u.name
           FOR UPDATE OF s
    LOOP
        IF g.paused_until > now() THEN
            rooms[g.ord] := 0;
        ELSIF (g.circuit = 'open' AND g.probe_at <= now())
           OR (g.circuit = 'half_open' AND g.probe_expires_at <= now()) THEN
            rooms[g.ord] := least(rooms[g.ord], 1);   -- one probe, by this relay
            probing := probing || g.target;
        ELSIF g.circuit <> 'closed' THEN
            rooms[g.ord] := 0;
        END IF;
        IF g.rate IS NOT NULL AND rooms[g.ord] > 0 THEN
            a := least(outbox.rate_burst(g.rate),
                       coalesce(g.tokens + g.rate * extract(epoch FROM now() - g.tokens_at),
                                outbox.rate_burst(g.rate)));
            IF a < outbox.rate_claim_at_least(g.rate) THEN
                rooms[g.ord] := 0;   -- next_due_ms says when there will be enough
            ELSE
                rooms[g.ord] := least(rooms[g.ord], floor(a)::integer);
            END IF;
            metered := metered || g.target;
            avail := avail || a;
        END IF;
    END LOOP;

    -- 1. The due rows, oldest first within each target, locked.
    SELECT coalesce(array_agg(c.id), '{}'), coalesce(array_agg(c.keyed), '{}')
      INTO due_ids, keyed
      FROM (SELECT d.id, tg.key_header IS NOT NULL AS keyed
              FROM unnest(p_targets, rooms) AS t(name, room)
              JOIN outbox.targets AS tg ON tg.name = t.name AND tg.enabled -- disabled: rows wait
             CROSS JOIN LATERAL (
                   SELECT i.id
                     FROM outbox.intents i
                    WHERE i.state = 'pending' AND i.target = t.name AND i.next_attempt_at <= now()
                    ORDER BY i.next_attempt_at
                    LIMIT coalesce(t.room, 0)
                      FOR UPDATE SKIP LOCKED) AS d
             LIMIT p_limit) AS c;

    -- Nothing due and no tokens to book: an idle relay's claim ends here.
    IF cardinality(due_ids) = 0 AND cardinality(metered) = 0 THEN
        RETURN;
    END IF;

    -- 2. Leased by their ids; the gates' probes and tokens.
    RETURN QUERY
    WITH claimed AS (
        UPDATE outbox.intents i
           SET state = 'in_flight',
               attempts = i.attempts + 1,
               lease_owner = p_relay,
               lease_expires_at = now() + p_lease_ms * interval '1 millisecond',
               first_attempt_at = coalesce(i.first_attempt_at, now()),
               key_sent = due.keyed,
               updated_at = now()
          FROM unnest(due_ids, keyed) AS due(id, keyed)
         WHERE i.id = due.id
        RETURNING i.id, i.key, i.target, i.payload::text AS payload, i.attempts, i.ambiguous,
                  (extract(epoch FROM i.first_attempt_at) * 1000)::bigint AS first_attempt_ms,
                  i.traceparent, i.key_sent
    ), probed AS (
        -- A probe is out only if a row was claimed for it.
        UPDATE outbox.target_state s
           SET circuit = 'half_open', probe_owner = p_relay,
               probe_expires_at = now() + p_lease_ms * interval '1 millisecond'
         WHERE s.target = ANY (probing) AND EXISTS (SELECT 1 FROM claimed c WHERE c.target = s.target)
        RETURNING s.target
    ), spent AS (
        UPDATE outbox.target_state s
           SET tokens = m.avail - (SELECT count(*) FROM claimed c WHERE c.target = s.target),
               tokens_at = now()
          FROM unnest(metered, avail) AS m(target, avail)
         WHERE s.target = m.target
        RETURNING s.target
    )
    SELECT c.id, c.key, c.target, c.payload, c.attempts, c.ambiguous, c.first_attempt_ms,
           c.target = ANY (probing), c.traceparent, c.key_sent
      FROM claimed c;
END
$$;

CREATE FUNCTION outbox.claim_unknown(p_relay text, p_limit integer, p_lease_ms integer) RETURNS TABLE(id bigint, key text, target text, attempt integer, first_attempt_ms bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RETURN QUERY
    WITH due AS (
        SELECT i.id
          FROM outbox.intents i
          JOIN outbox.targets t ON t.name = i.target
         WHERE i.state = 'unknown' AND i.next_attempt_at <= now()
           AND (t.status_url IS NOT NULL OR t.status_tool IS NOT NULL) AND t.enabled   -- 0037
           AND (i.lease_expires_at IS NULL OR i.lease_expires_at < now())
         ORDER BY i.next_attempt_at
         LIMIT p_limit
           FOR UPDATE OF i SKIP LOCKED
    )
    UPDATE outbox.intents i
       SET lease_owner = p_relay,
           lease_expires_at = now() + p_lease_ms * interval '1 millisecond',
           updated_at = now()
      FROM due
     WHERE i.id = due.id
    RETURNING i.id, i.key, i.target, i.attempts,
              (extract(epoch FROM i.first_attempt_at) * 1000)::bigint;
END
$$;

CREATE FUNCTION outbox.compensate(p_original_key text, p_key text, p_target text, p_payload jsonb) RETURNS outbox.enqueue_result
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    original outbox.intents;
    existing outbox.intents;
    result   outbox.enqueue_result;
BEGIN
    -- 0036: the front door's keys are its own.
    IF starts_with(p_key, 'mcp:') THEN
        PERFORM outbox.refuse_front_door('compensate', 'key', p_key);
    END IF;
    IF starts_with(p_original_key, 'mcp:') AND NOT outbox.operator_session() THEN
        PERFORM outbox.refuse_front_door('compensate', 'key', p_original_key);
    END IF;
    PERFORM outbox.refuse_key('compensate', p_key);

    -- 0012: locked, as the foreign key on compensates did (see above).
    SELECT * INTO original FROM outbox.intents WHERE key = p_original_key FOR KEY SHARE;
    IF NOT FOUND
       OR (original.enqueued_by IS DISTINCT FROM session_user::text AND outbox.isolated()) THEN   -- 0026
        RAISE EXCEPTION 'outbox.compensate: no intent with key %', coalesce(quote_literal(p_original_key), 'NULL')
            USING ERRCODE = 'OR008', HINT = 'A compensation undoes an intent that exists: name its key.';
    END IF;

    -- The key exists already: a retried call (same original: enqueue's rules decide
    -- on target and payload and return it), or a key reused for another action.
    SELECT * INTO existing FROM outbox.intents WHERE key = p_key;
    IF FOUND THEN
        IF existing.enqueued_by IS DISTINCT FROM session_user::text AND outbox.isolated() THEN   -- 0026
            PERFORM outbox.refuse_others_key('compensate', p_key);
        END IF;
        IF existing.id = original.id THEN
            RAISE EXCEPTION 'outbox.compensate: key % cannot compensate itself', quote_literal(p_key)
                USING ERRCODE = 'OR001', HINT = 'A compensation is a new action: give it its own key, e.g. {original key}:undo.';
        END IF;
        IF existing.compensates IS DISTINCT FROM p_original_key THEN
            RAISE EXCEPTION 'outbox.compensate: key % is already used for another action (%)', quote_literal(p_key),
                            CASE WHEN existing.compensates IS NULL THEN 'an intent that compensates nothing'
                                 ELSE 'the compensation of ' || quote_literal(existing.compensates) END
                USING ERRCODE = 'OR001', HINT = 'An idempotency key names one action; use a new key for a new action.';
        END IF;
        RETURN outbox.enqueue(p_key, p_target, p_payload, original.run_id);
    END IF;

    IF original.state NOT IN ('succeeded', 'unknown') THEN
        RAISE EXCEPTION 'outbox.compensate: key % is %; only a succeeded or unknown intent can be compensated',
                        quote_literal(p_original_key),
                        CASE WHEN original.state = 'pending' AND original.ambiguous
                             THEN 'pending after an ambiguous attempt (its outcome is not settled yet)'
                             ELSE original.state::text END
            USING ERRCODE = 'OR007',
                  HINT = CASE
                      WHEN original.state IN ('pending', 'awaiting_approval') AND NOT original.ambiguous
                           AND (SELECT d.may_have_executed FROM outbox.delivery_summary(original.id) d) = 0   -- 0026
                          THEN 'The target has not acted on it: cancel it instead (outbox.cancel, outbox.cancel_run).'
                      WHEN original.state IN ('pending', 'in_flight', 'awaiting_approval')
                          THEN 'It is being delivered: compensate once its outcome is succeeded or unknown.'
                      ELSE 'The target did not act on it: there is nothing to compensate.'
                  END;
    END IF;

    result := outbox.enqueue(p_key, p_target, p_payload, original.run_id);
    IF result.inserted THEN
        UPDATE outbox.intents SET compensates = p_original_key WHERE id = result.intent_id;
    ELSE
        -- Enqueued by a concurrent transaction after our look (enqueue waited for it to
        -- commit, and has checked target and payload): is it the same compensation?
        SELECT * INTO existing FROM outbox.intents WHERE id = result.intent_id;
        IF existing.compensates IS DISTINCT FROM p_original_key THEN
            RAISE EXCEPTION 'outbox.compensate: key % is already used for another action (%)', quote_literal(p_key),
                            CASE WHEN existing.compensates IS NULL THEN 'an intent that compensates nothing'
                                 ELSE 'the compensation of ' || quote_literal(existing.compensates) END
                USING ERRCODE = 'OR001', HINT = 'An idempotency key names one action; use a new key for a new action.';
        END IF;
    END IF;
    RETURN result;
END
$$;

CREATE FUNCTION outbox.compensations(p_key text) RETURNS TABLE(key text, target text, status text, state outbox.intent_state, attempts integer, created_at timestamp with time zone, updated_at timestamp with time zone)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT c.key, c.target, outbox.visible_status(c.state, c.ambiguous), c.state, c.attempts,
           c.created_at, c.updated_at
      FROM outbox.intents c
     WHERE c.compensates = p_key
       AND outbox.caller_may_see(c.enqueued_by)   -- 0026
     ORDER BY c.id
$$;

CREATE FUNCTION outbox.delivery_summary(p_intent bigint, OUT sent integer, OUT may_have_executed integer, OUT status_url_said_no boolean, OUT story text) RETURNS record
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT s.sent, s.doubtful, s.url_no,
           CASE WHEN s.sent > 0 THEN
               CASE WHEN s.sent = 1 THEN '1 attempt was sent: ' ELSE s.sent || ' attempts were sent: ' END
               || CASE WHEN s.doubtful = 0 AND s.sent = 1
                       THEN format('the target refused it with HTTP %s and did not act', coalesce(s.last_http::text, '4xx'))
                       WHEN s.doubtful = 0
                       THEN format('the target refused each, the last with HTTP %s, and did not act',
                                   coalesce(s.last_http::text, '4xx'))
                       WHEN s.url_no AND s.sent = 1 THEN 'the target''s status URL reported that it did not execute'
                       WHEN s.url_no THEN 'the target''s status URL reported that none executed'
                       WHEN s.person_no THEN 'a person resolved that the target did not act'
                       WHEN s.sent = 1 THEN 'it may have executed'
                       ELSE 'one of them may have executed' END
           END
      FROM (SELECT count(*) FILTER (WHERE x.delivery)::integer AS sent,
                   count(*) FILTER (WHERE outbox.attempt_may_have_executed(x.class, x.request_sent, x.http_status))::integer
                       AS doubtful,
                   (array_agg(x.http_status ORDER BY x.id DESC) FILTER (WHERE x.delivery))[1] AS last_http,
                   coalesce(bool_or(x.class = 'reconciled_not_executed'), false) AS url_no,
                   coalesce(bool_or(x.class = 'resolved' AND x.error LIKE 'resolved failed:%'), false) AS person_no
              FROM (SELECT a.id, a.class, a.request_sent, a.http_status, a.error,
                           a.class IN ('not_sent', 'ambiguous', 'succeeded', 'retry_later', 'key_conflict',
                                       'permanent_failure')
                           AND a.request_sent IS DISTINCT FROM false AS delivery
                      FROM outbox.attempts a
                     WHERE a.intent_id = p_intent) x) s
$$;

CREATE FUNCTION outbox.differing_fields(a jsonb, b jsonb) RETURNS text[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT coalesce(array_agg(k ORDER BY k), '{}')
      FROM (SELECT jsonb_object_keys(a) AS k UNION SELECT jsonb_object_keys(b)) AS keys
     WHERE a -> k IS DISTINCT FROM b -> k
$$;

CREATE FUNCTION outbox.enqueue(p_key text, p_target text, p_payload jsonb, p_run_id text DEFAULT NULL::text, p_not_before timestamp with time zone DEFAULT NULL::timestamp with time zone, p_ordering_key text DEFAULT NULL::text, p_traceparent text DEFAULT NULL::text) RETURNS outbox.enqueue_result
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF starts_with(p_key, 'mcp:') THEN
        PERFORM outbox.refuse_front_door('enqueue', 'key', p_key);
    ELSIF starts_with(p_run_id, 'mcp:') THEN
        PERFORM outbox.refuse_front_door('enqueue', 'run id', p_run_id);
    ELSIF starts_with(p_ordering_key, 'mcp:') THEN
        PERFORM outbox.refuse_front_door('enqueue', 'ordering key', p_ordering_key);
    END IF;
    RETURN outbox.enqueue_any(p_key, p_target, p_payload, p_run_id, p_not_before, p_ordering_key, p_traceparent);
END
$$;

CREATE FUNCTION outbox.enqueue_any(p_key text, p_target text, p_payload jsonb, p_run_id text DEFAULT NULL::text, p_not_before timestamp with time zone DEFAULT NULL::timestamp with time zone, p_ordering_key text DEFAULT NULL::text, p_traceparent text DEFAULT NULL::text) RETURNS outbox.enqueue_result
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
DECLARE
    flag      text;     -- 0021: set_config's answer, unused (an assignment keeps FOUND)
    wake      boolean;
    tgt       outbox.targets;
    existing  outbox.intents;
    stone     outbox.tombstones;
    fp        bytea;
    new_id    bigint;
    new_state outbox.intent_state := 'pending';
    fields    text[];
    result    outbox.enqueue_result;
    payload_text text;
    too_deep  boolean := false;
    locked    boolean;
    wait      boolean := false;   -- 0013: held behind a live intent of its group
    trace     text := coalesce(p_traceparent, nullif(current_setting('outbox.traceparent', true), ''));   -- 0016
BEGIN
    -- Every key outside the alphabet matches this (outbox.refuse_key says why).
    IF p_key IS NULL OR p_key = '' OR octet_length(p_key) > 255
       OR p_key ~ '^ | $|^\.\.?$|[\u0001-\u001f\u007f-\u00a0\u00ad\u034f\u061c\u115f\u1160\u1680\u17b4\u17b5\u180b-\u180f\u2000-\u200f\u2028-\u202f\u205f-\u206f\u3000\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\ufffe\uffff\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]' THEN
        PERFORM outbox.refuse_key('enqueue', p_key);
    END IF;
    -- 0016: the caller's W3C trace context, checked (outbox.refuse_traceparent says why).
    IF trace IS NOT NULL AND (trace !~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
                              OR substr(trace, 4, 32) = '00000000000000000000000000000000'
                              OR substr(trace, 37, 16) = '0000000000000000') THEN
        PERFORM outbox.refuse_traceparent(trace, p_traceparent IS NULL);
    END IF;
    payload_text := p_payload::text;
    -- Only a payload with more than 100 opening brackets can be nested that
    -- deep (replace() counts them faster than anything else here).
    IF 2 * octet_length(payload_text) - octet_length(replace(payload_text, '{', ''))
                                      - octet_length(replace(payload_text, '[', '')) > 100 THEN
        too_deep := jsonb_path_exists(p_payload, 'strict $.**{100} ? (@.type() == "object" || @.type() == "array")');
    END IF;

    -- The target lock of 0010; see there.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        PERFORM 1 FROM outbox.targets WHERE name = p_target FOR KEY SHARE;
        -- 0012: a prune of this key committed after our snapshot fails this with 40001.
        PERFORM 1 FROM outbox.intents WHERE key = p_key FOR KEY SHARE;
    END IF;
    locked := pg_advisory_xact_lock_shared(1330774017, hashtext(p_target)) IS NOT NULL;
    -- 0013: an ordered intent takes its place in its group (the group's lock, until
    -- this transaction ends: the id drawn below follows every earlier enqueue of the
    -- group); wait: an earlier intent of the group is live, the new one is held.
    IF p_ordering_key IS NOT NULL THEN
        wait := outbox.ordering_place(p_key, p_ordering_key);
    END IF;

    flag := set_config('outbox.in_enqueue', 'on', true);    -- 0021: the INSERT trigger's WHEN
    INSERT INTO outbox.intents AS i (key, target, payload, fingerprint, state, run_id, next_attempt_at,
                                     ordering_key, not_before, traceparent)   -- 0013, 0016
    SELECT p_key, t.name, p_payload,
           CASE WHEN cardinality(t.volatile_paths) = 0
                     AND (strpos(payload_text, '.') = 0 OR payload_text !~ '[0-9]\.[0-9]*0')
                THEN sha256(convert_to(payload_text, 'UTF8'))
                ELSE outbox.fingerprint(p_payload, t.volatile_paths) END,
           CASE WHEN t.approval_rule IS NOT NULL AND outbox.needs_approval(p_payload, t.approval_rule)
                THEN 'awaiting_approval'::outbox.intent_state
                ELSE 'pending'::outbox.intent_state END,
           p_run_id, CASE WHEN wait THEN 'infinity' ELSE greatest(now(), coalesce(p_not_before, now())) END,   -- 0013
           p_ordering_key, CASE WHEN wait THEN p_not_before END, trace   -- 0013, 0016
      FROM outbox.targets t
     WHERE t.name = p_target AND t.enabled AND jsonb_typeof(p_payload) = 'object'
       AND octet_length(payload_text) <= t.max_payload_bytes AND NOT too_deep
       AND (t.protocol = 'http' OR outbox.mcp_payload_ok(p_payload))   -- 0037
    ON CONFLICT (key) DO NOTHING
    RETURNING i.id, i.state, i.fingerprint,
              i.state = 'pending' AND i.next_attempt_at <= now()
              AND EXISTS (SELECT 1 FROM outbox.relays
                           WHERE idle AND heartbeat_at > now() - interval '2 minutes')
         INTO new_id, new_state, fp, wake;
    flag := set_config('outbox.in_enqueue', 'off', true);  -- 0021
    IF FOUND THEN
        -- 0012: a pruned key is remembered: take the row back, answer from the tombstone.
        SELECT s.* INTO stone FROM outbox.tombstones s   -- 0017: inline, was outbox.tombstone_of
         WHERE s.key_hash = substring(sha256(convert_to(p_key, 'UTF8')) FROM 1 FOR 16) AND s.forget_at > now()
         ORDER BY s.pruned_at DESC LIMIT 1;
        IF stone.intent_id IS NOT NULL THEN
            DELETE FROM outbox.intents WHERE id = new_id;
            RETURN outbox.enqueue_remembered(p_key, p_target, fp, stone);
        END IF;
        IF wake THEN
            PERFORM pg_notify('outbox_intents', '');
        END IF;
        result := (p_key, new_id, p_target, new_state::text, true, NULL, NULL, NULL);
        RETURN result;
    END IF;

    -- The careful path (as in 0008).
    new_state := 'pending';
    SELECT * INTO tgt FROM outbox.targets WHERE name = p_target;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'outbox.enqueue: unknown target %', coalesce(quote_literal(p_target), 'NULL')
            USING ERRCODE = 'OR002', HINT = 'Targets are registered by an admin in outbox.targets.';
    END IF;
    IF NOT tgt.enabled THEN
        RAISE EXCEPTION 'outbox.enqueue: target % is disabled', quote_literal(p_target)
            USING ERRCODE = 'OR003';
    END IF;
    IF p_payload IS NULL OR jsonb_typeof(p_payload) <> 'object' THEN
        RAISE EXCEPTION 'outbox.enqueue: payload for key % must be a JSON object, got %',
                        quote_literal(p_key), coalesce(jsonb_typeof(p_payload), 'NULL')
            USING ERRCODE = 'OR005';
    END IF;
    IF octet_length(payload_text) > tgt.max_payload_bytes THEN
        RAISE EXCEPTION 'outbox.enqueue: payload for key % is % bytes; target % accepts at most %',
                        quote_literal(p_key), octet_length(payload_text), quote_literal(p_target),
                        tgt.max_payload_bytes
            USING ERRCODE = 'OR006';
    END IF;
    IF too_deep THEN
        RAISE EXCEPTION 'outbox.enqueue: payload for key % is nested deeper than 100 levels', quote_literal(p_key)
            USING ERRCODE = 'OR010',
                  HINT = 'At most 100 objects and arrays may enclose one another in a payload.';
    END IF;

    -- 0037: an mcp target's payload is a tools/call.
    IF tgt.protocol = 'mcp' AND NOT outbox.mcp_payload_ok(p_payload) THEN
        RAISE EXCEPTION 'outbox.enqueue: target % speaks MCP: the payload must be {"tool": NAME, "arguments": {...}} and nothing else',
                        quote_literal(p_target)
            USING ERRCODE = 'OR027',
                  DETAIL = 'An intent for an mcp target is delivered as that server''s tools/call: "tool" names the upstream tool (a string of 1 to 128 characters), "arguments" is its arguments object.',
                  HINT = 'Send e.g. {"tool": "create_ticket", "arguments": {"title": "..."}}.';
    END IF;

    IF cardinality(tgt.volatile_paths) = 0
       AND (strpos(payload_text, '.') = 0 OR payload_text !~ '[0-9]\.[0-9]*0') THEN
        fp := sha256(convert_to(payload_text, 'UTF8'));
    ELSE
        fp := outbox.fingerprint(p_payload, tgt.volatile_paths);
    END IF;
    IF tgt.approval_rule IS NOT NULL AND outbox.needs_approval(p_payload, tgt.approval_rule) THEN
        new_state := 'awaiting_approval';
    END IF;

    -- Not inserted above, yet every check passed: the key is taken, or the
    -- target changed between the two statements. Insert once more (the
    -- latter), or find the existing row (the former).
    flag := set_config('outbox.in_enqueue', 'on', true);    -- 0021: the INSERT trigger's WHEN
    INSERT INTO outbox.intents AS i (key, target, payload, fingerprint, state, run_id, next_attempt_at,
                                     ordering_key, not_before, traceparent)   -- 0013, 0016
    VALUES (p_key, p_target, p_payload, fp, new_state, p_run_id,
            CASE WHEN wait THEN 'infinity' ELSE greatest(now(), coalesce(p_not_before, now())) END,   -- 0013
            p_ordering_key, CASE WHEN wait THEN p_not_before END, trace)   -- 0013, 0016
    ON CONFLICT (key) DO NOTHING
    RETURNING * INTO existing;
    flag := set_config('outbox.in_enqueue', 'off', true);  -- 0021
    IF FOUND THEN
        -- 0012: as on the fast path.
        SELECT s.* INTO stone FROM outbox.tombstones s   -- 0017: inline, was outbox.tombstone_of
         WHERE s.key_hash = substring(sha256(convert_to(p_key, 'UTF8')) FROM 1 FOR 16) AND s.forget_at > now()
         ORDER BY s.pruned_at DESC LIMIT 1;
        IF stone.intent_id IS NOT NULL THEN
            DELETE FROM outbox.intents WHERE id = existing.id;
            RETURN outbox.enqueue_remembered(p_key, p_target, fp, stone);
        END IF;
        IF existing.state = 'pending' AND existing.next_attempt_at <= now()
           AND EXISTS (SELECT 1 FROM outbox.relays WHERE idle AND heartbeat_at > now() - interval '2 minutes') THEN
            PERFORM pg_notify('outbox_intents', '');
        END IF;
        result := (existing.key, existing.id, existing.target, new_state::text, true, NULL, NULL, NULL);
        RETURN result;
    END IF;

    SELECT * INTO existing FROM outbox.intents WHERE key = p_key;
    IF NOT FOUND THEN
        -- 0012: pruned after our INSERT saw it.
        SELECT s.* INTO stone FROM outbox.tombstones s   -- 0017: inline, was outbox.tombstone_of
         WHERE s.key_hash = substring(sha256(convert_to(p_key, 'UTF8')) FROM 1 FOR 16) AND s.forget_at > now()
         ORDER BY s.pruned_at DESC LIMIT 1;
        IF stone.intent_id IS NOT NULL THEN
            RETURN outbox.enqueue_remembered(p_key, p_target, fp, stone);
        END IF;
        RAISE EXCEPTION 'outbox.enqueue: key % was enqueued by a concurrent transaction not visible to this snapshot',
                        quote_literal(p_key)
            USING ERRCODE = '40001', HINT = 'Retry the transaction.';
    END IF;

    -- 0026: another login's key, for an isolated caller: taken, and nothing more.
    -- 0036: not for the front door's keys (its isolation is by MCP client, in the key).
    IF existing.enqueued_by IS DISTINCT FROM session_user::text AND NOT starts_with(p_key, 'mcp:')
       AND outbox.isolated() THEN
        PERFORM outbox.refuse_others_key('enqueue', p_key);
    END IF;

    IF existing.target <> p_target THEN
        RAISE EXCEPTION 'outbox.enqueue: key % is already used for target %, not %',
                        quote_literal(p_key), quote_literal(existing.target), quote_literal(p_target)
            USING ERRCODE = 'OR001',
                  HINT = 'An idempotency key names one action; use a new key for a new action.';
    END IF;

    -- 0013: the ordering key is part of the action, as the target is.
    IF existing.ordering_key IS DISTINCT FROM p_ordering_key THEN
        RAISE EXCEPTION 'outbox.enqueue: key % is already used %, not %', quote_literal(p_key),
                        coalesce('in ordering group ' || quote_literal(existing.ordering_key), 'without an ordering key'),
                        coalesce('in ordering group ' || quote_literal(p_ordering_key), 'without one')
            USING ERRCODE = 'OR001',
                  HINT = 'An idempotency key names one action; use a new key for a new action.';
    END IF;

    IF existing.fingerprint <> fp THEN
        fields := outbox.differing_fields(outbox.fingerprint_doc(existing.payload, tgt.volatile_paths),
                                          outbox.fingerprint_doc(p_payload, tgt.volatile_paths));
        IF tgt.on_mismatch = 'keep_original' THEN
            INSERT INTO outbox.mismatches (key, payload, fingerprint, fields)
            VALUES (p_key, p_payload, fp, fields);
            UPDATE outbox.intents SET mismatches = mismatches + 1 WHERE id = existing.id;
        ELSE
            RAISE EXCEPTION 'outbox.enqueue: key % was already used with a different payload (fields that differ: %)',
                            quote_literal(p_key), array_to_string(fields, ', ')
                USING ERRCODE = 'OR001',
                      DETAIL = format('target %s, on_mismatch = reject', existing.target),
                      HINT = 'An idempotency key names one action; use a new key for a new action, or send the same arguments.';
        END IF;
    END IF;

    result := (existing.key, existing.id, existing.target,
               outbox.visible_status(existing.state, existing.ambiguous), false,
               CASE WHEN existing.state IN ('succeeded', 'failed') THEN existing.response_status END,
               CASE WHEN existing.state IN ('succeeded', 'failed') THEN existing.response_body END,
               fields);
    RETURN result;
END
$_$;

CREATE FUNCTION outbox.enqueue_remembered(p_key text, p_target text, p_fingerprint bytea, s outbox.tombstones) RETURNS outbox.enqueue_result
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    result outbox.enqueue_result;
BEGIN
    IF s.enqueued_by IS DISTINCT FROM session_user::text AND NOT starts_with(p_key, 'mcp:')   -- 0036
       AND outbox.isolated() THEN   -- 0026
        PERFORM outbox.refuse_others_key('enqueue', p_key);
    END IF;
    IF s.target <> p_target THEN
        RAISE EXCEPTION 'outbox.enqueue: key % is already used for target %, not %',
                        quote_literal(p_key), quote_literal(s.target), quote_literal(p_target)
            USING ERRCODE = 'OR001',
                  DETAIL = format('Its intent settled %s at %s and was pruned at %s; the key is remembered until %s.',
                                  s.state, outbox.utc_text(s.settled_at), outbox.utc_text(s.pruned_at),
                                  outbox.utc_text(s.forget_at)),
                  HINT = 'An idempotency key names one action; use a new key for a new action.';
    END IF;
    IF s.fingerprint <> substring(p_fingerprint FROM 1 FOR 16)
       AND (SELECT t.on_mismatch FROM outbox.targets t WHERE t.name = p_target) IS DISTINCT FROM 'keep_original' THEN
        RAISE EXCEPTION 'outbox.enqueue: key % was already used with a different payload (its intent was pruned at %: the fields that differ are no longer known)',
                        quote_literal(p_key), outbox.utc_text(s.pruned_at)
            USING ERRCODE = 'OR001',
                  DETAIL = format('target %s, on_mismatch = reject; the key is remembered until %s', s.target,
                                  outbox.utc_text(s.forget_at)),
                  HINT = 'An idempotency key names one action; use a new key for a new action, or send the same arguments.';
    END IF;
    result := (p_key, s.intent_id, s.target, outbox.visible_status(s.state, false), false,
               CASE WHEN s.state IN ('succeeded', 'failed') THEN s.response_status END, NULL, NULL);
    RETURN result;
END
$$;

CREATE FUNCTION outbox.fingerprint(payload jsonb, volatile_paths text[]) RETURNS bytea
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    AS $$
DECLARE
    doc  jsonb := payload;
    path text;
    t    text;
BEGIN
    FOREACH path IN ARRAY coalesce(volatile_paths, '{}'::text[]) LOOP
        doc := doc #- path::text[];
    END LOOP;
    t := doc::text;
    IF t ~ '[0-9]\.[0-9]*0' THEN
        -- (the same rewrite as in outbox.canonical)
        t := replace(replace(t, '\\', E'\x01'), '\"', E'\x02');
        IF t ~ '^(?:[^"]*"[^"]*")*[^"]*"[^"]*\.[0-9]*0' THEN
            t := regexp_replace(t, '("[^"]*")|([0-9]\.[0-9]*[1-9])0+\M|\.0+\M', '\1\2', 'g');
        ELSE
            t := regexp_replace(regexp_replace(replace(replace(replace(t, '.0,', ','), '.0]', ']'), '.0}', '}'),
                                               '([0-9]\.[0-9]*[1-9])0+\M', '\1', 'g'),
                                '\.0+\M', '', 'g');
        END IF;
        t := replace(replace(t, E'\x02', '\"'), E'\x01', '\\');
    END IF;
    RETURN sha256(convert_to(t, 'UTF8'));
END
$$;

CREATE FUNCTION outbox.fingerprint_doc(payload jsonb, volatile_paths text[]) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    AS $$
DECLARE
    doc  jsonb := payload;
    path text;
BEGIN
    FOREACH path IN ARRAY coalesce(volatile_paths, '{}'::text[]) LOOP
        doc := doc #- path::text[];
    END LOOP;
    -- jsonb prints 1e0 as 1; only a trailing zero after a decimal point
    -- can spell a number differently. Skip the walk when there is none.
    IF doc::text ~ '[0-9]\.[0-9]*0' THEN
        doc := outbox.canonical(doc);
    END IF;
    RETURN doc;
END
$$;

CREATE FUNCTION outbox.intent_event(i outbox.intents, p_class outbox.attempt_class, p_http integer, p_error text) RETURNS jsonb
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT jsonb_strip_nulls(jsonb_build_object(
               'event', CASE WHEN i.state = 'failed' THEN 'intent_failed' ELSE 'intent_unknown' END,
               'key', i.key, 'target', i.target, 'class', p_class, 'http_status', p_http,
               'error', left(p_error, 200), 'at', outbox.utc_text(now()),
               'ordering_key', i.ordering_key,
               'blocks', CASE WHEN i.ordering_key IS NOT NULL THEN
                             nullif((SELECT count(*) FROM outbox.intents l
                                      WHERE l.ordering_key = i.ordering_key AND l.id > i.id
                                        AND l.state NOT IN ('succeeded', 'cancelled')), 0) END))
$$;

-- Deleting intents deletes their attempts and mismatches, and refuses to
-- leave a compensation without its original (0012; replaces ON DELETE CASCADE
-- and the foreign keys on intents.key).
CREATE FUNCTION outbox.intents_delete_history() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    ids      bigint[];
    keys     text[];
    dangling text;
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        TRUNCATE outbox.attempts, outbox.mismatches;
        RETURN NULL;
    END IF;
    SELECT array_agg(o.id), array_agg(o.key) INTO ids, keys FROM old_intents o;
    DELETE FROM outbox.attempts a WHERE a.intent_id = ANY (ids);
    DELETE FROM outbox.mismatches m WHERE m.key = ANY (keys);
    SELECT c.key INTO dangling FROM outbox.intents c WHERE c.compensates = ANY (keys) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'outbox.intents: intent % compensates a deleted intent', quote_literal(dangling)
            USING ERRCODE = 'foreign_key_violation',
                  DETAIL = 'intents.compensates names the key of an existing intent; delete both together.';
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION outbox.intents_delete_history() IS 'Deleting intents deletes their attempts and mismatches, and refuses to leave a compensation without its original (0012; replaces ON DELETE CASCADE and the foreign keys on intents.key).';

-- Whether the session's login is isolated (outbox.isolated_logins), unless it
-- is a member of outbox_operator or outbox_relay (0026).
CREATE FUNCTION outbox.isolated() RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
    SELECT EXISTS (SELECT 1 FROM outbox.isolated_logins l WHERE l.login = session_user::text)
           AND NOT pg_catalog.pg_has_role(session_user, 'outbox_operator', 'MEMBER')
           AND NOT pg_catalog.pg_has_role(session_user, 'outbox_relay', 'MEMBER')
$$;
COMMENT ON FUNCTION outbox.isolated() IS 'Whether the session''s login is isolated (outbox.isolated_logins), unless it is a member of outbox_operator or outbox_relay (0026).';

CREATE FUNCTION outbox.key_hash(p_key text) RETURNS bytea
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
    SELECT substring(sha256(convert_to(p_key, 'UTF8')) FROM 1 FOR 16)
$$;

CREATE FUNCTION outbox.links(p_key text) RETURNS TABLE(key text, relation text, other_key text, other_status text)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT l.key, l.relation, l.other_key, l.other_status
      FROM (SELECT i.key, 'compensates'::text AS relation, o.key AS other_key,
                   outbox.visible_status(o.state, o.ambiguous) AS other_status, 0 AS side, o.id
              FROM outbox.intents i
              JOIN outbox.intents o ON o.key = i.compensates
             WHERE i.key = p_key
               AND outbox.caller_may_see(i.enqueued_by) AND outbox.caller_may_see(o.enqueued_by)   -- 0026
            UNION ALL
            SELECT p_key, 'compensated_by', c.key, outbox.visible_status(c.state, c.ambiguous), 1, c.id
              FROM outbox.intents c
             WHERE c.compensates = p_key
               AND outbox.caller_may_see(c.enqueued_by)) AS l   -- 0026
     ORDER BY l.side, l.id
$$;

CREATE FUNCTION outbox.live_counts() RETURNS TABLE(state outbox.intent_state, intents bigint, oldest_due_age_s double precision)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RETURN QUERY
    SELECT 'pending'::outbox.intent_state, count(*),
           coalesce(extract(epoch FROM now() - min(i.next_attempt_at) FILTER (WHERE i.next_attempt_at <= now()))::float8, 0)
      FROM outbox.intents i WHERE i.state = 'pending'
    UNION ALL
    SELECT 'in_flight', count(*), NULL FROM outbox.intents i WHERE i.state = 'in_flight'
    UNION ALL
    SELECT 'unknown', count(*), NULL FROM outbox.intents i WHERE i.state = 'unknown'
    UNION ALL
    SELECT 'awaiting_approval', count(*), NULL FROM outbox.intents i WHERE i.state = 'awaiting_approval';
END
$$;

CREATE FUNCTION outbox.locked_intent(p_key text, p_operation text) RETURNS outbox.intents
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    row outbox.intents;
BEGIN
    SELECT * INTO row FROM outbox.intents WHERE key = p_key FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'outbox.%: no intent with key %', p_operation, coalesce(quote_literal(p_key), 'NULL')
            USING ERRCODE = 'OR008';
    END IF;
    RETURN row;
END
$$;

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

CREATE FUNCTION outbox.mcp_call(p_token_hash bytea, p_tool text, p_key text, p_arguments jsonb, p_run_id text DEFAULT NULL::text, p_ordering_key text DEFAULT NULL::text, p_traceparent text DEFAULT NULL::text, p_task boolean DEFAULT false, p_task_ttl_ms bigint DEFAULT NULL::bigint) RETURNS outbox.mcp_answer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    c      outbox.mcp_clients;
    m      outbox.mcp_tools;
    r      outbox.enqueue_result;
    a      outbox.mcp_answer;
    ikey   text;
    args   jsonb := coalesce(p_arguments, '{}'::jsonb);
    existing_payload jsonb;
    existing_target  text;
    existing_group   text;
    stone  outbox.tombstones;
    fields text[] := '{}';
    why    text[] := '{}';
    others text;
    grp    text;
    run    text;
BEGIN
    SELECT * INTO c FROM outbox.mcp_clients WHERE token_hash = p_token_hash;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'outbox.mcp_call: unknown client' USING ERRCODE = 'OR022';
    END IF;
    SELECT * INTO m FROM outbox.mcp_tools
     WHERE tool = p_tool AND enabled AND (c.tools IS NULL OR tool = ANY (c.tools));
    IF NOT FOUND THEN
        RAISE EXCEPTION 'outbox.mcp_call: no tool % for client %', quote_literal(p_tool), quote_literal(c.name)
            USING ERRCODE = 'OR023';
    END IF;
    -- 0037: an mcp target is called with the upstream tool's name and the arguments.
    IF (SELECT t.protocol FROM outbox.targets t WHERE t.name = m.target) = 'mcp' THEN
        args := jsonb_build_object('tool', coalesce(m.upstream_tool, m.tool), 'arguments', args);
    END IF;
    IF p_key IS NULL OR p_key = '' THEN
        RAISE EXCEPTION 'outbox.mcp_call: no idempotency key' USING ERRCODE = 'OR004';
    END IF;
    ikey := 'mcp:' || c.name || ':' || p_key;
    -- A client's ordering groups and runs are its own, like its keys: another
    -- client naming the same group neither waits behind it nor holds it.
    grp := 'mcp:' || c.name || ':' || p_ordering_key;
    run := 'mcp:' || c.name || ':' || p_run_id;
    IF octet_length(ikey) > 255 THEN
        RAISE EXCEPTION 'the idempotency key is % bytes long; the limit for client % is % bytes',
                        octet_length(p_key), quote_literal(c.name), 255 - octet_length(ikey) + octet_length(p_key)
            USING ERRCODE = 'OR004';
    END IF;
    -- The same call again (the same key and arguments): its answer, with no
    -- enqueue. A new key: enqueue, with no subtransaction (a concurrent call
    -- of the same key with other arguments then raises OR001 to the caller,
    -- which answers key_conflict). Other arguments for a known key: enqueue
    -- decides (volatile fields, keep_original), and OR001 is caught here to
    -- name what differs.
    SELECT i.payload, i.target, i.ordering_key INTO existing_payload, existing_target, existing_group
      FROM outbox.intents i WHERE i.key = ikey;
    IF FOUND AND existing_payload = args AND existing_target = m.target
       AND existing_group IS NOT DISTINCT FROM grp AND NOT p_task THEN
        RETURN outbox.mcp_answer_of(c.name, p_key, p_tool, false, false);
    END IF;
    IF existing_payload IS NULL THEN
        r := outbox.enqueue_any(ikey, m.target, args, run, NULL, grp, p_traceparent);
    ELSE BEGIN
        r := outbox.enqueue_any(ikey, m.target, args, run, NULL, grp, p_traceparent);
    EXCEPTION WHEN SQLSTATE 'OR001' THEN
        a.client := c.name;
        a.key := p_key;
        a.intent_key := ikey;
        a.tool := p_tool;
        a.target := m.target;
        a.status := 'key_conflict';
        a.final := true;
        a.inserted := false;
        SELECT i.payload, i.target, i.ordering_key INTO existing_payload, existing_target, existing_group
          FROM outbox.intents i WHERE i.key = ikey;
        IF NOT FOUND THEN   -- pruned since: what its tombstone remembers
            stone := outbox.tombstone_of(ikey);
            existing_target := stone.target;
            existing_group := grp;
        END IF;
        -- 0036: another tool (its target differs), another ordering group,
        -- then the arguments' fields.
        IF existing_target IS DISTINCT FROM m.target THEN
            fields := fields || 'tool'::text;
            others := (SELECT string_agg(quote_literal(t.tool), ' or ' ORDER BY t.tool) FROM outbox.mcp_tools t
                        WHERE t.target = existing_target AND (c.tools IS NULL OR t.tool = ANY (c.tools)));
            why := why || ('it was used with another tool' || coalesce(' (' || others || ')', '') || ', not '
                           || quote_literal(p_tool));
        END IF;
        IF existing_group IS DISTINCT FROM grp THEN
            fields := fields || 'ordering_key'::text;
            why := why || ('it was used ' || CASE WHEN existing_group IS NULL THEN 'without an ordering key'
                                                  ELSE 'with another ordering key' END);
        END IF;
        IF existing_payload IS NOT NULL AND existing_payload <> args THEN
            fields := fields || outbox.differing_fields(existing_payload, args);
            why := why || ('it was used with other arguments'
                           || coalesce(' (fields that differ: '
                                       || array_to_string(outbox.differing_fields(existing_payload, args), ', ') || ')', ''));
        END IF;
        a.conflict_fields := nullif(fields, '{}');
        a.message := 'key_conflict: this key was already used for another action: '
                     || coalesce(nullif(array_to_string(why, '; '), ''), 'it was used with other arguments')
                     || '; nothing was sent. Use the same tool and arguments, or a new key for a new action.';
        RETURN a;
    END;
    END IF;
    IF p_task THEN
        -- 0036: an expired task of this key is replaced (a new id); a live one stays.
        INSERT INTO outbox.mcp_tasks AS k (task_id, client, intent_key, tool, ttl_ms, expires_at)
        VALUES ('task-' || replace(gen_random_uuid()::text, '-', '') || replace(gen_random_uuid()::text, '-', ''),
                c.name, ikey, p_tool, p_task_ttl_ms, now() + p_task_ttl_ms * interval '1 millisecond')
        ON CONFLICT (client, intent_key) DO UPDATE
           SET task_id = excluded.task_id, tool = excluded.tool, ttl_ms = excluded.ttl_ms,
               expires_at = excluded.expires_at, created_at = now()
         WHERE k.expires_at <= now();
    END IF;
    IF r.inserted AND NOT p_task THEN
        -- A new intent: what enqueue said is all there is to say (no second look).
        a.client := c.name;
        a.key := p_key;
        a.intent_key := ikey;
        a.tool := p_tool;
        a.target := m.target;
        a.status := r.status;
        a.state := r.status::outbox.intent_state;
        a.final := false;
        a.inserted := true;
        a.attempts := 0;
        a.message := outbox.mcp_message(r.status,
                                        CASE WHEN r.status = 'awaiting_approval' THEN outbox.mcp_held_by(m.target, args)
                                             WHEN r.status = 'pending' AND NOT outbox.relay_alive()
                                                 THEN 'no relay has claimed it yet: none is running'
                                             WHEN r.status = 'pending' THEN 'waiting for delivery' END, NULL);
        a.updated_at := now();
        RETURN a;
    END IF;
    RETURN outbox.mcp_answer_of(c.name, p_key, p_tool, r.inserted, p_task);
END
$$;

CREATE FUNCTION outbox.mcp_client(p_name text, p_token text, p_tools text[] DEFAULT NULL::text[]) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
DECLARE
    unknown_tools text[];
BEGIN
    IF p_name IS NULL OR p_name !~ '^[A-Za-z0-9_.-]{1,64}$' THEN
        RAISE EXCEPTION 'outbox.mcp_client: a client name is 1 to 64 of A-Z a-z 0-9 _ . -, got %',
                        coalesce(quote_literal(p_name), 'NULL')
            USING ERRCODE = 'OR021';
    END IF;
    IF p_token IS NULL OR octet_length(p_token) < 32 THEN
        RAISE EXCEPTION 'outbox.mcp_client: the token of client % must be at least 32 bytes', quote_literal(p_name)
            USING ERRCODE = 'OR021', HINT = 'For example: openssl rand -hex 32';
    END IF;
    SELECT array_agg(t) INTO unknown_tools
      FROM unnest(p_tools) t WHERE NOT EXISTS (SELECT 1 FROM outbox.mcp_tools m WHERE m.tool = t);
    IF unknown_tools IS NOT NULL THEN
        RAISE EXCEPTION 'outbox.mcp_client: no such tool: %', array_to_string(unknown_tools, ', ')
            USING ERRCODE = 'OR021';
    END IF;
    INSERT INTO outbox.mcp_clients AS c (name, token_hash, tools)
    VALUES (p_name, sha256(convert_to(p_token, 'UTF8')), p_tools)
    ON CONFLICT (name) DO UPDATE SET token_hash = EXCLUDED.token_hash, tools = EXCLUDED.tools, rotated_at = now();
    RETURN p_name;
END
$_$;

CREATE FUNCTION outbox.mcp_held_by(p_target text, p_payload jsonb) RETURNS text
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    rule jsonpath := (SELECT t.approval_rule FROM outbox.targets t WHERE t.name = p_target);
BEGIN
    RETURN coalesce('rule ' || outbox.rule_text(rule) || ': ', '') || outbox.approval_reason(p_payload, rule);
END
$$;

CREATE FUNCTION outbox.mcp_list_tools(p_token_hash bytea) RETURNS TABLE(client text, tool text, title text, description text, input_schema jsonb, destructive boolean, server_keys boolean)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RETURN QUERY
    SELECT c.name, m.tool, m.title, m.description, m.input_schema, m.destructive, m.server_keys
      FROM outbox.mcp_clients c
      LEFT JOIN outbox.mcp_tools m
        ON m.enabled AND (c.tools IS NULL OR m.tool = ANY (c.tools))
       AND EXISTS (SELECT 1 FROM outbox.targets t WHERE t.name = m.target AND t.enabled)
     WHERE c.token_hash = p_token_hash
     ORDER BY m.tool COLLATE "C";
END
$$;

CREATE FUNCTION outbox.mcp_message(p_status text, p_outcome_message text, p_person_reason text) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE p_status
        WHEN 'succeeded' THEN 'succeeded: the target acted; this is its saved response'
        WHEN 'failed' THEN 'failed: the target did not act and will not: ' || coalesce(p_outcome_message, 'no reason recorded')
        WHEN 'cancelled' THEN 'cancelled: the target did not act, and nothing more will be sent: '
                              || coalesce(p_outcome_message, 'no reason recorded')
        WHEN 'reconciling' THEN
            CASE WHEN p_person_reason IS NOT NULL
                 THEN 'outcome unknown: needs a person to settle it. The target may have acted, and it cannot be asked '
                      'whether it did, so a person will check and settle this call. Do not repeat the action; tell the '
                      'user it may have happened and that a person is confirming it. You may ask for the outcome of '
                      'this same call later.'
                 ELSE 'outcome unknown, being confirmed: the target may have acted, and it is being asked whether it did. '
                      'Wait, then ask for the outcome of this same call; do not repeat the action; tell the user it is '
                      'being confirmed.' END
        WHEN 'delivering' THEN 'not yet confirmed: being delivered to the target. Wait, then ask for the outcome of '
                               'this same call; do not repeat the action; tell the user it is being confirmed.'
        WHEN 'pending' THEN 'not yet confirmed: ' || coalesce(p_outcome_message, 'waiting for delivery')
                            || '. Wait, then ask for the outcome of this same call; do not repeat the action; tell '
                               'the user it is being confirmed.'
        WHEN 'awaiting_approval' THEN 'not yet confirmed: held until a person approves it'
                                      || coalesce(' (' || p_outcome_message || ')', '')
                                      || '. Wait, then ask for the outcome of this same call; do not repeat the '
                                         'action; tell the user it is waiting for a person''s approval.'
        ELSE p_status END
$$;

CREATE FUNCTION outbox.mcp_notify_settled() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    PERFORM pg_notify('outbox_mcp', NEW.key);
    RETURN NULL;
END
$$;

CREATE FUNCTION outbox.mcp_outcome(p_token_hash bytea, p_key text) RETURNS outbox.mcp_answer
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    client_name text;
BEGIN
    SELECT name INTO client_name FROM outbox.mcp_clients WHERE token_hash = p_token_hash;
    IF client_name IS NULL THEN
        RAISE EXCEPTION 'outbox.mcp_outcome: unknown client' USING ERRCODE = 'OR022';
    END IF;
    RETURN outbox.mcp_answer_of(client_name, p_key, NULL, false, false);
END
$$;

CREATE FUNCTION outbox.mcp_outcomes(p_intent_keys text[]) RETURNS SETOF outbox.mcp_answer
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RETURN;
END
$$;

CREATE FUNCTION outbox.mcp_outcomes(p_token_hashes bytea[], p_intent_keys text[]) RETURNS SETOF outbox.mcp_answer
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    h      bytea;
    k      text;
    client text;
BEGIN
    IF cardinality(p_token_hashes) IS DISTINCT FROM cardinality(p_intent_keys) THEN
        RAISE EXCEPTION 'outbox.mcp_outcomes: % token hashes for % keys', cardinality(p_token_hashes),
                        cardinality(p_intent_keys)
            USING ERRCODE = '22023';
    END IF;
    FOR h, k IN SELECT x.h, x.k FROM unnest(p_token_hashes, p_intent_keys) AS x(h, k) LOOP
        client := (SELECT c.name FROM outbox.mcp_clients c WHERE c.token_hash = h);
        CONTINUE WHEN client IS NULL OR NOT starts_with(k, 'mcp:' || client || ':');
        RETURN NEXT outbox.mcp_answer_of(client, substr(k, length('mcp:' || client || ':') + 1), NULL, false, false);
    END LOOP;
END
$$;

CREATE FUNCTION outbox.mcp_payload_ok(p_payload jsonb) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
    SELECT jsonb_typeof(p_payload) = 'object'
           AND (SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(p_payload) k) = '{arguments,tool}'
           AND jsonb_typeof(p_payload -> 'tool') = 'string'
           AND p_payload ->> 'tool' ~ '^[^[:cntrl:]]{1,128}$'
           AND jsonb_typeof(p_payload -> 'arguments') = 'object'
$_$;

CREATE FUNCTION outbox.mcp_schema_pattern_problem(p text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
DECLARE
    n          int := length(p);
    i          int := 1;
    c          text;
    lvl       int := 0;
    weights    bigint[] := array_fill(0::bigint, ARRAY[33]);
    last_w       bigint := 0;
    can_repeat boolean := false;
    w          bigint;
    atom       boolean;
    r          record;
    k          record;
    -- a class being read
    bits       bit(128);
    mb         int;
    literals   int;
    negated    boolean;
    lo         int;
    hi         int;
    lo_class   boolean;
    hi_class   boolean;
    lo_bits    bit(128);
    lo_mb      int;
    is_class   boolean;
    ch         int;
    copies     bigint;
    qlo        bigint;
    qhi        bigint;
    comma      boolean;
    start      int;
    zero CONSTANT bit(128) := repeat('0', 128)::bit(128);
BEGIN
    IF octet_length(p) > 1024 THEN
        RETURN 'is longer than 1024 bytes';
    END IF;
    WHILE i <= n LOOP
        c := substr(p, i, 1);
        w := NULL;
        is_class := false;
        IF c = '\' THEN
            i := i + 1;
            IF i > n THEN
                RETURN 'ends with a backslash';
            END IF;
            SELECT * INTO k FROM outbox.mcp_schema_re_class(substr(p, i, 1));
            IF k.bits IS NOT NULL THEN
                bits := k.bits; mb := k.mb; literals := 0; is_class := true;
                i := i + 1;
            ELSIF substr(p, i, 1) IN ('b', 'B') THEN
                i := i + 1;
                can_repeat := false;
                w := 1; atom := false;
            ELSE
                SELECT * INTO r FROM outbox.mcp_schema_re_char(p, i);
                IF r.why IS NOT NULL THEN
                    RETURN r.why;
                END IF;
                i := r.next;
                ch := r.cp;
                IF ch = 0 THEN
                    RETURN 'matches U+0000, which POSIX regcomp cannot';
                END IF;
                can_repeat := true;
                w := CASE WHEN ch < 128 THEN 1 WHEN ch < 2048 THEN 3 WHEN ch < 65536 THEN 4 ELSE 5 END; atom := true;
            END IF;
        ELSIF c = '.' THEN
            bits := ~zero; bits := set_bit(set_bit(bits, 10, 0), 13, 0); mb := 4; literals := 0; is_class := true;
            i := i + 1;
        ELSIF c = '[' THEN
            i := i + 1;
            bits := zero; mb := 0; literals := 0;
            negated := substr(p, i, 1) = '^';
            IF negated THEN i := i + 1; END IF;
            LOOP
                IF i > n THEN
                    RETURN 'has an unterminated [';
                END IF;
                IF substr(p, i, 1) = ']' THEN
                    i := i + 1;
                    EXIT;
                END IF;
                -- the low end (or the one atom)
                FOR pass IN 1 .. 2 LOOP
                    IF pass = 2 THEN
                        IF NOT (i + 1 <= n AND substr(p, i, 1) = '-' AND substr(p, i + 1, 1) <> ']') THEN
                            EXIT;
                        END IF;
                        i := i + 1;
                    END IF;
                    hi_class := false;
                    IF substr(p, i, 1) <> '\' THEN
                        hi := ascii(substr(p, i, 1));
                        i := i + 1;
                    ELSE
                        i := i + 1;
                        IF i > n THEN
                            RETURN 'ends with a backslash';
                        END IF;
                        SELECT * INTO k FROM outbox.mcp_schema_re_class(substr(p, i, 1));
                        IF k.bits IS NOT NULL THEN
                            hi_class := true; i := i + 1;
                            IF pass = 1 THEN lo_bits := k.bits; lo_mb := k.mb; END IF;
                        ELSIF substr(p, i, 1) = 'b' THEN
                            hi := 8; i := i + 1;
                        ELSE
                            SELECT * INTO r FROM outbox.mcp_schema_re_char(p, i);
                            IF r.why IS NOT NULL THEN
                                RETURN r.why;
                            END IF;
                            hi := r.cp; i := r.next;
                        END IF;
                    END IF;
                    IF pass = 1 THEN
                        lo := hi; lo_class := hi_class; hi := NULL; hi_class := false;
                    END IF;
                END LOOP;
                IF hi IS NOT NULL OR hi_class THEN
                    -- a range (hi_class: its high end was a class escape)
                    IF lo_class OR hi_class THEN
                        RETURN 'has a range with a class escape as an end';
                    END IF;
                    IF lo > hi THEN
                        RETURN 'has a range out of order';
                    END IF;
                    IF hi >= 128 THEN
                        RETURN 'has a range with a non-ASCII end: not supported';
                    END IF;
                    IF lo = 0 THEN
                        RETURN 'matches U+0000, which POSIX regcomp cannot';
                    END IF;
                    FOR ch IN lo .. hi LOOP
                        bits := set_bit(bits, ch, 1);
                    END LOOP;
                ELSIF lo_class THEN
                    bits := bits | lo_bits;
                    mb := CASE WHEN mb = lo_mb OR lo_mb = 0 THEN mb WHEN mb = 0 THEN lo_mb ELSE 1 END;
                ELSIF lo = 0 THEN
                    RETURN 'matches U+0000, which POSIX regcomp cannot';
                ELSIF lo < 128 THEN
                    bits := set_bit(bits, lo, 1);
                ELSE
                    IF literals = 32 THEN
                        RETURN 'has a class with more than 32 non-ASCII characters';
                    END IF;
                    literals := literals + 1;
                END IF;
            END LOOP;
            IF negated THEN
                IF literals > 0 THEN
                    RETURN 'has a negated class with non-ASCII characters: not supported';
                END IF;
                bits := ~bits;
                mb := CASE mb WHEN 0 THEN 1 WHEN 1 THEN 0 WHEN 2 THEN 3 WHEN 3 THEN 2 ELSE 0 END;
            END IF;
            is_class := true;
        ELSIF c = '(' THEN
            i := i + 1;
            IF substr(p, i, 1) = '?' THEN
                i := i + 1;
                IF substr(p, i, 1) = ':' THEN
                    i := i + 1;
                ELSIF substr(p, i, 1) IN ('=', '!') THEN
                    RETURN format('has a lookahead (?%s: not supported by POSIX ERE', substr(p, i, 1));
                ELSIF substr(p, i, 1) = '<' AND substr(p, i + 1, 1) IN ('=', '!') THEN
                    RETURN format('has a lookbehind (?<%s: not supported by POSIX ERE', substr(p, i + 1, 1));
                ELSIF substr(p, i, 1) = '<' THEN
                    i := i + 1;
                    start := i;
                    WHILE i <= n AND (substr(p, i, 1) ~ '^[_$A-Za-z]$' OR (i > start AND substr(p, i, 1) ~ '^[0-9]$')) LOOP
                        i := i + 1;
                    END LOOP;
                    IF i = start OR i > n OR substr(p, i, 1) <> '>' THEN
                        RETURN 'has a malformed group name';
                    END IF;
                    i := i + 1;
                ELSE
                    RETURN 'has a (? group that is not (?: or (?<name>';
                END IF;
            END IF;
            IF lvl = 32 THEN
                RETURN 'has groups nested deeper than 32';
            END IF;
            lvl := lvl + 1;
            weights[lvl + 1] := 0;
            can_repeat := false;
        ELSIF c = ')' THEN
            i := i + 1;
            IF lvl = 0 THEN
                RETURN 'has an unmatched )';
            END IF;
            lvl := lvl - 1;
            can_repeat := true;
            w := weights[lvl + 2] + 1; atom := true;
        ELSIF c IN ('|', '^', '$') THEN
            i := i + 1;
            can_repeat := false;
            w := 1; atom := false;
        ELSIF c IN ('*', '+', '?', '{') THEN
            IF NOT can_repeat THEN
                RETURN 'has a quantifier with nothing to repeat';
            END IF;
            i := i + 1;
            copies := CASE WHEN c = '+' THEN 2 ELSE 1 END;
            IF c = '{' THEN
                qlo := NULL; qhi := -1;
                FOR pass IN 1 .. 2 LOOP
                    IF pass = 2 THEN
                        comma := substr(p, i, 1) = ',';
                        IF NOT comma THEN EXIT; END IF;
                        i := i + 1;
                        IF i > n OR substr(p, i, 1) = '}' THEN EXIT; END IF;
                    END IF;
                    start := i;
                    w := 0;
                    WHILE i <= n AND substr(p, i, 1) ~ '^[0-9]$' LOOP
                        w := w * 10 + ascii(substr(p, i, 1)) - 48;
                        i := i + 1;
                        IF w > 1000 THEN
                            RETURN 'has a repetition bound above 1000';
                        END IF;
                    END LOOP;
                    IF i = start THEN
                        RETURN 'has a { that is not a quantifier (write \{)';
                    END IF;
                    IF pass = 1 THEN qlo := w; ELSE qhi := w; END IF;
                END LOOP;
                IF i > n OR substr(p, i, 1) <> '}' THEN
                    RETURN 'has a { that is not a quantifier (write \{)';
                END IF;
                i := i + 1;
                IF comma AND qhi >= 0 AND qhi < qlo THEN
                    RETURN format('has a quantifier {%s,%s} out of order', qlo, qhi);
                END IF;
                copies := qlo + CASE WHEN NOT comma THEN 0 WHEN qhi < 0 THEN 1 ELSE 2 * (qhi - qlo) END;
                IF copies = 0 THEN copies := 1; END IF;
            END IF;
            IF substr(p, i, 1) = '?' THEN
                i := i + 1;
            END IF;
            can_repeat := false;
            w := last_w * (copies - 1); atom := false;
        ELSIF c IN ('}', ']') THEN
            RETURN format('has a lone %s (write \%s)', c, c);
        ELSE
            ch := ascii(c);
            i := i + 1;
            can_repeat := true;
            w := CASE WHEN ch < 128 THEN 1 WHEN ch < 2048 THEN 3 WHEN ch < 65536 THEN 4 ELSE 5 END; atom := true;
        END IF;
        IF is_class THEN
            lo := (CASE WHEN bits <> zero THEN 1 ELSE 0 END) + (CASE WHEN mb <> 0 THEN 1 ELSE 0 END) + literals;
            IF lo = 0 THEN
                RETURN 'has a class that matches nothing';
            END IF;
            can_repeat := true;
            w := lo + (CASE mb WHEN 1 THEN 9 WHEN 2 THEN 17 WHEN 3 THEN 45 WHEN 4 THEN 16 ELSE 0 END) + 4 * literals;
            atom := true;
        END IF;
        IF w IS NOT NULL THEN
            IF atom THEN
                last_w := w;
            END IF;
            weights[lvl + 1] := weights[lvl + 1] + w;
            IF weights[lvl + 1] > 10000 THEN
                RETURN 'is too large once its repetitions are written out for POSIX regcomp (bound lengths with '
                       'minLength and maxLength instead)';
            END IF;
        END IF;
    END LOOP;
    IF lvl > 0 THEN
        RETURN 'has an unmatched (';
    END IF;
    RETURN NULL;
END
$_$;

CREATE FUNCTION outbox.mcp_schema_problem(p_schema jsonb, p_path text DEFAULT ''::text) RETURNS text
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
    SELECT CASE WHEN outbox.mcp_schema_too_deep(p_schema)
                THEN 'the schema is nested deeper than 64 levels'
                ELSE outbox.mcp_schema_problem_at(
                         p_schema, p_schema, p_path, ARRAY[]::text[],
                         CASE WHEN p_schema ->> '$schema' ~ '/draft-0[67]/' THEN 'old'
                              WHEN p_schema ->> '$schema' ~ '/2019-09/' THEN '2019'
                              ELSE '2020' END) END
$_$;

CREATE FUNCTION outbox.mcp_schema_problem_at(p_root jsonb, p_schema jsonb, p_path text, p_keys text[], p_dialect text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
DECLARE
    k       text;
    v       jsonb;
    ent     record;
    r       record;
    i       int;
    problem text;
    here    text := coalesce(nullif(p_path, ''), '/');
    allowed CONSTANT text[] := ARRAY['type', 'properties', 'required', 'additionalProperties', 'enum', 'const',
                                     'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'multipleOf',
                                     'minLength', 'maxLength', 'pattern', 'items', 'minItems', 'maxItems',
                                     'uniqueItems', '$schema', '$id', 'title', 'description', 'default',
                                     'examples', '$comment', 'deprecated', 'readOnly', 'writeOnly',
                                     'allOf', 'anyOf', 'oneOf', 'not', '$ref', '$defs', 'definitions', 'format',
                                     'prefixItems', 'patternProperties', 'propertyNames', 'minProperties',
                                     'maxProperties', 'dependentRequired'];
    beside_ref CONSTANT text[] := ARRAY['$ref', '$schema', '$id', 'title', 'description', '$comment', 'default',
                                        'examples', 'deprecated', 'readOnly', 'writeOnly', '$defs', 'definitions'];
    types   CONSTANT text[] := ARRAY['null', 'boolean', 'object', 'array', 'number', 'integer', 'string'];
BEGIN
    IF jsonb_typeof(p_schema) = 'boolean' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(p_schema) IS DISTINCT FROM 'object' THEN
        RETURN format('%s: a schema must be an object or a boolean', here);
    END IF;
    IF length(p_path) > 2000 OR cardinality(p_keys) > 128 THEN
        RETURN format('%s: nested too deeply', p_path);
    END IF;
    FOR k, v IN SELECT * FROM jsonb_each(p_schema) LOOP
        IF NOT k = ANY (allowed) THEN
            RETURN format('unsupported keyword "%s" at %s', k, here);
        END IF;
        IF k IN ('$id', '$schema') AND p_path <> '' THEN
            RETURN format('unsupported keyword "%s" at %s (only at the root)', k, p_path);
        END IF;
        IF p_dialect = 'old' AND p_schema ? '$ref' AND NOT k = ANY (beside_ref) THEN
            RETURN format('"%s" beside "$ref" is ignored by the $schema named (draft-07 and older); use allOf, or 2020-12 at %s',
                          k, here);
        END IF;
        CASE k
            WHEN 'type' THEN
                IF NOT ((jsonb_typeof(v) = 'string' AND v #>> '{}' = ANY (types))
                        OR (jsonb_typeof(v) = 'array' AND jsonb_array_length(v) > 0
                            AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(v) e
                                             WHERE jsonb_typeof(e) <> 'string' OR NOT e #>> '{}' = ANY (types))
                            AND (SELECT count(DISTINCT e) = count(*) FROM jsonb_array_elements(v) e))) THEN
                    RETURN format('%s/type: must be one of %s, or an array of them', p_path, array_to_string(types, ', '));
                END IF;
            WHEN 'properties', '$defs', 'definitions', 'patternProperties' THEN
                IF jsonb_typeof(v) <> 'object' THEN
                    RETURN format('%s/%s: must be an object of schemas', p_path, k);
                END IF;
                FOR ent IN SELECT * FROM jsonb_each(v) LOOP
                    IF k = 'patternProperties' THEN
                        problem := outbox.mcp_schema_pattern_problem(ent.key);
                        IF problem IS NOT NULL THEN
                            RETURN format('%s/patternProperties/%s: the pattern of "patternProperties" %s', p_path, ent.key, problem);
                        END IF;
                    END IF;
                    problem := outbox.mcp_schema_problem_at(p_root, ent.value, p_path || '/' || k || '/' || ent.key,
                                                            p_keys || k || ent.key, p_dialect);
                    IF problem IS NOT NULL THEN RETURN problem; END IF;
                END LOOP;
            WHEN 'allOf', 'anyOf', 'oneOf', 'prefixItems' THEN
                IF k = 'prefixItems' AND p_dialect <> '2020' THEN
                    RETURN format('"prefixItems" is a 2020-12 keyword; the $schema named ignores it (use 2020-12) at %s', here);
                END IF;
                IF jsonb_typeof(v) <> 'array' OR jsonb_array_length(v) = 0 THEN
                    RETURN format('%s/%s: must be a non-empty array of schemas', p_path, k);
                END IF;
                FOR i IN 0 .. jsonb_array_length(v) - 1 LOOP
                    problem := outbox.mcp_schema_problem_at(p_root, v -> i, p_path || '/' || k || '/' || i,
                                                            p_keys || k || i::text, p_dialect);
                    IF problem IS NOT NULL THEN RETURN problem; END IF;
                END LOOP;
            WHEN 'additionalProperties', 'items', 'not', 'propertyNames' THEN
                problem := outbox.mcp_schema_problem_at(p_root, v, p_path || '/' || k, p_keys || k, p_dialect);
                IF problem IS NOT NULL THEN RETURN problem; END IF;
            WHEN '$ref' THEN
                IF jsonb_typeof(v) <> 'string' THEN
                    RETURN format('%s/$ref: must be a string', p_path);
                END IF;
                SELECT * INTO r FROM outbox.mcp_schema_ref(p_root, v #>> '{}');
                IF r.keys IS NULL THEN
                    RETURN format('"$ref" %s at %s', r.why, here);
                END IF;
                CASE outbox.mcp_schema_ref_loops(p_root, r.keys, p_keys)
                    WHEN 'loop' THEN
                        RETURN format('"$ref" loops back to this schema without descending into the value '
                                      '(through $ref, allOf, anyOf, oneOf or not) at %s', here);
                    WHEN 'overflow' THEN
                        RETURN format('"$ref" leads through more than 1024 schemas at %s', here);
                    ELSE
                        NULL;
                END CASE;
            WHEN 'required' THEN
                IF jsonb_typeof(v) <> 'array'
                   OR EXISTS (SELECT 1 FROM jsonb_array_elements(v) e WHERE jsonb_typeof(e) <> 'string')
                   OR (SELECT count(DISTINCT e) <> count(*) FROM jsonb_array_elements(v) e) THEN
                    RETURN format('%s/required: must be an array of distinct strings', p_path);
                END IF;
            WHEN 'dependentRequired' THEN
                IF p_dialect = 'old' THEN
                    RETURN format('"dependentRequired" is a 2019-09 keyword; the $schema named ignores it (use 2020-12) at %s', here);
                END IF;
                IF jsonb_typeof(v) <> 'object'
                   OR EXISTS (SELECT 1 FROM jsonb_each(v) d
                               WHERE jsonb_typeof(d.value) <> 'array'
                                  OR EXISTS (SELECT 1 FROM jsonb_array_elements(d.value) e WHERE jsonb_typeof(e) <> 'string')
                                  OR (SELECT count(DISTINCT e) <> count(*) FROM jsonb_array_elements(d.value) e)) THEN
                    RETURN format('%s/dependentRequired: must be an object of arrays of distinct strings', p_path);
                END IF;
            WHEN '$schema' THEN
                IF v NOT IN ('"https://json-schema.org/draft/2020-12/schema"', '"https://json-schema.org/draft/2019-09/schema"',
                             '"http://json-schema.org/draft-07/schema#"', '"http://json-schema.org/draft-07/schema"',
                             '"http://json-schema.org/draft-06/schema#"', '"http://json-schema.org/draft-06/schema"',
                             '"https://json-schema.org/draft/2020-12/schema#"', '"https://json-schema.org/draft/2019-09/schema#"',
                             '"http://json-schema.org/draft/2020-12/schema"', '"http://json-schema.org/draft/2020-12/schema#"',
                             '"http://json-schema.org/draft/2019-09/schema"', '"http://json-schema.org/draft/2019-09/schema#"',
                             '"https://json-schema.org/draft-07/schema#"', '"https://json-schema.org/draft-07/schema"',
                             '"https://json-schema.org/draft-06/schema#"', '"https://json-schema.org/draft-06/schema"') THEN
                    RETURN format('/$schema: must name the 2020-12, 2019-09, draft-07 or draft-06 meta-schema');
                END IF;
            WHEN 'title', 'description', '$comment', '$id', 'format' THEN
                IF jsonb_typeof(v) <> 'string' THEN
                    RETURN format('%s/%s: must be a string', p_path, k);
                END IF;
            WHEN 'enum' THEN
                IF jsonb_typeof(v) <> 'array' THEN
                    RETURN format('%s/enum: must be an array', p_path);
                END IF;
            WHEN 'examples' THEN
                IF jsonb_typeof(v) <> 'array' THEN
                    RETURN format('%s/examples: must be an array', p_path);
                END IF;
            WHEN 'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum' THEN
                IF jsonb_typeof(v) <> 'number' THEN
                    RETURN format('%s/%s: must be a number', p_path, k);
                END IF;
            WHEN 'multipleOf' THEN
                IF jsonb_typeof(v) <> 'number' OR (v #>> '{}')::numeric <= 0 THEN
                    RETURN format('%s/multipleOf: must be a number above 0', p_path);
                END IF;
            WHEN 'minLength', 'maxLength', 'minItems', 'maxItems', 'minProperties', 'maxProperties' THEN
                IF jsonb_typeof(v) <> 'number' OR (v #>> '{}')::numeric < 0
                   OR (v #>> '{}')::numeric <> trunc((v #>> '{}')::numeric) THEN
                    RETURN format('%s/%s: must be a non-negative integer', p_path, k);
                END IF;
            WHEN 'pattern' THEN
                IF jsonb_typeof(v) <> 'string' THEN
                    RETURN format('%s/pattern: must be a string', p_path);
                END IF;
                problem := outbox.mcp_schema_pattern_problem(v #>> '{}');
                IF problem IS NOT NULL THEN
                    RETURN format('%s/pattern: %s', p_path, problem);
                END IF;
            WHEN 'uniqueItems', 'deprecated', 'readOnly', 'writeOnly' THEN
                IF jsonb_typeof(v) <> 'boolean' THEN
                    RETURN format('%s/%s: must be true or false', p_path, k);
                END IF;
            ELSE
                NULL;   -- annotations: anything goes
        END CASE;
    END LOOP;
    RETURN NULL;
END
$_$;

CREATE FUNCTION outbox.mcp_schema_re_char(p text, p_i integer, OUT cp integer, OUT next integer, OUT why text) RETURNS record
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
DECLARE
    n      int := length(p);
    e      text := substr(p, p_i, 1);
    i      int := p_i + 1;
    digits int;
    low    int;
BEGIN
    CASE e
        WHEN 't' THEN cp := 9;
        WHEN 'n' THEN cp := 10;
        WHEN 'r' THEN cp := 13;
        WHEN 'f' THEN cp := 12;
        WHEN 'v' THEN cp := 11;
        WHEN 'c' THEN
            IF substr(p, i, 1) ~ '^[A-Za-z]$' THEN
                cp := ascii(substr(p, i, 1)) & 31;
                i := i + 1;
            ELSE
                why := 'has \c without a letter';
            END IF;
        WHEN 'x' THEN
            IF substr(p, i, 2) ~ '^[0-9A-Fa-f]{2}$' THEN
                cp := ('x' || lpad(substr(p, i, 2), 8, '0'))::bit(32)::int;
                i := i + 2;
            ELSE
                why := 'has a malformed \x escape';
            END IF;
        WHEN 'u' THEN
            IF substr(p, i, 1) = '{' THEN
                i := i + 1;
                cp := 0;
                digits := 0;
                WHILE i <= n AND substr(p, i, 1) ~ '^[0-9A-Fa-f]$' LOOP
                    cp := cp * 16 + ('x' || lpad(substr(p, i, 1), 8, '0'))::bit(32)::int;
                    i := i + 1;
                    digits := digits + 1;
                    IF digits > 6 OR cp > 1114111 THEN
                        why := 'has a \u{...} escape above U+10FFFF';
                        RETURN;
                    END IF;
                END LOOP;
                IF digits = 0 OR i > n OR substr(p, i, 1) <> '}' THEN
                    why := 'has a malformed \u{...} escape';
                    RETURN;
                END IF;
                i := i + 1;
            ELSIF substr(p, i, 4) ~ '^[0-9A-Fa-f]{4}$' THEN
                cp := ('x' || lpad(substr(p, i, 4), 8, '0'))::bit(32)::int;
                i := i + 4;
            ELSE
                why := 'has a malformed \u escape';
                RETURN;
            END IF;
            IF cp BETWEEN 55296 AND 56319 AND substr(p, i, 2) = '\u' AND substr(p, i + 2, 4) ~ '^[0-9A-Fa-f]{4}$' THEN
                low := ('x' || lpad(substr(p, i + 2, 4), 8, '0'))::bit(32)::int;
                IF low BETWEEN 56320 AND 57343 THEN
                    cp := 65536 + ((cp - 55296) << 10) + (low - 56320);
                    i := i + 6;
                END IF;
            END IF;
            IF cp BETWEEN 55296 AND 57343 THEN
                why := format('has a lone surrogate escape \u%s', upper(lpad(to_hex(cp), 4, '0')));
            END IF;
        WHEN '0' THEN
            why := CASE WHEN substr(p, i, 1) ~ '^[0-9]$' THEN 'has an octal escape (not ECMA-262 in unicode mode)'
                        ELSE 'has \0: U+0000 cannot be matched by POSIX regcomp' END;
        WHEN 'p', 'P' THEN
            why := format('has a Unicode property escape \%s{...}: not supported by POSIX ERE', e);
        WHEN 'k' THEN
            why := 'has a named backreference \k<...>: not supported by POSIX ERE';
        ELSE
            IF e ~ '^[1-9]$' THEN
                why := format('has a backreference \%s: not supported', e);
            ELSIF position(e IN '^$\.*+?()[]{}|/-') > 0 THEN
                cp := ascii(e);
            ELSIF ascii(e) >= 128 OR e ~ '^[A-Za-z]$' THEN
                why := format('has an unknown escape \%s', CASE WHEN ascii(e) >= 128 THEN '?' ELSE e END);
            ELSE
                cp := ascii(e);
            END IF;
    END CASE;
    next := i;
END
$_$;

CREATE FUNCTION outbox.mcp_schema_re_class(e text, OUT bits bit, OUT mb integer) RETURNS record
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    ch int;
BEGIN
    IF e NOT IN ('d', 'D', 'w', 'W', 's', 'S') THEN
        RETURN;
    END IF;
    bits := repeat('0', 128)::bit(128);
    mb := 0;
    FOR ch IN 0 .. 127 LOOP
        IF (lower(e) = 'd' AND ch BETWEEN 48 AND 57)
           OR (lower(e) = 'w' AND (ch BETWEEN 48 AND 57 OR ch BETWEEN 65 AND 90 OR ch BETWEEN 97 AND 122 OR ch = 95))
           OR (lower(e) = 's' AND (ch BETWEEN 9 AND 13 OR ch = 32)) THEN
            bits := set_bit(bits, ch, 1);
        END IF;
    END LOOP;
    IF lower(e) = 's' THEN
        mb := 2;
    END IF;
    IF e IN ('D', 'W', 'S') THEN
        bits := ~bits;
        mb := CASE mb WHEN 0 THEN 1 WHEN 1 THEN 0 WHEN 2 THEN 3 WHEN 3 THEN 2 ELSE 0 END;
    END IF;
END
$$;

CREATE FUNCTION outbox.mcp_schema_ref(p_root jsonb, p_ref text, OUT keys text[], OUT why text) RETURNS record
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
DECLARE
    seg     text;
    raw     text;
    node    jsonb := p_root;
    nxt     text := 'keyword';
    child   jsonb;
    bytes   bytea;
    i       int;
BEGIN
    keys := ARRAY[]::text[];
    IF left(p_ref, 1) <> '#' THEN
        why := 'is not local: only "#" and "#/..." pointers into this schema are supported';
        keys := NULL;
        RETURN;
    END IF;
    IF p_ref = '#' THEN
        RETURN;
    END IF;
    IF substr(p_ref, 2, 1) <> '/' THEN
        why := 'names an anchor: only "#" and "#/..." pointers are supported';
        keys := NULL;
        RETURN;
    END IF;
    FOREACH raw IN ARRAY (string_to_array(substr(p_ref, 3), '/')) LOOP
        -- a URI fragment: percent-decoded, then JSON Pointer-unescaped
        seg := raw;
        IF seg ~ '%' THEN
            bytes := ''::bytea;
            i := 1;
            WHILE i <= length(seg) LOOP
                IF substr(seg, i, 1) = '%' THEN
                    IF substr(seg, i + 1, 2) !~ '^[0-9A-Fa-f]{2}$' OR substr(seg, i + 1, 2) = '00' THEN
                        why := 'has a malformed segment';
                        keys := NULL;
                        RETURN;
                    END IF;
                    bytes := bytes || decode(substr(seg, i + 1, 2), 'hex');
                    i := i + 3;
                ELSE
                    bytes := bytes || convert_to(substr(seg, i, 1), 'UTF8');
                    i := i + 1;
                END IF;
            END LOOP;
            BEGIN
                seg := convert_from(bytes, 'UTF8');
            EXCEPTION WHEN character_not_in_repertoire OR untranslatable_character THEN
                why := 'has a malformed segment';
                keys := NULL;
                RETURN;
            END;
        END IF;
        IF seg ~ '~([^01]|$)' THEN
            why := 'has a malformed segment';
            keys := NULL;
            RETURN;
        END IF;
        seg := replace(replace(seg, '~1', '/'), '~0', '~');
        IF nxt = 'index' THEN
            child := CASE WHEN jsonb_typeof(node) = 'array' AND seg ~ '^(0|[1-9][0-9]{0,8})$'
                          THEN node -> seg::int END;
            nxt := 'keyword';
        ELSIF nxt = 'name' THEN
            child := CASE WHEN jsonb_typeof(node) = 'object' THEN node -> seg END;
            nxt := 'keyword';
        ELSE
            child := CASE WHEN jsonb_typeof(node) = 'object' THEN node -> seg END;
            IF seg IN ('$defs', 'definitions', 'properties', 'patternProperties') THEN
                nxt := 'name';
            ELSIF seg IN ('allOf', 'anyOf', 'oneOf', 'prefixItems') THEN
                nxt := 'index';
            ELSIF seg NOT IN ('items', 'additionalProperties', 'not', 'propertyNames') AND child IS NOT NULL THEN
                why := format('points into "%s", which holds no schema', left(seg, 64));
                keys := NULL;
                RETURN;
            END IF;
        END IF;
        IF child IS NULL THEN
            why := 'points to nothing in this schema';
            keys := NULL;
            RETURN;
        END IF;
        node := child;
        keys := keys || seg;
    END LOOP;
    IF nxt <> 'keyword' OR jsonb_typeof(node) NOT IN ('object', 'boolean') THEN
        why := 'does not point to a schema';
        keys := NULL;
    END IF;
END
$_$;

CREATE FUNCTION outbox.mcp_schema_ref_loops(p_root jsonb, p_from text[], p_target text[]) RETURNS text
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
DECLARE
    queue   jsonb := jsonb_build_array(to_jsonb(p_from));
    seen    jsonb := '[]';
    at      text[];
    node    jsonb;
    r       record;
    kw      text;
    i       int;
BEGIN
    WHILE jsonb_array_length(queue) > 0 LOOP
        at := ARRAY(SELECT jsonb_array_elements_text(queue -> 0));
        queue := queue - 0;
        IF at = p_target THEN
            RETURN 'loop';
        END IF;
        node := p_root #> at;
        IF jsonb_typeof(node) IS DISTINCT FROM 'object' OR seen @> jsonb_build_array(to_jsonb(at)) THEN
            CONTINUE;
        END IF;
        IF jsonb_array_length(seen) >= 1024 THEN
            RETURN 'overflow';
        END IF;
        seen := seen || jsonb_build_array(to_jsonb(at));
        IF jsonb_typeof(node -> '$ref') = 'string' THEN
            SELECT * INTO r FROM outbox.mcp_schema_ref(p_root, node ->> '$ref');
            IF r.keys IS NOT NULL THEN
                queue := queue || jsonb_build_array(to_jsonb(r.keys));
            END IF;
        END IF;
        FOREACH kw IN ARRAY ARRAY['allOf', 'anyOf', 'oneOf'] LOOP
            IF jsonb_typeof(node -> kw) = 'array' THEN
                FOR i IN 0 .. jsonb_array_length(node -> kw) - 1 LOOP
                    queue := queue || jsonb_build_array(to_jsonb(at || kw || i::text));
                END LOOP;
            END IF;
        END LOOP;
        IF node ? 'not' THEN
            queue := queue || jsonb_build_array(to_jsonb(at || 'not'::text));
        END IF;
    END LOOP;
    RETURN NULL;
END
$_$;

CREATE FUNCTION outbox.mcp_schema_too_deep(p_schema jsonb) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    WITH RECURSIVE walk (v, depth) AS (
        SELECT p_schema, 0
        UNION ALL
        SELECT c.value, w.depth + 1
          FROM walk w,
               LATERAL (SELECT e.value FROM jsonb_each(CASE WHEN jsonb_typeof(w.v) = 'object' THEN w.v END) e
                        UNION ALL
                        SELECT a.value FROM jsonb_array_elements(CASE WHEN jsonb_typeof(w.v) = 'array' THEN w.v END) a) c
         WHERE w.depth <= 64)
    SELECT EXISTS (SELECT 1 FROM walk WHERE depth > 64)
$$;

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

CREATE FUNCTION outbox.mcp_tool(p_token_hash bytea, p_tool text) RETURNS TABLE(client text, tool text, target text, input_schema jsonb, server_keys boolean)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RETURN QUERY
    SELECT c.name, m.tool, m.target, m.input_schema, m.server_keys
      FROM outbox.mcp_clients c
      LEFT JOIN outbox.mcp_tools m
        ON m.tool = p_tool AND m.enabled AND (c.tools IS NULL OR m.tool = ANY (c.tools))
     WHERE c.token_hash = p_token_hash;
END
$$;

CREATE FUNCTION outbox.mcp_tools_check() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
DECLARE
    problem text;
BEGIN
    IF jsonb_typeof(NEW.input_schema) <> 'object' OR NEW.input_schema->>'type' IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'outbox.mcp_tools: the input_schema of tool % must be an object schema with "type": "object"',
                        quote_literal(NEW.tool)
            USING ERRCODE = 'OR020';
    END IF;
    problem := outbox.mcp_schema_problem(NEW.input_schema);
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'outbox.mcp_tools: the input_schema of tool % is refused: %', quote_literal(NEW.tool), problem
            USING ERRCODE = 'OR020',
                  HINT = 'Supported: type, properties, required, additionalProperties, enum, const, minimum, maximum, '
                         'exclusiveMinimum, exclusiveMaximum, multipleOf, minLength, maxLength, pattern, items, '
                         'prefixItems, minItems, maxItems, uniqueItems, patternProperties, propertyNames, '
                         'minProperties, maxProperties, dependentRequired, allOf, anyOf, oneOf, not, local $ref with '
                         '$defs, format, and annotations (README, "For agents: MCP").';
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END
$_$;

CREATE FUNCTION outbox.needs_approval(payload jsonb, rule jsonpath) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    AS $_$
DECLARE
    written   text := rule::text;      -- canonical text: 'strict ' or nothing, then the path
    body      text;
    widened   text;
    probe     jsonb;
    predicate boolean;
    bufs      text[];
    filters   boolean[];
    tok       text;
    n         integer;
    answer    boolean;
    doc       jsonb;
    path      text;
BEGIN
    IF payload IS NULL OR rule IS NULL THEN
        RETURN true;
    END IF;
    body := regexp_replace(written, '^(strict|lax) ', '');

    -- Every filter ?(C) widened to ?((C) || ((C) is unknown)): an item goes
    -- through unless C is definitely false. Tokens: strings, parentheses, the rest.
    IF strpos(body, '?(') > 0 THEN
        bufs := ARRAY[''];
        filters := ARRAY[false];
        FOR tok IN SELECT m[1] FROM regexp_matches(body, '("(?:[^"\\]|\\.)*"|[()]|[^"()]+)', 'g') AS m LOOP
            n := cardinality(bufs);
            IF tok = '(' THEN
                filters := filters || (rtrim(bufs[n]) LIKE '%?');
                bufs := bufs || ''::text;
            ELSIF tok = ')' AND n > 1 THEN
                tok := bufs[n];
                bufs[n - 1] := bufs[n - 1] || CASE WHEN filters[n]
                    THEN '((' || tok || ') || ((' || tok || ') is unknown))'
                    ELSE '(' || tok || ')' END;
                bufs := bufs[1:n - 1];
                filters := filters[1:n - 1];
            ELSE
                bufs[n] := bufs[n] || tok;
            END IF;
        END LOOP;
        IF cardinality(bufs) <> 1 THEN
            RETURN true;   -- not understood: hold
        END IF;
        widened := bufs[1];
    END IF;

    -- A predicate ($.a > 1) answers one boolean or null, even on an empty
    -- object; a path ($ ? (...)) answers items: it holds if there is one.
    probe := jsonb_path_query_array('{}', rule, '{}', true);
    predicate := jsonb_array_length(probe) = 1 AND jsonb_typeof(probe -> 0) IN ('boolean', 'null');

    FOR doc, path IN
        SELECT d, p FROM (VALUES (1, payload, written),
                                 (2, payload, CASE WHEN written LIKE 'strict %' THEN 'strict ' ELSE '' END || widened),
                                 (3, jsonb_strip_nulls(payload), 'strict ' || body),
                                 (4, jsonb_strip_nulls(payload), 'strict ' || widened)) AS v(o, d, p)
         WHERE p IS NOT NULL ORDER BY o
    LOOP
        IF predicate THEN
            answer := jsonb_path_match(doc, path::jsonpath, '{}', true);
        ELSE
            answer := jsonb_path_exists(doc, path::jsonpath, '{}', true);
        END IF;
        IF answer IS DISTINCT FROM false THEN
            RETURN true;   -- true, or unknown
        END IF;
    END LOOP;
    RETURN false;
EXCEPTION WHEN OTHERS THEN
    RETURN true;           -- cannot be evaluated on this payload: a person decides
END
$_$;

CREATE FUNCTION outbox.needs_person(p_intent bigint, p_target text, p_first_attempt_at timestamp with time zone) RETURNS text
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    t outbox.targets;
    unkeyed text;   -- 0025
BEGIN
    SELECT * INTO t FROM outbox.targets WHERE name = p_target;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF t.status_url IS NOT NULL OR t.status_tool IS NOT NULL THEN   -- 0037: or its status tool
        IF t.enabled THEN
            RETURN NULL;   -- the relay asks the status URL (or tool)
        END IF;
        RETURN 'needs a person — the target is disabled, so its status URL is not asked: enable it, or resolve the key';
    END IF;
    IF t.key_header IS NULL THEN
        RETURN 'needs a person — no status URL, no key';
    END IF;
    unkeyed := outbox.unkeyed_attempt(p_intent);   -- 0025
    IF unkeyed = 'without' THEN
        RETURN 'needs a person — no status URL, and an attempt that may have executed went without the key';
    ELSIF unkeyed = 'not recorded' THEN
        RETURN 'needs a person — no status URL, and whether an attempt that may have executed carried the key was not recorded';
    END IF;
    IF p_first_attempt_at IS NULL THEN
        RETURN 'needs a person — no status URL, and no first attempt is recorded to tell whether the target still remembers the key';
    END IF;
    IF now() - p_first_attempt_at >= t.key_ttl THEN
        RETURN format('needs a person — no status URL, and the key is past the target''s key_ttl (%s): the target may have forgotten it',
                      t.key_ttl);
    END IF;
    RETURN format('needs a person — no status URL; the target remembers the key until %s, so a retry with it is safe until then (outbox-relay retry KEY)',
                  outbox.utc_text(p_first_attempt_at + t.key_ttl));
END
$$;

CREATE FUNCTION outbox.next_due_ms(p_targets text[]) RETURNS bigint
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    due_ms bigint;
    name   text;
BEGIN
    due_ms := (SELECT CASE WHEN due IS NOT NULL
                   THEN greatest(0, (extract(epoch FROM (due - now())) * 1000)::bigint) END
      FROM (SELECT least(
                (SELECT min(greatest(d.due, outbox.target_gate(s, t.rate_limit_per_s)))
                   FROM unnest(p_targets) AS u(name)
                   JOIN outbox.targets t ON t.name = u.name AND t.enabled
                   LEFT JOIN outbox.target_state s ON s.target = u.name
                  CROSS JOIN LATERAL (SELECT min(i.next_attempt_at) AS due FROM outbox.intents i
                                       WHERE i.state = 'pending' AND i.target = u.name
                                         AND i.next_attempt_at < 'infinity') d   -- 0013: held rows are not due
                  WHERE d.due IS NOT NULL),   -- a gate alone (a pause that ended) is nothing due
                (SELECT min(lease_expires_at) FROM outbox.intents WHERE state = 'in_flight'),
                (SELECT min(greatest(i.next_attempt_at, coalesce(i.lease_expires_at, i.next_attempt_at)))
                   FROM outbox.intents i JOIN outbox.targets t ON t.name = i.target
                  WHERE i.state = 'unknown' AND (t.status_url IS NOT NULL OR t.status_tool IS NOT NULL) AND t.enabled)) AS due) AS next);   -- 0037
    IF due_ms = 0 THEN
        RETURN 0;
    END IF;
    -- An enqueue holds the shared form of its target's lock until its
    -- transaction ends (outbox.enqueue); the exclusive form is free only
    -- when none does. Taken at session level so that it is released at once.
    FOR name IN
        SELECT t.name FROM unnest(p_targets) AS u(name)
          JOIN outbox.targets t ON t.name = u.name AND t.enabled
          LEFT JOIN outbox.target_state s ON s.target = u.name
         WHERE s.target IS NULL OR coalesce(outbox.target_gate(s, t.rate_limit_per_s) <= now(), true)
    LOOP
        IF pg_try_advisory_lock(1330774017, hashtext(name)) THEN
            PERFORM pg_advisory_unlock(1330774017, hashtext(name));
        ELSE
            RETURN 0;
        END IF;
    END LOOP;
    RETURN due_ms;
END
$$;

CREATE FUNCTION outbox.note_decision(p_intent bigint, p_attempt integer, p_who text, p_note text) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    INSERT INTO outbox.attempts (intent_id, attempt, relay, class, request_sent, error)
    VALUES (p_intent, p_attempt, coalesce(p_who, session_user), 'resolved', false, p_note);
$$;

-- NOTIFY outbox_events when a target's circuit opens (from closed) or closes
-- (0015).
CREATE FUNCTION outbox.notify_circuit_change() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    PERFORM pg_notify('outbox_events', jsonb_strip_nulls(jsonb_build_object(
        'event', CASE WHEN NEW.circuit = 'closed' THEN 'circuit_closed' ELSE 'circuit_opened' END,
        'target', NEW.target, 'reason', NEW.circuit_reason,
        'at', outbox.utc_text(now())))::text);
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION outbox.notify_circuit_change() IS 'NOTIFY outbox_events when a target''s circuit opens (from closed) or closes (0015).';

CREATE FUNCTION outbox.notify_relays() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM outbox.relays WHERE idle AND heartbeat_at > now() - interval '2 minutes') THEN
        RETURN NULL; -- every relay is busy (or none runs): they claim again on their own
    END IF;
    IF TG_OP = 'INSERT' THEN
        -- Rows enqueued due by this transaction have next_attempt_at = now(): one
        -- probe of intents_due per enabled target finds them.
        IF EXISTS (SELECT 1 FROM outbox.targets t
                    WHERE t.enabled
                      AND EXISTS (SELECT 1 FROM outbox.intents i
                                   WHERE i.state = 'pending' AND i.target = t.name
                                     AND i.next_attempt_at = now())) THEN
            PERFORM pg_notify('outbox_intents', '');
        END IF;
    ELSIF EXISTS (SELECT 1 FROM changed_rows WHERE state = 'pending' AND next_attempt_at <= now()) THEN
        PERFORM pg_notify('outbox_intents', '');
    END IF;
    RETURN NULL;
END
$$;

-- Wakes idle relays (NOTIFY outbox_intents) when an UPDATE made a row pending
-- and due; runs only for such rows (the trigger's WHEN clause).
CREATE FUNCTION outbox.notify_relays_row() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM outbox.relays WHERE idle AND heartbeat_at > now() - interval '2 minutes') THEN
        PERFORM pg_notify('outbox_intents', '');
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION outbox.notify_relays_row() IS 'Wakes idle relays (NOTIFY outbox_intents) when an UPDATE made a row pending and due; runs only for such rows (the trigger''s WHEN clause).';

-- Whether the session's login is a member of outbox_operator or outbox_relay:
-- it may read an MCP client's outcome and cancel its run (0036).
CREATE FUNCTION outbox.operator_session() RETURNS boolean
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT pg_catalog.pg_has_role(session_user, 'outbox_operator', 'MEMBER')
           OR pg_catalog.pg_has_role(session_user, 'outbox_relay', 'MEMBER')
$$;
COMMENT ON FUNCTION outbox.operator_session() IS 'Whether the session''s login is a member of outbox_operator or outbox_relay: it may read an MCP client''s outcome and cancel its run (0036).';

CREATE FUNCTION outbox.ordering_head_before(p_group text, p_id bigint) RETURNS outbox.intents
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT h.* FROM outbox.intents h
     WHERE p_group IS NOT NULL AND h.ordering_key = p_group AND h.id < p_id
       AND h.state NOT IN ('succeeded', 'cancelled')
     ORDER BY h.id LIMIT 1
$$;

CREATE FUNCTION outbox.ordering_lock_groups(p_groups text[]) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    h integer;
BEGIN
    FOR h IN SELECT DISTINCT hashtext(g) FROM unnest(p_groups) AS g WHERE g IS NOT NULL ORDER BY 1 LOOP
        PERFORM pg_advisory_xact_lock(1330774019, h);
    END LOOP;
END
$$;

CREATE FUNCTION outbox.ordering_locked_intent(p_key text, p_operation text) RETURNS outbox.intents
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    grp  text;
    held boolean;
    row  outbox.intents;
BEGIN
    SELECT i.ordering_key, i.state = 'pending' AND i.next_attempt_at = 'infinity' INTO grp, held
      FROM outbox.intents i WHERE i.key = p_key;
    IF grp IS NOT NULL AND held THEN
        PERFORM outbox.ordering_lock_groups(ARRAY[grp]);
    END IF;
    row := outbox.locked_intent(p_key, p_operation);
    IF row.ordering_key IS NOT NULL THEN
        PERFORM outbox.ordering_lock_groups(ARRAY[row.ordering_key]);
    END IF;
    RETURN row;
END
$$;

CREATE FUNCTION outbox.ordering_place(p_key text, p_group text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF p_group = '' OR octet_length(p_group) > 255 OR p_group ~ '[\u0001-\u001f\u007f-\u009f]' THEN
        RAISE EXCEPTION 'outbox.enqueue: ordering key % for key % is %', quote_literal(p_group), quote_literal(p_key),
                        CASE WHEN p_group = '' THEN 'empty'
                             WHEN octet_length(p_group) > 255 THEN octet_length(p_group) || ' bytes long; the limit is 255'
                             ELSE 'not printable (it contains a control character)' END
            USING ERRCODE = 'OR011',
                  HINT = 'An ordering key names a group of intents sent one at a time, e.g. the run id; NULL for unordered.';
    END IF;
    IF EXISTS (SELECT 1 FROM outbox.intents WHERE key = p_key) THEN
        RETURN false;
    END IF;
    INSERT INTO outbox.ordering_groups AS g (ordering_key) VALUES (p_group)
    ON CONFLICT (ordering_key) DO UPDATE SET enqueued = g.enqueued + 1, last_enqueue_at = now();
    -- A new statement: at READ COMMITTED it sees every intent of the group
    -- committed before the lock above was granted.
    RETURN EXISTS (SELECT 1 FROM outbox.intents l
                    WHERE l.ordering_key = p_group AND l.state NOT IN ('succeeded', 'cancelled'));
END
$$;

CREATE FUNCTION outbox.ordering_release(p_groups text[]) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    released integer;
    emptied  text[];
BEGIN
    PERFORM outbox.ordering_lock_groups(p_groups);
    -- New statements from here on: they see what settled before the locks were granted.
    UPDATE outbox.intents i
       SET next_attempt_at = greatest(now(), coalesce(i.not_before, now())), updated_at = now()
      FROM (SELECT DISTINCT g FROM unnest(p_groups) AS g WHERE g IS NOT NULL) AS u
     CROSS JOIN LATERAL (SELECT h.id FROM outbox.intents h
                          WHERE h.ordering_key = u.g AND h.state NOT IN ('succeeded', 'cancelled')
                          ORDER BY h.id LIMIT 1) AS head
     WHERE i.id = head.id AND i.state = 'pending' AND i.next_attempt_at = 'infinity';
    GET DIAGNOSTICS released = ROW_COUNT;

    SELECT array_agg(e.ordering_key) INTO emptied
      FROM (SELECT o.ordering_key FROM outbox.ordering_groups o
             WHERE o.ordering_key = ANY (p_groups)
               AND NOT EXISTS (SELECT 1 FROM outbox.intents l
                                WHERE l.ordering_key = o.ordering_key AND l.state NOT IN ('succeeded', 'cancelled'))
               FOR UPDATE SKIP LOCKED) AS e;
    IF emptied IS NOT NULL THEN
        -- Locked: no enqueue can add to these groups now; look again with a new snapshot.
        DELETE FROM outbox.ordering_groups o
         WHERE o.ordering_key = ANY (emptied)
           AND NOT EXISTS (SELECT 1 FROM outbox.intents l
                            WHERE l.ordering_key = o.ordering_key AND l.state NOT IN ('succeeded', 'cancelled'));
    END IF;
    RETURN released;
END
$$;

CREATE FUNCTION outbox.ordering_turn_at_commit() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    head_id bigint;
    held    boolean;
BEGIN
    SELECT h.id, h.state = 'pending' AND h.next_attempt_at = 'infinity' INTO head_id, held
      FROM outbox.intents h
     WHERE h.ordering_key = NEW.ordering_key AND h.state NOT IN ('succeeded', 'cancelled')
     ORDER BY h.id
     LIMIT 1
       FOR SHARE;
    IF held THEN
        UPDATE outbox.intents i
           SET next_attempt_at = greatest(now(), coalesce(i.not_before, now())), updated_at = now()
         WHERE i.id = head_id AND i.state = 'pending' AND i.next_attempt_at = 'infinity';
    ELSIF head_id IS NULL THEN
        -- Nothing live in the group (the intent was answered from a tombstone and taken
        -- back, say): its row goes. This transaction holds the row's lock.
        DELETE FROM outbox.ordering_groups g WHERE g.ordering_key = NEW.ordering_key;
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION outbox.ordering_waits_for(p_group text, p_id bigint) RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT coalesce((SELECT CASE WHEN starts_with(p_group, 'mcp:') OR outbox.caller_may_see(h.enqueued_by)
                                 THEN format('waiting for %s (%s), the head of ordering group %s: it is sent once that one succeeded or was cancelled',
                                             h.key, outbox.visible_status(h.state, h.ambiguous), p_group)
                                 ELSE format('waiting for its turn in ordering group %s, behind an intent of another login',
                                             p_group) END
                       FROM outbox.ordering_head_before(p_group, p_id) h WHERE h.id IS NOT NULL),
                    'waiting for its turn in ordering group ' || p_group)
$$;

CREATE FUNCTION outbox.outcome(p_key text) RETURNS TABLE(status text, response_status integer, response_body text, attempts integer, last_error text, message text, state outbox.intent_state, target text, updated_at timestamp with time zone)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF starts_with(p_key, 'mcp:') AND NOT outbox.operator_session() THEN
        PERFORM outbox.refuse_front_door('outcome', 'key', p_key);
    END IF;
    RETURN QUERY SELECT * FROM outbox.outcome_any(p_key);
END
$$;

CREATE FUNCTION outbox.outcome_any(p_key text) RETURNS TABLE(status text, response_status integer, response_body text, attempts integer, last_error text, message text, state outbox.intent_state, target text, updated_at timestamp with time zone)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    stone outbox.tombstones;
BEGIN
    RETURN QUERY
    SELECT outbox.visible_status(i.state, i.ambiguous),
           CASE WHEN i.state IN ('succeeded', 'failed') THEN i.response_status END,
           CASE WHEN i.state IN ('succeeded', 'failed') THEN i.response_body END,
           i.attempts,
           -- A raw transport error is never the outcome: only final states carry a reason.
           CASE WHEN i.state IN ('failed', 'cancelled') THEN i.last_error END,
           CASE outbox.visible_status(i.state, i.ambiguous)
               WHEN 'reconciling' THEN coalesce(CASE WHEN i.state = 'unknown'   -- 0023
                                                     THEN 'outcome unknown: ' || outbox.needs_person(i.id, i.target, i.first_attempt_at) END,
                                                'outcome unknown, reconciling')
               WHEN 'awaiting_approval' THEN 'waiting for approval'
               WHEN 'pending' THEN CASE WHEN i.next_attempt_at = 'infinity' AND i.ordering_key IS NOT NULL
                                        THEN outbox.ordering_waits_for(i.ordering_key, i.id)   -- 0013
                                        ELSE 'waiting for delivery' END
               WHEN 'delivering' THEN 'being delivered'
               WHEN 'succeeded' THEN 'the target acted'
               WHEN 'failed' THEN 'the target did not act and will not'
               WHEN 'cancelled' THEN coalesce('cancelled after ' || (SELECT d.story FROM outbox.delivery_summary(i.id) d),
                                              'cancelled before it was sent')   -- 0026
           END,
           i.state, i.target, i.updated_at
      FROM outbox.intents i
     WHERE i.key = p_key
       AND (starts_with(p_key, 'mcp:') OR outbox.caller_may_see(i.enqueued_by));   -- 0026, 0036
    IF FOUND THEN
        RETURN;
    END IF;
    stone := outbox.tombstone_of(p_key);
    IF stone.intent_id IS NULL
       OR NOT (starts_with(p_key, 'mcp:') OR outbox.caller_may_see(stone.enqueued_by)) THEN   -- 0026, 0036
        RETURN;
    END IF;
    status := outbox.visible_status(stone.state, false);
    response_status := CASE WHEN stone.state IN ('succeeded', 'failed') THEN stone.response_status END;
    response_body := NULL;
    attempts := NULL;
    last_error := NULL;
    message := format('%s; its details were pruned at %s (the key is remembered until %s)',
                      CASE stone.state
                          WHEN 'succeeded' THEN 'the target acted'
                          WHEN 'failed' THEN 'the target did not act and will not'
                          ELSE 'cancelled (the target did not act)' END,   -- 0026: whether it was sent is not kept
                      outbox.utc_text(stone.pruned_at), outbox.utc_text(stone.forget_at));
    state := stone.state;
    target := stone.target;
    updated_at := stone.settled_at;
    RETURN NEXT;
END
$$;

-- What outbox.prune would remove now, per target and final state.
CREATE FUNCTION outbox.prunable() RETURNS TABLE(target text, state outbox.intent_state, intents bigint, oldest_settled timestamp with time zone, newest_settled timestamp with time zone, retain_for interval)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT i.target, i.state, count(*), min(i.updated_at), max(i.updated_at), t.retain_for
      FROM outbox.targets t
      JOIN outbox.intents i ON i.target = t.name
     WHERE i.state IN ('succeeded', 'failed', 'cancelled') AND i.updated_at < now() - t.retain_for
       AND NOT EXISTS (SELECT 1 FROM outbox.intents o JOIN outbox.targets ot ON ot.name = o.target
                        WHERE o.key = i.compensates
                          AND NOT (o.state IN ('succeeded', 'failed', 'cancelled')
                                   AND o.updated_at < now() - ot.retain_for))
       AND NOT EXISTS (SELECT 1 FROM outbox.intents c JOIN outbox.targets ct ON ct.name = c.target
                        WHERE c.compensates = i.key
                          AND NOT (c.state IN ('succeeded', 'failed', 'cancelled')
                                   AND c.updated_at < now() - ct.retain_for))
       -- 0024: as in prune_target, a failed intent of an ordering group stays
       AND NOT (i.state = 'failed' AND i.ordering_key IS NOT NULL)
     GROUP BY i.target, i.state, t.retain_for
     ORDER BY i.target, i.state
$$;
COMMENT ON FUNCTION outbox.prunable() IS 'What outbox.prune would remove now, per target and final state.';

CREATE FUNCTION outbox.prune(p_limit integer DEFAULT 5000) RETURNS bigint
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT pruned::bigint FROM outbox.prune_step(p_limit)
$$;

CREATE FUNCTION outbox.prune_ids(p_ids bigint[], p_dedupe_window interval) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    n integer;
BEGIN
    IF p_ids IS NULL THEN
        RETURN 0;
    END IF;
    WITH gone AS (
        DELETE FROM outbox.intents i
         WHERE i.id = ANY (p_ids)
        RETURNING i.id, i.key, i.target, i.fingerprint, i.state, i.response_status, i.updated_at,
                  i.enqueued_by   -- 0026
    )
    -- 0036: an MCP client's task goes with its intent (the key is remembered by
    -- the tombstone; the same key called again gets a new task).
    , tasks AS (
        DELETE FROM outbox.mcp_tasks k
         USING gone g
         WHERE starts_with(g.key, 'mcp:') AND k.client = split_part(g.key, ':', 2)
           AND k.intent_key = g.key COLLATE "default"
    )
    INSERT INTO outbox.tombstones (key_hash, intent_id, target, fingerprint, state, response_status,
                                   settled_at, forget_at, enqueued_by)   -- 0026
    SELECT outbox.key_hash(g.key), g.id, g.target, substring(g.fingerprint FROM 1 FOR 16), g.state,
           g.response_status, g.updated_at,
           -- 0024: a key that settled before retention began is remembered for good,
           -- unless an admin lets the target forget such keys (forget_pre_retention)
           CASE WHEN g.updated_at < (SELECT e.began FROM outbox.retention_epoch e) AND NOT t.forget_pre_retention
                THEN 'infinity'::timestamptz
                ELSE g.updated_at + coalesce(p_dedupe_window, t.dedupe_window) END,
           g.enqueued_by   -- 0026
      FROM gone g
      JOIN outbox.targets t ON t.name = g.target;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

CREATE FUNCTION outbox.prune_linked(p_limit integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    members bigint[];
    kept    bigint[];
BEGIN
    -- Candidates: prunable compensations and the prunable intents they undo.
    SELECT array_agg(DISTINCT x.id) INTO members
      FROM (SELECT c.id, o.id AS oid
              FROM outbox.intents c
              JOIN outbox.targets tc ON tc.name = c.target
              JOIN outbox.intents o ON o.key = c.compensates
              JOIN outbox.targets t_o ON t_o.name = o.target
             WHERE c.compensates IS NOT NULL
               AND c.state IN ('succeeded', 'failed', 'cancelled') AND c.updated_at < now() - tc.retain_for
               AND o.state IN ('succeeded', 'failed', 'cancelled') AND o.updated_at < now() - t_o.retain_for
               -- 0024: a failed intent of an ordering group stays (it holds its group)
               AND NOT (c.state = 'failed' AND c.ordering_key IS NOT NULL)
               AND NOT (o.state = 'failed' AND o.ordering_key IS NOT NULL)
             LIMIT p_limit) pairs
      CROSS JOIN LATERAL (VALUES (pairs.id), (pairs.oid)) AS x(id);
    IF members IS NULL THEN
        RETURN 0;
    END IF;
    -- Drop every member linked to an intent outside the set, until none is
    -- (a chain: a compensation of a compensation).
    LOOP
        SELECT array_agg(m.id) INTO kept
          FROM outbox.intents m
         WHERE m.id = ANY (members)
           AND NOT EXISTS (SELECT 1 FROM outbox.intents o
                            WHERE o.key = m.compensates AND NOT (o.id = ANY (members)))
           AND NOT EXISTS (SELECT 1 FROM outbox.intents c
                            WHERE c.compensates = m.key AND NOT (c.id = ANY (members)));
        EXIT WHEN coalesce(cardinality(kept), 0) = cardinality(members);
        members := kept;
        IF members IS NULL THEN
            RETURN 0;
        END IF;
    END LOOP;

    -- All of them or none: a member locked by someone else waits for the next run.
    SELECT array_agg(l.id) INTO kept
      FROM (SELECT i.id FROM outbox.intents i WHERE i.id = ANY (members) FOR UPDATE SKIP LOCKED) l;
    IF coalesce(cardinality(kept), 0) <> cardinality(members) THEN
        RETURN 0;
    END IF;
    RETURN outbox.prune_ids(members, NULL);
END
$$;

CREATE FUNCTION outbox.prune_step(p_limit integer DEFAULT 5000) RETURNS TABLE(pruned integer, forgotten integer, locked boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    t      record;
    budget integer := p_limit;
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 100000 THEN
        RAISE EXCEPTION 'outbox.prune: limit must be from 1 to 100000, got %', coalesce(p_limit::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    pruned := 0;
    forgotten := 0;
    locked := pg_try_advisory_xact_lock(1330774018, 0);
    IF NOT locked THEN
        RETURN NEXT;
        RETURN;
    END IF;
    -- Oldest retention first across targets would need a sort over all of
    -- them; targets are few, so each gets the budget that is left in turn.
    FOR t IN SELECT name, retain_for, dedupe_window FROM outbox.targets ORDER BY name LOOP
        EXIT WHEN budget <= 0;
        budget := budget - outbox.prune_target(t.name, t.retain_for, t.dedupe_window, budget);
    END LOOP;
    IF budget > 0 THEN
        budget := budget - outbox.prune_linked(budget);
    END IF;
    pruned := p_limit - budget;

    DELETE FROM outbox.tombstones s
     WHERE s.ctid = ANY (ARRAY(SELECT x.ctid FROM outbox.tombstones x
                                WHERE x.forget_at < now() LIMIT p_limit));
    GET DIAGNOSTICS forgotten = ROW_COUNT;
    -- 0036: MCP tasks past their TTL (not counted: forgotten counts tombstones).
    DELETE FROM outbox.mcp_tasks k
     WHERE k.ctid = ANY (ARRAY(SELECT x.ctid FROM outbox.mcp_tasks x
                                WHERE x.expires_at <= now() LIMIT p_limit));
    RETURN NEXT;
END
$$;

CREATE FUNCTION outbox.prune_target(p_target text, p_retain_for interval, p_dedupe_window interval, p_limit integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    doomed bigint[];
BEGIN
    SELECT array_agg(d.id) INTO doomed
      FROM (SELECT i.id
              FROM outbox.intents i
             WHERE i.target = p_target AND i.state IN ('succeeded', 'failed', 'cancelled')
               AND i.updated_at < now() - p_retain_for
               AND i.compensates IS NULL
               AND NOT EXISTS (SELECT 1 FROM outbox.intents c WHERE c.compensates = i.key)
               -- 0024: a failed intent of an ordering group stays, with or without later
               -- steps: it holds its group until a person cancels it (then the group goes on)
               AND NOT (i.state = 'failed' AND i.ordering_key IS NOT NULL)
             ORDER BY i.updated_at
             LIMIT p_limit
               FOR UPDATE SKIP LOCKED) d;
    RETURN outbox.prune_ids(doomed, p_dedupe_window);
END
$$;

CREATE FUNCTION outbox.quote_key(p_key text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    c   text;
    out text := '';
BEGIN
    IF p_key IS NULL THEN
        RETURN 'NULL';
    END IF;
    IF p_key !~ '[\u0001-\u001f\u007f-\u009f]' THEN
        RETURN quote_literal(p_key);
    END IF;
    FOREACH c IN ARRAY regexp_split_to_array(p_key, '') LOOP
        out := out || CASE WHEN c = '\' THEN '\\'
                           WHEN c = '''' THEN '\'''
                           WHEN c = E'\n' THEN '\n'
                           WHEN c = E'\r' THEN '\r'
                           WHEN c = E'\t' THEN '\t'
                           WHEN c ~ '[\u0001-\u001f\u007f-\u009f]' THEN '\u' || lpad(upper(to_hex(ascii(c))), 4, '0')
                           ELSE c END;
    END LOOP;
    RETURN 'E''' || out || '''';
END
$$;

CREATE FUNCTION outbox.rate_burst(p_rate real) RETURNS double precision
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT greatest(1.0, p_rate * 0.025) $$;

CREATE FUNCTION outbox.rate_claim_at_least(p_rate real) RETURNS double precision
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT greatest(1.0, floor(outbox.rate_burst(p_rate) / 2)) $$;

CREATE FUNCTION outbox.record(p_relay text, p_ids bigint[], p_attempts integer[], p_states outbox.intent_state[], p_delay_ms integer[], p_ambiguous boolean[], p_classes outbox.attempt_class[], p_sent boolean[], p_http integer[], p_errors text[], p_latency_ms integer[], p_bodies text[], p_key_sent boolean[]) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    flag    text;      -- set_config's answer, unused (an assignment keeps FOUND)
    updated integer := 0;
    applied boolean[] := array_fill(false, ARRAY[coalesce(cardinality(p_ids), 0)]);
    o       bigint;
    r_id    bigint;
    r_state outbox.intent_state;
    grp     text;
    ev      jsonb;
    final_ids    bigint[] := '{}';   -- for outbox.settle
    final_states outbox.intent_state[] := '{}';
    final_groups text[] := '{}';
BEGIN
    -- One outcome per row: a delivery's (sent known) before a take-over's,
    -- then the first buffered; fenced by (lease owner, attempt).
    FOR o, r_id, r_state, grp, ev IN
        WITH u AS (
            SELECT x.*,
                   row_number() OVER (PARTITION BY x.id ORDER BY x.sent IS NULL, x.ord) = 1 AS chosen
              FROM unnest(p_ids, p_attempts, p_states, p_delay_ms, p_ambiguous, p_classes, p_sent,
                          p_http, p_errors, p_bodies) WITH ORDINALITY
                   AS x(id, attempt, state, delay_ms, ambiguous, class, sent, http, error, body, ord)
        )
        UPDATE outbox.intents i
           SET state = u.state,
               next_attempt_at = CASE WHEN u.state IN ('pending', 'unknown')
                                      THEN now() + coalesce(u.delay_ms, 0) * interval '1 millisecond'
                                      ELSE i.next_attempt_at END,
               lease_owner = NULL,
               lease_expires_at = NULL,
               ambiguous = CASE WHEN u.class = 'reconciled_not_executed' THEN false
                                ELSE i.ambiguous OR u.ambiguous END,
               response_status = CASE WHEN u.state IN ('succeeded', 'failed') THEN u.http
                                      ELSE i.response_status END,
               response_body = CASE WHEN u.state IN ('succeeded', 'failed') THEN u.body
                                    ELSE i.response_body END,
               last_error = u.error,
               updated_at = now()
          FROM u
         WHERE u.chosen AND i.id = u.id AND i.state IN ('in_flight', 'unknown') AND i.lease_owner = p_relay
           AND i.attempts = u.attempt
        RETURNING u.ord, i.id, u.state, i.ordering_key,
                  -- what a person may have to act on (outbox.intent_event); a failed
                  -- intent's event is built by outbox.settle, with every final state's
                  CASE WHEN u.state = 'unknown' AND u.class NOT IN ('reconcile_inconclusive', 'reconciled_executed',
                                                                     'reconciled_not_executed')
                       THEN outbox.intent_event(i, u.class, u.http, u.error) END
    LOOP
        applied[o] := true;
        updated := updated + 1;
        IF r_state IN ('succeeded', 'failed') THEN
            final_ids := final_ids || r_id;
            final_states := final_states || r_state;
            final_groups := final_groups || grp;
        END IF;
        IF ev IS NOT NULL THEN
            PERFORM pg_notify('outbox_events', ev::text);
            IF ev ? 'blocks' THEN
                PERFORM pg_notify('outbox_events',
                                  jsonb_build_object('event', 'group_blocked', 'group', ev->>'ordering_key',
                                                     'head', ev->>'key', 'blocks', ev->'blocks',
                                                     'at', ev->>'at')::text);
            END IF;
        END IF;
    END LOOP;

    -- The intents of outcomes not applied are kept from being deleted until
    -- this commits (the INSERT below is not reference-checked).
    IF updated < coalesce(cardinality(p_ids), 0) THEN
        PERFORM 1 FROM outbox.intents i
         WHERE i.id IN (SELECT x.id FROM unnest(p_ids) WITH ORDINALITY AS x(id, ord) WHERE NOT applied[x.ord])
           FOR KEY SHARE OF i;
    END IF;

    -- Every outcome into the history, in the order the relay saw them; not
    -- for an intent deleted meanwhile (its history would break the reference).
    flag := set_config('outbox.in_record', 'on', true);     -- the trigger attempts_reference_insert's WHEN
    INSERT INTO outbox.attempts (intent_id, attempt, relay, class, request_sent, http_status,
                                 error, latency_ms, response_body, key_sent, recorded)
    SELECT x.id, x.attempt, p_relay, x.class, x.sent, x.http, x.error, x.latency_ms,
           left(x.body, 4096), x.key_sent, applied[x.ord]
      FROM unnest(p_ids, p_attempts, p_classes, p_sent, p_http, p_errors, p_latency_ms, p_bodies,
                  p_key_sent) WITH ORDINALITY
           AS x(id, attempt, class, sent, http, error, latency_ms, body, key_sent, ord)
     WHERE applied[x.ord] OR EXISTS (SELECT 1 FROM outbox.intents i WHERE i.id = x.id)
     ORDER BY x.ord;
    flag := set_config('outbox.in_record', 'off', true);

    IF cardinality(final_ids) > 0 THEN
        PERFORM outbox.settle(final_ids, final_states, final_groups);
    END IF;
    RETURN updated;
END
$$;

CREATE FUNCTION outbox.redrive(p_target text, p_since timestamp with time zone, p_until timestamp with time zone, p_dry_run boolean DEFAULT false, p_limit integer DEFAULT 10000, p_by text DEFAULT NULL::text) RETURNS TABLE(key text, target text, settled_at timestamp with time zone, attempts integer, last_error text)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    tgt outbox.targets;
    who text := coalesce(nullif(p_by, ''), session_user);
BEGIN
    IF p_target IS NULL OR p_since IS NULL OR p_until IS NULL OR p_dry_run IS NULL THEN
        RAISE EXCEPTION 'outbox.redrive: target, since, until and dry_run are required'
            USING ERRCODE = '22023';
    END IF;
    IF p_since >= p_until THEN
        RAISE EXCEPTION 'outbox.redrive: since (%) must be before until (%)',
                        outbox.utc_text(p_since), outbox.utc_text(p_until)
            USING ERRCODE = '22023', HINT = 'The window is [since, until): settled at or after since, before until.';
    END IF;
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 1000000 THEN
        RAISE EXCEPTION 'outbox.redrive: limit must be between 1 and 1000000, got %', coalesce(p_limit::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    SELECT * INTO tgt FROM outbox.targets t WHERE t.name = p_target;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'outbox.redrive: unknown target %', quote_literal(p_target)
            USING ERRCODE = 'OR002', HINT = 'outbox-relay targets lists them.';
    END IF;
    IF NOT tgt.enabled THEN
        RAISE EXCEPTION 'outbox.redrive: target % is disabled: nothing would be sent', quote_literal(p_target)
            USING ERRCODE = 'OR007', HINT = 'Enable the target first (outbox.targets.enabled).';
    END IF;

    RETURN QUERY
    WITH chosen AS (
        SELECT i.id, i.key, i.updated_at, i.attempts, i.last_error
          FROM outbox.intents i
         WHERE i.target = p_target AND i.state = 'failed'
           AND i.updated_at >= p_since AND i.updated_at < p_until
           AND NOT i.ambiguous
           AND NOT EXISTS (SELECT 1 FROM outbox.attempts a
                            WHERE a.intent_id = i.id
                              AND outbox.attempt_may_have_executed(a.class, a.request_sent, a.http_status))
         ORDER BY i.updated_at, i.id
         LIMIT p_limit
           FOR UPDATE OF i SKIP LOCKED
    ), moved AS (
        UPDATE outbox.intents i
           SET state = 'pending', next_attempt_at = now(), attempts = 0, first_attempt_at = NULL,
               lease_owner = NULL, lease_expires_at = NULL, response_status = NULL, response_body = NULL,
               last_error = NULL, updated_at = now()
          FROM chosen c
         WHERE i.id = c.id AND NOT p_dry_run
        RETURNING c.*
    ), noted AS (
        INSERT INTO outbox.attempts (intent_id, attempt, relay, class, request_sent, error)
        SELECT m.id, m.attempts, who, 'resolved', false,
               format('redriven by %s (session user %s): failed -> pending, a fresh delivery (settled %s after %s attempt(s), none of which may have executed; counted from 0 again); last error: %s',
                      who, session_user, outbox.utc_text(m.updated_at), m.attempts,
                      coalesce(m.last_error, '-'))
          FROM moved m
        RETURNING intent_id
    )
    SELECT c.key, p_target, c.updated_at, c.attempts, c.last_error
      FROM chosen c
     WHERE p_dry_run OR c.id IN (SELECT n.intent_id FROM noted n)
     ORDER BY c.updated_at, c.id;
END
$$;

-- ANALYZE outbox.intents if it has more than doubled (plus 1 MB) since its
-- statistics were taken; never waits. True if it ran. Called by
-- outbox.relay_heartbeat (no role calls it directly).
CREATE FUNCTION outbox.refresh_statistics() RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET lock_timeout TO '50ms'
    AS $$
DECLARE
    known_pages integer;
    pages       bigint;
BEGIN
    -- ANALYZE by a role that does not own the table only warns: then never try.
    SELECT c.relpages INTO known_pages FROM pg_class c
     WHERE c.oid = 'outbox.intents'::regclass AND pg_has_role(c.relowner, 'USAGE');
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    BEGIN
        pages := pg_relation_size('outbox.intents'::regclass) / current_setting('block_size')::integer;
        IF pages <= 2 * greatest(known_pages, 0) + 128
           OR NOT pg_try_advisory_xact_lock(1330774020, 0) THEN
            RETURN false;   -- fresh enough, or another relay is at it
        END IF;
        ANALYZE outbox.intents;
    EXCEPTION WHEN lock_not_available THEN
        RETURN false;   -- autovacuum, another ANALYZE or DDL holds the table: not now
    END;
    RETURN true;
END
$$;
COMMENT ON FUNCTION outbox.refresh_statistics() IS 'ANALYZE outbox.intents if it has more than doubled (plus 1 MB) since its statistics were taken; never waits. True if it ran. Called by outbox.relay_heartbeat (no role calls it directly).';

CREATE FUNCTION outbox.refuse_front_door(p_function text, p_what text, p_value text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RAISE EXCEPTION 'outbox.%: the % % starts with "mcp:", which is reserved for the MCP front door',
                    p_function, p_what, outbox.quote_key(p_value)
        USING ERRCODE = 'OR026',
              DETAIL = 'Keys, run ids and ordering keys that start with "mcp:" are the MCP clients'' (outbox-relay mcp names them mcp:<client>:<key>); only the front door''s functions (outbox.mcp_*) make, read or cancel them.',
              HINT = 'Use a key, run id or ordering key that does not start with "mcp:", e.g. one that starts with your service''s name.';
END
$$;

CREATE FUNCTION outbox.refuse_key(p_function text, p_key text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
DECLARE
    alphabet constant text :=
        'A key is printable UTF-8 of 1 to 255 bytes: no control characters, no Unicode space other than U+0020 '
        'and no invisible format character (such as U+00A0, U+200B, U+202E, U+2060, U+FEFF), '
        'no space at either end, and not "." or "..". Make it in the deterministic layer, e.g. {run_id}:{step_id}.';
    bad text;
BEGIN
    IF p_key IS NULL OR p_key = '' THEN
        RAISE EXCEPTION 'outbox.%: the key must not be empty', p_function
            USING ERRCODE = 'OR004', HINT = 'Make the key in the deterministic layer, e.g. {run_id}:{step_id}.';
    END IF;
    IF octet_length(p_key) > 255 THEN
        RAISE EXCEPTION 'outbox.%: key is % bytes long; the limit is 255', p_function, octet_length(p_key)
            USING ERRCODE = 'OR004';
    END IF;
    bad := substring(p_key FROM '[\u0001-\u001f\u007f-\u009f]');   -- 0023: named, and the key escaped
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'outbox.%: key % contains a control character (U+%)', p_function, outbox.quote_key(p_key),
                        lpad(upper(to_hex(ascii(bad))), 4, '0')
            USING ERRCODE = 'OR004', HINT = 'Keys travel in HTTP headers; control characters are refused.';
    END IF;
    IF p_key IN ('.', '..') THEN
        RAISE EXCEPTION 'outbox.%: key % is a dot segment: in a status URL it would name another path',
                        p_function, quote_literal(p_key)
            USING ERRCODE = 'OR009', HINT = alphabet;
    END IF;
    IF p_key ~ '^ | $' THEN
        RAISE EXCEPTION 'outbox.%: key % % with a space: receivers strip it from the header, so it would be another key''s duplicate',
                        p_function, quote_literal(p_key), CASE WHEN p_key ~ '^ ' THEN 'begins' ELSE 'ends' END
            USING ERRCODE = 'OR009', HINT = alphabet;
    END IF;
    bad := substring(p_key FROM '[\u00a0\u00ad\u034f\u061c\u115f\u1160\u1680\u17b4\u17b5\u180b-\u180f\u2000-\u200f\u2028-\u202f\u205f-\u206f\u3000\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\ufffe\uffff\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]');
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'outbox.%: key % contains U+%, a Unicode space or invisible format character',
                        p_function, quote_literal(p_key), upper(lpad(to_hex(ascii(bad)), greatest(4, length(to_hex(ascii(bad)))), '0'))
            USING ERRCODE = 'OR009', HINT = alphabet;
    END IF;
END
$_$;

CREATE FUNCTION outbox.refuse_others_key(p_function text, p_key text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RAISE EXCEPTION 'outbox.%: key % is already used by another login', p_function, outbox.quote_key(p_key)
        USING ERRCODE = 'OR001',
              DETAIL = 'This login is isolated (outbox.isolated_logins): it sees and acts on only the intents it enqueued, and is not told what another login''s key is for or how it ended.',
              HINT = 'An idempotency key names one action; use a new key, e.g. one that starts with your service''s name.';
END
$$;

CREATE FUNCTION outbox.refuse_traceparent(p_value text, p_from_setting boolean) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RAISE EXCEPTION 'outbox.enqueue: invalid traceparent % (from %)', quote_literal(left(p_value, 80)),
                    CASE WHEN p_from_setting THEN 'the setting outbox.traceparent' ELSE 'p_traceparent' END
        USING ERRCODE = 'OR012',
              HINT = 'A W3C traceparent of version 00: 00-<32 hex trace id, not all zeros>-<16 hex parent id, not all zeros>-<2 hex flags>, lower case.';
END
$$;

CREATE FUNCTION outbox.reject(p_key text, p_by text, p_reason text) RETURNS outbox.intent_state
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    row outbox.intents := outbox.ordering_locked_intent(p_key, 'reject');   -- the group's settle lock too
BEGIN
    IF p_by IS NULL OR p_by = '' THEN
        RAISE EXCEPTION 'outbox.reject: say who rejects (p_by)' USING ERRCODE = '22023';
    END IF;
    IF row.state <> 'awaiting_approval' THEN
        RAISE EXCEPTION 'outbox.reject: key % is %, not awaiting_approval', quote_literal(p_key), row.state
            USING ERRCODE = 'OR007';
    END IF;
    UPDATE outbox.intents
       SET state = 'cancelled', decided_by = p_by,
           last_error = 'rejected: ' || coalesce(p_reason, 'no reason given'),
           decision_note = p_reason, updated_at = now()
     WHERE id = row.id;
    PERFORM outbox.note_decision(row.id, row.attempts, p_by,
                                 format('rejected by %s (session user %s): %s', p_by, session_user, coalesce(p_reason, '')));
    PERFORM outbox.settle(ARRAY[row.id], ARRAY['cancelled'::outbox.intent_state], ARRAY[row.ordering_key]);
    RETURN 'cancelled';
END
$$;

-- Whether some relay sent a heartbeat in the last 2 minutes (0036).
CREATE FUNCTION outbox.relay_alive() RETURNS boolean
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT EXISTS (SELECT 1 FROM outbox.relays WHERE heartbeat_at > now() - interval '2 minutes')
$$;
COMMENT ON FUNCTION outbox.relay_alive() IS 'Whether some relay sent a heartbeat in the last 2 minutes (0036).';

CREATE FUNCTION outbox.relay_gone(p_relay text) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    DELETE FROM outbox.relays WHERE relay_id = p_relay;
$$;

CREATE FUNCTION outbox.relay_heartbeat(p_relay text, p_idle boolean) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    INSERT INTO outbox.relays AS r (relay_id, idle) VALUES (p_relay, p_idle)
    ON CONFLICT (relay_id) DO UPDATE SET idle = excluded.idle, heartbeat_at = now();
    DELETE FROM outbox.relays WHERE heartbeat_at < now() - interval '1 day';
    PERFORM outbox.refresh_statistics();   -- 0019
END
$$;

CREATE FUNCTION outbox.release(p_relay text, p_ids bigint[], p_attempts integer[]) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    released integer;
BEGIN
    UPDATE outbox.intents i
       SET state = 'pending',
           attempts = i.attempts - 1,
           first_attempt_at = CASE WHEN i.attempts = 1 THEN NULL ELSE i.first_attempt_at END,
           lease_owner = NULL,
           lease_expires_at = NULL,
           next_attempt_at = now(),
           updated_at = now()
      FROM unnest(p_ids, p_attempts) AS u(id, attempt)
     WHERE i.id = u.id AND i.state IS NOT DISTINCT FROM 'in_flight'   -- not intents_in_flight: by id
       AND i.lease_owner = p_relay
       AND i.attempts = u.attempt;
    GET DIAGNOSTICS released = ROW_COUNT;
    RETURN released;
END
$$;

CREATE FUNCTION outbox.renew_leases(p_relay text, p_ids bigint[], p_lease_ms integer) RETURNS SETOF bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RETURN QUERY
    WITH held AS (
        SELECT i.id
          FROM (SELECT DISTINCT h.id FROM unnest(p_ids) AS h(id)) AS h
          JOIN outbox.intents i ON i.id = h.id
         WHERE i.state IS NOT DISTINCT FROM 'in_flight'   -- not intents_in_flight: by id
           AND i.lease_owner = p_relay
           AND i.lease_expires_at < now() + p_lease_ms * interval '1 millisecond' * 5 / 6
           FOR UPDATE OF i SKIP LOCKED
    )
    UPDATE outbox.intents i
       SET lease_expires_at = now() + p_lease_ms * interval '1 millisecond'
      FROM held
     WHERE i.id = held.id
    RETURNING i.id;
END
$$;

CREATE FUNCTION outbox.resolve(p_key text, p_outcome text, p_note text) RETURNS outbox.intent_state
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    row outbox.intents := outbox.ordering_locked_intent(p_key, 'resolve');   -- the group's settle lock too
BEGIN
    IF p_outcome IS NULL OR p_outcome NOT IN ('succeeded', 'failed') THEN
        RAISE EXCEPTION 'outbox.resolve: outcome must be succeeded or failed, got %',
                        coalesce(quote_literal(p_outcome), 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF p_note IS NULL OR p_note = '' THEN
        RAISE EXCEPTION 'outbox.resolve: a note with the evidence is required' USING ERRCODE = '22023';
    END IF;
    IF row.state <> 'unknown' THEN
        RAISE EXCEPTION 'outbox.resolve: key % is %, not unknown', quote_literal(p_key), row.state
            USING ERRCODE = 'OR007';
    END IF;
    UPDATE outbox.intents
       SET state = p_outcome::outbox.intent_state,
           last_error = CASE WHEN p_outcome = 'failed' THEN 'resolved by an operator: ' || p_note END,
           decided_by = session_user, decision_note = p_note,
           lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
     WHERE id = row.id;
    PERFORM outbox.note_decision(row.id, row.attempts, session_user, 'resolved ' || p_outcome || ': ' || p_note);
    PERFORM outbox.settle(ARRAY[row.id], ARRAY[p_outcome::outbox.intent_state], ARRAY[row.ordering_key]);
    RETURN p_outcome::outbox.intent_state;
END
$$;

CREATE FUNCTION outbox.retries_due_now(p_target text) RETURNS integer
    LANGUAGE sql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    WITH waiting AS (
        SELECT i.id FROM outbox.intents i   -- intents_due
         WHERE i.state = 'pending' AND i.target = p_target
           AND i.next_attempt_at > now() AND i.next_attempt_at < 'infinity' AND i.attempts > 0
           FOR UPDATE SKIP LOCKED
    ), moved AS (
        UPDATE outbox.intents i SET next_attempt_at = now()
          FROM waiting w
         WHERE i.id = w.id
        RETURNING 1
    )
    SELECT count(*)::integer FROM moved
$$;

CREATE FUNCTION outbox.retry_now(p_key text, p_by text DEFAULT NULL::text) RETURNS outbox.intent_state
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    row outbox.intents := outbox.ordering_locked_intent(p_key, 'retry_now');   -- 0013
    tgt outbox.targets;
    who text := coalesce(nullif(p_by, ''), session_user);
    first_age interval;
    note text;
    head outbox.intents;   -- 0013
    unkeyed text;          -- 0025
BEGIN
    SELECT * INTO tgt FROM outbox.targets WHERE name = row.target;
    first_age := date_trunc('second', now() - row.first_attempt_at);
    head := outbox.ordering_head_before(row.ordering_key, row.id);   -- 0013

    IF row.state = 'pending' AND head.id IS NOT NULL THEN   -- 0013
        RAISE EXCEPTION 'outbox.retry_now: key % waits for % (%), the head of its ordering group %: it is sent after that one succeeds or is cancelled',
                        quote_literal(p_key), quote_literal(head.key), outbox.visible_status(head.state, head.ambiguous),
                        quote_literal(row.ordering_key)
            USING ERRCODE = 'OR007',
                  HINT = 'Settle the head: resolve or cancel it (outbox-relay stuck lists it).';
    ELSIF row.state = 'pending' THEN
        note := 'retry requested: pending, due now';
    ELSIF row.state = 'unknown' THEN
        IF tgt.key_header IS NULL THEN
            RAISE EXCEPTION 'outbox.retry_now: key % has an unknown outcome and target % cannot deduplicate (no key header): sending it again could execute it twice; find out from the target whether it acted, then resolve it',
                            quote_literal(p_key), quote_literal(row.target)
                USING ERRCODE = 'OR007',
                      HINT = 'outbox.resolve(key, ''succeeded'' | ''failed'', note), or: outbox-relay resolve KEY succeeded|failed --note TEXT';
        END IF;
        unkeyed := outbox.unkeyed_attempt(row.id);   -- 0025
        IF unkeyed = 'without' THEN
            RAISE EXCEPTION 'outbox.retry_now: key % has an unknown outcome and an attempt that may have executed was sent without a key (target % had no key header then): the target cannot recognise it, and sending it again could execute it twice; find out from the target whether it acted, then resolve it',
                            quote_literal(p_key), quote_literal(row.target)
                USING ERRCODE = 'OR007',
                      HINT = 'outbox.resolve(key, ''succeeded'' | ''failed'', note), or: outbox-relay resolve KEY succeeded|failed --note TEXT';
        ELSIF unkeyed = 'not recorded' THEN
            RAISE EXCEPTION 'outbox.retry_now: key % has an unknown outcome and whether an attempt that may have executed carried the key was not recorded (a lease taken over from a relay older than 0025, or an attempt before 0011): target % may not recognise it, and sending it again could execute it twice; find out from the target whether it acted, then resolve it',
                            quote_literal(p_key), quote_literal(row.target)
                USING ERRCODE = 'OR007',
                      HINT = 'outbox.resolve(key, ''succeeded'' | ''failed'', note), or: outbox-relay resolve KEY succeeded|failed --note TEXT';
        END IF;
        IF row.first_attempt_at IS NULL THEN
            RAISE EXCEPTION 'outbox.retry_now: key % has an unknown outcome and no recorded first attempt, so whether target % still remembers the key cannot be told: sending it again could execute it twice; find out from the target whether it acted, then resolve it',
                            quote_literal(p_key), quote_literal(row.target)
                USING ERRCODE = 'OR007',
                      HINT = 'outbox.resolve(key, ''succeeded'' | ''failed'', note), or: outbox-relay resolve KEY succeeded|failed --note TEXT';
        END IF;
        IF now() - row.first_attempt_at >= tgt.key_ttl THEN
            RAISE EXCEPTION 'outbox.retry_now: key % has an unknown outcome and its first attempt was % ago, past target %''s key_ttl of %: the target may have forgotten the key, and sending it again could execute it twice; find out from the target whether it acted, then resolve it',
                            quote_literal(p_key), first_age, quote_literal(row.target), tgt.key_ttl
                USING ERRCODE = 'OR007',
                      HINT = 'outbox.resolve(key, ''succeeded'' | ''failed'', note), or: outbox-relay resolve KEY succeeded|failed --note TEXT';
        END IF;
        note := format('retry requested: unknown -> pending with the same key (target %s honours keys; first attempt %s ago, key_ttl %s)',
                       row.target, first_age, tgt.key_ttl);
    ELSIF row.state = 'failed' THEN
        IF row.ambiguous THEN
            RAISE EXCEPTION 'outbox.retry_now: key % failed after an attempt that may have executed: sending it again could execute it twice',
                            quote_literal(p_key)
                USING ERRCODE = 'OR007',
                      HINT = 'A new action needs a new key.';
        END IF;
        note := format('retry requested: failed -> pending (no attempt may have executed; %s attempt(s) before, counted from 0 again)',
                       row.attempts);
    ELSE
        RAISE EXCEPTION 'outbox.retry_now: key % is %, %', quote_literal(p_key), row.state,
                        CASE row.state
                            WHEN 'in_flight' THEN 'being delivered now'
                            WHEN 'awaiting_approval' THEN 'approve it instead'
                            WHEN 'succeeded' THEN 'the target acted; nothing to retry'
                            ELSE 'it is final; nothing to retry'
                        END
            USING ERRCODE = 'OR007';
    END IF;

    IF NOT tgt.enabled THEN
        RAISE EXCEPTION 'outbox.retry_now: target % of key % is disabled: nothing would be sent',
                        quote_literal(row.target), quote_literal(p_key)
            USING ERRCODE = 'OR007', HINT = 'Enable the target first (outbox.targets.enabled).';
    END IF;

    IF row.state = 'failed' THEN
        UPDATE outbox.intents
           SET state = 'pending', next_attempt_at = CASE WHEN head.id IS NOT NULL THEN 'infinity' ELSE now() END,   -- 0013
               attempts = 0, first_attempt_at = NULL,
               response_status = NULL, response_body = NULL, updated_at = now()
         WHERE id = row.id;
    ELSE
        UPDATE outbox.intents
           SET state = 'pending', next_attempt_at = CASE WHEN head.id IS NOT NULL THEN 'infinity' ELSE now() END,   -- 0013
               lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
         WHERE id = row.id;
    END IF;
    PERFORM outbox.note_decision(row.id, row.attempts, who, note);
    RETURN 'pending';
END
$$;

CREATE FUNCTION outbox.rule_text(p_rule jsonpath) RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
DECLARE
    t     text := regexp_replace(p_rule::text, '\."([A-Za-z_][A-Za-z0-9_]*)"', '.\1', 'g');
    body  text;
    tok   text;
    depth integer := 0;
    n     integer := 0;
BEGIN
    body := regexp_replace(t, '^(strict |lax )', '');
    IF body !~ '^\(.*\)$' THEN
        RETURN t;
    END IF;
    -- Only when the first parenthesis closes at the very end.
    FOR tok IN SELECT m[1] FROM regexp_matches(body, '("(?:[^"\\]|\\.)*"|[()]|[^"()]+)', 'g') AS m LOOP
        n := n + length(tok);
        depth := depth + CASE tok WHEN '(' THEN 1 WHEN ')' THEN -1 ELSE 0 END;
        IF depth = 0 AND n < length(body) THEN
            RETURN t;
        END IF;
    END LOOP;
    RETURN substring(t FROM 1 FOR length(t) - length(body)) || substr(body, 2, length(body) - 2);
END
$_$;

CREATE FUNCTION outbox.settle(p_ids bigint[], p_states outbox.intent_state[], p_groups text[]) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    moving text[];
    ev     jsonb;
BEGIN
    IF cardinality(p_ids) IS DISTINCT FROM cardinality(p_states)
       OR cardinality(p_ids) IS DISTINCT FROM cardinality(p_groups) THEN
        RAISE EXCEPTION 'outbox.settle: % ids, % states and % groups: one of each per intent',
                        cardinality(p_ids), cardinality(p_states), cardinality(p_groups)
            USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_states) AS s WHERE s IS NULL OR s NOT IN ('succeeded', 'failed', 'cancelled')) THEN
        RAISE EXCEPTION 'outbox.settle: only succeeded, failed or cancelled is final, got %', p_states
            USING ERRCODE = '22023';
    END IF;

    -- Events for people (outbox_events): a failed intent, from the outcome
    -- that made it failed (the newest recorded row of its history); not when
    -- that row is a person's resolution. Built before the groups move on, so
    -- 'blocks' counts the group as it stood.
    FOR ev IN
        SELECT outbox.intent_event(i, a.class, a.http_status, a.error)
          FROM unnest(p_ids, p_states) WITH ORDINALITY AS s(id, state, ord)
          JOIN outbox.intents i ON i.id = s.id
          CROSS JOIN LATERAL (SELECT h.class, h.http_status, h.error
                                FROM outbox.attempts h
                               WHERE h.intent_id = s.id AND h.recorded
                               ORDER BY h.id DESC
                               LIMIT 1) AS a
         WHERE s.state = 'failed' AND a.class <> 'resolved'
         ORDER BY s.ord
    LOOP
        PERFORM pg_notify('outbox_events', ev::text);
        IF ev ? 'blocks' THEN
            PERFORM pg_notify('outbox_events',
                              jsonb_build_object('event', 'group_blocked', 'group', ev->>'ordering_key',
                                                 'head', ev->>'key', 'blocks', ev->'blocks',
                                                 'at', ev->>'at')::text);
        END IF;
    END LOOP;

    -- Ordered delivery: the next intent of a group is due once this one
    -- succeeded or was cancelled; a failed one keeps the group waiting.
    SELECT array_agg(DISTINCT s.grp) INTO moving
      FROM unnest(p_states, p_groups) AS s(state, grp)
     WHERE s.grp IS NOT NULL AND s.state IN ('succeeded', 'cancelled');
    IF moving IS NOT NULL THEN
        PERFORM outbox.ordering_release(moving);
    END IF;
END
$$;

CREATE FUNCTION outbox.take_over(p_relay text, p_limit integer, p_lease_ms integer, p_held bigint[]) RETURNS TABLE(id bigint, key text, target text, attempt integer, ambiguous boolean, first_attempt_ms bigint, previous_owner text, key_sent boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RETURN QUERY
    WITH expired AS (
        SELECT i.id, i.lease_owner
          FROM outbox.intents i
         WHERE i.state = 'in_flight' AND i.lease_expires_at < now()
           AND i.id <> ALL (coalesce(p_held, '{}'))
         ORDER BY i.lease_expires_at
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    )
    UPDATE outbox.intents i
       SET lease_owner = p_relay,
           lease_expires_at = now() + p_lease_ms * interval '1 millisecond',
           updated_at = now()
      FROM expired
     WHERE i.id = expired.id
    RETURNING i.id, i.key, i.target, i.attempts, i.ambiguous,
              (extract(epoch FROM i.first_attempt_at) * 1000)::bigint, expired.lease_owner, i.key_sent;
END
$$;

CREATE FUNCTION outbox.take_over_expired(p_relay text, p_limit integer, p_lease_ms integer, p_held bigint[]) RETURNS TABLE(id bigint, key text, target text, attempt integer, ambiguous boolean, first_attempt_ms bigint, previous_owner text)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RETURN QUERY
    WITH expired AS (
        SELECT i.id, i.lease_owner
          FROM outbox.intents i
         WHERE i.state = 'in_flight' AND i.lease_expires_at < now()
           AND i.id <> ALL (coalesce(p_held, '{}'))
         ORDER BY i.lease_expires_at
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    )
    UPDATE outbox.intents i
       SET lease_owner = p_relay,
           lease_expires_at = now() + p_lease_ms * interval '1 millisecond',
           updated_at = now()
      FROM expired
     WHERE i.id = expired.id
    RETURNING i.id, i.key, i.target, i.attempts, i.ambiguous,
              (extract(epoch FROM i.first_attempt_at) * 1000)::bigint, expired.lease_owner;
END
$$;

CREATE FUNCTION outbox.target_event(p_relay text, p_target text, p_event text, p_reason text, p_ms integer) RETURNS TABLE(circuit text, gate_ms bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    first_probe_ms constant integer := 1000;
BEGIN
    IF p_event = 'open' THEN
        UPDATE outbox.target_state s
           SET circuit = 'open', circuit_since = now(), circuit_reason = p_reason,
               probe_interval_ms = first_probe_ms,
               probe_at = now() + first_probe_ms * interval '1 millisecond',
               probe_owner = NULL, probe_expires_at = NULL
         WHERE s.target = p_target AND s.circuit = 'closed';
    ELSIF p_event = 'probe_failed' THEN
        UPDATE outbox.target_state s
           SET circuit = 'open', circuit_reason = p_reason,
               probe_interval_ms = least(t.circuit_probe_max_ms, greatest(first_probe_ms, s.probe_interval_ms * 2)),
               probe_at = now() + least(t.circuit_probe_max_ms, greatest(first_probe_ms, s.probe_interval_ms * 2))
                                  * interval '1 millisecond',
               probe_owner = NULL, probe_expires_at = NULL
          FROM outbox.targets t
         WHERE s.target = p_target AND t.name = s.target AND s.circuit = 'half_open'
           AND s.probe_owner = p_relay AND s.probe_at IS DISTINCT FROM 'infinity';
    ELSIF p_event = 'probe_succeeded' THEN
        UPDATE outbox.target_state s
           SET circuit = 'closed', circuit_since = now(), circuit_reason = NULL, probe_interval_ms = 0,
               probe_at = NULL, probe_owner = NULL, probe_expires_at = NULL
         WHERE s.target = p_target AND s.circuit = 'half_open' AND s.probe_owner = p_relay;
        IF FOUND THEN
            PERFORM outbox.retries_due_now(p_target);   -- 0023
        END IF;
    ELSIF p_event = 'gone' THEN
        UPDATE outbox.target_state s
           SET circuit = 'open', circuit_since = CASE WHEN s.circuit = 'closed' THEN now() ELSE s.circuit_since END,
               circuit_reason = p_reason, probe_at = 'infinity', probe_owner = NULL, probe_expires_at = NULL
         WHERE s.target = p_target;
        UPDATE outbox.targets SET enabled = false WHERE name = p_target AND enabled;
    ELSIF p_event = 'pause' THEN
        UPDATE outbox.target_state s
           SET paused_until = greatest(s.paused_until, now() + greatest(p_ms, 0) * interval '1 millisecond')
         WHERE s.target = p_target;
    ELSE
        RAISE EXCEPTION 'outbox.target_event: unknown event %', quote_literal(p_event)
            USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT s.circuit,
           CASE WHEN g IS NOT NULL AND g > now()
                THEN (extract(epoch FROM g - now()) * 1000)::bigint END
      FROM outbox.target_state s
      JOIN outbox.targets t ON t.name = s.target
     CROSS JOIN LATERAL outbox.target_gate(s, t.rate_limit_per_s) AS g
     WHERE s.target = p_target;
END
$$;

CREATE FUNCTION outbox.target_gate(s outbox.target_state, p_rate real) RETURNS timestamp with time zone
    LANGUAGE sql STABLE
    AS $$
    SELECT CASE WHEN greatest(CASE s.circuit WHEN 'open' THEN s.probe_at
                                             WHEN 'half_open' THEN s.probe_expires_at END,
                              s.paused_until,
                              CASE WHEN p_rate IS NOT NULL AND s.tokens IS NOT NULL
                                        AND s.tokens < outbox.rate_claim_at_least(p_rate)
                                   THEN s.tokens_at + (outbox.rate_claim_at_least(p_rate) - s.tokens)
                                                      / p_rate * interval '1 second' END) IS NOT NULL
                THEN least(now() + interval '1 hour',
                           greatest(CASE s.circuit WHEN 'open' THEN s.probe_at
                                                   WHEN 'half_open' THEN s.probe_expires_at END,
                                    s.paused_until,
                                    CASE WHEN p_rate IS NOT NULL AND s.tokens IS NOT NULL
                                              AND s.tokens < outbox.rate_claim_at_least(p_rate)
                                         THEN s.tokens_at + (outbox.rate_claim_at_least(p_rate) - s.tokens)
                                                            / p_rate * interval '1 second' END))
           END
$$;

-- Refuses to delete or rename a target that intents name (replaces the
-- intents.target foreign key; advisory lock per target name since migration
-- 0010).
CREATE FUNCTION outbox.targets_guard_references() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.name = OLD.name THEN
        RETURN NEW;
    END IF;
    -- Waits for the enqueues of this target that have not ended (they hold
    -- the shared form) and holds new ones off until this transaction ends.
    PERFORM pg_advisory_xact_lock(1330774017, hashtext(OLD.name));
    IF EXISTS (SELECT 1 FROM outbox.intents WHERE target = OLD.name AND state = 'pending')       -- intents_due
       OR EXISTS (SELECT 1 FROM outbox.intents WHERE target = OLD.name
                     AND state IN ('succeeded', 'failed', 'cancelled'))                         -- intents_target
       OR EXISTS (SELECT 1 FROM outbox.intents WHERE target = OLD.name AND state = 'in_flight')   -- intents_in_flight
       OR EXISTS (SELECT 1 FROM outbox.intents WHERE target = OLD.name AND state = 'unknown')     -- intents_unknown
       OR EXISTS (SELECT 1 FROM outbox.intents WHERE target = OLD.name
                     AND state = 'awaiting_approval') THEN                                       -- intents_awaiting
        RAISE EXCEPTION 'outbox.targets: target % is named by intents; disable it instead (enabled = false)',
                        quote_literal(OLD.name)
            USING ERRCODE = 'foreign_key_violation',
                  HINT = 'Intents keep the name of their target for their whole history.';
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'outbox.targets: delete or rename target % at READ COMMITTED: this % transaction cannot see intents enqueued after it began',
                        quote_literal(OLD.name), current_setting('transaction_isolation')
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
END
$$;
COMMENT ON FUNCTION outbox.targets_guard_references() IS 'Refuses to delete or rename a target that intents name (replaces the intents.target foreign key; advisory lock per target name since migration 0010).';

CREATE FUNCTION outbox.targets_state_row() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO outbox.target_state (target) VALUES (NEW.name) ON CONFLICT DO NOTHING;
    ELSE
        -- Enabled again by an admin: whatever opened the circuit (410 Gone, say) is over.
        UPDATE outbox.target_state
           SET circuit = 'closed', circuit_since = now(), circuit_reason = NULL, probe_interval_ms = 0,
               probe_at = NULL, probe_owner = NULL, probe_expires_at = NULL, paused_until = NULL
         WHERE target = NEW.name AND circuit <> 'closed';
        PERFORM outbox.retries_due_now(NEW.name);   -- 0023
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION outbox.tombstone_of(p_key text) RETURNS outbox.tombstones
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT s.* FROM outbox.tombstones s
     WHERE s.key_hash = outbox.key_hash(p_key) AND s.forget_at > now()
     ORDER BY s.pruned_at DESC LIMIT 1
$$;

CREATE FUNCTION outbox.traceparent_of(p_key text) RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT i.traceparent FROM outbox.intents i
     WHERE i.key = p_key AND outbox.caller_may_see(i.enqueued_by)   -- 0026
       AND (NOT starts_with(p_key, 'mcp:') OR outbox.operator_session())   -- 0036
$$;

CREATE FUNCTION outbox.unkeyed_attempt(p_intent bigint) RETURNS text
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT CASE WHEN bool_or(a.key_sent = false) THEN 'without' ELSE 'not recorded' END
      FROM outbox.attempts a
     WHERE a.intent_id = p_intent AND a.key_sent IS NOT TRUE
       AND a.class = 'ambiguous' AND a.request_sent IS DISTINCT FROM false
       AND NOT EXISTS (SELECT 1 FROM outbox.attempts r
                        WHERE r.intent_id = p_intent AND r.id > a.id
                          AND r.class = 'reconciled_not_executed')
    HAVING count(*) > 0
$$;

CREATE FUNCTION outbox.utc_text(p_at timestamp with time zone) RETURNS text
    LANGUAGE sql STABLE STRICT
    AS $$
    SELECT CASE WHEN isfinite(p_at) THEN to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
                ELSE 'forever' END
$$;

CREATE FUNCTION outbox.visible_status(state outbox.intent_state, ambiguous boolean) RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    AS $$
BEGIN
    RETURN CASE
        WHEN state = 'unknown' THEN 'reconciling'
        WHEN state IN ('pending', 'in_flight') AND ambiguous THEN 'reconciling'
        WHEN state = 'in_flight' THEN 'delivering'
        ELSE state::text
    END;
END
$$;

-- ====================================================================== 5. views
-- Intents awaiting approval: key, target, age, the target's rule and why it
-- holds the intent (outbox.approval_reason: never a payload value) (0023).
CREATE VIEW outbox.approvals AS
 SELECT i.key,
    i.target,
    (now() - i.created_at) AS age,
    i.created_at,
    i.run_id,
    outbox.rule_text(t.approval_rule) AS rule,
    outbox.approval_reason(i.payload, t.approval_rule) AS reason
   FROM (outbox.intents i
     LEFT JOIN outbox.targets t ON ((t.name = i.target)))
  WHERE (i.state = 'awaiting_approval'::outbox.intent_state);
COMMENT ON VIEW outbox.approvals IS 'Intents awaiting approval: key, target, age, the target''s rule and why it holds the intent (outbox.approval_reason: never a payload value) (0023).';

-- Keys that need a look: in flight past the lease, unknown (saying when it
-- needs a person), pending while the target's circuit is open or over 5
-- minutes past due, awaiting approval over 24 hours; the head of an ordering
-- group that blocks later intents ("blocks N later intents of group G"), and
-- a held intent whose turn came but was not released.
CREATE VIEW outbox.stuck AS
 SELECT i.key,
    i.target,
    i.state,
        CASE
            WHEN (g.later > 0) THEN (format('blocks %s later %s of group %s'::text, g.later,
            CASE
                WHEN (g.later = 1) THEN 'intent'::text
                ELSE 'intents'::text
            END, i.ordering_key) || COALESCE(('; '::text || s.reason), ''::text))
            ELSE s.reason
        END AS reason,
    (now() - i.created_at) AS age,
    i.attempts,
    i.last_error,
    i.updated_at
   FROM ((((( SELECT i_1.id,
            false AS head
           FROM (outbox.intents i_1
             LEFT JOIN outbox.target_state ts_1 ON (((ts_1.target = i_1.target) AND (ts_1.circuit <> 'closed'::text))))
          WHERE (((i_1.state = 'in_flight'::outbox.intent_state) AND (i_1.lease_expires_at < now())) OR (i_1.state = 'unknown'::outbox.intent_state) OR ((i_1.state = 'pending'::outbox.intent_state) AND (i_1.next_attempt_at < 'infinity'::timestamp with time zone) AND ((ts_1.target IS NOT NULL) OR (i_1.next_attempt_at < (now() - '00:05:00'::interval)))) OR ((i_1.state = 'awaiting_approval'::outbox.intent_state) AND (i_1.created_at < (now() - '24:00:00'::interval))))
        UNION ALL
         SELECT i_1.id,
            true
           FROM (( SELECT DISTINCT ON (o.ordering_key) o.id
                   FROM outbox.intents o
                  WHERE ((o.ordering_key IS NOT NULL) AND (o.state <> ALL (ARRAY['succeeded'::outbox.intent_state, 'cancelled'::outbox.intent_state])))
                  ORDER BY o.ordering_key, o.id) h
             JOIN outbox.intents i_1 ON ((i_1.id = h.id)))
          WHERE ((i_1.state = 'failed'::outbox.intent_state) OR ((i_1.state = 'awaiting_approval'::outbox.intent_state) AND (i_1.created_at >= (now() - '24:00:00'::interval))) OR ((i_1.state = 'pending'::outbox.intent_state) AND (i_1.next_attempt_at = 'infinity'::timestamp with time zone)))) c
     JOIN outbox.intents i ON ((i.id = c.id)))
     LEFT JOIN outbox.target_state ts ON (((ts.target = i.target) AND (ts.circuit <> 'closed'::text))))
     LEFT JOIN LATERAL ( SELECT count(*) AS later
           FROM outbox.intents l
          WHERE ((i.ordering_key IS NOT NULL) AND (l.ordering_key = i.ordering_key) AND (l.id > i.id) AND (l.state <> ALL (ARRAY['succeeded'::outbox.intent_state, 'cancelled'::outbox.intent_state])) AND (NOT (EXISTS ( SELECT 1
                   FROM outbox.intents p
                  WHERE ((p.ordering_key = i.ordering_key) AND (p.id < i.id) AND (p.state <> ALL (ARRAY['succeeded'::outbox.intent_state, 'cancelled'::outbox.intent_state])))))))) g ON (true))
     CROSS JOIN LATERAL ( SELECT
                CASE
                    WHEN ((i.state = 'in_flight'::outbox.intent_state) AND (i.lease_expires_at < now())) THEN 'in flight past its lease'::text
                    WHEN (i.state = 'unknown'::outbox.intent_state) THEN ('outcome unknown'::text || COALESCE((': '::text || outbox.needs_person(i.id, i.target, i.first_attempt_at)), ''::text))
                    WHEN ((i.state = 'pending'::outbox.intent_state) AND (i.next_attempt_at = 'infinity'::timestamp with time zone)) THEN (('its turn in group '::text || i.ordering_key) || ' came but it was not released: outbox.retry_now releases it'::text)
                    WHEN ((i.state = 'pending'::outbox.intent_state) AND (ts.target IS NOT NULL)) THEN ((((('target unavailable since '::text || to_char((ts.circuit_since AT TIME ZONE 'UTC'::text), 'YYYY-MM-DD HH24:MI:SS'::text)) || ' UTC (circuit '::text) || ts.circuit) || COALESCE((': '::text ||
                    CASE
                        WHEN ((i.last_error <> ''::text) AND ("right"(ts.circuit_reason, (length(i.last_error) + 8)) = ('; last: '::text || i.last_error))) THEN "left"(ts.circuit_reason, (- (length(i.last_error) + 8)))
                        ELSE ts.circuit_reason
                    END), ''::text)) || ')'::text)
                    WHEN (i.state = 'pending'::outbox.intent_state) THEN 'pending for over 5 minutes'::text
                    WHEN ((i.state = 'awaiting_approval'::outbox.intent_state) AND (i.created_at < (now() - '24:00:00'::interval))) THEN 'awaiting approval for over 24 hours'::text
                    ELSE NULL::text
                END AS reason) s)
  WHERE ((NOT c.head) OR (g.later > 0) OR (i.state = 'pending'::outbox.intent_state));
COMMENT ON VIEW outbox.stuck IS 'Keys that need a look: in flight past the lease, unknown (saying when it needs a person), pending while the target''s circuit is open or over 5 minutes past due, awaiting approval over 24 hours; the head of an ordering group that blocks later intents ("blocks N later intents of group G"), and a held intent whose turn came but was not released.';

-- Per target: live rows by state; rows settled, delivery attempts, success
-- ratio and p95 latency over the last 5 minutes; the age of the oldest due
-- pending row; the circuit breaker (closed, open, half_open) and since when,
-- a Retry-After pause, the rate limit.
CREATE VIEW outbox.target_health AS
 WITH live_rows AS (
         SELECT i.id,
            i.target,
            i.state,
            i.next_attempt_at,
            i.updated_at
           FROM outbox.intents i
          WHERE (i.state = 'pending'::outbox.intent_state)
        UNION ALL
         SELECT i.id,
            i.target,
            i.state,
            i.next_attempt_at,
            i.updated_at
           FROM outbox.intents i
          WHERE (i.state = 'in_flight'::outbox.intent_state)
        UNION ALL
         SELECT i.id,
            i.target,
            i.state,
            i.next_attempt_at,
            i.updated_at
           FROM outbox.intents i
          WHERE (i.state = 'unknown'::outbox.intent_state)
        UNION ALL
         SELECT i.id,
            i.target,
            i.state,
            i.next_attempt_at,
            i.updated_at
           FROM outbox.intents i
          WHERE (i.state = 'awaiting_approval'::outbox.intent_state)
        ), settled_rows AS (
         SELECT i.id,
            i.target,
            i.state
           FROM (outbox.targets tt
             CROSS JOIN LATERAL ( SELECT i_1.id,
                    i_1.target,
                    i_1.state
                   FROM outbox.intents i_1
                  WHERE ((i_1.target = tt.name) AND (i_1.state = ANY (ARRAY['succeeded'::outbox.intent_state, 'failed'::outbox.intent_state, 'cancelled'::outbox.intent_state])) AND (i_1.updated_at > (now() - '00:05:00'::interval)))
                 OFFSET 0) i)
        ), live AS (
         SELECT l_1.target,
            count(*) FILTER (WHERE (l_1.state = 'pending'::outbox.intent_state)) AS pending,
            count(*) FILTER (WHERE (l_1.state = 'in_flight'::outbox.intent_state)) AS in_flight,
            count(*) FILTER (WHERE (l_1.state = 'unknown'::outbox.intent_state)) AS unknown,
            count(*) FILTER (WHERE (l_1.state = 'awaiting_approval'::outbox.intent_state)) AS awaiting_approval,
            min(l_1.next_attempt_at) FILTER (WHERE ((l_1.state = 'pending'::outbox.intent_state) AND (l_1.next_attempt_at <= now()))) AS oldest_due
           FROM live_rows l_1
          GROUP BY l_1.target
        ), settled AS (
         SELECT s_1.target,
            count(*) FILTER (WHERE (s_1.state = 'succeeded'::outbox.intent_state)) AS succeeded,
            count(*) FILTER (WHERE (s_1.state = 'failed'::outbox.intent_state)) AS failed,
            count(*) FILTER (WHERE (s_1.state = 'cancelled'::outbox.intent_state)) AS cancelled
           FROM settled_rows s_1
          GROUP BY s_1.target
        ), recent_intents AS (
         SELECT s_1.id,
            s_1.target
           FROM settled_rows s_1
        UNION ALL
         SELECT l_1.id,
            l_1.target
           FROM live_rows l_1
          WHERE (l_1.updated_at > (now() - '00:05:00'::interval))
        ), deliveries AS (
         SELECT r.target,
            count(*) AS n,
            count(*) FILTER (WHERE (a.class = 'succeeded'::outbox.attempt_class)) AS succeeded,
            percentile_cont((0.95)::double precision) WITHIN GROUP (ORDER BY ((a.latency_ms)::double precision)) AS p95_ms,
            percentile_cont((0.95)::double precision) WITHIN GROUP (ORDER BY ((a.latency_ms)::double precision)) FILTER (WHERE (a.class = 'succeeded'::outbox.attempt_class)) AS p95_ok_ms
           FROM (outbox.attempts a
             JOIN recent_intents r ON ((r.id = a.intent_id)))
          WHERE ((a.at > (now() - '00:05:00'::interval)) AND (a.class = ANY (ARRAY['not_sent'::outbox.attempt_class, 'ambiguous'::outbox.attempt_class, 'succeeded'::outbox.attempt_class, 'retry_later'::outbox.attempt_class, 'key_conflict'::outbox.attempt_class, 'permanent_failure'::outbox.attempt_class])))
          GROUP BY r.target
        )
 SELECT t.name AS target,
    t.enabled,
    COALESCE(l.pending, (0)::bigint) AS pending,
    COALESCE(l.in_flight, (0)::bigint) AS in_flight,
    COALESCE(l.unknown, (0)::bigint) AS unknown,
    COALESCE(l.awaiting_approval, (0)::bigint) AS awaiting_approval,
    COALESCE(s.succeeded, (0)::bigint) AS succeeded_5m,
    COALESCE(s.failed, (0)::bigint) AS failed_5m,
    COALESCE(s.cancelled, (0)::bigint) AS cancelled_5m,
    COALESCE(d.n, (0)::bigint) AS attempts_5m,
    COALESCE(d.succeeded, (0)::bigint) AS attempts_succeeded_5m,
    round(((d.succeeded)::numeric / (NULLIF(d.n, 0))::numeric), 4) AS success_ratio_5m,
    round((d.p95_ms)::numeric, 1) AS p95_latency_ms_5m,
    round((d.p95_ok_ms)::numeric, 1) AS p95_succeeded_latency_ms_5m,
    COALESCE((now() - l.oldest_due), '00:00:00'::interval) AS oldest_pending_age,
    COALESCE(ts.circuit, 'closed'::text) AS circuit,
    ts.circuit_since,
    ts.circuit_reason,
        CASE
            WHEN ((ts.circuit = 'open'::text) AND (ts.probe_at < 'infinity'::timestamp with time zone)) THEN ts.probe_at
            ELSE NULL::timestamp with time zone
        END AS next_probe_at,
        CASE
            WHEN (ts.paused_until > now()) THEN ts.paused_until
            ELSE NULL::timestamp with time zone
        END AS paused_until,
    t.rate_limit_per_s
   FROM ((((outbox.targets t
     LEFT JOIN outbox.target_state ts ON ((ts.target = t.name)))
     LEFT JOIN live l ON ((l.target = t.name)))
     LEFT JOIN settled s ON ((s.target = t.name)))
     LEFT JOIN deliveries d ON ((d.target = t.name)));
COMMENT ON VIEW outbox.target_health IS 'Per target: live rows by state; rows settled, delivery attempts, success ratio and p95 latency over the last 5 minutes; the age of the oldest due pending row; the circuit breaker (closed, open, half_open) and since when, a Retry-After pause, the rate limit.';

COMMENT ON COLUMN outbox.target_health.success_ratio_5m IS 'Delivery attempts of class succeeded / all delivery attempts (not reconciliations or decisions), last 5 minutes; NULL without any.';

COMMENT ON COLUMN outbox.target_health.p95_latency_ms_5m IS 'p95 (percentile_cont, to 0.1 ms) of latency_ms over the delivery attempts of the last 5 minutes; NULL without any.';

COMMENT ON COLUMN outbox.target_health.oldest_pending_age IS 'How long the oldest due pending row has waited past its due time (0 when none is due): the target''s lag.';

COMMENT ON COLUMN outbox.target_health.circuit IS 'closed: delivering; open: the target failed repeatedly (or answered 410), nothing is claimed but one probe at a time; half_open: a probe is out. Shared by all relays (outbox.target_state).';

-- ====================================================================== 6. triggers
CREATE TRIGGER attempts_reference_insert AFTER INSERT ON outbox.attempts REFERENCING NEW TABLE AS new_attempts FOR EACH STATEMENT WHEN ((current_setting('outbox.in_record'::text, true) IS DISTINCT FROM 'on'::text)) EXECUTE FUNCTION outbox.attempts_check_intents();

CREATE TRIGGER attempts_reference_update AFTER UPDATE ON outbox.attempts REFERENCING NEW TABLE AS new_attempts FOR EACH STATEMENT EXECUTE FUNCTION outbox.attempts_check_intents();

CREATE TRIGGER intents_delete_history AFTER DELETE ON outbox.intents REFERENCING OLD TABLE AS old_intents FOR EACH STATEMENT EXECUTE FUNCTION outbox.intents_delete_history();

CREATE TRIGGER intents_mcp_settled AFTER UPDATE OF state ON outbox.intents FOR EACH ROW WHEN (((new.state = ANY (ARRAY['succeeded'::outbox.intent_state, 'failed'::outbox.intent_state, 'cancelled'::outbox.intent_state, 'unknown'::outbox.intent_state])) AND (new.state IS DISTINCT FROM old.state) AND starts_with(new.key, 'mcp:'::text))) EXECUTE FUNCTION outbox.mcp_notify_settled();

CREATE TRIGGER intents_notify_insert AFTER INSERT ON outbox.intents FOR EACH STATEMENT WHEN ((current_setting('outbox.in_enqueue'::text, true) IS DISTINCT FROM 'on'::text)) EXECUTE FUNCTION outbox.notify_relays();

CREATE TRIGGER intents_notify_update AFTER UPDATE ON outbox.intents FOR EACH ROW WHEN (((new.state = 'pending'::outbox.intent_state) AND (new.next_attempt_at <= now()))) EXECUTE FUNCTION outbox.notify_relays_row();

CREATE TRIGGER intents_truncate_history AFTER TRUNCATE ON outbox.intents FOR EACH STATEMENT EXECUTE FUNCTION outbox.intents_delete_history();

CREATE TRIGGER mcp_tools_check BEFORE INSERT OR UPDATE ON outbox.mcp_tools FOR EACH ROW EXECUTE FUNCTION outbox.mcp_tools_check();

CREATE CONSTRAINT TRIGGER ordering_groups_turn AFTER INSERT OR UPDATE ON outbox.ordering_groups DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION outbox.ordering_turn_at_commit();

CREATE TRIGGER target_state_circuit_events AFTER UPDATE OF circuit ON outbox.target_state FOR EACH ROW WHEN ((((old.circuit = 'closed'::text) AND (new.circuit = 'open'::text)) OR ((old.circuit <> 'closed'::text) AND (new.circuit = 'closed'::text)))) EXECUTE FUNCTION outbox.notify_circuit_change();

CREATE TRIGGER targets_guard_references BEFORE DELETE OR UPDATE OF name ON outbox.targets FOR EACH ROW EXECUTE FUNCTION outbox.targets_guard_references();

CREATE TRIGGER targets_state_enable AFTER UPDATE OF enabled ON outbox.targets FOR EACH ROW WHEN ((new.enabled AND (NOT old.enabled))) EXECUTE FUNCTION outbox.targets_state_row();

CREATE TRIGGER targets_state_insert AFTER INSERT ON outbox.targets FOR EACH ROW EXECUTE FUNCTION outbox.targets_state_row();

-- ====================================================================== 7. privileges
GRANT USAGE ON SCHEMA outbox TO outbox_app;
GRANT USAGE ON SCHEMA outbox TO outbox_relay;
GRANT USAGE ON SCHEMA outbox TO outbox_operator;
GRANT USAGE ON SCHEMA outbox TO outbox_admin;
GRANT USAGE ON SCHEMA outbox TO outbox_mcp;

REVOKE ALL ON FUNCTION outbox.approval_reason(p_payload jsonb, p_rule jsonpath) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.approval_reason(p_payload jsonb, p_rule jsonpath) TO outbox_operator;
GRANT ALL ON FUNCTION outbox.approval_reason(p_payload jsonb, p_rule jsonpath) TO outbox_admin;

REVOKE ALL ON FUNCTION outbox.approve(p_key text, p_by text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.approve(p_key text, p_by text) TO outbox_admin;

REVOKE ALL ON FUNCTION outbox.attempt_may_have_executed(p_class outbox.attempt_class, p_request_sent boolean, p_http_status integer) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.attempts_check_intents() FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.caller_may_see(p_enqueued_by text) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.cancel(p_key text, p_reason text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.cancel(p_key text, p_reason text) TO outbox_admin;

REVOKE ALL ON FUNCTION outbox.cancel_run(p_run_id text, p_reason text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.cancel_run(p_run_id text, p_reason text) TO outbox_app;
GRANT ALL ON FUNCTION outbox.cancel_run(p_run_id text, p_reason text) TO outbox_admin;

REVOKE ALL ON FUNCTION outbox.canonical(doc jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.canonical(doc jsonb) TO outbox_app;
GRANT ALL ON FUNCTION outbox.canonical(doc jsonb) TO outbox_relay;
GRANT ALL ON FUNCTION outbox.canonical(doc jsonb) TO outbox_operator;
GRANT ALL ON FUNCTION outbox.canonical(doc jsonb) TO outbox_admin;

REVOKE ALL ON FUNCTION outbox.claim(p_relay text, p_targets text[], p_rooms integer[], p_limit integer, p_lease_ms integer) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.claim(p_relay text, p_targets text[], p_rooms integer[], p_limit integer, p_lease_ms integer) TO outbox_relay;

REVOKE ALL ON FUNCTION outbox.claim_due(p_relay text, p_targets text[], p_rooms integer[], p_limit integer, p_lease_ms integer) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.claim_due(p_relay text, p_targets text[], p_rooms integer[], p_limit integer, p_lease_ms integer) TO outbox_relay;

REVOKE ALL ON FUNCTION outbox.claim_unknown(p_relay text, p_limit integer, p_lease_ms integer) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.claim_unknown(p_relay text, p_limit integer, p_lease_ms integer) TO outbox_relay;

REVOKE ALL ON FUNCTION outbox.compensate(p_original_key text, p_key text, p_target text, p_payload jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.compensate(p_original_key text, p_key text, p_target text, p_payload jsonb) TO outbox_app;
GRANT ALL ON FUNCTION outbox.compensate(p_original_key text, p_key text, p_target text, p_payload jsonb) TO outbox_admin;

REVOKE ALL ON FUNCTION outbox.compensations(p_key text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.compensations(p_key text) TO outbox_app;
GRANT ALL ON FUNCTION outbox.compensations(p_key text) TO outbox_operator;
GRANT ALL ON FUNCTION outbox.compensations(p_key text) TO outbox_admin;

REVOKE ALL ON FUNCTION outbox.delivery_summary(p_intent bigint, OUT sent integer, OUT may_have_executed integer, OUT status_url_said_no boolean, OUT story text) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.differing_fields(a jsonb, b jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.differing_fields(a jsonb, b jsonb) TO outbox_app;
GRANT ALL ON FUNCTION outbox.differing_fields(a jsonb, b jsonb) TO outbox_relay;
GRANT ALL ON FUNCTION outbox.differing_fields(a jsonb, b jsonb) TO outbox_operator;
GRANT ALL ON FUNCTION outbox.differing_fields(a jsonb, b jsonb) TO outbox_admin;

REVOKE ALL ON FUNCTION outbox.enqueue(p_key text, p_target text, p_payload jsonb, p_run_id text, p_not_before timestamp with time zone, p_ordering_key text, p_traceparent text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.enqueue(p_key text, p_target text, p_payload jsonb, p_run_id text, p_not_before timestamp with time zone, p_ordering_key text, p_traceparent text) TO outbox_app;
GRANT ALL ON FUNCTION outbox.enqueue(p_key text, p_target text, p_payload jsonb, p_run_id text, p_not_before timestamp with time zone, p_ordering_key text, p_traceparent text) TO outbox_admin;

REVOKE ALL ON FUNCTION outbox.enqueue_any(p_key text, p_target text, p_payload jsonb, p_run_id text, p_not_before timestamp with time zone, p_ordering_key text, p_traceparent text) FROM PUBLIC;

GRANT SELECT ON TABLE outbox.tombstones TO outbox_operator;

REVOKE ALL ON FUNCTION outbox.enqueue_remembered(p_key text, p_target text, p_fingerprint bytea, s outbox.tombstones) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.fingerprint(payload jsonb, volatile_paths text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.fingerprint(payload jsonb, volatile_paths text[]) TO outbox_app;
GRANT ALL ON FUNCTION outbox.fingerprint(payload jsonb, volatile_paths text[]) TO outbox_relay;
GRANT ALL ON FUNCTION outbox.fingerprint(payload jsonb, volatile_paths text[]) TO outbox_operator;
GRANT ALL ON FUNCTION outbox.fingerprint(payload jsonb, volatile_paths text[]) TO outbox_admin;

REVOKE ALL ON FUNCTION outbox.fingerprint_doc(payload jsonb, volatile_paths text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.fingerprint_doc(payload jsonb, volatile_paths text[]) TO outbox_app;
GRANT ALL ON FUNCTION outbox.fingerprint_doc(payload jsonb, volatile_paths text[]) TO outbox_relay;
GRANT ALL ON FUNCTION outbox.fingerprint_doc(payload jsonb, volatile_paths text[]) TO outbox_operator;
GRANT ALL ON FUNCTION outbox.fingerprint_doc(payload jsonb, volatile_paths text[]) TO outbox_admin;

GRANT SELECT ON TABLE outbox.intents TO outbox_operator;

REVOKE ALL ON FUNCTION outbox.intent_event(i outbox.intents, p_class outbox.attempt_class, p_http integer, p_error text) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.intents_delete_history() FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.isolated() FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.key_hash(p_key text) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.links(p_key text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.links(p_key text) TO outbox_app;
GRANT ALL ON FUNCTION outbox.links(p_key text) TO outbox_operator;
GRANT ALL ON FUNCTION outbox.links(p_key text) TO outbox_admin;

REVOKE ALL ON FUNCTION outbox.live_counts() FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.live_counts() TO outbox_relay;
GRANT ALL ON FUNCTION outbox.live_counts() TO outbox_operator;

REVOKE ALL ON FUNCTION outbox.locked_intent(p_key text, p_operation text) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.mcp_answer_of(p_client text, p_key text, p_tool text, p_inserted boolean, p_task boolean) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.mcp_call(p_token_hash bytea, p_tool text, p_key text, p_arguments jsonb, p_run_id text, p_ordering_key text, p_traceparent text, p_task boolean, p_task_ttl_ms bigint) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_call(p_token_hash bytea, p_tool text, p_key text, p_arguments jsonb, p_run_id text, p_ordering_key text, p_traceparent text, p_task boolean, p_task_ttl_ms bigint) TO outbox_mcp;

REVOKE ALL ON FUNCTION outbox.mcp_client(p_name text, p_token text, p_tools text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_client(p_name text, p_token text, p_tools text[]) TO outbox_admin;

REVOKE ALL ON FUNCTION outbox.mcp_held_by(p_target text, p_payload jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.mcp_list_tools(p_token_hash bytea) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_list_tools(p_token_hash bytea) TO outbox_mcp;

REVOKE ALL ON FUNCTION outbox.mcp_message(p_status text, p_outcome_message text, p_person_reason text) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.mcp_notify_settled() FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.mcp_outcome(p_token_hash bytea, p_key text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_outcome(p_token_hash bytea, p_key text) TO outbox_mcp;

REVOKE ALL ON FUNCTION outbox.mcp_outcomes(p_intent_keys text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_outcomes(p_intent_keys text[]) TO outbox_mcp;

REVOKE ALL ON FUNCTION outbox.mcp_outcomes(p_token_hashes bytea[], p_intent_keys text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_outcomes(p_token_hashes bytea[], p_intent_keys text[]) TO outbox_mcp;

REVOKE ALL ON FUNCTION outbox.mcp_payload_ok(p_payload jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.mcp_schema_pattern_problem(p text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_schema_pattern_problem(p text) TO outbox_admin;

REVOKE ALL ON FUNCTION outbox.mcp_schema_problem(p_schema jsonb, p_path text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_schema_problem(p_schema jsonb, p_path text) TO outbox_admin;

REVOKE ALL ON FUNCTION outbox.mcp_schema_problem_at(p_root jsonb, p_schema jsonb, p_path text, p_keys text[], p_dialect text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_schema_problem_at(p_root jsonb, p_schema jsonb, p_path text, p_keys text[], p_dialect text) TO outbox_admin;

REVOKE ALL ON FUNCTION outbox.mcp_schema_re_char(p text, p_i integer, OUT cp integer, OUT next integer, OUT why text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_schema_re_char(p text, p_i integer, OUT cp integer, OUT next integer, OUT why text) TO outbox_admin;

REVOKE ALL ON FUNCTION outbox.mcp_schema_re_class(e text, OUT bits bit, OUT mb integer) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_schema_re_class(e text, OUT bits bit, OUT mb integer) TO outbox_admin;

REVOKE ALL ON FUNCTION outbox.mcp_schema_ref(p_root jsonb, p_ref text, OUT keys text[], OUT why text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_schema_ref(p_root jsonb, p_ref text, OUT keys text[], OUT why text) TO outbox_admin;

REVOKE ALL ON FUNCTION outbox.mcp_schema_ref_loops(p_root jsonb, p_from text[], p_target text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_schema_ref_loops(p_root jsonb, p_from text[], p_target text[]) TO outbox_admin;

REVOKE ALL ON FUNCTION outbox.mcp_schema_too_deep(p_schema jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_schema_too_deep(p_schema jsonb) TO outbox_admin;

REVOKE ALL ON FUNCTION outbox.mcp_task(p_token_hash bytea, p_task_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_task(p_token_hash bytea, p_task_id text) TO outbox_mcp;

REVOKE ALL ON FUNCTION outbox.mcp_task_cancel(p_token_hash bytea, p_task_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_task_cancel(p_token_hash bytea, p_task_id text) TO outbox_mcp;

REVOKE ALL ON FUNCTION outbox.mcp_tasks_list(p_token_hash bytea, p_after_created timestamp with time zone, p_after_id text, p_limit integer) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_tasks_list(p_token_hash bytea, p_after_created timestamp with time zone, p_after_id text, p_limit integer) TO outbox_mcp;

REVOKE ALL ON FUNCTION outbox.mcp_tool(p_token_hash bytea, p_tool text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_tool(p_token_hash bytea, p_tool text) TO outbox_mcp;

REVOKE ALL ON FUNCTION outbox.mcp_tools_check() FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.needs_approval(payload jsonb, rule jsonpath) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.needs_approval(payload jsonb, rule jsonpath) TO outbox_app;
GRANT ALL ON FUNCTION outbox.needs_approval(payload jsonb, rule jsonpath) TO outbox_relay;
GRANT ALL ON FUNCTION outbox.needs_approval(payload jsonb, rule jsonpath) TO outbox_operator;
GRANT ALL ON FUNCTION outbox.needs_approval(payload jsonb, rule jsonpath) TO outbox_admin;

REVOKE ALL ON FUNCTION outbox.needs_person(p_intent bigint, p_target text, p_first_attempt_at timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.needs_person(p_intent bigint, p_target text, p_first_attempt_at timestamp with time zone) TO outbox_operator;
GRANT ALL ON FUNCTION outbox.needs_person(p_intent bigint, p_target text, p_first_attempt_at timestamp with time zone) TO outbox_admin;

REVOKE ALL ON FUNCTION outbox.next_due_ms(p_targets text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.next_due_ms(p_targets text[]) TO outbox_relay;

REVOKE ALL ON FUNCTION outbox.note_decision(p_intent bigint, p_attempt integer, p_who text, p_note text) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.notify_circuit_change() FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.notify_relays() FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.notify_relays_row() FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.operator_session() FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.ordering_head_before(p_group text, p_id bigint) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.ordering_lock_groups(p_groups text[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.ordering_locked_intent(p_key text, p_operation text) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.ordering_place(p_key text, p_group text) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.ordering_release(p_groups text[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.ordering_turn_at_commit() FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.ordering_waits_for(p_group text, p_id bigint) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.outcome(p_key text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.outcome(p_key text) TO outbox_app;
GRANT ALL ON FUNCTION outbox.outcome(p_key text) TO outbox_admin;
GRANT ALL ON FUNCTION outbox.outcome(p_key text) TO outbox_relay;
GRANT ALL ON FUNCTION outbox.outcome(p_key text) TO outbox_operator;

REVOKE ALL ON FUNCTION outbox.outcome_any(p_key text) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.prunable() FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.prunable() TO outbox_operator;

REVOKE ALL ON FUNCTION outbox.prune(p_limit integer) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.prune(p_limit integer) TO outbox_relay;
GRANT ALL ON FUNCTION outbox.prune(p_limit integer) TO outbox_admin;

REVOKE ALL ON FUNCTION outbox.prune_ids(p_ids bigint[], p_dedupe_window interval) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.prune_linked(p_limit integer) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.prune_step(p_limit integer) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.prune_step(p_limit integer) TO outbox_relay;
GRANT ALL ON FUNCTION outbox.prune_step(p_limit integer) TO outbox_admin;

REVOKE ALL ON FUNCTION outbox.prune_target(p_target text, p_retain_for interval, p_dedupe_window interval, p_limit integer) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.quote_key(p_key text) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.rate_burst(p_rate real) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.rate_claim_at_least(p_rate real) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.record(p_relay text, p_ids bigint[], p_attempts integer[], p_states outbox.intent_state[], p_delay_ms integer[], p_ambiguous boolean[], p_classes outbox.attempt_class[], p_sent boolean[], p_http integer[], p_errors text[], p_latency_ms integer[], p_bodies text[], p_key_sent boolean[]) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.record(p_relay text, p_ids bigint[], p_attempts integer[], p_states outbox.intent_state[], p_delay_ms integer[], p_ambiguous boolean[], p_classes outbox.attempt_class[], p_sent boolean[], p_http integer[], p_errors text[], p_latency_ms integer[], p_bodies text[], p_key_sent boolean[]) TO outbox_relay;

REVOKE ALL ON FUNCTION outbox.redrive(p_target text, p_since timestamp with time zone, p_until timestamp with time zone, p_dry_run boolean, p_limit integer, p_by text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.redrive(p_target text, p_since timestamp with time zone, p_until timestamp with time zone, p_dry_run boolean, p_limit integer, p_by text) TO outbox_admin;

REVOKE ALL ON FUNCTION outbox.refresh_statistics() FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.refuse_front_door(p_function text, p_what text, p_value text) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.refuse_key(p_function text, p_key text) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.refuse_others_key(p_function text, p_key text) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.refuse_traceparent(p_value text, p_from_setting boolean) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.reject(p_key text, p_by text, p_reason text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.reject(p_key text, p_by text, p_reason text) TO outbox_admin;

REVOKE ALL ON FUNCTION outbox.relay_alive() FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.relay_gone(p_relay text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.relay_gone(p_relay text) TO outbox_relay;

REVOKE ALL ON FUNCTION outbox.relay_heartbeat(p_relay text, p_idle boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.relay_heartbeat(p_relay text, p_idle boolean) TO outbox_relay;

REVOKE ALL ON FUNCTION outbox.release(p_relay text, p_ids bigint[], p_attempts integer[]) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.release(p_relay text, p_ids bigint[], p_attempts integer[]) TO outbox_relay;

REVOKE ALL ON FUNCTION outbox.renew_leases(p_relay text, p_ids bigint[], p_lease_ms integer) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.renew_leases(p_relay text, p_ids bigint[], p_lease_ms integer) TO outbox_relay;

REVOKE ALL ON FUNCTION outbox.resolve(p_key text, p_outcome text, p_note text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.resolve(p_key text, p_outcome text, p_note text) TO outbox_admin;

REVOKE ALL ON FUNCTION outbox.retries_due_now(p_target text) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.retry_now(p_key text, p_by text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.retry_now(p_key text, p_by text) TO outbox_admin;

REVOKE ALL ON FUNCTION outbox.rule_text(p_rule jsonpath) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.rule_text(p_rule jsonpath) TO outbox_operator;
GRANT ALL ON FUNCTION outbox.rule_text(p_rule jsonpath) TO outbox_admin;

REVOKE ALL ON FUNCTION outbox.settle(p_ids bigint[], p_states outbox.intent_state[], p_groups text[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.take_over(p_relay text, p_limit integer, p_lease_ms integer, p_held bigint[]) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.take_over(p_relay text, p_limit integer, p_lease_ms integer, p_held bigint[]) TO outbox_relay;

REVOKE ALL ON FUNCTION outbox.take_over_expired(p_relay text, p_limit integer, p_lease_ms integer, p_held bigint[]) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.take_over_expired(p_relay text, p_limit integer, p_lease_ms integer, p_held bigint[]) TO outbox_relay;

REVOKE ALL ON FUNCTION outbox.target_event(p_relay text, p_target text, p_event text, p_reason text, p_ms integer) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.target_event(p_relay text, p_target text, p_event text, p_reason text, p_ms integer) TO outbox_relay;

GRANT SELECT ON TABLE outbox.target_state TO outbox_relay;
GRANT SELECT ON TABLE outbox.target_state TO outbox_operator;

REVOKE ALL ON FUNCTION outbox.target_gate(s outbox.target_state, p_rate real) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.targets_guard_references() FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.targets_state_row() FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.tombstone_of(p_key text) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.traceparent_of(p_key text) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.traceparent_of(p_key text) TO outbox_app;
GRANT ALL ON FUNCTION outbox.traceparent_of(p_key text) TO outbox_operator;

REVOKE ALL ON FUNCTION outbox.unkeyed_attempt(p_intent bigint) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.unkeyed_attempt(p_intent bigint) TO outbox_operator;
GRANT ALL ON FUNCTION outbox.unkeyed_attempt(p_intent bigint) TO outbox_admin;

REVOKE ALL ON FUNCTION outbox.utc_text(p_at timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox.visible_status(state outbox.intent_state, ambiguous boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.visible_status(state outbox.intent_state, ambiguous boolean) TO outbox_app;
GRANT ALL ON FUNCTION outbox.visible_status(state outbox.intent_state, ambiguous boolean) TO outbox_relay;
GRANT ALL ON FUNCTION outbox.visible_status(state outbox.intent_state, ambiguous boolean) TO outbox_operator;
GRANT ALL ON FUNCTION outbox.visible_status(state outbox.intent_state, ambiguous boolean) TO outbox_admin;

GRANT SELECT ON TABLE outbox.targets TO outbox_relay;
GRANT SELECT ON TABLE outbox.targets TO outbox_operator;
GRANT INSERT,DELETE,UPDATE ON TABLE outbox.targets TO outbox_admin;

GRANT SELECT ON TABLE outbox.approvals TO outbox_operator;
GRANT SELECT ON TABLE outbox.approvals TO outbox_admin;

GRANT SELECT ON TABLE outbox.attempts TO outbox_operator;

GRANT SELECT ON TABLE outbox.isolated_logins TO outbox_operator;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE outbox.isolated_logins TO outbox_admin;

GRANT DELETE ON TABLE outbox.mcp_clients TO outbox_admin;

GRANT SELECT(name) ON TABLE outbox.mcp_clients TO outbox_operator;

GRANT SELECT(tools) ON TABLE outbox.mcp_clients TO outbox_operator;

GRANT SELECT(created_at) ON TABLE outbox.mcp_clients TO outbox_operator;

GRANT SELECT(rotated_at) ON TABLE outbox.mcp_clients TO outbox_operator;

GRANT SELECT ON TABLE outbox.mcp_tasks TO outbox_operator;

GRANT SELECT ON TABLE outbox.mcp_tools TO outbox_operator;
GRANT INSERT,DELETE,UPDATE ON TABLE outbox.mcp_tools TO outbox_admin;

GRANT SELECT ON TABLE outbox.mismatches TO outbox_operator;

GRANT SELECT ON TABLE outbox.relays TO outbox_operator;

GRANT SELECT ON TABLE outbox.stuck TO outbox_operator;

GRANT SELECT ON TABLE outbox.target_health TO outbox_operator;


--

COMMENT ON FUNCTION outbox.approval_reason(p_payload jsonb, p_rule jsonpath) IS 'Why an approval rule holds a payload (true, a missing, null or mistyped field, a lax step, an error): paths and types only, never a value (0023).';

COMMENT ON FUNCTION outbox.attempt_may_have_executed(p_class outbox.attempt_class, p_request_sent boolean, p_http_status integer) IS 'Whether an attempts row leaves open that the target acted: true unless it is not_sent with nothing sent, a 4xx answer (retry_later, key_conflict, permanent_failure) or a decision that sent nothing.';

COMMENT ON FUNCTION outbox.caller_may_see(p_enqueued_by text) IS 'true for an intent the caller''s login enqueued, or for any when the login is not isolated (0026).';

COMMENT ON FUNCTION outbox.cancel(p_key text, p_reason text) IS 'Cancel an intent the target never acted on (pending or awaiting approval, not ambiguous, no attempt that may have executed: never sent, or refused with a 4xx), or a failed intent of an ordering group (the group moves on). OR007 otherwise, saying why.';

COMMENT ON FUNCTION outbox.cancel_run(p_run_id text, p_reason text) IS 'Cancel the intents of a run that the target never acted on (pending or awaiting approval, not ambiguous, no attempt that may have executed: never sent, or refused with a 4xx); compensations are kept; an isolated login cancels only its own. Returns how many.';

COMMENT ON FUNCTION outbox.canonical(doc jsonb) IS 'Canonical form of a JSON document: numbers at their shortest scale (jsonb orders keys and drops whitespace). Linear in the text; any depth.';

COMMENT ON FUNCTION outbox.claim(p_relay text, p_targets text[], p_rooms integer[], p_limit integer, p_lease_ms integer) IS 'The claim of relays before 0025 (kept for a rolling upgrade or a rollback): as outbox.claim_due, without the key stamp (it clears intents.key_sent).';

COMMENT ON FUNCTION outbox.claim_due(p_relay text, p_targets text[], p_rooms integer[], p_limit integer, p_lease_ms integer) IS 'Claim due rows of the given targets within their rooms and gates (circuit, pause, rate), with leases; stamps and returns whether each request carries the key (key_sent).';

COMMENT ON FUNCTION outbox.compensate(p_original_key text, p_key text, p_target text, p_payload jsonb) IS 'Enqueue a compensating intent for a succeeded or unknown one (intents.compensates = original key), by the rules of outbox.enqueue.';

COMMENT ON FUNCTION outbox.compensations(p_key text) IS 'The compensating intents of a key, oldest first, with their agent-visible status. No row: none (or no such key).';

COMMENT ON FUNCTION outbox.delivery_summary(p_intent bigint, OUT sent integer, OUT may_have_executed integer, OUT status_url_said_no boolean, OUT story text) IS 'What the attempts of an intent amount to: requests that reached (or may have reached) the target, attempts that may have executed, a status URL''s "not executed", and the story in words (NULL: nothing reached the target) (0026).';

COMMENT ON FUNCTION outbox.enqueue(p_key text, p_target text, p_payload jsonb, p_run_id text, p_not_before timestamp with time zone, p_ordering_key text, p_traceparent text) IS 'Enqueue an intent in the caller''s transaction (idempotent by key); p_ordering_key: ordered delivery; p_traceparent (or the setting outbox.traceparent): W3C trace context.';

COMMENT ON FUNCTION outbox.enqueue_any(p_key text, p_target text, p_payload jsonb, p_run_id text, p_not_before timestamp with time zone, p_ordering_key text, p_traceparent text) IS 'outbox.enqueue without the reservation of mcp: keys, for the front door''s functions only (0036); executable by no role.';


SET default_tablespace = '';

SET default_table_access_method = heap;

COMMENT ON FUNCTION outbox.fingerprint(payload jsonb, volatile_paths text[]) IS 'SHA-256 of the canonical payload without the target''s volatile paths.';

COMMENT ON FUNCTION outbox.links(p_key text) IS 'Compensation links of a key, both ways: (key, ''compensates'', original, its status) and (key, ''compensated_by'', compensation, its status).';

COMMENT ON FUNCTION outbox.mcp_client(p_name text, p_token text, p_tools text[]) IS 'Create an MCP client or rotate its token (only its SHA-256 is stored); p_tools: the tools it may use (NULL = all).';

COMMENT ON FUNCTION outbox.mcp_outcomes(p_intent_keys text[]) IS 'Retired in 0036 (it read any client''s outcome without a token): answers no row; kept for the 0.1.0 front door, dropped in the next release.';

COMMENT ON FUNCTION outbox.mcp_outcomes(p_token_hashes bytea[], p_intent_keys text[]) IS 'The MCP front door''s batched look-up: the answer for each (token hash, intent key) whose key is that client''s (0036).';

COMMENT ON FUNCTION outbox.mcp_payload_ok(p_payload jsonb) IS 'Whether a payload is {"tool": NAME, "arguments": {...}} and nothing else: what an mcp target takes (0037).';

COMMENT ON FUNCTION outbox.mcp_schema_pattern_problem(p text) IS 'NULL when a "pattern" (or a key of "patternProperties") is one the front door translates to POSIX ERE, else why not, as relay/mcp/json_schema_regex.c words it.';

COMMENT ON FUNCTION outbox.mcp_schema_problem(p_schema jsonb, p_path text) IS 'NULL when the JSON Schema uses only the supported subset, else what is wrong and where.';

COMMENT ON FUNCTION outbox.mcp_schema_problem_at(p_root jsonb, p_schema jsonb, p_path text, p_keys text[], p_dialect text) IS 'The walk of outbox.mcp_schema_problem: p_schema at p_path (p_keys from p_root), in the dialect of the root''s $schema.';

COMMENT ON FUNCTION outbox.mcp_schema_ref(p_root jsonb, p_ref text, OUT keys text[], OUT why text) IS 'The keys from the root of the schema a local $ref names (NULL and why when it names none), as relay/mcp/json_schema.c resolves it.';

COMMENT ON FUNCTION outbox.mcp_schema_ref_loops(p_root jsonb, p_from text[], p_target text[]) IS 'Whether a $ref goes round to its own schema without descending into the value (relay/mcp/json_schema.c refuses the same).';

COMMENT ON FUNCTION outbox.mcp_schema_too_deep(p_schema jsonb) IS 'Whether a schema nests deeper than the 64 levels relay/mcp/json_schema.c accepts.';

COMMENT ON FUNCTION outbox.needs_approval(payload jsonb, rule jsonpath) IS 'Whether a payload is held for approval: unless the rule is definitely false (as written, and in strict mode with null members as missing; filters widened to let unknown through), it holds.';

COMMENT ON FUNCTION outbox.needs_person(p_intent bigint, p_target text, p_first_attempt_at timestamp with time zone) IS 'Why only a person can settle an unknown intent ("needs a person — no status URL, no key", …), or NULL when the relay asks the target''s status URL (0023).';

COMMENT ON FUNCTION outbox.outcome(p_key text) IS 'The agent-visible outcome of a key, also of a pruned one while its tombstone lasts: no row for an unknown (or forgotten) key, or, for an isolated login, another login''s.';

COMMENT ON FUNCTION outbox.outcome_any(p_key text) IS 'outbox.outcome without the reservation of mcp: keys, for the front door''s functions only (0036); executable by no role.';

COMMENT ON FUNCTION outbox.prune(p_limit integer) IS 'Prunes at most p_limit final intents past their target''s retain_for (tombstones keep their keys); returns how many. One short transaction: call again while it returns p_limit.';

COMMENT ON FUNCTION outbox.prune_step(p_limit integer) IS 'One bounded step of retention (pruned intents, forgotten tombstones); call again while pruned = the limit.';

COMMENT ON FUNCTION outbox.quote_key(p_key text) IS 'A key quoted for a message; with a control character, as an escape string (E''a\nb''), never raw (0023).';

COMMENT ON FUNCTION outbox.record(p_relay text, p_ids bigint[], p_attempts integer[], p_states outbox.intent_state[], p_delay_ms integer[], p_ambiguous boolean[], p_classes outbox.attempt_class[], p_sent boolean[], p_http integer[], p_errors text[], p_latency_ms integer[], p_bodies text[], p_key_sent boolean[]) IS 'Apply a batch of attempt outcomes, fenced by (lease owner, attempt); at most one per row; every attempt in the history. Returns rows updated.';

COMMENT ON FUNCTION outbox.redrive(p_target text, p_since timestamp with time zone, p_until timestamp with time zone, p_dry_run boolean, p_limit integer, p_by text) IS 'Puts back to pending (a fresh delivery) the failed intents of a target settled in [since, until) with no attempt that may have executed; at most p_limit, oldest first; one history row each. The dry run lists them and changes nothing.';

COMMENT ON FUNCTION outbox.refuse_front_door(p_function text, p_what text, p_value text) IS 'Raises OR026 for a key, run id or ordering key of the MCP front door (mcp:…) given to a function an application calls (0036).';

COMMENT ON FUNCTION outbox.refuse_key(p_function text, p_key text) IS 'Raises OR004 or OR009 with the reason when a key is outside the key alphabet (see migration 0010); returns otherwise.';

COMMENT ON FUNCTION outbox.refuse_others_key(p_function text, p_key text) IS 'Raises OR001 for a key another login enqueued, called by an isolated login that needs the key free (0026).';

COMMENT ON FUNCTION outbox.retries_due_now(p_target text) IS 'After a target''s circuit closed or it was enabled again: its pending retries waiting on their back-off are due now (0023).';

COMMENT ON FUNCTION outbox.retry_now(p_key text, p_by text) IS 'Send an intent now where that is safe: pending (due now), unknown on a key-honouring target within key_ttl, failed with no ambiguous attempt. Otherwise OR007.';

COMMENT ON FUNCTION outbox.settle(p_ids bigint[], p_states outbox.intent_state[], p_groups text[]) IS 'What follows an intent becoming final (succeeded, failed, cancelled), called once by each path that makes intents final, with their ids, new states and ordering groups: the events for people (intent_failed, group_blocked) and the release of the groups that may move on.';

COMMENT ON FUNCTION outbox.take_over(p_relay text, p_limit integer, p_lease_ms integer, p_held bigint[]) IS 'Take over in-flight rows whose lease expired (never the caller''s own, p_held), with the key stamp of the request that may have executed.';

COMMENT ON FUNCTION outbox.unkeyed_attempt(p_intent bigint) IS 'Whether an attempt of the intent that may have executed went without the key (''without'') or without a record of it (''not recorded''); NULL: neither.';

COMMENT ON INDEX outbox.attempts_pkey IS 'A key''s life in order (intent_id, id): the only B-tree every attempt enters (0020).';

