/*
 * stmt_slot.h — a kind of statement of which at most one is on the wire.
 *
 * Owns the "running" flag of one kind of statement (a claim, a renewal of
 * leases, a take-over, ...), the connection it goes to, and the owner's
 * callback. The flag is set when pg_query accepted the statement and cleared
 * just before the owner's callback runs, which pg.c calls exactly once (with
 * the result, the SQL error, or the loss of the connection).
 */
#ifndef OUTBOX_STMT_SLOT_H
#define OUTBOX_STMT_SLOT_H

#include "lib/pg.h"

#include <stdbool.h>

struct stmt_slot {
    bool running; /* one is on the wire: no second one is sent */
    pg_conn_t *pg;
    const char *statement; /* a name from sql.h */
    pg_result_cb done;     /* the owner's callback; running is already false */
    void *data;
};

void stmt_slot_init(struct stmt_slot *slot, pg_conn_t *pg, const char *statement, pg_result_cb done,
                    void *data);
/* Whether one may be sent now: none running, and the connection ready. */
bool stmt_slot_ready(const struct stmt_slot *slot);
/* Sends the statement (parameters copied). True when it is on the wire,
 * and done then runs exactly once; false, with nothing sent and done never
 * called, when one is running already or the connection is not ready. */
bool stmt_slot_start(struct stmt_slot *slot, int nparams, const char *const *params);

#endif
