/*
 * json_schema.c — the JSON Schema subset of json_schema.h: the check at
 * registration and the validation of a tool call's arguments.
 *
 * DESIGN
 *
 * Two walks over the same keywords. json_schema_check reads every keyword
 * of every schema object and refuses the first one outside the subset or
 * malformed, naming it and its JSON Pointer in the schema. json_schema_validate
 * reads only the keywords it knows, with json_object_get, in a fixed order,
 * so its messages come out in the same order for the same input; it trusts
 * the check but never crashes without it (a malformed keyword is skipped).
 *
 * Invariants:
 *   - recursion is bounded: both walks first measure the document they are
 *     handed (the schema, or the instance) and refuse it when it is nested
 *     deeper than JSON_SCHEMA_MAX_DEPTH, and every recursive function also
 *     carries its own depth and stops past the bound;
 *   - nothing outlives a call: the translated pattern is freed as soon as
 *     regcomp has read it, the compiled patterns of one validation are kept
 *     in a small per-call cache and all freed before it returns, the
 *     uniqueItems index is freed on its one exit;
 *   - every message is valid UTF-8 and fits its buffer: paths and quoted
 *     texts are cut, and a cut never leaves half a character;
 *   - numbers compare by their exact decimal value, never by jansson type
 *     nor through a double: 1 == 1.0, 0.1 != 0.10000000000000001, the
 *     text a number was written with when its document is known (see
 *     "numbers" below).
 *
 * Patterns. JSON Schema's patterns are ECMA-262 regular expressions; the
 * engine here is POSIX regexec (glibc, extended syntax, the C locale: it
 * matches bytes). pattern_translate rewrites the ECMA-262 syntax into an ERE
 * with the same meaning over UTF-8 text: a non-ASCII literal becomes a group
 * of its bytes, so a quantifier repeats the whole character; . \S \D \W and
 * negated classes become an ASCII bracket or-ed with the UTF-8 byte
 * sequences of the non-ASCII code points they include; \d \w \s become
 * brackets (plus, for \s, the Unicode spaces ECMA-262 lists). What has no
 * faithful ERE (lookaround, backreferences, \p{...}) is refused by the
 * check with the construct named. Bracket expressions are emitted from a
 * character set in a canonical order, so ECMA-262 text can never become a
 * POSIX-only construct ([:alpha:], [.x.], a leading ]).
 *
 * Left out on purpose: $ref and $defs (tool schemas are small; a reference
 * graph is where validators loop or explode), the applicators (allOf, anyOf,
 * oneOf, not, if/then/else: their error messages are hard for a model to act
 * on), format (assertion or not varies by implementation), and
 * patternProperties, prefixItems, contains, dependent*, unevaluated*.
 */
#include "mcp/json_schema.h"

#include "lib/json_text.h"
#include "mcp/json_schema_format.h"

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
static void utf8_trim_tail(char *s)
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

static void path_init(struct path *p)
{
    p->buf[0] = '\0';
    p->len = 0;
    p->cut = 0;
}

/* Returns the mark to hand to path_pop. */
static size_t path_push_key(struct path *p, const char *key)
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

static size_t path_push_index(struct path *p, size_t index)
{
    char seg[24];
    snprintf(seg, sizeof(seg), "%zu", index);
    return path_push_key(p, seg);
}

static void path_pop(struct path *p, size_t mark)
{
    if (mark == PATH_CUT) {
        p->cut--;
        return;
    }
    p->len = mark;
    p->buf[mark] = '\0';
}

static const char *path_str(const struct path *p)
{
    return p->len == 0 && p->cut == 0 ? "/" : p->buf;
}

static const char *path_tail(const struct path *p)
{
    return p->cut > 0 ? "/..." : "";
}

/* True when v holds a value nested deeper than limit levels (v itself is at
 * depth); p is then left at the first such value. */
static bool path_find_too_deep(struct path *p, const json_t *v, int depth, int limit)
{
    if (depth > limit)
        return true;
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            size_t mark = path_push_index(p, i);
            if (path_find_too_deep(p, json_array_get(v, i), depth + 1, limit))
                return true;
            path_pop(p, mark);
        }
    } else if (json_is_object(v)) {
        const char *key;
        const json_t *member;
        json_object_foreach((json_t *)v, key, member)
        {
            size_t mark = path_push_key(p, key);
            if (path_find_too_deep(p, member, depth + 1, limit))
                return true;
            path_pop(p, mark);
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

/* The documents whose numbers' texts are known (either may be NULL): the
 * schema's and the instance's. */
struct numctx {
    const struct json_text *docs[2];
};

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

static int num_sign(const struct numctx *nc, const json_t *v)
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
static bool count_of(const struct numctx *nc, const json_t *v, uint64_t *out)
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
static int json_same(const struct numctx *nc, const json_t *a, const json_t *b, int depth)
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
            int same = json_same(nc, json_array_get(a, i), json_array_get(b, i), depth + 1);
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
            int same = json_same(nc, member, other, depth + 1);
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

/* Equal values (json_same) hash alike: a number hashes by its value. */
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

/* ------------------------------------------------------------ patterns: ECMA-262 to POSIX ERE */

/* The UTF-8 byte sequences of sets of non-ASCII code points (the input is
 * valid UTF-8, so a lead byte class and continuation bytes suffice). */
#define MB_ALL_RE "[\xc0-\xdf][\x80-\xbf]|[\xe0-\xef][\x80-\xbf]{2}|[\xf0-\xf7][\x80-\xbf]{3}"
/* ECMA-262's non-ASCII white space and line terminators: U+00A0, U+1680,
 * U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000, U+FEFF. */
#define MB_SPACES_RE                                                                               \
    "\xc2\xa0|\xe1\x9a\x80|\xe2\x80[\x80-\x8a\xa8\xa9\xaf]|\xe2\x81\x9f|\xe3\x80\x80|\xef\xbb\xbf"
#define MB_NON_SPACES_RE                                                                           \
    "[\xc0\xc1\xc3-\xdf][\x80-\xbf]|\xc2[\x80-\x9f\xa1-\xbf]"                                      \
    "|[\xe0\xe4-\xee][\x80-\xbf]{2}"                                                               \
    "|\xe1[\x80-\x99\x9b-\xbf][\x80-\xbf]|\xe1\x9a[\x81-\xbf]"                                     \
    "|\xe2[\x82-\xbf][\x80-\xbf]|\xe2\x80[\x8b-\xa7\xaa-\xae\xb0-\xbf]|\xe2\x81[\x80-\x9e\xa0-"    \
    "\xbf]"                                                                                        \
    "|\xe3[\x81-\xbf][\x80-\xbf]|\xe3\x80[\x81-\xbf]"                                              \
    "|\xef[\x80-\xba\xbc-\xbf][\x80-\xbf]|\xef\xbb[\x80-\xbe]"                                     \
    "|[\xf0-\xf7][\x80-\xbf]{3}"
/* All but the line terminators U+2028 and U+2029 (what . matches). */
#define MB_NON_LINE_TERM_RE                                                                        \
    "[\xc0-\xdf][\x80-\xbf]|[\xe0\xe1\xe3-\xef][\x80-\xbf]{2}|\xe2[\x81-\xbf][\x80-\xbf]"          \
    "|\xe2\x80[\x80-\xa7\xaa-\xbf]|[\xf0-\xf7][\x80-\xbf]{3}"

enum mb_part {
    MB_NONE,
    MB_ALL,
    MB_SPACES,
    MB_NON_SPACES,
    MB_NON_LINE_TERM, /* only for ., never in a bracket */
};

#define CLASS_MAX_LITERALS 32

/* One character class: the ASCII characters it holds, which of the sets of
 * non-ASCII code points above, and non-ASCII characters named one by one. */
struct re_class {
    uint8_t ascii[16]; /* bit c: ASCII character c */
    enum mb_part mb;
    int literal_count;
    uint32_t literal[CLASS_MAX_LITERALS];
};

#define RE_OUT_MAX (64 * 1024)
#define RE_MAX_GROUPS 32
#define RE_MAX_WEIGHT 10000
/* The atoms of the byte sequences above, roughly. */
#define MB_ALL_WEIGHT 9
#define MB_SPACES_WEIGHT 17
#define MB_NON_SPACES_WEIGHT 45
#define MB_NON_LINE_TERM_WEIGHT 16

struct re_tr {
    const unsigned char *p; /* the ECMA-262 pattern */
    size_t n, i;
    char *out; /* the ERE, NUL-terminated */
    size_t len, cap;
    int open_groups;
    bool can_repeat; /* the last thing written is an atom a quantifier may follow */
    /* regcomp writes counted repetitions out, and its time and memory grow
     * faster than their size: the size once written out, in atoms, of each
     * open group (weight[0]: the whole pattern), and of the last atom,
     * which a quantifier repeats */
    unsigned long weight[RE_MAX_GROUPS + 1];
    unsigned long last_weight;
    char why[128]; /* why the pattern is refused */
};

static bool tr_fail(struct re_tr *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool tr_fail(struct re_tr *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->why, sizeof(t->why), fmt, ap);
    va_end(ap);
    return false;
}

static bool tr_put(struct re_tr *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap;
        while (t->len + n + 1 > cap)
            cap *= 2;
        if (cap > RE_OUT_MAX)
            return tr_fail(t, "is too long once translated to POSIX ERE");
        char *grown = realloc(t->out, cap);
        if (!grown)
            return tr_fail(t, "cannot be translated: out of memory");
        t->out = grown;
        t->cap = cap;
    }
    memcpy(t->out + t->len, s, n);
    t->len += n;
    t->out[t->len] = '\0';
    return true;
}

static bool tr_puts(struct re_tr *t, const char *s)
{
    return tr_put(t, s, strlen(s));
}

/* Adds to the current group what was just written; atom: it is one, that a
 * quantifier may repeat. */
static bool tr_weigh(struct re_tr *t, unsigned long weight, bool atom)
{
    if (atom)
        t->last_weight = weight;
    t->weight[t->open_groups] += weight;
    if (t->weight[t->open_groups] > RE_MAX_WEIGHT)
        return tr_fail(t, "is too large once its repetitions are written out for POSIX "
                          "regcomp (bound lengths with minLength and maxLength instead)");
    return true;
}

static size_t utf8_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Reads one UTF-8 character of the pattern (valid UTF-8: jansson checked). */
static uint32_t tr_next_char(struct re_tr *t)
{
    unsigned char c = t->p[t->i++];
    if (c < 0x80)
        return c;
    size_t more = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1;
    uint32_t cp = c & (c >= 0xF0 ? 0x07 : c >= 0xE0 ? 0x0F : 0x1F);
    for (size_t k = 0; k < more && t->i < t->n; k++)
        cp = (cp << 6) | (t->p[t->i++] & 0x3F);
    return cp;
}

static int hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* count hex digits at the cursor; false when they are not there. */
static bool tr_hex(struct re_tr *t, size_t count, uint32_t *out)
{
    uint32_t v = 0;
    for (size_t k = 0; k < count; k++) {
        if (t->i >= t->n || hex_value(t->p[t->i]) < 0)
            return false;
        v = v * 16 + (uint32_t)hex_value(t->p[t->i++]);
    }
    *out = v;
    return true;
}

/* After "\u": HHHH, a surrogate pair \uHHHH\uHHHH, or {H...}. */
static bool tr_unicode_escape(struct re_tr *t, uint32_t *cp)
{
    if (t->i < t->n && t->p[t->i] == '{') {
        t->i++;
        uint32_t v = 0;
        size_t digits = 0;
        while (t->i < t->n && hex_value(t->p[t->i]) >= 0) {
            v = v * 16 + (uint32_t)hex_value(t->p[t->i++]);
            if (++digits > 6 || v > 0x10FFFF)
                return tr_fail(t, "has a \\u{...} escape above U+10FFFF");
        }
        if (digits == 0 || t->i >= t->n || t->p[t->i] != '}')
            return tr_fail(t, "has a malformed \\u{...} escape");
        t->i++;
        *cp = v;
    } else if (!tr_hex(t, 4, cp)) {
        return tr_fail(t, "has a malformed \\u escape");
    }
    if (*cp >= 0xD800 && *cp <= 0xDBFF && t->i + 6 <= t->n && t->p[t->i] == '\\' &&
        t->p[t->i + 1] == 'u') {
        size_t save = t->i;
        uint32_t low;
        t->i += 2;
        if (tr_hex(t, 4, &low) && low >= 0xDC00 && low <= 0xDFFF) {
            *cp = 0x10000 + ((*cp - 0xD800) << 10) + (low - 0xDC00);
            return true;
        }
        t->i = save;
    }
    if (*cp >= 0xD800 && *cp <= 0xDFFF)
        return tr_fail(t, "has a lone surrogate escape \\u%04X", (unsigned)*cp);
    return true;
}

static void class_add(struct re_class *c, unsigned ch)
{
    c->ascii[ch >> 3] |= (uint8_t)(1u << (ch & 7));
}

static bool class_has(const struct re_class *c, unsigned ch)
{
    return (c->ascii[ch >> 3] >> (ch & 7)) & 1u;
}

static void class_add_range(struct re_class *c, unsigned lo, unsigned hi)
{
    for (unsigned ch = lo; ch <= hi; ch++)
        class_add(c, ch);
}

static void class_negate_ascii(struct re_class *c)
{
    for (size_t k = 0; k < sizeof(c->ascii); k++)
        c->ascii[k] = (uint8_t)~c->ascii[k];
}

static enum mb_part mb_union(enum mb_part a, enum mb_part b)
{
    if (a == b || b == MB_NONE)
        return a;
    if (a == MB_NONE)
        return b;
    return MB_ALL; /* SPACES with NON_SPACES, or anything with ALL */
}

static enum mb_part mb_negate(enum mb_part m)
{
    switch (m) {
    case MB_NONE:
        return MB_ALL;
    case MB_ALL:
        return MB_NONE;
    case MB_SPACES:
        return MB_NON_SPACES;
    case MB_NON_SPACES:
        return MB_SPACES;
    default:
        return MB_NONE; /* MB_NON_LINE_TERM is never negated */
    }
}

/* The class of an escape letter d D w W s S, or false for another letter. */
static bool class_of_escape(unsigned char e, struct re_class *c)
{
    memset(c, 0, sizeof(*c));
    switch (e) {
    case 'd':
    case 'D':
        class_add_range(c, '0', '9');
        break;
    case 'w':
    case 'W':
        class_add_range(c, '0', '9');
        class_add_range(c, 'A', 'Z');
        class_add_range(c, 'a', 'z');
        class_add(c, '_');
        break;
    case 's':
    case 'S':
        class_add_range(c, '\t', '\r'); /* \t \n \v \f \r */
        class_add(c, ' ');
        c->mb = MB_SPACES;
        break;
    default:
        return false;
    }
    if (e == 'D' || e == 'W' || e == 'S') {
        class_negate_ascii(c);
        c->mb = mb_negate(c->mb);
    }
    return true;
}

/* The characters of a bracket expression, in an order POSIX reads
 * literally: ] first, ^ never first, - last (after the high range of a
 * negated bracket), and no [ followed by . : = (ascending order puts those
 * before [). */
static bool tr_bracket_chars(struct re_tr *t, const struct re_class *set, bool high_range)
{
    char buf[140];
    size_t n = 0;
    if (class_has(set, ']'))
        buf[n++] = ']';
    for (unsigned ch = 1; ch < 128; ch++)
        if (class_has(set, ch) && ch != ']' && ch != '^' && ch != '-')
            buf[n++] = (char)ch;
    if (class_has(set, '^'))
        buf[n++] = '^';
    if (high_range) {
        buf[n++] = '\x80';
        buf[n++] = '-';
        buf[n++] = '\xff';
    }
    if (class_has(set, '-'))
        buf[n++] = '-';
    return tr_put(t, buf, n);
}

/* Writes a class as one atom. */
static bool tr_class(struct re_tr *t, const struct re_class *c)
{
    int pieces = 0;
    bool ascii_any = false;
    for (size_t k = 0; k < sizeof(c->ascii); k++)
        ascii_any = ascii_any || c->ascii[k] != 0;
    bool only_caret = ascii_any && class_has(c, '^');
    for (unsigned ch = 0; ch < 128 && only_caret; ch++)
        only_caret = ch == '^' || !class_has(c, ch);
    pieces = (ascii_any ? 1 : 0) + (c->mb != MB_NONE ? 1 : 0) + c->literal_count;
    if (pieces == 0)
        return tr_fail(t, "has a class that matches nothing");
    bool group = pieces > 1;
    bool first = true;
    if (group && !tr_puts(t, "("))
        return false;
    if (ascii_any) {
        first = false;
        if (class_has(c, 0)) {
            /* NUL cannot be written in a pattern: the complement, negated */
            struct re_class complement = *c;
            class_negate_ascii(&complement);
            complement.ascii[0] &= (uint8_t)~1u;
            if (!tr_puts(t, "[^") || !tr_bracket_chars(t, &complement, true) || !tr_puts(t, "]"))
                return false;
        } else if (only_caret) {
            if (!tr_puts(t, "\\^"))
                return false;
        } else if (!tr_puts(t, "[") || !tr_bracket_chars(t, c, false) || !tr_puts(t, "]")) {
            return false;
        }
    }
    static const char *const mb_re[] = {
        [MB_ALL] = MB_ALL_RE,
        [MB_SPACES] = MB_SPACES_RE,
        [MB_NON_SPACES] = MB_NON_SPACES_RE,
        [MB_NON_LINE_TERM] = MB_NON_LINE_TERM_RE,
    };
    if (c->mb != MB_NONE) {
        if ((!first && !tr_puts(t, "|")) || !tr_puts(t, mb_re[c->mb]))
            return false;
        first = false;
    }
    for (int k = 0; k < c->literal_count; k++) {
        char bytes[4];
        size_t len = utf8_encode(c->literal[k], bytes);
        if ((!first && !tr_puts(t, "|")) || !tr_put(t, bytes, len))
            return false;
        first = false;
    }
    if (group && !tr_puts(t, ")"))
        return false;
    static const unsigned long mb_weight[] = {
        [MB_ALL] = MB_ALL_WEIGHT,
        [MB_SPACES] = MB_SPACES_WEIGHT,
        [MB_NON_SPACES] = MB_NON_SPACES_WEIGHT,
        [MB_NON_LINE_TERM] = MB_NON_LINE_TERM_WEIGHT,
    };
    t->can_repeat = true;
    return tr_weigh(
        t, (unsigned long)pieces + mb_weight[c->mb] + 4ul * (unsigned long)c->literal_count, true);
}

/* A literal character as one atom. */
static bool tr_literal(struct re_tr *t, uint32_t cp)
{
    t->can_repeat = true;
    if (cp == 0)
        return tr_fail(t, "matches U+0000, which POSIX regcomp cannot");
    if (cp >= 0x80) {
        char bytes[6];
        bytes[0] = '(';
        size_t len = utf8_encode(cp, bytes + 1);
        bytes[len + 1] = ')';
        return tr_put(t, bytes, len + 2) && tr_weigh(t, len + 1, true);
    }
    char lit[2] = {'\\', (char)cp};
    if (strchr(".[\\()*+?{}|^$", (int)cp))
        return tr_put(t, lit, 2) && tr_weigh(t, 1, true);
    return tr_put(t, lit + 1, 1) && tr_weigh(t, 1, true);
}

/* The escapes that are one character, the same in and out of a class (\b
 * excepted: the caller handles it); false with why for any other. */
static bool tr_char_escape(struct re_tr *t, unsigned char e, uint32_t *cp)
{
    switch (e) {
    case 't':
        *cp = '\t';
        return true;
    case 'n':
        *cp = '\n';
        return true;
    case 'r':
        *cp = '\r';
        return true;
    case 'f':
        *cp = '\f';
        return true;
    case 'v':
        *cp = '\v';
        return true;
    case 'c':
        if (t->i < t->n && ((t->p[t->i] >= 'a' && t->p[t->i] <= 'z') ||
                            (t->p[t->i] >= 'A' && t->p[t->i] <= 'Z'))) {
            *cp = t->p[t->i++] & 31u;
            return true;
        }
        return tr_fail(t, "has \\c without a letter");
    case 'x':
        if (tr_hex(t, 2, cp))
            return true;
        return tr_fail(t, "has a malformed \\x escape");
    case 'u':
        return tr_unicode_escape(t, cp);
    case '0':
        if (t->i < t->n && t->p[t->i] >= '0' && t->p[t->i] <= '9')
            return tr_fail(t, "has an octal escape (not ECMA-262 in unicode mode)");
        return tr_fail(t, "has \\0: U+0000 cannot be matched by POSIX regcomp");
    case 'p':
    case 'P':
        return tr_fail(t, "has a Unicode property escape \\%c{...}: not supported by POSIX ERE", e);
    case 'k':
        return tr_fail(t, "has a named backreference \\k<...>: not supported by POSIX ERE");
    default:
        if (e >= '1' && e <= '9')
            return tr_fail(t, "has a backreference \\%c: not supported", e);
        if (strchr("^$\\.*+?()[]{}|/-", e) && e != '\0') {
            *cp = e;
            return true;
        }
        if (e >= 0x80 || (e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z'))
            return tr_fail(t, "has an unknown escape \\%c", e >= 0x80 ? '?' : e);
        *cp = e; /* other ASCII punctuation stands for itself */
        return true;
    }
}

/* One atom inside [...]: a character (is_class false) or a class escape. */
static bool tr_class_atom(struct re_tr *t, uint32_t *cp, bool *is_class, struct re_class *cls)
{
    *is_class = false;
    if (t->p[t->i] != '\\') {
        *cp = tr_next_char(t);
        return true;
    }
    t->i++;
    if (t->i >= t->n)
        return tr_fail(t, "ends with a backslash");
    unsigned char e = t->p[t->i++];
    if (class_of_escape(e, cls)) {
        *is_class = true;
        return true;
    }
    if (e == 'b') {
        *cp = '\b';
        return true;
    }
    return tr_char_escape(t, e, cp);
}

static bool class_add_char(struct re_tr *t, struct re_class *c, uint32_t cp)
{
    if (cp == 0)
        return tr_fail(t, "matches U+0000, which POSIX regcomp cannot");
    if (cp < 0x80) {
        class_add(c, cp);
        return true;
    }
    if (c->literal_count == CLASS_MAX_LITERALS)
        return tr_fail(t, "has a class with more than %d non-ASCII characters", CLASS_MAX_LITERALS);
    c->literal[c->literal_count++] = cp;
    return true;
}

/* After "[". */
static bool tr_bracket(struct re_tr *t)
{
    struct re_class c;
    memset(&c, 0, sizeof(c));
    bool negated = t->i < t->n && t->p[t->i] == '^';
    if (negated)
        t->i++;
    for (;;) {
        if (t->i >= t->n)
            return tr_fail(t, "has an unterminated [");
        if (t->p[t->i] == ']') {
            t->i++;
            break;
        }
        uint32_t lo, hi;
        bool lo_class, hi_class;
        struct re_class lo_set, hi_set;
        if (!tr_class_atom(t, &lo, &lo_class, &lo_set))
            return false;
        if (t->i + 1 < t->n && t->p[t->i] == '-' && t->p[t->i + 1] != ']') {
            t->i++;
            if (!tr_class_atom(t, &hi, &hi_class, &hi_set))
                return false;
            if (lo_class || hi_class)
                return tr_fail(t, "has a range with a class escape as an end");
            if (lo > hi)
                return tr_fail(t, "has a range out of order");
            if (hi >= 0x80)
                return tr_fail(t, "has a range with a non-ASCII end: not supported");
            if (lo == 0)
                return tr_fail(t, "matches U+0000, which POSIX regcomp cannot");
            class_add_range(&c, lo, hi);
        } else if (lo_class) {
            for (size_t k = 0; k < sizeof(c.ascii); k++)
                c.ascii[k] |= lo_set.ascii[k];
            c.mb = mb_union(c.mb, lo_set.mb);
        } else if (!class_add_char(t, &c, lo)) {
            return false;
        }
    }
    if (negated) {
        if (c.literal_count > 0)
            return tr_fail(t, "has a negated class with non-ASCII characters: not supported");
        class_negate_ascii(&c);
        c.mb = mb_negate(c.mb);
    }
    return tr_class(t, &c);
}

/* After "\" outside a class. */
static bool tr_escape(struct re_tr *t)
{
    if (t->i >= t->n)
        return tr_fail(t, "ends with a backslash");
    unsigned char e = t->p[t->i++];
    struct re_class c;
    if (class_of_escape(e, &c))
        return tr_class(t, &c);
    if (e == 'b' || e == 'B') {
        t->can_repeat = false;
        return tr_puts(t, e == 'b' ? "\\b" : "\\B") && tr_weigh(t, 1, false);
    }
    uint32_t cp;
    if (!tr_char_escape(t, e, &cp))
        return false;
    return tr_literal(t, cp);
}

/* After "(". */
static bool tr_group(struct re_tr *t)
{
    if (t->i < t->n && t->p[t->i] == '?') {
        t->i++;
        unsigned char k = t->i < t->n ? t->p[t->i] : '\0';
        unsigned char k2 = t->i + 1 < t->n ? t->p[t->i + 1] : '\0';
        if (k == ':') {
            t->i++;
        } else if (k == '=' || k == '!') {
            return tr_fail(t, "has a lookahead (?%c: not supported by POSIX ERE", k);
        } else if (k == '<' && (k2 == '=' || k2 == '!')) {
            return tr_fail(t, "has a lookbehind (?<%c: not supported by POSIX ERE", k2);
        } else if (k == '<') {
            t->i++;
            size_t start = t->i;
            while (t->i < t->n && (t->p[t->i] == '_' || t->p[t->i] == '$' ||
                                   (t->p[t->i] >= 'a' && t->p[t->i] <= 'z') ||
                                   (t->p[t->i] >= 'A' && t->p[t->i] <= 'Z') ||
                                   (t->i > start && t->p[t->i] >= '0' && t->p[t->i] <= '9')))
                t->i++;
            if (t->i == start || t->i >= t->n || t->p[t->i] != '>')
                return tr_fail(t, "has a malformed group name");
            t->i++;
        } else {
            return tr_fail(t, "has a (? group that is not (?: or (?<name>");
        }
    }
    if (t->open_groups == RE_MAX_GROUPS)
        return tr_fail(t, "has groups nested deeper than %d", RE_MAX_GROUPS);
    t->open_groups++;
    t->weight[t->open_groups] = 0;
    t->can_repeat = false;
    return tr_puts(t, "(");
}

static bool tr_bound(struct re_tr *t, long *out)
{
    long v = 0;
    size_t start = t->i;
    while (t->i < t->n && t->p[t->i] >= '0' && t->p[t->i] <= '9') {
        v = v * 10 + (t->p[t->i++] - '0');
        if (v > 1000)
            return tr_fail(t, "has a repetition bound above 1000");
    }
    *out = v;
    if (t->i == start)
        return tr_fail(t, "has a { that is not a quantifier (write \\{)");
    return true;
}

/* At "*", "+", "?" or "{". */
static bool tr_quantifier(struct re_tr *t)
{
    if (!t->can_repeat)
        return tr_fail(t, "has a quantifier with nothing to repeat");
    char q[32];
    unsigned char c = t->p[t->i++];
    unsigned long copies = c == '+' ? 2 : 1; /* what regcomp writes out */
    if (c == '{') {
        long lo, hi = -1;
        if (!tr_bound(t, &lo))
            return false;
        bool comma = t->i < t->n && t->p[t->i] == ',';
        if (comma) {
            t->i++;
            if (t->i < t->n && t->p[t->i] != '}' && !tr_bound(t, &hi))
                return false;
        }
        if (t->i >= t->n || t->p[t->i] != '}')
            return tr_fail(t, "has a { that is not a quantifier (write \\{)");
        t->i++;
        if (comma && hi >= 0 && hi < lo)
            return tr_fail(t, "has a quantifier {%ld,%ld} out of order", lo, hi);
        if (!comma)
            snprintf(q, sizeof(q), "{%ld}", lo);
        else if (hi < 0)
            snprintf(q, sizeof(q), "{%ld,}", lo);
        else
            snprintf(q, sizeof(q), "{%ld,%ld}", lo, hi);
        /* an optional copy costs regcomp about twice a required one */
        copies = (unsigned long)lo + (comma ? (hi < 0 ? 1 : 2 * (unsigned long)(hi - lo)) : 0);
        if (copies == 0)
            copies = 1;
    } else {
        q[0] = (char)c;
        q[1] = '\0';
    }
    if (t->i < t->n && t->p[t->i] == '?')
        t->i++; /* lazy: whether a match exists does not depend on it */
    t->can_repeat = false;
    return tr_puts(t, q) && tr_weigh(t, t->last_weight * (copies - 1), false);
}

/* ECMA-262 (unicode mode) to POSIX ERE; t->out is then the ERE. */
static bool pattern_translate(struct re_tr *t)
{
    while (t->i < t->n) {
        unsigned char c = t->p[t->i];
        bool ok;
        switch (c) {
        case '\\':
            t->i++;
            ok = tr_escape(t);
            break;
        case '.': {
            struct re_class dot;
            memset(&dot, 0, sizeof(dot));
            class_add_range(&dot, 0, 127);
            dot.ascii['\n' >> 3] &= (uint8_t) ~(1u << ('\n' & 7));
            dot.ascii['\r' >> 3] &= (uint8_t) ~(1u << ('\r' & 7));
            dot.mb = MB_NON_LINE_TERM;
            t->i++;
            ok = tr_class(t, &dot);
            break;
        }
        case '[':
            t->i++;
            ok = tr_bracket(t);
            break;
        case '(':
            t->i++;
            ok = tr_group(t);
            break;
        case ')':
            t->i++;
            if (t->open_groups == 0)
                return tr_fail(t, "has an unmatched )");
            t->open_groups--;
            t->can_repeat = true;
            ok = tr_puts(t, ")") && tr_weigh(t, t->weight[t->open_groups + 1] + 1, true);
            break;
        case '|':
        case '^':
        case '$':
            t->i++;
            t->can_repeat = false;
            ok = tr_put(t, (const char *)&c, 1) && tr_weigh(t, 1, false);
            break;
        case '*':
        case '+':
        case '?':
        case '{':
            ok = tr_quantifier(t);
            break;
        case '}':
        case ']':
            return tr_fail(t, "has a lone %c (write \\%c)", c, c);
        default:
            ok = tr_literal(t, tr_next_char(t));
            break;
        }
        if (!ok)
            return false;
    }
    if (t->open_groups > 0)
        return tr_fail(t, "has an unmatched (");
    return true;
}

/* Translates and compiles an ECMA-262 pattern; false with why (a phrase
 * that follows "pattern") when it cannot be. re is to be regfree'd when
 * true is returned, and is untouched otherwise. */
static bool pattern_compile_text(const char *text, size_t len, regex_t *re, char *why,
                                 size_t why_len)
{
    struct re_tr t;
    memset(&t, 0, sizeof(t));
    t.p = (const unsigned char *)text;
    t.n = len;
    if (t.n > JSON_SCHEMA_PATTERN_MAX) {
        snprintf(why, why_len, "is longer than %d bytes", JSON_SCHEMA_PATTERN_MAX);
        return false;
    }
    if (memchr(t.p, '\0', t.n)) {
        snprintf(why, why_len, "holds U+0000, which POSIX regcomp cannot");
        return false;
    }
    t.cap = 4 * t.n + 64;
    t.out = malloc(t.cap);
    if (!t.out) {
        snprintf(why, why_len, "cannot be compiled: out of memory");
        return false;
    }
    t.out[0] = '\0';
    bool ok = pattern_translate(&t);
    if (ok) {
        int rc = regcomp(re, t.out, REG_EXTENDED | REG_NOSUB);
        if (rc != 0) {
            char msg[96];
            regerror(rc, re, msg, sizeof(msg));
            snprintf(why, why_len, "does not compile as POSIX ERE: %s", msg);
            ok = false;
        }
    } else {
        snprintf(why, why_len, "%s", t.why);
    }
    free(t.out);
    return ok;
}

static bool pattern_compile(const json_t *pattern, regex_t *re, char *why, size_t why_len)
{
    return pattern_compile_text(json_string_value(pattern), json_string_length(pattern), re, why,
                                why_len);
}

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
    KW_FLAG,        /* deprecated, readOnly, writeOnly */
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
            if (json_same(NULL, item, json_array_get(v, k), 0) == 1) /* strings */
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
            int hi = hex_value((unsigned char)s[i + 1]);
            int lo = hex_value((unsigned char)s[i + 2]);
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
static const json_t *ref_resolve(const json_t *root, const char *ref, char *why, size_t why_len)
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
        const json_t *to = ref_resolve(w->root, json_string_value(ref), why, sizeof(why));
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
        snprintf(c->err + n, c->errlen - (size_t)n, " at %s%s", path_str(&c->path),
                 path_tail(&c->path));
    utf8_trim_tail(c->err);
    return false;
}

static bool check_schema(struct check *c, const json_t *schema, bool root);
static bool check_member(struct check *c, const json_t *schema, bool has_ref, const char *name,
                         const json_t *v, bool root);

static bool check_subschema(struct check *c, const char *keyword, const char *key,
                            const json_t *schema)
{
    size_t mark = path_push_key(&c->path, keyword);
    size_t mark2 = key ? path_push_key(&c->path, key) : 0;
    const json_t *parent = c->current;
    bool ok = check_schema(c, schema, false);
    if (!ok)
        return false; /* the path stays where the fault is */
    c->current = parent;
    if (key)
        path_pop(&c->path, mark2);
    path_pop(&c->path, mark);
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
            if (!pattern_compile_text(key, key_len, &re, why, sizeof(why))) {
                (void)path_push_key(&c->path, name);
                (void)path_push_key(&c->path, key);
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
    const json_t *target = ref_resolve(c->root, json_string_value(v), why, sizeof(why));
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
        if (json_is_number(v) && num_sign(&c->nc, v) > 0)
            return true;
        return check_fail(c, "\"multipleOf\" must be a number greater than 0");
    case KW_COUNT: {
        uint64_t count;
        if (count_of(&c->nc, v, &count))
            return true;
        return check_fail(c, "\"%s\" must be a non-negative integer", name);
    }
    case KW_PATTERN: {
        if (!json_is_string(v))
            return check_fail(c, "\"pattern\" must be a string");
        regex_t re;
        char why[160];
        if (!pattern_compile(v, &re, why, sizeof(why)))
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
    struct check c;
    path_init(&c.path);
    c.nc.docs[0] = schema_doc;
    c.nc.docs[1] = NULL;
    c.err = err;
    c.errlen = errlen;
    if (err && errlen > 0)
        err[0] = '\0';
    if (!schema)
        return check_fail(&c, "no schema");
    if (path_find_too_deep(&c.path, schema, 0, JSON_SCHEMA_MAX_DEPTH))
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
    int n = snprintf(msg, JSON_SCHEMA_ERROR_LEN, "%s%s: ", path_str(&v->path), path_tail(&v->path));
    if (n >= 0 && n < JSON_SCHEMA_ERROR_LEN) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg + n, JSON_SCHEMA_ERROR_LEN - (size_t)n, fmt, ap);
        va_end(ap);
    }
    utf8_trim_tail(msg);
}

/* The JSON text of v for a message, cut to fit; the caller frees it. */
static char *dump_for_message(const json_t *v)
{
    char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (text && strlen(text) > 160) {
        memcpy(text + 157, "...", 4);
        utf8_trim_tail(text);
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
        int same = json_same(&v->nc, value, inst, 0);
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
            int same = json_same(&v->nc, json_array_get(options, i), inst, 0);
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
        if (!pattern_compile_text(pattern, pattern_len, &v->cache[v->cached].re, why, why_len))
            return NULL;
        v->cache[v->cached].pattern = pattern;
        return &v->cache[v->cached++].re;
    }
    if (!pattern_compile_text(pattern, pattern_len, scratch, why, why_len))
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
    bool has_min = min_json && count_of(&v->nc, min_json, &min);
    bool has_max = max_json && count_of(&v->nc, max_json, &max);
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
                int same = json_same(&v->nc, json_array_get(inst, items[a].index),
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
    if (min && count_of(&v->nc, min, &limit) && n < limit) {
        num_format(&v->nc, min, text, sizeof(text));
        violation(v, "must have at least %s items", text);
    }
    const json_t *max = json_object_get(schema, "maxItems");
    if (max && count_of(&v->nc, max, &limit) && n > limit) {
        num_format(&v->nc, max, text, sizeof(text));
        violation(v, "must have at most %s items", text);
    }
    if (json_is_true(json_object_get(schema, "uniqueItems")))
        validate_unique(v, inst);
    const json_t *prefix = json_object_get(schema, "prefixItems");
    size_t first = 0;
    for (; first < json_array_size(prefix) && first < n; first++) {
        size_t mark = path_push_index(&v->path, first);
        validate_node(v, json_array_get(prefix, first), json_array_get(inst, first), depth + 1);
        path_pop(&v->path, mark);
    }
    const json_t *items = json_object_get(schema, "items");
    if (json_is_false(items) && json_array_size(prefix) > 0 && n > first) {
        violation(v, "must have at most %zu items", first);
    } else if (json_is_object(items) || json_is_boolean(items)) {
        for (size_t i = first; i < n; i++) {
            size_t mark = path_push_index(&v->path, i);
            validate_node(v, items, json_array_get(inst, i), depth + 1);
            path_pop(&v->path, mark);
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
    if (min && count_of(&v->nc, min, &limit) && size < limit) {
        num_format(&v->nc, min, text, sizeof(text));
        violation(v, "must have at least %s properties", text);
    }
    const json_t *max = json_object_get(schema, "maxProperties");
    if (max && count_of(&v->nc, max, &limit) && size > limit) {
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
            size_t mark = path_push_key(&v->path, key);
            validate_node(v, sub, member, depth + 1);
            path_pop(&v->path, mark);
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
            size_t mark = path_push_key(&v->path, key);
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
            path_pop(&v->path, mark);
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
        snprintf(here, sizeof(here), "%s%s: ", path_str(&v->path), path_tail(&v->path));
        if (strncmp(msg, here, strlen(here)) == 0)
            msg += strlen(here);
        snprintf(buf, len, "%s", msg);
        utf8_trim_tail(buf);
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
    utf8_trim_tail(reasons);
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
        const json_t *target = ref_resolve(v->root, json_string_value(ref), why, sizeof(why));
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
    path_init(&v.path);
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
    } else if (path_find_too_deep(&v.path, instance, 0, JSON_SCHEMA_MAX_DEPTH)) {
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
