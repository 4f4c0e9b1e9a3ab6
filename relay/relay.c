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
 * Three connections: records go over a connection of their own, the
 * sweeps and take-overs over another (relay_db.c, "Two lanes"), everything
 * else (floor claims, leases, the LISTEN) over the main one. A record is
 * the heaviest statement the relay sends; on one connection the next claim
 * queued behind it and PostgreSQL worked one statement at a time. Apart, a
 * claim and a record run side by side in two backends (the drain bench
 * measured the difference; see tests/bench/README.md). They never touch the
 * same rows: a claim takes pending rows, a record writes rows this relay
 * holds in flight, each fenced in SQL.
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
 * Many databases (--databases): each is a struct relay_db (relay_db.c) with
 * its own connections, targets, leases and outcomes; this file is the
 * process around them: the deliveries on the curl multi and their end, the
 * budget of --max-in-flight shared fairly among the databases (below,
 * "Fair share"), the timers, SIGHUP, the shutdown and the close.
 *
 * Fair share: a database with due work gets at least budget / N, N the
 * databases with due work or deliveries in flight; what it does not use the
 * others may take, but never a part owed to a database that asked for room
 * and found none (wants_room): that one claims as soon as capacity comes
 * free, so a backlog of a million in one database delays another's first
 * delivery by at most one claim round. Per-target limits stay per database.
 *
 * Only the process is here (relay_int.h lists the files around it). It
 * reads: deliveries and their end, MCP sessions, fair share, timers,
 * shutdown, close, the loop.
 */
#include "relay_int.h"

#include "admin/admin.h"
#include "databases.h"
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
#define POOL_TRIM_EVERY_MS 60000

static void relay_setup_done(struct relay_db *db, struct delivery *setup, CURLcode result);
static void relay_check_removed(struct relay *r);
static void on_reply_timer(uv_timer_t *timer);

/* ---------------------------------------------------------------- helpers */

double relay_random(struct relay *r)
{
    /* xorshift64*: jitter only, not security. */
    r->rng ^= r->rng >> 12;
    r->rng ^= r->rng << 25;
    r->rng ^= r->rng >> 27;
    return (double)((r->rng * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}

/* ---------------------------------------------------------------- deliveries */

static void relay_detach(struct relay_db *db, struct delivery *d)
{
    upstream_forget(&d->target->upstream, d); /* a call that waited for its session */
    DLIST_REMOVE(db->deliveries, d);
    d->target->in_flight--;
    db->in_flight--;
    db->relay->in_flight--;
}

/* Classifies a finished request and decides what follows. What is safe
 * next depends on whether this request carried the key, not on the target's
 * header now (a reload may have changed it since). */
static struct decision relay_decide(struct relay_db *db, const struct delivery *d,
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
    return outcome_decide(*cls, &policy, &progress, relay_random(db->relay));
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
static void relay_conclude(struct relay_db *db, struct delivery *d, CURLcode result, bool aborted)
{
    struct delivery_report report;
    delivery_report(d, result, aborted, &report);
    if (!aborted && result != CURLE_OK)
        relay_error_once(report.error, result);
    relay_detach(db, d);
    if (aborted && !report.sent) {
        /* Never left this host: give the row back untouched. */
        id_batch_push(&db->releases, d->intent_id, d->attempt);
        delivery_free(d);
        return;
    }
    enum attempt_class cls;
    struct decision dec = relay_decide(db, d, &report, &cls);
    if (d->kind == DELIVERY_SEND && d->probe &&
        outcome_probe_failed(cls, report.sent, &dec) == PROBE_GIVE_BACK) {
        /* The circuit hears the refusal; the intent keeps its attempts. */
        target_events_observe(&db->reporter, d, cls, &report, uv_now(&db->relay->loop));
        log_event(LOG_INFO, "probe_given_back", "key", json_string(d->key), "target",
                  json_string(d->target->name), "error", json_string(report.error), "database",
                  json_string(db->name), LOG_END);
        id_batch_push(&db->releases, d->intent_id, d->attempt);
        relay_db_send_releases(db);
        delivery_free(d);
        return;
    }
    char reason[sizeof(report.error) + 160];
    const char *error = outcome_error_text(cls, &dec, d->attempt, report.http_status, report.error,
                                           reason, sizeof(reason));
    if (d->kind == DELIVERY_SEND) {
        metrics_histogram_observe(&db->delivery_seconds, report.latency_ms / 1000.0);
        target_events_observe(&db->reporter, d, cls, &report, uv_now(&db->relay->loop));
    }
    struct pending_outcome o = pending_outcome_new(d->intent_id, d->attempt, cls, &dec, error);
    o.sent = report.sent;
    o.key_sent = d->kind == DELIVERY_SEND ? (d->key_sent ? 1 : 0) : -1;
    o.http_status = report.http_status;
    o.latency_ms = report.latency_ms;
    o.body_len = d->body.len;
    o.body = o.body_len > 0 ? strbuf_steal(&d->body) : NULL;
    relay_db_buffer_outcome(db, d->target, &o);
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
static void relay_dispatch(struct relay_db *db, struct delivery *d)
{
    if (d->mcp) { /* a call, or a status tool's call */
        struct upstream_session *s = &d->target->upstream;
        struct delivery *setup = NULL;
        bool setup_failed = false;
        if (!upstream_take(s, d, &setup, &setup_failed)) {
            if (setup_failed) {
                relay_conclude(db, d, CURLE_FAILED_INIT, false);
            } else if (setup) {
                setup->owner = db;
                if (!http_client_add(relay_multi_of(db->relay, setup), setup->easy, setup))
                    relay_setup_done(db, setup, CURLE_FAILED_INIT);
            }
            return; /* it waits in the session's list */
        }
        if (!delivery_mcp_prepare(d)) {
            relay_conclude(db, d, CURLE_OK, false); /* mcp_refused says why */
            return;
        }
    }
    if (!http_client_add(relay_multi_of(db->relay, d), d->easy, d))
        relay_conclude(db, d, CURLE_FAILED_INIT, false);
}

/* A setup request of an MCP target's session ended: the next step, or the
 * waiting calls go (ready), go back unsent, or fail (initialize refused). */
static void relay_setup_done(struct relay_db *db, struct delivery *setup, CURLcode result)
{
    struct target *t = setup->target;
    struct upstream_session *s = &t->upstream;
    struct delivery *next = NULL;
    char why[CURL_ERROR_SIZE];
    why[0] = '\0';
    enum upstream_verdict v = upstream_setup_done(s, setup, result, &next, why, sizeof(why));
    if (v == UPSTREAM_NEXT) {
        next->owner = db;
        if (!http_client_add(relay_multi_of(db->relay, next), next->easy, next))
            relay_setup_done(db, next, CURLE_FAILED_INIT);
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
            relay_dispatch(db, d);
        } else {
            if (v == UPSTREAM_REFUSED)
                d->mcp_refused = xstrdup(why);
            else
                snprintf(d->error, sizeof(d->error), "%s", why);
            relay_conclude(db, d, v == UPSTREAM_REFUSED ? CURLE_OK : CURLE_COULDNT_CONNECT, false);
        }
    }
    relay_db_flush(db);
    if (relay_db_stopping(db))
        relay_check_shutdown(db->relay);
    else
        relay_db_maybe_claim(db);
}

/* An error for a request of an MCP server on a call's stream
 * (deliver.c:on_server_request), made inside libcurl's write callback:
 * it goes on the multi from the loop, once the callback returned. */
static void relay_queue_reply(struct delivery *reply)
{
    struct relay_db *db = reply->owner; /* the call's database */
    struct relay *r = db->relay;
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
    struct relay_db *db = d->owner;
    struct relay *r = db->relay;
    if (d->kind == DELIVERY_MCP_SETUP) {
        relay_setup_done(db, d, result);
        return;
    }
    if (d->kind == DELIVERY_MCP_REPLY) {
        relay_reply_done(r, d, result);
        return;
    }
    relay_conclude(db, d, result, false);
    relay_db_flush(db);
    if (relay_db_stopping(db)) {
        relay_check_shutdown(r);
        return;
    }
    if (db->more_due || db->in_flight == 0 || r->in_flight < r->cfg->max_in_flight / 2)
        relay_db_maybe_claim(db);
    relay_offer_room(r);
}

/* leased_ns: when the statement that leased the row was sent (its lease is
 * younger than that), 0 when not known; relay_renew_leases reads it. */
void relay_start_delivery(struct relay_db *db, struct target *t, const struct claimed_row *row,
                          uint64_t leased_ns)
{
    struct relay *r = db->relay;
    size_t body_limit = (size_t)r->cfg->max_response_bytes;
    struct delivery *d = row->payload ? delivery_new(t, row, body_limit, wall_clock_ms() / 1000)
                                      : delivery_new_status_check(t, row, body_limit);
    if (d == NULL) {
        log_event(LOG_ERROR, "delivery_setup_failed", "key", json_string(row->key), "database",
                  json_string(db->name), LOG_END);
        return; /* the lease expires and another pass takes it over */
    }
    if (d->kind == DELIVERY_SEND && row->attempt > 1)
        t->retries++;
    if (row->probe)
        log_event(LOG_INFO, "circuit_probe", "target", json_string(t->name), "key",
                  json_string(row->key), "database", json_string(db->name), LOG_END);
    d->owner = db;
    d->leased_ns = leased_ns;
    DLIST_PUSH_FRONT(db->deliveries, d);
    t->in_flight++;
    db->in_flight++;
    r->in_flight++;
    if (r->in_flight > r->in_flight_peak)
        r->in_flight_peak = r->in_flight;
    relay_dispatch(db, d);
}

/* ---------------------------------------------------------------- fair share */

/* A database with due work: its last claim was cut by capacity, it asked
 * for room and found none, or it has deliveries in flight. */
static bool relay_db_busy(const struct relay_db *db)
{
    return db->more_due || db->wants_room || db->in_flight > 0;
}

int relay_room(struct relay_db *db, bool count_held)
{
    struct relay *r = db->relay;
    int held = 0;
    for (struct relay_db *o = r->dbs; o; o = o->next) {
        if (count_held)
            held += relay_db_slots_held(o);
        /* Rows the claims on the wire may bring: another database's, and
         * this one's other lane (relay_db.c, "Two lanes"). */
        if (o->claim.slot.running && (r->db_count > 1 || o == db))
            held += o->claim.limit;
        if (o->sweep.slot.running && (r->db_count > 1 || o == db))
            held += o->sweep.limit;
    }
    int free_slots = r->cfg->max_in_flight - r->in_flight - held;
    if (r->db_count <= 1 || free_slots <= 0)
        return free_slots;
    int busy = 1; /* db itself */
    for (struct relay_db *o = r->dbs; o; o = o->next)
        if (o != db && !o->removing && relay_db_busy(o))
            busy++;
    int share = r->cfg->max_in_flight / busy;
    if (share < 1)
        share = 1;
    /* What the others that asked for room and found none are owed of their
     * share; a database below its own share is owed nothing by them. */
    int owed = 0;
    if (db->in_flight >= share)
        for (struct relay_db *o = r->dbs; o; o = o->next)
            if (o != db && (o->wants_room || o->more_due) && o->in_flight < share)
                owed += share - o->in_flight;
    return free_slots - owed;
}

void relay_offer_room(struct relay *r)
{
    if (r->db_count <= 1 || relay_stopping(r))
        return;
    /* The most starved first: the fewest in flight. A handful of databases
     * is the common case; this is O(N^2) in them, once per freed slot only
     * while some database waits. */
    for (;;) {
        struct relay_db *pick = NULL;
        for (struct relay_db *db = r->dbs; db; db = db->next)
            if (db->wants_room && !db->claim.slot.running &&
                (pick == NULL || db->in_flight < pick->in_flight))
                pick = db;
        if (pick == NULL)
            return;
        relay_db_maybe_claim(pick); /* clears wants_room when it claims */
        if (pick->wants_room)
            return; /* no room for the most starved: none for the others either */
    }
}

/* ---------------------------------------------------------------- timers */

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
    uint64_t now = uv_now(&r->loop);
    for (struct relay_db *db = r->dbs; db; db = db->next)
        relay_db_maintain(db, now);
    if (!relay_stopping(r)) {
        relay_trim_pool(r, now);
        relay_check_removed(r);
    }
}

/* --exit-when-idle: every database found nothing due and holds nothing. */
void relay_check_idle_exit(struct relay *r)
{
    if (relay_stopping(r))
        return;
    for (struct relay_db *db = r->dbs; db; db = db->next)
        if (!db->idle_seen || relay_db_has_work(db) || db->claim.slot.running ||
            db->sweep.slot.running)
            return;
    log_event(LOG_INFO, "idle_exit", LOG_END);
    r->phase = RELAY_DRAINING;
    relay_check_shutdown(r);
}

/* ---------------------------------------------------------------- shutdown */

static void on_shutdown_timer(uv_timer_t *timer);

static void relay_abort_deliveries(struct relay *r)
{
    r->phase = RELAY_RECORDING;
    for (struct relay_db *db = r->dbs; db; db = db->next) {
        while (db->deliveries) {
            struct delivery *d = db->deliveries;
            http_client_remove(relay_multi_of(r, d), d->easy);
            relay_conclude(db, d, CURLE_ABORTED_BY_CALLBACK, true);
        }
        /* MCP sessions being set up: their calls went back above */
        for (size_t i = 0; i < db->targets.count; i++) {
            struct upstream_session *s = &db->targets.items[i]->upstream;
            if (s->setup) {
                http_client_remove(relay_multi_of(r, s->setup), s->setup->easy);
                delivery_free(s->setup);
                s->setup = NULL;
                s->state = UPSTREAM_NONE;
            }
        }
        relay_db_flush(db);
        relay_db_send_releases(db);
    }
}

/* A database removed from --databases: once nothing of it is in flight or
 * waiting, it says goodbye and closes; the others go on. */
static void relay_check_removed(struct relay *r)
{
    for (struct relay_db *db = r->dbs; db; db = db->next) {
        if (!db->removing || db->closing || db->in_flight > 0)
            continue;
        relay_db_flush(db);
        relay_db_send_releases(db);
        if (!relay_db_quiet(db))
            continue;
        relay_db_say_goodbye(db);
        if (db->said_goodbye)
            relay_db_close(db);
    }
}

void relay_check_shutdown(struct relay *r)
{
    if (r->phase == RELAY_CLOSING)
        return;
    if (!relay_stopping(r)) {
        relay_check_removed(r);
        return;
    }
    if (r->in_flight > 0)
        return; /* the grace timer is running */
    bool done = true;
    for (struct relay_db *db = r->dbs; db; db = db->next) {
        if (db->closing)
            continue;
        relay_db_flush(db);
        relay_db_send_releases(db);
        if (!relay_db_quiet(db)) {
            done = false; /* wait for the database (bounded by the shutdown timer) */
            continue;
        }
        relay_db_say_goodbye(db);
        done = done && db->said_goodbye;
    }
    if (done)
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
    for (struct relay_db *db = r->dbs; db; db = db->next)
        uv_timer_stop(&db->poll_timer);
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
    /* A database did not take its last outcomes in time. The rows stay
     * in_flight under our lease; another relay takes them over as ambiguous. */
    for (struct relay_db *db = r->dbs; db; db = db->next) {
        if (relay_db_quiet(db))
            continue;
        log_event(LOG_ERROR, "shutdown_unrecorded", "database", json_string(db->name), "outcomes",
                  json_integer((json_int_t)record_queue_unrecorded(&db->records)), "releases",
                  json_integer((json_int_t)db->releases.count), "reason",
                  json_string(pg_conn_ready(db->pg_rec) ? pg_conn_status_reason(db->pg)
                                                        : pg_conn_status_reason(db->pg_rec)),
                  LOG_END);
    }
    r->exit_code = 1;
    relay_close(r);
}

static void on_signal(uv_signal_t *handle, int signum)
{
    relay_begin_shutdown(handle->data, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

/* ---------------------------------------------------------------- SIGHUP */

static struct relay_db *relay_find_db(struct relay *r, const char *name)
{
    for (struct relay_db *db = r->dbs; db; db = db->next)
        if (strcmp(db->name, name) == 0)
            return db;
    return NULL;
}

/* --databases read again: a database no longer named drains what it holds
 * and stops (relay_check_removed); a new one starts; the others are not
 * touched. A line whose connection string changed keeps the old one until
 * it is removed and added again (the change is logged); a file that cannot
 * be read changes nothing. */
static void on_sighup(uv_signal_t *handle, int signum)
{
    struct relay *r = handle->data;
    if (!r->db_named || relay_stopping(r))
        return;
    struct database_list list = {0};
    char error[512];
    if (!databases_read(r->cfg->databases, &list, error, sizeof(error))) {
        log_event(LOG_ERROR, "databases_reload_failed", "error", json_string(error), LOG_END);
        return;
    }
    int added = 0, removed = 0;
    for (struct relay_db *db = r->dbs; db; db = db->next) {
        if (db->removing || databases_find(&list, db->name))
            continue;
        db->removing = true;
        db->wants_room = db->more_due = false;
        removed++;
        log_event(LOG_INFO, "database_removing", "database", json_string(db->name), "in_flight",
                  json_integer(db->in_flight), LOG_END);
    }
    for (size_t i = 0; i < list.count; i++) {
        struct relay_db *db = relay_find_db(r, list.items[i].name);
        if (db && db->removing) {
            log_event(LOG_WARN, "database_still_draining", "database", json_string(db->name),
                      LOG_END); /* added by the next SIGHUP once it is gone */
        } else if (db && strcmp(db->conninfo, list.items[i].conninfo) != 0) {
            log_event(LOG_WARN, "database_changed_ignored", "database", json_string(db->name),
                      LOG_END);
        } else if (db == NULL) {
            db = relay_add_database(r, list.items[i].name, list.items[i].conninfo);
            relay_db_start(db);
            added++;
            log_event(LOG_INFO, "database_added", "database", json_string(db->name), LOG_END);
        }
    }
    databases_free(&list);
    log_event(LOG_INFO, "databases_reloaded", "added", json_integer(added), "removed",
              json_integer(removed), "databases", json_integer(r->db_count), LOG_END);
    relay_check_shutdown(r);
}

/* ---------------------------------------------------------------- close */

static void on_closed(void *data)
{
    (void)data; /* the loop ends once every handle is closed */
}

void relay_db_closed(struct relay_db *db)
{
    struct relay *r = db->relay;
    struct relay_db **p = &r->dbs;
    while (*p != db)
        p = &(*p)->next;
    *p = db->next;
    r->db_count--;
    log_event(LOG_INFO, "database_stopped", "database", json_string(db->name), LOG_END);
    relay_db_free(db);
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
    relay_drop_replies(r);
    uv_close((uv_handle_t *)&r->reply_timer, NULL);
    uv_close((uv_handle_t *)&r->maintenance_timer, NULL);
    uv_close((uv_handle_t *)&r->shutdown_timer, NULL);
    uv_close((uv_handle_t *)&r->sigterm, NULL);
    uv_close((uv_handle_t *)&r->sigint, NULL);
    uv_close((uv_handle_t *)&r->sighup, NULL);
    for (struct relay_db *db = r->dbs; db; db = db->next)
        relay_db_close(db);
    http_client_close(r->http, on_closed, r);
    http_client_close(r->http2, on_closed, r);
}

/* ---------------------------------------------------------------- the loop */

/* The maintenance and shutdown timers, and the signals. */
static void relay_init_timers(struct relay *r)
{
    uv_timer_init(&r->loop, &r->maintenance_timer);
    uv_timer_init(&r->loop, &r->shutdown_timer);
    r->maintenance_timer.data = r->shutdown_timer.data = r;
    uv_timer_init(&r->loop, &r->reply_timer);
    r->reply_timer.data = r;
    delivery_set_reply_hook(relay_queue_reply);
    uv_signal_init(&r->loop, &r->sigterm);
    uv_signal_init(&r->loop, &r->sigint);
    uv_signal_init(&r->loop, &r->sighup);
    r->sigterm.data = r->sigint.data = r->sighup.data = r;
    uv_signal_start(&r->sigterm, on_signal, SIGTERM);
    uv_signal_start(&r->sigint, on_signal, SIGINT);
    uv_signal_start(&r->sighup, on_sighup, SIGHUP);
    uint64_t maintenance = (uint64_t)r->cfg->lease_ms / 3;
    if (maintenance > 1000)
        maintenance = 1000;
    uv_timer_start(&r->maintenance_timer, on_maintenance_timer, maintenance, maintenance);
}

/* Appends a database to the list (the order of the file). */
struct relay_db *relay_add_database(struct relay *r, const char *name, const char *conninfo)
{
    struct relay_db *db = relay_db_new(r, name, conninfo);
    struct relay_db **p = &r->dbs;
    while (*p)
        p = &(*p)->next;
    *p = db;
    r->db_count++;
    return db;
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
    relay_init_timers(r);
}
