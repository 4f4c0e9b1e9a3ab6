/*
 * json_text.c — the strict JSON parser of json_text.h.
 *
 * DESIGN
 * Recursive descent over a byte buffer with a length (it need not end in
 * NUL), one function per production of RFC 8259, building jansson nodes
 * as it goes. Recursion is bounded by JSON_TEXT_MAX_DEPTH, checked before
 * each descent, so a hostile body cannot exhaust the stack.
 *
 * Numbers. The token is checked against the grammar first
 * (-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?). An integer that fits a
 * json_int_t is exact in jansson and needs nothing more (a body of a
 * million small integers costs what jansson's tree costs). Any other is
 * copied into the document's text store and entered in its table with a
 * reference to its node: holding the reference keeps every number node alive as long as the
 * document, so a node pointer found in the tree names one entry only (a
 * node freed by a duplicate key could not be reused at the same address).
 * The table is sorted by node pointer at the end, for a binary search.
 *
 * Spans. Each requested span carries its key path; the parser passes down
 * a bit set of the spans whose path matches the keys walked so far. A
 * member whose key continues a path either is the value asked for (its
 * bytes and node are recorded, a later duplicate overwriting them) or
 * leads to it (the span is reset: the value that follows replaces
 * everything an earlier duplicate held, as it does in the tree).
 *
 * Writing (json_text_dumps). The output must be what json_dumps writes
 * with JSON_COMPACT, so that switching a caller to it changes only its
 * numbers: the same escaping (\" \\ \b \f \n \r \t, other control
 * characters as \u00XX in capitals, nothing else escaped), an object's keys
 * in its order, or sorted as jansson sorts them (memcmp, then the shorter
 * first), integers as JSON_INTEGER_FORMAT, and a real of no document as
 * jansson itself writes it (json_dumps of that node alone: its 17
 * significant digits and its ".0"). A number of a document is found by its
 * node: one document's sorted table is searched directly; several are
 * merged into one sorted table first, so that a tools/list of many tools
 * is n log n, not n times the tools.
 */
#include "lib/json_text.h"
#include "lib/utf8.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct parser {
    const unsigned char *s;
    size_t len, pos;
    int flags;
    struct json_text *doc;
    struct json_text_span *spans;
    size_t nspans;
    struct json_text_error *err;
    bool failed;
};

static bool fail(struct parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(struct parser *p, const char *fmt, ...)
{
    if (p->failed)
        return false;
    p->failed = true;
    if (p->err) {
        va_list ap;
        va_start(ap, fmt);
        char what[120];
        vsnprintf(what, sizeof(what), fmt, ap);
        va_end(ap);
        p->err->position = p->pos;
        snprintf(p->err->text, sizeof(p->err->text), "%s at byte %zu", what, p->pos);
    }
    return false;
}

static void skip_ws(struct parser *p)
{
    while (p->pos < p->len) {
        unsigned char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            return;
        p->pos++;
    }
}

/* ------------------------------------------------------------ strings */

/* The length of the valid UTF-8 sequence at s (n bytes left), 0 if invalid:
 * no overlong form, no surrogate, nothing past U+10FFFF. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    if (n < need || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < need; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return need;
}

static int hex4(const unsigned char *s)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        int c = s[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return -1;
        v = v * 16 + d;
    }
    return v;
}

struct buf {
    char *data;
    size_t len, cap;
};

static bool buf_put(struct buf *b, const void *src, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *grown = realloc(b->data, cap);
        if (!grown)
            return false;
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, src, n);
    b->len += n;
    b->data[b->len] = '\0';
    return true;
}

/* A string token at p->pos (the opening quote), decoded into out. */
static bool parse_string(struct parser *p, struct buf *out)
{
    p->pos++; /* the quote */
    for (;;) {
        if (p->pos >= p->len)
            return fail(p, "unterminated string");
        /* the run of plain bytes up to a quote, a backslash or a byte to check */
        size_t run = p->pos;
        while (run < p->len && p->s[run] >= 0x20 && p->s[run] < 0x80 && p->s[run] != '"' &&
               p->s[run] != '\\')
            run++;
        if (run > p->pos && !buf_put(out, p->s + p->pos, run - p->pos))
            return fail(p, "out of memory");
        p->pos = run;
        if (p->pos >= p->len)
            return fail(p, "unterminated string");
        unsigned char c = p->s[p->pos];
        if (c == '"') {
            p->pos++;
            if (out->data == NULL && !buf_put(out, "", 0))
                return fail(p, "out of memory");
            return true;
        }
        if (c < 0x20)
            return fail(p, "control character 0x%02x in a string", c);
        if (c >= 0x80) {
            size_t n = utf8_len(p->s + p->pos, p->len - p->pos);
            if (n == 0)
                return fail(p, "invalid UTF-8 in a string");
            if (!buf_put(out, p->s + p->pos, n))
                return fail(p, "out of memory");
            p->pos += n;
            continue;
        }
        /* a backslash */
        if (p->pos + 1 >= p->len)
            return fail(p, "unterminated string");
        unsigned char e = p->s[p->pos + 1];
        const char *plain = NULL;
        switch (e) {
        case '"':
            plain = "\"";
            break;
        case '\\':
            plain = "\\";
            break;
        case '/':
            plain = "/";
            break;
        case 'b':
            plain = "\b";
            break;
        case 'f':
            plain = "\f";
            break;
        case 'n':
            plain = "\n";
            break;
        case 'r':
            plain = "\r";
            break;
        case 't':
            plain = "\t";
            break;
        case 'u':
            break;
        default:
            return fail(p, "invalid escape '\\%c'", e >= 0x20 && e < 0x7f ? e : '?');
        }
        if (plain) {
            if (!buf_put(out, plain, 1))
                return fail(p, "out of memory");
            p->pos += 2;
            continue;
        }
        if (p->pos + 6 > p->len)
            return fail(p, "invalid \\u escape");
        int u = hex4(p->s + p->pos + 2);
        if (u < 0)
            return fail(p, "invalid \\u escape");
        unsigned cp = (unsigned)u;
        if (cp >= 0xDC00 && cp <= 0xDFFF)
            return fail(p, "invalid Unicode escape: a lone low surrogate \\u%04X", cp);
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            int lo = -1;
            if (p->pos + 12 <= p->len && p->s[p->pos + 6] == '\\' && p->s[p->pos + 7] == 'u')
                lo = hex4(p->s + p->pos + 8);
            if (lo < 0xDC00 || lo > 0xDFFF)
                return fail(p,
                            "invalid Unicode escape: a high surrogate \\u%04X without its "
                            "low surrogate",
                            cp);
            cp = 0x10000 + ((cp - 0xD800) << 10) + ((unsigned)lo - 0xDC00);
            p->pos += 6;
        }
        if (cp == 0 && !(p->flags & JSON_TEXT_ALLOW_NUL))
            return fail(p, "\\u0000 is not allowed in a string");
        char enc[4];
        size_t enc_len = utf8_encode(cp, enc);
        if (!buf_put(out, enc, enc_len))
            return fail(p, "out of memory");
        p->pos += 6;
    }
}

/* ------------------------------------------------------------ numbers */

static bool is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static bool number_add(struct parser *p, json_t *node, size_t start, size_t n)
{
    struct json_text *doc = p->doc;
    if (doc->nnums == doc->nums_cap) {
        size_t cap = doc->nums_cap ? doc->nums_cap * 2 : 16;
        struct json_text_number *grown = realloc(doc->nums, cap * sizeof(*grown));
        if (!grown)
            return false;
        doc->nums = grown;
        doc->nums_cap = cap;
    }
    if (doc->texts_len + n > doc->texts_cap) {
        size_t cap = doc->texts_cap ? doc->texts_cap : 256;
        while (cap < doc->texts_len + n)
            cap *= 2;
        char *grown = realloc(doc->texts, cap);
        if (!grown)
            return false;
        doc->texts = grown;
        doc->texts_cap = cap;
    }
    memcpy(doc->texts + doc->texts_len, p->s + start, n);
    doc->nums[doc->nnums++] = (struct json_text_number){
        .node = json_incref(node), .text_off = (uint32_t)doc->texts_len, .text_len = (uint32_t)n};
    doc->texts_len += n;
    return true;
}

static json_t *parse_number(struct parser *p)
{
    size_t start = p->pos, i = p->pos;
    if (i < p->len && p->s[i] == '-')
        i++;
    if (i >= p->len || !is_digit(p->s[i]))
        return fail(p, "invalid number"), NULL;
    if (p->s[i] == '0')
        i++;
    else
        while (i < p->len && is_digit(p->s[i]))
            i++;
    bool integer = true;
    if (i < p->len && p->s[i] == '.') {
        integer = false;
        i++;
        if (i >= p->len || !is_digit(p->s[i]))
            return p->pos = i, fail(p, "invalid number: a digit must follow '.'"), NULL;
        while (i < p->len && is_digit(p->s[i]))
            i++;
    }
    if (i < p->len && (p->s[i] == 'e' || p->s[i] == 'E')) {
        integer = false;
        i++;
        if (i < p->len && (p->s[i] == '+' || p->s[i] == '-'))
            i++;
        if (i >= p->len || !is_digit(p->s[i]))
            return p->pos = i, fail(p, "invalid number: a digit must follow the exponent"), NULL;
        while (i < p->len && is_digit(p->s[i]))
            i++;
    }
    size_t n = i - start;
    char small[64];
    char *copy = n < sizeof(small) ? small : malloc(n + 1);
    if (!copy)
        return fail(p, "out of memory"), NULL;
    memcpy(copy, p->s + start, n);
    copy[n] = '\0';
    json_t *node = NULL;
    if (integer) {
        errno = 0;
        char *end;
        long long v = strtoll(copy, &end, 10);
        if (errno == 0 && end == copy + n) {
            /* jansson holds it exactly: its value is its text (-0 is 0) */
            if (copy != small)
                free(copy);
            p->pos = i;
            node = json_integer((json_int_t)v);
            return node ? node : (fail(p, "out of memory"), NULL);
        }
    }
    if (node == NULL) {
        double d = strtod(copy, NULL);
        if (isinf(d))
            d = d > 0 ? DBL_MAX : -DBL_MAX;
        node = json_real(d);
    }
    if (copy != small)
        free(copy);
    if (node == NULL || !number_add(p, node, start, n)) {
        json_decref(node);
        return fail(p, "out of memory"), NULL;
    }
    p->pos = i;
    return node;
}

/* ------------------------------------------------------------ values */

static json_t *parse_value(struct parser *p, int depth, unsigned live);

static bool literal(struct parser *p, const char *word)
{
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
        return fail(p, "invalid literal");
    p->pos += n;
    return true;
}

/* live: the spans whose keys match the path down to this object. */
static json_t *parse_object(struct parser *p, int depth, unsigned live)
{
    json_t *obj = json_object();
    if (!obj)
        return fail(p, "out of memory"), NULL;
    p->pos++; /* { */
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == '}') {
        p->pos++;
        return obj;
    }
    for (;;) {
        skip_ws(p);
        if (p->pos >= p->len || p->s[p->pos] != '"') {
            fail(p, "a string (an object's key) expected");
            break;
        }
        struct buf key = {0};
        if (!parse_string(p, &key)) {
            free(key.data);
            break;
        }
        if ((p->flags & JSON_TEXT_REJECT_DUPLICATES) && json_object_getn(obj, key.data, key.len)) {
            free(key.data);
            fail(p, "duplicate object key");
            break;
        }
        skip_ws(p);
        if (p->pos >= p->len || p->s[p->pos] != ':') {
            free(key.data);
            fail(p, "':' expected");
            break;
        }
        p->pos++;
        skip_ws(p);
        unsigned child = 0, target = 0;
        for (size_t k = 0; k < p->nspans; k++) {
            struct json_text_span *sp = &p->spans[k];
            if (!(live & (1u << k)) || sp->nkeys <= (size_t)depth)
                continue;
            const char *want = sp->keys[depth];
            if (strlen(want) != key.len || memcmp(want, key.data, key.len) != 0)
                continue;
            sp->found = false; /* this member replaces an earlier one of the same key */
            sp->node = NULL;
            if (sp->nkeys == (size_t)depth + 1)
                target |= 1u << k;
            else
                child |= 1u << k;
        }
        size_t start = p->pos, texts_start = p->doc->texts_len;
        json_t *value = parse_value(p, depth + 1, child);
        if (!value) {
            free(key.data);
            break;
        }
        for (size_t k = 0; k < p->nspans; k++) {
            if (!(target & (1u << k)))
                continue;
            p->spans[k].found = true;
            p->spans[k].start = start;
            p->spans[k].end = p->pos;
            p->spans[k].node = value;
            p->spans[k].texts_start = texts_start;
            p->spans[k].texts_end = p->doc->texts_len;
        }
        int set = json_object_setn_new(obj, key.data, key.len, value);
        free(key.data);
        if (set != 0) {
            fail(p, "out of memory");
            break;
        }
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->pos < p->len && p->s[p->pos] == '}') {
            p->pos++;
            return obj;
        }
        fail(p, "',' or '}' expected");
        break;
    }
    json_decref(obj);
    return NULL;
}

static json_t *parse_array(struct parser *p, int depth)
{
    json_t *arr = json_array();
    if (!arr)
        return fail(p, "out of memory"), NULL;
    p->pos++; /* [ */
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == ']') {
        p->pos++;
        return arr;
    }
    for (;;) {
        skip_ws(p);
        json_t *value = parse_value(p, depth + 1, 0);
        if (!value)
            break;
        if (json_array_append_new(arr, value) != 0) {
            fail(p, "out of memory");
            break;
        }
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->pos < p->len && p->s[p->pos] == ']') {
            p->pos++;
            return arr;
        }
        fail(p, "',' or ']' expected");
        break;
    }
    json_decref(arr);
    return NULL;
}

static json_t *parse_value(struct parser *p, int depth, unsigned live)
{
    if (p->pos >= p->len)
        return fail(p, "a value expected, not the end of the text"), NULL;
    unsigned char c = p->s[p->pos];
    /* depth counts the containers around this value, as jansson counts */
    if ((c == '{' || c == '[') && depth >= JSON_TEXT_MAX_DEPTH)
        return fail(p, "nested deeper than %d levels", JSON_TEXT_MAX_DEPTH), NULL;
    switch (c) {
    case '{':
        return parse_object(p, depth, live);
    case '[':
        return parse_array(p, depth);
    case '"': {
        struct buf s = {0};
        json_t *v = NULL;
        if (parse_string(p, &s)) {
            v = json_stringn_nocheck(s.data, s.len);
            if (!v)
                fail(p, "out of memory");
        }
        free(s.data);
        return v;
    }
    case 't':
        return literal(p, "true") ? json_true() : NULL;
    case 'f':
        return literal(p, "false") ? json_false() : NULL;
    case 'n':
        return literal(p, "null") ? json_null() : NULL;
    default:
        if (c == '-' || is_digit(c))
            return parse_number(p);
        return fail(p, "a value expected"), NULL;
    }
}

/* ------------------------------------------------------------ the document */

static int number_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const struct json_text_number *)a)->node;
    uintptr_t y = (uintptr_t)((const struct json_text_number *)b)->node;
    return (x > y) - (x < y);
}

struct json_text *json_text_parse(const char *text, size_t len, int flags,
                                  struct json_text_span *spans, size_t nspans,
                                  struct json_text_error *err)
{
    if (err) {
        err->position = 0;
        err->text[0] = '\0';
    }
    if (nspans > JSON_TEXT_MAX_SPANS)
        nspans = JSON_TEXT_MAX_SPANS;
    if (len > UINT32_MAX) {
        if (err)
            snprintf(err->text, sizeof(err->text), "the text is longer than 4 GiB");
        return NULL;
    }
    struct json_text *doc = calloc(1, sizeof(*doc));
    if (!doc) {
        if (err)
            snprintf(err->text, sizeof(err->text), "out of memory");
        return NULL;
    }
    doc->refs = 1;
    struct parser p = {.s = (const unsigned char *)text,
                       .len = len,
                       .flags = flags,
                       .doc = doc,
                       .spans = spans,
                       .nspans = nspans,
                       .err = err};
    unsigned live = 0;
    for (size_t k = 0; k < nspans; k++) {
        spans[k].found = false;
        spans[k].start = spans[k].end = 0;
        spans[k].texts_start = spans[k].texts_end = 0;
        spans[k].node = NULL;
        if (spans[k].nkeys > 0)
            live |= 1u << k;
    }
    skip_ws(&p);
    size_t start = p.pos;
    if (!(flags & JSON_TEXT_DECODE_ANY) &&
        (p.pos >= p.len || (p.s[p.pos] != '{' && p.s[p.pos] != '['))) {
        fail(&p, "'[' or '{' expected");
    } else {
        doc->root = parse_value(&p, 0, live);
        if (doc->root) {
            for (size_t k = 0; k < nspans; k++) {
                if (spans[k].nkeys == 0) {
                    spans[k].found = true;
                    spans[k].start = start;
                    spans[k].end = p.pos;
                    spans[k].node = doc->root;
                    spans[k].texts_start = 0;
                    spans[k].texts_end = doc->texts_len;
                }
            }
            skip_ws(&p);
            if (p.pos < p.len)
                fail(&p, "the end of the text expected");
        }
    }
    if (p.failed) {
        for (size_t k = 0; k < nspans; k++) {
            spans[k].found = false;
            spans[k].node = NULL;
        }
        json_text_decref(doc);
        return NULL;
    }
    if (doc->nnums > 1)
        qsort(doc->nums, doc->nnums, sizeof(*doc->nums), number_cmp);
    /* give back what the doubling left unused */
    if (doc->nnums < doc->nums_cap && doc->nnums > 0) {
        struct json_text_number *fit = realloc(doc->nums, doc->nnums * sizeof(*fit));
        if (fit) {
            doc->nums = fit;
            doc->nums_cap = doc->nnums;
        }
    }
    if (doc->texts_len < doc->texts_cap && doc->texts_len > 0) {
        char *fit = realloc(doc->texts, doc->texts_len);
        if (fit) {
            doc->texts = fit;
            doc->texts_cap = doc->texts_len;
        }
    }
    return doc;
}

struct json_text *json_text_incref(struct json_text *doc)
{
    if (doc)
        doc->refs++;
    return doc;
}

void json_text_decref(struct json_text *doc)
{
    if (!doc || --doc->refs > 0)
        return;
    for (size_t i = 0; i < doc->nnums; i++)
        json_decref(doc->nums[i].node);
    json_decref(doc->root);
    free(doc->nums);
    free(doc->texts);
    free(doc);
}

const char *json_text_number(const struct json_text *doc, const json_t *node, size_t *len)
{
    if (!doc || !node || doc->nnums == 0)
        return NULL;
    struct json_text_number key = {.node = (json_t *)node};
    const struct json_text_number *hit =
        bsearch(&key, doc->nums, doc->nnums, sizeof(key), number_cmp);
    if (!hit)
        return NULL;
    *len = hit->text_len;
    return doc->texts + hit->text_off;
}

/* ------------------------------------------------------------ PostgreSQL numeric */

#define PG_NUMERIC_DSCALE_MAX 16383 /* digits after the point */
#define PG_NUMERIC_WEIGHT_MAX                                                                      \
    131071 /* 10^this: the highest leading digit (base 10000 weight 32767) */
#define PG_NUMERIC_EXPONENT_MAX 1073741822 /* INT_MAX / 2 - 1 */

bool json_text_number_fits_numeric(const char *num, size_t len, const char **why)
{
    size_t i = 0;
    if (i < len && num[i] == '-')
        i++;
    size_t int_start = i;
    while (i < len && is_digit((unsigned char)num[i]))
        i++;
    size_t int_digits = i - int_start;
    size_t frac_start = i, frac_digits = 0;
    if (i < len && num[i] == '.') {
        frac_start = ++i;
        while (i < len && is_digit((unsigned char)num[i]))
            i++;
        frac_digits = i - frac_start;
    }
    long long exponent = 0;
    if (i < len && (num[i] == 'e' || num[i] == 'E')) {
        i++;
        bool negative = false;
        if (i < len && (num[i] == '+' || num[i] == '-'))
            negative = num[i++] == '-';
        for (; i < len && is_digit((unsigned char)num[i]); i++) {
            if (exponent <= PG_NUMERIC_EXPONENT_MAX)
                exponent = exponent * 10 + (num[i] - '0');
        }
        if (negative)
            exponent = -exponent;
    }
    if (exponent > PG_NUMERIC_EXPONENT_MAX || exponent < -PG_NUMERIC_EXPONENT_MAX) {
        *why = "its exponent is beyond what PostgreSQL's numeric accepts (2^30)";
        return false;
    }
    /* the digits after the point, those written and those the exponent adds */
    long long dscale = (long long)frac_digits - exponent;
    if (dscale > PG_NUMERIC_DSCALE_MAX) {
        *why = "it has more than 16383 digits after the decimal point (PostgreSQL's numeric "
               "holds no more)";
        return false;
    }
    /* where its first non-zero digit is: 10^lead */
    long long lead = 0;
    bool nonzero = false;
    for (size_t k = int_start; k < int_start + int_digits; k++)
        if (num[k] != '0') {
            lead = (long long)(int_start + int_digits - k) - 1;
            nonzero = true;
            break;
        }
    if (!nonzero)
        for (size_t k = frac_start; k < frac_start + frac_digits; k++)
            if (num[k] != '0') {
                lead = -(long long)(k - frac_start) - 1;
                nonzero = true;
                break;
            }
    if (nonzero && lead + exponent > PG_NUMERIC_WEIGHT_MAX) {
        *why = "it is 10^131072 or more in size (PostgreSQL's numeric holds less)";
        return false;
    }
    *why = NULL;
    return true;
}

/* ------------------------------------------------------------ writing */

struct exact {
    const void *node;
    const char *text;
    size_t len;
};

struct writer {
    struct buf out;
    const struct json_text *one; /* a single document: its own table */
    struct exact *merged;        /* several: their tables merged, sorted by node */
    size_t nmerged;
    bool sort_keys;
};

static int exact_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const struct exact *)a)->node;
    uintptr_t y = (uintptr_t)((const struct exact *)b)->node;
    return (x > y) - (x < y);
}

static const char *exact_text(const struct writer *w, const json_t *node, size_t *len)
{
    if (w->one)
        return json_text_number(w->one, node, len);
    if (w->nmerged == 0)
        return NULL;
    struct exact key = {.node = node};
    const struct exact *hit = bsearch(&key, w->merged, w->nmerged, sizeof(key), exact_cmp);
    if (!hit)
        return NULL;
    *len = hit->len;
    return hit->text;
}

static bool put_str(struct writer *w, const char *s)
{
    return buf_put(&w->out, s, strlen(s));
}

/* A string or a key, escaped as jansson's dump_string escapes it without
 * JSON_ENSURE_ASCII or JSON_ESCAPE_SLASH. */
static bool put_string(struct writer *w, const char *s, size_t len)
{
    if (!buf_put(&w->out, "\"", 1))
        return false;
    size_t run = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        if (i > run && !buf_put(&w->out, s + run, i - run))
            return false;
        run = i + 1;
        char seq[8];
        const char *text = seq;
        switch (c) {
        case '"':
            text = "\\\"";
            break;
        case '\\':
            text = "\\\\";
            break;
        case '\b':
            text = "\\b";
            break;
        case '\f':
            text = "\\f";
            break;
        case '\n':
            text = "\\n";
            break;
        case '\r':
            text = "\\r";
            break;
        case '\t':
            text = "\\t";
            break;
        default:
            snprintf(seq, sizeof(seq), "\\u%04X", (unsigned)c);
        }
        if (!put_str(w, text))
            return false;
    }
    if (len > run && !buf_put(&w->out, s + run, len - run))
        return false;
    return buf_put(&w->out, "\"", 1);
}

struct key_len {
    const char *key;
    size_t len;
    json_t *value;
};

static int key_cmp(const void *a, const void *b)
{
    const struct key_len *x = a, *y = b;
    int r = memcmp(x->key, y->key, x->len < y->len ? x->len : y->len);
    if (r)
        return r;
    return (x->len > y->len) - (x->len < y->len);
}

static bool write_value(struct writer *w, const json_t *v, int depth);

static bool write_object(struct writer *w, const json_t *obj, int depth)
{
    if (!buf_put(&w->out, "{", 1))
        return false;
    size_t n = json_object_size(obj), i = 0;
    bool ok = true;
    if (w->sort_keys && n > 1) {
        struct key_len *keys = malloc(n * sizeof(*keys));
        if (!keys)
            return false;
        for (void *it = json_object_iter((json_t *)obj); it && i < n;
             it = json_object_iter_next((json_t *)obj, it), i++)
            keys[i] = (struct key_len){json_object_iter_key(it), json_object_iter_key_len(it),
                                       json_object_iter_value(it)};
        qsort(keys, i, sizeof(*keys), key_cmp);
        for (size_t k = 0; ok && k < i; k++)
            ok = (k == 0 || buf_put(&w->out, ",", 1)) && put_string(w, keys[k].key, keys[k].len) &&
                 buf_put(&w->out, ":", 1) && write_value(w, keys[k].value, depth + 1);
        free(keys);
    } else {
        for (void *it = json_object_iter((json_t *)obj); ok && it;
             it = json_object_iter_next((json_t *)obj, it), i++)
            ok = (i == 0 || buf_put(&w->out, ",", 1)) &&
                 put_string(w, json_object_iter_key(it), json_object_iter_key_len(it)) &&
                 buf_put(&w->out, ":", 1) && write_value(w, json_object_iter_value(it), depth + 1);
    }
    return ok && buf_put(&w->out, "}", 1);
}

static bool write_value(struct writer *w, const json_t *v, int depth)
{
    if (depth > JSON_TEXT_MAX_DEPTH + 64)
        return false;
    char num[64];
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return write_object(w, v, depth);
    case JSON_ARRAY: {
        if (!buf_put(&w->out, "[", 1))
            return false;
        for (size_t i = 0; i < json_array_size(v); i++)
            if ((i > 0 && !buf_put(&w->out, ",", 1)) ||
                !write_value(w, json_array_get(v, i), depth + 1))
                return false;
        return buf_put(&w->out, "]", 1);
    }
    case JSON_STRING:
        return put_string(w, json_string_value(v), json_string_length(v));
    case JSON_INTEGER: /* exact as it is: never in a document's table */
        snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return put_str(w, num);
    case JSON_REAL: {
        size_t len;
        const char *text = exact_text(w, v, &len);
        if (text)
            return buf_put(&w->out, text, len);
        char *jansson = json_dumps(v, JSON_ENCODE_ANY); /* its digits, its ".0" */
        bool ok = jansson && put_str(w, jansson);
        free(jansson);
        return ok;
    }
    case JSON_TRUE:
        return put_str(w, "true");
    case JSON_FALSE:
        return put_str(w, "false");
    case JSON_NULL:
        return put_str(w, "null");
    }
    return false;
}

char *json_text_dumps(const json_t *tree, const struct json_text *const *docs, size_t ndocs,
                      size_t flags)
{
    if (!tree || (!(flags & JSON_ENCODE_ANY) && !json_is_object(tree) && !json_is_array(tree)))
        return NULL;
    struct writer w = {.sort_keys = (flags & JSON_SORT_KEYS) != 0};
    size_t total = 0, with = 0;
    for (size_t d = 0; d < ndocs; d++)
        if (docs[d] && docs[d]->nnums > 0) {
            total += docs[d]->nnums;
            with++;
            w.one = docs[d];
        }
    if (with > 1) {
        w.one = NULL;
        w.merged = malloc(total * sizeof(*w.merged));
        if (!w.merged)
            return NULL;
        for (size_t d = 0; d < ndocs; d++)
            for (size_t i = 0; docs[d] && i < docs[d]->nnums; i++)
                w.merged[w.nmerged++] = (struct exact){docs[d]->nums[i].node,
                                                       docs[d]->texts + docs[d]->nums[i].text_off,
                                                       docs[d]->nums[i].text_len};
        qsort(w.merged, w.nmerged, sizeof(*w.merged), exact_cmp);
    }
    bool ok = write_value(&w, tree, 0) && (w.out.data || buf_put(&w.out, "", 0));
    free(w.merged);
    if (!ok) {
        free(w.out.data);
        return NULL;
    }
    return w.out.data;
}
