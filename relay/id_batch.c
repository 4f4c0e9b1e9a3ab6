/*
 * id_batch.c — (intent id, attempt) pairs for one statement (id_batch.h).
 *
 * Why a type of its own: the relay gives rows back in batches, and the pairs
 * keep arriving while a batch is on the wire. Growing by doubling keeps a
 * push O(1), and dropping the front (what the database confirmed) rather
 * than clearing keeps the pairs that arrived in the meantime.
 */
#include "id_batch.h"

#include "lib/xalloc.h"

#include <stdlib.h>
#include <string.h>

void id_batch_push(struct id_batch *batch, int64_t id, int attempt)
{
    if (batch->count == batch->cap) {
        batch->cap = batch->cap ? batch->cap * 2 : 64;
        batch->ids = xrealloc(batch->ids, batch->cap * sizeof(*batch->ids));
        batch->attempts = xrealloc(batch->attempts, batch->cap * sizeof(*batch->attempts));
    }
    batch->ids[batch->count] = id;
    batch->attempts[batch->count] = attempt;
    batch->count++;
}

void id_batch_drop_front(struct id_batch *batch, size_t n)
{
    if (n >= batch->count) {
        batch->count = 0;
        return;
    }
    batch->count -= n;
    memmove(batch->ids, batch->ids + n, batch->count * sizeof(*batch->ids));
    memmove(batch->attempts, batch->attempts + n, batch->count * sizeof(*batch->attempts));
}

void id_batch_free(struct id_batch *batch)
{
    free(batch->ids);
    free(batch->attempts);
    memset(batch, 0, sizeof(*batch));
}

void id_batch_write_arrays(const struct id_batch *batch, size_t n, struct strbuf *ids,
                           struct strbuf *attempts)
{
    if (n > batch->count)
        n = batch->count;
    pgarray_begin(ids);
    pgarray_begin(attempts);
    for (size_t i = 0; i < n; i++) {
        pgarray_item_int(ids, batch->ids[i]);
        pgarray_item_int(attempts, batch->attempts[i]);
    }
    pgarray_end(ids);
    pgarray_end(attempts);
}
