/*
 * fuzz_targets — outbox.targets as PostgreSQL's text output reaches the
 * relay (targets_load in relay/targets.c): numbers, booleans, the circuit
 * state, static headers as JSON text, the signing secret named by
 * secret_env; then what a target adds to a request (target_request_headers,
 * status_url_for_key).
 *
 * Input: the first line is the value of the environment variable
 * OUTBOX_SECRET_FUZZ; every further line is a row of the STMT_TARGETS
 * result, cells separated by TAB, "\N" for SQL NULL (COPY's text format).
 * A row with fewer than 23 cells takes the rest from a valid default row
 * (whose secret_env is OUTBOX_SECRET_FUZZ). At most 8 rows; the result is
 * loaded twice (a reload keeps the records).
 *
 * Properties: never a crash, leak or UB; a static header is "Name: value"
 * with neither CR, LF nor ':' in the name; with a key header as the schema
 * allows it (^[A-Za-z0-9-]{1,64}$) no request header holds CR or LF; the
 * variable's secrets are its white-space-separated words, in order, at most
 * TARGET_MAX_SECRETS: a "whsec_" word that is base64 of at least one byte is
 * used as exactly the bytes it encodes, any other "whsec_" word is left out,
 * any other word is used as it is; the secrets are never longer than their
 * text.
 */
#include "fuzz.h"

#include "deliver.h"
#include "lib/log.h"
#include "targets.h"

#include <ctype.h>
#include <stdbool.h>

#define COLUMNS 23
#define MAX_ROWS 8
#define SECRET_ENV "OUTBOX_SECRET_FUZZ"

static const char *const default_row[COLUMNS] = {
    "billing",
    "http://127.0.0.1:1/hook",
    "POST",
    "Idempotency-Key",
    "86400000",
    "http://127.0.0.1:1/status/{key}",
    "1000",
    "5",
    "500",
    "300000",
    "3000",
    "16",
    "{\"Authorization\": \"Bearer abc\"}",
    SECRET_ENV,
    "t",
    "259200000",
    NULL,
    "10",
    "closed",
    "f",
    "/etc/outbox/ca.pem",
    "/etc/outbox/client.pem",
    "/etc/outbox/client.key",
};

static const char *const column_names[COLUMNS] = {
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
};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    log_set_level(LOG_ERROR); /* ignored headers and bad secrets are logged as warnings */
    curl_global_init(CURL_GLOBAL_DEFAULT);
    return 0;
}

static int b64_value(int c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Standard base64 with padding, white space around it allowed: the decoded
 * length, or -1 when the text is not that. */
static long reference_b64(const char *s, unsigned char *out)
{
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)*s))
        s++, n--;
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        n--;
    if (n % 4 != 0)
        return -1;
    size_t pad = 0;
    while (pad < n && pad < 3 && s[n - 1 - pad] == '=')
        pad++;
    if (pad > 2)
        return -1;
    long len = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        for (size_t k = 0; k < 4; k++) {
            v[k] = i + k >= n - pad ? 0 : b64_value((unsigned char)s[i + k]);
            if (v[k] < 0)
                return -1;
        }
        unsigned long quad = (unsigned long)v[0] << 18 | v[1] << 12 | v[2] << 6 | v[3];
        size_t bytes = i + 4 == n ? 3 - pad : 3;
        for (size_t k = 0; k < bytes; k++)
            out[len++] = (unsigned char)(quad >> (16 - 8 * k));
    }
    return len;
}

static bool key_header_as_schema_allows(const char *h)
{
    size_t n = strlen(h);
    if (n < 1 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)h[i]) && h[i] != '-')
            return false;
    return true;
}

static PGresult *build_result(char *rows_text, int *row_count)
{
    PGresult *res = PQmakeEmptyPGresult(NULL, PGRES_TUPLES_OK);
    FUZZ_CHECK(res != NULL);
    PGresAttDesc attrs[COLUMNS];
    memset(attrs, 0, sizeof(attrs));
    for (int c = 0; c < COLUMNS; c++) {
        attrs[c].name = (char *)column_names[c];
        attrs[c].typid = 25; /* text */
        attrs[c].typlen = -1;
        attrs[c].atttypmod = -1;
    }
    FUZZ_CHECK(PQsetResultAttrs(res, COLUMNS, attrs) == 1);
    int r = 0;
    for (char *line = rows_text; line && r < MAX_ROWS; r++) {
        char *lf = strchr(line, '\n');
        if (lf)
            *lf = '\0';
        const char *cells[COLUMNS];
        memcpy(cells, default_row, sizeof(cells));
        int c = 0;
        for (char *cell = line; cell && c < COLUMNS; c++) {
            char *tab = strchr(cell, '\t');
            if (tab)
                *tab = '\0';
            cells[c] = strcmp(cell, "\\N") == 0 ? NULL : cell;
            cell = tab ? tab + 1 : NULL;
        }
        for (c = 0; c < COLUMNS; c++)
            FUZZ_CHECK(PQsetvalue(res, r, c, (char *)cells[c],
                                  cells[c] ? (int)strlen(cells[c]) : -1) == 1);
        line = lf ? lf + 1 : NULL;
    }
    *row_count = r;
    return res;
}

static void check_target(const struct target *t, const char *secret_value)
{
    for (char **h = t->static_headers; h && *h; h++) {
        FUZZ_CHECK(strpbrk(*h, "\r\n") == NULL);
        const char *sep = strstr(*h, ": ");
        FUZZ_CHECK(sep != NULL && memchr(*h, ':', (size_t)(sep - *h)) == NULL);
    }
    FUZZ_CHECK(t->secret_count <= TARGET_MAX_SECRETS);
    size_t total = 0;
    for (size_t i = 0; i < t->secret_count; i++) {
        FUZZ_CHECK(t->secrets[i].bytes != NULL && t->secrets[i].len > 0);
        total += t->secrets[i].len;
    }
    if (t->secret_count > 0) {
        FUZZ_CHECK(t->secret_env != NULL && getenv(t->secret_env) != NULL);
        FUZZ_CHECK(total <= strlen(getenv(t->secret_env)));
    }
    if (t->secret_env && strcmp(t->secret_env, SECRET_ENV) == 0) {
        /* The reference: split on white space, decode each word. */
        char *words = strdup(secret_value);
        unsigned char *expected = malloc(strlen(secret_value) + 3);
        size_t found = 0;
        char *save = NULL;
        for (char *w = strtok_r(words, " \t\n\v\f\r", &save); w && found < TARGET_MAX_SECRETS;
             w = strtok_r(NULL, " \t\n\v\f\r", &save)) {
            long len;
            if (strncmp(w, "whsec_", 6) == 0) {
                len = reference_b64(w + 6, expected);
                if (len <= 0)
                    continue; /* refused, not used half-decoded */
            } else {
                len = (long)strlen(w);
                memcpy(expected, w, (size_t)len);
            }
            FUZZ_CHECK(found < t->secret_count && t->secrets[found].len == (size_t)len &&
                       memcmp(t->secrets[found].bytes, expected, (size_t)len) == 0);
            found++;
        }
        FUZZ_CHECK(found == t->secret_count);
        free(expected);
        free(words);
    }

    static const char body[] = "{\"amount\":1}";
    struct curl_slist *headers =
        target_request_headers(t, "key-1", body, sizeof(body) - 1, 1700000000);
    if (t->key_header == NULL || key_header_as_schema_allows(t->key_header))
        for (const struct curl_slist *p = headers; p; p = p->next)
            FUZZ_CHECK(strpbrk(p->data, "\r\n") == NULL);
    curl_slist_free_all(headers);

    if (t->status_url) {
        char *url = status_url_for_key(t->status_url, "key/1 \xc3\xa4");
        FUZZ_CHECK(url != NULL);
        free(url);
    }
    struct retry_policy policy = target_retry_policy(t);
    (void)policy;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_strndup(data, size);
    char *lf = strchr(text, '\n');
    char *rows_text = lf ? lf + 1 : NULL;
    if (lf)
        *lf = '\0';
    /* putenv with our own string, taken out again below: setenv would keep
     * every value ever set (glibc does not free them), growing for hours. */
    size_t env_len = strlen(SECRET_ENV) + 1 + strlen(text) + 1;
    char *env = malloc(env_len);
    snprintf(env, env_len, "%s=%s", SECRET_ENV, text);
    putenv(env);

    int rows = 0;
    PGresult *res = build_result(rows_text, &rows);
    struct target_set set = {NULL, 0};
    targets_load(&set, res);
    targets_load(&set, res); /* a reload: the same records, updated in place */
    FUZZ_CHECK(set.count <= (size_t)rows);
    for (size_t i = 0; i < set.count; i++) {
        FUZZ_CHECK(set.items[i]->present);
        FUZZ_CHECK(targets_find(&set, set.items[i]->name) != NULL);
        check_target(set.items[i], text);
    }
    targets_free(&set);
    PQclear(res);
    unsetenv(SECRET_ENV);
    free(env);
    free(text);
    return 0;
}
