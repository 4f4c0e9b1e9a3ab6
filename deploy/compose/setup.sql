-- deploy/compose/setup.sql — after `outbox-relay migrate`, as the schema owner
-- (outbox_migrate) in the database "app": the group roles exist now, so the logins
-- get theirs, and the receiver is registered as a target. Safe to run again (the
-- setup service runs it at every `docker-compose up`).

\set ON_ERROR_STOP on
SET client_min_messages = warning;   -- not "already a member" at every run

-- The relay: claim, record, read targets; outbox_operator for its status page (/ui).
GRANT outbox_relay, outbox_operator TO outbox_relay_local;
-- The application: outbox.enqueue and outbox.outcome, nothing else.
GRANT outbox_app TO refund_app;
-- The MCP front door: the outbox.mcp_* functions, nothing else.
GRANT outbox_mcp TO outbox_mcp_local;

-- The python inbox receiver (docs/examples/python/inbox_receiver.py), by its service name.
INSERT INTO outbox.targets (name, url, status_url, timeout_ms, backoff_base_ms, backoff_cap_ms)
VALUES ('payments.refund', 'http://receiver:8080/refunds', 'http://receiver:8080/by-key/{key}',
        5000, 200, 10000)
ON CONFLICT (name) DO UPDATE
   SET url = EXCLUDED.url, status_url = EXCLUDED.status_url, timeout_ms = EXCLUDED.timeout_ms,
       backoff_base_ms = EXCLUDED.backoff_base_ms, backoff_cap_ms = EXCLUDED.backoff_cap_ms;

-- The receiver as an MCP tool, for the front door (README.md, "For agents: MCP");
-- clients and their tokens are yours to make (deploy/docker-compose.yml says how).
INSERT INTO outbox.mcp_tools (tool, target, description, input_schema, destructive)
VALUES ('refund', 'payments.refund', 'Refund an amount to an account. Executed once per idempotency key.',
        '{"type": "object",
          "properties": {"account": {"type": "integer"}, "amount_cents": {"type": "integer", "minimum": 1}},
          "required": ["account", "amount_cents"], "additionalProperties": false}', true)
ON CONFLICT (tool) DO UPDATE
   SET target = EXCLUDED.target, description = EXCLUDED.description,
       input_schema = EXCLUDED.input_schema, destructive = EXCLUDED.destructive;
