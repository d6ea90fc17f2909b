# A Kubernetes control plane for pullgate's kubelet and cluster tests (sourced, bash, after
# tests/lib.sh): etcd (Debian's) and kube-apiserver from KBIN (scripts/setup.sh builds it from
# k8s.io/kubernetes), token authentication, every request allowed, no ServiceAccount admission
# (pods carry no service-account token: kubelet runs in a mount namespace of its own, where a
# token's tmpfs would not reach containerd), the loopback address advertised, so no endpoint
# reconciler (it refuses loopback addresses). Everything under $WORK/apiserver, $WORK/etcd.
K8S_VERSION=${K8S_VERSION:-v1.37.2}
KBIN=${KBIN:-$DEPS/kubernetes-$K8S_VERSION}

# kube_sysctl_files DIR: the kernel tunables kubelet sets at start unless they already hold its
# values (kubelet's setupKernelTunables), as files with those values under DIR, for binding over
# /proc/sys in kubelet's mount namespace (kubelet then changes no sysctl of the machine).
KUBE_SYSCTLS="vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000"
kube_sysctl_files() {
  local kv
  for kv in $KUBE_SYSCTLS; do
    mkdir -p "$(dirname "$1/${kv%%=*}")"; echo "${kv#*=}" > "$1/${kv%%=*}"
  done
}
# kube_sysctl_binds DIR: the shell lines (for a mount namespace's set-up script) that bind
# kube_sysctl_files DIR over /proc/sys.
kube_sysctl_binds() {
  local kv
  for kv in $KUBE_SYSCTLS; do printf 'mount --bind %q /proc/sys/%s\n' "$1/${kv%%=*}" "${kv%%=*}"; done
}

# kubelet_config_common CRI_SOCKET: the start of a KubeletConfiguration for these machines: CRI
# at CRI_SOCKET, cgroupfs without QoS cgroups or node allocatable (containerd's runc shim uses
# cgroupfs), no iptables chains, swap and cgroup v1 tolerated, kubelet's server and healthz on
# 127.0.0.1 ports PORT_1 and PORT_2 (launch_on_free_ports), anonymous requests allowed.
kubelet_config_common() {
  cat <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$1
imageServiceEndpoint: unix://$1
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
makeIPTablesUtilChains: false
address: 127.0.0.1
port: $PORT_1
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $PORT_2
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
YAML
}

# start_control_plane [APISERVER_FLAGS...]: etcd and kube-apiserver; sets ETCD, API, KTOKEN (the
# admin's bearer token) and writes $WORK/kubeconfig (that token). Returns 1 (and says why) when
# one of them does not start.
start_control_plane() {
  _KAPI_FLAGS=("$@")
  launch_on_free_ports 2 _launch_etcd || { echo "etcd did not start: $(tail -5 "$WORK/etcd.log")"; return 1; }
  ETCD=http://127.0.0.1:$PORT_1
  KTOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  mkdir -p "$WORK/apiserver"
  echo "$KTOKEN,admin,admin,system:masters" > "$WORK/apiserver/tokens.csv"
  openssl genrsa -out "$WORK/apiserver/sa.key" 2048 2>/dev/null
  launch_on_free_ports 1 _launch_apiserver || { echo "kube-apiserver did not start: $(grep -E '^[EF]' "$WORK/apiserver/log" | tail -5)"; return 1; }
  API=https://127.0.0.1:$PORT_1
  cat > "$WORK/kubeconfig" <<YAML
apiVersion: v1
kind: Config
clusters: [{name: pg, cluster: {server: "$API", insecure-skip-tls-verify: true}}]
users: [{name: admin, user: {token: "$KTOKEN"}}]
contexts: [{name: pg, context: {cluster: pg, user: admin}}]
current-context: pg
YAML
}
_launch_etcd() {
  etcd --name pg --data-dir "$WORK/etcd" --listen-client-urls "http://127.0.0.1:$PORT_1" --advertise-client-urls "http://127.0.0.1:$PORT_1" \
    --listen-peer-urls "http://127.0.0.1:$PORT_2" --initial-advertise-peer-urls "http://127.0.0.1:$PORT_2" \
    --initial-cluster "pg=http://127.0.0.1:$PORT_2" >>"$WORK/etcd.log" 2>&1 &
  PIDS+=($!); LAUNCHED+=($!)
  wait_serving 30 curl -sf "http://127.0.0.1:$PORT_1/health"
}
_launch_apiserver() {
  "$KBIN/kube-apiserver" --etcd-servers "$ETCD" --bind-address 127.0.0.1 --secure-port "$PORT_1" --advertise-address 127.0.0.1 \
    --endpoint-reconciler-type none --cert-dir "$WORK/apiserver/certs" --token-auth-file "$WORK/apiserver/tokens.csv" \
    --authorization-mode AlwaysAllow --disable-admission-plugins ServiceAccount \
    --service-account-key-file "$WORK/apiserver/sa.key" --service-account-signing-key-file "$WORK/apiserver/sa.key" \
    --service-account-issuer https://kubernetes.default.svc "${_KAPI_FLAGS[@]}" >>"$WORK/apiserver/log" 2>&1 &
  PIDS+=($!); LAUNCHED+=($!)
  wait_serving 120 curl -skf -H "Authorization: Bearer $KTOKEN" "https://127.0.0.1:$PORT_1/readyz"
}
# kapi METHOD PATH [JSON]: the API server's answer (JSON); fails on an HTTP error.
kapi() { curl -skf -X "$1" -H "Authorization: Bearer $KTOKEN" -H 'Content-Type: application/json' ${3:+--data-binary "$3"} "$API$2"; }
# dockercfg REGISTRY USER:PASS: a kubernetes.io/dockerconfigjson secret's data, base64.
dockercfg() { printf '{"auths": {"%s": {"auth": "%s"}}}' "$1" "$(printf '%s' "$2" | base64 -w0)" | base64 -w0; }
