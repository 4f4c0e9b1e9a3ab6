-- 0045: read-only tools of an MCP upstream may be passed straight through
-- (issue 36, item 3).
--
-- Every tool of the front door (outbox-relay mcp) is an intent: the call is
-- enqueued, a relay delivers it as the upstream's tools/call, and the agent
-- is answered with the saved outcome. That is what a write needs (exactly
-- once, whatever fails). A read needs none of it: calling it twice does
-- nothing twice, and its answer is worth nothing once stale. A tool marked
-- passthrough is called by the front door itself, at once, with no intent,
-- no key and no saved outcome (relay/mcp/mcp_passthrough.c).
--
-- Only a tool that says it changes nothing may be passed through: the
-- column destructive must be false (constraint
-- mcp_tools_passthrough_read_only; `outbox-relay mcp-import
-- --passthrough-readonly` sets both from the upstream's readOnlyHint), and
-- its target must be an 'mcp' target (trigger mcp_tools_passthrough: an
-- HTTP target has no call to pass through). A target changed to 'http'
-- later, or disabled, makes its passthrough tools intents again
-- (outbox.mcp_passthrough answers no row for them).
--
-- outbox.mcp_passthrough(token_hash, tool) is the front door's look-up:
-- for a client the token names, and a passthrough tool it may use, the
-- target's address and settings the call needs. auth_secret is the NAME of
-- the front door's environment variable holding the upstream's bearer
-- token (OUTBOX_SECRET_...), never the token.
--
-- Locks: ALTER TABLE outbox.mcp_tools takes an ACCESS EXCLUSIVE lock on
-- outbox.mcp_tools while the constraint checks its rows (a table of tools:
-- a few rows; the new column has a constant default, so no rewrite).
-- Relays do not read the column; front doors of 0.1.0 and of 0044 keep
-- making every tool an intent (they never call the new function).

ALTER TABLE outbox.mcp_tools
    ADD COLUMN passthrough boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT mcp_tools_passthrough_read_only CHECK (NOT passthrough OR NOT destructive);

COMMENT ON COLUMN outbox.mcp_tools.passthrough IS
    'A read-only tool (destructive false) of an mcp target that the front door calls straight through: no intent, no key, no saved outcome (0045).';

CREATE FUNCTION outbox.mcp_tools_passthrough() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT NEW.passthrough THEN
        RETURN NEW;
    END IF;
    IF NEW.destructive THEN
        RAISE EXCEPTION 'outbox.mcp_tools: tool % cannot be passthrough: it is destructive (only a read-only tool, destructive false, is called without an intent)',
                        quote_literal(NEW.tool)
            USING ERRCODE = 'OR020';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM outbox.targets t WHERE t.name = NEW.target AND t.protocol = 'mcp') THEN
        RAISE EXCEPTION 'outbox.mcp_tools: tool % cannot be passthrough: its target % is not an mcp target',
                        quote_literal(NEW.tool), quote_literal(NEW.target)
            USING ERRCODE = 'OR020';
    END IF;
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION outbox.mcp_tools_passthrough() FROM PUBLIC;

CREATE TRIGGER mcp_tools_passthrough
    BEFORE INSERT OR UPDATE ON outbox.mcp_tools
    FOR EACH ROW EXECUTE FUNCTION outbox.mcp_tools_passthrough();

CREATE FUNCTION outbox.mcp_passthrough(p_token_hash bytea, p_tool text)
RETURNS TABLE (client text, tool text, target text, upstream_tool text, url text,
               mcp_version text, auth_secret text, timeout_ms integer, headers jsonb,
               http_version text, ca_file text, client_cert_file text, client_key_file text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT c.name, m.tool, m.target, coalesce(m.upstream_tool, m.tool), t.url, t.mcp_version,
           t.auth_secret, t.timeout_ms, t.headers, t.http_version, t.ca_file,
           t.client_cert_file, t.client_key_file
      FROM outbox.mcp_clients c
      JOIN outbox.mcp_tools m
        ON m.tool = p_tool AND m.enabled AND m.passthrough AND NOT m.destructive
       AND (c.tools IS NULL OR m.tool = ANY (c.tools))
      JOIN outbox.targets t ON t.name = m.target AND t.enabled AND t.protocol = 'mcp'
     WHERE c.token_hash = p_token_hash
$$;

COMMENT ON FUNCTION outbox.mcp_passthrough(bytea, text) IS
    'The MCP front door''s look-up of a passthrough tool (0045): the target''s address and settings for a call with no intent; auth_secret is the name of the variable, never the token. No row: not passthrough, or not this client''s.';

REVOKE ALL ON FUNCTION outbox.mcp_passthrough(bytea, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox.mcp_passthrough(bytea, text) TO outbox_mcp;
