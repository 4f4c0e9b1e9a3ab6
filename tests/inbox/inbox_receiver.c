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
 * Deliberately simple and honest: one process per connection (fork), blocking sockets
 * and blocking libpq in each; no event loop. Concurrent duplicates therefore really
 * reach PostgreSQL concurrently, where the second waits for the first transaction's
 * claim of the key (inbox.begin) and then answers the stored result.
 *
 *   GET /by-key/{key}   the stored answer (200 with its status in the body) or 404:
 *                       a status URL for outbox-relay's reconciliation
 *   GET /healthz        200
 *
 * Errors: no key 400; a key reused with another body 422 (inbox IB001); with --nowait,
 * a key being processed by another transaction 409 + Retry-After (IB002); a body that is
 * not a JSON object 400; no such account 404 (a stored answer: a duplicate gets it
 * too); database trouble 503 (nothing stored; the sender retries).
 *
 * Options: --listen HOST:PORT (default 127.0.0.1:0) · --db CONNINFO (default: libpq's
 * PG* environment) · --key-header NAME (default Idempotency-Key) · --nowait
 * (inbox.try_begin) · --delay-ms N (hold the transaction N ms after the effect, so that
 * duplicates overlap) · --drop-every N (fault: after committing a new effect for a key
 * whose hash is 0 mod N, close the connection without an answer, as if the reply were
 * lost) · --max-children N (default 64) · --log (one line per answered delivery on stderr:
 * "delivery KEY new|duplicate|new-reply-dropped STATUS begin_ms=N", N = how long inbox.begin
 * took: a duplicate that waited for a concurrent claim shows it).
 * After binding it prints "listening HOST:PORT" on stdout. Build:
 *   cc -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror tests/inbox/inbox_receiver.c \
 *      -o build/inbox-receiver $(pkg-config --cflags --libs libpq) -lhttp_parser
 */
#include <arpa/inet.h>
#include <errno.h>
#include <http_parser.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_BODY (1024 * 1024)
#define MAX_KEY 1024
#define MAX_URL 4096

struct options {
    const char *host;
    int port;
    const char *conninfo;
    const char *key_header;
    bool nowait;
    int delay_ms;
    int drop_every;
    int max_children;
    bool log;
};

static struct options opt = {"127.0.0.1", 0, "", "Idempotency-Key", false, 0, 0, 64, false};

/* A growable byte buffer; on allocation failure it stays marked and the request fails. */
struct buf {
    char *data;
    size_t len, cap;
    bool overflow;
};

static void buf_add(struct buf *b, const char *p, size_t n, size_t limit)
{
    if (b->overflow || b->len + n > limit) {
        b->overflow = true;
        return;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (d == NULL) {
            b->overflow = true;
            return;
        }
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void buf_reset(struct buf *b)
{
    b->len = 0;
    b->overflow = false;
    if (b->data)
        b->data[0] = '\0';
}

static const char *buf_str(const struct buf *b)
{
    return b->data ? b->data : "";
}

/* One connection: its parser and the request being read. */
struct conn {
    int fd;
    http_parser parser;
    struct buf url, field, value, key, body;
    bool in_value; /* the last header callback was a value */
    bool key_seen; /* the key header was present */
    bool complete; /* a whole request has been read */
    PGconn *pg;    /* opened at the first delivery */
};

/* ------------------------------------------------------------------ HTTP out */

static bool send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static const char *reason(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 409:
        return "Conflict";
    case 413:
        return "Payload Too Large";
    case 422:
        return "Unprocessable Entity";
    case 500:
        return "Internal Server Error";
    case 503:
        return "Service Unavailable";
    default:
        return "Status";
    }
}

static bool respond(struct conn *c, int status, const char *extra_headers, const char *body)
{
    char head[512];
    size_t len = strlen(body);
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                     "%s%s\r\n",
                     status, reason(status), len, extra_headers ? extra_headers : "",
                     http_should_keep_alive(&c->parser) ? "" : "Connection: close\r\n");
    if (n < 0 || (size_t)n >= sizeof head)
        return false;
    return send_all(c->fd, head, (size_t)n) && send_all(c->fd, body, len);
}

/* {"error": "<message>"} with the message JSON-escaped. */
__attribute__((format(printf, 4, 5))) static bool
respond_error(struct conn *c, int status, const char *extra_headers, const char *fmt, ...)
{
    char msg[600], body[1400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t o = 0;
    o += (size_t)snprintf(body, sizeof body, "{\"error\":\"");
    for (const char *p = msg; *p && o < sizeof body - 8; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch == '"' || ch == '\\') {
            body[o++] = '\\';
            body[o++] = (char)ch;
        } else if (ch < 0x20) {
            o += (size_t)snprintf(body + o, sizeof body - o, "\\u%04x", ch);
        } else {
            body[o++] = (char)ch;
        }
    }
    snprintf(body + o, sizeof body - o, "\"}");
    return respond(c, status, extra_headers, body);
}

/* ------------------------------------------------------------------ database */

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static bool pg_ready(struct conn *c)
{
    if (c->pg && PQstatus(c->pg) == CONNECTION_OK)
        return true;
    if (c->pg)
        PQfinish(c->pg);
    c->pg = PQconnectdb(opt.conninfo);
    if (PQstatus(c->pg) != CONNECTION_OK) {
        fprintf(stderr, "inbox-receiver: cannot connect: %s", PQerrorMessage(c->pg));
        return false;
    }
    return true;
}

/* Run a statement; NULL after an error (the result is cleared, *state holds the SQLSTATE). */
static PGresult *exec(struct conn *c, const char *sql, int n, const char *const *params,
                      char state[6], char *msg, size_t msg_len)
{
    PGresult *res = PQexecParams(c->pg, sql, n, NULL, params, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(res);
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
        return res;
    const char *s = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    const char *m = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    snprintf(state, 6, "%s", s ? s : "08000");
    snprintf(msg, msg_len, "%s", m ? m : PQerrorMessage(c->pg));
    PQclear(res);
    return NULL;
}

static void rollback(struct conn *c)
{
    PQclear(PQexec(c->pg, "ROLLBACK"));
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
static int64_t begin_ms;

static enum outcome deliver_once(struct conn *c, const char *key, const char *body, int *status,
                                 char **response, char state[6], char *msg, size_t msg_len)
{
    const char *params[2] = {key, body};
    PGresult *res = exec(c, "BEGIN", 0, NULL, state, msg, msg_len);
    if (res == NULL)
        return FAILED;
    PQclear(res);

    int64_t started = now_ms();
    res = exec(c,
               opt.nowait ? "SELECT duplicate, status, response FROM inbox.try_begin($1, $2::jsonb)"
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
        rollback(c); /* nothing was written */
        return *response ? DUPLICATE : FAILED;
    }
    PQclear(res);

    /* The effect, and the answer it leads to, in one statement. */
    res = exec(c,
               "WITH req AS (SELECT $2::jsonb AS r),"
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
    res = exec(c, "SELECT inbox.finish($1, $2::int, $3::jsonb)", 3, finish_params, state, msg,
               msg_len);
    if (res == NULL)
        goto failed_free;
    PQclear(res);
    res = exec(c, "COMMIT", 0, NULL, state, msg, msg_len);
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
    if (PQstatus(c->pg) == CONNECTION_OK)
        rollback(c);
    /* serialization failure, deadlock: the whole transaction may simply be run again */
    if (strcmp(state, "40001") == 0 || strcmp(state, "40P01") == 0)
        return RETRY;
    return FAILED;
}

/* A delivery: returns false when the connection must be closed without an answer. */
static bool handle_delivery(struct conn *c)
{
    if (!c->key_seen || c->key.len == 0)
        return respond_error(c, 400, NULL, "no %s header", opt.key_header);
    if (c->key.overflow)
        return respond_error(c, 400, NULL, "the key is longer than %d bytes", MAX_KEY);
    if (!pg_ready(c))
        return respond_error(c, 503, "Retry-After: 1\r\n", "database unavailable");

    char state[6] = "", msg[512] = "";
    int status = 0;
    char *response = NULL;
    enum outcome out = RETRY;
    for (int attempt = 0; attempt < 5 && out == RETRY; attempt++)
        out = deliver_once(c, buf_str(&c->key), c->body.len ? buf_str(&c->body) : "null", &status,
                           &response, state, msg, sizeof msg);
    if (opt.log && (out == DROP || out == ANSWERED || out == DUPLICATE))
        fprintf(stderr, "delivery %s %s %d begin_ms=%lld\n", buf_str(&c->key),
                out == DUPLICATE ? "duplicate"
                : out == DROP    ? "new-reply-dropped"
                                 : "new",
                status, (long long)begin_ms);
    if (out == DROP) {
        free(response);
        return false; /* the effect is committed; the reply is "lost" */
    }
    if (out == ANSWERED || out == DUPLICATE) {
        bool sent = respond(c, status, NULL, response);
        free(response);
        return sent;
    }
    if (strcmp(state, "IB001") == 0)
        return respond_error(c, 422, NULL, "%s", msg);
    if (strcmp(state, "IB002") == 0)
        return respond_error(c, 409, "Retry-After: 1\r\n", "%s", msg);
    if (strcmp(state, "IB004") == 0 || strncmp(state, "22", 2) == 0)
        return respond_error(c, 400, NULL, "%s", msg);
    fprintf(stderr, "inbox-receiver: key %s: %s %s\n", buf_str(&c->key), state, msg);
    if (PQstatus(c->pg) != CONNECTION_OK || strncmp(state, "08", 2) == 0 ||
        strcmp(state, "40001") == 0 || strcmp(state, "40P01") == 0)
        return respond_error(c, 503, "Retry-After: 1\r\n", "database unavailable: %s", msg);
    return respond_error(c, 500, NULL, "%s", msg);
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* GET /by-key/{key}: the stored answer. */
static bool handle_lookup(struct conn *c, const char *encoded)
{
    char key[MAX_KEY + 1];
    size_t n = 0;
    for (const char *p = encoded; *p && *p != '?'; p++) {
        char ch = *p;
        if (ch == '%') {
            int hi = hexval(p[1]), lo = hi < 0 ? -1 : hexval(p[2]);
            if (hi < 0 || lo < 0)
                return respond_error(c, 400, NULL, "bad percent-encoding in the key");
            ch = (char)(hi * 16 + lo);
            p += 2;
        }
        if (n >= MAX_KEY || ch == '\0')
            return respond_error(c, 400, NULL, "bad key");
        key[n++] = ch;
    }
    key[n] = '\0';
    if (!pg_ready(c))
        return respond_error(c, 503, "Retry-After: 1\r\n", "database unavailable");
    char state[6] = "", msg[512] = "";
    const char *params[1] = {key};
    PGresult *res = exec(c,
                         "SELECT jsonb_build_object('key', $1::text, 'status', status, 'response', "
                         "response) FROM inbox.lookup($1)",
                         1, params, state, msg, sizeof msg);
    if (res == NULL)
        return respond_error(c, 503, "Retry-After: 1\r\n", "%s", msg);
    bool ok = PQntuples(res) == 1 ? respond(c, 200, NULL, PQgetvalue(res, 0, 0))
                                  : respond_error(c, 404, NULL, "no answer stored for this key");
    PQclear(res);
    return ok;
}

static bool handle_request(struct conn *c)
{
    const char *url = buf_str(&c->url);
    enum http_method m = (enum http_method)c->parser.method;
    if (c->url.overflow)
        return respond_error(c, 400, NULL, "URL too long");
    if (c->body.overflow)
        return respond_error(c, 413, NULL, "body over %d bytes", MAX_BODY);
    if (strncmp(url, "/healthz", 8) == 0)
        return respond(c, 200, NULL, "{\"ok\":true}");
    if (strncmp(url, "/by-key/", 8) == 0)
        return m == HTTP_GET ? handle_lookup(c, url + 8) : respond_error(c, 405, NULL, "GET only");
    if (m == HTTP_POST || m == HTTP_PUT || m == HTTP_PATCH)
        return handle_delivery(c);
    return respond_error(c, 405, NULL, "deliveries are POST, PUT or PATCH");
}

/* ------------------------------------------------------------------ HTTP in */

static void header_done(struct conn *c)
{
    if (c->field.len > 0 && strcasecmp(buf_str(&c->field), opt.key_header) == 0) {
        c->key_seen = true;
        buf_reset(&c->key);
        buf_add(&c->key, buf_str(&c->value), c->value.len, MAX_KEY);
        if (c->value.overflow)
            c->key.overflow = true;
    }
    buf_reset(&c->field);
    buf_reset(&c->value);
}

static int on_message_begin(http_parser *p)
{
    struct conn *c = p->data;
    buf_reset(&c->url);
    buf_reset(&c->field);
    buf_reset(&c->value);
    buf_reset(&c->key);
    buf_reset(&c->body);
    c->in_value = false;
    c->key_seen = false;
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t n)
{
    struct conn *c = p->data;
    buf_add(&c->url, at, n, MAX_URL);
    return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t n)
{
    struct conn *c = p->data;
    if (c->in_value) {
        header_done(c);
        c->in_value = false;
    }
    buf_add(&c->field, at, n, 256);
    return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t n)
{
    struct conn *c = p->data;
    c->in_value = true;
    buf_add(&c->value, at, n, MAX_KEY + 1);
    return 0;
}

static int on_headers_complete(http_parser *p)
{
    struct conn *c = p->data;
    if (c->in_value)
        header_done(c);
    c->in_value = false;
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t n)
{
    struct conn *c = p->data;
    buf_add(&c->body, at, n, MAX_BODY);
    return 0;
}

static int on_message_complete(http_parser *p)
{
    struct conn *c = p->data;
    c->complete = true;
    http_parser_pause(p, 1); /* handled between two http_parser_execute calls */
    return 0;
}

static const http_parser_settings settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

static void serve(int fd)
{
    struct conn c = {.fd = fd};
    http_parser_init(&c.parser, HTTP_REQUEST);
    c.parser.data = &c;
    struct timeval idle = {30, 0}; /* an idle keep-alive connection ends this process */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &idle, sizeof idle);

    char in[16384];
    bool open = true;
    while (open) {
        ssize_t n = recv(fd, in, sizeof in, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        size_t off = 0;
        while (open && off < (size_t)n) {
            size_t used = http_parser_execute(&c.parser, &settings, in + off, (size_t)n - off);
            off += used;
            enum http_errno err = HTTP_PARSER_ERRNO(&c.parser);
            if (c.complete) {
                c.complete = false;
                open = handle_request(&c) && http_should_keep_alive(&c.parser);
                http_parser_pause(&c.parser, 0);
            } else if (err != HPE_OK) {
                respond_error(&c, 400, NULL, "bad request: %s", http_errno_name(err));
                open = false;
            }
        }
    }
    if (c.pg)
        PQfinish(c.pg);
    free(c.url.data);
    free(c.field.data);
    free(c.value.data);
    free(c.key.data);
    free(c.body.data);
    close(fd);
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

int main(int argc, char **argv)
{
    static char host[256];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--nowait") == 0) {
            opt.nowait = true;
            continue;
        } else if (strcmp(a, "--log") == 0) {
            opt.log = true;
            continue;
        }
        if (v == NULL) {
            usage(stderr);
            return 2;
        }
        i++;
        if (strcmp(a, "--listen") == 0) {
            const char *colon = strrchr(v, ':');
            if (colon == NULL || (size_t)(colon - v) >= sizeof host) {
                fprintf(stderr, "inbox-receiver: --listen: expected HOST:PORT\n");
                return 2;
            }
            memcpy(host, v, (size_t)(colon - v));
            host[colon - v] = '\0';
            opt.host = host;
            opt.port = parse_int("--listen", colon + 1, 0, 65535);
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
            return 2;
        }
    }

    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)opt.port)};
    if (inet_pton(AF_INET, strcmp(opt.host, "localhost") == 0 ? "127.0.0.1" : opt.host,
                  &addr.sin_addr) != 1) {
        fprintf(stderr, "inbox-receiver: --listen: %s is not an IPv4 address\n", opt.host);
        return 2;
    }
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(lfd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(lfd, 512) != 0) {
        perror("inbox-receiver: listen");
        return 1;
    }
    socklen_t alen = sizeof addr;
    getsockname(lfd, (struct sockaddr *)&addr, &alen);
    char shown[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &addr.sin_addr, shown, sizeof shown);
    printf("listening %s:%d\n", shown, ntohs(addr.sin_port));
    fflush(stdout);

    signal(SIGPIPE, SIG_IGN);
    pid_t parent = getpid();
    int children = 0;
    for (;;) {
        while (children > 0 && waitpid(-1, NULL, WNOHANG) > 0)
            children--;
        while (children >= opt.max_children && waitpid(-1, NULL, 0) > 0)
            children--;
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE)
                continue;
            perror("inbox-receiver: accept");
            return 1;
        }
        pid_t pid = fork();
        if (pid == 0) {
            close(lfd);
            prctl(PR_SET_PDEATHSIG, SIGTERM); /* the parent's end ends every connection */
            if (getppid() != parent)
                _exit(0);
            serve(fd);
            _exit(0);
        }
        if (pid > 0)
            children++;
        else
            perror("inbox-receiver: fork");
        close(fd);
    }
}
