CREATE TABLE outbox.relays (
    relay_id text NOT NULL,
    idle boolean DEFAULT false NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    heartbeat_at timestamp with time zone DEFAULT now() NOT NULL
);

COMMENT ON TABLE outbox.relays IS 'Running relays. The enqueue trigger notifies only while some live relay says it is idle.';

ALTER TABLE ONLY outbox.relays
    ADD CONSTRAINT relays_pkey PRIMARY KEY (relay_id);

GRANT SELECT ON TABLE outbox.relays TO outbox_operator;
