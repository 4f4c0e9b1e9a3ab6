/*
 * mcp_upstream.c — the relay as an MCP client (mcp_upstream.h).
 *
 * DESIGN (docs/design.md, "The gateway's reach (fourth round)")
 * An intent for an 'mcp' target is one tools/call, its JSON-RPC id the
 * intent's id, its key in params._meta["outbox-relay/idempotency-key"] (and
 * in the target's key_header, deliver.c), so that an upstream that honours
 * the key deduplicates, and our own front door behind our relay takes the
 * key as its own.
 *
 * The era is the target's (targets.mcp_version), learned once per target
 * and relay:
 *   - 2026-07-28: stateless; every request carries the _meta envelope
 *     (protocol version, client capabilities, client info) and the
 *     MCP-Protocol-Version, Mcp-Method and Mcp-Name headers. No setup.
 *   - 2025-11-25: initialize, then notifications/initialized, each a request
 *     of its own on the relay's multi; the Mcp-Session-Id of initialize's
 *     answer goes with every call. A 404 to a call that carried it ends the
 *     session (outcome_classify_mcp: not executed, retried) and the next
 *     call initializes again.
 *   - 'auto': server/discover (a 2026-07-28 request) first. A result whose
 *     supportedVersions holds 2026-07-28 makes the target modern; any other
 *     complete answer (method not found, 400 "not initialized", a 404) makes
 *     it legacy, and initialize follows. A discover that gets no answer at
 *     all (refused, timed out) decides nothing: the waiting calls go back
 *     unsent and the next one asks again.
 * While a session is set up, calls to the target wait in its list (in
 * flight for the relay: leased, counted, renewed) and go when it is ready,
 * or end not sent (setup failed) or permanently failed (initialize
 * refused: the upstream will not run anything for us).
 *
 * Answers: application/json is one JSON-RPC message (or a batch);
 * text/event-stream is read whole (the relay's bounded copy of a body,
 * --max-response-bytes) and each event's data parsed: the response with the
 * call's id is the answer; notifications (progress, logs) are skipped. A
 * request of the server on the stream (sampling, elicitation, roots/list)
 * is answered while the call's stream is still open: the body is scanned
 * as it arrives (deliver.c's write callback, upstream_scan_requests), and
 * each request gets a JSON-RPC error (-32601: the gateway has no host,
 * model or user to ask), POSTed back to the target as the Streamable HTTP
 * transport says (a request of its own, DELIVERY_MCP_REPLY, with the
 * call's session id and the target's bearer token). The server's tool then
 * goes on or gives up, and its answer ends the call (before, the server
 * waited for an answer that never came, until the target's timeout: an
 * ambiguous call).
 */
#include "mcp_upstream.h"
#include "deliver.h"
#include "version.h"
#include "lib/strbuf.h"
#include "lib/xalloc.h"

#include <jansson.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum upstream_pref upstream_pref_parse(const char *text)
{
    if (text && !strcmp(text, UPSTREAM_MODERN_VERSION))
        return UPSTREAM_PREF_MODERN;
    if (text && !strcmp(text, UPSTREAM_LEGACY_VERSION))
        return UPSTREAM_PREF_LEGACY;
    return UPSTREAM_AUTO;
}

static json_t *modern_meta(void)
{
    return json_pack("{s:s,s:{},s:{s:s,s:s}}", UPSTREAM_META_VERSION, UPSTREAM_MODERN_VERSION,
                     UPSTREAM_META_CAPABILITIES, UPSTREAM_META_CLIENT_INFO, "name", "outbox-relay",
                     "version", OUTBOX_RELAY_VERSION);
}

char *upstream_call_body(enum upstream_era era, const char *payload, const char *key, long long id,
                         char **tool_out)
{
    *tool_out = NULL;
    json_t *p = json_loads(payload, 0, NULL);
    json_t *tool = json_object_get(p, "tool");
    json_t *arguments = json_object_get(p, "arguments");
    if (!json_is_string(tool) || !json_is_object(arguments)) {
        json_decref(p);
        return NULL;
    }
    json_t *meta = era == UPSTREAM_ERA_MODERN ? modern_meta() : json_object();
    if (key)
        json_object_set_new(meta, UPSTREAM_META_KEY, json_string(key));
    json_t *body =
        json_pack("{s:s,s:I,s:s,s:{s:O,s:O,s:o}}", "jsonrpc", "2.0", "id", (json_int_t)id, "method",
                  "tools/call", "params", "name", tool, "arguments", arguments, "_meta", meta);
    char *text = json_dumps(body, JSON_COMPACT);
    *tool_out = xstrdup(json_string_value(tool));
    json_decref(body);
    json_decref(p);
    return text;
}

char *upstream_setup_body(enum upstream_step step)
{
    json_t *body;
    switch (step) {
    case UPSTREAM_DISCOVER:
        body = json_pack("{s:s,s:i,s:s,s:{s:o}}", "jsonrpc", "2.0", "id", UPSTREAM_SETUP_ID,
                         "method", "server/discover", "params", "_meta", modern_meta());
        break;
    case UPSTREAM_INITIALIZE:
        body = json_pack("{s:s,s:i,s:s,s:{s:s,s:{},s:{s:s,s:s}}}", "jsonrpc", "2.0", "id",
                         UPSTREAM_SETUP_ID, "method", "initialize", "params", "protocolVersion",
                         UPSTREAM_LEGACY_VERSION, "capabilities", "clientInfo", "name",
                         "outbox-relay", "version", OUTBOX_RELAY_VERSION);
        break;
    default:
        body = json_pack("{s:s,s:s}", "jsonrpc", "2.0", "method", "notifications/initialized");
        break;
    }
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    return text;
}

char *upstream_list_body(enum upstream_era era, const char *cursor, long long id)
{
    json_t *params = json_object();
    if (cursor != NULL)
        json_object_set_new(params, "cursor", json_string(cursor));
    if (era == UPSTREAM_ERA_MODERN)
        json_object_set_new(params, "_meta", modern_meta());
    json_t *body = json_pack("{s:s,s:I,s:s,s:o}", "jsonrpc", "2.0", "id", (json_int_t)id, "method",
                             "tools/list", "params", params);
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    return text;
}

char *upstream_header_value(const char *text)
{
    bool plain = *text != ' ' && *text != '\0';
    for (const unsigned char *p = (const unsigned char *)text; *p && plain; p++)
        plain = *p >= 0x20 && *p < 0x7f;
    size_t n = strlen(text);
    if (plain && text[n - 1] != ' ')
        return xstrdup(text);
    char *out = xmalloc(4 * ((n + 2) / 3) + 16);
    memcpy(out, "=?base64?", 9);
    int len = EVP_EncodeBlock((unsigned char *)out + 9, (const unsigned char *)text, (int)n);
    memcpy(out + 9 + len, "?=", 3);
    return out;
}

/* The text blocks of a result, one per line, bounded. */
static char *result_text(json_t *result)
{
    struct strbuf b;
    strbuf_init(&b);
    size_t i;
    json_t *block;
    json_array_foreach(json_object_get(result, "content"), i, block)
    {
        json_t *text = json_object_get(block, "text");
        if (!json_is_string(text))
            continue;
        if (b.len)
            strbuf_append_str(&b, "\n");
        strbuf_append_capped(&b, json_string_value(text), json_string_length(text), 2048);
    }
    return b.len ? b.data : (strbuf_free(&b), NULL);
}

/* One JSON-RPC message: the answer when it is the response with this id. */
static bool take_message(json_t *msg, long long id, struct upstream_answer *a)
{
    if (!json_is_object(msg))
        return false;
    json_t *mid = json_object_get(msg, "id");
    bool is_request = json_object_get(msg, "method") != NULL;
    if (is_request) {
        if (mid != NULL)
            a->server_requests++;
        return false; /* a notification or a request of the server */
    }
    if (!json_is_integer(mid) || json_integer_value(mid) != id)
        return false;
    json_t *result = json_object_get(msg, "result");
    json_t *error = json_object_get(msg, "error");
    if (json_is_object(result)) {
        a->kind = json_is_true(json_object_get(result, "isError")) ? MCP_ANSWER_TOOL_ERROR
                                                                   : MCP_ANSWER_RESULT;
        json_t *final = json_object_get(json_object_get(result, "_meta"), UPSTREAM_META_FINAL);
        if (a->kind == MCP_ANSWER_RESULT && json_is_false(final))
            a->kind = MCP_ANSWER_NOT_FINAL;
        a->result = json_dumps(result, JSON_COMPACT);
        a->text = result_text(result);
        json_t *executed =
            json_object_get(json_object_get(result, "structuredContent"), "executed");
        a->executed = json_is_boolean(executed) ? json_is_true(executed) : -1;
        return true;
    }
    if (json_is_object(error)) {
        a->kind = MCP_ANSWER_RPC_ERROR;
        json_t *code = json_object_get(error, "code");
        a->code = json_is_integer(code) ? (long)json_integer_value(code) : 0;
        json_t *message = json_object_get(error, "message");
        a->text = xstrdup(json_is_string(message) ? json_string_value(message) : "no message");
        return true;
    }
    return false;
}

static bool take_json(const char *text, size_t len, long long id, struct upstream_answer *a)
{
    json_t *msg = json_loadb(text, len, 0, NULL);
    bool found = false;
    if (json_is_array(msg)) {
        size_t i;
        json_t *item;
        json_array_foreach(msg, i, item)
        {
            if (!found)
                found = take_message(item, id, a);
        }
    } else {
        found = take_message(msg, id, a);
    }
    json_decref(msg);
    return found;
}

void upstream_read_answer(const char *content_type, const char *body, size_t len, long long id,
                          struct upstream_answer *a)
{
    memset(a, 0, sizeof(*a));
    a->kind = MCP_ANSWER_NONE;
    a->executed = -1;
    if (body == NULL)
        return;
    if (content_type == NULL || strncasecmp(content_type, "text/event-stream", 17) != 0) {
        take_json(body, len, id, a);
        return;
    }
    /* An event is its "data:" lines joined by newlines, ended by an empty line. */
    struct strbuf data;
    strbuf_init(&data);
    const char *p = body, *end = body + len;
    while (p <= end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *line_end = eol ? eol : end;
        size_t n = (size_t)(line_end - p);
        if (n > 0 && p[n - 1] == '\r')
            n--;
        if (n == 0 || eol == NULL) {
            if (n > 0 && strncmp(p, "data:", 5) == 0) { /* a last line without its newline */
                size_t skip = n > 5 && p[5] == ' ' ? 6 : 5;
                if (data.len)
                    strbuf_append_str(&data, "\n");
                strbuf_append(&data, p + skip, n - skip);
            }
            if (data.len && take_json(data.data, data.len, id, a))
                break;
            data.len = 0;
        } else if (n >= 5 && strncmp(p, "data:", 5) == 0) {
            size_t skip = n > 5 && p[5] == ' ' ? 6 : 5;
            if (data.len)
                strbuf_append_str(&data, "\n");
            strbuf_append(&data, p + skip, n - skip);
        }
        if (eol == NULL)
            break;
        p = eol + 1;
    }
    strbuf_free(&data);
}

char *upstream_refusal_body(const json_t *id, const char *method)
{
    json_t *body = json_pack(
        "{s:s,s:O,s:{s:i,s:s++}}", "jsonrpc", "2.0", "id", id, "error", "code", -32601, "message",
        "outbox-relay cannot answer ", method,
        ": it is a gateway delivering a recorded tools/call, with no host, model or user to ask");
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    return text;
}

/* The requests of the server in one event's data (a message or a batch). */
static void reply_to_requests(const char *data, size_t len,
                              void (*reply)(void *ctx, const char *body), void *ctx)
{
    json_t *msg = json_loadb(data, len, 0, NULL);
    json_t *one = msg;
    for (size_t i = 0; json_is_array(msg) ? i < json_array_size(msg) : i < 1; i++) {
        if (json_is_array(msg))
            one = json_array_get(msg, i);
        json_t *method = json_object_get(one, "method");
        json_t *id = json_object_get(one, "id");
        if (json_is_string(method) && (json_is_string(id) || json_is_integer(id))) {
            char *body = upstream_refusal_body(id, json_string_value(method));
            reply(ctx, body);
            free(body);
        }
    }
    json_decref(msg);
}

size_t upstream_scan_requests(const char *buf, size_t len, size_t from,
                              void (*reply)(void *ctx, const char *body), void *ctx)
{
    struct strbuf data;
    strbuf_init(&data);
    size_t done = from, p = from;
    while (p < len) {
        const char *eol = memchr(buf + p, '\n', len - p);
        if (eol == NULL)
            break; /* a line not complete yet */
        size_t n = (size_t)(eol - (buf + p));
        const char *line = buf + p;
        if (n > 0 && line[n - 1] == '\r')
            n--;
        p = (size_t)(eol - buf) + 1;
        if (n == 0) { /* the end of an event */
            if (data.len)
                reply_to_requests(data.data, data.len, reply, ctx);
            data.len = 0;
            done = p;
        } else if (n >= 5 && strncmp(line, "data:", 5) == 0) {
            size_t skip = n > 5 && line[5] == ' ' ? 6 : 5;
            if (data.len)
                strbuf_append_str(&data, "\n");
            strbuf_append(&data, line + skip, n - skip);
        }
    }
    strbuf_free(&data);
    return done;
}

void upstream_answer_free(struct upstream_answer *a)
{
    free(a->text);
    free(a->result);
    a->text = a->result = NULL;
}

bool upstream_discover_says_modern(const struct upstream_answer *a)
{
    if (a->kind != MCP_ANSWER_RESULT || a->result == NULL)
        return false;
    json_t *r = json_loads(a->result, 0, NULL);
    bool modern = false;
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(r, "supportedVersions"), i, v)
    {
        if (json_is_string(v) && !strcmp(json_string_value(v), UPSTREAM_MODERN_VERSION))
            modern = true;
    }
    json_decref(r);
    return modern;
}

char *upstream_initialize_version(const struct upstream_answer *a)
{
    if (a->kind != MCP_ANSWER_RESULT || a->result == NULL)
        return NULL;
    json_t *r = json_loads(a->result, 0, NULL);
    json_t *v = json_object_get(r, "protocolVersion");
    char *version = json_is_string(v) ? xstrdup(json_string_value(v)) : NULL;
    json_decref(r);
    return version;
}

/* ------------------------------------------------------------------ session */

static void wait_push(struct upstream_session *s, struct delivery *d)
{
    d->mcp_next = NULL;
    d->mcp_waiting = true;
    if (s->waiting_tail)
        s->waiting_tail->mcp_next = d;
    else
        s->waiting = d;
    s->waiting_tail = d;
}

void upstream_forget(struct upstream_session *s, struct delivery *d)
{
    if (!d->mcp_waiting)
        return;
    struct delivery **pp = &s->waiting, *prev = NULL;
    while (*pp && *pp != d) {
        prev = *pp;
        pp = &(*pp)->mcp_next;
    }
    if (*pp == d) {
        *pp = d->mcp_next;
        if (s->waiting_tail == d)
            s->waiting_tail = prev;
    }
    d->mcp_next = NULL;
    d->mcp_waiting = false;
}

struct delivery *upstream_take_waiting(struct upstream_session *s)
{
    struct delivery *list = s->waiting;
    for (struct delivery *d = list; d; d = d->mcp_next)
        d->mcp_waiting = false;
    s->waiting = s->waiting_tail = NULL;
    return list;
}

enum upstream_begin upstream_begin(struct upstream_session *s, enum upstream_pref pref,
                                   enum upstream_step *first)
{
    if (s->state == UPSTREAM_NONE && pref == UPSTREAM_PREF_MODERN) {
        s->era = UPSTREAM_ERA_MODERN; /* nothing to set up */
        s->state = UPSTREAM_READY;
    }
    if (s->state == UPSTREAM_READY)
        return UPSTREAM_GO;
    if (s->state == UPSTREAM_SETTING_UP)
        return UPSTREAM_WAIT;
    s->era = UPSTREAM_ERA_UNKNOWN;
    s->state = UPSTREAM_SETTING_UP;
    *first = pref == UPSTREAM_AUTO ? UPSTREAM_DISCOVER : UPSTREAM_INITIALIZE;
    return UPSTREAM_SET_UP;
}

bool upstream_take(struct upstream_session *s, struct delivery *d, struct delivery **setup,
                   bool *setup_failed)
{
    *setup = NULL;
    *setup_failed = false;
    struct target *t = d->target;
    enum upstream_step step;
    enum upstream_begin b = upstream_begin(s, t->mcp_pref, &step);
    if (b == UPSTREAM_GO)
        return true;
    if (b == UPSTREAM_SET_UP) {
        struct delivery *first = delivery_new_mcp_setup(t, step, d->body_limit);
        if (first == NULL) {
            s->state = UPSTREAM_NONE;
            *setup_failed = true;
            return false;
        }
        s->setup = *setup = first;
    }
    wait_push(s, d);
    return false;
}

void upstream_reset(struct upstream_session *s)
{
    if (s->state == UPSTREAM_READY)
        s->state = UPSTREAM_NONE;
    free(s->session_id);
    free(s->version);
    s->session_id = s->version = NULL;
}

enum upstream_verdict upstream_setup_answer(struct upstream_session *s, enum upstream_step step,
                                            const char *transport_error, long http_status,
                                            const char *content_type, const char *body, size_t len,
                                            const char *session_id, enum upstream_step *next,
                                            char *why, size_t why_size)
{
    enum upstream_verdict verdict;
    if (transport_error != NULL) {
        snprintf(why, why_size, "setting up the MCP session failed: %s", transport_error);
        verdict = UPSTREAM_UNSENT;
        goto done;
    }
    struct upstream_answer a;
    upstream_read_answer(content_type, body, len, UPSTREAM_SETUP_ID, &a);
    bool ok = http_status >= 200 && http_status <= 299;
    if (step == UPSTREAM_DISCOVER) {
        bool modern = ok && upstream_discover_says_modern(&a);
        upstream_answer_free(&a);
        if (modern) {
            s->era = UPSTREAM_ERA_MODERN;
            verdict = UPSTREAM_READY_V;
            goto done;
        }
        *next = UPSTREAM_INITIALIZE;
        return UPSTREAM_NEXT;
    }
    if (step == UPSTREAM_INITIALIZE) {
        char *version = ok ? upstream_initialize_version(&a) : NULL;
        if (version == NULL) {
            if (a.kind == MCP_ANSWER_RPC_ERROR)
                snprintf(why, why_size, "the upstream refused initialize: JSON-RPC error %ld: %s",
                         a.code, a.text);
            else
                snprintf(why, why_size, "the upstream refused initialize: HTTP %ld%s%s",
                         http_status, a.text ? ": " : "", a.text ? a.text : "");
            upstream_answer_free(&a);
            /* 5xx, 408, 429: it may accept later; anything else is its answer */
            bool later = http_status >= 500 || http_status == 408 || http_status == 429;
            verdict = later ? UPSTREAM_UNSENT : UPSTREAM_REFUSED;
            goto done;
        }
        upstream_answer_free(&a);
        free(s->version);
        s->version = version;
        free(s->session_id);
        s->session_id = session_id ? xstrdup(session_id) : NULL;
        s->era = UPSTREAM_ERA_LEGACY;
        *next = UPSTREAM_INITIALIZED;
        return UPSTREAM_NEXT;
    }
    upstream_answer_free(&a);
    /* 202 Accepted; a server that answers anything else has still
     * initialized the session: the calls go, and their answers say. */
    verdict = UPSTREAM_READY_V;
done:
    s->state = verdict == UPSTREAM_READY_V ? UPSTREAM_READY : UPSTREAM_NONE;
    return verdict;
}

enum upstream_verdict upstream_setup_done(struct upstream_session *s, struct delivery *setup,
                                          CURLcode result, struct delivery **next, char *why,
                                          size_t why_size)
{
    *next = NULL;
    struct delivery_report report;
    delivery_report(setup, result, false, &report);
    s->setup = NULL;
    enum upstream_step step;
    enum upstream_verdict verdict = upstream_setup_answer(
        s, setup->mcp_step, report.facts.transport != TRANSPORT_COMPLETE ? report.error : NULL,
        report.http_status, setup->content_type, setup->body.data, setup->body.len,
        setup->mcp_session_id, &step, why, why_size);
    if (verdict == UPSTREAM_NEXT) {
        *next = delivery_new_mcp_setup(setup->target, step, setup->body_limit);
        if (*next == NULL) {
            snprintf(why, why_size, "setting up the MCP session failed: no request could be made");
            s->state = UPSTREAM_NONE;
            verdict = UPSTREAM_UNSENT;
        } else {
            s->setup = *next;
        }
    }
    delivery_free(setup);
    return verdict;
}

struct curl_slist *upstream_add_header(struct curl_slist *h, const char *name, const char *value)
{
    size_t len = strlen(name) + strlen(value) + 3;
    char *line = xmalloc(len);
    snprintf(line, len, "%s: %s", name, value);
    h = curl_slist_append(h, line);
    free(line);
    if (h == NULL)
        abort();
    return h;
}

struct curl_slist *upstream_setup_headers(struct curl_slist *h, const struct upstream_session *s,
                                          enum upstream_step step)
{
    if (step == UPSTREAM_DISCOVER) {
        h = upstream_add_header(h, "MCP-Protocol-Version", UPSTREAM_MODERN_VERSION);
        h = upstream_add_header(h, "Mcp-Method", "server/discover");
    } else if (step == UPSTREAM_INITIALIZED) {
        h = upstream_add_header(h, "MCP-Protocol-Version",
                                s->version ? s->version : UPSTREAM_LEGACY_VERSION);
        if (s->session_id)
            h = upstream_add_header(h, "Mcp-Session-Id", s->session_id);
    }
    return h;
}

struct curl_slist *upstream_call_headers(struct curl_slist *h, const struct upstream_session *s,
                                         const char *tool)
{
    if (s->era == UPSTREAM_ERA_MODERN) {
        char *name = upstream_header_value(tool);
        h = upstream_add_header(h, "MCP-Protocol-Version", UPSTREAM_MODERN_VERSION);
        h = upstream_add_header(h, "Mcp-Method", "tools/call");
        h = upstream_add_header(h, "Mcp-Name", name);
        free(name);
    } else {
        h = upstream_add_header(h, "MCP-Protocol-Version",
                                s->version ? s->version : UPSTREAM_LEGACY_VERSION);
        if (s->session_id)
            h = upstream_add_header(h, "Mcp-Session-Id", s->session_id);
    }
    return h;
}

void upstream_session_free(struct upstream_session *s)
{
    if (s->setup)
        delivery_free(s->setup);
    s->setup = NULL;
    free(s->session_id);
    free(s->version);
    s->session_id = s->version = NULL;
    s->waiting = s->waiting_tail = NULL;
    s->state = UPSTREAM_NONE;
}
