/*
 * mcp_server.c — the MCP front door on one libuv loop: the HTTP server of
 * relay/lib/http_server.c, a few async libpq connections (relay/lib/pg.c),
 * and the calls waiting for their outcomes.
 *
 * DESIGN
 * One request, one short database transaction: a tools/call is
 * outbox.mcp_tool (authenticate the token's hash, fetch the tool's schema),
 * the arguments checked here against that schema (json_schema.c; nothing is
 * enqueued when they fail), then outbox.mcp_call (enqueue the client's key,
 * namespaced, in a transaction of its own; calls that arrive in one turn of
 * the loop, or wait for a connection, together go as one outbox.mcp_calls,
 * mcp_admission.c). What the call answers at once
 * may already be final (the same key called again: the saved outcome).
 * Otherwise the call waits, bounded by --mcp-wait-ms.
 *
 * The wait is woken by the outcome's commit, not by a poll: the intents of
 * MCP calls NOTIFY outbox_mcp with their key when they settle (trigger
 * intents_mcp_settled), the first database connection LISTENs, and every
 * call waiting for that key looks its outcome up once more. NOTIFY is a hint (lost while a
 * connection is down): once a second every waiting call looks up anyway.
 * When the wait ends, one last lookup decides the answer, so it is never
 * older than the deadline; a call that is not final then is answered with
 * its status and what it means, never as failed (what may have executed is
 * not a failure), or, in 2026-07-28 with the tasks extension declared, as a
 * task the host can poll. tasks/result (2025-11-25) is the exception: it
 * blocks until the task is terminal, as the specification says; past
 * --mcp-wait-ms its answer becomes a stream kept alive (call_keep_alive),
 * and SIGTERM answers it with an error that says to ask again.
 *
 * Calls outlive connections: a query's callback holds the call, not the
 * connection. The connection's on_close clears call->conn, and the callback
 * then only frees the call. Nothing is lost when the client goes away: the
 * intent is committed, and the same key called again finds it.
 *
 * Headers that decide who calls and what (Authorization, Idempotency-Key,
 * Origin, the MCP ones) must come once: the HTTP server refuses a second
 * one with 400 (httpd_config.single_headers), rather than the first winning
 * here while a proxy in front read the last.
 *
 * DNS REBINDING
 * A browser page can reach a server on 127.0.0.1 through a name it
 * controls. Every request is answered only when its Host is the listen
 * address, a loopback name or one of --mcp-hosts, and when an Origin it
 * carries is a loopback one or one of --mcp-origins; else 403.
 *
 * ADMISSION
 * Who may use the memory, the connections and the database is decided in
 * mcp_admission.c: the head of each request is judged (on_head) before its
 * body is read, every statement waits its turn in its client's queue
 * (mcp_call_query), and what a request holds is charged to its client.
 *
 * TRANSPORTS
 * HTTP is here (on_head, handle_mcp); stdio (`mcp --stdio`) is
 * mcp_stdio_session.c over mcp_stdio.c. Both hand a parsed request of an
 * admitted client to mcp_dispatch(), and a call's answer goes back the way
 * it came (respond_text: its connection, or a line on stdout); what they
 * share is declared in mcp_server_internal.h.
 *
 * What is logged: one line per call (mcp_call: client, tool, key, status,
 * milliseconds) and per refusal (mcp_refused: the reason; at most one a
 * second per reason, the rest counted by mcp_refusals_suppressed); never
 * the arguments, never the token.
 */
#include "mcp/mcp_server.h"

#include "mcp/mcp_server_internal.h"

#include "lib/dlist.h"
#include "lib/http_server.h"
#include "lib/log.h"
#include "lib/metrics.h"
#include "lib/pg.h"
#include "lib/strbuf.h"
#include "lib/xalloc.h"
#include "mcp/json_schema.h"
#include "mcp/mcp_admission.h"
#include "mcp/mcp_protocol.h"
#include "mcp/mcp_stdio.h"
#include "mcp/oauth.h"
#include "version.h"

#include <arpa/inet.h>
#include <http_parser.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define MCP_RECHECK_MS 1000 /* the fallback look-up of every waiting call */
#define MCP_LOOKUP_TIMEOUT_MS 10000
#define MCP_STOP_GRACE_MS 5000 /* SIGTERM: waiting calls are answered, then we go */
/* A tasks/result that blocks past --mcp-wait-ms writes a keep-alive this
 * often (--mcp-wait-ms, within these bounds). */
#define MCP_KEEPALIVE_MIN_MS 1000
#define MCP_KEEPALIVE_MAX_MS 15000
#define MCP_LISTEN_CHANNEL "outbox_mcp"

/* The statements of the front door (every one an outbox.mcp_* function). */
#define ANSWER_COLUMNS                                                                             \
    "client, key, intent_key, tool, target, status, state::text, final, inserted, "                \
    "response_status, response_body, attempts, message, conflict_fields::text, task_id, "          \
    "to_char(task_created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), "           \
    "task_ttl_ms, to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
static const struct pg_statement statements[] = {
    /* The token alone, before a body is read (mcp_admission.c): a row
     * names the client, none is a stranger. */
    {"mcp_auth", "SELECT client FROM outbox.mcp_tool_keyed($1::bytea, '')"},
    /* a JWT's client (oauth.c checked the token): its name, and the hash its statements use */
    {"mcp_oauth_client", "SELECT client, token_hash FROM outbox.mcp_oauth_client($1)"},
    /* passthrough (0045): the tool is a read called straight through */
    {"mcp_list_tools",
     "SELECT l.client, l.tool, l.title, l.description, l.input_schema::text, l.destructive, "
     "l.key_source, l.argument_window_s, p.tool IS NOT NULL "
     "FROM outbox.mcp_list_tools_keyed($1::bytea) l "
     "LEFT JOIN LATERAL outbox.mcp_passthrough($1::bytea, l.tool) p ON true "
     "ORDER BY l.tool COLLATE \"C\""},
    /* columns 6-16: a passthrough tool's target (outbox.mcp_passthrough), NULL for the others */
    {"mcp_tool", "SELECT k.client, k.tool, k.target, k.input_schema::text, k.key_source, "
                 "k.argument_window_s, p.target, p.upstream_tool, p.url, p.mcp_version, "
                 "p.auth_secret, p.timeout_ms, p.headers::text, p.http_version, p.ca_file, "
                 "p.client_cert_file, p.client_key_file "
                 "FROM outbox.mcp_tool_keyed($1::bytea, $2) k "
                 "LEFT JOIN outbox.mcp_passthrough($1::bytea, $2) p ON true"},
    /* $10: the SHA-256 of the canonical arguments, for a key from them (0040) */
    {"mcp_call", "SELECT " ANSWER_COLUMNS " FROM outbox.mcp_call($1::bytea, $2, $3, $4::jsonb, $5, "
                 "$6, $7, $8::boolean, $9::bigint, $10::bytea)"},
    {"mcp_outcome", "SELECT " ANSWER_COLUMNS " FROM outbox.mcp_outcome($1::bytea, $2)"},
    {"mcp_task", "SELECT " ANSWER_COLUMNS " FROM outbox.mcp_task($1::bytea, $2)"},
    {"mcp_tasks_list", "SELECT " ANSWER_COLUMNS ", task_created_at::text "
                       "FROM outbox.mcp_tasks_list($1::bytea, $2::timestamptz, $3, $4::integer)"},
    {"mcp_task_cancel", "SELECT " ANSWER_COLUMNS " FROM outbox.mcp_task_cancel($1::bytea, $2)"},
    {"mcp_outcomes", "SELECT " ANSWER_COLUMNS " FROM outbox.mcp_outcomes($1::bytea[], $2::text[])"},
    /* mcp_call of the calls that came together, in one transaction (0046,
     * mcp_admission.c): each answer's row, its place in the batch last */
    {"mcp_calls",
     "SELECT " ANSWER_COLUMNS ", ord FROM (SELECT b.ord, (b.answer).* FROM outbox.mcp_calls("
     "$1::bytea[], $2::text[], $3::text[], $4::jsonb[], $5::text[], $6::text[], $7::text[], "
     "$8::boolean[], $9::bigint[], $10::bytea[]) b) x"},
};

/* What the server keeps per connection (httpd_conn_data): the call being
 * answered first (handle_mcp reads it as a struct mcp_call *), then the
 * admission of the request being read. */
struct mcp_slot {
    struct mcp_call *call;
    struct mcp_server *s;
    httpd_conn_t *conn;
    struct adm_waiter waiter;  /* asking the database about the token */
    struct adm_client *client; /* the token's client, once known */
    size_t charged;            /* the body being read, charged to client */
    size_t body_len;           /* its Content-Length, while the verdict is awaited */
    char token_hash[68];
    char as_hash[68];                 /* what statements authenticate with (a JWT: its client's) */
    struct oauth_waiter oauth_waiter; /* a JWT with an unknown kid waits for the JWKS */
    char *jwt;                        /* that JWT's copy, while it waits */
    size_t jwt_len;
    bool is_jwt;
};

static const char *const refusal_names[REFUSAL_COUNT] = {
    "auth", "host", "origin",    "protocol", "headers",
    "tool", "key",  "arguments", "busy",     "too_large"};

/* ---------------------------------------------------------------- counters */

static void count_call(struct mcp_server *s, const char *tool, const char *status)
{
    tool = tool ? tool : "";
    for (size_t i = 0; i < s->count_len; i++)
        if (!strcmp(s->counts[i].tool, tool) && !strcmp(s->counts[i].status, status)) {
            s->counts[i].n++;
            return;
        }
    if (s->count_len == s->count_cap) {
        s->count_cap = s->count_cap ? s->count_cap * 2 : 16;
        s->counts = xrealloc(s->counts, s->count_cap * sizeof(*s->counts));
    }
    struct tool_count *c = &s->counts[s->count_len++];
    snprintf(c->tool, sizeof(c->tool), "%s", tool);
    snprintf(c->status, sizeof(c->status), "%s", status);
    c->n = 1;
}

/* Counted always; logged at most once a second per reason (a stranger's
 * requests must not write a line each): the ones not logged are reported
 * by mcp_refusals_suppressed lines (count), so that the log still adds up
 * to outbox_mcp_refusals_total. */
void mcp_refuse_count(struct mcp_server *s, enum refusal reason, const char *detail)
{
    s->refusals[reason]++;
    uint64_t suppressed = 0;
    if (!adm_rate_allow(s->adm, &s->refusal_log[reason], &suppressed))
        return;
    if (suppressed)
        log_event(LOG_INFO, "mcp_refusals_suppressed", "reason", json_string(refusal_names[reason]),
                  "count", json_integer((json_int_t)suppressed), LOG_END);
    log_event(LOG_INFO, "mcp_refused", "reason", json_string(refusal_names[reason]), "detail",
              json_string(detail ? detail : ""), LOG_END);
}

static void refusals_flush(struct mcp_server *s)
{
    for (int i = 0; i < REFUSAL_COUNT; i++) {
        uint64_t n = 0;
        if (adm_rate_flush(s->adm, &s->refusal_log[i], &n))
            log_event(LOG_INFO, "mcp_refusals_suppressed", "reason", json_string(refusal_names[i]),
                      "count", json_integer((json_int_t)n), LOG_END);
    }
}

/* ---------------------------------------------------------------- calls */

static struct mcp_call *call_new(struct mcp_server *s, httpd_conn_t *conn)
{
    struct mcp_call *call = xcalloc(1, sizeof(*call));
    call->s = s;
    call->conn = conn;
    call->task_ttl_ms = -1;
    s->calls++;
    *(struct mcp_call **)httpd_conn_data(conn) = call;
    return call;
}

void mcp_call_free(struct mcp_call *call)
{
    struct mcp_server *s = call->s;
    if (call->waiting)
        DLIST_REMOVE(s->waiting, call);
    if (call->adm) {
        adm_uncharge(s->adm, call->adm, call->charged);
        if (call->admitted) {
            adm_call_end(s->adm, call->adm);
            stdio_session_hold_update(s); /* a stdio call's end may let lines in again */
        }
    }
    mcp_request_free(&call->req);
    free(call->client);
    free(call->tool);
    free(call->key);
    free(call->intent_key);
    free(call->arguments_json);
    free(call->traceparent);
    free(call->run_id);
    free(call->ordering_key);
    free(call->task_id);
    free(call->argument_hash);
    free(call);
    s->calls--;
    mcp_server_maybe_close(s);
}

/* The call is done with its connection: answered, or the connection went. */
void mcp_call_detach(struct mcp_call *call)
{
    /* The slot may already hold the connection's next (pipelined) call. */
    if (call->conn && *(struct mcp_call **)httpd_conn_data(call->conn) == call)
        *(struct mcp_call **)httpd_conn_data(call->conn) = NULL;
    call->conn = NULL;
    call->on_stdio = false;
    if (call->waiting) {
        DLIST_REMOVE(call->s->waiting, call);
        call->waiting = false;
    }
    if (!call->querying && !call->passing)
        mcp_call_free(call);
}

/* Detaches the call first, then answers: an answer written at once lets the
 * server hand the connection's next pipelined request to handle_mcp (a new
 * call in the connection's slot), or closes the connection (on_close): the
 * call must not be the connection's by then. */
static void respond_text(struct mcp_call *call, int status, const char *headers, char *json)
{
    httpd_conn_t *conn = call->conn;
    bool sse = call->sse, on_stdio = call->on_stdio;
    struct mcp_server *s = call->s;
    call->answered = true;
    s->answering++;        /* stopping, the last call's free must not close the server */
    mcp_call_detach(call); /* may free call */
    if (on_stdio) {
        /* one line; the HTTP status has no place here (a notification's
         * 202 is no line at all) */
        if (json && s->stdio)
            mcp_stdio_write_line(s->stdio, json, strlen(json));
    } else if (conn && httpd_conn_streaming(conn)) {
        /* A long tasks/result: its status and headers went out with the
         * stream; the message is its last part (compact JSON has no
         * newline, so one data line is the whole event). */
        struct strbuf out = {0};
        if (sse)
            strbuf_printf(&out, "event: message\ndata: %s\n\n", json ? json : "");
        else
            strbuf_append_str(&out, json ? json : "");
        httpd_stream_end(conn, out.data ? out.data : "", out.len);
        strbuf_free(&out);
    } else if (conn) {
        if (json)
            httpd_respond_json(conn, status, headers, json);
        else
            httpd_respond(conn, &(struct httpd_response){.status = status, .body = ""});
    }
    free(json);
    s->answering--;
    mcp_server_maybe_close(s); /* before this answer was written, it was too early */
}

static void respond_result(struct mcp_call *call, json_t *result)
{
    respond_text(call, 200, NULL, mcp_result_json(&call->req, result));
}

/* A result that shows numbers of these documents (a tool's schema, a
 * target's response) as they were written (mcp_result_json_docs). */
static void respond_result_docs(struct mcp_call *call, json_t *result,
                                const struct json_text *const *docs, size_t ndocs)
{
    respond_text(call, 200, NULL, mcp_result_json_docs(&call->req, result, docs, ndocs));
}

/* A JSON-RPC error; err is cleared. */
void mcp_respond_error(struct mcp_call *call, struct mcp_error *err)
{
    int status = err->http_status ? err->http_status : 200;
    /* 2026: an unknown method is 404 (the spec); legacy keeps 200. */
    if (err->code == MCP_METHOD_NOT_FOUND && call->req.era == MCP_MODERN)
        status = 404;
    respond_text(call, status, NULL, mcp_error_json(call->req.id, err));
    mcp_error_clear(err);
}

static void respond_error_code(struct mcp_call *call, int code, int http_status, const char *msg)
{
    struct mcp_error err = {0};
    mcp_error_set(&err, code, http_status, "%s", msg);
    mcp_respond_error(call, &err);
}

/* The WWW-Authenticate line of a 401 (or, error "insufficient_scope", a
 * 403): with OAuth on, where its metadata is (oauth.c); without, the realm. */
static const char *challenge(const struct mcp_server *s, const char *error, char *buf, size_t len)
{
    if (s->oauth)
        return oauth_challenge(s->oauth, error, buf, len);
    return "WWW-Authenticate: Bearer realm=\"outbox-relay-mcp\", error=\"invalid_token\"\r\n";
}

static void respond_unauthorized(struct mcp_call *call, const char *why)
{
    mcp_refuse_count(call->s, REFUSED_AUTH, why);
    struct mcp_error err = {0};
    mcp_error_set(&err, MCP_INVALID_REQUEST, 401, "Unauthorized: %s", why);
    int status = 401;
    char *json = mcp_error_json(call->req.id, &err);
    mcp_error_clear(&err);
    char header[1024];
    respond_text(call, status, challenge(call->s, NULL, header, sizeof(header)), json);
}

void mcp_log_call(struct mcp_call *call, const char *status)
{
    double seconds = (double)(uv_hrtime() - call->started_ns) / 1e9;
    metrics_histogram_observe(&call->s->call_seconds, seconds);
    count_call(call->s, call->tool, status);
    log_event(LOG_INFO, "mcp_call", "client", json_string(call->client ? call->client : ""), "tool",
              json_string(call->tool ? call->tool : ""), "key",
              json_string(call->key ? call->key : ""), "status", json_string(status), "ms",
              json_real(seconds * 1000.0), LOG_END);
}

/* ---------------------------------------------------------------- database */

/* For the batched look-up (one on the wire at a time, outside the fair
 * queue): the ready connection with the least queued. */
static pg_conn_t *next_connection(struct mcp_server *s)
{
    return adm_least_busy(s->adm);
}

static const char *value_or_null(PGresult *res, int row, int col)
{
    return PQgetisnull(res, row, col) ? NULL : PQgetvalue(res, row, col);
}

/* An answer from a row of ANSWER_COLUMNS (strings borrowed from res). */
static void answer_from_row(PGresult *res, int row, struct mcp_answer *a)
{
    memset(a, 0, sizeof(*a));
    a->key = value_or_null(res, row, 1);
    a->intent_key = value_or_null(res, row, 2);
    a->tool = value_or_null(res, row, 3);
    a->target = value_or_null(res, row, 4);
    a->status = value_or_null(res, row, 5) ? PQgetvalue(res, row, 5) : "not_found";
    a->state = value_or_null(res, row, 6);
    a->final = !strcmp(PQgetvalue(res, row, 7), "t");
    a->inserted = !strcmp(PQgetvalue(res, row, 8), "t");
    a->response_status =
        PQgetisnull(res, row, 9) ? 0 : (int)strtol(PQgetvalue(res, row, 9), NULL, 10);
    a->response_body = value_or_null(res, row, 10);
    a->attempts = PQgetisnull(res, row, 11) ? -1 : (int)strtol(PQgetvalue(res, row, 11), NULL, 10);
    a->message = value_or_null(res, row, 12);
    a->conflict_fields = value_or_null(res, row, 13);
    a->task_id = value_or_null(res, row, 14);
    a->task_created_at = value_or_null(res, row, 15);
    a->task_ttl_ms = PQgetisnull(res, row, 16) ? -1 : strtoll(PQgetvalue(res, row, 16), NULL, 10);
    a->task_updated_at = value_or_null(res, row, 17);
}

static void sha256_hex_bytea(const char *token, size_t n, char out[68])
{
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_Digest(token, n, digest, &len, EVP_sha256(), NULL) != 1 || len != 32)
        abort();
    out[0] = '\\';
    out[1] = 'x';
    for (unsigned int i = 0; i < 32; i++)
        snprintf(out + 2 + 2 * i, 3, "%02x", digest[i]);
}

/* ---------------------------------------------------------------- tools/call */

/* The wait of a call that is not final yet. A blocking one (tasks/result)
 * has no end but the task's: its deadline_ms is the next keep-alive. */
static void call_wait(struct mcp_call *call)
{
    struct mcp_server *s = call->s;
    uint64_t now = uv_now(&s->loop);
    if (s->stopping || (!call->blocking && now >= call->deadline_ms)) {
        mcp_call_final_lookup(call);
        return;
    }
    if (!call->waiting) {
        DLIST_PUSH_FRONT(s->waiting, call);
        call->waiting = true;
    }
    if (call->on_stdio)
        stdio_session_wait_rearm(s); /* a blocking one waits for its task only */
    else
        httpd_conn_wait(call->conn, call->deadline_ms > now ? call->deadline_ms - now : 1);
}

/*
 * A tasks/result still blocking at the end of --mcp-wait-ms: the answer
 * becomes a stream, and a keep-alive goes every --mcp-wait-ms (1 to 15 s)
 * until the task is terminal. A client that accepts text/event-stream (the
 * Streamable HTTP transport requires every client to) gets Server-Sent
 * Events: comment lines, then the response as one "message" event, as the
 * SDKs read a POST's SSE answer; any other client gets application/json
 * with blank lines before the JSON (whitespace JSON allows). Either way a
 * proxy or a client library that drops a silent connection (undici's and
 * httpx's read timeouts, 300 s) sees bytes, and a client that went away is
 * noticed: the write fails, the connection closes, the call is freed
 * (on_close). Nothing is lost: the task and its intent stay, and tasks/result
 * again finds them. The server's own timeouts do not apply while a request
 * is handled (HTTPD_HANDLING has only the deadline set here).
 */
static void call_keep_alive(struct mcp_call *call)
{
    struct mcp_server *s = call->s;
    uint64_t every = (uint64_t)s->cfg->mcp_wait_ms;
    every = every < MCP_KEEPALIVE_MIN_MS
                ? MCP_KEEPALIVE_MIN_MS
                : (every > MCP_KEEPALIVE_MAX_MS ? MCP_KEEPALIVE_MAX_MS : every);
    call->deadline_ms = uv_now(&s->loop) + every;
    if (!httpd_conn_streaming(call->conn))
        httpd_stream_begin(call->conn, 200, call->sse ? "text/event-stream" : NULL, NULL);
    static const char comment[] = ": the task is not terminal yet; waiting\n\n";
    if (call->sse)
        httpd_stream_write(call->conn, comment, sizeof(comment) - 1);
    else
        httpd_stream_write(call->conn, "\n", 1);
    httpd_conn_wait(call->conn, every);
}

/* SIGTERM while a tasks/result blocks: not the task's result (it has none
 * yet, and a non-final CallToolResult would read as the result), but an
 * error that says the task goes on and to ask again. */
static void respond_task_unfinished(struct mcp_call *call, const struct mcp_answer *a)
{
    struct mcp_error err = {0};
    mcp_error_set(&err, MCP_INTERNAL_ERROR, 200,
                  "Internal error: the server is shutting down before task %s is terminal (it is "
                  "%s: the action may still happen, and nothing is lost). Call tasks/result again "
                  "(or tasks/get) for its result",
                  call->task_id ? call->task_id : "", mcp_task_status(a, MCP_LEGACY));
    err.data = json_pack("{s:s,s:s,s:b}", "taskId", call->task_id ? call->task_id : "", "status",
                         mcp_task_status(a, MCP_LEGACY), "retry", 1);
    mcp_log_call(call, "shutting_down");
    mcp_respond_error(call, &err);
}

static void lookup(struct mcp_call *call)
{
    const char *params[2] = {call->token_hash, call->key};
    call->step = STEP_LOOKUP;
    mcp_call_query(call, "mcp_outcome", 2, params);
}

/* The wait is over (deadline, or stopping): one last look, and that answers. */
void mcp_call_final_lookup(struct mcp_call *call)
{
    if (call->passing) /* a passthrough call has no outcome: its upstream's answer ends it */
        return;
    if (call->waiting) {
        DLIST_REMOVE(call->s->waiting, call);
        call->waiting = false;
    }
    call->deadline_ms = 0;
    if (!call->querying)
        lookup(call);
}

/* The answer of a tools/call (or a task's result) from an answer row. */
static void answer_call(struct mcp_call *call, const struct mcp_answer *a)
{
    struct json_text *response;
    json_t *result = mcp_call_result(a, &response);
    if (call->task_id && strcmp(call->req.method, "tasks/result") == 0)
        json_object_set_new(json_object_get(result, "_meta"), MCP_META_RELATED_TASK,
                            json_pack("{s:s}", "taskId", call->task_id));
    mcp_log_call(call, a->status);
    respond_result_docs(call, result, (const struct json_text *const *)&response, 1);
    json_text_decref(response);
}

/* 2026 with the tasks extension, a wait that ended without an outcome:
 * make the task of this key (mcp_call again: the same key and arguments
 * are the same intent), then answer with it. */
static void make_task_now(struct mcp_call *call)
{
    const char *params[10] = {call->token_hash,     call->tool,   call->key,
                              call->arguments_json, call->run_id, call->ordering_key,
                              call->traceparent,    "true",       NULL,
                              call->argument_hash};
    call->step = STEP_TASK_NOW;
    mcp_call_query(call, "mcp_call", 10, params);
}

static void on_answer(struct mcp_call *call, const struct mcp_answer *answer);

static void on_answer_row(struct mcp_call *call, PGresult *res)
{
    struct mcp_answer a;
    answer_from_row(res, 0, &a);
    on_answer(call, &a);
}

static void on_answer(struct mcp_call *call, const struct mcp_answer *answer)
{
    if (call->watch) {
        stdio_session_watch_answer(call, answer);
        return;
    }
    struct mcp_answer a = *answer;
    const char *method = call->req.method;
    bool not_found = !strcmp(a.status, "not_found");
    switch (call->step) {
    case STEP_CANCEL: /* legacy: the task, now cancelled; modern: an empty ack */
        respond_result(call,
                       call->req.era == MCP_MODERN ? json_object() : mcp_task_json(&a, MCP_LEGACY));
        return;
    case STEP_TASK_NOW: { /* modern CreateTaskResult: the task, flat */
        json_t *task = mcp_task_json(&a, MCP_MODERN);
        json_object_set_new(task, "resultType", json_string("task"));
        mcp_log_call(call, a.status);
        respond_result(call, task);
        return;
    }
    case STEP_TASK:
        if (not_found) {
            respond_error_code(call, MCP_INVALID_PARAMS, 200, "Invalid params: no such task");
            return;
        }
        if (!strcmp(method, "tasks/update")) { /* nothing ever asks for input: an ack */
            respond_result(call, json_object());
            return;
        }
        if (!strcmp(method, "tasks/get")) {
            json_t *task = mcp_task_json(&a, call->req.era);
            struct json_text *response = NULL;
            if (call->req.era == MCP_MODERN && a.final && strcmp(a.status, "cancelled") != 0)
                json_object_set_new(task, "result", mcp_call_result(&a, &response));
            respond_result_docs(call, task, (const struct json_text *const *)&response, 1);
            json_text_decref(response);
            return;
        }
        /* tasks/result: wait for the outcome as a call does */
        call->key = xstrdup(a.key ? a.key : "");
        call->tool = xstrdup(a.tool ? a.tool : "");
        call->intent_key = xstrdup(a.intent_key ? a.intent_key : "");
        break;
    case STEP_ENQUEUE:
        call->intent_key = xstrdup(a.intent_key ? a.intent_key : "");
        if (call->key == NULL && a.key) /* derived from the arguments: looked up by it from now */
            call->key = xstrdup(a.key);
        if (call->task && a.task_id) { /* legacy task-augmented call: the task, at once */
            if (call->on_stdio)
                stdio_session_watch_task(call, &a);
            mcp_log_call(call, a.status);
            respond_result(call, json_pack("{s:o}", "task", mcp_task_json(&a, MCP_LEGACY)));
            return;
        }
        break;
    default:
        break;
    }
    /* An unknown that only a person can settle will not change while the
     * call waits: say so now (a plain call; a task stays working). Nor will
     * a call held for approval, or one that no relay is alive to claim
     * (outbox.mcp_message says so): the wait is over at once. */
    bool needs_person = a.state && !strcmp(a.state, "unknown") && a.message &&
                        !strncmp(a.message, "outcome unknown: needs a person", 31);
    bool idle_wait = !strcmp(method, "tools/call") &&
                     (!strcmp(a.status, "awaiting_approval") ||
                      (!strcmp(a.status, "pending") && a.message &&
                       strstr(a.message, "no relay has claimed it yet") != NULL));
    if (a.final || not_found || (needs_person && strcmp(method, "tools/call") == 0)) {
        answer_call(call, &a);
    } else if (call->deadline_ms == 0 && call->blocking) { /* stopping */
        respond_task_unfinished(call, &a);
    } else if (call->deadline_ms == 0 || idle_wait) { /* the last look of a wait */
        if (call->waiting) {                          /* idle_wait: woken by a batch */
            DLIST_REMOVE(call->s->waiting, call);
            call->waiting = false;
        }
        if (call->req.era == MCP_MODERN && call->req.tasks_extension &&
            !strcmp(method, "tools/call") && !call->s->stopping)
            make_task_now(call);
        else
            answer_call(call, &a);
    } else {
        call_wait(call);
    }
}

/* ---------------------------------------------------------------- the tool cache
 *
 * What outbox.mcp_tool answered for (token hash, tool), kept TOOL_CACHE_MS:
 * a burst of calls to one tool reads it once. It can only be stale about the
 * schema, for at most that long: who may call what is checked again by
 * outbox.mcp_call, in the transaction that enqueues, on every call. Unknown
 * tokens and tools are not cached (they are answered from the database).
 */
#define TOOL_CACHE_SIZE 64
#define TOOL_CACHE_MS 1000

/* mcp_tools.key_source (0040): where the key of a call that carries none
 * comes from. */
enum key_source {
    KEY_FROM_META,      /* nowhere: the call is refused */
    KEY_FROM_ARGUMENTS, /* the canonical arguments, within the tool's window */
    KEY_MINTED,         /* a new key per call (no dedupe of the host's retries) */
};

static enum key_source key_source_of(const char *text)
{
    if (!strcmp(text, "arguments"))
        return KEY_FROM_ARGUMENTS;
    return !strcmp(text, "minted") ? KEY_MINTED : KEY_FROM_META;
}

/* A passthrough tool's target, as outbox.mcp_passthrough answered it. */
#define PT_COLUMNS 11
struct pt_row {
    char *v[PT_COLUMNS]; /* target .. client_key_file, in struct pt_target's order */
    long timeout_ms;
};

static char *pt_value(PGresult *res, int row, int col)
{
    return PQgetisnull(res, row, col) ? NULL : xstrdup(PQgetvalue(res, row, col));
}

/* Columns from col on: target, upstream_tool, url, mcp_version,
 * auth_secret, timeout_ms, headers, http_version, ca_file, cert, key. NULL
 * when the tool is not passthrough. */
static struct pt_row *pt_row_read(PGresult *res, int row, int col)
{
    if (PQgetisnull(res, row, col))
        return NULL;
    struct pt_row *pt = xcalloc(1, sizeof(*pt));
    int k = 0;
    for (int c = col; c < col + PT_COLUMNS; c++) {
        if (c == col + 5)
            pt->timeout_ms = strtol(PQgetvalue(res, row, c), NULL, 10);
        else
            pt->v[k++] = pt_value(res, row, c);
    }
    return pt;
}

static void pt_row_free(struct pt_row *pt)
{
    if (pt == NULL)
        return;
    for (int i = 0; i < PT_COLUMNS; i++)
        free(pt->v[i]);
    free(pt);
}

static struct pt_row *pt_row_copy(const struct pt_row *pt)
{
    if (pt == NULL)
        return NULL;
    struct pt_row *c = xcalloc(1, sizeof(*c));
    for (int i = 0; i < PT_COLUMNS; i++)
        c->v[i] = pt->v[i] ? xstrdup(pt->v[i]) : NULL;
    c->timeout_ms = pt->timeout_ms;
    return c;
}

struct tool_cache_entry {
    char token_hash[68];
    char tool[129];
    char *client;
    struct pt_row *pt;        /* a passthrough tool's target; NULL: an intent */
    struct json_text *schema; /* parsed by lib/json_text.h: its numbers exact */
    enum key_source key_source;
    uint64_t expires_ms; /* 0: empty */
};
static struct tool_cache_entry tool_cache[TOOL_CACHE_SIZE];

static struct tool_cache_entry *tool_cache_find(struct mcp_server *s, const char *token_hash,
                                                const char *tool)
{
    uint64_t now = uv_now(&s->loop);
    for (int i = 0; i < TOOL_CACHE_SIZE; i++) {
        struct tool_cache_entry *e = &tool_cache[i];
        if (e->expires_ms > now && !strcmp(e->tool, tool) && !strcmp(e->token_hash, token_hash))
            return e;
    }
    return NULL;
}

static void tool_cache_clear_entry(struct tool_cache_entry *e)
{
    free(e->client);
    pt_row_free(e->pt);
    json_text_decref(e->schema);
    memset(e, 0, sizeof(*e));
}

static void tool_cache_put(struct mcp_server *s, const char *token_hash, const char *tool,
                           const char *client, struct json_text *schema, enum key_source key_source,
                           const struct pt_row *pt)
{
    if (strlen(tool) >= sizeof(tool_cache[0].tool))
        return;
    uint64_t now = uv_now(&s->loop);
    struct tool_cache_entry *slot = &tool_cache[0];
    for (int i = 0; i < TOOL_CACHE_SIZE; i++) /* an empty or expired one, else the oldest */
        if (tool_cache[i].expires_ms <= now || tool_cache[i].expires_ms < slot->expires_ms) {
            slot = &tool_cache[i];
            if (slot->expires_ms <= now)
                break;
        }
    tool_cache_clear_entry(slot);
    snprintf(slot->token_hash, sizeof(slot->token_hash), "%s", token_hash);
    snprintf(slot->tool, sizeof(slot->tool), "%s", tool);
    slot->client = xstrdup(client);
    slot->schema = json_text_incref(schema);
    slot->key_source = key_source;
    slot->pt = pt_row_copy(pt);
    slot->expires_ms = now + TOOL_CACHE_MS;
}

static void tool_cache_free(void)
{
    for (int i = 0; i < TOOL_CACHE_SIZE; i++)
        tool_cache_clear_entry(&tool_cache[i]);
}

static void call_with_tool(struct mcp_call *call, struct json_text *schema,
                           enum key_source key_source, const struct pt_row *pt);

/* A tool's input_schema as PostgreSQL wrote it, read so that its numbers
 * keep their exact text (multipleOf 0.01 is 1/100, not a double); NULL
 * when it cannot be read. */
static struct json_text *schema_parse(const char *text)
{
    return json_text_parse(text, strlen(text), JSON_TEXT_DECODE_ANY, NULL, 0, NULL);
}

static void on_tool_row(struct mcp_call *call, PGresult *res)
{
    if (PQntuples(res) == 0) {
        respond_unauthorized(call, "unknown token");
        return;
    }
    free(call->client);
    call->client = xstrdup(PQgetvalue(res, 0, 0));
    if (PQgetisnull(res, 0, 1)) {
        mcp_refuse_count(call->s, REFUSED_TOOL, call->tool);
        struct mcp_error err = {0};
        mcp_error_set(&err, MCP_INVALID_PARAMS, 200, "Unknown tool: %s", call->tool);
        free(call->tool); /* any name a caller sends must not become a metric label */
        call->tool = xstrdup("(unknown)");
        mcp_log_call(call, "unknown_tool");
        mcp_respond_error(call, &err);
        return;
    }
    enum key_source key_source = key_source_of(PQgetvalue(res, 0, 4));
    struct json_text *schema = schema_parse(PQgetvalue(res, 0, 3));
    struct pt_row *pt = pt_row_read(res, 0, 6);
    if (schema)
        tool_cache_put(call->s, call->token_hash, call->tool, call->client, schema, key_source, pt);
    call_with_tool(call, schema, key_source, pt);
    pt_row_free(pt);
    json_text_decref(schema);
}

/* key_source 'arguments', no key in the call: call->argument_hash, the
 * SHA-256 of the arguments' canonical text without their volatile
 * properties (json_schema_canonical.c), for outbox.mcp_call to look the
 * key of their window up. False when the call was answered (refused). */
static bool argument_hash(struct mcp_call *call, struct json_text *schema, const json_t *arguments)
{
    size_t len = 0;
    char *canonical =
        json_schema_canonical(schema ? schema->root : NULL, schema, arguments, call->req.doc, &len);
    if (canonical == NULL) {
        mcp_refuse_count(call->s, REFUSED_KEY, "arguments");
        respond_error_code(call, MCP_INVALID_PARAMS, 200,
                           "Invalid params: the arguments are nested too deeply or too many "
                           "schemas apply to them to derive a key from them; the host can send "
                           "one in params._meta[\"outbox-relay/idempotency-key\"]");
        return false;
    }
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    if (EVP_Digest(canonical, len, digest, &dlen, EVP_sha256(), NULL) != 1 || dlen != 32)
        abort();
    free(canonical);
    call->argument_hash = xmalloc(68);
    call->argument_hash[0] = '\\';
    call->argument_hash[1] = 'x';
    for (unsigned int i = 0; i < 32; i++)
        snprintf(call->argument_hash + 2 + 2 * i, 3, "%02x", digest[i]);
    return true;
}

static void call_slim(void *data);

/* The answer of a passthrough call is charged to its client as it arrives. */
static bool on_pt_charge(void *data, size_t bytes)
{
    struct mcp_call *call = data;
    if (call->adm == NULL)
        return true;
    if (adm_charge(call->s->adm, call->adm, bytes, call->charged, false) != ADM_OK)
        return false;
    call->charged += bytes;
    return true;
}

/* The upstream's result as the call's: its content, structuredContent and
 * isError, final (nothing of it is waited for). */
static json_t *pt_result(json_t *value, bool is_error)
{
    json_t *content = json_object_get(value, "content");
    json_t *result =
        json_pack("{s:O,s:b,s:{s:b}}", "content", json_is_array(content) ? content : json_array(),
                  "isError", is_error, "_meta", MCP_META_FINAL, 1);
    if (!json_is_array(content))
        json_decref(json_object_get(result, "content")); /* the empty array's own reference */
    json_t *structured = json_object_get(value, "structuredContent");
    if (structured)
        json_object_set(result, "structuredContent", structured);
    return result;
}

static void on_pt_done(void *data, const struct pt_outcome *o)
{
    struct mcp_call *call = data;
    struct mcp_server *s = call->s;
    call->passing = false;
    s->pt_counts[o->result]++;
    char status[40];
    snprintf(status, sizeof(status), "passthrough_%s", pt_result_names[o->result]);
    if (call->conn == NULL && !call->on_stdio) { /* the client went away */
        mcp_log_call(call, status);
        mcp_call_free(call);
        return;
    }
    mcp_log_call(call, status);
    if (o->result == PT_OK || o->result == PT_TOOL_ERROR) {
        respond_result(call, pt_result(o->value, o->result == PT_TOOL_ERROR));
    } else if (o->result == PT_RPC_ERROR) {
        char msg[700];
        snprintf(msg, sizeof(msg), "the upstream MCP server answered: %s",
                 o->message ? o->message : "an error");
        respond_error_code(call, o->code ? (int)o->code : MCP_INTERNAL_ERROR, 200, msg);
    } else {
        char *msg = passthrough_failure_message(o);
        respond_error_code(call, MCP_INTERNAL_ERROR, 200, msg);
        free(msg);
    }
}

/* A passthrough tool (0045): its upstream is called now, within the
 * smaller of the target's timeout_ms and --mcp-wait-ms; the call's
 * admission holds until the upstream answers. */
static void passthrough_start(struct mcp_call *call, const struct pt_row *pt)
{
    struct mcp_server *s = call->s;
    struct pt_target t = {.target = pt->v[0],
                          .upstream_tool = pt->v[1],
                          .url = pt->v[2],
                          .mcp_version = pt->v[3],
                          .auth_secret = pt->v[4],
                          .headers_json = pt->v[5],
                          .http_version = pt->v[6],
                          .ca_file = pt->v[7],
                          .client_cert_file = pt->v[8],
                          .client_key_file = pt->v[9],
                          .timeout_ms = pt->timeout_ms};
    long timeout = pt->timeout_ms < s->cfg->mcp_wait_ms ? pt->timeout_ms : s->cfg->mcp_wait_ms;
    call_slim(call); /* only the arguments' copy is needed now */
    call->passing = true;
    passthrough_call(s->pt, &t, call->arguments_json, timeout, on_pt_charge, on_pt_done, call);
}

/* The tool is known (schema NULL: it could not be read): check the
 * arguments, then enqueue the bytes the client wrote (mcp_arguments_text),
 * never a re-serialisation: jsonb keeps their numbers exactly, and the
 * schema judged them exactly. */
static void call_with_tool(struct mcp_call *call, struct json_text *schema,
                           enum key_source key_source, const struct pt_row *pt)
{
    const char *arguments_text;
    size_t arguments_len;
    struct mcp_error arguments_err = {0};
    if (!mcp_arguments_text(&call->req, &arguments_text, &arguments_len, &arguments_err)) {
        mcp_refuse_count(call->s, REFUSED_ARGUMENTS, call->tool);
        mcp_log_call(call, "invalid_arguments");
        mcp_respond_error(call, &arguments_err);
        return;
    }
    json_t *arguments = json_object_get(call->req.params, "arguments");
    json_t *empty = NULL;
    if (arguments == NULL)
        arguments = empty = json_object();
    struct json_schema_errors errors;
    memset(&errors, 0, sizeof(errors));
    int bad =
        schema ? json_schema_validate_doc(schema->root, schema, arguments, call->req.doc, &errors)
               : 1;
    if (bad > 0) {
        mcp_refuse_count(call->s, REFUSED_ARGUMENTS, call->tool);
        struct strbuf msg = {0};
        strbuf_append_str(&msg, "invalid arguments: ");
        json_t *list = json_array();
        for (int i = 0; i < errors.kept; i++) {
            strbuf_printf(&msg, "%s%s", i ? "; " : "", errors.msg[i]);
            json_array_append_new(list, json_string(errors.msg[i]));
        }
        if (errors.count > errors.kept)
            strbuf_printf(&msg, "; and %d more", errors.count - errors.kept);
        if (schema == NULL)
            strbuf_append_str(&msg, "the tool's schema cannot be read");
        strbuf_append_str(&msg, ". Nothing was sent.");
        json_decref(empty);
        mcp_log_call(call, "invalid_arguments");
        respond_result(call, mcp_tool_error_result("invalid_arguments", call->key, msg.data, list));
        strbuf_free(&msg);
        return;
    }
    if (arguments_text == call->req.arguments_text) { /* moved: one copy while the call waits */
        call->arguments_json = call->req.arguments_text;
        call->req.arguments_text = NULL;
    } else {
        call->arguments_json = xstrndup(arguments_text, arguments_len);
    }
    if (pt != NULL) { /* a read: no key, no intent */
        json_decref(empty);
        passthrough_start(call, pt);
        return;
    }
    if (call->key == NULL && key_source == KEY_FROM_ARGUMENTS &&
        !argument_hash(call, schema, arguments)) {
        json_decref(empty);
        return;
    }
    json_decref(empty);
    if (call->key == NULL && key_source != KEY_FROM_ARGUMENTS) {
        if (key_source != KEY_MINTED) {
            mcp_refuse_count(call->s, REFUSED_KEY, "no key");
            respond_error_code(
                call, MCP_INVALID_PARAMS, 200,
                "Invalid params: no idempotency key. The host (not the model) puts it in "
                "params._meta[\"outbox-relay/idempotency-key\"] or the Idempotency-Key header, "
                "made from its workflow state, e.g. {run_id}:{step_id}");
            return;
        }
        unsigned char rnd[16];
        if (RAND_bytes(rnd, sizeof(rnd)) != 1)
            abort();
        char minted[40] = "minted-";
        for (int i = 0; i < 16; i++)
            snprintf(minted + 7 + 2 * i, 3, "%02x", rnd[i]);
        call->key = xstrdup(minted);
    }
    char ttl[24];
    snprintf(ttl, sizeof(ttl), "%lld", call->task_ttl_ms);
    const char *params[10] = {call->token_hash,
                              call->tool,
                              call->key,
                              call->arguments_json,
                              call->run_id,
                              call->ordering_key,
                              call->traceparent,
                              call->task ? "true" : "false",
                              call->task_ttl_ms >= 0 ? ttl : NULL,
                              call->argument_hash};
    call->step = STEP_ENQUEUE;
    mcp_call_query(call, "mcp_call", 10, params);
}

static void on_list_rows(struct mcp_call *call, PGresult *res)
{
    if (PQntuples(res) == 0) {
        respond_unauthorized(call, "unknown token");
        return;
    }
    free(call->client);
    call->client = xstrdup(PQgetvalue(res, 0, 0));
    if (call->step == STEP_AUTH) {
        json_t *result = NULL;
        if (!strcmp(call->req.method, "initialize"))
            result = mcp_initialize_result(&call->req, OUTBOX_RELAY_VERSION);
        else if (!strcmp(call->req.method, "server/discover"))
            result = mcp_discover_result(NULL);
        else
            result = json_object(); /* ping */
        respond_result(call, result);
        return;
    }
    json_t *tools = json_array();
    /* the schemas' documents live until the list is written: their numbers
     * are shown as the tool's author wrote them (a maximum of 19.99) */
    struct json_text **schemas = xcalloc((size_t)PQntuples(res) + 1, sizeof(*schemas));
    size_t nschemas = 0;
    for (int i = 0; i < PQntuples(res); i++) {
        if (PQgetisnull(res, i, 1))
            continue;
        struct json_text *schema = schema_parse(PQgetvalue(res, i, 4));
        char problem[256];
        if (schema == NULL ||
            !json_schema_check_doc(schema->root, schema, problem, sizeof(problem))) {
            log_event(LOG_WARN, "mcp_tool_hidden", "tool", json_string(PQgetvalue(res, i, 1)),
                      "reason", json_string(schema ? problem : "unreadable schema"), LOG_END);
            json_text_decref(schema);
            continue;
        }
        enum key_source key_source = key_source_of(PQgetvalue(res, i, 6));
        /* key_source 'arguments': one sentence more, for the model */
        char *description = NULL;
        if (key_source == KEY_FROM_ARGUMENTS) {
            char *sentence = mcp_arguments_key_sentence(
                strtod(PQgetvalue(res, i, 7), NULL), json_schema_reference_property(schema->root));
            struct strbuf d = {0};
            const char *own = PQgetvalue(res, i, 3);
            strbuf_printf(&d, "%s%s%s", own, *own ? " " : "", sentence);
            description = d.data;
            free(sentence);
        }
        bool passthrough = !strcmp(PQgetvalue(res, i, 8), "t");
        if (passthrough) { /* a read: no key, nothing saved (the sentence says so) */
            struct strbuf d = {0};
            const char *own = PQgetvalue(res, i, 3);
            strbuf_printf(&d, "%s%s%s", own, *own ? " " : "", MCP_PASSTHROUGH_SENTENCE);
            free(description);
            description = d.data;
        }
        json_t *tool =
            mcp_tool_json(&call->req, PQgetvalue(res, i, 1), value_or_null(res, i, 2),
                          description ? description : PQgetvalue(res, i, 3), schema->root,
                          !strcmp(PQgetvalue(res, i, 5), "t"), key_source != KEY_MINTED);
        if (passthrough)
            mcp_tool_set_passthrough(tool);
        json_array_append_new(tools, tool);
        free(description);
        schemas[nschemas++] = schema;
    }
    json_t *result = json_pack("{s:o}", "tools", tools);
    if (call->req.era == MCP_MODERN) {
        json_object_set_new(result, "ttlMs", json_integer(60000));
        json_object_set_new(result, "cacheScope", json_string("private"));
    }
    respond_result_docs(call, result, (const struct json_text *const *)schemas, nschemas);
    for (size_t i = 0; i < nschemas; i++)
        json_text_decref(schemas[i]);
    free(schemas);
}

static void on_tasks_rows(struct mcp_call *call, PGresult *res)
{
    json_t *tasks = json_array();
    int n = PQntuples(res);
    for (int i = 0; i < n; i++) {
        struct mcp_answer a;
        answer_from_row(res, i, &a);
        json_array_append_new(tasks, mcp_task_json(&a, MCP_LEGACY));
    }
    json_t *result = json_pack("{s:o}", "tasks", tasks);
    if (n == 50) { /* a full page: the cursor is the last one's (created_at, id) */
        char cursor[200];
        snprintf(cursor, sizeof(cursor), "%s|%s", PQgetvalue(res, n - 1, 18),
                 PQgetvalue(res, n - 1, 14));
        json_object_set_new(result, "nextCursor", json_string(cursor));
    }
    respond_result(call, result);
}

/* Maps a database refusal of mcp_call to what the caller is told. */
static void on_call_error(struct mcp_call *call, const char *sqlstate, const char *primary,
                          const char *error)
{
    if (!strcmp(sqlstate, "OR022")) {
        respond_unauthorized(call, "unknown token");
    } else if (!strcmp(sqlstate, "OR023")) {
        mcp_refuse_count(call->s, REFUSED_TOOL, call->tool);
        respond_error_code(call, MCP_INVALID_PARAMS, 200, primary);
    } else if (!strcmp(sqlstate, "OR004") || !strcmp(sqlstate, "OR009") ||
               !strcmp(sqlstate, "OR012")) {
        mcp_refuse_count(call->s, REFUSED_KEY, sqlstate);
        char msg[700];
        snprintf(msg, sizeof(msg), "Invalid params: %s", primary);
        respond_error_code(call, MCP_INVALID_PARAMS, 200, msg);
    } else if (!strcmp(sqlstate, "OR001")) {
        /* a concurrent call took the key with other arguments first */
        mcp_log_call(call, "key_conflict");
        respond_result(call, mcp_tool_error_result("key_conflict", call->key, primary, NULL));
    } else if (!strcmp(sqlstate, "OR025") && call->req.era == MCP_MODERN) {
        respond_result(call, json_object()); /* 2026: cancelling a finished task is an ack */
    } else if (!strcmp(sqlstate, "OR007") || !strcmp(sqlstate, "OR024") ||
               !strcmp(sqlstate, "OR025")) {
        char msg[700];
        snprintf(msg, sizeof(msg), "Invalid params: %s", primary);
        respond_error_code(call, MCP_INVALID_PARAMS, 200, msg);
    } else if (!strncmp(sqlstate, "OR", 2) || !strcmp(sqlstate, "22023")) {
        /* the arguments as a payload: too large, too deep, not accepted */
        mcp_refuse_count(call->s, REFUSED_ARGUMENTS, sqlstate);
        mcp_log_call(call, "refused");
        respond_result(call, mcp_tool_error_result("refused", call->key, primary, NULL));
    } else {
        log_event(LOG_WARN, "mcp_db_error", "step", json_integer(call->step), "error",
                  json_string(error), LOG_END);
        if (call->step == STEP_LOOKUP && call->deadline_ms != 0) {
            call_wait(call); /* a lookup failed: keep waiting, look again */
            return;
        }
        if (call->step == STEP_TASKS && !strncmp(sqlstate, "22", 2)) {
            respond_error_code(call, MCP_INVALID_PARAMS, 200, "Invalid params: bad cursor");
            return;
        }
        bool enqueued_before = call->step == STEP_LOOKUP || call->step == STEP_TASK_NOW ||
                               call->step == STEP_TASK || call->step == STEP_CANCEL ||
                               call->step == STEP_TASKS;
        if (*sqlstate && !enqueued_before) /* mcp_call failed: its transaction rolled back */
            respond_error_code(call, MCP_INTERNAL_ERROR, 200,
                               "Internal error: the database refused the call (logged as "
                               "mcp_db_error); nothing was enqueued by this request");
        else
            respond_error_code(call, MCP_INTERNAL_ERROR, 200,
                               "Internal error: the database did not answer; the call may have "
                               "been recorded: calling again with the same key is safe");
    }
}

static void on_query_done(void *data, pg_conn_t *pg, PGresult *res, const char *error)
{
    struct mcp_call *call = data;
    call->querying = false;
    call->pg = pg; /* NULL: failed before it reached a connection */
    /* orphaned: the client went away (a stdio call, and a task's watch,
     * have no connection: they are the session's until answered) */
    if (call->conn == NULL && !call->on_stdio && !call->watch) {
        mcp_call_free(call);
        return;
    }
    if (error) {
        const char *sqlstate = pg ? pg_error_sqlstate(pg) : "";
        const char *primary = pg && *pg_error_primary(pg) ? pg_error_primary(pg) : error;
        on_call_error(call, sqlstate, primary, error);
        return;
    }
    switch (call->step) {
    case STEP_AUTH:
    case STEP_LIST:
        on_list_rows(call, res);
        break;
    case STEP_TOOL:
        on_tool_row(call, res);
        break;
    case STEP_TASKS:
        on_tasks_rows(call, res);
        break;
    case STEP_ENQUEUE:
    case STEP_LOOKUP:
    case STEP_TASK:
    case STEP_CANCEL:
    case STEP_TASK_NOW:
        if (PQntuples(res) != 1) {
            respond_error_code(call, MCP_INTERNAL_ERROR, 500, "Internal error: no answer row");
            return;
        }
        on_answer_row(call, res);
        break;
    }
}

/* The call's enqueue is queued with its own copy of the arguments: the
 * parsed tree and the body are not needed any more, and a call that then
 * waits for its outcome keeps only what the wait needs (its charge with it). */
static void call_slim(void *data)
{
    struct mcp_call *call = data;
    struct mcp_server *s = call->s;
    if (call->slim)
        return;
    call->slim = true;
    adm_request_slim(&call->req);
    if (call->conn)
        httpd_conn_release_body(call->conn);
    size_t keep = 4096 + 2 * (call->arguments_json ? strlen(call->arguments_json) : 0) +
                  (json_is_string(call->req.id) ? json_string_length(call->req.id) : 0);
    if (call->adm && call->charged > keep) {
        adm_uncharge(s->adm, call->adm, call->charged - keep);
        call->charged = keep;
    }
}

/* Every statement of a call waits its turn in the fair queue of
 * mcp_admission.c, in its client's line. */
void mcp_call_query(struct mcp_call *call, const char *statement, int n, const char *const *v)
{
    /* Set before adm_query: a send that fails there runs the callback at once. */
    call->querying = true;
    call->pg = NULL;
    if (!adm_query(call->s->adm, call->adm, statement, n, v, on_query_done, call,
                   call->step == STEP_ENQUEUE ? call_slim : NULL)) {
        call->querying = false;
        if (call->step == STEP_LOOKUP && call->deadline_ms != 0) {
            call_wait(call);
            return;
        }
        respond_error_code(call, MCP_INTERNAL_ERROR, 200,
                           "Internal error: the database is not reachable; calling again with the "
                           "same key is safe");
        return;
    }
}

/* ---------------------------------------------------------------- requests */

static char *header_copy(const struct httpd_request *request, const char *name)
{
    const struct httpd_header *h = httpd_request_header(request, name);
    return h ? xstrndup(h->value, h->value_len) : NULL;
}

/* host[:port] without the port */
static size_t host_part(const char *value, size_t n)
{
    if (n && value[0] == '[') {
        const char *close = memchr(value, ']', n);
        return close ? (size_t)(close - value) + 1 : n;
    }
    const char *colon = memchr(value, ':', n);
    return colon ? (size_t)(colon - value) : n;
}

static void write_metrics(struct mcp_server *s, struct strbuf *out)
{
    metrics_family(out, "outbox_mcp_calls_total", METRICS_COUNTER,
                   "tools/call answered, by tool and status (succeeded, failed, reconciling, "
                   "key_conflict, invalid_arguments, …).");
    for (size_t i = 0; i < s->count_len; i++) {
        const char *tool = s->counts[i].tool, *status = s->counts[i].status;
        metrics_sample_uint(out, "outbox_mcp_calls_total",
                            METRICS_LABELS({"tool", tool}, {"status", status}), s->counts[i].n);
    }
    metrics_family(out, "outbox_mcp_passthrough_calls_total", METRICS_COUNTER,
                   "Calls of passthrough tools (reads called straight through, no intent), by "
                   "result: ok, tool_error, rpc_error, unreachable, timeout, too_large, failed.");
    for (int i = 0; i < PT_RESULT_COUNT; i++)
        metrics_sample_uint(out, "outbox_mcp_passthrough_calls_total",
                            METRICS_LABELS({"result", pt_result_names[i]}), s->pt_counts[i]);
    metrics_family(out, "outbox_mcp_refusals_total", METRICS_COUNTER,
                   "Requests refused, by reason.");
    for (int i = 0; i < REFUSAL_COUNT; i++)
        metrics_sample_uint(out, "outbox_mcp_refusals_total",
                            METRICS_LABELS({"reason", refusal_names[i]}), s->refusals[i]);
    struct adm_stats st;
    adm_stats(s->adm, &st);
    metrics_family(
        out, "outbox_mcp_connections_shed_total", METRICS_COUNTER,
        "Connections shed at --mcp-max-connections: evicted silent (nothing sent yet), idle, "
        "or slow (headers still coming) ones, and new ones refused (full).");
    static const char *const shed_names[4] = {"silent", "idle", "slow", "full"};
    for (int i = 0; i < 4; i++)
        metrics_sample_uint(out, "outbox_mcp_connections_shed_total",
                            METRICS_LABELS({"reason", shed_names[i]}), s->shed[i]);
    metrics_gauge(out, "outbox_mcp_connections", "Connections open.", METRICS_NO_LABELS,
                  s->httpd ? (double)httpd_conn_count(s->httpd) : 0);
    metrics_gauge(out, "outbox_mcp_memory_charged_bytes",
                  "Memory charged to clients now: bodies being read, parsed requests, waiting "
                  "calls (bounded by --mcp-memory-bytes).",
                  METRICS_NO_LABELS, (double)st.charged);
    metrics_gauge(out, "outbox_mcp_memory_charged_peak_bytes",
                  "The most memory charged at once since the start.", METRICS_NO_LABELS,
                  (double)st.peak);
    metrics_gauge(out, "outbox_mcp_body_bytes",
                  "Request bodies held (all connections, bounded by a quarter of "
                  "--mcp-memory-bytes).",
                  METRICS_NO_LABELS, s->httpd ? (double)httpd_body_bytes(s->httpd) : 0);
    metrics_gauge(out, "outbox_mcp_db_queued",
                  "Statements waiting in the fair queue for a database connection.",
                  METRICS_NO_LABELS, (double)st.queued);
    metrics_family(out, "outbox_mcp_client_requests", METRICS_GAUGE,
                   "Requests of a client in flight (bounded by --mcp-client-calls).");
    for (const struct adm_client *c = adm_first_client(s->adm); c; c = adm_next_client(s->adm, c))
        metrics_sample_uint(out, "outbox_mcp_client_requests",
                            METRICS_LABELS({"client", adm_client_name(c)}),
                            (uint64_t)adm_client_calls(c));
    metrics_family(out, "outbox_mcp_client_memory_bytes", METRICS_GAUGE,
                   "Memory charged to a client (bounded by --mcp-client-memory-bytes).");
    for (const struct adm_client *c = adm_first_client(s->adm); c; c = adm_next_client(s->adm, c))
        metrics_sample_uint(out, "outbox_mcp_client_memory_bytes",
                            METRICS_LABELS({"client", adm_client_name(c)}),
                            (uint64_t)adm_client_charged(c));
    metrics_family(out, "outbox_mcp_token_questions_total", METRICS_COUNTER,
                   "Tokens the verdict cache did not know, asked about in the database.");
    metrics_sample_uint(out, "outbox_mcp_token_questions_total", METRICS_NO_LABELS,
                        st.auth_questions);
    metrics_family(out, "outbox_mcp_enqueue_batches_total", METRICS_COUNTER,
                   "Enqueues of calls that came together sent as one statement (outbox.mcp_calls), "
                   "by result: ok, or failed (each of its calls then sent alone).");
    metrics_sample_uint(out, "outbox_mcp_enqueue_batches_total", METRICS_LABELS({"result", "ok"}),
                        st.batches - st.batch_failures);
    metrics_sample_uint(out, "outbox_mcp_enqueue_batches_total",
                        METRICS_LABELS({"result", "failed"}), st.batch_failures);
    metrics_family(out, "outbox_mcp_enqueue_batched_calls_total", METRICS_COUNTER,
                   "Calls whose enqueue went in a batch.");
    metrics_sample_uint(out, "outbox_mcp_enqueue_batched_calls_total", METRICS_NO_LABELS,
                        st.batched_calls);
    metrics_family(out, "outbox_mcp_memory_trims_total", METRICS_COUNTER,
                   "Times freed memory was given back to the system after a burst.");
    metrics_sample_uint(out, "outbox_mcp_memory_trims_total", METRICS_NO_LABELS, st.trims);
    metrics_family(out, "outbox_mcp_call_seconds", METRICS_HISTOGRAM,
                   "Time from a tools/call request to its answer.");
    metrics_histogram_render(out, "outbox_mcp_call_seconds", METRICS_NO_LABELS, &s->call_seconds);
    metrics_family(out, "outbox_mcp_wakeups_total", METRICS_COUNTER,
                   "Waiting calls sent to look their outcome up again, by what sent them: notify "
                   "(their intent's NOTIFY), recheck (the once-a-second fallback).");
    metrics_sample_uint(out, "outbox_mcp_wakeups_total", METRICS_LABELS({"by", "notify"}),
                        s->wakeups[0]);
    metrics_sample_uint(out, "outbox_mcp_wakeups_total", METRICS_LABELS({"by", "recheck"}),
                        s->wakeups[1]);
    int waiting = 0;
    for (struct mcp_call *c = s->waiting; c; c = c->next)
        waiting++;
    metrics_gauge(out, "outbox_mcp_waiting_calls", "Calls waiting for their outcome.",
                  METRICS_NO_LABELS, waiting);
    if (s->oauth) {
        struct oauth_stats os;
        oauth_stats(s->oauth, &os);
        metrics_family(out, "outbox_mcp_oauth_jwks_fetches_total", METRICS_COUNTER,
                       "Fetches of the OAuth issuer's JWKS (--mcp-oauth-jwks), by result.");
        metrics_sample_uint(out, "outbox_mcp_oauth_jwks_fetches_total",
                            METRICS_LABELS({"result", "ok"}), os.fetches_ok);
        metrics_sample_uint(out, "outbox_mcp_oauth_jwks_fetches_total",
                            METRICS_LABELS({"result", "failed"}), os.fetches_failed);
        metrics_gauge(out, "outbox_mcp_oauth_keys",
                      "Signature keys of the issuer's JWKS the front door holds.",
                      METRICS_NO_LABELS, os.keys);
    }
    int ready = 0;
    for (int i = 0; i < s->pg_count; i++)
        ready += pg_conn_ready(s->pg[i]);
    metrics_gauge(out, "outbox_mcp_db_connections_ready", "Database connections ready.",
                  METRICS_NO_LABELS, ready);
}

static void handle_plain(struct mcp_server *s, httpd_conn_t *conn,
                         const struct httpd_request *request, const char *path)
{
    char *metadata = s->oauth ? oauth_metadata(s->oauth, path) : NULL;
    if (metadata) { /* RFC 9728: where hosts find the authorization server */
        httpd_respond_json(conn, 200, NULL, metadata);
        free(metadata);
    } else if (!strcmp(path, "/healthz")) {
        httpd_respond_json(conn, 200, NULL, "{\"status\":\"ok\"}");
    } else if (!strcmp(path, "/readyz")) {
        bool ready = next_connection(s) != NULL && !s->stopping;
        httpd_respond_json(conn, ready ? 200 : 503, NULL,
                           ready ? "{\"status\":\"ready\"}"
                                 : (s->stopping ? "{\"status\":\"shutting down\"}"
                                                : "{\"status\":\"database not connected\"}"));
    } else if (!strcmp(path, "/metrics")) {
        struct strbuf out = {0};
        write_metrics(s, &out);
        httpd_respond(conn, &(struct httpd_response){.status = 200,
                                                     .content_type =
                                                         "text/plain; version=0.0.4; charset=utf-8",
                                                     .body = out.data,
                                                     .body_len = out.len});
        strbuf_free(&out);
    } else {
        httpd_respond_error(conn, 404, NULL, "not found: the MCP endpoint is POST /mcp");
    }
}

/* tools/call: what the request says, then the tool. */
static void start_tools_call(struct mcp_call *call, const struct httpd_request *request)
{
    struct mcp_request *req = &call->req;
    const char *name = mcp_param_string(req, "name");
    json_t *arguments = json_object_get(req->params, "arguments");
    if (name == NULL) {
        respond_error_code(call, MCP_INVALID_PARAMS, 200,
                           "Invalid params: params.name (the tool) is required");
        return;
    }
    call->tool = xstrdup(name);
    if (arguments != NULL && !json_is_object(arguments)) {
        respond_error_code(call, MCP_INVALID_PARAMS, 200,
                           "Invalid params: params.arguments must be an object");
        return;
    }
    json_t *meta_key = json_object_get(req->meta, MCP_META_KEY);
    const struct httpd_header *header_key =
        request ? httpd_request_header(request, "Idempotency-Key") : NULL; /* stdio: none */
    if (header_key && !utf8_valid(header_key->value, header_key->value_len)) {
        /* it would reach the database as text, and every answer naming it as JSON */
        mcp_refuse_count(call->s, REFUSED_KEY, "not UTF-8");
        respond_error_code(call, MCP_INVALID_PARAMS, 200,
                           "Invalid params: the Idempotency-Key header is not UTF-8; a key is "
                           "text, e.g. {run_id}:{step_id}");
        return;
    }
    if (meta_key != NULL && !json_is_string(meta_key)) {
        mcp_refuse_count(call->s, REFUSED_KEY, "not a string");
        respond_error_code(
            call, MCP_INVALID_PARAMS, 200,
            "Invalid params: _meta[\"outbox-relay/idempotency-key\"] must be a string");
        return;
    }
    if (meta_key && header_key &&
        (strlen(json_string_value(meta_key)) != header_key->value_len ||
         memcmp(json_string_value(meta_key), header_key->value, header_key->value_len))) {
        mcp_refuse_count(call->s, REFUSED_KEY, "header and _meta differ");
        respond_error_code(call, MCP_INVALID_PARAMS, 200,
                           "Invalid params: the Idempotency-Key header and "
                           "_meta[\"outbox-relay/idempotency-key\"] differ; send one key");
        return;
    }
    if (meta_key)
        call->key = xstrdup(json_string_value(meta_key));
    else if (header_key)
        call->key = xstrndup(header_key->value, header_key->value_len);
    const char *s;
    if ((s = mcp_meta_string(req, MCP_META_RUN_ID)))
        call->run_id = xstrdup(s);
    if ((s = mcp_meta_string(req, MCP_META_ORDERING_KEY)))
        call->ordering_key = xstrdup(s);
    if ((s = mcp_meta_string(req, "traceparent")))
        call->traceparent = xstrdup(s);
    json_t *task = json_object_get(req->params, "task");
    if (req->era == MCP_LEGACY && json_is_object(task)) {
        call->task = true;
        json_t *ttl = json_object_get(task, "ttl");
        if (json_is_integer(ttl) && json_integer_value(ttl) >= 0)
            call->task_ttl_ms = (long long)json_integer_value(ttl);
    }
    struct tool_cache_entry *cached = tool_cache_find(call->s, call->token_hash, call->tool);
    if (cached != NULL) {
        free(call->client);
        call->client = xstrdup(cached->client);
        struct json_text *schema = json_text_incref(cached->schema); /* may be replaced meanwhile */
        struct pt_row *pt = pt_row_copy(cached->pt);
        call_with_tool(call, schema, cached->key_source, pt);
        pt_row_free(pt);
        json_text_decref(schema);
        return;
    }
    const char *params[2] = {call->token_hash, call->tool};
    call->step = STEP_TOOL;
    mcp_call_query(call, "mcp_tool", 2, params);
}

static bool accepts_event_stream(const struct httpd_request *request)
{
    if (request == NULL) /* stdio: the answer is a line, whenever it comes */
        return false;
    const struct httpd_header *accept = httpd_request_header(request, "Accept");
    return accept && memmem(accept->value, accept->value_len, "text/event-stream", 17) != NULL;
}

static void start_task_method(struct mcp_call *call, const struct httpd_request *request)
{
    const char *method = call->req.method;
    if (!strcmp(method, "tasks/list")) {
        const char *cursor = mcp_param_string(&call->req, "cursor");
        char created[100] = "", id[200] = "";
        if (cursor) {
            const char *bar = strchr(cursor, '|');
            if (bar == NULL || (size_t)(bar - cursor) >= sizeof(created) ||
                strlen(bar + 1) >= sizeof(id)) {
                respond_error_code(call, MCP_INVALID_PARAMS, 200, "Invalid params: bad cursor");
                return;
            }
            memcpy(created, cursor, (size_t)(bar - cursor));
            snprintf(id, sizeof(id), "%s", bar + 1);
        }
        const char *params[4] = {call->token_hash, cursor ? created : NULL, cursor ? id : NULL,
                                 "50"};
        call->step = STEP_TASKS;
        mcp_call_query(call, "mcp_tasks_list", 4, params);
        return;
    }
    const char *task_id = mcp_param_string(&call->req, "taskId");
    if (task_id == NULL) {
        respond_error_code(call, MCP_INVALID_PARAMS, 200,
                           "Invalid params: params.taskId is required");
        return;
    }
    call->task_id = xstrdup(task_id);
    const char *params[2] = {call->token_hash, call->task_id};
    if (!strcmp(method, "tasks/cancel")) {
        call->step = STEP_CANCEL;
        mcp_call_query(call, "mcp_task_cancel", 2, params);
    } else {
        /* tasks/result blocks until the task is terminal (2025-11-25,
         * "Result Retrieval"), not only for --mcp-wait-ms. */
        call->blocking = call->req.era == MCP_LEGACY && !strcmp(method, "tasks/result");
        call->sse = accepts_event_stream(request);
        call->step = STEP_TASK; /* tasks/get, tasks/result */
        mcp_call_query(call, "mcp_task", 2, params);
    }
}

/* ---------------------------------------------------------------- admission
 *
 * The head of a request is judged before its body is read (http_server.c's
 * on_head): Host and Origin, then the token's verdict (mcp_admission.c),
 * then the body's bytes against the client's share. A token the cache does
 * not know defers the body until the database has answered. */

static const char *const retry_after = "Retry-After: 1\r\n";

/* A refusal before there is a call (no request id is known yet). */
static void slot_refuse(struct mcp_slot *slot, int status, int code, const char *headers,
                        const char *message)
{
    struct mcp_error err = {0};
    mcp_error_set(&err, code, status, "%s", message);
    char *json = mcp_error_json(NULL, &err);
    mcp_error_clear(&err);
    httpd_conn_refuse(slot->conn, status, headers, json);
    free(json);
}

static void slot_unauthorized(struct mcp_slot *slot, const char *why)
{
    mcp_refuse_count(slot->s, REFUSED_AUTH, why);
    char message[200];
    snprintf(message, sizeof(message), "Unauthorized: %s", why);
    char header[1024];
    slot_refuse(
        slot, 401, MCP_INVALID_REQUEST,
        challenge(slot->s, slot->token_hash[0] ? "invalid_token" : NULL, header, sizeof(header)),
        message);
}

const char *mcp_busy_message(enum adm_refusal refusal, int *status)
{
    switch (refusal) {
    case ADM_CLIENT_FULL:
        *status = 429;
        return "Too many requests: this client holds its share of the front door (requests in "
               "flight or memory: --mcp-client-calls, --mcp-client-memory-bytes); try again";
    case ADM_SERVER_FULL:
        *status = 503;
        return "Service unavailable: the front door holds all the memory it may "
               "(--mcp-memory-bytes); try again";
    default:
        *status = 413;
        return "Request too large: parsing it would take more memory than a client may hold "
               "(--mcp-client-memory-bytes); send a smaller request";
    }
}

static void slot_busy(struct mcp_slot *slot, enum adm_refusal refusal)
{
    int status;
    const char *message = mcp_busy_message(refusal, &status);
    mcp_refuse_count(slot->s, status == 413 ? REFUSED_TOO_LARGE : REFUSED_BUSY, message);
    slot_refuse(slot, status, status == 413 ? MCP_INVALID_REQUEST : -32000,
                status == 413 ? NULL : retry_after, message);
}

static void respond_busy(struct mcp_call *call, enum adm_refusal refusal)
{
    int status;
    const char *message = mcp_busy_message(refusal, &status);
    mcp_refuse_count(call->s, status == 413 ? REFUSED_TOO_LARGE : REFUSED_BUSY, message);
    struct mcp_error err = {0};
    mcp_error_set(&err, status == 413 ? MCP_INVALID_REQUEST : -32000, status, "%s", message);
    if (status != 413 && call->conn)
        httpd_conn_close_after_answer(call->conn); /* what it holds goes back too */
    respond_text(call, status, status == 413 ? NULL : retry_after,
                 mcp_error_json(call->req.id, &err));
    mcp_error_clear(&err);
}

/* The body of a known client's request may be read if its bytes fit the
 * client's share; else refused. */
static bool slot_admit_body(struct mcp_slot *slot, struct adm_client *client, size_t len)
{
    enum adm_refusal refusal = adm_charge(slot->s->adm, client, len, 0, true);
    if (refusal != ADM_OK) {
        slot_busy(slot, refusal);
        return false;
    }
    slot->client = client;
    slot->charged = len;
    return true;
}

static void slot_forget(struct mcp_slot *slot)
{
    adm_waiter_cancel(slot->s->adm, &slot->waiter);
    oauth_waiter_cancel(slot->s->oauth, &slot->oauth_waiter);
    free(slot->jwt);
    slot->jwt = NULL;
    slot->jwt_len = 0;
    slot->is_jwt = false;
    slot->token_hash[0] = '\0';
    if (slot->client && slot->charged)
        adm_uncharge(slot->s->adm, slot->client, slot->charged);
    slot->client = NULL;
    slot->charged = 0;
}

static void on_slot_verdict(struct adm_waiter *w, enum adm_verdict verdict,
                            struct adm_client *client)
{
    struct mcp_slot *slot =
        (struct mcp_slot *)(void *)((char *)w - offsetof(struct mcp_slot, waiter));
    if (verdict == ADM_GOOD) {
        memcpy(slot->as_hash, w->as_hash, sizeof(slot->as_hash));
        if (slot_admit_body(slot, client, slot->body_len))
            httpd_conn_resume(slot->conn);
    } else if (verdict == ADM_BAD) {
        slot_unauthorized(slot, slot->is_jwt ? "no client of that name (outbox.mcp_clients)"
                                             : "unknown token");
    } else {
        mcp_refuse_count(slot->s, REFUSED_BUSY, "the token could not be checked");
        slot_refuse(slot, 503, -32000, retry_after,
                    "Service unavailable: the database could not say whether this token is "
                    "known; try again");
    }
}

/* A refused JWT: its reason in the log (a line a second per reason; never
 * the token), then 401, or 403 for a good token without the scope. */
static void slot_jwt_refused(struct mcp_slot *slot, const struct jwt_result *r)
{
    struct mcp_server *s = slot->s;
    struct oauth_log *l = NULL;
    for (size_t i = 0; i < sizeof(s->oauth_log) / sizeof(s->oauth_log[0]); i++) {
        if (s->oauth_log[i].reason == NULL)
            s->oauth_log[i].reason = xstrdup(r->reason);
        if (!strcmp(s->oauth_log[i].reason, r->reason)) {
            l = &s->oauth_log[i];
            break;
        }
    }
    uint64_t suppressed = 0;
    if (l == NULL || adm_rate_allow(s->adm, &l->rate, &suppressed))
        log_event(LOG_INFO, "mcp_oauth_refused", "reason", json_string(r->reason), "suppressed",
                  json_integer((json_int_t)suppressed), LOG_END);
    if (r->status != JWT_SCOPE) {
        char why[160];
        snprintf(why, sizeof(why), "the access token was refused (%s)", r->reason);
        slot_unauthorized(slot, why);
        return;
    }
    mcp_refuse_count(s, REFUSED_AUTH, r->reason);
    char header[1024];
    slot_refuse(slot, 403, MCP_INVALID_REQUEST,
                challenge(s, "insufficient_scope", header, sizeof(header)),
                "Forbidden: the access token lacks the scope this server requires "
                "(--mcp-oauth-scope)");
}

/* Checks the JWT the slot holds; true when the request must wait (for the
 * JWKS or the database), false when it was answered or admitted. */
static bool slot_check_jwt(struct mcp_slot *slot)
{
    struct mcp_server *s = slot->s;
    struct jwt_result r;
    bool waiting = false;
    enum jwt_status status =
        oauth_check(s->oauth, slot->jwt, slot->jwt_len, &r, &slot->oauth_waiter, &waiting);
    if (waiting)
        return true;
    if (status != JWT_OK) {
        slot_jwt_refused(slot, &r);
        return false;
    }
    /* The verdict may be kept until the token's exp (with its leeway), never longer. */
    int64_t left_s = r.exp + JWT_SKEW_S - (int64_t)time(NULL);
    uint64_t cap = uv_now(&s->loop) + (left_s > 0 ? (uint64_t)left_s * 1000 : 0);
    if (cap == 0)
        cap = 1;
    slot->waiter.on_verdict = on_slot_verdict;
    if (!adm_ask_client(s->adm, slot->token_hash, r.client, cap, &slot->waiter)) {
        mcp_refuse_count(s, REFUSED_BUSY, "too many unknown tokens");
        slot_refuse(slot, 503, -32000, retry_after,
                    "Service unavailable: the token's client cannot be looked up now (the "
                    "database is not reachable, or too many unknown tokens are being checked); "
                    "try again");
        return false;
    }
    return slot->waiter.entry != NULL;
}

static void on_jwks_fetched(struct oauth_waiter *w)
{
    struct mcp_slot *slot =
        (struct mcp_slot *)(void *)((char *)w - offsetof(struct mcp_slot, oauth_waiter));
    slot_check_jwt(slot); /* answers, resumes (on_slot_verdict) or waits on the database */
}

static enum httpd_head_action on_head(void *data, httpd_conn_t *conn,
                                      const struct httpd_request *head)
{
    struct mcp_server *s = data;
    struct mcp_slot *slot = httpd_conn_data(conn);
    slot->s = s;
    slot->conn = conn;
    slot_forget(slot);
    if (head->method != HTTP_POST || head->path_len != 4 || memcmp(head->path, "/mcp", 4) != 0)
        return HTTPD_HEAD_READ; /* answered by on_request, without a body worth counting */
    if (s->stopping) {
        slot_refuse(slot, 503, -32000, retry_after, "shutting down");
        return HTTPD_HEAD_READ;
    }
    if (!httpd_host_allowed(head, s->cfg->mcp_hosts)) {
        mcp_refuse_count(s, REFUSED_HOST, "Host");
        slot_refuse(slot, 403, MCP_INVALID_REQUEST, NULL,
                    "Forbidden: this Host is not served (--mcp-hosts)");
        return HTTPD_HEAD_READ;
    }
    if (!httpd_origin_allowed(head, s->cfg->mcp_origins)) {
        mcp_refuse_count(s, REFUSED_ORIGIN, "Origin");
        slot_refuse(slot, 403, MCP_INVALID_REQUEST, NULL,
                    "Forbidden: this Origin is not allowed (--mcp-origins)");
        return HTTPD_HEAD_READ;
    }
    const struct httpd_header *auth = httpd_request_header(head, "Authorization");
    if (auth == NULL || auth->value_len < 8 || strncasecmp(auth->value, "Bearer ", 7) != 0) {
        slot_unauthorized(slot, "an Authorization: Bearer token is required");
        return HTTPD_HEAD_READ;
    }
    const char *token = auth->value + 7;
    size_t token_len = auth->value_len - 7;
    sha256_hex_bytea(token, token_len, slot->token_hash);
    slot->body_len = head->body_len;
    slot->is_jwt = s->oauth && jwt_shaped(token, token_len);
    struct adm_client *client = NULL;
    switch (adm_verdict(s->adm, slot->token_hash, &client, slot->as_hash)) {
    case ADM_GOOD: /* a JWT's is kept no later than its exp */
        slot_admit_body(slot, client, head->body_len);
        return HTTPD_HEAD_READ;
    case ADM_BAD:
        slot_unauthorized(slot, slot->is_jwt ? "no client of that name (outbox.mcp_clients)"
                                             : "unknown token");
        return HTTPD_HEAD_READ;
    case ADM_UNKNOWN:
        break;
    }
    if (slot->is_jwt) {
        slot->jwt = xmalloc(token_len + 1);
        memcpy(slot->jwt, token, token_len);
        slot->jwt[token_len] = '\0';
        slot->jwt_len = token_len;
        slot->oauth_waiter.on_keys = on_jwks_fetched;
        return slot_check_jwt(slot) ? HTTPD_HEAD_DEFER : HTTPD_HEAD_READ;
    }
    slot->waiter.on_verdict = on_slot_verdict;
    if (!adm_ask(s->adm, slot->token_hash, &slot->waiter)) {
        mcp_refuse_count(s, REFUSED_BUSY, "too many unknown tokens");
        slot_refuse(slot, 503, -32000, retry_after,
                    "Service unavailable: the token cannot be checked now (the database is not "
                    "reachable, or too many unknown tokens are being checked); try again");
        return HTTPD_HEAD_READ;
    }
    /* Waiting for the database, unless it answered at once. */
    return slot->waiter.entry ? HTTPD_HEAD_DEFER : HTTPD_HEAD_READ;
}

static void on_shed(void *data, enum httpd_shed why)
{
    struct mcp_server *s = data;
    static const char *const names[4] = {"silent", "idle", "slow", "full"};
    s->shed[why]++;
    uint64_t suppressed = 0;
    if (adm_rate_allow(s->adm, &s->shed_log, &suppressed))
        log_event(why == HTTPD_SHED_FULL ? LOG_WARN : LOG_INFO, "mcp_connection_shed", "reason",
                  json_string(names[why]), "connections", json_integer(s->cfg->mcp_max_connections),
                  "suppressed", json_integer((json_int_t)suppressed), LOG_END);
}

static void handle_mcp(struct mcp_server *s, httpd_conn_t *conn,
                       const struct httpd_request *request)
{
    if (s->stopping) {
        httpd_conn_close_after_answer(conn);
        httpd_respond_error(conn, 503, "Retry-After: 1\r\n", "shutting down");
        return;
    }
    struct mcp_call *call = call_new(s, conn);
    call->started_ns = request->arrived_ns;
    call->deadline_ms = uv_now(&s->loop) + (uint64_t)s->cfg->mcp_wait_ms;
    if (!httpd_host_allowed(request, s->cfg->mcp_hosts)) {
        mcp_refuse_count(s, REFUSED_HOST, "Host");
        respond_error_code(call, MCP_INVALID_REQUEST, 403,
                           "Forbidden: this Host is not served (--mcp-hosts)");
        return;
    }
    if (!httpd_origin_allowed(request, s->cfg->mcp_origins)) {
        mcp_refuse_count(s, REFUSED_ORIGIN, "Origin");
        respond_error_code(call, MCP_INVALID_REQUEST, 403,
                           "Forbidden: this Origin is not allowed (--mcp-origins)");
        return;
    }
    if (request->method != HTTP_POST) {
        call->answered = true;
        mcp_call_detach(call);
        httpd_respond_error(conn, 405, "Allow: POST\r\n",
                            "the MCP endpoint takes POST only (no SSE stream, no session to "
                            "delete)");
        return;
    }
    /* on_head judged the token before the body was read */
    struct mcp_slot *slot = httpd_conn_data(conn);
    if (slot->client == NULL) {
        respond_unauthorized(call, "an Authorization: Bearer token is required");
        return;
    }
    call->adm = slot->client;
    call->charged = slot->charged;
    slot->client = NULL;
    slot->charged = 0;
    memcpy(call->token_hash, slot->as_hash, sizeof(call->token_hash));
    enum adm_refusal refusal = adm_call_begin(s->adm, call->adm);
    if (refusal != ADM_OK) {
        respond_busy(call, refusal);
        return;
    }
    call->admitted = true;
    size_t estimate = adm_parse_estimate(request->body, request->body_len);
    if ((refusal = adm_charge(s->adm, call->adm, estimate, call->charged, false)) != ADM_OK) {
        respond_busy(call, refusal);
        return;
    }
    call->charged += estimate;
    struct mcp_headers headers = {0};
    char *h_version = header_copy(request, "MCP-Protocol-Version");
    char *h_method = header_copy(request, "Mcp-Method");
    char *h_name = header_copy(request, "Mcp-Name");
    headers.protocol_version = h_version;
    headers.method = h_method;
    headers.name = h_name;
    struct mcp_error err = {0};
    bool parsed = mcp_parse(request->body, request->body_len, &headers, &call->req, &err);
    free(h_version);
    free(h_method);
    free(h_name);
    if (!parsed) {
        mcp_refuse_count(s, err.code == MCP_HEADER_MISMATCH ? REFUSED_HEADERS : REFUSED_PROTOCOL,
                         err.message);
        mcp_respond_error(call, &err);
        return;
    }
    mcp_dispatch(call, request);
}

/*
 * The seam between a transport and JSON-RPC: a parsed request of an
 * admitted client, whatever carried it. HTTP (handle_mcp) and stdio
 * (stdio_on_line) both end here; request is the HTTP request for the
 * headers a method may read (Idempotency-Key, Accept), NULL on stdio.
 */
void mcp_dispatch(struct mcp_call *call, const struct httpd_request *request)
{
    const char *method = call->req.method;
    if (method == NULL || call->req.id == NULL) {
        /* a notification or a client's response of a known client (a
         * stranger's got 401 in on_head): accepted, nothing to say */
        respond_text(call, 202, NULL, NULL);
        return;
    }
    const char *params[1] = {call->token_hash};
    bool modern = call->req.era == MCP_MODERN;
    if ((!modern && (!strcmp(method, "initialize") || !strcmp(method, "ping"))) ||
        (modern && !strcmp(method, "server/discover"))) {
        call->step = STEP_AUTH;
        mcp_call_query(call, "mcp_list_tools", 1, params);
    } else if (!strcmp(method, "tools/list")) {
        call->step = STEP_LIST;
        mcp_call_query(call, "mcp_list_tools", 1, params);
    } else if (!strcmp(method, "tools/call")) {
        start_tools_call(call, request);
    } else if (!modern && (!strcmp(method, "tasks/get") || !strcmp(method, "tasks/result") ||
                           !strcmp(method, "tasks/list") || !strcmp(method, "tasks/cancel"))) {
        start_task_method(call, request);
    } else if (modern && (!strcmp(method, "tasks/get") || !strcmp(method, "tasks/cancel") ||
                          !strcmp(method, "tasks/update"))) {
        if (!call->req.tasks_extension) {
            struct mcp_error need = {0};
            mcp_error_set(&need, -32021, 400,
                          "Missing required client capability: the extension %s",
                          MCP_TASKS_EXTENSION);
            need.data = json_pack("{s:{s:{s:{}}}}", "requiredCapabilities", "extensions",
                                  MCP_TASKS_EXTENSION);
            mcp_respond_error(call, &need);
            return;
        }
        start_task_method(call, request);
    } else {
        struct mcp_error nf = {0};
        mcp_error_set(&nf, MCP_METHOD_NOT_FOUND, 200, "Method not found: %s", method);
        mcp_respond_error(call, &nf);
    }
}

static void on_request(void *data, httpd_conn_t *conn, const struct httpd_request *request)
{
    struct mcp_server *s = data;
    char path[256];
    snprintf(path, sizeof(path), "%.*s", (int)(request->path_len < 255 ? request->path_len : 255),
             request->path ? request->path : "");
    if (!strcmp(path, "/mcp")) {
        handle_mcp(s, conn, request);
        return;
    }
    if (request->method != HTTP_GET && request->method != HTTP_HEAD) {
        httpd_respond_error(conn, 405, "Allow: GET, HEAD\r\n", "method not allowed");
        return;
    }
    handle_plain(s, conn, request, path);
}

/* The wait of a call ended: one last lookup answers it. */
static void on_wait_over(void *data, httpd_conn_t *conn)
{
    struct mcp_call *call = *(struct mcp_call **)httpd_conn_data(conn);
    if (call == NULL)
        return;
    if (call->blocking && !call->s->stopping) {
        call_keep_alive(call); /* a tasks/result waits on, kept alive */
        return;
    }
    mcp_call_final_lookup(call);
}

static void on_close(void *data, httpd_conn_t *conn)
{
    struct mcp_slot *slot = httpd_conn_data(conn);
    if (slot->s)
        slot_forget(slot);
    struct mcp_call *call = slot->call;
    if (call == NULL)
        return;
    call->conn = NULL;
    mcp_call_detach(call);
}

/* ---------------------------------------------------------------- wake-ups */

/* Wake-ups are batched: every call woken in one turn of the loop (a record
 * of many outcomes NOTIFYs once per intent, all read in one go) is looked up
 * with one statement, outbox.mcp_outcomes, by the intents' keys, each with its
 * call's token hash (a key is answered only to its client). One batch
 * is on the wire at a time; calls woken meanwhile go with the next. */
#define MCP_BATCH_MAX 256

static void run_batch(struct mcp_server *s);

static void on_batch_done(void *data, PGresult *res, const char *error)
{
    struct mcp_server *s = data;
    s->batch_running = false;
    if (error) {
        log_event(LOG_WARN, "mcp_db_error", "step", json_string("batched lookup"), "error",
                  json_string(error), LOG_END);
    } else {
        for (int i = 0; i < PQntuples(res); i++) {
            struct mcp_answer a;
            answer_from_row(res, i, &a);
            if (a.intent_key == NULL)
                continue;
            for (struct mcp_call *c = s->waiting, *next; c; c = next) {
                next = c->next; /* on_answer may answer c and take it out */
                if (!c->in_batch || c->intent_key == NULL || strcmp(c->intent_key, a.intent_key))
                    continue;
                c->in_batch = false;
                c->step = STEP_LOOKUP;
                on_answer(c, &a);
            }
        }
    }
    for (struct mcp_call *c = s->waiting; c; c = c->next)
        c->in_batch = false; /* no row for it: it waits on */
    run_batch(s);
}

static void run_batch(struct mcp_server *s)
{
    if (s->batch_running || s->closing)
        return;
    strbuf_reset(&s->batch_keys);
    strbuf_reset(&s->batch_tokens);
    pgarray_begin(&s->batch_keys);
    pgarray_begin(&s->batch_tokens);
    int n = 0;
    for (struct mcp_call *c = s->waiting; c && n < MCP_BATCH_MAX; c = c->next) {
        if (!c->due || c->querying || c->intent_key == NULL)
            continue;
        c->due = false;
        c->in_batch = true;
        pgarray_item_text(&s->batch_keys, c->intent_key, strlen(c->intent_key));
        pgarray_item_text(&s->batch_tokens, c->token_hash, strlen(c->token_hash));
        n++;
    }
    pgarray_end(&s->batch_keys);
    pgarray_end(&s->batch_tokens);
    if (n == 0)
        return;
    const char *params[2] = {s->batch_tokens.data, s->batch_keys.data};
    pg_conn_t *pg = next_connection(s);
    s->batch_running = pg != NULL; /* before pg_query: a failed send calls back at once */
    if (pg != NULL && pg_query(pg, "mcp_outcomes", 2, params, on_batch_done, s))
        return;
    s->batch_running = false;
    for (struct mcp_call *c = s->waiting; c; c = c->next)
        c->in_batch = false; /* the recheck timer tries again */
}

static void on_batch_timer(uv_timer_t *timer)
{
    struct mcp_server *s = timer->data;
    s->batch_scheduled = false;
    run_batch(s);
}

/* intent_key: the key a NOTIFY named; NULL: the recheck, every waiting call.
 * Each call sent to look again is counted by what sent it (/metrics,
 * outbox_mcp_wakeups_total): a test tells a wait ended by its NOTIFY from
 * one ended by the fallback without a clock. */
static void wake(struct mcp_server *s, const char *intent_key)
{
    bool any = false;
    for (struct mcp_call *c = s->waiting; c; c = c->next) {
        if (c->querying ||
            (intent_key && (c->intent_key == NULL || strcmp(c->intent_key, intent_key))))
            continue;
        c->due =
            true; /* in a batch already: looked up again after it (its snapshot may be older) */
        any = true;
        s->wakeups[intent_key ? 0 : 1]++;
    }
    if (any && !s->batch_scheduled && !s->closing) {
        s->batch_scheduled = true;
        uv_timer_start(&s->batch_timer, on_batch_timer, 0, 0);
    }
}

static void on_notify(void *data, const char *channel, const char *payload)
{
    wake(data, payload);
}

static void on_recheck(uv_timer_t *timer)
{
    struct mcp_server *s = timer->data;
    adm_pump(s->adm);
    refusals_flush(s);
    wake(s, NULL);
    stdio_session_verify(s);
}

/* ---------------------------------------------------------------- lifetime */

static void on_handle_closed(uv_handle_t *handle)
{
    struct mcp_server *s = handle->data;
    s->open_handles--;
}

static void on_pg_closed(void *data)
{
    struct mcp_server *s = data;
    s->open_handles--;
}

static void on_httpd_closed(void *data)
{
    struct mcp_server *s = data;
    s->open_handles--;
}

static void on_stdio_closed(void *data)
{
    struct mcp_server *s = data;
    s->open_handles--;
}

static void on_oauth_closed(void *data)
{
    struct mcp_server *s = data;
    s->oauth = NULL;
    s->open_handles--;
}

static void on_pt_closed(void *data)
{
    struct mcp_server *s = data;
    s->pt = NULL;
    s->open_handles--;
}

static void on_adm_closed(void *data)
{
    struct mcp_server *s = data;
    s->adm = NULL;
    s->open_handles--;
}

/* A connection became ready or was lost: the fair queue moves (or fails). */
static void on_pg_ready(void *data)
{
    struct mcp_server *s = data;
    if (s->adm && !s->closing) {
        adm_pump(s->adm);
        stdio_session_verify(s);
    }
}

static void on_pg_lost(void *data, const char *reason)
{
    on_pg_ready(data);
}

/* Once stopping and every call is gone (or the grace is over): close
 * everything. Calls still alive then are cut: their connections close
 * (on_close orphans them) and their queries fail (the callback frees them). */
static void server_close(struct mcp_server *s)
{
    if (s->closing)
        return;
    s->closing = true;
    uv_timer_stop(&s->stop_timer);
    uv_close((uv_handle_t *)&s->stop_timer, on_handle_closed);
    uv_close((uv_handle_t *)&s->recheck, on_handle_closed);
    uv_close((uv_handle_t *)&s->batch_timer, on_handle_closed);
    uv_close((uv_handle_t *)&s->wait_timer, on_handle_closed);
    if (s->stdio_asked)
        adm_waiter_cancel(s->adm, &s->stdio_waiter);
    if (s->stdio) {
        mcp_stdio_close(s->stdio, on_stdio_closed, s);
        s->stdio = NULL;
    }
    uv_close((uv_handle_t *)&s->sigterm, on_handle_closed);
    uv_close((uv_handle_t *)&s->sigint, on_handle_closed);
    if (s->pt) /* first: its calls still in flight are answered on their connections */
        passthrough_close(s->pt, on_pt_closed, s);
    if (s->httpd)
        httpd_close(s->httpd, on_httpd_closed, s);
    for (int i = 0; i < s->pg_count; i++)
        pg_conn_close(s->pg[i], on_pg_closed, s);
    if (s->oauth)
        oauth_close(s->oauth, on_oauth_closed, s);
    adm_close(s->adm, on_adm_closed, s); /* last: the failed queries above free their calls */
    log_event(LOG_INFO, "mcp_stopped", LOG_END);
}

void mcp_server_maybe_close(struct mcp_server *s)
{
    /* stdio: the answers written must have left too */
    if (s->stopping && !s->closing && s->calls == 0 && s->answering == 0 &&
        (s->stdio == NULL || s->stdio_out_failed || mcp_stdio_pending(s->stdio) == 0))
        server_close(s);
}

static void on_stop_timer(uv_timer_t *timer)
{
    struct mcp_server *s = timer->data;
    log_event(LOG_WARN, "mcp_stop_forced", "calls", json_integer(s->calls), LOG_END);
    server_close(s);
}

/* SIGTERM, SIGINT, or (stdio) the end of input: waiting calls are
 * answered with one last look, no new request is taken, and once every
 * call is gone (or MCP_STOP_GRACE_MS passed) everything closes. */
void mcp_server_stop(struct mcp_server *s, const char *why)
{
    if (s->stopping)
        return;
    s->stopping = true;
    log_event(LOG_INFO, "mcp_shutdown", "signal", json_string(why), LOG_END);
    for (struct mcp_call *c = s->waiting, *next; c; c = next) {
        next = c->next;
        if (c->watch) { /* a task's watch: no one to tell any more */
            DLIST_REMOVE(s->waiting, c);
            c->waiting = false;
            mcp_call_free(c);
        } else {
            mcp_call_final_lookup(c);
        }
    }
    if (s->stdio)
        mcp_stdio_hold(s->stdio, true); /* no new line */
    uv_timer_start(&s->stop_timer, on_stop_timer, MCP_STOP_GRACE_MS, 0);
    mcp_server_maybe_close(s);
}

static void on_signal(uv_signal_t *handle, int signum)
{
    mcp_server_stop(handle->data, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

static void on_accept_error(void *data, int uv_error)
{
    log_event(LOG_WARN, "mcp_accept_failed", "error", json_string(uv_strerror(uv_error)), LOG_END);
}

int mcp_server_run(const struct config *cfg)
{
    const char *token = cfg->mcp_stdio ? getenv("OUTBOX_MCP_TOKEN") : NULL;
    if (cfg->mcp_stdio && (token == NULL || *token == '\0')) {
        log_event(LOG_ERROR, "mcp_stdio_refused", "reason",
                  json_string("OUTBOX_MCP_TOKEN is not set: --stdio serves one client, the one "
                              "whose token it holds (outbox.mcp_client)"),
                  LOG_END);
        return 2;
    }
    struct mcp_server *s = xcalloc(1, sizeof(*s));
    s->cfg = cfg;
    s->stdio_mode = cfg->mcp_stdio;
    if (token)
        sha256_hex_bytea(token, strlen(token), s->stdio_token_hash);
    uv_loop_init(&s->loop);
    log_batch_start(&s->loop);
    signal(SIGPIPE, SIG_IGN);
    static const double bounds[] = METRICS_LATENCY_SECONDS_BOUNDS;
    if (!metrics_histogram_init(&s->call_seconds, bounds, METRICS_LATENCY_SECONDS_BOUND_COUNT))
        abort();

    struct sockaddr_storage addr;
    if (httpd_parse_listen(cfg->mcp_listen, &addr) != NULL)
        abort(); /* config_load checked it */
    struct httpd_config hc = {
        .limits = {.max_request_bytes = MCP_MAX_BODY_BYTES + 16384,
                   .max_url_bytes = 2048,
                   .max_headers = 64,
                   .max_header_bytes = 8192,
                   .max_body_bytes = MCP_MAX_BODY_BYTES,
                   .max_pipelined_bytes = 65536,
                   .max_total_body_bytes = (size_t)cfg->mcp_memory_bytes / 4,
                   .max_connections = (size_t)cfg->mcp_max_connections},
        .timeouts = {.idle_ms = 30000,
                     .write_ms = 10000,
                     .drain_ms = 1000,
                     .header_ms = (uint64_t)cfg->mcp_header_timeout_ms},
        .response_headers = "Cache-Control: no-store\r\n",
        /* one value each: a second Authorization or key is not chosen between */
        .single_headers = "Authorization, Idempotency-Key, Origin, MCP-Protocol-Version, "
                          "Mcp-Method, Mcp-Name",
        .conn_data_size = sizeof(struct mcp_slot),
    };
    s->pg_count = cfg->mcp_db_connections;
    s->pg = xcalloc((size_t)s->pg_count, sizeof(*s->pg));
    struct adm_limits limits = {.memory_bytes = (size_t)cfg->mcp_memory_bytes,
                                .client_memory_bytes = (size_t)cfg->mcp_client_memory_bytes,
                                .client_calls = cfg->mcp_client_calls};
    s->adm = adm_new(&s->loop, &limits, s->pg, s->pg_count);
    adm_set_batch(s->adm, "mcp_call", "mcp_calls", 10);
    s->oauth = oauth_new(&s->loop, cfg);
    s->pt = passthrough_new(&s->loop, cfg->ca_file);
    if (s->pt == NULL)
        abort(); /* curl_multi_init failed: no memory */
    struct httpd_hooks hooks = {.data = s,
                                .on_head = on_head,
                                .on_shed = on_shed,
                                .on_request = on_request,
                                .on_wait_over = on_wait_over,
                                .on_close = on_close,
                                .on_accept_error = on_accept_error};
    int uv_error = 0;
    if (s->stdio_mode) {
        s->stdio = stdio_session_open(s, &uv_error);
    } else {
        s->httpd = httpd_start(&s->loop, (const struct sockaddr *)&addr, &hc, &hooks, &uv_error);
    }
    uv_timer_init(&s->loop, &s->recheck);
    uv_timer_init(&s->loop, &s->wait_timer);
    s->wait_timer.data = s;
    uv_timer_init(&s->loop, &s->stop_timer);
    uv_timer_init(&s->loop, &s->batch_timer);
    s->batch_timer.data = s;
    uv_signal_init(&s->loop, &s->sigterm);
    uv_signal_init(&s->loop, &s->sigint);
    s->recheck.data = s->stop_timer.data = s->sigterm.data = s->sigint.data = s;
    /* the admission's timer too, the passthrough's multi, and OAuth's */
    s->open_handles = 8 + (s->oauth != NULL);
    for (int i = 0; i < s->pg_count; i++) {
        struct pg_events events = {.name = i == 0 ? "mcp-listen" : "mcp",
                                   .data = s,
                                   .on_ready = on_pg_ready,
                                   .on_lost = on_pg_lost,
                                   .on_notify = i == 0 ? on_notify : NULL};
        s->pg[i] =
            pg_conn_new(&s->loop, cfg->db, statements, sizeof(statements) / sizeof(statements[0]),
                        i == 0 ? MCP_LISTEN_CHANNEL : NULL, cfg->connect_timeout_ms,
                        cfg->reconnect_max_ms, events);
        pg_conn_set_query_timeout(s->pg[i], MCP_LOOKUP_TIMEOUT_MS);
        s->open_handles++;
    }
    if (s->stdio_mode && s->stdio == NULL) {
        log_event(LOG_ERROR, "mcp_stdio_failed", "error", json_string(uv_strerror(uv_error)),
                  LOG_END);
        s->exit_code = 1;
        s->stopping = true;
        server_close(s);
    } else if (s->stdio_mode) {
        s->open_handles++;
        /* the token first (stdio_session_verify, once a connection is ready), then lines */
        for (int i = 0; i < s->pg_count; i++)
            pg_conn_start(s->pg[i]);
        uv_timer_start(&s->recheck, on_recheck, MCP_RECHECK_MS, MCP_RECHECK_MS);
        uv_signal_start(&s->sigterm, on_signal, SIGTERM);
        uv_signal_start(&s->sigint, on_signal, SIGINT);
    } else if (s->httpd == NULL) {
        log_event(LOG_ERROR, "mcp_listen_failed", "listen", json_string(cfg->mcp_listen), "error",
                  json_string(uv_strerror(uv_error)), LOG_END);
        s->exit_code = 1;
        s->stopping = true;
        server_close(s);
    } else {
        s->open_handles++;
        char where[80];
        httpd_format_address(httpd_address(s->httpd), where, sizeof(where));
        s->listen_port = httpd_port(s->httpd);
        size_t n = host_part(where, strlen(where));
        snprintf(s->listen_host, sizeof(s->listen_host), "%.*s", (int)n, where);
        log_event(LOG_INFO, "mcp_listening", "address", json_string(where), "port",
                  json_integer(s->listen_port), "wait_ms", json_integer(cfg->mcp_wait_ms),
                  "memory_bytes", json_integer(cfg->mcp_memory_bytes), "client_memory_bytes",
                  json_integer(cfg->mcp_client_memory_bytes), "client_calls",
                  json_integer(cfg->mcp_client_calls), "max_connections",
                  json_integer(cfg->mcp_max_connections), LOG_END);
        for (int i = 0; i < s->pg_count; i++)
            pg_conn_start(s->pg[i]);
        uv_timer_start(&s->recheck, on_recheck, MCP_RECHECK_MS, MCP_RECHECK_MS);
        uv_signal_start(&s->sigterm, on_signal, SIGTERM);
        uv_signal_start(&s->sigint, on_signal, SIGINT);
    }
    uv_run(&s->loop, UV_RUN_DEFAULT);
    log_batch_stop();
    uv_run(&s->loop, UV_RUN_DEFAULT); /* its close callback */
    int rc = uv_loop_close(&s->loop);
    if (rc != 0) {
        log_event(LOG_ERROR, "loop_not_closed", "error", json_string(uv_strerror(rc)), LOG_END);
        s->exit_code = s->exit_code ? s->exit_code : 1;
    }
    int exit_code = s->exit_code;
    free(s->pg);
    free(s->counts);
    for (size_t i = 0; i < sizeof(s->oauth_log) / sizeof(s->oauth_log[0]); i++)
        free((char *)s->oauth_log[i].reason);
    strbuf_free(&s->batch_keys);
    strbuf_free(&s->batch_tokens);
    free(s);
    tool_cache_free();
    return exit_code;
}
