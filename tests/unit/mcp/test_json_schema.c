/*
 * test_json_schema.c — relay/mcp/json_schema.h: the check of a tool's
 * input_schema at registration, and the validation of arguments with the
 * messages the model reads.
 *
 * The exact text of messages is asserted where the model depends on it
 * (paths, the required / additional property wording); the official test
 * suite (tests/mcp/schema_suite.sh) covers the keywords' meaning at large.
 */
#include "../unit.h"

#include "lib/json_text.h"
#include "mcp/json_schema.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- helpers */

static json_t *parse(const char *text)
{
    json_error_t error;
    json_t *v = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, &error);
    ck_assert_msg(v != NULL, "bad JSON in the test: %s: %s", text, error.text);
    return v;
}

/* The check's verdict on a schema, with its message in err. */
static bool check_text(const char *schema_text, char *err, size_t errlen)
{
    json_t *schema = parse(schema_text);
    bool ok = json_schema_check(schema, err, errlen);
    json_decref(schema);
    return ok;
}

static void assert_refused(const char *schema_text, const char *message)
{
    char err[256];
    ck_assert_msg(!check_text(schema_text, err, sizeof(err)), "accepted: %s", schema_text);
    ck_assert_str_eq(err, message);
}

static void assert_refused_containing(const char *schema_text, const char *part)
{
    char err[256];
    ck_assert_msg(!check_text(schema_text, err, sizeof(err)), "accepted: %s", schema_text);
    ck_assert_msg(strstr(err, part) != NULL, "\"%s\" not in \"%s\"", part, err);
}

static void assert_accepted(const char *schema_text)
{
    char err[256];
    ck_assert_msg(check_text(schema_text, err, sizeof(err)), "refused: %s: %s", schema_text, err);
}

/* Checks the schema (it must pass), validates, returns the violations. */
static int validate_text(const char *schema_text, const char *instance_text,
                         struct json_schema_errors *out)
{
    json_t *schema = parse(schema_text);
    json_t *instance = parse(instance_text);
    char err[256];
    ck_assert_msg(json_schema_check(schema, err, sizeof(err)), "schema refused: %s", err);
    int count = json_schema_validate(schema, instance, out);
    json_decref(schema);
    json_decref(instance);
    return count;
}

static bool valid(const char *schema_text, const char *instance_text)
{
    struct json_schema_errors errors;
    return validate_text(schema_text, instance_text, &errors) == 0;
}

/* The same, with both texts read by lib/json_text.h (as the front door
 * reads a tool's schema and a call's arguments): numbers exact. */
static int validate_exact(const char *schema_text, const char *instance_text,
                          struct json_schema_errors *out)
{
    struct json_text_error err;
    struct json_text *schema =
        json_text_parse(schema_text, strlen(schema_text), JSON_TEXT_DECODE_ANY, NULL, 0, &err);
    ck_assert_msg(schema != NULL, "bad schema in the test: %s", err.text);
    struct json_text *instance =
        json_text_parse(instance_text, strlen(instance_text), JSON_TEXT_DECODE_ANY, NULL, 0, &err);
    ck_assert_msg(instance != NULL, "bad instance in the test: %s", err.text);
    char problem[256];
    ck_assert_msg(json_schema_check_doc(schema->root, schema, problem, sizeof(problem)),
                  "schema refused: %s", problem);
    int count = json_schema_validate_doc(schema->root, schema, instance->root, instance, out);
    json_text_decref(schema);
    json_text_decref(instance);
    return count;
}

static bool exact(const char *schema_text, const char *instance_text)
{
    struct json_schema_errors errors;
    return validate_exact(schema_text, instance_text, &errors) == 0;
}

/* Exactly one violation, with this message. */
static void assert_one_violation(const char *schema_text, const char *instance_text,
                                 const char *message)
{
    struct json_schema_errors errors;
    int count = validate_text(schema_text, instance_text, &errors);
    ck_assert_msg(count == 1, "%d violations for %s", count, instance_text);
    ck_assert_int_eq(errors.count, 1);
    ck_assert_int_eq(errors.kept, 1);
    ck_assert_str_eq(errors.msg[0], message);
}

/* Strict UTF-8 (the messages become JSON strings). */
static bool utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        size_t len = *p < 0x80 ? 1 : *p >= 0xF0 ? 4 : *p >= 0xE0 ? 3 : *p >= 0xC2 ? 2 : 0;
        if (len == 0)
            return false;
        for (size_t k = 1; k < len; k++)
            if ((p[k] & 0xC0) != 0x80)
                return false;
        p += len;
    }
    return true;
}

/* A refund tool's input_schema, as registered. */
static const char *const refund_schema =
    "{\"$schema\": \"https://json-schema.org/draft/2020-12/schema\","
    " \"title\": \"refund\", \"type\": \"object\","
    " \"properties\": {"
    "   \"account\": {\"type\": \"string\", \"pattern\": \"^acct_[0-9a-z]+$\", \"maxLength\": 40},"
    "   \"currency\": {\"enum\": [\"usd\", \"eur\"], \"default\": \"usd\"},"
    "   \"items\": {\"type\": \"array\", \"minItems\": 1, \"maxItems\": 10,"
    "     \"items\": {\"type\": \"object\", \"required\": [\"amount\"],"
    "       \"properties\": {\"amount\": {\"type\": \"integer\", \"minimum\": 0},"
    "                        \"note\": {\"type\": [\"string\", \"null\"]}},"
    "       \"additionalProperties\": false}}},"
    " \"required\": [\"account\", \"items\"],"
    " \"additionalProperties\": false}";

/* ---------------------------------------------------------------- check */

START_TEST(check_accepts_the_subset)
{
    assert_accepted(refund_schema);
    assert_accepted("true");
    assert_accepted("false");
    assert_accepted("{}");
    assert_accepted("{\"properties\": {\"a\": true, \"b\": false}, \"items\": false,"
                    " \"additionalProperties\": {\"type\": \"integer\"}}");
    assert_accepted("{\"type\": \"number\", \"minimum\": -1.5, \"maximum\": 1e300,"
                    " \"exclusiveMinimum\": -2, \"exclusiveMaximum\": 2, \"multipleOf\": 0.5}");
    assert_accepted("{\"minLength\": 2.0, \"maxLength\": 0, \"minItems\": 0, \"maxItems\": 1e30,"
                    " \"uniqueItems\": true}");
    assert_accepted("{\"$id\": \"https://example.com/refund\", \"$comment\": \"c\","
                    " \"description\": \"d\", \"examples\": [1, \"x\"], \"deprecated\": false,"
                    " \"readOnly\": true, \"writeOnly\": false, \"const\": {\"a\": [1]},"
                    " \"enum\": []}");
    assert_accepted("{\"$schema\": \"http://json-schema.org/draft-07/schema#\"}");
    assert_accepted("{\"$schema\": \"https://json-schema.org/draft/2020-12/schema#\"}");
    assert_accepted("{\"type\": [\"string\", \"null\"]}");
}
END_TEST

START_TEST(check_refuses_unsupported_keywords_with_their_path)
{
    assert_refused("{\"properties\": {\"a\": {\"if\": true}}}",
                   "unsupported keyword \"if\" at /properties/a");
    assert_refused("{\"$dynamicRef\": \"#a\"}", "unsupported keyword \"$dynamicRef\" at /");
    assert_refused("{\"items\": {\"properties\": {\"x/y~z\": {\"contains\": true}}}}",
                   "unsupported keyword \"contains\" at /items/properties/x~1y~0z");
    assert_refused("{\"additionalProperties\": {\"unevaluatedProperties\": false}}",
                   "unsupported keyword \"unevaluatedProperties\" at /additionalProperties");
    assert_refused("{\"anyOf\": [{\"dependentSchemas\": {}}]}",
                   "unsupported keyword \"dependentSchemas\" at /anyOf/0");
}
END_TEST

START_TEST(check_refuses_malformed_values)
{
    assert_refused("{\"required\": [\"a\", 1]}",
                   "\"required\" must be an array of strings without repeats at /");
    assert_refused("{\"required\": [\"a\", \"a\"]}",
                   "\"required\" must be an array of strings without repeats at /");
    assert_refused("{\"properties\": {\"a\": {\"minLength\": -1}}}",
                   "\"minLength\" must be a non-negative integer at /properties/a");
    assert_refused_containing("{\"maxItems\": 2.5}", "\"maxItems\" must be a non-negative");
    assert_refused_containing("{\"minItems\": \"2\"}", "\"minItems\" must be a non-negative");
    assert_refused_containing("{\"multipleOf\": 0}", "\"multipleOf\" must be a number greater");
    assert_refused_containing("{\"multipleOf\": -2}", "\"multipleOf\" must be a number greater");
    assert_refused_containing("{\"minimum\": \"0\"}", "\"minimum\" must be a number");
    assert_refused_containing("{\"exclusiveMinimum\": true}", "\"exclusiveMinimum\" must be");
    assert_refused_containing("{\"type\": \"float\"}", "\"type\" must be one of");
    assert_refused_containing("{\"type\": []}", "\"type\" must be one of");
    assert_refused_containing("{\"type\": [\"string\", \"string\"]}", "\"type\" must be one of");
    assert_refused_containing("{\"enum\": \"a\"}", "\"enum\" must be an array");
    assert_refused_containing("{\"uniqueItems\": 1}", "\"uniqueItems\" must be a boolean");
    assert_refused_containing("{\"title\": 1}", "\"title\" must be a string");
    assert_refused_containing("{\"examples\": 1}", "\"examples\" must be an array");
    assert_refused_containing("{\"readOnly\": \"yes\"}", "\"readOnly\" must be a boolean");
    assert_refused("{\"items\": [true, false]}",
                   "\"items\" must be a schema (an object or a boolean) at /");
    assert_refused("{\"properties\": {\"a\": 1}}",
                   "a schema must be an object or a boolean at /properties/a");
    assert_refused_containing("{\"properties\": []}", "\"properties\" must be an object");
    assert_refused("[]", "a schema must be an object or a boolean at /");
}
END_TEST

START_TEST(check_root_only_annotations)
{
    assert_refused("{\"properties\": {\"a\": {\"$id\": \"x\"}}}",
                   "\"$id\" is allowed only at the root at /properties/a");
    assert_refused("{\"items\": {\"$schema\": \"https://json-schema.org/draft/2020-12/schema\"}}",
                   "\"$schema\" is allowed only at the root at /items");
    assert_refused_containing("{\"$schema\": \"https://example.com/my-meta-schema\"}",
                              "\"$schema\" must name the 2020-12");
    assert_refused_containing("{\"$schema\": \"http://json-schema.org/draft-04/schema#\"}",
                              "\"$schema\" must name the 2020-12");
    assert_refused_containing("{\"$id\": 1}", "\"$id\" must be a string");
}
END_TEST

START_TEST(check_patterns)
{
    assert_accepted("{\"pattern\": \"^[a-z]{2,3}-\\\\d+(?:\\\\.\\\\d+)?$\"}");
    assert_accepted("{\"pattern\": \"\"}");
    assert_accepted(
        "{\"pattern\": \"(?<year>\\\\d{4})-\\\\w+\\\\s*\\\\S\\\\u00e9\\\\u{1F600}[^\\\\s]\"}");
    assert_refused(
        "{\"properties\": {\"code\": {\"pattern\": \"^(?=a)\"}}}",
        "\"pattern\" has a lookahead (?=: not supported by POSIX ERE at /properties/code");
    assert_refused_containing("{\"pattern\": \"(?<!a)b\"}", "lookbehind");
    assert_refused_containing("{\"pattern\": \"(a)\\\\1\"}", "backreference");
    assert_refused_containing("{\"pattern\": \"\\\\p{Letter}\"}", "Unicode property escape");
    assert_refused_containing("{\"pattern\": \"[^é]\"}", "negated class with non-ASCII");
    assert_refused_containing("{\"pattern\": \"[a-é]\"}", "non-ASCII end");
    assert_refused_containing("{\"pattern\": \"a{1001}\"}", "above 1000");
    assert_refused_containing("{\"pattern\": \"^.{0,1000}$\"}", "too large");
    assert_refused_containing("{\"pattern\": \"*a\"}", "nothing to repeat");
    assert_refused_containing("{\"pattern\": \"a{\"}", "not a quantifier");
    assert_refused_containing("{\"pattern\": \"(a\"}", "unmatched (");
    assert_refused_containing("{\"pattern\": \"a)\"}", "unmatched )");
    assert_refused_containing("{\"pattern\": \"[a\"}", "unterminated [");
    assert_refused_containing("{\"pattern\": \"a\\\\\"}", "ends with a backslash");
    assert_refused_containing("{\"pattern\": \"\\\\0\"}", "U+0000");
    assert_refused_containing("{\"pattern\": \"a\\u0000b\"}", "U+0000");
    assert_refused_containing("{\"pattern\": \"\\\\q\"}", "unknown escape");
    assert_refused_containing("{\"pattern\": 5}", "\"pattern\" must be a string");
    /* a long pattern */
    char text[JSON_SCHEMA_PATTERN_MAX + 64];
    size_t n = (size_t)snprintf(text, sizeof(text), "{\"pattern\": \"");
    memset(text + n, 'a', JSON_SCHEMA_PATTERN_MAX + 1);
    n += JSON_SCHEMA_PATTERN_MAX + 1;
    snprintf(text + n, sizeof(text) - n, "\"}");
    assert_refused_containing(text, "longer than");
}
END_TEST

static json_t *nest_arrays(int levels)
{
    json_t *v = json_integer(1);
    for (int i = 0; i < levels; i++) {
        json_t *outer = json_array();
        json_array_append_new(outer, v);
        v = outer;
    }
    return v;
}

START_TEST(check_depth_is_bounded)
{
    /* {"items": {"items": ...}}: one level of JSON per schema */
    json_t *schema = json_true();
    for (int i = 0; i < JSON_SCHEMA_MAX_DEPTH; i++)
        schema = json_pack("{so}", "items", schema);
    char err[256];
    ck_assert(json_schema_check(schema, err, sizeof(err)));
    schema = json_pack("{so}", "items", schema);
    ck_assert(!json_schema_check(schema, err, sizeof(err)));
    ck_assert_msg(strstr(err, "deeper than 64 levels at /items/items/") != NULL, "%s", err);
    json_decref(schema);
    /* also inside const */
    json_t *deep = json_pack("{so}", "const", nest_arrays(JSON_SCHEMA_MAX_DEPTH + 1));
    ck_assert(!json_schema_check(deep, err, sizeof(err)));
    ck_assert_msg(strstr(err, "deeper than 64 levels at /const/0/0/") != NULL, "%s", err);
    json_decref(deep);
}
END_TEST

START_TEST(check_messages_fit_and_stay_utf8)
{
    /* a long keyword of two- and three-byte characters: the message is cut,
     * never mid-character */
    char key[600];
    size_t n = 0;
    while (n + 5 < 500) {
        memcpy(key + n, "\xc3\xa9\xe2\x82\xac", 5);
        n += 5;
    }
    key[n] = '\0';
    json_t *schema = json_pack("{si}", key, 1);
    for (size_t len = 1; len < 600; len++) {
        char err[600];
        memset(err, 'x', sizeof(err));
        ck_assert(!json_schema_check(schema, err, len));
        ck_assert_uint_lt(strlen(err), len);
        ck_assert(utf8_valid(err));
    }
    json_decref(schema);
    /* a key too long for the path: the path ends with "/..." */
    schema = json_pack("{s{s{s[]}}}", "properties", key, "contains");
    char err[256];
    ck_assert(!json_schema_check(schema, err, sizeof(err)));
    ck_assert_str_eq(err, "unsupported keyword \"contains\" at /properties/...");
    json_decref(schema);
    ck_assert(!json_schema_check(NULL, NULL, 0));
    ck_assert(!json_schema_check(NULL, err, sizeof(err)));
    ck_assert_str_eq(err, "no schema at /");
}
END_TEST

/* ---------------------------------------------------------------- validation: messages */

START_TEST(validate_accepts_a_good_call)
{
    ck_assert(valid(refund_schema,
                    "{\"account\": \"acct_42\", \"currency\": \"eur\","
                    " \"items\": [{\"amount\": 100}, {\"amount\": 0.0, \"note\": null}]}"));
}
END_TEST

START_TEST(validate_names_paths)
{
    assert_one_violation(refund_schema,
                         "{\"account\": \"acct_1\", \"items\": [{\"amount\": 1}, {\"amount\": 2},"
                         " {\"amount\": -5}]}",
                         "/items/2/amount: must be >= 0");
    assert_one_violation(refund_schema, "{\"items\": [{\"amount\": 1}]}",
                         "/: missing required property \"account\"");
    assert_one_violation(refund_schema,
                         "{\"account\": \"acct_1\", \"items\": [{\"amount\": 1}], \"extra\": 1}",
                         "/extra: additional property not allowed");
    assert_one_violation(refund_schema, "{\"account\": \"acct_1\", \"items\": []}",
                         "/items: must have at least 1 items");
    assert_one_violation(refund_schema, "{\"account\": \"ACCT\", \"items\": [{\"amount\": 1}]}",
                         "/account: must match the pattern \"^acct_[0-9a-z]+$\"");
    assert_one_violation(
        refund_schema,
        "{\"account\": \"acct_1\", \"currency\": \"gbp\", \"items\": [{\"amount\": 1}]}",
        "/currency: must be one of [\"usd\",\"eur\"]");
    assert_one_violation(refund_schema,
                         "{\"account\": \"acct_1\", \"items\": [{\"amount\": \"1\"}]}",
                         "/items/0/amount: must be integer, got string");
    assert_one_violation(refund_schema,
                         "{\"account\": \"acct_1\", \"items\": [{\"amount\": 1, \"note\": 3}]}",
                         "/items/0/note: must be string or null, got integer");
    assert_one_violation(refund_schema, "[]", "/: must be object, got array");
    assert_one_violation("{\"properties\": {\"a/b~c\": {\"type\": \"null\"}}}", "{\"a/b~c\": 1.5}",
                         "/a~1b~0c: must be null, got number");
    assert_one_violation("false", "1", "/: not allowed here (the schema is false)");
    assert_one_violation("{\"items\": false}", "[1]", "/0: not allowed here (the schema is false)");
    assert_one_violation("{\"const\": {\"a\": [1, \"x\"]}}", "{\"a\": [2, \"x\"]}",
                         "/: must be {\"a\":[1,\"x\"]}");
}
END_TEST

START_TEST(validate_counts_every_violation_and_keeps_sixteen)
{
    struct json_schema_errors errors;
    json_t *instance = json_object();
    for (int i = 0; i < 20; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%02d", i);
        json_object_set_new(instance, key, json_integer(i));
    }
    json_t *schema = parse("{\"additionalProperties\": false, \"required\": [\"a\", \"b\"]}");
    int count = json_schema_validate(schema, instance, &errors);
    ck_assert_int_eq(count, 22);
    ck_assert_int_eq(errors.count, 22);
    ck_assert_int_eq(errors.kept, JSON_SCHEMA_MAX_ERRORS);
    ck_assert_str_eq(errors.msg[0], "/: missing required property \"a\"");
    ck_assert_str_eq(errors.msg[1], "/: missing required property \"b\"");
    ck_assert_str_eq(errors.msg[2], "/k00: additional property not allowed");
    ck_assert_str_eq(errors.msg[15], "/k13: additional property not allowed");
    ck_assert_int_eq(json_schema_validate(schema, instance, NULL), 22);
    json_decref(schema);
    json_decref(instance);
}
END_TEST

START_TEST(validate_several_keywords_at_one_place)
{
    struct json_schema_errors errors;
    int count =
        validate_text("{\"type\": \"integer\", \"minimum\": 10, \"multipleOf\": 3}", "4", &errors);
    ck_assert_int_eq(count, 2);
    ck_assert_str_eq(errors.msg[0], "/: must be >= 10");
    ck_assert_str_eq(errors.msg[1], "/: must be a multiple of 3");
    count = validate_text("{\"minLength\": 5, \"pattern\": \"^[0-9]+$\"}", "\"ab\"", &errors);
    ck_assert_int_eq(count, 2);
    ck_assert_str_eq(errors.msg[0], "/: must be at least 5 characters long");
    ck_assert_str_eq(errors.msg[1], "/: must match the pattern \"^[0-9]+$\"");
}
END_TEST

START_TEST(validate_messages_fit_and_stay_utf8)
{
    /* nested keys of multi-byte characters: the path is cut whole segments
     * at a time, and the message never ends mid-character */
    json_t *schema = json_true();
    json_t *instance = json_integer(1);
    for (int i = 0; i < 40; i++) {
        char key[32];
        snprintf(key, sizeof(key), "\xe2\x82\xac\xe2\x82\xac%d\xf0\x9f\x98\x80\xf0\x9f\x98\x80", i);
        schema = json_pack("{s{so}s[s]}", "properties", key, schema, "required", "zz");
        instance = json_pack("{so}", key, instance);
    }
    struct json_schema_errors errors;
    int count = json_schema_validate(schema, instance, &errors);
    ck_assert_int_eq(count, 40);
    for (int k = 0; k < errors.kept; k++) {
        ck_assert(utf8_valid(errors.msg[k]));
        ck_assert_uint_lt(strlen(errors.msg[k]), JSON_SCHEMA_ERROR_LEN);
        ck_assert_msg(strstr(errors.msg[k], "missing required property \"zz\"") != NULL, "%s",
                      errors.msg[k]);
    }
    ck_assert_msg(strstr(errors.msg[15], "/...: missing") != NULL, "%s", errors.msg[15]);
    json_decref(schema);
    json_decref(instance);
    /* a long string in const is cut with ... */
    char text[1200];
    size_t len = (size_t)snprintf(text, sizeof(text), "{\"const\": \"");
    while (len < 1000) {
        memcpy(text + len, "\xc3\xa9", 2);
        len += 2;
    }
    snprintf(text + len, sizeof(text) - len, "\"}");
    count = validate_text(text, "1", &errors);
    ck_assert_int_eq(count, 1);
    ck_assert(utf8_valid(errors.msg[0]));
    ck_assert_msg(strstr(errors.msg[0], "...") != NULL, "%s", errors.msg[0]);
}
END_TEST

/* ---------------------------------------------------------------- validation: meaning */

START_TEST(validate_numbers_by_value)
{
    ck_assert(valid("{\"type\": \"integer\"}", "1.0"));
    ck_assert(valid("{\"type\": \"integer\"}", "-0.0"));
    ck_assert(valid("{\"type\": \"integer\"}", "1e300"));
    ck_assert(!valid("{\"type\": \"integer\"}", "1.5"));
    ck_assert(valid("{\"type\": \"number\"}", "3"));
    ck_assert(valid("{\"minimum\": 1.0}", "1"));
    ck_assert(!valid("{\"exclusiveMinimum\": 1}", "1.0"));
    ck_assert(valid("{\"exclusiveMaximum\": 1.5}", "1"));
    ck_assert(!valid("{\"maximum\": 0.5}", "1"));
    /* exact past 2^53: a double would make these equal */
    ck_assert(!valid("{\"maximum\": 9007199254740992}", "9007199254740993"));
    ck_assert(valid("{\"maximum\": 9007199254740993}", "9007199254740992.0"));
    ck_assert(!valid("{\"exclusiveMaximum\": 9223372036854775807}", "9223372036854775807"));
    ck_assert(valid("{\"exclusiveMaximum\": 9223372036854775808.0}", "9223372036854775807"));
    ck_assert(valid("{\"minimum\": -9223372036854775808}", "-9223372036854775808"));
    ck_assert(!valid("{\"minimum\": -9223372036854775807}", "-9223372036854775808.0"));
    ck_assert(valid("{\"minimum\": 1.5}", "2"));
    ck_assert(!valid("{\"minimum\": 2.5}", "2"));
    ck_assert(!valid("{\"maximum\": -2.5}", "-2"));
    ck_assert(valid("{\"maximum\": -1.5}", "-2"));
}
END_TEST

START_TEST(validate_multiple_of)
{
    ck_assert(valid("{\"multipleOf\": 3}", "9"));
    ck_assert(!valid("{\"multipleOf\": 3}", "10"));
    ck_assert(valid("{\"multipleOf\": 3}", "-9223372036854775806"));
    ck_assert(valid("{\"multipleOf\": 0.01}", "0.07"));
    ck_assert(valid("{\"multipleOf\": 0.01}", "19.99"));
    ck_assert(!valid("{\"multipleOf\": 0.01}", "19.995"));
    ck_assert(valid("{\"multipleOf\": 0.0001}", "0.0075"));
    ck_assert(!valid("{\"multipleOf\": 0.0001}", "0.00751"));
    ck_assert(valid("{\"multipleOf\": 1.5}", "4.5"));
    ck_assert(!valid("{\"multipleOf\": 2}", "1000000001.0"));
    ck_assert(valid("{\"multipleOf\": 0.5}", "1e308"));
    ck_assert(!valid("{\"multipleOf\": 0.123456789}", "1e308"));
    ck_assert(valid("{\"multipleOf\": 2.0}", "4"));
    ck_assert(valid("{\"multipleOf\": 1}", "0"));
}
END_TEST

START_TEST(validate_enum_const_deeply)
{
    ck_assert(valid("{\"enum\": [1, \"a\"]}", "1.0"));
    ck_assert(valid("{\"const\": 1.0}", "1"));
    ck_assert(
        valid("{\"const\": {\"a\": 1, \"b\": [true, null]}}", "{\"b\": [true, null], \"a\": 1.0}"));
    ck_assert(!valid("{\"const\": {\"a\": 1}}", "{\"a\": 1, \"b\": 2}"));
    ck_assert(!valid("{\"const\": [1, 2]}", "[2, 1]"));
    ck_assert(!valid("{\"const\": false}", "0"));
    ck_assert(!valid("{\"const\": null}", "false"));
    ck_assert(!valid("{\"enum\": []}", "null"));
    ck_assert(valid("{\"enum\": [[0], {\"a\": false}]}", "{\"a\": false}"));
    ck_assert(!valid("{\"const\": \"a\"}", "\"a \""));
}
END_TEST

START_TEST(validate_unique_items)
{
    struct json_schema_errors errors;
    ck_assert(valid("{\"uniqueItems\": true}", "[]"));
    ck_assert(valid("{\"uniqueItems\": true}", "[1, \"1\", [1], {\"a\": 1}, true, null]"));
    ck_assert(valid("{\"uniqueItems\": false}", "[1, 1]"));
    ck_assert_int_eq(validate_text("{\"uniqueItems\": true}", "[1, 2, 3, 1.0]", &errors), 1);
    ck_assert_str_eq(errors.msg[0], "/: items 0 and 3 are equal; items must be unique");
    ck_assert(!valid("{\"uniqueItems\": true}", "[{\"a\": 1, \"b\": 2}, {\"b\": 2, \"a\": 1}]"));
    ck_assert(valid("{\"uniqueItems\": true}", "[{\"a\": 1}, {\"a\": 2}, {\"b\": 1}]"));
    ck_assert(!valid("{\"uniqueItems\": true}", "[[1, {\"x\": 0}], [1.0, {\"x\": -0.0}]]"));
    /* many items: sorted by hash, not compared pairwise */
    json_t *items = json_array();
    for (int i = 0; i < 50000; i++)
        json_array_append_new(items, json_integer(i));
    json_t *schema = parse("{\"uniqueItems\": true}");
    ck_assert_int_eq(json_schema_validate(schema, items, NULL), 0);
    json_array_append_new(items, json_real(49999.0));
    ck_assert_int_eq(json_schema_validate(schema, items, &errors), 1);
    ck_assert_str_eq(errors.msg[0], "/: items 49999 and 50000 are equal; items must be unique");
    json_decref(items);
    json_decref(schema);
}
END_TEST

START_TEST(validate_lengths_in_code_points)
{
    ck_assert(valid("{\"maxLength\": 3}", "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\""));
    ck_assert(!valid("{\"maxLength\": 2}", "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\""));
    ck_assert(valid("{\"minLength\": 3}", "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\""));
    ck_assert(!valid("{\"minLength\": 4}", "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\""));
    ck_assert(valid("{\"minLength\": 2.0, \"maxLength\": 1e30}", "\"ab\""));
    ck_assert(valid("{\"maxLength\": 0}", "\"\""));
    ck_assert(valid("{\"minLength\": 5}", "5")); /* applies to strings only */
    struct json_schema_errors errors;
    ck_assert_int_eq(validate_text("{\"maxLength\": 2.0}", "\"abc\"", &errors), 1);
    ck_assert_str_eq(errors.msg[0], "/: must be at most 2 characters long");
}
END_TEST

START_TEST(validate_patterns)
{
    ck_assert(valid("{\"pattern\": \"b+\"}", "\"abbc\"")); /* not anchored */
    ck_assert(!valid("{\"pattern\": \"^b+$\"}", "\"abbc\""));
    ck_assert(valid("{\"pattern\": \"^\\\\d{3}$\"}", "\"123\""));
    ck_assert(!valid("{\"pattern\": \"^\\\\d{3}$\"}", "\"d12\""));
    ck_assert(!valid("{\"pattern\": \"^abc$\"}", "\"abc\\n\""));
    ck_assert(valid("{\"pattern\": \"^.$\"}", "\"\xf0\x9f\x98\x80\""));
    ck_assert(!valid("{\"pattern\": \"^.$\"}", "\"\\n\""));
    ck_assert(
        valid("{\"pattern\": \"^\xf0\x9f\x90\xb2*$\"}", "\"\xf0\x9f\x90\xb2\xf0\x9f\x90\xb2\""));
    ck_assert(valid("{\"pattern\": \"^\\\\s$\"}", "\"\\u00a0\""));
    ck_assert(!valid("{\"pattern\": \"^\\\\S$\"}", "\"\\ufeff\""));
    ck_assert(valid("{\"pattern\": \"^\\\\S$\"}", "\"\xc3\xa9\""));
    ck_assert(!valid("{\"pattern\": \"^\\\\w$\"}", "\"\xc3\xa9\""));
    ck_assert(valid("{\"pattern\": \"^[\\\\]\\\\-^]+$\"}", "\"]-^\""));
    ck_assert(valid("{\"pattern\": \"^[[:a]+$\"}", "\"[:a\""));
    ck_assert(valid("{\"pattern\": \"^\\\\x41\\\\u0042\\\\t$\"}", "\"AB\\t\""));
    ck_assert(valid("{\"pattern\": \"^a+?b*?$\"}", "\"aab\""));
    ck_assert(valid("{\"pattern\": \"\\\\bcat\\\\b\"}", "\"a cat!\""));
    ck_assert(!valid("{\"pattern\": \"\\\\bcat\\\\b\"}", "\"concat\""));
    ck_assert(valid("{\"pattern\": \"^[^a-c]$\"}", "\"\xc3\xa9\""));
    ck_assert(valid("{\"pattern\": \"^[\xc3\xa9x]{2}$\"}", "\"x\xc3\xa9\""));
    ck_assert(!valid("{\"pattern\": \"^a.c$\"}", "\"a\\u0000\\u0000c\""));
    ck_assert(valid("{\"pattern\": \"^a.c$\"}", "\"a\\u0000c\""));
    ck_assert(valid("{\"pattern\": \"^x\"}", "1")); /* applies to strings only */
}
END_TEST

START_TEST(validate_many_patterns_in_one_call)
{
    /* more patterns than the per-call cache holds, each used twice */
    json_t *props = json_object();
    json_t *instance = json_object();
    for (int i = 0; i < 20; i++) {
        char key[16], pattern[32], value[32];
        snprintf(key, sizeof(key), "p%d", i);
        snprintf(pattern, sizeof(pattern), "^v%d$", i);
        snprintf(value, sizeof(value), "v%d", i % 2 == 0 ? i : i + 1);
        json_object_set_new(
            props, key, json_pack("{ss s{ss}}", "pattern", pattern, "items", "pattern", pattern));
        json_object_set_new(instance, key, json_string(value));
    }
    json_t *schema = json_pack("{so}", "properties", props);
    char err[256];
    ck_assert_msg(json_schema_check(schema, err, sizeof(err)), "%s", err);
    struct json_schema_errors errors;
    ck_assert_int_eq(json_schema_validate(schema, instance, &errors), 10);
    ck_assert_str_eq(errors.msg[0], "/p1: must match the pattern \"^v1$\"");
    json_decref(schema);
    json_decref(instance);
}
END_TEST

START_TEST(validate_items_and_properties)
{
    ck_assert(valid("{\"items\": {\"type\": \"string\"}}", "[\"a\", \"b\"]"));
    ck_assert(!valid("{\"items\": {\"type\": \"string\"}}", "[\"a\", 2]"));
    ck_assert(valid("{\"items\": {\"type\": \"string\"}}", "{\"0\": 1}"));
    ck_assert(valid("{\"properties\": {\"a\": {\"type\": \"string\"}}}", "{\"b\": 1}"));
    ck_assert(
        valid("{\"additionalProperties\": {\"type\": \"integer\"}}", "{\"b\": 1, \"c\": 2.0}"));
    ck_assert(!valid("{\"additionalProperties\": {\"type\": \"integer\"}}", "{\"b\": 1.5}"));
    ck_assert(valid("{\"required\": [\"a\"]}", "[]")); /* applies to objects only */
    ck_assert(valid("{\"maxItems\": 0}", "\"\""));
    ck_assert(!valid("{\"maxItems\": 1}", "[1, 2]"));
    ck_assert(valid("{\"type\": \"boolean\"}", "false"));
    ck_assert(!valid("{\"type\": \"boolean\"}", "0"));
    ck_assert(valid("{\"type\": \"null\"}", "null"));
}
END_TEST

START_TEST(validate_keys_with_nul)
{
    /* jansson's parser refuses U+0000 in keys, json_object_setn does not:
     * "a\0b" is not the property "a" */
    json_t *schema = parse("{\"properties\": {\"a\": {\"type\": \"string\"}},"
                           " \"additionalProperties\": false, \"required\": [\"a\"]}");
    json_t *instance = json_object();
    json_object_setn_new(instance, "a\0b", 3, json_integer(1));
    struct json_schema_errors errors;
    ck_assert_int_eq(json_schema_validate(schema, instance, &errors), 2);
    ck_assert_str_eq(errors.msg[0], "/: missing required property \"a\"");
    ck_assert_str_eq(errors.msg[1], "/a: additional property not allowed");
    json_decref(instance);
    json_decref(schema);
    /* and two objects that differ only past a NUL are not equal */
    json_t *items = json_array();
    for (int i = 0; i < 2; i++) {
        json_t *member = json_object();
        json_object_setn_new(member, i == 0 ? "k\0x" : "k\0y", 3, json_true());
        json_array_append_new(items, member);
    }
    schema = parse("{\"uniqueItems\": true}");
    ck_assert_int_eq(json_schema_validate(schema, items, NULL), 0);
    json_decref(items);
    json_decref(schema);
}
END_TEST

START_TEST(validate_depth_is_bounded)
{
    json_t *schema = parse("{}");
    json_t *ok = nest_arrays(JSON_SCHEMA_MAX_DEPTH);
    ck_assert_int_eq(json_schema_validate(schema, ok, NULL), 0);
    json_t *deep = nest_arrays(JSON_SCHEMA_MAX_DEPTH + 1);
    struct json_schema_errors errors;
    ck_assert_int_eq(json_schema_validate(schema, deep, &errors), 1);
    ck_assert_msg(strstr(errors.msg[0], "/0/0/0/") == errors.msg[0], "%s", errors.msg[0]);
    ck_assert_msg(strstr(errors.msg[0], ": nested deeper than 64 levels") != NULL, "%s",
                  errors.msg[0]);
    json_decref(schema);
    json_decref(ok);
    /* a schema nested deeper than the bound, never checked: still bounded */
    json_t *unchecked = json_true();
    for (int i = 0; i < 100; i++)
        unchecked = json_pack("{so}", "items", unchecked);
    json_t *items = nest_arrays(60);
    ck_assert_int_eq(json_schema_validate(unchecked, items, NULL), 0);
    json_decref(unchecked);
    json_decref(items);
    json_decref(deep);
}
END_TEST

START_TEST(validate_unchecked_schema_safely)
{
    struct json_schema_errors errors;
    json_t *instance = parse("{\"a\": \"x\", \"b\": [1, 1]}");
    const char *const schemas[] = {
        "{\"type\": 5, \"required\": \"a\", \"properties\": [], \"minLength\": -1}",
        "{\"properties\": {\"a\": {\"minLength\": \"2\", \"pattern\": 7}}, \"enum\": {}}",
        "{\"additionalProperties\": 3, \"items\": [true], \"multipleOf\": -1}",
        "{\"properties\": {\"b\": {\"uniqueItems\": 1, \"minItems\": 1.5}}, \"const\": null}",
        "{\"type\": [\"bogus\", 1], \"oneOf\": []}",
        "{\"$ref\": \"#\"}",
        "{\"anyOf\": [{\"$ref\": \"#\"}, {\"not\": {\"$ref\": \"#\"}}]}",
        "{\"$ref\": \"#/nowhere\", \"patternProperties\": {\"(?=x)\": true}, \"format\": 3}",
        "[1]",
    };
    for (size_t k = 0; k < sizeof(schemas) / sizeof(schemas[0]); k++) {
        json_t *schema = parse(schemas[k]);
        int count = json_schema_validate(schema, instance, &errors);
        ck_assert_int_ge(count, 0);
        ck_assert_int_eq(count, errors.count);
        json_decref(schema);
    }
    json_t *bad = parse("{\"properties\": {\"a\": {\"pattern\": \"(?=x)\"}}}");
    ck_assert_int_eq(json_schema_validate(bad, instance, &errors), 1);
    ck_assert_msg(strstr(errors.msg[0], "/a: cannot be checked: the pattern has a lookahead") ==
                      errors.msg[0],
                  "%s", errors.msg[0]);
    json_decref(bad);
    ck_assert_int_eq(json_schema_validate(NULL, instance, &errors), 1);
    ck_assert_str_eq(errors.msg[0], "/: no schema");
    ck_assert_int_eq(json_schema_validate(instance, NULL, &errors), 1);
    json_decref(instance);
}
END_TEST

/* ---------------------------------------------------------------- exact numbers */

START_TEST(exact_type_integer)
{
    ck_assert(exact("{\"type\": \"integer\"}", "1.0"));
    ck_assert(exact("{\"type\": \"integer\"}", "1e400"));
    ck_assert(exact("{\"type\": \"integer\"}", "-1.5e400"));
    ck_assert(exact("{\"type\": \"integer\"}", "123456789012345678901234567890"));
    ck_assert(exact("{\"type\": \"integer\"}", "-0"));
    ck_assert(exact("{\"type\": \"integer\"}", "12.50e1"));
    /* a double would round these to integers */
    ck_assert(!exact("{\"type\": \"integer\"}", "1.0000000000000000001"));
    ck_assert(!exact("{\"type\": \"integer\"}", "12345678901234567.5"));
    ck_assert(!exact("{\"type\": \"integer\"}", "1e-400"));
    struct json_schema_errors errors;
    ck_assert_int_eq(validate_exact("{\"type\": \"string\"}", "1e400", &errors), 1);
    ck_assert_str_eq(errors.msg[0], "/: must be string, got integer");
}
END_TEST

START_TEST(exact_bounds)
{
    ck_assert(!exact("{\"maximum\": 12345678901234567.5}", "12345678901234567.6"));
    ck_assert(exact("{\"maximum\": 12345678901234567.5}", "12345678901234567.5"));
    ck_assert(!exact("{\"exclusiveMaximum\": 12345678901234567.5}", "12345678901234567.5"));
    ck_assert(exact("{\"minimum\": 0.1}", "0.1"));
    ck_assert(!exact("{\"minimum\": 0.10000000000000001}", "0.1"));
    ck_assert(exact("{\"maximum\": 123456789012345678901234567890}",
                    "123456789012345678901234567889.999"));
    ck_assert(
        !exact("{\"maximum\": 123456789012345678901234567890}", "123456789012345678901234567891"));
    ck_assert(!exact("{\"maximum\": 1e400}", "1.0000000000000000000001e400"));
    ck_assert(exact("{\"maximum\": 1e400}", "9999e396"));
    ck_assert(exact("{\"minimum\": -1e400}", "-1e400"));
    ck_assert(!exact("{\"minimum\": -1e400}", "-1.5e400"));
    ck_assert(exact("{\"exclusiveMinimum\": -1e-400}", "-0"));
    ck_assert(!exact("{\"exclusiveMinimum\": 0}", "-0"));
    ck_assert(exact("{\"exclusiveMinimum\": 0}", "1e-400"));
    /* the bound in the message is the schema's text */
    struct json_schema_errors errors;
    ck_assert_int_eq(validate_exact("{\"properties\": {\"amount\": {\"maximum\": 19.99}}}",
                                    "{\"amount\": 19.991}", &errors),
                     1);
    ck_assert_str_eq(errors.msg[0], "/amount: must be <= 19.99");
}
END_TEST

START_TEST(exact_multiple_of)
{
    ck_assert(exact("{\"multipleOf\": 0.01}", "19.99"));
    ck_assert(!exact("{\"multipleOf\": 0.01}", "19.991"));
    ck_assert(!exact("{\"multipleOf\": 0.01}", "19.999999999999999"));
    ck_assert(exact("{\"multipleOf\": 0.0001}", "0.0075"));
    ck_assert(!exact("{\"multipleOf\": 0.123456789}", "1e308"));
    ck_assert(exact("{\"multipleOf\": 1e-8}", "12391239123"));
    ck_assert(exact("{\"multipleOf\": 0.5}", "1e308"));
    ck_assert(exact("{\"multipleOf\": 0.5}", "1e400"));
    ck_assert(exact("{\"multipleOf\": 3}", "123456789012345678901234567890"));
    ck_assert(exact("{\"multipleOf\": 7}", "123456789012345678901234567890"));
    ck_assert(!exact("{\"multipleOf\": 11}", "123456789012345678901234567890"));
    ck_assert(exact("{\"multipleOf\": 1e-400}", "0.3"));
    ck_assert(!exact("{\"multipleOf\": 1e400}", "1e399"));
    ck_assert(exact("{\"multipleOf\": 1e399}", "1e400"));
    ck_assert(exact("{\"multipleOf\": 0.01}", "-0"));
    /* the ulp tolerance is gone: 0.3 is not a multiple of 0.1 plus a hair */
    ck_assert(!exact("{\"multipleOf\": 0.1}", "0.30000000000000004"));
    ck_assert(exact("{\"multipleOf\": 0.1}", "0.3"));
    /* 10^16383 against 10^-16383: bounded work, no 10^32766 written out */
    ck_assert(exact("{\"multipleOf\": 1e-16383}", "1e131071"));
    ck_assert(!exact("{\"multipleOf\": 3e-16383}", "1e131071"));
    struct json_schema_errors errors;
    ck_assert_int_eq(validate_exact("{\"properties\": {\"amount\": {\"multipleOf\": 0.01}}}",
                                    "{\"amount\": 19.991}", &errors),
                     1);
    ck_assert_str_eq(errors.msg[0], "/amount: must be a multiple of 0.01");
    /* the check: > 0 exactly */
    char err[256];
    const char *tiny_text = "{\"multipleOf\": 1e-400}";
    struct json_text *tiny = json_text_parse(tiny_text, strlen(tiny_text), 0, NULL, 0, NULL);
    ck_assert(json_schema_check_doc(tiny->root, tiny, err, sizeof(err)));
    json_text_decref(tiny);
}
END_TEST

START_TEST(exact_enum_const_unique)
{
    ck_assert(!exact("{\"const\": 9007199254740993}", "9007199254740992"));
    ck_assert(exact("{\"const\": 9007199254740993}", "9007199254740993.0"));
    ck_assert(
        !exact("{\"const\": 123456789012345678901234567890}", "123456789012345678901234567891"));
    ck_assert(
        exact("{\"const\": 123456789012345678901234567890}", "1.2345678901234567890123456789e29"));
    ck_assert(!exact("{\"const\": 0.1}", "0.10000000000000001"));
    ck_assert(exact("{\"const\": 0.1}", "1e-1"));
    ck_assert(exact("{\"const\": 1e400}", "10e399"));
    ck_assert(exact("{\"enum\": [19.99, 5]}", "19.990"));
    ck_assert(!exact("{\"enum\": [19.99, 5]}", "19.989999999999998"));
    ck_assert(exact("{\"enum\": [{\"a\": [0.1]}]}", "{\"a\": [0.100]}"));
    ck_assert(!exact("{\"enum\": [{\"a\": [0.1]}]}", "{\"a\": [0.1000000000000000001]}"));
    ck_assert(exact("{\"uniqueItems\": true}", "[0.1, 0.10000000000000001, 1e400, 1e401]"));
    ck_assert(!exact("{\"uniqueItems\": true}", "[1e400, 10e399]"));
    ck_assert(!exact("{\"uniqueItems\": true}", "[[1.0], [1]]"));
    ck_assert(exact("{\"uniqueItems\": true}",
                    "[123456789012345678901234567890, 123456789012345678901234567891]"));
}
END_TEST

/* ---------------------------------------------------------------- real-world schemas (issue 36) */

/* What FastMCP (pydantic) writes for
 *   class Address(BaseModel): city: str; zip: str | None = None
 *   def book(when: datetime, who: Optional[str] = None, address: Address, tags: list[str] = [])
 */
static const char *const fastmcp_schema =
    "{\"$defs\": {\"Address\": {\"properties\": {\"city\": {\"title\": \"City\", \"type\": "
    "\"string\"},"
    "   \"zip\": {\"anyOf\": [{\"type\": \"string\"}, {\"type\": \"null\"}], \"default\": null,"
    "             \"title\": \"Zip\"}},"
    "   \"required\": [\"city\"], \"title\": \"Address\", \"type\": \"object\"}},"
    " \"properties\": {\"when\": {\"format\": \"date-time\", \"title\": \"When\", \"type\": "
    "\"string\"},"
    "   \"who\": {\"anyOf\": [{\"type\": \"string\"}, {\"type\": \"null\"}], \"default\": null},"
    "   \"address\": {\"$ref\": \"#/$defs/Address\"},"
    "   \"tags\": {\"items\": {\"type\": \"string\"}, \"type\": \"array\", \"default\": []}},"
    " \"required\": [\"when\", \"address\"], \"title\": \"bookArguments\", \"type\": \"object\"}";

/* What zod-to-json-schema writes for
 *   z.object({ id: z.string().uuid(), email: z.string().email(),
 *              kind: z.union([z.literal("a"), z.number().int()]), day: z.string().date()
 * }).strict()
 */
static const char *const zod_schema =
    "{\"type\": \"object\", \"properties\": {\"id\": {\"type\": \"string\", \"format\": \"uuid\"},"
    "   \"email\": {\"type\": \"string\", \"format\": \"email\"},"
    "   \"kind\": {\"anyOf\": [{\"type\": \"string\", \"const\": \"a\"}, {\"type\": \"integer\"}]},"
    "   \"day\": {\"type\": \"string\", \"format\": \"date\"}},"
    " \"required\": [\"id\", \"email\", \"kind\"], \"additionalProperties\": false,"
    " \"$schema\": \"http://json-schema.org/draft-07/schema#\"}";

START_TEST(real_world_schemas_are_accepted)
{
    assert_accepted(fastmcp_schema);
    assert_accepted(zod_schema);
    assert_accepted("{\"$schema\": \"http://json-schema.org/draft-07/schema#\","
                    " \"definitions\": {\"a\": {\"type\": \"string\"}},"
                    " \"properties\": {\"x\": {\"$ref\": \"#/definitions/a\"}}}");
    /* recursion through properties consumes the value: fine */
    assert_accepted(
        "{\"$defs\": {\"node\": {\"type\": \"object\", \"properties\": {"
        " \"children\": {\"type\": \"array\", \"items\": {\"$ref\": \"#/$defs/node\"}}}}},"
        " \"$ref\": \"#/$defs/node\"}");
    assert_accepted("{\"properties\": {\"a\": {\"$ref\": \"#\"}}, \"prefixItems\": [true],"
                    " \"patternProperties\": {\"^x-\": {\"type\": \"string\"}},"
                    " \"propertyNames\": {\"maxLength\": 3}, \"minProperties\": 1,"
                    " \"maxProperties\": 2.0, \"dependentRequired\": {\"a\": [\"b\"]},"
                    " \"not\": {\"required\": [\"z\"]}, \"oneOf\": [true], \"allOf\": [true],"
                    " \"format\": \"hostname\"}");
}
END_TEST

START_TEST(ref_loops_and_bad_refs_are_refused)
{
    assert_refused("{\"$ref\": \"#\"}",
                   "\"$ref\" loops back to this schema without descending "
                   "into the value (through $ref, allOf, anyOf, oneOf or not) at /");
    assert_refused("{\"$defs\": {\"a\": {\"anyOf\": [{\"$ref\": \"#/$defs/b\"}]},"
                   " \"b\": {\"not\": {\"$ref\": \"#/$defs/a\"}}}}",
                   "\"$ref\" loops back to this schema without descending into the value "
                   "(through $ref, allOf, anyOf, oneOf or not) at /$defs/a/anyOf/0");
    assert_refused("{\"$ref\": \"https://example.com/s.json\"}",
                   "\"$ref\" is not local: only \"#\" and \"#/...\" pointers into this schema are "
                   "supported at /");
    assert_refused(
        "{\"$ref\": \"#anchor\"}",
        "\"$ref\" names an anchor: only \"#\" and \"#/...\" pointers are supported at /");
    assert_refused("{\"$ref\": \"#/$defs/missing\", \"$defs\": {}}",
                   "\"$ref\" points to nothing in this schema at /");
    assert_refused("{\"$ref\": \"#/enum/0\", \"enum\": [{}]}",
                   "\"$ref\" points into \"enum\", which holds no schema at /");
    assert_refused("{\"$ref\": \"#/$defs\", \"$defs\": {}}",
                   "\"$ref\" does not point to a schema at /");
    assert_refused("{\"$schema\": \"http://json-schema.org/draft-07/schema#\","
                   " \"properties\": {\"a\": {\"$ref\": \"#/definitions/x\", \"maxLength\": 2}},"
                   " \"definitions\": {\"x\": true}}",
                   "\"maxLength\" beside \"$ref\" is ignored by the $schema named (draft-07 and "
                   "older); use allOf, or 2020-12 at /properties/a");
    assert_refused(
        "{\"$schema\": \"http://json-schema.org/draft-07/schema#\", \"prefixItems\": [true]}",
        "\"prefixItems\" is a 2020-12 keyword; the $schema named ignores it (use "
        "2020-12) at /");
    assert_refused("{\"anyOf\": []}", "\"anyOf\" must be a non-empty array of schemas at /");
    assert_refused("{\"patternProperties\": {\"(?=a)\": true}}",
                   "the pattern of \"patternProperties\" has a lookahead (?=: not supported by "
                   "POSIX ERE at /patternProperties/(?=a)");
    assert_refused("{\"dependentRequired\": {\"a\": [1]}}",
                   "\"dependentRequired\" must map each property to an array of strings without "
                   "repeats (not \"a\") at /");
    assert_refused("{\"format\": 1}", "\"format\" must be a string at /");
}
END_TEST

START_TEST(real_world_messages)
{
    const char *ok = "{\"when\": \"2026-12-07T10:00:00Z\", \"who\": null,"
                     " \"address\": {\"city\": \"Oslo\", \"zip\": null}}";
    struct json_schema_errors errors;
    ck_assert_int_eq(validate_text(fastmcp_schema, ok, &errors), 0);
    assert_one_violation(
        fastmcp_schema,
        "{\"when\": \"2026-12-07T10:00:00Z\", \"who\": 5, \"address\": {\"city\": \"Oslo\"}}",
        "/who: must match at least one schema in \"anyOf\" (0: must be string, got "
        "integer; 1: must be null, got integer)");
    assert_one_violation(fastmcp_schema,
                         "{\"when\": \"2026-12-07T10:00:00Z\", \"address\": {\"zip\": \"0150\"}}",
                         "/address: missing required property \"city\"");
    assert_one_violation(fastmcp_schema,
                         "{\"when\": \"tomorrow\", \"address\": {\"city\": \"Oslo\"}}",
                         "/when: must be a date-time (RFC 3339, as 2026-12-07T10:00:00Z)");
    assert_one_violation(fastmcp_schema,
                         "{\"when\": \"2026-02-30T10:00:00Z\", \"address\": {\"city\": \"Oslo\"}}",
                         "/when: must be a date-time (RFC 3339, as 2026-12-07T10:00:00Z)");
    const char *zok =
        "{\"id\": \"123e4567-e89b-12d3-a456-426614174000\", \"email\": \"a@b.example\","
        " \"kind\": 3, \"day\": \"2024-02-29\"}";
    ck_assert_int_eq(validate_text(zod_schema, zok, &errors), 0);
    ck_assert_int_eq(validate_text(zod_schema,
                                   "{\"id\": \"123\", \"email\": \"a@@b\", \"kind\": \"b\","
                                   " \"day\": \"2023-02-29\", \"x\": 1}",
                                   &errors),
                     5);
    ck_assert_str_eq(errors.msg[0],
                     "/id: must be a UUID (as 123e4567-e89b-12d3-a456-426614174000)");
    ck_assert_str_eq(errors.msg[1], "/email: must be an e-mail address (as name@example.com)");
    ck_assert_str_eq(errors.msg[2],
                     "/kind: must match at least one schema in \"anyOf\" (0: must be "
                     "\"a\"; 1: must be integer, got string)");
    ck_assert_str_eq(errors.msg[3], "/day: must be a date (RFC 3339 full-date, as 2026-12-07)");
    ck_assert_str_eq(errors.msg[4], "/x: additional property not allowed");
}
END_TEST

START_TEST(applicator_messages)
{
    assert_one_violation("{\"oneOf\": [{\"type\": \"integer\"}, {\"minimum\": 2}]}", "3",
                         "/: must match exactly one schema in \"oneOf\", but matches 0 and 1");
    assert_one_violation("{\"oneOf\": [{\"type\": \"integer\"}, {\"minimum\": 2}]}", "1.5",
                         "/: must match exactly one schema in \"oneOf\" (0: must be integer, got "
                         "number; 1: must be >= 2)");
    assert_one_violation("{\"not\": {\"type\": \"string\"}}", "\"x\"",
                         "/: must not match the schema in \"not\"");
    assert_one_violation("{\"allOf\": [{\"minLength\": 2}, {\"maxLength\": 3}]}", "\"abcd\"",
                         "/: must be at most 3 characters long");
    assert_one_violation("{\"prefixItems\": [{\"type\": \"string\"}], \"items\": false}",
                         "[\"a\", 2]", "/: must have at most 1 items");
    assert_one_violation(
        "{\"prefixItems\": [{\"type\": \"string\"}], \"items\": {\"type\": \"integer\"}}", "[1, 2]",
        "/0: must be string, got integer");
    assert_one_violation("{\"patternProperties\": {\"^n_\": {\"type\": \"number\"}},"
                         " \"additionalProperties\": false}",
                         "{\"n_a\": 1, \"b\": 2}", "/b: additional property not allowed");
    assert_one_violation("{\"patternProperties\": {\"^n_\": {\"type\": \"number\"}}}",
                         "{\"n_a\": \"x\"}", "/n_a: must be number, got string");
    assert_one_violation(
        "{\"propertyNames\": {\"pattern\": \"^[a-z]+$\"}}", "{\"Ab\": 1}",
        "/: property name \"Ab\" is not allowed: must match the pattern \"^[a-z]+$\"");
    assert_one_violation("{\"minProperties\": 2}", "{\"a\": 1}",
                         "/: must have at least 2 properties");
    assert_one_violation("{\"maxProperties\": 0}", "{\"a\": 1}",
                         "/: must have at most 0 properties");
    assert_one_violation("{\"dependentRequired\": {\"card\": [\"cvc\"]}}", "{\"card\": 1}",
                         "/: missing property \"cvc\", required when \"card\" is present");
    assert_one_violation("{\"$defs\": {\"pos\": {\"minimum\": 0}},"
                         " \"properties\": {\"n\": {\"$ref\": \"#/$defs/pos\"}}}",
                         "{\"n\": -1}", "/n: must be >= 0");
}
END_TEST

START_TEST(applicators_are_bounded)
{
    /* anyOf of anyOfs through $ref, 2^40 ways to try without a loop: stopped */
    char schema[8192];
    size_t len = (size_t)snprintf(schema, sizeof(schema), "{\"$defs\": {");
    for (int k = 0; k < 40; k++)
        len += (size_t)snprintf(schema + len, sizeof(schema) - len,
                                "\"d%d\": {\"anyOf\": [{\"$ref\": \"#/$defs/d%d\"}, {\"$ref\": "
                                "\"#/$defs/d%d\"}]},",
                                k, k + 1, k + 1);
    snprintf(schema + len, sizeof(schema) - len,
             "\"d40\": {\"type\": \"string\"}}, \"$ref\": \"#/$defs/d0\"}");
    struct json_schema_errors errors;
    assert_accepted(schema);
    ck_assert_int_eq(validate_text(schema, "\"x\"", &errors), 0); /* the first way fits */
    ck_assert_int_ge(validate_text(schema, "1", &errors), 1);
    ck_assert_str_eq(errors.msg[errors.kept - 1],
                     "/: cannot be checked: the schema applies more than 100000 schemas, or refers "
                     "more than 256 levels deep, for this value");
    /* a loop the check would refuse, validated anyway: stopped, never a crash */
    json_t *loop = json_loads("{\"$ref\": \"#\"}", 0, NULL);
    json_t *one = json_integer(1);
    ck_assert_int_eq(json_schema_validate(loop, one, &errors), 1);
    json_decref(loop);
    json_decref(one);
}
END_TEST

START_TEST(formats_say_what_they_accept)
{
    const char *dt = "{\"format\": \"date-time\"}";
    ck_assert(validate_text(dt, "\"1998-12-31T23:59:60Z\"", NULL) == 0);
    ck_assert(validate_text(dt, "\"1998-12-31T15:59:60.5-08:00\"", NULL) == 0);
    ck_assert(validate_text(dt, "\"1998-12-31T23:58:60Z\"", NULL) == 1);
    ck_assert(validate_text(dt, "\"2026-12-07 10:00:00Z\"", NULL) == 1);
    ck_assert(validate_text(dt, "\"2026-12-07T10:00:00\"", NULL) == 1);
    ck_assert(validate_text(dt, "5", NULL) == 0); /* formats judge strings only */
    const char *email = "{\"format\": \"email\"}";
    ck_assert(validate_text(email, "\"\\\"a b\\\"@[IPv6:::1]\"", NULL) == 0);
    ck_assert(validate_text(email, "\"a..b@example.com\"", NULL) == 1);
    ck_assert(validate_text(email, "\"a@-example.com\"", NULL) == 1);
    ck_assert(validate_text("{\"format\": \"uuid\"}", "\"123E4567-e89b-12d3-a456-42661417400G\"",
                            NULL) == 1);
    ck_assert(validate_text("{\"format\": \"date\"}", "\"2000-02-29\"", NULL) == 0);
    ck_assert(validate_text("{\"format\": \"date\"}", "\"1900-02-29\"", NULL) == 1);
    ck_assert(validate_text("{\"format\": \"hostname\"}", "\"not a host\"", NULL) == 0);
}
END_TEST

Suite *json_schema_suite(void)
{
    Suite *s = suite_create("json_schema");

    TCase *tc = tcase_create("check");
    tcase_add_test(tc, check_accepts_the_subset);
    tcase_add_test(tc, check_refuses_unsupported_keywords_with_their_path);
    tcase_add_test(tc, check_refuses_malformed_values);
    tcase_add_test(tc, check_root_only_annotations);
    tcase_add_test(tc, check_patterns);
    tcase_add_test(tc, check_depth_is_bounded);
    tcase_add_test(tc, check_messages_fit_and_stay_utf8);
    suite_add_tcase(s, tc);

    tc = tcase_create("real_world");
    tcase_add_test(tc, real_world_schemas_are_accepted);
    tcase_add_test(tc, ref_loops_and_bad_refs_are_refused);
    tcase_add_test(tc, real_world_messages);
    tcase_add_test(tc, applicator_messages);
    tcase_add_test(tc, applicators_are_bounded);
    tcase_add_test(tc, formats_say_what_they_accept);
    suite_add_tcase(s, tc);

    tc = tcase_create("messages");
    tcase_add_test(tc, validate_accepts_a_good_call);
    tcase_add_test(tc, validate_names_paths);
    tcase_add_test(tc, validate_counts_every_violation_and_keeps_sixteen);
    tcase_add_test(tc, validate_several_keywords_at_one_place);
    tcase_add_test(tc, validate_messages_fit_and_stay_utf8);
    suite_add_tcase(s, tc);

    tc = tcase_create("meaning");
    tcase_add_test(tc, validate_numbers_by_value);
    tcase_add_test(tc, validate_multiple_of);
    tcase_add_test(tc, validate_enum_const_deeply);
    tcase_add_test(tc, validate_unique_items);
    tcase_add_test(tc, validate_lengths_in_code_points);
    tcase_add_test(tc, validate_patterns);
    tcase_add_test(tc, validate_many_patterns_in_one_call);
    tcase_add_test(tc, validate_items_and_properties);
    tcase_add_test(tc, validate_keys_with_nul);
    tcase_add_test(tc, validate_depth_is_bounded);
    tcase_add_test(tc, validate_unchecked_schema_safely);
    suite_add_tcase(s, tc);

    tc = tcase_create("exact numbers");
    tcase_add_test(tc, exact_type_integer);
    tcase_add_test(tc, exact_bounds);
    tcase_add_test(tc, exact_multiple_of);
    tcase_add_test(tc, exact_enum_const_unique);
    suite_add_tcase(s, tc);
    return s;
}
