/*
 * strbuf.c — growable buffer and PostgreSQL array literals.
 *
 * Response bodies come from targets we do not control: they may hold NUL
 * bytes or invalid UTF-8, which PostgreSQL refuses in text. Rather than fail
 * a whole batch of outcomes, such bytes are replaced with U+FFFD.
 */
#include "lib/strbuf.h"

#include "lib/xalloc.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void strbuf_reserve(struct strbuf *b, size_t extra)
{
    if (b->len + extra + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1)
        cap *= 2;
    b->data = xrealloc(b->data, cap);
    b->cap = cap;
}

void strbuf_init(struct strbuf *b)
{
    b->data = NULL;
    b->len = b->cap = 0;
    strbuf_reserve(b, 0);
    b->data[0] = '\0';
}

void strbuf_free(struct strbuf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

void strbuf_reset(struct strbuf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

void strbuf_append(struct strbuf *b, const char *s, size_t n)
{
    strbuf_reserve(b, n);
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

size_t strbuf_append_capped(struct strbuf *b, const char *s, size_t n, size_t limit)
{
    if (b->len >= limit)
        return 0;
    if (n > limit - b->len)
        n = limit - b->len;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        if (cap < b->len + n + 1)
            cap = b->len + n + 1;
        if (limit < SIZE_MAX && cap > limit + 1)
            cap = limit + 1;
        b->data = xrealloc(b->data, cap);
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
    return n;
}

char *strbuf_steal(struct strbuf *b)
{
    char *data = b->data;
    if (b->cap > b->len + 1 + 64) {
        char *trimmed = realloc(data, b->len + 1);
        if (trimmed)
            data = trimmed;
    }
    b->data = NULL;
    b->len = b->cap = 0;
    strbuf_reserve(b, 0);
    b->data[0] = '\0';
    return data;
}

void strbuf_shrink(struct strbuf *b, size_t cap_max)
{
    size_t cap = b->len + 1 > cap_max ? b->len + 1 : cap_max;
    if (cap >= b->cap)
        return;
    char *smaller = realloc(b->data, cap);
    if (smaller == NULL)
        return; /* keeping the larger block is fine */
    b->data = smaller;
    b->cap = cap;
}

void strbuf_append_str(struct strbuf *b, const char *s)
{
    strbuf_append(b, s, strlen(s));
}

void strbuf_printf(struct strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    strbuf_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static void pgarray_separator(struct strbuf *b)
{
    if (b->len > 0 && b->data[b->len - 1] != '{')
        strbuf_append(b, ",", 1);
}

void pgarray_begin(struct strbuf *b)
{
    strbuf_reset(b);
    strbuf_append(b, "{", 1);
}

void pgarray_end(struct strbuf *b)
{
    strbuf_append(b, "}", 1);
}

void pgarray_item_int(struct strbuf *b, int64_t value)
{
    pgarray_separator(b);
    strbuf_printf(b, "%" PRId64, value);
}

void pgarray_item_bool(struct strbuf *b, bool value)
{
    pgarray_separator(b);
    strbuf_append(b, value ? "t" : "f", 1);
}

void pgarray_item_null(struct strbuf *b)
{
    pgarray_separator(b);
    strbuf_append(b, "NULL", 4);
}

size_t utf8_sequence_length(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    uint32_t cp, min;
    if (c >= 0xC2 && c <= 0xDF) { /* C0 and C1 could only start overlongs */
        len = 2, cp = c & 0x1Fu, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3, cp = c & 0x0Fu, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) { /* F5..FF could only start > U+10FFFF */
        len = 4, cp = c & 0x07u, min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

bool utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t len = utf8_sequence_length(p + i, n - i);
        if (len == 0)
            return false;
        i += len;
    }
    return true;
}

/* The length of the sequence at s that utf8_scrub keeps: valid, not NUL. */
static size_t scrub_keeps(const unsigned char *s, size_t n)
{
    return s[0] == 0 ? 0 : utf8_sequence_length(s, n);
}

void utf8_scrub(struct strbuf *out, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t run = i;
        size_t len;
        while (run < n && (len = scrub_keeps(p + run, n - run)) > 0)
            run += len;
        strbuf_append(out, s + i, run - i);
        if (run < n) {
            strbuf_append(out, "\xEF\xBF\xBD", 3);
            run++;
        }
        i = run;
    }
}

void pgarray_item_text(struct strbuf *b, const char *s, size_t n)
{
    pgarray_separator(b);
    if (s == NULL) {
        strbuf_append(b, "NULL", 4);
        return;
    }
    struct strbuf clean;
    strbuf_init(&clean);
    utf8_scrub(&clean, s, n);
    strbuf_reserve(b, clean.len * 2 + 2);
    b->data[b->len++] = '"';
    for (size_t i = 0; i < clean.len; i++) {
        char c = clean.data[i];
        if (c == '"' || c == '\\')
            b->data[b->len++] = '\\';
        b->data[b->len++] = c;
    }
    b->data[b->len++] = '"';
    b->data[b->len] = '\0';
    strbuf_free(&clean);
}
