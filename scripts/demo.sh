#!/usr/bin/env bash
# Shows pullgate doing its job on a real local containerd and registry (run as root on a
# fresh Debian 12 machine): installs what is needed, starts a registry, pullgate and
# containerd 1.6 configured from plugin/containerd-1.x.toml (pullgate as the only
# snapshotter), pulls and runs an image through pullgate with ctr, and shows what pullgate holds.
# Everything runs under a temporary directory and is stopped at the end.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/setup.sh" >/dev/null
source "$here/tests/lib.sh"
trap cleanup EXIT
V=${CONTAINERD_VERSION:-1.6}
show() { printf '\n$ %s\n' "$*"; "$@"; }

python3 "$REPO/tests/mkimage.py" "$WORK/img" --tag v1 --message "hello from an image unpacked by pullgate" >/dev/null
start_registry demo
IMG=$REG_demo/demo/app:v1
push_image "$WORK/img" v1 "$IMG"
PG=$WORK/pullgate
start_pullgate "$PG"
start_containerd "$V" "$PG/snapshotter.sock"
CTR_SHORT="ctr -n demo"
echo "registry: $REG_demo   pullgate: $PG   containerd $V: $WORK/containerd"
echo "containerd's config.toml (from plugin/):"; grep -vE '^\s*#|^\s*$' "$WORK/containerd/config.toml" | sed 's/^/    /'

show "${CTR[@]}" plugins ls -d id==pullgate
show "${CTR[@]}" -n demo images pull --plain-http --snapshotter pullgate "$IMG"
show "${CTR[@]}" -n demo run --rm --snapshotter pullgate "$IMG" demo-run
show "${CTR[@]}" -n demo snapshots --snapshotter pullgate ls
show ls -l "$PG/root/snapshots"
echo
echo "pullgate's log (last lines):"; tail -n 8 "$PG/log" | sed 's/^/    /'
show "${CTR[@]}" -n demo images rm --sync "$IMG"
show "${CTR[@]}" -n demo snapshots --snapshotter pullgate ls
echo "(containerd's garbage collector removed the chain through pullgate)"
