/*
 * mcp_import.c — outbox-relay mcp-import TARGET [--prefix P] [--only a,b].
 *
 * Registers the tools an upstream MCP server lists (the registered 'mcp'
 * target TARGET: its url, mcp_version, and the bearer token in the
 * OUTBOX_SECRET_ variable its auth_secret names) in outbox.mcp_tools, so
 * that the front door offers them, each call a keyed intent for TARGET.
 *
 * Shape: a short-lived CLI process, so blocking libpq and libcurl's easy
 * interface (relay/cli/ is exempt from the event-loop rule). The request
 * bodies are mcp_upstream.c's (server/discover, initialize,
 * notifications/initialized, tools/list with the _meta envelope), the
 * answers read by upstream_read_answer (JSON or an event stream): one
 * builder of MCP messages for the relay and the import. The era follows
 * the target's mcp_version as the relay does: 2026-07-28 stateless, or
 * 2025-11-25 initialize + notifications/initialized + Mcp-Session-Id (the
 * session is deleted at the end), 'auto' asking server/discover first.
 * tools/list is read page by page, following nextCursor.
 *
 * Each tool becomes the row P + name (default P "TARGET."), upstream_tool
 * its upstream name, with its description, inputSchema, title (the tool's,
 * else annotations.title) and destructive (annotations: readOnlyHint true
 * → false; else destructiveHint, default true as MCP says). A name that
 * does not fit mcp_tools.tool (^[A-Za-z0-9_.-]{1,128}$) with the prefix is
 * skipped and said so; a schema the front door's subset refuses (OR020) is
 * skipped with the trigger's message; a name already taken by a tool of
 * another target is never taken over. One statement per tool, in
 * autocommit: one refused tool does not keep the others out.
 *
 * --passthrough-readonly: a tool whose readOnlyHint is true is marked
 * passthrough (0045: the front door calls it straight through, with no
 * intent), every other one not. Without it the column is left as it is,
 * except that a tool the upstream now says is not read-only stops being
 * passthrough (a destructive tool cannot be: constraint
 * mcp_tools_passthrough_read_only). Each run says which tools are.
 *
 * Run again: a tool whose row differs is updated, an equal one is left
 * alone; a disabled row stays disabled (enabling it is a person's decision,
 * and its line says how); a row of this target with
 * the prefix and an upstream_tool that the upstream no longer lists is
 * disabled, never deleted (intents and outcomes name it). With --only, only
 * the named tools are considered, for adding and for disabling. When a page
 * after the first cannot be read, the tools read are imported and nothing
 * is disabled (the list is incomplete).
 *
 * The request is the relay's for that target: its static headers
 * (targets.headers), its ca_file (else --ca-file) and client certificate.
 *
 * The role: INSERT/UPDATE on outbox.mcp_tools is outbox_admin's, so the
 * command runs with an admin's connection (--db / PG*, as the other
 * commands). A refused grant stops the import (exit 1) with that hint.
 */
#include "cli/mcp_import.h"
#include "cli/cli.h"
#include "mcp_upstream.h"
#include "targets.h"
#include "lib/strbuf.h"
#include "lib/xalloc.h"

#include <curl/curl.h>
#include <jansson.h>
#include <regex.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define IMPORT_TIMEOUT_S 30L
#define IMPORT_MAX_BODY (16u << 20)
#define IMPORT_MAX_PAGES 1000

struct upstream {
    const char *url;
    const char *ca_file;     /* the target's, else --ca-file */
    const char *client_cert; /* the target's client_cert_file / client_key_file, or NULL */
    const char *client_key;
    char **static_headers; /* targets.headers, as the relay sends them */
    char *auth_header;     /* "Authorization: Bearer ..." or NULL */
    enum upstream_era era;
    char *session_id;
    char *version; /* legacy: agreed by initialize */
};

struct answer {
    struct strbuf body;
    bool too_big;
    char *session_id;
    long status;
    char content_type[128];
};

static size_t on_body(char *data, size_t size, size_t n, void *user)
{
    struct answer *a = user;
    size_t len = size * n;
    if (a->body.len + len > IMPORT_MAX_BODY) {
        a->too_big = true;
        return 0;
    }
    strbuf_append(&a->body, data, len);
    return len;
}

static size_t on_header(char *data, size_t size, size_t n, void *user)
{
    struct answer *a = user;
    size_t len = size * n;
    static const char name[] = "mcp-session-id:";
    if (len > sizeof(name) - 1 && strncasecmp(data, name, sizeof(name) - 1) == 0) {
        const char *v = data + sizeof(name) - 1;
        const char *end = data + len;
        while (v < end && (*v == ' ' || *v == '\t'))
            v++;
        while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
            end--;
        free(a->session_id);
        a->session_id = xstrndup(v, (size_t)(end - v));
    }
    return len;
}

static struct curl_slist *add(struct curl_slist *h, const char *name, const char *value)
{
    struct strbuf line;
    strbuf_init(&line);
    strbuf_append_str(&line, name);
    strbuf_append_str(&line, ": ");
    strbuf_append_str(&line, value);
    h = curl_slist_append(h, line.data);
    strbuf_free(&line);
    return h;
}

/* One POST (or DELETE when body is NULL) to the upstream. method: the
 * Mcp-Method header of the modern era (NULL: none). Returns libcurl's code;
 * err gets its message. */
static CURLcode send_request(struct upstream *u, const char *body, const char *method,
                             struct answer *a, char *err)
{
    memset(a, 0, sizeof(*a));
    strbuf_init(&a->body);
    CURL *c = curl_easy_init();
    if (c == NULL) {
        snprintf(err, CURL_ERROR_SIZE, "cannot start libcurl");
        return CURLE_FAILED_INIT;
    }
    struct curl_slist *h = NULL;
    h = curl_slist_append(h, "Content-Type: application/json");
    h = curl_slist_append(h, "Accept: application/json, text/event-stream");
    for (char **s = u->static_headers; s && *s; s++)
        h = curl_slist_append(h, *s);
    if (u->auth_header)
        h = curl_slist_append(h, u->auth_header);
    if (u->era == UPSTREAM_ERA_MODERN || (u->era == UPSTREAM_ERA_UNKNOWN && method)) {
        h = add(h, "MCP-Protocol-Version", UPSTREAM_MODERN_VERSION);
        if (method)
            h = add(h, "Mcp-Method", method);
    } else if (u->version) {
        h = add(h, "MCP-Protocol-Version", u->version);
    }
    if (u->session_id)
        h = add(h, "Mcp-Session-Id", u->session_id);
    err[0] = '\0';
    curl_easy_setopt(c, CURLOPT_URL, u->url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    } else {
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "DELETE");
    }
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, a);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, a);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, err);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, IMPORT_TIMEOUT_S);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    if (u->ca_file && *u->ca_file)
        curl_easy_setopt(c, CURLOPT_CAINFO, u->ca_file);
    if (u->client_cert) {
        curl_easy_setopt(c, CURLOPT_SSLCERT, u->client_cert);
        curl_easy_setopt(c, CURLOPT_SSLKEY, u->client_key);
    }
    CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &a->status);
    char *ct = NULL;
    curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
    if (ct)
        snprintf(a->content_type, sizeof(a->content_type), "%s", ct);
    if (rc != CURLE_OK && err[0] == '\0')
        snprintf(err, CURL_ERROR_SIZE, "%s",
                 a->too_big ? "the answer is too large" : curl_easy_strerror(rc));
    curl_easy_cleanup(c);
    curl_slist_free_all(h);
    return rc;
}

static void answer_free(struct answer *a)
{
    strbuf_free(&a->body);
    free(a->session_id);
    a->session_id = NULL;
}

/* Sends body and reads the JSON-RPC response with id into r. false, with
 * why, when there is none. */
static bool call(struct upstream *u, const char *body, const char *method, long long id,
                 struct upstream_answer *r, struct answer *a, char *why, size_t why_size)
{
    char err[CURL_ERROR_SIZE];
    CURLcode rc = send_request(u, body, method, a, err);
    memset(r, 0, sizeof(*r));
    if (rc != CURLE_OK) {
        snprintf(why, why_size, "%s", err);
        return false;
    }
    upstream_read_answer(a->content_type, a->body.data, a->body.len, id, r);
    if (r->kind == MCP_ANSWER_NONE) {
        snprintf(why, why_size, "HTTP %ld without a JSON-RPC answer to request %lld", a->status,
                 id);
        return false;
    }
    if (r->kind == MCP_ANSWER_RPC_ERROR) {
        snprintf(why, why_size, "JSON-RPC error %ld: %s", r->code, r->text ? r->text : "");
        return false;
    }
    return true;
}

/* Decides the era and sets up a legacy session. */
static bool start_session(struct upstream *u, enum upstream_pref pref, char *why, size_t why_size)
{
    struct upstream_answer r;
    struct answer a;
    if (pref == UPSTREAM_AUTO) {
        char *body = upstream_setup_body(UPSTREAM_DISCOVER);
        char err[CURL_ERROR_SIZE];
        CURLcode rc = send_request(u, body, "server/discover", &a, err);
        free(body);
        if (rc != CURLE_OK) {
            snprintf(why, why_size, "server/discover: %s", err);
            answer_free(&a);
            return false;
        }
        upstream_read_answer(a.content_type, a.body.data, a.body.len, UPSTREAM_SETUP_ID, &r);
        pref = upstream_discover_says_modern(&r) ? UPSTREAM_PREF_MODERN : UPSTREAM_PREF_LEGACY;
        upstream_answer_free(&r);
        answer_free(&a);
    }
    if (pref == UPSTREAM_PREF_MODERN) {
        u->era = UPSTREAM_ERA_MODERN;
        return true;
    }
    u->era = UPSTREAM_ERA_LEGACY;
    char *body = upstream_setup_body(UPSTREAM_INITIALIZE);
    char sub[512];
    bool ok = call(u, body, NULL, UPSTREAM_SETUP_ID, &r, &a, sub, sizeof(sub));
    free(body);
    if (!ok) {
        snprintf(why, why_size, "initialize: %s", sub);
        upstream_answer_free(&r);
        answer_free(&a);
        return false;
    }
    u->version = upstream_initialize_version(&r);
    u->session_id = a.session_id;
    a.session_id = NULL;
    upstream_answer_free(&r);
    answer_free(&a);
    body = upstream_setup_body(UPSTREAM_INITIALIZED);
    char err[CURL_ERROR_SIZE];
    CURLcode rc = send_request(u, body, NULL, &a, err);
    free(body);
    answer_free(&a);
    if (rc != CURLE_OK) {
        snprintf(why, why_size, "notifications/initialized: %s", err);
        return false;
    }
    return true;
}

static void end_session(struct upstream *u)
{
    if (u->era != UPSTREAM_ERA_LEGACY || u->session_id == NULL)
        return;
    struct answer a;
    char err[CURL_ERROR_SIZE];
    send_request(u, NULL, NULL, &a, err); /* the server may refuse; the session times out */
    answer_free(&a);
}

/* Reads every page of tools/list into tools. *complete: every page read. */
static bool list_tools(struct upstream *u, json_t *tools, bool *complete, char *why,
                       size_t why_size)
{
    char *cursor = NULL;
    *complete = false;
    for (long long page = 1; page <= IMPORT_MAX_PAGES; page++) {
        char *body = upstream_list_body(u->era, cursor, page);
        struct upstream_answer r;
        struct answer a;
        char sub[512];
        bool ok = call(u, body, "tools/list", page, &r, &a, sub, sizeof(sub));
        free(body);
        answer_free(&a);
        json_t *result = ok ? json_loads(r.result, 0, NULL) : NULL;
        upstream_answer_free(&r);
        json_t *list = json_object_get(result, "tools");
        if (!ok || !json_is_array(list)) {
            snprintf(why, why_size, "tools/list (page %lld): %s", page,
                     ok ? "the result has no tools array" : sub);
            json_decref(result);
            free(cursor);
            return page > 1;
        }
        json_array_extend(tools, list);
        json_t *next = json_object_get(result, "nextCursor");
        free(cursor);
        cursor = json_is_string(next) && *json_string_value(next) ? xstrdup(json_string_value(next))
                                                                  : NULL;
        json_decref(result);
        if (cursor == NULL) {
            *complete = true;
            return true;
        }
    }
    free(cursor);
    snprintf(why, why_size, "tools/list: more than %d pages", IMPORT_MAX_PAGES);
    return true;
}

/* ------------------------------------------------------------------ rows */

/* Text for one output line: control characters become '?'. Caller frees. */
static char *shown(const char *text)
{
    char *out = xstrdup(text ? text : "");
    for (char *p = out; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    return out;
}

static void line(const char *name, const char *what, const char *why)
{
    char *n = shown(name);
    char *w = why ? shown(why) : NULL;
    printf("%s: %s%s%s\n", n, what, w ? ": " : "", w ? w : "");
    free(n);
    free(w);
}

static bool in_list(const char *const *names, size_t count, const char *name)
{
    for (size_t i = 0; i < count; i++)
        if (!strcmp(names[i], name))
            return true;
    return false;
}

/* A row disabled here (by a person, or by an import after the upstream
 * dropped the tool) stays disabled: enabling is a person's decision. */
#define DISABLED_HERE "disabled here; UPDATE outbox.mcp_tools SET enabled = true enables it"

/* A tool the front door calls straight through (0045). */
#define PASSTHROUGH_NOTE "passthrough (read-only: called straight through, no intent)"

struct tally {
    int added, updated, unchanged, disabled, skipped;
    bool denied;
};

static const char *db_message(const PGresult *res, PGconn *conn)
{
    const char *m = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    return m ? m : PQerrorMessage(conn);
}

static bool is_denied(const PGresult *res)
{
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    return state && !strcmp(state, "42501");
}

static void import_tool(PGconn *conn, const char *target, const char *prefix, bool passthrough_ro,
                        json_t *tool, const regex_t *name_re, struct tally *t)
{
    const char *name = json_string_value(json_object_get(tool, "name"));
    struct strbuf full;
    strbuf_init(&full);
    strbuf_append_str(&full, prefix);
    strbuf_append_str(&full, name);
    if (regexec(name_re, full.data, 0, NULL, 0) != 0) {
        line(name, "skipped",
             "the name with the prefix does not fit mcp_tools.tool (^[A-Za-z0-9_.-]{1,128}$)");
        t->skipped++;
        strbuf_free(&full);
        return;
    }
    json_t *annotations = json_object_get(tool, "annotations");
    json_t *title = json_object_get(tool, "title");
    if (!json_is_string(title))
        title = json_object_get(annotations, "title");
    json_t *description = json_object_get(tool, "description");
    json_t *schema = json_object_get(tool, "inputSchema");
    bool read_only = json_is_true(json_object_get(annotations, "readOnlyHint"));
    bool destructive =
        !read_only && !json_is_false(json_object_get(annotations, "destructiveHint"));
    char *schema_text = json_is_object(schema) ? json_dumps(schema, JSON_COMPACT)
                                               : xstrdup("{\"type\": \"object\"}");
    const char *params[6] = {full.data,
                             target,
                             json_is_string(title) ? json_string_value(title) : NULL,
                             json_is_string(description) ? json_string_value(description) : "",
                             schema_text,
                             destructive ? "true" : "false"};
    /* upstream_tool is $7: the upstream's name; passthrough $8 (NULL: the
     * row's own, unless the tool is now destructive). */
    const char *passthrough = !passthrough_ro ? NULL : read_only ? "true" : "false";
    const char *values[8] = {params[0], params[1], params[2], params[3],
                             params[4], params[5], name,      passthrough};
    PGresult *res = PQexecParams(
        conn,
        "SELECT target, (title IS NOT DISTINCT FROM $3 AND description = $4 AND input_schema = "
        "$5::jsonb AND destructive = $6::boolean AND upstream_tool IS NOT DISTINCT FROM $7 AND "
        "passthrough = coalesce($8::boolean, passthrough AND NOT $6::boolean)), enabled, "
        "passthrough FROM outbox.mcp_tools WHERE tool = $1 AND $2::text IS NOT NULL",
        8, NULL, values, NULL, NULL, 0);
    const char *what = NULL;
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        t->denied = is_denied(res);
        line(full.data, "skipped", db_message(res, conn));
        t->skipped++;
    } else if (PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), target) != 0) {
        char why[512];
        char *other = shown(PQgetvalue(res, 0, 0));
        snprintf(why, sizeof(why), "the name is taken by a tool of target '%s'", other);
        free(other);
        line(full.data, "skipped", why);
        t->skipped++;
    } else if (PQntuples(res) == 1 && !strcmp(PQgetvalue(res, 0, 1), "t")) {
        line(full.data, "unchanged",
             strcmp(PQgetvalue(res, 0, 2), "t")    ? DISABLED_HERE
             : !strcmp(PQgetvalue(res, 0, 3), "t") ? PASSTHROUGH_NOTE
                                                   : NULL);
        t->unchanged++;
    } else {
        bool exists = PQntuples(res) == 1;
        bool disabled = exists && strcmp(PQgetvalue(res, 0, 2), "t") != 0;
        PQclear(res);
        res = PQexecParams(
            conn,
            exists ? "UPDATE outbox.mcp_tools SET title = $3, description = $4, input_schema = "
                     "$5::jsonb, destructive = $6::boolean, upstream_tool = $7, passthrough = "
                     "coalesce($8::boolean, passthrough AND NOT $6::boolean) WHERE tool = $1 "
                     "AND target = $2 RETURNING passthrough"
                   : "INSERT INTO outbox.mcp_tools (tool, target, title, description, "
                     "input_schema, destructive, upstream_tool, passthrough) VALUES ($1, $2, $3, "
                     "$4, $5::jsonb, $6::boolean, $7, coalesce($8::boolean, false)) "
                     "RETURNING passthrough",
            8, NULL, values, NULL, NULL, 0);
        if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
            t->denied = is_denied(res);
            line(full.data, "skipped", db_message(res, conn));
            t->skipped++;
        } else {
            what = exists ? "updated" : "added";
            line(full.data, what,
                 disabled                              ? DISABLED_HERE
                 : !strcmp(PQgetvalue(res, 0, 0), "t") ? PASSTHROUGH_NOTE
                                                       : NULL);
            if (exists)
                t->updated++;
            else
                t->added++;
        }
    }
    PQclear(res);
    free(schema_text);
    strbuf_free(&full);
}

/* Rows of this target with the prefix whose upstream_tool is no longer listed. */
static void disable_dropped(PGconn *conn, const char *target, const char *prefix, json_t *tools,
                            const char *const *only, size_t only_count, struct tally *t)
{
    const char *values[2] = {target, prefix};
    PGresult *res = PQexecParams(conn,
                                 "SELECT tool, upstream_tool FROM outbox.mcp_tools WHERE target = "
                                 "$1 AND enabled AND upstream_tool IS NOT NULL AND "
                                 "left(tool, length($2)) = $2 ORDER BY tool",
                                 2, NULL, values, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        t->denied = is_denied(res);
        fprintf(stderr, "outbox-relay mcp-import: cannot read the imported tools: %s\n",
                db_message(res, conn));
        PQclear(res);
        return;
    }
    for (int i = 0; i < PQntuples(res); i++) {
        const char *tool = PQgetvalue(res, i, 0), *upstream = PQgetvalue(res, i, 1);
        if (only_count > 0 && !in_list(only, only_count, upstream))
            continue;
        bool listed = false;
        size_t k;
        json_t *v;
        json_array_foreach(tools, k, v)
        {
            if (!strcmp(json_string_value(json_object_get(v, "name")), upstream))
                listed = true;
        }
        if (listed)
            continue;
        const char *p[1] = {tool};
        PGresult *u =
            PQexecParams(conn, "UPDATE outbox.mcp_tools SET enabled = false WHERE tool = $1", 1,
                         NULL, p, NULL, NULL, 0);
        if (PQresultStatus(u) == PGRES_COMMAND_OK) {
            line(tool, "disabled", "the upstream no longer lists it");
            t->disabled++;
        } else {
            t->denied = is_denied(u);
            line(tool, "skipped", db_message(u, conn));
            t->skipped++;
        }
        PQclear(u);
    }
    PQclear(res);
}

/* ------------------------------------------------------------------ command */

static int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* One error line on stderr, control characters shown as '?'. */
static int fail(int code, const char *fmt, ...)
{
    char message[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    char *text = shown(message);
    fprintf(stderr, "outbox-relay mcp-import: %s\n", text);
    free(text);
    return code;
}

int mcp_import_run(PGconn *conn, const char *target, const char *prefix, const char *only,
                   bool passthrough_ro, const char *ca_file)
{
    const char *p[1] = {target};
    PGresult *res = PQexecParams(conn,
                                 "SELECT url, protocol, mcp_version, auth_secret, headers, "
                                 "ca_file, client_cert_file, client_key_file FROM "
                                 "outbox.targets WHERE name = $1",
                                 1, NULL, p, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        int code = fail(CLI_EXIT_DATABASE, "cannot read the target: %s", db_message(res, conn));
        if (is_denied(res))
            fprintf(stderr, "hint: mcp-import needs outbox_admin (it registers tools)\n");
        PQclear(res);
        return code;
    }
    if (PQntuples(res) == 0) {
        PQclear(res);
        return fail(CLI_EXIT_NO_SUCH_KEY, "no target '%s'", target);
    }
    if (strcmp(PQgetvalue(res, 0, 1), "mcp") != 0) {
        PQclear(res);
        return fail(CLI_EXIT_USAGE, "target '%s' is not an mcp target (its protocol is not 'mcp')",
                    target);
    }
    struct upstream u = {.url = NULL, .ca_file = ca_file};
    char *url = xstrdup(PQgetvalue(res, 0, 0));
    enum upstream_pref pref = upstream_pref_parse(PQgetvalue(res, 0, 2));
    char *secret = PQgetisnull(res, 0, 3) ? NULL : xstrdup(PQgetvalue(res, 0, 3));
    u.static_headers = target_parse_static_headers(target, PQgetvalue(res, 0, 4));
    char *target_ca = PQgetisnull(res, 0, 5) ? NULL : xstrdup(PQgetvalue(res, 0, 5));
    char *cert = PQgetisnull(res, 0, 6) ? NULL : xstrdup(PQgetvalue(res, 0, 6));
    char *key = PQgetisnull(res, 0, 7) ? NULL : xstrdup(PQgetvalue(res, 0, 7));
    if (target_ca)
        u.ca_file = target_ca;
    u.client_cert = cert;
    u.client_key = key;
    PQclear(res);
    u.url = url;
    if (secret) {
        const char *token = target_secret_env_allowed(secret) ? getenv(secret) : NULL;
        if (token == NULL || *token == '\0') {
            int code = fail(CLI_EXIT_DATABASE,
                            "the target's auth_secret names %s, which is not set here (the "
                            "import needs the token the relay uses)",
                            secret);
            free(secret);
            free(url);
            free(target_ca);
            free(cert);
            free(key);
            for (char **s = u.static_headers; *s; s++)
                free(*s);
            free(u.static_headers);
            return code;
        }
        struct strbuf h;
        strbuf_init(&h);
        strbuf_append_str(&h, "Authorization: Bearer ");
        strbuf_append_str(&h, token);
        u.auth_header = xstrdup(h.data);
        strbuf_free(&h);
        free(secret);
    }

    struct strbuf default_prefix;
    strbuf_init(&default_prefix);
    strbuf_append_str(&default_prefix, target);
    strbuf_append_str(&default_prefix, ".");
    if (prefix == NULL)
        prefix = default_prefix.data;

    char *only_copy = only ? xstrdup(only) : NULL;
    const char **only_names = NULL;
    size_t only_count = 0;
    if (only_copy) {
        only_names = xcalloc(strlen(only_copy) + 1, sizeof(char *));
        char *save = NULL;
        for (char *tok = strtok_r(only_copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
            if (*tok)
                only_names[only_count++] = tok;
    }

    int rc = CLI_EXIT_OK;
    char why[1024];
    json_t *tools = json_array();
    bool complete = false;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (!start_session(&u, pref, why, sizeof(why))) {
        rc = fail(CLI_EXIT_DATABASE, "cannot read the tools of '%s': %s", target, why);
    } else if (!list_tools(&u, tools, &complete, why, sizeof(why))) {
        rc = fail(CLI_EXIT_DATABASE, "cannot read the tools of '%s': %s", target, why);
    }
    end_session(&u);
    if (rc == CLI_EXIT_OK) {
        if (!complete)
            fprintf(stderr,
                    "outbox-relay mcp-import: %s; importing the tools read, disabling none\n", why);
        regex_t name_re;
        regcomp(&name_re, "^[A-Za-z0-9_.-]{1,128}$", REG_EXTENDED | REG_NOSUB);
        regex_t upstream_re;
        regcomp(&upstream_re, "^[^[:cntrl:]]{1,128}$", REG_EXTENDED | REG_NOSUB);
        struct tally t = {0};
        json_t *listed = json_array();
        size_t i;
        json_t *tool;
        json_array_foreach(tools, i, tool)
        {
            json_t *name = json_object_get(tool, "name");
            if (!json_is_string(name)) {
                line("(a tool without a name)", "skipped", "tools/list gave no name");
                t.skipped++;
                continue;
            }
            json_array_append(listed, tool);
            if (only_count > 0 && !in_list(only_names, only_count, json_string_value(name)))
                continue;
            if (regexec(&upstream_re, json_string_value(name), 0, NULL, 0) != 0) {
                line(json_string_value(name), "skipped",
                     "the upstream's name is empty, too long or holds control characters");
                t.skipped++;
                continue;
            }
            import_tool(conn, target, prefix, passthrough_ro, tool, &name_re, &t);
            if (t.denied)
                break;
        }
        for (size_t k = 0; k < only_count && !t.denied; k++) {
            bool found = false;
            json_array_foreach(listed, i, tool)
            {
                if (!strcmp(json_string_value(json_object_get(tool, "name")), only_names[k]))
                    found = true;
            }
            if (!found && complete)
                line(only_names[k], "skipped", "--only names it; the upstream does not list it");
        }
        if (complete && !t.denied)
            disable_dropped(conn, target, prefix, listed, only_names, only_count, &t);
        json_decref(listed);
        regfree(&name_re);
        regfree(&upstream_re);
        if (t.denied) {
            fprintf(stderr, "outbox-relay mcp-import: permission denied; hint: mcp-import "
                            "registers tools, which needs outbox_admin\n");
            rc = CLI_EXIT_DATABASE;
        } else {
            printf("%d added, %d updated, %d unchanged, %d disabled, %d skipped (target '%s', "
                   "%s)\n",
                   t.added, t.updated, t.unchanged, t.disabled, t.skipped, target,
                   u.era == UPSTREAM_ERA_MODERN ? UPSTREAM_MODERN_VERSION
                                                : UPSTREAM_LEGACY_VERSION);
        }
    }
    curl_global_cleanup();
    json_decref(tools);
    free(only_names);
    free(only_copy);
    strbuf_free(&default_prefix);
    free(u.auth_header);
    free(u.session_id);
    free(u.version);
    free(url);
    free(target_ca);
    free(cert);
    free(key);
    for (char **s = u.static_headers; *s; s++)
        free(*s);
    free(u.static_headers);
    return rc;
}
