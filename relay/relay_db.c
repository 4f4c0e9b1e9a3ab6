/*
 * relay_db.c — one database the relay serves: claim its due intents, record
 * their outcomes, give back what was not sent, keep its leases, take over
 * what its dead relays left, ask status URLs about its unknown rows, and
 * keep its targets.
 *
 * Why apart from relay.c: a relay may serve many databases (--databases,
 * docs/design.md "Many databases"), and everything here is one database's
 * alone: its three connections (floor claims, leases and the LISTEN on
 * "main", outbox.record on "record", for the reason relay.c's DESIGN gives,
 * the sweep and take-over on "sweep", for the reason "Two lanes" gives), its
 * targets with their flow control, its rows under lease, the outcomes
 * waiting for it. A database that is down, slow or refusing logins backs
 * off on its own connections (pg.c) and keeps its own outcomes until it is
 * back; nothing of another database waits for it, because no statement or
 * buffer is shared. What the databases share is the process's: the loop,
 * the curl multi, the budget of --max-in-flight (relay_room: a claim asks
 * relay.c how many rows it may take), the admin port and the shutdown.
 *
 * It reads in the order a delivery runs: claim (and the idle flag, the next
 * due time), record, give-back, leases and take-over, reconciliation; then
 * targets, database events, and the database's own start and end.
 *
 * Two lanes. outbox.claim_due scans each target from a floor that follows
 * the rows it claimed (0047, 0051), and now and then from the start of the
 * index (a sweep): rows behind the floor, such as those of a transaction
 * that committed more than 2 s after it began, are found only so. Under a
 * held snapshot a sweep steps over every index entry the hold keeps (135 ms
 * after half an hour at 400 intents a second), and on one connection every
 * claim, renewal and wake-up queued behind it: the p99 followed the sweep.
 * So the floor claims go on the main connection ('floor': they do not
 * sweep, but for a target's first claim in a session and the gated
 * targets, whose gate a sweep would hold through its scan), and the sweeps
 * and take-overs on a connection of their own ('sweep', migration 0052),
 * each lane with at most one claim on the wire.
 * The two run side by side and SKIP LOCKED keeps them apart; the rooms they
 * ask for count as in flight until their answer (targets_claimable,
 * relay_room), so that together they never exceed a target's cap or
 * --max-in-flight, and a sweep asks for half of each room, leaving the
 * rest to the floor claims while it scans (none of a gated target's). A
 * sweep takes only rows due 2 s ago or more (the floor claims' re-reads
 * cover the rest), so it does not race them for fresh rows; it runs again
 * at once when it took all it asked for, else after flow_sweep_period_ms,
 * and a due sweep starts before a floor claim (relay_db_maybe_claim). While
 * the sweep connection is down, or after FLOW_SWEEP_FAILURES_IN_LINE failed
 * sweeps in a row, the floor claims sweep in line as before ('auto');
 * take-overs go on the main connection while the sweep connection is down.
 * Nothing is claimed or taken over while the main connection is down: it
 * renews the leases.
 */
#include "relay_int.h"

#include "admin/admin.h"
#include "admin/ui.h"
#include "databases.h"
#include "flow.h"
#include "lib/log.h"
#include "lib/xalloc.h"
#include "outcome.h"
#include "sql.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAKE_OVER_BATCH 256
/* How long the idle flag stays up at least once raised (relay_after_claim). */
#define IDLE_FLAG_KEPT_MS 1000
#define SCHEMA_RECHECK_EVERY_MS 10000

static void relay_set_idle(struct relay_db *db, bool idle);
static void relay_take_over_expired(struct relay_db *db);
static void relay_query_next_due(struct relay_db *db);

static char *int_text(char *buf, size_t size, int64_t v)
{
    snprintf(buf, size, "%" PRId64, v);
    return buf;
}

/* Claims, take-overs and status checks start only while the process runs,
 * this database's targets are loaded and it is not being removed. */
static bool db_running(const struct relay_db *db)
{
    return db->relay->phase == RELAY_RUNNING && db->loaded && !db->removing;
}

int relay_db_slots_held(const struct relay_db *db)
{
    return record_slots_held(db->records.held_body_bytes, db->relay->cfg->max_response_bytes,
                             db->relay->cfg->max_in_flight);
}

bool relay_db_has_work(const struct relay_db *db)
{
    return db->in_flight > 0 || record_queue_unrecorded(&db->records) > 0 ||
           db->releases.count > 0 || db->release.running;
}

bool relay_db_quiet(const struct relay_db *db)
{
    return !relay_db_has_work(db) && !db->claim.slot.running && !db->sweep.slot.running &&
           !db->take_over.running && !db->reconcile.running;
}

void relay_db_buffer_outcome(struct relay_db *db, struct target *t, const struct pending_outcome *o)
{
    record_queue_push(&db->records, o);
    db->attempts_by_class[o->cls]++;
    if (t) {
        t->attempts_by_class[o->cls]++;
        t->decisions_by_state[o->state]++;
    }
}

/* ---------------------------------------------------------------- claim */

/* Gives every row of a claim's answer back unsent. */
static void relay_release_claimed(struct relay_db *db, PGresult *res)
{
    for (int i = 0; i < PQntuples(res); i++) {
        struct claimed_row row = sql_claimed_row(res, i);
        id_batch_push(&db->releases, row.id, row.attempt);
    }
}

static const char *claim_lane_name(const struct claim_lane *lane)
{
    return lane->kind == CLAIM_SWEEP ? "sweep" : "floor";
}

/* What outbox.claim_due is asked to scan (0052): the sweep lane sweeps; the
 * floor lane does not, unless the sweep connection is down or its sweeps
 * keep failing (a statement_timeout shorter than a sweep, say): 'auto',
 * sweeping in line now and then, as before 0052. */
static const char *claim_lane_scan(const struct claim_lane *lane)
{
    if (lane->kind == CLAIM_SWEEP)
        return "sweep";
    const struct relay_db *db = lane->db;
    return pg_conn_ready(db->pg_sweep) && db->sweep_failures < FLOW_SWEEP_FAILURES_IN_LINE ? "floor"
                                                                                           : "auto";
}

/* True (counted and logged) when the claim's answer came so late that its
 * leases may be close to expiring (outcome_claim_answer_late). */
static bool relay_claim_answer_late(const struct claim_lane *lane, int rows)
{
    struct relay_db *db = lane->db;
    uint64_t elapsed_ms = (uv_hrtime() - lane->started_ns) / 1000000u;
    if (rows == 0 || !outcome_claim_answer_late(elapsed_ms, db->relay->cfg->lease_ms))
        return false;
    db->claims_late++;
    log_event(LOG_WARN, "claim_answer_late", "rows", json_integer(rows), "elapsed_ms",
              json_integer((json_int_t)elapsed_ms), "lease_ms",
              json_integer(db->relay->cfg->lease_ms), "reason",
              json_string(OUTCOME_CLAIM_LATE_REASON), "scan", json_string(claim_lane_name(lane)),
              "database", json_string(db->name), LOG_END);
    return true;
}

/* Sends one claimed row, or decides it without a request when sending it
 * again is not safe any more. */
static void relay_take_claimed_row(struct relay_db *db, const struct claimed_row *row,
                                   uint64_t leased_ns)
{
    struct target *t = targets_find(&db->targets, row->target);
    if (t == NULL) {
        /* Cannot happen: claim only names targets we know. Give it back. */
        id_batch_push(&db->releases, row->id, row->attempt);
        return;
    }
    if ((t->key_header != NULL) != row->key_sent) {
        /* The claim stamped the row by the target's key header in the
         * database, and this relay's copy says otherwise (a reload raced
         * the claim). The stamp is what a later take-over trusts, so the
         * request must match it: give the row back unsent, reload. */
        log_event(LOG_WARN, "claim_key_header_changed", "key", json_string(row->key), "target",
                  json_string(t->name), "key_sent", json_boolean(row->key_sent), "database",
                  json_string(db->name), LOG_END);
        id_batch_push(&db->releases, row->id, row->attempt);
        stmt_slot_start(&db->targets_load, 0, NULL);
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
        relay_db_buffer_outcome(db, t, &o);
        return;
    }
    relay_start_delivery(db, t, row, leased_ns);
}

/* After a claim's rows went out: claim again, raise or lower the idle flag,
 * or ask when the next row is due. */
static void relay_after_claim(struct relay_db *db, int rows)
{
    db->empty_claims = rows == 0 ? db->empty_claims + 1 : 0;
    const struct relay *r = db->relay;
    bool full = rows > 0 && (rows >= r->cfg->batch_size || r->in_flight >= r->cfg->max_in_flight ||
                             (r->db_count > 1 && rows >= db->claim.limit));
    db->more_due = full;
    /* Idle (wanting a NOTIFY) when nothing is due and nothing is in flight;
     * busy as soon as a claim finds more than one row: enqueues then arrive
     * faster than wake-ups, the relay claims again as deliveries complete,
     * and a flag left up would make every enqueue pay for NOTIFY (the bench
     * measured 1.8x fewer enqueues per second). One row at a time (a
     * trickle) keeps the flag up and saves two heartbeats per intent.
     * Once raised, the flag stays up IDLE_FLAG_KEPT_MS at least: each
     * change is a version of the relay's row in outbox.relays that every
     * enqueue reads (a sequential scan), and under a held snapshot none of
     * them can be removed; a trickle whose claims find one row, then two,
     * then none wrote dozens a second. A flag left up a second longer
     * costs a busy relay's enqueues their NOTIFY for that second. */
    if (rows > 1 && uv_now(&r->loop) - db->idle_raised_ms >= IDLE_FLAG_KEPT_MS)
        relay_set_idle(db, false);
    if (full) {
        relay_db_maybe_claim(db);
        return;
    }
    if (rows == 0 && db->in_flight == 0 && !db->idle_in_db)
        relay_set_idle(db, true); /* claims once more when the flag is up */
    if (db->claim.again) {
        db->claim.again = false;
        relay_db_maybe_claim(db);
    } else if (rows == 0) {
        relay_query_next_due(db);
    }
}

static void on_sweep_timer(uv_timer_t *timer);

static void claim_lane_start(struct claim_lane *lane);

/* After a sweep's answer: the rows it took, or failed (an error, or an
 * answer so late that its rows went back). Again at once if it took all it
 * asked for (there may be more behind: a backlog), else
 * after its period (flow_sweep_period_ms; doubled after a failure, and the
 * floor claims sweep in line after FLOW_SWEEP_FAILURES_IN_LINE of them). A
 * floor claim tried while the sweep was on the wire claims once more: the
 * rooms the sweep held are free again. */
static void relay_after_sweep(struct relay_db *db, int rows, bool failed)
{
    uint64_t took_ms = (uv_hrtime() - db->sweep.started_ns) / 1000000u;
    if (failed) {
        db->sweep_failures++;
        db->sweep_period_ms = flow_sweep_backoff_ms(db->sweep_period_ms);
    } else {
        db->sweep_failures = 0;
        db->sweep_period_ms = flow_sweep_period_ms(took_ms, db->sweep_period_ms);
    }
    if (rows > 0 && rows >= db->sweep.limit)
        db->sweep_wanted = true;
    else if (!db->closing)
        uv_timer_start(&db->sweep_timer, on_sweep_timer, db->sweep_period_ms, 0);
    if (db->claim_during_sweep) {
        db->claim_during_sweep = false;
        claim_lane_start(&db->claim);
    }
    if (db->sweep_wanted)
        claim_lane_start(&db->sweep);
}

static void on_claimed(void *data, PGresult *res, const char *error)
{
    struct claim_lane *lane = data;
    struct relay_db *db = lane->db;
    bool sweep = lane->kind == CLAIM_SWEEP;
    if (!sweep) /* the claims' latency; a sweep's is its scan, long by design */
        metrics_histogram_observe(&db->claim_seconds,
                                  (double)(uv_hrtime() - lane->started_ns) / 1e9);
    if (error) {
        targets_unclaim(&db->targets, lane->kind);
        log_event(LOG_WARN, "claim_failed", "error", json_string(error), "scan",
                  json_string(claim_lane_name(lane)), "database", json_string(db->name), LOG_END);
        if (sweep && !relay_db_stopping(db))
            relay_after_sweep(db, 0, true);
        relay_check_shutdown(db->relay);
        return;
    }
    int rows = PQntuples(res);
    if (relay_db_stopping(db)) {
        /* A claim that was on the wire when the signal came: give its rows
         * back unsent, and let the shutdown go on (it waited for this claim). */
        targets_unclaim(&db->targets, lane->kind);
        relay_release_claimed(db, res);
        relay_check_shutdown(db->relay);
        return;
    }
    if (relay_claim_answer_late(lane, rows)) {
        /* Give the rows back now, ahead of any other claim on this
         * connection; their leases are renewed until the database has
         * them (relay_held_ids), and the next claim waits for that. */
        targets_unclaim(&db->targets, lane->kind);
        relay_release_claimed(db, res);
        if (sweep)
            relay_after_sweep(db, 0, true);
        else
            db->more_due = true;
        relay_db_send_releases(db);
        relay_db_flush(db);
        return;
    }
    /* The rooms it asked for stay held until its rows are in flight; a
     * claim of this lane asked for meanwhile (a delivery that failed at
     * once claims again) waits for the end (lane->again). */
    lane->handing_out = true;
    for (int i = 0; i < rows; i++) {
        struct claimed_row row = sql_claimed_row(res, i);
        relay_take_claimed_row(db, &row, lane->started_ns);
    }
    lane->handing_out = false;
    targets_unclaim(&db->targets, lane->kind);
    db->claimed += (uint64_t)rows;
    if (sweep) {
        db->swept += (uint64_t)rows;
        relay_after_sweep(db, rows, false);
    } else {
        relay_after_claim(db, rows);
    }
    relay_db_flush(db);
}

/* Sends lane's claim if it may: this database runs, the lane's connection
 * and the main one are up (the main one renews the leases), no claim of the
 * lane is on the wire (else it claims again after it), outcomes are not
 * piling up, and there is room. */
static void claim_lane_start(struct claim_lane *lane)
{
    struct relay_db *db = lane->db;
    const struct config *cfg = db->relay->cfg;
    bool floor = lane->kind == CLAIM_FLOOR;
    if (floor && db->sweep.slot.running)
        db->claim_during_sweep = true; /* its rooms are short of what the sweep holds */
    if (!db_running(db) || !pg_conn_ready(lane->slot.pg) || !pg_conn_ready(db->pg)) {
        if (floor)
            db->wants_room = false; /* a database that cannot claim is owed nothing */
        return;
    }
    if (lane->slot.running || lane->handing_out) {
        lane->again = true;
        return;
    }
    /* Back-pressure: do not outrun the database with unrecorded outcomes
     * (this database's: another one's stop is its own). */
    if (db->records.buffered.count > (size_t)cfg->batch_size * 8)
        return;
    int room = relay_room(db, true);
    if (floor)
        db->wants_room = room <= 0 && db->relay->db_count > 1;
    if (room <= 0)
        return;
    int limit = room < cfg->batch_size ? room : cfg->batch_size;
    int parts = floor ? 1 : 2; /* a sweep leaves half of each room to the floor claims */
    if (targets_claimable(&db->targets, cfg->max_in_flight_per_target, relay_random(db->relay),
                          &db->claim_targets, &db->claim_rooms, limit, lane->kind, parts,
                          !floor) == 0)
        return; /* nothing can be sent now: a delivery's end or a reload claims again */
    limit = (limit + parts - 1) / parts;
    char limit_text[24], lease_text[24];
    const char *params[6] = {cfg->relay_id,
                             db->claim_targets.data,
                             db->claim_rooms.data,
                             int_text(limit_text, sizeof(limit_text), limit),
                             int_text(lease_text, sizeof(lease_text), cfg->lease_ms),
                             claim_lane_scan(lane)};
    /* Set before the start: its callback may run before it returns. */
    lane->limit = limit;
    lane->started_ns = uv_hrtime();
    lane->again = false;
    bool was_wanted = db->sweep_wanted;
    if (!floor)
        db->sweep_wanted = false;
    if (!stmt_slot_start(&lane->slot, 6, params)) {
        targets_unclaim(&db->targets, lane->kind);
        db->sweep_wanted = was_wanted;
    }
}

/* The sweep first when one is due: a target with room for one request and
 * a steady stream would otherwise give that room to a floor claim at every
 * delivery's end, and a row behind its floor (only a sweep reaches it)
 * would wait until the stream stops. */
void relay_db_maybe_claim(struct relay_db *db)
{
    if (db->sweep_wanted)
        claim_lane_start(&db->sweep);
    claim_lane_start(&db->claim);
}

static void on_sweep_timer(uv_timer_t *timer)
{
    struct relay_db *db = timer->data;
    db->sweep_wanted = true;
    claim_lane_start(&db->sweep);
}

/* ---------------------------------------------------------------- idle flag */

static void on_idle_changed(void *data, PGresult *res, const char *error)
{
    struct relay_db *db = data;
    if (error) {
        log_event(LOG_WARN, "heartbeat_failed", "error", json_string(error), "database",
                  json_string(db->name), LOG_END);
        return;
    }
    if (db->idle_wanted != db->idle_in_db) {
        relay_set_idle(db, db->idle_wanted); /* changed its mind while this one ran */
        return;
    }
    if (db->idle_in_db)
        relay_db_maybe_claim(db); /* the lost wake-up: look once more after raising the flag */
}

/* Tell the database whether enqueues should NOTIFY us. One change on the wire
 * at a time; the last wish wins. */
static void relay_set_idle(struct relay_db *db, bool idle)
{
    db->idle_wanted = idle;
    if (db->idle_in_db == idle || !stmt_slot_ready(&db->idle_change))
        return;
    const char *params[2] = {db->relay->cfg->relay_id, idle ? "true" : "false"};
    if (stmt_slot_start(&db->idle_change, 2, params)) {
        db->idle_in_db = idle;
        db->last_heartbeat_ms = uv_now(&db->relay->loop);
        if (idle)
            db->idle_raised_ms = db->last_heartbeat_ms;
    }
}

/* ---------------------------------------------------------------- next due */

static void on_poll_timer(uv_timer_t *timer);

static void on_next_due(void *data, PGresult *res, const char *error)
{
    struct relay_db *db = data;
    if (error || relay_db_stopping(db))
        return;
    if (PQntuples(res) == 0 || PQgetisnull(res, 0, 0)) {
        if (db->relay->cfg->exit_when_idle && !relay_db_has_work(db) && !db->claim.slot.running &&
            !db->sweep.slot.running) {
            db->idle_seen = true;
            relay_check_idle_exit(db->relay);
        }
        return;
    }
    uint64_t wait =
        flow_next_due_wait_ms(strtoll(PQgetvalue(res, 0, 0), NULL, 10), db->empty_claims);
    uint64_t due_in = uv_timer_get_due_in(&db->poll_timer);
    if (wait < (uint64_t)db->relay->cfg->poll_interval_ms && (due_in == 0 || wait < due_in))
        uv_timer_start(&db->poll_timer, on_poll_timer, wait,
                       (uint64_t)db->relay->cfg->poll_interval_ms);
}

/* Asks when something this relay can take becomes due: a row of a target it
 * has room for whose gate is open, a lease to take over, a row to reconcile. */
static void relay_query_next_due(struct relay_db *db)
{
    if (db->sweep.slot.running)
        db->claim_during_sweep = true; /* the sweep's rooms hide targets: ask after it */
    if (!stmt_slot_ready(&db->next_due))
        return;
    targets_claimable(&db->targets, db->relay->cfg->max_in_flight_per_target,
                      relay_random(db->relay), &db->claim_targets, NULL, 0, -1, 1, false);
    const char *params[1] = {db->claim_targets.data};
    stmt_slot_start(&db->next_due, 1, params);
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
    struct relay_db *db = data;
    struct outcome_list *batch = &db->records.recording;
    if (error && pg_conn_ready(db->pg_rec) &&
        record_error_is_transient(pg_error_sqlstate(db->pg_rec))) {
        /* Kept whole and retried at the next maintenance tick (not at once:
         * a lock held elsewhere is not gone yet). */
        db->record_retries++;
        log_event(LOG_WARN, "record_retry", "sqlstate", json_string(pg_error_sqlstate(db->pg_rec)),
                  "error", json_string(error), "outcomes", json_integer((json_int_t)batch->count),
                  "database", json_string(db->name), LOG_END);
        record_queue_unsend(&db->records);
        return;
    }
    if (error && pg_conn_ready(db->pg_rec)) {
        /* Refused, the connection is fine: halve, or drop the one that fails. */
        if (batch->count <= 1)
            log_event(LOG_ERROR, "record_dropped", "intent_id",
                      json_integer(batch->items[0].intent_id), "attempt",
                      json_integer(batch->items[0].attempt), "state",
                      json_string(outcome_state_name(batch->items[0].state)), "error",
                      json_string(error), "database", json_string(db->name), LOG_END);
        else
            log_event(LOG_WARN, "record_failed", "error", json_string(error), "outcomes",
                      json_integer((json_int_t)batch->count), "retrying",
                      json_integer((json_int_t)(batch->count / 2)), "database",
                      json_string(db->name), LOG_END);
        record_queue_refused(&db->records);
        relay_db_flush(db);
        return;
    }
    if (error) {
        /* The connection is gone: keep every outcome, for the reconnect. */
        log_event(LOG_WARN, "record_failed", "error", json_string(error), "outcomes",
                  json_integer((json_int_t)batch->count), "database", json_string(db->name),
                  LOG_END);
        record_queue_unsend(&db->records);
        return;
    }
    uint64_t updated = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
    db->recorded += updated;
    if (updated < batch->count) {
        db->fenced_out += batch->count - updated;
        log_event(LOG_WARN, "record_fenced_out", "outcomes",
                  json_integer((json_int_t)(batch->count - updated)), "database",
                  json_string(db->name), LOG_END);
    }
    bool slots_were_held = relay_db_slots_held(db) > 0;
    record_queue_written(&db->records);
    admin_outcomes_changed(db->relay->admin); /* wakes ?wait= requests */
    relay_db_flush(db);
    if (relay_db_stopping(db))
        relay_check_shutdown(db->relay);
    else if (db->more_due || db->in_flight == 0 || slots_were_held)
        relay_db_maybe_claim(db);
}

/* Sends the oldest waiting outcomes, unless a record is on the wire. */
void relay_db_flush(struct relay_db *db)
{
    const char *params[RECORD_PARAMS];
    if (!pg_conn_ready(db->pg_rec) ||
        !record_queue_take(&db->records, db->relay->cfg->relay_id, params))
        return;
    if (!pg_query(db->pg_rec, STMT_RECORD, RECORD_PARAMS, params, on_recorded, db))
        record_queue_unsend(&db->records); /* not connected after all */
    record_queue_shrink(&db->records);
}

/* ---------------------------------------------------------------- release */

static void on_released(void *data, PGresult *res, const char *error)
{
    struct relay_db *db = data;
    if (error) {
        log_event(LOG_WARN, "release_failed", "error", json_string(error), "database",
                  json_string(db->name), LOG_END);
        return; /* kept; retried */
    }
    /* What the database released; a row it did not (its lease had lapsed
     * and another relay took it) is that relay's now. Only what was sent
     * is dropped: rows given back while it ran go with the next. */
    long released = PQntuples(res) == 1 ? strtol(PQgetvalue(res, 0, 0), NULL, 10) : 0;
    if (released < (long)db->releases_on_wire)
        log_event(LOG_WARN, "release_partial", "asked",
                  json_integer((json_int_t)db->releases_on_wire), "released",
                  json_integer(released), "database", json_string(db->name), LOG_END);
    db->released += (uint64_t)released;
    id_batch_drop_front(&db->releases, db->releases_on_wire);
    db->releases_on_wire = 0;
    if (relay_db_stopping(db))
        relay_check_shutdown(db->relay);
    else if (db->releases.count > 0)
        relay_db_send_releases(db);
    else if (db->more_due)
        relay_db_maybe_claim(db); /* a late claim's rows are back: claim again */
}

void relay_db_send_releases(struct relay_db *db)
{
    if (db->releases.count == 0 || !stmt_slot_ready(&db->release))
        return;
    id_batch_write_arrays(&db->releases, db->releases.count, &db->release_ids,
                          &db->release_attempts);
    const char *params[3] = {db->relay->cfg->relay_id, db->release_ids.data,
                             db->release_attempts.data};
    if (stmt_slot_start(&db->release, 3, params))
        db->releases_on_wire = db->releases.count;
}

/* ---------------------------------------------------------------- leases */

/* Decides one row whose lease expired in another relay's hands. */
static void relay_take_over_row(struct relay_db *db, const struct taken_over_row *row)
{
    struct target *t = targets_find(&db->targets, row->target);
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
    struct decision dec =
        outcome_decide_taken_over(t ? &policy : NULL, &progress, relay_random(db->relay));
    char error_text[512];
    outcome_taken_over_text(error_text, sizeof(error_text), row->previous_owner);
    struct pending_outcome o =
        pending_outcome_new(row->id, row->attempt, CLASS_AMBIGUOUS, &dec, error_text);
    o.key_sent = row->key_sent;
    relay_db_buffer_outcome(db, t, &o);
    log_event(LOG_WARN, "lease_taken_over", "key", json_string(row->key), "target",
              json_string(row->target), "attempt", json_integer(row->attempt), "previous_owner",
              json_string(row->previous_owner), "key_sent",
              row->key_sent < 0 ? json_null() : json_boolean(row->key_sent), "state",
              json_string(outcome_state_name(dec.next_state)), "database", json_string(db->name),
              LOG_END);
}

/* True when this relay holds the row (relay_held_ids) right now. */
static bool relay_holds(const struct relay_db *db, int64_t id)
{
    for (const struct delivery *d = db->deliveries; d; d = d->next)
        if (d->intent_id == id)
            return true;
    for (size_t i = 0; i < db->releases.count; i++)
        if (db->releases.ids[i] == id)
            return true;
    return record_queue_holds(&db->records, id);
}

static void on_taken_over(void *data, PGresult *res, const char *error)
{
    struct relay_db *db = data;
    if (error) {
        log_event(LOG_WARN, "take_over_failed", "error", json_string(error), "database",
                  json_string(db->name), LOG_END);
        relay_check_shutdown(db->relay);
        return;
    }
    int rows = PQntuples(res), taken = rows;
    for (int i = 0; i < rows; i++) {
        struct taken_over_row row = sql_taken_over_row(res, i);
        /* The held list went out with the statement; a claim answered
         * since (its leases already lapsed: a late claim) may have handed
         * this relay the row. Its own row is not taken over: the
         * delivery, outcome or give-back that holds it decides. */
        if (strcmp(row.previous_owner, db->relay->cfg->relay_id) == 0 && relay_holds(db, row.id)) {
            taken--;
            continue;
        }
        relay_take_over_row(db, &row);
    }
    db->taken_over += (uint64_t)taken;
    relay_db_flush(db);
    relay_check_shutdown(db->relay);
    if (rows == TAKE_OVER_BATCH)
        relay_take_over_expired(db); /* a full batch: the rest at once */
}

/* The rows this relay holds: being delivered, finished and waiting to be
 * recorded, or given back and waiting to be released. Their leases are
 * renewed, and they are never taken over by this relay itself, whatever
 * their lease says (the record connection may have been down for longer
 * than a lease). Deliveries whose row was leased after leased_before_ns are
 * left out (UINT64_MAX: none is). Returns whether it listed any row. */
static bool relay_held_ids(const struct relay_db *db, struct strbuf *ids, uint64_t leased_before_ns)
{
    bool any = false;
    pgarray_begin(ids);
    for (struct delivery *d = db->deliveries; d; d = d->next) {
        if (d->leased_ns > leased_before_ns)
            continue;
        pgarray_item_int(ids, d->intent_id);
        any = true;
    }
    size_t waiting = record_queue_add_ids(&db->records, ids);
    for (size_t i = 0; i < db->releases.count; i++) /* given back, not yet released */
        pgarray_item_int(ids, db->releases.ids[i]);
    pgarray_end(ids);
    return any || waiting > 0 || db->releases.count > 0;
}

static void relay_take_over_expired(struct relay_db *db)
{
    if (!db_running(db) || db->take_over.running || !pg_conn_ready(db->pg))
        return;
    /* A long scan under a held snapshot, as the sweep: on its connection
     * while that is up ("Two lanes"). */
    db->take_over.pg = pg_conn_ready(db->pg_sweep) ? db->pg_sweep : db->pg;
    if (!stmt_slot_ready(&db->take_over))
        return;
    struct strbuf held;
    strbuf_init(&held);
    relay_held_ids(db, &held, UINT64_MAX);
    char limit[24], lease[24];
    const char *params[4] = {db->relay->cfg->relay_id,
                             int_text(limit, sizeof(limit), TAKE_OVER_BATCH),
                             int_text(lease, sizeof(lease), db->relay->cfg->lease_ms), held.data};
    stmt_slot_start(&db->take_over, 4, params);
    strbuf_free(&held);
}

static void on_renewed(void *data, PGresult *res, const char *error)
{
    const struct relay_db *db = data;
    if (error)
        log_event(LOG_WARN, "lease_renew_failed", "error", json_string(error), "database",
                  json_string(db->name), LOG_END);
}

/* The database renews a lease once less than five sixths of it is left
 * (outbox.renew_leases, 0033). A delivery whose row was leased less than a
 * twelfth of a lease ago cannot be there yet: the claim was sent before the
 * database stamped the lease, so the relay's count of its age is the larger.
 * Such deliveries are not sent; with nothing else held, there is no call.
 * A target that answers in 2 s, a relay at 1,024 in flight: each call
 * probed about a thousand ids by primary key and renewed none of them. */
static void relay_renew_leases(struct relay_db *db)
{
    if (!stmt_slot_ready(&db->renew))
        return;
    uint64_t now_ns = uv_hrtime(), young_ns = (uint64_t)db->relay->cfg->lease_ms * 1000000u / 12;
    uint64_t leased_before_ns = now_ns > young_ns ? now_ns - young_ns : 0;
    struct strbuf ids;
    strbuf_init(&ids);
    if (relay_held_ids(db, &ids, leased_before_ns)) {
        char lease[24];
        const char *params[3] = {db->relay->cfg->relay_id, ids.data,
                                 int_text(lease, sizeof(lease), db->relay->cfg->lease_ms)};
        stmt_slot_start(&db->renew, 3, params);
    }
    strbuf_free(&ids);
}

/* ---------------------------------------------------------------- reconciliation */

static void on_unknown_claimed(void *data, PGresult *res, const char *error)
{
    struct relay_db *db = data;
    if (error)
        log_event(LOG_WARN, "reconcile_claim_failed", "error", json_string(error), "database",
                  json_string(db->name), LOG_END);
    if (error || relay_db_stopping(db)) {
        relay_check_shutdown(db->relay); /* the leases lapse; another pass asks again */
        return;
    }
    for (int i = 0; i < PQntuples(res); i++) {
        struct claimed_row row = sql_unknown_row(res, i);
        struct target *t = targets_find(&db->targets, row.target);
        if (t == NULL || (t->status_url == NULL && t->status_tool == NULL))
            continue; /* the lease lapses; asked again later */
        relay_start_delivery(db, t, &row, 0);
    }
}

/* Ask status URLs about unknown rows that are due. */
static void relay_reconcile(struct relay_db *db)
{
    if (!db_running(db) || !stmt_slot_ready(&db->reconcile))
        return;
    int room = relay_room(db, false);
    if (!targets_any_status_url(&db->targets) || room <= 0)
        return;
    char limit[24], lease[24];
    const char *params[3] = {db->relay->cfg->relay_id,
                             int_text(limit, sizeof(limit), room < 64 ? room : 64),
                             int_text(lease, sizeof(lease), db->relay->cfg->lease_ms)};
    stmt_slot_start(&db->reconcile, 3, params);
}

/* ---------------------------------------------------------------- targets */

static void on_targets(void *data, PGresult *res, const char *error)
{
    struct relay_db *db = data;
    if (error) {
        log_event(LOG_ERROR, "targets_load_failed", "error", json_string(error), "database",
                  json_string(db->name), LOG_END);
        return;
    }
    targets_load(&db->targets, res);
    db->last_targets_ms = uv_now(&db->relay->loop);
    if (!db->loaded) {
        log_event(LOG_INFO, "targets_loaded", "database", json_string(db->name), "count",
                  json_integer((json_int_t)db->targets.count), LOG_END);
        db->loaded = true;
        if (db->relay->phase == RELAY_STARTING)
            db->relay->phase = RELAY_RUNNING;
    }
    relay_db_maybe_claim(db);
}

/* ---------------------------------------------------------------- database events */

/* --databases: a database on a schema older than RELAY_SCHEMA_VERSION is
 * refused (one log line a minute) and asked again every
 * SCHEMA_RECHECK_EVERY_MS; it claims nothing, the others go on. */
static void on_schema_version(void *data, PGresult *res, const char *error)
{
    struct relay_db *db = data;
    uint64_t now = uv_now(&db->relay->loop);
    db->last_version_ms = now;
    if (error) {
        log_event(LOG_WARN, "schema_version_failed", "error", json_string(error), "database",
                  json_string(db->name), LOG_END);
        return;
    }
    bool known = PQntuples(res) == 1 && !PQgetisnull(res, 0, 0);
    long version = known ? strtol(PQgetvalue(res, 0, 0), NULL, 10) : -1;
    if (known && version < RELAY_SCHEMA_VERSION) {
        if (db->version_logged_ms == 0 || now - db->version_logged_ms >= 60000) {
            log_event(LOG_ERROR, "schema_version_refused", "database", json_string(db->name),
                      "version", json_integer(version), "required",
                      json_integer(RELAY_SCHEMA_VERSION), "hint",
                      json_string("run outbox-relay migrate --databases FILE"), LOG_END);
            db->version_logged_ms = now;
        }
        return;
    }
    if (!db->version_ok)
        log_event(LOG_INFO, "schema_version", "database", json_string(db->name), "version",
                  known ? json_integer(version) : json_null(), LOG_END);
    db->version_ok = true;
    db->version_logged_ms = 0;
    stmt_slot_start(&db->targets_load, 0, NULL);
}

/* The targets, once the schema is known to be right (--databases), or at
 * once (--db: a relay of one database reads older schemas too, the
 * rollback window of deploy/README.md). */
static void relay_db_load(struct relay_db *db)
{
    if (db->relay->db_named && !db->version_ok)
        stmt_slot_start(&db->version, 0, NULL);
    else
        stmt_slot_start(&db->targets_load, 0, NULL);
}

static void on_db_ready(void *data)
{
    struct relay_db *db = data;
    /* NOTIFY is lost while disconnected: re-announce, reload, flush, claim. */
    db->idle_in_db = true; /* forces the flag down on the next full claim */
    relay_set_idle(db, false);
    db->version_ok = false; /* a migration may have run while it was away */
    relay_db_load(db);
    relay_db_flush(db);
    relay_db_send_releases(db);
    if (relay_db_stopping(db))
        relay_check_shutdown(db->relay);
    else
        relay_db_maybe_claim(db);
}

/* The sweep connection is (back) up: a new session, which has swept
 * nothing yet. */
static void on_sweep_db_ready(void *data)
{
    struct relay_db *db = data;
    if (db->sweep_failures == 0) /* else its timer, backing off, sweeps */
        db->sweep_wanted = true;
    if (relay_db_stopping(db))
        relay_check_shutdown(db->relay);
    else
        claim_lane_start(&db->sweep);
}

/* The record connection is (back) up: write what waited. */
static void on_record_db_ready(void *data)
{
    relay_db_flush(data);
    relay_check_shutdown(((struct relay_db *)data)->relay);
}

static void on_db_notify(void *data, const char *channel, const char *payload)
{
    struct relay_db *db = data;
    if (strcmp(channel, SQL_CHANNEL_OUTCOMES) == 0)
        admin_outcomes_notified(db->relay->admin, payload); /* wakes ?wait= requests */
    else
        relay_db_maybe_claim(db);
}

/* target_events.c heard that a target's circuit closed. */
static void on_circuit_closed(void *data, struct target *t)
{
    relay_db_maybe_claim(data); /* the target is back: its backlog is due now */
}

/* ---------------------------------------------------------------- timers */

static void on_poll_timer(uv_timer_t *timer)
{
    struct relay_db *db = timer->data;
    relay_take_over_expired(db);
    relay_reconcile(db);
    relay_db_maybe_claim(db);
}

void relay_db_maintain(struct relay_db *db, uint64_t now)
{
    if (!pg_conn_ready(db->pg))
        return;
    relay_renew_leases(db);
    relay_db_flush(db);
    relay_db_send_releases(db);
    if (relay_db_stopping(db))
        return;
    if (db->relay->db_named && !db->version_ok) {
        if (now - db->last_version_ms >= SCHEMA_RECHECK_EVERY_MS)
            relay_db_load(db);
    } else if (now - db->last_targets_ms >= (uint64_t)db->relay->cfg->targets_refresh_ms) {
        stmt_slot_start(&db->targets_load, 0, NULL);
    }
    relay_refresh_live_counts(db);
    relay_heartbeat(db, now);
}

/* ---------------------------------------------------------------- start and end */

static void on_farewell(void *data, PGresult *res, const char *error)
{
    struct relay_db *db = data;
    db->said_goodbye = true;
    relay_check_shutdown(db->relay);
}

void relay_db_say_goodbye(struct relay_db *db)
{
    if (db->said_goodbye || db->farewell.running)
        return;
    const char *params[1] = {db->relay->cfg->relay_id};
    if (!stmt_slot_start(&db->farewell, 1, params))
        db->said_goodbye = true; /* not connected: outbox.relays forgets it in a day */
}

static void on_db_handle_closed(void *data)
{
    struct relay_db *db = data;
    if (--db->open_conns == 0)
        relay_db_closed(db);
}

static void on_db_timer_closed(uv_handle_t *handle)
{
    on_db_handle_closed(handle->data);
}

void relay_db_close(struct relay_db *db)
{
    if (db->closing)
        return;
    db->closing = true;
    relay_log_totals(db);
    db->open_conns = 5;
    uv_close((uv_handle_t *)&db->poll_timer, on_db_timer_closed);
    uv_close((uv_handle_t *)&db->sweep_timer, on_db_timer_closed);
    pg_conn_close(db->pg, on_db_handle_closed, db);
    pg_conn_close(db->pg_rec, on_db_handle_closed, db);
    pg_conn_close(db->pg_sweep, on_db_handle_closed, db);
    pruner_close(db->pruner);
    db->pruner = NULL;
    if (db->ui) {
        db->open_conns++;
        ui_close(db->ui, on_db_handle_closed, db); /* its pages being made get 503 */
        db->ui = NULL;
    }
}

void relay_db_free(struct relay_db *db)
{
    targets_free(&db->targets);
    record_queue_free(&db->records);
    id_batch_free(&db->releases);
    strbuf_free(&db->claim_targets);
    strbuf_free(&db->claim_rooms);
    strbuf_free(&db->release_ids);
    strbuf_free(&db->release_attempts);
    free(db->name);
    free(db->conninfo);
    free(db);
}

/* The main, record and sweep connections, the statements sent on them and
 * the timers; nothing starts before relay_db_start. */
struct relay_db *relay_db_new(struct relay *r, const char *name, const char *conninfo)
{
    const struct config *cfg = r->cfg;
    struct relay_db *db = xcalloc(1, sizeof(*db));
    db->relay = r;
    db->name = xstrdup(name);
    db->conninfo = xstrdup(conninfo);
    record_queue_init(&db->records); /* the other buffers start zeroed, i.e. empty */
    struct pg_events events = {.name = "main",
                               .database = r->db_named ? db->name : NULL,
                               .data = db,
                               .on_ready = on_db_ready,
                               .on_notify = on_db_notify};
    db->pg = pg_conn_new(&r->loop, conninfo, relay_statements, RELAY_STATEMENT_COUNT, SQL_CHANNELS,
                         cfg->connect_timeout_ms, cfg->reconnect_max_ms, events);
    struct pg_events record_events = {
        .name = "record", .database = events.database, .data = db, .on_ready = on_record_db_ready};
    db->pg_rec = pg_conn_new(&r->loop, conninfo, relay_statements, RELAY_STATEMENT_COUNT, NULL,
                             cfg->connect_timeout_ms, cfg->reconnect_max_ms, record_events);
    struct pg_events sweep_events = {
        .name = "sweep", .database = events.database, .data = db, .on_ready = on_sweep_db_ready};
    db->pg_sweep = pg_conn_new(&r->loop, conninfo, relay_statements, RELAY_STATEMENT_COUNT, NULL,
                               cfg->connect_timeout_ms, cfg->reconnect_max_ms, sweep_events);
    db->claim = (struct claim_lane){.db = db, .kind = CLAIM_FLOOR};
    db->sweep = (struct claim_lane){.db = db, .kind = CLAIM_SWEEP};
    stmt_slot_init(&db->claim.slot, db->pg, STMT_CLAIM, on_claimed, &db->claim);
    stmt_slot_init(&db->sweep.slot, db->pg_sweep, STMT_CLAIM, on_claimed, &db->sweep);
    db->sweep_wanted = true; /* the first sweep once the sweep connection is up */
    stmt_slot_init(&db->next_due, db->pg, cfg->exit_when_idle ? STMT_NEXT_DUE_EXACT : STMT_NEXT_DUE,
                   on_next_due, db);
    stmt_slot_init(&db->idle_change, db->pg, STMT_HEARTBEAT, on_idle_changed, db);
    stmt_slot_init(&db->release, db->pg, STMT_RELEASE, on_released, db);
    stmt_slot_init(&db->take_over, db->pg, STMT_TAKE_OVER, on_taken_over, db);
    stmt_slot_init(&db->renew, db->pg, STMT_RENEW, on_renewed, db);
    stmt_slot_init(&db->reconcile, db->pg, STMT_CLAIM_UNKNOWN, on_unknown_claimed, db);
    stmt_slot_init(&db->targets_load, db->pg, STMT_TARGETS, on_targets, db);
    stmt_slot_init(&db->farewell, db->pg, STMT_GONE, on_farewell, db);
    stmt_slot_init(&db->version, db->pg, STMT_SCHEMA_VERSION, on_schema_version, db);
    db->reporter = (struct target_reporter){
        .pg = db->pg,
        .relay_id = cfg->relay_id,
        .relay_cap = cfg->max_in_flight_per_target,
        .on_circuit_closed = on_circuit_closed,
        .data = db,
    };
    uv_timer_init(&r->loop, &db->poll_timer);
    db->poll_timer.data = db;
    uv_timer_init(&r->loop, &db->sweep_timer);
    db->sweep_timer.data = db;
    relay_init_status(db);
    return db;
}

void relay_db_start(struct relay_db *db)
{
    const struct config *cfg = db->relay->cfg;
    pg_conn_set_query_timeout(db->pg, cfg->query_timeout_ms);
    pg_conn_set_query_timeout(db->pg_rec, cfg->query_timeout_ms);
    pg_conn_set_query_timeout(db->pg_sweep, cfg->query_timeout_ms);
    const char *password = db->relay->db_named ? databases_secret(db->name) : NULL;
    pg_conn_set_password(db->pg, password);
    pg_conn_set_password(db->pg_rec, password);
    pg_conn_set_password(db->pg_sweep, password);
    pg_conn_start(db->pg);
    pg_conn_start(db->pg_rec);
    pg_conn_start(db->pg_sweep);
    db->pruner = pruner_start(&db->relay->loop, cfg, db->conninfo,
                              db->relay->db_named ? db->name : NULL, password);
    if (db->relay->db_named && cfg->admin_listen && *cfg->admin_listen)
        db->ui = ui_new(&db->relay->loop, cfg, db->conninfo, db->name, password);
    uv_timer_start(&db->poll_timer, on_poll_timer, (uint64_t)cfg->poll_interval_ms,
                   (uint64_t)cfg->poll_interval_ms);
}
