/*
 * test_targets.c — relay/targets.h: Standard Webhooks signatures, the
 * header list of one delivery, targets_load (fed a PGresult built
 * client-side, pg_result.h, so no server is needed), and which targets a
 * claim names with how much room.
 *
 * Signatures are checked three ways: the test vector published with the
 * Standard Webhooks specification, a value computed by hand with
 * `openssl dgst -sha256 -hmac`, and an independent OpenSSL HMAC computed
 * here for inputs the other two do not cover (binary bodies, long keys).
 */
#include "unit.h"

#include "lib/log.h"
#include "pg_result.h"
#include "targets.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---------------------------------------------------------------- helpers */

/* base64(HMAC-SHA256(secret, id "." ts "." body)), prefixed "v1,". */
static void reference_signature(const unsigned char *secret, size_t secret_len, const char *id,
                                long long ts, const char *body, size_t body_len, char *out,
                                size_t out_size)
{
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int mac_len = 0;
    char head[600];
    int head_len = snprintf(head, sizeof(head), "%s.%lld.", id, ts);
    ck_assert_int_gt(head_len, 0);
    ck_assert_int_lt(head_len, (int)sizeof(head));
    size_t total = (size_t)head_len + body_len;
    unsigned char *msg = malloc(total + 1);
    ck_assert_ptr_nonnull(msg);
    memcpy(msg, head, (size_t)head_len);
    if (body_len)
        memcpy(msg + head_len, body, body_len);
    ck_assert_ptr_nonnull(HMAC(EVP_sha256(), secret, (int)secret_len, msg, total, mac, &mac_len));
    free(msg);
    ck_assert_uint_eq(mac_len, 32);
    unsigned char b64[64];
    int n = EVP_EncodeBlock(b64, mac, (int)mac_len);
    ck_assert_int_eq(n, 44);
    snprintf(out, out_size, "v1,%s", (const char *)b64);
}

static size_t slist_count(const struct curl_slist *list)
{
    size_t n = 0;
    for (; list; list = list->next)
        n++;
    return n;
}

static bool slist_has(const struct curl_slist *list, const char *line)
{
    for (; list; list = list->next)
        if (strcmp(list->data, line) == 0)
            return true;
    return false;
}

/* Number of lines whose header name (before ':') equals name, ignoring case. */
static size_t slist_count_named(const struct curl_slist *list, const char *name)
{
    size_t n = 0, len = strlen(name);
    for (; list; list = list->next)
        if (strncasecmp(list->data, name, len) == 0 && list->data[len] == ':')
            n++;
    return n;
}

static const char *slist_value(const struct curl_slist *list, const char *name)
{
    size_t len = strlen(name);
    for (; list; list = list->next)
        if (strncasecmp(list->data, name, len) == 0 && list->data[len] == ':')
            return list->data[len + 1] == ' ' ? list->data + len + 2 : list->data + len + 1;
    return NULL;
}

/* A Standard Webhooks verifier that knows one secret: the header value is a
 * space-separated list of "v1,<base64>" entries; it accepts if one of them
 * is the signature with its secret (the other entries are for other secrets). */
static bool verifier_accepts(const char *header_value, const char *known_secret, const char *id,
                             long long ts, const char *body)
{
    char want[128];
    reference_signature((const unsigned char *)known_secret, strlen(known_secret), id, ts, body,
                        strlen(body), want, sizeof(want));
    char *copy = strdup(header_value);
    ck_assert_ptr_nonnull(copy);
    bool accepted = false;
    char *save = NULL;
    for (char *entry = strtok_r(copy, " ", &save); entry; entry = strtok_r(NULL, " ", &save))
        if (strncmp(entry, "v1,", 3) == 0 && strcmp(entry, want) == 0)
            accepted = true;
    free(copy);
    return accepted;
}

static struct target hand_made_target(void)
{
    static char name[] = "billing";
    static char url[] = "http://127.0.0.1:1/charge";
    static char method[] = "POST";
    static char key_header[] = "Idempotency-Key";
    static char h1[] = "Authorization: Bearer abc";
    static char h2[] = "X-Tenant: t-42";
    static char *headers[] = {h1, h2, NULL};
    struct target t;
    memset(&t, 0, sizeof(t));
    t.name = name;
    t.url = url;
    t.method = method;
    t.key_header = key_header;
    t.static_headers = headers;
    t.key_ttl_ms = 86400000;
    t.timeout_ms = 1000;
    t.max_attempts = 5;
    t.enabled = true;
    t.present = true;
    return t;
}

/* ---------------------------------------------------------------- signature */

/* https://github.com/standard-webhooks/standard-webhooks (spec test vector) */
START_TEST(signature_standard_webhooks_vector)
{
    const char *b64_secret = "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"; /* whsec_ + this */
    unsigned char secret[64];
    int n = EVP_DecodeBlock(secret, (const unsigned char *)b64_secret, (int)strlen(b64_secret));
    ck_assert_int_eq(n, 24);
    const char *body = "{\"test\": 2432232314}";
    char out[128];
    webhook_signature(secret, 24, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body, strlen(body),
                      out, sizeof(out));
    ck_assert_str_eq(out, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
}
END_TEST

/* printf '%s' 'k1.1700000000.{"a":1}' | openssl dgst -sha256 -hmac topsecret -binary | base64 */
START_TEST(signature_hand_computed)
{
    const char *secret = "topsecret";
    const char *body = "{\"a\":1}";
    char out[128];
    webhook_signature((const unsigned char *)secret, strlen(secret), "k1", 1700000000, body,
                      strlen(body), out, sizeof(out));
    ck_assert_str_eq(out, "v1,MePl/tX6/7D1r53ADzW5fXBEAVzCGMfd2sMQTlzi7eA=");
    ck_assert_int_eq(strncmp(out, "v1,", 3), 0);
    ck_assert_uint_eq(strlen(out), 3 + 44);
}
END_TEST

START_TEST(signature_matches_reference)
{
    unsigned char secret[32];
    for (size_t i = 0; i < sizeof(secret); i++)
        secret[i] = (unsigned char)(i * 37 + 11); /* includes 0x00-free binary bytes */
    secret[5] = 0;                                /* and a NUL */

    char binary_body[300];
    for (size_t i = 0; i < sizeof(binary_body); i++)
        binary_body[i] = (char)(i & 0xff);

    char long_key[256];
    memset(long_key, 'k', 255);
    long_key[255] = '\0'; /* enqueue's limit: 255 bytes */

    struct {
        const char *id;
        long long ts;
        const char *body;
        size_t body_len;
    } cases[] = {
        {"order-1", 1700000000, "{}", 2},
        {"order-1", 1700000001, "{}", 2}, /* timestamp is signed */
        {"order-2", 1700000000, "{}", 2}, /* id is signed */
        {"k", 0, "", 0},                  /* empty body */
        {"bin", 1700000000, binary_body, sizeof(binary_body)},
        {long_key, 4102444800LL, "{\"big\":true}", 12},
    };
    char seen[sizeof(cases) / sizeof(cases[0])][128];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char got[128], want[128];
        webhook_signature(secret, sizeof(secret), cases[i].id, cases[i].ts, cases[i].body,
                          cases[i].body_len, got, sizeof(got));
        reference_signature(secret, sizeof(secret), cases[i].id, cases[i].ts, cases[i].body,
                            cases[i].body_len, want, sizeof(want));
        ck_assert_msg(strcmp(got, want) == 0, "case %zu: got %s, expected %s", i, got, want);
        memcpy(seen[i], got, sizeof(got));
        for (size_t j = 0; j < i; j++)
            ck_assert_msg(strcmp(seen[i], seen[j]) != 0, "cases %zu and %zu sign alike", j, i);
    }
}
END_TEST

START_TEST(signature_depends_on_secret)
{
    char a[128], b[128];
    webhook_signature((const unsigned char *)"s1", 2, "k", 1, "{}", 2, a, sizeof(a));
    webhook_signature((const unsigned char *)"s2", 2, "k", 1, "{}", 2, b, sizeof(b));
    ck_assert_str_ne(a, b);
}
END_TEST

START_TEST(signature_small_buffer_is_terminated)
{
    char out[10];
    memset(out, 'Z', sizeof(out));
    webhook_signature((const unsigned char *)"s", 1, "k", 1, "{}", 2, out, sizeof(out));
    ck_assert_uint_eq(strlen(out), sizeof(out) - 1);
    ck_assert_int_eq(strncmp(out, "v1,", 3), 0);
}
END_TEST

/* ---------------------------------------------------------------- headers */

START_TEST(headers_with_key_no_secret)
{
    struct target t = hand_made_target();
    struct curl_slist *h = target_request_headers(&t, "k1", "{}", 2, 1700000000);
    ck_assert_ptr_nonnull(h);
    ck_assert(slist_has(h, "Content-Type: application/json"));
    ck_assert(slist_has(h, "Idempotency-Key: k1"));
    ck_assert(slist_has(h, "Authorization: Bearer abc"));
    ck_assert(slist_has(h, "X-Tenant: t-42"));
    ck_assert_uint_eq(slist_count_named(h, "Idempotency-Key"), 1);
    ck_assert_uint_eq(slist_count_named(h, "Content-Type"), 1);
    ck_assert_uint_eq(slist_count_named(h, "webhook-id"), 0);
    ck_assert_uint_eq(slist_count_named(h, "webhook-timestamp"), 0);
    ck_assert_uint_eq(slist_count_named(h, "webhook-signature"), 0);
    for (const struct curl_slist *p = h; p; p = p->next)
        ck_assert_msg(strpbrk(p->data, "\r\n") == NULL, "CR/LF in header '%s'", p->data);
    curl_slist_free_all(h);
}
END_TEST

START_TEST(headers_custom_key_header_name)
{
    struct target t = hand_made_target();
    char name[] = "X-Request-Id";
    t.key_header = name;
    struct curl_slist *h = target_request_headers(&t, "order-9", "{}", 2, 1);
    ck_assert(slist_has(h, "X-Request-Id: order-9"));
    ck_assert_uint_eq(slist_count_named(h, "Idempotency-Key"), 0);
    curl_slist_free_all(h);
}
END_TEST

START_TEST(headers_without_key_header)
{
    struct target t = hand_made_target();
    t.key_header = NULL;
    struct curl_slist *h = target_request_headers(&t, "k1", "{}", 2, 1700000000);
    ck_assert(slist_has(h, "Content-Type: application/json"));
    ck_assert_uint_eq(slist_count_named(h, "Idempotency-Key"), 0);
    for (const struct curl_slist *p = h; p; p = p->next)
        ck_assert_msg(strstr(p->data, "k1") == NULL, "key leaked into '%s'", p->data);
    ck_assert(slist_has(h, "X-Tenant: t-42"));
    curl_slist_free_all(h);
}
END_TEST

START_TEST(headers_without_static_headers)
{
    struct target t = hand_made_target();
    t.static_headers = NULL;
    struct curl_slist *h = target_request_headers(&t, "k1", "{}", 2, 1700000000);
    ck_assert(slist_has(h, "Content-Type: application/json"));
    ck_assert(slist_has(h, "Idempotency-Key: k1"));
    ck_assert_uint_eq(slist_count_named(h, "X-Tenant"), 0);
    size_t with_none = slist_count(h);
    curl_slist_free_all(h);

    char *empty[] = {NULL};
    t.static_headers = empty;
    h = target_request_headers(&t, "k1", "{}", 2, 1700000000);
    ck_assert_uint_eq(slist_count(h), with_none);
    curl_slist_free_all(h);

    t = hand_made_target();
    h = target_request_headers(&t, "k1", "{}", 2, 1700000000);
    ck_assert_uint_eq(slist_count(h), with_none + 2);
    curl_slist_free_all(h);
}
END_TEST

START_TEST(headers_signed_when_secret_set)
{
    struct target t = hand_made_target();
    unsigned char secret[] = "topsecret";
    t.secrets[0] = (struct target_secret){secret, 9};
    t.secret_count = 1;
    const char *body = "{\"a\":1}";
    struct curl_slist *h = target_request_headers(&t, "k1", body, strlen(body), 1700000000);
    ck_assert(slist_has(h, "Content-Type: application/json"));
    ck_assert(slist_has(h, "Idempotency-Key: k1"));
    ck_assert(slist_has(h, "Authorization: Bearer abc"));
    ck_assert(slist_has(h, "webhook-id: k1"));
    ck_assert(slist_has(h, "webhook-timestamp: 1700000000"));
    ck_assert(slist_has(h, "webhook-signature: v1,MePl/tX6/7D1r53ADzW5fXBEAVzCGMfd2sMQTlzi7eA="));
    ck_assert_uint_eq(slist_count_named(h, "webhook-id"), 1);
    ck_assert_uint_eq(slist_count_named(h, "webhook-timestamp"), 1);
    ck_assert_uint_eq(slist_count_named(h, "webhook-signature"), 1);

    /* the signature header agrees with webhook_signature on the same input */
    char want[128];
    webhook_signature(secret, 9, "k1", 1700000000, body, strlen(body), want, sizeof(want));
    ck_assert_str_eq(slist_value(h, "webhook-signature"), want);
    curl_slist_free_all(h);

    /* signing does not depend on the key header: a keyless target still signs */
    t.key_header = NULL;
    h = target_request_headers(&t, "k1", body, strlen(body), 1700000000);
    ck_assert_uint_eq(slist_count_named(h, "Idempotency-Key"), 0);
    ck_assert(slist_has(h, "webhook-id: k1"));
    ck_assert_uint_eq(slist_count_named(h, "webhook-signature"), 1);
    curl_slist_free_all(h);
}
END_TEST

START_TEST(headers_signature_covers_body_length_exactly)
{
    struct target t = hand_made_target();
    unsigned char secret[] = "s";
    t.secrets[0] = (struct target_secret){secret, 1};
    t.secret_count = 1;
    const char *body = "{\"a\":1}trailing";
    struct curl_slist *h = target_request_headers(&t, "k", body, 7, 42);
    char want[128];
    reference_signature(secret, 1, "k", 42, body, 7, want, sizeof(want));
    ck_assert_str_eq(slist_value(h, "webhook-signature"), want);
    curl_slist_free_all(h);
}
END_TEST

START_TEST(headers_long_key_not_truncated)
{
    struct target t = hand_made_target();
    unsigned char secret[] = "s";
    t.secrets[0] = (struct target_secret){secret, 1};
    t.secret_count = 1;
    char key[256];
    memset(key, 'a', 255);
    key[255] = '\0';
    struct curl_slist *h = target_request_headers(&t, key, "{}", 2, 7);
    const char *value = slist_value(h, "Idempotency-Key");
    ck_assert_ptr_nonnull(value);
    ck_assert_str_eq(value, key);
    ck_assert_str_eq(slist_value(h, "webhook-id"), key);
    curl_slist_free_all(h);
}
END_TEST

/* Rotation: two secrets, two entries in one webhook-signature header, in the
 * order of the secrets; a verifier that knows only the old secret and one
 * that knows only the new one both accept; one that knows neither refuses. */
START_TEST(headers_two_secrets_two_entries)
{
    struct target t = hand_made_target();
    unsigned char old_secret[] = "old-secret", new_secret[] = "new-secret";
    t.secrets[0] = (struct target_secret){old_secret, 10};
    t.secrets[1] = (struct target_secret){new_secret, 10};
    t.secret_count = 2;
    const char *body = "{\"amount\":5}";
    struct curl_slist *h =
        target_request_headers(&t, "run-1:step-2", body, strlen(body), 1700000000);
    ck_assert_uint_eq(slist_count_named(h, "webhook-signature"), 1);
    ck_assert_uint_eq(slist_count_named(h, "webhook-id"), 1);
    ck_assert_uint_eq(slist_count_named(h, "webhook-timestamp"), 1);
    char want_old[128], want_new[128], want[300];
    reference_signature(old_secret, 10, "run-1:step-2", 1700000000, body, strlen(body), want_old,
                        sizeof(want_old));
    reference_signature(new_secret, 10, "run-1:step-2", 1700000000, body, strlen(body), want_new,
                        sizeof(want_new));
    snprintf(want, sizeof(want), "%s %s", want_old, want_new);
    const char *value = slist_value(h, "webhook-signature");
    ck_assert_str_eq(value, want);
    ck_assert(verifier_accepts(value, "old-secret", "run-1:step-2", 1700000000, body));
    ck_assert(verifier_accepts(value, "new-secret", "run-1:step-2", 1700000000, body));
    ck_assert(!verifier_accepts(value, "other-secret", "run-1:step-2", 1700000000, body));
    ck_assert(!verifier_accepts(value, "old-secret", "run-1:step-2", 1700000001, body));
    for (const struct curl_slist *p = h; p; p = p->next) {
        ck_assert_msg(strstr(p->data, "old-secret") == NULL, "a secret in '%s'", p->data);
        ck_assert_msg(strstr(p->data, "new-secret") == NULL, "a secret in '%s'", p->data);
    }
    curl_slist_free_all(h);

    /* the order of the variable is the order of the entries */
    t.secrets[0] = (struct target_secret){new_secret, 10};
    t.secrets[1] = (struct target_secret){old_secret, 10};
    h = target_request_headers(&t, "run-1:step-2", body, strlen(body), 1700000000);
    snprintf(want, sizeof(want), "%s %s", want_new, want_old);
    ck_assert_str_eq(slist_value(h, "webhook-signature"), want);
    curl_slist_free_all(h);
}
END_TEST

START_TEST(signature_header_list)
{
    ck_assert_ptr_null(webhook_signature_header(NULL, 0, "k", 1, "{}", 2));

    struct target_secret secrets[TARGET_MAX_SECRETS];
    char keys[TARGET_MAX_SECRETS][16];
    for (size_t i = 0; i < TARGET_MAX_SECRETS; i++) {
        snprintf(keys[i], sizeof(keys[i]), "secret-%zu", i);
        secrets[i] = (struct target_secret){(unsigned char *)keys[i], strlen(keys[i])};
    }
    char one[128];
    webhook_signature(secrets[0].bytes, secrets[0].len, "k", 7, "{}", 2, one, sizeof(one));
    char *value = webhook_signature_header(secrets, 1, "k", 7, "{}", 2);
    ck_assert_str_eq(value, one); /* one secret: exactly the single signature */
    free(value);

    /* all eight: eight entries of 47 bytes, single spaces, each verifying */
    value = webhook_signature_header(secrets, TARGET_MAX_SECRETS, "k", 7, "{}", 2);
    ck_assert_uint_eq(strlen(value), TARGET_MAX_SECRETS * 47 + TARGET_MAX_SECRETS - 1);
    for (size_t i = 0; i < TARGET_MAX_SECRETS; i++) {
        char want[128];
        reference_signature(secrets[i].bytes, secrets[i].len, "k", 7, "{}", 2, want, sizeof(want));
        ck_assert_int_eq(strncmp(value + i * 48, want, 47), 0);
        ck_assert(verifier_accepts(value, keys[i], "k", 7, "{}"));
        if (i > 0)
            ck_assert_int_eq(value[i * 48 - 1], ' ');
    }
    free(value);

    /* an empty body and a long key sign as the single form does */
    char long_key[256];
    memset(long_key, 'q', 255);
    long_key[255] = '\0';
    value = webhook_signature_header(secrets, 2, long_key, 1, "", 0);
    char want0[128], want1[128], want[300];
    webhook_signature(secrets[0].bytes, secrets[0].len, long_key, 1, "", 0, want0, sizeof(want0));
    webhook_signature(secrets[1].bytes, secrets[1].len, long_key, 1, "", 0, want1, sizeof(want1));
    snprintf(want, sizeof(want), "%s %s", want0, want1);
    ck_assert_str_eq(value, want);
    free(value);
}
END_TEST

START_TEST(retry_policy_from_target)
{
    struct target t = hand_made_target();
    t.backoff_base_ms = 500;
    t.backoff_cap_ms = 300000;
    t.reconcile_delay_ms = 30000;
    struct retry_policy p = target_retry_policy(&t);
    ck_assert(p.honours_keys);
    ck_assert_int_eq(p.key_ttl_ms, 86400000);
    ck_assert_int_eq(p.max_attempts, 5);
    ck_assert_int_eq(p.backoff_base_ms, 500);
    ck_assert_int_eq(p.backoff_cap_ms, 300000);
    ck_assert_int_eq(p.reconcile_delay_ms, 30000);
    t.key_header = NULL;
    p = target_retry_policy(&t);
    ck_assert(!p.honours_keys);
}
END_TEST

/* ---------------------------------------------------------------- targets_load */

/* A PGresult shaped like STMT_TARGETS, built client-side (no server). */
#define TARGET_COLUMNS 28

struct target_row {
    const char *v[TARGET_COLUMNS]; /* NULL = SQL NULL */
};

static struct target_row default_row(const char *name)
{
    struct target_row r = {{
        name,       "http://127.0.0.1:1/hook",
        "POST",     "Idempotency-Key",
        "86400000", NULL,
        "1000",     "5",
        "500",      "300000",
        "3000",     "16",
        "{}",       NULL,
        "t",        "259200000",
        NULL,       "10",
        "closed",   "f",
        NULL,       NULL,
        NULL,       "1.1",
        "http",     "auto",
        NULL,       NULL,
    }};
    return r;
}

static PGresult *targets_result(const struct target_row *rows, int count)
{
    static const char *names[TARGET_COLUMNS] = {
        "name",
        "url",
        "method",
        "key_header",
        "key_ttl_ms",
        "status_url",
        "timeout_ms",
        "max_attempts",
        "backoff_base_ms",
        "backoff_cap_ms",
        "reconcile_delay_ms",
        "max_in_flight",
        "headers",
        "secret_env",
        "enabled",
        "retry_for_ms",
        "rate_limit_per_s",
        "circuit_failure_threshold",
        "circuit",
        "paused",
        "ca_file",
        "client_cert_file",
        "client_key_file",
        "http_version",
        "protocol",
        "mcp_version",
        "auth_secret",
        "status_tool",
    };
    const char *cells[8 * TARGET_COLUMNS];
    ck_assert_int_le(count, 8);
    for (int r = 0; r < count; r++)
        memcpy(&cells[r * TARGET_COLUMNS], rows[r].v, sizeof(rows[r].v));
    PGresult *res = unit_pg_result(TARGET_COLUMNS, names, count, cells);
    return res;
}

/* targets_load warns about ignored headers and missing secrets, which these
 * tests provoke on purpose: keep the test output readable. */
static void quiet_logs(void)
{
    log_set_level(LOG_ERROR);
}

static struct target_set load_targets(const struct target_row *rows, int count)
{
    struct target_set set = {NULL, 0};
    PGresult *res = targets_result(rows, count);
    targets_load(&set, res);
    PQclear(res);
    return set;
}

/* An MCP target (0037): protocol, era, the bearer token read from the
 * variable auth_secret names (OUTBOX_SECRET_ only), the status tool. */
START_TEST(load_mcp_columns)
{
    quiet_logs();
    setenv("OUTBOX_SECRET_UNIT_UP", "tok-123", 1);
    setenv("UNIT_NOT_A_SECRET", "db-password", 1);
    struct target_row rows[3] = {default_row("up"), default_row("refused"), default_row("hook")};
    rows[0].v[24] = "mcp";
    rows[0].v[25] = "2025-11-25";
    rows[0].v[26] = "OUTBOX_SECRET_UNIT_UP";
    rows[0].v[27] = "ticket_status";
    rows[1].v[24] = "mcp";
    rows[1].v[26] = "UNIT_NOT_A_SECRET";
    rows[2].v[27] = "ignored"; /* an http target has no status tool */
    struct target_set set = load_targets(rows, 3);
    struct target *up = targets_find(&set, "up");
    ck_assert(up->mcp);
    ck_assert_int_eq(up->mcp_pref, UPSTREAM_PREF_LEGACY);
    ck_assert_str_eq(up->auth_header, "Authorization: Bearer tok-123");
    ck_assert_str_eq(up->status_tool, "ticket_status");
    struct target *refused = targets_find(&set, "refused");
    ck_assert(refused->mcp);
    ck_assert_int_eq(refused->mcp_pref, UPSTREAM_AUTO);
    ck_assert_ptr_null(refused->auth_header); /* not an OUTBOX_SECRET_ variable: never read */
    struct target *hook = targets_find(&set, "hook");
    ck_assert(!hook->mcp);
    ck_assert_ptr_null(hook->status_tool);
    ck_assert(targets_any_status_url(&set)); /* the status tool counts */
    targets_free(&set);
    unsetenv("OUTBOX_SECRET_UNIT_UP");
    unsetenv("UNIT_NOT_A_SECRET");
}
END_TEST

START_TEST(load_reads_every_column)
{
    struct target_row row = default_row("billing");
    row.v[5] = "http://127.0.0.1:1/status/{key}";
    row.v[12] = "{\"Authorization\": \"Bearer abc\"}";
    struct target_set set = load_targets(&row, 1);
    ck_assert_uint_eq(set.count, 1);
    struct target *t = targets_find(&set, "billing");
    ck_assert_ptr_nonnull(t);
    ck_assert_ptr_null(targets_find(&set, "other"));
    ck_assert_str_eq(t->url, "http://127.0.0.1:1/hook");
    ck_assert_str_eq(t->method, "POST");
    ck_assert_str_eq(t->key_header, "Idempotency-Key");
    ck_assert_int_eq(t->key_ttl_ms, 86400000);
    ck_assert_str_eq(t->status_url, "http://127.0.0.1:1/status/{key}");
    ck_assert_int_eq(t->timeout_ms, 1000);
    ck_assert_int_eq(t->max_attempts, 5);
    ck_assert_int_eq(t->backoff_base_ms, 500);
    ck_assert_int_eq(t->backoff_cap_ms, 300000);
    ck_assert_int_eq(t->reconcile_delay_ms, 3000);
    ck_assert_int_eq(t->max_in_flight, 16);
    ck_assert(t->enabled);
    ck_assert(t->present);
    ck_assert_int_eq(t->retry_for_ms, 259200000);
    ck_assert(t->rate_limit_per_s == 0);
    ck_assert_int_eq(t->circuit_failure_threshold, 10);
    ck_assert_int_eq(t->circuit, CIRCUIT_CLOSED);
    ck_assert(!t->paused);
    ck_assert_uint_eq(t->secret_count, 0);
    ck_assert_ptr_nonnull(t->static_headers);
    ck_assert_str_eq(t->static_headers[0], "Authorization: Bearer abc");
    ck_assert_ptr_null(t->static_headers[1]);
    targets_free(&set);
}
END_TEST

START_TEST(load_null_key_header)
{
    struct target_row row = default_row("legacy");
    row.v[3] = NULL;
    struct target_set set = load_targets(&row, 1);
    struct target *t = targets_find(&set, "legacy");
    ck_assert_ptr_null(t->key_header);
    ck_assert(!target_retry_policy(t).honours_keys);
    struct curl_slist *h = target_request_headers(t, "k1", "{}", 2, 1);
    ck_assert_uint_eq(slist_count_named(h, "Idempotency-Key"), 0);
    curl_slist_free_all(h);
    targets_free(&set);
}
END_TEST

START_TEST(load_drops_unsafe_static_headers)
{
    struct target_row row = default_row("t");
    row.v[12] = "{\"X-Ok\": \"1\", \"X-Bad\": \"a\\r\\nInjected: yes\", \"X-Bad\\nName\": \"v\","
                " \"Colon:Name\": \"v\", \"X-Num\": 5, \"X-Also-Ok\": \"two words\"}";
    struct target_set set = load_targets(&row, 1);
    struct target *t = targets_find(&set, "t");
    struct curl_slist *h = target_request_headers(t, "k1", "{}", 2, 1);
    ck_assert(slist_has(h, "X-Ok: 1"));
    ck_assert(slist_has(h, "X-Also-Ok: two words"));
    for (const struct curl_slist *p = h; p; p = p->next) {
        ck_assert_msg(strpbrk(p->data, "\r\n") == NULL, "CR/LF in header '%s'", p->data);
        ck_assert_msg(strstr(p->data, "Injected") == NULL, "injected header '%s'", p->data);
        ck_assert_msg(strncmp(p->data, "Colon", 5) != 0, "bad header name '%s'", p->data);
        ck_assert_msg(strncmp(p->data, "X-Num", 5) != 0, "non-string header '%s'", p->data);
    }
    curl_slist_free_all(h);
    targets_free(&set);

    /* not an object at all: no static headers, no crash */
    row.v[12] = "[1,2]";
    set = load_targets(&row, 1);
    ck_assert_ptr_nonnull(set.items[0]->static_headers);
    ck_assert_ptr_null(set.items[0]->static_headers[0]);
    targets_free(&set);
}
END_TEST

/* Secrets come only from OUTBOX_SECRET_* variables: a target row naming
 * DATABASE_URL (or PGPASSWORD) signs nothing with it and sends nothing of it. */
START_TEST(load_secret_env_prefix_only)
{
    ck_assert(target_secret_env_allowed("OUTBOX_SECRET_PAYMENTS"));
    ck_assert(!target_secret_env_allowed("OUTBOX_SECRET_"));
    ck_assert(!target_secret_env_allowed("DATABASE_URL"));
    ck_assert(!target_secret_env_allowed("PGPASSWORD"));
    ck_assert(!target_secret_env_allowed("OUTBOX_SECRETX"));
    ck_assert(!target_secret_env_allowed("OUTBOX_SECRET_A-B"));
    ck_assert(!target_secret_env_allowed(NULL));

    setenv("DATABASE_URL", "postgresql://relay:hunter2@db/outbox", 1);
    struct target_row row = default_row("leaky");
    row.v[13] = "DATABASE_URL";
    row.v[12] = "{\"Authorization\": {\"env\": \"DATABASE_URL\"}}";
    struct target_set set = load_targets(&row, 1);
    struct target *t = targets_find(&set, "leaky");
    ck_assert_uint_eq(t->secret_count, 0);
    struct curl_slist *h = target_request_headers(t, "k1", "{}", 2, 1);
    for (const struct curl_slist *p = h; p; p = p->next)
        ck_assert_msg(strstr(p->data, "hunter2") == NULL, "the database password was sent: '%s'",
                      p->data);
    ck_assert_ptr_null(slist_value(h, "webhook-signature"));
    ck_assert_ptr_null(slist_value(h, "Authorization"));
    curl_slist_free_all(h);
    targets_free(&set);
    unsetenv("DATABASE_URL");
}
END_TEST

/* A static header's value from the environment ({"env": ...}): the credential
 * is not in the table; a missing variable leaves the header out. */
START_TEST(load_header_value_from_env)
{
    setenv("OUTBOX_SECRET_UNIT_API_TOKEN", "Bearer s3cr3t", 1);
    struct target_row row = default_row("api");
    row.v[12] =
        "{\"Authorization\": {\"env\": \"OUTBOX_SECRET_UNIT_API_TOKEN\"}, \"X-Plain\": \"p\","
        " \"X-Missing\": {\"env\": \"OUTBOX_SECRET_UNIT_NOT_SET\"}, \"X-Odd\": {\"file\": \"x\"}}";
    struct target_set set = load_targets(&row, 1);
    struct target *t = targets_find(&set, "api");
    struct curl_slist *h = target_request_headers(t, "k1", "{}", 2, 1);
    ck_assert_str_eq(slist_value(h, "Authorization"), "Bearer s3cr3t");
    ck_assert_str_eq(slist_value(h, "X-Plain"), "p");
    ck_assert_ptr_null(slist_value(h, "X-Missing"));
    ck_assert_ptr_null(slist_value(h, "X-Odd"));
    curl_slist_free_all(h);
    targets_free(&set);

    setenv("OUTBOX_SECRET_UNIT_API_TOKEN", "a\r\nInjected: yes", 1);
    set = load_targets(&row, 1);
    h = target_request_headers(targets_find(&set, "api"), "k1", "{}", 2, 1);
    ck_assert_ptr_null(slist_value(h, "Authorization"));
    ck_assert_ptr_null(slist_value(h, "Injected"));
    curl_slist_free_all(h);
    targets_free(&set);
    unsetenv("OUTBOX_SECRET_UNIT_API_TOKEN");
}
END_TEST

/* End to end: a whsec_ secret from the environment, decoded and used as the
 * Standard Webhooks test vector prescribes. */
START_TEST(load_whsec_secret_signs_spec_vector)
{
    setenv("OUTBOX_SECRET_UNIT_TEST_WEBHOOK", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", 1);
    struct target_row row = default_row("signed");
    row.v[13] = "OUTBOX_SECRET_UNIT_TEST_WEBHOOK";
    struct target_set set = load_targets(&row, 1);
    struct target *t = targets_find(&set, "signed");
    ck_assert_uint_eq(t->secret_count, 1);
    ck_assert_uint_eq(t->secrets[0].len, 24);
    const char *body = "{\"test\": 2432232314}";
    struct curl_slist *h =
        target_request_headers(t, "msg_p5jXN8AQM9LWM0D4loKWxJek", body, strlen(body), 1614265330);
    ck_assert_str_eq(slist_value(h, "webhook-signature"),
                     "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    ck_assert_str_eq(slist_value(h, "webhook-id"), "msg_p5jXN8AQM9LWM0D4loKWxJek");
    ck_assert_str_eq(slist_value(h, "webhook-timestamp"), "1614265330");
    curl_slist_free_all(h);
    targets_free(&set);
    unsetenv("OUTBOX_SECRET_UNIT_TEST_WEBHOOK");
}
END_TEST

/* Base64 with padding: EVP_DecodeBlock counts the padding as data; the
 * secret must be the 16 real bytes. */
START_TEST(load_whsec_secret_with_padding)
{
    static const unsigned char raw[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    setenv("OUTBOX_SECRET_UNIT_TEST_WEBHOOK", "whsec_AAECAwQFBgcICQoLDA0ODw==", 1);
    struct target_row row = default_row("padded");
    row.v[13] = "OUTBOX_SECRET_UNIT_TEST_WEBHOOK";
    struct target_set set = load_targets(&row, 1);
    struct target *t = targets_find(&set, "padded");
    ck_assert_uint_eq(t->secret_count, 1);
    ck_assert_uint_eq(t->secrets[0].len, 16);
    ck_assert_mem_eq(t->secrets[0].bytes, raw, 16);
    targets_free(&set);

    setenv("OUTBOX_SECRET_UNIT_TEST_WEBHOOK", "whsec_AAECAwQFBgcICQoLDA0ODxA=", 1); /* 17 bytes */
    set = load_targets(&row, 1);
    ck_assert_uint_eq(set.items[0]->secret_count, 1);
    ck_assert_uint_eq(set.items[0]->secrets[0].len, 17);
    targets_free(&set);
    unsetenv("OUTBOX_SECRET_UNIT_TEST_WEBHOOK");
}
END_TEST

START_TEST(load_raw_and_missing_secret)
{
    setenv("OUTBOX_SECRET_UNIT_TEST_WEBHOOK", "topsecret", 1);
    struct target_row row = default_row("raw");
    row.v[13] = "OUTBOX_SECRET_UNIT_TEST_WEBHOOK";
    struct target_set set = load_targets(&row, 1);
    struct target *t = targets_find(&set, "raw");
    ck_assert_uint_eq(t->secret_count, 1);
    ck_assert_uint_eq(t->secrets[0].len, 9);
    ck_assert_mem_eq(t->secrets[0].bytes, "topsecret", 9);
    const char *body = "{\"a\":1}";
    struct curl_slist *h = target_request_headers(t, "k1", body, strlen(body), 1700000000);
    ck_assert_str_eq(slist_value(h, "webhook-signature"),
                     "v1,MePl/tX6/7D1r53ADzW5fXBEAVzCGMfd2sMQTlzi7eA=");
    curl_slist_free_all(h);
    targets_free(&set);

    /* the variable is named but not set: no secret, so no signature headers */
    unsetenv("OUTBOX_SECRET_UNIT_TEST_WEBHOOK");
    set = load_targets(&row, 1);
    t = targets_find(&set, "raw");
    ck_assert_uint_eq(t->secret_count, 0);
    h = target_request_headers(t, "k1", body, strlen(body), 1700000000);
    ck_assert_uint_eq(slist_count_named(h, "webhook-signature"), 0);
    ck_assert_uint_eq(slist_count_named(h, "webhook-id"), 0);
    curl_slist_free_all(h);
    targets_free(&set);
}
END_TEST

/* The variable holds several secrets separated by white space: each is
 * decoded on its own, in order, and each signs. */
START_TEST(load_several_secrets)
{
    static const unsigned char spec[24] = {0x31, 0xf2, 0x90, 0xf6, 0xbf, 0x06, 0x29, 0x8a,
                                           0xab, 0x4f, 0x08, 0xd4, 0x3c, 0x3f, 0x08, 0x2c,
                                           0xf6, 0x48, 0xa3, 0x62, 0xda, 0x2d, 0xa4, 0xb0};
    static const unsigned char raw16[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    struct target_row row = default_row("rotating");
    row.v[13] = "OUTBOX_SECRET_UNIT_TEST_WEBHOOK";

    /* old and new, one space apart */
    setenv("OUTBOX_SECRET_UNIT_TEST_WEBHOOK",
           "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw whsec_AAECAwQFBgcICQoLDA0ODw==", 1);
    struct target_set set = load_targets(&row, 1);
    struct target *t = targets_find(&set, "rotating");
    ck_assert_uint_eq(t->secret_count, 2);
    ck_assert_uint_eq(t->secrets[0].len, 24);
    ck_assert_mem_eq(t->secrets[0].bytes, spec, 24);
    ck_assert_uint_eq(t->secrets[1].len, 16);
    ck_assert_mem_eq(t->secrets[1].bytes, raw16, 16);
    const char *body = "{\"test\": 2432232314}";
    struct curl_slist *h =
        target_request_headers(t, "msg_p5jXN8AQM9LWM0D4loKWxJek", body, strlen(body), 1614265330);
    const char *value = slist_value(h, "webhook-signature");
    ck_assert_int_eq(strncmp(value, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE= v1,", 51), 0);
    char want[128];
    reference_signature(raw16, 16, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body, strlen(body),
                        want, sizeof(want));
    ck_assert_str_eq(value + 48, want);
    curl_slist_free_all(h);
    targets_free(&set);

    /* any white space separates and surrounds them; a raw one and a whsec_ one mix */
    setenv("OUTBOX_SECRET_UNIT_TEST_WEBHOOK", "\n  topsecret\t\twhsec_AAECAwQFBgcICQoLDA0ODw==\r\n",
           1);
    set = load_targets(&row, 1);
    t = targets_find(&set, "rotating");
    ck_assert_uint_eq(t->secret_count, 2);
    ck_assert_uint_eq(t->secrets[0].len, 9);
    ck_assert_mem_eq(t->secrets[0].bytes, "topsecret", 9);
    ck_assert_mem_eq(t->secrets[1].bytes, raw16, 16);
    body = "{\"a\":1}";
    h = target_request_headers(t, "k1", body, strlen(body), 1700000000);
    ck_assert_int_eq(strncmp(slist_value(h, "webhook-signature"),
                             "v1,MePl/tX6/7D1r53ADzW5fXBEAVzCGMfd2sMQTlzi7eA= v1,", 51),
                     0);
    curl_slist_free_all(h);
    targets_free(&set);
    unsetenv("OUTBOX_SECRET_UNIT_TEST_WEBHOOK");
}
END_TEST

/* An invalid secret among valid ones is left out (logged with its position,
 * never its value); the others sign. Only white space: no secret. */
START_TEST(load_invalid_secret_among_valid)
{
    struct target_row row = default_row("partly");
    row.v[13] = "OUTBOX_SECRET_UNIT_TEST_WEBHOOK";
    setenv("OUTBOX_SECRET_UNIT_TEST_WEBHOOK", "whsec_not*base64 topsecret whsec_ whsec_====", 1);
    struct target_set set = load_targets(&row, 1);
    struct target *t = targets_find(&set, "partly");
    ck_assert_uint_eq(t->secret_count, 1);
    ck_assert_mem_eq(t->secrets[0].bytes, "topsecret", 9);
    struct curl_slist *h = target_request_headers(t, "k1", "{\"a\":1}", 7, 1700000000);
    ck_assert_str_eq(slist_value(h, "webhook-signature"),
                     "v1,MePl/tX6/7D1r53ADzW5fXBEAVzCGMfd2sMQTlzi7eA=");
    curl_slist_free_all(h);
    targets_free(&set);

    /* "whsec_" alone would be an empty key: refused, as every other whsec_ here */
    setenv("OUTBOX_SECRET_UNIT_TEST_WEBHOOK", "whsec_ whsec_A===", 1);
    set = load_targets(&row, 1);
    ck_assert_uint_eq(set.items[0]->secret_count, 0);
    h = target_request_headers(set.items[0], "k1", "{}", 2, 1);
    ck_assert_uint_eq(slist_count_named(h, "webhook-signature"), 0);
    curl_slist_free_all(h);
    targets_free(&set);

    setenv("OUTBOX_SECRET_UNIT_TEST_WEBHOOK", " \t\n ", 1);
    set = load_targets(&row, 1);
    ck_assert_uint_eq(set.items[0]->secret_count, 0);
    targets_free(&set);
    unsetenv("OUTBOX_SECRET_UNIT_TEST_WEBHOOK");
}
END_TEST

/* At most TARGET_MAX_SECRETS: the first ones are used, the rest left out. */
START_TEST(load_at_most_eight_secrets)
{
    struct target_row row = default_row("crowded");
    row.v[13] = "OUTBOX_SECRET_UNIT_TEST_WEBHOOK";
    setenv("OUTBOX_SECRET_UNIT_TEST_WEBHOOK", "s1 s2 s3 s4 s5 s6 s7 s8 s9 s10", 1);
    struct target_set set = load_targets(&row, 1);
    struct target *t = targets_find(&set, "crowded");
    ck_assert_uint_eq(t->secret_count, TARGET_MAX_SECRETS);
    ck_assert_mem_eq(t->secrets[0].bytes, "s1", 2);
    ck_assert_uint_eq(t->secrets[7].len, 2);
    ck_assert_mem_eq(t->secrets[7].bytes, "s8", 2);
    struct curl_slist *h = target_request_headers(t, "k", "{}", 2, 1);
    const char *value = slist_value(h, "webhook-signature");
    ck_assert_uint_eq(strlen(value), 8 * 47 + 7);
    ck_assert(verifier_accepts(value, "s8", "k", 1, "{}"));
    ck_assert(!verifier_accepts(value, "s9", "k", 1, "{}"));
    curl_slist_free_all(h);

    /* a reload with fewer secrets frees the rest (ASan would see a leak) */
    setenv("OUTBOX_SECRET_UNIT_TEST_WEBHOOK", "only-one", 1);
    PGresult *res = targets_result(&row, 1);
    targets_load(&set, res);
    PQclear(res);
    ck_assert_uint_eq(t->secret_count, 1);
    ck_assert_mem_eq(t->secrets[0].bytes, "only-one", 8);
    targets_free(&set);
    unsetenv("OUTBOX_SECRET_UNIT_TEST_WEBHOOK");
}
END_TEST

/* The TLS files are kept as paths (NULL: none); a reload that clears them
 * clears them; a certificate without its key (the table refuses it) is
 * dropped with its key, never presented half. */
START_TEST(load_reads_tls_paths)
{
    struct target_row row = default_row("mtls");
    row.v[20] = "/etc/outbox/ca.pem";
    row.v[21] = "/etc/outbox/client.pem";
    row.v[22] = "/etc/outbox/client.key";
    struct target_set set = load_targets(&row, 1);
    struct target *t = targets_find(&set, "mtls");
    ck_assert_str_eq(t->ca_file, "/etc/outbox/ca.pem");
    ck_assert_str_eq(t->client_cert_file, "/etc/outbox/client.pem");
    ck_assert_str_eq(t->client_key_file, "/etc/outbox/client.key");

    row.v[20] = NULL;
    row.v[22] = NULL;
    PGresult *res = targets_result(&row, 1);
    targets_load(&set, res);
    PQclear(res);
    ck_assert_ptr_null(t->ca_file);
    ck_assert_ptr_null(t->client_cert_file);
    ck_assert_ptr_null(t->client_key_file);
    targets_free(&set);
}
END_TEST

/* http_version (0030): each of the table's values, and anything else (a
 * value of a later release, NULL) read as '1.1', which every target speaks;
 * a reload changes it in place. */
START_TEST(load_reads_http_version)
{
    ck_assert_int_eq(target_http_parse("1.1"), TARGET_HTTP_1_1);
    ck_assert_int_eq(target_http_parse("2"), TARGET_HTTP_2);
    ck_assert_int_eq(target_http_parse("2-prior-knowledge"), TARGET_HTTP_1_1);
    ck_assert_int_eq(target_http_parse("3"), TARGET_HTTP_1_1);
    ck_assert_int_eq(target_http_parse("2 "), TARGET_HTTP_1_1);
    ck_assert_int_eq(target_http_parse(""), TARGET_HTTP_1_1);
    ck_assert_int_eq(target_http_parse(NULL), TARGET_HTTP_1_1);

    struct target_row row = default_row("h2");
    struct target_set set = load_targets(&row, 1);
    struct target *t = targets_find(&set, "h2");
    ck_assert_int_eq(t->http, TARGET_HTTP_1_1);
    row.v[23] = "2";
    PGresult *res = targets_result(&row, 1);
    targets_load(&set, res);
    PQclear(res);
    ck_assert_int_eq(t->http, TARGET_HTTP_2);
    row.v[23] = NULL;
    res = targets_result(&row, 1);
    targets_load(&set, res);
    PQclear(res);
    ck_assert_int_eq(t->http, TARGET_HTTP_1_1);
    targets_free(&set);
}
END_TEST

/* A reload keeps the records (deliveries hold pointers to them), updates
 * them in place, and marks the ones that disappeared. */
START_TEST(load_reload_keeps_records)
{
    struct target_row rows[2] = {default_row("a"), default_row("b")};
    struct target_set set = {NULL, 0};
    PGresult *res = targets_result(rows, 2);
    targets_load(&set, res);
    PQclear(res);
    struct target *a = targets_find(&set, "a");
    struct target *b = targets_find(&set, "b");
    a->in_flight = 3;

    struct target_row again = default_row("a");
    again.v[1] = "http://127.0.0.1:2/new";
    res = targets_result(&again, 1);
    targets_load(&set, res);
    PQclear(res);
    ck_assert_uint_eq(set.count, 2);
    ck_assert_ptr_eq(targets_find(&set, "a"), a);
    ck_assert_ptr_eq(targets_find(&set, "b"), b);
    ck_assert_str_eq(a->url, "http://127.0.0.1:2/new");
    ck_assert_int_eq(a->in_flight, 3);
    ck_assert(a->present);
    ck_assert(!b->present);
    targets_free(&set);
    ck_assert_uint_eq(set.count, 0);
}
END_TEST

/* ---------------------------------------------------------------- room */

static struct target room_target(const char *name, int max_in_flight, int in_flight)
{
    struct target t;
    memset(&t, 0, sizeof(t));
    t.name = (char *)name;
    t.max_in_flight = max_in_flight;
    t.in_flight = in_flight;
    t.enabled = true;
    t.present = true;
    return t;
}

/* The cap is the smaller of the target's and the relay's; the room is the
 * window (which starts at the cap) minus what is in flight. */
START_TEST(cap_and_room)
{
    struct target a = room_target("a", 8, 3), b = room_target("b", 1024, 0);
    ck_assert_int_eq(target_cap(&a, 1024), 8);
    ck_assert_int_eq(target_cap(&b, 100), 100);
    struct target *items[2] = {&a, &b};
    struct target_set set = {items, 2};
    struct strbuf names, rooms;
    strbuf_init(&names);
    strbuf_init(&rooms);
    ck_assert_uint_eq(targets_claimable(&set, 100, 0.0, &names, &rooms, 256, -1, 1, false), 2);
    ck_assert_str_eq(names.data, "{\"a\",\"b\"}");
    ck_assert_str_eq(rooms.data, "{5,100}");
    /* Each room at most the claim's limit; the list starts where asked. */
    ck_assert_uint_eq(targets_claimable(&set, 100, 0.5, &names, &rooms, 10, -1, 1, false), 2);
    ck_assert_str_eq(names.data, "{\"b\",\"a\"}");
    ck_assert_str_eq(rooms.data, "{10,5}");
    /* Names only (next_due). */
    ck_assert_uint_eq(targets_claimable(&set, 100, 0.99, &names, NULL, 0, -1, 1, false), 2);
    ck_assert_str_eq(names.data, "{\"b\",\"a\"}");
    strbuf_free(&names);
    strbuf_free(&rooms);
}
END_TEST

/* Two claims on the wire at once (relay_db.c, "Two lanes"): the rooms one
 * asked for count as in flight for the other until its answer; the sweep
 * asks for half of each room, rounded up. */
START_TEST(claim_lanes_hold_their_rooms)
{
    struct target a = room_target("a", 8, 3), b = room_target("b", 1, 0);
    struct target *items[2] = {&a, &b};
    struct target_set set = {items, 2};
    struct strbuf names, rooms;
    strbuf_init(&names);
    strbuf_init(&rooms);
    ck_assert_uint_eq(targets_claimable(&set, 1024, 0.0, &names, &rooms, 256, 1, 2, false), 2);
    ck_assert_str_eq(rooms.data, "{3,1}");
    ck_assert_int_eq(a.claiming[1], 3);
    ck_assert_int_eq(b.claiming[1], 1);
    /* The floor claim, while the sweep is on the wire: what is left. */
    ck_assert_uint_eq(targets_claimable(&set, 1024, 0.0, &names, &rooms, 256, 0, 1, false), 1);
    ck_assert_str_eq(names.data, "{\"a\"}");
    ck_assert_str_eq(rooms.data, "{2}");
    ck_assert_int_eq(a.claiming[0], 2);
    /* Nothing left for anyone (next_due names none). */
    ck_assert_uint_eq(targets_claimable(&set, 1024, 0.0, &names, NULL, 0, -1, 1, false), 0);
    /* The sweep's answer came: its rooms are free again, the other's are not. */
    targets_unclaim(&set, 1);
    ck_assert_int_eq(a.claiming[1], 0);
    ck_assert_uint_eq(targets_claimable(&set, 1024, 0.0, &names, &rooms, 256, -1, 1, false), 2);
    ck_assert_str_eq(rooms.data, "{3,1}");
    /* The sweep leaves a gated target out, and holds none of its room. */
    targets_unclaim(&set, 0);
    targets_unclaim(&set, 1);
    b.rate_limit_per_s = 5;
    ck_assert_uint_eq(targets_claimable(&set, 1024, 0.0, &names, &rooms, 256, 1, 2, true), 1);
    ck_assert_str_eq(names.data, "{\"a\"}");
    ck_assert_int_eq(b.claiming[1], 0);
    b.rate_limit_per_s = 0;
    b.circuit = CIRCUIT_OPEN;
    ck_assert_uint_eq(targets_claimable(&set, 1024, 0.0, &names, &rooms, 256, 1, 2, true), 1);
    b.circuit = CIRCUIT_CLOSED;
    b.paused = true;
    ck_assert_uint_eq(targets_claimable(&set, 1024, 0.0, &names, &rooms, 256, 1, 2, true), 1);
    b.paused = false;
    ck_assert_uint_eq(targets_claimable(&set, 1024, 0.0, &names, &rooms, 256, 1, 2, true), 2);
    strbuf_free(&names);
    strbuf_free(&rooms);
}
END_TEST

/* Full, disabled and removed targets are not named at all. */
START_TEST(claimable_leaves_out_targets_without_room)
{
    struct target full = room_target("full", 2, 2), off = room_target("off", 8, 0),
                  gone = room_target("gone", 8, 0), ok = room_target("ok", 8, 1);
    off.enabled = false;
    gone.present = false;
    struct target *items[4] = {&full, &off, &gone, &ok};
    struct target_set set = {items, 4};
    struct strbuf names, rooms;
    strbuf_init(&names);
    strbuf_init(&rooms);
    ck_assert_uint_eq(targets_claimable(&set, 1024, 0.0, &names, &rooms, 256, -1, 1, false), 1);
    ck_assert_str_eq(names.data, "{\"ok\"}");
    ck_assert_str_eq(rooms.data, "{7}");
    struct target_set empty = {NULL, 0};
    ck_assert_uint_eq(targets_claimable(&empty, 1024, 0.7, &names, &rooms, 256, -1, 1, false), 0);
    ck_assert_str_eq(names.data, "{}");
    ck_assert_str_eq(rooms.data, "{}");
    strbuf_free(&names);
    strbuf_free(&rooms);
}
END_TEST

START_TEST(any_status_url)
{
    struct target a = room_target("a", 8, 0), b = room_target("b", 8, 0);
    struct target *items[2] = {&a, &b};
    struct target_set set = {items, 2};
    ck_assert(!targets_any_status_url(&set));
    b.status_url = (char *)"http://127.0.0.1:9/by-key/{key}";
    ck_assert(targets_any_status_url(&set));
    b.present = false; /* removed from the table since */
    ck_assert(!targets_any_status_url(&set));
}
END_TEST

Suite *targets_suite(void)
{
    Suite *s = suite_create("targets");

    TCase *tc = tcase_create("signature");
    tcase_add_test(tc, signature_standard_webhooks_vector);
    tcase_add_test(tc, signature_hand_computed);
    tcase_add_test(tc, signature_matches_reference);
    tcase_add_test(tc, signature_depends_on_secret);
    tcase_add_test(tc, signature_small_buffer_is_terminated);
    suite_add_tcase(s, tc);

    tc = tcase_create("headers");
    tcase_add_test(tc, headers_with_key_no_secret);
    tcase_add_test(tc, headers_custom_key_header_name);
    tcase_add_test(tc, headers_without_key_header);
    tcase_add_test(tc, headers_without_static_headers);
    tcase_add_test(tc, headers_signed_when_secret_set);
    tcase_add_test(tc, headers_signature_covers_body_length_exactly);
    tcase_add_test(tc, headers_long_key_not_truncated);
    tcase_add_test(tc, headers_two_secrets_two_entries);
    tcase_add_test(tc, signature_header_list);
    tcase_add_test(tc, retry_policy_from_target);
    suite_add_tcase(s, tc);

    tc = tcase_create("targets_load");
    tcase_add_checked_fixture(tc, quiet_logs, NULL);
    tcase_add_test(tc, load_reads_every_column);
    tcase_add_test(tc, load_mcp_columns);
    tcase_add_test(tc, load_null_key_header);
    tcase_add_test(tc, load_drops_unsafe_static_headers);
    tcase_add_test(tc, load_secret_env_prefix_only);
    tcase_add_test(tc, load_header_value_from_env);
    tcase_add_test(tc, load_whsec_secret_signs_spec_vector);
    tcase_add_test(tc, load_whsec_secret_with_padding);
    tcase_add_test(tc, load_raw_and_missing_secret);
    tcase_add_test(tc, load_several_secrets);
    tcase_add_test(tc, load_invalid_secret_among_valid);
    tcase_add_test(tc, load_at_most_eight_secrets);
    tcase_add_test(tc, load_reads_tls_paths);
    tcase_add_test(tc, load_reads_http_version);
    tcase_add_test(tc, load_reload_keeps_records);
    suite_add_tcase(s, tc);

    tc = tcase_create("room");
    tcase_add_test(tc, cap_and_room);
    tcase_add_test(tc, claimable_leaves_out_targets_without_room);
    tcase_add_test(tc, claim_lanes_hold_their_rooms);
    tcase_add_test(tc, any_status_url);
    suite_add_tcase(s, tc);
    return s;
}
