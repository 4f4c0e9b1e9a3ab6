/*
 * fuzz_status_url — the status URL of a key for reconciliation
 * (status_url_for_key in relay/deliver.c): a template from outbox.targets,
 * every {key} replaced by the percent-encoded key.
 *
 * Input: the template up to the first LF, the key after it (both end at a
 * NUL byte, as C strings do). Properties: the result is the template with
 * each non-overlapping {key}, left to right, replaced by the key encoded as
 * RFC 3986 says (unreserved bytes as they are, every other byte %XX), so it
 * adds no byte that is not in the template or [A-Za-z0-9%._~-]; with a key
 * the admin port accepts, its decoding gives the key back.
 */
#include "fuzz.h"

#include "admin/admin.h"
#include "deliver.h"
#include "lib/strbuf.h"

#include <stdbool.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    return 0;
}

static bool unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~';
}

static void encode(struct strbuf *out, const char *key)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
        if (unreserved(*p)) {
            strbuf_append(out, (const char *)p, 1);
        } else {
            char esc[3] = {'%', hex[*p >> 4], hex[*p & 15]};
            strbuf_append(out, esc, 3);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_strndup(data, size);
    char *lf = memchr(text, '\n', size);
    const char *template_url = text;
    const char *key = "";
    if (lf) {
        *lf = '\0';
        key = lf + 1;
    }

    char *url = status_url_for_key(template_url, key);
    FUZZ_CHECK(url != NULL);

    struct strbuf encoded, expected;
    strbuf_init(&encoded);
    strbuf_init(&expected);
    encode(&encoded, key);
    for (const char *p = template_url;;) {
        const char *hole = strstr(p, "{key}");
        if (hole == NULL) {
            strbuf_append_str(&expected, p);
            break;
        }
        strbuf_append(&expected, p, (size_t)(hole - p));
        strbuf_append(&expected, encoded.data, encoded.len);
        p = hole + 5;
    }
    FUZZ_CHECK(strcmp(url, expected.data) == 0);

    /* A template that is exactly "{key}" gives the encoded key: the admin
     * port's decoder must give the key back when it accepts it at all. */
    char *bare = status_url_for_key("{key}", key);
    FUZZ_CHECK(bare != NULL && strcmp(bare, encoded.data) == 0);
    char decoded[ADMIN_KEY_MAX_BYTES + 1];
    if (admin_decode_key(bare, strlen(bare), decoded) == NULL)
        FUZZ_CHECK(strcmp(decoded, key) == 0);

    free(bare);
    free(url);
    strbuf_free(&encoded);
    strbuf_free(&expected);
    free(text);
    return 0;
}
