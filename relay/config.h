/*
 * config.h — every option of outbox-relay in one table: flag, environment
 * variable, default, validation and the line --help prints.
 *
 * Precedence: flag over OUTBOX_RELAY_<NAME> over default. The connection
 * string also comes from DATABASE_URL, and when none is given libpq's own
 * PG* variables apply.
 */
#ifndef OUTBOX_CONFIG_H
#define OUTBOX_CONFIG_H

#include <stdbool.h>
#include <stdio.h>

struct config {
    char *db;                     /* libpq conninfo or URL; "" = libpq environment */
    char *databases;              /* --databases FILE: the databases to serve; "" = --db alone */
    char *database;               /* --database NAME: one line of that file, as --db */
    char *relay_id;               /* lease owner name; default host:pid */
    char *migrations_dir;         /* for migrate */
    char *role_prefix;            /* migrate: first install's role prefix; "" = none/recorded */
    char *admin_listen;           /* host:port of the admin HTTP port; "" = off */
    char *admin_token_file;       /* bearer token for the admin port's /metrics, /v1/; "" = none */
    char *admin_hosts;            /* more Host names the admin port answers (comma-separated) */
    char *log_level;              /* debug|info|warn|error */
    int batch_size;               /* rows per claim */
    int max_in_flight;            /* deliveries in flight, all targets */
    int max_in_flight_per_target; /* cap per target (also capped by targets.max_in_flight) */
    int poll_interval_ms;         /* fallback poll while idle */
    int lease_ms;                 /* lease length; renewed while a delivery runs */
    int grace_ms;                 /* SIGTERM: how long in-flight deliveries may finish */
    int reconnect_max_ms;         /* cap of the database reconnect back-off */
    int connect_timeout_ms;       /* database connect deadline */
    int query_timeout_ms;         /* deadline of one database round trip */
    int max_response_bytes;       /* bounded copy of a response body */
    int targets_refresh_ms;       /* how often targets are reloaded */
    int prune_interval_ms;        /* retention run period; 0 = off */
    int prune_batch;              /* intents per prune transaction */
    char *ca_file;                /* CAs for targets without their own ca_file; "" = system store */
    bool exit_when_idle;          /* exit 0 once nothing is due or in flight (demo, tests) */
    char *mcp_listen;             /* mcp: host:port of POST /mcp */
    int mcp_wait_ms;              /* mcp: a call's wait for its outcome */
    char *mcp_hosts;              /* mcp: more Host names answered (comma-separated) */
    char *mcp_origins;            /* mcp: Origins allowed (comma-separated) */
    int mcp_db_connections;       /* mcp: database connections */
    int mcp_memory_bytes;         /* mcp: parsed requests and waiting calls, all clients */
    int mcp_client_memory_bytes;  /* mcp: the same, one client */
    int mcp_client_calls;         /* mcp: requests of one client in flight */
    int mcp_max_connections;      /* mcp: open connections */
    int mcp_header_timeout_ms;    /* mcp: accept → the first request's headers */
    bool mcp_stdio;               /* mcp: one client on stdin/stdout instead of --mcp-listen */
    char *mcp_resource;           /* mcp: the front door's public URL (OAuth's resource, aud) */
    char *mcp_oauth_issuer;       /* mcp: the authorization server; "" = OAuth off */
    char *mcp_oauth_jwks;         /* mcp: the issuer's JWKS URL */
    char *mcp_oauth_scope;        /* mcp: scopes a token must carry (space-separated) */
    char *mcp_oauth_client_claim; /* mcp: the claim naming the client; "" = client_id, azp, sub */
};

enum config_result { CONFIG_OK, CONFIG_HELP, CONFIG_ERROR };

/* Fills cfg from argv (after the subcommand) and the environment. On error
 * prints a message naming the option to stderr. */
enum config_result config_load(struct config *cfg, int argc, char **argv);
void config_free(struct config *cfg);
/* A command that works on one database (mcp, the CLI's) given --databases
 * without --database: says so on stderr and returns true. */
bool config_needs_one_database(const struct config *cfg, const char *command);
void config_print_help(FILE *out);

#endif
