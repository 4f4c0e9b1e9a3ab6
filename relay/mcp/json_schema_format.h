/*
 * json_schema_format.h — the four values of "format" that the JSON Schema
 * subset (json_schema.h) asserts: date-time, date, email, uuid. Every other
 * format is an annotation and accepts any string.
 *
 * Why it is shaped so. Tool schemas written by FastMCP (pydantic) and zod
 * carry "format" on dates, e-mail addresses and ids; a model that sends
 * "tomorrow" where a date-time is wanted should hear so before a target is
 * called. Each check is a small hand-written grammar over bytes (no regex,
 * no locale, no allocation), so what it accepts is exactly what the comment
 * of each function says.
 */
#ifndef OUTBOX_JSON_SCHEMA_FORMAT_H
#define OUTBOX_JSON_SCHEMA_FORMAT_H

#include <stdbool.h>
#include <stddef.h>

/* True when format is one of the asserted formats. */
bool json_schema_format_known(const char *format);

/* True when s (n bytes, may hold NUL) is valid for format; always true for
 * a format that is not asserted. */
bool json_schema_format_valid(const char *format, const char *s, size_t n);

#endif
