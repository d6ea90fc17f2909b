#!/usr/bin/env bash
# Benchmarks of the gate against the alternatives, measured side by side in one run on one
# containerd 1.6 (pullgate and the built-in overlayfs both enabled) plus, for the "isolated"
# alternative, a second containerd (1.7) with content_sharing_policy = "isolated". The image is
# private (token-auth registry), 6 layers of 20 MB of incompressible data plus a base.
#   1. re-authentication in a fresh namespace: pullgate verify vs a full pull into an isolated
#      content store vs plain `ctr images pull` (which re-resolves but trusts cached blobs):
#      time and bytes served by the registry (and its token server); and, on the isolated
#      containerd (with a pullgate of its own), a new tenant's pullgate verify and pullgate pull,
#      which copy the blobs on the node, against containerd's own isolated pull
#   2. pullgate pull vs ctr images pull --snapshotter overlayfs into an empty store
#   3. twenty namespaces using the same image: time and disk, pullgate vs overlayfs; then twenty
#      new tenants once the image is on the node (each ready to run: verify, image record, chain)
#   4. an application on a public base (about 100 MB public, 20 MB private) under the isolated
#      store: a new tenant's pullgate pull (public blobs adopted from pullgate's public
#      namespace, private ones copied) against containerd's own isolated pull; then verify and
#      pull at 1, 1,000 and 10,000 namespaces
#   5. ctr run --rm latency: gate on (grant checked) vs NeverVerify vs overlayfs, interleaved
# Usage: sudo bench/gate.sh   (REPS, RUNS, NS_COUNT override the repetitions; NS_SCALE the namespace
#        counts of section 4, "1000 10000" by default, empty for none)
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
# Over TLS (use_tls_registries): pullgate spares a download only where it verified the registry.
use_tls_registries >/dev/null || exit 1
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
# containerd 1.7: the first to honour a shareable namespace (pullgate's public namespace).
"$(containerd_bindir 1.7)/containerd" --config "$ISO/config.toml" >"$ISO/log" 2>&1 &
PIDS+=($!)
ISOCTR=("$(containerd_bindir 1.7)/ctr" -a "$ISO/containerd.sock")
wait_for 30 "${ISOCTR[@]}" version
nlayers=$(python3 -c "import json; i=json.load(open('$WORK/img/index.json')); d=i['manifests'][0]['digest'].split(':')[1]; print(len(json.load(open('$WORK/img/blobs/sha256/'+d))['layers']))")
echo "image: $nlayers layers, ${size} MB compressed, private on a token-auth registry; containerd 1.6 (the isolated one: 1.7)"

echo; echo "## 1. re-authentication in a fresh namespace (tenant A pulled the image first)"
pgi() { local sub=$1; shift; "$PG_BIN" "$sub" --address "$PGI/api.sock" "$@"; }
pg pull -n tenant-a "${REGF[@]}" --user "alice:$PW" "$IMG" >/dev/null 2>&1
"${ISOCTR[@]}" -n tenant-a images pull "${CTRF[@]}" --user "alice:$PW" --snapshotter overlayfs "$IMG" >/dev/null
pgi pull -n tenant-a "${REGF[@]}" --user "alice:$PW" "$IMG" >/dev/null 2>&1 || echo "pullgate pull on the isolated containerd failed"
declare -A T B
# Each measured step starts once the previous one's writes are on disk (sync): a copy or a pull
# commits blobs with fsync, which would otherwise wait for the step before it.
for rep in $(seq 1 "$REPS"); do
  sync; read -r m1 m2 < <(marks); t0=$EPOCHREALTIME
  pg verify -n "v$rep" "${REGF[@]}" --user "alice:$PW" "$IMG" >/dev/null 2>&1
  t1=$EPOCHREALTIME; T[verify]+="$(elapsed "$t0" "$t1") "; B[verify]+="$(registry_bytes "$m1" "$m2") "
  sync; read -r m1 m2 < <(marks); t0=$EPOCHREALTIME
  "${ISOCTR[@]}" -n "iso$rep" images pull "${CTRF[@]}" --user "alice:$PW" --snapshotter overlayfs "$IMG" >/dev/null
  t1=$EPOCHREALTIME; T[iso]+="$(elapsed "$t0" "$t1") "; B[iso]+="$(registry_bytes "$m1" "$m2") "
  sync; read -r m1 m2 < <(marks); t0=$EPOCHREALTIME
  ctr_ -n "c$rep" images pull "${CTRF[@]}" --user "alice:$PW" --snapshotter overlayfs "$IMG" >/dev/null
  t1=$EPOCHREALTIME; T[ctr]+="$(elapsed "$t0" "$t1") "; B[ctr]+="$(registry_bytes "$m1" "$m2") "
  sync; read -r m1 m2 < <(marks); t0=$EPOCHREALTIME
  pgi verify -n "vi$rep" "${REGF[@]}" --user "alice:$PW" "$IMG" >/dev/null 2>&1 || echo "isolated verify failed"
  t1=$EPOCHREALTIME; T[iverify]+="$(elapsed "$t0" "$t1") "; B[iverify]+="$(registry_bytes "$m1" "$m2") "
  sync; read -r m1 m2 < <(marks); t0=$EPOCHREALTIME
  pgi pull -n "pi$rep" "${REGF[@]}" --user "alice:$PW" "$IMG" >/dev/null 2>&1 || echo "isolated pull failed"
  t1=$EPOCHREALTIME; T[ipull]+="$(elapsed "$t0" "$t1") "; B[ipull]+="$(registry_bytes "$m1" "$m2") "
done
# More verifies, each in a fresh namespace, so that the verify's median is taken over as many
# runs as the floor's below (the loop above makes only REPS of them, between full pulls).
for rep in $(seq 1 20); do
  sync; read -r m1 m2 < <(marks); t0=$EPOCHREALTIME
  pg verify -n "vf$rep" "${REGF[@]}" --user "alice:$PW" "$IMG" >/dev/null 2>&1
  t1=$EPOCHREALTIME; T[verify]+="$(elapsed "$t0" "$t1") "; B[verify]+="$(registry_bytes "$m1" "$m2") "
done
# The network floor, measured here: what the registry and its token server take to answer a
# token request and a manifest request (curl's time_total, median of 20 each), and one
# fsync'd write of a small file on the disk under pullgate's root (median of 20).
realm=$(token_realm t)
for i in $(seq 1 20); do
  tok=$(curl -s -u "alice:$PW" -w '\n%{time_total}' "$realm?service=registry&scope=repository:private/bench:pull")
  T[ftoken]+="$(tail -n 1 <<<"$tok") "
  token=$(head -n 1 <<<"$tok" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("token") or d["access_token"])')
  T[fmanifest]+="$(curl -s -o /dev/null -w '%{time_total}' -H "Authorization: Bearer $token" \
    -H 'Accept: application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json' \
    "https://$REG_t/v2/private/bench/manifests/v1" --cacert "$WORK/ca/ca.pem") "
  T[fsync]+="$(python3 -c 'import os,sys,time; p=sys.argv[1]+"/fsync-probe"; t=time.perf_counter(); f=os.open(p, os.O_WRONLY|os.O_CREAT|os.O_TRUNC, 0o600); os.write(f, b"x"*4096); os.fsync(f); os.close(f); print(time.perf_counter()-t)' "$PG/root") "
done
tfloor=$(echo "$(med "${T[ftoken]}") + $(med "${T[fmanifest]}")" | bc -l); tfsync=$(med "${T[fsync]}")
tv=$(med "${T[verify]}"); ti=$(med "${T[iso]}"); tc=$(med "${T[ctr]}")
printf '| %-52s | %9s | %12s |\n' "re-authentication ($REPS runs, median; verify: $((REPS + 20)))" "time" "bytes served"
printf '|%s|%s|%s|\n' "------------------------------------------------------" "-----------" "--------------"
printf '| %-52s | %7.3f s | %12s |\n' "pullgate verify" "$tv" "$(med "${B[verify]}")"
printf '| %-52s | %7.3f s | %12s |\n' "full pull into an isolated content store" "$ti" "$(med "${B[iso]}")"
printf '| %-52s | %7.3f s | %12s |\n' "ctr images pull (shared store, trusts cached blobs)" "$tc" "$(med "${B[ctr]}")"
printf '| %-52s | %7.4f s | %12s |\n' "network floor: token + manifest request (curl, median of 20)" "$tfloor" ""
printf '| %-52s | %7.4f s | %12s |\n' "one fsync'd 4 KiB write under pullgate's root (median of 20)" "$tfsync" ""
printf 'verify / isolated full pull: time %.1f%% (target <= 5%%), bytes %s (target <= 4096)\n' "$(echo "100 * $tv / $ti" | bc -l)" "$(med "${B[verify]}")"
printf 'verify / (network floor + fsync): %.2f (target <= 2.0); bytes from registry and token server %s (target <= 4096)\n' "$(echo "$tv / ($tfloor + $tfsync)" | bc -l)" "$(med "${B[verify]}")"
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
    t0=$EPOCHREALTIME
    if [ "$how" = pullgate ]; then pg pull -n b2 "${REGF[@]}" --user "alice:$PW" "$IMG" >/dev/null 2>&1
    else ctr_ -n b2 images pull "${CTRF[@]}" --user "alice:$PW" --snapshotter overlayfs "$IMG" >/dev/null; fi
    t1=$EPOCHREALTIME; T[p2$how]+="$(elapsed "$t0" "$t1") "
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
t0=$EPOCHREALTIME
for i in $(seq 1 "$NS_COUNT"); do pg pull -n "m$i" "${REGF[@]}" --user "alice:$PW" "$IMG" >/dev/null 2>&1; done
t1=$EPOCHREALTIME; tpg=$(elapsed "$t0" "$t1"); dpg=$(du_of "$PG/root/snapshots")
t0=$EPOCHREALTIME
for i in $(seq 1 "$NS_COUNT"); do ctr_ -n "o$i" images pull "${CTRF[@]}" --user "alice:$PW" --snapshotter overlayfs "$IMG" >/dev/null; done
t1=$EPOCHREALTIME; tov=$(elapsed "$t0" "$t1"); dov=$(du_of "$WORK/containerd/root/io.containerd.snapshotter.v1.overlayfs/snapshots")
printf '| %-52s | %9s | %10s |\n' "$NS_COUNT namespaces, same image" "total time" "disk (MB)"
printf '|%s|%s|%s|\n' "------------------------------------------------------" "-----------" "------------"
printf '| %-52s | %7.2f s | %10.1f |\n' "pullgate (verify + adopted chain per namespace)" "$tpg" "$(echo "$dpg / 1048576" | bc -l)"
printf '| %-52s | %7.2f s | %10.1f |\n' "overlayfs (one extraction per namespace)" "$tov" "$(echo "$dov / 1048576" | bc -l)"
# (The first namespace above downloads and unpacks the image.) Then as many new tenants once the
# image is on the node: each verifies, gets the image record and adopts the unpacked chain.
t0=$EPOCHREALTIME
for i in $(seq 1 "$NS_COUNT"); do pg pull -n "n$i" "${REGF[@]}" --user "alice:$PW" "$IMG" >/dev/null 2>&1 || echo "new tenant n$i: pull failed"; done
t1=$EPOCHREALTIME; tnew=$(elapsed "$t0" "$t1")
printf 'pullgate, %d new tenants ready to run (the image on the node): %.2f s in all (target <= 1.0 s for 20), %.3f s each\n' "$NS_COUNT" "$tnew" "$(echo "$tnew / $NS_COUNT" | bc -l)"

echo; echo "## 4. an application on a public base, isolated content store (containerd 1.7)"
# public/base: about 100 MB in 5 layers of 20 MB plus the busybox base, readable without
# credentials; private/onbase: the same layers and one more of 20 MB (and its own config and
# top layer). Tenant pa pulls the base without credentials (pullgate then knows those blobs are
# public at their origin) and the application; tenant pw, the first to need them from the
# node, puts the public blobs into pullgate's public namespace. Then each new tenant.
python3 "$REPO/tests/mkimage.py" "$WORK/pubbase" --tag v1 --extra-layers 5 --layer-mb 20 --seed 9 --message "public base" >/dev/null
python3 "$REPO/tests/mkimage.py" "$WORK/onbase" --tag v1 --extra-layers 6 --layer-mb 20 --seed 9 --message "private app" >/dev/null
token_acl t 'acl["anonymous"] = ["public/*"]'
PUBIMG=$REG_t/public/base:v1; APPIMG=$REG_t/private/onbase:v1
push_image "$WORK/pubbase" v1 "$PUBIMG" "admin:$PW"
push_image "$WORK/onbase" v1 "$APPIMG" "admin:$PW"
pgi pull -n pa "${REGF[@]}" "$PUBIMG" >/dev/null 2>&1 || echo "anonymous pull of the base failed"
pgi pull -n pa "${REGF[@]}" --user "alice:$PW" "$APPIMG" >/dev/null 2>&1 || echo "pull of the application failed"
pgi pull -n pw "${REGF[@]}" --user "alice:$PW" "$APPIMG" >/dev/null 2>&1 || echo "warm-up pull failed"
# bytes_of JSON_LIST: the layout sizes of the blobs named.
sizes=$(python3 -c 'import json,os,sys; d=sys.argv[1]+"/blobs/sha256"; print(json.dumps({"sha256:"+f: os.path.getsize(os.path.join(d,f)) for f in os.listdir(d)}))' "$WORK/onbase")
bytes_of() { python3 -c 'import json,sys; s=json.loads(sys.argv[1]); print(sum(s.get(d,0) for d in json.loads(sys.argv[2])))' "$sizes" "$1"; }
for rep in $(seq 1 "$REPS"); do
  sync; t0=$EPOCHREALTIME
  out=$(pgi pull -n "pp$rep" "${REGF[@]}" --user "alice:$PW" -o json "$APPIMG" 2>/dev/null)
  t1=$EPOCHREALTIME; T[ppull]+="$(elapsed "$t0" "$t1") "
  B[pcopied]+="$(bytes_of "$(python3 -c 'import json,sys; print(json.dumps(json.loads(sys.argv[1])["copied"]))' "$out")") "
  B[ppublic]+="$(bytes_of "$(python3 -c 'import json,sys; print(json.dumps(json.loads(sys.argv[1])["public"]))' "$out")") "
  sync; t0=$EPOCHREALTIME
  "${ISOCTR[@]}" -n "pi$rep" images pull "${CTRF[@]}" --user "alice:$PW" --snapshotter overlayfs "$APPIMG" >/dev/null
  t1=$EPOCHREALTIME; T[piso]+="$(elapsed "$t0" "$t1") "
done
tpp=$(med "${T[ppull]}"); tpi=$(med "${T[piso]}")
app_mb=$(du -sm "$WORK/onbase/blobs" | cut -f1)
printf '| %-52s | %9s | %14s |\n' "a new tenant, app on a public base ($REPS runs, median)" "time" "bytes copied"
printf '|%s|%s|%s|\n' "------------------------------------------------------" "-----------" "----------------"
printf '| %-52s | %7.3f s | %14s |\n' "containerd's own isolated pull (${app_mb} MB)" "$tpi" "-"
printf '| %-52s | %7.3f s | %14s |\n' "pullgate pull (public blobs from its public namespace)" "$tpp" "$(med "${B[pcopied]}")"
printf 'pullgate pull / isolated pull: %.2f (target <= 0.25); copied %s bytes, taken from the public namespace %s bytes\n' \
  "$(echo "$tpp / $tpi" | bc -l)" "$(med "${B[pcopied]}")" "$(med "${B[ppublic]}")"

# Verify and pull of the application in a new namespace with 1, 1,000 and 10,000 namespaces
# on the node (empty ones: what costs is asking each for blobs).
NS_SCALE=${NS_SCALE-"1000 10000"}   # (NS_SCALE= alone: no scaling)
# containerd's own part, apart: a new namespace adopting one public blob by its digest from the
# shareable public namespace (`ctr content ingest` with the expected digest and no bytes), which
# containerd answers after looking through every namespace for a shareable holder.
: > "$WORK/empty"   # (a regular file: ctr's ingest seeks in its input)
PUBBLOB=$(python3 -c 'import json,sys; d=sys.argv[1]; i=json.load(open(d+"/index.json")); m=json.load(open(d+"/blobs/sha256/"+i["manifests"][0]["digest"].split(":")[1])); print(m["layers"][0]["digest"])' "$WORK/pubbase")
scale_run() { # LABEL
  local i t0 t1
  for i in $(seq 1 "$REPS"); do
    sync; t0=$EPOCHREALTIME; pgi verify -n "sv$1-$i" "${REGF[@]}" --user "alice:$PW" "$APPIMG" >/dev/null 2>&1; t1=$EPOCHREALTIME; T[sv$1]+="$(elapsed "$t0" "$t1") "
    sync; t0=$EPOCHREALTIME; pgi pull -n "sp$1-$i" "${REGF[@]}" --user "alice:$PW" "$APPIMG" >/dev/null 2>&1; t1=$EPOCHREALTIME; T[sp$1]+="$(elapsed "$t0" "$t1") "
    sync; t0=$EPOCHREALTIME; "${ISOCTR[@]}" -n "sa$1-$i" content ingest --expected-digest "$PUBBLOB" "adopt-$i" <"$WORK/empty" >/dev/null 2>&1 || echo "containerd's adoption of a public blob failed"
    t1=$EPOCHREALTIME; T[sa$1]+="$(elapsed "$t0" "$t1") "
  done
}
scale_run base
have=$("${ISOCTR[@]}" namespaces ls -q | wc -l)
printf '| %-40s | %10s | %10s | %22s |\n' "namespaces on the node" "verify" "pull" "containerd: one adoption"
printf '|%s|%s|%s|%s|\n' "------------------------------------------" "------------" "------------" "------------------------"
printf '| %-40s | %8.3f s | %8.3f s | %20.4f s |\n' "$have" "$(med "${T[svbase]}")" "$(med "${T[spbase]}")" "$(med "${T[sabase]}")"
for n in $NS_SCALE; do
  have=$("${ISOCTR[@]}" namespaces ls -q | wc -l)
  seq "$have" "$n" | xargs -P 4 -I{} "${ISOCTR[@]}" namespaces create "scale-{}" >/dev/null 2>&1
  scale_run "$n"
  printf '| %-40s | %8.3f s | %8.3f s | %20.4f s |\n' "$("${ISOCTR[@]}" namespaces ls -q | wc -l)" "$(med "${T[sv$n]}")" "$(med "${T[sp$n]}")" "$(med "${T[sa$n]}")"
done
for n in $NS_SCALE; do
  printf 'at %s namespaces: verify %.2fx, pull %.2fx the time at a few (target within 1.2x); containerd adopting one public blob %.2fx (+%.1f ms)\n' "$n" \
    "$(echo "$(med "${T[sv$n]}") / $(med "${T[svbase]}")" | bc -l)" "$(echo "$(med "${T[sp$n]}") / $(med "${T[spbase]}")" | bc -l)" \
    "$(echo "$(med "${T[sa$n]}") / $(med "${T[sabase]}")" | bc -l)" "$(echo "1000 * ($(med "${T[sa$n]}") - $(med "${T[sabase]}"))" | bc -l)"
done

echo; echo "## 5. ctr run --rm latency"
ctr_ -n r5 images pull "${CTRF[@]}" --user "alice:$PW" --snapshotter overlayfs "$IMG" >/dev/null
pg pull -n r5 "${REGF[@]}" --user "alice:$PW" "$IMG" >/dev/null 2>&1
# runs LABEL: RUNS pairs of `ctr run --rm`, pullgate then overlayfs, alternating so that drift
# on the machine (caches, containerd's GC of the previous run) falls on both alike. Sets
# T[LABEL] (pullgate) and T[LABEL-ov] (the overlayfs runs interleaved with it).
runs() {
  local i t0 t1 sp="" so=""
  for i in $(seq 1 "$RUNS"); do
    t0=$EPOCHREALTIME; ctr_ -n r5 run --rm --snapshotter pullgate "$IMG" "r-$1-pg-$i-$RANDOM" >/dev/null; t1=$EPOCHREALTIME
    sp+="$(elapsed "$t0" "$t1") "
    t0=$EPOCHREALTIME; ctr_ -n r5 run --rm --snapshotter overlayfs "$IMG" "r-$1-ov-$i-$RANDOM" >/dev/null; t1=$EPOCHREALTIME
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
