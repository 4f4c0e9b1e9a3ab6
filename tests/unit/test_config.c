/*
 * test_config.c — relay/config.h: defaults, flags, environment, precedence,
 * validation and the messages that name the bad option.
 *
 * Every test starts from an environment without DATABASE_URL and
 * OUTBOX_RELAY_* (checked fixture), and puts back what it sets. stderr is
 * captured around config_load so that error messages can be checked.
 */
#include "unit.h"

#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

#define ARGC(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---------------------------------------------------------------- helpers */

static void clean_environment(void)
{
    unsetenv("DATABASE_URL");
    /* collect first: unsetenv changes environ while we walk it */
    char *names[256];
    size_t count = 0;
    for (char **e = environ; *e && count < 256; e++) {
        if (strncmp(*e, "OUTBOX_RELAY_", 13) == 0) {
            const char *eq = strchr(*e, '=');
            size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
            names[count] = strndup(*e, len);
            count++;
        }
    }
    for (size_t i = 0; i < count; i++) {
        unsetenv(names[i]);
        free(names[i]);
    }
}

/* stderr of the last load_captured call */
static char captured[8192];

/* config_load with stderr redirected into `captured`. */
static enum config_result load_captured(struct config *cfg, int argc, char **argv)
{
    captured[0] = '\0';
    fflush(stderr);
    FILE *tmp = tmpfile();
    ck_assert_ptr_nonnull(tmp);
    int saved = dup(STDERR_FILENO);
    ck_assert_int_ge(saved, 0);
    ck_assert_int_ge(dup2(fileno(tmp), STDERR_FILENO), 0);

    enum config_result res = config_load(cfg, argc, argv);

    fflush(stderr);
    ck_assert_int_ge(dup2(saved, STDERR_FILENO), 0);
    close(saved);
    rewind(tmp);
    size_t n = fread(captured, 1, sizeof(captured) - 1, tmp);
    captured[n] = '\0';
    fclose(tmp);
    return res;
}

static void assert_error_names(int argc, char **argv, const char *flag, const char *env)
{
    struct config cfg;
    enum config_result res = load_captured(&cfg, argc, argv);
    ck_assert_msg(res == CONFIG_ERROR, "expected CONFIG_ERROR, got %d (stderr: %s)", (int)res,
                  captured);
    if (flag)
        ck_assert_msg(strstr(captured, flag) != NULL, "stderr does not name %s: %s", flag,
                      captured);
    if (env)
        ck_assert_msg(strstr(captured, env) != NULL, "stderr does not name %s: %s", env, captured);
    config_free(&cfg);
}

/* ---------------------------------------------------------------- defaults */

START_TEST(defaults)
{
    struct config cfg;
    ck_assert_int_eq(load_captured(&cfg, 0, NULL), CONFIG_OK);
    ck_assert_str_eq(captured, "");
    ck_assert_int_eq(cfg.batch_size, 256);
    ck_assert_int_eq(cfg.poll_interval_ms, 2000);
    ck_assert_int_eq(cfg.max_in_flight, 1024);
    ck_assert_int_eq(cfg.max_in_flight_per_target, 1024);
    ck_assert_int_eq(cfg.lease_ms, 30000);
    ck_assert_int_eq(cfg.grace_ms, 20000);
    ck_assert_int_eq(cfg.reconnect_max_ms, 5000);
    ck_assert_int_eq(cfg.connect_timeout_ms, 5000);
    ck_assert_int_eq(cfg.max_response_bytes, 65536);
    ck_assert_int_eq(cfg.targets_refresh_ms, 10000);
    ck_assert(!cfg.exit_when_idle);
    ck_assert_str_eq(cfg.admin_listen, "127.0.0.1:9464");
    ck_assert_str_eq(cfg.admin_token_file, ""); /* no token unless asked for */
    ck_assert_str_eq(cfg.log_level, "info");
    ck_assert_str_eq(cfg.db, "");
    ck_assert_str_eq(cfg.migrations_dir, "");
    ck_assert_str_eq(cfg.role_prefix, ""); /* plain role names */

    /* relay id defaults to hostname:pid */
    ck_assert_ptr_nonnull(cfg.relay_id);
    char suffix[32];
    snprintf(suffix, sizeof(suffix), ":%d", (int)getpid());
    size_t id_len = strlen(cfg.relay_id), suffix_len = strlen(suffix);
    ck_assert_uint_gt(id_len, suffix_len);
    ck_assert_str_eq(cfg.relay_id + id_len - suffix_len, suffix);
    config_free(&cfg);
    ck_assert_ptr_null(cfg.db);
    ck_assert_ptr_null(cfg.relay_id);
}
END_TEST

/* ---------------------------------------------------------------- flags */

START_TEST(flag_with_separate_value)
{
    struct config cfg;
    char *argv[] = {"--batch-size", "10"};
    ck_assert_int_eq(load_captured(&cfg, ARGC(argv), argv), CONFIG_OK);
    ck_assert_int_eq(cfg.batch_size, 10);
    ck_assert_int_eq(cfg.poll_interval_ms, 2000); /* others untouched */
    config_free(&cfg);
}
END_TEST

START_TEST(flag_with_equals)
{
    struct config cfg;
    char *argv[] = {"--batch-size=10", "--relay-id=r1", "--admin-listen="};
    ck_assert_int_eq(load_captured(&cfg, ARGC(argv), argv), CONFIG_OK);
    ck_assert_int_eq(cfg.batch_size, 10);
    ck_assert_str_eq(cfg.relay_id, "r1");
    ck_assert_str_eq(cfg.admin_listen, ""); /* empty = off */
    config_free(&cfg);
}
END_TEST

START_TEST(flag_bounds_inclusive)
{
    struct config cfg;
    char *low[] = {"--batch-size", "1", "--grace-ms", "0", "--max-response-bytes=0"};
    ck_assert_int_eq(load_captured(&cfg, ARGC(low), low), CONFIG_OK);
    ck_assert_int_eq(cfg.batch_size, 1);
    ck_assert_int_eq(cfg.grace_ms, 0);
    ck_assert_int_eq(cfg.max_response_bytes, 0);
    config_free(&cfg);

    char *high[] = {"--batch-size", "10000"};
    ck_assert_int_eq(load_captured(&cfg, ARGC(high), high), CONFIG_OK);
    ck_assert_int_eq(cfg.batch_size, 10000);
    config_free(&cfg);
}
END_TEST

START_TEST(last_flag_wins)
{
    struct config cfg;
    char *argv[] = {"--batch-size", "10", "--batch-size=20", "--db", "a", "--db", "b"};
    ck_assert_int_eq(load_captured(&cfg, ARGC(argv), argv), CONFIG_OK);
    ck_assert_int_eq(cfg.batch_size, 20);
    ck_assert_str_eq(cfg.db, "b");
    config_free(&cfg);
}
END_TEST

START_TEST(exit_when_idle_bool)
{
    struct config cfg;
    char *bare[] = {"--exit-when-idle"};
    ck_assert_int_eq(load_captured(&cfg, ARGC(bare), bare), CONFIG_OK);
    ck_assert(cfg.exit_when_idle);
    config_free(&cfg);

    /* a bare bool does not swallow the next argument */
    char *then[] = {"--exit-when-idle", "--batch-size", "3"};
    ck_assert_int_eq(load_captured(&cfg, ARGC(then), then), CONFIG_OK);
    ck_assert(cfg.exit_when_idle);
    ck_assert_int_eq(cfg.batch_size, 3);
    config_free(&cfg);

    char *off[] = {"--exit-when-idle=false"};
    ck_assert_int_eq(load_captured(&cfg, ARGC(off), off), CONFIG_OK);
    ck_assert(!cfg.exit_when_idle);
    config_free(&cfg);

    setenv("OUTBOX_RELAY_EXIT_WHEN_IDLE", "yes", 1);
    ck_assert_int_eq(load_captured(&cfg, 0, NULL), CONFIG_OK);
    ck_assert(cfg.exit_when_idle);
    config_free(&cfg);
    ck_assert_int_eq(load_captured(&cfg, ARGC(off), off), CONFIG_OK);
    ck_assert(!cfg.exit_when_idle); /* flag beats env */
    config_free(&cfg);
    unsetenv("OUTBOX_RELAY_EXIT_WHEN_IDLE");
}
END_TEST

START_TEST(stdio_bool)
{
    struct config cfg;
    ck_assert_int_eq(load_captured(&cfg, 0, NULL), CONFIG_OK);
    ck_assert(!cfg.mcp_stdio); /* the front door listens on --mcp-listen unless told */
    config_free(&cfg);
    char *bare[] = {"--stdio", "--mcp-wait-ms", "5"};
    ck_assert_int_eq(load_captured(&cfg, ARGC(bare), bare), CONFIG_OK);
    ck_assert(cfg.mcp_stdio);
    ck_assert_int_eq(cfg.mcp_wait_ms, 5);
    config_free(&cfg);
    setenv("OUTBOX_RELAY_STDIO", "true", 1);
    ck_assert_int_eq(load_captured(&cfg, 0, NULL), CONFIG_OK);
    ck_assert(cfg.mcp_stdio);
    config_free(&cfg);
    unsetenv("OUTBOX_RELAY_STDIO");
}
END_TEST

START_TEST(help)
{
    struct config cfg;
    char *argv[] = {"--help"};
    ck_assert_int_eq(load_captured(&cfg, ARGC(argv), argv), CONFIG_HELP);
    config_free(&cfg);

    char *short_form[] = {"--batch-size", "5", "-h"};
    ck_assert_int_eq(load_captured(&cfg, ARGC(short_form), short_form), CONFIG_HELP);
    config_free(&cfg);
}
END_TEST

START_TEST(help_lists_every_option)
{
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    ck_assert_ptr_nonnull(out);
    config_print_help(out);
    fclose(out);
    const char *expected[] = {
        "--db=VALUE",
        "--batch-size=VALUE",
        "OUTBOX_RELAY_BATCH_SIZE",
        "--exit-when-idle",
        "OUTBOX_RELAY_EXIT_WHEN_IDLE",
        "--admin-listen=VALUE",
        "--admin-token-file=VALUE",
        "OUTBOX_RELAY_ADMIN_TOKEN_FILE",
        "--log-level=VALUE",
        "OUTBOX_RELAY_MAX_IN_FLIGHT_PER_TARGET",
        "default '256'",
    };
    for (size_t i = 0; i < sizeof(expected) / sizeof(expected[0]); i++)
        ck_assert_msg(strstr(text, expected[i]) != NULL, "--help lacks %s", expected[i]);
    ck_assert(strstr(text, "--exit-when-idle=VALUE") == NULL);
    /* issue 22: the token guards the status page too; approvals is listed */
    ck_assert_msg(strstr(text, "/metrics, /v1/ and /ui of the admin port") != NULL,
                  "--admin-token-file's help names /ui");
    ck_assert_msg(strstr(text, "\n  approvals ") != NULL, "--help lists approvals");
    free(text);
}
END_TEST

/* ---------------------------------------------------------------- environment */

START_TEST(env_sets_value)
{
    struct config cfg;
    setenv("OUTBOX_RELAY_BATCH_SIZE", "7", 1);
    setenv("OUTBOX_RELAY_MAX_IN_FLIGHT_PER_TARGET", "9", 1);
    setenv("OUTBOX_RELAY_LOG_LEVEL", "debug", 1);
    ck_assert_int_eq(load_captured(&cfg, 0, NULL), CONFIG_OK);
    ck_assert_int_eq(cfg.batch_size, 7);
    ck_assert_int_eq(cfg.max_in_flight_per_target, 9);
    ck_assert_int_eq(cfg.max_in_flight, 1024);
    ck_assert_str_eq(cfg.log_level, "debug");
    config_free(&cfg);
    unsetenv("OUTBOX_RELAY_BATCH_SIZE");
    unsetenv("OUTBOX_RELAY_MAX_IN_FLIGHT_PER_TARGET");
    unsetenv("OUTBOX_RELAY_LOG_LEVEL");
}
END_TEST

/* The admin token's file: a path, from the flag or the environment. The file
 * is read when the admin port starts (admin.c), not here: the operator
 * commands, which share these options, never need it. */
START_TEST(admin_token_file_option)
{
    struct config cfg;
    setenv("OUTBOX_RELAY_ADMIN_TOKEN_FILE", "/run/secrets/admin-token", 1);
    ck_assert_int_eq(load_captured(&cfg, 0, NULL), CONFIG_OK);
    ck_assert_str_eq(cfg.admin_token_file, "/run/secrets/admin-token");
    config_free(&cfg);
    ck_assert_ptr_null(cfg.admin_token_file);

    char *argv[] = {"--admin-token-file", "/etc/relay/token"};
    ck_assert_int_eq(load_captured(&cfg, ARGC(argv), argv), CONFIG_OK);
    ck_assert_str_eq(cfg.admin_token_file, "/etc/relay/token"); /* flag beats env */
    config_free(&cfg);
    unsetenv("OUTBOX_RELAY_ADMIN_TOKEN_FILE");

    char *missing[] = {"--admin-token-file"};
    assert_error_names(ARGC(missing), missing, "--admin-token-file", NULL);
}
END_TEST

START_TEST(flag_beats_env)
{
    struct config cfg;
    setenv("OUTBOX_RELAY_BATCH_SIZE", "7", 1);
    char *argv[] = {"--batch-size", "10"};
    ck_assert_int_eq(load_captured(&cfg, ARGC(argv), argv), CONFIG_OK);
    ck_assert_int_eq(cfg.batch_size, 10);
    config_free(&cfg);

    /* a bad env value is an error even if a flag would override it: values
     * are validated at start-up */
    setenv("OUTBOX_RELAY_BATCH_SIZE", "abc", 1);
    assert_error_names(0, NULL, "--batch-size", "OUTBOX_RELAY_BATCH_SIZE");
    unsetenv("OUTBOX_RELAY_BATCH_SIZE");
}
END_TEST

START_TEST(database_url_fills_db)
{
    struct config cfg;
    setenv("DATABASE_URL", "postgresql://u@h/db1", 1);
    ck_assert_int_eq(load_captured(&cfg, 0, NULL), CONFIG_OK);
    ck_assert_str_eq(cfg.db, "postgresql://u@h/db1");
    config_free(&cfg);

    char *argv[] = {"--db", "host=other dbname=db2"};
    ck_assert_int_eq(load_captured(&cfg, ARGC(argv), argv), CONFIG_OK);
    ck_assert_str_eq(cfg.db, "host=other dbname=db2");
    config_free(&cfg);

    /* the relay's own variable beats the generic one */
    setenv("OUTBOX_RELAY_DB", "dbname=db3", 1);
    ck_assert_int_eq(load_captured(&cfg, 0, NULL), CONFIG_OK);
    ck_assert_str_eq(cfg.db, "dbname=db3");
    config_free(&cfg);

    /* an empty DATABASE_URL is as good as none */
    unsetenv("OUTBOX_RELAY_DB");
    setenv("DATABASE_URL", "", 1);
    ck_assert_int_eq(load_captured(&cfg, 0, NULL), CONFIG_OK);
    ck_assert_str_eq(cfg.db, "");
    config_free(&cfg);
    unsetenv("DATABASE_URL");
}
END_TEST

/* ---------------------------------------------------------------- errors */

START_TEST(invalid_integer_values)
{
    const char *values[] = {"abc", "0", "99999999999", "-5", "10001", "", "5x", "1e3"};
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        char *argv[] = {"--batch-size", (char *)values[i]};
        assert_error_names(ARGC(argv), argv, "--batch-size", "OUTBOX_RELAY_BATCH_SIZE");
        ck_assert_msg(strstr(captured, values[i]) != NULL, "stderr does not quote '%s': %s",
                      values[i], captured);
    }
    char *eq[] = {"--batch-size=abc"};
    assert_error_names(ARGC(eq), eq, "--batch-size", "OUTBOX_RELAY_BATCH_SIZE");
    char *lease[] = {"--lease-ms", "999"}; /* below its minimum */
    assert_error_names(ARGC(lease), lease, "--lease-ms", "OUTBOX_RELAY_LEASE_MS");
}
END_TEST

START_TEST(invalid_env_value_names_variable)
{
    setenv("OUTBOX_RELAY_POLL_INTERVAL_MS", "soon", 1);
    assert_error_names(0, NULL, "--poll-interval-ms", "OUTBOX_RELAY_POLL_INTERVAL_MS");
    unsetenv("OUTBOX_RELAY_POLL_INTERVAL_MS");

    setenv("OUTBOX_RELAY_EXIT_WHEN_IDLE", "maybe", 1);
    assert_error_names(0, NULL, "--exit-when-idle", "OUTBOX_RELAY_EXIT_WHEN_IDLE");
    unsetenv("OUTBOX_RELAY_EXIT_WHEN_IDLE");
}
END_TEST

START_TEST(invalid_log_level)
{
    char *argv[] = {"--log-level", "loud"};
    assert_error_names(ARGC(argv), argv, "--log-level", "OUTBOX_RELAY_LOG_LEVEL");
    ck_assert(strstr(captured, "loud") != NULL);

    setenv("OUTBOX_RELAY_LOG_LEVEL", "verbose", 1);
    assert_error_names(0, NULL, "--log-level", "OUTBOX_RELAY_LOG_LEVEL");
    unsetenv("OUTBOX_RELAY_LOG_LEVEL");

    const char *ok[] = {"debug", "info", "warn", "error"};
    for (size_t i = 0; i < 4; i++) {
        struct config cfg;
        char *good[] = {"--log-level", (char *)ok[i]};
        ck_assert_int_eq(load_captured(&cfg, ARGC(good), good), CONFIG_OK);
        config_free(&cfg);
    }
}
END_TEST

START_TEST(invalid_bool_value)
{
    char *argv[] = {"--exit-when-idle=maybe"};
    assert_error_names(ARGC(argv), argv, "--exit-when-idle", "OUTBOX_RELAY_EXIT_WHEN_IDLE");
}
END_TEST

START_TEST(invalid_admin_listen)
{
    const char *values[] = {"nohost", ":9464", "127.0.0.1:", "127.0.0.1:70000", "h:port"};
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        char *argv[] = {"--admin-listen", (char *)values[i]};
        assert_error_names(ARGC(argv), argv, "--admin-listen", "OUTBOX_RELAY_ADMIN_LISTEN");
    }
    struct config cfg;
    char *v6[] = {"--admin-listen", "[::1]:8080"};
    ck_assert_int_eq(load_captured(&cfg, ARGC(v6), v6), CONFIG_OK);
    ck_assert_str_eq(cfg.admin_listen, "[::1]:8080");
    config_free(&cfg);
}
END_TEST

/* OAuth's options: together or not at all, a resource that is a URL, a JWKS
 * over https (or plain http to a loopback address only). */
START_TEST(oauth_options)
{
    char *no_jwks[] = {"--mcp-oauth-issuer", "https://auth.test", "--mcp-resource",
                       "https://mcp.test/mcp"};
    assert_error_names(ARGC(no_jwks), no_jwks, "--mcp-oauth-jwks", "OUTBOX_RELAY_MCP_OAUTH_JWKS");
    char *no_resource[] = {"--mcp-oauth-issuer", "https://auth.test", "--mcp-oauth-jwks",
                           "https://auth.test/jwks"};
    assert_error_names(ARGC(no_resource), no_resource, "--mcp-resource",
                       "OUTBOX_RELAY_MCP_RESOURCE");
    char *no_issuer[] = {"--mcp-oauth-jwks", "https://auth.test/jwks"};
    assert_error_names(ARGC(no_issuer), no_issuer, "--mcp-oauth-issuer",
                       "OUTBOX_RELAY_MCP_OAUTH_ISSUER");
    const char *bad_resources[] = {"mcp.test/mcp", "https://", "https://mcp.test/mcp?x=1"};
    for (size_t i = 0; i < sizeof(bad_resources) / sizeof(bad_resources[0]); i++) {
        char *argv[] = {"--mcp-oauth-issuer",     "https://auth.test", "--mcp-oauth-jwks",
                        "https://auth.test/jwks", "--mcp-resource",    (char *)bad_resources[i]};
        assert_error_names(ARGC(argv), argv, "--mcp-resource", "OUTBOX_RELAY_MCP_RESOURCE");
    }
    const char *bad_jwks[] = {"http://auth.test/jwks", "http://10.0.0.1/jwks",
                              "http://127.0.0.1@evil.test/jwks", "ftp://127.0.0.1/jwks"};
    for (size_t i = 0; i < sizeof(bad_jwks) / sizeof(bad_jwks[0]); i++) {
        char *argv[] = {"--mcp-oauth-issuer",   "https://auth.test", "--mcp-resource",
                        "https://mcp.test/mcp", "--mcp-oauth-jwks",  (char *)bad_jwks[i]};
        assert_error_names(ARGC(argv), argv, "--mcp-oauth-jwks", "OUTBOX_RELAY_MCP_OAUTH_JWKS");
    }
    char *bad_scope[] = {
        "--mcp-oauth-issuer", "https://auth.test",      "--mcp-resource",    "https://mcp.test/mcp",
        "--mcp-oauth-jwks",   "https://auth.test/jwks", "--mcp-oauth-scope", "a\", b"};
    assert_error_names(ARGC(bad_scope), bad_scope, "--mcp-oauth-scope",
                       "OUTBOX_RELAY_MCP_OAUTH_SCOPE");
    const char *good_jwks[] = {"https://auth.test/jwks", "http://127.0.0.1:8080/jwks",
                               "http://localhost/jwks", "http://[::1]:9/jwks"};
    for (size_t i = 0; i < sizeof(good_jwks) / sizeof(good_jwks[0]); i++) {
        struct config cfg;
        char *argv[] = {"--mcp-oauth-issuer",   "https://auth.test", "--mcp-resource",
                        "https://mcp.test/mcp", "--mcp-oauth-jwks",  (char *)good_jwks[i]};
        ck_assert_msg(load_captured(&cfg, ARGC(argv), argv) == CONFIG_OK, "%s: %s", good_jwks[i],
                      captured);
        config_free(&cfg);
    }
}
END_TEST

/* --role-prefix: names roles PREFIX_outbox_app, ...: a lower-case letter,
 * then [a-z0-9_], at most 40; empty is none. */
START_TEST(role_prefix_values)
{
    const char *bad[] = {"Acme",
                         "1acme",
                         "_acme",
                         "acme-eu",
                         "ac me",
                         "acme\"",
                         "abbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *argv[] = {"--role-prefix", (char *)bad[i]};
        assert_error_names(ARGC(argv), argv, "--role-prefix", "OUTBOX_RELAY_ROLE_PREFIX");
    }
    const char *good[] = {"", "acme", "t_42", "abbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        struct config cfg;
        char *argv[] = {"--role-prefix", (char *)good[i]};
        ck_assert_int_eq(load_captured(&cfg, ARGC(argv), argv), CONFIG_OK);
        ck_assert_str_eq(cfg.role_prefix, good[i]);
        config_free(&cfg);
    }
}
END_TEST

START_TEST(unknown_option)
{
    char *argv[] = {"--nope"};
    assert_error_names(ARGC(argv), argv, "--nope", NULL);
    char *with_value[] = {"--nope=1"};
    assert_error_names(ARGC(with_value), with_value, "--nope", NULL);
    /* a prefix of a real option is not that option */
    char *prefix[] = {"--batch", "5"};
    assert_error_names(ARGC(prefix), prefix, "--batch", NULL);
    char *stray[] = {"extra"};
    assert_error_names(ARGC(stray), stray, "extra", NULL);
}
END_TEST

START_TEST(missing_value)
{
    char *argv[] = {"--batch-size"};
    assert_error_names(ARGC(argv), argv, "--batch-size", NULL);
    char *db[] = {"--exit-when-idle", "--db"};
    assert_error_names(ARGC(db), db, "--db", NULL);
}
END_TEST

Suite *config_suite(void)
{
    Suite *s = suite_create("config");

    TCase *tc = tcase_create("load");
    tcase_add_checked_fixture(tc, clean_environment, NULL);
    tcase_add_test(tc, defaults);
    tcase_add_test(tc, flag_with_separate_value);
    tcase_add_test(tc, flag_with_equals);
    tcase_add_test(tc, flag_bounds_inclusive);
    tcase_add_test(tc, last_flag_wins);
    tcase_add_test(tc, exit_when_idle_bool);
    tcase_add_test(tc, stdio_bool);
    tcase_add_test(tc, help);
    tcase_add_test(tc, help_lists_every_option);
    tcase_add_test(tc, env_sets_value);
    tcase_add_test(tc, flag_beats_env);
    tcase_add_test(tc, admin_token_file_option);
    tcase_add_test(tc, database_url_fills_db);
    suite_add_tcase(s, tc);

    tc = tcase_create("errors");
    tcase_add_checked_fixture(tc, clean_environment, NULL);
    tcase_add_test(tc, invalid_integer_values);
    tcase_add_test(tc, invalid_env_value_names_variable);
    tcase_add_test(tc, invalid_log_level);
    tcase_add_test(tc, invalid_bool_value);
    tcase_add_test(tc, invalid_admin_listen);
    tcase_add_test(tc, oauth_options);
    tcase_add_test(tc, role_prefix_values);
    tcase_add_test(tc, unknown_option);
    tcase_add_test(tc, missing_value);
    suite_add_tcase(s, tc);
    return s;
}
