/*
 * test_httpd.c — relay/lib/http_server.h over real loopback TCP: what a request looks
 * like to the handler, pipelining in order, every limit of a request (414,
 * 431, 413, 400, the pipelined input that stops reading), HEAD, keep-alive
 * and Connection: close, 204, 100 Continue, delayed answers, the handler's
 * deadline, the idle deadline, half-closed clients, the fault calls (close,
 * reset, raw bytes), and that every handle is closed at the end
 * (uv_loop_close returns 0).
 *
 * One thread: the client is a plain non-blocking socket, and pump() turns
 * the server's loop between reads of it.
 */
#include "../unit.h"

#include "lib/http_server.h"
#include "lib/strbuf.h"

#include <errno.h>
#include <fcntl.h>
#include <http_parser.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---------------------------------------------------------------- the server under test */

enum answer_mode {
    ANSWER_NOW,        /* 200, the path as the body */
    ANSWER_LATER,      /* the same, from a timer 200 ms later (in order) */
    ANSWER_NEVER,      /* the handler keeps the request */
    ANSWER_DELAYED,    /* httpd's delay_ms: 100 */
    ANSWER_WAIT,       /* httpd_conn_wait(30), then 503 from on_wait_over */
    ANSWER_204,        /* 204 with a body that must not be sent */
    ANSWER_CLOSE,      /* httpd_conn_close */
    ANSWER_RESET,      /* httpd_conn_reset */
    ANSWER_RAW,        /* "raw bytes" then close */
    ANSWER_THEN_CLOSE, /* 200, ending the connection */
    ANSWER_STREAM      /* a streamed answer: a part now, a part every 10 ms from on_wait_over,
                          the last at stream_parts_left 0 (never while it is negative) */
};

static uv_loop_t loop;
static httpd_t *server;
static enum answer_mode mode;
static int requests_seen;
static int timeouts_seen;
static enum httpd_phase timeout_phase;
static httpd_conn_t *held[16]; /* ANSWER_LATER / ANSWER_NEVER, in order */
static int held_count;
static uv_timer_t later_timer;
static struct httpd_request last; /* pointers into the connection: read in on_request only */
static char last_path[256], last_query[256], last_body[256], last_header[64];
static size_t last_header_count, last_x_two_count;
static int stream_parts_left; /* ANSWER_STREAM */
static int closes_seen;

static void answer_path(httpd_conn_t *conn, const char *path)
{
    char body[300];
    snprintf(body, sizeof(body), "{\"path\":\"%s\"}", path);
    httpd_respond_json(conn, 200, NULL, body);
}

static void on_later(uv_timer_t *timer)
{
    for (int i = 0; i < held_count; i++)
        answer_path(held[i], "later");
    held_count = 0;
}

static void copy_text(char *out, size_t size, const char *s, size_t n)
{
    snprintf(out, size, "%.*s", (int)n, s);
}

static void note_request(const struct httpd_request *request)
{
    requests_seen++;
    last = *request;
    copy_text(last_path, sizeof(last_path), request->path, request->path_len);
    copy_text(last_query, sizeof(last_query), request->query, request->query_len);
    copy_text(last_body, sizeof(last_body), request->body, request->body_len);
    const struct httpd_header *one = httpd_request_header(request, "x-one");
    copy_text(last_header, sizeof(last_header), one ? one->value : "", one ? one->value_len : 0);
    last_header_count = request->header_count;
    last_x_two_count = httpd_request_header_count(request, "X-TWO");
}

static void on_request(void *data, httpd_conn_t *conn, const struct httpd_request *request)
{
    note_request(request);
    struct httpd_response r = {.status = 200, .body = "{}", .body_len = 2};
    switch (mode) {
    case ANSWER_NOW:
        answer_path(conn, last_path);
        break;
    case ANSWER_LATER:
        held[held_count++] = conn;
        uv_timer_start(&later_timer, on_later, 200, 0); /* far past a scheduling hiccup */
        break;
    case ANSWER_NEVER:
        held[held_count++] = conn;
        break;
    case ANSWER_DELAYED:
        r.delay_ms = 100;
        httpd_respond(conn, &r);
        break;
    case ANSWER_WAIT:
        httpd_conn_wait(conn, 30);
        break;
    case ANSWER_204:
        r.status = 204;
        httpd_respond(conn, &r);
        break;
    case ANSWER_CLOSE:
        httpd_conn_close(conn);
        break;
    case ANSWER_RESET:
        httpd_conn_reset(conn);
        break;
    case ANSWER_RAW:
        httpd_conn_send_raw_and_close(conn, "raw bytes", 9);
        break;
    case ANSWER_THEN_CLOSE:
        httpd_conn_close_after_answer(conn);
        answer_path(conn, last_path);
        break;
    case ANSWER_STREAM:
        ck_assert(!httpd_conn_streaming(conn));
        ck_assert(httpd_stream_begin(conn, 200, "text/event-stream", "X-Stream: 1\r\n"));
        ck_assert(httpd_conn_streaming(conn));
        ck_assert(!httpd_stream_begin(conn, 200, NULL, NULL));  /* once */
        httpd_respond_json(conn, 500, NULL, "{\"ignored\":1}"); /* ignored while streaming */
        ck_assert(httpd_stream_write(conn, ": first\n\n", 9));
        httpd_conn_wait(conn, 10);
        break;
    }
}

static void on_wait_over(void *data, httpd_conn_t *conn)
{
    if (mode == ANSWER_STREAM) {
        if (stream_parts_left == 0) {
            httpd_stream_end(conn, "data: last\n\n", 12);
            return;
        }
        if (stream_parts_left > 0)
            stream_parts_left--;
        httpd_stream_write(conn, ": part\n\n", 8); /* false while one is queued */
        httpd_conn_wait(conn, 10);
        return;
    }
    httpd_respond_error(conn, 503, "Retry-After: 1\r\n", "waited \"long\"");
}

static void on_timeout(void *data, httpd_conn_t *conn, enum httpd_phase phase)
{
    timeouts_seen++;
    timeout_phase = phase;
}

/* on_head: what the test asks of it, for POST /head-… requests only. */
enum head_mode { HEAD_READ, HEAD_DEFER, HEAD_REFUSE };
static enum head_mode head_mode;
static httpd_conn_t *deferred;
static int heads_seen;
static size_t head_length;
static int shed_seen[4];

static enum httpd_head_action on_head(void *data, httpd_conn_t *conn,
                                      const struct httpd_request *head)
{
    heads_seen++;
    head_length = head->body_len;
    ck_assert_ptr_null(head->body);
    if (head_mode == HEAD_REFUSE) {
        httpd_conn_refuse(conn, 401, NULL, "{\"error\":\"who are you\"}");
        return HTTPD_HEAD_READ;
    }
    if (head_mode == HEAD_DEFER) {
        deferred = conn;
        return HTTPD_HEAD_DEFER;
    }
    return HTTPD_HEAD_READ;
}

static void on_shed(void *data, enum httpd_shed why)
{
    shed_seen[why]++;
}

static void on_close(void *data, httpd_conn_t *conn)
{
    closes_seen++;
    if (conn == deferred)
        deferred = NULL;
    for (int i = 0; i < held_count; i++)
        if (held[i] == conn)
            held[i--] = held[--held_count];
}

static struct httpd_config default_config(void)
{
    return (struct httpd_config){
        .limits =
            {
                .max_url_bytes = 1024,
                .max_headers = 16,
                .max_header_bytes = 256,
                .max_body_bytes = 1024,
                .max_pipelined_bytes = 4096,
            },
        .timeouts = {.drain_ms = 100},
    };
}

static void start(const struct httpd_config *config, enum answer_mode how)
{
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    uv_timer_init(&loop, &later_timer);
    mode = how;
    requests_seen = timeouts_seen = held_count = closes_seen = heads_seen = 0;
    memset(shed_seen, 0, sizeof(shed_seen));
    deferred = NULL;
    struct httpd_hooks hooks = {
        .on_head = on_head,
        .on_shed = on_shed,
        .on_request = on_request,
        .on_wait_over = on_wait_over,
        .on_timeout = on_timeout,
        .on_close = on_close,
    };
    struct sockaddr_storage addr;
    ck_assert_ptr_null(httpd_parse_listen("127.0.0.1:0", &addr));
    int error = 0;
    server = httpd_start(&loop, (const struct sockaddr *)&addr, config, &hooks, &error);
    ck_assert_msg(server != NULL, "httpd_start: %s", uv_strerror(error));
}

static void on_server_closed(void *data)
{
    *(bool *)data = true;
}

/* Closes the server; every handle must be closed then. */
static void stop(void)
{
    bool closed = false;
    httpd_close(server, on_server_closed, &closed);
    uv_close((uv_handle_t *)&later_timer, NULL);
    while (!closed)
        uv_run(&loop, UV_RUN_ONCE);
    uv_run(&loop, UV_RUN_NOWAIT);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
}

/* ---------------------------------------------------------------- the client */

static int client_connect(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(httpd_port(server))};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

static void client_send(int fd, const char *bytes)
{
    size_t n = strlen(bytes);
    ck_assert_int_eq(send(fd, bytes, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* Status lines (no body here holds one). */
static size_t count_responses(const struct strbuf *got)
{
    size_t count = 0;
    for (const char *p = got->data; (p = strstr(p, "HTTP/1.1 ")) != NULL; p++)
        count++;
    return count;
}

struct pumped {
    bool eof;
    int error; /* errno of a failed read (ECONNRESET), or 0 */
};

/* Turns the loop and reads fd until EOF, an error, `want` responses (0:
 * until EOF) or max_ms. */
static struct pumped pump(int fd, struct strbuf *got, size_t want, int max_ms)
{
    struct pumped result = {false, 0};
    uint64_t until = uv_hrtime() + (uint64_t)max_ms * 1000000u;
    while (uv_hrtime() < until) {
        uv_run(&loop, UV_RUN_NOWAIT);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 1) <= 0)
            continue;
        char chunk[4096];
        ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
        if (n > 0) {
            strbuf_append(got, chunk, (size_t)n);
            if (want && count_responses(got) >= want)
                break;
            continue;
        }
        if (n == 0)
            result.eof = true;
        else if (errno != EAGAIN)
            result.error = errno;
        if (n == 0 || errno != EAGAIN)
            break;
    }
    uv_run(&loop, UV_RUN_NOWAIT);
    return result;
}

/* One request on a new connection: what came back, and whether it closed. */
static struct pumped exchange(const char *request, struct strbuf *got, size_t want)
{
    int fd = client_connect();
    client_send(fd, request);
    struct pumped result = pump(fd, got, want, 1000);
    close(fd);
    return result;
}

static bool has(const struct strbuf *got, const char *text)
{
    return strstr(got->data, text) != NULL;
}

/* ---------------------------------------------------------------- what the handler sees */

START_TEST(request_parts_reach_the_handler)
{
    struct httpd_config config = default_config();
    start(&config, ANSWER_NOW);
    struct strbuf got;
    strbuf_init(&got);
    struct pumped r = exchange("POST /a/b?x=1&y=2 HTTP/1.1\r\nHost: h\r\nX-One: first\r\n"
                               "x-two: a\r\nX-Two: b\r\nContent-Length: 5\r\n\r\nhello",
                               &got, 1);
    ck_assert_int_eq(requests_seen, 1);
    ck_assert_int_eq(last.method, HTTP_POST);
    ck_assert_str_eq(last_path, "/a/b");
    ck_assert_str_eq(last_query, "x=1&y=2");
    ck_assert_str_eq(last_body, "hello");
    ck_assert_str_eq(last_header, "first");
    ck_assert_uint_eq(last_header_count, 5);
    ck_assert_uint_eq(last_x_two_count, 2);
    ck_assert(last.keep_alive);
    ck_assert(!r.eof);
    ck_assert_msg(has(&got, "HTTP/1.1 200 OK\r\n"), "%s", got.data);
    ck_assert(has(&got, "Content-Length: 15\r\n"));
    ck_assert(!has(&got, "Connection:")); /* HTTP/1.1 keeps the connection silently */
    ck_assert(has(&got, "\r\n\r\n{\"path\":\"/a/b\"}"));
    strbuf_free(&got);
    stop();
}
END_TEST

START_TEST(pipelined_requests_are_answered_in_order)
{
    struct httpd_config config = default_config();
    start(&config, ANSWER_NOW);
    struct strbuf got;
    strbuf_init(&got);
    exchange("GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\nGET /3 HTTP/1.1\r\n\r\n", &got, 3);
    ck_assert_int_eq(requests_seen, 3);
    const char *one = strstr(got.data, "/1"), *two = strstr(got.data, "/2"),
               *three = strstr(got.data, "/3");
    ck_assert(one && two && three && one < two && two < three);
    strbuf_free(&got);
    stop();
}
END_TEST

/* The handler answers later: the next request waits for the answer. */
START_TEST(pipelined_requests_wait_for_a_late_answer)
{
    struct httpd_config config = default_config();
    start(&config, ANSWER_LATER);
    struct strbuf got;
    strbuf_init(&got);
    int fd = client_connect();
    client_send(fd, "GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\n");
    /* the first reaches the handler; the second waits for its answer (the
     * timer's 200 ms: a loaded machine took more than 5 ms between two turns) */
    for (int i = 0; i < 500 && requests_seen < 1; i++)
        pump(fd, &got, 0, 1);
    ck_assert_int_eq(requests_seen, 1);
    ck_assert_int_eq(held_count, 1);
    ck_assert_int_eq(httpd_conn_phase(held[0]), HTTPD_HANDLING);
    pump(fd, &got, 2, 1000);
    ck_assert_int_eq(requests_seen, 2);
    ck_assert_uint_eq(count_responses(&got), 2);
    close(fd);
    strbuf_free(&got);
    stop();
}
END_TEST

/* ---------------------------------------------------------------- limits */

static void assert_refused(const struct strbuf *got, struct pumped r, const char *status_line)
{
    ck_assert_msg(strncmp(got->data, status_line, strlen(status_line)) == 0, "got: %s", got->data);
    ck_assert(has(got, "Connection: close\r\n"));
    ck_assert(has(got, "{\"error\":\""));
    ck_assert_msg(r.eof, "the connection must end after a refusal");
    ck_assert_int_eq(requests_seen, 0);
}

START_TEST(request_target_over_the_limit_is_414)
{
    struct httpd_config config = default_config();
    config.limits.max_url_bytes = 64;
    start(&config, ANSWER_NOW);
    struct strbuf got;
    strbuf_init(&got);
    char request[256];
    snprintf(request, sizeof(request), "GET /%0100d HTTP/1.1\r\n\r\n", 0);
    struct pumped r = exchange(request, &got, 0);
    assert_refused(&got, r, "HTTP/1.1 414 URI Too Long\r\n");
    strbuf_free(&got);
    stop();
}
END_TEST

START_TEST(too_many_headers_is_431)
{
    struct httpd_config config = default_config();
    config.limits.max_headers = 4;
    start(&config, ANSWER_NOW);
    struct strbuf got;
    strbuf_init(&got);
    struct pumped r =
        exchange("GET / HTTP/1.1\r\na: 1\r\nb: 2\r\nc: 3\r\nd: 4\r\ne: 5\r\n\r\n", &got, 0);
    assert_refused(&got, r, "HTTP/1.1 431 Request Header Fields Too Large\r\n");
    strbuf_free(&got);
    stop();
}
END_TEST

START_TEST(header_over_the_limit_is_431)
{
    struct httpd_config config = default_config();
    config.limits.max_header_bytes = 32;
    start(&config, ANSWER_NOW);
    struct strbuf got;
    strbuf_init(&got);
    struct pumped r = exchange(
        "GET / HTTP/1.1\r\nX-Long: 0123456789012345678901234567890123456789\r\n\r\n", &got, 0);
    assert_refused(&got, r, "HTTP/1.1 431 ");
    strbuf_free(&got);
    stop();
}
END_TEST

/* Content-Length over the limit: refused before the body is sent. */
START_TEST(body_over_the_limit_is_413_at_once)
{
    struct httpd_config config = default_config();
    config.limits.max_body_bytes = 16;
    start(&config, ANSWER_NOW);
    struct strbuf got;
    strbuf_init(&got);
    struct pumped r = exchange("POST / HTTP/1.1\r\nContent-Length: 17\r\n\r\n", &got, 0);
    assert_refused(&got, r, "HTTP/1.1 413 Content Too Large\r\n");
    strbuf_free(&got);
    stop();
}
END_TEST

START_TEST(chunked_body_over_the_limit_is_413)
{
    struct httpd_config config = default_config();
    config.limits.max_body_bytes = 16;
    start(&config, ANSWER_NOW);
    struct strbuf got;
    strbuf_init(&got);
    struct pumped r = exchange("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                               "a\r\n0123456789\r\na\r\n0123456789\r\n0\r\n\r\n",
                               &got, 0);
    assert_refused(&got, r, "HTTP/1.1 413 ");
    strbuf_free(&got);
    stop();
}
END_TEST

START_TEST(whole_request_over_the_limit_is_413)
{
    struct httpd_config config = default_config();
    config.limits.max_request_bytes = 48;
    start(&config, ANSWER_NOW);
    struct strbuf got;
    strbuf_init(&got);
    struct pumped r = exchange(
        "GET / HTTP/1.1\r\nA: 0123456789\r\nB: 0123456789\r\nC: 0123456789\r\n\r\n", &got, 0);
    assert_refused(&got, r, "HTTP/1.1 413 ");
    strbuf_free(&got);
    stop();
}
END_TEST

/* A refusal's body is as long as its Content-Length says, also when the
 * bytes began like "HEAD". */
START_TEST(malformed_request_is_400_with_its_whole_body)
{
    struct httpd_config config = default_config();
    start(&config, ANSWER_NOW);
    struct strbuf got;
    strbuf_init(&got);
    struct pumped r = exchange("HEX / HTTP/1.1\r\n\r\n", &got, 0);
    assert_refused(&got, r, "HTTP/1.1 400 Bad Request\r\n");
    const char *length = strstr(got.data, "Content-Length: ");
    const char *body = strstr(got.data, "\r\n\r\n");
    ck_assert(length && body);
    ck_assert_uint_eq(strtoul(length + 16, NULL, 10), strlen(body + 4));
    strbuf_free(&got);
    stop();
}
END_TEST

/* While a request is handled, input is held up to max_pipelined_bytes (plus
 * one read); then reading stops and the client's sends block. */
START_TEST(pipelined_input_is_bounded)
{
    struct httpd_config config = default_config();
    config.limits.max_pipelined_bytes = 2048;
    config.limits.read_chunk_bytes = 1024;
    start(&config, ANSWER_NEVER);
    struct strbuf got;
    strbuf_init(&got);
    int fd = client_connect();
    client_send(fd, "GET /first HTTP/1.1\r\n\r\n");
    pump(fd, &got, 0, 3);
    ck_assert_int_eq(held_count, 1);
    static char filler[65536];
    memset(filler, 'x', sizeof(filler));
    size_t sent = 0;
    bool blocked = false;
    for (int i = 0; i < 4000 && !blocked; i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        ssize_t n = send(fd, filler, sizeof(filler), MSG_NOSIGNAL);
        if (n > 0)
            sent += (size_t)n;
        blocked = n < 0 && errno == EAGAIN && i > 10;
    }
    ck_assert_msg(blocked, "the server kept reading: %zu bytes sent", sent);
    ck_assert_uint_le(httpd_conn_buffered_bytes(held[0]), 2048 + 1024);
    ck_assert_int_eq(requests_seen, 1);
    close(fd);
    strbuf_free(&got);
    stop();
}
END_TEST

/* ---------------------------------------------------------------- answers */

START_TEST(head_gets_no_body_and_the_next_request_follows)
{
    struct httpd_config config = default_config();
    start(&config, ANSWER_NOW);
    struct strbuf got;
    strbuf_init(&got);
    exchange("HEAD /h HTTP/1.1\r\n\r\nGET /g HTTP/1.1\r\n\r\n", &got, 2);
    ck_assert_msg(has(&got, "Content-Length: 13\r\n\r\nHTTP/1.1 200 OK"), "%s", got.data);
    ck_assert(has(&got, "{\"path\":\"/g\"}"));
    ck_assert(!has(&got, "{\"path\":\"/h\"}"));
    strbuf_free(&got);
    stop();
}
END_TEST

START_TEST(connection_close_and_http_1_0)
{
    struct httpd_config config = default_config();
    start(&config, ANSWER_NOW);
    struct strbuf got;
    strbuf_init(&got);
    struct pumped r = exchange("GET / HTTP/1.1\r\nConnection: close\r\n\r\n", &got, 0);
    ck_assert(has(&got, "Connection: close\r\n") && r.eof);
    strbuf_reset(&got);
    r = exchange("GET / HTTP/1.0\r\n\r\n", &got, 0);
    ck_assert(has(&got, "Connection: close\r\n") && r.eof);
    strbuf_reset(&got);
    r = exchange("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", &got, 1);
    ck_assert(has(&got, "Connection: keep-alive\r\n") && !r.eof);
    strbuf_free(&got);
    stop();
}
END_TEST

START_TEST(close_after_answer_ends_the_connection)
{
    struct httpd_config config = default_config();
    start(&config, ANSWER_THEN_CLOSE);
    struct strbuf got;
    strbuf_init(&got);
    struct pumped r = exchange("GET /x HTTP/1.1\r\n\r\nGET /y HTTP/1.1\r\n\r\n", &got, 0);
    ck_assert(r.eof);
    ck_assert_uint_eq(count_responses(&got), 1);
    ck_assert(has(&got, "Connection: close\r\n"));
    strbuf_free(&got);
    stop();
}
END_TEST

START_TEST(no_content_has_no_length_and_no_body)
{
    struct httpd_config config = default_config();
    start(&config, ANSWER_204);
    struct strbuf got;
    strbuf_init(&got);
    exchange("GET / HTTP/1.1\r\n\r\n", &got, 1);
    ck_assert_msg(has(&got, "HTTP/1.1 204 No Content\r\n"), "%s", got.data);
    ck_assert(!has(&got, "Content-Length"));
    ck_assert(!has(&got, "{}"));
    strbuf_free(&got);
    stop();
}
END_TEST

START_TEST(expect_continue_gets_an_interim_answer)
{
    struct httpd_config config = default_config();
    start(&config, ANSWER_NOW);
    struct strbuf got;
    strbuf_init(&got);
    int fd = client_connect();
    client_send(fd, "POST /c HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
    pump(fd, &got, 1, 1000);
    ck_assert_str_eq(got.data, "HTTP/1.1 100 Continue\r\n\r\n");
    client_send(fd, "12345");
    pump(fd, &got, 2, 1000);
    ck_assert(has(&got, "HTTP/1.1 200 OK"));
    ck_assert_str_eq(last_body, "12345");
    close(fd);
    strbuf_free(&got);
    stop();
}
END_TEST

START_TEST(delayed_answer_waits_for_its_delay)
{
    struct httpd_config config = default_config();
    start(&config, ANSWER_DELAYED);
    struct strbuf got;
    strbuf_init(&got);
    uint64_t began = uv_hrtime();
    exchange("GET / HTTP/1.1\r\n\r\n", &got, 1);
    uint64_t took_ms = (uv_hrtime() - began) / 1000000u;
    ck_assert(has(&got, "HTTP/1.1 200 OK"));
    ck_assert_uint_ge(took_ms, 90);
    strbuf_free(&got);
    stop();
}
END_TEST

START_TEST(handler_deadline_calls_on_wait_over)
{
    struct httpd_config config = default_config();
    start(&config, ANSWER_WAIT);
    struct strbuf got;
    strbuf_init(&got);
    exchange("GET / HTTP/1.1\r\n\r\n", &got, 1);
    ck_assert(has(&got, "HTTP/1.1 503 Service Unavailable\r\n"));
    ck_assert(has(&got, "Retry-After: 1\r\n"));
    ck_assert(has(&got, "{\"error\":\"waited \\\"long\\\"\"}"));
    strbuf_free(&got);
    stop();
}
END_TEST

/* Slow bytes buy no time: the idle deadline runs from the accept. */
START_TEST(idle_deadline_closes_idle_and_slow_clients)
{
    struct httpd_config config = default_config();
    config.timeouts.idle_ms = 100;
    start(&config, ANSWER_NOW);
    struct strbuf got;
    strbuf_init(&got);
    int fd = client_connect();
    struct pumped r = pump(fd, &got, 0, 1000);
    ck_assert(r.eof && got.len == 0);
    ck_assert_int_eq(timeouts_seen, 1);
    ck_assert_int_eq(timeout_phase, HTTPD_IDLE);
    close(fd);
    fd = client_connect();
    uint64_t began = uv_hrtime();
    client_send(fd, "GET / HTTP/1.1\r\n");
    pump(fd, &got, 0, 60);
    client_send(fd, "Host: x\r\n");
    r = pump(fd, &got, 0, 1000);
    ck_assert(r.eof);
    ck_assert_int_eq(timeout_phase, HTTPD_READING);
    ck_assert_uint_lt((uv_hrtime() - began) / 1000000u, 180);
    close(fd);
    strbuf_free(&got);
    stop();
}
END_TEST

/* ---------------------------------------------------------------- admission */

/* on_head sees the head before the body: deferred, nothing is read until
 * it resumes; then the request comes whole. */
START_TEST(head_deferred_then_resumed_reads_the_body)
{
    struct httpd_config config = default_config();
    start(&config, ANSWER_NOW);
    head_mode = HEAD_DEFER;
    struct strbuf got;
    strbuf_init(&got);
    int fd = client_connect();
    client_send(fd, "POST /d HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
    pump(fd, &got, 0, 100);
    ck_assert_int_eq(heads_seen, 1);
    ck_assert_uint_eq(head_length, 5);
    ck_assert_int_eq(requests_seen, 0);
    ck_assert_ptr_nonnull(deferred);
    ck_assert_uint_eq(httpd_body_bytes(server), 0); /* nothing counted before it is read */
    head_mode = HEAD_READ;
    httpd_conn_resume(deferred);
    pump(fd, &got, 1, 1000);
    ck_assert_int_eq(requests_seen, 1);
    ck_assert_str_eq(last_body, "hello");
    ck_assert_msg(has(&got, "HTTP/1.1 200 OK\r\n"), "%s", got.data);
    close(fd);
    strbuf_free(&got);
    stop();
}
END_TEST

/* A refusal at the head: answered, the body never read, the connection ends. */
START_TEST(head_refused_is_answered_without_the_body)
{
    struct httpd_config config = default_config();
    start(&config, ANSWER_NOW);
    head_mode = HEAD_REFUSE;
    struct strbuf got;
    strbuf_init(&got);
    struct pumped r = exchange("POST / HTTP/1.1\r\nContent-Length: 1000\r\n\r\nabc", &got, 0);
    head_mode = HEAD_READ;
    ck_assert_msg(strncmp(got.data, "HTTP/1.1 401 Unauthorized\r\n", 27) == 0, "%s", got.data);
    ck_assert(has(&got, "Connection: close\r\n"));
    ck_assert(has(&got, "who are you"));
    ck_assert(r.eof);
    ck_assert_int_eq(requests_seen, 0);
    strbuf_free(&got);
    stop();
}
END_TEST

/* Bodies of all connections together: past max_total_body_bytes, 503. */
START_TEST(bodies_past_the_total_are_503)
{
    struct httpd_config config = default_config();
    config.limits.max_total_body_bytes = 100;
    start(&config, ANSWER_NEVER);
    struct strbuf got, second;
    strbuf_init(&got);
    strbuf_init(&second);
    int one = client_connect();
    client_send(one, "POST / HTTP/1.1\r\nContent-Length: 60\r\n\r\n");
    pump(one, &got, 0, 50);
    ck_assert_uint_eq(httpd_body_bytes(server), 61); /* counted at its head */
    struct pumped r = exchange("POST / HTTP/1.1\r\nContent-Length: 60\r\n\r\n", &second, 0);
    ck_assert_msg(strncmp(second.data, "HTTP/1.1 503 ", 13) == 0, "%s", second.data);
    ck_assert(has(&second, "Retry-After: 1\r\n"));
    ck_assert(r.eof);
    close(one);
    pump(one, &got, 0, 50);
    ck_assert_uint_eq(httpd_body_bytes(server), 0); /* given back with its connection */
    strbuf_free(&got);
    strbuf_free(&second);
    stop();
}
END_TEST

/* At max_connections a new connection evicts the oldest silent one; when
 * none is silent or idle, the new one is refused. A silent connection is
 * closed at header_ms. */
START_TEST(connections_past_the_cap_evict_the_oldest_silent_one)
{
    struct httpd_config config = default_config();
    config.limits.max_connections = 2;
    config.timeouts.idle_ms = 10000;
    config.timeouts.header_ms = 150;
    start(&config, ANSWER_NEVER);
    struct strbuf got;
    strbuf_init(&got);
    int first = client_connect();
    pump(first, &got, 0, 20);
    int second = client_connect();
    pump(second, &got, 0, 20);
    int third = client_connect();
    struct pumped r = pump(first, &got, 0, 100);
    ck_assert_msg(r.eof || r.error, "the oldest silent connection is evicted");
    ck_assert_int_eq(shed_seen[HTTPD_SHED_SILENT], 1);
    ck_assert_uint_eq(httpd_conn_count(server), 2);
    /* both busy with a request the handler keeps: a fourth is refused */
    client_send(second, "GET /a HTTP/1.1\r\n\r\n");
    client_send(third, "GET /b HTTP/1.1\r\n\r\n");
    pump(third, &got, 0, 50);
    ck_assert_int_eq(requests_seen, 2);
    int fourth = client_connect();
    r = pump(fourth, &got, 0, 200);
    ck_assert(r.eof || r.error);
    ck_assert_int_eq(shed_seen[HTTPD_SHED_FULL], 1);
    close(first);
    close(second);
    close(third);
    close(fourth);
    /* a connection that sends nothing is closed at header_ms, not idle_ms */
    int silent = client_connect();
    uint64_t began = uv_hrtime();
    r = pump(silent, &got, 0, 2000);
    ck_assert(r.eof);
    ck_assert_uint_lt((uv_hrtime() - began) / 1000000u, 1000);
    close(silent);
    strbuf_free(&got);
    stop();
}
END_TEST

/* With none silent or idle, the oldest whose headers still trickle in goes. */
START_TEST(connections_past_the_cap_evict_a_slow_head)
{
    struct httpd_config config = default_config();
    config.limits.max_connections = 1;
    start(&config, ANSWER_NOW);
    struct strbuf got;
    strbuf_init(&got);
    int slow = client_connect();
    client_send(slow, "GET / HTTP/1.1\r\nHost: x");
    pump(slow, &got, 0, 30);
    int next = client_connect();
    struct pumped r = pump(slow, &got, 0, 200);
    ck_assert_msg(r.eof || r.error, "the slow one is evicted");
    ck_assert_int_eq(shed_seen[HTTPD_SHED_SLOW], 1);
    client_send(next, "GET /n HTTP/1.1\r\n\r\n");
    pump(next, &got, 1, 500);
    ck_assert_int_eq(requests_seen, 1);
    close(slow);
    close(next);
    strbuf_free(&got);
    stop();
}
END_TEST

/* A client that half-closes after its request still gets the answer. */
START_TEST(half_closed_client_gets_its_answer)
{
    struct httpd_config config = default_config();
    start(&config, ANSWER_LATER);
    struct strbuf got;
    strbuf_init(&got);
    int fd = client_connect();
    client_send(fd, "GET / HTTP/1.1\r\n\r\n");
    shutdown(fd, SHUT_WR);
    struct pumped r = pump(fd, &got, 0, 1000);
    ck_assert(has(&got, "HTTP/1.1 200 OK"));
    ck_assert(r.eof);
    close(fd);
    strbuf_free(&got);
    stop();
}
END_TEST

/* A streamed answer: the head at once (no Content-Length, Connection:
 * close), the parts in order while the handler's deadline goes on, the last
 * part, then the end of the connection; httpd_respond meanwhile is ignored. */
START_TEST(streamed_answer_comes_in_parts_then_closes)
{
    struct httpd_config config = default_config();
    config.response_headers = "Cache-Control: no-store\r\n";
    start(&config, ANSWER_STREAM);
    stream_parts_left = 3;
    struct strbuf got;
    strbuf_init(&got);
    struct pumped r = exchange("POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", &got, 0);
    ck_assert(r.eof);
    ck_assert_msg(has(&got, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"), "%s",
                  got.data);
    ck_assert(has(&got, "Connection: close\r\n"));
    ck_assert(has(&got, "Cache-Control: no-store\r\nX-Stream: 1\r\n\r\n"));
    ck_assert(!has(&got, "Content-Length"));
    ck_assert(!has(&got, "ignored"));
    ck_assert_uint_eq(count_responses(&got), 1);
    const char *body = strstr(got.data, "\r\n\r\n") + 4;
    ck_assert_str_eq(body, ": first\n\n: part\n\n: part\n\n: part\n\ndata: last\n\n");
    strbuf_free(&got);
    stop();
}
END_TEST

/* A client that goes away while its answer streams is noticed: a write
 * fails and the connection closes (on_close), with no answer to wait for. */
START_TEST(streamed_answer_notices_a_client_gone)
{
    struct httpd_config config = default_config();
    start(&config, ANSWER_STREAM);
    stream_parts_left = -1;   /* never the last part */
    signal(SIGPIPE, SIG_IGN); /* as every program on this server does */
    struct strbuf got;
    strbuf_init(&got);
    int fd = client_connect();
    client_send(fd, "GET / HTTP/1.1\r\n\r\n");
    pump(fd, &got, 1, 1000);
    ck_assert(has(&got, ": first"));
    close(fd);
    uint64_t until = uv_hrtime() + 3000000000u;
    while (closes_seen == 0 && uv_hrtime() < until)
        uv_run(&loop, UV_RUN_ONCE);
    ck_assert_int_eq(closes_seen, 1);
    strbuf_free(&got);
    stop();
}
END_TEST

/* RFC 9112 §3.2: two Host lines are a 400; so is a second of a header the
 * config says may come once (any case), before the handler sees it; other
 * headers may repeat. */
START_TEST(a_single_header_sent_twice_is_400)
{
    struct httpd_config config = default_config();
    config.single_headers = "Authorization, X-Key";
    start(&config, ANSWER_NOW);
    struct strbuf got;
    strbuf_init(&got);
    struct pumped r = exchange("GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\nhost: b\r\n\r\n", &got, 1);
    ck_assert_msg(has(&got, "HTTP/1.1 400 Bad Request\r\n"), "%s", got.data);
    ck_assert(has(&got, "{\"error\":\"the header Host is sent more than once\"}"));
    ck_assert(has(&got, "Connection: close\r\n"));
    ck_assert_int_eq(requests_seen, 0);
    strbuf_reset(&got);
    r = exchange("POST / HTTP/1.1\r\nauthorization: Bearer a\r\nAuthorization: Bearer b\r\n"
                 "Content-Length: 2\r\n\r\n{}",
                 &got, 1);
    ck_assert_msg(has(&got, "HTTP/1.1 400 Bad Request\r\n"), "%s", got.data);
    ck_assert(has(&got, "the header authorization is sent more than once"));
    ck_assert_int_eq(requests_seen, 0);
    strbuf_reset(&got);
    exchange("GET / HTTP/1.1\r\nX-Key: 1\r\nx-key: 1\r\n\r\n", &got, 1);
    ck_assert(has(&got, "HTTP/1.1 400 Bad Request\r\n"));
    strbuf_reset(&got);
    r = exchange("GET /ok HTTP/1.1\r\nHost: a\r\nAuthorization: x\r\nX-Key: 1\r\nX-Two: a\r\n"
                 "X-Two: b\r\nX-Keys: 1\r\nX-Keys: 2\r\n\r\n",
                 &got, 1);
    ck_assert_msg(has(&got, "HTTP/1.1 200 OK\r\n"), "%s", got.data);
    ck_assert_int_eq(requests_seen, 1);
    ck_assert(!r.eof);
    strbuf_free(&got);
    stop();
}
END_TEST

/* ---------------------------------------------------------------- fault calls */

START_TEST(close_reset_and_raw_end_the_connection)
{
    struct httpd_config config = default_config();
    start(&config, ANSWER_CLOSE);
    struct strbuf got;
    strbuf_init(&got);
    struct pumped r = exchange("GET / HTTP/1.1\r\n\r\n", &got, 0);
    ck_assert(r.eof && got.len == 0);
    mode = ANSWER_RESET;
    r = exchange("GET / HTTP/1.1\r\n\r\n", &got, 0);
    ck_assert_int_eq(r.error, ECONNRESET);
    ck_assert_uint_eq(got.len, 0);
    mode = ANSWER_RAW;
    r = exchange("GET / HTTP/1.1\r\n\r\n", &got, 0);
    ck_assert(r.eof);
    ck_assert_str_eq(got.data, "raw bytes");
    strbuf_free(&got);
    stop();
}
END_TEST

/* ---------------------------------------------------------------- listen addresses */

START_TEST(listen_addresses)
{
    struct sockaddr_storage addr;
    ck_assert_ptr_null(httpd_parse_listen("127.0.0.1:9464", &addr));
    ck_assert_int_eq(addr.ss_family, AF_INET);
    ck_assert_ptr_null(httpd_parse_listen("localhost:0", &addr));
    ck_assert_ptr_null(httpd_parse_listen("*:80", &addr));
    ck_assert_ptr_null(httpd_parse_listen("[::1]:8080", &addr));
    ck_assert_int_eq(addr.ss_family, AF_INET6);
    ck_assert_ptr_null(httpd_parse_listen("::1:8080", &addr));
    char shown[64];
    ck_assert_ptr_null(httpd_parse_listen("[::1]:8080", &addr));
    httpd_format_address(&addr, shown, sizeof(shown));
    ck_assert_str_eq(shown, "[::1]:8080");
    const char *bad[] = {
        "nohost",           ":9464",   "127.0.0.1:",    "127.0.0.1:70000",  "h:port",
        "db.internal:5432", "[::1:80", "127.0.0.1:+80", "127.0.0.1:123456", "[zz]:1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(httpd_parse_listen(bad[i], &addr) != NULL, "accepted %s", bad[i]);
    ck_assert_ptr_nonnull(httpd_parse_listen(NULL, &addr));
}
END_TEST

Suite *httpd_suite(void)
{
    Suite *s = suite_create("httpd");
    TCase *tc = tcase_create("requests");
    tcase_add_test(tc, request_parts_reach_the_handler);
    tcase_add_test(tc, pipelined_requests_are_answered_in_order);
    tcase_add_test(tc, pipelined_requests_wait_for_a_late_answer);
    suite_add_tcase(s, tc);
    tc = tcase_create("limits");
    tcase_add_test(tc, request_target_over_the_limit_is_414);
    tcase_add_test(tc, too_many_headers_is_431);
    tcase_add_test(tc, header_over_the_limit_is_431);
    tcase_add_test(tc, body_over_the_limit_is_413_at_once);
    tcase_add_test(tc, chunked_body_over_the_limit_is_413);
    tcase_add_test(tc, whole_request_over_the_limit_is_413);
    tcase_add_test(tc, malformed_request_is_400_with_its_whole_body);
    tcase_add_test(tc, pipelined_input_is_bounded);
    tcase_add_test(tc, a_single_header_sent_twice_is_400);
    tcase_add_test(tc, head_deferred_then_resumed_reads_the_body);
    tcase_add_test(tc, head_refused_is_answered_without_the_body);
    tcase_add_test(tc, bodies_past_the_total_are_503);
    tcase_add_test(tc, connections_past_the_cap_evict_the_oldest_silent_one);
    tcase_add_test(tc, connections_past_the_cap_evict_a_slow_head);
    suite_add_tcase(s, tc);
    tc = tcase_create("answers");
    tcase_add_test(tc, head_gets_no_body_and_the_next_request_follows);
    tcase_add_test(tc, connection_close_and_http_1_0);
    tcase_add_test(tc, close_after_answer_ends_the_connection);
    tcase_add_test(tc, no_content_has_no_length_and_no_body);
    tcase_add_test(tc, expect_continue_gets_an_interim_answer);
    tcase_add_test(tc, delayed_answer_waits_for_its_delay);
    tcase_add_test(tc, handler_deadline_calls_on_wait_over);
    tcase_add_test(tc, idle_deadline_closes_idle_and_slow_clients);
    tcase_add_test(tc, half_closed_client_gets_its_answer);
    tcase_add_test(tc, streamed_answer_comes_in_parts_then_closes);
    tcase_add_test(tc, streamed_answer_notices_a_client_gone);
    tcase_add_test(tc, close_reset_and_raw_end_the_connection);
    tcase_set_timeout(tc, 10);
    suite_add_tcase(s, tc);
    tc = tcase_create("listen");
    tcase_add_test(tc, listen_addresses);
    suite_add_tcase(s, tc);
    return s;
}
