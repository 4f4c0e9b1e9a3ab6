/*
 * main.c — outbox-relay: command dispatch.
 *
 *   outbox-relay run       the relay daemon (relay.c)
 *   outbox-relay migrate   apply migrations (cli/migrate.c)
 *   outbox-relay mcp       the MCP front door (mcp/mcp_server.c)
 *   outbox-relay status|stuck|resolve|approve|reject|cancel|retry|targets
 *                          operator commands (cli.c; they parse their own arguments)
 *   outbox-relay mcp-import
 *                          register an upstream MCP server's tools (cli/mcp_import.c)
 *   outbox-relay version
 *
 * Exit codes: 0 success, 1 failure at run time, 2 bad usage or configuration;
 * the operator commands add 3 (no such key) and 4 (refused), see cli.h.
 */
#include "cli/cli.h"
#include "config.h"
#include "cli/migrate.h"
#include "deliver.h"
#include "mcp/mcp_server.h"
#include "relay.h"
#include "version.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        config_print_help(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *command = argv[1];
    if (!strcmp(command, "version") || !strcmp(command, "--version")) {
        printf("outbox-relay %s\n", OUTBOX_RELAY_VERSION);
        return 0;
    }
    if (cli_is_command(command))
        return cli_run(command, argc - 2, argv + 2);
    if (strcmp(command, "run") != 0 && strcmp(command, "migrate") != 0 &&
        strcmp(command, "mcp") != 0) {
        fprintf(stderr, "outbox-relay: unknown command '%s' (see --help)\n", command);
        return 2;
    }
    struct config cfg;
    enum config_result loaded = config_load(&cfg, argc - 2, argv + 2);
    if (loaded != CONFIG_OK) {
        if (loaded == CONFIG_HELP)
            config_print_help(stdout);
        config_free(&cfg);
        return loaded == CONFIG_HELP ? 0 : 2;
    }
    if (!strcmp(command, "mcp") && config_needs_one_database(&cfg, command)) {
        config_free(&cfg);
        return 2;
    }
    delivery_set_ca_file(cfg.ca_file); /* the pointer lives until config_free */
    int rc = !strcmp(command, "run")   ? relay_run(&cfg)
             : !strcmp(command, "mcp") ? mcp_server_run(&cfg)
                                       : migrate_run(&cfg);
    delivery_set_ca_file(NULL);
    config_free(&cfg);
    return rc;
}
