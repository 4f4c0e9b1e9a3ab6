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

GRANT SELECT ON TABLE outbox.mismatches TO outbox_operator;
