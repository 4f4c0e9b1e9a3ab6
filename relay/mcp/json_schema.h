/*
 * json_schema.h — a subset of JSON Schema 2020-12: the check of a tool's
 * input_schema when it is registered, and the validation of a tools/call's
 * arguments against it. Pure: no I/O, no global state.
 *
 * Why it is shaped so. The front door hands the model's arguments to a
 * target only when they fit the tool's schema, and says exactly why when
 * they do not: the model reads the messages and corrects its call. A full
 * JSON Schema implementation (remote $ref, $dynamicRef, unevaluated*,
 * vocabularies) is a large attack surface for little gain in tool schemas,
 * so the subset below is checked once, at registration: a schema that uses
 * anything else is refused there with the keyword and its place in the
 * schema, never half-understood later. Within the subset the answers are
 * those of the specification (tests/mcp/schema_suite.sh runs the official
 * test suite against it, and hands every schema it meets to the SQL check of
 * registration, outbox.mcp_schema_problem, which must decide alike).
 *
 * The subset, keyword by keyword (anything else is refused by
 * json_schema_check; a boolean schema, true or false, is allowed anywhere a
 * schema is):
 *
 *   type                  a string or a non-empty array of unique strings among
 *                         null, boolean, object, array, number, integer, string;
 *                         integer is any number with a zero fractional part
 *                         (1.0 is an integer)
 *   properties            an object of schemas
 *   required              an array of unique strings
 *   additionalProperties  a schema (true, false, or an object)
 *   enum                  an array of any values
 *   const                 any value
 *                         (enum, const and uniqueItems compare deeply and
 *                         mathematically: 1 equals 1.0 and 1e2 equals 100,
 *                         exactly; key order is ignored)
 *   minimum, maximum, exclusiveMinimum, exclusiveMaximum
 *                         numbers; compared exactly as decimals
 *   multipleOf            a number > 0; exact: the quotient of the two decimals
 *                         must be an integer (19.99 is a multiple of 0.01, 19.991
 *                         is not; 0.0075 is a multiple of 0.0001; 1e308 is not
 *                         one of 0.123456789)
 *                         Numbers are judged by their exact decimal value, as
 *                         written, never through a double: 1.0 and 1e400 are
 *                         integers, 9007199254740993 is not 9007199254740992,
 *                         0.10000000000000001 is not 0.1. The exact text comes
 *                         from the document the number was parsed from
 *                         (json_schema_validate_doc with lib/json_text.h's
 *                         documents); without one, a number is the value
 *                         jansson holds (an integer, or the shortest decimal
 *                         that reads back as its double). The work is bounded
 *                         by the digits written, never by an exponent.
 *   minLength, maxLength  non-negative integers (2.0 is one); lengths are counted
 *                         in Unicode code points, not bytes
 *   pattern               a regular expression, searched for anywhere in the
 *                         string (not anchored, as JSON Schema says). It is
 *                         executed by POSIX regcomp/regexec (extended syntax,
 *                         glibc, C locale), not by an ECMA-262 engine: the check
 *                         translates the ECMA-262 syntax that tool schemas use
 *                         into POSIX ERE and refuses what has no faithful
 *                         translation. Translated: literals (any Unicode
 *                         character, matched whole), . (any code point but
 *                         \n \r U+2028 U+2029), [...] and [^...] classes with
 *                         ASCII ranges (and non-ASCII characters one by one in
 *                         [...]), \d \D \w \W \s \S (ASCII digits and word
 *                         characters; \s has ECMA-262's Unicode white space),
 *                         \t \n \r \f \v \cX \xHH \uHHHH \u{H...} and
 *                         escaped punctuation, groups ( ), (?: ), (?<name> ),
 *                         alternation |, anchors ^ $ \b \B, quantifiers * + ? {n}
 *                         {n,} {n,m} (bounds at most 1000; a lazy ? suffix is
 *                         dropped, which changes no search verdict). Refused:
 *                         lookaround (?= (?! (?<= (?<!, backreferences \1 \k<..>,
 *                         Unicode property escapes \p{..} \P{..}, \0, ranges with
 *                         a non-ASCII end, non-ASCII characters in a negated
 *                         class, more than 32 groups nested, patterns over
 *                         JSON_SCHEMA_PATTERN_MAX bytes, and patterns that are
 *                         too large for regcomp once their counted repetitions
 *                         are written out (about 10,000 atoms: ^.{0,200}$ is
 *                         accepted, ^.{0,300}$ is not; bound a length with
 *                         minLength and maxLength instead). The translation
 *                         was checked against an ECMA-262 engine (V8, u flag)
 *                         on random patterns and strings: no difference.
 *   prefixItems           a non-empty array of schemas, applied to the first
 *                         elements one by one
 *   items                 a schema applied to every element after prefixItems'
 *                         (the 2020-12 meaning; the array form of older drafts
 *                         is refused)
 *   minItems, maxItems    non-negative integers
 *   uniqueItems           a boolean
 *   patternProperties     an object of schemas keyed by patterns (translated as
 *                         "pattern" is); a member whose name matches a pattern
 *                         is validated by its schema and is no additional
 *                         property
 *   propertyNames         a schema every member's name must fit
 *   minProperties, maxProperties
 *                         non-negative integers
 *   dependentRequired     an object of arrays of unique strings: when the key
 *                         is present, so must each name be
 *   allOf, anyOf, oneOf   non-empty arrays of schemas
 *   not                   a schema
 *   $defs, definitions    objects of schemas (definitions is draft-07's name)
 *   $ref                  "#" or a JSON Pointer "#/..." (percent-decoded, ~0
 *                         ~1 unescaped) into the same schema, through places
 *                         that hold schemas ($defs/NAME, definitions/NAME,
 *                         properties/NAME, patternProperties/NAME, allOf,
 *                         anyOf, oneOf, prefixItems/INDEX, items,
 *                         additionalProperties, not, propertyNames); applied
 *                         beside the other keywords of its schema (2020-12).
 *                         Refused: remote references, anchors, pointers into
 *                         enum, const or anything else, and a $ref that comes
 *                         back to its own schema through $ref, allOf, anyOf,
 *                         oneOf and not alone (it would never descend into
 *                         the value); recursion through properties or items
 *                         is fine
 *   format                a string. Asserted for four formats (the string is
 *                         refused when it does not fit; any other type
 *                         passes): date-time (RFC 3339: YYYY-MM-DDTHH:MM:SS,
 *                         an optional fraction, then Z or +HH:MM/-HH:MM; T and
 *                         Z in either case; days of the real calendar; second
 *                         60 only at 23:59 UTC), date (RFC 3339 full-date),
 *                         email (RFC 5321 Mailbox: dot-atoms or a quoted local
 *                         part, @, a host name or an [IPv4] / [IPv6:...]
 *                         literal; no display names), uuid (8-4-4-4-12 hex
 *                         digits, any case, any version). Every other format is
 *                         an annotation (json_schema_format.c says exactly
 *                         what each accepts)
 *   annotations that change nothing: $schema and $id (strings, at the root
 *   only), title, description, $comment (strings), default (any), examples
 *   (an array), deprecated, readOnly, writeOnly (booleans), and
 *   x-outbox-volatile (a boolean: the property is left out of the key a
 *   tool with key_source 'arguments' derives, json_schema_canonical)
 *
 * $schema, when present, must name the meta-schema of 2020-12, 2019-09,
 * draft-07 or draft-06 (http or https, with or without a final #): the
 * keywords above mean the same in all four, and the forms whose meaning
 * changed between drafts (items as an array, exclusiveMinimum as a
 * boolean) are refused. Another meta-schema could turn assertions off, so
 * it is refused too. Where a draft gives a keyword no meaning, it is
 * refused under that $schema rather than read otherwise: prefixItems under
 * 2019-09, draft-07 and draft-06; dependentRequired, and any assertion or
 * applicator beside $ref (those drafts ignore it), under draft-07 and
 * draft-06.
 *
 * Bounds: a schema or an instance nested deeper than JSON_SCHEMA_MAX_DEPTH
 * levels is refused (by the check, or with one violation), never recursed
 * into; a validation that would apply more than 100,000 schemas to one
 * call, or go more than 256 levels deep through $ref and the applicators,
 * stops with one violation saying so; validation keeps at most JSON_SCHEMA_MAX_ERRORS messages of
 * JSON_SCHEMA_ERROR_LEN bytes (valid UTF-8, cut if longer) and counts the
 * rest. Compiled patterns live for one call and are freed before it returns.
 */
#ifndef OUTBOX_JSON_SCHEMA_H
#define OUTBOX_JSON_SCHEMA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define JSON_SCHEMA_MAX_DEPTH 64
#define JSON_SCHEMA_MAX_ERRORS 16
#define JSON_SCHEMA_ERROR_LEN 256
#define JSON_SCHEMA_PATTERN_MAX 1024

/* What one validation found. count is what json_schema_validate returned:
 * every violation, also those past the JSON_SCHEMA_MAX_ERRORS kept. Each
 * message starts with the instance path as a JSON Pointer ("/" for the
 * root): "/items/2/amount: must be >= 0", "/: missing required property
 * \"account\"", "/extra: additional property not allowed". */
struct json_schema_errors {
    int count;
    int kept; /* messages in msg[], at most JSON_SCHEMA_MAX_ERRORS */
    char msg[JSON_SCHEMA_MAX_ERRORS][JSON_SCHEMA_ERROR_LEN];
};

/* True when schema is well-formed and uses only the subset above. Else
 * false, with a message in err (errlen bytes, NUL-terminated, valid UTF-8)
 * naming the keyword and where it is in the schema as a JSON Pointer:
 * "unsupported keyword \"if\" at /properties/a",
 * "\"minLength\" must be a non-negative integer at /". err may be NULL. */
bool json_schema_check(const json_t *schema, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* The number of violations of schema by instance: 0 when it is valid. The
 * schema must have passed json_schema_check; any other schema is still
 * walked safely (what the check would refuse is ignored, or counted as a
 * violation when it cannot be ignored, such as a pattern that does not
 * compile). out may be NULL; else it is filled from scratch. */
int json_schema_validate(const json_t *schema, const json_t *instance,
                         struct json_schema_errors *out);

/* The same, judging numbers by the exact text of the documents they were
 * parsed from (lib/json_text.h): the schema's and the instance's, either
 * NULL. Without a document, a number is the integer jansson holds or the
 * shortest decimal that reads back as its double (0.1 for 0.1). */
struct json_text;
bool json_schema_check_doc(const json_t *schema, const struct json_text *schema_doc, char *err,
                           size_t errlen) __attribute__((warn_unused_result));
int json_schema_validate_doc(const json_t *schema, const struct json_text *schema_doc,
                             const json_t *instance, const struct json_text *instance_doc,
                             struct json_schema_errors *out);

/* The canonical text of a tool call's arguments (instance, numbers read
 * from instance_doc), without the properties that schema marks
 * "x-outbox-volatile": true: what a key from the arguments is derived from
 * (json_schema_canonical.c says exactly what is kept and how it is
 * written). A malloc'd text, NUL-terminated, its length in *len; NULL when
 * the walk would exceed its bounds or memory ran out. */
char *json_schema_canonical(const json_t *schema, const struct json_text *schema_doc,
                            const json_t *instance, const struct json_text *instance_doc,
                            size_t *len);

/* The first property at the root of schema whose name says it is a
 * reference ("ref" in it, any case) and that is not volatile: the argument
 * a model can change to ask for a second, identical action on purpose.
 * NULL when there is none. Borrowed from schema. */
const char *json_schema_reference_property(const json_t *schema);

#endif
