/*
 * test_strbuf.c — relay/lib/strbuf.h: the growable buffer, PostgreSQL array
 * literals, and the UTF-8 scrub applied to response bodies.
 *
 * The scrub tests check the properties PostgreSQL needs (valid UTF-8, no
 * NUL, U+FFFD where bytes were bad, valid text around them unchanged); the
 * exact output is checked only where there is one sensible answer.
 */
#include "../unit.h"

#include "lib/strbuf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FFFD "\xEF\xBF\xBD"

/* ---------------------------------------------------------------- helpers */

/* An independent strict UTF-8 validator (RFC 3629): no overlongs, no
 * surrogates, nothing above U+10FFFF, and no NUL. */
static bool valid_utf8_without_nul(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned char c = p[i];
        size_t len;
        unsigned char lo = 0x80, hi = 0xBF; /* range of the second byte */
        if (c == 0)
            return false;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF)
            len = 2;
        else if (c == 0xE0) {
            len = 3;
            lo = 0xA0;
        } else if (c == 0xED) {
            len = 3;
            hi = 0x9F;
        } else if (c >= 0xE1 && c <= 0xEF)
            len = 3;
        else if (c == 0xF0) {
            len = 4;
            lo = 0x90;
        } else if (c >= 0xF1 && c <= 0xF3)
            len = 4;
        else if (c == 0xF4) {
            len = 4;
            hi = 0x8F;
        } else
            return false;
        if (i + len > n || p[i + 1] < lo || p[i + 1] > hi)
            return false;
        for (size_t k = 2; k < len; k++)
            if ((p[i + k] & 0xC0) != 0x80)
                return false;
        i += len;
    }
    return true;
}

static size_t count_fffd(const char *s, size_t n)
{
    size_t count = 0;
    for (size_t i = 0; i + 3 <= n; i++)
        if (memcmp(s + i, FFFD, 3) == 0)
            count++;
    return count;
}

static bool contains_bytes(const char *hay, size_t hay_len, const char *needle, size_t n)
{
    for (size_t i = 0; i + n <= hay_len; i++)
        if (memcmp(hay + i, needle, n) == 0)
            return true;
    return false;
}

/* Scrubs "<" bad ">" and checks the result is valid, marked, and keeps the
 * ASCII around the bad bytes. */
static void check_scrubbed(const char *bad, size_t bad_len)
{
    char input[64];
    ck_assert_uint_lt(bad_len + 2, sizeof(input));
    input[0] = '<';
    memcpy(input + 1, bad, bad_len);
    input[bad_len + 1] = '>';
    size_t n = bad_len + 2;

    struct strbuf out;
    strbuf_init(&out);
    utf8_scrub(&out, input, n);
    ck_assert_uint_eq(strlen(out.data), out.len); /* no NUL inside, terminated */
    ck_assert_msg(valid_utf8_without_nul(out.data, out.len), "scrub output is not valid UTF-8");
    ck_assert_msg(count_fffd(out.data, out.len) >= 1, "no U+FFFD in the scrub output");
    ck_assert_msg(count_fffd(out.data, out.len) <= bad_len, "more U+FFFD than bad bytes");
    ck_assert(out.data[0] == '<');
    ck_assert(out.data[out.len - 1] == '>');
    ck_assert(!contains_bytes(out.data, out.len, bad, bad_len));
    strbuf_free(&out);
}

/* ---------------------------------------------------------------- strbuf */

START_TEST(strbuf_init_is_empty_string)
{
    struct strbuf b;
    strbuf_init(&b);
    ck_assert_ptr_nonnull(b.data);
    ck_assert_uint_eq(b.len, 0);
    ck_assert_str_eq(b.data, "");
    strbuf_free(&b);
    ck_assert_ptr_null(b.data);
    ck_assert_uint_eq(b.len, 0);
}
END_TEST

START_TEST(strbuf_append_and_reset)
{
    struct strbuf b;
    strbuf_init(&b);
    strbuf_append_str(&b, "abc");
    strbuf_append(&b, "defXYZ", 3);
    ck_assert_str_eq(b.data, "abcdef");
    ck_assert_uint_eq(b.len, 6);
    strbuf_append(&b, "\0z", 2); /* binary-safe */
    ck_assert_uint_eq(b.len, 8);
    ck_assert_mem_eq(b.data, "abcdef\0z", 9);
    strbuf_reset(&b);
    ck_assert_uint_eq(b.len, 0);
    ck_assert_str_eq(b.data, "");
    strbuf_append_str(&b, "again");
    ck_assert_str_eq(b.data, "again");
    strbuf_free(&b);
}
END_TEST

START_TEST(strbuf_grows)
{
    struct strbuf b;
    strbuf_init(&b);
    char chunk[1000];
    memset(chunk, 'x', sizeof(chunk));
    for (int i = 0; i < 300; i++)
        strbuf_append(&b, chunk, sizeof(chunk));
    ck_assert_uint_eq(b.len, 300000);
    ck_assert_uint_gt(b.cap, b.len);
    ck_assert_uint_eq(strlen(b.data), 300000);
    strbuf_free(&b);
}
END_TEST

START_TEST(strbuf_printf_appends)
{
    struct strbuf b;
    strbuf_init(&b);
    strbuf_append_str(&b, "n=");
    strbuf_printf(&b, "%d", 42);
    strbuf_printf(&b, ", s=%s, x=%04x", "hi", 0xbeefu);
    ck_assert_str_eq(b.data, "n=42, s=hi, x=beef");
    ck_assert_uint_eq(b.len, strlen("n=42, s=hi, x=beef"));

    /* longer than the initial capacity in one call */
    char big[2000];
    memset(big, 'q', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    strbuf_printf(&b, "[%s]", big);
    ck_assert_uint_eq(b.len, strlen("n=42, s=hi, x=beef") + 2 + 1999);
    ck_assert_uint_eq(strlen(b.data), b.len);
    ck_assert(b.data[b.len - 1] == ']');
    strbuf_free(&b);
}
END_TEST

/* ---------------------------------------------------------------- pgarray */

START_TEST(pgarray_ints)
{
    struct strbuf b;
    strbuf_init(&b);
    pgarray_begin(&b);
    pgarray_item_int(&b, 1);
    pgarray_item_int(&b, 2);
    pgarray_item_int(&b, 3);
    pgarray_end(&b);
    ck_assert_str_eq(b.data, "{1,2,3}");

    pgarray_begin(&b); /* begin starts over */
    pgarray_item_int(&b, -7);
    pgarray_item_int(&b, INT64_MAX);
    pgarray_item_int(&b, INT64_MIN);
    pgarray_end(&b);
    ck_assert_str_eq(b.data, "{-7,9223372036854775807,-9223372036854775808}");
    strbuf_free(&b);
}
END_TEST

START_TEST(pgarray_empty)
{
    struct strbuf b;
    strbuf_init(&b);
    strbuf_append_str(&b, "leftover");
    pgarray_begin(&b);
    pgarray_end(&b);
    ck_assert_str_eq(b.data, "{}");
    ck_assert_uint_eq(b.len, 2);
    strbuf_free(&b);
}
END_TEST

START_TEST(pgarray_text_quoting)
{
    struct strbuf b;
    strbuf_init(&b);
    const char *s = "a\"b\\c";
    pgarray_begin(&b);
    pgarray_item_text(&b, s, strlen(s));
    pgarray_end(&b);
    ck_assert_str_eq(b.data, "{\"a\\\"b\\\\c\"}");

    /* delimiters, braces, spaces and the word NULL are data inside quotes */
    const char *items[] = {"", "x,y", "{z}", " sp ", "NULL"};
    pgarray_begin(&b);
    for (size_t i = 0; i < sizeof(items) / sizeof(items[0]); i++)
        pgarray_item_text(&b, items[i], strlen(items[i]));
    pgarray_end(&b);
    ck_assert_str_eq(b.data, "{\"\",\"x,y\",\"{z}\",\" sp \",\"NULL\"}");

    /* only n bytes are taken */
    pgarray_begin(&b);
    pgarray_item_text(&b, "abcdef", 3);
    pgarray_end(&b);
    ck_assert_str_eq(b.data, "{\"abc\"}");
    strbuf_free(&b);
}
END_TEST

START_TEST(pgarray_null_elements)
{
    struct strbuf b;
    strbuf_init(&b);
    pgarray_begin(&b);
    pgarray_item_text(&b, NULL, 0);
    pgarray_item_text(&b, "x", 1);
    pgarray_end(&b);
    ck_assert_str_eq(b.data, "{NULL,\"x\"}");

    pgarray_begin(&b);
    pgarray_item_int(&b, 5);
    pgarray_item_null(&b);
    pgarray_item_int(&b, 6);
    pgarray_end(&b);
    ck_assert_str_eq(b.data, "{5,NULL,6}");
    strbuf_free(&b);
}
END_TEST

START_TEST(pgarray_bools)
{
    struct strbuf b;
    strbuf_init(&b);
    pgarray_begin(&b);
    pgarray_item_bool(&b, true);
    pgarray_item_bool(&b, false);
    pgarray_end(&b);
    ck_assert_str_eq(b.data, "{t,f}");
    strbuf_free(&b);
}
END_TEST

START_TEST(pgarray_text_scrubbed)
{
    struct strbuf b;
    strbuf_init(&b);
    pgarray_begin(&b);
    pgarray_item_text(&b, "a\0b", 3);
    pgarray_item_text(&b, "\"\xff\\", 3);
    pgarray_end(&b);
    ck_assert_str_eq(b.data, "{\"a" FFFD "b\",\"\\\"" FFFD "\\\\\"}");
    ck_assert_uint_eq(b.len, strlen(b.data));
    strbuf_free(&b);
}
END_TEST

START_TEST(pgarray_large_text)
{
    /* every byte needs escaping: the literal doubles */
    size_t n = 100000;
    char *text = malloc(n);
    ck_assert_ptr_nonnull(text);
    for (size_t i = 0; i < n; i++)
        text[i] = i % 2 ? '"' : '\\';
    struct strbuf b;
    strbuf_init(&b);
    pgarray_begin(&b);
    pgarray_item_text(&b, text, n);
    pgarray_end(&b);
    ck_assert_uint_eq(b.len, 2 * n + 4);
    ck_assert_uint_eq(strlen(b.data), b.len);
    ck_assert_mem_eq(b.data, "{\"\\\\\\\"", 6);
    ck_assert_str_eq(b.data + b.len - 4, "\\\"\"}");
    strbuf_free(&b);
    free(text);
}
END_TEST

/* ---------------------------------------------------------------- utf8_scrub */

START_TEST(scrub_keeps_valid_text)
{
    const char *texts[] = {
        "plain ascii",
        "\xc5\xbc\xc3\xb3\xc5\x82w \xe2\x82\xac", /* żółw € */
        "\xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf",      /* 😀 U+10FFFF */
        "\xed\x9f\xbf \xee\x80\x80",              /* U+D7FF U+E000: around the surrogates */
        "",
    };
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        struct strbuf out;
        strbuf_init(&out);
        utf8_scrub(&out, texts[i], strlen(texts[i]));
        ck_assert_str_eq(out.data, texts[i]);
        ck_assert_uint_eq(out.len, strlen(texts[i]));
        strbuf_free(&out);
    }
}
END_TEST

START_TEST(scrub_nul_byte)
{
    struct strbuf out;
    strbuf_init(&out);
    utf8_scrub(&out, "a\0b", 3);
    ck_assert_str_eq(out.data, "a" FFFD "b");
    ck_assert_uint_eq(out.len, 5);
    strbuf_reset(&out);
    utf8_scrub(&out, "\0", 1);
    ck_assert_str_eq(out.data, FFFD);
    strbuf_free(&out);
}
END_TEST

START_TEST(scrub_single_invalid_byte)
{
    struct strbuf out;
    strbuf_init(&out);
    utf8_scrub(&out,
               "a\xff"
               "b",
               3);
    ck_assert_str_eq(out.data, "a" FFFD "b");
    strbuf_reset(&out);
    utf8_scrub(&out, "\x80", 1); /* lone continuation byte */
    ck_assert_str_eq(out.data, FFFD);
    strbuf_free(&out);
}
END_TEST

START_TEST(scrub_invalid_sequences)
{
    static const struct {
        const char *bytes;
        size_t len;
    } bad[] = {
        {"\xff", 1},
        {"\xfe", 1},
        {"\xc0\xaf", 2},         /* overlong '/' */
        {"\xc1\xbf", 2},         /* overlong */
        {"\xe0\x80\xaf", 3},     /* overlong, 3 bytes */
        {"\xf0\x80\x80\xaf", 4}, /* overlong, 4 bytes */
        {"\xed\xa0\x80", 3},     /* surrogate U+D800 */
        {"\xed\xbf\xbf", 3},     /* surrogate U+DFFF */
        {"\xf4\x90\x80\x80", 4}, /* above U+10FFFF */
        {"\xf8\x88\x80\x80\x80", 5},
        {"\xe2\x82", 2},     /* truncated € */
        {"\xf0\x9f\x98", 3}, /* truncated 😀 */
        {"\xc3", 1},         /* truncated 2-byte */
        {"\xc3\x28", 2},     /* bad continuation */
        {"\x00", 1},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        check_scrubbed(bad[i].bytes, bad[i].len);
}
END_TEST

START_TEST(scrub_truncated_at_end_of_input)
{
    /* a valid text cut in the middle of its last character */
    const char *text = "abc \xe2\x82\xac";
    struct strbuf out;
    strbuf_init(&out);
    utf8_scrub(&out, text, strlen(text) - 1);
    ck_assert(valid_utf8_without_nul(out.data, out.len));
    ck_assert_mem_eq(out.data, "abc ", 4);
    ck_assert_uint_ge(count_fffd(out.data, out.len), 1);
    strbuf_free(&out);
}
END_TEST

START_TEST(scrub_mixed_keeps_good_parts)
{
    const char in[] = "\xc5\xbc\xff\xe2\x82\xac\x00ok\xed\xa0\x80\xf0\x9f\x98\x80";
    struct strbuf out;
    strbuf_init(&out);
    utf8_scrub(&out, in, sizeof(in) - 1);
    ck_assert(valid_utf8_without_nul(out.data, out.len));
    ck_assert_mem_eq(out.data, "\xc5\xbc" FFFD "\xe2\x82\xac" FFFD "ok", 2 + 3 + 3 + 3 + 2);
    ck_assert(contains_bytes(out.data, out.len, "\xf0\x9f\x98\x80", 4));
    ck_assert_uint_eq(strlen(out.data), out.len);
    strbuf_free(&out);
}
END_TEST

/* scrub appends; it does not reset the buffer */
START_TEST(scrub_appends)
{
    struct strbuf out;
    strbuf_init(&out);
    strbuf_append_str(&out, "pre:");
    utf8_scrub(&out, "x\xff", 2);
    ck_assert_str_eq(out.data, "pre:x" FFFD);
    strbuf_free(&out);
}
END_TEST

/* Every single byte and every pair of bytes: the output is always valid. */
START_TEST(scrub_every_short_input_is_valid)
{
    struct strbuf out;
    strbuf_init(&out);
    for (int a = 0; a < 256; a++) {
        for (int c = 0; c < 256; c++) {
            char in[2] = {(char)a, (char)c};
            strbuf_reset(&out);
            utf8_scrub(&out, in, 2);
            ck_assert_msg(valid_utf8_without_nul(out.data, out.len), "%02x %02x: invalid output", a,
                          c);
            ck_assert_uint_eq(strlen(out.data), out.len);
        }
    }
    strbuf_free(&out);
}
END_TEST

/* A response body is kept up to its cap, and the buffer never grows past the
 * cap + 1: 1,000 responses of 64 KiB cost 64 MiB, not 128 (issue: memory). */
START_TEST(strbuf_capped_growth)
{
    struct strbuf b;
    strbuf_init(&b);
    static char chunk[16384];
    memset(chunk, 'x', sizeof(chunk));
    size_t kept = 0;
    for (int i = 0; i < 10; i++)
        kept += strbuf_append_capped(&b, chunk, sizeof(chunk), 65536);
    ck_assert_uint_eq(kept, 65536);
    ck_assert_uint_eq(b.len, 65536);
    ck_assert_uint_eq(b.cap, 65537);
    ck_assert_int_eq(b.data[65536], '\0');
    ck_assert_uint_eq(strbuf_append_capped(&b, "y", 1, 65536), 0);
    strbuf_free(&b);

    strbuf_init(&b);
    ck_assert_uint_eq(strbuf_append_capped(&b, "hello world", 11, 5), 5);
    ck_assert_str_eq(b.data, "hello");
    strbuf_free(&b);
}
END_TEST

START_TEST(strbuf_steal_and_shrink)
{
    struct strbuf b;
    strbuf_init(&b);
    strbuf_append_str(&b, "response body");
    char *taken = strbuf_steal(&b);
    ck_assert_str_eq(taken, "response body");
    ck_assert_uint_eq(b.len, 0);
    ck_assert_str_eq(b.data, "");
    strbuf_append_str(&b, "again");
    ck_assert_str_eq(b.data, "again");
    free(taken);

    static char big[100000];
    memset(big, 'z', sizeof(big));
    strbuf_append(&b, big, sizeof(big));
    strbuf_reset(&b);
    ck_assert_uint_ge(b.cap, sizeof(big));
    strbuf_shrink(&b, 4096);
    ck_assert_uint_eq(b.cap, 4096);
    strbuf_append_str(&b, "still usable");
    ck_assert_str_eq(b.data, "still usable");
    strbuf_free(&b);
}
END_TEST

Suite *strbuf_suite(void)
{
    Suite *s = suite_create("strbuf");

    TCase *tc = tcase_create("buffer");
    tcase_add_test(tc, strbuf_init_is_empty_string);
    tcase_add_test(tc, strbuf_append_and_reset);
    tcase_add_test(tc, strbuf_grows);
    tcase_add_test(tc, strbuf_printf_appends);
    tcase_add_test(tc, strbuf_capped_growth);
    tcase_add_test(tc, strbuf_steal_and_shrink);
    suite_add_tcase(s, tc);

    tc = tcase_create("pgarray");
    tcase_add_test(tc, pgarray_ints);
    tcase_add_test(tc, pgarray_empty);
    tcase_add_test(tc, pgarray_text_quoting);
    tcase_add_test(tc, pgarray_null_elements);
    tcase_add_test(tc, pgarray_bools);
    tcase_add_test(tc, pgarray_text_scrubbed);
    tcase_add_test(tc, pgarray_large_text);
    suite_add_tcase(s, tc);

    tc = tcase_create("utf8_scrub");
    tcase_add_test(tc, scrub_keeps_valid_text);
    tcase_add_test(tc, scrub_nul_byte);
    tcase_add_test(tc, scrub_single_invalid_byte);
    tcase_add_test(tc, scrub_invalid_sequences);
    tcase_add_test(tc, scrub_truncated_at_end_of_input);
    tcase_add_test(tc, scrub_mixed_keeps_good_parts);
    tcase_add_test(tc, scrub_appends);
    tcase_add_test(tc, scrub_every_short_input_is_valid);
    suite_add_tcase(s, tc);
    return s;
}
