/*
 * pg.h — one asynchronous PostgreSQL connection on the libuv loop.
 *
 * Owns: the PGconn, its uv_poll_t, the connect deadline and reconnect
 * back-off timer, a FIFO of queries (one on the wire at a time), LISTEN on
 * its channels (listen_channel: "a" or "a,b") and the prepared statements, re-established after
 * every reconnect. It never blocks the loop (libpq in non-blocking mode; only a host name in the
 * connection string is resolved synchronously by libpq).
 *
 * Contract of pg_query(): the callback runs exactly once, with the result
 * (status TUPLES_OK or COMMAND_OK) or with an error text (SQL error, or the
 * connection was lost before the result came). The result is cleared after
 * the callback returns.
 */
#ifndef OUTBOX_PG_H
#define OUTBOX_PG_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <uv.h>

typedef struct pg_conn pg_conn_t;

typedef void (*pg_result_cb)(void *data, PGresult *res, const char *error);

struct pg_statement {
    const char *name;
    const char *sql;
};

struct pg_events {
    const char *name;     /* for logs: which of the owner's connections ("main", "record") */
    const char *database; /* for logs: which of the owner's databases; NULL: not logged */
    void *data;
    void (*on_ready)(void *data);                    /* connected, LISTENing, statements prepared */
    void (*on_lost)(void *data, const char *reason); /* connection lost; reconnecting */
    /* A connect attempt failed before the connection was ready; retrying. */
    void (*on_connect_failed)(void *data, const char *reason);
    void (*on_notify)(void *data, const char *channel, const char *payload);
};

pg_conn_t *pg_conn_new(uv_loop_t *loop, const char *conninfo, const struct pg_statement *statements,
                       size_t statement_count, const char *listen_channel, int connect_timeout_ms,
                       int reconnect_max_ms, struct pg_events events);
/* Every round trip must answer within timeout_ms, or the connection is
 * dropped and re-made; the server's statement_timeout is set a little
 * shorter. 0 (the default): no deadline. Call before pg_conn_start. */
void pg_conn_set_query_timeout(pg_conn_t *pg, int timeout_ms);
/* A password kept apart from the connection string (never logged); it
 * overrides one in the string. Call before pg_conn_start. */
void pg_conn_set_password(pg_conn_t *pg, const char *password);
void pg_conn_start(pg_conn_t *pg);
bool pg_conn_ready(const pg_conn_t *pg);
/* Queries queued, the one on the wire included (an owner that keeps its
 * own queue in front, for fairness, hands one over when this is low). */
int pg_conn_queued(const pg_conn_t *pg);
/* Why the connection is not ready (for logs and readiness); "" when ready. */
const char *pg_conn_status_reason(const pg_conn_t *pg);

/* What a reader who must not see host, port or user may be told about a
 * database error, from libpq's or the connection's own message (which names
 * them): a fixed phrase such as "connection refused", "authentication
 * failed", "timeout", "connection lost"; "connection failed" when not
 * recognised. /readyz and the status page say this; the log has the rest. */
const char *pg_public_reason(const char *detail);
unsigned long pg_conn_reconnects(const pg_conn_t *pg);

/* Queue a prepared statement. Values are copied; NULL entries are SQL NULL.
 * Returns false (and never calls cb) when the connection is not ready. */
bool pg_query(pg_conn_t *pg, const char *statement, int nparams, const char *const *values,
              pg_result_cb cb, void *data);

/* Inside a query's callback that got an SQL error: its SQLSTATE ("OR001")
 * and primary message (no "ERROR:" prefix, no detail); "" when the error
 * was not the server's (the connection was lost) or there was none. */
const char *pg_error_sqlstate(const pg_conn_t *pg);
const char *pg_error_primary(const pg_conn_t *pg);

/* Fail what is queued, close the socket and timers; on_closed runs from the
 * loop once every handle is closed, after which pg is freed. */
void pg_conn_close(pg_conn_t *pg, void (*on_closed)(void *data), void *data);

#endif
