-- 33_mcp_passthrough: read-only tools of an MCP upstream called straight through
-- (migrations/0045_mcp_passthrough.sql; issue 36, item 3).
--   column       mcp_tools.passthrough, false by default, not null
--   refusals     a destructive tool (the trigger's words, and the CHECK behind it when
--                triggers are bypassed), a tool of an 'http' target, an update that
--                makes a passthrough tool destructive (OR020, exact messages)
--   look-up      outbox.mcp_passthrough answers the front door the target's address and
--                settings (auth_secret: the variable's name), the upstream's name of the
--                tool; no row for a tool not passthrough, disabled, of a disabled target
--                or one changed to 'http', a tool the client may not use, a stranger
--   grants       executable by the front door's login only (an application, an operator,
--                an admin and a relay are refused)
-- The logins are real LOGIN roles created in this transaction (rolled back, roles too).
BEGIN;
SELECT plan(25);

INSERT INTO outbox.targets (name, url, protocol, mcp_version, auth_secret, timeout_ms, key_header, headers)
VALUES ('up', 'http://127.0.0.1:9/mcp', 'mcp', '2025-11-25', 'OUTBOX_SECRET_UP', 2500, NULL, '{"X-Team": "a"}');
INSERT INTO outbox.targets (name, url) VALUES ('web', 'https://w.test/hook');
INSERT INTO outbox.mcp_tools (tool, target, description, destructive) VALUES ('write', 'up', 'Writes', true);
SELECT outbox.mcp_client('alpha', repeat('a', 40)) \g /dev/null
SELECT outbox.mcp_client('beta', repeat('b', 40), ARRAY['write']) \g /dev/null
CREATE FUNCTION pg_temp.h(c text) RETURNS bytea LANGUAGE sql AS $$ SELECT sha256(convert_to(repeat(c, 40), 'UTF8')) $$;
GRANT EXECUTE ON FUNCTION pg_temp.h(text) TO PUBLIC;

CREATE ROLE outbox_t33_app LOGIN;
CREATE ROLE outbox_t33_op LOGIN;
CREATE ROLE outbox_t33_admin LOGIN;
CREATE ROLE outbox_t33_relay LOGIN;
CREATE ROLE outbox_t33_fd LOGIN;
GRANT outbox_app TO outbox_t33_app;
GRANT outbox_operator TO outbox_t33_op;
GRANT outbox_admin TO outbox_t33_admin;
GRANT outbox_relay TO outbox_t33_relay;
GRANT outbox_mcp TO outbox_t33_fd;

-- ---- column -------------------------------------------------------------------------------
SELECT col_not_null('outbox', 'mcp_tools', 'passthrough', 'passthrough is not null');
SELECT col_default_is('outbox', 'mcp_tools', 'passthrough', 'false', 'passthrough defaults to false (every tool an intent)');

-- ---- refusals (as an admin registers tools) ---------------------------------------------
SET SESSION AUTHORIZATION outbox_t33_admin;
SELECT throws_ok($$INSERT INTO outbox.mcp_tools (tool, target, passthrough) VALUES ('del', 'up', true)$$, 'OR020',
                 'outbox.mcp_tools: tool ''del'' cannot be passthrough: it is destructive (only a read-only tool, destructive false, is called without an intent)',
                 'a destructive tool (the default) cannot be passthrough');
SELECT throws_ok($$INSERT INTO outbox.mcp_tools (tool, target, destructive, passthrough) VALUES ('hook', 'web', false, true)$$, 'OR020',
                 'outbox.mcp_tools: tool ''hook'' cannot be passthrough: its target ''web'' is not an mcp target',
                 'a tool of an http target cannot be passthrough');
SELECT lives_ok($$INSERT INTO outbox.mcp_tools (tool, target, description, destructive, passthrough, upstream_tool)
                  VALUES ('search', 'up', 'Searches', false, true, 'find')$$,
                'a read-only tool of an mcp target can be passthrough');
SELECT lives_ok($$INSERT INTO outbox.mcp_tools (tool, target, destructive, passthrough) VALUES ('peek', 'up', false, true)$$,
                'another one, without an upstream name');
SELECT throws_ok($$UPDATE outbox.mcp_tools SET destructive = true WHERE tool = 'search'$$, 'OR020',
                 'outbox.mcp_tools: tool ''search'' cannot be passthrough: it is destructive (only a read-only tool, destructive false, is called without an intent)',
                 'a passthrough tool cannot be made destructive');
SELECT lives_ok($$UPDATE outbox.mcp_tools SET passthrough = false, destructive = true WHERE tool = 'peek'$$,
                'one that stops being passthrough may become destructive');
RESET SESSION AUTHORIZATION;
SET session_replication_role = replica; -- no trigger: the constraint behind it
SELECT throws_ok($$INSERT INTO outbox.mcp_tools (tool, target, passthrough) VALUES ('raw', 'up', true)$$, '23514',
                 'new row for relation "mcp_tools" violates check constraint "mcp_tools_passthrough_read_only"',
                 'without the trigger, the CHECK refuses a destructive passthrough tool');
RESET session_replication_role;

-- ---- the front door's look-up -------------------------------------------------------------
SET SESSION AUTHORIZATION outbox_t33_fd;
SELECT is((SELECT format('%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s', client, tool, target, upstream_tool, url,
                          mcp_version, auth_secret, timeout_ms, headers, http_version, ca_file, client_cert_file,
                          client_key_file)
             FROM outbox.mcp_passthrough(pg_temp.h('a'), 'search')),
          'alpha|search|up|find|http://127.0.0.1:9/mcp|2025-11-25|OUTBOX_SECRET_UP|2500|{"X-Team": "a"}|1.1|||',
          'a passthrough tool: its target''s address and settings, the name of the secret''s variable');
SELECT is((SELECT count(*)::int FROM outbox.mcp_passthrough(pg_temp.h('a'), 'write')), 0,
          'no row for a tool that is not passthrough (it stays an intent)');
SELECT is((SELECT count(*)::int FROM outbox.mcp_passthrough(pg_temp.h('a'), 'peek')), 0,
          'no row for a tool no longer passthrough');
SELECT is((SELECT count(*)::int FROM outbox.mcp_passthrough(pg_temp.h('a'), 'nope')), 0, 'no row for an unknown tool');
SELECT is((SELECT count(*)::int FROM outbox.mcp_passthrough(pg_temp.h('b'), 'search')), 0,
          'no row for a tool the client may not use');
SELECT is((SELECT count(*)::int FROM outbox.mcp_passthrough(pg_temp.h('z'), 'search')), 0, 'no row for a stranger');
RESET SESSION AUTHORIZATION;
UPDATE outbox.mcp_tools SET enabled = false WHERE tool = 'search';
SET SESSION AUTHORIZATION outbox_t33_fd;
SELECT is((SELECT count(*)::int FROM outbox.mcp_passthrough(pg_temp.h('a'), 'search')), 0, 'no row for a disabled tool');
RESET SESSION AUTHORIZATION;
UPDATE outbox.mcp_tools SET enabled = true WHERE tool = 'search';
UPDATE outbox.targets SET enabled = false WHERE name = 'up';
SET SESSION AUTHORIZATION outbox_t33_fd;
SELECT is((SELECT count(*)::int FROM outbox.mcp_passthrough(pg_temp.h('a'), 'search')), 0,
          'no row for a tool of a disabled target');
RESET SESSION AUTHORIZATION;
UPDATE outbox.targets SET enabled = true, protocol = 'http', mcp_version = 'auto', auth_secret = NULL WHERE name = 'up';
SET SESSION AUTHORIZATION outbox_t33_fd;
SELECT is((SELECT count(*)::int FROM outbox.mcp_passthrough(pg_temp.h('a'), 'search')), 0,
          'no row once its target is changed to http (the tool is an intent again)');
RESET SESSION AUTHORIZATION;
UPDATE outbox.targets SET protocol = 'mcp' WHERE name = 'up';
SET SESSION AUTHORIZATION outbox_t33_fd;
SELECT is((SELECT tool FROM outbox.mcp_passthrough(pg_temp.h('a'), 'search')), 'search', 'and a row again once it is mcp');
RESET SESSION AUTHORIZATION;

-- ---- grants -------------------------------------------------------------------------------
SET SESSION AUTHORIZATION outbox_t33_app;
SELECT throws_ok($$SELECT * FROM outbox.mcp_passthrough(pg_temp.h('a'), 'search')$$, '42501', NULL,
                 'an application cannot call the look-up');
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION outbox_t33_op;
SELECT throws_ok($$SELECT * FROM outbox.mcp_passthrough(pg_temp.h('a'), 'search')$$, '42501', NULL,
                 'an operator cannot call it');
SELECT is((SELECT passthrough FROM outbox.mcp_tools WHERE tool = 'search'), true, 'an operator reads the column');
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION outbox_t33_admin;
SELECT throws_ok($$SELECT * FROM outbox.mcp_passthrough(pg_temp.h('a'), 'search')$$, '42501', NULL,
                 'an admin cannot call it');
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION outbox_t33_relay;
SELECT throws_ok($$SELECT * FROM outbox.mcp_passthrough(pg_temp.h('a'), 'search')$$, '42501', NULL,
                 'a relay cannot call it');
RESET SESSION AUTHORIZATION;
SELECT is(has_function_privilege('public', 'outbox.mcp_passthrough(bytea, text)', 'EXECUTE'), false,
          'PUBLIC cannot execute it');

SELECT * FROM finish();
ROLLBACK;
