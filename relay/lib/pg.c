/*
 * pg.c — asynchronous libpq on a uv_poll_t.
 *
 * DESIGN
 * States: IDLE (waiting for the reconnect timer) → CONNECTING (PQconnectPoll
 * driven by socket events, bounded by our own deadline: connect_timeout does
 * not apply in async mode) → SETUP (LISTEN, then one PQsendPrepare per
 * statement) → READY. Any failure on the way or later: every queued query is
 * failed through its callback, the poll handle is stopped and closed *before*
 * PQfinish closes the fd, and a timer retries with exponential back-off.
 *
 * One query is on the wire at a time; the rest wait in a FIFO. The relay's
 * statements are batched (one statement per claim or per batch of
 * outcomes), so the round trip is paid per batch, not per intent.
 *
 * The poll handle keeps READABLE armed for the life of the connection (to
 * see notifications and a server that goes away) and WRITABLE only while
 * PQflush reports unsent data: uv_poll is level-triggered, and a writable
 * interest left armed would spin the loop.
 *
 * A deadline on every round trip: a connection that is black-holed (the
 * server stopped, a middlebox dropping packets, a half-open TCP connection)
 * would otherwise keep the relay "ready" while claims and renewals hang. The
 * query on the wire must answer within query_timeout_ms, or the connection is
 * dropped and re-made (its queries fail; the relay keeps its outcomes). The
 * server is told statement_timeout a second shorter, so that a statement that
 * is merely slow ends with an error first, and the connection is kept. TCP
 * keepalives (libpq's keepalives_* settings, when the connection string does
 * not set them) notice a peer that went away while idle, and
 * tcp_user_timeout one that stops acknowledging what we send.
 *
 * Invariant: a uv_poll_t exists only while its PGconn is open, and is freed
 * in its close callback.
 */
#include "lib/pg.h"
#include "lib/strbuf.h"
#include "lib/xalloc.h"

#include "lib/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum pg_state { PG_IDLE, PG_CONNECTING, PG_SETUP, PG_READY, PG_CLOSING };

enum query_kind { QUERY_LISTEN, QUERY_PREPARE, QUERY_PREPARED };

struct pg_query {
    enum query_kind kind;
    const char *statement; /* name (PREPARED, PREPARE) */
    const char *sql;       /* text (LISTEN, PREPARE) */
    int nparams;
    char **values;
    pg_result_cb cb;
    void *data;
    struct pg_query *next;
};

struct pg_conn {
    uv_loop_t *loop;
    char *conninfo;
    char *password; /* NULL: the string's, a passfile's or libpq's environment */
    const struct pg_statement *statements;
    size_t statement_count;
    char *listen_sql;
    int connect_timeout_ms;
    int reconnect_max_ms;
    int query_timeout_ms; /* 0: none */
    char *setup_sql;      /* SET statement_timeout, sent first on every connection */
    int backoff_ms;
    struct pg_events events;

    enum pg_state state;
    PGconn *conn;
    uv_poll_t *poll;
    int poll_fd;
    int poll_events;
    uv_timer_t timer;
    char reason[256];
    unsigned long reconnects;

    struct pg_query *head, *tail; /* head is on the wire when sent */
    bool head_sent;
    PGresult *pending_result;
    char *pending_error;
    char error_sqlstate[6];  /* of the error being handed to a callback; "" else */
    char error_primary[512]; /* its primary message, without "ERROR:  " and the newline */

    /* The last connect failure logged: the same one again (a wrong
     * password, a database that stays down) is logged once a minute, with
     * how many were left out, not at every retry. */
    char failure_logged[256];
    uint64_t failure_logged_ms;
    unsigned long failures_unlogged;

    int open_handles;
    void (*on_closed)(void *data);
    void *closed_data;
};

#define PG_REPEAT_LOG_EVERY_MS 60000

static const char *pg_name(const pg_conn_t *pg)
{
    return pg->events.name ? pg->events.name : "main";
}

/* The last pair of a log line: "database" when the owner names its
 * databases; else NULL ends the list there. */
static const char *pg_db_key(const pg_conn_t *pg)
{
    return pg->events.database ? "database" : NULL;
}

static json_t *pg_db_value(const pg_conn_t *pg)
{
    return pg->events.database ? json_string(pg->events.database) : NULL;
}

/* Whether a connect failure goes to the log: a new reason at once, the same
 * one once a minute. *repeated is how many were left out since. */
static bool pg_failure_logged(pg_conn_t *pg, const char *reason, unsigned long *repeated)
{
    uint64_t now = uv_now(pg->loop);
    if (strcmp(pg->failure_logged, reason) == 0 &&
        now - pg->failure_logged_ms < PG_REPEAT_LOG_EVERY_MS) {
        pg->failures_unlogged++;
        return false;
    }
    snprintf(pg->failure_logged, sizeof(pg->failure_logged), "%s", reason);
    pg->failure_logged_ms = now;
    *repeated = pg->failures_unlogged;
    pg->failures_unlogged = 0;
    return true;
}
static void pg_connection_lost(pg_conn_t *pg, const char *reason);
static void pg_set_setup_sql(pg_conn_t *pg);
static void pg_send_next(pg_conn_t *pg);

/* ---------------------------------------------------------------- queue */

static void query_free(struct pg_query *q)
{
    if (q->values) {
        for (int i = 0; i < q->nparams; i++)
            free(q->values[i]);
        free(q->values);
    }
    free(q);
}

static void queue_push(pg_conn_t *pg, struct pg_query *q, bool front)
{
    if (front) {
        q->next = pg->head;
        pg->head = q;
        if (pg->tail == NULL)
            pg->tail = q;
    } else {
        q->next = NULL;
        if (pg->tail)
            pg->tail->next = q;
        else
            pg->head = q;
        pg->tail = q;
    }
}

static struct pg_query *queue_pop(pg_conn_t *pg)
{
    struct pg_query *q = pg->head;
    if (q) {
        pg->head = q->next;
        if (pg->head == NULL)
            pg->tail = NULL;
    }
    return q;
}

/* Fail every queued query (connection lost or closing). Callbacks may queue
 * new queries: those are refused because the state is no longer READY. */
static void queue_fail_all(pg_conn_t *pg, const char *reason)
{
    struct pg_query *q;
    pg->head_sent = false;
    pg->error_sqlstate[0] = pg->error_primary[0] = '\0';
    while ((q = queue_pop(pg)) != NULL) {
        if (q->cb)
            q->cb(q->data, NULL, reason);
        query_free(q);
    }
}

/* ---------------------------------------------------------------- handles */

static void on_handle_closed(uv_handle_t *handle)
{
    pg_conn_t *pg = handle->data;
    if (handle != (uv_handle_t *)&pg->timer)
        free(handle);
    if (--pg->open_handles == 0 && pg->state == PG_CLOSING) {
        void (*cb)(void *) = pg->on_closed;
        void *data = pg->closed_data;
        free(pg->conninfo);
        if (pg->password)
            explicit_bzero(pg->password, strlen(pg->password));
        free(pg->password);
        free(pg->listen_sql);
        free(pg->setup_sql);
        free(pg);
        if (cb)
            cb(data);
    }
}

static void on_socket_event(uv_poll_t *handle, int status, int events);

static void poll_close(pg_conn_t *pg)
{
    if (pg->poll) {
        uv_poll_stop(pg->poll);
        uv_close((uv_handle_t *)pg->poll, on_handle_closed);
        pg->poll = NULL;
        pg->poll_fd = -1;
        pg->poll_events = 0;
    }
}

/* Watch PQsocket() with the given events, replacing the handle if the fd changed. */
static bool poll_watch(pg_conn_t *pg, int events)
{
    int fd = PQsocket(pg->conn);
    if (fd < 0)
        return false;
    if (pg->poll && pg->poll_fd != fd)
        poll_close(pg);
    if (pg->poll == NULL) {
        pg->poll = xmalloc(sizeof(*pg->poll));
        if (uv_poll_init(pg->loop, pg->poll, fd) != 0) {
            free(pg->poll);
            pg->poll = NULL;
            return false;
        }
        pg->poll->data = pg;
        pg->poll_fd = fd;
        pg->open_handles++;
        pg->poll_events = 0;
    }
    if (pg->poll_events != events) {
        if (uv_poll_start(pg->poll, events, on_socket_event) != 0)
            return false;
        pg->poll_events = events;
    }
    return true;
}

/* ---------------------------------------------------------------- connect */

static void set_reason(pg_conn_t *pg, const char *reason)
{
    snprintf(pg->reason, sizeof(pg->reason), "%s", reason);
    /* libpq messages end in a newline; logs and readiness answers should not. */
    size_t len = strlen(pg->reason);
    while (len > 0 && (pg->reason[len - 1] == '\n' || pg->reason[len - 1] == ' '))
        pg->reason[--len] = '\0';
}

static void on_timer(uv_timer_t *timer);

static void pg_schedule_reconnect(pg_conn_t *pg)
{
    pg->state = PG_IDLE;
    uv_timer_start(&pg->timer, on_timer, (uint64_t)pg->backoff_ms, 0);
    pg->backoff_ms =
        pg->backoff_ms * 2 > pg->reconnect_max_ms ? pg->reconnect_max_ms : pg->backoff_ms * 2;
}

static void pg_connect_start(pg_conn_t *pg)
{
    /* Keepalives, a TCP user timeout (unacknowledged data for longer than a
     * query may take ends the connection in the kernel) and a name in
     * pg_stat_activity first: a value in the connection string (expanded
     * from dbname, which comes after them) overrides them. */
    /* A password set apart (pg_conn_set_password) comes after dbname: it
     * overrides one in the string. */
    const char *keywords[] = {"application_name",
                              "keepalives",
                              "keepalives_idle",
                              "keepalives_interval",
                              "keepalives_count",
                              "tcp_user_timeout",
                              "dbname",
                              "password",
                              NULL};
    char application_name[64], user_timeout[24];
    snprintf(application_name, sizeof(application_name), "outbox-relay/%s", pg_name(pg));
    snprintf(user_timeout, sizeof(user_timeout), "%d", pg->query_timeout_ms);
    const char *values[] = {application_name, "1",          "10",         "5", "3",
                            user_timeout,     pg->conninfo, pg->password, NULL};
    if (pg->password == NULL)
        keywords[7] = NULL;
    pg->conn = PQconnectStartParams(keywords, values, 1);
    if (pg->conn == NULL) {
        set_reason(pg, "out of memory starting a connection");
        pg_schedule_reconnect(pg);
        if (pg->events.on_connect_failed)
            pg->events.on_connect_failed(pg->events.data, pg->reason);
        return;
    }
    if (PQstatus(pg->conn) == CONNECTION_BAD) {
        set_reason(pg, PQerrorMessage(pg->conn));
        unsigned long repeated = 0;
        if (pg_failure_logged(pg, pg->reason, &repeated))
            log_event(LOG_WARN, "db_connect_failed", "connection", json_string(pg_name(pg)),
                      "reason", json_string(pg->reason), "repeated",
                      json_integer((json_int_t)repeated), pg_db_key(pg), pg_db_value(pg), LOG_END);
        PQfinish(pg->conn);
        pg->conn = NULL;
        pg_schedule_reconnect(pg);
        if (pg->events.on_connect_failed)
            pg->events.on_connect_failed(pg->events.data, pg->reason);
        return;
    }
    pg->state = PG_CONNECTING;
    if (!poll_watch(pg, UV_WRITABLE)) {
        pg_connection_lost(pg, "cannot watch the database socket");
        return;
    }
    uv_timer_start(&pg->timer, on_timer, (uint64_t)pg->connect_timeout_ms, 0);
}

static void pg_notice(void *arg, const char *message)
{
    (void)arg;
    char text[512];
    snprintf(text, sizeof(text), "%s", message);
    size_t len = strlen(text);
    if (len && text[len - 1] == '\n')
        text[len - 1] = '\0';
    log_event(LOG_DEBUG, "db_notice", "message", json_string(text), LOG_END);
}

/* Connected: non-blocking mode, then LISTEN and prepares before READY. */
static void pg_connected(pg_conn_t *pg)
{
    uv_timer_stop(&pg->timer);
    PQsetnonblocking(pg->conn, 1);
    PQsetNoticeProcessor(pg->conn, pg_notice, pg);
    pg->state = PG_SETUP;
    pg->backoff_ms = 100;
    /* Setup queries go in front of anything queued, in this order. */
    for (size_t i = pg->statement_count; i-- > 0;) {
        struct pg_query *q = xcalloc(1, sizeof(*q));
        q->kind = QUERY_PREPARE;
        q->statement = pg->statements[i].name;
        q->sql = pg->statements[i].sql;
        queue_push(pg, q, true);
    }
    if (pg->listen_sql) {
        struct pg_query *q = xcalloc(1, sizeof(*q));
        q->kind = QUERY_LISTEN;
        q->sql = pg->listen_sql;
        queue_push(pg, q, true);
    }
    if (pg->setup_sql) {
        struct pg_query *q = xcalloc(1, sizeof(*q));
        q->kind = QUERY_LISTEN; /* a plain statement, like LISTEN */
        q->sql = pg->setup_sql;
        queue_push(pg, q, true);
    }
    if (!poll_watch(pg, UV_READABLE)) {
        pg_connection_lost(pg, "cannot watch the database socket");
        return;
    }
    pg_send_next(pg);
}

static void pg_connect_step(pg_conn_t *pg)
{
    PostgresPollingStatusType st = PQconnectPoll(pg->conn);
    switch (st) {
    case PGRES_POLLING_READING:
        if (!poll_watch(pg, UV_READABLE))
            pg_connection_lost(pg, "cannot watch the database socket");
        break;
    case PGRES_POLLING_WRITING:
        if (!poll_watch(pg, UV_WRITABLE))
            pg_connection_lost(pg, "cannot watch the database socket");
        break;
    case PGRES_POLLING_OK:
        pg_connected(pg);
        break;
    case PGRES_POLLING_FAILED:
    default:
        pg_connection_lost(pg, PQerrorMessage(pg->conn));
        break;
    }
}

static void on_timer(uv_timer_t *timer)
{
    pg_conn_t *pg = timer->data;
    if (pg->state == PG_IDLE)
        pg_connect_start(pg);
    else if (pg->state == PG_CONNECTING)
        pg_connection_lost(pg, "timed out connecting to the database");
    else if ((pg->state == PG_SETUP || pg->state == PG_READY) && pg->head_sent) {
        char reason[96];
        snprintf(reason, sizeof(reason), "no answer from the database within %d ms",
                 pg->query_timeout_ms);
        pg_connection_lost(pg, reason);
    }
}

/* ---------------------------------------------------------------- queries */

static bool pg_send(pg_conn_t *pg, struct pg_query *q)
{
    switch (q->kind) {
    case QUERY_LISTEN:
        return PQsendQuery(pg->conn, q->sql) == 1;
    case QUERY_PREPARE:
        return PQsendPrepare(pg->conn, q->statement, q->sql, 0, NULL) == 1;
    case QUERY_PREPARED:
        return PQsendQueryPrepared(pg->conn, q->statement, q->nparams,
                                   (const char *const *)q->values, NULL, NULL, 0) == 1;
    }
    return false;
}

static void pg_flush(pg_conn_t *pg)
{
    int r = PQflush(pg->conn);
    if (r < 0) {
        pg_connection_lost(pg, PQerrorMessage(pg->conn));
        return;
    }
    if (!poll_watch(pg, r == 1 ? UV_READABLE | UV_WRITABLE : UV_READABLE))
        pg_connection_lost(pg, "cannot watch the database socket");
}

static void pg_send_next(pg_conn_t *pg)
{
    if (pg->head == NULL || pg->head_sent)
        return;
    if (pg->state != PG_SETUP && pg->state != PG_READY)
        return;
    if (!pg_send(pg, pg->head)) {
        pg_connection_lost(pg, PQerrorMessage(pg->conn));
        return;
    }
    pg->head_sent = true;
    if (pg->query_timeout_ms > 0)
        uv_timer_start(&pg->timer, on_timer, (uint64_t)pg->query_timeout_ms, 0);
    pg_flush(pg);
}

/* The query on the wire finished: hand its result over, then send the next. */
static void pg_query_done(pg_conn_t *pg)
{
    struct pg_query *q = queue_pop(pg);
    pg->head_sent = false;
    uv_timer_stop(&pg->timer);
    PGresult *res = pg->pending_result;
    char *error = pg->pending_error;
    pg->pending_result = NULL;
    pg->pending_error = NULL;
    if (q->kind != QUERY_PREPARED && error != NULL) {
        /* LISTEN or a prepare failed: the schema is missing or wrong. Log,
         * and retry the whole connection later rather than run half-set-up. */
        log_event(LOG_ERROR, "db_setup_failed", "connection", json_string(pg_name(pg)), "statement",
                  json_string(q->statement ? q->statement : "listen"), "error", json_string(error),
                  pg_db_key(pg), pg_db_value(pg), LOG_END);
        char reason[300];
        snprintf(reason, sizeof(reason), "setup failed: %s", error);
        free(error);
        PQclear(res);
        query_free(q);
        pg_connection_lost(pg, reason);
        return;
    }
    if (error == NULL)
        pg->error_sqlstate[0] = pg->error_primary[0] = '\0';
    if (q->cb)
        q->cb(q->data, error ? NULL : res, error);
    pg->error_sqlstate[0] = pg->error_primary[0] = '\0';
    PQclear(res);
    free(error);
    query_free(q);
    if (pg->state == PG_SETUP && (pg->head == NULL || pg->head->kind == QUERY_PREPARED)) {
        pg->state = PG_READY;
        *pg->reason = '\0';
        pg->failure_logged[0] = '\0'; /* a failure after this one is new */
        pg->failures_unlogged = 0;
        log_event(LOG_INFO, "db_ready", "connection", json_string(pg_name(pg)), pg_db_key(pg),
                  pg_db_value(pg), LOG_END);
        if (pg->events.on_ready)
            pg->events.on_ready(pg->events.data);
    }
    if (pg->state == PG_SETUP || pg->state == PG_READY)
        pg_send_next(pg);
}

static void pg_drain_notifications(pg_conn_t *pg)
{
    PGnotify *n;
    while (pg->conn && (n = PQnotifies(pg->conn)) != NULL) {
        if (pg->events.on_notify)
            pg->events.on_notify(pg->events.data, n->relname, n->extra ? n->extra : "");
        PQfreemem(n);
    }
}

static void pg_read(pg_conn_t *pg)
{
    if (PQconsumeInput(pg->conn) != 1) {
        pg_connection_lost(pg, PQerrorMessage(pg->conn));
        return;
    }
    while (pg->conn && pg->head_sent && !PQisBusy(pg->conn)) {
        PGresult *res = PQgetResult(pg->conn);
        if (res == NULL) {
            pg_query_done(pg);
            continue;
        }
        ExecStatusType st = PQresultStatus(res);
        if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK && pg->pending_error == NULL) {
            const char *msg = PQresultErrorMessage(res);
            pg->pending_error = xstrdup(*msg ? msg : PQresStatus(st));
            const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
            const char *primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
            snprintf(pg->error_sqlstate, sizeof(pg->error_sqlstate), "%s", state ? state : "");
            snprintf(pg->error_primary, sizeof(pg->error_primary), "%s", primary ? primary : "");
        }
        PQclear(pg->pending_result);
        pg->pending_result = res;
    }
    if (pg->conn && PQstatus(pg->conn) == CONNECTION_BAD) {
        pg_connection_lost(pg, PQerrorMessage(pg->conn));
        return;
    }
    pg_drain_notifications(pg);
}

static void on_socket_event(uv_poll_t *handle, int status, int events)
{
    pg_conn_t *pg = handle->data;
    if (pg->state == PG_CONNECTING) {
        pg_connect_step(pg);
        return;
    }
    if (pg->state != PG_SETUP && pg->state != PG_READY)
        return;
    if (status < 0) {
        pg_connection_lost(pg, uv_strerror(status));
        return;
    }
    if (events & UV_READABLE) {
        pg_read(pg);
        if (pg->state != PG_SETUP && pg->state != PG_READY)
            return;
    }
    if (pg->head_sent && (pg->poll_events & UV_WRITABLE))
        pg_flush(pg);
}

/* ---------------------------------------------------------------- loss */

static void pg_drop_connection(pg_conn_t *pg)
{
    poll_close(pg); /* before PQfinish closes the fd */
    PQclear(pg->pending_result);
    pg->pending_result = NULL;
    free(pg->pending_error);
    pg->pending_error = NULL;
    if (pg->conn) {
        PQfinish(pg->conn);
        pg->conn = NULL;
    }
}

static void pg_connection_lost(pg_conn_t *pg, const char *reason)
{
    bool was_ready = pg->state == PG_READY || pg->state == PG_SETUP;
    set_reason(pg, reason && *reason ? reason : "connection lost");
    unsigned long repeated = 0;
    if (was_ready || pg_failure_logged(pg, pg->reason, &repeated))
        log_event(LOG_WARN, was_ready ? "db_lost" : "db_connect_failed", "connection",
                  json_string(pg_name(pg)), "reason", json_string(pg->reason), "retry_ms",
                  json_integer(pg->backoff_ms), "repeated", json_integer((json_int_t)repeated),
                  pg_db_key(pg), pg_db_value(pg), LOG_END);
    uv_timer_stop(&pg->timer);
    pg_drop_connection(pg);
    pg->state = PG_IDLE;
    pg->reconnects++;
    /* Drop internal setup queries; fail the caller's. */
    queue_fail_all(pg, pg->reason);
    if (was_ready && pg->events.on_lost)
        pg->events.on_lost(pg->events.data, pg->reason);
    else if (!was_ready && pg->events.on_connect_failed)
        pg->events.on_connect_failed(pg->events.data, pg->reason);
    if (pg->state == PG_IDLE)
        pg_schedule_reconnect(pg);
}

/* ---------------------------------------------------------------- public */

pg_conn_t *pg_conn_new(uv_loop_t *loop, const char *conninfo, const struct pg_statement *statements,
                       size_t statement_count, const char *listen_channel, int connect_timeout_ms,
                       int reconnect_max_ms, struct pg_events events)
{
    pg_conn_t *pg = xcalloc(1, sizeof(*pg));
    pg->loop = loop;
    pg->conninfo = xstrdup(conninfo ? conninfo : "");
    pg->statements = statements;
    pg->statement_count = statement_count;
    if (listen_channel) {
        /* "a,b" → LISTEN "a"; LISTEN "b" (one round trip) */
        struct strbuf sql;
        strbuf_init(&sql);
        for (const char *p = listen_channel; *p;) {
            size_t n = strcspn(p, ",");
            strbuf_printf(&sql, "%sLISTEN \"%.*s\"", sql.len ? "; " : "", (int)n, p);
            p += n + (p[n] == ',');
        }
        pg->listen_sql = strbuf_steal(&sql);
        strbuf_free(&sql);
    }
    pg->connect_timeout_ms = connect_timeout_ms;
    pg->reconnect_max_ms = reconnect_max_ms;
    pg->backoff_ms = 100;
    pg->events = events;
    pg_set_setup_sql(pg);
    pg->state = PG_IDLE;
    pg->poll_fd = -1;
    snprintf(pg->reason, sizeof(pg->reason), "not connected yet");
    uv_timer_init(loop, &pg->timer);
    pg->timer.data = pg;
    pg->open_handles = 1;
    return pg;
}

/* Every session is pinned to READ COMMITTED: the statements of this project
 * are written for it (a row locked by another transaction is waited for and
 * then read as committed), and a database whose default_transaction_isolation
 * is REPEATABLE READ or SERIALIZABLE must not turn a lock wait into a
 * serialization failure. */
#define PG_SESSION_SETUP "SET default_transaction_isolation = 'read committed'"

static void pg_set_setup_sql(pg_conn_t *pg)
{
    free(pg->setup_sql);
    size_t len = 160;
    pg->setup_sql = xmalloc(len);
    if (pg->query_timeout_ms > 0) {
        /* The server gives up a second before we do (at least half the time). */
        int t = pg->query_timeout_ms;
        int server_ms = t > 2000 ? t - 1000 : t / 2;
        snprintf(pg->setup_sql, len, "%s; SET statement_timeout = %d", PG_SESSION_SETUP, server_ms);
    } else {
        snprintf(pg->setup_sql, len, "%s", PG_SESSION_SETUP);
    }
}

void pg_conn_set_password(pg_conn_t *pg, const char *password)
{
    free(pg->password);
    pg->password = password ? xstrdup(password) : NULL;
}

void pg_conn_set_query_timeout(pg_conn_t *pg, int timeout_ms)
{
    pg->query_timeout_ms = timeout_ms;
    pg_set_setup_sql(pg);
}

void pg_conn_start(pg_conn_t *pg)
{
    pg_connect_start(pg);
}

bool pg_conn_ready(const pg_conn_t *pg)
{
    return pg->state == PG_READY;
}

int pg_conn_queued(const pg_conn_t *pg)
{
    int n = 0;
    for (const struct pg_query *q = pg->head; q; q = q->next)
        n++;
    return n;
}

const char *pg_conn_status_reason(const pg_conn_t *pg)
{
    return pg->state == PG_READY ? "" : pg->reason;
}

unsigned long pg_conn_reconnects(const pg_conn_t *pg)
{
    return pg->reconnects;
}

bool pg_query(pg_conn_t *pg, const char *statement, int nparams, const char *const *values,
              pg_result_cb cb, void *data)
{
    if (pg->state != PG_READY)
        return false;
    struct pg_query *q = xcalloc(1, sizeof(*q));
    q->kind = QUERY_PREPARED;
    q->statement = statement;
    q->nparams = nparams;
    q->values = xcalloc((size_t)(nparams > 0 ? nparams : 1), sizeof(char *));
    for (int i = 0; i < nparams; i++)
        q->values[i] = values[i] ? xstrdup(values[i]) : NULL;
    q->cb = cb;
    q->data = data;
    queue_push(pg, q, false);
    pg_send_next(pg);
    return true;
}

void pg_conn_close(pg_conn_t *pg, void (*on_closed)(void *data), void *data)
{
    pg->on_closed = on_closed;
    pg->closed_data = data;
    pg->state = PG_CLOSING;
    uv_timer_stop(&pg->timer);
    pg_drop_connection(pg);
    queue_fail_all(pg, "relay shutting down");
    uv_close((uv_handle_t *)&pg->timer, on_handle_closed);
}

/*
 * What readiness may say about a database connection that is down. libpq's
 * messages name the host, the port and the user ('connection to server at
 * "db.internal" (10.0.0.5), port 5432 failed: FATAL: password authentication
 * failed for user "relay"'): they go to the log (db_connect_failed,
 * db_connection_lost), and /readyz, which anyone who reaches the port reads,
 * gets one of these phrases. The first row whose needles all occur wins.
 */
const char *pg_public_reason(const char *detail)
{
    static const struct {
        const char *needle, *also, *reason;
    } rows[] = {
        {"not connected yet", NULL, "not connected yet"},
        {"database system is starting up", NULL, "server starting up"},
        {"database system is shutting down", NULL, "server shutting down"},
        {"database system is in recovery", NULL, "server in recovery"},
        {"not yet accepting connections", NULL, "server starting up"},
        {"not accepting connections", NULL, "server not accepting connections"},
        {"timeout expired", NULL, "timeout"},
        {"timed out", NULL, "timeout"},
        {"no answer from the database", NULL, "timeout"},
        {"connection refused", NULL, "connection refused"},
        {"no such file or directory", NULL, "connection refused"}, /* no Unix socket */
        {"could not translate host name", NULL, "host name not resolved"},
        {"name or service not known", NULL, "host name not resolved"},
        {"temporary failure in name resolution", NULL, "host name not resolved"},
        {"no route to host", NULL, "host unreachable"},
        {"host is unreachable", NULL, "host unreachable"},
        {"network is unreachable", NULL, "host unreachable"},
        {"authentication failed", NULL, "authentication failed"},
        {"no password supplied", NULL, "authentication failed"},
        {"password is required", NULL, "authentication failed"},
        {"no pg_hba.conf entry", NULL, "authentication failed"},
        {"role \"", "does not exist", "authentication failed"},
        {"database \"", "does not exist", "database does not exist"},
        {"permission denied", NULL, "permission denied"},
        {"too many connections", NULL, "too many connections"},
        {"too many clients", NULL, "too many connections"},
        {"connection slots are reserved", NULL, "too many connections"},
        {"ssl", NULL, "TLS error"},
        {"certificate", NULL, "TLS error"},
        {"setup failed", NULL, "session setup failed"},
        {"out of memory", NULL, "out of memory"},
        {"server closed the connection", NULL, "connection lost"},
        {"terminating connection", NULL, "connection lost"},
        {"connection reset", NULL, "connection lost"},
        {"broken pipe", NULL, "connection lost"},
        {"could not receive data", NULL, "connection lost"},
        {"could not send data", NULL, "connection lost"},
        {"connection lost", NULL, "connection lost"},
        {"end of file", NULL, "connection lost"},
    };
    if (detail == NULL || *detail == '\0')
        return "connection failed";
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        if (strcasestr(detail, rows[i].needle) &&
            (rows[i].also == NULL || strcasestr(detail, rows[i].also)))
            return rows[i].reason;
    return "connection failed";
}

const char *pg_error_sqlstate(const pg_conn_t *pg)
{
    return pg->error_sqlstate;
}

const char *pg_error_primary(const pg_conn_t *pg)
{
    return pg->error_primary;
}
