/*
 * json_schema_canonical.c — the canonical text of a tool call's arguments
 * without the properties its schema marks "x-outbox-volatile": true, from
 * which the front door derives the key of a tool whose key_source is
 * 'arguments' (mcp_server.c hashes it with SHA-256; migration 0040 keeps
 * one key per hash and window). Two calls get one key exactly when their
 * texts here are equal, so the text must be equal for the same arguments
 * and differ for any other.
 *
 * DESIGN
 *
 * The same arguments, as JSON Schema compares values: objects by their
 * members in any order, numbers by their exact value (1, 1.0 and 1e0 are
 * one number; 0.1 and 0.10000000000000001 are two), strings and keys by
 * their bytes (no Unicode normalisation), arrays in order. So the text
 * writes members sorted by the bytes of their keys, numbers as
 * js_num_canonical writes them ("1999e-2" for 19.99), strings JSON-escaped
 * the one way (\" \\ and \u00XX for control characters, every other byte
 * as it is), no whitespace. A number is read from its token (its document,
 * lib/json_text.h), never through a double.
 *
 * Which properties are volatile. Where a value sits, the schemas that may
 * apply to it are gathered: the schema itself, what its local $ref names,
 * and the members of its allOf, anyOf and oneOf (all of them: the walk does
 * not validate, so a property one alternative marks is left out whichever
 * alternative the value matches). A member of an object is left out when a
 * schema among those applying to it (its "properties" entry, else the
 * "additionalProperties" schema, gathered the same way) says
 * "x-outbox-volatile": true. The walk goes on into kept members (through
 * "properties" / "additionalProperties") and array items ("prefixItems",
 * then "items"); "patternProperties" is not followed (a volatile property
 * is named). Left out on purpose: array items marked volatile (an item is
 * data, not a timestamp beside it).
 *
 * Bounds: a value nested deeper than JSON_SCHEMA_MAX_DEPTH, more than
 * CANON_SET_MAX schemas applying at one place (more are ignored), or more
 * than CANON_STEPS_MAX schemas gathered in one walk: NULL, and the front
 * door refuses the call (the arguments were validated with the same
 * depth bound, so only a pathological schema gets there).
 */
#include "mcp/json_schema.h"

#include "lib/json_text.h"
#include "mcp/json_schema_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CANON_SET_MAX 32
#define CANON_STEPS_MAX 1000000
#define CANON_HOPS_MAX 64

struct canon {
    const json_t *root; /* the schema's root, for $ref */
    struct numctx nc;
    char *buf;
    size_t len, cap;
    long steps;
    bool failed;
};

struct schema_set {
    const json_t *s[CANON_SET_MAX];
    size_t n;
};

static void put(struct canon *c, const char *p, size_t n)
{
    if (c->failed)
        return;
    if (c->len + n + 1 > c->cap) {
        size_t cap = c->cap ? c->cap : 256;
        while (c->len + n + 1 > cap)
            cap *= 2;
        char *b = realloc(c->buf, cap);
        if (!b) {
            c->failed = true;
            return;
        }
        c->buf = b;
        c->cap = cap;
    }
    memcpy(c->buf + c->len, p, n);
    c->len += n;
    c->buf[c->len] = '\0';
}

static void put_str(struct canon *c, const char *s)
{
    put(c, s, strlen(s));
}

/* A string or a key, JSON-escaped the one way. */
static void put_quoted(struct canon *c, const char *s, size_t n)
{
    put(c, "\"", 1);
    size_t from = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch != '"' && ch != '\\')
            continue;
        put(c, s + from, i - from);
        char esc[8];
        if (ch == '"' || ch == '\\')
            snprintf(esc, sizeof(esc), "\\%c", ch);
        else
            snprintf(esc, sizeof(esc), "\\u%04x", ch);
        put_str(c, esc);
        from = i + 1;
    }
    put(c, s + from, n - from);
    put(c, "\"", 1);
}

/* Adds s and the schemas that apply where it applies ($ref, allOf, anyOf,
 * oneOf), once each. */
static void gather(struct canon *c, const json_t *s, struct schema_set *set, int hops)
{
    if (!json_is_object(s) || hops > CANON_HOPS_MAX)
        return;
    if (++c->steps > CANON_STEPS_MAX) {
        c->failed = true;
        return;
    }
    for (size_t i = 0; i < set->n; i++)
        if (set->s[i] == s)
            return;
    if (set->n == CANON_SET_MAX)
        return;
    set->s[set->n++] = s;
    const json_t *ref = json_object_get(s, "$ref");
    if (json_is_string(ref) && c->root) {
        char why[160];
        const json_t *to = js_ref_resolve(c->root, json_string_value(ref), why, sizeof(why));
        if (to)
            gather(c, to, set, hops + 1);
    }
    static const char *const lists[] = {"allOf", "anyOf", "oneOf"};
    for (size_t k = 0; k < sizeof(lists) / sizeof(lists[0]); k++) {
        const json_t *list = json_object_get(s, lists[k]);
        for (size_t i = 0; json_is_array(list) && i < json_array_size(list); i++)
            gather(c, json_array_get(list, i), set, hops + 1);
    }
}

static bool set_volatile(const struct schema_set *set)
{
    for (size_t i = 0; i < set->n; i++)
        if (json_is_true(json_object_get(set->s[i], "x-outbox-volatile")))
            return true;
    return false;
}

/* The schemas that apply to member key of an object where set applies. */
static void member_set(struct canon *c, const struct schema_set *set, const char *key,
                       size_t key_len, struct schema_set *out)
{
    out->n = 0;
    for (size_t i = 0; i < set->n; i++) {
        const json_t *props = json_object_get(set->s[i], "properties");
        const json_t *sub = json_is_object(props) ? json_object_getn(props, key, key_len) : NULL;
        if (sub == NULL)
            sub = json_object_get(set->s[i], "additionalProperties");
        gather(c, sub, out, 0);
    }
}

/* The schemas that apply to item index of an array where set applies. */
static void item_set(struct canon *c, const struct schema_set *set, size_t index,
                     struct schema_set *out)
{
    out->n = 0;
    for (size_t i = 0; i < set->n; i++) {
        const json_t *prefix = json_object_get(set->s[i], "prefixItems");
        const json_t *sub = json_is_array(prefix) && index < json_array_size(prefix)
                                ? json_array_get(prefix, index)
                                : json_object_get(set->s[i], "items");
        gather(c, sub, out, 0);
    }
}

struct member {
    const char *key;
    size_t len;
    const json_t *value;
};

static int member_cmp(const void *a, const void *b)
{
    const struct member *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int r = memcmp(x->key, y->key, n);
    if (r)
        return r;
    return (x->len > y->len) - (x->len < y->len);
}

static void canon_value(struct canon *c, const json_t *v, const struct schema_set *set, int depth)
{
    if (c->failed)
        return;
    if (depth > JSON_SCHEMA_MAX_DEPTH) {
        c->failed = true;
        return;
    }
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        size_t n = json_object_size(v), k = 0;
        struct member *members = n ? malloc(n * sizeof(*members)) : NULL;
        if (n && !members) {
            c->failed = true;
            return;
        }
        const char *key;
        size_t key_len;
        json_t *member;
        json_object_keylen_foreach((json_t *)v, key, key_len, member)
        {
            members[k++] = (struct member){key, key_len, member};
        }
        qsort(members, k, sizeof(*members), member_cmp);
        put(c, "{", 1);
        bool first = true;
        struct schema_set *sub = malloc(sizeof(*sub));
        if (!sub)
            c->failed = true;
        for (size_t i = 0; i < k && !c->failed; i++) {
            member_set(c, set, members[i].key, members[i].len, sub);
            if (set_volatile(sub))
                continue;
            if (!first)
                put(c, ",", 1);
            first = false;
            put_quoted(c, members[i].key, members[i].len);
            put(c, ":", 1);
            canon_value(c, members[i].value, sub, depth + 1);
        }
        put(c, "}", 1);
        free(sub);
        free(members);
        return;
    }
    case JSON_ARRAY: {
        struct schema_set *sub = malloc(sizeof(*sub));
        if (!sub) {
            c->failed = true;
            return;
        }
        put(c, "[", 1);
        for (size_t i = 0; i < json_array_size(v) && !c->failed; i++) {
            if (i)
                put(c, ",", 1);
            item_set(c, set, i, sub);
            canon_value(c, json_array_get(v, i), sub, depth + 1);
        }
        put(c, "]", 1);
        free(sub);
        return;
    }
    case JSON_STRING:
        put_quoted(c, json_string_value(v), json_string_length(v));
        return;
    case JSON_INTEGER:
    case JSON_REAL: {
        char *num = js_num_canonical(&c->nc, v);
        if (!num) {
            c->failed = true;
            return;
        }
        put_str(c, num);
        free(num);
        return;
    }
    case JSON_TRUE:
        put_str(c, "true");
        return;
    case JSON_FALSE:
        put_str(c, "false");
        return;
    default:
        put_str(c, "null");
        return;
    }
}

char *json_schema_canonical(const json_t *schema, const struct json_text *schema_doc,
                            const json_t *instance, const struct json_text *instance_doc,
                            size_t *len)
{
    struct canon c = {.root = schema, .nc = {.docs = {schema_doc, instance_doc}}};
    struct schema_set root = {.n = 0};
    gather(&c, schema, &root, 0);
    canon_value(&c, instance, &root, 0);
    if (c.failed || c.buf == NULL) {
        free(c.buf);
        return NULL;
    }
    *len = c.len;
    return c.buf;
}

static bool names_a_reference(const char *name)
{
    for (const char *p = name; p[0] && p[1] && p[2]; p++)
        if ((p[0] == 'r' || p[0] == 'R') && (p[1] == 'e' || p[1] == 'E') &&
            (p[2] == 'f' || p[2] == 'F'))
            return true;
    return false;
}

const char *json_schema_reference_property(const json_t *schema)
{
    struct canon c = {.root = schema};
    struct schema_set root = {.n = 0}, sub;
    gather(&c, schema, &root, 0);
    for (size_t i = 0; i < root.n; i++) {
        const json_t *props = json_object_get(root.s[i], "properties");
        const char *name;
        size_t name_len;
        json_t *p;
        if (!json_is_object(props))
            continue;
        json_object_keylen_foreach((json_t *)props, name, name_len, p)
        {
            if (strlen(name) != name_len || !names_a_reference(name))
                continue;
            member_set(&c, &root, name, name_len, &sub);
            if (!set_volatile(&sub))
                return name;
        }
    }
    return NULL;
}
