/*
 * log_cost.c — what the relay's success log line costs, without the relay
 * (issue 40: ≤ 1 µs per delivery).
 *
 * Why a micro-benchmark: in a drain the line is a few µs out of 30-90 µs of
 * relay CPU per delivery on a shared machine whose load moves the drains by
 * more than that (the headline's info/warn pairs), so their difference is
 * noise about as large as the line. Here the same code (relay/lib/log.c,
 * linked as it is) writes the line relay_log_attempt writes for a success
 * (relay/relay_status.c: the same ten fields, a key of the bench's shape),
 * to a file as the bench's relay does, and the process's own CPU time is
 * read around each phase; nothing else runs in it.
 *
 *   log_cost --out FILE [--lines N] [--rounds R] [--per-flush K]
 *
 * R rounds (5) of three phases of N/R lines (1,000,000) each, the order
 * rotating from round to round:
 *   - none: --log-level warn (log_enabled says no, no field is built);
 *   - turn: info, the buffer written every K lines (16: the relay writes once
 *     per loop turn; at most PIPE_BUF bytes a write, whole lines);
 *   - line: info, a write(2) per line (the relay before issue 40).
 * CPU (CLOCK_PROCESS_CPUTIME_ID) per line of each phase minus none's of the
 * same round, the median over rounds and the range. The file is truncated
 * between phases (outside the timing), so the page cache does not grow.
 * Prints one line: "lines N rounds R per_flush K turn_us T turn_min A
 * turn_max B line_us L line_min C line_max D none_us E bytes_per_line S".
 */
#include "lib/log.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum phase { PHASE_NONE, PHASE_TURN, PHASE_LINE, PHASES };

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The line of relay_log_attempt for a delivery that succeeded at once. */
static void attempt_line(long i)
{
    char key[48];
    snprintf(key, sizeof(key), "headline:1:%ld", i);
    if (!log_enabled(LOG_INFO))
        return; /* as relay_log_attempt: no fields built */
    struct log_field fields[] = {
        LOG_STRING("key", key),
        LOG_STRING("target", "bench"),
        LOG_INTEGER("attempt", 1),
        LOG_STRING("class", "succeeded"),
        LOG_INTEGER("http_status", 200),
        LOG_STRING("state", "succeeded"),
        LOG_INTEGER("latency_ms", 3 + i % 40),
        LOG_STRING("error", NULL),
        LOG_STRING("trace_id", NULL),
        LOG_STRING("span_id", NULL),
    };
    log_fields(LOG_INFO, "attempt", fields, sizeof(fields) / sizeof(fields[0]));
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_of(double *xs, int n)
{
    qsort(xs, (size_t)n, sizeof(*xs), cmp_double);
    return n % 2 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
}

int main(int argc, char **argv)
{
    const char *out = NULL;
    long lines = 1000000, per_flush = 16;
    int rounds = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--out") == 0)
            out = argv[i + 1];
        else if (strcmp(argv[i], "--lines") == 0)
            lines = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--rounds") == 0)
            rounds = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--per-flush") == 0)
            per_flush = atol(argv[i + 1]);
    }
    if (out == NULL || lines < 1 || rounds < 1 || rounds > 100 || per_flush < 1) {
        fprintf(stderr, "usage: log_cost --out FILE [--lines N] [--rounds R] [--per-flush K]\n");
        return 2;
    }
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || dup2(fd, STDERR_FILENO) < 0) {
        perror(out);
        return 1;
    }
    close(fd);
    uv_loop_t loop;
    uv_loop_init(&loop);
    long per_round = lines / rounds > 0 ? lines / rounds : 1;
    double turn[100], line[100], none[100], bytes = 0;
    for (int r = 0; r < rounds; r++) {
        double took[PHASES];
        for (int k = 0; k < PHASES; k++) {
            enum phase p = (enum phase)((k + r) % PHASES);
            if (ftruncate(STDERR_FILENO, 0) != 0 || lseek(STDERR_FILENO, 0, SEEK_SET) != 0)
                return 1;
            log_set_level(p == PHASE_NONE ? LOG_WARN : LOG_INFO);
            if (p == PHASE_TURN)
                log_batch_start(&loop);
            double t0 = cpu_s();
            for (long i = 0; i < per_round; i++) {
                attempt_line(i);
                if (p == PHASE_TURN && (i + 1) % per_flush == 0)
                    log_flush(); /* the relay's uv_prepare, once per loop turn */
            }
            log_flush();
            took[p] = cpu_s() - t0;
            if (p == PHASE_TURN) {
                log_batch_stop();
                uv_run(&loop, UV_RUN_NOWAIT); /* the prepare handle's close */
            }
            if (p == PHASE_LINE)
                bytes = (double)lseek(STDERR_FILENO, 0, SEEK_END) / (double)per_round;
        }
        none[r] = took[PHASE_NONE] * 1e6 / (double)per_round;
        turn[r] = (took[PHASE_TURN] - took[PHASE_NONE]) * 1e6 / (double)per_round;
        line[r] = (took[PHASE_LINE] - took[PHASE_NONE]) * 1e6 / (double)per_round;
    }
    if (ftruncate(STDERR_FILENO, 0) != 0)
        return 1;
    uv_loop_close(&loop);
    double tmin = turn[0], tmax = turn[0], lmin = line[0], lmax = line[0];
    for (int r = 1; r < rounds; r++) {
        tmin = turn[r] < tmin ? turn[r] : tmin;
        tmax = turn[r] > tmax ? turn[r] : tmax;
        lmin = line[r] < lmin ? line[r] : lmin;
        lmax = line[r] > lmax ? line[r] : lmax;
    }
    printf(
        "lines %ld rounds %d per_flush %ld turn_us %.3f turn_min %.3f turn_max %.3f line_us %.3f "
        "line_min %.3f line_max %.3f none_us %.3f bytes_per_line %.0f\n",
        per_round * rounds, rounds, per_flush, median_of(turn, rounds), tmin, tmax,
        median_of(line, rounds), lmin, lmax, median_of(none, rounds), bytes);
    return 0;
}
