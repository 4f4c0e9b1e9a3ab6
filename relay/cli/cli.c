/*
 * cli.c — the operator commands (status, stuck, approvals, resolve, approve, reject,
 * cancel, retry, targets, prune, redrive, mcp-import: cli/mcp_import.c).
 *
 * Shape: each command is a short-lived process that runs one statement, so
 * it uses libpq's blocking API (the event-loop rule applies to `run` only),
 * in autocommit. The rules live in SQL, not here: every decision is one
 * SECURITY DEFINER function (schema/outbox/functions/) that locks the row,
 * checks its state and writes the audit row in one transaction, so the CLI,
 * psql and any script get the same answers. This file only parses the
 * command line, calls the function, maps SQLSTATEs to exit codes (cli.h) and
 * prints: aligned text for people, one JSON document (--json) for scripts.
 *
 * The command line is split in two. Positional arguments and the commands'
 * own flags (--json, --note, --by, --reason, --dry-run, --target, --since,
 * --until, --limit) are consumed here, each command
 * accepting only its own; every other --option goes to config_load, so the
 * connection options are those of `run` (--db, DATABASE_URL, PG*,
 * OUTBOX_RELAY_*). A passed-on "--name value" takes the next argument as its
 * value unless the option is a switch (config_switches below). "--" ends the
 * options: what follows is positional (a key that starts with "--").
 *
 * Text output never carries control characters (a last_error or a response
 * body may hold newlines): they become spaces, so a table row is one line.
 * A key or a database message on stderr is escaped instead (\n, \u0001),
 * so that what the caller enqueued can be read back exactly. The connection
 * asks for UTF-8, which the JSON output needs.
 *
 * Two views of one key: outbox.outcome is the caller's (terse: a reason only
 * once final, never a transport error); `status` adds what an operator needs
 * to see why a key is not succeeding: the row's last_error, when it is tried
 * next, and its last attempt in outbox.attempts (class, HTTP status, error).
 * Those need outbox_operator; without it, status still answers the outcome.
 * A statement refused for a missing grant is followed by a hint naming the
 * role that the command needs (required_role).
 */
#include "cli/cli.h"

#include "cli/mcp_import.h"
#include "config.h"
#include "lib/strbuf.h"
#include "lib/xalloc.h"

#include <jansson.h>
#include <libpq-fe.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CLI_MAX_POSITIONAL 2
#define LENGTH(array) (sizeof(array) / sizeof((array)[0]))

enum cli_flag {
    FLAG_JSON = 1u << 0,
    FLAG_NOTE = 1u << 1,
    FLAG_BY = 1u << 2,
    FLAG_REASON = 1u << 3,
    FLAG_DRY_RUN = 1u << 4,
    FLAG_TARGET = 1u << 5,
    FLAG_SINCE = 1u << 6,
    FLAG_UNTIL = 1u << 7,
    FLAG_LIMIT = 1u << 8,
    FLAG_PREFIX = 1u << 9,
    FLAG_ONLY = 1u << 10,
    FLAG_PASSTHROUGH_RO = 1u << 11,
};

/* Options of config_load that take no value (the OPT_BOOL rows of config.c). */
static const char *const config_switches[] = {"exit-when-idle"};

struct cli_args {
    const char *command;
    const char *positional[CLI_MAX_POSITIONAL];
    int positional_count;
    unsigned flags_seen;
    const char *note;
    const char *by;
    const char *reason;
    bool json;
    bool dry_run;
    const char *target; /* redrive */
    const char *since;
    const char *until;
    const char *limit;
    int prune_batch;    /* --prune-batch, for prune */
    const char *prefix; /* mcp-import */
    const char *only;
    bool passthrough_readonly; /* mcp-import */
    char *ca_file;             /* --ca-file, for mcp-import */
};

/* The commands' own flags: one row each, like config.c's options. A flag
 * with a value sets the const char * at field, a switch the bool there. */
struct flag_def {
    const char *name;
    enum cli_flag bit;
    bool takes_value;
    size_t field; /* offsetof(struct cli_args, ...) */
};

#define FLAG(name, bit, takes_value, field)                                                        \
    {                                                                                              \
        name, bit, takes_value, offsetof(struct cli_args, field)                                   \
    }

static const struct flag_def flag_defs[] = {
    FLAG("json", FLAG_JSON, false, json),
    FLAG("note", FLAG_NOTE, true, note),
    FLAG("by", FLAG_BY, true, by),
    FLAG("reason", FLAG_REASON, true, reason),
    FLAG("dry-run", FLAG_DRY_RUN, false, dry_run),
    FLAG("target", FLAG_TARGET, true, target),
    FLAG("since", FLAG_SINCE, true, since),
    FLAG("until", FLAG_UNTIL, true, until),
    FLAG("limit", FLAG_LIMIT, true, limit),
    FLAG("prefix", FLAG_PREFIX, true, prefix),
    FLAG("only", FLAG_ONLY, true, only),
    FLAG("passthrough-readonly", FLAG_PASSTHROUGH_RO, false, passthrough_readonly),
};

#define FLAG_COUNT (sizeof(flag_defs) / sizeof(flag_defs[0]))

typedef int (*command_fn)(PGconn *conn, const struct cli_args *args);

struct command_def {
    const char *name;
    const char *usage; /* what follows "outbox-relay " */
    int min_positional;
    int max_positional;
    unsigned flags_allowed;
    unsigned flags_required;
    command_fn run;
};

/* ------------------------------------------------------------------ errors */

static int exit_code_for_sqlstate(const char *sqlstate)
{
    if (sqlstate == NULL)
        return CLI_EXIT_DATABASE;
    if (!strcmp(sqlstate, "OR008"))
        return CLI_EXIT_NO_SUCH_KEY;
    if (!strcmp(sqlstate, "OR007"))
        return CLI_EXIT_REFUSED;
    /* An argument the database rejects: a bad value (22023), a time it
     * cannot read (22007, 22008: redrive's --since, --until), a target it
     * does not know (OR002: redrive's --target). */
    if (!strcmp(sqlstate, "22023") || !strcmp(sqlstate, "22007") || !strcmp(sqlstate, "22008") ||
        !strcmp(sqlstate, "OR002"))
        return CLI_EXIT_USAGE;
    return CLI_EXIT_DATABASE;
}

/* n bytes of text for stderr: control characters (C0, DEL, C1 as UTF-8)
 * escaped as \n, \r, \t or \u00XX, so that a message stays one line and a
 * key with a newline reads back exactly. */
static void put_escaped(FILE *out, const char *text, size_t n)
{
    const unsigned char *p = (const unsigned char *)text;
    for (size_t i = 0; i < n; i++) {
        unsigned code = p[i];
        if (code == 0xC2 && i + 1 < n && p[i + 1] >= 0x80 && p[i + 1] <= 0x9F)
            code = p[++i]; /* U+0080..U+009F */
        else if (code >= 0x20 && code != 0x7F)
            code = 0;
        if (code == 0)
            fputc(p[i], out);
        else if (code == '\n')
            fputs("\\n", out);
        else if (code == '\r')
            fputs("\\r", out);
        else if (code == '\t')
            fputs("\\t", out);
        else
            fprintf(out, "\\u%04X", code);
    }
}

static bool has_control_character(const char *text)
{
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        if (*p < 0x20 || *p == 0x7F || (p[0] == 0xC2 && p[1] >= 0x80 && p[1] <= 0x9F))
            return true;
    return false;
}

/* A key in a message on stderr: 'key', or E'key' with its control
 * characters escaped (the form outbox.quote_key gives in SQL). */
static void put_key(FILE *out, const char *key)
{
    bool escaped = has_control_character(key);
    fputs(escaped ? "E'" : "'", out);
    put_escaped(out, key, strlen(key));
    fputc('\'', out);
}

/* A libpq message without its trailing newline(s). A statement's error is
 * escaped (it may quote a key); libpq's own connection message is not (its
 * lines, "Is the server running...", are meant as lines). */
static void print_trimmed(const char *command, const char *prefix, const char *message, bool escape)
{
    size_t len = strlen(message);
    while (len > 0 && (message[len - 1] == '\n' || message[len - 1] == '\r'))
        len--;
    fprintf(stderr, "outbox-relay %s: %s", command, prefix);
    if (escape)
        put_escaped(stderr, message, len);
    else
        fwrite(message, 1, len, stderr);
    fputc('\n', stderr);
}

/* The role a command needs (README "Roles"): reading is outbox_operator's,
 * deciding and sending again outbox_admin's. */
static const char *required_role(const struct cli_args *args);

/* Prints the error of a failed statement; returns the exit code it maps to.
 * A missing grant is followed by the role to grant. */
static int report_failure(const struct cli_args *args, PGconn *conn, const PGresult *res)
{
    const char *command = args->command;
    const char *primary = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    if (primary != NULL)
        print_trimmed(command, "", primary, true);
    else
        print_trimmed(command, "", PQerrorMessage(conn), false);
    const char *hint = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_HINT) : NULL;
    if (hint != NULL)
        print_trimmed(command, "hint: ", hint, true);
    const char *sqlstate = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    if (hint == NULL && sqlstate != NULL && !strcmp(sqlstate, "42501")) {
        const char *role = required_role(args);
        fprintf(stderr,
                "outbox-relay %s: hint: %s needs the %s role; an admin grants it: GRANT %s TO "
                "%s;\n",
                command, command, role, role, PQuser(conn));
    }
    return exit_code_for_sqlstate(sqlstate);
}

/* Runs one statement; on success returns its rows, else prints the error,
 * stores the exit code and returns NULL. */
static PGresult *run_query(PGconn *conn, const struct cli_args *args, const char *sql, int nparams,
                           const char *const *params, int *exit_code)
{
    PGresult *res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) == PGRES_TUPLES_OK)
        return res;
    *exit_code = report_failure(args, conn, res);
    PQclear(res);
    return NULL;
}

/* ------------------------------------------------------------------ values */

static const char *cell(const PGresult *res, int row, int col)
{
    return PQgetisnull(res, row, col) ? NULL : PQgetvalue(res, row, col);
}

static long long cell_int(const PGresult *res, int row, int col)
{
    return strtoll(PQgetvalue(res, row, col), NULL, 10);
}

/* "1d2h", "5m12s", "42s": the two largest units. */
static void format_duration(long long seconds, char *out, size_t size)
{
    static const struct {
        const char *unit;
        long long seconds;
    } units[] = {{"d", 86400}, {"h", 3600}, {"m", 60}, {"s", 1}};
    if (seconds <= 0) {
        snprintf(out, size, "0s");
        return;
    }
    size_t used = 0;
    int shown = 0;
    out[0] = '\0';
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]) && shown < 2; i++) {
        long long n = seconds / units[i].seconds;
        seconds -= n * units[i].seconds;
        if (n == 0 && shown == 0)
            continue;
        shown++;
        if (n > 0 && used < size) {
            int written = snprintf(out + used, size - used, "%lld%s", n, units[i].unit);
            if (written > 0)
                used += (size_t)written;
        }
    }
}

/* A copy for text output; NULL becomes "-". Control characters (C0, DEL,
 * and C1 as UTF-8: U+0080..U+009F) become spaces: a response body comes
 * from a target and must not move the cursor or send terminal escapes. */
static char *printable(const char *value)
{
    const char *source = value ? value : "-";
    char *copy = xstrdup(source);
    for (unsigned char *p = (unsigned char *)copy; *p; p++) {
        if (*p < 0x20 || *p == 0x7f) {
            *p = ' ';
        } else if (*p == 0xC2 && p[1] >= 0x80 && p[1] <= 0x9F) {
            p[0] = ' ';
            p[1] = ' ';
            p++;
        }
    }
    return copy;
}

/* Columns a string takes on a terminal: one per UTF-8 character. */
static size_t display_width(const char *s)
{
    size_t width = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if ((*p & 0xC0) != 0x80)
            width++;
    return width;
}

static json_t *json_text_or_null(const char *value)
{
    if (value == NULL)
        return json_null();
    json_t *string = json_string(value);
    if (string != NULL)
        return string;
    struct strbuf scrubbed; /* not valid UTF-8: replace the bad bytes */
    strbuf_init(&scrubbed);
    utf8_scrub(&scrubbed, value, strlen(value));
    string = json_stringn(scrubbed.data, scrubbed.len);
    strbuf_free(&scrubbed);
    return string ? string : json_null();
}

static json_t *json_int_or_null(const PGresult *res, int row, int col)
{
    return PQgetisnull(res, row, col) ? json_null() : json_integer(cell_int(res, row, col));
}

static json_t *json_bool_of(const PGresult *res, int row, int col)
{
    return json_boolean(!PQgetisnull(res, row, col) && PQgetvalue(res, row, col)[0] == 't');
}

static void print_json(json_t *doc)
{
    json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    fputc('\n', stdout);
    json_decref(doc);
}

/* ------------------------------------------------------------------ tables */

struct table {
    size_t columns;
    const char *const *headers;
    size_t rows;
    char **cells; /* rows * columns, owned, printable */
};

static void table_init(struct table *t, const char *const *headers, size_t columns, size_t rows)
{
    t->columns = columns;
    t->headers = headers;
    t->rows = rows;
    t->cells = xcalloc(rows * columns + 1, sizeof(char *));
}

static void table_set(struct table *t, size_t row, size_t col, const char *value)
{
    t->cells[row * t->columns + col] = printable(value);
}

static void print_padded(const char *text, size_t width, bool last)
{
    fputs(text, stdout);
    if (last)
        return;
    for (size_t w = display_width(text); w < width + 2; w++)
        fputc(' ', stdout);
}

/* Columns left-aligned, two spaces apart; the last one is not padded. */
static void table_print(const struct table *t)
{
    size_t *widths = xcalloc(t->columns, sizeof(size_t));
    for (size_t c = 0; c < t->columns; c++) {
        widths[c] = display_width(t->headers[c]);
        for (size_t r = 0; r < t->rows; r++) {
            size_t w = display_width(t->cells[r * t->columns + c]);
            if (w > widths[c])
                widths[c] = w;
        }
    }
    for (size_t c = 0; c < t->columns; c++)
        print_padded(t->headers[c], widths[c], c + 1 == t->columns);
    fputc('\n', stdout);
    for (size_t r = 0; r < t->rows; r++) {
        for (size_t c = 0; c < t->columns; c++)
            print_padded(t->cells[r * t->columns + c], widths[c], c + 1 == t->columns);
        fputc('\n', stdout);
    }
    free(widths);
}

static void table_free(struct table *t)
{
    for (size_t i = 0; i < t->rows * t->columns; i++)
        free(t->cells[i]);
    free(t->cells);
}

/* "label:  value" lines, values aligned. */
static void print_fields(const char *const *labels, const char *const *values, size_t count)
{
    size_t width = 0;
    for (size_t i = 0; i < count; i++)
        if (display_width(labels[i]) + 1 > width)
            width = display_width(labels[i]) + 1;
    for (size_t i = 0; i < count; i++) {
        char *value = printable(values[i]);
        printf("%s:", labels[i]);
        for (size_t w = display_width(labels[i]) + 1; w < width + 2; w++)
            fputc(' ', stdout);
        printf("%s\n", value);
        free(value);
    }
}

/* How a column of a result is shown: as it is, as a duration (seconds), or
 * (JSON only) as a number, a boolean, or whether it is not NULL. */
enum column_kind { COL_TEXT, COL_DURATION, COL_INT, COL_BOOL, COL_NOT_NULL };

struct column {
    const char *name; /* the JSON member, or the table's header */
    int column;       /* in the result */
    enum column_kind kind;
};

/* Rows [0, rows) of res as a JSON array of objects, a member per column. */
static json_t *rows_json(const PGresult *res, int rows, const struct column *cols, size_t count)
{
    json_t *list = json_array();
    for (int r = 0; r < rows; r++) {
        json_t *item = json_object();
        for (size_t i = 0; i < count; i++) {
            int c = cols[i].column;
            json_t *value = cols[i].kind == COL_INT        ? json_int_or_null(res, r, c)
                            : cols[i].kind == COL_BOOL     ? json_bool_of(res, r, c)
                            : cols[i].kind == COL_NOT_NULL ? json_boolean(!PQgetisnull(res, r, c))
                                                           : json_text_or_null(cell(res, r, c));
            json_object_set_new(item, cols[i].name, value);
        }
        json_array_append_new(list, item);
    }
    return list;
}

/* {"name": list}, printed. */
static void print_json_list(const char *name, json_t *list)
{
    json_t *doc = json_object();
    json_object_set_new(doc, name, list);
    print_json(doc);
}

/* Rows [0, rows) of res as an aligned table, a column per entry of cols. */
static void print_rows_table(const PGresult *res, int rows, const struct column *cols, size_t count)
{
    const char **headers = xcalloc(count, sizeof(*headers));
    for (size_t i = 0; i < count; i++)
        headers[i] = cols[i].name;
    struct table t;
    table_init(&t, headers, count, (size_t)rows);
    for (int r = 0; r < rows; r++) {
        for (size_t i = 0; i < count; i++) {
            char duration[32];
            if (cols[i].kind == COL_DURATION)
                format_duration(cell_int(res, r, cols[i].column), duration, sizeof(duration));
            table_set(&t, (size_t)r, i,
                      cols[i].kind == COL_DURATION ? duration : cell(res, r, cols[i].column));
        }
    }
    table_print(&t);
    table_free(&t);
    free(headers);
}

/* ---------------------------------------------------------------- commands */

#define UTC_TIME(column)                                                                           \
    "to_char(" column " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"

/* status, the operator's part: the row's last error and when it is tried
 * next, and its last delivery or status check (decisions and releases left
 * out). Reads outbox.intents and outbox.attempts: outbox_operator. */
static const char status_detail_sql[] =
    "SELECT i.last_error,"
    /* when it is tried next: a retry, or an unknown outcome's next status check */
    " CASE WHEN isfinite(i.next_attempt_at) AND (i.state = 'pending' OR (i.state = 'unknown'"
    " AND EXISTS (SELECT 1 FROM outbox.targets t WHERE t.name = i.target"
    " AND t.status_url IS NOT NULL))) THEN " UTC_TIME(
        "i.next_attempt_at") " END,"
                             " a.attempt, " UTC_TIME(
                                 "a.at") ", a.relay, a.class::text, a.request_sent, a.http_status, "
                                         "a.error"
                                         " FROM outbox.intents i LEFT JOIN LATERAL ("
                                         "SELECT * FROM outbox.attempts x WHERE x.intent_id = i.id"
                                         " AND x.class NOT IN ('resolved', 'released') ORDER BY "
                                         "x.id DESC LIMIT 1) a ON true"
                                         " WHERE i.key = $1";

enum status_detail_column {
    DETAIL_LAST_ERROR,
    DETAIL_NEXT_ATTEMPT_AT,
    DETAIL_ATTEMPT,
    DETAIL_AT,
    DETAIL_RELAY,
    DETAIL_CLASS,
    DETAIL_REQUEST_SENT,
    DETAIL_HTTP_STATUS,
    DETAIL_ERROR,
};

#define STATUS_FIELDS 11 /* the outcome's, as labelled below */

/* The detail of status: its rows (one, or none once pruned), or NULL when
 * the login may not read them (*denied) or the statement failed (*exit_code
 * set, the error printed). */
static PGresult *status_detail(PGconn *conn, const struct cli_args *args, bool *denied,
                               int *exit_code)
{
    const char *key = args->positional[0];
    PGresult *res = PQexecParams(conn, status_detail_sql, 1, NULL, &key, NULL, NULL, 0);
    if (PQresultStatus(res) == PGRES_TUPLES_OK)
        return res;
    const char *sqlstate = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    if (sqlstate && !strcmp(sqlstate, "42501"))
        *denied = true;
    else
        *exit_code = report_failure(args, conn, res);
    PQclear(res);
    return NULL;
}

static json_t *status_last_attempt_json(const PGresult *detail)
{
    if (detail == NULL || PQntuples(detail) == 0 || PQgetisnull(detail, 0, DETAIL_ATTEMPT))
        return json_null();
    json_t *a = json_object();
    json_object_set_new(a, "attempt", json_int_or_null(detail, 0, DETAIL_ATTEMPT));
    json_object_set_new(a, "at", json_text_or_null(cell(detail, 0, DETAIL_AT)));
    json_object_set_new(a, "relay", json_text_or_null(cell(detail, 0, DETAIL_RELAY)));
    json_object_set_new(a, "class", json_text_or_null(cell(detail, 0, DETAIL_CLASS)));
    json_object_set_new(a, "request_sent",
                        PQgetisnull(detail, 0, DETAIL_REQUEST_SENT)
                            ? json_null()
                            : json_bool_of(detail, 0, DETAIL_REQUEST_SENT));
    json_object_set_new(a, "http_status", json_int_or_null(detail, 0, DETAIL_HTTP_STATUS));
    json_object_set_new(a, "error", json_text_or_null(cell(detail, 0, DETAIL_ERROR)));
    return a;
}

static int command_status(PGconn *conn, const struct cli_args *args)
{
    static const char *const labels[] = {
        "key",          "status",     "message",         "state",
        "target",       "attempts",   "response_status", "response_body",
        "last_error",   "updated_at", "traceparent",     "next_attempt_at",
        "last_attempt", "  class",    "  http_status",   "  error"};
    const char *key = args->positional[0];
    int exit_code = CLI_EXIT_OK;
    PGresult *res =
        run_query(conn, args,
                  "SELECT $1::text, status, message, state::text, target, attempts, "
                  "response_status, response_body, last_error, " UTC_TIME(
                      "updated_at") ", outbox.traceparent_of($1) FROM outbox.outcome($1)",
                  1, &key, &exit_code);
    if (res == NULL)
        return exit_code;
    if (PQntuples(res) == 0) {
        fprintf(stderr, "outbox-relay %s: no intent with key ", args->command);
        put_key(stderr, key);
        fputc('\n', stderr);
        PQclear(res);
        return CLI_EXIT_NO_SUCH_KEY;
    }
    bool denied = false;
    PGresult *detail = status_detail(conn, args, &denied, &exit_code);
    if (detail == NULL && !denied) {
        PQclear(res);
        return exit_code;
    }
    bool has_row = detail && PQntuples(detail) > 0; /* none once pruned */
    /* The row's last error, whatever the state (the outcome's is only for
     * final states); the outcome's when the row cannot be read. */
    const char *last_error = has_row ? cell(detail, 0, DETAIL_LAST_ERROR) : cell(res, 0, 8);
    const char *next_at = has_row ? cell(detail, 0, DETAIL_NEXT_ATTEMPT_AT) : NULL;
    bool has_attempt = has_row && !PQgetisnull(detail, 0, DETAIL_ATTEMPT);
    if (args->json) {
        json_t *doc = json_object();
        for (int col = 0; col < STATUS_FIELDS; col++) {
            bool numeric = col == 5 || col == 6;
            const char *value = col == 8 ? last_error : cell(res, 0, col);
            json_object_set_new(doc, labels[col],
                                numeric ? json_int_or_null(res, 0, col) : json_text_or_null(value));
        }
        json_object_set_new(doc, "next_attempt_at", json_text_or_null(next_at));
        json_object_set_new(doc, "last_attempt", status_last_attempt_json(detail));
        if (denied)
            json_object_set_new(doc, "detail_unreadable",
                                json_string("reading the intent's row and attempts needs the "
                                            "outbox_operator role"));
        print_json(doc);
    } else {
        const char *values[STATUS_FIELDS + 5];
        for (int col = 0; col < STATUS_FIELDS; col++)
            values[col] = col == 8 ? last_error : cell(res, 0, col);
        values[STATUS_FIELDS] = next_at;
        char last[160], sent[96];
        if (denied)
            snprintf(last, sizeof(last),
                     "not shown: reading attempts needs the outbox_operator "
                     "role");
        else if (has_attempt)
            snprintf(last, sizeof(last), "%s at %s by %s", cell(detail, 0, DETAIL_ATTEMPT),
                     cell(detail, 0, DETAIL_AT), cell(detail, 0, DETAIL_RELAY));
        else
            snprintf(last, sizeof(last), "-");
        values[STATUS_FIELDS + 1] = last;
        size_t count = STATUS_FIELDS + 2;
        if (has_attempt) {
            const char *was_sent = cell(detail, 0, DETAIL_REQUEST_SENT);
            snprintf(sent, sizeof(sent), "%s%s", cell(detail, 0, DETAIL_CLASS),
                     was_sent == NULL     ? ""
                     : was_sent[0] == 't' ? " (request sent)"
                                          : " (nothing sent)");
            values[count++] = sent;
            values[count++] = cell(detail, 0, DETAIL_HTTP_STATUS);
            values[count++] = cell(detail, 0, DETAIL_ERROR);
        }
        print_fields(labels, values, count);
    }
    PQclear(detail);
    PQclear(res);
    return CLI_EXIT_OK;
}

/* After stuck's text: intents awaiting approval are listed there only after
 * 24 hours, so say how many wait and where they are. Nothing when none do,
 * or when they cannot be counted. */
static void print_awaiting_note(PGconn *conn)
{
    PGresult *res =
        PQexec(conn, "SELECT count(*) FROM outbox.intents WHERE state = 'awaiting_approval'");
    long long n = PQresultStatus(res) == PGRES_TUPLES_OK ? cell_int(res, 0, 0) : 0;
    PQclear(res);
    if (n > 0)
        printf("%lld intent%s await%s approval: outbox-relay approvals\n", n, n == 1 ? "" : "s",
               n == 1 ? "s" : "");
}

static int command_stuck(PGconn *conn, const struct cli_args *args)
{
    static const struct column json_columns[] = {
        {"key", 0, COL_TEXT},        {"target", 1, COL_TEXT},     {"state", 2, COL_TEXT},
        {"reason", 3, COL_TEXT},     {"age_s", 4, COL_INT},       {"attempts", 5, COL_INT},
        {"last_error", 6, COL_TEXT}, {"updated_at", 7, COL_TEXT},
    };
    static const struct column table_columns[] = {
        {"KEY", 0, COL_TEXT},        {"TARGET", 1, COL_TEXT},  {"STATE", 2, COL_TEXT},
        {"REASON", 3, COL_TEXT},     {"AGE", 4, COL_DURATION}, {"ATTEMPTS", 5, COL_TEXT},
        {"LAST_ERROR", 6, COL_TEXT},
    };
    int exit_code = CLI_EXIT_OK;
    PGresult *res =
        run_query(conn, args,
                  "SELECT key, target, state::text, reason, "
                  "floor(extract(epoch FROM age))::bigint, attempts, last_error, " UTC_TIME(
                      "updated_at") " FROM outbox.stuck ORDER BY age DESC, key",
                  0, NULL, &exit_code);
    if (res == NULL)
        return exit_code;
    int rows = PQntuples(res);
    if (args->json)
        print_json_list("stuck", rows_json(res, rows, json_columns, LENGTH(json_columns)));
    else if (rows == 0)
        printf("no stuck keys\n");
    else
        print_rows_table(res, rows, table_columns, LENGTH(table_columns));
    PQclear(res);
    if (!args->json)
        print_awaiting_note(conn);
    return CLI_EXIT_OK;
}

/* approvals: what waits for a person's approve or reject, oldest first,
 * with the target's rule and why it holds each intent (outbox.approvals,
 * it names fields and types, never a value of the payload). */
static int command_approvals(PGconn *conn, const struct cli_args *args)
{
    static const struct column json_columns[] = {
        {"key", 0, COL_TEXT},    {"target", 1, COL_TEXT}, {"age_s", 2, COL_INT},
        {"rule", 3, COL_TEXT},   {"reason", 4, COL_TEXT}, {"created_at", 5, COL_TEXT},
        {"run_id", 6, COL_TEXT},
    };
    static const struct column table_columns[] = {
        {"KEY", 0, COL_TEXT},  {"TARGET", 1, COL_TEXT}, {"AGE", 2, COL_DURATION},
        {"RULE", 3, COL_TEXT}, {"WHY", 4, COL_TEXT},
    };
    int exit_code = CLI_EXIT_OK;
    PGresult *res = run_query(conn, args,
                              "SELECT key, target, floor(extract(epoch FROM age))::bigint, rule, "
                              "reason, " UTC_TIME("created_at") ", run_id"
                                                                " FROM outbox.approvals"
                                                                " ORDER BY created_at, key",
                              0, NULL, &exit_code);
    if (res == NULL)
        return exit_code;
    int rows = PQntuples(res);
    if (args->json)
        print_json_list("approvals", rows_json(res, rows, json_columns, LENGTH(json_columns)));
    else if (rows == 0)
        printf("nothing awaits approval\n");
    else
        print_rows_table(res, rows, table_columns, LENGTH(table_columns));
    PQclear(res);
    return CLI_EXIT_OK;
}

static int command_targets(PGconn *conn, const struct cli_args *args)
{
    static const char *const headers[] = {"NAME",    "URL",        "METHOD",     "KEY_HEADER",
                                          "KEY_TTL", "STATUS_URL", "TIMEOUT_MS", "RETRY",
                                          "ENABLED", "CIRCUIT",    "SECRET_ENV"};
    int exit_code = CLI_EXIT_OK;
    /* secret_env is the name of a variable in the relay's environment; its
     * value is never read here. */
    PGresult *res = run_query(conn, args,
                              "SELECT t.name, url, method, key_header, "
                              "floor(extract(epoch FROM key_ttl))::bigint, status_url, timeout_ms, "
                              "max_attempts, enabled, secret_env, "
                              "floor(extract(epoch FROM retry_for))::bigint, "
                              "coalesce(s.circuit, 'closed') "
                              "FROM outbox.targets t LEFT JOIN outbox.target_state s "
                              "ON s.target = t.name ORDER BY t.name",
                              0, NULL, &exit_code);
    if (res == NULL)
        return exit_code;
    static const struct column json_columns[] = {
        {"name", 0, COL_TEXT},
        {"url", 1, COL_TEXT},
        {"method", 2, COL_TEXT},
        {"key_header", 3, COL_TEXT},
        {"deduplicates", 3, COL_NOT_NULL},
        {"key_ttl_s", 4, COL_INT},
        {"status_url", 5, COL_TEXT},
        {"timeout_ms", 6, COL_INT},
        {"max_attempts", 7, COL_INT},
        {"retry_for_s", 10, COL_INT},
        {"circuit", 11, COL_TEXT},
        {"enabled", 8, COL_BOOL},
        {"secret_env", 9, COL_TEXT},
    };
    int rows = PQntuples(res);
    if (args->json) {
        print_json_list("targets", rows_json(res, rows, json_columns, LENGTH(json_columns)));
    } else if (rows == 0) {
        printf("no targets\n");
    } else {
        struct table t;
        table_init(&t, headers, 11, (size_t)rows);
        for (int r = 0; r < rows; r++) {
            char ttl[32];
            format_duration(cell_int(res, r, 4), ttl, sizeof(ttl));
            const char *key_header = cell(res, r, 3);
            table_set(&t, (size_t)r, 0, cell(res, r, 0));
            table_set(&t, (size_t)r, 1, cell(res, r, 1));
            table_set(&t, (size_t)r, 2, cell(res, r, 2));
            table_set(&t, (size_t)r, 3, key_header ? key_header : "(none: cannot deduplicate)");
            table_set(&t, (size_t)r, 4, ttl);
            table_set(&t, (size_t)r, 5, cell(res, r, 5));
            table_set(&t, (size_t)r, 6, cell(res, r, 6));
            /* The retry horizon: retry_for, and the cap on attempts if there is one. */
            char retry_for[32], retry[64];
            format_duration(cell_int(res, r, 10), retry_for, sizeof(retry_for));
            if (PQgetisnull(res, r, 7))
                snprintf(retry, sizeof(retry), "%s", retry_for);
            else
                snprintf(retry, sizeof(retry), "%s,max%s", retry_for, PQgetvalue(res, r, 7));
            table_set(&t, (size_t)r, 7, retry);
            table_set(&t, (size_t)r, 8, PQgetvalue(res, r, 8)[0] == 't' ? "yes" : "no");
            table_set(&t, (size_t)r, 9, cell(res, r, 11));
            table_set(&t, (size_t)r, 10, cell(res, r, 9));
        }
        table_print(&t);
        table_free(&t);
    }
    PQclear(res);
    return CLI_EXIT_OK;
}

/* One decision function: it returns the intent's new state. Text output is
 * "<done> 'KEY'<after>" with the state where the format has %s. */
static int run_decision(PGconn *conn, const struct cli_args *args, const char *sql, int nparams,
                        const char *const *params, const char *done)
{
    int exit_code = CLI_EXIT_OK;
    PGresult *res = run_query(conn, args, sql, nparams, params, &exit_code);
    if (res == NULL)
        return exit_code;
    const char *key = args->positional[0];
    const char *state = PQntuples(res) > 0 ? cell(res, 0, 0) : NULL;
    if (args->json) {
        json_t *doc = json_object();
        json_object_set_new(doc, "key", json_text_or_null(key));
        json_object_set_new(doc, "state", json_text_or_null(state));
        print_json(doc);
    } else {
        char *printable_key = printable(key);
        printf("%s '%s': now %s\n", done, printable_key, state ? state : "-");
        free(printable_key);
    }
    PQclear(res);
    return CLI_EXIT_OK;
}

static int command_resolve(PGconn *conn, const struct cli_args *args)
{
    const char *params[3] = {args->positional[0], args->positional[1], args->note};
    return run_decision(conn, args, "SELECT outbox.resolve($1, $2, $3)::text", 3, params,
                        "resolved");
}

static int command_approve(PGconn *conn, const struct cli_args *args)
{
    const char *params[2] = {args->positional[0], args->by};
    return run_decision(conn, args, "SELECT outbox.approve($1, $2)::text", 2, params, "approved");
}

static int command_reject(PGconn *conn, const struct cli_args *args)
{
    const char *params[3] = {args->positional[0], args->by, args->reason};
    return run_decision(conn, args, "SELECT outbox.reject($1, $2, $3)::text", 3, params,
                        "rejected");
}

static int command_cancel(PGconn *conn, const struct cli_args *args)
{
    const char *params[2] = {args->positional[0], args->reason};
    return run_decision(conn, args, "SELECT outbox.cancel($1, $2)::text", 2, params, "cancelled");
}

static int command_retry(PGconn *conn, const struct cli_args *args)
{
    const char *params[2] = {args->positional[0], args->by};
    return run_decision(conn, args, "SELECT outbox.retry_now($1, $2)::text", 2, params,
                        "retry requested for");
}

/* prune --dry-run: what would go, per target and final state. */
static int command_prune_dry_run(PGconn *conn, const struct cli_args *args)
{
    int exit_code = CLI_EXIT_OK;
    PGresult *res = run_query(conn, args,
                              "SELECT target, state, intents, "
                              "to_char(oldest_settled AT TIME ZONE 'UTC', "
                              "'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), "
                              "floor(extract(epoch FROM retain_for))::bigint, "
                              "(SELECT count(*) FROM outbox.tombstones WHERE forget_at < now()) "
                              "FROM outbox.prunable() "
                              "UNION ALL SELECT NULL, NULL, NULL, NULL, NULL, "
                              "(SELECT count(*) FROM outbox.tombstones WHERE forget_at < now())",
                              0, NULL, &exit_code);
    if (res == NULL)
        return exit_code;
    int rows = PQntuples(res) - 1; /* the last row only carries the tombstone count */
    long long total = 0, expired = cell_int(res, rows, 5);
    for (int r = 0; r < rows; r++)
        total += cell_int(res, r, 2);
    if (args->json) {
        static const struct column json_columns[] = {
            {"target", 0, COL_TEXT},         {"state", 1, COL_TEXT},       {"intents", 2, COL_INT},
            {"oldest_settled", 3, COL_TEXT}, {"retain_for_s", 4, COL_INT},
        };
        json_t *doc = json_object();
        json_object_set_new(doc, "dry_run", json_true());
        json_object_set_new(doc, "would_prune", json_integer(total));
        json_object_set_new(doc, "would_forget", json_integer(expired));
        json_object_set_new(doc, "by_target",
                            rows_json(res, rows, json_columns, LENGTH(json_columns)));
        print_json(doc);
    } else {
        static const struct column table_columns[] = {
            {"TARGET", 0, COL_TEXT},         {"STATE", 1, COL_TEXT},
            {"INTENTS", 2, COL_TEXT},        {"OLDEST_SETTLED", 3, COL_TEXT},
            {"RETAIN_FOR", 4, COL_DURATION},
        };
        if (rows > 0)
            print_rows_table(res, rows, table_columns, LENGTH(table_columns));
        printf("dry run: would prune %lld intents and forget %lld expired keys\n", total, expired);
    }
    PQclear(res);
    return CLI_EXIT_OK;
}

/* prune: outbox.prune_step until a step finds less than a batch. */
static int command_prune(PGconn *conn, const struct cli_args *args)
{
    if (args->dry_run)
        return command_prune_dry_run(conn, args);
    char batch[24];
    snprintf(batch, sizeof(batch), "%d", args->prune_batch);
    const char *params[1] = {batch};
    long long pruned = 0, forgotten = 0;
    int steps = 0;
    bool locked_out = false;
    for (;;) {
        int exit_code = CLI_EXIT_OK;
        PGresult *res =
            run_query(conn, args, "SELECT pruned, forgotten, locked FROM outbox.prune_step($1)", 1,
                      params, &exit_code);
        if (res == NULL)
            return exit_code;
        long long step_pruned = cell_int(res, 0, 0), step_forgotten = cell_int(res, 0, 1);
        locked_out = PQgetvalue(res, 0, 2)[0] != 't';
        PQclear(res);
        if (locked_out)
            break;
        steps++;
        pruned += step_pruned;
        forgotten += step_forgotten;
        if (step_pruned < args->prune_batch && step_forgotten < args->prune_batch)
            break;
    }
    if (args->json) {
        json_t *doc = json_object();
        json_object_set_new(doc, "pruned", json_integer(pruned));
        json_object_set_new(doc, "forgotten", json_integer(forgotten));
        json_object_set_new(doc, "steps", json_integer(steps));
        json_object_set_new(doc, "locked_out", json_boolean(locked_out));
        print_json(doc);
    } else if (locked_out && steps == 0) {
        printf("another session is pruning; nothing done\n");
    } else {
        printf("pruned %lld intents and forgot %lld expired keys (%d transactions)\n", pruned,
               forgotten, steps);
    }
    return CLI_EXIT_OK;
}

/* redrive's --limit: as outbox.redrive takes it. */
#define REDRIVE_LIMIT_MAX 1000000
#define REDRIVE_LIMIT_DEFAULT "10000"

static bool limit_valid(const char *text)
{
    if (*text < '0' || *text > '9')
        return false;
    char *end = NULL;
    long n = strtol(text, &end, 10);
    return *end == '\0' && n >= 1 && n <= REDRIVE_LIMIT_MAX;
}

/* redrive: outbox.redrive, one statement. The rows it moved (or, with
 * --dry-run, would move), oldest settled first; a last row carries the
 * window as the database read it (UTC) and how many failed intents of the
 * target the window held when the statement began, so that those left
 * failed (an attempt may have executed, or another session held the row)
 * are counted, never passed over in silence. */
#define REDRIVE_UTC "'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
static const char redrive_sql[] =
    "SELECT key, target, to_char(settled_at AT TIME ZONE " REDRIVE_UTC ", attempts, last_error, n"
    " FROM outbox.redrive($1, $2::timestamptz, $3::timestamptz, $4::boolean, $5::integer, $6)"
    " WITH ORDINALITY AS r(key, target, settled_at, attempts, last_error, n)"
    " UNION ALL SELECT NULL, NULL, to_char($2::timestamptz AT TIME ZONE " REDRIVE_UTC ","
    " (SELECT count(*) FROM outbox.intents i WHERE i.target = $1 AND i.state = 'failed'"
    " AND i.updated_at >= $2::timestamptz AND i.updated_at < $3::timestamptz)::int,"
    " to_char($3::timestamptz AT TIME ZONE " REDRIVE_UTC ", NULL"
    " ORDER BY 6 NULLS LAST";

static int command_redrive(PGconn *conn, const struct cli_args *args)
{
    const char *limit = args->limit ? args->limit : REDRIVE_LIMIT_DEFAULT;
    const char *params[6] = {
        args->target, args->since, args->until, args->dry_run ? "true" : "false", limit, args->by};
    int exit_code = CLI_EXIT_OK;
    PGresult *res = run_query(conn, args, redrive_sql, 6, params, &exit_code);
    if (res == NULL)
        return exit_code;
    int rows = PQntuples(res) - 1; /* the last row only carries the window */
    const char *since = cell(res, rows, 2), *until = cell(res, rows, 4);
    long limit_n = strtol(limit, NULL, 10); /* checked by limit_valid */
    bool limit_reached = rows == limit_n;
    long long left = cell_int(res, rows, 3) - rows; /* failed in the window, not moved */
    if (left < 0)
        left = 0; /* rows that failed while the statement ran */
    static const struct column columns[] = {
        {"key", 0, COL_TEXT},     {"target", 1, COL_TEXT},     {"settled_at", 2, COL_TEXT},
        {"attempts", 3, COL_INT}, {"last_error", 4, COL_TEXT},
    };
    static const struct column table_columns[] = {
        {"KEY", 0, COL_TEXT},      {"TARGET", 1, COL_TEXT},     {"SETTLED_AT", 2, COL_TEXT},
        {"ATTEMPTS", 3, COL_TEXT}, {"LAST_ERROR", 4, COL_TEXT},
    };
    if (args->json) {
        json_t *list = rows_json(res, rows, columns, LENGTH(columns));
        json_t *doc = json_object();
        json_object_set_new(doc, "dry_run", json_boolean(args->dry_run));
        json_object_set_new(doc, "target", json_text_or_null(args->target));
        json_object_set_new(doc, "since", json_text_or_null(since));
        json_object_set_new(doc, "until", json_text_or_null(until));
        json_object_set_new(doc, args->dry_run ? "would_redrive" : "redriven", json_integer(rows));
        json_object_set_new(doc, "limit", json_integer(limit_n));
        json_object_set_new(doc, "limit_reached", json_boolean(limit_reached));
        json_object_set_new(doc, "left_failed", json_integer(left));
        json_object_set_new(doc, "intents", list);
        print_json(doc);
    } else {
        if (rows > 0)
            print_rows_table(res, rows, table_columns, LENGTH(table_columns));
        char *target = printable(args->target);
        printf("%s %d failed intent%s of target '%s' settled in [%s, %s)%s\n",
               args->dry_run ? "dry run: would redrive" : "redriven", rows, rows == 1 ? "" : "s",
               target, since ? since : "-", until ? until : "-",
               args->dry_run || rows == 0 ? "" : ": pending again, due now");
        free(target);
        if (limit_reached)
            printf("the limit of %s was reached: %s\n", limit,
                   args->dry_run ? "there may be more" : "run it again for the rest");
        else if (left > 0)
            printf(
                "%lld other failed intent%s of the target in the window stay%s failed: an attempt "
                "may have executed (outbox-relay status KEY; a person decides), or another "
                "session held %s\n",
                left, left == 1 ? "" : "s", left == 1 ? "s" : "", left == 1 ? "it" : "them");
    }
    PQclear(res);
    return CLI_EXIT_OK;
}

/* mcp-import: cli/mcp_import.c (it speaks to the upstream, then writes rows). */
static int command_mcp_import(PGconn *conn, const struct cli_args *args)
{
    return mcp_import_run(conn, args->positional[0], args->prefix, args->only,
                          args->passthrough_readonly, args->ca_file);
}

static const struct command_def commands[] = {
    {"status", "status KEY [--json]", 1, 1, FLAG_JSON, 0, command_status},
    {"stuck", "stuck [--json]", 0, 0, FLAG_JSON, 0, command_stuck},
    {"approvals", "approvals [--json]", 0, 0, FLAG_JSON, 0, command_approvals},
    {"resolve", "resolve KEY succeeded|failed --note TEXT [--json]", 2, 2, FLAG_JSON | FLAG_NOTE,
     FLAG_NOTE, command_resolve},
    {"approve", "approve KEY --by NAME [--json]", 1, 1, FLAG_JSON | FLAG_BY, FLAG_BY,
     command_approve},
    {"reject", "reject KEY --by NAME --reason TEXT [--json]", 1, 1,
     FLAG_JSON | FLAG_BY | FLAG_REASON, FLAG_BY | FLAG_REASON, command_reject},
    {"cancel", "cancel KEY [--reason TEXT] [--json]", 1, 1, FLAG_JSON | FLAG_REASON, 0,
     command_cancel},
    {"retry", "retry KEY [--by NAME] [--json]", 1, 1, FLAG_JSON | FLAG_BY, 0, command_retry},
    {"targets", "targets [--json]", 0, 0, FLAG_JSON, 0, command_targets},
    {"prune", "prune [--dry-run] [--json]", 0, 0, FLAG_JSON | FLAG_DRY_RUN, 0, command_prune},
    {"redrive",
     "redrive --target NAME --since TIME --until TIME [--limit N] [--by NAME] [--dry-run] [--json]",
     0, 0, FLAG_JSON | FLAG_DRY_RUN | FLAG_TARGET | FLAG_SINCE | FLAG_UNTIL | FLAG_LIMIT | FLAG_BY,
     FLAG_TARGET | FLAG_SINCE | FLAG_UNTIL, command_redrive},
    {"mcp-import", "mcp-import TARGET [--prefix P] [--only NAME,NAME] [--passthrough-readonly]", 1,
     1, FLAG_PREFIX | FLAG_ONLY | FLAG_PASSTHROUGH_RO, 0, command_mcp_import},
};

#define COMMAND_COUNT (sizeof(commands) / sizeof(commands[0]))

static const char *required_role(const struct cli_args *args)
{
    static const char *const readers[] = {"status", "stuck", "approvals", "targets"};
    for (size_t i = 0; i < LENGTH(readers); i++)
        if (!strcmp(args->command, readers[i]))
            return "outbox_operator";
    if (!strcmp(args->command, "prune") && args->dry_run)
        return "outbox_operator";
    return "outbox_admin";
}

/* ------------------------------------------------------------- parsing */

static const struct command_def *find_command(const char *name)
{
    for (size_t i = 0; i < COMMAND_COUNT; i++)
        if (!strcmp(commands[i].name, name))
            return &commands[i];
    return NULL;
}

bool cli_is_command(const char *name)
{
    return find_command(name) != NULL;
}

static const struct flag_def *find_flag(const char *name, size_t len)
{
    for (size_t i = 0; i < FLAG_COUNT; i++)
        if (strlen(flag_defs[i].name) == len && !strncmp(flag_defs[i].name, name, len))
            return &flag_defs[i];
    return NULL;
}

static bool is_config_switch(const char *name)
{
    for (size_t i = 0; i < sizeof(config_switches) / sizeof(config_switches[0]); i++)
        if (!strcmp(config_switches[i], name))
            return true;
    return false;
}

static void usage_error(const struct command_def *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void usage_error(const struct command_def *cmd, const char *fmt, ...)
{
    fprintf(stderr, "outbox-relay %s: ", cmd->name);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nusage: outbox-relay %s [connection options] (see --help)\n", cmd->usage);
}

static void store_flag(struct cli_args *args, const struct flag_def *flag, const char *value)
{
    args->flags_seen |= flag->bit;
    char *field = (char *)args + flag->field;
    if (flag->takes_value)
        *(const char **)(void *)field = value;
    else
        *(bool *)(void *)field = true;
}

enum parse_result { PARSE_OK, PARSE_HELP, PARSE_ERROR };

/* Fills args from argv; what is not the command's own goes to config_argv. */
static enum parse_result parse_arguments(const struct command_def *cmd, int argc, char **argv,
                                         struct cli_args *args, char **config_argv,
                                         int *config_argc)
{
    bool options_ended = false;
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (!options_ended && !strcmp(arg, "--")) {
            options_ended = true;
            continue;
        }
        if (!options_ended && (!strcmp(arg, "--help") || !strcmp(arg, "-h")))
            return PARSE_HELP;
        if (options_ended || strncmp(arg, "--", 2) != 0) {
            if (args->positional_count == cmd->max_positional) {
                usage_error(cmd, "unexpected argument '%s'", arg);
                return PARSE_ERROR;
            }
            args->positional[args->positional_count++] = arg;
            continue;
        }
        const char *name = arg + 2;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const struct flag_def *flag = find_flag(name, len);
        if (flag == NULL) {
            config_argv[(*config_argc)++] = argv[i];
            if (eq == NULL && !is_config_switch(name) && i + 1 < argc)
                config_argv[(*config_argc)++] = argv[++i];
            continue;
        }
        if ((cmd->flags_allowed & flag->bit) == 0) {
            usage_error(cmd, "--%s is not an option of this command", flag->name);
            return PARSE_ERROR;
        }
        const char *value = NULL;
        if (flag->takes_value) {
            if (eq != NULL) {
                value = eq + 1;
            } else if (i + 1 < argc) {
                value = argv[++i];
            } else {
                usage_error(cmd, "--%s needs a value", flag->name);
                return PARSE_ERROR;
            }
        } else if (eq != NULL) {
            usage_error(cmd, "--%s takes no value", flag->name);
            return PARSE_ERROR;
        }
        store_flag(args, flag, value);
    }
    if (args->positional_count < cmd->min_positional) {
        /* Only resolve has a second positional argument. */
        usage_error(cmd, "missing %s",
                    args->positional_count > 0       ? "succeeded|failed"
                    : cmd->run == command_mcp_import ? "TARGET"
                                                     : "KEY");
        return PARSE_ERROR;
    }
    for (size_t f = 0; f < FLAG_COUNT; f++) {
        if ((cmd->flags_required & flag_defs[f].bit) && !(args->flags_seen & flag_defs[f].bit)) {
            usage_error(cmd, "missing --%s", flag_defs[f].name);
            return PARSE_ERROR;
        }
    }
    if (cmd->run == command_resolve && strcmp(args->positional[1], "succeeded") != 0 &&
        strcmp(args->positional[1], "failed") != 0) {
        usage_error(cmd, "the outcome must be succeeded or failed, not '%s'", args->positional[1]);
        return PARSE_ERROR;
    }
    if (args->limit != NULL && !limit_valid(args->limit)) {
        usage_error(cmd, "--limit must be a whole number from 1 to %d, not '%s'", REDRIVE_LIMIT_MAX,
                    args->limit);
        return PARSE_ERROR;
    }
    return PARSE_OK;
}

/* ------------------------------------------------------------- connection */

static PGconn *connect_database(const struct config *cfg, const char *command)
{
    char timeout[32];
    snprintf(timeout, sizeof(timeout), "%d", (cfg->connect_timeout_ms + 999) / 1000);
    char application[64];
    snprintf(application, sizeof(application), "outbox-relay %s", command);
    /* Later keywords win: the connection string may set the first two; the
     * encoding is ours, because the JSON output must be UTF-8. */
    const char *const keywords[] = {"connect_timeout", "fallback_application_name", "dbname",
                                    "client_encoding", NULL};
    const char *const values[] = {timeout, application, cfg->db ? cfg->db : "", "UTF8", NULL};
    PGconn *conn = PQconnectdbParams(keywords, values, 1);
    if (PQstatus(conn) != CONNECTION_OK) {
        print_trimmed(command, "cannot connect to the database: ", PQerrorMessage(conn), false);
        PQfinish(conn);
        return NULL;
    }
    return conn;
}

int cli_run(const char *command, int argc, char **argv)
{
    const struct command_def *cmd = find_command(command);
    if (cmd == NULL) {
        fprintf(stderr, "outbox-relay: unknown command '%s' (see --help)\n", command);
        return CLI_EXIT_USAGE;
    }
    struct cli_args args = {.command = cmd->name};
    char **config_argv = xcalloc((size_t)argc + 1, sizeof(char *));
    int config_argc = 0;
    enum parse_result parsed = parse_arguments(cmd, argc, argv, &args, config_argv, &config_argc);
    if (parsed != PARSE_OK) {
        free(config_argv);
        if (parsed == PARSE_HELP) {
            printf("usage: outbox-relay %s [connection options]\n"
                   "connection options, environment and exit codes: outbox-relay --help\n",
                   cmd->usage);
            return CLI_EXIT_OK;
        }
        return CLI_EXIT_USAGE;
    }

    struct config cfg;
    enum config_result loaded = config_load(&cfg, config_argc, config_argv);
    free(config_argv);
    if (loaded != CONFIG_OK || config_needs_one_database(&cfg, cmd->name)) {
        config_free(&cfg);
        return CLI_EXIT_USAGE;
    }
    PGconn *conn = connect_database(&cfg, cmd->name);
    args.prune_batch = cfg.prune_batch;
    args.ca_file = cfg.ca_file ? xstrdup(cfg.ca_file) : NULL;
    config_free(&cfg);
    if (conn == NULL) {
        free(args.ca_file);
        return CLI_EXIT_DATABASE;
    }
    int rc = cmd->run(conn, &args);
    free(args.ca_file);
    PQfinish(conn);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "outbox-relay %s: cannot write the output: %m\n", cmd->name);
        if (rc == CLI_EXIT_OK)
            rc = CLI_EXIT_DATABASE;
    }
    return rc;
}
