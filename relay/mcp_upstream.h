/*
 * mcp_upstream.h — the relay as an MCP client: an intent for an 'mcp'
 * target (outbox.targets.protocol) goes out as that server's tools/call.
 *
 * Two parts. Pure ones (unit tested, tests/unit/test_mcp_upstream.c): the
 * bodies of tools/call, server/discover, initialize and
 * notifications/initialized in either era, and reading an answer (JSON or
 * an event stream) into what outcome_classify_mcp needs. And the session of
 * a target (struct upstream_session, one per target and relay): which era
 * the upstream speaks, its Mcp-Session-Id, and the calls waiting while the
 * session is being set up. Setting up is requests of their own on the
 * relay's libcurl multi (DELIVERY_MCP_SETUP); a call waits for them in the
 * session's list, never on the loop.
 */
#ifndef OUTBOX_MCP_UPSTREAM_H
#define OUTBOX_MCP_UPSTREAM_H

#include <curl/curl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "outcome.h"

#define UPSTREAM_MODERN_VERSION "2026-07-28"
#define UPSTREAM_LEGACY_VERSION "2025-11-25"
#define UPSTREAM_META_VERSION "io.modelcontextprotocol/protocolVersion"
#define UPSTREAM_META_CAPABILITIES "io.modelcontextprotocol/clientCapabilities"
#define UPSTREAM_META_CLIENT_INFO "io.modelcontextprotocol/clientInfo"
#define UPSTREAM_META_KEY "outbox-relay/idempotency-key"
/* In a result's _meta: false when the upstream is a gateway whose own call
 * is not final yet (our front door, MCP_META_FINAL in mcp/mcp_protocol.h). */
#define UPSTREAM_META_FINAL "outbox-relay/final"
/* The JSON-RPC id of a session's setup requests; a call's id is its intent's (>= 1). */
#define UPSTREAM_SETUP_ID 0

struct delivery;

/* targets.mcp_version */
enum upstream_pref { UPSTREAM_AUTO, UPSTREAM_PREF_MODERN, UPSTREAM_PREF_LEGACY };
enum upstream_pref upstream_pref_parse(const char *text);

enum upstream_era { UPSTREAM_ERA_UNKNOWN, UPSTREAM_ERA_MODERN, UPSTREAM_ERA_LEGACY };
enum upstream_state { UPSTREAM_NONE, UPSTREAM_SETTING_UP, UPSTREAM_READY };
enum upstream_step { UPSTREAM_DISCOVER, UPSTREAM_INITIALIZE, UPSTREAM_INITIALIZED };

struct upstream_session {
    enum upstream_state state;
    enum upstream_era era;
    char *session_id;                        /* legacy: the server's Mcp-Session-Id; NULL: none */
    char *version;                           /* legacy: the version initialize agreed on */
    struct delivery *waiting, *waiting_tail; /* calls waiting for the setup (mcp_next) */
    struct delivery *setup;                  /* the setup request in flight, or NULL */
};

/* ------------------------------------------------------------------ pure */

struct upstream_answer {
    enum mcp_answer_kind kind;
    long code;           /* MCP_ANSWER_RPC_ERROR */
    char *text;          /* the result's text blocks, or the error's message; NULL: none */
    char *result;        /* the result as compact JSON; NULL: none */
    int server_requests; /* requests of the server seen on the stream (answered as they came) */
    int executed;        /* a result's structuredContent.executed: 1, 0, -1 not a boolean */
};

/* The body of tools/call for payload ({"tool": NAME, "arguments": {...}},
 * as enqueue checked): params.name, params.arguments, and params._meta with
 * the key (none when key is NULL: a status tool's call) (and, modern, the protocol version, client
 * capabilities and info). *tool_out gets the tool's name (caller frees). NULL when the payload is
 * not of that shape. */
char *upstream_call_body(enum upstream_era era, const char *payload, const char *key, long long id,
                         char **tool_out);
/* The body of a setup request (id UPSTREAM_SETUP_ID; the notification has none). */
char *upstream_setup_body(enum upstream_step step);
/* The body of tools/list (one page: cursor NULL for the first), with the
 * _meta envelope in the modern era (outbox-relay mcp-import, cli/mcp_import.c). */
char *upstream_list_body(enum upstream_era era, const char *cursor, long long id);
/* A header value as the 2026 transport wants it: the text if it is
 * printable ASCII, else "=?base64?<base64 of its UTF-8>?=". Caller frees. */
char *upstream_header_value(const char *text);
/* Reads the JSON-RPC response with this id from an answer: one JSON
 * message (or a batch) for application/json, the data of each event for
 * text/event-stream (notifications are skipped, requests of the server
 * counted). */
void upstream_read_answer(const char *content_type, const char *body, size_t len, long long id,
                          struct upstream_answer *a);
void upstream_answer_free(struct upstream_answer *a);
/* The requests of the server (sampling, elicitation, roots/list: an
 * object with "method" and an "id") in the complete events of an event
 * stream, from offset from on: each is answered, through reply(ctx, body),
 * with the JSON-RPC error the relay POSTs back (upstream_refusal_body).
 * Returns the offset after the last complete event (the next call's from). */
size_t upstream_scan_requests(const char *buf, size_t len, size_t from,
                              void (*reply)(void *ctx, const char *body), void *ctx);
/* The error response to a request of the server: -32601, saying that the
 * gateway has no host, model or user to ask. Caller frees. */
char *upstream_refusal_body(const json_t *id, const char *method);
/* server/discover's result lists 2026-07-28 among supportedVersions. */
bool upstream_discover_says_modern(const struct upstream_answer *a);
/* initialize's result's protocolVersion (caller frees), or NULL. */
char *upstream_initialize_version(const struct upstream_answer *a);

/* ------------------------------------------------------------------ session */

/* The session's part that is no one's delivery, shared by the relay (the
 * functions below) and the front door's passthrough calls
 * (mcp/mcp_passthrough.c), each with its own requests on its own multi. */
enum upstream_begin {
    UPSTREAM_GO,     /* the session is ready: the call goes now */
    UPSTREAM_WAIT,   /* a setup is in flight: the call waits for it */
    UPSTREAM_SET_UP, /* the call waits, and *first is the setup request to send */
};
/* A call to a session whose target prefers pref (a 2026-07-28 target is
 * ready at once). UPSTREAM_SET_UP sets the session SETTING_UP: a caller
 * that cannot send *first sets it back to UPSTREAM_NONE. */
enum upstream_begin upstream_begin(struct upstream_session *s, enum upstream_pref pref,
                                   enum upstream_step *first);
/* A setup request's answer, read into the session. transport_error: why no
 * complete HTTP answer came (NULL: one did, with http_status, its
 * Content-Type, body and Mcp-Session-Id header). UPSTREAM_NEXT: *next is
 * the step to send (the session stays SETTING_UP); otherwise the session is
 * READY (UPSTREAM_READY_V) or NONE again, and why says what failed. */
enum upstream_verdict {
    UPSTREAM_NEXT,    /* *next: the next setup request, to be put on the multi */
    UPSTREAM_READY_V, /* the session is ready: send the waiting calls */
    UPSTREAM_UNSENT,  /* the setup failed before an answer: the calls go back, not sent */
    UPSTREAM_REFUSED, /* the upstream refused initialize: the calls are not executed */
};
enum upstream_verdict upstream_setup_answer(struct upstream_session *s, enum upstream_step step,
                                            const char *transport_error, long http_status,
                                            const char *content_type, const char *body, size_t len,
                                            const char *session_id, enum upstream_step *next,
                                            char *why, size_t why_size);
/* "Name: value" appended (aborts when curl cannot allocate, as the relay does). */
struct curl_slist *upstream_add_header(struct curl_slist *h, const char *name, const char *value);
/* The MCP headers of a setup step in session s (MCP-Protocol-Version,
 * Mcp-Method, Mcp-Session-Id), and of a tools/call of tool (the upstream's
 * name): the 2026 ones, or the session's version and id. */
struct curl_slist *upstream_setup_headers(struct curl_slist *h, const struct upstream_session *s,
                                          enum upstream_step step);
struct curl_slist *upstream_call_headers(struct curl_slist *h, const struct upstream_session *s,
                                         const char *tool);

/* A call to t's session: true when it may go now (the session is ready;
 * delivery_mcp_prepare then builds it); false when it waits in the list,
 * and then *setup is a setup request the caller puts on the multi (NULL
 * when one is already in flight, or none could be made: then the call is
 * not queued and *setup_failed is set). */
bool upstream_take(struct upstream_session *s, struct delivery *d, struct delivery **setup,
                   bool *setup_failed);
/* Takes a waiting call out of the list (it ended without being sent). */
void upstream_forget(struct upstream_session *s, struct delivery *d);

/* After a setup request ended (result, as libcurl said): the next step.
 * why gets the error of UPSTREAM_UNSENT or UPSTREAM_REFUSED. The setup
 * delivery is freed here. */
enum upstream_verdict upstream_setup_done(struct upstream_session *s, struct delivery *setup,
                                          CURLcode result, struct delivery **next, char *why,
                                          size_t why_size);
/* Takes the waiting calls (a list through mcp_next) out of the session. */
struct delivery *upstream_take_waiting(struct upstream_session *s);
/* Forgets the session (a 404 to its id, a changed url or version). */
void upstream_reset(struct upstream_session *s);
void upstream_session_free(struct upstream_session *s);

#endif
