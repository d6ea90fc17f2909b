#!/usr/bin/env bash
# containerd's own integration tests (integration/client of the containerd module of the exact
# version under test, built with `go test -c` by scripts/setup.sh), run twice against one real
# containerd of the given version: once with overlayfs as the tests' snapshotter and once with
# pullgate (TEST_SNAPSHOTTER, which the tests' TestMain writes into their namespace's
# containerd.io/defaults/snapshotter label). The set of tests that pass with pullgate must equal
# the set that passes with overlayfs: both counts are printed, and any difference by name.
#
# The containerd: lib.sh's (the operator's fragment from plugin/, content_sharing_policy
# "isolated", pullgate registered as a proxy plugin) with the built-in snapshotters kept, so
# that both runs use the same containerd; in the overlayfs run the fragment's snapshotter
# settings (the transfer service's unpack snapshotter, and CRI's, which is off) name overlayfs
# instead of pullgate. (2.x: CRI's sandbox controllers are disabled too, below.) Each run gets a fresh containerd root; pullgate runs throughout.
# The tests start that containerd themselves, through a wrapper (below).
#
# Images: the tests pull their images by their real names (ghcr.io/containerd/busybox:1.36,
# registry.k8s.io/pause:3.8, ...) through containerd's default resolver, over HTTPS. They are
# built from busybox-static (tests/mkctrdimages.py) and served by a local TLS registry
# (docker-registry) whose certificate, signed by this run's own CA, names those hosts; the test
# binary and the containerd get SSL_CERT_FILE=<that CA> and HTTPS_PROXY=<tests/connectproxy.py,
# which tunnels every CONNECT to that registry>. No global state (hosts file, CA store) is
# touched. Images pinned by the digest of a real registry's manifest (1.7's schema 1 images,
# 2.4's busybox by digest) cannot be reproduced: the tests that pull them fail in both runs
# (docs/clients.md lists them).
#
# Which tests: SUITE_RUN below (a -test.run expression; printed), SUITE_SKIP (-test.skip).
# Usage: tests/e2e_containerd_suite.sh VERSION   (1.7, 2.1 or 2.4)
source "$(dirname "$0")/lib.sh"
V=${1:?usage: e2e_containerd_suite.sh 1.7|2.1|2.4}
trap cleanup EXIT
BIN=$(containerd_bindir "$V") || exit 1
# The exact version of the containerd under test (`containerd --version`: "1.7.24~ds1",
# "2.1.9+unknown", "2.4.2"), whose module's tests scripts/setup.sh built.
CV=$("$BIN/containerd" --version | awk '{print $3}' | sed -E 's/^v//; s/[~+-].*//')
SUITE_DIR=${SUITE_DIR:-$DEPS/containerd-client-test-v$CV}
SUITE_BIN=$SUITE_DIR/client.test
SUITE_RUN=${SUITE_RUN:-.}
# Skipped in both runs: TestIDMappedOverlay (2.x) unpacks its image into the tests' snapshotter
# (TEST_SNAPSHOTTER) and then asks the overlayfs snapshotter, named in the test, for a snapshot
# on that image's layers: it can pass only when TEST_SNAPSHOTTER is overlayfs ("parent snapshot
# ... does not exist" with any other).
SUITE_SKIP=${SUITE_SKIP-^TestIDMappedOverlay\$}
SUITE_TIMEOUT=${SUITE_TIMEOUT:-20m}
SUITE_ATTEMPTS=${SUITE_ATTEMPTS:-2}

log "containerd $V ($CV), its integration/client tests: setup"
[ -x "$SUITE_BIN" ] || { fail "containerd $CV's integration/client test binary is not built at $SUITE_BIN (scripts/setup.sh builds it)"; summary "containerd's integration tests (containerd $V)"; exit 1; }

# The images, and a TLS registry serving them under every host name the tests use.
python3 "$REPO/tests/mkctrdimages.py" "$WORK/images" > "$WORK/images.list" || { fail "build the test images"; exit 1; }
HOSTNAMES=(ghcr.io registry.k8s.io gcr.io mcr.microsoft.com docker.io registry-1.docker.io)
TLS=$WORK/tls; mkdir -p "$TLS"
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$TLS/ca.key" -out "$TLS/ca.pem" -days 2 -subj "/CN=pullgate-test-ca" >/dev/null 2>&1
san=$(printf 'DNS:%s,' "${HOSTNAMES[@]}")IP:127.0.0.1
openssl req -newkey rsa:2048 -nodes -keyout "$TLS/key.pem" -out "$TLS/req.csr" -subj "/CN=pullgate-test-registry" >/dev/null 2>&1
openssl x509 -req -in "$TLS/req.csr" -CA "$TLS/ca.pem" -CAkey "$TLS/ca.key" -CAcreateserial -days 2 \
  -extfile <(printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$san") -out "$TLS/cert.pem" >/dev/null 2>&1 \
  || { fail "make the registry's certificate"; exit 1; }
REGDIR=$WORK/registry-tls; mkdir -p "$REGDIR/data"
_launch_tls_registry() {
  registry_config "$REGDIR" "$PORT_1" "  tls:
    certificate: $TLS/cert.pem
    key: $TLS/key.pem"
  docker-registry serve "$REGDIR/config.yml" >>"$REGDIR/log" 2>&1 &
  PIDS+=($!); LAUNCHED+=($!)
  python3 "$REPO/tests/connectproxy.py" --port "$PORT_2" --to "127.0.0.1:$PORT_1" --log "$WORK/proxy.log" >>"$WORK/proxy.out" 2>&1 &
  PIDS+=($!); LAUNCHED+=($!)
  wait_serving 20 bash -c "curl -s -o /dev/null --cacert '$TLS/ca.pem' https://127.0.0.1:$PORT_1/v2/ && curl -s -o /dev/null --cacert '$TLS/ca.pem' -x http://127.0.0.1:$PORT_2 https://ghcr.io/v2/"
}
launch_on_free_ports 2 _launch_tls_registry || { fail "the TLS registry and its proxy did not start: $(tail -5 "$REGDIR/log" "$WORK/proxy.out")"; summary; exit 1; }
REG=127.0.0.1:$PORT_1
PROXY=http://127.0.0.1:$PORT_2
# (The `http:` block registry_config writes is followed by our tls: lines: check they took.)
check "the registry speaks TLS with this run's certificate" curl -sf --cacert "$TLS/ca.pem" -o /dev/null "https://$REG/v2/"
while read -r dir tag name; do
  skopeo copy --quiet --all --dest-tls-verify=false "oci:$dir:$tag" "docker://$REG/${name#*/}:$tag" >/dev/null \
    || fail "push $name:$tag"
done < "$WORK/images.list"
check_out "ghcr.io/containerd/busybox:1.36 is served through the proxy under its own name, as an index" \
  'application/vnd.oci.image.index.v1+json' \
  curl -sf --cacert "$TLS/ca.pem" -x "$PROXY" -H 'Accept: application/vnd.oci.image.index.v1+json' https://ghcr.io/v2/containerd/busybox/manifests/1.36

PG=$WORK/pg
PG_LOG_LEVEL=debug start_pullgate "$PG" || exit 1   # (debug: its log counts the snapshots it creates)

# The tests start the containerd they test themselves (TestMain; some tests restart or kill it,
# or read its file descriptors), as `containerd --root /var/lib/containerd-test --state
# /run/containerd-test --log-level debug --config <theirs> --address <-address>`, found on PATH.
# This wrapper, first on their PATH, runs that one as this run's containerd: this run's config
# (its root under $WORK, pullgate registered) instead of theirs, their --state kept: some tests
# read the shims' files there. The tests run in a mount namespace of their own with a tmpfs on
# /run (unshare), so that this state, and the runc state under /run/containerd/runc of their
# containers, are theirs alone, and nothing is left on the machine; and in a PID namespace of
# their own (bash its init, reaping the shims), since two of them look for leftover processes in
# `ps ax`, which would otherwise list every other test's containers on the machine. Every other
# containerd they start (tests of the daemon's own config) runs as asked.
mkdir -p "$WORK/bin"
cat > "$WORK/bin/containerd" <<SH
#!/bin/bash
case " \$* " in
  *" --root /var/lib/containerd-test "*)
    a=(); while [ \$# -gt 0 ]; do case \$1 in --root|--config) shift 2 ;; *) a+=("\$1"); shift ;; esac; done
    exec "$BIN/containerd" --config "$WORK/containerd/config.toml" "\${a[@]}" ;;
  *) exec "$BIN/containerd" "\$@" ;;
esac
SH
chmod +x "$WORK/bin/containerd"

# suite_attempt NAME SNAPSHOTTER RUN OUT: one run of the test binary (-test.run RUN), its output
# in OUT.log, its passed, failed and skipped top-level tests in OUT.{passed,failed,skipped}.
suite_attempt() {
  local name=$1 snap=$2 run=$3 out=$4 t0=$SECONDS rc started
  # The tests read their testdata from the working directory; they and their containerd pull
  # through the proxy. (--kill-child: if timeout ends unshare, the namespace's processes go too.)
  (cd "$SUITE_DIR" && PATH="$WORK/bin:$SUITE_DIR/bin:$BIN:$PATH" TMPDIR="$WORK/tmp-$name" HTTPS_PROXY=$PROXY SSL_CERT_FILE=$TLS/ca.pem \
     TEST_SNAPSHOTTER=$snap timeout 40m unshare -m -p -f --kill-child --mount-proc --propagation private -- \
     bash -c 'mount -t tmpfs -o mode=755 tmpfs /run && "$@"; exit $?' - \
     "$SUITE_BIN" -test.root -test.v -test.timeout "$SUITE_TIMEOUT" \
       -test.run "$run" ${SUITE_SKIP:+-test.skip "$SUITE_SKIP"} -no-criu -address "$WORK/containerd/containerd.sock") > "$out.log" 2>&1
  rc=$?
  grep -E '^--- PASS: ' "$out.log" | awk '{print $3}' | sort > "$out.passed"
  grep -E '^--- FAIL: ' "$out.log" | awk '{print $3}' | sort > "$out.failed"
  grep -E '^--- SKIP: ' "$out.log" | awk '{print $3}' | sort > "$out.skipped"
  # A test that panicked or timed out ends the binary: the tests it never reached are in none
  # of the lists (both runs must run the same tests, checked below); the one it was running is
  # counted as failed.
  started=$(grep -E '^=== RUN +Test[^/]*$' "$out.log" | awk '{print $3}' | sort -u)
  comm -23 <(echo "$started") <(sort -u "$out.passed" "$out.failed" "$out.skipped") | grep . >> "$out.failed"
  sort -o "$out.failed" "$out.failed"
  echo "  exit $rc, $((SECONDS - t0)) s: $(wc -l < "$out.passed") passed, $(wc -l < "$out.failed") failed, $(wc -l < "$out.skipped") skipped"
  pkill -9 -f "$BIN/containerd --config $WORK/containerd/config.toml" 2>/dev/null   # (the tests' containerd, if the binary died)
  pkill -9 -f "containerd-shim-runc-v2 .*-address $WORK/containerd/" 2>/dev/null
}

# run_suite NAME SNAPSHOTTER: the tests with TEST_SNAPSHOTTER=SNAPSHOTTER against a fresh
# containerd (its root under $WORK/containerd, started and stopped by the tests through the
# wrapper); then that containerd is started again to read what the tests left (the namespace's
# default snapshotter label, the snapshots), stopped, and its directory kept as
# $WORK/containerd-NAME. The passed, failed and skipped top-level tests into
# $WORK/NAME.{passed,failed,skipped}; the run's time into T_NAME.
run_suite() {
  local name=$1 snap=$2 t0=$SECONDS created0
  created0=$(grep -c 'DEBUG create snapshot' "$PG/log")
  log "containerd's integration/client tests, TEST_SNAPSHOTTER=$snap"
  mkdir -p "$WORK/containerd" "$WORK/tmp-$name"
  containerd_config "$V" "$PG/snapshotter.sock" keep-builtin || { fail "$name: containerd config"; return 1; }
  # NRI off: on 2.x it would listen on /var/run/nri, shared by every containerd on the machine.
  # 2.x: with CRI off, the pod sandbox controller (and the sandbox-controllers service over it)
  # fails to load ("no plugins registered for io.containerd.transfer.v1": it loads before the
  # transfer service), and the tests refuse a containerd with a plugin that failed to load:
  # both disabled (CRI's own, not under test here; the tests use neither).
  case $V in 2.*) sed -i 's#^disabled_plugins = \[\(.*\)\]#disabled_plugins = [\1, "io.containerd.podsandbox.controller.v1.podsandbox", "io.containerd.grpc.v1.sandbox-controllers"]#' "$WORK/containerd/config.toml" ;; esac
  printf '\n[plugins."io.containerd.nri.v1.nri"]\n  disable = true\n' >> "$WORK/containerd/config.toml"
  [ "$snap" = pullgate ] || sed -i "s#^\( *snapshotter = \)\"pullgate\"#\1\"$snap\"#" "$WORK/containerd/config.toml"
  # A first attempt runs every test; the tests that failed get a second one (SUITE_ATTEMPTS=2),
  # on the same containerd root: a test that passes then counts as passed and is listed.
  suite_attempt "$name" "$snap" "$SUITE_RUN" "$WORK/$name"
  : > "$WORK/$name.retried"
  local attempt=2 failed
  while [ "$attempt" -le "$SUITE_ATTEMPTS" ] && [ -s "$WORK/$name.failed" ]; do
    failed=$(paste -sd'|' "$WORK/$name.failed")
    echo "  attempt $attempt of the failed tests: $failed"
    suite_attempt "$name" "$snap" "^($failed)\$" "$WORK/$name-$attempt"
    sed "s/\$/ (attempt $attempt)/" "$WORK/$name-$attempt.passed" >> "$WORK/$name.retried"
    sort -u -o "$WORK/$name.passed" "$WORK/$name.passed" "$WORK/$name-$attempt.passed"
    comm -23 "$WORK/$name.failed" "$WORK/$name-$attempt.passed" > "$WORK/$name.failed.tmp" && mv "$WORK/$name.failed.tmp" "$WORK/$name.failed"
    attempt=$((attempt + 1))
  done
  printf -v "T_$name" '%s' $((SECONDS - t0))
  # The snapshots pullgate created meanwhile (its debug log: one line per Prepare or View).
  echo $(($(grep -c 'DEBUG create snapshot' "$PG/log") - created0)) > "$WORK/$name.pgcreated"
  launch_containerd "$V" || { fail "$name: containerd did not start again after the tests"; return 1; }
  check_containerd_version "$V"
  ctr_ namespaces ls 2>/dev/null | awk '$1 == "testing"' > "$WORK/$name.ns"
  ctr_ -n testing snapshots --snapshotter "$snap" ls 2>/dev/null | tail -n +2 | wc -l > "$WORK/$name.snapshots"
  kill "$CTRD_PID" 2>/dev/null; wait "$CTRD_PID" 2>/dev/null
  pkill -9 -f "containerd-shim-runc-v2 .*-address $WORK/containerd/" 2>/dev/null
  grep -F " $WORK/containerd/" /proc/self/mounts | awk '{print $2}' | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
  grep -F " $WORK/tmp-$name/" /proc/self/mounts | awk '{print $2}' | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
  mv "$WORK/containerd" "$WORK/containerd-$name"
}

echo "  tests: $SUITE_BIN (containerd $CV's integration/client)"
echo "  run:   $SUITE_RUN"
[ -n "$SUITE_SKIP" ] && echo "  skip:  $SUITE_SKIP"

run_suite overlayfs overlayfs
run_suite pullgate pullgate

log "containerd's integration tests: overlayfs vs pullgate (containerd $CV)"
for n in overlayfs pullgate; do
  printf -v "P_$n" '%s' "$(wc -l < "$WORK/$n.passed")"; printf -v "F_$n" '%s' "$(wc -l < "$WORK/$n.failed")"
  printf -v "S_$n" '%s' "$(wc -l < "$WORK/$n.skipped")"
done
printf '  %-28s %8s %8s %8s %6s\n' "TEST_SNAPSHOTTER" passed failed skipped time
printf '  %-28s %8d %8d %8d %5ss\n' overlayfs "$P_overlayfs" "$F_overlayfs" "$S_overlayfs" "$T_overlayfs"
printf '  %-28s %8d %8d %8d %5ss\n' pullgate "$P_pullgate" "$F_pullgate" "$S_pullgate" "$T_pullgate"
if [ "$F_overlayfs" -gt 0 ]; then echo "  failed with overlayfs (and so not required with pullgate):"; sed 's/^/    /' "$WORK/overlayfs.failed"; fi
for n in overlayfs pullgate; do
  [ -s "$WORK/$n.retried" ] && { echo "  passed with $n only on a later attempt:"; sed 's/^/    /' "$WORK/$n.retried"; }
done
echo "  hosts the tests asked the proxy for: $(sort -u "$WORK/proxy.log" 2>/dev/null | paste -sd' ')"
check "the tests ran with overlayfs ($P_overlayfs passed)" test "$P_overlayfs" -gt 0
only_o=$(comm -23 "$WORK/overlayfs.passed" "$WORK/pullgate.passed")
only_p=$(comm -13 "$WORK/overlayfs.passed" "$WORK/pullgate.passed")
[ -n "$only_o" ] && { echo "  passed with overlayfs, not with pullgate:"; sed 's/^/    /' <<<"$only_o"; }
[ -n "$only_p" ] && { echo "  passed with pullgate, not with overlayfs:"; sed 's/^/    /' <<<"$only_p"; }
check "the same tests pass with pullgate as with overlayfs ($P_pullgate vs $P_overlayfs)" test -z "$only_o" -a -z "$only_p"
check "both runs ran the same tests" test "$(sort "$WORK/overlayfs."{passed,failed,skipped})" = "$(sort "$WORK/pullgate."{passed,failed,skipped})"
check_out "the pullgate run's namespace had pullgate as its default snapshotter" "containerd.io/defaults/snapshotter=pullgate" cat "$WORK/pullgate.ns"
check "the pullgate run left snapshots in pullgate ($(cat "$WORK/pullgate.snapshots"))" test "$(cat "$WORK/pullgate.snapshots")" -gt 0
# Every test that unpacks an image or creates a container in the tests' namespace goes through
# pullgate (70 snapshots created in a whole run under 1.7.24, 80 under 2.1.9).
check "pullgate created the tests' snapshots in the pullgate run ($(cat "$WORK/pullgate.pgcreated"))" test "$(cat "$WORK/pullgate.pgcreated")" -gt 0
check "pullgate created no snapshot in the overlayfs run ($(cat "$WORK/overlayfs.pgcreated"))" test "$(cat "$WORK/overlayfs.pgcreated")" -eq 0
check_out "the overlayfs run's namespace had overlayfs as its default snapshotter" "containerd.io/defaults/snapshotter=overlayfs" cat "$WORK/overlayfs.ns"
if [ -n "$only_o" ] || [ -n "$only_p" ]; then
  for t in $only_o $only_p; do
    for n in pullgate overlayfs; do
      echo "--- $n: $t"
      awk -v t="$t" '$0 ~ "^=== RUN +"t"$" {p=1} p {print} p && $0 ~ "^--- (PASS|FAIL|SKIP): "t" " {exit}' "$WORK/$n.log" | grep -vE 'level=(debug|info)' | tail -25 | sed 's/^/    /'
    done
  done
fi
summary "containerd's integration tests (containerd $V, $CV): $P_overlayfs passed with overlayfs, $P_pullgate with pullgate"
