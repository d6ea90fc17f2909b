#!/usr/bin/env python3
"""What a registry served from a point of its logs on: requests and bytes, by kind; and what a
cluster would cost it, from such measurements.

  regload.py REGISTRY_LOG REG_LINE TOKEN_LOG TOKEN_LINE [REPO]
  regload.py --table LOADS

REGISTRY_LOG is a distribution registry's log (its access log lines: `"GET /v2/... HTTP/1.1"
STATUS BYTES`), TOKEN_LOG tests/tokenserver.py's; only lines after REG_LINE and TOKEN_LINE
count, and with REPO only requests for that repository (/v2/REPO/..., tokens with its scope). Prints one JSON object:
manifests (GET and HEAD of /manifests/, any answer: the token challenges' 401 too),
manifests_ok (those answered 2xx), blobs (GET of /blobs/), other (/v2/ pings and the
rest), bytes (every response body), blob_bytes, tokens (requests to the token server), and
requests (all of them, token requests included).

With --table, LOADS holds measurements (lines SETUP|EVENT|JSON, as tests/e2e_cluster.sh records
them; a JSON with "pods": N measured N pods) and the output is a Markdown table of the registry's load per day for clusters of 100 and
10,000 nodes (WORKLOAD below), each setup's events priced at what they cost in the run.
"""
import json
import re
import sys

ACCESS = re.compile(r'"(GET|HEAD|POST|PUT|PATCH|DELETE) (/v2/[^ "]*) HTTP/[0-9.]+" (\d{3}) (\d+|-)')


# The cluster the table prices: 1,000 tenants and 10,000 images; each node runs 100 images, each
# used there by 3 tenants (so each tenant uses 30 images, and each image runs on N/100 nodes),
# and each (node, tenant, image) starts 10 pods a day (rollouts, restarts, rescheduling).
WORKLOAD = {"tenants": 1000, "images": 10000, "images_per_node": 100, "tenants_per_image": 3, "pods_per_day": 10}
# Each setup: which measured event prices a first pull on a node, another tenant's first pod of
# an image on the node, and each further pod.
SETUPS = [
    ("containerd alone, `AlwaysPullImages`", "containerd alone, AlwaysPullImages"),
    ("containerd alone, kubelet's KEP-2535 (`IfNotPresent`)", "containerd alone, kubelet KEP-2535"),
    ("pullgate, kubelet's KEP-2535 (`IfNotPresent`)", "pullgate"),
    ("pullgate, `imagePullPolicy: Always`", "pullgate Always"),
]


def table(path):
    m = {}
    with open(path) as f:
        for line in f:
            setup, event, js = line.rstrip("\n").split("|", 2)
            d = json.loads(js)
            n = d.get("pods", 1)  # a measurement over several pods: per pod
            m.setdefault((setup, event), {k: v / n for k, v in d.items() if k in ("requests", "bytes")})
    first_alone = m[("containerd alone, kubelet KEP-2535", "first pull on a node")]
    first_pg = m[("pullgate", "first pull on a node")]
    zero = {"requests": 0, "bytes": 0}
    cost = {  # setup -> (first pull, another tenant's first pod, each further pod)
        "containerd alone, AlwaysPullImages": (first_alone, m[("containerd alone, AlwaysPullImages", "every pod")],
                                               m[("containerd alone, AlwaysPullImages", "every pod")]),
        "containerd alone, kubelet KEP-2535": (first_alone, m[("containerd alone, kubelet KEP-2535", "another tenant, image on the node")],
                                               m[("containerd alone, kubelet KEP-2535", "same tenant, another pod")]),
        "pullgate": (first_pg, m[("pullgate", "another tenant, image on the node")], m[("pullgate", "same tenant, another pod")]),
        "pullgate Always": (first_pg, m[("pullgate", "every pod (Always), image and grant on the node")],
                            m[("pullgate", "every pod (Always), image and grant on the node")]),
    }
    w = WORKLOAD
    print("| setup | per first pull on a node | per other tenant's first pod there | per further pod "
          "| 100 nodes: requests / day | 100 nodes: bytes / day | 10,000 nodes: requests / day | 10,000 nodes: bytes / day |")
    print("|---|---|---|---|---|---|---|---|")
    for title, key in SETUPS:
        first, tenant, pod = cost[key]
        row = [title] + [f"{c['requests']:g} req, {c['bytes']:,.0f} B" for c in (first, tenant, pod)]
        for nodes in (100, 10000):
            firsts = nodes * w["images_per_node"]
            tenants = firsts * (w["tenants_per_image"] - 1)
            pods = firsts * w["tenants_per_image"] * w["pods_per_day"] - firsts - tenants
            req = firsts * first["requests"] + tenants * tenant["requests"] + pods * pod["requests"]
            byt = firsts * first["bytes"] + tenants * tenant["bytes"] + pods * pod["bytes"]
            row += [f"{req:,.0f}", f"{byt / 1e9:,.1f} GB"]
        print("| " + " | ".join(row) + " |")


def main():
    if sys.argv[1:2] == ["--table"]:
        table(sys.argv[2])
        return
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
