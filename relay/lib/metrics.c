/*
 * metrics.c — Prometheus text format 0.0.4 (see metrics.h for the shape).
 *
 * The format's rules that are easy to get wrong, and are handled here once:
 *  - label values escape exactly three characters: \ as \\, " as \", and
 *    newline as \n; HELP texts escape \ and newline (a quote is literal);
 *  - floating-point values are Go's ParseFloat syntax, with +Inf, -Inf, NaN;
 *    we print the shortest text that reads back to the same double, as the
 *    Go client does, so that bucket bounds read "0.005", not
 *    "0.0050000000000000001";
 *  - histogram buckets are cumulative, carry their bound in the "le" label
 *    (after the caller's labels), and end with le="+Inf", equal to _count.
 * Counters are uint64_t and printed as integers, exact past 2^53.
 */
#include "lib/metrics.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *metrics_type_name(enum metrics_type type)
{
    switch (type) {
    case METRICS_COUNTER:
        return "counter";
    case METRICS_GAUGE:
        return "gauge";
    case METRICS_HISTOGRAM:
        return "histogram";
    }
    return "untyped";
}

/* ---------------------------------------------------------------- escaping */

void metrics_escape_label_value(struct strbuf *out, const char *value)
{
    if (value == NULL)
        return;
    const char *run = value;
    for (const char *p = value; *p; p++) {
        const char *escape = NULL;
        if (*p == '\\')
            escape = "\\\\";
        else if (*p == '"')
            escape = "\\\"";
        else if (*p == '\n')
            escape = "\\n";
        if (escape) {
            strbuf_append(out, run, (size_t)(p - run));
            strbuf_append(out, escape, 2);
            run = p + 1;
        }
    }
    strbuf_append_str(out, run);
}

void metrics_escape_help(struct strbuf *out, const char *help)
{
    if (help == NULL)
        return;
    const char *run = help;
    for (const char *p = help; *p; p++) {
        if (*p == '\\' || *p == '\n') {
            strbuf_append(out, run, (size_t)(p - run));
            strbuf_append(out, *p == '\\' ? "\\\\" : "\\n", 2);
            run = p + 1;
        }
    }
    strbuf_append_str(out, run);
}

/* ---------------------------------------------------------------- values */

void metrics_write_value(struct strbuf *out, double value)
{
    if (isnan(value)) {
        strbuf_append_str(out, "NaN");
        return;
    }
    if (isinf(value)) {
        strbuf_append_str(out, value > 0 ? "+Inf" : "-Inf");
        return;
    }
    /* %g drops trailing zeros, so the first precision that round-trips is
     * the shortest text; 17 significant digits always do. */
    char text[40];
    for (int precision = 15; precision <= 17; precision++) {
        snprintf(text, sizeof(text), "%.*g", precision, value);
        if (precision == 17 || strtod(text, NULL) == value)
            break;
    }
    strbuf_append_str(out, text);
}

/* name{a="x",b="y"} — or name alone without labels. extra_name/extra_value
 * append one more label after the caller's (le for histogram buckets). */
static void metrics_write_series(struct strbuf *out, const char *name, const char *suffix,
                                 const struct metrics_label *labels, size_t label_count,
                                 const char *extra_name, const char *extra_value)
{
    strbuf_append_str(out, name);
    if (suffix)
        strbuf_append_str(out, suffix);
    if (label_count == 0 && extra_name == NULL)
        return;
    strbuf_append(out, "{", 1);
    for (size_t i = 0; i < label_count; i++) {
        if (i > 0)
            strbuf_append(out, ",", 1);
        strbuf_append_str(out, labels[i].name);
        strbuf_append(out, "=\"", 2);
        metrics_escape_label_value(out, labels[i].value);
        strbuf_append(out, "\"", 1);
    }
    if (extra_name) {
        if (label_count > 0)
            strbuf_append(out, ",", 1);
        strbuf_append_str(out, extra_name);
        strbuf_append(out, "=\"", 2);
        metrics_escape_label_value(out, extra_value);
        strbuf_append(out, "\"", 1);
    }
    strbuf_append(out, "}", 1);
}

/* ---------------------------------------------------------------- families and samples */

void metrics_family(struct strbuf *out, const char *name, enum metrics_type type, const char *help)
{
    strbuf_printf(out, "# HELP %s ", name);
    metrics_escape_help(out, help);
    strbuf_printf(out, "\n# TYPE %s %s\n", name, metrics_type_name(type));
}

void metrics_sample(struct strbuf *out, const char *name, const struct metrics_label *labels,
                    size_t label_count, double value)
{
    metrics_write_series(out, name, NULL, labels, label_count, NULL, NULL);
    strbuf_append(out, " ", 1);
    metrics_write_value(out, value);
    strbuf_append(out, "\n", 1);
}

void metrics_sample_uint(struct strbuf *out, const char *name, const struct metrics_label *labels,
                         size_t label_count, uint64_t value)
{
    metrics_write_series(out, name, NULL, labels, label_count, NULL, NULL);
    strbuf_printf(out, " %" PRIu64 "\n", value);
}

void metrics_counter(struct strbuf *out, const char *name, const char *help,
                     const struct metrics_label *labels, size_t label_count, uint64_t value)
{
    metrics_family(out, name, METRICS_COUNTER, help);
    metrics_sample_uint(out, name, labels, label_count, value);
}

void metrics_gauge(struct strbuf *out, const char *name, const char *help,
                   const struct metrics_label *labels, size_t label_count, double value)
{
    metrics_family(out, name, METRICS_GAUGE, help);
    metrics_sample(out, name, labels, label_count, value);
}

/* ---------------------------------------------------------------- histogram */

bool metrics_histogram_init(struct metrics_histogram *h, const double *bounds, size_t bound_count)
{
    memset(h, 0, sizeof(*h));
    if (bound_count > METRICS_HISTOGRAM_MAX_BOUNDS)
        return false;
    for (size_t i = 0; i < bound_count; i++) {
        if (!isfinite(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1])))
            return false;
    }
    if (bound_count > 0) /* bounds may be NULL then */
        memcpy(h->bounds, bounds, bound_count * sizeof(double));
    h->bound_count = bound_count;
    return true;
}

void metrics_histogram_observe(struct metrics_histogram *h, double value)
{
    if (isnan(value))
        return;
    size_t bucket = 0;
    while (bucket < h->bound_count && value > h->bounds[bucket])
        bucket++; /* "le": a value equal to a bound belongs to that bucket */
    h->counts[bucket]++;
    h->count++;
    h->sum += value;
}

void metrics_histogram_render(struct strbuf *out, const char *name,
                              const struct metrics_label *labels, size_t label_count,
                              const struct metrics_histogram *h)
{
    struct strbuf bound;
    strbuf_init(&bound);
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= h->bound_count; i++) {
        cumulative += h->counts[i];
        strbuf_reset(&bound);
        if (i < h->bound_count)
            metrics_write_value(&bound, h->bounds[i]);
        else
            strbuf_append_str(&bound, "+Inf");
        metrics_write_series(out, name, "_bucket", labels, label_count, "le", bound.data);
        strbuf_printf(out, " %" PRIu64 "\n", cumulative);
    }
    strbuf_free(&bound);
    metrics_write_series(out, name, "_sum", labels, label_count, NULL, NULL);
    strbuf_append(out, " ", 1);
    metrics_write_value(out, h->sum);
    strbuf_append(out, "\n", 1);
    metrics_write_series(out, name, "_count", labels, label_count, NULL, NULL);
    strbuf_printf(out, " %" PRIu64 "\n", h->count);
}
