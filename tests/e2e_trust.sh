#!/usr/bin/env bash
# End-to-end: what the gate may believe (DESIGN.md, "What the gate may believe"). Every fact a
# decision rests on must have been established by pullgate itself; each section below is an
# attack that feeds the gate a claim instead, and asserts that it is refused:
#   1. a config whose rootfs.diff_ids claim another tenant's layers over the attacker's blobs;
#   2. a snapshot filled by hand and relabelled containerd.io/snapshot.ref=<a public chain>;
#   3. a snapshot filled by hand under an extract key and a chain's name;
#   4. an extract of a protected layer on a made-up parent chain;
#   5. a containerd.io/snapshot.ref label on a container's rootfs Prepare (principal bypass);
#   6. an origin recorded by the name asked for, not the endpoint that answered (hosts.toml);
#   7. a denial naming another tenant's repository.
# Real containerd of the given version configured from plugin/, real registries (anonymous,
# htpasswd, token auth), an attacker's registry (tests/evilregistry.py), images from
# tests/mkimage.py; driven by ctr and the pullgate CLI. Every setup step (pushes, the victims'
# own pulls and runs, the attacker's preparation) passes on a pullgate without these defences
# too, so that only the attack assertions fail there. About 15 s per containerd version.
# Usage: tests/e2e_trust.sh VERSION
source "$(dirname "$0")/lib.sh"
V=${1:?usage: e2e_trust.sh 1.6|1.7|2.1}
trap cleanup EXIT
PW_ALICE=alice-Trust-5v8n
PW_BOB=bob-Trust-2k7w
PW_ADMIN=admin-Trust-9c4p
PWNED="pwned by tenant B"
DENIED='pullgate denied namespace'
PL=containerd.io/snapshot/pullgate.principal
REFL=containerd.io/snapshot.ref

log "containerd $V (trust): setup"
mk() { python3 "$REPO/tests/mkimage.py" "$@" >/dev/null; }
# The public image, and two public images whose base layers no other image shares (sections
# 2a and 3 need a chain that nobody has unpacked yet).
mk "$WORK/pub" --tag v1 --message "public base image"
mk "$WORK/pubfresh" --tag v1 --message "public fresh image" --base-note "fresh base for 2a"
mk "$WORK/pub3" --tag v1 --message "public image three" --base-note "fresh base for 3"
# A's private images: one for sections 4, 5 and 7, one on the token registry for section 6, one
# per sub-attack of section 1 (each with its own protected layers, so that what one sub-attack
# does to the ledger cannot decide another's outcome).
mk "$WORK/priv" --tag v1 --message "private app" --extra-layers 1 --layer-mb 0.2 --seed 11
mk "$WORK/tpriv" --tag v1 --message "private app (token registry)" --extra-layers 1 --layer-mb 0.1 --seed 13
for s in a b c d; do mk "$WORK/victim-1$s" --tag v1 --message "private app (victim 1$s)"; done
start_registry pub || exit 1
start_registry h htpasswd alice "$PW_ALICE" || exit 1
cat > "$WORK/acl.json" <<JSON
{"users": {"alice": "$PW_ALICE", "admin": "$PW_ADMIN"},
 "access": {"alice": ["private/*"], "admin": ["*"]},
 "push": ["admin"]}
JSON
start_token_registry t "$WORK/acl.json" || exit 1
# The attacker's own registries: anonymous, and htpasswd with its own user bob.
start_registry bpub || exit 1
start_registry bh htpasswd bob "$PW_BOB" || exit 1
PUB=$REG_pub/public/base:v1
PUBFRESH=$REG_pub/public/fresh:v1
PUB3=$REG_pub/public/three:v1
HPRIV=$REG_h/private/app:v1
TPRIV=$REG_t/private/app:v1
push_image "$WORK/pub" v1 "$PUB" && push_image "$WORK/pubfresh" v1 "$PUBFRESH" && push_image "$WORK/pub3" v1 "$PUB3" \
  && push_image "$WORK/priv" v1 "$HPRIV" "alice:$PW_ALICE" && push_image "$WORK/tpriv" v1 "$TPRIV" "admin:$PW_ADMIN" \
  || { fail "push test images"; exit 1; }
for s in a b c d; do
  push_image "$WORK/victim-1$s" v1 "$REG_h/private/victim-1$s:v1" "alice:$PW_ALICE" || { fail "push victim 1$s"; exit 1; }
done
pass "test images pushed"
PG=$WORK/pullgate
pullgate_config "$PG"
start_pullgate "$PG" || exit 1
start_containerd "$V" "$PG/snapshotter.sock" || exit 1
wait_backend
check_containerd_version "$V"
pg() { local sub=$1; shift; "$PG_BIN" "$sub" --address "$PG/api.sock" "$@"; }
# run_img NS ID [ctr run flags...] IMAGE: runs IMAGE's own command. run_cmd NS ID IMAGE CMD...
run_img() { local ns=$1 id=$2; shift 2; ctr_ -n "$ns" run --rm --snapshotter pullgate "$@" "$id"; }
run_cmd() { local ns=$1 id=$2 img=$3; shift 3; ctr_ -n "$ns" run --rm --snapshotter pullgate "$img" "$id" "$@"; }
snap() { local ns=$1; shift; ctr_ -n "$ns" snapshots --snapshotter pullgate "$@"; }

# victim_run TAG WANT NS ID IMAGE: a victim runs IMAGE with `cat /msg; cat /pwned`. Two checks
# on that one run: its container shows WANT (the image's own /msg), and it shows WANT and
# nothing of what B wrote into a snapshot by hand (/pwned's text, B's /msg).
victim_run() {
  local t=$1 want=$2 ns=$3 id=$4 img=$5 out rc
  out=$(run_cmd "$ns" "$id" "$img" sh -c 'cat /msg; cat /pwned' 2>&1); rc=$?
  if grep -qF -- "$want" <<<"$out"; then pass "$t: $ns's container shows the public image's /msg"
  else fail "$t: $ns's container shows the public image's /msg (rc=$rc, want '$want', got: $(head -c 600 <<<"$out"))"; fi
  if grep -qF -- "$want" <<<"$out" && ! grep -qF -- "$PWNED" <<<"$out" && ! grep -qF "poisoned by" <<<"$out"; then
    pass "$t: $ns's container does not see B's /pwned (nor B's /msg)"
  else fail "$t: $ns's container does not see B's /pwned (nor B's /msg) (rc=$rc, got: $(head -c 600 <<<"$out"))"; fi
}
# still_protected DESC DIFFID: `pullgate inspect DIFFID` works and calls the layer protected.
still_protected() { check_out "$1" "layer $2 protected" pg inspect "$2"; }
# layout_diffids DIR: the diffIDs an OCI layout's config lists, comma-separated.
layout_diffids() {
  python3 - "$1" <<'PY'
import json, sys
d = sys.argv[1]
blob = lambda dg: json.load(open(f"{d}/blobs/sha256/{dg.split(':', 1)[1]}"))
idx = json.load(open(f"{d}/index.json"))
m = blob(idx["manifests"][0]["digest"])
print(",".join(blob(m["config"]["digest"])["rootfs"]["diff_ids"]))
PY
}
layout_manifest() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]+"/index.json"))["manifests"][0]["digest"])' "$1"; }
# import_layout NS DIR NAME: imports the OCI layout's image into NS as NAME, without unpacking.
import_layout() {
  local ns=$1 dir=$2 name=$3 t; t=$(mktemp -d "$WORK/import.XXXXXX")
  cp -r "$dir/blobs" "$t/" && echo '{"imageLayoutVersion":"1.0.0"}' > "$t/oci-layout"
  python3 - "$dir/index.json" "$name" > "$t/index.json" <<'PY' || return 1
import json, sys
idx = json.load(open(sys.argv[1]))
e = idx["manifests"][0]
e["annotations"] = {"io.containerd.image.name": sys.argv[2], "org.opencontainers.image.ref.name": "v1"}
print(json.dumps({"schemaVersion": 2, "manifests": [e]}))
PY
  tar -C "$t" -cf "$t.tar" . && ctr_ -n "$ns" images import --no-unpack --snapshotter pullgate "$t.tar" >/dev/null 2>&1
}
# steal_image NS MANIFEST NAME: the digest-adoption attack (DESIGN.md; steal_blob in lib.sh): NS
# takes the manifest, config and layers from the shared content store by digest alone, reads
# them, and imports them as image NAME without unpacking.
steal_image() {
  local ns=$1 md=$2 name=$3 dir d; dir=$(mktemp -d "$WORK/stolen.XXXXXX")
  mkdir -p "$dir/blobs/sha256"
  steal_blob "$ns" "$md" "$dir/blobs/sha256/${md#sha256:}" || return 1
  for d in $(python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); print(" ".join([m["config"]["digest"]]+[l["digest"] for l in m["layers"]]))' "$dir/blobs/sha256/${md#sha256:}"); do
    steal_blob "$ns" "$d" "$dir/blobs/sha256/${d#sha256:}" || return 1
  done
  printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%s","size":%s}]}' \
    "$md" "$(stat -c %s "$dir/blobs/sha256/${md#sha256:}")" > "$dir/index.json"
  import_layout "$ns" "$dir" "$name"
}
# fill_snapshot NS KEY: mounts active snapshot KEY the way `ctr snapshots mounts` says, writes a
# working rootfs (busybox, so that a victim's container built on it starts and would show the
# files) with /pwned and a /msg of the attacker's, and unmounts it.
fill_snapshot() {
  local ns=$1 key=$2 dir cmd a; dir=$(mktemp -d "$WORK/mnt.XXXXXX")
  cmd=$(snap "$ns" mounts "$dir" "$key") || return 1
  eval "$cmd" || return 1
  mkdir -p "$dir/bin" "$dir/etc" "$dir/tmp" && cp /bin/busybox "$dir/bin/busybox" &&
    for a in sh cat ls echo true sleep; do ln -sf busybox "$dir/bin/$a"; done &&
    echo "$PWNED" > "$dir/pwned" && echo "poisoned by tenant B" > "$dir/msg"
  local rc=$?
  umount "$dir" || return 1
  return $rc
}

# The public image's layers are public (pulled anonymously) before anyone else pulls them:
# PUBA's pull unpacks the shared base chain first, everyone else's pull adopts it.
check "PUBA: pullgate pull (anonymous) of the public image" pg pull -n PUBA --plain-http "$PUB"
check_out "PUBA runs it" "public base image" run_img PUBA puba1 "$PUB"
check "A: pullgate pull --user alice of the private image (htpasswd registry)" pg pull -n A --plain-http --user "alice:$PW_ALICE" "$HPRIV"
check_out "A runs it" "private app" run_img A a1 "$HPRIV"
check "A: pullgate pull --user alice of the private image on the token registry" pg pull -n A --plain-http --user "alice:$PW_ALICE" "$TPRIV"
check_out "A runs that one" "private app (token registry)" run_img A a2 "$TPRIV"
for s in a b c d; do
  check "A: pullgate pull --user alice of victim-1$s" pg pull -n A --plain-http --user "alice:$PW_ALICE" "$REG_h/private/victim-1$s:v1"
done
check_out "pullgate inspect marks the private image's own layers protected" "protected" pg inspect "$HPRIV"

log "1. forged layer IDs: B's config claims A's diffIDs over B's own layer blobs"
# forged S: B builds its image with A's victim-1S diffIDs in its config (read with inspect) and
# its own /msg layer; pushes it to its anonymous registry (a, c, d) or its htpasswd one (b).
declare -A FORGED TOP
for s in a b c d; do
  claims=$(pg inspect "$REG_h/private/victim-1$s:v1" | grep -o 'diffID sha256:[0-9a-f]*' | cut -d' ' -f2 | paste -sd, -)
  TOP[$s]=${claims##*,}
  mk "$WORK/forged-1$s" --tag v1 --message "attacker 1$s" --claim-diff-ids "$claims"
  if [ "$s" = b ]; then
    FORGED[$s]=$REG_bh/b/forged-1$s:v1; push_image "$WORK/forged-1$s" v1 "${FORGED[$s]}" "bob:$PW_BOB"
  else
    FORGED[$s]=$REG_bpub/b/forged-1$s:v1; push_image "$WORK/forged-1$s" v1 "${FORGED[$s]}"
  fi || fail "push B's forged image 1$s"
done
check "B's forged configs claim A's diffIDs (4 of them, the top one A's private layer)" \
  test "$(layout_diffids "$WORK/forged-1a")" = "$(layout_diffids "$WORK/victim-1a")" -a -n "${TOP[a]}"
check "while B's manifests list B's own top layer blob, not A's" \
  test "$(pg inspect "$REG_h/private/victim-1a:v1" | awk '/layer 3:/{print $3}')" != \
       "$(python3 -c 'import json,sys; d=sys.argv[1]; m=json.load(open(d+"/blobs/sha256/"+sys.argv[2][7:])); print(m["layers"][3]["digest"])' "$WORK/forged-1a" "$(layout_manifest "$WORK/forged-1a")")"
REFUSED_FORGED() { printf '%s "%s"|wrong diff ?id' "$DENIED" "$1"; }
# after_forged S NS: B makes sure the forged image is in NS (its own bytes, imported without
# unpacking, whatever the attempt before left), then runs it and cat /msg; neither may show A's
# text. Then A's layer must still be protected, NS must still be refused A's own image taken by
# digest, and A still runs its image.
after_forged() {
  local s=$1 ns=$2
  check "1$s: B imports its own forged image into $ns (no unpack)" import_layout "$ns" "$WORK/forged-1$s" "${FORGED[$s]}"
  check_refused "1$s: $ns's run of the forged image is refused and shows nothing of A's" "$(REFUSED_FORGED "$ns")" "private app" run_img "$ns" "f1$s" "${FORGED[$s]}"
  settle_gc "$ns"
  check_refused "1$s: $ns's run of cat /msg in it is refused too" "$(REFUSED_FORGED "$ns")" "private app" run_cmd "$ns" "g1$s" "${FORGED[$s]}" cat /msg
  settle_gc "$ns"
  still_protected "1$s: pullgate inspect of A's top diffID still says protected" "${TOP[$s]}"
  # What the attempt may have taught the gate about A's layers must not open them to anyone:
  # the digest-adoption attack on A's own image is still refused in $ns.
  check "1$s: $ns takes victim-1$s's blobs by digest and imports them as stolen.example/victim-1$s:v1" \
    steal_image "$ns" "$(layout_manifest "$WORK/victim-1$s")" "stolen.example/victim-1$s:v1"
  check_refused "1$s: $ns's run of A's own image (adopted by digest) is refused" "$DENIED \"$ns\"" "private app" \
    run_img "$ns" "s1$s" "stolen.example/victim-1$s:v1"
  settle_gc "$ns"
  check_out "1$s: A still runs victim-1$s" "private app (victim 1$s)" run_img A "a1$s" "$REG_h/private/victim-1$s:v1"
}

log "1a. pullgate pull -n B1a of the forged image from B's anonymous registry"
check_err "1a: pullgate pull fails: the config's claims do not match the layers" "config claims" pg pull -n B1a --plain-http "${FORGED[a]}"
check_no_grants "1a: no grant was recorded for B1a" B1a
settle_gc B1a
after_forged a B1a

log "1b. pullgate pull -n B1b --user bob of the forged image from B's own htpasswd registry"
check_err "1b: pullgate pull fails: the config's claims do not match the layers" "config claims" pg pull -n B1b --plain-http --user "bob:$PW_BOB" "${FORGED[b]}"
check_no_grants "1b: no grant was recorded for B1b" B1b
settle_gc B1b
after_forged b B1b

log "1c. pullgate verify -n B1c, then plain ctr pull of the forged image"
# containerd 1.6/1.7's ctr pull and ctr run unpack without a snapshot.ref label: they never
# adopt, so each layer is extracted and containerd's own diffID check refuses B's blob ("wrong
# diff id") if the gate lets it through. 2.1's unpacker sets the label and adopts A's chain.
check_err "1c: pullgate verify fails: the config's claims do not match the layers" "config claims" pg verify -n B1c --plain-http "${FORGED[c]}"
check_no_grants "1c: no grant was recorded for B1c" B1c
check_refused "1c: the ctr pull that follows is refused at unpack" "$(REFUSED_FORGED B1c)" "" \
  ctr_ -n B1c images pull --plain-http --snapshotter pullgate "${FORGED[c]}"
settle_gc B1c
after_forged c B1c

log "1d. plain ctr pull -n B1d of the forged image (no pullgate CLI)"
# The gate is asked (Prepare) before containerd applies a layer and checks its diffID: the
# forged top chain is A's protected chain, so the gate's refusal is what B sees.
check_refused "1d: plain ctr pull is refused at unpack" "$(REFUSED_FORGED B1d)" "" \
  ctr_ -n B1d images pull --plain-http --snapshotter pullgate "${FORGED[d]}"
settle_gc B1d
after_forged d B1d

log "2. snapshot poisoning: B fills a snapshot by hand and labels it snapshot.ref=<a public chain>"
# poison TAG NAME DIFFID: B prepares a parentless snapshot, fills it (busybox, /pwned, /msg),
# commits it as NAME and labels it as if it were the unpacked chain DIFFID (a base layer's
# chainID is its diffID). The labels are set after the commit: ctr's commit carries none.
poison() {
  local t=$1 name=$2 d=$3
  check "$t: B prepares snapshot $name-key" snap B prepare "$name-key" ""
  check "$t: B pins it (gc.root)" snap B label "$name-key" containerd.io/gc.root=attacker
  check "$t: B mounts it and writes busybox, /pwned and /msg into it" fill_snapshot B "$name-key"
  check "$t: B commits it as $name" snap B commit "$name" "$name-key"
  check "$t: B labels $name $REFL=$d (the public image's base chain)" snap B label "$name" "$REFL=$d" containerd.io/gc.root=attacker
}
FRESH=$(layout_diffids "$WORK/pubfresh"); FRESH=${FRESH%%,*}
log "2a. the public image was never pulled by anyone"
poison 2a poisoned "$FRESH"
check "2a: V: pullgate pull of the public image" pg pull -n V --plain-http "$PUBFRESH"
victim_run 2a "public fresh image" V v2a "$PUBFRESH"

log "2b. the public image was already pulled (by PUBA) before B's poisoned snapshot appeared"
# containerd adopts the first committed snapshot the backend's Walk returns with the label and
# parent asked for; backend keys are <namespace>/<seq>/<name>, so B's snapshot comes before
# PUBA's (the only other holder of this chain: every other namespace adopted PUBA's).
STD=$(layout_diffids "$WORK/pub"); STD=${STD%%,*}
poison 2b poisoned2 "$STD"
check "2b: V2: pullgate pull of the public image" pg pull -n V2 --plain-http "$PUB"
victim_run 2b "public base image" V2 v2b "$PUB"
check "2b: V2c: plain ctr pull of the public image" ctr_ -n V2c images pull --plain-http --snapshotter pullgate "$PUB"
victim_run 2b "public base image" V2c v2c "$PUB"

log "3. B fills an extract snapshot by hand and commits it under the chain's name"
F3=$(layout_diffids "$WORK/pub3"); F3=${F3%%,*}
check "3: B prepares 'extract-1 $F3'" snap B prepare "extract-1 $F3" ""
check "3: B labels it $REFL=<that chain> (and pins it)" snap B label "extract-1 $F3" "$REFL=$F3" containerd.io/gc.root=attacker
check "3: B mounts it and writes busybox, /pwned and /msg into it" fill_snapshot B "extract-1 $F3"
check "3: B commits it as $F3" snap B commit "$F3" "extract-1 $F3"
check "3: B labels the committed snapshot $REFL=$F3 (and pins it)" snap B label "$F3" "$REFL=$F3" containerd.io/gc.root=attacker
check "3: W1: pullgate pull of the public image" pg pull -n W1 --plain-http "$PUB3"
victim_run 3 "public image three" W1 w1 "$PUB3"
check "3: W2: plain ctr pull of the public image" ctr_ -n W2 images pull --plain-http --snapshotter pullgate "$PUB3"
victim_run 3 "public image three" W2 w2 "$PUB3"

log "4. an extract of A's protected layer on a made-up parent chain"
PROT=$(pg inspect "$HPRIV" | awk '/^  layer [0-9]+: .* protected$/ {print $5; exit}' | tr -d '()')
MADE=sha256:$(printf 'a chain B made up' | sha256sum | cut -d' ' -f1)
T=sha256:$(printf '%s %s' "$MADE" "$PROT" | sha256sum | cut -d' ' -f1)
check "4: A's first protected layer is found (${PROT:0:19}...)" grep -qE '^sha256:[0-9a-f]{64}$' <<<"$PROT"
check "4: B prepares snapshot x (no parent)" snap B prepare x ""
check "4: B pins it" snap B label x containerd.io/gc.root=attacker
check "4: B commits it as the made-up chain ${MADE:0:19}..." snap B commit "$MADE" x
check "4: B pins that" snap B label "$MADE" containerd.io/gc.root=attacker
check_err "4: B's Prepare('extract-2 chainID(made-up, A's protected diffID)', made-up) is refused" "$DENIED \"B\"" \
  snap B prepare "extract-2 $T" "$MADE"
out=$(snap B ls 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q '^KEY' <<<"$out" && ! grep -qF "extract-2 $T" <<<"$out"; then pass "4: ctr snapshots ls works and shows no such snapshot in B"
else fail "4: snapshots ls: rc=$rc: $(head -c 600 <<<"$out")"; fi

log "5. a $REFL label on a container's rootfs Prepare does not bypass the principal check"
check "5: pullgate pull -n P --principal pod1" pg pull -n P --principal pod1 --plain-http --user "alice:$PW_ALICE" "$HPRIV"
check_out "5: pod1 runs it" "private app" run_img P p1 --snapshotter-label "$PL=pod1" "$HPRIV"
check_refused "5: pod2 is refused (no grant for pod2)" "$DENIED \"P\" \\(principal \"pod2\"\\)" "private app" run_img P p2 --snapshotter-label "$PL=pod2" "$HPRIV"
ANY=sha256:$(printf 'anything' | sha256sum | cut -d' ' -f1)
check_refused "5: pod2 with --snapshotter-label $REFL=sha256:<anything> is refused too" "$DENIED \"P\" \\(principal \"pod2\"\\)" "private app" \
  run_img P p3 --snapshotter-label "$PL=pod2" --snapshotter-label "$REFL=$ANY" "$HPRIV"
check_out "5: pod1 still runs it" "private app" run_img P p5 --snapshotter-label "$PL=pod1" "$HPRIV"

log "6. an origin is the endpoint pullgate talked to, not the name it was asked for"
H=$REG_t
TMD=$(layout_manifest "$WORK/tpriv")
# B's registry serves A's manifest bytes under private/evil and says yes to every blob HEAD.
_launch_evil() {
  /usr/bin/python3 "$REPO/tests/evilregistry.py" --port "$PORT_1" --mode vouch --repo private/evil --tag v1 \
    --manifest "$WORK/tpriv/blobs/sha256/${TMD#sha256:}" --log "$WORK/evil.log" &
  PIDS+=($!); LAUNCHED+=($!)
  wait_serving 10 curl -sf "http://127.0.0.1:$PORT_1/v2/"
}
launch_on_free_ports 1 _launch_evil || { fail "start the attacker's registry"; exit 1; }
EVPORT=$PORT_1
# containerd 1.6's ctr rejects a hosts.toml with only `server` ("invalid `host` tree") and then
# quietly uses the default endpoint, the real registry: give it a [host] table for the same URL.
mkdir -p "$WORK/bhosts/$H"
printf 'server = "http://127.0.0.1:%s"\n[host."http://127.0.0.1:%s"]\n  capabilities = ["pull", "resolve"]\n' "$EVPORT" "$EVPORT" \
  > "$WORK/bhosts/$H/hosts.toml"
check "6: the evil registry vouches for A's blobs (HEAD 200) but serves none (GET 404)" bash -c \
  "curl -sfI 'http://127.0.0.1:$EVPORT/v2/private/evil/blobs/$TMD' >/dev/null && ! curl -sf 'http://127.0.0.1:$EVPORT/v2/private/evil/blobs/$TMD' >/dev/null"
check_err "6: pullgate verify -n B6 --hosts-dir (H -> evil endpoint) $H/private/evil:v1 fails" "not found" \
  pg verify -n B6 --hosts-dir "$WORK/bhosts" --plain-http "$H/private/evil:v1"
check_no_grants "6: no grant was recorded for B6" B6
out=$(pg inspect "$TMD" 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -qF "$H/private/app" <<<"$out" && ! grep -qF "$H/private/evil" <<<"$out"; then pass "6: pullgate inspect of A's manifest lists no origin $H/private/evil"
else fail "6: inspect $TMD: rc=$rc: $(grep -F 'origins' <<<"$out" | head -c 600)"; fi
nprot=$(pg inspect "$TPRIV" | grep -c '^  layer .* protected$')
check "6: A's token-registry image still has its 2 protected layers ($nprot)" test "$nprot" -eq 2
check_refused "6: B6's plain ctr pull through the evil endpoint is refused at unpack" "$DENIED \"B6\"" "" \
  ctr_ -n B6 images pull --hosts-dir "$WORK/bhosts" --snapshotter pullgate "$H/private/evil:v1"
settle_gc B6
check "6: B6 takes A's blobs by digest and imports them as stolen.example/tapp:v1" steal_image B6 "$TMD" stolen.example/tapp:v1
check_refused "6: B6's run of A's image is refused and shows nothing of it" "$DENIED \"B6\"" "private app" run_img B6 b6a stolen.example/tapp:v1
settle_gc B6
check_out "6: A still runs its token-registry image" "private app (token registry)" run_img A a6 "$TPRIV"

log "7. a denial names only what the requester asked for"
HMD=$(layout_manifest "$WORK/priv")
check "7: B takes A's blobs by digest and imports them as stolen.example/app:v1" steal_image B "$HMD" stolen.example/app:v1
out=$(run_img B b7 stolen.example/app:v1 2>&1); rc=$?
check "7: B's run of it is refused and shows nothing of A's (rc=$rc)" bash -c "[ $rc -ne 0 ] && ! grep -qF 'private app' <<<\"\$1\"" _ "$out"
check "7: the refusal says '$DENIED \"B\"'" grep -qF "$DENIED \"B\"" <<<"$out"
check "7: the refusal gives the fix 'pullgate verify -n B'" grep -qF "pullgate verify -n B" <<<"$out"
if grep -qF "private/app" <<<"$out"; then fail "7: the refusal names A's repository private/app: $(grep -oE "$DENIED.{0,400}" <<<"$out" | head -1)"
else pass "7: the refusal does not name A's repository private/app"; fi
settle_gc B
check_out "7: A still runs its image" "private app" run_img A a7 "$HPRIV"

log "secrets: no password, Basic credential or bearer token in pullgate's files and log, nor in containerd's"
PATS=$WORK/secret-patterns
: > "$PATS"
for up in "alice:$PW_ALICE" "bob:$PW_BOB" "admin:$PW_ADMIN"; do
  printf '%s\n' "${up#*:}" >> "$PATS"                       # the password
  printf '%s' "$up" | base64 -w0 >> "$PATS"; echo >> "$PATS"  # "user:password" as a Basic header carries it
done
ntok=$(grep -c . "$WORK/registry-t/tokens.log")
awk '{n = split($2, a, "."); print a[n]}' "$WORK/registry-t/tokens.log" >> "$PATS"   # each token's signature
check "the token server recorded the tokens it issued ($ntok), and pullgate's log and root exist" \
  test "$ntok" -gt 0 -a -s "$PG/log" -a -d "$PG/root" -a -d "$WORK/containerd/root"
leak=$(grep -rlaF -D skip -f "$PATS" "$PG" "$WORK/containerd" 2>/dev/null | head -5)
check "none of them under pullgate's root, config or log, or containerd's root, state or log (found in: ${leak:-none})" test -z "$leak"

summary "e2e trust (containerd $V)"
