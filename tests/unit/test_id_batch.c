/*
 * test_id_batch.c — relay/id_batch.h: pairs of (intent id, attempt) that
 * grow, are written as two array literals, and lose their front once the
 * database confirmed it (what arrived meanwhile stays).
 */
#include "unit.h"

#include "id_batch.h"

START_TEST(grows_and_writes_parallel_arrays)
{
    struct id_batch b = {0};
    struct strbuf ids, attempts;
    strbuf_init(&ids);
    strbuf_init(&attempts);
    id_batch_write_arrays(&b, 0, &ids, &attempts);
    ck_assert_str_eq(ids.data, "{}");
    ck_assert_str_eq(attempts.data, "{}");
    for (int i = 0; i < 1000; i++)
        id_batch_push(&b, 5000000000LL + i, i % 7 + 1);
    ck_assert_uint_eq(b.count, 1000);
    ck_assert_int_eq(b.ids[999], 5000000999LL);
    ck_assert_int_eq(b.attempts[999], 999 % 7 + 1);
    id_batch_write_arrays(&b, 3, &ids, &attempts);
    ck_assert_str_eq(ids.data, "{5000000000,5000000001,5000000002}");
    ck_assert_str_eq(attempts.data, "{1,2,3}");
    id_batch_free(&b);
    ck_assert_uint_eq(b.count, 0);
    ck_assert_ptr_null(b.ids);
    strbuf_free(&ids);
    strbuf_free(&attempts);
}
END_TEST

START_TEST(drop_front_keeps_what_came_later)
{
    struct id_batch b = {0};
    for (int i = 1; i <= 5; i++)
        id_batch_push(&b, i, 10 + i);
    id_batch_drop_front(&b, 3);
    ck_assert_uint_eq(b.count, 2);
    ck_assert_int_eq(b.ids[0], 4);
    ck_assert_int_eq(b.attempts[1], 15);
    id_batch_push(&b, 6, 16);
    struct strbuf ids, attempts;
    strbuf_init(&ids);
    strbuf_init(&attempts);
    id_batch_write_arrays(&b, 99, &ids, &attempts); /* at most what there is */
    ck_assert_str_eq(ids.data, "{4,5,6}");
    ck_assert_str_eq(attempts.data, "{14,15,16}");
    id_batch_drop_front(&b, 99);
    ck_assert_uint_eq(b.count, 0);
    id_batch_push(&b, 7, 1); /* usable again */
    ck_assert_int_eq(b.ids[0], 7);
    id_batch_free(&b);
    strbuf_free(&ids);
    strbuf_free(&attempts);
}
END_TEST

Suite *id_batch_suite(void)
{
    Suite *s = suite_create("id_batch");
    TCase *tc = tcase_create("id_batch");
    tcase_add_test(tc, grows_and_writes_parallel_arrays);
    tcase_add_test(tc, drop_front_keeps_what_came_later);
    suite_add_tcase(s, tc);
    return s;
}
