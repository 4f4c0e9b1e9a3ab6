/*
 * strbuf.h — a growable byte buffer, and PostgreSQL array literals built in it.
 *
 * Used to pass batches to the SQL functions as parallel arrays
 * ('{1,2,3}', '{"a\"b",NULL}'), one statement per batch.
 */
#ifndef OUTBOX_STRBUF_H
#define OUTBOX_STRBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct strbuf {
    char *data;
    size_t len;
    size_t cap;
};

/* A zeroed struct strbuf is an empty buffer too; init gives it its first
 * block (data is then never NULL). */
void strbuf_init(struct strbuf *b);
void strbuf_free(struct strbuf *b);
void strbuf_reset(struct strbuf *b);
void strbuf_append(struct strbuf *b, const char *s, size_t n);
void strbuf_append_str(struct strbuf *b, const char *s);
void strbuf_printf(struct strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends at most what keeps the content within limit bytes, and grows the
 * buffer no further than limit + 1: a response cap of 64 KiB costs 64 KiB,
 * not the 128 KiB that doubling would reach. Returns the bytes appended. */
size_t strbuf_append_capped(struct strbuf *b, const char *s, size_t n, size_t limit);
/* Hands the data (NUL-terminated, trimmed to its length) to the caller, who
 * frees it; the buffer is left empty and usable. */
char *strbuf_steal(struct strbuf *b);
/* Gives memory back: the capacity becomes at most max(len + 1, cap_max). */
void strbuf_shrink(struct strbuf *b, size_t cap_max);

/* Array literal helpers: call begin, then item_* per element, then end. */
void pgarray_begin(struct strbuf *b);
void pgarray_item_int(struct strbuf *b, int64_t value);
void pgarray_item_bool(struct strbuf *b, bool value);
void pgarray_item_null(struct strbuf *b);
/* A text element, quoted and escaped; NUL bytes and invalid UTF-8 are
 * replaced so that PostgreSQL always accepts it. NULL pointer = SQL NULL. */
void pgarray_item_text(struct strbuf *b, const char *s, size_t n);
void pgarray_end(struct strbuf *b);

/* The one UTF-8 validator of relay/ (RFC 3629): the length (1..4) of the
 * valid sequence at s (n >= 1 bytes), or 0 when it is not valid: a stray
 * continuation byte, a truncated sequence, an overlong form (C0, C1, E0 80..9F,
 * F0 80..8F), a surrogate (U+D800..U+DFFF: ED A0..BF) or a code point over
 * U+10FFFF (F4 90.., F5..FF). U+0000 is valid UTF-8 (1); callers that refuse
 * NUL or other controls check for them themselves. */
size_t utf8_sequence_length(const unsigned char *s, size_t n);
/* Whether all n bytes of s are valid UTF-8 (NUL bytes included). */
bool utf8_valid(const char *s, size_t n);
/* Copies s (n bytes) into out as valid UTF-8 without NUL bytes: each byte
 * that starts no valid sequence, and each NUL, becomes U+FFFD. */
void utf8_scrub(struct strbuf *out, const char *s, size_t n);

#endif
