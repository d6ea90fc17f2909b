#!/usr/bin/env bash
# Benchmark (node scale): pullgate's resident memory while containerd's garbage
# collection walks every snapshot, at two numbers of snapshots with large labels, in one run.
# Through containerd (VERSION, default 2.1; its metadata keeps them, `containerd.io/gc.root`),
# SIZES (default "5000 20000") committed snapshots are made in pullgate, each with LABELS (8)
# labels `containerd.io/snapshot/fill.N` of LABEL_BYTES (2048) bytes; at each size one snapshot
# is removed (which makes containerd's next collection walk the snapshotter) and
# `ctr leases delete --sync` makes containerd collect at once: it walks every snapshot of
# pullgate (List, streamed in batches) and calls its Cleanup. Printed per size: the labels'
# total (what holding every record at once would take), pullgate's resident memory before, and
# its peak (VmHWM, reset just before) during the collection. Usage: sudo bench/walk.sh [VERSION]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/bench/lib.sh"
PG_LOG_LEVEL=info
V=${1:-2.1}
SIZES=${SIZES:-5000 20000}
LABELS=${LABELS:-8}
LABEL_BYTES=${LABEL_BYTES:-2048}
FILL=$REPO/target/release/examples/snapfill
if [ -z "${PULLGATE_SKIP_BUILD:-}" ] || [ ! -x "$FILL" ]; then
  (cd "$REPO" && cargo build --release --locked --example snapfill 2>&1 | tail -n 1)
fi
start_pullgate "$WORK/pg"
start_containerd "$V" "$WORK/pg/snapshotter.sock"
status() { awk -v k="$1:" '$1 == k {print $2}' "/proc/$PG_PID/status"; }
mb() { echo "scale=1; $1 / 1024" | bc -l; }
echo "containerd $V; pullgate resident memory at start: $(mb "$(status VmRSS)") MB"
echo
echo "| snapshots | labels in all |  pullgate before GC | peak during GC | GC (walk + cleanup) |"
echo "|-----------|---------------|---------------------|----------------|---------------------|"
made=0 removed=0
for n in $SIZES; do
  "$FILL" "$CTRD_SOCK" pullgate bench "$made" "$n" "$LABELS" "$LABEL_BYTES" >/dev/null
  made=$n
  before=$(status VmRSS)
  echo 5 > "/proc/$PG_PID/clear_refs"   # resets VmHWM to the current resident memory
  t0=$EPOCHREALTIME
  ctr_ -n bench snapshots --snapshotter pullgate rm "fill-$((n - 1))"
  settle_gc bench
  t1=$EPOCHREALTIME
  peak=$(status VmHWM)
  removed=$((removed + 1))
  # The collection kept every snapshot containerd holds: pullgate's directories say so.
  got=$(find "$WORK/pg/root/snapshots" -mindepth 1 -maxdepth 1 | wc -l)
  [ "$got" -eq $((n - removed)) ] || { echo "pullgate holds $got snapshots after the collection, not $((n - removed))"; exit 1; }
  printf '| %9d | %10.1f MB | %16.1f MB | %11.1f MB | %17.2f s |\n' "$n" \
    "$(echo "$n * $LABELS * ($LABEL_BYTES + 24) / 1048576" | bc -l)" "$(mb "$before")" "$(mb "$peak")" "$(elapsed "$t0" "$t1")"
done
