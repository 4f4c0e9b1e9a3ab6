/*
 * test_mcp_protocol.c — relay/mcp/mcp_protocol.h: the JSON-RPC error
 * messages the front door writes.
 *
 * JSON-RPC 2.0 (section 5) says an error carries the request's id, and
 * null when the id could not be read (a parse error, an invalid request):
 * a client matches answers to requests by it, and one with no id at all is
 * not a response.
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
    json_t *r = mcp_call_result(&a);
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
    json_decref(r);

    /* a webhook's answer: one block, the body as the response */
    a.response_body = "{\"content\":\"not blocks\",\"id\":3}";
    r = mcp_call_result(&a);
    ck_assert_int_eq(json_array_size(json_object_get(r, "content")), 1);
    sc = json_object_get(r, "structuredContent");
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(sc, "response"), "id")), 3);
    json_decref(r);
    json_t *v = json_loads("{\"content\":[],\"extra\":1}", 0, NULL);
    ck_assert(!mcp_is_upstream_result(v)); /* a member a result does not have */
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

Suite *mcp_protocol_suite(void)
{
    Suite *s = suite_create("mcp_protocol");
    TCase *tc = tcase_create("errors");
    tcase_add_test(tc, unreadable_ids_are_null);
    tcase_add_test(tc, readable_ids_are_kept);
    tcase_add_test(tc, upstream_result_in_the_answer);
    suite_add_tcase(s, tc);
    return s;
}
