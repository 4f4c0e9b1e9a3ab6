/*
 * record_batch.h — decided outcomes on their way to outbox.record, and the
 * statement's parameters for a batch of them.
 *
 * Owns: struct record_queue, the outcomes waiting (each with its error
 * text and response body) and the batch on the wire, the halving of a batch
 * the database refused, and struct record_arrays, the twelve array
 * parameters of outbox.record, one named buffer each. The relay sends and
 * logs; no I/O here: tests/unit/test_record_batch.c.
 */
#ifndef OUTBOX_RECORD_BATCH_H
#define OUTBOX_RECORD_BATCH_H

#include "outcome.h"
#include "lib/strbuf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Response bodies in one record statement: a batch ends after the outcome
 * that passes this, so that its parameters and libpq's copy of them stay
 * small whatever the response cap (the memory bound in README). */
#define RECORD_BATCH_BODY_BYTES (4 * 1024 * 1024)

struct pending_outcome {
    int64_t intent_id;
    int attempt;
    enum intent_state state;
    int delay_ms;
    bool ambiguous;
    enum attempt_class cls;
    int sent;     /* 1, 0, or -1 unknown (lease take-over) */
    int key_sent; /* the request carried the key: 1, 0, or -1 not known / no request */
    long http_status;
    int latency_ms;
    char *error; /* NULL: none */
    char *body;  /* NULL: none; from malloc, body_len bytes and a NUL */
    size_t body_len;
};

/* An outcome of one decided attempt, with sent and key_sent unknown (-1) and
 * no status, latency or body: the caller fills in what it knows. error is
 * copied (NULL or "" = none). */
struct pending_outcome pending_outcome_new(int64_t intent_id, int attempt, enum attempt_class cls,
                                           const struct decision *dec, const char *error);

/* Response bodies waiting to be recorded take delivery slots: one slot per
 * max_response_bytes of them (held_body_bytes), at most max_in_flight. So
 * the bodies a relay holds, in flight or waiting, stay within max_in_flight
 * x max_response_bytes (the memory bound in README) when recording falls
 * behind, while small bodies (the common case) take no slot and cost no
 * throughput. */
int record_slots_held(size_t held_body_bytes, int max_response_bytes, int max_in_flight);

struct outcome_list {
    struct pending_outcome *items;
    size_t count, cap;
};

/* outbox.record's parameters $2..$13, in that order (schema/outbox/functions/record.sql). */
struct record_arrays {
    struct strbuf ids, attempts, states, delays, ambiguous, classes, sent, http_status, errors,
        latencies, bodies, key_sent;
};
#define RECORD_PARAMS 13 /* $1 is the relay */

struct record_queue {
    struct outcome_list buffered;  /* decided, waiting to be recorded */
    struct outcome_list recording; /* the batch on the wire; empty when none is */
    size_t held_body_bytes;        /* response bodies in both lists */
    size_t limit;                  /* > 0: a batch was refused; at most this many (halving) */
    struct record_arrays arrays;   /* the parameters of the batch on the wire */
};

void record_queue_init(struct record_queue *q);
void record_queue_free(struct record_queue *q);
/* Appends o; the queue takes over its error and body. */
void record_queue_push(struct record_queue *q, const struct pending_outcome *o);
/* Outcomes not written yet, waiting or on the wire. */
size_t record_queue_unrecorded(const struct record_queue *q);
/* Appends the intent id of each of them to an array being built in ids
 * (pgarray_item_int); returns how many. */
size_t record_queue_add_ids(const struct record_queue *q, struct strbuf *ids);
/* True when an outcome of intent id waits to be recorded or is being recorded. */
bool record_queue_holds(const struct record_queue *q, int64_t id);
/* Takes the next batch, the oldest outcomes (all of them, at most limit
 * while halving, or as many as make RECORD_BATCH_BODY_BYTES of bodies, and
 * at least one), and builds its parameters: params[0] is relay_id,
 * params[1..12] the arrays, valid until the next batch. False, and nothing
 * taken, while a batch is on the wire or when nothing waits. */
bool record_queue_take(struct record_queue *q, const char *relay_id,
                       const char *params[RECORD_PARAMS]);
/* Gives back the memory of large bodies escaped into the arrays (once the
 * statement has copied its parameters). */
void record_queue_shrink(struct record_queue *q);
/* The batch did not reach the database (not sent, or the connection went):
 * it goes back in front of the newer outcomes, whole and in order. */
void record_queue_unsend(struct record_queue *q);
/* The batch was written: it is freed, and any halving ends. */
void record_queue_written(struct record_queue *q);
/* The database refused the batch while the connection is fine: some outcome
 * in it fails (its intent was deleted by hand, say). A batch of more than
 * one goes back in front, and the next ones are at most half its size
 * (true); a batch of one is the failing outcome alone and is dropped
 * (false): its row stays in_flight under a lease no one renews, and is
 * taken over as ambiguous. Nothing else waits behind it. */
bool record_queue_refused(struct record_queue *q);

#endif
