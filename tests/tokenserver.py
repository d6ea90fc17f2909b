#!/usr/bin/python3
"""A distribution token server for pullgate's tests (docker-registry `auth: token`).

  tokenserver.py --port P --key KEY.pem --cert CERT.pem --config ACL.json --log FILE [--tokens FILE]

ACL.json: {"users": {"name": "password"}, "access": {"name": ["repo/prefix/*", "exact/repo"]},
           "anonymous": ["public/*"], "push": ["admin"],
           optional: "revoked": [refresh token jti], "refresh_grant": false (refuse the
           refresh-token grant with unsupported_grant_type), "refresh_ttl": seconds (default
           3600; negative issues expired ones), "access_ttl": seconds (default 300; the registry
           allows 60 s of clock skew, so an expired one needs less than -60)}
The file is read again for every request, so a test changes it while the server runs.
Answers GET /token (Basic or anonymous) and the OAuth2 password-grant POST /token with
{"token", "access_token", "expires_in", "issued_at"}: an RS256 JWT whose header kid is the
libtrust key id of the certificate's key. A valid user without access to the repository gets a
token with an empty access list (the registry then answers 401 insufficient_scope); a wrong
password gets 401. As distribution's token spec has it, a password grant with
access_type=offline also returns a "refresh_token" (an RS256 JWT with typ "refresh", aud the
service, sub the user), and POST /token grant_type=refresh_token exchanges one for an access
token (the refresh token is returned again). An expired, revoked or forged refresh token, one
issued for another service, or one whose user is gone gets 400 invalid_grant with an
error_description naming the cause. Every request is logged (method, path, user; never passwords). With --tokens,
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

    def refresh_token(user, service):
        acl = json.load(open(a.config))
        now = int(time.time())
        claims = {"iss": a.issuer, "sub": user, "aud": service, "typ": "refresh", "iat": now,
                  "exp": now + int(acl.get("refresh_ttl", 3600)), "jti": str(uuid.uuid4())}
        tok = jwt.encode(claims, key, algorithm="RS256", headers={"kid": kid})
        if tokf:
            tokf.write(f"{claims['jti']} {tok}\n")
        return tok

    def check_refresh(tok, service):
        """The user a refresh token stands for, or the reason it is refused."""
        try:
            c = jwt.decode(tok, key.public_key(), algorithms=["RS256"], options={"verify_aud": False})
        except jwt.ExpiredSignatureError:
            return None, "the refresh token has expired"
        except jwt.PyJWTError:
            return None, "not a refresh token this service issued"
        acl = json.load(open(a.config))
        if c.get("typ") != "refresh" or c.get("iss") != a.issuer:
            return None, "not a refresh token this service issued"
        if c.get("jti") in acl.get("revoked", []):
            return None, "the refresh token has been revoked"
        if c.get("aud") != service:
            return None, f"the refresh token was issued for service {c.get('aud')}, not {service}"
        if c.get("sub") not in acl.get("users", {}):
            return None, "the refresh token's user no longer exists"
        return c["sub"], None

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

        def issue(self, user, service, scopes, refresh=None):
            access = []
            for scope in scopes:
                parts = scope.split(":")
                if len(parts) != 3 or parts[0] != "repository":
                    continue
                actions = [x for x in parts[2].split(",") if allowed(user, parts[1], x)]
                if actions:
                    access.append({"type": "repository", "name": parts[1], "actions": actions})
            now = int(time.time())
            ttl = int(json.load(open(a.config)).get("access_ttl", 300))
            claims = {"iss": a.issuer, "sub": user or "", "aud": service, "exp": now + ttl, "nbf": min(now, now + ttl) - 10,
                      "iat": now, "jti": str(uuid.uuid4()), "access": access}
            tok = jwt.encode(claims, key, algorithm="RS256", headers={"kid": kid})
            if tokf:
                tokf.write(f"{claims['jti']} {tok}\n")
            body = {"token": tok, "access_token": tok, "expires_in": ttl,
                    "issued_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))}
            if refresh:
                body["refresh_token"] = refresh
            grant = f" grant={self.grant}" if self.command == "POST" else ""
            logf.write(f"{self.command} /token user={user or '-'}{grant} scopes={' '.join(scopes)} granted={json.dumps(access)} "
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
            field = lambda k: form.get(k, [""])[0]
            self.grant = field("grant_type")
            scopes = " ".join(form.get("scope", [])).split()
            service = field("service")
            if self.grant == "refresh_token":
                if json.load(open(a.config)).get("refresh_grant", True) is False:
                    logf.write("POST /token grant=refresh_token denied: grant disabled\n")
                    return self.reply(400, {"error": "unsupported_grant_type"})
                tok = field("refresh_token")
                user, why = check_refresh(tok, service)
                if why:
                    logf.write(f"POST /token grant=refresh_token denied: {why}\n")
                    return self.reply(400, {"error": "invalid_grant", "error_description": why})
                return self.issue(user, service, scopes, refresh=tok)
            if self.grant != "password":
                return self.reply(400, {"error": "unsupported_grant_type"})
            user, pw = field("username"), field("password")
            if not check_user(user, pw):
                logf.write(f"POST /token user={user} denied: bad credentials\n")
                return self.reply(401, {"error": "invalid_grant"})
            offline = field("access_type") == "offline"
            self.issue(user, service, scopes, refresh=refresh_token(user, service) if offline else None)

    ThreadingHTTPServer(("127.0.0.1", a.port), H).serve_forever()


if __name__ == "__main__":
    sys.exit(main())
