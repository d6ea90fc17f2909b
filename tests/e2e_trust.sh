#!/usr/bin/env bash
# End-to-end: what the gate may believe (docs/threat-model.md). Every fact a
# decision rests on must have been established by pullgate itself; each section below is an
# attack that feeds the gate a claim instead, and asserts that it is refused:
#   1. a config whose rootfs.diff_ids claim another tenant's layers over the attacker's blobs;
#   2. a snapshot filled by hand and relabelled containerd.io/snapshot.ref=<a public chain>;
#   3. a snapshot filled by hand under an extract key and a chain's name;
#   4. an extract of a protected layer on a made-up parent chain;
#   5. a containerd.io/snapshot.ref label on a container's rootfs Prepare (principal bypass);
#   6. an origin recorded by the name asked for, not the endpoint that answered (hosts.toml);
#      6b: one registry's answers through a proxy for several vouching for another's blobs;
#   7. a denial naming another tenant's repository;
#   8. tenant-controlled request arguments: a --hosts-dir hosts.toml that is a symlink to a secret,
#      a directory, a FIFO, over 64 KiB or carries TLS settings; an image name pulled from
#      another endpoint (recorded under that name); a refusal naming the first image recorded
#      with the manifest (another tenant's repository); a decompression bomb layer, also one its
#      manifest declares as a 3 GiB layer, and an image of many small ones.
# Real containerd of the given version configured from plugin/, real registries (anonymous,
# htpasswd, token auth), an attacker's registry (tests/evilregistry.py), images from
# tests/mkimage.py; driven by ctr and the pullgate CLI. Every setup step (pushes, the victims'
# own pulls and runs, the attacker's preparation) passes on a pullgate without these defences
# too, so that only the attack assertions fail there. About 30 s per containerd version.
# With CONTROL=1, the positive controls instead (after the same setup): the daemon is
# target/release/pullgate-defence-off (cargo build --release --features defence-off --bin
# pullgate-defence-off), restarted with one defence off at a time, and the attacks of sections
# 1 (2.x), 2a, 2b, 3, 4 and 7 must succeed.
# Usage: [CONTROL=1] tests/e2e_trust.sh VERSION
source "$(dirname "$0")/lib.sh"
V=${1:?usage: e2e_trust.sh 1.6|1.7|2.1|2.4}
if [ -n "${CONTROL:-}" ]; then
  PG_SERVE_BIN=$REPO/target/release/pullgate-defence-off
  [ -x "$PG_SERVE_BIN" ] || { fail "$PG_SERVE_BIN is not built (cargo build --release --locked --features defence-off --bin pullgate-defence-off)"; summary "e2e trust, positive controls (containerd $V)"; exit 1; }
fi
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
  else fail "$t: $ns's container shows the public image's /msg (rc=$rc, want '$want', got: $(shown 600 "$out"))"; fi
  if grep -qF -- "$want" <<<"$out" && ! grep -qF -- "$PWNED" <<<"$out" && ! grep -qF "poisoned by" <<<"$out"; then
    pass "$t: $ns's container does not see B's /pwned (nor B's /msg)"
  else fail "$t: $ns's container does not see B's /pwned (nor B's /msg) (rc=$rc, got: $(shown 600 "$out"))"; fi
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
  local tar; tar=$(layout_tar "$2" "$3") && ctr_ -n "$1" images import --no-unpack --snapshotter pullgate "$tar" >/dev/null 2>&1
}
# steal_image NS MANIFEST NAME: the digest-adoption attack (docs/threat-model.md; steal_blob in lib.sh): NS
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
# hand_fill TAG CHAIN: B prepares the extract snapshot of CHAIN (a base layer's chain) itself,
# labels it as that chain, fills it by hand (busybox, /pwned, /msg), commits it under the
# chain's name and labels that too.
hand_fill() {
  local t=$1 c=$2
  check "$t: B prepares 'extract-1 $c'" snap B prepare "extract-1 $c" ""
  check "$t: B labels it $REFL=<that chain> (and pins it)" snap B label "extract-1 $c" "$REFL=$c" containerd.io/gc.root=attacker
  check "$t: B mounts it and writes busybox, /pwned and /msg into it" fill_snapshot B "extract-1 $c"
  check "$t: B commits it as $c" snap B commit "$c" "extract-1 $c"
  check "$t: B labels the committed snapshot $REFL=$c (and pins it)" snap B label "$c" "$REFL=$c" containerd.io/gc.root=attacker
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
# Only pullgate's own refusal counts: containerd's "wrong diff id" (1.6 and 1.7 extract B's
# blob and compare its digest with the claim) would pass with the gate's extract check removed
# (seen: PG_RED=extract, where these checks failed on 1.6, 1.7 and 2.1).
REFUSED_FORGED() { printf '%s "%s"' "$DENIED" "$1"; }
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

# ---- the positive controls (CONTROL=1): each attack shown succeeding without its defence ----
# pullgate-defence-off (the daemon built with the cargo feature defence-off, src/defence.rs)
# restarted with one defence named in PULLGATE_DEFENCE_OFF; the same attacks as sections 1-4 and
# 7 then succeed, which shows that their refusals in the normal run are that defence's doing.
# defence_off NAME: restarts pullgate with defence NAME off (and only it); passes when its log
# says so.
defence_off() {
  kill -TERM "$PG_PID" 2>/dev/null; wait "$PG_PID" 2>/dev/null
  local from; from=$(wc -c < "$PG/log")
  PULLGATE_DEFENCE_OFF=$1 start_pullgate "$PG" && wait_backend
  check "control: pullgate-defence-off restarted with defence '$1' off (its log says so)" \
    bash -c 'tail -c +"$(($2 + 1))" "$1" | grep -qxF "pullgate-defence-off: a test build; defences turned off (PULLGATE_DEFENCE_OFF): $3"' _ "$PG/log" "$from" "$1"
}
controls() {
  log "control: the gate's grant check off (defence 'gate')"
  defence_off gate
  local hmd; hmd=$(layout_manifest "$WORK/priv")
  check "control gate (7, 1): BC takes A's blobs by digest and imports them as stolen.example/app:v1" steal_image BC "$hmd" stolen.example/app:v1
  check_out "control gate (7, 1): BC's run of A's image (adopted by digest) shows A's private /msg" "private app" run_img BC bc7 stolen.example/app:v1
  case $V in
    2.*) check "control gate (1d): plain ctr pull -n BC1d of B's forged image (containerd $V adopts the chains its config names)" \
           ctr_ -n BC1d images pull --plain-http --snapshotter pullgate "${FORGED[d]}"
         check_out "control gate (1d): BC1d's run of the forged image shows A's victim-1d /msg" "private app (victim 1d)" run_img BC1d bc1d "${FORGED[d]}" ;;
    *) na "control gate (1d): containerd $V's ctr pull never adopts a chain (it applies B's own blobs, and containerd refuses their diffIDs)" ;;
  esac

  log "control: chains any client committed offered for adoption (defence 'own-chains')"
  defence_off own-chains
  local fresh std f3
  fresh=$(layout_diffids "$WORK/pubfresh"); fresh=${fresh%%,*}
  poison c2a cpoisoned "$fresh"
  # Section 2's attacks meet two defences: with own-chains alone off, B's snapshot is adopted as
  # the base chain, and the next unpack step onto it is refused by the unestablished-parent one.
  check_err "control own-chains (2a): VC's pull adopts B's snapshot as its base and is refused on it by the unestablished-parent defence" \
    "$DENIED \"VC\".*cannot tell which layer is being applied" pg pull -n VC --plain-http "$PUBFRESH"
  f3=$(layout_diffids "$WORK/pub3"); f3=${f3%%,*}
  hand_fill "control own-chains (3)" "$f3"
  check "control own-chains (3): WC: pullgate pull of the public image" pg pull -n WC --plain-http "$PUB3"
  check_out "control own-chains (3): WC's container shows B's /pwned" "$PWNED" run_cmd WC wc3 "$PUB3" sh -c 'cat /msg; cat /pwned'

  log "control: both defences of section 2 off (own-chains and unestablished)"
  defence_off own-chains,unestablished
  check "control own-chains,unestablished (2a): VC2a: pullgate pull of the public image" pg pull -n VC2a --plain-http "$PUBFRESH"
  check_out "control own-chains,unestablished (2a): VC2a's container shows B's /pwned" "$PWNED" run_cmd VC2a vc2a "$PUBFRESH" sh -c 'cat /msg; cat /pwned'
  std=$(layout_diffids "$WORK/pub"); std=${std%%,*}
  poison c2b cpoisoned2 "$std"
  check "control own-chains,unestablished (2b): VC2b: plain ctr pull of the public image PUBA unpacked" ctr_ -n VC2b images pull --plain-http --snapshotter pullgate "$PUB"
  check_out "control own-chains,unestablished (2b): VC2b's container shows B's /pwned" "$PWNED" run_cmd VC2b vc2b "$PUB" sh -c 'cat /msg; cat /pwned'

  log "control: an unpack onto a parent pullgate cannot establish (defence 'unestablished')"
  defence_off unestablished
  local prot made t
  prot=$(pg inspect "$HPRIV" | awk '/^  layer [0-9]+: .* protected$/ {print $5; exit}' | tr -d '()')
  made=sha256:$(printf 'a chain B made up' | sha256sum | cut -d' ' -f1)
  t=sha256:$(printf '%s %s' "$made" "$prot" | sha256sum | cut -d' ' -f1)
  check "control unestablished (4): B prepares snapshot cx2 (no parent)" snap B prepare cx2 ""
  check "control unestablished (4): B commits it as 'cmade-up-parent' (no chainID)" snap B commit cmade-up-parent cx2
  check "control unestablished (4): B's Prepare('extract-3 chainID(made-up, A's protected diffID)', cmade-up-parent) is let through" \
    snap B prepare "extract-3 $t" cmade-up-parent

  log "control: a container's start decided again (defence 'mounts'; e2e_gate 10's refusal)"
  defence_off mounts
  check "control mounts (gate 10): A creates container cm1 (its rootfs prepared) while it holds the grant" \
    ctr_ -n A containers create --snapshotter pullgate "$HPRIV" cm1
  check_out "control mounts (gate 10): pullgate revoke -n A (after the create)" "revoked" pg revoke -n A
  check_out "control mounts (gate 10): the task start after the revoke runs and shows A's private /msg" "private app" \
    ctr_ -n A tasks start cm1
}
if [ -n "${CONTROL:-}" ]; then
  controls
  summary "e2e trust, positive controls (containerd $V, ${CONTENT_POLICY:-isolated} content store, pullgate-defence-off)"
  exit
fi

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
# adopt, so each layer is extracted and containerd's own diffID check would refuse B's blob
# ("wrong diff id") if the gate let it through; that is not the gate's refusal and does not
# count. 2.1's unpacker sets the label and adopts A's chain.
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
hand_fill 3 "$F3"
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
# A client's commit under a chainID-shaped name is taken as that chain (docs/how-it-decides.md): chain
# arithmetic then finds A's protected layer in the target, and B has no grant for it.
check_err "4: B's Prepare('extract-2 chainID(made-up, A's protected diffID)', made-up) is refused: no grant for A's layer" \
  "$DENIED \"B\".*no grant for this namespace covers this private layer" \
  snap B prepare "extract-2 $T" "$MADE"
# A parent whose chain pullgate cannot establish at all (committed by B under a name that is no
# chainID): the target cannot be checked against it, so nothing is unpacked onto it. The
# refusal must be the unestablished-parent one: a gate without that check finds no known layer
# in the target and lets the extract through under the default policy (seen: PG_RED=unestablished
# in a scratch build, where this check failed).
check "4: B prepares snapshot x2 (no parent)" snap B prepare x2 ""
check "4: B pins it" snap B label x2 containerd.io/gc.root=attacker
check "4: B commits it as 'made-up-parent' (no chainID)" snap B commit made-up-parent x2
check "4: B pins that" snap B label made-up-parent containerd.io/gc.root=attacker
check "4: containerd holds it as a committed snapshot (the parent the extract names exists)" \
  bash -c "$(printf '%q ' "${CTR[@]}") -n B snapshots --snapshotter pullgate info made-up-parent | grep -q '\"Kind\": \"Committed\"'"
check_err "4: B's Prepare('extract-3 chainID(made-up, A's protected diffID)', made-up-parent) is refused: pullgate cannot tell which layer is applied" \
  "$DENIED \"B\".*cannot tell which layer is being applied" \
  snap B prepare "extract-3 $T" made-up-parent
out=$(snap B ls 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q '^KEY' <<<"$out" && ! grep -qF "extract-2 $T" <<<"$out" && ! grep -qF "extract-3 $T" <<<"$out"; then pass "4: ctr snapshots ls works and shows neither extract snapshot in B"
else fail "4: snapshots ls: rc=$rc: $(shown 600 "$out")"; fi

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
mark6=$(wc -l < "$WORK/evil.log")
check_err "6: pullgate verify -n B6 --hosts-dir (H -> evil endpoint) $H/private/evil:v1 fails" "not found" \
  pg verify -n B6 --hosts-dir "$WORK/bhosts" --plain-http "$H/private/evil:v1"
# queries_since LINE: the query strings of the manifest requests the endpoint logged after LINE.
queries_since() { tail -n +"$(($1 + 1))" "$WORK/evil.log" | grep '/manifests/' | grep -o '?.*' | sort -u | tr '\n' ' '; }
pgq=$(queries_since "$mark6")
check_no_grants "6: no grant was recorded for B6" B6
out=$(pg inspect "$TMD" 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -qF "$H/private/app" <<<"$out" && ! grep -qF "$H/private/evil" <<<"$out"; then pass "6: pullgate inspect of A's manifest lists no origin $H/private/evil"
else fail "6: inspect $TMD: rc=$rc: $(grep -F 'origins' <<<"$out" | head -c 600)"; fi
nprot=$(pg inspect "$TPRIV" | grep -c '^  layer .* protected$')
check "6: A's token-registry image still has its 2 protected layers ($nprot)" test "$nprot" -eq 2
# Under the shared store containerd adopts A's blobs by digest and pullgate refuses the unpack;
# under the isolated one B6's namespace holds none of them and the evil endpoint serves none:
# containerd refuses it itself, with or without pullgate, so it is labelled as containerd's; the
# gate's refusal of the same attack is the run of A's image taken by digest just below.
if [ "${CONTENT_POLICY:-isolated}" = isolated ]; then
  evil_pull="could not fetch content descriptor .* not found"; who="containerd's isolated store, not pullgate"
else evil_pull="$DENIED \"B6\""; who="shared store: pullgate's refusal"; fi
mark6=$(wc -l < "$WORK/evil.log")
check_refused "6: B6's plain ctr pull through the evil endpoint is refused ($who)" "$evil_pull" "" \
  ctr_ -n B6 images pull --hosts-dir "$WORK/bhosts" --snapshotter pullgate "$H/private/evil:v1"
# An endpoint that is not the registry named (a mirror, a proxy) is told which registry it
# stands for, by pullgate as by containerd: the same ?ns= on every manifest request.
ctrq=$(queries_since "$mark6")
check "6: pullgate told the endpoint it stood for $H as containerd did (pullgate: ${pgq:-none}; ctr: ${ctrq:-none})" \
  test "$pgq" = "?ns=${H/:/%3A} " -a "$ctrq" = "$pgq"
settle_gc B6
check "6: B6 takes A's blobs by digest and imports them as stolen.example/tapp:v1" steal_image B6 "$TMD" stolen.example/tapp:v1
check_refused "6: B6's run of A's image is refused and shows nothing of it" "$DENIED \"B6\"" "private app" run_img B6 b6a stolen.example/tapp:v1
settle_gc B6
check_out "6: A still runs its token-registry image" "private app (token registry)" run_img A a6 "$TPRIV"

log "6b. a proxy for several registries: one registry's answers through it never vouch for another's"
# A pull-through proxy (tests/nsproxy.py) answers each request for the registry its ?ns= names,
# as containerd and pullgate tell a server that is not the registry. A6b reaches its registry
# through it; the attacker names a registry of its own, routed by the same proxy to a registry
# that serves A6b's manifest under the same repository and says yes to every blob HEAD. At a
# proxy the origin names the registry (?ns=): A6b's blobs, served at A6b's origin, were never
# served at the attacker's, so its pull must fetch them there, and gets none.
mk "$WORK/victim-6b" --tag v1 --message "private app (victim 6b)"
V6=$REG_h/private/victim-6b:v1
push_image "$WORK/victim-6b" v1 "$V6" "alice:$PW_ALICE" || fail "push victim 6b"
V6MD=$(layout_manifest "$WORK/victim-6b")
_launch_6b() {
  /usr/bin/python3 "$REPO/tests/evilregistry.py" --port "$PORT_1" --mode vouch --repo private/victim-6b --tag v1 \
    --manifest "$WORK/victim-6b/blobs/sha256/${V6MD#sha256:}" --log "$WORK/evil6b.log" &
  PIDS+=($!); LAUNCHED+=($!)
  /usr/bin/python3 "$REPO/tests/nsproxy.py" --port "$PORT_2" --route "$REG_h=$REG_h" --route "evil.example=127.0.0.1:$PORT_1" --log "$WORK/proxy6b.log" &
  PIDS+=($!); LAUNCHED+=($!)
  wait_serving 10 curl -sf "http://127.0.0.1:$PORT_1/v2/" && wait_serving 10 curl -sf "http://127.0.0.1:$PORT_2/v2/"
}
launch_on_free_ports 2 _launch_6b || { fail "6b: start the proxy and the attacker's registry"; exit 1; }
for h in "$REG_h" evil.example; do mkdir -p "$WORK/h6b/$h"; printf 'server = "http://127.0.0.1:%s"\n' "$PORT_2" > "$WORK/h6b/$h/hosts.toml"; done
check "6b: A6b pulls its image through the proxy" pg pull -n A6b --hosts-dir "$WORK/h6b" --user "alice:$PW_ALICE" "$V6"
check "6b: (precondition) the proxy answered A6b for $REG_h" grep -qF "/private/victim-6b/manifests/v1?ns=${REG_h/:/%3A} -> $REG_h 200" "$WORK/proxy6b.log"
check_out "6b: A6b runs it" "private app (victim 6b)" run_img A6b a6b "$V6"
check_err "6b: B6b's pullgate pull of evil.example/private/victim-6b:v1 through the same proxy fails: that origin never served those blobs" "not found" \
  pg pull -n B6b --hosts-dir "$WORK/h6b" evil.example/private/victim-6b:v1
check "6b: (precondition) the proxy answered B6b's manifest request for evil.example (with A6b's manifest)" \
  grep -qF "/private/victim-6b/manifests/v1?ns=evil.example -> 127.0.0.1:$PORT_1 200" "$WORK/proxy6b.log"
check_no_grants "6b: no grant was recorded for B6b" B6b
check "6b: B6b takes A6b's blobs by digest and imports them as stolen.example/v6b:v1" steal_image B6b "$V6MD" stolen.example/v6b:v1
check_refused "6b: B6b's run of A6b's image is refused and shows nothing of it" "$DENIED \"B6b\"" "private app (victim 6b)" run_img B6b b6b stolen.example/v6b:v1
settle_gc B6b
# Revoking by reference takes the grant recorded through the proxy too (the daemon's own hosts
# directory does not send $REG_h there: the origin is matched by the registry it stood for).
out=$(pg revoke -n A6b "$V6" 2>&1); rc=$?
check "6b: pullgate revoke -n A6b $V6 revokes the grant recorded through the proxy (rc=$rc: $out)" \
  bash -c '[ "$1" -eq 0 ] && [[ $2 =~ ^revoked\ 1\ grant ]]' _ "$rc" "$out"
check_no_grants "6b: A6b holds no grant after it" A6b
check_refused "6b: A6b's run is refused after it and shows nothing" "$DENIED \"A6b\"" "private app (victim 6b)" run_img A6b a6b2 "$V6"

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

log "8. tenant-controlled request arguments"
# What a tenant passes to pull and verify besides its credentials: the --hosts-dir files (read by
# the CLI, in the caller's process: only a regular file of at most 64 KiB, never quoted, and only
# its server: no TLS settings), the name an image is fetched under (recorded with the endpoint
# that answered), and the layers themselves (a layer may expand to at most max(1 GiB, 1100 x its
# compressed size)).
SECRET8='root:SECRET-line-9d8f:1:2'
printf '%s\ndaemon:*:20228:0:99999:7:::\n' "$SECRET8" > "$WORK/t8-secret"
# pgt SECONDS SUBCOMMAND ARGS...: pg under `timeout` (pg is a function; timeout needs a program).
pgt() { local t=$1 sub=$2; shift 2; timeout "$t" "$PG_BIN" "$sub" --address "$PG/api.sock" "$@"; }
# hosts8 NAME HOST: prints the hosts dir $WORK/h8-NAME, creating NAME/HOST/ in it; the test
# writes (or makes) NAME/HOST/hosts.toml.
hosts8() { mkdir -p "$WORK/h8-$1/$2" && echo "$WORK/h8-$1"; }
# check_usage DESC PATTERN LEAK CMD...: CMD exits 2 (bad argument), says PATTERN, and does not
# carry LEAK (empty: not checked).
check_usage() { check_refused_rc 2 "$@"; }

log "8a. --hosts-dir: the CLI reads only a small regular file, never quotes it, takes only its server"
D=$(hosts8 link "$REG_h"); ln -s "$WORK/t8-secret" "$D/$REG_h/hosts.toml"
check_usage "8a: a hosts.toml symlinked to a secret file: verify exits 2, 'not valid TOML', without quoting it" \
  "$D/$REG_h/hosts.toml: .*not valid TOML" "$SECRET8" pg verify -n T8 --hosts-dir "$D" "$HPRIV"
D=$(hosts8 dir "$REG_h"); mkdir "$D/$REG_h/hosts.toml"
check_usage "8a: a hosts.toml that is a directory: exit 2, 'not a regular file'" \
  "$D/$REG_h/hosts.toml: .*not a regular file" "" pg verify -n T8 --hosts-dir "$D" "$HPRIV"
D=$(hosts8 big "$REG_pub")
{ printf 'server = "http://%s"\n' "$REG_pub"; printf '# %s\n' "$SECRET8"
  for i in $(seq 1 1200); do printf '# padding line %04d, 64 KiB is the most a hosts.toml may hold\n' "$i"; done; } > "$D/$REG_pub/hosts.toml"
check "8a: (that hosts.toml is $(stat -c %s "$D/$REG_pub/hosts.toml") bytes, over 64 KiB)" test "$(stat -c %s "$D/$REG_pub/hosts.toml")" -gt 65536
check_usage "8a: a hosts.toml over 64 KiB: exit 2, 'larger than'" \
  "$D/$REG_pub/hosts.toml: .*larger than" "$SECRET8" pg verify -n T8 --hosts-dir "$D" "$PUB"
# TLS settings a request may not bring: skip_verify at the top, ca under the server's
# [host."..."] table, client at the top (the daemon's [registry] hosts_dir is where they go).
D=$(hosts8 tls1 "$REG_pub"); printf 'server = "http://%s"\nskip_verify = true\n' "$REG_pub" > "$D/$REG_pub/hosts.toml"
check_usage "8a: skip_verify = true in a request's hosts.toml: exit 2, 'TLS settings'" \
  "$D/$REG_pub/hosts.toml: .*TLS settings" "" pg verify -n T8 --hosts-dir "$D" "$PUB"
D=$(hosts8 tls2 "$REG_pub")
printf 'server = "http://%s"\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n  ca = "/etc/ssl/certs/ca-certificates.crt"\n' "$REG_pub" "$REG_pub" > "$D/$REG_pub/hosts.toml"
check_usage "8a: ca under [host.\"http://$REG_pub\"]: exit 2, 'TLS settings'" \
  "$D/$REG_pub/hosts.toml: .*TLS settings" "" pg verify -n T8 --hosts-dir "$D" "$PUB"
D=$(hosts8 tls3 "$REG_pub"); printf 'server = "http://%s"\nclient = ["%s/c.pem", "%s/k.pem"]\n' "$REG_pub" "$WORK" "$WORK" > "$D/$REG_pub/hosts.toml"
check_usage "8a: client = [cert, key] in a request's hosts.toml: exit 2, 'TLS settings'" \
  "$D/$REG_pub/hosts.toml: .*TLS settings" "" pg verify -n T8 --hosts-dir "$D" "$PUB"
# A FIFO: the CLI must neither hang on it nor hand it to the daemon, where a reader blocks a
# worker thread. As many requests as the daemon has worker threads (nproc, at most 8) are
# started in the background; while they are pending, another tenant's check and a run of the
# public image must still be answered.
D=$(hosts8 fifo "$REG_h"); mkfifo "$D/$REG_h/hosts.toml"
NF=$(nproc); [ "$NF" -gt 8 ] && NF=8
FJOBS=()
for ((i = 1; i <= NF; i++)); do
  ( pgt 20 verify -n T8 --hosts-dir "$D" "$HPRIV" >"$WORK/fifo8.$i.out" 2>&1; echo $? >"$WORK/fifo8.$i.rc" ) &
  FJOBS+=($!)
done
sleep 1
check_out "8a: while $NF FIFO verifies are pending, A's pullgate check answers within 10 s" allowed pgt 10 check -n A "$HPRIV"
check_out "8a: ... and PUBA's ctr run of the public image runs within 10 s" "public base image" \
  timeout 10 "${CTR[@]}" -n PUBA run --rm --snapshotter pullgate "$PUB" puba8
wait "${FJOBS[@]}"
# Whatever still has the FIFO open for reading (a daemon that took the path) gets a writer and
# an end of file, so that nothing stays blocked for the checks after this one.
python3 - "$D/$REG_h/hosts.toml" <<'PY'
import errno, os, sys, time
for _ in range(50):
    try:
        fd = os.open(sys.argv[1], os.O_WRONLY | os.O_NONBLOCK)
    except OSError as e:
        if e.errno == errno.ENXIO:  # no reader left
            break
        raise
    os.write(fd, b"# unblocked by the test\n"); os.close(fd); time.sleep(0.2)
PY
bad=""
for ((i = 1; i <= NF; i++)); do
  rc=$(cat "$WORK/fifo8.$i.rc" 2>/dev/null)
  if [ "$rc" != 2 ] || ! grep -qE "$D/$REG_h/hosts.toml: .*not a regular file" "$WORK/fifo8.$i.out"; then
    bad="request $i: rc=${rc:-none} (124: still pending after 20 s): $(head -c 300 "$WORK/fifo8.$i.out")"; break
  fi
done
if [ -z "$bad" ]; then pass "8a: a FIFO hosts.toml: all $NF verifies returned within 20 s, exit 2, 'not a regular file'"
else fail "8a: a FIFO hosts.toml: every verify returns within 20 s, exit 2, 'not a regular file' ($bad)"; fi
# The form containerd 1.6's ctr needs (server plus a [host] table for it, no TLS keys) works.
D=$(hosts8 ok "$REG_h")
printf 'server = "http://%s"\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n' "$REG_h" "$REG_h" > "$D/$REG_h/hosts.toml"
check "8a: T8ok: pullgate pull --user alice --hosts-dir (server plus [host] table, no TLS keys) of A's image" \
  pg pull -n T8ok --user "alice:$PW_ALICE" --hosts-dir "$D" "$HPRIV"
check_out "8a: T8ok runs it" "private app" run_img T8ok t8ok "$HPRIV"
check_no_grants "8a: nothing was recorded for T8 (every request of it was refused)" T8
leak=$(grep -rlaF -D skip -- "$SECRET8" "$PG" "$WORK/containerd" 2>/dev/null | head -5)
check "8a: pullgate's log exists and neither it nor any file of pullgate's or containerd's carries the secret line (found in: ${leak:-none})" \
  test -s "$PG/log" -a -z "$leak"

log "8b. an image name is recorded with the origin it was fetched from"
# mallory pushes a public image of its own under A's repository path on the anonymous registry,
# and pulls it under A's name through a hosts.toml that sends A's registry to that one.
mk "$WORK/mallory" --tag v1 --message "mallory's public app"
MMD=$(layout_manifest "$WORK/mallory")
push_image "$WORK/mallory" v1 "$REG_pub/private/app:v1" || fail "push mallory's image to $REG_pub/private/app:v1"
D=$(hosts8 mallory "$REG_h"); printf 'server = "http://%s"\n' "$REG_pub" > "$D/$REG_h/hosts.toml"
check "8b: mallory: pullgate pull --hosts-dir ($REG_h -> http://$REG_pub) $HPRIV (its own public image) works" \
  pg pull -n mallory --hosts-dir "$D" "$HPRIV"
check_out "8b: mallory runs it" "mallory's public app" run_img mallory m8 "$HPRIV"
check_out "8b: A's pullgate check of $HPRIV says allowed" allowed pg check -n A "$HPRIV"
check_err "8b: carol (no grant): pullgate check $HPRIV prints denied and fails" '^denied' pg check -n carol "$HPRIV"
out=$(pg inspect "$HPRIV" 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -qF "manifest $HMD" <<<"$out" && ! grep -qF "$MMD" <<<"$out"; then pass "8b: pullgate inspect $HPRIV lists A's manifest, not mallory's"
else fail "8b: pullgate inspect $HPRIV lists A's manifest ${HMD:0:19}..., not mallory's ${MMD:0:19}... (rc=$rc: $(grep '^manifest' <<<"$out" | head -c 600))"; fi

log "8c. a refusal names the requester's own image, not the first image recorded with the manifest"
ZAPP=$REG_h/zteam/app:v1
push_image "$WORK/priv" v1 "$ZAPP" "alice:$PW_ALICE" || fail "push A's image to $ZAPP too"
check_out "8c: A holds a grant for $HPRIV (pulled in the setup, before bteam's verify)" allowed pg check -n A "$HPRIV"
check "8c: bteam: pullgate verify --principal p1 --user alice $ZAPP" pg verify -n bteam --principal p1 --user "alice:$PW_ALICE" --plain-http "$ZAPP"
check "8c: bteam: plain ctr pull of it" ctr_ -n bteam images pull --plain-http --user "alice:$PW_ALICE" --snapshotter pullgate "$ZAPP"
check_out "8c: bteam's p1 runs it" "private app" run_img bteam b8a --snapshotter-label "$PL=p1" "$ZAPP"
out=$(run_img bteam b8b --snapshotter-label "$PL=p2" "$ZAPP" 2>&1); rc=$?
refused8() { [ "$rc" -ne 0 ] && grep -qF "$DENIED \"bteam\" (principal \"p2\")" <<<"$out" && ! grep -qF "private app" <<<"$out"; }
if refused8; then pass "8c: p2's run is refused by the gate and shows nothing of the image"
else fail "8c: p2's run is refused by the gate and shows nothing of the image (rc=$rc: $(shown 600 "$out"))"; fi
if refused8 && grep -qF "zteam/app" <<<"$out"; then pass "8c: the refusal names bteam's own image zteam/app"
else fail "8c: the refusal names bteam's own image zteam/app: $(grep -oE "$DENIED.{0,400}" <<<"$out" | head -1)"; fi
if refused8 && ! grep -qF "private/app" <<<"$out"; then pass "8c: the refusal does not name A's repository private/app"
else fail "8c: the refusal does not name A's repository private/app: $(grep -oE "$DENIED.{0,400}" <<<"$out" | head -1)"; fi
settle_gc bteam

log "8d. a decompression bomb: a layer of 3 GiB of zeros in about 100 KB"
# gzip cannot expand by more than about 1030:1 (deflate's limit), under the 1100:1 a layer may;
# zstd's RLE blocks expand 32768:1 (mkimage.py --zero-layer-gib).
mk "$WORK/bomb" --tag v1 --message "bomb" --zero-layer-gib 3
BOMB=$REG_pub/bomber/zeros:v1
push_image "$WORK/bomb" v1 "$BOMB" || fail "push the bomb image"
# The bomb layer's size, and what its zstd frame expands to (summed from its block headers).
read -r BC BU < <(python3 - "$WORK/bomb" <<'PY'
import json, sys
d = sys.argv[1]
path = lambda dg: f"{d}/blobs/sha256/{dg.split(':', 1)[1]}"
m = json.load(open(path(json.load(open(f"{d}/index.json"))["manifests"][0]["digest"])))
l = next(x for x in m["layers"] if x["mediaType"].endswith("+zstd"))
z = open(path(l["digest"]), "rb").read()
assert z[:4] == b"\x28\xb5\x2f\xfd" and z[4] == 0, "not a frame of this shape"
pos, total, last = 6, 0, 0
while not last:
    h = int.from_bytes(z[pos:pos + 3], "little"); pos += 3
    last, kind, n = h & 1, (h >> 1) & 3, h >> 3
    assert kind in (0, 1), kind
    total += n; pos += n if kind == 0 else 1
assert pos == len(z)
print(len(z), total)
PY
)
if [ -n "${BU:-}" ] && [ "$BU" -gt $((1 << 30)) ] && [ "$BU" -gt $((1100 * BC)) ]; then
  pass "8d: the bomb layer ($BC bytes) expands to $BU bytes: more than 1 GiB and more than 1100 x its size"
  # pullgate's CPU time (utime + stime, in clock ticks) from /proc/PID/stat.
  pg_ticks() { awk '{sub(/^.*\) /, ""); print $12 + $13}' "/proc/$PG_PID/stat"; }
  # timed_verify SECS NS REF: pullgate verify under a timeout; sets out, rc, el (wall seconds)
  # and cpu (pullgate's CPU seconds over it, a second after it ended).
  timed_verify() {
    local t0 t1 s=$SECONDS; t0=$(pg_ticks)
    out=$(pgt "$1" verify -n "$2" --plain-http "$3" 2>&1); rc=$?
    el=$((SECONDS - s)); sleep 1; t1=$(pg_ticks)
    cpu=$(awk -v a="$t0" -v b="$t1" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.1f", (b - a) / hz}')
  }
  timed_verify 30 bomber "$BOMB"
  # (The layer's own limit or its image's together, whichever it passes first.)
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qE "expands? to more than" <<<"$out"; then pass "8d: pullgate verify of the bomb fails within 30 s (${el}s): 'expand(s) to more than'"
  else fail "8d: pullgate verify of the bomb fails within 30 s: 'expand(s) to more than' (rc=$rc after ${el}s: $(shown 600 "$out"))"; fi
  check "8d: pullgate spent less than 10 s of CPU on it (${cpu}s)" awk -v c="$cpu" 'BEGIN {exit !(c < 10)}'
  check_no_grants "8d: nothing was recorded for bomber" bomber

  log "8e. a bomb of 64 GiB of zeros in 2 MiB, its manifest declaring a 3 GiB layer, from an attacker's registry"
  # A manifest may declare any size: work is bounded by the bytes that arrive. Served with the
  # blob's true Content-Length (refused before a byte is read), and without one (refused once
  # it expands past 1100 times what arrived, here 1 GiB, not 1100 x 3 GiB: the download waits
  # for the hashing, so what arrives is what was hashed).
  mkdir -p "$WORK/bomb-lie/blobs"
  cp "$WORK/bomb/blobs/sha256/"* "$WORK/bomb-lie/blobs/"
  python3 - "$WORK/bomb" "$WORK/bomb-lie" <<'PY'
import hashlib, json, sys
d, out = sys.argv[1:3]
path = lambda dg: f"{d}/blobs/sha256/{dg.split(':', 1)[1]}"
m = json.load(open(path(json.load(open(f"{d}/index.json"))["manifests"][0]["digest"])))
# A zstd frame of RLE blocks of zeros (128 KiB each, 4 bytes each): 64 GiB.
n = (64 << 30) // (128 << 10)
frame = b"\x28\xb5\x2f\xfd\x00\x38"  # magic; no content size, no checksum; window 128 KiB
frame += b"".join((((128 << 10) << 3) | 2 | (i == n - 1)).to_bytes(3, "little") + b"\x00" for i in range(n))
dg = hashlib.sha256(frame).hexdigest()
open(f"{out}/blobs/{dg}", "wb").write(frame)
layer = next(x for x in m["layers"] if x["mediaType"].endswith("+zstd"))
layer.update(digest="sha256:" + dg, size=3 << 30)
json.dump(m, open(f"{out}/manifest.json", "w"))
PY
  _launch_liars() {
    local i
    for i in 1 2; do
      /usr/bin/python3 "$REPO/tests/evilregistry.py" --port "$(v=PORT_$i; echo "${!v}")" --repo bomber/lie --tag v1 \
        --manifest "$WORK/bomb-lie/manifest.json" --blobs "$WORK/bomb-lie/blobs" --log "$WORK/liar$i.log" $([ $i = 2 ] && echo --no-length) &
      PIDS+=($!); LAUNCHED+=($!)
    done
    wait_serving 10 curl -sf "http://127.0.0.1:$PORT_1/v2/" && wait_serving 10 curl -sf "http://127.0.0.1:$PORT_2/v2/"
  }
  if launch_on_free_ports 2 _launch_liars; then
    LIAR=127.0.0.1:$PORT_1/bomber/lie:v1 LIAR_NL=127.0.0.1:$PORT_2/bomber/lie:v1
    check_refused "8e: with its Content-Length, pullgate verify of the lying manifest is refused before the body is read" \
      "Content-Length" "" pgt 30 verify -n bomber2 --plain-http "$LIAR"
    timed_verify 30 bomber2 "$LIAR_NL"
    # (The layer's own limit, or its image's together, whichever it passes first: both 1 GiB
    # here, from what arrived, where the declared size gave 1100 x 3 GiB.)
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qE "(expands to more than $((1 << 30)) bytes after [0-9]+ bytes of it arrived|expand to more than $((1 << 30)) bytes together after [0-9]+ bytes of them arrived)" <<<"$out"; then
      pass "8e: without a Content-Length, it is refused once it expands past 1 GiB (${el}s): 'expand(s) to more than 1073741824 bytes after N bytes arrived'"
    else fail "8e: without a Content-Length, it is refused once it expands past 1 GiB (rc=$rc after ${el}s: $(shown 600 "$out"))"; fi
    check "8e: pullgate spent less than 10 s of CPU on it (${cpu}s)" awk -v c="$cpu" 'BEGIN {exit !(c < 10)}'
    # Another tenant's pull while the attack repeats, 8 at once (decompressing takes at most
    # all cores but one, whatever the number of pulls): it completes as usual.
    attack=()
    for a in 1 2 3 4 5 6 7 8; do
      ( end=$((SECONDS + 60)); while [ $SECONDS -lt $end ]; do pgt 30 verify -n "bomber2" --plain-http "$LIAR_NL" >/dev/null 2>&1; done ) &
      attack+=($!)
    done
    sleep 2
    check "8e: another tenant's pull completes while the attack repeats, 8 at once" pgt 60 pull -n calm --plain-http "$PUBFRESH"
    check "8e: the attack was still repeating when it completed" kill -0 "${attack[@]}"
    kill "${attack[@]}" 2>/dev/null; wait "${attack[@]}" 2>/dev/null
    check_no_grants "8e: nothing was recorded for bomber2" bomber2
  else
    fail "8e: start the attacker's registries"
  fi

  log "8f. many small bombs in one image: 24 layers of 1 GiB of zeros in 32 KiB each"
  # Each layer alone stays under the 1 GiB floor a layer may reach; together they are bounded
  # by the same rule over what arrived for all of them.
  mkdir -p "$WORK/bombs/blobs"
  python3 - "$WORK/bombs" <<'PY'
import hashlib, json, sys
out = sys.argv[1]
def blob(b):
    d = hashlib.sha256(b).hexdigest(); open(f"{out}/blobs/{d}", "wb").write(b); return "sha256:" + d, len(b)
n = (1 << 30) // (128 << 10) - 1
layers = []
for i in range(24):
    # RLE blocks of byte i+1: a zstd frame of 1 GiB - 128 KiB, distinct per layer.
    frame = b"\x28\xb5\x2f\xfd\x00\x38" + b"".join((((128 << 10) << 3) | 2 | (k == n - 1)).to_bytes(3, "little") + bytes([i + 1]) for k in range(n))
    layers.append(blob(frame))
cfg = {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "%064x" % (i + 1) for i in range(24)]}}
c = blob(json.dumps(cfg).encode())
m = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
     "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": c[0], "size": c[1]},
     "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+zstd", "digest": d, "size": s} for d, s in layers]}
json.dump(m, open(f"{out}/manifest.json", "w"))
PY
  _launch_bombs() {
    /usr/bin/python3 "$REPO/tests/evilregistry.py" --port "$PORT_1" --repo bomber/many --tag v1 \
      --manifest "$WORK/bombs/manifest.json" --blobs "$WORK/bombs/blobs" --log "$WORK/bombs.log" &
    PIDS+=($!); LAUNCHED+=($!)
    wait_serving 10 curl -sf "http://127.0.0.1:$PORT_1/v2/"
  }
  if launch_on_free_ports 1 _launch_bombs; then
    timed_verify 60 bomber3 "127.0.0.1:$PORT_1/bomber/many:v1"
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qF "the image's layers expand to more than $((1 << 30)) bytes together" <<<"$out"; then
      pass "8f: pullgate verify of it is refused once its layers pass 1 GiB together (${el}s)"
    else fail "8f: pullgate verify of it is refused once its layers pass 1 GiB together (rc=$rc after ${el}s: $(shown 600 "$out"))"; fi
    check "8f: pullgate spent less than 10 s of CPU on it (${cpu}s; 24 GiB hashed would take minutes)" awk -v c="$cpu" 'BEGIN {exit !(c < 10)}'
    check_no_grants "8f: nothing was recorded for bomber3" bomber3
  else
    fail "8f: start the attacker's registry"
  fi
else
  fail "8d: setup: the bomb layer must expand to more than 1 GiB and more than 1100 x its size (${BC:-?} bytes -> ${BU:-?})"
fi

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

summary "e2e trust (containerd $V, ${CONTENT_POLICY:-isolated} content store)"
