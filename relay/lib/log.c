/*
 * log.c — JSON-lines logging.
 *
 * Why JSON lines: platform teams ship stderr to a log pipeline that indexes
 * fields (key, target, attempt, state); a DBA greps for a key. One write(2)
 * per line keeps lines whole when several processes share a terminal.
 */
#include "lib/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static log_level_t current_level = LOG_INFO;

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

static void format_now(char *buf, size_t size)
{
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    size_t n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, size - n, ".%03dZ", (int)(tv.tv_usec / 1000));
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
    ssize_t ignored = write(STDERR_FILENO, text, len + 1);
    (void)ignored;
    free(text);
}
