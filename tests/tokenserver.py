#!/usr/bin/python3
"""A distribution token server for pullgate's tests (docker-registry `auth: token`).

  tokenserver.py --port P --key KEY.pem --cert CERT.pem --config ACL.json --log FILE [--tokens FILE]

ACL.json: {"users": {"name": "password"}, "access": {"name": ["repo/prefix/*", "exact/repo"]},
           "anonymous": ["public/*"], "push": ["admin"]}
Answers GET /token (Basic or anonymous) and the OAuth2 password-grant POST /token with
{"token", "access_token", "expires_in", "issued_at"}: an RS256 JWT whose header kid is the
libtrust key id of the certificate's key. A valid user without access to the repository gets a
token with an empty access list (the registry then answers 401 insufficient_scope); a wrong
password gets 401. Every request is logged (method, path, user; never passwords). With --tokens,
every issued token is also written to that file ("<jti> <token>" per line), for the tests only:
they search pullgate's and containerd's files and logs for it (a leaked bearer token).
"""
import argparse, base64, fnmatch, hashlib, json, sys, time, uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import serialization


def libtrust_kid(cert):
    der = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    b32 = base64.b32encode(hashlib.sha256(der).digest()[:30]).decode().rstrip("=")
    return ":".join(b32[i:i + 4] for i in range(0, len(b32), 4))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--issuer", default="pullgate-test-issuer")
    ap.add_argument("--tokens", help="write every issued token (jti and token) to this file")
    a = ap.parse_args()
    # Parsed once: given PEM bytes, every jwt.encode would parse and check the RSA key again
    # (about 30 ms a token), a cost real token servers do not have.
    key = serialization.load_pem_private_key(open(a.key, "rb").read(), password=None)
    kid = libtrust_kid(x509.load_pem_x509_certificate(open(a.cert, "rb").read()))
    logf = open(a.log, "a", buffering=1)
    tokf = open(a.tokens, "a", buffering=1) if a.tokens else None

    def allowed(user, repo, action):
        acl = json.load(open(a.config))
        if action == "push":
            return user in acl.get("push", [])
        pats = acl.get("anonymous", []) + (acl.get("access", {}).get(user, []) if user else [])
        return any(repo == p or fnmatch.fnmatch(repo, p) for p in pats)

    def check_user(user, password):
        users = json.load(open(a.config)).get("users", {})
        return user in users and users[user] == password

    class H(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def reply(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def issue(self, user, service, scopes):
            access = []
            for scope in scopes:
                parts = scope.split(":")
                if len(parts) != 3 or parts[0] != "repository":
                    continue
                actions = [x for x in parts[2].split(",") if allowed(user, parts[1], x)]
                if actions:
                    access.append({"type": "repository", "name": parts[1], "actions": actions})
            now = int(time.time())
            claims = {"iss": a.issuer, "sub": user or "", "aud": service, "exp": now + 300, "nbf": now - 10,
                      "iat": now, "jti": str(uuid.uuid4()), "access": access}
            tok = jwt.encode(claims, key, algorithm="RS256", headers={"kid": kid})
            if tokf:
                tokf.write(f"{claims['jti']} {tok}\n")
            body = {"token": tok, "access_token": tok, "expires_in": 300,
                    "issued_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))}
            logf.write(f"{self.command} /token user={user or '-'} scopes={' '.join(scopes)} granted={json.dumps(access)} "
                       f"bytes={len(json.dumps(body))}\n")
            self.reply(200, body)

        def do_GET(self):
            u = urlparse(self.path)
            if u.path != "/token":
                return self.reply(404, {"error": "not found"})
            q = parse_qs(u.query)
            user = None
            auth = self.headers.get("Authorization", "")
            if auth.startswith("Basic "):
                try:
                    user, pw = base64.b64decode(auth[6:]).decode().split(":", 1)
                except Exception:
                    return self.reply(400, {"error": "bad basic auth"})
                if not check_user(user, pw):
                    logf.write(f"GET /token user={user} denied: bad credentials\n")
                    return self.reply(401, {"error": "invalid credentials"})
            self.issue(user, q.get("service", [""])[0], q.get("scope", []))

        def do_POST(self):
            u = urlparse(self.path)
            if u.path != "/token":
                return self.reply(404, {"error": "not found"})
            n = int(self.headers.get("Content-Length", "0"))
            form = parse_qs(self.rfile.read(n).decode())
            if form.get("grant_type", [""])[0] != "password":
                return self.reply(400, {"error": "unsupported_grant_type"})
            user, pw = form.get("username", [""])[0], form.get("password", [""])[0]
            if not check_user(user, pw):
                logf.write(f"POST /token user={user} denied: bad credentials\n")
                return self.reply(401, {"error": "invalid_grant"})
            scopes = " ".join(form.get("scope", [])).split()
            self.issue(user, form.get("service", [""])[0], scopes)

    ThreadingHTTPServer(("127.0.0.1", a.port), H).serve_forever()


if __name__ == "__main__":
    sys.exit(main())
