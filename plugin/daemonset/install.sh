#!/bin/sh
# pullgate's node installer: what the pod of plugin/daemonset/pullgate-installer.yaml runs on each
# node (privileged, the node's directories mounted at their own paths). In order:
#   1. places the release's binaries (PULLGATE_BIN_DIR), systemd unit (PULLGATE_UNIT_DIR) and
#      pullgate's config (the ConfigMap's config.toml, else config.toml.example when the node
#      has none) on the node, each replaced by a rename only when it differs;
#   2. merges pullgate's settings into containerd's config (`pullgate containerd-config`, which
#      runs the node's containerd on the merged file and refuses, writing nothing, unless
#      containerd reads pullgate as its only snapshotter): a refusal ends the pod in error, the
#      node's containerd and kubelet as they were. This and every reading of containerd's
#      config run on the host (PULLGATE_HOST_EXEC, a command that enters the host's mount
#      namespace), so that the files it imports are read wherever they are on the host;
#   3. removes the node-bootstrap link at pullgate's CRI socket (docs/cluster.md: kubelet's
#      endpoint is pullgate's socket from the node's first boot; until pullgate runs, that path
#      is a symbolic link to containerd's socket);
#   4. when anything changed (now or in an earlier pod that did not get to restart: a marker on
#      the node) or pullgate does not answer, runs PULLGATE_RESTART_COMMAND (on a systemd node:
#      start pullgate, restart containerd) and waits for pullgate's sockets;
#   5. pulls CRI's sandbox (pause) image through pullgate into k8s.io (PULLGATE_SANDBOX_IMAGE, by
#      default the one containerd's config names), so that pullgate has hashed its layers and
#      seen them served without a credential: containerd's CRI unpacks it itself, with no pod
#      behind the unpack, and under AlwaysVerify only layers pullgate knows as public pass;
#      Then marks the images PULLGATE_PRELOAD names (space-separated references) preloaded in
#      k8s.io (`pullgate preload`, with PULLGATE_PRELOAD_FLAGS and the credentials of docker's
#      config in PULLGATE_PRELOAD_AUTH, the optional Secret pullgate-preload-auth): under
#      NeverVerifyPreloadedImages every pod runs them without a secret of its own;
#   6. checks the node (`pullgate doctor`): a problem ends the pod in error, which the DaemonSet
#      retries (every step above is idempotent);
#   7. marks itself installed (the pod's readiness probe: install.sh --check) and sleeps.
# Usage: install.sh            install, then sleep
#        install.sh --check    exit 0 when this pod installed the node (readiness probe)
set -eu
SRC=${PULLGATE_SRC:-/opt/pullgate}
BIN_DIR=${PULLGATE_BIN_DIR:-/usr/local/bin}
UNIT_DIR=${PULLGATE_UNIT_DIR:-/etc/systemd/system}
CONFIG=${PULLGATE_CONFIG:-/etc/pullgate/config.toml}
CONFIG_SOURCE=${PULLGATE_CONFIG_SOURCE:-/config/config.toml}
CRI_SOCKET=${PULLGATE_CRI_SOCKET:-/run/pullgate/cri.sock}
API_SOCKET=${PULLGATE_API_SOCKET:-/run/pullgate/api.sock}
CONTAINERD_CONFIG=${CONTAINERD_CONFIG:-/etc/containerd/config.toml}
CONTAINERD_BIN=${CONTAINERD_BIN:-/usr/bin/containerd}
HOST_EXEC=${PULLGATE_HOST_EXEC:-}
CONTENT_SHARING=${PULLGATE_CONTENT_SHARING:-}
WAIT=${PULLGATE_RESTART_WAIT:-120}
PULL_FLAGS=${PULLGATE_PULL_FLAGS:-}
PRELOAD=${PULLGATE_PRELOAD:-}
PRELOAD_FLAGS=${PULLGATE_PRELOAD_FLAGS:-}
PRELOAD_AUTH=${PULLGATE_PRELOAD_AUTH:-/preload-auth}
STAMP=/tmp/pullgate-installed
# On the node, beside pullgate's config: a change was made that the running pullgate and
# containerd have not been restarted on yet. It outlives this pod, so a pod killed (or a restart
# command failed) between the change and the restart leaves the restart to the next pod.
PENDING=$(dirname "$CONFIG")/.installer-restart-pending

say() { echo "pullgate-installer${NODE_NAME:+ on $NODE_NAME}: $*"; }
die() { say "error: $*" >&2; exit 1; }

[ "${1:-}" = --check ] && exec test -e "$STAMP"
[ -n "${PULLGATE_RESTART_COMMAND:-}" ] || die "PULLGATE_RESTART_COMMAND is not set (what starts pullgate and restarts containerd on this node)"
mkdir -p "$(dirname "$CONFIG")"
changed() { : > "$PENDING" || die "cannot write $PENDING"; }
answers() { "$BIN_DIR/pullgate" --address "$API_SOCKET" grants -n pullgate-installer-probe >/dev/null 2>&1; }
# (-S follows a link: the CRI socket must be pullgate's own, not the bootstrap link.)
own_cri_socket() { [ -S "$CRI_SOCKET" ] && [ ! -L "$CRI_SOCKET" ]; }

# on_host CMD...: CMD in the host's mount namespace (HOST_EXEC; here when it is empty). CMD
# names host paths: BIN_DIR, CONFIG and CONTAINERD_CONFIG are mounted at their own paths.
on_host() {
  if [ -n "$HOST_EXEC" ]; then sh -c "$HOST_EXEC \"\$@\"" on_host "$@"; else "$@"; fi
}

# place SRC DEST MODE: DEST becomes SRC's bytes (a rename of a copy beside it), unless it has them.
place() {
  if [ -f "$2" ] && cmp -s "$1" "$2"; then return 0; fi
  mkdir -p "$(dirname "$2")"
  changed
  cp "$1" "$2.pullgate-new" && chmod "$3" "$2.pullgate-new" && mv -f "$2.pullgate-new" "$2" || die "cannot place $2"
  say "placed $2"
}

# 1. files
place "$SRC/pullgate" "$BIN_DIR/pullgate" 0755
place "$SRC/pullgated" "$BIN_DIR/pullgated" 0755
sed "s#^ExecStart=/usr/local/bin/pullgate #ExecStart=$BIN_DIR/pullgate #" "$SRC/plugin/pullgate.service" > /tmp/pullgate.service
place /tmp/pullgate.service "$UNIT_DIR/pullgate.service" 0644
if [ -f "$CONFIG_SOURCE" ]; then
  place "$CONFIG_SOURCE" "$CONFIG" 0644
elif [ ! -f "$CONFIG" ]; then
  place "$SRC/config.toml.example" "$CONFIG" 0644
fi

# 2. containerd's config
version=$(on_host "$CONTAINERD_BIN" --version) || die "cannot run the host's containerd ($CONTAINERD_BIN): $version"
case $(echo "$version" | awk '{print $3}') in
  v1.*|1.*) flavour=1.x ;;
  v2.*|2.*) flavour=2.x ;;
  *) die "cannot tell containerd's version from '$version'" ;;
esac
merge=$(on_host "$BIN_DIR/pullgate" containerd-config --file "$CONTAINERD_CONFIG" --config "$CONFIG" --containerd "$flavour" \
  --containerd-bin "$CONTAINERD_BIN" ${CONTENT_SHARING:+--content-sharing "$CONTENT_SHARING"} 2>&1) \
  || die "pullgate containerd-config refused to merge into $CONTAINERD_CONFIG: $merge"
echo "$merge"
case $merge in
  *"already has pullgate's settings"*) ;;
  *) changed ;;
esac

# 3. the node-bootstrap link (only a link: a socket or a file there is pullgate's or the
# operator's), once the merge is done: a refused merge leaves containerd and kubelet as they
# were. pullgate
# replaces the link itself when it starts; removing it here makes a pullgate that never
# started show as a node without a runtime (NotReady), not as one running pods ungated.
if [ -L "$CRI_SOCKET" ]; then
  say "removing the bootstrap link $CRI_SOCKET -> $(readlink "$CRI_SOCKET")"
  changed
  rm -f "$CRI_SOCKET"
fi

# 4. restart, when something changed or pullgate does not answer
if [ -e "$PENDING" ] || ! answers; then
  say "restarting: $PULLGATE_RESTART_COMMAND"
  sh -c "$PULLGATE_RESTART_COMMAND" || die "the restart command failed"
  i=0
  until [ -S "$API_SOCKET" ] && own_cri_socket && answers; do
    i=$((i + 1)); [ "$i" -le "$WAIT" ] || die "pullgate did not answer at $API_SOCKET (and bind $CRI_SOCKET) within $WAIT s of the restart"
    sleep 1
  done
  rm -f "$PENDING"
fi
own_cri_socket || die "$CRI_SOCKET is not pullgate's CRI socket: is [cri] enable = true, at that socket, in pullgate's config?"

# 5. the sandbox image
sandbox=${PULLGATE_SANDBOX_IMAGE:-$(on_host "$CONTAINERD_BIN" --config "$CONTAINERD_CONFIG" config dump 2>/dev/null \
  | sed -n "s/^ *sandbox\(_image\)\{0,1\} = [\"']\(.*\)[\"']\$/\2/p" | head -n 1)}
[ -n "$sandbox" ] || die "containerd's config names no sandbox image (set PULLGATE_SANDBOX_IMAGE)"
# shellcheck disable=SC2086
"$BIN_DIR/pullgate" --address "$API_SOCKET" pull -n k8s.io -q $PULL_FLAGS "$sandbox" >/dev/null \
  || die "cannot pull the sandbox image $sandbox through pullgate (above)"
say "the sandbox image $sandbox pulled through pullgate"
# Images the operator names preloaded (credentials from docker's config in PRELOAD_AUTH only:
# the sandbox image above is pulled without one).
set -f  # (references are words, never file patterns)
for ref in $PRELOAD; do
  # shellcheck disable=SC2086
  DOCKER_CONFIG=$PRELOAD_AUTH "$BIN_DIR/pullgate" --address "$API_SOCKET" preload -n k8s.io $PRELOAD_FLAGS "$ref" >/dev/null \
    || die "cannot mark $ref preloaded through pullgate (above)"
  say "$ref marked preloaded in k8s.io"
done
set +f

# 6. the node as pullgate's doctor sees it
on_host "$BIN_DIR/pullgate" doctor --config "$CONFIG" --containerd-config "$CONTAINERD_CONFIG" || die "pullgate doctor found a problem (above)"

# 7. installed
: > "$STAMP"
say "installed $("$BIN_DIR/pullgate" --version)"
trap 'exit 0' TERM INT
while :; do sleep 3600 & wait $!; done
