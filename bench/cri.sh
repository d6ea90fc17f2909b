#!/usr/bin/env bash
# Benchmark of the CRI front, side by side in one run on one containerd (default 2.1) with its
# CRI plugin and pullgate as its only snapshotter: kubelet's PullImage of a private image that is
# already on the node (another Kubernetes namespace pulled it), for a Kubernetes namespace that
# has not pulled it yet, sent
#   - through pullgate's CRI front (re-authenticates at the origin, records the namespace's
#     grant; the image's blobs and unpacked layers are reused), and
#   - straight to containerd's CRI (which also re-resolves the manifest and trusts the cached
#     blobs, but records nothing and so protects nothing);
# plus, for scale, the first pull of the image (which downloads it) through the front. Then
# CreateContainer:
#   - of the private image for a pod whose namespace verified it, through the front;
#   - of a public image, through the front and straight to containerd's CRI, with the image's
#     own names and then with 5,000 more names on it (what a tenant's pulls of the same manifest
#     under names of its own leave): the time, the containerd calls the front's decision made
#     (counted by pullgate), and the ratios;
#   - a whole pod start of the public image as kubelet makes one, through the front and straight.
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
MPORT=$(free_port)
printf '\n[metrics]\naddress = "127.0.0.1:%s"\n' "$MPORT" >> "$PG/config.toml"
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

# CreateContainer: REPS containers of IMAGE in pod SID of NAMESPACE via VIA, each removed after,
# as kubelet creates one: after an (untimed) ImageStatus of the image, by the image's ID with
# the pod's own name for it; prints the times.
creates() { # creates VIA NAMESPACE SID IMAGE TAG
  local out cid t0 t1 times="" id
  for rep in $(seq 1 "$REPS"); do
    id=$("$1" ImageStatus "{\"image\":{\"image\":\"$4\"}}" | sed -n 's/.*"id":"\(sha256:[0-9a-f]*\)".*/\1/p')
    t0=$EPOCHREALTIME
    out=$("$1" --pod "app:$2:uid-$2" CreateContainer "{\"pod_sandbox_id\":\"$3\",\"config\":{\"metadata\":{\"name\":\"$5-$rep\"},\"image\":{\"image\":\"$id\",\"user_specified_image\":\"$4\"},\"command\":[\"/bin/sh\",\"-c\",\"true\"],\"log_path\":\"c.log\"}}" 2>&1) \
      || echo "CreateContainer via $1 for $2 failed: $out" >&2
    t1=$EPOCHREALTIME; times+="$(elapsed "$t0" "$t1") "
    cid=$(sed -n 's/.*"container_id":"\([0-9a-f]*\)".*/\1/p' <<<"$out")
    [ -n "$cid" ] && direct RemoveContainer "{\"container_id\":\"$cid\"}" >/dev/null 2>&1
  done
  echo "$times"
}
# counted: pullgate's count of containerd calls and bytes read for CreateContainer decisions.
counted() {
  curl -sf "http://127.0.0.1:$MPORT/metrics" | awk '/^pullgate_containerd_calls_total\{purpose="create_container"\}/ {c=$2} /^pullgate_containerd_read_bytes_total\{purpose="create_container"\}/ {b=$2} END {print c+0, b+0}'
}
# per_call BEFORE AFTER: calls and bytes per CreateContainer between two `counted`.
per_call() { echo "$1 $2" | awk -v n="$REPS" '{printf "%.1f calls, %.0f bytes", ($3 - $1) / n, ($4 - $2) / n}'; }
sid=$(front --pod "app:team-first:uid-team-first" RunPodSandbox '{}' | sed -n 's/.*"pod_sandbox_id":"\([0-9a-f]*\)".*/\1/p')
cp=$(creates front team-first "$sid" "$IMG" own)
PUBIMG=$REG_pub/k8s/pause:v1
sidd=$(direct --pod "app:team-pub:uid-team-pub" RunPodSandbox '{}' | sed -n 's/.*"pod_sandbox_id":"\([0-9a-f]*\)".*/\1/p')
k0=$(counted)
cf=$(creates front team-pub "$sidd" "$PUBIMG" pubf)
calls0=$(per_call "$k0" "$(counted)")
cd_=$(creates direct team-pub "$sidd" "$PUBIMG" pubd)
# podstarts VIA: REPS whole pod starts of the public image via VIA, as kubelet makes one:
# RunPodSandbox, ImageStatus of the container's image, CreateContainer, StartContainer (each pod
# removed after, untimed); prints the times.
podstarts() {
  local sid out cid t0 times="" ok id
  for rep in $(seq 1 "$REPS"); do
    local pod="app:team-start:uid-start-$1-$rep"
    t0=$EPOCHREALTIME; ok=1
    sid=$("$1" --pod "$pod" RunPodSandbox '{}' | sed -n 's/.*"pod_sandbox_id":"\([0-9a-f]*\)".*/\1/p')
    id=$("$1" ImageStatus "{\"image\":{\"image\":\"$PUBIMG\"}}" | sed -n 's/.*"id":"\(sha256:[0-9a-f]*\)".*/\1/p')
    [ -n "$id" ] || ok=0
    out=$("$1" --pod "$pod" CreateContainer "{\"pod_sandbox_id\":\"$sid\",\"config\":{\"metadata\":{\"name\":\"c\"},\"image\":{\"image\":\"$id\",\"user_specified_image\":\"$PUBIMG\"},\"command\":[\"/bin/sh\",\"-c\",\"sleep 60\"],\"log_path\":\"c.log\"}}" 2>&1) || ok=0
    cid=$(sed -n 's/.*"container_id":"\([0-9a-f]*\)".*/\1/p' <<<"$out")
    "$1" StartContainer "{\"container_id\":\"$cid\"}" >/dev/null || ok=0
    times+="$(elapsed "$t0" "$EPOCHREALTIME") "
    [ "$ok" = 1 ] && [ -n "$sid" ] || echo "pod start via $1 failed: $out" >&2
    direct StopPodSandbox "{\"pod_sandbox_id\":\"$sid\"}" >/dev/null 2>&1; direct RemovePodSandbox "{\"pod_sandbox_id\":\"$sid\"}" >/dev/null 2>&1
  done
  echo "$times"
}
psf=$(podstarts front)
psd=$(podstarts direct)
# statuses: REPS ImageStatus calls of the public image straight to containerd's CRI (kubelet
# makes one before each CreateContainer, and the front one in deciding it).
statuses() { local t0 times=""; for _ in $(seq 1 "$REPS"); do t0=$EPOCHREALTIME; direct ImageStatus "{\"image\":{\"image\":\"$PUBIMG\"}}" >/dev/null; times+="$(elapsed "$t0" "$EPOCHREALTIME") "; done; echo "$times"; }
st0=$(statuses)
# 5,000 names on the public image, sorting before its own.
seq -f "$REG_pub/aaa-many/n%05g:v1" 1 5000 | xargs -n 1000 "${CTR[@]}" -n k8s.io images tag --force "$PUBIMG" >/dev/null
# Timed once containerd's CRI has learnt of every name (it is busy until then).
for _ in $(seq 1 300); do
  [ "$(front ImageStatus "{\"image\":{\"image\":\"$PUBIMG\"}}" | grep -o 'aaa-many/n' | wc -l)" -eq 5000 ] && break
  sleep 2
done
k0=$(counted)
cf5=$(creates front team-pub "$sidd" "$PUBIMG" pubf5)
calls5=$(per_call "$k0" "$(counted)")
cd5=$(creates direct team-pub "$sidd" "$PUBIMG" pubd5)
st5=$(statuses)
echo
printf '| %-62s | %9s | %9s |\n' "CreateContainer ($REPS runs, median)" "front" "straight"
printf '|%s|%s|%s|\n' "----------------------------------------------------------------" "-----------" "-----------"
printf '| %-62s | %7.3f s | %9s |\n' "private image (a grant), its own names" "$(med "$cp")" "refused"
printf '| %-62s | %7.3f s | %7.3f s |\n' "public image, its own names" "$(med "$cf")" "$(med "$cd_")"
printf '| %-62s | %7.3f s | %7.3f s |\n' "public image, 5,000 more names" "$(med "$cf5")" "$(med "$cd5")"
printf '| %-62s | %7.3f s | %7.3f s |\n' "a whole pod start of the public image, its own names" "$(med "$psf")" "$(med "$psd")"
printf '| %-62s | %9s | %7.3f s |\n' "ImageStatus of the public image, its own names" "" "$(med "$st0")"
printf '| %-62s | %9s | %7.3f s |\n' "ImageStatus of the public image, 5,000 more names" "" "$(med "$st5")"
printf 'containerd calls and bytes read per CreateContainer decision (pullgate_containerd_*{purpose="create_container"}):\n  its own names: %s\n  5,000 more:    %s\n' "$calls0" "$calls5"
ratio() { echo "$(med "$1") / $(med "$2")" | bc -l; }
printf 'CreateContainer with 5,000 names / with its own: through the front %.2f (target: at most 1.2), containerd alone %.2f\n' "$(ratio "$cf5" "$cf")" "$(ratio "$cd5" "$cd_")"
printf 'CreateContainer, front / straight: its own names %.2f (target: at most 1.2), 5,000 names %.2f\n' "$(ratio "$cf" "$cd_")" "$(ratio "$cf5" "$cd5")"
printf 'A whole pod start (RunPodSandbox, ImageStatus, CreateContainer, StartContainer), front / straight: %.2f (target: at most 1.2)\n' "$(ratio "$psf" "$psd")"
