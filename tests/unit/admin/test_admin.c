/*
 * test_admin.c — relay/admin/admin.h's parsers, and the one UTF-8 validator they
 * rely on (relay/lib/strbuf.h: utf8_sequence_length, utf8_valid, utf8_scrub).
 *
 * UTF-8 edge cases, as RFC 3629 has them: the smallest and largest code
 * point of each length are accepted; overlong forms (C0 80, E0 9F BF,
 * F0 8F BF BF), surrogates (ED A0 80 .. ED BF BF), code points over
 * U+10FFFF (F4 90 80 80, F5..FF), stray continuation bytes and truncated
 * sequences are refused. U+0000 is valid UTF-8; the key refuses it as a
 * control character, and utf8_scrub replaces it.
 */
#include "../unit.h"

#include "admin/admin.h"
#include "lib/pg.h"
#include "lib/strbuf.h"

#include <string.h>
#include <sys/socket.h>

struct utf8_case {
    const char *bytes;
    size_t len;
    bool valid;
};

#define CASE(literal, valid)                                                                       \
    {                                                                                              \
        literal, sizeof(literal) - 1, valid                                                        \
    }

static const struct utf8_case utf8_cases[] = {
    CASE("a", true),
    CASE("\x7F", true),
    CASE("\xC2\x80", true),              /* U+0080, the smallest of 2 bytes */
    CASE("\xDF\xBF", true),              /* U+07FF */
    CASE("\xE0\xA0\x80", true),          /* U+0800 */
    CASE("\xED\x9F\xBF", true),          /* U+D7FF, just below the surrogates */
    CASE("\xEE\x80\x80", true),          /* U+E000, just above them */
    CASE("\xEF\xBF\xBF", true),          /* U+FFFF */
    CASE("\xF0\x90\x80\x80", true),      /* U+10000 */
    CASE("\xF4\x8F\xBF\xBF", true),      /* U+10FFFF, the largest */
    CASE("\xC0\x80", false),             /* overlong NUL */
    CASE("\xC1\xBF", false),             /* overlong U+007F */
    CASE("\xE0\x80\x80", false),         /* overlong */
    CASE("\xE0\x9F\xBF", false),         /* overlong U+07FF */
    CASE("\xF0\x80\x80\x80", false),     /* overlong */
    CASE("\xF0\x8F\xBF\xBF", false),     /* overlong U+FFFF */
    CASE("\xED\xA0\x80", false),         /* U+D800, a surrogate */
    CASE("\xED\xBF\xBF", false),         /* U+DFFF */
    CASE("\xF4\x90\x80\x80", false),     /* U+110000 */
    CASE("\xF5\x80\x80\x80", false),     /* beyond U+10FFFF by the first byte */
    CASE("\xF7\xBF\xBF\xBF", false),     /* U+1FFFFF */
    CASE("\xF8\x88\x80\x80\x80", false), /* 5-byte form */
    CASE("\xFF", false),
    CASE("\x80", false),         /* stray continuation */
    CASE("\xC2", false),         /* truncated */
    CASE("\xE0\xA0", false),     /* truncated */
    CASE("\xF0\x90\x80", false), /* truncated */
    CASE("\xC2\x41", false),     /* continuation missing */
    CASE("\xE0\xA0\xC0", false), /* continuation missing */
};

START_TEST(utf8_edge_cases)
{
    for (size_t i = 0; i < sizeof(utf8_cases) / sizeof(utf8_cases[0]); i++) {
        const struct utf8_case *c = &utf8_cases[i];
        ck_assert_msg(utf8_valid(c->bytes, c->len) == c->valid, "case %zu", i);
        size_t len = utf8_sequence_length((const unsigned char *)c->bytes, c->len);
        ck_assert_msg(c->valid ? len == c->len : len < c->len, "case %zu: %zu", i, len);
    }
    ck_assert(utf8_valid("", 0));
    ck_assert(utf8_valid("a\0b", 3)); /* U+0000 is UTF-8 */
}
END_TEST

/* The scrub keeps what is valid, and replaces NUL and each bad byte. */
START_TEST(utf8_scrub_agrees_with_the_validator)
{
    for (size_t i = 0; i < sizeof(utf8_cases) / sizeof(utf8_cases[0]); i++) {
        const struct utf8_case *c = &utf8_cases[i];
        struct strbuf out;
        strbuf_init(&out);
        utf8_scrub(&out, c->bytes, c->len);
        ck_assert(utf8_valid(out.data, out.len));
        bool unchanged = out.len == c->len && memcmp(out.data, c->bytes, c->len) == 0;
        ck_assert_msg(unchanged == c->valid, "case %zu", i);
        strbuf_free(&out);
    }
    struct strbuf out;
    strbuf_init(&out);
    utf8_scrub(&out, "a\0b", 3);
    ck_assert_str_eq(out.data, "a\xEF\xBF\xBD"
                               "b");
    strbuf_free(&out);
}
END_TEST

/* The key of /v1/intents/{key} uses the same validator. */
START_TEST(key_utf8_edge_cases)
{
    for (size_t i = 0; i < sizeof(utf8_cases) / sizeof(utf8_cases[0]); i++) {
        const struct utf8_case *c = &utf8_cases[i];
        char encoded[64] = "k", out[ADMIN_KEY_MAX_BYTES + 1];
        for (size_t j = 0; j < c->len; j++)
            snprintf(encoded + strlen(encoded), 4, "%%%02X", (unsigned char)c->bytes[j]);
        const char *problem = admin_decode_key(encoded, strlen(encoded), out);
        bool control = c->bytes[0] == 0x7F ||
                       ((unsigned char)c->bytes[0] == 0xC2 && (unsigned char)c->bytes[1] < 0xA0);
        if (c->valid && !control)
            ck_assert_msg(problem == NULL, "case %zu: %s", i, problem);
        else
            ck_assert_msg(problem != NULL, "case %zu accepted", i);
        if (!c->valid)
            ck_assert_str_eq(problem, "the key is not valid UTF-8");
    }
}
END_TEST

START_TEST(key_decoding)
{
    char out[ADMIN_KEY_MAX_BYTES + 1];
    ck_assert_ptr_null(admin_decode_key("run%3A7%2Fstep%202", 18, out));
    ck_assert_str_eq(out, "run:7/step 2");
    ck_assert_str_eq(admin_decode_key("", 0, out), "the key is empty");
    ck_assert_str_eq(admin_decode_key("a%0Ab", 5, out), "the key contains a control character");
    ck_assert_str_eq(admin_decode_key("a%00b", 5, out), "the key contains a control character");
    ck_assert_str_eq(admin_decode_key("a%C2%85", 7, out), "the key contains a control character");
    ck_assert_str_eq(admin_decode_key("a%zz", 4, out), "malformed percent-encoding in the key");
    ck_assert_str_eq(admin_decode_key("a%4", 3, out), "malformed percent-encoding in the key");
    char long_key[300];
    memset(long_key, 'x', sizeof(long_key));
    ck_assert_ptr_null(admin_decode_key(long_key, ADMIN_KEY_MAX_BYTES, out));
    ck_assert_str_eq(admin_decode_key(long_key, ADMIN_KEY_MAX_BYTES + 1, out),
                     "the key is longer than 255 bytes");
}
END_TEST

START_TEST(wait_parsing)
{
    ck_assert_int_eq(admin_parse_wait("", 0), 0);
    ck_assert_int_eq(admin_parse_wait("wait=30s", 8), 30000);
    ck_assert_int_eq(admin_parse_wait("x=1&wait=500ms", 14), 500);
    ck_assert_int_eq(admin_parse_wait("wait=2", 6), 2000);
    ck_assert_int_eq(admin_parse_wait("wait=3600s", 10), 60000);
    ck_assert_int_eq(admin_parse_wait("wait=-1", 7), -1);
    ck_assert_int_eq(admin_parse_wait("wait=1h", 7), -1);
    ck_assert_int_eq(admin_parse_wait("wait=", 5), 0); /* no value: no wait field */
    /* a wait over the cap is cut, and says so (Outbox-Wait-Capped) */
    ck_assert(admin_wait_capped("wait=90s", 8));
    ck_assert(admin_wait_capped("wait=60001ms", 12));
    ck_assert(admin_wait_capped("wait=99999999999999999s", 23));
    ck_assert_int_eq(admin_parse_wait("wait=99999999999999999s", 23), 60000);
    ck_assert(!admin_wait_capped("wait=60s", 8));
    ck_assert(!admin_wait_capped("wait=60000ms", 12));
    ck_assert(!admin_wait_capped("x=1", 3));
    ck_assert(!admin_wait_capped("wait=1h", 7));
}
END_TEST

START_TEST(database_parsing)
{
    char name[ADMIN_DATABASE_MAX_BYTES + 1];
    ck_assert_int_eq(admin_parse_database("", 0, name), 0);
    ck_assert_int_eq(admin_parse_database("wait=1s", 7, name), 0);
    ck_assert_int_eq(admin_parse_database("wait=1s&database=eu-1_a", 23, name), 1);
    ck_assert_str_eq(name, "eu-1_a");
    ck_assert_int_eq(admin_parse_database("database=", 9, name), -1);
    ck_assert_int_eq(admin_parse_database("database=Eu", 11, name), -1);
    ck_assert_int_eq(admin_parse_database("database=a%1F", 13, name), -1);
    char long_query[96] = "database=";
    memset(long_query + 9, 'a', 64);
    ck_assert_int_eq(admin_parse_database(long_query, 73, name), -1);
    ck_assert_int_eq(admin_parse_database(long_query, 72, name), 1);
}
END_TEST

START_TEST(database_reasons_name_no_host)
{
    ck_assert_str_eq(pg_public_reason(NULL), "connection failed");
    ck_assert_str_eq(pg_public_reason("connection to server at \"db\" (10.0.0.5), port "
                                      "5432 failed: Connection refused"),
                     "connection refused");
    ck_assert_str_eq(pg_public_reason("FATAL:  password authentication failed for user \"r\""),
                     "authentication failed");
    ck_assert_str_eq(pg_public_reason("FATAL:  role \"x\" does not exist"),
                     "authentication failed");
    ck_assert_str_eq(pg_public_reason("something new"), "connection failed");
}
END_TEST

Suite *admin_suite(void)
{
    Suite *s = suite_create("admin");
    TCase *tc = tcase_create("utf8");
    tcase_add_test(tc, utf8_edge_cases);
    tcase_add_test(tc, utf8_scrub_agrees_with_the_validator);
    tcase_add_test(tc, key_utf8_edge_cases);
    suite_add_tcase(s, tc);
    tc = tcase_create("parsers");
    tcase_add_test(tc, key_decoding);
    tcase_add_test(tc, wait_parsing);
    tcase_add_test(tc, database_parsing);
    tcase_add_test(tc, database_reasons_name_no_host);
    suite_add_tcase(s, tc);
    return s;
}
