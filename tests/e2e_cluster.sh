#!/usr/bin/env bash
# End-to-end: a Kubernetes cluster of two nodes on this machine, each gated by its own pullgate,
# pullgate installed on both by its DaemonSet (plugin/daemonset/), with Kubernetes' own
# components v1.37.2 (scripts/setup.sh builds them): etcd (Debian's), kube-apiserver,
# kube-scheduler, kube-controller-manager, kubectl, and per node a kubelet with containerd VERSION
# and its CRI plugin.
# Each node is a mount namespace of its own (node_up) in which the paths a node keeps its state
# at are the node's own directories under $WORK/NODE: /etc (an overlay of the machine's, its
# changes in $WORK/NODE/etc: containerd's, pullgate's and systemd's files), /usr/local/bin, /run
# and /var/lib (a tmpfs on /var/log); nothing of the machine's changes. containerd,
# kubelet and later pullgate run there with their default paths, so the DaemonSet's hostPath
# volumes reach each node's own. Host-network pods (no CNI); both nodes share the machine's
# network (kubelet on ports of their own) and cgroups (cgroupfs, each pod its own); a CNI
# configuration no pod uses makes the nodes Ready.
#   0. The nodes as they boot: containerd alone (overlayfs), kubelet's endpoint pullgate's CRI
#      socket (plugin/kubelet-config.yaml), there a link to containerd's socket until pullgate
#      runs (docs/kubernetes.md). Kubelet's own KEP-2535 off on node a, on on node b.
#      Registry load without pullgate: a private image (base/app) on node b, measured per event
#      from the registry's and token server's logs (tests/regload.py): the first pull on the
#      node, a second tenant with its own secret (IfNotPresent: kubelet's KEP-2535 pulls again),
#      a second pod of the same tenant, and imagePullPolicy: Always (what AlwaysPullImages sets
#      on every pod).
#   1. The DaemonSet installer: its image built from this tree's release files
#      (scripts/release.sh) by tests/mkimage.py and pushed to the run's public registry; the
#      DaemonSet, as plugin/daemonset/pullgate-installer.yaml but for the image, the node's
#      containerd binary and the restart command, scheduled by the controller on each node; its
#      restart command asks the test to do what the node's init system would (start pullgate from
#      the unit the installer placed, restart containerd).
#   2. Scenarios under pullgate (private/app): a Deployment with an imagePullSecret spread over
#      both nodes, then scaled; another namespace without the secret refused on both nodes; a
#      node drained; the secret's credential revoked and the secret updated; per-node grants and
#      registry load per event, as in 0.
# Usage: tests/e2e_cluster.sh VERSION
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/cri_lib.sh"
source "$(dirname "$0")/kube_lib.sh"
V=${1:?usage: e2e_cluster.sh 1.7|2.1}
CRICTL_BIN=${CRICTL_BIN:-$DEPS/cri-tools-${CRI_TOOLS_VERSION:-v1.37.0}/crictl}
PW_ALICE=alice-Cluster-3h8q
PW_ALICE2=alice-Cluster-rotated-5n2c
PW_BOB=bob-Cluster-7m4x
PW_CAROL=carol-Cluster-6t1v
PW_ADMIN=admin-Cluster-2k9w
APPMSG="private app on the cluster"
BASEMSG="private app without pullgate"
REFUSED='pullgate refused pod'
NODES=(a b)
declare -A HOLDER=()

cluster_cleanup() {
  local n p h
  set +e
  for n in "${NODES[@]}"; do
    [ -f "$WORK/$n/kubelet.pid" ] && kill "$(cat "$WORK/$n/kubelet.pid")" 2>/dev/null
  done
  sleep 1
  for n in "${NODES[@]}"; do
    [ -S "$WORK/$n/run/containerd/containerd.sock" ] && timeout 60 "$CRICTL_BIN" --runtime-endpoint "unix://$WORK/$n/run/containerd/containerd.sock" rmp -a -f >/dev/null 2>&1
  done
  # Every process of a node's mount namespace (containerd, pullgate, kubelet, shims) and the
  # containers its shims started.
  for n in "${NODES[@]}"; do
    h=${HOLDER[$n]:-}; [ -n "$h" ] || continue
    local ns; ns=$(readlink "/proc/$h/ns/mnt") || continue
    for p in /proc/[0-9]*; do
      [ "$(readlink "$p/ns/mnt" 2>/dev/null)" = "$ns" ] || continue
      [ "$(cat "$p/comm" 2>/dev/null)" = containerd-shim ] && pkill -9 -P "${p#/proc/}"
      kill -9 "${p#/proc/}" 2>/dev/null
    done
  done
  cleanup
}
trap cluster_cleanup EXIT

log "containerd $V, Kubernetes $K8S_VERSION, two nodes: setup"
for b in kubelet kube-apiserver kube-scheduler kube-controller-manager kubectl; do
  [ -x "$KBIN/$b" ] || { fail "$KBIN/$b is not built (scripts/setup.sh builds it)"; summary "e2e cluster (containerd $V)"; exit 1; }
done
check_out "kubectl is $K8S_VERSION" "Client Version: $K8S_VERSION" "$KBIN/kubectl" version --client
BINDIR=$(containerd_bindir "$V") || exit 1
mk() { python3 "$REPO/tests/mkimage.py" "$@" >/dev/null; }
mk "$WORK/pause" --tag v1 --message "pause" --cmd "sleep 100000"
# (The two private images share no layer with each other or the sandbox image: what a first pull
# costs is all of an image.)
mk "$WORK/app" --tag v1 --message "$APPMSG" --extra-layers 2 --layer-mb 1 --seed 81 --cmd "cat /msg; sleep 100000" \
  --base-note app --fixed-layers-note app
mk "$WORK/base" --tag v1 --message "$BASEMSG" --extra-layers 2 --layer-mb 1 --seed 82 --cmd "cat /msg; sleep 100000" \
  --base-note base --fixed-layers-note base
start_registry pub || exit 1
cat > "$WORK/acl.json" <<JSON
{"users": {"alice": "$PW_ALICE", "bob": "$PW_BOB", "admin": "$PW_ADMIN"},
 "access": {"alice": ["private/*", "base/*"], "bob": ["base/*"], "admin": ["*"]}, "push": ["admin"]}
JSON
# The private images' registry serves TLS: one manifest round-trip is what pullgate promises at
# an endpoint it verified.
use_tls_registries || exit 1
start_token_registry t "$WORK/acl.json" || exit 1
PAUSE=$REG_pub/k8s/pause:v1
APP=$REG_t/private/app:v1
BASE=$REG_t/base/app:v1
push_image "$WORK/pause" v1 "$PAUSE" || fail "push the sandbox image"
push_image "$WORK/app" v1 "$APP" "admin:$PW_ADMIN" || fail "push the private image"
push_image "$WORK/base" v1 "$BASE" "admin:$PW_ADMIN" || fail "push the baseline's private image"
# An image the operator marks preloaded at installation (PULLGATE_PRELOAD), with alice's
# credential from the Secret pullgate-preload-auth.
PRELOADED=$REG_t/private/preloaded:v1
push_image "$WORK/pause" v1 "$PRELOADED" "admin:$PW_ADMIN" || fail "push the image to preload"
HOSTS=$WORK/hosts
for r in "$REG_pub" "$REG_t"; do write_hosts_toml "$HOSTS" "$r"; done

# ---- the control plane ----
# (--allow-privileged: the installer's pods are privileged.)
start_control_plane --allow-privileged=true || { fail "the control plane did not start"; summary "e2e cluster (containerd $V)"; exit 1; }
pass "kube-apiserver $K8S_VERSION serves (readyz) on etcd"
kc() { "$KBIN/kubectl" --kubeconfig "$WORK/kubeconfig" "$@"; }
_launch_controllers() {
  "$KBIN/kube-scheduler" --kubeconfig "$WORK/kubeconfig" --authentication-kubeconfig "$WORK/kubeconfig" \
    --authorization-kubeconfig "$WORK/kubeconfig" --leader-elect=false --bind-address 127.0.0.1 --secure-port "$PORT_1" \
    >>"$WORK/scheduler.log" 2>&1 &
  PIDS+=($!); LAUNCHED+=($!)
  "$KBIN/kube-controller-manager" --kubeconfig "$WORK/kubeconfig" --authentication-kubeconfig "$WORK/kubeconfig" \
    --authorization-kubeconfig "$WORK/kubeconfig" --leader-elect=false --bind-address 127.0.0.1 --secure-port "$PORT_2" \
    --service-account-private-key-file "$WORK/apiserver/sa.key" --use-service-account-credentials=false \
    >>"$WORK/controller-manager.log" 2>&1 &
  PIDS+=($!); LAUNCHED+=($!)
  wait_serving 60 curl -skf "https://127.0.0.1:$PORT_1/healthz" && wait_serving 60 curl -skf "https://127.0.0.1:$PORT_2/healthz"
}
launch_on_free_ports 2 _launch_controllers \
  && pass "kube-scheduler and kube-controller-manager $K8S_VERSION serve (healthz)" \
  || { fail "kube-scheduler or kube-controller-manager did not start: $(tail -3 "$WORK/scheduler.log" "$WORK/controller-manager.log")"; summary "e2e cluster (containerd $V)"; exit 1; }

# ---- the nodes ----
kube_sysctl_files "$WORK/sysctl"
# in_node NODE CMD...: CMD in the node's mount namespace (a file of the node's /etc is written
# there: the overlay does not see what is written into its upper directory from outside).
in_node() { local n=$1; shift; nsenter -t "${HOLDER[$n]}" -m -- "$@"; }
# node_exec NODE CMD... &: CMD in the node's mount namespace, in the background: the subshell of
# the `&` becomes CMD, so that $! is CMD's PID.
node_exec() { local n=$1; shift; exec nsenter -t "${HOLDER[$n]}" -m -- "$@"; }
# stop_pidfile FILE: stops the process FILE names (SIGTERM, SIGKILL after 60 s) and removes FILE;
# nothing without FILE.
stop_pidfile() {
  local p
  [ -f "$1" ] || return 0
  p=$(cat "$1"); kill "$p" 2>/dev/null; wait_for 60 not kill -0 "$p"; kill -9 "$p" 2>/dev/null; rm -f "$1"
}
# node_containerd NODE: (re)starts the node's containerd (its default config path and sockets).
node_containerd() {
  local n=$1 N=$WORK/$1
  stop_pidfile "$N/containerd.pid"
  node_exec "$n" env PATH="$BINDIR:$PATH" "$BINDIR/containerd" >>"$N/containerd.log" 2>&1 &
  echo $! > "$N/containerd.pid"; PIDS+=($!)
  wait_for 60 "$CRI_BIN" --socket "$N/run/containerd/containerd.sock" --timeout 5 Version \
    || { echo "node $n: containerd's CRI does not answer:"; tail -20 "$N/containerd.log"; return 1; }
}
# node_up NODE KEP2535(true|false): the node's namespace, containerd alone and kubelet,
# registered as node pg-NODE.
node_up() {
  local n=$1 kep=$2 N=$WORK/$1
  mkdir -p "$N"/{etc/containerd,etc/pullgate,etc/systemd/system,etc.work,bin,run,varlib}
  # containerd alone, as containerd_cri_config writes its CRI settings, at containerd's default
  # root, state and socket.
  ( WORK=$N
    fragment() { printf 'version = %s\n' "$([ "$1" = 1.x ] && echo 2 || echo 3)"; }
    containerd_cri_config "$V" "" "$PAUSE" "$HOSTS" ) || return 1
  sed '/^\[grpc\]$/,/^  address = /d' "$N/containerd/config.toml" > "$N/etc/containerd/config.toml"
  # On containerd 2.x, node a's sandbox image is set in a file its config imports from outside
  # /etc/containerd (the installer's pod mounts /etc/containerd only): the main file names an
  # image that does not exist, which the import overrides. Only a reading on the host finds the
  # right one. (containerd 1.x replaces a plugin's whole section with an imported one, so there
  # the import would carry all of CRI's settings, pullgate's snapshotter setting among them.)
  if [ "$n" = a ] && [ "${V%%.*}" = 2 ]; then
    mkdir -p "$N/etc/containerd-site"
    printf 'version = 3\n[plugins."io.containerd.cri.v1.images".pinned_images]\n  sandbox = "%s"\n' "$PAUSE" > "$N/etc/containerd-site/sandbox.toml"
    { echo 'imports = ["/etc/containerd-site/*.toml"]'; sed "s#$PAUSE#$REG_pub/k8s/no-such-sandbox:v1#" "$N/etc/containerd/config.toml"; } > "$N/config.tmp"
    mv "$N/config.tmp" "$N/etc/containerd/config.toml"
  fi
  # A network configuration, so that CRI reports the pod network ready and kubelet the node Ready
  # (the scheduler places pods on Ready nodes only). Only host-network pods run: CNI is never
  # called, and its plugin binaries are not needed.
  echo '{"cniVersion": "1.0.0", "name": "pg-host-only", "plugins": [{"type": "loopback"}]}' > "$N/cni/conf/10-pg.conflist"
  # The node's bootstrap: kubelet's endpoint is pullgate's CRI socket, a link to containerd's
  # until pullgate runs.
  install -d -m 0700 "$N/run/pullgate"
  ln -s /run/containerd/containerd.sock "$N/run/pullgate/cri.sock"
  unshare --mount --propagation private -- bash -c "set -e
mount -t overlay overlay -o lowerdir=/etc,upperdir=$N/etc,workdir=$N/etc.work /etc
mount --bind $N/bin /usr/local/bin
mount --bind $N/run /run
mount --bind $N/varlib /var/lib
mount -t tmpfs tmpfs /var/log
$(kube_sysctl_binds "$WORK/sysctl")
touch $N/ns-ready
exec sleep 1000000" >>"$N/ns.log" 2>&1 &
  HOLDER[$n]=$!; PIDS+=($!); disown "$!"   # (its end, a SIGKILL at cleanup, is not reported)
  # What stands for the node's PID 1 to the installer (its PULLGATE_HOST_EXEC, below).
  echo "${HOLDER[$n]}" > "$N/run/pullgate/node.pid"
  wait_for 10 test -e "$N/ns-ready" || { echo "node $n: its mount namespace was not set up: $(cat "$N/ns.log")"; return 1; }
  node_containerd "$n" || return 1
  _NODE=$n _KEP=$kep
  launch_on_free_ports 2 _launch_node_kubelet || { echo "node $n: kubelet did not start:"; tail -30 "$N/kubelet.log"; return 1; }
}
_launch_node_kubelet() {
  local n=$_NODE N=$WORK/$_NODE
  { kubelet_config_common /run/pullgate/cri.sock; cat <<YAML
syncFrequency: 5s
featureGates:
  KubeletEnsureSecretPulledImages: $_KEP
YAML
  } > "$N/kubelet.yaml"
  node_exec "$n" "$KBIN/kubelet" --config "$N/kubelet.yaml" --kubeconfig "$WORK/kubeconfig" --hostname-override "pg-$n" \
    --v 2 >>"$N/kubelet.log" 2>&1 &
  echo $! > "$N/kubelet.pid"; PIDS+=($!); LAUNCHED+=($!)
  wait_serving 60 curl -sf "http://127.0.0.1:$PORT_2/healthz"
}
node_up a false || { fail "node a did not come up"; summary "e2e cluster (containerd $V)"; exit 1; }
node_up b true || { fail "node b did not come up"; summary "e2e cluster (containerd $V)"; exit 1; }
# ready ARGS...: the object `kubectl get ARGS` names has its condition Ready True (a node, a pod).
ready() { kc get "$@" -o json | jq -e '.status.conditions[] | select(.type == "Ready") | .status == "True"' >/dev/null; }
node_ready() { ready node "pg-$1"; }
for n in a b; do
  wait_for 90 node_ready "$n" && pass "node pg-$n registered and Ready ($(kc get node "pg-$n" -o jsonpath='{.status.nodeInfo.containerRuntimeVersion}'))" \
    || fail "node pg-$n not Ready: $(kc get node "pg-$n" -o json 2>&1 | jq -c '.status.conditions' 2>&1 | head -c 600)"
done

# ---- workloads ----
# pod NS NAME IMAGE POLICY NODE [SECRET]: a host-network pod for node pg-NODE (its nodeSelector:
# the scheduler places it), running the image's own command.
pod() {
  kc apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $2, namespace: $1}
spec:
  hostNetwork: true
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  nodeSelector: {kubernetes.io/hostname: pg-$5}
  ${6:+imagePullSecrets: [{name: $6\}]}
  containers:
  - {name: app, image: "$3", imagePullPolicy: $4}
YAML
}
namespace() { kc create namespace "$1" >/dev/null; }
# secret NS USER:PASS: NS's pull secret regcred for the private registry (created or replaced).
secret() {
  kc -n "$1" create secret docker-registry regcred --docker-server "$REG_t" --docker-username "${2%%:*}" \
    --docker-password "${2#*:}" --dry-run=client -o yaml | kc apply -f - >/dev/null
}
pod_running() { kc -n "$1" get pod "$2" -o json | jq -e '.status.containerStatuses[0].state.running' >/dev/null; }
cstate() { kc -n "$1" get pod "$2" -o json | jq -c '.status.containerStatuses[0].state // empty'; }
# pod_log NODE NS NAME [CONTAINER]: what the pod's container (app) printed, every run of it
# (kubelet's /var/log/pods on the node: the API server cannot reach kubelet's loopback port).
# NS and NAME may be glob patterns.
# shellcheck disable=SC2086
pod_log() { cat /proc/"${HOLDER[$1]}"/root/var/log/pods/$2_$3_*/${4:-app}/*.log 2>/dev/null; }
# printed NODE NS NAME TEXT: the pod's container printed TEXT.
printed() { local t; t=$(pod_log "$1" "$2" "$3"); grep -qF -- "$4" <<<"$t"; }
# wait_running NS NAME [SECONDS]: passes or fails "NS/NAME runs".
wait_running() {
  if wait_for "${3:-90}" pod_running "$1" "$2"; then return 0; fi
  echo "$1/$2 does not run: $(cstate "$1" "$2") $(kc -n "$1" get events --field-selector "involvedObject.name=$2" -o json | jq -r '.items[-3:][] | "\(.reason): \(.message)"' | head -c 600)"
  return 1
}
# Registry load: REGMARK marks the private registry's and token server's logs; load_since REPO
# prints what they served for REPO since (tests/regload.py: manifests, blobs, bytes, tokens).
mark_registry() { REGMARK="$(wc -l < "$WORK/registry-t/log") $(wc -l < "$WORK/registry-t/token.log")"; }
load_since() {
  local r t; read -r r t <<<"$REGMARK"
  python3 "$REPO/tests/regload.py" "$WORK/registry-t/log" "$r" "$WORK/registry-t/token.log" "$t" "$1"
}
# LOADS: one line per measured event: SETUP|EVENT|JSON. record_load SETUP EVENT JSON [PODS]: the
# JSON measured PODS pods (1).
LOADS=$WORK/loads
record_load() {
  local j; j=$(jq -c --argjson n "${4:-1}" '. + {pods: $n}' <<<"$3")
  echo "$1|$2|$j" >> "$LOADS"; echo "    registry load, $1, $2${4:+ ($4 pods)}: $3"
}
jget() { jq -r ".$2" <<<"$1"; }

log "0. the nodes without pullgate: containerd alone, kubelet's KEP-2535 on node b"
for ns in team-a team-b team-c; do namespace "$ns" || fail "create namespace $ns"; done
secret team-a "alice:$PW_ALICE" || fail "team-a's secret"
secret team-b "bob:$PW_BOB" || fail "team-b's secret"
mark_registry
pod team-a base1 "$BASE" IfNotPresent b regcred
check "team-a's pod of $BASE runs on node b" wait_running team-a base1
l=$(load_since base/app); record_load "containerd alone, kubelet KEP-2535" "first pull on a node" "$l"
check "the registry served the image's blobs for the first pull ($(jget "$l" blobs) blob GETs)" test "$(jget "$l" blobs)" -ge 3
mark_registry
pod team-b base1 "$BASE" IfNotPresent b regcred
check "team-b's pod (its own secret, IfNotPresent) runs on node b" wait_running team-b base1
l=$(load_since base/app); record_load "containerd alone, kubelet KEP-2535" "another tenant, image on the node" "$l"
check "kubelet's KEP-2535 pulled again for team-b: a manifest request, no blob" test "$(jget "$l" manifests)" -ge 1 -a "$(jget "$l" blobs)" = 0
mark_registry
pod team-a base2 "$BASE" IfNotPresent b regcred
check "team-a's second pod runs on node b" wait_running team-a base2
l=$(load_since base/app); record_load "containerd alone, kubelet KEP-2535" "same tenant, another pod" "$l"
mark_registry
pod team-a base3 "$BASE" Always b regcred
check "team-a's pod with imagePullPolicy Always (what AlwaysPullImages sets) runs on node b" wait_running team-a base3
l=$(load_since base/app); record_load "containerd alone, AlwaysPullImages" "every pod" "$l"
check "Always pulled: a manifest request, no blob" test "$(jget "$l" manifests)" -ge 1 -a "$(jget "$l" blobs)" = 0
# What pullgate is for: on node a (KEP-2535 off), a tenant without any secret runs a private
# image another tenant's pod brought to the node.
pod team-a base4 "$BASE" IfNotPresent a regcred
check "team-a's pod of $BASE runs on node a" wait_running team-a base4
pod team-c base1 "$BASE" IfNotPresent a
check "without pullgate, team-c's pod (no secret, IfNotPresent) runs team-a's private image on node a (KEP-2535 off)" wait_running team-c base1
wait_for 10 printed a team-c base1 "$BASEMSG"
check "and prints its private message" printed a team-c base1 "$BASEMSG"
kc delete pod -A --all --wait=false >/dev/null
no_pods() { [ "$(kc get pods -A -o json | jq '.items | length')" = 0 ]; }
wait_for 60 no_pods && pass "the baseline's pods are gone" || fail "pods left: $(kc get pods -A 2>&1)"

log "1. pullgate installed by its DaemonSet"
# The installer's image: the release tarball (scripts/release.sh, from this tree) unpacked at
# /opt/pullgate, on busybox (tests/mkimage.py's base) with the C library its binaries link, as a
# distribution's base image would carry it.
installer_image() {
  local rel=$WORK/release args=() f
  PULLGATE_RELEASE_DIR=$rel "$REPO/scripts/release.sh" >"$WORK/release.log" 2>&1 || { tail -20 "$WORK/release.log"; return 1; }
  tar -xzf "$rel"/pullgate-*-linux-*.tar.gz -C "$rel" || return 1
  REL=$(echo "$rel"/pullgate-*-linux-*/); REL=${REL%/}
  while read -r f; do
    args+=(--file "/opt/pullgate/$f=$REL/$f:$(stat -c %a "$REL/$f")")
  done < <(cd "$REL" && find . -type f | sed 's#^\./##' | sort)
  while read -r f; do
    args+=(--file "$f=$(readlink -f "$f"):755")
  done < <(ldd "$REL/pullgate" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\/.*\.so/ {print $1}' | sort -u)
  mk "$WORK/installer" --tag v1 --all-applets --message "pullgate installer" --cmd /opt/pullgate/plugin/daemonset/install.sh "${args[@]}"
}
installer_image && pass "the installer's image built from the release tarball ($(basename "$REL"))" || fail "build the installer's image"
INSTALLER=$REG_pub/pullgate/installer:$("$REL/pullgate" --version | awk '{print $2}')
push_image "$WORK/installer" v1 "$INSTALLER" || fail "push the installer's image"
# What the node's init system does when the installer asks (its restart command, below): systemd
# would start pullgate.service (the unit the installer placed: its ExecStart) and restart
# containerd. Here a loop per node, in the node's namespace.
# node_units NODE: (re)starts pullgate as its unit says (ExecStart; pullgate before containerd),
# then containerd.
node_units() {
  local n=$1 N=$WORK/$1 cmd
  stop_pidfile "$N/pullgate.pid"
  read -r -a cmd < <(sed -n 's/^ExecStart=//p' "$N/etc/systemd/system/pullgate.service")
  node_exec "$n" "${cmd[@]}" >>"$N/pullgate.log" 2>&1 &
  echo $! > "$N/pullgate.pid"
  wait_for 30 test -S "$N/run/pullgate/snapshotter.sock" && node_containerd "$n" && echo "started pullgate (${cmd[*]}) and containerd"
}
node_init() {
  local n=$1 N=$WORK/$1
  while sleep 0.5; do
    [ -e "$N/run/pullgate/restart-request" ] || continue
    node_units "$n" >>"$N/init.log" 2>&1
    rm -f "$N/run/pullgate/restart-request"
  done
}
for n in "${NODES[@]}"; do node_init "$n" & PIDS+=($!); done
RESTART='touch /run/pullgate/restart-request; while [ -e /run/pullgate/restart-request ]; do sleep 1; done'
# The shipped DaemonSet, but for the image, the restart command, where the node's containerd
# binary is and how to enter the node's mount namespace (the process that holds it stands for
# the node's PID 1); pullgate's config (the ConfigMap) with this run's registry trust and debug
# logs.
sed -e "s#image: registry.example/pullgate-installer:.*#image: $INSTALLER#" \
    -e "s#^          value: \"nsenter --target 1 --mount --uts .*#          value: '$RESTART'#" \
    -e "s#^          value: /usr/bin/containerd#          value: $BINDIR/containerd#" \
    -e "s#^          value: \"nsenter --target 1 --mount --\"#          value: 'nsenter --target \$(cat /run/pullgate/node.pid) --mount --'#" \
    -e '/name: PULLGATE_PULL_FLAGS/{n;s#value: ""#value: "--plain-http"#}' \
    -e "/name: PULLGATE_PRELOAD\$/{n;s#value: \"\"#value: \"$PRELOADED\"#}" \
    -e "s#^    containerd_address = \"/run/containerd/containerd.sock\"#&\n    log_level = \"debug\"\n\n    [registry]\n    hosts_dir = \"$HOSTS\"#" \
    "$REPO/plugin/daemonset/pullgate-installer.yaml" > "$WORK/installer.yaml"
check "the DaemonSet adapted: image, restart command, containerd's binary, the host's mount namespace, plain http for the sandbox image, an image to preload, registry trust (7 changes)" \
  test "$(diff "$REPO/plugin/daemonset/pullgate-installer.yaml" "$WORK/installer.yaml" | grep -c '^>')" = 10
check "the Secret of the preloaded image's credential (alice's)" \
  kc -n kube-system create secret docker-registry pullgate-preload-auth --docker-server "$REG_t" --docker-username alice --docker-password "$PW_ALICE"
sha_host_config=$(sha256sum /etc/containerd/config.toml 2>/dev/null)
check "kubectl apply the installer" kc apply -f "$WORK/installer.yaml"
ds_ready() { kc -n kube-system get ds pullgate-installer -o json | jq -e '.status.desiredNumberScheduled == 2 and .status.numberReady == 2' >/dev/null; }
if wait_for 180 ds_ready; then pass "the DaemonSet's pods are Ready on both nodes (installed: install.sh --check)"
else fail "the DaemonSet: $(kc -n kube-system get ds pullgate-installer -o json | jq -c .status) $(for n in "${NODES[@]}"; do pod_log "$n" kube-system 'pullgate-installer-*' install | tail -20; done | head -c 3000)"; fi
for n in "${NODES[@]}"; do
  N=$WORK/$n
  inst=$(kc -n kube-system get pods -l app.kubernetes.io/name=pullgate-installer --field-selector "spec.nodeName=pg-$n" -o name)
  check "one installer pod on node $n, placed there by the DaemonSet controller ($inst)" test "$(nlines "$inst")" = 1
  check "node $n: the release's binaries in its /usr/local/bin" cmp "$N/bin/pullgate" "$REL/pullgate"
  check "node $n: the unit in its /etc/systemd/system" cmp "$N/etc/systemd/system/pullgate.service" "$REL/plugin/pullgate.service"
  check "node $n: pullgate's config from the ConfigMap in its /etc/pullgate" grep -q "hosts_dir = \"$HOSTS\"" "$N/etc/pullgate/config.toml"
  check "node $n: containerd's config merged (its backup kept beside it)" \
    bash -c "grep -q '^\[proxy_plugins.pullgate\]' '$N/etc/containerd/config.toml' && test -f '$N/etc/containerd/config.toml.pullgate-backup'"
  check "node $n: the bootstrap link replaced by pullgate's CRI socket" test -S "$N/run/pullgate/cri.sock" -a ! -L "$N/run/pullgate/cri.sock"
  check_out "node $n: its init loop started pullgate and restarted containerd once" "started pullgate" cat "$N/init.log"
  check_out "node $n: pullgate serves (its API lists namespace k8s.io's grants)" NAMESPACE "$PG_BIN" --address "$N/run/pullgate/api.sock" grants -n k8s.io
  check_out "node $n: the installer's log shows the installation" "pullgate-installer on pg-$n: installed pullgate" pod_log "$n" kube-system "${inst#pod/}" install
  check_out "node $n: the installer found the sandbox image in containerd's config as read on the node$([ "$n" = a ] && [ "${V%%.*}" = 2 ] && echo ", in a file it imports from outside /etc/containerd")" \
    "the sandbox image $PAUSE pulled through pullgate" pod_log "$n" kube-system "${inst#pod/}" install
  check_out "node $n: the installer marked the operator's image preloaded in k8s.io" "private/preloaded:v1" "$PG_BIN" --address "$N/run/pullgate/api.sock" preload --list -n k8s.io
  check_out "node $n: its log says so" "$PRELOADED marked preloaded in k8s.io" pod_log "$n" kube-system "${inst#pod/}" install
  check_out "node $n: and that the ConfigMap's policy (AlwaysVerify) does not count marks" \
    "the policy is AlwaysVerify: the mark counts only under NeverVerifyPreloadedImages" pod_log "$n" kube-system "${inst#pod/}" install
done
# The installer again on an installed node (its pod deleted: the controller makes another):
# nothing to place, merge or restart.
# installer_a: the name of node a's installer pod; installer_a_ready OLD: another than OLD is Ready.
installer_a() { kc -n kube-system get pods -l app.kubernetes.io/name=pullgate-installer --field-selector spec.nodeName=pg-a -o jsonpath='{.items[*].metadata.name}'; }
installer_a_ready() {
  local p; p=$(installer_a) && [ -n "$p" ] && [ "$p" != "$1" ] && ready -n kube-system pod "$p"
}
# replace_installer_a: deletes node a's installer pod; passes when the controller's new one is Ready.
replace_installer_a() {
  local old; old=$(installer_a)
  kc -n kube-system delete pod "$old" --wait=true --timeout 60s >/dev/null && wait_for 120 installer_a_ready "$old"
}
check "node a's installer pod deleted: the controller's new one is Ready" replace_installer_a
inst=pod/$(installer_a)
check_out "its log: containerd's config already merged" "already has pullgate's settings" pod_log a kube-system "${inst#pod/}" install
check "and node a was not restarted again (its init loop acted once, containerd started twice in all)" \
  test "$(grep -c 'started pullgate' "$WORK/a/init.log") $(grep -c 'msg="starting containerd"' "$WORK/a/containerd.log")" = "1 2"
PENDING=/etc/pullgate/.installer-restart-pending
check "no restart left pending on node a (the installer's marker)" in_node a test ! -e "$PENDING"
# A change an earlier pod made but did not get to restart on (its marker on the node): the next
# pod restarts.
in_node a touch "$PENDING"
check "node a's installer pod deleted again, with a restart pending: the new one is Ready" replace_installer_a
check "and it restarted node a's pullgate and containerd once more, the marker gone" \
  test "$(grep -c 'started pullgate' "$WORK/a/init.log") $(in_node a test -e "$PENDING" && echo left || echo gone)" = "2 gone"
check "the machine's own /etc/containerd/config.toml untouched" test "$(sha256sum /etc/containerd/config.toml 2>/dev/null)" = "$sha_host_config"
for n in "${NODES[@]}"; do
  wait_for 60 node_ready "$n" && pass "node pg-$n Ready again, its runtime now reached through pullgate's front" || fail "node pg-$n not Ready after the installation"
done

# ---- pullgate's scenarios ----
pg_on() { local n=$1; shift; "$PG_BIN" --address "$WORK/$n/run/pullgate/api.sock" "$@"; }
# grant_for NODE NS: node NODE's pullgate lists a grant of $APP's repository to principal NS.
grant_for() { local l; l=$(pg_on "$1" grants -n k8s.io) || return 2; grep -F "${APP%:*}" <<<"$l" | grep -qw -- "$2"; }
# no_grant_for NODE NS: the listing worked, and shows no such grant (a failed listing fails).
no_grant_for() {
  local l; l=$(pg_on "$1" grants -n k8s.io 2>&1) || { echo "pullgate grants on node $1 failed: $(head -c 300 <<<"$l")"; return 1; }
  ! grep -F "${APP%:*}" <<<"$l" | grep -qw -- "$2"
}
# direct NODE ARGS...: crictl against the node's containerd itself (not through pullgate).
direct() { "$CRICTL_BIN" --runtime-endpoint "unix://$WORK/$1/run/containerd/containerd.sock" "${@:2}"; }
# containers_of NODE NS [POD]: how many containers (any state) the node's containerd has for pods
# of NS (named POD).
containers_of() {
  local l; l=$(listing direct "$1" ps -a --label "io.kubernetes.pod.namespace=$2" ${3:+--label "io.kubernetes.pod.name=$3"} -q) || return 1
  nlines "$l"
}
deployment() {
  kc apply -f - >/dev/null <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: team-a}
spec:
  replicas: $1
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      hostNetwork: true
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 1
      imagePullSecrets: [{name: regcred}]
      # One node's share at most one more than the other's; a cordoned node does not count.
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, nodeTaintsPolicy: Honor,
         labelSelector: {matchLabels: {app: app}}}
      containers:
      - {name: app, image: "$APP", imagePullPolicy: Always}
YAML
}
available() { kc -n team-a get deploy app -o json | jq -e --argjson n "$1" '.status.availableReplicas == $n and .status.replicas == $n' >/dev/null; }
# app_pods_on NODE: how many of the Deployment's pods run on node NODE.
app_pods_on() { kc -n team-a get pods -l app=app -o json | jq --arg n "pg-$1" '[.items[] | select(.spec.nodeName == $n and .status.phase == "Running" and .metadata.deletionTimestamp == null)] | length'; }
pull_lines() { grep -c "CRI PullImage.*principal=$2" "$WORK/$1/pullgate.log"; }

log "2. a Deployment of team-a's private image (imagePullSecrets, Always) over both nodes"
mark_registry
deployment 1 || fail "create team-a's Deployment"
wait_for 90 available 1 && pass "team-a's Deployment has its first pod available" || fail "team-a's Deployment: $(kc -n team-a get pods -o wide 2>&1)"
first=$(kc -n team-a get pods -l app=app -o jsonpath='{.items[0].spec.nodeName}'); first=${first#pg-}
other=$([ "$first" = a ] && echo b || echo a)
l=$(load_since private/app); record_load pullgate "first pull on a node" "$l"
check "the scheduler placed it on a node (pg-$first); the registry served the whole image there ($(jget "$l" blobs) blob GETs)" test "$(jget "$l" blobs)" -ge 6
check "node $first's pullgate granted team-a" grant_for "$first" team-a
check "and node $other's has no grant yet" no_grant_for "$other" team-a
mark_registry
deployment 2
wait_for 90 available 2 && pass "scaled to 2: available" || fail "scaled to 2: $(kc -n team-a get pods -o wide 2>&1)"
check "the second pod went to the other node (the spread constraint): one pod on each" test "$(app_pods_on a) $(app_pods_on b)" = "1 1"
l=$(load_since private/app); record_load pullgate "first pull on a node" "$l"
check "node $other pulled the whole image once ($(jget "$l" blobs) blob GETs)" test "$(jget "$l" blobs)" -ge 6
check "node $other's pullgate granted team-a on its own" grant_for "$other" team-a
mark_registry
deployment 4
wait_for 90 available 4 && pass "scaled to 4: available" || fail "scaled to 4: $(kc -n team-a get pods -o wide 2>&1)"
check "two pods on each node" test "$(app_pods_on a) $(app_pods_on b)" = "2 2"
l=$(load_since private/app); record_load pullgate "every pod (Always), image and grant on the node" "$l" 2
check "the two new pods (one per node) cost the registry one manifest each ($(jget "$l" manifests_ok) answered) and no blob" \
  test "$(jget "$l" manifests_ok) $(jget "$l" blobs)" = "2 0"
for n in "${NODES[@]}"; do
  wait_for 20 printed "$n" team-a 'app-*' "$APPMSG"
  check "node $n: team-a's containers printed the image's message" printed "$n" team-a 'app-*' "$APPMSG"
done

log "2b. team-b, without the secret (IfNotPresent), on each node: refused"
pod team-b nosecret-a "$APP" IfNotPresent a
pod team-b nosecret-b "$APP" IfNotPresent b
# refused NAME: the pod's container waits with pullgate's refusal in its status.
refused() { cstate team-b "$1" | grep -qF 'pullgate'; }
# says TEXT ERE FIXED: TEXT matches the ERE and contains FIXED.
says() { grep -qE -- "$2" <<<"$1" && grep -qF -- "$3" <<<"$1"; }
wait_for 90 refused nosecret-a; st=$(cstate team-b nosecret-a)
check "node a (kubelet's KEP-2535 off: the image counts as present): CreateContainerError with pullgate's refusal ($(shown 300 "$st"))" \
  says "$st" CreateContainerError "$REFUSED team-b/nosecret-a"
wait_for 90 refused nosecret-b; st=$(cstate team-b nosecret-b)
check "node b (KEP-2535 on: kubelet pulls with the pod's credentials, none): the pull refused, pullgate's message in the status ($(shown 300 "$st"))" \
  says "$st" 'ErrImagePull|ImagePullBackOff' "pullgate: pull of $APP for principal \\\"team-b\\\""

for n in "${NODES[@]}"; do
  check "node $n: containerd has no container of team-b" is_zero containers_of "$n" team-b
  check "node $n: nothing of the image in team-b's pod log" not grep -qF "$APPMSG" <<<"$(pod_log "$n" team-b "nosecret-$n")"
  check "node $n: no grant for team-b" no_grant_for "$n" team-b
done
# An image a tenant's pod pulled on node a before pullgate was installed (team-a's $BASE, part 0):
# pullgate never saw it pulled.
pod team-b before-a "$BASE" IfNotPresent a
wait_for 90 refused before-a; st=$(cstate team-b before-a)
check "node a: team-b's pod of the image team-a pulled there before pullgate was installed is refused ($(shown 300 "$st"))" \
  says "$st" CreateContainerError "$REFUSED team-b/before-a"
check "and it has no container" is_zero containers_of a team-b before-a
check "nothing of that image in its log" not printed a team-b before-a "$BASEMSG"
if [ "$V" != 1.7 ]; then   # (image volumes: containerd 2.1 and later)
  kc apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: volume-a, namespace: team-b}
spec:
  hostNetwork: true
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  nodeSelector: {kubernetes.io/hostname: pg-a}
  containers:
  - {name: app, image: "$PAUSE", command: ["sh", "-c", "cat /v/msg; sleep 100000"], volumeMounts: [{name: v, mountPath: /v}]}
  volumes:
  - {name: v, image: {reference: "$BASE", pullPolicy: IfNotPresent}}
YAML
  wait_for 90 refused volume-a; st=$(cstate team-b volume-a)
  check "node a: nor may team-b mount that image as an image volume (a public image as its container) ($(shown 300 "$st"))" \
    says "$st" CreateContainerError "$REFUSED team-b/volume-a"
  check "and that pod has no container" is_zero containers_of a team-b volume-a
  check "nothing of the image in its log" not printed a team-b volume-a "$BASEMSG"
fi
kc -n team-b delete pod nosecret-a nosecret-b before-a volume-a --ignore-not-found --wait=false >/dev/null

log "2b'. node b boots again: the bootstrap link is made again at its path, pullgate replaces it"
stop_pidfile "$WORK/b/pullgate.pid"; stop_pidfile "$WORK/b/containerd.pid"
ln -s /run/containerd/containerd.sock "$WORK/b/run/pullgate/cri.sock"   # (as systemd-tmpfiles would at boot)
check_out "node b's pullgate (its unit's command) and containerd start" "started pullgate" node_units b
check "its CRI socket is pullgate's socket again, not the link" test -S "$WORK/b/run/pullgate/cri.sock" -a ! -L "$WORK/b/run/pullgate/cri.sock"
check_out "pullgate's log says it replaced the bootstrap link" "replaced the link at the socket's path" cat "$WORK/b/pullgate.log"
wait_for 60 node_ready b && pass "node b Ready" || fail "node b not Ready after its runtime started again"

log "2c. team-c, its own secret, IfNotPresent, on node b where the image is: one verification"
token_acl t "acl['users']['carol'] = '$PW_CAROL'; acl['access']['carol'] = ['private/*']"
secret team-c "carol:$PW_CAROL"
mark_registry
pod team-c own1 "$APP" IfNotPresent b regcred
check "team-c's pod runs on node b" wait_running team-c own1
l=$(load_since private/app); record_load pullgate "another tenant, image on the node" "$l"
check "kubelet's KEP-2535 pulled with team-c's secret; pullgate verified at the origin without a download ($(jget "$l" manifests_ok) manifests answered, $(jget "$l" blobs) blobs)" \
  test "$(jget "$l" manifests_ok) $(jget "$l" blobs)" = "1 0"
check "node b granted team-c" grant_for b team-c
mark_registry
pod team-c own2 "$APP" IfNotPresent b regcred
check "team-c's second pod runs on node b" wait_running team-c own2
l=$(load_since private/app); record_load pullgate "same tenant, another pod" "$l"
check "at no cost to the registry" test "$(jget "$l" requests)" = 0

log "2d. node a drained: its pods come up on node b and verify there"
pulls_before=$(pull_lines b team-a)
mark_registry
check "kubectl drain pg-a" kc drain pg-a --ignore-daemonsets --force --grace-period 1 --timeout 120s
moved() { available 4 && [ "$(app_pods_on b)" = 4 ]; }
wait_for 120 moved && pass "team-a's 4 pods run on node b" || fail "after the drain: $(kc -n team-a get pods -o wide 2>&1)"
check "node b's pullgate saw a PullImage of team-a for each moved pod ($(( $(pull_lines b team-a) - pulls_before )))" test "$(( $(pull_lines b team-a) - pulls_before ))" -ge 2
l=$(load_since private/app)
check "the registry served the moved pods a manifest each and no blob ($(jget "$l" manifests_ok) manifests answered, $(jget "$l" blobs) blobs)" \
  test "$(jget "$l" manifests_ok) $(jget "$l" blobs)" = "2 0"
check "kubectl uncordon pg-a" kc uncordon pg-a

log "2e. team-a's credential revoked at the registry: new pods fail on every node, running ones keep running"
restarts() { kc -n team-a get pods -l app=app -o json | jq '[.items[].status.containerStatuses[0].restartCount] | add'; }
token_acl t "acl['users']['alice'] = '$PW_ALICE2'"
pod team-a rotated-a "$APP" Always a regcred
pod team-a rotated-b "$APP" Always b regcred
pull_refused() { cstate team-a "$1" | grep -qE 'ErrImagePull|ImagePullBackOff'; }
for n in "${NODES[@]}"; do
  wait_for 90 pull_refused "rotated-$n" && pass "node $n: the new pod's pull is refused ($(shown 200 "$(cstate team-a "rotated-$n")"))" \
    || fail "node $n: the new pod with the revoked credential: $(cstate team-a "rotated-$n")"
  check "node $n: and it has no container" is_zero containers_of "$n" team-a "rotated-$n"
done
check "the Deployment's 4 pods still run, never restarted" test "$(kc -n team-a get deploy app -o jsonpath='{.status.availableReplicas}') $(restarts)" = "4 0"
secret team-a "alice:$PW_ALICE2"
kc -n team-a delete pod rotated-a rotated-b --wait=true --timeout 60s >/dev/null
pod team-a rotated-a "$APP" Always a regcred
pod team-a rotated-b "$APP" Always b regcred
for n in "${NODES[@]}"; do check "node $n: with the secret updated, a new pod runs" wait_running team-a "rotated-$n"; done

log "2e'. reverify_after: an IfNotPresent pod on a grant the node holds runs until the grant ages out, then pullgate refuses it"
# On node a kubelet's KEP-2535 is off: an IfNotPresent pod of an image on the node is never
# pulled, and only pullgate's grant decides. The operator sets [policy] reverify_after in the
# ConfigMap and rolls the DaemonSet, as docs/cluster.md says.
AGE=25
# set_reverify AGE: the ConfigMap's pullgate config with [policy] reverify_after = AGE.
set_reverify() {
  local cm; cm=$(kc -n kube-system get configmap pullgate-config -o json) || return 1
  cm=$(jq --arg age "$1" '.data["config.toml"] |= sub("\\[policy\\]\n"; "[policy]\nreverify_after = \"" + $age + "\"\n")' <<<"$cm") || return 1
  grep -qF "reverify_after = \\\"$1\\\"" <<<"$cm" || { echo "the ConfigMap has no [policy] table to set it in"; return 1; }
  kc replace -f - >/dev/null <<<"$cm"
}
check "the ConfigMap sets reverify_after = \"${AGE}s\"" set_reverify "${AGE}s"
# The installer pulls the preloaded image with the Secret pullgate-preload-auth: alice's password
# changed in 2e, and the operator updates that Secret too (or the new installer pods fail).
preload_secret() {
  kc -n kube-system create secret docker-registry pullgate-preload-auth --docker-server "$REG_t" --docker-username alice \
    --docker-password "$1" --dry-run=client -o yaml | kc apply -f - >/dev/null
}
check "the preload Secret holds alice's new password" preload_secret "$PW_ALICE2"
check "kubectl rollout restart of the installer's DaemonSet" kc -n kube-system rollout restart daemonset/pullgate-installer
rolled() {
  kc -n kube-system rollout status daemonset/pullgate-installer --timeout 240s && return 0
  kc -n kube-system get pods -l app.kubernetes.io/name=pullgate-installer -o json \
    | jq -c '.items[] | {node: .spec.nodeName, state: .status.containerStatuses[0].state, ready: .status.containerStatuses[0].ready}'
  return 1
}
check "the rollout completes on both nodes" rolled
for n in "${NODES[@]}"; do
  check "node $n: pullgate's config now holds reverify_after" grep -q "^reverify_after = \"${AGE}s\"" "$WORK/$n/etc/pullgate/config.toml"
  wait_for 90 node_ready "$n" && pass "node pg-$n Ready" || fail "node pg-$n not Ready after the rollout"
done
# A pull of team-a's credential renews node a's grant (Always); a pod IfNotPresent right after
# runs on it without a pull; one created once the grant is older than reverify_after does not.
pod team-a renew-a "$APP" Always a regcred
check "team-a's pod (Always) runs on node a, renewing its grant" wait_running team-a renew-a
renewed=$(date +%s); pulls_a=$(pull_lines a team-a)
pod team-a young-a "$APP" IfNotPresent a regcred
check "team-a's pod IfNotPresent on node a runs on the fresh grant" wait_running team-a young-a
check "with no pull on node a (kubelet's KEP-2535 is off there)" test "$(pull_lines a team-a)" = "$pulls_a"
sleep $(( renewed + AGE + 5 - $(date +%s) > 0 ? renewed + AGE + 5 - $(date +%s) : 0 ))
aged_refused() { cstate team-a aged-a | grep -qF 'pullgate'; }
pod team-a aged-a "$APP" IfNotPresent a regcred
wait_for 90 aged_refused; st=$(cstate team-a aged-a)
check "once the grant is older than reverify_after, the IfNotPresent pod is refused with pullgate's reason ($(shown 300 "$st"))" \
  says "$st" CreateContainerError "the grant for it is older than reverify_after"
check "and it has no container" is_zero containers_of a team-a aged-a
check "nothing of the image in its log" not printed a team-a aged-a "$APPMSG"
check "kubelet did not pull for it: pullgate alone decided" test "$(pull_lines a team-a)" = "$pulls_a"
check "the pods that run keep running (young-a)" pod_running team-a young-a
kc -n team-a delete pod renew-a young-a aged-a --ignore-not-found --wait=false >/dev/null

log "2f. kubelet's own KEP-2535: on on node b, off on node a"
# records NODE: the pull records kubelet kept (none when it never made their directory; a listing
# that fails says so instead of a number).
records() {
  local d=$WORK/$1/varlib/kubelet/image_manager/pulled l
  [ -e "$d" ] || { echo 0; return; }
  l=$(listing ls "$d") || { echo "listing $d failed"; return 1; }
  nlines "$l"
}
check "node b's kubelet kept pull records ($(records b))" test "$(records b)" -gt 0
check "node a's kubelet kept none" test "$(records a)" = 0
# Every file of both nodes: pullgate's root, config and log, containerd's root, state and log,
# kubelet's files and logs; not the Secret volumes kubelet mounts for pods (the installer's
# preload credentials are there by design), nor containers' root filesystems.
PATS=$WORK/secret-patterns
secret_patterns "$PATS" "alice:$PW_ALICE" "alice:$PW_ALICE2" "bob:$PW_BOB" "carol:$PW_CAROL"
scanned=$(find "$WORK/a" "$WORK/b" \( -name 'kubernetes.io~secret' -o -name rootfs \) -prune -o -type f -print | wc -l)
leak=$(grep -rlaF -D skip --exclude-dir='kubernetes.io~secret' --exclude-dir=rootfs -f "$PATS" "$WORK/a" "$WORK/b" 2>/dev/null | head -5)
check "no password of any secret, nor its Basic form, in any file of either node ($scanned files; found in: ${leak:-none})" \
  test "$scanned" -gt 100 -a -z "$leak"

log "registry load per day at scale, priced at this run's measurements (tests/regload.py --table)"
table=$(python3 "$REPO/tests/regload.py" --table "$LOADS") && echo "$table" || fail "the registry-load table: $table"
check "the table prices the four setups" test "$(grep -c '^| [cp]' <<<"$table")" = 4

summary "e2e cluster (containerd $V)"
