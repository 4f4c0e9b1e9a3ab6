/*
 * deliver.c — build the request of one attempt and read what happened.
 *
 * DESIGN
 * "Were request bytes sent?" decides not_sent vs ambiguous, so it is read
 * from libcurl itself (CURLINFO_REQUEST_SIZE: bytes of the request written
 * to the socket), never guessed from the error code.
 *
 * Connection reuse and silent re-sends: when a reused keep-alive connection
 * turns out dead before any response byte, libcurl transparently retries
 * the request on a new connection. For a target that deduplicates by key
 * that is harmless; for one that cannot (key_header NULL) it executes the
 * action twice when the server acted and then dropped the connection (the
 * chaos test caught exactly this), so such targets get a fresh connection
 * per request (CURLOPT_FRESH_CONNECT + CURLOPT_FORBID_REUSE): correctness
 * before speed.
 *
 * Security: TLS peer and host verification stay on (libcurl's defaults,
 * set explicitly), only http and https are allowed, redirects are not
 * followed (the URL is the one an admin registered).
 *
 * TLS files: a target's ca_file (else --ca-file, else the system
 * store) verifies its certificate, and its client_cert_file and
 * client_key_file are presented when it asks for one. They are paths given
 * to libcurl, which reads the files when it makes a connection: nothing
 * here reads a key. Reuse stays safe across targets because libcurl reuses
 * a connection (and resumes a TLS session) only for a transfer whose TLS
 * settings match the ones it was made with, CA file and client certificate
 * included (curl's CVE-2016-5420 and CVE-2022-27782 fixes; 7.88 here), so a
 * target never gets a connection made with another one's certificate. The
 * key's path is not compared (tests/integration/64_mutual_tls.sh saw it): a
 * target whose key file is missing can ride a connection made with the same
 * certificate file by another target; that connection presents the same
 * certificate, the identity this target names too.
 * A CA file given (ca_file, --ca-file) is the only trust: libcurl's
 * built-in CA directory is unset for it; the system store is libcurl's
 * built-in bundle alone when it has a readable one (system_ca_bundle).
 * libcurl keeps the parsed CA store of the last CA file for
 * CA_CACHE_SECONDS (only without a CA directory, hence that too): a
 * replaced ca_file applies to new connections within that. A file that cannot be used fails the
 * attempt before any byte is sent (not_sent), with an error that names the setting
 * (delivery_tls_file_error).
 *
 * HTTP/2 (targets.http_version): the HTTP version is set on every request, 1.1 included
 * (libcurl 7.62 and later offer h2 by ALPN to https:// URLs unless told
 * otherwise). An h2 request waits for a connection to the target that is
 * being made (CURLOPT_PIPEWAIT) and then rides it as one more stream, as
 * many as the target's SETTINGS allow; the relay puts h2 requests on a
 * multi of their own that holds DELIVERY_H2_CONNECTIONS_PER_HOST
 * connections to a host at most, the rest waiting there for a stream. A target
 * that cannot deduplicate is spoken to in HTTP/1.1 whatever its row says
 * (the table refuses it too, targets_http2_needs_key): on h2 every request
 * but the first shares a connection, which is what the rule above forbids.
 * Was an h2 request sent? CURLINFO_REQUEST_SIZE counts the request's header
 * block once it is handed to the h2 layer (which may still buffer it): if
 * anything, more "sent" than on the wire, so ambiguous, never a false
 * not_sent. A stream error (CURLE_HTTP2_STREAM, RST_STREAM or a stream
 * closed uncleanly) needs an open stream, hence a request handed over: sent
 * whatever the count says. REFUSED_STREAM (the server did not process it,
 * RFC 9113 8.7) is retried by libcurl itself on a new connection; only if
 * those retries fail does it come back, as a failure after send.
 */
#include "deliver.h"
#include "version.h"
#include "lib/xalloc.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

/* Easy handles are reused (curl_easy_reset between uses): creating and
 * cleaning one per delivery was 9 % of the relay's CPU in the drain profile.
 * The pool follows demand (delivery_pool_trim); delivery_pool_drain()
 * empties it at exit. */
#define EASY_POOL_MAX 1024
static CURL *easy_pool[EASY_POOL_MAX];
static size_t easy_pool_count;

static CURL *easy_take(void)
{
    return easy_pool_count > 0 ? easy_pool[--easy_pool_count] : curl_easy_init();
}

static void easy_give_back(CURL *easy)
{
    if (easy_pool_count < EASY_POOL_MAX) {
        curl_easy_reset(easy);
        easy_pool[easy_pool_count++] = easy;
    } else {
        curl_easy_cleanup(easy);
    }
}

/* TLS sessions, shared by every easy handle: without it each handle keeps
 * its own cache, so a new connection resumed a session only when the pool
 * happened to hand out the handle that made one to that target before (5 of
 * 262 connections in the TLS bench). libcurl resumes a session only for a
 * transfer whose TLS settings (CA file, client certificate) match the ones
 * it was made with. One thread: no lock callbacks. NULL if libcurl cannot
 * make one (then each handle keeps its own, as before). */
static CURLSH *tls_sessions;

static CURLSH *tls_sessions_share(void)
{
    if (tls_sessions == NULL) {
        tls_sessions = curl_share_init();
        if (tls_sessions && curl_share_setopt(tls_sessions, CURLSHOPT_SHARE,
                                              CURL_LOCK_DATA_SSL_SESSION) != CURLSHE_OK) {
            curl_share_cleanup(tls_sessions);
            tls_sessions = NULL;
        }
    }
    return tls_sessions;
}

size_t delivery_pool_trim(size_t keep)
{
    size_t freed = 0;
    for (; easy_pool_count > keep; freed++)
        curl_easy_cleanup(easy_pool[--easy_pool_count]);
    return freed;
}

void delivery_pool_drain(void)
{
    while (easy_pool_count > 0)
        curl_easy_cleanup(easy_pool[--easy_pool_count]);
    if (tls_sessions && curl_share_cleanup(tls_sessions) == CURLSHE_OK)
        tls_sessions = NULL;
}

static void (*reply_hook)(struct delivery *reply);

void delivery_set_reply_hook(void (*hook)(struct delivery *reply))
{
    reply_hook = hook;
}

/* A request of the server on an MCP call's stream: its error goes back. */
static void on_server_request(void *ctx, const char *body)
{
    struct delivery *d = ctx;
    struct delivery *reply = delivery_new_mcp_reply(d, body);
    if (reply == NULL)
        return; /* the server waits: the call ends as an unanswered one */
    d->mcp_replies++;
    reply_hook(reply);
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *userp)
{
    struct delivery *d = userp;
    size_t n = size * nmemb;
    strbuf_append_capped(&d->body, data, n, d->body_limit);
    /* An MCP call's event stream: the server may ask something while it
     * runs the tool, and waits for the answer (mcp_upstream.c). */
    if (d->mcp && reply_hook && d->easy && d->sse != 0) {
        if (d->sse < 0) {
            char *type = NULL;
            curl_easy_getinfo(d->easy, CURLINFO_CONTENT_TYPE, &type);
            d->sse = type && strncasecmp(type, "text/event-stream", 17) == 0;
        }
        if (d->sse > 0)
            d->sse_scanned = upstream_scan_requests(d->body.data, d->body.len, d->sse_scanned,
                                                    on_server_request, d);
    }
    return n; /* the rest is read and dropped: the copy is bounded, the transfer is not failed */
}

int64_t wall_clock_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *userp)
{
    struct delivery *d = userp;
    size_t n = size * nmemb;
    static const char name[] = "retry-after:";
    if (n > sizeof(name) - 1 && n < 256 && strncasecmp(data, name, sizeof(name) - 1) == 0) {
        char value[256];
        size_t len = n - (sizeof(name) - 1);
        memcpy(value, data + sizeof(name) - 1, len);
        value[len] = '\0';
        char *end = value + strlen(value);
        while (end > value && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
            *--end = '\0';
        d->retry_after_ms = outcome_parse_retry_after(value, wall_clock_ms());
    }
    static const char session[] = "mcp-session-id:";
    if (d->kind == DELIVERY_MCP_SETUP && n > sizeof(session) - 1 && n < 512 &&
        strncasecmp(data, session, sizeof(session) - 1) == 0) {
        const char *v = data + sizeof(session) - 1;
        size_t len = n - (sizeof(session) - 1);
        while (len && (*v == ' ' || *v == '\t'))
            v++, len--;
        while (len && (v[len - 1] == '\r' || v[len - 1] == '\n' || v[len - 1] == ' '))
            len--;
        /* visible ASCII only (the spec's rule): it goes back in a header */
        bool visible = len > 0;
        for (size_t i = 0; i < len && visible; i++)
            visible = v[i] > 0x20 && v[i] < 0x7f;
        free(d->mcp_session_id);
        d->mcp_session_id = NULL;
        if (visible) {
            d->mcp_session_id = xmalloc(len + 1);
            memcpy(d->mcp_session_id, v, len);
            d->mcp_session_id[len] = '\0';
        }
    }
    return n;
}

/* How long libcurl may keep a parsed CA store (default 24 h): a CA bundle
 * replaced on disk is used by new connections within this. Parsing the
 * system store costs milliseconds, once per period, not per connection. */
#define CA_CACHE_SECONDS 300L

/* libcurl's receive buffer: one per transfer, allocated when it starts and
 * freed when it ends; each read takes at most that much. Its default, 16
 * KiB, was over half of the heap a request in flight needs (libcurl alone,
 * HTTP/1.1, handle and connection included: 27.8 KiB, 12.4 with 1 KiB),
 * and mostly never written by answers of a few hundred bytes: as the heap
 * reused those blocks for other allocations, pages never touched before
 * were, and the relay's RSS crept up at a steady load (make soak's load,
 * 7 minutes: the heap grew 8.1 -> 9.3 MiB, its resident part 5.5 -> 7.8
 * MiB). So a request gets a buffer for the answers its target gives: the
 * smallest power of two from libcurl's least (1 KiB) to its default that
 * holds the target's recent largest answer (status line, headers, body:
 * target->answer_bytes). Not 1 KiB for all: a 64 KiB answer read 1 KiB at
 * a time cost 87 us of CPU, 27 us in 16 KiB reads (libcurl alone).
 * Not for HTTP/2: libcurl 7.88 copies a stream's DATA into this buffer, and
 * when a frame does not fit it holds the rest back and pauses the session;
 * with many streams answering at once, some were never woken again and
 * stalled a few bytes short of their end until the timeout (500 answers of
 * 64 KiB over 4 connections, 1 KiB buffers: 3 timed out at 30 s with 64,078
 * of 65,536 bytes, became ambiguous and were sent again; the others took up
 * to 10 s where the target answered in 2). h2 transfers keep libcurl's
 * default, which holds a whole frame of nginx's and of most servers
 * (integration 28: the same load, all 500 in 2.0-2.4 s, none sent twice). */
#define RECEIVE_BUFFER_MIN 1024L
#define RECEIVE_BUFFER_MAX 16384L

/* libcurl's upload buffer: over TLS, libcurl 7.88 copies each request into
 * it before SSL_write (OpenSSL wants the same pointer when a write is
 * retried), allocating upload_buffer_size (64 KiB by default) when the
 * request goes out and freeing it when the transfer ends: 64 KiB of heap
 * per request in flight, whatever its size (20.7 of the relay's 36.2 MiB
 * of heap at its peak in the TLS headline, heaptrack). A small request
 * touches only its first page, but a large one all of it, beside the
 * payload's own copy. 16 KiB is libcurl's least and a TLS record's most: a
 * larger request goes out in 16 KiB writes, which OpenSSL would cut it
 * into anyway. */
#define UPLOAD_BUFFER_BYTES 16384L

long delivery_receive_buffer_bytes(size_t answer_bytes)
{
    long size = RECEIVE_BUFFER_MIN;
    while ((size_t)size < answer_bytes && size < RECEIVE_BUFFER_MAX)
        size *= 2;
    return size;
}

size_t delivery_answer_estimate(size_t estimate, size_t answer_bytes)
{
    if (answer_bytes >= estimate)
        return answer_bytes;
    return estimate - (estimate - answer_bytes + 15) / 16;
}

/* --ca-file: "" or NULL = the system store. */
static const char *relay_ca_file;

void delivery_set_ca_file(const char *path)
{
    relay_ca_file = path != NULL && *path ? path : NULL;
}

/* The CA bundle that verifies target: its own, else the relay's, else NULL
 * (the system store). */
static const char *ca_file_of(const struct target *target)
{
    return target->ca_file ? target->ca_file : relay_ca_file;
}

/* The system store as one file: libcurl's built-in CA bundle when it can
 * be read, else NULL (libcurl's defaults then, bundle and directory).
 * Debian's libcurl has both the bundle and /etc/ssl/certs, which
 * update-ca-certificates fills with the same certificates; with a
 * directory set, libcurl 7.88 keeps no parsed store, and parsing the
 * bundle (144 certificates) cost 38 ms of CPU per new connection. */
static const char *system_ca_bundle(void)
{
    static bool looked;
    static char *bundle;
    if (!looked) {
        looked = true;
        char *path = NULL;
        CURL *e = curl_easy_init();
#if LIBCURL_VERSION_NUM >= 0x075400 /* CURLINFO_CAINFO: 7.84 */
        if (e && curl_easy_getinfo(e, CURLINFO_CAINFO, &path) == CURLE_OK && path && *path &&
            access(path, R_OK) == 0)
            bundle = xstrdup(path);
#endif
        (void)path;
        curl_easy_cleanup(e);
    }
    return bundle;
}

bool delivery_tls_file_error(CURLcode result, const struct target *target, const char *relay_ca,
                             const char *detail, char *out, size_t out_size)
{
    const char *setting;
    if (result == CURLE_SSL_CACERT_BADFILE)
        setting = target->ca_file         ? "the target's ca_file"
                  : relay_ca && *relay_ca ? "--ca-file"
                                          : "the system CA store";
    else if (result == CURLE_SSL_CERTPROBLEM && target->client_cert_file)
        setting = "the target's client_cert_file or client_key_file";
    else
        return false;
    snprintf(out, out_size, "%s cannot be used: %s: %s", setting, curl_easy_strerror(result),
             detail && *detail ? detail : "no detail");
    return true;
}

long delivery_http_version(const struct target *target, const char *url)
{
    if (target->key_header == NULL || target->http != TARGET_HTTP_2)
        return CURL_HTTP_VERSION_1_1;
    /* h2 needs TLS here: cleartext has no negotiation, and libcurl 7.88
     * fails every request after the first on a kept prior-knowledge (h2c)
     * connection, so http:// stays on HTTP/1.1 */
    if (url != NULL && strncasecmp(url, "https://", 8) == 0)
        return CURL_HTTP_VERSION_2TLS;
    return CURL_HTTP_VERSION_1_1;
}

/* Options every request of a target shares: limits, security, callbacks. */
static void set_common_options(struct delivery *d, const struct target *target, const char *url)
{
    CURL *e = d->easy;
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    long http_version = delivery_http_version(target, url);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, http_version);
    d->multiplexed = http_version != CURL_HTTP_VERSION_1_1;
    if (d->multiplexed)
        curl_easy_setopt(e, CURLOPT_PIPEWAIT, 1L);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, d->headers);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)target->timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                     (long)(target->timeout_ms < 10000 ? target->timeout_ms : 10000));
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
    const char *ca_file = ca_file_of(target);
    if (ca_file == NULL)
        ca_file = system_ca_bundle();
    if (ca_file) {
        curl_easy_setopt(e, CURLOPT_CAINFO, ca_file);
        /* That file alone: no CA directory beside it (Debian's libcurl has
         * /etc/ssl/certs built in). libcurl caches a CA store only when no
         * directory is set: with one, every connection parsed the file
         * again (1 % of the relay's CPU in the TLS drain with a one-CA
         * ca_file; 38 ms per connection for the system bundle). */
        curl_easy_setopt(e, CURLOPT_CAPATH, NULL);
    }
    curl_easy_setopt(e, CURLOPT_CA_CACHE_TIMEOUT, CA_CACHE_SECONDS);
    CURLSH *sessions = tls_sessions_share();
    if (sessions)
        curl_easy_setopt(e, CURLOPT_SHARE, sessions);
    if (target->client_cert_file && target->client_key_file) {
        curl_easy_setopt(e, CURLOPT_SSLCERT, target->client_cert_file);
        curl_easy_setopt(e, CURLOPT_SSLKEY, target->client_key_file);
    }
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "outbox-relay/" OUTBOX_RELAY_VERSION);
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE,
                     d->multiplexed ? RECEIVE_BUFFER_MAX
                                    : delivery_receive_buffer_bytes(target->answer_bytes));
    curl_easy_setopt(e, CURLOPT_UPLOAD_BUFFERSIZE, UPLOAD_BUFFER_BYTES);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, d);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, d->error);
}

/* What every request of an intent starts from: its identity, a copy of
 * the payload, an empty bounded body and an easy handle from the pool
 * (d->easy NULL when curl could not make one). */
static struct delivery *delivery_alloc(enum delivery_kind kind, struct target *target,
                                       int64_t intent_id, const char *key, const char *payload,
                                       int attempt, bool was_ambiguous, int64_t first_attempt_ms,
                                       size_t body_limit)
{
    struct delivery *d = xcalloc(1, sizeof(*d));
    d->kind = kind;
    d->target = target;
    d->intent_id = intent_id;
    d->key = xstrdup(key);
    d->payload_len = strlen(payload);
    d->payload = xstrdup(payload);
    d->attempt = attempt;
    d->was_ambiguous = was_ambiguous;
    d->first_attempt_ms = first_attempt_ms;
    d->body_limit = body_limit;
    d->retry_after_ms = -1;
    d->sse = -1;
    strbuf_init(&d->body);
    d->easy = easy_take();
    return d;
}

struct delivery *delivery_new(struct target *target, const struct claimed_row *row,
                              size_t body_limit, int64_t now_s)
{
    struct delivery *d =
        delivery_alloc(DELIVERY_SEND, target, row->id, row->key, row->payload, row->attempt,
                       row->ambiguous, row->first_attempt_ms, body_limit);
    if (d->easy == NULL) {
        delivery_free(d);
        return NULL;
    }
    d->probe = row->probe;
    d->mcp = target->mcp;
    if (!d->mcp)
        d->headers = target_request_headers(target, row->key, d->payload, d->payload_len, now_s);
    d->key_sent = target->key_header != NULL; /* the header above carries it */
    CURL *e = d->easy;
    curl_easy_setopt(e, CURLOPT_URL, target->url);
    set_common_options(d, target, target->url);
    if (!d->mcp) { /* an MCP call's body and headers: delivery_mcp_prepare */
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, d->payload);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)d->payload_len);
    }
    if (strcmp(target->method, "POST") != 0)
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, target->method);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, d);
    if (target->key_header == NULL) {
        /* Neither reuse a kept-alive connection (a status check may have
         * left one) nor keep this one: see the DESIGN note above. */
        curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, 1L);
        curl_easy_setopt(e, CURLOPT_FORBID_REUSE, 1L);
    }
    if (row->traceparent)
        delivery_set_trace(d, row->traceparent);
    d->started_ns = uv_hrtime();
    return d;
}

/* ---------------------------------------------------------------- MCP targets */

/* The headers every request to an MCP target has: its key header, JSON,
 * the two answers it may give, its bearer token, its static headers. */
static struct curl_slist *mcp_headers(const struct target *t, const char *key)
{
    struct curl_slist *h = NULL;
    if (t->key_header && key && *key) {
        char line[1024];
        snprintf(line, sizeof(line), "%s: %s", t->key_header, key);
        h = curl_slist_append(h, line);
    }
    h = curl_slist_append(h, "Content-Type: application/json");
    h = curl_slist_append(h, "Accept: application/json, text/event-stream");
    if (t->auth_header)
        h = curl_slist_append(h, t->auth_header);
    for (char **s = t->static_headers; s && *s; s++)
        h = curl_slist_append(h, *s);
    if (h == NULL)
        abort();
    return h;
}

struct delivery *delivery_new_mcp_setup(struct target *target, enum upstream_step step,
                                        size_t body_limit)
{
    char *body = upstream_setup_body(step);
    struct delivery *d =
        delivery_alloc(DELIVERY_MCP_SETUP, target, 0, "", body, 0, false, 0, body_limit);
    free(body);
    if (d->easy == NULL) {
        delivery_free(d);
        return NULL;
    }
    d->mcp_step = step;
    d->headers = upstream_setup_headers(mcp_headers(target, NULL), &target->upstream, step);
    CURL *e = d->easy;
    curl_easy_setopt(e, CURLOPT_URL, target->url);
    set_common_options(d, target, target->url);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, d->payload);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)d->payload_len);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, d);
    d->started_ns = uv_hrtime();
    return d;
}

struct delivery *delivery_new_mcp_reply(struct delivery *call, const char *body)
{
    struct target *t = call->target;
    struct delivery *d =
        delivery_alloc(DELIVERY_MCP_REPLY, t, call->intent_id, call->key, body, 0, false, 0, 4096);
    if (d->easy == NULL) {
        delivery_free(d);
        return NULL;
    }
    d->owner = call->owner;
    d->headers = mcp_headers(t, NULL);
    const struct upstream_session *s = &t->upstream;
    if (call->mcp_session_sent) {
        d->headers = upstream_add_header(d->headers, "MCP-Protocol-Version",
                                         s->version ? s->version : UPSTREAM_LEGACY_VERSION);
        d->headers = upstream_add_header(d->headers, "Mcp-Session-Id", call->mcp_session_sent);
    } else {
        d->headers = upstream_add_header(d->headers, "MCP-Protocol-Version",
                                         s->era == UPSTREAM_ERA_MODERN ? UPSTREAM_MODERN_VERSION
                                         : s->version                  ? s->version
                                                                       : UPSTREAM_LEGACY_VERSION);
    }
    CURL *e = d->easy;
    curl_easy_setopt(e, CURLOPT_URL, t->url);
    set_common_options(d, t, t->url);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, d->payload);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)d->payload_len);
    d->started_ns = uv_hrtime();
    return d;
}

bool delivery_mcp_prepare(struct delivery *d)
{
    const struct target *t = d->target;
    const struct upstream_session *s = &t->upstream;
    char *tool = NULL;
    const char *key = d->mcp_status ? NULL : d->key; /* a status call is not the action */
    char *body = upstream_call_body(s->era, d->payload, key, (long long)d->intent_id, &tool);
    if (body == NULL) {
        free(d->mcp_refused);
        d->mcp_refused = xstrdup("the payload is not a tools/call ({\"tool\": NAME, "
                                 "\"arguments\": {...}}): not sent to the MCP target");
        return false;
    }
    free(d->payload);
    d->payload = body;
    d->payload_len = strlen(body);
    struct curl_slist *h = upstream_call_headers(mcp_headers(t, key), s, tool);
    if (s->era != UPSTREAM_ERA_MODERN && s->session_id)
        d->mcp_session_sent = xstrdup(s->session_id);
    free(tool);
    /* the trace header delivery_set_trace added, kept */
    for (struct curl_slist *old = d->headers; old; old = old->next)
        if (strncasecmp(old->data, "traceparent:", 12) == 0)
            h = curl_slist_append(h, old->data);
    curl_slist_free_all(d->headers);
    d->headers = h;
    d->key_sent = key != NULL && t->key_header != NULL;
    curl_easy_setopt(d->easy, CURLOPT_HTTPHEADER, d->headers);
    curl_easy_setopt(d->easy, CURLOPT_POSTFIELDS, d->payload);
    curl_easy_setopt(d->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)d->payload_len);
    d->started_ns = uv_hrtime();
    return true;
}

/* What the answer of an MCP call said: the facts for outcome_classify_mcp,
 * the error text, and the result as the body to save. */
static void mcp_report(struct delivery *d, struct delivery_report *report)
{
    report->facts.mcp = true;
    if (d->mcp_refused) {
        report->facts.mcp_refused = true;
        report->facts.transport = TRANSPORT_COMPLETE;
        report->sent = 0;
        snprintf(report->error, sizeof(report->error), "%s", d->mcp_refused);
        return;
    }
    if (report->facts.transport != TRANSPORT_COMPLETE)
        return;
    long s = report->http_status;
    if (s == 404 && d->mcp_session_sent) {
        report->facts.mcp_session_lost = true;
        struct upstream_session *us = &d->target->upstream;
        if (us->session_id && !strcmp(us->session_id, d->mcp_session_sent))
            upstream_reset(us);
        snprintf(report->error, sizeof(report->error),
                 "HTTP 404: the MCP session ended (not executed); initialized again");
        return;
    }
    if (s < 200 || s > 299)
        return;
    struct upstream_answer a;
    upstream_read_answer(d->content_type, d->body.data, d->body.len, (long long)d->intent_id, &a);
    report->facts.mcp_answer = a.kind;
    report->facts.rpc_code = a.code;
    report->facts.mcp_executed = a.executed;
    switch (a.kind) {
    case MCP_ANSWER_RESULT:
        report->error[0] = '\0';
        break;
    case MCP_ANSWER_TOOL_ERROR:
        snprintf(report->error, sizeof(report->error), "the tool said: %s",
                 a.text ? a.text : "(no text)");
        break;
    case MCP_ANSWER_RPC_ERROR:
        snprintf(report->error, sizeof(report->error), "JSON-RPC error %ld: %s%s", a.code,
                 a.text ? a.text : "",
                 outcome_rpc_code_not_executed(a.code) ? " (not executed)" : "");
        break;
    case MCP_ANSWER_NOT_FINAL:
        snprintf(report->error, sizeof(report->error),
                 "the upstream gateway's own call is not final yet: %s",
                 a.text ? a.text : "(no text)");
        break;
    case MCP_ANSWER_NONE:
        snprintf(report->error, sizeof(report->error),
                 "HTTP %ld but the answer ended without the call's response%s", s,
                 a.server_requests ? " (the server asked something on the stream, and was told"
                                     " the gateway cannot answer)"
                                   : "");
        break;
    }
    if (a.result) { /* the whole result is what is saved */
        strbuf_free(&d->body);
        strbuf_init(&d->body);
        strbuf_append_capped(&d->body, a.result, strlen(a.result), d->body_limit);
    }
    upstream_answer_free(&a);
}

/* ---------------------------------------------------------------- trace context */

static bool is_lower_hex(const char *s, size_t n)
{
    bool nonzero = false;
    for (size_t i = 0; i < n; i++) {
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
        nonzero |= s[i] != '0';
    }
    return nonzero;
}

/* xorshift64*, seeded once from the kernel: parent ids need to be unique
 * within a trace, not secret, and a syscall per attempt buys nothing. */
void delivery_new_span_id(char out[17])
{
    static uint64_t state;
    uint64_t x;
    do {
        if (state == 0 && uv_random(NULL, NULL, &state, sizeof(state), 0, NULL) != 0)
            state = uv_hrtime() | 1;
        if (state == 0)
            state = 0x9E3779B97F4A7C15ULL;
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        x = state * 0x2545F4914F6CDD1DULL;
    } while (x == 0);
    snprintf(out, 17, "%016llx", (unsigned long long)x);
}

bool delivery_set_trace(struct delivery *d, const char *traceparent)
{
    /* 00-<32 hex>-<16 hex>-<2 hex>: 55 characters */
    if (traceparent == NULL || strlen(traceparent) != 55 || strncmp(traceparent, "00-", 3) != 0 ||
        traceparent[35] != '-' || traceparent[52] != '-' || !is_lower_hex(traceparent + 3, 32) ||
        !is_lower_hex(traceparent + 36, 16) ||
        !(is_lower_hex(traceparent + 53, 2) || strcmp(traceparent + 53, "00") == 0))
        return false;
    memcpy(d->trace_id, traceparent + 3, 32);
    d->trace_id[32] = '\0';
    delivery_new_span_id(d->span_id);
    char line[80];
    snprintf(line, sizeof(line), "traceparent: 00-%s-%s-%s", d->trace_id, d->span_id,
             traceparent + 53);
    d->headers = curl_slist_append(d->headers, line);
    if (d->headers == NULL)
        abort();
    curl_easy_setopt(d->easy, CURLOPT_HTTPHEADER, d->headers);
    return true;
}

char *status_url_for_key(const char *template_url, const char *key)
{
    char *escaped = curl_easy_escape(NULL, key, 0);
    if (escaped == NULL)
        return NULL;
    struct strbuf url;
    strbuf_init(&url);
    const char *p = template_url;
    const char *hole;
    while ((hole = strstr(p, "{key}")) != NULL) {
        strbuf_append(&url, p, (size_t)(hole - p));
        strbuf_append_str(&url, escaped);
        p = hole + 5;
    }
    strbuf_append_str(&url, p);
    curl_free(escaped);
    return url.data;
}

struct delivery *delivery_new_status_check(struct target *target, const struct claimed_row *row,
                                           size_t body_limit)
{
    const char *key = row->key;
    if (target->mcp && target->status_tool) {
        /* the status tool, with {"key": KEY}; the call is built by delivery_mcp_prepare */
        json_t *p =
            json_pack("{s:s,s:{s:s}}", "tool", target->status_tool, "arguments", "key", key);
        char *payload = json_dumps(p, JSON_COMPACT);
        json_decref(p);
        struct delivery *d = delivery_alloc(DELIVERY_STATUS_CHECK, target, row->id, key, payload,
                                            row->attempt, true, row->first_attempt_ms, body_limit);
        free(payload);
        if (d->easy == NULL) {
            delivery_free(d);
            return NULL;
        }
        d->mcp = d->mcp_status = true;
        curl_easy_setopt(d->easy, CURLOPT_URL, target->url);
        set_common_options(d, target, target->url);
        curl_easy_setopt(d->easy, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(d->easy, CURLOPT_HEADERDATA, d);
        d->started_ns = uv_hrtime();
        return d;
    }
    struct delivery *d = delivery_alloc(DELIVERY_STATUS_CHECK, target, row->id, key, "",
                                        row->attempt, true, row->first_attempt_ms, body_limit);
    char *url = status_url_for_key(target->status_url, key);
    if (d->easy == NULL || url == NULL) {
        free(url);
        delivery_free(d);
        return NULL;
    }
    CURL *e = d->easy;
    if (target->key_header) {
        char line[1024];
        snprintf(line, sizeof(line), "%s: %s", target->key_header, key);
        d->headers = curl_slist_append(d->headers, line);
    }
    for (char **h = target->static_headers; h && *h; h++)
        d->headers = curl_slist_append(d->headers, *h);
    curl_easy_setopt(e, CURLOPT_URL, url);
    set_common_options(d, target, url);
    free(url);
    curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    /* The path exactly as templated: libcurl would otherwise resolve dot
     * segments, and a key of ".." would ask about GET / (whose 404 reads as
     * "not executed"). Keys are percent-encoded, so a '/' in a key cannot
     * make a segment of its own. */
    curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
    d->started_ns = uv_hrtime();
    return d;
}

void delivery_report(struct delivery *d, CURLcode result, bool aborted,
                     struct delivery_report *report)
{
    memset(report, 0, sizeof(*report));
    long request_size = 0;
    curl_easy_getinfo(d->easy, CURLINFO_REQUEST_SIZE, &request_size);
    curl_easy_getinfo(d->easy, CURLINFO_RESPONSE_CODE, &report->http_status);
    /* a stream error needs a stream, opened by the request (DESIGN) */
    report->sent = request_size > 0 || (!aborted && result == CURLE_HTTP2_STREAM);
    report->latency_ms = (int)((uv_hrtime() - d->started_ns) / 1000000);
    if (d->kind == DELIVERY_SEND) {
        long header_bytes = 0;
        curl_off_t body_bytes = 0;
        curl_easy_getinfo(d->easy, CURLINFO_HEADER_SIZE, &header_bytes);
        curl_easy_getinfo(d->easy, CURLINFO_SIZE_DOWNLOAD_T, &body_bytes);
        d->target->answer_bytes = delivery_answer_estimate(
            d->target->answer_bytes, (size_t)header_bytes + (size_t)body_bytes);
    }
    report->facts.honours_keys = d->target->key_header != NULL;
    report->facts.http_status = report->http_status;
    if (d->mcp || d->kind == DELIVERY_MCP_SETUP) {
        char *type = NULL;
        curl_easy_getinfo(d->easy, CURLINFO_CONTENT_TYPE, &type);
        free(d->content_type);
        d->content_type = type ? xstrdup(type) : NULL;
    }
    if (!aborted && result == CURLE_OK) {
        report->facts.transport = TRANSPORT_COMPLETE;
        if (report->http_status >= 400 || report->http_status < 200)
            snprintf(report->error, sizeof(report->error), "HTTP %ld", report->http_status);
        if (d->mcp)
            mcp_report(d, report);
        return;
    }
    if (d->mcp && d->mcp_refused && !aborted) {
        mcp_report(d, report);
        return;
    }
    report->facts.transport = report->sent ? TRANSPORT_FAILED_AFTER_SEND : TRANSPORT_FAILED_UNSENT;
    report->http_status = 0;
    report->facts.http_status = 0;
    if (aborted)
        snprintf(report->error, sizeof(report->error), "aborted at shutdown (%s)",
                 report->sent ? "request sent, no answer yet" : "nothing sent");
    else if (!delivery_tls_file_error(result, d->target, relay_ca_file, d->error, report->error,
                                      sizeof(report->error)))
        snprintf(report->error, sizeof(report->error), "%s: %s", curl_easy_strerror(result),
                 *d->error ? d->error : "no detail");
}

void delivery_free(struct delivery *d)
{
    if (d == NULL)
        return;
    if (d->easy)
        easy_give_back(d->easy);
    curl_slist_free_all(d->headers);
    strbuf_free(&d->body);
    free(d->mcp_session_id);
    free(d->mcp_session_sent);
    free(d->mcp_refused);
    free(d->content_type);
    free(d->key);
    free(d->payload);
    free(d);
}

/* For tests and fuzzing (deliver.h): the callbacks above, by name. */
size_t delivery_header_callback(char *data, size_t size, size_t nmemb, void *userp)
{
    return on_header(data, size, nmemb, userp);
}

size_t delivery_body_callback(char *data, size_t size, size_t nmemb, void *userp)
{
    return on_body(data, size, nmemb, userp);
}
