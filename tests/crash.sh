#!/usr/bin/env bash
# Crash test: SIGKILL pullgate at random points during pull, verify and unpack (KILLS times,
# the points chosen by SEED, printed so a failure can be replayed), restarting it each time
# while containerd keeps running, then once with containerd restarted mid-pull too. Afterwards:
# a namespace that never verified is still refused, every namespace's decision matches its
# grants, images pulled to completion run, and once containerd's GC has removed every image
# and container, pullgate holds no snapshot directory (nothing leaked, nothing half-made kept).
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

check_has "after the crashes the thief is still refused" "denied: $DENIED \"thief\"" pg check -n thief "$IMG"
# Even with the password, plain ctr (no pullgate verify, so no grant) cannot unpack it.
out=$(ctr_ -n thief images pull --plain-http --user "alice:$PW" --snapshotter pullgate "$IMG" 2>&1)
check "and cannot unpack the image with plain ctr" grep -q "$DENIED \"thief\"" <<<"$out"
ok=1
for ns in n0 n1 n2 n3 n4 n5 n-ctrd; do
  ng=$(pg grants -n "$ns" | awk 'NR>1' | wc -l); dec=$(pg check -n "$ns" "$IMG")
  if { [ "$ng" -gt 0 ] && [ "$dec" != allowed ]; } || { [ "$ng" -eq 0 ] && [ "${dec#denied}" = "$dec" ]; }; then ok=0; echo "    $ns: $ng grants, check: $dec"; fi
  # Finish the interrupted work; the image must then run.
  if ! pg pull -n "$ns" --plain-http --user "alice:$PW" "$IMG" >/dev/null 2>&1; then ok=0; echo "    $ns: pull after the crashes failed"; fi
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
