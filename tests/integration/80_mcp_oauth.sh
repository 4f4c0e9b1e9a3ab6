#!/usr/bin/env bash
# The front door as an OAuth 2.1 resource server (relay/mcp/oauth.c,
# relay/mcp/oauth_jwt.c; issue 37): an issuer's JWKS on a local server
# (tests/mcp/oauth_jwt.py), keys made by openssl here, tokens minted here.
#   A. the Protected Resource Metadata (RFC 9728) at the path-suffixed and
#      the bare well-known address; a request without a token gets 401 with
#      resource_metadata and scope in WWW-Authenticate;
#   B. good tokens (RS256, ES256, EdDSA) reach the client that client_id
#      names: a tools/call lands one effect at the receiver;
#   C. expired, wrong audience, unknown issuer, alg none, HS256 signed with
#      the public key, a bad signature, a client no row has: each 401 with
#      error="invalid_token" and resource_metadata, its reason in the log
#      (never the token), and no intent, no effect; without the scope: 403
#      insufficient_scope;
#   D. rotation: the issuer's JWKS changes and a token with the new kid
#      works (one fetch more); then a flood of unknown kids is 401 without
#      another fetch (at most one a minute: counted at the JWKS server);
#   E. a static token keeps working beside OAuth;
#   F. a JWT's cached verdict never outlives its exp (+ the 60 s skew).
. "$(dirname "$0")/../lib/itest.sh"
itest_setup

receiver_start fast --dedupe
target_add fast "http://127.0.0.1:$RECV_PORT_fast/act"
sql "INSERT INTO outbox.mcp_tools (tool, target, description) VALUES ('refund', 'fast', 'Refund an order')" >/dev/null
STATIC=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
THROWN_AWAY=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
sql "SELECT outbox.mcp_client('agent-static', '$STATIC'), outbox.mcp_client('agent-oauth', '$THROWN_AWAY')" >/dev/null
relay_start a --poll-interval-ms 200

jwt() { python3 "$ITEST_ROOT/tests/mcp/oauth_jwt.py" "$@"; }
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$T/rsa1.pem" 2>/dev/null
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$T/rsa2.pem" 2>/dev/null
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$T/ec.pem" 2>/dev/null
openssl genpkey -algorithm ed25519 -out "$T/ed.pem" 2>/dev/null
jwt jwks "$T/jwks.json" "rsa:k1:$T/rsa1.pem" "ec:e1:$T/ec.pem" "ed:d1:$T/ed.pem"
# python3 itself in the background (not the function jwt, whose subshell
# would be the PID killed at the end, leaving the server running)
python3 "$ITEST_ROOT/tests/mcp/oauth_jwt.py" serve "$T/jwks.json" >"$T/jwks.out" 2>"$T/jwks.err" &
ITEST_PIDS+=("$!")
wait_cmd 10 grep -q '^listening' "$T/jwks.out" || bail "the JWKS server did not start"
JWKS_PORT=$(sed -n 's/^listening //p' "$T/jwks.out")
jwks_count() { curl -s "http://127.0.0.1:$JWKS_PORT/_count"; }

RESOURCE=https://mcp.example.test/mcp
ISSUER=https://issuer.example.test
METADATA=https://mcp.example.test/.well-known/oauth-protected-resource/mcp
mcp_start --mcp-resource "$RESOURCE" --mcp-oauth-issuer "$ISSUER" \
    --mcp-oauth-jwks "http://127.0.0.1:$JWKS_PORT/jwks.json" --mcp-oauth-scope "outbox:call"
wait_cmd 20 grep -q '"event":"mcp_oauth_jwks_fetched"' "$T/mcp.log" || bail "the JWKS was not fetched"
is "$(jwks_count)" 1 "the JWKS is fetched once at start"

# claims TWEAKS…: the claims of a good token, changed by jq-free python
claims() {
    python3 - "$@" <<'EOF'
import json, sys
c = {"iss": "https://issuer.example.test", "aud": "https://mcp.example.test/mcp",
     "client_id": "agent-oauth", "sub": "user-1", "exp": "+600", "iat": "-5", "scope": "openid outbox:call"}
for kv in sys.argv[1:]:
    k, v = kv.split("=", 1)
    if v == "DELETE":
        c.pop(k, None)
    else:
        c[k] = json.loads(v) if v[:1] in "[{" else v
print(json.dumps(c))
EOF
}
# post TOKEN BODY → "STATUS" (headers in $T/h, body in $T/b); 2025-11-25,
# or the 2026-07-28 era's server/discover with MODERN=1
post() {
    local auth=() era=(-H 'MCP-Protocol-Version: 2025-11-25')
    [ -z "$1" ] || auth=(-H "Authorization: Bearer $1")
    [ -z "${MODERN:-}" ] || era=(-H 'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: server/discover')
    curl -s -o "$T/b" -D "$T/h" -w '%{http_code}' -X POST "http://127.0.0.1:$MCP_PORT/mcp" \
        -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
        "${era[@]}" "${auth[@]}" --data-binary "$2"
}
DISCOVER='{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"80","version":"1"}}}}'

call_body() { # call_body KEY
    printf '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"refund","arguments":{"order":"o-%s"},"_meta":{"outbox-relay/idempotency-key":"%s"}}}' "$1" "$1"
}
LIST='{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}'
challenge() { tr -d '\r' <"$T/h" | sed -n 's/^[Ww][Ww][Ww]-[Aa]uthenticate: //p'; }

# ---- A. where hosts find the authorization server
body=$(curl -s "http://127.0.0.1:$MCP_PORT/.well-known/oauth-protected-resource/mcp")
is "$body" '{"resource":"https://mcp.example.test/mcp","authorization_servers":["https://issuer.example.test"],"bearer_methods_supported":["header"],"scopes_supported":["outbox:call"]}' \
    "the metadata at the RFC 9728 address of the resource: resource, authorization server, scopes"
is "$(curl -s "http://127.0.0.1:$MCP_PORT/.well-known/oauth-protected-resource")" "$body" \
    "and at the bare well-known path"
is "$(post "" "$LIST")" 401 "no token: 401"
is "$(challenge)" "Bearer resource_metadata=\"$METADATA\", scope=\"outbox:call\"" \
    "its challenge names the metadata and the scope (no error: no token was sent)"

# ---- B. good tokens
GOOD=$(jwt mint rsa "$T/rsa1.pem" k1 RS256 "$(claims)")
is "$(post "$GOOD" "$(call_body good-1)")" 200 "an RS256 token: the tools/call is answered"
ok "its answer is the call's outcome" grep -q '"isError":false' "$T/b"
wait_cmd 20 bash -c "curl -s http://127.0.0.1:$RECV_PORT_fast/_effects | grep -q 'mcp:agent-oauth:good-1'"
is "$(curl -s "http://127.0.0.1:$RECV_PORT_fast/_effects")" '{"mcp:agent-oauth:good-1":1}' \
    "one effect at the receiver, keyed in the namespace of the client client_id names"
ES=$(jwt mint ec "$T/ec.pem" e1 ES256 "$(claims)")
is "$(post "$ES" "$LIST")" 200 "an ES256 token: tools/list is answered"
ok "with the client's tools" grep -q '"name":"refund"' "$T/b"
ED=$(jwt mint ed "$T/ed.pem" d1 EdDSA "$(claims client_id=DELETE azp=agent-oauth)")
is "$(post "$ED" "$LIST")" 200 "an EdDSA token whose client is its azp: answered"
is "$(MODERN=1 post "$ED" "$DISCOVER")" 200 "the 2026-07-28 era: server/discover with the same token is answered"
is "$(MODERN=1 post "" "$DISCOVER")" 401 "the 2026-07-28 era without a token: 401"
is "$(challenge)" "Bearer resource_metadata=\"$METADATA\", scope=\"outbox:call\"" \
    "with the same challenge (the authorization spec is the same in both eras)"

# ---- C. bad tokens: 401 (or 403), a reason in the log, nothing enqueued
refused() { # refused STATUS REASON TOKEN KEY DESC
    local status
    status=$(post "$3" "$(call_body "$4")")
    is "$status" "$1" "$5: $1"
    if [ "$1" = 401 ]; then
        is "$(challenge)" "Bearer resource_metadata=\"$METADATA\", scope=\"outbox:call\", error=\"invalid_token\"" \
            "$5: the challenge says invalid_token and where the metadata is"
    else
        is "$(challenge)" "Bearer resource_metadata=\"$METADATA\", scope=\"outbox:call\", error=\"insufficient_scope\"" \
            "$5: the challenge says insufficient_scope"
    fi
    ok "$5: the log says why ($2)" grep -qF "\"event\":\"mcp_oauth_refused\",\"reason\":\"$2" "$T/mcp.log"
}
refused 401 expired "$(jwt mint rsa "$T/rsa1.pem" k1 RS256 "$(claims exp=-3600)")" bad-expired "an expired token"
refused 401 "wrong audience" "$(jwt mint rsa "$T/rsa1.pem" k1 RS256 "$(claims aud=https://other.example.test/mcp)")" \
    bad-aud "a token for another resource"
refused 401 "wrong audience" "$(jwt mint rsa "$T/rsa1.pem" k1 RS256 "$(claims 'aud=["https://other.example.test"]')")" \
    bad-aud2 "a token whose aud array lacks the resource"
refused 401 "unknown issuer" "$(jwt mint rsa "$T/rsa1.pem" k1 RS256 "$(claims iss=https://evil.example.test)")" \
    bad-iss "a token of another issuer"
refused 401 "alg none" "$(jwt mint rsa "$T/rsa1.pem" k1 none "$(claims)")" bad-none "alg none"
refused 401 "HMAC algorithm" "$(jwt mint rsa "$T/rsa1.pem" k1 HS256 "$(claims)")" bad-hs256 \
    "HS256 signed with the issuer's public key"
refused 401 "bad signature" "$(jwt mint rsa "$T/rsa2.pem" k1 RS256 "$(claims)")" bad-sig \
    "RS256 signed by another key under a known kid"
refused 401 "alg does not match" "$(jwt mint ec "$T/ec.pem" k1 ES256 "$(claims)")" bad-alg \
    "ES256 under the kid of an RSA key"
is "$(post "$(jwt mint rsa "$T/rsa1.pem" k1 RS256 "$(claims client_id=nobody-here)")" "$(call_body bad-client)")" 401 \
    "a good token naming a client no row has: 401"
refused 403 "insufficient scope" "$(jwt mint rsa "$T/rsa1.pem" k1 RS256 "$(claims scope=openid)")" bad-scope \
    "a good token without the scope"
ok "no token reached the log" bash -c "! grep -qF '$GOOD' '$T/mcp.log' && ! grep -qF 'eyJ' '$T/mcp.log'"
is "$(sql "SELECT string_agg(key, ' ' ORDER BY key) FROM outbox.intents")" "mcp:agent-oauth:good-1" \
    "no refused token enqueued anything"

# ---- D. rotation, and a flood of unknown kids
# Minted before the rotation, so that the flood follows the fetch closely
# (the limit is one fetch a minute: a slow machine must not reach the next).
ROTATED=$(jwt mint rsa "$T/rsa2.pem" k2 RS256 "$(claims)")
FLOOD=()
for i in $(seq 1 20); do FLOOD+=("$(jwt mint rsa "$T/rsa2.pem" "made-up-$i" RS256 "$(claims)")"); done
jwt jwks "$T/jwks.json" "rsa:k2:$T/rsa2.pem" "ec:e1:$T/ec.pem" "ed:d1:$T/ed.pem"
is "$(post "$ROTATED" "$(call_body rotated-1)")" 200 "after the issuer rotated its keys, a token of the new kid works"
is "$(jwks_count)" 2 "the unknown kid fetched the JWKS once more"
flood_refused=0
for token in "${FLOOD[@]}"; do
    [ "$(post "$token" "$LIST")" = 401 ] && flood_refused=$((flood_refused + 1))
done
is "$flood_refused" 20 "20 tokens of made-up kids: all 401"
is "$(jwks_count)" 2 "and not one more fetch of the JWKS (at most one a minute for unknown kids)"
ok "the log says why" grep -qF '"reason":"unknown kid' "$T/mcp.log"
is "$(curl -s "http://127.0.0.1:$MCP_PORT/metrics" | awk '$1 == "outbox_mcp_oauth_jwks_fetches_total{result=\"ok\"}" { print $2 }')" 2 \
    "/metrics counts the two fetches"
withdrawn=""
for i in $(seq 1 30); do # its verdict may be cached 5 s from its last use
    withdrawn=$(post "$GOOD" "$LIST")
    [ "$withdrawn" = 401 ] && break
    sleep 0.5
done
is "$withdrawn" 401 "the withdrawn key's token is refused once the JWKS no longer has it"

# ---- E. a static token beside OAuth
is "$(post "$STATIC" "$(call_body static-1)")" 200 "a static token still works"
wait_cmd 20 bash -c "curl -s http://127.0.0.1:$RECV_PORT_fast/_effects | grep -q 'mcp:agent-static:static-1'"
is "$(curl -s "http://127.0.0.1:$RECV_PORT_fast/_effects")" \
    '{"mcp:agent-oauth:good-1":1,"mcp:agent-oauth:rotated-1":1,"mcp:agent-static:static-1":1}' \
    "one effect per good call, none of the refused ones"

# ---- F. a cached verdict ends with its token: a token 3 s from the end of
# its skew is accepted, then asked with again and again; no request sent
# after exp + 60 s may be answered 200 from the verdict cache (kept 5 s
# otherwise). The ones before may: the check is on the clock, not on speed.
SHORT=$(jwt mint ed "$T/ed.pem" d1 EdDSA "$(claims exp=-57)")
SHORT_END=$(( $(python3 -c 'import base64, json, sys; p = sys.argv[1].split(".")[1]; print(json.loads(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4)))["exp"])' "$SHORT") + 60 ))
late_200=0
last=""
for i in $(seq 1 60); do
    sent=$(date +%s)
    last=$(post "$SHORT" "$LIST")
    [ "$last" = 200 ] && [ "$sent" -gt "$SHORT_END" ] && late_200=$((late_200 + 1))
    [ "$last" = 401 ] && break
    sleep 0.2
done
is "$last" 401 "a token past exp + 60 s is refused in the end"
is "$late_200" 0 "and never answered from the verdict cache once it is past exp + 60 s"

kill -TERM "$MCP_PID"
wait "$MCP_PID"
is "$?" 0 "the front door stops cleanly (the JWKS client's handles closed)"
ok "no sanitizer report" bash -c "! grep -E 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' '$T/mcp.log'"
itest_done
