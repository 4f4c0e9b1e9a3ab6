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

COMMENT ON INDEX outbox.attempts_pkey IS 'A key''s life in order (intent_id, id): the only B-tree every attempt enters (0020).';

GRANT SELECT ON TABLE outbox.attempts TO outbox_operator;
