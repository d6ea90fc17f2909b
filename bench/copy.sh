#!/usr/bin/env bash
# The isolated store's copy path alone, on one quiet containerd 1.6 configured from plugin/
# (content_sharing_policy = "isolated"): tenant A pulls a private image of 10 layers (122 MB)
# with pullgate; then `pullgate verify` and `pullgate pull` into fresh namespaces, each copying
# every blob from A's content on the node, timed one by one (no registry download). For
# looking into where a copy's time goes; bench/gate.sh holds the comparison with containerd's
# own isolated pull. Usage: sudo bench/copy.sh   (RUNS overrides the repetitions)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/bench/lib.sh"
set +e
PG_LOG_LEVEL=${PG_LOG_LEVEL:-info}
RUNS=${RUNS:-5}
python3 "$REPO/tests/mkimage.py" "$WORK/img" --tag v1 --extra-layers 6 --layer-mb 20 --seed 5 --message "bench app" >/dev/null
# Over TLS (use_tls_registries): pullgate copies from the node only what a verified endpoint served.
use_tls_registries >/dev/null || exit 1
start_registry h htpasswd alice bench-pw >/dev/null
IMG=$REG_h/private/bench:v1
push_image "$WORK/img" v1 "$IMG" "alice:bench-pw"
PG=$WORK/pg
start_pullgate "$PG" >/dev/null
start_containerd 1.6 "$PG/snapshotter.sock" >/dev/null
pg() { local sub=$1; shift; "$PG_BIN" "$sub" --address "$PG/api.sock" "$@"; }
pg pull -n A "${REGF[@]}" --user alice:bench-pw "$IMG" >/dev/null 2>&1 || { echo "tenant A's pull failed"; exit 1; }
for op in verify pull; do
  for i in $(seq 1 "$RUNS"); do
    sync; t0=$EPOCHREALTIME
    out=$(pg "$op" -n "$op$i" "${REGF[@]}" --user alice:bench-pw "$IMG" 2>&1) || { echo "$op $i failed: $out"; exit 1; }
    t1=$EPOCHREALTIME
    printf '%-6s %d: %6.3f s  (%s)\n' "$op" "$i" "$(elapsed "$t0" "$t1")" "$(grep -o '[0-9]* blob(s) downloaded, [0-9]* copied' <<<"$out")"
  done
done
# With PG_LOG_LEVEL=debug: where each verify's and pull's time went, stage by stage.
grep 'stages took' "$PG/log" | grep -o 'op=.*' || true
