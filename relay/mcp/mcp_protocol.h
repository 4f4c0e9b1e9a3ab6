/*
 * mcp_protocol.h — the Model Context Protocol as the front door speaks it:
 * JSON-RPC messages in, results and errors out, for both protocol eras
 * (2025-11-25 with initialize; 2026-07-28 with a _meta envelope on every
 * request), chosen per request. Pure: no I/O, no database; what a call
 * answers comes in as a struct mcp_answer (a row of outbox.mcp_answer).
 *
 * What it owns: parsing and checking a request (JSON-RPC shape, the era,
 * the _meta envelope, the MCP-Protocol-Version / Mcp-Method / Mcp-Name
 * headers against the body), the error of each refusal with its JSON-RPC
 * code and HTTP status, and the JSON of every result the front door sends
 * (initialize, server/discover, a tool of tools/list, a tools/call result,
 * a task). What it does not own: routes, tokens, the database, waiting
 * (relay/mcp/mcp_server.c).
 */
#ifndef OUTBOX_MCP_PROTOCOL_H
#define OUTBOX_MCP_PROTOCOL_H

#include "lib/json_text.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define MCP_MODERN_VERSION "2026-07-28"
#define MCP_LEGACY_LATEST "2025-11-25"
/* What a request without MCP-Protocol-Version is taken to speak (legacy). */
#define MCP_LEGACY_DEFAULT "2025-03-26"

#define MCP_META_VERSION "io.modelcontextprotocol/protocolVersion"
#define MCP_META_CAPABILITIES "io.modelcontextprotocol/clientCapabilities"
#define MCP_META_SERVER_INFO "io.modelcontextprotocol/serverInfo"
#define MCP_TASKS_EXTENSION "io.modelcontextprotocol/tasks"
#define MCP_META_RELATED_TASK "io.modelcontextprotocol/related-task"
/* In a tools/call result's _meta: whether the call's outcome is final. A
 * relay whose MCP target is a front door (relay/mcp_upstream.c,
 * UPSTREAM_META_FINAL) does not take a result that is not final for the
 * tool's: it asks again with the same key. */
#define MCP_META_FINAL "outbox-relay/final"
#define MCP_META_KEY "outbox-relay/idempotency-key"
#define MCP_META_RUN_ID "outbox-relay/run-id"
#define MCP_META_ORDERING_KEY "outbox-relay/ordering-key"

/* JSON-RPC and MCP error codes. */
#define MCP_PARSE_ERROR -32700
#define MCP_INVALID_REQUEST -32600
#define MCP_METHOD_NOT_FOUND -32601
#define MCP_INVALID_PARAMS -32602
#define MCP_INTERNAL_ERROR -32603
#define MCP_HEADER_MISMATCH -32020
#define MCP_UNSUPPORTED_VERSION -32022

enum mcp_era {
    MCP_LEGACY, /* 2025-11-25 and earlier: initialize, MCP-Protocol-Version header */
    MCP_MODERN, /* 2026-07-28: _meta on every request, resultType on every result */
};

/* A parsed request; the pointers borrow from root, which doc owns (a
 * slimmed request, adm_request_slim, has no doc and owns root itself). */
struct mcp_request {
    struct json_text *doc; /* the tree and the exact text of its numbers */
    json_t *root;
    /* params.arguments as the client wrote it (a copy of its bytes; NULL
     * when absent): what is enqueued, never a re-serialisation, so that
     * 19.99 reaches the target as 19.99 */
    char *arguments_text;
    size_t arguments_len;
    size_t arguments_texts_start, arguments_texts_end; /* its numbers in doc (json_text_span) */
    json_t *id;                                        /* NULL: a notification */
    const char *method; /* NULL only for a client's response (legacy: accepted and dropped) */
    json_t *params;     /* an object or NULL */
    json_t *meta;       /* params._meta, an object or NULL */
    enum mcp_era era;
    const char *version;  /* the protocol version this request speaks (in root or version_buf) */
    char version_buf[64]; /* a legacy version from the header */
    bool tasks_extension; /* modern: the client declared io.modelcontextprotocol/tasks */
};

/* A refusal: the JSON-RPC error and the HTTP status that carries it. */
struct mcp_error {
    int code;
    int http_status;
    char message[400];
    json_t *data; /* owned; NULL when none */
};

/* The headers that must agree with the body (NULL when absent). */
struct mcp_headers {
    const char *protocol_version;
    const char *method;
    const char *name;
    /* stdio: there is no header layer (2026-07-28, stdio "Request
     * Metadata"): a modern request is judged by its _meta alone, and
     * protocol_version is the legacy version initialize negotiated. */
    bool no_header_layer;
};

/* The outcome of a call, a row of outbox.mcp_answer. Strings are owned by
 * whoever filled it (the server copies them from the database row). */
struct mcp_answer {
    const char *key, *intent_key, *tool, *target, *status, *state, *message;
    bool final, inserted;
    int response_status; /* 0: none */
    const char *response_body;
    int attempts;                /* -1: not known (a pruned intent) */
    const char *conflict_fields; /* a PostgreSQL text[] literal, or NULL */
    const char *task_id, *task_created_at, *task_updated_at; /* ISO 8601 or NULL */
    long long task_ttl_ms;                                   /* -1: none */
};

void mcp_request_free(struct mcp_request *req);
void mcp_error_clear(struct mcp_error *err);
void mcp_error_set(struct mcp_error *err, int code, int http_status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Parses one HTTP body into a request (lib/json_text.h: the numbers keep
 * their text, params.arguments its bytes): false with err set for a body
 * that is not JSON (-32700; also a key twice in one object, or \u0000 in a
 * string, which jsonb cannot hold), a batch (400, -32600), or not a JSON-RPC 2.0
 * request, notification or response (-32600). Then decides its era and
 * checks the modern envelope and the headers (-32602, -32020, -32022, all
 * with 400). */
bool mcp_parse(const char *body, size_t len, const struct mcp_headers *headers,
               struct mcp_request *req, struct mcp_error *err);

/* The text of params.arguments to enqueue ("{}" when absent), checked for
 * what PostgreSQL's jsonb would refuse: arguments that are not an object,
 * a number its numeric cannot hold (1e-20000, 1e200000). False with err set
 * (-32602, HTTP 200, saying which number and why). The text is borrowed
 * from req (req->arguments_text, which the caller may take over). */
bool mcp_arguments_text(const struct mcp_request *req, const char **text, size_t *len,
                        struct mcp_error *err);

/* Is this legacy protocol version one the front door speaks? */
bool mcp_legacy_version_supported(const char *version);

/* {"jsonrpc":"2.0","id":…,"result":result}: a modern result gets resultType
 * (unless it has one) and _meta's serverInfo. Takes result. Written by
 * json_text_dumps: a number node of the request's document (req->doc) or of
 * docs[0..ndocs) (a tool's schema, a target's response) is written as its
 * text, so an agent's or a target's 19.99 is shown as 19.99. */
char *mcp_result_json_docs(const struct mcp_request *req, json_t *result,
                           const struct json_text *const *docs, size_t ndocs);
char *mcp_result_json(const struct mcp_request *req, json_t *result); /* no other document */
/* {"jsonrpc":"2.0","id":…,"error":{code, message, data}} ("id": null when
 * the request's could not be read). */
char *mcp_error_json(const json_t *id, const struct mcp_error *err);

/* The sentence the front door appends to the description of a tool whose
 * key_source is 'arguments' (malloc'd): calling again with the same
 * arguments within the window (window_s seconds, from the first call)
 * returns the first call's outcome; and how to ask for a second, identical
 * action on purpose: a new value of reference (json_schema_reference_property)
 * when the schema has one. */
char *mcp_arguments_key_sentence(double window_s, const char *reference);

json_t *mcp_initialize_result(const struct mcp_request *req, const char *server_version);
json_t *mcp_discover_result(const char *server_version);
/* One entry of tools/list. input_schema is borrowed (a reference taken: its
 * nodes are shared, so that the result, written with the schema's document,
 * shows its numbers as written). idempotent:
 * annotations.idempotentHint (false for a tool whose keys the server mints). */
json_t *mcp_tool_json(const struct mcp_request *req, const char *name, const char *title,
                      const char *description, const json_t *input_schema, bool destructive,
                      bool idempotent);
/* What tools/list says of a passthrough tool (0045), after its own description. */
#define MCP_PASSTHROUGH_SENTENCE                                                                   \
    "This tool is a read passed straight through to the upstream MCP server: no idempotency key "  \
    "is needed (a key in _meta is ignored), nothing is recorded and no outcome is saved; calling " \
    "it again reads again."
/* A passthrough tool's entry: read-only and idempotent, with no
 * outputSchema (its result is the upstream's) and no task support. */
void mcp_tool_set_passthrough(json_t *tool);
/* The CallToolResult of an answer: structuredContent {status, key, target,
 * response_status, response, attempts, message}; a text block that starts
 * with the message (written for the model), then a line break and the same
 * JSON; isError for failed, cancelled and key_conflict. The response is the
 * saved body parsed (lib/json_text.h) when it is JSON, else its text: the
 * text block carries its numbers as the target wrote them, and *response_doc
 * is set to the parsed body's document (NULL when none), which the caller
 * passes to mcp_result_json_docs so that structuredContent.response does
 * too, then releases (json_text_decref). */
json_t *mcp_call_result(const struct mcp_answer *answer, struct json_text **response_doc);
/* Whether a saved response (parsed) is an MCP tools/call result (what the
 * relay saves for an 'mcp' target): mcp_call_result then puts its content
 * blocks after the status block and its structuredContent in
 * structuredContent.response. */
bool mcp_is_upstream_result(const json_t *response);
/* A CallToolResult with isError that names what is wrong (the model reads it). */
json_t *mcp_tool_error_result(const char *status, const char *key, const char *message,
                              json_t *details);
/* The Task object of an answer: taskId, status, statusMessage, createdAt,
 * lastUpdatedAt, and ttl / pollInterval (legacy) or ttlMs / pollIntervalMs
 * (modern). */
json_t *mcp_task_json(const struct mcp_answer *answer, enum mcp_era era);
/* The task status of an outbox status: working, completed, failed (legacy;
 * modern says completed with result.isError), cancelled. Never failed for
 * what may have executed. */
const char *mcp_task_status(const struct mcp_answer *answer, enum mcp_era era);

/* params.name / params.arguments of tools/call, and the like: NULL when
 * absent or of the wrong type. */
const char *mcp_param_string(const struct mcp_request *req, const char *name);
const char *mcp_meta_string(const struct mcp_request *req, const char *name);

#endif
