#!/usr/bin/env python3
"""Writes the images containerd's own integration tests (integration/client) pull, as
byte-for-byte reproducible OCI image layouts built from Debian's busybox-static, for
tests/e2e_containerd_suite.sh to push to its local registry under the names the tests use.

  mkctrdimages.py OUTDIR

prints one line per image: LAYOUT_DIR TAG REPOSITORY (the registry's repository path; the host
name is the test's, served by the local registry through the suite's CONNECT proxy).

Every image is an OCI index with several platforms (the tests pull some or all platforms of an
index and count the manifests). linux/amd64 is a real image: busybox with every applet, the
/etc/passwd and /etc/group of the busybox image the tests expect (users and groups such as
www-data, operator, nobody), /tmp, /proc, /sys, /dev and /run (a read-only root file system
needs them), /bin/bash (busybox's sh), a set-uid /usr/bin/passwd (a user-namespace test checks that
the bit survives), and more layers; the other platforms' manifests have a
small layer of their own (they are fetched, never run). Every layer names its image, so no two
images share a blob (a test that pulls some platforms of one image checks that the others'
content is absent).
"""
import gzip, hashlib, io, json, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mkimage import BUSYBOX, applets, blob, tar_bytes  # noqa: E402

PASSWD = """root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
bin:x:2:2:bin:/bin:/bin/false
sys:x:3:3:sys:/dev:/bin/false
sync:x:4:100:sync:/bin:/bin/sync
mail:x:8:8:mail:/var/spool/mail:/bin/false
www-data:x:33:33:www-data:/var/www:/bin/false
operator:x:37:37:Operator:/var:/bin/false
nobody:x:65534:65534:nobody:/home:/bin/false
"""
GROUP = """root:x:0:
daemon:x:1:
bin:x:2:
sys:x:3:
adm:x:4:
tty:x:5:
disk:x:6:
lp:x:7:
mail:x:8:
kmem:x:9:
wheel:x:10:root
cdrom:x:11:
dialout:x:18:
floppy:x:19:
video:x:28:
audio:x:29:
tape:x:32:
www-data:x:33:
operator:x:37:
utmp:x:43:
plugdev:x:46:
staff:x:50:
lock:x:54:
netdev:x:82:
users:x:100:
nogroup:x:65534:
"""

# The tests run `bash -c ...` in one image (2.x's TestUserNamespaces): busybox has no bash, and
# its sh runs those command lines.
BASH = b'#!/bin/sh\nexec /bin/sh "$@"\n'

# The tests run `nc -l -p 80` as the container's first process and stop it with SIGTERM,
# expecting exit status 143: busybox's nc installs no handler, and a PID namespace's first
# process ignores a signal it has no handler for. So /bin/nc is busybox's nc run by sh, which
# dies of SIGTERM for it (a bind refused still exits with nc's own status).
NC = b'#!/bin/sh\ntrap \'kill $p 2>/dev/null; exit 143\' TERM\nbusybox nc "$@" &\np=$!\nwait $p\n'

# (layout name, tag, repository path, the host the tests name it under, number of extra layers)
IMAGES = [
    ("busybox", "1.36", "containerd/busybox", "ghcr.io", 1),              # the tests' testImage
    ("alpine", "3.14.0", "containerd/alpine", "ghcr.io", 1),              # TestUserNamespaces
    ("volume-ownership", "2.1", "containerd/volume-ownership", "ghcr.io", 1),  # 2.x's TestUserNamespaces
    ("volume-copy-up", "2.1", "containerd/volume-copy-up", "ghcr.io", 3),  # testMultiLayeredImage (1.7)
    ("volume-copy-up-22", "2.2", "containerd/volume-copy-up", "ghcr.io", 3),  # (2.x)
    ("pause", "3.8", "pause", "registry.k8s.io", 0),                      # the image tests' pause (1.7)
    ("pause-36", "3.6", "pause", "registry.k8s.io", 0),                   # TestImagePullWithDistSourceLabel
    ("pause-310", "3.10", "pause", "registry.k8s.io", 0),                 # (2.1)
    ("pause-3102", "3.10.2", "pause", "registry.k8s.io", 0),              # (2.4)
    ("e2e-busybox", "1.29-2", "e2e-test-images/busybox", "registry.k8s.io", 1),  # TestImagePullSomePlatforms
]
PLATFORMS = [("amd64", None), ("arm64", "v8"), ("s390x", None), ("arm", "v7"), ("ppc64le", None)]


def gz(raw):
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, compresslevel=6) as g:
        g.write(raw)
    return buf.getvalue()


def write_json(out, obj):
    return blob(out, json.dumps(obj, sort_keys=True, separators=(",", ":")).encode())


def manifest(out, name, arch, variant, extra):
    note = f"{name} {arch}{'/' + variant if variant else ''}\n".encode()
    if arch == "amd64":
        with open(BUSYBOX, "rb") as f:
            bb = f.read()
        layers = [[("bin", "dir", None, 0o755), ("bin/busybox", "file", bb, 0o755)]
                  + [("bin/" + x, "sym", "busybox", 0o777) for x in applets(BUSYBOX) if x != "nc"]
                  + [("bin/nc", "file", NC, 0o755)]
                  + [("etc", "dir", None, 0o755), ("etc/passwd", "file", PASSWD.encode(), 0o644),
                     ("etc/group", "file", GROUP.encode(), 0o644), ("etc/image", "file", note, 0o644),
                     ("tmp", "dir", None, 0o1777), ("root", "dir", None, 0o700), ("home", "dir", None, 0o755),
                     ("var", "dir", None, 0o755), ("var/www", "dir", None, 0o755),
                     ("proc", "dir", None, 0o755), ("sys", "dir", None, 0o755), ("dev", "dir", None, 0o755), ("run", "dir", None, 0o755),
                     ("bin/bash", "file", BASH, 0o755), ("usr", "dir", None, 0o755), ("usr/bin", "dir", None, 0o755),
                     ("usr/bin/passwd", "file", b"#!/bin/sh\necho passwd\n", 0o4755)]]
    else:
        layers = [[("etc", "dir", None, 0o755), ("etc/image", "file", note, 0o644)]]
    for i in range(extra):
        layers.append([("layers", "dir", None, 0o755), (f"layers/{i}", "file", note + f"layer {i}\n".encode(), 0o644)])
    descs, diff_ids = [], []
    for entries in layers:
        raw = tar_bytes(entries)
        diff_ids.append("sha256:" + hashlib.sha256(raw).hexdigest())
        d, n = blob(out, gz(raw))
        descs.append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": d, "size": n})
    plat = {"architecture": arch, "os": "linux"}
    if variant:
        plat["variant"] = variant
    config = dict(plat, created="2026-01-01T00:00:00Z",
                  config={"Cmd": ["sh"], "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},
                  rootfs={"type": "layers", "diff_ids": diff_ids},
                  history=[{"created": "2026-01-01T00:00:00Z", "created_by": "pullgate tests/mkctrdimages.py"} for _ in layers])
    cd, cn = write_json(out, config)
    md, mn = write_json(out, {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                              "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cn},
                              "layers": descs})
    return {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": mn, "platform": plat}


def main():
    root = sys.argv[1]
    for name, tag, repo, host, extra in IMAGES:
        out = os.path.join(root, name)
        os.makedirs(os.path.join(out, "blobs", "sha256"), exist_ok=True)
        entries = [manifest(out, f"{host}/{repo}:{tag}", a, v, extra) for a, v in PLATFORMS]
        idx = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": entries}
        d, n = write_json(out, idx)
        with open(os.path.join(out, "index.json"), "w") as f:
            json.dump({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.index.v1+json", "digest": d, "size": n,
                                                          "annotations": {"org.opencontainers.image.ref.name": tag}}]}, f, sort_keys=True)
        with open(os.path.join(out, "oci-layout"), "w") as f:
            json.dump({"imageLayoutVersion": "1.0.0"}, f)
        print(out, tag, f"{host}/{repo}")


if __name__ == "__main__":
    main()
