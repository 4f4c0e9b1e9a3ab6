/*
 * json_schema_format.c — the asserted formats of json_schema_format.h.
 *
 * DESIGN
 *
 * Each format is a grammar read left to right over the bytes of the
 * string; a byte outside ASCII, a NUL, a space or a trailing newline where
 * the grammar has none makes the string invalid. Exactly:
 *
 *   date       RFC 3339 full-date: YYYY-MM-DD, four digits, two, two; the
 *              month 01-12, the day 01 to the days of that month in the
 *              proleptic Gregorian calendar (02-29 only in leap years:
 *              divisible by 4 and not by 100, or by 400).
 *   date-time  RFC 3339 date-time: a date as above, T or t, HH:MM:SS with
 *              hour 00-23, minute 00-59, second 00-60, an optional fraction
 *              (a dot and one or more digits), then Z, z, or +HH:MM / -HH:MM
 *              (offset hour 00-23, minute 00-59). Second 60 (a leap second)
 *              only when the time, brought to UTC with the offset, is 23:59.
 *   email      RFC 5321 Mailbox: a local part, @, a domain. The local part
 *              is dot-separated atoms of letters, digits and
 *              !#$%&'*+-/=?^_`{|}~ (no dot first, last or doubled), or a
 *              quoted string of printable ASCII in which " and \ are
 *              escaped with \. The domain is a host name (labels of 1-63
 *              letters, digits and hyphens, not starting or ending with a
 *              hyphen, 253 bytes at most) or an address literal:
 *              [dotted IPv4] or [IPv6:address] (inet_pton decides).
 *              At most 320 bytes in all. No display names, no comments.
 *   uuid       RFC 9562's text form: 8-4-4-4-12 hexadecimal digits (upper,
 *              lower or mixed case) with hyphens; any version and variant.
 */
#include "mcp/json_schema_format.h"

#include <arpa/inet.h>
#include <string.h>

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool is_hex(char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* n digits at s as a number; false when one is not a digit. */
static bool digits(const char *s, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (!is_digit(s[i]))
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

static int days_in_month(int year, int month)
{
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    return month == 2 && leap ? 29 : days[month - 1];
}

/* YYYY-MM-DD at s (at least 10 bytes). */
static bool full_date(const char *s)
{
    int y, m, d;
    return digits(s, 4, &y) && s[4] == '-' && digits(s + 5, 2, &m) && s[7] == '-' &&
           digits(s + 8, 2, &d) && m >= 1 && m <= 12 && d >= 1 && d <= days_in_month(y, m);
}

static bool valid_date(const char *s, size_t n)
{
    return n == 10 && full_date(s);
}

static bool valid_date_time(const char *s, size_t n)
{
    if (n < 20 || !full_date(s) || (s[10] != 'T' && s[10] != 't'))
        return false;
    int h, mi, sec;
    const char *t = s + 11;
    if (!digits(t, 2, &h) || t[2] != ':' || !digits(t + 3, 2, &mi) || t[5] != ':' ||
        !digits(t + 6, 2, &sec) || h > 23 || mi > 59 || sec > 60)
        return false;
    size_t i = 19;
    if (i < n && s[i] == '.') {
        size_t start = ++i;
        while (i < n && is_digit(s[i]))
            i++;
        if (i == start)
            return false;
    }
    int off = 0; /* minutes east of UTC */
    if (i + 1 == n && (s[i] == 'Z' || s[i] == 'z')) {
        i++;
    } else if (i + 6 == n && (s[i] == '+' || s[i] == '-')) {
        int oh, om;
        if (!digits(s + i + 1, 2, &oh) || s[i + 3] != ':' || !digits(s + i + 4, 2, &om) ||
            oh > 23 || om > 59)
            return false;
        off = (s[i] == '+' ? 1 : -1) * (oh * 60 + om);
        i += 6;
    } else {
        return false;
    }
    if (sec == 60) {
        int utc = ((h * 60 + mi - off) % 1440 + 1440) % 1440;
        if (utc != 23 * 60 + 59)
            return false;
    }
    return i == n;
}

static bool is_atext(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) ||
           (c != '\0' && strchr("!#$%&'*+-/=?^_`{|}~", c) != NULL);
}

static bool valid_hostname(const char *s, size_t n)
{
    if (n == 0 || n > 253)
        return false;
    size_t label = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i == n || s[i] == '.') {
            if (label == 0 || label > 63 || s[i - label] == '-' || s[i - 1] == '-')
                return false;
            label = 0;
        } else if ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || is_digit(s[i]) ||
                   s[i] == '-') {
            label++;
        } else {
            return false;
        }
    }
    return true;
}

static bool valid_address_literal(const char *s, size_t n)
{
    char buf[64];
    unsigned char addr[16];
    if (n < 2 || s[0] != '[' || s[n - 1] != ']' || n - 2 >= sizeof(buf))
        return false;
    memcpy(buf, s + 1, n - 2);
    buf[n - 2] = '\0';
    if (memchr(s, '\0', n))
        return false;
    if (strncmp(buf, "IPv6:", 5) == 0)
        return inet_pton(AF_INET6, buf + 5, addr) == 1;
    return inet_pton(AF_INET, buf, addr) == 1;
}

static bool valid_email(const char *s, size_t n)
{
    if (n == 0 || n > 320)
        return false;
    size_t i = 0;
    if (s[0] == '"') {
        for (i = 1; i < n && s[i] != '"'; i++) {
            if (s[i] == '\\')
                i++;
            if (i >= n || (unsigned char)s[i] < 32 || (unsigned char)s[i] > 126)
                return false;
        }
        if (i >= n || i == 1)
            return false;
        i++;
    } else {
        bool after_dot = true;
        for (; i < n && s[i] != '@'; i++) {
            if (s[i] == '.') {
                if (after_dot)
                    return false;
                after_dot = true;
            } else if (is_atext(s[i])) {
                after_dot = false;
            } else {
                return false;
            }
        }
        if (i == 0 || after_dot)
            return false;
    }
    if (i >= n || s[i] != '@')
        return false;
    const char *domain = s + i + 1;
    size_t len = n - i - 1;
    return len > 0 && domain[0] == '[' ? valid_address_literal(domain, len)
                                       : valid_hostname(domain, len);
}

static bool valid_uuid(const char *s, size_t n)
{
    if (n != 36)
        return false;
    for (size_t i = 0; i < n; i++) {
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? s[i] != '-' : !is_hex(s[i]))
            return false;
    }
    return true;
}

static const struct {
    const char *name;
    bool (*valid)(const char *, size_t);
} formats[] = {
    {"date-time", valid_date_time},
    {"date", valid_date},
    {"email", valid_email},
    {"uuid", valid_uuid},
};

bool json_schema_format_known(const char *format)
{
    for (size_t k = 0; k < sizeof(formats) / sizeof(formats[0]); k++)
        if (strcmp(format, formats[k].name) == 0)
            return true;
    return false;
}

bool json_schema_format_valid(const char *format, const char *s, size_t n)
{
    for (size_t k = 0; k < sizeof(formats) / sizeof(formats[0]); k++)
        if (strcmp(format, formats[k].name) == 0)
            return formats[k].valid(s, n);
    return true;
}
