/*
 * stamp_receiver — the bench's arrival clock (tests/bench/run.sh, trickle).
 *
 * A minimal HTTP/1.1 endpoint on the relay's HTTP server (relay/lib/http_server.c)
 * that answers every request `200 {"ok":true}` over keep-alive and
 * remembers, per request, the idempotency key and the CLOCK_MONOTONIC time
 * in µs at which the request began to arrive (httpd's arrived_ns: the read
 * that carried its first byte; uv_hrtime() is CLOCK_MONOTONIC). On
 * SIGTERM/SIGINT it writes "key<TAB>arrival_us" lines to --out and exits 0.
 *
 * CLOCK_MONOTONIC, not CLOCK_REALTIME: the trickle driver stamps commits with
 * the same clock on the same host, and a monotonic clock cannot step between
 * the two stamps.
 *
 * Options: --listen-port N (default 0: any), --out FILE (required),
 *          --key-header NAME (default Idempotency-Key).
 * Prints "listening 127.0.0.1:PORT" once bound, like build/test-receiver.
 * Build: make build/bench/stamp_receiver.
 */
#include "lib/http_server.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#define KEY_MAX 256

struct stamp {
    char key[KEY_MAX];
    int64_t at_us;
};

static struct stamp *stamps;
static size_t stamp_count, stamp_cap;
static const char *key_header = "Idempotency-Key";
static httpd_t *server;
static uv_signal_t sig_term, sig_int;

static void on_request(void *data, httpd_conn_t *conn, const struct httpd_request *request)
{
    if (stamp_count == stamp_cap) {
        stamp_cap = stamp_cap ? stamp_cap * 2 : 8192;
        stamps = realloc(stamps, stamp_cap * sizeof(*stamps));
        if (stamps == NULL)
            abort();
    }
    struct stamp *s = &stamps[stamp_count++];
    const struct httpd_header *key = httpd_request_header(request, key_header);
    size_t key_len = key ? key->value_len : 0;
    if (key_len >= KEY_MAX)
        key_len = KEY_MAX - 1;
    if (key_len == 0)
        snprintf(s->key, sizeof(s->key), "-");
    else
        snprintf(s->key, sizeof(s->key), "%.*s", (int)key_len, key->value);
    s->at_us = (int64_t)(request->arrived_ns / 1000);
    httpd_respond_json(conn, 200, NULL, "{\"ok\":true}");
}

static void on_signal_closed(uv_handle_t *handle) {}

static void on_signal(uv_signal_t *s, int signum)
{
    httpd_close(server, NULL, NULL);
    uv_close((uv_handle_t *)&sig_term, on_signal_closed);
    uv_close((uv_handle_t *)&sig_int, on_signal_closed);
}

static int write_stamps(const char *out)
{
    FILE *f = fopen(out, "w");
    if (f == NULL) {
        perror(out);
        return 1;
    }
    for (size_t i = 0; i < stamp_count; i++)
        fprintf(f, "%s\t%lld\n", stamps[i].key, (long long)stamps[i].at_us);
    fclose(f);
    return 0;
}

static int listen_on(uv_loop_t *loop, int port)
{
    struct sockaddr_in addr;
    uv_ip4_addr("127.0.0.1", port, &addr);
    struct httpd_config config = {
        .limits = {.max_body_bytes = 1 << 20,
                   .max_pipelined_bytes = 1 << 20,
                   .read_chunk_bytes = 65536},
        .backlog = 1024,
    };
    struct httpd_hooks hooks = {.on_request = on_request};
    int rc = 0;
    server = httpd_start(loop, (const struct sockaddr *)&addr, &config, &hooks, &rc);
    if (server == NULL) {
        fprintf(stderr, "stamp_receiver: listen: %s\n", uv_strerror(rc));
        return 1;
    }
    printf("listening 127.0.0.1:%d\n", httpd_port(server));
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    int port = 0;
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--listen-port") && i + 1 < argc)
            port = (int)strtol(argv[++i], NULL, 10);
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
    signal(SIGPIPE, SIG_IGN);
    uv_loop_t *loop = uv_default_loop();
    if (listen_on(loop, port) != 0) {
        uv_run(loop, UV_RUN_DEFAULT);
        return 1;
    }
    uv_signal_init(loop, &sig_term);
    uv_signal_init(loop, &sig_int);
    uv_signal_start(&sig_term, on_signal, SIGTERM);
    uv_signal_start(&sig_int, on_signal, SIGINT);
    uv_run(loop, UV_RUN_DEFAULT);
    int rc = write_stamps(out);
    free(stamps);
    uv_loop_close(loop);
    return rc;
}
