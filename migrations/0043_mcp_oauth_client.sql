-- 0043: the MCP front door as an OAuth resource server (issue 37, item 3).
--
-- Every outbox.mcp_* function the front door calls authenticates a client by
-- the SHA-256 of its static bearer token. A host that signs in with OAuth
-- brings a JWT instead: the front door checks its signature against the
-- issuer's JWKS and its claims (relay/mcp/oauth.c), and the token names the
-- client (outbox.mcp_clients.name). This function gives the front door that
-- client's row: its name and the hash its statements then authenticate
-- with, so the tools a client may use, its keys' namespace and its tasks are
-- the same whichever way it signed in, and every other function is
-- unchanged. An OAuth-only client is created as any other
-- (outbox.mcp_client with a random token nobody keeps).
--
-- What it grants: outbox_mcp could already act as a client it held a token
-- for; with this it can act as any client by name. That is what a resource
-- server is (it decides who a verified token belongs to): the front door's
-- login must be kept as a credential of every client, which deploy/README.md
-- already asks. Deleting a client's row stops its OAuth tokens within the
-- front door's verdict cache (5 s), as for static tokens.
--
-- Locks: none (a new function). Relays and front doors of 0.1.0 and of 0039
-- do not call it.

CREATE FUNCTION outbox.mcp_oauth_client(p_name text)
RETURNS TABLE (client text, token_hash bytea)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT c.name, c.token_hash FROM outbox.mcp_clients c WHERE c.name = p_name
$$;

COMMENT ON FUNCTION outbox.mcp_oauth_client(text) IS
    'The MCP front door''s look-up of the client an OAuth access token names (0043): its name and the hash its statements authenticate with.';

REVOKE ALL ON FUNCTION outbox.mcp_oauth_client(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox.mcp_oauth_client(text) TO outbox_mcp;
