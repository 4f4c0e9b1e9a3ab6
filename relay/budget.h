/*
 * budget.h — a per-target retry budget over a sliding window (pure).
 *
 * Retries may be at most `ratio` of first attempts over the last
 * BUDGET_WINDOW_S seconds, plus a small `floor`, so that an outage of a
 * target cannot turn every intent into a storm of retries. A retry that
 * finds the budget spent waits (the row is deferred); it is never dropped.
 */
#ifndef OUTBOX_BUDGET_H
#define OUTBOX_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

#define BUDGET_BUCKETS 10
#define BUDGET_BUCKET_S 1
#define BUDGET_WINDOW_S (BUDGET_BUCKETS * BUDGET_BUCKET_S)

struct retry_budget {
    int64_t newest_bucket; /* now_s / BUDGET_BUCKET_S of the newest bucket */
    uint32_t firsts[BUDGET_BUCKETS];
    uint32_t retries[BUDGET_BUCKETS];
};

/* Count one attempt sent at now_s. */
void budget_note(struct retry_budget *b, bool is_retry, int64_t now_s);
/* May one more retry go out now? */
bool budget_allows_retry(struct retry_budget *b, double ratio, int floor, int64_t now_s);
/* Retries still allowed in the window (for metrics); never negative. */
int budget_remaining(struct retry_budget *b, double ratio, int floor, int64_t now_s);

#endif
