#!/usr/bin/python3
"""An attacker's (or a broken) registry for pullgate's tests.

Mode "serve" (default): serves one manifest (given as a file) under
/v2/<repo>/manifests/<tag or its digest>, answers /v2/ with 200, and 404 for every blob: the
manifest names blobs (another tenant's private config and layers) it cannot serve.

With --blobs DIR (an OCI layout's blobs/sha256), "serve" also serves every blob found there
(GET and HEAD): an attacker's registry holding its own image, whose manifest is crafted. With
--no-length as well, a blob's body comes without a Content-Length (its end is the connection's).

Mode "vouch": like "serve", but answers HEAD of any blob with 200 (as if it held it; the
Content-Length is the size the manifest gives the blob, else 0) while a GET of a blob is still
404: a registry that vouches for blobs it cannot serve. Every request is logged, as in "serve";
the query string (containerd's ?ns=<host> for a hosts.toml [host] entry) is ignored.

Hostile modes ask for Basic credentials first (so that the client has some to leak), then:
  wrong-digest   serves other bytes than the digest asked for
  huge           a manifest of 5 MiB (over pullgate's 4 MiB cap)
  redirect-away  redirects the manifest to another host (--away-port), which logs whether an
                 Authorization header arrived ("AWAY AUTH yes|no")
  redirect-loop  redirects the manifest to itself, forever
  redirect-secret redirects the manifest to a URL holding the password it was sent (a port
                 nothing listens on), for the client's error to show it
  leak-media-type serves the manifest as a media type holding the password it was sent
  leak-key       serves the manifest with the password it was sent as a repeated top-level key
  bad-challenge  answers 401 with a malformed WWW-Authenticate challenge, whatever is sent
  trickle        sends the manifest's headers, then one byte a second
Echo modes: every /v2/ request gets a Bearer challenge naming this server's own /token, which
refuses every grant (400 invalid_grant) with an error_description repeating the refresh token
or password it was sent, disguised: echo-pieces (7-character pieces between spaces),
echo-base64, echo-reversed.

  evilregistry.py --port P --repo evil/app --tag v1 --manifest FILE --log FILE
                  [--mode MODE] [--away-port P2]
"""
import argparse, hashlib, json, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODES = ["serve", "vouch", "wrong-digest", "huge", "redirect-away", "redirect-loop", "bad-challenge", "trickle",
         "echo-pieces", "echo-base64", "echo-reversed", "redirect-secret", "redirect-secret-host", "realm-secret",
         "leak-media-type", "leak-key"]


def keep_for_difftest(body, blobs):
    """The differential test (tests/difftest/run.sh) reads every document the suite serves:
    the manifest as an OCI layout's only entry, beside the documents among --blobs."""
    import os, tempfile
    top = os.environ.get("PULLGATE_DIFF_CORPUS")
    if not top or not os.path.isdir(top):
        return
    try:
        kind = json.loads(body).get("mediaType") or "application/vnd.oci.image.manifest.v1+json"
    except (ValueError, AttributeError):
        kind = "application/vnd.oci.image.manifest.v1+json"
    keep = tempfile.mkdtemp(prefix="served.", dir=top)
    os.makedirs(f"{keep}/blobs/sha256")
    d = hashlib.sha256(body).hexdigest()
    open(f"{keep}/blobs/sha256/{d}", "wb").write(body)
    for f in os.listdir(blobs) if blobs and os.path.isdir(blobs) else []:
        p = os.path.join(blobs, f)
        if os.path.getsize(p) < (4 << 20):
            open(f"{keep}/blobs/sha256/{f}", "wb").write(open(p, "rb").read())
    json.dump({"schemaVersion": 2, "manifests": [{"mediaType": kind, "digest": "sha256:" + d, "size": len(body)}]}, open(f"{keep}/index.json", "w"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--tag", required=True)
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--mode", choices=MODES, default="serve")
    ap.add_argument("--away-port", type=int)
    ap.add_argument("--blobs")
    ap.add_argument("--no-length", action="store_true")
    ap.add_argument("--content-type", help="serve the manifest as this media type (default: the one it names, else OCI's manifest)")
    a = ap.parse_args()
    body = open(a.manifest, "rb").read()
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    keep_for_difftest(body, a.blobs)
    logf = open(a.log, "a", buffering=1)
    # Served as the media type the document names (an index as an index), else as a manifest.
    try:
        own_type = json.loads(body).get("mediaType") or "application/vnd.oci.image.manifest.v1+json"
    except (ValueError, AttributeError):
        own_type = "application/vnd.oci.image.manifest.v1+json"
    own_type = a.content_type or own_type
    sizes = {}
    if a.mode == "vouch":
        try:
            m = json.loads(body)
            for d in [m.get("config", {})] + m.get("layers", []):
                if "digest" in d:
                    sizes[d["digest"]] = int(d.get("size", 0))
        except (ValueError, AttributeError):
            pass

    class H(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def reply(self, status, headers, payload, send_body, length=True):
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            if length:
                self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if send_body:
                self.wfile.write(payload)

        def hostile(self, send_body):
            """Answers in a hostile mode; False when the request is an ordinary one."""
            if a.mode.startswith("echo-"):
                realm = f'Bearer realm="http://127.0.0.1:{a.port}/token",service="evil",scope="repository:{a.repo}:pull"'
                self.reply(401, [("WWW-Authenticate", realm)], b"", send_body)
                return True
            if a.mode == "bad-challenge":
                self.reply(401, [("WWW-Authenticate", 'Bearer realm="http://[::1', )], b"", send_body)
                return True
            if not self.headers.get("Authorization"):
                self.reply(401, [("WWW-Authenticate", 'Basic realm="evil"')], b"", send_body)
                return True
            if "/manifests/" not in self.path:
                return False
            if a.mode == "wrong-digest":
                other = body + b" "
                self.reply(200, [("Content-Type", "application/vnd.oci.image.manifest.v1+json")], other, send_body)
            elif a.mode == "huge":
                big = b'{"schemaVersion":2,"pad":"' + b"a" * (5 << 20) + b'"}'
                self.reply(200, [("Content-Type", "application/vnd.oci.image.manifest.v1+json")], big, send_body)
            elif a.mode == "redirect-away":
                self.reply(307, [("Location", f"http://127.0.0.1:{a.away_port}{self.path}")], b"", send_body)
            elif a.mode == "redirect-secret":
                import base64
                sent = base64.b64decode(self.headers["Authorization"].split(" ", 1)[1]).decode().split(":", 1)[-1]
                self.reply(307, [("Location", f"http://127.0.0.1:9/leak/{sent}")], b"", send_body)
            elif a.mode == "redirect-secret-host":
                # The password as a host name (what a redirect's host, or an error naming it, would show).
                import base64
                sent = base64.b64decode(self.headers["Authorization"].split(" ", 1)[1]).decode().split(":", 1)[-1]
                self.reply(307, [("Location", f"http://{sent}.invalid:9{self.path}")], b"", send_body)
            elif a.mode == "realm-secret":
                # After the password arrived: a Bearer challenge whose token realm holds it.
                import base64
                sent = base64.b64decode(self.headers["Authorization"].split(" ", 1)[1]).decode().split(":", 1)[-1]
                realm = f'Bearer realm="http://127.0.0.1:9/token/{sent}",service="evil",scope="repository:{a.repo}:pull"'
                self.reply(401, [("WWW-Authenticate", realm)], b"", send_body)
            elif a.mode in ("leak-media-type", "leak-key"):
                import base64
                sent = base64.b64decode(self.headers["Authorization"].split(" ", 1)[1]).decode().split(":", 1)[-1]
                if a.mode == "leak-media-type":
                    self.reply(200, [("Content-Type", f"application/vnd.leak.{sent}")], body, send_body)
                else:
                    leaky = body.rstrip()[:-1] + f',"{sent}":1,"{sent}":2}}'.encode()
                    self.reply(200, [("Content-Type", "application/vnd.oci.image.manifest.v1+json")], leaky, send_body)
            elif a.mode == "redirect-loop":
                self.reply(307, [("Location", self.path)], b"", send_body)
            elif a.mode == "trickle":
                self.send_response(200)
                self.send_header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    for i in range(len(body)):
                        self.wfile.write(body[i:i + 1])
                        self.wfile.flush()
                        time.sleep(1)
                except (BrokenPipeError, ConnectionResetError):
                    pass
            else:
                return False
            return True

        def answer(self, send_body):
            logf.write(f"{self.command} {self.path}\n")
            if a.mode == "vouch":
                # containerd adds ?ns=<host> when it reaches this server through a [host] entry.
                self.path = self.path.split("?", 1)[0]
            if a.mode not in ("serve", "vouch") and self.hostile(send_body):
                return
            if self.path == "/v2/":
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if self.path in (f"/v2/{a.repo}/manifests/{a.tag}", f"/v2/{a.repo}/manifests/{digest}"):
                self.send_response(200)
                self.send_header("Content-Type", own_type)
                self.send_header("Docker-Content-Digest", digest)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if send_body:
                    self.wfile.write(body)
                return
            blob = self.path.rsplit("/blobs/", 1)
            if a.blobs and len(blob) == 2 and self.path.startswith(f"/v2/{a.repo}/blobs/sha256:"):
                hexd = blob[1][len("sha256:"):]
                path = f"{a.blobs}/{hexd}"
                if len(hexd) == 64 and all(c in "0123456789abcdef" for c in hexd) and __import__("os").path.exists(path):
                    data = open(path, "rb").read()
                    self.reply(200, [("Content-Type", "application/octet-stream"), ("Docker-Content-Digest", blob[1])], data, send_body, not a.no_length)
                    return
            if a.mode == "vouch" and not send_body and len(blob) == 2 and self.path.startswith(f"/v2/{a.repo}/blobs/"):
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Docker-Content-Digest", blob[1])
                self.send_header("Content-Length", str(sizes.get(blob[1], 0)))
                self.end_headers()
                return
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            msg = b'{"errors":[{"code":"BLOB_UNKNOWN","message":"blob unknown to registry"}]}'
            self.send_header("Content-Length", str(len(msg)))
            self.end_headers()
            if send_body:
                self.wfile.write(msg)

        def do_GET(self):
            self.answer(True)

        def do_HEAD(self):
            self.answer(False)

        def do_POST(self):
            import base64, urllib.parse
            n = int(self.headers.get("Content-Length", "0"))
            form = dict(urllib.parse.parse_qsl(self.rfile.read(n).decode()))
            logf.write(f"POST {self.path} grant={form.get('grant_type', '')}\n")
            secret = form.get("refresh_token") or form.get("password") or ""
            if a.mode == "echo-pieces":
                desc = " ".join(secret[i:i + 7] for i in range(0, len(secret), 7))
            elif a.mode == "echo-base64":
                desc = "token " + base64.b64encode(secret.encode()).decode()
            else:
                desc = "reversed " + secret[::-1]
            out = json.dumps({"error": "invalid_grant", "error_description": desc}).encode()
            self.reply(400, [("Content-Type", "application/json")], out, True)

    class Away(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            logf.write(f"AWAY AUTH {'yes' if self.headers.get('Authorization') else 'no'} {self.path}\n")
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    if a.away_port:
        away = ThreadingHTTPServer(("127.0.0.1", a.away_port), Away)
        threading.Thread(target=away.serve_forever, daemon=True).start()
    ThreadingHTTPServer(("127.0.0.1", a.port), H).serve_forever()


if __name__ == "__main__":
    main()
