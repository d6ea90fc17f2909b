#!/usr/bin/env bash
# Installs everything pullgate's tests, demo and benchmarks need on a fresh Debian 12 machine:
# apt packages (containerd 1.6, runc, registry, htpasswd, skopeo, busybox, protoc, lintian, Go and
# containerd's Go sources for the conformance suite, etcd), containerd 1.7 (trixie) and 2.1 (sid)
# unpacked under $PULLGATE_DEPS, the Go tools built from their modules (runc 1.2, nerdctl,
# crictl, critest, containerd 2.4, kubelet and kube-apiserver), containerd's own integration
# tests for 1.7 and 2.1, containerd's side of the differential test (docread) for 1.7, 2.1 and
# 2.4, cargo-deb for the Debian package, and a release build of pullgate. Idempotent.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
DEPS=${PULLGATE_DEPS:-/opt/pullgate-deps}
APT_OPTS=(-o DPkg::Lock::Timeout=600)
PKGS=(containerd runc docker-registry apache2-utils skopeo busybox-static protobuf-compiler
      golang-go golang-github-containerd-containerd-dev jq curl python3 bc python3-jwt python3-cryptography openssl
      containernetworking-plugins iptables etcd-server lintian)

if [ "$(id -u)" != 0 ]; then echo "setup.sh: must run as root (containerd and mounts need it)" >&2; exit 1; fi

missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  apt-get "${APT_OPTS[@]}" update -q
  DEBIAN_FRONTEND=noninteractive apt-get "${APT_OPTS[@]}" install -y -q "${missing[@]}"
fi
# Debian starts its own containerd (and etcd) service; the tests run their own instances.
for s in containerd etcd; do
  if systemctl is-active --quiet "$s" 2>/dev/null; then systemctl stop "$s" || true; fi
done

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
[ -n "${PULLGATE_SKIP_GO_TOOLS:-}" ] || build_runc

# Real clients, built once from their released Go modules (the Go module proxy, through Go's
# default GOPROXY) with the machine's Go 1.26, into $DEPS/<tool>-<version>/ and reused:
#   nerdctl (github.com/containerd/nerdctl/v2) for tests/e2e_clients.sh;
#   crictl and critest (sigs.k8s.io/cri-tools) for tests/e2e_crictl.sh and tests/e2e_critest.sh.
# `go install MOD/cmd/X@V` refuses a module whose go.mod has replace lines (nerdctl's has one,
# for its test framework, a nested module the module zip leaves out): so the module is
# downloaded, copied and built inside its own directory (`go install` also asks the proxy for
# the module's list of versions, which it refuses here). nerdctl v2.2.0 and v2.0.5 are served
# but fail the checksum database lookup here; v2.1.3 passes it. nerdctl's cmd/nerdctl/helpers keeps
# two test helpers in a non-test file (testing_linux.go) that import that framework; they are
# used by tests only, and the copy drops that file before building.
NERDCTL_VERSION=v2.1.3
CRI_TOOLS_VERSION=v1.37.0
GO=${GO:-/usr/local/go/bin/go}
go_module_dir() { # MODULE@VERSION -> a writable copy of the module's source (printed)
  local src dst=$DEPS/src/${1//\//_}
  src=$("$GO" mod download -json "$1" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("Dir") or sys.exit(d.get("Error")))')
  rm -rf "$dst"; mkdir -p "$DEPS/src"; cp -r "$src" "$dst"; chmod -R u+w "$dst"; echo "$dst"
}
build_go_tools() {
  [ -x "$GO" ] || { echo "setup: $GO not found (Go 1.26 is needed to build nerdctl, crictl and critest)" >&2; return 1; }
  export CGO_ENABLED=0 GOFLAGS=-mod=mod
  local d out
  out=$DEPS/nerdctl-$NERDCTL_VERSION
  if [ ! -x "$out/nerdctl" ]; then
    echo "setup: building nerdctl $NERDCTL_VERSION"
    d=$(go_module_dir "github.com/containerd/nerdctl/v2@$NERDCTL_VERSION")
    rm -f "$d/cmd/nerdctl/helpers/testing_linux.go"
    mkdir -p "$out.tmp"
    (cd "$d" && "$GO" build -ldflags "-X github.com/containerd/nerdctl/v2/pkg/version.Version=$NERDCTL_VERSION" -o "$out.tmp/nerdctl" ./cmd/nerdctl) && rm -rf "$out" && mv "$out.tmp" "$out"
    rm -rf "$d"
  fi
  out=$DEPS/cri-tools-$CRI_TOOLS_VERSION
  if [ ! -x "$out/crictl" ] || [ ! -x "$out/critest" ]; then
    echo "setup: building crictl and critest $CRI_TOOLS_VERSION"
    d=$(go_module_dir "sigs.k8s.io/cri-tools@$CRI_TOOLS_VERSION")
    mkdir -p "$out.tmp"
    local ld="-X sigs.k8s.io/cri-tools/pkg/version.Version=${CRI_TOOLS_VERSION#v}"
    (cd "$d" && "$GO" build -ldflags "$ld" -o "$out.tmp/crictl" ./cmd/crictl && "$GO" test -c -ldflags "$ld" -o "$out.tmp/critest" ./cmd/critest) \
      && rm -rf "$out" && mv "$out.tmp" "$out"
    rm -rf "$d"
  fi
  "$DEPS/nerdctl-$NERDCTL_VERSION/nerdctl" --version && "$DEPS/cri-tools-$CRI_TOOLS_VERSION/crictl" --version
}
# (PULLGATE_SKIP_GO_TOOLS=1: not needed, as by scripts/demo.sh and the benchmarks)
[ -n "${PULLGATE_SKIP_GO_TOOLS:-}" ] || build_go_tools

# The newest containerd 2.x release the Go module proxy serves here (github.com/containerd/
# containerd/v2; v2.4.2 on 2026-12-02: later versions are refused), built from its module:
# containerd, ctr and the runc shim, static (CGO off: no btrfs, which is disabled anyway), laid
# out as the .deb's are ($DEPS/containerd-2.4/usr/bin), bookworm's runc kept.
CONTAINERD_GO_VERSION=v2.4.2
build_containerd() {
  local out=$DEPS/containerd-$CONTAINERD_GO_VERSION d
  if [ ! -x "$out/usr/bin/containerd" ]; then
    echo "setup: building containerd $CONTAINERD_GO_VERSION"
    d=$(go_module_dir "github.com/containerd/containerd/v2@$CONTAINERD_GO_VERSION")
    mkdir -p "$out.tmp/usr/bin"
    (cd "$d" && CGO_ENABLED=0 GOFLAGS=-mod=mod "$GO" build -ldflags "-X github.com/containerd/containerd/v2/version.Version=${CONTAINERD_GO_VERSION#v}" \
        -o "$out.tmp/usr/bin/" ./cmd/containerd ./cmd/ctr ./cmd/containerd-shim-runc-v2) && rm -rf "$out" && mv "$out.tmp" "$out"
    rm -rf "$d"
  fi
  ln -sfn "$DEPS/containerd-$CONTAINERD_GO_VERSION" "$DEPS/containerd-2.4"
  "$DEPS/containerd-2.4/usr/bin/containerd" --version
}
[ -n "${PULLGATE_SKIP_GO_TOOLS:-}" ] || build_containerd

# kubelet and kube-apiserver (tests/e2e_kubelet.sh), and kube-scheduler, kube-controller-manager
# and kubectl (tests/e2e_cluster.sh's cluster) from k8s.io/kubernetes, a release with
# KEP-2535 (KubeletEnsureSecretPulledImages) in beta. kubernetes' go.mod replaces its staging
# modules (k8s.io/api, client-go, kubelet, cri-api, ...) with ./staging/src/..., which its module
# zip does not carry: so it is built as a dependency of a small wrapper module whose go.mod
# replaces each of them (every k8s.io/* module kubernetes' go.mod replaces) with its published
# version of the same release (v0.X.Y for v1.X.Y). Static (CGO off) and stripped, as upstream
# releases them.
K8S_VERSION=v1.37.2
K8S_COMMANDS="kubelet kube-apiserver kube-scheduler kube-controller-manager kubectl"
build_kubernetes() {
  local out=$DEPS/kubernetes-$K8S_VERSION d gomod minor=${K8S_VERSION#v1.}
  minor=${minor%%.*}
  local c have=1
  for c in $K8S_COMMANDS; do [ -x "$out/$c" ] || have=; done
  [ -n "$have" ] && return 0
  echo "setup: building $K8S_COMMANDS $K8S_VERSION"
  gomod=$("$GO" mod download -json "k8s.io/kubernetes@$K8S_VERSION" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("GoMod") or sys.exit(d.get("Error")))')
  d=$DEPS/src/kubernetes-wrapper-$K8S_VERSION
  rm -rf "$d"; mkdir -p "$d"
  {
    printf 'module pullgate.test/kubernetes-tools\n\ngo %s\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' \
      "$(awk '$1 == "go" {print $2; exit}' "$gomod")" "$K8S_VERSION"
    sed -n "s#^[[:space:]]*\(k8s.io/[A-Za-z0-9._-]*\) => \./staging/src/.*#\t\1 => \1 v0.${K8S_VERSION#v1.}#p" "$gomod"
    printf ')\n'
  } > "$d/go.mod"
  grep -q 'k8s.io/cri-api => k8s.io/cri-api v0' "$d/go.mod" || { echo "setup: no staging replace lines found in $gomod" >&2; return 1; }
  local v ld="-s -w"
  for v in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $v.gitVersion=$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
  done
  mkdir -p "$out.tmp"
  (cd "$d" && CGO_ENABLED=0 GOFLAGS=-mod=mod "$GO" build -trimpath -ldflags "$ld" -o "$out.tmp/" \
      $(printf 'k8s.io/kubernetes/cmd/%s ' $K8S_COMMANDS)) && rm -rf "$out" && mv "$out.tmp" "$out"
  rm -rf "$d"
  "$out/kubelet" --version && "$out/kube-apiserver" --version && "$out/kubectl" version --client
}
[ -n "${PULLGATE_SKIP_GO_TOOLS:-}" ] || build_kubernetes
# containerd's own integration tests (integration/client), for tests/e2e_containerd_suite.sh:
# built with `go test -c` once per containerd version, from the source of exactly the version
# that containerd reports (`containerd --version`), into $DEPS/containerd-client-test-vX.Y.Z/
# (client.test, the testdata it reads from its working directory, and bin/runc-fp, the failpoint
# runc wrapper from the same source that two of the tests run containers with).
#   2.x: integration/client is a package of the github.com/containerd/containerd/v2 module.
#   1.7: integration/client is a nested module (its own go.mod, `replace` of containerd and its
#   api module to ../../), which the containerd module's zip leaves out and the Go module proxy
#   does not serve; Debian's source package of that containerd (its orig tarball, from Debian's
#   mirrors, checked against the hash in the signed Sources index) holds the whole tree, and
#   the test binary is built there (its dependencies from the Go module proxy).
containerd_upstream_version() { "$1/containerd" --version | awk '{print $3}' | sed -E 's/^v//; s/[~+-].*//'; }
build_containerd_client_tests() { # containerd bin dir
  local bin=$1 v out d
  v=$(containerd_upstream_version "$bin") || return 1
  out=$DEPS/containerd-client-test-v$v
  [ -x "$out/client.test" ] && return 0
  echo "setup: building containerd $v's integration/client tests"
  rm -rf "$out.tmp"; mkdir -p "$out.tmp"
  case $v in
    1.*)
      local deb apt=$DEPS/apt-trixie-src uri file hash
      deb=$("$bin/containerd" --version | awk '{print $4}')   # Debian's version: 1.7.24~ds1-6+deb13u1
      mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/get"
      echo "deb-src $(debian_mirror) trixie main" > "$apt/sources.list"
      local opts=("${APT_OPTS[@]}" -oDir::Etc::SourceList="$apt/sources.list" -oDir::Etc::SourceParts=/dev/null
                  -oDir::State::Lists="$apt/lists" -oDir::Cache="$apt/cache" -oAPT::Get::List-Cleanup=0)
      apt-get "${opts[@]}" update -q
      read -r uri file hash < <(cd "$apt/get" && apt-get "${opts[@]}" source --print-uris "containerd=$deb" | awk '$2 ~ /\.orig\.tar\./ {gsub("\x27", "", $1); print $1, $2, $4}') || true
      [ -n "$uri" ] && [ "${hash%%:*}" = SHA256 ] || { echo "setup: no orig tarball of containerd $deb in Debian's sources" >&2; return 1; }
      curl -fsSL -o "$apt/get/$file" "$uri"
      echo "${hash#SHA256:}  $apt/get/$file" | sha256sum -c --quiet || return 1
      d=$DEPS/src/containerd-$v; rm -rf "$d"; mkdir -p "$d"
      tar xf "$apt/get/$file" -C "$d" --strip-components=1
      (cd "$d/integration/client" && CGO_ENABLED=0 GOFLAGS=-mod=mod "$GO" test -c -o "$out.tmp/client.test" .) || return 1
      (cd "$d" && CGO_ENABLED=0 GOFLAGS=-mod=mod "$GO" build -o "$out.tmp/bin/runc-fp" ./integration/failpoint/cmd/runc-fp) || return 1
      ;;
    *)
      d=$(go_module_dir "github.com/containerd/containerd/v2@v$v")
      (cd "$d" && CGO_ENABLED=0 GOFLAGS=-mod=mod "$GO" test -c -o "$out.tmp/client.test" ./integration/client \
                && CGO_ENABLED=0 GOFLAGS=-mod=mod "$GO" build -o "$out.tmp/bin/runc-fp" ./integration/failpoint/cmd/runc-fp) || return 1
      ;;
  esac
  [ -d "$d/integration/client/testdata" ] && cp -r "$d/integration/client/testdata" "$out.tmp/"
  rm -rf "$d" "$out"; mv "$out.tmp" "$out"
}
if [ -z "${PULLGATE_SKIP_GO_TOOLS:-}" ]; then
  for v in 1.7 2.1; do build_containerd_client_tests "$DEPS/containerd-$v/usr/bin"; done
fi

# docread (tests/difftest/go), containerd's side of the image-document differential test:
# containerd's own images.Manifest, images.RootFS and CRI checkpoint-image check, compiled
# against exactly the containerd versions the suite runs (1.7 and 2.1 as their installed
# binaries report, and $CONTAINERD_GO_VERSION) into $DEPS/docread-vX.Y.Z/docread; rebuilt when
# a source there is newer. Each is built in a throwaway wrapper module whose go.mod requires
# only that containerd (at containerd's go version, so the module graph is pruned as
# containerd's own, and with containerd's go.sum: not every module in it is in the checksum
# database), so containerd's go.mod pins image-spec, platforms and checkpointctl. The source is
# the shared docread.go and the half with that major version's import paths (v1/ or v2/).
# Whether that version's CRI CreateContainer checks for checkpoint images is read from its
# source and built in.
build_docreader() { # vX.Y.Z
  local v=$1 out=$DEPS/docread-$1 src=$here/tests/difftest/go mod half dir d check=false
  case $v in
    v1.*) mod=github.com/containerd/containerd half=v1 ;;
    *) mod=github.com/containerd/containerd/v2 half=v2 ;;
  esac
  [ -x "$out/docread" ] && [ -z "$(find "$src/docread.go" "$src/$half" -name '*.go' -newer "$out/docread")" ] && return 0
  echo "setup: building docread against containerd $v"
  dir=$("$GO" mod download -json "$mod@$v" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("Dir") or sys.exit(d.get("Error")))') || return 1
  grep -rqs --include='*.go' --exclude='*_test.go' 'c.checkIfCheckpointOCIImage(' "$dir" && check=true
  d=$(mktemp -d)
  printf 'module pullgate.test/docread\n\ngo %s\n\nrequire %s %s\n' "$(awk '$1 == "go" {print $2; exit}' "$dir/go.mod")" "$mod" "$v" > "$d/go.mod"
  cp "$dir/go.sum" "$d/go.sum" && chmod u+w "$d/go.sum"
  cp "$src/docread.go" "$src/$half/containerd.go" "$d/"
  rm -rf "$out.tmp"; mkdir -p "$out.tmp"
  (cd "$d" && export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local && "$GO" mod tidy \
     && "$GO" build -trimpath -ldflags "-X main.containerdVersion=$v -X main.criChecksCheckpoint=$check" -o "$out.tmp/docread" .) \
    && rm -rf "$out" && mv "$out.tmp" "$out" || { rm -rf "$d"; return 1; }
  rm -rf "$d"
  "$out/docread" -version | sed -n 1p
}
build_docreaders() {
  local v
  for v in "$(containerd_upstream_version "$DEPS/containerd-1.7/usr/bin")" \
           "$(containerd_upstream_version "$DEPS/containerd-2.1/usr/bin")" "${CONTAINERD_GO_VERSION#v}"; do
    [ -n "$v" ] && build_docreader "v$v" || return 1
  done
}
[ -n "${PULLGATE_SKIP_GO_TOOLS:-}" ] || build_docreaders

# cargo-deb 3.8 (scripts/release.sh builds the Debian package with it; tests/e2e_package.sh),
# from Rust's crate registry into its own root, once. (Not for the demo and the benchmarks.)
install_cargo_deb() {
  local dir=$DEPS/cargo-deb-3.8
  [ -x "$dir/bin/cargo-deb" ] && return 0
  echo "setup: installing cargo-deb 3.8"
  cargo install cargo-deb --version '~3.8' --locked --root "$dir"
}
[ -n "${PULLGATE_SKIP_GO_TOOLS:-}" ] || install_cargo_deb

# Rust build (release: the daemon under test is the one an operator would run), the CRI test
# client (examples/cri.rs; kubelet's part in the Kubernetes tests), pullgate's side of the
# differential test (examples/docread.rs), and the upgrade test's stand-in for a newer release
# (examples/ledgerformat.rs).
if [ -z "${PULLGATE_SKIP_BUILD:-}" ]; then
  (cd "$here" && cargo build --release --locked --bin pullgate --bin pullgated --example cri --example docread --example ledgerformat 2>&1 | tail -n 3)
fi
echo "setup: done"
