/*
 * trickle — the bench's steady enqueuer (tests/bench/run.sh, trickle).
 *
 * Enqueues one intent every --interval-us (default 5000: 200/s) for
 * --seconds, each with outbox.enqueue in its own committed transaction
 * (autocommit: the statement's return is the commit's return, after the
 * WAL flush with synchronous_commit = on). The schedule is absolute
 * (clock_nanosleep TIMER_ABSTIME), so a slow commit does not shift the
 * following ones. Blocking libpq is fine here: one connection, one
 * statement at a time, and the time that counts is taken after it returned.
 *
 * Writes "key<TAB>commit_returned_us<TAB>enqueue_us" lines to --out, where
 * commit_returned_us is CLOCK_MONOTONIC (as stamp_receiver uses) and
 * enqueue_us is how long the statement took. --warmup N first enqueues N
 * intents (not written) so connections and caches are warm.
 * Connection: libpq's environment (PGHOST, PGPORT, ...).
 */
#include <errno.h>
#include <libpq-fe.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t ts_us(const struct timespec *ts)
{
    return (int64_t)ts->tv_sec * 1000000 + ts->tv_nsec / 1000;
}

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts_us(&ts);
}

static void sleep_until(struct timespec *t)
{
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, t, NULL) == EINTR)
        ;
}

static void add_us(struct timespec *t, long us)
{
    t->tv_nsec += us * 1000L;
    while (t->tv_nsec >= 1000000000L) {
        t->tv_nsec -= 1000000000L;
        t->tv_sec++;
    }
}

static int enqueue(PGconn *conn, const char *key, const char *target, long n)
{
    char payload[256];
    snprintf(payload, sizeof(payload),
             "{\"account\": %ld, \"amount_cents\": 2500, \"currency\": \"EUR\", "
             "\"reason\": \"bench trickle\", \"step\": %ld}",
             n % 1000, n);
    const char *params[3] = {key, target, payload};
    PGresult *res = PQexecPrepared(conn, "enqueue", 3, params, NULL, NULL, 0);
    int ok = PQresultStatus(res) == PGRES_TUPLES_OK;
    if (!ok)
        fprintf(stderr, "trickle: enqueue %s: %s", key, PQerrorMessage(conn));
    PQclear(res);
    return ok;
}

int main(int argc, char **argv)
{
    long interval_us = 5000, seconds = 20, warmup = 50;
    const char *target = "trickle", *prefix = "trickle:", *out = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--interval-us"))
            interval_us = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--seconds"))
            seconds = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup"))
            warmup = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--target"))
            target = argv[i + 1];
        else if (!strcmp(argv[i], "--prefix"))
            prefix = argv[i + 1];
        else if (!strcmp(argv[i], "--out"))
            out = argv[i + 1];
        else {
            fprintf(stderr, "trickle: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (out == NULL || interval_us <= 0 || seconds <= 0) {
        fprintf(stderr, "usage: trickle --out FILE [--interval-us 5000] [--seconds 20] "
                        "[--warmup 50] [--target trickle] [--prefix trickle:]\n");
        return 2;
    }
    PGconn *conn = PQconnectdb("");
    if (PQstatus(conn) != CONNECTION_OK) {
        fprintf(stderr, "trickle: connect: %s", PQerrorMessage(conn));
        return 1;
    }
    PGresult *res =
        PQprepare(conn, "enqueue", "SELECT (outbox.enqueue($1, $2, $3::jsonb)).intent_id", 3, NULL);
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        fprintf(stderr, "trickle: prepare: %s", PQerrorMessage(conn));
        return 1;
    }
    PQclear(res);

    long total = seconds * 1000000L / interval_us;
    int64_t *commit_us = calloc((size_t)total, sizeof(int64_t));
    int64_t *took_us = calloc((size_t)total, sizeof(int64_t));
    if (commit_us == NULL || took_us == NULL)
        return 1;
    char key[128];

    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    for (long i = 0; i < warmup; i++) {
        add_us(&next, interval_us);
        sleep_until(&next);
        snprintf(key, sizeof(key), "%swarmup:%ld", prefix, i);
        if (!enqueue(conn, key, target, i))
            return 1;
    }
    long late = 0;
    for (long i = 0; i < total; i++) {
        add_us(&next, interval_us);
        if (now_us() > ts_us(&next) + interval_us)
            late++;
        sleep_until(&next);
        int64_t t0 = now_us();
        snprintf(key, sizeof(key), "%s%ld", prefix, i);
        if (!enqueue(conn, key, target, i))
            return 1;
        commit_us[i] = now_us();
        took_us[i] = commit_us[i] - t0;
    }
    PQfinish(conn);

    FILE *f = fopen(out, "w");
    if (f == NULL) {
        perror(out);
        return 1;
    }
    for (long i = 0; i < total; i++)
        fprintf(f, "%s%ld\t%lld\t%lld\n", prefix, i, (long long)commit_us[i],
                (long long)took_us[i]);
    fclose(f);
    fprintf(stderr, "trickle: %ld intents, %ld started more than one interval late\n", total, late);
    free(commit_us);
    free(took_us);
    return 0;
}
