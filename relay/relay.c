/*
 * relay.c — the daemon: claim due intents, deliver them, record outcomes.
 *
 * DESIGN
 * One libuv loop drives everything: the database (pg.c), HTTP (http.c),
 * timers and signals. Nothing here blocks.
 *
 *   claim ──rows──► deliveries (curl multi) ──done──► outcome buffer ──► record
 *     ▲                                                                  │
 *     └──── NOTIFY / poll timer / a full batch / capacity freed ◄────────┘
 *
 * Claiming: one statement per batch (outbox.claim), bounded by the free
 * capacity, globally and per target. After a claim that came back short the
 * relay tells the database it is idle (so enqueues NOTIFY it) and claims once
 * more: a row committed between the short claim and the flag would otherwise
 * wait for the poll timer (the lost wake-up). A full batch means the relay is
 * busy: the flag goes off, and enqueuing transactions stop paying for NOTIFY.
 *
 * Recording: outcomes collect in a buffer while one record statement is on
 * the wire, so the batch size adapts to the load. If the database is gone,
 * the buffer simply waits: in-flight HTTP carries on, and after reconnecting
 * everything is written, fenced by (lease owner, attempt number).
 *
 * Two connections: records go over a connection of their own, everything
 * else (claims, leases, take-over, the LISTEN) over the main one. A record
 * is the heaviest statement the relay sends; on one connection the next
 * claim queued behind it and PostgreSQL worked one statement at a time.
 * Apart, a claim and a record run side by side in two backends (the drain
 * bench measured the difference; see tests/bench/README.md). They never
 * touch the same rows: a claim takes pending rows, a record writes rows this
 * relay holds in flight, each fenced in SQL.
 *
 * Leases: renewed on a timer for every row this relay is delivering; rows
 * whose lease expired (their relay died) are taken over and decided as an
 * ambiguous attempt, exactly as if the request had timed out.
 *
 * Shutdown (SIGTERM/SIGINT): stop claiming, give in-flight deliveries the
 * grace period, then abort the rest (an aborted request that was sent is
 * ambiguous; one that was not is released back to pending), write every
 * outcome, say goodbye to outbox.relays, close every handle, and require
 * uv_loop_close() == 0.
 */
#include "relay.h"

#include "admin.h"
#include "deliver.h"
#include "http.h"
#include "log.h"
#include "metrics.h"
#include "outcome.h"
#include "pg.h"
#include "prune.h"
#include "sql.h"
#include "strbuf.h"
#include "targets.h"
#include "xalloc.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* How long shutdown waits for the database to take the last outcomes. */
#define SHUTDOWN_RECORD_WAIT_MS 10000
#define HEARTBEAT_EVERY_MS 10000
#define TAKE_OVER_BATCH 256
/* Response bodies in one record statement: the batch ends after the outcome
 * that passes this, so that its parameters and libpq's copy of them stay
 * small whatever the response cap (the memory bound in README). */
#define RECORD_BATCH_BODY_BYTES (4 * 1024 * 1024)
/* The admin port (admin.c): 64 connections for any request, of which 32 may
 * be long-polls (?wait=); 16 more for the probes once those are taken. */
#define ADMIN_MAX_CONNECTIONS 64
#define ADMIN_MAX_WAITS 32
#define ADMIN_PROBE_RESERVE 16
#define ADMIN_MAX_REQUEST_BYTES 8192
#define LIVE_COUNTS_EVERY_MS 5000

struct pending_outcome {
    int64_t intent_id;
    int attempt;
    enum intent_state state;
    int delay_ms;
    bool ambiguous;
    enum attempt_class cls;
    int sent;     /* 1, 0, or -1 unknown (lease take-over) */
    int key_sent; /* the request carried the key: 1, 0, or -1 not known / no request */
    long http_status;
    int latency_ms;
    char *error;
    char *body;
    size_t body_len;
};

/* The parallel arrays of one outbox.record call (its parameters $2..$14). */
enum record_array {
    RA_IDS = 1,
    RA_ATTEMPTS,
    RA_STATES,
    RA_DELAYS,
    RA_AMBIGUOUS,
    RA_CLASSES,
    RA_SENT,
    RA_HTTP,
    RA_ERRORS,
    RA_LATENCIES,
    RA_BODIES,
    RA_KEY_SENT,
    RECORD_ARRAYS /* also the number of parameters: $1 is the relay */
};

struct outcome_list {
    struct pending_outcome *items;
    size_t count, cap;
};

struct release_list {
    int64_t *ids;
    int *attempts;
    size_t count;
};

struct relay {
    uv_loop_t loop;
    const struct config *cfg;
    pg_conn_t *pg;         /* claims, leases, take-over, LISTEN, admin lookups */
    pg_conn_t *pg_rec;     /* outbox.record only */
    struct pruner *pruner; /* retention, on a connection of its own; NULL: off */
    http_client_t *http;
    struct target_set targets;
    bool targets_loaded;
    bool targets_loading;

    uv_timer_t poll_timer;        /* fallback poll, and next due retry */
    uv_timer_t maintenance_timer; /* leases, take-over, heartbeat, targets, retries of record */
    uv_timer_t shutdown_timer;    /* grace period, then the record deadline */
    uv_signal_t sigterm, sigint;

    struct delivery *deliveries; /* in flight */
    int in_flight;

    struct outcome_list buffered;  /* waiting to be recorded */
    size_t held_body_bytes;        /* response bodies in buffered + recording */
    struct outcome_list recording; /* on the wire */
    struct release_list releases;  /* claimed, never sent, to give back */
    bool releasing;
    size_t record_limit; /* > 0: a batch failed; send at most this many (halving) */

    bool claim_running;
    bool claim_again;
    bool more_due;    /* the last claim was limited by capacity, not by due rows */
    bool idle_in_db;  /* outbox.relays says we are idle (enqueues notify us) */
    bool idle_wanted; /* the last wish; idle_in_db follows it */
    bool idle_change_running;
    bool next_due_running;
    int empty_claims; /* claims in a row that found nothing: spaces out the next */
    bool take_over_running;
    bool renew_running;
    bool reconcile_running;
    uint64_t reconciles_started;
    uint64_t last_heartbeat_ms;
    uint64_t last_targets_ms;

    bool stopping;
    bool aborting;      /* the grace period is over */
    bool farewell_sent; /* relay_gone queued */
    bool closing;
    int exit_code;

    uint64_t rng;
    struct strbuf arrays[RECORD_ARRAYS];

    admin_server_t *admin;
    char ready_reason[320];
    bool live_counts_running;
    uint64_t last_live_counts_ms;
    int64_t live_counts[4]; /* pending, in_flight, unknown, awaiting_approval */
    double oldest_due_age_s;
    struct metrics_histogram delivery_seconds;
    struct metrics_histogram claim_seconds;
    uint64_t claim_started_ns;

    /* Counters for the closing log line and /metrics. */
    uint64_t claimed, attempts_by_class[CLASS_COUNT], taken_over, recorded, fenced_out, released,
        claims_late;
};

static void relay_maybe_claim(struct relay *r);
static void relay_flush(struct relay *r);
static void relay_check_shutdown(struct relay *r);
static void relay_close(struct relay *r);
static void relay_refresh_live_counts(struct relay *r);
static size_t relay_claimable_targets(struct relay *r, struct strbuf *names, struct strbuf *rooms,
                                      int limit);
static void relay_write_flow_metrics(struct relay *r, struct strbuf *out);

/* ---------------------------------------------------------------- helpers */

static double relay_random(struct relay *r)
{
    /* xorshift64*: jitter only, not security. */
    r->rng ^= r->rng >> 12;
    r->rng ^= r->rng << 25;
    r->rng ^= r->rng >> 27;
    return (double)((r->rng * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static char *int_text(char *buf, size_t size, int64_t v)
{
    snprintf(buf, size, "%" PRId64, v);
    return buf;
}

static void outcome_list_push(struct outcome_list *list, struct pending_outcome *o)
{
    if (list->count == list->cap) {
        list->cap = list->cap ? list->cap * 2 : 256;
        list->items = xrealloc(list->items, list->cap * sizeof(*list->items));
    }
    list->items[list->count++] = *o;
}

/* Frees the outcomes; returns the bytes of response bodies they held. */
static size_t outcome_list_clear(struct outcome_list *list)
{
    size_t bytes = 0;
    for (size_t i = 0; i < list->count; i++) {
        free(list->items[i].error);
        free(list->items[i].body);
        bytes += list->items[i].body_len;
    }
    list->count = 0;
    return bytes;
}

/* Response bodies waiting to be recorded take delivery slots: one slot per
 * max_response_bytes of them. So the bodies a relay holds, in flight or
 * waiting, stay within max_in_flight x max_response_bytes (the memory bound
 * in README) when recording falls behind, while small bodies (the common
 * case) take no slot and cost no throughput. */
static int relay_slots_held(const struct relay *r)
{
    if (r->cfg->max_response_bytes <= 0)
        return 0;
    size_t slots = r->held_body_bytes / (size_t)r->cfg->max_response_bytes;
    return slots > (size_t)r->cfg->max_in_flight ? r->cfg->max_in_flight : (int)slots;
}

static bool relay_has_work(const struct relay *r)
{
    return r->in_flight > 0 || r->buffered.count > 0 || r->recording.count > 0 ||
           r->releases.count > 0 || r->releasing;
}

/* A claimed row that was never sent: back to pending with its attempt number
 * restored, by the next release statement. */
static void relay_release_later(struct relay *r, int64_t intent_id, int attempt)
{
    struct release_list *l = &r->releases;
    l->ids = xrealloc(l->ids, (l->count + 1) * sizeof(int64_t));
    l->attempts = xrealloc(l->attempts, (l->count + 1) * sizeof(int));
    l->ids[l->count] = intent_id;
    l->attempts[l->count] = attempt;
    l->count++;
}

/* ---------------------------------------------------------------- deliveries */

/* Buffers one outcome for the next record statement. body, when not NULL,
 * is taken over (a response body is not copied again): it must come from
 * malloc and hold body_len bytes and a NUL. */
static void relay_push_outcome(struct relay *r, struct target *t, int64_t intent_id, int attempt,
                               enum attempt_class cls, struct decision *dec, int sent, int key_sent,
                               long http_status, int latency_ms, const char *error, char *body,
                               size_t body_len)
{
    struct pending_outcome o = {
        .intent_id = intent_id,
        .attempt = attempt,
        .state = dec->next_state,
        .delay_ms = dec->delay_ms,
        .ambiguous = dec->ambiguous,
        .cls = cls,
        .sent = sent,
        .key_sent = key_sent,
        .http_status = http_status,
        .latency_ms = latency_ms,
        .error = error && *error ? xstrdup(error) : NULL,
        .body = body,
        .body_len = body ? body_len : 0,
    };
    outcome_list_push(&r->buffered, &o);
    r->held_body_bytes += o.body_len;
    r->attempts_by_class[cls]++;
    if (t) {
        t->attempts_by_class[cls]++;
        t->decisions_by_state[dec->next_state]++;
    }
}

static void relay_detach(struct relay *r, struct delivery *d)
{
    if (d->prev)
        d->prev->next = d->next;
    else
        r->deliveries = d->next;
    if (d->next)
        d->next->prev = d->prev;
    d->target->in_flight--;
    r->in_flight--;
}

/* ---------------------------------------------------------------- flow control */

struct target_event_request {
    struct relay *relay;
    struct target *target;
    char event[24];
};

static void on_target_event(void *data, PGresult *res, const char *error)
{
    struct target_event_request *req = data;
    struct relay *r = req->relay;
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
        if (t->circuit == CIRCUIT_CLOSED && before != CIRCUIT_CLOSED && !r->stopping)
            relay_maybe_claim(r); /* the target is back: its backlog is due now */
    }
    free(req);
}

/* Tells the database what this relay saw (outbox.target_event). */
static void relay_report_target(struct relay *r, struct target *t, const char *event,
                                const char *reason, int64_t ms)
{
    if (!pg_conn_ready(r->pg))
        return; /* reported again by the next failures; a pause is only advice */
    struct target_event_request *req = xcalloc(1, sizeof(*req));
    req->relay = r;
    req->target = t;
    snprintf(req->event, sizeof(req->event), "%s", event);
    char ms_text[24];
    const char *params[5] = {r->cfg->relay_id, t->name, event, reason,
                             int_text(ms_text, sizeof(ms_text), ms > INT32_MAX ? INT32_MAX : ms)};
    if (pg_query(r->pg, STMT_TARGET_EVENT, 5, params, on_target_event, req))
        t->circuit_reports++;
    else
        free(req);
}

/* Feeds one finished delivery to the target's flow state, and reports what
 * the other relays must know. */
static void relay_observe_flow(struct relay *r, struct delivery *d, enum attempt_class cls,
                               const struct delivery_report *report)
{
    struct target *t = d->target;
    enum flow_signal signal = flow_signal_of(cls, report->http_status, report->sent == 1);
    int cap = t->max_in_flight < r->cfg->max_in_flight_per_target
                  ? t->max_in_flight
                  : r->cfg->max_in_flight_per_target;
    struct flow_actions a =
        flow_observe(&t->flow, signal, d->probe, report->http_status, d->retry_after_ms, cap,
                     t->circuit_failure_threshold, uv_now(&r->loop));
    char reason[sizeof(report->error) + 64];
    snprintf(reason, sizeof(reason), "%s", *report->error ? report->error : "failure");
    if (a.report_gone) {
        snprintf(reason, sizeof(reason), "HTTP 410 Gone: the target asked not to be sent more");
        t->enabled = false; /* the database disables it too; an admin enables it again */
        relay_report_target(r, t, "gone", reason, 0);
    }
    if (a.report_open) {
        char why[sizeof(reason) + 64];
        snprintf(why, sizeof(why), "%d failures in a row; last: %s", t->flow.consecutive_failures,
                 reason);
        relay_report_target(r, t, "open", why, 0);
    }
    if (a.report_probe_failed)
        relay_report_target(r, t, "probe_failed", reason, 0);
    if (a.report_probe_succeeded)
        relay_report_target(r, t, "probe_succeeded", "", 0);
    if (a.pause_ms > 0) {
        snprintf(reason, sizeof(reason), "HTTP %ld with Retry-After", report->http_status);
        relay_report_target(r, t, "pause", reason, a.pause_ms);
    }
}

/* Decide and buffer the outcome of a finished (or aborted) delivery. */
static void relay_conclude(struct relay *r, struct delivery *d, CURLcode result, bool aborted)
{
    struct delivery_report report;
    delivery_report(d, result, aborted, &report);
    relay_detach(r, d);

    if (aborted && !report.sent) {
        /* Never left this host: give the row back untouched. */
        relay_release_later(r, d->intent_id, d->attempt);
        delivery_free(d);
        return;
    }

    /* What is safe next depends on whether this request carried the key, not
     * on the target's header now (a reload may have changed it since). */
    struct retry_policy policy = target_retry_policy(d->target);
    if (d->kind == DELIVERY_SEND)
        policy.honours_keys = report.facts.honours_keys = d->key_sent;
    enum attempt_class cls = d->kind == DELIVERY_STATUS_CHECK
                                 ? outcome_classify_status_check(&report.facts)
                                 : outcome_classify(&report.facts);
    struct intent_progress progress = {
        .attempt = d->attempt,
        .was_ambiguous = d->was_ambiguous,
        .first_attempt_ms = d->first_attempt_ms,
        .now_ms = wall_ms(),
        .retry_after_ms = d->retry_after_ms,
    };
    struct decision dec = outcome_decide(cls, &policy, &progress, relay_random(r));
    const char *error = report.error;
    char reason[sizeof(report.error) + 160];
    if (cls == CLASS_RECONCILED_NOT_EXECUTED && dec.next_state == STATE_FAILED) {
        snprintf(reason, sizeof(reason),
                 "the status URL says no attempt executed, and all %d "
                 "attempts are used",
                 d->attempt);
        error = reason;
    } else if (cls == CLASS_RECONCILED_EXECUTED || cls == CLASS_RECONCILED_NOT_EXECUTED) {
        error = NULL;
    } else if (dec.next_state == STATE_FAILED && cls != CLASS_PERMANENT_FAILURE &&
               cls != CLASS_KEY_CONFLICT) {
        snprintf(reason, sizeof(reason),
                 "not delivered after %d attempt(s), none reached the "
                 "target; last: %s",
                 d->attempt, report.error);
        error = reason;
    } else if (cls == CLASS_KEY_CONFLICT) {
        snprintf(reason, sizeof(reason), "key conflict: the target answered HTTP %ld",
                 report.http_status);
        error = reason;
    }
    if (d->kind == DELIVERY_SEND) {
        metrics_histogram_observe(&r->delivery_seconds, report.latency_ms / 1000.0);
        relay_observe_flow(r, d, cls, &report);
    }
    size_t body_len = d->body.len;
    char *body = body_len > 0 ? strbuf_steal(&d->body) : NULL;
    relay_push_outcome(r, d->target, d->intent_id, d->attempt, cls, &dec, report.sent,
                       d->kind == DELIVERY_SEND ? (d->key_sent ? 1 : 0) : -1, report.http_status,
                       report.latency_ms, error, body, body_len);
    log_event(cls == CLASS_SUCCEEDED ? LOG_DEBUG : LOG_INFO,
              d->kind == DELIVERY_STATUS_CHECK ? "status_check" : "attempt", "key",
              json_string(d->key), "target", json_string(d->target->name), "attempt",
              json_integer(d->attempt), "class", json_string(outcome_class_name(cls)),
              "http_status", report.http_status ? json_integer(report.http_status) : json_null(),
              "state", json_string(outcome_state_name(dec.next_state)), "latency_ms",
              json_integer(report.latency_ms), "error",
              *report.error ? json_string(report.error) : json_null(), LOG_END);
    delivery_free(d);
}

static void on_delivery_done(CURL *easy, CURLcode result, void *data)
{
    struct delivery *d = data;
    struct relay *r = d->owner;
    relay_conclude(r, d, result, false);
    relay_flush(r);
    if (r->stopping)
        relay_check_shutdown(r);
    else if (r->more_due || r->in_flight == 0 || r->in_flight < r->cfg->max_in_flight / 2)
        relay_maybe_claim(r);
}

static void relay_start_delivery(struct relay *r, struct target *t, int64_t id, const char *key,
                                 const char *payload, int attempt, bool ambiguous,
                                 int64_t first_attempt_ms, bool probe)
{
    struct delivery *d =
        payload ? delivery_new(t, id, key, payload, attempt, ambiguous, first_attempt_ms,
                               (size_t)r->cfg->max_response_bytes, wall_ms() / 1000)
                : delivery_new_status_check(t, id, key, attempt, first_attempt_ms,
                                            (size_t)r->cfg->max_response_bytes);
    if (d == NULL) {
        log_event(LOG_ERROR, "delivery_setup_failed", "key", json_string(key), LOG_END);
        return; /* the lease expires and another pass takes it over */
    }
    if (d->kind == DELIVERY_SEND && attempt > 1)
        t->retries++;
    d->probe = probe;
    if (probe)
        log_event(LOG_INFO, "circuit_probe", "target", json_string(t->name), "key",
                  json_string(key), LOG_END);
    d->owner = r;
    d->next = r->deliveries;
    if (r->deliveries)
        r->deliveries->prev = d;
    r->deliveries = d;
    t->in_flight++;
    r->in_flight++;
    if (!http_client_add(r->http, d->easy, d)) {
        relay_conclude(r, d, CURLE_FAILED_INIT, false);
    }
}

/* ---------------------------------------------------------------- idle flag */

static void relay_set_idle(struct relay *r, bool idle);

static void on_idle_changed(void *data, PGresult *res, const char *error)
{
    struct relay *r = data;
    r->idle_change_running = false;
    if (error) {
        log_event(LOG_WARN, "heartbeat_failed", "error", json_string(error), LOG_END);
        return;
    }
    if (r->idle_wanted != r->idle_in_db) {
        relay_set_idle(r, r->idle_wanted); /* changed its mind while this one ran */
        return;
    }
    if (r->idle_in_db)
        relay_maybe_claim(r); /* the lost wake-up: look once more after raising the flag */
}

/* Tell the database whether enqueues should NOTIFY us. One change on the wire
 * at a time; the last wish wins. */
static void relay_set_idle(struct relay *r, bool idle)
{
    r->idle_wanted = idle;
    if (r->idle_in_db == idle || r->idle_change_running || !pg_conn_ready(r->pg))
        return;
    const char *params[2] = {r->cfg->relay_id, idle ? "true" : "false"};
    if (pg_query(r->pg, STMT_HEARTBEAT, 2, params, on_idle_changed, r)) {
        r->idle_change_running = true;
        r->idle_in_db = idle;
        r->last_heartbeat_ms = uv_now(&r->loop);
    }
}

/* ---------------------------------------------------------------- next due */

static void on_poll_timer(uv_timer_t *timer);

static void on_next_due(void *data, PGresult *res, const char *error)
{
    struct relay *r = data;
    r->next_due_running = false;
    if (error || r->stopping)
        return;
    bool none = PQntuples(res) == 0 || PQgetisnull(res, 0, 0);
    if (none) {
        if (r->cfg->exit_when_idle && !relay_has_work(r) && !r->claim_running) {
            log_event(LOG_INFO, "idle_exit", LOG_END);
            r->stopping = true;
            relay_check_shutdown(r);
        }
        return;
    }
    int64_t due_ms = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    uint64_t wait = (uint64_t)(due_ms < 0 ? 0 : due_ms) + 1;
    /* Claims that keep finding nothing although a row is said to be due
     * (another relay holds it, SKIP LOCKED): wait a little longer each time
     * rather than ask again at once. */
    if (r->empty_claims > 1) {
        int shift = r->empty_claims < 8 ? r->empty_claims : 8; /* up to 256 ms */
        uint64_t floor_ms = (uint64_t)1 << shift;
        if (wait < floor_ms)
            wait = floor_ms;
    }
    if (wait < (uint64_t)r->cfg->poll_interval_ms &&
        (uv_timer_get_due_in(&r->poll_timer) == 0 || wait < uv_timer_get_due_in(&r->poll_timer)))
        uv_timer_start(&r->poll_timer, on_poll_timer, wait, (uint64_t)r->cfg->poll_interval_ms);
}

/* Asks when something this relay can take becomes due: a row of a target it
 * has room for whose gate is open, a lease to take over, a row to reconcile. */
static void relay_query_next_due(struct relay *r)
{
    if (r->next_due_running || !pg_conn_ready(r->pg))
        return;
    struct strbuf *names = &r->arrays[0];
    relay_claimable_targets(r, names, NULL, 0);
    const char *params[1] = {names->data};
    if (pg_query(r->pg, STMT_NEXT_DUE, 1, params, on_next_due, r))
        r->next_due_running = true;
}

/* ---------------------------------------------------------------- reconciliation */

static void on_unknown_claimed(void *data, PGresult *res, const char *error)
{
    struct relay *r = data;
    r->reconcile_running = false;
    if (error) {
        log_event(LOG_WARN, "reconcile_claim_failed", "error", json_string(error), LOG_END);
        if (r->stopping)
            relay_check_shutdown(r);
        return;
    }
    if (r->stopping) {
        relay_check_shutdown(r); /* the leases lapse; another pass asks again */
        return;
    }
    int rows = PQntuples(res);
    for (int i = 0; i < rows; i++) {
        struct target *t = targets_find(&r->targets, PQgetvalue(res, i, 2));
        if (t == NULL || t->status_url == NULL)
            continue; /* the lease lapses; asked again later */
        relay_start_delivery(r, t, strtoll(PQgetvalue(res, i, 0), NULL, 10), PQgetvalue(res, i, 1),
                             NULL, (int)strtol(PQgetvalue(res, i, 3), NULL, 10), true,
                             strtoll(PQgetvalue(res, i, 4), NULL, 10), false);
    }
    r->reconciles_started += (uint64_t)rows;
}

/* Ask status URLs about unknown rows that are due. */
static void relay_reconcile(struct relay *r)
{
    if (r->reconcile_running || r->stopping || !r->targets_loaded || !pg_conn_ready(r->pg))
        return;
    bool any = false;
    for (size_t i = 0; i < r->targets.count && !any; i++)
        any = r->targets.items[i]->present && r->targets.items[i]->status_url != NULL;
    int room = r->cfg->max_in_flight - r->in_flight;
    if (!any || room <= 0)
        return;
    char limit[24], lease[24];
    const char *params[3] = {r->cfg->relay_id,
                             int_text(limit, sizeof(limit), room < 64 ? room : 64),
                             int_text(lease, sizeof(lease), r->cfg->lease_ms)};
    if (pg_query(r->pg, STMT_CLAIM_UNKNOWN, 3, params, on_unknown_claimed, r))
        r->reconcile_running = true;
}

/* ---------------------------------------------------------------- claim */

/* Gives every row of a claim's answer back unsent. */
static void relay_release_claimed(struct relay *r, PGresult *res)
{
    for (int i = 0; i < PQntuples(res); i++)
        relay_release_later(r, strtoll(PQgetvalue(res, i, 0), NULL, 10),
                            (int)strtol(PQgetvalue(res, i, 4), NULL, 10));
}

/* True when the claim's answer came so late that its leases may be close to
 * expiring: the database stamps a lease at the start of the claim's
 * transaction, and a claim that waited on a lock, or an answer held up on the
 * way, leaves less of it than lease_ms. A row sent after its lease expired
 * may also be sent by the relay that took it over, and that second request
 * is a second effect at a target that cannot deduplicate (the model's T3,
 * tests/model/README.md). Half the lease is the margin: renewals run every
 * third of it. The rows go back unsent ('released') and are claimed again. */
static bool relay_claim_answer_late(struct relay *r, int rows)
{
    uint64_t elapsed_ms = (uv_hrtime() - r->claim_started_ns) / 1000000u;
    if (rows == 0 || elapsed_ms <= (uint64_t)r->cfg->lease_ms / 2)
        return false;
    r->claims_late++;
    log_event(LOG_WARN, "claim_answer_late", "rows", json_integer(rows), "elapsed_ms",
              json_integer((json_int_t)elapsed_ms), "lease_ms", json_integer(r->cfg->lease_ms),
              "reason",
              json_string("the claim answered after half its lease: its rows are given back "
                          "unsent and claimed again"),
              LOG_END);
    return true;
}

static void on_claimed(void *data, PGresult *res, const char *error)
{
    struct relay *r = data;
    r->claim_running = false;
    metrics_histogram_observe(&r->claim_seconds, (double)(uv_hrtime() - r->claim_started_ns) / 1e9);
    if (error) {
        log_event(LOG_WARN, "claim_failed", "error", json_string(error), LOG_END);
        if (r->stopping)
            relay_check_shutdown(r);
        return;
    }
    int rows = PQntuples(res);
    if (r->stopping) {
        /* A claim that was on the wire when the signal came: give its rows
         * back unsent, and let the shutdown go on (it waited for this claim). */
        relay_release_claimed(r, res);
        relay_check_shutdown(r);
        return;
    }
    if (relay_claim_answer_late(r, rows)) {
        relay_release_claimed(r, res);
        r->more_due = true;
        relay_flush(r);
        relay_maybe_claim(r);
        return;
    }
    for (int i = 0; i < rows; i++) {
        const char *target_name = PQgetvalue(res, i, 2);
        struct target *t = targets_find(&r->targets, target_name);
        int64_t id = strtoll(PQgetvalue(res, i, 0), NULL, 10);
        int attempt = (int)strtol(PQgetvalue(res, i, 4), NULL, 10);
        if (t == NULL) {
            /* Cannot happen: claim only names targets we know. Give it back. */
            relay_release_later(r, id, attempt);
            continue;
        }
        bool ambiguous = PQgetvalue(res, i, 5)[0] == 't';
        int64_t first_attempt_ms = strtoll(PQgetvalue(res, i, 6), NULL, 10);
        struct retry_policy policy = target_retry_policy(t);
        if (!outcome_resend_allowed(&policy, ambiguous, first_attempt_ms, wall_ms())) {
            /* It waited past key_ttl (or the target changed): the target may
             * have forgotten the key of an attempt that may have executed. */
            struct decision dec = {STATE_UNKNOWN, t->reconcile_delay_ms, true};
            relay_push_outcome(r, t, id, attempt, CLASS_NOT_SENT, &dec, 0, -1, 0, 0,
                               "not re-sent: an earlier attempt may have executed and the "
                               "target may no longer remember its key",
                               NULL, 0);
            continue;
        }
        relay_start_delivery(r, t, id, PQgetvalue(res, i, 1), PQgetvalue(res, i, 3), attempt,
                             ambiguous, first_attempt_ms, PQgetvalue(res, i, 7)[0] == 't');
    }
    r->claimed += (uint64_t)rows;
    r->empty_claims = rows == 0 ? r->empty_claims + 1 : 0;
    bool full = rows > 0 && rows >= r->cfg->batch_size;
    if (rows > 0 && r->in_flight >= r->cfg->max_in_flight)
        full = true;
    r->more_due = full;
    /* Idle (wanting a NOTIFY) when nothing is due and nothing is in flight;
     * busy as soon as a claim finds more than one row: enqueues then arrive
     * faster than wake-ups, the relay claims again as deliveries complete,
     * and a flag left up would make every enqueue pay for NOTIFY (the bench
     * measured 1.8x fewer enqueues per second). One row at a time (a
     * trickle) keeps the flag up and saves two heartbeats per intent. */
    if (rows > 1)
        relay_set_idle(r, false);
    if (full) {
        relay_maybe_claim(r);
    } else {
        if (rows == 0 && r->in_flight == 0 && !r->idle_in_db)
            relay_set_idle(r, true); /* claims once more when the flag is up */
        if (r->claim_again) {
            r->claim_again = false;
            relay_maybe_claim(r);
        } else if (rows == 0) {
            relay_query_next_due(r);
        }
    }
    relay_flush(r);
}

/* The room this relay has for a target now: its cap (the target's and the
 * relay's per-target limit), narrowed by the adaptive window, minus what is
 * in flight. Zero for a target that is disabled or gone from the table. The
 * shared gates (circuit, pause, rate) are applied by outbox.claim. */
static int relay_target_room(const struct relay *r, struct target *t)
{
    if (!t->present || !t->enabled)
        return 0;
    int cap = t->max_in_flight < r->cfg->max_in_flight_per_target
                  ? t->max_in_flight
                  : r->cfg->max_in_flight_per_target;
    return flow_room(&t->flow, cap, t->in_flight);
}

/* Fills names (text[]) and, when rooms is not NULL, rooms (int[], each at
 * most limit) with the targets this relay has room for, starting at a random
 * one (fairness across targets). Returns how many. */
static size_t relay_claimable_targets(struct relay *r, struct strbuf *names, struct strbuf *rooms,
                                      int limit)
{
    pgarray_begin(names);
    if (rooms)
        pgarray_begin(rooms);
    size_t count = 0;
    size_t n = r->targets.count;
    size_t start = n ? (size_t)(relay_random(r) * (double)n) : 0;
    for (size_t k = 0; k < n; k++) {
        struct target *t = r->targets.items[(start + k) % n];
        int target_room = relay_target_room(r, t);
        if (target_room <= 0)
            continue;
        pgarray_item_text(names, t->name, strlen(t->name));
        if (rooms)
            pgarray_item_int(rooms, target_room < limit ? target_room : limit);
        count++;
    }
    pgarray_end(names);
    if (rooms)
        pgarray_end(rooms);
    return count;
}

static void relay_maybe_claim(struct relay *r)
{
    if (r->stopping || !r->targets_loaded || !pg_conn_ready(r->pg))
        return;
    if (r->claim_running) {
        r->claim_again = true;
        return;
    }
    int room = r->cfg->max_in_flight - r->in_flight - relay_slots_held(r);
    /* Back-pressure: do not outrun the database with unrecorded outcomes. */
    if (r->buffered.count > (size_t)r->cfg->batch_size * 8)
        return;
    if (room <= 0)
        return;
    int limit = room < r->cfg->batch_size ? room : r->cfg->batch_size;

    struct strbuf *names = &r->arrays[0], *rooms = &r->arrays[1];
    if (relay_claimable_targets(r, names, rooms, limit) == 0)
        return; /* nothing can be sent now: a delivery's end or a reload claims again */
    char limit_text[24], lease_text[24];
    const char *params[5] = {r->cfg->relay_id, names->data, rooms->data,
                             int_text(limit_text, sizeof(limit_text), limit),
                             int_text(lease_text, sizeof(lease_text), r->cfg->lease_ms)};
    if (pg_query(r->pg, STMT_CLAIM, 5, params, on_claimed, r)) {
        r->claim_started_ns = uv_hrtime();
        r->claim_running = true;
        r->claim_again = false;
    }
}

/* ---------------------------------------------------------------- record */

static const char *state_sql_name(enum intent_state s)
{
    return outcome_state_name(s);
}

/* Puts the batch that was on the wire back in front of the newer outcomes. */
static void relay_unsend_recording(struct relay *r)
{
    for (size_t i = 0; i < r->buffered.count; i++)
        outcome_list_push(&r->recording, &r->buffered.items[i]);
    r->buffered.count = 0;
    struct outcome_list tmp = r->buffered;
    r->buffered = r->recording;
    r->recording = tmp;
    r->recording.count = 0;
}

static void on_recorded(void *data, PGresult *res, const char *error)
{
    struct relay *r = data;
    if (error && pg_conn_ready(r->pg_rec)) {
        /* The database refused the batch, the connection is fine: some
         * outcome in it fails (its intent was deleted by hand, say). Halve
         * the batch until the one that fails is alone, then drop only it:
         * its row stays in_flight under a lease no longer renewed, and is
         * taken over as ambiguous. Nothing else waits behind it. */
        if (r->recording.count <= 1) {
            struct pending_outcome *o = &r->recording.items[0];
            log_event(LOG_ERROR, "record_dropped", "intent_id", json_integer(o->intent_id),
                      "attempt", json_integer(o->attempt), "state",
                      json_string(outcome_state_name(o->state)), "error", json_string(error),
                      LOG_END);
            r->held_body_bytes -= outcome_list_clear(&r->recording);
            r->record_limit = 0;
        } else {
            log_event(LOG_WARN, "record_failed", "error", json_string(error), "outcomes",
                      json_integer((json_int_t)r->recording.count), "retrying",
                      json_integer((json_int_t)(r->recording.count / 2)), LOG_END);
            r->record_limit = r->recording.count / 2;
            relay_unsend_recording(r);
        }
        relay_flush(r);
        return;
    }
    if (error) {
        /* The connection is gone: keep every outcome, for the reconnect. */
        log_event(LOG_WARN, "record_failed", "error", json_string(error), "outcomes",
                  json_integer((json_int_t)r->recording.count), LOG_END);
        relay_unsend_recording(r);
        return;
    }
    r->record_limit = 0;
    uint64_t updated = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
    r->recorded += updated;
    if (updated < r->recording.count) {
        r->fenced_out += r->recording.count - updated;
        log_event(LOG_WARN, "record_fenced_out", "outcomes",
                  json_integer((json_int_t)(r->recording.count - updated)), LOG_END);
    }
    bool slots_were_held = relay_slots_held(r) > 0;
    r->held_body_bytes -= outcome_list_clear(&r->recording);
    admin_outcomes_changed(r->admin); /* wakes ?wait= requests */
    relay_flush(r);
    if (r->stopping)
        relay_check_shutdown(r);
    else if (r->more_due || r->in_flight == 0 || slots_were_held)
        relay_maybe_claim(r);
}

/* Moves the oldest buffered outcomes into the batch to send: all of them, or
 * fewer while a failing batch is being halved, or as many as make
 * RECORD_BATCH_BODY_BYTES of response bodies (at least one). */
static void relay_take_batch(struct relay *r)
{
    size_t n = r->buffered.count, bytes = 0, take = 0;
    if (r->record_limit > 0 && r->record_limit < n)
        n = r->record_limit;
    while (take < n && (take == 0 || bytes < RECORD_BATCH_BODY_BYTES))
        bytes += r->buffered.items[take++].body_len;
    for (size_t i = 0; i < take; i++)
        outcome_list_push(&r->recording, &r->buffered.items[i]);
    r->buffered.count -= take;
    memmove(r->buffered.items, r->buffered.items + take,
            r->buffered.count * sizeof(*r->buffered.items));
}

static void relay_flush(struct relay *r)
{
    if (r->recording.count > 0 || r->buffered.count == 0 || !pg_conn_ready(r->pg_rec))
        return;
    relay_take_batch(r);

    struct strbuf *a = r->arrays;
    for (int i = RA_IDS; i < RECORD_ARRAYS; i++)
        pgarray_begin(&a[i]);
    for (size_t i = 0; i < r->recording.count; i++) {
        struct pending_outcome *o = &r->recording.items[i];
        const char *state = state_sql_name(o->state);
        const char *cls = outcome_class_name(o->cls);
        pgarray_item_int(&a[RA_IDS], o->intent_id);
        pgarray_item_int(&a[RA_ATTEMPTS], o->attempt);
        pgarray_item_text(&a[RA_STATES], state, strlen(state));
        pgarray_item_int(&a[RA_DELAYS], o->delay_ms);
        pgarray_item_bool(&a[RA_AMBIGUOUS], o->ambiguous);
        pgarray_item_text(&a[RA_CLASSES], cls, strlen(cls));
        if (o->sent < 0)
            pgarray_item_null(&a[RA_SENT]);
        else
            pgarray_item_bool(&a[RA_SENT], o->sent == 1);
        if (o->http_status > 0)
            pgarray_item_int(&a[RA_HTTP], o->http_status);
        else
            pgarray_item_null(&a[RA_HTTP]);
        pgarray_item_text(&a[RA_ERRORS], o->error, o->error ? strlen(o->error) : 0);
        pgarray_item_int(&a[RA_LATENCIES], o->latency_ms);
        pgarray_item_text(&a[RA_BODIES], o->body, o->body_len);
        if (o->key_sent < 0)
            pgarray_item_null(&a[RA_KEY_SENT]);
        else
            pgarray_item_bool(&a[RA_KEY_SENT], o->key_sent == 1);
    }
    const char *params[RECORD_ARRAYS];
    params[0] = r->cfg->relay_id;
    for (int i = RA_IDS; i < RECORD_ARRAYS; i++) {
        pgarray_end(&a[i]);
        params[i] = a[i].data;
    }
    if (!pg_query(r->pg_rec, STMT_RECORD, RECORD_ARRAYS, params, on_recorded, r))
        relay_unsend_recording(r); /* not connected after all: wait for the reconnect */
    /* Large bodies were escaped into the arrays: give that memory back. */
    if (a[RA_BODIES].cap > 2 * RECORD_BATCH_BODY_BYTES)
        strbuf_shrink(&a[RA_BODIES], RECORD_BATCH_BODY_BYTES);
}

/* ---------------------------------------------------------------- release */

static void on_released(void *data, PGresult *res, const char *error)
{
    struct relay *r = data;
    r->releasing = false;
    if (error) {
        log_event(LOG_WARN, "release_failed", "error", json_string(error), LOG_END);
        return; /* kept; retried */
    }
    r->released += r->releases.count;
    r->releases.count = 0;
    if (r->stopping)
        relay_check_shutdown(r);
}

static void relay_send_releases(struct relay *r)
{
    if (r->releasing || r->releases.count == 0 || !pg_conn_ready(r->pg))
        return;
    struct strbuf *ids = &r->arrays[0], *attempts = &r->arrays[1];
    pgarray_begin(ids);
    pgarray_begin(attempts);
    for (size_t i = 0; i < r->releases.count; i++) {
        pgarray_item_int(ids, r->releases.ids[i]);
        pgarray_item_int(attempts, r->releases.attempts[i]);
    }
    pgarray_end(ids);
    pgarray_end(attempts);
    const char *params[3] = {r->cfg->relay_id, ids->data, attempts->data};
    if (pg_query(r->pg, STMT_RELEASE, 3, params, on_released, r))
        r->releasing = true;
}

/* ---------------------------------------------------------------- leases */

static void on_taken_over(void *data, PGresult *res, const char *error)
{
    struct relay *r = data;
    r->take_over_running = false;
    if (error) {
        log_event(LOG_WARN, "take_over_failed", "error", json_string(error), LOG_END);
        if (r->stopping)
            relay_check_shutdown(r);
        return;
    }
    int rows = PQntuples(res);
    for (int i = 0; i < rows; i++) {
        int64_t id = strtoll(PQgetvalue(res, i, 0), NULL, 10);
        const char *key = PQgetvalue(res, i, 1);
        struct target *t = targets_find(&r->targets, PQgetvalue(res, i, 2));
        int attempt = (int)strtol(PQgetvalue(res, i, 3), NULL, 10);
        struct intent_progress progress = {
            .attempt = attempt,
            .was_ambiguous = PQgetvalue(res, i, 4)[0] == 't',
            .first_attempt_ms = strtoll(PQgetvalue(res, i, 5), NULL, 10),
            .now_ms = wall_ms(),
            .retry_after_ms = -1,
        };
        struct retry_policy policy;
        if (t)
            policy = target_retry_policy(t);
        else
            memset(&policy, 0, sizeof(policy)); /* unknown target: unknown state, never resend */
        struct decision dec = outcome_decide(CLASS_AMBIGUOUS, &policy, &progress, relay_random(r));
        char error_text[512];
        snprintf(error_text, sizeof(error_text),
                 "lease of relay %s expired while in flight: the request may have executed",
                 PQgetvalue(res, i, 6));
        relay_push_outcome(r, t, id, attempt, CLASS_AMBIGUOUS, &dec, -1, -1, 0, 0, error_text, NULL,
                           0);
        log_event(LOG_WARN, "lease_taken_over", "key", json_string(key), "target",
                  json_string(PQgetvalue(res, i, 2)), "attempt", json_integer(attempt),
                  "previous_owner", json_string(PQgetvalue(res, i, 6)), "state",
                  json_string(outcome_state_name(dec.next_state)), LOG_END);
    }
    r->taken_over += (uint64_t)rows;
    relay_flush(r); /* a full batch continues at the next poll tick */
    if (r->stopping)
        relay_check_shutdown(r);
}

/* The rows this relay holds: being delivered, or finished and waiting to be
 * recorded. Their leases are renewed, and they are never taken over by this
 * relay itself, whatever their lease says (the record connection may have
 * been down for longer than a lease). */
static bool relay_held_ids(const struct relay *r, struct strbuf *ids)
{
    pgarray_begin(ids);
    bool any = false;
    for (struct delivery *d = r->deliveries; d; d = d->next, any = true)
        pgarray_item_int(ids, d->intent_id);
    const struct outcome_list *lists[2] = {&r->buffered, &r->recording};
    for (int l = 0; l < 2; l++)
        for (size_t i = 0; i < lists[l]->count; i++, any = true)
            pgarray_item_int(ids, lists[l]->items[i].intent_id);
    pgarray_end(ids);
    return any;
}

static void relay_take_over_expired(struct relay *r)
{
    if (r->take_over_running || r->stopping || !r->targets_loaded || !pg_conn_ready(r->pg))
        return;
    struct strbuf held;
    strbuf_init(&held);
    relay_held_ids(r, &held);
    char limit[24], lease[24];
    const char *params[4] = {r->cfg->relay_id, int_text(limit, sizeof(limit), TAKE_OVER_BATCH),
                             int_text(lease, sizeof(lease), r->cfg->lease_ms), held.data};
    if (pg_query(r->pg, STMT_TAKE_OVER, 4, params, on_taken_over, r))
        r->take_over_running = true;
    strbuf_free(&held);
}

static void on_renewed(void *data, PGresult *res, const char *error)
{
    struct relay *r = data;
    r->renew_running = false;
    if (error)
        log_event(LOG_WARN, "lease_renew_failed", "error", json_string(error), LOG_END);
}

static void relay_renew_leases(struct relay *r)
{
    if (r->renew_running || !pg_conn_ready(r->pg))
        return;
    struct strbuf ids;
    strbuf_init(&ids);
    if (!relay_held_ids(r, &ids)) {
        strbuf_free(&ids);
        return;
    }
    char lease[24];
    const char *params[3] = {r->cfg->relay_id, ids.data,
                             int_text(lease, sizeof(lease), r->cfg->lease_ms)};
    if (pg_query(r->pg, STMT_RENEW, 3, params, on_renewed, r))
        r->renew_running = true;
    strbuf_free(&ids);
}

/* ---------------------------------------------------------------- targets */

static void on_targets(void *data, PGresult *res, const char *error)
{
    struct relay *r = data;
    r->targets_loading = false;
    if (error) {
        log_event(LOG_ERROR, "targets_load_failed", "error", json_string(error), LOG_END);
        return;
    }
    targets_load(&r->targets, res);
    r->last_targets_ms = uv_now(&r->loop);
    if (!r->targets_loaded)
        log_event(LOG_INFO, "targets_loaded", "count", json_integer((json_int_t)r->targets.count),
                  LOG_END);
    r->targets_loaded = true;
    relay_maybe_claim(r);
}

static void relay_load_targets(struct relay *r)
{
    if (r->targets_loading || !pg_conn_ready(r->pg))
        return;
    if (pg_query(r->pg, STMT_TARGETS, 0, NULL, on_targets, r))
        r->targets_loading = true;
}

/* ---------------------------------------------------------------- timers */

static void on_poll_timer(uv_timer_t *timer)
{
    struct relay *r = timer->data;
    relay_take_over_expired(r);
    relay_reconcile(r);
    relay_maybe_claim(r);
}

static void on_heartbeat_done(void *data, PGresult *res, const char *error)
{
    (void)data;
    if (error)
        log_event(LOG_WARN, "heartbeat_failed", "error", json_string(error), LOG_END);
}

static void on_maintenance_timer(uv_timer_t *timer)
{
    struct relay *r = timer->data;
    if (!pg_conn_ready(r->pg))
        return;
    uint64_t now = uv_now(&r->loop);
    relay_renew_leases(r);
    relay_flush(r);
    relay_send_releases(r);
    if (r->stopping)
        return;
    if (now - r->last_targets_ms >= (uint64_t)r->cfg->targets_refresh_ms)
        relay_load_targets(r);
    relay_refresh_live_counts(r);
    if (now - r->last_heartbeat_ms >= HEARTBEAT_EVERY_MS && !r->idle_change_running) {
        const char *params[2] = {r->cfg->relay_id, r->idle_in_db ? "true" : "false"};
        if (pg_query(r->pg, STMT_HEARTBEAT, 2, params, on_heartbeat_done, r))
            r->last_heartbeat_ms = now;
    }
}

/* ---------------------------------------------------------------- database events */

static void on_db_ready(void *data)
{
    struct relay *r = data;
    /* NOTIFY is lost while disconnected: re-announce, reload, flush, claim. */
    r->idle_in_db = true; /* forces the flag down on the next full claim */
    r->idle_change_running = false;
    relay_set_idle(r, false);
    relay_load_targets(r);
    relay_flush(r);
    relay_send_releases(r);
    if (r->stopping)
        relay_check_shutdown(r);
    else
        relay_maybe_claim(r);
}

/* The record connection is (back) up: write what waited. */
static void on_record_db_ready(void *data)
{
    struct relay *r = data;
    relay_flush(r);
    if (r->stopping)
        relay_check_shutdown(r);
}

static void on_db_notify(void *data, const char *channel)
{
    struct relay *r = data;
    relay_maybe_claim(r);
}

/* ---------------------------------------------------------------- admin port */

static void on_live_counts(void *data, PGresult *res, const char *error)
{
    struct relay *r = data;
    r->live_counts_running = false;
    if (error)
        return;
    static const char *const states[4] = {"pending", "in_flight", "unknown", "awaiting_approval"};
    for (int i = 0; i < PQntuples(res); i++) {
        for (int k = 0; k < 4; k++) {
            if (strcmp(PQgetvalue(res, i, 0), states[k]) != 0)
                continue;
            r->live_counts[k] = strtoll(PQgetvalue(res, i, 1), NULL, 10);
            if (k == 0)
                r->oldest_due_age_s = strtod(PQgetvalue(res, i, 2), NULL);
        }
    }
}

static void relay_refresh_live_counts(struct relay *r)
{
    uint64_t now = uv_now(&r->loop);
    if (r->admin == NULL || r->live_counts_running || !pg_conn_ready(r->pg) ||
        now - r->last_live_counts_ms < LIVE_COUNTS_EVERY_MS)
        return;
    if (pg_query(r->pg, STMT_LIVE_COUNTS, 0, NULL, on_live_counts, r)) {
        r->live_counts_running = true;
        r->last_live_counts_ms = now;
    }
}

static const char *relay_ready_reason(void *data)
{
    struct relay *r = data;
    if (r->stopping)
        return "shutting down";
    if (!pg_conn_ready(r->pg)) {
        /* No host, port or user on the port: the full text is in the log. */
        snprintf(r->ready_reason, sizeof(r->ready_reason), "database not connected: %s",
                 admin_database_reason(pg_conn_status_reason(r->pg)));
        return r->ready_reason;
    }
    if (!pg_conn_ready(r->pg_rec)) {
        snprintf(r->ready_reason, sizeof(r->ready_reason), "record connection not connected: %s",
                 admin_database_reason(pg_conn_status_reason(r->pg_rec)));
        return r->ready_reason;
    }
    return r->targets_loaded ? "" : "targets not loaded yet";
}

static void relay_write_flow_metrics(struct relay *r, struct strbuf *out)
{
    metrics_family(out, "outbox_target_circuit_open", METRICS_GAUGE,
                   "1 while the target's circuit is open or half-open (shared by all relays).");
    for (size_t i = 0; i < r->targets.count; i++)
        metrics_sample(out, "outbox_target_circuit_open",
                       METRICS_LABELS({"target", r->targets.items[i]->name}),
                       r->targets.items[i]->circuit != CIRCUIT_CLOSED ? 1 : 0);
    metrics_family(out, "outbox_target_paused", METRICS_GAUGE,
                   "1 while a Retry-After (429 or 503) pauses the whole target.");
    for (size_t i = 0; i < r->targets.count; i++)
        metrics_sample(out, "outbox_target_paused",
                       METRICS_LABELS({"target", r->targets.items[i]->name}),
                       r->targets.items[i]->paused ? 1 : 0);
    metrics_family(out, "outbox_target_concurrency_limit", METRICS_GAUGE,
                   "This relay's adaptive concurrency window for the target (AIMD).");
    for (size_t i = 0; i < r->targets.count; i++) {
        struct target *t = r->targets.items[i];
        int cap = t->max_in_flight < r->cfg->max_in_flight_per_target
                      ? t->max_in_flight
                      : r->cfg->max_in_flight_per_target;
        metrics_sample(out, "outbox_target_concurrency_limit", METRICS_LABELS({"target", t->name}),
                       (double)(flow_room(&t->flow, cap, 0)));
    }
}

static void relay_write_metrics(void *data, struct strbuf *out)
{
    struct relay *r = data;
    static const char *const live_states[4] = {"pending", "in_flight", "unknown",
                                               "awaiting_approval"};
    metrics_family(out, "outbox_intents", METRICS_GAUGE,
                   "Intents in each live state (whole database, refreshed every 5 s).");
    for (int k = 0; k < 4; k++)
        metrics_sample(out, "outbox_intents", METRICS_LABELS({"state", live_states[k]}),
                       (double)r->live_counts[k]);
    metrics_gauge(out, "outbox_oldest_pending_age_seconds",
                  "Age of the oldest due pending intent (delivery lag).", METRICS_NO_LABELS,
                  r->oldest_due_age_s);
    metrics_family(out, "outbox_attempts_total", METRICS_COUNTER,
                   "Delivery attempts, take-overs and status checks by target and class.");
    for (size_t i = 0; i < r->targets.count; i++)
        for (int c = 0; c < CLASS_COUNT; c++)
            metrics_sample_uint(
                out, "outbox_attempts_total",
                METRICS_LABELS({"target", r->targets.items[i]->name},
                               {"class", outcome_class_name((enum attempt_class)c)}),
                r->targets.items[i]->attempts_by_class[c]);
    metrics_family(out, "outbox_deliveries_total", METRICS_COUNTER,
                   "Decisions after an attempt by target and the state it left the intent in.");
    for (size_t i = 0; i < r->targets.count; i++)
        for (int st = 0; st <= STATE_UNKNOWN; st++)
            metrics_sample_uint(
                out, "outbox_deliveries_total",
                METRICS_LABELS({"target", r->targets.items[i]->name},
                               {"state", outcome_state_name((enum intent_state)st)}),
                r->targets.items[i]->decisions_by_state[st]);
    metrics_family(out, "outbox_retries_total", METRICS_COUNTER,
                   "Attempts after the first, by target.");
    for (size_t i = 0; i < r->targets.count; i++)
        metrics_sample_uint(out, "outbox_retries_total",
                            METRICS_LABELS({"target", r->targets.items[i]->name}),
                            r->targets.items[i]->retries);
    relay_write_flow_metrics(r, out);
    metrics_family(out, "outbox_in_flight", METRICS_GAUGE,
                   "Deliveries and status checks of this relay in flight, by target.");
    for (size_t i = 0; i < r->targets.count; i++)
        metrics_sample(out, "outbox_in_flight",
                       METRICS_LABELS({"target", r->targets.items[i]->name}),
                       r->targets.items[i]->in_flight);
    metrics_family(out, "outbox_reconciliations_total", METRICS_COUNTER,
                   "Status URL checks of unknown intents by target and result.");
    for (size_t i = 0; i < r->targets.count; i++) {
        struct target *t = r->targets.items[i];
        metrics_sample_uint(out, "outbox_reconciliations_total",
                            METRICS_LABELS({"target", t->name}, {"result", "executed"}),
                            t->attempts_by_class[CLASS_RECONCILED_EXECUTED]);
        metrics_sample_uint(out, "outbox_reconciliations_total",
                            METRICS_LABELS({"target", t->name}, {"result", "not_executed"}),
                            t->attempts_by_class[CLASS_RECONCILED_NOT_EXECUTED]);
        metrics_sample_uint(out, "outbox_reconciliations_total",
                            METRICS_LABELS({"target", t->name}, {"result", "inconclusive"}),
                            t->attempts_by_class[CLASS_RECONCILE_INCONCLUSIVE]);
    }
    metrics_family(out, "outbox_delivery_duration_seconds", METRICS_HISTOGRAM,
                   "Time from starting a request to its end.");
    metrics_histogram_render(out, "outbox_delivery_duration_seconds", METRICS_NO_LABELS,
                             &r->delivery_seconds);
    metrics_family(out, "outbox_claim_duration_seconds", METRICS_HISTOGRAM,
                   "Round trip of one claim statement.");
    metrics_histogram_render(out, "outbox_claim_duration_seconds", METRICS_NO_LABELS,
                             &r->claim_seconds);
    metrics_counter(out, "outbox_claimed_total", "Rows claimed by this relay.", METRICS_NO_LABELS,
                    r->claimed);
    pruner_write_metrics(r->pruner, out);
    metrics_counter(out, "outbox_claims_late_total",
                    "Claims answered after half their lease; their rows were given back unsent.",
                    METRICS_NO_LABELS, r->claims_late);
    metrics_counter(out, "outbox_taken_over_total",
                    "In-flight rows of dead relays taken over (as ambiguous).", METRICS_NO_LABELS,
                    r->taken_over);
    metrics_counter(out, "outbox_recorded_total", "Outcomes written to the database.",
                    METRICS_NO_LABELS, r->recorded);
    metrics_counter(out, "outbox_fenced_out_total",
                    "Outcomes refused by the lease fence (a newer owner or attempt).",
                    METRICS_NO_LABELS, r->fenced_out);
    metrics_gauge(out, "outbox_unrecorded_outcomes", "Outcomes waiting in memory for the database.",
                  METRICS_NO_LABELS, (double)(r->buffered.count + r->recording.count));
    metrics_gauge(out, "outbox_ready", "1 while the relay is ready (database connected).",
                  METRICS_NO_LABELS, *relay_ready_reason(r) == '\0' ? 1 : 0);
    metrics_gauge(out, "outbox_db_connected",
                  "1 while both database connections (main and record) are ready.",
                  METRICS_NO_LABELS, pg_conn_ready(r->pg) && pg_conn_ready(r->pg_rec) ? 1 : 0);
    metrics_counter(out, "outbox_db_reconnects_total",
                    "Database connections lost or failed (each followed by a reconnect).",
                    METRICS_NO_LABELS, pg_conn_reconnects(r->pg) + pg_conn_reconnects(r->pg_rec));
}

struct intent_lookup {
    void *req;
    void (*done)(void *req, int status, const char *json_body);
};

static void on_intent_looked_up(void *data, PGresult *res, const char *error)
{
    struct intent_lookup *lookup = data;
    if (error)
        lookup->done(lookup->req, 503, NULL);
    else if (PQntuples(res) == 0)
        lookup->done(lookup->req, 404, NULL);
    else
        lookup->done(lookup->req, 200, PQgetvalue(res, 0, 0));
    free(lookup);
}

static void relay_lookup_intent(void *data, const char *key, void *req,
                                void (*done)(void *req, int status, const char *json_body))
{
    struct relay *r = data;
    struct intent_lookup *lookup = xmalloc(sizeof(*lookup));
    const char *params[1] = {key};
    lookup->req = req;
    lookup->done = done;
    if (pg_query(r->pg, STMT_OUTCOME, 1, params, on_intent_looked_up, lookup))
        return; /* pg calls back exactly once, also on loss or close */
    free(lookup);
    done(req, 503, NULL);
}

/* ---------------------------------------------------------------- shutdown */

static void on_shutdown_timer(uv_timer_t *timer);

static void relay_abort_deliveries(struct relay *r)
{
    r->aborting = true;
    while (r->deliveries) {
        struct delivery *d = r->deliveries;
        http_client_remove(r->http, d->easy);
        relay_conclude(r, d, CURLE_ABORTED_BY_CALLBACK, true);
    }
    relay_flush(r);
    relay_send_releases(r);
}

static void on_farewell(void *data, PGresult *res, const char *error)
{
    struct relay *r = data;
    relay_close(r);
}

static void relay_check_shutdown(struct relay *r)
{
    if (!r->stopping || r->closing)
        return;
    if (r->in_flight > 0)
        return; /* the grace timer is running */
    relay_flush(r);
    relay_send_releases(r);
    if (relay_has_work(r) || r->claim_running || r->take_over_running || r->reconcile_running)
        return; /* wait for the database (bounded by the shutdown timer) */
    if (r->farewell_sent)
        return;
    r->farewell_sent = true;
    const char *params[1] = {r->cfg->relay_id};
    if (!pg_query(r->pg, STMT_GONE, 1, params, on_farewell, r))
        relay_close(r);
}

static void relay_begin_shutdown(struct relay *r, const char *why)
{
    if (r->stopping) {
        if (!r->aborting) {
            log_event(LOG_WARN, "shutdown_now", "reason", json_string(why), LOG_END);
            uv_timer_start(&r->shutdown_timer, on_shutdown_timer, 0, 0);
        }
        return;
    }
    r->stopping = true;
    log_event(LOG_INFO, "shutdown", "reason", json_string(why), "in_flight",
              json_integer(r->in_flight), "grace_ms", json_integer(r->cfg->grace_ms), LOG_END);
    uv_timer_stop(&r->poll_timer);
    uv_timer_start(&r->shutdown_timer, on_shutdown_timer, (uint64_t)r->cfg->grace_ms, 0);
    relay_check_shutdown(r);
}

static void on_shutdown_timer(uv_timer_t *timer)
{
    struct relay *r = timer->data;
    if (!r->aborting) {
        if (r->in_flight > 0)
            log_event(LOG_WARN, "grace_period_over", "aborted", json_integer(r->in_flight),
                      LOG_END);
        relay_abort_deliveries(r);
        uv_timer_start(&r->shutdown_timer, on_shutdown_timer, SHUTDOWN_RECORD_WAIT_MS, 0);
        relay_check_shutdown(r);
        return;
    }
    /* The database did not take the last outcomes in time. The rows stay
     * in_flight under our lease; another relay takes them over as ambiguous. */
    log_event(LOG_ERROR, "shutdown_unrecorded", "outcomes",
              json_integer((json_int_t)(r->buffered.count + r->recording.count)), "releases",
              json_integer((json_int_t)r->releases.count), "reason",
              json_string(pg_conn_ready(r->pg_rec) ? pg_conn_status_reason(r->pg)
                                                   : pg_conn_status_reason(r->pg_rec)),
              LOG_END);
    r->exit_code = 1;
    relay_close(r);
}

static void on_signal(uv_signal_t *handle, int signum)
{
    struct relay *r = handle->data;
    relay_begin_shutdown(r, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

/* ---------------------------------------------------------------- close */

static void on_pg_closed(void *data)
{
    (void)data;
}

static void on_http_closed(void *data)
{
    (void)data;
}

static void relay_close(struct relay *r)
{
    if (r->closing)
        return;
    r->closing = true;
    if (r->admin) {
        admin_close(r->admin, NULL, NULL);
        r->admin = NULL;
    }
    log_event(LOG_INFO, "relay_stopped", "claimed", json_integer((json_int_t)r->claimed),
              "succeeded", json_integer((json_int_t)r->attempts_by_class[CLASS_SUCCEEDED]),
              "ambiguous", json_integer((json_int_t)r->attempts_by_class[CLASS_AMBIGUOUS]),
              "not_sent", json_integer((json_int_t)r->attempts_by_class[CLASS_NOT_SENT]),
              "taken_over", json_integer((json_int_t)r->taken_over), "recorded",
              json_integer((json_int_t)r->recorded), "fenced_out",
              json_integer((json_int_t)r->fenced_out), "released",
              json_integer((json_int_t)r->released), LOG_END);
    uv_close((uv_handle_t *)&r->poll_timer, NULL);
    uv_close((uv_handle_t *)&r->maintenance_timer, NULL);
    uv_close((uv_handle_t *)&r->shutdown_timer, NULL);
    uv_close((uv_handle_t *)&r->sigterm, NULL);
    uv_close((uv_handle_t *)&r->sigint, NULL);
    pg_conn_close(r->pg, on_pg_closed, r);
    pg_conn_close(r->pg_rec, on_pg_closed, r);
    pruner_close(r->pruner);
    r->pruner = NULL;
    http_client_close(r->http, on_http_closed, r);
}

/* ---------------------------------------------------------------- run */

int relay_run(const struct config *cfg)
{
    struct relay *r = xcalloc(1, sizeof(*r));
    r->cfg = cfg;
    r->rng = uv_hrtime() ^ ((uint64_t)getpid() << 32) ^ 0x9E3779B97F4A7C15ULL;
    for (int i = 0; i < RECORD_ARRAYS; i++)
        strbuf_init(&r->arrays[i]);
    uv_loop_init(&r->loop);
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);

    r->http = http_client_new(&r->loop, on_delivery_done);
    struct pg_events events = {
        .name = "main", .data = r, .on_ready = on_db_ready, .on_notify = on_db_notify};
    r->pg = pg_conn_new(&r->loop, cfg->db, relay_statements, RELAY_STATEMENT_COUNT, SQL_CHANNEL,
                        cfg->connect_timeout_ms, cfg->reconnect_max_ms, events);
    struct pg_events record_events = {.name = "record", .data = r, .on_ready = on_record_db_ready};
    r->pg_rec = pg_conn_new(&r->loop, cfg->db, relay_statements, RELAY_STATEMENT_COUNT, NULL,
                            cfg->connect_timeout_ms, cfg->reconnect_max_ms, record_events);

    uv_timer_init(&r->loop, &r->poll_timer);
    uv_timer_init(&r->loop, &r->maintenance_timer);
    uv_timer_init(&r->loop, &r->shutdown_timer);
    r->poll_timer.data = r->maintenance_timer.data = r->shutdown_timer.data = r;
    uv_signal_init(&r->loop, &r->sigterm);
    uv_signal_init(&r->loop, &r->sigint);
    r->sigterm.data = r->sigint.data = r;
    uv_signal_start(&r->sigterm, on_signal, SIGTERM);
    uv_signal_start(&r->sigint, on_signal, SIGINT);

    uint64_t maintenance = (uint64_t)cfg->lease_ms / 3;
    if (maintenance > 1000)
        maintenance = 1000;
    uv_timer_start(&r->poll_timer, on_poll_timer, (uint64_t)cfg->poll_interval_ms,
                   (uint64_t)cfg->poll_interval_ms);
    uv_timer_start(&r->maintenance_timer, on_maintenance_timer, maintenance, maintenance);

    log_event(LOG_INFO, "relay_started", "relay", json_string(cfg->relay_id), "batch_size",
              json_integer(cfg->batch_size), "max_in_flight", json_integer(cfg->max_in_flight),
              "lease_ms", json_integer(cfg->lease_ms), LOG_END);
    static const double latency_bounds[] = METRICS_LATENCY_SECONDS_BOUNDS;
    if (!metrics_histogram_init(&r->delivery_seconds, latency_bounds,
                                METRICS_LATENCY_SECONDS_BOUND_COUNT) ||
        !metrics_histogram_init(&r->claim_seconds, latency_bounds,
                                METRICS_LATENCY_SECONDS_BOUND_COUNT))
        abort();
    bool started = true;
    if (cfg->admin_listen && *cfg->admin_listen) {
        struct admin_hooks hooks = {
            .data = r,
            .ready_reason = relay_ready_reason,
            .write_metrics = relay_write_metrics,
            .lookup_intent = relay_lookup_intent,
        };
        struct admin_limits limits = {
            .max_connections = ADMIN_MAX_CONNECTIONS,
            .max_waits = ADMIN_MAX_WAITS,
            .probe_reserve = ADMIN_PROBE_RESERVE,
            .max_request_bytes = ADMIN_MAX_REQUEST_BYTES,
        };
        r->admin = admin_start(&r->loop, cfg->admin_listen, hooks, &limits, cfg->admin_token_file);
        if (r->admin == NULL) {
            r->exit_code = 1;
            started = false;
            relay_close(r);
        }
    }
    if (started) {
        pg_conn_set_query_timeout(r->pg, cfg->query_timeout_ms);
        pg_conn_set_query_timeout(r->pg_rec, cfg->query_timeout_ms);
        pg_conn_start(r->pg);
        pg_conn_start(r->pg_rec);
        r->pruner = pruner_start(&r->loop, cfg);
    }
    uv_run(&r->loop, UV_RUN_DEFAULT);

    int rc = uv_loop_close(&r->loop);
    if (rc != 0) {
        log_event(LOG_ERROR, "loop_not_closed", "error", json_string(uv_strerror(rc)), LOG_END);
        r->exit_code = r->exit_code ? r->exit_code : 1;
    }
    int exit_code = r->exit_code;
    targets_free(&r->targets);
    outcome_list_clear(&r->buffered);
    outcome_list_clear(&r->recording);
    free(r->buffered.items);
    free(r->recording.items);
    free(r->releases.ids);
    free(r->releases.attempts);
    for (int i = 0; i < RECORD_ARRAYS; i++)
        strbuf_free(&r->arrays[i]);
    delivery_pool_drain();
    curl_global_cleanup();
    free(r);
    return exit_code;
}
