/*
 * json_schema.c — the JSON Schema subset of json_schema.h: paths, messages,
 * exact numbers and deep equality (shared with json_schema_check.c, through
 * json_schema_internal.h), and the validation of a tool call's arguments.
 * The check at registration is json_schema_check.c; the translation of
 * patterns into POSIX ERE is json_schema_regex.c; the asserted formats are
 * json_schema_format.c.
 *
 * DESIGN
 *
 * Two walks over the same keywords. json_schema_check reads every keyword
 * of every schema object and refuses the first one outside the subset or
 * malformed. json_schema_validate reads only the keywords it knows, with
 * json_object_get, in a fixed order (type, const/enum, the keywords of the
 * value's type, then $ref, allOf, anyOf, oneOf, not), so its messages come
 * out in the same order for the same input; it trusts the check but never
 * crashes without it (a malformed keyword is skipped).
 *
 * Applicators. anyOf, oneOf, not and propertyNames try a schema without
 * reporting (trial: the count of violations, no messages); when no
 * alternative fits, the first message of each (at most four) goes into the
 * one message the model reads: "/who: must match at least one schema in
 * \"anyOf\" (0: must be string, got integer; 1: must be null, got
 * integer)". allOf and $ref report as the schema they apply would.
 *
 * Invariants:
 *   - recursion is bounded: both walks first measure the document they are
 *     handed (the schema, or the instance) and refuse it when it is nested
 *     deeper than JSON_SCHEMA_MAX_DEPTH; validation descends through $ref
 *     and the applicators at most VALIDATION_HOPS_MAX levels and applies at
 *     most VALIDATION_STEPS_MAX schemas per call (anyOf of anyOfs through
 *     $ref can be exponential without a loop; a loop is refused by the
 *     check, and still stopped here for a schema the check never saw): past
 *     either, the validation stops with one violation saying so;
 *   - nothing outlives a call: the compiled patterns of one validation are
 *     kept in a small per-call cache (by the identity of the schema's text)
 *     and all freed before it returns, the uniqueItems index and the
 *     messages of a trial are freed on their one exit;
 *   - every message is valid UTF-8 and fits its buffer: paths and quoted
 *     texts are cut, and a cut never leaves half a character;
 *   - numbers compare by their exact decimal value, never by jansson type
 *     nor through a double: 1 == 1.0, 0.1 != 0.10000000000000001, the
 *     text a number was written with when its document is known (see
 *     "numbers" below).
 *
 * Left out on purpose: remote references, $id below the root, $anchor,
 * $dynamicRef (a reference graph beyond one document is where validators
 * fetch, loop or explode), if/then/else, contains, dependentSchemas,
 * unevaluated* (their messages are hard for a model to act on, and no SDK
 * we know emits them for tool arguments).
 */
#include "mcp/json_schema.h"

#include "lib/json_text.h"
#include "mcp/json_schema_format.h"
#include "mcp/json_schema_internal.h"

#include <float.h>
#include <gmp.h>
#include <limits.h>
#include <math.h>
#include <regex.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ messages */

/* Cuts a trailing incomplete UTF-8 sequence (left by snprintf cutting a
 * message in the middle of a character). */
void js_utf8_trim_tail(char *s)
{
    size_t n = strlen(s);
    size_t i = n, cont = 0;
    while (i > 0 && cont < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) {
        i--;
        cont++;
    }
    if (i == 0) {
        s[0] = '\0';
        return;
    }
    unsigned char lead = (unsigned char)s[i - 1];
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (lead < 0x80) {
        s[i] = '\0'; /* stray continuation bytes after ASCII */
    } else if (need != cont + 1) {
        s[i - 1] = '\0';
    }
}

/* ------------------------------------------------------------ JSON Pointer paths */

void js_path_init(struct path *p)
{
    p->buf[0] = '\0';
    p->len = 0;
    p->cut = 0;
}

/* Returns the mark to hand to js_path_pop. */
size_t js_path_push_key(struct path *p, const char *key)
{
    size_t need = 1;
    for (const char *c = key; *c; c++)
        need += (*c == '~' || *c == '/') ? 2 : 1;
    if (p->cut > 0 || p->len + need + 1 > sizeof(p->buf)) {
        p->cut++;
        return PATH_CUT;
    }
    size_t mark = p->len;
    p->buf[p->len++] = '/';
    for (const char *c = key; *c; c++) {
        if (*c == '~' || *c == '/') {
            p->buf[p->len++] = '~';
            p->buf[p->len++] = *c == '~' ? '0' : '1';
        } else {
            p->buf[p->len++] = *c;
        }
    }
    p->buf[p->len] = '\0';
    return mark;
}

size_t js_path_push_index(struct path *p, size_t index)
{
    char seg[24];
    snprintf(seg, sizeof(seg), "%zu", index);
    return js_path_push_key(p, seg);
}

void js_path_pop(struct path *p, size_t mark)
{
    if (mark == PATH_CUT) {
        p->cut--;
        return;
    }
    p->len = mark;
    p->buf[mark] = '\0';
}

const char *js_path_str(const struct path *p)
{
    return p->len == 0 && p->cut == 0 ? "/" : p->buf;
}

const char *js_path_tail(const struct path *p)
{
    return p->cut > 0 ? "/..." : "";
}

/* True when v holds a value nested deeper than limit levels (v itself is at
 * depth); p is then left at the first such value. */
bool js_path_find_too_deep(struct path *p, const json_t *v, int depth, int limit)
{
    if (depth > limit)
        return true;
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            size_t mark = js_path_push_index(p, i);
            if (js_path_find_too_deep(p, json_array_get(v, i), depth + 1, limit))
                return true;
            js_path_pop(p, mark);
        }
    } else if (json_is_object(v)) {
        const char *key;
        const json_t *member;
        json_object_foreach((json_t *)v, key, member)
        {
            size_t mark = js_path_push_key(p, key);
            if (js_path_find_too_deep(p, member, depth + 1, limit))
                return true;
            js_path_pop(p, mark);
        }
    }
    return false;
}

/* ------------------------------------------------------------ numbers */

/* Numbers are judged by their exact decimal value: the text the JSON held
 * (json_text.h keeps it for the numbers of a parsed document), else the
 * integer jansson holds, else the shortest decimal that reads back as its
 * double. A value is m * 10^e with m an integer (GMP) without trailing
 * zeros (0 is m = 0, e = 0), so two equal values have the same m and e,
 * 1.0 and 1 alike, and it is an integer exactly when e >= 0.
 *
 * Cost is bounded by the text, never by the exponent: comparison aligns
 * two mantissas only when their leading digits are at the same place (so
 * the shift is at most the digits written), and multipleOf never writes
 * 10^k out for a k larger than the digits written (1e308 against
 * 0.123456789 is a few words of arithmetic). The exponent is saturated far
 * beyond anything PostgreSQL's numeric holds (the front door refuses those
 * before validating). */

#define DEC_EXP_MAX (LONG_MAX / 8)

struct dec {
    mpz_t m;
    long e;
};

/* The text of a number node: its token, else one written from jansson's
 * value into buf. */
static const char *num_text(const struct numctx *nc, const json_t *v, char *buf, size_t buflen,
                            size_t *len)
{
    for (int k = 0; nc && k < 2; k++) {
        const char *t = json_text_number(nc->docs[k], v, len);
        if (t)
            return t;
    }
    if (json_is_integer(v)) {
        snprintf(buf, buflen, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    } else {
        double d = json_real_value(v);
        for (int precision = 15; precision <= 17; precision++) {
            snprintf(buf, buflen, "%.*g", precision, d);
            if (strtod(buf, NULL) == d)
                break;
        }
    }
    *len = strlen(buf);
    return buf;
}

/* Reads a JSON number token (or strtod's %g output) into d; d->m must be
 * initialised. False only when memory runs out. */
static bool dec_set_text(struct dec *d, const char *s, size_t len)
{
    size_t i = 0;
    bool negative = i < len && s[i] == '-';
    if (negative || (i < len && s[i] == '+'))
        i++;
    char small[128];
    char *digits = len < sizeof(small) ? small : malloc(len + 1);
    if (!digits)
        return false;
    size_t n = 0, frac = 0;
    bool in_frac = false;
    for (; i < len && s[i] != 'e' && s[i] != 'E'; i++) {
        if (s[i] == '.') {
            in_frac = true;
            continue;
        }
        if (s[i] < '0' || s[i] > '9')
            break;
        if (n > 0 || s[i] != '0') /* no leading zeros */
            digits[n++] = s[i];
        if (in_frac)
            frac++;
    }
    long exponent = 0;
    if (i < len && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        bool neg_exp = i < len && s[i] == '-';
        if (i < len && (s[i] == '+' || s[i] == '-'))
            i++;
        for (; i < len && s[i] >= '0' && s[i] <= '9'; i++)
            if (exponent < DEC_EXP_MAX)
                exponent = exponent * 10 + (s[i] - '0');
        if (exponent > DEC_EXP_MAX)
            exponent = DEC_EXP_MAX;
        if (neg_exp)
            exponent = -exponent;
    }
    size_t trailing = 0;
    while (trailing < n && digits[n - 1 - trailing] == '0')
        trailing++;
    n -= trailing;
    if (n == 0) {
        mpz_set_ui(d->m, 0);
        d->e = 0;
    } else {
        digits[n] = '\0';
        mpz_set_str(d->m, digits, 10);
        if (negative)
            mpz_neg(d->m, d->m);
        d->e = exponent - (long)frac + (long)trailing;
    }
    if (digits != small)
        free(digits);
    return true;
}

static void dec_of(const struct numctx *nc, const json_t *v, struct dec *d)
{
    mpz_init(d->m);
    d->e = 0;
    char buf[64];
    size_t len;
    const char *text = num_text(nc, v, buf, sizeof(buf), &len);
    if (!dec_set_text(d, text, len))
        abort(); /* out of memory, as GMP itself would */
}

static void dec_clear(struct dec *d)
{
    mpz_clear(d->m);
}

/* The number of decimal digits of |m| (m != 0), exactly. */
static size_t dec_digits(const mpz_t m)
{
    size_t n = mpz_sizeinbase(m, 10); /* exact or one too many */
    if (n > 1) {
        mpz_t p;
        mpz_init(p);
        mpz_ui_pow_ui(p, 10, n - 1);
        if (mpz_cmpabs(m, p) < 0)
            n--;
        mpz_clear(p);
    }
    return n;
}

/* -1, 0 or 1 as a is below, equal to or above b. */
static int dec_cmp(const struct dec *a, const struct dec *b)
{
    int sa = mpz_sgn(a->m), sb = mpz_sgn(b->m);
    if (sa != sb || sa == 0)
        return (sa > sb) - (sa < sb);
    /* same sign, both non-zero: by where the leading digit is, then aligned */
    long lead_a = a->e + (long)dec_digits(a->m), lead_b = b->e + (long)dec_digits(b->m);
    if (lead_a != lead_b)
        return (lead_a > lead_b ? 1 : -1) * sa;
    if (a->e == b->e) {
        int c = mpz_cmp(a->m, b->m); /* any sign, not only -1 and 1 */
        return (c > 0) - (c < 0);
    }
    /* |e_a - e_b| is at most the digits of one mantissa: the leads are equal */
    mpz_t scaled;
    mpz_init(scaled);
    int cmp;
    if (a->e > b->e) {
        mpz_ui_pow_ui(scaled, 10, (unsigned long)(a->e - b->e));
        mpz_mul(scaled, scaled, a->m);
        cmp = mpz_cmp(scaled, b->m);
    } else {
        mpz_ui_pow_ui(scaled, 10, (unsigned long)(b->e - a->e));
        mpz_mul(scaled, scaled, b->m);
        cmp = mpz_cmp(a->m, scaled);
    }
    mpz_clear(scaled);
    return (cmp > 0) - (cmp < 0);
}

static bool dec_is_integer(const struct dec *d)
{
    return d->e >= 0 || mpz_sgn(d->m) == 0;
}

/* Is x an integer multiple of m (m > 0)? x/m = (x.m / m.m) * 10^k. */
static bool dec_is_multiple(const struct dec *x, const struct dec *m)
{
    if (mpz_sgn(x->m) == 0)
        return true;
    if (mpz_sgn(m->m) <= 0)
        return true; /* not a valid divisor: the check refuses it */
    long k = x->e - m->e;
    bool multiple;
    mpz_t g;
    mpz_init(g);
    if (k >= 0) {
        /* m.m must divide x.m * 10^k: what of m.m is not in x.m must be
         * made of 2s and 5s, each at most k times */
        mpz_gcd(g, x->m, m->m);
        mpz_divexact(g, m->m, g);
        mpz_t f;
        mpz_init_set_ui(f, 2);
        unsigned long twos = mpz_remove(g, g, f);
        mpz_set_ui(f, 5);
        unsigned long fives = mpz_remove(g, g, f);
        mpz_clear(f);
        multiple = mpz_cmp_ui(g, 1) == 0 && twos <= (unsigned long)k && fives <= (unsigned long)k;
    } else {
        /* m.m * 10^-k must divide x.m: impossible when it has more digits */
        unsigned long shift = (unsigned long)(-k);
        if (shift > dec_digits(x->m)) {
            multiple = false;
        } else {
            mpz_ui_pow_ui(g, 10, shift);
            mpz_mul(g, g, m->m);
            multiple = mpz_divisible_p(x->m, g) != 0;
        }
    }
    mpz_clear(g);
    return multiple;
}

static bool num_is_integral(const struct numctx *nc, const json_t *v)
{
    if (json_is_integer(v)) /* an integer token: 1.0 and 1e400 are reals in jansson */
        return true;
    if (!json_is_number(v))
        return false;
    struct dec d;
    dec_of(nc, v, &d);
    bool integral = dec_is_integer(&d);
    dec_clear(&d);
    return integral;
}

static int num_cmp(const struct numctx *nc, const json_t *a, const json_t *b)
{
    struct dec x, y;
    dec_of(nc, a, &x);
    dec_of(nc, b, &y);
    int cmp = dec_cmp(&x, &y);
    dec_clear(&x);
    dec_clear(&y);
    return cmp;
}

int js_num_sign(const struct numctx *nc, const json_t *v)
{
    struct dec d;
    dec_of(nc, v, &d);
    int sign = mpz_sgn(d.m);
    dec_clear(&d);
    return sign;
}

/* The number as written (cut to fit len), for a message. */
static void num_format(const struct numctx *nc, const json_t *v, char *buf, size_t len)
{
    char own[64];
    size_t n;
    const char *text = num_text(nc, v, own, sizeof(own), &n);
    if (n >= len && len > 4) {
        snprintf(buf, len, "%.*s...", (int)(len - 4), text);
        return;
    }
    snprintf(buf, len, "%.*s", (int)n, text);
}

/* A count keyword's value (minLength, maxItems...): a non-negative integer,
 * 2.0 included; a huge one is taken as UINT64_MAX. */
bool js_count_of(const struct numctx *nc, const json_t *v, uint64_t *out)
{
    if (!json_is_number(v))
        return false;
    struct dec d;
    dec_of(nc, v, &d);
    bool ok = dec_is_integer(&d) && mpz_sgn(d.m) >= 0;
    if (ok) {
        if (mpz_sgn(d.m) == 0) {
            *out = 0;
        } else if (d.e > 20) {
            *out = UINT64_MAX;
        } else {
            mpz_t p;
            mpz_init(p);
            mpz_ui_pow_ui(p, 10, (unsigned long)d.e);
            mpz_mul(p, p, d.m);
            *out = mpz_sizeinbase(p, 2) <= 64 ? (uint64_t)mpz_get_ui(p) : UINT64_MAX;
            mpz_clear(p);
        }
    }
    dec_clear(&d);
    return ok;
}

/* The canonical text of a number: "0", or the digits of its mantissa
 * without trailing zeros and, when not zero, "e" and the exponent
 * ("1999e-2" for 19.99, "1" for 1.0 and 1e0, "1e2" for 100): equal
 * values, and only they, are written alike. Bounded by the token. */
char *js_num_canonical(const struct numctx *nc, const json_t *v)
{
    struct dec d;
    dec_of(nc, v, &d);
    char *digits = mpz_get_str(NULL, 10, d.m);
    size_t n = strlen(digits) + 24;
    char *out = malloc(n);
    if (out) {
        if (mpz_sgn(d.m) == 0 || d.e == 0)
            snprintf(out, n, "%s", digits);
        else
            snprintf(out, n, "%se%ld", digits, d.e);
    }
    void (*gmp_free)(void *, size_t);
    mp_get_memory_functions(NULL, NULL, &gmp_free);
    gmp_free(digits, strlen(digits) + 1);
    dec_clear(&d);
    return out;
}

/* A hash of the exact value: equal numbers hash alike. */
static uint64_t num_hash(const struct numctx *nc, const json_t *v)
{
    struct dec d;
    dec_of(nc, v, &d);
    uint64_t h = 0x1111 ^ (uint64_t)d.e * 0x9e3779b97f4a7c15ULL;
    size_t limbs = mpz_size(d.m);
    for (size_t i = 0; i < limbs; i++)
        h = h * 0x100000001b3ULL ^ (uint64_t)mpz_getlimbn(d.m, i);
    h ^= (uint64_t)(mpz_sgn(d.m) + 1);
    dec_clear(&d);
    return h;
}

/* ------------------------------------------------------------ deep equality */

/* 1 when a and b are the same JSON value (numbers by value, objects by
 * their members in any order), 0 when not, -1 when they are nested deeper
 * than JSON_SCHEMA_MAX_DEPTH levels below depth. */
int js_json_same(const struct numctx *nc, const json_t *a, const json_t *b, int depth)
{
    if (depth > JSON_SCHEMA_MAX_DEPTH)
        return -1;
    if (json_is_number(a) && json_is_number(b))
        return num_cmp(nc, a, b) == 0;
    if (json_typeof(a) != json_typeof(b))
        return 0;
    switch (json_typeof(a)) {
    case JSON_STRING:
        return json_string_length(a) == json_string_length(b) &&
               memcmp(json_string_value(a), json_string_value(b), json_string_length(a)) == 0;
    case JSON_ARRAY: {
        if (json_array_size(a) != json_array_size(b))
            return 0;
        for (size_t i = 0; i < json_array_size(a); i++) {
            int same = js_json_same(nc, json_array_get(a, i), json_array_get(b, i), depth + 1);
            if (same != 1)
                return same;
        }
        return 1;
    }
    case JSON_OBJECT: {
        if (json_object_size(a) != json_object_size(b))
            return 0;
        const char *key;
        size_t key_len;
        const json_t *member;
        json_object_keylen_foreach((json_t *)a, key, key_len, member)
        {
            const json_t *other = json_object_getn(b, key, key_len);
            if (!other)
                return 0;
            int same = js_json_same(nc, member, other, depth + 1);
            if (same != 1)
                return same;
        }
        return 1;
    }
    default: /* null, true, false: the type is the value */
        return 1;
    }
}

static uint64_t hash_mix(uint64_t h)
{
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebULL;
    h ^= h >> 31;
    return h;
}

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ULL;
    }
    return hash_mix(h ^ n);
}

/* Equal values (js_json_same) hash alike: a number hashes by its value. */
static uint64_t json_hash(const struct numctx *nc, const json_t *v, int depth)
{
    if (depth > JSON_SCHEMA_MAX_DEPTH)
        return 0;
    switch (json_typeof(v)) {
    case JSON_INTEGER:
    case JSON_REAL:
        return hash_mix(num_hash(nc, v));
    case JSON_STRING:
        return hash_bytes(json_string_value(v), json_string_length(v));
    case JSON_ARRAY: {
        uint64_t h = 0x3333;
        for (size_t i = 0; i < json_array_size(v); i++)
            h = hash_mix(h * 31 + json_hash(nc, json_array_get(v, i), depth + 1));
        return h;
    }
    case JSON_OBJECT: {
        uint64_t h = 0x4444; /* a sum: the order of the members does not count */
        const char *key;
        size_t key_len;
        const json_t *member;
        json_object_keylen_foreach((json_t *)v, key, key_len, member)
        {
            h += hash_mix(hash_bytes(key, key_len) * 31 + json_hash(nc, member, depth + 1));
        }
        return h;
    }
    default:
        return hash_mix((uint64_t)json_typeof(v) + 0x5555);
    }
}

/* ------------------------------------------------------------ validation */

#define PATTERN_CACHE_SIZE 8

/* Schemas applied to one value: past this, the validation stops with one
 * violation (anyOf of anyOfs through $ref can be exponential without a
 * loop). The schema depth through $ref and the applicators is bounded too,
 * also for a schema the check did not see. */
#define VALIDATION_STEPS_MAX 100000
#define VALIDATION_HOPS_MAX (4 * JSON_SCHEMA_MAX_DEPTH)

struct validation {
    struct path path;
    struct numctx nc; /* the schema's and the instance's documents */
    struct json_schema_errors *out;
    int count;
    const json_t *root;
    long steps;
    bool exhausted; /* past VALIDATION_STEPS_MAX or VALIDATION_HOPS_MAX */
    struct {
        const char *pattern; /* the schema's text, by identity */
        regex_t re;
    } cache[PATTERN_CACHE_SIZE];
    int cached;
};

static void violation(struct validation *v, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void violation(struct validation *v, const char *fmt, ...)
{
    v->count++;
    if (!v->out || v->out->kept >= JSON_SCHEMA_MAX_ERRORS)
        return;
    char *msg = v->out->msg[v->out->kept++];
    int n = snprintf(msg, JSON_SCHEMA_ERROR_LEN, "%s%s: ", js_path_str(&v->path),
                     js_path_tail(&v->path));
    if (n >= 0 && n < JSON_SCHEMA_ERROR_LEN) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg + n, JSON_SCHEMA_ERROR_LEN - (size_t)n, fmt, ap);
        va_end(ap);
    }
    js_utf8_trim_tail(msg);
}

/* The JSON text of v for a message, cut to fit; the caller frees it. */
static char *dump_for_message(const json_t *v)
{
    char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (text && strlen(text) > 160) {
        memcpy(text + 157, "...", 4);
        js_utf8_trim_tail(text);
    }
    return text;
}

static const char *instance_type(const struct numctx *nc, const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "object";
    case JSON_ARRAY:
        return "array";
    case JSON_STRING:
        return "string";
    case JSON_INTEGER:
        return "integer";
    case JSON_REAL: /* 1.0, 1e400: an integer by value */
        return num_is_integral(nc, v) ? "integer" : "number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "boolean";
    default:
        return "null";
    }
}

static bool type_matches(const struct numctx *nc, const char *name, const json_t *v)
{
    if (strcmp(name, "integer") == 0)
        return json_is_number(v) && num_is_integral(nc, v);
    if (strcmp(name, "number") == 0)
        return json_is_number(v);
    if (strcmp(name, "boolean") == 0)
        return json_is_boolean(v);
    return strcmp(name, instance_type(nc, v)) == 0;
}

/* False (with one violation) when the instance's type is not allowed. */
static bool validate_type(struct validation *v, const json_t *type, const json_t *inst)
{
    if (json_is_string(type) && type_matches(&v->nc, json_string_value(type), inst))
        return true;
    if (json_is_array(type)) {
        for (size_t i = 0; i < json_array_size(type); i++) {
            const json_t *name = json_array_get(type, i);
            if (json_is_string(name) && type_matches(&v->nc, json_string_value(name), inst))
                return true;
        }
    } else if (!json_is_string(type)) {
        return true; /* malformed: the check refuses it */
    }
    char names[128] = "";
    size_t len = 0;
    size_t total = json_is_array(type) ? json_array_size(type) : 1;
    for (size_t i = 0; i < total && len < sizeof(names); i++) {
        const json_t *name = json_is_array(type) ? json_array_get(type, i) : type;
        int n = snprintf(names + len, sizeof(names) - len, "%s%s", i == 0 ? "" : " or ",
                         json_is_string(name) ? json_string_value(name) : "?");
        len += n > 0 ? (size_t)n : 0;
    }
    violation(v, "must be %s, got %s", names, instance_type(&v->nc, inst));
    return false;
}

static void validate_const_enum(struct validation *v, const json_t *schema, const json_t *inst)
{
    const json_t *value = json_object_get(schema, "const");
    if (value) {
        int same = js_json_same(&v->nc, value, inst, 0);
        if (same < 0) {
            violation(v, "nested too deep to compare with \"const\"");
        } else if (same == 0) {
            char *text = dump_for_message(value);
            violation(v, "must be %s", text ? text : "the value of \"const\"");
            free(text);
        }
    }
    const json_t *options = json_object_get(schema, "enum");
    if (json_is_array(options)) {
        bool deep = false;
        for (size_t i = 0; i < json_array_size(options); i++) {
            int same = js_json_same(&v->nc, json_array_get(options, i), inst, 0);
            if (same == 1)
                return;
            deep = deep || same < 0;
        }
        if (deep) {
            violation(v, "nested too deep to compare with \"enum\"");
            return;
        }
        char *text = dump_for_message(options);
        violation(v, "must be one of %s", text ? text : "the values of \"enum\"");
        free(text);
    }
}

static void validate_number(struct validation *v, const json_t *schema, const json_t *inst)
{
    static const struct {
        const char *keyword;
        const char *op;
        int fails_when; /* the comparison of instance to bound that fails, as -1 0 1 bits */
    } bounds[] = {
        {"minimum", ">=", 1 << 0},                      /* fails when < */
        {"exclusiveMinimum", ">", (1 << 0) | (1 << 1)}, /* fails when <= */
        {"maximum", "<=", 1 << 2},                      /* fails when > */
        {"exclusiveMaximum", "<", (1 << 1) | (1 << 2)}, /* fails when >= */
    };
    struct dec x;
    dec_of(&v->nc, inst, &x);
    for (size_t k = 0; k < sizeof(bounds) / sizeof(bounds[0]); k++) {
        const json_t *bound = json_object_get(schema, bounds[k].keyword);
        if (!json_is_number(bound))
            continue;
        struct dec b;
        dec_of(&v->nc, bound, &b);
        int cmp = dec_cmp(&x, &b);
        dec_clear(&b);
        if (bounds[k].fails_when & (1 << (cmp + 1))) {
            char text[40];
            num_format(&v->nc, bound, text, sizeof(text));
            violation(v, "must be %s %s", bounds[k].op, text);
        }
    }
    const json_t *divisor = json_object_get(schema, "multipleOf");
    bool multiple = true;
    if (json_is_number(divisor)) {
        struct dec m;
        dec_of(&v->nc, divisor, &m);
        multiple = dec_is_multiple(&x, &m);
        dec_clear(&m);
    }
    dec_clear(&x);
    if (!multiple) {
        char text[40];
        num_format(&v->nc, divisor, text, sizeof(text));
        violation(v, "must be a multiple of %s", text);
    }
}

static size_t utf8_code_points(const char *s, size_t n)
{
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        count += ((unsigned char)s[i] & 0xC0) != 0x80;
    return count;
}

/* The compiled pattern of this validation (compiled on first use); NULL
 * with why filled when it cannot be. When the cache is full, *scratch is
 * used and *free_after set. */
static regex_t *pattern_get(struct validation *v, const char *pattern, size_t pattern_len,
                            regex_t *scratch, bool *free_after, char *why, size_t why_len)
{
    *free_after = false;
    for (int k = 0; k < v->cached; k++)
        if (v->cache[k].pattern == pattern)
            return &v->cache[k].re;
    if (v->cached < PATTERN_CACHE_SIZE) {
        if (!js_pattern_compile_text(pattern, pattern_len, &v->cache[v->cached].re, why, why_len))
            return NULL;
        v->cache[v->cached].pattern = pattern;
        return &v->cache[v->cached++].re;
    }
    if (!js_pattern_compile_text(pattern, pattern_len, scratch, why, why_len))
        return NULL;
    *free_after = true;
    return scratch;
}

/* 1 when the pattern (the schema's text, kept by identity in the cache) is
 * found in s, 0 when not, -1 with why when it cannot be searched. */
static int pattern_search(struct validation *v, const char *pattern, size_t pattern_len,
                          const char *s, size_t n, char *why, size_t why_len)
{
    if (n > INT_MAX) { /* regoff_t is an int */
        snprintf(why, why_len, "the value is too long to match against a pattern");
        return -1;
    }
    regex_t scratch;
    bool free_after;
    char reason[160];
    regex_t *re =
        pattern_get(v, pattern, pattern_len, &scratch, &free_after, reason, sizeof(reason));
    if (!re) {
        snprintf(why, why_len, "the pattern %s", reason);
        return -1;
    }
    regmatch_t range = {.rm_so = 0, .rm_eo = (regoff_t)n};
    int found = regexec(re, s, 1, &range, REG_STARTEND) == 0;
    if (free_after)
        regfree(re);
    return found;
}

/* What a message says a format is: "must be a date-time (RFC 3339, as
 * 2026-12-07T10:00:00Z)". */
static const char *format_what(const char *format)
{
    if (strcmp(format, "date-time") == 0)
        return "date-time (RFC 3339, as 2026-12-07T10:00:00Z)";
    if (strcmp(format, "date") == 0)
        return "date (RFC 3339 full-date, as 2026-12-07)";
    if (strcmp(format, "email") == 0)
        return "e-mail address (as name@example.com)";
    if (strcmp(format, "uuid") == 0)
        return "UUID (as 123e4567-e89b-12d3-a456-426614174000)";
    return format;
}

static const char *format_article(const char *format)
{
    return strcmp(format, "email") == 0 ? "an" : "a";
}

static void validate_string(struct validation *v, const json_t *schema, const json_t *inst)
{
    const char *s = json_string_value(inst);
    size_t n = json_string_length(inst);
    uint64_t min = 0, max = UINT64_MAX;
    const json_t *min_json = json_object_get(schema, "minLength");
    const json_t *max_json = json_object_get(schema, "maxLength");
    bool has_min = min_json && js_count_of(&v->nc, min_json, &min);
    bool has_max = max_json && js_count_of(&v->nc, max_json, &max);
    if (has_min || has_max) {
        size_t length = utf8_code_points(s, n);
        char text[40];
        if (has_min && length < min) {
            num_format(&v->nc, min_json, text, sizeof(text));
            violation(v, "must be at least %s characters long", text);
        }
        if (has_max && length > max) {
            num_format(&v->nc, max_json, text, sizeof(text));
            violation(v, "must be at most %s characters long", text);
        }
    }
    const json_t *format = json_object_get(schema, "format");
    if (json_is_string(format) && !json_schema_format_valid(json_string_value(format), s, n))
        violation(v, "must be %s %s", format_article(json_string_value(format)),
                  format_what(json_string_value(format)));
    const json_t *pattern = json_object_get(schema, "pattern");
    if (!json_is_string(pattern))
        return;
    char why[200];
    int found = pattern_search(v, json_string_value(pattern), json_string_length(pattern), s, n,
                               why, sizeof(why));
    if (found < 0)
        violation(v, "cannot be checked: %s", why);
    else if (!found)
        violation(v, "must match the pattern \"%s\"", json_string_value(pattern));
}

struct hashed_item {
    uint64_t hash;
    size_t index;
};

static int hashed_item_cmp(const void *a, const void *b)
{
    const struct hashed_item *x = a, *y = b;
    if (x->hash != y->hash)
        return x->hash < y->hash ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* O(n log n): the items sorted by a hash that equal items share, then
 * compared only within a run of one hash. */
static void validate_unique(struct validation *v, const json_t *inst)
{
    size_t n = json_array_size(inst);
    if (n < 2)
        return;
    struct hashed_item *items = malloc(n * sizeof(*items));
    if (!items) {
        violation(v, "cannot be checked for unique items: out of memory");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        items[i].hash = json_hash(&v->nc, json_array_get(inst, i), 0);
        items[i].index = i;
    }
    qsort(items, n, sizeof(*items), hashed_item_cmp);
    size_t first = SIZE_MAX, second = SIZE_MAX;
    bool deep = false;
    for (size_t run = 0; run < n;) {
        size_t end = run + 1;
        while (end < n && items[end].hash == items[run].hash)
            end++;
        for (size_t a = run; a < end; a++) {
            for (size_t b = a + 1; b < end; b++) {
                int same = js_json_same(&v->nc, json_array_get(inst, items[a].index),
                                        json_array_get(inst, items[b].index), 0);
                deep = deep || same < 0;
                if (same == 1 && (second == SIZE_MAX || items[b].index < second)) {
                    first = items[a].index;
                    second = items[b].index;
                }
            }
        }
        run = end;
    }
    free(items);
    if (second != SIZE_MAX)
        violation(v, "items %zu and %zu are equal; items must be unique", first, second);
    else if (deep)
        violation(v, "nested too deep to check for unique items");
}

static void validate_node(struct validation *v, const json_t *schema, const json_t *inst,
                          int depth);

static int trial(struct validation *v, const json_t *schema, const json_t *inst, int depth,
                 struct json_schema_errors *errs);
static void first_reason(struct validation *v, const json_t *schema, const json_t *inst, int depth,
                         char *buf, size_t len);

static void validate_array(struct validation *v, const json_t *schema, const json_t *inst,
                           int depth)
{
    size_t n = json_array_size(inst);
    uint64_t limit;
    char text[40];
    const json_t *min = json_object_get(schema, "minItems");
    if (min && js_count_of(&v->nc, min, &limit) && n < limit) {
        num_format(&v->nc, min, text, sizeof(text));
        violation(v, "must have at least %s items", text);
    }
    const json_t *max = json_object_get(schema, "maxItems");
    if (max && js_count_of(&v->nc, max, &limit) && n > limit) {
        num_format(&v->nc, max, text, sizeof(text));
        violation(v, "must have at most %s items", text);
    }
    if (json_is_true(json_object_get(schema, "uniqueItems")))
        validate_unique(v, inst);
    const json_t *prefix = json_object_get(schema, "prefixItems");
    size_t first = 0;
    for (; first < json_array_size(prefix) && first < n; first++) {
        size_t mark = js_path_push_index(&v->path, first);
        validate_node(v, json_array_get(prefix, first), json_array_get(inst, first), depth + 1);
        js_path_pop(&v->path, mark);
    }
    const json_t *items = json_object_get(schema, "items");
    if (json_is_false(items) && json_array_size(prefix) > 0 && n > first) {
        violation(v, "must have at most %zu items", first);
    } else if (json_is_object(items) || json_is_boolean(items)) {
        for (size_t i = first; i < n; i++) {
            size_t mark = js_path_push_index(&v->path, i);
            validate_node(v, items, json_array_get(inst, i), depth + 1);
            js_path_pop(&v->path, mark);
        }
    }
}

static void validate_object(struct validation *v, const json_t *schema, const json_t *inst,
                            int depth)
{
    size_t size = json_object_size(inst);
    uint64_t limit;
    char text[40];
    const json_t *min = json_object_get(schema, "minProperties");
    if (min && js_count_of(&v->nc, min, &limit) && size < limit) {
        num_format(&v->nc, min, text, sizeof(text));
        violation(v, "must have at least %s properties", text);
    }
    const json_t *max = json_object_get(schema, "maxProperties");
    if (max && js_count_of(&v->nc, max, &limit) && size > limit) {
        num_format(&v->nc, max, text, sizeof(text));
        violation(v, "must have at most %s properties", text);
    }
    const json_t *dependent = json_object_get(schema, "dependentRequired");
    if (json_is_object(dependent)) {
        const char *present;
        const json_t *needs;
        json_object_foreach((json_t *)dependent, present, needs)
        {
            if (!json_object_get(inst, present))
                continue;
            for (size_t i = 0; i < json_array_size(needs); i++) {
                const json_t *need = json_array_get(needs, i);
                if (json_is_string(need) &&
                    !json_object_getn(inst, json_string_value(need), json_string_length(need)))
                    violation(v, "missing property \"%s\", required when \"%s\" is present",
                              json_string_value(need), present);
            }
        }
    }
    const json_t *required = json_object_get(schema, "required");
    for (size_t i = 0; i < json_array_size(required); i++) {
        const json_t *name = json_array_get(required, i);
        if (json_is_string(name) &&
            !json_object_getn(inst, json_string_value(name), json_string_length(name)))
            violation(v, "missing required property \"%s\"", json_string_value(name));
    }
    const json_t *properties = json_object_get(schema, "properties");
    if (!json_is_object(properties))
        properties = NULL;
    /* keys by their length: a key may hold U+0000 (json_object_setn) */
    const char *key;
    size_t key_len;
    const json_t *sub;
    if (properties) {
        json_object_keylen_foreach((json_t *)properties, key, key_len, sub)
        {
            const json_t *member = json_object_getn(inst, key, key_len);
            if (!member)
                continue;
            size_t mark = js_path_push_key(&v->path, key);
            validate_node(v, sub, member, depth + 1);
            js_path_pop(&v->path, mark);
        }
    }
    const json_t *patterns = json_object_get(schema, "patternProperties");
    if (!json_is_object(patterns))
        patterns = NULL;
    const json_t *additional = json_object_get(schema, "additionalProperties");
    if (!json_is_object(additional) && !json_is_boolean(additional))
        additional = NULL;
    const json_t *member;
    if (patterns || additional) {
        json_object_keylen_foreach((json_t *)inst, key, key_len, member)
        {
            bool matched = properties && json_object_getn(properties, key, key_len);
            size_t mark = js_path_push_key(&v->path, key);
            const char *pattern;
            size_t pattern_len;
            json_object_keylen_foreach((json_t *)patterns, pattern, pattern_len, sub)
            {
                char why[200];
                int found = pattern_search(v, pattern, pattern_len, key, key_len, why, sizeof(why));
                if (found < 0) {
                    violation(v, "cannot be checked: %s", why);
                } else if (found) {
                    matched = true;
                    validate_node(v, sub, member, depth + 1);
                }
            }
            if (!matched && json_is_false(additional))
                violation(v, "additional property not allowed");
            else if (!matched && additional)
                validate_node(v, additional, member, depth + 1);
            js_path_pop(&v->path, mark);
        }
    }
    const json_t *names = json_object_get(schema, "propertyNames");
    if (json_is_object(names) || json_is_boolean(names)) {
        json_object_keylen_foreach((json_t *)inst, key, key_len, member)
        {
            json_t *name = json_stringn_nocheck(key, key_len);
            if (name && trial(v, names, name, depth + 1, NULL) > 0) {
                char why[JSON_SCHEMA_ERROR_LEN];
                first_reason(v, names, name, depth + 1, why, sizeof(why));
                violation(v, "property name \"%.64s\" is not allowed: %s", key, why);
            }
            json_decref(name);
        }
    }
}

/* The violations of schema by inst, counted but not reported; with errs,
 * their messages are written there instead. v's count is left as it was. */
static int trial(struct validation *v, const json_t *schema, const json_t *inst, int depth,
                 struct json_schema_errors *errs)
{
    struct json_schema_errors *out = v->out;
    int before = v->count;
    if (errs) {
        errs->count = 0;
        errs->kept = 0;
    }
    v->out = errs;
    validate_node(v, schema, inst, depth);
    v->out = out;
    int found = v->count - before;
    v->count = before;
    return found;
}

/* The first message of schema against inst, with the current path taken
 * off its front when it is there ("must be string, got integer"). */
static void first_reason(struct validation *v, const json_t *schema, const json_t *inst, int depth,
                         char *buf, size_t len)
{
    struct json_schema_errors *errs = malloc(sizeof(*errs));
    buf[0] = '\0';
    if (!errs)
        return;
    trial(v, schema, inst, depth, errs);
    if (errs->kept > 0) {
        const char *msg = errs->msg[0];
        char here[PATH_MAX_BYTES + 8];
        snprintf(here, sizeof(here), "%s%s: ", js_path_str(&v->path), js_path_tail(&v->path));
        if (strncmp(msg, here, strlen(here)) == 0)
            msg += strlen(here);
        snprintf(buf, len, "%s", msg);
        js_utf8_trim_tail(buf);
    }
    free(errs);
}

/* anyOf or oneOf found no schema that fits: the first reason of each (at
 * most four), so the model sees what each alternative wanted. */
static void violation_alternatives(struct validation *v, const char *keyword, const json_t *list,
                                   const json_t *inst, int depth)
{
    if (!v->out || v->out->kept >= JSON_SCHEMA_MAX_ERRORS) {
        violation(v, "must match %s schema in \"%s\"",
                  strcmp(keyword, "oneOf") == 0 ? "exactly one" : "at least one", keyword);
        return;
    }
    char reasons[JSON_SCHEMA_ERROR_LEN] = "";
    size_t used = 0;
    size_t n = json_array_size(list);
    for (size_t i = 0; i < n && i < 4 && used < sizeof(reasons); i++) {
        char why[JSON_SCHEMA_ERROR_LEN];
        first_reason(v, json_array_get(list, i), inst, depth, why, sizeof(why));
        int w =
            snprintf(reasons + used, sizeof(reasons) - used, "%s%zu: %s", i ? "; " : "", i, why);
        used += w > 0 ? (size_t)w : 0;
    }
    if (n > 4 && used < sizeof(reasons))
        snprintf(reasons + used, sizeof(reasons) - used, "; ...");
    js_utf8_trim_tail(reasons);
    violation(v, "must match %s schema in \"%s\" (%s)",
              strcmp(keyword, "oneOf") == 0 ? "exactly one" : "at least one", keyword, reasons);
}

/* $ref, allOf, anyOf, oneOf, not: the keywords that apply other schemas to
 * the same value. */
static void validate_applicators(struct validation *v, const json_t *schema, const json_t *inst,
                                 int depth)
{
    const json_t *ref = json_object_get(schema, "$ref");
    if (json_is_string(ref)) {
        char why[128];
        const json_t *target = js_ref_resolve(v->root, json_string_value(ref), why, sizeof(why));
        if (target)
            validate_node(v, target, inst, depth + 1);
        else
            violation(v, "cannot be checked: \"$ref\" %s", why);
    }
    const json_t *all = json_object_get(schema, "allOf");
    for (size_t i = 0; i < json_array_size(all); i++)
        validate_node(v, json_array_get(all, i), inst, depth + 1);
    const json_t *any = json_object_get(schema, "anyOf");
    if (json_array_size(any) > 0) {
        bool fits = false;
        for (size_t i = 0; i < json_array_size(any) && !fits; i++)
            fits = trial(v, json_array_get(any, i), inst, depth + 1, NULL) == 0;
        if (!fits)
            violation_alternatives(v, "anyOf", any, inst, depth + 1);
    }
    const json_t *one = json_object_get(schema, "oneOf");
    if (json_array_size(one) > 0) {
        size_t fitting = 0, first = 0, second = 0;
        for (size_t i = 0; i < json_array_size(one); i++) {
            if (trial(v, json_array_get(one, i), inst, depth + 1, NULL) == 0) {
                if (fitting == 0)
                    first = i;
                else if (fitting == 1)
                    second = i;
                fitting++;
            }
        }
        if (fitting == 0)
            violation_alternatives(v, "oneOf", one, inst, depth + 1);
        else if (fitting > 1)
            violation(v, "must match exactly one schema in \"oneOf\", but matches %zu and %zu",
                      first, second);
    }
    const json_t *not = json_object_get(schema, "not");
    if ((json_is_object(not ) || json_is_boolean(not )) &&
        trial(v, not, inst, depth + 1, NULL) == 0)
        violation(v, "must not match the schema in \"not\"");
}

static void validate_node(struct validation *v, const json_t *schema, const json_t *inst, int depth)
{
    if (v->exhausted)
        return;
    if (++v->steps > VALIDATION_STEPS_MAX || depth > VALIDATION_HOPS_MAX) {
        v->exhausted = true;
        return;
    }
    if (json_is_false(schema)) {
        violation(v, "not allowed here (the schema is false)");
        return;
    }
    if (!json_is_object(schema))
        return; /* true, or malformed: the check refuses it */
    const json_t *type = json_object_get(schema, "type");
    if (type && !validate_type(v, type, inst))
        return; /* the other keywords would only repeat it */
    validate_const_enum(v, schema, inst);
    switch (json_typeof(inst)) {
    case JSON_INTEGER:
    case JSON_REAL:
        validate_number(v, schema, inst);
        break;
    case JSON_STRING:
        validate_string(v, schema, inst);
        break;
    case JSON_ARRAY:
        validate_array(v, schema, inst, depth);
        break;
    case JSON_OBJECT:
        validate_object(v, schema, inst, depth);
        break;
    default:
        break;
    }
    validate_applicators(v, schema, inst, depth);
}

int json_schema_validate(const json_t *schema, const json_t *instance,
                         struct json_schema_errors *out)
{
    return json_schema_validate_doc(schema, NULL, instance, NULL, out);
}

int json_schema_validate_doc(const json_t *schema, const struct json_text *schema_doc,
                             const json_t *instance, const struct json_text *instance_doc,
                             struct json_schema_errors *out)
{
    struct validation v;
    js_path_init(&v.path);
    v.nc.docs[0] = schema_doc;
    v.nc.docs[1] = instance_doc;
    v.out = out;
    v.count = 0;
    v.cached = 0;
    v.root = schema;
    v.steps = 0;
    v.exhausted = false;
    if (out) {
        out->count = 0;
        out->kept = 0;
    }
    if (!schema || !instance) {
        violation(&v, "%s", schema ? "no instance" : "no schema");
    } else if (js_path_find_too_deep(&v.path, instance, 0, JSON_SCHEMA_MAX_DEPTH)) {
        violation(&v, "nested deeper than %d levels", JSON_SCHEMA_MAX_DEPTH);
    } else {
        v.root = schema;
        validate_node(&v, schema, instance, 0);
        if (v.exhausted)
            violation(&v,
                      "cannot be checked: the schema applies more than %d schemas, or "
                      "refers more than %d levels deep, for this value",
                      VALIDATION_STEPS_MAX, VALIDATION_HOPS_MAX);
    }
    for (int k = 0; k < v.cached; k++)
        regfree(&v.cache[k].re);
    if (out)
        out->count = v.count;
    return v.count;
}
