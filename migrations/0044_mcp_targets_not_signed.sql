-- 0044: an MCP target is not signed, and says so (issue 36, item 7).
--
-- An HTTP target's secret_env signs each webhook delivery (an HMAC of the
-- timestamp and body in a header, relay/targets.c) for receivers that
-- verify it. An MCP target's calls were never signed: the relay builds an
-- MCP call's headers itself (relay/deliver.c:delivery_mcp_prepare), and a
-- secret_env on such a target was accepted and silently did nothing. It is
-- not added, on purpose:
--   - an MCP server authenticates its client by the transport's
--     Authorization bearer token (the MCP authorization spec, OAuth 2.1),
--     which auth_secret already sends on every request; no MCP SDK or
--     server verifies a webhook-style body signature, so it would be bytes
--     no one reads;
--   - integrity on the wire is TLS's (an https url, ca_file, client_cert
--     for mutual TLS), as for any MCP client;
--   - our own front door, the one MCP upstream that could learn to verify
--     it, authenticates its callers by token too.
-- So a secret_env on an 'mcp' target is refused (constraint
-- targets_mcp_not_signed), rather than letting an operator believe the
-- calls are signed.
--
-- Locks: ALTER TABLE outbox.targets ADD CONSTRAINT ... NOT VALID takes an
-- ACCESS EXCLUSIVE lock on outbox.targets for an instant (no scan: rows
-- already there are not checked; a row that breaks it can still be read and
-- delivered, and must drop its secret_env at its next UPDATE). The relays
-- of 0.1.0 and of 0041 read targets as before.

ALTER TABLE outbox.targets
    ADD CONSTRAINT targets_mcp_not_signed CHECK (protocol = 'http' OR secret_env IS NULL) NOT VALID;

