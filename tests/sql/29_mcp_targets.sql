-- 29_mcp_targets: MCP targets in the database (migrations/0037_mcp_targets.sql; issue 36,
-- items 1 and 4).
--   columns    protocol ('http' | 'mcp'), mcp_version ('auto' | '2026-07-28' |
--              '2025-11-25'), auth_secret (an OUTBOX_SECRET_ name, never a token),
--              an mcp target is POSTed to; mcp_tools.upstream_tool
--   enqueue    an mcp target takes {"tool": NAME, "arguments": {...}} and refuses anything
--              else with OR027 and a message that says the shape; an http target is as before
--   status     an unknown intent of an mcp target with a status_tool is claimed for
--              reconciliation and needs no person; without one it needs a person
--   front door mcp_call wraps an agent's arguments in that shape for an mcp target (the
--              upstream's name of the tool when it has one), and a replay matches it
BEGIN;
SELECT plan(28);

-- columns
SELECT has_column('outbox', 'targets', 'protocol', 'targets.protocol');
SELECT col_default_is('outbox', 'targets', 'protocol', 'http', 'protocol defaults to http');
SELECT col_default_is('outbox', 'targets', 'mcp_version', 'auto', 'mcp_version defaults to auto');
SELECT has_column('outbox', 'targets', 'auth_secret', 'targets.auth_secret');
SELECT has_column('outbox', 'targets', 'status_tool', 'targets.status_tool');
SELECT throws_ok($$INSERT INTO outbox.targets (name, url, status_tool) VALUES ('x', 'http://x.test/', 'status')$$,
                 '23514', NULL, 'a status_tool is for an mcp target only');
SELECT throws_ok($$INSERT INTO outbox.targets (name, url, protocol, secret_env) VALUES ('x', 'http://x.test/', 'mcp', 'OUTBOX_SECRET_SIGN')$$,
                 '23514', NULL, 'an mcp target takes no signing secret_env (0044: its calls are not signed)');
INSERT INTO outbox.targets (name, url, protocol) VALUES ('unsigned', 'http://x.test/', 'mcp');
SELECT throws_ok($$UPDATE outbox.targets SET secret_env = 'OUTBOX_SECRET_SIGN' WHERE name = 'unsigned'$$,
                 '23514', NULL, 'nor can an mcp target be given one later');
DELETE FROM outbox.targets WHERE name = 'unsigned';
SELECT has_column('outbox', 'mcp_tools', 'upstream_tool', 'mcp_tools.upstream_tool');
SELECT throws_ok($$INSERT INTO outbox.targets (name, url, protocol) VALUES ('x', 'http://x.test/', 'grpc')$$,
                 '23514', NULL, 'a protocol other than http or mcp is refused');
SELECT throws_ok($$INSERT INTO outbox.targets (name, url, protocol, mcp_version) VALUES ('x', 'http://x.test/', 'mcp', '2024-11-05')$$,
                 '23514', NULL, 'an mcp_version other than auto, 2026-07-28, 2025-11-25 is refused');
SELECT throws_ok($$INSERT INTO outbox.targets (name, url, protocol, auth_secret) VALUES ('x', 'http://x.test/', 'mcp', 'DATABASE_URL')$$,
                 '23514', NULL, 'auth_secret names an OUTBOX_SECRET_ variable only');
SELECT throws_ok($$INSERT INTO outbox.targets (name, url, protocol, auth_secret) VALUES ('x', 'http://x.test/', 'mcp', 'OUTBOX_SECRET_a b')$$,
                 '23514', NULL, 'auth_secret is a name, not a token with spaces');
SELECT throws_ok($$INSERT INTO outbox.targets (name, url, protocol, method) VALUES ('x', 'http://x.test/', 'mcp', 'PUT')$$,
                 '23514', NULL, 'an mcp target is POSTed to');

INSERT INTO outbox.targets (name, url, protocol, mcp_version, auth_secret, key_header) VALUES
    ('up', 'http://up.test/mcp', 'mcp', '2025-11-25', 'OUTBOX_SECRET_UP', 'Idempotency-Key');
INSERT INTO outbox.targets (name, url) VALUES ('hook', 'http://hook.test/');

-- enqueue
SELECT lives_ok($$SELECT outbox.enqueue('k1', 'up', '{"tool": "create_ticket", "arguments": {"title": "a"}}')$$,
                'an mcp target takes {"tool", "arguments"}');
SELECT throws_ok($$SELECT outbox.enqueue('k2', 'up', '{"title": "a"}')$$, 'OR027',
                 'outbox.enqueue: target ''up'' speaks MCP: the payload must be {"tool": NAME, "arguments": {...}} and nothing else',
                 'arguments alone are refused with OR027, saying the shape');
SELECT throws_ok($$SELECT outbox.enqueue('k3', 'up', '{"tool": "t", "arguments": {}, "x": 1}')$$, 'OR027', NULL,
                 'another member beside tool and arguments is refused');
SELECT throws_ok($$SELECT outbox.enqueue('k4', 'up', '{"tool": 7, "arguments": {}}')$$, 'OR027', NULL,
                 'a tool that is not a string is refused');
SELECT throws_ok($$SELECT outbox.enqueue('k5', 'up', '{"tool": "t", "arguments": [1]}')$$, 'OR027', NULL,
                 'arguments that are not an object are refused');
SELECT throws_ok($$SELECT outbox.enqueue('k6', 'up', '{"tool": "", "arguments": {}}')$$, 'OR027', NULL,
                 'an empty tool name is refused');
SELECT lives_ok($$SELECT outbox.enqueue('k7', 'hook', '{"title": "a"}')$$, 'an http target takes any object, as before');
SELECT is((SELECT count(*)::int FROM outbox.intents WHERE key IN ('k1', 'k7')), 2, 'the two accepted intents are there');

-- status_tool
INSERT INTO outbox.targets (name, url, protocol, key_header, status_tool) VALUES
    ('up-asked', 'http://asked.test/mcp', 'mcp', NULL, 'ticket_status'),
    ('up-unasked', 'http://unasked.test/mcp', 'mcp', NULL, NULL);
SELECT outbox.enqueue('u1', 'up-asked', '{"tool": "t", "arguments": {}}') \g /dev/null
SELECT outbox.enqueue('u2', 'up-unasked', '{"tool": "t", "arguments": {}}') \g /dev/null
UPDATE outbox.intents SET state = 'unknown', ambiguous = true, attempts = 1, first_attempt_at = now(),
       next_attempt_at = now() - interval '1 second' WHERE key IN ('u1', 'u2');
SELECT is((SELECT array_agg(key ORDER BY key) FROM outbox.claim_unknown('r1', 10, 30000)), ARRAY['u1'],
          'an unknown intent is claimed for reconciliation when its mcp target has a status_tool (and only then)');
SELECT is((SELECT outbox.needs_person(id, target, first_attempt_at) FROM outbox.intents WHERE key = 'u1'), NULL,
          'it needs no person: the relay asks the tool');
SELECT is((SELECT outbox.needs_person(id, target, first_attempt_at) FROM outbox.intents WHERE key = 'u2'),
          'needs a person — no status URL, no key', 'without a status_tool (and no key header) a person settles it');

-- front door
INSERT INTO outbox.mcp_tools (tool, target, description, upstream_tool) VALUES
    ('up.ticket', 'up', 'Open a ticket', 'create_ticket');
INSERT INTO outbox.mcp_tools (tool, target, description) VALUES ('same_name', 'up', 'Same name upstream');
SELECT outbox.mcp_client('alpha', repeat('a', 40)) \g /dev/null
SELECT is((outbox.mcp_call(sha256(convert_to(repeat('a', 40), 'UTF8')), 'up.ticket', 'c1', '{"title": "b"}')).status,
          'pending', 'an agent''s call of a tool of an mcp target is taken');
SELECT is((SELECT payload FROM outbox.intents WHERE key = 'mcp:alpha:c1'),
          '{"tool": "create_ticket", "arguments": {"title": "b"}}'::jsonb,
          'its payload is the upstream''s tool name and the agent''s arguments');
SELECT is((outbox.mcp_call(sha256(convert_to(repeat('a', 40), 'UTF8')), 'up.ticket', 'c1', '{"title": "b"}')).inserted,
          false, 'the same call again is the same intent (no key_conflict)');

SELECT * FROM finish();
ROLLBACK;
