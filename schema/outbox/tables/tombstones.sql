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

GRANT SELECT ON TABLE outbox.tombstones TO outbox_operator;
