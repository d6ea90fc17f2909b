#!/usr/bin/env bash
# pullgate's whole test suite, from a fresh Debian 12 machine (run as root):
#   1. install everything (scripts/setup.sh: apt packages, containerd 1.7 and 2.1, nerdctl,
#      crictl, critest, kubelet and kube-apiserver from their Go modules, containerd's
#      integration tests, release build)
#   2. unit tests (cargo test)
#   3. containerd's snapshotter conformance suite against the daemon, through the proxy client
#      and through containerd's metadata layer, for the overlay and the copying driver, plus
#      wrong requests straight to the socket
#   4. end to end under real containerd 1.6, 1.7, 2.1 and 2.4 (built from its Go module): the snapshotter, and the gate
#      (registries with htpasswd and token auth, an attacker's registry, both attacks,
#      hostile registries, bad input, concurrency, secrets; under containerd's default shared
#      content store), attacks on the trust model (under the isolated store the shipped
#      fragments set, and under the shared one on 1.6 and 2.1), the isolated store without
#      re-downloads, Kubernetes through pullgate's CRI front (containerd's real CRI plugin,
#      driven as kubelet drives it by the test CRI client in examples/cri.rs), `pullgate
#      doctor` against sound and wrongly configured containerds, and `pullgate
#      containerd-config` merging into the config files that containerd writes; under 1.7 and
#      2.1 also real
#      clients built from their Go modules: nerdctl with pullgate as its snapshotter, crictl
#      through the CRI front and directly, critest (the CRI validation suite) run against
#      containerd alone, directly with pullgate as the snapshotter and through the front, a real
#      kubelet (with and without an API server) through the front, and containerd's own
#      integration tests (integration/client, built from the source of that containerd's exact
#      version) against containerd alone and with pullgate as their snapshotter; each time the
#      pass sets with pullgate compared with containerd alone's
#      Under 1.7 and 2.1 also restarts of pullgate under a running workload: SIGTERM and
#      SIGKILL while containers run and pulls and container creations are in flight, each time
#      started again on the same root; and a Kubernetes cluster of two nodes (tests/e2e_cluster.sh:
#      the control plane and kubectl from the kubelet's module, a containerd and kubelet per node)
#      on which pullgate's DaemonSet installs pullgate, then Deployments, drains, refused
#      namespaces, a revoked credential and the registry's load per event
#   5. the crash test under containerd 1.6 and 2.1 (crash points, random SIGKILLs, containerd
#      killed mid-pull; then the conformance suite and a consistency check on the crashed root)
#   6. the differential test of image documents (tests/difftest): pullgate's reading against
#      containerd 1.7's, 2.1's and 2.4's own code, over hand-written attacks, seeded random
#      mutations and every document the end-to-end tests pushed or served
#   7. the release files and the Debian package (tests/e2e_package.sh): built twice and compared,
#      their contents, lintian, and the package installed on this machine, run under containerd
#      2.1 as the demo runs, removed and purged
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
"$here/scripts/setup.sh"

step() { printf '\n##### %s\n' "$*"; }
failed=()
# What failed, check by check, printed again at the very end (where a CI log's tail shows it).
details=$(mktemp)
# run_part NAME CMD...: runs one part of the suite, its output shown as it comes, and its time;
# when it fails, or passes another number of checks than tests/passes pins for NAME, NAME is
# counted as failed and its failed checks (else its last lines) kept for the end.
# (Its output goes to a file that is shown as it grows, not through a pipe: a daemon a test
# leaves behind would hold a pipe open and keep its reader waiting.)
run_part() {
  local name=$1 out pid start got want; shift
  out=$(mktemp); start=$(date +%s)
  "$@" > "$out" 2>&1 &
  pid=$!
  tail -n +1 -s 0.2 -f --pid="$pid" "$out"
  if wait "$pid"; then
    # Its "N passed, M failed" line (the last one) against the count pinned for it: a section
    # that silently stops running, or checks that vanish, fail the part.
    got=$(grep -oE '[0-9]+ passed, [0-9]+ failed' "$out" | tail -n 1 | cut -d' ' -f1) || got=
    want=$(awk -F '\t' -v n="$name" '$1 == n {print $2}' tests/passes)
    printf '(%s: %s s, %s passed, %s pinned in tests/passes)\n' "$name" "$(($(date +%s) - start))" "${got:-no count}" "${want:-none}"
    if [ -n "$want" ] && [ "${got:--}" = "$want" ]; then rm -f "$out"; return 0; fi
    failed+=("$name")
    printf '\n--- %s\n  FAIL %s passed where tests/passes pins %s (a change in checks updates the pin)\n' "$name" "${got:-no count}" "${want:-nothing}" >> "$details"
    rm -f "$out"; return 0
  fi
  printf '(%s: %s s, failed)\n' "$name" "$(($(date +%s) - start))"
  failed+=("$name")
  { printf '\n--- %s\n' "$name"; if grep -qE '^ *FAIL ' "$out"; then grep -E '^ *FAIL ' "$out" | head -n 40; else tail -n 30 "$out"; fi; } >> "$details"
  rm -f "$out"
}

step "unit tests"
# Once: its exit status counts, its output is shown (tests, results, panics).
unit_out=$(mktemp)
cargo test --release --locked > "$unit_out" 2>&1 && unit_rc=0 || unit_rc=$?
grep -E '^(test |running|test result)|panicked|FAILED|^error' "$unit_out" || true
[ "$unit_rc" -eq 0 ] || { failed+=("unit tests"); tail -n 40 "$unit_out"; }
rm -f "$unit_out"

# The test binary of the positive controls (below), built while the first parts run: its own
# cargo feature gives it its own build of the library, so target/release/pullgate and pullgated
# stay the release build. The controls part waits for it.
defence_build=$(mktemp -d)
( cargo build --release --locked --features defence-off --bin pullgate-defence-off > "$defence_build/log" 2>&1
  echo $? > "$defence_build/rc" ) &
defence_pid=$!

step "conformance suite (containerd snapshots/testsuite)"
(cd tests/conformance && GOPATH=/usr/share/gocode GO111MODULE=off GOPROXY=off GOFLAGS= go test -c -o conformance.test .)
for driver in overlay copy; do
  out=$(tests/conformance/conformance.test -test.root -test.v -test.run '^(TestProxy|TestMetadata|TestBadRequests)$' -pullgate "$here/target/release/pullgate" -driver "$driver" 2>&1) && rc=0 || rc=$?
  grep -E '^\s*--- (FAIL|SKIP)|^\s+(testsuite|pullgate_test|badrequests_test)\.go' <<<"$out" | grep -v 'EROFS is expected' || true
  passed=$(grep -cE '^\s*--- PASS: Test[A-Za-z]+/' <<<"$out" || true)
  skipped=$(grep -cE '^\s*--- SKIP' <<<"$out" || true)
  printf 'conformance (%s driver): %d subtests passed, %d skipped (upstream skips Rename for every snapshotter), exit %d\n' "$driver" "$passed" "$skipped" "$rc"
  [ "$rc" -eq 0 ] || { failed+=("conformance $driver"); grep -E -A20 -- '--- FAIL' <<<"$out" | head -100 || true; }
  # A suite that ran nothing (a renamed test, a -test.run that matches nothing) also exits 0:
  # require what docs/testing.md states: 41 subtests passed, and only the suite's Rename skipped
  # (once through the proxy client, once through containerd's metadata layer).
  skips=$(grep -oE -- '--- SKIP: [^ ]+' <<<"$out" | awk '{print $3}' | sort | paste -sd' ' || true)
  if [ "$passed" -ne 41 ] || [ "$skips" != "TestMetadata/suite/Rename TestProxy/Rename" ]; then
    echo "conformance ($driver driver): expected 41 passed and Rename skipped (TestMetadata/suite/Rename TestProxy/Rename), got $passed passed, skipped: ${skips:-none}"
    failed+=("conformance $driver ($passed passed, skipped: ${skips:-none})")
  fi
done

# A second lane, beside the end-to-end loop below: containerd's own integration tests
# (integration/client of containerd 1.7's and 2.1's source) against containerd alone and with pullgate,
# about five minutes a version spent mostly waiting on containers and timeouts. They run in
# mount and PID namespaces of their own, on their own ports and directories; their output is
# printed, and their failures counted, at the end.
lane=$(mktemp -d)
lane_versions=(1.7 2.1)
(
  rc=0
  for v in "${lane_versions[@]}"; do
    printf '\n##### %s\n' "containerd's own integration tests (integration/client of containerd $v) against containerd alone (overlayfs) and with pullgate"
    if bash tests/e2e_containerd_suite.sh "$v"; then r=passed; else r=failed; rc=1; echo "containerd integration tests containerd $v" >> "$lane/failed"; fi
    echo "$r" > "$lane/result-$v"
  done
  echo "$rc" > "$lane/rc"
  exit "$rc"
) > "$lane/log" 2>&1 &
lane_pid=$!

# Every document the end-to-end tests push or serve is kept for the differential test (below).
PULLGATE_DIFF_CORPUS=$(mktemp -d); export PULLGATE_DIFF_CORPUS

# 2.4: the newest containerd 2.x the Go module proxy serves, built from its module by setup.sh.
for v in 1.6 1.7 2.1 2.4; do
  step "end to end: snapshotter under containerd $v"
  run_part "e2e snapshotter containerd $v" bash tests/e2e_snapshotter.sh "$v"
  # The shipped fragments set content_sharing_policy = "isolated" (every test below runs so
  # unless it says otherwise); the gate's own suite runs under containerd's default "shared"
  # store, where a tenant can adopt any blob by digest and only the gate stands in the way.
  step "end to end: the gate under containerd $v (shared content store)"
  run_part "e2e gate containerd $v" env CONTENT_POLICY=shared bash tests/e2e_gate.sh "$v"
  step "end to end: attacks on the trust model under containerd $v (isolated content store)"
  run_part "e2e trust containerd $v" bash tests/e2e_trust.sh "$v"
  if [ "$v" = 1.6 ] || [ "$v" = 2.1 ]; then
    step "end to end: attacks on the trust model under containerd $v (shared content store)"
    run_part "e2e trust containerd $v shared" env CONTENT_POLICY=shared bash tests/e2e_trust.sh "$v"
  fi
  if [ "$v" = 2.1 ]; then
    # The same attacks against pullgate-defence-off (the daemon built with the test-only cargo
    # feature defence-off), one defence off at a time: each must succeed there.
    step "positive controls: the trust model's attacks succeed against a test build with their defence off, under containerd $v"
    wait "$defence_pid" 2>/dev/null || true
    tail -n 2 "$defence_build/log"
    run_part "controls containerd $v" bash -c "[ \"\$(cat '$defence_build/rc' 2>/dev/null)\" = 0 ] || { echo 'FAIL the build of pullgate-defence-off'; exit 1; }; CONTROL=1 exec bash tests/e2e_trust.sh $v"
  fi
  if [ "$v" = 1.6 ] || [ "$v" = 2.1 ]; then
    step "end to end: a registry over mutual TLS, its hosts directory read as containerd reads it, under containerd $v"
    run_part "e2e tls containerd $v" bash tests/e2e_tls.sh "$v"
  fi
  step "end to end: an isolated content store without re-downloads under containerd $v"
  run_part "e2e isolated containerd $v" bash tests/e2e_isolated.sh "$v"
  step "end to end: Kubernetes through the CRI front under containerd $v"
  # Under 2.1, after the controls part built pullgate-defence-off: e2e_cri 9's positive control.
  cri_env=(); [ "$v" = 2.1 ] && cri_env=(DEFENCE_OFF_BIN="$PWD/target/release/pullgate-defence-off")
  run_part "e2e cri containerd $v" env "${cri_env[@]}" bash tests/e2e_cri.sh "$v"
  step "end to end: pullgate doctor against sound and broken containerd configs, version $v"
  run_part "e2e doctor containerd $v" bash tests/e2e_doctor.sh "$v"
  step "end to end: pullgate containerd-config on the config files containerd $v writes, then containerd $v from the merged file and pullgate doctor"
  run_part "e2e ctrconf containerd $v" bash tests/e2e_ctrconf.sh "$v"
  step "end to end: operating pullgate (metrics, JSON log and output, password prompt, progress) under containerd $v"
  run_part "e2e ops containerd $v" bash tests/e2e_ops.sh "$v"
  # Real clients, built from their released Go modules by setup.sh (1.7 and 2.1: nerdctl 2.x and
  # critest target containerd 1.7 and later).
  if [ "$v" != 1.6 ]; then
    step "real clients: nerdctl with pullgate as its snapshotter under containerd $v"
    run_part "e2e nerdctl containerd $v" bash tests/e2e_clients.sh "$v"
    step "real clients: crictl through the CRI front and directly under containerd $v"
    run_part "e2e crictl containerd $v" bash tests/e2e_crictl.sh "$v"
    step "a real kubelet (v1.37, standalone and with kube-apiserver) through the CRI front under containerd $v"
    run_part "e2e kubelet containerd $v" bash tests/e2e_kubelet.sh "$v"
    if [ "$v" != 2.4 ]; then   # (time: critest runs under 1.7 and 2.1)
      step "critest (the CRI validation suite) against containerd alone, with pullgate as its snapshotter and through the CRI front under containerd $v"
      run_part "critest containerd $v" bash tests/e2e_critest.sh "$v"
    fi
  fi
  if [ "$v" = 1.7 ] || [ "$v" = 2.1 ]; then
    step "end to end: pullgate stopped (SIGTERM) and killed (SIGKILL), then started again, under running containers, pulls and container creations, containerd $v"
    run_part "e2e restart containerd $v" bash tests/e2e_restart.sh "$v"
    step "a Kubernetes cluster of two nodes (kube-apiserver, kube-scheduler, kube-controller-manager, kubectl, a kubelet per node) under containerd $v, pullgate installed on each by its DaemonSet"
    run_part "e2e cluster containerd $v" bash tests/e2e_cluster.sh "$v"
  fi
done

step "upgrade: the previous release's ledger opened with every grant and decision intact; a newer ledger refused unchanged"
run_part "e2e upgrade" bash tests/e2e_upgrade.sh

for v in 1.6 2.1; do
  step "crash test under containerd $v: crash points and SIGKILLs of pullgate (and containerd) during pull, verify, unpack and run"
  run_part "crash test containerd $v" bash tests/crash.sh "$v"
done

step "differential test of image documents: pullgate's reading against containerd 1.7's, 2.1's and 2.4's own code"
run_part "difftest" bash tests/difftest/run.sh "$PULLGATE_DIFF_CORPUS"
rm -rf "$PULLGATE_DIFF_CORPUS"

for v in 1.7 2.1; do
  step "release files and the Debian package: reproducible, lintian, installed, run under containerd $v, removed as the docs say and purged"
  run_part "e2e package containerd $v" bash tests/e2e_package.sh "$v"
done

# The lane's exit status and each version's result file are both required: a lane that died
# before a version's result is a failure, not a silence.
# Its status from the file it writes: `wait` forgets a background job's status when the PID is
# reused before it is asked (an hour of the suite wraps the node's PIDs), and says 127 then.
wait "$lane_pid" 2>/dev/null || true
lane_rc=$(cat "$lane/rc" 2>/dev/null) || lane_rc="none (the lane wrote no status)"
cat "$lane/log"
if [ -s "$lane/failed" ]; then
  while read -r f; do failed+=("$f"); done < "$lane/failed"
fi
for v in "${lane_versions[@]}"; do
  [ -s "$lane/result-$v" ] || failed+=("containerd integration tests containerd $v (no result: the lane ended with exit $lane_rc before it)")
done
if [ "$lane_rc" != 0 ] && [ ! -s "$lane/failed" ]; then failed+=("the integration-test lane (exit $lane_rc, no failure recorded)"); fi
rm -rf "$lane"

if [ ${#failed[@]} -gt 0 ]; then
  if [ -s "$details" ]; then printf '\n##### what failed\n'; cat "$details"; fi
  printf '\nFAILED: %s\n' "${failed[*]}"
  exit 1
fi
printf '\nall tests passed\n'
