/*
 * json_schema_internal.h — what the files of the JSON Schema subset
 * (json_schema.h) share, and nothing else includes:
 *
 *   json_schema.c        paths, messages, exact numbers and deep equality,
 *                        and the validation of a call's arguments;
 *   json_schema_check.c  the keywords of the subset, local $ref resolution
 *                        and loop detection, and the check at registration;
 *   json_schema_regex.c  the translation of ECMA-262 patterns into POSIX ERE;
 *   json_schema_canonical.c  the canonical text of arguments without their
 *                        volatile properties (keys from the arguments).
 *
 * Why it is shaped so: the check and the validation read the same keywords
 * and must agree on paths, numbers and references; each concern is one
 * file, and the js_ names below are their only meeting points.
 */
#ifndef OUTBOX_JSON_SCHEMA_INTERNAL_H
#define OUTBOX_JSON_SCHEMA_INTERNAL_H

#include <jansson.h>
#include <regex.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct json_text;

/* ---- paths and messages (json_schema.c) */

/* The JSON Pointer of where a walk is, in the schema or in the instance.
 * A segment that does not fit is not written, nor is any after it, and the
 * path is printed with "/..." at its end. */
#define PATH_MAX_BYTES 160
#define PATH_CUT SIZE_MAX

struct path {
    char buf[PATH_MAX_BYTES];
    size_t len;
    int cut; /* segments pushed but not written */
};

void js_path_init(struct path *p);
/* Returns the mark to hand to js_path_pop. */
size_t js_path_push_key(struct path *p, const char *key);
size_t js_path_push_index(struct path *p, size_t index);
void js_path_pop(struct path *p, size_t mark);
const char *js_path_str(const struct path *p);
const char *js_path_tail(const struct path *p);
/* True when v holds a value nested deeper than limit levels (v itself is at
 * depth); p is then left at the first such value. */
bool js_path_find_too_deep(struct path *p, const json_t *v, int depth, int limit);
/* Cuts a trailing incomplete UTF-8 sequence. */
void js_utf8_trim_tail(char *s);

/* ---- numbers and equality (json_schema.c) */

/* The documents whose numbers' texts are known (either may be NULL): the
 * schema's and the instance's. */
struct numctx {
    const struct json_text *docs[2];
};

int js_num_sign(const struct numctx *nc, const json_t *v);
/* The number's canonical text (equal values alike), malloc'd; NULL when
 * memory ran out. */
char *js_num_canonical(const struct numctx *nc, const json_t *v);
/* A non-negative integer (2.0 is one) that fits in 64 bits. */
bool js_count_of(const struct numctx *nc, const json_t *v, uint64_t *out);
/* 1 when a and b are equal as JSON Schema says (numbers by value, key order
 * ignored), 0 when not, -1 when nested too deep to tell. */
int js_json_same(const struct numctx *nc, const json_t *a, const json_t *b, int depth);

/* ---- references (json_schema_check.c) */

/* The schema a local $ref names in root ("#" or "#/..." through places that
 * hold schemas); NULL with why for anything else. */
const json_t *js_ref_resolve(const json_t *root, const char *ref, char *why, size_t why_len);

/* ---- patterns (json_schema_regex.c) */

/* regcomp of the POSIX translation of an ECMA-262 pattern: true, or false
 * with why (a phrase to follow "pattern"). re is to be regfree'd when true
 * is returned, and is untouched otherwise. */
bool js_pattern_compile_text(const char *text, size_t len, regex_t *re, char *why, size_t why_len);
bool js_pattern_compile(const json_t *pattern, regex_t *re, char *why, size_t why_len);

#endif
