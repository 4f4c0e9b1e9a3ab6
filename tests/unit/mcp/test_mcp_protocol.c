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

Suite *mcp_protocol_suite(void)
{
    Suite *s = suite_create("mcp_protocol");
    TCase *tc = tcase_create("errors");
    tcase_add_test(tc, unreadable_ids_are_null);
    tcase_add_test(tc, readable_ids_are_kept);
    suite_add_tcase(s, tc);
    return s;
}
