/*
 * test_sql.c — relay/sql.h: the rows of claim, claim_unknown and
 * take_over read by name, from results built client-side
 * (pg_result.h) in the column order of the statements.
 */
#include "unit.h"

#include "pg_result.h"
#include "sql.h"

START_TEST(claimed_row_columns)
{
    static const char *names[10] = {"id",        "key",      "target", "payload",     "attempt",
                                    "ambiguous", "first_ms", "probe",  "traceparent", "key_sent"};
    static const char *cells[20] = {
        "9000000001", "run:1", "payments", "{\"a\":1}", "3",     "t",    "1700000000123",
        "f",          NULL,    "t",        "2",         "run:2", "mail", "{}",
        "1",          "f",     NULL,       "t",         NULL,    "f",
    };
    PGresult *res = unit_pg_result(10, names, 2, cells);
    struct claimed_row row = sql_claimed_row(res, 0);
    ck_assert_int_eq(row.id, 9000000001LL);
    ck_assert_str_eq(row.key, "run:1");
    ck_assert_str_eq(row.target, "payments");
    ck_assert_str_eq(row.payload, "{\"a\":1}");
    ck_assert_int_eq(row.attempt, 3);
    ck_assert(row.ambiguous);
    ck_assert_int_eq(row.first_attempt_ms, 1700000000123LL);
    ck_assert(!row.probe);
    ck_assert(row.key_sent);
    row = sql_claimed_row(res, 1);
    ck_assert_int_eq(row.id, 2);
    ck_assert(!row.ambiguous);
    ck_assert_int_eq(row.first_attempt_ms, 0); /* NULL reads as 0 */
    ck_assert(row.probe);
    ck_assert(!row.key_sent);
    PQclear(res);
}
END_TEST

/* claim_unknown: a status check, no payload, ambiguous by definition. */
START_TEST(unknown_row_columns)
{
    static const char *names[5] = {"id", "key", "target", "attempt", "first_attempt_ms"};
    static const char *cells[5] = {"77", "run:7", "payments", "4", "1700000000000"};
    PGresult *res = unit_pg_result(5, names, 1, cells);
    struct claimed_row row = sql_unknown_row(res, 0);
    ck_assert_int_eq(row.id, 77);
    ck_assert_str_eq(row.key, "run:7");
    ck_assert_str_eq(row.target, "payments");
    ck_assert_ptr_null(row.payload);
    ck_assert_int_eq(row.attempt, 4);
    ck_assert(row.ambiguous);
    ck_assert(!row.probe);
    ck_assert_int_eq(row.first_attempt_ms, 1700000000000LL);
    PQclear(res);
}
END_TEST

START_TEST(taken_over_row_columns)
{
    static const char *names[8] = {"id",        "key",      "target",         "attempt",
                                   "ambiguous", "first_ms", "previous_owner", "key_sent"};
    static const char *cells[24] = {
        "5", "run:5", "mail", "2", "t", "1700000000001", "host-b:9", "t",
        "6", "run:6", "mail", "1", "f", "1700000000002", "host-b:9", "f",
        "7", "run:7", "mail", "1", "f", "1700000000003", "host-c:1", NULL,
    };
    PGresult *res = unit_pg_result(8, names, 3, cells);
    struct taken_over_row row = sql_taken_over_row(res, 0);
    ck_assert_int_eq(row.id, 5);
    ck_assert_str_eq(row.key, "run:5");
    ck_assert_str_eq(row.target, "mail");
    ck_assert_int_eq(row.attempt, 2);
    ck_assert(row.was_ambiguous);
    ck_assert_int_eq(row.first_attempt_ms, 1700000000001LL);
    ck_assert_str_eq(row.previous_owner, "host-b:9");
    ck_assert_int_eq(row.key_sent, 1);
    ck_assert_int_eq(sql_taken_over_row(res, 1).key_sent, 0);
    ck_assert_int_eq(sql_taken_over_row(res, 2).key_sent, -1); /* NULL: not recorded */
    PQclear(res);
}
END_TEST

Suite *sql_suite(void)
{
    Suite *s = suite_create("sql");
    TCase *tc = tcase_create("rows");
    tcase_add_test(tc, claimed_row_columns);
    tcase_add_test(tc, unknown_row_columns);
    tcase_add_test(tc, taken_over_row_columns);
    suite_add_tcase(s, tc);
    return s;
}
