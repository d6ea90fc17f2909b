#!/usr/bin/env bash
# Benchmark: pullgate against containerd's built-in overlayfs snapshotter, side by side in one
# run on the same containerd 1.6 (both snapshotters enabled), same registry, same image.
#   1. pull + unpack of a 9-layer, ~52 MB image into an empty content store (median of REPS)
#   2. `ctr run --rm` of the unpacked image (median of RUNS)
# The order alternates between repetitions. Prints medians and the ratio pullgate / overlayfs. Usage: sudo bench/snapshotter.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/bench/lib.sh"
PG_LOG_LEVEL=info
REPS=${REPS:-5}
RUNS=${RUNS:-10}

python3 "$REPO/tests/mkimage.py" "$WORK/img" --tag v1 --extra-layers 5 --layer-mb 10 --seed 7 >/dev/null
size=$(du -sm "$WORK/img/blobs" | cut -f1)
start_registry bench
IMG=$REG_bench/bench/big:v1
push_image "$WORK/img" v1 "$IMG"
start_pullgate "$WORK/pg"
start_containerd 1.6 "$WORK/pg/snapshotter.sock" keep-builtin
nlayers=$(python3 -c "import json,sys; i=json.load(open('$WORK/img/index.json')); d=i['manifests'][0]['digest'].split(':')[1]; print(len(json.load(open('$WORK/img/blobs/sha256/'+d))['layers']))")
echo "image: $nlayers layers, ${size} MB compressed; containerd 1.6 with overlayfs and pullgate"

declare -A PULL RUN
order() { if [ $(($1 % 2)) -eq 1 ]; then echo overlayfs pullgate; else echo pullgate overlayfs; fi; }
for rep in $(seq 1 "$REPS"); do
  for sn in $(order "$rep"); do
    ctr_ -n bench images rm --sync "$IMG" >/dev/null 2>&1 || true
    t0=$EPOCHREALTIME
    ctr_ -n bench images pull --plain-http --snapshotter "$sn" "$IMG" >/dev/null
    t1=$EPOCHREALTIME
    PULL[$sn]+="$(echo "$t1 - $t0" | bc -l) "
  done
done
# Leave the image unpacked in both snapshotters for the runs.
ctr_ -n bench images rm --sync "$IMG" >/dev/null 2>&1 || true
ctr_ -n bench images pull --plain-http --snapshotter overlayfs "$IMG" >/dev/null
ctr_ -n bench images unpack --snapshotter pullgate "$IMG" >/dev/null 2>&1 || \
  ctr_ -n bench images pull --plain-http --snapshotter pullgate "$IMG" >/dev/null
for i in $(seq 1 "$RUNS"); do
  for sn in $(order "$i"); do
    t0=$EPOCHREALTIME
    ctr_ -n bench run --rm --snapshotter "$sn" "$IMG" "bench-$sn-$i" >/dev/null
    t1=$EPOCHREALTIME
    RUN[$sn]+="$(echo "$t1 - $t0" | bc -l) "
  done
done

report() { # name overlay-samples pullgate-samples
  local o p
  o=$(tr ' ' '\n' <<<"$2" | grep . | median); p=$(tr ' ' '\n' <<<"$3" | grep . | median)
  printf '| %-44s | %8.3f s | %8.3f s | %5.2f |\n' "$1" "$o" "$p" "$(echo "$p / $o" | bc -l)"
}
echo
echo "| measurement (median)                         | overlayfs  | pullgate   | ratio |"
echo "|----------------------------------------------|------------|------------|-------|"
report "pull + unpack, empty store ($REPS runs)" "${PULL[overlayfs]}" "${PULL[pullgate]}"
report "ctr run --rm ($RUNS runs)" "${RUN[overlayfs]}" "${RUN[pullgate]}"
