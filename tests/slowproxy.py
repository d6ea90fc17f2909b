#!/usr/bin/python3
"""A slow registry proxy for pullgate's tests: every request goes on to one registry (method,
path and query, with Accept, Authorization and Range), and its answer comes back (status, the
headers a client needs, the body) at most --rate bytes a second on each connection, so that a
pull of a few megabytes is still running seconds after it started. A client that goes away
mid-body ends that request only. Every request is logged as "METHOD PATH STATUS". With
--limited FILE, every request is answered 429 Too Many Requests (as a registry's rate limit
does: a Retry-After and a TOOMANYREQUESTS error) while FILE exists, and relayed otherwise.

  slowproxy.py --port P --to HOST:PORT --rate BYTES_PER_SECOND --log FILE [--limited FILE]
"""
import argparse, http.client, json, os, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PASSED_ON = ["Accept", "Authorization", "Range"]
PASSED_BACK = ["WWW-Authenticate", "Content-Type", "Content-Length", "Docker-Content-Digest",
               "Docker-Distribution-Api-Version", "Location", "Etag", "Content-Range"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--to", required=True)
    ap.add_argument("--rate", type=int, required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--limited")
    a = ap.parse_args()
    logf = open(a.log, "a", buffering=1)
    chunk = max(1, min(65536, a.rate // 10))

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def limited(self, body):
            data = json.dumps({"errors": [{"code": "TOOMANYREQUESTS", "message": "rate limit reached"}]}).encode()
            logf.write(f"{self.command} {self.path} 429\n")
            self.send_response(429)
            self.send_header("Retry-After", "1")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

        def relay(self, body):
            if a.limited and os.path.exists(a.limited):
                return self.limited(body)
            up = http.client.HTTPConnection(a.to, timeout=60)
            try:
                headers = {h: self.headers[h] for h in PASSED_ON if self.headers.get(h)}
                up.request(self.command, self.path, headers=headers)
                r = up.getresponse()
                data = r.read() if r.getheader("Content-Length") is None else None
                logf.write(f"{self.command} {self.path} {r.status}\n")
                self.send_response(r.status)
                for h in PASSED_BACK:
                    if r.getheader(h) is not None and not (h == "Content-Length" and data is not None):
                        self.send_header(h, r.getheader(h))
                if data is not None:
                    self.send_header("Content-Length", str(len(data) if body else 0))
                self.end_headers()
                if not body:
                    return
                start, sent = time.monotonic(), 0
                while True:
                    piece = data[sent:sent + chunk] if data is not None else r.read(chunk)
                    if not piece:
                        break
                    self.wfile.write(piece)
                    sent += len(piece)
                    ahead = sent / a.rate - (time.monotonic() - start)
                    if ahead > 0:
                        time.sleep(ahead)
            except OSError:
                self.close_connection = True
            finally:
                up.close()

        def do_GET(self):
            self.relay(True)

        def do_HEAD(self):
            self.relay(False)

    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer(("127.0.0.1", a.port), H).serve_forever()


if __name__ == "__main__":
    main()
