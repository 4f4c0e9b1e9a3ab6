/*
 * test_stmt_slot.c — relay/lib/stmt_slot.h without a server: a slot whose
 * connection is not ready sends nothing, never calls back and stays free;
 * a running slot refuses a second statement. (The round trip itself runs in
 * every integration scenario.)
 */
#include "../unit.h"

#include "lib/stmt_slot.h"

static int callbacks;

static void on_done(void *data, PGresult *res, const char *error)
{
    callbacks++;
}

static void on_closed(void *data)
{
    *(bool *)data = true;
}

START_TEST(not_ready_sends_nothing)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct pg_events events = {.name = "test"};
    pg_conn_t *pg = pg_conn_new(&loop, "", NULL, 0, NULL, 1000, 1000, events);
    struct stmt_slot slot;
    stmt_slot_init(&slot, pg, "claim", on_done, NULL);
    ck_assert(!stmt_slot_ready(&slot));
    const char *params[1] = {"x"};
    ck_assert(!stmt_slot_start(&slot, 1, params));
    ck_assert(!slot.running);

    slot.running = true; /* as while one is on the wire */
    ck_assert(!stmt_slot_ready(&slot));
    ck_assert(!stmt_slot_start(&slot, 1, params));
    ck_assert(slot.running);

    bool closed = false;
    pg_conn_close(pg, on_closed, &closed);
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert(closed);
    ck_assert_int_eq(callbacks, 0);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

Suite *stmt_slot_suite(void)
{
    Suite *s = suite_create("stmt_slot");
    TCase *tc = tcase_create("stmt_slot");
    tcase_add_test(tc, not_ready_sends_nothing);
    suite_add_tcase(s, tc);
    return s;
}
