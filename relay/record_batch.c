/*
 * record_batch.c — outcomes waiting for outbox.record, and its parameters
 * (what it owns: record_batch.h).
 *
 * WHY IT IS SHAPED SO
 * Outcomes collect in one list while one record statement is on the wire
 * with the other, so that the size of a batch follows the load. A batch
 * that was not written (the connection went, or the database refused it
 * and it is being halved) goes back in front of the newer outcomes in the
 * order they were decided, so that two outcomes of one row stay in order.
 *
 * outbox.record takes one array per column, twelve of them. They used to be
 * an array of buffers filled by position; each is a named field now, and
 * record_columns() is the one place that lists them in parameter order.
 */
#include "record_batch.h"

#include "lib/xalloc.h"

#include <stdlib.h>
#include <string.h>

struct pending_outcome pending_outcome_new(int64_t intent_id, int attempt, enum attempt_class cls,
                                           const struct decision *dec, const char *error)
{
    struct pending_outcome o = {
        .intent_id = intent_id,
        .attempt = attempt,
        .state = dec->next_state,
        .delay_ms = dec->delay_ms,
        .ambiguous = dec->ambiguous,
        .cls = cls,
        .sent = -1,
        .key_sent = -1,
        .error = error && *error ? xstrdup(error) : NULL,
    };
    return o;
}

int record_slots_held(size_t held_body_bytes, int max_response_bytes, int max_in_flight)
{
    if (max_response_bytes <= 0)
        return 0;
    size_t slots = held_body_bytes / (size_t)max_response_bytes;
    return slots > (size_t)max_in_flight ? max_in_flight : (int)slots;
}

static void outcome_list_push(struct outcome_list *list, const struct pending_outcome *o)
{
    if (list->count == list->cap) {
        list->cap = list->cap ? list->cap * 2 : 256;
        list->items = xrealloc(list->items, list->cap * sizeof(*list->items));
    }
    list->items[list->count++] = *o;
}

/* Frees the outcomes (the list's memory stays); returns their body bytes. */
static size_t outcome_list_clear(struct outcome_list *list)
{
    size_t bytes = 0;
    for (size_t i = 0; i < list->count; i++) {
        free(list->items[i].error);
        free(list->items[i].body);
        bytes += list->items[i].body_len;
    }
    list->count = 0;
    return bytes;
}

static void outcome_list_free(struct outcome_list *list)
{
    outcome_list_clear(list);
    free(list->items);
    memset(list, 0, sizeof(*list));
}

/* The arrays in the order of outbox.record's parameters $2..$13. */
static void record_columns(struct record_arrays *a, struct strbuf *columns[RECORD_PARAMS - 1])
{
    struct strbuf *const in_order[RECORD_PARAMS - 1] = {
        &a->ids,  &a->attempts,    &a->states, &a->delays,    &a->ambiguous, &a->classes,
        &a->sent, &a->http_status, &a->errors, &a->latencies, &a->bodies,    &a->key_sent,
    };
    memcpy(columns, in_order, sizeof(in_order));
}

static void record_arrays_init(struct record_arrays *a)
{
    struct strbuf *columns[RECORD_PARAMS - 1];
    record_columns(a, columns);
    for (int i = 0; i < RECORD_PARAMS - 1; i++)
        strbuf_init(columns[i]);
}

static void record_arrays_free(struct record_arrays *a)
{
    struct strbuf *columns[RECORD_PARAMS - 1];
    record_columns(a, columns);
    for (int i = 0; i < RECORD_PARAMS - 1; i++)
        strbuf_free(columns[i]);
}

/* A NULL element for an unknown tri-state (-1), else true or false. */
static void item_tristate(struct strbuf *b, int value)
{
    if (value < 0)
        pgarray_item_null(b);
    else
        pgarray_item_bool(b, value == 1);
}

static void record_arrays_add(struct record_arrays *a, const struct pending_outcome *o)
{
    const char *state = outcome_state_name(o->state);
    const char *cls = outcome_class_name(o->cls);
    pgarray_item_int(&a->ids, o->intent_id);
    pgarray_item_int(&a->attempts, o->attempt);
    pgarray_item_text(&a->states, state, strlen(state));
    pgarray_item_int(&a->delays, o->delay_ms);
    pgarray_item_bool(&a->ambiguous, o->ambiguous);
    pgarray_item_text(&a->classes, cls, strlen(cls));
    item_tristate(&a->sent, o->sent);
    if (o->http_status > 0)
        pgarray_item_int(&a->http_status, o->http_status);
    else
        pgarray_item_null(&a->http_status);
    pgarray_item_text(&a->errors, o->error, o->error ? strlen(o->error) : 0);
    pgarray_item_int(&a->latencies, o->latency_ms);
    pgarray_item_text(&a->bodies, o->body, o->body_len);
    item_tristate(&a->key_sent, o->key_sent);
}

static void record_arrays_fill(struct record_arrays *a, const struct outcome_list *batch,
                               const char *relay_id, const char *params[RECORD_PARAMS])
{
    struct strbuf *columns[RECORD_PARAMS - 1];
    record_columns(a, columns);
    for (int i = 0; i < RECORD_PARAMS - 1; i++)
        pgarray_begin(columns[i]);
    for (size_t i = 0; i < batch->count; i++)
        record_arrays_add(a, &batch->items[i]);
    params[0] = relay_id;
    for (int i = 0; i < RECORD_PARAMS - 1; i++) {
        pgarray_end(columns[i]);
        params[i + 1] = columns[i]->data;
    }
}

void record_queue_init(struct record_queue *q)
{
    memset(q, 0, sizeof(*q));
    record_arrays_init(&q->arrays);
}

void record_queue_free(struct record_queue *q)
{
    outcome_list_free(&q->buffered);
    outcome_list_free(&q->recording);
    record_arrays_free(&q->arrays);
}

void record_queue_push(struct record_queue *q, const struct pending_outcome *o)
{
    outcome_list_push(&q->buffered, o);
    q->held_body_bytes += o->body_len;
}

size_t record_queue_unrecorded(const struct record_queue *q)
{
    return q->buffered.count + q->recording.count;
}

size_t record_queue_add_ids(const struct record_queue *q, struct strbuf *ids)
{
    const struct outcome_list *lists[2] = {&q->buffered, &q->recording};
    for (int l = 0; l < 2; l++)
        for (size_t i = 0; i < lists[l]->count; i++)
            pgarray_item_int(ids, lists[l]->items[i].intent_id);
    return record_queue_unrecorded(q);
}

bool record_queue_holds(const struct record_queue *q, int64_t id)
{
    const struct outcome_list *lists[2] = {&q->buffered, &q->recording};
    for (int l = 0; l < 2; l++)
        for (size_t i = 0; i < lists[l]->count; i++)
            if (lists[l]->items[i].intent_id == id)
                return true;
    return false;
}

bool record_queue_take(struct record_queue *q, const char *relay_id,
                       const char *params[RECORD_PARAMS])
{
    if (q->recording.count > 0 || q->buffered.count == 0)
        return false;
    size_t n = q->buffered.count, bytes = 0, take = 0;
    if (q->limit > 0 && q->limit < n)
        n = q->limit;
    while (take < n && (take == 0 || bytes < RECORD_BATCH_BODY_BYTES))
        bytes += q->buffered.items[take++].body_len;
    for (size_t i = 0; i < take; i++)
        outcome_list_push(&q->recording, &q->buffered.items[i]);
    q->buffered.count -= take;
    memmove(q->buffered.items, q->buffered.items + take,
            q->buffered.count * sizeof(*q->buffered.items));
    record_arrays_fill(&q->arrays, &q->recording, relay_id, params);
    return true;
}

void record_queue_shrink(struct record_queue *q)
{
    if (q->arrays.bodies.cap > 2 * RECORD_BATCH_BODY_BYTES)
        strbuf_shrink(&q->arrays.bodies, RECORD_BATCH_BODY_BYTES);
}

void record_queue_unsend(struct record_queue *q)
{
    for (size_t i = 0; i < q->buffered.count; i++)
        outcome_list_push(&q->recording, &q->buffered.items[i]);
    q->buffered.count = 0;
    struct outcome_list emptied = q->buffered;
    q->buffered = q->recording;
    q->recording = emptied;
}

void record_queue_written(struct record_queue *q)
{
    q->held_body_bytes -= outcome_list_clear(&q->recording);
    q->limit = 0;
}

bool record_queue_refused(struct record_queue *q)
{
    if (q->recording.count <= 1) {
        record_queue_written(q); /* dropped, not written: its memory goes all the same */
        return false;
    }
    q->limit = q->recording.count / 2;
    record_queue_unsend(q);
    return true;
}
