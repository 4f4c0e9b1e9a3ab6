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

GRANT SELECT ON TABLE outbox.intents TO outbox_operator;
