/*
 * mcp_server_internal.h — what the front door's transports share inside
 * relay/mcp/: a call, the server, and the functions that take a parsed
 * request to its answer. mcp_server.c owns them and the HTTP transport;
 * mcp_stdio_session.c is the stdio transport's session and uses them (the
 * dispatch is one, not a copy per transport). Not for use outside
 * relay/mcp/.
 */
#ifndef OUTBOX_MCP_SERVER_INTERNAL_H
#define OUTBOX_MCP_SERVER_INTERNAL_H

#include "config.h"
#include "lib/http_server.h"
#include "lib/metrics.h"
#include "lib/pg.h"
#include "lib/strbuf.h"
#include "mcp/mcp_admission.h"
#include "mcp/mcp_passthrough.h"
#include "mcp/mcp_protocol.h"
#include "mcp/mcp_stdio.h"
#include "mcp/oauth.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define MCP_MAX_BODY_BYTES (1024 * 1024) /* a POST body; a stdio line */

/* What a call is doing; one query of it is on the wire at most. */
enum call_step {
    STEP_AUTH,     /* initialize, ping, discover: is the token known? */
    STEP_LIST,     /* tools/list */
    STEP_TOOL,     /* tools/call: the tool and its schema */
    STEP_ENQUEUE,  /* tools/call: mcp_call */
    STEP_LOOKUP,   /* a waiting call (or task result) looks its outcome up */
    STEP_TASK,     /* tasks/get, tasks/result */
    STEP_TASKS,    /* tasks/list */
    STEP_CANCEL,   /* tasks/cancel */
    STEP_TASK_NOW, /* 2026: a wait ended without an outcome: make its task */
};

struct mcp_server;

struct mcp_call {
    struct mcp_call *prev, *next; /* in s->waiting while waiting */
    struct mcp_server *s;
    httpd_conn_t *conn; /* NULL once the connection closed (the call is orphaned) */
    bool on_stdio;      /* its answer is a line on stdout (until answered or cancelled) */
    bool watch;         /* stdio: no request, the watch of a task (stdio_session_watch_task) */
    bool settled;       /* the watch saw its task terminal and reads the task's row */
    pg_conn_t *pg;      /* of the query on the wire */
    struct mcp_request req;
    enum call_step step;
    bool querying, waiting, answered;
    bool passing;        /* a passthrough tool's upstream call is in flight (mcp_passthrough.c) */
    bool due;            /* waiting, and a wake-up asked for a look at its outcome */
    bool in_batch;       /* its intent is in the batched look-up on the wire */
    char token_hash[68]; /* "\x" + 64 hex digits */
    char *client, *tool, *key, *intent_key, *arguments_json, *traceparent, *run_id, *ordering_key,
        *task_id;
    /* key_source 'arguments' and no key in the call: "\x" + the SHA-256 of
     * the canonical arguments (json_schema_canonical); the key is the one
     * the database answers with (0040) */
    char *argument_hash;
    bool task;              /* legacy: params.task, answered with the task at once */
    bool blocking;          /* tasks/result (2025-11-25): waits until the task is terminal */
    bool sse;               /* the client accepts text/event-stream (a long wait streams) */
    long long task_ttl_ms;  /* -1: none asked */
    uint64_t started_ns;    /* the request arrived */
    uint64_t deadline_ms;   /* uv_now of the end of the wait */
    struct adm_client *adm; /* whose budget it is charged to (NULL: none) */
    size_t charged;         /* bytes charged to it now */
    bool admitted;          /* counted in its client's requests in flight */
    bool slim;              /* its parsed tree and body are gone (queued its enqueue) */
};

struct tool_count {
    char tool[129];
    char status[24];
    uint64_t n;
};

struct mcp_server {
    uv_loop_t loop;
    const struct config *cfg;
    httpd_t *httpd;
    pg_conn_t **pg;
    int pg_count, pg_next;
    uv_signal_t sigterm, sigint;
    uv_timer_t recheck, stop_timer;
    struct mcp_call *waiting;
    uv_timer_t batch_timer; /* runs the batched look-up of the calls woken in this loop turn */
    bool batch_scheduled, batch_running;
    struct strbuf batch_keys, batch_tokens; /* each call's intent key, and its token's hash */
    int calls;                              /* alive, orphaned ones too */
    int answering; /* inside respond_text: the last call's answer is not written yet */
    bool stopping, closing;
    int open_handles;
    int exit_code;
    char listen_host[64];
    int listen_port;

    /* /metrics */
    struct tool_count *counts;
    size_t count_len, count_cap;
    uint64_t refusals[10];
    struct metrics_histogram call_seconds;
    uint64_t wakeups[2]; /* waiting calls sent to look again: by NOTIFY, by the recheck */

    /* who may use memory, connections and the database (mcp_admission.c) */
    admission_t *adm;
    struct adm_rate refusal_log[10]; /* a line a second per reason */
    struct adm_rate shed_log;
    uint64_t shed[4]; /* by enum httpd_shed */

    /* --stdio: one client, the session of this process (mcp_stdio.c) */
    mcp_stdio_t *stdio;
    bool stdio_mode, stdio_verified, stdio_asked, stdio_out_failed;
    struct adm_client *stdio_client;
    struct adm_waiter stdio_waiter;
    char stdio_token_hash[68];
    char stdio_version[32]; /* the legacy version initialize negotiated ("": none yet) */
    uv_timer_t wait_timer;  /* stdio: the earliest end of a waiting call's wait */

    /* passthrough tools' calls to their upstreams (mcp_passthrough.c) */
    passthrough_t *pt;
    uint64_t pt_counts[PT_RESULT_COUNT];

    /* OAuth (oauth.c); NULL when --mcp-oauth-issuer is not set */
    oauth_t *oauth;
    struct oauth_log {
        const char *reason;
        struct adm_rate rate;
    } oauth_log[24]; /* a line a second per reason of a refused JWT */
};

/* Refusals by reason, for /metrics and the log. */
enum refusal {
    REFUSED_AUTH,
    REFUSED_HOST,
    REFUSED_ORIGIN,
    REFUSED_PROTOCOL,
    REFUSED_HEADERS,
    REFUSED_TOOL,
    REFUSED_KEY,
    REFUSED_ARGUMENTS,
    REFUSED_BUSY,      /* 429 or 503: a client's or the server's budget is used up */
    REFUSED_TOO_LARGE, /* 413: more memory than a client may hold */
};
#define REFUSAL_COUNT 10

/* ---- mcp_server.c: calls and their answers */

/* The JSON-RPC dispatch: a parsed request of an admitted client, whatever
 * carried it. request: the HTTP request (headers a method reads), NULL on
 * stdio. */
void mcp_dispatch(struct mcp_call *call, const struct httpd_request *request);
/* Answers a JSON-RPC error (err is cleared). */
void mcp_respond_error(struct mcp_call *call, struct mcp_error *err);
/* The call is done with its transport (answered, or its client went);
 * freed unless a statement of it is on the wire. */
void mcp_call_detach(struct mcp_call *call);
void mcp_call_free(struct mcp_call *call);
/* A statement of the call, in its client's fair queue. */
void mcp_call_query(struct mcp_call *call, const char *statement, int n, const char *const *v);
/* The wait is over: one last look answers the call. */
void mcp_call_final_lookup(struct mcp_call *call);
void mcp_log_call(struct mcp_call *call, const char *status);
/* Counted always, logged at most once a second per reason. */
void mcp_refuse_count(struct mcp_server *s, enum refusal reason, const char *detail);
/* What a budget refusal says, and its HTTP status (429, 503, 413). */
const char *mcp_busy_message(enum adm_refusal refusal, int *status);
/* Stops taking requests; waiting calls are answered; closes once all are gone. */
void mcp_server_stop(struct mcp_server *s, const char *why);
void mcp_server_maybe_close(struct mcp_server *s);

/* ---- mcp_stdio_session.c: the stdio transport's session */

/* stdin and stdout as the session's transport (NULL: *uv_error says why). */
mcp_stdio_t *stdio_session_open(struct mcp_server *s, int *uv_error);
/* Asks the database about OUTBOX_MCP_TOKEN once a connection is ready;
 * lines are read once it is a client's. */
void stdio_session_verify(struct mcp_server *s);
/* Holds lines back while the client's requests in flight are at the limit. */
void stdio_session_hold_update(struct mcp_server *s);
/* The timer to the earliest end of a stdio call's wait. */
void stdio_session_wait_rearm(struct mcp_server *s);
/* A 2025-11-25 task made on the session is watched until it is terminal;
 * its row then goes out as notifications/tasks/status. */
void stdio_session_watch_task(struct mcp_call *call, const struct mcp_answer *a);
void stdio_session_watch_answer(struct mcp_call *w, const struct mcp_answer *a);

#endif
