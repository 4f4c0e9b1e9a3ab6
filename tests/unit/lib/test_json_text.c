/*
 * test_json_text.c — relay/lib/json_text.h: the strict parser that keeps
 * the exact text of numbers and the bytes of the values asked for.
 *
 * The tree must be the one jansson builds (the rest of the code reads it),
 * the spans must be the bytes of the value the tree holds (also when a key
 * is escaped or repeated), the number texts must be the tokens as written,
 * and what jansson refuses is refused here too.
 */
#include "../unit.h"

#include "lib/json_text.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- helpers */

static struct json_text *parse_flags(const char *text, int flags)
{
    struct json_text_error err;
    struct json_text *doc = json_text_parse(text, strlen(text), flags, NULL, 0, &err);
    ck_assert_msg(doc != NULL, "refused: %s: %s", text, err.text);
    return doc;
}

static void assert_refused(const char *text, size_t len, int flags, const char *part)
{
    struct json_text_error err;
    struct json_text *doc = json_text_parse(text, len, flags, NULL, 0, &err);
    ck_assert_msg(doc == NULL, "accepted: %.*s", (int)len, text);
    ck_assert_msg(strstr(err.text, part) != NULL, "\"%s\" not in \"%s\"", part, err.text);
}

/* The exact text of a number node, as a string. */
static char *number_text(const struct json_text *doc, const json_t *node)
{
    size_t len = 0;
    const char *t = json_text_number(doc, node, &len);
    ck_assert_ptr_nonnull(t);
    return strndup(t, len);
}

/* ---------------------------------------------------------------- the tree */

START_TEST(tree_is_the_one_jansson_builds)
{
    static const char *const docs[] = {
        "{}",
        "[]",
        " {\"a\": [1, -2, 3.5, 1e2, true, false, null, \"x\"], \"b\": {\"c\": {}}} ",
        "[\"\\u00e9\\n\\t\\\"\\\\\\/\\b\\f\\r\", \"\\ud83d\\ude00\", \"é😀\"]",
        "{\"\\u0070arams\": {\"arguments\": {\"amount\": 12}}}",
        "[0, -0, 0.5, -0.5e-3, 9223372036854775807, -9223372036854775808, 1E+2]",
    };
    for (size_t k = 0; k < sizeof(docs) / sizeof(docs[0]); k++) {
        struct json_text *doc = parse_flags(docs[k], 0);
        json_t *expected = json_loads(docs[k], 0, NULL);
        ck_assert_ptr_nonnull(expected);
        ck_assert_msg(json_equal(doc->root, expected), "differs from jansson: %s", docs[k]);
        json_decref(expected);
        json_text_decref(doc);
    }
}
END_TEST

START_TEST(numbers_keep_their_text)
{
    const char *text = "[19.99, 0.1, 1e400, -0, 9007199254740993, 123456789012345678901234567890, "
                       "12345678901234567.5, -1E-400, 1.0, 18446744073709551616]";
    struct json_text *doc = parse_flags(text, 0);
    static const char *const tokens[] = {"19.99",
                                         "0.1",
                                         "1e400",
                                         "-0",
                                         "9007199254740993",
                                         "123456789012345678901234567890",
                                         "12345678901234567.5",
                                         "-1E-400",
                                         "1.0",
                                         "18446744073709551616"};
    ck_assert_uint_eq(json_array_size(doc->root), 10);
    for (size_t i = 0; i < 10; i++) {
        const json_t *node = json_array_get(doc->root, i);
        if (json_is_integer(node)) { /* exact in jansson: no text kept */
            size_t len;
            ck_assert_ptr_null(json_text_number(doc, node, &len));
            continue;
        }
        char *t = number_text(doc, node);
        ck_assert_str_eq(t, tokens[i]);
        free(t);
    }
    /* still in the tree, as near as jansson can hold them */
    ck_assert(json_is_real(json_array_get(doc->root, 2)));
    ck_assert(json_real_value(json_array_get(doc->root, 2)) == DBL_MAX);
    ck_assert(json_is_integer(json_array_get(doc->root, 3)));
    ck_assert_int_eq(json_integer_value(json_array_get(doc->root, 3)), 0);
    ck_assert_int_eq(json_integer_value(json_array_get(doc->root, 4)), 9007199254740993LL);
    ck_assert(json_is_real(json_array_get(doc->root, 5)));
    ck_assert(json_real_value(json_array_get(doc->root, 5)) == 1.2345678901234568e29);
    ck_assert(json_is_real(json_array_get(doc->root, 9)));
    /* not a number of this document */
    json_t *other = json_integer(1);
    size_t len;
    ck_assert_ptr_null(json_text_number(doc, other, &len));
    ck_assert_ptr_null(json_text_number(NULL, other, &len));
    json_decref(other);
    json_text_decref(doc);
}
END_TEST

/* ---------------------------------------------------------------- spans */

static const char *const arguments_path[] = {"params", "arguments"};

/* The bytes of params.arguments in text; NULL when not found. */
static char *arguments_span(const char *text, int flags, const json_t **node,
                            struct json_text **doc_out)
{
    struct json_text_span span = {.keys = arguments_path, .nkeys = 2};
    struct json_text_error err;
    struct json_text *doc = json_text_parse(text, strlen(text), flags, &span, 1, &err);
    ck_assert_msg(doc != NULL, "refused: %s: %s", text, err.text);
    const json_t *in_tree = json_object_get(json_object_get(doc->root, "params"), "arguments");
    ck_assert_ptr_eq(span.found ? span.node : NULL, in_tree);
    *node = in_tree;
    *doc_out = doc;
    return span.found ? strndup(text + span.start, span.end - span.start) : NULL;
}

START_TEST(span_is_the_value_as_written)
{
    const json_t *node;
    struct json_text *doc;
    char *got = arguments_span("{\"jsonrpc\":\"2.0\",\"params\":{\"name\":\"refund\",\"arguments\":"
                               " {\"amount\": 19.99, \"n\": [1e400, -0]} },\"id\":1}",
                               0, &node, &doc);
    ck_assert_str_eq(got, "{\"amount\": 19.99, \"n\": [1e400, -0]}");
    free(got);
    json_text_decref(doc);

    /* escaped keys are keys: \u0070arams is params */
    got = arguments_span("{\"\\u0070arams\":{\"argument\\u0073\":{\"a\":0.1}}}", 0, &node, &doc);
    ck_assert_str_eq(got, "{\"a\":0.1}");
    free(got);
    json_text_decref(doc);

    /* a scalar, an array: still the bytes (the caller judges the type) */
    got = arguments_span("{\"params\":{\"arguments\":12345678901234567.5}}", 0, &node, &doc);
    ck_assert_str_eq(got, "12345678901234567.5");
    free(got);
    json_text_decref(doc);

    /* not there: nested elsewhere, under an array, params not an object */
    static const char *const absent[] = {
        "{\"params\":{\"name\":\"x\"}}",     "{\"x\":{\"params\":{\"arguments\":{}}}}",
        "{\"params\":[{\"arguments\":{}}]}", "{\"params\":\"arguments\"}",
        "{\"arguments\":{\"params\":{}}}",
    };
    for (size_t k = 0; k < sizeof(absent) / sizeof(absent[0]); k++) {
        got = arguments_span(absent[k], 0, &node, &doc);
        ck_assert_msg(got == NULL, "found in %s: %s", absent[k], got);
        ck_assert_ptr_null(node);
        json_text_decref(doc);
    }
}
END_TEST

START_TEST(span_follows_the_last_duplicate)
{
    const json_t *node;
    struct json_text *doc;
    /* the last arguments wins, in the tree and in the span */
    char *got = arguments_span("{\"params\":{\"arguments\":{\"a\":1},\"arguments\":{\"b\":2.50}}}",
                               0, &node, &doc);
    ck_assert_str_eq(got, "{\"b\":2.50}");
    free(got);
    json_text_decref(doc);
    /* a later params without arguments replaces the one that had them */
    got = arguments_span("{\"params\":{\"arguments\":{\"a\":1}},\"params\":{\"name\":\"x\"}}", 0,
                         &node, &doc);
    ck_assert_ptr_null(got);
    json_text_decref(doc);
    /* and a later one with them is the one */
    got = arguments_span("{\"params\":{\"name\":\"x\"},\"p\\u0061rams\":{\"arguments\":[3]}}", 0,
                         &node, &doc);
    ck_assert_str_eq(got, "[3]");
    free(got);
    json_text_decref(doc);
    /* the numbers of a replaced value stay known, and do not get mixed up */
    doc = parse_flags("{\"a\":1.10,\"a\":2.20,\"b\":[3.30]}", 0);
    char *t = number_text(doc, json_object_get(doc->root, "a"));
    ck_assert_str_eq(t, "2.20");
    free(t);
    t = number_text(doc, json_array_get(json_object_get(doc->root, "b"), 0));
    ck_assert_str_eq(t, "3.30");
    free(t);
    json_text_decref(doc);
    /* or refused, when the caller says so */
    assert_refused("{\"a\":1,\"\\u0061\":2}", 19, JSON_TEXT_REJECT_DUPLICATES,
                   "duplicate object key");
    assert_refused("{\"p\":{\"a\":1,\"a\":1}}", 19, JSON_TEXT_REJECT_DUPLICATES,
                   "duplicate object key");
}
END_TEST

/* ---------------------------------------------------------------- strictness */

START_TEST(refuses_what_jansson_refuses)
{
    static const char *const bad[] = {
        "",          " ",           "{",          "[1,]",      "{\"a\":1,}", "[01]",   "[1.]",
        "[.5]",      "[+1]",        "[1e]",       "[1e+]",     "[-]",        "[NaN]",  "[Infinity]",
        "[tru]",     "[nul]",       "{a:1}",      "{\"a\" 1}", "[1] x",      "[1][2]", "['a']",
        "[\"\\x\"]", "[\"\\u12\"]", "[\"a\tb\"]", "[\"a",      "{\"a\":}",   "[-01]",  "[1.5e]",
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        struct json_text_error err;
        struct json_text *doc = json_text_parse(bad[k], strlen(bad[k]), 0, NULL, 0, &err);
        ck_assert_msg(doc == NULL, "accepted: %s", bad[k]);
        ck_assert_msg(err.text[0] != '\0', "no message for %s", bad[k]);
        ck_assert_msg(json_loads(bad[k], 0, NULL) == NULL, "jansson accepts %s", bad[k]);
    }
    /* a scalar root only when asked for */
    assert_refused("12", 2, 0, "'[' or '{' expected");
    struct json_text *doc = parse_flags("12.50", JSON_TEXT_DECODE_ANY);
    char *t = number_text(doc, doc->root);
    ck_assert_str_eq(t, "12.50");
    free(t);
    json_text_decref(doc);
    doc = parse_flags(" true ", JSON_TEXT_DECODE_ANY);
    ck_assert(json_is_true(doc->root));
    json_text_decref(doc);
    /* the length is the text: a NUL byte inside is not the end */
    assert_refused("[1]\0", 4, 0, "the end of the text expected");
}
END_TEST

START_TEST(refuses_bad_unicode)
{
    static const struct {
        const char *text;
        const char *part;
    } bad[] = {
        {"[\"\xC0\x80\"]", "invalid UTF-8"},         /* overlong NUL */
        {"[\"\xE0\x80\xAF\"]", "invalid UTF-8"},     /* overlong / */
        {"[\"\xED\xA0\x80\"]", "invalid UTF-8"},     /* a surrogate, encoded */
        {"[\"\xF4\x90\x80\x80\"]", "invalid UTF-8"}, /* past U+10FFFF */
        {"[\"\xF5\x80\x80\x80\"]", "invalid UTF-8"},
        {"[\"\xC3\"]", "invalid UTF-8"}, /* cut short */
        {"[\"\x80\"]", "invalid UTF-8"}, /* a lone continuation byte */
        {"[\"\\ud800\"]", "high surrogate"},
        {"[\"\\ud800\\u0041\"]", "high surrogate"},
        {"[\"\\udc00\"]", "lone low surrogate"},
        {"[\"a\\u0000b\"]", "\\u0000 is not allowed"},
        {"{\"a\\u0000\":1}", "\\u0000 is not allowed"},
        {"{\"\xFF\":1}", "invalid UTF-8"},
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++)
        assert_refused(bad[k].text, strlen(bad[k].text), 0, bad[k].part);
    /* U+0000 when the caller allows it (jansson's JSON_ALLOW_NUL) */
    struct json_text *doc = parse_flags("[\"a\\u0000b\"]", JSON_TEXT_ALLOW_NUL);
    ck_assert_uint_eq(json_string_length(json_array_get(doc->root, 0)), 3);
    json_text_decref(doc);
    /* the largest code point, a pair, and raw UTF-8 of every length */
    doc = parse_flags("[\"\\udbff\\udfff\", \"\xF4\x8F\xBF\xBF\", \"\xC2\xA9\xE2\x82\xAC\"]", 0);
    ck_assert_str_eq(json_string_value(json_array_get(doc->root, 0)), "\xF4\x8F\xBF\xBF");
    json_text_decref(doc);
}
END_TEST

START_TEST(depth_is_bounded)
{
    size_t n = JSON_TEXT_MAX_DEPTH + 1; /* levels: the root is the first */
    char *text = malloc(2 * n + 1);
    memset(text, '[', n);
    memset(text + n, ']', n);
    text[2 * n] = '\0';
    struct json_text_error err;
    struct json_text *doc = json_text_parse(text, 2 * n, 0, NULL, 0, &err);
    ck_assert_ptr_null(doc);
    ck_assert_msg(strstr(err.text, "nested deeper than 2048 levels"), "%s", err.text);
    ck_assert_ptr_null(json_loadb(text, 2 * n, 0, NULL)); /* as jansson */
    /* one level less is read */
    doc = json_text_parse(text + 1, 2 * n - 2, 0, NULL, 0, &err);
    ck_assert_msg(doc != NULL, "%s", err.text);
    json_text_decref(doc);
    json_t *jansson = json_loadb(text + 1, 2 * n - 2, 0, NULL);
    ck_assert_ptr_nonnull(jansson);
    json_decref(jansson);
    free(text);
    /* 100,000 deep: refused, not a crashed stack */
    n = 100000;
    text = malloc(n);
    memset(text, '[', n);
    ck_assert_ptr_null(json_text_parse(text, n, 0, NULL, 0, &err));
    free(text);
}
END_TEST

START_TEST(long_numbers_are_kept_whole)
{
    size_t n = 100000;
    char *text = malloc(n + 3);
    text[0] = '[';
    text[1] = '1';
    memset(text + 2, '0', n - 1);
    text[n + 1] = ']';
    text[n + 2] = '\0';
    struct json_text *doc = parse_flags(text, 0);
    size_t len;
    ck_assert_ptr_nonnull(json_text_number(doc, json_array_get(doc->root, 0), &len));
    ck_assert_uint_eq(len, n);
    ck_assert(json_real_value(json_array_get(doc->root, 0)) == DBL_MAX);
    json_text_decref(doc);
    free(text);
}
END_TEST

/* ---------------------------------------------------------------- PostgreSQL numeric */

START_TEST(numeric_range_is_postgresql_s)
{
    /* each checked against PostgreSQL 15: SELECT 'N'::jsonb */
    static const struct {
        const char *num;
        bool fits;
    } cases[] = {
        {"19.99", true},
        {"1e400", true},
        {"-0", true},
        {"1e131071", true},
        {"9.9e131071", true},
        {"0.001e131074", true},
        {"10e131070", true},
        {"0.000001e131077", true},
        {"12345678901234567890e131052", true},
        {"1e-16383", true},
        {"0e-16383", true},
        {"0e999999999", true},
        {"0e1073741822", true},
        {"1e0000000000000000000000000005", true},
        {"1e131072", false},
        {"0.000001e131078", false},
        {"12345678901234567890e131053", false},
        {"1e-16384", false},
        {"0e-16384", false},
        {"0.0e-16383", false},
        {"1.0e-16383", false},
        {"100e-16385", false},
        {"0e1073741823", false},
        {"1e1000000000", false},
        {"-1e-1000000000", false},
        {"1e99999999999999999999999", false},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        const char *why = "unset";
        bool fits = json_text_number_fits_numeric(cases[k].num, strlen(cases[k].num), &why);
        ck_assert_msg(fits == cases[k].fits, "%s: %s", cases[k].num, fits ? "fits" : why);
        if (fits)
            ck_assert_ptr_null(why);
        else
            ck_assert_msg(why && strstr(why, "numeric"), "%s: %s", cases[k].num, why);
    }
}
END_TEST

Suite *json_text_suite(void)
{
    Suite *s = suite_create("json_text");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, tree_is_the_one_jansson_builds);
    tcase_add_test(tc, numbers_keep_their_text);
    tcase_add_test(tc, span_is_the_value_as_written);
    tcase_add_test(tc, span_follows_the_last_duplicate);
    tcase_add_test(tc, refuses_what_jansson_refuses);
    tcase_add_test(tc, refuses_bad_unicode);
    tcase_add_test(tc, depth_is_bounded);
    tcase_add_test(tc, long_numbers_are_kept_whole);
    tcase_add_test(tc, numeric_range_is_postgresql_s);
    suite_add_tcase(s, tc);
    return s;
}
