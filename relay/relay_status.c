/*
 * relay_status.c — what others read of the relay: readiness, /metrics and
 * the outcome of a key on the admin port (opened here, with these hooks),
 * the heartbeat in outbox.relays, and the log lines of an attempt and of
 * the relay's end.
 *
 * Why apart from relay.c: these are leaves. They read the relay's state
 * (relay_int.h) and send read-only statements on the main connection, and
 * they never call back into the scheduler, so relay.c depends on this file
 * and not the other way round. The families of /metrics are written in a
 * fixed order (dashboards and tests/prom read them by name, but a stable
 * order keeps diffs of a scrape readable), one function per group.
 */
#include "relay_int.h"

#include "admin/admin.h"
#include "admin/ui.h"
#include "admin/ui_html.h"
#include "lib/log.h"
#include "lib/metrics.h"
#include "sql.h"
#include "lib/xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIVE_COUNTS_LOG_EVERY_MS 60000
#define HEARTBEAT_EVERY_MS 10000
/* The admin port (admin.c): 64 connections for any request, of which 32 may
 * be long-polls (?wait=); 16 more for the probes once those are taken. */
#define ADMIN_MAX_CONNECTIONS 64
#define ADMIN_MAX_WAITS 32
#define ADMIN_PROBE_RESERVE 16
#define ADMIN_MAX_REQUEST_BYTES 8192

/* The live states of outbox.live_counts(), in the order of r->live_counts. */
static const char *const live_states[4] = {"pending", "in_flight", "unknown", "awaiting_approval"};

/* ---------------------------------------------------------------- readiness */

/* Why one database cannot be worked on now; "" when it can. Its text goes
 * into r->ready_reason's neighbour buffer, so it is copied by the caller. */
static void relay_db_reason(const struct relay_db *db, char *out, size_t size)
{
    if (!pg_conn_ready(db->pg))
        /* No host, port or user on the port: the full text is in the log. */
        snprintf(out, size, "database not connected: %s",
                 pg_public_reason(pg_conn_status_reason(db->pg)));
    else if (!pg_conn_ready(db->pg_rec))
        snprintf(out, size, "record connection not connected: %s",
                 pg_public_reason(pg_conn_status_reason(db->pg_rec)));
    else if (!db->loaded)
        snprintf(out, size, "targets not loaded yet");
    else
        *out = '\0';
}

/* One database: its reason. Several (--databases): ready while at least one
 * can be worked on; when none can, each one's state, "name: reason; ...". */
static const char *relay_ready_reason(void *data)
{
    struct relay *r = data;
    if (relay_stopping(r))
        return "shutting down";
    if (!r->db_named && r->dbs) {
        relay_db_reason(r->dbs, r->ready_reason, sizeof(r->ready_reason));
        return r->ready_reason;
    }
    char one[320];
    size_t len = 0;
    r->ready_reason[0] = '\0';
    for (const struct relay_db *db = r->dbs; db; db = db->next) {
        relay_db_reason(db, one, sizeof(one));
        if (*one == '\0')
            return "";
        int n = snprintf(r->ready_reason + len, sizeof(r->ready_reason) - len, "%s%s: %s",
                         len ? "; " : "", db->name, one);
        if (n < 0 || (size_t)n >= sizeof(r->ready_reason) - len)
            break;
        len += (size_t)n;
    }
    return r->dbs ? r->ready_reason : "no database";
}

/* /readyz's "databases" (--databases): each one's state. */
static void relay_ready_databases(void *data,
                                  void (*add)(void *ctx, const char *name, const char *state),
                                  void *ctx)
{
    struct relay *r = data;
    char one[320];
    for (const struct relay_db *db = r->dbs; db; db = db->next) {
        relay_db_reason(db, one, sizeof(one));
        add(ctx, db->name, db->removing ? "removing" : *one ? one : "ready");
    }
}

/* ---------------------------------------------------------------- heartbeat */

static void on_heartbeat_done(void *data, PGresult *res, const char *error)
{
    if (error)
        log_event(LOG_WARN, "heartbeat_failed", "error", json_string(error), LOG_END);
}

void relay_heartbeat(struct relay_db *db, uint64_t now)
{
    if (now - db->last_heartbeat_ms < HEARTBEAT_EVERY_MS || db->idle_change.running)
        return;
    const char *params[2] = {db->relay->cfg->relay_id, db->idle_in_db ? "true" : "false"};
    if (pg_query(db->pg, STMT_HEARTBEAT, 2, params, on_heartbeat_done, db))
        db->last_heartbeat_ms = now;
}

/* ---------------------------------------------------------------- live counts */

/* A failed refresh is logged (the first at once, then one line a minute
 * while it keeps failing) and the gauges are left out of /metrics until the
 * next refresh answers: a gauge that cannot be read must not read 0. */
static void on_live_counts(void *data, PGresult *res, const char *error)
{
    struct relay_db *r = data;
    r->live_counts_took_ms = uv_now(&r->relay->loop) - r->last_live_counts_ms;
    if (error) {
        uint64_t now = uv_now(&r->relay->loop);
        r->live_counts_failures++;
        if (r->live_counts_valid || r->live_counts_logged_ms == 0 ||
            now - r->live_counts_logged_ms >= LIVE_COUNTS_LOG_EVERY_MS) {
            log_event(LOG_WARN, "live_counts_failed", "error", json_string(error), "failures",
                      json_integer((json_int_t)r->live_counts_failures), LOG_END);
            r->live_counts_logged_ms = now;
        }
        r->live_counts_valid = false;
        return;
    }
    if (!r->live_counts_valid && r->live_counts_failures > 0)
        log_event(LOG_INFO, "live_counts_recovered", "failures",
                  json_integer((json_int_t)r->live_counts_failures), LOG_END);
    r->live_counts_valid = true;
    r->live_counts_logged_ms = 0;
    for (int i = 0; i < PQntuples(res); i++) {
        for (int k = 0; k < 4; k++) {
            if (strcmp(PQgetvalue(res, i, 0), live_states[k]) != 0)
                continue;
            r->live_counts[k] = strtoll(PQgetvalue(res, i, 1), NULL, 10);
            if (k == 0)
                r->oldest_due_age_s = strtod(PQgetvalue(res, i, 2), NULL);
        }
    }
}

void relay_refresh_live_counts(struct relay_db *r)
{
    uint64_t now = uv_now(&r->relay->loop);
    if (r->relay->admin == NULL || !stmt_slot_ready(&r->live_counts_query) ||
        now - r->last_live_counts_ms < flow_live_counts_interval_ms(r->live_counts_took_ms))
        return;
    if (stmt_slot_start(&r->live_counts_query, 0, NULL))
        r->last_live_counts_ms = now;
}

void relay_init_status(struct relay_db *r)
{
    stmt_slot_init(&r->live_counts_query, r->pg, STMT_LIVE_COUNTS, on_live_counts, r);
    static const double latency_bounds[] = METRICS_LATENCY_SECONDS_BOUNDS;
    if (!metrics_histogram_init(&r->delivery_seconds, latency_bounds,
                                METRICS_LATENCY_SECONDS_BOUND_COUNT) ||
        !metrics_histogram_init(&r->claim_seconds, latency_bounds,
                                METRICS_LATENCY_SECONDS_BOUND_COUNT))
        abort();
}

/* ---------------------------------------------------------------- /metrics */

/* The labels of one sample: database="NAME" first when the relay names its
 * databases (--databases), then up to two more. One database (--db) has no
 * database label: its series read as they always did. */
struct sample_labels {
    struct metrics_label items[3];
    size_t count;
};

static struct sample_labels db_labels(const struct relay_db *db, const char *name1,
                                      const char *value1, const char *name2, const char *value2)
{
    struct sample_labels l = {.count = 0};
    if (db->relay->db_named)
        l.items[l.count++] = (struct metrics_label){"database", db->name};
    if (name1)
        l.items[l.count++] = (struct metrics_label){name1, value1};
    if (name2)
        l.items[l.count++] = (struct metrics_label){name2, value2};
    return l;
}

#define FOR_DB(r, db) for (const struct relay_db *db = (r)->dbs; db; db = db->next)

/* One family with one sample per database. */
static void db_family(const struct relay *r, struct strbuf *out, const char *name,
                      enum metrics_type type, const char *help,
                      double (*value)(const struct relay_db *db))
{
    metrics_family(out, name, type, help);
    FOR_DB(r, db)
    {
        struct sample_labels l = db_labels(db, NULL, NULL, NULL, NULL);
        metrics_sample(out, name, l.count ? l.items : NULL, l.count, value(db));
    }
}

static double live_counts_failures(const struct relay_db *db)
{
    return (double)db->live_counts_failures;
}

static void write_live_counts(const struct relay *r, struct strbuf *out)
{
    db_family(r, out, "outbox_live_counts_failures_total", METRICS_COUNTER,
              "Refreshes of outbox_intents and outbox_oldest_pending_age_seconds that "
              "failed (those gauges are absent until one answers).",
              live_counts_failures);
    metrics_family(out, "outbox_intents", METRICS_GAUGE,
                   "Intents in each live state (whole database, refreshed every 5 s, or 20 times "
                   "as long as the last count took).");
    FOR_DB(r, db)
    {
        if (!db->live_counts_valid)
            continue;
        for (int k = 0; k < 4; k++) {
            struct sample_labels l = db_labels(db, "state", live_states[k], NULL, NULL);
            metrics_sample(out, "outbox_intents", l.items, l.count, (double)db->live_counts[k]);
        }
    }
    bool any = false;
    FOR_DB(r, db)
    {
        if (!db->live_counts_valid)
            continue;
        if (!any)
            metrics_family(out, "outbox_oldest_pending_age_seconds", METRICS_GAUGE,
                           "Age of the oldest due pending intent (delivery lag).");
        any = true;
        struct sample_labels l = db_labels(db, NULL, NULL, NULL, NULL);
        metrics_sample(out, "outbox_oldest_pending_age_seconds", l.count ? l.items : NULL, l.count,
                       db->oldest_due_age_s);
    }
}

/* The families of /metrics with one sample per target, and those with one
 * per target and value of a second label (a class, a state, a result):
 * each family is a row of a table below, written by one loop. */
struct target_gauge {
    const char *name, *help;
    double (*value)(const struct relay *r, struct target *t);
};

struct target_counter {
    const char *name, *help;
    const char *label;                 /* the second label; NULL: none */
    int values;                        /* how many values it takes (1 without) */
    const char *(*label_value)(int k); /* the k-th value */
    uint64_t (*count)(const struct target *t, int k);
};

static double circuit_open(const struct relay *r, struct target *t)
{
    return t->circuit != CIRCUIT_CLOSED ? 1 : 0;
}

static double paused(const struct relay *r, struct target *t)
{
    return t->paused ? 1 : 0;
}

static double concurrency_limit(const struct relay *r, struct target *t)
{
    return flow_room(&t->flow, target_cap(t, r->cfg->max_in_flight_per_target), 0);
}

static double in_flight(const struct relay *r, struct target *t)
{
    return t->in_flight;
}

static const char *class_label(int k)
{
    return outcome_class_name((enum attempt_class)k);
}

static uint64_t attempts_of(const struct target *t, int k)
{
    return t->attempts_by_class[k];
}

static const char *state_label(int k)
{
    return outcome_state_name((enum intent_state)k);
}

static uint64_t decisions_of(const struct target *t, int k)
{
    return t->decisions_by_state[k];
}

static uint64_t retries_of(const struct target *t, int k)
{
    return t->retries;
}

/* The three classes of a status check, as the values of "result". */
static const enum attempt_class reconcile_classes[3] = {
    CLASS_RECONCILED_EXECUTED, CLASS_RECONCILED_NOT_EXECUTED, CLASS_RECONCILE_INCONCLUSIVE};

static const char *reconcile_result(int k)
{
    static const char *const results[3] = {"executed", "not_executed", "inconclusive"};
    return results[k];
}

static uint64_t reconciled_of(const struct target *t, int k)
{
    return t->attempts_by_class[reconcile_classes[k]];
}

static void write_target_counter(const struct relay *r, struct strbuf *out,
                                 const struct target_counter *c)
{
    metrics_family(out, c->name, METRICS_COUNTER, c->help);
    FOR_DB(r, db)
    {
        for (size_t i = 0; i < db->targets.count; i++) {
            const struct target *t = db->targets.items[i];
            for (int k = 0; k < c->values; k++) {
                struct sample_labels l =
                    db_labels(db, "target", t->name, c->label, c->label ? c->label_value(k) : NULL);
                metrics_sample_uint(out, c->name, l.items, l.count, c->count(t, k));
            }
        }
    }
}

static void write_target_gauge(const struct relay *r, struct strbuf *out,
                               const struct target_gauge *g)
{
    metrics_family(out, g->name, METRICS_GAUGE, g->help);
    FOR_DB(r, db)
    {
        for (size_t i = 0; i < db->targets.count; i++) {
            struct sample_labels l =
                db_labels(db, "target", db->targets.items[i]->name, NULL, NULL);
            metrics_sample(out, g->name, l.items, l.count, g->value(r, db->targets.items[i]));
        }
    }
}

/* Attempts, decisions and retries; flow control (circuit, pause, window);
 * what is in flight; status checks; all by target. */
static void write_target_metrics(const struct relay *r, struct strbuf *out)
{
    static const struct target_counter attempts = {
        "outbox_attempts_total",
        "Delivery attempts, take-overs and status checks by target and class.",
        "class",
        CLASS_COUNT,
        class_label,
        attempts_of};
    static const struct target_counter decisions = {
        "outbox_deliveries_total",
        "Decisions after an attempt by target and the state it left the intent in.",
        "state",
        STATE_UNKNOWN + 1,
        state_label,
        decisions_of};
    static const struct target_counter retries = {
        "outbox_retries_total", "Attempts after the first, by target.", NULL, 1, NULL, retries_of};
    static const struct target_gauge flow[] = {
        {"outbox_target_circuit_open",
         "1 while the target's circuit is open or half-open (shared by all relays).", circuit_open},
        {"outbox_target_paused", "1 while a Retry-After (429 or 503) pauses the whole target.",
         paused},
        {"outbox_target_concurrency_limit",
         "This relay's adaptive concurrency window for the target (AIMD).", concurrency_limit},
        {"outbox_in_flight", "Deliveries and status checks of this relay in flight, by target.",
         in_flight},
    };
    static const struct target_counter reconciliations = {
        "outbox_reconciliations_total",
        "Status URL checks of unknown intents by target and result.",
        "result",
        3,
        reconcile_result,
        reconciled_of};
    write_target_counter(r, out, &attempts);
    write_target_counter(r, out, &decisions);
    write_target_counter(r, out, &retries);
    for (size_t i = 0; i < sizeof(flow) / sizeof(flow[0]); i++)
        write_target_gauge(r, out, &flow[i]);
    write_target_counter(r, out, &reconciliations);
}

static void write_latencies(const struct relay *r, struct strbuf *out)
{
    metrics_family(out, "outbox_delivery_duration_seconds", METRICS_HISTOGRAM,
                   "Time from starting a request to its end.");
    FOR_DB(r, db)
    {
        struct sample_labels l = db_labels(db, NULL, NULL, NULL, NULL);
        metrics_histogram_render(out, "outbox_delivery_duration_seconds", l.count ? l.items : NULL,
                                 l.count, &db->delivery_seconds);
    }
    metrics_family(out, "outbox_claim_duration_seconds", METRICS_HISTOGRAM,
                   "Round trip of one claim statement on the main connection (not the sweeps).");
    FOR_DB(r, db)
    {
        struct sample_labels l = db_labels(db, NULL, NULL, NULL, NULL);
        metrics_histogram_render(out, "outbox_claim_duration_seconds", l.count ? l.items : NULL,
                                 l.count, &db->claim_seconds);
    }
}

static double claimed(const struct relay_db *db)
{
    return (double)db->claimed;
}

static double swept(const struct relay_db *db)
{
    return (double)db->swept;
}

static double claims_late(const struct relay_db *db)
{
    return (double)db->claims_late;
}

static double taken_over(const struct relay_db *db)
{
    return (double)db->taken_over;
}

static double recorded(const struct relay_db *db)
{
    return (double)db->recorded;
}

static double fenced_out(const struct relay_db *db)
{
    return (double)db->fenced_out;
}

static double record_retries(const struct relay_db *db)
{
    return (double)db->record_retries;
}

static double unrecorded(const struct relay_db *db)
{
    return (double)record_queue_unrecorded(&db->records);
}

/* Claims, take-overs, records and the retention loop's families. */
static void write_relay_counters(const struct relay *r, struct strbuf *out)
{
    db_family(r, out, "outbox_claimed_total", METRICS_COUNTER, "Rows claimed by this relay.",
              claimed);
    size_t n = 0;
    FOR_DB(r, db) n++;
    struct pruner_metrics *prunes = xcalloc(n ? n : 1, sizeof(*prunes));
    n = 0;
    FOR_DB(r, db)
    {
        prunes[n++] = (struct pruner_metrics){db->pruner, r->db_named ? db->name : NULL};
    }
    pruner_write_metrics(prunes, n, out);
    free(prunes);
    db_family(r, out, "outbox_swept_total", METRICS_COUNTER,
              "Rows claimed by the sweep: due rows behind the claims' floor, such as those of a "
              "transaction that committed more than 2 s after it began (counted in "
              "outbox_claimed_total too).",
              swept);
    db_family(r, out, "outbox_claims_late_total", METRICS_COUNTER,
              "Claims answered after half their lease; their rows were given back unsent.",
              claims_late);
    db_family(r, out, "outbox_taken_over_total", METRICS_COUNTER,
              "In-flight rows of dead relays taken over (as ambiguous).", taken_over);
    db_family(r, out, "outbox_recorded_total", METRICS_COUNTER, "Outcomes written to the database.",
              recorded);
    db_family(r, out, "outbox_fenced_out_total", METRICS_COUNTER,
              "Outcomes refused by the lease fence (a newer owner or attempt).", fenced_out);
    db_family(r, out, "outbox_record_retries_total", METRICS_COUNTER,
              "Record batches refused for a transient reason (a timeout, a deadlock, a "
              "cancel): kept whole and written again.",
              record_retries);
    db_family(r, out, "outbox_unrecorded_outcomes", METRICS_GAUGE,
              "Outcomes waiting in memory for the database.", unrecorded);
}

static double db_connected(const struct relay_db *db)
{
    return pg_conn_ready(db->pg) && pg_conn_ready(db->pg_rec) ? 1 : 0;
}

static double db_reconnects(const struct relay_db *db)
{
    return (double)(pg_conn_reconnects(db->pg) + pg_conn_reconnects(db->pg_rec) +
                    pg_conn_reconnects(db->pg_sweep));
}

static void write_connections(struct relay *r, struct strbuf *out)
{
    metrics_gauge(out, "outbox_ready", "1 while the relay is ready (database connected).",
                  METRICS_NO_LABELS, *relay_ready_reason(r) == '\0' ? 1 : 0);
    db_family(r, out, "outbox_db_connected", METRICS_GAUGE,
              "1 while both database connections (main and record) are ready.", db_connected);
    db_family(r, out, "outbox_db_reconnects_total", METRICS_COUNTER,
              "Database connections lost or failed (each followed by a reconnect).", db_reconnects);
}

static void relay_write_metrics(void *data, struct strbuf *out)
{
    struct relay *r = data;
    write_live_counts(r, out);
    write_target_metrics(r, out);
    write_latencies(r, out);
    write_relay_counters(r, out);
    write_connections(r, out);
}

/* ---------------------------------------------------------------- GET /v1/intents/{key} */

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

/* The database of a lookup: NAME of "NAME\x1fkey" (admin.h), or the one
 * database; NULL, with why in a JSON body, when there is none. */
static struct relay_db *relay_lookup_db(struct relay *r, const char **key, char *why, size_t size)
{
    const char *sep = strchr(*key, ADMIN_DATABASE_SEPARATOR[0]);
    if (sep == NULL) {
        if (r->dbs && (!r->db_named || r->db_count == 1))
            return r->dbs;
        snprintf(why, size, "{\"error\":\"%s\"}",
                 r->dbs ? "this relay serves several databases: add ?database=NAME"
                        : "no database");
        return NULL;
    }
    size_t len = (size_t)(sep - *key);
    const char *name = *key;
    *key = sep + 1;
    for (struct relay_db *db = r->dbs; db; db = db->next)
        if (!db->removing && strlen(db->name) == len && strncmp(db->name, name, len) == 0)
            return db;
    snprintf(why, size, "{\"error\":\"no database of that name\"}");
    return NULL;
}

static void relay_lookup_intent(void *data, const char *key, void *req,
                                void (*done)(void *req, int status, const char *json_body))
{
    struct relay *r = data;
    char why[128];
    struct relay_db *db = relay_lookup_db(r, &key, why, sizeof(why));
    if (db == NULL) {
        done(req, 404, why);
        return;
    }
    struct intent_lookup *lookup = xmalloc(sizeof(*lookup));
    const char *params[1] = {key};
    lookup->req = req;
    lookup->done = done;
    if (pg_query(db->pg, STMT_OUTCOME, 1, params, on_intent_looked_up, lookup))
        return; /* pg calls back exactly once, also on loss or close */
    free(lookup);
    done(req, 503, NULL);
}

/* ---------------------------------------------------------------- the status page */

/* --databases: /ui?database=NAME is that database's page (relay_db.c makes
 * it at start and closes it with the database). */
static struct ui *relay_ui_of(void *data, const char *name)
{
    struct relay *r = data;
    for (struct relay_db *db = r->dbs; db; db = db->next)
        if (!db->removing && db->ui && strcmp(db->name, name) == 0)
            return db->ui;
    return NULL;
}

/* --databases: /ui's list, a row per database: its state as /readyz says
 * it and the counts of its last live-counts refresh (the gauges of
 * outbox_intents), which cost the page no statement. */
static void relay_ui_index(void *data, struct strbuf *out)
{
    struct relay *r = data;
    size_t count = 0;
    for (const struct relay_db *db = r->dbs; db; db = db->next)
        count++;
    char(*text)[UI_DATABASE_COLUMNS][320] = xcalloc(count ? count : 1, sizeof(*text));
    const char **cells = xcalloc(count * UI_DATABASE_COLUMNS + 1, sizeof(*cells));
    size_t i = 0;
    for (const struct relay_db *db = r->dbs; db; db = db->next, i++) {
        const char **row = cells + i * UI_DATABASE_COLUMNS;
        row[UI_DATABASE_NAME] = db->name;
        relay_db_reason(db, text[i][UI_DATABASE_STATE], sizeof(text[i][UI_DATABASE_STATE]));
        row[UI_DATABASE_STATE] = db->removing                  ? "removing"
                                 : *text[i][UI_DATABASE_STATE] ? text[i][UI_DATABASE_STATE]
                                                               : "ready";
        for (int k = 0; k < 4; k++) {
            if (!db->live_counts_valid)
                continue;
            snprintf(text[i][UI_DATABASE_PENDING + k], sizeof(text[i][0]), "%lld",
                     (long long)db->live_counts[k]);
            row[UI_DATABASE_PENDING + k] = text[i][UI_DATABASE_PENDING + k];
        }
    }
    struct ui_rows rows = {.count = count, .columns = UI_DATABASE_COLUMNS, .cells = cells};
    ui_render_databases(out, &rows);
    free(cells);
    free(text);
}

/* ---------------------------------------------------------------- the port */

bool relay_start_admin(struct relay *r)
{
    if (r->cfg->admin_listen == NULL || *r->cfg->admin_listen == '\0')
        return true;
    struct admin_hooks hooks = {
        .data = r,
        .ready_reason = relay_ready_reason,
        .ready_databases = r->db_named ? relay_ready_databases : NULL,
        .write_metrics = relay_write_metrics,
        .lookup_intent = relay_lookup_intent,
        /* the status page, relay/admin/ui.c: the one database's (cfg->db),
         * or with --databases a list of them and a page each */
        .ui_config = r->cfg,
        .ui_of = r->db_named ? relay_ui_of : NULL,
        .ui_index = r->db_named ? relay_ui_index : NULL,
    };
    struct admin_limits limits = {
        .max_connections = ADMIN_MAX_CONNECTIONS,
        .max_waits = ADMIN_MAX_WAITS,
        .probe_reserve = ADMIN_PROBE_RESERVE,
        .max_request_bytes = ADMIN_MAX_REQUEST_BYTES,
        .hosts = r->cfg->admin_hosts,
    };
    r->admin =
        admin_start(&r->loop, r->cfg->admin_listen, hooks, &limits, r->cfg->admin_token_file);
    return r->admin != NULL;
}

/* ---------------------------------------------------------------- log lines */

/* One line per attempt and status check, successes included, at info: the
 * line is where a key meets its trace_id (README, "Trace context"), and a
 * delivery that worked is the one most often looked for. --log-level warn
 * leaves them all out (and builds no fields). */
void relay_log_attempt(const struct delivery *d, enum attempt_class cls, const struct decision *dec,
                       const struct delivery_report *report)
{
    log_level_t level = LOG_INFO;
    if (!log_enabled(level))
        return;
    /* log_fields, not log_event: the same line without a jansson object per
     * field (this line was 8-10 % of the relay's CPU in the TLS drain) */
    bool traced = *d->trace_id != '\0';
    struct log_field fields[] = {
        LOG_STRING("key", d->key),
        LOG_STRING("target", d->target->name),
        LOG_INTEGER("attempt", d->attempt),
        LOG_STRING("class", outcome_class_name(cls)),
        report->http_status ? LOG_INTEGER("http_status", report->http_status)
                            : LOG_NULL("http_status"),
        LOG_STRING("state", outcome_state_name(dec->next_state)),
        LOG_INTEGER("latency_ms", report->latency_ms),
        LOG_STRING("error", *report->error ? report->error : NULL),
        LOG_STRING("trace_id", traced ? d->trace_id : NULL),
        LOG_STRING("span_id", traced ? d->span_id : NULL),
    };
    log_fields(level, d->kind == DELIVERY_STATUS_CHECK ? "status_check" : "attempt", fields,
               sizeof(fields) / sizeof(fields[0]));
}

void relay_log_totals(const struct relay_db *r)
{
    log_event(LOG_INFO, "relay_stopped", "database", json_string(r->name), "claimed",
              json_integer((json_int_t)r->claimed), "swept", json_integer((json_int_t)r->swept),
              "succeeded", json_integer((json_int_t)r->attempts_by_class[CLASS_SUCCEEDED]),
              "ambiguous", json_integer((json_int_t)r->attempts_by_class[CLASS_AMBIGUOUS]),
              "not_sent", json_integer((json_int_t)r->attempts_by_class[CLASS_NOT_SENT]),
              "taken_over", json_integer((json_int_t)r->taken_over), "recorded",
              json_integer((json_int_t)r->recorded), "fenced_out",
              json_integer((json_int_t)r->fenced_out), "released",
              json_integer((json_int_t)r->released), LOG_END);
}
