/*
 * http_server.h — the one HTTP/1.1 server of the project, on a libuv loop: the
 * relay's admin port (relay/admin/admin.c) and the test receivers
 * (tests/receiver/, tests/inbox/, tests/bench/stamp_receiver.c) are built
 * on it.
 *
 * What it owns:
 *   - the listening socket, and per connection a TCP handle, one timer and
 *     the input buffer; all freed in their close callbacks;
 *   - parsing (libhttp-parser) with every part bounded: request target,
 *     header count and size, body, the whole request on the wire, and the
 *     pipelined input held while an answer is pending;
 *   - one request at a time per connection, answers in order (pipelining);
 *   - the phases of a connection and the deadline of each (enum httpd_phase);
 *   - writing answers (status line, Content-Length, Connection, HEAD), and
 *     streamed answers whose body comes in parts (httpd_stream_*);
 *   - the lingering close after an answer that ends the connection;
 *   - the ways to end a connection without an answer that a fault-injecting
 *     receiver needs: a plain close, a reset, raw bytes then a close.
 * What it does not own: routes, bodies of answers, any application state,
 * logging (hooks report what a log would say).
 *
 * Parse errors are answered by the server itself and end the connection:
 * 400 malformed or a header that may come once sent twice (Host; the
 * config's single_headers), 413 a body or the whole request too large, 414 a request
 * target too long, 431 too many or too large headers; the answer is
 * {"error":"..."} like every error answer made here.
 */
#ifndef OUTBOX_HTTPD_H
#define OUTBOX_HTTPD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct httpd httpd_t;
typedef struct httpd_conn httpd_conn_t;

/* Every connection is in exactly one phase; each phase has its deadline on
 * the connection's one timer (the config's, 0 = none). */
enum httpd_phase {
    /* Waiting for the first byte of a request: after the accept or after an
     * answer on a keep-alive connection. Deadline: idle_ms, closes. */
    HTTPD_IDLE,
    /* A request has begun and is not complete. The clock of IDLE keeps
     * running: slow bytes buy no time. */
    HTTPD_READING,
    /* A complete request is with the handler, which has not answered yet.
     * No deadline unless the handler sets one (httpd_conn_wait, then
     * on_wait_over) or answers with a delay (then the answer is written). */
    HTTPD_HANDLING,
    /* An answer is being written (or the write side shut down after it).
     * Deadline: write_ms, closes. */
    HTTPD_WRITING,
    /* Answered with "Connection: close" and the write side shut down:
     * input is read and discarded until EOF, so that late request bytes do
     * not turn our FIN into a RST that destroys the answer. Deadline:
     * drain_ms, closes. */
    HTTPD_DRAINING,
};

struct httpd_limits {
    size_t max_request_bytes;   /* one request on the wire, line to body; 413 (0 = no cap) */
    size_t max_url_bytes;       /* the request target; 414 (0 = only max_request_bytes) */
    size_t max_headers;         /* header lines of a request; 431 (0 = no cap) */
    size_t max_header_bytes;    /* one header name or one value; 431 (0 = the parser's 80 KiB) */
    size_t max_body_bytes;      /* a body (Content-Length at once, chunked as it comes); 413 */
    size_t max_pipelined_bytes; /* input held while a request is answered; reading pauses */
    size_t read_chunk_bytes;    /* the input buffer grows by this much (0 = 4096) */
    /* Bodies of all connections together, being read or with the handler
     * (until it answers or calls httpd_conn_release_body): a body that
     * would pass it is refused with 503 and Retry-After (0 = no cap). */
    size_t max_total_body_bytes;
    /* Accepted connections open at once (0 = no cap). Past it a new
     * connection evicts the oldest one that has sent nothing yet, else the
     * oldest idle keep-alive one, else the oldest whose request's headers
     * are still coming, else it is refused (closed at once). */
    size_t max_connections;
};

struct httpd_timeouts {
    uint64_t idle_ms;  /* accept or last answer → a complete request (0 = none) */
    uint64_t write_ms; /* an answer written (0 = none) */
    uint64_t drain_ms; /* the lingering close (0 = close at once) */
    /* accept → the head of the first request; the body then gets idle_ms
     * of its own (0 = idle_ms from the accept to the complete request) */
    uint64_t header_ms;
};

struct httpd_header {
    const char *name, *value; /* not NUL-terminated */
    size_t name_len, value_len;
};

/* A complete request, valid until the connection answers or closes. */
struct httpd_request {
    int method;      /* enum http_method of <http_parser.h> */
    bool head;       /* HEAD: answers go without their body */
    bool keep_alive; /* what the request asks for (HTTP/1.x rules) */
    unsigned short http_major, http_minor;
    const char *url; /* the request target as sent (NUL-terminated) */
    size_t url_len;
    const char *path, *query;   /* parts of url; path_len 0 when it has none */
    size_t path_len, query_len; /* query "" when none */
    const struct httpd_header *headers;
    size_t header_count;
    const char *body; /* NUL-terminated; "" when none */
    size_t body_len;
    uint64_t arrived_ns; /* uv_hrtime() of the read with the request's first byte */
};

struct httpd_response {
    int status;
    const char *content_type; /* NULL: application/json */
    const char *headers;      /* more header lines, each ending "\r\n"; NULL: none */
    const char *body;
    size_t body_len;
    uint64_t delay_ms; /* written this much later (the connection stays HANDLING) */
};

/* What on_head decides about the body of a request. */
enum httpd_head_action {
    HTTPD_HEAD_READ,  /* read the body, then on_request */
    HTTPD_HEAD_DEFER, /* read nothing more until httpd_conn_resume or httpd_conn_refuse */
};

/* Why a connection was shed to stay under max_connections (on_shed). */
enum httpd_shed {
    HTTPD_SHED_SILENT, /* evicted: it had sent nothing since it was accepted */
    HTTPD_SHED_IDLE,   /* evicted: an idle keep-alive connection */
    HTTPD_SHED_SLOW,   /* evicted: its request's headers are still coming */
    HTTPD_SHED_FULL,   /* the new connection refused: nothing could be evicted */
};

struct httpd_hooks {
    void *data;
    /* A new connection (accepted, not yet read): false closes it at once. */
    bool (*on_accept)(void *data, httpd_conn_t *conn);
    /* A complete request: answer it now or later with httpd_respond*, or end
     * the connection with httpd_conn_close/reset/send_raw_and_close. */
    void (*on_request)(void *data, httpd_conn_t *conn, const struct httpd_request *request);
    /* The head of a request (request line and headers) was read, its body
     * not yet: head->body is NULL and head->body_len the Content-Length (0
     * when none or chunked). Decide before the body costs memory: read it,
     * defer it, or answer now with httpd_conn_refuse. NULL: read it. */
    enum httpd_head_action (*on_head)(void *data, httpd_conn_t *conn,
                                      const struct httpd_request *head);
    /* A connection shed for max_connections (for a log and a counter). */
    void (*on_shed)(void *data, enum httpd_shed why);
    /* The deadline set with httpd_conn_wait passed (NULL: the connection closes). */
    void (*on_wait_over)(void *data, httpd_conn_t *conn);
    /* An accepted connection is closing (any reason): forget it now. Its
     * data (httpd_conn_data) is freed once its handles are closed. */
    void (*on_close)(void *data, httpd_conn_t *conn);
    /* For logs, all may be NULL: a request the server refused (the status
     * it answers, why); a deadline that closes a connection (its phase,
     * never DRAINING); accept() failing (a libuv error). */
    void (*on_reject)(void *data, httpd_conn_t *conn, int status, const char *reason);
    void (*on_timeout)(void *data, httpd_conn_t *conn, enum httpd_phase phase);
    void (*on_accept_error)(void *data, int uv_error);
};

struct httpd_config {
    struct httpd_limits limits;
    struct httpd_timeouts timeouts;
    const char *response_headers; /* on every answer, e.g. "Cache-Control: no-store\r\n" */
    /* Comma-separated header names a request may carry once (any case); a
     * second one is refused with 400 before the body is read. Host always. */
    const char *single_headers;
    size_t conn_data_size; /* zeroed bytes per connection for the application */
    int backlog;           /* of listen(); 0 = SOMAXCONN */
};

/* "host:port" → a socket address; NULL, or what is wrong with it. The host
 * is a numeric IPv4 or IPv6 address ("[::1]:80" or "::1:80"), "localhost"
 * (127.0.0.1) or "*" (every IPv4 interface): never a name to look up, which
 * would block the loop. Port 0 lets the kernel pick one. */
const char *httpd_parse_listen(const char *listen, struct sockaddr_storage *addr);
/* "127.0.0.1:8080" or "[::1]:8080" into out. */
void httpd_format_address(const struct sockaddr_storage *addr, char *out, size_t size);

/* Binds and listens. NULL on failure with *uv_error set (then a handle is
 * still closing and is freed when the loop next runs). */
httpd_t *httpd_start(uv_loop_t *loop, const struct sockaddr *addr,
                     const struct httpd_config *config, const struct httpd_hooks *hooks,
                     int *uv_error);
/* The bound address, and its port. */
const struct sockaddr_storage *httpd_address(const httpd_t *server);
int httpd_port(const httpd_t *server);
/* Closes the listener and every connection (an answer being written is cut
 * off); on_closed (may be NULL) runs from the loop once every handle is
 * closed, and then server is freed. */
void httpd_close(httpd_t *server, void (*on_closed)(void *data), void *data);

/* Accepted connections that are not closing, newest first. A hook may close
 * the connection it is given while iterating: take the next one first. */
httpd_conn_t *httpd_first_conn(httpd_t *server);
httpd_conn_t *httpd_next_conn(httpd_conn_t *conn);
void *httpd_conn_data(httpd_conn_t *conn);
enum httpd_phase httpd_conn_phase(const httpd_conn_t *conn);
const char *httpd_phase_name(enum httpd_phase phase);
/* Bytes read and not yet parsed (pipelined input, bounded). */
size_t httpd_conn_buffered_bytes(const httpd_conn_t *conn);

/* Answers the request being handled (once). A connection that closed or
 * answered already ignores it. */
void httpd_respond(httpd_conn_t *conn, const struct httpd_response *response);
void httpd_respond_json(httpd_conn_t *conn, int status, const char *headers, const char *json);
/* {"error":"<message>"}, the message escaped for JSON. */
void httpd_respond_error(httpd_conn_t *conn, int status, const char *headers, const char *message);
/* The answer to the current request ends the connection, whatever the
 * request asked for. */
void httpd_conn_close_after_answer(httpd_conn_t *conn);
/* While HANDLING: on_wait_over runs in timeout_ms unless an answer comes
 * first (a later call replaces the deadline). */
void httpd_conn_wait(httpd_conn_t *conn, uint64_t timeout_ms);

/* A streamed answer (Server-Sent Events, or a long wait kept alive): the
 * status line and headers go at once, without Content-Length and with
 * "Connection: close" (the body ends with the connection). The connection
 * stays HANDLING: httpd_conn_wait and on_wait_over go on as before, and
 * httpd_respond is ignored from then on. httpd_stream_begin: false when it
 * cannot (answered already, closing, a HEAD request). httpd_stream_write:
 * a part of the body; false when it was not written, because the connection
 * is closing or the previous part is still queued (a client that does not
 * read is not buffered for). A write that fails closes the connection
 * (on_close): that is how a client that went away is noticed.
 * httpd_stream_end: the last part, then the lingering close. */
bool httpd_stream_begin(httpd_conn_t *conn, int status, const char *content_type,
                        const char *headers);
bool httpd_stream_write(httpd_conn_t *conn, const char *data, size_t n);
void httpd_stream_end(httpd_conn_t *conn, const char *data, size_t n);
bool httpd_conn_streaming(const httpd_conn_t *conn);
/* After on_head deferred: read the body after all (it may still be
 * refused with 503 by max_total_body_bytes), or answer without reading it
 * (any time while reading: the connection ends after the answer). */
void httpd_conn_resume(httpd_conn_t *conn);
void httpd_conn_refuse(httpd_conn_t *conn, int status, const char *headers, const char *json);
/* The handler is done with request->body (it becomes ""): its memory goes
 * back and no longer counts in max_total_body_bytes. */
void httpd_conn_release_body(httpd_conn_t *conn);
/* Body bytes held now (what max_total_body_bytes caps); connections open. */
size_t httpd_body_bytes(const httpd_t *server);
size_t httpd_conn_count(const httpd_t *server);

/* Ending a connection without an answer (fault injection, a lost reply):
 * close (a FIN; a RST if unread input is left), reset (SO_LINGER 0: a RST),
 * or write raw bytes and then close as after an answer (lingering). */
void httpd_conn_close(httpd_conn_t *conn);
void httpd_conn_reset(httpd_conn_t *conn);
void httpd_conn_send_raw_and_close(httpd_conn_t *conn, const char *bytes, size_t n);

/* Percent-decodes n bytes of s into out (NUL-terminated): the decoded
 * length; -1 at a malformed escape ("%", "%4", "%zz"); -2 as soon as the
 * result would not fit in out_size - 1 bytes. */
long httpd_percent_decode(const char *s, size_t n, char *out, size_t out_size);
/* The same for a value of an application/x-www-form-urlencoded form, where
 * '+' also stands for a space. */
long httpd_form_decode(const char *s, size_t n, char *out, size_t out_size);

/* DNS rebinding: a web page on a name its owner points at 127.0.0.1 can
 * make a browser send requests here that carry that name as Host (and its
 * own Origin). httpd_host_allowed: no Host (not a browser), an IP address
 * written as one (a browser sends the page's own name, never an address it
 * was rebound to), localhost, or a name in the comma-separated list names
 * (ports ignored, any case). httpd_origin_allowed: no Origin, one in the
 * comma-separated list origins (exactly), or a loopback origin
 * (http://localhost:…, http://127.0.0.1:…, http://[::1]:…). */
bool httpd_host_allowed(const struct httpd_request *request, const char *names);
bool httpd_origin_allowed(const struct httpd_request *request, const char *origins);

/* The first header of that name (any case), or NULL; how many there are. */
const struct httpd_header *httpd_request_header(const struct httpd_request *request,
                                                const char *name);
size_t httpd_request_header_count(const struct httpd_request *request, const char *name);

#endif
