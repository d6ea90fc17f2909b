#!/usr/bin/env bash
# Installs everything pullgate's tests, demo and benchmarks need on a fresh Debian 12 machine:
# apt packages (containerd 1.6, runc, registry, htpasswd, skopeo, busybox, protoc, Go and
# containerd's Go sources for the conformance suite), containerd 1.7 (trixie) and 2.1 (sid)
# unpacked under $PULLGATE_DEPS, and a release build of pullgate. Idempotent.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
DEPS=${PULLGATE_DEPS:-/opt/pullgate-deps}
APT_OPTS=(-o DPkg::Lock::Timeout=600)
PKGS=(containerd runc docker-registry apache2-utils skopeo busybox-static protobuf-compiler
      golang-go golang-github-containerd-containerd-dev containernetworking-plugins jq curl python3 bc python3-jwt python3-cryptography openssl)

if [ "$(id -u)" != 0 ]; then echo "setup.sh: must run as root (containerd and mounts need it)" >&2; exit 1; fi

missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  apt-get "${APT_OPTS[@]}" update -q
  DEBIAN_FRONTEND=noninteractive apt-get "${APT_OPTS[@]}" install -y -q "${missing[@]}"
fi
# Debian starts its own containerd service; the tests run their own instances.
if systemctl is-active --quiet containerd 2>/dev/null; then systemctl stop containerd || true; fi

# The Debian mirror this machine's apt already uses (the first `URIs:` of a deb822 .sources
# file, else the first `deb` line of sources.list), so the extra suites come from the same place.
debian_mirror() {
  local m
  m=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -n1)
  [ -n "$m" ] || m=$(awk '$1 == "deb" && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' /etc/apt/sources.list 2>/dev/null | head -n1)
  [ -n "$m" ] || { echo "setup: no Debian mirror found in /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list" >&2; return 1; }
  echo "$m"
}

# containerd 1.7 (trixie) and 2.1 (sid): static binaries from the .deb, bookworm's runc kept.
fetch_containerd() { # suite dir
  local suite=$1 dir=$DEPS/containerd-$1
  [ -x "$dir/usr/bin/containerd" ] && return 0
  local apt=$DEPS/apt-$suite
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$dir"
  echo "deb $(debian_mirror) $suite main" > "$apt/sources.list"
  local opts=("${APT_OPTS[@]}" -oDir::Etc::SourceList="$apt/sources.list" -oDir::Etc::SourceParts=/dev/null
              -oDir::State::Lists="$apt/lists" -oDir::Cache="$apt/cache" -oAPT::Get::List-Cleanup=0)
  apt-get "${opts[@]}" update -q
  (cd "$apt" && rm -f containerd_*.deb && apt-get "${opts[@]}" download containerd)
  dpkg -x "$apt"/containerd_*.deb "$dir"
  "$dir/usr/bin/containerd" --version
}
fetch_containerd trixie
fetch_containerd sid
ln -sfn "$DEPS/containerd-trixie" "$DEPS/containerd-1.7"
ln -sfn "$DEPS/containerd-sid" "$DEPS/containerd-2.1"

# runc 1.2 (bookworm's 1.1.5 cannot run user-namespace pods: "idmap mounts not supported"), built
# once from its Go module with the machine's Go (1.22 or later; Debian's golang-go is older) and
# libseccomp, for the CRI tests' user-namespace pods on containerd 2.1.
RUNC_VERSION=1.2.6
build_runc() {
  local dir=$DEPS/runc-$RUNC_VERSION go=/usr/local/go/bin/go
  [ -x "$dir/runc" ] && return 0
  [ -x "$go" ] || go=$(command -v go)
  dpkg -s libseccomp-dev >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get "${APT_OPTS[@]}" install -y -q libseccomp-dev pkg-config
  mkdir -p "$dir"
  GOBIN="$dir" CGO_ENABLED=1 GOFLAGS=-mod=mod "$go" install -trimpath -tags seccomp "github.com/opencontainers/runc@v$RUNC_VERSION"
  "$dir/runc" --version
}
build_runc

# Rust build (release: the daemon under test is the one an operator would run), and the CRI
# test client (examples/cri.rs; kubelet's part in the Kubernetes tests).
if [ -z "${PULLGATE_SKIP_BUILD:-}" ]; then
  (cd "$here" && cargo build --release --locked --bin pullgate --example cri 2>&1 | tail -n 3)
fi
echo "setup: done"
