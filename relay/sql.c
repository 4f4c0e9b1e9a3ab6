/*
 * sql.c — the rows of the relay's statements (sql.h), parsed.
 *
 * Why here: a column number means something only next to the SELECT list
 * that put the column there. The parsers sit beside sql.h, so that changing
 * a statement's columns is one edit in two adjacent files, and the
 * scheduler reads fields by name. A NULL cell reads as "" (PQgetvalue), so
 * numbers parse as 0 and flags as false.
 */
#include "sql.h"

#include <stdlib.h>

static int64_t cell_int64(const PGresult *res, int row, int col)
{
    return strtoll(PQgetvalue(res, row, col), NULL, 10);
}

static int cell_int(const PGresult *res, int row, int col)
{
    return (int)strtol(PQgetvalue(res, row, col), NULL, 10);
}

static bool cell_bool(const PGresult *res, int row, int col)
{
    return PQgetvalue(res, row, col)[0] == 't';
}

/* Where each field of a claimed row is in an answer; -1 for a column the
 * statement does not have (its field keeps the default below). */
struct claim_columns {
    int id, key, target, payload, attempt, ambiguous, first_attempt_ms, probe, traceparent,
        key_sent;
};

static struct claimed_row claimed_row_of(const PGresult *res, int row,
                                         const struct claim_columns *c)
{
    struct claimed_row r = {
        .id = cell_int64(res, row, c->id),
        .key = PQgetvalue(res, row, c->key),
        .target = PQgetvalue(res, row, c->target),
        .attempt = cell_int(res, row, c->attempt),
        .first_attempt_ms = cell_int64(res, row, c->first_attempt_ms),
        .ambiguous = true, /* a status check: ambiguous by definition */
    };
    if (c->payload >= 0)
        r.payload = PQgetvalue(res, row, c->payload);
    if (c->ambiguous >= 0)
        r.ambiguous = cell_bool(res, row, c->ambiguous);
    if (c->probe >= 0)
        r.probe = cell_bool(res, row, c->probe);
    if (c->traceparent >= 0 && !PQgetisnull(res, row, c->traceparent))
        r.traceparent = PQgetvalue(res, row, c->traceparent);
    if (c->key_sent >= 0)
        r.key_sent = cell_bool(res, row, c->key_sent);
    return r;
}

struct claimed_row sql_claimed_row(const PGresult *res, int row)
{
    static const struct claim_columns claim = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    return claimed_row_of(res, row, &claim);
}

struct claimed_row sql_unknown_row(const PGresult *res, int row)
{
    static const struct claim_columns claim_unknown = {0, 1, 2, -1, 3, -1, 4, -1, -1, -1};
    return claimed_row_of(res, row, &claim_unknown);
}

/* id, key, target, attempt, ambiguous, first_attempt_ms, previous_owner,
 * key_sent (NULL: not recorded) */
struct taken_over_row sql_taken_over_row(const PGresult *res, int row)
{
    struct taken_over_row r = {
        .id = cell_int64(res, row, 0),
        .key = PQgetvalue(res, row, 1),
        .target = PQgetvalue(res, row, 2),
        .attempt = cell_int(res, row, 3),
        .was_ambiguous = cell_bool(res, row, 4),
        .first_attempt_ms = cell_int64(res, row, 5),
        .previous_owner = PQgetvalue(res, row, 6),
        .key_sent = PQgetisnull(res, row, 7) ? -1 : cell_bool(res, row, 7),
    };
    return r;
}
