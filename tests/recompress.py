#!/usr/bin/env python3
"""Copies an OCI image layout, recompressing every layer as a gzip member whose header carries
TEXT (its FNAME and FCOMMENT fields, which every decompressor skips): the same layer IDs, other
blob digests, and bytes of the blobs that hold TEXT. For the test that a public layer's other
compressions are not public.

  recompress.py SRC DST TEXT    (prints the new layer digests)
"""
import hashlib, json, os, shutil, struct, sys, zlib, gzip

src, dst, text = sys.argv[1:4]
shutil.copytree(src, dst)
path = lambda d: os.path.join(dst, "blobs", "sha256", d.split(":", 1)[1])


def put(data):
    h = hashlib.sha256(data).hexdigest()
    with open(os.path.join(dst, "blobs", "sha256", h), "wb") as f:
        f.write(data)
    return "sha256:" + h


index = json.load(open(os.path.join(dst, "index.json")))
entry = index["manifests"][0]
manifest = json.load(open(path(entry["digest"])))
for layer in manifest["layers"]:
    tar = gzip.decompress(open(path(layer["digest"]), "rb").read())
    header = b"\x1f\x8b\x08" + bytes([0x08 | 0x10]) + struct.pack("<I", 0) + b"\x00\xff" + text.encode() + b"\x00" + text.encode() + b"\x00"
    deflate = zlib.compressobj(6, zlib.DEFLATED, -15)
    blob = header + deflate.compress(tar) + deflate.flush() + struct.pack("<II", zlib.crc32(tar) & 0xFFFFFFFF, len(tar) & 0xFFFFFFFF)
    assert gzip.decompress(blob) == tar
    layer["digest"], layer["size"] = put(blob), len(blob)
raw = json.dumps(manifest).encode()
entry["digest"], entry["size"] = put(raw), len(raw)
json.dump(index, open(os.path.join(dst, "index.json"), "w"))
print(" ".join(l["digest"] for l in manifest["layers"]))
