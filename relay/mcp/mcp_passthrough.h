/*
 * mcp_passthrough.h — the front door calls a passthrough tool (0045:
 * outbox.mcp_tools.passthrough, a read-only tool of an 'mcp' target)
 * straight through: one tools/call to the upstream MCP server, on the
 * front door's loop, with no intent, no key and no saved outcome.
 *
 * Owns: a libcurl multi on the loop (lib/http_client.c), the upstream
 * session of each target it has called (mcp_upstream.h: the era, the
 * 2025-11-25 session id, the calls waiting for a setup), and the requests
 * in flight. The caller (mcp_server.c) owns its call and is told once, by
 * done, how it ended.
 */
#ifndef OUTBOX_MCP_PASSTHROUGH_H
#define OUTBOX_MCP_PASSTHROUGH_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

typedef struct passthrough passthrough_t;

/* What outbox.mcp_passthrough answered (borrowed: copied by the call). */
struct pt_target {
    const char *target, *upstream_tool, *url, *mcp_version, *auth_secret, *headers_json,
        *http_version, *ca_file, *client_cert_file, *client_key_file;
    long timeout_ms;
};

/* How a call ended; its label counts it (outbox_mcp_passthrough_calls_total). */
enum pt_result {
    PT_OK,          /* a result, isError false */
    PT_TOOL_ERROR,  /* a result, isError true: the tool said no */
    PT_RPC_ERROR,   /* a JSON-RPC error of the upstream (code, message) */
    PT_UNREACHABLE, /* no connection (refused, no such host) */
    PT_TIMEOUT,     /* no answer within the call's time */
    PT_TOO_LARGE,   /* an answer larger than the front door takes, or than the client's budget */
    PT_FAILED,      /* anything else: a broken answer, no secret, no session */
};
#define PT_RESULT_COUNT 7
extern const char *const pt_result_names[PT_RESULT_COUNT];

struct pt_outcome {
    enum pt_result result;
    json_t *value;       /* PT_OK, PT_TOOL_ERROR: the upstream's result (borrowed) */
    long code;           /* PT_RPC_ERROR */
    const char *message; /* PT_RPC_ERROR: the upstream's; else what failed, for the agent */
};

/* done: once (already from passthrough_call when nothing could be sent). charge: the
 * answer's bytes as they arrive; false stops the transfer (PT_TOO_LARGE). */
typedef void (*pt_done_cb)(void *data, const struct pt_outcome *o);
typedef bool (*pt_charge_cb)(void *data, size_t bytes);

/* ca_file: --ca-file (NULL or "": the system store), when the target has none. */
passthrough_t *passthrough_new(uv_loop_t *loop, const char *ca_file);
/* A tools/call of t's tool with arguments (the client's JSON text, an
 * object), answered within timeout_ms. */
void passthrough_call(passthrough_t *p, const struct pt_target *t, const char *arguments_json,
                      long timeout_ms, pt_charge_cb charge, pt_done_cb done, void *data);
/* Calls in flight end (done: PT_FAILED, the front door is stopping), then
 * everything closes; on_closed runs once p is freed. */
void passthrough_close(passthrough_t *p, void (*on_closed)(void *data), void *data);

/* The answer a call gets when it failed: JSON-RPC -32603 with this text
 * (what failed, that nothing was recorded, that a read may be retried). */
char *passthrough_failure_message(const struct pt_outcome *o);

#endif
