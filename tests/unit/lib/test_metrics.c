/*
 * test_metrics.c — relay/lib/metrics.h: the Prometheus text format, checked as
 * exact text, because a scraper rejects a whole scrape for one bad line.
 *
 * Covered: HELP/TYPE headers and HELP escaping; sample lines with and
 * without labels; label value escaping (backslash, double quote, newline,
 * and nothing else); shortest round-trip float values and the special
 * values; exact uint64 counters; fixed-bucket histograms (le semantics,
 * cumulative buckets, +Inf equal to _count, NaN ignored, bad bounds refused).
 */
#include "../unit.h"

#include "lib/metrics.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Also declared in unit.h; repeated so this file builds on its own. */
Suite *metrics_suite(void);

/* ---------------------------------------------------------------- helpers */

static struct strbuf out;

static void setup(void)
{
    strbuf_init(&out);
}

static void teardown(void)
{
    strbuf_free(&out);
}

static const char *value_text(double v)
{
    strbuf_reset(&out);
    metrics_write_value(&out, v);
    return out.data;
}

static const char *escaped(const char *v)
{
    strbuf_reset(&out);
    metrics_escape_label_value(&out, v);
    return out.data;
}

/* ---------------------------------------------------------------- families and samples */

START_TEST(family_header)
{
    metrics_family(&out, "outbox_attempts_total", METRICS_COUNTER, "Delivery attempts.");
    metrics_family(&out, "outbox_in_flight", METRICS_GAUGE, "Deliveries in flight.");
    metrics_family(&out, "outbox_latency_seconds", METRICS_HISTOGRAM, "Latency.");
    ck_assert_str_eq(out.data, "# HELP outbox_attempts_total Delivery attempts.\n"
                               "# TYPE outbox_attempts_total counter\n"
                               "# HELP outbox_in_flight Deliveries in flight.\n"
                               "# TYPE outbox_in_flight gauge\n"
                               "# HELP outbox_latency_seconds Latency.\n"
                               "# TYPE outbox_latency_seconds histogram\n");
}
END_TEST

START_TEST(help_escaping)
{
    /* HELP escapes backslash and newline; a double quote stays literal. */
    metrics_family(&out, "m", METRICS_GAUGE, "a \\ b\nc \"d\"");
    ck_assert_str_eq(out.data, "# HELP m a \\\\ b\\nc \"d\"\n# TYPE m gauge\n");
}
END_TEST

START_TEST(counter_with_labels)
{
    metrics_family(&out, "outbox_attempts_total", METRICS_COUNTER, "Delivery attempts by class.");
    metrics_sample_uint(&out, "outbox_attempts_total",
                        METRICS_LABELS({"target", "api"}, {"class", "succeeded"}), 3);
    metrics_sample_uint(&out, "outbox_attempts_total",
                        METRICS_LABELS({"target", "api"}, {"class", "ambiguous"}), 0);
    ck_assert_str_eq(out.data, "# HELP outbox_attempts_total Delivery attempts by class.\n"
                               "# TYPE outbox_attempts_total counter\n"
                               "outbox_attempts_total{target=\"api\",class=\"succeeded\"} 3\n"
                               "outbox_attempts_total{target=\"api\",class=\"ambiguous\"} 0\n");
}
END_TEST

START_TEST(counter_helper_without_labels)
{
    metrics_counter(&out, "outbox_db_reconnects_total", "Database reconnects.", METRICS_NO_LABELS,
                    2);
    ck_assert_str_eq(out.data, "# HELP outbox_db_reconnects_total Database reconnects.\n"
                               "# TYPE outbox_db_reconnects_total counter\n"
                               "outbox_db_reconnects_total 2\n");
}
END_TEST

START_TEST(counter_helper_with_label)
{
    metrics_counter(&out, "outbox_claimed_total", "Rows claimed.", METRICS_LABELS({"relay", "r-1"}),
                    10);
    ck_assert_str_eq(out.data, "# HELP outbox_claimed_total Rows claimed.\n"
                               "# TYPE outbox_claimed_total counter\n"
                               "outbox_claimed_total{relay=\"r-1\"} 10\n");
}
END_TEST

START_TEST(gauge_helper)
{
    metrics_gauge(&out, "outbox_db_connected", "1 when the database connection is ready.",
                  METRICS_NO_LABELS, 1);
    metrics_gauge(&out, "outbox_lag_seconds", "Age of the oldest due row.",
                  METRICS_LABELS({"target", "api"}), 0.25);
    ck_assert_str_eq(out.data,
                     "# HELP outbox_db_connected 1 when the database connection is ready.\n"
                     "# TYPE outbox_db_connected gauge\n"
                     "outbox_db_connected 1\n"
                     "# HELP outbox_lag_seconds Age of the oldest due row.\n"
                     "# TYPE outbox_lag_seconds gauge\n"
                     "outbox_lag_seconds{target=\"api\"} 0.25\n");
}
END_TEST

START_TEST(uint_counter_exact_past_2_53)
{
    metrics_sample_uint(&out, "c_total", METRICS_NO_LABELS, 9007199254740993ULL);
    metrics_sample_uint(&out, "c_total", METRICS_NO_LABELS, UINT64_MAX);
    ck_assert_str_eq(out.data, "c_total 9007199254740993\nc_total 18446744073709551615\n");
}
END_TEST

static const struct metrics_label *taken_labels;
static size_t taken_count;

static void take(const struct metrics_label *labels, size_t count)
{
    taken_labels = labels;
    taken_count = count;
}

START_TEST(labels_macro_counts)
{
    take(METRICS_LABELS({"a", "1"}, {"b", "2"}, {"c", "3"}));
    ck_assert_uint_eq(taken_count, 3);
    ck_assert_str_eq(taken_labels[2].name, "c");
    take(METRICS_NO_LABELS);
    ck_assert_uint_eq(taken_count, 0);
    ck_assert_ptr_null(taken_labels);
}
END_TEST

/* ---------------------------------------------------------------- label escaping */

START_TEST(label_escaping)
{
    ck_assert_str_eq(escaped("plain"), "plain");
    ck_assert_str_eq(escaped(""), "");
    ck_assert_str_eq(escaped("a\\b"), "a\\\\b");
    ck_assert_str_eq(escaped("say \"hi\""), "say \\\"hi\\\"");
    ck_assert_str_eq(escaped("two\nlines"), "two\\nlines");
    ck_assert_str_eq(escaped("\\\"\n"), "\\\\\\\"\\n");
    /* Nothing else is escaped: tabs, braces, commas, equals, UTF-8. */
    ck_assert_str_eq(escaped("t\tb{x=1,y}é"), "t\tb{x=1,y}é");
}
END_TEST

START_TEST(label_escaping_in_sample)
{
    metrics_sample(&out, "m", METRICS_LABELS({"target", "we\"ird\\na\nme"}, {"empty", NULL}), 1);
    ck_assert_str_eq(out.data, "m{target=\"we\\\"ird\\\\na\\nme\",empty=\"\"} 1\n");
}
END_TEST

/* ---------------------------------------------------------------- values */

START_TEST(values_shortest_round_trip)
{
    ck_assert_str_eq(value_text(0), "0");
    ck_assert_str_eq(value_text(3), "3");
    ck_assert_str_eq(value_text(-1.5), "-1.5");
    ck_assert_str_eq(value_text(0.1), "0.1");
    ck_assert_str_eq(value_text(0.005), "0.005");
    ck_assert_str_eq(value_text(2.5), "2.5");
    ck_assert_str_eq(value_text(123456789012.0), "123456789012");
    ck_assert_str_eq(value_text(1e21), "1e+21");
    ck_assert_str_eq(value_text(1e-7), "1e-07");
    /* needs 17 significant digits to read back exactly */
    ck_assert_str_eq(value_text(0.1 + 0.2), "0.30000000000000004");
    double third = 1.0 / 3.0;
    ck_assert(strtod(value_text(third), NULL) == third);
}
END_TEST

START_TEST(values_special)
{
    ck_assert_str_eq(value_text(INFINITY), "+Inf");
    ck_assert_str_eq(value_text(-INFINITY), "-Inf");
    ck_assert_str_eq(value_text(NAN), "NaN");
}
END_TEST

/* ---------------------------------------------------------------- histogram */

START_TEST(histogram_init_refuses_bad_bounds)
{
    struct metrics_histogram h;
    const double descending[] = {1, 0.5};
    const double equal[] = {1, 1};
    const double with_nan[] = {0.1, NAN};
    const double with_inf[] = {0.1, INFINITY};
    double many[METRICS_HISTOGRAM_MAX_BOUNDS + 1];
    for (size_t i = 0; i < METRICS_HISTOGRAM_MAX_BOUNDS + 1; i++)
        many[i] = (double)i;
    ck_assert(!metrics_histogram_init(&h, descending, 2));
    ck_assert(!metrics_histogram_init(&h, equal, 2));
    ck_assert(!metrics_histogram_init(&h, with_nan, 2));
    ck_assert(!metrics_histogram_init(&h, with_inf, 2));
    ck_assert(!metrics_histogram_init(&h, many, METRICS_HISTOGRAM_MAX_BOUNDS + 1));
    ck_assert_uint_eq(h.bound_count, 0);
    ck_assert(metrics_histogram_init(&h, many, METRICS_HISTOGRAM_MAX_BOUNDS));
    ck_assert_uint_eq(h.bound_count, METRICS_HISTOGRAM_MAX_BOUNDS);
    ck_assert(metrics_histogram_init(&h, NULL, 0)); /* only the +Inf bucket */
}
END_TEST

START_TEST(histogram_observe_le_semantics)
{
    struct metrics_histogram h;
    const double bounds[] = {0.1, 1, 10};
    ck_assert(metrics_histogram_init(&h, bounds, 3));
    metrics_histogram_observe(&h, -2);  /* below every bound: first bucket */
    metrics_histogram_observe(&h, 0.1); /* on a bound: that bucket (le) */
    metrics_histogram_observe(&h, 0.5);
    metrics_histogram_observe(&h, 1);
    metrics_histogram_observe(&h, 10.5); /* above the last: +Inf */
    metrics_histogram_observe(&h, NAN);  /* ignored */
    ck_assert_uint_eq(h.counts[0], 2);
    ck_assert_uint_eq(h.counts[1], 2);
    ck_assert_uint_eq(h.counts[2], 0);
    ck_assert_uint_eq(h.counts[3], 1);
    ck_assert_uint_eq(h.count, 5);
    ck_assert(fabs(h.sum - 10.1) < 1e-12);
}
END_TEST

START_TEST(histogram_render_with_labels)
{
    struct metrics_histogram h;
    const double bounds[] = {0.005, 0.5, 1, 2.5};
    ck_assert(metrics_histogram_init(&h, bounds, 4));
    metrics_histogram_observe(&h, 0.25);
    metrics_histogram_observe(&h, 0.5);
    metrics_histogram_observe(&h, 2);
    metrics_histogram_observe(&h, 7.25);
    metrics_family(&out, "outbox_attempt_duration_seconds", METRICS_HISTOGRAM,
                   "Delivery attempt latency.");
    metrics_histogram_render(&out, "outbox_attempt_duration_seconds",
                             METRICS_LABELS({"target", "api"}), &h);
    ck_assert_str_eq(out.data,
                     "# HELP outbox_attempt_duration_seconds Delivery attempt latency.\n"
                     "# TYPE outbox_attempt_duration_seconds histogram\n"
                     "outbox_attempt_duration_seconds_bucket{target=\"api\",le=\"0.005\"} 0\n"
                     "outbox_attempt_duration_seconds_bucket{target=\"api\",le=\"0.5\"} 2\n"
                     "outbox_attempt_duration_seconds_bucket{target=\"api\",le=\"1\"} 2\n"
                     "outbox_attempt_duration_seconds_bucket{target=\"api\",le=\"2.5\"} 3\n"
                     "outbox_attempt_duration_seconds_bucket{target=\"api\",le=\"+Inf\"} 4\n"
                     "outbox_attempt_duration_seconds_sum{target=\"api\"} 10\n"
                     "outbox_attempt_duration_seconds_count{target=\"api\"} 4\n");
}
END_TEST

START_TEST(histogram_render_without_labels_empty)
{
    struct metrics_histogram h;
    const double bounds[] = {0.1, 1};
    ck_assert(metrics_histogram_init(&h, bounds, 2));
    metrics_histogram_render(&out, "d_seconds", METRICS_NO_LABELS, &h);
    ck_assert_str_eq(out.data, "d_seconds_bucket{le=\"0.1\"} 0\n"
                               "d_seconds_bucket{le=\"1\"} 0\n"
                               "d_seconds_bucket{le=\"+Inf\"} 0\n"
                               "d_seconds_sum 0\n"
                               "d_seconds_count 0\n");
}
END_TEST

START_TEST(histogram_latency_bounds)
{
    struct metrics_histogram h;
    const double bounds[] = METRICS_LATENCY_SECONDS_BOUNDS;
    ck_assert_uint_eq(sizeof(bounds) / sizeof(bounds[0]), METRICS_LATENCY_SECONDS_BOUND_COUNT);
    ck_assert(metrics_histogram_init(&h, bounds, METRICS_LATENCY_SECONDS_BOUND_COUNT));
    metrics_histogram_observe(&h, 0.042);
    metrics_histogram_render(&out, "l_seconds", METRICS_LABELS({"target", "t"}), &h);
    ck_assert_ptr_nonnull(strstr(out.data, "l_seconds_bucket{target=\"t\",le=\"0.025\"} 0\n"
                                           "l_seconds_bucket{target=\"t\",le=\"0.05\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(out.data, "l_seconds_bucket{target=\"t\",le=\"30\"} 1\n"
                                           "l_seconds_bucket{target=\"t\",le=\"+Inf\"} 1\n"
                                           "l_seconds_sum{target=\"t\"} 0.042\n"
                                           "l_seconds_count{target=\"t\"} 1\n"));
}
END_TEST

/* A whole document: every line is a comment or "series value". */
START_TEST(document_lines_well_formed)
{
    struct metrics_histogram h;
    const double bounds[] = {1};
    ck_assert(metrics_histogram_init(&h, bounds, 1));
    metrics_histogram_observe(&h, 0.5);
    metrics_counter(&out, "a_total", "A\nmultiline help.", METRICS_LABELS({"x", "new\nline"}), 1);
    metrics_family(&out, "b_seconds", METRICS_HISTOGRAM, "B.");
    metrics_histogram_render(&out, "b_seconds", METRICS_LABELS({"x", "q\"uote"}), &h);
    ck_assert_uint_gt(out.len, 0);
    ck_assert_int_eq(out.data[out.len - 1], '\n');
    size_t lines = 0;
    for (const char *line = out.data; *line; lines++) {
        const char *end = strchr(line, '\n');
        ck_assert_ptr_nonnull(end);
        if (line[0] != '#') {
            const char *space = memchr(line, ' ', (size_t)(end - line));
            ck_assert_msg(space != NULL, "line without a value: %.*s", (int)(end - line), line);
            char *value_end;
            strtod(space + 1, &value_end);
            ck_assert_msg(value_end == end, "bad value in: %.*s", (int)(end - line), line);
        }
        line = end + 1;
    }
    ck_assert_uint_eq(lines, 3 + 2 + 4);
}
END_TEST

Suite *metrics_suite(void)
{
    Suite *s = suite_create("metrics");

    TCase *tc = tcase_create("families");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, family_header);
    tcase_add_test(tc, help_escaping);
    tcase_add_test(tc, counter_with_labels);
    tcase_add_test(tc, counter_helper_without_labels);
    tcase_add_test(tc, counter_helper_with_label);
    tcase_add_test(tc, gauge_helper);
    tcase_add_test(tc, uint_counter_exact_past_2_53);
    tcase_add_test(tc, labels_macro_counts);
    tcase_add_test(tc, document_lines_well_formed);
    suite_add_tcase(s, tc);

    tc = tcase_create("escaping_and_values");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, label_escaping);
    tcase_add_test(tc, label_escaping_in_sample);
    tcase_add_test(tc, values_shortest_round_trip);
    tcase_add_test(tc, values_special);
    suite_add_tcase(s, tc);

    tc = tcase_create("histogram");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, histogram_init_refuses_bad_bounds);
    tcase_add_test(tc, histogram_observe_le_semantics);
    tcase_add_test(tc, histogram_render_with_labels);
    tcase_add_test(tc, histogram_render_without_labels_empty);
    tcase_add_test(tc, histogram_latency_bounds);
    suite_add_tcase(s, tc);
    return s;
}
