/*
 * flow.c — a relay's view of a target's health: AIMD window and failure run.
 *
 * DESIGN
 * The window is additive-increase, multiplicative-decrease, as TCP's:
 *   - a healthy answer adds one request to the window (so a target that keeps
 *     answering doubles it every round trip, and a backlog after an outage
 *     is back at full concurrency within a few dozen round trips);
 *   - a failure, or a 429, halves it, at most once per FLOW_DECREASE_EVERY_MS,
 *     so that the requests that were in flight together when a target went
 *     down count as one event and not as a collapse to nothing;
 *   - it never goes under one request (the target is still tried, and its
 *     answers move the window) nor over the target's cap.
 * Retries and first attempts share the window: there is no separate retry
 * budget. A target that answers errors gets a smaller window, then an open
 * circuit, so it receives fewer requests, never more; the relay is the only
 * layer that retries (docs/design.md, "Principles": 3 layers x 3 tries = 27x).
 *
 * The failure run opens the circuit: `threshold` failures in a row that are
 * not the intent's fault (refused, timeout, reset, 5xx). The relay reports
 * it to the database (outbox.target_event), which opens the circuit for
 * every relay; a report for a circuit already open changes nothing, so it
 * is sent again every `threshold` failures rather than remembered here.
 *
 * A 410 is about one intent until shown otherwise. Many APIs answer 410 for
 * one resource that is gone (a deleted customer, a closed order), so one
 * 410 fails its intent and says nothing about the target: anyone who can
 * make an intent provoke it must not stop every delivery and every enqueue
 * of the target. The endpoint is taken for gone only on evidence about the
 * endpoint: FLOW_GONE_INTENTS different intents in a row answered 410 with
 * no other answer between them, or a 410 to the circuit probe (the one
 * request a target that kept failing gets). A request that got no answer
 * (refused, timeout, reset) is no evidence either way and leaves the run as
 * it is. Each relay counts its own answers: with several relays the run is
 * per relay, so it takes FLOW_GONE_INTENTS in a row at one of them.
 */
#include "flow.h"

#include <stdio.h>
#include <string.h>

enum flow_signal flow_signal_of(enum attempt_class cls, long http_status, bool sent_request)
{
    switch (cls) {
    case CLASS_SUCCEEDED:
    case CLASS_KEY_CONFLICT:
        return FLOW_HEALTHY;
    case CLASS_PERMANENT_FAILURE:
        return http_status == 410 ? FLOW_GONE : FLOW_HEALTHY;
    case CLASS_RETRY_LATER:
        return http_status == 429 ? FLOW_OVERLOADED : FLOW_HEALTHY;
    case CLASS_NOT_SENT:
        return FLOW_FAILURE;
    case CLASS_AMBIGUOUS:
        /* A redirect or an interim answer is a working server saying
         * something odd; the intent is ambiguous, the target is not down. */
        if (http_status >= 100 && http_status < 400)
            return FLOW_NEUTRAL;
        return FLOW_FAILURE; /* 5xx, timeout, reset, empty or garbled reply */
    case CLASS_RECONCILED_EXECUTED:
    case CLASS_RECONCILED_NOT_EXECUTED:
    case CLASS_RECONCILE_INCONCLUSIVE:
        break;
    }
    (void)sent_request;
    return FLOW_NEUTRAL;
}

static void flow_init(struct target_flow *f, int cap)
{
    if (!f->window_set) {
        f->window = cap;
        f->window_set = true;
    }
    if (f->window > cap)
        f->window = cap;
    if (f->window < 1)
        f->window = 1;
}

static void flow_decrease(struct target_flow *f, uint64_t now_ms)
{
    if (f->last_decrease_ms != 0 && now_ms - f->last_decrease_ms < FLOW_DECREASE_EVERY_MS)
        return;
    f->window /= 2;
    if (f->window < 1)
        f->window = 1;
    f->last_decrease_ms = now_ms ? now_ms : 1;
}

struct flow_actions flow_observe(struct target_flow *f, enum flow_signal signal, bool was_probe,
                                 long http_status, int64_t retry_after_ms, int cap, int threshold,
                                 uint64_t now_ms)
{
    struct flow_actions a;
    memset(&a, 0, sizeof(a));
    flow_init(f, cap);
    switch (signal) {
    case FLOW_NEUTRAL:
        return a;
    case FLOW_HEALTHY:
        f->consecutive_failures = 0;
        f->window += 1;
        if (f->window > cap)
            f->window = cap;
        a.report_probe_succeeded = was_probe;
        return a;
    case FLOW_OVERLOADED:
        /* Up, but asking us to slow down: a smaller window, and the pause it
         * asked for. A probe that gets a 429 found the target alive. */
        flow_decrease(f, now_ms);
        a.report_probe_succeeded = was_probe;
        a.pause_ms = retry_after_ms > 0 ? retry_after_ms : 0;
        return a;
    case FLOW_FAILURE:
        f->consecutive_failures++;
        flow_decrease(f, now_ms);
        if (was_probe)
            a.report_probe_failed = true;
        else if (threshold > 0 && f->consecutive_failures % threshold == 0)
            a.report_open = true;
        if (http_status == 503 && retry_after_ms > 0)
            a.pause_ms = retry_after_ms;
        return a;
    case FLOW_GONE:
        /* Neither healthy nor failing: whether it says anything about the
         * endpoint is flow_observe_gone's to decide. */
        return a;
    }
    return a;
}

void flow_observe_gone(struct target_flow *f, struct flow_actions *a, long http_status,
                       bool was_probe, int64_t intent_id)
{
    if (http_status <= 0)
        return; /* no answer: no evidence either way */
    if (http_status != 410) {
        f->gone_run = 0;
        return;
    }
    if (was_probe) {
        a->report_gone = true;
        a->gone_intents = 0;
        f->gone_run = 0;
        return;
    }
    for (int i = 0; i < f->gone_run; i++)
        if (f->gone_intents[i] == intent_id)
            return; /* the same intent again (sent again by an operator) */
    f->gone_intents[f->gone_run++] = intent_id;
    if (f->gone_run < FLOW_GONE_INTENTS)
        return;
    a->report_gone = true;
    a->gone_intents = f->gone_run;
    f->gone_run = 0;
}

int flow_room(struct target_flow *f, int cap, int in_flight)
{
    flow_init(f, cap);
    int allowed = (int)f->window;
    int room = allowed - in_flight;
    return room > 0 ? room : 0;
}

size_t flow_reports(const struct flow_actions *a, int consecutive_failures, long http_status,
                    const char *last_error, struct flow_report out[FLOW_MAX_REPORTS])
{
    char last[FLOW_REASON_BYTES];
    snprintf(last, sizeof(last), "%s", last_error && *last_error ? last_error : "failure");
    size_t n = 0;
    if (a->report_gone) {
        if (a->gone_intents > 0)
            snprintf(last, sizeof(last),
                     "HTTP 410 Gone to %d different intents in a row, no other answer between "
                     "them: the endpoint is gone",
                     a->gone_intents);
        else
            snprintf(last, sizeof(last),
                     "HTTP 410 Gone to the circuit probe: the endpoint is gone");
        out[n] = (struct flow_report){.event = "gone"};
        snprintf(out[n++].reason, FLOW_REASON_BYTES, "%s", last);
    }
    if (a->report_open) {
        out[n] = (struct flow_report){.event = "open"};
        snprintf(out[n++].reason, FLOW_REASON_BYTES, "%d failures in a row; last: %.400s",
                 consecutive_failures, last);
    }
    if (a->report_probe_failed) {
        out[n] = (struct flow_report){.event = "probe_failed"};
        snprintf(out[n++].reason, FLOW_REASON_BYTES, "%s", last);
    }
    if (a->report_probe_succeeded)
        out[n++] = (struct flow_report){.event = "probe_succeeded"};
    if (a->pause_ms > 0) {
        out[n] = (struct flow_report){.event = "pause", .pause_ms = a->pause_ms};
        snprintf(out[n++].reason, FLOW_REASON_BYTES, "HTTP %ld with Retry-After", http_status);
    }
    return n;
}

uint64_t flow_next_due_wait_ms(int64_t due_ms, int empty_claims)
{
    uint64_t wait = (uint64_t)(due_ms < 0 ? 0 : due_ms) + 1;
    if (empty_claims > 1) {
        int shift = empty_claims < 8 ? empty_claims : 8; /* up to 256 ms */
        uint64_t floor_ms = (uint64_t)1 << shift;
        if (wait < floor_ms)
            wait = floor_ms;
    }
    return wait;
}

uint64_t flow_live_counts_interval_ms(uint64_t last_took_ms)
{
    if (last_took_ms > UINT64_MAX / FLOW_LIVE_COUNTS_SHARE)
        return UINT64_MAX;
    uint64_t busy = last_took_ms * FLOW_LIVE_COUNTS_SHARE;
    return busy > FLOW_LIVE_COUNTS_EVERY_MS ? busy : FLOW_LIVE_COUNTS_EVERY_MS;
}

enum circuit_state flow_circuit_parse(const char *text)
{
    if (text && strcmp(text, "open") == 0)
        return CIRCUIT_OPEN;
    if (text && strcmp(text, "half_open") == 0)
        return CIRCUIT_HALF_OPEN;
    return CIRCUIT_CLOSED;
}

const char *flow_circuit_name(enum circuit_state state)
{
    switch (state) {
    case CIRCUIT_OPEN:
        return "open";
    case CIRCUIT_HALF_OPEN:
        return "half_open";
    case CIRCUIT_CLOSED:
        break;
    }
    return "closed";
}

static uint64_t sweep_bounded(uint64_t period)
{
    if (period < FLOW_SWEEP_LEAST_MS)
        return FLOW_SWEEP_LEAST_MS;
    return period > FLOW_SWEEP_MOST_MS ? FLOW_SWEEP_MOST_MS : period;
}

uint64_t flow_sweep_period_ms(uint64_t took_ms, uint64_t last_ms)
{
    uint64_t period = took_ms > FLOW_SWEEP_MOST_MS ? FLOW_SWEEP_MOST_MS : took_ms * 100;
    uint64_t most = (last_ms < FLOW_SWEEP_LEAST_MS ? FLOW_SWEEP_LEAST_MS : last_ms) * 2;
    return sweep_bounded(period < most ? period : most);
}

uint64_t flow_sweep_backoff_ms(uint64_t last_ms)
{
    return sweep_bounded((last_ms < FLOW_SWEEP_LEAST_MS ? FLOW_SWEEP_LEAST_MS : last_ms) * 2);
}
