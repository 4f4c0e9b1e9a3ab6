/*
 * ui_html.c — the status page's HTML (ui_html.h), rows in, HTML out.
 *
 * Why server-rendered text and nothing else: the page is read during an
 * incident, through a port-forward, maybe by a browser that blocks scripts;
 * it must work without JavaScript, without anything fetched from elsewhere
 * (the admin port answers with a Content-Security-Policy of default-src
 * 'none' plus inline styles), and reload itself (a meta refresh).
 *
 * Why one escaping function: every cell of every row may be attacker text.
 * Cells reach the document through exactly two doors, ui_html_escape (text
 * and attribute values, always quoted with ") and ui_url_encode (a key as a
 * path segment, then escaped too), so a review has two functions to check.
 * Class names that depend on a value (a state, a circuit) come from fixed
 * lists, never from the value itself.
 */
#include "admin/ui_html.h"

#include "lib/http_server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REPLACEMENT "\xEF\xBF\xBD" /* U+FFFD */
#define ELLIPSIS "\xE2\x80\xA6"    /* … */
#define DASH "\xE2\x80\x93"        /* – (no value) */
#define MIDDOT " \xC2\xB7 "        /* · */

/* ---------------------------------------------------------------- text */

static const char *html_entity(unsigned char c)
{
    switch (c) {
    case '&':
        return "&amp;";
    case '<':
        return "&lt;";
    case '>':
        return "&gt;";
    case '"':
        return "&quot;";
    case '\'':
        return "&#39;";
    default:
        return NULL;
    }
}

/* The sequence at p (n >= 1 bytes): its length, and whether it goes out as
 * it is (false: one U+FFFD for it, a control character or invalid UTF-8;
 * an invalid byte is a sequence of its own). */
static size_t html_sequence(const unsigned char *p, size_t n, bool *plain)
{
    if (p[0] < 0x80) {
        *plain = (p[0] >= 0x20 || p[0] == '\t' || p[0] == '\n' || p[0] == '\r') && p[0] != 0x7F;
        return 1;
    }
    size_t seq = utf8_sequence_length(p, n);
    /* C1 controls, U+0080..U+009F, are invisible: replaced like C0 ones */
    *plain = seq > 0 && !(seq == 2 && p[0] == 0xC2 && p[1] < 0xA0);
    return seq > 0 ? seq : 1;
}

void ui_html_escape(struct strbuf *out, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t run = 0; /* bytes before i that go out unchanged */
    for (size_t i = 0; i < n;) {
        const char *entity = html_entity(p[i]);
        bool plain = false;
        size_t seq = entity ? 1 : html_sequence(p + i, n - i, &plain);
        if (plain) {
            run += seq;
            i += seq;
            continue;
        }
        strbuf_append(out, s + i - run, run);
        run = 0;
        strbuf_append_str(out, entity ? entity : REPLACEMENT);
        i += seq;
    }
    strbuf_append(out, s + n - run, run);
}

void ui_html_escape_str(struct strbuf *out, const char *s)
{
    if (s)
        ui_html_escape(out, s, strlen(s));
}

size_t ui_utf8_prefix(const char *s, size_t n, size_t limit)
{
    if (n <= limit)
        return n;
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t seq = utf8_sequence_length(p + i, n - i);
        if (seq == 0)
            seq = 1; /* replaced when escaped: one byte at a time */
        if (i + seq > limit)
            break;
        i += seq;
    }
    return i;
}

void ui_html_escape_cut(struct strbuf *out, const char *s, size_t limit, long long total_bytes)
{
    if (s == NULL)
        return;
    size_t n = strlen(s);
    size_t keep = ui_utf8_prefix(s, n, limit);
    ui_html_escape(out, s, keep);
    if (keep < n || total_bytes > (long long)n)
        strbuf_append_str(out, ELLIPSIS);
    if (total_bytes > (long long)keep)
        strbuf_printf(out, " (%lld bytes)", total_bytes);
}

void ui_url_encode(struct strbuf *out, const char *s, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                          (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';
        if (unreserved) {
            strbuf_append(out, s + i, 1);
        } else {
            char escaped[3] = {'%', hex[c >> 4], hex[c & 15]};
            strbuf_append(out, escaped, 3);
        }
    }
}

/* One form-encoded value (n bytes) into out: its length, or -2 (a bad
 * escape) / -3 (too long), as ui_form_value says. */
static long form_decode(const char *s, size_t n, char *out, size_t out_size)
{
    long len = httpd_form_decode(s, n, out, out_size);
    return len == -1 ? -2 : len == -2 ? -3 : len;
}

long ui_form_value(const char *query, size_t n, const char *name, char *out, size_t out_size)
{
    size_t name_len = strlen(name);
    const char *p = query, *end = query + n;
    while (p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *field_end = amp ? amp : end;
        size_t field_len = (size_t)(field_end - p);
        if (field_len > name_len && p[name_len] == '=' && memcmp(p, name, name_len) == 0)
            return form_decode(p + name_len + 1, field_len - name_len - 1, out, out_size);
        if (field_len == name_len && memcmp(p, name, name_len) == 0)
            return form_decode("", 0, out, out_size); /* "key" without "=" */
        p = field_end + (amp ? 1 : 0);
    }
    return -1;
}

void ui_format_age(struct strbuf *out, double seconds)
{
    if (!(seconds > 0)) /* also NaN */
        seconds = 0;
    if (seconds > 1e9)
        seconds = 1e9;
    long long s = (long long)seconds; /* whole seconds: seconds > 0 here */
    if (s < 60)
        strbuf_printf(out, "%lld s", s);
    else if (s < 3600)
        strbuf_printf(out, "%lld min %lld s", s / 60, s % 60);
    else if (s < 86400)
        strbuf_printf(out, "%lld h %lld min", s / 3600, s % 3600 / 60);
    else
        strbuf_printf(out, "%lld d %lld h", s / 86400, s % 86400 / 3600);
}

/* ---------------------------------------------------------------- small pieces */

static const char *cell(const struct ui_rows *rows, size_t row, size_t column)
{
    return rows->cells[row * rows->columns + column];
}

static long long cell_int(const struct ui_rows *rows, size_t row, size_t column)
{
    const char *v = cell(rows, row, column);
    return v ? strtoll(v, NULL, 10) : 0;
}

/* A class for a state, a visible status, a circuit or an attempt class: from
 * this fixed list only ("" for anything else). */
static const char *tone_class(const char *value)
{
    static const struct {
        const char *value, *tone;
    } tones[] = {
        {"succeeded", "ok"},
        {"closed", "ok"},
        {"reconciled_executed", "ok"},
        {"failed", "bad"},
        {"unknown", "bad"},
        {"open", "bad"},
        {"ambiguous", "bad"},
        {"permanent_failure", "bad"},
        {"key_conflict", "bad"},
        {"not_sent", "warn"},
        {"retry_later", "warn"},
        {"reconcile_inconclusive", "warn"},
        {"reconciling", "warn"},
        {"half_open", "warn"},
        {"awaiting_approval", "warn"},
        {"pending", "info"},
        {"in_flight", "info"},
        {"delivering", "info"},
        {"cancelled", "muted"},
        {"released", "muted"},
        {"resolved", "muted"},
        {"reconciled_not_executed", "muted"},
    };
    for (size_t i = 0; value && i < sizeof(tones) / sizeof(tones[0]); i++)
        if (strcmp(value, tones[i].value) == 0)
            return tones[i].tone;
    return "";
}

static void badge(struct strbuf *out, const char *value)
{
    strbuf_printf(out, "<span class=\"badge %s\">", tone_class(value));
    ui_html_escape_str(out, value ? value : "?");
    strbuf_append_str(out, "</span>");
}

/* A key, linked to its own page (in its database, --databases). */
static void key_link(struct strbuf *out, const char *key, const char *database)
{
    if (key == NULL) {
        strbuf_append_str(out, DASH);
        return;
    }
    struct strbuf href;
    strbuf_init(&href);
    strbuf_append_str(&href, "/ui/intents/");
    ui_url_encode(&href, key, strlen(key));
    if (database) {
        strbuf_append_str(&href, "?database=");
        ui_url_encode(&href, database, strlen(database));
    }
    strbuf_append_str(out, "<a class=\"key\" href=\"");
    ui_html_escape(out, href.data, href.len);
    strbuf_append_str(out, "\">");
    ui_html_escape_str(out, key);
    strbuf_append_str(out, "</a>");
    strbuf_free(&href);
}

/* A table cell of a number; muted when it is 0. */
static void number_cell(struct strbuf *out, const char *value)
{
    bool zero = value == NULL || strcmp(value, "0") == 0;
    strbuf_append_str(out, zero ? "<td class=\"n zero\">" : "<td class=\"n\">");
    ui_html_escape_str(out, value ? value : "0");
    strbuf_append_str(out, "</td>");
}

/* A table cell of text (cut), or a dash for NULL. */
static void text_cell(struct strbuf *out, const char *value, const char *css_class)
{
    strbuf_printf(out, "<td%s%s%s>", css_class ? " class=\"" : "", css_class ? css_class : "",
                  css_class ? "\"" : "");
    if (value == NULL || *value == '\0')
        strbuf_append_str(out, DASH);
    else
        ui_html_escape_cut(out, value, UI_TEXT_MAX_BYTES, -1);
    strbuf_append_str(out, "</td>");
}

static bool shape_is(struct strbuf *out, const struct ui_rows *rows, size_t columns)
{
    if (rows->columns == columns)
        return true;
    strbuf_append_str(out, "<p class=\"err\">Unexpected result from the database.</p>");
    return false;
}

/* "<p class=note>showing N of M</p>" when the rows were bounded. */
static void more_note(struct strbuf *out, size_t shown, long long total, const char *what)
{
    if (total > (long long)shown)
        strbuf_printf(out, "<p class=\"note\">Showing %zu of %lld %s.</p>", shown, total, what);
}

/* One section of the page that is a table of rows: its heading (with the
 * total when total_col >= 0), the rows' shape checked, a note when there
 * are none, the table, and "showing N of M" when the rows were bounded.
 * before_table, when set, writes what goes between the heading and the
 * table (a summary, a note). */
struct table_section {
    const char *id;
    const char *title;
    size_t columns;
    int total_col;       /* the column that holds the total in every row; -1: none */
    bool total_in_title; /* "Title (total)" */
    const char *empty_note;
    const char *header; /* the <th> cells */
    void (*row)(struct strbuf *out, const struct ui_rows *rows, size_t i);
    const char *more; /* what "showing N of M ..." counts */
};

static void render_table_section(struct strbuf *out, const struct table_section *t,
                                 const struct ui_rows *rows,
                                 void (*before_table)(struct strbuf *, const struct ui_rows *))
{
    long long total = (long long)rows->count;
    if (t->total_col >= 0 && rows->count && rows->columns == t->columns)
        total = cell_int(rows, 0, (size_t)t->total_col);
    strbuf_printf(out, "<section id=\"%s\"><h2>%s", t->id, t->title);
    if (t->total_in_title)
        strbuf_printf(out, " (%lld)", total);
    strbuf_append_str(out, "</h2>\n");
    if (!shape_is(out, rows, t->columns)) {
        strbuf_append_str(out, "</section>\n");
        return;
    }
    if (before_table)
        before_table(out, rows);
    if (rows->count == 0) {
        strbuf_printf(out, "<p class=\"note\">%s</p></section>\n", t->empty_note);
        return;
    }
    strbuf_printf(out, "<div class=\"scroll\"><table><thead><tr>%s</tr></thead><tbody>\n",
                  t->header);
    for (size_t i = 0; i < rows->count; i++)
        t->row(out, rows, i);
    strbuf_append_str(out, "</tbody></table></div>\n");
    if (t->more)
        more_note(out, rows->count, total, t->more);
    strbuf_append_str(out, "</section>\n");
}

/* ---------------------------------------------------------------- page frame */

static const char page_style[] =
    ":root{color-scheme:light dark;--fg:#1f2328;--muted:#656d76;--bg:#fff;--line:#d0d7de;"
    "--head:#f6f8fa;--ok:#1a7f37;--warn:#9a6700;--bad:#cf222e;--info:#0969da}"
    "@media (prefers-color-scheme:dark){:root{--fg:#e6edf3;--muted:#8d96a0;--bg:#0d1117;"
    "--line:#30363d;--head:#161b22;--ok:#3fb950;--warn:#d29922;--bad:#f85149;--info:#58a6ff}}"
    "*{box-sizing:border-box}"
    "body{margin:0;font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;"
    "color:var(--fg);background:var(--bg)}"
    "header{padding:10px 20px;background:var(--head);border-bottom:1px solid var(--line)}"
    ".bar{display:flex;flex-wrap:wrap;gap:6px 16px;align-items:baseline}"
    ".home{font-weight:600;color:var(--fg);text-decoration:none}"
    ".meta{color:var(--muted)}"
    "form.search{display:flex;gap:6px;align-items:center;margin:8px 0 0}"
    "form.search input{flex:0 1 420px;padding:4px 6px;font:inherit;font-family:ui-monospace,"
    "Menlo,Consolas,monospace;border:1px solid var(--line);border-radius:4px;"
    "background:var(--bg);color:var(--fg)}"
    "form.search button{padding:4px 10px;font:inherit}"
    "h1{font-size:18px;margin:10px 0 0;word-break:break-all}"
    "main{padding:4px 20px 20px}"
    "h2{font-size:15px;margin:20px 0 6px}"
    "table{border-collapse:collapse;width:100%}"
    "th,td{text-align:left;padding:3px 8px;border-bottom:1px solid var(--line);"
    "vertical-align:top}"
    "th{font-weight:600;background:var(--head)}"
    ".scroll{overflow-x:auto}"
    ".name{white-space:nowrap}"
    ".circuit{min-width:240px}"
    "td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}"
    "th.n{text-align:right}"
    ".zero{color:var(--muted)}"
    ".key,code{font-family:ui-monospace,Menlo,Consolas,monospace;word-break:break-all}"
    ".small{font-size:12px;color:var(--muted)}"
    ".t{white-space:nowrap}"
    ".text{max-width:420px;word-break:break-word}"
    ".badge{display:inline-block;padding:0 6px;border:1px solid currentColor;"
    "border-radius:9px;font-size:12px;white-space:nowrap}"
    ".ok{color:var(--ok)}.bad{color:var(--bad)}.warn{color:var(--warn)}"
    ".info{color:var(--info)}.muted{color:var(--muted)}"
    ".summary{display:flex;flex-wrap:wrap;gap:8px 24px;margin:8px 0}"
    ".summary b{font-size:18px;font-variant-numeric:tabular-nums}"
    "dl{display:grid;grid-template-columns:max-content 1fr;gap:3px 16px;margin:0}"
    "dt{color:var(--muted)}dd{margin:0;word-break:break-word}"
    ".err{color:var(--bad)}.note{color:var(--muted);margin:4px 0}"
    "footer{padding:10px 20px;color:var(--muted);border-top:1px solid var(--line);"
    "font-size:12px}";

void ui_page_begin(struct strbuf *out, const struct ui_page_info *info)
{
    strbuf_append_str(out,
                      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    if (info->refresh)
        strbuf_printf(out, "<meta http-equiv=\"refresh\" content=\"%d\">\n", UI_REFRESH_SECONDS);
    strbuf_append_str(out, "<meta name=\"viewport\" content=\"width=device-width, "
                           "initial-scale=1\">\n<meta name=\"referrer\" content=\"no-referrer\">\n"
                           "<title>");
    ui_html_escape_str(out, info->title);
    strbuf_append_str(out, MIDDOT "outbox-relay</title>\n<style>");
    strbuf_append_str(out, page_style);
    strbuf_append_str(out, "</style>\n</head>\n<body>\n<header>\n<div class=\"bar\">"
                           "<a class=\"home\" href=\"/ui\">outbox-relay status</a>"
                           "<span class=\"meta\">");
    if (info->relay) {
        strbuf_append_str(out, "relay <b>");
        ui_html_escape_str(out, info->relay);
        strbuf_append_str(out, "</b>" MIDDOT);
    }
    ui_html_escape_str(out, info->now_utc ? info->now_utc : "");
    if (info->refresh)
        strbuf_printf(out, MIDDOT "refreshes every %d s", UI_REFRESH_SECONDS);
    strbuf_append_str(out, "</span></div>\n<form class=\"search\" method=\"get\" "
                           "action=\"/ui/intents\" role=\"search\"><label for=\"key\">Key</label> "
                           "<input id=\"key\" name=\"key\" type=\"search\" maxlength=\"255\" "
                           "required placeholder=\"run-7f3a:step-4\" value=\"");
    ui_html_escape_str(out, info->key);
    strbuf_append_str(out, "\">");
    if (info->database) {
        strbuf_append_str(out, "<input type=\"hidden\" name=\"database\" value=\"");
        ui_html_escape_str(out, info->database);
        strbuf_append_str(out, "\">");
    }
    strbuf_append_str(out, " <button type=\"submit\">Show its life</button></form>\n<h1>");
    ui_html_escape_str(out, info->title);
    strbuf_append_str(out, "</h1>\n</header>\n<main>\n");
}

void ui_page_end(struct strbuf *out)
{
    strbuf_printf(out,
                  "</main>\n<footer>Read only: outbox.target_health, outbox.stuck, "
                  "outbox.approvals, outbox.outcome and outbox.attempts. Payloads, target URLs, "
                  "headers and "
                  "secrets are never shown; texts are cut at %d bytes.</footer>\n"
                  "</body>\n</html>\n",
                  UI_TEXT_MAX_BYTES);
}

void ui_error_page(struct strbuf *out, const struct ui_page_info *info, const char *message)
{
    ui_page_begin(out, info);
    strbuf_append_str(out, "<section id=\"error\"><p class=\"err\">");
    ui_html_escape_str(out, message);
    strbuf_append_str(out, "</p></section>\n");
    ui_page_end(out);
}

void ui_render_section_error(struct strbuf *out, const char *id, const char *heading,
                             const char *why)
{
    strbuf_append_str(out, "<section id=\"");
    ui_html_escape_str(out, id);
    strbuf_append_str(out, "\"><h2>");
    ui_html_escape_str(out, heading);
    strbuf_append_str(out, "</h2><p class=\"err\">");
    ui_html_escape_str(out, why);
    strbuf_append_str(out, "</p></section>\n");
}

/* ---------------------------------------------------------------- overview */

/* Live intents over all targets, above the table. */
static void targets_summary(struct strbuf *out, const struct ui_rows *rows)
{
    static const struct {
        enum ui_target_column column;
        const char *label;
    } sums[] = {
        {UI_TARGET_PENDING, "pending"},
        {UI_TARGET_IN_FLIGHT, "in flight"},
        {UI_TARGET_UNKNOWN, "unknown"},
        {UI_TARGET_AWAITING_APPROVAL, "awaiting approval"},
        {UI_TARGET_SUCCEEDED_5M, "succeeded (5 min)"},
        {UI_TARGET_FAILED_5M, "failed (5 min)"},
    };
    strbuf_append_str(out, "<div class=\"summary\">");
    for (size_t k = 0; k < sizeof(sums) / sizeof(sums[0]); k++) {
        long long total = 0;
        for (size_t i = 0; i < rows->count; i++)
            total += cell_int(rows, i, sums[k].column);
        strbuf_printf(out, "<span><b>%lld</b> %s</span>", total, sums[k].label);
    }
    strbuf_append_str(out, "</div>\n");
}

/* The circuit cell: its state, and while not closed since when, why and the
 * next probe; a Retry-After pause; a disabled target. */
static void circuit_cell(struct strbuf *out, const struct ui_rows *rows, size_t i)
{
    const char *circuit = cell(rows, i, UI_TARGET_CIRCUIT);
    strbuf_append_str(out, "<td class=\"circuit\">");
    badge(out, circuit ? circuit : "closed");
    const char *enabled = cell(rows, i, UI_TARGET_ENABLED);
    if (enabled && strcmp(enabled, "f") == 0)
        strbuf_append_str(out, " <span class=\"badge bad\">disabled</span>");
    if (circuit && strcmp(circuit, "closed") != 0) {
        strbuf_append_str(out, "<div class=\"small\">since ");
        ui_html_escape_str(out, cell(rows, i, UI_TARGET_CIRCUIT_SINCE));
        strbuf_append_str(out, " UTC");
        const char *reason = cell(rows, i, UI_TARGET_CIRCUIT_REASON);
        if (reason) {
            strbuf_append_str(out, ": ");
            ui_html_escape_cut(out, reason, UI_TEXT_MAX_BYTES, -1);
        }
        const char *probe = cell(rows, i, UI_TARGET_NEXT_PROBE_AT);
        if (probe) {
            strbuf_append_str(out, "; next probe ");
            ui_html_escape_str(out, probe);
            strbuf_append_str(out, " UTC");
        }
        strbuf_append_str(out, "</div>");
    }
    const char *paused = cell(rows, i, UI_TARGET_PAUSED_UNTIL);
    if (paused) {
        strbuf_append_str(out, "<div class=\"small\">paused (Retry-After) until ");
        ui_html_escape_str(out, paused);
        strbuf_append_str(out, " UTC");
        strbuf_append_str(out, "</div>");
    }
    strbuf_append_str(out, "</td>");
}

static void target_row(struct strbuf *out, const struct ui_rows *rows, size_t i)
{
    strbuf_append_str(out, "<tr><td class=\"name\"><code>");
    ui_html_escape_str(out, cell(rows, i, UI_TARGET_NAME));
    strbuf_append_str(out, "</code></td>");
    circuit_cell(out, rows, i);
    static const enum ui_target_column counts[] = {
        UI_TARGET_PENDING,           UI_TARGET_IN_FLIGHT,    UI_TARGET_UNKNOWN,
        UI_TARGET_AWAITING_APPROVAL, UI_TARGET_SUCCEEDED_5M, UI_TARGET_FAILED_5M,
        UI_TARGET_CANCELLED_5M,
    };
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
        number_cell(out, cell(rows, i, counts[k]));
    const char *oldest = cell(rows, i, UI_TARGET_OLDEST_PENDING_S);
    double oldest_s = oldest ? strtod(oldest, NULL) : 0;
    strbuf_append_str(out, oldest_s >= 1 ? "<td class=\"n\">" : "<td class=\"n zero\">");
    ui_format_age(out, oldest_s);
    const char *ratio = cell(rows, i, UI_TARGET_SUCCESS_RATIO_5M);
    if (ratio) {
        double r = strtod(ratio, NULL);
        long long attempts = cell_int(rows, i, UI_TARGET_ATTEMPTS_5M);
        strbuf_printf(out,
                      "</td><td class=\"n %s\">%.1f %%<div class=\"small\">of %lld attempt%s"
                      "</div></td>",
                      r >= 0.99  ? "ok"
                      : r >= 0.9 ? "warn"
                                 : "bad",
                      r * 100, attempts, attempts == 1 ? "" : "s");
    } else {
        strbuf_append_str(out, "</td><td class=\"n zero\">" DASH "</td>");
    }
    const char *p95 = cell(rows, i, UI_TARGET_P95_MS_5M);
    strbuf_append_str(out, p95 ? "<td class=\"n\">" : "<td class=\"n zero\">");
    ui_html_escape_str(out, p95 ? p95 : DASH);
    strbuf_append_str(out, p95 ? " ms</td></tr>\n" : "</td></tr>\n");
}

void ui_render_targets(struct strbuf *out, const struct ui_rows *rows)
{
    static const struct table_section section = {
        .id = "targets",
        .title = "Targets",
        .columns = UI_TARGET_COLUMNS,
        .total_col = UI_TARGET_TOTAL,
        .total_in_title = false,
        .empty_note = "No target is registered.",
        .header = "<th>target</th><th>circuit</th><th class=\"n\">pending</th>"
                  "<th class=\"n\">in flight</th><th class=\"n\">unknown</th>"
                  "<th class=\"n\">awaiting approval</th><th class=\"n\">succeeded 5 min</th>"
                  "<th class=\"n\">failed 5 min</th><th class=\"n\">cancelled 5 min</th>"
                  "<th class=\"n\">oldest pending</th><th class=\"n\">success 5 min</th>"
                  "<th class=\"n\">p95 5 min</th>",
        .row = target_row,
        .more = "targets",
    };
    render_table_section(out, &section, rows, targets_summary);
}

static void stuck_row(struct strbuf *out, const struct ui_rows *rows, size_t i)
{
    strbuf_append_str(out, "<tr><td>");
    key_link(out, cell(rows, i, UI_STUCK_KEY), rows->database);
    strbuf_append_str(out, "</td>");
    text_cell(out, cell(rows, i, UI_STUCK_TARGET), NULL);
    strbuf_append_str(out, "<td>");
    badge(out, cell(rows, i, UI_STUCK_STATE));
    strbuf_append_str(out, "</td>");
    text_cell(out, cell(rows, i, UI_STUCK_REASON), "text");
    const char *age = cell(rows, i, UI_STUCK_AGE_S);
    strbuf_append_str(out, "<td class=\"n\">");
    ui_format_age(out, age ? strtod(age, NULL) : 0);
    strbuf_append_str(out, "</td>");
    number_cell(out, cell(rows, i, UI_STUCK_ATTEMPTS));
    text_cell(out, cell(rows, i, UI_STUCK_LAST_ERROR), "text");
    strbuf_append_str(out, "</tr>\n");
}

void ui_render_stuck(struct strbuf *out, const struct ui_rows *rows)
{
    static const struct table_section section = {
        .id = "stuck",
        .title = "Stuck keys",
        .columns = UI_STUCK_COLUMNS,
        .total_col = UI_STUCK_TOTAL,
        .total_in_title = true,
        .empty_note = "Nothing is stuck.",
        .header = "<th>key</th><th>target</th><th>state</th><th>reason</th><th class=\"n\">age</th>"
                  "<th class=\"n\">attempts</th><th>last error</th>",
        .row = stuck_row,
        .more = "stuck keys, the newest first (outbox.stuck has them all)",
    };
    render_table_section(out, &section, rows, NULL);
}

static void approval_row(struct strbuf *out, const struct ui_rows *rows, size_t i)
{
    strbuf_append_str(out, "<tr><td>");
    key_link(out, cell(rows, i, UI_APPROVAL_KEY), rows->database);
    strbuf_append_str(out, "</td>");
    text_cell(out, cell(rows, i, UI_APPROVAL_TARGET), NULL);
    const char *age = cell(rows, i, UI_APPROVAL_AGE_S);
    strbuf_append_str(out, "<td class=\"n\">");
    ui_format_age(out, age ? strtod(age, NULL) : 0);
    strbuf_append_str(out, "</td><td><code>");
    const char *rule = cell(rows, i, UI_APPROVAL_RULE);
    if (rule)
        ui_html_escape_cut(out, rule, UI_TEXT_MAX_BYTES, -1);
    else
        strbuf_append_str(out, DASH);
    strbuf_append_str(out, "</code></td>");
    text_cell(out, cell(rows, i, UI_APPROVAL_REASON), "text");
    strbuf_append_str(out, "</tr>\n");
}

void ui_render_approvals(struct strbuf *out, const struct ui_rows *rows)
{
    static const struct table_section section = {
        .id = "approvals",
        .title = "Awaiting approval",
        .columns = UI_APPROVAL_COLUMNS,
        .total_col = UI_APPROVAL_TOTAL,
        .total_in_title = true,
        .empty_note = "Nothing awaits approval.",
        .header = "<th>key</th><th>target</th><th class=\"n\">age</th><th>rule</th>"
                  "<th>why it is held</th>",
        .row = approval_row,
        .more = "intents awaiting approval, the oldest first (outbox.approvals has them all; "
                "outbox-relay approve or reject decides)",
    };
    render_table_section(out, &section, rows, NULL);
}

static void database_row(struct strbuf *out, const struct ui_rows *rows, size_t i)
{
    const char *name = cell(rows, i, UI_DATABASE_NAME);
    struct strbuf href;
    strbuf_init(&href);
    strbuf_append_str(&href, "/ui?database=");
    ui_url_encode(&href, name ? name : "", name ? strlen(name) : 0);
    strbuf_append_str(out, "<tr><td><a class=\"database\" href=\"");
    ui_html_escape(out, href.data, href.len);
    strbuf_append_str(out, "\">");
    ui_html_escape_str(out, name ? name : "?");
    strbuf_append_str(out, "</a></td>");
    strbuf_free(&href);
    text_cell(out, cell(rows, i, UI_DATABASE_STATE), "text");
    for (size_t c = UI_DATABASE_PENDING; c <= UI_DATABASE_AWAITING_APPROVAL; c++) {
        const char *n = cell(rows, i, c);
        if (n)
            number_cell(out, n);
        else
            strbuf_append_str(out, "<td class=\"n\">" DASH "</td>");
    }
    strbuf_append_str(out, "</tr>\n");
}

void ui_render_databases(struct strbuf *out, const struct ui_rows *rows)
{
    static const struct table_section section = {
        .id = "databases",
        .title = "Databases",
        .columns = UI_DATABASE_COLUMNS,
        .total_col = -1,
        .total_in_title = true,
        .empty_note = "This relay serves no database now.",
        .header = "<th>database</th><th>state</th><th class=\"n\">pending</th>"
                  "<th class=\"n\">in flight</th><th class=\"n\">unknown</th>"
                  "<th class=\"n\">awaiting approval</th>",
        .row = database_row,
        .more = NULL,
    };
    render_table_section(out, &section, rows, NULL);
    strbuf_append_str(out, "<p class=\"note\">Counts of the relay's last look at each database "
                           "(every 5 s). A database's page shows its targets, stuck keys, "
                           "approvals and failures.</p>\n");
}

/* The window of the failures section, for its note (set by ui_render_failures). */
static int failures_window;

static void failures_note(struct strbuf *out, const struct ui_rows *rows)
{
    strbuf_printf(out,
                  "<p class=\"note\">The last %zu attempts of the last %d minutes that did not "
                  "succeed, the newest first.</p>\n",
                  rows->count, failures_window);
}

static void failure_row(struct strbuf *out, const struct ui_rows *rows, size_t i)
{
    strbuf_append_str(out, "<tr>");
    text_cell(out, cell(rows, i, UI_FAILURE_AT), "t");
    strbuf_append_str(out, "<td>");
    key_link(out, cell(rows, i, UI_FAILURE_KEY), rows->database);
    strbuf_append_str(out, "</td>");
    text_cell(out, cell(rows, i, UI_FAILURE_TARGET), NULL);
    number_cell(out, cell(rows, i, UI_FAILURE_ATTEMPT));
    strbuf_append_str(out, "<td>");
    badge(out, cell(rows, i, UI_FAILURE_CLASS));
    strbuf_append_str(out, "</td>");
    text_cell(out, cell(rows, i, UI_FAILURE_HTTP_STATUS), "n");
    text_cell(out, cell(rows, i, UI_FAILURE_ERROR), "text");
    const char *latency = cell(rows, i, UI_FAILURE_LATENCY_MS);
    strbuf_append_str(out, "<td class=\"n\">");
    ui_html_escape_str(out, latency ? latency : DASH);
    strbuf_append_str(out, latency ? " ms</td></tr>\n" : "</td></tr>\n");
}

void ui_render_failures(struct strbuf *out, const struct ui_rows *rows, int window_minutes)
{
    char empty[96];
    snprintf(empty, sizeof(empty), "No failed attempt in the last %d minutes.", window_minutes);
    const struct table_section section = {
        .id = "failures",
        .title = "Recent failures",
        .columns = UI_FAILURE_COLUMNS,
        .total_col = -1,
        .total_in_title = false,
        .empty_note = empty,
        .header =
            "<th>time (UTC)</th><th>key</th><th>target</th><th class=\"n\">attempt</th>"
            "<th>class</th><th class=\"n\">HTTP</th><th>error</th><th class=\"n\">latency</th>",
        .row = failure_row,
        .more = NULL,
    };
    if (rows->count > 0 && rows->columns == UI_FAILURE_COLUMNS)
        failures_window = window_minutes;
    render_table_section(out, &section, rows, rows->count ? failures_note : NULL);
}

/* ---------------------------------------------------------------- the key page */

/* One <dt>/<dd> pair of text (cut); nothing when the value is NULL. */
static void definition(struct strbuf *out, const char *term, const char *value)
{
    if (value == NULL)
        return;
    strbuf_append_str(out, "<dt>");
    ui_html_escape_str(out, term);
    strbuf_append_str(out, "</dt><dd>");
    ui_html_escape_cut(out, value, UI_TEXT_MAX_BYTES, -1);
    strbuf_append_str(out, "</dd>\n");
}

void ui_render_intent(struct strbuf *out, const char *key, const struct ui_rows *outcome)
{
    strbuf_append_str(out, "<section id=\"intent\"><h2>Intent</h2>\n");
    if (!shape_is(out, outcome, UI_INTENT_COLUMNS) || outcome->count == 0) {
        strbuf_append_str(out, "</section>\n");
        return;
    }
    strbuf_append_str(out, "<dl>\n<dt>key</dt><dd><code>");
    ui_html_escape_str(out, key);
    strbuf_append_str(out, "</code></dd>\n<dt>status</dt><dd>");
    badge(out, cell(outcome, 0, UI_INTENT_STATUS));
    strbuf_append_str(out, " ");
    ui_html_escape_cut(out, cell(outcome, 0, UI_INTENT_MESSAGE), UI_TEXT_MAX_BYTES, -1);
    strbuf_append_str(out, "</dd>\n<dt>state</dt><dd>");
    badge(out, cell(outcome, 0, UI_INTENT_STATE));
    strbuf_append_str(out, "</dd>\n");
    definition(out, "target", cell(outcome, 0, UI_INTENT_TARGET));
    definition(out, "attempts", cell(outcome, 0, UI_INTENT_ATTEMPTS));
    definition(out, "response status", cell(outcome, 0, UI_INTENT_RESPONSE_STATUS));
    const char *body = cell(outcome, 0, UI_INTENT_RESPONSE_BODY);
    if (body) {
        strbuf_append_str(out, "<dt>response body</dt><dd><code>");
        ui_html_escape_cut(out, body, UI_TEXT_MAX_BYTES,
                           cell_int(outcome, 0, UI_INTENT_RESPONSE_BYTES));
        strbuf_append_str(out, "</code></dd>\n");
    }
    definition(out, "updated (UTC)", cell(outcome, 0, UI_INTENT_UPDATED_AT));
    strbuf_append_str(out, "</dl></section>\n");
}

void ui_render_details(struct strbuf *out, const struct ui_rows *details)
{
    strbuf_append_str(out, "<section id=\"details\"><h2>Details</h2>\n");
    if (!shape_is(out, details, UI_DETAIL_COLUMNS)) {
        strbuf_append_str(out, "</section>\n");
        return;
    }
    if (details->count == 0) {
        strbuf_append_str(out, "<p class=\"note\">The intent's row and attempts were pruned: only "
                               "its outcome is remembered.</p></section>\n");
        return;
    }
    strbuf_append_str(out, "<dl>\n");
    definition(out, "created (UTC)", cell(details, 0, UI_DETAIL_CREATED_AT));
    definition(out, "run", cell(details, 0, UI_DETAIL_RUN_ID));
    definition(out, "next attempt (UTC)", cell(details, 0, UI_DETAIL_NEXT_ATTEMPT_AT));
    definition(out, "lease owner", cell(details, 0, UI_DETAIL_LEASE_OWNER));
    definition(out, "lease until (UTC)", cell(details, 0, UI_DETAIL_LEASE_EXPIRES_AT));
    definition(out, "last error", cell(details, 0, UI_DETAIL_LAST_ERROR));
    definition(out, "decided by", cell(details, 0, UI_DETAIL_DECIDED_BY));
    definition(out, "decision note", cell(details, 0, UI_DETAIL_DECISION_NOTE));
    const char *compensates = cell(details, 0, UI_DETAIL_COMPENSATES);
    if (compensates) {
        strbuf_append_str(out, "<dt>compensates</dt><dd>");
        key_link(out, compensates, details->database);
        strbuf_append_str(out, "</dd>\n");
    }
    strbuf_append_str(out, "</dl></section>\n");
}

static void attempt_row(struct strbuf *out, const struct ui_rows *rows, size_t i)
{
    strbuf_append_str(out, "<tr>");
    number_cell(out, cell(rows, i, UI_ATTEMPT_NUMBER));
    text_cell(out, cell(rows, i, UI_ATTEMPT_AT), "t");
    text_cell(out, cell(rows, i, UI_ATTEMPT_RELAY), NULL);
    strbuf_append_str(out, "<td>");
    badge(out, cell(rows, i, UI_ATTEMPT_CLASS));
    const char *recorded = cell(rows, i, UI_ATTEMPT_RECORDED);
    if (recorded && strcmp(recorded, "f") == 0)
        strbuf_append_str(out, " <span class=\"small\">(fenced out, not applied)</span>");
    strbuf_append_str(out, "</td>");
    const char *sent = cell(rows, i, UI_ATTEMPT_REQUEST_SENT);
    text_cell(out, sent == NULL ? "not known" : strcmp(sent, "t") == 0 ? "yes" : "no", NULL);
    text_cell(out, cell(rows, i, UI_ATTEMPT_HTTP_STATUS), "n");
    const char *latency = cell(rows, i, UI_ATTEMPT_LATENCY_MS);
    strbuf_append_str(out, "<td class=\"n\">");
    ui_html_escape_str(out, latency ? latency : DASH);
    strbuf_append_str(out, latency ? " ms</td>" : "</td>");
    text_cell(out, cell(rows, i, UI_ATTEMPT_ERROR), "text");
    const char *body = cell(rows, i, UI_ATTEMPT_RESPONSE_BODY);
    strbuf_append_str(out, "<td class=\"text\"><code>");
    if (body)
        ui_html_escape_cut(out, body, UI_TEXT_MAX_BYTES,
                           cell_int(rows, i, UI_ATTEMPT_RESPONSE_BYTES));
    else
        strbuf_append_str(out, DASH);
    strbuf_append_str(out, "</code></td></tr>\n");
}

void ui_render_attempts(struct strbuf *out, const struct ui_rows *rows)
{
    static const struct table_section section = {
        .id = "attempts",
        .title = "Attempts",
        .columns = UI_ATTEMPT_COLUMNS,
        .total_col = UI_ATTEMPT_TOTAL,
        .total_in_title = true,
        .empty_note = "No attempt yet.",
        .header = "<th class=\"n\">#</th><th>time (UTC)</th><th>relay</th><th>class</th>"
                  "<th>request sent</th><th class=\"n\">HTTP</th><th class=\"n\">latency</th>"
                  "<th>error</th><th>response body</th>",
        .row = attempt_row,
        .more = "attempts, the first ones (outbox.attempts has them all)",
    };
    render_table_section(out, &section, rows, NULL);
}
