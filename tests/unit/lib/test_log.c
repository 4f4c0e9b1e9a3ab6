/*
 * test_log.c — relay/lib/log.h: levels, and what one log_event writes to
 * stderr (captured through a pipe): one JSON object on one line, time,
 * level and event first, the fields in order, nothing below the level.
 */
#include "../unit.h"

#include "lib/log.h"

#include <limits.h>
#include <regex.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <string.h>
#include <time.h>
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

/* What log_event writes for the same fields, after the time (which may
 * differ by a millisecond between the two calls). */
static const char *after_time(const char *line)
{
    const char *level = strstr(line, "\"level\":");
    return level ? level : line;
}

static void same_as_log_event(const char *text, long long number)
{
    static char a[16384], b[16384];
    CAPTURE(a, sizeof(a),
            log_event(LOG_INFO, "attempt", "key", json_string(text), "n", json_integer(number),
                      "none", json_null(), "missing", json_string(NULL), LOG_END));
    struct log_field fields[] = {LOG_STRING("key", text), LOG_INTEGER("n", number),
                                 LOG_NULL("none"), LOG_STRING("missing", NULL)};
    CAPTURE(b, sizeof(b), log_fields(LOG_INFO, "attempt", fields, 4));
    ck_assert_int_eq(strncmp(b, "{\"time\":\"", 9), 0);
    ck_assert_str_eq(after_time(b), after_time(a));
}

/* log_fields writes what log_event (jansson) writes: escapes, UTF-8 kept,
 * text that is not UTF-8 as null, integers, a line past the stack block. */
START_TEST(fields_as_jansson_writes_them)
{
    log_set_level(LOG_INFO);
    const char *texts[] = {"",
                           "plain",
                           "q\"uote",
                           "back\\slash",
                           "slash/",
                           "tab\tnl\ncr\r",
                           "\b\f\x01\x1f\x7f",
                           "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
                           "\xc0\x80",
                           "\xed\xa0\x80",
                           "\xf4\x90\x80\x80",
                           "\xe2\x82",
                           "\x80",
                           "\xff",
                           "\xf5\x80\x80\x80",
                           "\xe0\x80\xaf",
                           "ok\xc3"};
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
        same_as_log_event(texts[i], (long long)i - 3);
    char one[2] = {0, 0};
    for (int c = 1; c < 256; c++) {
        one[0] = (char)c;
        same_as_log_event(one, c);
    }
    unsigned seed = 26;
    char random_text[64];
    for (int round = 0; round < 2000; round++) {
        size_t n = (size_t)(rand_r(&seed) % 63);
        for (size_t k = 0; k < n; k++) {
            int r = rand_r(&seed);
            /* mostly ASCII and UTF-8 lead/continuation bytes */
            random_text[k] = (char)(r % 4 == 0   ? 0x80 + r % 0x80
                                    : r % 3 == 0 ? 0xc0 + r % 0x40
                                                 : 1 + r % 0x7f);
        }
        random_text[n] = '\0';
        same_as_log_event(random_text, rand_r(&seed));
    }
    static char long_text[6000];
    memset(long_text, 'x', sizeof(long_text) - 1);
    long_text[100] = '\n';
    same_as_log_event(long_text, -9223372036854775807LL - 1);
}
END_TEST

/* The time is UTC to the millisecond, as strftime writes it, and the same
 * second as the clock's (the date part is formatted once per second). */
START_TEST(time_to_the_millisecond)
{
    char out[512];
    log_set_level(LOG_INFO);
    for (int i = 0; i < 3; i++) {
        time_t before = time(NULL);
        CAPTURE(out, sizeof(out), log_fields(LOG_INFO, "tick", NULL, 0));
        time_t after = time(NULL);
        regex_t re;
        ck_assert_int_eq(
            regcomp(&re,
                    "^\\{\"time\":\"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}"
                    "\\.[0-9]{3}Z\",\"level\":\"info\",\"event\":\"tick\"\\}\n$",
                    REG_EXTENDED),
            0);
        ck_assert_int_eq(regexec(&re, out, 0, NULL, 0), 0);
        regfree(&re);
        struct tm tm;
        char second[32];
        bool matches = false;
        /* time(2) reads the kernel's coarse clock, which turns to the next
         * second up to a tick after gettimeofday(2) (the log's clock) does:
         * CI saw .006 s past a second that time() had not reached yet. */
        for (time_t t = before; t <= after + 1; t++) {
            gmtime_r(&t, &tm);
            strftime(second, sizeof(second), "%Y-%m-%dT%H:%M:%S", &tm);
            matches |= strncmp(out + 9, second, strlen(second)) == 0;
        }
        ck_assert_msg(matches, "%s", out);
        usleep(400000);
    }
}
END_TEST

START_TEST(fields_below_the_level_nothing)
{
    char out[256];
    log_set_level(LOG_WARN);
    struct log_field key = LOG_STRING("key", "k");
    CAPTURE(out, sizeof(out), log_fields(LOG_INFO, "attempt", &key, 1));
    ck_assert_str_eq(out, "");
    log_set_level(LOG_INFO);
}
END_TEST

/* Reads what is waiting on fd without blocking: "" when nothing. */
static void read_waiting(int fd, char *out, size_t size)
{
    size_t len = 0;
    for (;;) {
        ssize_t n = recv(fd, out + len, size - 1 - len, MSG_DONTWAIT);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    out[len] = '\0';
}

static void idle_noop(uv_idle_t *handle)
{
    (void)handle;
}

/* In a loop, an info line waits for the turn's end; a warn line writes what
 * waits first, then itself; the loop's turn writes what waits. */
START_TEST(batch_written_per_turn_and_warn_at_once)
{
    int fds[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    int saved = dup(STDERR_FILENO);
    dup2(fds[1], STDERR_FILENO);
    log_set_level(LOG_INFO);
    uv_loop_t loop;
    uv_loop_init(&loop);
    log_batch_start(&loop);
    char out[4096];

    log_event(LOG_INFO, "first", LOG_END);
    struct log_field n = LOG_INTEGER("n", 2);
    log_fields(LOG_INFO, "second", &n, 1);
    read_waiting(fds[0], out, sizeof(out));
    ck_assert_str_eq(out, ""); /* both wait for the turn */

    log_event(LOG_WARN, "third", LOG_END);
    read_waiting(fds[0], out, sizeof(out));
    char *first = strstr(out, "\"event\":\"first\"");
    char *second = strstr(out, "\"event\":\"second\",\"n\":2}");
    char *third = strstr(out, "\"event\":\"third\"");
    ck_assert(first && second && third && first < second && second < third);

    log_event(LOG_INFO, "fourth", LOG_END);
    uv_idle_t busy; /* the loop's own work: the batch's handle keeps no loop alive */
    uv_idle_init(&loop, &busy);
    uv_idle_start(&busy, idle_noop);
    uv_run(&loop, UV_RUN_NOWAIT); /* one turn: its prepare writes */
    uv_close((uv_handle_t *)&busy, NULL);
    read_waiting(fds[0], out, sizeof(out));
    ck_assert_ptr_nonnull(strstr(out, "\"event\":\"fourth\""));

    log_event(LOG_INFO, "fifth", LOG_END);
    log_batch_stop(); /* writes what waits and closes the handle */
    read_waiting(fds[0], out, sizeof(out));
    ck_assert_ptr_nonnull(strstr(out, "\"event\":\"fifth\""));
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(uv_loop_close(&loop), 0);

    log_event(LOG_INFO, "sixth", LOG_END); /* no batch: at once */
    read_waiting(fds[0], out, sizeof(out));
    ck_assert_ptr_nonnull(strstr(out, "\"event\":\"sixth\""));
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(fds[0]);
    close(fds[1]);
}
END_TEST

/* Each write of a batch holds whole lines and at most PIPE_BUF bytes (a
 * longer line alone), so lines stay whole on a shared pipe. A datagram
 * socket shows each write(2) as one message. */
START_TEST(batch_writes_whole_lines_within_pipe_buf)
{
    int fds[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, fds), 0);
    int buffer = 1 << 20;
    setsockopt(fds[0], SOL_SOCKET, SO_RCVBUF, &buffer, sizeof(buffer));
    setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &buffer, sizeof(buffer));
    int saved = dup(STDERR_FILENO);
    dup2(fds[1], STDERR_FILENO);
    log_set_level(LOG_INFO);
    uv_loop_t loop;
    uv_loop_init(&loop);
    log_batch_start(&loop);
    static char long_text[6000];
    memset(long_text, 'a', sizeof(long_text) - 1);
    int lines = 0;
    for (int i = 0; i < 300; i++, lines++) {
        struct log_field f[] = {LOG_INTEGER("i", i),
                                LOG_STRING("text", i == 150 ? long_text : "t")};
        log_fields(LOG_INFO, "line", f, 2);
    }
    log_flush();
    static char message[16384];
    int seen = 0, writes = 0;
    for (;;) {
        ssize_t n = recv(fds[0], message, sizeof(message), MSG_DONTWAIT);
        if (n <= 0)
            break;
        writes++;
        ck_assert_int_eq(message[n - 1], '\n');
        int in_message = 0;
        for (ssize_t k = 0; k < n; k++)
            in_message += message[k] == '\n';
        if (n > PIPE_BUF)
            ck_assert_int_eq(in_message, 1); /* the long line, alone */
        seen += in_message;
    }
    ck_assert_int_eq(seen, lines);
    ck_assert_int_lt(writes, lines / 4); /* batched: many lines per write */
    log_batch_stop();
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(fds[0]);
    close(fds[1]);
}
END_TEST

Suite *log_suite(void)
{
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("log");
    tcase_add_test(tc, levels_parse);
    tcase_add_test(tc, one_json_object_per_line);
    tcase_add_test(tc, below_the_level_nothing);
    tcase_add_test(tc, fields_as_jansson_writes_them);
    tcase_add_test(tc, fields_below_the_level_nothing);
    tcase_add_test(tc, time_to_the_millisecond);
    tcase_add_test(tc, batch_written_per_turn_and_warn_at_once);
    tcase_add_test(tc, batch_writes_whole_lines_within_pipe_buf);
    suite_add_tcase(s, tc);
    return s;
}
