/*
 * test_flow.c — relay/flow.h: health signals, the AIMD window, the failure
 * run that opens a circuit, probes, the run of 410s that says an endpoint
 * is gone, Retry-After, the reports (and
 * their reasons) sent to outbox.target_event, the sleep until the next due
 * row.
 */
#include "unit.h"

#include "flow.h"

#include <string.h>

static struct target_flow fresh(void)
{
    struct target_flow f;
    memset(&f, 0, sizeof(f));
    return f;
}

START_TEST(signals_by_class_and_status)
{
    ck_assert_int_eq(flow_signal_of(CLASS_SUCCEEDED, 200, true), FLOW_HEALTHY);
    ck_assert_int_eq(flow_signal_of(CLASS_PERMANENT_FAILURE, 400, true), FLOW_HEALTHY);
    ck_assert_int_eq(flow_signal_of(CLASS_KEY_CONFLICT, 422, true), FLOW_HEALTHY);
    ck_assert_int_eq(flow_signal_of(CLASS_PERMANENT_FAILURE, 410, true), FLOW_GONE);
    ck_assert_int_eq(flow_signal_of(CLASS_RETRY_LATER, 429, true), FLOW_OVERLOADED);
    ck_assert_int_eq(flow_signal_of(CLASS_RETRY_LATER, 409, true), FLOW_HEALTHY);
    ck_assert_int_eq(flow_signal_of(CLASS_NOT_SENT, 0, false), FLOW_FAILURE);
    ck_assert_int_eq(flow_signal_of(CLASS_AMBIGUOUS, 0, true), FLOW_FAILURE);
    ck_assert_int_eq(flow_signal_of(CLASS_AMBIGUOUS, 500, true), FLOW_FAILURE);
    ck_assert_int_eq(flow_signal_of(CLASS_AMBIGUOUS, 503, true), FLOW_FAILURE);
    ck_assert_int_eq(flow_signal_of(CLASS_AMBIGUOUS, 303, true), FLOW_NEUTRAL);
    ck_assert_int_eq(flow_signal_of(CLASS_RECONCILE_INCONCLUSIVE, 500, true), FLOW_NEUTRAL);
    ck_assert_int_eq(flow_signal_of(CLASS_RECONCILED_EXECUTED, 200, true), FLOW_NEUTRAL);
}
END_TEST

START_TEST(window_starts_at_cap_and_is_bounded)
{
    struct target_flow f = fresh();
    ck_assert_int_eq(flow_room(&f, 64, 0), 64);
    ck_assert_int_eq(flow_room(&f, 64, 60), 4);
    ck_assert_int_eq(flow_room(&f, 64, 80), 0);
    ck_assert_int_eq(flow_room(&f, 16, 0), 16); /* the cap was lowered by a reload */
    for (int i = 0; i < 100; i++)
        flow_observe(&f, FLOW_HEALTHY, false, 200, -1, 16, 10, 1000);
    ck_assert_int_eq(flow_room(&f, 16, 0), 16);
}
END_TEST

/* A burst of failures that were in flight together halves the window once;
 * failures spread over time halve it each FLOW_DECREASE_EVERY_MS, to one. */
START_TEST(window_halves_once_per_interval_never_below_one)
{
    struct target_flow f = fresh();
    for (int i = 0; i < 50; i++)
        flow_observe(&f, FLOW_FAILURE, false, 0, -1, 512, 1000, 5000);
    ck_assert_int_eq(flow_room(&f, 512, 0), 256);
    uint64_t now = 5000;
    for (int i = 0; i < 20; i++) {
        now += FLOW_DECREASE_EVERY_MS;
        flow_observe(&f, FLOW_FAILURE, false, 0, -1, 512, 1000, now);
    }
    ck_assert_int_eq(flow_room(&f, 512, 0), 1);
    ck_assert_int_eq(flow_room(&f, 512, 1), 0);
}
END_TEST

/* After an outage the window is back at the cap after cap successes:
 * a healthy target's backlog drains at full concurrency within a few round
 * trips (one success adds one; a round trip of w successes doubles w). */
START_TEST(window_recovers_by_one_per_success)
{
    struct target_flow f = fresh();
    uint64_t now = 1000;
    for (int i = 0; i < 20; i++, now += FLOW_DECREASE_EVERY_MS)
        flow_observe(&f, FLOW_FAILURE, false, 0, -1, 1024, 1000, now);
    ck_assert_int_eq(flow_room(&f, 1024, 0), 1);
    int successes = 0, w = 1, round_trips = 0;
    while (flow_room(&f, 1024, 0) < 1024) {
        for (int i = 0; i < w; i++, successes++)
            flow_observe(&f, FLOW_HEALTHY, false, 200, -1, 1024, 1000, now);
        w = flow_room(&f, 1024, 0);
        round_trips++;
    }
    ck_assert_int_eq(successes, 1023);
    ck_assert_int_le(round_trips, 11);
}
END_TEST

START_TEST(failure_run_reports_open_every_threshold)
{
    struct target_flow f = fresh();
    int opens = 0;
    for (int i = 1; i <= 25; i++) {
        struct flow_actions a = flow_observe(&f, FLOW_FAILURE, false, 0, -1, 8, 10, 100 * i);
        opens += a.report_open;
        if (i == 10 || i == 20)
            ck_assert_msg(a.report_open, "failure %d reaches the threshold", i);
    }
    ck_assert_int_eq(opens, 2);
    /* One healthy answer ends the run. */
    flow_observe(&f, FLOW_HEALTHY, false, 200, -1, 8, 10, 5000);
    ck_assert_int_eq(f.consecutive_failures, 0);
    for (int i = 1; i <= 9; i++)
        ck_assert(!flow_observe(&f, FLOW_FAILURE, false, 0, -1, 8, 10, 6000).report_open);
    /* 429s and neutral answers neither extend nor end a run. */
    flow_observe(&f, FLOW_OVERLOADED, false, 429, -1, 8, 10, 6000);
    flow_observe(&f, FLOW_NEUTRAL, false, 0, -1, 8, 10, 6000);
    ck_assert(flow_observe(&f, FLOW_FAILURE, false, 0, -1, 8, 10, 6000).report_open);
}
END_TEST

START_TEST(probe_results)
{
    struct target_flow f = fresh();
    struct flow_actions a = flow_observe(&f, FLOW_FAILURE, true, 0, -1, 8, 1, 100);
    ck_assert(a.report_probe_failed);
    ck_assert_msg(!a.report_open, "a failed probe re-opens through probe_failed, not open");
    a = flow_observe(&f, FLOW_HEALTHY, true, 200, -1, 8, 1, 200);
    ck_assert(a.report_probe_succeeded);
    a = flow_observe(&f, FLOW_HEALTHY, true, 404, -1, 8, 1, 300);
    ck_assert_msg(a.report_probe_succeeded, "a 4xx is an answer from a working target");
    a = flow_observe(&f, FLOW_OVERLOADED, true, 429, 2000, 8, 1, 400);
    ck_assert(a.report_probe_succeeded);
    ck_assert_int_eq(a.pause_ms, 2000);
    a = flow_observe(&f, FLOW_NEUTRAL, true, 0, -1, 8, 1, 500);
    ck_assert(!a.report_probe_succeeded && !a.report_probe_failed);
}
END_TEST

/* One answer as target_events_observe feeds it: flow_observe, then the
 * evidence that the endpoint is gone. */
static struct flow_actions answer(struct target_flow *f, long status, bool probe, int64_t intent)
{
    enum attempt_class cls = status == 0                     ? CLASS_AMBIGUOUS
                             : status == 200                 ? CLASS_SUCCEEDED
                             : status == 429                 ? CLASS_RETRY_LATER
                             : status >= 500 || status < 400 ? CLASS_AMBIGUOUS
                                                             : CLASS_PERMANENT_FAILURE;
    struct flow_actions a =
        flow_observe(f, flow_signal_of(cls, status, true), probe, status, -1, 8, 10, 100);
    flow_observe_gone(f, &a, status, probe, intent);
    return a;
}

/* One 410 is about its intent: it reports nothing, nor do FLOW_GONE_INTENTS
 * - 1 more, whatever they follow. */
START_TEST(gone_one_intent_reports_nothing)
{
    struct target_flow f = fresh();
    struct flow_actions a = flow_observe(&f, FLOW_GONE, false, 410, -1, 8, 10, 100);
    ck_assert_msg(!a.report_gone, "flow_observe alone never reports gone");
    a = answer(&f, 410, false, 1);
    ck_assert(!a.report_gone);
    ck_assert_int_eq(f.gone_run, 1);
    for (int64_t id = 2; id < FLOW_GONE_INTENTS; id++)
        ck_assert(!answer(&f, 410, false, id).report_gone);
    ck_assert_int_eq(f.gone_run, FLOW_GONE_INTENTS - 1);
}
END_TEST

/* FLOW_GONE_INTENTS different intents in a row: gone, once, with the run's
 * length; then a new run starts. */
START_TEST(gone_after_different_intents_in_a_row)
{
    struct target_flow f = fresh();
    struct flow_actions a;
    for (int64_t id = 1; id <= FLOW_GONE_INTENTS; id++) {
        a = answer(&f, 410, false, 100 + id);
        ck_assert_msg(a.report_gone == (id == FLOW_GONE_INTENTS), "410 #%lld: report_gone %d",
                      (long long)id, a.report_gone);
    }
    ck_assert_int_eq(a.gone_intents, FLOW_GONE_INTENTS);
    ck_assert_int_eq(f.gone_run, 0);
    ck_assert(!answer(&f, 410, false, 200).report_gone);
    ck_assert_int_eq(f.gone_run, 1);
    /* the gone run leaves the failure run and the window alone */
    ck_assert_int_eq(f.consecutive_failures, 0);
}
END_TEST

/* The same intent's 410 again (sent again by an operator) does not count,
 * nor does it break the run. */
START_TEST(gone_same_intent_counts_once)
{
    struct target_flow f = fresh();
    for (int i = 0; i < 3 * FLOW_GONE_INTENTS; i++)
        ck_assert(!answer(&f, 410, false, 7).report_gone);
    ck_assert_int_eq(f.gone_run, 1);
    for (int64_t id = 1; id < FLOW_GONE_INTENTS - 1; id++)
        ck_assert(!answer(&f, 410, false, id).report_gone);
    ck_assert(!answer(&f, 410, false, 7).report_gone);
    ck_assert(answer(&f, 410, false, 99).report_gone);
}
END_TEST

/* Any other answer between them ends the run: a 410 interleaved with 200s
 * (or 404s, 429s, 5xx) never reports gone. A request that got no answer is
 * no evidence either way. */
START_TEST(gone_run_broken_by_any_other_answer)
{
    const long others[] = {200, 404, 400, 429, 500, 503, 303};
    for (size_t k = 0; k < sizeof(others) / sizeof(others[0]); k++) {
        struct target_flow f = fresh();
        for (int64_t id = 1; id <= 10 * FLOW_GONE_INTENTS; id++) {
            long status = id % FLOW_GONE_INTENTS == 0 ? others[k] : 410;
            ck_assert_msg(!answer(&f, status, false, id).report_gone,
                          "410s broken by HTTP %ld reported gone at intent %lld", others[k],
                          (long long)id);
        }
    }
    struct target_flow f = fresh();
    for (int64_t id = 1; id <= 1000; id++)
        ck_assert(!answer(&f, id % 2 ? 410 : 200, false, id).report_gone);
    f = fresh();
    for (int64_t id = 1; id < FLOW_GONE_INTENTS; id++)
        answer(&f, 410, false, id);
    ck_assert(!answer(&f, 0, false, 50).report_gone); /* timeout: no answer */
    ck_assert_int_eq(f.gone_run, FLOW_GONE_INTENTS - 1);
    ck_assert(answer(&f, 410, false, 51).report_gone);
}
END_TEST

/* The circuit probe's 410 is evidence about the endpoint: gone at once. Any
 * other answer to the probe is what it always was. */
START_TEST(gone_on_the_probe)
{
    struct target_flow f = fresh();
    struct flow_actions a = answer(&f, 410, true, 1);
    ck_assert(a.report_gone);
    ck_assert_int_eq(a.gone_intents, 0);
    ck_assert(!a.report_probe_succeeded && !a.report_probe_failed);
    a = answer(&f, 404, true, 2);
    ck_assert(!a.report_gone && a.report_probe_succeeded);
    a = answer(&f, 503, true, 3);
    ck_assert(!a.report_gone && a.report_probe_failed);
}
END_TEST

START_TEST(gone_and_retry_after)
{
    struct target_flow f = fresh();
    struct flow_actions a = flow_observe(&f, FLOW_OVERLOADED, false, 429, 3000, 8, 10, 100);
    ck_assert_int_eq(a.pause_ms, 3000);
    a = flow_observe(&f, FLOW_OVERLOADED, false, 429, -1, 8, 10, 100);
    ck_assert_int_eq(a.pause_ms, 0);
    a = flow_observe(&f, FLOW_FAILURE, false, 503, 5000, 8, 10, 100);
    ck_assert_msg(a.pause_ms == 5000, "503 with Retry-After pauses the target");
    a = flow_observe(&f, FLOW_FAILURE, false, 500, 5000, 8, 10, 100);
    ck_assert_msg(a.pause_ms == 0, "only 429 and 503 carry a pause");
}
END_TEST

START_TEST(circuit_names_match_sql)
{
    ck_assert_str_eq(flow_circuit_name(CIRCUIT_CLOSED), "closed");
    ck_assert_str_eq(flow_circuit_name(CIRCUIT_OPEN), "open");
    ck_assert_str_eq(flow_circuit_name(CIRCUIT_HALF_OPEN), "half_open");
    ck_assert_int_eq(flow_circuit_parse("half_open"), CIRCUIT_HALF_OPEN);
    ck_assert_int_eq(flow_circuit_parse("open"), CIRCUIT_OPEN);
    ck_assert_int_eq(flow_circuit_parse("closed"), CIRCUIT_CLOSED);
    ck_assert_int_eq(flow_circuit_parse(NULL), CIRCUIT_CLOSED);
}
END_TEST

/* What the reports to outbox.target_event say, in the order they go. */
START_TEST(reports_and_their_reasons)
{
    struct flow_report out[FLOW_MAX_REPORTS];
    struct flow_actions none = {0};
    ck_assert_uint_eq(flow_reports(&none, 0, 0, "", out), 0);

    struct flow_actions open = {.report_open = true};
    ck_assert_uint_eq(flow_reports(&open, 10, 0, "Connection refused", out), 1);
    ck_assert_str_eq(out[0].event, "open");
    ck_assert_str_eq(out[0].reason, "10 failures in a row; last: Connection refused");
    ck_assert_int_eq(out[0].pause_ms, 0);
    ck_assert_uint_eq(flow_reports(&open, 3, 0, "", out), 1);
    ck_assert_str_eq(out[0].reason, "3 failures in a row; last: failure");

    struct flow_actions probe = {.report_probe_failed = true};
    ck_assert_uint_eq(flow_reports(&probe, 1, 503, "HTTP 503", out), 1);
    ck_assert_str_eq(out[0].event, "probe_failed");
    ck_assert_str_eq(out[0].reason, "HTTP 503");
    probe = (struct flow_actions){.report_probe_succeeded = true};
    ck_assert_uint_eq(flow_reports(&probe, 0, 200, "", out), 1);
    ck_assert_str_eq(out[0].event, "probe_succeeded");
    ck_assert_str_eq(out[0].reason, "");

    /* Gone: the evidence is the reason, and the failure run's report (if
     * any) names it as the last. */
    struct flow_actions gone = {.report_gone = true, .gone_intents = 5, .report_open = true};
    ck_assert_uint_eq(flow_reports(&gone, 10, 410, "HTTP 410", out), 2);
    ck_assert_str_eq(out[0].event, "gone");
    ck_assert_str_eq(out[0].reason, "HTTP 410 Gone to 5 different intents in a row, no other "
                                    "answer between them: the endpoint is gone");
    ck_assert_str_eq(out[1].event, "open");
    ck_assert_str_eq(out[1].reason, "10 failures in a row; last: HTTP 410 Gone to 5 different "
                                    "intents in a row, no other answer between them: the "
                                    "endpoint is gone");
    gone = (struct flow_actions){.report_gone = true};
    ck_assert_uint_eq(flow_reports(&gone, 0, 410, "HTTP 410", out), 1);
    ck_assert_str_eq(out[0].reason, "HTTP 410 Gone to the circuit probe: the endpoint is gone");

    struct flow_actions pause = {.pause_ms = 120000};
    ck_assert_uint_eq(flow_reports(&pause, 0, 429, "HTTP 429", out), 1);
    ck_assert_str_eq(out[0].event, "pause");
    ck_assert_str_eq(out[0].reason, "HTTP 429 with Retry-After");
    ck_assert_int_eq(out[0].pause_ms, 120000);

    struct flow_actions all = {.report_gone = true,
                               .report_open = true,
                               .report_probe_failed = true,
                               .report_probe_succeeded = true,
                               .pause_ms = 1};
    ck_assert_uint_eq(flow_reports(&all, 1, 503, "x", out), FLOW_MAX_REPORTS);
}
END_TEST

/* A long last error is cut, and the reason stays a terminated string. */
START_TEST(reports_long_error_is_cut)
{
    char error[2 * FLOW_REASON_BYTES];
    memset(error, 'e', sizeof(error) - 1);
    error[sizeof(error) - 1] = '\0';
    struct flow_report out[FLOW_MAX_REPORTS];
    struct flow_actions a = {.report_open = true, .report_probe_failed = true};
    ck_assert_uint_eq(flow_reports(&a, 99, 0, error, out), 2);
    ck_assert_uint_lt(strlen(out[0].reason), FLOW_REASON_BYTES);
    ck_assert_uint_eq(strlen(out[1].reason), FLOW_REASON_BYTES - 1);
}
END_TEST

/* Sleeping until the next due row: its time plus one ms, and from the
 * second empty claim on at least 2^n ms, at most 256. */
START_TEST(next_due_wait)
{
    ck_assert_uint_eq(flow_next_due_wait_ms(0, 0), 1);
    ck_assert_uint_eq(flow_next_due_wait_ms(-5, 0), 1);
    ck_assert_uint_eq(flow_next_due_wait_ms(99, 1), 100);
    ck_assert_uint_eq(flow_next_due_wait_ms(0, 2), 4);
    ck_assert_uint_eq(flow_next_due_wait_ms(0, 7), 128);
    ck_assert_uint_eq(flow_next_due_wait_ms(0, 8), 256);
    ck_assert_uint_eq(flow_next_due_wait_ms(0, 1000), 256);
    ck_assert_uint_eq(flow_next_due_wait_ms(1000, 1000), 1001);
}
END_TEST

/* The sweep's period: a hundred times what the last took, 1 s to 10 min,
 * at most twice the last period; after a failure, twice the last. */
START_TEST(sweep_period)
{
    ck_assert_uint_eq(flow_sweep_period_ms(0, 0), 1000);
    ck_assert_uint_eq(flow_sweep_period_ms(9, 1000), 1000);
    ck_assert_uint_eq(flow_sweep_period_ms(11, 1000), 1100);
    ck_assert_uint_eq(flow_sweep_period_ms(135, 10000), 13500);
    /* One slow answer (a 10 s stall) doubles the period, no more. */
    ck_assert_uint_eq(flow_sweep_period_ms(10000, 1000), 2000);
    ck_assert_uint_eq(flow_sweep_period_ms(10000, 0), 2000);
    ck_assert_uint_eq(flow_sweep_period_ms(6000, 600000), 600000);
    ck_assert_uint_eq(flow_sweep_period_ms(UINT32_MAX, 400000), 600000);
    /* A fast sweep brings it back down at once. */
    ck_assert_uint_eq(flow_sweep_period_ms(2, 600000), 1000);
    ck_assert_uint_eq(flow_sweep_backoff_ms(0), 2000);
    ck_assert_uint_eq(flow_sweep_backoff_ms(1500), 3000);
    ck_assert_uint_eq(flow_sweep_backoff_ms(500000), 600000);
}
END_TEST

/* The live counts wait 5 s after the last one started, or 20 times as
 * long as it took: a count of a backlog of millions that takes 2.5 s comes
 * back after 50 s, so it holds the claiming connection 5 % of the time. */
START_TEST(live_counts_interval)
{
    ck_assert_uint_eq(flow_live_counts_interval_ms(0), 5000);
    ck_assert_uint_eq(flow_live_counts_interval_ms(55), 5000);
    ck_assert_uint_eq(flow_live_counts_interval_ms(250), 5000);
    ck_assert_uint_eq(flow_live_counts_interval_ms(251), 5020);
    ck_assert_uint_eq(flow_live_counts_interval_ms(2500), 50000);
    ck_assert_uint_eq(flow_live_counts_interval_ms(UINT64_MAX / 10), UINT64_MAX);
}
END_TEST

Suite *flow_suite(void)
{
    Suite *s = suite_create("flow");
    TCase *tc = tcase_create("signals");
    tcase_add_test(tc, signals_by_class_and_status);
    tcase_add_test(tc, circuit_names_match_sql);
    tcase_add_test(tc, live_counts_interval);
    suite_add_tcase(s, tc);
    tc = tcase_create("window");
    tcase_add_test(tc, window_starts_at_cap_and_is_bounded);
    tcase_add_test(tc, window_halves_once_per_interval_never_below_one);
    tcase_add_test(tc, window_recovers_by_one_per_success);
    suite_add_tcase(s, tc);
    tc = tcase_create("circuit");
    tcase_add_test(tc, failure_run_reports_open_every_threshold);
    tcase_add_test(tc, probe_results);
    tcase_add_test(tc, gone_and_retry_after);
    suite_add_tcase(s, tc);
    tc = tcase_create("gone");
    tcase_add_test(tc, gone_one_intent_reports_nothing);
    tcase_add_test(tc, gone_after_different_intents_in_a_row);
    tcase_add_test(tc, gone_same_intent_counts_once);
    tcase_add_test(tc, gone_run_broken_by_any_other_answer);
    tcase_add_test(tc, gone_on_the_probe);
    tcase_add_test(tc, reports_and_their_reasons);
    tcase_add_test(tc, reports_long_error_is_cut);
    suite_add_tcase(s, tc);
    tc = tcase_create("sleep");
    tcase_add_test(tc, next_due_wait);
    tcase_add_test(tc, sweep_period);
    suite_add_tcase(s, tc);
    return s;
}
