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

#include "lib/log.h"
#include "lib/xalloc.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

static struct relay *relay_new(const struct config *cfg)
{
    struct relay *r = xcalloc(1, sizeof(*r));
    r->cfg = cfg; /* zeroed: r->phase is RELAY_STARTING */
    r->rng = uv_hrtime() ^ ((uint64_t)getpid() << 32) ^ 0x9E3779B97F4A7C15ULL;
    record_queue_init(&r->records); /* the other buffers start zeroed, i.e. empty */
    uv_loop_init(&r->loop);
    log_batch_start(&r->loop); /* a line per delivery, one write per loop turn */
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    relay_attach(r);
    relay_init_status(r);
    return r;
}

static void relay_start(struct relay *r)
{
    const struct config *cfg = r->cfg;
    log_event(LOG_INFO, "relay_started", "relay", json_string(cfg->relay_id), "batch_size",
              json_integer(cfg->batch_size), "max_in_flight", json_integer(cfg->max_in_flight),
              "lease_ms", json_integer(cfg->lease_ms), LOG_END);
    if (!relay_start_admin(r)) {
        r->exit_code = 1;
        relay_close(r);
        return;
    }
    pg_conn_set_query_timeout(r->pg, cfg->query_timeout_ms);
    pg_conn_set_query_timeout(r->pg_rec, cfg->query_timeout_ms);
    pg_conn_start(r->pg);
    pg_conn_start(r->pg_rec);
    r->pruner = pruner_start(&r->loop, cfg);
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
    targets_free(&r->targets);
    record_queue_free(&r->records);
    id_batch_free(&r->releases);
    strbuf_free(&r->claim_targets);
    strbuf_free(&r->claim_rooms);
    strbuf_free(&r->release_ids);
    strbuf_free(&r->release_attempts);
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
