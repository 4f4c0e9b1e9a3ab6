/*
 * prune.c — the relay's retention loop.
 *
 * Why a connection of its own: a prune step deletes up to a batch of rows
 * and writes their tombstones, tens of milliseconds of work. On the main
 * connection every claim queued behind it would wait; on the record
 * connection every outcome. A third connection keeps the hot paths' queues
 * as they are, for one idle backend per relay.
 *
 * Why steps and not one call: each outbox.prune_step is one short
 * transaction (the relay runs in autocommit), so locks are held for one
 * batch and vacuum can reclaim what the previous step freed. A run goes on
 * while a step fills its batch, at most PRUNE_MAX_STEPS steps (then the
 * next tick goes on), and stops at once when the relay shuts down.
 */
#include "prune.h"

#include "lib/log.h"
#include "lib/metrics.h"
#include "lib/pg.h"
#include "lib/xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PRUNE_MAX_STEPS 200
#define STMT_PRUNE_STEP "prune_step"

static const struct pg_statement prune_statements[] = {
    {STMT_PRUNE_STEP, "SELECT pruned, forgotten, locked FROM outbox.prune_step($1)"},
};

struct pruner {
    const struct config *cfg;
    char *database; /* in log lines: the NAME of --databases, "default" for --db */
    pg_conn_t *pg;
    uv_timer_t timer;
    bool running; /* a run's step is on the wire */
    bool closing;

    /* The run under way. */
    uint64_t run_started_ns;
    uint64_t run_pruned, run_forgotten;
    int run_steps;

    /* For /metrics. */
    uint64_t runs, runs_failed, runs_locked_out, pruned, forgotten;
    double last_duration_s, last_success_unix_s;
};

static void pruner_send_step(struct pruner *p);

static void pruner_end_run(struct pruner *p, const char *error, bool locked_out)
{
    p->running = false;
    double duration_s = (double)(uv_hrtime() - p->run_started_ns) / 1e9;
    if (error != NULL) {
        p->runs_failed++;
        log_event(LOG_WARN, "prune_failed", "database", json_string(p->database), "error",
                  json_string(error), "pruned", json_integer((json_int_t)p->run_pruned), LOG_END);
        return;
    }
    if (locked_out) {
        p->runs_locked_out++;
        log_event(LOG_DEBUG, "prune_skipped", "database", json_string(p->database), "reason",
                  json_string("another session is pruning"), LOG_END);
        return;
    }
    p->runs++;
    p->last_duration_s = duration_s;
    uv_timeval64_t now;
    if (uv_gettimeofday(&now) == 0)
        p->last_success_unix_s = (double)now.tv_sec + (double)now.tv_usec / 1e6;
    log_event(LOG_INFO, "prune_run", "database", json_string(p->database), "pruned",
              json_integer((json_int_t)p->run_pruned), "forgotten",
              json_integer((json_int_t)p->run_forgotten), "steps", json_integer(p->run_steps),
              "duration_ms", json_integer((json_int_t)(duration_s * 1e3)), LOG_END);
}

static void on_prune_step(void *data, PGresult *res, const char *error)
{
    struct pruner *p = data;
    if (p->closing) {
        p->running = false; /* failed by the connection's close: nothing to report */
        return;
    }
    if (error != NULL || PQntuples(res) != 1) {
        pruner_end_run(p, error ? error : "outbox.prune_step returned no row", false);
        return;
    }
    long long pruned = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    long long forgotten = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
    if (PQgetvalue(res, 0, 2)[0] != 't') {
        pruner_end_run(p, NULL, true);
        return;
    }
    p->run_steps++;
    p->run_pruned += (uint64_t)pruned;
    p->run_forgotten += (uint64_t)forgotten;
    p->pruned += (uint64_t)pruned;
    p->forgotten += (uint64_t)forgotten;
    bool full = pruned >= p->cfg->prune_batch || forgotten >= p->cfg->prune_batch;
    if (full && !p->closing && p->run_steps < PRUNE_MAX_STEPS)
        pruner_send_step(p);
    else
        pruner_end_run(p, NULL, false);
}

static void pruner_send_step(struct pruner *p)
{
    char batch[24];
    snprintf(batch, sizeof(batch), "%d", p->cfg->prune_batch);
    const char *params[1] = {batch};
    if (!pg_query(p->pg, STMT_PRUNE_STEP, 1, params, on_prune_step, p))
        pruner_end_run(p, pg_conn_status_reason(p->pg), false);
}

static void on_prune_timer(uv_timer_t *timer)
{
    struct pruner *p = timer->data;
    if (p->running || p->closing || !pg_conn_ready(p->pg))
        return; /* a run still going on, or no connection: the next tick */
    p->running = true;
    p->run_started_ns = uv_hrtime();
    p->run_pruned = p->run_forgotten = 0;
    p->run_steps = 0;
    pruner_send_step(p);
}

struct pruner *pruner_start(uv_loop_t *loop, const struct config *cfg, const char *conninfo,
                            const char *database, const char *password)
{
    if (cfg->prune_interval_ms <= 0)
        return NULL;
    struct pruner *p = xcalloc(1, sizeof(*p));
    p->cfg = cfg;
    p->database = xstrdup(database ? database : "default");
    struct pg_events events = {.name = "prune", .database = database, .data = p};
    p->pg = pg_conn_new(loop, conninfo, prune_statements,
                        sizeof(prune_statements) / sizeof(prune_statements[0]), NULL,
                        cfg->connect_timeout_ms, cfg->reconnect_max_ms, events);
    pg_conn_set_query_timeout(p->pg, cfg->query_timeout_ms);
    pg_conn_set_password(p->pg, password);
    pg_conn_start(p->pg);
    uv_timer_init(loop, &p->timer);
    p->timer.data = p;
    uv_timer_start(&p->timer, on_prune_timer, (uint64_t)cfg->prune_interval_ms,
                   (uint64_t)cfg->prune_interval_ms);
    return p;
}

static void on_prune_timer_closed(uv_handle_t *handle)
{
    struct pruner *p = handle->data;
    free(p->database);
    free(p);
}

static void on_prune_pg_closed(void *data)
{
    struct pruner *p = data;
    /* The timer's close callback frees p: it is closed once the connection
     * has failed what was queued (on_prune_step no longer runs). */
    uv_close((uv_handle_t *)&p->timer, on_prune_timer_closed);
}

void pruner_close(struct pruner *p)
{
    if (p == NULL || p->closing)
        return;
    p->closing = true;
    uv_timer_stop(&p->timer);
    pg_conn_close(p->pg, on_prune_pg_closed, p);
}

/* One sample of a family per database: database="NAME" first when named,
 * then the family's own label if any. */
static void prune_sample(struct strbuf *out, const char *name, const struct pruner_metrics *db,
                         const char *label, const char *value, double v)
{
    struct metrics_label labels[2];
    size_t n = 0;
    if (db->database)
        labels[n++] = (struct metrics_label){"database", db->database};
    if (label)
        labels[n++] = (struct metrics_label){label, value};
    metrics_sample(out, name, n ? labels : NULL, n, v);
}

static void prune_sample_uint(struct strbuf *out, const char *name, const struct pruner_metrics *db,
                              const char *label, const char *value, uint64_t v)
{
    struct metrics_label labels[2];
    size_t n = 0;
    if (db->database)
        labels[n++] = (struct metrics_label){"database", db->database};
    if (label)
        labels[n++] = (struct metrics_label){label, value};
    metrics_sample_uint(out, name, n ? labels : NULL, n, v);
}

void pruner_write_metrics(const struct pruner_metrics *dbs, size_t count, struct strbuf *out)
{
    static const struct pruner none;
#define EACH_DB                                                                                    \
    for (size_t i = 0; i < count; i++)                                                             \
        for (const struct pruner *p = dbs[i].pruner ? dbs[i].pruner : &none; p; p = NULL)
    metrics_family(out, "outbox_prune_runs_total", METRICS_COUNTER,
                   "Retention runs of this relay, by result (done; locked_out: another session "
                   "was pruning; failed).");
    EACH_DB
    {
        prune_sample_uint(out, "outbox_prune_runs_total", &dbs[i], "result", "done", p->runs);
        prune_sample_uint(out, "outbox_prune_runs_total", &dbs[i], "result", "locked_out",
                          p->runs_locked_out);
        prune_sample_uint(out, "outbox_prune_runs_total", &dbs[i], "result", "failed",
                          p->runs_failed);
    }
    metrics_family(out, "outbox_pruned_total", METRICS_COUNTER,
                   "Final intents pruned by this relay (their keys kept as tombstones).");
    EACH_DB
    prune_sample_uint(out, "outbox_pruned_total", &dbs[i], NULL, NULL, p->pruned);
    metrics_family(out, "outbox_tombstones_forgotten_total", METRICS_COUNTER,
                   "Tombstones past their dedupe window removed by this relay.");
    EACH_DB
    prune_sample_uint(out, "outbox_tombstones_forgotten_total", &dbs[i], NULL, NULL, p->forgotten);
    metrics_family(out, "outbox_prune_last_duration_seconds", METRICS_GAUGE,
                   "Duration of this relay's last completed retention run.");
    EACH_DB
    prune_sample(out, "outbox_prune_last_duration_seconds", &dbs[i], NULL, NULL,
                 p->last_duration_s);
    metrics_family(out, "outbox_prune_last_success_timestamp_seconds", METRICS_GAUGE,
                   "Unix time at which this relay's last retention run completed (0: none yet).");
    EACH_DB
    prune_sample(out, "outbox_prune_last_success_timestamp_seconds", &dbs[i], NULL, NULL,
                 p->last_success_unix_s);
#undef EACH_DB
}
