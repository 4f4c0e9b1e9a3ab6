/*
 * prune.h — retention run by the relay: every --prune-interval-ms, calls of
 * outbox.prune_step on a connection of its own until a call finds less than
 * a batch (migrations/0012_retention.sql, docs/design.md "Retention").
 *
 * Owns: the "prune" database connection, its timer, the counters of
 * /metrics and one log line per run. A relay of --databases runs one per
 * database, each on that database's connection, its samples and log lines
 * labelled with the database's NAME. One relay at a time prunes: the SQL
 * function takes a transaction-level advisory lock and returns at once
 * without it. Nothing else in the relay waits for a prune.
 */
#ifndef OUTBOX_PRUNE_H
#define OUTBOX_PRUNE_H

#include "config.h"
#include "lib/strbuf.h"

#include <uv.h>

struct pruner;

/* NULL when cfg->prune_interval_ms is 0 (retention left to a CronJob).
 * conninfo: the database's; database: its name for logs, NULL for none;
 * password: pg_conn_set_password's, NULL for none. */
struct pruner *pruner_start(uv_loop_t *loop, const struct config *cfg, const char *conninfo,
                            const char *database, const char *password);
/* Stops the timer and closes the connection through its callbacks; frees p. */
void pruner_close(struct pruner *p);
/* One database's retention for /metrics: its pruner (NULL: off, zeros) and
 * its NAME (database="NAME" on each sample; NULL: --db, no label). */
struct pruner_metrics {
    const struct pruner *pruner;
    const char *database;
};
/* The prune families of /metrics, each with a sample (set) per database. */
void pruner_write_metrics(const struct pruner_metrics *dbs, size_t count, struct strbuf *out);

#endif
