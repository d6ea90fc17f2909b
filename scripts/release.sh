#!/usr/bin/env bash
# Builds pullgate's release files into target/release-files/ (or $PULLGATE_RELEASE_DIR):
#   pullgate-VERSION-linux-ARCH.tar.gz  both binaries, the systemd unit, the containerd fragments
#                                       and fragment.sh, the kubelet and crictl files (under
#                                       plugin/, as in the repository, with the DaemonSet installer
#                                       in plugin/daemonset/), config.toml.example,
#                                       README.md and LICENSE
#   pullgate_VERSION-1_DEBARCH.deb      the Debian package (cargo-deb; [package.metadata.deb])
#   SHA256SUMS                          of both
# VERSION is Cargo.toml's; ARCH is the node's platform as containerd names it (plugin/fragment.sh:
# amd64, arm64, ...). The same sources give the same bytes: every timestamp is the last commit's
# (SOURCE_DATE_EPOCH, unless set), entries are sorted, owners are root, modes are fixed, and
# gzip writes no name or time. The binaries are built with `cargo build --release --locked`
# (CARGO_TARGET_DIR is honoured).
#   scripts/release.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
OUT=${PULLGATE_RELEASE_DIR:-$here/target/release-files}
CARGO_DEB=${CARGO_DEB:-${PULLGATE_DEPS:-/opt/pullgate-deps}/cargo-deb-3.8/bin/cargo-deb}
[ -x "$CARGO_DEB" ] || { echo "release: $CARGO_DEB not found (scripts/setup.sh installs it)" >&2; exit 1; }

meta=$(cargo metadata --no-deps --locked --format-version 1)
version=$(jq -r '.packages[] | select(.name == "pullgate") | .version' <<<"$meta")
target_dir=$(jq -r '.target_directory' <<<"$meta")
platform=$(plugin/fragment.sh --platform)   # linux/amd64, linux/arm/v7, ...
arch=${platform#linux/}; arch=${arch//\//}
name=pullgate-$version-linux-$arch

# Built as scripts/setup.sh builds them, without SOURCE_DATE_EPOCH: the C parts' build scripts
# (the cc crate) watch that variable, and a changed value would rebuild most of the tree.
env -u SOURCE_DATE_EPOCH cargo build --release --locked --bin pullgate --bin pullgated
# The test-only switches that turn defences off (cargo feature defence-off, src/defence.rs) must
# not be in what is released: their variable's name is in a binary exactly when they are.
for b in pullgate pullgated; do
  grep -qaF PULLGATE_DEFENCE_OFF "$target_dir/release/$b" && rc=0 || rc=$?
  case $rc in
    1) ;;
    0) echo "release: target/release/$b was built with the test-only feature defence-off; build it again without" >&2; exit 1 ;;
    *) echo "release: cannot read target/release/$b" >&2; exit 1 ;;
  esac
done
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$here" log -1 --format=%ct)}
export SOURCE_DATE_EPOCH

# Work files of the Debian package ([package.metadata.deb] names them): the systemd unit with
# the package's binary path (plugin/pullgate.service names /usr/local/bin, where the tarball's
# binaries go), the Debian changelog cargo-deb installs, and CHANGELOG.md as Debian names an
# upstream changelog (changelog.gz).
deb_work=$here/target/pullgate-deb
rm -rf "$deb_work"; mkdir -p "$deb_work"
sed 's#^ExecStart=/usr/local/bin/pullgate #ExecStart=/usr/bin/pullgate #' plugin/pullgate.service > "$deb_work/pullgate.service"
grep -qx 'ExecStart=/usr/bin/pullgate serve --config /etc/pullgate/config.toml' "$deb_work/pullgate.service" \
  || { echo "release: plugin/pullgate.service has no ExecStart=/usr/local/bin/pullgate line to point at /usr/bin" >&2; exit 1; }
maintainer=$(sed -n 's/^maintainer = "\(.*\)"$/\1/p' Cargo.toml)
{
  printf 'pullgate (%s-1) unstable; urgency=medium\n\n' "$version"
  printf '  * pullgate %s; its changes are in /usr/share/doc/pullgate/CHANGELOG.md.\n\n' "$version"
  printf ' -- %s  %s\n' "$maintainer" "$(LC_ALL=C date -u -R -d "@$SOURCE_DATE_EPOCH")"
} > "$deb_work/changelog.Debian"
gzip -9 -n -c CHANGELOG.md > "$deb_work/changelog.gz"

mkdir -p "$OUT"
rm -f "$OUT"/pullgate-*.tar.gz "$OUT"/pullgate_*.deb "$OUT/SHA256SUMS"   # (earlier release files only)
stage=$(mktemp -d "$OUT/.stage.XXXXXX")
d=$stage/$name
install -d -m 0755 "$d" "$d/plugin" "$d/plugin/daemonset"
install -m 0755 "$target_dir/release/pullgate" "$target_dir/release/pullgated" "$d/"
install -m 0644 config.toml.example README.md LICENSE "$d/"
install -m 0644 plugin/pullgate.service plugin/containerd-1.x.toml plugin/containerd-2.x.toml \
  plugin/kubelet-config.yaml plugin/crictl.yaml "$d/plugin/"
install -m 0755 plugin/fragment.sh "$d/plugin/"
install -m 0644 plugin/daemonset/pullgate-installer.yaml "$d/plugin/daemonset/"
install -m 0755 plugin/daemonset/install.sh "$d/plugin/daemonset/"
tar --sort=name --format=posix --owner=0 --group=0 --numeric-owner --mode='go-w,a+rX' \
    --mtime="@$SOURCE_DATE_EPOCH" --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    -C "$stage" -cf - "$name" | gzip -9 -n > "$OUT/$name.tar.gz"
rm -rf "$stage"

"$CARGO_DEB" deb --no-build --locked --output "$OUT/" >/dev/null
(cd "$OUT" && sha256sum -- "$name.tar.gz" pullgate_*.deb > SHA256SUMS)
echo "release files in $OUT:"
(cd "$OUT" && cat SHA256SUMS)
