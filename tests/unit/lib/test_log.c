/*
 * test_log.c — relay/lib/log.h: levels, and what one log_event writes to
 * stderr (captured through a pipe): one JSON object on one line, time,
 * level and event first, the fields in order, nothing below the level.
 */
#include "../unit.h"

#include "lib/log.h"

#include <string.h>
#include <unistd.h>

/* What the call writes to stderr: at most size - 1 bytes. */
#define CAPTURE(out, size, call)                                                                   \
    do {                                                                                           \
        int fds[2];                                                                                \
        ck_assert_int_eq(pipe(fds), 0);                                                            \
        int saved = dup(STDERR_FILENO);                                                            \
        dup2(fds[1], STDERR_FILENO);                                                               \
        call;                                                                                      \
        dup2(saved, STDERR_FILENO);                                                                \
        close(saved);                                                                              \
        close(fds[1]);                                                                             \
        ssize_t n = read(fds[0], (out), (size)-1);                                                 \
        (out)[n > 0 ? n : 0] = '\0';                                                               \
        close(fds[0]);                                                                             \
    } while (0)

START_TEST(levels_parse)
{
    log_level_t level = LOG_ERROR;
    ck_assert(log_level_parse("debug", &level));
    ck_assert_int_eq(level, LOG_DEBUG);
    ck_assert(log_level_parse("warn", &level));
    ck_assert_int_eq(level, LOG_WARN);
    ck_assert(!log_level_parse("WARN", &level));
    ck_assert(!log_level_parse("warning", &level));
    ck_assert(!log_level_parse("", &level));
    ck_assert_int_eq(level, LOG_WARN); /* untouched on failure */
}
END_TEST

START_TEST(one_json_object_per_line)
{
    char out[1024];
    log_set_level(LOG_INFO);
    CAPTURE(out, sizeof(out),
            log_event(LOG_WARN, "claim_failed", "error", json_string("line\nbreak"), "rows",
                      json_integer(3), "none", NULL, LOG_END));
    ck_assert_int_eq(out[strlen(out) - 1], '\n');
    ck_assert_ptr_eq(strchr(out, '\n'), out + strlen(out) - 1); /* the field's is escaped */
    ck_assert_int_eq(strncmp(out, "{\"time\":\"", 9), 0);
    ck_assert_ptr_nonnull(strstr(out, "Z\",\"level\":\"warn\",\"event\":\"claim_failed\","
                                      "\"error\":\"line\\nbreak\",\"rows\":3,\"none\":null}\n"));
}
END_TEST

START_TEST(below_the_level_nothing)
{
    char out[256];
    log_set_level(LOG_WARN);
    CAPTURE(out, sizeof(out), log_event(LOG_INFO, "attempt", "key", json_string("k"), LOG_END));
    ck_assert_str_eq(out, "");
    CAPTURE(out, sizeof(out), log_event(LOG_ERROR, "record_dropped", LOG_END));
    ck_assert_ptr_nonnull(strstr(out, "\"level\":\"error\",\"event\":\"record_dropped\"}"));
    log_set_level(LOG_INFO);
}
END_TEST

Suite *log_suite(void)
{
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("log");
    tcase_add_test(tc, levels_parse);
    tcase_add_test(tc, one_json_object_per_line);
    tcase_add_test(tc, below_the_level_nothing);
    suite_add_tcase(s, tc);
    return s;
}
