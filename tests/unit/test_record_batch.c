/*
 * test_record_batch.c — relay/record_batch.h: outcomes waiting for
 * outbox.record, the batches taken from them (order, limits, body bytes),
 * what happens to a batch that was not written or was refused (halving down
 * to the one outcome that fails), and the statement's twelve arrays.
 */
#include "unit.h"

#include "record_batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct pending_outcome outcome(int64_t id, size_t body_len)
{
    struct decision dec = {.next_state = STATE_SUCCEEDED};
    struct pending_outcome o = pending_outcome_new(id, 1, CLASS_SUCCEEDED, &dec, NULL);
    if (body_len > 0) {
        o.body = malloc(body_len + 1);
        memset(o.body, 'b', body_len);
        o.body[body_len] = '\0';
        o.body_len = body_len;
    }
    return o;
}

static void push(struct record_queue *q, int64_t id, size_t body_len)
{
    struct pending_outcome o = outcome(id, body_len);
    record_queue_push(q, &o);
}

/* The ids of a list, as "1,2,3". */
static const char *ids_of(const struct outcome_list *list)
{
    static char text[256];
    size_t n = 0;
    text[0] = '\0';
    for (size_t i = 0; i < list->count; i++)
        n += (size_t)snprintf(text + n, sizeof(text) - n, "%s%lld", i ? "," : "",
                              (long long)list->items[i].intent_id);
    return text;
}

START_TEST(new_outcome_copies_the_error)
{
    struct decision dec = {.next_state = STATE_UNKNOWN, .delay_ms = 30000, .ambiguous = true};
    char error[] = "lease expired";
    struct pending_outcome o = pending_outcome_new(9, 3, CLASS_AMBIGUOUS, &dec, error);
    error[0] = 'X';
    ck_assert_str_eq(o.error, "lease expired");
    ck_assert_int_eq(o.intent_id, 9);
    ck_assert_int_eq(o.attempt, 3);
    ck_assert_int_eq(o.state, STATE_UNKNOWN);
    ck_assert_int_eq(o.delay_ms, 30000);
    ck_assert(o.ambiguous);
    ck_assert_int_eq(o.sent, -1);
    ck_assert_int_eq(o.key_sent, -1);
    ck_assert_ptr_null(o.body);
    free(o.error);
    o = pending_outcome_new(9, 3, CLASS_AMBIGUOUS, &dec, "");
    ck_assert_ptr_null(o.error);
}
END_TEST

START_TEST(take_moves_the_oldest_and_waits_for_the_wire)
{
    struct record_queue q;
    record_queue_init(&q);
    const char *params[RECORD_PARAMS];
    ck_assert(!record_queue_take(&q, "r1", params)); /* nothing waits */
    for (int i = 1; i <= 3; i++)
        push(&q, i, 0);
    ck_assert_uint_eq(record_queue_unrecorded(&q), 3);
    ck_assert(record_queue_take(&q, "r1", params));
    ck_assert_str_eq(ids_of(&q.recording), "1,2,3");
    ck_assert_uint_eq(q.buffered.count, 0);
    push(&q, 4, 0);
    ck_assert(!record_queue_take(&q, "r1", params)); /* one batch on the wire at a time */
    ck_assert_uint_eq(record_queue_unrecorded(&q), 4);
    record_queue_written(&q);
    ck_assert_uint_eq(record_queue_unrecorded(&q), 1);
    ck_assert(record_queue_take(&q, "r1", params));
    ck_assert_str_eq(ids_of(&q.recording), "4");
    record_queue_free(&q);
}
END_TEST

/* A batch ends after the outcome that passes RECORD_BATCH_BODY_BYTES of
 * bodies, and holds at least one however large. */
START_TEST(take_stops_after_the_body_bytes)
{
    struct record_queue q;
    record_queue_init(&q);
    const char *params[RECORD_PARAMS];
    size_t big = RECORD_BATCH_BODY_BYTES / 2;
    push(&q, 1, big);
    push(&q, 2, big);
    push(&q, 3, 10);
    push(&q, 4, RECORD_BATCH_BODY_BYTES + 1);
    push(&q, 5, 0);
    ck_assert_uint_eq(q.held_body_bytes, 2 * big + 10 + RECORD_BATCH_BODY_BYTES + 1);
    ck_assert(record_queue_take(&q, "r1", params));
    ck_assert_str_eq(ids_of(&q.recording), "1,2");
    record_queue_written(&q);
    ck_assert(record_queue_take(&q, "r1", params));
    ck_assert_str_eq(ids_of(&q.recording), "3,4");
    record_queue_written(&q);
    ck_assert(record_queue_take(&q, "r1", params));
    ck_assert_str_eq(ids_of(&q.recording), "5");
    record_queue_written(&q);
    ck_assert_uint_eq(q.held_body_bytes, 0);
    record_queue_free(&q);
}
END_TEST

/* A batch that did not reach the database goes back in front, in order. */
START_TEST(unsend_puts_the_batch_back_in_front)
{
    struct record_queue q;
    record_queue_init(&q);
    const char *params[RECORD_PARAMS];
    push(&q, 1, 5);
    push(&q, 2, 0);
    ck_assert(record_queue_take(&q, "r1", params));
    push(&q, 3, 0);
    record_queue_unsend(&q);
    ck_assert_uint_eq(q.recording.count, 0);
    ck_assert_str_eq(ids_of(&q.buffered), "1,2,3");
    ck_assert_uint_eq(q.held_body_bytes, 5);
    ck_assert(record_queue_take(&q, "r1", params));
    ck_assert_str_eq(ids_of(&q.recording), "1,2,3");
    record_queue_free(&q);
}
END_TEST

/* A refused batch is halved until the outcome that fails is alone; that
 * one is dropped, and the next batch is whole again. */
START_TEST(refused_batches_halve_down_to_the_one_that_fails)
{
    struct record_queue q;
    record_queue_init(&q);
    const char *params[RECORD_PARAMS];
    for (int i = 1; i <= 5; i++)
        push(&q, i, i == 1 ? 7 : 0);
    ck_assert(record_queue_take(&q, "r1", params));
    ck_assert(record_queue_refused(&q)); /* 5 refused */
    ck_assert_uint_eq(q.limit, 2);
    ck_assert(record_queue_take(&q, "r1", params));
    ck_assert_str_eq(ids_of(&q.recording), "1,2");
    ck_assert(record_queue_refused(&q)); /* 2 refused */
    ck_assert_uint_eq(q.limit, 1);
    ck_assert(record_queue_take(&q, "r1", params));
    ck_assert_str_eq(ids_of(&q.recording), "1");
    ck_assert(!record_queue_refused(&q)); /* alone: dropped */
    ck_assert_uint_eq(q.limit, 0);
    ck_assert_uint_eq(q.held_body_bytes, 0);
    ck_assert(record_queue_take(&q, "r1", params));
    ck_assert_str_eq(ids_of(&q.recording), "2,3,4,5");
    record_queue_written(&q);
    ck_assert_uint_eq(record_queue_unrecorded(&q), 0);
    record_queue_free(&q);
}
END_TEST

/* The parameters: $1 the relay, then one array per column, in the order of
 * outbox.record; unknown tri-states and a missing status are NULL. */
START_TEST(arrays_in_parameter_order)
{
    struct record_queue q;
    record_queue_init(&q);
    struct decision pending = {.next_state = STATE_PENDING, .delay_ms = 250, .ambiguous = true};
    struct pending_outcome a = pending_outcome_new(11, 2, CLASS_AMBIGUOUS, &pending, "HTTP 503");
    a.sent = 1;
    a.key_sent = 1;
    a.http_status = 503;
    a.latency_ms = 40;
    a.body = strdup("down \"now\"");
    a.body_len = strlen(a.body);
    struct decision unknown = {.next_state = STATE_UNKNOWN, .delay_ms = 30000, .ambiguous = true};
    struct pending_outcome b = pending_outcome_new(12, 1, CLASS_AMBIGUOUS, &unknown, NULL);
    b.sent = 0;
    record_queue_push(&q, &a);
    record_queue_push(&q, &b);
    const char *params[RECORD_PARAMS];
    ck_assert(record_queue_take(&q, "relay-1", params));
    ck_assert_str_eq(params[0], "relay-1");
    ck_assert_str_eq(params[1], "{11,12}");
    ck_assert_str_eq(params[2], "{2,1}");
    ck_assert_str_eq(params[3], "{\"pending\",\"unknown\"}");
    ck_assert_str_eq(params[4], "{250,30000}");
    ck_assert_str_eq(params[5], "{t,t}");
    ck_assert_str_eq(params[6], "{\"ambiguous\",\"ambiguous\"}");
    ck_assert_str_eq(params[7], "{t,f}");
    ck_assert_str_eq(params[8], "{503,NULL}");
    ck_assert_str_eq(params[9], "{\"HTTP 503\",NULL}");
    ck_assert_str_eq(params[10], "{40,0}");
    ck_assert_str_eq(params[11], "{\"down \\\"now\\\"\",NULL}");
    ck_assert_str_eq(params[12], "{t,NULL}");
    record_queue_free(&q);
}
END_TEST

START_TEST(ids_of_every_unrecorded_outcome)
{
    struct record_queue q;
    record_queue_init(&q);
    const char *params[RECORD_PARAMS];
    push(&q, 1, 0);
    ck_assert(record_queue_take(&q, "r1", params));
    push(&q, 2, 0);
    struct strbuf ids;
    strbuf_init(&ids);
    pgarray_begin(&ids);
    ck_assert_uint_eq(record_queue_add_ids(&q, &ids), 2);
    pgarray_end(&ids);
    ck_assert_str_eq(ids.data, "{2,1}");
    strbuf_free(&ids);
    record_queue_free(&q);
}
END_TEST

/* Bodies waiting take delivery slots: one per max_response_bytes, at most
 * max_in_flight. */
START_TEST(slots_held_by_bodies)
{
    ck_assert_int_eq(record_slots_held(0, 65536, 1024), 0);
    ck_assert_int_eq(record_slots_held(65535, 65536, 1024), 0);
    ck_assert_int_eq(record_slots_held(3 * 65536, 65536, 1024), 3);
    ck_assert_int_eq(record_slots_held((size_t)1 << 40, 65536, 1024), 1024);
    ck_assert_int_eq(record_slots_held(1000, 0, 1024), 0); /* no bodies kept */
}
END_TEST

Suite *record_batch_suite(void)
{
    Suite *s = suite_create("record_batch");
    TCase *tc = tcase_create("queue");
    tcase_add_test(tc, new_outcome_copies_the_error);
    tcase_add_test(tc, take_moves_the_oldest_and_waits_for_the_wire);
    tcase_add_test(tc, take_stops_after_the_body_bytes);
    tcase_add_test(tc, unsend_puts_the_batch_back_in_front);
    tcase_add_test(tc, refused_batches_halve_down_to_the_one_that_fails);
    tcase_add_test(tc, ids_of_every_unrecorded_outcome);
    tcase_add_test(tc, slots_held_by_bodies);
    suite_add_tcase(s, tc);
    tc = tcase_create("arrays");
    tcase_add_test(tc, arrays_in_parameter_order);
    suite_add_tcase(s, tc);
    return s;
}
