CREATE TABLE outbox.installation (
    one boolean DEFAULT true NOT NULL,
    role_prefix text NOT NULL,
    installed_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT installation_one_check CHECK (one),
    CONSTRAINT installation_role_prefix_check CHECK ((role_prefix ~ '^([a-z][a-z0-9_]{0,39})?$'::text))
);

COMMENT ON TABLE outbox.installation IS 'One row: the role prefix this database was installed with (0041); '''' = the plain names outbox_app, outbox_relay, ...';

ALTER TABLE ONLY outbox.installation
    ADD CONSTRAINT installation_pkey PRIMARY KEY (one);

GRANT SELECT ON TABLE outbox.installation TO outbox_operator;
