/*
 * mcp_import.h — outbox-relay mcp-import TARGET [--prefix P] [--only a,b]
 * [--passthrough-readonly]:
 * registers the tools of an upstream MCP server (an 'mcp' target) in
 * outbox.mcp_tools. See mcp_import.c.
 */
#ifndef OUTBOX_MCP_IMPORT_H
#define OUTBOX_MCP_IMPORT_H

#include <libpq-fe.h>
#include <stdbool.h>

/* prefix NULL: "TARGET."; only NULL: every tool, else a comma-separated list
 * of the upstream's names. passthrough_ro: --passthrough-readonly. ca_file: the relay's --ca-file
 * (NULL or "": the system store). Returns a process exit code (enum cli_exit): non-zero only when
 * nothing could be read (no such target, not mcp, the upstream's tools/list unreadable). */
int mcp_import_run(PGconn *conn, const char *target, const char *prefix, const char *only,
                   bool passthrough_ro, const char *ca_file);

#endif
