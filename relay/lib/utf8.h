/*
 * utf8.h — the two small codecs that the parsers of the project share: a
 * code point written as UTF-8, and a hexadecimal digit's value. The JSON
 * parser (json_text.c), the pattern translator of the schema subset
 * (mcp/json_schema_regex.c), the reader of local references
 * (mcp/json_schema_check.c) and the HTTP server's percent-decoding
 * (http_server.c) each needed them; one copy keeps them in agreement.
 */
#ifndef OUTBOX_UTF8_H
#define OUTBOX_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Writes cp (at most U+10FFFF, not a surrogate: the caller checked) as
 * UTF-8 into out; returns how many bytes (1 to 4). */
static inline size_t utf8_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* 0-15 for a hexadecimal digit (either case), -1 for anything else. */
static inline int hex_digit_value(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

#endif
