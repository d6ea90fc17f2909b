#!/usr/bin/env bash
# critest, the CRI validation suite (sigs.k8s.io/cri-tools, a released version, built by
# scripts/setup.sh), run twice on one real containerd of the given version (CRI on, pullgate the
# only snapshotter, tests/cri_lib.sh's config plus a bridge CNI network from Debian's
# containernetworking-plugins): once against containerd's CRI socket directly, once through
# pullgate's CRI front. The set of specs that pass through the front must equal the set that
# passes directly: both counts are printed, and any difference by name.
# Images: critest's --test-images-file names the two images it lets a runtime choose (its
# default test container image and its web server image); both are built from busybox-static
# (tests/mkimage.py) and served by a local registry under those names. The specs it runs are
# CRITEST_FOCUS / CRITEST_SKIP below (printed); the specs that failed directly are listed (they
# failed through the front too, or the sets differ and the test fails).
# Usage: tests/e2e_critest.sh VERSION
CRI_BIN=
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/cri_lib.sh"
V=${1:?usage: e2e_critest.sh 1.7|2.1}
trap cleanup EXIT
CRI_TOOLS_VERSION=${CRI_TOOLS_VERSION:-v1.37.0}
CRICTL_BIN=${CRICTL_BIN:-$DEPS/cri-tools-$CRI_TOOLS_VERSION/crictl}
CRITEST_BIN=${CRITEST_BIN:-$DEPS/cri-tools-$CRI_TOOLS_VERSION/critest}
# What runs (ginkgo regular expressions over the specs' full text): every spec critest has,
# except those that fail straight against containerd on these machines, measured by running the
# whole suite directly under containerd 1.7 and 2.1 (docs/clients.md); skipped so that
# the two runs take minutes, not ten. critest skips its benchmarks itself (no -benchmark), and
# the specs whose feature the runtime reports absent (NRI, AppArmor, ...). Failing directly:
#  - images critest names itself at its upstream registries (not renamable with
#    --test-images-file; no internet here): Image Manager's pulls, listings and removals, Image
#    Consistency, Image Identifier Consistency, Image Volume, Multiple Containers (httpd),
#    Security Context PodPID/ContainerPID/HostPID (nginx), NoNewPrivs (nonewprivs), portforward
#    in host network (hostnet-nginx);
#  - with the busybox-static test image on this kernel and bookworm's runc 1.1.5: HostIpc
#    true/false, MaskedPaths, RunAsUserName, execSync with timeout.
#  - under 2.1 only: OOMKilled (2.1 reports no OOM reason here), SupplementalGroupsPolicy
#    (1.7 reports the feature absent, and critest skips it there itself), and the user-namespace
#    pod that needs idmapped mounts on the host ("... NamespaceMode_POD": failed directly and
#    through the front alike in both fresh-clone runs of 2026-12-02).
# "Image Manager public image should timeout if requested" runs: it pulls critest's own image by
# its upstream name (gcr.io/k8s-staging-cri-tools/test-image-tag:test) with a 1 ms deadline and
# expects DeadlineExceeded. That image is served here, by the local registry under that name
# (a hosts.toml for gcr.io naming it as the server, for containerd and pullgate alike), so that
# both runs make a real pull for the deadline to cut. Offline, the name does not resolve, and
# the spec measured how fast a runtime fails a DNS lookup: pullgate's front, which keeps its HTTP
# clients, answers Unavailable in 0.6-0.7 ms, inside the millisecond; containerd was slower.
# Each spec gets up to CRITEST_ATTEMPTS attempts in both runs (ginkgo's flake attempts), and the
# specs that passed only on a later attempt are printed: containerd's shim now and then dies
# at a sandbox's start ("failed to create shim task: ttrpc: closed", seen directly and through
# the front).
CRITEST_ATTEMPTS=${CRITEST_ATTEMPTS:-3}
CRITEST_FOCUS=${CRITEST_FOCUS:-.}
skip='Image Manager (image status|listImage|public image with|public image without|removing image)|Image Consistency|Image Identifier Consistency|Feature:ImageVolume|Multiple Containers|ContainerPID|PodPID|HostPID|HostIpc|NoNewPrivs|MaskedPaths|RunAsUserName|portforward in host network|execSync with timeout'
[ "$V" = 2.1 ] && skip="$skip|OOMKilled|SupplementalGroupsPolicy|idmap mount support is needed runtime should support NamespaceMode_POD"
CRITEST_SKIP=${CRITEST_SKIP:-$skip}

log "containerd $V, critest $CRI_TOOLS_VERSION: setup"
[ -x "$CRITEST_BIN" ] || { fail "critest is not built at $CRITEST_BIN (scripts/setup.sh builds it)"; summary "critest (containerd $V)"; exit 1; }
mk() { python3 "$REPO/tests/mkimage.py" "$@" >/dev/null; }
mk "$WORK/pause" --tag v1 --message "pause" --cmd "sleep 100000"
mk "$WORK/busybox" --tag v1 --message "critest's test container image" --cmd "top" --all-applets
mk "$WORK/web" --tag v1 --message "critest's web server image" --all-applets --cmd "mkdir -p /www && echo hello > /www/index.html && httpd -f -p 80 -h /www"
start_registry r || exit 1
PAUSE=$REG_r/k8s/pause:v1
push_image "$WORK/pause" v1 "$PAUSE" || fail "push the sandbox image"
push_image "$WORK/busybox" v1 "$REG_r/e2e-test-images/busybox:1.29-2" || fail "push the test container image"
push_image "$WORK/web" v1 "$REG_r/e2e-test-images/nginx:1.14-2" || fail "push the web server image"
push_image "$WORK/busybox" v1 "$REG_r/k8s-staging-cri-tools/test-image-tag:test" || fail "push critest's own image under its upstream name"
cat > "$WORK/test-images.yaml" <<YML
defaultTestContainerImage: $REG_r/e2e-test-images/busybox:1.29-2
webServerTestImage: $REG_r/e2e-test-images/nginx:1.14-2
YML
# A bridge network (a name and subnet of this run's own: several containerds may run at once).
mkdir -p "$WORK/cni/bin" "$WORK/cni/conf"
for p in bridge host-local loopback portmap; do ln -sf "/usr/lib/cni/$p" "$WORK/cni/bin/$p"; done
n=$((RANDOM % 200 + 20)); BR=pgcri$n$RANDOM; BR=${BR:0:15}
# (The bridge plugin makes it and never removes it: removed with the rest at exit.)
trap 'cleanup; ip link del "$BR" 2>/dev/null' EXIT
cat > "$WORK/cni/conf/10-pullgate-test.conflist" <<JSON
{"cniVersion": "0.4.0", "name": "pullgate-test-$n",
 "plugins": [{"type": "bridge", "bridge": "$BR", "isGateway": true, "ipMasq": false,
              "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.$n.$((RANDOM % 250)).0/24"}]]}},
             {"type": "portmap", "capabilities": {"portMappings": true}}]}
JSON
start_cri_stack "$V" "$PAUSE" "$REG_r" || exit 1
# critest's own image by its upstream name, from the local registry (header). containerd and
# pullgate read hosts.toml at each pull.
write_hosts_toml "$HOSTS" "$REG_r" gcr.io
crictl_() { "$CRICTL_BIN" --runtime-endpoint "unix://$CTRD_SOCK" --image-endpoint "unix://$CTRD_SOCK" "$@"; }
wait_for 30 crictl_ info || { fail "containerd's CRI does not answer"; summary "critest (containerd $V)"; exit 1; }
wait_for 30 bash -c "'$CRICTL_BIN' --runtime-endpoint 'unix://$CTRD_SOCK' info | grep -q '\"NetworkReady\"' && '$CRICTL_BIN' --runtime-endpoint 'unix://$CTRD_SOCK' info -o json | jq -e '.status.conditions[] | select(.type == \"NetworkReady\") | .status' | grep -q true" \
  || fail "containerd's CRI network is not ready (CNI config in $WORK/cni/conf)"
echo "  focus: $CRITEST_FOCUS (up to $CRITEST_ATTEMPTS attempts per spec)"
echo "  skip:  $CRITEST_SKIP"

# run_critest NAME SOCKET: critest against SOCKET; the passed and failed specs' names into
# $WORK/NAME.passed and NAME.failed (sorted), its time into T_NAME.
run_critest() {
  local name=$1 sock=$2 t0=$SECONDS
  log "critest $name (unix://$sock)"
  "$CRITEST_BIN" --runtime-endpoint "unix://$sock" --image-endpoint "unix://$sock" \
    --test-images-file "$WORK/test-images.yaml" --ginkgo.focus "$CRITEST_FOCUS" --ginkgo.skip "$CRITEST_SKIP" \
    --ginkgo.flake-attempts "$CRITEST_ATTEMPTS" --ginkgo.no-color --ginkgo.json-report "$WORK/$name.json" > "$WORK/$name.log" 2>&1
  echo "  critest exit $?, $((SECONDS - t0)) s; $(grep -E '^(Ran|PASS|FAIL)' "$WORK/$name.log" | tail -2 | paste -sd' ')"
  printf -v "T_$name" '%s' $((SECONDS - t0))
  python3 - "$WORK/$name.json" "$WORK/$name" <<'PY'
import json, sys
rep, out = sys.argv[1], sys.argv[2]
specs = json.load(open(rep))[0]["SpecReports"] or []
res = {"passed": [], "failed": [], "skipped": [], "retried": []}
for s in specs:
    if s["LeafNodeType"] != "It":
        continue
    name = " ".join(s["ContainerHierarchyTexts"] + [s["LeafNodeText"]])
    st = s["State"]
    res["passed" if st == "passed" else "skipped" if st in ("skipped", "pending") else "failed"].append(name)
    if st == "passed" and s.get("NumAttempts", 1) > 1:
        res["retried"].append(f"{name} (attempt {s['NumAttempts']})")
for k, v in res.items():
    open(f"{out}.{k}", "w").write("".join(n + "\n" for n in sorted(v)))
PY
  # Between the runs: every pod and image gone, containerd's garbage collected.
  crictl_ rmp -af >/dev/null 2>&1; crictl_ rmi -a >/dev/null 2>&1
  ctr_ -n k8s.io leases create --id "settle-$name" >/dev/null 2>&1 && ctr_ -n k8s.io leases delete --sync "settle-$name" >/dev/null 2>&1
}
run_critest direct "$CTRD_SOCK"
[ -n "${CRITEST_DIRECT_ONLY:-}" ] && { sed 's/^/  passed: /' "$WORK/direct.passed"; sed 's/^/  FAILED: /' "$WORK/direct.failed"; exit 0; }
run_critest front "$PG/cri.sock"

log "critest: directly vs through pullgate's front"
pd=$(wc -l < "$WORK/direct.passed"); pf=$(wc -l < "$WORK/front.passed")
fd=$(wc -l < "$WORK/direct.failed"); ff=$(wc -l < "$WORK/front.failed")
sd=$(wc -l < "$WORK/direct.skipped"); sf=$(wc -l < "$WORK/front.skipped")
printf '  %-28s %8s %8s %8s %6s\n' "" passed failed skipped time
printf '  %-28s %8d %8d %8d %5ss\n' "containerd's CRI directly" "$pd" "$fd" "$sd" "$T_direct"
printf '  %-28s %8d %8d %8d %5ss\n' "through pullgate's front" "$pf" "$ff" "$sf" "$T_front"
if [ "$fd" -gt 0 ]; then echo "  failed directly (and so not required through the front):"; sed 's/^/    /' "$WORK/direct.failed"; fi
for f in direct front; do
  [ -s "$WORK/$f.retried" ] && { echo "  passed $f only on a later attempt:"; sed 's/^/    /' "$WORK/$f.retried"; }
done
check "critest ran specs directly ($pd passed)" test "$pd" -gt 0
only_direct=$(comm -23 "$WORK/direct.passed" "$WORK/front.passed")
only_front=$(comm -13 "$WORK/direct.passed" "$WORK/front.passed")
[ -n "$only_direct" ] && { echo "  passed directly, not through the front:"; sed 's/^/    /' <<<"$only_direct"; }
[ -n "$only_front" ] && { echo "  passed through the front, not directly:"; sed 's/^/    /' <<<"$only_front"; }
check "the same specs pass through the front as directly ($pf vs $pd)" test -z "$only_direct" -a -z "$only_front"
check "both runs ran the same specs" test "$(cat "$WORK/direct.passed" "$WORK/direct.failed" | sort)" = "$(cat "$WORK/front.passed" "$WORK/front.failed" | sort)"
if [ -n "$only_direct" ] || [ "$fd" -gt 0 ]; then
  for f in front direct; do echo "--- $f: failure summaries"; grep -E '^\s*\[FAIL\]|Expected|rpc error' "$WORK/$f.log" | head -40 | sed 's/^/    /'; done
fi
summary "critest (containerd $V): $pd passed directly, $pf through pullgate's front"
