/*
 * test-receiver: a small, real HTTP/1.1 endpoint for exercising outbox-relay.
 *
 * Why it is shaped like this
 * --------------------------
 * The relay promises at-least-once delivery with an idempotency key, so the
 * interesting tests are about what happens *between* "the receiver acted" and
 * "the relay learned that it acted": dropped connections, late answers, resets,
 * throttling, garbage on the wire.  A mock inside the relay's own process could
 * not produce those failures faithfully, so this is a separate process that
 * speaks real TCP and real HTTP and injects faults at exactly the points that
 * matter (before or after the effect).
 *
 *  - The HTTP server is the relay's own (relay/lib/http_server.c): libuv, one thread,
 *    libhttp-parser, one request per connection at a time with pipelined
 *    bytes held until the answer is written, answers in order, lingering
 *    close.  All state here (per-key counters, statistics) is touched from
 *    the one loop thread, so no locking; late and slow answers are answers
 *    with a delay (the connection's timer holds them).  The faults that are
 *    not answers (drop_after, reset_before, garbage_after) are httpd's calls
 *    for ending a connection: close, reset, raw bytes then close.
 *  - Every buffer is bounded (httpd's limits): URL 8 KiB (414), header count
 *    128 and header bytes 80 KiB (431), bodies 2 MiB (413 + close), buffered
 *    pipelined input 1 MiB (reading pauses beyond it).  Unlike the admin port,
 *    idle connections are never closed: the relay's connection pool must not
 *    race a receiver that hangs up on it.
 *  - Per-key state lives in a chained hash table (FNV-1a, power-of-two buckets,
 *    grows at load factor 1) with an insertion-ordered list for stable output.
 *  - "Acting" is the observable side effect: a per-key counter.  Tests compare
 *    effects with deliveries to detect duplicate effects, and /_requests/{key}
 *    exposes what the relay actually sent (headers, body).
 *  - An outage mode (POST /_mode, --mode-status) answers every delivery with
 *    one status and no effect, before any fault is considered, so tests can
 *    play a target that is down, overloaded, rate-limiting or gone.
 *  - /_stats keeps the largest number of delivery arrivals in any sliding
 *    second, exactly: a ring of the arrival times of the last second (it never
 *    holds more than that maximum) is trimmed and pushed on each arrival.
 *  - Every libuv handle is closed with uv_close and its memory released in the
 *    close callback; on SIGTERM/SIGINT the loop runs until all callbacks ran and
 *    uv_loop_close() must succeed, so AddressSanitizer/LeakSanitizer runs are
 *    clean and a leak in the receiver cannot hide one in the relay's tests.
 */
#include "lib/http_server.h"
#include "order_log.h"
#include "lib/strbuf.h"

#include <errno.h>
#include <http_parser.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <uv.h>

#define MAX_BODY_BYTES (2u * 1024u * 1024u)
#define MAX_URL_BYTES (8u * 1024u)
#define MAX_HEADERS 128u
#define MAX_HEADER_PART_BYTES (80u * 1024u)
#define MAX_KEY_BYTES 1024u
#define READ_CHUNK_BYTES (64u * 1024u)
#define MAX_BUFFERED_INPUT_BYTES (1024u * 1024u)
#define DRAIN_TIMEOUT_MS 2000u
#define MAX_DELAY_MS 86400000ull
#define MAX_RETRY_AFTER_BYTES 64u
#define MAX_RESPONSE_BYTES (16ull * 1024ull * 1024ull)
#define ARRIVAL_WINDOW_NS 1000000000ull
#define NS_PER_MS 1000000ull

/* ------------------------------------------------------------------------ */
/* Fault modes                                                               */
/* ------------------------------------------------------------------------ */

enum fault_mode {
    FAULT_NONE = -1,
    FAULT_DROP_AFTER = 0,
    FAULT_LATE,
    FAULT_RESET_BEFORE,
    FAULT_STATUS_500,
    FAULT_STATUS_429,
    FAULT_GARBAGE_AFTER,
    FAULT_STATUS_410,
    FAULT_MODE_COUNT
};

static const char *const fault_mode_names[FAULT_MODE_COUNT] = {
    "drop_after", "late", "reset_before", "status_500", "status_429", "garbage_after", "status_410",
};

/* The modes --random-faults picks from (uniformly). */
static const enum fault_mode random_fault_modes[] = {
    FAULT_DROP_AFTER, FAULT_LATE, FAULT_RESET_BEFORE, FAULT_STATUS_500, FAULT_STATUS_429,
};
#define RANDOM_FAULT_MODE_COUNT (sizeof random_fault_modes / sizeof random_fault_modes[0])

static enum fault_mode fault_mode_from_name(const char *name)
{
    for (int mode = 0; mode < FAULT_MODE_COUNT; mode++) {
        if (strcmp(name, fault_mode_names[mode]) == 0)
            return (enum fault_mode)mode;
    }
    return FAULT_NONE;
}

/* ------------------------------------------------------------------------ */
/* Memory                                                                    */
/* ------------------------------------------------------------------------ */

static char *copy_bytes(const char *bytes, size_t count)
{
    char *copy = malloc(count + 1);
    if (!copy)
        return NULL;
    if (count)
        memcpy(copy, bytes, count);
    copy[count] = '\0';
    return copy;
}

static void *checked_malloc(size_t size)
{
    void *memory = malloc(size);
    if (!memory) {
        fprintf(stderr, "test-receiver: out of memory\n");
        abort();
    }
    return memory;
}

/* ------------------------------------------------------------------------ */
/* Per-key state: chained hash table with insertion order                    */
/* ------------------------------------------------------------------------ */

struct key_state {
    struct key_state *bucket_next;
    struct key_state *order_next;
    uint64_t hash;
    uint64_t deliveries;
    uint64_t effects;
    int stored_status; /* 0 = never acted on */
    char *stored_body;
    size_t stored_body_length;
    /* Header bytes of the last delivery, packed as they arrived (see
     * pack_headers); turned into JSON only when /_requests/{key} asks. */
    char *last_headers;
    size_t last_headers_capacity;
    size_t last_header_count;
    char *last_body;
    size_t last_body_length;
    size_t key_length;
    char key[]; /* NUL-terminated copy, may contain NUL itself */
};

struct key_table {
    struct key_state **buckets;
    size_t bucket_count; /* power of two */
    size_t entry_count;
    struct key_state *order_head;
    struct key_state *order_tail;
};

static uint64_t hash_key(const char *key, size_t length)
{
    uint64_t hash = 14695981039346656037ull; /* FNV-1a */
    for (size_t i = 0; i < length; i++) {
        hash ^= (unsigned char)key[i];
        hash *= 1099511628211ull;
    }
    return hash;
}

static void key_table_init(struct key_table *table)
{
    memset(table, 0, sizeof *table);
    table->bucket_count = 1024;
    table->buckets = calloc(table->bucket_count, sizeof *table->buckets);
    if (!table->buckets) {
        fprintf(stderr, "test-receiver: out of memory\n");
        abort();
    }
}

static void key_table_free(struct key_table *table)
{
    struct key_state *entry = table->order_head;
    while (entry) {
        struct key_state *next = entry->order_next;
        free(entry->stored_body);
        free(entry->last_headers);
        free(entry->last_body);
        free(entry);
        entry = next;
    }
    free(table->buckets);
    memset(table, 0, sizeof *table);
}

static struct key_state *key_table_find(const struct key_table *table, const char *key,
                                        size_t length)
{
    uint64_t hash = hash_key(key, length);
    struct key_state *entry = table->buckets[hash & (table->bucket_count - 1)];
    for (; entry; entry = entry->bucket_next) {
        if (entry->hash == hash && entry->key_length == length &&
            memcmp(entry->key, key, length) == 0)
            return entry;
    }
    return NULL;
}

static void key_table_grow(struct key_table *table)
{
    size_t new_count = table->bucket_count * 2;
    struct key_state **new_buckets = calloc(new_count, sizeof *new_buckets);
    if (!new_buckets)
        return; /* keep working with longer chains */
    for (struct key_state *entry = table->order_head; entry; entry = entry->order_next) {
        size_t index = entry->hash & (new_count - 1);
        entry->bucket_next = new_buckets[index];
        new_buckets[index] = entry;
    }
    free(table->buckets);
    table->buckets = new_buckets;
    table->bucket_count = new_count;
}

static struct key_state *key_table_get_or_create(struct key_table *table, const char *key,
                                                 size_t length)
{
    struct key_state *entry = key_table_find(table, key, length);
    if (entry)
        return entry;
    if (table->entry_count >= table->bucket_count)
        key_table_grow(table);
    entry = checked_malloc(sizeof *entry + length + 1);
    memset(entry, 0, sizeof *entry);
    memcpy(entry->key, key, length);
    entry->key[length] = '\0';
    entry->key_length = length;
    entry->hash = hash_key(key, length);
    size_t index = entry->hash & (table->bucket_count - 1);
    entry->bucket_next = table->buckets[index];
    table->buckets[index] = entry;
    if (table->order_tail)
        table->order_tail->order_next = entry;
    else
        table->order_head = entry;
    table->order_tail = entry;
    table->entry_count++;
    return entry;
}

/* ------------------------------------------------------------------------ */
/* Receiver and connection state                                             */
/* ------------------------------------------------------------------------ */

/*
 * The outage mode: with status != 0 every delivery (and, with status_checks,
 * every GET /status/{key}) is answered with `status` and {"error":"mode"}.
 */
struct outage_mode {
    int status; /* 0: normal operation */
    bool status_checks;
    char retry_after[MAX_RETRY_AFTER_BYTES + 1]; /* "" = no Retry-After header */
};

struct options {
    const char *listen_address;
    bool dedupe;
    const char *key_header;
    uint64_t late_ms;
    uint64_t delay_ms;
    double random_fault_rate;
    uint64_t seed;
    uint64_t response_bytes; /* --response-bytes: pad delivery answers to this size; 0 = off */
    struct outage_mode mode; /* --mode-status, --mode-retry-after, --mode-status-checks */
};

struct statistics {
    uint64_t requests_total;
    uint64_t deliveries_total;
    uint64_t effects_total;
    uint64_t deduplicated_total;
    uint64_t faults_total;
    uint64_t faults_by_mode[FAULT_MODE_COUNT];
    uint64_t keys_acted_on;
    uint64_t keys_with_duplicate_effects;
    uint64_t mode_answers_total;              /* deliveries answered by the mode */
    uint64_t mode_status_check_answers_total; /* GET /status/{key} answered by the mode */
    uint64_t max_deliveries_1s;
    uint64_t first_delivery_ns; /* uv_hrtime() of the first delivery; valid if deliveries_total */
    uint64_t last_delivery_ns;
};

/* Arrival times (uv_hrtime, ns) of the deliveries of the last second, oldest first. */
struct arrival_window {
    uint64_t *times;
    size_t capacity; /* power of two, or 0 */
    size_t head;     /* index of the oldest */
    size_t count;
};

struct receiver {
    struct options options;
    uv_loop_t *loop;
    httpd_t *httpd;
    uv_signal_t sigterm_watcher;
    uv_signal_t sigint_watcher;
    bool shutting_down;
    struct key_table keys;
    struct statistics stats;
    struct outage_mode mode;
    struct arrival_window arrivals;
    uint64_t random_state;
};

/* One request being answered: where it came from, and the receiver. */
struct exchange {
    struct receiver *receiver;
    httpd_conn_t *conn;
    const struct httpd_request *request;
};

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */
/* ------------------------------------------------------------------------ */

static uint64_t random_next(struct receiver *receiver)
{
    uint64_t z = (receiver->random_state += 0x9e3779b97f4a7c15ull); /* splitmix64 */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double random_unit(struct receiver *receiver)
{
    return (double)(random_next(receiver) >> 11) * 0x1.0p-53;
}

/* A JSON string for arbitrary bytes; invalid UTF-8 bytes become '?'. */
static json_t *json_string_lossy(const char *bytes, size_t length)
{
    json_t *string = json_stringn(bytes, length);
    if (string)
        return string;
    char *copy = copy_bytes(bytes, length);
    if (!copy)
        return NULL;
    for (size_t i = 0; i < length; i++) {
        if ((unsigned char)copy[i] >= 0x80)
            copy[i] = '?';
    }
    string = json_stringn(copy, length);
    free(copy);
    return string;
}

/* Sets object[key] = value for a key that may not be valid UTF-8. */
static void json_object_set_lossy(json_t *object, const char *key, size_t key_length, json_t *value)
{
    if (json_object_setn_new(object, key, key_length, json_incref(value)) != 0) {
        char *copy = copy_bytes(key, key_length);
        if (copy) {
            for (size_t i = 0; i < key_length; i++) {
                if ((unsigned char)copy[i] >= 0x80)
                    copy[i] = '?';
            }
            json_object_setn_new(object, copy, key_length, json_incref(value));
            free(copy);
        }
    }
    json_decref(value);
}

static char *json_dump_compact(const json_t *value)
{
    char *text = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text) {
        fprintf(stderr, "test-receiver: out of memory\n");
        abort();
    }
    return text;
}

/* Percent-decodes into a new buffer; returns NULL on malformed escapes. */
static char *percent_decode(const char *text, size_t length, size_t *decoded_length)
{
    char *decoded = checked_malloc(length + 1);
    long decoded_bytes = httpd_percent_decode(text, length, decoded, length + 1);
    if (decoded_bytes < 0) {
        free(decoded);
        return NULL;
    }
    *decoded_length = (size_t)decoded_bytes;
    return decoded;
}

static bool starts_with(const char *text, size_t length, const char *prefix)
{
    size_t prefix_length = strlen(prefix);
    return length >= prefix_length && memcmp(text, prefix, prefix_length) == 0;
}

static bool equals(const char *text, size_t length, const char *literal)
{
    return strlen(literal) == length && memcmp(text, literal, length) == 0;
}

/* ------------------------------------------------------------------------ */
/* Answers                                                                   */
/* ------------------------------------------------------------------------ */

/*
 * Sends a complete response (httpd: the body is omitted for HEAD; 204 and 304
 * go without Content-Length, 205 with Content-Length: 0).  With delay_ms > 0
 * the bytes are written when the delay is over.
 */
static void send_response(const struct exchange *ex, int status, const char *extra_headers,
                          const char *body, size_t body_length, uint64_t delay_ms)
{
    struct httpd_response response = {
        .status = status,
        .headers = extra_headers,
        .body = body,
        .body_len = body_length,
        .delay_ms = delay_ms,
    };
    httpd_respond(ex->conn, &response);
}

static void send_json(const struct exchange *ex, int status, const json_t *value)
{
    char *text = json_dump_compact(value);
    send_response(ex, status, NULL, text, strlen(text), 0);
    free(text);
}

static void send_error(const struct exchange *ex, int status, const char *message)
{
    httpd_respond_error(ex->conn, status, NULL, message);
}

/* ------------------------------------------------------------------------ */
/* Request helpers                                                           */
/* ------------------------------------------------------------------------ */

/*
 * Every delivery keeps its headers for /_requests/{key}, which is rarely
 * asked, so they are kept as one packed copy and serialized only on demand:
 * per header its name length and value length (uint32_t each, native byte
 * order, unaligned), then the name bytes and the value bytes.
 */
_Static_assert(MAX_HEADER_PART_BYTES <= UINT32_MAX, "header part lengths fit in 32 bits");
#define PACKED_LENGTHS_BYTES (2 * sizeof(uint32_t))

static void pack_headers(const struct httpd_request *request, struct key_state *entry)
{
    size_t length = 0;
    for (size_t i = 0; i < request->header_count; i++) {
        const struct httpd_header *header = &request->headers[i];
        length += PACKED_LENGTHS_BYTES + header->name_len + header->value_len;
    }
    if (length > entry->last_headers_capacity) {
        free(entry->last_headers);
        entry->last_headers = checked_malloc(length);
        entry->last_headers_capacity = length;
    }
    char *out = entry->last_headers;
    for (size_t i = 0; i < request->header_count; i++) {
        const struct httpd_header *header = &request->headers[i];
        uint32_t lengths[2] = {(uint32_t)header->name_len, (uint32_t)header->value_len};
        memcpy(out, lengths, sizeof lengths);
        out += sizeof lengths;
        if (header->name_len)
            memcpy(out, header->name, header->name_len);
        out += header->name_len;
        if (header->value_len)
            memcpy(out, header->value, header->value_len);
        out += header->value_len;
    }
    entry->last_header_count = request->header_count;
}

/* {"lower-case-name":"value",...}; repeated names are joined with ", ". */
static char *serialize_headers(const struct key_state *entry)
{
    json_t *object = json_object();
    const char *in = entry->last_headers;
    for (size_t i = 0; i < entry->last_header_count; i++) {
        uint32_t lengths[2];
        memcpy(lengths, in, sizeof lengths);
        in += sizeof lengths;
        const char *header_name = in;
        size_t name_length = lengths[0];
        in += name_length;
        const char *header_value = in;
        size_t value_length = lengths[1];
        in += value_length;

        char *name = copy_bytes(header_name, name_length);
        if (!name)
            continue;
        for (size_t j = 0; j < name_length; j++) {
            if (name[j] >= 'A' && name[j] <= 'Z')
                name[j] = (char)(name[j] - 'A' + 'a');
        }
        json_t *existing = json_object_getn(object, name, name_length);
        json_t *value;
        if (existing && json_is_string(existing)) {
            struct strbuf joined;
            strbuf_init(&joined);
            strbuf_append(&joined, json_string_value(existing), json_string_length(existing));
            strbuf_append(&joined, ", ", 2);
            strbuf_append(&joined, header_value, value_length);
            value = json_string_lossy(joined.data, joined.len);
            strbuf_free(&joined);
        } else {
            value = json_string_lossy(header_value, value_length);
        }
        if (value)
            json_object_set_lossy(object, name, name_length, value);
        free(name);
    }
    char *text = json_dump_compact(object);
    json_decref(object);
    return text;
}

/*
 * Reads {"_fault": "<mode>", "_fault_times": n} from a JSON object body.
 * Returns FAULT_NONE when the body does not ask for a fault.
 */
static enum fault_mode requested_fault(const struct httpd_request *request, json_int_t *times)
{
    *times = 1;
    if (request->body_len == 0 || !memmem(request->body, request->body_len, "_fault", 6))
        return FAULT_NONE;
    json_t *document = json_loadb(request->body, request->body_len, 0, NULL);
    enum fault_mode mode = FAULT_NONE;
    if (json_is_object(document)) {
        json_t *fault = json_object_get(document, "_fault");
        if (json_is_string(fault))
            mode = fault_mode_from_name(json_string_value(fault));
        json_t *fault_times = json_object_get(document, "_fault_times");
        if (json_is_integer(fault_times))
            *times = json_integer_value(fault_times);
    }
    json_decref(document);
    return mode;
}

/*
 * Reads {"_answer": "<text>"} from a JSON object body: the body the receiver
 * answers with when it acts, exactly that text (a string, so that no JSON
 * parser here rewrites its numbers: a test of what a client shows of a
 * target's 19.99 needs the target to say 19.99). NULL when there is none;
 * else malloc'd, its length in *length.
 */
static char *requested_answer(const struct httpd_request *request, size_t *length)
{
    if (request->body_len == 0 || !memmem(request->body, request->body_len, "_answer", 7))
        return NULL;
    json_t *document = json_loadb(request->body, request->body_len, 0, NULL);
    json_t *answer = json_object_get(document, "_answer");
    char *text = NULL;
    if (json_is_string(answer)) {
        *length = json_string_length(answer);
        text = copy_bytes(json_string_value(answer), *length);
    }
    json_decref(document);
    return text;
}

/*
 * Reads a top-level string field "ref" from a JSON object body, the client
 * reference a legacy API uses when no idempotency key header is sent.
 */
static bool body_reference(const struct httpd_request *request, char *out, size_t size)
{
    if (request->body_len == 0 || !memmem(request->body, request->body_len, "\"ref\"", 5))
        return false;
    json_t *document = json_loadb(request->body, request->body_len, 0, NULL);
    json_t *ref = json_is_object(document) ? json_object_get(document, "ref") : NULL;
    bool found =
        json_is_string(ref) && json_string_length(ref) > 0 && json_string_length(ref) < size;
    if (found)
        memcpy(out, json_string_value(ref), json_string_length(ref) + 1);
    json_decref(document);
    return found;
}

/* ------------------------------------------------------------------------ */
/* Outage mode and arrival statistics                                        */
/* ------------------------------------------------------------------------ */

/* 0 (normal) or 200..599; 200 means normal too. */
static bool mode_status_valid(long long status)
{
    return status == 0 || (status >= 200 && status <= 599);
}

/* NULL when `text` can be sent verbatim as a Retry-After value, else what is wrong. */
static const char *retry_after_problem(const char *text, size_t length)
{
    if (length == 0 || length > MAX_RETRY_AFTER_BYTES)
        return "must be 1..64 bytes";
    for (size_t i = 0; i < length; i++) {
        unsigned char byte = (unsigned char)text[i];
        if (byte < 0x20 || byte > 0x7e)
            return "must be printable ASCII";
    }
    if (text[0] == ' ' || text[length - 1] == ' ')
        return "must not start or end with a space";
    return NULL;
}

static void mode_set(struct outage_mode *mode, long long status, const char *retry_after,
                     bool status_checks)
{
    memset(mode, 0, sizeof *mode);
    mode->status = status == 200 ? 0 : (int)status;
    mode->status_checks = status_checks;
    if (retry_after)
        snprintf(mode->retry_after, sizeof mode->retry_after, "%s", retry_after);
}

/* Answers with the mode's status, its Retry-After and {"error":"mode"}. */
static void send_mode_answer(const struct exchange *ex)
{
    const struct outage_mode *mode = &ex->receiver->mode;
    char retry_after_header[MAX_RETRY_AFTER_BYTES + 32] = "";
    if (mode->retry_after[0])
        snprintf(retry_after_header, sizeof retry_after_header, "Retry-After: %s\r\n",
                 mode->retry_after);
    static const char body[] = "{\"error\":\"mode\"}";
    send_response(ex, mode->status, retry_after_header, body, sizeof body - 1, 0);
}

/*
 * Notes a delivery arrival: first/last arrival time and the largest number
 * of arrivals in any sliding second.  The ring keeps only the arrivals of the
 * last second, so it never holds more than max_deliveries_1s entries.
 */
static void record_delivery_arrival(struct receiver *receiver)
{
    uint64_t now = uv_hrtime();
    struct arrival_window *window = &receiver->arrivals;
    while (window->count > 0 && now - window->times[window->head] >= ARRIVAL_WINDOW_NS) {
        window->head = (window->head + 1) & (window->capacity - 1);
        window->count--;
    }
    if (window->count == window->capacity) {
        size_t new_capacity = window->capacity ? window->capacity * 2 : 256;
        uint64_t *grown = checked_malloc(new_capacity * sizeof *grown);
        for (size_t i = 0; i < window->count; i++)
            grown[i] = window->times[(window->head + i) & (window->capacity - 1)];
        free(window->times);
        window->times = grown;
        window->capacity = new_capacity;
        window->head = 0;
    }
    window->times[(window->head + window->count) & (window->capacity - 1)] = now;
    window->count++;

    struct statistics *stats = &receiver->stats;
    if (window->count > stats->max_deliveries_1s)
        stats->max_deliveries_1s = window->count;
    if (stats->deliveries_total == 1)
        stats->first_delivery_ns = now;
    stats->last_delivery_ns = now;
}

/* ------------------------------------------------------------------------ */
/* Deliveries                                                                */
/* ------------------------------------------------------------------------ */

/* True when JSON writes these bytes as they are: printable ASCII but '"' and '\\'. */
static bool is_plain_json_text(const char *bytes, size_t length)
{
    for (size_t i = 0; i < length; i++) {
        unsigned char byte = (unsigned char)bytes[i];
        if (byte < 0x20 || byte > 0x7e || byte == '"' || byte == '\\')
            return false;
    }
    return true;
}

/*
 * The side effect.  With --dedupe a key that was acted on before is answered
 * from its stored response instead.  The answer is {"ok":true,"key":…,
 * "effect":n}, or the body's "_answer" (requested_answer).
 */
static void act_on_delivery(struct receiver *receiver, struct key_state *entry,
                            const struct httpd_request *request)
{
    if (receiver->options.dedupe && entry->stored_status != 0) {
        receiver->stats.deduplicated_total++;
        return;
    }
    entry->effects++;
    order_log_note(ORDER_LOG_EFFECT, entry->key, entry->key_length);
    receiver->stats.effects_total++;
    if (entry->effects == 1)
        receiver->stats.keys_acted_on++;
    else if (entry->effects == 2)
        receiver->stats.keys_with_duplicate_effects++;

    free(entry->stored_body);
    if (is_plain_json_text(entry->key, entry->key_length)) {
        /* Most keys need no escaping: the bytes json_dump_compact() gives for
         * the object below, without building it. */
        size_t size = entry->key_length + 64;
        entry->stored_body = checked_malloc(size);
        int length = snprintf(entry->stored_body, size,
                              "{\"ok\":true,\"key\":\"%.*s\",\"effect\":%" JSON_INTEGER_FORMAT "}",
                              (int)entry->key_length, entry->key, (json_int_t)entry->effects);
        if (length < 0 || (size_t)length >= size)
            abort();
        entry->stored_body_length = (size_t)length;
    } else {
        json_t *key = json_string_lossy(entry->key, entry->key_length);
        json_t *answer = json_pack("{s:b,s:o,s:I}", "ok", 1, "key", key ? key : json_string(""),
                                   "effect", (json_int_t)entry->effects);
        entry->stored_body = json_dump_compact(answer);
        entry->stored_body_length = strlen(entry->stored_body);
        json_decref(answer);
    }
    size_t length = 0;
    char *asked = requested_answer(request, &length);
    if (asked) {
        free(entry->stored_body);
        entry->stored_body = asked;
        entry->stored_body_length = length;
    }
    entry->stored_status = 200;
}

/*
 * The stored answer as sent: with --response-bytes N, its JSON object gets a
 * last field "pad":"xxx..." that makes the body exactly N bytes (an answer
 * already that long, or longer, is sent as it is).  The padding is added
 * here, not stored, so that the per-key state stays small however many keys
 * a bench sends; /status/{key} and --dedupe answers are padded the same way.
 */
static void send_stored_response(const struct exchange *ex, const struct key_state *entry,
                                 uint64_t delay_ms)
{
    static const char pad_field[] = ",\"pad\":\"";
    const size_t field_length = sizeof pad_field - 1;
    const char *body = entry->stored_body;
    size_t length = entry->stored_body_length;
    uint64_t target = ex->receiver->options.response_bytes;
    /* "{...}" becomes "{...,"pad":"<P x>"}": length + field + P + 2 - 1 bytes. */
    if (target == 0 || length < 2 || body[length - 1] != '}' || body[length - 2] == '{' ||
        target < length + field_length + 1) {
        send_response(ex, entry->stored_status, NULL, body, length, delay_ms);
        return;
    }
    size_t pad = (size_t)target - length - field_length - 1;
    char *padded = checked_malloc((size_t)target);
    char *at = padded;
    memcpy(at, body, length - 1);
    at += length - 1;
    memcpy(at, pad_field, field_length);
    at += field_length;
    memset(at, 'x', pad);
    at += pad;
    *at++ = '"';
    *at++ = '}';
    if ((size_t)(at - padded) != target)
        abort();
    send_response(ex, entry->stored_status, NULL, padded, (size_t)target, delay_ms);
    free(padded);
}

/*
 * The key of a delivery: the key header, else (a legacy client that sends
 * none, identifying the request by a reference in the body, as many real
 * APIs do) the body's "ref", else "-".  Points into the request or into
 * reference (MAX_KEY_BYTES + 1 bytes).
 */
static const char *delivery_key(const struct exchange *ex, char *reference, size_t *key_length)
{
    const struct httpd_header *key_header =
        httpd_request_header(ex->request, ex->receiver->options.key_header);
    if (key_header && key_header->value_len > 0) {
        *key_length = key_header->value_len;
        return key_header->value;
    }
    if (body_reference(ex->request, reference, MAX_KEY_BYTES + 1)) {
        *key_length = strlen(reference);
        return reference;
    }
    *key_length = 1;
    return "-";
}

/* The fault of this delivery: the body's _fault for its first _fault_times
 * deliveries, else perhaps a random one; counted. */
static enum fault_mode choose_fault(const struct exchange *ex, const struct key_state *entry)
{
    struct receiver *receiver = ex->receiver;
    json_int_t fault_times;
    enum fault_mode fault = requested_fault(ex->request, &fault_times);
    if (fault != FAULT_NONE && (fault_times <= 0 || entry->deliveries > (uint64_t)fault_times))
        fault = FAULT_NONE;
    if (fault == FAULT_NONE && receiver->options.random_fault_rate > 0 &&
        random_unit(receiver) < receiver->options.random_fault_rate)
        fault = random_fault_modes[random_next(receiver) % RANDOM_FAULT_MODE_COUNT];
    if (fault != FAULT_NONE) {
        receiver->stats.faults_total++;
        receiver->stats.faults_by_mode[fault]++;
    }
    return fault;
}

/* Acts (or not) and answers (or not) as the fault says. */
static void answer_delivery(const struct exchange *ex, struct key_state *entry,
                            enum fault_mode fault)
{
    struct receiver *receiver = ex->receiver;
    static const char garbage[] = "this is not http\r\n\r\n";
    static const char injected[] = "{\"error\":\"injected\"}";
    static const char slow_down[] = "{\"error\":\"slow down\"}";
    static const char gone[] = "{\"error\":\"gone\"}";
    switch (fault) {
    case FAULT_NONE:
        act_on_delivery(receiver, entry, ex->request);
        send_stored_response(ex, entry, receiver->options.delay_ms);
        break;
    case FAULT_DROP_AFTER:
        act_on_delivery(receiver, entry, ex->request);
        httpd_conn_close(ex->conn);
        break;
    case FAULT_LATE:
        act_on_delivery(receiver, entry, ex->request);
        send_stored_response(ex, entry, receiver->options.late_ms);
        break;
    case FAULT_RESET_BEFORE:
        httpd_conn_reset(ex->conn);
        break;
    case FAULT_STATUS_500:
        send_response(ex, 500, NULL, injected, sizeof injected - 1, 0);
        break;
    case FAULT_STATUS_429:
        send_response(ex, 429, "Retry-After: 1\r\n", slow_down, sizeof slow_down - 1, 0);
        break;
    case FAULT_GARBAGE_AFTER:
        act_on_delivery(receiver, entry, ex->request);
        httpd_conn_send_raw_and_close(ex->conn, garbage, sizeof garbage - 1);
        break;
    case FAULT_STATUS_410:
        send_response(ex, 410, NULL, gone, sizeof gone - 1, 0);
        break;
    case FAULT_MODE_COUNT:
        abort();
    }
}

static void handle_delivery(const struct exchange *ex)
{
    struct receiver *receiver = ex->receiver;
    receiver->stats.deliveries_total++;
    record_delivery_arrival(receiver);

    /* The mode comes first, before the key is even read: no per-key state,
     * no deterministic or random fault, no effect. */
    if (receiver->mode.status != 0) {
        receiver->stats.mode_answers_total++;
        send_mode_answer(ex);
        return;
    }
    char reference[MAX_KEY_BYTES + 1];
    size_t key_length;
    const char *key = delivery_key(ex, reference, &key_length);
    if (key_length > MAX_KEY_BYTES) {
        httpd_conn_close_after_answer(ex->conn);
        send_error(ex, 400, "idempotency key too long");
        return;
    }
    order_log_note(ORDER_LOG_REQUEST, key, key_length);
    struct key_state *entry = key_table_get_or_create(&receiver->keys, key, key_length);
    entry->deliveries++;
    pack_headers(ex->request, entry);
    free(entry->last_body);
    entry->last_body = copy_bytes(ex->request->body, ex->request->body_len);
    entry->last_body_length = entry->last_body ? ex->request->body_len : 0;
    answer_delivery(ex, entry, choose_fault(ex, entry));
}

/* ------------------------------------------------------------------------ */
/* Control endpoints                                                         */
/* ------------------------------------------------------------------------ */

static void handle_stats(const struct exchange *ex)
{
    const struct receiver *receiver = ex->receiver;
    const struct statistics *stats = &receiver->stats;
    json_t *faults = json_object();
    for (int mode = 0; mode < FAULT_MODE_COUNT; mode++)
        json_object_set_new(faults, fault_mode_names[mode],
                            json_integer((json_int_t)stats->faults_by_mode[mode]));
    json_t *body = json_pack(
        "{s:I,s:I,s:I,s:I,s:I,s:o,s:I,s:I,s:I}", "requests_total",
        (json_int_t)stats->requests_total, "deliveries_total", (json_int_t)stats->deliveries_total,
        "effects_total", (json_int_t)stats->effects_total, "deduplicated_total",
        (json_int_t)stats->deduplicated_total, "faults_total", (json_int_t)stats->faults_total,
        "faults", faults, "keys", (json_int_t)stats->keys_acted_on, "keys_with_duplicate_effects",
        (json_int_t)stats->keys_with_duplicate_effects, "keys_seen",
        (json_int_t)receiver->keys.entry_count);
    /* Arrival times in ms of the uv_hrtime() clock; 0 when nothing arrived. */
    bool any = stats->deliveries_total > 0;
    json_t *more = json_pack(
        "{s:I,s:I,s:I,s:I,s:I,s:I}", "mode_answers_total", (json_int_t)stats->mode_answers_total,
        "mode_status_check_answers_total", (json_int_t)stats->mode_status_check_answers_total,
        "max_deliveries_1s", (json_int_t)stats->max_deliveries_1s, "first_delivery_ms",
        (json_int_t)(any ? stats->first_delivery_ns / NS_PER_MS : 0), "last_delivery_ms",
        (json_int_t)(any ? stats->last_delivery_ns / NS_PER_MS : 0), "now_ms",
        (json_int_t)(uv_hrtime() / NS_PER_MS));
    json_object_update(body, more);
    json_decref(more);
    send_json(ex, 200, body);
    json_decref(body);
}

static void handle_effects(const struct exchange *ex)
{
    json_t *body = json_object();
    for (const struct key_state *entry = ex->receiver->keys.order_head; entry;
         entry = entry->order_next) {
        if (entry->effects > 0)
            json_object_set_lossy(body, entry->key, entry->key_length,
                                  json_integer((json_int_t)entry->effects));
    }
    send_json(ex, 200, body);
    json_decref(body);
}

static const struct key_state *find_key_in_path(const struct exchange *ex, const char *encoded_key,
                                                size_t encoded_length, bool *malformed)
{
    size_t key_length;
    char *key = percent_decode(encoded_key, encoded_length, &key_length);
    *malformed = key == NULL;
    if (!key)
        return NULL;
    const struct key_state *entry = key_table_find(&ex->receiver->keys, key, key_length);
    free(key);
    return entry;
}

static void handle_status_lookup(const struct exchange *ex, const char *encoded_key,
                                 size_t encoded_length)
{
    bool malformed;
    const struct key_state *entry = find_key_in_path(ex, encoded_key, encoded_length, &malformed);
    if (malformed)
        send_error(ex, 400, "bad percent-encoding");
    else if (!entry || entry->stored_status == 0)
        send_error(ex, 404, "not found");
    else
        send_stored_response(ex, entry, 0);
}

/*
 * POST /_mode {"status": N, "retry_after": "S", "status_checks": B}: replaces
 * the whole mode.  Missing fields mean normal, no Retry-After, false.
 */
static void handle_mode_change(const struct exchange *ex)
{
    json_error_t parse_error;
    json_t *document =
        json_loadb(ex->request->body, ex->request->body_len, JSON_REJECT_DUPLICATES, &parse_error);
    char problem[256] = "";
    long long status = 0;
    const char *retry_after = NULL;
    bool status_checks = false;
    if (!document) {
        snprintf(problem, sizeof problem, "mode: body is not JSON: %s", parse_error.text);
    } else if (!json_is_object(document)) {
        snprintf(problem, sizeof problem, "mode: body must be a JSON object");
    } else {
        const char *field;
        json_t *value;
        json_object_foreach(document, field, value)
        {
            if (strcmp(field, "status") == 0) {
                if (!json_is_integer(value) || !mode_status_valid(json_integer_value(value))) {
                    snprintf(problem, sizeof problem,
                             "mode: status must be 0 (normal) or an integer in 200..599");
                    break;
                }
                status = json_integer_value(value);
            } else if (strcmp(field, "retry_after") == 0) {
                if (json_is_null(value))
                    continue; /* same as absent */
                const char *why =
                    json_is_string(value)
                        ? retry_after_problem(json_string_value(value), json_string_length(value))
                        : "must be a string";
                if (why) {
                    snprintf(problem, sizeof problem, "mode: retry_after %s", why);
                    break;
                }
                retry_after = json_string_value(value);
            } else if (strcmp(field, "status_checks") == 0) {
                if (!json_is_boolean(value)) {
                    snprintf(problem, sizeof problem, "mode: status_checks must be true or false");
                    break;
                }
                status_checks = json_is_true(value);
            } else {
                snprintf(problem, sizeof problem,
                         "mode: unknown field (expected status, retry_after, status_checks)");
                break;
            }
        }
    }
    if (problem[0]) {
        send_error(ex, 400, problem);
    } else {
        mode_set(&ex->receiver->mode, status, retry_after, status_checks);
        static const char body[] = "{\"ok\":true}";
        send_response(ex, 200, NULL, body, sizeof body - 1, 0);
    }
    json_decref(document);
}

/* GET /_mode: the current mode, in the form POST /_mode takes. */
static void handle_mode_lookup(const struct exchange *ex)
{
    const struct outage_mode *mode = &ex->receiver->mode;
    json_t *body =
        json_pack("{s:i,s:b}", "status", mode->status, "status_checks", mode->status_checks);
    if (mode->retry_after[0])
        json_object_set_new(body, "retry_after", json_string(mode->retry_after));
    send_json(ex, 200, body);
    json_decref(body);
}

static void handle_request_lookup(const struct exchange *ex, const char *encoded_key,
                                  size_t encoded_length)
{
    bool malformed;
    const struct key_state *entry = find_key_in_path(ex, encoded_key, encoded_length, &malformed);
    if (malformed) {
        send_error(ex, 400, "bad percent-encoding");
        return;
    }
    if (!entry || entry->deliveries == 0) {
        send_error(ex, 404, "not found");
        return;
    }
    /* Through the text, as when it was serialized at delivery time. */
    char *headers_text = serialize_headers(entry);
    json_t *headers = json_loads(headers_text, 0, NULL);
    free(headers_text);
    json_t *last_body =
        json_string_lossy(entry->last_body ? entry->last_body : "", entry->last_body_length);
    json_t *body =
        json_pack("{s:I,s:I,s:o,s:o}", "deliveries", (json_int_t)entry->deliveries, "effects",
                  (json_int_t)entry->effects, "last_headers", headers ? headers : json_object(),
                  "last_body", last_body ? last_body : json_string(""));
    send_json(ex, 200, body);
    json_decref(body);
}

static void handle_reset(const struct exchange *ex)
{
    struct receiver *receiver = ex->receiver;
    key_table_free(&receiver->keys);
    key_table_init(&receiver->keys);
    memset(&receiver->stats, 0, sizeof receiver->stats); /* requests_total too */
    receiver->arrivals.head = receiver->arrivals.count = 0;
    mode_set(&receiver->mode, 0, NULL, false); /* normal, even after --mode-status */
    receiver->random_state = receiver->options.seed;
    static const char body[] = "{\"ok\":true}";
    send_response(ex, 200, NULL, body, sizeof body - 1, 0);
}

static void handle_control(const struct exchange *ex, const char *path, size_t path_length)
{
    enum http_method method = ex->request->method;
    bool is_get = method == HTTP_GET || method == HTTP_HEAD;
    bool known = true;
    if (equals(path, path_length, "/_stats")) {
        if (is_get) {
            handle_stats(ex);
            return;
        }
    } else if (equals(path, path_length, "/_effects")) {
        if (is_get) {
            handle_effects(ex);
            return;
        }
    } else if (equals(path, path_length, "/_mode")) {
        if (method == HTTP_POST) {
            handle_mode_change(ex);
            return;
        }
        if (is_get) {
            handle_mode_lookup(ex);
            return;
        }
    } else if (equals(path, path_length, "/_reset")) {
        if (method == HTTP_POST) {
            handle_reset(ex);
            return;
        }
    } else if (starts_with(path, path_length, "/_requests/")) {
        if (is_get) {
            size_t prefix = strlen("/_requests/");
            handle_request_lookup(ex, path + prefix, path_length - prefix);
            return;
        }
    } else if (starts_with(path, path_length, "/status/")) {
        const struct outage_mode *mode = &ex->receiver->mode;
        if (is_get && mode->status != 0 && mode->status_checks) {
            ex->receiver->stats.mode_status_check_answers_total++;
            send_mode_answer(ex);
            return;
        }
        if (is_get) {
            size_t prefix = strlen("/status/");
            handle_status_lookup(ex, path + prefix, path_length - prefix);
            return;
        }
    } else {
        known = false;
    }
    if (known)
        send_error(ex, 405, "method not allowed");
    else
        send_error(ex, 404, "not found");
}

/* Routes one complete request (httpd's on_request). */
static void on_request(void *data, httpd_conn_t *conn, const struct httpd_request *request)
{
    struct exchange ex = {.receiver = data, .conn = conn, .request = request};
    ex.receiver->stats.requests_total++;
    const char *path = request->path_len ? request->path : "/";
    size_t path_length = request->path_len ? request->path_len : 1;
    if (starts_with(path, path_length, "/_") || starts_with(path, path_length, "/status/")) {
        handle_control(&ex, path, path_length);
        return;
    }
    switch (request->method) {
    case HTTP_POST:
    case HTTP_PUT:
    case HTTP_PATCH:
    case HTTP_DELETE:
        handle_delivery(&ex);
        break;
    case HTTP_GET:
    case HTTP_HEAD:
        send_error(&ex, 404, "not found");
        break;
    default:
        send_error(&ex, 405, "method not allowed");
        break;
    }
}

static void on_accept_error(void *data, int uv_error)
{
    fprintf(stderr, "test-receiver: accept: %s\n", uv_strerror(uv_error));
}

/* ------------------------------------------------------------------------ */
/* Startup and shutdown                                                      */
/* ------------------------------------------------------------------------ */

static void on_signal_closed(uv_handle_t *handle) {}

/* Closes the server (every connection with it) and the signal watchers; the
 * loop then runs out. */
static void receiver_shutdown(struct receiver *receiver)
{
    if (receiver->shutting_down)
        return;
    receiver->shutting_down = true;
    if (receiver->httpd)
        httpd_close(receiver->httpd, NULL, NULL);
    receiver->httpd = NULL;
    uv_close((uv_handle_t *)&receiver->sigterm_watcher, on_signal_closed);
    uv_close((uv_handle_t *)&receiver->sigint_watcher, on_signal_closed);
}

static void on_signal(uv_signal_t *watcher, int signal_number)
{
    receiver_shutdown(watcher->data);
}

static void print_usage(FILE *stream)
{
    fputs("usage: test-receiver [options]\n"
          "  --listen HOST:PORT      address to bind (default 127.0.0.1:0)\n"
          "  --dedupe                answer repeated idempotency keys from the stored response\n"
          "  --key-header NAME       idempotency key header (default Idempotency-Key)\n"
          "  --late-ms N             delay of the 'late' fault (default 3000)\n"
          "  --delay-ms N            delay every normal delivery response (default 0)\n"
          "  --random-faults RATE    fault probability per delivery, 0..1 (default 0)\n"
          "  --seed N                seed for --random-faults (default 1)\n"
          "  --mode-status N         start in outage mode: answer every delivery with N\n"
          "                          (200..599; 0 or 200 = normal, the default)\n"
          "  --mode-retry-after S    Retry-After value of the outage mode answers\n"
          "  --mode-status-checks    the outage mode answers GET /status/{key} too\n"
          "  --response-bytes N      pad the JSON of delivery answers to N bytes with a \"pad\"\n"
          "                          field (0..16777216; default 0 = no padding)\n"
          "  --order-log FILE        append '<seq>\\t<request|effect>\\t<key>' per delivery and\n"
          "                          per effect, in arrival order (see order_log.h)\n"
          "  --help                  show this help\n",
          stream);
}

static void die_bad_option(const char *option, const char *problem)
{
    fprintf(stderr, "test-receiver: %s: %s\n", option, problem);
    print_usage(stderr);
    exit(2);
}

static uint64_t parse_unsigned_option(const char *option, const char *text, uint64_t maximum)
{
    if (!text || !*text || *text == '-' || *text == '+')
        die_bad_option(option, "expected a non-negative integer");
    char *end;
    errno = 0;
    unsigned long long value = strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0' || value > maximum)
        die_bad_option(option, "expected a non-negative integer in range");
    return (uint64_t)value;
}

static double parse_rate_option(const char *option, const char *text)
{
    if (!text || !*text)
        die_bad_option(option, "expected a number between 0 and 1");
    char *end;
    errno = 0;
    double value = strtod(text, &end);
    if (errno != 0 || *end != '\0' || !(value >= 0.0 && value <= 1.0))
        die_bad_option(option, "expected a number between 0 and 1");
    return value;
}

/* Accepts "--name value" and "--name=value". */
static void parse_options(int argc, char **argv, struct options *options)
{
    options->listen_address = "127.0.0.1:0";
    options->dedupe = false;
    options->key_header = "Idempotency-Key";
    options->late_ms = 3000;
    options->delay_ms = 0;
    options->random_fault_rate = 0.0;
    options->seed = 1;
    options->response_bytes = 0;
    long long mode_status = 0;
    const char *mode_retry_after = NULL;
    bool mode_status_checks = false;
    for (int i = 1; i < argc; i++) {
        if (order_log_option(argc, argv, &i))
            continue;
        const char *argument = argv[i];
        char name[64];
        const char *value = NULL;
        const char *equals_sign = strchr(argument, '=');
        size_t name_length = equals_sign ? (size_t)(equals_sign - argument) : strlen(argument);
        if (name_length >= sizeof name)
            die_bad_option(argument, "unknown option");
        memcpy(name, argument, name_length);
        name[name_length] = '\0';
        if (equals_sign)
            value = equals_sign + 1;

        bool takes_value = strcmp(name, "--listen") == 0 || strcmp(name, "--key-header") == 0 ||
                           strcmp(name, "--late-ms") == 0 || strcmp(name, "--delay-ms") == 0 ||
                           strcmp(name, "--random-faults") == 0 || strcmp(name, "--seed") == 0 ||
                           strcmp(name, "--mode-status") == 0 ||
                           strcmp(name, "--mode-retry-after") == 0 ||
                           strcmp(name, "--response-bytes") == 0;
        if (takes_value && !value) {
            if (i + 1 >= argc)
                die_bad_option(name, "missing value");
            value = argv[++i];
        } else if (!takes_value && value) {
            die_bad_option(name, "takes no value");
        }

        if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
            print_usage(stdout);
            exit(0);
        } else if (strcmp(name, "--dedupe") == 0) {
            options->dedupe = true;
        } else if (strcmp(name, "--listen") == 0) {
            options->listen_address = value;
        } else if (strcmp(name, "--key-header") == 0) {
            if (!*value || strpbrk(value, ": \t\r\n"))
                die_bad_option(name, "expected a header name");
            options->key_header = value;
        } else if (strcmp(name, "--late-ms") == 0) {
            options->late_ms = parse_unsigned_option(name, value, MAX_DELAY_MS);
        } else if (strcmp(name, "--delay-ms") == 0) {
            options->delay_ms = parse_unsigned_option(name, value, MAX_DELAY_MS);
        } else if (strcmp(name, "--random-faults") == 0) {
            options->random_fault_rate = parse_rate_option(name, value);
        } else if (strcmp(name, "--seed") == 0) {
            options->seed = parse_unsigned_option(name, value, UINT64_MAX);
        } else if (strcmp(name, "--mode-status") == 0) {
            mode_status = (long long)parse_unsigned_option(name, value, 999);
            if (!mode_status_valid(mode_status))
                die_bad_option(name, "expected 0 (normal) or a status in 200..599");
        } else if (strcmp(name, "--mode-retry-after") == 0) {
            const char *problem = retry_after_problem(value, strlen(value));
            if (problem)
                die_bad_option(name, problem);
            mode_retry_after = value;
        } else if (strcmp(name, "--mode-status-checks") == 0) {
            mode_status_checks = true;
        } else if (strcmp(name, "--response-bytes") == 0) {
            options->response_bytes = parse_unsigned_option(name, value, MAX_RESPONSE_BYTES);
        } else {
            die_bad_option(argument, "unknown option");
        }
    }
    mode_set(&options->mode, mode_status, mode_retry_after, mode_status_checks);
}

/* The receiver's HTTP server: its limits (see the top of this file), no
 * deadline but the lingering close's. */
static struct httpd_config receiver_httpd_config(void)
{
    return (struct httpd_config){
        .limits =
            {
                .max_url_bytes = MAX_URL_BYTES,
                .max_headers = MAX_HEADERS,
                .max_header_bytes = MAX_HEADER_PART_BYTES,
                .max_body_bytes = MAX_BODY_BYTES,
                .max_pipelined_bytes = MAX_BUFFERED_INPUT_BYTES,
                .read_chunk_bytes = READ_CHUNK_BYTES,
            },
        .timeouts = {.drain_ms = DRAIN_TIMEOUT_MS},
    };
}

/* Listens and prints "listening HOST:PORT"; a libuv error, or 0. */
static int receiver_listen(struct receiver *receiver, const struct sockaddr_storage *address)
{
    struct httpd_config config = receiver_httpd_config();
    struct httpd_hooks hooks = {
        .data = receiver,
        .on_request = on_request,
        .on_accept_error = on_accept_error,
    };
    int error = 0;
    receiver->httpd =
        httpd_start(receiver->loop, (const struct sockaddr *)address, &config, &hooks, &error);
    if (receiver->httpd == NULL)
        return error;
    char shown[INET6_ADDRSTRLEN + 16];
    httpd_format_address(httpd_address(receiver->httpd), shown, sizeof shown);
    printf("listening %s\n", shown);
    fflush(stdout);
    return 0;
}

static void ignore_sigpipe(void)
{
    /* Writing to a connection the client already closed must not kill us. */
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = SIG_IGN;
    sigemptyset(&action.sa_mask);
    sigaction(SIGPIPE, &action, NULL);
}

int main(int argc, char **argv)
{
    struct receiver receiver;
    memset(&receiver, 0, sizeof receiver);
    parse_options(argc, argv, &receiver.options);
    receiver.random_state = receiver.options.seed;
    receiver.mode = receiver.options.mode;

    struct sockaddr_storage address;
    if (httpd_parse_listen(receiver.options.listen_address, &address) != NULL)
        die_bad_option("--listen", "expected HOST:PORT with a numeric address");

    ignore_sigpipe();
    key_table_init(&receiver.keys);
    receiver.loop = uv_default_loop();
    uv_signal_init(receiver.loop, &receiver.sigterm_watcher);
    uv_signal_init(receiver.loop, &receiver.sigint_watcher);
    receiver.sigterm_watcher.data = &receiver;
    receiver.sigint_watcher.data = &receiver;

    int exit_code = 0;
    int result = receiver_listen(&receiver, &address);
    if (result == 0) {
        uv_signal_start(&receiver.sigterm_watcher, on_signal, SIGTERM);
        uv_signal_start(&receiver.sigint_watcher, on_signal, SIGINT);
    } else {
        fprintf(stderr, "test-receiver: cannot listen on %s: %s\n", receiver.options.listen_address,
                uv_strerror(result));
        exit_code = 1;
        receiver_shutdown(&receiver);
    }

    uv_run(receiver.loop, UV_RUN_DEFAULT);
    /* Let every close callback run, then the loop must be empty. */
    uv_run(receiver.loop, UV_RUN_DEFAULT);
    if (uv_loop_close(receiver.loop) != 0) {
        fprintf(stderr, "test-receiver: handles still open at exit\n");
        exit_code = 1;
    }
    key_table_free(&receiver.keys);
    free(receiver.arrivals.times);
    order_log_close();
    uv_library_shutdown();
    return exit_code;
}
