#!/usr/bin/env bash
# End to end: pullgate's release files and Debian package, the way an operator gets them.
#   1. scripts/release.sh twice, the second time with the packaging inputs' mtimes changed and
#      another umask, time zone, locale and output path: the same bytes (SHA256SUMS and every
#      file), SHA256SUMS verifies, every timestamp is the last commit's. The binaries are compiled
#      once and packaged twice: a second build from a copy of the sources at another path, with
#      a target directory of its own, took more than 4 minutes on the suite's 2-core machine, so
#      whether the compiled binaries are independent of the build's path is not checked here.
#   2. The tarball's entries against the required list, with owners and modes; its files against
#      the repository's; docs/install.md's commands for it: SHA256SUMS checked with
#      --ignore-missing (and failing on a changed file), unpacked, binaries installed in
#      /usr/local/bin and removed again.
#   3. The .deb: its files, conffiles and unit; lintian fails on any tag not overridden, and each
#      override in plugin/deb/lintian-overrides has its reason.
#   4. dpkg -i on this machine: files in place with their modes, containerd's configuration and
#      systemd's unchanged, nothing started.
#   5. The demo's flow from the installed files: pullgated from /usr/bin with
#      /etc/pullgate/config.toml (edited to name this run's containerd and registry CA), its root
#      and sockets where the package's defaults put them, a real containerd whose own default
#      config (`containerd config default`) the installed `pullgate containerd-config` merged
#      pullgate into, a registry with htpasswd: A pulls with its password and runs; B without
#      credentials is refused (pull, and a run of the imported bytes) and holds none of the
#      content; B with its own password pulls and runs.
#   6. Removing as docs/install.md says: the containers removed, `pullgate containerd-config
#      --undo` (containerd's config byte for byte as before), the labels naming pullgate removed,
#      containerd restarted on its own config (overlayfs loaded, no pullgate plugin); then dpkg -r:
#      the running daemon is stopped (here without systemd as PID 1: by prerm's fallback), the
#      binaries are gone, the ledger and the conffile are kept; nothing mounts from pullgate's
#      root; dpkg -P: pullgate's state is gone; containerd's and systemd's configuration as before
#      the installation; containerd runs A's image with overlayfs, and a new namespace pulls and
#      runs it, with no pullgate anywhere.
# The package is purged in the EXIT trap, so reruns and the other tests are unaffected (they run
# target/release's binaries). Needs root, dpkg, lintian and cargo-deb (scripts/setup.sh).
#   bash tests/e2e_package.sh [CONTAINERD_VERSION]   (1.6, 1.7, 2.1 or 2.4; default 2.1)
source "$(dirname "$0")/lib.sh"
V=${1:-2.1}
INSTALLED=
TARBALL_INSTALLED=
# Packaging inputs whose mtimes the second release run changes (restored at exit): none of them
# is a source of the release build (changing a source's mtime would rebuild pullgate).
MTIME_INPUTS=(README.md LICENSE CHANGELOG.md config.toml.example plugin/pullgate.service plugin/kubelet-config.yaml
              plugin/crictl.yaml plugin/fragment.sh plugin/daemonset/pullgate-installer.yaml plugin/daemonset/install.sh)
declare -A MTIMES=()
package_cleanup() {
  local f
  set +e
  if [ -n "$INSTALLED" ] && dpkg-query -W pullgate >/dev/null 2>&1; then
    dpkg -P pullgate >"$WORK/purge-at-exit.log" 2>&1 || { echo "cleanup: dpkg -P pullgate failed:"; cat "$WORK/purge-at-exit.log"; }
  fi
  [ -z "$TARBALL_INSTALLED" ] || rm -f /usr/local/bin/pullgate /usr/local/bin/pullgated
  for f in "${!MTIMES[@]}"; do touch -m -d "@${MTIMES[$f]}" "$f"; done
  cleanup
}
trap package_cleanup EXIT
cd "$REPO"

version=$(cargo metadata --no-deps --locked --format-version 1 | jq -r '.packages[] | select(.name == "pullgate") | .version')
target_dir=$(cargo metadata --no-deps --locked --format-version 1 | jq -r '.target_directory')
platform=$(plugin/fragment.sh --platform); arch=${platform#linux/}; arch=${arch//\//}
debarch=$(dpkg --print-architecture)
name=pullgate-$version-linux-$arch
deb_name=pullgate_${version}-1_$debarch.deb
epoch=$(git log -1 --format=%ct)

# installed_daemons: pids of processes running the package's /usr/bin/pullgated (deleted or not),
# one a line; zombies (stopped, not yet reaped by this shell) are not running.
installed_daemons() {
  local p exe
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    case $exe in /usr/bin/pullgated|"/usr/bin/pullgated (deleted)") ;; *) continue ;; esac
    grep -q '^State:[[:space:]]*Z' "$p/status" 2>/dev/null || echo "${p#/proc/}"
  done
}
no_installed_daemon() { local l; l=$(installed_daemons); [ -z "$l" ] || { echo "running: $l"; return 1; }; }
# mode_owner PATH WANT: stat's "MODE USER:GROUP" of PATH is WANT (e.g. "644 root:root").
mode_owner() { local got; got=$(stat -c '%a %U:%G' "$1" 2>&1) && [ "$got" = "$2" ] || { echo "$1: $got (want $2)"; return 1; }; }
absent() { local p; for p in "$@"; do [ ! -e "$p" ] && [ ! -L "$p" ] || { echo "$p exists"; return 1; }; done; }
present() { local p; for p in "$@"; do [ -e "$p" ] || { echo "$p missing"; return 1; }; done; }
same() { cmp -- "$1" "$2"; }
# config_state: containerd's and systemd's configuration on this machine (files, links, hashes).
config_state() {
  local d
  for d in /etc/containerd /etc/systemd/system; do
    [ -e "$d" ] || { echo "$d absent"; continue; }
    find "$d" -printf '%p %y %m %l\n' | sort
    find "$d" -type f -exec sha256sum {} + | sort
  done
}

log "release files, built twice"
R1=$WORK/release-1
R2=$WORK/elsewhere/release-files-again
check "scripts/release.sh builds the release files" env PULLGATE_RELEASE_DIR="$R1" scripts/release.sh
for f in "${MTIME_INPUTS[@]}"; do MTIMES[$f]=$(stat -c %Y "$f"); done
touch -m -d '2001-02-03 04:05:06' "${MTIME_INPUTS[@]}"
check "scripts/release.sh builds them again (other mtimes, umask 077, time zone, locale and output path)" \
  env PULLGATE_RELEASE_DIR="$R2" TZ=Pacific/Kiritimati LC_ALL=C.UTF-8 bash -c 'umask 077 && exec scripts/release.sh'
for f in "${!MTIMES[@]}"; do touch -m -d "@${MTIMES[$f]}" "$f"; done
MTIMES=()
tarball=$R1/$name.tar.gz
deb=$R1/$deb_name
check "SHA256SUMS names the tarball and the .deb, nothing else" \
  test "$(awk '{print $2}' "$R1/SHA256SUMS" 2>&1 | sort | paste -sd' ')" = "$(printf '%s\n' "$name.tar.gz" "$deb_name" | sort | paste -sd' ')"
check "SHA256SUMS verifies (first run)" bash -c "cd '$R1' && sha256sum --strict -c SHA256SUMS"
check "SHA256SUMS verifies (second run)" bash -c "cd '$R2' && sha256sum --strict -c SHA256SUMS"
check "both runs give the same SHA256SUMS" same "$R1/SHA256SUMS" "$R2/SHA256SUMS"
check "both runs give the same tarball" same "$tarball" "$R2/$name.tar.gz"
check "both runs give the same .deb" same "$deb" "$R2/$deb_name"
check "the output holds only the release files" test "$(ls -A "$R1" | LC_ALL=C sort | paste -sd' ')" = "$(printf '%s\n' SHA256SUMS "$name.tar.gz" "$deb_name" | LC_ALL=C sort | paste -sd' ')"
check "gzip stored no name and no time in the tarball" test "$(od -An -tu4 -j4 -N4 "$tarball" | tr -d ' ')" = 0
check "every tarball entry's time is the last commit's" \
  test "$(tar --full-time --utc -tvzf "$tarball" | awk '{print $4 " " $5}' | sort -u)" = "$(date -u -d "@$epoch" '+%F %T')"
check "every .deb entry's time is the last commit's" \
  test "$(dpkg-deb --fsys-tarfile "$deb" | tar --full-time --utc -tvf - | awk '{print $4 " " $5}' | sort -u)" = "$(date -u -d "@$epoch" '+%F %T')"

log "the tarball's contents"
want_tar=$(printf "$name/%s\n" "" LICENSE README.md config.toml.example plugin/ plugin/containerd-1.x.toml plugin/containerd-2.x.toml \
  plugin/crictl.yaml plugin/daemonset/ plugin/daemonset/install.sh plugin/daemonset/pullgate-installer.yaml \
  plugin/fragment.sh plugin/kubelet-config.yaml plugin/pullgate.service pullgate pullgated | LC_ALL=C sort)
got_tar=$(tar -tzf "$tarball" | LC_ALL=C sort)
check "the tarball holds exactly the required files" diff <(echo "$want_tar") <(echo "$got_tar")
# Owners and modes: root (0/0); executables and directories 0755, everything else 0644.
tar_modes() {
  tar --numeric-owner -tvzf "$tarball" | awk '{
    n = $6; want = "-rw-r--r--"
    if (n ~ /\/$/) want = "drwxr-xr-x"
    else if (n ~ /\/(pullgate|pullgated|plugin\/fragment\.sh|plugin\/daemonset\/install\.sh)$/) want = "-rwxr-xr-x"
    if ($1 != want || $2 != "0/0") { print "wrong: " $0; bad = 1 }
  } END { exit bad }'
}
check "tarball entries are owned by 0/0 with modes 0755 (directories, executables) and 0644" tar_modes
X=$WORK/tarball; mkdir -p "$X" && tar -xzf "$tarball" -C "$X"
for f in LICENSE README.md config.toml.example plugin/containerd-1.x.toml plugin/containerd-2.x.toml plugin/crictl.yaml \
         plugin/fragment.sh plugin/kubelet-config.yaml plugin/pullgate.service plugin/daemonset/install.sh plugin/daemonset/pullgate-installer.yaml; do
  check "tarball's $f is the repository's" same "$X/$name/$f" "$f"
done
check "tarball's binaries are the release build's" bash -c "cmp '$X/$name/pullgate' '$target_dir/release/pullgate' && cmp '$X/$name/pullgated' '$target_dir/release/pullgated'"
check_out "tarball's pullgate is version $version" "pullgate $version" "$X/$name/pullgate" --version
# The positive controls' switches (cargo feature defence-off) leave their variable's name in a
# binary built with them (shown on the test binary, when the suite built it), and in no
# released one.
if [ -x "$target_dir/release/pullgate-defence-off" ]; then
  check "the test binary pullgate-defence-off holds the defence switches (PULLGATE_DEFENCE_OFF)" grep -qaF PULLGATE_DEFENCE_OFF "$target_dir/release/pullgate-defence-off"
else na "the test binary pullgate-defence-off is not built here (the positive controls build it)"; fi
# no_switches FILE...: every FILE exists, is not empty, and holds no PULLGATE_DEFENCE_OFF (grep
# must answer "not found", not fail).
no_switches() {
  local f
  for f; do
    [ -s "$f" ] || { echo "$f missing"; return 1; }
    grep -qaF PULLGATE_DEFENCE_OFF "$f"; [ $? -eq 1 ] || { echo "$f holds them"; return 1; }
  done
}
check "neither released binary holds the test-only defence switches (no PULLGATE_DEFENCE_OFF in the tarball's)" \
  no_switches "$X/$name/pullgate" "$X/$name/pullgated"
# (cargo-deb strips the binaries it packs: the .deb's are checked themselves.)
mkdir -p "$WORK/debx" && dpkg-deb -x "$deb" "$WORK/debx" || fail "dpkg-deb -x of the .deb"
check "neither of the .deb's binaries holds the test-only defence switches" \
  no_switches "$WORK/debx/usr/bin/pullgate" "$WORK/debx/usr/bin/pullgated"
check "tarball's unit runs /usr/local/bin/pullgate (where docs/install.md installs the tarball's binaries)" \
  grep -qx 'ExecStart=/usr/local/bin/pullgate serve --config /etc/pullgate/config.toml' "$X/$name/plugin/pullgate.service"

fresh() {
  local bad=0 p
  ! dpkg-query -W pullgate >/dev/null 2>&1 || { echo "the pullgate package is installed"; bad=1; }
  for p in /etc/pullgate /var/lib/pullgate /run/pullgate /usr/bin/pullgate /usr/bin/pullgated /usr/local/bin/pullgate /usr/local/bin/pullgated; do [ ! -e "$p" ] || { echo "$p exists"; bad=1; }; done
  return $bad
}
if ! out=$(fresh); then
  fail "this machine already has pullgate installed, or its files: $out (the test does not touch them)"
  summary "e2e package"; exit 1
fi
pass "no pullgate package or installed files on this machine before the test"

log "installing from the tarball (docs/install.md's commands)"
DL=$WORK/download; mkdir -p "$DL/none" "$DL/bad" && cp "$tarball" "$R1/SHA256SUMS" "$DL/" && cp "$R1/SHA256SUMS" "$DL/none/"
check "sha256sum --ignore-missing --strict -c SHA256SUMS verifies the tarball downloaded alone" \
  bash -c "cd '$DL' && sha256sum --ignore-missing --strict -c SHA256SUMS"
check "... and fails where none of the files is" bash -c "cd '$DL/none' && ! sha256sum --ignore-missing --strict -c SHA256SUMS"
cp "$tarball" "$R1/SHA256SUMS" "$DL/bad/" && printf 'x' >> "$DL/bad/$name.tar.gz"
check "... and fails on a changed tarball" bash -c "cd '$DL/bad' && ! sha256sum --ignore-missing --strict -c SHA256SUMS"
check "tar -xzf unpacks it" bash -c "cd '$DL' && tar -xzf '$name.tar.gz'"
TARBALL_INSTALLED=1
check "install -m 0755 pullgate pullgated /usr/local/bin/ (in the unpacked directory)" \
  bash -c "cd '$DL/$name' && install -m 0755 pullgate pullgated /usr/local/bin/"
check_out "/usr/local/bin/pullgate is version $version" "pullgate $version" /usr/local/bin/pullgate --version
check "/usr/local/bin/pullgated is the tarball's" same /usr/local/bin/pullgated "$DL/$name/pullgated"
check "the tarball's binaries are removed as docs/install.md says" rm /usr/local/bin/pullgate /usr/local/bin/pullgated
TARBALL_INSTALLED=

log "the Debian package"
check "the .deb is pullgate $version-1 for $debarch" \
  test "$(dpkg-deb -f "$deb" Package Version Architecture 2>&1 | paste -sd' ')" = "Package: pullgate Version: $version-1 Architecture: $debarch"
want_deb=$(printf '%s\n' ./etc/pullgate/config.toml ./usr/bin/pullgate ./usr/bin/pullgated ./usr/lib/systemd/system/pullgate.service \
  ./usr/share/doc/pullgate/README.md ./usr/share/doc/pullgate/changelog.Debian.gz ./usr/share/doc/pullgate/changelog.gz \
  ./usr/share/doc/pullgate/copyright ./usr/share/lintian/overrides/pullgate ./usr/share/pullgate/containerd-1.x.toml \
  ./usr/share/pullgate/containerd-2.x.toml ./usr/share/pullgate/crictl.yaml ./usr/share/pullgate/fragment.sh \
  ./usr/share/pullgate/kubelet-config.yaml | LC_ALL=C sort)
got_deb=$(dpkg-deb --fsys-tarfile "$deb" | tar -tf - | grep -v '/$' | LC_ALL=C sort)
check "the .deb holds exactly the required files" diff <(echo "$want_deb") <(echo "$got_deb")
check "the .deb's one conffile is /etc/pullgate/config.toml" \
  test "$(dpkg-deb --ctrl-tarfile "$deb" | tar -xOf - ./conffiles 2>&1)" = /etc/pullgate/config.toml
check "the .deb does not depend on containerd (it recommends it)" \
  bash -c "! dpkg-deb -f '$deb' Depends | grep -q containerd && dpkg-deb -f '$deb' Recommends | grep -qx containerd"

log "lintian"
# Every tag lintian reports (errors down to pedantic ones) fails; an override that matches
# nothing is reported too (unused-override).
lintian_out=$(lintian --pedantic --display-info --fail-on error,warning,info,pedantic "$deb" 2>&1); lintian_rc=$?
lintian_tags=$(grep -E '^[EWIPX]: ' <<<"$lintian_out")
if [ "$lintian_rc" -eq 0 ] && [ -z "$lintian_tags" ]; then pass "lintian reports no tag (pedantic)"
else fail "lintian (rc=$lintian_rc): $(shown 800 "$lintian_out")"; fi
# overrides_justified FILE: every override line follows a comment line saying why.
overrides_justified() {
  awk '/^[[:space:]]*$/ { prev = ""; next }
       /^#/ { prev = $0; next }
       { if (length(prev) < 20) { print "no reason above: " $0; bad = 1 }; n++; prev = "" }
       END { if (n == 0) { print "no override"; bad = 1 }; exit bad }' "$1"
}
check "each lintian override in plugin/deb/lintian-overrides has its reason on the line above" overrides_justified plugin/deb/lintian-overrides
check "the overrides were used (lintian --show-overrides lists each)" bash -c "
  n=\$(grep -cvE '^(#|[[:space:]]*\$)' plugin/deb/lintian-overrides)
  o=\$(lintian --pedantic --display-info --show-overrides '$deb' 2>/dev/null | grep -c '^O: ')
  [ \"\$n\" -eq \"\$o\" ] || { echo \"\$n overrides, \$o used\"; exit 1; }"

log "dpkg -i"
before=$(config_state)
INSTALLED=1
check "dpkg -i installs the package" bash -c "cd '$R1' && dpkg -i '$deb_name'"
check "dpkg says pullgate is installed" test "$(dpkg-query -W -f='${db:Status-Abbrev}' pullgate 2>&1)" = "ii "
check "/usr/bin/pullgate: 0755 root:root" mode_owner /usr/bin/pullgate "755 root:root"
check "/usr/bin/pullgated: 0755 root:root" mode_owner /usr/bin/pullgated "755 root:root"
check_out "/usr/bin/pullgate is version $version" "pullgate $version" /usr/bin/pullgate --version
check "/etc/pullgate: 0755 root:root" mode_owner /etc/pullgate "755 root:root"
# No secret in it (credentials stay with the clients; the node's key is under the root, 0600).
check "/etc/pullgate/config.toml: 0644 root:root, config.toml.example's text" \
  bash -c "$(declare -f mode_owner); mode_owner /etc/pullgate/config.toml '644 root:root' && cmp /etc/pullgate/config.toml config.toml.example"
check "dpkg lists /etc/pullgate/config.toml as a conffile" bash -c "dpkg-query -W -f='\${Conffiles}\n' pullgate | awk '{print \$1}' | grep -qx /etc/pullgate/config.toml"
for f in containerd-1.x.toml containerd-2.x.toml crictl.yaml kubelet-config.yaml fragment.sh; do
  m=644; [ "$f" = fragment.sh ] && m=755
  check "/usr/share/pullgate/$f: 0$m root:root, the repository's plugin/$f" \
    bash -c "$(declare -f mode_owner); mode_owner /usr/share/pullgate/$f '$m root:root' && cmp /usr/share/pullgate/$f plugin/$f"
done
check "/usr/share/doc/pullgate/README.md is README.md" same /usr/share/doc/pullgate/README.md README.md
check "/usr/share/doc/pullgate/changelog.gz is CHANGELOG.md" bash -c "zcat /usr/share/doc/pullgate/changelog.gz | cmp - CHANGELOG.md"
check "the package's unit runs /usr/bin/pullgate with /etc/pullgate/config.toml" \
  grep -qx 'ExecStart=/usr/bin/pullgate serve --config /etc/pullgate/config.toml' /usr/lib/systemd/system/pullgate.service
check "the unit's Documentation= file is installed" \
  bash -c "grep -qx 'Documentation=file:///usr/share/doc/pullgate/README.md' /usr/lib/systemd/system/pullgate.service && test -f /usr/share/doc/pullgate/README.md"
check "the package's unit is plugin/pullgate.service but for the binary's path" \
  bash -c "diff <(sed 's#/usr/local/bin/pullgate #/usr/bin/pullgate #' plugin/pullgate.service) /usr/lib/systemd/system/pullgate.service"
check "the installed lintian overrides are plugin/deb/lintian-overrides" same /usr/share/lintian/overrides/pullgate plugin/deb/lintian-overrides
check "installing changed neither containerd's nor systemd's configuration (the unit is not enabled)" \
  diff <(echo "$before") <(config_state)
check "installing started no pullgate" no_installed_daemon
check "installing created no /var/lib/pullgate or /run/pullgate (the daemon makes them)" absent /var/lib/pullgate /run/pullgate
check_out "the installed fragment.sh prints the 2.x fragment for this node's platform ($platform)" "platform = \"$platform\"" /usr/share/pullgate/fragment.sh 2.x

log "the demo's flow from the installed files (containerd $V)"
use_tls_registries >/dev/null || { fail "this run's CA"; summary "e2e package"; exit 1; }
start_registry demo htpasswd alice alice-password bob bob-password >/dev/null || { fail "registry"; summary "e2e package"; exit 1; }
IMG=$REG_demo/private/app:v1
MSG="hello from a packaged pullgate"
python3 "$REPO/tests/mkimage.py" "$WORK/img" --tag v1 --message "$MSG" >/dev/null
check "push the private image (alice)" push_image "$WORK/img" v1 "$IMG" alice:alice-password
# The operator's edits of the conffile: this run's containerd socket and the registry's CA
# (containerd's hosts directory); root and sockets stay the package's defaults.
sed -i -e "s#^containerd_address = .*#containerd_address = \"$WORK/containerd/containerd.sock\"#" \
       -e "s|^# hosts_dir = .*|hosts_dir = \"$REG_HOSTS\"|" /etc/pullgate/config.toml
check "the edited /etc/pullgate/config.toml names this run's containerd and hosts directory" \
  bash -c "grep -qx 'containerd_address = \"$WORK/containerd/containerd.sock\"' /etc/pullgate/config.toml && grep -qx 'hosts_dir = \"$REG_HOSTS\"' /etc/pullgate/config.toml"
/usr/bin/pullgate serve --config /etc/pullgate/config.toml >>"$WORK/pullgated.log" 2>&1 &
PG_PID=$!; PIDS+=("$PG_PID")
if wait_for 20 test -S /run/pullgate/api.sock; then pass "pullgate serve from /usr/bin with /etc/pullgate/config.toml listens"
else fail "pullgated did not start: $(tail -c 600 "$WORK/pullgated.log")"; summary "e2e package"; exit 1; fi
check "the daemon runs /usr/bin/pullgated" test "$(readlink "/proc/$PG_PID/exe")" = /usr/bin/pullgated
check "/run/pullgate/snapshotter.sock: 0600 root:root" mode_owner /run/pullgate/snapshotter.sock "600 root:root"
check "/run/pullgate/api.sock: 0600 root:root" mode_owner /run/pullgate/api.sock "600 root:root"
check "/var/lib/pullgate: 0700 root:root" mode_owner /var/lib/pullgate "700 root:root"
# containerd's own config: the file `containerd config default` writes (with the CRI plugin
# disabled: no Kubernetes on this node, and its root, state and socket under $WORK), merged by
# the installed `pullgate containerd-config` with the package's defaults (snapshotter socket
# /run/pullgate/snapshotter.sock, root /var/lib/pullgate) from /etc/pullgate/config.toml.
C=$WORK/containerd; mkdir -p "$C"
case $V in 1.6|1.7) cri='"io.containerd.grpc.v1.cri"' ;; *) cri='"io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime"' ;; esac
"$(containerd_bindir "$V")/containerd" config default > "$WORK/containerd-default.toml" 2>/dev/null
local_containerd_config "$WORK/containerd-default.toml" "$C/config.toml"
sed -i "s#^disabled_plugins = \[\]#disabled_plugins = [$cri]#" "$C/config.toml"
cp "$C/config.toml" "$WORK/containerd-config.before"
# names_pullgate FILE: FILE names pullgate (its plugin, snapshotter, socket or root).
names_pullgate() { grep -qE "proxy_plugins\.pullgate|[\"']pullgate[\"']|/run/pullgate|/var/lib/pullgate" "$1"; }
check "containerd $V's own config, CRI disabled" grep -q '^disabled_plugins = \["io.containerd.grpc.v1.cri' "$C/config.toml"
check "it names no pullgate" not names_pullgate "$C/config.toml"
check "pullgate containerd-config --content-sharing isolated merges pullgate into it" \
  /usr/bin/pullgate containerd-config --file "$C/config.toml" --content-sharing isolated --containerd-bin "$(containerd_bindir "$V")/containerd"
launch_containerd "$V" || { fail "containerd $V did not start"; summary "e2e package"; exit 1; }
check "containerd's merged config: pullgate at /run/pullgate/snapshotter.sock, root /var/lib/pullgate" \
  bash -c "grep -qE 'address = .?/run/pullgate/snapshotter.sock' '$C/config.toml' && grep -qE 'root = .?/var/lib/pullgate' '$C/config.toml'"
# snapshotters: the snapshotter plugins containerd lists, "ID STATUS" a line.
snapshotters() { ctr_ plugins ls | awk '$1 == "io.containerd.snapshotter.v1" {print $2, $NF}'; }
check "containerd lists pullgate as a snapshotter, and no other loaded" test "$(snapshotters | awk '$2 == "ok"' 2>&1)" = "pullgate ok"
check_containerd_version "$V"
check "A pulls the private image with its password (pullgate pull, the default API socket)" \
  /usr/bin/pullgate pull -n A --user alice:alice-password "$IMG"
check_out "A runs it" "$MSG" ctr_ -n A run --rm --snapshotter pullgate "$IMG" a1
check "/var/lib/pullgate/identity.key: 0600 root:root" mode_owner /var/lib/pullgate/identity.key "600 root:root"
top=$(/usr/bin/pullgate inspect "$IMG" 2>/dev/null | awk '/^  layer /{d=$0} END{print d}' | grep -o 'sha256:[0-9a-f]*' | head -1)
check "pullgate inspect names the image's top layer" test -n "$top"
check_err "B, without credentials, cannot pull it through containerd" 'unauthorized|401|denied|authoriz' \
  ctr_ -n B images pull "${CTRF[@]}" --snapshotter pullgate "$IMG"
check_err "B, without credentials, cannot pull it through pullgate" 'unauthorized|401|denied|credential|authoriz' \
  /usr/bin/pullgate pull -n B "$IMG"
check "B holds no image of it" no_image B "$IMG"
check "B's content store holds none of its layers" lacks "${top:-sha256:none}" ctr_ -n B content ls
# The bytes reaching B some other way (its build directory): imported, they are refused at run.
leaked=$(layout_tar "$WORK/img" "$IMG")
check "B imports the image's bytes" ctr_ -n B images import --no-unpack "$leaked"
check_refused "B's run of the imported image is refused by pullgate" 'pullgate denied' "$MSG" \
  ctr_ -n B run --rm --snapshotter pullgate "$IMG" b1
check "B has no unpacked image (its top layer is no committed snapshot in B)" not image_unpacked B "$IMG"
settle_gc B
ctr_ -n B images rm --sync "$IMG" >/dev/null 2>&1
check "B pulls it with its own password" /usr/bin/pullgate pull -n B --user bob:bob-password "$IMG"
check_out "B runs it" "$MSG" ctr_ -n B run --rm --snapshotter pullgate "$IMG" b2
check "pullgate grants lists a grant for B" bash -c "/usr/bin/pullgate grants -n B | awk 'NR > 1' | grep -q ."
check "the ledger is /var/lib/pullgate/metadata.redb" test -s /var/lib/pullgate/metadata.redb

log "removing, as docs/install.md says (containerd $V)"
check "A runs a container from the image in the background" ctr_ -n A run -d --snapshotter pullgate "$IMG" long1 sleep 600
check_out "it runs" RUNNING ctr_ -n A tasks ls
# 1. Drain: the node's containers removed.
check "ctr tasks kill" ctr_ -n A tasks kill -s SIGKILL long1
wait_for 20 not bash -c "'${CTR[0]}' -a '$CTRD_SOCK' -n A tasks ls -q | grep -qx long1"
ctr_ -n A tasks rm long1 >/dev/null 2>&1
check "ctr containers rm" ctr_ -n A containers rm long1
check "ctr snapshots --snapshotter pullgate ls lists what pullgate still holds in A (only the image's layers)" \
  bash -c "out=\$('${CTR[0]}' -a '$CTRD_SOCK' -n A snapshots --snapshotter pullgate ls) && ! grep -q Active <<<\"\$out\""
# 2. The fragment undone.
check "pullgate containerd-config --undo puts back containerd's config" /usr/bin/pullgate containerd-config --file "$C/config.toml" --undo
check "containerd's config is byte for byte what it was before the merge" same "$C/config.toml" "$WORK/containerd-config.before"
check "and no backup of it is left" absent "$C/config.toml.pullgate-backup" "$C/config.toml.pullgate-merged"
# 3. Labels naming pullgate: the public namespace's shareable label.
if listing ctr_ namespaces ls | grep -q '^pullgate-public '; then
  check "ctr namespaces label pullgate-public containerd.io/namespace.shareable=" ctr_ namespaces label pullgate-public containerd.io/namespace.shareable=
fi
check "no namespace label names pullgate or makes a namespace shareable" \
  bash -c "out=\$('${CTR[0]}' -a '$CTRD_SOCK' namespaces ls) && ! grep -qE 'pullgate|shareable=true' <<<\"\$out\""
# 4. containerd restarted on its restored config (the test's stand-in for systemctl restart).
kill "$CTRD_PID"; wait "$CTRD_PID" 2>/dev/null
launch_containerd "$V" || { fail "containerd $V did not start again on its own config"; summary "e2e package"; exit 1; }
check "containerd runs with overlayfs loaded" bash -c "grep -qx 'overlayfs ok' <<<\"\$1\"" _ "$(snapshotters)"
check "and no pullgate plugin" not bash -c "'${CTR[0]}' -a '$CTRD_SOCK' plugins ls | grep -q pullgate"
log "dpkg -r"
if [ -d /run/systemd/system ]; then echo "  (systemd is PID 1 here: prerm stops pullgate.service, and its fallback any other pullgated)"
else echo "  (no systemd as PID 1 here: prerm's fallback stops the daemon by its executable)"; fi
check "the daemon runs before removal" test -n "$(installed_daemons)"
check "dpkg -r removes the package" dpkg -r pullgate
check "the daemon was stopped" no_installed_daemon
check "the daemon stopped on SIGTERM (it removed its sockets)" absent /run/pullgate/snapshotter.sock /run/pullgate/api.sock
check "the binaries, the unit and the shared files are gone" \
  absent /usr/bin/pullgate /usr/bin/pullgated /usr/lib/systemd/system/pullgate.service /usr/share/pullgate /usr/share/doc/pullgate/README.md
check "the ledger and the node's key are kept" present /var/lib/pullgate/metadata.redb /var/lib/pullgate/identity.key
check "the conffile is kept, with the operator's edits" grep -qx "containerd_address = \"$WORK/containerd/containerd.sock\"" /etc/pullgate/config.toml
check "dpkg says only pullgate's configuration remains" test "$(dpkg-query -W -f='${db:Status-Abbrev}' pullgate 2>&1)" = "rc "

check "nothing mounts from /var/lib/pullgate" not grep -q /var/lib/pullgate /proc/self/mountinfo
log "dpkg -P"
check "dpkg -P purges the package" dpkg -P pullgate
check "/etc/pullgate, /var/lib/pullgate and /run/pullgate are gone" absent /etc/pullgate /var/lib/pullgate /run/pullgate

log "containerd $V without pullgate"
check_out "A's image, still in A's content store, runs with overlayfs (unpacked there now)" "$MSG" ctr_ -n A run --rm "$IMG" a9
check "a new namespace pulls it with its password" ctr_ -n N images pull "${CTRF[@]}" --user alice:alice-password "$IMG"
check_out "and runs it" "$MSG" ctr_ -n N run --rm "$IMG" n1
check "N's snapshots are overlayfs's" bash -c "out=\$('${CTR[0]}' -a '$CTRD_SOCK' -n N snapshots --snapshotter overlayfs ls) && [ \$(awk 'NR > 1' <<<\"\$out\" | wc -l) -ge 1 ]"
check "containerd's config names no pullgate" not names_pullgate "$C/config.toml"
check "dpkg no longer knows pullgate" not dpkg-query -W pullgate
check "containerd's and systemd's configuration are as before the installation" diff <(echo "$before") <(config_state)
INSTALLED=

summary "e2e package"
