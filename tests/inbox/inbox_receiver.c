/*
 * inbox_receiver.c — an example RECEIVING service that dedupes by idempotency key with
 * schema/inbox.sql (docs/design.md, principle 4: exactly-once effect = at-least-once delivery
 * + keys + dedupe at the receiver).
 *
 * For each delivery (POST, PUT or PATCH to any path but /by-key/... and /healthz), with
 * the key from the Idempotency-Key header and a JSON body {"account": 1, "amount": 5},
 * in ONE database transaction:
 *
 *     SELECT duplicate, status, response FROM inbox.begin(key, body)
 *       duplicate: answer the stored status and JSON, nothing else happens
 *     UPDATE accounts SET balance = balance - amount WHERE id = account   -- the effect
 *     INSERT INTO effects (key, account, amount)                          -- countable
 *     SELECT inbox.finish(key, status, response)                          -- the answer
 *     COMMIT, then answer it
 *
 * so a duplicate, sequential or concurrent, gets the first answer and causes no second
 * effect. The tables it needs besides schema/inbox.sql: tests/inbox/example_schema.sql.
 *
 * Shape: HTTP is the relay's own server (relay/lib/http_server.c) on a libuv loop; each transaction
 * runs in libuv's thread pool (uv_queue_work), one thread per transaction in flight, each
 * thread with its own blocking libpq connection. Blocking libpq keeps the database code
 * plain and honest, and no socket waits on it: concurrent duplicates really reach
 * PostgreSQL concurrently, where the second waits for the first transaction's claim of
 * the key (inbox.begin) and then answers the stored result.
 *
 *   GET /by-key/{key}   the stored answer (200 with its status in the body) or 404:
 *                       a status URL for outbox-relay's reconciliation
 *   GET /healthz        200
 *
 * Errors: no key 400; a key reused with another body 422 (inbox IB001); with --nowait,
 * a key being processed by another transaction 409 + Retry-After (IB002); a body that is
 * not a JSON object 400; no such account 404 (a stored answer: a duplicate gets it
 * too); database trouble 503 (nothing stored; the sender retries); a request target over
 * 4 KiB 414, a body over 1 MiB 413.
 *
 * Options: --listen HOST:PORT (default 127.0.0.1:0) · --db CONNINFO (default: libpq's
 * PG* environment) · --key-header NAME (default Idempotency-Key) · --nowait
 * (inbox.try_begin) · --delay-ms N (hold the transaction N ms after the effect, so that
 * duplicates overlap) · --drop-every N (fault: after committing a new effect for a key
 * whose hash is 0 mod N, close the connection without an answer, as if the reply were
 * lost) · --max-children N (default 64: transactions at once, the thread pool's size, at
 * most 1024) · --log (one line per answered delivery on stderr:
 * "delivery KEY new|duplicate|new-reply-dropped STATUS begin_ms=N", N = how long inbox.begin
 * took: a duplicate that waited for a concurrent claim shows it).
 * After binding it prints "listening HOST:PORT" on stdout; a connection idle for 30 s is
 * closed. Build: make build/inbox-receiver.
 */
#include "lib/http_server.h"

#include <errno.h>
#include <http_parser.h>
#include <libpq-fe.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <uv.h>

#define MAX_BODY (1024 * 1024)
#define MAX_KEY 1024
#define MAX_URL 4096
#define MAX_THREADS 1024 /* libuv's cap on its thread pool */
#define IDLE_TIMEOUT_MS 30000

struct options {
    const char *listen;
    const char *conninfo;
    const char *key_header;
    bool nowait;
    int delay_ms;
    int drop_every;
    int max_children;
    bool log;
};

static struct options opt = {"127.0.0.1:0", "", "Idempotency-Key", false, 0, 0, 64, false};

/* ------------------------------------------------------------------ database */

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* This worker thread's connection, opened (again) when needed. */
static _Thread_local PGconn *thread_pg;

static bool pg_ready(void)
{
    if (thread_pg && PQstatus(thread_pg) == CONNECTION_OK)
        return true;
    if (thread_pg)
        PQfinish(thread_pg);
    thread_pg = PQconnectdb(opt.conninfo);
    if (PQstatus(thread_pg) != CONNECTION_OK) {
        fprintf(stderr, "inbox-receiver: cannot connect: %s", PQerrorMessage(thread_pg));
        return false;
    }
    return true;
}

/* Run a statement; NULL after an error (the result is cleared, *state holds the SQLSTATE). */
static PGresult *exec(const char *sql, int n, const char *const *params, char state[6], char *msg,
                      size_t msg_len)
{
    PGresult *res = PQexecParams(thread_pg, sql, n, NULL, params, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(res);
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
        return res;
    const char *s = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    const char *m = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    snprintf(state, 6, "%s", s ? s : "08000");
    snprintf(msg, msg_len, "%s", m ? m : PQerrorMessage(thread_pg));
    PQclear(res);
    return NULL;
}

static void rollback(void)
{
    PQclear(PQexec(thread_pg, "ROLLBACK"));
}

static bool key_dropped(const char *key)
{
    if (opt.drop_every <= 0)
        return false;
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)key; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h % (uint32_t)opt.drop_every == 0;
}

enum outcome { ANSWERED, DUPLICATE, RETRY, FAILED, DROP };

/* One attempt at the whole transaction. Fills status/response (malloc'd) when ANSWERED. */
static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* How long the last inbox.begin took: a duplicate that waited for a concurrent claim. */
static _Thread_local int64_t begin_ms;

static enum outcome deliver_once(const char *key, const char *body, int *status, char **response,
                                 char state[6], char *msg, size_t msg_len)
{
    const char *params[2] = {key, body};
    PGresult *res = exec("BEGIN", 0, NULL, state, msg, msg_len);
    if (res == NULL)
        return FAILED;
    PQclear(res);

    int64_t started = now_ms();
    res = exec(opt.nowait ? "SELECT duplicate, status, response FROM inbox.try_begin($1, $2::jsonb)"
                          : "SELECT duplicate, status, response FROM inbox.begin($1, $2::jsonb)",
               2, params, state, msg, msg_len);
    begin_ms = now_ms() - started;
    if (res == NULL)
        goto failed;
    bool duplicate = PQgetvalue(res, 0, 0)[0] == 't';
    if (duplicate) {
        *status = (int)strtol(PQgetvalue(res, 0, 1), NULL, 10);
        *response = strdup(PQgetvalue(res, 0, 2));
        PQclear(res);
        rollback(); /* nothing was written */
        return *response ? DUPLICATE : FAILED;
    }
    PQclear(res);

    /* The effect, and the answer it leads to, in one statement. */
    res = exec("WITH req AS (SELECT $2::jsonb AS r),"
               " acct AS (UPDATE accounts a SET balance = a.balance - (req.r->>'amount')::numeric"
               "           FROM req WHERE a.id = (req.r->>'account')::int"
               "            AND jsonb_typeof(req.r->'amount') = 'number'"
               "          RETURNING a.id, a.balance, (req.r->>'amount')::numeric AS amount),"
               " eff AS (INSERT INTO effects (key, account, amount)"
               "         SELECT $1, acct.id, acct.amount FROM acct RETURNING id)"
               " SELECT CASE WHEN acct.id IS NULL THEN 404 ELSE 200 END,"
               "        CASE WHEN acct.id IS NULL"
               "             THEN jsonb_build_object('error', 'no such account, or no amount')"
               "             ELSE jsonb_build_object('key', $1::text, 'account', acct.id,"
               "                                     'balance', acct.balance, 'effect', eff.id) END"
               "   FROM (SELECT 1) one LEFT JOIN acct ON true LEFT JOIN eff ON true",
               2, params, state, msg, msg_len);
    if (res == NULL)
        goto failed;
    *status = (int)strtol(PQgetvalue(res, 0, 0), NULL, 10);
    *response = strdup(PQgetvalue(res, 0, 1));
    PQclear(res);
    if (*response == NULL)
        goto failed_quiet;

    if (opt.delay_ms > 0)
        sleep_ms(opt.delay_ms);

    char status_text[16];
    snprintf(status_text, sizeof status_text, "%d", *status);
    const char *finish_params[3] = {key, status_text, *response};
    res =
        exec("SELECT inbox.finish($1, $2::int, $3::jsonb)", 3, finish_params, state, msg, msg_len);
    if (res == NULL)
        goto failed_free;
    PQclear(res);
    res = exec("COMMIT", 0, NULL, state, msg, msg_len);
    if (res == NULL)
        goto failed_free;
    PQclear(res);
    return key_dropped(key) ? DROP : ANSWERED;

failed_free:
    free(*response);
    *response = NULL;
    goto failed;
failed_quiet:
    snprintf(state, 6, "53200");
    snprintf(msg, msg_len, "out of memory");
failed:
    if (PQstatus(thread_pg) == CONNECTION_OK)
        rollback();
    /* serialization failure, deadlock: the whole transaction may simply be run again */
    if (strcmp(state, "40001") == 0 || strcmp(state, "40P01") == 0)
        return RETRY;
    return FAILED;
}

/* ------------------------------------------------------------------ work in the thread pool */

/* What a transaction decided, for the loop thread to answer. */
struct reply {
    int status;
    char *json;         /* the body; NULL: {"error": message} */
    char message[600];  /* of an error answer */
    bool retry_after;   /* "Retry-After: 1" */
    bool drop;          /* close without an answer (the effect is committed) */
    const char *logged; /* "new", "duplicate", "new-reply-dropped", or NULL: not logged */
    int64_t begin_ms;
};

/* One delivery or lookup in flight; conn is NULL once its connection closed. */
struct job {
    uv_work_t work;
    httpd_conn_t *conn;
    bool lookup; /* GET /by-key/{key}, else a delivery */
    char *key;
    char *body;
    struct reply reply;
};

/* What the receiver keeps per connection (httpd_conn_data). */
struct inbox_conn {
    struct job *job; /* in flight, or NULL */
};

__attribute__((format(printf, 3, 4))) static void reply_error(struct reply *r, int status,
                                                              const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->message, sizeof r->message, fmt, ap);
    va_end(ap);
    r->status = status;
    r->json = NULL;
}

/* A failed transaction: the status its SQLSTATE calls for. */
static void reply_failure(struct reply *r, const char *key, const char *state, const char *msg)
{
    if (strcmp(state, "IB001") == 0) {
        reply_error(r, 422, "%s", msg);
    } else if (strcmp(state, "IB002") == 0) {
        reply_error(r, 409, "%s", msg);
        r->retry_after = true;
    } else if (strcmp(state, "IB004") == 0 || strncmp(state, "22", 2) == 0) {
        reply_error(r, 400, "%s", msg);
    } else {
        fprintf(stderr, "inbox-receiver: key %s: %s %s\n", key, state, msg);
        bool down = PQstatus(thread_pg) != CONNECTION_OK || strncmp(state, "08", 2) == 0 ||
                    strcmp(state, "40001") == 0 || strcmp(state, "40P01") == 0;
        reply_error(r, down ? 503 : 500, "%s%s", down ? "database unavailable: " : "", msg);
        r->retry_after = down;
    }
}

/* This thread's connection is up; else the reply says the database is not. */
static bool worker_db_ready(struct reply *r)
{
    if (pg_ready())
        return true;
    reply_error(r, 503, "database unavailable");
    r->retry_after = true;
    return false;
}

/* A delivery, in a worker thread: the transaction, retried on serialization failures. */
static void run_delivery(struct job *job)
{
    struct reply *r = &job->reply;
    if (!worker_db_ready(r))
        return;
    char state[6] = "", msg[512] = "";
    enum outcome out = RETRY;
    for (int attempt = 0; attempt < 5 && out == RETRY; attempt++)
        out = deliver_once(job->key, job->body, &r->status, &r->json, state, msg, sizeof msg);
    r->begin_ms = begin_ms;
    if (out == DROP || out == ANSWERED || out == DUPLICATE) {
        r->logged = out == DUPLICATE ? "duplicate" : out == DROP ? "new-reply-dropped" : "new";
        r->drop = out == DROP; /* the effect is committed; the reply is "lost" */
        return;
    }
    reply_failure(r, job->key, state, msg);
}

/* GET /by-key/{key}, in a worker thread: the stored answer. */
static void run_lookup(struct job *job)
{
    struct reply *r = &job->reply;
    if (!worker_db_ready(r))
        return;
    char state[6] = "", msg[512] = "";
    const char *params[1] = {job->key};
    PGresult *res = exec("SELECT jsonb_build_object('key', $1::text, 'status', status, 'response', "
                         "response) FROM inbox.lookup($1)",
                         1, params, state, msg, sizeof msg);
    if (res == NULL) {
        reply_error(r, 503, "%s", msg);
        r->retry_after = true;
        return;
    }
    if (PQntuples(res) == 1) {
        r->status = 200;
        r->json = strdup(PQgetvalue(res, 0, 0));
    } else {
        reply_error(r, 404, "no answer stored for this key");
    }
    PQclear(res);
}

static void on_work(uv_work_t *work)
{
    struct job *job = work->data;
    if (job->lookup)
        run_lookup(job);
    else
        run_delivery(job);
}

static void job_free(struct job *job)
{
    free(job->key);
    free(job->body);
    free(job->reply.json);
    free(job);
}

/* Back on the loop: answer, unless the connection went away meanwhile. */
static void on_work_done(uv_work_t *work, int status)
{
    struct job *job = work->data;
    httpd_conn_t *conn = job->conn;
    struct reply *r = &job->reply;
    if (opt.log && r->logged)
        fprintf(stderr, "delivery %s %s %d begin_ms=%lld\n", job->key, r->logged, r->status,
                (long long)r->begin_ms);
    if (conn != NULL) {
        ((struct inbox_conn *)httpd_conn_data(conn))->job = NULL;
        const char *headers = r->retry_after ? "Retry-After: 1\r\n" : NULL;
        if (r->drop)
            httpd_conn_close(conn);
        else if (r->json)
            httpd_respond_json(conn, r->status, headers, r->json);
        else
            httpd_respond_error(conn, r->status, headers, r->message);
    }
    job_free(job);
}

static void start_job(httpd_conn_t *conn, bool lookup, const char *key, const char *body)
{
    struct job *job = calloc(1, sizeof(*job));
    if (job == NULL || (job->key = strdup(key)) == NULL || (job->body = strdup(body)) == NULL) {
        if (job)
            job_free(job);
        httpd_respond_error(conn, 503, "Retry-After: 1\r\n", "out of memory");
        return;
    }
    job->conn = conn;
    job->lookup = lookup;
    job->work.data = job;
    ((struct inbox_conn *)httpd_conn_data(conn))->job = job;
    uv_queue_work(uv_default_loop(), &job->work, on_work, on_work_done);
}

/* ------------------------------------------------------------------ HTTP */

/* GET /by-key/{key}: the key percent-decoded, then looked up. */
static void handle_lookup(httpd_conn_t *conn, const char *encoded)
{
    char key[MAX_KEY + 1];
    long len = httpd_percent_decode(encoded, strcspn(encoded, "?"), key, sizeof key);
    if (len == -1)
        httpd_respond_error(conn, 400, NULL, "bad percent-encoding in the key");
    else if (len < 0 || memchr(key, '\0', (size_t)len) != NULL)
        httpd_respond_error(conn, 400, NULL, "bad key");
    else
        start_job(conn, true, key, "");
}

static void handle_delivery(httpd_conn_t *conn, const struct httpd_request *request)
{
    const struct httpd_header *key = httpd_request_header(request, opt.key_header);
    char message[128];
    if (key == NULL || key->value_len == 0) {
        snprintf(message, sizeof message, "no %s header", opt.key_header);
        httpd_respond_error(conn, 400, NULL, message);
        return;
    }
    if (key->value_len > MAX_KEY) {
        snprintf(message, sizeof message, "the key is longer than %d bytes", MAX_KEY);
        httpd_respond_error(conn, 400, NULL, message);
        return;
    }
    char text[MAX_KEY + 1];
    snprintf(text, sizeof text, "%.*s", (int)key->value_len, key->value);
    start_job(conn, false, text, request->body_len ? request->body : "null");
}

static void on_request(void *data, httpd_conn_t *conn, const struct httpd_request *request)
{
    int m = request->method;
    if (strncmp(request->url, "/healthz", 8) == 0)
        httpd_respond_json(conn, 200, NULL, "{\"ok\":true}");
    else if (strncmp(request->url, "/by-key/", 8) == 0 && m == HTTP_GET)
        handle_lookup(conn, request->url + 8);
    else if (strncmp(request->url, "/by-key/", 8) == 0)
        httpd_respond_error(conn, 405, NULL, "GET only");
    else if (m == HTTP_POST || m == HTTP_PUT || m == HTTP_PATCH)
        handle_delivery(conn, request);
    else
        httpd_respond_error(conn, 405, NULL, "deliveries are POST, PUT or PATCH");
}

/* The connection is gone: a transaction in flight still runs, and is not answered. */
static void on_close(void *data, httpd_conn_t *conn)
{
    struct inbox_conn *state = httpd_conn_data(conn);
    if (state->job)
        state->job->conn = NULL;
}

/* ------------------------------------------------------------------ main */

static int parse_int(const char *name, const char *s, int lo, int hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *s == '\0' || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "inbox-receiver: %s: expected an integer in %d..%d, got '%s'\n", name, lo,
                hi, s);
        exit(2);
    }
    return (int)v;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: inbox-receiver [--listen HOST:PORT] [--db CONNINFO] [--key-header NAME]\n"
                 "                      [--nowait] [--delay-ms N] [--drop-every N] "
                 "[--max-children N] [--log]\n");
}

/* Options into opt; exits 0 for --help, 2 for a bad option. */
static void parse_options(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(a, "--nowait") == 0) {
            opt.nowait = true;
            continue;
        } else if (strcmp(a, "--log") == 0) {
            opt.log = true;
            continue;
        }
        if (v == NULL) {
            usage(stderr);
            exit(2);
        }
        i++;
        if (strcmp(a, "--listen") == 0) {
            opt.listen = v;
        } else if (strcmp(a, "--db") == 0) {
            opt.conninfo = v;
        } else if (strcmp(a, "--key-header") == 0) {
            opt.key_header = v;
        } else if (strcmp(a, "--delay-ms") == 0) {
            opt.delay_ms = parse_int(a, v, 0, 60000);
        } else if (strcmp(a, "--drop-every") == 0) {
            opt.drop_every = parse_int(a, v, 0, 1000000);
        } else if (strcmp(a, "--max-children") == 0) {
            opt.max_children = parse_int(a, v, 1, 10000);
        } else {
            fprintf(stderr, "inbox-receiver: unknown option %s\n", a);
            usage(stderr);
            exit(2);
        }
    }
}

int main(int argc, char **argv)
{
    parse_options(argc, argv);
    struct sockaddr_storage addr;
    const char *problem = httpd_parse_listen(opt.listen, &addr);
    if (problem) {
        fprintf(stderr, "inbox-receiver: --listen: %s\n", problem);
        return 2;
    }
    /* The thread pool is sized before its first use: one thread per transaction. */
    char threads[16];
    snprintf(threads, sizeof threads, "%d",
             opt.max_children < MAX_THREADS ? opt.max_children : MAX_THREADS);
    setenv("UV_THREADPOOL_SIZE", threads, 1);
    signal(SIGPIPE, SIG_IGN);

    struct httpd_config config = {
        .limits = {.max_url_bytes = MAX_URL,
                   .max_header_bytes = 8192,
                   .max_body_bytes = MAX_BODY,
                   .max_pipelined_bytes = MAX_BODY,
                   .read_chunk_bytes = 16384},
        .timeouts = {.idle_ms = IDLE_TIMEOUT_MS, .drain_ms = 1000},
        .conn_data_size = sizeof(struct inbox_conn),
        .backlog = 512,
    };
    struct httpd_hooks hooks = {.on_request = on_request, .on_close = on_close};
    int rc = 0;
    httpd_t *server =
        httpd_start(uv_default_loop(), (const struct sockaddr *)&addr, &config, &hooks, &rc);
    if (server == NULL) {
        fprintf(stderr, "inbox-receiver: listen: %s\n", uv_strerror(rc));
        return 1;
    }
    char shown[64];
    httpd_format_address(httpd_address(server), shown, sizeof shown);
    printf("listening %s\n", shown);
    fflush(stdout);
    return uv_run(uv_default_loop(), UV_RUN_DEFAULT); /* until killed */
}
