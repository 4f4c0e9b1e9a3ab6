/*
 * mcp_server.h — `outbox-relay mcp`: the MCP front door as a process.
 *
 * POST /mcp on --mcp-listen: an agent's tools/call becomes a keyed intent
 * (outbox.mcp_call) and is answered with its outcome, or with what is known
 * when --mcp-wait-ms ends ("outcome unknown, reconciling: …"). Also
 * /healthz, /readyz and /metrics on the same port. Stateless: everything it
 * knows is in PostgreSQL; it enqueues and waits, relays deliver. With
 * --stdio, one client (OUTBOX_MCP_TOKEN) on stdin and stdout instead of a
 * port (mcp_stdio_session.c).
 */
#ifndef OUTBOX_MCP_SERVER_H
#define OUTBOX_MCP_SERVER_H

#include "config.h"

/* Runs until SIGTERM or SIGINT (with --stdio also the end of stdin); the
 * exit code (0; 1 when the port could not be opened, or, with --stdio, the
 * token is no client's; 2 when --stdio has no token). */
int mcp_server_run(const struct config *cfg);

#endif
