/*
 * oauth.c — the front door as an OAuth 2.1 resource server (what it owns:
 * oauth.h).
 *
 * WHY IT IS SHAPED SO
 * Remote MCP hosts do not paste a static token into a config file: they
 * read the server's Protected Resource Metadata (RFC 9728), find its
 * authorization server there, run the OAuth flow with it, and come back
 * with an access token meant for this resource (RFC 8707). The front door
 * only has to say where to go (the metadata, the challenge of a 401) and
 * check the tokens: JWTs signed by the issuer, whose public keys it
 * publishes as a JWKS.
 *
 * DESIGN
 * 1. The JWKS is fetched with libcurl's multi interface on the front
 *    door's own loop (lib/http_client.c), never blocking it: at start, then
 *    every OAUTH_REFRESH_MS (a key the issuer withdrew stops working within
 *    that), every OAUTH_RETRY_MS while no fetch has succeeded yet. The body
 *    is bounded (OAUTH_JWKS_MAX_BYTES); a failed fetch keeps the keys there
 *    were.
 * 2. A token whose kid is not in the keys may be signed by a key the issuer
 *    just rotated in: its request waits (its body unread) for one fetch.
 *    A fetch for an unknown kid starts at most once per
 *    OAUTH_KID_REFETCH_MS, so a flood of made-up kids costs the issuer one
 *    request a minute, not one each; inside that minute an unknown kid is
 *    401 at once. Requests that arrive while a fetch is under way (the
 *    first one at start among them) wait for it, whatever started it.
 * 3. What a token is allowed is not decided here: oauth_jwt.c checks the
 *    signature and claims and names the client; mcp_server.c maps the name
 *    to the client's row (outbox.mcp_oauth_client, migration 0043) through
 *    the admission's verdict cache, whose entry for a JWT lives until
 *    min(exp, the cache's 5 s) (mcp_admission.c), and the tools are that
 *    client's, as with a static token.
 * 4. The challenge: 401 "Bearer resource_metadata=…" (with scope= when
 *    --mcp-oauth-scope is set, and error="invalid_token" when a token was
 *    sent), 403 error="insufficient_scope" for a good token without the
 *    scope. The metadata is served at the RFC 9728 address derived from
 *    --mcp-resource (path appended) and at the bare well-known path, the
 *    one older clients try first.
 *
 * Left out on purpose: fetching the issuer's own metadata (RFC 8414) to
 * find jwks_uri (it is configured: one fewer thing to trust at run time),
 * token introspection (RFC 7662) for opaque tokens, DPoP.
 */
#include "mcp/oauth.h"

#include "lib/http_client.h"
#include "lib/log.h"
#include "lib/strbuf.h"
#include "lib/xalloc.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define OAUTH_REFRESH_MS (5 * 60 * 1000)
#define OAUTH_RETRY_MS 10000
#define OAUTH_KID_REFETCH_MS 60000
#define OAUTH_FETCH_TIMEOUT_S 10L
#define OAUTH_JWKS_MAX_BYTES (1024 * 1024)

struct oauth {
    uv_loop_t *loop;
    const struct config *cfg;
    http_client_t *http;
    CURL *easy; /* the fetch under way, or NULL */
    struct strbuf body;
    bool body_too_large;
    char error[CURL_ERROR_SIZE];
    const char *why; /* what started the fetch under way: start, refresh, kid */
    jwks_t *keys;
    bool kid_fetched;
    uint64_t kid_fetch_ms; /* when the last fetch for an unknown kid started */
    uv_timer_t refresh;
    struct oauth_waiter *waiters;
    char *metadata_url;
    char *resource_path; /* the resource's path ("" when none) */
    uint64_t fetches_ok, fetches_failed;
    bool closing;
    int open_handles;
    void (*on_closed)(void *data);
    void *closed_data;
};

/* ---------------------------------------------------------------- addresses */

/* The path of an absolute http(s) URL ("" when none or "/"), or NULL. */
static const char *url_path(const char *url)
{
    const char *p = NULL;
    if (!strncmp(url, "https://", 8))
        p = url + 8;
    else if (!strncmp(url, "http://", 7))
        p = url + 7;
    if (p == NULL || *p == '\0' || *p == '/')
        return NULL;
    const char *slash = strchr(p, '/');
    if (slash == NULL || !strcmp(slash, "/"))
        return "";
    return slash;
}

char *oauth_metadata_url(const char *resource)
{
    const char *path = url_path(resource);
    if (path == NULL || strpbrk(resource, "?#\"\\ ") != NULL)
        return NULL;
    const char *host = strstr(resource, "://") + 3;
    size_t origin_len = (size_t)(host - resource) + strcspn(host, "/");
    struct strbuf b = {0};
    strbuf_append(&b, resource, origin_len);
    strbuf_append_str(&b, "/.well-known/oauth-protected-resource");
    strbuf_append_str(&b, path);
    char *url = strbuf_steal(&b);
    strbuf_free(&b);
    return url;
}

/* ---------------------------------------------------------------- the fetch */

static size_t on_body(char *ptr, size_t size, size_t n, void *data)
{
    struct oauth *o = data;
    size_t len = size * n;
    if (o->body.len + len > OAUTH_JWKS_MAX_BYTES) {
        o->body_too_large = true;
        return 0; /* libcurl fails the transfer */
    }
    strbuf_append(&o->body, ptr, len);
    return len;
}

static void wake_waiters(struct oauth *o)
{
    struct oauth_waiter *list = o->waiters;
    o->waiters = NULL;
    for (struct oauth_waiter *w = list; w; w = w->next)
        w->waiting = false; /* a callback may cancel another: nothing to unlink */
    while (list) {
        struct oauth_waiter *w = list;
        list = w->next;
        w->on_keys(w);
    }
}

static void fetch_start(struct oauth *o, const char *why);

static void on_refresh(uv_timer_t *timer)
{
    struct oauth *o = timer->data;
    if (o->easy == NULL)
        fetch_start(o, "refresh");
}

static void on_fetched(CURL *easy, CURLcode result, void *data)
{
    struct oauth *o = data;
    long status = 0;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
    char problem[300] = "";
    jwks_t *keys = NULL;
    if (result != CURLE_OK)
        snprintf(problem, sizeof(problem), "%s",
                 o->body_too_large ? "the JWKS is larger than 1 MiB"
                                   : (o->error[0] ? o->error : curl_easy_strerror(result)));
    else if (status != 200)
        snprintf(problem, sizeof(problem), "HTTP status %ld", status);
    else /* NULL: problem says why */
        keys = jwks_parse(o->body.data ? o->body.data : "", o->body.len, problem, sizeof(problem));
    curl_easy_cleanup(easy);
    o->easy = NULL;
    strbuf_free(&o->body);
    if (keys) {
        jwks_free(o->keys);
        o->keys = keys;
        o->fetches_ok++;
        log_event(LOG_INFO, "mcp_oauth_jwks_fetched", "why", json_string(o->why), "keys",
                  json_integer(jwks_count(keys)), LOG_END);
    } else {
        o->fetches_failed++;
        log_event(LOG_WARN, "mcp_oauth_jwks_failed", "why", json_string(o->why), "error",
                  json_string(problem), "keys_kept", json_integer(jwks_count(o->keys)), LOG_END);
    }
    if (!o->closing)
        uv_timer_start(&o->refresh, on_refresh,
                       o->fetches_ok > 0 ? OAUTH_REFRESH_MS : OAUTH_RETRY_MS, 0);
    wake_waiters(o);
}

static void fetch_start(struct oauth *o, const char *why)
{
    CURL *c = curl_easy_init();
    if (c == NULL)
        abort();
    o->why = why;
    o->body_too_large = false;
    o->error[0] = '\0';
    strbuf_free(&o->body);
    curl_easy_setopt(c, CURLOPT_URL, o->cfg->mcp_oauth_jwks);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, o);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, o->error);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, OAUTH_FETCH_TIMEOUT_S);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https"); /* config.c: http to loopback only */
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_PRIVATE, o);
    if (o->cfg->ca_file && o->cfg->ca_file[0])
        curl_easy_setopt(c, CURLOPT_CAINFO, o->cfg->ca_file);
    uv_timer_stop(&o->refresh);
    o->easy = c;
    if (!http_client_add(o->http, c, o)) {
        o->easy = NULL;
        curl_easy_cleanup(c);
        o->fetches_failed++;
        log_event(LOG_WARN, "mcp_oauth_jwks_failed", "why", json_string(why), "error",
                  json_string("the transfer could not start"), LOG_END);
        uv_timer_start(&o->refresh, on_refresh, OAUTH_RETRY_MS, 0);
    }
}

/* ---------------------------------------------------------------- the check */

enum jwt_status oauth_check(oauth_t *o, const char *token, size_t len, struct jwt_result *out,
                            struct oauth_waiter *w, bool *waiting)
{
    *waiting = false;
    struct jwt_rules rules = {.issuer = o->cfg->mcp_oauth_issuer,
                              .audience = o->cfg->mcp_resource,
                              .client_claim = o->cfg->mcp_oauth_client_claim,
                              .scope = o->cfg->mcp_oauth_scope,
                              .now = (int64_t)time(NULL)};
    enum jwt_status status = jwt_check(o->keys, token, len, &rules, out);
    if (status != JWT_UNKNOWN_KID)
        return status;
    uint64_t now = uv_now(o->loop);
    if (o->easy == NULL && !o->closing &&
        (!o->kid_fetched || now - o->kid_fetch_ms >= OAUTH_KID_REFETCH_MS)) {
        o->kid_fetched = true;
        o->kid_fetch_ms = now;
        fetch_start(o, "kid");
    }
    if (o->easy == NULL) {
        out->status = JWT_BAD;
        snprintf(out->reason, sizeof(out->reason),
                 "unknown kid (the JWKS was fetched for one less than a minute ago)");
        return JWT_BAD;
    }
    w->waiting = true;
    w->prev = NULL;
    w->next = o->waiters;
    if (o->waiters)
        o->waiters->prev = w;
    o->waiters = w;
    *waiting = true;
    return JWT_UNKNOWN_KID;
}

void oauth_waiter_cancel(oauth_t *o, struct oauth_waiter *w)
{
    if (o == NULL || !w->waiting)
        return;
    if (w->prev)
        w->prev->next = w->next;
    else
        o->waiters = w->next;
    if (w->next)
        w->next->prev = w->prev;
    w->waiting = false;
}

/* ---------------------------------------------------------------- documents */

const char *oauth_challenge(const oauth_t *o, const char *error, char *buf, size_t len)
{
    struct strbuf b = {0};
    strbuf_printf(&b, "WWW-Authenticate: Bearer resource_metadata=\"%s\"", o->metadata_url);
    const char *scope = o->cfg->mcp_oauth_scope;
    if (scope && scope[0])
        strbuf_printf(&b, ", scope=\"%s\"", scope);
    if (error)
        strbuf_printf(&b, ", error=\"%s\"", error);
    strbuf_append_str(&b, "\r\n");
    snprintf(buf, len, "%s", b.data);
    strbuf_free(&b);
    return buf;
}

char *oauth_metadata(const oauth_t *o, const char *path)
{
    static const char well_known[] = "/.well-known/oauth-protected-resource";
    size_t n = sizeof(well_known) - 1;
    if (strncmp(path, well_known, n) != 0 ||
        (path[n] != '\0' && strcmp(path + n, o->resource_path) != 0))
        return NULL;
    json_t *doc =
        json_pack("{s:s, s:[s], s:[s]}", "resource", o->cfg->mcp_resource, "authorization_servers",
                  o->cfg->mcp_oauth_issuer, "bearer_methods_supported", "header");
    const char *scope = o->cfg->mcp_oauth_scope;
    if (scope && scope[0]) {
        json_t *list = json_array();
        for (const char *p = scope; *p;) {
            while (*p == ' ')
                p++;
            size_t k = strcspn(p, " ");
            if (k)
                json_array_append_new(list, json_stringn(p, k));
            p += k;
        }
        json_object_set_new(doc, "scopes_supported", list);
    }
    char *text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    return text;
}

void oauth_stats(const oauth_t *o, struct oauth_stats *out)
{
    out->fetches_ok = o->fetches_ok;
    out->fetches_failed = o->fetches_failed;
    out->keys = jwks_count(o->keys);
}

/* ---------------------------------------------------------------- life */

oauth_t *oauth_new(uv_loop_t *loop, const struct config *cfg)
{
    if (cfg->mcp_oauth_issuer == NULL || cfg->mcp_oauth_issuer[0] == '\0')
        return NULL;
    struct oauth *o = xcalloc(1, sizeof(*o));
    o->loop = loop;
    o->cfg = cfg;
    o->metadata_url = oauth_metadata_url(cfg->mcp_resource); /* config.c checked it */
    if (o->metadata_url == NULL)
        abort();
    o->resource_path = xstrdup(url_path(cfg->mcp_resource));
    curl_global_init(CURL_GLOBAL_DEFAULT); /* once per process; the fetch is its only use here */
    o->http = http_client_new(loop, on_fetched, 2);
    uv_timer_init(loop, &o->refresh);
    o->refresh.data = o;
    o->open_handles = 2; /* the timer, the http client */
    log_event(LOG_INFO, "mcp_oauth", "resource", json_string(cfg->mcp_resource), "issuer",
              json_string(cfg->mcp_oauth_issuer), "metadata", json_string(o->metadata_url),
              LOG_END);
    fetch_start(o, "start");
    return o;
}

static void oauth_handle_closed(struct oauth *o)
{
    if (--o->open_handles > 0)
        return;
    void (*cb)(void *) = o->on_closed;
    void *data = o->closed_data;
    jwks_free(o->keys);
    strbuf_free(&o->body);
    free(o->metadata_url);
    free(o->resource_path);
    free(o);
    if (cb)
        cb(data);
}

static void on_timer_closed(uv_handle_t *h)
{
    oauth_handle_closed(h->data);
}

static void on_http_closed(void *data)
{
    oauth_handle_closed(data);
}

void oauth_close(oauth_t *o, void (*on_closed)(void *data), void *data)
{
    o->closing = true;
    o->on_closed = on_closed;
    o->closed_data = data;
    for (struct oauth_waiter *w = o->waiters; w; w = w->next)
        w->waiting = false;
    o->waiters = NULL;
    if (o->easy) {
        http_client_remove(o->http, o->easy);
        curl_easy_cleanup(o->easy);
        o->easy = NULL;
    }
    uv_timer_stop(&o->refresh);
    uv_close((uv_handle_t *)&o->refresh, on_timer_closed);
    http_client_close(o->http, on_http_closed, o);
}
