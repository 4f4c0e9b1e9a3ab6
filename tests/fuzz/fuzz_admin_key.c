/*
 * fuzz_admin_key — the parsers of the admin port's request target, and
 * admin_start's listen address (relay/admin/admin.c).
 *
 * The whole input is tried as:
 *   - the {key} of /v1/intents/{key} (admin_decode_key). An accepted key
 *     must be 1..255 bytes, equal an independent percent-decoding, be valid
 *     UTF-8 without C0/DEL/C1 controls (judged by fuzz.h's validator and by
 *     strbuf's utf8_scrub, which must leave it unchanged), and survive
 *     libcurl's escaping (what the relay does to a key for a status URL)
 *     and decoding again;
 *   - the query string (admin_parse_wait): -1, or 0..60000 ms;
 *   - "host:port" of --admin-listen (httpd_parse_listen): an accepted
 *     address is IPv4 or IPv6.
 */
#include "fuzz.h"

#include "admin/admin.h"
#include "lib/http_server.h"
#include "lib/strbuf.h"

#include <curl/curl.h>
#include <sys/socket.h>

static int hex(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c |= 0x20;
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Plain percent-decoding; -1 when malformed. */
static long reference_decode(const uint8_t *in, size_t n, unsigned char *out, size_t cap)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        int c = in[i];
        if (c == '%') {
            if (i + 2 >= n)
                return -1;
            int hi = hex(in[i + 1]), lo = hex(in[i + 2]);
            if (hi < 0 || lo < 0)
                return -1;
            c = hi * 16 + lo;
            i += 2;
        }
        if (len == cap)
            return (long)cap + 1;
        out[len++] = (unsigned char)c;
    }
    return (long)len;
}

static int has_control(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] < 0x20 || s[i] == 0x7F)
            return 1;
        if (s[i] == 0xC2 && i + 1 < n && s[i + 1] >= 0x80 && s[i + 1] <= 0x9F)
            return 1;
    }
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* The key. */
    char key[ADMIN_KEY_MAX_BYTES + 1];
    const char *problem = admin_decode_key((const char *)data, size, key);
    unsigned char ref[ADMIN_KEY_MAX_BYTES + 2];
    long ref_len = reference_decode(data, size, ref, sizeof(ref) - 1);
    if (ref_len < 0)
        FUZZ_CHECK(problem != NULL); /* malformed percent-encoding is refused */
    if (problem == NULL) {
        size_t len = strlen(key);
        FUZZ_CHECK(len >= 1 && len <= ADMIN_KEY_MAX_BYTES);
        FUZZ_CHECK(ref_len == (long)len && memcmp(ref, key, len) == 0);
        FUZZ_CHECK(fuzz_utf8_valid((const unsigned char *)key, len, 0));
        FUZZ_CHECK(!has_control((const unsigned char *)key, len));
        struct strbuf scrubbed;
        strbuf_init(&scrubbed);
        utf8_scrub(&scrubbed, key, len);
        FUZZ_CHECK(scrubbed.len == len && memcmp(scrubbed.data, key, len) == 0);
        strbuf_free(&scrubbed);

        char *escaped = curl_easy_escape(NULL, key, (int)len);
        FUZZ_CHECK(escaped != NULL);
        char again[ADMIN_KEY_MAX_BYTES + 1];
        FUZZ_CHECK(admin_decode_key(escaped, strlen(escaped), again) == NULL);
        FUZZ_CHECK(strcmp(again, key) == 0);
        curl_free(escaped);
    } else if (ref_len >= 1 && ref_len <= ADMIN_KEY_MAX_BYTES &&
               fuzz_utf8_valid(ref, (size_t)ref_len, 0) && !has_control(ref, (size_t)ref_len)) {
        FUZZ_CHECK(!"a well-formed key was refused");
    }

    /* The query string. */
    long wait_ms = admin_parse_wait((const char *)data, size);
    FUZZ_CHECK(wait_ms >= -1 && wait_ms <= 60000);

    /* The listen address. */
    char *listen = fuzz_strndup(data, size);
    struct sockaddr_storage addr;
    memset(&addr, 0, sizeof(addr));
    if (httpd_parse_listen(listen, &addr) == NULL)
        FUZZ_CHECK(addr.ss_family == AF_INET || addr.ss_family == AF_INET6);
    free(listen);
    return 0;
}
