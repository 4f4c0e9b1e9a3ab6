/*
 * stmt_slot.c — at most one statement of a kind on the wire (stmt_slot.h).
 *
 * Why: the relay had nine of these by hand, each a "*_running" flag, the
 * function that sent the statement and a callback whose first line cleared
 * the flag. One forgotten line there leaves a kind of statement stuck for
 * good (no more claims, say); here the flag is cleared in one place.
 */
#include "lib/stmt_slot.h"

static void slot_done(void *data, PGresult *res, const char *error)
{
    struct stmt_slot *slot = data;
    slot->running = false;
    slot->done(slot->data, res, error);
}

void stmt_slot_init(struct stmt_slot *slot, pg_conn_t *pg, const char *statement, pg_result_cb done,
                    void *data)
{
    slot->running = false;
    slot->pg = pg;
    slot->statement = statement;
    slot->done = done;
    slot->data = data;
}

bool stmt_slot_ready(const struct stmt_slot *slot)
{
    return !slot->running && pg_conn_ready(slot->pg);
}

bool stmt_slot_start(struct stmt_slot *slot, int nparams, const char *const *params)
{
    if (slot->running)
        return false;
    /* Up before the call: pg_query may run the callback before it returns
     * (the connection lost while sending), and the callback clears it. */
    slot->running = true;
    if (!pg_query(slot->pg, slot->statement, nparams, params, slot_done, slot)) {
        slot->running = false;
        return false;
    }
    return true;
}
