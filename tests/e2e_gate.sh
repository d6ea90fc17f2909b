#!/usr/bin/env bash
# End-to-end: the gate (docs/how-it-decides.md) on a real containerd of the
# given version, configured from plugin/ with pullgate as the only snapshotter, against an
# htpasswd registry, a token-auth registry with per-repository access (tests/tokenserver.py),
# an anonymous registry and an attacker's registry (tests/evilregistry.py); driven by ctr and
# the pullgate CLI. Every refusal is asserted by its exit code, its message and the absence of
# the private content from its output. Usage: tests/e2e_gate.sh VERSION
source "$(dirname "$0")/lib.sh"
V=${1:?usage: e2e_gate.sh 1.6|1.7|2.1|2.4}
trap cleanup EXIT
PW_ALICE=alice-Secret-9f3k
PW_BOB=bob-Secret-7q2z
PW_CAROL=carol-Secret-4m8x
PW_ADMIN=admin-Secret-1a6c

log "containerd $V (gate): setup"
mk() { python3 "$REPO/tests/mkimage.py" "$@" >/dev/null; }
mk "$WORK/pub" --tag v1 --message "public base image" --nested-index
mk "$WORK/priv" --tag v1 --message "private app" --extra-layers 1 --layer-mb 0.2 --seed 11
mk "$WORK/pre" --tag v1 --message "preloaded app" --extra-layers 1 --layer-mb 0.1 --seed 23
# For probe_anonymous (section 12): one image in a repository anonymous clients may read, one
# in a private repository; each with protected layers of its own.
mk "$WORK/probed" --tag v1 --message "probed app" --extra-layers 1 --layer-mb 0.1 --seed 41
mk "$WORK/unprobed" --tag v1 --message "unprobed app" --extra-layers 1 --layer-mb 0.1 --seed 43
# For 8b: two public images whose bytes a private repository serves too.
DUPMSG="public app also served privately"
mk "$WORK/dup" --tag v1 --message "$DUPMSG" --extra-layers 1 --layer-mb 0.1 --seed 61
mk "$WORK/dup2" --tag v1 --message "$DUPMSG (2)" --extra-layers 1 --layer-mb 0.1 --seed 63
mk "$WORK/dup4" --tag v1 --message "$DUPMSG (4)" --extra-layers 1 --layer-mb 0.1 --seed 65
# For 7b: a private image of its own (its base too) that only plain ctr pulls at first.
OWNMSG="pulled by a principal with plain ctr"
mk "$WORK/own" --tag v1 --message "$OWNMSG" --base-note "7b's own base" --extra-layers 1 --layer-mb 0.1 --seed 67
# For 8: a private image pullgate never sees pulled (plain ctr, alice's password).
PRE2MSG="private app pullgate never saw"
mk "$WORK/pre2" --tag v1 --message "$PRE2MSG" --base-note "8's own base" --extra-layers 1 --layer-mb 0.1 --seed 69
start_registry pub || exit 1
# The private images' registries serve TLS (use_tls_registries): what spares a download (5, 5b,
# 13) is an endpoint pullgate verified. The public one stays plain http.
use_tls_registries || exit 1
start_registry h htpasswd alice "$PW_ALICE" || exit 1
cat > "$WORK/acl.json" <<JSON
{"users": {"alice": "$PW_ALICE", "bob": "$PW_BOB", "carol": "$PW_CAROL", "admin": "$PW_ADMIN"},
 "access": {"alice": ["private/*"], "bob": ["private/app"], "carol": ["other/*"], "admin": ["*"]},
 "anonymous": ["public/*"], "push": ["admin"]}
JSON
start_token_registry t "$WORK/acl.json" || exit 1
PUB=$REG_pub/public/base:v1
PRE=$REG_pub/other/preloaded:v1
HPRIV=$REG_h/private/app:v1
TPRIV=$REG_t/private/app:v1
PROBED=$REG_t/public/probed:v1
UNPROBED=$REG_t/private/unprobed:v1
# Origins as pullgate writes them: `inspect`'s "served by", `grants`, the content labels
# pullgate.io/origin.<origin>, and [policy] allowlist entries: an https registry by its name,
# a plain-http one with its scheme (the public registry here: an https registry of the same
# name is another origin).
ORIGIN_SCHEME=""
ORIGIN_h=$ORIGIN_SCHEME$REG_h/private/app
ORIGIN_t=$ORIGIN_SCHEME$REG_t/private/app
ORIGIN_tm=$ORIGIN_SCHEME$REG_t/private/mirror
push_image "$WORK/pub" v1 "$PUB" "" --all && push_image "$WORK/pre" v1 "$PRE" && push_image "$WORK/priv" v1 "$HPRIV" "alice:$PW_ALICE" \
  && push_image "$WORK/priv" v1 "$TPRIV" "admin:$PW_ADMIN" && push_image "$WORK/probed" v1 "$PROBED" "admin:$PW_ADMIN" \
  && push_image "$WORK/unprobed" v1 "$UNPROBED" "admin:$PW_ADMIN" || { fail "push test images"; exit 1; }
OWN=$REG_h/private/own:v1
push_image "$WORK/own" v1 "$OWN" "alice:$PW_ALICE" || fail "push 7b's image"
PRE2=$REG_h/private/pre2:v1
push_image "$WORK/pre2" v1 "$PRE2" "alice:$PW_ALICE" || fail "push 8's private image"
for i in dup dup2 dup4; do
  push_image "$WORK/$i" v1 "$REG_pub/public/$i:v1" && push_image "$WORK/$i" v1 "$REG_h/private/$i:v1" "alice:$PW_ALICE" || fail "push $i publicly and privately"
done
PG=$WORK/pullgate
pullgate_config "$PG"
# (Without its [registry] table, which restart_pullgate writes last.)
BASE_CONFIG=$(sed '/^\[registry\]/,$d' "$PG/config.toml")
start_pullgate "$PG" || exit 1
start_containerd "$V" "$PG/snapshotter.sock" || exit 1
wait_backend
check_containerd_version "$V"
pg() { local sub=$1; shift; "$PG_BIN" "$sub" --address "$PG/api.sock" "$@"; }
# restart_pullgate [TOML [REGISTRY_TOML]]: SIGTERM pullgate and start it again with extra config
# (REGISTRY_TOML: more keys of its [registry] table).
restart_pullgate() {
  kill "$PG_PID"; wait "$PG_PID" 2>/dev/null
  printf '%s\n%s\n[registry]\nhosts_dir = "%s"\n%s\n' "$BASE_CONFIG" "${1:-}" "$REG_HOSTS" "${2:-}" > "$PG/config.toml"
  start_pullgate "$PG" && wait_backend
}
# run_img NS NAME [ctr run flags...] IMAGE: runs IMAGE (last arg) and prints its output.
run_img() { local ns=$1 id=$2; shift 2; ctr_ -n "$ns" run --rm --snapshotter pullgate "$@" "$id"; }
DENIED='pullgate denied namespace'
# What the private image prints (its /msg): a refused run or unpack must never show it.
LEAK="private app"
# layers_marked REF STATE N...: `pullgate inspect REF` prints, for each layer N, exactly the line
# "  layer N: <blob> (diffID <diffID>) STATE" (STATE: public or protected).
layers_marked() {
  local ref=$1 state=$2 i out; shift 2
  out=$(pg inspect "$ref") || return 1
  for i; do grep -qE "^  layer $i: sha256:[0-9a-f]{64} \(diffID sha256:[0-9a-f]{64}\) $state\$" <<<"$out" || return 1; done
}

log "1. a public image pulled anonymously runs in any namespace with no grant"
check_out "the public tag names an index" "index" curl -s -H "Accept: application/vnd.oci.image.index.v1+json" "http://$REG_pub/v2/public/base/manifests/v1"
mkdir -p "$WORK/hosts/$REG_pub"; printf 'server = "http://%s"\n' "$REG_pub" > "$WORK/hosts/$REG_pub/hosts.toml"
check_err "an index without the platform asked for" "platform linux/arm64 .*not found" pg pull -n pub --hosts-dir "$WORK/hosts" --platform linux/arm64 "$PUB"
check "pullgate pull (anonymous, --hosts-dir, through the index) of the public image" pg pull -n pub --hosts-dir "$WORK/hosts" "$PUB"
check_out "it runs in namespace pub" "public base image" run_img pub p1 "$PUB"
check "plain ctr pull into namespace other" ctr_ -n other images pull --plain-http --snapshotter pullgate "$PUB"
check_out "it runs in namespace other (no grant there)" "public base image" run_img other p2 "$PUB"
check_out "pullgate check allows it for a fresh namespace" "allowed" pg check -n fresh "$PUB"

log "2. tenant A pulls a private image with credentials and runs it"
check "pullgate pull -n A --user alice (htpasswd registry)" pg pull -n A "${REGF[@]}" --user "alice:$PW_ALICE" "$HPRIV"
check "pullgate pull -n A --user alice (token registry)" pg pull -n A "${REGF[@]}" --user "alice:$PW_ALICE" "$TPRIV"
check_out "A runs it" "$LEAK" run_img A a1 "$HPRIV"
check_out "pullgate inspect shows the origin" "served by $ORIGIN_h to id:" pg inspect "$HPRIV"
insp=$(pg inspect "$HPRIV")
# The private image: layers 0-2 are the public image's (busybox, a file, its whiteout), 3 and 4
# its own (0.2 MB of data, /msg).
mapfile -t DIFF < <(sed -nE 's/^  layer [0-9]+: sha256:[0-9a-f]{64} \(diffID (sha256:[0-9a-f]{64})\) .*/\1/p' <<<"$insp")
mapfile -t LBLOB < <(sed -nE 's/^  layer [0-9]+: (sha256:[0-9a-f]{64}) \(diffID .*/\1/p' <<<"$insp")
check "pullgate inspect lists the private image's 5 layers (${#DIFF[@]})" test "${#DIFF[@]}" -eq 5 -a "${#LBLOB[@]}" -eq 5
[ "${#DIFF[@]}" -eq 5 ] || { fail "cannot go on without the layers"; summary "e2e gate (containerd $V)"; exit 1; }
CH=(); for i in 0 1 2 3 4; do CH+=("$(chain_of "${DIFF[@]:0:$((i + 1))}")"); done
check "pullgate inspect marks the base layers shared with the public image (0-2) public, each on its own line" layers_marked "$HPRIV" public 0 1 2
check "pullgate inspect marks the private image's own layers (3, 4) protected" layers_marked "$HPRIV" protected 3 4
check_out "ctr content ls shows the htpasswd origin and alice's identity" "pullgate.io/origin.$ORIGIN_h=id:" ctr_ -n A content ls
check_out "ctr content ls shows the token origin too" "pullgate.io/origin.$ORIGIN_t=id:" ctr_ -n A content ls
check_out "pullgate grants lists A's grants" "$ORIGIN_t" pg grants -n A

log "3. tenant B adopts A's blobs by digest, imports them as an image, and tries to unpack and run it"
mkdir -p "$WORK/stolen/blobs/sha256"
for d in $(ctr_ -n A content ls -q); do steal_blob B "$d" "$WORK/stolen/blobs/sha256/${d#sha256:}" || fail "adopt $d into B"; done
# content_count NS: how many blobs NS's content store lists; fails when ctr does (lib.sh's
# `listing`: two failed listings would count 0 each, and agree).
content_count() { local l; l=$(listing ctr_ -n "$1" content ls -q) || return 1; nlines "$l"; }
nA=$(content_count A); rA=$?; nB=$(content_count B); rB=$?
check "the adoption by digest worked: B holds A's $nA blobs without sending a byte ($nB; the residual risk of the shared store)" \
  test "$rA" -eq 0 -a "$rB" -eq 0 -a "$nB" -eq "$nA"
mdig=$(pg inspect "$HPRIV" | awk '/^manifest /{print $2; exit}')
msize=$(stat -c %s "$WORK/stolen/blobs/sha256/${mdig#sha256:}")
printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%s","size":%s,"annotations":{"io.containerd.image.name":"stolen.example/app:v1","org.opencontainers.image.ref.name":"v1"}}]}' "$mdig" "$msize" > "$WORK/stolen/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' > "$WORK/stolen/oci-layout"
tar -C "$WORK/stolen" -cf "$WORK/stolen.tar" .
# ctr images import unpacks by default on 1.6, 1.7 and 2.1 (1.6/1.7 in the client, 2.1 through
# the transfer service).
check_refused "ctr images import (which unpacks) of the adopted image is refused" "$DENIED \"B\"" "$LEAK" \
  ctr_ -n B images import --snapshotter pullgate "$WORK/stolen.tar"
settle_gc B
# (check_err: containerd must answer "not found"; any other failure of ctr is no evidence.)
check_err "B holds no snapshot of the image's first private chain" "not found" ctr_ -n B snapshots --snapshotter pullgate info "${CH[3]}"
ctr_ -n B images import --no-unpack --snapshotter pullgate "$WORK/stolen.tar" >/dev/null 2>&1
check "the stolen image record exists in B" has_image B stolen.example/app:v1
out=$(run_img B b1 stolen.example/app:v1 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -qF "$DENIED \"B\"" <<<"$out" && grep -qF "pullgate verify -n B" <<<"$out" \
   && grep -qE "layer (${DIFF[3]}|${DIFF[4]})" <<<"$out" && ! grep -qF "$LEAK" <<<"$out"; then
  pass "ctr run of the adopted image is refused, naming the namespace, the private layer and the fixing command, printing nothing of it"
else fail "attack 1 (digest adoption): rc=$rc: $out"; fi
settle_gc B
check_has "pullgate check says denied for B" "denied: $DENIED \"B\"" pg check -n B "$HPRIV"
check_has "and its fix names the reference B asked about" "pullgate verify -n B --user USER:PASSWORD $HPRIV" pg check -n B "$HPRIV"

log "3b. an unknown base layer under A's private layers: the gate finds them by chainID arithmetic"
# An attacker's image: a base layer pullgate never saw (so no chain above it is recorded), then
# A's two private layers (blobs adopted in section 3). Unpacking the first private layer is an
# extract of a chain nobody recorded: only sha256(parent chain + " " + d) over the protected
# layers identifies it.
python3 - "$WORK/stolen/blobs/sha256" "${mdig#sha256:}" "$WORK/unknownbase" <<'PY'
import gzip, hashlib, io, json, os, sys, tarfile
src, mhex, out = sys.argv[1:]
m = json.load(open(os.path.join(src, mhex)))
cfg = json.load(open(os.path.join(src, m["config"]["digest"].split(":")[1])))
os.makedirs(os.path.join(out, "blobs", "sha256"), exist_ok=True)
def put(data):
    h = hashlib.sha256(data).hexdigest()
    open(os.path.join(out, "blobs", "sha256", h), "wb").write(data)
    return "sha256:" + h, len(data)
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
    def add(name, data=None, mode=0o755, target=None):
        ti = tarfile.TarInfo(name); ti.mtime = 0; ti.mode = mode
        if target is not None:
            ti.type, ti.linkname = tarfile.SYMTYPE, target; tf.addfile(ti)
        elif data is None:
            ti.type = tarfile.DIRTYPE; tf.addfile(ti)
        else:
            ti.size = len(data); tf.addfile(ti, io.BytesIO(data))
    add("bin"); add("bin/busybox", open("/bin/busybox", "rb").read())
    for x in ["sh", "cat", "ls"]:
        add("bin/" + x, mode=0o777, target="busybox")
    add("etc"); add("etc/unknown-base", b"a base layer pullgate never saw\n", 0o644)
raw = buf.getvalue()
base_digest, base_size = put(gzip.compress(raw, mtime=0))
for l in m["layers"][3:]:
    h = l["digest"].split(":")[1]
    open(os.path.join(out, "blobs", "sha256", h), "wb").write(open(os.path.join(src, h), "rb").read())
cfg["rootfs"]["diff_ids"] = ["sha256:" + hashlib.sha256(raw).hexdigest()] + cfg["rootfs"]["diff_ids"][3:]
cfg.pop("history", None)
cdig, csize = put(json.dumps(cfg).encode())
man = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
       "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cdig, "size": csize},
       "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": base_digest, "size": base_size}] + m["layers"][3:]}
mdig, msize = put(json.dumps(man).encode())
json.dump({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": mdig, "size": msize,
           "annotations": {"io.containerd.image.name": "unknown.example/app:v1", "org.opencontainers.image.ref.name": "v1"}}]},
          open(os.path.join(out, "index.json"), "w"))
open(os.path.join(out, "oci-layout"), "w").write('{"imageLayoutVersion":"1.0.0"}')
PY
tar -C "$WORK/unknownbase" -cf "$WORK/unknownbase.tar" .
check_refused "B's import (unpacking) of it is refused at A's first private layer, named by its diffID" "$DENIED \"B\".*layer ${DIFF[3]}" "$LEAK" \
  ctr_ -n B images import --snapshotter pullgate "$WORK/unknownbase.tar"
settle_gc B

log "3c. pullgate is the only snapshotter: nothing unpacks or runs around it"
others=$(ctr_ plugins ls | awk '$1=="io.containerd.snapshotter.v1" && $NF=="ok" {print $2}' | sort | paste -sd' ')
check "ctr plugins ls: the only snapshotter with status ok is pullgate (got: ${others:-none})" test "$others" = pullgate
check_refused "B's ctr run of the adopted image with no --snapshotter (containerd's default) fails" "snapshotter not loaded" "$LEAK" \
  ctr_ -n B run --rm stolen.example/app:v1 bypass-default
for s in overlayfs native btrfs zfs devmapper aufs blockfile erofs; do
  check_refused "B's ctr run of the adopted image with --snapshotter $s fails: not loaded" "snapshotter not loaded" "$LEAK" \
    ctr_ -n B run --rm --snapshotter "$s" stolen.example/app:v1 "bypass-$s"
done

log "4. tenant B pulls an attacker's manifest that points at A's private blobs"
python3 - "$WORK/stolen/blobs/sha256/${mdig#sha256:}" "$WORK/evil-manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); m["annotations"] = {"made-by": "attacker"}
open(sys.argv[2], "w").write(json.dumps(m))
PY
_launch_evil() {
  /usr/bin/python3 "$REPO/tests/evilregistry.py" --port "$PORT_1" --repo evil/app --tag v1 --manifest "$WORK/evil-manifest.json" --log "$WORK/evil.log" &
  PIDS+=($!); LAUNCHED+=($!)
  wait_serving 10 curl -sf "http://127.0.0.1:$PORT_1/v2/"
}
launch_on_free_ports 1 _launch_evil || { fail "start the attacker's registry"; exit 1; }
EVPORT=$PORT_1
EVIL=127.0.0.1:$EVPORT/evil/app:v1
check_refused "plain ctr pull of the evil manifest is refused at unpack" "$DENIED \"B4\"" "" \
  ctr_ -n B4 images pull --plain-http --snapshotter pullgate "$EVIL"
settle_gc B4
check "containerd took the evil manifest from the attacker's registry (its log shows the manifest request)" \
  grep -qE '^(GET|HEAD) /v2/evil/app/manifests/' "$WORK/evil.log"
bgets=$(grep -E '^GET /v2/evil/app/blobs/' "$WORK/evil.log" | awk '{print $2}' | sort -u)
not404=""
for p in $bgets; do [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$EVPORT$p")" = 404 ] || not404+=" $p"; done
check "containerd fetched no blob from it: it already held A's ($(grep -c . <<<"$bgets") blob GET(s), each one the attacker's registry answers 404)" \
  test -z "$not404"
check_err "pullgate pull of the evil reference fails: that registry cannot serve the bytes" "not found" pg pull -n B4 --plain-http "$EVIL"
check_err "pullgate verify of it fails the same way" "not found" pg verify -n B4 --plain-http "$EVIL"
check_no_grants "no grant was recorded for B4 (pullgate grants works and lists none)" B4
# The positive control: the same attack on containerd alone (its own overlayfs, the same content
# policy), where A's pull of the private image put the blobs on the node.
if start_alone_containerd "$V" "$WORK/alone"; then
  check "control: on containerd alone, A pulls the private image with its credential" \
    "${ALONE[@]}" -n A images pull "${CTRF[@]}" --user "alice:$PW_ALICE" "$HPRIV"
  check_out "control: on containerd alone, B4's plain ctr pull of the evil manifest and run show A's private file" "$LEAK" \
    bash -c "$(printf '%q ' "${ALONE[@]}") -n B4 images pull --plain-http '$EVIL' >/dev/null && $(printf '%q ' "${ALONE[@]}") -n B4 run --rm '$EVIL' b4-alone"
else
  fail "control: containerd $V alone did not start"
fi

log "5. tenant B verifies with its own valid credentials: one manifest round-trip, then adopts A's chain"
mark=$(wc -l < "$WORK/registry-t/log"); : > "$WORK/registry-t/token.log"
check_out "pullgate verify -n B5 --user bob (token registry)" "sha256:" pg verify -n B5 "${REGF[@]}" --user "bob:$PW_BOB" "$TPRIV"
after=$(tail -n +"$((mark + 1))" "$WORK/registry-t/log")
check "the registry saw manifest requests" grep -q '/v2/private/app/manifests/' <<<"$after"
check "the token server issued bob a token by POST" grep -q '^POST /token user=bob' "$WORK/registry-t/token.log"
check "the registry saw no blob request" not grep -q '/blobs/' <<<"$after"
du_before=$(du -sb "$PG/root/snapshots" | cut -f1)
out=$(pg pull -n B5 "${REGF[@]}" --user "bob:$PW_BOB" "$TPRIV" 2>&1)
check_out "pullgate pull -n B5 downloads nothing and adopts A's chain" "0 blob(s) downloaded, 0 copied from the node, 0 layer(s) extracted, 5 adopted" echo "$out"
check "B5's unpack extracted nothing (no commit in namespace B5)" not grep -q 'commit key=B5/' "$PG/log"
du_after=$(du -sb "$PG/root/snapshots" | cut -f1)
check "disk use did not grow by the image's size (~1.3 MB): $du_before -> $du_after bytes" test "$du_after" -le "$((du_before + 131072))"
check_out "B5 runs the image" "$LEAK" run_img B5 b5 "$TPRIV"

log "5b. same registry host, another repository: an authenticated blob HEAD stands in for the download, and only when it succeeds"
for r in mirror mirror2; do
  skopeo copy --quiet --src-tls-verify=false --dest-tls-verify=false --src-creds "admin:$PW_ADMIN" --dest-creds "admin:$PW_ADMIN" \
    "docker://$TPRIV" "docker://$REG_t/private/$r:v1" >/dev/null 2>&1 || fail "copy the image to private/$r"
done
cat > "$WORK/acl.json" <<JSON
{"users": {"alice": "$PW_ALICE", "bob": "$PW_BOB", "carol": "$PW_CAROL", "admin": "$PW_ADMIN"},
 "access": {"alice": ["private/*"], "bob": ["private/app", "private/mirror", "private/mirror2"], "carol": ["other/*"], "admin": ["*"]},
 "anonymous": ["public/*"], "push": ["admin"]}
JSON
cp "$WORK/acl.json" "$WORK/registry-t/acl.json"
mark=$(wc -l < "$WORK/registry-t/log")
check "pullgate verify -n B5b at $REG_t/private/mirror" pg verify -n B5b "${REGF[@]}" --user "bob:$PW_BOB" "$REG_t/private/mirror:v1"
after=$(tail -n +"$((mark + 1))" "$WORK/registry-t/log")
check "the registry saw blob HEADs at the new repository" grep -q '"HEAD /v2/private/mirror/blobs/' <<<"$after"
check "and no blob GET" not grep -q '"GET /v2/private/mirror/blobs/' <<<"$after"
check_out "pullgate inspect lists the new origin for the blobs" "served by $ORIGIN_tm" pg inspect "$REG_t/private/mirror:v1"
# private/mirror2 serves the same manifest, but its top layer's blob is gone from that repository
# (its link removed from the registry's storage, as a DELETE of the blob there would): bob's HEAD
# there fails, so nothing stands in for the bytes, and a GET finds nothing either.
link=$WORK/registry-t/data/docker/registry/v2/repositories/private/mirror2/_layers/sha256/${LBLOB[4]#sha256:}/link
check "the top layer's blob was linked into private/mirror2" test -f "$link"
rm -f "$link"
mark=$(wc -l < "$WORK/registry-t/log")
check_err "pullgate verify -n B5n at private/mirror2, where that blob is absent, fails" "not found" \
  pg verify -n B5n "${REGF[@]}" --user "bob:$PW_BOB" "$REG_t/private/mirror2:v1"
after=$(tail -n +"$((mark + 1))" "$WORK/registry-t/log")
check "the registry answered bob's HEAD of that blob at private/mirror2 with 404" \
  grep -qE "\"HEAD /v2/private/mirror2/blobs/${LBLOB[4]} HTTP/[0-9.]+\" 404 .*pullgate/" <<<"$after"
check_no_grants "no grant was recorded for B5n" B5n
out=$(pg inspect "$TPRIV" 2>&1); rc=$?
check "pullgate records private/mirror2 as the origin of no blob (inspect works: rc=$rc, and lists the origins that served it)" \
  bash -c '[ "$1" -eq 0 ] && grep -q "served by" <<<"$2" && ! grep -q "private/mirror2" <<<"$2"' _ "$rc" "$out"

log "5c. containerd's GC keeps working for images pullgate pulled"
check "pullgate pull -n G of the public image" pg pull -n G --plain-http "$PUB"
check "G sees the chain" test "$(ctr_ -n G snapshots --snapshotter pullgate ls | awk 'NR>1' | wc -l)" -ge 4
check "ctr -n G images rm --sync" ctr_ -n G images rm --sync "$PUB"
check "G's snapshots are gone after GC" is_zero snapshot_count G
check "G's content is gone after GC" is_zero content_count G

PL=containerd.io/snapshot/pullgate.principal
log "6. no access, wrong password, registry down, bad input: distinct errors, nothing recorded"
check_err "valid login without access (insufficient_scope)" "no access to $REG_t/private/app" pg verify -n C6 "${REGF[@]}" --user "carol:$PW_CAROL" "$TPRIV"
"$PG_BIN" verify --address "$PG/api.sock" -n C6 "${REGF[@]}" --user "carol:$PW_CAROL" "$TPRIV" >/dev/null 2>&1; check "its exit code is 3 (denied)" test $? -eq 3
check_err "wrong password (token registry)" "rejected the credentials of user \"alice\"" pg verify -n C6 "${REGF[@]}" --user "alice:wrong" "$TPRIV"
check_err "wrong password (htpasswd registry)" "rejected the credentials" pg verify -n C6 "${REGF[@]}" --user "alice:wrong" "$HPRIV"
DOWN=127.0.0.1:$(free_port)/private/app:v1
check_err "registry down" "unavailable" pg verify -n C6 --plain-http --user "alice:$PW_ALICE" "$DOWN"
"$PG_BIN" verify --address "$PG/api.sock" -n C6 --plain-http "$DOWN" >/dev/null 2>&1; check "its exit code is 5 (unavailable)" test $? -eq 5
check_err "a malformed reference" "invalid image reference" pg verify -n C6 "not a reference"
# ctr's conventions: the address before or after the subcommand or from PULLGATE_ADDRESS, the
# namespace from CONTAINERD_NAMESPACE, --version; a malformed reference is a usage error (exit 2)
# even when the daemon is not there.
check_out "pullgate -a SOCK grants (address before the subcommand)" "$ORIGIN_h" "$PG_BIN" -a "$PG/api.sock" grants -n A
check_out "PULLGATE_ADDRESS=SOCK pullgate grants" "$ORIGIN_h" env PULLGATE_ADDRESS="$PG/api.sock" "$PG_BIN" grants -n A
check_out "CONTAINERD_NAMESPACE=A pullgate grants lists A's grants" "$ORIGIN_h" env CONTAINERD_NAMESPACE=A "$PG_BIN" grants --address "$PG/api.sock"
# (The listing must work and print its header: a failed one lacks A's grant too.)
ns_flag_wins() {
  local l; l=$(listing env CONTAINERD_NAMESPACE=A "$PG_BIN" grants --address "$PG/api.sock" -n nobody-here) || return 1
  [ "$(head -1 <<<"$l" | awk '{print $1}')" = NAMESPACE ] && ! grep -qF -- "$ORIGIN_h" <<<"$l"
}
check "and -n wins over CONTAINERD_NAMESPACE" ns_flag_wins
check_out "pullgate --version" "pullgate $(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO/Cargo.toml" | head -1)" "$PG_BIN" --version
"$PG_BIN" pull --address "$WORK/no-daemon.sock" -n C6 "not a reference" >/dev/null 2>&1
check "a malformed reference with no daemon to ask: exit 2, not 5" test $? -eq 2
check_err "and says why" "invalid image reference" "$PG_BIN" verify --address "$WORK/no-daemon.sock" "UPPER/case:v1"

# Credentials where docker keeps them: config.json auths, credHelpers, credsStore (a helper run as
# docker runs it), and --password-stdin. Each must act as alice's own --user would (the grant's
# identity is the same HMAC), and print no secret.
ident() { pg grants -n "$1" | awk 'NR > 1 {print $5; exit}'; }
check "DC0: pullgate verify --user alice (the identity to compare with)" pg verify -n DC0 "${REGF[@]}" --user "alice:$PW_ALICE" "$HPRIV"
ID_ALICE=$(ident DC0)
DC=$WORK/docker; mkdir -p "$DC" "$WORK/bin"
printf '{"auths": {"%s": {"auth": "%s"}}}' "$REG_h" "$(printf 'alice:%s' "$PW_ALICE" | base64 -w0)" > "$DC/config.json"
out=$(DOCKER_CONFIG=$DC pg verify -n DC1 "${REGF[@]}" "$HPRIV" 2>&1); rc=$?
check "DC1: verify with no --user takes alice's credential from \$DOCKER_CONFIG/config.json auths" test $rc -eq 0 -a "$(ident DC1)" = "$ID_ALICE" -a -n "$ID_ALICE"
check "DC1: and prints no secret" not grep -qF "$PW_ALICE" <<<"$out"
cat > "$WORK/bin/docker-credential-pgtest" <<SH
#!/bin/sh
# A docker credential helper: the server on stdin, JSON on stdout.
read -r server
echo "get \$server" >> "$WORK/helper.log"
[ "\$server" = "$REG_h" ] || { echo "credentials not found in native keychain"; exit 1; }
printf '{"ServerURL":"%s","Username":"alice","Secret":"%s"}' "\$server" "$PW_ALICE"
SH
chmod +x "$WORK/bin/docker-credential-pgtest"
printf '{"credHelpers": {"%s": "pgtest"}}' "$REG_h" > "$DC/config.json"
check "DC2: credHelpers: the helper gives alice's credential" bash -c \
  "PATH='$WORK/bin':\$PATH DOCKER_CONFIG='$DC' '$PG_BIN' verify --address '$PG/api.sock' -n DC2 ${REGF[*]} '$HPRIV' && [ \"\$('$PG_BIN' grants --address '$PG/api.sock' -n DC2 | awk 'NR > 1 {print \$5; exit}')\" = '$ID_ALICE' ]"
check "DC2: the helper was asked for the registry's host, as docker asks" grep -qx "get $REG_h" "$WORK/helper.log"
printf '{"credsStore": "pgtest", "auths": {"%s": {}}}' "$REG_h" > "$DC/config.json"
check "DC3: credsStore: the same helper for every registry" bash -c \
  "PATH='$WORK/bin':\$PATH DOCKER_CONFIG='$DC' '$PG_BIN' verify --address '$PG/api.sock' -n DC3 ${REGF[*]} '$HPRIV'"
printf '{"credHelpers": {"%s": "pgtest"}}' "$REG_h" > "$DC/config.json"
out=$(PATH="$WORK/bin:$PATH" DOCKER_CONFIG=$DC "$PG_BIN" verify --address "$PG/api.sock" -n DC5 "${REGF[@]}" "$REG_t/private/app:v1" 2>&1); rc=$?
check "DC5: a helper without a credential for the registry: anonymous, refused by the registry (exit 3: $out)" test $rc -eq 3
check_no_grants "DC5: no grant" DC5
printf '{"auths": {"%s": {"auth": "%s"' "$REG_h" "Leaky-Secret-77" > "$DC/config.json"
out=$(DOCKER_CONFIG=$DC pg verify -n DC6 "${REGF[@]}" "$HPRIV" 2>&1); rc=$?
check "DC6: a broken config.json: exit 2, saying which file, quoting none of it ($out)" bash -c \
  "[ $rc -eq 2 ] && grep -qF '$DC/config.json' <<<'$out' && ! grep -qF 'Leaky-Secret-77' <<<'$out'"
check_no_grants "DC6: no grant" DC6
out=$(printf '%s\n' "$PW_ALICE" | pg verify -n DC4 "${REGF[@]}" --user alice --password-stdin "$HPRIV" 2>&1); rc=$?
check "DC4: --user alice --password-stdin" test $rc -eq 0 -a "$(ident DC4)" = "$ID_ALICE"

# Token logins (the token registry): an identity token in config.json (`identitytoken`, beside the
# placeholder user name `docker login` keeps with it), from a credential helper (user name
# <token>) and on standard input; a registry token on standard input and in config.json. Each
# tenant's grant names the identity of the token it presented; a revoked token records nothing.
TOKLOG=$WORK/registry-t/token.log
refreshes() { grep -c 'user=alice grant=refresh_token' "$TOKLOG"; }
IT=$(identity_token t alice "$PW_ALICE")
check "DT: the token server gives alice an identity token (a refresh token)" test -n "$IT"
check "DT0: pullgate verify --user alice at the token registry (a password identity to compare with)" pg verify -n DT0 "${REGF[@]}" --user "alice:$PW_ALICE" "$TPRIV"
printf '{"auths": {"%s": {"auth": "%s", "identitytoken": "%s"}}}' "$REG_t" "$(printf '00000000-0000-0000-0000-000000000000:' | base64 -w0)" "$IT" > "$DC/config.json"
n0=$(refreshes)
out=$(DOCKER_CONFIG=$DC pg pull -n DT1 --principal pod1 "${REGF[@]}" "$TPRIV" 2>&1); rc=$?
ID_IT=$(ident DT1)
check "DT1: pullgate pull with config.json's identitytoken ($out)" test $rc -eq 0 -a -n "$ID_IT"
check "DT1: the token service exchanged it with the refresh-token grant" test "$(refreshes)" -gt "$n0"
# (An identity that differs must be one: a failed listing gives none, which differs from any.)
ID_DT0=$(ident DT0)
check "DT1: its identity is not alice's password identity ($ID_IT, $ID_DT0)" test -n "$ID_DT0" -a "$ID_IT" != "$ID_DT0"
check "DT1: the output carries no token" not grep -qF "$IT" <<<"$out"
check_out "DT1: pod1 runs the image" "$LEAK" run_img DT1 dt1 --snapshotter-label "$PL=pod1" "$TPRIV"
check_refused "DT1: pod2, which presented no token, is refused" "$DENIED \"DT1\" \\(principal \"pod2\"\\)" "$LEAK" run_img DT1 dt2 --snapshotter-label "$PL=pod2" "$TPRIV"
check_refused_rc 3 "DT1: another namespace without the token is denied" "^denied: $DENIED \"DT9\"" "" pg check -n DT9 "$TPRIV"
cat > "$WORK/bin/docker-credential-pgtok" <<SH
#!/bin/sh
# A credential helper answering for a token login: user name <token>, the identity token.
read -r server
printf '{"ServerURL":"%s","Username":"<token>","Secret":"%s"}' "\$server" "\$(cat '$WORK/helper-token')"
SH
chmod +x "$WORK/bin/docker-credential-pgtok"
printf '%s' "$IT" > "$WORK/helper-token"
printf '{"credHelpers": {"%s": "pgtok"}}' "$REG_t" > "$DC/config.json"
out=$(PATH="$WORK/bin:$PATH" DOCKER_CONFIG=$DC "$PG_BIN" pull --address "$PG/api.sock" -n DT2 "${REGF[@]}" "$TPRIV" 2>&1); rc=$?
check "DT2: pullgate pull with a credential helper answering <token> ($out)" test $rc -eq 0
check "DT2: the same token is the same identity as DT1's" test "$(ident DT2)" = "$ID_IT"
out=$(printf '%s\n' "$IT" | pg verify -n DT3 "${REGF[@]}" --identity-token-stdin "$TPRIV" 2>&1); rc=$?
check "DT3: pullgate verify --identity-token-stdin: the same identity ($out)" test $rc -eq 0 -a "$(ident DT3)" = "$ID_IT"
IT_REVOKED=$(identity_token t alice "$PW_ALICE"); revoke_token t "$IT_REVOKED"
n0=$(grep -c 'denied: the refresh token has been revoked' "$TOKLOG")
check_refused_rc 3 "DT4: a revoked identity token on standard input: exit 3, naming the cause, not the token" "refused the identity token: invalid_grant \\(expired, revoked" "$IT_REVOKED" \
  bash -c "printf '%s\n' '$IT_REVOKED' | '$PG_BIN' verify --address '$PG/api.sock' -n DT4 ${REGF[*]} --identity-token-stdin '$TPRIV'"
check "DT4: the token service was asked and refused it" test "$(grep -c 'denied: the refresh token has been revoked' "$TOKLOG")" -gt "$n0"
check_no_grants "DT4: no grant" DT4
printf '%s' "$IT_REVOKED" > "$WORK/helper-token"
check_refused_rc 3 "DT5: the same through the credential helper, with pullgate pull" "revoked" "$IT_REVOKED" \
  env PATH="$WORK/bin:$PATH" DOCKER_CONFIG="$DC" "$PG_BIN" pull --address "$PG/api.sock" -n DT5 "${REGF[@]}" "$TPRIV"
check_no_grants "DT5: no grant" DT5
RT=$(registry_token t alice "$PW_ALICE" private/app)
n0=$(grep -c . "$TOKLOG")
out=$(printf '%s\n' "$RT" | pg verify -n DT6 "${REGF[@]}" --registry-token-stdin "$TPRIV" 2>&1); rc=$?
ID_DT6=$(ident DT6)
check "DT6: pullgate verify --registry-token-stdin ($out)" test $rc -eq 0 -a -n "$ID_DT6"
check "DT6: the registry token went to the registry as it is (no token request)" test "$(grep -c . "$TOKLOG")" = "$n0"
check "DT6: a registry token's identity is not the identity token's" test -n "$ID_DT6" -a "$ID_DT6" != "$ID_IT"
printf '{"auths": {"%s": {"registrytoken": "%s"}}}' "$REG_t" "$RT" > "$DC/config.json"
out=$(DOCKER_CONFIG=$DC pg verify -n DT7 "${REGF[@]}" "$TPRIV" 2>&1); rc=$?
check "DT7: config.json's registrytoken: the same identity as DT6's ($out)" test $rc -eq 0 -a -n "$ID_DT6" -a "$(ident DT7)" = "$ID_DT6"
check_refused_rc 2 "DT8: --identity-token-stdin with --user is a usage error" "cannot be used with" "" \
  pg verify -n DT8 "${REGF[@]}" --identity-token-stdin --user "alice:$PW_ALICE" "$TPRIV"

# --output json, parsed by a JSON parser: field names and values.
json_is() { python3 -c "import json,sys; v=json.loads(sys.stdin.read()); sys.exit(0 if ($1) else 1)"; }
out=$(pg verify -n DC4 -o json "${REGF[@]}" --user "alice:$PW_ALICE" "$HPRIV")
check "JSON: verify -o json gives manifest, identity, downloaded, extracted, adopted" json_is \
  "v['manifest'].startswith('sha256:') and v['identity'] == '$ID_ALICE' and v['downloaded'] == [] and v['extracted'] == 0 and v['adopted'] == 0" <<<"$out"
check "JSON: check -o json says allowed" json_is "v == {'allowed': True, 'reason': v['reason']}" <<<"$(pg check -n DC4 -o json "$HPRIV")"
out=$(pg check -n DC-nobody -o json "$HPRIV"); rc=$?
check "JSON: check -o json of a refusal: allowed false with the reason, exit 3" bash -c \
  "[ $rc -eq 3 ] && python3 -c 'import json,sys; v=json.loads(sys.argv[1]); sys.exit(0 if v[\"allowed\"] is False and \"DC-nobody\" in v[\"reason\"] else 1)' '$out'"
check "JSON: grants -o json lists DC4's grant with its fields" json_is \
  "len(v) == 1 and v[0]['namespace'] == 'DC4' and v[0]['origin'] == '$ORIGIN_h' and v[0]['identity'] == '$ID_ALICE' and v[0]['verified_at'].endswith('Z') and v[0]['principal'] == ''" <<<"$(pg grants -n DC4 -o json)"
check "JSON: revoke -o json counts what it removed" json_is "v == {'revoked': 1}" <<<"$(pg revoke -n DC4 -o json)"
for bad_ns in "a/b" "$(printf 'tab\there')" ""; do
  check_err "namespace ${bad_ns@Q} is refused" "invalid namespace" pg verify -n "$bad_ns" "${REGF[@]}" --user "alice:$PW_ALICE" "$HPRIV"
done
check_err "a principal with a '..' part is refused" "invalid principal" pg verify -n C6 --principal "../x" "${REGF[@]}" --user "alice:$PW_ALICE" "$HPRIV"
LONG=$(printf 'p%.0s' {1..20000})
out=$(pg verify -n C6 --principal "$LONG" "${REGF[@]}" --user "alice:$PW_ALICE" "$HPRIV" 2>&1); rc=$?
check "a 20,000-character principal is refused with a short message (${#out} bytes)" bash -c "[ $rc -ne 0 ] && [ ${#out} -lt 400 ] && grep -q 'invalid principal' <<<'$out'"
out=$(pg pull -n C6 "${REGF[@]}" "$REG_h/private/$LONG:v1" 2>&1); rc=$?
check "a 20,000-character reference is refused with a short message (${#out} bytes)" bash -c "[ $rc -ne 0 ] && [ ${#out} -lt 400 ] && grep -q 'invalid image reference' <<<'$out'"
check_refused "a principal label with a control character is refused by the snapshotter" "invalid principal" "$LEAK" \
  run_img A bad1 --snapshotter-label "$PL=$(printf 'a\001b')" "$HPRIV"
check_err "an unknown digest" "no record of" pg inspect "sha256:$(printf '0%.0s' {1..64})"
"$PG_BIN" inspect --address "$PG/api.sock" "sha256:$(printf '0%.0s' {1..64})" >/dev/null 2>&1; check "its exit code is 4 (not found)" test $? -eq 4
check_err "a malformed platform" "invalid platform" pg verify -n C6 --platform linux "${REGF[@]}" "$HPRIV"
check_err "revoke with a malformed reference" "invalid image reference" pg revoke -n C6 "Not/A/Ref"
check_no_grants "nothing was recorded for C6 (pullgate grants works and lists none)" C6

log "6b. hostile registries: each ends with a clear error in bounded time, records nothing, leaks nothing"
restart_pullgate "" 'timeout = "3s"' || fail "restart pullgate with a 3 s registry timeout"
EVM=$WORK/evil-manifest.json
EVD=sha256:$(sha256sum "$EVM" | cut -d' ' -f1)
_launch_hostile() {
  /usr/bin/python3 "$REPO/tests/evilregistry.py" --port "$PORT_1" --away-port "$PORT_2" --mode "$HOSTILE_MODE" --repo evil/app --tag v1 \
    --manifest "$EVM" --log "$WORK/hostile-$HOSTILE_MODE.log" &
  PIDS+=($!); LAUNCHED+=($!)
  wait_serving 10 curl -s -o /dev/null "http://127.0.0.1:$PORT_1/v2/"
}
# hostile MODE WANT [REF-SUFFIX] [MIN-SECONDS]: runs pullgate verify (with a password) against a
# registry in MODE; it must fail within 30 s (the bound is the timeout command's), not before
# MIN-SECONDS, say WANT, record no grant and never print the password; the hostile registry's
# log must show the manifest request (so the registry really was there and was asked).
hostile() {
  local mode=$1 want=$2 suffix=${3:-:v1} min=${4:-0} out rc t0 ms
  HOSTILE_MODE=$mode
  launch_on_free_ports 2 _launch_hostile || { fail "$mode: the hostile registry did not start"; return; }
  local port=$PORT_1 rpid=${LAUNCHED[0]}
  t0=$(date +%s%N)
  out=$(timeout 30 "$PG_BIN" verify --address "$PG/api.sock" -n H6 --plain-http --user "alice:$PW_ALICE" "127.0.0.1:$port/evil/app$suffix" 2>&1); rc=$?
  ms=$((($(date +%s%N) - t0) / 1000000))
  kill "$rpid" 2>/dev/null
  if [ $rc -eq 124 ]; then fail "$mode: still running after 30 s"
  elif [ $rc -eq 0 ]; then fail "$mode: verify succeeded: $out"
  elif ! grep -qiF -- "$want" <<<"$out"; then fail "$mode: rc=$rc, want '$want', got: $out"
  elif grep -qiF -- "$PW_ALICE" <<<"$out"; then fail "$mode: the error message carries the password (in any case)"
  elif ! grep -qE '^(GET|HEAD) /v2/evil/app/manifests/' "$WORK/hostile-$mode.log"; then
    fail "$mode: the hostile registry's log shows no manifest request: $(head -c 300 "$WORK/hostile-$mode.log")"
  elif [ "$ms" -lt $((min * 1000)) ]; then fail "$mode: ended after $ms ms, before the $min s it must take"
  else pass "$mode: refused (exit $rc, after $ms ms): $(shown 160 "$out")"; fi
}
hostile wrong-digest "digest mismatch for manifest $EVD" "@$EVD"
hostile huge "larger than 4194304 bytes"
hostile redirect-away "not found"
check_out "redirect-away: the other host got the request without the Authorization header" "AWAY AUTH no" cat "$WORK/hostile-redirect-away.log"
check "redirect-away: and never with it" not grep -q 'AWAY AUTH yes' "$WORK/hostile-redirect-away.log"
hostile redirect-loop "redirects"
hostile redirect-secret "unavailable"
# The password in a redirect's host name, and in a token realm the registry names once it has it.
hostile redirect-secret-host "at a host the registry redirected to"
hostile realm-secret "give no access"
hostile leak-media-type "does not read as an image manifest"
hostile leak-key "repeats key"
hostile bad-challenge "WWW-Authenticate"
# One byte a second: no gap reaches the 3 s idle timeout, so only the whole-answer deadline can
# end it; ending before 3 s would mean it never waited for the registry at all.
hostile trickle "unavailable" :v1 3
# Docker schema 1 (a signed manifest built from a test image, its layers served beside it):
# pullgate refuses it by name, records nothing; containerd 1.x's own pull converts it and runs
# it (the baseline pullgate differs from), 2.x's refuses it.
python3 "$REPO/tests/mkimage.py" "$WORK/s1layout" --tag v1 --message "schema one image" >/dev/null \
  && python3 "$REPO/tests/mkschema1.py" "$WORK/s1layout" "$WORK/s1" evil/s1 v1 >/dev/null || fail "write the schema 1 image"
_launch_s1() {
  /usr/bin/python3 "$REPO/tests/evilregistry.py" --port "$PORT_1" --mode serve --repo evil/s1 --tag v1 --manifest "$WORK/s1/manifest.json" \
    --blobs "$WORK/s1/blobs" --content-type application/vnd.docker.distribution.manifest.v1+prettyjws --log "$WORK/s1.log" &
  PIDS+=($!); LAUNCHED+=($!)
  wait_serving 10 curl -sf "http://127.0.0.1:$PORT_1/v2/"
}
if launch_on_free_ports 1 _launch_s1; then
  S1=127.0.0.1:$PORT_1/evil/s1:v1
  check_err "6b: pullgate pull of a Docker schema 1 image is refused by name" "is a Docker schema 1 manifest, which pullgate does not read" \
    pg pull -n S1 --plain-http "$S1"
  check "6b: (the schema 1 registry was asked for the manifest)" grep -q '^GET /v2/evil/s1/manifests/v1' "$WORK/s1.log"
  check_no_grants "6b: no grant was recorded for S1" S1
  case $V in
    1.*) check "6b: (baseline) containerd $V's own pull of it converts it" ctr_ -n S1C images pull --plain-http --snapshotter pullgate "$S1"
         check_out "6b: (baseline) and its container runs" "schema one image" ctr_ -n S1C run --rm --snapshotter pullgate "$S1" s1c ;;
    *) check_refused "6b: (baseline) containerd $V's own pull refuses it" "schema 1" "" ctr_ -n S1C images pull --plain-http --snapshotter pullgate "$S1" ;;
  esac
else fail "6b: the schema 1 registry did not start"; fi
# A token service that repeats the identity token it was sent in its refusal's description,
# disguised (in pieces, base64, reversed): the refusal names the error code, never the token,
# in none of those forms, and neither does pullgate's log.
IT_ECHO=ZqX8vT2mK9pL4wR7nB3cYd6F
for mode in echo-pieces echo-base64 echo-reversed; do
  HOSTILE_MODE=$mode
  launch_on_free_ports 2 _launch_hostile || { fail "$mode: the hostile registry did not start"; continue; }
  out=$(printf '%s' "$IT_ECHO" | timeout 30 "$PG_BIN" verify --address "$PG/api.sock" -n H6 --plain-http --identity-token-stdin "127.0.0.1:$PORT_1/evil/app:v1" 2>&1); rc=$?
  kill "${LAUNCHED[0]}" 2>/dev/null
  if [ $rc -eq 0 ] || [ $rc -eq 124 ] || ! grep -qF "invalid_grant" <<<"$out"; then fail "$mode: rc=$rc, want a refusal naming invalid_grant: $out"
  elif ! grep -q "^POST /token grant=refresh_token" "$WORK/hostile-$mode.log"; then fail "$mode: the token service was never asked: $(head -c 300 "$WORK/hostile-$mode.log")"
  elif tr -cd '[:alnum:]' <<<"$out" | grep -qF "$IT_ECHO" || grep -qF "$(printf %s "$IT_ECHO" | base64)" <<<"$out" || grep -qF "$(rev <<<"$IT_ECHO")" <<<"$out"; then
    fail "$mode: the refusal carries the token: $out"
  else pass "$mode: refused naming the error code, not the token (exit $rc): $(shown 160 "$out")"; fi
done
check "the echoed token is in no form in pullgate's log" not grep -qE "ZqX8vT2|WnFYOHZUMm1L|F6dYc3Bn" "$PG/log"
check_no_grants "nothing was recorded for H6 by any of them (pullgate grants works and lists none)" H6
restart_pullgate || fail "restart pullgate with the base config"

log "7. two principals in one namespace; require_principal"
check "pullgate pull -n P7 --principal pod1" pg pull -n P7 --principal pod1 "${REGF[@]}" --user "bob:$PW_BOB" "$TPRIV"
check_out "pod1 runs it" "$LEAK" run_img P7 r1 --snapshotter-label "$PL=pod1" "$TPRIV"
check_refused "pod2 is refused" "$DENIED \"P7\" \\(principal \"pod2\"\\)" "$LEAK" run_img P7 r2 --snapshotter-label "$PL=pod2" "$TPRIV"
check_refused "a run without a principal is refused (no namespace-wide grant)" "$DENIED \"P7\"" "$LEAK" run_img P7 r3 "$TPRIV"

restart_pullgate $'[namespaces."RP"]\nrequire_principal = true' || exit 1
check "pullgate pull -n RP --principal pod1" pg pull -n RP --principal pod1 "${REGF[@]}" --user "bob:$PW_BOB" "$TPRIV"
check "pullgate verify -n RP (namespace-wide)" pg verify -n RP "${REGF[@]}" --user "bob:$PW_BOB" "$TPRIV"
check_refused "require_principal: a run without the label is refused" "requires a principal" "$LEAK" run_img RP r4 "$TPRIV"
check_out "require_principal: pod1 runs" "$LEAK" run_img RP r5 --snapshotter-label "$PL=pod1" "$TPRIV"
check_refused "require_principal: a namespace-wide grant does not admit pod2" "$DENIED \"RP\" \\(principal \"pod2\"\\)" "$LEAK" \
  run_img RP r6 --snapshotter-label "$PL=pod2" "$TPRIV"

log "7b. a principal's own unmediated pull does not become another principal's"
# pod1 pulls a private image with plain ctr (alice's password, which pullgate never sees): its
# layers are unpacked while pullgate has no record of them. Namespace RQ (no principals) holds the
# same image unpacked the same way. Then pod1 verifies it: pullgate knows the layers as private.
check "RQ: plain ctr pulls $OWN with alice's password" ctr_ -n RQ images pull "${CTRF[@]}" --user "alice:$PW_ALICE" --snapshotter pullgate "$OWN"
check "RP: plain ctr pulls it too" ctr_ -n RP images pull "${CTRF[@]}" --user "alice:$PW_ALICE" --snapshotter pullgate "$OWN"
check_out "RP: pod1 runs it (pullgate has no record of its layers: NeverVerifyPreloadedImages)" "$OWNMSG" run_img RP o1 --snapshotter-label "$PL=pod1" "$OWN"
check "RP: pod1 verifies it with alice's password" pg verify -n RP --principal pod1 "${REGF[@]}" --user "alice:$PW_ALICE" "$OWN"
check_out "its layers are now protected (inspect)" ") protected" pg inspect "$OWN"
check_refused "RP: pod2, without a grant, is refused the chain pod1 unpacked (its layers are looked up again)" "$DENIED \"RP\" \\(principal \"pod2\"\\).*no grant" "$OWNMSG" \
  run_img RP o2 --snapshotter-label "$PL=pod2" "$OWN"
check_refused "RP: a run without a principal is refused too" "requires a principal" "$OWNMSG" run_img RP o3 "$OWN"
check_out "RP: pod1 still runs it (its own grant)" "$OWNMSG" run_img RP o4 --snapshotter-label "$PL=pod1" "$OWN"
# The same chain where no principal could have put it: RQ held it before pullgate knew its
# layers, so there it is preloaded and runs for anyone without a grant.
check_out "RQ: pod2 runs it without a grant (preloaded: RQ held it before pullgate knew its layers)" "$OWNMSG" \
  run_img RQ o5 --snapshotter-label "$PL=pod2" "$OWN"
check_refused "a namespace that unpacks it now needs a grant (R7's plain ctr pull with alice's password)" "$DENIED \"R7\"" "$OWNMSG" \
  ctr_ -n R7 images pull "${CTRF[@]}" --user "alice:$PW_ALICE" --snapshotter pullgate "$OWN"
restart_pullgate "" || exit 1

log "8. policies"
check "plain ctr pulls a public image pullgate never saw" ctr_ -n P8 images pull --plain-http --snapshotter pullgate "$PRE"
check "plain ctr pulls a private image pullgate never saw (alice's password)" ctr_ -n P8 images pull "${CTRF[@]}" --user "alice:$PW_ALICE" --snapshotter pullgate "$PRE2"
check_out "under NeverVerifyPreloadedImages (default) the public one runs" "preloaded app" run_img P8 q1 "$PRE"
check_out "under NeverVerifyPreloadedImages (default) the private one runs" "$PRE2MSG" run_img P8 q1b "$PRE2"
restart_pullgate $'[policy]\nverification = "AlwaysVerify"' || exit 1
check_refused "under AlwaysVerify the private one is refused" "no record of this layer" "$PRE2MSG" run_img P8 q2 "$PRE2"
mark=$(wc -l < "$PG/log")
check_out "under AlwaysVerify the public one runs once pullgate verified it at its own origin without a credential" "preloaded app" run_img P8 q2b "$PRE"
check "pullgate's log says so" grep -q "admitted: the image is public at its own origin.*public_at=$PRE" <(tail -n +"$((mark + 1))" "$PG/log")
check_out "under AlwaysVerify A still runs its verified image" "$LEAK" run_img A a2 "$HPRIV"
check_out "under AlwaysVerify the public image still runs" "public base image" run_img other p3 "$PUB"
restart_pullgate "$(printf '[policy]\nverification = "NeverVerifyAllowlistedImages"\nallowlist = ["%s/private/*"]' "$ORIGIN_SCHEME$REG_h")" || exit 1
check_out "an allowlisted origin is allowed for B without a grant" "$LEAK" run_img B b8 stolen.example/app:v1
check_refused "the never-seen private image is refused under NeverVerifyAllowlistedImages" "no record" "$PRE2MSG" run_img P8 q3 "$PRE2"
# Near misses only: the same host with another path, another host with the same path, and a
# prefix of the repository's name as an exact entry. None names an origin that served the layers.
restart_pullgate "$(printf '[policy]\nverification = "NeverVerifyAllowlistedImages"\nallowlist = ["%s/other/*", "%s/private/*", "%s/private/ap"]' \
  "$ORIGIN_SCHEME$REG_h" "http://$REG_pub" "$ORIGIN_SCHEME$REG_h")" || exit 1
check_refused "an allowlist that names no origin of the image's protected layers does not admit B" "$DENIED \"B\"" "$LEAK" \
  run_img B b8n stolen.example/app:v1
restart_pullgate $'[policy]\nverification = "NeverVerify"' || exit 1
check_out "under NeverVerify B runs the stolen image" "$LEAK" run_img B b9 stolen.example/app:v1
restart_pullgate "" || exit 1
check_refused "back to the default, B is refused again" "$DENIED \"B\"" "$LEAK" run_img B b10 stolen.example/app:v1

log "8b. a public image on the node, the same bytes also in a private repository"
check "plain ctr pulls $REG_pub/public/dup:v1 into P9 (pullgate never saw it)" ctr_ -n P9 images pull --plain-http --snapshotter pullgate "$REG_pub/public/dup:v1"
check_out "P9 runs it" "$DUPMSG" run_img P9 d1 "$REG_pub/public/dup:v1"
check "A pulls the private name of the same bytes with alice's password" pg pull -n A "${REGF[@]}" --user "alice:$PW_ALICE" "$REG_h/private/dup:v1"
check_out "pullgate now holds those layers protected (inspect of the private name)" ") protected" pg inspect "$REG_h/private/dup:v1"
check_out "P9 still runs the public image (unpacked before pullgate knew its layers)" "$DUPMSG" run_img P9 d2 "$REG_pub/public/dup:v1"
check "plain ctr fetches the public image into P11 now (a record, nothing unpacked)" ctr_ -n P11 content fetch --plain-http "$REG_pub/public/dup:v1"
mark=$(wc -l < "$PG/log")
check_out "P11's ctr run unpacks and runs it: pullgate verified it at its own origin without a credential" "$DUPMSG" run_img P11 d4 "$REG_pub/public/dup:v1"
check "pullgate's log says so, naming the image" grep -q "admitted: the image is public at its own origin.*public_at=$REG_pub/public/dup:v1" <(tail -n +"$((mark + 1))" "$PG/log")
check_refused "P9's plain ctr pull of A's private image (alice's password, which pullgate never saw) is still refused at its unpack" "$DENIED \"P9\"" "$LEAK" \
  ctr_ -n P9 images pull "${CTRF[@]}" --user "alice:$PW_ALICE" --snapshotter pullgate "$HPRIV"
check_refused "B's run of the image it stole in 3 is still refused (its name verifies nowhere)" "$DENIED \"B\"" "$LEAK" run_img B b11 stolen.example/app:v1
# Its name's origin cannot be reached: asked again only after a while (10 s), not at every
# refused request, so that a namespace's records naming unreachable origins do not cost an
# anonymous verify (and the registry timeout) per request.
asked() { tail -n +"$((mark + 1))" "$PG/log" | grep -c "not public at this name's origin.*name=stolen.example/app@" || true; }
mark=$(wc -l < "$PG/log")
check_refused "B's run refused again" "$DENIED \"B\"" "$LEAK" run_img B b12 stolen.example/app:v1
check_refused "and again" "$DENIED \"B\"" "$LEAK" run_img B b13 stolen.example/app:v1
n1=$(asked)
check "the unreachable origin was asked at most once for both ($n1)" test "$n1" -le 1
sleep 10.5
check_refused "B's run refused 10 s later" "$DENIED \"B\"" "$LEAK" run_img B b14 stolen.example/app:v1
n2=$(asked)
check "then the origin was asked again, once ($n1, then $n2)" test "$n2" -eq $((n1 + 1))
# The other order: the private name first; then the public one with plain ctr, its record made
# before its unpack (ctr content fetch makes the record; ctr run unpacks it).
check "A pulls the private name of another image first" pg pull -n A "${REGF[@]}" --user "alice:$PW_ALICE" "$REG_h/private/dup2:v1"
check "plain ctr fetches its public name into P10 (a record, nothing unpacked)" ctr_ -n P10 content fetch --plain-http "$REG_pub/public/dup2:v1"
# Another namespace's failed attempt says nothing of the image: in pullgate's public namespace
# (where pullgate pulls nothing) a run is refused and its anonymous verify fails for a reason of
# that namespace; P10's run right after is still worked out on its own (not refused for a
# minute because of it).
check "plain ctr fetches it into pullgate's public namespace too" ctr_ -n pullgate-public content fetch --plain-http "$REG_pub/public/dup2:v1"
check_refused "a run of it there is refused" "$DENIED \"pullgate-public\"" "$DUPMSG (2)" run_img pullgate-public d3x "$REG_pub/public/dup2:v1"
check_out "P10's ctr run unpacks and runs it" "$DUPMSG (2)" run_img P10 d3 "$REG_pub/public/dup2:v1"
ctr_ -n pullgate-public images rm "$REG_pub/public/dup2:v1" >/dev/null 2>&1
settle_gc pullgate-public
# Under AlwaysVerify too: the layers pullgate knows as private are verified at the public
# name's own origin, without a credential, and the public image runs.
restart_pullgate $'[policy]\nverification = "AlwaysVerify"' || exit 1
check "AlwaysVerify: A pulls the private name of a fourth image" pg pull -n A "${REGF[@]}" --user "alice:$PW_ALICE" "$REG_h/private/dup4:v1"
check "AlwaysVerify: plain ctr fetches its public name into P12" ctr_ -n P12 content fetch --plain-http "$REG_pub/public/dup4:v1"
check_out "AlwaysVerify: P12's ctr run unpacks and runs it" "$DUPMSG (4)" run_img P12 d5 "$REG_pub/public/dup4:v1"
check_refused "AlwaysVerify: P12's plain ctr pull of A's private image is still refused" "$DENIED \"P12\"" "$LEAK" \
  ctr_ -n P12 images pull "${CTRF[@]}" --user "alice:$PW_ALICE" --snapshotter pullgate "$HPRIV"
restart_pullgate || exit 1

log "8c. pullgate check answers alike for a name another tenant pulled privately and for a name nobody pulled"
HPRIV_MD=$(pg inspect "$HPRIV" | awk '/^manifest /{print $2; exit}')
NOBODY=$REG_h/private/nobody:v1
NOBODY_MD=sha256:$(printf 'nobody' | sha256sum | cut -c1-64)
# alike LABEL: Z8 (no grant) asks about A's private image and about a name nobody pulled, by tag
# and by digest: the same exit status (3, refused), and the same words but for the name asked.
alike() {
  local a b c d ra rb rc rd
  a=$(pg check -n Z8 "$HPRIV" 2>&1); ra=$?; b=$(pg check -n Z8 "$NOBODY" 2>&1); rb=$?
  c=$(pg check -n Z8 "$REG_h/private/app@$HPRIV_MD" 2>&1); rc=$?; d=$(pg check -n Z8 "$REG_h/private/app@$NOBODY_MD" 2>&1); rd=$?
  check "$1: by tag, the same answer but for the name asked (rc $ra, $rb: $(shown 160 "$a"))" \
    bash -c '[ "$0" -eq 3 ] && [ "$1" -eq 3 ] && [ "${2//"$4"/IMG}" = "${3//"$5"/IMG}" ] && [[ "$2" == denied:* ]]' "$ra" "$rb" "$a" "$b" "$HPRIV" "$NOBODY"
  # (Digest references are shown shortened: the digest, however shown, is left out.)
  c=$(sed -E 's/@sha256:[0-9a-f]+(… \([0-9]+ bytes\))?/@DIGEST/g' <<<"$c"); d=$(sed -E 's/@sha256:[0-9a-f]+(… \([0-9]+ bytes\))?/@DIGEST/g' <<<"$d")
  check "$1: by digest, the same answer but for the digest asked (rc $rc, $rd: $(shown 160 "$c"))" \
    bash -c '[ "$0" -eq 3 ] && [ "$1" -eq 3 ] && [ "$2" = "$3" ] && [[ "$2" == denied:*@DIGEST* ]]' "$rc" "$rd" "$c" "$d"
  # A's private name of an image whose every layer is public (section 7's dup, verified public
  # at its own public name): still A's, answered as a name nobody pulled.
  a=$(pg check -n Z8 "$REG_h/private/dup:v1" 2>&1); ra=$?
  check "$1: a private name of public layers, the same answer (rc $ra, $rb: $(shown 160 "$a"))" \
    bash -c '[ "$0" -eq 3 ] && [ "$1" -eq 3 ] && [ "${2//"$4"/IMG}" = "${3//"$5"/IMG}" ]' "$ra" "$rb" "$a" "$b" "$REG_h/private/dup:v1" "$NOBODY"
}
check_out "A, which pulled it, is answered allowed" allowed pg check -n A "$HPRIV"
# (Section 7's verify at the public name was of the name pinned to its manifest: the record's
# name is that one.)
DUP_MD=$(pg inspect "$REG_h/private/dup:v1" | awk '/^manifest /{print $2; exit}')
check_out "the public name of those public layers, its manifest served without a credential, is answered allowed" allowed pg check -n Z8 "$REG_pub/public/dup@$DUP_MD"
alike "default policy"
restart_pullgate $'[policy]\nverification = "AlwaysVerify"' || exit 1
alike "AlwaysVerify"
restart_pullgate || exit 1

log "9. SIGKILL pullgate and restart containerd: grants, tags and refusals are kept"
# Each "unchanged" compares two answers that must first be real ones: two failed (empty) answers
# would be equal too.
grants_before=$(pg grants --all 2>&1) || grants_before="pullgate grants --all failed: $grants_before"
checks_before=$(pg check -n A "$HPRIV"; pg check -n B "$HPRIV")
content_labels() { ctr_ -n A content ls | awk 'NR>1 {n=split($NF,a,","); for(i=1;i<=n;i++) print $1, a[i]}' | sort; }
labels_before=$(content_labels)
check "before: pullgate grants --all lists A's grants at both origins" \
  bash -c 'grep -qE "^A +- +$1 " <<<"$3" && grep -qE "^A +- +$2 " <<<"$3"' _ "$ORIGIN_h" "$ORIGIN_t" "$grants_before"
check "before: pullgate check allows A and denies B" bash -c '[ "$(head -1 <<<"$1")" = allowed ] && [[ "$(tail -1 <<<"$1")" == denied:* ]]' _ "$checks_before"
check "before: A's content carries origin labels" grep -qF "pullgate.io/origin.$ORIGIN_h=id:" <<<"$labels_before"
kill -9 "$PG_PID"; wait "$PG_PID" 2>/dev/null
kill "$CTRD_PID"; wait "$CTRD_PID" 2>/dev/null
start_pullgate "$PG" || exit 1
start_containerd "$V" "$PG/snapshotter.sock" || exit 1
wait_backend
check "grants are unchanged" test "$grants_before" = "$(pg grants --all 2>&1)"
check "decisions are unchanged" test "$checks_before" = "$(pg check -n A "$HPRIV"; pg check -n B "$HPRIV")"
check "content labels are unchanged" test "$labels_before" = "$(content_labels)"
check_out "A still runs" "$LEAK" run_img A a3 "$HPRIV"
check_refused "B is still refused" "$DENIED \"B\"" "$LEAK" run_img B b11 stolen.example/app:v1

log "10. reverify_after and revoke; views"
restart_pullgate $'[policy]\nreverify_after = "3s"' || exit 1
# verify_then_run ID: verifies A and runs the image at once. A machine too slow to do both within
# the 3 s of reverify_after gets one more try (the check is that a fresh grant admits A).
verify_then_run() {
  local id=$1 try out
  for try in 1 2; do
    pg verify -n A "${REGF[@]}" --user "alice:$PW_ALICE" "$HPRIV" >/dev/null 2>&1 \
      && out=$(run_img A "$id-$try" "$HPRIV" 2>&1) && grep -qF "$LEAK" <<<"$out" && return 0
    echo "    (try $try: verify and run of A did not succeed within reverify_after: $(shown 200 "$out"))"
    ctr_ -n A containers rm "$id-$try" >/dev/null 2>&1
  done
  return 1
}
check "verify -n A, then A runs right after verifying" verify_then_run a4
# The grant is now at least 4 s old whatever the machine's speed: past reverify_after, with margin.
sleep 4
check_refused "after reverify_after, A is refused" "older than reverify_after" "$LEAK" run_img A a5 "$HPRIV"
check "verify again, and A runs again" verify_then_run a6
restart_pullgate "" || exit 1
# By reference: the grant at that registry's origin (http://..., as recorded) goes, the token
# registry's stays (A still runs the image through it: the same layers, served there too).
check_out "pullgate revoke -n A $HPRIV revokes the htpasswd registry's grant" "revoked 1 grant" pg revoke -n A "$HPRIV"
# (One listing, which must work, for both: a failed one lacks $ORIGIN_h too.)
only_t_grant() { local l; l=$(listing pg grants -n A) || return 1; grep -qF -- "$ORIGIN_t" <<<"$l" && ! grep -qF -- "$ORIGIN_h" <<<"$l"; }
check "and only that one: A's grant at $ORIGIN_t stays" only_t_grant
check "verify restores it" pg verify -n A "${REGF[@]}" --user "alice:$PW_ALICE" "$HPRIV"
check_out "pullgate revoke -n A" "revoked" pg revoke -n A
check_refused "after revoke, A is refused" "$DENIED \"A\"" "$LEAK" run_img A a7 "$HPRIV"
check_refused "after revoke, a view of A's top chain (ctr snapshots view) is refused too" "$DENIED \"A\"" "" \
  ctr_ -n A snapshots --snapshotter pullgate view view-a7 "${CH[4]}"
# Refusals cost A's image records one reading per 10 s, whatever chains they name (each refused
# request of a namespace the front does not serve asks whether an image on its chain is public
# at its own origin).
mark=$(wc -l < "$PG/log"); nref=0
for i in 1 2 3 4; do
  for c in 3 4; do
    out=$(ctr_ -n A snapshots --snapshotter pullgate view "amp-$c-$i" "${CH[$c]}" 2>&1) || { grep -qF "$DENIED \"A\"" <<<"$out" && nref=$((nref + 1)); }
  done
done
reads=$(tail -n +"$((mark + 1))" "$PG/log" | grep -c "read the namespace's image records")
check "8 refused views of A's two private chains (refused: $nref) read A's image records at most once (read: $reads)" \
  test "$nref" -eq 8 -a "$reads" -le 1
check "verify restores access" pg verify -n A "${REGF[@]}" --user "alice:$PW_ALICE" "$HPRIV"
check_out "A runs" "$LEAK" run_img A a8 "$HPRIV"
check "and the view of the top chain is allowed again" ctr_ -n A snapshots --snapshotter pullgate view view-a8 "${CH[4]}"
ctr_ -n A snapshots --snapshotter pullgate rm view-a8 >/dev/null 2>&1
# Mounts decides again: a container created (its rootfs prepared) while A held the grant does
# not start once the grant is revoked. First the same split with the grant kept: the create
# and the start each work, so the refusal below is the revoke's.
check "Mounts: A creates container a9 (rootfs prepared) while it holds the grant" \
  ctr_ -n A containers create --snapshotter pullgate "$HPRIV" a9
check_out "and starts it: it runs" "$LEAK" ctr_ -n A tasks start a9
ctr_ -n A tasks rm a9 >/dev/null 2>&1; ctr_ -n A containers rm a9 >/dev/null 2>&1
check "Mounts: A creates container a10 while it holds the grant" ctr_ -n A containers create --snapshotter pullgate "$HPRIV" a10
check "its rootfs snapshot exists (prepared before the revoke)" bash -c "$(printf '%q ' "${CTR[@]}") -n A snapshots --snapshotter pullgate info a10 | grep -q '\"Kind\": \"Active\"'"
check_out "pullgate revoke -n A (after the create)" "revoked" pg revoke -n A
check_refused "then its task start is refused by the gate at Mounts and shows nothing of the image" "$DENIED \"A\"" "$LEAK" \
  ctr_ -n A tasks start a10
ctr_ -n A tasks rm -f a10 >/dev/null 2>&1; ctr_ -n A containers rm a10 >/dev/null 2>&1
check "verify restores access after the Mounts check" pg verify -n A "${REGF[@]}" --user "alice:$PW_ALICE" "$HPRIV"

log "11. a base layer shared with a public image stays usable while the private layers are gated"
check_out "B (no grant) runs the public image that shares the private image's base layers" "public base image" \
  bash -c "'${CTR[0]}' -a '${CTR[2]}' -n B images pull --plain-http --snapshotter pullgate '$PUB' >/dev/null && '${CTR[0]}' -a '${CTR[2]}' -n B run --rm --snapshotter pullgate '$PUB' b12"
check_refused "while the private image stays refused for B" "$DENIED \"B\"" "$LEAK" run_img B b13 stolen.example/app:v1

log "12. probe_anonymous: a layer readable anonymously where it was fetched becomes public; others stay protected"
check "probing off (the default): pullgate pull -n PR1 --user alice of $PROBED (anonymous clients may read that repository)" \
  pg pull -n PR1 "${REGF[@]}" --user "alice:$PW_ALICE" "$PROBED"
check "its own layers stay protected: fetched with a credential, nobody asked anonymously" layers_marked "$PROBED" protected 3 4
restart_pullgate $'[policy]\nprobe_anonymous = true' || exit 1
: > "$WORK/registry-t/token.log"
check "probing on: pullgate pull -n PR2 --user alice of $UNPROBED (a private repository)" pg pull -n PR2 "${REGF[@]}" --user "alice:$PW_ALICE" "$UNPROBED"
check "pullgate asked anonymously, and the token server gave an anonymous client no access to private/unprobed" \
  grep -qE '^GET /token user=- scopes=repository:private/unprobed:pull granted=\[\]' "$WORK/registry-t/token.log"
check "negative: its own layers stay protected" layers_marked "$UNPROBED" protected 3 4
check_refused "PR3 (no grant, alice's password given to plain ctr) cannot unpack it" "$DENIED \"PR3\"" "unprobed app" \
  ctr_ -n PR3 images pull "${CTRF[@]}" --user "alice:$PW_ALICE" --snapshotter pullgate "$UNPROBED"
settle_gc PR3
check "probing on: pullgate pull -n PR4 --user alice of $PROBED" pg pull -n PR4 "${REGF[@]}" --user "alice:$PW_ALICE" "$PROBED"
check "pullgate asked anonymously, and the token server let an anonymous client read public/probed" \
  grep -qE '^GET /token user=- scopes=repository:public/probed:pull granted=\[\{' "$WORK/registry-t/token.log"
check "positive: its own layers are now public" layers_marked "$PROBED" public 3 4
check "PR5 pulls it anonymously with plain ctr" ctr_ -n PR5 images pull "${CTRF[@]}" --snapshotter pullgate "$PROBED"
check_out "and runs it without any grant" "probed app" run_img PR5 pr5 "$PROBED"
check_no_grants "PR5 holds no grant" PR5
restart_pullgate "" || exit 1

log "13. a layer blob the node lost: a new tenant's pull adopts the chain and fetches that blob alone"
# Under the shared store a pull of a manifest pullgate recorded adopts its layer blobs beside the
# unpack; one containerd no longer has comes from the origin.
LOSTMD=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]+"/index.json"))["manifests"][0]["digest"])' "$WORK/unprobed")
LOST=$(python3 -c 'import json,sys; m=json.load(open(sys.argv[1]+"/blobs/sha256/"+sys.argv[2].split(":")[1])); print(m["layers"][-1]["digest"])' "$WORK/unprobed" "$LOSTMD")
for ns in $(ctr_ namespaces ls -q); do ctr_ -n "$ns" content rm "$LOST" >/dev/null 2>&1; done
settle_gc PR2
# holders DIGEST: the namespaces whose content store lists DIGEST; fails when a listing fails.
holders() {
  local nss ns l; nss=$(listing ctr_ namespaces ls -q) || return 1
  for ns in $nss; do
    l=$(listing ctr_ -n "$ns" content ls -q) || return 1
    if grep -qxF -- "$1" <<<"$l"; then echo "$ns"; fi
  done
}
hl=$(holders "$LOST"); hrc=$?
held=$(nlines "$hl"); [ $hrc -eq 0 ] || held="unknown: a listing failed (rc=$hrc)"
check "(precondition) no namespace holds the top layer's blob any more ($held)" test "$held" = 0
: > "$WORK/empty"
ctr_ -n LOSTP content ingest --expected-digest "$LOST" "adopt-lost" <"$WORK/empty" >/dev/null 2>&1
check_err "(precondition) and containerd no longer has it to adopt (an ingest by digest in LOSTP adopts nothing)" "not found" ctr_ -n LOSTP content get "$LOST"
mark=$(wc -l < "$WORK/registry-t/log")
out=$(pg pull -n LOSTL "${REGF[@]}" --user "alice:$PW_ALICE" "$UNPROBED" 2>&1); rc=$?
check "LOSTL's pullgate pull succeeds (rc=$rc: $(tail -n 1 <<<"$out"))" test $rc -eq 0
check "it downloaded that one blob and adopted every chain ($(grep -o '[0-9]* blob(s) downloaded.*' <<<"$out"))" \
  grep -qE "^identity [^,]*, 1 blob\(s\) downloaded, 0 copied from the node, 0 layer\(s\) extracted, [1-9][0-9]* adopted" <<<"$out"
gets=$(tail -n +"$((mark + 1))" "$WORK/registry-t/log" | grep -c '"GET /v2/[^ ]*/blobs/')
check "the registry served one blob ($gets), the lost one" bash -c '[ "$1" = 1 ] && tail -n +"$(($2 + 1))" "$3" | grep "\"GET /v2/[^ ]*/blobs/$4" >/dev/null' _ "$gets" "$mark" "$WORK/registry-t/log" "$LOST"
check "LOSTL holds it again with its exact bytes" bash -c "$(printf '%q ' "${CTR[@]}") -n LOSTL content get '$LOST' | sha256sum | grep -q '^${LOST#sha256:} '"
check_out "LOSTL runs the image" "unprobed app" run_img LOSTL lostl1 "$UNPROBED"

log "concurrency: pulls, verifies, runs and revokes racing in the same 8 namespaces (32 at once)"
prep=""
for k in 0 1 2 3 4 5 6 7; do pg pull -n "K$k" "${REGF[@]}" --user "bob:$PW_BOB" "$TPRIV" >/dev/null 2>&1 || prep+=" K$k"; done
check "K0..K7 each pulled the private image first: each race starts from a grant and an unpacked chain (failed:${prep:- none})" test -z "$prep"
OPS=(pull verify run revoke)
cpid=()
# Operation i: namespace K(i % 8), kind OPS[i / 8]: every namespace gets one of each kind.
# Launched in a random order, each after a random delay of up to half a second, so that in each
# namespace a revoke lands before, between or after the others.
for i in $(shuf -i 0-31); do
  ns=K$((i % 8)) delay=0.$((RANDOM % 6))
  (
    sleep "$delay"
    t0=$(date +%s.%N)
    case ${OPS[$((i / 8))]} in
      pull) pg pull -n "$ns" "${REGF[@]}" --user "bob:$PW_BOB" "$TPRIV" ;;
      verify) pg verify -n "$ns" "${REGF[@]}" --user "bob:$PW_BOB" "$TPRIV" ;;
      run) run_img "$ns" "k$i" "$TPRIV" ;;
      revoke) pg revoke -n "$ns" ;;
    esac
    rc=$?
    # When it ran (start and end), for the overlap check below.
    echo "$ns ${OPS[$((i / 8))]} $t0 $(date +%s.%N)" > "$WORK/k$i.time"
    exit $rc
  ) > "$WORK/k$i.out" 2>&1 &
  cpid[i]=$!
done
bad=0; ran=0; refused=0; revoked=0
for i in $(seq 0 31); do
  wait "${cpid[$i]}"; rc=$?; ns=K$((i % 8)); op=${OPS[$((i / 8))]}; out=$(cat "$WORK/k$i.out")
  case $op in
    pull|verify) [ $rc -eq 0 ] || { bad=$((bad + 1)); echo "    $op in $ns failed: $(shown 300 "$out")"; } ;;
    # The namespace held a grant before the race and only this revoke removes grants there.
    revoke) if [ $rc -eq 0 ] && [[ $out =~ ^revoked\ ([0-9]+)\ grant ]] && [ "${BASH_REMATCH[1]}" -ge 1 ]; then revoked=$((revoked + 1))
            else bad=$((bad + 1)); echo "    revoke in $ns: rc=$rc: $(shown 300 "$out")"; fi ;;
    run) if [ $rc -eq 0 ] && grep -qF "$LEAK" <<<"$out"; then ran=$((ran + 1))
         elif [ $rc -ne 0 ] && grep -qF "$DENIED \"$ns\"" <<<"$out" && ! grep -qF "$LEAK" <<<"$out"; then refused=$((refused + 1))
         else bad=$((bad + 1)); echo "    run in $ns: rc=$rc: $(shown 300 "$out")"; fi ;;
  esac
done
check "the 16 pulls and verifies succeeded, each of the 8 revokes removed a grant ($revoked), each of the 8 runs ran or was refused by the gate (ran $ran, refused $refused; anything else: $bad)" \
  test "$bad" -eq 0 -a "$revoked" -eq 8
# The operations did overlap: in some namespace a revoke ran while another of its operations was
# running (else the race could have run one after the other and shown nothing).
overlap=$(cat "$WORK"/k*.time 2>/dev/null | python3 -c '
import sys
ops = [l.split() for l in sys.stdin if l.strip()]
ops = [(n, k, float(a), float(b)) for n, k, a, b in ops]
nss = sorted({n for n, k, a, b in ops if k == "revoke" and any(m == n and k2 != "revoke" and a2 < b and a < b2 for m, k2, a2, b2 in ops)})
peak = max(sum(1 for _, _, a2, b2 in ops if a2 <= a < b2) for _, _, a, _ in ops) if ops else 0
print(len(ops), peak, len(nss), ",".join(nss))')
read -r ntimed peak nover overns <<<"$overlap"
check "the race overlapped: all 32 operations timed ($ntimed), up to $peak running at once, and in $nover namespace(s) (${overns:-none}) a revoke ran while another operation there was running" \
  test "${ntimed:-0}" -eq 32 -a "${peak:-0}" -ge 2 -a "${nover:-0}" -ge 1
check "pullgate is still serving" kill -0 "$PG_PID"
# decision NS: "allowed" or "denied" when NS's grants, `pullgate check` and `ctr run` agree on it.
decision() {
  local ns=$1 n dec out rc try
  n=$(grant_count "$ns" 2>&1) || { echo "inconsistent: $n"; return; }
  dec=$(pg check -n "$ns" "$TPRIV" 2>&1)
  # A run that exits 0 having printed nothing of the container (neither its /msg nor the `ls` of
  # /etc/pullgate-test after it, "two") says nothing about its rootfs: its output was lost on the
  # way (seen once in CI, containerd 2.4 after this race; the quote then held only ctr's warnings).
  # Such a run is made again, at most three in all, and said so. A run that lists "two" without
  # the /msg ran on a wrong rootfs: no second try.
  for try in 1 2 3; do
    out=$(run_img "$ns" "agree-$ns-$RANDOM" "$TPRIV" 2>&1); rc=$?
    [ $rc -eq 0 ] && ! grep -qF "$LEAK" <<<"$out" && ! grep -qx two <<<"$out" || break
    echo "    ($ns: ctr run exited 0 with no output of the container, try $try of 3: $(shown 200 "$out"))" >&2
  done
  if [ "$n" -gt 0 ] && [ "$dec" = allowed ] && [ $rc -eq 0 ] && grep -qF "$LEAK" <<<"$out"; then echo allowed
  elif [ "$n" -eq 0 ] && [[ $dec == denied:* ]] && [ $rc -ne 0 ] && grep -qF "$DENIED \"$ns\"" <<<"$out" && ! grep -qF "$LEAK" <<<"$out"; then echo denied
  else echo "inconsistent: $n grant(s), check: $(shown 80 "$dec"), ctr run rc=$rc: $(shown 400 "$out")"; fi
}
agree=1; seen=""
for k in 0 1 2 3 4 5 6 7; do
  d=$(decision "K$k"); seen+=" K$k:${d%%:*}"
  case $d in allowed|denied) ;; *) agree=0; echo "    K$k: $d" ;; esac
done
check "right after the race, every namespace's grants, check and ctr run agree:$seen" test "$agree" -eq 1
# Then both outcomes for certain: K0-K3 revoked, K4-K7 verified.
for k in 0 1 2 3; do pg revoke -n "K$k" >/dev/null 2>&1 || fail "revoke K$k"; done
for k in 4 5 6 7; do pg verify -n "K$k" "${REGF[@]}" --user "bob:$PW_BOB" "$TPRIV" >/dev/null 2>&1 || fail "verify K$k"; done
agree=1; seen=""
for k in 0 1 2 3 4 5 6 7; do
  want=denied; [ "$k" -ge 4 ] && want=allowed
  d=$(decision "K$k"); seen+=" K$k:${d%%:*}"
  [ "$d" = "$want" ] || { agree=0; echo "    K$k: want $want, got $d"; }
done
check "then, K0-K3 revoked and K4-K7 verified, grants, check and ctr run agree: denied in K0-K3, allowed in K4-K7:$seen" test "$agree" -eq 1
check_out "the ledger still reads whole" "grant: namespace=" pg inspect "$TPRIV"

log "secrets: no password, Basic credential or bearer token in pullgate's files and log, containerd's files, metadata, labels or log"
PATS=$WORK/secret-patterns
secret_patterns "$PATS" "alice:$PW_ALICE" "bob:$PW_BOB" "carol:$PW_CAROL" "admin:$PW_ADMIN"
# Every token the token server issued (to pullgate, to containerd, to skopeo, and the identity
# and registry tokens handed to pullgate in DT1-DT7): its signature, which any copy contains.
ntok=$(grep -c . "$WORK/registry-t/tokens.log")
awk '{n = split($2, a, "."); print a[n]}' "$WORK/registry-t/tokens.log" >> "$PATS"
check "the token server recorded the tokens it issued ($ntok)" test "$ntok" -gt 0
leak=$(grep -rlaF -D skip -f "$PATS" "$PG" "$WORK/containerd" 2>/dev/null | head -5)
check "none of them in any file under pullgate's root, its config or log, or containerd's root, state or log (found in: ${leak:-none})" test -z "$leak"
# secret_free CMD...: CMD succeeds and prints something, and none of the patterns (a failed
# listing holds no secret either).
secret_free() {
  local l; l=$(listing "$@") || return 1
  [ -n "$l" ] || { echo "nothing listed"; return 1; }
  if grep -qF -f "$PATS" <<<"$l"; then echo "a pattern of $PATS is in it"; return 1; fi
}
check "none of them in A's content labels" secret_free ctr_ -n A content ls
for ns in DT1 DT6; do   # pulled with an identity token, verified with a registry token
  check "none of them in $ns's content, image or snapshot labels" secret_free ns_labels "$ns"
done
check "the API socket is 0600" test "$(stat -c %a "$PG/api.sock")" = 600
check "the identity key is 0600" test "$(stat -c %a "$PG/root/identity.key")" = 600

log "a ledger record that cannot be read when an extract is decided: the gate denies"
check "E0 verifies" pg verify -n E0 "${REGF[@]}" --user "alice:$PW_ALICE" "$HPRIV"
check "E1 verifies" pg verify -n E1 "${REGF[@]}" --user "alice:$PW_ALICE" "$HPRIV"
check "control: E0, with its grant, unpacks the image with plain ctr" ctr_ -n E0 images pull "${CTRF[@]}" --user "alice:$PW_ALICE" --snapshotter pullgate "$HPRIV"
check_out "and runs it" "$LEAK" run_img E0 e0 "$HPRIV"
kill "$PG_PID"; wait "$PG_PID" 2>/dev/null
# The ledger's record of the chain of layer 3 (parent chain, diffID; postcard behind a format
# byte) gets an unknown format byte: it cannot be decoded, the rest of the database is intact.
nrec=$(python3 - "$PG/root/metadata.redb" "${CH[2]}" "${DIFF[3]}" <<'PY'
import sys
path, parent, diff = sys.argv[1:]
pat = bytes([len(parent)]) + parent.encode() + bytes([len(diff)]) + diff.encode()
with open(path, "r+b") as f:
    data = bytearray(f.read())
    n, i = 0, data.find(pat)
    while i > 0:
        if data[i - 1] == 1:
            data[i - 1] = 0xEE
            n += 1
        i = data.find(pat, i + 1)
    f.seek(0); f.write(data)
print(n)
PY
)
check "the chain record of layer 3 was found in the database and damaged ($nrec cop(ies))" test "${nrec:-0}" -ge 1
start_pullgate "$PG" || exit 1
wait_backend
check_refused "E1, holding a grant, cannot unpack layer 3: the ledger cannot be read, so the extract is denied" "ledger cannot be read" "$LEAK" \
  ctr_ -n E1 images pull "${CTRF[@]}" --user "alice:$PW_ALICE" --snapshotter pullgate "$HPRIV"
check_err "E1 holds no snapshot of that chain" "not found" ctr_ -n E1 snapshots --snapshotter pullgate info "${CH[3]}"

log "a metadata database that cannot be opened: pullgate refuses to start, so nothing unpacks or runs"
kill "$PG_PID"; wait "$PG_PID" 2>/dev/null
python3 - "$PG/root/metadata.redb" <<'PY'
import os, sys
p = sys.argv[1]; n = os.path.getsize(p)
with open(p, "r+b") as f:
    for off in range(4096, n, 4096):
        f.seek(off); f.write(b"\xde\xad\xbe\xef" * 64)
PY
"$PG_BIN" serve --config "$PG/config.toml" >>"$PG/log" 2>&1 &
PG_PID=$!; PIDS+=($PG_PID)
if wait_for 20 not kill -0 "$PG_PID"; then
  wait "$PG_PID"; rc=$?
  check "pullgate exited with an error status ($rc) instead of serving" test "$rc" -ne 0
else
  fail "pullgate is still running on a damaged metadata database (socket: $(ls "$PG"/*.sock 2>&1 | paste -sd' '))"
fi
check "its snapshotter socket is gone" test ! -e "$PG/snapshotter.sock"
check_has "its log says why, naming the metadata database" "metadata database" tail -5 "$PG/log"
check_refused "A's run fails: containerd cannot reach the snapshotter" "unavailable|connection refused|no such file|error while dialing" "$LEAK" \
  run_img A a9 "$HPRIV"

summary "e2e gate (containerd $V)"
