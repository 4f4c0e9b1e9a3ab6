/*
 * fuzz_admin_http — whole requests to the admin port (relay/admin/admin.c on
 * relay/lib/http_server.c), over real loopback TCP on the server's own libuv loop:
 * libhttp-parser and httpd's callbacks, limits and phases, routing, the key
 * and ?wait= parsers, the bearer token check, long-polls, pipelining, the
 * connection lanes and every deadline.
 *
 * Input: byte 0 sets the scene, byte 1 where the bytes are split, the rest
 * is what each client sends (then it half-closes and reads to EOF):
 *   bits 0-1  the lookup hook: 0 answers 200 final at once, 1 404 at once,
 *             2 on the next loop turn (200 pending, final the next time),
 *             3 never (the lookup deadline answers; done() comes at the end)
 *   bit 2     a bearer token is required ("fuzz-token-0123")
 *   bit 3     max_request_bytes is 64 (else 8192)
 *   bit 4     the bytes go out in two writes, split at byte 1
 *   bit 5     two clients, max_connections 1 and probe_reserve 1
 *   bit 6     not ready (readyz answers 503 with a reason)
 * A new server per input (port 0), closed at the end, so every allocation
 * of the input is freed by then. admin.o is built with short deadlines
 * (Makefile: FUZZ_ADMIN_DEFS) so that no input takes long.
 *
 * Properties: never a crash, leak or UB; lookup_intent only ever sees a
 * key of 1..255 bytes of UTF-8 without controls; every connection is
 * answered or closed within 2 s; what comes back is a sequence of
 * well-formed HTTP/1.1 responses (checked when no request is HEAD, whose
 * answers have a Content-Length and no body); with a token required and
 * the token not in the input, no metrics and no lookup answer come back.
 */
#include "fuzz.h"

#include "admin/admin.h"
#include "lib/log.h"
#include "lib/strbuf.h"

#include <http_parser.h>
#include <stdbool.h>
#include <unistd.h>
#include <uv.h>

#define TOKEN "fuzz-token-0123"
#define METRIC_MARKER "fuzz_metric_marker"
#define LOOKUP_MARKER "LOOKUP-MARKER"
#define MAX_CLIENTS 2
#define MAX_PENDING 64
#define ITERATION_DEADLINE_MS 2000

struct client {
    uv_tcp_t tcp;
    uv_connect_t connect_req;
    uv_write_t write_req[2];
    uv_shutdown_t shutdown_req;
    uv_timer_t later; /* sends the second part on a later loop turn */
    int open_handles;
    bool done; /* both handles closed */
    bool failed_connect;
    struct strbuf got;
};

struct pending {
    void *req;
    void (*done)(void *req, int status, const char *json_body);
};

static uv_loop_t loop;
static char token_path[64];

/* The scene of the current input. */
static int lookup_mode;
static bool not_ready;
static const char *part[2];
static size_t part_len[2];
static struct client clients[MAX_CLIENTS];
static int client_count;
static struct pending pending[MAX_PENDING];
static int pending_count;
static int lookups_seen;
static uv_timer_t tick;     /* answers lookup_mode 2 on the next turn */
static uv_timer_t deadline; /* ITERATION_DEADLINE_MS */
static bool deadline_passed;
static admin_server_t *server;
static bool server_closed;

static void remove_token_file(void)
{
    if (token_path[0])
        unlink(token_path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    log_set_level(LOG_ERROR);
    snprintf(token_path, sizeof(token_path), "/tmp/outbox-fuzz-token.XXXXXX");
    int fd = mkstemp(token_path);
    FUZZ_CHECK(fd >= 0);
    FUZZ_CHECK(write(fd, TOKEN "\n", sizeof(TOKEN)) == (ssize_t)sizeof(TOKEN));
    close(fd);
    atexit(remove_token_file);
    FUZZ_CHECK(uv_loop_init(&loop) == 0);
    uv_timer_init(&loop, &tick);
    uv_timer_init(&loop, &deadline);
    uv_unref((uv_handle_t *)&tick);
    uv_unref((uv_handle_t *)&deadline);
    return 0;
}

/* ------------------------------------------------------------ the hooks */

static const char *hook_ready_reason(void *data)
{
    return not_ready ? "database not connected: timeout" : "";
}

static void hook_write_metrics(void *data, struct strbuf *out)
{
    strbuf_append_str(out, "# TYPE " METRIC_MARKER " gauge\n" METRIC_MARKER " 1\n");
}

static void answer(struct pending *p)
{
    const char *body = lookups_seen <= 1
                           ? "{\"status\":\"pending\",\"marker\":\"" LOOKUP_MARKER "\"}"
                           : "{\"status\":\"succeeded\",\"marker\":\"" LOOKUP_MARKER "\"}";
    p->done(p->req, 200, body);
}

static void on_tick(uv_timer_t *timer)
{
    /* Answer what is queued now; answers may queue more lookups. */
    struct pending now[MAX_PENDING];
    int n = pending_count;
    memcpy(now, pending, sizeof(now[0]) * (size_t)n);
    pending_count = 0;
    for (int i = 0; i < n; i++)
        answer(&now[i]);
    if (server && !server_closed)
        admin_outcomes_changed(server);
}

static void key_must_be_valid(const char *key)
{
    size_t len = strlen(key);
    FUZZ_CHECK(len >= 1 && len <= ADMIN_KEY_MAX_BYTES);
    FUZZ_CHECK(fuzz_utf8_valid((const unsigned char *)key, len, 0));
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)key[i];
        FUZZ_CHECK(c >= 0x20 && c != 0x7F);
        FUZZ_CHECK(!(c == 0xC2 && (unsigned char)key[i + 1] < 0xA0));
    }
}

static void hook_lookup_intent(void *data, const char *key, void *req,
                               void (*done)(void *req, int status, const char *json_body))
{
    key_must_be_valid(key);
    lookups_seen++;
    switch (lookup_mode) {
    case 0:
        done(req, 200, "{\"status\":\"succeeded\",\"marker\":\"" LOOKUP_MARKER "\"}");
        return;
    case 1:
        done(req, 404, NULL);
        return;
    default:
        if (pending_count == MAX_PENDING) {
            done(req, 503, NULL);
            return;
        }
        pending[pending_count++] = (struct pending){req, done};
        if (lookup_mode == 2)
            uv_timer_start(&tick, on_tick, 0, 0);
        return;
    }
}

/* ------------------------------------------------------------ the clients */

static void on_client_closed(uv_handle_t *handle)
{
    struct client *c = handle->data;
    if (--c->open_handles == 0)
        c->done = true;
}

static void client_close(struct client *c)
{
    if (uv_is_closing((uv_handle_t *)&c->tcp))
        return;
    uv_close((uv_handle_t *)&c->later, on_client_closed);
    /* A reset, not a FIN: no TIME_WAIT socket per input. */
    if (uv_tcp_close_reset(&c->tcp, on_client_closed) != 0)
        uv_close((uv_handle_t *)&c->tcp, on_client_closed);
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    static char chunk[65536];
    *buf = uv_buf_init(chunk, sizeof(chunk));
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct client *c = stream->data;
    if (nread > 0) {
        if (c->got.len < (1u << 20))
            strbuf_append(&c->got, buf->base, (size_t)nread);
        return;
    }
    if (nread < 0)
        client_close(c); /* EOF, or the server reset the connection */
}

static void on_written(uv_write_t *req, int status) {}

static void on_shutdown(uv_shutdown_t *req, int status) {}

static void send_part(struct client *c, int i)
{
    if (part_len[i] == 0)
        return;
    uv_buf_t buf = uv_buf_init((char *)part[i], (unsigned int)part_len[i]);
    uv_write(&c->write_req[i], (uv_stream_t *)&c->tcp, &buf, 1, on_written);
}

static void on_later(uv_timer_t *timer)
{
    struct client *c = timer->data;
    if (uv_is_closing((uv_handle_t *)&c->tcp))
        return;
    send_part(c, 1);
    uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp, on_shutdown);
}

static void on_connect(uv_connect_t *req, int status)
{
    struct client *c = req->data;
    if (status < 0) {
        c->failed_connect = true;
        client_close(c);
        return;
    }
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    send_part(c, 0);
    if (part_len[1] > 0) {
        uv_timer_start(&c->later, on_later, 0, 0);
    } else {
        uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp, on_shutdown);
    }
}

static void client_start(struct client *c, int port)
{
    memset(c, 0, sizeof(*c));
    strbuf_init(&c->got);
    uv_tcp_init(&loop, &c->tcp);
    uv_timer_init(&loop, &c->later);
    c->tcp.data = c->later.data = c->connect_req.data = c;
    c->open_handles = 2;
    struct sockaddr_in addr;
    uv_ip4_addr("127.0.0.1", port, &addr);
    if (uv_tcp_connect(&c->connect_req, &c->tcp, (const struct sockaddr *)&addr, on_connect) != 0) {
        c->failed_connect = true;
        client_close(c);
    }
}

/* ------------------------------------------------------------ checking answers */

struct response_check {
    int complete;
};

static int on_response_complete(http_parser *p)
{
    ((struct response_check *)p->data)->complete++;
    return 0;
}

/* What came back, shown when a property about it breaks. */
static void dump(const char *what, const struct strbuf *got)
{
    dprintf(2, "%s (%zu bytes):\n", what, got->len);
    for (size_t i = 0; i < got->len && i < 4096; i++) {
        unsigned char c = (unsigned char)got->data[i];
        if (c == '\n' || (c >= 0x20 && c < 0x7F))
            dprintf(2, "%c", c);
        else
            dprintf(2, "\\x%02x", c);
    }
    dprintf(2, "\n");
}

static void check_responses(const struct strbuf *got)
{
    if (got->len == 0)
        return;
    http_parser parser;
    http_parser_init(&parser, HTTP_RESPONSE);
    struct response_check check = {0};
    parser.data = &check;
    http_parser_settings settings;
    memset(&settings, 0, sizeof(settings));
    settings.on_message_complete = on_response_complete;
    size_t parsed = http_parser_execute(&parser, &settings, got->data, got->len);
    bool well_formed = HTTP_PARSER_ERRNO(&parser) == HPE_OK && parsed == got->len;
    http_parser_execute(&parser, &settings, NULL, 0); /* EOF */
    if (!well_formed || check.complete < 1 || got->len < 9 ||
        memcmp(got->data, "HTTP/1.1 ", 9) != 0)
        dump("the answer", got);
    FUZZ_CHECK(got->len >= 9 && memcmp(got->data, "HTTP/1.1 ", 9) == 0);
    FUZZ_CHECK(well_formed);
    FUZZ_CHECK(check.complete >= 1); /* at least one whole response, body included */
}

static bool contains(const uint8_t *data, size_t size, const char *needle)
{
    return memmem(data, size, needle, strlen(needle)) != NULL;
}

/* ------------------------------------------------------------ one input */

static void on_server_closed(void *data)
{
    server_closed = true;
}

static void on_deadline(uv_timer_t *timer)
{
    deadline_passed = true;
}

static bool clients_done(void)
{
    for (int i = 0; i < client_count; i++)
        if (!clients[i].done)
            return false;
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    uint8_t scene = data[0];
    size_t split = data[1];
    const uint8_t *bytes = data + 2;
    size_t n = size - 2;

    lookup_mode = scene & 3;
    bool token = scene & 4;
    not_ready = scene & 64;
    client_count = scene & 32 ? 2 : 1;
    part[0] = (const char *)bytes;
    part_len[0] = n;
    part[1] = NULL;
    part_len[1] = 0;
    if ((scene & 16) && split < n) {
        part_len[0] = split;
        part[1] = (const char *)bytes + split;
        part_len[1] = n - split;
    }
    pending_count = 0;
    lookups_seen = 0;
    deadline_passed = false;
    server_closed = false;

    struct admin_hooks hooks = {
        .data = NULL,
        .ready_reason = hook_ready_reason,
        .write_metrics = hook_write_metrics,
        .lookup_intent = hook_lookup_intent,
    };
    struct admin_limits limits = {
        .max_connections = client_count == 2 ? 1 : 4,
        .max_waits = client_count == 2 ? 1 : 4,
        .probe_reserve = client_count == 2 ? 1 : 0,
        .max_request_bytes = scene & 8 ? 64 : 8192,
    };
    server = admin_start(&loop, "127.0.0.1:0", hooks, &limits, token ? token_path : NULL);
    FUZZ_CHECK(server != NULL);
    int port = admin_port(server);

    for (int i = 0; i < client_count; i++)
        client_start(&clients[i], port);
    uv_timer_start(&deadline, on_deadline, ITERATION_DEADLINE_MS, 0);
    while (!clients_done() && !deadline_passed)
        uv_run(&loop, UV_RUN_ONCE);
    bool stuck = !clients_done();
    for (int i = 0; i < client_count; i++)
        client_close(&clients[i]);

    admin_close(server, on_server_closed, NULL);
    while (!server_closed || !clients_done())
        uv_run(&loop, UV_RUN_ONCE);
    server = NULL;
    /* Lookups still out: done() after the server is gone only frees them. */
    while (pending_count > 0) {
        struct pending p = pending[--pending_count];
        p.done(p.req, 503, NULL);
    }
    uv_timer_stop(&tick);
    uv_timer_stop(&deadline);
    uv_run(&loop, UV_RUN_NOWAIT);

    FUZZ_CHECK(!stuck); /* every connection answered or closed within 2 s */
    for (int i = 0; i < client_count; i++) {
        struct client *c = &clients[i];
        FUZZ_CHECK(!c->failed_connect);
        if (!contains(bytes, n, "HEAD"))
            check_responses(&c->got);
        if (token && !contains(bytes, n, TOKEN)) {
            FUZZ_CHECK(!contains((const uint8_t *)c->got.data, c->got.len, METRIC_MARKER));
            FUZZ_CHECK(!contains((const uint8_t *)c->got.data, c->got.len, LOOKUP_MARKER));
        }
        strbuf_free(&c->got);
    }
    return 0;
}
