/*
 * flow.h — what one relay concludes about a target's health (pure).
 *
 * Owns, per target and per relay: the adaptive concurrency window (AIMD)
 * and the count of consecutive failures that opens the circuit. It turns
 * the outcome of each delivery into a health signal, and a signal into the
 * actions the relay must take: shrink or grow the window, report to the
 * database that the circuit should open, that a probe failed or succeeded,
 * that the endpoint is gone (410 to several different intents in a row, or
 * to the probe), or that it asked for a pause (Retry-After).
 *
 * What all relays must agree on (the circuit itself, the pause, the rate
 * limit's tokens) lives in outbox.target_state and is applied by
 * outbox.claim (migrations/0009_flow_control.sql); this file only decides
 * what to report. It also paces the relay's own queries of the database
 * (the next claim after empty ones, the live counts of /metrics). No I/O
 * here: tests/unit/test_flow.c covers every rule.
 */
#ifndef OUTBOX_FLOW_H
#define OUTBOX_FLOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "outcome.h"

/* At most one halving of the window per this many ms: one burst of failures
 * (every request in flight refused at once) is one congestion event. */
#define FLOW_DECREASE_EVERY_MS 100

enum flow_signal {
    FLOW_NEUTRAL,    /* says nothing about the target (a status check, an aborted request) */
    FLOW_HEALTHY,    /* the target answered as a working service: 2xx, 4xx other than 410 and 429 */
    FLOW_FAILURE,    /* not the intent's fault: refused, timeout, reset, 5xx */
    FLOW_OVERLOADED, /* 429: slow down, but the target is up */
    FLOW_GONE,       /* 410: evidence that the endpoint is gone (flow_observe_gone) */
};

enum circuit_state { CIRCUIT_CLOSED, CIRCUIT_OPEN, CIRCUIT_HALF_OPEN };

/* A 410 fails the intent it answered (outcome.c): many APIs answer 410 for
 * one resource that is gone, and whoever can provoke that must not stop a
 * whole target. The endpoint itself is taken for gone, and the target
 * disabled, only when this many different intents in a row got a 410 from
 * it with no other answer between them (at one relay), or when the circuit
 * probe got one. */
#define FLOW_GONE_INTENTS 5

struct target_flow {
    double window;             /* requests in flight this relay allows itself */
    int consecutive_failures;  /* since the last healthy answer */
    uint64_t last_decrease_ms; /* loop time of the last halving */
    bool window_set;           /* window was initialised from the cap */
    /* The run of 410 answers to different intents with no other answer
     * between them (flow_observe_gone): its length and those intents. */
    int gone_run;
    int64_t gone_intents[FLOW_GONE_INTENTS];
};

struct flow_actions {
    bool report_open;            /* the threshold was reached: open the circuit */
    bool report_probe_failed;    /* this relay's probe failed */
    bool report_probe_succeeded; /* this relay's probe succeeded: close it */
    bool report_gone;            /* the endpoint is gone: disabled until an admin enables it */
    int gone_intents;            /* report_gone: 0 for the probe's 410, else the run's length */
    int64_t pause_ms;            /* > 0: pause the whole target this long (Retry-After) */
};

/* The health signal of one finished delivery. */
enum flow_signal flow_signal_of(enum attempt_class cls, long http_status, bool sent_request);

/* Applies one signal. cap is the target's concurrency cap, threshold its
 * circuit_failure_threshold, now_ms the loop's monotonic clock;
 * retry_after_ms is -1 when the answer had none. A pause is asked for a 429,
 * or a 503, that carried Retry-After. */
struct flow_actions flow_observe(struct target_flow *f, enum flow_signal signal, bool was_probe,
                                 long http_status, int64_t retry_after_ms, int cap, int threshold,
                                 uint64_t now_ms);

/* Adds to a (from flow_observe) what one answer says about the endpoint
 * being gone. http_status is the answer's (0: none came, which neither
 * counts nor breaks the run); intent_id the intent it answered. A 410 to
 * the probe reports gone at once; a 410 to an intent not yet in the run
 * lengthens it, and the FLOW_GONE_INTENTS-th reports gone (and starts a new
 * run); a repeated intent's 410 does not count; any other answer ends the
 * run. */
void flow_observe_gone(struct target_flow *f, struct flow_actions *a, long http_status,
                       bool was_probe, int64_t intent_id);

/* How many more requests this relay may start now: the window (never more
 * than cap, never less than one) minus those in flight; never negative. */
int flow_room(struct target_flow *f, int cap, int in_flight);

/* One report to the database (outbox.target_event) that actions ask for. */
#define FLOW_REASON_BYTES 512
#define FLOW_MAX_REPORTS 5
struct flow_report {
    const char *event; /* "gone", "open", "probe_failed", "probe_succeeded" or "pause" */
    char reason[FLOW_REASON_BYTES]; /* for outbox.target_health and the log */
    int64_t pause_ms;               /* "pause": how long; else 0 */
};

/* The reports that a's actions ask for, in the order they are to be sent,
 * each with its reason: last_error is the text of the failure that was
 * observed ("" when none), consecutive_failures the run after it, and
 * http_status the answer that asked for a pause. Returns how many. */
size_t flow_reports(const struct flow_actions *a, int consecutive_failures, long http_status,
                    const char *last_error, struct flow_report out[FLOW_MAX_REPORTS]);

/* How long the relay sleeps before claiming again, when the next row it
 * could take is due in due_ms (outbox.next_due_ms). Claims that keep
 * finding nothing although a row is said to be due (another relay holds
 * it: SKIP LOCKED) make it wait longer each time, 2^empty_claims ms from
 * the second empty claim on, up to 256 ms, rather than ask again at once. */
uint64_t flow_next_due_wait_ms(int64_t due_ms, int empty_claims);

/* The sweep (relay_db.c, "Two lanes"): the next one a hundred times as long
 * after the last as it took, between FLOW_SWEEP_LEAST_MS and
 * FLOW_SWEEP_MOST_MS, and at most twice the last period (last_ms; 0: none
 * yet): took is the round trip, which a stall or a take-over
 * queued ahead of it lengthens, and one such answer must not put the next
 * sweep ten minutes off. A sweep so costs the database about 1 % of one
 * backend, however long a held snapshot makes it (but for a backlog due 2 s
 * ago or more, which it takes a sweep after another while each takes all it
 * asked for), and a row behind the
 * floor (a transaction that committed more than 2 s after it began) waits
 * about a second for it when nothing holds vacuum back. */
#define FLOW_SWEEP_LEAST_MS 1000
#define FLOW_SWEEP_MOST_MS 600000
uint64_t flow_sweep_period_ms(uint64_t took_ms, uint64_t last_ms);
/* After a sweep that failed or answered late: twice the last period, within
 * the same bounds. After FLOW_SWEEP_FAILURES_IN_LINE such sweeps in a row,
 * the floor claims sweep in line until one succeeds. */
uint64_t flow_sweep_backoff_ms(uint64_t last_ms);
#define FLOW_SWEEP_FAILURES_IN_LINE 3

/* The live counts of /metrics (outbox.live_counts) read every live row, on
 * the connection that claims: 0.5 ms per thousand pending rows measured, so
 * seconds for a backlog of millions, during which claims wait. The next
 * refresh comes FLOW_LIVE_COUNTS_EVERY_MS after the last one started, or
 * FLOW_LIVE_COUNTS_SHARE times as long as the last one took, whichever is
 * longer: the counts never hold that connection more than a twentieth of
 * the time. */
#define FLOW_LIVE_COUNTS_EVERY_MS 5000
#define FLOW_LIVE_COUNTS_SHARE 20
uint64_t flow_live_counts_interval_ms(uint64_t last_took_ms);

enum circuit_state flow_circuit_parse(const char *text);
const char *flow_circuit_name(enum circuit_state state);

#endif
