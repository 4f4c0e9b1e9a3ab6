/*
 * oauth_jwt.h — the pure part of the front door's OAuth resource server:
 * an issuer's JWKS (keys by kid, each pinned to one algorithm) and the
 * check of a JWT access token against it and the rules (issuer, audience,
 * times, scope, the client claim). No I/O: the fetch of the JWKS and the
 * waits are in oauth.c (the essay is at the top of oauth_jwt.c).
 */
#ifndef OUTBOX_MCP_OAUTH_JWT_H
#define OUTBOX_MCP_OAUTH_JWT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JWT_MAX_BYTES 8192 /* a longer bearer token is not taken for a JWT */
#define JWT_SKEW_S 60      /* exp and nbf are checked with this much leeway */

typedef struct jwks jwks_t;

/* The keys of a JWKS document ({"keys":[…]}): RSA (2048 bits or more, RS256),
 * EC P-256 (ES256) and OKP Ed25519 (EdDSA) keys meant for signatures; others
 * are skipped. NULL and err when the document is not a JWKS. */
jwks_t *jwks_parse(const char *json, size_t len, char *err, size_t errlen);
void jwks_free(jwks_t *keys);
int jwks_count(const jwks_t *keys);

/* What a token must say. */
struct jwt_rules {
    const char *issuer;       /* iss, exactly */
    const char *audience;     /* aud (a string, or an array holding it): the resource */
    const char *client_claim; /* the claim naming the client; NULL or "": client_id, azp, sub */
    const char *scope;        /* space-separated scopes all required in scope/scp; NULL or "" */
    int64_t now;              /* seconds since the epoch */
};

enum jwt_status {
    JWT_OK,
    JWT_BAD,         /* 401: reason says why */
    JWT_UNKNOWN_KID, /* no key of that kid (the JWKS may have rotated: fetch it again) */
    JWT_SCOPE,       /* 403: a good token without the scope asked for */
};

struct jwt_result {
    enum jwt_status status;
    char reason[96]; /* for the log: never the token, nor a claim's value */
    char client[65]; /* JWT_OK: the client's name (outbox.mcp_clients.name) */
    int64_t exp;     /* JWT_OK: the token's exp */
};

/* True when the bearer token has a JWT's shape (three base64url parts, the
 * first a JSON object): the only tokens checked here; others are static. */
bool jwt_shaped(const char *token, size_t len);
enum jwt_status jwt_check(const jwks_t *keys, const char *token, size_t len,
                          const struct jwt_rules *rules, struct jwt_result *out);

#endif
