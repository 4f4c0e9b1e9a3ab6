/*
 * test_json_text.c — relay/lib/json_text.h: the strict parser that keeps
 * the exact text of numbers and the bytes of the values asked for.
 *
 * The tree must be the one jansson builds (the rest of the code reads it),
 * the spans must be the bytes of the value the tree holds (also when a key
 * is escaped or repeated), the number texts must be the tokens as written,
 * and what jansson refuses is refused here too. Written back
 * (json_text_dumps), a tree is what json_dumps writes but for the numbers
 * of its documents, which are their texts.
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

/* ---------------------------------------------------------------- writing */

/* json_text_dumps of text's tree with its own document, checked to be want. */
static void assert_written(const char *text, int read_flags, size_t dump_flags, const char *want)
{
    struct json_text *doc = parse_flags(text, read_flags);
    const struct json_text *docs[] = {doc};
    char *out = json_text_dumps(doc->root, docs, 1, dump_flags);
    ck_assert_msg(out != NULL, "not written: %s", text);
    ck_assert_str_eq(out, want);
    free(out);
    json_text_decref(doc);
}

START_TEST(numbers_are_written_as_read)
{
    /* jansson writes 19.989999999999998, 0.10000000000000001, and cannot
     * read the rest */
    assert_written(
        "{ \"refunded\" : 19.99, \"tenth\": 0.1, \"big\": 123456789012345678901234567890,"
        " \"tiny\": 1e-7, \"huge\": 1e400, \"neg\": -1.5E+3, \"zero\": -0.0,"
        " \"small\": 7, \"odd\": 9007199254740993, \"min\": -9223372036854775809 }",
        0, JSON_COMPACT,
        "{\"refunded\":19.99,\"tenth\":0.1,\"big\":123456789012345678901234567890,"
        "\"tiny\":1e-7,\"huge\":1e400,\"neg\":-1.5E+3,\"zero\":-0.0,\"small\":7,"
        "\"odd\":9007199254740993,\"min\":-9223372036854775809}");
    assert_written("[19.99, [0.01, {\"m\": 1e-400}], []]", 0, 0,
                   "[19.99,[0.01,{\"m\":1e-400}],[]]");
    /* sorted as JSON_SORT_KEYS sorts, each number with its own text */
    assert_written("{\"tiny\": 1e-7, \"big\": 123456789012345678901234567890, \"refunded\": 19.99}",
                   0, JSON_SORT_KEYS,
                   "{\"big\":123456789012345678901234567890,\"refunded\":19.99,\"tiny\":1e-7}");
    /* a root that is a number (JSON_ENCODE_ANY, as jansson) */
    assert_written("19.99", JSON_TEXT_DECODE_ANY, JSON_ENCODE_ANY, "19.99");
    assert_written("\"a\\u0000b\"", JSON_TEXT_DECODE_ANY | JSON_TEXT_ALLOW_NUL, JSON_ENCODE_ANY,
                   "\"a\\u0000b\"");
    struct json_text *doc = parse_flags("19.99", JSON_TEXT_DECODE_ANY);
    const struct json_text *docs[] = {doc};
    ck_assert_ptr_null(json_text_dumps(doc->root, docs, 1, 0));
    json_text_decref(doc);
}
END_TEST

/* Without a document's number, the bytes are jansson's: escaping, order,
 * sorting, integers and reals. A caller switched to json_text_dumps
 * changes nothing but the numbers. */
START_TEST(the_rest_is_written_as_jansson_writes)
{
    static const char *const texts[] = {
        "{}",
        "[]",
        "{\"b\":1,\"a\":[true,false,null],\"c\":{\"z\":{},\"y\":[]}}",
        "[\"quote \\\" backslash \\\\ slash / \\/ controls \\b\\f\\n\\r\\t "
        "\\u0001\\u001f\\u007f\"]",
        "{\"k\\n\\u0002\":\"caf\\u00e9 \xe2\x82\xac \xf0\x9f\x98\x80 \\ud83d\\ude00 \\u2028\"}",
        "[-9223372036854775808,9223372036854775807,0,-0,1]",
        "{\"ab\":1,\"a\":2,\"b\":3,\"\":4,\"A\":5,\"\xc3\xa9\":6,\"aa\":7}",
    };
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        struct json_text *doc = parse_flags(texts[i], 0);
        const struct json_text *docs[] = {doc};
        json_t *loaded = json_loads(texts[i], 0, NULL);
        ck_assert_msg(loaded != NULL, "jansson refuses %s", texts[i]);
        size_t flags[] = {JSON_COMPACT, JSON_COMPACT | JSON_SORT_KEYS};
        for (size_t f = 0; f < 2; f++) {
            char *want = json_dumps(loaded, flags[f]);
            char *got = json_text_dumps(doc->root, docs, 1, flags[f]);
            ck_assert_msg(got && !strcmp(got, want), "%s: %s, jansson %s", texts[i], got, want);
            free(got);
            free(want);
        }
        json_decref(loaded);
        json_text_decref(doc);
    }
    /* a real of no document: jansson's 17 digits and its ".0" */
    json_t *tree = json_pack("{s:f,s:f,s:f,s:I}", "tenth", 0.1, "one", 1.0, "big", 1e300, "i",
                             (json_int_t)-42);
    char *want = json_dumps(tree, JSON_COMPACT);
    char *got = json_text_dumps(tree, NULL, 0, JSON_COMPACT);
    ck_assert_str_eq(got, want);
    ck_assert_str_eq(
        got,
        "{\"tenth\":0.10000000000000001,\"one\":1.0,\"big\":1.0000000000000001e300,\"i\":-42}");
    free(got);
    free(want);
    json_decref(tree);
}
END_TEST

/* A tree built around the nodes of several documents (a tools/list of
 * several schemas, a result around a response): each number is found in
 * its own document; a node of no document (a copy) is jansson's. */
START_TEST(several_documents_each_keep_their_numbers)
{
    struct json_text *a = parse_flags("{\"maximum\": 19.99}", 0);
    struct json_text *b =
        parse_flags("{\"multipleOf\": 0.01, \"n\": 123456789012345678901234567890}", 0);
    struct json_text *c = parse_flags("[1e-7, 2.50]", 0);
    json_t *tree = json_pack("{s:O,s:[O,O],s:o,s:i}", "a", a->root, "list", b->root, c->root,
                             "copy", json_deep_copy(a->root), "id", 1);
    const struct json_text *docs[] = {NULL, a, b, c};
    char *got = json_text_dumps(tree, docs, 4, JSON_COMPACT);
    ck_assert_str_eq(got, "{\"a\":{\"maximum\":19.99},\"list\":[{\"multipleOf\":0.01,\"n\":"
                          "123456789012345678901234567890},[1e-7,2.50]],"
                          "\"copy\":{\"maximum\":19.989999999999998},\"id\":1}");
    free(got);
    /* only one of them given: the others' numbers are jansson's */
    const struct json_text *just_c[] = {c};
    got = json_text_dumps(tree, just_c, 1, JSON_COMPACT);
    ck_assert_msg(strstr(got, "[1e-7,2.50]") && strstr(got, "\"maximum\":19.989999999999998"), "%s",
                  got);
    free(got);
    /* the documents may go: the tree holds its nodes */
    json_text_decref(a);
    json_text_decref(b);
    json_text_decref(c);
    got = json_text_dumps(tree, NULL, 0, JSON_COMPACT);
    ck_assert_msg(strstr(got, "\"maximum\":19.989999999999998"), "%s", got);
    free(got);
    json_decref(tree);
}
END_TEST

/* parse, write, parse: the same tree and the same number texts. */
START_TEST(a_round_trip_keeps_everything)
{
    static const char *const texts[] = {
        "{\"a\": [19.99, 1e400, -1e-400, 123456789012345678901234567890, 0.1e1, 5],"
        " \"s\": \"\\u0000x\\u001f\\\"\", \"o\": {\"\": null, \"t\": true}, \"b\": 2.5}",
        "[[[[[[1.0]]]]], {\"x\": {\"y\": -0.0}}]",
    };
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        struct json_text *first = parse_flags(texts[i], JSON_TEXT_ALLOW_NUL);
        const struct json_text *docs[] = {first};
        char *written = json_text_dumps(first->root, docs, 1, JSON_COMPACT);
        ck_assert_ptr_nonnull(written);
        struct json_text *again = parse_flags(written, JSON_TEXT_ALLOW_NUL);
        ck_assert_msg(json_equal(first->root, again->root), "%s -> %s", texts[i], written);
        ck_assert_uint_eq(first->texts_len, again->texts_len);
        ck_assert_int_eq(memcmp(first->texts, again->texts, first->texts_len), 0);
        const struct json_text *docs2[] = {again};
        char *twice = json_text_dumps(again->root, docs2, 1, JSON_COMPACT);
        ck_assert_str_eq(twice, written);
        free(twice);
        free(written);
        json_text_decref(again);
        json_text_decref(first);
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
    TCase *tw = tcase_create("write");
    tcase_add_test(tw, numbers_are_written_as_read);
    tcase_add_test(tw, the_rest_is_written_as_jansson_writes);
    tcase_add_test(tw, several_documents_each_keep_their_numbers);
    tcase_add_test(tw, a_round_trip_keeps_everything);
    suite_add_tcase(s, tw);
    return s;
}
