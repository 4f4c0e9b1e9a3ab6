-- 0001: the outbox data model (DESIGN.md, "Data model").
--
-- targets   where intents go; registered by admins, never by an intent
-- intents   one row per logical action, keyed by the caller's idempotency key
-- attempts  one row per delivery, take-over or reconciliation attempt
-- relays    presence of running relays (the idle flag that gates NOTIFY)
-- mismatches  audit of same-key/different-payload enqueues kept under keep_original

CREATE SCHEMA outbox;
COMMENT ON SCHEMA outbox IS 'Transactional outbox: intents enqueued in business transactions, delivered by outbox-relay.';

-- The life of an intent. See DESIGN.md "States".
CREATE TYPE outbox.intent_state AS ENUM (
    'awaiting_approval', -- matched the target's approval_rule; waits for approve/reject
    'pending',           -- due for delivery at next_attempt_at
    'in_flight',         -- claimed by lease_owner until lease_expires_at
    'succeeded',         -- terminal: the target acted (2xx, reconciliation or operator)
    'failed',            -- terminal: the target did not act and will not (every attempt known unsent, or permanent 4xx)
    'unknown',           -- outcome unknown: waits for reconciliation or a person; never re-sent blindly
    'cancelled'          -- terminal: rejected or cancelled before it was sent
);

-- What one attempt amounted to. See DESIGN.md "Classifying one attempt".
CREATE TYPE outbox.attempt_class AS ENUM (
    'not_sent',          -- nothing reached the target (connect refused, DNS, TLS): safe to retry
    'ambiguous',         -- the target may have acted (timeout or error after sending, reset, empty reply, 5xx, lease expired)
    'succeeded',         -- 2xx
    'retry_later',       -- 408, 425, 429, 409 from a key-honouring target: not acted yet
    'key_conflict',      -- 422: the target rejected the key/payload pairing
    'permanent_failure', -- other 4xx: not acted, will not act
    'reconciled_executed',     -- status URL said the key was executed
    'reconciled_not_executed', -- status URL said the key was not executed
    'reconcile_inconclusive',  -- status URL gave no usable answer
    'resolved',          -- an operator set the outcome
    'released'           -- claimed but never sent (relay shut down); not an attempt on the target
);

CREATE TABLE outbox.targets (
    name               text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$'),
    url                text NOT NULL CHECK (url ~ '^https?://[^[:space:]]+$'),
    method             text NOT NULL DEFAULT 'POST' CHECK (method IN ('POST', 'PUT', 'PATCH', 'DELETE')),
    key_header         text DEFAULT 'Idempotency-Key' CHECK (key_header ~ '^[A-Za-z0-9-]{1,64}$'),
    key_ttl            interval NOT NULL DEFAULT '24 hours' CHECK (key_ttl > '0'),
    status_url         text CHECK (status_url ~ '^https?://[^[:space:]]*\{key\}[^[:space:]]*$'),
    timeout_ms         integer NOT NULL DEFAULT 10000 CHECK (timeout_ms BETWEEN 1 AND 600000),
    max_attempts       integer NOT NULL DEFAULT 8 CHECK (max_attempts BETWEEN 1 AND 1000),
    backoff_base_ms    integer NOT NULL DEFAULT 500 CHECK (backoff_base_ms BETWEEN 1 AND 3600000),
    backoff_cap_ms     integer NOT NULL DEFAULT 300000 CHECK (backoff_cap_ms BETWEEN 1 AND 86400000),
    retry_budget_ratio real NOT NULL DEFAULT 0.2 CHECK (retry_budget_ratio BETWEEN 0 AND 10),
    retry_budget_floor integer NOT NULL DEFAULT 10 CHECK (retry_budget_floor >= 0),
    reconcile_delay_ms integer CHECK (reconcile_delay_ms >= 0), -- NULL: 3 x timeout_ms
    max_in_flight      integer NOT NULL DEFAULT 256 CHECK (max_in_flight BETWEEN 1 AND 100000),
    max_payload_bytes  integer NOT NULL DEFAULT 1048576 CHECK (max_payload_bytes BETWEEN 2 AND 67108864),
    approval_rule      jsonpath,
    volatile_paths     text[] NOT NULL DEFAULT '{}',
    on_mismatch        text NOT NULL DEFAULT 'reject' CHECK (on_mismatch IN ('reject', 'keep_original')),
    headers            jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(headers) = 'object'),
    secret_env         text CHECK (secret_env ~ '^[A-Za-z_][A-Za-z0-9_]{0,127}$'),
    enabled            boolean NOT NULL DEFAULT true,
    created_at         timestamptz NOT NULL DEFAULT now(),
    CHECK (backoff_cap_ms >= backoff_base_ms)
);
COMMENT ON TABLE outbox.targets IS 'Delivery targets, registered by admins. Intents name a target, never a URL.';
COMMENT ON COLUMN outbox.targets.key_header IS 'Header carrying the idempotency key; NULL = the target cannot deduplicate.';
COMMENT ON COLUMN outbox.targets.status_url IS 'Reconciliation URL template; {key} is replaced by the percent-encoded key. NULL = none.';
COMMENT ON COLUMN outbox.targets.volatile_paths IS 'Paths (#- syntax, e.g. {meta,ts}) left out of the payload fingerprint.';
COMMENT ON COLUMN outbox.targets.secret_env IS 'Name of the relay environment variable holding the signing secret (never the secret itself).';

CREATE TABLE outbox.intents (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key               text NOT NULL UNIQUE,
    target            text NOT NULL REFERENCES outbox.targets (name),
    payload           jsonb NOT NULL,
    fingerprint       bytea NOT NULL,
    state             outbox.intent_state NOT NULL DEFAULT 'pending',
    attempts          integer NOT NULL DEFAULT 0,
    next_attempt_at   timestamptz NOT NULL DEFAULT now(),
    lease_owner       text,
    lease_expires_at  timestamptz,
    ambiguous         boolean NOT NULL DEFAULT false,
    first_attempt_at  timestamptz,
    response_status   integer,
    response_body     text,
    last_error        text,
    run_id            text,
    compensates       text REFERENCES outbox.intents (key),
    mismatches        integer NOT NULL DEFAULT 0,
    decided_by        text,
    decision_note     text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CHECK (state <> 'in_flight' OR (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL))
);
COMMENT ON TABLE outbox.intents IS 'One row per logical action. Written by outbox.enqueue inside the caller''s transaction.';
COMMENT ON COLUMN outbox.intents.ambiguous IS 'Some attempt may have executed: never reported failed, never re-sent blindly.';

-- Claim path: due pending rows per target, oldest first. Partial, so history does not grow it.
CREATE INDEX intents_due ON outbox.intents (target, next_attempt_at) WHERE state = 'pending';
-- Lease take-over and the stuck view.
CREATE INDEX intents_in_flight ON outbox.intents (lease_expires_at) WHERE state = 'in_flight';
-- Reconciliation and the stuck view.
CREATE INDEX intents_unknown ON outbox.intents (next_attempt_at) WHERE state = 'unknown';
CREATE INDEX intents_awaiting ON outbox.intents (created_at) WHERE state = 'awaiting_approval';
CREATE INDEX intents_run ON outbox.intents (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX intents_compensates ON outbox.intents (compensates) WHERE compensates IS NOT NULL;

CREATE TABLE outbox.attempts (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    intent_id     bigint NOT NULL REFERENCES outbox.intents (id) ON DELETE CASCADE,
    attempt       integer NOT NULL,
    relay         text NOT NULL,
    class         outbox.attempt_class NOT NULL,
    request_sent  boolean,          -- NULL: not known (lease take-over)
    http_status   integer,
    error         text,
    latency_ms    integer,
    response_body text,
    recorded      boolean NOT NULL DEFAULT true, -- false: a late writer fenced out by a newer state
    at            timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE outbox.attempts IS 'One row per delivery, lease take-over, reconciliation or resolution: the traceable life of a key.';
CREATE INDEX attempts_intent ON outbox.attempts (intent_id, id);
CREATE INDEX attempts_at ON outbox.attempts (at);

CREATE TABLE outbox.relays (
    relay_id     text PRIMARY KEY,
    idle         boolean NOT NULL DEFAULT false,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE outbox.relays IS 'Running relays. The enqueue trigger notifies only while some live relay says it is idle.';

CREATE TABLE outbox.mismatches (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key         text NOT NULL REFERENCES outbox.intents (key) ON DELETE CASCADE,
    payload     jsonb NOT NULL,
    fingerprint bytea NOT NULL,
    fields      text[] NOT NULL,
    at          timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE outbox.mismatches IS 'Enqueues that reused a key with another payload under on_mismatch = keep_original.';
