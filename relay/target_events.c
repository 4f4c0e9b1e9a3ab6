/*
 * target_events.c — reports about a target to outbox.target_event (what it
 * owns: target_events.h).
 *
 * Why apart from the relay's scheduler: deciding what to report is pure
 * (flow.c), and sending it needs only the main connection. The one thing
 * the scheduler must hear back, a circuit that closed, comes through the
 * reporter's callback, so this file calls nothing in relay.c.
 *
 * Every report carries the relay's id, the target, the event, a reason for
 * people (outbox.target_health, the log) and, for a pause, its length. The
 * database answers with the circuit as it now is for every relay; a change
 * is logged here.
 */
#include "target_events.h"

#include "flow.h"
#include "lib/log.h"
#include "sql.h"
#include "lib/xalloc.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One report on the wire; freed in its callback. */
struct target_event_request {
    const struct target_reporter *reporter;
    struct target *target;
    char event[24];
};

static void on_target_event(void *data, PGresult *res, const char *error)
{
    struct target_event_request *req = data;
    struct target *t = req->target;
    if (error) {
        /* Not applied: the next failures report again (every threshold), a
         * probe's half-open state lapses and is probed again. */
        log_event(LOG_WARN, "target_event_failed", "target", json_string(t->name), "cause",
                  json_string(req->event), "error", json_string(error), LOG_END);
    } else if (PQntuples(res) == 1) {
        enum circuit_state before = t->circuit;
        t->circuit = flow_circuit_parse(PQgetvalue(res, 0, 0));
        if (strcmp(req->event, "pause") == 0)
            t->paused = true;
        if (t->circuit != before)
            log_event(t->circuit == CIRCUIT_CLOSED ? LOG_INFO : LOG_WARN, "circuit_changed",
                      "target", json_string(t->name), "circuit",
                      json_string(flow_circuit_name(t->circuit)), "cause", json_string(req->event),
                      LOG_END);
        if (t->circuit == CIRCUIT_CLOSED && before != CIRCUIT_CLOSED)
            req->reporter->on_circuit_closed(req->reporter->data, t);
    }
    free(req);
}

static void target_report(const struct target_reporter *reporter, struct target *t,
                          const struct flow_report *report)
{
    if (!pg_conn_ready(reporter->pg))
        return; /* reported again by the next failures; a pause is only advice */
    struct target_event_request *req = xcalloc(1, sizeof(*req));
    req->reporter = reporter;
    req->target = t;
    snprintf(req->event, sizeof(req->event), "%s", report->event);
    char ms_text[24];
    snprintf(ms_text, sizeof(ms_text), "%" PRId64,
             report->pause_ms > INT32_MAX ? (int64_t)INT32_MAX : report->pause_ms);
    const char *params[5] = {reporter->relay_id, t->name, report->event, report->reason, ms_text};
    if (pg_query(reporter->pg, STMT_TARGET_EVENT, 5, params, on_target_event, req))
        t->circuit_reports++;
    else
        free(req);
}

void target_events_observe(const struct target_reporter *reporter, const struct delivery *d,
                           enum attempt_class cls, const struct delivery_report *report,
                           uint64_t now_ms)
{
    struct target *t = d->target;
    enum flow_signal signal = flow_signal_of(cls, report->http_status, report->sent == 1);
    struct flow_actions a =
        flow_observe(&t->flow, signal, d->probe, report->http_status, d->retry_after_ms,
                     target_cap(t, reporter->relay_cap), t->circuit_failure_threshold, now_ms);
    flow_observe_gone(&t->flow, &a, report->http_status, d->probe, d->intent_id);
    if (a.report_gone)
        t->enabled = false; /* the database disables it too; an admin enables it again */
    struct flow_report reports[FLOW_MAX_REPORTS];
    size_t n =
        flow_reports(&a, t->flow.consecutive_failures, report->http_status, report->error, reports);
    for (size_t i = 0; i < n; i++)
        target_report(reporter, t, &reports[i]);
}
