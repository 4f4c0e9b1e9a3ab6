/*
 * fuzz_pgarray — the PostgreSQL array literals the relay builds for its
 * batch statements (pgarray_* and utf8_scrub in relay/lib/strbuf.c): response
 * bodies, error texts and names from outside go into them.
 *
 * Input: a list of elements, each a tag byte and its data:
 *   tag % 5 == 0: an int64 (8 bytes)   1: a bool (1 byte)   2: SQL NULL
 *             3: text (1 length byte, then that many bytes, NUL and invalid
 *                UTF-8 included)   4: text, the rest of the input
 * The literal is then parsed back as PostgreSQL's array_in reads a
 * one-dimensional array (an independent reader here), and every element
 * must come back: the number, t/f, NULL, or utf8_scrub of the text. The
 * literal must be valid UTF-8 without NUL (PostgreSQL refuses anything else
 * in text). utf8_scrub itself: valid output, identity on valid input,
 * idempotent.
 */
#include "fuzz.h"

#include "lib/strbuf.h"

#include <inttypes.h>
#include <strings.h>
#include <stdbool.h>

#define MAX_ITEMS 64

enum kind { K_INT, K_BOOL, K_NULL, K_TEXT };

struct item {
    enum kind kind;
    int64_t i;
    bool b;
    const char *s;
    size_t n;
};

/* One element read back: NULL, or the text of the element. */
struct parsed {
    bool is_null;
    struct strbuf text;
};

static bool array_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* array_in for one dimension. Returns the element count, -1 when the
 * literal is malformed (PostgreSQL would refuse it). */
static int parse_array(const char *lit, size_t len, struct parsed *out, int max)
{
    size_t i = 0;
    if (len < 2 || lit[0] != '{')
        return -1;
    i = 1;
    int count = 0;
    if (lit[i] == '}')
        return i + 1 == len ? 0 : -1;
    for (;;) {
        if (count == max)
            return -1;
        struct parsed *p = &out[count];
        strbuf_init(&p->text);
        p->is_null = false;
        count++;
        while (i < len && array_space(lit[i]))
            i++;
        if (i < len && lit[i] == '"') {
            i++;
            for (;;) {
                if (i >= len)
                    return -1;
                char c = lit[i++];
                if (c == '"')
                    break;
                if (c == '\\') {
                    if (i >= len)
                        return -1;
                    c = lit[i++];
                }
                strbuf_append(&p->text, &c, 1);
            }
            while (i < len && array_space(lit[i]))
                i++;
        } else {
            size_t start = i;
            while (i < len && lit[i] != ',' && lit[i] != '}' && lit[i] != '"' && lit[i] != '\\' &&
                   lit[i] != '{')
                i++;
            size_t end = i;
            while (end > start && array_space(lit[end - 1]))
                end--;
            if (end == start)
                return -1;
            strbuf_append(&p->text, lit + start, end - start);
            p->is_null = end - start == 4 && strncasecmp(lit + start, "NULL", 4) == 0;
        }
        if (i >= len)
            return -1;
        if (lit[i] == ',') {
            i++;
            continue;
        }
        if (lit[i] == '}')
            return i + 1 == len ? count : -1;
        return -1;
    }
}

static void check_scrub(const char *s, size_t n)
{
    struct strbuf a, b;
    strbuf_init(&a);
    strbuf_init(&b);
    utf8_scrub(&a, s, n);
    FUZZ_CHECK(fuzz_utf8_valid((const unsigned char *)a.data, a.len, 0));
    if (fuzz_utf8_valid((const unsigned char *)s, n, 0))
        FUZZ_CHECK(a.len == n && memcmp(a.data, s, n) == 0);
    utf8_scrub(&b, a.data, a.len);
    FUZZ_CHECK(b.len == a.len && memcmp(a.data, b.data, a.len) == 0);
    strbuf_free(&a);
    strbuf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct item items[MAX_ITEMS];
    int count = 0;
    size_t i = 0;
    while (i < size && count < MAX_ITEMS) {
        struct item *it = &items[count];
        uint8_t tag = data[i++] % 5;
        if (tag == 0) {
            if (size - i < 8)
                break;
            uint64_t v = 0;
            for (int k = 0; k < 8; k++)
                v = v << 8 | data[i++];
            it->kind = K_INT;
            it->i = (int64_t)v;
        } else if (tag == 1) {
            if (i >= size)
                break;
            it->kind = K_BOOL;
            it->b = data[i++] & 1;
        } else if (tag == 2) {
            it->kind = K_NULL;
        } else if (tag == 3) {
            if (i >= size)
                break;
            size_t n = data[i++];
            if (n > size - i)
                n = size - i;
            it->kind = K_TEXT;
            it->s = (const char *)data + i;
            it->n = n;
            i += n;
        } else {
            it->kind = K_TEXT;
            it->s = (const char *)data + i;
            it->n = size - i;
            i = size;
        }
        count++;
    }

    struct strbuf lit;
    strbuf_init(&lit);
    strbuf_append_str(&lit, "junk that begin discards");
    pgarray_begin(&lit);
    for (int k = 0; k < count; k++) {
        switch (items[k].kind) {
        case K_INT:
            pgarray_item_int(&lit, items[k].i);
            break;
        case K_BOOL:
            pgarray_item_bool(&lit, items[k].b);
            break;
        case K_NULL:
            pgarray_item_null(&lit);
            break;
        case K_TEXT:
            pgarray_item_text(&lit, items[k].s, items[k].n);
            check_scrub(items[k].s, items[k].n);
            break;
        }
    }
    pgarray_end(&lit);
    FUZZ_CHECK(lit.len == strlen(lit.data));
    FUZZ_CHECK(fuzz_utf8_valid((const unsigned char *)lit.data, lit.len, 0));

    struct parsed back[MAX_ITEMS];
    int parsed = parse_array(lit.data, lit.len, back, MAX_ITEMS);
    FUZZ_CHECK(parsed == count);
    for (int k = 0; k < count; k++) {
        struct parsed *p = &back[k];
        switch (items[k].kind) {
        case K_INT: {
            char num[32];
            snprintf(num, sizeof(num), "%" PRId64, items[k].i);
            FUZZ_CHECK(!p->is_null && strcmp(p->text.data, num) == 0);
            break;
        }
        case K_BOOL:
            FUZZ_CHECK(!p->is_null && strcmp(p->text.data, items[k].b ? "t" : "f") == 0);
            break;
        case K_NULL:
            FUZZ_CHECK(p->is_null);
            break;
        case K_TEXT: {
            struct strbuf clean;
            strbuf_init(&clean);
            utf8_scrub(&clean, items[k].s, items[k].n);
            FUZZ_CHECK(!p->is_null && p->text.len == clean.len &&
                       memcmp(p->text.data, clean.data, clean.len) == 0);
            strbuf_free(&clean);
            break;
        }
        }
    }
    for (int k = 0; k < (parsed > 0 ? parsed : 0); k++)
        strbuf_free(&back[k].text);
    strbuf_free(&lit);
    return 0;
}
