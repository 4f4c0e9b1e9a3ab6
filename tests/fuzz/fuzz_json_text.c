/*
 * fuzz_json_text — the strict JSON parser of the MCP front door
 * (relay/lib/json_text.c): every request body goes through it before the
 * token is known to be good, and its spans are what is enqueued.
 *
 * Input: one flag byte (bit 0: JSON_TEXT_REJECT_DUPLICATES, bit 1:
 * JSON_TEXT_ALLOW_NUL, bit 2: JSON_TEXT_DECODE_ANY), then the text.
 * Properties:
 *   - jansson's verdict with the same flags is ours, except that we also
 *     read numbers jansson refuses ("too big integer", "real number
 *     overflow") and refuse a NUL byte after the value (jansson stops
 *     there); when both read it, the trees are equal;
 *   - every real node has its token, a valid JSON number that strtod reads
 *     back as the node's value (an overflowing one as the largest finite
 *     double of its sign); an integer node has none (it is exact);
 *   - the spans of a and of a.b, when found, are the bytes of the node the
 *     tree holds there (json_object_get): parsed alone they give an equal
 *     tree, and the texts of its reals are within the span's texts;
 *   - json_text_number_fits_numeric answers every token without crashing;
 *   - the way back (json_text_dumps; bit 3 of the flag byte: JSON_SORT_KEYS):
 *     written with its document and parsed again, a text gives an equal
 *     tree whose reals have the same texts; written without a document, a
 *     tree jansson also read is byte for byte what json_dumps writes.
 */
#include "fuzz.h"

#include "lib/json_text.h"

#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>

static bool valid_number_token(const char *s, size_t n)
{
    size_t i = 0;
    if (i < n && s[i] == '-')
        i++;
    if (i >= n || s[i] < '0' || s[i] > '9')
        return false;
    if (s[i] == '0')
        i++;
    else
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
    if (i < n && s[i] == '.') {
        i++;
        if (i >= n || s[i] < '0' || s[i] > '9')
            return false;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        if (i >= n || s[i] < '0' || s[i] > '9')
            return false;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
    }
    return i == n;
}

static void check_numbers(const struct json_text *doc, const json_t *v, int depth)
{
    if (depth > JSON_TEXT_MAX_DEPTH + 1)
        return;
    if (json_is_number(v)) {
        size_t n = 0;
        const char *t = json_text_number(doc, v, &n);
        if (json_is_integer(v)) {
            FUZZ_CHECK(t == NULL); /* exact in jansson: no text kept */
            return;
        }
        FUZZ_CHECK(t != NULL);
        FUZZ_CHECK(valid_number_token(t, n));
        char *copy = malloc(n + 1);
        FUZZ_CHECK(copy != NULL);
        memcpy(copy, t, n);
        copy[n] = '\0';
        double d = strtod(copy, NULL);
        if (isinf(d))
            d = d > 0 ? DBL_MAX : -DBL_MAX;
        FUZZ_CHECK(d == json_real_value(v));
        const char *why;
        (void)json_text_number_fits_numeric(t, n, &why);
        free(copy);
        return;
    }
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++)
            check_numbers(doc, json_array_get(v, i), depth + 1);
    } else if (json_is_object(v)) {
        const char *key;
        json_t *member;
        json_object_foreach((json_t *)v, key, member)
        {
            check_numbers(doc, member, depth + 1);
        }
    }
}

/* Every real below v has its text in [start, end) of doc->texts. */
static void check_texts_within(const struct json_text *doc, const json_t *v, size_t start,
                               size_t end, int depth)
{
    if (depth > JSON_TEXT_MAX_DEPTH + 1)
        return;
    if (json_is_real(v)) {
        size_t n;
        const char *t = json_text_number(doc, v, &n);
        FUZZ_CHECK(t != NULL && (size_t)(t - doc->texts) >= start &&
                   (size_t)(t - doc->texts) < end);
    } else if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++)
            check_texts_within(doc, json_array_get(v, i), start, end, depth + 1);
    } else if (json_is_object(v)) {
        const char *key;
        json_t *member;
        json_object_foreach((json_t *)v, key, member)
        {
            check_texts_within(doc, member, start, end, depth + 1);
        }
    }
}

static void check_span(const struct json_text *doc, const char *text,
                       const struct json_text_span *span, const json_t *want)
{
    FUZZ_CHECK(span->found == (want != NULL));
    if (!span->found)
        return;
    FUZZ_CHECK(span->node == want);
    FUZZ_CHECK(span->start <= span->end);
    struct json_text *alone =
        json_text_parse(text + span->start, span->end - span->start,
                        JSON_TEXT_DECODE_ANY | JSON_TEXT_ALLOW_NUL, NULL, 0, NULL);
    FUZZ_CHECK(alone != NULL);
    FUZZ_CHECK(json_equal(alone->root, want));
    json_text_decref(alone);
    check_texts_within(doc, want, span->texts_start, span->texts_end, 0);
}

/* x (of a) and y (of b), equal trees: every real has the same text in both. */
static void check_same_texts(const struct json_text *a, const json_t *x, const struct json_text *b,
                             const json_t *y, int depth)
{
    if (depth > JSON_TEXT_MAX_DEPTH + 1)
        return;
    if (json_is_real(x)) {
        size_t n = 0, m = 0;
        const char *s = json_text_number(a, x, &n), *t = json_text_number(b, y, &m);
        FUZZ_CHECK(s != NULL && t != NULL && n == m && memcmp(s, t, n) == 0);
    } else if (json_is_array(x)) {
        for (size_t i = 0; i < json_array_size(x); i++)
            check_same_texts(a, json_array_get(x, i), b, json_array_get(y, i), depth + 1);
    } else if (json_is_object(x)) {
        for (void *it = json_object_iter((json_t *)x); it;
             it = json_object_iter_next((json_t *)x, it)) {
            json_t *other =
                json_object_getn(y, json_object_iter_key(it), json_object_iter_key_len(it));
            FUZZ_CHECK(other != NULL);
            check_same_texts(a, json_object_iter_value(it), b, other, depth + 1);
        }
    }
}

static void check_round_trip(const struct json_text *doc, int flags, size_t dump_flags)
{
    const struct json_text *docs[] = {doc};
    char *written = json_text_dumps(doc->root, docs, 1, dump_flags);
    FUZZ_CHECK(written != NULL);
    struct json_text *again = json_text_parse(written, strlen(written),
                                              flags & ~JSON_TEXT_REJECT_DUPLICATES, NULL, 0, NULL);
    FUZZ_CHECK(again != NULL);
    FUZZ_CHECK(json_equal(doc->root, again->root));
    check_same_texts(doc, doc->root, again, again->root, 0);
    json_text_decref(again);
    free(written);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int flags = data[0] & 7;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;

    static const char *const a_path[] = {"a"};
    static const char *const ab_path[] = {"a", "b"};
    struct json_text_span spans[2] = {{.keys = a_path, .nkeys = 1}, {.keys = ab_path, .nkeys = 2}};
    struct json_text_error err;
    struct json_text *doc = json_text_parse(text, len, flags, spans, 2, &err);

    size_t jflags = 0;
    if (flags & JSON_TEXT_REJECT_DUPLICATES)
        jflags |= JSON_REJECT_DUPLICATES;
    if (flags & JSON_TEXT_ALLOW_NUL)
        jflags |= JSON_ALLOW_NUL;
    if (flags & JSON_TEXT_DECODE_ANY)
        jflags |= JSON_DECODE_ANY;
    json_error_t jerr;
    json_t *jansson = json_loadb(text, len, jflags, &jerr);
    size_t dump_flags = JSON_ENCODE_ANY | (data[0] & 8 ? JSON_SORT_KEYS : 0);

    if (jansson != NULL && doc == NULL && memchr(text, 0, len) != NULL) {
        /* jansson takes a NUL byte for the end of the text; a NUL is no
         * JSON white space, and this parser refuses it */
    } else if (jansson != NULL) {
        if (doc == NULL)
            dprintf(2, "refused what jansson reads: %s\n", err.text);
        FUZZ_CHECK(doc != NULL);
        FUZZ_CHECK(json_equal(doc->root, jansson));
        /* without a document: jansson's bytes */
        char *ours = json_text_dumps(doc->root, NULL, 0, dump_flags | JSON_COMPACT);
        char *theirs = json_dumps(jansson, dump_flags | JSON_COMPACT);
        FUZZ_CHECK(ours != NULL && theirs != NULL && strcmp(ours, theirs) == 0);
        free(ours);
        free(theirs);
    } else if (doc != NULL) {
        /* only for numbers jansson cannot hold */
        bool numbers = strstr(jerr.text, "too big") != NULL || strstr(jerr.text, "overflow");
        if (!numbers)
            dprintf(2, "read what jansson refuses: %s\n", jerr.text);
        FUZZ_CHECK(numbers);
    } else {
        FUZZ_CHECK(err.text[0] != '\0');
    }
    json_decref(jansson);

    if (doc != NULL) {
        check_numbers(doc, doc->root, 0);
        check_round_trip(doc, flags, dump_flags);
        const json_t *a = json_object_get(doc->root, "a");
        check_span(doc, text, &spans[0], a);
        check_span(doc, text, &spans[1], json_object_get(a, "b"));
        json_text_decref(doc);
    } else {
        FUZZ_CHECK(!spans[0].found && !spans[1].found);
    }
    return 0;
}
