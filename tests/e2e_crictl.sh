#!/usr/bin/env bash
# End-to-end: crictl (sigs.k8s.io/cri-tools, a released version, built by scripts/setup.sh)
# against pullgate's CRI front, compared with crictl against containerd's CRI directly, on a
# real containerd of the given version (its CRI plugin on, pullgate the only snapshotter, as in
# tests/cri_lib.sh). crictl reads plugin/crictl.yaml (its socket pointed at this run's front).
# The operator's habits, each once straight to containerd and once through the front, on one
# private image (htpasswd registry) and host-network pods: `crictl pull --creds`, `images`,
# `inspecti`, `runp`, `create`, `start`, `exec`, `logs`, `ps`, `stats`, `stopp`/`rmp`, `rmi`.
# What matters is compared: exit codes, the image's ID, tags, digests and size, the pod's and
# container's states, exec's and the log's content, the containers `ps` and `stats` list. The
# read-only calls are also asked of both sockets at the same moment and must agree.
# And through the front: `crictl pull` without or with a wrong credential fails as the registry
# says; `crictl pull --creds --pod-config` records the pod's grant (without --pod-config the
# pull is the node's, principal @node, which lets no pod run the image).
# Usage: tests/e2e_crictl.sh VERSION
CRI_BIN=   # (cri_lib.sh waits for CRI with crictl here, not with examples/cri)
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/cri_lib.sh"
V=${1:?usage: e2e_crictl.sh 1.7|2.1|2.4}
trap cleanup EXIT
CRI_TOOLS_VERSION=${CRI_TOOLS_VERSION:-v1.37.0}
CRICTL_BIN=${CRICTL_BIN:-$DEPS/cri-tools-$CRI_TOOLS_VERSION/crictl}
PW_ALICE=alice-Crictl-5h2w
PRIVMSG="private crictl app"

log "containerd $V, crictl $CRI_TOOLS_VERSION: setup"
[ -x "$CRICTL_BIN" ] || { fail "crictl is not built at $CRICTL_BIN (scripts/setup.sh builds it)"; summary "e2e crictl (containerd $V)"; exit 1; }
mk() { python3 "$REPO/tests/mkimage.py" "$@" >/dev/null; }
mk "$WORK/pause" --tag v1 --message "pause" --cmd "sleep 100000"
mk "$WORK/priv" --tag v1 --message "$PRIVMSG" --extra-layers 1 --layer-mb 0.2 --seed 61 --cmd "cat /msg; sleep 100000"
start_registry pub || exit 1
start_registry h htpasswd alice "$PW_ALICE" || exit 1
PAUSE=$REG_pub/k8s/pause:v1
PRIV=$REG_h/private/app:v1
push_image "$WORK/pause" v1 "$PAUSE" || fail "push the sandbox image"
push_image "$WORK/priv" v1 "$PRIV" "alice:$PW_ALICE" || fail "push the private image"
start_cri_stack "$V" "$PAUSE" "$REG_pub" "$REG_h" || exit 1
sed "s#unix:///run/pullgate/cri.sock#unix://$PG/cri.sock#" "$REPO/plugin/crictl.yaml" > "$WORK/crictl-front.yaml"
sed "s#unix:///run/pullgate/cri.sock#unix://$CTRD_SOCK#" "$REPO/plugin/crictl.yaml" > "$WORK/crictl-direct.yaml"
check "plugin/crictl.yaml names pullgate's socket for both endpoints (front config: $(grep -c "$PG/cri.sock" "$WORK/crictl-front.yaml") lines)" \
  test "$(grep -c "unix://$PG/cri.sock" "$WORK/crictl-front.yaml")" = 2
front() { "$CRICTL_BIN" --config "$WORK/crictl-front.yaml" "$@"; }
direct() { "$CRICTL_BIN" --config "$WORK/crictl-direct.yaml" "$@"; }
wait_for 30 direct version || { fail "containerd's CRI does not answer crictl"; summary "e2e crictl (containerd $V)"; exit 1; }
check_out "crictl version through the front names containerd" "RuntimeName:  containerd" front version
jq_() { jq -r "$@"; }
mkdir -p "$WORK/logs"
# pod_json WAY: a host-network pod with an empty hostname, as kubelet sends them.
pod_json() {
  cat > "$WORK/pod-$1.json" <<JSON
{"metadata": {"name": "app-$1", "namespace": "team-$1", "uid": "uid-$1", "attempt": 0},
 "log_directory": "$WORK/logs/$1",
 "linux": {"security_context": {"namespace_options": {"network": 2}}}}
JSON
  cat > "$WORK/ctr-$1.json" <<JSON
{"metadata": {"name": "c-$1"}, "image": {"image": "$PRIV"}, "log_path": "c-$1.log"}
JSON
}

# session WAY CMD: every habit once through CMD (front or direct); results in R_<name>_WAY.
session() {
  local w=$1 via=$2 out rc
  log "crictl $([ "$via" = front ] && echo "through pullgate's front" || echo "straight to containerd's CRI") ($w)"
  check_refused "$w: crictl pull without a credential fails as the registry says" "401|unauthorized|authoriz|credentials" "" $via pull "$PRIV"
  check_refused "$w: crictl pull with a wrong password fails" "401|unauthorized|authoriz|rejected|credentials" "wrong-Pw-9" $via pull --creds "alice:wrong-Pw-9" "$PRIV"
  # (--pod-config: the pull is the pod's, as kubelet's is; without it, through the front, the pull
  # is the node's, and no pod runs the image on it: checked below.)
  pod_json "$w"
  out=$($via pull --creds "alice:$PW_ALICE" --pod-config "$WORK/pod-$w.json" "$PRIV" 2>&1); rc=$?
  check "$w: crictl pull --creds --pod-config ($out)" test $rc -eq 0
  printf -v "R_pull_$w" '%s' "$(grep -oE 'sha256:[0-9a-f]{64}' <<<"$out")"
  out=$($via images 2>&1) || fail "$w: crictl images: $out"
  printf -v "R_images_$w" '%s' "$(awk -v r="$REG_h/private/app" '$1 == r {print $1, $2, $3, $4, $5}' <<<"$out")"
  out=$($via inspecti -o json "$PRIV" 2>&1) || fail "$w: crictl inspecti: $out"
  printf -v "R_inspecti_$w" '%s' "$(jq_ -c '.status | {id, repoTags, repoDigests, size, username, uid}' <<<"$out" 2>&1)"
  POD=$($via runp "$WORK/pod-$w.json" 2>"$WORK/err") || fail "$w: crictl runp: $(cat "$WORK/err")"
  check "$w: crictl runp made a pod ($POD)" test -n "$POD" -a "${#POD}" = 64
  printf -v "R_podstate_$w" '%s' "$($via inspectp -o json "$POD" 2>/dev/null | jq_ .status.state)"
  CID=$($via create "$POD" "$WORK/ctr-$w.json" "$WORK/pod-$w.json" 2>"$WORK/err") || fail "$w: crictl create: $(cat "$WORK/err")"
  check "$w: crictl create made a container ($CID)" test "${#CID}" = 64
  check "$w: crictl start" $via start "$CID"
  wait_for 20 bash -c "grep -qF '$PRIVMSG' '$WORK/logs/$w/c-$w.log'" || fail "$w: the container's log never showed its message"
  printf -v "R_state_$w" '%s' "$($via inspect -o json "$CID" 2>/dev/null | jq_ .status.state)"
  printf -v "R_exec_$w" '%s' "$($via exec "$CID" cat /msg 2>&1)"
  printf -v "R_execsync_$w" '%s' "$($via exec --sync "$CID" sh -c 'echo out; echo err >&2; exit 3' 2>&1 | sed -E 's/^time="[^"]*" //; s/[0-9a-f]{64}/CID/g'; echo "rc=${PIPESTATUS[0]}")"
  printf -v "R_logs_$w" '%s' "$($via logs "$CID" 2>&1)"
  out=$($via ps -o json 2>&1) || fail "$w: crictl ps: $out"
  printf -v "R_ps_$w" '%s' "$(jq_ -c --arg c "$CID" '[.containers[] | select(.id == $c) | {state, name: .metadata.name, imageRef}]' <<<"$out" 2>&1 | sed "s/c-$w/c-WAY/")"
  out=$($via stats -o json 2>&1) || fail "$w: crictl stats: $out"
  printf -v "R_stats_$w" '%s' "$(jq_ -c --arg c "$CID" '[.stats[] | select(.attributes.id == $c) | {name: .attributes.metadata.name, mem: (.memory.workingSetBytes.value | tonumber > 0), cpu: (.cpu != null)}]' <<<"$out" 2>&1 | sed "s/c-$w/c-WAY/")"
  # The read-only calls, asked of both sockets now: the same answer.
  for q in "images -q" "ps -a -q" "pods -q" "inspecti -o json $PRIV" "inspectp -o json $POD" "inspect -o json $CID"; do
    # (inspect and inspectp carry no timing fields that change between two calls)
    a=$(front $q 2>/dev/null); b=$(direct $q 2>/dev/null)
    if [ -n "$a" ] && [ "$a" = "$b" ]; then pass "$w: crictl $(cut -d' ' -f1-2 <<<"$q") gives the same answer through the front and directly"
    else fail "$w: crictl $q differs: front: $(head -c 300 <<<"$a") / direct: $(head -c 300 <<<"$b")"; fi
  done
  check "$w: crictl stop" $via stop -t 0 "$CID"
  check "$w: crictl rm" $via rm "$CID"
  check "$w: crictl stopp" $via stopp "$POD"
  check "$w: crictl rmp" $via rmp "$POD"
  check "$w: crictl rmi" $via rmi "$PRIV"
  # (Counted in a listing that worked: a failed `crictl images` lists nothing either.)
  out=$($via images -q 2>"$WORK/err"); rc=$?
  if [ $rc -eq 0 ]; then printf -v "R_gone_$w" '%s' "$(grep -c "$(cut -d' ' -f1 <<<"${R_pull_direct:-${R_pull_front:-x}}")" <<<"$out")"
  else
    fail "$w: crictl images -q after rmi (rc=$rc): $(cat "$WORK/err")"
    printf -v "R_gone_$w" 'crictl images -q failed (rc=%s)' "$rc"
  fi
}
session direct direct
# settle containerd's GC, so that the front's pull starts from a node without the image
ctr_ -n k8s.io leases create --id settle >/dev/null && ctr_ -n k8s.io leases delete --sync settle >/dev/null
session front front
check_out "the front's pull recorded the pod's grant in k8s.io (principal team-front)" "team-front" \
  "$PG_BIN" grants --address "$PG/api.sock" -n k8s.io
# Without --pod-config the pull is the node's: it records a grant for @node, and no pod runs the
# image on it.
out=$(front pull --creds "alice:$PW_ALICE" "$PRIV" 2>&1) && pass "front: crictl pull --creds without --pod-config ($out)" || fail "front: crictl pull --creds without --pod-config: $out"
check_out "that pull's grant is the node's (@node)" "@node" "$PG_BIN" grants --address "$PG/api.sock" -n k8s.io
pod_json node
NPOD=$(front runp "$WORK/pod-node.json" 2>"$WORK/err") || fail "front: crictl runp (team-node): $(cat "$WORK/err")"
check_refused "front: team-node's pod (no pull of its own) is refused the image the node pulled" "pullgate refused pod team-node/app-node" "$PRIVMSG" \
  front create "$NPOD" "$WORK/ctr-node.json" "$WORK/pod-node.json"
front stopp "$NPOD" >/dev/null 2>&1; front rmp "$NPOD" >/dev/null 2>&1

log "the same answers both ways"
for r in pull images inspecti podstate state exec execsync logs ps stats gone; do
  d=R_${r}_direct f=R_${r}_front
  if [ -n "${!d}" ] && [ "${!d}" = "${!f}" ]; then pass "crictl $r: the same through the front as directly: $(head -c 160 <<<"${!d}" | tr '\n' ' ')"
  else fail "crictl $r differs: direct: $(head -c 300 <<<"${!d}") / front: $(head -c 300 <<<"${!f}")"; fi
done
check "the image ID is the config digest crictl pull printed" test -n "$R_pull_direct"
check "exec printed the image's message" grep -qF "$PRIVMSG" <<<"$R_exec_front"
exit3() { grep -q 'exited with 3: err' <<<"$1" && grep -q 'rc=1$' <<<"$1"; }
check "exec --sync of a command that fails reports its exit code 3 and its stderr, and crictl exits non-zero ($R_execsync_front)" exit3 "$R_execsync_front"
check "the container was running when asked ($R_state_front)" test "$R_state_front" = CONTAINER_RUNNING
check "the pod was ready ($R_podstate_front)" test "$R_podstate_front" = SANDBOX_READY
check "stats measured the container ($R_stats_front)" grep -q '"mem":true' <<<"$R_stats_front"
check "rmi removed the image both ways" test "$R_gone_front" = 0

summary "e2e crictl (containerd $V)"
