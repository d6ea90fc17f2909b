#!/usr/bin/env python3
"""Writes the differential test's corpus: one directory per case, `root.json` (the image
record's target descriptor) and `blobs/sha256/<hex>` (its documents), read by both readers
(pullgate's examples/docread.rs and tests/difftest/go's, built from containerd's own code).

  corpus.py OUT [--random N] [--seed S] [--layouts DIR...]

Cases: hand-written attacks on one reading (case variants and Unicode folding of every field
either reader looks at, repeated keys, JSON escapes in keys and values, nulls, odd numbers,
deep nesting, media types that disagree, platform aliases, checkpoint annotations); N random
mutations of those (seeded: the same corpus every run); and every OCI layout under each
--layouts DIR (the images the end-to-end tests pushed). --valid-list FILE names the cases that
are images as registries serve them (the VALID hand-written ones and every pushed layout a test
did not mark hostile): pullgate must read each wherever containerd does. Every case is written as raw bytes:
nothing here re-serialises a document a case spells on purpose."""
import argparse, hashlib, json, os, random, re

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


def sha(b):
    return "sha256:" + hashlib.sha256(b).hexdigest()


def fake(n):
    return "sha256:" + hashlib.sha256(f"layer-{n}".encode()).hexdigest()


# Hand-written cases that are images as registries serve them: pullgate must read each wherever
# containerd does (compare.py fails on a refusal of one; the pushed layouts count so too).
VALID = {"plain-manifest", "plain-manifest-undeclared", "plain-index", "docker-list", "docker-list-right-types",
         "docker-manifest", "arm64-only", "escaped-digest-values", "escaped-mediatype-value"}


class Corpus:
    def __init__(self, out):
        self.out, self.n, self.valid = out, 0, []

    def add(self, name, root, root_type, *blobs, size=None, valid=None):
        """A case: the target document's bytes, its declared media type, the other blobs; valid
        (default: named in VALID) when it is an image pullgate must read wherever containerd does."""
        self.n += 1
        d = os.path.join(self.out, f"{self.n:05d}-{re.sub('[^A-Za-z0-9._-]+', '_', name)[:80]}")
        if name in VALID if valid is None else valid:
            self.valid.append(os.path.basename(d))
        os.makedirs(os.path.join(d, "blobs", "sha256"))
        for b in (root,) + blobs:
            with open(os.path.join(d, "blobs", "sha256", sha(b)[7:]), "wb") as f:
                f.write(b)
        with open(os.path.join(d, "root.json"), "w") as f:
            json.dump({"mediaType": root_type, "digest": sha(root), "size": len(root) if size is None else size}, f)


def config_doc(diff_ids, arch="amd64", os_="linux", extra=""):
    ids = ",".join(f'"{d}"' for d in diff_ids)
    return f'{{"architecture":"{arch}","os":"{os_}","config":{{"Cmd":["/bin/sh"]}},"rootfs":{{"type":"layers","diff_ids":[{ids}]}}{extra}}}'.encode()


def desc(media, digest, size, extra=""):
    return f'{{"mediaType":"{media}","digest":"{digest}","size":{size}{extra}}}'


def manifest_doc(cfg, layers, media=OCI_MANIFEST, extra="", layer_media=LAYER):
    ls = ",".join(desc(layer_media, l, 100 + i) for i, l in enumerate(layers))
    mt = f'"mediaType":"{media}",' if media else ""
    return f'{{"schemaVersion":2,{mt}"config":{desc(OCI_CONFIG, sha(cfg), len(cfg))},"layers":[{ls}]{extra}}}'.encode()


def entry(m, platform, media=OCI_MANIFEST, extra=""):
    p = "" if platform is None else f',"platform":{platform}'
    return desc(media, sha(m), len(m), p + extra)


def plat(arch, os_="linux", variant=None):
    v = "" if variant is None else f',"variant":"{variant}"'
    return f'{{"architecture":"{arch}","os":"{os_}"{v}}}'


def index_doc(entries, media=OCI_INDEX, extra=""):
    mt = f'"mediaType":"{media}",' if media else ""
    return f'{{"schemaVersion":2,{mt}"manifests":[{",".join(entries)}]{extra}}}'.encode()


def base():
    c1 = config_doc([fake(1), fake(2)])
    m1 = manifest_doc(c1, [fake(11), fake(12)])
    c2 = config_doc([fake(3)], arch="arm64")
    m2 = manifest_doc(c2, [fake(13)])
    return c1, m1, c2, m2


def hand_written(cp):
    c1, m1, c2, m2 = base()
    cp.add("plain-manifest", m1, OCI_MANIFEST, c1)
    cp.add("plain-manifest-undeclared", m1, "", c1)
    idx = index_doc([entry(m1, plat("amd64")), entry(m2, plat("arm64"))])
    cp.add("plain-index", idx, OCI_INDEX, m1, c1, m2, c2)
    dm = manifest_doc(c1, [fake(11), fake(12)], DOCKER_MANIFEST)
    dm2 = manifest_doc(c2, [fake(13)], DOCKER_MANIFEST)
    cp.add("docker-list", index_doc([entry(dm, plat("amd64"), DOCKER_MANIFEST), entry(dm2, plat("arm64"), DOCKER_MANIFEST)], DOCKER_LIST),
           DOCKER_LIST, dm, c1, dm2, c2)
    cp.add("docker-list-right-types", index_doc([entry(dm, plat("amd64"), DOCKER_MANIFEST)], DOCKER_LIST), DOCKER_LIST, dm, c1)
    cp.add("docker-manifest", dm, DOCKER_MANIFEST, c1)
    # Struct fields spelled otherwise: case, Unicode folding (ſ is s, K is k to Go), escapes.
    other = desc(OCI_CONFIG, sha(c2), len(c2))
    for key in ["Config", "CONFIG", "config", "\\u0063onfig", "con\\u0066ig"]:
        cp.add(f"manifest-second-config-{key}", manifest_doc(c1, [fake(11)], extra=f',"{key}":{other}'), OCI_MANIFEST, c1, c2)
    for key in ["Layers", "layerſ", "layer\\u017f", "LAYERS", "l\\u0061yers"]:
        cp.add(f"manifest-second-layers-{key}", manifest_doc(c1, [fake(11)], extra=f',"{key}":[{desc(LAYER, fake(99), 1)}]'), OCI_MANIFEST, c1)
    for key in ["Digest", "DIGEST", "digeſt", "dig\\u0065st"]:
        m = manifest_doc(c1, [fake(11)]).replace(b'"layers":[{', f'"layers":[{{"{key}":"{fake(98)}",'.encode())
        cp.add(f"layer-second-digest-{key}", m, OCI_MANIFEST, c1)
    for key in ["MediaType", "mediatype", "mediaTypes"]:
        cp.add(f"manifest-second-mediatype-{key}", manifest_doc(c1, [fake(11)], extra=f',"{key}":"{OCI_INDEX}"'), OCI_MANIFEST, c1)
    for key in ["Manifests", "manifeſts", "MANIFESTS"]:
        cp.add(f"index-second-manifests-{key}", index_doc([entry(m1, plat("amd64"))], extra=f',"{key}":[{entry(m2, plat("amd64"))}]'), OCI_INDEX, m1, c1, m2, c2)
    for key in ["Platform", "platforM", "PLATFORM"]:
        e = entry(m1, plat("arm64"), extra=f',"{key}":{plat("amd64")}')
        cp.add(f"entry-second-platform-{key}", index_doc([e]), OCI_INDEX, m1, c1)
    for key in ["Architecture", "ARCHITECTURE", "architecture"]:
        p = plat("arm64")[:-1] + f',"{key}":"amd64"}}'
        cp.add(f"platform-second-arch-{key}", index_doc([entry(m1, p)]), OCI_INDEX, m1, c1)
    for key in ["OS", "Os", "os", "\\u006fs"]:
        p = plat("amd64", "windows")[:-1] + f',"{key}":"linux"}}'
        cp.add(f"platform-second-os-{key}", index_doc([entry(m1, p)]), OCI_INDEX, m1, c1)
    for key in ["RootFS", "Rootfs", "rootfs", "rootfſ", "ROOTFS"]:
        c = config_doc([fake(1)], extra=f',"{key}":{{"type":"layers","diff_ids":["{fake(7)}"]}}')
        cp.add(f"config-second-rootfs-{key}", manifest_doc(c, [fake(11)]), OCI_MANIFEST, c)
    for key in ["Diff_IDs", "diff_ids", "DIFF_IDS", "diff_idſ", "diff_id\\u0073"]:
        c = config_doc([fake(1)])[:-2] + f',"{key}":["{fake(8)}"]}}}}'.encode()
        cp.add(f"config-second-diffids-{key}", manifest_doc(c, [fake(11)]), OCI_MANIFEST, c)
    # Escapes in values: the same digest, written with escapes.
    esc = manifest_doc(c1, [fake(11)]).replace(b'"digest":"sha256:', b'"digest":"sha\\u0032\\u003556:')
    cp.add("escaped-digest-values", esc, OCI_MANIFEST, c1)
    esc = manifest_doc(c1, [fake(11)]).replace(b'"mediaType":"application/vnd.oci.image.manifest.v1+json"', b'"mediaType":"application\\/vnd.oci.image.manifest.v1\\u002bjson"')
    cp.add("escaped-mediatype-value", esc, OCI_MANIFEST, c1)
    cp.add("escaped-arch-value", index_doc([entry(m1, plat("amd64").replace("amd64", "\\u0061md64"))]), OCI_INDEX, m1, c1)
    # Nulls, odd numbers, unknown and deep fields.
    for extra in [',"annotations":null', ',"subject":null', ',"artifactType":"x"', ',"unknown":' + "[" * 200 + "]" * 200,
                  ',"annotations":{"a":"1","a":"2"}', ',"annotations":{"a":1}', ',"annotations":{"a":null}']:
        cp.add(f"manifest-extra-{extra[:30]}", manifest_doc(c1, [fake(11)], extra=extra), OCI_MANIFEST, c1)
    for size in ["1e3", "1.5", "-1", "18446744073709551616", "1e400", "null", '"1"', "01"]:
        m = manifest_doc(c1, [fake(11)]).replace(b'"size":100', f'"size":{size}'.encode())
        cp.add(f"layer-size-{size}", m, OCI_MANIFEST, c1)
    for body in [b'{"schemaVersion":2,"config":null,"layers":null}', b'{"schemaVersion":2}', b'{}', b'null', b'[]',
                 manifest_doc(c1, [fake(11)]) + b" x", b"\xef\xbb\xbf" + manifest_doc(c1, [fake(11)]),
                 manifest_doc(c1, [fake(11)]).replace(b'"layers"', b'"layers" /* c */'),
                 manifest_doc(c1, [fake(11)], extra=',"x":"\xff"'), manifest_doc(c1, [fake(11)], extra=',"x":"\\ud800"'),
                 manifest_doc(c1, [fake(11)], extra=',"\\ud800":"lone"'), manifest_doc(c1, [fake(11)], extra=',"a\\u0000":1')]:
        cp.add("odd-document", body, OCI_MANIFEST, c1)
    cp.add("config-diffids-null", manifest_doc(config_doc([])[:-2] + b'null]}}', [fake(11)]), OCI_MANIFEST)
    cn = config_doc([]).replace(b'"diff_ids":[]', b'"diff_ids":null')
    cp.add("config-diffids-null2", manifest_doc(cn, [fake(11)]), OCI_MANIFEST, cn)
    cx = config_doc(["not-a-digest"])
    cp.add("config-diffid-not-digest", manifest_doc(cx, [fake(11)]), OCI_MANIFEST, cx)
    # Media types: declared against inner, kinds mixed.
    cp.add("manifest-served-as-index", m1, OCI_INDEX, c1)
    cp.add("index-served-as-manifest", idx, OCI_MANIFEST, m1, c1, m2, c2)
    cp.add("index-undeclared-no-type", index_doc([entry(m1, plat("amd64"))], media=""), "", m1, c1)
    cp.add("manifest-with-manifests", manifest_doc(c1, [fake(11)], extra=f',"manifests":[{entry(m2, plat("amd64"))}]'), OCI_MANIFEST, c1, m2, c2)
    cp.add("index-with-config", index_doc([entry(m1, plat("amd64"))], extra=f',"config":{desc(OCI_CONFIG, sha(c2), len(c2))}'), OCI_INDEX, m1, c1, c2)
    cp.add("octet-stream", m1, "application/octet-stream", c1)
    cp.add("json", m1, "application/json", c1)
    cp.add("entry-type-mismatch", index_doc([entry(m1, plat("amd64"), DOCKER_MANIFEST)]), OCI_INDEX, m1, c1)
    # Platforms as containerd matches them.
    for arch, variant in [("x86_64", None), ("X86_64", None), ("AMD64", None), ("amd64", "v1"), ("amd64", "v2"), ("amd64", "v3"),
                          ("x86-64", None), ("386", None), ("i386", None), ("", None), ("amd64 ", None), ("amd64", "")]:
        cp.add(f"arch-{arch}-{variant}", index_doc([entry(m1, plat(arch, variant=variant))]), OCI_INDEX, m1, c1)
    for os_ in ["Linux", "LINUX", "linux ", "windows", ""]:
        cp.add(f"os-{os_}", index_doc([entry(m1, plat("amd64", os_))]), OCI_INDEX, m1, c1)
    cp.add("two-for-one-platform", index_doc([entry(m1, plat("x86_64")), entry(m2, plat("amd64"))]), OCI_INDEX, m1, c1, m2, c2)
    cp.add("two-variants", index_doc([entry(m2, plat("amd64", variant="v3")), entry(m1, plat("amd64"))]), OCI_INDEX, m1, c1, m2, c2)
    cp.add("no-platform-entries", index_doc([entry(m1, None), entry(m2, None)]), OCI_INDEX, m1, c1, m2, c2)
    cp.add("no-platform-and-exact", index_doc([entry(m2, None), entry(m1, plat("amd64"))]), OCI_INDEX, m1, c1, m2, c2)
    cp.add("arm64-only", index_doc([entry(m2, plat("arm64"))]), OCI_INDEX, m2, c2)
    cp.add("nested-index", index_doc([entry(idx, plat("amd64"), OCI_INDEX)]), OCI_INDEX, idx, m1, c1, m2, c2)
    cp.add("empty-index", index_doc([]), OCI_INDEX)
    # OS features (containerd 2.4 passes over such an entry), arm64 variants, schema 1, sizes.
    feat = plat("amd64")[:-1] + ',"os.features":["win32k"]}'
    cp.add("osfeatures-then-386", index_doc([entry(m1, feat), entry(m2, plat("386"))]), OCI_INDEX, m1, c1, m2, c2)
    cp.add("osfeatures-then-noplatform", index_doc([entry(m1, feat), entry(m2, None)]), OCI_INDEX, m1, c1, m2, c2)
    cp.add("osfeatures-only", index_doc([entry(m1, feat)]), OCI_INDEX, m1, c1)
    cp.add("osfeatures-empty", index_doc([entry(m1, plat("amd64")[:-1] + ',"os.features":[]}')]), OCI_INDEX, m1, c1)
    for odd in ['5', '"win32k"', '[1]', 'null', '{}']:
        cp.add(f"osfeatures-{odd}", index_doc([entry(m1, plat("amd64")[:-1] + f',"os.features":{odd}}}')]), OCI_INDEX, m1, c1)
        cp.add(f"osversion-{odd}", index_doc([entry(m1, plat("amd64")[:-1] + f',"os.version":{odd}}}')]), OCI_INDEX, m1, c1)
    cp.add("osfeatures-camel", index_doc([entry(m1, plat("amd64")[:-1] + ',"osFeatures":["x"]}'), entry(m2, plat("386"))]), OCI_INDEX, m1, c1, m2, c2)
    for v in ["v8.0", "v8", "8", "V8", "v9", None]:
        cp.add(f"arm64-{v}-first", index_doc([entry(m2, plat("arm64", variant=v)), entry(m1, plat("arm64"))]), OCI_INDEX, m1, c1, m2, c2)
    cp.add("arm-variants", index_doc([entry(m2, plat("arm", variant="v6")), entry(m1, plat("arm", variant="v7"))]), OCI_INDEX, m1, c1, m2, c2)
    # containerd's fallbacks (386 on amd64, arm on arm64), before or after a platform-less entry:
    # the CRI front's candidates must hold the one containerd chooses.
    cp.add("386-then-noplatform", index_doc([entry(m2, plat("386")), entry(m1, None)]), OCI_INDEX, m1, c1, m2, c2)
    cp.add("noplatform-then-arm-v7", index_doc([entry(m1, None), entry(m2, plat("arm", variant="v7"))]), OCI_INDEX, m1, c1, m2, c2)
    cp.add("386-only", index_doc([entry(m2, plat("386"))]), OCI_INDEX, m2, c2)
    # Go lowercases U+0130 to i and the Kelvin sign to k; created must be an RFC 3339 time.
    cp.add("os-dotted-I-first", index_doc([entry(m2, plat("amd64", "l\u0130nux")), entry(m1, plat("amd64"))]), OCI_INDEX, m1, c1, m2, c2)
    cp.add("arch-dotted-I-first", index_doc([entry(m2, plat("r\u0130scv64")), entry(m1, plat("riscv64")), entry(m1, plat("amd64"))]), OCI_INDEX, m1, c1, m2, c2)
    for created in ['"not a time"', '"2026-12-04T15:04:05Z"', '"2026-02-30T00:00:00Z"', '"2026-12-04T15:04:05+02:00"', "null", "5"]:
        cc = config_doc([fake(1)], extra=f',"created":{created}')
        cp.add(f"config-created-{created}", manifest_doc(cc, [fake(11)]), OCI_MANIFEST, cc)
        ch = config_doc([fake(1)], extra=f',"history":[{{"created":{created}}}]')
        cp.add(f"history-created-{created}", manifest_doc(ch, [fake(11)]), OCI_MANIFEST, ch)
    cp.add("fslayers-empty", manifest_doc(c1, [fake(11)], extra=',"fsLayers":[]'), OCI_MANIFEST, c1)
    cp.add("fslayers-null", manifest_doc(c1, [fake(11)], extra=',"fsLayers":null'), OCI_MANIFEST, c1)
    for size in ["9223372036854775807", "9223372036854775808", "18446744073709551615"]:
        cp.add(f"layer-size-{size}", manifest_doc(c1, [fake(11)]).replace(b'"size":100', f'"size":{size}'.encode()), OCI_MANIFEST, c1)
    cp.add("index-missing-blob", index_doc([entry(m1, plat("amd64"))]), OCI_INDEX)
    # Checkpoint images: the annotation containerd's CRI looks up, written every way.
    for name, ann in [("literal", '"org.criu.checkpoint.container.name":"app"'),
                      ("escaped", '"org.criu.checkpoin\\u0074.container.name":"app"'),
                      ("escaped-first", '"\\u006frg.criu.checkpoint.container.name":"app"'),
                      ("other-case", '"Org.criu.checkpoint.container.name":"app"'),
                      ("in-value", '"note":"org.criu.checkpoint.container.name"'),
                      ("family", '"org.criu.checkpoint.other":"x"'),
                      ("twice", '"org.criu.checkpoint.container.name":"a","org.criu.checkpoint.container.name":"b"')]:
        m = manifest_doc(c1, [fake(11)], extra=f',"annotations":{{{ann}}}')
        cp.add(f"checkpoint-manifest-{name}", m, OCI_MANIFEST, c1)
        cp.add(f"checkpoint-index-{name}", index_doc([entry(m1, plat("amd64"))], extra=f',"annotations":{{{ann}}}'), OCI_INDEX, m1, c1)
        cp.add(f"checkpoint-entry-{name}", index_doc([entry(m1, plat("amd64"), extra=f',"annotations":{{{ann}}}')]), OCI_INDEX, m1, c1)
        cp.add(f"checkpoint-inner-{name}", index_doc([entry(m, plat("amd64"))]), OCI_INDEX, m, c1)
    cp.add("checkpoint-annotations-case", manifest_doc(c1, [fake(11)], extra=',"Annotations":{"org.criu.checkpoint.container.name":"a"}'), OCI_MANIFEST, c1)
    cp.add("root-size-lies", m1, OCI_MANIFEST, c1, size=len(m1) + 1)


MUTATIONS = [
    lambda s, r: s.replace('"config"', r.choice(['"Config"', '"CONFIG"', '"\\u0063onfig"', '"config"']), 1),
    lambda s, r: s.replace('"layers"', r.choice(['"Layers"', '"layerſ"', '"l\\u0061yers"', '"layers"']), 1),
    lambda s, r: s.replace('"digest"', r.choice(['"Digest"', '"digeſt"', '"\\u0064igest"', '"digest"']), 1),
    lambda s, r: s.replace('"mediaType"', r.choice(['"MediaType"', '"mediatype"', '"m\\u0065diaType"', '"mediaType"']), 1),
    lambda s, r: s.replace('"architecture"', r.choice(['"Architecture"', '"ARCHITECTURE"', '"\\u0061rchitecture"']), 1),
    lambda s, r: s.replace('"amd64"', r.choice(['"x86_64"', '"AMD64"', '"\\u0061md64"', '"arm64"', '"amd64","variant":"v1"']), 1),
    lambda s, r: s.replace('"os"', r.choice(['"OS"', '"Os"', '"\\u006fs"']), 1),
    lambda s, r: s.replace('"linux"', r.choice(['"Linux"', '"LINUX"', '"l\\u0069nux"', '"windows"']), 1),
    lambda s, r: s.replace('"size":', r.choice(['"size":1e0+', '"Size":', '"size":-', '"siz\\u0065":']), 1),
    lambda s, r: s.replace('"manifests"', r.choice(['"Manifests"', '"manifeſts"', '"m\\u0061nifests"']), 1),
    lambda s, r: s[:-1] + r.choice([',"annotations":{"org.criu.checkpoin\\u0074.container.name":"x"}', ',"config":null', ',"layers":[]',
                                    ',"mediaType":"' + OCI_INDEX + '"', ',"manifests":[]', ',"schemaVersion":3', ',"x":{"y":[1,2,{"z":null}]}']) + "}",
    lambda s, r: s.replace('"sha256:', r.choice(['"sha256:', '"SHA256:', '"sha\\u0032\\u003556:', '"sha512:']), 1),
]


def random_cases(cp, n, seed):
    r = random.Random(seed)
    c1, m1, c2, m2 = base()
    idx = index_doc([entry(m1, plat("amd64")), entry(m2, plat("arm64"))])
    docs = {"c1": c1, "m1": m1, "c2": c2, "m2": m2}
    for i in range(n):
        target = r.choice(["c1", "m1", "idx", "m1", "idx"])
        mutated = dict(docs)
        for _ in range(r.randint(1, 3)):
            key = target if target != "idx" else "idx"
            src = (idx if key == "idx" else mutated[key]).decode("utf-8")
            out = r.choice(MUTATIONS)(src, r).encode("utf-8")
            if key == "idx":
                idx_m = out
            else:
                mutated[key] = out
        if target == "idx":
            cp.add(f"random-{i}-index", idx_m, r.choice([OCI_INDEX, OCI_INDEX, ""]), *docs.values())
        elif target == "c1":
            m = manifest_doc(mutated["c1"], [fake(11), fake(12)])
            cp.add(f"random-{i}-config", m, OCI_MANIFEST, mutated["c1"])
        else:
            cp.add(f"random-{i}-manifest", mutated["m1"], r.choice([OCI_MANIFEST, OCI_MANIFEST, ""]), c1)


def layouts(cp, top):
    """Every OCI layout under `top`: each index.json entry is a case, with the layout's blobs
    (layers left out: neither reader opens them)."""
    for dirpath, dirs, files in os.walk(top):
        if "index.json" not in files or not os.path.isdir(os.path.join(dirpath, "blobs", "sha256")):
            continue
        dirs[:] = []
        try:
            idx = json.load(open(os.path.join(dirpath, "index.json")))
        except ValueError:
            continue
        blobdir = os.path.join(dirpath, "blobs", "sha256")
        small = []
        for f in sorted(os.listdir(blobdir)):
            p = os.path.join(blobdir, f)
            if os.path.getsize(p) <= (4 << 20):
                b = open(p, "rb").read()
                if b[:1] in (b"{", b"[", b" ", b"\n"):
                    small.append(b)
        for e in idx.get("manifests", []):
            d = e.get("digest", "")
            p = os.path.join(blobdir, d[7:])
            if d.startswith("sha256:") and os.path.exists(p):
                root = open(p, "rb").read()
                # A document a test pushed is an image to read, unless the test marked it hostile
                # (push_image under DIFF_HOSTILE=1), or an attacker's registry served it.
                rel = os.path.relpath(dirpath, top)
                hostile = os.path.exists(os.path.join(dirpath, "hostile")) or os.path.basename(dirpath).startswith("served.")
                cp.add(f"{'hostile-' if hostile else ''}layout-{rel}", root, e.get("mediaType", ""), *[b for b in small if b != root],
                       valid=not hostile)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--random", type=int, default=400)
    ap.add_argument("--seed", type=int, default=2535)
    ap.add_argument("--layouts", nargs="*", default=[])
    ap.add_argument("--valid-list", help="write the names of the cases that are valid images here")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    cp = Corpus(a.out)
    hand_written(cp)
    random_cases(cp, a.random, a.seed)
    for top in a.layouts:
        layouts(cp, top)
    if a.valid_list:
        with open(a.valid_list, "w") as f:
            f.write("".join(n + "\n" for n in cp.valid))
    print(cp.n)


if __name__ == "__main__":
    main()
