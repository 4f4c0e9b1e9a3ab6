CREATE SCHEMA outbox;

COMMENT ON SCHEMA outbox IS 'Transactional outbox: intents enqueued in business transactions, delivered by outbox-relay.';

GRANT USAGE ON SCHEMA outbox TO outbox_app;
GRANT USAGE ON SCHEMA outbox TO outbox_relay;
GRANT USAGE ON SCHEMA outbox TO outbox_operator;
GRANT USAGE ON SCHEMA outbox TO outbox_admin;
GRANT USAGE ON SCHEMA outbox TO outbox_mcp;
