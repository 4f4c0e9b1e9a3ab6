/*
 * admin.h — the admin HTTP port: health, readiness, metrics, outcome of a key,
 * status page.
 *
 *   GET /healthz           200 {"status":"ok"}: the loop is alive
 *   GET /readyz            200 {"status":"ready"} or 503 {"status":"not ready","reason":"..."},
 *                          with "databases":{"NAME":"ready" or why not} when the relay
 *                          serves several (hooks.ready_databases)
 *   GET /metrics           200 Prometheus text (write_metrics, then the port's own
 *                          outbox_admin_* families)
 *   GET /v1/intents/{key}[?wait=30s][&database=NAME]  what lookup_intent answers
 *                          (200, 404, 503); database picks one of --databases;
 *                          with wait, held until the outcome is final or the wait (at
 *                          most 60 s) ends, then looked up once more and answered. While
 *                          held it is looked up again every second (one lookup per key,
 *                          whoever waits on it: outcomes recorded by any relay or an
 *                          operator) and at once when admin_outcomes_changed() says this
 *                          relay recorded something. The key is percent-decoded, 1..255
 *                          bytes of UTF-8 without control characters, else 400
 *                          {"error":"..."}. More than max_waits held at once: 429 with
 *                          Retry-After: 1. A 200 to a request with wait says how the
 *                          wait ended: "Outbox-Wait: final" (the outcome is final) or
 *                          "Outbox-Wait: timed-out" (the wait ended first: the body is
 *                          the status as it is); a wait asked for longer than 60 s
 *                          gets "Outbox-Wait-Capped: 60s" too.
 *   GET /ui                the status page (relay/admin/ui.c, relay/admin/ui_html.c), when
 *                          hooks.ui_config is set: HTML, per target live states,
 *                          circuit, oldest pending age, 5-minute success ratio and
 *                          p95; stuck keys; intents awaiting approval, with why; recent
 *                          failures; a search box. 503 with an HTML message while the
 *                          database is away.
 *   GET /ui/intents?key=K  the search box: 303 to /ui/intents/{K percent-encoded}
 *   GET /ui/intents/{key}  the whole life of one key (200, 404, 400, 503)
 *                          With hooks.ui_of (--databases): /ui lists the databases
 *                          with their counts (hooks.ui_index), each linked to
 *                          /ui?database=NAME, its own overview; a key's page and the
 *                          search take ?database=NAME as /v1/intents does (without
 *                          it, 404 saying so; an unknown NAME 404).
 *                          Every /ui answer is text/html with a Content-Security-
 *                          Policy of default-src 'none' (inline styles only).
 *
 * With a token (token_file), /metrics, /v1/ and /ui need "Authorization: Bearer
 * <token>", else 401 with WWW-Authenticate: Bearer; /ui also takes "Basic" with
 * the token as the password (what a browser sends once asked: its 401 says
 * WWW-Authenticate: Basic too). /healthz and /readyz never need it (the
 * kubelet's probes carry no credentials).
 *
 * HEAD works wherever GET does. Other paths 404, other methods 405, malformed
 * HTTP 400, a request over max_request_bytes 413 (both then close). HTTP/1.1
 * keep-alive and pipelining; "Connection: close" is honoured; every response
 * has Content-Length. Error bodies are JSON: {"error":"..."}. The HTTP
 * server underneath is relay/lib/http_server.c; this file is the routes and policies.
 *
 * Connections: max_connections serve any request; beyond them, probe_reserve
 * more serve only /healthz and /readyz (once, then close; anything else 503
 * unless a regular slot has come free), so that the kubelet's probes are
 * answered however many connections clients hold; when the reserve is full
 * too, its oldest connection still without an answer is closed to make room.
 * Deadlines: a request must be complete within 5 s of the accept or of the
 * previous answer (idle connections, keep-alive ones too, are closed), a
 * lookup answers within 10 s (else 503), an answer is written within 10 s.
 *
 * It runs on the relay's own loop and never blocks it: the hooks are called
 * from the loop, and lookup_intent answers later through done().
 */
#ifndef OUTBOX_ADMIN_H
#define OUTBOX_ADMIN_H

#include "lib/http_server.h"
#include "lib/strbuf.h"

#include <stddef.h>
#include <uv.h>

struct config;

struct admin_hooks {
    void *data;
    /* "" when ready, else the reason (e.g. "database not connected: timeout").
     * Anyone who reaches the port reads it: no host, port, user or other
     * connection detail (pg_public_reason), those go to the log. */
    const char *(*ready_reason)(void *data);
    /* NULL, or (a relay of several databases) each database's state for
     * /readyz's "databases" object: add(ctx, name, state) once per database,
     * state "ready" or why not (no connection detail, as ready_reason). */
    void (*ready_databases)(void *data, void (*add)(void *ctx, const char *name, const char *state),
                            void *ctx);
    /* Append the relay's metrics in Prometheus text format to out. */
    void (*write_metrics)(void *data, struct strbuf *out);
    /* Look up the outcome of a key: call done(req, status, json_body) later
     * (from the loop; calling it before returning is allowed too) exactly
     * once; status 200/404/503. json_body is copied; NULL gives a default
     * {"error":...} body for the status. done() is always safe to call, also
     * after the client went away, the lookup deadline passed or the server
     * was closed: req stays valid until done() runs, and only then is freed. */
    /* With ?database=NAME, key is NAME, ADMIN_DATABASE_SEPARATOR, then the key
     * (a key holds no control character, so the first one splits them). */
    void (*lookup_intent)(void *data, const char *key, void *req,
                          void (*done)(void *req, int status, const char *json_body));
    /* The status page (/ui): NULL turns it off (404). It reads the database
     * (cfg->db, its timeouts) on a connection of its own, opened at the
     * first page; cfg must outlive the server. */
    const struct config *ui_config;
    /* --databases (with ui_config, for the relay's id): the status page of
     * database NAME, NULL when none has that name now. The relay owns those
     * pages' state and closes it with the database (a page being made then
     * gets 503). Set, /ui is on even without ui_config's own database. */
    struct ui *(*ui_of)(void *data, const char *database);
    /* With ui_of: the rows of /ui's list of databases (ui_render_databases):
     * called with a renderer and its output, once per request. */
    void (*ui_index)(void *data, struct strbuf *out);
};

struct admin_limits {
    int max_connections;      /* connections that serve any request (at least 1) */
    int max_waits;            /* requests held with ?wait= at once (at least 1) */
    int probe_reserve;        /* more connections, for /healthz and /readyz only (0 = none) */
    size_t max_request_bytes; /* a request on the wire (at least 64) */
    const char *hosts; /* Host names answered besides addresses and localhost (--admin-hosts) */
};

typedef struct admin_server admin_server_t;

/* listen is "host:port" as httpd_parse_listen reads it (port 0 = any; host
 * a numeric IPv4 or IPv6 address, "[::1]" form for IPv6, "localhost", or "*"
 * for all IPv4 interfaces). token_file (NULL or "" = no token) holds the bearer token,
 * read now: surrounding white space is ignored; it must be 1..4096 visible
 * ASCII characters. Only its SHA-256 is kept, and it is never logged. NULL
 * and a logged error on failure (bad address, port in use, unreadable or
 * malformed token file); a handle opened on the way is then still closing
 * and is freed when the loop next runs. */
admin_server_t *admin_start(uv_loop_t *loop, const char *listen, struct admin_hooks hooks,
                            const struct admin_limits *limits, const char *token_file);
/* The relay recorded outcomes: requests waiting with ?wait= look again. */
void admin_outcomes_changed(admin_server_t *s);
/* The database NOTIFYed outbox_outcomes (payload: a JSON array of the keys
 * whose outcome changed): the requests waiting for those keys look again;
 * for any other payload, every waiting request. Cheap when none waits. */
void admin_outcomes_notified(admin_server_t *s, const char *payload);
/* The bound port. */
int admin_port(const admin_server_t *s);
/* Closes the listener and every connection (an answer being written is cut
 * off; pending lookups are orphaned). on_closed (may be NULL) runs from the
 * loop once every handle is closed; then s is freed. */
void admin_close(admin_server_t *s, void (*on_closed)(void *data), void *data);

/* For tests and fuzzing (tests/fuzz/): the parsers behind the port. */
#define ADMIN_KEY_MAX_BYTES 255     /* as outbox.enqueue */
#define ADMIN_DATABASE_MAX_BYTES 63 /* a NAME of --databases */
#define ADMIN_DATABASE_SEPARATOR "\x1f"
/* What lookup_intent gets: [NAME "\x1f"] key, and its NUL. */
#define ADMIN_LOOKUP_KEY_BYTES (ADMIN_DATABASE_MAX_BYTES + 1 + ADMIN_KEY_MAX_BYTES + 1)
/* ?database=NAME of /v1/intents/{key}: 1 and NAME in out (at least
 * ADMIN_DATABASE_MAX_BYTES + 1 bytes), 0 without, -1 malformed. */
int admin_parse_database(const char *query, size_t n, char *out);
/* The key of /v1/intents/{key}: percent-decoded into out (at least
 * ADMIN_KEY_MAX_BYTES + 1 bytes). NULL, or why the key is refused. */
const char *admin_decode_key(const char *encoded, size_t n, char *out);
/* The query of /v1/intents/{key}: the ?wait= in ms (capped), 0 without, -1 malformed. */
long admin_parse_wait(const char *query, size_t n);
/* Whether the ?wait= asked for more than the cap (and admin_parse_wait cut it). */
bool admin_wait_capped(const char *query, size_t n);

#endif
