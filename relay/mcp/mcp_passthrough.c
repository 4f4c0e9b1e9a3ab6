/*
 * mcp_passthrough.c — a passthrough tool's call, straight to its upstream
 * (mcp_passthrough.h).
 *
 * WHY
 * Every other tool of the front door is an intent: enqueued, delivered by
 * a relay, answered from the saved outcome, so that a write happens once
 * whatever fails. A read needs none of that: reading twice changes
 * nothing, and a saved answer is a stale one. A tool the upstream says is
 * read-only, and that an admin marked passthrough (0045; `mcp-import
 * --passthrough-readonly`), is called here at once: no row is written, no
 * key is needed (a _meta key is ignored), and the agent gets the
 * upstream's own result. When the upstream cannot be asked or does not
 * answer, the agent is told that nothing was recorded and that the read
 * may be called again (JSON-RPC -32603, passthrough_failure_message).
 *
 * DESIGN
 * The MCP client is the relay's (mcp_upstream.c): the same bodies
 * (upstream_call_body with no key, the setup steps), the same session
 * steps (upstream_begin, upstream_setup_answer: 2026-07-28 stateless,
 * 2025-11-25 initialize + notifications/initialized + Mcp-Session-Id,
 * 'auto' asking server/discover first), the same headers
 * (upstream_setup_headers, upstream_call_headers) and the same reading of
 * an answer, JSON or an event stream (upstream_read_answer), with a
 * request of the server on the stream answered by a JSON-RPC error
 * (upstream_scan_requests, a POST of its own). Only the requests are this
 * file's: libcurl easy handles on the front door's own multi
 * (lib/http_client.c), on its loop, never blocking it. One session per
 * target, forgotten when its url or mcp_version changes; a 404 to a call
 * that carried a session id ends that session, and the call is sent once
 * more in a new one.
 *
 * Bounds: an answer is at most PT_MAX_ANSWER_BYTES (MCP_MAX_BODY_BYTES,
 * the cap of a request body) and is charged to the client's budget as it
 * arrives (charge); beyond either, the transfer stops. A call's time is
 * the caller's timeout_ms, setup included. The upstream's bearer token is
 * read from the front door's environment (the OUTBOX_SECRET_ variable
 * auth_secret names, as the relay reads it) at each call and never logged.
 */
#include "mcp/mcp_passthrough.h"
#include "lib/dlist.h"
#include "lib/http_client.h"
#include "lib/log.h"
#include "lib/strbuf.h"
#include "lib/xalloc.h"
#include "mcp/mcp_server_internal.h"
#include "mcp_upstream.h"
#include "targets.h"
#include "version.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define PT_MAX_ANSWER_BYTES MCP_MAX_BODY_BYTES
#define PT_REPLY_TIMEOUT_MS 5000L /* a refusal POSTed back to the server */
#define PT_SECRET_SPACE " \t\r\n"

const char *const pt_result_names[PT_RESULT_COUNT] = {
    "ok", "tool_error", "rpc_error", "unreachable", "timeout", "too_large", "failed"};

struct pt_session;

enum pt_kind { REQ_CALL, REQ_SETUP, REQ_REPLY };

struct pt_req {
    struct pt_req *prev, *next; /* in p->inflight while on the multi */
    struct pt_req *wait_next;   /* in its session's waiting list */
    enum pt_kind kind;
    struct passthrough *p;
    struct pt_session *ses;
    CURL *easy;
    struct curl_slist *headers;
    char *body;
    struct strbuf answer;
    bool too_big, over_budget;
    char *content_type, *session_id;
    char error[CURL_ERROR_SIZE];
    enum upstream_step step; /* REQ_SETUP */
    /* REQ_CALL */
    long long id;
    char *payload;      /* {"tool": NAME, "arguments": {...}} */
    char *session_sent; /* the session id the call carried */
    bool retried;       /* sent again after a 404 to its session */
    uint64_t deadline_ms;
    size_t scanned; /* of an event stream: where the next event starts */
    pt_charge_cb charge;
    pt_done_cb done;
    void *data;
};

/* What a target's requests are sent with: the latest call's row. */
struct pt_conf {
    char *url, *auth_header, *http_version, *ca_file, *cert, *key;
    char **static_headers;
    long timeout_ms;
};

struct pt_session {
    struct pt_session *next;
    char *target, *version_text;
    enum upstream_pref pref;
    struct upstream_session us; /* its waiting list and setup are the relay's: unused here */
    struct pt_req *waiting, *waiting_tail;
    struct pt_req *setup;
    struct pt_conf conf;
};

struct passthrough {
    uv_loop_t *loop;
    http_client_t *http;
    char *ca_file;
    struct pt_session *sessions;
    struct pt_req *inflight;
    long long next_id;
    void (*on_closed)(void *data);
    void *closed_data;
};

/* ------------------------------------------------------------------ requests */

static void req_free(struct pt_req *r)
{
    if (r->easy)
        curl_easy_cleanup(r->easy);
    curl_slist_free_all(r->headers);
    free(r->body);
    strbuf_free(&r->answer);
    free(r->content_type);
    free(r->session_id);
    free(r->payload);
    free(r->session_sent);
    free(r);
}

/* The call is over: done is told, the request freed. */
static void call_end(struct pt_req *r, enum pt_result result, json_t *value, long code,
                     const char *message)
{
    struct pt_outcome o = {.result = result, .value = value, .code = code, .message = message};
    r->done(r->data, &o);
    req_free(r);
}

static size_t on_body(char *ptr, size_t size, size_t n, void *data)
{
    struct pt_req *r = data;
    size_t len = size * n;
    size_t cap = r->kind == REQ_CALL ? PT_MAX_ANSWER_BYTES : 64 * 1024;
    if (r->answer.len + len > cap) {
        r->too_big = true;
        return 0; /* libcurl fails the transfer */
    }
    if (r->charge && !r->charge(r->data, len)) {
        r->over_budget = true;
        return 0;
    }
    strbuf_append(&r->answer, ptr, len);
    return len;
}

static char *header_value(const char *line, size_t len, const char *name)
{
    size_t nlen = strlen(name);
    if (len <= nlen || strncasecmp(line, name, nlen) != 0)
        return NULL;
    const char *v = line + nlen;
    size_t vlen = len - nlen;
    while (vlen && (*v == ' ' || *v == '\t'))
        v++, vlen--;
    while (vlen && (v[vlen - 1] == '\r' || v[vlen - 1] == '\n' || v[vlen - 1] == ' '))
        vlen--;
    return xstrndup(v, vlen);
}

static size_t on_header(char *line, size_t size, size_t n, void *data)
{
    struct pt_req *r = data;
    size_t len = size * n;
    char *v;
    if ((v = header_value(line, len, "content-type:"))) {
        free(r->content_type);
        r->content_type = v;
    } else if ((v = header_value(line, len, "mcp-session-id:"))) {
        free(r->session_id);
        r->session_id = v;
    }
    return len;
}

/* The headers of every request to the target: JSON, both answers, its
 * bearer token, its static headers. */
static struct curl_slist *base_headers(const struct pt_conf *c)
{
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    h = curl_slist_append(h, "Accept: application/json, text/event-stream");
    if (c->auth_header)
        h = curl_slist_append(h, c->auth_header);
    for (char **s = c->static_headers; s && *s; s++)
        h = curl_slist_append(h, *s);
    if (h == NULL)
        abort();
    return h;
}

static size_t on_call_body(char *ptr, size_t size, size_t n, void *data);

/* A request of the session's target; false when libcurl could not start it. */
static bool req_send(struct pt_req *r, long timeout_ms)
{
    const struct pt_conf *c = &r->ses->conf;
    CURL *e = r->easy = curl_easy_init();
    if (e == NULL)
        return false;
    curl_easy_setopt(e, CURLOPT_URL, c->url);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    bool h2 = c->http_version && !strcmp(c->http_version, "2") && !strncasecmp(c->url, "https", 5);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION,
                     h2 ? (long)CURL_HTTP_VERSION_2TLS : (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(r->body));
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 10000 ? timeout_ms : 10000L);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
    const char *ca = c->ca_file ? c->ca_file : r->p->ca_file;
    if (ca && *ca)
        curl_easy_setopt(e, CURLOPT_CAINFO, ca);
    if (c->cert && c->key) {
        curl_easy_setopt(e, CURLOPT_SSLCERT, c->cert);
        curl_easy_setopt(e, CURLOPT_SSLKEY, c->key);
    }
    curl_easy_setopt(e, CURLOPT_USERAGENT, "outbox-relay/" OUTBOX_RELAY_VERSION);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, r->kind == REQ_CALL ? on_call_body : on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->error);
    if (!http_client_add(r->p->http, e, r))
        return false;
    DLIST_PUSH_FRONT(r->p->inflight, r);
    return true;
}

static struct pt_req *req_new(struct passthrough *p, struct pt_session *ses, enum pt_kind kind)
{
    struct pt_req *r = xcalloc(1, sizeof(*r));
    r->p = p;
    r->ses = ses;
    r->kind = kind;
    strbuf_init(&r->answer);
    return r;
}

/* ------------------------------------------------------------------ sessions */

static void conf_clear(struct pt_conf *c)
{
    free(c->url);
    if (c->auth_header) {
        memset(c->auth_header, 0, strlen(c->auth_header));
        free(c->auth_header);
    }
    free(c->http_version);
    free(c->ca_file);
    free(c->cert);
    free(c->key);
    for (char **s = c->static_headers; s && *s; s++)
        free(*s);
    free(c->static_headers);
    memset(c, 0, sizeof(*c));
}

static char *dup_or_null(const char *s)
{
    return s ? xstrdup(s) : NULL;
}

/* The Authorization line from the variable auth_secret names; NULL and
 * *why when it cannot be read (the token itself never goes in a message). */
static char *auth_line(const char *var, const char **why)
{
    if (!target_secret_env_allowed(var)) {
        *why = "could not be asked: its auth_secret is not an " TARGET_SECRET_ENV_PREFIX
               "... variable";
        return NULL;
    }
    const char *value = getenv(var);
    size_t n = value ? strcspn(value, PT_SECRET_SPACE) : 0;
    if (value == NULL || n == 0 || value[n + strspn(value + n, PT_SECRET_SPACE)] != '\0') {
        *why = "could not be asked: the front door has no token for it (the variable its "
               "auth_secret names is not set in the front door's environment, or holds more than "
               "one token)";
        return NULL;
    }
    size_t len = sizeof("Authorization: Bearer ") + n;
    char *line = xmalloc(len);
    snprintf(line, len, "Authorization: Bearer %.*s", (int)n, value);
    return line;
}

/* t's session, its settings those of this call; a changed url or version
 * forgets the session. NULL and *why when the token cannot be read. */
static struct pt_session *session_of(struct passthrough *p, const struct pt_target *t,
                                     const char **why)
{
    char *auth = NULL;
    if (t->auth_secret && (auth = auth_line(t->auth_secret, why)) == NULL)
        return NULL;
    struct pt_session *ses = p->sessions;
    while (ses && strcmp(ses->target, t->target) != 0)
        ses = ses->next;
    if (ses == NULL) {
        ses = xcalloc(1, sizeof(*ses));
        ses->target = xstrdup(t->target);
        ses->version_text = xstrdup(t->mcp_version);
        ses->pref = upstream_pref_parse(t->mcp_version);
        ses->next = p->sessions;
        p->sessions = ses;
    } else if (strcmp(ses->conf.url, t->url) != 0 || strcmp(ses->version_text, t->mcp_version)) {
        upstream_reset(&ses->us);
        free(ses->version_text);
        ses->version_text = xstrdup(t->mcp_version);
        ses->pref = upstream_pref_parse(t->mcp_version);
    }
    conf_clear(&ses->conf);
    ses->conf.url = xstrdup(t->url);
    ses->conf.auth_header = auth;
    ses->conf.http_version = dup_or_null(t->http_version);
    ses->conf.ca_file = dup_or_null(t->ca_file);
    ses->conf.cert = dup_or_null(t->client_cert_file);
    ses->conf.key = dup_or_null(t->client_key_file);
    ses->conf.timeout_ms = t->timeout_ms;
    ses->conf.static_headers =
        t->headers_json ? target_parse_static_headers(t->target, t->headers_json) : NULL;
    return ses;
}

static void wait_push(struct pt_session *ses, struct pt_req *r)
{
    r->wait_next = NULL;
    if (ses->waiting_tail)
        ses->waiting_tail->wait_next = r;
    else
        ses->waiting = r;
    ses->waiting_tail = r;
}

static struct pt_req *take_waiting(struct pt_session *ses)
{
    struct pt_req *list = ses->waiting;
    ses->waiting = ses->waiting_tail = NULL;
    return list;
}

/* What libcurl's result says of a request that got no complete answer. */
static enum pt_result transport_result(CURLcode result, const struct pt_req *r,
                                       const char **message)
{
    if (r->over_budget) {
        *message = "answered more than this client's memory budget holds (--mcp-client-memory-"
                   "bytes)";
        return PT_TOO_LARGE;
    }
    if (r->too_big) {
        *message = "answered more than the front door takes (1 MiB, the cap of a request body)";
        return PT_TOO_LARGE;
    }
    switch (result) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        *message = "could not be reached";
        return PT_UNREACHABLE;
    case CURLE_OPERATION_TIMEDOUT:
        *message = "did not answer in time";
        return PT_TIMEOUT;
    default:
        *message = "broke off the exchange before its answer";
        return PT_FAILED;
    }
}

static void send_call(struct pt_req *r);

static bool send_setup(struct pt_session *ses, enum upstream_step step, struct passthrough *p)
{
    struct pt_req *s = req_new(p, ses, REQ_SETUP);
    s->step = step;
    s->body = upstream_setup_body(step);
    s->headers = upstream_setup_headers(base_headers(&ses->conf), &ses->us, step);
    ses->setup = s;
    if (!req_send(s, ses->conf.timeout_ms)) {
        ses->setup = NULL;
        req_free(s);
        return false;
    }
    return true;
}

/* The session's setup failed: its waiting calls end. */
static void fail_waiting(struct pt_session *ses, enum pt_result result, const char *message)
{
    for (struct pt_req *r = take_waiting(ses), *next; r; r = next) {
        next = r->wait_next;
        call_end(r, result, NULL, 0, message);
    }
}

/* A call goes, or waits for its session's setup (which it may start). */
static void call_go(struct pt_req *r)
{
    struct pt_session *ses = r->ses;
    enum upstream_step first;
    switch (upstream_begin(&ses->us, ses->pref, &first)) {
    case UPSTREAM_GO:
        send_call(r);
        return;
    case UPSTREAM_WAIT:
        wait_push(ses, r);
        return;
    case UPSTREAM_SET_UP:
        wait_push(ses, r);
        if (!send_setup(ses, first, r->p)) {
            ses->us.state = UPSTREAM_NONE;
            fail_waiting(ses, PT_FAILED, "could not be asked: no request could be made");
        }
        return;
    }
}

static void send_call(struct pt_req *r)
{
    struct pt_session *ses = r->ses;
    uint64_t now = uv_now(r->p->loop);
    if (now >= r->deadline_ms) {
        call_end(r, PT_TIMEOUT, NULL, 0, "did not answer in time");
        return;
    }
    char *tool = NULL;
    free(r->body);
    r->body = upstream_call_body(ses->us.era, r->payload, NULL, r->id, &tool);
    if (r->body == NULL) {
        call_end(r, PT_FAILED, NULL, 0, "could not be asked: the call could not be written");
        return;
    }
    curl_slist_free_all(r->headers);
    r->headers = upstream_call_headers(base_headers(&ses->conf), &ses->us, tool);
    free(tool);
    free(r->session_sent);
    r->session_sent = ses->us.era != UPSTREAM_ERA_MODERN && ses->us.session_id
                          ? xstrdup(ses->us.session_id)
                          : NULL;
    if (!req_send(r, (long)(r->deadline_ms - now))) {
        if (r->easy) {
            curl_easy_cleanup(r->easy);
            r->easy = NULL;
        }
        call_end(r, PT_FAILED, NULL, 0, "could not be asked: no request could be made");
    }
}

/* A request of the server on a call's stream: answered with its error. */
static void reply(void *ctx, const char *body)
{
    struct pt_req *call = ctx;
    struct pt_session *ses = call->ses;
    struct pt_req *r = req_new(call->p, ses, REQ_REPLY);
    r->body = xstrdup(body);
    struct curl_slist *h = base_headers(&ses->conf);
    if (ses->us.era == UPSTREAM_ERA_MODERN) {
        h = upstream_add_header(h, "MCP-Protocol-Version", UPSTREAM_MODERN_VERSION);
    } else {
        h = upstream_add_header(h, "MCP-Protocol-Version",
                                ses->us.version ? ses->us.version : UPSTREAM_LEGACY_VERSION);
        if (call->session_sent)
            h = upstream_add_header(h, "Mcp-Session-Id", call->session_sent);
    }
    r->headers = h;
    if (!req_send(r, PT_REPLY_TIMEOUT_MS))
        req_free(r);
}

static void on_call_done(struct pt_req *r, CURLcode result)
{
    struct pt_session *ses = r->ses;
    if (result != CURLE_OK) {
        const char *message;
        enum pt_result res = transport_result(result, r, &message);
        log_event(LOG_WARN, "mcp_passthrough_failed", "target", json_string(ses->target), "error",
                  json_string(r->error[0] ? r->error : curl_easy_strerror(result)), LOG_END);
        call_end(r, res, NULL, 0, message);
        return;
    }
    long status = 0;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
    if (status == 404 && r->session_sent && !r->retried) {
        /* the server forgot the session: a new one, and the call once more */
        if (ses->us.session_id && !strcmp(ses->us.session_id, r->session_sent))
            upstream_reset(&ses->us);
        r->retried = true;
        curl_easy_cleanup(r->easy);
        r->easy = NULL;
        strbuf_reset(&r->answer);
        free(r->content_type);
        r->content_type = NULL;
        r->scanned = 0;
        call_go(r);
        return;
    }
    struct upstream_answer a;
    upstream_read_answer(r->content_type, r->answer.data, r->answer.len, r->id, &a);
    if (a.kind == MCP_ANSWER_RPC_ERROR) {
        call_end(r, PT_RPC_ERROR, NULL, a.code, a.text);
    } else if (a.result) {
        json_t *value = json_loads(a.result, 0, NULL);
        call_end(r, a.kind == MCP_ANSWER_TOOL_ERROR ? PT_TOOL_ERROR : PT_OK, value, 0, NULL);
        json_decref(value);
    } else {
        char message[128];
        snprintf(message, sizeof(message), "answered HTTP %ld without a JSON-RPC response", status);
        call_end(r, PT_FAILED, NULL, 0, message);
    }
    upstream_answer_free(&a);
}

static void on_setup_done(struct pt_req *s, CURLcode result)
{
    struct pt_session *ses = s->ses;
    struct passthrough *p = s->p;
    ses->setup = NULL;
    long status = 0;
    const char *transport = NULL;
    enum pt_result failed = PT_FAILED;
    if (result != CURLE_OK) {
        failed = transport_result(result, s, &transport);
    } else {
        curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &status);
    }
    enum upstream_step next;
    char why[600];
    enum upstream_verdict v =
        upstream_setup_answer(&ses->us, s->step, transport, status, s->content_type, s->answer.data,
                              s->answer.len, s->session_id, &next, why, sizeof(why));
    req_free(s);
    switch (v) {
    case UPSTREAM_NEXT:
        if (!send_setup(ses, next, p)) {
            ses->us.state = UPSTREAM_NONE;
            fail_waiting(ses, PT_FAILED, "could not be asked: no request could be made");
        }
        return;
    case UPSTREAM_READY_V:
        for (struct pt_req *r = take_waiting(ses), *n; r; r = n) {
            n = r->wait_next;
            send_call(r);
        }
        return;
    case UPSTREAM_UNSENT:
    case UPSTREAM_REFUSED:
        if (transport) {
            fail_waiting(ses, failed, transport);
        } else {
            char message[700];
            snprintf(message, sizeof(message), "could not be asked: %s", why);
            fail_waiting(ses, PT_FAILED, message);
        }
        return;
    }
}

static void on_done(CURL *easy, CURLcode result, void *data)
{
    struct pt_req *r = data;
    DLIST_REMOVE(r->p->inflight, r);
    switch (r->kind) {
    case REQ_CALL:
        on_call_done(r, result);
        break;
    case REQ_SETUP:
        on_setup_done(r, result);
        break;
    case REQ_REPLY:
        req_free(r);
        break;
    }
}

/* An event stream is scanned as it arrives for requests of the server. */
static size_t on_call_body(char *ptr, size_t size, size_t n, void *data)
{
    struct pt_req *r = data;
    size_t len = on_body(ptr, size, n, data);
    if (len == size * n && r->content_type &&
        !strncasecmp(r->content_type, "text/event-stream", 17))
        r->scanned = upstream_scan_requests(r->answer.data, r->answer.len, r->scanned, reply, r);
    return len;
}

/* ------------------------------------------------------------------ interface */

passthrough_t *passthrough_new(uv_loop_t *loop, const char *ca_file)
{
    struct passthrough *p = xcalloc(1, sizeof(*p));
    p->loop = loop;
    p->ca_file = ca_file && *ca_file ? xstrdup(ca_file) : NULL;
    p->http = http_client_new(loop, on_done, 64);
    if (p->http == NULL) {
        free(p->ca_file);
        free(p);
        return NULL;
    }
    return p;
}

void passthrough_call(passthrough_t *p, const struct pt_target *t, const char *arguments_json,
                      long timeout_ms, pt_charge_cb charge, pt_done_cb done, void *data)
{
    struct pt_req *r = req_new(p, NULL, REQ_CALL);
    r->id = ++p->next_id;
    r->charge = charge;
    r->done = done;
    r->data = data;
    r->deadline_ms = uv_now(p->loop) + (uint64_t)(timeout_ms > 0 ? timeout_ms : 1);
    json_t *name = json_string(t->upstream_tool);
    char *name_text = json_dumps(name, JSON_ENCODE_ANY);
    json_decref(name);
    struct strbuf payload;
    strbuf_init(&payload);
    strbuf_printf(&payload, "{\"tool\":%s,\"arguments\":%s}", name_text ? name_text : "\"\"",
                  arguments_json && *arguments_json ? arguments_json : "{}");
    free(name_text);
    r->payload = payload.data;
    const char *why = NULL;
    r->ses = session_of(p, t, &why);
    if (r->ses == NULL) {
        call_end(r, PT_FAILED, NULL, 0, why);
        return;
    }
    call_go(r);
}

static void on_http_closed(void *data)
{
    struct passthrough *p = data;
    void (*cb)(void *) = p->on_closed;
    void *cb_data = p->closed_data;
    free(p->ca_file);
    free(p);
    if (cb)
        cb(cb_data);
}

void passthrough_close(passthrough_t *p, void (*on_closed)(void *data), void *data)
{
    p->on_closed = on_closed;
    p->closed_data = data;
    while (p->inflight) {
        struct pt_req *r = p->inflight;
        DLIST_REMOVE(p->inflight, r);
        http_client_remove(p->http, r->easy);
        if (r->kind == REQ_CALL)
            call_end(r, PT_FAILED, NULL, 0, "was not asked to the end: the front door is stopping");
        else
            req_free(r);
    }
    for (struct pt_session *ses = p->sessions, *next; ses; ses = next) {
        next = ses->next;
        fail_waiting(ses, PT_FAILED, "was not asked: the front door is stopping");
        upstream_session_free(&ses->us);
        conf_clear(&ses->conf);
        free(ses->target);
        free(ses->version_text);
        free(ses);
    }
    p->sessions = NULL;
    http_client_close(p->http, on_http_closed, p);
}

char *passthrough_failure_message(const struct pt_outcome *o)
{
    struct strbuf b;
    strbuf_init(&b);
    strbuf_printf(&b,
                  "Internal error: the upstream MCP server %s; nothing was recorded (this tool is "
                  "a read passed straight through, with no intent), so calling it again is safe",
                  o->message ? o->message : "failed");
    return b.data;
}
