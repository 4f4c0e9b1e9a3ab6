/*
 * target_events.h — what one relay tells every other about a target.
 *
 * Owns the reports to the database (outbox.target_event): after each
 * delivery the target's flow state (flow.h) is fed, and the reports it asks
 * for (circuit open, probe failed or succeeded, gone, pause) are sent on the
 * main connection; the answer updates the relay's copy of the circuit. A
 * report that cannot be sent is dropped: the next failures report again, a
 * pause is only advice.
 */
#ifndef OUTBOX_TARGET_EVENTS_H
#define OUTBOX_TARGET_EVENTS_H

#include "deliver.h"
#include "outcome.h"
#include "lib/pg.h"
#include "targets.h"

#include <stdint.h>

struct target_reporter {
    pg_conn_t *pg;        /* where reports go: the relay's main connection */
    const char *relay_id; /* who reports */
    int relay_cap;        /* --max-in-flight-per-target */
    /* A target's circuit closed again (its backlog is due now). */
    void (*on_circuit_closed)(void *data, struct target *t);
    void *data;
};

/* Feeds one finished delivery to the target's flow state (cls and report
 * as decided for it; the request's probe flag and Retry-After) and sends
 * the reports that follow. now_ms is the loop's clock. */
void target_events_observe(const struct target_reporter *reporter, const struct delivery *d,
                           enum attempt_class cls, const struct delivery_report *report,
                           uint64_t now_ms);

#endif
