/*
 * mcp_server.h — `outbox-relay mcp`: the MCP front door as a process.
 *
 * POST /mcp on --mcp-listen: an agent's tools/call becomes a keyed intent
 * (outbox.mcp_call) and is answered with its outcome, or with what is known
 * when --mcp-wait-ms ends ("outcome unknown, reconciling: …"). Also
 * /healthz, /readyz and /metrics on the same port. Stateless: everything it
 * knows is in PostgreSQL; it enqueues and waits, relays deliver.
 */
#ifndef OUTBOX_MCP_SERVER_H
#define OUTBOX_MCP_SERVER_H

#include "config.h"

/* Runs until SIGTERM or SIGINT; the exit code (0, or 1 when the port could
 * not be opened). */
int mcp_server_run(const struct config *cfg);

#endif
