/*
 * id_batch.h — a growable list of (intent id, attempt number) pairs.
 *
 * Owns its two arrays. The relay keeps in one the rows it claimed and never
 * sent, to give back with outbox.release, which takes them as two parallel
 * arrays ($2 bigint[] ids, $3 int[] attempts): id_batch_write_arrays builds
 * them. Zero-initialised is empty.
 */
#ifndef OUTBOX_ID_BATCH_H
#define OUTBOX_ID_BATCH_H

#include "lib/strbuf.h"

#include <stddef.h>
#include <stdint.h>

struct id_batch {
    int64_t *ids;
    int *attempts;
    size_t count, cap;
};

void id_batch_push(struct id_batch *batch, int64_t id, int attempt);
/* Forgets the first n pairs (all of them when n >= count); the rest move up. */
void id_batch_drop_front(struct id_batch *batch, size_t n);
void id_batch_free(struct id_batch *batch);
/* The first n pairs as PostgreSQL array literals ('{1,2}', '{1,1}'). */
void id_batch_write_arrays(const struct id_batch *batch, size_t n, struct strbuf *ids,
                           struct strbuf *attempts);

#endif
