/*
 * ui.c — the status page's data (ui.h): a database connection of its own,
 * its statements, and the pages being made.
 *
 * Why a connection of its own: the page reads views that scan the live rows
 * (outbox.target_health, outbox.stuck), tens of milliseconds on a big
 * outbox. On the main connection every claim would wait behind them, on the
 * record connection every outcome: a person refreshing a page during an
 * incident must not slow the deliveries down. Prune has its own connection
 * for the same reason (relay/prune.c).
 *
 * Why opened at the first page and closed when idle: most relays of a fleet
 * are never looked at; a connection each would cost one backend per relay
 * against max_connections for nothing. The first page pays one connect
 * (milliseconds), the meta refresh keeps the connection while someone
 * looks, and UI_IDLE_CLOSE_MS without a page closes it.
 *
 * Bounded: at most UI_MAX_PAGES pages at once (503 beyond); every statement
 * has a LIMIT and fetches text prefixes only (left(..., 256)), the renderer
 * cuts them at UI_TEXT_MAX_BYTES; the server's statement_timeout cancels a
 * slow statement (that section then says so and the others still show),
 * and pg.c drops a connection that does not answer at all.
 *
 * Never hangs: a page waits for the connection only while its first connect
 * is under way (pg.c ends it within --connect-timeout-ms); when the
 * database is known to be away (a connect failed or the connection was
 * lost), the page is answered at once with 503, and pg.c keeps
 * reconnecting in the background.
 *
 * A page is a list of steps, one statement and one section each, run one
 * after the other on the connection (one query on the wire at a time, as
 * pg.c does it); each step renders its section into the page's buffer as
 * its result arrives, so no result outlives its callback.
 */
#include "admin/ui.h"

#include "lib/log.h"
#include "lib/pg.h"
#include "admin/ui_html.h"
#include "lib/xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define UI_QUERY_TIMEOUT_MS 3000 /* a round trip; statement_timeout is 2 s */
#ifndef UI_IDLE_CLOSE_MS
#define UI_IDLE_CLOSE_MS (5 * 60 * 1000)
#endif
#define UI_MAX_PAGES 16
#define UI_FAILURE_WINDOW_MINUTES 60

/* Timestamps as the page shows them (UTC, no zone suffix: the headings say
 * so), NULL for NULL and for infinity. */
#define UTC_TEXT(x)                                                                                \
    "CASE WHEN isfinite(" x ") THEN to_char(" x " AT TIME ZONE 'UTC', "                            \
    "'YYYY-MM-DD HH24:MI:SS') END"
#define UTC_TEXT_MS(x) "to_char(" x " AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS')"

#define STMT_UI_TARGETS "ui_targets"
#define STMT_UI_STUCK "ui_stuck"
#define STMT_UI_APPROVALS "ui_approvals"
#define STMT_UI_FAILURES "ui_failures"
#define STMT_UI_OUTCOME "ui_outcome"
#define STMT_UI_DETAILS "ui_details"
#define STMT_UI_ATTEMPTS "ui_attempts"

/* Column order: enum ui_*_column of ui_html.h. No payload, URL, header or
 * secret is selected anywhere. */
static const struct pg_statement ui_statements[] = {
    {STMT_UI_TARGETS,
     "SELECT target, enabled, pending, in_flight, unknown, awaiting_approval, succeeded_5m,"
     " failed_5m, cancelled_5m, attempts_5m, success_ratio_5m, p95_latency_ms_5m,"
     " extract(epoch FROM oldest_pending_age), circuit, " UTC_TEXT(
         "circuit_since") ","
                          " left(circuit_reason, 256), " UTC_TEXT("next_probe_at") ", " UTC_TEXT(
                              "paused_until") ","
                                              " count(*) OVER ()"
                                              " FROM outbox.target_health ORDER BY target LIMIT "
                                              "200"},
    {STMT_UI_STUCK,
     "SELECT key, target, state, left(reason, 256), extract(epoch FROM age), attempts,"
     " left(last_error, 256), " UTC_TEXT(
         "updated_at") ", count(*) OVER ()"
                       " FROM outbox.stuck ORDER BY age, key LIMIT 50"},
    {STMT_UI_APPROVALS,
     "SELECT key, target, extract(epoch FROM age), left(rule, 256), left(reason, 256),"
     " count(*) OVER () FROM outbox.approvals ORDER BY created_at, key LIMIT 50"},
    {STMT_UI_FAILURES,
     "SELECT " UTC_TEXT_MS(
         "a.at") ", i.key, i.target, a.attempt, a.class, a.http_status,"
                 " left(a.error, 256), a.latency_ms"
                 " FROM outbox.attempts a JOIN outbox.intents i ON i.id = a.intent_id"
                 " WHERE a.at > now() - interval '60 minutes'"
                 " AND a.class IN ('not_sent', 'ambiguous', 'retry_later', 'key_conflict',"
                 " 'permanent_failure', 'reconcile_inconclusive')"
                 " ORDER BY a.at DESC, a.id DESC LIMIT 20"},
    {STMT_UI_OUTCOME, "SELECT status, state, target, attempts, message, response_status,"
                      " left(response_body, 256), octet_length(response_body), " UTC_TEXT(
                          "updated_at") " FROM outbox.outcome($1)"},
    {STMT_UI_DETAILS,
     "SELECT " UTC_TEXT(
         "created_at") ", run_id,"
                       " CASE WHEN state IN ('pending', 'unknown') THEN " UTC_TEXT(
                           "next_attempt_at") " END,"
                                              " CASE WHEN state = 'in_flight' THEN lease_owner END,"
                                              " CASE WHEN state = 'in_flight' THEN " UTC_TEXT(
                                                  "lease_expires_at") " END,"
                                                                      " left(last_error, 256), "
                                                                      "decided_by, "
                                                                      "left(decision_note, 256), "
                                                                      "compensates"
                                                                      " FROM outbox.intents WHERE "
                                                                      "key = $1"},
    {STMT_UI_ATTEMPTS,
     "SELECT a.attempt, " UTC_TEXT_MS(
         "a.at") ", a.relay, a.class, a.request_sent,"
                 " a.http_status, a.latency_ms, left(a.error, 256), left(a.response_body, 256),"
                 " octet_length(a.response_body), a.recorded, count(*) OVER ()"
                 " FROM outbox.attempts a"
                 " WHERE a.intent_id = (SELECT id FROM outbox.intents WHERE key = $1)"
                 " ORDER BY a.id LIMIT 500"},
};

struct ui_page;

/* One statement and the section it renders; false: the page ends here
 * (an unknown key). */
struct ui_step {
    const char *statement;
    bool keyed; /* $1 is the key */
    const char *section_id, *heading;
    bool (*render)(struct ui_page *page, const struct ui_rows *rows);
};

struct ui_page {
    struct ui *ui;
    const struct ui_step *steps;
    size_t step_count, step;
    char key[UI_KEY_MAX_BYTES + 1]; /* "" on the overview */
    struct strbuf sections;
    void *req;
    ui_done_cb done;
    struct ui_page *next; /* waiting for the connection */
};

struct ui {
    uv_loop_t *loop;
    const struct config *cfg;
    char *conninfo;           /* the database's (cfg->db, or a line of --databases) */
    char *database;           /* --databases: its NAME (titles, links, log lines); NULL: --db */
    const char *password;     /* pg_conn_set_password's; NULL: none */
    pg_conn_t *pg;            /* NULL until a page needs it, and once idle */
    int pg_closing;           /* connections closed and not yet freed */
    uv_timer_t idle_timer;    /* closes the connection after UI_IDLE_CLOSE_MS */
    struct ui_page *waiting;  /* for the first connect */
    int pages;                /* being made */
    bool timer_open, closing; /* closing: ui_close was called */
    void (*on_closed)(void *data);
    void *closed_data;
};

/* ---------------------------------------------------------------- pages */

static void ui_now_text(char *out, size_t size)
{
    uv_timeval64_t now;
    struct tm tm;
    time_t seconds = uv_gettimeofday(&now) == 0 ? (time_t)now.tv_sec : time(NULL);
    if (gmtime_r(&seconds, &tm) == NULL || strftime(out, size, "%Y-%m-%d %H:%M:%S UTC", &tm) == 0)
        snprintf(out, size, "?");
}

/* The page's title: "Status", or "Key <key>". */
static void page_title(const struct ui_page *page, char *out, size_t size)
{
    if (page->key[0])
        snprintf(out, size, "Key %s", page->key);
    else if (page->ui->database)
        snprintf(out, size, "Database %s", page->ui->database);
    else
        snprintf(out, size, "Status");
}

static void page_free(struct ui_page *page)
{
    page->ui->pages--;
    strbuf_free(&page->sections);
    free(page);
}

/* Answers with the sections made so far, framed. */
static void page_finish(struct ui_page *page, int status)
{
    char title[UI_KEY_MAX_BYTES + 80], now[48];
    page_title(page, title, sizeof(title));
    ui_now_text(now, sizeof(now));
    struct ui_page_info info = {
        .title = title,
        .relay = page->ui->cfg->relay_id,
        .now_utc = now,
        .refresh = true,
        .key = page->key[0] ? page->key : NULL,
        .database = page->ui->database,
    };
    struct strbuf out;
    strbuf_init(&out);
    ui_page_begin(&out, &info);
    strbuf_append(&out, page->sections.data, page->sections.len);
    ui_page_end(&out);
    page->done(page->req, status, out.data, out.len);
    strbuf_free(&out);
    page_free(page);
}

/* Answers with only a message (503: the database is away, the relay is
 * shutting down, too many pages). */
static void page_fail(struct ui_page *page, int status, const char *message)
{
    char title[UI_KEY_MAX_BYTES + 80];
    page_title(page, title, sizeof(title));
    struct strbuf out;
    strbuf_init(&out);
    ui_message_page(page->ui, &out, title, message, true, true);
    page->done(page->req, status, out.data, out.len);
    strbuf_free(&out);
    page_free(page);
}

/* The database is away: 503, with readiness's phrase for why (never the
 * driver's message, which names host, port and user: that is in the log). */
static void page_fail_database(struct ui_page *page, const char *detail)
{
    char message[256];
    snprintf(message, sizeof(message),
             "The database cannot be reached (%s). This page shows what the database knows, so "
             "there is nothing to show now; it tries again every %d s. The relay's /readyz and "
             "/metrics tell how the relay itself is doing.",
             pg_public_reason(detail), UI_REFRESH_SECONDS);
    page_fail(page, 503, message);
}

/* What a section says when its statement failed with the connection
 * still up (a privilege, the statement timeout, anything else). */
static const char *ui_query_problem(const char *error)
{
    if (strstr(error, "permission denied"))
        return "The relay's database login may not read this: grant it the outbox_operator role "
               "(read only) to see this section.";
    if (strstr(error, "does not exist"))
        return "The database's schema is older than this relay: run outbox-relay migrate to see "
               "this section.";
    if (strstr(error, "statement timeout"))
        return "The query took longer than its statement_timeout (2 s) and was cancelled; "
               "the next refresh tries again.";
    return "The query failed; the relay's log has the database's message (ui_query_failed).";
}

static void page_next(struct ui_page *page);

static const char **rows_from_result(const struct ui *ui, const PGresult *res, struct ui_rows *rows)
{
    size_t count = (size_t)PQntuples(res), columns = (size_t)PQnfields(res);
    const char **cells = xcalloc(count * columns, sizeof(*cells));
    for (size_t i = 0; i < count; i++)
        for (size_t j = 0; j < columns; j++)
            cells[i * columns + j] =
                PQgetisnull(res, (int)i, (int)j) ? NULL : PQgetvalue(res, (int)i, (int)j);
    *rows = (struct ui_rows){
        .count = count, .columns = columns, .cells = cells, .database = ui->database};
    return cells;
}

static void on_step_result(void *data, PGresult *res, const char *error)
{
    struct ui_page *page = data;
    struct ui *ui = page->ui;
    const struct ui_step *step = &page->steps[page->step];
    if (ui->closing) {
        page_fail(page, 503, "The relay is shutting down.");
        return;
    }
    if (error && (ui->pg == NULL || !pg_conn_ready(ui->pg))) {
        page_fail_database(page, error); /* the connection was lost */
        return;
    }
    if (error) {
        /* A missing grant shows on the page at every refresh: not a warning each time. */
        log_event(strstr(error, "permission denied") ? LOG_DEBUG : LOG_WARN, "ui_query_failed",
                  "statement", json_string(step->statement), "error", json_string(error), LOG_END);
        ui_render_section_error(&page->sections, step->section_id, step->heading,
                                ui_query_problem(error));
    } else {
        struct ui_rows rows;
        const char **cells = rows_from_result(ui, res, &rows);
        bool go_on = step->render(page, &rows);
        free(cells);
        if (!go_on) {
            page_fail(page, 404,
                      "No intent has this key: it was never enqueued, or it was forgotten after "
                      "its target's dedupe_window.");
            return;
        }
    }
    page->step++;
    page_next(page);
}

/* Sends the page's next statement, or answers once every section is made. */
static void page_next(struct ui_page *page)
{
    struct ui *ui = page->ui;
    if (page->step == page->step_count) {
        page_finish(page, 200);
        return;
    }
    const struct ui_step *step = &page->steps[page->step];
    const char *params[1] = {page->key};
    if (!pg_query(ui->pg, step->statement, step->keyed ? 1 : 0, params, on_step_result, page))
        page_fail_database(page, pg_conn_status_reason(ui->pg));
}

/* ---------------------------------------------------------------- sections */

static bool render_targets(struct ui_page *page, const struct ui_rows *rows)
{
    ui_render_targets(&page->sections, rows);
    return true;
}

static bool render_stuck(struct ui_page *page, const struct ui_rows *rows)
{
    ui_render_stuck(&page->sections, rows);
    return true;
}

static bool render_approvals(struct ui_page *page, const struct ui_rows *rows)
{
    ui_render_approvals(&page->sections, rows);
    return true;
}

static bool render_failures(struct ui_page *page, const struct ui_rows *rows)
{
    ui_render_failures(&page->sections, rows, UI_FAILURE_WINDOW_MINUTES);
    return true;
}

static bool render_outcome(struct ui_page *page, const struct ui_rows *rows)
{
    if (rows->count == 0)
        return false; /* 404 */
    ui_render_intent(&page->sections, page->key, rows);
    return true;
}

static bool render_details(struct ui_page *page, const struct ui_rows *rows)
{
    ui_render_details(&page->sections, rows);
    return true;
}

static bool render_attempts(struct ui_page *page, const struct ui_rows *rows)
{
    ui_render_attempts(&page->sections, rows);
    return true;
}

static const struct ui_step overview_steps[] = {
    {STMT_UI_TARGETS, false, "targets", "Targets", render_targets},
    {STMT_UI_STUCK, false, "stuck", "Stuck keys", render_stuck},
    {STMT_UI_APPROVALS, false, "approvals", "Awaiting approval", render_approvals},
    {STMT_UI_FAILURES, false, "failures", "Recent failures", render_failures},
};

static const struct ui_step intent_steps[] = {
    {STMT_UI_OUTCOME, true, "intent", "Intent", render_outcome},
    {STMT_UI_DETAILS, true, "details", "Details", render_details},
    {STMT_UI_ATTEMPTS, true, "attempts", "Attempts", render_attempts},
};

/* ---------------------------------------------------------------- the connection */

/* Ready: the pages that waited for it start. */
static void on_ui_db_ready(void *data)
{
    struct ui *ui = data;
    struct ui_page *page = ui->waiting;
    ui->waiting = NULL;
    while (page) {
        struct ui_page *next = page->next;
        page->next = NULL;
        page_next(page);
        page = next;
    }
}

/* A connect failed, or the connection was lost: the pages that waited for
 * it get 503 now (pg.c retries in the background). */
static void on_ui_db_failed(void *data, const char *reason)
{
    struct ui *ui = data;
    struct ui_page *page = ui->waiting;
    ui->waiting = NULL;
    while (page) {
        struct ui_page *next = page->next;
        page_fail_database(page, reason);
        page = next;
    }
}

static void ui_maybe_free(struct ui *ui)
{
    if (!ui->closing || ui->timer_open || ui->pg_closing > 0)
        return;
    void (*cb)(void *) = ui->on_closed;
    void *data = ui->closed_data;
    free(ui->conninfo);
    free(ui->database);
    free(ui);
    if (cb)
        cb(data);
}

static void on_ui_pg_closed(void *data)
{
    struct ui *ui = data;
    ui->pg_closing--;
    ui_maybe_free(ui);
}

static void ui_close_connection(struct ui *ui)
{
    if (ui->pg == NULL)
        return;
    pg_conn_t *pg = ui->pg;
    ui->pg = NULL;
    ui->pg_closing++;
    pg_conn_close(pg, on_ui_pg_closed, ui); /* fails what is queued: on_step_result */
}

static void on_idle_timer(uv_timer_t *timer)
{
    struct ui *ui = timer->data;
    if (ui->pages > 0) {
        uv_timer_start(&ui->idle_timer, on_idle_timer, UI_IDLE_CLOSE_MS, 0);
        return;
    }
    log_event(LOG_DEBUG, "ui_db_idle_closed", LOG_END);
    ui_close_connection(ui);
}

static void ui_open_connection(struct ui *ui)
{
    struct pg_events events = {
        .name = "ui",
        .database = ui->database,
        .data = ui,
        .on_ready = on_ui_db_ready,
        .on_lost = on_ui_db_failed,
        .on_connect_failed = on_ui_db_failed,
    };
    ui->pg = pg_conn_new(ui->loop, ui->conninfo, ui_statements,
                         sizeof(ui_statements) / sizeof(ui_statements[0]), NULL,
                         ui->cfg->connect_timeout_ms, ui->cfg->reconnect_max_ms, events);
    pg_conn_set_query_timeout(ui->pg, UI_QUERY_TIMEOUT_MS);
    pg_conn_set_password(ui->pg, ui->password);
    pg_conn_start(ui->pg);
}

/* ---------------------------------------------------------------- public */

struct ui *ui_new(uv_loop_t *loop, const struct config *cfg, const char *conninfo,
                  const char *database, const char *password)
{
    struct ui *ui = xcalloc(1, sizeof(*ui));
    ui->loop = loop;
    ui->cfg = cfg;
    ui->conninfo = xstrdup(conninfo ? conninfo : "");
    ui->database = database ? xstrdup(database) : NULL;
    ui->password = password;
    uv_timer_init(loop, &ui->idle_timer);
    ui->idle_timer.data = ui;
    ui->timer_open = true;
    return ui;
}

static void ui_start_page(struct ui *ui, const struct ui_step *steps, size_t step_count,
                          const char *key, void *req, ui_done_cb done)
{
    struct ui_page *page = xcalloc(1, sizeof(*page));
    page->ui = ui;
    page->steps = steps;
    page->step_count = step_count;
    snprintf(page->key, sizeof(page->key), "%s", key ? key : "");
    strbuf_init(&page->sections);
    page->req = req;
    page->done = done;
    ui->pages++;
    if (ui->closing) {
        page_fail(page, 503, "The relay is shutting down.");
        return;
    }
    if (ui->pages > UI_MAX_PAGES) {
        page_fail(page, 503, "Too many status pages are being made at once; try again.");
        return;
    }
    uv_timer_start(&ui->idle_timer, on_idle_timer, UI_IDLE_CLOSE_MS, 0);
    if (ui->pg && pg_conn_ready(ui->pg)) {
        page_next(page);
        return;
    }
    const char *reason = ui->pg ? pg_conn_status_reason(ui->pg) : "";
    if (ui->pg && strcmp(reason, "not connected yet") != 0) {
        page_fail_database(page, reason); /* known to be away: do not wait */
        return;
    }
    page->next = ui->waiting; /* answered by on_ui_db_ready or on_ui_db_failed */
    ui->waiting = page;
    if (ui->pg == NULL)
        ui_open_connection(ui);
}

void ui_overview(struct ui *ui, void *req, ui_done_cb done)
{
    ui_start_page(ui, overview_steps, sizeof(overview_steps) / sizeof(overview_steps[0]), NULL, req,
                  done);
}

void ui_intent(struct ui *ui, const char *key, void *req, ui_done_cb done)
{
    ui_start_page(ui, intent_steps, sizeof(intent_steps) / sizeof(intent_steps[0]), key, req, done);
}

void ui_message_page(const struct ui *ui, struct strbuf *out, const char *title,
                     const char *message, bool refresh, bool show_relay)
{
    char now[48];
    ui_now_text(now, sizeof(now));
    struct ui_page_info info = {
        .title = title,
        .relay = show_relay && ui ? ui->cfg->relay_id : NULL,
        .now_utc = now,
        .refresh = refresh,
    };
    ui_error_page(out, &info, message);
}

void ui_sections_page(const struct config *cfg, struct strbuf *out, const char *title,
                      const char *sections, size_t len)
{
    char now[48];
    ui_now_text(now, sizeof(now));
    struct ui_page_info info = {
        .title = title,
        .relay = cfg ? cfg->relay_id : NULL,
        .now_utc = now,
        .refresh = true,
    };
    ui_page_begin(out, &info);
    strbuf_append(out, sections, len);
    ui_page_end(out);
}

static void on_idle_timer_closed(uv_handle_t *handle)
{
    struct ui *ui = handle->data;
    ui->timer_open = false;
    ui_maybe_free(ui);
}

void ui_close(struct ui *ui, void (*on_closed)(void *data), void *data)
{
    if (ui == NULL || ui->closing)
        return;
    ui->closing = true;
    ui->on_closed = on_closed;
    ui->closed_data = data;
    struct ui_page *page = ui->waiting;
    ui->waiting = NULL;
    while (page) {
        struct ui_page *next = page->next;
        page_fail(page, 503, "The relay is shutting down.");
        page = next;
    }
    uv_timer_stop(&ui->idle_timer);
    ui_close_connection(ui);
    uv_close((uv_handle_t *)&ui->idle_timer, on_idle_timer_closed);
}
