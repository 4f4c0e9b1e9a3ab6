/*
 * ui.h — the status page's data: what GET /ui and GET /ui/intents/{key} of
 * the admin port show (relay/admin/admin.c routes and authorizes them; the HTML
 * is relay/admin/ui_html.c).
 *
 * Owns a database connection of its own ("ui", never the relay's main or
 * record connection), opened at the first page and closed after
 * UI_IDLE_CLOSE_MS without one; its prepared statements, bounded in rows and
 * text; a statement timeout; the pages being made. Every page is answered
 * in bounded time: while the connection is being made (at most
 * --connect-timeout-ms), then one round trip per section (each at most
 * UI_QUERY_TIMEOUT_MS); when the database is away, at once with 503 and a
 * page that says so.
 *
 * The database login needs SELECT on outbox.target_health, outbox.stuck,
 * outbox.approvals, outbox.intents and outbox.attempts (the outbox_operator
 * role); a section it may not read says which grant is missing, the others
 * still show.
 */
#ifndef OUTBOX_UI_H
#define OUTBOX_UI_H

#include "config.h"
#include "lib/strbuf.h"

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

struct ui;

/* The answer to a page: status (200, 404, 503) and a whole HTML document
 * (copied by the callee). Runs exactly once per request, from the loop or
 * before ui_overview/ui_intent return; req is the caller's and stays
 * untouched. */
typedef void (*ui_done_cb)(void *req, int status, const char *html, size_t len);

/* Nothing is opened yet. conninfo: the database's (copied); database: its
 * NAME of --databases (copied: page titles, links and the search stay in
 * it), NULL for --db; password: pg_conn_set_password's (NULL: none; it must
 * outlive the ui). cfg (timeouts, the relay's id) must outlive the ui. */
struct ui *ui_new(uv_loop_t *loop, const struct config *cfg, const char *conninfo,
                  const char *database, const char *password);
/* The overview: targets, stuck keys, intents awaiting approval, recent failures. */
void ui_overview(struct ui *ui, void *req, ui_done_cb done);
/* The whole life of one key (already checked: 1..255 bytes, no control
 * characters): its outcome, its row, its attempts in order; 404 unknown. */
void ui_intent(struct ui *ui, const char *key, void *req, ui_done_cb done);
/* A page with a title and a message only, for the answers the admin port
 * makes itself (400, 401, 404, 503). show_relay false leaves out the relay's
 * id (for someone not authorized). */
void ui_message_page(const struct ui *ui, struct strbuf *out, const char *title,
                     const char *message, bool refresh, bool show_relay);
/* A whole page of sections made elsewhere (the list of databases of
 * --databases): framed, titled, the time and cfg's relay id in its header
 * (cfg NULL: none), refreshed every UI_REFRESH_SECONDS. */
void ui_sections_page(const struct config *cfg, struct strbuf *out, const char *title,
                      const char *sections, size_t len);
/* Answers the pages being made with 503, closes the connection and the
 * timer; on_closed (may be NULL) runs from the loop once all is closed,
 * after which ui is freed. */
void ui_close(struct ui *ui, void (*on_closed)(void *data), void *data);

#endif
