#!/usr/bin/env bash
# Benchmarks of the gate against the alternatives, measured side by side in one run on one
# containerd 1.6 (pullgate and the built-in overlayfs both enabled) plus, for the "isolated"
# alternative, a second containerd 1.6 with content_sharing_policy = "isolated". The image is
# private (token-auth registry), 6 layers of 20 MB of incompressible data plus a base.
#   1. re-authentication in a fresh namespace: pullgate verify vs a full pull into an isolated
#      content store vs plain `ctr images pull` (which re-resolves but trusts cached blobs):
#      time and bytes served by the registry (and its token server); and, on the isolated
#      containerd (with a pullgate of its own), a new tenant's pullgate verify and pullgate pull,
#      which copy the blobs on the node, against containerd's own isolated pull
#   2. pullgate pull vs ctr images pull --snapshotter overlayfs into an empty store
#   3. twenty namespaces using the same image: time and disk, pullgate vs overlayfs
#   5. ctr run --rm latency: gate on (grant checked) vs NeverVerify vs overlayfs, interleaved
# Usage: sudo bench/gate.sh   (REPS, RUNS, NS_COUNT override the repetitions)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/bench/lib.sh"
set +e
PG_LOG_LEVEL=info
REPS=${REPS:-3}
RUNS=${RUNS:-10}
NS_COUNT=${NS_COUNT:-20}
PW=bench-Secret-5u8w

python3 "$REPO/tests/mkimage.py" "$WORK/img" --tag v1 --extra-layers 6 --layer-mb 20 --seed 5 --message "bench app" >/dev/null
size=$(du -sm "$WORK/img/blobs" | cut -f1)
cat > "$WORK/acl.json" <<JSON
{"users": {"alice": "$PW", "admin": "$PW"}, "access": {"alice": ["private/*"], "admin": ["*"]}, "push": ["admin"]}
JSON
start_token_registry t "$WORK/acl.json" >/dev/null
IMG=$REG_t/private/bench:v1
push_image "$WORK/img" v1 "$IMG" "admin:$PW"
PG=$WORK/pullgate
start_pullgate "$PG" >/dev/null
# The main containerd keeps containerd's default shared content store (sections 1 to 5 compare
# against overlayfs there); the isolated one below is the fragments' setting.
CONTENT_POLICY=shared start_containerd 1.6 "$PG/snapshotter.sock" keep-builtin >/dev/null
wait_backend
pg() { local sub=$1; shift; "$PG_BIN" "$sub" --address "$PG/api.sock" "$@"; }
# The isolated alternative: a second containerd with its own root and the isolated policy,
# its built-in overlayfs for containerd's own pulls, and a pullgate of its own.
ISO=$WORK/iso; mkdir -p "$ISO"
PGI=$WORK/pullgate-iso
pullgate_config "$PGI"
sed -i "s#^containerd_address = .*#containerd_address = \"$ISO/containerd.sock\"#" "$PGI/config.toml"
PG_MAIN_PID=$PG_PID
start_pullgate "$PGI" >/dev/null
PG_PID=$PG_MAIN_PID   # section 5 restarts the main pullgate
cat > "$ISO/config.toml" <<TOML
version = 2
root = "$ISO/root"
state = "$ISO/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$ISO/containerd.sock"
[plugins."io.containerd.metadata.v1.bolt"]
  content_sharing_policy = "isolated"
[proxy_plugins.pullgate]
  type = "snapshot"
  address = "$PGI/snapshotter.sock"
TOML
/usr/bin/containerd --config "$ISO/config.toml" >"$ISO/log" 2>&1 &
PIDS+=($!)
ISOCTR=(/usr/bin/ctr -a "$ISO/containerd.sock")
wait_for 30 "${ISOCTR[@]}" version
nlayers=$(python3 -c "import json; i=json.load(open('$WORK/img/index.json')); d=i['manifests'][0]['digest'].split(':')[1]; print(len(json.load(open('$WORK/img/blobs/sha256/'+d))['layers']))")
echo "image: $nlayers layers, ${size} MB compressed, private on a token-auth registry; containerd 1.6"

echo; echo "## 1. re-authentication in a fresh namespace (tenant A pulled the image first)"
pgi() { local sub=$1; shift; "$PG_BIN" "$sub" --address "$PGI/api.sock" "$@"; }
pg pull -n tenant-a --plain-http --user "alice:$PW" "$IMG" >/dev/null 2>&1
"${ISOCTR[@]}" -n tenant-a images pull --plain-http --user "alice:$PW" --snapshotter overlayfs "$IMG" >/dev/null
pgi pull -n tenant-a --plain-http --user "alice:$PW" "$IMG" >/dev/null 2>&1 || echo "pullgate pull on the isolated containerd failed"
declare -A T B
# Each measured step starts once the previous one's writes are on disk (sync): a copy or a pull
# commits blobs with fsync, which would otherwise wait for the step before it.
for rep in $(seq 1 "$REPS"); do
  sync; read -r m1 m2 < <(marks); t0=$(now)
  pg verify -n "v$rep" --plain-http --user "alice:$PW" "$IMG" >/dev/null 2>&1
  t1=$(now); T[verify]+="$(elapsed "$t0" "$t1") "; B[verify]+="$(registry_bytes "$m1" "$m2") "
  sync; read -r m1 m2 < <(marks); t0=$(now)
  "${ISOCTR[@]}" -n "iso$rep" images pull --plain-http --user "alice:$PW" --snapshotter overlayfs "$IMG" >/dev/null
  t1=$(now); T[iso]+="$(elapsed "$t0" "$t1") "; B[iso]+="$(registry_bytes "$m1" "$m2") "
  sync; read -r m1 m2 < <(marks); t0=$(now)
  ctr_ -n "c$rep" images pull --plain-http --user "alice:$PW" --snapshotter overlayfs "$IMG" >/dev/null
  t1=$(now); T[ctr]+="$(elapsed "$t0" "$t1") "; B[ctr]+="$(registry_bytes "$m1" "$m2") "
  sync; read -r m1 m2 < <(marks); t0=$(now)
  pgi verify -n "vi$rep" --plain-http --user "alice:$PW" "$IMG" >/dev/null 2>&1 || echo "isolated verify failed"
  t1=$(now); T[iverify]+="$(elapsed "$t0" "$t1") "; B[iverify]+="$(registry_bytes "$m1" "$m2") "
  sync; read -r m1 m2 < <(marks); t0=$(now)
  pgi pull -n "pi$rep" --plain-http --user "alice:$PW" "$IMG" >/dev/null 2>&1 || echo "isolated pull failed"
  t1=$(now); T[ipull]+="$(elapsed "$t0" "$t1") "; B[ipull]+="$(registry_bytes "$m1" "$m2") "
done
tv=$(med "${T[verify]}"); ti=$(med "${T[iso]}"); tc=$(med "${T[ctr]}")
printf '| %-52s | %9s | %12s |\n' "re-authentication ($REPS runs, median)" "time" "bytes served"
printf '|%s|%s|%s|\n' "------------------------------------------------------" "-----------" "--------------"
printf '| %-52s | %7.3f s | %12s |\n' "pullgate verify" "$tv" "$(med "${B[verify]}")"
printf '| %-52s | %7.3f s | %12s |\n' "full pull into an isolated content store" "$ti" "$(med "${B[iso]}")"
printf '| %-52s | %7.3f s | %12s |\n' "ctr images pull (shared store, trusts cached blobs)" "$tc" "$(med "${B[ctr]}")"
printf 'verify / isolated full pull: time %.1f%% (target <= 5%%), bytes %s (target < 16384)\n' "$(echo "100 * $tv / $ti" | bc -l)" "$(med "${B[verify]}")"
tiv=$(med "${T[iverify]}"); tip=$(med "${T[ipull]}")
echo
printf '| %-52s | %9s | %12s |\n' "a new tenant, isolated content store ($REPS runs, median)" "time" "bytes served"
printf '|%s|%s|%s|\n' "------------------------------------------------------" "-----------" "--------------"
printf '| %-52s | %7.3f s | %12s |\n' "containerd's own pull (ctr images pull)" "$ti" "$(med "${B[iso]}")"
printf '| %-52s | %7.3f s | %12s |\n' "pullgate verify (blobs copied on the node)" "$tiv" "$(med "${B[iverify]}")"
printf '| %-52s | %7.3f s | %12s |\n' "pullgate pull (blobs copied, chain adopted)" "$tip" "$(med "${B[ipull]}")"
printf 'pullgate pull / isolated pull: time %.2f (target <= 0.50), bytes %s (target < 4096); verify: time %.2f, bytes %s\n' \
  "$(echo "$tip / $ti" | bc -l)" "$(med "${B[ipull]}")" "$(echo "$tiv / $ti" | bc -l)" "$(med "${B[iverify]}")"

echo; echo "## 2. pullgate pull vs ctr images pull --snapshotter overlayfs into an empty store"
empty_store() {
  local ns
  for ns in $(ctr_ namespaces ls -q); do
    for i in $(ctr_ -n "$ns" images ls -q); do ctr_ -n "$ns" images rm --sync "$i" >/dev/null 2>&1; done
  done
}
for rep in $(seq 1 "$REPS"); do
  for how in overlayfs pullgate; do
    empty_store
    t0=$(now)
    if [ "$how" = pullgate ]; then pg pull -n b2 --plain-http --user "alice:$PW" "$IMG" >/dev/null 2>&1
    else ctr_ -n b2 images pull --plain-http --user "alice:$PW" --snapshotter overlayfs "$IMG" >/dev/null; fi
    t1=$(now); T[p2$how]+="$(elapsed "$t0" "$t1") "
  done
done
to=$(med "${T[p2overlayfs]}"); tp=$(med "${T[p2pullgate]}")
printf '| %-52s | %9s |\n' "pull into an empty store ($REPS runs, median)" "time"
printf '|%s|%s|\n' "------------------------------------------------------" "-----------"
printf '| %-52s | %7.3f s |\n' "ctr images pull --snapshotter overlayfs" "$to"
printf '| %-52s | %7.3f s |\n' "pullgate pull (4 blobs at a time)" "$tp"
printf 'ratio pullgate / overlayfs: %.2f (target <= 1.10)\n' "$(echo "$tp / $to" | bc -l)"

echo; echo "## 3. $NS_COUNT namespaces using the same image"
empty_store
du_of() { du -sb "$1" 2>/dev/null | cut -f1; }
t0=$(now)
for i in $(seq 1 "$NS_COUNT"); do pg pull -n "m$i" --plain-http --user "alice:$PW" "$IMG" >/dev/null 2>&1; done
t1=$(now); tpg=$(elapsed "$t0" "$t1"); dpg=$(du_of "$PG/root/snapshots")
t0=$(now)
for i in $(seq 1 "$NS_COUNT"); do ctr_ -n "o$i" images pull --plain-http --user "alice:$PW" --snapshotter overlayfs "$IMG" >/dev/null; done
t1=$(now); tov=$(elapsed "$t0" "$t1"); dov=$(du_of "$WORK/containerd/root/io.containerd.snapshotter.v1.overlayfs/snapshots")
printf '| %-52s | %9s | %10s |\n' "$NS_COUNT namespaces, same image" "total time" "disk (MB)"
printf '|%s|%s|%s|\n' "------------------------------------------------------" "-----------" "------------"
printf '| %-52s | %7.2f s | %10.1f |\n' "pullgate (verify + adopted chain per namespace)" "$tpg" "$(echo "$dpg / 1048576" | bc -l)"
printf '| %-52s | %7.2f s | %10.1f |\n' "overlayfs (one extraction per namespace)" "$tov" "$(echo "$dov / 1048576" | bc -l)"

echo; echo "## 5. ctr run --rm latency"
ctr_ -n r5 images pull --plain-http --user "alice:$PW" --snapshotter overlayfs "$IMG" >/dev/null
pg pull -n r5 --plain-http --user "alice:$PW" "$IMG" >/dev/null 2>&1
# runs LABEL: RUNS pairs of `ctr run --rm`, pullgate then overlayfs, alternating so that drift
# on the machine (caches, containerd's GC of the previous run) falls on both alike. Sets
# T[LABEL] (pullgate) and T[LABEL-ov] (the overlayfs runs interleaved with it).
runs() {
  local i t0 t1 sp="" so=""
  for i in $(seq 1 "$RUNS"); do
    t0=$(now); ctr_ -n r5 run --rm --snapshotter pullgate "$IMG" "r-$1-pg-$i-$RANDOM" >/dev/null; t1=$(now)
    sp+="$(elapsed "$t0" "$t1") "
    t0=$(now); ctr_ -n r5 run --rm --snapshotter overlayfs "$IMG" "r-$1-ov-$i-$RANDOM" >/dev/null; t1=$(now)
    so+="$(elapsed "$t0" "$t1") "
  done
  T[$1]=$sp; T[$1-ov]=$so
}
runs gate
kill "$PG_PID"; wait "$PG_PID" 2>/dev/null
printf '\n[policy]\nverification = "NeverVerify"\n' >> "$PG/config.toml"
start_pullgate "$PG" >/dev/null; wait_backend
runs never
tg=$(med "${T[gate]}"); tgo=$(med "${T[gate-ov]}"); tn=$(med "${T[never]}"); tno=$(med "${T[never-ov]}")
tov=$(med "${T[gate-ov]} ${T[never-ov]}")
printf '| %-52s | %9s | %6s |\n' "ctr run --rm ($RUNS runs each, median)" "time" "ratio"
printf '|%s|%s|%s|\n' "------------------------------------------------------" "-----------" "--------"
printf '| %-52s | %7.3f s | %6.2f |\n' "pullgate, gate on (grant checked per layer)" "$tg" "$(echo "$tg / $tgo" | bc -l)"
printf '| %-52s | %7.3f s | %6.2f |\n' "pullgate, NeverVerify" "$tn" "$(echo "$tn / $tno" | bc -l)"
printf '| %-52s | %7.3f s | %6.2f |\n' "overlayfs (all runs interleaved with the above)" "$tov" "1.00"
echo "(each ratio is against the overlayfs runs interleaved with that pullgate configuration)"
