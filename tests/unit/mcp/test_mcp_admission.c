/*
 * test_mcp_admission.c — the pure parts of relay/mcp/mcp_admission.c: the
 * parse estimate against what jansson was measured to take, the charges
 * and their refusals (a client's share, the total, a body's half, too
 * large), requests in flight, the log rate limit, and the slimmed request.
 * The verdicts and the fair queue need a database: integration 72.
 */
#include "../unit.h"
#include "mcp/mcp_admission.h"

#include <stdlib.h>
#include <string.h>

static uv_loop_t loop;
static admission_t *adm;

static void on_closed(void *data)
{
    *(bool *)data = true;
}

static void setup(size_t total, size_t share, int calls)
{
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    struct adm_limits limits = {
        .memory_bytes = total, .client_memory_bytes = share, .client_calls = calls};
    adm = adm_new(&loop, &limits, NULL, 0);
}

static void teardown(void)
{
    bool closed = false;
    adm_close(adm, on_closed, &closed);
    while (!closed)
        uv_run(&loop, UV_RUN_ONCE);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
}

/* A body of about n bytes: item repeated in an array. */
static char *body_of(const char *item, size_t n, size_t *len)
{
    size_t k = strlen(item);
    char *b = malloc(n + k + 4);
    size_t at = 0;
    b[at++] = '[';
    while (at + k + 1 < n) {
        memcpy(b + at, item, k);
        at += k;
        b[at++] = ',';
    }
    b[at - 1] = ']';
    b[at] = '\0';
    *len = at;
    return b;
}

/* Heap jansson 2.14 took for 1 MB of each shape (mallinfo2, the comment of
 * adm_parse_estimate): the estimate is never below it. */
START_TEST(estimate_is_above_what_jansson_takes)
{
    static const struct {
        const char *item;
        size_t measured;
    } shapes[] = {
        {"1", 20200640},  {"1.5", 10097232},  {"[]", 46860304},
        {"{}", 78860320}, {"\"\"", 30860736}, {"{\"a\":{\"b\":[1]}}", 48521680},
    };
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        size_t len;
        char *b = body_of(shapes[i].item, 1000000, &len);
        size_t estimate = adm_parse_estimate(b, len);
        ck_assert_msg(estimate >= shapes[i].measured, "%s: estimate %zu < measured %zu",
                      shapes[i].item, estimate, shapes[i].measured);
        ck_assert_msg(estimate < 2 * shapes[i].measured + len, "%s: estimate %zu far above",
                      shapes[i].item, estimate);
        free(b);
    }
    /* what is inside a string does not count as structure */
    const char *s = "{\"t\":\"[[[{{{,,,:::\\\"]]]\"}";
    ck_assert_uint_lt(adm_parse_estimate(s, strlen(s)), strlen(s) + 256 + 2 * 64 + 2 * 48 + 1);
}
END_TEST

START_TEST(charges_refuse_past_a_share_and_the_total)
{
    setup(1000, 600, 2);
    struct adm_client *a = adm_client_get(adm, "a"), *b = adm_client_get(adm, "b");
    ck_assert_ptr_eq(adm_client_get(adm, "a"), a);
    ck_assert_str_eq(adm_client_name(b), "b");
    ck_assert_int_eq(adm_charge(adm, a, 601, 0, false), ADM_TOO_LARGE);  /* never fits */
    ck_assert_int_eq(adm_charge(adm, a, 301, 0, true), ADM_CLIENT_FULL); /* a body: half */
    ck_assert_int_eq(adm_charge(adm, a, 300, 0, true), ADM_OK);
    ck_assert_int_eq(adm_charge(adm, a, 300, 300, false), ADM_OK);
    ck_assert_int_eq(adm_charge(adm, a, 1, 0, false), ADM_CLIENT_FULL);
    ck_assert_int_eq(adm_charge(adm, b, 400, 0, false), ADM_OK);
    ck_assert_int_eq(adm_charge(adm, b, 1, 0, false), ADM_SERVER_FULL); /* 1000 in all */
    ck_assert_uint_eq(adm_client_charged(a), 600);
    adm_uncharge(adm, a, 600);
    adm_uncharge(adm, b, 400);
    struct adm_stats st;
    adm_stats(adm, &st);
    ck_assert_uint_eq(st.charged, 0);
    ck_assert_uint_eq(st.peak, 1000);
    ck_assert_int_eq(adm_call_begin(adm, a), ADM_OK);
    ck_assert_int_eq(adm_call_begin(adm, a), ADM_OK);
    ck_assert_int_eq(adm_call_begin(adm, a), ADM_CLIENT_FULL);
    ck_assert_int_eq(adm_call_begin(adm, b), ADM_OK);
    ck_assert_int_eq(adm_client_calls(a), 2);
    adm_call_end(adm, a);
    adm_call_end(adm, a);
    adm_call_end(adm, b);
    teardown();
}
END_TEST

START_TEST(rate_limit_writes_a_line_a_second)
{
    setup(1000, 600, 2);
    struct adm_rate r = {0};
    uint64_t suppressed = 99;
    ck_assert(adm_rate_allow(adm, &r, &suppressed));
    ck_assert_uint_eq(suppressed, 0);
    for (int i = 0; i < 5; i++)
        ck_assert(!adm_rate_allow(adm, &r, &suppressed));
    ck_assert(!adm_rate_flush(adm, &r, &suppressed)); /* its second is not over */
    teardown();
}
END_TEST

START_TEST(slim_keeps_what_an_answer_needs)
{
    const char *body =
        "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"t\","
        "\"arguments\":{\"x\":[1,2,3]},\"_meta\":{\"k\":\"v\"}}}";
    struct mcp_request req;
    struct mcp_error err = {0};
    ck_assert(mcp_parse(body, strlen(body), &(struct mcp_headers){0}, &req, &err));
    adm_request_slim(&req);
    ck_assert_ptr_null(req.params);
    ck_assert_ptr_null(req.meta);
    ck_assert_str_eq(req.method, "tools/call");
    ck_assert_int_eq(json_integer_value(req.id), 7);
    ck_assert_ptr_nonnull(req.version);
    char *json = mcp_result_json(&req, json_object());
    ck_assert_msg(strstr(json, "\"id\":7") != NULL, "%s", json);
    free(json);
    mcp_request_free(&req);
}
END_TEST

Suite *mcp_admission_suite(void)
{
    Suite *s = suite_create("mcp_admission");
    TCase *tc = tcase_create("pure");
    tcase_add_test(tc, estimate_is_above_what_jansson_takes);
    tcase_add_test(tc, charges_refuse_past_a_share_and_the_total);
    tcase_add_test(tc, rate_limit_writes_a_line_a_second);
    tcase_add_test(tc, slim_keeps_what_an_answer_needs);
    suite_add_tcase(s, tc);
    return s;
}
