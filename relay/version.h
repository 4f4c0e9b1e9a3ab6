/*
 * version.h — the version of outbox-relay, in one place: `outbox-relay
 * version`, the MCP front door's serverInfo, and CHANGELOG.md's newest
 * heading agree with it.
 */
#ifndef OUTBOX_VERSION_H
#define OUTBOX_VERSION_H

#define OUTBOX_RELAY_VERSION "0.2.0-dev"

#endif
