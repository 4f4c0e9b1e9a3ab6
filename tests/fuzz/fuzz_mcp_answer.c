/*
 * fuzz_mcp_answer — what an MCP upstream sends back to a tools/call
 * (relay/mcp_upstream.c:upstream_read_answer), as JSON and as an event
 * stream, and the class outcome_classify_mcp gives it.
 *
 * Input: byte 0 picks the content type (bit 0: text/event-stream) and the
 * id looked for (the rest of the byte); the rest is the body.
 * Properties: the answer's kind is one of the four; a result or a tool error
 * has its result as JSON that parses to an object; an RPC error has a
 * message; only a result is classified succeeded, and only a tool error or
 * one of the four "not executed" codes permanent.
 */
#include "fuzz.h"

#include "mcp_upstream.h"
#include "outcome.h"

#include <jansson.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *type = data[0] & 1 ? "text/event-stream" : "application/json";
    long long id = data[0] >> 1;
    char *body = fuzz_strndup(data + 1, size - 1);
    struct upstream_answer a;
    upstream_read_answer(type, body, size - 1, id, &a);
    FUZZ_CHECK(a.kind >= MCP_ANSWER_NONE && a.kind <= MCP_ANSWER_RPC_ERROR);
    if (a.kind == MCP_ANSWER_RESULT || a.kind == MCP_ANSWER_TOOL_ERROR) {
        FUZZ_CHECK(a.result != NULL);
        json_t *r = json_loads(a.result, 0, NULL);
        FUZZ_CHECK(json_is_object(r));
        json_decref(r);
    }
    if (a.kind == MCP_ANSWER_RPC_ERROR)
        FUZZ_CHECK(a.text != NULL);
    struct attempt_facts f = {.transport = TRANSPORT_COMPLETE, .http_status = 200, .mcp = true,
                              .mcp_answer = a.kind, .rpc_code = a.code};
    enum attempt_class cls = outcome_classify(&f);
    FUZZ_CHECK((cls == CLASS_SUCCEEDED) == (a.kind == MCP_ANSWER_RESULT));
    if (cls == CLASS_PERMANENT_FAILURE)
        FUZZ_CHECK(a.kind == MCP_ANSWER_TOOL_ERROR ||
                   (a.kind == MCP_ANSWER_RPC_ERROR && outcome_rpc_code_not_executed(a.code)));
    upstream_answer_free(&a);
    free(body);
    return 0;
}
