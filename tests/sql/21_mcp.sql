-- 21_mcp: what the MCP front door keeps in the database (migrations/0022_mcp.sql).
--   mcp_tools           the schema subset refused at registration, with the reason
--   mcp_client          creates and rotates; only the SHA-256 is kept; bad input refused
--   mcp_call            the key namespaced per client; same key + arguments = same
--                       intent; other arguments = key_conflict with the fields; tools
--                       a client may not use refused; tasks: one per key
--   mcp_task_cancel     only what was never sent
--   the settle NOTIFY   an MCP intent that settles notifies outbox_mcp with its key
--   mcp_oauth_client    (0043) an OAuth token's client: its name and hash; none for a stranger
--   outbox_mcp          reaches exactly its functions, and no table
BEGIN;
SELECT plan(41);

INSERT INTO outbox.targets (name, url) VALUES ('t-refund', 'https://r.test/refund'), ('t-note', 'https://n.test/note');

-- ---- registration ------------------------------------------------------------------
SELECT lives_ok($$INSERT INTO outbox.mcp_tools (tool, target, description, input_schema) VALUES
    ('refund', 't-refund', 'Refund', '{"type": "object", "properties": {"amount": {"type": "integer", "minimum": 1},
      "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"}, "maxItems": 3}},
      "required": ["amount"], "additionalProperties": false}')$$, 'a schema in the subset is registered');
SELECT throws_ok($$INSERT INTO outbox.mcp_tools (tool, target, input_schema) VALUES
    ('bad1', 't-refund', '{"type": "object", "properties": {"a": {"if": {}}}}')$$, 'OR020',
    'outbox.mcp_tools: the input_schema of tool ''bad1'' is refused: unsupported keyword "if" at /properties/a',
    'a keyword outside the subset is refused, naming it and where');
SELECT throws_ok($$INSERT INTO outbox.mcp_tools (tool, target, input_schema) VALUES
    ('bad2', 't-refund', '{"type": "array"}')$$, 'OR020', NULL, 'the root must be an object schema');
SELECT throws_ok($$INSERT INTO outbox.mcp_tools (tool, target, input_schema) VALUES
    ('bad3', 't-refund', '{"type": "object", "properties": {"a": {"minLength": -1}}}')$$, 'OR020',
    'outbox.mcp_tools: the input_schema of tool ''bad3'' is refused: /properties/a/minLength: must be a non-negative integer',
    'a malformed bound is refused');
SELECT throws_ok($$INSERT INTO outbox.mcp_tools (tool, target, input_schema) VALUES
    ('bad4', 't-refund', '{"type": "object", "properties": {"a": {"pattern": "("}}}')$$, 'OR020', NULL,
    'a pattern that does not compile is refused');
SELECT lives_ok($$INSERT INTO outbox.mcp_tools (tool, target, input_schema) VALUES
    ('book', 't-refund', '{"$defs": {"Address": {"properties": {"city": {"type": "string"},
        "zip": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": null}}, "required": ["city"], "type": "object"}},
      "properties": {"when": {"format": "date-time", "type": "string"},
        "who": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": null},
        "address": {"$ref": "#/$defs/Address"}}, "required": ["when", "address"], "type": "object"}')$$,
    'a FastMCP schema registers: anyOf with null, $defs and $ref, format (issue 36)');
SELECT lives_ok($$INSERT INTO outbox.mcp_tools (tool, target, input_schema) VALUES
    ('signup', 't-refund', '{"type": "object", "properties": {"id": {"type": "string", "format": "uuid"},
        "email": {"type": "string", "format": "email"}, "kind": {"anyOf": [{"const": "a"}, {"type": "integer"}]}},
      "required": ["id"], "additionalProperties": false, "$schema": "http://json-schema.org/draft-07/schema#"}')$$,
    'a zod schema registers: $schema draft-07, format, a union as anyOf');
SELECT throws_ok($$INSERT INTO outbox.mcp_tools (tool, target, input_schema) VALUES
    ('bad5', 't-refund', '{"type": "object", "$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}]}}}')$$, 'OR020',
    'outbox.mcp_tools: the input_schema of tool ''bad5'' is refused: "$ref" loops back to this schema without descending into the value (through $ref, allOf, anyOf, oneOf or not) at /$defs/a/anyOf/0',
    'a $ref that loops without descending into the value is refused, naming $ref and where');
SELECT throws_ok($$INSERT INTO outbox.mcp_tools (tool, target, input_schema) VALUES
    ('bad6', 't-refund', '{"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}}')$$, 'OR020',
    'outbox.mcp_tools: the input_schema of tool ''bad6'' is refused: "$ref" is not local: only "#" and "#/..." pointers into this schema are supported at /properties/a',
    'a remote $ref is refused');
SELECT throws_ok($$INSERT INTO outbox.mcp_tools (tool, target) VALUES ('bad name', 't-refund')$$, '23514', NULL,
    'a tool name outside ^[A-Za-z0-9_.-]{1,128}$ is refused');
SELECT throws_ok($$INSERT INTO outbox.mcp_tools (tool, target) VALUES ('ghost', 'no-such-target')$$, '23503', NULL,
    'a tool names a registered target');
INSERT INTO outbox.mcp_tools (tool, target, description) VALUES ('note', 't-note', 'Note');

-- ---- clients -------------------------------------------------------------------------
SELECT is(outbox.mcp_client('alpha', repeat('a', 40)), 'alpha', 'a client is created');
SELECT outbox.mcp_client('beta', repeat('b', 40)) \g /dev/null
SELECT outbox.mcp_client('gamma', repeat('c', 40), ARRAY['note']) \g /dev/null
SELECT is((SELECT token_hash FROM outbox.mcp_clients WHERE name = 'alpha'), sha256(convert_to(repeat('a', 40), 'UTF8')),
          'only the SHA-256 of the token is kept');
SELECT throws_ok($$SELECT outbox.mcp_client('short', 'abc')$$, 'OR021',
                 'outbox.mcp_client: the token of client ''short'' must be at least 32 bytes', 'a short token is refused');
SELECT throws_ok($$SELECT outbox.mcp_client('a:b', repeat('x', 40))$$, 'OR021', NULL, 'a name with a colon is refused');
SELECT throws_ok($$SELECT outbox.mcp_client('delta', repeat('d', 40), ARRAY['nope'])$$, 'OR021',
                 'outbox.mcp_client: no such tool: nope', 'an unknown tool is refused');
SELECT outbox.mcp_client('alpha', repeat('z', 40)) \g /dev/null
SELECT is((SELECT count(*)::int FROM outbox.mcp_list_tools(sha256(convert_to(repeat('a', 40), 'UTF8')))), 0,
          'after a rotation the old token is unknown');
SELECT outbox.mcp_client('alpha', repeat('a', 40)) \g /dev/null

-- ---- calls -----------------------------------------------------------------------------
CREATE TEMP TABLE ans AS
SELECT * FROM outbox.mcp_call(sha256(convert_to(repeat('a', 40), 'UTF8')), 'refund', 'run-1:s1', '{"amount": 5}');
SELECT is((SELECT intent_key || ' ' || status || ' ' || inserted FROM ans), 'mcp:alpha:run-1:s1 pending true',
          'a call enqueues under the client''s namespace');
SELECT is((SELECT target FROM outbox.intents WHERE key = 'mcp:alpha:run-1:s1'), 't-refund', 'to the tool''s target');
SELECT is((SELECT inserted FROM outbox.mcp_call(sha256(convert_to(repeat('a', 40), 'UTF8')), 'refund', 'run-1:s1',
                                                '{"amount": 5}')), false, 'the same key and arguments: the same intent');
SELECT is((SELECT status || ' ' || array_to_string(conflict_fields, ',')
             FROM outbox.mcp_call(sha256(convert_to(repeat('a', 40), 'UTF8')), 'refund', 'run-1:s1', '{"amount": 6}')),
          'key_conflict amount', 'other arguments: key_conflict naming the field');
SELECT is((SELECT inserted FROM outbox.mcp_call(sha256(convert_to(repeat('b', 40), 'UTF8')), 'refund', 'run-1:s1',
                                                '{"amount": 6}')), true, 'client beta''s same key is its own intent');
SELECT is((SELECT status FROM outbox.mcp_outcome(sha256(convert_to(repeat('b', 40), 'UTF8')), 'run-9:none')),
          'not_found', 'a key never called: not_found');
SELECT throws_ok($$SELECT outbox.mcp_call(sha256(convert_to(repeat('c', 40), 'UTF8')), 'refund', 'k', '{"amount": 1}')$$,
                 'OR023', NULL, 'a tool the client may not use is refused');
SELECT throws_ok($$SELECT outbox.mcp_call(sha256('nobody'), 'refund', 'k', '{"amount": 1}')$$, 'OR022', NULL,
                 'an unknown token is refused');
SELECT throws_ok($$SELECT outbox.mcp_call(sha256(convert_to(repeat('a', 40), 'UTF8')), 'refund', repeat('k', 250), '{"amount": 1}')$$,
                 'OR004', NULL, 'a key too long once namespaced is refused');

-- the same key through another tool (another target): a conflict, never the other's outcome
INSERT INTO outbox.mcp_tools (tool, target, description) VALUES ('charge', 't-note', 'Charge');
UPDATE outbox.intents SET state = 'succeeded', attempts = 1, response_status = 200, response_body = '{"refunded":true}'
 WHERE key = 'mcp:alpha:run-1:s1';
SELECT is((SELECT status FROM outbox.mcp_call(sha256(convert_to(repeat('a', 40), 'UTF8')), 'charge', 'run-1:s1',
                                              '{"amount": 5}')), 'key_conflict',
          'the same key and arguments through a tool of another target: key_conflict, not the other''s outcome');
-- a client's ordering groups and runs are namespaced like its keys
SELECT outbox.mcp_call(sha256(convert_to(repeat('a', 40), 'UTF8')), 'refund', 'run-2:s1', '{"amount": 9}',
                       p_run_id => 'run-2', p_ordering_key => 'grp') \g /dev/null
SELECT is((SELECT ordering_key || ' ' || run_id FROM outbox.intents WHERE key = 'mcp:alpha:run-2:s1'),
          'mcp:alpha:grp mcp:alpha:run-2', 'the ordering key and the run id are namespaced per client');

-- tasks
SELECT ok((SELECT task_id FROM outbox.mcp_call(sha256(convert_to(repeat('a', 40), 'UTF8')), 'refund', 'run-1:s2',
                                               '{"amount": 7}', p_task => true)) ~ '^task-[0-9a-f]{64}$',
          'a task id is two random UUIDs (244 random bits)');
SELECT is((SELECT task_id FROM outbox.mcp_call(sha256(convert_to(repeat('a', 40), 'UTF8')), 'refund', 'run-1:s2',
                                               '{"amount": 7}', p_task => true)),
          (SELECT task_id FROM outbox.mcp_tasks WHERE intent_key = 'mcp:alpha:run-1:s2'), 'the same key gives the same task');
SELECT is((SELECT status FROM outbox.mcp_task(sha256(convert_to(repeat('b', 40), 'UTF8')),
                                              (SELECT task_id FROM outbox.mcp_tasks WHERE intent_key = 'mcp:alpha:run-1:s2'))),
          'not_found', 'another client cannot see the task');
UPDATE outbox.intents SET attempts = 1, ambiguous = true WHERE key = 'mcp:alpha:run-1:s2';
SELECT throws_ok(format($$SELECT outbox.mcp_task_cancel(sha256(convert_to(repeat('a', 40), 'UTF8')), %L)$$,
                        (SELECT task_id FROM outbox.mcp_tasks WHERE intent_key = 'mcp:alpha:run-1:s2')),
                 'OR007', 'the call cannot be cancelled: it may already have been sent (reconciling)',
                 'a task whose intent was sent cannot be cancelled, and says why');
SELECT outbox.mcp_call(sha256(convert_to(repeat('a', 40), 'UTF8')), 'refund', 'run-1:s3', '{"amount": 8}', p_task => true) \g /dev/null
SELECT is((SELECT status FROM outbox.mcp_task_cancel(sha256(convert_to(repeat('a', 40), 'UTF8')),
                                                     (SELECT task_id FROM outbox.mcp_tasks WHERE intent_key = 'mcp:alpha:run-1:s3'))),
          'cancelled', 'a task never sent is cancelled');

-- the wake-up (its delivery is checked end to end by tests/integration/42_mcp_protocol.sh)
SELECT is((SELECT tgenabled FROM pg_trigger WHERE tgname = 'intents_mcp_settled'), 'O', 'the settle trigger is on');
SELECT matches(pg_get_triggerdef((SELECT oid FROM pg_trigger WHERE tgname = 'intents_mcp_settled')),
               'starts_with\(new\.key, ''mcp:''::text\)', 'it fires only for MCP intents');

-- ---- 0043: the client an OAuth access token names ----------------------------------------
SELECT results_eq($$SELECT client, token_hash FROM outbox.mcp_oauth_client('alpha')$$,
                  $$VALUES ('alpha'::text, sha256(convert_to(repeat('a', 40), 'UTF8')))$$,
                  'mcp_oauth_client: the named client and the hash its statements authenticate with');
SELECT is((SELECT count(*)::int FROM outbox.mcp_oauth_client('nobody')), 0,
          'mcp_oauth_client: no row for a name no client has');

-- ---- outbox_mcp -------------------------------------------------------------------------
SELECT is((SELECT string_agg(p.proname::text, ' ' ORDER BY p.proname::text COLLATE "C") FROM pg_proc p
             WHERE p.pronamespace = 'outbox'::regnamespace AND has_function_privilege('outbox_mcp', p.oid, 'EXECUTE')
               AND p.proname::text NOT IN ('canonical', 'fingerprint_doc', 'fingerprint', 'differing_fields',
                                           'visible_status', 'needs_approval', 'traceparent_of')),
          'mcp_call mcp_call mcp_calls mcp_list_tools mcp_list_tools_keyed mcp_oauth_client mcp_outcome mcp_outcomes mcp_outcomes mcp_passthrough mcp_task mcp_task_cancel mcp_tasks_list mcp_tool mcp_tool_keyed',
          'outbox_mcp reaches the front door''s functions only (not enqueue or outcome: no target but through a tool)');
SELECT is((SELECT count(*)::int FROM pg_class c
            WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind IN ('r', 'v')
              AND has_table_privilege('outbox_mcp', c.oid, 'SELECT')), 0, 'and no table or view');

-- 0027: a cancelled call is never described as "not sent" (since 0026 an
-- intent refused with a 4xx can be cancelled): what holds, then cancel's reason.
SELECT is(outbox.mcp_message('cancelled', 'cancelled after 1 attempt was sent: the target refused it with HTTP 429 and did not act', NULL),
          'cancelled: the target did not act, and nothing more will be sent: cancelled after 1 attempt was sent: the target refused it with HTTP 429 and did not act',
          'mcp_message: a cancelled call says the target did not act, then why');
SELECT ok(outbox.mcp_message('cancelled', NULL, NULL) NOT LIKE '%not sent%',
          'mcp_message: a cancelled call never claims it was not sent');
SELECT * FROM finish();
ROLLBACK;
