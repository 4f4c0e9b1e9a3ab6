CREATE TABLE outbox.retention_epoch (
    one boolean DEFAULT true NOT NULL,
    began timestamp with time zone NOT NULL,
    CONSTRAINT retention_epoch_one_check CHECK (one)
);

COMMENT ON TABLE outbox.retention_epoch IS 'When retention began (0012) on a database that already had intents: keys of intents settled before it are remembered for good.';

ALTER TABLE ONLY outbox.retention_epoch
    ADD CONSTRAINT retention_epoch_pkey PRIMARY KEY (one);
