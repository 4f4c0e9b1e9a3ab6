/*
 * json_text.h — a strict JSON parser that keeps what jansson forgets: the
 * exact text of every number, and the bytes of the values a caller asks for.
 *
 * Why it exists. jansson parses a number into a json_int_t or a double and
 * writes it back with 17 significant digits, so 19.99 comes out as
 * 19.989999999999998, and it refuses an integer past 2^63 outright. A
 * program that must hand a value on as it was written (to PostgreSQL,
 * whose jsonb keeps numerics exactly) or judge it exactly (a JSON Schema's
 * multipleOf 0.01) needs the text. This parser builds the same jansson
 * tree the rest of the code reads, and beside it:
 *   - the token text of every number node jansson cannot hold exactly
 *     (every real, every integer past json_int_t), found by the node's
 *     pointer (json_text_number); such a number is still in the tree (an
 *     integer that overflows as a real, a real that overflows as the
 *     largest finite double of its sign), its text exact. An integer node
 *     (json_is_integer) is exact as it is and has no entry;
 *   - the byte span of each value asked for by its keys from the root
 *     (struct json_text_span), so that the caller can hand those bytes on
 *     instead of a re-serialisation.
 *
 * As strict as jansson: RFC 8259 grammar only, valid UTF-8, no lone
 * surrogate in an escape, no U+0000 in a string or key unless
 * JSON_TEXT_ALLOW_NUL, nesting bounded by JSON_TEXT_MAX_DEPTH, a root that
 * is an object or an array unless JSON_TEXT_DECODE_ANY. A key that appears
 * twice in one object: the last one wins (jansson's and PostgreSQL jsonb's
 * rule; a span then covers the value that won), or the text is refused
 * with JSON_TEXT_REJECT_DUPLICATES.
 *
 * And the way back: json_text_dumps writes a tree (one built by the caller
 * around nodes of documents) as jansson's JSON_COMPACT would, except that
 * a number node of one of the documents is written as its token text, so
 * a 19.99 read is a 19.99 written, and an integer past 2^63 or a 1e400
 * comes out as it came in.
 *
 * Pure: no I/O, no global state. The document owns its tree and copies the
 * number texts, so the parsed buffer may be freed at once.
 */
#ifndef OUTBOX_JSON_TEXT_H
#define OUTBOX_JSON_TEXT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JSON_TEXT_MAX_DEPTH 2048 /* jansson's JSON_PARSER_MAX_DEPTH */
#define JSON_TEXT_MAX_SPANS 4

enum {
    JSON_TEXT_REJECT_DUPLICATES = 1 << 0,
    JSON_TEXT_ALLOW_NUL = 1 << 1,
    JSON_TEXT_DECODE_ANY = 1 << 2,
};

/* One value whose bytes the caller wants: keys[0..nkeys) lead to it
 * through objects from the root (decoded keys: "\u0070arams" is params).
 * Filled by the parse: found, the value's bytes [start, end) in the text,
 * and its node in the tree (the one json_object_get would find). */
struct json_text_span {
    const char *const *keys;
    size_t nkeys;
    bool found;
    size_t start, end;
    const json_t *node;
    /* the numbers kept inside it: those of doc->nums whose text_off is in
     * [texts_start, texts_end) (the texts are stored in the order of the
     * text) */
    size_t texts_start, texts_end;
};

struct json_text_error {
    size_t position; /* byte offset of the error */
    char text[160];
};

struct json_text_number {
    json_t *node;      /* a reference held: pointers stay unique while the document lives */
    uint32_t text_off; /* the token in doc->texts, which keeps them in the order of the text */
    uint32_t text_len;
};

struct json_text {
    int refs;
    json_t *root;
    struct json_text_number *nums; /* sorted by node once parsed */
    size_t nnums, nums_cap;
    char *texts;
    size_t texts_len, texts_cap;
};

/* Parses len bytes of text (at most 4 GiB). NULL with err filled (when not
 * NULL) when the text is not JSON as above, or memory ran out. spans (at most
 * JSON_TEXT_MAX_SPANS) are filled in place. The result has one reference. */
struct json_text *json_text_parse(const char *text, size_t len, int flags,
                                  struct json_text_span *spans, size_t nspans,
                                  struct json_text_error *err);
struct json_text *json_text_incref(struct json_text *doc);
void json_text_decref(struct json_text *doc);

/* The token text of a number node of doc (not NUL-terminated), with its
 * length in *len; NULL when doc is NULL, node is not one of its numbers,
 * or node is an integer (jansson's value is then exact). */
const char *json_text_number(const struct json_text *doc, const json_t *node, size_t *len);

/* The tree as compact JSON, NUL-terminated, malloc'd (free with free()):
 * what json_dumps(tree, JSON_COMPACT | (flags & JSON_SORT_KEYS)) writes,
 * byte for byte (its escaping, its key order or its sorting), except that
 * every number node of the tree found in docs[0..ndocs) (json_text_number)
 * is written as its token text. NULL when out of memory, when the tree
 * is nested deeper than JSON_TEXT_MAX_DEPTH + 64, or when it is not a
 * container and flags lacks JSON_ENCODE_ANY (as jansson). A tree shares
 * its number nodes with the documents (json_object_set, json_pack's "O"):
 * a copy (json_deep_copy) is a new node, and is written as jansson would. */
char *json_text_dumps(const json_t *tree, const struct json_text *const *docs, size_t ndocs,
                      size_t flags);

/* Can PostgreSQL's numeric (and so jsonb) hold this JSON number token?
 * Its rules: at most 16383 digits after the decimal point counting those
 * an exponent adds (0.0e-16383 is too many), a leading digit at most
 * 10^131071, an exponent below 2^30 in size. False with why set to a
 * sentence saying which. */
bool json_text_number_fits_numeric(const char *num, size_t len, const char **why);

#endif
