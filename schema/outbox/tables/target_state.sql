CREATE TABLE outbox.target_state (
    target text NOT NULL,
    circuit text DEFAULT 'closed'::text NOT NULL,
    circuit_since timestamp with time zone DEFAULT now() NOT NULL,
    circuit_reason text,
    probe_interval_ms integer DEFAULT 0 NOT NULL,
    probe_at timestamp with time zone,
    probe_owner text,
    probe_expires_at timestamp with time zone,
    paused_until timestamp with time zone,
    tokens double precision,
    tokens_at timestamp with time zone,
    CONSTRAINT target_state_check CHECK (((circuit <> 'open'::text) OR (probe_at IS NOT NULL))),
    CONSTRAINT target_state_check1 CHECK (((circuit <> 'half_open'::text) OR ((probe_owner IS NOT NULL) AND (probe_expires_at IS NOT NULL)))),
    CONSTRAINT target_state_circuit_check CHECK ((circuit = ANY (ARRAY['closed'::text, 'open'::text, 'half_open'::text])))
);

COMMENT ON TABLE outbox.target_state IS 'Flow control state shared by all relays: circuit breaker, Retry-After pause, rate-limit tokens. Written by outbox.claim and outbox.target_event.';

ALTER TABLE ONLY outbox.target_state
    ADD CONSTRAINT target_state_pkey PRIMARY KEY (target);

GRANT SELECT ON TABLE outbox.target_state TO outbox_relay;
GRANT SELECT ON TABLE outbox.target_state TO outbox_operator;
