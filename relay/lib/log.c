/*
 * log.c — JSON-lines logging.
 *
 * Why JSON lines: platform teams ship stderr to a log pipeline that indexes
 * fields (key, target, attempt, state); a DBA greps for a key.
 *
 * Why a buffer per loop turn: the relay writes a line per delivery at info
 * (operators asked for successes), and one write(2) per line was 10-18 % of
 * its CPU. Inside a loop (log_batch_start), info and debug lines are kept in
 * a buffer that a uv_prepare handle writes out before the loop next waits
 * for I/O, so a line is never older than one loop turn; a warn or error line
 * first writes what is buffered, then itself, at once. Writes end on a line
 * boundary and stay within PIPE_BUF, so lines stay whole when several
 * processes share a pipe or a terminal, as with one write per line. What a
 * crash can lose: exit() and the end of the loop flush; a SIGKILL, or a
 * crash the process cannot catch, loses the info lines of the turn that was
 * running (never a warn or error line, never an outcome: those are in the
 * database before the line is made).
 */
#include "lib/log.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static log_level_t current_level = LOG_INFO;

/* ------------------------------------------------------------ the batch */

/* The lines of this loop turn, whole lines only. */
static struct {
    bool on;
    char data[64 * 1024];
    size_t len;
    uv_prepare_t prepare;
} batch;

static void write_all(const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = write(STDERR_FILENO, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return; /* stderr is gone: nothing better to do with a log line */
        data += n;
        len -= (size_t)n;
    }
}

void log_flush(void)
{
    size_t start = 0;
    while (start < batch.len) {
        /* up to PIPE_BUF bytes ending on a newline (a longer line alone) */
        size_t end = start + PIPE_BUF < batch.len ? start + PIPE_BUF : batch.len;
        while (end > start && batch.data[end - 1] != '\n')
            end--;
        if (end == start) {
            const char *nl = memchr(batch.data + start, '\n', batch.len - start);
            end = nl ? (size_t)(nl - batch.data) + 1 : batch.len;
        }
        write_all(batch.data + start, end - start);
        start = end;
    }
    batch.len = 0;
}

/* Every line goes out here: kept for the turn's write, or written now. */
static void emit(log_level_t level, const char *line, size_t len)
{
    if (!batch.on || level >= LOG_WARN) {
        log_flush(); /* what came before is written first */
        write_all(line, len);
        return;
    }
    if (batch.len + len > sizeof(batch.data))
        log_flush();
    if (len > sizeof(batch.data)) {
        write_all(line, len);
        return;
    }
    memcpy(batch.data + batch.len, line, len);
    batch.len += len;
}

static void on_prepare(uv_prepare_t *handle)
{
    (void)handle;
    log_flush();
}

static void flush_at_exit(void)
{
    log_flush();
}

void log_batch_start(uv_loop_t *loop)
{
    static bool registered;
    if (!registered) {
        atexit(flush_at_exit);
        registered = true;
    }
    uv_prepare_init(loop, &batch.prepare);
    uv_prepare_start(&batch.prepare, on_prepare);
    uv_unref((uv_handle_t *)&batch.prepare); /* the loop ends without it */
    batch.on = true;
}

static void on_prepare_closed(uv_handle_t *handle)
{
    (void)handle;
}

void log_batch_stop(void)
{
    if (!batch.on)
        return;
    log_flush();
    batch.on = false;
    uv_close((uv_handle_t *)&batch.prepare, on_prepare_closed);
}

static const char *const level_names[] = {"debug", "info", "warn", "error"};

bool log_level_parse(const char *name, log_level_t *out)
{
    for (int i = 0; i <= LOG_ERROR; i++) {
        if (strcmp(name, level_names[i]) == 0) {
            *out = (log_level_t)i;
            return true;
        }
    }
    return false;
}

void log_set_level(log_level_t level)
{
    current_level = level;
}

bool log_enabled(log_level_t level)
{
    return level >= current_level;
}

/* The date and time to the second are formatted once per second (the
 * relay logs from one thread): strftime per line was 0.6 % of its CPU in
 * the TLS drain, where it writes a line per delivery. */
static void format_now(char *buf, size_t size)
{
    static time_t second = -1;
    static char date[32];
    static size_t date_len;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    if (tv.tv_sec != second) {
        struct tm tm;
        gmtime_r(&tv.tv_sec, &tm);
        date_len = strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S", &tm);
        second = tv.tv_sec;
    }
    int ms = (int)(tv.tv_usec / 1000);
    if (size < date_len + 6) {
        if (size > 0)
            buf[0] = '\0';
        return;
    }
    memcpy(buf, date, date_len);
    char *p = buf + date_len;
    p[0] = '.';
    p[1] = (char)('0' + ms / 100);
    p[2] = (char)('0' + ms / 10 % 10);
    p[3] = (char)('0' + ms % 10);
    p[4] = 'Z';
    p[5] = '\0';
}

void log_event(log_level_t level, const char *event, ...)
{
    va_list ap;
    va_start(ap, event);
    if (!log_enabled(level)) {
        /* Still release the references the caller handed over. */
        const char *name;
        while ((name = va_arg(ap, const char *)) != NULL)
            json_decref(va_arg(ap, json_t *));
        va_end(ap);
        return;
    }
    char now[40];
    format_now(now, sizeof(now));
    json_t *line = json_object();
    json_object_set_new(line, "time", json_string(now));
    json_object_set_new(line, "level", json_string(level_names[level]));
    json_object_set_new(line, "event", json_string(event));
    const char *name;
    while ((name = va_arg(ap, const char *)) != NULL) {
        json_t *value = va_arg(ap, json_t *);
        json_object_set_new(line, name, value ? value : json_null());
    }
    va_end(ap);
    char *text = json_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(line);
    if (text == NULL)
        return;
    size_t len = strlen(text);
    text[len] = '\n'; /* json_dumps leaves room for exactly the NUL */
    emit(level, text, len + 1);
    free(text);
}

/* ---------------------------------------------------------------- log_fields */

/* A line being written: a stack block first, the heap past it. */
struct line {
    char *data;
    size_t len, cap;
    bool heap;
    bool failed;
};

static void line_put(struct line *l, const char *s, size_t n)
{
    if (l->failed)
        return;
    if (l->len + n > l->cap) {
        size_t cap = l->cap * 2;
        while (cap < l->len + n)
            cap *= 2;
        char *grown = l->heap ? realloc(l->data, cap) : malloc(cap);
        if (grown == NULL) {
            l->failed = true;
            return;
        }
        if (!l->heap)
            memcpy(grown, l->data, l->len);
        l->data = grown;
        l->cap = cap;
        l->heap = true;
    }
    memcpy(l->data + l->len, s, n);
    l->len += n;
}

static void line_puts(struct line *l, const char *s)
{
    line_put(l, s, strlen(s));
}

/* jansson's utf8_check_string (json_string refuses what fails it). */
static bool utf8_valid(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char u = s[i];
        size_t count;
        uint32_t value;
        if (u < 0x80) {
            i++;
            continue;
        } else if (u >= 0xC2 && u <= 0xDF) {
            count = 2;
            value = u & 0x1F;
        } else if (u >= 0xE0 && u <= 0xEF) {
            count = 3;
            value = u & 0x0F;
        } else if (u >= 0xF0 && u <= 0xF4) {
            count = 4;
            value = u & 0x07;
        } else {
            return false; /* a continuation byte, C0/C1, F5 and above */
        }
        if (count > n - i)
            return false;
        for (size_t k = 1; k < count; k++) {
            if (s[i + k] < 0x80 || s[i + k] > 0xBF)
                return false;
            value = (value << 6) + (s[i + k] & 0x3F);
        }
        if (value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF) ||
            (count == 2 && value < 0x80) || (count == 3 && value < 0x800) ||
            (count == 4 && value < 0x10000))
            return false;
        i += count;
    }
    return true;
}

/* A JSON string as jansson's dump_string writes it with JSON_COMPACT: '"',
 * '\\' and control characters escaped, everything else (UTF-8 included) as is. */
static void line_string(struct line *l, const char *s)
{
    if (s == NULL) {
        line_put(l, "null", 4);
        return;
    }
    /* Most text is printable ASCII with nothing to escape (keys, names,
     * classes): one pass and one copy. Anything else takes the long way. */
    static bool plain[256]; /* printable ASCII but '"' and '\\' */
    if (!plain['a'])
        for (int c = 0x20; c < 0x80; c++)
            plain[c] = c != '"' && c != '\\';
    const unsigned char *u = (const unsigned char *)s;
    size_t n = 0;
    while (plain[u[n]])
        n++;
    if (u[n] == '\0') {
        if (l->failed || l->len + n + 2 > l->cap) {
            line_put(l, "\"", 1);
            line_put(l, s, n);
            line_put(l, "\"", 1);
            return;
        }
        l->data[l->len] = '"';
        memcpy(l->data + l->len + 1, s, n);
        l->data[l->len + 1 + n] = '"';
        l->len += n + 2;
        return;
    }
    n += strlen(s + n);
    if (!utf8_valid((const unsigned char *)s, n)) {
        line_put(l, "null", 4);
        return;
    }
    line_put(l, "\"", 1);
    size_t run = 0; /* start of the bytes not written yet */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        line_put(l, s + run, i - run);
        run = i + 1;
        char seq[8];
        switch (c) {
        case '\\':
            line_put(l, "\\\\", 2);
            break;
        case '"':
            line_put(l, "\\\"", 2);
            break;
        case '\b':
            line_put(l, "\\b", 2);
            break;
        case '\f':
            line_put(l, "\\f", 2);
            break;
        case '\n':
            line_put(l, "\\n", 2);
            break;
        case '\r':
            line_put(l, "\\r", 2);
            break;
        case '\t':
            line_put(l, "\\t", 2);
            break;
        default:
            snprintf(seq, sizeof(seq), "\\u%04X", (unsigned)c);
            line_put(l, seq, 6);
        }
    }
    line_put(l, s + run, n - run);
    line_put(l, "\"", 1);
}

/* v in decimal, as "%lld" writes it, at the end of buf (size >= 21): returns
 * where it starts. snprintf's parsing of its format was a tenth of the
 * line's cost (tests/bench/log_cost.c). */
static size_t integer_text(char *buf, size_t size, long long v)
{
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    size_t at = size;
    do {
        buf[--at] = (char)('0' + u % 10);
        u /= 10;
    } while (u > 0);
    if (v < 0)
        buf[--at] = '-';
    return at;
}

void log_fields(log_level_t level, const char *event, const struct log_field *fields, size_t count)
{
    if (!log_enabled(level))
        return;
    char block[2048], now[40], number[32];
    struct line l = {.data = block, .cap = sizeof(block)};
    format_now(now, sizeof(now));
    line_puts(&l, "{\"time\":");
    line_string(&l, now);
    line_puts(&l, ",\"level\":");
    line_string(&l, level_names[level]);
    line_puts(&l, ",\"event\":");
    line_string(&l, event);
    for (size_t i = 0; i < count; i++) {
        line_put(&l, ",", 1);
        line_string(&l, fields[i].name);
        line_put(&l, ":", 1);
        switch (fields[i].kind) {
        case LOG_FIELD_STRING:
            line_string(&l, fields[i].text);
            break;
        case LOG_FIELD_INTEGER: {
            size_t at = integer_text(number, sizeof(number), fields[i].integer);
            line_put(&l, number + at, sizeof(number) - at);
            break;
        }
        case LOG_FIELD_NULL:
            line_put(&l, "null", 4);
            break;
        }
    }
    line_put(&l, "}\n", 2);
    if (!l.failed)
        emit(level, l.data, l.len);
    if (l.heap)
        free(l.data);
}
