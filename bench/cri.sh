#!/usr/bin/env bash
# Benchmark of the CRI front, side by side in one run on one containerd (default 2.1) with its
# CRI plugin and pullgate as its only snapshotter: kubelet's PullImage of a private image that is
# already on the node (another Kubernetes namespace pulled it), for a Kubernetes namespace that
# has not pulled it yet, sent
#   - through pullgate's CRI front (re-authenticates at the origin, records the namespace's
#     grant; the image's blobs and unpacked layers are reused), and
#   - straight to containerd's CRI (which also re-resolves the manifest and trusts the cached
#     blobs, but records nothing and so protects nothing);
# plus, for scale, the first pull of the image (which downloads it) through the front.
# Time per call (the CRI client's process included) and bytes served by the registry and its
# token server. The image is private (token-auth registry), 6 layers of 20 MB plus a base.
# Usage: sudo bench/cri.sh [VERSION]   (REPS overrides the repetitions)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/bench/lib.sh"
source "$here/tests/cri_lib.sh"
set +e
V=${1:-2.1}
PG_LOG_LEVEL=info
REPS=${REPS:-5}
PW=bench-Secret-3k9d

python3 "$REPO/tests/mkimage.py" "$WORK/img" --tag v1 --extra-layers 6 --layer-mb 20 --seed 5 --message "bench app" >/dev/null
python3 "$REPO/tests/mkimage.py" "$WORK/pause" --tag v1 --message pause --cmd "sleep 100000" >/dev/null
size=$(du -sm "$WORK/img/blobs" | cut -f1)
cat > "$WORK/acl.json" <<JSON
{"users": {"alice": "$PW", "admin": "$PW"}, "access": {"alice": ["private/*"], "admin": ["*"]}, "push": ["admin"]}
JSON
start_registry pub >/dev/null
# The private image's registry serves TLS (use_tls_registries): pullgate spares a download only
# where it verified the registry.
use_tls_registries >/dev/null || exit 1
start_token_registry t "$WORK/acl.json" >/dev/null
IMG=$REG_t/private/bench:v1
push_image "$WORK/img" v1 "$IMG" "admin:$PW"
push_image "$WORK/pause" v1 "$REG_pub/k8s/pause:v1"
HOSTS=$WORK/hosts
write_hosts_toml "$HOSTS" "$REG_t"; write_hosts_toml "$HOSTS" "$REG_pub"
PG=$WORK/pullgate
pullgate_cri_config "$PG" "$HOSTS"
start_pullgate "$PG" >/dev/null
start_containerd_cri "$V" "$PG/snapshotter.sock" "$REG_pub/k8s/pause:v1" "$HOSTS" >/dev/null || exit 1
front() { "$CRI_BIN" --socket "$PG/cri.sock" "$@"; }
direct() { "$CRI_BIN" --socket "$CTRD_SOCK" "$@"; }
AUTH="\"auth\":{\"username\":\"alice\",\"password\":\"$PW\"}"
pull() { # pull VIA NAMESPACE
  "$1" --pod "app:$2:uid-$2" PullImage "{\"image\":{\"image\":\"$IMG\"},$AUTH}" >/dev/null || echo "PullImage via $1 for $2 failed" >&2
}
nlayers=$(python3 -c "import json; i=json.load(open('$WORK/img/index.json')); d=i['manifests'][0]['digest'].split(':')[1]; print(len(json.load(open('$WORK/img/blobs/sha256/'+d))['layers']))")
echo "image: $nlayers layers, ${size} MB compressed, private on a token-auth registry; containerd $V with CRI"

declare -A T B
read -r m1 m2 < <(marks); t0=$EPOCHREALTIME
pull front team-first
t1=$EPOCHREALTIME; T[first]=$(elapsed "$t0" "$t1"); B[first]=$(registry_bytes "$m1" "$m2")
for rep in $(seq 1 "$REPS"); do
  read -r m1 m2 < <(marks); t0=$EPOCHREALTIME
  pull front "team-f$rep"
  t1=$EPOCHREALTIME; T[front]+="$(elapsed "$t0" "$t1") "; B[front]+="$(registry_bytes "$m1" "$m2") "
  read -r m1 m2 < <(marks); t0=$EPOCHREALTIME
  pull direct "team-d$rep"
  t1=$EPOCHREALTIME; T[direct]+="$(elapsed "$t0" "$t1") "; B[direct]+="$(registry_bytes "$m1" "$m2") "
done
tf=$(med "${T[front]}"); td=$(med "${T[direct]}")
printf '| %-62s | %9s | %12s |\n' "PullImage of a cached private image, new namespace ($REPS runs, median)" "time" "bytes served"
printf '|%s|%s|%s|\n' "----------------------------------------------------------------" "-----------" "--------------"
printf '| %-62s | %7.3f s | %12s |\n' "through pullgate's CRI front (verified, grant recorded)" "$tf" "$(med "${B[front]}")"
printf '| %-62s | %7.3f s | %12s |\n' "straight to containerd's CRI (nothing verified or recorded)" "$td" "$(med "${B[direct]}")"
printf '| %-62s | %7.3f s | %12s |\n' "for scale: the first pull through the front (downloads)" "${T[first]}" "${B[first]}"
printf 'front / straight: time %.2f, bytes %.2f\n' "$(echo "$tf / $td" | bc -l)" "$(echo "$(med "${B[front]}") / $(med "${B[direct]}")" | bc -l)"
