/*
 * json_schema_regex.c — JSON Schema's patterns (ECMA-262 regular
 * expressions) translated into POSIX ERE, for regcomp/regexec (glibc, the C
 * locale: bytes). Part of the subset of json_schema.h; the check
 * (json_schema_check.c) refuses a pattern this file cannot translate, the
 * validation (json_schema.c) compiles and runs the translation.
 *
 * DESIGN
 *
 * pattern_translate rewrites the ECMA-262 syntax into an ERE with the same
 * meaning over UTF-8 text: a non-ASCII literal becomes a group of its
 * bytes, so a quantifier repeats the whole character; . \S \D \W and
 * negated classes become an ASCII bracket or-ed with the UTF-8 byte
 * sequences of the non-ASCII code points they include; \d \w \s become
 * brackets (plus, for \s, the Unicode spaces ECMA-262 lists). What has no
 * faithful ERE (lookaround, backreferences, \p{...}) is refused with the
 * construct named. Bracket expressions are emitted from a character set in
 * a canonical order, so ECMA-262 text can never become a POSIX-only
 * construct ([:alpha:], [.x.], a leading ]). regcomp's cost grows faster
 * than the size of counted repetitions once written out: that size is
 * weighed as the pattern is read, and a pattern past RE_MAX_WEIGHT atoms is
 * refused. Nothing outlives a call: the translation is freed as soon as
 * regcomp has read it.
 */
#include "mcp/json_schema.h"

#include "lib/utf8.h"
#include "mcp/json_schema_internal.h"

#include <regex.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* count hex digits at the cursor; false when they are not there. */
static bool tr_hex(struct re_tr *t, size_t count, uint32_t *out)
{
    uint32_t v = 0;
    for (size_t k = 0; k < count; k++) {
        if (t->i >= t->n || hex_digit_value(t->p[t->i]) < 0)
            return false;
        v = v * 16 + (uint32_t)hex_digit_value(t->p[t->i++]);
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
        while (t->i < t->n && hex_digit_value(t->p[t->i]) >= 0) {
            v = v * 16 + (uint32_t)hex_digit_value(t->p[t->i++]);
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
bool js_pattern_compile_text(const char *text, size_t len, regex_t *re, char *why, size_t why_len)
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

bool js_pattern_compile(const json_t *pattern, regex_t *re, char *why, size_t why_len)
{
    return js_pattern_compile_text(json_string_value(pattern), json_string_length(pattern), re, why,
                                   why_len);
}
