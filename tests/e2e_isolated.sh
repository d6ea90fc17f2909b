#!/usr/bin/env bash
# End-to-end: confidentiality without re-downloads, on a real containerd of the given version
# configured from plugin/ (content_sharing_policy = "isolated", pullgate the only snapshotter),
# a token-auth registry over TLS (alice, bob and carol may read private/*; its certificate from
# this run's CA, use_tls_registries: what pullgate verified spares downloads) and an attacker's
# registry.
#   1. tenant A pulls a private image with pullgate and runs it;
#   2. tenant B, without a grant, cannot read A's blobs by any digest trick: `content get`, an
#      empty ingest with the expected digest, an attacker's manifest naming A's blobs pulled by
#      plain ctr and by pullgate, pullgate without or with wrong credentials;
#   2b. a verify refused because the image's config lies about its layers copies nothing;
#   3. B verifies with its own credential: the registry sees the token and manifest requests
#      only (access log), B's namespace then holds every blob (copied on the node, same bytes),
#      plain `ctr images pull` and `ctr run` in B download nothing and run the image; the verify
#      holds what it placed under one expiring lease, renewed (replaced) by the next verify;
#   4. C pulls with pullgate and its own credential: zero blob GETs, the image runs;
#   4b. the same config and layers under another manifest (one annotation more), which
#      pullgate never saw: a verify and a pull copy them all (the config is read for its layer
#      IDs where it is on the node, before it is copied);
#   5. the copy goes through containerd: the content store keeps one file per blob and
#      pullgate leaves no ingest behind;
#   6. a namespace labelled containerd.io/namespace.shareable=true is reported, by `pullgate
#      verify` and at pullgate's start-up;
#   7. copies read the blob files in containerd's content store (the directory containerd's
#      content plugin reports), and through containerd when pullgate cannot see them: pullgate
#      restarted in its own mount namespace with that directory hidden still copies (no blob
#      GET) and G runs the image;
#   8. a config on the node that cannot be read there (its file gone from containerd's store)
#      is fetched from the origin instead: a pull of a manifest pullgate never saw still works;
#   9. blobs pullgate established as public (fetched without credentials at public/base) are
#      held once in pullgate's public namespace on containerd 1.7+: the first namespace that
#      needs them on the node copies them there, the next adopts them with no copy and copies
#      only the application's private blobs; no private blob ever enters it, a namespace that
#      proved nothing still reads none of them, a public layer recompressed with private bytes in
#      its gzip header is not public, pullgate refuses to pull into it. On 1.6 (which
#      ignores the shareable label) everything is copied as before.
#  10. (1.7+) the public namespace's label removed: the next pull puts it back and adopts from
#      there; a client's private image imported there: the next pull removes the label and
#      copies, a namespace that proved nothing then cannot take its layer; once the image is
#      removed, the next pull labels the namespace again.
#  11. the chains gone and the blobs kept in another namespace: a new tenant's pull copies
#      every blob and unpacks each layer from its copy (waited for; copies and the unpack run
#      together), downloads nothing, and runs the image.
# Usage: tests/e2e_isolated.sh VERSION
source "$(dirname "$0")/lib.sh"
V=${1:?usage: e2e_isolated.sh 1.6|1.7|2.1|2.4}
trap cleanup EXIT
CONTENT_POLICY=isolated
PW_ALICE=alice-Iso-3k9w
PW_BOB=bob-Iso-8v2p
PW_CAROL=carol-Iso-5n7r
PRIVMSG="private isolated app"
DENIED='pullgate denied namespace'

log "containerd $V (isolated content store): setup"
python3 "$REPO/tests/mkimage.py" "$WORK/priv" --tag v1 --message "$PRIVMSG" --extra-layers 2 --layer-mb 0.3 --seed 31 >/dev/null
cat > "$WORK/acl.json" <<JSON
{"users": {"alice": "$PW_ALICE", "bob": "$PW_BOB", "carol": "$PW_CAROL"},
 "access": {"alice": ["private/*"], "bob": ["private/*"], "carol": ["private/*"]}, "anonymous": ["public/*"], "push": ["alice"]}
JSON
use_tls_registries || exit 1
start_token_registry t "$WORK/acl.json" || exit 1
IMG=$REG_t/private/app:v1
push_image "$WORK/priv" v1 "$IMG" "alice:$PW_ALICE" || fail "push the private image"
PG=$WORK/pg
start_pullgate "$PG" || exit 1
start_containerd "$V" "$PG/snapshotter.sock" || exit 1
check_containerd_version "$V"
check "containerd runs with the shipped fragment's content_sharing_policy = \"isolated\"" \
  grep -q 'content_sharing_policy = "isolated"' "$WORK/containerd/config.toml"
pg() { local sub=$1; shift; "$PG_BIN" "$sub" --address "$PG/api.sock" "$@"; }
run_img() { local ns=$1 id=$2; shift 2; ctr_ -n "$ns" run --rm --snapshotter pullgate "$@" "$id"; }
# layout_manifest DIR: the digest of an OCI layout's (first) manifest; layout_blobs DIR: its
# config's and layers' digests, config first.
layout_manifest() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]+"/index.json"))["manifests"][0]["digest"])' "$1"; }
layout_blobs() { python3 -c 'import json,sys; d=sys.argv[1]; i=json.load(open(d+"/index.json"))["manifests"][0]["digest"]; m=json.load(open(d+"/blobs/sha256/"+i.split(":")[1])); print(" ".join([m["config"]["digest"]]+[l["digest"] for l in m["layers"]]))' "$1"; }
MD=$(layout_manifest "$WORK/priv")
BLOBS=$(layout_blobs "$WORK/priv")
NBLOBS=$(wc -w <<<"$BLOBS")
TOP=$(awk '{print $NF}' <<<"$BLOBS")
# holds NS [DIGESTS]: how many of the image's blobs (or of DIGESTS) NS's content store lists.
# When ctr itself fails it prints why instead of a number, so that no `test "$(holds X)" = N`
# passes on a failed listing (an empty answer is not "none").
holds() {
  local n=0 d all rc; all=$(ctr_ -n "$1" content ls -q 2>&1); rc=$?
  [ $rc -eq 0 ] || { echo "ctr content ls -n $1 failed (rc=$rc): $(head -c 200 <<<"$all")"; return 1; }
  for d in ${2:-$BLOBS}; do grep -qxF "$d" <<<"$all" && n=$((n + 1)); done; echo "$n"
}
# blob_gets FROM: the registry's blob GETs in its access log after line FROM.
blob_gets() { tail -n +"$(($1 + 1))" "$WORK/registry-t/log" | grep -c '"GET /v2/[^ ]*/blobs/' ; }
mark() { wc -l < "$WORK/registry-t/log"; }
# holds_of NS: the verify holds (leases pullgate left on purpose) in NS, one line each.
holds_of() { ctr_ -n "$1" leases ls 2>/dev/null | grep 'pullgate.io/verified='; }
hold_expires() { holds_of "$1" | grep 'containerd.io/gc.expire=' >/dev/null; }
# verify_mentions NS WORD CRED: pullgate verify in NS with CRED prints WORD somewhere.
verify_mentions() { pg verify -n "$1" "${REGF[@]}" --user "$3" "$IMG" 2>&1 | grep "$2" >/dev/null; }

log "1. A pulls the private image with pullgate and runs it"
check_out "A's pullgate pull" "$MD" pg pull -n A "${REGF[@]}" --user "alice:$PW_ALICE" "$IMG"
check "A's namespace holds all $NBLOBS blobs" test "$(holds A)" = "$NBLOBS"
check_out "A runs it" "$PRIVMSG" run_img A a1 "$IMG"

log "2. B without a grant cannot read A's blobs"
# The content gets, ingests and the plain ctr pull below are refused by containerd's isolated
# store itself, with or without pullgate: they are checked as facts of the shipped deployment
# (labelled "containerd's isolated store"), not as pullgate's refusals. What pullgate adds is
# checked after them: its pull and verify without a valid credential copy nothing into B.
for d in $BLOBS; do
  out=$(ctr_ -n B content get "$d" 2>&1); rc=$?
  if [ $rc -ne 0 ] && grep -q "not found" <<<"$out" && [ ${#out} -lt 400 ]; then pass "containerd's isolated store: B's content get $d: not found"
  else fail "containerd's isolated store: B's content get $d: rc=$rc, ${#out} bytes: $(shown 200 "$out")"; fi
done
: > "$WORK/empty"
for d in $BLOBS; do
  ctr_ -n B content ingest --expected-digest "$d" "steal-$d" <"$WORK/empty" >/dev/null 2>&1
  check_err "containerd's isolated store: B's empty ingest of $d with the expected digest adopts nothing (B's content get: not found)" "not found" ctr_ -n B content get "$d"
done
check "B's content store lists none of A's blobs" test "$(holds B)" = 0
# The attacker's registry serves a manifest naming A's config and layers, and no blob.
_launch_evil() {
  /usr/bin/python3 "$REPO/tests/evilregistry.py" --port "$PORT_1" --repo evil/app --tag v1 \
    --manifest "$WORK/priv/blobs/sha256/${MD#sha256:}" --log "$WORK/evil.log" &
  PIDS+=($!); LAUNCHED+=($!)
  wait_serving 10 curl -sf "http://127.0.0.1:$PORT_1/v2/"
}
launch_on_free_ports 1 _launch_evil || { fail "start the attacker's registry"; exit 1; }
EVIL=127.0.0.1:$PORT_1/evil/app:v1
check_refused "containerd's isolated store: B's plain ctr pull of the attacker's manifest fails: B's store lacks A's blobs, the attacker serves none" \
  "not found" "$PRIVMSG" ctr_ -n B images pull --plain-http --snapshotter pullgate "$EVIL"
check_err "B's pullgate pull of the attacker's manifest fails (its registry never served the bytes)" "not found" \
  pg pull -n B --plain-http "$EVIL"
check_err "B's pullgate verify without credentials fails as the registry says" "credentials" pg verify -n B "${REGF[@]}" "$IMG"
check_err "B's pullgate verify with a wrong password fails" "rejected" pg verify -n B "${REGF[@]}" --user "bob:wrong-Pw-1" "$IMG"
check "after all of it, B's content store still lists none of A's blobs" test "$(holds B)" = 0
check_no_grants "and B holds no grant" B
check_refused "(precondition for section 3) B has no image of that name: containerd's not found" "not found" "$PRIVMSG" run_img B b0 "$IMG"

log "2b. a verify refused for an image that lies about its layers copies nothing"
# The same layers as A's image under a config claiming another last layer ID, pushed by alice.
claims=$(python3 -c 'import json,sys; d=sys.argv[1]; i=json.load(open(d+"/index.json")); b=lambda x: json.load(open(d+"/blobs/sha256/"+x.split(":")[1])); ids=b(b(i["manifests"][0]["digest"])["config"]["digest"])["rootfs"]["diff_ids"]; ids[-1]="sha256:"+"ab"*32; print(",".join(ids))' "$WORK/priv")
python3 "$REPO/tests/mkimage.py" "$WORK/lying" --tag v1 --message "$PRIVMSG" --extra-layers 2 --layer-mb 0.3 --seed 31 --claim-diff-ids "$claims" >/dev/null
push_image "$WORK/lying" v1 "$REG_t/private/lying:v1" "alice:$PW_ALICE" || fail "push the lying image"
LMD=$(layout_manifest "$WORK/lying")
LAYERS=$(python3 -c 'import json,sys; m=json.load(open(sys.argv[1]+"/blobs/sha256/"+sys.argv[2].split(":")[1])); print(" ".join(l["digest"] for l in m["layers"]))' "$WORK/lying" "$LMD")
check "its layers are A's image's layers" test "$LAYERS" = "$(cut -d' ' -f2- <<<"$BLOBS")"
check_refused "F's pullgate verify (bob's password) is refused: the config lies" "lies about its layers" "" \
  pg verify -n F "${REGF[@]}" --user "bob:$PW_BOB" "$REG_t/private/lying:v1"
check "F's content store lists none of A's blobs afterwards" test "$(holds F)" = 0
check_refused "containerd's isolated store: F's content get of A's top layer: not found" "not found" "" ctr_ -n F content get "$TOP"
check_no_grants "and F holds no grant" F

log "3. B verifies with its own credential: no download"
m=$(mark)
out=$(pg verify -n B "${REGF[@]}" --user "bob:$PW_BOB" -o json "$IMG" 2>&1); rc=$?
check "B's pullgate verify succeeds (rc=$rc)" test $rc -eq 0
ncopied=$(python3 -c 'import json,sys; print(len(json.loads(sys.argv[1])["copied"]))' "$out" 2>/dev/null || echo "unparsed: $out")
check "it copied all $NBLOBS blobs from the node (JSON copied: $ncopied)" test "$ncopied" = "$NBLOBS"
ndown=$(python3 -c 'import json,sys; print(len(json.loads(sys.argv[1])["downloaded"]))' "$out" 2>/dev/null || echo unparsed)
check "and downloaded none ($ndown)" test "$ndown" = 0
after=$(tail -n +"$((m + 1))" "$WORK/registry-t/log")
check "the registry saw the manifest request" grep -q '"[A-Z]* /v2/private/app/manifests/' <<<"$after"
check "and no blob GET ($(blob_gets "$m"))" test "$(blob_gets "$m")" = 0
check "B's namespace now holds all $NBLOBS blobs" test "$(holds B)" = "$NBLOBS"
got=$(ctr_ -n B content get "$TOP" | sha256sum | cut -d' ' -f1)
check "and B reads the top layer's exact bytes (sha256 $got)" test "sha256:$got" = "$TOP"
held=$(holds_of B | wc -l)
check "the verify holds what it placed under one lease ($held)" test "$held" = 1
check "that lease expires (containerd.io/gc.expire)" hold_expires B
h1=$(holds_of B); sleep 1.2
check "B's verify again (the blobs are there: it copies nothing)" verify_mentions B "0 blob(s) downloaded, 0 copied" "bob:$PW_BOB"
held=$(holds_of B | wc -l)
check "replaces the hold rather than adding one ($held)" test "$held" = 1
h2=$(holds_of B)
exp() { grep -o 'containerd.io/gc.expire=[^ ,]*' <<<"$1" | cut -d= -f2; }
check "and renews it: another lease ($(awk '{print $1}' <<<"$h1") -> $(awk '{print $1}' <<<"$h2")), expiring later ($(exp "$h1") -> $(exp "$h2"))" \
  bash -c "[ '$(awk '{print $1}' <<<"$h1")' != '$(awk '{print $1}' <<<"$h2")' ] && [[ '$(exp "$h2")' > '$(exp "$h1")' ]]"
settle_gc B
check "after containerd's GC, B still holds the blobs (the hold keeps them)" test "$(holds B)" = "$NBLOBS"
m=$(mark)
check "B's plain ctr images pull" ctr_ -n B images pull "${CTRF[@]}" --user "bob:$PW_BOB" --snapshotter pullgate "$IMG"
check "downloads no blob ($(blob_gets "$m"))" test "$(blob_gets "$m")" = 0
check_out "B runs the image" "$PRIVMSG" run_img B b1 "$IMG"

log "4. C pulls with pullgate and its own credential: no download"
m=$(mark)
out=$(pg pull -n C "${REGF[@]}" --user "carol:$PW_CAROL" "$IMG" 2>&1); rc=$?
check "C's pullgate pull succeeds (rc=$rc)" test $rc -eq 0
check "it says all $NBLOBS blobs were copied from the node and none downloaded" grep -qF "0 blob(s) downloaded, $NBLOBS copied from the node" <<<"$out"
check "no blob GET at the registry ($(blob_gets "$m"))" test "$(blob_gets "$m")" = 0
check "C's namespace holds all $NBLOBS blobs" test "$(holds C)" = "$NBLOBS"
check_out "C runs the image" "$PRIVMSG" run_img C c1 "$IMG"
check "C's pull left no verify hold (its image record keeps the blobs)" test "$(holds_of C | wc -l)" = 0
check_refused "containerd's isolated store: a namespace that never verified (D) still reads nothing" "not found" "" ctr_ -n D content get "$TOP"

log "4b. the same config and layers under another manifest"
# A copy of the image's layout whose manifest has one annotation more: a new manifest digest.
is_digest() { [[ $1 =~ ^sha256:[0-9a-f]{64}$ ]]; }
# variant N: pushes private/appN:v1, the image's layout with a manifest annotated variant=N,
# and prints the new manifest's digest.
variant() {
  local n=$1 d=$WORK/priv$1
  cp -r "$WORK/priv" "$d"
  python3 - "$d" "$n" <<'PY'
import hashlib, json, sys
d = sys.argv[1]; idx = json.load(open(d + "/index.json")); ent = idx["manifests"][0]
m = json.load(open(d + "/blobs/sha256/" + ent["digest"].split(":")[1]))
m.setdefault("annotations", {})["org.example.variant"] = sys.argv[2]
raw = json.dumps(m).encode(); h = hashlib.sha256(raw).hexdigest()
open(d + "/blobs/sha256/" + h, "wb").write(raw)
ent["digest"], ent["size"] = "sha256:" + h, len(raw)
json.dump(idx, open(d + "/index.json", "w"))
print("sha256:" + h)
PY
  push_image "$d" v1 "$REG_t/private/app$n:v1" "alice:$PW_ALICE" >/dev/null || echo "push failed"
}
MD2=$(variant 2)
check "private/app2:v1 pushed ($MD2)" is_digest "$MD2"
check "its manifest digest differs from the image's" test "$MD2" != "$MD"
m=$(mark)
out=$(pg verify -n H "${REGF[@]}" --user "carol:$PW_CAROL" "$REG_t/private/app2:v1" 2>&1); rc=$?
check "H's pullgate verify of it succeeds (rc=$rc: $(tail -n 1 <<<"$out"))" test $rc -eq 0
check "it copied all $NBLOBS blobs from the node" grep -qF "0 blob(s) downloaded, $NBLOBS copied from the node" <<<"$out"
out=$(pg pull -n I "${REGF[@]}" --user "carol:$PW_CAROL" "$REG_t/private/app2:v1" 2>&1); rc=$?
check "I's pullgate pull of it succeeds (rc=$rc: $(tail -n 1 <<<"$out"))" test $rc -eq 0
check "it copied all $NBLOBS blobs from the node" grep -qF "0 blob(s) downloaded, $NBLOBS copied from the node" <<<"$out"
check "no blob GET at the registry for either ($(blob_gets "$m"))" test "$(blob_gets "$m")" = 0
check_out "I runs it" "$PRIVMSG" run_img I i1 "$REG_t/private/app2:v1"

log "5. one copy on disk, nothing left half-written"
croot=$WORK/containerd/root/io.containerd.content.v1.content
n=$(find "$croot/blobs/sha256" -name "${TOP#sha256:}" | wc -l)
check "the content store has one file for the top layer ($n)" test "$n" = 1
# (B's own empty ingests of section 2 stay, as any client's unfinished ingest does.)
left=$(for ns in A B C E; do ctr_ -n "$ns" content active 2>/dev/null | awk 'NR > 1 && $1 ~ /^pullgate-/ {print $1}'; done)
check "pullgate left no ingest behind in any namespace (${left:-none})" test -z "$left"
check "and the listing works (B's own unfinished ingests are listed)" bash -c "$(printf '%q ' "${CTR[@]}") -n B content active | grep -q '^steal-'"
check "the copies read the blob files in containerd's content store ($croot/blobs)" \
  grep -qF "copies and hashes read blobs from their files in containerd's content store (through containerd when a file cannot be opened) path=$croot/blobs" "$PG/log"

log "6. namespaces labelled shareable are reported"
ctr_ namespaces create E >/dev/null 2>&1
ctr_ namespaces label E containerd.io/namespace.shareable=true >/dev/null
check_out "pullgate verify in E warns that E shares its blobs" "namespace E is labelled containerd.io/namespace.shareable=true" \
  pg verify -n E "${REGF[@]}" --user "alice:$PW_ALICE" "$IMG"
out=$(pg verify -n E "${REGF[@]}" --user "alice:$PW_ALICE" -o json "$IMG" 2>/dev/null)
check "and says so in its JSON output" python3 -c 'import json,sys; w=json.loads(sys.argv[1])["warnings"]; assert any("shareable" in x for x in w), w' "$out"
check "a verify in B succeeds and gives no such warning" verify_mentions B "0 blob(s) downloaded" "bob:$PW_BOB"
check "(no warning)" not verify_mentions B shareable "bob:$PW_BOB"
kill "$PG_PID"; wait "$PG_PID" 2>/dev/null
start_pullgate "$PG" || exit 1
check "pullgate reports E at start-up" wait_for 20 grep -q 'namespace shares its blobs with every namespace.*namespace=E\|namespace=E.*namespace shares its blobs' "$PG/log"
reported=$(grep 'namespace shares its blobs' "$PG/log" | grep -o 'namespace=[^ ]*' | sort -u | paste -sd' ')
check "and names no other namespace ($reported)" test "$reported" = "namespace=E"
wait_backend
check_out "A still runs the image" "$PRIVMSG" run_img A a2 "$IMG"

log "7. without the blob files, copies read through containerd"
# E shares its blobs no more: G must get them by copy, not by digest.
check "E's shareable label removed" ctr_ namespaces label E containerd.io/namespace.shareable=
kill "$PG_PID"; wait "$PG_PID" 2>/dev/null
# pullgate in a mount namespace of its own, where an empty tmpfs hides containerd's blob files.
unshare --mount --propagation private -- sh -c 'mount -t tmpfs hidden "$1" && exec "$2" serve --config "$3"' _ \
  "$croot/blobs" "$PG_BIN" "$PG/config.toml" >>"$PG/log" 2>&1 &
PG_PID=$!; PIDS+=($PG_PID)
wait_for 20 test -S "$PG/snapshotter.sock" || { fail "pullgate did not start in its own mount namespace"; tail -20 "$PG/log"; exit 1; }
wait_backend
check "containerd's blob files exist outside pullgate's mount namespace" test -s "$croot/blobs/sha256/${TOP#sha256:}"
check "and pullgate cannot see them" not nsenter -t "$PG_PID" -m test -e "$croot/blobs/sha256/${TOP#sha256:}"
m=$(mark)
out=$(pg pull -n G "${REGF[@]}" --user "carol:$PW_CAROL" "$IMG" 2>&1); rc=$?
check "G's pullgate pull succeeds (rc=$rc)" test $rc -eq 0
check "it copied all $NBLOBS blobs from the node and downloaded none ($(grep -o "[0-9]* blob(s) downloaded.*" <<<"$out"))" grep -qF "0 blob(s) downloaded, $NBLOBS copied from the node" <<<"$out"
check "no blob GET at the registry ($(blob_gets "$m"))" test "$(blob_gets "$m")" = 0
check "pullgate read them through containerd (it says it could not open the files)" grep -q "cannot open the blob's file; reading it through containerd" "$PG/log"
got=$(ctr_ -n G content get "$TOP" | sha256sum | cut -d' ' -f1)
check "G reads the top layer's exact bytes (sha256 $got)" test "sha256:$got" = "$TOP"
check_out "G runs the image" "$PRIVMSG" run_img G g1 "$IMG"

log "8. a config on the node that cannot be read there comes from the origin"
MD3=$(variant 3)
check "private/app3:v1 pushed ($MD3)" is_digest "$MD3"
CFG=$(head -n 1 <<<"$(tr ' ' '\n' <<<"$BLOBS")")
# The config's file goes from containerd's store (as a disk error or a race with its GC would
# take it): the namespaces holding it still list it, and reading it fails.
rm -f "$croot/blobs/sha256/${CFG#sha256:}"
check "A still lists the config" bash -c "$(printf '%q ' "${CTR[@]}") -n A content ls -q | grep -qxF '$CFG'"
check "and cannot read it" not ctr_ -n A content get "$CFG"
m=$(mark)
out=$(pg pull -n J "${REGF[@]}" --user "carol:$PW_CAROL" "$REG_t/private/app3:v1" 2>&1); rc=$?
check "J's pullgate pull of a manifest pullgate never saw succeeds (rc=$rc: $(tail -n 1 <<<"$out"))" test $rc -eq 0
check "it downloaded the config and copied the $((NBLOBS - 1)) layers" grep -qF "1 blob(s) downloaded, $((NBLOBS - 1)) copied from the node" <<<"$out"
cfg_gets=$(tail -n +"$((m + 1))" "$WORK/registry-t/log" | grep -c "\"GET /v2/private/app3/blobs/$CFG ")
check "the registry served one blob ($(blob_gets "$m")), the config ($cfg_gets)" test "$(blob_gets "$m")" = 1 -a "$cfg_gets" = 1
check "pullgate said why" grep -q "cannot read the config in another namespace; fetching it from the origin" "$PG/log"
check_out "J runs it" "$PRIVMSG" run_img J j1 "$REG_t/private/app3:v1"
log "9. public blobs: held once in pullgate's public namespace (containerd 1.7+), never a private one"
# A distribution-like base at public/base (the token server lets anyone pull public/*) and a
# private application built on it: the base's layers are public at their origin once pullgate
# has fetched them there without credentials; the application's own layers and config are not.
python3 "$REPO/tests/mkimage.py" "$WORK/pubbase" --tag v1 --message "public base" --extra-layers 2 --layer-mb 0.3 --seed 77 --base-note "public distribution" >/dev/null
python3 "$REPO/tests/mkimage.py" "$WORK/onbase" --tag v1 --message "private app on a public base" --extra-layers 3 --layer-mb 0.3 --seed 77 --base-note "public distribution" >/dev/null
push_image "$WORK/pubbase" v1 "$REG_t/public/base:v1" "alice:$PW_ALICE" || fail "push the public base"
push_image "$WORK/onbase" v1 "$REG_t/private/onbase:v1" "alice:$PW_ALICE" || fail "push the application on it"
BASE_BLOBS=$(layout_blobs "$WORK/pubbase"); APP_BLOBS=$(layout_blobs "$WORK/onbase")
PUBLIC=$(comm -12 <(tr ' ' '\n' <<<"$BASE_BLOBS" | sort) <(tr ' ' '\n' <<<"$APP_BLOBS" | sort) | paste -sd' ')
PRIVATE=$(comm -13 <(tr ' ' '\n' <<<"$BASE_BLOBS" | sort) <(tr ' ' '\n' <<<"$APP_BLOBS" | sort) | paste -sd' ')
NPUB=$(wc -w <<<"$PUBLIC"); NPRIV=$(wc -w <<<"$PRIVATE")
check "the application shares $NPUB blobs with the base and has $NPRIV of its own" test "$NPUB" = 5 -a "$NPRIV" = 3
PUBNS=pullgate-public
in_pubns() { ctr_ -n "$PUBNS" content ls -q 2>/dev/null | sort | paste -sd' '; }
check_out "K pulls the public base without credentials" "sha256:" pg pull -n K "${REGF[@]}" "$REG_t/public/base:v1"
check_out "K pulls the application with alice's credential" "sha256:" pg pull -n K "${REGF[@]}" --user "alice:$PW_ALICE" "$REG_t/private/onbase:v1"
m=$(mark)
out=$(pg pull -n L "${REGF[@]}" --user "bob:$PW_BOB" "$REG_t/private/onbase:v1" 2>&1); rc=$?
check "L's pullgate pull of the application succeeds (rc=$rc: $(tail -n 1 <<<"$out"))" test $rc -eq 0
if [ "$V" = 1.6 ]; then
  # containerd 1.6 ignores the shareable label: public blobs are copied like private ones and
  # pullgate makes no public namespace.
  check "L copied all $((NPUB + NPRIV)) blobs" grep -qF "0 blob(s) downloaded, $((NPUB + NPRIV)) copied from the node, 0 layer(s)" <<<"$out"
  check "containerd 1.6: no public namespace made" not bash -c "$(printf '%q ' "${CTR[@]}") namespaces ls -q | grep -qx $PUBNS"
else
  check "L (the first namespace to need them on the node) copied all $((NPUB + NPRIV)) blobs, the public ones by way of pullgate's public namespace" \
    grep -qF "0 blob(s) downloaded, $((NPUB + NPRIV)) copied from the node, 0 layer(s)" <<<"$out"
  pub_now=$(in_pubns)
  check "pullgate's public namespace holds exactly the $NPUB public blobs ($(wc -w <<<"$pub_now") blob(s))" test "$pub_now" = "$(tr ' ' '\n' <<<"$PUBLIC" | sort | paste -sd' ')"
  check "it is labelled shareable" bash -c "$(printf '%q ' "${CTR[@]}") namespaces ls | grep -E '^$PUBNS ' | grep -q 'containerd.io/namespace.shareable=true'"
  out=$(pg pull -n M "${REGF[@]}" --user "carol:$PW_CAROL" "$REG_t/private/onbase:v1" 2>&1); rc=$?
  check "M's pullgate pull succeeds (rc=$rc: $(tail -n 1 <<<"$out"))" test $rc -eq 0
  check "M copied only the $NPRIV private blobs and took the $NPUB public ones from the public namespace" \
    grep -qF "0 blob(s) downloaded, $NPRIV copied from the node, $NPUB taken from pullgate's public namespace" <<<"$out"
  out=$(pg verify -n P "${REGF[@]}" --user "carol:$PW_CAROL" "$REG_t/private/onbase:v1" 2>&1); rc=$?
  check "a verify in P places the same way (rc=$rc: $(tail -n 1 <<<"$out"))" grep -qF "0 blob(s) downloaded, $NPRIV copied from the node, $NPUB taken from pullgate's public namespace" <<<"$out"
  check_out "M runs the application" "private app on a public base" run_img M m1 "$REG_t/private/onbase:v1"
fi
check "no blob GET at the registry for L, M and P ($(blob_gets "$m"))" test "$(blob_gets "$m")" = 0
# The base's layers recompressed with a secret in each gzip header: the same layer IDs (public
# ones), other blobs, which no origin serves without credentials.
RECOMP=$(python3 "$REPO/tests/recompress.py" "$WORK/pubbase" "$WORK/recomp" "SECRET-in-the-gzip-header")
push_image "$WORK/recomp" v1 "$REG_t/private/recomp:v1" "alice:$PW_ALICE" || fail "push the recompressed image"
check "no origin serves the recompressed image without credentials" not pg verify -n R0 "${REGF[@]}" "$REG_t/private/recomp:v1"
check_out "K pulls the recompressed image with alice's credential" "sha256:" pg pull -n K "${REGF[@]}" --user "alice:$PW_ALICE" "$REG_t/private/recomp:v1"
out=$(pg pull -n R1 "${REGF[@]}" --user "bob:$PW_BOB" "$REG_t/private/recomp:v1" 2>&1); rc=$?
check "R1's pull of it succeeds and takes nothing from the public namespace (rc=$rc: $(tail -n 1 <<<"$out"))" bash -c '[ $1 -eq 0 ] && ! grep -q "taken from pullgate" <<<"$2"' _ "$rc" "$out"
listed=$(ctr_ -n "$PUBNS" content ls -q 2>&1); rc=$?
leaked=""
for d in $RECOMP; do grep -qxF "$d" <<<"$listed" && leaked+="$d "; done
check "none of its blobs (public layer IDs, private bytes) is in the public namespace (listing rc=$rc; ${leaked:-none})" test $rc -eq 0 -a -z "$leaked"
# steal NS DIGEST FILE: what a namespace that proved nothing can take of a blob by digest: an
# empty ingest with the expected digest and size (as an attacker's manifest names them), then a
# content get into FILE. Returns 0 if either worked (an empty ingest of a blob that is not empty
# succeeds only when containerd adopted it from a shareable namespace; what it adopted may be
# collected before the get, as ctr's ingest holds it under a lease of the command's own); 3 when
# refused as containerd refuses it (the ingest reads no bytes where its size says more: 1.7 and
# later say "short read", 1.6 "failed to read expected number of bytes"; or its commit fails on
# the size or digest; and the get finds no such content); 4, saying why, on anything else (a broken command is not a refusal).
steal() {
  local size ingest irc got grc
  size=$(find "$WORK" -path "*/blobs/sha256/${2#sha256:}" -printf '%s\n' -quit)
  [ -n "$size" ] || { echo "steal: no layout holds $2"; return 4; }
  ingest=$(ctr_ -n "$1" content ingest --expected-digest "$2" --expected-size "$size" "steal-$2" <"$WORK/empty" 2>&1 >/dev/null); irc=$?
  got=$(ctr_ -n "$1" content get "$2" 2>&1 >"$3"); grc=$?
  if [ $grc -eq 0 ] || [ $irc -eq 0 ]; then return 0; fi
  if grep -qi "not found" <<<"$got" && grep -qE "short read: expected [0-9]+ bytes but got 0|failed to read expected number of bytes: unexpected EOF|unexpected commit (size|digest)" <<<"$ingest"; then return 3; fi
  echo "steal: not a refusal: ingest rc=$irc: $(head -c 300 <<<"$ingest"); get rc=$grc: $(head -c 300 <<<"$got")"; return 4
}
if [ "$V" != 1.6 ]; then
  # The positive control: the same steal of a public blob, held in pullgate's public namespace
  # (shareable), works; so the refusals below are the isolated store's, not a broken steal.
  # The record the ingest gives QC is held by no lease or image: containerd's garbage collector
  # may take it before the `content get` that follows, so the pair is tried up to three times.
  pubd=$(awk '{print $1}' <<<"$PUBLIC")
  got_all() { test "$rc" -eq 0 -a "sha256:$(sha256sum < "$WORK/qc-pub" | cut -d' ' -f1)" = "$pubd"; }
  for try in 1 2 3; do steal QC "$pubd" "$WORK/qc-pub"; rc=$?; got_all && break; done
  check "control: QC's steal of a public blob (held in the shareable public namespace) gets it (rc=$rc, attempt $try), every byte" got_all
fi
steal Q "$(awk '{print $1}' <<<"$RECOMP")" "$WORK/q-recomp"; rc=$?
check "Q is refused its base layer's blob by an ingest with its digest (rc=$rc: 3 is containerd's refusal) and got no byte of it ($(wc -c <"$WORK/q-recomp"))" test $rc -eq 3 -a ! -s "$WORK/q-recomp"
listed=$(ctr_ -n "$PUBNS" content ls -q 2>&1); rc=$?
leaked=""
for d in $PRIVATE; do grep -qxF "$d" <<<"$listed" && leaked+="$d "; done
check "no private blob of the application is in the public namespace (listing rc=$rc; ${leaked:-none})" test $rc -eq 0 -a -z "$leaked"
top=$(awk '{print $NF}' <<<"$APP_BLOBS")
steal Q "$top" "$WORK/q-top"; rc=$?
check "Q, which proved nothing, is refused the application's own top layer (rc=$rc: 3 is containerd's refusal) and got none of its bytes ($(wc -c <"$WORK/q-top"))" test $rc -eq 3 -a ! -s "$WORK/q-top"
before=$(in_pubns)
out=$(pg pull -n "$PUBNS" "${REGF[@]}" --user "alice:$PW_ALICE" "$REG_t/private/onbase:v1" 2>&1); rc=$?
check "a pull into pullgate's public namespace is refused (rc=$rc)" test $rc -ne 0
check "and says why" grep -q "is pullgate's public namespace" <<<"$out"
check "the public namespace is unchanged" test "$(in_pubns)" = "$before"
out=$(pg verify -n "$PUBNS" "${REGF[@]}" --user "alice:$PW_ALICE" "$IMG" 2>&1); rc=$?
check "so is a verify there (rc=$rc)" test $rc -ne 0 -a "$(in_pubns)" = "$before"
if [ "$V" != 1.6 ]; then
  log "10. pullgate's public namespace: labelled only while all it holds is public, checked at each pull"
  SHAREABLE=containerd.io/namespace.shareable
  pub_labelled() { "${CTR[@]}" namespaces ls | grep -E "^$PUBNS " | grep -q "$SHAREABLE=true"; }
  check "the label is removed (as an operator or a client may)" ctr_ namespaces label "$PUBNS" "$SHAREABLE="
  check "(it is gone)" not pub_labelled
  # A pull dropped (its client gone) after it labelled the namespace and before it looked at
  # what the namespace holds again: the label goes with it. pullgate restarted with a stall
  # point there (PULLGATE_STALL_AT), the client killed while the pull waits at it.
  kill "$PG_PID"; wait "$PG_PID" 2>/dev/null
  PULLGATE_STALL_AT=public.labelled:30 start_pullgate "$PG" && wait_backend || fail "10: pullgate restarts with a stall point"
  stalls() { grep -c "stall point reached" "$PG/log"; }
  before=$(stalls)
  timeout 60 "$PG_BIN" pull --address "$PG/api.sock" -n S0 "${REGF[@]}" --user "carol:$PW_CAROL" "$REG_t/private/onbase:v1" >/dev/null 2>&1 & client=$!
  wait_for 30 bash -c "[ \$(grep -c 'stall point reached' '$PG/log') -gt $before ]" || fail "10: the pull reaches the stall point"
  check "10: the pull labelled the public namespace before it stalled" pub_labelled
  kill "$client"; wait "$client" 2>/dev/null
  check "10: the client gone, the label is taken away" wait_for 10 not pub_labelled
  check "10: pullgate's log says why" grep -q "a check of pullgate's public namespace was cancelled: its shareable label is taken away" "$PG/log"
  kill "$PG_PID"; wait "$PG_PID" 2>/dev/null
  start_pullgate "$PG" && wait_backend || fail "10: pullgate restarts without the stall point"
  labelled_logs() { grep -c "pullgate's public namespace labelled: everything it holds is public" "$PG/log"; }
  before=$(labelled_logs)
  out=$(pg pull -n S1 "${REGF[@]}" --user "carol:$PW_CAROL" "$REG_t/private/onbase:v1" 2>&1); rc=$?
  check "S1's pull succeeds (rc=$rc: $(tail -n 1 <<<"$out"))" test $rc -eq 0
  check "S1 copied only the $NPRIV private blobs and took the $NPUB public ones from the public namespace" \
    grep -qF "0 blob(s) downloaded, $NPRIV copied from the node, $NPUB taken from pullgate's public namespace" <<<"$out"
  check "the label is back" pub_labelled
  check "pullgate's log says so ($before, then $(labelled_logs) such line(s))" test "$(labelled_logs)" -gt "$before"
  # Blobs pullgate never established as public, written into the labelled namespace by a client
  # with containerd's socket: the private application imported there (an image record keeps
  # them from containerd's garbage collection). Until the next pull they are anyone's to adopt,
  # as in any shareable namespace; that pull finds them and takes the label away.
  tar -C "$WORK/onbase" -cf "$WORK/onbase.tar" .
  check "(the public namespace is labelled)" pub_labelled
  check "a client imports the private application into $PUBNS" ctr_ -n "$PUBNS" images import --no-unpack --index-name client/onbase:v1 "$WORK/onbase.tar"
  check "(its private top layer is there)" grep -qxF "$top" <<<"$(ctr_ -n "$PUBNS" content ls -q)"
  out=$(pg pull -n S2 "${REGF[@]}" --user "carol:$PW_CAROL" "$REG_t/private/onbase:v1" 2>&1); rc=$?
  check "S2's pull succeeds (rc=$rc: $(tail -n 1 <<<"$out"))" test $rc -eq 0
  check "S2 copied all $((NPUB + NPRIV)) blobs and took none from the public namespace" \
    bash -c 'grep -qF "0 blob(s) downloaded, $1 copied from the node, 0 layer(s)" <<<"$2" && ! grep -q "taken from pullgate" <<<"$2"' _ "$((NPUB + NPRIV))" "$out"
  check "pullgate removed the public namespace's label" not pub_labelled
  check "pullgate's log says why: blobs it did not establish as public" \
    grep -qE "namespace $PUBNS holds [0-9]+ blob\(s\) that pullgate did not establish as public" "$PG/log"
  check "(the top layer is still there)" grep -qxF "$top" <<<"$(ctr_ -n "$PUBNS" content ls -q)"
  steal Q2 "$top" "$WORK/q2-top"; rc=$?
  check "Q2, which proved nothing, is refused that layer by an ingest with its digest (rc=$rc: 3 is containerd's refusal) and got none of its bytes ($(wc -c <"$WORK/q2-top"))" test $rc -eq 3 -a ! -s "$WORK/q2-top"
  # (ctr's import names the image twice: the index's name, and its own from the layout's tag.)
  imported=$(ctr_ -n "$PUBNS" images ls -q)
  check "the client's images removed from $PUBNS ($(wc -w <<<"$imported"))" ctr_ -n "$PUBNS" images rm --sync $imported
  check "(its private blobs went with it)" not grep -qxF "$top" <<<"$(ctr_ -n "$PUBNS" content ls -q)"
  out=$(pg pull -n S3 "${REGF[@]}" --user "carol:$PW_CAROL" "$REG_t/private/onbase:v1" 2>&1); rc=$?
  check "S3 takes the $NPUB public blobs from the public namespace again (rc=$rc: $(tail -n 1 <<<"$out"))" \
    grep -qF "0 blob(s) downloaded, $NPRIV copied from the node, $NPUB taken from pullgate's public namespace" <<<"$out"
  check "and it is labelled shareable again" pub_labelled
fi
log "11. the chains gone, the blobs kept on the node: a new tenant's pull copies each layer and applies it"
# An image of its own, pulled by K1 only; K1 then keeps its blobs (a gc.root label on each) and
# removes the image: containerd's GC takes its chains from pullgate. K2's pull must copy every
# blob from K1 and unpack each layer from its copy, which it waits for (copies and the unpack
# run together).
KEPTMSG="kept blobs, chains gone"
python3 "$REPO/tests/mkimage.py" "$WORK/kept" --tag v1 --message "$KEPTMSG" --extra-layers 3 --layer-mb 16 --seed 37 >/dev/null
KEPT=$REG_t/private/kept:v1
push_image "$WORK/kept" v1 "$KEPT" "alice:$PW_ALICE" || fail "push the kept image"
KMD=$(layout_manifest "$WORK/kept"); KBLOBS=$(layout_blobs "$WORK/kept")
KLAYERS=$(( $(wc -w <<<"$KBLOBS") - 1 ))
check_out "K1's pullgate pull" "$KMD" pg pull -n K1 "${REGF[@]}" --user "alice:$PW_ALICE" "$KEPT"
for d in $KBLOBS; do check "K1 makes $d a GC root" ctr_ -n K1 content label "$d" containerd.io/gc.root=kept; done
# (The config's reference to the top chain would keep the chains: it goes.)
check "K1 takes the config's reference to its chain away" ctr_ -n K1 content label "${KBLOBS%% *}" containerd.io/gc.ref.snapshot.pullgate=
check "K1 removes the image" ctr_ -n K1 images rm --sync "$KEPT"
snaps=$(ctr_ -n K1 snapshots --snapshotter pullgate ls 2>&1); rc=$?
# (Every line but the header and ctr's own log lines, such as 2.4's cgroup v1 warning, names one.)
check "K1 has no snapshot left (rc=$rc: $(shown 200 "$snaps"))" test $rc -eq 0 -a -z "$(grep -v -e '^KEY ' -e 'level=' <<<"$snaps" | grep .)"
kept=$(holds K1 "$KBLOBS")
check "K1 still holds all $((KLAYERS + 1)) blobs ($kept)" test "$kept" = $((KLAYERS + 1))
from=$(mark)
out=$(pg pull -n K2 "${REGF[@]}" --user "bob:$PW_BOB" -o json "$KEPT" 2>"$WORK/k2.err"); rc=$?
check "K2's pull succeeds (rc=$rc: $(shown 300 "$(cat "$WORK/k2.err")"))" test $rc -eq 0
# (Its first layers are those of every image mkimage.py makes, whose chains other namespaces
# hold: adopted; on 1.7+ those of public/base come from pullgate's public namespace. Its 3
# extra layers and its top one are its own: unpacked from their copies.)
counts=$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); e, a = d["extracted"], d["adopted"]; print(len(d["downloaded"]), len(d["copied"]) + len(d["public"]), "own-extracted" if e >= 4 else e, e + a)' "$out" 2>/dev/null || echo "no JSON answer")
check "K2 downloaded nothing, copied all $((KLAYERS + 1)) blobs (or, 1.7+, took the public ones from pullgate's public namespace), extracted its 4 own layers (with the rest adopted, $KLAYERS in all) ($counts)" \
  test "$counts" = "0 $((KLAYERS + 1)) own-extracted $KLAYERS"
check "the registry served no blob for it ($(blob_gets "$from") GETs)" test "$(blob_gets "$from")" -eq 0
check_out "K2 runs it" "$KEPTMSG" run_img K2 k2 "$KEPT"
image_complete() { ctr_ -n "$1" images check --snapshotter pullgate | grep -F "$2 " | grep -q ' complete '; }
check "K2's image is complete (every blob in K2)" image_complete K2 "$KEPT"

check "no password in pullgate's log" not grep -qE "$PW_ALICE|$PW_BOB|$PW_CAROL" "$PG/log"

summary "e2e isolated (containerd $V)"
