/*
 * relay.c — the daemon: claim due intents, deliver them, record outcomes.
 *
 * DESIGN
 * One libuv loop drives everything: the database (pg.c), HTTP (http_client.c),
 * timers and signals. Nothing here blocks.
 *
 *   claim ──rows──► deliveries (curl multi) ──done──► outcome buffer ──► record
 *     ▲                                                                  │
 *     └──── NOTIFY / poll timer / a full batch / capacity freed ◄────────┘
 *
 * Claiming: one statement per batch (outbox.claim_due), bounded by the free
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
 * Leases: renewed on a timer for the rows this relay holds (the database
 * renews those past the first sixth of their lease: outbox.renew_leases, and
 * the relay does not send those it leased less than a twelfth ago); rows
 * whose lease expired (their relay died) are taken over and decided as an
 * ambiguous attempt, exactly as if the request had timed out.
 *
 * Shutdown (SIGTERM/SIGINT): stop claiming, give in-flight deliveries the
 * grace period, then abort the rest (an aborted request that was sent is
 * ambiguous; one that was not is released back to pending), write every
 * outcome, say goodbye to outbox.relays, close every handle, and require
 * uv_loop_close() == 0. The phases are enum relay_phase (relay_int.h).
 *
 * Only the scheduler is here (relay_int.h lists the files around it). It
 * reads in the order a delivery runs: claim (and the idle flag, the next due
 * time), deliveries and their end, record, give-back, leases and take-over,
 * reconciliation; then targets, timers, database events, shutdown, close.
 */
#include "relay_int.h"

#include "admin/admin.h"
#include "lib/dlist.h"
#include "flow.h"
#include "lib/log.h"
#include "lib/xalloc.h"
#include "outcome.h"
#include "sql.h"

#include <inttypes.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How long shutdown waits for the database to take the last outcomes. */
#define SHUTDOWN_RECORD_WAIT_MS 10000
#define TAKE_OVER_BATCH 256
#define POOL_TRIM_EVERY_MS 60000

static void relay_maybe_claim(struct relay *r);
static void relay_set_idle(struct relay *r, bool idle);
static void relay_query_next_due(struct relay *r);
static void relay_start_delivery(struct relay *r, struct target *t, const struct claimed_row *row,
                                 uint64_t leased_ns);
static void relay_buffer_outcome(struct relay *r, struct target *t,
                                 const struct pending_outcome *o);
static void relay_flush(struct relay *r);
static void relay_send_releases(struct relay *r);
static void relay_check_shutdown(struct relay *r);
static void relay_setup_done(struct relay *r, struct delivery *setup, CURLcode result);
static void on_reply_timer(uv_timer_t *timer);

/* ---------------------------------------------------------------- helpers */

static double relay_random(struct relay *r)
{
    /* xorshift64*: jitter only, not security. */
    r->rng ^= r->rng >> 12;
    r->rng ^= r->rng << 25;
    r->rng ^= r->rng >> 27;
    return (double)((r->rng * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}

static char *int_text(char *buf, size_t size, int64_t v)
{
    snprintf(buf, size, "%" PRId64, v);
    return buf;
}

static int relay_slots_held(const struct relay *r)
{
    return record_slots_held(r->records.held_body_bytes, r->cfg->max_response_bytes,
                             r->cfg->max_in_flight);
}

static bool relay_has_work(const struct relay *r)
{
    return r->in_flight > 0 || record_queue_unrecorded(&r->records) > 0 || r->releases.count > 0 ||
           r->release.running;
}

/* ---------------------------------------------------------------- claim */

/* Gives every row of a claim's answer back unsent. */
static void relay_release_claimed(struct relay *r, PGresult *res)
{
    for (int i = 0; i < PQntuples(res); i++) {
        struct claimed_row row = sql_claimed_row(res, i);
        id_batch_push(&r->releases, row.id, row.attempt);
    }
}

/* True (counted and logged) when the claim's answer came so late that its
 * leases may be close to expiring (outcome_claim_answer_late). */
static bool relay_claim_answer_late(struct relay *r, int rows)
{
    uint64_t elapsed_ms = (uv_hrtime() - r->claim_started_ns) / 1000000u;
    if (rows == 0 || !outcome_claim_answer_late(elapsed_ms, r->cfg->lease_ms))
        return false;
    r->claims_late++;
    log_event(LOG_WARN, "claim_answer_late", "rows", json_integer(rows), "elapsed_ms",
              json_integer((json_int_t)elapsed_ms), "lease_ms", json_integer(r->cfg->lease_ms),
              "reason", json_string(OUTCOME_CLAIM_LATE_REASON), LOG_END);
    return true;
}

/* Sends one claimed row, or decides it without a request when sending it
 * again is not safe any more. */
static void relay_take_claimed_row(struct relay *r, const struct claimed_row *row)
{
    struct target *t = targets_find(&r->targets, row->target);
    if (t == NULL) {
        /* Cannot happen: claim only names targets we know. Give it back. */
        id_batch_push(&r->releases, row->id, row->attempt);
        return;
    }
    if ((t->key_header != NULL) != row->key_sent) {
        /* The claim stamped the row by the target's key header in the
         * database, and this relay's copy says otherwise (a reload raced
         * the claim). The stamp is what a later take-over trusts, so the
         * request must match it: give the row back unsent, reload. */
        log_event(LOG_WARN, "claim_key_header_changed", "key", json_string(row->key), "target",
                  json_string(t->name), "key_sent", json_boolean(row->key_sent), LOG_END);
        id_batch_push(&r->releases, row->id, row->attempt);
        stmt_slot_start(&r->targets_load, 0, NULL);
        return;
    }
    struct retry_policy policy = target_retry_policy(t);
    if (!outcome_resend_allowed(&policy, row->ambiguous, row->first_attempt_ms, wall_clock_ms())) {
        /* It waited past key_ttl (or the target changed): the target may
         * have forgotten the key of an attempt that may have executed. */
        struct decision dec = outcome_decide_not_resent(&policy);
        struct pending_outcome o = pending_outcome_new(row->id, row->attempt, CLASS_NOT_SENT, &dec,
                                                       OUTCOME_NOT_RESENT_REASON);
        o.sent = 0;
        relay_buffer_outcome(r, t, &o);
        return;
    }
    relay_start_delivery(r, t, row, r->claim_started_ns);
}

/* After a claim's rows went out: claim again, raise or lower the idle flag,
 * or ask when the next row is due. */
static void relay_after_claim(struct relay *r, int rows)
{
    r->empty_claims = rows == 0 ? r->empty_claims + 1 : 0;
    bool full = rows > 0 && (rows >= r->cfg->batch_size || r->in_flight >= r->cfg->max_in_flight);
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
        return;
    }
    if (rows == 0 && r->in_flight == 0 && !r->idle_in_db)
        relay_set_idle(r, true); /* claims once more when the flag is up */
    if (r->claim_again) {
        r->claim_again = false;
        relay_maybe_claim(r);
    } else if (rows == 0) {
        relay_query_next_due(r);
    }
}

static void on_claimed(void *data, PGresult *res, const char *error)
{
    struct relay *r = data;
    metrics_histogram_observe(&r->claim_seconds, (double)(uv_hrtime() - r->claim_started_ns) / 1e9);
    if (error) {
        log_event(LOG_WARN, "claim_failed", "error", json_string(error), LOG_END);
        relay_check_shutdown(r);
        return;
    }
    int rows = PQntuples(res);
    if (relay_stopping(r)) {
        /* A claim that was on the wire when the signal came: give its rows
         * back unsent, and let the shutdown go on (it waited for this claim). */
        relay_release_claimed(r, res);
        relay_check_shutdown(r);
        return;
    }
    if (relay_claim_answer_late(r, rows)) {
        /* Give the rows back now, ahead of any other claim on this
         * connection; their leases are renewed until the database has
         * them (relay_held_ids), and the next claim waits for that. */
        relay_release_claimed(r, res);
        r->more_due = true;
        relay_send_releases(r);
        relay_flush(r);
        return;
    }
    for (int i = 0; i < rows; i++) {
        struct claimed_row row = sql_claimed_row(res, i);
        relay_take_claimed_row(r, &row);
    }
    r->claimed += (uint64_t)rows;
    relay_after_claim(r, rows);
    relay_flush(r);
}

static void relay_maybe_claim(struct relay *r)
{
    if (r->phase != RELAY_RUNNING || !pg_conn_ready(r->pg))
        return;
    if (r->claim.running) {
        r->claim_again = true;
        return;
    }
    int room = r->cfg->max_in_flight - r->in_flight - relay_slots_held(r);
    /* Back-pressure: do not outrun the database with unrecorded outcomes. */
    if (r->records.buffered.count > (size_t)r->cfg->batch_size * 8)
        return;
    if (room <= 0)
        return;
    int limit = room < r->cfg->batch_size ? room : r->cfg->batch_size;
    if (targets_claimable(&r->targets, r->cfg->max_in_flight_per_target, relay_random(r),
                          &r->claim_targets, &r->claim_rooms, limit) == 0)
        return; /* nothing can be sent now: a delivery's end or a reload claims again */
    char limit_text[24], lease_text[24];
    const char *params[5] = {r->cfg->relay_id, r->claim_targets.data, r->claim_rooms.data,
                             int_text(limit_text, sizeof(limit_text), limit),
                             int_text(lease_text, sizeof(lease_text), r->cfg->lease_ms)};
    if (stmt_slot_start(&r->claim, 5, params)) {
        r->claim_started_ns = uv_hrtime();
        r->claim_again = false;
    }
}

/* ---------------------------------------------------------------- idle flag */

static void on_idle_changed(void *data, PGresult *res, const char *error)
{
    struct relay *r = data;
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
    if (r->idle_in_db == idle || !stmt_slot_ready(&r->idle_change))
        return;
    const char *params[2] = {r->cfg->relay_id, idle ? "true" : "false"};
    if (stmt_slot_start(&r->idle_change, 2, params)) {
        r->idle_in_db = idle;
        r->last_heartbeat_ms = uv_now(&r->loop);
    }
}

/* ---------------------------------------------------------------- next due */

static void on_poll_timer(uv_timer_t *timer);

static void on_next_due(void *data, PGresult *res, const char *error)
{
    struct relay *r = data;
    if (error || relay_stopping(r))
        return;
    if (PQntuples(res) == 0 || PQgetisnull(res, 0, 0)) {
        if (r->cfg->exit_when_idle && !relay_has_work(r) && !r->claim.running) {
            log_event(LOG_INFO, "idle_exit", LOG_END);
            r->phase = RELAY_DRAINING;
            relay_check_shutdown(r);
        }
        return;
    }
    uint64_t wait =
        flow_next_due_wait_ms(strtoll(PQgetvalue(res, 0, 0), NULL, 10), r->empty_claims);
    uint64_t due_in = uv_timer_get_due_in(&r->poll_timer);
    if (wait < (uint64_t)r->cfg->poll_interval_ms && (due_in == 0 || wait < due_in))
        uv_timer_start(&r->poll_timer, on_poll_timer, wait, (uint64_t)r->cfg->poll_interval_ms);
}

/* Asks when something this relay can take becomes due: a row of a target it
 * has room for whose gate is open, a lease to take over, a row to reconcile. */
static void relay_query_next_due(struct relay *r)
{
    if (!stmt_slot_ready(&r->next_due))
        return;
    targets_claimable(&r->targets, r->cfg->max_in_flight_per_target, relay_random(r),
                      &r->claim_targets, NULL, 0);
    const char *params[1] = {r->claim_targets.data};
    stmt_slot_start(&r->next_due, 1, params);
}

/* ---------------------------------------------------------------- deliveries */

/* Buffers one outcome for the next record statement (the buffer takes over
 * its error and body), and counts it. t is NULL for a row of a target this
 * relay does not know. */
static void relay_buffer_outcome(struct relay *r, struct target *t, const struct pending_outcome *o)
{
    record_queue_push(&r->records, o);
    r->attempts_by_class[o->cls]++;
    if (t) {
        t->attempts_by_class[o->cls]++;
        t->decisions_by_state[o->state]++;
    }
}

static void relay_detach(struct relay *r, struct delivery *d)
{
    upstream_forget(&d->target->upstream, d); /* a call that waited for its session */
    DLIST_REMOVE(r->deliveries, d);
    d->target->in_flight--;
    r->in_flight--;
}

/* ---------------------------------------------------------------- flow control */

/* target_events.c heard that a target's circuit closed. */
static void on_circuit_closed(void *data, struct target *t)
{
    relay_maybe_claim(data); /* the target is back: its backlog is due now */
}

/* Classifies a finished request and decides what follows. What is safe
 * next depends on whether this request carried the key, not on the target's
 * header now (a reload may have changed it since). */
static struct decision relay_decide(struct relay *r, const struct delivery *d,
                                    struct delivery_report *report, enum attempt_class *cls)
{
    struct retry_policy policy = target_retry_policy(d->target);
    if (d->kind == DELIVERY_SEND)
        policy.honours_keys = report->facts.honours_keys = d->key_sent;
    *cls = d->kind == DELIVERY_STATUS_CHECK ? outcome_classify_status_check(&report->facts)
                                            : outcome_classify(&report->facts);
    struct intent_progress progress = {
        .attempt = d->attempt,
        .was_ambiguous = d->was_ambiguous,
        .first_attempt_ms = d->first_attempt_ms,
        .now_ms = wall_clock_ms(),
        .retry_after_ms = d->retry_after_ms,
    };
    return outcome_decide(*cls, &policy, &progress, relay_random(r));
}

/* libcurl 7.82 and later end the error buffer with the text of the code,
 * which delivery_report() puts first as well: "Couldn't connect to server:
 * Failed to connect to 127.0.0.1 port 1 after 0 ms: Couldn't connect to
 * server". The detail alone then says it all, once: in the attempt, the
 * row's last_error, the circuit's reason, outbox.stuck and the log. */
static void relay_error_once(char *error, CURLcode result)
{
    const char *code = curl_easy_strerror(result);
    size_t code_len = strlen(code), len = strlen(error);
    if (len < code_len + 2 || strncmp(error, code, code_len) != 0 ||
        strncmp(error + code_len, ": ", 2) != 0)
        return; /* not "<code>: <detail>" */
    const char *detail = error + code_len + 2;
    size_t detail_len = len - code_len - 2;
    bool repeats =
        strcmp(detail, code) == 0 ||
        (detail_len > code_len + 2 && strcmp(detail + detail_len - code_len, code) == 0 &&
         strncmp(detail + detail_len - code_len - 2, ": ", 2) == 0);
    if (repeats)
        memmove(error, detail, detail_len + 1);
}

/* Decide and buffer the outcome of a finished (or aborted) delivery. */
static void relay_conclude(struct relay *r, struct delivery *d, CURLcode result, bool aborted)
{
    struct delivery_report report;
    delivery_report(d, result, aborted, &report);
    if (!aborted && result != CURLE_OK)
        relay_error_once(report.error, result);
    relay_detach(r, d);
    if (aborted && !report.sent) {
        /* Never left this host: give the row back untouched. */
        id_batch_push(&r->releases, d->intent_id, d->attempt);
        delivery_free(d);
        return;
    }
    enum attempt_class cls;
    struct decision dec = relay_decide(r, d, &report, &cls);
    if (d->kind == DELIVERY_SEND && d->probe &&
        outcome_probe_failed(cls, report.sent, &dec) == PROBE_GIVE_BACK) {
        /* The circuit hears the refusal; the intent keeps its attempts. */
        target_events_observe(&r->reporter, d, cls, &report, uv_now(&r->loop));
        log_event(LOG_INFO, "probe_given_back", "key", json_string(d->key), "target",
                  json_string(d->target->name), "error", json_string(report.error), LOG_END);
        id_batch_push(&r->releases, d->intent_id, d->attempt);
        relay_send_releases(r);
        delivery_free(d);
        return;
    }
    char reason[sizeof(report.error) + 160];
    const char *error = outcome_error_text(cls, &dec, d->attempt, report.http_status, report.error,
                                           reason, sizeof(reason));
    if (d->kind == DELIVERY_SEND) {
        metrics_histogram_observe(&r->delivery_seconds, report.latency_ms / 1000.0);
        target_events_observe(&r->reporter, d, cls, &report, uv_now(&r->loop));
    }
    struct pending_outcome o = pending_outcome_new(d->intent_id, d->attempt, cls, &dec, error);
    o.sent = report.sent;
    o.key_sent = d->kind == DELIVERY_SEND ? (d->key_sent ? 1 : 0) : -1;
    o.http_status = report.http_status;
    o.latency_ms = report.latency_ms;
    o.body_len = d->body.len;
    o.body = o.body_len > 0 ? strbuf_steal(&d->body) : NULL;
    relay_buffer_outcome(r, d->target, &o);
    relay_log_attempt(d, cls, &dec, &report);
    delivery_free(d);
}

/* ---------------------------------------------------------------- MCP targets */

static http_client_t *relay_multi_of(struct relay *r, const struct delivery *d)
{
    return d->multiplexed ? r->http2 : r->http;
}

/* A call goes on the multi; one to an MCP target first waits for its
 * session (mcp_upstream.c), whose setup requests go on the same multi. */
static void relay_dispatch(struct relay *r, struct delivery *d)
{
    if (d->mcp) { /* a call, or a status tool's call */
        struct upstream_session *s = &d->target->upstream;
        struct delivery *setup = NULL;
        bool setup_failed = false;
        if (!upstream_take(s, d, &setup, &setup_failed)) {
            if (setup_failed) {
                relay_conclude(r, d, CURLE_FAILED_INIT, false);
            } else if (setup) {
                setup->owner = r;
                if (!http_client_add(relay_multi_of(r, setup), setup->easy, setup))
                    relay_setup_done(r, setup, CURLE_FAILED_INIT);
            }
            return; /* it waits in the session's list */
        }
        if (!delivery_mcp_prepare(d)) {
            relay_conclude(r, d, CURLE_OK, false); /* mcp_refused says why */
            return;
        }
    }
    if (!http_client_add(relay_multi_of(r, d), d->easy, d))
        relay_conclude(r, d, CURLE_FAILED_INIT, false);
}

/* A setup request of an MCP target's session ended: the next step, or the
 * waiting calls go (ready), go back unsent, or fail (initialize refused). */
static void relay_setup_done(struct relay *r, struct delivery *setup, CURLcode result)
{
    struct target *t = setup->target;
    struct upstream_session *s = &t->upstream;
    struct delivery *next = NULL;
    char why[CURL_ERROR_SIZE];
    why[0] = '\0';
    enum upstream_verdict v = upstream_setup_done(s, setup, result, &next, why, sizeof(why));
    if (v == UPSTREAM_NEXT) {
        next->owner = r;
        if (!http_client_add(relay_multi_of(r, next), next->easy, next))
            relay_setup_done(r, next, CURLE_FAILED_INIT);
        return;
    }
    log_event(v == UPSTREAM_READY_V ? LOG_INFO : LOG_WARN, "mcp_session", "target",
              json_string(t->name), "era",
              json_string(s->era == UPSTREAM_ERA_MODERN   ? UPSTREAM_MODERN_VERSION
                          : s->era == UPSTREAM_ERA_LEGACY ? (s->version ? s->version : "")
                                                          : "unknown"),
              "session", json_boolean(s->session_id != NULL), "error",
              *why ? json_string(why) : json_null(), LOG_END);
    struct delivery *list = upstream_take_waiting(s);
    while (list) {
        struct delivery *d = list;
        list = d->mcp_next;
        d->mcp_next = NULL;
        if (v == UPSTREAM_READY_V) {
            relay_dispatch(r, d);
        } else {
            if (v == UPSTREAM_REFUSED)
                d->mcp_refused = xstrdup(why);
            else
                snprintf(d->error, sizeof(d->error), "%s", why);
            relay_conclude(r, d, v == UPSTREAM_REFUSED ? CURLE_OK : CURLE_COULDNT_CONNECT, false);
        }
    }
    relay_flush(r);
    if (relay_stopping(r))
        relay_check_shutdown(r);
    else
        relay_maybe_claim(r);
}

/* An error for a request of an MCP server on a call's stream
 * (deliver.c:on_server_request), made inside libcurl's write callback:
 * it goes on the multi from the loop, once the callback returned. */
static void relay_queue_reply(struct delivery *reply)
{
    struct relay *r = reply->owner;
    if (relay_stopping(r) || r->phase == RELAY_CLOSING) {
        delivery_free(reply);
        return;
    }
    reply->mcp_next = r->replies_pending;
    r->replies_pending = reply;
    uv_timer_start(&r->reply_timer, on_reply_timer, 0, 0);
}

static void on_reply_timer(uv_timer_t *timer)
{
    struct relay *r = timer->data;
    while (r->replies_pending) {
        struct delivery *reply = r->replies_pending;
        r->replies_pending = reply->mcp_next;
        reply->mcp_next = NULL;
        DLIST_PUSH_FRONT(r->replies, reply);
        if (!http_client_add(relay_multi_of(r, reply), reply->easy, reply)) {
            DLIST_REMOVE(r->replies, reply);
            delivery_free(reply);
        }
    }
}

static void relay_reply_done(struct relay *r, struct delivery *reply, CURLcode result)
{
    DLIST_REMOVE(r->replies, reply);
    long status = 0;
    curl_easy_getinfo(reply->easy, CURLINFO_RESPONSE_CODE, &status);
    bool ok = result == CURLE_OK && status >= 200 && status <= 299;
    log_event(ok ? LOG_INFO : LOG_WARN, "mcp_server_request_refused", "target",
              json_string(reply->target->name), "key", json_string(reply->key), "http_status",
              status ? json_integer(status) : json_null(), "error",
              result == CURLE_OK ? json_null() : json_string(curl_easy_strerror(result)), LOG_END);
    delivery_free(reply);
}

/* Every reply, pending or on the multi, dropped (the relay closes). */
static void relay_drop_replies(struct relay *r)
{
    uv_timer_stop(&r->reply_timer);
    while (r->replies_pending) {
        struct delivery *reply = r->replies_pending;
        r->replies_pending = reply->mcp_next;
        delivery_free(reply);
    }
    while (r->replies) {
        struct delivery *reply = r->replies;
        DLIST_REMOVE(r->replies, reply);
        http_client_remove(relay_multi_of(r, reply), reply->easy);
        delivery_free(reply);
    }
}

static void on_delivery_done(CURL *easy, CURLcode result, void *data)
{
    struct delivery *d = data;
    struct relay *r = d->owner;
    if (d->kind == DELIVERY_MCP_SETUP) {
        relay_setup_done(r, d, result);
        return;
    }
    if (d->kind == DELIVERY_MCP_REPLY) {
        relay_reply_done(r, d, result);
        return;
    }
    relay_conclude(r, d, result, false);
    relay_flush(r);
    if (relay_stopping(r))
        relay_check_shutdown(r);
    else if (r->more_due || r->in_flight == 0 || r->in_flight < r->cfg->max_in_flight / 2)
        relay_maybe_claim(r);
}

/* leased_ns: when the statement that leased the row was sent (its lease is
 * younger than that), 0 when not known; relay_renew_leases reads it. */
static void relay_start_delivery(struct relay *r, struct target *t, const struct claimed_row *row,
                                 uint64_t leased_ns)
{
    size_t body_limit = (size_t)r->cfg->max_response_bytes;
    struct delivery *d = row->payload ? delivery_new(t, row, body_limit, wall_clock_ms() / 1000)
                                      : delivery_new_status_check(t, row, body_limit);
    if (d == NULL) {
        log_event(LOG_ERROR, "delivery_setup_failed", "key", json_string(row->key), LOG_END);
        return; /* the lease expires and another pass takes it over */
    }
    if (d->kind == DELIVERY_SEND && row->attempt > 1)
        t->retries++;
    if (row->probe)
        log_event(LOG_INFO, "circuit_probe", "target", json_string(t->name), "key",
                  json_string(row->key), LOG_END);
    d->owner = r;
    d->leased_ns = leased_ns;
    DLIST_PUSH_FRONT(r->deliveries, d);
    t->in_flight++;
    r->in_flight++;
    if (r->in_flight > r->in_flight_peak)
        r->in_flight_peak = r->in_flight;
    relay_dispatch(r, d);
}

/* ---------------------------------------------------------------- record */

/* A refusal that says nothing about the outcomes themselves: the database
 * was busy, slow or going away (a statement or lock timeout, a deadlock, a
 * serialization failure, a cancel, an administrator's shutdown, no memory,
 * no disk, too many connections). The same batch is written again later;
 * nothing is halved or dropped, and the rows' leases keep being renewed
 * (relay_held_ids counts outcomes not yet recorded). */
static bool record_error_is_transient(const char *sqlstate)
{
    return !strncmp(sqlstate, "40", 2) || /* serialization failure, deadlock */
           !strncmp(sqlstate, "53", 2) || /* insufficient resources */
           !strncmp(sqlstate, "57", 2) || /* canceled (statement_timeout), shutdowns */
           !strncmp(sqlstate, "08", 2) || /* connection exceptions */
           !strcmp(sqlstate, "55P03") ||  /* lock_not_available (lock_timeout) */
           !strcmp(sqlstate, "55006");    /* object_in_use */
}

static void on_recorded(void *data, PGresult *res, const char *error)
{
    struct relay *r = data;
    struct outcome_list *batch = &r->records.recording;
    if (error && pg_conn_ready(r->pg_rec) &&
        record_error_is_transient(pg_error_sqlstate(r->pg_rec))) {
        /* Kept whole and retried at the next maintenance tick (not at once:
         * a lock held elsewhere is not gone yet). */
        r->record_retries++;
        log_event(LOG_WARN, "record_retry", "sqlstate", json_string(pg_error_sqlstate(r->pg_rec)),
                  "error", json_string(error), "outcomes", json_integer((json_int_t)batch->count),
                  LOG_END);
        record_queue_unsend(&r->records);
        return;
    }
    if (error && pg_conn_ready(r->pg_rec)) {
        /* Refused, the connection is fine: halve, or drop the one that fails. */
        if (batch->count <= 1)
            log_event(LOG_ERROR, "record_dropped", "intent_id",
                      json_integer(batch->items[0].intent_id), "attempt",
                      json_integer(batch->items[0].attempt), "state",
                      json_string(outcome_state_name(batch->items[0].state)), "error",
                      json_string(error), LOG_END);
        else
            log_event(LOG_WARN, "record_failed", "error", json_string(error), "outcomes",
                      json_integer((json_int_t)batch->count), "retrying",
                      json_integer((json_int_t)(batch->count / 2)), LOG_END);
        record_queue_refused(&r->records);
        relay_flush(r);
        return;
    }
    if (error) {
        /* The connection is gone: keep every outcome, for the reconnect. */
        log_event(LOG_WARN, "record_failed", "error", json_string(error), "outcomes",
                  json_integer((json_int_t)batch->count), LOG_END);
        record_queue_unsend(&r->records);
        return;
    }
    uint64_t updated = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
    r->recorded += updated;
    if (updated < batch->count) {
        r->fenced_out += batch->count - updated;
        log_event(LOG_WARN, "record_fenced_out", "outcomes",
                  json_integer((json_int_t)(batch->count - updated)), LOG_END);
    }
    bool slots_were_held = relay_slots_held(r) > 0;
    record_queue_written(&r->records);
    admin_outcomes_changed(r->admin); /* wakes ?wait= requests */
    relay_flush(r);
    if (relay_stopping(r))
        relay_check_shutdown(r);
    else if (r->more_due || r->in_flight == 0 || slots_were_held)
        relay_maybe_claim(r);
}

/* Sends the oldest waiting outcomes, unless a record is on the wire. */
static void relay_flush(struct relay *r)
{
    const char *params[RECORD_PARAMS];
    if (!pg_conn_ready(r->pg_rec) || !record_queue_take(&r->records, r->cfg->relay_id, params))
        return;
    if (!pg_query(r->pg_rec, STMT_RECORD, RECORD_PARAMS, params, on_recorded, r))
        record_queue_unsend(&r->records); /* not connected after all */
    record_queue_shrink(&r->records);
}

/* ---------------------------------------------------------------- release */

static void on_released(void *data, PGresult *res, const char *error)
{
    struct relay *r = data;
    if (error) {
        log_event(LOG_WARN, "release_failed", "error", json_string(error), LOG_END);
        return; /* kept; retried */
    }
    /* What the database released; a row it did not (its lease had lapsed
     * and another relay took it) is that relay's now. Only what was sent
     * is dropped: rows given back while it ran go with the next. */
    long released = PQntuples(res) == 1 ? strtol(PQgetvalue(res, 0, 0), NULL, 10) : 0;
    if (released < (long)r->releases_on_wire)
        log_event(LOG_WARN, "release_partial", "asked",
                  json_integer((json_int_t)r->releases_on_wire), "released", json_integer(released),
                  LOG_END);
    r->released += (uint64_t)released;
    id_batch_drop_front(&r->releases, r->releases_on_wire);
    r->releases_on_wire = 0;
    if (relay_stopping(r))
        relay_check_shutdown(r);
    else if (r->releases.count > 0)
        relay_send_releases(r);
    else if (r->more_due)
        relay_maybe_claim(r); /* a late claim's rows are back: claim again */
}

static void relay_send_releases(struct relay *r)
{
    if (r->releases.count == 0 || !stmt_slot_ready(&r->release))
        return;
    id_batch_write_arrays(&r->releases, r->releases.count, &r->release_ids, &r->release_attempts);
    const char *params[3] = {r->cfg->relay_id, r->release_ids.data, r->release_attempts.data};
    if (stmt_slot_start(&r->release, 3, params))
        r->releases_on_wire = r->releases.count;
}

/* ---------------------------------------------------------------- leases */

/* Decides one row whose lease expired in another relay's hands. */
static void relay_take_over_row(struct relay *r, const struct taken_over_row *row)
{
    struct target *t = targets_find(&r->targets, row->target);
    struct intent_progress progress = {
        .attempt = row->attempt,
        .was_ambiguous = row->was_ambiguous,
        .first_attempt_ms = row->first_attempt_ms,
        .now_ms = wall_clock_ms(),
        .retry_after_ms = -1,
    };
    struct retry_policy policy = t ? target_retry_policy(t) : (struct retry_policy){0};
    /* Safe to send again only if the request that may have executed carried
     * the key (the claim's stamp), whatever the target's header is now. */
    policy.honours_keys = row->key_sent == 1;
    struct decision dec = outcome_decide_taken_over(t ? &policy : NULL, &progress, relay_random(r));
    char error_text[512];
    outcome_taken_over_text(error_text, sizeof(error_text), row->previous_owner);
    struct pending_outcome o =
        pending_outcome_new(row->id, row->attempt, CLASS_AMBIGUOUS, &dec, error_text);
    o.key_sent = row->key_sent;
    relay_buffer_outcome(r, t, &o);
    log_event(LOG_WARN, "lease_taken_over", "key", json_string(row->key), "target",
              json_string(row->target), "attempt", json_integer(row->attempt), "previous_owner",
              json_string(row->previous_owner), "key_sent",
              row->key_sent < 0 ? json_null() : json_boolean(row->key_sent), "state",
              json_string(outcome_state_name(dec.next_state)), LOG_END);
}

/* True when this relay holds the row (relay_held_ids) right now. */
static bool relay_holds(const struct relay *r, int64_t id)
{
    for (const struct delivery *d = r->deliveries; d; d = d->next)
        if (d->intent_id == id)
            return true;
    for (size_t i = 0; i < r->releases.count; i++)
        if (r->releases.ids[i] == id)
            return true;
    return record_queue_holds(&r->records, id);
}

static void on_taken_over(void *data, PGresult *res, const char *error)
{
    struct relay *r = data;
    if (error) {
        log_event(LOG_WARN, "take_over_failed", "error", json_string(error), LOG_END);
        relay_check_shutdown(r);
        return;
    }
    int rows = PQntuples(res), taken = rows;
    for (int i = 0; i < rows; i++) {
        struct taken_over_row row = sql_taken_over_row(res, i);
        /* The held list went out with the statement; a claim answered
         * since (its leases already lapsed: a late claim) may have handed
         * this relay the row. Its own row is not taken over: the
         * delivery, outcome or give-back that holds it decides. */
        if (strcmp(row.previous_owner, r->cfg->relay_id) == 0 && relay_holds(r, row.id)) {
            taken--;
            continue;
        }
        relay_take_over_row(r, &row);
    }
    r->taken_over += (uint64_t)taken;
    relay_flush(r); /* a full batch continues at the next poll tick */
    relay_check_shutdown(r);
}

/* The rows this relay holds: being delivered, finished and waiting to be
 * recorded, or given back and waiting to be released. Their leases are
 * renewed, and they are never taken over by this relay itself, whatever
 * their lease says (the record connection may have been down for longer
 * than a lease). Deliveries whose row was leased after leased_before_ns are
 * left out (UINT64_MAX: none is). Returns whether it listed any row. */
static bool relay_held_ids(const struct relay *r, struct strbuf *ids, uint64_t leased_before_ns)
{
    bool any = false;
    pgarray_begin(ids);
    for (struct delivery *d = r->deliveries; d; d = d->next) {
        if (d->leased_ns > leased_before_ns)
            continue;
        pgarray_item_int(ids, d->intent_id);
        any = true;
    }
    size_t waiting = record_queue_add_ids(&r->records, ids);
    for (size_t i = 0; i < r->releases.count; i++) /* given back, not yet released */
        pgarray_item_int(ids, r->releases.ids[i]);
    pgarray_end(ids);
    return any || waiting > 0 || r->releases.count > 0;
}

static void relay_take_over_expired(struct relay *r)
{
    if (r->phase != RELAY_RUNNING || !stmt_slot_ready(&r->take_over))
        return;
    struct strbuf held;
    strbuf_init(&held);
    relay_held_ids(r, &held, UINT64_MAX);
    char limit[24], lease[24];
    const char *params[4] = {r->cfg->relay_id, int_text(limit, sizeof(limit), TAKE_OVER_BATCH),
                             int_text(lease, sizeof(lease), r->cfg->lease_ms), held.data};
    stmt_slot_start(&r->take_over, 4, params);
    strbuf_free(&held);
}

static void on_renewed(void *data, PGresult *res, const char *error)
{
    if (error)
        log_event(LOG_WARN, "lease_renew_failed", "error", json_string(error), LOG_END);
}

/* The database renews a lease once less than five sixths of it is left
 * (outbox.renew_leases, 0033). A delivery whose row was leased less than a
 * twelfth of a lease ago cannot be there yet: the claim was sent before the
 * database stamped the lease, so the relay's count of its age is the larger.
 * Such deliveries are not sent; with nothing else held, there is no call.
 * A target that answers in 2 s, a relay at 1,024 in flight: each call
 * probed about a thousand ids by primary key and renewed none of them. */
static void relay_renew_leases(struct relay *r)
{
    if (!stmt_slot_ready(&r->renew))
        return;
    uint64_t now_ns = uv_hrtime(), young_ns = (uint64_t)r->cfg->lease_ms * 1000000u / 12;
    uint64_t leased_before_ns = now_ns > young_ns ? now_ns - young_ns : 0;
    struct strbuf ids;
    strbuf_init(&ids);
    if (relay_held_ids(r, &ids, leased_before_ns)) {
        char lease[24];
        const char *params[3] = {r->cfg->relay_id, ids.data,
                                 int_text(lease, sizeof(lease), r->cfg->lease_ms)};
        stmt_slot_start(&r->renew, 3, params);
    }
    strbuf_free(&ids);
}

/* ---------------------------------------------------------------- reconciliation */

static void on_unknown_claimed(void *data, PGresult *res, const char *error)
{
    struct relay *r = data;
    if (error)
        log_event(LOG_WARN, "reconcile_claim_failed", "error", json_string(error), LOG_END);
    if (error || relay_stopping(r)) {
        relay_check_shutdown(r); /* the leases lapse; another pass asks again */
        return;
    }
    for (int i = 0; i < PQntuples(res); i++) {
        struct claimed_row row = sql_unknown_row(res, i);
        struct target *t = targets_find(&r->targets, row.target);
        if (t == NULL || (t->status_url == NULL && t->status_tool == NULL))
            continue; /* the lease lapses; asked again later */
        relay_start_delivery(r, t, &row, 0);
    }
}

/* Ask status URLs about unknown rows that are due. */
static void relay_reconcile(struct relay *r)
{
    if (r->phase != RELAY_RUNNING || !stmt_slot_ready(&r->reconcile))
        return;
    int room = r->cfg->max_in_flight - r->in_flight;
    if (!targets_any_status_url(&r->targets) || room <= 0)
        return;
    char limit[24], lease[24];
    const char *params[3] = {r->cfg->relay_id,
                             int_text(limit, sizeof(limit), room < 64 ? room : 64),
                             int_text(lease, sizeof(lease), r->cfg->lease_ms)};
    stmt_slot_start(&r->reconcile, 3, params);
}

/* ---------------------------------------------------------------- targets */

static void on_targets(void *data, PGresult *res, const char *error)
{
    struct relay *r = data;
    if (error) {
        log_event(LOG_ERROR, "targets_load_failed", "error", json_string(error), LOG_END);
        return;
    }
    targets_load(&r->targets, res);
    r->last_targets_ms = uv_now(&r->loop);
    if (r->phase == RELAY_STARTING) {
        log_event(LOG_INFO, "targets_loaded", "count", json_integer((json_int_t)r->targets.count),
                  LOG_END);
        r->phase = RELAY_RUNNING;
    }
    relay_maybe_claim(r);
}

/* ---------------------------------------------------------------- timers */

static void on_poll_timer(uv_timer_t *timer)
{
    struct relay *r = timer->data;
    relay_take_over_expired(r);
    relay_reconcile(r);
    relay_maybe_claim(r);
}

/* Once a minute, the easy-handle pool shrinks to the most deliveries in
 * flight during that minute: live memory follows demand. Free heap goes
 * back to the system (malloc_trim) when that trim cleaned up at least as
 * many handles as it kept, i.e. demand fell to half or less (a backlog
 * drained, a target went quiet). Not at every shrink: under a steady load
 * the peak in flight of a minute goes up and down (claims of a batch after
 * a pause), and what a trim gave back, 0.4-0.7 MiB at make soak's load,
 * the next bursts faulted back in within seconds. */
static void relay_trim_pool(struct relay *r, uint64_t now)
{
    if (now - r->last_pool_trim_ms < POOL_TRIM_EVERY_MS)
        return;
    r->last_pool_trim_ms = now;
    size_t keep = (size_t)(r->in_flight_peak > r->in_flight ? r->in_flight_peak : r->in_flight);
    r->in_flight_peak = r->in_flight;
    size_t freed = delivery_pool_trim(keep);
    if (freed > 0 && freed >= keep)
        malloc_trim(0);
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
    if (relay_stopping(r))
        return;
    if (now - r->last_targets_ms >= (uint64_t)r->cfg->targets_refresh_ms)
        stmt_slot_start(&r->targets_load, 0, NULL);
    relay_refresh_live_counts(r);
    relay_heartbeat(r, now);
    relay_trim_pool(r, now);
}

/* ---------------------------------------------------------------- database events */

static void on_db_ready(void *data)
{
    struct relay *r = data;
    /* NOTIFY is lost while disconnected: re-announce, reload, flush, claim. */
    r->idle_in_db = true; /* forces the flag down on the next full claim */
    relay_set_idle(r, false);
    stmt_slot_start(&r->targets_load, 0, NULL);
    relay_flush(r);
    relay_send_releases(r);
    if (relay_stopping(r))
        relay_check_shutdown(r);
    else
        relay_maybe_claim(r);
}

/* The record connection is (back) up: write what waited. */
static void on_record_db_ready(void *data)
{
    relay_flush(data);
    relay_check_shutdown(data);
}

static void on_db_notify(void *data, const char *channel, const char *payload)
{
    struct relay *r = data;
    if (strcmp(channel, SQL_CHANNEL_OUTCOMES) == 0)
        admin_outcomes_notified(r->admin, payload); /* wakes ?wait= requests */
    else
        relay_maybe_claim(r);
}

/* ---------------------------------------------------------------- shutdown */

static void on_shutdown_timer(uv_timer_t *timer);

static void relay_abort_deliveries(struct relay *r)
{
    r->phase = RELAY_RECORDING;
    while (r->deliveries) {
        struct delivery *d = r->deliveries;
        http_client_remove(d->multiplexed ? r->http2 : r->http, d->easy);
        relay_conclude(r, d, CURLE_ABORTED_BY_CALLBACK, true);
    }
    /* MCP sessions being set up: their calls went back above */
    for (size_t i = 0; i < r->targets.count; i++) {
        struct upstream_session *s = &r->targets.items[i]->upstream;
        if (s->setup) {
            http_client_remove(relay_multi_of(r, s->setup), s->setup->easy);
            delivery_free(s->setup);
            s->setup = NULL;
            s->state = UPSTREAM_NONE;
        }
    }
    relay_flush(r);
    relay_send_releases(r);
}

static void on_farewell(void *data, PGresult *res, const char *error)
{
    relay_close(data);
}

static void relay_check_shutdown(struct relay *r)
{
    if (!relay_stopping(r) || r->phase == RELAY_CLOSING)
        return;
    if (r->in_flight > 0)
        return; /* the grace timer is running */
    relay_flush(r);
    relay_send_releases(r);
    if (relay_has_work(r) || r->claim.running || r->take_over.running || r->reconcile.running)
        return; /* wait for the database (bounded by the shutdown timer) */
    if (r->farewell.running)
        return;
    const char *params[1] = {r->cfg->relay_id};
    if (!stmt_slot_start(&r->farewell, 1, params))
        relay_close(r);
}

static void relay_begin_shutdown(struct relay *r, const char *why)
{
    if (relay_stopping(r)) {
        if (r->phase == RELAY_DRAINING) {
            log_event(LOG_WARN, "shutdown_now", "reason", json_string(why), LOG_END);
            uv_timer_start(&r->shutdown_timer, on_shutdown_timer, 0, 0);
        }
        return;
    }
    r->phase = RELAY_DRAINING;
    log_event(LOG_INFO, "shutdown", "reason", json_string(why), "in_flight",
              json_integer(r->in_flight), "grace_ms", json_integer(r->cfg->grace_ms), LOG_END);
    uv_timer_stop(&r->poll_timer);
    uv_timer_start(&r->shutdown_timer, on_shutdown_timer, (uint64_t)r->cfg->grace_ms, 0);
    relay_check_shutdown(r);
}

static void on_shutdown_timer(uv_timer_t *timer)
{
    struct relay *r = timer->data;
    if (r->phase == RELAY_DRAINING) {
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
              json_integer((json_int_t)record_queue_unrecorded(&r->records)), "releases",
              json_integer((json_int_t)r->releases.count), "reason",
              json_string(pg_conn_ready(r->pg_rec) ? pg_conn_status_reason(r->pg)
                                                   : pg_conn_status_reason(r->pg_rec)),
              LOG_END);
    r->exit_code = 1;
    relay_close(r);
}

static void on_signal(uv_signal_t *handle, int signum)
{
    relay_begin_shutdown(handle->data, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

/* ---------------------------------------------------------------- close */

static void on_closed(void *data)
{
    (void)data; /* the loop ends once every handle is closed */
}

void relay_close(struct relay *r)
{
    if (r->phase == RELAY_CLOSING)
        return;
    r->phase = RELAY_CLOSING;
    if (r->admin) {
        admin_close(r->admin, NULL, NULL);
        r->admin = NULL;
    }
    relay_log_totals(r);
    relay_drop_replies(r);
    uv_close((uv_handle_t *)&r->reply_timer, NULL);
    uv_close((uv_handle_t *)&r->poll_timer, NULL);
    uv_close((uv_handle_t *)&r->maintenance_timer, NULL);
    uv_close((uv_handle_t *)&r->shutdown_timer, NULL);
    uv_close((uv_handle_t *)&r->sigterm, NULL);
    uv_close((uv_handle_t *)&r->sigint, NULL);
    pg_conn_close(r->pg, on_closed, r);
    pg_conn_close(r->pg_rec, on_closed, r);
    pruner_close(r->pruner);
    r->pruner = NULL;
    http_client_close(r->http, on_closed, r);
    http_client_close(r->http2, on_closed, r);
}

/* ---------------------------------------------------------------- the loop */

/* The main and record connections, and the statements sent on them. */
static void relay_open_database(struct relay *r)
{
    const struct config *cfg = r->cfg;
    struct pg_events events = {
        .name = "main", .data = r, .on_ready = on_db_ready, .on_notify = on_db_notify};
    r->pg = pg_conn_new(&r->loop, cfg->db, relay_statements, RELAY_STATEMENT_COUNT, SQL_CHANNELS,
                        cfg->connect_timeout_ms, cfg->reconnect_max_ms, events);
    struct pg_events record_events = {.name = "record", .data = r, .on_ready = on_record_db_ready};
    r->pg_rec = pg_conn_new(&r->loop, cfg->db, relay_statements, RELAY_STATEMENT_COUNT, NULL,
                            cfg->connect_timeout_ms, cfg->reconnect_max_ms, record_events);
    stmt_slot_init(&r->claim, r->pg, STMT_CLAIM, on_claimed, r);
    stmt_slot_init(&r->next_due, r->pg, STMT_NEXT_DUE, on_next_due, r);
    stmt_slot_init(&r->idle_change, r->pg, STMT_HEARTBEAT, on_idle_changed, r);
    stmt_slot_init(&r->release, r->pg, STMT_RELEASE, on_released, r);
    stmt_slot_init(&r->take_over, r->pg, STMT_TAKE_OVER, on_taken_over, r);
    stmt_slot_init(&r->renew, r->pg, STMT_RENEW, on_renewed, r);
    stmt_slot_init(&r->reconcile, r->pg, STMT_CLAIM_UNKNOWN, on_unknown_claimed, r);
    stmt_slot_init(&r->targets_load, r->pg, STMT_TARGETS, on_targets, r);
    stmt_slot_init(&r->farewell, r->pg, STMT_GONE, on_farewell, r);
    r->reporter = (struct target_reporter){
        .pg = r->pg,
        .relay_id = cfg->relay_id,
        .relay_cap = cfg->max_in_flight_per_target,
        .on_circuit_closed = on_circuit_closed,
        .data = r,
    };
}

/* The poll, maintenance and shutdown timers, and the signals. */
static void relay_init_timers(struct relay *r)
{
    uv_timer_init(&r->loop, &r->poll_timer);
    uv_timer_init(&r->loop, &r->maintenance_timer);
    uv_timer_init(&r->loop, &r->shutdown_timer);
    uv_timer_init(&r->loop, &r->reply_timer);
    r->poll_timer.data = r->maintenance_timer.data = r->shutdown_timer.data = r;
    r->reply_timer.data = r;
    delivery_set_reply_hook(relay_queue_reply);
    uv_signal_init(&r->loop, &r->sigterm);
    uv_signal_init(&r->loop, &r->sigint);
    r->sigterm.data = r->sigint.data = r;
    uv_signal_start(&r->sigterm, on_signal, SIGTERM);
    uv_signal_start(&r->sigint, on_signal, SIGINT);
    uint64_t maintenance = (uint64_t)r->cfg->lease_ms / 3;
    if (maintenance > 1000)
        maintenance = 1000;
    uv_timer_start(&r->poll_timer, on_poll_timer, (uint64_t)r->cfg->poll_interval_ms,
                   (uint64_t)r->cfg->poll_interval_ms);
    uv_timer_start(&r->maintenance_timer, on_maintenance_timer, maintenance, maintenance);
}

void relay_attach(struct relay *r)
{
    /* Connections kept alive: at most one per delivery the relay may have
     * in flight (http_client.h), so that the memory bound holds over TLS
     * with many targets. */
    r->http = http_client_new(&r->loop, on_delivery_done, r->cfg->max_in_flight);
    /* h2 on a multi of its own: its cap on connections per host would
     * hold HTTP/1.1 targets to as many requests in flight */
    r->http2 = http_client_new(&r->loop, on_delivery_done, r->cfg->max_in_flight);
    if (r->http2)
        http_client_set_max_host_connections(r->http2, DELIVERY_H2_CONNECTIONS_PER_HOST);
    relay_open_database(r);
    relay_init_timers(r);
}
