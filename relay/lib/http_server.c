/*
 * http_server.c — the HTTP/1.1 server under the admin port and the test receivers
 * (what it owns: http_server.h).
 *
 * WHY IT IS SHAPED SO
 * One server, because four copies had drifted apart: each had its own
 * answer to a malformed request, its own idea of HEAD, and only some had a
 * lingering close. The differences that are real (the admin port closes
 * idle clients after 5 s, a receiver must not; a receiver keeps every header
 * and the body, the admin port needs one header) are configuration
 * (httpd_config) or application code behind hooks (httpd_hooks).
 *
 * It shares a loop with work that matters more (deliveries, the database),
 * so every buffer is bounded and nothing blocks. Requests are parsed by
 * libhttp-parser (no hand-rolled HTTP). The parser is paused in
 * on_message_complete, so a connection has one request at a time: pipelined
 * bytes wait in the input buffer (reading stops once they pass
 * max_pipelined_bytes) until the answer to the previous request is written.
 * Answers therefore go out in order with no queue, and a connection has at
 * most one answer in flight.
 *
 * Every connection is in one phase (enum httpd_phase in http_server.h), and the
 * phase decides what its one timer means:
 *
 *   accept ─► IDLE ──first byte──► READING ──complete──► HANDLING ──answer──► WRITING
 *              ▲   └── idle_ms from the accept or ──┘    (the handler's        │ write_ms
 *              │       the last answer, in all           deadline, or the      │
 *              │                                         delay of the answer)  │
 *              └──────────────────── keep-alive ◄──────────────────────────────┤
 *                                           close: shutdown ──► DRAINING ──► closed
 *                                                                drain_ms
 *
 * An answer is first tried with uv_try_write: the socket nearly always
 * takes it whole, which saves a copy and the epoll calls of a queued write
 * (the bench's receivers answer thousands a second). What the socket does
 * not take is copied and queued.
 *
 * Closing after an answer is a lingering close: shut down our write side,
 * then read and discard until EOF or drain_ms, so that request bytes still
 * arriving do not turn our FIN into a RST that destroys the answer before
 * the client has read it. A client that half-closes while its request is
 * handled still gets the answer, then the connection closes.
 *
 * A fault-injecting receiver needs to end connections in ways a server
 * normally avoids; they are explicit calls (httpd_conn_close,
 * httpd_conn_reset, httpd_conn_send_raw_and_close), not a second server.
 *
 * Invariants: every uv handle is closed through uv_close and its memory
 * freed in the close callback; a connection is freed when both its handles
 * are closed, the server when its listener and every connection are. A
 * connection's memory outlives its on_close hook, so an application that
 * answers later (the admin port's lookups) forgets it there.
 */
#include "lib/http_server.h"
#include "lib/dlist.h"

#include "lib/strbuf.h"
#include "lib/utf8.h"
#include "lib/xalloc.h"

#include <arpa/inet.h>
#include <http_parser.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#define HTTPD_DEFAULT_READ_CHUNK 4096
/* Status line and headers of an answer: the admin port's /ui headers and a
 * Location with a percent-encoded 255-byte key (765 bytes) fit. */
#define HTTPD_HEAD_MAX_BYTES 4096
#define CONTENT_TYPE_JSON "application/json"

/* Where one header of the request being parsed lies in header_bytes (which
 * may move while it grows). */
struct header_span {
    size_t name_offset, name_len;
    size_t value_offset, value_len;
};

/* A write of an answer, an interim 100 Continue or raw bytes. */
struct httpd_write {
    uv_write_t req;
    struct httpd_conn *conn;
    bool interim;     /* 100 Continue, or a part of a streamed answer: the request goes on */
    bool part;        /* a part of a streamed answer (counted in stream_queued) */
    bool close_after; /* the connection ends after it */
    size_t len;
    char data[];
};

struct httpd_conn {
    uv_tcp_t tcp;
    uv_timer_t timer; /* the deadline of the current phase */
    uv_shutdown_t shutdown_req;
    httpd_t *server;
    struct httpd_conn *prev, *next; /* in server->conns while accepted and not closing */
    int open_handles;
    enum httpd_phase phase;
    bool accepted; /* on_accept took it: on_close will be called */
    bool closing;
    bool reading;
    bool driving;   /* inside conn_drive: an answer written at once must not re-enter it */
    bool peer_eof;  /* the client half-closed while its request was handled */
    bool spoke;     /* a byte was read since the accept */
    bool deferred;  /* on_head deferred the body: parser paused, no dispatch */
    bool refused;   /* answered with httpd_conn_refuse: the request ends there */
    bool head_done; /* the request being read has all its headers */
    struct httpd_write *delayed; /* an answer waiting for its delay */
    bool streaming;              /* the head of a streamed answer is out (httpd_stream_begin) */
    int stream_queued;           /* its parts the socket has not taken yet */

    http_parser parser;
    char *input; /* bytes read, parsed up to input_offset */
    size_t input_len, input_cap, input_offset;
    size_t message_bytes; /* wire bytes of the request being parsed */
    uint64_t read_ns;     /* uv_hrtime() of the last read */

    /* The request being parsed. */
    uint64_t began_ns;
    struct strbuf url;
    struct strbuf header_bytes;
    struct header_span *spans;
    struct httpd_header *headers; /* filled from spans at dispatch */
    size_t header_count, header_cap;
    bool header_in_value; /* the last header callback was a value */
    struct strbuf body;
    size_t body_charge; /* of body's memory, counted in the server's body_bytes */
    bool keep_alive;
    bool head_request;      /* the request line said HEAD (see on_url) */
    int reject_status;      /* set by a parser callback that stopped parsing */
    char reject_reason[96]; /* with reject_status 400 */

    max_align_t app_data[]; /* httpd_config.conn_data_size bytes */
};

struct httpd {
    uv_loop_t *loop;
    uv_tcp_t listener;
    struct httpd_config config;
    struct httpd_hooks hooks;
    struct sockaddr_storage address;
    struct httpd_conn *conns; /* accepted and not closing, newest first */
    int open_conns;           /* connection objects not yet freed */
    size_t live_conns;        /* in conns */
    size_t body_bytes;        /* sum of body_charge: what max_total_body_bytes caps */
    bool listener_open;
    bool closing;
    void (*on_closed)(void *data);
    void *closed_data;
};

static void conn_drive(struct httpd_conn *conn);
static void conn_start_reading(struct httpd_conn *conn);
static void conn_reject(struct httpd_conn *conn, int status, const char *reason);

/* ---------------------------------------------------------------- small helpers */

static const char *status_text(int status)
{
    static const struct {
        int status;
        const char *text;
    } texts[] = {
        {100, "Continue"},
        {200, "OK"},
        {201, "Created"},
        {202, "Accepted"},
        {204, "No Content"},
        {205, "Reset Content"},
        {303, "See Other"},
        {304, "Not Modified"},
        {400, "Bad Request"},
        {401, "Unauthorized"},
        {403, "Forbidden"},
        {404, "Not Found"},
        {405, "Method Not Allowed"},
        {408, "Request Timeout"},
        {409, "Conflict"},
        {410, "Gone"},
        {413, "Content Too Large"},
        {414, "URI Too Long"},
        {422, "Unprocessable Content"},
        {429, "Too Many Requests"},
        {431, "Request Header Fields Too Large"},
        {500, "Internal Server Error"},
        {501, "Not Implemented"},
        {502, "Bad Gateway"},
        {503, "Service Unavailable"},
        {504, "Gateway Timeout"},
    };
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
        if (texts[i].status == status)
            return texts[i].text;
    return "Unknown";
}

const char *httpd_phase_name(enum httpd_phase phase)
{
    static const char *const names[] = {"idle", "reading", "handling", "writing", "draining"};
    return (unsigned)phase < sizeof(names) / sizeof(names[0]) ? names[phase] : "unknown";
}

/* Appends s as the inside of a JSON string: valid UTF-8, with '"', '\\' and
 * control characters escaped. */
static void append_json_string_content(struct strbuf *out, const char *s)
{
    struct strbuf clean;
    strbuf_init(&clean);
    utf8_scrub(&clean, s, strlen(s));
    for (size_t i = 0; i < clean.len; i++) {
        unsigned char c = (unsigned char)clean.data[i];
        if (c == '"' || c == '\\')
            strbuf_printf(out, "\\%c", c);
        else if (c < 0x20)
            strbuf_printf(out, "\\u%04x", c);
        else
            strbuf_append(out, (const char *)&c, 1);
    }
    strbuf_free(&clean);
}

/* ---------------------------------------------------------------- the listen address */

const char *httpd_parse_listen(const char *listen, struct sockaddr_storage *addr)
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
    if (host_len == 0)
        return "the host is missing (\"*\" for every interface)";
    if (host_len >= sizeof(host))
        return "the host is too long";
    memcpy(host, listen, host_len);
    host[host_len] = '\0';
    memset(addr, 0, sizeof(*addr));
    if (host_len >= 2 && host[0] == '[' && host[host_len - 1] == ']') {
        host[host_len - 1] = '\0';
        if (uv_ip6_addr(host + 1, (int)port, (struct sockaddr_in6 *)addr) != 0)
            return "the host is not a numeric IPv6 address";
        return NULL;
    }
    const char *ip4 = host;
    if (strcmp(host, "*") == 0)
        ip4 = "0.0.0.0";
    else if (strcmp(host, "localhost") == 0)
        ip4 = "127.0.0.1";
    if (uv_ip4_addr(ip4, (int)port, (struct sockaddr_in *)addr) == 0)
        return NULL;
    if (uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)addr) == 0)
        return NULL;
    return "the host must be a numeric IP address or localhost (no name lookup on the loop)";
}

void httpd_format_address(const struct sockaddr_storage *addr, char *out, size_t size)
{
    char host[INET6_ADDRSTRLEN] = "";
    if (addr->ss_family == AF_INET6) {
        const struct sockaddr_in6 *ip6 = (const struct sockaddr_in6 *)addr;
        uv_ip6_name(ip6, host, sizeof(host));
        snprintf(out, size, "[%s]:%d", host, ntohs(ip6->sin6_port));
    } else {
        const struct sockaddr_in *ip4 = (const struct sockaddr_in *)addr;
        uv_ip4_name(ip4, host, sizeof(host));
        snprintf(out, size, "%s:%d", host, ntohs(ip4->sin_port));
    }
}

/* ---------------------------------------------------------------- server lifetime */

static void server_maybe_free(httpd_t *s)
{
    if (!s->closing || s->listener_open || s->open_conns > 0)
        return;
    void (*on_closed)(void *) = s->on_closed;
    void *data = s->closed_data;
    free(s);
    if (on_closed)
        on_closed(data);
}

static void on_listener_closed(uv_handle_t *handle)
{
    httpd_t *s = handle->data;
    s->listener_open = false;
    server_maybe_free(s);
}

/* ---------------------------------------------------------------- connection lifetime */

/* The body's memory goes back (a 1 MiB body must not stay with a
 * keep-alive connection), and out of the server's count. */
static void conn_release_body(struct httpd_conn *conn)
{
    conn->server->body_bytes -= conn->body_charge;
    conn->body_charge = 0;
    if (conn->body.cap > 4096) {
        strbuf_free(&conn->body);
        strbuf_init(&conn->body);
    } else {
        strbuf_reset(&conn->body);
    }
}

static void on_conn_handle_closed(uv_handle_t *handle)
{
    struct httpd_conn *conn = handle->data;
    if (--conn->open_handles > 0)
        return;
    httpd_t *s = conn->server;
    free(conn->delayed);
    free(conn->input);
    conn_release_body(conn);
    strbuf_free(&conn->url);
    strbuf_free(&conn->header_bytes);
    strbuf_free(&conn->body);
    free(conn->spans);
    free(conn->headers);
    free(conn);
    s->open_conns--;
    server_maybe_free(s);
}

static void conn_unlink(struct httpd_conn *conn)
{
    DLIST_REMOVE(conn->server->conns, conn);
    conn->server->live_conns--;
}

/* Closes both handles at once; a pending write or shutdown is cancelled
 * (its callback runs before the close callbacks). */
static void conn_close(struct httpd_conn *conn)
{
    if (conn->closing)
        return;
    conn->closing = true;
    if (conn->accepted) {
        conn_unlink(conn);
        if (conn->server->hooks.on_close)
            conn->server->hooks.on_close(conn->server->hooks.data, conn);
    }
    uv_timer_stop(&conn->timer);
    uv_close((uv_handle_t *)&conn->timer, on_conn_handle_closed);
    uv_close((uv_handle_t *)&conn->tcp, on_conn_handle_closed);
}

static void on_conn_timer(uv_timer_t *timer);

/* Enters a phase; its deadline (0 = none) replaces the timer's. */
static void conn_set_phase(struct httpd_conn *conn, enum httpd_phase phase, uint64_t timeout_ms)
{
    conn->phase = phase;
    if (timeout_ms > 0)
        uv_timer_start(&conn->timer, on_conn_timer, timeout_ms, 0);
    else
        uv_timer_stop(&conn->timer);
}

static bool conn_busy(const struct httpd_conn *conn)
{
    return conn->phase == HTTPD_HANDLING || conn->phase == HTTPD_WRITING || conn->deferred;
}

static void on_shutdown_done(uv_shutdown_t *req, int status)
{
    struct httpd_conn *conn = req->data;
    uint64_t drain_ms = conn->server->config.timeouts.drain_ms;
    if (conn->closing)
        return;
    if (status < 0 || conn->peer_eof || drain_ms == 0) {
        conn_close(conn);
        return;
    }
    conn_set_phase(conn, HTTPD_DRAINING, drain_ms);
    conn->input_len = conn->input_offset = 0;
    conn_start_reading(conn); /* reading may have paused on pipelined input */
}

static void conn_shutdown(struct httpd_conn *conn)
{
    conn->shutdown_req.data = conn;
    if (uv_shutdown(&conn->shutdown_req, (uv_stream_t *)&conn->tcp, on_shutdown_done) != 0)
        conn_close(conn);
}

/* ---------------------------------------------------------------- writing */

/* The answer is out: the next request, or the end of the connection. */
static void conn_answered(struct httpd_conn *conn, bool close_after)
{
    if (close_after) {
        conn_set_phase(conn, HTTPD_WRITING, conn->server->config.timeouts.write_ms);
        conn_shutdown(conn);
        return;
    }
    conn_release_body(conn);
    conn_set_phase(conn, HTTPD_IDLE, conn->server->config.timeouts.idle_ms);
    if (!conn->driving)
        conn_drive(conn); /* a pipelined request may be waiting */
}

static void on_write_done(uv_write_t *req, int status)
{
    struct httpd_write *w = (struct httpd_write *)req;
    struct httpd_conn *conn = w->conn;
    bool interim = w->interim, close_after = w->close_after;
    if (w->part)
        conn->stream_queued--;
    free(w);
    if (conn->closing)
        return;
    if (status < 0) {
        conn_close(conn);
        return;
    }
    if (!interim)
        conn_answered(conn, close_after);
}

static struct httpd_write *write_new(struct httpd_conn *conn, size_t len, bool close_after)
{
    struct httpd_write *w = xmalloc(sizeof(*w) + len);
    w->conn = conn;
    w->interim = false;
    w->part = false;
    w->close_after = close_after;
    w->len = len;
    return w;
}

static void write_submit(struct httpd_conn *conn, struct httpd_write *w)
{
    if (!w->interim)
        conn_set_phase(conn, HTTPD_WRITING, conn->server->config.timeouts.write_ms);
    uv_buf_t buf = uv_buf_init(w->data, (unsigned int)w->len);
    if (uv_write(&w->req, (uv_stream_t *)&conn->tcp, &buf, 1, on_write_done) != 0) {
        free(w);
        conn_close(conn);
    }
}

/* Writes head and body: at once if the socket takes them, else what is
 * left is copied and queued (uv_try_write fails while a write is queued,
 * so the order holds). */
static void conn_write(struct httpd_conn *conn, const char *head, size_t head_len, const char *body,
                       size_t body_len, bool close_after)
{
    uv_buf_t bufs[2] = {uv_buf_init((char *)head, (unsigned int)head_len),
                        uv_buf_init((char *)body, (unsigned int)body_len)};
    int tried = uv_try_write((uv_stream_t *)&conn->tcp, bufs, body_len > 0 ? 2 : 1);
    size_t written = tried > 0 ? (size_t)tried : 0;
    if (written == head_len + body_len) {
        conn_answered(conn, close_after);
        return;
    }
    struct httpd_write *w = write_new(conn, head_len + body_len - written, close_after);
    size_t head_rest = written < head_len ? head_len - written : 0;
    size_t body_skip = written - (head_len - head_rest);
    memcpy(w->data, head + head_len - head_rest, head_rest);
    if (body_len > body_skip)
        memcpy(w->data + head_rest, body + body_skip, body_len - body_skip);
    write_submit(conn, w);
}

/* The status line and headers of an answer into head; its length. */
static size_t format_head(const struct httpd_conn *conn, const struct httpd_response *r,
                          size_t body_len, bool keep_alive, char *head, size_t size)
{
    char content_length[48] = "";
    if (r->status != 204 && r->status != 304 && !conn->streaming)
        snprintf(content_length, sizeof(content_length), "Content-Length: %zu\r\n", body_len);
    const char *connection = "Connection: close\r\n";
    if (keep_alive)
        connection = conn->parser.http_major == 1 && conn->parser.http_minor == 0
                         ? "Connection: keep-alive\r\n"
                         : "";
    const char *common = conn->server->config.response_headers;
    int len =
        snprintf(head, size, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n%s%s%s%s\r\n", r->status,
                 status_text(r->status), r->content_type ? r->content_type : CONTENT_TYPE_JSON,
                 content_length, connection, common ? common : "", r->headers ? r->headers : "");
    if (len < 0 || (size_t)len >= size)
        abort(); /* the headers are the application's own and short */
    return (size_t)len;
}

/* An answer may go out while a request is handled, or (a refusal) while
 * one is read. */
static bool conn_may_answer(const struct httpd_conn *conn)
{
    return !conn->closing && conn->delayed == NULL && !conn->streaming &&
           (conn->phase == HTTPD_HANDLING || conn->phase == HTTPD_READING ||
            conn->phase == HTTPD_IDLE);
}

void httpd_respond(httpd_conn_t *conn, const struct httpd_response *r)
{
    if (!conn_may_answer(conn))
        return;
    httpd_t *s = conn->server;
    bool keep_alive = conn->keep_alive && !conn->peer_eof && !s->closing;
    /* 204 and 304 carry no body and no Content-Length; 205 Content-Length 0. */
    size_t body_len = r->status == 204 || r->status == 304 || r->status == 205 ? 0 : r->body_len;
    char head[HTTPD_HEAD_MAX_BYTES];
    size_t head_len = format_head(conn, r, body_len, keep_alive, head, sizeof(head));
    /* No body only when the request line was read and said HEAD: the
     * parser's method is a guess while it reads the method ("H..." is HEAD
     * until it fails) and stale after a previous request, and a 400 for
     * such bytes must still carry the body its Content-Length promises
     * (found by tests/fuzz/fuzz_admin_http). */
    size_t sent_body = conn->head_request ? 0 : body_len;
    conn->head_request = false;
    if (r->delay_ms == 0) {
        conn_write(conn, head, head_len, r->body, sent_body, !keep_alive);
        return;
    }
    struct httpd_write *w = write_new(conn, head_len + sent_body, !keep_alive);
    memcpy(w->data, head, head_len);
    if (sent_body > 0)
        memcpy(w->data + head_len, r->body, sent_body);
    conn->delayed = w;
    conn_set_phase(conn, HTTPD_HANDLING, r->delay_ms);
}

void httpd_respond_json(httpd_conn_t *conn, int status, const char *headers, const char *json)
{
    struct httpd_response r = {
        .status = status, .headers = headers, .body = json, .body_len = strlen(json)};
    httpd_respond(conn, &r);
}

void httpd_respond_error(httpd_conn_t *conn, int status, const char *headers, const char *message)
{
    struct strbuf body;
    strbuf_init(&body);
    strbuf_append_str(&body, "{\"error\":\"");
    append_json_string_content(&body, message);
    strbuf_append_str(&body, "\"}");
    struct httpd_response r = {
        .status = status, .headers = headers, .body = body.data, .body_len = body.len};
    httpd_respond(conn, &r);
    strbuf_free(&body);
}

/* ---------------------------------------------------------------- streamed answers */

/* A part goes at once if the socket takes it (and nothing is queued before
 * it), else what is left is copied and queued; the request goes on. */
static void stream_put(struct httpd_conn *conn, const char *data, size_t n)
{
    size_t written = 0;
    if (conn->stream_queued == 0 && n > 0) {
        uv_buf_t buf = uv_buf_init((char *)data, (unsigned int)n);
        int tried = uv_try_write((uv_stream_t *)&conn->tcp, &buf, 1);
        written = tried > 0 ? (size_t)tried : 0;
    }
    if (written == n)
        return;
    struct httpd_write *w = write_new(conn, n - written, false);
    w->interim = true;
    w->part = true;
    memcpy(w->data, data + written, n - written);
    conn->stream_queued++;
    write_submit(conn, w);
}

bool httpd_stream_begin(httpd_conn_t *conn, int status, const char *content_type,
                        const char *headers)
{
    if (!conn_may_answer(conn) || conn->phase != HTTPD_HANDLING || conn->head_request)
        return false;
    conn->keep_alive = false; /* the body ends with the connection */
    conn->streaming = true;   /* before format_head: no Content-Length */
    struct httpd_response r = {.status = status, .content_type = content_type, .headers = headers};
    char head[HTTPD_HEAD_MAX_BYTES];
    size_t head_len = format_head(conn, &r, 0, false, head, sizeof(head));
    stream_put(conn, head, head_len);
    return true;
}

bool httpd_stream_write(httpd_conn_t *conn, const char *data, size_t n)
{
    if (conn->closing || !conn->streaming || conn->phase != HTTPD_HANDLING ||
        conn->stream_queued > 0)
        return false;
    stream_put(conn, data, n);
    return true;
}

void httpd_stream_end(httpd_conn_t *conn, const char *data, size_t n)
{
    if (conn->closing || !conn->streaming || conn->phase != HTTPD_HANDLING)
        return;
    conn_write(conn, data, n, NULL, 0, true);
}

bool httpd_conn_streaming(const httpd_conn_t *conn)
{
    return conn->streaming;
}

void httpd_conn_close_after_answer(httpd_conn_t *conn)
{
    conn->keep_alive = false;
}

void httpd_conn_wait(httpd_conn_t *conn, uint64_t timeout_ms)
{
    if (!conn->closing && conn->phase == HTTPD_HANDLING && conn->delayed == NULL)
        conn_set_phase(conn, HTTPD_HANDLING, timeout_ms > 0 ? timeout_ms : 1);
}

void httpd_conn_close(httpd_conn_t *conn)
{
    conn_close(conn);
}

void httpd_conn_reset(httpd_conn_t *conn)
{
    uv_os_fd_t fd;
    if (!conn->closing && uv_fileno((uv_handle_t *)&conn->tcp, &fd) == 0) {
        struct linger linger = {.l_onoff = 1, .l_linger = 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, sizeof(linger));
    }
    conn_close(conn);
}

void httpd_conn_send_raw_and_close(httpd_conn_t *conn, const char *bytes, size_t n)
{
    if (!conn_may_answer(conn))
        return;
    struct httpd_write *w = write_new(conn, n, true);
    memcpy(w->data, bytes, n);
    write_submit(conn, w);
}

/* ---------------------------------------------------------------- requests */

static long percent_decode(const char *s, size_t n, char *out, size_t out_size, bool plus_is_space)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '+' && plus_is_space) {
            c = ' ';
        } else if (c == '%') {
            int high = i + 1 < n ? hex_digit_value(s[i + 1]) : -1;
            int low = i + 2 < n ? hex_digit_value(s[i + 2]) : -1;
            if (high < 0 || low < 0)
                return -1;
            c = (char)(high * 16 + low);
            i += 2;
        }
        if (len + 1 >= out_size)
            return -2;
        out[len++] = c;
    }
    if (out_size > 0)
        out[len] = '\0';
    return (long)len;
}

long httpd_percent_decode(const char *s, size_t n, char *out, size_t out_size)
{
    return percent_decode(s, n, out, out_size, false);
}

long httpd_form_decode(const char *s, size_t n, char *out, size_t out_size)
{
    return percent_decode(s, n, out, out_size, true);
}

const struct httpd_header *httpd_request_header(const struct httpd_request *request,
                                                const char *name)
{
    size_t len = strlen(name);
    for (size_t i = 0; i < request->header_count; i++) {
        const struct httpd_header *h = &request->headers[i];
        if (h->name_len == len && strncasecmp(h->name, name, len) == 0)
            return h;
    }
    return NULL;
}

size_t httpd_request_header_count(const struct httpd_request *request, const char *name)
{
    size_t len = strlen(name), count = 0;
    for (size_t i = 0; i < request->header_count; i++) {
        const struct httpd_header *h = &request->headers[i];
        if (h->name_len == len && strncasecmp(h->name, name, len) == 0)
            count++;
    }
    return count;
}

/* The headers of the request as pointers, now that header_bytes is final. */
static void conn_fill_headers(struct httpd_conn *conn)
{
    for (size_t i = 0; i < conn->header_count; i++) {
        const struct header_span *span = &conn->spans[i];
        conn->headers[i] = (struct httpd_header){
            .name = conn->header_bytes.data + span->name_offset,
            .name_len = span->name_len,
            .value = conn->header_bytes.data + span->value_offset,
            .value_len = span->value_len,
        };
    }
}

/* The request as the application sees it; false when its target is not
 * a URL. */
static bool conn_request_view(struct httpd_conn *conn, struct httpd_request *out)
{
    struct http_parser_url parts;
    http_parser_url_init(&parts);
    if (conn->url.len == 0 || http_parser_parse_url(conn->url.data, conn->url.len,
                                                    conn->parser.method == HTTP_CONNECT, &parts))
        return false;
    conn_fill_headers(conn);
    struct httpd_request request = {
        .method = conn->parser.method,
        .head = conn->head_request,
        .keep_alive = conn->keep_alive,
        .http_major = conn->parser.http_major,
        .http_minor = conn->parser.http_minor,
        .url = conn->url.data,
        .url_len = conn->url.len,
        .path = "",
        .query = "",
        .headers = conn->headers,
        .header_count = conn->header_count,
        .body = conn->body.data,
        .body_len = conn->body.len,
        .arrived_ns = conn->began_ns,
    };
    if (parts.field_set & (1 << UF_PATH)) {
        request.path = conn->url.data + parts.field_data[UF_PATH].off;
        request.path_len = parts.field_data[UF_PATH].len;
    }
    if (parts.field_set & (1 << UF_QUERY)) {
        request.query = conn->url.data + parts.field_data[UF_QUERY].off;
        request.query_len = parts.field_data[UF_QUERY].len;
    }
    *out = request;
    return true;
}

/* Hands one complete request to the application (the parser is paused). */
static void conn_dispatch(struct httpd_conn *conn)
{
    if (conn->parser.upgrade)
        conn->keep_alive = false; /* we never switch protocols */
    struct httpd_request request;
    if (!conn_request_view(conn, &request)) {
        conn_reject(conn, 400, "bad request target");
        return;
    }
    conn_set_phase(conn, HTTPD_HANDLING, 0);
    httpd_t *s = conn->server;
    s->hooks.on_request(s->hooks.data, conn, &request);
}

/* Refused while reading: answered, then the connection ends (the parser
 * cannot go on). */
static void conn_reject(struct httpd_conn *conn, int status, const char *reason)
{
    httpd_t *s = conn->server;
    conn->keep_alive = false;
    if (s->hooks.on_reject)
        s->hooks.on_reject(s->hooks.data, conn, status, reason);
    httpd_respond_error(conn, status, status == 503 ? "Retry-After: 1\r\n" : NULL, reason);
}

/* ---------------------------------------------------------------- parser callbacks */

static int on_message_begin(http_parser *parser)
{
    struct httpd_conn *conn = parser->data;
    strbuf_reset(&conn->url);
    strbuf_reset(&conn->header_bytes);
    conn_release_body(conn);
    conn->refused = conn->deferred = conn->head_done = false;
    conn->header_count = 0;
    conn->header_in_value = false;
    conn->keep_alive = false;
    conn->head_request = false;
    conn->reject_status = 0;
    conn->began_ns = conn->read_ns;
    /* The deadline set at accept or after the last answer keeps running. */
    conn->phase = HTTPD_READING;
    return 0;
}

static int on_url(http_parser *parser, const char *at, size_t length)
{
    struct httpd_conn *conn = parser->data;
    const struct httpd_limits *limits = &conn->server->config.limits;
    conn->head_request = parser->method == HTTP_HEAD; /* the method is complete here */
    if (limits->max_url_bytes && length > limits->max_url_bytes - conn->url.len) {
        conn->reject_status = 414;
        return -1;
    }
    if (limits->max_request_bytes && length > limits->max_request_bytes - conn->url.len) {
        conn->reject_status = 413;
        return -1;
    }
    strbuf_append(&conn->url, at, length);
    return 0;
}

/* Appends a piece of a header name or value; false past max_header_bytes. */
static bool conn_append_header_piece(struct httpd_conn *conn, size_t *piece_len, const char *at,
                                     size_t length)
{
    size_t max = conn->server->config.limits.max_header_bytes;
    if (max && length > max - *piece_len) {
        conn->reject_status = 431;
        return false;
    }
    strbuf_append(&conn->header_bytes, at, length);
    *piece_len += length;
    return true;
}

/* Names and values may arrive in pieces (one call per read). */
static int on_header_field(http_parser *parser, const char *at, size_t length)
{
    struct httpd_conn *conn = parser->data;
    if (conn->header_count == 0 || conn->header_in_value) { /* a new header begins */
        size_t max = conn->server->config.limits.max_headers;
        if (max && conn->header_count == max) {
            conn->reject_status = 431;
            return -1;
        }
        if (conn->header_count == conn->header_cap) {
            conn->header_cap = conn->header_cap ? conn->header_cap * 2 : 16;
            conn->spans = xrealloc(conn->spans, conn->header_cap * sizeof(*conn->spans));
            conn->headers = xrealloc(conn->headers, conn->header_cap * sizeof(*conn->headers));
        }
        conn->spans[conn->header_count++] =
            (struct header_span){.name_offset = conn->header_bytes.len};
        conn->header_in_value = false;
    }
    struct header_span *span = &conn->spans[conn->header_count - 1];
    return conn_append_header_piece(conn, &span->name_len, at, length) ? 0 : -1;
}

static int on_header_value(http_parser *parser, const char *at, size_t length)
{
    struct httpd_conn *conn = parser->data;
    if (conn->header_count == 0)
        return -1;
    struct header_span *span = &conn->spans[conn->header_count - 1];
    if (!conn->header_in_value) {
        conn->header_in_value = true;
        span->value_offset = conn->header_bytes.len;
    }
    return conn_append_header_piece(conn, &span->value_len, at, length) ? 0 : -1;
}

/* A client that sent "Expect: 100-continue" waits for this before its body. */
static void conn_send_continue(struct httpd_conn *conn)
{
    static const char interim[] = "HTTP/1.1 100 Continue\r\n\r\n";
    struct httpd_write *w = write_new(conn, sizeof(interim) - 1, false);
    w->interim = true;
    memcpy(w->data, interim, sizeof(interim) - 1);
    write_submit(conn, w);
}

static bool name_in_list(const char *list, const char *host, size_t n);

/* A header that may come once (Host, by RFC 9112; those of the config's
 * single_headers) came twice: which one, into reject_reason. Two values
 * are not merged or chosen between: the first-wins of one reader and the
 * last-wins of another (a proxy in front) would authorize different
 * things. */
static bool conn_duplicate_header(struct httpd_conn *conn)
{
    const char *single = conn->server->config.single_headers;
    for (size_t i = 0; i < conn->header_count; i++) {
        const struct header_span *a = &conn->spans[i];
        const char *name = conn->header_bytes.data + a->name_offset;
        bool host = a->name_len == 4 && strncasecmp(name, "host", 4) == 0;
        if (!host && !name_in_list(single, name, a->name_len))
            continue;
        for (size_t j = i + 1; j < conn->header_count; j++) {
            const struct header_span *b = &conn->spans[j];
            if (b->name_len == a->name_len &&
                strncasecmp(conn->header_bytes.data + b->name_offset, name, a->name_len) == 0) {
                snprintf(conn->reject_reason, sizeof(conn->reject_reason),
                         "the header %.*s is sent more than once",
                         (int)(a->name_len < 60 ? a->name_len : 60), name);
                return true;
            }
        }
    }
    return false;
}

/* The body is to be read: count it (a Content-Length at once, in full),
 * then let a client that waits for 100 Continue send it. False: refused
 * (reject_status 503, the server holds too many bodies). */
static bool conn_begin_body(struct httpd_conn *conn)
{
    httpd_t *s = conn->server;
    http_parser *parser = &conn->parser;
    if (parser->flags & F_CONTENTLENGTH && parser->content_length > 0) {
        size_t want = (size_t)parser->content_length + 1;
        size_t max = s->config.limits.max_total_body_bytes;
        if (max && s->body_bytes + want > max) {
            conn->reject_status = 503;
            return false;
        }
        conn->body.data = xrealloc(conn->body.data, want); /* the body's exact size, once */
        conn->body.cap = want;
        s->body_bytes += want - conn->body_charge;
        conn->body_charge = want;
    }
    if (s->config.timeouts.header_ms)
        conn_set_phase(conn, HTTPD_READING, s->config.timeouts.idle_ms); /* the body's own time */
    for (size_t i = 0; i < conn->header_count; i++) {
        const struct header_span *span = &conn->spans[i];
        const char *name = conn->header_bytes.data + span->name_offset;
        const char *value = conn->header_bytes.data + span->value_offset;
        if (span->name_len == 6 && strncasecmp(name, "expect", 6) == 0 && span->value_len == 12 &&
            strncasecmp(value, "100-continue", 12) == 0 && parser->http_major == 1 &&
            parser->http_minor >= 1) {
            conn_send_continue(conn);
            break;
        }
    }
    return true;
}

static int on_headers_complete(http_parser *parser)
{
    struct httpd_conn *conn = parser->data;
    httpd_t *s = conn->server;
    const struct httpd_limits *limits = &s->config.limits;
    conn->keep_alive = http_should_keep_alive(parser) != 0;
    conn->head_done = true;
    if ((parser->flags & F_CONTENTLENGTH) && parser->content_length > limits->max_body_bytes) {
        conn->reject_status = 413; /* say so now, not after reading the body */
        return -1;
    }
    if (conn_duplicate_header(conn)) { /* before on_head: which token would it judge? */
        conn->reject_status = 400;
        return -1;
    }
    struct httpd_request head;
    if (s->hooks.on_head && conn_request_view(conn, &head)) {
        head.body = NULL;
        head.body_len = parser->flags & F_CONTENTLENGTH ? (size_t)parser->content_length : 0;
        enum httpd_head_action action = s->hooks.on_head(s->hooks.data, conn, &head);
        if (conn->refused || conn->closing)
            return -1; /* answered: conn_parse_step stops */
        if (action == HTTPD_HEAD_DEFER) {
            conn->deferred = true;
            http_parser_pause(parser, 1); /* resumed by httpd_conn_resume */
            return 0;
        }
    }
    return conn_begin_body(conn) ? 0 : -1;
}

static int on_body(http_parser *parser, const char *at, size_t length)
{
    struct httpd_conn *conn = parser->data;
    httpd_t *s = conn->server;
    size_t max = s->config.limits.max_body_bytes;
    if (length > max - conn->body.len) {
        conn->reject_status = 413;
        return -1;
    }
    size_t total_max = s->config.limits.max_total_body_bytes;
    if (total_max && conn->body.len + length + 1 > conn->body_charge &&
        s->body_bytes - conn->body_charge + conn->body.len + length + 1 > total_max) {
        conn->reject_status = 503; /* chunked: counted as it comes */
        return -1;
    }
    strbuf_append_capped(&conn->body, at, length, max);
    if (conn->body.cap > conn->body_charge) {
        s->body_bytes += conn->body.cap - conn->body_charge;
        conn->body_charge = conn->body.cap;
    }
    return 0;
}

static int on_message_complete(http_parser *parser)
{
    http_parser_pause(parser, 1); /* one request at a time: see conn_drive */
    return 0;
}

static const http_parser_settings parser_settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* ---------------------------------------------------------------- reading */

/* Parses what is buffered, up to one complete request (dispatched) or a
 * refusal. */
static void conn_parse_step(struct httpd_conn *conn)
{
    size_t max_bytes = conn->server->config.limits.max_request_bytes;
    const char *data = conn->input + conn->input_offset;
    size_t available = conn->input_len - conn->input_offset;
    size_t parsed = http_parser_execute(&conn->parser, &parser_settings, data, available);
    conn->input_offset += parsed;
    conn->message_bytes += parsed;
    enum http_errno error = HTTP_PARSER_ERRNO(&conn->parser);
    if (conn->refused || conn->closing)
        return; /* on_head answered */
    if (error == HPE_PAUSED && conn->deferred)
        return; /* on_head deferred the body */
    if (conn->reject_status == 503) {
        conn_reject(conn, 503, "busy: too many request bodies are being read; try again");
    } else if (conn->reject_status == 413 || (max_bytes && conn->message_bytes > max_bytes)) {
        conn_reject(conn, 413, "request too large");
    } else if (conn->reject_status == 414) {
        conn_reject(conn, 414, "request target too long");
    } else if (conn->reject_status == 431 || error == HPE_HEADER_OVERFLOW) {
        conn_reject(conn, 431, "request header fields too large");
    } else if (conn->reject_status == 400) {
        conn_reject(conn, 400, conn->reject_reason);
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

/*
 * Feeds buffered input to the parser until a request is being handled or
 * answered, or the input is used up. Runs after reads, and after an answer
 * was written (a pipelined request may be waiting).
 */
static void conn_drive(struct httpd_conn *conn)
{
    conn->driving = true;
    while (!conn->closing && !conn_busy(conn) && conn->phase != HTTPD_DRAINING &&
           conn->input_offset < conn->input_len)
        conn_parse_step(conn);
    conn->driving = false;
    if (conn->closing || conn->phase == HTTPD_DRAINING)
        return;
    if (conn->input_offset == conn->input_len)
        conn->input_len = conn->input_offset = 0; /* else on_alloc compacts */
    if (!conn_busy(conn)) {
        if (conn->peer_eof)
            conn_close(conn);
        else
            conn_start_reading(conn);
    }
}

static void on_alloc(uv_handle_t *handle, size_t suggested_size, uv_buf_t *buf)
{
    struct httpd_conn *conn = handle->data;
    size_t chunk = conn->server->config.limits.read_chunk_bytes;
    if (chunk == 0)
        chunk = HTTPD_DEFAULT_READ_CHUNK;
    if (conn->phase == HTTPD_DRAINING)
        conn->input_len = conn->input_offset = 0;
    if (conn->input_offset > 0) { /* compact what the parser consumed */
        memmove(conn->input, conn->input + conn->input_offset,
                conn->input_len - conn->input_offset);
        conn->input_len -= conn->input_offset;
        conn->input_offset = 0;
    }
    if (conn->input_cap - conn->input_len < chunk) {
        conn->input_cap = conn->input_len + chunk;
        conn->input = xrealloc(conn->input, conn->input_cap);
    }
    *buf = uv_buf_init(conn->input + conn->input_len,
                       (unsigned int)(conn->input_cap - conn->input_len));
}

static void conn_stop_reading(struct httpd_conn *conn)
{
    if (conn->reading) {
        uv_read_stop((uv_stream_t *)&conn->tcp);
        conn->reading = false;
    }
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct httpd_conn *conn = stream->data;
    if (conn->closing)
        return;
    if (nread < 0) {
        if (nread == UV_EOF && conn_busy(conn)) {
            conn->peer_eof = true; /* perhaps only a half-close: answer, then close */
            conn_stop_reading(conn);
            return;
        }
        conn_close(conn);
        return;
    }
    if (nread == 0)
        return;
    if (conn->phase == HTTPD_DRAINING) {
        conn->input_len = 0;
        return;
    }
    conn->read_ns = uv_hrtime();
    conn->spoke = true;
    conn->input_len += (size_t)nread;
    if (conn_busy(conn)) {
        /* Pipelined bytes wait for the current answer; bound them. */
        size_t held = conn->input_len - conn->input_offset;
        if (held > conn->server->config.limits.max_pipelined_bytes)
            conn_stop_reading(conn);
        return;
    }
    conn_drive(conn);
}

static void conn_start_reading(struct httpd_conn *conn)
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
    struct httpd_conn *conn = timer->data;
    httpd_t *s = conn->server;
    if (conn->phase == HTTPD_HANDLING && conn->delayed) {
        struct httpd_write *w = conn->delayed;
        conn->delayed = NULL;
        write_submit(conn, w);
        return;
    }
    if (conn->phase == HTTPD_HANDLING && s->hooks.on_wait_over) {
        s->hooks.on_wait_over(s->hooks.data, conn);
        return;
    }
    if (conn->phase != HTTPD_DRAINING && s->hooks.on_timeout)
        s->hooks.on_timeout(s->hooks.data, conn, conn->phase);
    conn_close(conn);
}

/* ---------------------------------------------------------------- accepting */

static struct httpd_conn *conn_new(httpd_t *s)
{
    struct httpd_conn *conn = xcalloc(1, sizeof(*conn) + s->config.conn_data_size);
    conn->server = s;
    strbuf_init(&conn->url);
    strbuf_init(&conn->header_bytes);
    strbuf_init(&conn->body);
    uv_tcp_init(s->loop, &conn->tcp);
    uv_timer_init(s->loop, &conn->timer);
    conn->tcp.data = conn->timer.data = conn;
    conn->open_handles = 2;
    s->open_conns++;
    http_parser_init(&conn->parser, HTTP_REQUEST);
    conn->parser.data = conn;
    return conn;
}

/*
 * Room for one more connection under max_connections: the oldest one that
 * has sent nothing since its accept goes first (a flood of silent sockets
 * evicts its own oldest, never a client whose request is being answered),
 * then the oldest idle keep-alive one, then the oldest whose headers are
 * still trickling in (a slow-headers flood evicts its own too). None:
 * false, the new one is refused. Either way on_shed says so.
 */
static bool server_make_room(httpd_t *s)
{
    size_t max = s->config.limits.max_connections;
    if (max == 0 || s->live_conns < max)
        return true;
    struct httpd_conn *silent = NULL, *idle = NULL, *slow = NULL;
    for (struct httpd_conn *c = s->conns; c; c = c->next) { /* newest first: keep the last */
        if (c->phase == HTTPD_READING && !c->head_done && !c->deferred)
            slow = c;
        if (c->phase != HTTPD_IDLE || c->input_len > c->input_offset)
            continue;
        if (!c->spoke)
            silent = c;
        else
            idle = c;
    }
    struct httpd_conn *victim = silent ? silent : (idle ? idle : slow);
    enum httpd_shed why =
        silent ? HTTPD_SHED_SILENT
               : (idle ? HTTPD_SHED_IDLE : (slow ? HTTPD_SHED_SLOW : HTTPD_SHED_FULL));
    if (s->hooks.on_shed)
        s->hooks.on_shed(s->hooks.data, why);
    if (victim == NULL)
        return false;
    conn_close(victim);
    return true;
}

static void on_connection(uv_stream_t *listener, int status)
{
    httpd_t *s = listener->data;
    if (status < 0) {
        if (s->hooks.on_accept_error)
            s->hooks.on_accept_error(s->hooks.data, status);
        return;
    }
    struct httpd_conn *conn = conn_new(s);
    if (uv_accept(listener, (uv_stream_t *)&conn->tcp) != 0 || !server_make_room(s) ||
        (s->hooks.on_accept && !s->hooks.on_accept(s->hooks.data, conn))) {
        conn_close(conn);
        return;
    }
    conn->accepted = true;
    DLIST_PUSH_FRONT(s->conns, conn);
    s->live_conns++;
    uv_tcp_nodelay(&conn->tcp, 1);
    uint64_t first_ms = s->config.timeouts.header_ms;
    conn_set_phase(conn, HTTPD_IDLE, first_ms ? first_ms : s->config.timeouts.idle_ms);
    conn_start_reading(conn);
}

/* ---------------------------------------------------------------- public */

httpd_t *httpd_start(uv_loop_t *loop, const struct sockaddr *addr,
                     const struct httpd_config *config, const struct httpd_hooks *hooks,
                     int *uv_error)
{
    httpd_t *s = xcalloc(1, sizeof(*s));
    s->loop = loop;
    s->config = *config;
    s->hooks = *hooks;
    uv_tcp_init(loop, &s->listener);
    s->listener.data = s;
    s->listener_open = true;
    /* EADDRINUSE may come from bind or only from listen. */
    int rc = uv_tcp_bind(&s->listener, addr, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&s->listener, config->backlog ? config->backlog : SOMAXCONN,
                       on_connection);
    int len = sizeof(s->address);
    if (rc == 0)
        rc = uv_tcp_getsockname(&s->listener, (struct sockaddr *)&s->address, &len);
    if (rc != 0) {
        *uv_error = rc;
        s->closing = true;
        uv_close((uv_handle_t *)&s->listener, on_listener_closed); /* frees s */
        return NULL;
    }
    return s;
}

const struct sockaddr_storage *httpd_address(const httpd_t *s)
{
    return &s->address;
}

int httpd_port(const httpd_t *s)
{
    if (s->address.ss_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)&s->address)->sin6_port);
    return ntohs(((const struct sockaddr_in *)&s->address)->sin_port);
}

void httpd_close(httpd_t *s, void (*on_closed)(void *data), void *data)
{
    if (s->closing)
        return;
    s->closing = true;
    s->on_closed = on_closed;
    s->closed_data = data;
    while (s->conns)
        conn_close(s->conns); /* unlinks itself */
    uv_close((uv_handle_t *)&s->listener, on_listener_closed);
}

httpd_conn_t *httpd_first_conn(httpd_t *s)
{
    return s->conns;
}

httpd_conn_t *httpd_next_conn(httpd_conn_t *conn)
{
    return conn->next;
}

void *httpd_conn_data(httpd_conn_t *conn)
{
    return conn->app_data;
}

enum httpd_phase httpd_conn_phase(const httpd_conn_t *conn)
{
    return conn->phase;
}

size_t httpd_conn_buffered_bytes(const httpd_conn_t *conn)
{
    return conn->input_len - conn->input_offset;
}

void httpd_conn_resume(httpd_conn_t *conn)
{
    if (!conn->deferred || conn->closing)
        return;
    conn->deferred = false;
    http_parser_pause(&conn->parser, 0);
    if (!conn_begin_body(conn)) {
        conn_reject(conn, 503, "busy: too many request bodies are being read; try again");
        return;
    }
    if (!conn->driving)
        conn_drive(conn);
}

void httpd_conn_refuse(httpd_conn_t *conn, int status, const char *headers, const char *json)
{
    if (conn->closing)
        return;
    conn->refused = true;
    conn->deferred = false;
    conn->keep_alive = false; /* the body (if any) was not read: the request cannot end well */
    httpd_respond_json(conn, status, headers, json);
}

void httpd_conn_release_body(httpd_conn_t *conn)
{
    conn_release_body(conn);
}

size_t httpd_body_bytes(const httpd_t *s)
{
    return s->body_bytes;
}

size_t httpd_conn_count(const httpd_t *s)
{
    return s->live_conns;
}

/* ---------------------------------------------------------------- DNS rebinding */

/* host[:port] → the host part's length ("[::1]:80" → 5). */
static size_t host_part_length(const char *value, size_t n)
{
    if (n && value[0] == '[') {
        const char *close = memchr(value, ']', n);
        return close ? (size_t)(close - value) + 1 : n;
    }
    const char *colon = memchr(value, ':', n);
    return colon ? (size_t)(colon - value) : n;
}

/* An IP address written as one (v4, or v6 in brackets); *loopback when it
 * is 127.0.0.0/8 or ::1. */
static bool host_is_ip_literal(const char *host, size_t n, bool *loopback)
{
    char text[INET6_ADDRSTRLEN + 2];
    *loopback = false;
    if (n == 0 || n >= sizeof(text))
        return false;
    if (host[0] == '[') {
        if (n < 3 || host[n - 1] != ']')
            return false;
        memcpy(text, host + 1, n - 2);
        text[n - 2] = '\0';
        struct in6_addr a6;
        if (inet_pton(AF_INET6, text, &a6) != 1)
            return false;
        *loopback = IN6_IS_ADDR_LOOPBACK(&a6);
        return true;
    }
    memcpy(text, host, n);
    text[n] = '\0';
    struct in_addr a4;
    if (inet_pton(AF_INET, text, &a4) != 1)
        return false;
    *loopback = (ntohl(a4.s_addr) >> 24) == 127;
    return true;
}

/* Is host (n bytes) in the comma-separated list (spaces around items ignored)? */
static bool name_in_list(const char *list, const char *host, size_t n)
{
    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *item = p;
        while (len && *item == ' ')
            item++, len--;
        while (len && item[len - 1] == ' ')
            len--;
        if (len == n && !strncasecmp(item, host, n))
            return true;
        p = end ? end + 1 : NULL;
    }
    return false;
}

bool httpd_host_allowed(const struct httpd_request *request, const char *names)
{
    const struct httpd_header *h = httpd_request_header(request, "Host");
    if (h == NULL)
        return true; /* HTTP/1.0 without Host: not a browser */
    size_t n = host_part_length(h->value, h->value_len);
    bool loopback;
    if (host_is_ip_literal(h->value, n, &loopback))
        return true;
    if (n == strlen("localhost") && !strncasecmp(h->value, "localhost", n))
        return true;
    return name_in_list(names, h->value, n);
}

bool httpd_origin_allowed(const struct httpd_request *request, const char *origins)
{
    const struct httpd_header *h = httpd_request_header(request, "Origin");
    if (h == NULL)
        return true; /* not a browser's cross-site request */
    if (name_in_list(origins, h->value, h->value_len))
        return true;
    const char *p = memmem(h->value, h->value_len, "://", 3);
    if (p == NULL)
        return false;
    p += 3;
    size_t rest = h->value_len - (size_t)(p - h->value);
    size_t n = host_part_length(p, rest);
    bool loopback;
    if (host_is_ip_literal(p, n, &loopback))
        return loopback;
    return n == strlen("localhost") && !strncasecmp(p, "localhost", n);
}
