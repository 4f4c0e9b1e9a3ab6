/*
 * migrate.h — `outbox-relay migrate`: apply pending migrations/ files.
 */
#ifndef OUTBOX_MIGRATE_H
#define OUTBOX_MIGRATE_H

#include "config.h"

/* Returns the process exit code: 0 applied or up to date, 1 refused or failed. */
int migrate_run(const struct config *cfg);

#endif
