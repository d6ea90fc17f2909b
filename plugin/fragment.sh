#!/bin/sh
# Prints the containerd config fragment for this node: plugin/containerd-1.x.toml (containerd
# 1.6/1.7) or plugin/containerd-2.x.toml (2.x) with the transfer service's unpack platform set
# to the node's own, as containerd names it. Merge the output into /etc/containerd/config.toml.
#   plugin/fragment.sh 1.x|2.x      the fragment
#   plugin/fragment.sh --platform   only the platform (linux/GOARCH[/variant])
set -eu
here=$(cd "$(dirname "$0")" && pwd)
platform() {
  if command -v dpkg >/dev/null 2>&1; then arch=$(dpkg --print-architecture); else arch=$(uname -m); fi
  case $arch in
    amd64|x86_64) echo linux/amd64 ;;
    arm64|aarch64) echo linux/arm64 ;;
    armhf|armv7l) echo linux/arm/v7 ;;
    armel|armv6l) echo linux/arm/v6 ;;
    i386|i686) echo linux/386 ;;
    ppc64el|ppc64le) echo linux/ppc64le ;;
    s390x) echo linux/s390x ;;
    riscv64) echo linux/riscv64 ;;
    mips64el) echo linux/mips64le ;;
    *) echo "fragment.sh: unknown architecture $arch; write the platform by hand" >&2; return 1 ;;
  esac
}
case ${1:-} in
  --platform) platform ;;
  1.x|2.x) p=$(platform) && sed "s#^  platform = \"linux/amd64\"#  platform = \"$p\"#" "$here/containerd-$1.toml" ;;
  *) echo "usage: plugin/fragment.sh 1.x|2.x|--platform" >&2; exit 2 ;;
esac
