#!/usr/bin/env bash
# Shows pullgate doing its job on a real local containerd and registry (run as root on a
# fresh Debian 12 machine): installs what is needed, starts a password-protected registry,
# pullgate and containerd 1.6 configured from plugin/containerd-1.x.toml (pullgate as the only
# snapshotter, content_sharing_policy = "isolated"), then:
#   1. tenant A pulls a private image with its password through pullgate and runs it;
#   2. tenant B, without the password, cannot read A's cached blobs by their digests (the
#      isolated content store); given the image's bytes some other way, B imports them and
#      tries `ctr run`: pullgate refuses, and says why and what fixes it;
#   3. B proves its own access with `pullgate verify` (one manifest round-trip, no download:
#      the blobs are copied from A's content on the node), `pullgate pull` adopts A's
#      already-unpacked layers, and B runs the image.
#   4. `pullgate doctor` checks the node: pullgate registered and serving, no snapshotter
#      around it, CRI and the transfer service, content sharing, namespace labels, permissions
#      and the ledger; then again after tenant A's namespace is labelled to default to pullgate.
# Everything runs under a temporary directory and is stopped at the end.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
PULLGATE_SKIP_GO_TOOLS=1 "$here/scripts/setup.sh" >/dev/null
source "$here/tests/lib.sh"
set +e
trap cleanup EXIT
V=${CONTAINERD_VERSION:-1.6}
# show CMD...: prints the command as an operator would type it (ctr, pullgate), then runs it.
show() { printf '\n$ %s\n' "$(echo "$*" | sed "s#$WORK#\$WORK#g; s#^ctr_ #ctr #; s#^pg #pullgate #")"; "$@"; }

python3 "$REPO/tests/mkimage.py" "$WORK/img" --tag v1 --message "hello from a private image" >/dev/null
# The registry serves TLS with a certificate from a CA made for this run, named in the hosts.toml
# pullgate's daemon reads ([registry] hosts_dir) and ctr is given (--hosts-dir): pullgate
# believes what a registry served earlier only where it verified the registry's certificate.
use_tls_registries >/dev/null || exit 1
start_registry demo htpasswd alice alice-password bob bob-password >/dev/null
IMG=$REG_demo/private/app:v1
push_image "$WORK/img" v1 "$IMG" alice:alice-password
PG=$WORK/pullgate
start_pullgate "$PG"
start_containerd "$V" "$PG/snapshotter.sock"
pg() { local sub=$1; shift; "$PG_BIN" "$sub" --address "$PG/api.sock" "$@"; }
echo "registry https://$REG_demo (TLS, htpasswd users alice and bob; its hosts.toml in \$WORK/registry-hosts), containerd $V and pullgate under \$WORK=$WORK"

echo; echo "### 1. tenant A pulls the private image with its password, through pullgate, and runs it"
show pg pull -n A "${REGF[@]}" --user alice:alice-password "$IMG"
show ctr_ -n A run --rm --snapshotter pullgate "$IMG" a1
show pg inspect "$IMG"

echo; echo "### 2. tenant B has no password. It cannot read A's cached blobs by their digests (isolated store):"
top=$(pg inspect "$IMG" | awk '/^  layer /{d=$0} END{print d}' | grep -o 'sha256:[0-9a-f]*' | head -1)
: > "$WORK/empty"
show ctr_ -n B content ingest --expected-digest "$top" steal < "$WORK/empty"
show ctr_ -n B content get "$top"
echo "... nor pull the image without the password:"
show ctr_ -n B images pull "${CTRF[@]}" --snapshotter pullgate "$IMG"
echo "... and given the image's bytes some other way (here, its build directory), imports them and runs it:"
leaked=$(layout_tar "$WORK/img" "$IMG")
show ctr_ -n B images import --no-unpack "$leaked"
show ctr_ -n B run --rm --snapshotter pullgate "$IMG" b1
show pg check -n B "$IMG"
ctr_ -n B images rm --sync "$IMG" >/dev/null 2>&1

echo; echo "### 3. B (as bob) proves its own access at the registry (one manifest round-trip, no blob download:"
echo "###    pullgate copies the blobs B is now entitled to from A's content on the node), then"
echo "###    unpacks by adopting A's chain (nothing downloaded, nothing extracted) and runs"
show pg verify -n B "${REGF[@]}" --user bob:bob-password "$IMG"
show pg pull -n B "${REGF[@]}" --user bob:bob-password "$IMG"
show ctr_ -n B run --rm --snapshotter pullgate "$IMG" b2
show pg grants --all
echo; echo "pullgate's log (last lines):"; tail -n 4 "$PG/log" | sed 's/^/    /'

echo; echo "### 4. pullgate doctor checks the node (ok / warning / problem, each with its fix; exit 1 on a problem)"
doctor() {
  printf '\n$ pullgate doctor --config $WORK/pullgate/config.toml --containerd-config $WORK/containerd/config.toml\n'
  "$PG_BIN" doctor --config "$PG/config.toml" --containerd-config "$WORK/containerd/config.toml" | sed "s#$WORK#\$WORK#g"
  echo "(exit code ${PIPESTATUS[0]})"
}
doctor
show ctr_ namespaces label A containerd.io/defaults/snapshotter=pullgate
doctor
