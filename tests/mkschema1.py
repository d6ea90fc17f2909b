#!/usr/bin/env python3
"""Writes a Docker schema 1 image (signed, as `application/vnd.docker.distribution.manifest.v1+prettyjws`)
from an OCI layout tests/mkimage.py wrote: the same gzip layers, their history from the config.

  mkschema1.py LAYOUT_DIR OUT_DIR NAME TAG

OUT_DIR/manifest.json is the manifest as a registry serves it (a JWS in Docker's "pretty" form:
the payload, with a `signatures` array before its closing brace naming, in `protected`, how long
the payload's head is and its tail); OUT_DIR/blobs/<hex> are its layers (tests/evilregistry.py
--blobs serves them). containerd 1.x checks neither signature nor key: it cuts the signatures
out by `formatLength` and `formatTail`, as Docker's libtrust format says, and converts the rest."""
import base64, hashlib, json, os, shutil, sys


def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def main():
    layout, out, name, tag = sys.argv[1:5]
    blob = lambda d: open(os.path.join(layout, "blobs", "sha256", d.split(":", 1)[1]), "rb").read()
    idx = json.load(open(os.path.join(layout, "index.json")))
    m = json.loads(blob(idx["manifests"][0]["digest"]))
    cfg = json.loads(blob(m["config"]["digest"]))
    os.makedirs(os.path.join(out, "blobs"), exist_ok=True)
    layers = [l["digest"] for l in m["layers"]]
    for d in layers:
        shutil.copy(os.path.join(layout, "blobs", "sha256", d.split(":", 1)[1]), os.path.join(out, "blobs", d.split(":", 1)[1]))
    # Top layer first, as schema 1 lists them; each history entry a v1 image JSON, the top one
    # carrying the image's config.
    ids = [hashlib.sha256(f"{name}:{tag}:{i}".encode()).hexdigest() for i in range(len(layers))]
    history = []
    for i in reversed(range(len(layers))):
        v1 = {"id": ids[i], "created": "2026-01-01T00:00:00Z"}
        if i > 0:
            v1["parent"] = ids[i - 1]
        if i == len(layers) - 1:
            v1.update({"architecture": cfg.get("architecture", "amd64"), "os": cfg.get("os", "linux"), "config": cfg.get("config", {})})
        history.append({"v1Compatibility": json.dumps(v1, separators=(",", ":"))})
    manifest = {"schemaVersion": 1, "name": name, "tag": tag, "architecture": cfg.get("architecture", "amd64"),
                "fsLayers": [{"blobSum": d} for d in reversed(layers)], "history": history}
    payload = json.dumps(manifest, indent=3).encode()
    head, tail = payload[:-2], payload[-2:]   # the tail is "\n}"
    protected = b64url(json.dumps({"formatLength": len(head), "formatTail": b64url(tail), "time": "2026-01-01T00:00:00Z"}).encode())
    sig = {"header": {"alg": "ES256"}, "signature": b64url(b"not checked"), "protected": protected}
    signed = head + b',\n   "signatures": [\n      ' + json.dumps(sig).encode() + b"\n   ]" + tail
    open(os.path.join(out, "manifest.json"), "wb").write(signed)
    print("sha256:" + hashlib.sha256(signed).hexdigest())


if __name__ == "__main__":
    main()
