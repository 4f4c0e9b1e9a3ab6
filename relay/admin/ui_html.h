/*
 * ui_html.h — the HTML of the status page (GET /ui on the admin port):
 * escaping, encoding, truncation and the rendering of each section. Pure:
 * rows of text in, HTML out, no I/O, no clock (the caller passes the time),
 * so that tests/unit/admin/test_ui.c checks every byte without a database.
 *
 * Everything that comes from the database is text an attacker may have
 * chosen (a key is whatever the caller enqueued, a response body whatever a
 * target answered, an error whatever a library wrote): it goes through
 * ui_html_escape (text and attribute values) or ui_url_encode (a key in a
 * link) and nowhere else. Long texts are cut at UI_TEXT_MAX_BYTES on a
 * UTF-8 boundary. The statements of relay/admin/ui.c never select a payload, a
 * target's URL, headers or secret names, so none can be rendered.
 */
#ifndef OUTBOX_UI_HTML_H
#define OUTBOX_UI_HTML_H

#include "lib/strbuf.h"

#include <stdbool.h>
#include <stddef.h>

/* Response bodies, errors and reasons are cut to this many bytes. */
#define UI_TEXT_MAX_BYTES 200
/* The page reloads itself this often (<meta http-equiv="refresh">). */
#define UI_REFRESH_SECONDS 5
/* A key is at most 255 bytes (outbox.enqueue). */
#define UI_KEY_MAX_BYTES 255

/* One statement's result as text: cells[row * columns + column], NULL for
 * SQL NULL. Built from a PGresult by relay/admin/ui.c, by hand in the tests. */
struct ui_rows {
    size_t count;
    size_t columns;
    const char *const *cells;
    /* --databases: the database the rows are of; its name is added to the
     * links of keys (?database=NAME). NULL: one database, plain links. */
    const char *database;
};

/* The columns each section expects, in the order relay/admin/ui.c selects them. */
enum ui_target_column {
    UI_TARGET_NAME,
    UI_TARGET_ENABLED, /* "t" or "f" */
    UI_TARGET_PENDING,
    UI_TARGET_IN_FLIGHT,
    UI_TARGET_UNKNOWN,
    UI_TARGET_AWAITING_APPROVAL,
    UI_TARGET_SUCCEEDED_5M,
    UI_TARGET_FAILED_5M,
    UI_TARGET_CANCELLED_5M,
    UI_TARGET_ATTEMPTS_5M,
    UI_TARGET_SUCCESS_RATIO_5M, /* 0..1, NULL without attempts */
    UI_TARGET_P95_MS_5M,        /* NULL without attempts */
    UI_TARGET_OLDEST_PENDING_S, /* seconds */
    UI_TARGET_CIRCUIT,          /* closed, open, half_open */
    UI_TARGET_CIRCUIT_SINCE,    /* UTC text */
    UI_TARGET_CIRCUIT_REASON,
    UI_TARGET_NEXT_PROBE_AT,
    UI_TARGET_PAUSED_UNTIL,
    UI_TARGET_TOTAL, /* targets in all (the rows are bounded) */
    UI_TARGET_COLUMNS,
};

/* The rows of ui_render_databases, made by the relay from what it holds
 * (relay/relay_status.c): the counts are outbox.live_counts() of its last
 * refresh (every 5 s), NULL while none has answered. */
enum ui_database_column {
    UI_DATABASE_NAME,
    UI_DATABASE_STATE, /* "ready", "removing", or why it cannot be worked on */
    UI_DATABASE_PENDING,
    UI_DATABASE_IN_FLIGHT,
    UI_DATABASE_UNKNOWN,
    UI_DATABASE_AWAITING_APPROVAL,
    UI_DATABASE_COLUMNS,
};

enum ui_stuck_column {
    UI_STUCK_KEY,
    UI_STUCK_TARGET,
    UI_STUCK_STATE,
    UI_STUCK_REASON,
    UI_STUCK_AGE_S,
    UI_STUCK_ATTEMPTS,
    UI_STUCK_LAST_ERROR,
    UI_STUCK_UPDATED_AT,
    UI_STUCK_TOTAL, /* stuck keys in all */
    UI_STUCK_COLUMNS,
};

/* outbox.approvals: the reason names fields and types, never a value. */
enum ui_approval_column {
    UI_APPROVAL_KEY,
    UI_APPROVAL_TARGET,
    UI_APPROVAL_AGE_S, /* seconds */
    UI_APPROVAL_RULE,
    UI_APPROVAL_REASON,
    UI_APPROVAL_TOTAL, /* intents awaiting approval in all */
    UI_APPROVAL_COLUMNS,
};

enum ui_failure_column {
    UI_FAILURE_AT,
    UI_FAILURE_KEY,
    UI_FAILURE_TARGET,
    UI_FAILURE_ATTEMPT,
    UI_FAILURE_CLASS,
    UI_FAILURE_HTTP_STATUS,
    UI_FAILURE_ERROR,
    UI_FAILURE_LATENCY_MS,
    UI_FAILURE_COLUMNS,
};

/* outbox.outcome(key): also for a pruned key (from its tombstone). */
enum ui_intent_column {
    UI_INTENT_STATUS, /* what the caller sees: pending, delivering, reconciling, ... */
    UI_INTENT_STATE,  /* the row's state */
    UI_INTENT_TARGET,
    UI_INTENT_ATTEMPTS,
    UI_INTENT_MESSAGE,
    UI_INTENT_RESPONSE_STATUS,
    UI_INTENT_RESPONSE_BODY,  /* a prefix */
    UI_INTENT_RESPONSE_BYTES, /* the whole body's length */
    UI_INTENT_UPDATED_AT,
    UI_INTENT_COLUMNS,
};

/* The intent's own row (none once it is pruned). */
enum ui_detail_column {
    UI_DETAIL_CREATED_AT,
    UI_DETAIL_RUN_ID,
    UI_DETAIL_NEXT_ATTEMPT_AT,
    UI_DETAIL_LEASE_OWNER,
    UI_DETAIL_LEASE_EXPIRES_AT,
    UI_DETAIL_LAST_ERROR,
    UI_DETAIL_DECIDED_BY,
    UI_DETAIL_DECISION_NOTE,
    UI_DETAIL_COMPENSATES, /* a key */
    UI_DETAIL_COLUMNS,
};

enum ui_attempt_column {
    UI_ATTEMPT_NUMBER,
    UI_ATTEMPT_AT,
    UI_ATTEMPT_RELAY,
    UI_ATTEMPT_CLASS,
    UI_ATTEMPT_REQUEST_SENT, /* "t", "f", NULL: not known */
    UI_ATTEMPT_HTTP_STATUS,
    UI_ATTEMPT_LATENCY_MS,
    UI_ATTEMPT_ERROR,
    UI_ATTEMPT_RESPONSE_BODY,  /* a prefix */
    UI_ATTEMPT_RESPONSE_BYTES, /* the whole body's length */
    UI_ATTEMPT_RECORDED,       /* "f": a late writer fenced out */
    UI_ATTEMPT_TOTAL,          /* attempts in all (the rows are bounded) */
    UI_ATTEMPT_COLUMNS,
};

/* ---------------------------------------------------------------- text */

/* n bytes of s as HTML text or attribute value: & < > " ' as entities;
 * invalid UTF-8, NUL and control characters other than tab and newline as
 * U+FFFD. */
void ui_html_escape(struct strbuf *out, const char *s, size_t n);
void ui_html_escape_str(struct strbuf *out, const char *s);
/* The longest prefix of s (n bytes) of at most limit bytes that does not
 * split a UTF-8 sequence. */
size_t ui_utf8_prefix(const char *s, size_t n, size_t limit);
/* s escaped, cut at limit bytes: then "…" follows. total_bytes, when it is
 * more than what was shown (the database sent a prefix), says how long the
 * whole text was: "… (1234 bytes)". */
void ui_html_escape_cut(struct strbuf *out, const char *s, size_t limit, long long total_bytes);
/* n bytes as one URL path segment: every byte but A-Z a-z 0-9 - . _ ~ as
 * %XX (upper case), so "/", "?", "#", "%" and spaces stay inside it. */
void ui_url_encode(struct strbuf *out, const char *s, size_t n);
/* The value of field name in an application/x-www-form-urlencoded query
 * ("key=a+b%2Fc&x=1"): "+" is a space, %XX a byte. Its length; -1 when the
 * field is missing, -2 malformed (a bad escape), -3 longer than out_size - 1. */
long ui_form_value(const char *query, size_t n, const char *name, char *out, size_t out_size);
/* A duration for people: "0 s", "42 s", "3 min 12 s", "5 h 3 min", "2 d 4 h". */
void ui_format_age(struct strbuf *out, double seconds);

/* ---------------------------------------------------------------- pages */

/* What every page shows at the top. */
struct ui_page_info {
    const char *title;    /* <title> and <h1>, escaped */
    const char *relay;    /* the relay's id, escaped */
    const char *now_utc;  /* when the page was made, e.g. "2026-03-01 09:00:00 UTC" */
    bool refresh;         /* reload every UI_REFRESH_SECONDS */
    const char *key;      /* prefills the search box (NULL: empty) */
    const char *database; /* --databases: the page's database; the search stays in it */
};

/* The document up to and including the header with the search form; then
 * sections; then ui_page_end. */
void ui_page_begin(struct strbuf *out, const struct ui_page_info *info);
void ui_page_end(struct strbuf *out);
/* A whole page that only says something went wrong (401, 404, 503...):
 * title and message are escaped; it reloads itself when refresh is set. */
void ui_error_page(struct strbuf *out, const struct ui_page_info *info, const char *message);

/* Sections of the overview. A section whose statement failed says so
 * instead (ui_render_section_error). */
void ui_render_targets(struct strbuf *out, const struct ui_rows *rows);
void ui_render_stuck(struct strbuf *out, const struct ui_rows *rows);
void ui_render_approvals(struct strbuf *out, const struct ui_rows *rows);
void ui_render_failures(struct strbuf *out, const struct ui_rows *rows, int window_minutes);
/* Sections of the key page: the key's heading, the intent (one row of
 * outbox.outcome), its details (the intent's row; none when pruned), its
 * attempts in order. */
void ui_render_intent(struct strbuf *out, const char *key, const struct ui_rows *outcome);
void ui_render_details(struct strbuf *out, const struct ui_rows *details);
void ui_render_attempts(struct strbuf *out, const struct ui_rows *rows);
/* --databases: the databases of the relay, one row each (enum
 * ui_database_column), each linked to its own status page. */
void ui_render_databases(struct strbuf *out, const struct ui_rows *rows);
/* A section (id, heading) whose rows could not be read, and why. */
void ui_render_section_error(struct strbuf *out, const char *id, const char *heading,
                             const char *why);

#endif
