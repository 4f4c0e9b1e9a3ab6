/*
 * test_outcome.c — relay/outcome.h: classification, decision, back-off,
 * Retry-After, enum names; the decisions taken without a request (a row
 * not re-sent, a take-over, a late claim) and the error texts recorded.
 *
 * The table tests follow docs/design.md "Classifying one attempt" and "What
 * follows from ambiguous" row by row. The loop tests state the invariant in
 * general: nothing that may have executed is reported failed, and nothing
 * that may have executed is re-sent to a target that cannot deduplicate it
 * (no key header, or a key that may have expired at the target).
 */
#include "unit.h"

#include "outcome.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------- helpers */

#define T0 INT64_C(1700000000000) /* first attempt, ms since the epoch */
#define DAY_MS INT64_C(86400000)

static struct retry_policy keyed_policy(void)
{
    struct retry_policy p = {
        .honours_keys = true,
        .key_ttl_ms = DAY_MS,
        .max_attempts = 5,
        .backoff_base_ms = 100,
        .backoff_cap_ms = 10000,
        .reconcile_delay_ms = 30000,
    };
    return p;
}

static struct retry_policy keyless_policy(void)
{
    struct retry_policy p = keyed_policy();
    p.honours_keys = false;
    return p;
}

static struct intent_progress progress_at(int attempt, bool was_ambiguous)
{
    struct intent_progress pr = {
        .attempt = attempt,
        .was_ambiguous = was_ambiguous,
        .first_attempt_ms = T0,
        .now_ms = T0 + 1000,
        .retry_after_ms = -1,
    };
    return pr;
}

static enum attempt_class classify_status(long status, bool honours_keys)
{
    struct attempt_facts f = {
        .transport = TRANSPORT_COMPLETE, .http_status = status, .honours_keys = honours_keys};
    return outcome_classify(&f);
}

static const enum attempt_class all_classes[] = {
    CLASS_NOT_SENT,    CLASS_AMBIGUOUS,    CLASS_SUCCEEDED,
    CLASS_RETRY_LATER, CLASS_KEY_CONFLICT, CLASS_PERMANENT_FAILURE,
};
#define TESTED_CLASS_COUNT ((int)(sizeof(all_classes) / sizeof(all_classes[0])))

/* ---------------------------------------------------------------- classify */

START_TEST(classify_transport_unsent_is_not_sent)
{
    for (int keys = 0; keys < 2; keys++) {
        struct attempt_facts f = {
            .transport = TRANSPORT_FAILED_UNSENT, .http_status = 0, .honours_keys = keys};
        ck_assert_int_eq(outcome_classify(&f), CLASS_NOT_SENT);
        /* whatever status libcurl may have left behind, nothing was sent */
        f.http_status = 200;
        ck_assert_int_eq(outcome_classify(&f), CLASS_NOT_SENT);
    }
}
END_TEST

START_TEST(classify_transport_after_send_is_ambiguous)
{
    for (int keys = 0; keys < 2; keys++) {
        struct attempt_facts f = {
            .transport = TRANSPORT_FAILED_AFTER_SEND, .http_status = 0, .honours_keys = keys};
        ck_assert_int_eq(outcome_classify(&f), CLASS_AMBIGUOUS);
        f.http_status = 200;
        ck_assert_int_eq(outcome_classify(&f), CLASS_AMBIGUOUS);
    }
}
END_TEST

struct status_row {
    long status;
    enum attempt_class with_keys;
    enum attempt_class without_keys;
};

static const struct status_row status_table[] = {
    {200, CLASS_SUCCEEDED, CLASS_SUCCEEDED},
    {201, CLASS_SUCCEEDED, CLASS_SUCCEEDED},
    {204, CLASS_SUCCEEDED, CLASS_SUCCEEDED},
    {299, CLASS_SUCCEEDED, CLASS_SUCCEEDED},
    {408, CLASS_RETRY_LATER, CLASS_RETRY_LATER},
    {425, CLASS_RETRY_LATER, CLASS_RETRY_LATER},
    {429, CLASS_RETRY_LATER, CLASS_RETRY_LATER},
    {409, CLASS_RETRY_LATER, CLASS_PERMANENT_FAILURE},
    {422, CLASS_KEY_CONFLICT, CLASS_KEY_CONFLICT},
    {400, CLASS_PERMANENT_FAILURE, CLASS_PERMANENT_FAILURE},
    {401, CLASS_PERMANENT_FAILURE, CLASS_PERMANENT_FAILURE},
    {403, CLASS_PERMANENT_FAILURE, CLASS_PERMANENT_FAILURE},
    {404, CLASS_PERMANENT_FAILURE, CLASS_PERMANENT_FAILURE},
    /* processed and refused: the intent fails; flow.c decides if the endpoint is gone */
    {410, CLASS_PERMANENT_FAILURE, CLASS_PERMANENT_FAILURE},
    {499, CLASS_PERMANENT_FAILURE, CLASS_PERMANENT_FAILURE},
    {500, CLASS_AMBIGUOUS, CLASS_AMBIGUOUS},
    {502, CLASS_AMBIGUOUS, CLASS_AMBIGUOUS},
    {503, CLASS_AMBIGUOUS, CLASS_AMBIGUOUS},
    {504, CLASS_AMBIGUOUS, CLASS_AMBIGUOUS},
    {599, CLASS_AMBIGUOUS, CLASS_AMBIGUOUS},
    /* redirects are not followed; a 303 after a POST usually means it ran */
    {301, CLASS_AMBIGUOUS, CLASS_AMBIGUOUS},
    {303, CLASS_AMBIGUOUS, CLASS_AMBIGUOUS},
    {100, CLASS_AMBIGUOUS, CLASS_AMBIGUOUS},
    {0, CLASS_AMBIGUOUS, CLASS_AMBIGUOUS},
};
#define STATUS_ROWS ((int)(sizeof(status_table) / sizeof(status_table[0])))

START_TEST(classify_status_table)
{
    const struct status_row *row = &status_table[_i];
    ck_assert_msg(classify_status(row->status, true) == row->with_keys,
                  "HTTP %ld (target honours keys): got %s, expected %s", row->status,
                  outcome_class_name(classify_status(row->status, true)),
                  outcome_class_name(row->with_keys));
    ck_assert_msg(classify_status(row->status, false) == row->without_keys,
                  "HTTP %ld (target without keys): got %s, expected %s", row->status,
                  outcome_class_name(classify_status(row->status, false)),
                  outcome_class_name(row->without_keys));
}
END_TEST

/* Every status from 100 to 599, against the docs/design.md table stated by ranges. */
START_TEST(classify_every_status)
{
    for (long s = 100; s <= 599; s++) {
        for (int keys = 0; keys < 2; keys++) {
            enum attempt_class expected;
            if (s >= 200 && s <= 299)
                expected = CLASS_SUCCEEDED;
            else if (s == 408 || s == 425 || s == 429 || (s == 409 && keys))
                expected = CLASS_RETRY_LATER;
            else if (s == 422)
                expected = CLASS_KEY_CONFLICT;
            else if (s >= 400 && s <= 499)
                expected = CLASS_PERMANENT_FAILURE;
            else
                expected = CLASS_AMBIGUOUS;
            enum attempt_class got = classify_status(s, keys);
            ck_assert_msg(got == expected, "HTTP %ld keys=%d: got %s, expected %s", s, keys,
                          outcome_class_name(got), outcome_class_name(expected));
        }
    }
}
END_TEST

/* ---------------------------------------------------------------- decide */

START_TEST(decide_succeeded)
{
    struct retry_policy p = keyed_policy();
    struct intent_progress pr = progress_at(1, false);
    struct decision d = outcome_decide(CLASS_SUCCEEDED, &p, &pr, 0.5);
    ck_assert_int_eq(d.next_state, STATE_SUCCEEDED);
    ck_assert(!d.ambiguous);

    /* a success after an ambiguous attempt is a success; the flag stays */
    pr = progress_at(3, true);
    d = outcome_decide(CLASS_SUCCEEDED, &p, &pr, 0.5);
    ck_assert_int_eq(d.next_state, STATE_SUCCEEDED);
    ck_assert(d.ambiguous);

    /* even on the last attempt, and on a target without keys */
    p = keyless_policy();
    pr = progress_at(p.max_attempts, false);
    d = outcome_decide(CLASS_SUCCEEDED, &p, &pr, 0.5);
    ck_assert_int_eq(d.next_state, STATE_SUCCEEDED);
}
END_TEST

START_TEST(decide_permanent_and_key_conflict)
{
    const enum attempt_class classes[] = {CLASS_PERMANENT_FAILURE, CLASS_KEY_CONFLICT};
    for (int c = 0; c < 2; c++) {
        for (int keys = 0; keys < 2; keys++) {
            struct retry_policy p = keys ? keyed_policy() : keyless_policy();
            struct intent_progress pr = progress_at(1, false);
            struct decision d = outcome_decide(classes[c], &p, &pr, 0.5);
            ck_assert_msg(d.next_state == STATE_FAILED, "%s, first attempt: got %s",
                          outcome_class_name(classes[c]), outcome_state_name(d.next_state));
            ck_assert(!d.ambiguous);

            /* an earlier attempt may have executed: never failed */
            pr = progress_at(2, true);
            d = outcome_decide(classes[c], &p, &pr, 0.5);
            ck_assert_msg(d.next_state == STATE_UNKNOWN, "%s after ambiguous: got %s",
                          outcome_class_name(classes[c]), outcome_state_name(d.next_state));
            ck_assert(d.ambiguous);
            ck_assert_int_eq(d.delay_ms, p.reconcile_delay_ms);
        }
    }
}
END_TEST

/* A 410 fails the intent it answered at once, with attempts and time left,
 * and is never pending again (no retry); after an earlier ambiguous attempt
 * it is unknown, as any 4xx. */
START_TEST(decide_gone_fails_the_intent)
{
    for (int keys = 0; keys < 2; keys++) {
        struct retry_policy p = keys ? keyed_policy() : keyless_policy();
        struct attempt_facts facts = {
            .transport = TRANSPORT_COMPLETE, .http_status = 410, .honours_keys = keys};
        enum attempt_class cls = outcome_classify(&facts);
        ck_assert_int_eq(cls, CLASS_PERMANENT_FAILURE);
        struct intent_progress pr = progress_at(1, false);
        struct decision d = outcome_decide(cls, &p, &pr, 0.5);
        ck_assert_msg(d.next_state == STATE_FAILED, "410, first attempt: got %s",
                      outcome_state_name(d.next_state));
        ck_assert(!d.ambiguous);
        pr = progress_at(2, true);
        d = outcome_decide(cls, &p, &pr, 0.5);
        ck_assert_int_eq(d.next_state, STATE_UNKNOWN);
        ck_assert(d.ambiguous);
    }
}
END_TEST

START_TEST(decide_not_sent_and_retry_later_back_off)
{
    const enum attempt_class classes[] = {CLASS_NOT_SENT, CLASS_RETRY_LATER};
    for (int c = 0; c < 2; c++) {
        for (int keys = 0; keys < 2; keys++) {
            struct retry_policy p = keys ? keyed_policy() : keyless_policy();
            /* base 100: attempt 1 → ceiling 100, attempt 3 → 400; random 0.5 */
            struct intent_progress pr = progress_at(1, false);
            struct decision d = outcome_decide(classes[c], &p, &pr, 0.5);
            ck_assert_int_eq(d.next_state, STATE_PENDING);
            ck_assert_int_eq(d.delay_ms, 50);
            ck_assert(!d.ambiguous);

            pr = progress_at(3, false);
            d = outcome_decide(classes[c], &p, &pr, 0.5);
            ck_assert_int_eq(d.next_state, STATE_PENDING);
            ck_assert_int_eq(d.delay_ms, 200);
            ck_assert_int_eq(d.delay_ms, outcome_backoff_ms(3, 100, 10000, 0.5));

            d = outcome_decide(classes[c], &p, &pr, 0.0);
            ck_assert_int_eq(d.delay_ms, 0);
        }
    }
}
END_TEST

START_TEST(decide_retry_after_wins_when_larger)
{
    struct retry_policy p = keyed_policy();
    struct intent_progress pr = progress_at(3, false); /* back-off 200 at 0.5 */
    pr.retry_after_ms = 5000;
    struct decision d = outcome_decide(CLASS_RETRY_LATER, &p, &pr, 0.5);
    ck_assert_int_eq(d.next_state, STATE_PENDING);
    ck_assert_int_eq(d.delay_ms, 5000);

    pr.retry_after_ms = 10; /* smaller than the back-off: the back-off stays */
    d = outcome_decide(CLASS_RETRY_LATER, &p, &pr, 0.5);
    ck_assert_int_eq(d.delay_ms, 200);

    pr.retry_after_ms = 0;
    d = outcome_decide(CLASS_NOT_SENT, &p, &pr, 0.5);
    ck_assert_int_eq(d.delay_ms, 200);

    /* a delay that does not fit an int is capped at one day */
    pr.retry_after_ms = INT64_C(1) << 40;
    d = outcome_decide(CLASS_RETRY_LATER, &p, &pr, 0.5);
    ck_assert_int_eq(d.next_state, STATE_PENDING);
    ck_assert_int_eq(d.delay_ms, 86400000);
}
END_TEST

START_TEST(decide_exhausted)
{
    const enum attempt_class classes[] = {CLASS_NOT_SENT, CLASS_RETRY_LATER};
    for (int c = 0; c < 2; c++) {
        for (int keys = 0; keys < 2; keys++) {
            struct retry_policy p = keys ? keyed_policy() : keyless_policy();
            struct intent_progress pr = progress_at(p.max_attempts, false);
            struct decision d = outcome_decide(classes[c], &p, &pr, 0.5);
            ck_assert_msg(d.next_state == STATE_FAILED, "%s exhausted, keys=%d: got %s",
                          outcome_class_name(classes[c]), keys, outcome_state_name(d.next_state));
            ck_assert(!d.ambiguous);

            pr = progress_at(p.max_attempts, true);
            d = outcome_decide(classes[c], &p, &pr, 0.5);
            ck_assert_msg(d.next_state == STATE_UNKNOWN,
                          "%s exhausted after an ambiguous attempt, keys=%d: got %s",
                          outcome_class_name(classes[c]), keys, outcome_state_name(d.next_state));
            ck_assert(d.ambiguous);
        }
    }
    /* max_attempts 1: the first attempt is the last */
    struct retry_policy one = keyed_policy();
    one.max_attempts = 1;
    struct intent_progress pr = progress_at(1, false);
    ck_assert_int_eq(outcome_decide(CLASS_NOT_SENT, &one, &pr, 0.5).next_state, STATE_FAILED);
}
END_TEST

START_TEST(decide_ambiguous_keyed_young_retries_same_key)
{
    struct retry_policy p = keyed_policy();
    struct intent_progress pr = progress_at(1, false);
    struct decision d = outcome_decide(CLASS_AMBIGUOUS, &p, &pr, 0.5);
    ck_assert_int_eq(d.next_state, STATE_PENDING);
    ck_assert(d.ambiguous);
    ck_assert_int_eq(d.delay_ms, 50);

    pr = progress_at(3, true);
    pr.now_ms = T0 + p.key_ttl_ms - 120000; /* still young (past the 1 min clock margin) */
    d = outcome_decide(CLASS_AMBIGUOUS, &p, &pr, 0.5);
    ck_assert_int_eq(d.next_state, STATE_PENDING);
    ck_assert(d.ambiguous);
    ck_assert_int_eq(d.delay_ms, 200);
}
END_TEST

START_TEST(decide_ambiguous_without_key_header_is_unknown)
{
    struct retry_policy p = keyless_policy();
    for (int attempt = 1; attempt <= p.max_attempts; attempt++) {
        struct intent_progress pr = progress_at(attempt, false);
        struct decision d = outcome_decide(CLASS_AMBIGUOUS, &p, &pr, 0.5);
        ck_assert_int_eq(d.next_state, STATE_UNKNOWN);
        ck_assert(d.ambiguous);
        ck_assert_int_eq(d.delay_ms, p.reconcile_delay_ms);
    }
}
END_TEST

START_TEST(decide_ambiguous_key_expired_is_unknown)
{
    struct retry_policy p = keyed_policy();
    struct intent_progress pr = progress_at(2, false);
    pr.now_ms = T0 + p.key_ttl_ms; /* exactly key_ttl old: the key may be gone */
    struct decision d = outcome_decide(CLASS_AMBIGUOUS, &p, &pr, 0.5);
    ck_assert_int_eq(d.next_state, STATE_UNKNOWN);
    ck_assert(d.ambiguous);
    ck_assert_int_eq(d.delay_ms, p.reconcile_delay_ms);

    pr.now_ms = T0 + 10 * p.key_ttl_ms;
    d = outcome_decide(CLASS_AMBIGUOUS, &p, &pr, 0.5);
    ck_assert_int_eq(d.next_state, STATE_UNKNOWN);
}
END_TEST

START_TEST(decide_ambiguous_exhausted_is_unknown)
{
    struct retry_policy p = keyed_policy();
    for (int was = 0; was < 2; was++) {
        struct intent_progress pr = progress_at(p.max_attempts, was);
        struct decision d = outcome_decide(CLASS_AMBIGUOUS, &p, &pr, 0.5);
        ck_assert_int_eq(d.next_state, STATE_UNKNOWN);
        ck_assert(d.ambiguous);
        ck_assert_int_eq(d.delay_ms, p.reconcile_delay_ms);
    }
}
END_TEST

/* The core invariant, over every combination. */
START_TEST(decide_invariant_never_failed_if_maybe_executed)
{
    for (int c = 0; c < TESTED_CLASS_COUNT; c++) {
        for (int keys = 0; keys < 2; keys++) {
            for (int was = 0; was < 2; was++) {
                struct retry_policy p = keys ? keyed_policy() : keyless_policy();
                for (int attempt = 1; attempt <= p.max_attempts; attempt++) {
                    struct intent_progress pr = progress_at(attempt, was);
                    for (int r = 0; r < 3; r++) {
                        double unit = r == 0 ? 0.0 : r == 1 ? 0.5 : 0.999;
                        enum attempt_class cls = all_classes[c];
                        struct decision d = outcome_decide(cls, &p, &pr, unit);
                        if (cls == CLASS_AMBIGUOUS || was) {
                            ck_assert_msg(d.next_state != STATE_FAILED,
                                          "%s keys=%d was_ambiguous=%d attempt %d: failed",
                                          outcome_class_name(cls), keys, was, attempt);
                            ck_assert_msg(d.ambiguous, "%s was_ambiguous=%d: flag lost",
                                          outcome_class_name(cls), was);
                        }
                        if (cls == CLASS_AMBIGUOUS && !keys)
                            ck_assert_msg(d.next_state != STATE_PENDING,
                                          "ambiguous on a keyless target, attempt %d: re-sent",
                                          attempt);
                        if (d.next_state == STATE_PENDING) {
                            ck_assert_int_lt(attempt, p.max_attempts);
                            ck_assert_int_ge(d.delay_ms, 0);
                        }
                        if (cls == CLASS_SUCCEEDED)
                            ck_assert_int_eq(d.next_state, STATE_SUCCEEDED);
                    }
                }
            }
        }
    }
}
END_TEST

/*
 * docs/design.md, "What follows from ambiguous": same key again only while
 * the first attempt is younger than key_ttl; otherwise (key may have
 * expired) no blind retry, state unknown. An intent that is already flagged
 * ambiguous and then gets a not_sent or retry_later answer is still an
 * intent that may have executed: once its key may have expired at the
 * target, re-sending it is exactly the blind retry docs/design.md forbids.
 */
START_TEST(decide_after_ambiguous_key_expired_no_resend)
{
    const enum attempt_class classes[] = {CLASS_NOT_SENT, CLASS_RETRY_LATER};
    for (int c = 0; c < 2; c++) {
        struct retry_policy p = keyed_policy();
        struct intent_progress pr = progress_at(2, true);
        pr.now_ms = T0 + p.key_ttl_ms + 1;
        struct decision d = outcome_decide(classes[c], &p, &pr, 0.5);
        ck_assert_msg(d.next_state == STATE_UNKNOWN,
                      "%s after an ambiguous attempt, key %lld ms past key_ttl, attempt 2 of %d: "
                      "got %s (a re-send with a key the target may have forgotten), expected "
                      "unknown",
                      outcome_class_name(classes[c]), (long long)(pr.now_ms - T0 - p.key_ttl_ms),
                      p.max_attempts, outcome_state_name(d.next_state));
        ck_assert(d.ambiguous);
    }
}
END_TEST

/*
 * The same rule at the time the retry is actually sent: claim does not look
 * at key_ttl again, so a pending decision for an intent that may have
 * executed must not schedule the same-key re-send at or after the key's
 * expiry (e.g. an ambiguous 503 with "Retry-After: 3600" one second before
 * key_ttl runs out).
 */
START_TEST(decide_same_key_retry_not_scheduled_past_key_ttl)
{
    struct {
        enum attempt_class cls;
        bool was_ambiguous;
    } cases[] = {
        {CLASS_AMBIGUOUS, false},
        {CLASS_AMBIGUOUS, true},
        {CLASS_NOT_SENT, true},
        {CLASS_RETRY_LATER, true},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct retry_policy p = keyed_policy();
        struct intent_progress pr = progress_at(2, cases[i].was_ambiguous);
        pr.now_ms = T0 + p.key_ttl_ms - 1000; /* key alive for one more second */
        pr.retry_after_ms = 3600000;
        struct decision d = outcome_decide(cases[i].cls, &p, &pr, 0.5);
        int64_t resend_age = pr.now_ms + d.delay_ms - T0;
        ck_assert_msg(d.next_state != STATE_PENDING || resend_age < p.key_ttl_ms,
                      "%s (was_ambiguous=%d), 1 s of key_ttl left, Retry-After 1 h: pending with "
                      "delay %d ms, so the same-key re-send goes out %lld ms after the key may "
                      "have expired",
                      outcome_class_name(cases[i].cls), cases[i].was_ambiguous, d.delay_ms,
                      (long long)(resend_age - p.key_ttl_ms));
    }
}
END_TEST

/* ---------------------------------------------------------------- backoff */

START_TEST(backoff_full_jitter_bounds)
{
    const int base = 100, cap = 10000;
    for (int attempt = 1; attempt <= 30; attempt++) {
        int64_t ceiling = base;
        for (int i = 1; i < attempt && ceiling < cap; i++)
            ceiling *= 2;
        if (ceiling > cap)
            ceiling = cap;
        for (int step = 0; step < 100; step++) {
            double unit = step / 100.0;
            int ms = outcome_backoff_ms(attempt, base, cap, unit);
            ck_assert_int_ge(ms, 0);
            ck_assert_msg(ms < ceiling, "attempt %d unit %.2f: %d not below %lld", attempt, unit,
                          ms, (long long)ceiling);
        }
        /* as close to 1 as a double gets: still below the ceiling */
        ck_assert_int_lt(outcome_backoff_ms(attempt, base, cap, 0.9999999999), ceiling);
    }
}
END_TEST

START_TEST(backoff_exact_values)
{
    ck_assert_int_eq(outcome_backoff_ms(1, 100, 10000, 0.0), 0);
    ck_assert_int_eq(outcome_backoff_ms(7, 100, 10000, 0.0), 0);
    ck_assert_int_eq(outcome_backoff_ms(3, 100, 10000, 0.5), 200);
    ck_assert_int_eq(outcome_backoff_ms(1, 100, 10000, 0.5), 50);
    ck_assert_int_eq(outcome_backoff_ms(2, 100, 10000, 0.5), 100);
    ck_assert_int_eq(outcome_backoff_ms(8, 100, 10000, 0.5), 5000); /* 12800 capped at 10000 */
    /* out-of-range random units are clamped into [0, 1) */
    ck_assert_int_eq(outcome_backoff_ms(3, 100, 10000, -0.5), 0);
    ck_assert_int_lt(outcome_backoff_ms(3, 100, 10000, 1.0), 400);
    ck_assert_int_lt(outcome_backoff_ms(3, 100, 10000, 7.0), 400);
}
END_TEST

START_TEST(backoff_cap_and_no_overflow)
{
    /* 100 * 2^59 overflows any integer; the cap must hold */
    for (int attempt = 30; attempt <= 64; attempt++) {
        int ms = outcome_backoff_ms(attempt, 100, 300000, 0.999);
        ck_assert_int_ge(ms, 0);
        ck_assert_int_lt(ms, 300000);
        ck_assert_int_ge(ms, 299000);
        ck_assert_int_eq(outcome_backoff_ms(attempt, 100, 300000, 0.5), 150000);
    }
    /* the largest cap the schema allows (one day), a huge attempt number */
    int ms = outcome_backoff_ms(1000, 3600000, 86400000, 0.5);
    ck_assert_int_eq(ms, 43200000);
    ms = outcome_backoff_ms(1000000, 1, 86400000, 0.999999);
    ck_assert_int_ge(ms, 0);
    ck_assert_int_lt(ms, 86400000);
}
END_TEST

/* ---------------------------------------------------------------- retry-after */

START_TEST(retry_after_seconds)
{
    ck_assert_int_eq(outcome_parse_retry_after("1", T0), 1000);
    ck_assert_int_eq(outcome_parse_retry_after(" 120 ", T0), 120000);
    ck_assert_int_eq(outcome_parse_retry_after("0", T0), 0);
    ck_assert_int_eq(outcome_parse_retry_after("86400", T0), 86400000);
    ck_assert_int_eq(outcome_parse_retry_after("\t30\t", T0), 30000);
}
END_TEST

START_TEST(retry_after_invalid)
{
    const char *bad[] = {"-1", "abc", "", "   ", "1.5", "12abc", "5 s", "+5", "0x10", "one"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(outcome_parse_retry_after(bad[i], T0) == -1, "'%s': got %lld", bad[i],
                      (long long)outcome_parse_retry_after(bad[i], T0));
    ck_assert_int_eq(outcome_parse_retry_after(NULL, T0), -1);
}
END_TEST

START_TEST(retry_after_huge_is_capped)
{
    ck_assert_int_eq(outcome_parse_retry_after("86401", T0), 86400000);
    ck_assert_int_eq(outcome_parse_retry_after("99999999999", T0), 86400000);
    /* beyond long long: strtoll saturates, still capped */
    ck_assert_int_eq(outcome_parse_retry_after("99999999999999999999999999", T0), 86400000);
}
END_TEST

START_TEST(retry_after_http_date)
{
    const int64_t at = INT64_C(784111777) * 1000; /* Sun, 06 Nov 1994 08:49:37 GMT */
    const char *date = "Sun, 06 Nov 1994 08:49:37 GMT";
    ck_assert_int_eq(outcome_parse_retry_after(date, at - 10000), 10000);
    ck_assert_int_eq(outcome_parse_retry_after(date, at), 0);
    /* in the past: retry now */
    ck_assert_int_eq(outcome_parse_retry_after(date, at + 5000), 0);
    ck_assert_int_eq(outcome_parse_retry_after(date, T0), 0);
    /* far in the future: capped at a day */
    ck_assert_int_eq(outcome_parse_retry_after(date, at - 10 * DAY_MS), 86400000);
    /* surrounding whitespace as it may come out of the header callback */
    ck_assert_int_eq(outcome_parse_retry_after("  Sun, 06 Nov 1994 08:49:37 GMT", at - 2000), 2000);
    /* a malformed date is ignored */
    ck_assert_int_eq(outcome_parse_retry_after("Sun, 32 Nov 1994 08:49:37 GMT", at), -1);
    ck_assert_int_eq(outcome_parse_retry_after("Sun, 06 Nov 1994", at), -1);
}
END_TEST

/* ---------------------------------------------------------------- names */

START_TEST(class_names_match_sql_enum)
{
    ck_assert_str_eq(outcome_class_name(CLASS_NOT_SENT), "not_sent");
    ck_assert_str_eq(outcome_class_name(CLASS_AMBIGUOUS), "ambiguous");
    ck_assert_str_eq(outcome_class_name(CLASS_SUCCEEDED), "succeeded");
    ck_assert_str_eq(outcome_class_name(CLASS_RETRY_LATER), "retry_later");
    ck_assert_str_eq(outcome_class_name(CLASS_KEY_CONFLICT), "key_conflict");
    ck_assert_str_eq(outcome_class_name(CLASS_PERMANENT_FAILURE), "permanent_failure");
}
END_TEST

START_TEST(state_names_match_sql_enum)
{
    ck_assert_str_eq(outcome_state_name(STATE_PENDING), "pending");
    ck_assert_str_eq(outcome_state_name(STATE_SUCCEEDED), "succeeded");
    ck_assert_str_eq(outcome_state_name(STATE_FAILED), "failed");
    ck_assert_str_eq(outcome_state_name(STATE_UNKNOWN), "unknown");
}
END_TEST

/* ---------------------------------------------------------------- retry horizon */

/* No cap on attempts: a target that keeps refusing connections is retried
 * while retry_for lasts, whatever the attempt number. */
START_TEST(decide_horizon_is_time_without_a_cap)
{
    struct retry_policy p = keyed_policy();
    p.max_attempts = 0;
    p.retry_for_ms = 3 * DAY_MS;
    struct intent_progress pr = progress_at(500, false);
    pr.now_ms = T0 + 2 * DAY_MS;
    struct decision d = outcome_decide(CLASS_NOT_SENT, &p, &pr, 0.5);
    ck_assert_int_eq(d.next_state, STATE_PENDING);
    pr.now_ms = T0 + 3 * DAY_MS - 1000;
    d = outcome_decide(CLASS_NOT_SENT, &p, &pr, 0.99);
    ck_assert_msg(d.next_state == STATE_FAILED,
                  "a retry that would go after retry_for is not scheduled: failed (none sent)");
    ck_assert(strcmp(outcome_state_name(d.next_state), "failed") == 0);
}
END_TEST

/* The optional cap still ends retries early, and a retry horizon that ran
 * out never turns a maybe-executed intent into failed. */
START_TEST(decide_horizon_cap_and_ambiguity)
{
    struct retry_policy p = keyed_policy();
    p.max_attempts = 3;
    p.retry_for_ms = 3 * DAY_MS;
    struct intent_progress pr = progress_at(3, false);
    ck_assert_int_eq(outcome_decide(CLASS_RETRY_LATER, &p, &pr, 0.5).next_state, STATE_FAILED);
    pr = progress_at(2, false);
    ck_assert_int_eq(outcome_decide(CLASS_RETRY_LATER, &p, &pr, 0.5).next_state, STATE_PENDING);
    p.max_attempts = 0;
    p.key_ttl_ms = 10 * DAY_MS;
    pr = progress_at(40, true);
    pr.now_ms = T0 + 4 * DAY_MS;
    ck_assert_int_eq(outcome_decide(CLASS_NOT_SENT, &p, &pr, 0.5).next_state, STATE_UNKNOWN);
}
END_TEST

/* The status URL says nothing executed: pending again while the horizon
 * lasts (no cap), failed after it. */
START_TEST(decide_reconciled_not_executed_uses_horizon)
{
    struct retry_policy p = keyless_policy();
    p.max_attempts = 0;
    p.retry_for_ms = DAY_MS;
    struct intent_progress pr = progress_at(12, true);
    ck_assert_int_eq(outcome_decide(CLASS_RECONCILED_NOT_EXECUTED, &p, &pr, 0.5).next_state,
                     STATE_PENDING);
    pr.now_ms = T0 + DAY_MS;
    ck_assert_int_eq(outcome_decide(CLASS_RECONCILED_NOT_EXECUTED, &p, &pr, 0.5).next_state,
                     STATE_FAILED);
}
END_TEST

/* Key age compares the database's clock with this host's: a key counts as
 * forgotten 5 % of key_ttl (at most a minute) early. */
START_TEST(resend_keeps_a_clock_margin)
{
    ck_assert_int_eq(outcome_clock_margin_ms(DAY_MS), 60000);
    ck_assert_int_eq(outcome_clock_margin_ms(600000), 30000);
    struct retry_policy p = keyed_policy();
    int64_t margin = outcome_clock_margin_ms(p.key_ttl_ms);
    ck_assert(outcome_resend_allowed(&p, true, T0, T0 + p.key_ttl_ms - margin - 1));
    ck_assert_msg(!outcome_resend_allowed(&p, true, T0, T0 + p.key_ttl_ms - margin),
                  "within the margin of key_ttl: not re-sent (clocks may disagree)");
    ck_assert(outcome_resend_allowed(&p, false, T0, T0 + 10 * p.key_ttl_ms));
    struct intent_progress pr = progress_at(2, true);
    pr.now_ms = T0 + p.key_ttl_ms - margin - 1;
    struct decision d = outcome_decide(CLASS_AMBIGUOUS, &p, &pr, 0.0);
    ck_assert_int_eq(d.next_state, STATE_PENDING);
    pr.now_ms = T0 + p.key_ttl_ms - margin + 1;
    d = outcome_decide(CLASS_AMBIGUOUS, &p, &pr, 0.0);
    ck_assert_int_eq(d.next_state, STATE_UNKNOWN);
}
END_TEST

/* ---------------------------------------------------------------- decisions without a request */

/* A row that may have executed and whose key the target may have
 * forgotten is never re-sent: unknown, after the reconcile delay. */
START_TEST(not_resent_is_unknown_and_ambiguous)
{
    struct retry_policy p = keyed_policy();
    struct decision d = outcome_decide_not_resent(&p);
    ck_assert_int_eq(d.next_state, STATE_UNKNOWN);
    ck_assert(d.ambiguous);
    ck_assert_int_eq(d.delay_ms, p.reconcile_delay_ms);
    ck_assert_ptr_nonnull(strstr(OUTCOME_NOT_RESENT_REASON, "not re-sent"));
}
END_TEST

/* A take-over is an ambiguous attempt: same key again where the target
 * remembers it, unknown otherwise, and unknown for a target this relay
 * does not know (no policy). */
START_TEST(taken_over_decided_as_ambiguous)
{
    struct retry_policy keyed = keyed_policy(), keyless = keyless_policy();
    struct intent_progress pr = progress_at(1, false);
    struct decision d = outcome_decide_taken_over(&keyed, &pr, 0.5);
    ck_assert_int_eq(d.next_state, STATE_PENDING);
    ck_assert(d.ambiguous);
    d = outcome_decide_taken_over(&keyless, &pr, 0.5);
    ck_assert_int_eq(d.next_state, STATE_UNKNOWN);
    ck_assert(d.ambiguous);
    d = outcome_decide_taken_over(NULL, &pr, 0.5);
    ck_assert_int_eq(d.next_state, STATE_UNKNOWN);
    ck_assert(d.ambiguous);
    char text[128];
    outcome_taken_over_text(text, sizeof(text), "host-a:42");
    ck_assert_str_eq(
        text, "lease of relay host-a:42 expired while in flight: the request may have executed");
    outcome_taken_over_text(text, 16, "host-a:42");
    ck_assert_uint_eq(strlen(text), 15); /* cut, never overflowed */
}
END_TEST

/* More than half the lease between the claim's start and its answer: the
 * rows go back unsent. */
START_TEST(claim_answer_late_after_half_the_lease)
{
    ck_assert(!outcome_claim_answer_late(0, 30000));
    ck_assert(!outcome_claim_answer_late(15000, 30000));
    ck_assert(outcome_claim_answer_late(15001, 30000));
    ck_assert(!outcome_claim_answer_late(500, 1001)); /* half of 1001 is 500 */
    ck_assert(outcome_claim_answer_late(501, 1001));
}
END_TEST

/* ---------------------------------------------------------------- error texts */

static const char *error_text(enum attempt_class cls, enum intent_state next, int attempt,
                              long status, const char *transport, char *buf, size_t size)
{
    struct decision d = {.next_state = next};
    return outcome_error_text(cls, &d, attempt, status, transport, buf, size);
}

START_TEST(error_text_by_class_and_state)
{
    char buf[256];
    /* The status URL settled the doubt: no error, unless no attempt is left. */
    ck_assert_ptr_null(
        error_text(CLASS_RECONCILED_EXECUTED, STATE_SUCCEEDED, 2, 200, "", buf, sizeof(buf)));
    ck_assert_ptr_null(
        error_text(CLASS_RECONCILED_NOT_EXECUTED, STATE_PENDING, 2, 404, "", buf, sizeof(buf)));
    ck_assert_str_eq(
        error_text(CLASS_RECONCILED_NOT_EXECUTED, STATE_FAILED, 5, 404, "", buf, sizeof(buf)),
        "the status URL says no attempt executed, and all 5 attempts are used");
    /* Out of attempts without reaching the target: says so, with the last error. */
    ck_assert_str_eq(
        error_text(CLASS_NOT_SENT, STATE_FAILED, 3, 0, "Connection refused", buf, sizeof(buf)),
        "not delivered after 3 attempt(s), none reached the target; last: "
        "Connection refused");
    ck_assert_str_eq(
        error_text(CLASS_RETRY_LATER, STATE_FAILED, 4, 429, "HTTP 429", buf, sizeof(buf)),
        "not delivered after 4 attempt(s), none reached the target; last: HTTP 429");
    /* A key conflict names the status, whatever follows. */
    ck_assert_str_eq(
        error_text(CLASS_KEY_CONFLICT, STATE_FAILED, 1, 422, "HTTP 422", buf, sizeof(buf)),
        "key conflict: the target answered HTTP 422");
    ck_assert_str_eq(
        error_text(CLASS_KEY_CONFLICT, STATE_UNKNOWN, 2, 422, "HTTP 422", buf, sizeof(buf)),
        "key conflict: the target answered HTTP 422");
    /* A 410 names itself, and says it is not retried, whatever follows. */
    const char *gone = "HTTP 410 Gone: the target refused this intent as gone (it did not act); "
                       "a 410 is not retried";
    ck_assert_str_eq(
        error_text(CLASS_PERMANENT_FAILURE, STATE_FAILED, 1, 410, "HTTP 410", buf, sizeof(buf)),
        gone);
    ck_assert_str_eq(
        error_text(CLASS_PERMANENT_FAILURE, STATE_UNKNOWN, 2, 410, "HTTP 410", buf, sizeof(buf)),
        gone);
    /* Everything else keeps the transport's text as it is. */
    const char *transport = "HTTP 400";
    ck_assert_ptr_eq(
        error_text(CLASS_PERMANENT_FAILURE, STATE_FAILED, 1, 400, transport, buf, sizeof(buf)),
        transport);
    transport = "Timeout was reached: no detail";
    ck_assert_ptr_eq(error_text(CLASS_AMBIGUOUS, STATE_PENDING, 1, 0, transport, buf, sizeof(buf)),
                     transport);
    ck_assert_ptr_eq(error_text(CLASS_NOT_SENT, STATE_PENDING, 1, 0, transport, buf, sizeof(buf)),
                     transport);
}
END_TEST

START_TEST(names_of_values_out_of_range)
{
    ck_assert_str_eq(outcome_class_name((enum attempt_class)CLASS_COUNT), "ambiguous");
    ck_assert_str_eq(outcome_class_name((enum attempt_class) - 1), "ambiguous");
    ck_assert_str_eq(outcome_state_name((enum intent_state)(STATE_UNKNOWN + 1)), "unknown");
}
END_TEST

/* A failed circuit probe is evidence about the target: never sent, the row
 * goes back with its attempt; "try later", it is counted but never fails
 * the intent; anything else is decided as any attempt. */
START_TEST(probe_failure_spares_the_intent)
{
    struct decision failed = {.next_state = STATE_FAILED, .delay_ms = 0, .ambiguous = false};
    struct decision d = failed;
    ck_assert_int_eq(outcome_probe_failed(CLASS_NOT_SENT, false, &d), PROBE_GIVE_BACK);
    d = failed;
    ck_assert_int_eq(outcome_probe_failed(CLASS_RETRY_LATER, true, &d), PROBE_SPARED);
    ck_assert_int_eq(d.next_state, STATE_PENDING);
    ck_assert_int_eq(d.delay_ms, 0);
    struct decision ambiguous_failed = {.next_state = STATE_FAILED, .ambiguous = true};
    d = ambiguous_failed;
    ck_assert_int_eq(outcome_probe_failed(CLASS_RETRY_LATER, true, &d), PROBE_SPARED);
    ck_assert(d.ambiguous); /* an earlier attempt's doubt is kept */
    struct decision pending = {.next_state = STATE_PENDING, .delay_ms = 1234};
    d = pending;
    ck_assert_int_eq(outcome_probe_failed(CLASS_RETRY_LATER, true, &d), PROBE_AS_ANY);
    ck_assert_int_eq(d.delay_ms, 1234); /* attempts left: its own back-off */
    d = failed;
    ck_assert_int_eq(outcome_probe_failed(CLASS_PERMANENT_FAILURE, true, &d), PROBE_AS_ANY);
    ck_assert_int_eq(d.next_state, STATE_FAILED); /* about the intent itself */
    struct decision unknown = {.next_state = STATE_UNKNOWN, .ambiguous = true};
    d = unknown;
    ck_assert_int_eq(outcome_probe_failed(CLASS_AMBIGUOUS, true, &d), PROBE_AS_ANY);
    ck_assert_int_eq(d.next_state, STATE_UNKNOWN);
    d = failed;
    ck_assert_int_eq(outcome_probe_failed(CLASS_SUCCEEDED, true, &d), PROBE_AS_ANY);
}
END_TEST

/* ---------------------------------------------------------------- MCP targets */

static struct attempt_facts mcp_facts(long http, enum mcp_answer_kind kind, long code)
{
    struct attempt_facts f = {.transport = TRANSPORT_COMPLETE,
                              .http_status = http,
                              .mcp = true,
                              .mcp_answer = kind,
                              .rpc_code = code};
    return f;
}

/* docs/design.md, "The gateway's reach (fourth round)": the table, row by row. */
START_TEST(classify_mcp_table)
{
    struct attempt_facts f = mcp_facts(200, MCP_ANSWER_RESULT, 0);
    ck_assert_int_eq(outcome_classify(&f), CLASS_SUCCEEDED);
    f = mcp_facts(200, MCP_ANSWER_TOOL_ERROR, 0);
    ck_assert_int_eq(outcome_classify(&f), CLASS_PERMANENT_FAILURE);
    long not_executed[] = {-32700, -32600, -32601, -32602};
    for (size_t i = 0; i < 4; i++) {
        f = mcp_facts(200, MCP_ANSWER_RPC_ERROR, not_executed[i]);
        ck_assert_int_eq(outcome_classify(&f), CLASS_PERMANENT_FAILURE);
        ck_assert(outcome_rpc_code_not_executed(not_executed[i]));
    }
    long maybe[] = {-32603, -32000, -32001, 1, 0};
    for (size_t i = 0; i < 5; i++) {
        f = mcp_facts(200, MCP_ANSWER_RPC_ERROR, maybe[i]);
        ck_assert_int_eq(outcome_classify(&f), CLASS_AMBIGUOUS);
        ck_assert(!outcome_rpc_code_not_executed(maybe[i]));
    }
    /* a 2xx whose stream ended without the call's answer */
    f = mcp_facts(200, MCP_ANSWER_NONE, 0);
    ck_assert_int_eq(outcome_classify(&f), CLASS_AMBIGUOUS);
    f = mcp_facts(202, MCP_ANSWER_NONE, 0);
    ck_assert_int_eq(outcome_classify(&f), CLASS_AMBIGUOUS);
    /* a chained front door whose own call is not final yet */
    f = mcp_facts(200, MCP_ANSWER_NOT_FINAL, 0);
    ck_assert_int_eq(outcome_classify(&f), CLASS_AMBIGUOUS);
    /* a refused initialize: the call never went */
    f = mcp_facts(0, MCP_ANSWER_NONE, 0);
    f.mcp_refused = true;
    ck_assert_int_eq(outcome_classify(&f), CLASS_PERMANENT_FAILURE);
    /* the session is gone: not executed, sent again after a new initialize */
    f = mcp_facts(404, MCP_ANSWER_NONE, 0);
    f.mcp_session_lost = true;
    ck_assert_int_eq(outcome_classify(&f), CLASS_RETRY_LATER);
    /* without a session id a 404 is the HTTP rule's (the endpoint is wrong) */
    f.mcp_session_lost = false;
    ck_assert_int_eq(outcome_classify(&f), CLASS_PERMANENT_FAILURE);
    /* transport: as for HTTP */
    f = mcp_facts(0, MCP_ANSWER_NONE, 0);
    f.transport = TRANSPORT_FAILED_UNSENT;
    ck_assert_int_eq(outcome_classify(&f), CLASS_NOT_SENT);
    f.transport = TRANSPORT_FAILED_AFTER_SEND;
    ck_assert_int_eq(outcome_classify(&f), CLASS_AMBIGUOUS);
    /* other statuses: the HTTP rules (a result in a 500 is not believed) */
    f = mcp_facts(500, MCP_ANSWER_RESULT, 0);
    ck_assert_int_eq(outcome_classify(&f), CLASS_AMBIGUOUS);
    f = mcp_facts(429, MCP_ANSWER_NONE, 0);
    ck_assert_int_eq(outcome_classify(&f), CLASS_RETRY_LATER);
    f = mcp_facts(401, MCP_ANSWER_NONE, 0);
    ck_assert_int_eq(outcome_classify(&f), CLASS_PERMANENT_FAILURE);
}
END_TEST

/* What follows: an ambiguous MCP call is re-sent only with a key header. */
START_TEST(classify_mcp_ambiguous_follows_the_key_rule)
{
    struct attempt_facts f = mcp_facts(200, MCP_ANSWER_RPC_ERROR, -32603);
    struct intent_progress pr = {
        .attempt = 1, .first_attempt_ms = T0, .now_ms = T0 + 1000, .retry_after_ms = -1};
    struct retry_policy keyed = keyed_policy(), keyless = keyless_policy();
    struct decision d = outcome_decide(outcome_classify(&f), &keyed, &pr, 0.5);
    ck_assert_int_eq(d.next_state, STATE_PENDING);
    ck_assert(d.ambiguous);
    d = outcome_decide(outcome_classify(&f), &keyless, &pr, 0.5);
    ck_assert_int_eq(d.next_state, STATE_UNKNOWN);
    /* a tool that said no is failed at once, never re-sent */
    f = mcp_facts(200, MCP_ANSWER_TOOL_ERROR, 0);
    d = outcome_decide(outcome_classify(&f), &keyed, &pr, 0.5);
    ck_assert_int_eq(d.next_state, STATE_FAILED);
}
END_TEST

/* An MCP target's status tool: structuredContent.executed decides. */
START_TEST(classify_mcp_status_tool)
{
    struct attempt_facts f = mcp_facts(200, MCP_ANSWER_RESULT, 0);
    f.mcp_executed = 1;
    ck_assert_int_eq(outcome_classify_status_check(&f), CLASS_RECONCILED_EXECUTED);
    f.mcp_executed = 0;
    ck_assert_int_eq(outcome_classify_status_check(&f), CLASS_RECONCILED_NOT_EXECUTED);
    f.mcp_executed = -1; /* no boolean: ask again */
    ck_assert_int_eq(outcome_classify_status_check(&f), CLASS_RECONCILE_INCONCLUSIVE);
    f = mcp_facts(200, MCP_ANSWER_TOOL_ERROR, 0);
    f.mcp_executed = 0; /* a status tool that failed says nothing */
    ck_assert_int_eq(outcome_classify_status_check(&f), CLASS_RECONCILE_INCONCLUSIVE);
    f = mcp_facts(200, MCP_ANSWER_RPC_ERROR, -32601);
    ck_assert_int_eq(outcome_classify_status_check(&f), CLASS_RECONCILE_INCONCLUSIVE);
    f = mcp_facts(404, MCP_ANSWER_RESULT, 0);
    f.mcp_executed = 0; /* the HTTP status is the envelope's: a 404 is not "not executed" here */
    ck_assert_int_eq(outcome_classify_status_check(&f), CLASS_RECONCILE_INCONCLUSIVE);
    f = mcp_facts(0, MCP_ANSWER_NONE, 0);
    f.transport = TRANSPORT_FAILED_AFTER_SEND;
    ck_assert_int_eq(outcome_classify_status_check(&f), CLASS_RECONCILE_INCONCLUSIVE);
}
END_TEST

Suite *outcome_suite(void)
{
    Suite *s = suite_create("outcome");

    TCase *tc = tcase_create("classify");
    tcase_add_test(tc, classify_transport_unsent_is_not_sent);
    tcase_add_test(tc, classify_transport_after_send_is_ambiguous);
    tcase_add_loop_test(tc, classify_status_table, 0, STATUS_ROWS);
    tcase_add_test(tc, classify_every_status);
    tcase_add_test(tc, classify_mcp_table);
    tcase_add_test(tc, classify_mcp_ambiguous_follows_the_key_rule);
    tcase_add_test(tc, classify_mcp_status_tool);
    suite_add_tcase(s, tc);

    tc = tcase_create("decide");
    tcase_add_test(tc, decide_succeeded);
    tcase_add_test(tc, decide_permanent_and_key_conflict);
    tcase_add_test(tc, decide_gone_fails_the_intent);
    tcase_add_test(tc, decide_not_sent_and_retry_later_back_off);
    tcase_add_test(tc, decide_retry_after_wins_when_larger);
    tcase_add_test(tc, decide_exhausted);
    tcase_add_test(tc, decide_ambiguous_keyed_young_retries_same_key);
    tcase_add_test(tc, decide_ambiguous_without_key_header_is_unknown);
    tcase_add_test(tc, decide_ambiguous_key_expired_is_unknown);
    tcase_add_test(tc, decide_ambiguous_exhausted_is_unknown);
    tcase_add_test(tc, decide_invariant_never_failed_if_maybe_executed);
    tcase_add_test(tc, decide_after_ambiguous_key_expired_no_resend);
    tcase_add_test(tc, decide_same_key_retry_not_scheduled_past_key_ttl);
    tcase_add_test(tc, decide_horizon_is_time_without_a_cap);
    tcase_add_test(tc, decide_horizon_cap_and_ambiguity);
    tcase_add_test(tc, decide_reconciled_not_executed_uses_horizon);
    tcase_add_test(tc, resend_keeps_a_clock_margin);
    tcase_add_test(tc, not_resent_is_unknown_and_ambiguous);
    tcase_add_test(tc, taken_over_decided_as_ambiguous);
    tcase_add_test(tc, claim_answer_late_after_half_the_lease);
    suite_add_tcase(s, tc);

    tc = tcase_create("error_text");
    tcase_add_test(tc, error_text_by_class_and_state);
    suite_add_tcase(s, tc);

    tc = tcase_create("backoff");
    tcase_add_test(tc, backoff_full_jitter_bounds);
    tcase_add_test(tc, backoff_exact_values);
    tcase_add_test(tc, backoff_cap_and_no_overflow);
    suite_add_tcase(s, tc);

    tc = tcase_create("retry_after");
    tcase_add_test(tc, retry_after_seconds);
    tcase_add_test(tc, retry_after_invalid);
    tcase_add_test(tc, retry_after_huge_is_capped);
    tcase_add_test(tc, retry_after_http_date);
    suite_add_tcase(s, tc);

    tc = tcase_create("probe");
    tcase_add_test(tc, probe_failure_spares_the_intent);
    suite_add_tcase(s, tc);

    tc = tcase_create("names");
    tcase_add_test(tc, class_names_match_sql_enum);
    tcase_add_test(tc, state_names_match_sql_enum);
    tcase_add_test(tc, names_of_values_out_of_range);
    suite_add_tcase(s, tc);
    return s;
}
