/*
 * stamp_receiver — the bench's arrival clock (tests/bench/run.sh, trickle).
 *
 * A minimal HTTP/1.1 endpoint (libuv + libhttp-parser) that answers every
 * request `200 {"ok":true}` over keep-alive and remembers, per request, the
 * idempotency key and the CLOCK_MONOTONIC time in µs at which the request
 * began to arrive (the read that carried its first byte). On SIGTERM/SIGINT
 * it writes "key<TAB>arrival_us" lines to --out and exits 0.
 *
 * CLOCK_MONOTONIC, not CLOCK_REALTIME: the trickle driver stamps commits with
 * the same clock on the same host, and a monotonic clock cannot step between
 * the two stamps.
 *
 * Options: --listen-port N (default 0: any), --out FILE (required),
 *          --key-header NAME (default Idempotency-Key).
 * Prints "listening 127.0.0.1:PORT" once bound, like build/test-receiver.
 */
#include <http_parser.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <uv.h>

#define KEY_MAX 256
#define FIELD_MAX 64

struct stamp {
    char key[KEY_MAX];
    int64_t at_us;
};

struct conn {
    uv_tcp_t tcp;
    http_parser parser;
    char field[FIELD_MAX];
    size_t field_len;
    bool field_is_key;
    bool last_was_value;
    char key[KEY_MAX];
    size_t key_len;
    int64_t read_us;  /* time of the read being parsed */
    int64_t begin_us; /* time the current request began to arrive */
    char buf[65536];
};

static struct stamp *stamps;
static size_t stamp_count, stamp_cap;
static const char *key_header = "Idempotency-Key";
static uv_tcp_t server;
static uv_signal_t sig_term, sig_int;

static const char response[] = "HTTP/1.1 200 OK\r\n"
                               "Content-Type: application/json\r\n"
                               "Content-Length: 11\r\n"
                               "\r\n"
                               "{\"ok\":true}";

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void on_closed(uv_handle_t *h)
{
    free(h->data);
}

static int on_message_begin(http_parser *p)
{
    struct conn *c = p->data;
    c->begin_us = c->read_us;
    c->key_len = 0;
    c->field_len = 0;
    c->last_was_value = false;
    c->field_is_key = false;
    return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t len)
{
    struct conn *c = p->data;
    if (c->last_was_value) {
        c->field_len = 0;
        c->last_was_value = false;
    }
    size_t room = FIELD_MAX - 1 - c->field_len;
    size_t n = len < room ? len : room;
    memcpy(c->field + c->field_len, at, n);
    c->field_len += n;
    c->field[c->field_len] = '\0';
    return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t len)
{
    struct conn *c = p->data;
    if (!c->last_was_value) {
        c->last_was_value = true;
        c->field_is_key = strcasecmp(c->field, key_header) == 0;
    }
    if (c->field_is_key) {
        size_t room = KEY_MAX - 1 - c->key_len;
        size_t n = len < room ? len : room;
        memcpy(c->key + c->key_len, at, n);
        c->key_len += n;
        c->key[c->key_len] = '\0';
    }
    return 0;
}

static void on_written(uv_write_t *w, int status)
{
    (void)status;
    free(w);
}

static int on_message_complete(http_parser *p)
{
    struct conn *c = p->data;
    if (stamp_count == stamp_cap) {
        stamp_cap = stamp_cap ? stamp_cap * 2 : 8192;
        stamps = realloc(stamps, stamp_cap * sizeof(*stamps));
        if (stamps == NULL)
            abort();
    }
    struct stamp *s = &stamps[stamp_count++];
    memcpy(s->key, c->key, c->key_len);
    s->key[c->key_len] = '\0';
    if (c->key_len == 0)
        strcpy(s->key, "-");
    s->at_us = c->begin_us;
    uv_write_t *w = malloc(sizeof(*w));
    uv_buf_t b = uv_buf_init((char *)response, sizeof(response) - 1);
    if (w == NULL || uv_write(w, (uv_stream_t *)&c->tcp, &b, 1, on_written) != 0)
        free(w);
    return 0;
}

static const http_parser_settings settings = {
    .on_message_begin = on_message_begin,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_message_complete = on_message_complete,
};

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    (void)suggested;
    struct conn *c = h->data;
    *b = uv_buf_init(c->buf, sizeof(c->buf));
}

static void on_read(uv_stream_t *stream, ssize_t n, const uv_buf_t *b)
{
    struct conn *c = stream->data;
    if (n < 0) {
        uv_close((uv_handle_t *)stream, on_closed);
        return;
    }
    if (n == 0)
        return;
    c->read_us = now_us();
    size_t parsed = http_parser_execute(&c->parser, &settings, b->base, (size_t)n);
    if (parsed != (size_t)n || HTTP_PARSER_ERRNO(&c->parser) != HPE_OK)
        uv_close((uv_handle_t *)stream, on_closed);
}

static void on_connection(uv_stream_t *srv, int status)
{
    if (status < 0)
        return;
    struct conn *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return;
    uv_tcp_init(srv->loop, &c->tcp);
    c->tcp.data = c;
    http_parser_init(&c->parser, HTTP_REQUEST);
    c->parser.data = c;
    if (uv_accept(srv, (uv_stream_t *)&c->tcp) != 0) {
        uv_close((uv_handle_t *)&c->tcp, on_closed);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

static void close_all(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (uv_is_closing(h))
        return;
    uv_close(h, h->type == UV_TCP && h != (uv_handle_t *)&server ? on_closed : NULL);
}

static void on_signal(uv_signal_t *s, int signum)
{
    (void)signum;
    uv_walk(s->loop, close_all, NULL);
}

int main(int argc, char **argv)
{
    int port = 0;
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--listen-port") && i + 1 < argc)
            port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out = argv[++i];
        else if (!strcmp(argv[i], "--key-header") && i + 1 < argc)
            key_header = argv[++i];
        else {
            fprintf(stderr,
                    "usage: stamp_receiver --out FILE [--listen-port N] [--key-header H]\n");
            return 2;
        }
    }
    if (out == NULL) {
        fprintf(stderr, "stamp_receiver: --out FILE is required\n");
        return 2;
    }
    uv_loop_t *loop = uv_default_loop();
    struct sockaddr_in addr;
    uv_ip4_addr("127.0.0.1", port, &addr);
    uv_tcp_init(loop, &server);
    int rc = uv_tcp_bind(&server, (const struct sockaddr *)&addr, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&server, 1024, on_connection);
    if (rc != 0) {
        fprintf(stderr, "stamp_receiver: listen: %s\n", uv_strerror(rc));
        return 1;
    }
    struct sockaddr_storage bound;
    int len = sizeof(bound);
    uv_tcp_getsockname(&server, (struct sockaddr *)&bound, &len);
    printf("listening 127.0.0.1:%d\n", ntohs(((struct sockaddr_in *)&bound)->sin_port));
    fflush(stdout);
    uv_signal_init(loop, &sig_term);
    uv_signal_init(loop, &sig_int);
    uv_signal_start(&sig_term, on_signal, SIGTERM);
    uv_signal_start(&sig_int, on_signal, SIGINT);
    uv_run(loop, UV_RUN_DEFAULT);

    FILE *f = fopen(out, "w");
    if (f == NULL) {
        perror(out);
        return 1;
    }
    for (size_t i = 0; i < stamp_count; i++)
        fprintf(f, "%s\t%lld\n", stamps[i].key, (long long)stamps[i].at_us);
    fclose(f);
    free(stamps);
    uv_loop_close(loop);
    return 0;
}
