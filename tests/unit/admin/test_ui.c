/*
 * test_ui.c — the status page's HTML (relay/admin/ui_html.h): escaping, URL
 * encoding, truncation, the search form's query, and every section
 * rendered from fixed rows.
 *
 * The property that matters most: whatever a cell holds (a key is attacker
 * text, so are response bodies and errors), it comes out as text. So each
 * renderer is also fed rows whose every cell is markup, and the output may
 * hold no tag from them.
 */
#include "../unit.h"

#include "lib/strbuf.h"
#include "admin/ui_html.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ROWS(cells_array, columns_count)                                                           \
    ((struct ui_rows){.count = sizeof(cells_array) / sizeof(cells_array[0]) / (columns_count),     \
                      .columns = (columns_count),                                                  \
                      .cells = (cells_array)})

/* The buffer's text, handed over (the caller frees it); the buffer is freed. */
static char *taken(struct strbuf *out)
{
    char *text = strbuf_steal(out);
    strbuf_free(out);
    return text;
}

/* What ui_html_escape makes of n bytes of s. */
static char *escaped(const char *s, size_t n)
{
    struct strbuf out;
    strbuf_init(&out);
    ui_html_escape(&out, s, n);
    return taken(&out);
}

static char *url_encoded(const char *s)
{
    struct strbuf out;
    strbuf_init(&out);
    ui_url_encode(&out, s, strlen(s));
    return taken(&out);
}

static char *cut(const char *s, size_t limit, long long total)
{
    struct strbuf out;
    strbuf_init(&out);
    ui_html_escape_cut(&out, s, limit, total);
    return taken(&out);
}

static char *age(double seconds)
{
    struct strbuf out;
    strbuf_init(&out);
    ui_format_age(&out, seconds);
    return taken(&out);
}

#define ck_assert_transformed(fn_call, want)                                                       \
    do {                                                                                           \
        char *got_ = (fn_call);                                                                    \
        ck_assert_str_eq(got_, want);                                                              \
        free(got_);                                                                                \
    } while (0)

/* ---------------------------------------------------------------- text */

START_TEST(escape_the_five_characters)
{
    ck_assert_transformed(escaped("a&b<c>d\"e'f", 11), "a&amp;b&lt;c&gt;d&quot;e&#39;f");
    ck_assert_transformed(escaped("<script>alert(1)</script>", 25),
                          "&lt;script&gt;alert(1)&lt;/script&gt;");
    ck_assert_transformed(escaped("\"><img src=x onerror=alert(1)>", 30),
                          "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;");
    ck_assert_transformed(escaped("run-7f3a:step-4", 15), "run-7f3a:step-4");
    ck_assert_transformed(escaped("", 0), "");
}
END_TEST

START_TEST(escape_keeps_utf8_and_replaces_the_rest)
{
    /* é, €, an emoji: as they are */
    ck_assert_transformed(escaped("\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80", 9),
                          "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
    /* tab, newline, carriage return: kept */
    ck_assert_transformed(escaped("a\tb\nc\rd", 7), "a\tb\nc\rd");
    /* NUL, a C0 control, DEL, a C1 control (U+0085): U+FFFD each */
    ck_assert_transformed(escaped("a\0b\x01"
                                  "c\x7F"
                                  "d\xC2\x85",
                                  9),
                          "a\xEF\xBF\xBD"
                          "b\xEF\xBF\xBD"
                          "c\xEF\xBF\xBD"
                          "d\xEF\xBF\xBD");
    /* a stray continuation byte, a truncated sequence, an overlong form */
    ck_assert_transformed(escaped("\x80"
                                  "x\xE2\x82"
                                  "y\xC0\xBC",
                                  7),
                          "\xEF\xBF\xBD"
                          "x\xEF\xBF\xBD\xEF\xBF\xBD"
                          "y\xEF\xBF\xBD\xEF\xBF\xBD");
}
END_TEST

START_TEST(url_encoding_of_a_key)
{
    ck_assert_transformed(url_encoded("run-7f3a_step.4~"), "run-7f3a_step.4~");
    ck_assert_transformed(url_encoded("run:7/step 2?x#y%z"), "run%3A7%2Fstep%202%3Fx%23y%25z");
    ck_assert_transformed(url_encoded("<script>alert(1)</script>"),
                          "%3Cscript%3Ealert%281%29%3C%2Fscript%3E");
    ck_assert_transformed(url_encoded("\"'&"), "%22%27%26");
    ck_assert_transformed(url_encoded("\xC3\xA9"), "%C3%A9");
    ck_assert_transformed(url_encoded(".."), ".."); /* the decoder, not the encoder, refuses it */
}
END_TEST

START_TEST(utf8_prefix_never_splits_a_character)
{
    ck_assert_uint_eq(ui_utf8_prefix("abcdef", 6, 10), 6);
    ck_assert_uint_eq(ui_utf8_prefix("abcdef", 6, 4), 4);
    ck_assert_uint_eq(ui_utf8_prefix("ab\xC3\xA9", 4, 3), 2); /* é would be split */
    ck_assert_uint_eq(ui_utf8_prefix("ab\xC3\xA9", 4, 4), 4);
    ck_assert_uint_eq(ui_utf8_prefix("\xF0\x9F\x98\x80x", 5, 3), 0);
    ck_assert_uint_eq(ui_utf8_prefix("\x80\x80\x80", 3, 2), 2); /* invalid: a byte each */
}
END_TEST

START_TEST(truncation_of_long_texts)
{
    ck_assert_transformed(cut("short", 200, -1), "short");
    ck_assert_transformed(cut("short", 200, 5), "short");
    ck_assert_transformed(cut("abcdef", 3, -1), "abc\xE2\x80\xA6");
    /* the database sent a prefix: the whole length is said */
    ck_assert_transformed(cut("abc", 200, 5000), "abc\xE2\x80\xA6 (5000 bytes)");
    ck_assert_transformed(cut("abcdef", 3, 5000), "abc\xE2\x80\xA6 (5000 bytes)");
    /* cut first, then escaped: never half an entity, never a stray "<" */
    ck_assert_transformed(cut("ab<script>", 3, -1), "ab&lt;\xE2\x80\xA6");
    ck_assert_transformed(cut("a\xC3\xA9", 2, -1), "a\xE2\x80\xA6");
    ck_assert_transformed(cut(NULL, 3, -1), "");

    char body[1000];
    memset(body, '<', sizeof(body) - 1);
    body[sizeof(body) - 1] = '\0';
    char *out = cut(body, UI_TEXT_MAX_BYTES, 999);
    ck_assert_ptr_null(strchr(out, '<'));
    ck_assert_uint_eq(strlen(out),
                      UI_TEXT_MAX_BYTES * strlen("&lt;") + strlen("\xE2\x80\xA6 (999 bytes)"));
    free(out);
}
END_TEST

START_TEST(form_value_of_the_search_box)
{
    char out[UI_KEY_MAX_BYTES + 1];
    ck_assert_int_eq(ui_form_value("key=a+b%2Fc", 11, "key", out, sizeof(out)), 5);
    ck_assert_str_eq(out, "a b/c");
    ck_assert_int_eq(ui_form_value("x=1&key=%3Cscript%3E", 20, "key", out, sizeof(out)), 8);
    ck_assert_str_eq(out, "<script>");
    ck_assert_int_eq(ui_form_value("keys=1&key=2", 12, "key", out, sizeof(out)), 1);
    ck_assert_str_eq(out, "2");
    ck_assert_int_eq(ui_form_value("key", 3, "key", out, sizeof(out)), 0);
    ck_assert_int_eq(ui_form_value("key=", 4, "key", out, sizeof(out)), 0);
    ck_assert_int_eq(ui_form_value("", 0, "key", out, sizeof(out)), -1);
    ck_assert_int_eq(ui_form_value("other=1", 7, "key", out, sizeof(out)), -1);
    ck_assert_int_eq(ui_form_value("key=%zz", 7, "key", out, sizeof(out)), -2);
    ck_assert_int_eq(ui_form_value("key=%4", 6, "key", out, sizeof(out)), -2);
    ck_assert_int_eq(ui_form_value("key=%", 5, "key", out, sizeof(out)), -2);
    char small[4];
    ck_assert_int_eq(ui_form_value("key=abcd", 8, "key", small, sizeof(small)), -3);
    ck_assert_int_eq(ui_form_value("key=abc", 7, "key", small, sizeof(small)), 3);
    /* only the query's own bytes are read */
    ck_assert_int_eq(ui_form_value("key=abc&more", 7, "key", out, sizeof(out)), 3);
}
END_TEST

START_TEST(ages_for_people)
{
    ck_assert_transformed(age(0), "0 s");
    ck_assert_transformed(age(-5), "0 s");
    ck_assert_transformed(age(NAN), "0 s");
    ck_assert_transformed(age(59.9), "59 s");
    ck_assert_transformed(age(60), "1 min 0 s");
    ck_assert_transformed(age(3599), "59 min 59 s");
    ck_assert_transformed(age(3600 * 5 + 180), "5 h 3 min");
    ck_assert_transformed(age(86400 * 2 + 3600 * 4 + 5), "2 d 4 h");
}
END_TEST

/* ---------------------------------------------------------------- sections */

/* The output of one renderer. */
typedef void (*render_fn)(struct strbuf *out, const struct ui_rows *rows);

static char *rendered(render_fn fn, const struct ui_rows *rows)
{
    struct strbuf out;
    strbuf_init(&out);
    fn(&out, rows);
    return taken(&out);
}

static void render_failures_60(struct strbuf *out, const struct ui_rows *rows)
{
    ui_render_failures(out, rows, 60);
}

static void render_intent_of_key(struct strbuf *out, const struct ui_rows *rows)
{
    ui_render_intent(out, "<script>alert(1)</script>", rows);
}

#define ck_assert_contains(haystack, needle)                                                       \
    ck_assert_msg(strstr((haystack), (needle)) != NULL, "missing %s in %s", (needle), (haystack))
#define ck_assert_lacks(haystack, needle)                                                          \
    ck_assert_msg(strstr((haystack), (needle)) == NULL, "unexpected %s in %s", (needle), (haystack))

/* Three targets (UI_TARGET_COLUMNS each): api delivering, gone with its
 * circuit open and disabled, slow paused by a Retry-After. */
/* clang-format off */
static const char *const target_cells[] = {
    "api",  "t", "3", "1", "0", "2", "10", "1", "0", "12", "0.9167", "41.5", "75.2", "closed",
    NULL, NULL, NULL, NULL, "3",
    "gone", "f", "2", "0", "0", "0", "0", "0", "0", "0", NULL, NULL, "0", "open",
    "2026-03-01 09:00:00", "HTTP 410 Gone: <b>bye</b>", "2026-03-01 09:00:30", NULL, "3",
    "slow", "t", "0", "0", "0", "0", "0", "0", "0", "0", NULL, NULL, "0", "closed",
    NULL, NULL, NULL, "2026-03-01 09:01:00", "3",
};
/* clang-format on */

START_TEST(targets_section)
{
    struct ui_rows rows = ROWS(target_cells, UI_TARGET_COLUMNS);
    char *html = rendered(ui_render_targets, &rows);
    ck_assert_contains(html, "<section id=\"targets\"><h2>Targets</h2>");
    ck_assert_contains(html, "<b>5</b> pending"); /* 3 + 2 over all targets */
    ck_assert_contains(html, "<b>2</b> awaiting approval");
    ck_assert_contains(html, "<tr><td class=\"name\"><code>api</code></td><td class=\"circuit\">"
                             "<span class=\"badge ok\">closed</span></td>");
    ck_assert_contains(html, "91.7 %<div class=\"small\">of 12 attempts</div>");
    ck_assert_contains(html, "41.5 ms</td></tr>");
    ck_assert_contains(html, "1 min 15 s"); /* oldest pending */
    ck_assert_contains(html, "<span class=\"badge bad\">open</span> <span class=\"badge "
                             "bad\">disabled</span>");
    ck_assert_contains(html,
                       "since 2026-03-01 09:00:00 UTC: HTTP 410 Gone: &lt;b&gt;bye&lt;/b&gt;; "
                       "next probe 2026-03-01 09:00:30 UTC");
    ck_assert_contains(html, "paused (Retry-After) until 2026-03-01 09:01:00 UTC");
    ck_assert_lacks(html, "<b>bye");
    ck_assert_lacks(html, "Showing"); /* all 3 of 3 shown */
    free(html);
}
END_TEST

START_TEST(targets_section_bounded_empty_or_wrong)
{
    struct ui_rows first = ROWS(target_cells, UI_TARGET_COLUMNS);
    char *html;
    first.count = 1; /* 1 of 3 */
    html = rendered(ui_render_targets, &first);
    ck_assert_contains(html, "Showing 1 of 3 targets.");
    free(html);

    struct ui_rows none = {.count = 0, .columns = UI_TARGET_COLUMNS, .cells = target_cells};
    html = rendered(ui_render_targets, &none);
    ck_assert_contains(html, "No target is registered.");
    free(html);

    struct ui_rows wrong = {.count = 1, .columns = 3, .cells = target_cells};
    html = rendered(ui_render_targets, &wrong);
    ck_assert_contains(html, "Unexpected result from the database.");
    ck_assert_lacks(html, "<table>");
    free(html);
}
END_TEST

START_TEST(stuck_section)
{
    char long_error[400];
    memset(long_error, 'e', sizeof(long_error) - 1);
    long_error[sizeof(long_error) - 1] = '\0';
    const char *cells[] = {
        "<script>alert(1)</script>",
        "legacy",
        "unknown",
        "outcome unknown",
        "42.7",
        "1",
        long_error,
        "2026-03-01 09:00:00",
        "51",
        "\"><img src=x onerror=alert(1)>",
        "gone",
        "pending",
        "target unavailable since 2026-03-01 09:00:00 UTC (circuit open)",
        "3700",
        "2",
        NULL,
        "2026-03-01 09:00:00",
        "51",
    };
    struct ui_rows rows = ROWS(cells, UI_STUCK_COLUMNS);
    char *html = rendered(ui_render_stuck, &rows);
    ck_assert_contains(html, "<h2>Stuck keys (51)</h2>");
    ck_assert_contains(html, "<a class=\"key\" href=\"/ui/intents/"
                             "%3Cscript%3Ealert%281%29%3C%2Fscript%3E\">"
                             "&lt;script&gt;alert(1)&lt;/script&gt;</a>");
    ck_assert_contains(html,
                       "href=\"/ui/intents/%22%3E%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E\""
                       ">&quot;&gt;&lt;img src=x onerror=alert(1)&gt;</a>");
    ck_assert_lacks(html, "<script");
    ck_assert_lacks(html, "<img");
    ck_assert_contains(html, "<span class=\"badge bad\">unknown</span>");
    ck_assert_contains(html, "<span class=\"badge info\">pending</span>");
    ck_assert_contains(html, "<td class=\"n\">42 s</td>");
    ck_assert_contains(html, "<td class=\"n\">1 h 1 min</td>");
    ck_assert_lacks(html, long_error); /* cut at 200 bytes */
    ck_assert_contains(html, "\xE2\x80\xA6</td>");
    ck_assert_contains(html, "Showing 2 of 51 stuck keys");
    free(html);

    struct ui_rows none = {.count = 0, .columns = UI_STUCK_COLUMNS, .cells = cells};
    html = rendered(ui_render_stuck, &none);
    ck_assert_contains(html, "<h2>Stuck keys (0)</h2>");
    ck_assert_contains(html, "Nothing is stuck.");
    free(html);
}
END_TEST

START_TEST(approvals_section)
{
    const char *cells[] = {
        "run-7:step-2",
        "payments.refund",
        "10800.4",
        "$.amount_cents > 100000",
        "$.amount_cents is a string, compared with a number",
        "3",
        "run-7:<b>",
        "payments.refund",
        "30",
        "$.amount_cents > 100000",
        "$.amount_cents is missing",
        "3",
    };
    struct ui_rows rows = ROWS(cells, UI_APPROVAL_COLUMNS);
    char *html = rendered(ui_render_approvals, &rows);
    ck_assert_contains(html, "<section id=\"approvals\"><h2>Awaiting approval (3)</h2>");
    ck_assert_contains(html, "<th>rule</th><th>why it is held</th>");
    ck_assert_contains(html,
                       "<a class=\"key\" href=\"/ui/intents/run-7%3Astep-2\">run-7:step-2</a>");
    ck_assert_contains(html, "<td class=\"n\">3 h 0 min</td><td><code>$.amount_cents &gt; "
                             "100000</code></td>");
    ck_assert_contains(html, "<td class=\"text\">$.amount_cents is a string, compared with a "
                             "number</td>");
    ck_assert_contains(html, "&lt;b&gt;</a>");
    ck_assert_lacks(html, "<b>");
    ck_assert_contains(html, "Showing 2 of 3 intents awaiting approval");
    free(html);

    struct ui_rows none = {.count = 0, .columns = UI_APPROVAL_COLUMNS, .cells = cells};
    html = rendered(ui_render_approvals, &none);
    ck_assert_contains(html, "<h2>Awaiting approval (0)</h2>");
    ck_assert_contains(html, "Nothing awaits approval.");
    free(html);
}
END_TEST

START_TEST(failures_section)
{
    const char *cells[] = {
        "2026-03-01 09:00:00.123",
        "ui:refused",
        "broken",
        "1",
        "permanent_failure",
        "400",
        "HTTP 400",
        "12",
        "2026-03-01 08:59:00.001",
        "ui:lost",
        "legacy",
        "2",
        "ambiguous",
        NULL,
        "Operation timed out after 10000 milliseconds",
        NULL,
    };
    struct ui_rows rows = ROWS(cells, UI_FAILURE_COLUMNS);
    char *html = rendered(render_failures_60, &rows);
    ck_assert_contains(html, "<section id=\"failures\"><h2>Recent failures</h2>");
    ck_assert_contains(html, "The last 2 attempts of the last 60 minutes");
    ck_assert_contains(html, "href=\"/ui/intents/ui%3Arefused\">ui:refused</a>");
    ck_assert_contains(html, "<span class=\"badge bad\">permanent_failure</span>");
    ck_assert_contains(html, "<td class=\"n\">400</td>");
    ck_assert_contains(html, "12 ms</td>");
    ck_assert_contains(html, "Operation timed out after 10000 milliseconds");
    free(html);

    struct ui_rows none = {.count = 0, .columns = UI_FAILURE_COLUMNS, .cells = cells};
    html = rendered(render_failures_60, &none);
    ck_assert_contains(html, "No failed attempt in the last 60 minutes.");
    free(html);
}
END_TEST

START_TEST(key_sections)
{
    const char *outcome[] = {
        "succeeded",
        "succeeded",
        "api",
        "3",
        "the target acted",
        "200",
        "{\"ok\":true,\"html\":\"<b>\"}",
        "70000",
        "2026-03-01 09:00:00",
    };
    struct ui_rows rows = ROWS(outcome, UI_INTENT_COLUMNS);
    char *html = rendered(render_intent_of_key, &rows);
    ck_assert_contains(html, "<dt>key</dt><dd><code>&lt;script&gt;alert(1)&lt;/script&gt;</code>");
    ck_assert_contains(html, "<span class=\"badge ok\">succeeded</span> the target acted");
    ck_assert_contains(html, "{&quot;ok&quot;:true,&quot;html&quot;:&quot;&lt;b&gt;&quot;}"
                             "\xE2\x80\xA6 (70000 bytes)");
    ck_assert_lacks(html, "<script");
    free(html);

    const char *details[] = {
        "2026-03-01 08:59:00",  "run-7f3a",        NULL, NULL, NULL, "HTTP 429", "alice",
        "amount <over> policy", "run-7f3a:step-4",
    };
    rows = ROWS(details, UI_DETAIL_COLUMNS);
    html = rendered(ui_render_details, &rows);
    ck_assert_contains(html, "<dt>run</dt><dd>run-7f3a</dd>");
    ck_assert_contains(html, "<dt>decision note</dt><dd>amount &lt;over&gt; policy</dd>");
    ck_assert_contains(html, "<dt>compensates</dt><dd><a class=\"key\" "
                             "href=\"/ui/intents/run-7f3a%3Astep-4\">run-7f3a:step-4</a>");
    ck_assert_lacks(html, "lease owner"); /* NULL: not shown */
    free(html);
    rows.count = 0;
    html = rendered(ui_render_details, &rows);
    ck_assert_contains(html, "were pruned");
    free(html);

    const char *attempts[] = {
        "1",
        "2026-03-01 09:00:00.000",
        "relay-a",
        "ambiguous",
        NULL,
        NULL,
        NULL,
        "lease expired",
        NULL,
        NULL,
        "t",
        "700",
        "2",
        "2026-03-01 09:00:01.000",
        "relay-b",
        "succeeded",
        "t",
        "200",
        "35",
        NULL,
        "<html>ok</html>",
        "15",
        "f",
        "700",
    };
    rows = ROWS(attempts, UI_ATTEMPT_COLUMNS);
    html = rendered(ui_render_attempts, &rows);
    ck_assert_contains(html, "<h2>Attempts (700)</h2>");
    ck_assert_contains(html, "<td>not known</td>");
    ck_assert_contains(html, "<td>yes</td>");
    ck_assert_contains(html, "(fenced out, not applied)");
    ck_assert_contains(html, "<code>&lt;html&gt;ok&lt;/html&gt;</code>");
    ck_assert_contains(html, "Showing 2 of 700 attempts");
    ck_assert_lacks(html, "<html>");
    free(html);
}
END_TEST

/* Every cell of every section holds markup: none of it may come out as a tag. */
START_TEST(markup_in_every_cell_stays_text)
{
    static const char *const payloads[] = {
        "<script>alert(1)</script>",
        "\"><img src=x onerror=alert(1)>",
        "'><svg onload=alert(1)>",
        "javascript:alert(1)",
    };
    static const struct {
        render_fn fn;
        size_t columns;
    } sections[] = {
        {ui_render_targets, UI_TARGET_COLUMNS},     {ui_render_stuck, UI_STUCK_COLUMNS},
        {ui_render_approvals, UI_APPROVAL_COLUMNS}, {render_failures_60, UI_FAILURE_COLUMNS},
        {render_intent_of_key, UI_INTENT_COLUMNS},  {ui_render_details, UI_DETAIL_COLUMNS},
        {ui_render_attempts, UI_ATTEMPT_COLUMNS},
    };
    for (size_t p = 0; p < sizeof(payloads) / sizeof(payloads[0]); p++) {
        const char *cells[2 * UI_TARGET_COLUMNS];
        for (size_t i = 0; i < sizeof(cells) / sizeof(cells[0]); i++)
            cells[i] = payloads[p];
        for (size_t k = 0; k < sizeof(sections) / sizeof(sections[0]); k++) {
            struct ui_rows rows = {.count = 2, .columns = sections[k].columns, .cells = cells};
            char *html = rendered(sections[k].fn, &rows);
            ck_assert_lacks(html, "<script");
            ck_assert_lacks(html, "<img");
            ck_assert_lacks(html, "<svg");
            ck_assert_lacks(html, "\"javascript:"); /* never an href of its own */
            if (strpbrk(payloads[p], "<>\"'&"))
                ck_assert_lacks(html, payloads[p]);
            free(html);
        }
    }
}
END_TEST

START_TEST(databases_section_and_links_in_a_database)
{
    /* --databases: the list of databases, each linked to its own page; a
     * database's rows link their keys within it, and its search stays there. */
    const char *cells[] = {
        "alpha", "ready",
        "7",     "0",
        "2",     "0", /* counted */
        "beta",  "database not connected: <timeout>",
        NULL,    NULL,
        NULL,    NULL, /* never */
    };
    struct ui_rows rows = ROWS(cells, UI_DATABASE_COLUMNS);
    char *html = rendered(ui_render_databases, &rows);
    ck_assert_contains(html, "<h2>Databases (2)</h2>");
    ck_assert_contains(html, "<a class=\"database\" href=\"/ui?database=alpha\">alpha</a>");
    ck_assert_contains(html, "<a class=\"database\" href=\"/ui?database=beta\">beta</a>");
    ck_assert_contains(html, "<td class=\"n\">7</td>");
    ck_assert_contains(html, "<td class=\"n\">2</td>");
    ck_assert_contains(html, "database not connected: &lt;timeout&gt;");
    ck_assert_contains(html, "<td class=\"n\">\xE2\x80\x93</td>"); /* no count yet */
    ck_assert_lacks(html, "<timeout>");
    free(html);

    const char *stuck[] = {
        "k:1", "legacy", "unknown", "outcome unknown", "42.7", "1", NULL, "2026-03-01 09:00:00",
        "1",
    };
    struct ui_rows in_beta = ROWS(stuck, UI_STUCK_COLUMNS);
    in_beta.database = "beta";
    html = rendered(ui_render_stuck, &in_beta);
    ck_assert_contains(html, "<a class=\"key\" href=\"/ui/intents/k%3A1?database=beta\">k:1</a>");
    free(html);

    struct ui_page_info info = {.title = "Database beta", .now_utc = "now", .database = "beta"};
    struct strbuf out;
    strbuf_init(&out);
    ui_page_begin(&out, &info);
    ck_assert_contains(out.data, "<input type=\"hidden\" name=\"database\" value=\"beta\">");
    strbuf_reset(&out);
    info.database = NULL;
    ui_page_begin(&out, &info);
    ck_assert_lacks(out.data, "name=\"database\"");
    strbuf_free(&out);
}
END_TEST

START_TEST(page_frame)
{
    struct ui_page_info info = {
        .title = "Key <b>k</b>",
        .relay = "relay-1<i>",
        .now_utc = "2026-03-01 09:00:00 UTC",
        .refresh = true,
        .key = "\"><script>",
    };
    struct strbuf out;
    strbuf_init(&out);
    ui_page_begin(&out, &info);
    ui_page_end(&out);
    const char *html = out.data;
    ck_assert_msg(strncmp(html, "<!DOCTYPE html>\n<html lang=\"en\">", 31) == 0, "%s", html);
    ck_assert_contains(html, "<meta charset=\"utf-8\">");
    ck_assert_contains(html, "<meta http-equiv=\"refresh\" content=\"5\">");
    ck_assert_contains(html, "<title>Key &lt;b&gt;k&lt;/b&gt; \xC2\xB7 outbox-relay</title>");
    ck_assert_contains(html, "<h1>Key &lt;b&gt;k&lt;/b&gt;</h1>");
    ck_assert_contains(html, "relay <b>relay-1&lt;i&gt;</b>");
    ck_assert_contains(html, "value=\"&quot;&gt;&lt;script&gt;\"");
    ck_assert_contains(html, "<form class=\"search\" method=\"get\" action=\"/ui/intents\"");
    ck_assert_contains(html, "refreshes every 5 s");
    ck_assert_lacks(html, "<script");
    ck_assert_lacks(html, "<link");
    ck_assert_lacks(html, "http://");
    ck_assert_lacks(html, "https://");
    ck_assert_msg(strstr(html, "</html>\n") == html + out.len - 8, "ends with </html>");

    strbuf_reset(&out);
    info = (struct ui_page_info){.title = "Token required", .now_utc = "now"};
    ui_error_page(&out, &info, "needs <its> token");
    ck_assert_lacks(out.data, "http-equiv=\"refresh\"");
    ck_assert_lacks(out.data, "relay <b>");
    ck_assert_contains(out.data, "<p class=\"err\">needs &lt;its&gt; token</p>");
    ck_assert_contains(out.data, "value=\"\"");
    strbuf_free(&out);
}
END_TEST

START_TEST(section_error)
{
    struct strbuf out;
    strbuf_init(&out);
    ui_render_section_error(&out, "stuck", "Stuck keys", "may not read <this>");
    ck_assert_str_eq(out.data, "<section id=\"stuck\"><h2>Stuck keys</h2><p class=\"err\">may not "
                               "read &lt;this&gt;</p></section>\n");
    strbuf_free(&out);
}
END_TEST

Suite *ui_suite(void)
{
    Suite *s = suite_create("ui");
    TCase *tc = tcase_create("text");
    tcase_add_test(tc, escape_the_five_characters);
    tcase_add_test(tc, escape_keeps_utf8_and_replaces_the_rest);
    tcase_add_test(tc, url_encoding_of_a_key);
    tcase_add_test(tc, utf8_prefix_never_splits_a_character);
    tcase_add_test(tc, truncation_of_long_texts);
    tcase_add_test(tc, form_value_of_the_search_box);
    tcase_add_test(tc, ages_for_people);
    suite_add_tcase(s, tc);
    tc = tcase_create("rendering");
    tcase_add_test(tc, targets_section);
    tcase_add_test(tc, targets_section_bounded_empty_or_wrong);
    tcase_add_test(tc, stuck_section);
    tcase_add_test(tc, approvals_section);
    tcase_add_test(tc, failures_section);
    tcase_add_test(tc, key_sections);
    tcase_add_test(tc, markup_in_every_cell_stays_text);
    tcase_add_test(tc, databases_section_and_links_in_a_database);
    tcase_add_test(tc, page_frame);
    tcase_add_test(tc, section_error);
    suite_add_tcase(s, tc);
    return s;
}
