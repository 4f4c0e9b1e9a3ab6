/*
 * test_mcp_protocol.c — relay/mcp/mcp_protocol.h: the JSON-RPC error
 * messages the front door writes.
 *
 * JSON-RPC 2.0 (section 5) says an error carries the request's id, and
 * null when the id could not be read (a parse error, an invalid request):
 * a client matches answers to requests by it, and one with no id at all is
 * not a response. And what the front door shows of a target's answer or a
 * tool's schema carries their numbers as written (issue 35).
 */
#include "../unit.h"

#include "mcp/mcp_protocol.h"

#include <stdlib.h>
#include <string.h>

/* The error of a body that mcp_parse refuses, as the server writes it. */
static json_t *refusal(const char *body)
{
    struct mcp_request req;
    memset(&req, 0, sizeof(req));
    struct mcp_error err = {0};
    struct mcp_headers headers = {0};
    ck_assert(!mcp_parse(body, strlen(body), &headers, &req, &err));
    char *text = mcp_error_json(req.id, &err);
    json_t *msg = json_loads(text, 0, NULL);
    ck_assert_msg(msg != NULL, "not JSON: %s", text);
    free(text);
    mcp_error_clear(&err);
    mcp_request_free(&req);
    return msg;
}

START_TEST(unreadable_ids_are_null)
{
    static const char *const bodies[] = {
        "{not json",                                                  /* -32700 */
        "[]",                                                         /* a batch */
        "42",                                                         /* not an object */
        "{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"ping\"}",         /* not JSON-RPC 2.0 */
        "{\"jsonrpc\":\"2.0\",\"id\":{\"a\":1},\"method\":\"ping\"}", /* an id of no valid type */
        "{\"jsonrpc\":\"2.0\",\"id\":[1],\"method\":\"ping\"}",
    };
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        json_t *msg = refusal(bodies[i]);
        json_t *id = json_object_get(msg, "id");
        ck_assert_msg(id != NULL && json_is_null(id), "%s: the error has no \"id\": null",
                      bodies[i]);
        ck_assert(json_is_object(json_object_get(msg, "error")));
        ck_assert_str_eq(json_string_value(json_object_get(msg, "jsonrpc")), "2.0");
        json_decref(msg);
    }
}
END_TEST

/* stdio has no header layer (2026-07-28, stdio "Request Metadata"): a
 * modern request is judged by its _meta alone there, and a legacy one
 * speaks the version its session negotiated; over HTTP the same modern
 * body without headers is refused. */
START_TEST(stdio_has_no_header_layer)
{
    const char *modern = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{"
                         "\"name\":\"refund\",\"_meta\":{\"io.modelcontextprotocol/"
                         "protocolVersion\":\"2026-07-28\",\"io.modelcontextprotocol/"
                         "clientCapabilities\":{}}}}";
    struct mcp_request req;
    struct mcp_error err = {0};
    struct mcp_headers http = {0};
    ck_assert(!mcp_parse(modern, strlen(modern), &http, &req, &err));
    ck_assert_int_eq(err.code, MCP_HEADER_MISMATCH);
    mcp_error_clear(&err);
    mcp_request_free(&req);
    struct mcp_headers stdio = {.no_header_layer = true};
    ck_assert(mcp_parse(modern, strlen(modern), &stdio, &req, &err));
    ck_assert_int_eq(req.era, MCP_MODERN);
    mcp_request_free(&req);

    const char *old = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{"
                      "\"name\":\"refund\",\"_meta\":{\"io.modelcontextprotocol/"
                      "protocolVersion\":\"2025-11-25\",\"io.modelcontextprotocol/"
                      "clientCapabilities\":{}}}}";
    ck_assert(!mcp_parse(old, strlen(old), &stdio, &req, &err));
    ck_assert_int_eq(err.code, MCP_UNSUPPORTED_VERSION);
    mcp_error_clear(&err);
    mcp_request_free(&req);

    const char *legacy = "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}";
    struct mcp_headers session = {.no_header_layer = true, .protocol_version = "2025-11-25"};
    ck_assert(mcp_parse(legacy, strlen(legacy), &session, &req, &err));
    ck_assert_int_eq(req.era, MCP_LEGACY);
    ck_assert_str_eq(req.version, "2025-11-25");
    mcp_request_free(&req);
}
END_TEST

START_TEST(readable_ids_are_kept)
{
    json_t *msg = refusal("{\"jsonrpc\":\"2.0\",\"id\":\"r-7\"}"); /* no method */
    ck_assert_str_eq(json_string_value(json_object_get(msg, "id")), "r-7");
    json_decref(msg);
    msg = refusal("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\",\"params\":[]}");
    ck_assert_int_eq(json_integer_value(json_object_get(msg, "id")), 7);
    json_decref(msg);
    struct mcp_error err = {0};
    mcp_error_set(&err, MCP_INVALID_PARAMS, 200, "Invalid params: %s", "x");
    char *text = mcp_error_json(NULL, &err);
    ck_assert_str_eq(text, "{\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32602,\"message\":\"Invalid "
                           "params: x\"},\"id\":null}");
    free(text);
}
END_TEST

/* An MCP upstream's result (issue 36, item 4): the status block first, then
 * the upstream's content blocks; its structuredContent is the response; the
 * envelope is the same. A webhook's JSON is the response as before. */
START_TEST(upstream_result_in_the_answer)
{
    struct mcp_answer a = {
        .key = "k1",
        .target = "up",
        .status = "succeeded",
        .message = "succeeded",
        .response_status = 200,
        .response_body = "{\"content\":[{\"type\":\"text\",\"text\":\"ticket T-7 opened\"}],"
                         "\"structuredContent\":{\"ticket\":\"T-7\"},\"isError\":false}",
        .attempts = 1,
        .task_ttl_ms = -1,
    };
    json_t *r = mcp_call_result(&a, NULL);
    json_t *content = json_object_get(r, "content");
    ck_assert_int_eq(json_array_size(content), 2);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(content, 1), "text")),
                     "ticket T-7 opened");
    ck_assert(strncmp(json_string_value(json_object_get(json_array_get(content, 0), "text")),
                      "succeeded\n", 10) == 0);
    json_t *sc = json_object_get(r, "structuredContent");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(sc, "response"), "ticket")),
                     "T-7");
    ck_assert_str_eq(json_string_value(json_object_get(sc, "status")), "succeeded");
    ck_assert_str_eq(json_string_value(json_object_get(sc, "key")), "k1");
    ck_assert_int_eq(json_integer_value(json_object_get(sc, "attempts")), 1);
    ck_assert(json_is_false(json_object_get(r, "isError")));
    /* not final (a->final false): a relay behind us must not take it for the tool's outcome */
    ck_assert(json_is_false(json_object_get(json_object_get(r, "_meta"), "outbox-relay/final")));
    json_decref(r);
    a.final = true;
    r = mcp_call_result(&a, NULL);
    ck_assert(json_is_true(json_object_get(json_object_get(r, "_meta"), "outbox-relay/final")));
    json_decref(r);

    /* a webhook's answer: one block, the body as the response */
    a.response_body = "{\"content\":\"not blocks\",\"id\":3}";
    r = mcp_call_result(&a, NULL);
    ck_assert_int_eq(json_array_size(json_object_get(r, "content")), 1);
    sc = json_object_get(r, "structuredContent");
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(sc, "response"), "id")), 3);
    json_decref(r);
    json_t *v = json_loads("{\"content\":[],\"extra\":1}", 0, NULL);
    ck_assert(!mcp_is_upstream_result(v)); /* a member a result does not have */
    json_decref(v);
    v = json_loads("{\"content\":[],\"resultType\":\"complete\",\"_meta\":{}}", 0, NULL);
    ck_assert(mcp_is_upstream_result(v)); /* a 2026-07-28 result (a front door upstream) */
    json_decref(v);
    v = json_loads("{\"content\":[{\"text\":\"no type\"}]}", 0, NULL);
    ck_assert(!mcp_is_upstream_result(v));
    json_decref(v);
    v = json_loads("[1]", 0, NULL);
    ck_assert(!mcp_is_upstream_result(v));
    json_decref(v);
    ck_assert(!mcp_is_upstream_result(NULL));
}
END_TEST

/* A legacy tools/call request, as the front door parses it. */
static void legacy_request(struct mcp_request *req)
{
    static const char body[] = "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\","
                               "\"params\":{\"name\":\"refund\",\"arguments\":{\"amount\":19.99}}}";
    struct mcp_error err = {0};
    struct mcp_headers headers = {.protocol_version = "2025-11-25"};
    ck_assert(mcp_parse(body, strlen(body), &headers, req, &err));
}

/* The result of an answer whose saved response is body, as written. */
static char *call_result_text(const char *body)
{
    struct mcp_request req;
    legacy_request(&req);
    struct mcp_answer a = {.key = "k",
                           .target = "pay",
                           .status = "succeeded",
                           .message = "done",
                           .response_status = 200,
                           .response_body = body,
                           .attempts = 1,
                           .task_ttl_ms = -1};
    struct json_text *response = NULL;
    json_t *result = mcp_call_result(&a, &response);
    const struct json_text *docs[] = {response};
    char *text = mcp_result_json_docs(&req, result, docs, 1);
    json_text_decref(response);
    mcp_request_free(&req);
    ck_assert_ptr_nonnull(text);
    return text;
}

/* A target's 19.99 is shown to the agent as 19.99 (jansson wrote
 * 19.989999999999998), in structuredContent.response and in the text
 * block; numbers jansson cannot read (past 2^63, 1e400) no longer turn the
 * response into a string. */
START_TEST(a_targets_numbers_come_back_as_written)
{
    char *text = call_result_text("{\"refunded\": 19.99, \"big\": 123456789012345678901234567890, "
                                  "\"tiny\": 1e-7, \"huge\": 1e400}");
    ck_assert_msg(strstr(text, "\"response\":{\"refunded\":19.99,\"big\":"
                               "123456789012345678901234567890,\"tiny\":1e-7,\"huge\":1e400}"),
                  "structuredContent.response: %s", text);
    ck_assert_msg(strstr(text, "\\\"response\\\":{\\\"big\\\":123456789012345678901234567890,"
                               "\\\"huge\\\":1e400,\\\"refunded\\\":19.99,\\\"tiny\\\":1e-7}"),
                  "the text block: %s", text);
    ck_assert_msg(strstr(text, "19.98999") == NULL, "%s", text);
    struct json_text *msg = json_text_parse(text, strlen(text), 0, NULL, 0, NULL);
    ck_assert_msg(msg != NULL, "not JSON: %s", text);
    ck_assert_int_eq(json_integer_value(json_object_get(msg->root, "id")), 3);
    json_text_decref(msg);
    free(text);
    /* one jansson could read, and rewrote */
    text = call_result_text("{\"refunded\": 19.99}");
    ck_assert_msg(strstr(text, "\"response\":{\"refunded\":19.99}") &&
                      strstr(text, "\\\"response\\\":{\\\"refunded\\\":19.99}"),
                  "%s", text);
    free(text);
    /* a response that is not JSON is its text, as before */
    text = call_result_text("refunded 19.99");
    ck_assert_msg(strstr(text, "\"response\":\"refunded 19.99\""), "%s", text);
    free(text);
}
END_TEST

/* tools/list shows a schema's numbers as its author wrote them. */
START_TEST(a_schemas_numbers_are_listed_as_written)
{
    struct mcp_request req;
    legacy_request(&req);
    static const char schema_text[] =
        "{\"type\": \"object\", \"properties\": {\"amount\": {\"type\": \"number\", "
        "\"maximum\": 19.99, \"multipleOf\": 0.01}}}";
    struct json_text *schema = json_text_parse(schema_text, strlen(schema_text), 0, NULL, 0, NULL);
    ck_assert_ptr_nonnull(schema);
    json_t *tools = json_array();
    json_array_append_new(
        tools, mcp_tool_json(&req, "refund", NULL, "Refund.", schema->root, false, true));
    const struct json_text *docs[] = {schema};
    char *text = mcp_result_json_docs(&req, json_pack("{s:o}", "tools", tools), docs, 1);
    ck_assert_msg(strstr(text, "\"inputSchema\":{\"type\":\"object\",\"properties\":{\"amount\":{"
                               "\"type\":\"number\",\"maximum\":19.99,\"multipleOf\":0.01}}}"),
                  "%s", text);
    free(text);
    json_text_decref(schema);
    mcp_request_free(&req);
}
END_TEST

/* A passthrough tool (0045) is listed read-only and idempotent, without the front door's
 * outputSchema (its result is the upstream's) and without task support. */
START_TEST(a_passthrough_tool_is_listed_as_a_read)
{
    struct mcp_request req;
    legacy_request(&req);
    json_t *schema = json_pack("{s:s}", "type", "object");
    json_t *tool =
        mcp_tool_json(&req, "get", NULL, "Read. " MCP_PASSTHROUGH_SENTENCE, schema, true, true);
    ck_assert_ptr_nonnull(json_object_get(tool, "outputSchema"));
    mcp_tool_set_passthrough(tool);
    json_t *annotations = json_object_get(tool, "annotations");
    ck_assert(json_is_true(json_object_get(annotations, "readOnlyHint")));
    ck_assert(json_is_true(json_object_get(annotations, "idempotentHint")));
    ck_assert(json_is_false(json_object_get(annotations, "destructiveHint")));
    ck_assert_ptr_null(json_object_get(tool, "outputSchema"));
    ck_assert_ptr_null(json_object_get(tool, "execution"));
    ck_assert_msg(strstr(json_string_value(json_object_get(tool, "description")),
                         "no idempotency key is needed"),
                  "%s", json_string_value(json_object_get(tool, "description")));
    json_decref(tool);
    json_decref(schema);
    mcp_request_free(&req);
}
END_TEST

Suite *mcp_protocol_suite(void)
{
    Suite *s = suite_create("mcp_protocol");
    TCase *tc = tcase_create("errors");
    tcase_add_test(tc, unreadable_ids_are_null);
    tcase_add_test(tc, readable_ids_are_kept);
    tcase_add_test(tc, stdio_has_no_header_layer);
    tcase_add_test(tc, upstream_result_in_the_answer);
    tcase_add_test(tc, a_passthrough_tool_is_listed_as_a_read);
    suite_add_tcase(s, tc);
    TCase *tn = tcase_create("numbers");
    tcase_add_test(tn, a_targets_numbers_come_back_as_written);
    tcase_add_test(tn, a_schemas_numbers_are_listed_as_written);
    suite_add_tcase(s, tn);
    return s;
}
