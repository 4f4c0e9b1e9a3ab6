/*
 * schema_suite.c — the official JSON Schema test suite against
 * relay/mcp/json_schema.c (run by tests/mcp/schema_suite.sh).
 *
 *   build/schema-suite DIR...   every *.json under each DIR (optional/ too)
 *
 * Each file holds test groups: a schema and tests, each an instance and
 * whether it is valid. This runner decides on its own, from the keywords
 * alone, whether a group's schema stays within the subset of json_schema.h:
 *   - within: json_schema_check must accept it and every test's verdict
 *     (json_schema_validate() == 0) must equal its "valid", one TAP line
 *     per test; or the check refuses it for its "pattern" (ECMA-262
 *     syntax without a faithful POSIX translation), which json_schema.h
 *     documents: one line, counted as refused;
 *   - outside: json_schema_check must refuse it ("refused, as documented"),
 *     one TAP line per group.
 * Where the subset deliberately answers otherwise, the case is in skips[]
 * below with its reason.
 *
 * TAP on stdout, a summary, then "schema-suite: N passed, N failed, N
 * skipped"; the exit status is 0 only when nothing failed.
 */
#include "lib/json_text.h"
#include "mcp/json_schema.h"

#include <dirent.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ skip list */

/* file: the path below the suite's directory; test NULL: the whole group.
 * In the draft7 folder of Debian's package and in the draft2020-12 files of
 * the upstream suite kept in tests/mcp/schema_2020_12, every group within
 * the subset answers as the suite says (ECMA-262 regex classes, code point
 * lengths, 1.0 as an integer, big numbers, $ref, the applicators, the four
 * asserted formats of optional/format) but for the entries below. An entry
 * goes here only with its reason.
 *
 * Groups outside the subset (remote $ref, $id below the root, $anchor,
 * $dynamicRef, unevaluated*, dependentSchemas, if/then/else, contains,
 * vocabularies) are not skipped: json_schema_check must refuse each, one
 * TAP line per group ("refused, as documented"). */
#define FORMAT_ASSERTED                                                                            \
    "json_schema.h asserts date-time, date, email and uuid (the format-assertion "                 \
    "vocabulary's meaning, tested by optional/format/*.json); 2020-12's default is an "            \
    "annotation only"
static const struct skip {
    const char *file;
    const char *group;
    const char *test;
    const char *reason;
} skips[] = {
    {"format.json", "email format", "invalid email string is only an annotation by default",
     FORMAT_ASSERTED},
    {"format.json", "date format", "invalid date string is only an annotation by default",
     FORMAT_ASSERTED},
    {"format.json", "date-time format", "invalid date-time string is only an annotation by default",
     FORMAT_ASSERTED},
    {"format.json", "uuid format", "invalid uuid string is only an annotation by default",
     FORMAT_ASSERTED},
    {NULL, NULL, NULL, NULL},
};

/* The one rule-based skip: a test that expects a string to be refused for
 * a format the subset does not assert (hostname, ipv4, regex, uri, ...:
 * annotations, json_schema.h) is skipped with this reason, counted, one
 * TAP line each; its valid cases still run. */
#define FORMAT_ANNOTATION                                                                          \
    "the subset asserts only date-time, date, email and uuid; this format is an annotation "       \
    "(json_schema.h)"

static bool format_unasserted(const json_t *schema)
{
    const json_t *format = json_is_object(schema) ? json_object_get(schema, "format") : NULL;
    if (!json_is_string(format))
        return false;
    static const char *const asserted[] = {"date-time", "date", "email", "uuid"};
    for (size_t k = 0; k < 4; k++)
        if (strcmp(json_string_value(format), asserted[k]) == 0)
            return false;
    return true;
}

static const struct skip *skip_find(const char *file, const char *group, const char *test)
{
    for (size_t k = 0; skips[k].file; k++) {
        if (strcmp(skips[k].file, file) != 0 || strcmp(skips[k].group, group) != 0)
            continue;
        if (!skips[k].test || (test && strcmp(skips[k].test, test) == 0))
            return &skips[k];
    }
    return NULL;
}

/* ------------------------------------------------------------ the subset, by keyword */

/* An independent reading of json_schema.h's subset: the keywords, where a
 * subschema may stand, and the draft forms it refuses. Values are not
 * checked here (the suite's schemas are well-formed). */
static const char *const subset_keywords[] = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "enum",
    "const",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "items",
    "minItems",
    "maxItems",
    "uniqueItems",
    "$schema",
    "$id",
    "title",
    "description",
    "default",
    "examples",
    "$comment",
    "deprecated",
    "readOnly",
    "writeOnly",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "$ref",
    "$defs",
    "definitions",
    "format",
    "prefixItems",
    "patternProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "dependentRequired",
};

/* Keywords whose value is a schema, a list of schemas, a map of schemas. */
static const char *const schema_keywords[] = {"items", "additionalProperties", "not",
                                              "propertyNames"};
static const char *const list_keywords[] = {"allOf", "anyOf", "oneOf", "prefixItems"};
static const char *const map_keywords[] = {"properties", "$defs", "definitions",
                                           "patternProperties"};

/* The draft a folder's schemas mean when they do not say (draft7 or
 * 2020-12), from the folder's name. */
static bool folder_is_draft7;

static bool in_list(const char *key, const char *const *list, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (strcmp(key, list[k]) == 0)
            return true;
    return false;
}
#define IN(key, list) in_list(key, list, sizeof(list) / sizeof(list[0]))

/* json_schema.h: the meta-schemas in which the subset means the same. */
static bool known_dialect(const json_t *uri)
{
    static const char *const known[] = {
        "https://json-schema.org/draft/2020-12/schema",
        "https://json-schema.org/draft/2019-09/schema",
        "http://json-schema.org/draft-07/schema#",
        "http://json-schema.org/draft-06/schema#",
    };
    for (size_t k = 0; k < sizeof(known) / sizeof(known[0]); k++)
        if (json_is_string(uri) && strcmp(json_string_value(uri), known[k]) == 0)
            return true;
    return false;
}

/* The dialect of the group being read: draft-07 (or 06), 2019-09, or 2020-12. */
static int group_dialect; /* 7, 2019, 2020 */

static bool within_subset(const json_t *schema, bool root)
{
    if (json_is_boolean(schema))
        return true;
    if (!json_is_object(schema))
        return false;
    if (root) {
        const char *uri = json_string_value(json_object_get(schema, "$schema"));
        group_dialect = !uri                                                 ? 2020
                        : strstr(uri, "draft-07") || strstr(uri, "draft-06") ? 7
                        : strstr(uri, "2019-09")                             ? 2019
                                                                             : 2020;
    }
    const char *key;
    json_t *value;
    bool has_ref = json_object_get(schema, "$ref") != NULL;
    json_object_foreach((json_t *)schema, key, value)
    {
        if (!IN(key, subset_keywords))
            return false;
        /* draft-07 ignores what stands beside $ref; 2019-09 and older have no
         * prefixItems, draft-07 no dependentRequired: the subset refuses them
         * rather than give them another meaning */
        if (has_ref && group_dialect == 7 && strcmp(key, "$ref") != 0 &&
            !IN(key, ((const char *const[]){"$schema", "$id", "title", "description", "$comment",
                                            "default", "examples", "deprecated", "readOnly",
                                            "writeOnly", "$defs", "definitions"})))
            return false;
        if (strcmp(key, "prefixItems") == 0 && group_dialect != 2020)
            return false;
        if (strcmp(key, "dependentRequired") == 0 && group_dialect == 7)
            return false;
        /* only pointers into this document: no remote refs, no anchors */
        if (strcmp(key, "$ref") == 0) {
            const char *ref = json_string_value(value);
            if (!ref || ref[0] != '#' || (ref[1] != '\0' && ref[1] != '/'))
                return false;
        }
        if (IN(key, schema_keywords) && !within_subset(value, false))
            return false;
        if (IN(key, list_keywords)) {
            for (size_t i = 0; i < json_array_size(value); i++)
                if (!within_subset(json_array_get(value, i), false))
                    return false;
        }
        if (IN(key, map_keywords)) {
            const char *name;
            json_t *sub;
            json_object_foreach(value, name, sub)
            {
                if (!within_subset(sub, false))
                    return false;
            }
        }
        if ((strcmp(key, "$id") == 0 || strcmp(key, "$schema") == 0) && !root)
            return false;
        if (strcmp(key, "$schema") == 0 && !known_dialect(value))
            return false;
        if (strcmp(key, "exclusiveMinimum") == 0 || strcmp(key, "exclusiveMaximum") == 0) {
            if (!json_is_number(value)) /* draft 4's boolean form */
                return false;
        }
    }
    return true;
}

/* ------------------------------------------------------------ TAP */

struct tally {
    int n; /* TAP test number */
    int passed, failed, skipped;
    int groups_validated, groups_refused, groups_refused_pattern, groups_skipped;
    int tests_validated;
};

static void tap(struct tally *t, bool ok, const char *file, const char *group, const char *test,
                const char *directive)
{
    t->n++;
    if (ok)
        t->passed++;
    else
        t->failed++;
    printf("%s %d - %s: %s%s%s%s%s\n", ok ? "ok" : "not ok", t->n, file, group, test ? " / " : "",
           test ? test : "", directive ? " # " : "", directive ? directive : "");
}

static void tap_skip(struct tally *t, const char *file, const char *group, const char *test,
                     const char *reason)
{
    t->n++;
    t->skipped++;
    printf("ok %d - %s: %s%s%s # SKIP %s\n", t->n, file, group, test ? " / " : "", test ? test : "",
           reason);
}

/* ------------------------------------------------------------ one file */

static const char *str_or(const json_t *v, const char *fallback)
{
    return json_is_string(v) ? json_string_value(v) : fallback;
}

/* --verdicts FILE: every group's schema as checked, and the check's verdict,
 * one JSON line each (tests/mcp/schema_agreement.sh hands them to SQL). */
static FILE *verdicts;

static void run_group_tests(struct tally *t, const char *file, const struct json_text *doc,
                            const char *desc, const json_t *schema, const json_t *tests,
                            bool accepted, bool within, const char *err);

static void run_group(struct tally *t, const char *file, const struct json_text *doc,
                      const json_t *group)
{
    const char *desc = str_or(json_object_get(group, "description"), "(no description)");
    const json_t *schema = json_object_get(group, "schema");
    const json_t *tests = json_object_get(group, "tests");
    const struct skip *skip = skip_find(file, desc, NULL);
    if (skip && !skip->test) {
        t->groups_skipped++;
        tap_skip(t, file, desc, NULL, skip->reason);
        return;
    }
    /* a draft7 folder's schemas mean draft-07 without saying so: say it */
    json_t *said = NULL;
    if (folder_is_draft7 && json_is_object(schema) && !json_object_get(schema, "$schema")) {
        said = json_copy((json_t *)schema); /* shallow: the numbers keep their texts */
        json_object_set_new(said, "$schema",
                            json_string("http://json-schema.org/draft-07/schema#"));
        schema = said;
    }
    char err[256];
    bool accepted = json_schema_check_doc(schema, doc, err, sizeof(err));
    bool within = within_subset(schema, true);
    /* our own groups (tests/mcp/schema_subset) may say how the check must
     * refuse: "refused": a part of its message */
    const char *refusal = json_string_value(json_object_get(group, "refused"));
    if (verdicts) {
        json_t *line = json_pack("{s:s, s:s, s:O, s:b, s:s}", "file", file, "group", desc, "schema",
                                 schema, "accepted", accepted, "error", accepted ? "" : err);
        if (line) {
            char *text = json_dumps(line, JSON_COMPACT | JSON_ENCODE_ANY);
            if (text)
                fprintf(verdicts, "%s\n", text);
            free(text);
            json_decref(line);
        }
    }
    if (refusal) {
        char directive[300];
        snprintf(directive, sizeof(directive), "must be refused with \"%s\": %s", refusal,
                 accepted ? "accepted" : err);
        if (!accepted && strstr(err, refusal))
            t->groups_refused++;
        tap(t, !accepted && strstr(err, refusal), file, desc, NULL, directive);
    } else {
        run_group_tests(t, file, doc, desc, schema, tests, accepted, within, err);
    }
    json_decref(said);
}

static void run_group_tests(struct tally *t, const char *file, const struct json_text *doc,
                            const char *desc, const json_t *schema, const json_t *tests,
                            bool accepted, bool within, const char *err)
{
    const struct skip *skip;
    if (!within) {
        if (accepted) {
            tap(t, false, file, desc, NULL, "accepted, yet outside the subset");
            return;
        }
        char directive[300];
        snprintf(directive, sizeof(directive), "refused, as documented: %s", err);
        t->groups_refused++;
        tap(t, true, file, desc, NULL, directive);
        return;
    }
    if (!accepted) {
        bool pattern = strstr(err, "\"pattern\"") != NULL ||
                       strstr(err, "the pattern of \"patternProperties\"") != NULL;
        if (pattern) {
            t->groups_refused++;
            t->groups_refused_pattern++;
        }
        char directive[300];
        snprintf(directive, sizeof(directive), "%s: %s",
                 pattern ? "refused, as documented" : "refused, yet within the subset", err);
        tap(t, pattern, file, desc, NULL, directive);
        return;
    }
    t->groups_validated++;
    for (size_t i = 0; i < json_array_size(tests); i++) {
        const json_t *test = json_array_get(tests, i);
        const char *tdesc = str_or(json_object_get(test, "description"), "(no description)");
        skip = skip_find(file, desc, tdesc);
        if (skip) {
            tap_skip(t, file, desc, tdesc, skip->reason);
            continue;
        }
        bool expected = json_is_true(json_object_get(test, "valid"));
        if (!expected && format_unasserted(schema)) {
            tap_skip(t, file, desc, tdesc, FORMAT_ANNOTATION);
            continue;
        }
        t->tests_validated++;
        struct json_schema_errors errors;
        int count =
            json_schema_validate_doc(schema, doc, json_object_get(test, "data"), doc, &errors);
        bool ok = (count == 0) == expected;
        tap(t, ok, file, desc, tdesc, NULL);
        if (!ok) {
            printf("#   expected %s, got %d violation(s)\n", expected ? "valid" : "invalid", count);
            for (int k = 0; k < errors.kept; k++)
                printf("#   %s\n", errors.msg[k]);
        }
    }
}

/* Read with lib/json_text.h, as the front door reads a schema and a call's
 * arguments: every number keeps its exact text (optional/bignum.json's
 * integers past 64 bits, float-overflow.json's 1e308). */
static void run_file(struct tally *t, const char *path, const char *file)
{
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    size_t len = 0;
    if (f) {
        size_t cap = 0, n;
        char chunk[65536];
        while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
            if (len + n > cap) {
                cap = (len + n) * 2;
                char *grown = realloc(text, cap);
                if (!grown)
                    break;
                text = grown;
            }
            memcpy(text + len, chunk, n);
            len += n;
        }
        fclose(f);
    }
    struct json_text_error error = {0};
    struct json_text *doc =
        text ? json_text_parse(text, len, JSON_TEXT_ALLOW_NUL, NULL, 0, &error) : NULL;
    free(text);
    const json_t *root = doc ? doc->root : NULL;
    if (!json_is_array(root)) {
        tap(t, false, file, "cannot be read", NULL,
            root            ? "not an array"
            : error.text[0] ? error.text
                            : "cannot be opened");
        json_text_decref(doc);
        return;
    }
    for (size_t i = 0; i < json_array_size(root); i++)
        run_group(t, file, doc, json_array_get(root, i));
    json_text_decref(doc);
}

static int json_file_filter(const struct dirent *e)
{
    return e->d_name[0] != '.';
}

/* Every *.json below dir, in name order, files of a folder before its
 * subfolders. rel is the path below the suite's directory. */
static void run_dir(struct tally *t, const char *dir, const char *rel)
{
    struct dirent **entries;
    int n = scandir(dir, &entries, json_file_filter, alphasort);
    if (n < 0) {
        tap(t, false, dir, "cannot be listed", NULL, NULL);
        return;
    }
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < n; k++) {
            char path[4096], sub[4096];
            snprintf(path, sizeof(path), "%s/%s", dir, entries[k]->d_name);
            snprintf(sub, sizeof(sub), "%s%s%s", rel, rel[0] ? "/" : "", entries[k]->d_name);
            size_t len = strlen(entries[k]->d_name);
            bool is_json = len > 5 && strcmp(entries[k]->d_name + len - 5, ".json") == 0;
            DIR *d = opendir(path);
            bool is_dir = d != NULL;
            if (d)
                closedir(d);
            if (pass == 0 && is_json && !is_dir)
                run_file(t, path, sub);
            else if (pass == 1 && is_dir)
                run_dir(t, path, sub);
        }
    }
    for (int k = 0; k < n; k++)
        free(entries[k]);
    free(entries);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr,
                "usage: %s [--verdicts FILE] DIR...  (a draft folder of "
                "JSON-Schema-Test-Suite)\n",
                argv[0]);
        return 2;
    }
    struct tally t;
    memset(&t, 0, sizeof(t));
    int first = 1;
    if (argc > 3 && strcmp(argv[1], "--verdicts") == 0) {
        verdicts = fopen(argv[2], "w");
        if (!verdicts) {
            perror(argv[2]);
            return 2;
        }
        first = 3;
    }
    for (int i = first; i < argc; i++) {
        printf("# %s\n", argv[i]);
        folder_is_draft7 = strstr(argv[i], "draft7") || strstr(argv[i], "draft6");
        run_dir(&t, argv[i], "");
    }
    if (verdicts)
        fclose(verdicts);
    printf("# groups: %d validated (%d tests), %d refused as documented (%d of them for their "
           "pattern), %d skipped\n",
           t.groups_validated, t.tests_validated, t.groups_refused, t.groups_refused_pattern,
           t.groups_skipped);
    printf("1..%d\n", t.n);
    printf("schema-suite: %d passed, %d failed, %d skipped\n", t.passed, t.failed, t.skipped);
    return t.failed == 0 && t.n > 0 ? 0 : 1;
}
