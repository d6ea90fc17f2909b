#!/usr/bin/python3
"""A registry proxy for several registries, for pullgate's tests: it answers each request for the
registry its ?ns= query names (containerd's query to a server that is not the registry), by
passing it on to that registry's address. Method, path, Accept and Authorization go on; status,
body and the registry's headers that matter to a client (challenge, content type, digest,
location) come back. A request without ?ns=, or naming a registry it has no route for, gets 404.
Every request is logged as "METHOD PATH?QUERY -> UPSTREAM STATUS".

  nsproxy.py --port P --route REGISTRY=HOST:PORT [--route ...] --log FILE
"""
import argparse, http.client, urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PASSED_BACK = ["WWW-Authenticate", "Content-Type", "Docker-Content-Digest", "Location"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--route", action="append", default=[])
    ap.add_argument("--log", required=True)
    a = ap.parse_args()
    routes = dict(r.split("=", 1) for r in a.route)
    logf = open(a.log, "a", buffering=1)

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def relay(self, send_body):
            url = urllib.parse.urlsplit(self.path)
            ns = urllib.parse.parse_qs(url.query).get("ns", [""])[0]
            upstream = routes.get(ns)
            if url.path == "/v2/" or upstream is None:
                status, headers, body = (200 if url.path == "/v2/" else 404), [], b""
            else:
                conn = http.client.HTTPConnection(upstream, timeout=30)
                fwd = {k: v for k, v in self.headers.items() if k.lower() in ("accept", "authorization")}
                conn.request(self.command, url.path, headers=fwd)
                resp = conn.getresponse()
                status, body = resp.status, resp.read()
                headers = [(k, resp.getheader(k)) for k in PASSED_BACK if resp.getheader(k) is not None]
                if self.command == "HEAD":
                    headers.append(("Content-Length", resp.getheader("Content-Length") or "0"))
                conn.close()
            logf.write(f"{self.command} {self.path} -> {upstream or '-'} {status}\n")
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            if self.command != "HEAD":
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if send_body:
                self.wfile.write(body)

        def do_GET(self):
            self.relay(True)

        def do_HEAD(self):
            self.relay(False)

    ThreadingHTTPServer(("127.0.0.1", a.port), H).serve_forever()


if __name__ == "__main__":
    main()
