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

GRANT SELECT ON TABLE outbox.isolated_logins TO outbox_operator;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE outbox.isolated_logins TO outbox_admin;
