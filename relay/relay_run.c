/*
 * relay_run.c — `outbox-relay run` as a process: from a config to an exit
 * code (relay.h).
 *
 * Why apart from relay.c: making the loop, the buffers and the handles, and
 * freeing them once the loop has ended, is done once and reads as a list of
 * steps; the scheduler (relay.c) is what runs in between. The calls go one
 * way: this file calls relay.c (relay_attach, relay_close) and
 * relay_status.c (the admin port), nothing calls back.
 *
 * The order matters in two places: the admin port is opened before any
 * connection starts, so that a port in use ends the process at once (exit
 * 1) without a claim; and the easy handles of the delivery pool are cleaned
 * up after the loop has closed, before curl_global_cleanup.
 */
#include "relay.h"
#include "relay_int.h"

#include "databases.h"
#include "lib/log.h"
#include "lib/xalloc.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

/* --db (or --databases with --database): one database, "default";
 * --databases alone: every line of the file, named. */
static bool relay_add_databases(struct relay *r)
{
    const struct config *cfg = r->cfg;
    if (cfg->databases == NULL || *cfg->databases == '\0' ||
        (cfg->database != NULL && *cfg->database != '\0')) {
        relay_add_database(r, RELAY_DEFAULT_DATABASE, cfg->db);
        return true;
    }
    struct database_list list = {0};
    char error[512];
    if (!databases_read(cfg->databases, &list, error, sizeof(error))) {
        log_event(LOG_ERROR, "databases_unreadable", "error", json_string(error), LOG_END);
        return false;
    }
    r->db_named = true;
    for (size_t i = 0; i < list.count; i++)
        relay_add_database(r, list.items[i].name, list.items[i].conninfo);
    databases_free(&list);
    return true;
}

static struct relay *relay_new(const struct config *cfg)
{
    struct relay *r = xcalloc(1, sizeof(*r));
    r->cfg = cfg; /* zeroed: r->phase is RELAY_STARTING */
    r->rng = uv_hrtime() ^ ((uint64_t)getpid() << 32) ^ 0x9E3779B97F4A7C15ULL;
    uv_loop_init(&r->loop);
    log_batch_start(&r->loop); /* a line per delivery, one write per loop turn */
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    relay_attach(r);
    if (!relay_add_databases(r)) {
        r->exit_code = 1;
        relay_close(r);
    }
    return r;
}

static void relay_start(struct relay *r)
{
    const struct config *cfg = r->cfg;
    if (r->phase == RELAY_CLOSING)
        return; /* --databases could not be read */
    log_event(LOG_INFO, "relay_started", "relay", json_string(cfg->relay_id), "batch_size",
              json_integer(cfg->batch_size), "max_in_flight", json_integer(cfg->max_in_flight),
              "lease_ms", json_integer(cfg->lease_ms), "databases", json_integer(r->db_count),
              LOG_END);
    if (!relay_start_admin(r)) {
        r->exit_code = 1;
        relay_close(r);
        return;
    }
    for (struct relay_db *db = r->dbs; db; db = db->next)
        relay_db_start(db);
}

/* After the loop: every handle is closed; frees the rest. Returns the exit
 * code, 1 also when a handle was left open. */
static int relay_free(struct relay *r)
{
    log_batch_stop();
    uv_run(&r->loop, UV_RUN_DEFAULT); /* its close callback */
    int rc = uv_loop_close(&r->loop);
    if (rc != 0) {
        log_event(LOG_ERROR, "loop_not_closed", "error", json_string(uv_strerror(rc)), LOG_END);
        r->exit_code = r->exit_code ? r->exit_code : 1;
    }
    int exit_code = r->exit_code;
    while (r->dbs) { /* freed by their close callbacks; left only by a loop not closed */
        struct relay_db *db = r->dbs;
        r->dbs = db->next;
        relay_db_free(db);
    }
    delivery_pool_drain();
    curl_global_cleanup();
    free(r);
    return exit_code;
}

int relay_run(const struct config *cfg)
{
    struct relay *r = relay_new(cfg);
    relay_start(r);
    uv_run(&r->loop, UV_RUN_DEFAULT);
    return relay_free(r);
}
