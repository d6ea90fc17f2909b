#!/usr/bin/env bash
# critest, the CRI validation suite (sigs.k8s.io/cri-tools, a released version, built by
# scripts/setup.sh), run three times in one script run, on containerd of the given version, with
# the same images, the same test-images file, the same CNI network (a bridge from Debian's
# containernetworking-plugins) and the same hosts.toml:
#   baseline  a containerd of that version alone: CRI on its built-in overlayfs, no pullgate at
#             all (no proxy plugin); its own root, state and socket (start_baseline_containerd);
#   direct    containerd with pullgate as its only snapshotter (tests/cri_lib.sh's stack),
#             critest at containerd's CRI socket;
#   front     the same containerd through pullgate's CRI front.
# The baseline says what containerd alone passes on this machine, measured in the same run: the
# specs that pass directly and through the front must each be exactly the baseline's, by name.
# The baseline's failures are printed with ginkgo's failure message; they are not pullgate's.
# The baseline must pass at least CRITEST_FLOOR specs (pinned per containerd version below), so
# that a broken environment (no network, no images, a runtime that fails everything) is red.
# Retries: every run gets up to CRITEST_ATTEMPTS attempts per spec (ginkgo's flake attempts:
# containerd's shim at times dies at a sandbox's start, "ttrpc: closed"); each run's retries are
# printed, and a spec that passed on its first attempt in the baseline but needed a retry
# directly or through the front fails the test.
# The front must have decided: each CreateContainer containerd received in the front run
# admitted by the front once, nothing refused, and each PullImage a grant (critest's pods' listed).
# Images: every image critest names is built from busybox-static (tests/mkimage.py) with what its
# specs check, and served by a local registry under its upstream name (hosts.toml for gcr.io,
# registry.k8s.io and k8s.gcr.io naming that registry; containerd and pullgate read them).
# Skipped (CRITEST_SKIP), for what no machine here has:
#  - "public image with digest": critest pulls gcr.io/k8s-staging-cri-tools/test-image-digest by
#    the digest of the upstream image (sha256:9700f9a2...); no image built here has that digest,
#    and there is no internet.
# critest skips by itself its benchmarks (no -benchmark) and the specs whose feature the runtime
# reports absent (NRI, AppArmor, SELinux, image volumes' subPath, ...): counted as skipped in
# every run.
# Failing under containerd alone on these machines (printed with its reason at each run):
#  - MaskedPaths (1.7 and 2.1): it masks /bin/ls and expects `sh -c ls` to be refused, but
#    busybox-static's shell runs its applets itself (FEATURE_SH_STANDALONE), and /bin/ls, a
#    symlink to busybox, masks the shell too (runc mounts over the symlink's target);
# Usage: tests/e2e_critest.sh VERSION
CRI_BIN=
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/cri_lib.sh"
V=${1:?usage: e2e_critest.sh 1.7|2.1}
trap cleanup EXIT
CRI_TOOLS_VERSION=${CRI_TOOLS_VERSION:-v1.37.0}
CRICTL_BIN=${CRICTL_BIN:-$DEPS/cri-tools-$CRI_TOOLS_VERSION/crictl}
CRITEST_BIN=${CRITEST_BIN:-$DEPS/cri-tools-$CRI_TOOLS_VERSION/critest}
CRITEST_ATTEMPTS=${CRITEST_ATTEMPTS:-3}
CRITEST_FOCUS=${CRITEST_FOCUS:-.}
DEFAULT_SKIP='Image Manager public image with digest should be pulled and removed'
CRITEST_SKIP=${CRITEST_SKIP:-$DEFAULT_SKIP}
# The baseline's passes on these machines (whole suite, default skip), measured 2026-12-04; a
# baseline that passes fewer is an environment that is broken. 2.1: 105 or 106: the user-namespace
# spec that needs idmapped mounts on the host ("Host idmap mount support is needed ...
# NamespaceMode_POD") passes in some runs and fails in others with runc's "error preparing
# rootfs", in all three runs alike; the floor counts it as failing.
case $V in
  1.7) floor=92 ;;
  2.1) floor=105 ;;
  *) floor=1 ;;
esac
CRITEST_FLOOR=${CRITEST_FLOOR:-$floor}

log "containerd $V, critest $CRI_TOOLS_VERSION: setup"
[ -x "$CRITEST_BIN" ] || { fail "critest is not built at $CRITEST_BIN (scripts/setup.sh builds it)"; summary "critest (containerd $V)"; exit 1; }

# The images' files.
F=$WORK/files; mkdir -p "$F"
# busybox's own /etc/passwd (as tests/mkctrdimages.py writes it) and /etc/group (RunAsUserName
# runs as "nobody", the user images name www-data).
python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); from mkctrdimages import PASSWD; print(PASSWD, end="")' "$REPO/tests" > "$F/passwd"
cat > "$F/group" <<'TXT'
root:x:0:
daemon:x:1:
bin:x:2:
sys:x:3:
adm:x:4:
tty:x:5:
disk:x:6:
wheel:x:10:root
mail:x:8:
staff:x:50:
www-data:x:33:
operator:x:37:
users:x:100:
nogroup:x:65534:
TXT
# test-image-predefined-group: user default-user (1000) in group-defined-in-image (50000).
cp "$F/passwd" "$F/passwd-predefined"; echo 'default-user:x:1000:1000:Linux User,,,:/home/default-user:/bin/sh' >> "$F/passwd-predefined"
cp "$F/group" "$F/group-predefined"; printf 'default-user:x:1000:\ngroup-defined-in-image:x:50000:default-user\n' >> "$F/group-predefined"
# The web servers (nginx, hostnet-nginx, httpd): busybox httpd under a shell named nginx, which
# is what the PID namespace specs look for: a process named nginx (pidof), its pid in
# /var/run/nginx.pid, "master process" in its command line (as pid 1: ContainerPID; not pid 1:
# PodPID). It stops on SIGTERM (pid 1 ignores signals it does not handle).
cat > "$F/nginx" <<'SH'
#!/bin/sh
mkdir -p /var/run /www
echo '<html><body>pullgate test web server</body></html>' > /www/index.html
echo $$ > /var/run/nginx.pid
httpd -f -p "${PORT:-80}" -h /www &
trap 'kill $! 2>/dev/null; exit 0' TERM INT
wait
SH
# Two programs critest runs in its test container that Debian's busybox-static lacks: pgrep
# (execSync with timeout: is the timed-out sleep gone?) and ipcs -m (HostIpc: is the host's
# shared memory segment visible?), read from /proc as the real ones do.
cat > "$F/pgrep" <<'SH'
#!/bin/sh
found=1
for d in /proc/[0-9]*; do
  [ "$(cat "$d/comm" 2>/dev/null)" = "$1" ] && { echo "${d#/proc/}"; found=0; }
done
exit $found
SH
cat > "$F/ipcs" <<'SH'
#!/bin/sh
cat /proc/sysvipc/shm
SH
# The sandbox image's program: pause, as the real one (a process named sleep in a pod's shared
# PID namespace would answer the execSync spec's `pgrep sleep`).
cat > "$F/pause.c" <<'C'
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
static void quit(int s) { (void)s; _exit(0); }
static void reap(int s) { (void)s; while (waitpid(-1, 0, WNOHANG) > 0) {} }
int main(void) { signal(SIGINT, quit); signal(SIGTERM, quit); signal(SIGCHLD, reap); for (;;) pause(); }
C
gcc -static -Os -o "$F/pause" "$F/pause.c" || fail "build the pause program (gcc -static)"
# nonewprivs: a setuid-root program printing its effective uid (critest runs it as uid 1000,
# with and without no_new_privs).
cat > "$F/nnp.c" <<'C'
#include <stdio.h>
#include <unistd.h>
int main(void) { printf("Effective uid: %d\n", (int)geteuid()); return 0; }
C
gcc -static -Os -o "$F/nnp" "$F/nnp.c" || fail "build the nonewprivs program (gcc -static)"

mk() { python3 "$REPO/tests/mkimage.py" "$@" >/dev/null || fail "mkimage.py $*"; }
USERS=(--file "etc/passwd=$F/passwd" --file "etc/group=$F/group")
mk "$WORK/pause" --tag v1 --message "pause" --file "pause=$F/pause:755" --cmd "exec /pause"
mk "$WORK/busybox" --tag v1 --message "critest's test container image" --cmd "top" --all-applets "${USERS[@]}" \
  --file "bin/pgrep=$F/pgrep:755" --file "bin/ipcs=$F/ipcs:755"
mk "$WORK/nginx" --tag v1 --message "nginx" --all-applets "${USERS[@]}" --file "bin/nginx=$F/nginx:755" --cmd "exec /bin/nginx 'master process'"
mk "$WORK/hostnet-nginx" --tag v1 --message "hostnet-nginx" --all-applets "${USERS[@]}" --file "bin/nginx=$F/nginx:755" --cmd "PORT=12003 exec /bin/nginx 'master process'"
mk "$WORK/httpd" --tag v1 --message "httpd" --all-applets "${USERS[@]}" --file "bin/nginx=$F/nginx:755" --cmd "echo httpd serving; exec /bin/nginx"
mk "$WORK/nonewprivs" --tag v1 --message "nonewprivs" --all-applets "${USERS[@]}" --file "usr/local/bin/nnp=$F/nnp:4755" --cmd "exec /usr/local/bin/nnp"
mk "$WORK/pause-3.9" --tag v1 --message "registry.k8s.io/pause:3.9" --cmd "sleep 100000"
mk "$WORK/predefined-group" --tag v1 --message "test-image-predefined-group" --all-applets --user 1000 \
  --file "etc/passwd=$F/passwd-predefined" --file "etc/group=$F/group-predefined" --cmd "top"
# One image per name (one id each), but the three tags of test-image-tags: one image.
for n in test-image-tag-test test-image-tag-all test-image-latest test-image-1 test-image-2 test-image-3 test-image-tags; do
  mk "$WORK/$n" --tag v1 --message "$n" --all-applets "${USERS[@]}" --cmd "top"
done
declare -A IMAGE_USERS=([test-image-user-uid]=1002 [test-image-user-username]=www-data [test-image-user-uid-group]=1003:1004 [test-image-user-username-group]=www-data:1004)
for n in "${!IMAGE_USERS[@]}"; do mk "$WORK/$n" --tag v1 --message "$n" --all-applets "${USERS[@]}" --user "${IMAGE_USERS[$n]}" --cmd "top"; done

start_registry r || exit 1
PAUSE=$REG_r/k8s/pause:v1
push_image "$WORK/pause" v1 "$PAUSE" || fail "push the sandbox image"
# serve LAYOUT NAME...: the layout under each upstream NAME (its registry's host left out: the
# hosts.toml files send gcr.io, registry.k8s.io and k8s.gcr.io to this registry).
serve() {
  local l=$1 n; shift
  for n in "$@"; do push_image "$WORK/$l" v1 "$REG_r/${n#*/}" || fail "push $n"; done
}
serve busybox registry.k8s.io/e2e-test-images/busybox:1.29-2
serve nginx registry.k8s.io/e2e-test-images/nginx:1.14-2
serve httpd registry.k8s.io/e2e-test-images/httpd:2.4.39-4
serve nonewprivs registry.k8s.io/e2e-test-images/nonewprivs:1.3
serve pause-3.9 registry.k8s.io/pause:3.9 k8s.gcr.io/pause:3.9
G=gcr.io/k8s-staging-cri-tools
serve hostnet-nginx $G/hostnet-nginx-amd64:latest
serve predefined-group $G/test-image-predefined-group:latest
serve test-image-tag-test $G/test-image-tag:test
serve test-image-tag-all $G/test-image-tag:all
serve test-image-latest $G/test-image-latest:latest
for i in 1 2 3; do serve "test-image-$i" "$G/test-image-$i:latest"; done
serve test-image-tags $G/test-image-tags:1 $G/test-image-tags:2 $G/test-image-tags:3
for n in "${!IMAGE_USERS[@]}"; do serve "$n" "$G/$n:latest"; done
cat > "$WORK/test-images.yaml" <<YML
defaultTestContainerImage: registry.k8s.io/e2e-test-images/busybox:1.29-2
webServerTestImage: registry.k8s.io/e2e-test-images/nginx:1.14-2
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
for h in gcr.io registry.k8s.io k8s.gcr.io; do write_hosts_toml "$HOSTS" "$REG_r" "$h"; done
crictl_at() { local s=$1; shift; "$CRICTL_BIN" --runtime-endpoint "unix://$s" --image-endpoint "unix://$s" "$@"; }
crictl_() { crictl_at "$CTRD_SOCK" "$@"; }
# cri_ready SOCKET: CRI answers there and reports its network ready.
cri_ready() {
  wait_for 30 crictl_at "$1" info || { fail "the CRI at $1 does not answer"; return 1; }
  wait_for 30 bash -c "'$CRICTL_BIN' --runtime-endpoint 'unix://$1' info -o json | jq -e '.status.conditions[] | select(.type == \"NetworkReady\") | .status' | grep -q true" \
    || fail "the CRI network at $1 is not ready (CNI config in $WORK/cni/conf)"
}
cri_ready "$CTRD_SOCK" || { summary "critest (containerd $V)"; exit 1; }
start_baseline_containerd "$V" "$WORK/baseline" "$PAUSE" "$HOSTS" || { fail "start the baseline containerd"; summary "critest (containerd $V)"; exit 1; }
cri_ready "$BASE_SOCK" || { summary "critest (containerd $V)"; exit 1; }
base_version=$("${BASE_CTR[@]}" version 2>/dev/null | awk '/^Server:/ {s=1} s && $1=="Version:" {print $2; exit}')
check "the baseline containerd is the same version ($base_version)" test "$base_version" = "$(ctr_ version 2>/dev/null | awk '/^Server:/ {s=1} s && $1=="Version:" {print $2; exit}')"
check "the baseline containerd has no pullgate (no proxy plugin) and unpacks CRI's images into overlayfs" \
  bash -c "! grep -qE 'proxy_plugins|snapshotter *= *\"pullgate' '$WORK/baseline/containerd/config.toml' \
    && '${BASE_CTR[0]}' -a '$BASE_SOCK' plugins ls > '$WORK/baseline/plugins' \
    && awk '\$2 == \"overlayfs\" && \$NF == \"ok\" {f = 1} \$2 == \"pullgate\" {p = 1} END {exit !(f && !p)}' '$WORK/baseline/plugins'"
echo "  focus: $CRITEST_FOCUS (up to $CRITEST_ATTEMPTS attempts per spec, in every run)"
echo "  skip:  $CRITEST_SKIP"

# run_critest NAME CRI_SOCKET CONTAINERD_SOCKET: critest against CRI_SOCKET; into $WORK/NAME.*
# (sorted spec names, one a line): passed, failed, skipped, retried (passed on a later attempt),
# first (passed on the first attempt); NAME.reasons: each failed spec and ginkgo's failure
# message; NAME.places: each failed spec and where it failed (file:line); its time into T_NAME, its retries into R_NAME. Then every pod and image of
# CONTAINERD_SOCKET's containerd goes, and its garbage is collected.
run_critest() {
  local name=$1 sock=$2 csock=$3 t0=$SECONDS
  log "critest $name (unix://$sock)"
  "$CRITEST_BIN" --runtime-endpoint "unix://$sock" --image-endpoint "unix://$sock" \
    --test-images-file "$WORK/test-images.yaml" --ginkgo.focus "$CRITEST_FOCUS" --ginkgo.skip "$CRITEST_SKIP" \
    --ginkgo.flake-attempts "$CRITEST_ATTEMPTS" --ginkgo.no-color --ginkgo.json-report "$WORK/$name.json" > "$WORK/$name.log" 2>&1
  echo "  critest exit $?, $((SECONDS - t0)) s; $(grep -E '^(Ran|PASS|FAIL)' "$WORK/$name.log" | tail -2 | paste -sd' ')"
  printf -v "T_$name" '%s' $((SECONDS - t0))
  python3 - "$WORK/$name.json" "$WORK/$name" <<'PY'
import json, sys
rep, out = sys.argv[1], sys.argv[2]
try:
    specs = json.load(open(rep))[0]["SpecReports"] or []
except (OSError, ValueError, IndexError, KeyError) as e:
    print(f"  no ginkgo report ({e})")
    specs = []
res = {"passed": [], "failed": [], "skipped": [], "retried": [], "first": [], "reasons": [], "places": []}
for s in specs:
    if s["LeafNodeType"] != "It":
        continue
    name = " ".join(t for t in (s.get("ContainerHierarchyTexts") or []) + [s["LeafNodeText"]] if t)
    st = s["State"]
    res["passed" if st == "passed" else "skipped" if st in ("skipped", "pending") else "failed"].append(name)
    if st == "passed":
        res["retried" if s.get("NumAttempts", 1) > 1 else "first"].append(name)
    elif st not in ("skipped", "pending"):
        msg = " ".join((s.get("Failure") or {}).get("Message", st).split())
        res["reasons"].append(f"{name}\n      {msg[:400]}")
        loc = (s.get("Failure") or {}).get("Location") or {}
        res["places"].append(f"{name}\t{loc.get('FileName', '?').rsplit('/', 1)[-1]}:{loc.get('LineNumber', '?')}")
for k, v in res.items():
    open(f"{out}.{k}", "w").write("".join(n + "\n" for n in sorted(v)))
PY
  printf -v "R_$name" '%s' "$(wc -l < "$WORK/$name.retried")"
  crictl_at "$csock" rmp -af >/dev/null 2>&1; crictl_at "$csock" rmi -a >/dev/null 2>&1
}
run_critest baseline "$BASE_SOCK" "$BASE_SOCK"
# containerd alone is done: its pods are gone (rmp above), so its CNI addresses and host ports
# are free for the next runs.
kill "$BASE_PID" 2>/dev/null; wait "$BASE_PID" 2>/dev/null
run_critest direct "$CTRD_SOCK" "$CTRD_SOCK"
ctr_ -n k8s.io leases create --id settle-direct >/dev/null 2>&1 && ctr_ -n k8s.io leases delete --sync settle-direct >/dev/null 2>&1
front_log_from=$(($(stat -c %s "$PG/log") + 1))
front_ctrd_from=$(($(stat -c %s "$WORK/containerd/log") + 1))
run_critest front "$PG/cri.sock" "$CTRD_SOCK"

log "critest: containerd alone (baseline) vs pullgate's snapshotter (direct) vs pullgate's front"
count() { wc -l < "$WORK/$1.$2"; }
printf '  %-34s %7s %7s %7s %8s %6s\n' "" passed failed skipped retried time
for r in baseline direct front; do
  t=T_$r; rr=R_$r
  case $r in
    baseline) what="containerd alone (overlayfs)" ;;
    direct) what="containerd's CRI, pullgate below" ;;
    front) what="through pullgate's front" ;;
  esac
  printf '  %-34s %7d %7d %7d %8d %5ss\n' "$what" "$(count $r passed)" "$(count $r failed)" "$(count $r skipped)" "${!rr}" "${!t}"
done
if [ -s "$WORK/baseline.failed" ]; then
  echo "  failed under containerd alone (not required of pullgate), with ginkgo's reason:"
  sed 's/^/    /' "$WORK/baseline.reasons"
fi
for r in baseline direct front; do
  [ -s "$WORK/$r.retried" ] && { echo "  passed in $r only on a later attempt:"; sed 's/^/    /' "$WORK/$r.retried"; }
done
pb=$(count baseline passed)
if [ "$CRITEST_FOCUS" = . ] && [ "$CRITEST_SKIP" = "$DEFAULT_SKIP" ]; then
  check "containerd alone passes at least $CRITEST_FLOOR specs (passed $pb)" test "$pb" -ge "$CRITEST_FLOOR"
else
  na "the baseline's floor ($CRITEST_FLOOR passed specs) applies to the whole suite (focus/skip changed)"
  check "containerd alone passes specs ($pb)" test "$pb" -gt 0
fi
for r in direct front; do
  only_base=$(comm -23 "$WORK/baseline.passed" "$WORK/$r.passed")
  only_r=$(comm -13 "$WORK/baseline.passed" "$WORK/$r.passed")
  if [ -n "$only_base" ]; then
    echo "  passed under containerd alone, not $r:"
    while IFS= read -r s; do grep -A1 -xF -- "$s" "$WORK/$r.reasons" | sed 's/^/    /' | grep . || echo "    $s (${r}: skipped or not run)"; done <<<"$only_base"
  fi
  [ -n "$only_r" ] && { echo "  passed $r, not under containerd alone:"; sed 's/^/    /' <<<"$only_r"; }
  check "$r passes the same specs as containerd alone ($(count $r passed) vs $pb)" test -z "$only_base" -a -z "$only_r"
  check "$r ran the same specs as containerd alone" test "$(cat "$WORK/baseline.passed" "$WORK/baseline.failed" | sort)" = "$(cat "$WORK/$r.passed" "$WORK/$r.failed" | sort)"
  # A spec failing under containerd alone fails with pullgate too (the same specs pass), and
  # for the same reason: at the same place of critest's code.
  moved=$(comm -23 "$WORK/baseline.places" "$WORK/$r.places")
  [ -n "$moved" ] && { echo "  failed under containerd alone at (spec, place), $r elsewhere:"; sed 's/^/    /' <<<"$moved"; }
  check "every spec failing under containerd alone fails $r at the same place ($(count baseline failed): $(cut -f2 "$WORK/baseline.places" | paste -sd' '))" test -z "$moved"
  late=$(comm -12 "$WORK/baseline.first" "$WORK/$r.retried")
  [ -n "$late" ] && { echo "  passed on the first attempt under containerd alone, needed a retry $r:"; sed 's/^/    /' <<<"$late"; }
  check "$r needs no retry where containerd alone passed on the first attempt" test -z "$late"
done

# The front decided: every CreateContainer containerd received in the front run (its CRI's "for
# container" lines) was admitted by the front ("CRI CreateContainer admitted", its rootfs), one
# admission each, and containerd created containers; nothing was refused (neither the front's refusals
# nor the snapshotter's "pullgate denied"); every PullImage the front served recorded one grant,
# and critest's pods' grants (principal: the pod's Kubernetes namespace) are listed at the end.
# (How many pulls carry a pod varies from run to run: ginkgo orders the specs at random, and an
# image already present is not pulled again.)
front_pg=$(tail -c +"$front_log_from" "$PG/log")
front_ctrd=$(tail -c +"$front_ctrd_from" "$WORK/containerd/log")
started=$(grep -c 'CreateContainer within sandbox .* for container ' <<<"$front_ctrd")
created=$(grep -c 'CreateContainer within sandbox .* returns container id' <<<"$front_ctrd")
admitted=$(grep 'CRI CreateContainer admitted' <<<"$front_pg" | grep -cE 'part="?rootfs')
refused=$(grep -cE 'CRI CreateContainer refused|pullgate denied' <<<"$front_pg")
pulls=$(grep -c 'CRI PullImage' <<<"$front_pg")
pod_pulls=$(grep 'CRI PullImage' <<<"$front_pg" | grep -c 'principal=cri-test-namespace')
grants=$(grep -c 'grant recorded' <<<"$front_pg")
front_grants=$(grep 'grant recorded' <<<"$front_pg" | grep -c 'principal=cri-test-namespace')
listed=$("$PG_BIN" grants --all --address "$PG/api.sock" 2>&1); rc=$?
listed_pods=$(awk 'NR > 1 && $2 ~ /^cri-test-namespace/' <<<"$listed" | wc -l)
echo "  front run: containerd received $started CreateContainer (created $created), the front admitted $admitted, refused $refused; $pulls PullImage ($pod_pulls by critest's pods), $grants grants recorded ($front_grants for the pods), $listed_pods listed at the end (rc=$rc)"
check "containerd created containers in the front run ($created of $started)" test "$created" -gt 0
check "the front admitted each CreateContainer containerd received, once ($admitted admissions for $started)" test "$admitted" -eq "$started"
[ "$refused" -gt 0 ] && grep -E 'CRI CreateContainer refused|pullgate denied' <<<"$front_pg" | head -5 | cut -c1-400 | sed 's/^/    /'
check "pullgate refused nothing critest asked for through the front ($refused refusals in its log)" test "$refused" -eq 0
check "each PullImage the front served recorded one grant ($grants grants for $pulls pulls)" test "$pulls" -gt 0 -a "$grants" -eq "$pulls"
check "critest's pods pulled through the front, each pull a grant of its pod's namespace ($front_grants grants for $pod_pulls pulls)" \
  test "$pod_pulls" -gt 0 -a "$front_grants" -eq "$pod_pulls"
check "pullgate grants --all lists each of those grants ($listed_pods of $front_grants, rc=$rc)" test "$rc" -eq 0 -a "$listed_pods" -eq "$front_grants"
summary "critest (containerd $V): $pb passed under containerd alone, $(count direct passed) directly, $(count front passed) through pullgate's front"
