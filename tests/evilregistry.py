#!/usr/bin/python3
"""An attacker's registry for pullgate's tests: serves one manifest (given as a file) under
/v2/<repo>/manifests/<tag or its digest>, answers /v2/ with 200, and 404 for every blob: the
manifest names blobs (another tenant's private config and layers) it cannot serve.

  evilregistry.py --port P --repo evil/app --tag v1 --manifest FILE --log FILE
"""
import argparse, hashlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--tag", required=True)
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--log", required=True)
    a = ap.parse_args()
    body = open(a.manifest, "rb").read()
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    logf = open(a.log, "a", buffering=1)

    class H(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def answer(self, send_body):
            logf.write(f"{self.command} {self.path}\n")
            if self.path == "/v2/":
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if self.path in (f"/v2/{a.repo}/manifests/{a.tag}", f"/v2/{a.repo}/manifests/{digest}"):
                self.send_response(200)
                self.send_header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
                self.send_header("Docker-Content-Digest", digest)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if send_body:
                    self.wfile.write(body)
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

    ThreadingHTTPServer(("127.0.0.1", a.port), H).serve_forever()


if __name__ == "__main__":
    main()
