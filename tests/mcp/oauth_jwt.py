#!/usr/bin/env python3
"""An OAuth issuer for tests/integration/80_mcp_oauth.sh, from the standard
library and the openssl command (the keys are made by openssl in the test):

  oauth_jwt.py jwks OUT TYPE:KID:PEM...   the JWKS of those keys' public halves
                                          (TYPE rsa, ec (P-256) or ed (Ed25519))
  oauth_jwt.py mint TYPE PEM KID ALG CLAIMS_JSON
                                          a JWT, header {alg, kid, typ}; ALG RS256,
                                          ES256 or EdDSA signs with PEM; "none" has no
                                          signature; HS256 is an HMAC whose secret is
                                          PEM's public key in PEM form (the algorithm
                                          confusion attack); a KID of "-" sends none
  oauth_jwt.py serve JWKS_FILE            a JWKS server on 127.0.0.1: prints
                                          "listening PORT", answers every GET with the
                                          file as it is now (rotation: rewrite it),
                                          except /_count: how many it answered
Claims "exp", "nbf", "iat" given as strings "+N" / "-N" are now plus or minus N seconds.
"""
import base64
import hashlib
import hmac
import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
import time


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def openssl(*args, data=None):
    return subprocess.run(["openssl", *args], input=data, capture_output=True, check=True).stdout


def public_der(pem):
    return openssl("pkey", "-in", pem, "-pubout", "-outform", "DER")


def public_pem(pem):
    return openssl("pkey", "-in", pem, "-pubout")


def jwk(kind, kid, pem):
    if kind == "rsa":
        text = openssl("rsa", "-in", pem, "-noout", "-text").decode()
        modulus = openssl("rsa", "-in", pem, "-noout", "-modulus").decode().strip().split("=", 1)[1]
        exponent = int(text.split("publicExponent:")[1].split()[0])
        n = bytes.fromhex(modulus)
        e = exponent.to_bytes((exponent.bit_length() + 7) // 8, "big")
        return {"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256", "n": b64url(n), "e": b64url(e)}
    der = public_der(pem)
    if kind == "ec":  # SubjectPublicKeyInfo ends with 04 || x || y
        point = der[-65:]
        return {"kty": "EC", "kid": kid, "use": "sig", "crv": "P-256",
                "x": b64url(point[1:33]), "y": b64url(point[33:])}
    return {"kty": "OKP", "kid": kid, "use": "sig", "crv": "Ed25519", "x": b64url(der[-32:])}


def der_ecdsa_to_raw(der):
    # SEQUENCE { INTEGER r, INTEGER s } -> r || s, 32 bytes each
    assert der[0] == 0x30
    i = 2 if der[1] < 0x80 else 2 + (der[1] & 0x7F)
    out = b""
    for _ in range(2):
        assert der[i] == 0x02
        n = der[i + 1]
        v = der[i + 2:i + 2 + n].lstrip(b"\0")
        out += v.rjust(32, b"\0")
        i += 2 + n
    return out


def sign(kind, pem, alg, data):
    if alg == "none":
        return b""
    if alg == "HS256":
        return hmac.new(public_pem(pem), data, hashlib.sha256).digest()
    if alg == "EdDSA":
        with tempfile.NamedTemporaryFile() as f:
            f.write(data)
            f.flush()
            return openssl("pkeyutl", "-sign", "-inkey", pem, "-rawin", "-in", f.name)
    sig = openssl("dgst", "-sha256", "-sign", pem, data=data)
    return der_ecdsa_to_raw(sig) if alg == "ES256" else sig


def mint(kind, pem, kid, alg, claims_json):
    claims = json.loads(claims_json)
    now = int(time.time())
    for k in ("exp", "nbf", "iat"):
        if isinstance(claims.get(k), str):
            claims[k] = now + int(claims[k])
    header = {"alg": alg, "typ": "at+jwt"}
    if kid != "-":
        header["kid"] = kid
    signing_input = (b64url(json.dumps(header).encode()) + "." +
                     b64url(json.dumps(claims).encode())).encode()
    return signing_input.decode() + "." + b64url(sign(kind, pem, alg, signing_input))


def serve(path):
    count = [0]
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/_count":
                body = str(count[0]).encode()
            else:
                with lock:
                    count[0] += 1
                with open(path, "rb") as f:
                    body = f.read()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print("listening %d" % server.server_address[1], flush=True)
    server.serve_forever()


def main():
    what = sys.argv[1]
    if what == "jwks":
        keys = [jwk(*spec.split(":", 2)) for spec in sys.argv[3:]]
        tmp = sys.argv[2] + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"keys": keys}, f)
        os.replace(tmp, sys.argv[2])  # the server never reads half a file
    elif what == "mint":
        print(mint(*sys.argv[2:7]))
    elif what == "serve":
        serve(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
