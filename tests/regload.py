#!/usr/bin/env python3
"""What a registry served from a point of its logs on: requests and bytes, by kind.

  regload.py REGISTRY_LOG REG_LINE TOKEN_LOG TOKEN_LINE [REPO]

REGISTRY_LOG is a distribution registry's log (its access log lines: `"GET /v2/... HTTP/1.1"
STATUS BYTES`), TOKEN_LOG tests/tokenserver.py's; only lines after REG_LINE and TOKEN_LINE
count, and with REPO only requests for that repository (/v2/REPO/..., tokens with its scope). Prints one JSON object:
manifests (GET and HEAD of /manifests/, any answer: the token challenges' 401 too),
manifests_ok (those answered 2xx), blobs (GET of /blobs/), other (/v2/ pings and the
rest), bytes (every response body), blob_bytes, tokens (requests to the token server), and
requests (all of them, token requests included).
"""
import json
import re
import sys

ACCESS = re.compile(r'"(GET|HEAD|POST|PUT|PATCH|DELETE) (/v2/[^ "]*) HTTP/[0-9.]+" (\d{3}) (\d+|-)')


def main():
    reg_log, reg_mark, tok_log, tok_mark = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    repo = sys.argv[5] if len(sys.argv) > 5 else None
    out = {"manifests": 0, "manifests_ok": 0, "blobs": 0, "other": 0, "bytes": 0, "blob_bytes": 0, "tokens": 0}
    with open(reg_log, errors="replace") as f:
        lines = f.read().splitlines()[reg_mark:]
    for line in lines:
        m = ACCESS.search(line)
        if not m:
            continue
        method, path, status, size = m.groups()
        if repo and not path.startswith(f"/v2/{repo}/"):
            continue
        n = 0 if size == "-" else int(size)
        out["bytes"] += n
        if "/manifests/" in path:
            out["manifests"] += 1
            out["manifests_ok"] += status.startswith("2")
        elif "/blobs/" in path and method == "GET":
            out["blobs"] += 1
            out["blob_bytes"] += n
        else:
            out["other"] += 1
    with open(tok_log, errors="replace") as f:
        out["tokens"] = sum(1 for line in f.read().splitlines()[tok_mark:]
                            if "/token" in line and (not repo or f"repository:{repo}:" in line))
    out["requests"] = out["manifests"] + out["blobs"] + out["other"] + out["tokens"]
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
