/*
 * pg_result.h — a PGresult made client-side (PQmakeEmptyPGresult), so that
 * code that reads the answers of statements is tested without a server.
 * Every column is text; a NULL cell is SQL NULL.
 */
#ifndef OUTBOX_UNIT_PG_RESULT_H
#define OUTBOX_UNIT_PG_RESULT_H

#include <check.h>
#include <libpq-fe.h>
#include <string.h>

/* rows x columns cells, row by row; names has one entry per column. The
 * caller PQclear()s the result. */
static inline PGresult *unit_pg_result(int columns, const char *const *names, int rows,
                                       const char *const *cells)
{
    PGresult *res = PQmakeEmptyPGresult(NULL, PGRES_TUPLES_OK);
    ck_assert_ptr_nonnull(res);
    PGresAttDesc attrs[64];
    ck_assert_int_le(columns, 64);
    memset(attrs, 0, sizeof(attrs));
    for (int c = 0; c < columns; c++) {
        attrs[c].name = (char *)names[c];
        attrs[c].typid = 25; /* text */
        attrs[c].typlen = -1;
        attrs[c].atttypmod = -1;
    }
    ck_assert_int_eq(PQsetResultAttrs(res, columns, attrs), 1);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < columns; c++) {
            const char *v = cells[r * columns + c];
            ck_assert_int_eq(PQsetvalue(res, r, c, (char *)v, v ? (int)strlen(v) : -1), 1);
        }
    return res;
}

#endif
