#!/usr/bin/env python3
"""Writes a byte-for-byte reproducible OCI image layout for pullgate's tests and benchmarks.

  mkimage.py DIR --tag TAG [--message TEXT] [--extra-layers N --layer-mb MB --seed S]
             [--base-note TEXT] [--claim-diff-ids D1,D2,...] [--zero-layer-gib G]

The image has busybox (Debian's busybox-static) in its base layer, a layer that a later layer
whites out, and a top layer with /msg. Its command prints /msg and lists /etc/pullgate-test:
  <TEXT>
  two
--extra-layers adds N layers of MB megabytes of seeded random (incompressible) data each, for
benchmarks. The same arguments always give the same digests.
--base-note adds /etc/base-note (TEXT) to the base layer, so that the image's base layer (and
every chain) differs from every other image's (by default all images share the busybox base).
--claim-diff-ids writes the given diffIDs into the config's rootfs.diff_ids instead of the
real ones (an attacker's forged config: the manifest still lists this image's own layer blobs);
it must name one diffID per layer.
--zero-layer-gib adds, below the /msg layer, a decompression bomb: a tar holding one file /zeros
of G GiB of zeros, compressed as a zstd frame written by hand from RLE blocks (4 bytes per
128 KiB, about 32000:1; gzip cannot pass about 1030:1), media type tar+zstd. Its diffID is the
real one, hashed while the tar streams by (never held in memory).
--user sets the config's User (a uid, a name, either with ":group").
--file PATH=SRC[:MODE] (repeatable) adds the host file SRC at PATH in the top layer (with /msg),
its parent directories too; MODE is octal (default 0644; 4755 makes a setuid-root program).
Without these options the output is unchanged.
"""
import subprocess
import argparse, gzip, hashlib, io, json, os, random, tarfile

BUSYBOX = "/bin/busybox"
APPLETS = ["sh", "cat", "ls", "echo", "true", "sleep"]


def applets(busybox):
    """Every applet this busybox has (sorted, so the layer is reproducible), busybox itself left out."""
    out = subprocess.run([busybox, "--list"], check=True, capture_output=True, text=True).stdout.split()
    return sorted(set(out) - {"busybox"})


def tar_bytes(entries):
    """entries: list of (path, kind, data_or_target, mode). Deterministic tar."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for path, kind, data, mode in entries:
            ti = tarfile.TarInfo(path)
            ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname, ti.mode = 0, 0, 0, "", "", mode
            if kind == "dir":
                ti.type = tarfile.DIRTYPE
                tf.addfile(ti)
            elif kind == "sym":
                ti.type, ti.linkname = tarfile.SYMTYPE, data
                tf.addfile(ti)
            else:
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def zero_layer(gib):
    """(compressed bytes, diffID) of a tar with one file /zeros of `gib` GiB of zeros, as a
    zstd frame of one raw block (the tar header) and RLE blocks of zeros (the file, the tar's
    end-of-archive blocks and its padding to tarfile's record size)."""
    ti = tarfile.TarInfo("zeros")
    ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname, ti.mode = 0, 0, 0, "", "", 0o644
    ti.size = int(gib * (1 << 30)) // 512 * 512
    head = ti.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    nzero = ti.size + 2 * tarfile.BLOCKSIZE
    nzero += -(len(head) + nzero) % tarfile.RECORDSIZE
    h = hashlib.sha256(head)
    chunk = bytes(1 << 20)
    left = nzero
    while left:
        n = min(left, len(chunk))
        h.update(chunk if n == len(chunk) else chunk[:n])
        left -= n
    block = 128 << 10  # the largest block; also the window (descriptor 0x38: 2**17)
    assert len(head) <= block
    frame = bytearray(b"\x28\xb5\x2f\xfd\x00\x38")  # magic; no content size, no checksum
    frame += (len(head) << 3).to_bytes(3, "little") + head  # raw block, not last
    full, rest = divmod(nzero, block)
    sizes = [block] * full + ([rest] if rest else [])
    for i, n in enumerate(sizes):
        last = 1 if i == len(sizes) - 1 else 0
        frame += ((n << 3) | (1 << 1) | last).to_bytes(3, "little") + b"\x00"  # RLE block of 0x00
    return bytes(frame), "sha256:" + h.hexdigest()


def blob(out, data):
    d = hashlib.sha256(data).hexdigest()
    with open(os.path.join(out, "blobs", "sha256", d), "wb") as f:
        f.write(data)
    return "sha256:" + d, len(data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--tag", default="latest")
    ap.add_argument("--message", default="hello from pullgate")
    ap.add_argument("--extra-layers", type=int, default=0)
    ap.add_argument("--layer-mb", type=float, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cmd", help="the image's command, a shell command line (default: print /msg)")
    ap.add_argument("--base-note", help="add /etc/base-note with this text to the base layer")
    ap.add_argument("--claim-diff-ids", help="comma-separated diffIDs to write into the config instead of the real ones")
    ap.add_argument("--zero-layer-gib", type=float,
                    help="add a decompression bomb layer: one file of this many GiB of zeros (zstd)")
    ap.add_argument("--fixed-layers-note", default="",
                    help="append this text to the files of the two fixed layers after the base, so that"
                         " the image shares no layer with images built without it (or with another note)")
    ap.add_argument("--all-applets", action="store_true",
                    help="link every applet busybox lists into /bin (critest runs top, ipcs, hostname, ...)")
    ap.add_argument("--nested-index", action="store_true",
                    help="tag an image index (one linux/amd64 entry) instead of the manifest")
    ap.add_argument("--user", help="the config's User")
    ap.add_argument("--file", action="append", default=[], metavar="PATH=SRC[:MODE]",
                    help="add the host file SRC at PATH (octal MODE, default 644) to the top layer")
    a = ap.parse_args()

    with open(BUSYBOX, "rb") as f:
        bb = f.read()
    layers = [
        [("bin", "dir", None, 0o755), ("bin/busybox", "file", bb, 0o755)]
        + [("bin/" + x, "sym", "busybox", 0o777) for x in (applets(BUSYBOX) if a.all_applets else APPLETS)]
        + [("etc", "dir", None, 0o755), ("tmp", "dir", None, 0o1777)]
        + ([("etc/base-note", "file", (a.base_note + "\n").encode(), 0o644)] if a.base_note is not None else []),
        [("etc/pullgate-test", "dir", None, 0o755), ("etc/pullgate-test/one", "file", b"layer two\n" + a.fixed_layers_note.encode(), 0o644)],
        [("etc/pullgate-test", "dir", None, 0o755), ("etc/pullgate-test/.wh.one", "file", b"", 0o644),
         ("etc/pullgate-test/two", "file", b"layer three\n" + a.fixed_layers_note.encode(), 0o644)],
    ]
    rng = random.Random(a.seed)
    for i in range(a.extra_layers):
        size = int(a.layer_mb * 1024 * 1024)
        layers.append([("data", "dir", None, 0o755), (f"data/blob-{i}", "file", rng.randbytes(size), 0o644)])
    if a.zero_layer_gib is not None:
        layers.append(None)  # the bomb, built by zero_layer
    top = [("msg", "file", (a.message + "\n").encode(), 0o644)]
    dirs = set()
    for spec in a.file:
        path, _, src = spec.partition("=")
        src, _, mode = src.partition(":")
        path = path.strip("/")
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            if d not in dirs:
                dirs.add(d)
                top.append((d, "dir", None, 0o1777 if d == "tmp" else 0o755))
        with open(src, "rb") as f:
            top.append((path, "file", f.read(), int(mode or "644", 8)))
    layers.append(top)

    out = a.dir
    os.makedirs(os.path.join(out, "blobs", "sha256"), exist_ok=True)
    diff_ids, descs = [], []
    for entries in layers:
        if entries is None:
            z, diff_id = zero_layer(a.zero_layer_gib)
            diff_ids.append(diff_id)
            d, n = blob(out, z)
            descs.append({"mediaType": "application/vnd.oci.image.layer.v1.tar+zstd", "digest": d, "size": n})
            continue
        raw = tar_bytes(entries)
        diff_ids.append("sha256:" + hashlib.sha256(raw).hexdigest())
        zbuf = io.BytesIO()
        with gzip.GzipFile(fileobj=zbuf, mode="wb", mtime=0, compresslevel=1 if len(raw) > 1 << 20 else 6) as g:
            g.write(raw)
        d, n = blob(out, zbuf.getvalue())
        descs.append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": d, "size": n})
    if a.claim_diff_ids is not None:
        claimed = [x.strip() for x in a.claim_diff_ids.split(",") if x.strip()]
        if len(claimed) != len(diff_ids):
            ap.error(f"--claim-diff-ids names {len(claimed)} diffIDs for {len(diff_ids)} layers")
        diff_ids = claimed
    config = {
        "architecture": "amd64", "os": "linux", "created": "2026-01-01T00:00:00Z",
        "config": {"Cmd": ["/bin/sh", "-c", a.cmd or "cat /msg; ls /etc/pullgate-test"], "Env": ["PATH=/bin"],
                   **({"User": a.user} if a.user is not None else {})},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [{"created": "2026-01-01T00:00:00Z", "created_by": "pullgate tests/mkimage.py"} for _ in layers],
    }
    cd, cn = blob(out, json.dumps(config, sort_keys=True, separators=(",", ":")).encode())
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cn},
                "layers": descs}
    md, mn = blob(out, json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode())
    entry = {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": mn,
             "platform": {"architecture": "amd64", "os": "linux"}}
    if a.nested_index:
        nested = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [entry]}
        nd, nn = blob(out, json.dumps(nested, sort_keys=True, separators=(",", ":")).encode())
        entry = {"mediaType": "application/vnd.oci.image.index.v1+json", "digest": nd, "size": nn}
    entry["annotations"] = {"org.opencontainers.image.ref.name": a.tag}
    index = {"schemaVersion": 2, "manifests": [entry]}
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump(index, f, sort_keys=True)
    with open(os.path.join(out, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    print(md)


if __name__ == "__main__":
    main()
