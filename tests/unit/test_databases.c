/*
 * test_databases.c — relay/databases.h: the file of --databases (names,
 * comments, connection strings with spaces, the refusals and that they
 * never print a connection string), OUTBOX_SECRET_<NAME>, config_load's
 * --database NAME, and the retention families of /metrics (relay/prune.h)
 * with a sample set per database.
 */
#include "unit.h"

#include "config.h"
#include "databases.h"
#include "lib/strbuf.h"
#include "prune.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char path[64];

static void write_file(const char *text)
{
    snprintf(path, sizeof(path), "/tmp/outbox-dbs-XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

START_TEST(reads_lines)
{
    write_file("# tenants\n\n  a  host=db1 dbname=a user=r  \nshard_2-x postgresql://r@db2/x\n");
    struct database_list list = {0};
    char error[256] = "";
    ck_assert(databases_read(path, &list, error, sizeof(error)));
    ck_assert_uint_eq(list.count, 2);
    ck_assert_str_eq(list.items[0].name, "a");
    ck_assert_str_eq(list.items[0].conninfo, "host=db1 dbname=a user=r");
    ck_assert_str_eq(list.items[1].name, "shard_2-x");
    ck_assert_str_eq(list.items[1].conninfo, "postgresql://r@db2/x");
    ck_assert_ptr_nonnull(databases_find(&list, "a"));
    ck_assert_ptr_null(databases_find(&list, "b"));
    databases_free(&list);
    unlink(path);
}
END_TEST

static void assert_refused(const char *text, const char *why)
{
    write_file(text);
    struct database_list list = {0};
    char error[256] = "";
    ck_assert(!databases_read(path, &list, error, sizeof(error)));
    ck_assert_msg(strstr(error, why) != NULL, "'%s' does not say '%s'", error, why);
    ck_assert_msg(strstr(error, "secret") == NULL, "'%s' shows the connection string", error);
    ck_assert_uint_eq(list.count, 0);
    unlink(path);
}

START_TEST(refusals)
{
    assert_refused("Upper host=x password=secret\n", "line 1: the name must match");
    assert_refused("a host=x password=secret\nb\n", "line 2 (b): no connection string");
    assert_refused("a host=x password=secret\na host=y password=secret\n",
                   "the name a is there twice");
    assert_refused("# nothing\n\n", "names no database");
    char long_name[128];
    memset(long_name, 'a', 64);
    snprintf(long_name + 64, sizeof(long_name) - 64, " host=x password=secret\n");
    assert_refused(long_name, "line 1: the name must match");
    struct database_list list = {0};
    char error[256] = "";
    ck_assert(!databases_read("/nonexistent/outbox-dbs", &list, error, sizeof(error)));
    ck_assert(strstr(error, "cannot read /nonexistent/outbox-dbs") != NULL);
}
END_TEST

START_TEST(names)
{
    ck_assert(databases_name_valid("a"));
    ck_assert(databases_name_valid("tenant-42_eu"));
    ck_assert(!databases_name_valid(""));
    ck_assert(!databases_name_valid("A"));
    ck_assert(!databases_name_valid("a.b"));
    ck_assert(!databases_name_valid("a b"));
}
END_TEST

START_TEST(secret_of_a_name)
{
    unsetenv("OUTBOX_SECRET_TENANT_42");
    ck_assert_ptr_null(databases_secret("tenant-42"));
    setenv("OUTBOX_SECRET_TENANT_42", "pw", 1);
    ck_assert_str_eq(databases_secret("tenant-42"), "pw");
    unsetenv("OUTBOX_SECRET_TENANT_42");
}
END_TEST

START_TEST(config_picks_one_database)
{
    write_file("a host=db1\nb host=db2 dbname=b\n");
    unsetenv("PGPASSWORD");
    setenv("OUTBOX_SECRET_B", "pw-b", 1);
    struct config cfg;
    char *argv[] = {"--databases", path, "--database", "b"};
    ck_assert_int_eq(config_load(&cfg, 4, argv), CONFIG_OK);
    ck_assert_str_eq(cfg.db, "host=db2 dbname=b");
    ck_assert_str_eq(getenv("PGPASSWORD"), "pw-b");
    config_free(&cfg);
    char *missing[] = {"--databases", path, "--database", "c"};
    ck_assert_int_eq(config_load(&cfg, 4, missing), CONFIG_ERROR);
    config_free(&cfg);
    char *all[] = {"--databases", path};
    ck_assert_int_eq(config_load(&cfg, 2, all), CONFIG_OK);
    ck_assert(config_needs_one_database(&cfg, "stuck"));
    config_free(&cfg);
    char *one[] = {"--databases", path, "--database", "a"};
    ck_assert_int_eq(config_load(&cfg, 4, one), CONFIG_OK);
    ck_assert(!config_needs_one_database(&cfg, "stuck"));
    config_free(&cfg);
    char *alone[] = {"--database", "a"};
    ck_assert_int_eq(config_load(&cfg, 2, alone), CONFIG_ERROR);
    config_free(&cfg);
    unsetenv("OUTBOX_SECRET_B");
    unsetenv("PGPASSWORD");
    unlink(path);
}
END_TEST

#define ck_assert_contains(haystack, needle)                                                       \
    ck_assert_msg(strstr((haystack), (needle)) != NULL, "missing %s in %s", (needle), (haystack))
#define ck_assert_lacks(haystack, needle)                                                          \
    ck_assert_msg(strstr((haystack), (needle)) == NULL, "unexpected %s in %s", (needle), (haystack))

START_TEST(retention_metrics_per_database)
{
    struct strbuf out;
    strbuf_init(&out);
    const struct pruner_metrics two[] = {{NULL, "alpha"}, {NULL, "beta"}};
    pruner_write_metrics(two, 2, &out);
    ck_assert_contains(out.data, "outbox_pruned_total{database=\"alpha\"} 0\n");
    ck_assert_contains(out.data, "outbox_pruned_total{database=\"beta\"} 0\n");
    ck_assert_contains(out.data,
                       "outbox_prune_runs_total{database=\"beta\",result=\"locked_out\"} 0\n");
    ck_assert_contains(out.data,
                       "outbox_prune_last_success_timestamp_seconds{database=\"alpha\"} 0\n");
    /* one header per family, not one per database */
    const char *first = strstr(out.data, "# TYPE outbox_pruned_total counter");
    ck_assert_ptr_nonnull(first);
    ck_assert_ptr_null(strstr(first + 1, "# TYPE outbox_pruned_total counter"));

    strbuf_reset(&out);
    const struct pruner_metrics one[] = {{NULL, NULL}}; /* --db: no label, as before */
    pruner_write_metrics(one, 1, &out);
    ck_assert_contains(out.data, "\noutbox_pruned_total 0\n");
    ck_assert_contains(out.data, "outbox_prune_runs_total{result=\"done\"} 0\n");
    ck_assert_lacks(out.data, "database=");
    strbuf_free(&out);
}
END_TEST

Suite *databases_suite(void)
{
    Suite *s = suite_create("databases");
    TCase *tc = tcase_create("file");
    tcase_add_test(tc, reads_lines);
    tcase_add_test(tc, refusals);
    tcase_add_test(tc, names);
    tcase_add_test(tc, secret_of_a_name);
    tcase_add_test(tc, config_picks_one_database);
    tcase_add_test(tc, retention_metrics_per_database);
    suite_add_tcase(s, tc);
    return s;
}
