#!/usr/bin/env python3
"""Writes an OCI layout of a checkpoint image as containerd 2.x's CRI restores one: a manifest
annotated org.criu.checkpoint.container.name, one layer holding the checkpoint's metadata
(config.dump naming the image to restore onto and the name to file it under, spec.dump,
status.dump). With --escaped, the annotation's key is written with a JSON escape
(`checkpoin\\u0074`): the same key once decoded, which is how containerd reads it.
Byte-for-byte reproducible for the same arguments."""
import argparse
import gzip
import hashlib
import io
import json
import os
import tarfile

KEY = "org.criu.checkpoint.container.name"


def blob(root, data):
    h = hashlib.sha256(data).hexdigest()
    with open(os.path.join(root, "blobs", "sha256", h), "wb") as f:
        f.write(data)
    return "sha256:" + h, len(data)


def layer(files):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            t.addfile(info, io.BytesIO(data))
    tar = raw.getvalue()
    return tar, gzip.compress(tar, mtime=0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--tag", default="v1")
    ap.add_argument("--rootfs-ref", required=True, help="the image to restore onto (NAME@DIGEST)")
    ap.add_argument("--rootfs-name", required=True, help="the name containerd files it under")
    ap.add_argument("--escaped", action="store_true", help="write the annotation key with a JSON escape")
    a = ap.parse_args()
    os.makedirs(os.path.join(a.dir, "blobs", "sha256"), exist_ok=True)
    when = "2026-01-01T00:00:00Z"
    config_dump = {"id": "restored", "name": "restored", "rootfsImage": a.rootfs_name, "rootfsImageRef": a.rootfs_ref,
                   "rootfsImageName": a.rootfs_name, "runtime": "io.containerd.runc.v2", "createdTime": when,
                   "checkpointedTime": when, "restoredTime": "0001-01-01T00:00:00Z", "restored": False}
    status_dump = {"annotations": {"restored-from": "checkpoint"}, "labels": {"restored-from": "checkpoint"}}
    tar, gz = layer({"config.dump": json.dumps(config_dump).encode(), "spec.dump": b"{}",
                     "status.dump": json.dumps(status_dump).encode()})
    layer_digest, layer_size = blob(a.dir, gz)
    config = {"architecture": "amd64", "os": "linux", "config": {"Labels": {"checkpoint-of": a.rootfs_name}},
              "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(tar).hexdigest()]}}
    config_digest, config_size = blob(a.dir, json.dumps(config, sort_keys=True).encode())
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config_size},
                "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer_digest, "size": layer_size}],
                "annotations": {KEY: "restored"}}
    text = json.dumps(manifest, sort_keys=True)
    if a.escaped:
        text = text.replace('"org.criu.checkpoint.', '"org.criu.checkpoin\\u0074.')
        assert json.loads(text) == manifest
    manifest_digest, manifest_size = blob(a.dir, text.encode())
    index = {"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest,
                                                 "size": manifest_size, "annotations": {"org.opencontainers.image.ref.name": a.tag}}]}
    with open(os.path.join(a.dir, "index.json"), "w") as f:
        json.dump(index, f)
    with open(os.path.join(a.dir, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    print(manifest_digest)


if __name__ == "__main__":
    main()
