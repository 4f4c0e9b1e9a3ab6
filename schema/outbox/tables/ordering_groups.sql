CREATE TABLE outbox.ordering_groups (
    ordering_key text NOT NULL,
    enqueued bigint DEFAULT 1 NOT NULL,
    last_enqueue_at timestamp with time zone DEFAULT now() NOT NULL
);

COMMENT ON TABLE outbox.ordering_groups IS 'One row per ordering group with live intents: an enqueue holds its row lock until it commits, so enqueues of one group commit in the order of their ids. Deleted when the group has no live intent.';

ALTER TABLE ONLY outbox.ordering_groups
    ADD CONSTRAINT ordering_groups_pkey PRIMARY KEY (ordering_key);
