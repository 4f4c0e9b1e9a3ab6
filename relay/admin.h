/*
 * admin.h — the admin HTTP port: health, readiness, metrics, outcome of a key.
 *
 *   GET /healthz           200 {"status":"ok"}: the loop is alive
 *   GET /readyz            200 {"status":"ready"} or 503 {"status":"not ready","reason":"..."}
 *   GET /metrics           200 Prometheus text (write_metrics)
 *   GET /v1/intents/{key}[?wait=30s]  what lookup_intent answers (200, 404, 503);
 *                          with wait, held until the outcome is final (looked up again
 *                          whenever admin_outcomes_changed() says the relay recorded
 *                          something) or the wait (at most 60 s) ends; the key is
 *                          percent-decoded, 1..255 bytes of UTF-8 without control
 *                          characters, else 400 {"error":"..."}
 *
 * HEAD works wherever GET does. Other paths 404, other methods 405, malformed
 * HTTP 400, a request over max_request_bytes 413 (both then close), and a
 * connection beyond max_connections gets 503 and is closed. HTTP/1.1
 * keep-alive and pipelining; "Connection: close" is honoured; every response
 * has Content-Length. Error bodies are JSON: {"error":"..."}. Deadlines: a
 * keep-alive connection idles 60 s, a request arrives within 10 s of its
 * first byte, a lookup answers within 10 s (else 503), an answer is written
 * within 10 s; past a deadline the connection is closed.
 *
 * It runs on the relay's own loop and never blocks it: the hooks are called
 * from the loop, and lookup_intent answers later through done().
 */
#ifndef OUTBOX_ADMIN_H
#define OUTBOX_ADMIN_H

#include "strbuf.h"

#include <stddef.h>
#include <uv.h>

struct admin_hooks {
    void *data;
    /* "" when ready, else the reason (e.g. "database not connected: ..."). */
    const char *(*ready_reason)(void *data);
    /* Append the relay's metrics in Prometheus text format to out. */
    void (*write_metrics)(void *data, struct strbuf *out);
    /* Look up the outcome of a key: call done(req, status, json_body) later
     * (from the loop; calling it before returning is allowed too) exactly
     * once; status 200/404/503. json_body is copied; NULL gives a default
     * {"error":...} body for the status. done() is always safe to call, also
     * after the client went away, the lookup deadline passed or the server
     * was closed: req stays valid until done() runs, and only then is freed. */
    void (*lookup_intent)(void *data, const char *key, void *req,
                          void (*done)(void *req, int status, const char *json_body));
};

typedef struct admin_server admin_server_t;

/* listen is "host:port" (port 0 = any; host a numeric IPv4 or IPv6 address,
 * "[::1]" form for IPv6, "localhost", or empty or "*" for all IPv4
 * interfaces). NULL and a logged error on failure (bad address, port in
 * use); a handle opened on the way is then still closing and is freed when
 * the loop next runs. */
admin_server_t *admin_start(uv_loop_t *loop, const char *listen, struct admin_hooks hooks,
                            int max_connections, size_t max_request_bytes);
/* The relay recorded outcomes: requests waiting with ?wait= look again. */
void admin_outcomes_changed(admin_server_t *s);
/* The bound port. */
int admin_port(const admin_server_t *s);
/* Closes the listener and every connection (an answer being written is cut
 * off; pending lookups are orphaned). on_closed (may be NULL) runs from the
 * loop once every handle is closed; then s is freed. */
void admin_close(admin_server_t *s, void (*on_closed)(void *data), void *data);

#endif
