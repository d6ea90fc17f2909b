#!/usr/bin/env bash
# Crash test. pullgate is killed while it works, restarted on the same root while containerd
# keeps running, and must come back with nothing lost and nothing wrongly allowed:
#   1. at every named crash point (PULLGATE_CRASH_AT, src/crashpoint.rs) in pull, verify,
#      unpack and the snapshot operations, each reached for real (its log line is required):
#      a verify or pull that died before its ledger commit left no grant, and the namespace's
#      own unpack of the image through containerd (plain ctr pull) is refused; one that died
#      after it left its grant, and that unpack and a ctr run succeed; the thief's ctr run
#      (an unpack through pullgate's Prepare) is refused after every crash; the interrupted
#      work then completes and runs;
#   2. with SIGKILL at KILLS random moments during pull, verify and run (chosen by SEED,
#      printed so a failure can be replayed): every operation's exit status is read; one that
#      was interrupted must succeed when run again, and none may be refused by the gate;
#   3. with containerd SIGKILLed while a pull is still running, then restarted.
# Afterwards: containerd's conformance suite passes against the crashed daemon and root, every
# snapshot containerd lists is in pullgate with its kind, parent and directories (TestExisting,
# TestConsistency in tests/conformance), every image containerd lists is complete and unpacked
# into pullgate (ctr images check, and its top chain committed in its namespace), the thief is
# still refused by check, by plain ctr pull with the password and by ctr run, every
# namespace's decision matches its grants, and once containerd's GC has removed every image and
# container pullgate holds no snapshot directory.
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
check_containerd_version "$V"
pg() { local sub=$1; shift; "$PG_BIN" "$sub" --address "$PG/api.sock" "$@"; }
restart() { kill -9 "$PG_PID" 2>/dev/null; wait "$PG_PID" 2>/dev/null; start_pullgate "$PG" >/dev/null && wait_backend; }
DENIED='pullgate denied namespace'
# What both images print (their /msg): a refused run or unpack must never show it.
LEAK="crash app"

# The owner pulls with the password. The thief adopts the owner's blobs by digest (it never
# verifies) and holds an image record of them, not unpacked: its `ctr run` must unpack through
# pullgate's Prepare, where the gate decides.
check "the owner pulls $IMG with the password" pg pull -n owner --plain-http --user "alice:$PW" "$IMG"
for d in $(ctr_ -n owner content ls -q); do steal_blob thief "$d" || fail "adopt $d into thief"; done
check "the thief holds the owner's blobs by digest ($(ctr_ -n thief content ls -q | wc -l) of $(ctr_ -n owner content ls -q | wc -l))" \
  test "$(ctr_ -n thief content ls -q | wc -l)" -eq "$(ctr_ -n owner content ls -q | wc -l)"
check "the owner exports the image to a tarball" ctr_ -n owner images export "$WORK/img.tar" "$IMG"
check "the thief imports the tarball without unpacking" ctr_ -n thief images import --no-unpack "$WORK/img.tar"
check "the thief has an image record of it" has_image thief "$IMG"
check_has "before the crashes the thief is refused by pullgate check" "denied: $DENIED \"thief\"" pg check -n thief "$IMG"
check_refused "before the crashes the thief's ctr run (an unpack through pullgate) is refused" "$DENIED \"thief\"" "$LEAK" \
  ctr_ -n thief run --rm --snapshotter pullgate "$IMG" thief0
settle_gc thief
check_out "and the owner's ctr run runs" "$LEAK" ctr_ -n owner run --rm --snapshotter pullgate "$IMG" owner0

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
  # (Each bounded: a daemon that hangs at its crash point instead of exiting hangs its client too.)
  case $op in
    pull) timeout 120 "$PG_BIN" pull --address "$PG/api.sock" -n "$ns" --plain-http --user "alice:$PW" "$img" ;;
    verify) timeout 120 "$PG_BIN" verify --address "$PG/api.sock" -n "$ns" --plain-http --user "alice:$PW" "$img" ;;
    prepare) timeout 120 "${CTR[@]}" -n "$ns" snapshots --snapshotter pullgate prepare "k2-$ns" "" ;;
    commit) timeout 120 "${CTR[@]}" -n "$ns" snapshots --snapshotter pullgate commit "c-$ns" "k-$ns" ;;
    # containerd removes the backend's snapshot in its garbage collection, just after.
    remove) timeout 120 "${CTR[@]}" -n "$ns" snapshots --snapshotter pullgate rm "c-$ns" ;;
  esac >"$WORK/cp$n.out" 2>&1
  # A crash point must end the daemon. One that logs and goes on (or hangs) would leave the
  # `wait` below waiting for ever: bounded, and a failure of its own that says so.
  exited=1; wait_for 20 eval '! kill -0 "$PG_PID" 2>/dev/null' || exited=0
  after=$(grep -c "crash point ${point%%:*} reached" "$PG/log")
  if [ "$after" -le "$before" ]; then
    ok=0; echo "    $point: never reached by $op (seed $SEED): $(head -c 300 "$WORK/cp$n.out")"
    kill -9 "$PG_PID" 2>/dev/null; wait "$PG_PID" 2>/dev/null
    start_pullgate "$PG" >/dev/null && wait_backend || { fail "pullgate did not come back after crash point $point"; exit 1; }
    continue
  fi
  if [ $exited -eq 0 ]; then
    fail "crash point $point was reached (logged) but pullgate (pid $PG_PID) had not exited 20 s later (seed $SEED)"
    ok=0; kill -9 "$PG_PID" 2>/dev/null; wait "$PG_PID" 2>/dev/null
    start_pullgate "$PG" >/dev/null && wait_backend || { fail "pullgate did not come back after crash point $point"; exit 1; }
    continue
  fi
  wait "$PG_PID" 2>/dev/null
  start_pullgate "$PG" >/dev/null && wait_backend || { fail "pullgate did not come back after crash point $point"; exit 1; }
  if ! ng=$(grant_count "$ns" 2>&1); then ok=0; echo "    $point: $ng"; ng=-1; fi
  if [ "$want_grant" = 0 ] && [ "$ng" -ne 0 ]; then ok=0; echo "    $point: the $op did not finish but left $ng grant(s)"; fi
  if [ "$want_grant" = 1 ] && [ "$ng" -le 0 ]; then ok=0; echo "    $point: the $op committed its grant before dying, but none is there"; fi
  if [ "$want_grant" = 0 ] && [ "$(pg check -n "$ns" "$img")" = allowed ]; then ok=0; echo "    $point: $ns is allowed without a grant"; fi
  if [[ "$(pg check -n thief "$IMG" 2>&1)" != denied:* ]]; then ok=0; echo "    $point: the thief became allowed"; fi
  # The gate itself, through containerd (not only the ledger that check and grants read): the
  # thief's ctr run unpacks through Prepare and is refused; the namespace's own unpack (plain
  # ctr pull with the password, which pullgate never sees) is refused without a grant, and
  # admitted, then runs, with the grant the crash left.
  out=$(ctr_ -n thief run --rm --snapshotter pullgate "$IMG" "thief$n" 2>&1); rc=$?
  settle_gc thief
  if [ $rc -eq 0 ] || ! grep -qF "$DENIED \"thief\"" <<<"$out" || grep -qF "$LEAK" <<<"$out"; then
    ok=0; echo "    $point: the thief's ctr run was not refused by the gate: rc=$rc: $(shown 200 "$out")"
  fi
  if [ "$want_grant" != - ]; then
    out=$(ctr_ -n "$ns" images pull --plain-http --user "alice:$PW" --snapshotter pullgate "$img" 2>&1); rc=$?
    if [ "$want_grant" = 0 ]; then
      settle_gc "$ns"
      if [ $rc -eq 0 ] || ! grep -qF "$DENIED \"$ns\"" <<<"$out"; then ok=0; echo "    $point: $ns, without a grant, unpacked with plain ctr: rc=$rc: $(shown 200 "$out")"; fi
    elif [ $rc -ne 0 ]; then ok=0; echo "    $point: $ns, with the grant the crash left, could not unpack with plain ctr: $(shown 300 "$out")"
    else
      out=$(ctr_ -n "$ns" run --rm --snapshotter pullgate "$img" "cpr$n" 2>&1)
      grep -qF "$LEAK" <<<"$out" || { ok=0; echo "    $point: $ns, with the grant the crash left, could not run it: $(shown 200 "$out")"; }
    fi
  fi
  if [ "$op" = pull ] || [ "$op" = verify ]; then
    # The interrupted work completes, and the image runs.
    out=$(pg pull -n "$ns" --plain-http --user "alice:$PW" "$img" 2>&1) || { ok=0; echo "    $point: pull after the crash failed: $(shown 300 "$out")"; }
    out=$(ctr_ -n "$ns" run --rm --snapshotter pullgate "$img" "cp$n" 2>&1) || { ok=0; echo "    $point: run after the crash failed: $(shown 200 "$out")"; }
  fi
done
check "${#POINTS[@]} crash points reached, pullgate restarted after each: no grant from work that died before its commit and its namespace's unpack refused, each grant committed before the crash kept and its unpack and run admitted, the thief's ctr run refused, every interrupted pull completed and ran (seed $SEED)" test "$ok" -eq 1

# 2. Random moments.
: > "$WORK/ops"
for i in $(seq 1 "$KILLS"); do
  ns=n$((i % 6)); op=$((RANDOM % 3)); delay=$((RANDOM % 600))
  case $op in
    0) pg pull -n "$ns" --plain-http --user "alice:$PW" "$IMG" ;;
    1) pg verify -n "$ns" --plain-http --user "alice:$PW" "$IMG" ;;
    2) ctr_ -n "$ns" run --rm --snapshotter pullgate "$IMG" "c$i" ;;
  esac >"$WORK/op$i.out" 2>&1 &
  opid=$!
  sleep "$(printf '0.%03d' "$delay")"
  # Whether the operation was still running when pullgate was killed (in flight: 1).
  inflight=0; kill -0 "$opid" 2>/dev/null && inflight=1
  restart || { fail "pullgate did not come back after kill $i (seed $SEED)"; exit 1; }
  wait "$opid"; echo "$i $ns $op $? $inflight" >> "$WORK/ops"
done
check "every one of the $KILLS operations reported its exit status ($(grep -c . "$WORK/ops"))" test "$(grep -c . "$WORK/ops")" -eq "$KILLS"
# An operation may fail when pullgate is killed under it, and then must succeed when run again
# now; a run that failed because no pull had finished in its namespace yet must say "not found".
# None may have been refused by the gate: every namespace here holds its grant once its image
# exists. A run that succeeded printed the image's message.
ok=1; done_ok=0; interrupted=0; midop=0
OPNAME=(pull verify run)
while read -r i ns op st inflight <&3; do
  out=$(cat "$WORK/op$i.out")
  # A kill that landed mid-operation: the operation was still running when pullgate was
  # SIGKILLed, and it then failed otherwise than "not found" (a run before any image was there).
  [ "$inflight" = 1 ] && [ "$st" -ne 0 ] && ! grep -qi "not found" <<<"$out" && midop=$((midop + 1))
  if grep -qF "$DENIED" <<<"$out"; then ok=0; echo "    op $i (${OPNAME[$op]} in $ns, status $st): refused by the gate: $(shown 200 "$out")"; fi
  if [ "$st" -eq 0 ]; then
    done_ok=$((done_ok + 1))
    [ "$op" != 2 ] || grep -qF "$LEAK" <<<"$out" || { ok=0; echo "    op $i (run in $ns) succeeded without printing the image's message: $(shown 200 "$out")"; }
    continue
  fi
  interrupted=$((interrupted + 1))
  case $op in
    0) again=$(pg pull -n "$ns" --plain-http --user "alice:$PW" "$IMG" 2>&1) || { ok=0; echo "    op $i: pull in $ns failed ($st), and again: ${again:0:300}"; } ;;
    1) again=$(pg verify -n "$ns" --plain-http --user "alice:$PW" "$IMG" 2>&1) || { ok=0; echo "    op $i: verify in $ns failed ($st), and again: ${again:0:300}"; } ;;
    2) if ctr_ -n "$ns" images ls -q | grep -xF "$IMG" >/dev/null; then
         again=$(ctr_ -n "$ns" run --rm --snapshotter pullgate "$IMG" "again$i" 2>&1)
         grep -qF "$LEAK" <<<"$again" || { ok=0; echo "    op $i: run in $ns failed ($st), and again: ${again:0:300}"; }
       elif ! grep -qi "not found" <<<"$out"; then ok=0; echo "    op $i: run in $ns (no image there yet) failed otherwise: $(shown 300 "$out")"; fi ;;
  esac
done 3< "$WORK/ops"
check "$KILLS kills during pull, verify and run: $done_ok operations finished, $interrupted failed and each succeeded when run again; none was refused by the gate (seed $SEED)" \
  test "$ok" -eq 1 -a $((done_ok + interrupted)) -eq "$KILLS"
# Otherwise every kill may have hit an idle daemon, and the section would show nothing.
check "at least one kill landed mid-operation: its operation was still running when pullgate was killed, and failed ($midop of $KILLS; seed $SEED)" \
  test "$midop" -ge 1

# 3. containerd SIGKILLed while a pull is running. The pull of an image the store already holds
#    is quick, so each attempt kills sooner; an attempt whose pull has already finished is not
#    counted.
CTRD_NS=""; caught=""; a=0
for delay in 0.3 0.15 0.08 0.04 0.02 0; do
  a=$((a + 1)); ns=n-ctrd$a; CTRD_NS+=" $ns"
  pg pull -n "$ns" --plain-http --user "alice:$PW" "$IMG" >"$WORK/ctrd$a.out" 2>&1 &
  opid=$!
  sleep "$delay"
  if ! kill -0 "$opid" 2>/dev/null; then wait "$opid"; echo "    (attempt $a: the pull had finished within $delay s)"; continue; fi
  kill -9 "$CTRD_PID"; wait "$CTRD_PID" 2>/dev/null
  caught=$ns; break
done
check "containerd was SIGKILLed while a pull was still running (in ${caught:-none of $a attempts})" test -n "$caught"
if [ -n "$caught" ]; then
  restarted=1
  kill -9 "$PG_PID" 2>/dev/null; wait "$PG_PID" 2>/dev/null
  start_pullgate "$PG" >/dev/null || restarted=0
  start_containerd "$V" "$PG/snapshotter.sock" || restarted=0
  wait_backend || restarted=0
  check "pullgate and containerd restarted after it, and containerd reaches pullgate" test "$restarted" -eq 1
  [ "$restarted" -eq 1 ] || exit 1
  wait "$opid"; st=$?
  echo "    the pull interrupted in $caught ended with status $st: $(head -c 200 "$WORK/ctrd$a.out")"
fi

# The crashed daemon, on its crashed root, still passes containerd's own conformance suite, and
# agrees with containerd about every snapshot.
check_existing "after the crashes"
check_consistency "after the crashes"
incomplete=""; nimg=0
for ns in $(ctr_ namespaces ls -q); do
  [ "$ns" = thief ] && continue
  for im in $(ctr_ -n "$ns" images ls -q); do
    nimg=$((nimg + 1))
    why=$(image_unpacked "$ns" "$im") || incomplete+=" $ns/$im ($why)"
  done
done
check "every image containerd lists ($nimg, outside the thief's namespace) is complete and unpacked into pullgate: ctr images check says so, and its top chain is committed in its namespace (not:${incomplete:- none})" \
  test -z "$incomplete" -a "$nimg" -gt 0
check "the thief's image record is not unpacked" not image_unpacked thief "$IMG"

check_has "after the crashes the thief is still refused by pullgate check" "denied: $DENIED \"thief\"" pg check -n thief "$IMG"
# Even with the password, plain ctr (no pullgate verify, so no grant) cannot unpack it.
check_refused "with the password, plain ctr pull (which unpacks) still fails for the thief, refused by the gate" "$DENIED \"thief\"" "" \
  ctr_ -n thief images pull --plain-http --user "alice:$PW" --snapshotter pullgate "$IMG"
settle_gc thief
check_refused "and the thief's ctr run is refused" "$DENIED \"thief\"" "$LEAK" ctr_ -n thief run --rm --snapshotter pullgate "$IMG" thief-final
settle_gc thief
ok=1
for ns in n0 n1 n2 n3 n4 n5 $CTRD_NS; do
  dec=$(pg check -n "$ns" "$IMG")
  if ! ng=$(grant_count "$ns" 2>&1); then ok=0; echo "    $ns: $ng"
  elif { [ "$ng" -gt 0 ] && [ "$dec" != allowed ]; } || { [ "$ng" -eq 0 ] && [ "${dec#denied}" = "$dec" ]; }; then ok=0; echo "    $ns: $ng grants, check: $dec"; fi
  # Finish the interrupted work; the image must then run.
  if ! out=$(pg pull -n "$ns" --plain-http --user "alice:$PW" "$IMG" 2>&1); then ok=0; echo "    $ns: pull after the crashes failed: $(shown 300 "$out")"; fi
  out=$(ctr_ -n "$ns" run --rm --snapshotter pullgate "$IMG" "final-$ns" 2>&1)
  grep -qF "$LEAK" <<<"$out" || { ok=0; echo "    $ns: run failed: $(shown 200 "$out")"; }
done
check "every namespace's decision matched its grants, and every image pulls and runs afterwards (seed $SEED)" test "$ok" -eq 1

# Remove every image and container, and every verify's hold on the blobs it placed (a lease
# labelled pullgate.io/verified, which would keep them, and the chains their configs name, for
# an hour); containerd's GC must then leave pullgate empty.
for ns in $(ctr_ namespaces ls -q); do
  for l in $(ctr_ -n "$ns" leases ls | awk '/pullgate.io\/verified=/ {print $1}'); do ctr_ -n "$ns" leases delete "$l" >/dev/null 2>&1; done
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
