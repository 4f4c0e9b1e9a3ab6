/*
 * admin.c — the admin HTTP port on the relay's loop (endpoints in admin.h).
 *
 * DESIGN
 * Off the hot path, and never able to hurt it: the port shares the loop with
 * deliveries and the database, so everything here is bounded and nothing
 * blocks. Requests are parsed by libhttp-parser (no hand-rolled HTTP); we keep
 * only what routing needs: the method, the request target (bounded by
 * max_request_bytes), whether the connection stays open, and the value of an
 * Authorization header (bounded). Other headers and bodies are counted, not
 * stored.
 *
 * One request per connection at a time. The parser pauses in
 * on_message_complete; pipelined bytes wait in the input buffer (reading
 * stops once they exceed max_request_bytes) until the answer to the previous
 * request has been written. Responses therefore go out in order with no
 * queue, and a connection has at most one write in flight.
 *
 * Every connection is in one phase, and every phase has a deadline on the
 * connection's one timer, so no client can hold a slot for long:
 *
 *   accept ─► IDLE ──first byte──► READING ──complete──► LOOKUP ──done()──► WRITING
 *             └──── 5 s from accept, or from ────┘        │  10 s, then 503      10 s
 *              ▲    the previous answer, for the           └── other endpoints ───►│
 *              │    whole request                                                  │
 *              └──────────────────── keep-alive ◄──────────────────────────────────┤
 *                                                  close ──► DRAINING (1 s) ──► closed
 *
 * A deadline closes the connection, except LOOKUP's, which answers 503 (or,
 * for a long-poll at the end of its wait, looks up once more and answers
 * that). The first byte of a request does not restart the clock: a
 * connection without a complete request is closed 5 s after it was accepted
 * or last answered, however slowly its bytes trickle in.
 *
 * Closing after an error answer (400, 413, 503) is a lingering close: shut
 * down our write side, then read and discard until EOF or the drain deadline,
 * so that request bytes still arriving do not turn our FIN into a RST that
 * destroys the answer before the client has read it.
 *
 * CONNECTION LIMITS: PROBES ARE ALWAYS ANSWERED
 * The kubelet restarts a pod whose /healthz fails, and a restart makes every
 * delivery in flight ambiguous; so no number of idle connections or
 * long-polls may keep /healthz and /readyz from being answered. Connections
 * are in one of two lanes, chosen at accept:
 *
 *   main   max_connections connections; any request. Of them at most
 *          max_waits may be held by ?wait= at once: one more gets 429 with
 *          Retry-After: 1 (the connection stays usable).
 *   probe  when the main lane is full, probe_reserve more. Only /healthz and
 *          /readyz are served there, once (then the connection closes, and
 *          its slot is free again); any other request moves to the main lane
 *          if a slot has come free by then, else gets 503 and is closed. When
 *          the probe lane is full too, the oldest probe-lane connection still
 *          without a complete request is closed to make room, and only when
 *          every one of them is being answered is the new connection closed.
 *
 * A probe therefore fails only if probe_reserve newer connections arrive
 * between its accept and its request, a window of one round trip for the
 * kubelet; idle and slow clients are closed within 5 s anyway. Someone who
 * can open connections to the port at will can still disturb it: the
 * NetworkPolicy (deploy/kubernetes/base/networkpolicy.yaml) keeps them out.
 *
 * LONG-POLLS
 * A held request (?wait=) is "parked" between lookups. Once a second, and at
 * once after admin_outcomes_changed(), every distinct key that has parked
 * requests is looked up again, once for all its waiters (struct
 * admin_recheck): so a wait sees outcomes recorded by other relays and by
 * operators (outbox.cancel, approve, resolve) within about a second, at a
 * cost of one query per key per second. A re-check that fails leaves the
 * waiters parked. When the wait ends, a last lookup decides the answer: it is
 * never older than the deadline.
 *
 * Lookups outlive connections: lookup_intent gets a small request object
 * that points at its connection (or, for a re-check, at the server). When
 * that goes first (client gone, lookup deadline, admin_close), the pointer
 * is cleared and the object is orphaned; done() then only frees it. So
 * done() is always safe, and the server never waits for the database to
 * close.
 *
 * BEARER TOKEN
 * With a token file, /metrics and /v1/ need "Authorization: Bearer <token>".
 * Only the token's SHA-256 is kept; a presented token is hashed and the two
 * digests are compared with CRYPTO_memcmp, so neither the time taken nor
 * anything logged depends on the token.
 *
 * Invariants: every uv handle is closed through uv_close and its memory
 * freed in the close callback; a connection is freed when both its handles
 * are closed, and the server when its listener, its re-check timer and every
 * connection are.
 */
#include "admin.h"

#include "log.h"
#include "metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <http_parser.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ADMIN_BACKLOG 64
#define ADMIN_READ_CHUNK 4096
#define ADMIN_INTENTS_PREFIX "/v1/intents/"
#define ADMIN_TOKEN_MAX_BYTES 4096
/* Longest Authorization value kept: the scheme, spaces and a token. */
#define ADMIN_AUTH_MAX_BYTES (ADMIN_TOKEN_MAX_BYTES + 64)
/* Deadlines of the phases (see the diagram above); -D overrides are for tests. */
#ifndef ADMIN_IDLE_TIMEOUT_MS
#define ADMIN_IDLE_TIMEOUT_MS 5000 /* accept or last answer → complete request */
#endif
#ifndef ADMIN_LOOKUP_TIMEOUT_MS
#define ADMIN_LOOKUP_TIMEOUT_MS 10000
#endif
#ifndef ADMIN_WAIT_MAX_MS
#define ADMIN_WAIT_MAX_MS 60000 /* longest ?wait= */
#endif
#ifndef ADMIN_RECHECK_MS
#define ADMIN_RECHECK_MS 1000 /* parked long-polls look again this often */
#endif
#ifndef ADMIN_WRITE_TIMEOUT_MS
#define ADMIN_WRITE_TIMEOUT_MS 10000
#endif
#ifndef ADMIN_DRAIN_TIMEOUT_MS
#define ADMIN_DRAIN_TIMEOUT_MS 1000
#endif
/* At most one "connections refused" warning per this many ms. */
#define ADMIN_REFUSED_LOG_EVERY_MS 60000

#define CONTENT_TYPE_JSON "application/json"
#define CONTENT_TYPE_METRICS "text/plain; version=0.0.4; charset=utf-8"

enum conn_phase {
    PHASE_IDLE,     /* waiting for the first byte of a request */
    PHASE_READING,  /* a request has begun */
    PHASE_LOOKUP,   /* waiting for lookup_intent's done(), or parked in a long-poll */
    PHASE_WRITING,  /* the answer is being written */
    PHASE_DRAINING, /* write side shut down; discarding input until EOF */
};

enum conn_lane {
    LANE_MAIN,  /* any request */
    LANE_PROBE, /* beyond max_connections: /healthz and /readyz only */
};

enum refusal {
    REFUSED_CONNECTIONS, /* no slot: 503, or closed without an answer */
    REFUSED_WAITS,       /* too many long-polls: 429 */
    REFUSED_EVICTED,     /* a probe-lane connection closed to make room */
    REFUSAL_KINDS,
};

static const char *const refusal_names[REFUSAL_KINDS] = {"connections", "waits", "evicted"};

struct admin_lookup;

struct admin_conn {
    uv_tcp_t tcp;
    uv_timer_t timer; /* the deadline of the current phase */
    uv_shutdown_t shutdown_req;
    admin_server_t *server;
    struct admin_conn *prev, *next; /* newest first */
    int open_handles;
    enum conn_phase phase;
    enum conn_lane lane;
    bool closing;
    bool reading;
    bool peer_eof; /* the client half-closed while we were busy */

    http_parser parser;
    char *input; /* bytes read, parsed up to input_offset */
    size_t input_len, input_cap, input_offset;
    size_t message_bytes; /* wire bytes of the request being parsed */
    struct strbuf url;
    bool keep_alive;
    bool head_request; /* the request line said HEAD (see on_url) */
    int reject_status; /* set by a parser callback that stopped parsing */

    /* The Authorization header of the request being parsed. */
    char header_name[16]; /* of the header being parsed, up to "authorization" */
    size_t header_name_len;
    bool header_in_value; /* the last header callback was a value */
    bool header_is_auth;  /* the current header is Authorization */
    int auth_headers;     /* how many the request has */
    bool auth_too_long;
    struct strbuf auth;

    struct admin_lookup *lookup; /* outstanding, or NULL */

    /* Long-poll (?wait=): the key and when the wait ends (0: not waiting;
     * counted in server->waiting while not 0). */
    char wait_key[ADMIN_KEY_MAX_BYTES + 1];
    uint64_t wait_until_ms;
    bool parked; /* between lookups; counted in server->parked */
};

/* What lookup_intent holds for one connection; conn is NULL once it is gone. */
struct admin_lookup {
    struct admin_conn *conn;
};

/* One re-check of a key for every request parked on it; server is NULL once
 * the server is closed. */
struct admin_recheck {
    admin_server_t *server;
    struct admin_recheck *prev, *next;
    bool again; /* outcomes changed while it was running: look once more */
    char key[ADMIN_KEY_MAX_BYTES + 1];
};

struct admin_write {
    uv_write_t req;
    struct admin_conn *conn;
    bool close_after;
    size_t len;
    char data[];
};

struct admin_server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    uv_timer_t recheck_timer;
    struct admin_hooks hooks;
    struct admin_limits limits;
    int port;
    struct admin_conn *conns;       /* every connection not yet closing, newest first */
    int lane_conns[2];              /* of them, in each lane */
    int waiting;                    /* connections held by ?wait= */
    int parked;                     /* of them, between lookups */
    struct admin_recheck *rechecks; /* running */
    int open_conns;                 /* connection objects not yet freed */
    bool listener_open;
    bool timer_open;
    bool closing;
    bool token_required;
    unsigned char token_digest[32]; /* SHA-256 of the token */
    uint64_t refused_total[REFUSAL_KINDS];
    uint64_t refused_logged_ms;
    bool refused_logged;
    void (*on_closed)(void *data);
    void *closed_data;
};

static void conn_close(struct admin_conn *conn);
static void conn_drive(struct admin_conn *conn);
static void conn_start_reading(struct admin_conn *conn);
static void on_conn_timer(uv_timer_t *timer);
static void on_recheck_timer(uv_timer_t *timer);

/* ---------------------------------------------------------------- small helpers */

static bool bytes_equal(const char *s, size_t n, const char *literal)
{
    return strlen(literal) == n && memcmp(s, literal, n) == 0;
}

static bool bytes_start_with(const char *s, size_t n, const char *prefix)
{
    size_t len = strlen(prefix);
    return n >= len && memcmp(s, prefix, len) == 0;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when invalid. */
static size_t utf8_length(const unsigned char *s, size_t n)
{
    if (s[0] < 0x80)
        return 1;
    size_t len;
    unsigned cp;
    if (s[0] >= 0xC2 && s[0] <= 0xDF) {
        len = 2;
        cp = s[0] & 0x1Fu;
    } else if ((s[0] & 0xF0) == 0xE0) {
        len = 3;
        cp = s[0] & 0x0Fu;
    } else if (s[0] >= 0xF0 && s[0] <= 0xF4) {
        len = 4;
        cp = s[0] & 0x07u;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3Fu);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

/*
 * The key of /v1/intents/{key}: percent-decoded into out (at least
 * ADMIN_KEY_MAX_BYTES + 1 bytes), checked as outbox.enqueue checks keys.
 * Returns NULL, or why the key is refused.
 */
const char *admin_decode_key(const char *encoded, size_t n, char *out)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        char c = encoded[i];
        if (c == '%') {
            int high = i + 1 < n ? hex_value(encoded[i + 1]) : -1;
            int low = i + 2 < n ? hex_value(encoded[i + 2]) : -1;
            if (high < 0 || low < 0)
                return "malformed percent-encoding in the key";
            c = (char)(high * 16 + low);
            i += 2;
        }
        if (len == ADMIN_KEY_MAX_BYTES)
            return "the key is longer than 255 bytes";
        out[len++] = c;
    }
    out[len] = '\0';
    if (len == 0)
        return "the key is empty";
    const unsigned char *p = (const unsigned char *)out;
    for (size_t i = 0; i < len;) {
        size_t seq = utf8_length(p + i, len - i);
        if (seq == 0)
            return "the key is not valid UTF-8";
        /* C0 controls, DEL, and C1 controls (U+0080..U+009F): [[:cntrl:]] */
        if (p[i] < 0x20 || p[i] == 0x7F || (p[i] == 0xC2 && p[i + 1] < 0xA0))
            return "the key contains a control character";
        i += seq;
    }
    return NULL;
}

/* A compact JSON object of string members, in order: {"names[0]":"values[0]",...}.
 * Invalid UTF-8 in a value (a driver message, say) is replaced, not fatal. */
static char *json_text(const char *const *names, const char *const *values, size_t count)
{
    json_t *object = json_object();
    for (size_t i = 0; i < count; i++) {
        json_t *string = json_string(values[i] ? values[i] : "");
        json_object_set_new(object, names[i], string ? string : json_string("(not valid UTF-8)"));
    }
    char *text = json_dumps(object, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(object);
    if (text == NULL)
        abort(); /* out of memory, as strbuf does */
    return text;
}

static const char *status_text(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 413:
        return "Content Too Large";
    case 429:
        return "Too Many Requests";
    case 500:
        return "Internal Server Error";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    default:
        return "Unknown";
    }
}

/* SHA-256 of n bytes; the digest is what tokens are compared by. */
static void sha256(const void *data, size_t n, unsigned char out[32])
{
    unsigned int len = 0;
    if (EVP_Digest(data, n, out, &len, EVP_sha256(), NULL) != 1 || len != 32)
        abort(); /* cannot happen with a working libcrypto */
}

/*
 * What readiness may say about a database connection that is down. libpq's
 * messages name the host, the port and the user ('connection to server at
 * "db.internal" (10.0.0.5), port 5432 failed: FATAL: password authentication
 * failed for user "relay"'): they go to the log (db_connect_failed,
 * db_connection_lost), and /readyz, which anyone who reaches the port reads,
 * gets one of these phrases. The first row whose needles all occur wins.
 */
const char *admin_database_reason(const char *detail)
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

/* ---------------------------------------------------------------- server lifetime */

static void server_maybe_free(admin_server_t *s)
{
    if (!s->closing || s->listener_open || s->timer_open || s->open_conns > 0)
        return;
    void (*cb)(void *) = s->on_closed;
    void *data = s->closed_data;
    OPENSSL_cleanse(s->token_digest, sizeof(s->token_digest));
    free(s);
    if (cb)
        cb(data);
}

static void on_listener_closed(uv_handle_t *handle)
{
    admin_server_t *s = handle->data;
    s->listener_open = false;
    server_maybe_free(s);
}

static void on_recheck_timer_closed(uv_handle_t *handle)
{
    admin_server_t *s = handle->data;
    s->timer_open = false;
    server_maybe_free(s);
}

/* A connection or a request turned away for lack of room: counted (in
 * /metrics), and logged at most once a minute. */
static void server_note_refused(admin_server_t *s, enum refusal kind)
{
    s->refused_total[kind]++;
    uint64_t now = uv_now(s->loop);
    if (s->refused_logged && now - s->refused_logged_ms < ADMIN_REFUSED_LOG_EVERY_MS)
        return;
    s->refused_logged = true;
    s->refused_logged_ms = now;
    log_event(
        LOG_WARN, "admin_connections_refused", "reason", json_string(refusal_names[kind]),
        "max_connections", json_integer(s->limits.max_connections), "max_waits",
        json_integer(s->limits.max_waits), "probe_reserve", json_integer(s->limits.probe_reserve),
        "refused_total", json_integer((json_int_t)s->refused_total[REFUSED_CONNECTIONS]),
        "waits_refused_total", json_integer((json_int_t)s->refused_total[REFUSED_WAITS]),
        "evicted_total", json_integer((json_int_t)s->refused_total[REFUSED_EVICTED]), LOG_END);
}

/* ---------------------------------------------------------------- connection lifetime */

static void on_conn_handle_closed(uv_handle_t *handle)
{
    struct admin_conn *conn = handle->data;
    if (--conn->open_handles > 0)
        return;
    admin_server_t *s = conn->server;
    free(conn->input);
    strbuf_free(&conn->url);
    strbuf_free(&conn->auth);
    free(conn);
    s->open_conns--;
    server_maybe_free(s);
}

static void conn_set_phase(struct admin_conn *conn, enum conn_phase phase, uint64_t timeout_ms)
{
    conn->phase = phase;
    uv_timer_start(&conn->timer, on_conn_timer, timeout_ms, 0);
}

static bool conn_busy(const struct admin_conn *conn)
{
    return conn->phase == PHASE_LOOKUP || conn->phase == PHASE_WRITING;
}

static void conn_set_parked(struct admin_conn *conn, bool parked)
{
    admin_server_t *s = conn->server;
    if (conn->parked == parked)
        return;
    conn->parked = parked;
    s->parked += parked ? 1 : -1;
    if (parked && !uv_is_active((uv_handle_t *)&s->recheck_timer) && !s->closing)
        uv_timer_start(&s->recheck_timer, on_recheck_timer, ADMIN_RECHECK_MS, ADMIN_RECHECK_MS);
}

/* The long-poll, if any, is over (answered, or the connection is closing). */
static void conn_end_wait(struct admin_conn *conn)
{
    conn_set_parked(conn, false);
    if (conn->wait_until_ms) {
        conn->wait_until_ms = 0;
        conn->server->waiting--;
    }
}

/* Closes both handles at once; pending writes and the shutdown are cancelled
 * (their callbacks run before the close callbacks). */
static void conn_close(struct admin_conn *conn)
{
    if (conn->closing)
        return;
    conn->closing = true;
    admin_server_t *s = conn->server;
    if (conn->prev)
        conn->prev->next = conn->next;
    else
        s->conns = conn->next;
    if (conn->next)
        conn->next->prev = conn->prev;
    s->lane_conns[conn->lane]--;
    conn_end_wait(conn);
    if (conn->lookup) {
        conn->lookup->conn = NULL; /* orphaned: done() only frees it */
        conn->lookup = NULL;
    }
    uv_timer_stop(&conn->timer);
    uv_close((uv_handle_t *)&conn->timer, on_conn_handle_closed);
    uv_close((uv_handle_t *)&conn->tcp, on_conn_handle_closed);
}

static void on_shutdown_done(uv_shutdown_t *req, int status)
{
    struct admin_conn *conn = req->data;
    if (conn->closing)
        return;
    if (status < 0 || conn->peer_eof) {
        conn_close(conn);
        return;
    }
    /* Lingering close: discard what the client still sends, until EOF. */
    conn_set_phase(conn, PHASE_DRAINING, ADMIN_DRAIN_TIMEOUT_MS);
    conn->input_len = conn->input_offset = 0;
    conn_start_reading(conn);
}

static void conn_shutdown(struct admin_conn *conn)
{
    conn->shutdown_req.data = conn;
    if (uv_shutdown(&conn->shutdown_req, (uv_stream_t *)&conn->tcp, on_shutdown_done) != 0)
        conn_close(conn);
}

/* ---------------------------------------------------------------- responses */

static void on_write_done(uv_write_t *req, int status)
{
    struct admin_write *w = (struct admin_write *)req;
    struct admin_conn *conn = w->conn;
    bool close_after = w->close_after;
    free(w);
    if (conn->closing)
        return;
    if (status < 0) {
        conn_close(conn);
        return;
    }
    if (close_after) {
        conn_shutdown(conn);
        return;
    }
    conn_set_phase(conn, PHASE_IDLE, ADMIN_IDLE_TIMEOUT_MS);
    conn_drive(conn); /* a pipelined request may be waiting */
}

/* A complete answer with Content-Length (and no body for HEAD). The
 * connection stays open when the request allows it, nothing went wrong and
 * it is in the main lane. */
static void conn_respond(struct admin_conn *conn, int status, const char *content_type,
                         const char *extra_headers, const char *body, size_t body_len)
{
    if (conn->closing)
        return;
    admin_server_t *s = conn->server;
    bool keep_alive = conn->keep_alive && !conn->peer_eof && conn->lane == LANE_MAIN && !s->closing;
    const char *connection_header = "Connection: close\r\n";
    if (keep_alive)
        connection_header = conn->parser.http_minor == 0 ? "Connection: keep-alive\r\n" : "";
    char head[512];
    int head_len = snprintf(head, sizeof(head),
                            "HTTP/1.1 %d %s\r\n"
                            "Content-Type: %s\r\n"
                            "Content-Length: %zu\r\n"
                            "Cache-Control: no-store\r\n"
                            "%s%s\r\n",
                            status, status_text(status), content_type, body_len, connection_header,
                            extra_headers ? extra_headers : "");
    if (head_len < 0 || (size_t)head_len >= sizeof(head))
        abort(); /* the headers are ours and short */
    /* No body only when the request line was read and said HEAD: the parser's
     * method is a guess while it reads the method ("H..." is HEAD until it
     * fails) and stale after a previous request, and a 400 for such bytes
     * must still carry the body its Content-Length promises (found by
     * tests/fuzz/fuzz_admin_http). */
    bool head_only = conn->head_request;
    conn->head_request = false;
    size_t sent_body = head_only ? 0 : body_len;
    struct admin_write *w = malloc(sizeof(*w) + (size_t)head_len + sent_body);
    if (w == NULL) {
        conn_close(conn);
        return;
    }
    w->conn = conn;
    w->close_after = !keep_alive;
    w->len = (size_t)head_len + sent_body;
    memcpy(w->data, head, (size_t)head_len);
    if (sent_body > 0)
        memcpy(w->data + head_len, body, sent_body);
    conn_set_phase(conn, PHASE_WRITING, ADMIN_WRITE_TIMEOUT_MS);
    uv_buf_t buf = uv_buf_init(w->data, (unsigned int)w->len);
    if (uv_write(&w->req, (uv_stream_t *)&conn->tcp, &buf, 1, on_write_done) != 0) {
        free(w);
        conn_close(conn);
    }
}

static void conn_respond_json(struct admin_conn *conn, int status, const char *extra_headers,
                              const char *json)
{
    conn_respond(conn, status, CONTENT_TYPE_JSON, extra_headers, json, strlen(json));
}

static void conn_respond_error(struct admin_conn *conn, int status, const char *extra_headers,
                               const char *message)
{
    const char *name = "error";
    char *body = json_text(&name, &message, 1);
    conn_respond_json(conn, status, extra_headers, body);
    free(body);
}

/* Malformed or too large: answer, then close (the parser cannot go on). */
static void conn_reject(struct admin_conn *conn, int status, const char *message)
{
    conn->keep_alive = false;
    log_event(LOG_DEBUG, "admin_request_rejected", "status", json_integer(status), "reason",
              json_string(message), LOG_END);
    conn_respond_error(conn, status, NULL, message);
}

/* ---------------------------------------------------------------- lookups */

/* A final outcome ends a long-poll at once: succeeded, failed, cancelled. */
static bool outcome_is_final(const char *json_body)
{
    json_t *doc = json_loads(json_body, 0, NULL);
    const char *status = json_string_value(json_object_get(doc, "status"));
    bool final = status && (!strcmp(status, "succeeded") || !strcmp(status, "failed") ||
                            !strcmp(status, "cancelled"));
    json_decref(doc);
    return final;
}

/* The answer to a lookup: the wait (if any) is over. */
static void conn_answer_lookup(struct admin_conn *conn, int status, const char *json_body)
{
    conn_end_wait(conn);
    if (status < 100 || status > 599)
        status = 500;
    if (json_body) {
        conn_respond_json(conn, status, NULL, json_body);
        return;
    }
    const char *message = status == 404   ? "no intent with this key"
                          : status == 200 ? "no body"
                                          : "the outcome cannot be read now";
    conn_respond_error(conn, status, NULL, message);
}

/* Whether an outcome read during a wait (before its deadline) ends it. */
static bool conn_wait_goes_on(const struct admin_conn *conn, int status, const char *json_body)
{
    return conn->wait_until_ms && uv_now(conn->server->loop) < conn->wait_until_ms &&
           status == 200 && json_body && !outcome_is_final(json_body);
}

/* Not final yet: wait for a re-check or the deadline. */
static void conn_park(struct admin_conn *conn)
{
    uint64_t now = uv_now(conn->server->loop);
    conn_set_parked(conn, true);
    conn_set_phase(conn, PHASE_LOOKUP, conn->wait_until_ms - now);
}

static void admin_lookup_done(void *req, int status, const char *json_body)
{
    struct admin_lookup *lookup = req;
    struct admin_conn *conn = lookup->conn;
    free(lookup);
    if (conn == NULL)
        return; /* orphaned: the client, the deadline or admin_close came first */
    conn->lookup = NULL;
    if (conn_wait_goes_on(conn, status, json_body))
        conn_park(conn);
    else
        conn_answer_lookup(conn, status, json_body);
}

static void conn_lookup_timed_out(struct admin_conn *conn)
{
    if (conn->lookup) {
        conn->lookup->conn = NULL; /* done() will only free it */
        conn->lookup = NULL;
    }
    conn_answer_lookup(conn, 503, "{\"error\":\"the outcome could not be read in time\"}");
}

static void conn_start_lookup(struct admin_conn *conn, uint64_t timeout_ms)
{
    admin_server_t *s = conn->server;
    struct admin_lookup *lookup = malloc(sizeof(*lookup));
    if (lookup == NULL) {
        conn_answer_lookup(conn, 503, "{\"error\":\"out of memory\"}");
        return;
    }
    lookup->conn = conn;
    conn->lookup = lookup;
    conn_set_parked(conn, false);
    conn_set_phase(conn, PHASE_LOOKUP, timeout_ms);
    /* done() may even run before this returns: it answers at once then. */
    s->hooks.lookup_intent(s->hooks.data, conn->wait_key, lookup, admin_lookup_done);
}

/* ---------------------------------------------------------------- re-checks of parked waits */

static struct admin_recheck *server_find_recheck(admin_server_t *s, const char *key)
{
    for (struct admin_recheck *rc = s->rechecks; rc; rc = rc->next)
        if (strcmp(rc->key, key) == 0)
            return rc;
    return NULL;
}

static void server_unlink_recheck(admin_server_t *s, struct admin_recheck *rc)
{
    if (rc->prev)
        rc->prev->next = rc->next;
    else
        s->rechecks = rc->next;
    if (rc->next)
        rc->next->prev = rc->prev;
    rc->prev = rc->next = NULL;
}

static void admin_recheck_done(void *req, int status, const char *json_body);

/* A re-check of key for the requests parked on it, linked into s->rechecks
 * but not yet sent; NULL when one is already running (it is then told to
 * look once more, if outcomes changed) or out of memory. */
static struct admin_recheck *server_new_recheck(admin_server_t *s, const char *key,
                                                bool outcomes_changed)
{
    struct admin_recheck *running = server_find_recheck(s, key);
    if (running) {
        running->again = running->again || outcomes_changed;
        return NULL;
    }
    struct admin_recheck *rc = calloc(1, sizeof(*rc));
    if (rc == NULL)
        return NULL; /* the next tick tries again */
    rc->server = s;
    snprintf(rc->key, sizeof(rc->key), "%s", key);
    rc->next = s->rechecks;
    if (s->rechecks)
        s->rechecks->prev = rc;
    s->rechecks = rc;
    return rc;
}

/* Looks up again every key with parked requests, once per key. The
 * re-checks are created first and sent after: done() may run before
 * lookup_intent returns and answer (even close) connections. */
static void server_recheck_waits(admin_server_t *s, bool outcomes_changed)
{
    if (s->parked == 0 || s->hooks.lookup_intent == NULL)
        return;
    struct admin_recheck **batch = calloc((size_t)s->parked, sizeof(*batch));
    if (batch == NULL)
        return;
    int count = 0;
    for (struct admin_conn *conn = s->conns; conn && count < s->parked; conn = conn->next) {
        if (!conn->parked || conn->closing)
            continue;
        struct admin_recheck *rc = server_new_recheck(s, conn->wait_key, outcomes_changed);
        if (rc)
            batch[count++] = rc;
    }
    for (int i = 0; i < count; i++)
        s->hooks.lookup_intent(s->hooks.data, batch[i]->key, batch[i], admin_recheck_done);
    free(batch);
}

static void admin_recheck_done(void *req, int status, const char *json_body)
{
    struct admin_recheck *rc = req;
    admin_server_t *s = rc->server;
    if (s == NULL) {
        free(rc); /* orphaned by admin_close */
        return;
    }
    server_unlink_recheck(s, rc);
    char key[ADMIN_KEY_MAX_BYTES + 1];
    snprintf(key, sizeof(key), "%s", rc->key);
    bool again = rc->again;
    free(rc);
    /* A failed re-check changes nothing: the waiters stay parked, and the
     * last lookup at their deadline decides. */
    bool answerable = status == 404 || (status == 200 && json_body);
    bool parked_left = false;
    for (struct admin_conn *conn = s->conns, *next; conn; conn = next) {
        next = conn->next; /* answering may close conn, never another */
        if (!conn->parked || conn->closing || strcmp(conn->wait_key, key) != 0)
            continue;
        if (answerable && !conn_wait_goes_on(conn, status, json_body))
            conn_answer_lookup(conn, status, json_body);
        else
            parked_left = true;
    }
    if (again && parked_left) {
        struct admin_recheck *more = server_new_recheck(s, key, false);
        if (more)
            s->hooks.lookup_intent(s->hooks.data, more->key, more, admin_recheck_done);
    }
}

static void on_recheck_timer(uv_timer_t *timer)
{
    admin_server_t *s = timer->data;
    if (s->parked == 0) {
        uv_timer_stop(timer); /* conn_set_parked starts it again */
        return;
    }
    server_recheck_waits(s, false);
}

void admin_outcomes_changed(admin_server_t *s)
{
    if (s == NULL || s->closing)
        return;
    server_recheck_waits(s, true);
}

/* "?wait=30s", "wait=500ms", "wait=2" (seconds): the wait in ms, capped at
 * ADMIN_WAIT_MAX_MS; 0 without a wait; -1 when malformed. */
long admin_parse_wait(const char *query, size_t n)
{
    const char *p = query, *end = query + n;
    while (p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *field_end = amp ? amp : end;
        if ((size_t)(field_end - p) > 5 && memcmp(p, "wait=", 5) == 0) {
            char text[32];
            size_t len = (size_t)(field_end - p - 5);
            if (len == 0 || len >= sizeof(text))
                return -1;
            memcpy(text, p + 5, len);
            text[len] = '\0';
            char *unit = NULL;
            long value = strtol(text, &unit, 10);
            if (unit == text || value < 0)
                return -1;
            long ms;
            if (*unit == '\0' || !strcmp(unit, "s"))
                ms = value > ADMIN_WAIT_MAX_MS / 1000 ? ADMIN_WAIT_MAX_MS : value * 1000;
            else if (!strcmp(unit, "ms"))
                ms = value;
            else
                return -1;
            return ms > ADMIN_WAIT_MAX_MS ? ADMIN_WAIT_MAX_MS : ms;
        }
        p = field_end + (amp ? 1 : 0);
    }
    return 0;
}

/* ---------------------------------------------------------------- endpoints */

static void handle_ready(struct admin_conn *conn)
{
    admin_server_t *s = conn->server;
    const char *reason = s->hooks.ready_reason ? s->hooks.ready_reason(s->hooks.data) : "";
    if (reason == NULL || *reason == '\0') {
        conn_respond_json(conn, 200, NULL, "{\"status\":\"ready\"}");
        return;
    }
    const char *names[] = {"status", "reason"}, *values[] = {"not ready", reason};
    char *body = json_text(names, values, 2);
    conn_respond_json(conn, 503, NULL, body);
    free(body);
}

/* The port's own families, after the relay's. */
static void write_admin_metrics(admin_server_t *s, struct strbuf *out)
{
    metrics_family(out, "outbox_admin_connections", METRICS_GAUGE,
                   "Open connections of the admin port, by lane (main: any request; probe: the "
                   "reserve for /healthz and /readyz once the main lane is full).");
    metrics_sample(out, "outbox_admin_connections", METRICS_LABELS({"lane", "main"}),
                   s->lane_conns[LANE_MAIN]);
    metrics_sample(out, "outbox_admin_connections", METRICS_LABELS({"lane", "probe"}),
                   s->lane_conns[LANE_PROBE]);
    metrics_gauge(out, "outbox_admin_waiting", "Requests held by ?wait= (long-polls).",
                  METRICS_NO_LABELS, s->waiting);
    metrics_family(out, "outbox_admin_refused_total", METRICS_COUNTER,
                   "Admin connections or requests turned away for lack of room (connections: "
                   "503 or closed; waits: 429; evicted: a probe-lane connection closed to make "
                   "room).");
    for (int kind = 0; kind < REFUSAL_KINDS; kind++)
        metrics_sample_uint(out, "outbox_admin_refused_total",
                            METRICS_LABELS({"reason", refusal_names[kind]}),
                            s->refused_total[kind]);
}

static void handle_metrics(struct admin_conn *conn)
{
    admin_server_t *s = conn->server;
    struct strbuf out;
    strbuf_init(&out);
    if (s->hooks.write_metrics)
        s->hooks.write_metrics(s->hooks.data, &out);
    write_admin_metrics(s, &out);
    conn_respond(conn, 200, CONTENT_TYPE_METRICS, NULL, out.data, out.len);
    strbuf_free(&out);
}

static void handle_intent(struct admin_conn *conn, const char *encoded_key, size_t n,
                          const char *query, size_t query_len)
{
    admin_server_t *s = conn->server;
    const char *problem = admin_decode_key(encoded_key, n, conn->wait_key);
    if (problem) {
        conn_respond_error(conn, 400, NULL, problem);
        return;
    }
    long wait_ms = admin_parse_wait(query, query_len);
    if (wait_ms < 0) {
        conn_respond_error(conn, 400, NULL,
                           "wait must be a duration such as 30s or 500ms (at most 60s)");
        return;
    }
    if (s->hooks.lookup_intent == NULL) {
        conn_respond_error(conn, 503, NULL, "outcome lookups are not available");
        return;
    }
    if (wait_ms > 0 && s->waiting >= s->limits.max_waits) {
        server_note_refused(s, REFUSED_WAITS);
        char message[128];
        snprintf(message, sizeof(message),
                 "too many requests waiting (at most %d); retry, or ask without wait",
                 s->limits.max_waits);
        conn_respond_error(conn, 429, "Retry-After: 1\r\n", message);
        return;
    }
    if (wait_ms > 0) {
        conn->wait_until_ms = uv_now(s->loop) + (uint64_t)wait_ms;
        s->waiting++;
    }
    conn_start_lookup(conn, (uint64_t)wait_ms + ADMIN_LOOKUP_TIMEOUT_MS);
}

/* With a token: whether the request carries it ("Authorization: Bearer
 * <token>", the scheme in any case). Constant time in the token. */
static bool conn_authorized(const struct admin_conn *conn)
{
    const admin_server_t *s = conn->server;
    if (!s->token_required)
        return true;
    if (conn->auth_headers != 1 || conn->auth_too_long || conn->auth.len < 7)
        return false;
    const char *p = conn->auth.data, *end = p + conn->auth.len;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    if (end - p < 7 || strncasecmp(p, "bearer", 6) != 0 || (p[6] != ' ' && p[6] != '\t'))
        return false;
    p += 7;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    unsigned char digest[32];
    sha256(p, (size_t)(end - p), digest);
    return CRYPTO_memcmp(digest, s->token_digest, sizeof(digest)) == 0;
}

/* Routes one complete request (the parser is paused). */
static void conn_dispatch(struct admin_conn *conn)
{
    admin_server_t *s = conn->server;
    if (conn->parser.upgrade)
        conn->keep_alive = false; /* we never switch protocols */
    struct http_parser_url parts;
    http_parser_url_init(&parts);
    if (conn->url.len == 0 ||
        http_parser_parse_url(conn->url.data, conn->url.len, conn->parser.method == HTTP_CONNECT,
                              &parts) != 0 ||
        !(parts.field_set & (1 << UF_PATH))) {
        conn_reject(conn, 400, "bad request target");
        return;
    }
    const char *path = conn->url.data + parts.field_data[UF_PATH].off;
    size_t path_len = parts.field_data[UF_PATH].len;

    enum { ROUTE_NONE, ROUTE_HEALTH, ROUTE_READY, ROUTE_METRICS, ROUTE_INTENT } route = ROUTE_NONE;
    if (bytes_equal(path, path_len, "/healthz"))
        route = ROUTE_HEALTH;
    else if (bytes_equal(path, path_len, "/readyz"))
        route = ROUTE_READY;
    else if (bytes_equal(path, path_len, "/metrics"))
        route = ROUTE_METRICS;
    else if (bytes_start_with(path, path_len, ADMIN_INTENTS_PREFIX))
        route = ROUTE_INTENT;

    if (route == ROUTE_NONE) {
        conn_respond_error(conn, 404, NULL, "not found");
        return;
    }
    if (conn->parser.method != HTTP_GET && conn->parser.method != HTTP_HEAD) {
        conn_respond_error(conn, 405, "Allow: GET, HEAD\r\n", "method not allowed");
        return;
    }
    bool probe = route == ROUTE_HEALTH || route == ROUTE_READY;
    if (conn->lane == LANE_PROBE && !probe) {
        if (s->lane_conns[LANE_MAIN] >= s->limits.max_connections) {
            server_note_refused(s, REFUSED_CONNECTIONS);
            conn->keep_alive = false;
            conn_respond_error(conn, 503, NULL, "too many admin connections");
            return;
        }
        s->lane_conns[LANE_PROBE]--; /* a main slot came free: take it */
        s->lane_conns[LANE_MAIN]++;
        conn->lane = LANE_MAIN;
    }
    if (!probe && !conn_authorized(conn)) {
        log_event(LOG_DEBUG, "admin_unauthorized", "authorization",
                  json_string(conn->auth_headers ? "wrong" : "missing"), LOG_END);
        conn_respond_error(conn, 401,
                           conn->auth_headers
                               ? "WWW-Authenticate: Bearer error=\"invalid_token\"\r\n"
                               : "WWW-Authenticate: Bearer\r\n",
                           "a bearer token is required (Authorization: Bearer <token>)");
        return;
    }
    switch (route) {
    case ROUTE_HEALTH:
        conn_respond_json(conn, 200, NULL, "{\"status\":\"ok\"}");
        break;
    case ROUTE_READY:
        handle_ready(conn);
        break;
    case ROUTE_METRICS:
        handle_metrics(conn);
        break;
    case ROUTE_INTENT: {
        size_t prefix = strlen(ADMIN_INTENTS_PREFIX);
        const char *query = "";
        size_t query_len = 0;
        if (parts.field_set & (1 << UF_QUERY)) {
            query = conn->url.data + parts.field_data[UF_QUERY].off;
            query_len = parts.field_data[UF_QUERY].len;
        }
        handle_intent(conn, path + prefix, path_len - prefix, query, query_len);
        break;
    }
    case ROUTE_NONE:
        break;
    }
}

/* ---------------------------------------------------------------- parser callbacks */

static int on_message_begin(http_parser *parser)
{
    struct admin_conn *conn = parser->data;
    strbuf_reset(&conn->url);
    strbuf_reset(&conn->auth);
    conn->keep_alive = false;
    conn->head_request = false;
    conn->reject_status = 0;
    conn->header_name_len = 0;
    conn->header_in_value = false;
    conn->header_is_auth = false;
    conn->auth_headers = 0;
    conn->auth_too_long = false;
    /* The deadline set at accept or after the last answer keeps running:
     * slow bytes do not buy time. */
    conn->phase = PHASE_READING;
    return 0;
}

static int on_url(http_parser *parser, const char *at, size_t length)
{
    struct admin_conn *conn = parser->data;
    conn->head_request = parser->method == HTTP_HEAD; /* the method is complete here */
    if (length > conn->server->limits.max_request_bytes - conn->url.len) {
        conn->reject_status = 413;
        return -1;
    }
    strbuf_append(&conn->url, at, length);
    return 0;
}

/* Header names and values may arrive in pieces (one call per read). Only
 * the name is kept, up to the length of "authorization", and only the value
 * of Authorization, up to ADMIN_AUTH_MAX_BYTES. */
static int on_header_field(http_parser *parser, const char *at, size_t length)
{
    struct admin_conn *conn = parser->data;
    if (conn->header_in_value) { /* a new header begins */
        conn->header_in_value = false;
        conn->header_name_len = 0;
    }
    for (size_t i = 0; i < length; i++) {
        if (conn->header_name_len < sizeof(conn->header_name))
            conn->header_name[conn->header_name_len] = at[i];
        conn->header_name_len++;
    }
    return 0;
}

static int on_header_value(http_parser *parser, const char *at, size_t length)
{
    struct admin_conn *conn = parser->data;
    if (!conn->header_in_value) { /* the first piece of this header's value */
        conn->header_in_value = true;
        conn->header_is_auth =
            conn->header_name_len == 13 && strncasecmp(conn->header_name, "authorization", 13) == 0;
        if (conn->header_is_auth) {
            conn->auth_headers++;
            strbuf_reset(&conn->auth);
        }
    }
    if (conn->header_is_auth &&
        strbuf_append_capped(&conn->auth, at, length, ADMIN_AUTH_MAX_BYTES) < length)
        conn->auth_too_long = true;
    return 0;
}

static int on_headers_complete(http_parser *parser)
{
    struct admin_conn *conn = parser->data;
    conn->keep_alive = http_should_keep_alive(parser) != 0;
    if ((parser->flags & F_CONTENTLENGTH) &&
        parser->content_length > conn->server->limits.max_request_bytes) {
        conn->reject_status = 413; /* say so now, not after reading the body */
        return -1;
    }
    return 0;
}

static int on_message_complete(http_parser *parser)
{
    http_parser_pause(parser, 1); /* one request at a time: see conn_drive */
    return 0;
}

/* Bodies and headers other than Authorization are not kept: message_bytes
 * counts them. */
static const http_parser_settings parser_settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_message_complete = on_message_complete,
};

/* ---------------------------------------------------------------- reading */

/*
 * Feeds buffered input to the parser until a request is complete (it is
 * dispatched) or the input is used up. Runs after reads, and after an answer
 * was written (a pipelined request may be waiting).
 */
static void conn_drive(struct admin_conn *conn)
{
    size_t max_bytes = conn->server->limits.max_request_bytes;
    while (!conn->closing && !conn_busy(conn) && conn->phase != PHASE_DRAINING &&
           conn->input_offset < conn->input_len) {
        const char *data = conn->input + conn->input_offset;
        size_t available = conn->input_len - conn->input_offset;
        size_t parsed = http_parser_execute(&conn->parser, &parser_settings, data, available);
        conn->input_offset += parsed;
        conn->message_bytes += parsed;
        enum http_errno error = HTTP_PARSER_ERRNO(&conn->parser);
        if (conn->reject_status == 413 || conn->message_bytes > max_bytes ||
            error == HPE_HEADER_OVERFLOW) {
            conn_reject(conn, 413, "request too large");
        } else if (error == HPE_PAUSED) {
            http_parser_pause(&conn->parser, 0);
            conn->message_bytes = 0;
            conn_dispatch(conn);
        } else if (error != HPE_OK) {
            conn_reject(conn, 400, http_errno_description(error));
        } else if (parsed < available) {
            conn_reject(conn, 400, "unexpected data");
        }
    }
    if (conn->closing || conn->phase == PHASE_DRAINING)
        return;
    if (conn->input_offset == conn->input_len)
        conn->input_len = conn->input_offset = 0;
    if (!conn_busy(conn)) {
        if (conn->peer_eof)
            conn_close(conn);
        else
            conn_start_reading(conn);
    }
}

static void on_alloc(uv_handle_t *handle, size_t suggested_size, uv_buf_t *buf)
{
    struct admin_conn *conn = handle->data;
    if (conn->phase == PHASE_DRAINING)
        conn->input_len = conn->input_offset = 0;
    if (conn->input_offset > 0) { /* compact what the parser consumed */
        memmove(conn->input, conn->input + conn->input_offset,
                conn->input_len - conn->input_offset);
        conn->input_len -= conn->input_offset;
        conn->input_offset = 0;
    }
    if (conn->input_cap - conn->input_len < ADMIN_READ_CHUNK) {
        size_t cap = conn->input_len + ADMIN_READ_CHUNK;
        char *grown = realloc(conn->input, cap);
        if (grown == NULL) {
            *buf = uv_buf_init(NULL, 0); /* libuv reports UV_ENOBUFS */
            return;
        }
        conn->input = grown;
        conn->input_cap = cap;
    }
    *buf = uv_buf_init(conn->input + conn->input_len,
                       (unsigned int)(conn->input_cap - conn->input_len));
}

static void conn_stop_reading(struct admin_conn *conn)
{
    if (conn->reading) {
        uv_read_stop((uv_stream_t *)&conn->tcp);
        conn->reading = false;
    }
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct admin_conn *conn = stream->data;
    if (conn->closing)
        return;
    if (nread < 0) {
        if (nread == UV_EOF && conn_busy(conn)) {
            /* Perhaps only a half-close: answer first, then close. */
            conn->peer_eof = true;
            conn_stop_reading(conn);
            return;
        }
        conn_close(conn);
        return;
    }
    if (nread == 0)
        return;
    if (conn->phase == PHASE_DRAINING) {
        conn->input_len = 0;
        return;
    }
    conn->input_len += (size_t)nread;
    if (conn_busy(conn)) {
        /* Pipelined bytes wait for the current answer; bound them. */
        if (conn->input_len - conn->input_offset > conn->server->limits.max_request_bytes)
            conn_stop_reading(conn);
        return;
    }
    conn_drive(conn);
}

static void conn_start_reading(struct admin_conn *conn)
{
    if (conn->reading || conn->closing)
        return;
    if (uv_read_start((uv_stream_t *)&conn->tcp, on_alloc, on_read) == 0)
        conn->reading = true;
    else
        conn_close(conn);
}

static void on_conn_timer(uv_timer_t *timer)
{
    struct admin_conn *conn = timer->data;
    if (conn->phase == PHASE_LOOKUP && conn->parked) {
        /* The wait is over: look once more, and answer that. */
        conn_start_lookup(conn, ADMIN_LOOKUP_TIMEOUT_MS);
        return;
    }
    if (conn->phase == PHASE_LOOKUP && conn->lookup) {
        conn_lookup_timed_out(conn);
        return;
    }
    static const char *const phase_names[] = {"idle", "reading", "lookup", "writing", "draining"};
    if (conn->phase != PHASE_DRAINING)
        log_event(LOG_DEBUG, "admin_connection_timeout", "phase",
                  json_string(phase_names[conn->phase]), LOG_END);
    conn_close(conn);
}

/* ---------------------------------------------------------------- accepting */

/* The probe lane is full: its oldest connection without a complete request
 * (nothing being looked up or written for it) makes room. */
static bool server_evict_probe(admin_server_t *s)
{
    struct admin_conn *oldest = NULL;
    for (struct admin_conn *conn = s->conns; conn; conn = conn->next)
        if (conn->lane == LANE_PROBE && !conn->closing &&
            (conn->phase == PHASE_IDLE || conn->phase == PHASE_READING))
            oldest = conn; /* the list is newest first */
    if (oldest == NULL)
        return false;
    log_event(LOG_DEBUG, "admin_connection_evicted", "phase",
              json_string(oldest->phase == PHASE_IDLE ? "idle" : "reading"), LOG_END);
    server_note_refused(s, REFUSED_EVICTED);
    conn_close(oldest);
    return true;
}

static void on_connection(uv_stream_t *listener, int status)
{
    admin_server_t *s = listener->data;
    if (status < 0) {
        log_event(LOG_WARN, "admin_accept_failed", "error", json_string(uv_strerror(status)),
                  LOG_END);
        return;
    }
    enum conn_lane lane = LANE_MAIN;
    bool refuse = false;
    if (s->lane_conns[LANE_MAIN] >= s->limits.max_connections) {
        lane = LANE_PROBE;
        refuse = s->lane_conns[LANE_PROBE] >= s->limits.probe_reserve && !server_evict_probe(s);
    }
    struct admin_conn *conn = calloc(1, sizeof(*conn));
    if (conn == NULL)
        return; /* libuv calls again while the backlog is not empty */
    conn->server = s;
    conn->lane = lane;
    strbuf_init(&conn->url);
    strbuf_init(&conn->auth);
    uv_tcp_init(s->loop, &conn->tcp);
    uv_timer_init(s->loop, &conn->timer);
    conn->tcp.data = conn->timer.data = conn;
    conn->open_handles = 2;
    s->open_conns++;
    conn->next = s->conns;
    if (s->conns)
        s->conns->prev = conn;
    s->conns = conn;
    s->lane_conns[lane]++;
    http_parser_init(&conn->parser, HTTP_REQUEST);
    conn->parser.data = conn;

    if (uv_accept(listener, (uv_stream_t *)&conn->tcp) != 0) {
        conn_close(conn);
        return;
    }
    if (refuse) {
        /* Every probe-lane connection is being answered: no room at all. */
        server_note_refused(s, REFUSED_CONNECTIONS);
        conn_close(conn);
        return;
    }
    uv_tcp_nodelay(&conn->tcp, 1);
    conn_set_phase(conn, PHASE_IDLE, ADMIN_IDLE_TIMEOUT_MS);
    conn_start_reading(conn);
}

/* ---------------------------------------------------------------- public */

/* "host:port" → a socket address; NULL, or what is wrong with it. */
const char *admin_parse_listen(const char *listen, struct sockaddr_storage *addr)
{
    const char *colon = listen ? strrchr(listen, ':') : NULL;
    if (colon == NULL)
        return "expected host:port";
    const char *port_text = colon + 1;
    size_t port_len = strlen(port_text);
    if (port_len == 0 || port_len > 5 || strspn(port_text, "0123456789") != port_len)
        return "the port is not a number";
    long port = strtol(port_text, NULL, 10);
    if (port > 65535)
        return "the port is out of range";
    char host[64];
    size_t host_len = (size_t)(colon - listen);
    if (host_len >= sizeof(host))
        return "the host is too long";
    memcpy(host, listen, host_len);
    host[host_len] = '\0';
    if (host_len >= 2 && host[0] == '[' && host[host_len - 1] == ']') {
        host[host_len - 1] = '\0';
        if (uv_ip6_addr(host + 1, (int)port, (struct sockaddr_in6 *)addr) != 0)
            return "the host is not a numeric IPv6 address";
        return NULL;
    }
    const char *ip4 = host;
    if (host_len == 0 || strcmp(host, "*") == 0)
        ip4 = "0.0.0.0";
    else if (strcmp(host, "localhost") == 0)
        ip4 = "127.0.0.1";
    if (uv_ip4_addr(ip4, (int)port, (struct sockaddr_in *)addr) == 0)
        return NULL;
    if (uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)addr) == 0)
        return NULL;
    return "the host must be a numeric IP address or localhost (no name lookup on the loop)";
}

/* Reads the bearer token from path into s->token_digest; NULL, or what is
 * wrong (never the token itself). */
static const char *server_read_token(admin_server_t *s, const char *path)
{
    FILE *file = fopen(path, "r");
    if (file == NULL)
        return strerror(errno);
    char buffer[ADMIN_TOKEN_MAX_BYTES + 64];
    size_t n = fread(buffer, 1, sizeof(buffer), file);
    bool failed = ferror(file) != 0;
    fclose(file);
    const char *problem = NULL;
    size_t start = 0, end = n;
    while (start < end && strchr(" \t\r\n", buffer[start]))
        start++;
    while (end > start && strchr(" \t\r\n", buffer[end - 1]))
        end--;
    if (failed)
        problem = "read error";
    else if (n == sizeof(buffer) || end - start > ADMIN_TOKEN_MAX_BYTES)
        problem = "the token is longer than 4096 bytes";
    else if (end == start)
        problem = "the file is empty";
    for (size_t i = start; problem == NULL && i < end; i++)
        if (buffer[i] < 0x21 || buffer[i] > 0x7E)
            problem = "the token must be visible ASCII characters, without spaces";
    if (problem == NULL) {
        sha256(buffer + start, end - start, s->token_digest);
        s->token_required = true;
    }
    OPENSSL_cleanse(buffer, sizeof(buffer));
    return problem;
}

admin_server_t *admin_start(uv_loop_t *loop, const char *listen, struct admin_hooks hooks,
                            const struct admin_limits *limits, const char *token_file)
{
    struct sockaddr_storage addr;
    memset(&addr, 0, sizeof(addr));
    const char *problem = admin_parse_listen(listen, &addr);
    if (problem == NULL && (limits->max_connections < 1 || limits->max_waits < 1 ||
                            limits->probe_reserve < 0 || limits->max_request_bytes < 64))
        problem = "max_connections and max_waits must be at least 1, probe_reserve at least 0 "
                  "and max_request_bytes at least 64";
    if (problem) {
        log_event(LOG_ERROR, "admin_listen_failed", "listen", json_string(listen ? listen : ""),
                  "error", json_string(problem), LOG_END);
        return NULL;
    }
    admin_server_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->loop = loop;
    s->hooks = hooks;
    s->limits = *limits;
    if (token_file && *token_file) {
        problem = server_read_token(s, token_file);
        if (problem) {
            log_event(LOG_ERROR, "admin_token_file_failed", "option",
                      json_string("--admin-token-file (OUTBOX_RELAY_ADMIN_TOKEN_FILE)"), "path",
                      json_string(token_file), "error", json_string(problem), LOG_END);
            free(s);
            return NULL;
        }
    }
    uv_tcp_init(loop, &s->listener);
    s->listener.data = s;
    s->listener_open = true;
    uv_timer_init(loop, &s->recheck_timer);
    s->recheck_timer.data = s;
    s->timer_open = true;

    /* EADDRINUSE may come from bind or only from listen. */
    int rc = uv_tcp_bind(&s->listener, (const struct sockaddr *)&addr, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&s->listener, ADMIN_BACKLOG, on_connection);
    struct sockaddr_storage bound;
    int bound_len = sizeof(bound);
    if (rc == 0)
        rc = uv_tcp_getsockname(&s->listener, (struct sockaddr *)&bound, &bound_len);
    if (rc != 0) {
        log_event(LOG_ERROR, "admin_listen_failed", "listen", json_string(listen), "error",
                  json_string(uv_strerror(rc)), LOG_END);
        s->closing = true;
        uv_close((uv_handle_t *)&s->recheck_timer, on_recheck_timer_closed);
        uv_close((uv_handle_t *)&s->listener, on_listener_closed); /* frees s */
        return NULL;
    }
    s->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                : ((struct sockaddr_in *)&bound)->sin_port);
    log_event(LOG_INFO, "admin_listening", "listen", json_string(listen), "port",
              json_integer(s->port), "max_connections", json_integer(limits->max_connections),
              "max_waits", json_integer(limits->max_waits), "probe_reserve",
              json_integer(limits->probe_reserve), "auth",
              json_string(s->token_required ? "bearer token for /metrics and /v1/" : "none"),
              LOG_END);
    return s;
}

int admin_port(const admin_server_t *s)
{
    return s->port;
}

void admin_close(admin_server_t *s, void (*on_closed)(void *data), void *data)
{
    if (s->closing)
        return;
    s->closing = true;
    s->on_closed = on_closed;
    s->closed_data = data;
    while (s->conns)
        conn_close(s->conns); /* unlinks itself */
    while (s->rechecks) {
        struct admin_recheck *rc = s->rechecks;
        server_unlink_recheck(s, rc);
        rc->server = NULL; /* done() will only free it */
    }
    uv_close((uv_handle_t *)&s->recheck_timer, on_recheck_timer_closed);
    uv_close((uv_handle_t *)&s->listener, on_listener_closed);
}
