#!/usr/bin/env bash
# End-to-end: the gate (DESIGN.md, "The rule pullgate enforces") on a real containerd of the
# given version, configured from plugin/ with pullgate as the only snapshotter, against an
# htpasswd registry, a token-auth registry with per-repository access (tests/tokenserver.py),
# an anonymous registry and an attacker's registry (tests/evilregistry.py); driven by ctr and
# the pullgate CLI. Usage: tests/e2e_gate.sh VERSION
source "$(dirname "$0")/lib.sh"
V=${1:?usage: e2e_gate.sh 1.6|1.7|2.1}
trap cleanup EXIT
PW_ALICE=alice-Secret-9f3k
PW_BOB=bob-Secret-7q2z
PW_CAROL=carol-Secret-4m8x
PW_ADMIN=admin-Secret-1a6c

log "containerd $V (gate): setup"
python3 "$REPO/tests/mkimage.py" "$WORK/pub" --tag v1 --message "public base image" --nested-index >/dev/null
python3 "$REPO/tests/mkimage.py" "$WORK/priv" --tag v1 --message "private app" --extra-layers 1 --layer-mb 0.2 --seed 11 >/dev/null
python3 "$REPO/tests/mkimage.py" "$WORK/pre" --tag v1 --message "preloaded app" --extra-layers 1 --layer-mb 0.1 --seed 23 >/dev/null
start_registry pub || exit 1
start_registry h htpasswd alice "$PW_ALICE" || exit 1
cat > "$WORK/acl.json" <<JSON
{"users": {"alice": "$PW_ALICE", "bob": "$PW_BOB", "carol": "$PW_CAROL", "admin": "$PW_ADMIN"},
 "access": {"alice": ["private/*"], "bob": ["private/app"], "carol": ["other/*"], "admin": ["*"]},
 "push": ["admin"]}
JSON
start_token_registry t "$WORK/acl.json" || exit 1
PUB=$REG_pub/public/base:v1
PRE=$REG_pub/other/preloaded:v1
HPRIV=$REG_h/private/app:v1
TPRIV=$REG_t/private/app:v1
push_image "$WORK/pub" v1 "$PUB" "" --all && push_image "$WORK/pre" v1 "$PRE" && push_image "$WORK/priv" v1 "$HPRIV" "alice:$PW_ALICE" \
  && push_image "$WORK/priv" v1 "$TPRIV" "admin:$PW_ADMIN" || { fail "push test images"; exit 1; }
PG=$WORK/pullgate
pullgate_config "$PG"
BASE_CONFIG=$(cat "$PG/config.toml")
start_pullgate "$PG" || exit 1
start_containerd "$V" "$PG/snapshotter.sock" || exit 1
wait_backend
pg() { local sub=$1; shift; "$PG_BIN" "$sub" --address "$PG/api.sock" "$@"; }
# restart_pullgate [TOML]: SIGTERM pullgate and start it again with extra config.
restart_pullgate() {
  kill "$PG_PID"; wait "$PG_PID" 2>/dev/null
  printf '%s\n%s\n' "$BASE_CONFIG" "${1:-}" > "$PG/config.toml"
  start_pullgate "$PG" && wait_backend
}
# run_in NS NAME [ctr run flags...]: runs IMAGE (last arg) and prints its output.
run_img() { local ns=$1 id=$2; shift 2; ctr_ -n "$ns" run --rm --snapshotter pullgate "$@" "$id"; }
DENIED='pullgate denied namespace'

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
check "pullgate pull -n A --user alice (htpasswd registry)" pg pull -n A --plain-http --user "alice:$PW_ALICE" "$HPRIV"
check "pullgate pull -n A --user alice (token registry)" pg pull -n A --plain-http --user "alice:$PW_ALICE" "$TPRIV"
check_out "A runs it" "private app" run_img A a1 "$HPRIV"
check_out "pullgate inspect shows the origin" "served by $REG_h/private/app to id:" pg inspect "$HPRIV"
check_out "pullgate inspect shows the private layers as protected" "protected" pg inspect "$HPRIV"
check_out "pullgate inspect shows the shared base layer as public" "public" pg inspect "$HPRIV"
check_out "ctr content ls shows the htpasswd origin and alice's identity" "pullgate.io/origin.$REG_h/private/app=id:" ctr_ -n A content ls
check_out "ctr content ls shows the token origin too" "pullgate.io/origin.$REG_t/private/app=id:" ctr_ -n A content ls
check_out "pullgate grants lists A's grants" "$REG_t/private/app" pg grants -n A

log "3. tenant B adopts A's blobs by digest, imports them as an image, and tries to run it"
: > "$WORK/empty"
mkdir -p "$WORK/stolen/blobs/sha256"
# steal DIGEST: adopt A's blob into B by digest alone (an empty write), then pin it with a gc.root
# label. containerd's GC may collect the unreferenced blob between the ingest and the label (seen
# under 2.1 in CI), so the attacker simply tries again, as a real one would.
steal() {
  local d=$1 try
  for try in 1 2 3 4 5; do
    ctr_ -n B content ingest --expected-digest "$d" "steal-$d" < "$WORK/empty" >/dev/null 2>&1
    ctr_ -n B content label "$d" containerd.io/gc.root=stolen >/dev/null 2>&1 &&
      ctr_ -n B content get "$d" > "$WORK/stolen/blobs/sha256/${d#sha256:}" 2>/dev/null && return 0
  done
  return 1
}
for d in $(ctr_ -n A content ls -q); do steal "$d"; done
nA=$(ctr_ -n A content ls -q | wc -l); nB=$(ctr_ -n B content ls -q | wc -l)
check "the adoption by digest worked: B holds A's $nA blobs without sending a byte ($nB; the residual risk of the shared store)" \
  test "$nB" -eq "$nA"
mdig=$(pg inspect "$HPRIV" | awk '/^manifest /{print $2; exit}')
msize=$(stat -c %s "$WORK/stolen/blobs/sha256/${mdig#sha256:}")
printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%s","size":%s,"annotations":{"io.containerd.image.name":"stolen.example/app:v1","org.opencontainers.image.ref.name":"v1"}}]}' "$mdig" "$msize" > "$WORK/stolen/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' > "$WORK/stolen/oci-layout"
tar -C "$WORK/stolen" -cf "$WORK/stolen.tar" .
out=$(ctr_ -n B images import --snapshotter pullgate "$WORK/stolen.tar" 2>&1); rc=$?
# ctr 1.6/1.7 import without unpacking by default; 2.1's transfer service unpacks, and is refused.
if [ "$V" = 2.1 ]; then
  if [ $rc -ne 0 ] && grep -q "$DENIED \"B\"" <<<"$out"; then pass "2.1: ctr images import (which unpacks) is refused"; else fail "2.1 import: rc=$rc: $out"; fi
  settle_gc B
fi
ctr_ -n B images import --no-unpack --snapshotter pullgate "$WORK/stolen.tar" >/dev/null 2>&1
check "the stolen image record exists in B" bash -c "'${CTR[0]}' -a '${CTR[2]}' -n B images ls -q | grep -q stolen.example/app:v1"
out=$(run_img B b1 stolen.example/app:v1 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -q "$DENIED \"B\"" <<<"$out" && grep -q "pullgate verify -n B" <<<"$out" && grep -q "private/app" <<<"$out"; then
  pass "ctr run of the adopted image is refused, naming namespace, layer, image and the fixing command"
else fail "attack 1 (digest adoption): rc=$rc: $out"; fi
settle_gc B
check_has "pullgate check says denied for B" "denied: $DENIED \"B\"" pg check -n B "$HPRIV"

log "4. tenant B pulls an attacker's manifest that points at A's private blobs"
EVPORT=$(free_port)
python3 - "$WORK/stolen/blobs/sha256/${mdig#sha256:}" "$WORK/evil-manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); m["annotations"] = {"made-by": "attacker"}
open(sys.argv[2], "w").write(json.dumps(m))
PY
/usr/bin/python3 "$REPO/tests/evilregistry.py" --port "$EVPORT" --repo evil/app --tag v1 --manifest "$WORK/evil-manifest.json" --log "$WORK/evil.log" &
PIDS+=($!)
wait_for 10 curl -sf "http://127.0.0.1:$EVPORT/v2/"
EVIL=127.0.0.1:$EVPORT/evil/app:v1
out=$(ctr_ -n B4 images pull --plain-http --snapshotter pullgate "$EVIL" 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -q "$DENIED \"B4\"" <<<"$out"; then pass "plain ctr pull of the evil manifest is refused at unpack"
else fail "attack 2 (evil manifest) through ctr: rc=$rc: $out"; fi
check "the evil registry served no blob" bash -c "! grep -q /blobs/ '$WORK/evil.log' || ! grep -qE '^GET .*/blobs/' '$WORK/evil.log'"
check_err "pullgate pull of the evil reference fails: that registry cannot serve the bytes" "not found" pg pull -n B4 --plain-http "$EVIL"
check_err "pullgate verify of it fails the same way" "not found" pg verify -n B4 --plain-http "$EVIL"
check "no grant was recorded for B4" test -z "$(pg grants -n B4 | awk 'NR>1')"

log "5. tenant B verifies with its own valid credentials: one manifest round-trip, then adopts A's chain"
mark=$(wc -l < "$WORK/registry-t/log"); : > "$WORK/registry-t/token.log"
check_out "pullgate verify -n B5 --user bob (token registry)" "sha256:" pg verify -n B5 --plain-http --user "bob:$PW_BOB" "$TPRIV"
after=$(tail -n +"$((mark + 1))" "$WORK/registry-t/log")
check "the registry saw manifest requests" grep -q '/v2/private/app/manifests/' <<<"$after"
check "the token server issued bob a token by POST" grep -q '^POST /token user=bob' "$WORK/registry-t/token.log"
check "the registry saw no blob request" bash -c "! grep -q '/blobs/' <<<'$after'"
du_before=$(du -sb "$PG/root/snapshots" | cut -f1)
out=$(pg pull -n B5 --plain-http --user "bob:$PW_BOB" "$TPRIV" 2>&1)
check_out "pullgate pull -n B5 downloads nothing and adopts A's chain" "0 blob(s) downloaded, 0 layer(s) extracted, 5 adopted" echo "$out"
check "B5's unpack extracted nothing (no commit in namespace B5)" bash -c "! grep -q 'commit key=B5/' '$PG/log'"
du_after=$(du -sb "$PG/root/snapshots" | cut -f1)
check "disk use did not grow by the image's size (~1.3 MB): $du_before -> $du_after bytes" test "$du_after" -le "$((du_before + 131072))"
check_out "B5 runs the image" "private app" run_img B5 b5 "$TPRIV"

log "5b. same registry host, another repository: an authenticated blob HEAD stands in for the download"
skopeo copy --quiet --src-tls-verify=false --dest-tls-verify=false --src-creds "admin:$PW_ADMIN" --dest-creds "admin:$PW_ADMIN" \
  "docker://$TPRIV" "docker://$REG_t/private/mirror:v1" >/dev/null 2>&1
cat > "$WORK/acl.json" <<JSON
{"users": {"alice": "$PW_ALICE", "bob": "$PW_BOB", "carol": "$PW_CAROL", "admin": "$PW_ADMIN"},
 "access": {"alice": ["private/*"], "bob": ["private/app", "private/mirror"], "carol": ["other/*"], "admin": ["*"]},
 "push": ["admin"]}
JSON
cp "$WORK/acl.json" "$WORK/registry-t/acl.json"
mark=$(wc -l < "$WORK/registry-t/log")
check "pullgate verify -n B5b at $REG_t/private/mirror" pg verify -n B5b --plain-http --user "bob:$PW_BOB" "$REG_t/private/mirror:v1"
after=$(tail -n +"$((mark + 1))" "$WORK/registry-t/log")
check "the registry saw blob HEADs at the new repository" grep -q '"HEAD /v2/private/mirror/blobs/' <<<"$after"
check "and no blob GET" bash -c "! grep -q '\"GET /v2/private/mirror/blobs/' <<<'$after'"
check_out "pullgate inspect lists the new origin for the blobs" "served by $REG_t/private/mirror" pg inspect "$REG_t/private/mirror:v1"

log "5c. containerd's GC keeps working for images pullgate pulled"
check "pullgate pull -n G of the public image" pg pull -n G --plain-http "$PUB"
check "G sees the chain" test "$(ctr_ -n G snapshots --snapshotter pullgate ls | awk 'NR>1' | wc -l)" -ge 4
check "ctr -n G images rm --sync" ctr_ -n G images rm --sync "$PUB"
check "G's snapshots are gone after GC" test "$(ctr_ -n G snapshots --snapshotter pullgate ls | awk 'NR>1' | wc -l)" -eq 0
check "G's content is gone after GC" test "$(ctr_ -n G content ls -q | wc -l)" -eq 0

PL=containerd.io/snapshot/pullgate.principal
log "6. no access, wrong password, registry down, bad input: distinct errors, nothing recorded"
check_err "valid login without access (insufficient_scope)" "no access to $REG_t/private/app" pg verify -n C6 --plain-http --user "carol:$PW_CAROL" "$TPRIV"
"$PG_BIN" verify --address "$PG/api.sock" -n C6 --plain-http --user "carol:$PW_CAROL" "$TPRIV" >/dev/null 2>&1; check "its exit code is 3 (denied)" test $? -eq 3
check_err "wrong password (token registry)" "rejected the credentials of user \"alice\"" pg verify -n C6 --plain-http --user "alice:wrong" "$TPRIV"
check_err "wrong password (htpasswd registry)" "rejected the credentials" pg verify -n C6 --plain-http --user "alice:wrong" "$HPRIV"
DOWN=127.0.0.1:$(free_port)/private/app:v1
check_err "registry down" "unavailable" pg verify -n C6 --plain-http --user "alice:$PW_ALICE" "$DOWN"
"$PG_BIN" verify --address "$PG/api.sock" -n C6 --plain-http "$DOWN" >/dev/null 2>&1; check "its exit code is 5 (unavailable)" test $? -eq 5
check_err "a malformed reference" "invalid image reference" pg verify -n C6 "not a reference"
for bad_ns in "a/b" "$(printf 'tab\there')" ""; do
  check_err "namespace ${bad_ns@Q} is refused" "invalid namespace" pg verify -n "$bad_ns" --plain-http --user "alice:$PW_ALICE" "$HPRIV"
done
check_err "a principal with a path separator is refused" "invalid principal" pg verify -n C6 --principal "../x" --plain-http --user "alice:$PW_ALICE" "$HPRIV"
LONG=$(printf 'p%.0s' {1..20000})
out=$(pg verify -n C6 --principal "$LONG" --plain-http --user "alice:$PW_ALICE" "$HPRIV" 2>&1); rc=$?
check "a 20,000-character principal is refused with a short message (${#out} bytes)" bash -c "[ $rc -ne 0 ] && [ ${#out} -lt 400 ] && grep -q 'invalid principal' <<<'$out'"
out=$(pg pull -n C6 --plain-http "$REG_h/private/$LONG:v1" 2>&1); rc=$?
check "a 20,000-character reference is refused with a short message (${#out} bytes)" bash -c "[ $rc -ne 0 ] && [ ${#out} -lt 400 ] && grep -q 'invalid image reference' <<<'$out'"
check_err "a principal label with a control character is refused by the snapshotter" "invalid principal" \
  run_img A bad1 --snapshotter-label "$PL=$(printf 'a\001b')" "$HPRIV"
check_err "an unknown digest" "no record of" pg inspect "sha256:$(printf '0%.0s' {1..64})"
"$PG_BIN" inspect --address "$PG/api.sock" "sha256:$(printf '0%.0s' {1..64})" >/dev/null 2>&1; check "its exit code is 4 (not found)" test $? -eq 4
check_err "a malformed platform" "invalid platform" pg verify -n C6 --platform linux --plain-http "$HPRIV"
check_err "revoke with a malformed reference" "invalid image reference" pg revoke -n C6 "Not/A/Ref"
check "nothing was recorded for C6" test -z "$(pg grants -n C6 | awk 'NR>1')"

log "6b. hostile registries: each ends with a clear error in bounded time, records nothing, leaks nothing"
restart_pullgate $'[registry]\ntimeout = "3s"' || fail "restart pullgate with a 3 s registry timeout"
EVM=$WORK/evil-manifest.json
EVD=sha256:$(sha256sum "$EVM" | cut -d' ' -f1)
# hostile MODE WANT [REF-SUFFIX]: runs pullgate verify (with a password) against a registry in
# MODE; it must fail within 30 s (the bound is the timeout command's), say WANT, record no
# grant and never print the password.
hostile() {
  local mode=$1 want=$2 suffix=${3:-:v1} port away out rc
  port=$(free_port); away=$(free_port)
  /usr/bin/python3 "$REPO/tests/evilregistry.py" --port "$port" --away-port "$away" --mode "$mode" --repo evil/app --tag v1 \
    --manifest "$EVM" --log "$WORK/hostile-$mode.log" &
  local rpid=$!; PIDS+=($rpid)
  wait_for 10 curl -s -o /dev/null "http://127.0.0.1:$port/v2/"
  out=$(timeout 30 "$PG_BIN" verify --address "$PG/api.sock" -n H6 --plain-http --user "alice:$PW_ALICE" "127.0.0.1:$port/evil/app$suffix" 2>&1); rc=$?
  kill "$rpid" 2>/dev/null
  if [ $rc -eq 124 ]; then fail "$mode: still running after 30 s"
  elif [ $rc -eq 0 ]; then fail "$mode: verify succeeded: $out"
  elif ! grep -qiF -- "$want" <<<"$out"; then fail "$mode: rc=$rc, want '$want', got: $out"
  elif grep -qF -- "$PW_ALICE" <<<"$out"; then fail "$mode: the error message carries the password"
  else pass "$mode: refused (exit $rc): $(head -c 160 <<<"$out")"; fi
}
hostile wrong-digest "digest mismatch for manifest $EVD" "@$EVD"
hostile huge "larger than 4194304 bytes"
hostile redirect-away "not found"
check_out "redirect-away: the other host got the request without the Authorization header" "AWAY AUTH no" cat "$WORK/hostile-redirect-away.log"
check "redirect-away: and never with it" bash -c "! grep -q 'AWAY AUTH yes' '$WORK/hostile-redirect-away.log'"
hostile redirect-loop "redirects"
hostile bad-challenge "WWW-Authenticate"
hostile trickle "unavailable"
check "nothing was recorded for H6 by any of them" test -z "$(pg grants -n H6 | awk 'NR>1')"
restart_pullgate || fail "restart pullgate with the base config"

log "7. two principals in one namespace; require_principal"
check "pullgate pull -n P7 --principal pod1" pg pull -n P7 --principal pod1 --plain-http --user "bob:$PW_BOB" "$TPRIV"
check_out "pod1 runs it" "private app" run_img P7 r1 --snapshotter-label "$PL=pod1" "$TPRIV"
check_err "pod2 is refused" "$DENIED \"P7\" \\(principal \"pod2\"\\)" run_img P7 r2 --snapshotter-label "$PL=pod2" "$TPRIV"
check_err "a run without a principal is refused (no namespace-wide grant)" "$DENIED \"P7\"" run_img P7 r3 "$TPRIV"

restart_pullgate $'[namespaces."RP"]\nrequire_principal = true' || exit 1
check "pullgate pull -n RP --principal pod1" pg pull -n RP --principal pod1 --plain-http --user "bob:$PW_BOB" "$TPRIV"
check "pullgate verify -n RP (namespace-wide)" pg verify -n RP --plain-http --user "bob:$PW_BOB" "$TPRIV"
check_err "require_principal: a run without the label is refused" "requires a principal" run_img RP r4 "$TPRIV"
check_out "require_principal: pod1 runs" "private app" run_img RP r5 --snapshotter-label "$PL=pod1" "$TPRIV"
check_err "require_principal: a namespace-wide grant does not admit pod2" "$DENIED \"RP\" \\(principal \"pod2\"\\)" run_img RP r6 --snapshotter-label "$PL=pod2" "$TPRIV"
restart_pullgate "" || exit 1

log "8. policies"
check "plain ctr pulls an image pullgate never saw" ctr_ -n P8 images pull --plain-http --snapshotter pullgate "$PRE"
check_out "under NeverVerifyPreloadedImages (default) it runs" "preloaded app" run_img P8 q1 "$PRE"
restart_pullgate $'[policy]\nverification = "AlwaysVerify"' || exit 1
check_err "under AlwaysVerify it is refused" "no record of this layer" run_img P8 q2 "$PRE"
check_out "under AlwaysVerify A still runs its verified image" "private app" run_img A a2 "$HPRIV"
check_out "under AlwaysVerify the public image still runs" "public base image" run_img other p3 "$PUB"
restart_pullgate "$(printf '[policy]\nverification = "NeverVerifyAllowlistedImages"\nallowlist = ["%s/private/*"]' "$REG_h")" || exit 1
check_out "an allowlisted origin is allowed for B without a grant" "private app" run_img B b8 stolen.example/app:v1
check_err "the never-seen image is refused under NeverVerifyAllowlistedImages" "no record" run_img P8 q3 "$PRE"
restart_pullgate $'[policy]\nverification = "NeverVerify"' || exit 1
check_out "under NeverVerify B runs the stolen image" "private app" run_img B b9 stolen.example/app:v1
restart_pullgate "" || exit 1
check_err "back to the default, B is refused again" "$DENIED \"B\"" run_img B b10 stolen.example/app:v1

log "9. SIGKILL pullgate and restart containerd: grants, tags and refusals are kept"
grants_before=$(pg grants --all); checks_before=$(pg check -n A "$HPRIV"; pg check -n B "$HPRIV")
content_labels() { ctr_ -n A content ls | awk 'NR>1 {n=split($NF,a,","); for(i=1;i<=n;i++) print $1, a[i]}' | sort; }
labels_before=$(content_labels)
kill -9 "$PG_PID"; wait "$PG_PID" 2>/dev/null
kill "$CTRD_PID"; wait "$CTRD_PID" 2>/dev/null
start_pullgate "$PG" || exit 1
start_containerd "$V" "$PG/snapshotter.sock" || exit 1
wait_backend
check "grants are unchanged" test "$grants_before" = "$(pg grants --all)"
check "decisions are unchanged" test "$checks_before" = "$(pg check -n A "$HPRIV"; pg check -n B "$HPRIV")"
check "content labels are unchanged" test "$labels_before" = "$(content_labels)"
check_out "A still runs" "private app" run_img A a3 "$HPRIV"
check_err "B is still refused" "$DENIED \"B\"" run_img B b11 stolen.example/app:v1

log "10. reverify_after and revoke"
restart_pullgate $'[policy]\nreverify_after = "3s"' || exit 1
check "verify -n A" pg verify -n A --plain-http --user "alice:$PW_ALICE" "$HPRIV"
check_out "A runs right after verifying" "private app" run_img A a4 "$HPRIV"
sleep 4
check_err "after reverify_after, A is refused" "older than reverify_after" run_img A a5 "$HPRIV"
check "verify again" pg verify -n A --plain-http --user "alice:$PW_ALICE" "$HPRIV"
check_out "A runs again" "private app" run_img A a6 "$HPRIV"
restart_pullgate "" || exit 1
check_out "pullgate revoke -n A" "revoked" pg revoke -n A
check_err "after revoke, A is refused" "$DENIED \"A\"" run_img A a7 "$HPRIV"
check "verify restores access" pg verify -n A --plain-http --user "alice:$PW_ALICE" "$HPRIV"
check_out "A runs" "private app" run_img A a8 "$HPRIV"

log "11. a base layer shared with a public image stays usable while the private layers are gated"
check_out "B (no grant) runs the public image that shares the private image's base layers" "public base image" \
  bash -c "'${CTR[0]}' -a '${CTR[2]}' -n B images pull --plain-http --snapshotter pullgate '$PUB' >/dev/null && '${CTR[0]}' -a '${CTR[2]}' -n B run --rm --snapshotter pullgate '$PUB' b12"
check_err "while the private image stays refused for B" "$DENIED \"B\"" run_img B b13 stolen.example/app:v1

log "concurrency: 32 pulls, verifies, runs and revokes across 8 namespaces at once"
for k in 0 1 2 3 4 5 6 7; do ctr_ -n "K$k" images pull --plain-http --snapshotter pullgate "$PUB" >/dev/null 2>&1; done
cpids=()
for i in $(seq 0 31); do
  ns=K$((i % 8))
  case $((i % 4)) in
    0) pg pull -n "$ns" --plain-http --user "bob:$PW_BOB" "$TPRIV" ;;
    1) pg verify -n "$ns" --plain-http --user "bob:$PW_BOB" "$TPRIV" ;;
    2) run_img "$ns" "k$i" "$PUB" ;;
    3) pg revoke -n "$ns" ;;
  esac > "$WORK/k$i.out" 2>&1 &
  cpids+=($!)
done
cfail=0
for i in $(seq 0 31); do wait "${cpids[$i]}" || { [ $((i % 4)) -ne 3 ] && cfail=$((cfail + 1)) && echo "    op $i: $(head -c 300 "$WORK/k$i.out")"; }; done
check "all 24 pulls, verifies and runs succeeded ($cfail failed)" test "$cfail" -eq 0
check "pullgate is still serving" kill -0 "$PG_PID"
consistent=1
for k in 0 1 2 3 4 5 6 7; do
  ng=$(pg grants -n "K$k" | awk 'NR>1' | wc -l)
  dec=$(pg check -n "K$k" "$TPRIV")
  if { [ "$ng" -gt 0 ] && [ "$dec" != allowed ]; } || { [ "$ng" -eq 0 ] && [ "${dec#denied}" = "$dec" ]; }; then
    consistent=0; echo "    K$k: $ng grants but check says: $dec"
  fi
  if ctr_ -n "K$k" images ls -q | grep -qF "$TPRIV"; then
    out=$(run_img "K$k" "after$k" "$TPRIV" 2>&1); rc=$?
    if { [ "$dec" = allowed ] && [ $rc -ne 0 ]; } || { [ "$dec" != allowed ] && [ $rc -eq 0 ]; }; then
      consistent=0; echo "    K$k: check says ${dec:0:40} but ctr run gave rc=$rc: ${out:0:200}"
    fi
  fi
done
check "afterwards every namespace's decision (check and ctr run) matches its grants" test "$consistent" -eq 1
check_out "the ledger still reads whole" "grant: namespace=" pg inspect "$TPRIV"

log "secrets: no password in any file pullgate wrote, its log, containerd's labels or metadata"
leak=""
for pw in "$PW_ALICE" "$PW_BOB" "$PW_CAROL"; do
  grep -rqaF "$pw" "$PG" && leak="$leak pullgate-files:$pw"
  grep -rqaF "$pw" "$WORK/containerd/root" && leak="$leak containerd:$pw"
  ctr_ -n A content ls | grep -qF "$pw" && leak="$leak labels:$pw"
done
check "no test password found (${leak:-none})" test -z "$leak"
check "the API socket is 0600" test "$(stat -c %a "$PG/api.sock")" = 600
check "the identity key is 0600" test "$(stat -c %a "$PG/root/identity.key")" = 600

log "a ledger that cannot be read makes the gate deny"
kill "$PG_PID"; wait "$PG_PID" 2>/dev/null
python3 - "$PG/root/metadata.redb" <<'PY'
import os, sys
p = sys.argv[1]; n = os.path.getsize(p)
with open(p, "r+b") as f:
    for off in range(4096, n, 4096):
        f.seek(off); f.write(b"\xde\xad\xbe\xef" * 64)
PY
start_pullgate "$PG" >/dev/null 2>&1
wait_backend >/dev/null 2>&1
out=$(run_img A a9 "$HPRIV" 2>&1); rc=$?
if [ $rc -ne 0 ]; then pass "A's run fails closed with a damaged ledger ($(head -c 200 <<<"$out"))"; else fail "damaged ledger allowed a run: $out"; fi
check_has "pullgate says why" "metadata database" tail -3 "$PG/log"

summary "e2e gate (containerd $V)"
