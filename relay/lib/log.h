/*
 * log.h — JSON-lines logging: one object per line on stderr.
 *
 * Every line is an event name plus fields, never prose:
 *   {"time":"2026-11-29T12:00:00.123Z","level":"info","event":"delivered","key":"r1:s1",...}
 * Fields are passed as (name, json_t *) pairs ending with LOG_END; the
 * logger takes the references. Callers never log a secret or a full payload.
 */
#ifndef OUTBOX_LOG_H
#define OUTBOX_LOG_H

#include <jansson.h>
#include <stdbool.h>
#include <uv.h>

typedef enum { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR } log_level_t;

/* Parses "debug", "info", "warn" or "error"; false for anything else. */
bool log_level_parse(const char *name, log_level_t *out);
void log_set_level(log_level_t level);
/* Whether a line at this level would be written: a caller on a hot path
 * asks before it builds the fields (each a jansson allocation). */
bool log_enabled(log_level_t level);

/* The end of a log_event argument list: a typed null pointer (a bare NULL
 * may be an int 0 in a variadic call, which is undefined behaviour). */
#define LOG_END ((const char *)0)

/* log_event(LOG_INFO, "relay_started", "relay", json_string(id), LOG_END) */
void log_event(log_level_t level, const char *event, ...);

/* The same line without jansson, for a line written per delivery: fields
 * of three kinds, written in order, byte for byte what log_event writes for
 * json_string (NULL, or text that is not UTF-8, as json_string gives:
 * null), json_integer and json_null. No allocation for a line under 2 KiB.
 * The names must differ from each other and from time, level and event. */
enum log_field_kind { LOG_FIELD_STRING, LOG_FIELD_INTEGER, LOG_FIELD_NULL };
struct log_field {
    const char *name;
    enum log_field_kind kind;
    const char *text;  /* LOG_FIELD_STRING */
    long long integer; /* LOG_FIELD_INTEGER */
};
#define LOG_STRING(n, s) ((struct log_field){.name = (n), .kind = LOG_FIELD_STRING, .text = (s)})
#define LOG_INTEGER(n, i)                                                                          \
    ((struct log_field){.name = (n), .kind = LOG_FIELD_INTEGER, .integer = (i)})
#define LOG_NULL(n) ((struct log_field){.name = (n), .kind = LOG_FIELD_NULL})
void log_fields(log_level_t level, const char *event, const struct log_field *fields, size_t count);

/* Lines per loop turn. After log_batch_start, info and debug lines wait in
 * a buffer written before the loop next polls (a uv_prepare handle, unref'd:
 * it does not keep the loop alive) and at exit(); warn and error lines are
 * written at once, after what waits. log_batch_stop writes what waits and
 * closes the handle: run the loop once more before uv_loop_close. One loop
 * at a time. */
void log_batch_start(uv_loop_t *loop);
void log_batch_stop(void);
/* Writes what waits now (also what log_batch_stop and exit() do). */
void log_flush(void);

#endif
