/*
 * fuzz_response — what a target sends back: the Retry-After value
 * (outcome_parse_retry_after), the header and body callbacks libcurl calls
 * (relay/deliver.c), and the path of a response body into the outcomes
 * batch (strbuf_steal, pgarray_item_text) and into the decision
 * (flow_observe, outcome_decide).
 *
 * Input: byte 0 picks the body limit (max_response_bytes), byte 1 the size
 * of the body chunks; the rest is the response text. It is tried as a
 * Retry-After value, as header lines (split at LF, as libcurl hands them
 * over), as one "Retry-After: <text>" header, and as the body.
 * Properties: a Retry-After is -1 or 0..86400000 ms, and delay-seconds mean
 * exactly that; callbacks consume every byte; the kept body is the first
 * min(limit, length) bytes; the array element is valid UTF-8 without NUL.
 */
#include "fuzz.h"

#include "deliver.h"
#include "flow.h"
#include "lib/log.h"
#include "outcome.h"
#include "lib/strbuf.h"

#include <ctype.h>

#define NOW_MS INT64_C(1767225600000) /* 2026-01-01T00:00:00Z */
#define DAY_MS 86400000

static const size_t limits[] = {0, 1, 2, 3, 16, 255, 256, 257, 1000, 4096, 65536, 16777216};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    log_set_level(LOG_ERROR);
    return 0;
}

/* delay-seconds as RFC 9110 has it (with surrounding blanks): the value in
 * ms, capped at a day; -2 when the text is not of that form. */
static int64_t reference_seconds(const char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    if (!isdigit((unsigned char)*s))
        return -2;
    int64_t v = 0;
    while (isdigit((unsigned char)*s)) {
        if (v <= 86400)
            v = v * 10 + (*s - '0');
        s++;
    }
    while (isspace((unsigned char)*s))
        s++;
    if (*s != '\0')
        return -2;
    return (v > 86400 ? 86400 : v) * 1000;
}

static void check_retry_after(int64_t ms)
{
    FUZZ_CHECK(ms == -1 || (ms >= 0 && ms <= DAY_MS));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t limit = limits[data[0] % (sizeof(limits) / sizeof(limits[0]))];
    size_t chunk = (size_t)(data[1] % 64) + 1;
    const char *text = (const char *)data + 2;
    size_t n = size - 2;
    char *value = fuzz_strndup((const uint8_t *)text, n);

    /* Retry-After on its own. */
    int64_t ms = outcome_parse_retry_after(value, NOW_MS);
    check_retry_after(ms);
    int64_t expected = reference_seconds(value);
    if (expected != -2)
        FUZZ_CHECK(ms == expected);

    struct delivery d;
    memset(&d, 0, sizeof(d));
    d.retry_after_ms = -1;
    d.body_limit = limit;
    strbuf_init(&d.body);

    /* Header lines, as libcurl delivers them (each with its line end). */
    for (size_t start = 0; start < n;) {
        const char *lf = memchr(text + start, '\n', n - start);
        size_t len = lf ? (size_t)(lf - (text + start)) + 1 : n - start;
        char *line = fuzz_strndup((const uint8_t *)text + start, len);
        FUZZ_CHECK(delivery_header_callback(line, 1, len, &d) == len);
        check_retry_after(d.retry_after_ms);
        free(line);
        start += len;
    }
    /* One Retry-After header with the whole text as its value. */
    size_t line_len = strlen("Retry-After: ") + n + 2;
    char *line = malloc(line_len + 1);
    snprintf(line, line_len + 1, "Retry-After: %s\r\n", value);
    line_len = strlen(line); /* the text may hold NUL bytes */
    d.retry_after_ms = -1;
    FUZZ_CHECK(delivery_header_callback(line, 1, line_len, &d) == line_len);
    check_retry_after(d.retry_after_ms);
    if (line_len < 256 && expected != -2)
        FUZZ_CHECK(d.retry_after_ms == expected);
    free(line);

    /* The body, in chunks. */
    for (size_t off = 0; off < n; off += chunk) {
        size_t len = n - off < chunk ? n - off : chunk;
        FUZZ_CHECK(delivery_body_callback((char *)text + off, 1, len, &d) == len);
    }
    size_t kept = n < limit ? n : limit;
    FUZZ_CHECK(d.body.len == kept);
    FUZZ_CHECK(kept == 0 || memcmp(d.body.data, text, kept) == 0);
    FUZZ_CHECK(d.body.data[d.body.len] == '\0');

    /* Into the outcomes batch, as the relay records it. */
    size_t body_len = d.body.len;
    char *body = strbuf_steal(&d.body);
    struct strbuf arr;
    strbuf_init(&arr);
    pgarray_begin(&arr);
    pgarray_item_text(&arr, body, body_len);
    pgarray_end(&arr);
    FUZZ_CHECK(arr.len == strlen(arr.data)); /* no NUL inside */
    FUZZ_CHECK(fuzz_utf8_valid((const unsigned char *)arr.data, arr.len, 0));
    strbuf_free(&arr);
    free(body);
    strbuf_free(&d.body);

    /* And into the decision. */
    struct target_flow flow;
    memset(&flow, 0, sizeof(flow));
    struct flow_actions act =
        flow_observe(&flow, FLOW_OVERLOADED, false, 429, d.retry_after_ms, 16, 5, (uint64_t)NOW_MS);
    FUZZ_CHECK(act.pause_ms >= 0);
    struct retry_policy policy = {
        .honours_keys = true,
        .key_ttl_ms = DAY_MS,
        .max_attempts = 0,
        .retry_for_ms = 3 * (int64_t)DAY_MS,
        .backoff_base_ms = 500,
        .backoff_cap_ms = 300000,
        .reconcile_delay_ms = 30000,
    };
    struct intent_progress progress = {
        .attempt = 1 + data[1] % 40,
        .first_attempt_ms = NOW_MS - 1000,
        .now_ms = NOW_MS,
        .retry_after_ms = ms,
    };
    struct decision dec = outcome_decide(CLASS_RETRY_LATER, &policy, &progress, 0.5);
    FUZZ_CHECK(dec.delay_ms >= 0 && dec.delay_ms <= DAY_MS);
    if (ms >= 0)
        FUZZ_CHECK(dec.next_state != STATE_PENDING || dec.delay_ms >= ms);
    free(value);
    return 0;
}
