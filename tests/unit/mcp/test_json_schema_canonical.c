/*
 * test_json_schema_canonical.c — relay/mcp/json_schema_canonical.c: the
 * text a key from the arguments is derived from (key_source 'arguments',
 * migration 0040). Equal for the same arguments as JSON Schema compares
 * them (key order, number spelling), different for any other; without the
 * properties the schema marks "x-outbox-volatile" (through properties,
 * $ref, allOf/anyOf, additionalProperties, nested objects and array items).
 * And the sentence the description gets, with the argument it names.
 */
#include "../unit.h"

#include "lib/json_text.h"
#include "mcp/json_schema.h"
#include "mcp/mcp_protocol.h"

#include <stdlib.h>
#include <string.h>

static struct json_text *parse(const char *text)
{
    struct json_text *doc =
        json_text_parse(text, strlen(text), JSON_TEXT_DECODE_ANY, NULL, 0, NULL);
    ck_assert_msg(doc != NULL, "cannot parse %s", text);
    return doc;
}

/* The canonical text of instance under schema (malloc'd). */
static char *canon(const char *schema_text, const char *instance_text)
{
    struct json_text *schema = parse(schema_text), *instance = parse(instance_text);
    size_t len = 0;
    char *out = json_schema_canonical(schema->root, schema, instance->root, instance, &len);
    ck_assert_msg(out != NULL, "no canonical text for %s", instance_text);
    ck_assert_uint_eq(strlen(out), len);
    json_text_decref(schema);
    json_text_decref(instance);
    return out;
}

static void assert_canon(const char *schema, const char *instance, const char *expected)
{
    char *out = canon(schema, instance);
    ck_assert_str_eq(out, expected);
    free(out);
}

static const char *plain = "{\"type\": \"object\"}";

START_TEST(test_order_and_numbers)
{
    /* key order, whitespace and number spelling do not count */
    assert_canon(plain, "{\"b\": 1.0, \"a\": [1e2, 19.99, -0, 0.5e1]}",
                 "{\"a\":[1e2,1999e-2,0,5],\"b\":1}");
    assert_canon(plain, "{\"a\":[100,19.990,0,5],\"b\":1E0}", "{\"a\":[1e2,1999e-2,0,5],\"b\":1}");
    /* exact: past a double's precision, and past 2^63 */
    assert_canon(plain, "{\"n\": 9007199254740993, \"m\": 0.10000000000000001}",
                 "{\"m\":10000000000000001e-17,\"n\":9007199254740993}");
    assert_canon(plain, "{\"n\": 123456789012345678901234567890}",
                 "{\"n\":12345678901234567890123456789e1}");
    /* strings by their bytes, escaped the one way; types are kept apart */
    assert_canon(plain, "{\"s\": \"a\\\"b\\\\c\\n\\u00e9\", \"t\": \"1\", \"u\": 1, \"v\": null}",
                 "{\"s\":\"a\\\"b\\\\c\\u000a\xc3\xa9\",\"t\":\"1\",\"u\":1,\"v\":null}");
    assert_canon(plain, "{\"z\": {\"y\": true, \"x\": false}, \"\": []}",
                 "{\"\":[],\"z\":{\"x\":false,\"y\":true}}");
}
END_TEST

START_TEST(test_volatile)
{
    const char *schema =
        "{\"type\": \"object\", \"properties\": {"
        "\"amount\": {\"type\": \"number\"},"
        "\"reason\": {\"type\": \"string\", \"x-outbox-volatile\": true},"
        "\"when\": {\"$ref\": \"#/$defs/ts\"},"
        "\"kept\": {\"x-outbox-volatile\": false},"
        "\"line\": {\"type\": \"object\", \"properties\": {\"note\": "
        "{\"x-outbox-volatile\": true}}},"
        "\"items\": {\"type\": \"array\", \"items\": {\"type\": \"object\", "
        "\"properties\": {\"at\": {\"x-outbox-volatile\": true}}}}},"
        "\"$defs\": {\"ts\": {\"type\": \"string\", \"x-outbox-volatile\": true}}}";
    char *a = canon(schema, "{\"amount\": 5, \"reason\": \"late\", \"when\": \"t1\", \"kept\": 1,"
                            "\"line\": {\"sku\": \"x\", \"note\": \"n1\"},"
                            "\"items\": [{\"id\": 1, \"at\": \"t1\"}]}");
    char *b = canon(schema, "{\"items\": [{\"at\": \"t9\", \"id\": 1}], \"kept\": 1.0,"
                            "\"line\": {\"note\": \"reworded\", \"sku\": \"x\"},"
                            "\"when\": \"t2\", \"reason\": \"very late\", \"amount\": 5.00}");
    ck_assert_str_eq(a,
                     "{\"amount\":5,\"items\":[{\"id\":1}],\"kept\":1,\"line\":{\"sku\":\"x\"}}");
    ck_assert_str_eq(a, b); /* volatile fields reworded: the same action */
    free(b);
    b = canon(schema, "{\"amount\": 6, \"reason\": \"late\", \"when\": \"t1\", \"kept\": 1,"
                      "\"line\": {\"sku\": \"x\", \"note\": \"n1\"}, \"items\": [{\"id\": 1}]}");
    ck_assert_str_ne(a, b); /* another amount: another action */
    free(b);
    /* a volatile property that is absent is the same as one present */
    b = canon(schema,
              "{\"amount\": 5, \"kept\": 1, \"line\": {\"sku\": \"x\"}, \"items\": [{\"id\": 1}]}");
    ck_assert_str_eq(a, b);
    free(b);
    free(a);
    /* through allOf / anyOf and additionalProperties */
    assert_canon("{\"type\": \"object\", \"allOf\": [{\"properties\": {\"ts\": "
                 "{\"x-outbox-volatile\": true}}}]}",
                 "{\"ts\": 1, \"a\": 2}", "{\"a\":2}");
    assert_canon("{\"type\": \"object\", \"anyOf\": [{\"properties\": {\"a\": {}}}, "
                 "{\"properties\": {\"b\": "
                 "{\"x-outbox-volatile\": true}}}]}",
                 "{\"a\": 1, \"b\": 2}", "{\"a\":1}");
    assert_canon("{\"type\": \"object\", \"properties\": {\"a\": {}}, \"additionalProperties\": "
                 "{\"x-outbox-volatile\": true}}",
                 "{\"a\": 1, \"b\": 2, \"c\": 3}", "{\"a\":1}");
    /* prefixItems, then items */
    assert_canon(
        "{\"type\": \"object\", \"properties\": {\"p\": {\"prefixItems\": [{\"properties\": "
        "{\"x\": {\"x-outbox-volatile\": true}}}], \"items\": {}}}}",
        "{\"p\": [{\"x\": 1, \"y\": 2}, {\"x\": 1}]}", "{\"p\":[{\"y\":2},{\"x\":1}]}");
    /* a schema that cannot be read: nothing is volatile */
    size_t len;
    struct json_text *instance = parse("{\"b\": 2, \"a\": 1}");
    char *out = json_schema_canonical(NULL, NULL, instance->root, instance, &len);
    ck_assert_str_eq(out, "{\"a\":1,\"b\":2}");
    free(out);
    json_text_decref(instance);
}
END_TEST

START_TEST(test_reference_and_sentence)
{
    struct json_text *s =
        parse("{\"type\": \"object\", \"properties\": {\"account\": {}, "
              "\"note_ref\": {\"x-outbox-volatile\": true}, \"payment_reference\": "
              "{\"type\": \"string\"}}}");
    ck_assert_str_eq(json_schema_reference_property(s->root), "payment_reference");
    json_text_decref(s);
    s = parse("{\"type\": \"object\", \"properties\": {\"account\": {}, \"amount\": {}}}");
    ck_assert_ptr_null(json_schema_reference_property(s->root));
    json_text_decref(s);

    char *t = mcp_arguments_key_sentence(600, "reference");
    ck_assert_str_eq(t, "Calling this tool again with the same arguments within 10 minutes of the "
                        "first call returns the first call's outcome and does not act again; to "
                        "make a second, identical action on purpose, call it with a new "
                        "\"reference\".");
    free(t);
    t = mcp_arguments_key_sentence(3600, NULL);
    ck_assert_str_eq(t,
                     "Calling this tool again with the same arguments within 1 hour of the first "
                     "call returns the first call's outcome and does not act again; a second, "
                     "identical action needs other arguments, or that time to have passed.");
    free(t);
    t = mcp_arguments_key_sentence(90, NULL);
    ck_assert_ptr_nonnull(strstr(t, "within 90 seconds of"));
    free(t);
    t = mcp_arguments_key_sentence(172800, NULL);
    ck_assert_ptr_nonnull(strstr(t, "within 2 days of"));
    free(t);
}
END_TEST

Suite *json_schema_canonical_suite(void)
{
    Suite *s = suite_create("json_schema_canonical");
    TCase *tc = tcase_create("canonical");
    tcase_add_test(tc, test_order_and_numbers);
    tcase_add_test(tc, test_volatile);
    tcase_add_test(tc, test_reference_and_sentence);
    suite_add_tcase(s, tc);
    return s;
}
