/*
 * json_schema_check.c — the check of a tool's input_schema when it is
 * registered (json_schema_check), and the resolution of local $ref that the
 * validation shares. Part of the subset of json_schema.h.
 *
 * DESIGN
 *
 * json_schema_check reads every keyword of every schema object and refuses
 * the first one outside the subset or malformed, naming it and its JSON
 * Pointer in the schema. Members are read in the order PostgreSQL's jsonb
 * keeps them (shorter keys first, then by bytes), whatever order the JSON
 * was written in, so that the SQL check of registration
 * (outbox.mcp_schema_problem, migrations/0038) meets a schema's faults in
 * the same order and names the same one (tests/mcp/schema_agreement.sh).
 *
 * References. A $ref is "#" or a JSON Pointer "#/..." into the same schema
 * that goes only through places where the check reads schemas, so what it
 * reaches was checked too; remote references and anchors are refused. A
 * reference that comes back to its own schema through $ref, allOf, anyOf,
 * oneOf and not alone (never descending into the value) would loop for
 * ever: it is refused, naming the $ref. Recursion through properties or
 * items is fine: each turn descends into the value, whose depth is bounded.
 * The walk that looks for a loop remembers at most REF_WALK_MAX schemas.
 *
 * Dialects. Under a draft-07 or draft-06 $schema a keyword beside $ref is
 * ignored by those drafts, prefixItems and dependentRequired are not
 * keywords there; under 2019-09 prefixItems is not: each is refused rather
 * than given another meaning.
 */
#include "mcp/json_schema.h"

#include "lib/json_text.h"
#include "lib/utf8.h"
#include "mcp/json_schema_internal.h"

#include <regex.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ keywords */

enum keyword {
    KW_TYPE,
    KW_PROPERTIES,
    KW_REQUIRED,
    KW_ADDITIONAL_PROPERTIES,
    KW_ENUM,
    KW_CONST,
    KW_BOUND, /* minimum, maximum, exclusiveMinimum, exclusiveMaximum */
    KW_MULTIPLE_OF,
    KW_COUNT, /* minLength, maxLength, minItems, maxItems */
    KW_PATTERN,
    KW_ITEMS,
    KW_UNIQUE_ITEMS,
    KW_ROOT_STRING, /* $schema, $id */
    KW_TEXT,        /* title, description, $comment */
    KW_FLAG,        /* deprecated, readOnly, writeOnly, x-outbox-volatile */
    KW_ANY,         /* default */
    KW_EXAMPLES,
    KW_SCHEMA_LIST, /* allOf, anyOf, oneOf, prefixItems */
    KW_SCHEMA,      /* not, propertyNames */
    KW_DEFS,        /* $defs, definitions */
    KW_PATTERN_PROPERTIES,
    KW_REF,
    KW_FORMAT,
    KW_DEPENDENT_REQUIRED,
};

static const struct {
    const char *name;
    enum keyword kw;
} keywords[] = {
    {"type", KW_TYPE},
    {"properties", KW_PROPERTIES},
    {"required", KW_REQUIRED},
    {"additionalProperties", KW_ADDITIONAL_PROPERTIES},
    {"enum", KW_ENUM},
    {"const", KW_CONST},
    {"minimum", KW_BOUND},
    {"maximum", KW_BOUND},
    {"exclusiveMinimum", KW_BOUND},
    {"exclusiveMaximum", KW_BOUND},
    {"multipleOf", KW_MULTIPLE_OF},
    {"minLength", KW_COUNT},
    {"maxLength", KW_COUNT},
    {"minItems", KW_COUNT},
    {"maxItems", KW_COUNT},
    {"pattern", KW_PATTERN},
    {"items", KW_ITEMS},
    {"uniqueItems", KW_UNIQUE_ITEMS},
    {"$schema", KW_ROOT_STRING},
    {"$id", KW_ROOT_STRING},
    {"title", KW_TEXT},
    {"description", KW_TEXT},
    {"$comment", KW_TEXT},
    {"deprecated", KW_FLAG},
    {"readOnly", KW_FLAG},
    {"writeOnly", KW_FLAG},
    {"x-outbox-volatile", KW_FLAG}, /* json_schema_canonical.c: left out of a key */
    {"default", KW_ANY},
    {"examples", KW_EXAMPLES},
    {"allOf", KW_SCHEMA_LIST},
    {"anyOf", KW_SCHEMA_LIST},
    {"oneOf", KW_SCHEMA_LIST},
    {"prefixItems", KW_SCHEMA_LIST},
    {"not", KW_SCHEMA},
    {"propertyNames", KW_SCHEMA},
    {"$defs", KW_DEFS},
    {"definitions", KW_DEFS},
    {"patternProperties", KW_PATTERN_PROPERTIES},
    {"$ref", KW_REF},
    {"format", KW_FORMAT},
    {"minProperties", KW_COUNT},
    {"maxProperties", KW_COUNT},
    {"dependentRequired", KW_DEPENDENT_REQUIRED},
};

static const char *const type_names[] = {"null",   "boolean", "object", "array",
                                         "number", "integer", "string"};

static bool is_type_name(const json_t *v)
{
    if (!json_is_string(v))
        return false;
    for (size_t k = 0; k < sizeof(type_names) / sizeof(type_names[0]); k++)
        if (strcmp(json_string_value(v), type_names[k]) == 0)
            return true;
    return false;
}

/* An array of unique strings; with names, of type names. */
static bool is_string_set(const json_t *v, bool type_names_only)
{
    if (!json_is_array(v))
        return false;
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *item = json_array_get(v, i);
        if (!json_is_string(item) || (type_names_only && !is_type_name(item)))
            return false;
        for (size_t k = 0; k < i; k++)
            if (js_json_same(NULL, item, json_array_get(v, k), 0) == 1) /* strings */
                return false;
    }
    return true;
}

/* The dialects in which the subset's keywords mean what json_schema.h
 * says: a custom meta-schema may turn assertions off (a vocabulary). */
static bool is_known_dialect(const char *uri)
{
    static const char *const dialects[] = {
        "json-schema.org/draft/2020-12/schema",
        "json-schema.org/draft/2019-09/schema",
        "json-schema.org/draft-07/schema",
        "json-schema.org/draft-06/schema",
    };
    if (strncmp(uri, "https://", 8) == 0)
        uri += 8;
    else if (strncmp(uri, "http://", 7) == 0)
        uri += 7;
    else
        return false;
    size_t len = strlen(uri);
    if (len > 0 && uri[len - 1] == '#')
        len--;
    for (size_t k = 0; k < sizeof(dialects) / sizeof(dialects[0]); k++)
        if (strlen(dialects[k]) == len && strncmp(uri, dialects[k], len) == 0)
            return true;
    return false;
}

/* ------------------------------------------------------------ local references */

/* One segment of a "#/..." reference: percent-decoded (a URI fragment),
 * then JSON Pointer-unescaped (~1 is /, ~0 is ~). False when malformed or
 * longer than out. */
static bool ref_segment(const char *s, size_t n, char *out, size_t outlen)
{
    char dec[256];
    size_t d = 0;
    for (size_t i = 0; i < n; i++) {
        if (d + 1 >= sizeof(dec))
            return false;
        if (s[i] == '%') {
            if (i + 2 >= n)
                return false;
            int hi = hex_digit_value((unsigned char)s[i + 1]);
            int lo = hex_digit_value((unsigned char)s[i + 2]);
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
                return false;
            dec[d++] = (char)(hi * 16 + lo);
            i += 2;
        } else {
            dec[d++] = s[i];
        }
    }
    size_t o = 0;
    for (size_t i = 0; i < d; i++) {
        if (o + 1 >= outlen)
            return false;
        if (dec[i] == '~') {
            if (i + 1 >= d || (dec[i + 1] != '0' && dec[i + 1] != '1'))
                return false;
            out[o++] = dec[++i] == '0' ? '~' : '/';
        } else {
            out[o++] = dec[i];
        }
    }
    out[o] = '\0';
    return true;
}

/* The schema a local $ref names in the document root: "#" (the root) or a
 * JSON Pointer "#/..." that goes only through places where the check reads
 * schemas ($defs/NAME, definitions/NAME, properties/NAME,
 * patternProperties/NAME, allOf/anyOf/oneOf/prefixItems/INDEX, items,
 * additionalProperties, not, propertyNames), so the schema it reaches was
 * checked too. NULL, with why, for anything else: remote references,
 * anchors, pointers into enum or const. */
const json_t *js_ref_resolve(const json_t *root, const char *ref, char *why, size_t why_len)
{
    static const char *const named[] = {"$defs", "definitions", "properties", "patternProperties"};
    static const char *const listed[] = {"allOf", "anyOf", "oneOf", "prefixItems"};
    static const char *const single[] = {"items", "additionalProperties", "not", "propertyNames"};
    if (ref[0] != '#') {
        snprintf(why, why_len,
                 "is not local: only \"#\" and \"#/...\" pointers into this "
                 "schema are supported");
        return NULL;
    }
    if (ref[1] != '\0' && ref[1] != '/') {
        snprintf(why, why_len,
                 "names an anchor: only \"#\" and \"#/...\" pointers are "
                 "supported");
        return NULL;
    }
    enum { NEXT_KEYWORD, NEXT_NAME, NEXT_INDEX } next = NEXT_KEYWORD;
    const json_t *node = root;
    const char *p = ref + 1;
    while (*p == '/') {
        p++;
        size_t n = strcspn(p, "/");
        char seg[256];
        if (!ref_segment(p, n, seg, sizeof(seg))) {
            snprintf(why, why_len, "has a malformed segment");
            return NULL;
        }
        p += n;
        const json_t *child = NULL;
        if (next == NEXT_INDEX) {
            bool digits = seg[0] != '\0' && (seg[0] != '0' || seg[1] == '\0') && strlen(seg) < 10;
            for (const char *c = seg; digits && *c; c++)
                digits = *c >= '0' && *c <= '9';
            child = digits ? json_array_get(node, strtoul(seg, NULL, 10)) : NULL;
            next = NEXT_KEYWORD;
        } else if (next == NEXT_NAME) {
            child = json_is_object(node) ? json_object_get(node, seg) : NULL;
            next = NEXT_KEYWORD;
        } else {
            child = json_is_object(node) ? json_object_get(node, seg) : NULL;
            bool known = false;
            for (size_t k = 0; k < 4; k++) {
                if (strcmp(seg, named[k]) == 0) {
                    next = NEXT_NAME;
                    known = true;
                } else if (strcmp(seg, listed[k]) == 0) {
                    next = NEXT_INDEX;
                    known = true;
                } else if (strcmp(seg, single[k]) == 0) {
                    known = true;
                }
            }
            if (child && !known) {
                snprintf(why, why_len, "points into \"%.64s\", which holds no schema", seg);
                return NULL;
            }
        }
        if (!child) {
            snprintf(why, why_len, "points to nothing in this schema");
            return NULL;
        }
        node = child;
    }
    if (next != NEXT_KEYWORD || (!json_is_object(node) && !json_is_boolean(node))) {
        snprintf(why, why_len, "does not point to a schema");
        return NULL;
    }
    return node;
}

/* The schemas that apply to the same value as their parent: what a loop of
 * references would go round without ever descending into the value. */
#define REF_WALK_MAX 1024

struct ref_walk {
    const json_t *root;
    const json_t *seen[REF_WALK_MAX];
    size_t n;
    bool overflow;
};

/* True when target is reached from node through $ref, allOf, anyOf, oneOf
 * and not alone. */
static bool ref_reaches(struct ref_walk *w, const json_t *node, const json_t *target)
{
    if (node == target)
        return true;
    if (!json_is_object(node))
        return false;
    for (size_t i = 0; i < w->n; i++)
        if (w->seen[i] == node)
            return false;
    if (w->n == REF_WALK_MAX) {
        w->overflow = true;
        return false;
    }
    w->seen[w->n++] = node;
    const json_t *ref = json_object_get(node, "$ref");
    if (json_is_string(ref)) {
        char why[8];
        const json_t *to = js_ref_resolve(w->root, json_string_value(ref), why, sizeof(why));
        if (to && ref_reaches(w, to, target))
            return true;
    }
    static const char *const lists[] = {"allOf", "anyOf", "oneOf"};
    for (size_t k = 0; k < 3; k++) {
        const json_t *list = json_object_get(node, lists[k]);
        for (size_t i = 0; i < json_array_size(list); i++)
            if (ref_reaches(w, json_array_get(list, i), target))
                return true;
    }
    const json_t *not = json_object_get(node, "not");
    return not &&ref_reaches(w, not, target);
}

/* ------------------------------------------------------------ the check */

enum dialect {
    DIALECT_2020, /* 2020-12, or no $schema */
    DIALECT_2019, /* 2019-09: no prefixItems */
    DIALECT_OLD,  /* draft-07, draft-06: no prefixItems nor dependentRequired; $ref alone */
};

struct check {
    struct path path;
    char *err;
    size_t errlen;
    struct numctx nc; /* the schema's document */
    const json_t *root;
    const json_t *current; /* the schema object whose keywords are read */
    enum dialect dialect;
    struct ref_walk walk;
};

static bool check_fail(struct check *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool check_fail(struct check *c, const char *fmt, ...)
{
    if (!c->err || c->errlen == 0)
        return false;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(c->err, c->errlen, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < c->errlen)
        snprintf(c->err + n, c->errlen - (size_t)n, " at %s%s", js_path_str(&c->path),
                 js_path_tail(&c->path));
    js_utf8_trim_tail(c->err);
    return false;
}

static bool check_schema(struct check *c, const json_t *schema, bool root);
static bool check_member(struct check *c, const json_t *schema, bool has_ref, const char *name,
                         const json_t *v, bool root);

static bool check_subschema(struct check *c, const char *keyword, const char *key,
                            const json_t *schema)
{
    size_t mark = js_path_push_key(&c->path, keyword);
    size_t mark2 = key ? js_path_push_key(&c->path, key) : 0;
    const json_t *parent = c->current;
    bool ok = check_schema(c, schema, false);
    if (!ok)
        return false; /* the path stays where the fault is */
    c->current = parent;
    if (key)
        js_path_pop(&c->path, mark2);
    js_path_pop(&c->path, mark);
    return true;
}

/* The members of an object in the order PostgreSQL's jsonb keeps them
 * (shorter keys first, then by bytes), so that the check here and the one
 * in SQL (outbox.mcp_schema_problem) meet a schema's faults in the same
 * order and name the same one first, whatever order the JSON was written
 * in. NULL when out of memory; else freed by the caller. */
struct member {
    const char *key;
    size_t len;
    const json_t *value;
};

static int member_cmp(const void *a, const void *b)
{
    const struct member *x = a, *y = b;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return memcmp(x->key, y->key, x->len);
}

static struct member *members_sorted(const json_t *obj, size_t *n)
{
    *n = json_object_size(obj);
    struct member *m = malloc((*n ? *n : 1) * sizeof(*m));
    if (!m)
        return NULL;
    size_t i = 0;
    const char *key;
    size_t key_len;
    const json_t *value;
    json_object_keylen_foreach((json_t *)obj, key, key_len, value)
    {
        m[i].key = key;
        m[i].len = key_len;
        m[i].value = value;
        i++;
    }
    qsort(m, *n, sizeof(*m), member_cmp);
    return m;
}

/* An object whose members are schemas ($defs, properties), or whose keys
 * are also patterns (patternProperties). */
static bool check_schema_map(struct check *c, const char *name, const json_t *v, bool patterns)
{
    if (!json_is_object(v))
        return check_fail(c, "\"%s\" must be an object of schemas", name);
    size_t n;
    struct member *members = members_sorted(v, &n);
    if (!members)
        return check_fail(c, "the schema cannot be checked: out of memory");
    for (size_t i = 0; i < n; i++) {
        const char *key = members[i].key;
        size_t key_len = members[i].len;
        const json_t *sub = members[i].value;
        if (patterns) {
            regex_t re;
            char why[160];
            if (!js_pattern_compile_text(key, key_len, &re, why, sizeof(why))) {
                (void)js_path_push_key(&c->path, name);
                (void)js_path_push_key(&c->path, key);
                free(members);
                return check_fail(c, "the pattern of \"%s\" %s", name, why);
            }
            regfree(&re);
        }
        if (!check_subschema(c, name, key, sub)) {
            free(members);
            return false;
        }
    }
    free(members);
    return true;
}

static bool check_ref(struct check *c, const json_t *v)
{
    if (!json_is_string(v))
        return check_fail(c, "\"$ref\" must be a string");
    char why[128];
    const json_t *target = js_ref_resolve(c->root, json_string_value(v), why, sizeof(why));
    if (!target)
        return check_fail(c, "\"$ref\" %s", why);
    c->walk.root = c->root;
    c->walk.n = 0;
    c->walk.overflow = false;
    if (ref_reaches(&c->walk, target, c->current))
        return check_fail(c, "\"$ref\" loops back to this schema without descending into the "
                             "value (through $ref, allOf, anyOf, oneOf or not)");
    if (c->walk.overflow)
        return check_fail(c, "\"$ref\" leads through more than %d schemas", REF_WALK_MAX);
    return true;
}

static bool check_keyword(struct check *c, const char *name, enum keyword kw, const json_t *v,
                          bool root)
{
    switch (kw) {
    case KW_TYPE:
        if (is_type_name(v) || (is_string_set(v, true) && json_array_size(v) > 0))
            return true;
        return check_fail(c, "\"type\" must be one of null, boolean, object, array, number, "
                             "integer, string, or a non-empty array of them without repeats");
    case KW_PROPERTIES:
        return check_schema_map(c, name, v, false);
    case KW_REQUIRED:
        if (is_string_set(v, false))
            return true;
        return check_fail(c, "\"required\" must be an array of strings without repeats");
    case KW_ADDITIONAL_PROPERTIES:
    case KW_ITEMS:
        if (!json_is_object(v) && !json_is_boolean(v))
            return check_fail(c, "\"%s\" must be a schema (an object or a boolean)", name);
        return check_subschema(c, name, NULL, v);
    case KW_ENUM:
        if (json_is_array(v))
            return true;
        return check_fail(c, "\"enum\" must be an array");
    case KW_CONST:
    case KW_ANY:
        return true;
    case KW_BOUND:
        if (json_is_number(v))
            return true;
        return check_fail(c, "\"%s\" must be a number", name);
    case KW_MULTIPLE_OF:
        if (json_is_number(v) && js_num_sign(&c->nc, v) > 0)
            return true;
        return check_fail(c, "\"multipleOf\" must be a number greater than 0");
    case KW_COUNT: {
        uint64_t count;
        if (js_count_of(&c->nc, v, &count))
            return true;
        return check_fail(c, "\"%s\" must be a non-negative integer", name);
    }
    case KW_PATTERN: {
        if (!json_is_string(v))
            return check_fail(c, "\"pattern\" must be a string");
        regex_t re;
        char why[160];
        if (!js_pattern_compile(v, &re, why, sizeof(why)))
            return check_fail(c, "\"pattern\" %s", why);
        regfree(&re);
        return true;
    }
    case KW_UNIQUE_ITEMS:
    case KW_FLAG:
        if (json_is_boolean(v))
            return true;
        return check_fail(c, "\"%s\" must be a boolean", name);
    case KW_ROOT_STRING:
        if (!root)
            return check_fail(c, "\"%s\" is allowed only at the root", name);
        if (!json_is_string(v))
            return check_fail(c, "\"%s\" must be a string", name);
        if (strcmp(name, "$schema") == 0 && !is_known_dialect(json_string_value(v)))
            return check_fail(c, "\"$schema\" must name the 2020-12, 2019-09, draft-07 or "
                                 "draft-06 meta-schema (another may give the keywords another "
                                 "meaning)");
        return true;
    case KW_TEXT:
        if (json_is_string(v))
            return true;
        return check_fail(c, "\"%s\" must be a string", name);
    case KW_EXAMPLES:
        if (json_is_array(v))
            return true;
        return check_fail(c, "\"examples\" must be an array");
    case KW_SCHEMA_LIST: {
        if (strcmp(name, "prefixItems") == 0 && c->dialect != DIALECT_2020)
            return check_fail(c, "\"prefixItems\" is a 2020-12 keyword; the $schema named "
                                 "ignores it (use 2020-12)");
        if (!json_is_array(v) || json_array_size(v) == 0)
            return check_fail(c, "\"%s\" must be a non-empty array of schemas", name);
        for (size_t i = 0; i < json_array_size(v); i++) {
            char index[24];
            snprintf(index, sizeof(index), "%zu", i);
            if (!check_subschema(c, name, index, json_array_get(v, i)))
                return false;
        }
        return true;
    }
    case KW_SCHEMA:
        if (!json_is_object(v) && !json_is_boolean(v))
            return check_fail(c, "\"%s\" must be a schema (an object or a boolean)", name);
        return check_subschema(c, name, NULL, v);
    case KW_DEFS:
        return check_schema_map(c, name, v, false);
    case KW_PATTERN_PROPERTIES:
        return check_schema_map(c, name, v, true);
    case KW_REF:
        return check_ref(c, v);
    case KW_FORMAT:
        if (json_is_string(v))
            return true;
        return check_fail(c, "\"format\" must be a string");
    case KW_DEPENDENT_REQUIRED: {
        if (c->dialect == DIALECT_OLD)
            return check_fail(c, "\"dependentRequired\" is a 2019-09 keyword; the $schema "
                                 "named ignores it (use 2020-12)");
        if (!json_is_object(v))
            return check_fail(c, "\"dependentRequired\" must be an object of arrays of "
                                 "strings");
        const char *key;
        const json_t *names;
        json_object_foreach((json_t *)v, key, names)
        {
            if (!is_string_set(names, false))
                return check_fail(c,
                                  "\"dependentRequired\" must map each property to an "
                                  "array of strings without repeats (not \"%.64s\")",
                                  key);
        }
        return true;
    }
    }
    return check_fail(c, "unsupported keyword \"%s\"", name);
}

static bool check_schema(struct check *c, const json_t *schema, bool root)
{
    if (json_is_boolean(schema))
        return true;
    if (!json_is_object(schema))
        return check_fail(c, "a schema must be an object or a boolean");
    bool has_ref = json_object_get(schema, "$ref") != NULL;
    size_t n;
    struct member *members = members_sorted(schema, &n);
    if (!members)
        return check_fail(c, "the schema cannot be checked: out of memory");
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        const char *name = members[i].key;
        const json_t *v = members[i].value;
        ok = check_member(c, schema, has_ref, name, v, root);
    }
    free(members);
    return ok;
}

static bool check_member(struct check *c, const json_t *schema, bool has_ref, const char *name,
                         const json_t *v, bool root)
{
    {
        size_t k = 0;
        while (k < sizeof(keywords) / sizeof(keywords[0]) && strcmp(keywords[k].name, name) != 0)
            k++;
        if (k == sizeof(keywords) / sizeof(keywords[0]))
            return check_fail(c, "unsupported keyword \"%s\"", name);
        enum keyword kw = keywords[k].kw;
        if (has_ref && c->dialect == DIALECT_OLD && kw != KW_REF && kw != KW_ROOT_STRING &&
            kw != KW_TEXT && kw != KW_FLAG && kw != KW_ANY && kw != KW_EXAMPLES && kw != KW_DEFS)
            return check_fail(c,
                              "\"%s\" beside \"$ref\" is ignored by the $schema named "
                              "(draft-07 and older); use allOf, or 2020-12",
                              name);
        c->current = schema;
        return check_keyword(c, name, kw, v, root);
    }
}

bool json_schema_check(const json_t *schema, char *err, size_t errlen)
{
    return json_schema_check_doc(schema, NULL, err, errlen);
}

bool json_schema_check_doc(const json_t *schema, const struct json_text *schema_doc, char *err,
                           size_t errlen)
{
    struct check c = {.err = err, .errlen = errlen, .nc = {.docs = {schema_doc, NULL}}};
    js_path_init(&c.path);
    if (err && errlen > 0)
        err[0] = '\0';
    if (!schema)
        return check_fail(&c, "no schema");
    if (js_path_find_too_deep(&c.path, schema, 0, JSON_SCHEMA_MAX_DEPTH))
        return check_fail(&c, "the schema is nested deeper than %d levels", JSON_SCHEMA_MAX_DEPTH);
    c.root = schema;
    c.current = schema;
    c.dialect = DIALECT_2020;
    const json_t *dialect = json_is_object(schema) ? json_object_get(schema, "$schema") : NULL;
    if (json_is_string(dialect)) {
        const char *uri = json_string_value(dialect);
        if (strstr(uri, "/draft-07/") || strstr(uri, "/draft-06/"))
            c.dialect = DIALECT_OLD;
        else if (strstr(uri, "/2019-09/"))
            c.dialect = DIALECT_2019;
    }
    return check_schema(&c, schema, true);
}
