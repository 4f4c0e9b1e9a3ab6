/*
 * relay.h — `outbox-relay run`: the daemon.
 */
#ifndef OUTBOX_RELAY_H
#define OUTBOX_RELAY_H

#include "config.h"

/* Runs the relay until SIGTERM/SIGINT (or idle, with --exit-when-idle).
 * Returns the process exit code. */
int relay_run(const struct config *cfg);

#endif
