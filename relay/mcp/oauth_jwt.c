/*
 * oauth_jwt.c — JWT access tokens checked against an issuer's JWKS, with
 * OpenSSL's EVP and jansson (what it owns: oauth_jwt.h).
 *
 * WHY IT IS SHAPED SO
 * The front door is an OAuth 2.1 resource server (the MCP authorization
 * specification): it never issues tokens, it only checks the ones an
 * authorization server issued, and that check is all of JOSE it needs:
 * decode three base64url parts, make a public key of a JWK, verify one
 * signature. That is OpenSSL's EVP (already linked: SHA-256 of the tokens,
 * Standard Webhooks signing) and jansson (already linked), about 400 lines
 * here, instead of a JOSE library with JWE, key generation and HMAC in it
 * (docs/design.md, "OAuth", says why not libjwt or cjose).
 *
 * DESIGN
 * 1. The algorithm is the key's, not the token's. Each JWK is pinned, when
 *    it is read, to the one algorithm its type allows: RSA → RS256, EC
 *    P-256 → ES256, OKP Ed25519 → EdDSA (a JWK's own "alg", when present,
 *    must agree). A token's "alg" must then equal its key's. "none" and the
 *    HMAC algorithms are refused before any key is looked at, so the old
 *    attack (HS256 "signed" with the issuer's public key as the secret)
 *    has nothing to run against: no code path here computes an HMAC.
 * 2. The kid picks the key. A token without a kid is checked against the
 *    only key of its algorithm, if there is exactly one. An unknown kid is
 *    its own answer (JWT_UNKNOWN_KID): the caller may fetch the JWKS again
 *    (keys rotate), at most once a minute (oauth.c).
 * 3. Claims after the signature: iss exactly the issuer, aud the resource
 *    (a string, or an array that holds it: RFC 8707, RFC 9068), exp
 *    required and nbf if present with JWT_SKEW_S of leeway, the scope when
 *    one is configured, and the client from the claim configured (default
 *    client_id, then azp, then sub), which must be a name
 *    outbox.mcp_clients can hold.
 * 4. Strict parsing: base64url without padding, JSON objects without
 *    duplicate names (a second "alg" is not chosen between), a "crit"
 *    header refused (no extension is understood here).
 *
 * Left out on purpose: JWE (encrypted tokens), x5c/x5u certificate chains,
 * RSA-PSS and the other ECDSA curves (an issuer that uses them is
 * configured to sign with one of the three), token introspection.
 */
#include "mcp/oauth_jwt.h"

#include "lib/xalloc.h"

#include <jansson.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum jwk_alg { ALG_RS256, ALG_ES256, ALG_EDDSA };
static const char *const alg_names[] = {"RS256", "ES256", "EdDSA"};

struct jwk {
    char *kid; /* NULL: none */
    enum jwk_alg alg;
    EVP_PKEY *key;
};

struct jwks {
    struct jwk *keys;
    int count;
};

/* ---------------------------------------------------------------- base64url */

static int b64url_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '-')
        return 62;
    if (c == '_')
        return 63;
    return -1;
}

/* Decodes base64url without padding; NULL when it is not that. *out_len set. */
static unsigned char *b64url_decode(const char *in, size_t len, size_t *out_len)
{
    if (len % 4 == 1)
        return NULL;
    unsigned char *out = xmalloc(len * 3 / 4 + 3);
    size_t n = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < len; i++) {
        int v = b64url_value((unsigned char)in[i]);
        if (v < 0) {
            free(out);
            return NULL;
        }
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[n++] = (unsigned char)(acc >> bits);
        }
    }
    if (bits > 0 && (acc & ((1u << bits) - 1)) != 0) { /* non-canonical trailing bits */
        free(out);
        return NULL;
    }
    *out_len = n;
    return out;
}

static unsigned char *b64url_member(json_t *obj, const char *name, size_t *len)
{
    const char *s = json_string_value(json_object_get(obj, name));
    return s ? b64url_decode(s, strlen(s), len) : NULL;
}

static json_t *b64url_json(const char *in, size_t len)
{
    size_t n = 0;
    unsigned char *raw = b64url_decode(in, len, &n);
    if (raw == NULL)
        return NULL;
    json_t *v = json_loadb((const char *)raw, n, JSON_REJECT_DUPLICATES, NULL);
    free(raw);
    if (v && !json_is_object(v)) {
        json_decref(v);
        v = NULL;
    }
    return v;
}

/* ---------------------------------------------------------------- keys */

static EVP_PKEY *pkey_from_params(const char *type, OSSL_PARAM_BLD *bld)
{
    EVP_PKEY *key = NULL;
    OSSL_PARAM *params = OSSL_PARAM_BLD_to_param(bld);
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(NULL, type, NULL);
    if (params == NULL || ctx == NULL || EVP_PKEY_fromdata_init(ctx) != 1 ||
        EVP_PKEY_fromdata(ctx, &key, EVP_PKEY_PUBLIC_KEY, params) != 1)
        key = NULL;
    EVP_PKEY_CTX_free(ctx);
    OSSL_PARAM_free(params);
    return key;
}

static EVP_PKEY *rsa_key(json_t *jwk)
{
    size_t nlen = 0, elen = 0;
    unsigned char *n = b64url_member(jwk, "n", &nlen), *e = b64url_member(jwk, "e", &elen);
    EVP_PKEY *key = NULL;
    if (n && e && nlen > 0 && elen > 0 && elen <= 8) {
        BIGNUM *bn = BN_bin2bn(n, (int)nlen, NULL), *be = BN_bin2bn(e, (int)elen, NULL);
        OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
        if (bn && be && bld && OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, bn) &&
            OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, be))
            key = pkey_from_params("RSA", bld);
        OSSL_PARAM_BLD_free(bld);
        BN_free(bn);
        BN_free(be);
    }
    free(n);
    free(e);
    if (key && EVP_PKEY_get_bits(key) < 2048) {
        EVP_PKEY_free(key);
        key = NULL;
    }
    return key;
}

static EVP_PKEY *ec_key(json_t *jwk)
{
    const char *crv = json_string_value(json_object_get(jwk, "crv"));
    if (crv == NULL || strcmp(crv, "P-256") != 0)
        return NULL;
    size_t xlen = 0, ylen = 0;
    unsigned char *x = b64url_member(jwk, "x", &xlen), *y = b64url_member(jwk, "y", &ylen);
    EVP_PKEY *key = NULL;
    if (x && y && xlen == 32 && ylen == 32) {
        unsigned char point[65];
        point[0] = 0x04; /* uncompressed; decoding it checks that it is on the curve */
        memcpy(point + 1, x, 32);
        memcpy(point + 33, y, 32);
        OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
        if (bld &&
            OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0) &&
            OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, point, sizeof(point)))
            key = pkey_from_params("EC", bld);
        OSSL_PARAM_BLD_free(bld);
    }
    free(x);
    free(y);
    if (key) {
        EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_pkey(NULL, key, NULL);
        if (ctx == NULL || EVP_PKEY_public_check(ctx) != 1) {
            EVP_PKEY_free(key);
            key = NULL;
        }
        EVP_PKEY_CTX_free(ctx);
    }
    return key;
}

static EVP_PKEY *okp_key(json_t *jwk)
{
    const char *crv = json_string_value(json_object_get(jwk, "crv"));
    if (crv == NULL || strcmp(crv, "Ed25519") != 0)
        return NULL;
    size_t xlen = 0;
    unsigned char *x = b64url_member(jwk, "x", &xlen);
    EVP_PKEY *key = NULL;
    if (x && xlen == 32)
        key = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, x, 32);
    free(x);
    return key;
}

/* One JWK made a key pinned to its algorithm, or false (skipped). */
static bool jwk_read(json_t *jwk, struct jwk *out)
{
    const char *kty = json_string_value(json_object_get(jwk, "kty"));
    const char *use = json_string_value(json_object_get(jwk, "use"));
    const char *alg = json_string_value(json_object_get(jwk, "alg"));
    json_t *kid = json_object_get(jwk, "kid");
    if (kty == NULL || (use && strcmp(use, "sig") != 0) || (kid && !json_is_string(kid)))
        return false;
    if (!strcmp(kty, "RSA")) {
        out->alg = ALG_RS256;
        out->key = rsa_key(jwk);
    } else if (!strcmp(kty, "EC")) {
        out->alg = ALG_ES256;
        out->key = ec_key(jwk);
    } else if (!strcmp(kty, "OKP")) {
        out->alg = ALG_EDDSA;
        out->key = okp_key(jwk);
    } else {
        return false; /* "oct" (a shared secret) among them: never a key here */
    }
    if (out->key && alg && strcmp(alg, alg_names[out->alg]) != 0) {
        EVP_PKEY_free(out->key);
        out->key = NULL;
    }
    if (out->key == NULL)
        return false;
    out->kid = kid ? xstrdup(json_string_value(kid)) : NULL;
    return true;
}

jwks_t *jwks_parse(const char *json, size_t len, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *doc = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    json_t *list = doc ? json_object_get(doc, "keys") : NULL;
    if (!json_is_array(list)) {
        snprintf(err, errlen, "%s", doc ? "no \"keys\" array" : "not JSON");
        json_decref(doc);
        return NULL;
    }
    jwks_t *keys = xcalloc(1, sizeof(*keys));
    keys->keys = xcalloc(json_array_size(list) + 1, sizeof(*keys->keys));
    size_t i;
    json_t *jwk;
    json_array_foreach(list, i, jwk)
    {
        if (json_is_object(jwk) && jwk_read(jwk, &keys->keys[keys->count]))
            keys->count++;
    }
    json_decref(doc);
    return keys;
}

void jwks_free(jwks_t *keys)
{
    if (keys == NULL)
        return;
    for (int i = 0; i < keys->count; i++) {
        free(keys->keys[i].kid);
        EVP_PKEY_free(keys->keys[i].key);
    }
    free(keys->keys);
    free(keys);
}

int jwks_count(const jwks_t *keys)
{
    return keys ? keys->count : 0;
}

/* ---------------------------------------------------------------- signature */

static bool verify(const struct jwk *k, const char *input, size_t input_len,
                   const unsigned char *sig, size_t sig_len)
{
    unsigned char *der = NULL;
    size_t der_len = 0;
    if (k->alg == ALG_ES256) { /* JWS: r || s, 32 bytes each; OpenSSL: DER */
        if (sig_len != 64)
            return false;
        ECDSA_SIG *es = ECDSA_SIG_new();
        BIGNUM *r = BN_bin2bn(sig, 32, NULL), *s = BN_bin2bn(sig + 32, 32, NULL);
        if (es == NULL || r == NULL || s == NULL || ECDSA_SIG_set0(es, r, s) != 1) {
            BN_free(r);
            BN_free(s);
            ECDSA_SIG_free(es);
            return false;
        }
        int n = i2d_ECDSA_SIG(es, &der);
        ECDSA_SIG_free(es);
        if (n <= 0)
            return false;
        der_len = (size_t)n;
        sig = der;
        sig_len = der_len;
    }
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    bool ok = ctx != NULL &&
              EVP_DigestVerifyInit(ctx, NULL, k->alg == ALG_EDDSA ? NULL : EVP_sha256(), NULL,
                                   k->key) == 1 &&
              EVP_DigestVerify(ctx, sig, sig_len, (const unsigned char *)input, input_len) == 1;
    EVP_MD_CTX_free(ctx);
    OPENSSL_free(der);
    return ok;
}

/* ---------------------------------------------------------------- claims */

static bool client_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return false;
    }
    return true;
}

static bool audience_ok(json_t *aud, const char *resource)
{
    if (json_is_string(aud))
        return !strcmp(json_string_value(aud), resource);
    size_t i;
    json_t *v;
    if (json_is_array(aud))
        json_array_foreach(aud, i, v) if (json_is_string(v) &&
                                          !strcmp(json_string_value(v), resource)) return true;
    return false;
}

static bool has_scope(const char *granted, const char *want, size_t want_len)
{
    const char *p = granted;
    while (*p) {
        while (*p == ' ')
            p++;
        size_t n = strcspn(p, " ");
        if (n == want_len && !memcmp(p, want, n))
            return true;
        p += n;
    }
    return false;
}

static bool scopes_ok(json_t *claims, const char *required)
{
    json_t *scope = json_object_get(claims, "scope");
    json_t *scp = json_object_get(claims, "scp");
    const char *p = required;
    while (*p) {
        while (*p == ' ')
            p++;
        size_t n = strcspn(p, " ");
        if (n == 0)
            break;
        bool found = json_is_string(scope) && has_scope(json_string_value(scope), p, n);
        size_t i;
        json_t *v;
        if (!found && json_is_array(scp))
            json_array_foreach(scp, i, v) if (json_is_string(v) &&
                                              strlen(json_string_value(v)) == n &&
                                              !memcmp(json_string_value(v), p, n)) found = true;
        if (!found)
            return false;
        p += n;
    }
    return true;
}

static enum jwt_status fail(struct jwt_result *out, enum jwt_status status, const char *reason)
{
    out->status = status;
    snprintf(out->reason, sizeof(out->reason), "%s", reason);
    return status;
}

static enum jwt_status check_claims(json_t *claims, const struct jwt_rules *rules,
                                    struct jwt_result *out)
{
    const char *iss = json_string_value(json_object_get(claims, "iss"));
    if (iss == NULL || strcmp(iss, rules->issuer) != 0)
        return fail(out, JWT_BAD, "unknown issuer");
    if (!audience_ok(json_object_get(claims, "aud"), rules->audience))
        return fail(out, JWT_BAD, "wrong audience");
    json_t *exp = json_object_get(claims, "exp");
    if (!json_is_number(exp))
        return fail(out, JWT_BAD, "no exp");
    double e = json_number_value(exp);
    if ((double)rules->now > e + JWT_SKEW_S)
        return fail(out, JWT_BAD, "expired");
    json_t *nbf = json_object_get(claims, "nbf");
    if (nbf && (!json_is_number(nbf) || json_number_value(nbf) > (double)rules->now + JWT_SKEW_S))
        return fail(out, JWT_BAD, "not yet valid (nbf)");
    const char *client = NULL;
    if (rules->client_claim && rules->client_claim[0]) {
        client = json_string_value(json_object_get(claims, rules->client_claim));
    } else {
        static const char *const chain[] = {"client_id", "azp", "sub"};
        for (size_t i = 0; i < 3 && client == NULL; i++)
            client = json_string_value(json_object_get(claims, chain[i]));
    }
    if (client == NULL)
        return fail(out, JWT_BAD, "no client claim");
    if (!client_name_ok(client))
        return fail(out, JWT_BAD, "the client claim is not a client name");
    if (rules->scope && rules->scope[0] && !scopes_ok(claims, rules->scope))
        return fail(out, JWT_SCOPE, "insufficient scope");
    snprintf(out->client, sizeof(out->client), "%s", client);
    out->exp = e > 9e15 ? (int64_t)9e15 : (int64_t)e;
    return fail(out, JWT_OK, "");
}

/* ---------------------------------------------------------------- the token */

bool jwt_shaped(const char *token, size_t len)
{
    if (len < 10 || len > JWT_MAX_BYTES || memcmp(token, "eyJ", 3) != 0)
        return false;
    int dots = 0;
    for (size_t i = 0; i < len; i++) {
        if (token[i] == '.')
            dots++;
        else if (b64url_value((unsigned char)token[i]) < 0)
            return false;
    }
    return dots == 2;
}

static const struct jwk *key_for(const jwks_t *keys, const char *kid, enum jwk_alg alg, bool *many)
{
    const struct jwk *found = NULL;
    *many = false;
    for (int i = 0; keys && i < keys->count; i++) {
        const struct jwk *k = &keys->keys[i];
        if (kid ? (k->kid && !strcmp(k->kid, kid)) : k->alg == alg) {
            if (found)
                *many = true;
            found = k;
        }
    }
    return found;
}

enum jwt_status jwt_check(const jwks_t *keys, const char *token, size_t len,
                          const struct jwt_rules *rules, struct jwt_result *out)
{
    memset(out, 0, sizeof(*out));
    if (!jwt_shaped(token, len))
        return fail(out, JWT_BAD, "not a JWT");
    const char *dot1 = memchr(token, '.', len);
    const char *dot2 = memchr(dot1 + 1, '.', len - (size_t)(dot1 + 1 - token));
    json_t *header = b64url_json(token, (size_t)(dot1 - token));
    if (header == NULL) {
        fail(out, JWT_BAD, "the header is not a JSON object");
        goto done_header;
    }
    const char *alg = json_string_value(json_object_get(header, "alg"));
    json_t *kid = json_object_get(header, "kid");
    enum jwk_alg want;
    if (alg == NULL) {
        fail(out, JWT_BAD, "no alg");
    } else if (!strcasecmp(alg, "none")) {
        fail(out, JWT_BAD, "alg none");
    } else if (!strncmp(alg, "HS", 2)) {
        fail(out, JWT_BAD, "HMAC algorithm");
    } else if (json_object_get(header, "crit")) {
        fail(out, JWT_BAD, "crit header");
    } else if (kid && !json_is_string(kid)) {
        fail(out, JWT_BAD, "kid is not a string");
    } else if (!strcmp(alg, "RS256") || !strcmp(alg, "ES256") || !strcmp(alg, "EdDSA")) {
        want = !strcmp(alg, "RS256") ? ALG_RS256 : !strcmp(alg, "ES256") ? ALG_ES256 : ALG_EDDSA;
        bool many = false;
        const struct jwk *k = key_for(keys, json_string_value(kid), want, &many);
        if (k == NULL || (kid == NULL && many)) {
            fail(out, kid ? JWT_UNKNOWN_KID : JWT_BAD, kid ? "unknown kid" : "no kid");
        } else if (k->alg != want) {
            fail(out, JWT_BAD, "alg does not match the key's type");
        } else {
            size_t sig_len = 0;
            unsigned char *sig =
                b64url_decode(dot2 + 1, len - (size_t)(dot2 + 1 - token), &sig_len);
            if (sig == NULL || !verify(k, token, (size_t)(dot2 - token), sig, sig_len)) {
                fail(out, JWT_BAD, "bad signature");
            } else {
                json_t *claims = b64url_json(dot1 + 1, (size_t)(dot2 - dot1 - 1));
                if (claims == NULL)
                    fail(out, JWT_BAD, "the claims are not a JSON object");
                else
                    check_claims(claims, rules, out);
                json_decref(claims);
            }
            free(sig);
        }
    } else {
        fail(out, JWT_BAD, "algorithm not accepted");
    }
    json_decref(header);
done_header:
    return out->status;
}
