/*
 * test_mcp_arguments.c — relay/mcp/mcp_protocol.h: what a tools/call
 * enqueues is params.arguments as the client wrote it (mcp_parse keeps
 * the bytes, mcp_arguments_text hands them on), with the numbers
 * PostgreSQL's jsonb could not hold refused with -32602 before anything
 * is enqueued, and a body jansson could not read (an integer past 2^63)
 * read.
 */
#include "../unit.h"

#include "mcp/mcp_protocol.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct mcp_headers no_headers = {0};

/* A legacy tools/call whose params.arguments is arguments (verbatim). */
static char *call_body(const char *arguments)
{
    size_t n = strlen(arguments) + 200;
    char *body = malloc(n);
    snprintf(body, n,
             "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":"
             "{\"name\":\"refund\",\"arguments\":%s}}",
             arguments);
    return body;
}

/* The text mcp_arguments_text hands on for this body (it must accept it). */
static char *enqueued(const char *body)
{
    struct mcp_request req;
    struct mcp_error err = {0};
    ck_assert_msg(mcp_parse(body, strlen(body), &no_headers, &req, &err), "refused: %s: %s", body,
                  err.message);
    const char *text;
    size_t len;
    ck_assert_msg(mcp_arguments_text(&req, &text, &len, &err), "refused: %s", err.message);
    char *copy = strndup(text, len);
    mcp_request_free(&req);
    return copy;
}

START_TEST(arguments_are_the_bytes_written)
{
    static const char *const amounts[] = {
        "{\"amount\": 19.99}",
        "{\"amount\":0.1}",
        "{\"amount\": 1e400, \"b\": -0}",
        "{\"a\":9007199254740993,\"b\":123456789012345678901234567890}",
        "{\"a\": 12345678901234567.5, \"n\": [1.10, 2E+2, {\"x\": -0.0}]}",
        "{\"too_big_for_jansson\": 18446744073709551616}",
        "{ \"key\\u00e9\" : \"\\ud83d\\ude00\" }",
        "{}",
    };
    for (size_t k = 0; k < sizeof(amounts) / sizeof(amounts[0]); k++) {
        char *body = call_body(amounts[k]);
        char *got = enqueued(body);
        ck_assert_str_eq(got, amounts[k]);
        free(got);
        free(body);
    }
    /* no arguments: an empty object */
    char *got = enqueued("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
                         "{\"name\":\"refund\"}}");
    ck_assert_str_eq(got, "{}");
    free(got);
    /* escaped keys are the same keys */
    got = enqueued("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"\\u0070arams\":"
                   "{\"name\":\"refund\",\"a\\u0072guments\":{\"amount\":19.99}}}");
    ck_assert_str_eq(got, "{\"amount\":19.99}");
    free(got);
}
END_TEST

START_TEST(an_integer_past_2_63_is_read)
{
    /* jansson answered -32700 for these */
    char *body = call_body("{\"n\": 99999999999999999999999}");
    struct mcp_request req;
    struct mcp_error err = {0};
    ck_assert(mcp_parse(body, strlen(body), &no_headers, &req, &err));
    ck_assert_str_eq(req.method, "tools/call");
    mcp_request_free(&req);
    free(body);
}
END_TEST

START_TEST(numbers_jsonb_cannot_hold_are_refused)
{
    static const struct {
        const char *arguments;
        const char *message;
    } cases[] = {
        {"{\"a\": 1, \"b\": [1e131072, 1e-16384]}",
         "Invalid params: the number 1e131072 in the arguments cannot be stored: it is 10^131072 "
         "or more in size (PostgreSQL's numeric holds less). Nothing was sent."},
        {"{\"b\": 0.0e-16383}",
         "Invalid params: the number 0.0e-16383 in the arguments cannot be stored: it has more "
         "than 16383 digits after the decimal point (PostgreSQL's numeric holds no more). Nothing "
         "was sent."},
        {"{\"b\": 1e99999999999999999999}",
         "Invalid params: the number 1e99999999999999999999 in the arguments cannot be stored: its "
         "exponent is beyond what PostgreSQL's numeric accepts (2^30). Nothing was sent."},
        {"[1]", "Invalid params: arguments must be an object. Nothing was sent."},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        char *body = call_body(cases[k].arguments);
        struct mcp_request req;
        struct mcp_error err = {0};
        ck_assert(mcp_parse(body, strlen(body), &no_headers, &req, &err));
        const char *text = NULL;
        size_t len;
        ck_assert(!mcp_arguments_text(&req, &text, &len, &err));
        ck_assert_int_eq(err.code, MCP_INVALID_PARAMS);
        ck_assert_int_eq(err.http_status, 200);
        ck_assert_str_eq(err.message, cases[k].message);
        mcp_error_clear(&err);
        mcp_request_free(&req);
        free(body);
    }
    /* a number outside the arguments is not enqueued: not refused for that */
    const char *body = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
                       "{\"name\":\"refund\",\"x\":1e-99999,\"arguments\":{\"a\":1}}}";
    char *got = enqueued(body);
    ck_assert_str_eq(got, "{\"a\":1}");
    free(got);
    body = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
           "{\"name\":\"refund\",\"arguments\":{\"a\":1.5},\"x\":1e-99999},\"y\":1e999999}";
    got = enqueued(body);
    ck_assert_str_eq(got, "{\"a\":1.5}");
    free(got);
}
END_TEST

START_TEST(what_stays_a_parse_error)
{
    static const char *const bodies[] = {
        /* a key twice: a proxy reading the first and the front door the last would differ */
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"method\":\"tools/call\"}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"arguments\":"
        "{\"a\":1,\"a\":2}}}",
        /* jsonb cannot store U+0000 */
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"arguments\":"
        "{\"a\":\"x\\u0000\"}}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"x\":\"\xC0\x80\"}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"x\":\"\\udc00\"}",
        "{\"jsonrpc\":\"2.0\",\"id\":01}",
        "",
    };
    for (size_t k = 0; k < sizeof(bodies) / sizeof(bodies[0]); k++) {
        struct mcp_request req;
        struct mcp_error err = {0};
        ck_assert_msg(!mcp_parse(bodies[k], strlen(bodies[k]), &no_headers, &req, &err),
                      "accepted: %s", bodies[k]);
        ck_assert_int_eq(err.code, MCP_PARSE_ERROR);
        ck_assert_int_eq(err.http_status, 400);
        ck_assert_msg(strncmp(err.message, "Parse error: ", 13) == 0, "%s", err.message);
        mcp_error_clear(&err);
        mcp_request_free(&req);
    }
}
END_TEST

Suite *mcp_arguments_suite(void)
{
    Suite *s = suite_create("mcp_arguments");
    TCase *tc = tcase_create("exact");
    tcase_add_test(tc, arguments_are_the_bytes_written);
    tcase_add_test(tc, an_integer_past_2_63_is_read);
    tcase_add_test(tc, numbers_jsonb_cannot_hold_are_refused);
    tcase_add_test(tc, what_stays_a_parse_error);
    suite_add_tcase(s, tc);
    return s;
}
