#!/usr/bin/env bash
# End-to-end: a real kubelet (k8s.io/kubernetes v1.37.2, built by scripts/setup.sh) through
# pullgate's CRI front: kubelet's containerRuntimeEndpoint and imageServiceEndpoint are the
# front's socket, in front of containerd of the given version with its real CRI plugin (pullgate
# the only snapshotter, tests/cri_lib.sh). Host-network pods (no CNI), cgroupfs as containerd's
# runc shim uses it, a private image behind a token-auth registry (tests/tokenserver.py).
#   1. Standalone kubelet (no API server), static pods, the node's credential in docker's
#      config.json in kubelet's --root-dir (kubelet's own search path), kubelet's
#      KubeletEnsureSecretPulledImages at its default (on): pods of team-a and team-b
#      (imagePullPolicy: Always) pull the private image with the node's credential through the
#      front, each for its own namespace, and run it (their log files under kubelet's
#      podLogsDir show the image's message); a pod of team-c (IfNotPresent), which kubelet lets
#      use the present image without a pull (kubelet records a pull made with the node's
#      credential as usable by every pod of the node), is refused by pullgate and prints nothing.
#      The image filesystem: CRI's ImageFsInfo through the front names pullgate's root (the
#      fragment's exported root), and kubelet's summary measures it (capacity, free, usage).
#   2. With an API server (kube-apiserver from the same module, Debian's etcd): kubelet
#      registered as a node, without any node credential, its KubeletEnsureSecretPulledImages
#      off (as on clusters before 1.33); a second private image put on the node by the operator
#      (`pullgate pull -n k8s.io`), which kubelet counts as present; pods bound with
#      spec.nodeName (no scheduler), created with curl: team-a's pod with an imagePullSecret
#      (Always) runs it; team-b's pod without one (IfNotPresent) is let through by kubelet
#      ("already present on machine") and refused by pullgate (CreateContainerError with
#      pullgate's message in the pod's status), and nothing of the image appears; with its own
#      secret (Always), team-b's pod runs it after one manifest round-trip.
# kubelet runs in a mount namespace of its own where six kernel tunables it insists on
# (vm.overcommit_memory, kernel.panic, ...) read as it wants them (files bound over /proc/sys),
# so that it changes no sysctl of the machine, and /var/log is a tmpfs (its hard-coded
# /var/log/containers links); everything else it writes is under $WORK (--root-dir, podLogsDir,
# volumePluginDir). About a minute and a half per containerd version.
# Usage: tests/e2e_kubelet.sh VERSION
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/cri_lib.sh"
source "$(dirname "$0")/kube_lib.sh"
V=${1:?usage: e2e_kubelet.sh 1.7|2.1|2.4}
CRICTL_BIN=${CRICTL_BIN:-$DEPS/cri-tools-${CRI_TOOLS_VERSION:-v1.37.0}/crictl}
PW_NODE=node-Kubelet-8r3v
PW_ALICE=alice-Kubelet-4k7d
PW_CAROL=carol-Kubelet-9w2e
PW_ADMIN=admin-Kubelet-6z1q
PRIVMSG="private app for kubelet"
PRIVMSG2="preloaded private app"
REFUSED='pullgate refused pod'
NODE=pg-node-$$
KUBELET_PID=

# Stop kubelet first (else it restarts what is stopped), then every pod of this run's containerd
# (their containers would outlive their killed shims), then lib.sh's cleanup.
kubelet_cleanup() {
  [ -n "$KUBELET_PID" ] && kill "$KUBELET_PID" 2>/dev/null && sleep 1 && kill -9 "$KUBELET_PID" 2>/dev/null
  [ -n "${CTRD_SOCK:-}" ] && timeout 60 "$CRICTL_BIN" --runtime-endpoint "unix://$CTRD_SOCK" rmp -a -f >/dev/null 2>&1
  cleanup
}
trap kubelet_cleanup EXIT

log "containerd $V, kubelet $K8S_VERSION: setup"
for b in "$KBIN/kubelet" "$KBIN/kube-apiserver" "$CRICTL_BIN"; do
  [ -x "$b" ] || { fail "$b is not built (scripts/setup.sh builds it)"; summary "e2e kubelet (containerd $V)"; exit 1; }
done
check_out "kubelet is $K8S_VERSION" "Kubernetes $K8S_VERSION" "$KBIN/kubelet" --version
mk() { python3 "$REPO/tests/mkimage.py" "$@" >/dev/null; }
mk "$WORK/pause" --tag v1 --message "pause" --cmd "sleep 100000"
mk "$WORK/priv" --tag v1 --message "$PRIVMSG" --extra-layers 1 --layer-mb 0.2 --seed 71 --cmd "cat /msg; sleep 100000"
mk "$WORK/priv2" --tag v1 --message "$PRIVMSG2" --extra-layers 1 --layer-mb 0.2 --seed 72 --cmd "cat /msg; sleep 100000"
start_registry pub || exit 1
cat > "$WORK/acl.json" <<JSON
{"users": {"node": "$PW_NODE", "alice": "$PW_ALICE", "carol": "$PW_CAROL", "admin": "$PW_ADMIN"},
 "access": {"node": ["private/*"], "alice": ["private/*"], "carol": ["private/*"], "admin": ["*"]}, "push": ["admin"]}
JSON
# The private images' registry serves TLS (use_tls_registries): one manifest round-trip (2b) is
# what pullgate promises at an endpoint it verified.
use_tls_registries || exit 1
start_token_registry t "$WORK/acl.json" || exit 1
PAUSE=$REG_pub/k8s/pause:v1
PRIV=$REG_t/private/app:v1
PRIV2=$REG_t/private/preloaded:v1
push_image "$WORK/pause" v1 "$PAUSE" || fail "push the sandbox image"
push_image "$WORK/priv" v1 "$PRIV" "admin:$PW_ADMIN" || fail "push the private image"
push_image "$WORK/priv2" v1 "$PRIV2" "admin:$PW_ADMIN" || fail "push the second private image"
TOKMARK=$(wc -l < "$WORK/registry-t/token.log")   # (the pushes' token requests are before it)
start_cri_stack "$V" "$PAUSE" "$REG_pub" "$REG_t" || exit 1
pg() { local sub=$1; shift; "$PG_BIN" "$sub" --address "$PG/api.sock" "$@"; }
direct() { "$CRICTL_BIN" --runtime-endpoint "unix://$CTRD_SOCK" --image-endpoint "unix://$CTRD_SOCK" "$@"; }

# ---- kubelet ----
kube_sysctl_files "$WORK/sysctl"
# kubelet_config ROOT EXTRA_YAML: ROOT/config.yaml (ports from PORT_1, PORT_2).
kubelet_config() {
  { kubelet_config_common "$PG/cri.sock"; cat <<YAML
podLogsDir: $WORK/pod-logs
volumePluginDir: $1/volume-plugins
fileCheckFrequency: 1s
syncFrequency: 5s
$2
YAML
  } > "$1/config.yaml"
}
# start_kubelet ROOT EXTRA_YAML [FLAGS...]: kubelet with --root-dir ROOT, logging to ROOT/log;
# sets KUBELET_PID and KPORT (its HTTPS port: /pods answers anonymously).
start_kubelet() {
  _K_ROOT=$1 _K_EXTRA=$2; shift 2; _K_FLAGS=("$@")
  mkdir -p "$_K_ROOT" "$WORK/pod-logs"
  launch_on_free_ports 2 _launch_kubelet || { echo "kubelet did not start:"; tail -40 "$_K_ROOT/log"; return 1; }
  KPORT=$PORT_1
}
_launch_kubelet() {
  kubelet_config "$_K_ROOT" "$_K_EXTRA"
  # shellcheck disable=SC2016
  unshare --mount --propagation slave -- bash -c "set -e
$(kube_sysctl_binds "$WORK/sysctl")
mount -t tmpfs tmpfs /var/log
exec \"\$@\"" kubelet \
    "$KBIN/kubelet" --config "$_K_ROOT/config.yaml" --root-dir "$_K_ROOT" --hostname-override "$NODE" \
      --v 2 "${_K_FLAGS[@]}" >>"$_K_ROOT/log" 2>&1 &
  KUBELET_PID=$!; PIDS+=($!); LAUNCHED+=($!)
  wait_serving 60 curl -sf "http://127.0.0.1:$PORT_2/healthz"
}
stop_kubelet() {
  kill "$KUBELET_PID" 2>/dev/null; wait_for 20 not kill -0 "$KUBELET_PID"; kill -9 "$KUBELET_PID" 2>/dev/null; KUBELET_PID=
}
kubelet_pods() { curl -sk "https://127.0.0.1:$KPORT/pods"; }
# running_in NS: a container of a pod of Kubernetes namespace NS runs (containerd's CRI says).
running_in() { [ -n "$(direct ps --label "io.kubernetes.pod.namespace=$1" --state Running -q 2>/dev/null)" ]; }
# containers_in NS [POD]: how many containers (any state) containerd's CRI has for pods of NS
# (named POD); fails when crictl does (lib.sh's `listing`).
containers_in() {
  local l; l=$(listing direct ps -a --label "io.kubernetes.pod.namespace=$1" ${2:+--label "io.kubernetes.pod.name=$2"} -q) || return 1
  nlines "$l"
}
# pod_log NS POD: the container logs kubelet keeps for pod NS/POD* (podLogsDir/NS_POD_UID/C/N.log).
pod_log() { cat "$WORK"/pod-logs/"$1"_"$2"*/*/*.log 2>/dev/null; }
# static_pod NS NAME IMAGE POLICY: a static pod manifest (host network, the image's own command).
static_pod() {
  cat > "$WORK/$1-$2.yaml" <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $2, namespace: $1}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - {name: app, image: "$3", imagePullPolicy: $4}
YAML
  mv "$WORK/$1-$2.yaml" "$WORK/manifests/"   # (whole: kubelet reads the directory as it changes)
}
# pg_log_has WHAT WORD: a line of pullgate's log after line PGMARK says WHAT and WORD.
PGMARK=0
pg_log_has() { tail -n +"$((PGMARK + 1))" "$PG/log" | grep -F "$1" | grep -F "$2" >/dev/null; }

log "1. standalone kubelet: static pods, the node's credential"
mkdir -p "$WORK/manifests" "$WORK/kubelet1"
printf '{"auths": {"%s": {"auth": "%s"}}}\n' "$REG_t" "$(printf 'node:%s' "$PW_NODE" | base64 -w0)" > "$WORK/kubelet1/config.json"
static_pod team-a app-a "$PRIV" Always
static_pod team-b app-b "$PRIV" Always
start_kubelet "$WORK/kubelet1" "staticPodPath: $WORK/manifests" || { fail "kubelet (standalone) did not start"; summary "e2e kubelet (containerd $V)"; exit 1; }
pass "kubelet runs standalone (healthz), its CRI endpoints pullgate's front"
wait_for 90 running_in team-a || fail "team-a's container never ran: $(direct ps -a 2>&1 | tail -5)"
wait_for 30 running_in team-b || fail "team-b's container never ran: $(direct ps -a 2>&1 | tail -5)"
wait_for 10 bash -c "grep -qF '$PRIVMSG' $WORK/pod-logs/team-a_app-a*/app/0.log" ; wait_for 10 bash -c "grep -qF '$PRIVMSG' $WORK/pod-logs/team-b_app-b*/app/0.log"
# The image filesystem: containerd's CRI reports it at the root pullgate's proxy plugin exports
# (plugin/containerd-*.toml, pullgate's own root here), which kubelet measures for its image
# garbage collection and eviction (a directory that does not exist makes both fail).
fs=$("$CRICTL_BIN" --image-endpoint "unix://$PG/cri.sock" imagefsinfo -o json 2>"$WORK/crictl.err" || cat "$WORK/crictl.err")
check "CRI's ImageFsInfo through the front names pullgate's root $PG/root ($(shown 200 "$fs"))" \
  python3 -c 'import json,sys; s=json.loads(sys.argv[1])["status"]; assert [f["fsId"]["mountpoint"] for f in s["imageFilesystems"]] == [sys.argv[2]], s' "$fs" "$PG/root"
# (containerd's CRI adds up the snapshots' usage every 10 s.)
imagefs_measured() {
  curl -sk "https://127.0.0.1:$KPORT/stats/summary" >"$WORK/summary.json"
  python3 -c 'import json,sys; f=json.load(open(sys.argv[1]))["node"]["runtime"]["imageFs"]; assert f["capacityBytes"] > 0 and f["availableBytes"] > 0 and f["usedBytes"] > 0, f' "$WORK/summary.json" 2>/dev/null
}
wait_for 40 imagefs_measured
check "kubelet measures that image filesystem: its summary's imageFs has a capacity, free space and the images' usage ($(shown 300 "$(tr -d ' \n' <"$WORK/summary.json" | grep -o '"imageFs":{[^}]*}' || head -c 300 "$WORK/summary.json")"))" imagefs_measured
# (Not "Image garbage collection failed once. Stats initialization may not have completed yet":
# kubelet's first collection may run before its first stats, whatever the runtime.)
bad_fs=$(grep -E "HasDedicatedImageFs|failed to get imageFs|io\.containerd\.snapshotter\.v1\.pullgate" "$WORK/kubelet1/log" 2>&1); bad_rc=$?
# (grep's 1 is "no such line"; its 2, a log it could not read, is no evidence.)
check "kubelet logs no failure to read the image filesystem ($(shown 300 "${bad_fs:-none}"))" test "$bad_rc" -eq 1 -a -z "$bad_fs"
check "team-a's static pod ran the private image: its log (kubelet's podLogsDir) has the image's message" grep -qF "$PRIVMSG" <<<"$(pod_log team-a app-a)"
check "team-b's static pod too" grep -qF "$PRIVMSG" <<<"$(pod_log team-b app-b)"
# kubelet_running NS: kubelet's /pods shows a running container in a pod of NS.
kubelet_running() { kubelet_pods | jq -e --arg ns "$1" '[.items[] | select(.metadata.namespace == $ns) | .status.containerStatuses[]? | select(.state.running)] | length == 1' >/dev/null; }
check "kubelet sees team-a's container running (its /pods)" kubelet_running team-a
check "and team-b's" kubelet_running team-b
check "the pulls went through pullgate's front for team-a's pod (its log: CRI PullImage, principal team-a)" pg_log_has 'CRI PullImage' 'principal=team-a'
check "and for team-b's (principal team-b)" pg_log_has 'CRI PullImage' 'principal=team-b'
check "pullgate admitted team-a's container (CRI CreateContainer admitted)" pg_log_has 'CRI CreateContainer admitted' 'principal=team-a'
check "and team-b's" pg_log_has 'CRI CreateContainer admitted' 'principal=team-b'
check_out "pullgate grants -n k8s.io lists team-a's grant" "team-a" pg grants -n k8s.io
check_out "and team-b's" "team-b" pg grants -n k8s.io
users=$(tail -n +"$((TOKMARK + 1))" "$WORK/registry-t/token.log" | grep -oE 'user=[^ ]+' | sort -u | tr '\n' ' ')
check "the pulls presented the node's credential to the token service, and no other ($users)" test "$users" = "user=node "
# kubelet's own KEP-2535 (on) recorded the pulls, made with the node's credential, as usable by
# every pod of the node (ImagePulledRecord: credentialMapping[image].nodePodsAccessible).
node_wide() { cat "$WORK"/kubelet1/image_manager/pulled/* 2>/dev/null | jq -e -s --arg i "${PRIV%:*}" 'any(.[]; .credentialMapping[$i].nodePodsAccessible == true)' >/dev/null; }
check "kubelet's own KEP-2535 was on and recorded the image as pulled with the node's credential, usable by every pod of the node (nodePodsAccessible)" node_wide

log "1b. team-c (IfNotPresent): kubelet lets it use the present image, pullgate refuses it"
static_pod team-c app-c "$PRIV" IfNotPresent
st=
for _ in $(seq 60); do
  st=$(kubelet_pods | jq -c '.items[] | select(.metadata.namespace == "team-c") | .status.containerStatuses[]?.state' 2>/dev/null)
  grep -q CreateContainerError <<<"$st" && break; sleep 1
done
if grep -q CreateContainerError <<<"$st" && grep -qF "$REFUSED team-c/app-c-$NODE" <<<"$st"; then
  pass "kubelet shows team-c's container waiting in CreateContainerError with pullgate's refusal: $(head -c 400 <<<"$st")"
else fail "team-c's container state (kubelet's /pods): ${st:-none}"; fi
check "kubelet did not pull for team-c (pullgate saw no PullImage for it)" not pg_log_has 'CRI PullImage' 'team-c'
check "pullgate's log: CRI CreateContainer refused for team-c" pg_log_has 'CRI CreateContainer refused' 'team-c'
check "containerd has no container of team-c" is_zero containers_in team-c
check "and team-c's log directory holds nothing of the image" not grep -qF "$PRIVMSG" <<<"$(pod_log team-c app-c)"
# no_grant_for WORD: pullgate grants -n k8s.io answers (its header) and lists no WORD.
no_grant_for() { local out; out=$(pg grants -n k8s.io 2>&1) && [ "$(head -1 <<<"$out" | awk '{print $1}')" = NAMESPACE ] && ! grep -q -- "$1" <<<"$out"; }
check "no grant for team-c" no_grant_for team-c

log "1c. the static pods go"
rm -f "$WORK"/manifests/*.yaml
# no_pods_running: crictl lists ready pods and running containers, and both lists are empty.
no_pods_running() { local p c; p=$(listing direct pods --state Ready -q) && c=$(listing direct ps -q) && [ -z "$p" ] && [ -z "$c" ]; }
wait_for 60 no_pods_running && pass "kubelet stopped every pod once their manifests were gone" || fail "pods left: $(direct pods 2>&1)"
stop_kubelet

log "2. kubelet with an API server (kube-apiserver $K8S_VERSION, etcd $(etcd --version 2>/dev/null | awk '/^etcd Version/ {print $3}'))"
start_control_plane || { fail "the control plane did not start"; summary "e2e kubelet (containerd $V)"; exit 1; }
pass "kube-apiserver $K8S_VERSION serves (readyz) on etcd"
# The operator puts the second private image on the node (kubelet did not pull it: to kubelet it
# is present, "preloaded").
PGMARK=$(wc -l < "$PG/log")   # (what pullgate logs from here on is part 2's)
out=$(pg pull -n k8s.io --user "node:$PW_NODE" "$PRIV2" 2>&1) && pass "the operator's pullgate pull -n k8s.io of $PRIV2 ($out)" || fail "pullgate pull -n k8s.io $PRIV2: $out"
# kubelet: no node credential this time (a new --root-dir without config.json), its own KEP-2535 off.
mkdir -p "$WORK/kubelet2"
start_kubelet "$WORK/kubelet2" $'featureGates:\n  KubeletEnsureSecretPulledImages: false' --kubeconfig "$WORK/kubeconfig" \
  || { fail "kubelet (with the API server) did not start"; summary "e2e kubelet (containerd $V)"; exit 1; }
wait_for 60 kapi GET "/api/v1/nodes/$NODE" && pass "kubelet registered node $NODE" || fail "node $NODE never registered: $(tail -5 "$WORK/kubelet2/log")"
node_runtime() { kapi GET "/api/v1/nodes/$NODE" | jq -r .status.nodeInfo.containerRuntimeVersion; }
check_out "the node's runtime is containerd, reached through pullgate's front ($(node_runtime))" "containerd://" node_runtime
for ns in team-a team-b; do
  kapi POST /api/v1/namespaces "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"$ns\"}}" >/dev/null || fail "create namespace $ns"
done
kapi POST /api/v1/namespaces/team-a/secrets "{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":\"regcred\"},\"type\":\"kubernetes.io/dockerconfigjson\",\"data\":{\".dockerconfigjson\":\"$(dockercfg "$REG_t" "alice:$PW_ALICE")\"}}" >/dev/null \
  || fail "create team-a's pull secret"
# api_pod NS NAME IMAGE POLICY [SECRET]: a host-network pod bound to this node (spec.nodeName).
api_pod() {
  local sec=''; [ -n "${5:-}" ] && sec=",\"imagePullSecrets\":[{\"name\":\"$5\"}]"
  kapi POST "/api/v1/namespaces/$1/pods" "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"$2\"},\"spec\":{\"nodeName\":\"$NODE\",\"hostNetwork\":true,\"automountServiceAccountToken\":false,\"terminationGracePeriodSeconds\":1$sec,\"containers\":[{\"name\":\"app\",\"image\":\"$3\",\"imagePullPolicy\":\"$4\"}]}}" >/dev/null
}
pod_running() { kapi GET "/api/v1/namespaces/$1/pods/$2" | jq -e '.status.containerStatuses[0].state.running' >/dev/null; }
cstate() { kapi GET "/api/v1/namespaces/$1/pods/$2" | jq -c '.status.containerStatuses[0].state // empty'; }
events_of() { kapi GET "/api/v1/namespaces/$1/events" | jq -r --arg p "$2" '.items[] | select(.involvedObject.name == $p) | "\(.reason): \(.message)"'; }

check "team-a's pod (imagePullSecrets: regcred, Always) created" api_pod team-a app "$PRIV2" Always regcred
check "team-b's pod (no secret, IfNotPresent) created" api_pod team-b app "$PRIV2" IfNotPresent
wait_for 90 pod_running team-a app \
  && pass "team-a's pod runs (its status: $(cstate team-a app))" || fail "team-a's pod: $(cstate team-a app) $(events_of team-a app | tail -3)"
wait_for 10 bash -c "grep -qF '$PRIVMSG2' $WORK/pod-logs/team-a_app_*/app/0.log"
check "team-a's container printed the image's message (its log under podLogsDir)" grep -qF "$PRIVMSG2" <<<"$(pod_log team-a app_)"
check "kubelet pulled for team-a through the front (pullgate's log: CRI PullImage of $PRIV2, principal team-a)" pg_log_has "CRI PullImage" "image=$PRIV2 principal=team-a"
check "with team-a's secret (the token service saw user alice)" grep -q 'user=alice' "$WORK/registry-t/token.log"
st=
for _ in $(seq 60); do st=$(cstate team-b app); grep -q CreateContainerError <<<"$st" && break; sleep 1; done
if grep -q CreateContainerError <<<"$st" && grep -qF "$REFUSED team-b/app (principal \\\"team-b\\\") the image $PRIV2" <<<"$st"; then
  pass "team-b's pod is refused by pullgate: CreateContainerError in its status, with pullgate's message: $(head -c 400 <<<"$st")"
else fail "team-b's pod: container state ${st:-none}"; fi
ev=$(events_of team-b app)
check "kubelet's own check let team-b's pod use the image (its event: already present on machine)" grep -q "^Pulled: .*$PRIV2.* already present on machine" <<<"$ev"
check "and kubelet's event for the failure carries pullgate's refusal" grep -qF "$REFUSED team-b/app" <<<"$ev"
check "kubelet did not pull for team-b (pullgate saw no PullImage for it)" not pg_log_has 'CRI PullImage' 'team-b'
check "containerd has no container of team-b's pod" is_zero containers_in team-b app
check "nothing of the image in team-b's log directory" not grep -qF "$PRIVMSG2" <<<"$(pod_log team-b app_)"
# no_pull_records: kubelet2's pull-record directory does not exist, or ls lists it empty.
no_pull_records() {
  local d=$WORK/kubelet2/image_manager/pulled l
  [ -e "$d" ] || return 0
  l=$(listing ls "$d") || return 1
  [ -z "$l" ] || { echo "$d holds: $(paste -sd' ' <<<"$l")"; return 1; }
}
check "kubelet's own KEP-2535 was off: no pull records under its root" no_pull_records

log "2b. team-b with its own secret: runs after one manifest round-trip"
kapi POST /api/v1/namespaces/team-b/secrets "{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":\"regcred\"},\"type\":\"kubernetes.io/dockerconfigjson\",\"data\":{\".dockerconfigjson\":\"$(dockercfg "$REG_t" "carol:$PW_CAROL")\"}}" >/dev/null \
  || fail "create team-b's pull secret"
mark=$(wc -l < "$WORK/registry-t/log")
check "team-b's second pod (imagePullSecrets: regcred, Always) created" api_pod team-b app2 "$PRIV2" Always regcred
wait_for 90 pod_running team-b app2 \
  && pass "team-b's pod with its secret runs ($(cstate team-b app2))" || fail "team-b's app2: $(cstate team-b app2) $(events_of team-b app2 | tail -3)"
wait_for 10 bash -c "grep -qF '$PRIVMSG2' $WORK/pod-logs/team-b_app2_*/app/0.log"
check "and prints the image's message" grep -qF "$PRIVMSG2" <<<"$(pod_log team-b app2_)"
after=$(tail -n +"$((mark + 1))" "$WORK/registry-t/log")
check "the registry saw team-b's manifest request" grep -q '"[A-Z]* /v2/private/preloaded/manifests/' <<<"$after"
check "and no blob GET" not grep -q '"GET /v2/private/preloaded/blobs/' <<<"$after"
check_out "pullgate grants -n k8s.io lists team-b's grant" "team-b" pg grants -n k8s.io

log "2c. the pods go"
for p in team-a/app team-b/app team-b/app2; do kapi DELETE "/api/v1/namespaces/${p%/*}/pods/${p#*/}" >/dev/null || fail "delete pod $p"; done
wait_for 60 no_pods_running && pass "kubelet stopped every pod once deleted" || fail "pods left: $(direct pods 2>&1)"
api_pods_gone() { [ "$(kapi GET /api/v1/pods | jq '.items | length')" = 0 ]; }
wait_for 30 api_pods_gone && pass "and the API server has none left" || fail "pods left in the API: $(kapi GET /api/v1/pods | jq -r '.items[].metadata.name')"
stop_kubelet
check "no password of the node's credential or of the pull secrets is in pullgate's, containerd's or kubelet's log" \
  not grep -rqF -e "$PW_NODE" -e "$PW_ALICE" -e "$PW_CAROL" "$PG/log" "$WORK/containerd/log" "$WORK/kubelet1/log" "$WORK/kubelet2/log"

summary "e2e kubelet (containerd $V)"
