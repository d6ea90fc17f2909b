#!/usr/bin/env bash
# End-to-end: restarting pullgate under a running workload loses nothing. containerd keeps
# running while pullgate is stopped with SIGTERM (the signal systemd stops it with) or killed
# with SIGKILL, then started again on the same root (as systemd's Restart=always would; the test
# supplies the restart). The workload: a private image (htpasswd registry) pulled with the
# password into a tenant's namespace; long-running containers (`ctr run -d`, pullgate their
# snapshotter) that count into a file in their rootfs; and, at the moment of each restart,
# requests in flight: `ctr images pull` of a larger public image, `pullgate pull` and `pullgate
# verify` of a larger private one, each through a proxy that slows downloads
# (tests/slowproxy.py), and `ctr run -d` creating containers. After each restart:
#   - every container runs on: `ctr tasks ls` says RUNNING, and its counter, read through
#     /proc/PID/root, advanced across the restart and advances still (`ctr tasks exec` reads it
#     too);
#   - every request in flight ended within a bound (none hung), its exit status read and
#     printed; each that failed succeeds when run again, and what each pull brought runs;
#   - after SIGTERM pullgate exited 0 and removed its sockets, and the pull and the verify it
#     was serving completed; after SIGKILL the new daemon serves on the sockets left behind; the
#     time the restarted daemon took to serve is printed (not asserted);
#   - the gate decides as before: `pullgate grants` lists the tenant's grants identically, and a
#     namespace without credentials holding the image's blobs is refused (check and ctr run)
#     and gets none of its content;
#   - new containers start and run.
# Then every container still runs, every image containerd lists runs, containerd's conformance
# suite (TestExisting) and TestConsistency (tests/conformance) pass against the restarted daemon
# and its root, and pullgate's log holds no error, warning, panic or damage line.
# Usage: tests/e2e_restart.sh VERSION
source "$(dirname "$0")/lib.sh"
V=${1:?usage: e2e_restart.sh 1.7|2.1}
# runc keeps each container's state under /run/containerd/runc/NAMESPACE/ID for every
# containerd on the machine, and a shim killed by `cleanup` leaves it there: the test removes
# its tasks through containerd first, and its container IDs end in the test's pid ($$).
teardown() {
  local c
  if [ -n "${CTR+x}" ]; then
    for c in $(ctr_ -n tenant tasks ls -q 2>/dev/null); do timeout 20 "${CTR[@]}" -n tenant tasks rm -f "$c" >/dev/null 2>&1; done
  fi
  cleanup
}
trap teardown EXIT
T_START=$SECONDS
PW=restart-Secret-5v8c
MSG="restart app"
BIGMSG="restart big"
# Each container counts into /counter in its rootfs, five times a second.
COUNT='i=0; while :; do i=$((i+1)); echo $i > /counter; sleep 0.2; done'
# Requests in flight are bounded: one that has not ended after this many seconds hung.
BOUND=60
# The proxies' rate, bytes a second per connection: a pull of the larger images (three layers
# of 3 MiB) takes about four seconds.
RATE=786432

log "containerd $V: setup"
python3 "$REPO/tests/mkimage.py" "$WORK/app" --tag v1 --message "$MSG" --cmd "$COUNT" >/dev/null
python3 "$REPO/tests/mkimage.py" "$WORK/big" --tag v1 --message "$BIGMSG" --extra-layers 3 --layer-mb 3 --seed 51 >/dev/null
# (The public image shares no layer with the private ones: a layer pullgate knows as private is
# unpacked only with a grant, whichever image names it.)
python3 "$REPO/tests/mkimage.py" "$WORK/pub" --tag v1 --message "restart public" --extra-layers 3 --layer-mb 3 --seed 52 \
  --base-note "restart public" --fixed-layers-note "restart public" >/dev/null
start_registry priv htpasswd alice "$PW" || exit 1
start_registry pub || exit 1
APP=$REG_priv/private/app:v1
push_image "$WORK/app" v1 "$APP" "alice:$PW" || { fail "push $APP"; exit 1; }
push_image "$WORK/big" v1 "$REG_priv/private/big:v1" "alice:$PW" || { fail "push the private larger image"; exit 1; }
push_image "$WORK/pub" v1 "$REG_pub/public/big:v1" || { fail "push the public larger image"; exit 1; }
_launch_slow() {
  /usr/bin/python3 "$REPO/tests/slowproxy.py" --port "$PORT_1" --to "$REG_priv" --rate "$RATE" --log "$WORK/slow-priv.log" &
  PIDS+=($!); LAUNCHED+=($!)
  /usr/bin/python3 "$REPO/tests/slowproxy.py" --port "$PORT_2" --to "$REG_pub" --rate "$RATE" --log "$WORK/slow-pub.log" &
  PIDS+=($!); LAUNCHED+=($!)
  wait_serving 10 curl -s -o /dev/null "http://127.0.0.1:$PORT_1/v2/" && wait_serving 10 curl -s -o /dev/null "http://127.0.0.1:$PORT_2/v2/"
}
launch_on_free_ports 2 _launch_slow || { fail "start the slow proxies"; exit 1; }
BIG=127.0.0.1:$PORT_1/private/big:v1
PUB=127.0.0.1:$PORT_2/public/big:v1
PG=$WORK/pullgate
start_pullgate "$PG" || exit 1
start_containerd "$V" "$PG/snapshotter.sock" || exit 1
wait_backend
check_containerd_version "$V"
pg() { local sub=$1; shift; "$PG_BIN" "$sub" --address "$PG/api.sock" "$@"; }
DENIED='pullgate denied namespace'

# The tenant's containers, and what is known of each.
CONTAINERS=()
task_field() { ctr_ -n tenant tasks ls 2>/dev/null | awk -v c="$1" -v f="$2" 'NR > 1 && $1 == c {print $f}'; }
# counter ID: the count container ID last wrote to /counter in its rootfs, read through its
# task's /proc/PID/root. (The shell truncates the file before it writes: a read that finds it
# empty reads again.)
counter() {
  local p v try; p=$(task_field "$1" 2); [ -n "$p" ] || { echo "no task $1"; return 1; }
  for try in 1 2 3 4 5; do
    v=$(cat "/proc/$p/root/counter" 2>&1) || { echo "$v"; return 1; }
    [[ $v =~ ^[0-9]+$ ]] && { echo "$v"; return 0; }
    sleep 0.05
  done
  echo "read '$v'"; return 1
}
# running ID: `ctr tasks ls` says RUNNING for ID.
running() { local s; s=$(task_field "$1" 3); [ "$s" = RUNNING ] || { echo "task $1: ${s:-not listed}"; return 1; }; }
# counting ID: ID runs and its counter advances within two seconds (of the first count it wrote:
# a container just started may not have written one yet).
counting() {
  local a b end
  running "$1" || return 1
  wait_for 10 counter "$1"
  a=$(counter "$1") || { echo "$a"; return 1; }
  end=$((SECONDS + 2))
  while [ $SECONDS -le "$end" ]; do
    sleep 0.3; b=$(counter "$1") || { echo "$b"; return 1; }
    [ "$b" -gt "$a" ] 2>/dev/null && return 0
  done
  echo "$1's counter stayed at $a ($b)"; return 1
}
# start_container ID: `ctr run -d` of the tenant's image as ID, its counter then advancing.
start_container() { ctr_ -n tenant run -d --snapshotter pullgate "$APP" "$1" >/dev/null && counting "$1"; }

log "containerd $V: the workload"
check "the tenant pulls $APP with the password (pullgate pull)" pg pull -n tenant --plain-http --user "alice:$PW" "$APP"
check_out "the tenant's grant is listed" "$REG_priv/private/app" pg_grants tenant
for c in long1-$$ long2-$$ long3-$$; do
  check "ctr run -d $c (pullgate its snapshotter): RUNNING, its counter advancing" start_container "$c"
  CONTAINERS+=("$c")
done
# A namespace without credentials holds the image's blobs and an image record of it, not
# unpacked (imported from the tenant's export): its ctr run must unpack through pullgate's
# Prepare, where the gate decides.
check "the tenant exports the image" ctr_ -n tenant images export "$WORK/app.tar" "$APP"
check "a namespace without credentials imports it without unpacking" ctr_ -n nocred images import --no-unpack "$WORK/app.tar"
# gate_holds WHEN: the namespace without credentials is refused by pullgate check and by ctr
# run, which prints none of the image's content, and holds no container, no unpacked image
# and no snapshot of it afterwards.
container_count() { local l; l=$(listing ctr_ -n "$1" containers ls -q) || return 1; nlines "$l"; }
gate_holds() {
  check_has "$1: pullgate check refuses the namespace without credentials" "denied: $DENIED \"nocred\"" pg check -n nocred "$APP"
  check_refused "$1: its ctr run is refused by the gate" "$DENIED \"nocred\"" "$MSG" \
    ctr_ -n nocred run --rm --snapshotter pullgate "$APP" "refused-$RANDOM" cat /msg
  settle_gc nocred
  check "$1: it holds no container" is_zero container_count nocred
  check "$1: its image is not unpacked" not image_unpacked nocred "$APP"
  check "$1: it holds no snapshot" is_zero snapshot_count nocred
}
gate_holds "before the restarts"

# The requests in flight at a restart: name, pid and command of each; their exit statuses
# land in $WORK/op-NAME.rc.
OP_NAMES=(); OP_PIDS=()
# start_op NAME CMD...: runs CMD (ctr_ and pg as their commands) in the background, bounded by
# BOUND seconds; keeps the command, for op_again.
start_op() {
  local name=$1; shift
  local cmd=("$@")
  case $1 in
    ctr_) cmd=("${CTR[@]}" "${@:2}") ;;
    pg) cmd=("$PG_BIN" "$2" --address "$PG/api.sock" "${@:3}") ;;
  esac
  printf '%q ' "${cmd[@]}" >"$WORK/op-$name.cmd"
  ( timeout "$BOUND" "${cmd[@]}" >"$WORK/op-$name.out" 2>&1; echo $? >"$WORK/op-$name.rc" ) &
  OP_NAMES+=("$name"); OP_PIDS+=($!)
}
blob_gets() { grep -c ' /v2/.*/blobs/sha256:.* 200$' "$1" 2>/dev/null; }
# op_again NAME: runs NAME's command again, bounded. A container creation (rN-runK, creating
# rN-cK-PID) first removes what it left behind, if anything: `ctr run` cannot create an ID that
# exists.
op_again() {
  local name=$1
  case $name in
    *-run*) ctr_ -n tenant tasks rm -f "${name/-run/-c}-$$" >/dev/null 2>&1; ctr_ -n tenant containers rm "${name/-run/-c}-$$" >/dev/null 2>&1 ;;
  esac
  eval "timeout $BOUND $(cat "$WORK/op-$name.cmd")"
}
# exec_counter ID: `ctr tasks exec` reads ID's /counter in its rootfs: a positive number (read
# again when it found the file empty, as counter does).
exec_counter() {
  local v try
  for try in 1 2 3; do
    v=$(ctr_ -n tenant tasks exec --exec-id "read$RANDOM" "$1" cat /counter 2>&1) || { echo "$v"; return 1; }
    [[ $v =~ ^[0-9]+$ ]] && [ "$v" -gt 0 ] && return 0
  done
  echo "read '$v'"; return 1
}
# same_grants BEFORE: `pullgate grants -n tenant` prints BEFORE.
same_grants() {
  local now; now=$(pg_grants tenant 2>&1)
  [ "$now" = "$1" ] || { echo "before: $1 / now: $now"; return 1; }
}

# What a request in flight says when pullgate's process went away under it: the API client's
# transport error, or containerd's gRPC status for its snapshotter connection.
LOST='transport error|unavailable|connection refused|error reading from server|connection reset|transport is closing'
# restart_round N SIGNAL: the round's requests in flight, then pullgate stopped with SIGNAL and
# started again; then every check.
restart_round() {
  local n=$1 sig=$2 c grants_before t0 t1 t2 t3 rc i name st ended ok again
  local -A count_before
  log "$n. pullgate stopped with SIG$sig and started again under the workload (containerd $V)"
  grants_before=$(pg_grants tenant 2>&1)
  OP_NAMES=(); OP_PIDS=()
  local priv0 pub0; priv0=$(blob_gets "$WORK/slow-priv.log"); pub0=$(blob_gets "$WORK/slow-pub.log")
  start_op "r$n-ctrpull-a" ctr_ -n "pub$n-a" images pull --plain-http --snapshotter pullgate "$PUB"
  start_op "r$n-ctrpull-b" ctr_ -n "pub$n-b" images pull --plain-http --snapshotter pullgate "$PUB"
  start_op "r$n-pgpull" pg pull -n "ten$n" --plain-http --user "alice:$PW" "$BIG"
  start_op "r$n-pgverify" pg verify -n "ver$n" --plain-http --user "alice:$PW" "$BIG"
  # The pulls are downloading (the slow proxies answered blob requests for them).
  check "the pulls are downloading: the slow proxies answered blob requests of both registries" \
    wait_for 20 eval '[ $(($(blob_gets "$WORK/slow-priv.log") - priv0)) -ge 2 ] && [ $(($(blob_gets "$WORK/slow-pub.log") - pub0)) -ge 2 ]' 
  for c in "${CONTAINERS[@]}"; do count_before[$c]=$(counter "$c"); done
  start_op "r$n-run1" ctr_ -n tenant run -d --snapshotter pullgate "$APP" "r$n-c1-$$"
  sleep 0.05
  start_op "r$n-run2" ctr_ -n tenant run -d --snapshotter pullgate "$APP" "r$n-c2-$$"
  sleep 0.05
  local flying=() pulls=0 runs=0
  for i in "${!OP_PIDS[@]}"; do
    kill -0 "${OP_PIDS[i]}" 2>/dev/null || continue
    flying+=("${OP_NAMES[i]}")
    case ${OP_NAMES[i]} in *-run*) runs=$((runs + 1)) ;; *) pulls=$((pulls + 1)) ;; esac
  done
  t0=$(date +%s%N)
  kill -"$sig" "$PG_PID"
  if wait_for 60 eval '! kill -0 "$PG_PID" 2>/dev/null'; then wait "$PG_PID"; rc=$?; else rc=hung; fi
  t1=$(date +%s%N)
  echo "    pullgate (pid $PG_PID) ended with status $rc $(((t1 - t0) / 1000000)) ms after SIG$sig"
  check "when SIG$sig was sent, the 4 pulls and at least one of the 2 container creations were in flight (${flying[*]})" test "$pulls" -eq 4 -a "$runs" -ge 1
  if [ "$sig" = TERM ]; then
    check "pullgate exited 0 on SIGTERM, within 60 s (status $rc after $(((t1 - t0) / 1000000)) ms)" test "$rc" = 0
    check "and removed its snapshotter and API sockets" not eval 'test -e "$PG/snapshotter.sock" || test -e "$PG/api.sock"'
  else
    check "pullgate was killed by SIGKILL (status $rc)" test "$rc" = 137
    [ "$rc" = hung ] && { kill -9 "$PG_PID"; wait "$PG_PID"; }
  fi
  # (Its start is timed by its "pullgate serving" line, logged once both sockets listen: after
  # a SIGKILL the old socket files are still there.)
  local serving0 end; serving0=$(grep -c 'pullgate serving' "$PG/log")
  t2=$(date +%s%N)
  start_pullgate "$PG" || { fail "pullgate did not start again after SIG$sig"; exit 1; }
  end=$((SECONDS + 20))
  while [ "$(grep -c 'pullgate serving' "$PG/log")" -le "$serving0" ] && [ $SECONDS -lt $end ]; do sleep 0.01; done
  t3=$(date +%s%N)
  wait_backend; rc=$?
  echo "    the restarted pullgate served $(((t3 - t2) / 1000000)) ms after it was started; containerd reached it $((($(date +%s%N) - t2) / 1000000)) ms after"
  check "the restarted pullgate serves on the same sockets$([ "$sig" = KILL ] && echo ", left behind by the killed one"): containerd reaches it, pullgate grants answers" \
    eval '[ $rc -eq 0 ] && pg_grants tenant'
  ended=1
  for i in "${!OP_PIDS[@]}"; do
    wait "${OP_PIDS[i]}"
    name=${OP_NAMES[i]}; st=$(cat "$WORK/op-$name.rc" 2>/dev/null || echo none)
    echo "    $name: exit status $st$([ "$st" != 0 ] && echo ": $(shown 160 "$(cat "$WORK/op-$name.out")" | tr '\n' ' ')")"
    [ "$st" = 124 ] || [ "$st" = none ] && ended=0
  done
  check "every request in flight ended within $BOUND s, its exit status read (none hung)" test "$ended" -eq 1
  if [ "$sig" = TERM ]; then
    # pullgate drains on SIGTERM: the pull and the verify it was serving finish (the pull's
    # unpack included, through containerd and the snapshotter, which serves until they have).
    check "the pullgate pull in flight at SIGTERM completed (status $(cat "$WORK/op-r$n-pgpull.rc"))" test "$(cat "$WORK/op-r$n-pgpull.rc")" = 0
    check "and the pullgate verify (status $(cat "$WORK/op-r$n-pgverify.rc"))" test "$(cat "$WORK/op-r$n-pgverify.rc")" = 0
  fi
  ok=1 lost=1
  for name in "${OP_NAMES[@]}"; do
    [ "$(cat "$WORK/op-$name.rc" 2>/dev/null)" = 0 ] && continue
    grep -qiE "$LOST" "$WORK/op-$name.out" || { lost=0; echo "    $name failed for another reason than the lost connection"; }
    again=$(op_again "$name" 2>&1) || { ok=0; echo "    $name failed, and again: $(shown 300 "$again")"; }
  done
  check "each request that failed did so for the connection to pullgate it lost (/$LOST/)" test "$lost" -eq 1
  check "each request that failed succeeds when run again" test "$ok" -eq 1
  # What each pull brought: the images are complete and run, the grants are there.
  check "the public image ctr pulled in pub$n-a is complete and unpacked into pullgate" image_unpacked "pub$n-a" "$PUB"
  check "and in pub$n-b" image_unpacked "pub$n-b" "$PUB"
  check_out "the private image pullgate pulled into ten$n runs" "$BIGMSG" ctr_ -n "ten$n" run --rm --snapshotter pullgate "$BIG" "r$n-big" cat /msg
  check "the verify in ver$n left its grant" eval '[ "$(grant_count "ver$n")" -ge 1 ]'
  for c in "${CONTAINERS[@]}"; do
    check "$c is still RUNNING, its counter advanced across the restart (${count_before[$c]} -> $(counter "$c")) and advances still" \
      eval "counting $c && [ \"\$(counter $c)\" -gt '${count_before[$c]}' ]"
  done
  check "ctr tasks exec reads ${CONTAINERS[0]}'s counter in its rootfs" exec_counter "${CONTAINERS[0]}"
  for c in "r$n-c1-$$" "r$n-c2-$$"; do
    check "the container created in flight, $c, runs, its counter advancing" counting "$c"
    CONTAINERS+=("$c")
  done
  check "a new container, r$n-new-$$, starts after the restart, its counter advancing" start_container "r$n-new-$$"
  CONTAINERS+=("r$n-new-$$")
  check "pullgate grants lists the tenant's grants as before the restart" same_grants "$grants_before"
  gate_holds "after SIG$sig"
}

restart_round 1 TERM
restart_round 2 KILL

log "3. afterwards (containerd $V)"
n=0
for c in "${CONTAINERS[@]}"; do counting "$c" >/dev/null && n=$((n + 1)); done
check "all ${#CONTAINERS[@]} containers run, their counters advancing ($n)" test "$n" -eq "${#CONTAINERS[@]}"
# Every image containerd lists outside the namespace without credentials (the tenant's, and
# what each round's pulls brought) runs: its layers are all there.
failed_runs=""; nimg=0
for ns in $(ctr_ namespaces ls -q); do
  [ "$ns" = nocred ] && continue
  for im in $(ctr_ -n "$ns" images ls -q); do
    nimg=$((nimg + 1))
    out=$(ctr_ -n "$ns" run --rm --snapshotter pullgate "$im" "final-$nimg-$$" cat /msg 2>&1) && grep -qE '^restart (app|big|public)$' <<<"$out" \
      || failed_runs+=" $ns/$im ($(shown 120 "$out"))"
  done
done
check "every image containerd lists ($nimg, outside the namespace without credentials) runs, printing its /msg (not:${failed_runs:- none})" \
  test -z "$failed_runs" -a "$nimg" -gt 0
# containerd's garbage collection runs now, not during the conformance suite: once it has
# removed any of pullgate's snapshots (the runs above), it removes from pullgate every snapshot
# its records do not name, the suite's own ones included. It also removes those a request left
# when pullgate served it but containerd's side of it failed (pullgate killed under it), which
# share their names with the snapshots a retry made.
check "containerd collects garbage in every namespace" gc_all
check_existing "after the restarts"
check_consistency "after the restarts"
bad=$(grep -E ' (ERROR|WARN) |panicked|damaged' "$PG/log")
check "pullgate's log has no error, warning, panic or damage line ($(nlines "$bad"): $(shown 400 "$bad"))" test -z "$bad"
echo "    (the test took $((SECONDS - T_START)) s)"
summary "e2e restart (containerd $V)"
