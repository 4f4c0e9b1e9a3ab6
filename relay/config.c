/*
 * config.c — the option table and its parser.
 *
 * One table (PgBouncer-style): adding an option means adding one row, and
 * --help, the environment variable and the validation come with it. Values
 * are validated at start-up; a bad value stops the relay with a message that
 * names the flag and the variable, never later at run time.
 */
#include "config.h"
#include "databases.h"
#include "lib/http_server.h"
#include "lib/log.h"
#include "lib/xalloc.h"
#include "mcp/oauth.h"

#include <arpa/inet.h>

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum option_type { OPT_STRING, OPT_INT, OPT_BOOL };

struct option_def {
    const char *name; /* flag without dashes; env var is OUTBOX_RELAY_ + upper(name) */
    enum option_type type;
    size_t offset;
    const char *default_value;
    long min, max; /* for OPT_INT */
    const char *doc;
};

#define OPT(name, type, field, def, min, max, doc)                                                 \
    {                                                                                              \
        name, type, offsetof(struct config, field), def, min, max, doc                             \
    }

static const struct option_def options[] = {
    OPT("db", OPT_STRING, db, "", 0, 0,
        "PostgreSQL connection string or URL (also DATABASE_URL; else libpq's PG* variables)"),
    OPT("databases", OPT_STRING, databases, "", 0, 0,
        "a file of databases to serve, 'NAME connection-string' a line (run: all of them, "
        "re-read on SIGHUP; migrate: one after another; other commands: the one of --database)"),
    OPT("database", OPT_STRING, database, "", 0, 0,
        "the NAME of one line of --databases: that database alone, as --db would"),
    OPT("relay-id", OPT_STRING, relay_id, "", 0, 0,
        "name of this relay in leases and logs (default: hostname:pid)"),
    OPT("migrations-dir", OPT_STRING, migrations_dir, "", 0, 0,
        "directory of NNNN_*.sql files for migrate (default: the first of ../migrations, "
        "../../migrations and ../share/outbox-relay/migrations beside the binary, else "
        "/usr/share/outbox-relay/migrations)"),
    OPT("role-prefix", OPT_STRING, role_prefix, "", 0, 0,
        "migrate, first install only: this database's group roles are PREFIX_outbox_app, "
        "PREFIX_outbox_relay, ... instead of outbox_app, ... (recorded; a later migrate may "
        "repeat it, not change it); [a-z][a-z0-9_]*, at most 40 characters"),
    OPT("admin-listen", OPT_STRING, admin_listen, "127.0.0.1:9464", 0, 0,
        "host:port of the admin HTTP port (health, readiness, metrics, status API); empty = off"),
    OPT("admin-hosts", OPT_STRING, admin_hosts, "", 0, 0,
        "comma-separated host names the admin port answers besides IP addresses and "
        "localhost (a Host outside them gets 403: DNS rebinding), e.g. the Service's name"),
    OPT("admin-token-file", OPT_STRING, admin_token_file, "", 0, 0,
        "file holding a bearer token that /metrics, /v1/ and /ui of the admin port then require "
        "(read at start; /healthz and /readyz stay open); empty = no token"),
    OPT("log-level", OPT_STRING, log_level, "info", 0, 0, "debug, info, warn or error"),
    OPT("batch-size", OPT_INT, batch_size, "256", 1, 10000, "rows claimed per claim statement"),
    OPT("max-in-flight", OPT_INT, max_in_flight, "1024", 1, 100000,
        "deliveries in flight at once, all targets together"),
    OPT("max-in-flight-per-target", OPT_INT, max_in_flight_per_target, "1024", 1, 100000,
        "deliveries in flight per target (targets.max_in_flight caps it too)"),
    OPT("poll-interval-ms", OPT_INT, poll_interval_ms, "2000", 10, 3600000,
        "fallback poll for due rows while idle (NOTIFY wakes the relay sooner)"),
    OPT("lease-ms", OPT_INT, lease_ms, "30000", 1000, 3600000,
        "lease on a claimed row; renewed while its delivery runs; expiry = relay presumed dead"),
    OPT("grace-ms", OPT_INT, grace_ms, "20000", 0, 3600000,
        "on SIGTERM/SIGINT, how long in-flight deliveries may finish"),
    OPT("reconnect-max-ms", OPT_INT, reconnect_max_ms, "5000", 100, 600000,
        "cap of the exponential back-off between database reconnects"),
    OPT("connect-timeout-ms", OPT_INT, connect_timeout_ms, "5000", 100, 600000,
        "deadline for one database connection attempt"),
    OPT("query-timeout-ms", OPT_INT, query_timeout_ms, "30000", 1000, 3600000,
        "deadline for one database round trip; past it the connection is re-made (a claim "
        "answered after half of --lease-ms gives its rows back unsent)"),
    OPT("max-response-bytes", OPT_INT, max_response_bytes, "65536", 0, 16777216,
        "bytes of a response body kept (the rest is discarded)"),
    OPT("targets-refresh-ms", OPT_INT, targets_refresh_ms, "10000", 100, 3600000,
        "how often outbox.targets is reloaded"),
    OPT("prune-interval-ms", OPT_INT, prune_interval_ms, "60000", 0, 86400000,
        "how often the relay prunes final intents past their target's retain_for (one relay at "
        "a time); 0 = never (a CronJob runs outbox-relay prune)"),
    OPT("prune-batch", OPT_INT, prune_batch, "5000", 1, 100000,
        "intents pruned per transaction by a prune (the relay's and outbox-relay prune's)"),
    OPT("ca-file", OPT_STRING, ca_file, "", 0, 0,
        "PEM bundle of the CAs that verify targets' certificates, for targets without their own "
        "ca_file; empty = the system store (verification is always on)"),
    OPT("exit-when-idle", OPT_BOOL, exit_when_idle, "false", 0, 0,
        "exit 0 once nothing is due or in flight (for demos and batch runs)"),
    OPT("mcp-listen", OPT_STRING, mcp_listen, "127.0.0.1:9465", 0, 0,
        "mcp: host:port of the MCP front door (POST /mcp; also /healthz, /readyz, /metrics)"),
    OPT("mcp-wait-ms", OPT_INT, mcp_wait_ms, "20000", 0, 55000,
        "mcp: how long a tools/call waits for the outcome before it answers with the status "
        "(the official SDKs give up at 60 s)"),
    OPT("mcp-hosts", OPT_STRING, mcp_hosts, "", 0, 0,
        "mcp: comma-separated host names the front door answers besides its listen address "
        "and loopback names (a Host outside them gets 403: DNS rebinding)"),
    OPT("mcp-origins", OPT_STRING, mcp_origins, "", 0, 0,
        "mcp: comma-separated Origin values allowed besides loopback ones (a request with "
        "another Origin gets 403)"),
    OPT("mcp-db-connections", OPT_INT, mcp_db_connections, "4", 1, 64,
        "mcp: database connections of the front door (each runs one statement at a time)"),
    OPT("mcp-memory-bytes", OPT_INT, mcp_memory_bytes, "20971520", 1048576, 1073741824,
        "mcp: memory that parsed requests and waiting calls of all clients may hold together "
        "(a parsed body is charged what jansson will take for it, a waiting call its arguments); "
        "bodies being read get a quarter of it more; past it 503 with Retry-After. Size it "
        "from the memory limit (deploy/README.md)"),
    OPT("mcp-client-memory-bytes", OPT_INT, mcp_client_memory_bytes, "10485760", 65536, 1073741824,
        "mcp: the share of --mcp-memory-bytes one client (token) may hold, bodies being read "
        "included; past it 429 with Retry-After, and a request that alone needs more gets 413"),
    OPT("mcp-client-calls", OPT_INT, mcp_client_calls, "128", 1, 100000,
        "mcp: requests of one client in flight at once (waiting calls included); past it 429 "
        "with Retry-After. The database connections serve the clients in turn"),
    OPT("mcp-max-connections", OPT_INT, mcp_max_connections, "256", 1, 100000,
        "mcp: open connections; a new one past it evicts the oldest that has sent nothing, else "
        "the oldest idle one, else is refused (outbox_mcp_connections_shed_total)"),
    OPT("mcp-header-timeout-ms", OPT_INT, mcp_header_timeout_ms, "10000", 100, 600000,
        "mcp: a new connection must send its first request's headers within this; the body "
        "then gets 30 s, and a keep-alive connection waits 30 s for its next request"),
    OPT("stdio", OPT_BOOL, mcp_stdio, "false", 0, 0,
        "mcp: serve one client on stdin/stdout (newline-delimited JSON-RPC, the MCP stdio "
        "transport) instead of --mcp-listen; its token in OUTBOX_MCP_TOKEN; exits on end of "
        "input"),
    OPT("mcp-resource", OPT_STRING, mcp_resource, "", 0, 0,
        "mcp: the front door's public URL as hosts reach it, e.g. https://mcp.example.com/mcp: "
        "OAuth's resource (a token's aud must be it) and the base of its metadata address"),
    OPT("mcp-oauth-issuer", OPT_STRING, mcp_oauth_issuer, "", 0, 0,
        "mcp: the OAuth authorization server whose JWT access tokens are accepted (their iss; "
        "published in /.well-known/oauth-protected-resource); empty = OAuth off, static tokens "
        "only (they keep working beside OAuth)"),
    OPT("mcp-oauth-jwks", OPT_STRING, mcp_oauth_jwks, "", 0, 0,
        "mcp: the issuer's JWKS URL (https; plain http only to a loopback address), fetched at "
        "start, every 5 minutes, and for an unknown kid at most once a minute"),
    OPT("mcp-oauth-scope", OPT_STRING, mcp_oauth_scope, "", 0, 0,
        "mcp: space-separated scopes a token must carry (scope or scp claim; else 403), named "
        "in the 401 challenge and the metadata; empty = none required"),
    OPT("mcp-oauth-client-claim", OPT_STRING, mcp_oauth_client_claim, "", 0, 0,
        "mcp: the token claim that names the client (outbox.mcp_clients.name); empty = "
        "client_id, else azp, else sub"),
};

#define OPTION_COUNT (sizeof(options) / sizeof(options[0]))

static void env_name_of(const struct option_def *opt, char *buf, size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "OUTBOX_RELAY_");
    for (const char *p = opt->name; *p && n + 1 < size; p++)
        buf[n++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
    buf[n] = '\0';
}

static bool parse_bool(const char *text, bool *out)
{
    if (!strcmp(text, "1") || !strcmp(text, "true") || !strcmp(text, "yes") || !strcmp(text, "on"))
        *out = true;
    else if (!strcmp(text, "0") || !strcmp(text, "false") || !strcmp(text, "no") ||
             !strcmp(text, "off"))
        *out = false;
    else
        return false;
    return true;
}

/* Stores value into cfg; on a bad value prints which option and why. */
static bool set_option(struct config *cfg, const struct option_def *opt, const char *value,
                       const char *source)
{
    char *field = (char *)cfg + opt->offset;
    char env[64];
    env_name_of(opt, env, sizeof(env));
    switch (opt->type) {
    case OPT_STRING: {
        char **slot = (char **)(void *)field;
        free(*slot);
        *slot = xstrdup(value);
        return true;
    }
    case OPT_INT: {
        char *end = NULL;
        errno = 0;
        long n = strtol(value, &end, 10);
        if (errno != 0 || end == value || *end != '\0' || n < opt->min || n > opt->max) {
            fprintf(stderr,
                    "outbox-relay: invalid value '%s' for --%s (%s, from %s): expected an integer "
                    "from %ld to %ld\n",
                    value, opt->name, env, source, opt->min, opt->max);
            return false;
        }
        *(int *)(void *)field = (int)n;
        return true;
    }
    case OPT_BOOL: {
        if (!parse_bool(value, (bool *)(void *)field)) {
            fprintf(stderr,
                    "outbox-relay: invalid value '%s' for --%s (%s, from %s): expected true or "
                    "false\n",
                    value, opt->name, env, source);
            return false;
        }
        return true;
    }
    }
    return false;
}

static const struct option_def *find_option(const char *name, size_t len)
{
    for (size_t i = 0; i < OPTION_COUNT; i++)
        if (strlen(options[i].name) == len && strncmp(options[i].name, name, len) == 0)
            return &options[i];
    return NULL;
}

void config_print_help(FILE *out)
{
    fprintf(
        out,
        "usage: outbox-relay COMMAND [ARGUMENTS] [OPTIONS]\n\n"
        "commands:\n"
        "  run       run the relay: claim due intents, deliver them, record outcomes\n"
        "  migrate   apply pending files of migrations/ (advisory lock, checksums)\n"
        "  mcp       the MCP front door: agents' tools/call become keyed intents (POST /mcp\n"
        "            on --mcp-listen); it enqueues and waits, relays deliver\n"
        "  version   print the version\n\n"
        "operator commands (aligned text; --json prints one JSON document on stdout):\n"
        "  status KEY                          the outcome of a key (outbox.outcome), and why it\n"
        "                                      is not succeeding: the row's last error, the next\n"
        "                                      attempt, the last one's class, HTTP status, error\n"
        "  stuck                               keys that need a look (outbox.stuck)\n"
        "  approvals                           intents awaiting approval: target, age, the rule\n"
        "                                      and why it holds each (outbox.approvals)\n"
        "  resolve KEY succeeded|failed --note TEXT\n"
        "                                      settle an unknown outcome, with the evidence\n"
        "  approve KEY --by NAME               release an intent awaiting approval\n"
        "  reject KEY --by NAME --reason TEXT  cancel an intent awaiting approval\n"
        "  cancel KEY [--reason TEXT]          cancel an intent the target never acted\n"
        "                                      on (never sent, or refused with a 4xx)\n"
        "  retry KEY [--by NAME]               send now, only where safe: pending; unknown on a\n"
        "                                      target that honours keys, within its key_ttl;\n"
        "                                      failed with no attempt that may have executed\n"
        "  targets                             the registered targets (never a secret value)\n"
        "  prune [--dry-run]                   remove final intents past their target's\n"
        "                                      retain_for now (keys stay remembered for\n"
        "                                      dedupe_window); --dry-run lists what would go\n"
        "  redrive --target NAME --since TIME --until TIME [--limit N] [--by NAME] [--dry-run]\n"
        "                                      send again the target's failed intents settled in\n"
        "                                      [since, until) (e.g. 2026-03-01T09:00:00Z) that no\n"
        "                                      attempt may have executed; --dry-run lists them\n"
        "  mcp-import TARGET [--prefix P] [--only NAME,NAME] [--passthrough-readonly]\n"
        "                                      register the tools of the upstream MCP server of\n"
        "                                      'mcp' target TARGET in outbox.mcp_tools as P+name\n"
        "                                      (P default 'TARGET.'); run again: updates, "
        "disables\n"
        "                                      what the upstream dropped; one line per tool;\n"
        "                                      needs outbox_admin; exit 0 unless nothing could\n"
        "                                      be read (3: no such target, 2: not mcp);\n"
        "                                      --passthrough-readonly: the tools whose\n"
        "                                      readOnlyHint is true are called straight through\n"
        "                                      by the front door, with no intent\n"
        "  exit codes: 0 ok, 1 database or connection error, 2 usage error, 3 no such key,\n"
        "  4 refused (wrong state, or not safe); errors go to stderr\n\n"
        "options (every option also reads OUTBOX_RELAY_<NAME>):\n");
    for (size_t i = 0; i < OPTION_COUNT; i++) {
        char env[64];
        env_name_of(&options[i], env, sizeof(env));
        char flag[64];
        snprintf(flag, sizeof(flag), "--%s%s", options[i].name,
                 options[i].type == OPT_BOOL ? "" : "=VALUE");
        fprintf(out, "  %-34s %s\n  %-34s env %s, default '%s'\n", flag, options[i].doc, "", env,
                options[i].default_value);
    }
}

static bool is_blank(const char *s)
{
    return s == NULL || *s == '\0';
}

/* Defaults, then DATABASE_URL, then every OUTBOX_RELAY_<NAME>. */
static bool config_read_environment(struct config *cfg)
{
    for (size_t i = 0; i < OPTION_COUNT; i++)
        if (!set_option(cfg, &options[i], options[i].default_value, "default"))
            return false;
    const char *url = getenv("DATABASE_URL");
    if (!is_blank(url) && !set_option(cfg, find_option("db", 2), url, "DATABASE_URL"))
        return false;
    for (size_t i = 0; i < OPTION_COUNT; i++) {
        char env[64];
        env_name_of(&options[i], env, sizeof(env));
        const char *value = getenv(env);
        if (value != NULL && !set_option(cfg, &options[i], value, env))
            return false;
    }
    return true;
}

/* --name=value, --name value, or --switch; --help. */
static enum config_result config_read_arguments(struct config *cfg, int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h"))
            return CONFIG_HELP;
        if (strncmp(arg, "--", 2) != 0) {
            fprintf(stderr, "outbox-relay: unexpected argument '%s' (see --help)\n", arg);
            return CONFIG_ERROR;
        }
        const char *name = arg + 2;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const struct option_def *opt = find_option(name, len);
        if (opt == NULL) {
            fprintf(stderr, "outbox-relay: unknown option '%.*s' (see --help)\n", (int)len + 2,
                    arg);
            return CONFIG_ERROR;
        }
        const char *value;
        if (eq != NULL)
            value = eq + 1;
        else if (opt->type == OPT_BOOL)
            value = "true";
        else if (i + 1 < argc)
            value = argv[++i];
        else {
            fprintf(stderr, "outbox-relay: option --%s needs a value\n", opt->name);
            return CONFIG_ERROR;
        }
        if (!set_option(cfg, opt, value, "command line"))
            return CONFIG_ERROR;
    }
    return CONFIG_OK;
}

/* A role prefix: a lower-case letter, then lower-case letters, digits and
 * '_', at most 40 (the longest role, PREFIX_outbox_operator, stays within
 * PostgreSQL's 63 bytes and needs no quoting); empty: none. */
static bool config_role_prefix_valid(const char *prefix)
{
    size_t len = strlen(prefix);
    if (len == 0)
        return true;
    if (len > 40 || prefix[0] < 'a' || prefix[0] > 'z')
        return false;
    for (size_t i = 1; i < len; i++) {
        char c = prefix[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
            return false;
    }
    return true;
}

static bool config_check_oauth(const struct config *cfg);

/* The values whose check needs more than a range: the log level (applied
 * here), the admin port's address, --ca-file (readable at start) and
 * --role-prefix. */

static bool config_check(const struct config *cfg)
{
    log_level_t level;
    if (!log_level_parse(cfg->log_level, &level)) {
        fprintf(stderr,
                "outbox-relay: invalid value '%s' for --log-level (OUTBOX_RELAY_LOG_LEVEL): "
                "expected debug, info, warn or error\n",
                cfg->log_level);
        return false;
    }
    log_set_level(level);
    struct sockaddr_storage admin_address;
    const char *admin_problem =
        is_blank(cfg->admin_listen) ? NULL : httpd_parse_listen(cfg->admin_listen, &admin_address);
    if (admin_problem) {
        fprintf(stderr,
                "outbox-relay: invalid value '%s' for --admin-listen (OUTBOX_RELAY_ADMIN_LISTEN): "
                "%s; expected host:port, e.g. 127.0.0.1:9464\n",
                cfg->admin_listen, admin_problem);
        return false;
    }
    if (!is_blank(cfg->ca_file) && (cfg->ca_file[0] != '/' || access(cfg->ca_file, R_OK) != 0)) {
        fprintf(stderr,
                "outbox-relay: invalid value '%s' for --ca-file (OUTBOX_RELAY_CA_FILE): expected "
                "the absolute path of a readable PEM file\n",
                cfg->ca_file);
        return false;
    }
    if (!config_check_oauth(cfg))
        return false;
    if (!config_role_prefix_valid(cfg->role_prefix)) {
        fprintf(stderr,
                "outbox-relay: invalid value '%s' for --role-prefix (OUTBOX_RELAY_ROLE_PREFIX): "
                "expected a lower-case letter, then lower-case letters, digits or '_', at most "
                "40 in all, e.g. acme\n",
                cfg->role_prefix);
        return false;
    }
    struct sockaddr_storage mcp_address;
    const char *mcp_problem =
        is_blank(cfg->mcp_listen) ? "empty" : httpd_parse_listen(cfg->mcp_listen, &mcp_address);
    if (mcp_problem) {
        fprintf(stderr,
                "outbox-relay: invalid value '%s' for --mcp-listen (OUTBOX_RELAY_MCP_LISTEN): "
                "%s; expected host:port, e.g. 127.0.0.1:9465\n",
                cfg->mcp_listen, mcp_problem);
        return false;
    }
    return true;
}

/* http://HOST… with HOST a loopback address (tests run the JWKS on one). */
static bool url_is_loopback_http(const char *url)
{
    if (strncmp(url, "http://", 7) != 0)
        return false;
    const char *host = url + 7;
    size_t n = strcspn(host, "/?#");
    char h[80];
    if (n == 0 || n >= sizeof(h) || memchr(host, '@', n))
        return false;
    memcpy(h, host, n);
    h[n] = '\0';
    if (h[0] == '[') {
        char *end = strchr(h, ']');
        return end && end - h == 4 && !strncmp(h, "[::1]", 5);
    }
    char *colon = strchr(h, ':');
    if (colon)
        *colon = '\0';
    struct in_addr a;
    return !strcmp(h, "localhost") ||
           (inet_pton(AF_INET, h, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127);
}

static bool resource_ok(const char *resource)
{
    char *url = oauth_metadata_url(resource);
    free(url);
    return url != NULL;
}

/* RFC 6749's scope-token: %x21 / %x23-5B / %x5D-7E, separated by spaces
 * (it is quoted in WWW-Authenticate). */
static bool scope_ok(const char *scope)
{
    for (const unsigned char *p = (const unsigned char *)scope; *p; p++)
        if (*p != ' ' && (*p < 0x21 || *p > 0x7e || *p == '"' || *p == '\\'))
            return false;
    return true;
}

static bool config_check_oauth(const struct config *cfg)
{
    bool on = !is_blank(cfg->mcp_oauth_issuer);
    const char *problem = NULL;
    if (!on && (!is_blank(cfg->mcp_oauth_jwks) || !is_blank(cfg->mcp_oauth_scope) ||
                !is_blank(cfg->mcp_oauth_client_claim)))
        problem = "--mcp-oauth-jwks, --mcp-oauth-scope and --mcp-oauth-client-claim need "
                  "--mcp-oauth-issuer (OUTBOX_RELAY_MCP_OAUTH_ISSUER)";
    else if (on && is_blank(cfg->mcp_resource))
        problem = "--mcp-oauth-issuer needs --mcp-resource (OUTBOX_RELAY_MCP_RESOURCE), the "
                  "front door's public URL that tokens are issued for";
    else if (!is_blank(cfg->mcp_resource) && !resource_ok(cfg->mcp_resource))
        problem = "--mcp-resource (OUTBOX_RELAY_MCP_RESOURCE) must be an absolute http or https "
                  "URL without query or fragment, e.g. https://mcp.example.com/mcp";
    else if (!is_blank(cfg->mcp_oauth_scope) && !scope_ok(cfg->mcp_oauth_scope))
        problem = "--mcp-oauth-scope (OUTBOX_RELAY_MCP_OAUTH_SCOPE) must be scope tokens "
                  "separated by spaces (RFC 6749: printable ASCII without \" or \\)";
    else if (on && is_blank(cfg->mcp_oauth_jwks))
        problem = "--mcp-oauth-issuer needs --mcp-oauth-jwks (OUTBOX_RELAY_MCP_OAUTH_JWKS), the "
                  "issuer's JWKS URL";
    else if (on && strncmp(cfg->mcp_oauth_jwks, "https://", 8) != 0 &&
             !url_is_loopback_http(cfg->mcp_oauth_jwks))
        problem = "--mcp-oauth-jwks (OUTBOX_RELAY_MCP_OAUTH_JWKS) must be an https URL (plain "
                  "http only to a loopback address)";
    if (problem)
        fprintf(stderr, "outbox-relay: %s\n", problem);
    return problem == NULL;
}

/* --databases is read once here, so that a bad file stops any command at
 * start; with --database NAME, that line becomes --db (and its
 * OUTBOX_SECRET_ password libpq's PGPASSWORD, for this process only). */
static bool config_pick_database(struct config *cfg)
{
    if (is_blank(cfg->databases)) {
        if (is_blank(cfg->database))
            return true;
        fprintf(stderr, "outbox-relay: --database names a line of --databases, which is not set\n");
        return false;
    }
    struct database_list list = {0};
    char error[512];
    if (!databases_read(cfg->databases, &list, error, sizeof(error))) {
        fprintf(stderr, "outbox-relay: --databases (OUTBOX_RELAY_DATABASES): %s\n", error);
        return false;
    }
    bool ok = true;
    if (!is_blank(cfg->database)) {
        const struct database_line *line = databases_find(&list, cfg->database);
        if (line == NULL) {
            fprintf(stderr, "outbox-relay: --database %s: no such line in %s\n", cfg->database,
                    cfg->databases);
            ok = false;
        } else {
            free(cfg->db);
            cfg->db = xstrdup(line->conninfo);
            const char *secret = databases_secret(line->name);
            if (secret)
                setenv("PGPASSWORD", secret, 1);
        }
    }
    databases_free(&list);
    return ok;
}

enum config_result config_load(struct config *cfg, int argc, char **argv)
{
    memset(cfg, 0, sizeof(*cfg));
    if (!config_read_environment(cfg))
        return CONFIG_ERROR;
    enum config_result result = config_read_arguments(cfg, argc, argv);
    if (result != CONFIG_OK)
        return result;
    if (!config_check(cfg) || !config_pick_database(cfg))
        return CONFIG_ERROR;
    if (is_blank(cfg->relay_id)) {
        char host[256] = "relay";
        gethostname(host, sizeof(host) - 1);
        host[sizeof(host) - 1] = '\0';
        char id[300];
        snprintf(id, sizeof(id), "%s:%d", host, (int)getpid());
        free(cfg->relay_id);
        cfg->relay_id = xstrdup(id);
    }
    return CONFIG_OK;
}

bool config_needs_one_database(const struct config *cfg, const char *command)
{
    if (is_blank(cfg->databases) || !is_blank(cfg->database))
        return false;
    fprintf(stderr,
            "outbox-relay %s: works on one database: with --databases, name it with "
            "--database NAME\n",
            command);
    return true;
}

void config_free(struct config *cfg)
{
    for (size_t i = 0; i < OPTION_COUNT; i++) {
        if (options[i].type == OPT_STRING) {
            char **slot = (char **)(void *)((char *)cfg + options[i].offset);
            free(*slot);
            *slot = NULL;
        }
    }
}
