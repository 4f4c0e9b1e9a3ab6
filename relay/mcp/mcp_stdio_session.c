/*
 * mcp_stdio_session.c — `outbox-relay mcp --stdio`, the session: one client,
 * its lines handed to the JSON-RPC dispatch the HTTP transport uses too.
 *
 * DESIGN
 * `outbox-relay mcp --stdio`: a host starts the front door as its child
 * and speaks newline-delimited JSON-RPC on its stdin and stdout
 * (mcp_stdio.c moves the bytes). One client per process: OUTBOX_MCP_TOKEN
 * names it, checked as a bearer token is (mcp_admission.c's verdict)
 * before the first line is read; an unknown token ends the process with a
 * log line on stderr and nothing on stdout. Each line is then what a POST
 * body is on HTTP: admitted against the client's budgets, parsed, and
 * handed to mcp_dispatch(). What differs:
 * - no headers: a modern request is judged by its _meta alone, a legacy one
 *   speaks the version its session's initialize negotiated;
 * - requests in flight past --mcp-client-calls hold the input (the host's
 *   writes wait in the pipe) instead of a 429; a line the memory budget
 *   refuses is answered with the same error as HTTP's (id null);
 * - many calls wait at once on one stream: one timer (wait_timer) ends the
 *   earliest wait, and a tasks/result (2025-11-25) simply waits for its
 *   task, with no keep-alive;
 * - a legacy task made on this session is watched: when it is terminal,
 *   notifications/tasks/status goes out as a line (optional in the spec;
 *   tasks/get still answers);
 * - notifications/cancelled drops the answer of a waiting call of that id
 *   (its intent goes on; the same key finds it);
 * - end of input is the host's goodbye: no new line is read, waiting calls
 *   are answered with what is known now (as on SIGTERM: a pending or
 *   reconciling status, never failed; the intents go on, and the same key
 *   finds them), queries on the wire finish, the answers are written, then
 *   the process exits 0.
 * The bytes (pipes, terminals, files; backpressure) are mcp_stdio.c's; the
 * calls, the dispatch, the waits and the database are mcp_server.c's, shared
 * through mcp_server_internal.h. Nothing here knows HTTP.
 */
#include "mcp/mcp_server_internal.h"

#include "lib/dlist.h"
#include "lib/log.h"
#include "lib/xalloc.h"
#include "version.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* The watch of a legacy task made on this session: a call with no answer
 * to give, waiting for its intent's NOTIFY (or the recheck) like any
 * other, that writes notifications/tasks/status once the task is terminal. */
void stdio_session_watch_task(struct mcp_call *call, const struct mcp_answer *a)
{
    struct mcp_server *s = call->s;
    if (s->stopping || a->final || a->task_id == NULL || call->intent_key == NULL)
        return;
    struct mcp_call *w = xcalloc(1, sizeof(*w));
    w->s = s;
    w->task_ttl_ms = -1;
    w->watch = true;
    w->step = STEP_LOOKUP;
    w->req.era = MCP_LEGACY;
    w->req.method = "notifications/tasks/status";
    memcpy(w->token_hash, call->token_hash, sizeof(w->token_hash));
    w->key = xstrdup(call->key ? call->key : "");
    w->intent_key = xstrdup(call->intent_key);
    w->task_id = xstrdup(a->task_id);
    w->adm = call->adm; /* its statements wait in the client's line; nothing charged */
    w->started_ns = uv_hrtime();
    s->calls++;
    DLIST_PUSH_FRONT(s->waiting, w);
    w->waiting = true;
}

/* A watch heard its intent's outcome: once it is terminal, the task's row
 * (outbox.mcp_task: the batched look-up has the intent, not its task), and
 * from that row a line. */
void stdio_session_watch_answer(struct mcp_call *w, const struct mcp_answer *a)
{
    struct mcp_server *s = w->s;
    if (!w->settled && !s->stopping && strcmp(a->status, "not_found") != 0) {
        if (!a->final)
            return; /* still waiting (it stays in s->waiting) */
        w->settled = true;
        if (w->waiting) {
            DLIST_REMOVE(s->waiting, w);
            w->waiting = false;
        }
        const char *params[2] = {w->token_hash, w->task_id};
        w->step = STEP_TASK;
        mcp_call_query(w, "mcp_task", 2, params);
        return;
    }
    if (w->settled && a->final && s->stdio && !s->stopping) {
        json_t *note =
            json_pack("{s:s,s:s,s:o}", "jsonrpc", "2.0", "method", "notifications/tasks/status",
                      "params", mcp_task_json(a, MCP_LEGACY));
        char *text = json_dumps(note, JSON_COMPACT);
        json_decref(note);
        if (text)
            mcp_stdio_write_line(s->stdio, text, strlen(text));
        free(text);
    }
    if (w->waiting) {
        DLIST_REMOVE(s->waiting, w);
        w->waiting = false;
    }
    if (!w->querying)
        mcp_call_free(w);
}

static void on_stdio_wait_timer(uv_timer_t *timer)
{
    struct mcp_server *s = timer->data;
    uint64_t now = uv_now(&s->loop);
    for (struct mcp_call *c = s->waiting, *next; c; c = next) {
        next = c->next;
        if (c->on_stdio && !c->blocking && c->deadline_ms != 0 && c->deadline_ms <= now)
            mcp_call_final_lookup(c); /* takes c out of s->waiting */
    }
    stdio_session_wait_rearm(s);
}

/* The timer to the earliest end of a stdio call's wait. */
void stdio_session_wait_rearm(struct mcp_server *s)
{
    if (s->closing)
        return;
    uint64_t now = uv_now(&s->loop), first = 0;
    for (struct mcp_call *c = s->waiting; c; c = c->next)
        if (c->on_stdio && !c->blocking && c->deadline_ms != 0 &&
            (first == 0 || c->deadline_ms < first))
            first = c->deadline_ms;
    if (first == 0)
        uv_timer_stop(&s->wait_timer);
    else
        uv_timer_start(&s->wait_timer, on_stdio_wait_timer, first > now ? first - now : 0, 0);
}

/* Lines are held while the client's requests in flight are at the limit. */
void stdio_session_hold_update(struct mcp_server *s)
{
    if (s->stdio && s->stdio_client && !s->stopping) /* stopping: held for good */
        mcp_stdio_hold(s->stdio, adm_client_calls(s->stdio_client) >= s->cfg->mcp_client_calls);
}

/* A refusal before a request is parsed (its id unknown: null). */
static void stdio_refuse(struct mcp_server *s, int code, const char *message)
{
    struct mcp_error err = {0};
    mcp_error_set(&err, code, 200, "%s", message);
    char *json = mcp_error_json(NULL, &err);
    mcp_error_clear(&err);
    if (json && s->stdio)
        mcp_stdio_write_line(s->stdio, json, strlen(json));
    free(json);
}

/* notifications/cancelled: a waiting call of that id is not answered (the
 * spec: no further message for it). Its intent is committed and goes on;
 * the same key finds it. A call whose statement is on the wire then is
 * answered. */
static void stdio_cancel(struct mcp_server *s, const struct mcp_request *req)
{
    json_t *id = json_object_get(req->params, "requestId");
    if (id == NULL)
        return;
    for (struct mcp_call *c = s->waiting, *next; c; c = next) {
        next = c->next;
        if (c->on_stdio && !c->querying && c->req.id && json_equal(c->req.id, id)) {
            mcp_log_call(c, "cancelled_by_client");
            c->answered = true;
            mcp_call_detach(c); /* frees it */
        }
    }
}

static void stdio_on_line(void *data, const char *line, size_t len)
{
    struct mcp_server *s = data;
    if (s->stopping)
        return;
    struct mcp_call *call = xcalloc(1, sizeof(*call));
    call->s = s;
    call->on_stdio = true;
    call->task_ttl_ms = -1;
    s->calls++;
    call->started_ns = uv_hrtime();
    call->deadline_ms = uv_now(&s->loop) + (uint64_t)s->cfg->mcp_wait_ms;
    call->adm = s->stdio_client;
    memcpy(call->token_hash, s->stdio_token_hash, sizeof(call->token_hash));
    enum adm_refusal refusal = adm_call_begin(s->adm, call->adm);
    if (refusal == ADM_OK) {
        call->admitted = true;
        refusal = adm_charge(s->adm, call->adm, adm_parse_estimate(line, len), 0, false);
        if (refusal == ADM_OK)
            call->charged = adm_parse_estimate(line, len);
    }
    if (refusal != ADM_OK) {
        int status;
        const char *message = mcp_busy_message(refusal, &status);
        mcp_refuse_count(s, status == 413 ? REFUSED_TOO_LARGE : REFUSED_BUSY, message);
        stdio_refuse(s, status == 413 ? MCP_INVALID_REQUEST : -32000, message);
        mcp_call_detach(call);
        return;
    }
    struct mcp_headers headers = {
        .no_header_layer = true, .protocol_version = s->stdio_version[0] ? s->stdio_version : NULL};
    struct mcp_error err = {0};
    if (!mcp_parse(line, len, &headers, &call->req, &err)) {
        mcp_refuse_count(s, REFUSED_PROTOCOL, err.message);
        mcp_respond_error(call, &err);
        return;
    }
    if (call->req.method && call->req.id == NULL &&
        !strcmp(call->req.method, "notifications/cancelled"))
        stdio_cancel(s, &call->req);
    if (call->req.era == MCP_LEGACY && call->req.method &&
        !strcmp(call->req.method, "initialize")) {
        /* The session's version from now on: the lines after it (sent
         * before its answer came back, as hosts do) speak it already. */
        json_t *result = mcp_initialize_result(&call->req, OUTBOX_RELAY_VERSION);
        snprintf(s->stdio_version, sizeof(s->stdio_version), "%s",
                 json_string_value(json_object_get(result, "protocolVersion")));
        json_decref(result);
    }
    mcp_dispatch(call, NULL);
    stdio_session_hold_update(s);
}

static void stdio_on_too_long(void *data)
{
    struct mcp_server *s = data;
    mcp_refuse_count(s, REFUSED_TOO_LARGE, "a line past the limit");
    stdio_refuse(s, MCP_INVALID_REQUEST,
                 "Request too large: a message is one line of at most 1 MiB; this line was "
                 "dropped");
}

static void stdio_on_eof(void *data, int error)
{
    struct mcp_server *s = data;
    if (error)
        log_event(LOG_WARN, "mcp_stdio_read_failed", "error", json_string(uv_strerror(error)),
                  LOG_END);
    mcp_server_stop(s, "end of input");
}

static void stdio_on_write_error(void *data, int error)
{
    struct mcp_server *s = data;
    s->stdio_out_failed = true;
    log_event(LOG_WARN, "mcp_stdio_write_failed", "error", json_string(uv_strerror(error)),
              LOG_END);
    mcp_server_stop(s, "output closed");
}

static void stdio_on_drained(void *data)
{
    mcp_server_maybe_close(data);
}

/* The verdict on OUTBOX_MCP_TOKEN: a client's, and lines are read; no
 * client's, and the process ends (1) without a byte on stdout. */
static void stdio_verdict(struct mcp_server *s, enum adm_verdict verdict, struct adm_client *client)
{
    s->stdio_asked = false;
    if (verdict == ADM_UNKNOWN)
        return; /* the database could not say: asked again when a connection is ready */
    if (verdict == ADM_BAD) {
        log_event(LOG_ERROR, "mcp_stdio_refused", "reason",
                  json_string("OUTBOX_MCP_TOKEN is not the token of any client in "
                              "outbox.mcp_clients (outbox.mcp_client registers one)"),
                  LOG_END);
        s->exit_code = 1;
        mcp_server_stop(s, "unknown token");
        return;
    }
    s->stdio_verified = true;
    s->stdio_client = client;
    log_event(LOG_INFO, "mcp_stdio_ready", "client", json_string(adm_client_name(client)),
              "wait_ms", json_integer(s->cfg->mcp_wait_ms), "client_calls",
              json_integer(s->cfg->mcp_client_calls), "client_memory_bytes",
              json_integer(s->cfg->mcp_client_memory_bytes), LOG_END);
    mcp_stdio_start(s->stdio);
}

static void on_stdio_verdict(struct adm_waiter *w, enum adm_verdict verdict,
                             struct adm_client *client)
{
    struct mcp_server *s =
        (struct mcp_server *)(void *)((char *)w - offsetof(struct mcp_server, stdio_waiter));
    stdio_verdict(s, verdict, client);
}

/* Asks about the token once a connection is ready (on_pg_ready, the recheck). */
void stdio_session_verify(struct mcp_server *s)
{
    if (!s->stdio_mode || s->stdio_verified || s->stdio_asked || s->stopping)
        return;
    struct adm_client *client = NULL;
    enum adm_verdict verdict = adm_verdict(s->adm, s->stdio_token_hash, &client, NULL);
    if (verdict != ADM_UNKNOWN) {
        stdio_verdict(s, verdict, client);
        return;
    }
    s->stdio_waiter.on_verdict = on_stdio_verdict;
    s->stdio_asked = true; /* before adm_ask: it may answer at once */
    if (!adm_ask(s->adm, s->stdio_token_hash, &s->stdio_waiter))
        s->stdio_asked = false; /* no connection ready yet */
}

mcp_stdio_t *stdio_session_open(struct mcp_server *s, int *uv_error)
{
    struct mcp_stdio_hooks hooks = {.data = s,
                                    .on_line = stdio_on_line,
                                    .on_too_long = stdio_on_too_long,
                                    .on_eof = stdio_on_eof,
                                    .on_write_error = stdio_on_write_error,
                                    .on_drained = stdio_on_drained};
    return mcp_stdio_open(&s->loop, 0, 1, MCP_MAX_BODY_BYTES, 4 * MCP_MAX_BODY_BYTES, &hooks,
                          uv_error);
}
