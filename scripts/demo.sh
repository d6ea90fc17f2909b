#!/usr/bin/env bash
# Shows pullgate doing its job on a real local containerd and registry (run as root on a
# fresh Debian 12 machine): installs what is needed, starts a password-protected registry,
# pullgate and containerd 1.6 configured from plugin/containerd-1.x.toml (pullgate as the only
# snapshotter), then:
#   1. tenant A pulls a private image with its password through pullgate and runs it;
#   2. tenant B, without the password, adopts A's cached blobs by digest, imports them as an
#      image and tries `ctr run`: pullgate refuses, and says why and what fixes it;
#   3. B proves its own access with `pullgate verify` (one manifest round-trip, no download),
#      `pullgate pull` adopts A's already-unpacked layers, and B runs the image.
#   4. `pullgate doctor` checks the node: pullgate registered and serving, no snapshotter
#      around it, CRI and the transfer service, content sharing, namespace labels, permissions
#      and the ledger; then again after tenant A's namespace is labelled to default to pullgate.
# Everything runs under a temporary directory and is stopped at the end.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/setup.sh" >/dev/null
source "$here/tests/lib.sh"
set +e
trap cleanup EXIT
V=${CONTAINERD_VERSION:-1.6}
show() { printf '\n$ %s\n' "$(echo "$*" | sed "s#$WORK#\$WORK#g; s#${CTR[0]} -a [^ ]*#ctr#; s#$PG_BIN#pullgate#")"; "$@"; }

python3 "$REPO/tests/mkimage.py" "$WORK/img" --tag v1 --message "hello from a private image" >/dev/null
start_registry demo htpasswd alice alice-password bob bob-password >/dev/null
IMG=$REG_demo/private/app:v1
push_image "$WORK/img" v1 "$IMG" alice:alice-password
PG=$WORK/pullgate
start_pullgate "$PG"
start_containerd "$V" "$PG/snapshotter.sock"
pg() { local sub=$1; shift; "$PG_BIN" "$sub" --address "$PG/api.sock" "$@"; }
echo "registry $REG_demo (htpasswd users alice and bob), containerd $V and pullgate under \$WORK=$WORK"

echo; echo "### 1. tenant A pulls the private image with its password, through pullgate, and runs it"
show pg pull -n A --plain-http --user alice:alice-password "$IMG"
show ctr_ -n A run --rm --snapshotter pullgate "$IMG" a1
show pg inspect "$IMG"

echo; echo "### 2. tenant B does not use a password. It adopts A's cached blobs by digest and imports them..."
: > "$WORK/empty"; mkdir -p "$WORK/stolen/blobs/sha256"
for d in $(ctr_ -n A content ls -q); do
  ctr_ -n B content ingest --expected-digest "$d" "steal-$d" < "$WORK/empty" >/dev/null 2>&1
  ctr_ -n B content label "$d" containerd.io/gc.root=stolen >/dev/null 2>&1
  ctr_ -n B content get "$d" > "$WORK/stolen/blobs/sha256/${d#sha256:}"
done
mdig=$(pg inspect "$IMG" | awk '/^manifest /{print $2; exit}')
printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%s","size":%s,"annotations":{"io.containerd.image.name":"%s"}}]}' \
  "$mdig" "$(stat -c %s "$WORK/stolen/blobs/sha256/${mdig#sha256:}")" "$IMG" > "$WORK/stolen/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' > "$WORK/stolen/oci-layout"; tar -C "$WORK/stolen" -cf "$WORK/stolen.tar" .
show ctr_ -n B images import --no-unpack "$WORK/stolen.tar"
echo "... and tries to run it:"
show ctr_ -n B run --rm --snapshotter pullgate "$IMG" b1
show pg check -n B "$IMG"

echo; echo "### 3. B (as bob) proves its own access at the registry (one manifest round-trip, no blob download),"
echo "###    then unpacks by adopting A's chain (nothing downloaded, nothing extracted) and runs"
show pg verify -n B --plain-http --user bob:bob-password "$IMG"
show pg pull -n B --plain-http --user bob:bob-password "$IMG"
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
