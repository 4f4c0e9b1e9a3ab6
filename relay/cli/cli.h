/*
 * cli.h — the operator commands: status, stuck, approvals, resolve, approve, reject,
 * cancel, retry, targets, prune, redrive; and mcp-import (mcp_import.h). Thin over
 * the SQL functions (schema/outbox/functions/: outcome, resolve, cancel, retry_now,
 * ...); the database decides, the CLI shows and maps the answer to an exit code.
 *
 * Exit codes (a contract for scripts; --help lists them too):
 *   0  ok (stuck with nothing stuck is ok)
 *   1  database or connection error (also: permission denied, output not written);
 *      mcp-import: the upstream's tools could not be read
 *   2  usage error: bad command line, or an argument the database rejects (SQLSTATE 22023);
 *      mcp-import: the target is not an mcp target
 *   3  no such key (SQLSTATE OR008); mcp-import: no such target
 *   4  refused: the intent is in the wrong state, or the action is not safe (SQLSTATE OR007)
 *
 * Errors go to stderr as "outbox-relay COMMAND: MESSAGE"; stdout then stays
 * empty, also with --json.
 */
#ifndef OUTBOX_CLI_H
#define OUTBOX_CLI_H

#include <stdbool.h>

enum cli_exit {
    CLI_EXIT_OK = 0,
    CLI_EXIT_DATABASE = 1,
    CLI_EXIT_USAGE = 2,
    CLI_EXIT_NO_SUCH_KEY = 3,
    CLI_EXIT_REFUSED = 4,
};

/* True if name is one of the operator commands. */
bool cli_is_command(const char *name);

/* Runs an operator command. argv holds what follows the command: its
 * positional arguments and flags, and the shared options of config_load
 * (--db, ...). Returns the process exit code (enum cli_exit). */
int cli_run(const char *command, int argc, char **argv);

#endif
