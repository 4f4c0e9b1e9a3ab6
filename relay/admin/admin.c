/*
 * admin.c — the admin HTTP port on the relay's loop: its routes and its
 * policies (endpoints in admin.h). The HTTP server itself (parsing, phases
 * and their deadlines, pipelining, bounded input, lingering close) is
 * relay/lib/http_server.c.
 *
 * DESIGN
 * Off the hot path, and never able to hurt it: the port shares the loop with
 * deliveries and the database, so everything here is bounded and nothing
 * blocks. A whole request is at most max_request_bytes on the wire (413
 * beyond), which bounds what httpd keeps of it; what routing needs is the
 * method, the path and query, and the Authorization header.
 *
 * Deadlines (httpd's phases): a request must be complete within 5 s of the
 * accept or of the previous answer (idle connections, keep-alive ones too,
 * are closed, however slowly their bytes trickle in); a lookup answers within
 * 10 s, else 503 (for a long-poll at the end of its wait: look up once more
 * and answer that); an answer is written within 10 s; a lingering close
 * drains for 1 s.
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
 * A held request (?wait=) is "parked" between lookups. Its key is looked up
 * again, once for all its waiters (struct admin_recheck), when something
 * says it may have changed: this relay recorded outcomes
 * (admin_outcomes_changed), or the database NOTIFYed outbox_outcomes with
 * the key at the commit of another relay's record or of an operator's
 * approve, reject, resolve or cancel (admin_outcomes_notified; outbox.settle
 * and the trigger intents_notify_approved, migration 0041). A NOTIFY is a
 * hint, lost while the connection is down: once a second every parked key
 * is looked up anyway (the fallback re-check). Each wake-up is counted by
 * what sent it, and each wait by what ended it (/metrics), so a test tells
 * a wait woken by the commit from one found by the fallback without a
 * clock. A re-check that fails leaves the waiters parked. When the wait
 * ends, a last lookup decides the answer: it is never older than the
 * deadline.
 *
 * Lookups outlive connections: lookup_intent gets a small request object
 * that points at its connection (or, for a re-check, at the server). When
 * that goes first (client gone, lookup deadline, admin_close), the pointer
 * is cleared (httpd's on_close hook) and the object is orphaned; done() then
 * only frees it. So done() is always safe, and the server never waits for
 * the database to close.
 *
 * STATUS PAGE (/ui)
 * The HTML pages are made by relay/admin/ui.c on its own database connection; the
 * port routes them, authorizes them and sends them with headers that let the
 * browser load nothing else (UI_HEADERS). A page is a lookup like any other
 * here: a request object that the connection may orphan, a 10 s deadline
 * (then a 503 page), answered from the loop.
 *
 * BEARER TOKEN
 * With a token file, /metrics, /v1/ and /ui need "Authorization: Bearer
 * <token>". Only the token's SHA-256 is kept; a presented token is hashed and
 * the two digests are compared with CRYPTO_memcmp, so neither the time taken
 * nor anything logged depends on the token.
 *
 * A browser cannot add a bearer header, so /ui (only) also accepts HTTP Basic
 * with the token as the password, and its 401 asks for it: the browser then
 * prompts, and keeps the credentials for this origin (scheme, host and port)
 * alone. Not a cookie: cookies ignore ports, so one set for localhost through
 * a port-forward would go to every other local service. Not a query
 * parameter: URLs end up in history, logs and Referer headers. Basic gives
 * nothing more to a cross-site request than before: the port only reads
 * (GET and HEAD), and answers carry no CORS header, so another site can make
 * a browser ask but never read the answer.
 *
 * Invariants: the server is freed when httpd has closed (every connection
 * with it) and its re-check timer's close callback has run.
 */
#include "admin/admin.h"
#include "lib/dlist.h"

#include "lib/http_server.h"
#include "lib/log.h"
#include "lib/metrics.h"
#include "admin/ui.h"
#include "admin/ui_html.h"
#include "lib/xalloc.h"

#include <errno.h>
#include <http_parser.h>
#include <jansson.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define ADMIN_BACKLOG 64
#define ADMIN_READ_CHUNK 4096
#define ADMIN_INTENTS_PREFIX "/v1/intents/"
#define ADMIN_UI_INTENTS_PREFIX "/ui/intents/"
#define ADMIN_TOKEN_MAX_BYTES 4096
/* Longest Authorization value looked at: the scheme, spaces and a token. */
#define ADMIN_AUTH_MAX_BYTES (ADMIN_TOKEN_MAX_BYTES + 64)
/* Deadlines (see DESIGN above); -D overrides are for tests. */
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

#define CONTENT_TYPE_METRICS "text/plain; version=0.0.4; charset=utf-8"
#define CONTENT_TYPE_HTML "text/html; charset=utf-8"
/* Every answer of /ui: nothing is loaded from anywhere (no script, image,
 * font or frame; styles inline), forms go only to this port, no framing,
 * no sniffing, no Referer (keys are in its URLs). Cache-Control: no-store
 * is on every answer of the port. */
#define UI_HEADERS                                                                                 \
    "Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; "     \
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'\r\n"                              \
    "X-Content-Type-Options: nosniff\r\n"                                                          \
    "X-Frame-Options: DENY\r\n"                                                                    \
    "Referrer-Policy: no-referrer\r\n"
/* A browser asks for Basic credentials itself; Bearer for scripts. */
#define UI_AUTHENTICATE                                                                            \
    "WWW-Authenticate: Basic realm=\"outbox-relay\", charset=\"UTF-8\"\r\n"                        \
    "WWW-Authenticate: Bearer\r\n"

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

/* What sent parked requests to look again (the first three) and what ended
 * a wait: a re-check woken by one of those, the request's own first lookup,
 * or its deadline (outbox_admin_wait_wakeups_total{by},
 * outbox_admin_waits_total{ended_by}). */
enum wake {
    WAKE_NOTIFY,   /* NOTIFY outbox_outcomes named the key (or named none) */
    WAKE_RECORD,   /* this relay recorded outcomes */
    WAKE_RECHECK,  /* the once-a-second fallback */
    WAKE_FIRST,    /* ended by the request's first lookup (already final) */
    WAKE_DEADLINE, /* ended by the lookup at the deadline, or no answer in time */
    WAKE_KINDS
};
#define WAKE_CAUSES (WAKE_RECHECK + 1)
static const char *const wake_names[WAKE_KINDS] = {"notify", "record", "recheck", "first",
                                                   "deadline"};

struct admin_lookup;

/* What the port keeps per connection (httpd_conn_data). */
struct admin_conn {
    admin_server_t *server;
    httpd_conn_t *http;
    enum conn_lane lane;
    struct admin_lookup *lookup; /* outstanding, or NULL */
    bool page;                   /* the lookup is a /ui page (relay/admin/ui.c) */

    /* Long-poll (?wait=): the key and when the wait ends (0: not waiting;
     * counted in server->waiting while not 0). */
    char wait_key[ADMIN_LOOKUP_KEY_BYTES]; /* [NAME "\x1f"] key: admin.h, lookup_intent */
    uint64_t wait_until_ms;
    bool parked;      /* between lookups; counted in server->parked */
    bool waited;      /* this request asked to wait: its 200 says how the wait ended */
    bool wait_capped; /* ... for longer than ADMIN_WAIT_MAX_MS */
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
    bool again;         /* outcomes changed while it was running: look once more */
    enum wake by;       /* what sent it */
    enum wake again_by; /* what asked for once more */
    char key[ADMIN_LOOKUP_KEY_BYTES];
};

struct admin_server {
    uv_loop_t *loop;
    httpd_t *httpd;
    uv_timer_t recheck_timer;
    struct admin_hooks hooks;
    struct admin_limits limits;
    int port;
    int lane_conns[2];              /* open connections in each lane */
    int waiting;                    /* connections held by ?wait= */
    int parked;                     /* of them, between lookups */
    struct admin_recheck *rechecks; /* running */
    struct ui *ui;                  /* the status page; NULL: off (hooks.ui_config) */
    bool httpd_open;
    bool timer_open;
    bool ui_open;
    bool closing;
    bool token_required;
    unsigned char token_digest[32]; /* SHA-256 of the token */
    uint64_t refused_total[REFUSAL_KINDS];
    uint64_t wakeups[WAKE_CAUSES];    /* parked requests sent to look again, by cause */
    uint64_t waits_ended[WAKE_KINDS]; /* waits answered, by what ended them */
    uint64_t refused_logged_ms;
    bool refused_logged;
    void (*on_closed)(void *data);
    void *closed_data;
};

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

/*
 * The key of /v1/intents/{key}: percent-decoded into out (at least
 * ADMIN_KEY_MAX_BYTES + 1 bytes), checked as outbox.enqueue checks keys.
 * Returns NULL, or why the key is refused.
 */
const char *admin_decode_key(const char *encoded, size_t n, char *out)
{
    long decoded = httpd_percent_decode(encoded, n, out, ADMIN_KEY_MAX_BYTES + 1);
    if (decoded == -1)
        return "malformed percent-encoding in the key";
    if (decoded == -2)
        return "the key is longer than 255 bytes";
    size_t len = (size_t)decoded;
    if (len == 0)
        return "the key is empty";
    const unsigned char *p = (const unsigned char *)out;
    for (size_t i = 0; i < len;) {
        size_t seq = utf8_sequence_length(p + i, len - i);
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
    char *text = xalloc_check(json_dumps(object, JSON_COMPACT | JSON_PRESERVE_ORDER));
    json_decref(object);
    return text;
}

/* SHA-256 of n bytes; the digest is what tokens are compared by. */
static void sha256(const void *data, size_t n, unsigned char out[32])
{
    unsigned int len = 0;
    if (EVP_Digest(data, n, out, &len, EVP_sha256(), NULL) != 1 || len != 32)
        abort(); /* cannot happen with a working libcrypto */
}

/* ---------------------------------------------------------------- server lifetime */

static void server_maybe_free(admin_server_t *s)
{
    if (!s->closing || s->httpd_open || s->timer_open || s->ui_open)
        return;
    void (*cb)(void *) = s->on_closed;
    void *data = s->closed_data;
    OPENSSL_cleanse(s->token_digest, sizeof(s->token_digest));
    free(s);
    if (cb)
        cb(data);
}

static void on_httpd_closed(void *data)
{
    admin_server_t *s = data;
    s->httpd_open = false;
    server_maybe_free(s);
}

static void on_ui_closed(void *data)
{
    admin_server_t *s = data;
    s->ui_open = false;
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

/* ---------------------------------------------------------------- long-poll state */

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

/* ---------------------------------------------------------------- responses */

/* Every answer of the port; a probe-lane connection closes after it. */
static void conn_respond(struct admin_conn *conn, int status, const char *content_type,
                         const char *extra_headers, const char *body, size_t body_len)
{
    if (conn->lane == LANE_PROBE)
        httpd_conn_close_after_answer(conn->http);
    struct httpd_response response = {
        .status = status,
        .content_type = content_type,
        .headers = extra_headers,
        .body = body,
        .body_len = body_len,
    };
    httpd_respond(conn->http, &response);
}

static void conn_respond_json(struct admin_conn *conn, int status, const char *extra_headers,
                              const char *json)
{
    conn_respond(conn, status, NULL, extra_headers, json, strlen(json));
}

static void conn_respond_error(struct admin_conn *conn, int status, const char *extra_headers,
                               const char *message)
{
    if (conn->lane == LANE_PROBE)
        httpd_conn_close_after_answer(conn->http);
    httpd_respond_error(conn->http, status, extra_headers, message);
}

/* A request the port cannot serve at all: answer, then close. */
static void conn_reject(struct admin_conn *conn, int status, const char *message)
{
    httpd_conn_close_after_answer(conn->http);
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

/* The headers of a 200 to a request that asked to wait: whether the wait
 * ended on a final outcome or ran out first (the body alone does not say
 * that a wait ended early: a "pending" is a "pending"), and that it was cut
 * to ADMIN_WAIT_MAX_MS when it asked for more. */
static void wait_headers(const struct admin_conn *conn, const char *json_body, char *out,
                         size_t size)
{
    int n = snprintf(out, size, "Outbox-Wait: %s\r\n",
                     outcome_is_final(json_body) ? "final" : "timed-out");
    if (conn->wait_capped && n > 0 && (size_t)n < size) {
        if (ADMIN_WAIT_MAX_MS % 1000 == 0)
            snprintf(out + n, size - (size_t)n, "Outbox-Wait-Capped: %ds\r\n",
                     ADMIN_WAIT_MAX_MS / 1000);
        else
            snprintf(out + n, size - (size_t)n, "Outbox-Wait-Capped: %dms\r\n", ADMIN_WAIT_MAX_MS);
    }
}

/* The answer to a lookup: the wait (if any) is over, ended by `by`. */
static void conn_answer_lookup(struct admin_conn *conn, int status, const char *json_body,
                               enum wake by)
{
    conn_end_wait(conn);
    bool waited = conn->waited;
    conn->waited = false;
    if (waited)
        conn->server->waits_ended[by]++;
    if (status < 100 || status > 599)
        status = 500;
    if (json_body) {
        char headers[96] = "";
        if (waited && status == 200)
            wait_headers(conn, json_body, headers, sizeof(headers));
        conn_respond_json(conn, status, headers[0] ? headers : NULL, json_body);
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
    httpd_conn_wait(conn->http, conn->wait_until_ms - now);
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
        conn_answer_lookup(conn, status, json_body,
                           conn->wait_until_ms && uv_now(conn->server->loop) >= conn->wait_until_ms
                               ? WAKE_DEADLINE
                               : WAKE_FIRST);
}

static void conn_lookup_timed_out(struct admin_conn *conn)
{
    if (conn->lookup) {
        conn->lookup->conn = NULL; /* done() will only free it */
        conn->lookup = NULL;
    }
    conn_answer_lookup(conn, 503, "{\"error\":\"the outcome could not be read in time\"}",
                       WAKE_DEADLINE);
}

static void conn_start_lookup(struct admin_conn *conn, uint64_t timeout_ms)
{
    admin_server_t *s = conn->server;
    struct admin_lookup *lookup = xmalloc(sizeof(*lookup));
    lookup->conn = conn;
    conn->lookup = lookup;
    conn_set_parked(conn, false);
    httpd_conn_wait(conn->http, timeout_ms);
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
    DLIST_REMOVE(s->rechecks, rc);
}

static void admin_recheck_done(void *req, int status, const char *json_body);

/* A re-check of key for the requests parked on it, linked into s->rechecks
 * but not yet sent; NULL when one is already running (it is then told to
 * look once more, unless by is the fallback: its snapshot may predate the
 * change) or out of memory. */
static struct admin_recheck *server_new_recheck(admin_server_t *s, const char *key, enum wake by)
{
    struct admin_recheck *running = server_find_recheck(s, key);
    if (running) {
        if (by != WAKE_RECHECK) {
            running->again = true;
            running->again_by = by;
        }
        return NULL;
    }
    struct admin_recheck *rc = xcalloc(1, sizeof(*rc));
    rc->server = s;
    rc->by = by;
    snprintf(rc->key, sizeof(rc->key), "%s", key);
    DLIST_PUSH_FRONT(s->rechecks, rc);
    return rc;
}

/* Whether keys (a JSON array of strings; NULL: any key) holds key. */
static bool keys_hold(const json_t *keys, const char *key)
{
    if (keys == NULL)
        return true;
    /* ?database=NAME waits on "NAME\x1fkey": a notification names the key
     * (another database's key of the same name only costs a look-up) */
    const char *unit = strchr(key, '\x1f');
    if (unit)
        key = unit + 1;
    size_t i;
    const json_t *item;
    json_array_foreach(keys, i, item)
    {
        const char *k = json_string_value(item);
        if (k && strcmp(k, key) == 0)
            return true;
    }
    return false;
}

/* Looks up again every key with parked requests (only those in keys, when
 * not NULL), once per key, each request counted as woken by `by`. The
 * re-checks are created first and sent after: done() may run before
 * lookup_intent returns and answer (even close) connections. */
static void server_recheck_waits(admin_server_t *s, enum wake by, const json_t *keys)
{
    if (s->parked == 0 || s->hooks.lookup_intent == NULL)
        return;
    struct admin_recheck **batch = xcalloc((size_t)s->parked, sizeof(*batch));
    int count = 0;
    for (httpd_conn_t *http = httpd_first_conn(s->httpd); http && count < s->parked;
         http = httpd_next_conn(http)) {
        struct admin_conn *conn = httpd_conn_data(http);
        if (!conn->parked || !keys_hold(keys, conn->wait_key))
            continue;
        s->wakeups[by]++;
        struct admin_recheck *rc = server_new_recheck(s, conn->wait_key, by);
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
    char key[ADMIN_LOOKUP_KEY_BYTES];
    snprintf(key, sizeof(key), "%s", rc->key);
    bool again = rc->again;
    enum wake by = rc->by, again_by = rc->again_by;
    free(rc);
    /* A failed re-check changes nothing: the waiters stay parked, and the
     * last lookup at their deadline decides. */
    bool answerable = status == 404 || (status == 200 && json_body);
    bool parked_left = false;
    for (httpd_conn_t *http = httpd_first_conn(s->httpd), *next; http; http = next) {
        next = httpd_next_conn(http); /* answering may close this connection, never another */
        struct admin_conn *conn = httpd_conn_data(http);
        if (!conn->parked || strcmp(conn->wait_key, key) != 0)
            continue;
        if (answerable && !conn_wait_goes_on(conn, status, json_body))
            conn_answer_lookup(conn, status, json_body, by);
        else
            parked_left = true;
    }
    if (again && parked_left) {
        struct admin_recheck *more = server_new_recheck(s, key, again_by);
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
    server_recheck_waits(s, WAKE_RECHECK, NULL);
}

void admin_outcomes_changed(admin_server_t *s)
{
    if (s == NULL || s->closing)
        return;
    server_recheck_waits(s, WAKE_RECORD, NULL);
}

void admin_outcomes_notified(admin_server_t *s, const char *payload)
{
    if (s == NULL || s->closing || s->parked == 0)
        return; /* the usual case: nothing waits, nothing to parse */
    json_t *keys = json_loads(payload, 0, NULL);
    /* Not a list of keys (a later schema, or none named): every key. */
    server_recheck_waits(s, WAKE_NOTIFY, json_is_array(keys) ? keys : NULL);
    json_decref(keys);
}

/* "?wait=30s", "wait=500ms", "wait=2" (seconds): the wait asked for, in ms
 * (LONG_MAX / 1000 at most, so never an overflow); 0 without a wait; -1 when
 * malformed. */
static long parse_wait_asked(const char *query, size_t n)
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
            if (*unit == '\0' || !strcmp(unit, "s"))
                return value > LONG_MAX / 1000 ? LONG_MAX / 1000 * 1000 : value * 1000;
            if (!strcmp(unit, "ms"))
                return value;
            return -1;
        }
        p = field_end + (amp ? 1 : 0);
    }
    return 0;
}

int admin_parse_database(const char *query, size_t n, char *out)
{
    const char *p = query, *end = query + n;
    while (p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *field_end = amp ? amp : end;
        if ((size_t)(field_end - p) >= 9 && memcmp(p, "database=", 9) == 0) {
            size_t len = (size_t)(field_end - p - 9);
            if (len == 0 || len > ADMIN_DATABASE_MAX_BYTES)
                return -1;
            for (size_t i = 0; i < len; i++) {
                char c = p[9 + i];
                if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
                    return -1;
            }
            memcpy(out, p + 9, len);
            out[len] = '\0';
            return 1;
        }
        p = field_end + (amp ? 1 : 0);
    }
    return 0;
}

/* The wait in ms, capped at ADMIN_WAIT_MAX_MS; 0 without; -1 malformed. */
long admin_parse_wait(const char *query, size_t n)
{
    long ms = parse_wait_asked(query, n);
    return ms > ADMIN_WAIT_MAX_MS ? ADMIN_WAIT_MAX_MS : ms;
}

bool admin_wait_capped(const char *query, size_t n)
{
    return parse_wait_asked(query, n) > ADMIN_WAIT_MAX_MS;
}
/* ---------------------------------------------------------------- endpoints */

static void ready_add_database(void *ctx, const char *name, const char *state)
{
    json_t *string = json_string(state);
    json_object_set_new(ctx, name, string ? string : json_string("(not valid UTF-8)"));
}

static void handle_ready(struct admin_conn *conn)
{
    admin_server_t *s = conn->server;
    const char *reason = s->hooks.ready_reason ? s->hooks.ready_reason(s->hooks.data) : "";
    bool ready = reason == NULL || *reason == '\0';
    if (ready && s->hooks.ready_databases == NULL) {
        conn_respond_json(conn, 200, NULL, "{\"status\":\"ready\"}");
        return;
    }
    const char *names[] = {"status", "reason"}, *values[] = {ready ? "ready" : "not ready", reason};
    char *body = json_text(names, values, ready ? 1 : 2);
    if (s->hooks.ready_databases) {
        json_t *object = json_loads(body, 0, NULL), *databases = json_object();
        s->hooks.ready_databases(s->hooks.data, ready_add_database, databases);
        json_object_set_new(object, "databases", databases);
        free(body);
        body = xalloc_check(json_dumps(object, JSON_COMPACT | JSON_PRESERVE_ORDER));
        json_decref(object);
    }
    conn_respond_json(conn, ready ? 200 : 503, NULL, body);
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
    metrics_family(out, "outbox_admin_wait_wakeups_total", METRICS_COUNTER,
                   "Requests held by ?wait= sent to look their key up again, by what sent them: "
                   "notify (the commit's NOTIFY outbox_outcomes), record (this relay recorded "
                   "outcomes), recheck (the once-a-second fallback).");
    for (int by = 0; by < WAKE_CAUSES; by++)
        metrics_sample_uint(out, "outbox_admin_wait_wakeups_total",
                            METRICS_LABELS({"by", wake_names[by]}), s->wakeups[by]);
    metrics_family(out, "outbox_admin_waits_total", METRICS_COUNTER,
                   "Requests with ?wait= answered, by what ended the wait: a look-up woken by "
                   "notify, record or recheck; first (final at once); deadline.");
    for (int by = 0; by < WAKE_KINDS; by++)
        metrics_sample_uint(out, "outbox_admin_waits_total",
                            METRICS_LABELS({"ended_by", wake_names[by]}), s->waits_ended[by]);
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
    char key[ADMIN_KEY_MAX_BYTES + 1], database[ADMIN_DATABASE_MAX_BYTES + 1];
    const char *problem = admin_decode_key(encoded_key, n, key);
    if (problem) {
        conn_respond_error(conn, 400, NULL, problem);
        return;
    }
    int named = admin_parse_database(query, query_len, database);
    if (named < 0) {
        conn_respond_error(conn, 400, NULL,
                           "database must be a NAME of --databases ([a-z0-9_-], 1 to 63)");
        return;
    }
    snprintf(conn->wait_key, sizeof(conn->wait_key), "%s%s%s", named ? database : "",
             named ? ADMIN_DATABASE_SEPARATOR : "", key);
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
    conn->waited = wait_ms > 0;
    conn->wait_capped = wait_ms > 0 && admin_wait_capped(query, query_len);
    if (wait_ms > 0) {
        conn->wait_until_ms = uv_now(s->loop) + (uint64_t)wait_ms;
        s->waiting++;
    }
    conn_start_lookup(conn, (uint64_t)wait_ms + ADMIN_LOOKUP_TIMEOUT_MS);
}

/* ---------------------------------------------------------------- the status page (/ui) */

/* Every answer of /ui is HTML with UI_HEADERS (and extra_headers). */
static void conn_respond_page(struct admin_conn *conn, int status, const char *extra_headers,
                              const char *html, size_t len)
{
    struct strbuf headers;
    strbuf_init(&headers);
    strbuf_append_str(&headers, UI_HEADERS);
    if (extra_headers)
        strbuf_append_str(&headers, extra_headers);
    conn_respond(conn, status, CONTENT_TYPE_HTML, headers.data, html, len);
    strbuf_free(&headers);
}

/* A page that only says something: 303, 400, 401, 404, 503. Someone not
 * authorized (401) is not told the relay's id. */
static void conn_respond_page_message(struct admin_conn *conn, int status,
                                      const char *extra_headers, const char *title,
                                      const char *message)
{
    struct strbuf html;
    strbuf_init(&html);
    ui_message_page(conn->server->ui, &html, title, message, status == 503, status != 401);
    conn_respond_page(conn, status, extra_headers, html.data, html.len);
    strbuf_free(&html);
}

/* relay/admin/ui.c made the page (or gave up); the request may be gone. */
static void admin_page_done(void *req, int status, const char *html, size_t len)
{
    struct admin_lookup *lookup = req;
    struct admin_conn *conn = lookup->conn;
    free(lookup);
    if (conn == NULL)
        return; /* orphaned: the client, the deadline or admin_close came first */
    conn->lookup = NULL;
    conn->page = false;
    conn_respond_page(conn, status, NULL, html, len);
}

static void conn_page_timed_out(struct admin_conn *conn)
{
    conn->lookup->conn = NULL; /* done() will only free it */
    conn->lookup = NULL;
    conn->page = false;
    conn_respond_page_message(conn, 503, NULL, "Status",
                              "The database did not answer in time; the page tries again by "
                              "itself.");
}

/* The overview (key NULL) or a key's page, made by relay/admin/ui.c. */
static void conn_start_page(struct admin_conn *conn, struct ui *ui, const char *key)
{
    struct admin_lookup *lookup = xmalloc(sizeof(*lookup));
    lookup->conn = conn;
    conn->lookup = lookup;
    conn->page = true;
    httpd_conn_wait(conn->http, ADMIN_LOOKUP_TIMEOUT_MS);
    /* done() may run before this returns: it answers at once then. */
    if (key)
        ui_intent(ui, key, lookup, admin_page_done);
    else
        ui_overview(ui, lookup, admin_page_done);
}

/* The status page's state for a request: the one database's, or (--databases,
 * hooks.ui_of) that of ?database=NAME. NULL: answered already (400 for a
 * malformed NAME, 404 for none or an unknown one). database gets the NAME
 * ("" without). */
static struct ui *conn_page_ui(struct admin_conn *conn, const char *query, size_t query_len,
                               char *database)
{
    admin_server_t *s = conn->server;
    *database = '\0';
    if (s->hooks.ui_of == NULL)
        return s->ui;
    int named = admin_parse_database(query, query_len, database);
    if (named < 0) {
        *database = '\0';
        conn_respond_page_message(conn, 400, NULL, "Database",
                                  "database must be a NAME of --databases ([a-z0-9_-], 1 to 63)");
        return NULL;
    }
    if (named == 0) {
        conn_respond_page_message(conn, 404, NULL, "Database",
                                  "This relay serves several databases: add ?database=NAME "
                                  "(the list is at /ui).");
        return NULL;
    }
    struct ui *ui = s->hooks.ui_of(s->hooks.data, database);
    if (ui == NULL)
        conn_respond_page_message(conn, 404, NULL, "Database",
                                  "This relay serves no database of that name.");
    return ui;
}

/* GET /ui: the overview; with --databases and no ?database=, the list of
 * the databases (hooks.ui_index), each linked to its own overview. */
static void handle_ui_overview(struct admin_conn *conn, const char *query, size_t query_len)
{
    admin_server_t *s = conn->server;
    char database[ADMIN_DATABASE_MAX_BYTES + 1];
    if (s->hooks.ui_of && s->hooks.ui_index &&
        admin_parse_database(query, query_len, database) == 0) {
        struct strbuf sections, html;
        strbuf_init(&sections);
        strbuf_init(&html);
        s->hooks.ui_index(s->hooks.data, &sections);
        ui_sections_page(s->hooks.ui_config, &html, "Databases", sections.data, sections.len);
        conn_respond_page(conn, 200, NULL, html.data, html.len);
        strbuf_free(&sections);
        strbuf_free(&html);
        return;
    }
    struct ui *ui = conn_page_ui(conn, query, query_len, database);
    if (ui)
        conn_start_page(conn, ui, NULL);
}

/* GET /ui/intents?key=...: the search form. Answers with a redirect to the
 * key's own page, the key percent-encoded (white space around a pasted key
 * dropped: a key never starts or ends with it). */
static void handle_ui_search(struct admin_conn *conn, const char *query, size_t query_len)
{
    char key[ADMIN_KEY_MAX_BYTES + 1];
    long n = ui_form_value(query, query_len, "key", key, sizeof(key));
    if (n == -2 || n == -3) {
        conn_respond_page_message(conn, 400, NULL, "Search",
                                  n == -2 ? "malformed percent-encoding in the key"
                                          : "the key is longer than 255 bytes");
        return;
    }
    size_t start = 0, end = n > 0 ? (size_t)n : 0;
    while (start < end && strchr(" \t\r\n", key[start]))
        start++;
    while (end > start && strchr(" \t\r\n", key[end - 1]))
        end--;
    /* --databases: the search stays in the page's database (a hidden field) */
    char database[ADMIN_DATABASE_MAX_BYTES + 1];
    if (admin_parse_database(query, query_len, database) != 1)
        *database = '\0';
    struct strbuf location;
    strbuf_init(&location);
    strbuf_append_str(&location, "Location: ");
    if (end == start) {
        strbuf_append_str(&location, "/ui");
    } else {
        strbuf_append_str(&location, ADMIN_UI_INTENTS_PREFIX);
        ui_url_encode(&location, key + start, end - start);
    }
    if (*database) {
        strbuf_append_str(&location, "?database=");
        strbuf_append_str(&location, database); /* [a-z0-9_-]: nothing to encode */
    }
    strbuf_append_str(&location, "\r\n");
    conn_respond_page_message(conn, 303, location.data, "Search", "See the key's own page.");
    strbuf_free(&location);
}

static void handle_ui_intent(struct admin_conn *conn, const char *encoded_key, size_t n,
                             const char *query, size_t query_len)
{
    char key[ADMIN_KEY_MAX_BYTES + 1], database[ADMIN_DATABASE_MAX_BYTES + 1];
    const char *problem = admin_decode_key(encoded_key, n, key);
    if (problem) {
        conn_respond_page_message(conn, 400, NULL, "Key", problem);
        return;
    }
    struct ui *ui = conn_page_ui(conn, query, query_len, database);
    if (ui)
        conn_start_page(conn, ui, key);
}

/* ---------------------------------------------------------------- bearer token */

/* Whether n bytes of a presented token are the token: their SHA-256
 * against the token's, in constant time. */
static bool token_matches(const admin_server_t *s, const void *token, size_t n)
{
    unsigned char digest[32];
    sha256(token, n, digest);
    return CRYPTO_memcmp(digest, s->token_digest, sizeof(digest)) == 0;
}

/* "Basic <base64(user:password)>" (RFC 7617), the password being the token:
 * how a browser sends it (it asks for it on a 401 with WWW-Authenticate:
 * Basic, and keeps it for this origin, host and port, only). Any user name. */
static bool basic_matches(const admin_server_t *s, const char *b64, size_t n)
{
    unsigned char decoded[ADMIN_AUTH_MAX_BYTES];
    if (n < 4 || n % 4 != 0 || n / 4 * 3 > sizeof(decoded))
        return false;
    int len = EVP_DecodeBlock(decoded, (const unsigned char *)b64, (int)n);
    if (len < 0)
        return false;
    len -= (b64[n - 1] == '=') + (b64[n - 2] == '=');
    const unsigned char *colon = len > 0 ? memchr(decoded, ':', (size_t)len) : NULL;
    bool matches = colon && token_matches(s, colon + 1, (size_t)(decoded + len - colon - 1));
    OPENSSL_cleanse(decoded, sizeof(decoded));
    return matches;
}

/* With a token: whether the request carries it, in one Authorization header:
 * "Bearer <token>" (the scheme in any case), or on /ui also "Basic ..."
 * (basic_matches). Constant time in the token. */
static bool conn_authorized(const struct admin_conn *conn, const struct httpd_request *request,
                            bool basic_allowed)
{
    const admin_server_t *s = conn->server;
    if (!s->token_required)
        return true;
    const struct httpd_header *auth = httpd_request_header(request, "authorization");
    if (httpd_request_header_count(request, "authorization") != 1 || auth->value_len < 7 ||
        auth->value_len > ADMIN_AUTH_MAX_BYTES)
        return false;
    const char *p = auth->value, *end = p + auth->value_len;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    bool bearer = end - p >= 7 && strncasecmp(p, "bearer", 6) == 0;
    bool basic = basic_allowed && end - p >= 6 && strncasecmp(p, "basic", 5) == 0;
    size_t scheme_len = bearer ? 6 : 5;
    if ((!bearer && !basic) || (p[scheme_len] != ' ' && p[scheme_len] != '\t'))
        return false;
    p += scheme_len + 1;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    return bearer ? token_matches(s, p, (size_t)(end - p)) : basic_matches(s, p, (size_t)(end - p));
}

/* ---------------------------------------------------------------- routing */

enum route {
    ROUTE_NONE,
    ROUTE_HEALTH,
    ROUTE_READY,
    ROUTE_METRICS,
    ROUTE_INTENT,
    /* the status page, when it is on; each of these answers HTML */
    ROUTE_UI,
    ROUTE_UI_SEARCH,
    ROUTE_UI_INTENT,
    ROUTE_UI_OTHER,
};

static enum route route_of_ui(const char *path, size_t path_len)
{
    if (bytes_equal(path, path_len, "/ui") || bytes_equal(path, path_len, "/ui/"))
        return ROUTE_UI;
    if (bytes_equal(path, path_len, "/ui/intents") || bytes_equal(path, path_len, "/ui/intents/"))
        return ROUTE_UI_SEARCH;
    if (bytes_start_with(path, path_len, ADMIN_UI_INTENTS_PREFIX))
        return ROUTE_UI_INTENT;
    if (bytes_start_with(path, path_len, "/ui/"))
        return ROUTE_UI_OTHER;
    return ROUTE_NONE;
}

static enum route route_of(const char *path, size_t path_len, bool ui)
{
    if (ui && bytes_start_with(path, path_len, "/ui"))
        return route_of_ui(path, path_len);
    if (bytes_equal(path, path_len, "/healthz"))
        return ROUTE_HEALTH;
    if (bytes_equal(path, path_len, "/readyz"))
        return ROUTE_READY;
    if (bytes_equal(path, path_len, "/metrics"))
        return ROUTE_METRICS;
    if (bytes_start_with(path, path_len, ADMIN_INTENTS_PREFIX))
        return ROUTE_INTENT;
    return ROUTE_NONE;
}

/* A request other than a probe on the probe lane: it moves to the main lane
 * if a slot has come free; false (answered 503, closing) if none has. */
static bool conn_leave_probe_lane(struct admin_conn *conn)
{
    admin_server_t *s = conn->server;
    if (s->lane_conns[LANE_MAIN] >= s->limits.max_connections) {
        server_note_refused(s, REFUSED_CONNECTIONS);
        conn_respond_error(conn, 503, NULL, "too many admin connections");
        return false;
    }
    s->lane_conns[LANE_PROBE]--;
    s->lane_conns[LANE_MAIN]++;
    conn->lane = LANE_MAIN;
    return true;
}

static void conn_refuse_unauthorized(struct admin_conn *conn, const struct httpd_request *request,
                                     bool page)
{
    bool presented = httpd_request_header(request, "authorization") != NULL;
    log_event(LOG_DEBUG, "admin_unauthorized", "authorization",
              json_string(presented ? "wrong" : "missing"), LOG_END);
    if (page) {
        conn_respond_page_message(conn, 401, UI_AUTHENTICATE, "Token required",
                                  "This admin port needs its token (--admin-token-file). In a "
                                  "browser, sign in with any user name and the token as the "
                                  "password; from a script, send Authorization: Bearer <token>.");
        return;
    }
    conn_respond_error(conn, 401,
                       presented ? "WWW-Authenticate: Bearer error=\"invalid_token\"\r\n"
                                 : "WWW-Authenticate: Bearer\r\n",
                       "a bearer token is required (Authorization: Bearer <token>)");
}

/* Routes one complete request (httpd's on_request). */
static void admin_on_request(void *data, httpd_conn_t *http, const struct httpd_request *request)
{
    struct admin_conn *conn = httpd_conn_data(http);
    if (request->path_len == 0) {
        conn_reject(conn, 400, "bad request target");
        return;
    }
    admin_server_t *s = conn->server;
    if (!httpd_host_allowed(request, s->limits.hosts) || !httpd_origin_allowed(request, NULL)) {
        /* DNS rebinding (http_server.h): a page on another name must not read this port */
        conn_respond_error(conn, 403, NULL,
                           "this Host or Origin is not served here (--admin-hosts names more)");
        return;
    }
    enum route route =
        route_of(request->path, request->path_len, s->ui != NULL || s->hooks.ui_of != NULL);
    if (route == ROUTE_NONE) {
        conn_respond_error(conn, 404, NULL, "not found");
        return;
    }
    if (request->method != HTTP_GET && request->method != HTTP_HEAD) {
        conn_respond_error(conn, 405, "Allow: GET, HEAD\r\n", "method not allowed");
        return;
    }
    bool probe = route == ROUTE_HEALTH || route == ROUTE_READY;
    bool page = route >= ROUTE_UI;
    if (conn->lane == LANE_PROBE && !probe && !conn_leave_probe_lane(conn))
        return;
    if (!probe && !conn_authorized(conn, request, page)) {
        conn_refuse_unauthorized(conn, request, page);
        return;
    }
    size_t prefix = strlen(ADMIN_INTENTS_PREFIX);
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
    case ROUTE_INTENT:
        handle_intent(conn, request->path + prefix, request->path_len - prefix, request->query,
                      request->query_len);
        break;
    case ROUTE_UI:
        handle_ui_overview(conn, request->query, request->query_len);
        break;
    case ROUTE_UI_SEARCH:
        handle_ui_search(conn, request->query, request->query_len);
        break;
    case ROUTE_UI_INTENT:
        handle_ui_intent(conn, request->path + strlen(ADMIN_UI_INTENTS_PREFIX),
                         request->path_len - strlen(ADMIN_UI_INTENTS_PREFIX), request->query,
                         request->query_len);
        break;
    case ROUTE_UI_OTHER:
        conn_respond_page_message(conn, 404, NULL, "Not found", "There is no such page.");
        break;
    case ROUTE_NONE:
        break;
    }
}

/* ---------------------------------------------------------------- httpd's hooks */

/* The probe lane is full: its oldest connection without a complete request
 * (nothing being looked up or written for it) makes room. */
static bool server_evict_probe(admin_server_t *s)
{
    struct admin_conn *oldest = NULL;
    for (httpd_conn_t *http = httpd_first_conn(s->httpd); http; http = httpd_next_conn(http)) {
        struct admin_conn *conn = httpd_conn_data(http);
        enum httpd_phase phase = httpd_conn_phase(http);
        if (conn->lane == LANE_PROBE && (phase == HTTPD_IDLE || phase == HTTPD_READING))
            oldest = conn; /* the list is newest first */
    }
    if (oldest == NULL)
        return false;
    log_event(LOG_DEBUG, "admin_connection_evicted", "phase",
              json_string(httpd_phase_name(httpd_conn_phase(oldest->http))), LOG_END);
    server_note_refused(s, REFUSED_EVICTED);
    httpd_conn_close(oldest->http);
    return true;
}

/* Chooses the lane of a new connection; false when there is no room. */
static bool admin_on_accept(void *data, httpd_conn_t *http)
{
    admin_server_t *s = data;
    enum conn_lane lane = LANE_MAIN;
    if (s->lane_conns[LANE_MAIN] >= s->limits.max_connections) {
        lane = LANE_PROBE;
        if (s->lane_conns[LANE_PROBE] >= s->limits.probe_reserve && !server_evict_probe(s)) {
            /* Every probe-lane connection is being answered: no room at all. */
            server_note_refused(s, REFUSED_CONNECTIONS);
            return false;
        }
    }
    struct admin_conn *conn = httpd_conn_data(http);
    conn->server = s;
    conn->http = http;
    conn->lane = lane;
    s->lane_conns[lane]++;
    return true;
}

static void admin_on_close(void *data, httpd_conn_t *http)
{
    admin_server_t *s = data;
    struct admin_conn *conn = httpd_conn_data(http);
    s->lane_conns[conn->lane]--;
    conn_end_wait(conn);
    if (conn->lookup) {
        conn->lookup->conn = NULL; /* orphaned: done() only frees it */
        conn->lookup = NULL;
    }
}

/* The deadline of a lookup, or the end of a long-poll's wait. */
static void admin_on_wait_over(void *data, httpd_conn_t *http)
{
    struct admin_conn *conn = httpd_conn_data(http);
    if (conn->parked) {
        /* The wait is over: look once more, and answer that. */
        conn_start_lookup(conn, ADMIN_LOOKUP_TIMEOUT_MS);
        return;
    }
    if (conn->lookup && conn->page) {
        conn_page_timed_out(conn);
        return;
    }
    if (conn->lookup) {
        conn_lookup_timed_out(conn);
        return;
    }
    httpd_conn_close(http);
}

static void admin_on_reject(void *data, httpd_conn_t *http, int status, const char *reason)
{
    log_event(LOG_DEBUG, "admin_request_rejected", "status", json_integer(status), "reason",
              json_string(reason), LOG_END);
}

static void admin_on_timeout(void *data, httpd_conn_t *http, enum httpd_phase phase)
{
    log_event(LOG_DEBUG, "admin_connection_timeout", "phase", json_string(httpd_phase_name(phase)),
              LOG_END);
}

static void admin_on_accept_error(void *data, int uv_error)
{
    log_event(LOG_WARN, "admin_accept_failed", "error", json_string(uv_strerror(uv_error)),
              LOG_END);
}

/* ---------------------------------------------------------------- public */

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

static const char *admin_check_limits(const struct admin_limits *limits)
{
    if (limits->max_connections < 1 || limits->max_waits < 1 || limits->probe_reserve < 0 ||
        limits->max_request_bytes < 64)
        return "max_connections and max_waits must be at least 1, probe_reserve at least 0 "
               "and max_request_bytes at least 64";
    return NULL;
}

/* httpd's configuration for the port: everything bounded by
 * max_request_bytes, the deadlines of DESIGN. */
static struct httpd_config admin_httpd_config(const struct admin_limits *limits)
{
    return (struct httpd_config){
        .limits =
            {
                .max_request_bytes = limits->max_request_bytes,
                .max_body_bytes = limits->max_request_bytes,
                .max_pipelined_bytes = limits->max_request_bytes,
                .read_chunk_bytes = ADMIN_READ_CHUNK,
            },
        .timeouts =
            {
                .idle_ms = ADMIN_IDLE_TIMEOUT_MS,
                .write_ms = ADMIN_WRITE_TIMEOUT_MS,
                .drain_ms = ADMIN_DRAIN_TIMEOUT_MS,
            },
        .response_headers = "Cache-Control: no-store\r\n",
        .conn_data_size = sizeof(struct admin_conn),
        .backlog = ADMIN_BACKLOG,
    };
}

/* Binds the port; false (logged, s then being closed) on failure. */
static bool server_listen(admin_server_t *s, const char *listen,
                          const struct sockaddr_storage *addr)
{
    struct httpd_config config = admin_httpd_config(&s->limits);
    struct httpd_hooks hooks = {
        .data = s,
        .on_accept = admin_on_accept,
        .on_request = admin_on_request,
        .on_wait_over = admin_on_wait_over,
        .on_close = admin_on_close,
        .on_reject = admin_on_reject,
        .on_timeout = admin_on_timeout,
        .on_accept_error = admin_on_accept_error,
    };
    int rc = 0;
    s->httpd = httpd_start(s->loop, (const struct sockaddr *)addr, &config, &hooks, &rc);
    if (s->httpd == NULL) {
        log_event(LOG_ERROR, "admin_listen_failed", "listen", json_string(listen), "error",
                  json_string(uv_strerror(rc)), LOG_END);
        s->closing = true;
        uv_close((uv_handle_t *)&s->recheck_timer, on_recheck_timer_closed); /* frees s */
        return false;
    }
    s->httpd_open = true;
    s->port = httpd_port(s->httpd);
    return true;
}

admin_server_t *admin_start(uv_loop_t *loop, const char *listen, struct admin_hooks hooks,
                            const struct admin_limits *limits, const char *token_file)
{
    struct sockaddr_storage addr;
    const char *problem = httpd_parse_listen(listen, &addr);
    if (problem == NULL)
        problem = admin_check_limits(limits);
    if (problem) {
        log_event(LOG_ERROR, "admin_listen_failed", "listen", json_string(listen ? listen : ""),
                  "error", json_string(problem), LOG_END);
        return NULL;
    }
    admin_server_t *s = xcalloc(1, sizeof(*s));
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
    uv_timer_init(loop, &s->recheck_timer);
    s->recheck_timer.data = s;
    s->timer_open = true;
    if (!server_listen(s, listen, &addr))
        return NULL;
    if (hooks.ui_config && hooks.ui_of == NULL) {
        /* opens nothing until the first page */
        s->ui = ui_new(loop, hooks.ui_config, hooks.ui_config->db, NULL, NULL);
        s->ui_open = true;
    }
    log_event(LOG_INFO, "admin_listening", "listen", json_string(listen), "port",
              json_integer(s->port), "max_connections", json_integer(limits->max_connections),
              "max_waits", json_integer(limits->max_waits), "probe_reserve",
              json_integer(limits->probe_reserve), "auth",
              json_string(s->token_required ? "bearer token for /metrics, /v1/ and /ui" : "none"),
              "ui", json_boolean(s->ui != NULL || hooks.ui_of != NULL), LOG_END);
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
    while (s->rechecks) {
        struct admin_recheck *rc = s->rechecks;
        server_unlink_recheck(s, rc);
        rc->server = NULL; /* done() will only free it */
    }
    uv_timer_stop(&s->recheck_timer);
    uv_close((uv_handle_t *)&s->recheck_timer, on_recheck_timer_closed);
    httpd_close(s->httpd, on_httpd_closed, s); /* every connection, through admin_on_close */
    if (s->ui)
        ui_close(s->ui, on_ui_closed, s); /* answers its pages: orphaned by now, only freed */
}
