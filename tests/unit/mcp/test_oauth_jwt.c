/*
 * test_oauth_jwt.c — relay/mcp/oauth_jwt.h: which JWKS keys are taken and
 * pinned to which algorithm, and every claim check of a JWT access token,
 * with keys made here by OpenSSL and tokens signed here. The end to end
 * flow (JWKS server, rotation, the 401s) is tests/integration/80_mcp_oauth.sh.
 */
#include "../unit.h"

#include "mcp/oauth_jwt.h"

#include <jansson.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ISS "https://issuer.example.test"
#define AUD "https://mcp.example.test/mcp"

/* ---------------------------------------------------------------- helpers */

static char *b64url(const unsigned char *in, size_t len)
{
    char *out = malloc(4 * ((len + 2) / 3) + 1);
    int n = EVP_EncodeBlock((unsigned char *)out, in, (int)len);
    while (n > 0 && out[n - 1] == '=')
        n--;
    out[n] = '\0';
    for (char *p = out; *p; p++)
        *p = *p == '+' ? '-' : *p == '/' ? '_' : *p;
    return out;
}

static char *b64url_str(const char *s)
{
    return b64url((const unsigned char *)s, strlen(s));
}

static EVP_PKEY *ec_new(void)
{
    EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    ck_assert_ptr_nonnull(k);
    return k;
}

static EVP_PKEY *ed_new(void)
{
    EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
    ck_assert_ptr_nonnull(k);
    return k;
}

/* The public JWK of a key (EC P-256 or Ed25519), as JSON text, freed by caller. */
static char *jwk_of(EVP_PKEY *k, const char *kid, const char *extra)
{
    char buf[600];
    if (EVP_PKEY_is_a(k, "EC")) {
        unsigned char point[65];
        size_t n = 0;
        ck_assert(EVP_PKEY_get_octet_string_param(k, OSSL_PKEY_PARAM_PUB_KEY, point, sizeof(point),
                                                  &n) == 1 &&
                  n == 65);
        char *x = b64url(point + 1, 32), *y = b64url(point + 33, 32);
        snprintf(buf, sizeof(buf),
                 "{\"kty\":\"EC\",\"crv\":\"P-256\",\"kid\":\"%s\",\"x\":\"%s\",\"y\":\"%s\"%s}",
                 kid, x, y, extra);
        free(x);
        free(y);
    } else {
        unsigned char raw[32];
        size_t n = sizeof(raw);
        ck_assert(EVP_PKEY_get_raw_public_key(k, raw, &n) == 1);
        char *x = b64url(raw, 32);
        snprintf(buf, sizeof(buf),
                 "{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"kid\":\"%s\",\"x\":\"%s\"%s}", kid, x,
                 extra);
        free(x);
    }
    return strdup(buf);
}

static jwks_t *jwks_of(const char *keys_json)
{
    char doc[4000], err[100];
    snprintf(doc, sizeof(doc), "{\"keys\":[%s]}", keys_json);
    jwks_t *keys = jwks_parse(doc, strlen(doc), err, sizeof(err));
    ck_assert_msg(keys != NULL, "%s", err);
    return keys;
}

/* A JWT with that header and those claims, signed by k (ES256 or EdDSA as
 * the key is; NULL: the signature part given as sig_b64). */
static char *mint(const char *header, const char *claims, EVP_PKEY *k, const char *sig_b64)
{
    char *h = b64url_str(header), *c = b64url_str(claims);
    size_t in_len = strlen(h) + 1 + strlen(c);
    char *input = malloc(in_len + 1);
    snprintf(input, in_len + 1, "%s.%s", h, c);
    char *sig = NULL;
    if (k) {
        bool ec = EVP_PKEY_is_a(k, "EC");
        EVP_MD_CTX *ctx = EVP_MD_CTX_new();
        unsigned char der[200];
        size_t der_len = sizeof(der);
        ck_assert(EVP_DigestSignInit(ctx, NULL, ec ? EVP_sha256() : NULL, NULL, k) == 1);
        ck_assert(EVP_DigestSign(ctx, der, &der_len, (unsigned char *)input, in_len) == 1);
        EVP_MD_CTX_free(ctx);
        if (ec) {
            const unsigned char *p = der;
            ECDSA_SIG *es = d2i_ECDSA_SIG(NULL, &p, (long)der_len);
            unsigned char raw[64];
            BN_bn2binpad(ECDSA_SIG_get0_r(es), raw, 32);
            BN_bn2binpad(ECDSA_SIG_get0_s(es), raw + 32, 32);
            ECDSA_SIG_free(es);
            sig = b64url(raw, 64);
        } else {
            sig = b64url(der, der_len);
        }
    }
    size_t len = in_len + 2 + strlen(sig ? sig : sig_b64);
    char *out = malloc(len);
    snprintf(out, len, "%s.%s", input, sig ? sig : sig_b64);
    free(h);
    free(c);
    free(input);
    free(sig);
    return out;
}

/* Claims of a good token, with replacements: a printf format for the tail. */
static char *claims_with(const char *tail)
{
    char buf[1000];
    long long now = (long long)time(NULL);
    snprintf(buf, sizeof(buf),
             "{\"iss\":\"" ISS "\",\"aud\":\"" AUD "\",\"client_id\":\"agent-a\",\"sub\":\"u1\","
             "\"exp\":%lld%s}",
             now + 600, tail);
    return strdup(buf);
}

static struct jwt_rules rules(void)
{
    return (struct jwt_rules){.issuer = ISS, .audience = AUD, .now = (int64_t)time(NULL)};
}

static enum jwt_status check(const jwks_t *keys, const char *token, const struct jwt_rules *r,
                             struct jwt_result *out)
{
    return jwt_check(keys, token, strlen(token), r, out);
}

/* A token of key k (kid kid) with those claims: its status and reason. */
static enum jwt_status verdict(const jwks_t *keys, EVP_PKEY *k, const char *kid, const char *claims,
                               const struct jwt_rules *r, struct jwt_result *out)
{
    char header[120];
    snprintf(header, sizeof(header), "{\"alg\":\"%s\",\"kid\":\"%s\"}",
             EVP_PKEY_is_a(k, "EC") ? "ES256" : "EdDSA", kid);
    char *t = mint(header, claims, k, NULL);
    enum jwt_status s = check(keys, t, r, out);
    free(t);
    return s;
}

/* ---------------------------------------------------------------- tests */

START_TEST(good_tokens_name_their_client)
{
    EVP_PKEY *ec = ec_new(), *ed = ed_new();
    char *j1 = jwk_of(ec, "e1", ""), *j2 = jwk_of(ed, "d1", ",\"use\":\"sig\",\"alg\":\"EdDSA\"");
    char both[1400];
    snprintf(both, sizeof(both), "%s,%s", j1, j2);
    jwks_t *keys = jwks_of(both);
    ck_assert_int_eq(jwks_count(keys), 2);
    struct jwt_rules r = rules();
    struct jwt_result out;
    char *c = claims_with("");
    ck_assert_int_eq(verdict(keys, ec, "e1", c, &r, &out), JWT_OK);
    ck_assert_str_eq(out.client, "agent-a");
    ck_assert_int_eq(verdict(keys, ed, "d1", c, &r, &out), JWT_OK);
    free(c);
    /* the client: client_id, else azp, else sub; or the claim configured */
    ck_assert_int_eq(verdict(keys, ec, "e1",
                             "{\"iss\":\"" ISS "\",\"aud\":\"" AUD "\",\"azp\":\"agent-b\","
                             "\"sub\":\"u1\",\"exp\":9999999999}",
                             &r, &out),
                     JWT_OK);
    ck_assert_str_eq(out.client, "agent-b");
    ck_assert_int_eq(verdict(keys, ec, "e1",
                             "{\"iss\":\"" ISS "\",\"aud\":\"" AUD "\",\"sub\":\"agent-c\","
                             "\"exp\":9999999999}",
                             &r, &out),
                     JWT_OK);
    ck_assert_str_eq(out.client, "agent-c");
    ck_assert(out.exp == 9999999999LL);
    r.client_claim = "tenant";
    c = claims_with(",\"tenant\":\"agent-t\"");
    ck_assert_int_eq(verdict(keys, ec, "e1", c, &r, &out), JWT_OK);
    ck_assert_str_eq(out.client, "agent-t");
    free(c);
    c = claims_with("");
    ck_assert_int_eq(verdict(keys, ec, "e1", c, &r, &out), JWT_BAD);
    ck_assert_str_eq(out.reason, "no client claim");
    free(c);
    r.client_claim = NULL;
    c = claims_with(",\"client_id\":\"not a name!\"");
    /* a duplicate client_id: refused as JSON, not chosen between */
    ck_assert_int_eq(verdict(keys, ec, "e1", c, &r, &out), JWT_BAD);
    ck_assert_str_eq(out.reason, "the claims are not a JSON object");
    free(c);
    ck_assert_int_eq(verdict(keys, ec, "e1",
                             "{\"iss\":\"" ISS "\",\"aud\":\"" AUD
                             "\",\"client_id\":\"a b\",\"exp\":9999999999}",
                             &r, &out),
                     JWT_BAD);
    ck_assert_str_eq(out.reason, "the client claim is not a client name");
    jwks_free(keys);
    free(j1);
    free(j2);
    EVP_PKEY_free(ec);
    EVP_PKEY_free(ed);
}
END_TEST

START_TEST(times_have_sixty_seconds_of_skew)
{
    EVP_PKEY *ec = ec_new();
    char *j = jwk_of(ec, "e1", "");
    jwks_t *keys = jwks_of(j);
    struct jwt_rules r = rules();
    struct jwt_result out;
    char c[400];
    long long now = (long long)r.now;
    const char *base = "{\"iss\":\"" ISS "\",\"aud\":\"" AUD "\",\"client_id\":\"a\"";
    snprintf(c, sizeof(c), "%s,\"exp\":%lld}", base, now - 59);
    ck_assert_int_eq(verdict(keys, ec, "e1", c, &r, &out), JWT_OK);
    snprintf(c, sizeof(c), "%s,\"exp\":%lld}", base, now - 61);
    ck_assert_int_eq(verdict(keys, ec, "e1", c, &r, &out), JWT_BAD);
    ck_assert_str_eq(out.reason, "expired");
    snprintf(c, sizeof(c), "%s}", base);
    ck_assert_int_eq(verdict(keys, ec, "e1", c, &r, &out), JWT_BAD);
    ck_assert_str_eq(out.reason, "no exp");
    snprintf(c, sizeof(c), "%s,\"exp\":%lld,\"nbf\":%lld}", base, now + 600, now + 59);
    ck_assert_int_eq(verdict(keys, ec, "e1", c, &r, &out), JWT_OK);
    snprintf(c, sizeof(c), "%s,\"exp\":%lld,\"nbf\":%lld}", base, now + 600, now + 61);
    ck_assert_int_eq(verdict(keys, ec, "e1", c, &r, &out), JWT_BAD);
    ck_assert_str_eq(out.reason, "not yet valid (nbf)");
    jwks_free(keys);
    free(j);
    EVP_PKEY_free(ec);
}
END_TEST

START_TEST(issuer_audience_and_scope)
{
    EVP_PKEY *ec = ec_new();
    char *j = jwk_of(ec, "e1", "");
    jwks_t *keys = jwks_of(j);
    struct jwt_rules r = rules();
    struct jwt_result out;
    const char *tail = ",\"client_id\":\"a\",\"exp\":9999999999}";
    char c[400];
    snprintf(c, sizeof(c), "{\"iss\":\"" ISS "/\",\"aud\":\"" AUD "\"%s", tail);
    ck_assert_int_eq(verdict(keys, ec, "e1", c, &r, &out), JWT_BAD);
    ck_assert_str_eq(out.reason, "unknown issuer");
    snprintf(c, sizeof(c), "{\"iss\":\"" ISS "\",\"aud\":\"" AUD "/\"%s", tail);
    ck_assert_int_eq(verdict(keys, ec, "e1", c, &r, &out), JWT_BAD);
    ck_assert_str_eq(out.reason, "wrong audience");
    snprintf(c, sizeof(c), "{\"iss\":\"" ISS "\"%s", tail);
    ck_assert_int_eq(verdict(keys, ec, "e1", c, &r, &out), JWT_BAD);
    ck_assert_str_eq(out.reason, "wrong audience");
    snprintf(c, sizeof(c), "{\"iss\":\"" ISS "\",\"aud\":[\"x\",\"" AUD "\"]%s", tail);
    ck_assert_int_eq(verdict(keys, ec, "e1", c, &r, &out), JWT_OK);
    r.scope = "outbox:call tools";
    ck_assert_int_eq(verdict(keys, ec, "e1", c, &r, &out), JWT_SCOPE);
    snprintf(c, sizeof(c),
             "{\"iss\":\"" ISS "\",\"aud\":\"" AUD "\",\"scope\":\"tools openid outbox:call\"%s",
             tail);
    ck_assert_int_eq(verdict(keys, ec, "e1", c, &r, &out), JWT_OK);
    snprintf(c, sizeof(c),
             "{\"iss\":\"" ISS "\",\"aud\":\"" AUD "\",\"scope\":\"outbox:calls tools\"%s", tail);
    ck_assert_int_eq(verdict(keys, ec, "e1", c, &r, &out), JWT_SCOPE);
    snprintf(c, sizeof(c),
             "{\"iss\":\"" ISS "\",\"aud\":\"" AUD "\",\"scp\":[\"tools\",\"outbox:call\"]%s",
             tail);
    ck_assert_int_eq(verdict(keys, ec, "e1", c, &r, &out), JWT_OK);
    jwks_free(keys);
    free(j);
    EVP_PKEY_free(ec);
}
END_TEST

START_TEST(algorithms_are_pinned_by_key_type)
{
    EVP_PKEY *ec = ec_new(), *ed = ed_new(), *other = ec_new();
    char *j1 = jwk_of(ec, "e1", ""), *j2 = jwk_of(ed, "d1", "");
    char both[1400];
    snprintf(both, sizeof(both), "%s,%s", j1, j2);
    jwks_t *keys = jwks_of(both);
    struct jwt_rules r = rules();
    struct jwt_result out;
    char *c = claims_with("");
    char *t = mint("{\"alg\":\"none\",\"kid\":\"e1\"}", c, NULL, "");
    ck_assert_int_eq(check(keys, t, &r, &out), JWT_BAD);
    ck_assert_str_eq(out.reason, "alg none");
    free(t);
    t = mint("{\"alg\":\"HS256\",\"kid\":\"e1\"}", c, NULL, "AAAA");
    ck_assert_int_eq(check(keys, t, &r, &out), JWT_BAD);
    ck_assert_str_eq(out.reason, "HMAC algorithm");
    free(t);
    t = mint("{\"alg\":\"RS384\",\"kid\":\"e1\"}", c, NULL, "AAAA");
    ck_assert_int_eq(check(keys, t, &r, &out), JWT_BAD);
    ck_assert_str_eq(out.reason, "algorithm not accepted");
    free(t);
    /* an EdDSA signature under the EC key's kid: the key's algorithm wins */
    t = mint("{\"alg\":\"EdDSA\",\"kid\":\"e1\"}", c, ed, NULL);
    ck_assert_int_eq(check(keys, t, &r, &out), JWT_BAD);
    ck_assert_str_eq(out.reason, "alg does not match the key's type");
    free(t);
    /* another key's signature under a known kid */
    t = mint("{\"alg\":\"ES256\",\"kid\":\"e1\"}", c, other, NULL);
    ck_assert_int_eq(check(keys, t, &r, &out), JWT_BAD);
    ck_assert_str_eq(out.reason, "bad signature");
    free(t);
    t = mint("{\"alg\":\"ES256\",\"kid\":\"e9\"}", c, ec, NULL);
    ck_assert_int_eq(check(keys, t, &r, &out), JWT_UNKNOWN_KID);
    free(t);
    /* no kid: the only key of the algorithm */
    t = mint("{\"alg\":\"ES256\"}", c, ec, NULL);
    ck_assert_int_eq(check(keys, t, &r, &out), JWT_OK);
    free(t);
    t = mint("{\"alg\":\"ES256\",\"kid\":\"e1\",\"crit\":[\"exp\"]}", c, ec, NULL);
    ck_assert_int_eq(check(keys, t, &r, &out), JWT_BAD);
    ck_assert_str_eq(out.reason, "crit header");
    free(t);
    t = mint("{\"alg\":\"ES256\",\"kid\":\"e1\",\"alg\":\"none\"}", c, ec, NULL);
    ck_assert_int_eq(check(keys, t, &r, &out), JWT_BAD);
    ck_assert_str_eq(out.reason, "the header is not a JSON object");
    free(t);
    /* padding is not base64url: not a JWT at all */
    ck_assert(!jwt_shaped("eyJhbGciOiJFUzI1NiJ9.e30=.AAAA", 30));
    ck_assert(!jwt_shaped("0123456789abcdef0123456789abcdef", 32));
    free(c);
    jwks_free(keys);
    free(j1);
    free(j2);
    EVP_PKEY_free(ec);
    EVP_PKEY_free(ed);
    EVP_PKEY_free(other);
}
END_TEST

START_TEST(jwks_keys_that_are_skipped)
{
    EVP_PKEY *ec = ec_new();
    char *disagree = jwk_of(ec, "e1", ",\"alg\":\"RS256\"");
    char *enc = jwk_of(ec, "e2", ",\"use\":\"enc\"");
    char doc[2000];
    /* a shared secret, a small RSA key, an EC key off the curve, a JWK
     * whose alg disagrees with its type, one meant for encryption */
    snprintf(doc, sizeof(doc),
             "{\"kty\":\"oct\",\"kid\":\"h\",\"k\":\"c2VjcmV0\"},"
             "{\"kty\":\"RSA\",\"kid\":\"r\",\"n\":\"AQAB\",\"e\":\"AQAB\"},"
             "{\"kty\":\"EC\",\"crv\":\"P-256\",\"kid\":\"bad\",\"x\":\"%s\",\"y\":\"%s\"},"
             "%s,%s",
             "AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
             "AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", disagree, enc);
    jwks_t *keys = jwks_of(doc);
    ck_assert_int_eq(jwks_count(keys), 0);
    jwks_free(keys);
    char err[100];
    ck_assert_ptr_null(jwks_parse("{\"keys\":{}}", 11, err, sizeof(err)));
    ck_assert_ptr_null(jwks_parse("nope", 4, err, sizeof(err)));
    free(disagree);
    free(enc);
    EVP_PKEY_free(ec);
}
END_TEST

START_TEST(rsa_keys_sign_rs256)
{
    EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)2048);
    ck_assert_ptr_nonnull(k);
    BIGNUM *n = NULL, *e = NULL;
    ck_assert(EVP_PKEY_get_bn_param(k, OSSL_PKEY_PARAM_RSA_N, &n) == 1);
    ck_assert(EVP_PKEY_get_bn_param(k, OSSL_PKEY_PARAM_RSA_E, &e) == 1);
    unsigned char nb[256], eb[8];
    int nl = BN_bn2bin(n, nb), el = BN_bn2bin(e, eb);
    char *ns = b64url(nb, (size_t)nl), *es = b64url(eb, (size_t)el);
    char jwk[800];
    snprintf(jwk, sizeof(jwk), "{\"kty\":\"RSA\",\"kid\":\"r1\",\"n\":\"%s\",\"e\":\"%s\"}", ns,
             es);
    jwks_t *keys = jwks_of(jwk);
    ck_assert_int_eq(jwks_count(keys), 1);
    char *c = claims_with("");
    char *h = b64url_str("{\"alg\":\"RS256\",\"kid\":\"r1\"}"), *p = b64url_str(c);
    char input[1200];
    snprintf(input, sizeof(input), "%s.%s", h, p);
    unsigned char sig[256];
    size_t sl = sizeof(sig);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    ck_assert(EVP_DigestSignInit(ctx, NULL, EVP_sha256(), NULL, k) == 1);
    ck_assert(EVP_DigestSign(ctx, sig, &sl, (unsigned char *)input, strlen(input)) == 1);
    EVP_MD_CTX_free(ctx);
    char *ss = b64url(sig, sl);
    char token[1600];
    snprintf(token, sizeof(token), "%s.%s", input, ss);
    struct jwt_rules r = rules();
    struct jwt_result out;
    ck_assert_int_eq(check(keys, token, &r, &out), JWT_OK);
    /* HS256 over the same input with the public key's bytes as the secret */
    char hs_header_input[1200];
    char *hh = b64url_str("{\"alg\":\"HS256\",\"kid\":\"r1\"}");
    snprintf(hs_header_input, sizeof(hs_header_input), "%s.%s", hh, p);
    unsigned char mac[32];
    unsigned int ml = 0;
    HMAC(EVP_sha256(), jwk, (int)strlen(jwk), (unsigned char *)hs_header_input,
         strlen(hs_header_input), mac, &ml);
    char *ms = b64url(mac, ml);
    snprintf(token, sizeof(token), "%s.%s", hs_header_input, ms);
    ck_assert_int_eq(check(keys, token, &r, &out), JWT_BAD);
    ck_assert_str_eq(out.reason, "HMAC algorithm");
    free(ms);
    free(hh);
    free(ss);
    free(h);
    free(p);
    free(c);
    free(ns);
    free(es);
    BN_free(n);
    BN_free(e);
    jwks_free(keys);
    EVP_PKEY_free(k);
}
END_TEST

Suite *oauth_jwt_suite(void)
{
    Suite *s = suite_create("oauth_jwt");
    TCase *tc = tcase_create("claims");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, good_tokens_name_their_client);
    tcase_add_test(tc, times_have_sixty_seconds_of_skew);
    tcase_add_test(tc, issuer_audience_and_scope);
    tcase_add_test(tc, algorithms_are_pinned_by_key_type);
    tcase_add_test(tc, jwks_keys_that_are_skipped);
    tcase_add_test(tc, rsa_keys_sign_rs256);
    suite_add_tcase(s, tc);
    return s;
}
