#!/usr/bin/env bash
# Crash test. pullgate is killed while it works, restarted on the same root while containerd
# keeps running, and must come back with nothing lost and nothing wrongly allowed:
#   1. at every named crash point (PULLGATE_CRASH_AT, src/crashpoint.rs) in pull, verify,
#      unpack and the snapshot operations, each reached for real (its log line is required):
#      a verify or pull that died before its ledger commit left no grant, one that died after
#      it left its grant; the interrupted work then completes and runs;
#   2. with SIGKILL at KILLS random moments during pull, verify and run (chosen by SEED,
#      printed so a failure can be replayed);
#   3. with containerd SIGKILLed and restarted mid-pull as well.
# Afterwards: containerd's conformance suite passes against the crashed daemon and root, every
# snapshot containerd lists is in pullgate with its kind, parent and directories (TestExisting,
# TestConsistency in tests/conformance), every image containerd lists has all its content, a
# namespace that never verified is still refused, every namespace's decision matches its
# grants, and once containerd's GC has removed every image and container pullgate holds no
# snapshot directory.
# Usage: tests/crash.sh VERSION [SEED]
source "$(dirname "$0")/lib.sh"
V=${1:?usage: crash.sh 1.6|1.7|2.1 [SEED]}
SEED=${2:-$RANDOM}
KILLS=${KILLS:-30}
trap cleanup EXIT
RANDOM=$SEED
echo "crash test: containerd $V, seed $SEED (replay: tests/crash.sh $V $SEED), $KILLS kills"
PW=crash-Secret-3k9d
python3 "$REPO/tests/mkimage.py" "$WORK/img" --tag v1 --message "crash app" --extra-layers 4 --layer-mb 6 --seed 31 >/dev/null
start_registry c htpasswd alice "$PW" || exit 1
IMG=$REG_c/private/crash:v1
push_image "$WORK/img" v1 "$IMG" "alice:$PW" || { fail "push"; exit 1; }
# A second image, pulled first at a crash point inside its unpack (the first image's chains
# are adopted everywhere after the first pull, so only a new image extracts layers).
python3 "$REPO/tests/mkimage.py" "$WORK/img2" --tag v2 --message "crash app 2" --extra-layers 3 --layer-mb 2 --seed 32 >/dev/null
IMG2=$REG_c/private/crash2:v2
push_image "$WORK/img2" v2 "$IMG2" "alice:$PW" || { fail "push"; exit 1; }
PG=$WORK/pullgate
start_pullgate "$PG" || exit 1
start_containerd "$V" "$PG/snapshotter.sock" || exit 1
wait_backend
pg() { local sub=$1; shift; "$PG_BIN" "$sub" --address "$PG/api.sock" "$@"; }
restart() { kill -9 "$PG_PID" 2>/dev/null; wait "$PG_PID" 2>/dev/null; start_pullgate "$PG" >/dev/null && wait_backend; }
DENIED='pullgate denied namespace'

# A namespace that holds the image's blobs by digest but never verified.
pg pull -n owner --plain-http --user "alice:$PW" "$IMG" >/dev/null 2>&1
: > "$WORK/empty"
for d in $(ctr_ -n owner content ls -q); do
  ctr_ -n thief content ingest --expected-digest "$d" "s-$d" < "$WORK/empty" >/dev/null 2>&1
  ctr_ -n thief content label "$d" containerd.io/gc.root=x >/dev/null 2>&1
done
check_has "before the crashes the thief is refused" "denied: $DENIED \"thief\"" pg check -n thief "$IMG"

# 1. Every crash point, in an order chosen by the seed. Each runs in a namespace of its own.
#    grant=0|1: whether the work it interrupts must have left a grant (died before or after the
#    ledger commit); "-" where the point is not about grants.
POINTS=("pull.fetched pull 0 IMG" "ledger.grant-staged verify 0 IMG" "pull.granted verify 1 IMG" "pull.labelled pull 1 IMG"
        "pull.layer-committed:$((1 + RANDOM % 3)) pull 1 IMG2" "snapshot.prepare-installed prepare - IMG"
        "snapshot.commit-staged commit - IMG" "snapshot.remove-retired remove - IMG")
mapfile -t POINTS < <(printf '%s\n' "${POINTS[@]}" | shuf --random-source=<(yes "$SEED"))
ok=1; n=0
for entry in "${POINTS[@]}"; do
  read -r point op want_grant img <<<"$entry"; n=$((n + 1)); ns=cp$n; img=${!img}
  if [ "$op" = prepare ] || [ "$op" = commit ] || [ "$op" = remove ]; then
    ctr_ -n "$ns" snapshots --snapshotter pullgate prepare "k-$ns" "" >/dev/null 2>&1
    [ "$op" = remove ] && ctr_ -n "$ns" snapshots --snapshotter pullgate commit "c-$ns" "k-$ns" >/dev/null 2>&1
  fi
  before=$(grep -c "crash point ${point%%:*} reached" "$PG/log")
  kill -9 "$PG_PID" 2>/dev/null; wait "$PG_PID" 2>/dev/null
  PULLGATE_CRASH_AT=$point start_pullgate "$PG" >/dev/null && wait_backend
  case $op in
    pull) pg pull -n "$ns" --plain-http --user "alice:$PW" "$img" ;;
    verify) pg verify -n "$ns" --plain-http --user "alice:$PW" "$img" ;;
    prepare) ctr_ -n "$ns" snapshots --snapshotter pullgate prepare "k2-$ns" "" ;;
    commit) ctr_ -n "$ns" snapshots --snapshotter pullgate commit "c-$ns" "k-$ns" ;;
    # containerd removes the backend's snapshot in its garbage collection, just after.
    remove) ctr_ -n "$ns" snapshots --snapshotter pullgate rm "c-$ns" ;;
  esac >"$WORK/cp$n.out" 2>&1
  wait_for 20 eval '! kill -0 "$PG_PID" 2>/dev/null'
  after=$(grep -c "crash point ${point%%:*} reached" "$PG/log")
  if [ "$after" -le "$before" ]; then ok=0; echo "    $point: never reached by $op (seed $SEED): $(head -c 300 "$WORK/cp$n.out")"; continue; fi
  wait "$PG_PID" 2>/dev/null
  start_pullgate "$PG" >/dev/null && wait_backend || { fail "pullgate did not come back after crash point $point"; exit 1; }
  ng=$(pg grants -n "$ns" | awk 'NR>1' | wc -l)
  if [ "$want_grant" = 0 ] && [ "$ng" -ne 0 ]; then ok=0; echo "    $point: the $op did not finish but left $ng grant(s)"; fi
  if [ "$want_grant" = 1 ] && [ "$ng" -eq 0 ]; then ok=0; echo "    $point: the $op committed its grant before dying, but none is there"; fi
  if [ "$want_grant" = 0 ] && [ "$(pg check -n "$ns" "$img")" = allowed ]; then ok=0; echo "    $point: $ns is allowed without a grant"; fi
  if [[ "$(pg check -n thief "$IMG" 2>&1)" != denied:* ]]; then ok=0; echo "    $point: the thief became allowed"; fi
  if [ "$op" = pull ] || [ "$op" = verify ]; then
    # The interrupted work completes, and the image runs.
    out=$(pg pull -n "$ns" --plain-http --user "alice:$PW" "$img" 2>&1) || { ok=0; echo "    $point: pull after the crash failed: ${out:0:300}"; }
    out=$(ctr_ -n "$ns" run --rm --snapshotter pullgate "$img" "cp$n" 2>&1) || { ok=0; echo "    $point: run after the crash failed: ${out:0:200}"; }
  fi
done
check "${#POINTS[@]} crash points reached, pullgate restarted after each: no grant from work that died before its commit, each one after it kept, the thief still refused, every interrupted pull completed and ran (seed $SEED)" test "$ok" -eq 1

# 2. Random moments.
for i in $(seq 1 "$KILLS"); do
  ns=n$((i % 6)); op=$((RANDOM % 3)); delay=$((RANDOM % 600))
  case $op in
    0) pg pull -n "$ns" --plain-http --user "alice:$PW" "$IMG" ;;
    1) pg verify -n "$ns" --plain-http --user "alice:$PW" "$IMG" ;;
    2) ctr_ -n "$ns" run --rm --snapshotter pullgate "$IMG" "c$i" ;;
  esac >"$WORK/op$i.out" 2>&1 &
  opid=$!
  sleep "$(printf '0.%03d' "$delay")"
  restart || { fail "pullgate did not come back after kill $i (seed $SEED)"; exit 1; }
  wait "$opid"; echo "$op $?" >> "$WORK/ops"
done
pass "$KILLS kills during pull, verify and run; pullgate restarted every time"

# containerd restarted in the middle of a pull as well.
pg pull -n n-ctrd --plain-http --user "alice:$PW" "$IMG" >"$WORK/ctrd.out" 2>&1 &
opid=$!
sleep 0.2
kill -9 "$CTRD_PID"; wait "$CTRD_PID" 2>/dev/null
restart
start_containerd "$V" "$PG/snapshotter.sock" || exit 1
wait_backend
wait "$opid"
pass "containerd SIGKILLed and restarted mid-pull"

# The crashed daemon, on its crashed root, still passes containerd's own conformance suite, and
# agrees with containerd about every snapshot.
CONF=$REPO/tests/conformance/conformance.test
[ -x "$CONF" ] || (cd "$REPO/tests/conformance" && GOPATH=/usr/share/gocode GO111MODULE=off GOPROXY=off GOFLAGS= go test -c -o conformance.test .)
out=$("$CONF" -test.root -test.v -test.run '^TestExisting$' -existing "$PG/snapshotter.sock" 2>&1); rc=$?
npass=$(grep -cE '^\s*--- PASS: TestExisting/suite/' <<<"$out")
if [ $rc -eq 0 ] && [ "$npass" -ge 20 ]; then pass "containerd's conformance suite passes against the crashed daemon and root ($npass subtests)"
else fail "conformance after the crashes: exit $rc, $npass passed: $(grep -E -- '--- FAIL|Error' <<<"$out" | head -20)"; fi
out=$("$CONF" -test.v -test.run '^TestConsistency$' -existing "$PG/snapshotter.sock" -containerd "$CTRD_SOCK" 2>&1); rc=$?
if [ $rc -eq 0 ]; then pass "pullgate agrees with containerd on every snapshot: kind, parent, directories ($(grep -oE '[0-9]+ snapshots in containerd.s view across [0-9]+ namespaces' <<<"$out"))"
else fail "consistency with containerd after the crashes: $(grep -vE '^(=== RUN|PASS|FAIL$)' <<<"$out" | head -20)"; fi
incomplete=""
for ns in $(ctr_ namespaces ls -q); do
  for im in $(ctr_ -n "$ns" images ls -q); do
    [ "$(ctr_ -n "$ns" images check -q --snapshotter pullgate "name==$im")" = "$im" ] || incomplete+=" $ns/$im"
  done
done
check "every image containerd lists in every namespace has all its content and is unpacked in pullgate (not:${incomplete:- none})" test -z "$incomplete"

check_has "after the crashes the thief is still refused" "denied: $DENIED \"thief\"" pg check -n thief "$IMG"
# Even with the password, plain ctr (no pullgate verify, so no grant) cannot unpack it.
out=$(ctr_ -n thief images pull --plain-http --user "alice:$PW" --snapshotter pullgate "$IMG" 2>&1)
check "and cannot unpack the image with plain ctr" grep -q "$DENIED \"thief\"" <<<"$out"
ok=1
for ns in n0 n1 n2 n3 n4 n5 n-ctrd; do
  ng=$(pg grants -n "$ns" | awk 'NR>1' | wc -l); dec=$(pg check -n "$ns" "$IMG")
  if { [ "$ng" -gt 0 ] && [ "$dec" != allowed ]; } || { [ "$ng" -eq 0 ] && [ "${dec#denied}" = "$dec" ]; }; then ok=0; echo "    $ns: $ng grants, check: $dec"; fi
  # Finish the interrupted work; the image must then run.
  if ! out=$(pg pull -n "$ns" --plain-http --user "alice:$PW" "$IMG" 2>&1); then ok=0; echo "    $ns: pull after the crashes failed: ${out:0:300}"; fi
  out=$(ctr_ -n "$ns" run --rm --snapshotter pullgate "$IMG" "final-$ns" 2>&1) || { ok=0; echo "    $ns: run failed: ${out:0:200}"; }
done
check "every namespace's decision matched its grants, and every image pulls and runs afterwards (seed $SEED)" test "$ok" -eq 1

# Remove every image and container; containerd's GC must then leave pullgate empty.
for ns in $(ctr_ namespaces ls -q); do
  for c in $(ctr_ -n "$ns" containers ls -q); do ctr_ -n "$ns" containers rm "$c" >/dev/null 2>&1; done
  for s in $(ctr_ -n "$ns" snapshots --snapshotter pullgate ls | awk 'NR>1 && $NF=="Active" {print $1}'); do
    ctr_ -n "$ns" snapshots --snapshotter pullgate rm "$s" >/dev/null 2>&1
  done
  for im in $(ctr_ -n "$ns" images ls -q); do ctr_ -n "$ns" images rm --sync "$im" >/dev/null 2>&1; done
done
ctr_ -n owner content ls -q >/dev/null
wait_for 30 eval '[ -z "$(ls -A "$PG/root/snapshots")" ]'
left=$(ls -A "$PG/root/snapshots" | wc -l)
check "after GC pullgate holds no snapshot directory ($left left; seed $SEED)" test "$left" -eq 0
summary "crash (containerd $V, seed $SEED)"
