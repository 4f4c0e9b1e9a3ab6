/*
 * mcp_protocol.c — MCP messages for the front door (mcp_protocol.h).
 *
 * DESIGN
 * The era is decided per request, never per connection or session: the
 * front door is stateless, and one host may speak both eras through one
 * pool of connections. A request whose params._meta carries
 * io.modelcontextprotocol/protocolVersion is modern (2026-07-28); any other
 * is legacy, speaking the version its MCP-Protocol-Version header names
 * (2025-03-26 when there is none, as the 2025 transport says).
 *
 * Modern requests carry what a session used to: the version, the client's
 * capabilities. The spec makes the headers mirror the body so that a proxy
 * can route without parsing JSON; a header that disagrees with the body is
 * refused (-32020, 400) rather than trusted, so that what a proxy saw and
 * what the front door does are the same request.
 *
 * The result of a call is built for two readers. structuredContent is for
 * the host's code (status, key, target, the saved response parsed when it is
 * JSON); the text block says the same for the model, starting with what the
 * status means ("outcome unknown, reconciling: do not retry with a new key;
 * calling again with the same key is safe"). What may have executed is never
 * an error: isError is set only for failed, cancelled and key_conflict,
 * which are final and certain. _meta["outbox-relay/final"] says whether
 * the status is final, for a relay that delivers to this front door as an
 * MCP target: a result that is not final is not the tool's outcome.
 */
#include "mcp/mcp_protocol.h"
#include "version.h"

#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const legacy_versions[] = {"2025-11-25", "2025-06-18", "2025-03-26"};

void mcp_request_free(struct mcp_request *req)
{
    if (req->doc)
        json_text_decref(req->doc); /* it owns root */
    else
        json_decref(req->root); /* a slimmed request's own (adm_request_slim) */
    free(req->arguments_text);
    memset(req, 0, sizeof(*req));
}

void mcp_error_clear(struct mcp_error *err)
{
    json_decref(err->data);
    memset(err, 0, sizeof(*err));
}

void mcp_error_set(struct mcp_error *err, int code, int http_status, const char *fmt, ...)
{
    err->code = code;
    err->http_status = http_status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
}

bool mcp_legacy_version_supported(const char *version)
{
    for (size_t i = 0; i < sizeof(legacy_versions) / sizeof(legacy_versions[0]); i++)
        if (!strcmp(version, legacy_versions[i]))
            return true;
    return false;
}

static json_t *supported_versions(void)
{
    json_t *list = json_array();
    json_array_append_new(list, json_string(MCP_MODERN_VERSION));
    for (size_t i = 0; i < sizeof(legacy_versions) / sizeof(legacy_versions[0]); i++)
        json_array_append_new(list, json_string(legacy_versions[i]));
    return list;
}

static bool is_valid_id(const json_t *id)
{
    return json_is_string(id) || json_is_integer(id);
}

/* A header value without the spaces and tabs around it, decoded when it is
 * a base64 sentinel (=?base64?…?=); NULL when absent or undecodable (then
 * *bad is set). The result is malloc'd. */
static char *header_value(const char *raw, bool *bad)
{
    if (raw == NULL)
        return NULL;
    while (*raw == ' ' || *raw == '\t')
        raw++;
    size_t n = strlen(raw);
    while (n && (raw[n - 1] == ' ' || raw[n - 1] == '\t'))
        n--;
    if (n >= 12 && !strncmp(raw, "=?base64?", 9) && !strncmp(raw + n - 2, "?=", 2)) {
        size_t len = n - 11;
        if (len % 4 != 0) {
            *bad = true;
            return NULL;
        }
        unsigned char *out = malloc(len + 1);
        int decoded = out ? EVP_DecodeBlock(out, (const unsigned char *)raw + 9, (int)len) : -1;
        if (decoded < 0) {
            free(out);
            *bad = true;
            return NULL;
        }
        if (len >= 1 && raw[9 + len - 1] == '=')
            decoded--;
        if (len >= 2 && raw[9 + len - 2] == '=')
            decoded--;
        out[decoded] = '\0';
        return (char *)out;
    }
    return strndup(raw, n);
}

/* What Mcp-Name must say for this method: params.name of tools/call,
 * params.taskId of tasks/get, tasks/update and tasks/cancel; NULL else. */
static const char *routed_name(const struct mcp_request *req)
{
    if (!strcmp(req->method, "tools/call") || !strcmp(req->method, "prompts/get"))
        return mcp_param_string(req, "name");
    if (!strcmp(req->method, "resources/read"))
        return mcp_param_string(req, "uri");
    if (!strcmp(req->method, "tasks/get") || !strcmp(req->method, "tasks/update") ||
        !strcmp(req->method, "tasks/cancel"))
        return mcp_param_string(req, "taskId");
    return NULL;
}

static bool mismatch(struct mcp_error *err, const char *header, const char *got, const char *want)
{
    if (got == NULL)
        mcp_error_set(err, MCP_HEADER_MISMATCH, 400,
                      "Header mismatch: the %s header is required "
                      "(the body says '%s')",
                      header, want ? want : "");
    else
        mcp_error_set(err, MCP_HEADER_MISMATCH, 400,
                      "Header mismatch: %s header value '%s' does not match body value '%s'",
                      header, got, want ? want : "(none)");
    return false;
}

/* The modern envelope and headers, in the order the spec's conformance
 * checks expect: the envelope, then a header that contradicts the body,
 * then the version, then a header that is missing. */
static bool check_modern(struct mcp_request *req, const struct mcp_headers *headers,
                         struct mcp_error *err)
{
    json_t *version = json_object_get(req->meta, MCP_META_VERSION);
    json_t *caps = json_object_get(req->meta, MCP_META_CAPABILITIES);
    json_t *info = json_object_get(req->meta, "io.modelcontextprotocol/clientInfo");
    if (!json_is_string(version)) {
        mcp_error_set(err, MCP_INVALID_PARAMS, 400,
                      "Invalid params: _meta[\"%s\"] must be a string", MCP_META_VERSION);
        return false;
    }
    if (!json_is_object(caps)) {
        mcp_error_set(err, MCP_INVALID_PARAMS, 400,
                      "Invalid params: the request is missing the required envelope key "
                      "_meta[\"%s\"] (an object)",
                      MCP_META_CAPABILITIES);
        return false;
    }
    if (info != NULL && !json_is_object(info)) {
        mcp_error_set(
            err, MCP_INVALID_PARAMS, 400,
            "Invalid params: _meta[\"io.modelcontextprotocol/clientInfo\"] must be an object");
        return false;
    }
    req->version = json_string_value(version);
    req->tasks_extension =
        json_object_get(json_object_get(caps, "extensions"), MCP_TASKS_EXTENSION) != NULL;
    bool bad = false, ok = false;
    char *h_version = header_value(headers->protocol_version, &bad);
    char *h_method = header_value(headers->method, &bad);
    char *h_name = header_value(headers->name, &bad);
    const char *name = routed_name(req);
    if (headers->no_header_layer) { /* stdio: the body alone */
        free(h_version);
        free(h_method);
        free(h_name);
        if (strcmp(req->version, MCP_MODERN_VERSION) == 0)
            return true;
        mcp_error_set(err, MCP_UNSUPPORTED_VERSION, 400, "Unsupported protocol version: %s",
                      req->version);
        err->data =
            json_pack("{s:o,s:s}", "supported", supported_versions(), "requested", req->version);
        return false;
    }
    if (h_version && strcmp(h_version, req->version))
        mismatch(err, "MCP-Protocol-Version", h_version, req->version);
    else if (h_method && strcmp(h_method, req->method))
        mismatch(err, "Mcp-Method", h_method, req->method);
    else if (strcmp(req->version, MCP_MODERN_VERSION) != 0) {
        mcp_error_set(err, MCP_UNSUPPORTED_VERSION, 400, "Unsupported protocol version: %s",
                      req->version);
        err->data =
            json_pack("{s:o,s:s}", "supported", supported_versions(), "requested", req->version);
    } else if (h_version == NULL)
        mismatch(err, "MCP-Protocol-Version", NULL, req->version);
    else if (h_method == NULL)
        mismatch(err, "Mcp-Method", NULL, req->method);
    else if (bad)
        mcp_error_set(err, MCP_HEADER_MISMATCH, 400,
                      "Header mismatch: a base64 header value (=?base64?…?=) does not decode");
    else if (name != NULL && (h_name == NULL || strcmp(h_name, name)))
        mismatch(err, "Mcp-Name", h_name, name);
    else
        ok = true;
    free(h_version);
    free(h_method);
    free(h_name);
    return ok;
}

bool mcp_parse(const char *body, size_t len, const struct mcp_headers *headers,
               struct mcp_request *req, struct mcp_error *err)
{
    memset(req, 0, sizeof(*req));
    struct json_text_error jerr;
    static const char *const arguments_path[] = {"params", "arguments"};
    struct json_text_span arguments = {.keys = arguments_path, .nkeys = 2};
    /* A key twice is refused, as jansson did here: a proxy that reads the
     * first "method" and the front door the last would see two requests. */
    req->doc = json_text_parse(body, len, JSON_TEXT_REJECT_DUPLICATES, &arguments, 1, &jerr);
    if (req->doc == NULL) {
        mcp_error_set(err, MCP_PARSE_ERROR, 400, "Parse error: %s", jerr.text);
        return false;
    }
    req->root = req->doc->root;
    if (arguments.found) {
        req->arguments_texts_start = arguments.texts_start;
        req->arguments_texts_end = arguments.texts_end;
        req->arguments_len = arguments.end - arguments.start;
        req->arguments_text = malloc(req->arguments_len + 1);
        if (req->arguments_text == NULL) {
            mcp_error_set(err, MCP_INTERNAL_ERROR, 500, "Internal error: out of memory");
            return false;
        }
        memcpy(req->arguments_text, body + arguments.start, req->arguments_len);
        req->arguments_text[req->arguments_len] = '\0';
    }
    if (json_is_array(req->root)) {
        mcp_error_set(err, MCP_INVALID_REQUEST, 400, "Batch requests are not supported");
        return false;
    }
    if (!json_is_object(req->root) || !json_is_string(json_object_get(req->root, "jsonrpc")) ||
        strcmp(json_string_value(json_object_get(req->root, "jsonrpc")), "2.0") != 0) {
        mcp_error_set(err, MCP_INVALID_REQUEST, 400,
                      "Invalid request: not a JSON-RPC 2.0 message (\"jsonrpc\": \"2.0\")");
        return false;
    }
    json_t *id = json_object_get(req->root, "id");
    json_t *method = json_object_get(req->root, "method");
    if (id != NULL && !is_valid_id(id)) {
        mcp_error_set(err, MCP_INVALID_REQUEST, 400,
                      "Invalid request: id must be a string or an integer");
        return false;
    }
    req->id = id;
    if (method == NULL) {
        /* A response from the client (to a request we never send). */
        if (id != NULL &&
            (json_object_get(req->root, "result") || json_object_get(req->root, "error"))) {
            req->era = MCP_LEGACY;
            req->version = MCP_LEGACY_DEFAULT;
            return true;
        }
        mcp_error_set(err, MCP_INVALID_REQUEST, 400, "Invalid request: no method");
        return false;
    }
    if (!json_is_string(method)) {
        mcp_error_set(err, MCP_INVALID_REQUEST, 400, "Invalid request: method must be a string");
        return false;
    }
    req->method = json_string_value(method);
    json_t *params = json_object_get(req->root, "params");
    if (params != NULL && !json_is_object(params)) {
        mcp_error_set(err, MCP_INVALID_PARAMS, 400, "Invalid params: params must be an object");
        return false;
    }
    req->params = params;
    json_t *meta = json_object_get(params, "_meta");
    if (meta != NULL && !json_is_object(meta)) {
        mcp_error_set(err, MCP_INVALID_PARAMS, 400, "Invalid params: _meta must be an object");
        return false;
    }
    req->meta = meta;
    bool modern_header = !headers->no_header_layer && headers->protocol_version &&
                         strcmp(headers->protocol_version, "2026-07-28") >= 0 &&
                         headers->protocol_version[0] == '2';
    if (json_object_get(meta, MCP_META_VERSION) != NULL) {
        req->era = MCP_MODERN;
        return check_modern(req, headers, err);
    }
    if (modern_header) {
        req->era = MCP_MODERN;
        if (!strcmp(req->method, "initialize")) {
            mcp_error_set(err, MCP_HEADER_MISMATCH, 400,
                          "Header mismatch: MCP-Protocol-Version %s on initialize, which has no "
                          "per-request envelope",
                          headers->protocol_version);
            return false;
        }
        mcp_error_set(err, MCP_INVALID_PARAMS, 400,
                      "Invalid params: the request is missing the required per-request envelope "
                      "key(s): _meta[\"%s\"], _meta[\"%s\"]",
                      MCP_META_VERSION, MCP_META_CAPABILITIES);
        return false;
    }
    req->era = MCP_LEGACY;
    snprintf(req->version_buf, sizeof(req->version_buf), "%s",
             headers->protocol_version ? headers->protocol_version : MCP_LEGACY_DEFAULT);
    req->version = req->version_buf;
    /* initialize negotiates; every later request names its version. */
    if (strcmp(req->method, "initialize") != 0 && !mcp_legacy_version_supported(req->version)) {
        mcp_error_set(err, MCP_INVALID_REQUEST, 400,
                      "Bad Request: unsupported MCP-Protocol-Version '%s' (supported: "
                      "2026-07-28, 2025-11-25, 2025-06-18, 2025-03-26)",
                      req->version);
        return false;
    }
    return true;
}

bool mcp_arguments_text(const struct mcp_request *req, const char **text, size_t *len,
                        struct mcp_error *err)
{
    const json_t *arguments = json_object_get(req->params, "arguments");
    if (arguments == NULL) {
        *text = "{}";
        *len = 2;
        return true;
    }
    if (req->arguments_text == NULL) { /* taken already: never "{}" for arguments given */
        mcp_error_set(err, MCP_INTERNAL_ERROR, 500, "Internal error: the arguments were taken");
        return false;
    }
    if (!json_is_object(arguments)) {
        mcp_error_set(err, MCP_INVALID_PARAMS, 200,
                      "Invalid params: arguments must be an object. Nothing was sent.");
        return false;
    }
    /* the first number in the arguments' bytes that numeric cannot hold */
    const struct json_text_number *first = NULL;
    const char *why = NULL;
    for (size_t i = 0; i < req->doc->nnums; i++) {
        const struct json_text_number *n = &req->doc->nums[i];
        const char *reason;
        if (n->text_off < req->arguments_texts_start || n->text_off >= req->arguments_texts_end ||
            (first != NULL && n->text_off > first->text_off))
            continue;
        if (!json_text_number_fits_numeric(req->doc->texts + n->text_off, n->text_len, &reason)) {
            first = n;
            why = reason;
        }
    }
    if (first != NULL) {
        int shown = first->text_len > 40 ? 40 : (int)first->text_len;
        mcp_error_set(err, MCP_INVALID_PARAMS, 200,
                      "Invalid params: the number %.*s%s in the arguments cannot be stored: %s. "
                      "Nothing was sent.",
                      shown, req->doc->texts + first->text_off, first->text_len > 40 ? "..." : "",
                      why);
        return false;
    }
    *text = req->arguments_text;
    *len = req->arguments_len;
    return true;
}

const char *mcp_param_string(const struct mcp_request *req, const char *name)
{
    return json_string_value(json_object_get(req->params, name));
}

const char *mcp_meta_string(const struct mcp_request *req, const char *name)
{
    return json_string_value(json_object_get(req->meta, name));
}

/* ---------------------------------------------------------------- envelopes */

static json_t *server_info(const char *version)
{
    return json_pack("{s:s,s:s,s:s}", "name", "outbox-relay", "title",
                     "outbox-relay MCP front door", "version", version ? version : "");
}

char *mcp_result_json(const struct mcp_request *req, json_t *result)
{
    return mcp_result_json_docs(req, result, NULL, 0);
}

char *mcp_result_json_docs(const struct mcp_request *req, json_t *result,
                           const struct json_text *const *docs, size_t ndocs)
{
    if (req->era == MCP_MODERN) {
        if (json_object_get(result, "resultType") == NULL)
            json_object_set_new(result, "resultType", json_string("complete"));
        json_t *meta = json_object_get(result, "_meta");
        if (meta == NULL) {
            meta = json_object();
            json_object_set_new(result, "_meta", meta);
        }
        json_object_set_new(meta, MCP_META_SERVER_INFO, server_info(OUTBOX_RELAY_VERSION));
    }
    json_t *msg = json_pack("{s:s,s:O,s:o}", "jsonrpc", "2.0", "id", req->id, "result", result);
    /* the request's document first, then the caller's: one table of all */
    const struct json_text *small[4];
    const struct json_text **all = ndocs + 1 <= 4 ? small : malloc((ndocs + 1) * sizeof(*all));
    char *text = NULL;
    if (all != NULL) {
        all[0] = req->doc;
        for (size_t i = 0; i < ndocs; i++)
            all[i + 1] = docs[i];
        text = json_text_dumps(msg, all, ndocs + 1, JSON_COMPACT);
        if (all != small)
            free((void *)all);
    }
    json_decref(msg);
    return text;
}

char *mcp_error_json(const json_t *id, const struct mcp_error *err)
{
    json_t *error = json_pack("{s:i,s:s}", "code", err->code, "message", err->message);
    if (err->data)
        json_object_set(error, "data", err->data);
    json_t *msg = json_pack("{s:s,s:o}", "jsonrpc", "2.0", "error", error);
    /* JSON-RPC 2.0 §5: an error answers with the request's id, or null when
     * it could not be read (a parse error, an invalid request). */
    json_object_set(msg, "id", id != NULL ? (json_t *)id : json_null());
    char *text = json_dumps(msg, JSON_COMPACT);
    json_decref(msg);
    return text;
}

/* ---------------------------------------------------------------- results */

json_t *mcp_initialize_result(const struct mcp_request *req, const char *server_version)
{
    json_t *asked = json_object_get(req->params, "protocolVersion");
    const char *version =
        json_is_string(asked) && mcp_legacy_version_supported(json_string_value(asked))
            ? json_string_value(asked)
            : MCP_LEGACY_LATEST;
    json_t *caps = json_pack("{s:{s:b}}", "tools", "listChanged", 0);
    if (!strcmp(version, "2025-11-25"))
        json_object_set_new(
            caps, "tasks",
            json_pack("{s:{},s:{},s:{s:{s:{}}}}", "list", "cancel", "requests", "tools", "call"));
    return json_pack("{s:s,s:o,s:o,s:s}", "protocolVersion", version, "capabilities", caps,
                     "serverInfo", server_info(server_version), "instructions",
                     "Each tool commits its action once per idempotency key. The host sets the key "
                     "in _meta[\"outbox-relay/idempotency-key\"] (or the Idempotency-Key header); "
                     "a call without an outcome yet is safe to repeat with the same key.");
}

json_t *mcp_discover_result(const char *server_version)
{
    (void)server_version; /* in _meta, by mcp_result_json */
    return json_pack("{s:o,s:{s:{},s:{s:{}}},s:s,s:i,s:s}", "supportedVersions",
                     supported_versions(), "capabilities", "tools", "extensions",
                     MCP_TASKS_EXTENSION, "instructions",
                     "Each tool commits its action once per idempotency key, set by the host in "
                     "_meta[\"outbox-relay/idempotency-key\"].",
                     "ttlMs", 3600000, "cacheScope", "public");
}

/* The result envelope every tool returns (outputSchema). */
static json_t *output_schema(void)
{
    return json_pack(
        "{s:s,s:{s:{s:s,s:[s,s,s,s,s,s,s,s,s,s,s]},s:{s:s},s:{s:s},s:{s:[s,s]},s:{},s:{s:[s,s]},"
        "s:{s:s}},s:[s,s,s]}",
        "type", "object", "properties", "status", "type", "string", "enum", "succeeded", "failed",
        "cancelled", "pending", "awaiting_approval", "delivering", "reconciling", "key_conflict",
        "invalid_arguments", "refused", "not_found", "key", "type", "string", "target", "type",
        "string", "response_status", "type", "integer", "null", "response", "attempts", "type",
        "integer", "null", "message", "type", "string", "required", "status", "key", "message");
}

json_t *mcp_tool_json(const struct mcp_request *req, const char *name, const char *title,
                      const char *description, const json_t *input_schema, bool destructive,
                      bool idempotent)
{
    json_t *tool =
        json_pack("{s:s,s:s,s:O,s:o,s:{s:b,s:b,s:b,s:b}}", "name", name, "description",
                  description ? description : "", "inputSchema", input_schema, "outputSchema",
                  output_schema(), "annotations", "idempotentHint", idempotent, "destructiveHint",
                  destructive, "readOnlyHint", 0, "openWorldHint", 1);
    if (title && *title)
        json_object_set_new(tool, "title", json_string(title));
    if (req->era == MCP_LEGACY && !strcmp(req->version, "2025-11-25"))
        json_object_set_new(tool, "execution", json_pack("{s:s}", "taskSupport", "optional"));
    return tool;
}

void mcp_tool_set_passthrough(json_t *tool)
{
    json_object_del(tool, "outputSchema");
    json_object_del(tool, "execution");
    json_t *annotations = json_object_get(tool, "annotations");
    json_object_set_new(annotations, "readOnlyHint", json_true());
    json_object_set_new(annotations, "idempotentHint", json_true());
    json_object_set_new(annotations, "destructiveHint", json_false());
}

/* "10 minutes", "1 hour", "90 seconds": the largest whole unit. */
static void window_text(double seconds, char *out, size_t len)
{
    static const struct {
        double s;
        const char *one, *many;
    } units[] = {{86400, "day", "days"}, {3600, "hour", "hours"}, {60, "minute", "minutes"}};
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        double n = seconds / units[i].s;
        if (n >= 1 && n == (double)(long long)n) {
            snprintf(out, len, "%lld %s", (long long)n, n == 1 ? units[i].one : units[i].many);
            return;
        }
    }
    snprintf(out, len, "%g %s", seconds, seconds == 1 ? "second" : "seconds");
}

char *mcp_arguments_key_sentence(double window_s, const char *reference)
{
    char window[64], out[512];
    window_text(window_s, window, sizeof(window));
    if (reference)
        snprintf(out, sizeof(out),
                 "Calling this tool again with the same arguments within %s of the first call "
                 "returns the first call's outcome and does not act again; to make a second, "
                 "identical action on purpose, call it with a new \"%.128s\".",
                 window, reference);
    else
        snprintf(out, sizeof(out),
                 "Calling this tool again with the same arguments within %s of the first call "
                 "returns the first call's outcome and does not act again; a second, identical "
                 "action needs other arguments, or that time to have passed.",
                 window);
    return strdup(out);
}

/* A text[] literal ({a,b,"c d"}) as a JSON array of strings. */
static json_t *text_array(const char *literal)
{
    json_t *out = json_array();
    if (literal == NULL || *literal != '{')
        return out;
    const char *p = literal + 1;
    char item[512];
    while (*p && *p != '}') {
        size_t n = 0;
        if (*p == '"') {
            for (p++; *p && *p != '"'; p++) {
                if (*p == '\\' && p[1])
                    p++;
                if (n + 1 < sizeof(item))
                    item[n++] = *p;
            }
            if (*p == '"')
                p++;
        } else {
            for (; *p && *p != ',' && *p != '}'; p++)
                if (n + 1 < sizeof(item))
                    item[n++] = *p;
        }
        item[n] = '\0';
        json_array_append_new(out, json_string(item));
        if (*p == ',')
            p++;
    }
    return out;
}

/* The saved response (the target's bytes, as the relay saved them): parsed
 * when it is JSON, its numbers kept as written (*doc, which owns the
 * value's nodes), else the text. json_text, not jansson: jansson would turn
 * 19.99 into 19.989999999999998, and refuse 123456789012345678901234567890
 * or 1e400 so that a JSON answer came back as a string. */
static json_t *response_value(const char *body, struct json_text **doc)
{
    *doc = NULL;
    if (body == NULL)
        return json_null();
    *doc = json_text_parse(body, strlen(body), JSON_TEXT_DECODE_ANY, NULL, 0, NULL);
    return *doc ? json_incref((*doc)->root) : json_string(body);
}

/* The text block: what the outcome means, as one sentence for the model
 * (outbox.mcp_message), then a line break and the same structuredContent as
 * JSON (keys sorted, the response's numbers as written). */
static json_t *text_content(const char *message, json_t *value, const struct json_text *doc)
{
    char *text = json_text_dumps(value, &doc, 1, JSON_COMPACT | JSON_SORT_KEYS);
    json_t *content = json_pack("[{s:s}]", "type", "text");
    json_object_set_new(json_array_get(content, 0), "text",
                        json_sprintf("%s\n%s", message, text ? text : "{}"));
    free(text);
    return content;
}

/* A saved response that is an MCP tools/call result (what the relay saves
 * for an 'mcp' target, relay/mcp_upstream.c): an object with a "content"
 * array of typed blocks and no member a CallToolResult does not have
 * (resultType is one in 2026-07-28: our own front door writes it). */
bool mcp_is_upstream_result(const json_t *r)
{
    json_t *content = json_object_get(r, "content");
    if (!json_is_object(r) || !json_is_array(content))
        return false;
    const char *name;
    json_t *v;
    json_object_foreach((json_t *)r, name, v)
    {
        if (strcmp(name, "content") && strcmp(name, "structuredContent") &&
            strcmp(name, "isError") && strcmp(name, "_meta") && strcmp(name, "resultType"))
            return false;
    }
    size_t i;
    json_array_foreach(content, i, v)
    {
        if (!json_is_string(json_object_get(v, "type")))
            return false;
    }
    return true;
}

json_t *mcp_call_result(const struct mcp_answer *a, struct json_text **response_doc)
{
    struct json_text *doc;
    json_t *sc =
        json_pack("{s:s,s:s,s:s,s:s}", "status", a->status, "key", a->key ? a->key : "", "target",
                  a->target ? a->target : "", "message", a->message ? a->message : "");
    json_object_set_new(sc, "response_status",
                        a->response_status ? json_integer(a->response_status) : json_null());
    /* An MCP upstream's result: its structuredContent is the response, its
     * content blocks follow the status block (the tool's own words). The
     * nodes stay doc's, so their numbers are written as the upstream wrote
     * them. */
    json_t *response = response_value(a->response_body, &doc);
    bool upstream = mcp_is_upstream_result(response);
    if (upstream) {
        json_t *structured = json_object_get(response, "structuredContent");
        json_object_set(sc, "response", structured ? structured : json_null());
    } else {
        json_object_set(sc, "response", response);
    }
    json_object_set_new(sc, "attempts", a->attempts >= 0 ? json_integer(a->attempts) : json_null());
    if (!strcmp(a->status, "key_conflict"))
        json_object_set_new(sc, "fields", text_array(a->conflict_fields));
    bool is_error = !strcmp(a->status, "failed") || !strcmp(a->status, "cancelled") ||
                    !strcmp(a->status, "key_conflict");
    json_t *content = text_content(a->message ? a->message : "", sc, doc);
    if (upstream)
        json_array_extend(content, json_object_get(response, "content"));
    json_decref(response);
    json_t *result = json_pack("{s:o,s:O,s:b,s:{s:b}}", "content", content, "structuredContent", sc,
                               "isError", is_error, "_meta", MCP_META_FINAL, a->final);
    json_decref(sc);
    if (response_doc)
        *response_doc = doc;
    else
        json_text_decref(doc);
    return result;
}

json_t *mcp_tool_error_result(const char *status, const char *key, const char *message,
                              json_t *details)
{
    json_t *sc =
        json_pack("{s:s,s:s,s:s}", "status", status, "key", key ? key : "", "message", message);
    if (details)
        json_object_set_new(sc, "errors", details);
    json_t *result = json_pack("{s:[{s:s,s:s}],s:o,s:b}", "content", "type", "text", "text",
                               message, "structuredContent", sc, "isError", 1);
    return result;
}

const char *mcp_task_status(const struct mcp_answer *a, enum mcp_era era)
{
    if (!strcmp(a->status, "succeeded"))
        return "completed";
    if (!strcmp(a->status, "failed"))
        return era == MCP_MODERN ? "completed" : "failed"; /* 2026: completed, result.isError */
    if (!strcmp(a->status, "cancelled"))
        return "cancelled";
    return "working"; /* pending, awaiting approval, delivering, reconciling: never failed */
}

json_t *mcp_task_json(const struct mcp_answer *a, enum mcp_era era)
{
    bool slow = !strcmp(a->status, "reconciling") || !strcmp(a->status, "awaiting_approval");
    const char *updated = a->task_updated_at ? a->task_updated_at : a->task_created_at;
    json_t *task = json_pack(
        "{s:s,s:s,s:s,s:s,s:s}", "taskId", a->task_id ? a->task_id : "", "status",
        mcp_task_status(a, era), "statusMessage", a->message ? a->message : "", "createdAt",
        a->task_created_at ? a->task_created_at : "", "lastUpdatedAt", updated ? updated : "");
    json_t *ttl = a->task_ttl_ms >= 0 ? json_integer(a->task_ttl_ms) : json_null();
    json_object_set_new(task, era == MCP_MODERN ? "ttlMs" : "ttl", ttl);
    json_object_set_new(task, era == MCP_MODERN ? "pollIntervalMs" : "pollInterval",
                        json_integer(slow ? 5000 : 1000));
    return task;
}
