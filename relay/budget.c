/*
 * budget.c — sliding-window retry budget.
 *
 * A ring of one-second buckets; advancing the clock clears the buckets that
 * fell out of the window. Cheap enough to consult for every claimed retry.
 */
#include "budget.h"

#include <string.h>

static void budget_advance(struct retry_budget *b, int64_t now_s)
{
    int64_t bucket = now_s / BUDGET_BUCKET_S;
    if (bucket <= b->newest_bucket)
        return;
    int64_t gap = bucket - b->newest_bucket;
    if (gap >= BUDGET_BUCKETS || b->newest_bucket == 0) {
        memset(b->firsts, 0, sizeof(b->firsts));
        memset(b->retries, 0, sizeof(b->retries));
    } else {
        for (int64_t i = 1; i <= gap; i++) {
            int slot = (int)((b->newest_bucket + i) % BUDGET_BUCKETS);
            b->firsts[slot] = 0;
            b->retries[slot] = 0;
        }
    }
    b->newest_bucket = bucket;
}

void budget_note(struct retry_budget *b, bool is_retry, int64_t now_s)
{
    budget_advance(b, now_s);
    int slot = (int)(b->newest_bucket % BUDGET_BUCKETS);
    if (is_retry)
        b->retries[slot]++;
    else
        b->firsts[slot]++;
}

int budget_remaining(struct retry_budget *b, double ratio, int floor, int64_t now_s)
{
    budget_advance(b, now_s);
    uint64_t firsts = 0, retries = 0;
    for (int i = 0; i < BUDGET_BUCKETS; i++) {
        firsts += b->firsts[i];
        retries += b->retries[i];
    }
    double allowed = (double)floor + ratio * (double)firsts;
    double left = allowed - (double)retries;
    return left <= 0 ? 0 : (int)left;
}

bool budget_allows_retry(struct retry_budget *b, double ratio, int floor, int64_t now_s)
{
    return budget_remaining(b, ratio, floor, now_s) > 0;
}
