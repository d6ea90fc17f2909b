#!/usr/bin/env python3
"""A tiny HTTPS proxy for tests/e2e_containerd_suite.sh: it answers every `CONNECT host:port`
by tunnelling to one local address (the suite's TLS registry), whatever host was asked, so that
clients given HTTPS_PROXY reach "ghcr.io" or "registry.k8s.io" on this machine only, without
touching /etc/hosts or any other global state. Each CONNECT's target is appended to --log.
Anything but CONNECT is answered 405. Bound to 127.0.0.1.

  connectproxy.py --port PORT --to 127.0.0.1:REGPORT --log FILE
"""
import argparse, socket, threading


def pipe(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            b.sendall(d)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def handle(c, to, logf, lock):
    try:
        head = b""
        while b"\r\n\r\n" not in head:
            d = c.recv(4096)
            if not d:
                c.close()
                return
            head += d
            if len(head) > 65536:
                c.close()
                return
        line, rest = head.split(b"\r\n", 1)[0].decode("latin-1"), head.split(b"\r\n\r\n", 1)[1]
        parts = line.split()
        if len(parts) < 2 or parts[0] != "CONNECT":
            c.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            c.close()
            return
        with lock:
            with open(logf, "a") as f:
                f.write(parts[1] + "\n")
        u = socket.create_connection(to, timeout=30)
        u.settimeout(None)
        c.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        if rest:
            u.sendall(rest)
        threading.Thread(target=pipe, args=(u, c), daemon=True).start()
        pipe(c, u)
    except OSError:
        try:
            c.close()
        except OSError:
            pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--to", required=True)
    ap.add_argument("--log", required=True)
    a = ap.parse_args()
    host, port = a.to.rsplit(":", 1)
    to = (host, int(port))
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", a.port))
    s.listen(128)
    lock = threading.Lock()
    while True:
        c, _ = s.accept()
        threading.Thread(target=handle, args=(c, to, a.log, lock), daemon=True).start()


if __name__ == "__main__":
    main()
