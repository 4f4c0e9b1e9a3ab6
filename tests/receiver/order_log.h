/*
 * order_log.h — the test receiver's record of the order of requests and
 * effects (--order-log FILE), for the ordered-delivery tests
 * (tests/integration/31_ordering.sh).
 *
 * With --order-log FILE the receiver appends one line per delivery that
 * arrives with a key, and one per effect (a key acted on; a --dedupe answer
 * from the stored response is no effect), in the order the receiver's
 * single thread sees them:
 *
 *     <sequence>\t<request|effect>\t<key>\n
 *
 * The sequence number starts at 1 and counts both kinds, so "the request for
 * step s arrived after step s-1 took effect" is a comparison of two numbers.
 * Keys never hold a tab or a newline (outbox.enqueue refuses control
 * characters; an HTTP header cannot carry CR or LF). The file is opened for
 * appending and line-buffered, so a test can read it while the receiver runs.
 *
 * Header-only (static functions), included by receiver.c, which calls:
 *   order_log_option(argc, argv, &i)  first thing for each argument in its option loop;
 *                                      true: it was --order-log (and its value), skip it
 *   order_log_note(ORDER_LOG_REQUEST, key, key_length)  when a delivery's key is known
 *   order_log_note(ORDER_LOG_EFFECT, key, key_length)   when a key is acted on
 *   order_log_close()                  before exit
 * Without --order-log every call is a no-op.
 */
#ifndef TEST_RECEIVER_ORDER_LOG_H
#define TEST_RECEIVER_ORDER_LOG_H

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum order_log_event { ORDER_LOG_REQUEST, ORDER_LOG_EFFECT };

static FILE *order_log_file;
static uint64_t order_log_sequence;

static void order_log_open(const char *path)
{
    if (path == NULL || *path == '\0') {
        fprintf(stderr, "test-receiver: --order-log: expected a file name\n");
        exit(2);
    }
    if (order_log_file != NULL)
        fclose(order_log_file);
    order_log_file = fopen(path, "a");
    if (order_log_file == NULL) {
        fprintf(stderr, "test-receiver: --order-log: cannot open %s\n", path);
        exit(2);
    }
    setvbuf(order_log_file, NULL, _IOLBF, 0);
}

/* "--order-log FILE" or "--order-log=FILE" at argv[*index]: opens FILE and
 * returns true (having stepped over the value); false for any other argument. */
static bool order_log_option(int argc, char **argv, int *index)
{
    static const char option[] = "--order-log";
    const size_t option_length = sizeof option - 1;
    const char *argument = argv[*index];
    if (strncmp(argument, option, option_length) != 0)
        return false;
    if (argument[option_length] == '=') {
        order_log_open(argument + option_length + 1);
        return true;
    }
    if (argument[option_length] != '\0')
        return false;
    if (*index + 1 >= argc) {
        fprintf(stderr, "test-receiver: --order-log: missing value\n");
        exit(2);
    }
    *index += 1;
    order_log_open(argv[*index]);
    return true;
}

static void order_log_note(enum order_log_event event, const char *key, size_t key_length)
{
    if (order_log_file == NULL)
        return;
    order_log_sequence++;
    fprintf(order_log_file, "%" PRIu64 "\t%s\t%.*s\n", order_log_sequence,
            event == ORDER_LOG_REQUEST ? "request" : "effect", (int)key_length, key);
}

static void order_log_close(void)
{
    if (order_log_file != NULL)
        fclose(order_log_file);
    order_log_file = NULL;
}

#endif
