/*
 * metrics.h — the Prometheus text exposition format (version 0.0.4), rendered
 * into a strbuf. Pure: no I/O, no global state (tests/unit/lib/test_metrics.c).
 *
 * A scrape is one text document made of families. Each family is written as
 * its header, once (metrics_family: "# HELP" and "# TYPE"), followed by all of
 * its samples, one per label set. The caller keeps the samples of a family
 * together; Prometheus rejects a family that appears twice.
 *
 *   metrics_family(out, "outbox_attempts_total", METRICS_COUNTER, "Delivery attempts.");
 *   metrics_sample_uint(out, "outbox_attempts_total",
 *                       METRICS_LABELS({"target", t->name}, {"class", "succeeded"}), n);
 *
 * gives
 *
 *   # HELP outbox_attempts_total Delivery attempts.
 *   # TYPE outbox_attempts_total counter
 *   outbox_attempts_total{target="api",class="succeeded"} 3
 *
 * Names follow Prometheus conventions: "outbox_" prefix, "_total" for
 * counters, base units in the name ("_seconds", "_bytes"). Metric and label
 * names come from the code and are not checked; label values (target names,
 * reasons) come from data and are escaped here: backslash, double quote and
 * newline. HELP texts escape backslash and newline.
 */
#ifndef OUTBOX_METRICS_H
#define OUTBOX_METRICS_H

#include "lib/strbuf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum metrics_type {
    METRICS_COUNTER,   /* only goes up; name ends in _total */
    METRICS_GAUGE,     /* goes up and down */
    METRICS_HISTOGRAM, /* _bucket{le=...}, _sum, _count */
};

struct metrics_label {
    const char *name;
    const char *value; /* escaped when rendered; NULL renders as "" */
};

/* A label array and its length, for the two label parameters below:
 *   METRICS_LABELS({"target", "api"}, {"class", "succeeded"}) */
#define METRICS_LABELS(...)                                                                        \
    (const struct metrics_label[]){__VA_ARGS__},                                                   \
        (sizeof((const struct metrics_label[]){__VA_ARGS__}) / sizeof(struct metrics_label))
#define METRICS_NO_LABELS NULL, 0

/* "# HELP name help\n# TYPE name type\n" — once per family. */
void metrics_family(struct strbuf *out, const char *name, enum metrics_type type, const char *help);

/* One sample line: name{labels} value. Floating-point values are written in
 * the shortest form that reads back exactly ("3", "0.25", "1e+21", "+Inf",
 * "NaN"); counters use the _uint variant so that they stay exact past 2^53. */
void metrics_sample(struct strbuf *out, const char *name, const struct metrics_label *labels,
                    size_t label_count, double value);
void metrics_sample_uint(struct strbuf *out, const char *name, const struct metrics_label *labels,
                         size_t label_count, uint64_t value);

/* A family with a single sample: header plus one line. */
void metrics_counter(struct strbuf *out, const char *name, const char *help,
                     const struct metrics_label *labels, size_t label_count, uint64_t value);
void metrics_gauge(struct strbuf *out, const char *name, const char *help,
                   const struct metrics_label *labels, size_t label_count, double value);

/* The pieces, for callers (and tests) that need them alone. */
void metrics_write_value(struct strbuf *out, double value);
void metrics_escape_label_value(struct strbuf *out, const char *value);
void metrics_escape_help(struct strbuf *out, const char *help);

/* ---------------------------------------------------------------- histogram */

#define METRICS_HISTOGRAM_MAX_BOUNDS 16

/* Fixed buckets, chosen at init. counts[i] holds the observations in
 * (bounds[i-1], bounds[i]] (not cumulative; rendering accumulates), and
 * counts[bound_count] those above the last bound (the +Inf bucket). */
struct metrics_histogram {
    size_t bound_count;
    double bounds[METRICS_HISTOGRAM_MAX_BOUNDS]; /* strictly ascending, finite */
    uint64_t counts[METRICS_HISTOGRAM_MAX_BOUNDS + 1];
    double sum;
    uint64_t count;
};

/* Request latencies in seconds: 5 ms .. 30 s. */
#define METRICS_LATENCY_SECONDS_BOUNDS                                                             \
    {                                                                                              \
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30                                \
    }
#define METRICS_LATENCY_SECONDS_BOUND_COUNT 12

/* False (and h left empty) when there are more than METRICS_HISTOGRAM_MAX_BOUNDS
 * bounds, or they are not finite and strictly ascending. */
bool metrics_histogram_init(struct metrics_histogram *h, const double *bounds, size_t bound_count)
    __attribute__((warn_unused_result));
/* A NaN observation is ignored (it would poison the sum forever). */
void metrics_histogram_observe(struct metrics_histogram *h, double value);
/* The samples of one label set: name_bucket{labels...,le="b"} (cumulative,
 * ending with le="+Inf", which equals name_count), name_sum, name_count.
 * name is the family name without a suffix. The family header is the
 * caller's (metrics_family with METRICS_HISTOGRAM). */
void metrics_histogram_render(struct strbuf *out, const char *name,
                              const struct metrics_label *labels, size_t label_count,
                              const struct metrics_histogram *h);

#endif
