/*
 * targets.c — targets as the relay sees them.
 *
 * Security: targets are registered by admins; an intent can only name one.
 * The signing secret is never in the database: the row names an environment
 * variable (secret_env) and the relay reads it here. A secret of the form
 * "whsec_<base64>" is decoded as Standard Webhooks prescribes; any other value
 * is used as raw bytes. Static headers may not carry CR or LF (no header
 * injection), and neither may keys (enqueue refuses control characters). A
 * static header's value may be {"env": "OUTBOX_SECRET_..."} instead of a
 * string, read here, so that credentials stay out of the table. Secrets come
 * only from variables named OUTBOX_SECRET_*: a row naming DATABASE_URL must
 * not turn the database password into a signing key or a header.
 */
#include "targets.h"
#include "xalloc.h"

#include "log.h"

#include <jansson.h>
#include <limits.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void free_strings(char **list)
{
    if (list == NULL)
        return;
    for (char **p = list; *p; p++)
        free(*p);
    free(list);
}

static char *dup_or_null(PGresult *res, int row, int col)
{
    return PQgetisnull(res, row, col) ? NULL : xstrdup(PQgetvalue(res, row, col));
}

static void target_clear(struct target *t)
{
    free(t->url);
    free(t->method);
    free(t->key_header);
    free(t->status_url);
    free(t->secret_env);
    free_strings(t->static_headers);
    if (t->secret) {
        memset(t->secret, 0, t->secret_len);
        free(t->secret);
    }
    t->url = t->method = t->key_header = t->status_url = t->secret_env = NULL;
    t->static_headers = NULL;
    t->secret = NULL;
    t->secret_len = 0;
}

static bool header_text_ok(const char *s)
{
    return strpbrk(s, "\r\n") == NULL;
}

bool target_secret_env_allowed(const char *name)
{
    size_t prefix = strlen(TARGET_SECRET_ENV_PREFIX);
    if (name == NULL || strncmp(name, TARGET_SECRET_ENV_PREFIX, prefix) != 0 || !name[prefix])
        return false;
    for (const char *p = name + prefix; *p; p++)
        if (!(*p == '_' || (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
              (*p >= '0' && *p <= '9')))
            return false;
    return true;
}

/* The value of one static header: a string as it is, or {"env": "NAME"}, the
 * value of the relay's environment variable NAME (OUTBOX_SECRET_ names only),
 * so that a credential such as Authorization is not in the table, where
 * operator roles can read it. NULL when it cannot be had (logged). */
static const char *static_header_value(const char *target, const char *name, json_t *value)
{
    if (json_is_string(value))
        return json_string_value(value);
    json_t *env = json_is_object(value) && json_object_size(value) == 1
                      ? json_object_get(value, "env")
                      : NULL;
    if (!json_is_string(env)) {
        log_event(LOG_WARN, "target_header_ignored", "target", json_string(target), "header",
                  json_string(name), "reason",
                  json_string("the value must be a string or {\"env\": \"OUTBOX_SECRET_...\"}"),
                  LOG_END);
        return NULL;
    }
    const char *var = json_string_value(env);
    if (!target_secret_env_allowed(var)) {
        log_event(LOG_WARN, "target_header_ignored", "target", json_string(target), "header",
                  json_string(name), "env", json_string(var), "reason",
                  json_string("only variables named " TARGET_SECRET_ENV_PREFIX "... may be read"),
                  LOG_END);
        return NULL;
    }
    const char *text = getenv(var);
    if (text == NULL || *text == '\0') {
        log_event(LOG_WARN, "target_header_missing", "target", json_string(target), "header",
                  json_string(name), "env", json_string(var), LOG_END);
        return NULL;
    }
    return text;
}

static char **parse_static_headers(const char *target, const char *json_text)
{
    json_error_t err;
    json_t *obj = json_loads(json_text, 0, &err);
    size_t n = json_is_object(obj) ? json_object_size(obj) : 0;
    char **list = xcalloc(n + 1, sizeof(char *));
    size_t i = 0;
    const char *name;
    json_t *value;
    if (n > 0) {
        json_object_foreach(obj, name, value)
        {
            const char *text = static_header_value(target, name, value);
            if (text == NULL)
                continue;
            if (!header_text_ok(name) || !header_text_ok(text) || strchr(name, ':')) {
                log_event(LOG_WARN, "target_header_ignored", "target", json_string(target),
                          "header", json_string(name), LOG_END);
                continue;
            }
            size_t len = strlen(name) + strlen(text) + 3;
            list[i] = xmalloc(len);
            snprintf(list[i], len, "%s: %s", name, text);
            i++;
        }
    }
    json_decref(obj);
    return list;
}

static void load_secret(struct target *t)
{
    if (t->secret_env == NULL)
        return;
    if (!target_secret_env_allowed(t->secret_env)) {
        /* Any other variable could be the database password (DATABASE_URL,
         * PGPASSWORD): an admin's typo must not turn it into a signing key. */
        log_event(LOG_WARN, "target_secret_refused", "target", json_string(t->name), "secret_env",
                  json_string(t->secret_env), "reason",
                  json_string("only variables named " TARGET_SECRET_ENV_PREFIX "... may be read"),
                  LOG_END);
        return;
    }
    const char *value = getenv(t->secret_env);
    if (value == NULL || *value == '\0') {
        log_event(LOG_WARN, "target_secret_missing", "target", json_string(t->name), "secret_env",
                  json_string(t->secret_env), LOG_END);
        return;
    }
    if (strncmp(value, "whsec_", 6) == 0) {
        /* Standard base64, white space around it ignored (a secret mounted
         * from a file often ends in a newline). Checked here, not left to
         * EVP_DecodeBlock: it trims only some white space, takes '=' as data
         * anywhere and counts padding bytes, so "whsec_====" gave a secret_len
         * of SIZE_MAX (HMAC read past the key, target_clear wiped past it) and
         * "whsec_AA==\n" a 3-byte key instead of 1 (found by
         * tests/fuzz/fuzz_targets). */
        const char *b64 = value + 6;
        size_t len = strlen(b64);
        while (len > 0 && strchr(" \t\r\n\v\f", *b64))
            b64++, len--;
        while (len > 0 && strchr(" \t\r\n\v\f", b64[len - 1]))
            len--;
        size_t pad = 0;
        while (pad < len && pad < 3 && b64[len - 1 - pad] == '=')
            pad++;
        bool valid = len % 4 == 0 && pad <= 2 && len <= INT_MAX;
        for (size_t i = 0; valid && i < len - pad; i++)
            valid = strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
                           b64[i]) != NULL;
        unsigned char *decoded = xmalloc(len / 4 * 3 + 3);
        int n = valid ? EVP_DecodeBlock(decoded, (const unsigned char *)b64, (int)len) : -1;
        if (n < 0 || (size_t)n < pad) {
            free(decoded);
            log_event(LOG_WARN, "target_secret_invalid", "target", json_string(t->name),
                      "secret_env", json_string(t->secret_env), LOG_END);
            return;
        }
        t->secret = decoded;
        t->secret_len = (size_t)n - pad; /* EVP_DecodeBlock counts padding bytes as data */
    } else {
        t->secret_len = strlen(value);
        t->secret = xmalloc(t->secret_len);
        memcpy(t->secret, value, t->secret_len);
    }
}

struct target *targets_find(const struct target_set *set, const char *name)
{
    for (size_t i = 0; i < set->count; i++)
        if (strcmp(set->items[i]->name, name) == 0)
            return set->items[i];
    return NULL;
}

void targets_load(struct target_set *set, PGresult *res)
{
    for (size_t i = 0; i < set->count; i++)
        set->items[i]->present = false;
    int rows = PQntuples(res);
    for (int r = 0; r < rows; r++) {
        const char *name = PQgetvalue(res, r, 0);
        struct target *t = targets_find(set, name);
        if (t == NULL) {
            t = xcalloc(1, sizeof(*t));
            t->name = xstrdup(name);
            struct target **grown = xrealloc(set->items, (set->count + 1) * sizeof(*grown));
            set->items = grown;
            set->items[set->count++] = t;
        }
        target_clear(t);
        t->url = dup_or_null(res, r, 1);
        t->method = dup_or_null(res, r, 2);
        t->key_header = dup_or_null(res, r, 3);
        t->key_ttl_ms = strtoll(PQgetvalue(res, r, 4), NULL, 10);
        t->status_url = dup_or_null(res, r, 5);
        t->timeout_ms = (int)strtol(PQgetvalue(res, r, 6), NULL, 10);
        t->max_attempts = PQgetisnull(res, r, 7) ? 0 : (int)strtol(PQgetvalue(res, r, 7), NULL, 10);
        t->backoff_base_ms = (int)strtol(PQgetvalue(res, r, 8), NULL, 10);
        t->backoff_cap_ms = (int)strtol(PQgetvalue(res, r, 9), NULL, 10);
        t->reconcile_delay_ms = (int)strtol(PQgetvalue(res, r, 10), NULL, 10);
        t->max_in_flight = (int)strtol(PQgetvalue(res, r, 11), NULL, 10);
        t->static_headers = parse_static_headers(t->name, PQgetvalue(res, r, 12));
        t->secret_env = dup_or_null(res, r, 13);
        t->enabled = PQgetvalue(res, r, 14)[0] == 't';
        t->retry_for_ms = strtoll(PQgetvalue(res, r, 15), NULL, 10);
        t->rate_limit_per_s = PQgetisnull(res, r, 16) ? 0 : strtod(PQgetvalue(res, r, 16), NULL);
        t->circuit_failure_threshold = (int)strtol(PQgetvalue(res, r, 17), NULL, 10);
        t->circuit = flow_circuit_parse(PQgetvalue(res, r, 18));
        t->paused = PQgetvalue(res, r, 19)[0] == 't';
        t->present = true;
        load_secret(t);
    }
}

void targets_free(struct target_set *set)
{
    for (size_t i = 0; i < set->count; i++) {
        target_clear(set->items[i]);
        free(set->items[i]->name);
        free(set->items[i]);
    }
    free(set->items);
    set->items = NULL;
    set->count = 0;
}

struct retry_policy target_retry_policy(const struct target *t)
{
    struct retry_policy p = {
        .honours_keys = t->key_header != NULL,
        .key_ttl_ms = t->key_ttl_ms,
        .max_attempts = t->max_attempts,
        .retry_for_ms = t->retry_for_ms,
        .backoff_base_ms = t->backoff_base_ms,
        .backoff_cap_ms = t->backoff_cap_ms,
        .reconcile_delay_ms = t->reconcile_delay_ms,
    };
    return p;
}

void webhook_signature(const unsigned char *secret, size_t secret_len, const char *id,
                       int64_t timestamp, const char *body, size_t body_len, char *out,
                       size_t out_size)
{
    char prefix[512];
    int prefix_len = snprintf(prefix, sizeof(prefix), "%s.%lld.", id, (long long)timestamp);
    if (prefix_len < 0 || (size_t)prefix_len >= sizeof(prefix))
        prefix_len = 0;
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int mac_len = 0;
    unsigned char *joined = xmalloc((size_t)prefix_len + body_len + 1);
    memcpy(joined, prefix, (size_t)prefix_len);
    memcpy(joined + prefix_len, body, body_len);
    HMAC(EVP_sha256(), secret, (int)secret_len, joined, (size_t)prefix_len + body_len, mac,
         &mac_len);
    free(joined);
    char b64[EVP_ENCODE_LENGTH(EVP_MAX_MD_SIZE) + 1];
    EVP_EncodeBlock((unsigned char *)b64, mac, (int)mac_len);
    snprintf(out, out_size, "v1,%s", b64);
}

struct curl_slist *target_request_headers(const struct target *t, const char *key, const char *body,
                                          size_t body_len, int64_t now_s)
{
    struct curl_slist *headers = NULL;
    char line[1024];
    headers = curl_slist_append(headers, "Content-Type: application/json");
    headers = curl_slist_append(headers, "Expect:"); /* no 100-continue round trip */
    if (t->key_header) {
        snprintf(line, sizeof(line), "%s: %s", t->key_header, key);
        headers = curl_slist_append(headers, line);
    }
    for (char **h = t->static_headers; h && *h; h++)
        headers = curl_slist_append(headers, *h);
    if (t->secret) {
        char signature[128];
        webhook_signature(t->secret, t->secret_len, key, now_s, body, body_len, signature,
                          sizeof(signature));
        snprintf(line, sizeof(line), "webhook-id: %s", key);
        headers = curl_slist_append(headers, line);
        snprintf(line, sizeof(line), "webhook-timestamp: %lld", (long long)now_s);
        headers = curl_slist_append(headers, line);
        snprintf(line, sizeof(line), "webhook-signature: %s", signature);
        headers = curl_slist_append(headers, line);
    }
    return headers;
}
