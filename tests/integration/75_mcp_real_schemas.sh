#!/usr/bin/env bash
# The schemas real MCP servers emit register and judge calls (issue 36,
# deliverable 5). A FastMCP (pydantic) schema — Optional[str] as anyOf with
# null, a nested model through $defs and $ref, format date-time — and a zod
# one — $schema draft-07, format uuid / email / date, a union as anyOf,
# additionalProperties false — are registered through SQL (0022 refused each
# with OR020), listed by tools/list (the front door's own check accepts
# them), and called through the front door: a valid call reaches the target,
# an invalid one is refused with the exact messages the model reads, and
# nothing is sent. A schema whose $ref loops is refused at registration with
# OR020 naming $ref.
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start r --dedupe
target_add book "http://127.0.0.1:$RECV_PORT_r/book"
sql "INSERT INTO outbox.mcp_tools (tool, target, description, input_schema) VALUES
  ('book', 'book', 'Book a visit.', '{
    \"\$defs\": {\"Address\": {\"properties\": {\"city\": {\"title\": \"City\", \"type\": \"string\"},
        \"zip\": {\"anyOf\": [{\"type\": \"string\"}, {\"type\": \"null\"}], \"default\": null, \"title\": \"Zip\"}},
      \"required\": [\"city\"], \"title\": \"Address\", \"type\": \"object\"}},
    \"properties\": {\"when\": {\"format\": \"date-time\", \"title\": \"When\", \"type\": \"string\"},
      \"who\": {\"anyOf\": [{\"type\": \"string\"}, {\"type\": \"null\"}], \"default\": null, \"title\": \"Who\"},
      \"address\": {\"\$ref\": \"#/\$defs/Address\"}},
    \"required\": [\"when\", \"address\"], \"title\": \"bookArguments\", \"type\": \"object\"}'),
  ('signup', 'book', 'Sign up.', '{
    \"type\": \"object\",
    \"properties\": {\"id\": {\"type\": \"string\", \"format\": \"uuid\"},
      \"email\": {\"type\": \"string\", \"format\": \"email\"},
      \"kind\": {\"anyOf\": [{\"type\": \"string\", \"const\": \"a\"}, {\"type\": \"integer\"}]},
      \"day\": {\"type\": \"string\", \"format\": \"date\"}},
    \"required\": [\"id\", \"email\", \"kind\"], \"additionalProperties\": false,
    \"\$schema\": \"http://json-schema.org/draft-07/schema#\"}')" >/dev/null
ok "the FastMCP and zod schemas registered (0022 refused both with OR020)" \
    test "$(sql "SELECT count(*) FROM outbox.mcp_tools WHERE tool IN ('book', 'signup')")" = 2
TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
sql "SELECT outbox.mcp_client('agent', '$TOKEN')" >/dev/null

relay_start a --poll-interval-ms 200
mcp_start --mcp-wait-ms 10000

mcp() { python3 "$ITEST_ROOT/tests/mcp/mcp_call.py" "$@"; }
field() { python3 -c 'import json, sys
doc = json.loads(sys.stdin.read())
for part in sys.argv[1].split("."):
    doc = doc.get(part) if isinstance(doc, dict) else None
print("" if doc is None else (json.dumps(doc) if isinstance(doc, (dict, list, bool)) else doc))' "$1"; }

# ---------------------------------------------------------------- tools/list shows them
out=$(mcp "$MCP_PORT" "$TOKEN" list)
is "$(python3 -c 'import json, sys; print(" ".join(sorted(t["name"] for t in json.loads(sys.stdin.read())["result"]["tools"])))' <<<"$out")" \
    "book signup" "tools/list lists both (the front door's check accepts them, none hidden)"
is "$(python3 -c 'import json, sys
tools = {t["name"]: t for t in json.loads(sys.stdin.read())["result"]["tools"]}
print(tools["book"]["inputSchema"]["properties"]["address"]["$ref"])' <<<"$out")" '#/$defs/Address' \
    "the schema is listed as registered, \$ref and all"

# ---------------------------------------------------------------- FastMCP: valid calls reach the target
out=$(mcp "$MCP_PORT" "$TOKEN" call book "run-1:book" \
    '{"when": "2026-12-07T10:00:00Z", "who": null, "address": {"city": "Oslo", "zip": null}}')
is "$(field result.structuredContent.status <<<"$out")" succeeded "a valid FastMCP call (who null, zip null) succeeded"
out=$(mcp "$MCP_PORT" "$TOKEN" call book "run-2:book" \
    '{"when": "2026-12-07T10:00:00+01:00", "who": "ann", "address": {"city": "Oslo", "zip": "0150"}}')
is "$(field result.structuredContent.status <<<"$out")" succeeded "and one with who a string and a zip"

# ---------------------------------------------------------------- FastMCP: the messages the model reads
out=$(mcp "$MCP_PORT" "$TOKEN" call book "run-3:book" '{"when": "2026-12-07T10:00:00Z", "who": 5, "address": {"city": "Oslo"}}')
is "$(field result.structuredContent.status <<<"$out")" invalid_arguments "who 5 is refused"
is "$(field result.structuredContent.message <<<"$out")" \
    'invalid arguments: /who: must match at least one schema in "anyOf" (0: must be string, got integer; 1: must be null, got integer). Nothing was sent.' \
    "saying what each alternative of Optional[str] wanted"
out=$(mcp "$MCP_PORT" "$TOKEN" call book "run-4:book" '{"when": "tomorrow", "address": {"zip": "0150"}}')
is "$(field result.structuredContent.message <<<"$out")" \
    'invalid arguments: /when: must be a date-time (RFC 3339, as 2026-12-07T10:00:00Z); /address: missing required property "city". Nothing was sent.' \
    "a date-time that is not one, and the nested model's missing field (through \$ref)"
out=$(mcp "$MCP_PORT" "$TOKEN" call book "run-5:book" '{"when": "2026-02-30T10:00:00Z", "address": {"city": "Oslo"}}')
is "$(field result.structuredContent.message <<<"$out")" \
    'invalid arguments: /when: must be a date-time (RFC 3339, as 2026-12-07T10:00:00Z). Nothing was sent.' \
    "February 30th is no date-time"

# ---------------------------------------------------------------- zod
out=$(mcp "$MCP_PORT" "$TOKEN" call signup "run-6:signup" \
    '{"id": "123e4567-e89b-12d3-a456-426614174000", "email": "ann@example.com", "kind": "a", "day": "2024-02-29"}')
is "$(field result.structuredContent.status <<<"$out")" succeeded "a valid zod call succeeded"
out=$(mcp "$MCP_PORT" "$TOKEN" call signup "run-7:signup" \
    '{"id": "123", "email": "ann@@example.com", "kind": "b", "day": "2023-02-29", "extra": 1}')
is "$(field result.structuredContent.message <<<"$out")" \
    'invalid arguments: /id: must be a UUID (as 123e4567-e89b-12d3-a456-426614174000); /day: must be a date (RFC 3339 full-date, as 2026-12-07); /kind: must match at least one schema in "anyOf" (0: must be "a"; 1: must be integer, got string); /email: must be an e-mail address (as name@example.com); /extra: additional property not allowed. Nothing was sent.' \
    "every fault of the zod call, each with its path (properties in the order jsonb keeps them)"

wait_for 20 "SELECT count(*) FROM outbox.intents WHERE key LIKE 'mcp:agent:%' AND state = 'succeeded'" 3
is "$(sql "SELECT string_agg(key, ' ' ORDER BY key) FROM outbox.intents WHERE key LIKE 'mcp:agent:%'")" \
    "mcp:agent:run-1:book mcp:agent:run-2:book mcp:agent:run-6:signup" \
    "only the three valid calls were enqueued: nothing was sent for the others"
is "$(receiver_stat r deliveries_total)" 3 "the target received exactly the three valid calls"

# ---------------------------------------------------------------- a loop is refused at registration
err=$(sql "INSERT INTO outbox.mcp_tools (tool, target, input_schema) VALUES ('loop', 'book',
    '{\"type\": \"object\", \"properties\": {\"a\": {\"\$ref\": \"#/properties/a\"}}}')" 2>&1 || true)
ok "a \$ref to itself is refused with OR020, naming \$ref and where" \
    grep -q 'the input_schema of tool .loop. is refused: "\$ref" loops back to this schema without descending into the value (through \$ref, allOf, anyOf, oneOf or not) at /properties/a' <<<"$err"

itest_done
