/*
 * log.h — JSON-lines logging: one object per line on stderr.
 *
 * Every line is an event name plus fields, never prose:
 *   {"time":"2026-11-29T12:00:00.123Z","level":"info","event":"delivered","key":"r1:s1",...}
 * Fields are passed as (name, json_t *) pairs ending with NULL; the logger
 * takes the references. Callers never log a secret or a full payload.
 */
#ifndef OUTBOX_LOG_H
#define OUTBOX_LOG_H

#include <jansson.h>
#include <stdbool.h>

typedef enum { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR } log_level_t;

/* Parses "debug", "info", "warn" or "error"; false for anything else. */
bool log_level_parse(const char *name, log_level_t *out);
void log_set_level(log_level_t level);
bool log_enabled(log_level_t level);

/* log_event(LOG_INFO, "relay_started", "relay", json_string(id), NULL) */
void log_event(log_level_t level, const char *event, ...);

#endif
