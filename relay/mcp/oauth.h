/*
 * oauth.h — the front door as an OAuth 2.1 resource server (the MCP
 * authorization specification, both eras): the issuer's JWKS fetched with
 * libcurl on the loop and cached, the JWT check with it (oauth_jwt.c), the
 * Protected Resource Metadata document (RFC 9728) and the challenge a 401
 * or 403 carries. The essay is at the top of oauth.c.
 */
#ifndef OUTBOX_MCP_OAUTH_H
#define OUTBOX_MCP_OAUTH_H

#include "config.h"
#include "mcp/oauth_jwt.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

typedef struct oauth oauth_t;

/* Someone whose token named a kid not in the JWKS, waiting for the fetch
 * that may bring it (embedded in the waiter's own struct). */
struct oauth_waiter {
    struct oauth_waiter *prev, *next;
    bool waiting;
    void (*on_keys)(struct oauth_waiter *w); /* the fetch ended: check again */
};

/* NULL when --mcp-oauth-issuer is not set (OAuth off). Starts the first
 * fetch of the JWKS. */
oauth_t *oauth_new(uv_loop_t *loop, const struct config *cfg);
/* Closes its handles and transfers; on_closed runs from the loop. Waiters
 * are dropped without a call. */
void oauth_close(oauth_t *o, void (*on_closed)(void *data), void *data);

/* The check of a JWT-shaped bearer token. JWT_UNKNOWN_KID never comes
 * back: either a fetch of the JWKS is under way or allowed (w waits for it,
 * *waiting true, then on_keys runs and the caller checks again), or the
 * last fetch for an unknown kid was less than a minute ago (JWT_BAD). */
enum jwt_status oauth_check(oauth_t *o, const char *token, size_t len, struct jwt_result *out,
                            struct oauth_waiter *w, bool *waiting);
void oauth_waiter_cancel(oauth_t *o, struct oauth_waiter *w);

/* The WWW-Authenticate header line ("WWW-Authenticate: …\r\n") of a 401
 * (error NULL: no token; else "invalid_token") or a 403
 * ("insufficient_scope"); written into buf. */
const char *oauth_challenge(const oauth_t *o, const char *error, char *buf, size_t len);
/* The Protected Resource Metadata document of path, when path is one of
 * its two addresses (/.well-known/oauth-protected-resource, and that
 * followed by the resource's path); NULL otherwise. Caller frees. */
char *oauth_metadata(const oauth_t *o, const char *path);

struct oauth_stats {
    uint64_t fetches_ok, fetches_failed;
    int keys;
};
void oauth_stats(const oauth_t *o, struct oauth_stats *out);

/* The well-known address of a resource's metadata (RFC 9728 section 3.1):
 * scheme://host/.well-known/oauth-protected-resource + the resource's path
 * (none when it is "/" or empty). Caller frees; NULL if resource is not an
 * absolute http(s) URL. */
char *oauth_metadata_url(const char *resource);

#endif
