/*
 * targets.c — targets as the relay sees them.
 *
 * Security: targets are registered by admins; an intent can only name one.
 * The signing secret is never in the database: the row names an environment
 * variable (secret_env) and the relay reads it here. The variable may hold
 * several secrets separated by white space (rotation: the relay signs with
 * each, and webhook-signature carries one entry per secret). A secret of the
 * form "whsec_<base64>" is decoded as Standard Webhooks prescribes; any other
 * one is used as raw bytes (so a raw secret cannot contain white space). A
 * secret's value is never logged: only the variable's name and the secret's
 * position in it. Static headers may not carry CR or LF (no header
 * injection), and neither may keys (enqueue refuses control characters). A
 * static header's value may be {"env": "OUTBOX_SECRET_..."} instead of a
 * string, read here, so that credentials stay out of the table. Secrets come
 * only from variables named OUTBOX_SECRET_*: a row naming DATABASE_URL must
 * not turn the database password into a signing key or a header. The TLS
 * files (ca_file, client_cert_file, client_key_file) are kept as paths:
 * libcurl reads them when it connects (deliver.c); the relay's own code
 * never reads a key's bytes.
 */
#include "targets.h"
#include "lib/xalloc.h"

#include "lib/log.h"
#include "lib/strbuf.h"

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

/* A column of the row, "" when NULL or not in the result. */
static const char *text_at(PGresult *res, int row, int col)
{
    return col < PQnfields(res) && !PQgetisnull(res, row, col) ? PQgetvalue(res, row, col) : "";
}

enum target_http target_http_parse(const char *text)
{
    if (text != NULL && strcmp(text, "2") == 0)
        return TARGET_HTTP_2;
    return TARGET_HTTP_1_1;
}

static void target_clear(struct target *t)
{
    free(t->url);
    free(t->method);
    free(t->key_header);
    free(t->status_url);
    free(t->secret_env);
    free(t->ca_file);
    free(t->client_cert_file);
    free(t->client_key_file);
    free(t->auth_secret);
    free(t->status_tool);
    t->status_tool = NULL;
    if (t->auth_header) {
        memset(t->auth_header, 0, strlen(t->auth_header));
        free(t->auth_header);
    }
    t->auth_secret = t->auth_header = NULL;
    free_strings(t->static_headers);
    for (size_t i = 0; i < t->secret_count; i++) {
        memset(t->secrets[i].bytes, 0, t->secrets[i].len);
        free(t->secrets[i].bytes);
        t->secrets[i].bytes = NULL;
        t->secrets[i].len = 0;
    }
    t->url = t->method = t->key_header = t->status_url = t->secret_env = NULL;
    t->ca_file = t->client_cert_file = t->client_key_file = NULL;
    t->static_headers = NULL;
    t->secret_count = 0;
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

char **target_parse_static_headers(const char *target, const char *json_text)
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

#define SECRET_SPACE " \t\r\n\v\f"

/* One secret of the variable (n bytes at text, no white space) into out:
 * "whsec_<base64>" decoded, anything else as it is. False when a whsec_
 * secret is not standard base64 (checked here, not left to EVP_DecodeBlock:
 * it takes '=' as data anywhere and counts padding bytes, so "whsec_===="
 * gave a length of SIZE_MAX; found by tests/fuzz/fuzz_targets), or when the
 * key would be empty (an HMAC with an empty key proves nothing). */
static bool decode_secret(const char *text, size_t n, struct target_secret *out)
{
    if (n == 0)
        return false;
    if (n < 6 || strncmp(text, "whsec_", 6) != 0) {
        out->bytes = xmalloc(n);
        memcpy(out->bytes, text, n);
        out->len = n;
        return true;
    }
    const char *b64 = text + 6;
    size_t len = n - 6;
    size_t pad = 0;
    while (pad < len && pad < 3 && b64[len - 1 - pad] == '=')
        pad++;
    bool valid = len > 0 && len % 4 == 0 && pad <= 2 && len <= INT_MAX;
    for (size_t i = 0; valid && i < len - pad; i++)
        valid = strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
                       b64[i]) != NULL;
    if (!valid)
        return false;
    unsigned char *decoded = xmalloc(len / 4 * 3 + 3);
    int got = EVP_DecodeBlock(decoded, (const unsigned char *)b64, (int)len);
    if (got < 0 || (size_t)got <= pad) {
        free(decoded);
        return false;
    }
    out->bytes = decoded;
    out->len = (size_t)got - pad; /* EVP_DecodeBlock counts padding bytes as data */
    return true;
}

/* The secrets of secret_env, in their order: white space separates them
 * (and surrounds them: a secret mounted from a file often ends in a
 * newline). An invalid one is left out (target_secret_invalid, with its
 * position), the others are used; beyond TARGET_MAX_SECRETS the rest are
 * left out (target_secrets_ignored). */
static void load_secrets(struct target *t)
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
    if (value == NULL || value[strspn(value, SECRET_SPACE)] == '\0') {
        log_event(LOG_WARN, "target_secret_missing", "target", json_string(t->name), "secret_env",
                  json_string(t->secret_env), LOG_END);
        return;
    }
    size_t position = 0, ignored = 0;
    for (const char *p = value + strspn(value, SECRET_SPACE); *p; p += strspn(p, SECRET_SPACE)) {
        size_t n = strcspn(p, SECRET_SPACE);
        position++;
        if (t->secret_count == TARGET_MAX_SECRETS) {
            ignored++;
        } else if (decode_secret(p, n, &t->secrets[t->secret_count])) {
            t->secret_count++;
        } else {
            log_event(LOG_WARN, "target_secret_invalid", "target", json_string(t->name),
                      "secret_env", json_string(t->secret_env), "position",
                      json_integer((json_int_t)position), LOG_END);
        }
        p += n;
    }
    if (ignored > 0)
        log_event(LOG_WARN, "target_secrets_ignored", "target", json_string(t->name), "secret_env",
                  json_string(t->secret_env), "ignored", json_integer((json_int_t)ignored),
                  "reason", json_string("at most 8 secrets are used, the first ones"), LOG_END);
}

/* The bearer token of an mcp target (auth_secret): read from the
 * variable it names, OUTBOX_SECRET_ names only (the rule of secret_env);
 * its value is never logged, only the variable's name. */
static void load_auth(struct target *t)
{
    if (t->auth_secret == NULL)
        return;
    if (!target_secret_env_allowed(t->auth_secret)) {
        log_event(LOG_WARN, "target_auth_refused", "target", json_string(t->name), "auth_secret",
                  json_string(t->auth_secret), "reason",
                  json_string("only variables named " TARGET_SECRET_ENV_PREFIX "... may be read"),
                  LOG_END);
        return;
    }
    const char *value = getenv(t->auth_secret);
    size_t n = value ? strcspn(value, SECRET_SPACE) : 0;
    if (value == NULL || n == 0 || value[n + strspn(value + n, SECRET_SPACE)] != '\0') {
        log_event(LOG_WARN, "target_auth_missing", "target", json_string(t->name), "auth_secret",
                  json_string(t->auth_secret), "reason",
                  json_string("the variable must hold one token, no white space inside"), LOG_END);
        return;
    }
    size_t len = sizeof("Authorization: Bearer ") + n;
    t->auth_header = xmalloc(len);
    snprintf(t->auth_header, len, "Authorization: Bearer %.*s", (int)n, value);
}

struct target *targets_find(const struct target_set *set, const char *name)
{
    for (size_t i = 0; i < set->count; i++)
        if (strcmp(set->items[i]->name, name) == 0)
            return set->items[i];
    return NULL;
}

bool targets_any_status_url(const struct target_set *set)
{
    for (size_t i = 0; i < set->count; i++)
        if (set->items[i]->present &&
            (set->items[i]->status_url != NULL || set->items[i]->status_tool != NULL))
            return true;
    return false;
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
        size_t secrets_before = t->secret_count;
        /* The session is kept across reloads while the url and version are the same. */
        bool same_upstream = t->url && !strcmp(t->url, PQgetvalue(res, r, 1)) &&
                             t->mcp_pref == upstream_pref_parse(text_at(res, r, 25)) &&
                             t->mcp == !strcmp(text_at(res, r, 24), "mcp");
        if (!same_upstream)
            upstream_reset(&t->upstream);
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
        t->static_headers = target_parse_static_headers(t->name, PQgetvalue(res, r, 12));
        t->secret_env = dup_or_null(res, r, 13);
        t->enabled = PQgetvalue(res, r, 14)[0] == 't';
        t->retry_for_ms = strtoll(PQgetvalue(res, r, 15), NULL, 10);
        t->rate_limit_per_s = PQgetisnull(res, r, 16) ? 0 : strtod(PQgetvalue(res, r, 16), NULL);
        t->circuit_failure_threshold = (int)strtol(PQgetvalue(res, r, 17), NULL, 10);
        t->circuit = flow_circuit_parse(PQgetvalue(res, r, 18));
        t->paused = PQgetvalue(res, r, 19)[0] == 't';
        t->ca_file = dup_or_null(res, r, 20);
        t->client_cert_file = dup_or_null(res, r, 21);
        t->client_key_file = dup_or_null(res, r, 22);
        t->http = target_http_parse(PQgetisnull(res, r, 23) ? NULL : PQgetvalue(res, r, 23));
        t->mcp = !strcmp(text_at(res, r, 24), "mcp");
        t->mcp_pref = upstream_pref_parse(text_at(res, r, 25));
        t->auth_secret = *text_at(res, r, 26) ? xstrdup(text_at(res, r, 26)) : NULL;
        load_auth(t);
        t->status_tool = t->mcp && *text_at(res, r, 27) ? xstrdup(text_at(res, r, 27)) : NULL;
        if ((t->client_cert_file == NULL) != (t->client_key_file == NULL)) {
            /* The table refuses this (targets_client_cert_and_key); a
             * certificate without its key cannot be presented anyway. */
            free(t->client_cert_file);
            free(t->client_key_file);
            t->client_cert_file = t->client_key_file = NULL;
        }
        t->present = true;
        load_secrets(t);
        if (t->secret_count > 0 && t->secret_count != secrets_before)
            /* How many secrets sign (never which): a rotation shows here. */
            log_event(LOG_INFO, "target_signing", "target", json_string(t->name), "secret_env",
                      json_string(t->secret_env), "secrets",
                      json_integer((json_int_t)t->secret_count), LOG_END);
    }
}

void targets_free(struct target_set *set)
{
    for (size_t i = 0; i < set->count; i++) {
        upstream_session_free(&set->items[i]->upstream);
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

int target_cap(const struct target *t, int relay_cap)
{
    return t->max_in_flight < relay_cap ? t->max_in_flight : relay_cap;
}

/* The room this relay has for t now: its cap narrowed by the adaptive window
 * (flow.h), minus what is in flight and what claims on the wire may bring;
 * zero for a target that is disabled or gone from the table. The shared
 * gates (circuit, pause, rate) are applied by outbox.claim. */
static int target_room(struct target *t, int relay_cap)
{
    if (!t->present || !t->enabled)
        return 0;
    int claiming = 0;
    for (int lane = 0; lane < TARGET_CLAIM_LANES; lane++)
        claiming += t->claiming[lane];
    return flow_room(&t->flow, target_cap(t, relay_cap), t->in_flight + claiming);
}

size_t targets_claimable(struct target_set *set, int relay_cap, double start_at,
                         struct strbuf *names, struct strbuf *rooms, int limit, int lane, int parts,
                         bool leave_gated)
{
    pgarray_begin(names);
    if (rooms)
        pgarray_begin(rooms);
    size_t count = 0;
    size_t n = set->count;
    size_t start = (size_t)(start_at * (double)n);
    for (size_t k = 0; k < n; k++) {
        struct target *t = set->items[(start + k) % n];
        int room = target_room(t, relay_cap);
        if (room <= 0)
            continue;
        if (leave_gated && (t->rate_limit_per_s > 0 || t->circuit != CIRCUIT_CLOSED || t->paused))
            continue;
        pgarray_item_text(names, t->name, strlen(t->name));
        if (rooms) {
            int asked = room < limit ? room : limit;
            if (parts > 1)
                asked = (asked + parts - 1) / parts;
            pgarray_item_int(rooms, asked);
            if (lane >= 0 && lane < TARGET_CLAIM_LANES)
                t->claiming[lane] = asked;
        }
        count++;
    }
    pgarray_end(names);
    if (rooms)
        pgarray_end(rooms);
    return count;
}

void targets_unclaim(struct target_set *set, int lane)
{
    for (size_t i = 0; i < set->count; i++)
        set->items[i]->claiming[lane] = 0;
}

/* What Standard Webhooks signs: id "." timestamp "." body. Caller frees. */
static unsigned char *signed_content(const char *id, int64_t timestamp, const char *body,
                                     size_t body_len, size_t *len)
{
    char prefix[512];
    int prefix_len = snprintf(prefix, sizeof(prefix), "%s.%lld.", id, (long long)timestamp);
    if (prefix_len < 0 || (size_t)prefix_len >= sizeof(prefix))
        prefix_len = 0;
    unsigned char *joined = xmalloc((size_t)prefix_len + body_len + 1);
    memcpy(joined, prefix, (size_t)prefix_len);
    if (body_len > 0)
        memcpy(joined + prefix_len, body, body_len);
    *len = (size_t)prefix_len + body_len;
    return joined;
}

/* "v1,<base64>" of HMAC-SHA256(secret, content) into out. */
static void sign_content(const unsigned char *secret, size_t secret_len,
                         const unsigned char *content, size_t content_len, char *out,
                         size_t out_size)
{
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int mac_len = 0;
    HMAC(EVP_sha256(), secret, (int)secret_len, content, content_len, mac, &mac_len);
    char b64[EVP_ENCODE_LENGTH(EVP_MAX_MD_SIZE) + 1];
    EVP_EncodeBlock((unsigned char *)b64, mac, (int)mac_len);
    snprintf(out, out_size, "v1,%s", b64);
}

void webhook_signature(const unsigned char *secret, size_t secret_len, const char *id,
                       int64_t timestamp, const char *body, size_t body_len, char *out,
                       size_t out_size)
{
    size_t len;
    unsigned char *content = signed_content(id, timestamp, body, body_len, &len);
    sign_content(secret, secret_len, content, len, out, out_size);
    free(content);
}

char *webhook_signature_header(const struct target_secret *secrets, size_t count, const char *id,
                               int64_t timestamp, const char *body, size_t body_len)
{
    if (count == 0)
        return NULL;
    size_t len;
    unsigned char *content = signed_content(id, timestamp, body, body_len, &len);
    struct strbuf value;
    strbuf_init(&value);
    for (size_t i = 0; i < count; i++) {
        char one[EVP_ENCODE_LENGTH(EVP_MAX_MD_SIZE) + 4];
        sign_content(secrets[i].bytes, secrets[i].len, content, len, one, sizeof(one));
        if (i > 0)
            strbuf_append(&value, " ", 1);
        strbuf_append_str(&value, one);
    }
    free(content);
    return value.data; /* the caller frees it */
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
    if (t->secret_count > 0) {
        char *signatures =
            webhook_signature_header(t->secrets, t->secret_count, key, now_s, body, body_len);
        snprintf(line, sizeof(line), "webhook-id: %s", key);
        headers = curl_slist_append(headers, line);
        snprintf(line, sizeof(line), "webhook-timestamp: %lld", (long long)now_s);
        headers = curl_slist_append(headers, line);
        struct strbuf signature_line;
        strbuf_init(&signature_line);
        strbuf_append_str(&signature_line, "webhook-signature: ");
        strbuf_append_str(&signature_line, signatures);
        headers = curl_slist_append(headers, signature_line.data);
        strbuf_free(&signature_line);
        free(signatures);
    }
    return headers;
}
