/*
 * test_mcp_upstream.c — relay/mcp_upstream.h's pure parts: the bodies of
 * tools/call, of tools/list (mcp-import) and of a session's setup in either era, the Mcp-Name
 * header value, and reading an answer (JSON, a batch, an event stream with notifications and a
 * request of the server before the response), and the session's steps the relay and the front
 * door's passthrough calls share (upstream_begin, upstream_setup_answer, the headers).
 */
#include "unit.h"

#include "mcp_upstream.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static json_t *parse(const char *text)
{
    json_t *j = json_loads(text, 0, NULL);
    ck_assert_ptr_nonnull(j);
    return j;
}

START_TEST(call_body_legacy)
{
    char *tool = NULL;
    char *body = upstream_call_body(
        UPSTREAM_ERA_LEGACY, "{\"tool\": \"create\", \"arguments\": {\"a\": 1}}", "k-1", 42, &tool);
    ck_assert_str_eq(tool, "create");
    json_t *j = parse(body);
    ck_assert_str_eq(json_string_value(json_object_get(j, "method")), "tools/call");
    ck_assert_int_eq(json_integer_value(json_object_get(j, "id")), 42);
    json_t *params = json_object_get(j, "params");
    ck_assert_str_eq(json_string_value(json_object_get(params, "name")), "create");
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(params, "arguments"), "a")),
                     1);
    json_t *meta = json_object_get(params, "_meta");
    ck_assert_str_eq(json_string_value(json_object_get(meta, UPSTREAM_META_KEY)), "k-1");
    ck_assert_ptr_null(json_object_get(meta, UPSTREAM_META_VERSION)); /* no envelope in 2025 */
    json_decref(j);
    free(body);
    free(tool);
}
END_TEST

START_TEST(call_body_modern_has_the_envelope)
{
    char *tool = NULL;
    char *body = upstream_call_body(UPSTREAM_ERA_MODERN, "{\"tool\": \"t\", \"arguments\": {}}",
                                    "k", 7, &tool);
    json_t *j = parse(body);
    json_t *meta = json_object_get(json_object_get(j, "params"), "_meta");
    ck_assert_str_eq(json_string_value(json_object_get(meta, UPSTREAM_META_VERSION)),
                     UPSTREAM_MODERN_VERSION);
    ck_assert(json_is_object(json_object_get(meta, UPSTREAM_META_CAPABILITIES)));
    ck_assert(json_is_object(json_object_get(meta, UPSTREAM_META_CLIENT_INFO)));
    ck_assert_str_eq(json_string_value(json_object_get(meta, UPSTREAM_META_KEY)), "k");
    json_decref(j);
    free(body);
    free(tool);
}
END_TEST

START_TEST(call_body_refuses_other_payloads)
{
    char *tool = (char *)"x";
    ck_assert_ptr_null(upstream_call_body(UPSTREAM_ERA_LEGACY, "{\"a\": 1}", "k", 1, &tool));
    ck_assert_ptr_null(tool);
    ck_assert_ptr_null(
        upstream_call_body(UPSTREAM_ERA_LEGACY, "{\"tool\": 1, \"arguments\": {}}", "k", 1, &tool));
    ck_assert_ptr_null(upstream_call_body(UPSTREAM_ERA_LEGACY, "not json", "k", 1, &tool));
}
END_TEST

START_TEST(setup_bodies)
{
    char *b = upstream_setup_body(UPSTREAM_DISCOVER);
    json_t *j = parse(b);
    ck_assert_str_eq(json_string_value(json_object_get(j, "method")), "server/discover");
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(json_object_get(j, "params"), "_meta"),
                                          UPSTREAM_META_VERSION)),
        UPSTREAM_MODERN_VERSION);
    json_decref(j);
    free(b);
    b = upstream_setup_body(UPSTREAM_INITIALIZE);
    j = parse(b);
    ck_assert_str_eq(json_string_value(json_object_get(j, "method")), "initialize");
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(j, "params"), "protocolVersion")),
        UPSTREAM_LEGACY_VERSION);
    json_decref(j);
    free(b);
    b = upstream_setup_body(UPSTREAM_INITIALIZED);
    j = parse(b);
    ck_assert_str_eq(json_string_value(json_object_get(j, "method")), "notifications/initialized");
    ck_assert_ptr_null(json_object_get(j, "id")); /* a notification */
    json_decref(j);
    free(b);
}
END_TEST

START_TEST(list_bodies)
{
    char *b = upstream_list_body(UPSTREAM_ERA_LEGACY, NULL, 1);
    json_t *j = parse(b);
    ck_assert_str_eq(json_string_value(json_object_get(j, "method")), "tools/list");
    ck_assert_int_eq(json_integer_value(json_object_get(j, "id")), 1);
    json_t *params = json_object_get(j, "params");
    ck_assert_ptr_null(json_object_get(params, "cursor"));
    ck_assert_ptr_null(json_object_get(params, "_meta")); /* no envelope in 2025 */
    json_decref(j);
    free(b);
    b = upstream_list_body(UPSTREAM_ERA_MODERN, "page-2", 2);
    j = parse(b);
    params = json_object_get(j, "params");
    ck_assert_str_eq(json_string_value(json_object_get(params, "cursor")), "page-2");
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(params, "_meta"), UPSTREAM_META_VERSION)),
        UPSTREAM_MODERN_VERSION);
    json_decref(j);
    free(b);
}
END_TEST

START_TEST(header_value_base64_when_not_plain)
{
    char *v = upstream_header_value("create_ticket");
    ck_assert_str_eq(v, "create_ticket");
    free(v);
    v = upstream_header_value("caf\xc3\xa9");
    ck_assert_str_eq(v, "=?base64?Y2Fmw6k=?=");
    free(v);
}
END_TEST

START_TEST(read_json_result)
{
    const char *body = "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{\"content\":[{\"type\":\"text\","
                       "\"text\":\"done\"}],\"structuredContent\":{\"n\":1},\"isError\":false}}";
    struct upstream_answer a;
    upstream_read_answer("application/json", body, strlen(body), 5, &a);
    ck_assert_int_eq(a.kind, MCP_ANSWER_RESULT);
    ck_assert_str_eq(a.text, "done");
    ck_assert_int_eq(a.executed, -1); /* no structuredContent.executed */
    json_t *r = parse(a.result);
    ck_assert_int_eq(
        json_integer_value(json_object_get(json_object_get(r, "structuredContent"), "n")), 1);
    json_decref(r);
    upstream_answer_free(&a);
    /* another id is not our answer */
    upstream_read_answer("application/json", body, strlen(body), 6, &a);
    ck_assert_int_eq(a.kind, MCP_ANSWER_NONE);
    upstream_answer_free(&a);
    /* a gateway's result that says its own call is not final; final: true is a result */
    body = "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{\"content\":[],\"isError\":false,"
           "\"_meta\":{\"outbox-relay/final\":false}}}";
    upstream_read_answer("application/json", body, strlen(body), 5, &a);
    ck_assert_int_eq(a.kind, MCP_ANSWER_NOT_FINAL);
    upstream_answer_free(&a);
    body = "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{\"content\":[],\"isError\":false,"
           "\"_meta\":{\"outbox-relay/final\":true}}}";
    upstream_read_answer("application/json", body, strlen(body), 5, &a);
    ck_assert_int_eq(a.kind, MCP_ANSWER_RESULT);
    upstream_answer_free(&a);
}
END_TEST

START_TEST(read_tool_error_and_rpc_error)
{
    const char *body = "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{\"content\":[{\"type\":\"text\","
                       "\"text\":\"no such account\"}],\"isError\":true}}";
    struct upstream_answer a;
    upstream_read_answer("application/json; charset=utf-8", body, strlen(body), 5, &a);
    ck_assert_int_eq(a.kind, MCP_ANSWER_TOOL_ERROR);
    ck_assert_str_eq(a.text, "no such account");
    upstream_answer_free(&a);
    body = "[{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{}},"
           "{\"jsonrpc\":\"2.0\",\"id\":5,\"error\":{\"code\":-32602,\"message\":\"bad args\"}}]";
    upstream_read_answer("application/json", body, strlen(body), 5, &a);
    ck_assert_int_eq(a.kind, MCP_ANSWER_RPC_ERROR);
    ck_assert_int_eq(a.code, -32602);
    ck_assert_str_eq(a.text, "bad args");
    upstream_answer_free(&a);
}
END_TEST

START_TEST(read_event_stream)
{
    const char *body =
        "event: message\r\n"
        "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\r\n"
        "\r\n"
        ": a comment\n"
        "id: 2\n"
        "data: {\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"method\":\"sampling/createMessage\"}\n"
        "\n"
        "data: {\"jsonrpc\":\"2.0\",\"id\":9,\n"
        "data: \"result\":{\"content\":[],\"isError\":false}}\n"
        "\n";
    struct upstream_answer a;
    upstream_read_answer("text/event-stream", body, strlen(body), 9, &a);
    ck_assert_int_eq(a.kind, MCP_ANSWER_RESULT);
    ck_assert_int_eq(a.server_requests, 1);
    upstream_answer_free(&a);
    /* a stream cut before the response: no answer */
    size_t cut = strstr(body, "data: {\"jsonrpc\":\"2.0\",\"id\":9") - body;
    upstream_read_answer("text/event-stream", body, cut, 9, &a);
    ck_assert_int_eq(a.kind, MCP_ANSWER_NONE);
    upstream_answer_free(&a);
    /* a last event without its blank line still counts */
    const char *tail = "data: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"content\":[]}}";
    upstream_read_answer("text/event-stream", tail, strlen(tail), 3, &a);
    ck_assert_int_eq(a.kind, MCP_ANSWER_RESULT);
    upstream_answer_free(&a);
}
END_TEST

/* Requests of the server on a stream are answered as their event completes:
 * a half event waits for its blank line; notifications and responses get
 * nothing; a string id is kept as it is. */
struct replies {
    int n;
    char *last;
};

static void collect(void *ctx, const char *body)
{
    struct replies *r = ctx;
    r->n++;
    free(r->last);
    r->last = strdup(body);
}

START_TEST(scan_requests_answers_each_once)
{
    const char *stream =
        "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\","
        "\"params\":{}}\n\n"
        "data: {\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"sampling/createMessage\","
        "\"params\":{}}\r\n\r\n"
        "data: {\"jsonrpc\":\"2.0\",\"id\":\"e-1\",\n"
        "data: \"method\":\"elicitation/create\"}\n";
    struct replies r = {0};
    size_t len = strlen(stream);
    size_t done = upstream_scan_requests(stream, len, 0, collect, &r);
    ck_assert_int_eq(r.n, 1); /* the elicitation's event has no blank line yet */
    json_t *b = parse(r.last);
    ck_assert_int_eq(json_integer_value(json_object_get(b, "id")), 7);
    json_t *err = json_object_get(b, "error");
    ck_assert_int_eq(json_integer_value(json_object_get(err, "code")), -32601);
    ck_assert(strstr(json_string_value(json_object_get(err, "message")),
                     "cannot answer sampling/createMessage") != NULL);
    json_decref(b);
    ck_assert(done < len);
    /* the rest arrives: only the new event is answered */
    char *more = malloc(len + 2);
    memcpy(more, stream, len);
    memcpy(more + len, "\n", 2);
    done = upstream_scan_requests(more, len + 1, done, collect, &r);
    ck_assert_int_eq(done, len + 1);
    ck_assert_int_eq(r.n, 2);
    b = parse(r.last);
    ck_assert_str_eq(json_string_value(json_object_get(b, "id")), "e-1");
    json_decref(b);
    /* nothing new: nothing sent again */
    ck_assert_int_eq(upstream_scan_requests(more, len + 1, done, collect, &r), len + 1);
    ck_assert_int_eq(r.n, 2);
    free(more);
    free(r.last);
}
END_TEST

START_TEST(discover_and_initialize_answers)
{
    const char *body = "{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{\"supportedVersions\":"
                       "[\"2026-07-28\",\"2025-11-25\"]}}";
    struct upstream_answer a;
    upstream_read_answer("application/json", body, strlen(body), UPSTREAM_SETUP_ID, &a);
    ck_assert(upstream_discover_says_modern(&a));
    upstream_answer_free(&a);
    body = "{\"jsonrpc\":\"2.0\",\"id\":0,\"error\":{\"code\":-32601,\"message\":\"nope\"}}";
    upstream_read_answer("application/json", body, strlen(body), UPSTREAM_SETUP_ID, &a);
    ck_assert(!upstream_discover_says_modern(&a));
    upstream_answer_free(&a);
    body = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{\"protocolVersion\":"
           "\"2025-06-18\",\"capabilities\":{}}}\n\n";
    upstream_read_answer("text/event-stream", body, strlen(body), UPSTREAM_SETUP_ID, &a);
    char *v = upstream_initialize_version(&a);
    ck_assert_str_eq(v, "2025-06-18");
    free(v);
    upstream_answer_free(&a);
    body = "{\"jsonrpc\":\"2.0\",\"id\":8,\"result\":{\"content\":[],\"structuredContent\":"
           "{\"executed\":false}}}";
    upstream_read_answer("application/json", body, strlen(body), 8, &a);
    ck_assert_int_eq(a.executed, 0); /* a status tool's answer */
    upstream_answer_free(&a);
    ck_assert_int_eq(upstream_pref_parse("auto"), UPSTREAM_AUTO);
    ck_assert_int_eq(upstream_pref_parse("2026-07-28"), UPSTREAM_PREF_MODERN);
    ck_assert_int_eq(upstream_pref_parse("2025-11-25"), UPSTREAM_PREF_LEGACY);
}
END_TEST

static bool has_header(const struct curl_slist *h, const char *line)
{
    for (; h; h = h->next)
        if (!strcmp(h->data, line))
            return true;
    return false;
}

/* 'auto': discover (not modern) -> initialize (its session id) -> initialized -> ready. */
START_TEST(session_steps_auto_to_legacy)
{
    struct upstream_session s = {0};
    enum upstream_step step = UPSTREAM_INITIALIZED, next;
    char why[256] = "";
    ck_assert_int_eq(upstream_begin(&s, UPSTREAM_AUTO, &step), UPSTREAM_SET_UP);
    ck_assert_int_eq(step, UPSTREAM_DISCOVER);
    ck_assert_int_eq(upstream_begin(&s, UPSTREAM_AUTO, &step), UPSTREAM_WAIT);
    const char *not_found =
        "{\"jsonrpc\":\"2.0\",\"id\":0,\"error\":{\"code\":-32601,\"message\":\"no\"}}";
    ck_assert_int_eq(upstream_setup_answer(&s, UPSTREAM_DISCOVER, NULL, 200, "application/json",
                                           not_found, strlen(not_found), NULL, &next, why,
                                           sizeof(why)),
                     UPSTREAM_NEXT);
    ck_assert_int_eq(next, UPSTREAM_INITIALIZE);
    const char *init = "{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{\"protocolVersion\":"
                       "\"2025-11-25\",\"capabilities\":{}}}";
    ck_assert_int_eq(upstream_setup_answer(&s, UPSTREAM_INITIALIZE, NULL, 200, "application/json",
                                           init, strlen(init), "sid-1", &next, why, sizeof(why)),
                     UPSTREAM_NEXT);
    ck_assert_int_eq(next, UPSTREAM_INITIALIZED);
    ck_assert_str_eq(s.session_id, "sid-1");
    struct curl_slist *h = upstream_setup_headers(NULL, &s, UPSTREAM_INITIALIZED);
    ck_assert(has_header(h, "Mcp-Session-Id: sid-1"));
    ck_assert(has_header(h, "MCP-Protocol-Version: 2025-11-25"));
    curl_slist_free_all(h);
    ck_assert_int_eq(upstream_setup_answer(&s, UPSTREAM_INITIALIZED, NULL, 202, NULL, "", 0, NULL,
                                           &next, why, sizeof(why)),
                     UPSTREAM_READY_V);
    ck_assert_int_eq(s.state, UPSTREAM_READY);
    ck_assert_int_eq(upstream_begin(&s, UPSTREAM_AUTO, &step), UPSTREAM_GO);
    h = upstream_call_headers(NULL, &s, "get");
    ck_assert(has_header(h, "Mcp-Session-Id: sid-1"));
    ck_assert(!has_header(h, "Mcp-Method: tools/call"));
    curl_slist_free_all(h);
    upstream_reset(&s); /* a 404 to the session */
    ck_assert_int_eq(upstream_begin(&s, UPSTREAM_AUTO, &step), UPSTREAM_SET_UP);
    upstream_session_free(&s);
}
END_TEST

START_TEST(session_steps_modern_and_failures)
{
    struct upstream_session s = {0};
    enum upstream_step step, next;
    char why[256] = "";
    ck_assert_int_eq(upstream_begin(&s, UPSTREAM_PREF_MODERN, &step), UPSTREAM_GO);
    struct curl_slist *h = upstream_call_headers(NULL, &s, "get");
    ck_assert(has_header(h, "Mcp-Method: tools/call"));
    ck_assert(has_header(h, "Mcp-Name: get"));
    ck_assert(has_header(h, "MCP-Protocol-Version: 2026-07-28"));
    curl_slist_free_all(h);
    upstream_session_free(&s);
    /* no answer at all: nothing decided, the calls go back */
    ck_assert_int_eq(upstream_begin(&s, UPSTREAM_PREF_LEGACY, &step), UPSTREAM_SET_UP);
    ck_assert_int_eq(step, UPSTREAM_INITIALIZE);
    ck_assert_int_eq(upstream_setup_answer(&s, step, "Couldn't connect", 0, NULL, NULL, 0, NULL,
                                           &next, why, sizeof(why)),
                     UPSTREAM_UNSENT);
    ck_assert_str_eq(why, "setting up the MCP session failed: Couldn't connect");
    ck_assert_int_eq(s.state, UPSTREAM_NONE);
    /* a 401 is the upstream's answer; a 503 may change */
    ck_assert_int_eq(upstream_begin(&s, UPSTREAM_PREF_LEGACY, &step), UPSTREAM_SET_UP);
    ck_assert_int_eq(upstream_setup_answer(&s, step, NULL, 401, "application/json", "{}", 2, NULL,
                                           &next, why, sizeof(why)),
                     UPSTREAM_REFUSED);
    ck_assert_str_eq(why, "the upstream refused initialize: HTTP 401");
    ck_assert_int_eq(upstream_begin(&s, UPSTREAM_PREF_LEGACY, &step), UPSTREAM_SET_UP);
    ck_assert_int_eq(
        upstream_setup_answer(&s, step, NULL, 503, NULL, "", 0, NULL, &next, why, sizeof(why)),
        UPSTREAM_UNSENT);
    /* 'auto' and a discover that says 2026-07-28: modern, ready */
    ck_assert_int_eq(upstream_begin(&s, UPSTREAM_AUTO, &step), UPSTREAM_SET_UP);
    const char *modern = "{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{\"supportedVersions\":"
                         "[\"2026-07-28\"]}}";
    ck_assert_int_eq(upstream_setup_answer(&s, UPSTREAM_DISCOVER, NULL, 200, "application/json",
                                           modern, strlen(modern), NULL, &next, why, sizeof(why)),
                     UPSTREAM_READY_V);
    ck_assert_int_eq(s.era, UPSTREAM_ERA_MODERN);
    upstream_session_free(&s);
}
END_TEST

Suite *mcp_upstream_suite(void)
{
    Suite *s = suite_create("mcp_upstream");
    TCase *tc = tcase_create("bodies");
    tcase_add_test(tc, call_body_legacy);
    tcase_add_test(tc, call_body_modern_has_the_envelope);
    tcase_add_test(tc, call_body_refuses_other_payloads);
    tcase_add_test(tc, list_bodies);
    tcase_add_test(tc, setup_bodies);
    tcase_add_test(tc, header_value_base64_when_not_plain);
    suite_add_tcase(s, tc);
    tc = tcase_create("answers");
    tcase_add_test(tc, read_json_result);
    tcase_add_test(tc, read_tool_error_and_rpc_error);
    tcase_add_test(tc, read_event_stream);
    tcase_add_test(tc, scan_requests_answers_each_once);
    tcase_add_test(tc, discover_and_initialize_answers);
    tcase_add_test(tc, session_steps_auto_to_legacy);
    tcase_add_test(tc, session_steps_modern_and_failures);
    suite_add_tcase(s, tc);
    return s;
}
