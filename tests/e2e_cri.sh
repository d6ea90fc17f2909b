#!/usr/bin/env bash
# End-to-end: Kubernetes through pullgate's CRI front. containerd of the given version with its
# real CRI plugin (pullgate the only snapshotter), pullgate serving CRI on its own socket (k8s.io
# requiring a principal, its default with the front on), driven exactly as kubelet drives it by the
# project's CRI client (examples/cri.rs): host-network pods with an empty hostname, the sandbox
# image from a local registry (pulled by containerd's CRI itself), PullImage with the pod's
# pull-secret credential, CreateContainer, StartContainer, the container's log, ExecSync,
# StopPodSandbox, RemovePodSandbox. Pods of Kubernetes namespaces team-a (alice's secret),
# team-b (none, then carol's), team-c (the attacker), team-d (public images only).
#   1. calls pullgate does not own pass through (unknown methods and streams included);
#  1c. a tenant pulling the sandbox image's bytes privately before the first pod takes no
#      sandbox away (the image is public at its own origin);
#   2. team-a pulls a private image with its secret and runs it; the image records are the
#      ones containerd's own CRI pull makes;
#   3. team-b without a secret is refused at CreateContainer, and its PullImage fails;
#   4. team-b with its own secret: one manifest round-trip (no blob GET, no extraction), runs;
#      containers of one image created at once by both namespaces' pods;
#   5. attacker's manifests (forged layer IDs; team-a's blob digests from another registry;
#      checkpoint images, their annotation's key written plainly or with a JSON escape);
#   6. annotations claiming another principal or carrying containerd.io/snapshot.ref;
#   7. kubelet pointed straight at containerd (bypassing the front): the snapshotter refuses
#      (on 2.1 also a checkpoint restore's view: nothing is pulled or filed under the names it
#      gives);
#   8. public images need no secret;
#   9. pullgate killed (SIGKILL) between PullImage and CreateContainer;
#  10. pods stop and go;
#  11. with `[cri] principal = "pod"`, each pod pulls for itself, a pod without a UID is refused,
#      and its grants go with its last sandbox (or with the next removal through the front, for
#      a pod removed around it);
#  12. documents that containerd and pullgate would read differently are refused;
#  13. a PullImage naming no pod is the node's: no pod runs the image on it, even with
#      require_principal turned off;
#  14. pull secrets holding only an identity token or a registry token (a token-auth registry):
#      pulls and runs; the same token is the same identity; revoked, expired, other-service
#      tokens, an expired registry token and a token service without the refresh-token grant
#      are refused naming the cause, and record nothing; a user name holding a colon is taken
#      as sent;
#  15. an impostor on a plain-http registry's port (the registry gone), serving team-a's
#      manifest and answering HEAD for every blob but serving none: pods of other namespaces,
#      with no secret or a made-up one, get nothing from the node: refused, nothing recorded.
#  16. a public image on the node (containerd's own CRI pull) and a private repository serving
#      the same bytes: preloaded before team-a pulls the private name through the front, pods
#      without a secret still run it (preloaded, nothing asked of its origin); pulled by the node
#      after, they run it too (pullgate verifies it at its own origin without a credential, and
#      says so in its log); the private image of 2 stays refused to them; a tenant naming the
#      same bytes in four private repositories of its own (their names listed first) takes
#      nothing from them.
#  17. an image the node preloads from a registry that needs a login: pods without a secret
#      run it after team-a pulls an image built FROM it and after a tenant pulls the same bytes
#      from a repository of its own, and with its registry down; an image the node pulls only
#      after such a tenant's pull is refused to them (the control), until the operator marks it
#      with `pullgate preload` (listed, and refused again once the mark is removed).
#  18. containers of the sandbox image created while other pods' sandboxes start: no sandbox
#      takes a container's admission (the front labels the pods it forwards).
#  19. 5,000 names on the public image of 16 (what a tenant's pulls of the same manifest under
#      names of its own leave; on 2.1): pods without a secret still run it, as kubelet asks and
#      by ID alone, each CreateContainer costing as many containerd calls as before the names.
#  20. registry trouble does not spread: a pod holding a fresh grant keeps creating containers
#      while its image's registry answers 429 and while it is down; a pod without one is
#      refused saying the registry could not be reached, and runs a public image once its
#      origin answers again.
#  21. the positive controls: on containerd alone (its CRI and overlayfs, the same registries),
#      the attacks of 3, 5e, 6 (the principal's annotations), 7 and 11 run team-a's private image.
# The registries of 4 and 14 serve TLS with this run's CA (use_tls_registries): what spares a
# download is an endpoint pullgate verified.
# About a minute per containerd version.
# Usage: tests/e2e_cri.sh VERSION
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/cri_lib.sh"
V=${1:?usage: e2e_cri.sh 1.6|1.7|2.1|2.4}
trap cleanup EXIT
PW_ALICE=alice-Cri-4t8q
PW_CAROL=carol-Cri-7m2x
PW_ADMIN=admin-Cri-2p9w
PW_CI=ci-Cri-8d3k
TOKMSG="private app behind a token service"
IMPMSG="private app of team-a at a plain-http registry"
DUPMSG="public app also served privately"
DUP2MSG="another public app also served privately"
DUP3MSG="a third public app, named privately by a tenant"
DUP5MSG="a public app whose origin answers 429"
DOWNMSG="private app of team-a whose registry goes down"
PW_MAL=mallory-Cri-6q1z
PRIVMSG="private app of team-a"
REFUSED='pullgate refused pod'

log "containerd $V (CRI front): setup"
[ -x "$CRI_BIN" ] || { fail "the CRI client $CRI_BIN is not built (cargo build --release --example cri)"; summary "e2e cri (containerd $V)"; exit 1; }
mk() { python3 "$REPO/tests/mkimage.py" "$@" >/dev/null; }
mk "$WORK/pause" --tag v1 --message "pause" --cmd "sleep 100000"
mk "$WORK/pub" --tag v1 --message "public app"
mk "$WORK/priv" --tag v1 --message "$PRIVMSG" --extra-layers 1 --layer-mb 0.2 --seed 21
mk "$WORK/tpriv" --tag v1 --message "$TOKMSG" --extra-layers 1 --layer-mb 0.1 --seed 31
mk "$WORK/dup" --tag v1 --message "$DUPMSG" --extra-layers 1 --layer-mb 0.1 --seed 51
mk "$WORK/dup2" --tag v1 --message "$DUP2MSG" --extra-layers 1 --layer-mb 0.1 --seed 53
mk "$WORK/dup3" --tag v1 --message "$DUP3MSG" --extra-layers 1 --layer-mb 0.1 --seed 55
mk "$WORK/dup5" --tag v1 --message "$DUP5MSG" --extra-layers 1 --layer-mb 0.1 --seed 57
mk "$WORK/down" --tag v1 --message "$DOWNMSG" --extra-layers 1 --layer-mb 0.1 --seed 59
VOLMSG="private volume of team-a's, unpacked first in another namespace"
mk "$WORK/vol" --tag v1 --message "$VOLMSG" --extra-layers 1 --layer-mb 0.1 --seed 65
mk "$WORK/ipriv" --tag v1 --message "$IMPMSG" --extra-layers 1 --layer-mb 0.1 --seed 41
# For 17: an image the node preloads from a registry that needs a login; an image of team-a's
# built FROM it (every layer but the top one); a control image the node pulls only later.
PREMSG="preloaded from a registry that needs a login"
LATEMSG="pulled by the node after a tenant's pull"
mk "$WORK/qpre" --tag v1 --message "$PREMSG" --base-note "17's preloaded base" --extra-layers 1 --layer-mb 0.1 --seed 61
mk "$WORK/qfrom" --tag v1 --message "team-a's app on the preloaded base" --base-note "17's preloaded base" --extra-layers 1 --layer-mb 0.1 --seed 61
mk "$WORK/qlate" --tag v1 --message "$LATEMSG" --base-note "17's late base" --extra-layers 1 --layer-mb 0.1 --seed 63
start_registry pub || exit 1
# 20: the public registry again, through a proxy answering 429 to everything while
# $WORK/limited exists (a registry's rate limit).
_launch_limited() {
  /usr/bin/python3 "$REPO/tests/slowproxy.py" --port "$PORT_1" --to "$REG_pub" --rate 1000000000 --log "$WORK/limited.log" --limited "$WORK/limited" &
  PIDS+=($!); LAUNCHED+=($!)
  wait_serving 10 curl -s -o /dev/null "http://127.0.0.1:$PORT_1/v2/"
}
launch_on_free_ports 1 _launch_limited || { fail "start the proxy that can answer 429"; exit 1; }
LIM=127.0.0.1:$PORT_1
start_registry imp htpasswd alice "$PW_ALICE" || exit 1
IMP_PID=${LAUNCHED[0]}
use_tls_registries || exit 1
start_registry h htpasswd alice "$PW_ALICE" carol "$PW_CAROL" || exit 1
H_PID=${LAUNCHED[0]}
start_registry q htpasswd alice "$PW_ALICE" || exit 1
Q_PID=${LAUNCHED[0]}
start_registry bad || exit 1
cat > "$WORK/acl.json" <<JSON
{"users": {"alice": "$PW_ALICE", "admin": "$PW_ADMIN", "ci:bot": "$PW_CI"}, "access": {"alice": ["private/*"], "admin": ["*"], "ci:bot": ["private/*"]}, "push": ["admin"]}
JSON
start_token_registry t "$WORK/acl.json" || exit 1
TPRIV=$REG_t/private/tok:v1
PAUSE=$REG_pub/k8s/pause:v1
PUB=$REG_pub/public/app:v1
PRIV=$REG_h/private/app:v1
push_image "$WORK/pause" v1 "$PAUSE" || fail "push the sandbox image"
push_image "$WORK/pub" v1 "$PUB" || fail "push the public image"
push_image "$WORK/priv" v1 "$PRIV" "alice:$PW_ALICE" || fail "push the private image"
push_image "$WORK/tpriv" v1 "$TPRIV" "admin:$PW_ADMIN" || fail "push the token registry's private image"
# A tenant's own registry (mallory's), on a port whose name sorts before the public registry's:
# CRI lists an image's names sorted, so names there come first (16).
for try in $(seq 1 40); do
  start_registry x htpasswd mallory "$PW_MAL" || exit 1
  [[ "$REG_x" < "$REG_pub" ]] && break
  kill "${LAUNCHED[0]}"; rm -rf "$WORK/registry-x" "$REG_HOSTS/$REG_x"
done
[[ "$REG_x" < "$REG_pub" ]] || fail "16: no port for mallory's registry sorting before $REG_pub in 40 tries"
# 1c: the sandbox image's bytes in a repository of mallory's own.
push_image "$WORK/pause" v1 "$REG_x/aaa0/pause:v1" "mallory:$PW_MAL" || fail "push the sandbox image's bytes to mallory's registry"
QPRE=$REG_q/private/pre:v1
push_image "$WORK/qpre" v1 "$QPRE" "alice:$PW_ALICE" && push_image "$WORK/qpre" v1 "$REG_x/aaa5/pre:v1" "mallory:$PW_MAL" \
  && push_image "$WORK/qfrom" v1 "$REG_h/private/onpre:v1" "alice:$PW_ALICE" \
  && push_image "$WORK/qlate" v1 "$REG_q/private/late:v1" "alice:$PW_ALICE" && push_image "$WORK/qlate" v1 "$REG_x/aaa6/late:v1" "mallory:$PW_MAL" \
  || fail "push 17's images"
push_image "$WORK/dup3" v1 "$REG_pub/public/dup3:v1" || fail "push dup3 publicly"
for i in 1 2 3 4; do push_image "$WORK/dup3" v1 "$REG_x/aaa$i/dup3:v1" "mallory:$PW_MAL" || fail "push dup3 to mallory's aaa$i"; done
# The same images public (anonymous registry) and private (htpasswd registry).
for i in dup dup2 dup5; do
  push_image "$WORK/$i" v1 "$REG_pub/public/$i:v1" && push_image "$WORK/$i" v1 "$REG_h/private/$i:v1" "alice:$PW_ALICE" || fail "push $i publicly and privately"
done
push_image "$WORK/down" v1 "$REG_h/private/down:v1" "alice:$PW_ALICE" || fail "push 20's private image"
VOLIMG=$REG_h/private/vol:v1
push_image "$WORK/vol" v1 "$VOLIMG" "alice:$PW_ALICE" || fail "push 5e's private volume image"
IMPRIV=$REG_imp/private/imp:v1
push_image "$WORK/ipriv" v1 "$IMPRIV" "alice:$PW_ALICE" || fail "push the plain-http registry's private image"
if [ "$V" = 2.1 ]; then
  # CNI for the user-namespace pods of 5g (every other pod is a host-network pod): Debian's
  # plugins, a point-to-point network of this run's own (name, addresses and IPAM state).
  mkdir -p "$WORK/cni/bin" "$WORK/cni/conf"
  for p in ptp host-local loopback; do ln -sf "/usr/lib/cni/$p" "$WORK/cni/bin/$p"; done
  cat > "$WORK/cni/conf/10-pullgate-test.conflist" <<JSON
{"cniVersion": "1.0.0", "name": "pg-test-$$", "plugins": [
  {"type": "ptp", "ipMasq": false, "ipam": {"type": "host-local", "subnet": "10.251.$((RANDOM % 250)).0/24", "dataDir": "$WORK/cni/ipam"}},
  {"type": "loopback"}]}
JSON
  # A user-namespace container's root (host uid 300000) must be able to reach its rootfs mount
  # point under containerd's state directory, as under /run/containerd (mktemp made $WORK 0700).
  mkdir -p "$WORK/containerd"; chmod 711 "$WORK" "$WORK/containerd"
fi
# (No [namespaces."k8s.io"] table in pullgate's config: with the CRI front on, k8s.io requires a
# principal by default.)
start_cri_stack "$V" "$PAUSE" "$REG_pub" "$REG_h" "$REG_bad" "$REG_t" "$REG_imp" "$REG_x" "$REG_q" "$LIM" || exit 1
check "pullgate's CRI socket is readable by root only" test "$(stat -c %a "$PG/cri.sock")" = 600

front() { "$CRI_BIN" --socket "$PG/cri.sock" "$@"; }
direct() { "$CRI_BIN" --socket "$CTRD_SOCK" "$@"; }
pg() { local sub=$1; shift; "$PG_BIN" "$sub" --address "$PG/api.sock" "$@"; }
jget() { python3 -c 'import json,sys; v=json.load(sys.stdin)
for k in sys.argv[1].split("."): v=v[int(k)] if isinstance(v,list) else v[k]
print(v if not isinstance(v,(dict,list)) else json.dumps(v))' "$1"; }
# podargs POD NS: the cri client's pod arguments (its UID uid-POD, or PODUID when set, even
# to nothing).
podargs() { printf -- '--pod\n%s:%s:%s\n--log-dir\n%s\n' "$1" "$2" "${PODUID-uid-$1}" "$WORK/logs/$1"; }
# run_pod VIA POD NS [JSON]: RunPodSandbox; sets SID.
run_pod() {
  local via=$1 pod=$2 ns=$3 json=${4:-'{}'} out; mapfile -t pa < <(podargs "$pod" "$ns")
  SID=
  out=$("$via" "${pa[@]}" RunPodSandbox "$json" 2>&1) || { echo "$out"; return 1; }
  SID=$(jget pod_sandbox_id <<<"$out")
}
# pull_as POD NS IMAGE [USER:PASS | AUTH_JSON]: PullImage through the front with that pod's
# sandbox config and the pull secret's credential (AUTH_JSON: a CRI AuthConfig, `{...}`).
pull_as() { pull_via front "$@"; }
# pull_via VIA POD NS IMAGE [USER:PASS | AUTH_JSON]: the same through VIA (front, direct, alone).
pull_via() {
  local via=$1 auth=''; shift
  case ${4:-} in
    '') ;;
    '{'*) auth=",\"auth\":$4" ;;
    *) auth=",\"auth\":{\"username\":\"${4%%:*}\",\"password\":\"${4#*:}\"}" ;;
  esac
  mapfile -t pa < <(podargs "$1" "$2")
  "$via" "${pa[@]}" PullImage "{\"image\":{\"image\":\"$3\"}$auth}"
}
# create_in VIA POD NS SID NAME IMAGE [CMD] [EXTRA_CONFIG_JSON] [EXTRA_REQUEST_JSON]: creates a
# container; prints its ID (or the refusal).
create_in() {
  local via=$1 pod=$2 ns=$3 sid=$4 name=$5 img=$6 cmd=${7:-cat /msg} extra=${8:-} top=${9:-} out
  mapfile -t pa < <(podargs "$pod" "$ns")
  out=$("$via" "${pa[@]}" CreateContainer "{\"pod_sandbox_id\":\"$sid\",\"config\":{\"metadata\":{\"name\":\"$name\"},\"image\":{\"image\":\"$img\"},\"command\":[\"/bin/sh\",\"-c\",\"$cmd\"],\"log_path\":\"$name.log\"$extra}$top}" 2>&1) \
    || { echo "$out"; return 1; }
  jget container_id <<<"$out"
}
# start_in VIA CID POD NAME: starts container CID, waits for it to exit, prints its log (or the
# refusal).
start_in() {
  local sock=$CTRD_SOCK; [ "$1" = alone ] && sock=$BASE_SOCK
  "$1" StartContainer "{\"container_id\":\"$2\"}" || return 1
  wait_for 30 bash -c "'$CRI_BIN' --socket '$sock' ContainerStatus '{\"container_id\":\"$2\"}' | grep -q '\"state\":2'" || { echo "container $2 did not exit"; return 1; }
  sed -E 's/^[^ ]+ (stdout|stderr) [FP] //' "$WORK/logs/$3/$4.log"
}
# run_in VIA POD NS SID NAME IMAGE [CMD] [EXTRA_CONFIG_JSON] [EXTRA_REQUEST_JSON]: creates and
# starts a container, waits for it to exit, prints its log (or the refusal).
run_in() {
  local cid; cid=$(create_in "$@") || { echo "$cid"; return 1; }
  CID=$cid
  start_in "$1" "$cid" "$2" "$5"
}
containers_of() { direct ListContainers "{\"filter\":{\"pod_sandbox_id\":\"$1\"}}" | python3 -c 'import json,sys; print(len(json.load(sys.stdin).get("containers") or []))'; }
# has_grant WORD: k8s.io's grants list WORD. The listing itself must work (pullgate grants
# succeeds and prints its header): when it does not, that is a failure of its own (listed by
# summary) and has_grant answers "yes", so that `not has_grant` fails instead of passing as
# "absent". (Callers only ever negate it.)
has_grant() {
  local out rc; out=$(pg grants -n k8s.io 2>&1); rc=$?
  if [ $rc -ne 0 ] || [ "$(head -1 <<<"$out" | awk '{print $1}')" != NAMESPACE ]; then
    fail "has_grant $1: pullgate grants -n k8s.io failed (rc=$rc): $(shown 300 "$out")"; return 0
  fi
  grep -q -- "$1" <<<"$out"
}
k8s_snapshots() { snapshot_count k8s.io; }
snap_labels() { ctr_ -n k8s.io snapshots --snapshotter pullgate info "$1"; }
# image_records REPO: k8s.io's image records of REPO, and the ID records (sha256:...) pointing
# where they point: name, target digest, labels; sorted.
image_records() {
  ctr_ -n k8s.io images ls | awk -v r="$1" 'NR > 1 {print $1, $3, $NF}' \
    | awk -v r="$1" '{n[NR]=$0; name[NR]=$1; t[NR]=$2} index($1, r) == 1 {mine[$2]=1}
        END {for (i = 1; i <= NR; i++) if (index(name[i], r) == 1 || (name[i] ~ /^sha256:/ && mine[t[i]])) print n[i]}' | sort
}

log "1. calls pullgate does not own pass through"
check_out "Version through the front is containerd's" '"runtime_name":"containerd"' front Version
check_has "an unknown method reaches containerd, which answers it (not pullgate)" "unknown method NoSuchMethod for service runtime.v1.RuntimeService" \
  front raw /runtime.v1.RuntimeService/NoSuchMethod
check_out "a method called by path with raw bytes passes (Version: $(direct raw /runtime.v1.RuntimeService/Version))" \
  "$(direct raw /runtime.v1.RuntimeService/Version)" front raw /runtime.v1.RuntimeService/Version
check_out "Status passes" '"conditions"' front Status
check_out "ImageFsInfo passes" '"image_filesystems"' front ImageFsInfo

log "1c. a tenant pulls the sandbox image's bytes privately before the node's first pod"
# pullgate then knows its layers as private before containerd pulls it for the first sandbox, so
# they are not preloaded, and no pod's grant speaks for a sandbox: the sandbox is decided again
# once the image proves public at its own origin.
check "1c: mallory pulls the sandbox image's bytes from a repository of her own ($REG_x/aaa0/pause:v1) with her secret" \
  pull_as mal-0 team-m "$REG_x/aaa0/pause:v1" "mallory:$PW_MAL"
imgs=$(ctr_ -n k8s.io images ls -q 2>&1); irc=$?
check "1c: containerd has not pulled the sandbox image yet (the listing works: rc=$irc)" bash -c '[ "$0" -eq 0 ] && ! grep -qxF "$1" <<<"$2"' "$irc" "$PAUSE" "$imgs"
mark=$(wc -l < "$PG/log")
run_pod front first-0 team-first || fail "1c: the node's first pod does not start: $(shown 400 "$SID")"
SID_FIRST=$SID
check "1c: the node's first pod starts all the same (sandbox $SID)" test -n "$SID"
check "1c: pullgate says why: the sandbox image is public at its own origin" \
  grep -q "admitted: the image is public at its own origin.*public_at=$PAUSE" <(tail -n +"$((mark + 1))" "$PG/log")

log "2. team-a pulls the private image with its secret and runs it"
# Reference: what containerd's own CRI pull records for an image (public, pulled straight).
check "containerd's own CRI PullImage of the public image (reference for the records)" direct PullImage "{\"image\":{\"image\":\"$PUB\"}}"
ref_records=$(image_records "$REG_pub/public/app")
check "the public image is removed again (through the front)" front RemoveImage "{\"image\":{\"image\":\"$PUB\"}}"
run_pod front app-a team-a || fail "RunPodSandbox for team-a/app-a"; SID_A=$SID
check_out "team-a's PullImage of the public image through the front" '"image_ref":"sha256:' pull_as app-a team-a "$PUB"
got_records=$(image_records "$REG_pub/public/app")
check "the image records are exactly those containerd's CRI makes (names, targets, managed label): $(tr '\n' ' ' <<<"$ref_records") (got: $(tr '\n' ' ' <<<"$got_records"))" \
  test "$got_records" = "$ref_records" -a -n "$ref_records"
# A name with a tag and a digest: containerd's CRI records it without the tag, and so must the
# front (containerd builds containers from the image's names in that form).
PUB_D=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' "$WORK/pub/index.json")
check "team-a's PullImage of the public image by tag and digest through the front" pull_as app-a team-a "$REG_pub/public/app:v1@$PUB_D"
named_as_cri() { local l; l=$(listing ctr_ -n k8s.io images ls -q) || return 1; grep -qxF "$REG_pub/public/app@$PUB_D" <<<"$l" && ! grep -qF ":v1@" <<<"$l"; }
check "its record is named as containerd's CRI names it (repo@digest, without the tag)" named_as_cri
out=$(pull_as app-a team-a "$PRIV" "alice:$PW_ALICE" 2>&1); rc=$?
check "team-a's PullImage of the private image with alice's secret ($out)" test $rc -eq 0
PRIV_ID=$(jget image_ref <<<"$out" 2>/dev/null)
st=$(front ImageStatus "{\"image\":{\"image\":\"$PRIV\"}}")
check "CRI ImageStatus shows it at once, with its ID, tag and repo digest" bash -c \
  "grep -qF '\"id\":\"$PRIV_ID\"' <<<'$st' && grep -qF '\"$PRIV\"' <<<'$st' && grep -qF '\"$REG_h/private/app@sha256:' <<<'$st'"
check_out "ListImages lists it" "$PRIV" front ListImages
check_out "pullgate grants lists team-a's grant in k8s.io" "team-a" pg grants -n k8s.io
check_out "team-a's container runs the private image" "$PRIVMSG" run_in front app-a team-a "$SID_A" a1 "$PRIV"
check_out "by image ID too" "$PRIVMSG" run_in front app-a team-a "$SID_A" a2 "$PRIV_ID"

log "3. team-b without a secret"
run_pod front app-b team-b || fail "RunPodSandbox for team-b/app-b"; SID_B=$SID
out=$(run_in front app-b team-b "$SID_B" b1 "$PRIV" 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -qF "$REFUSED team-b/app-b" <<<"$out" && grep -qF "$PRIV" <<<"$out" && grep -qF "imagePullPolicy: Always" <<<"$out" \
   && grep -qF "KubeletEnsureSecretPulledImages" <<<"$out" && grep -q "code=PermissionDenied" <<<"$out" && ! grep -qF "$PRIVMSG" <<<"$out"; then
  pass "CreateContainer of the present private image is refused, naming the pod, the image and the fix"; sed 's/^/         /' <<<"$out"
else fail "team-b's CreateContainer: rc=$rc: $out"; fi
check "and containerd has no container for it" test "$(containers_of "$SID_B")" = 0
check_refused "by image ID too" "$REFUSED team-b/app-b" "$PRIVMSG" run_in front app-b team-b "$SID_B" b2 "$PRIV_ID"
check_refused "team-b's PullImage without a secret fails as the registry says" "requires credentials" "" pull_as app-b team-b "$PRIV"
check_refused "with a wrong secret too, and the secret is not in the message" "rejected the credentials" "wrong-Pw-123" pull_as app-b team-b "$PRIV" "carol:wrong-Pw-123"
check "no grant for team-b" not has_grant team-b

log "4. team-b with its own secret: one manifest round-trip"
snaps=$(k8s_snapshots) || fail "4: ctr snapshots ls in k8s.io (the count before team-b's pull) failed"
mark=$(wc -l < "$WORK/registry-h/log")
check_out "team-b's PullImage with carol's secret" '"image_ref":"sha256:' pull_as app-b team-b "$PRIV" "carol:$PW_CAROL"
after=$(tail -n +"$((mark + 1))" "$WORK/registry-h/log")
check "the registry saw the manifest request" grep -q '"[A-Z]* /v2/private/app/manifests/' <<<"$after"
check "and no blob GET" not grep -q '"GET /v2/private/app/blobs/' <<<"$after"
# snaps_unchanged: k8s.io's snapshot listing works, as it did before the pull, and counts the same.
snaps_unchanged() {
  local n; n=$(k8s_snapshots) || return 1
  [ -n "$snaps" ] && [ "$n" = "$snaps" ] || { echo "k8s.io holds $n snapshots, before: ${snaps:-unknown}"; return 1; }
}
check "and nothing was extracted (k8s.io holds $snaps snapshots, as before)" snaps_unchanged
check_out "team-b's container runs" "$PRIVMSG" run_in front app-b team-b "$SID_B" b3 "$PRIV"

log "4b. containers of one image created at once, by two namespaces' pods"
par=()
for i in 1 2 3 4; do
  run_in front app-a team-a "$SID_A" "par-a$i" "$PRIV" > "$WORK/par-a$i.out" 2>&1 & par+=($!)
  run_in front app-b team-b "$SID_B" "par-b$i" "$PRIV" > "$WORK/par-b$i.out" 2>&1 & par+=($!)
done
wait "${par[@]}"
ok=0; for f in "$WORK"/par-*.out; do grep -qF "$PRIVMSG" "$f" && ok=$((ok + 1)); done
check "4b: all 8 were created and ran ($ok; none undone for another's admission)" test "$ok" -eq 8
grep -L "$PRIVMSG" "$WORK"/par-*.out 2>/dev/null | head -2 | while read -r f; do sed 's/^/         /' "$f" | head -3; done

log "5. attacker-made manifests over team-a's layers"
# 5a: forged layer IDs: the attacker's config claims team-a's diffIDs over its own blobs.
claims=$(pg inspect "$PRIV" | grep -o 'diffID sha256:[0-9a-f]*' | cut -d' ' -f2 | paste -sd, -)
check "5a: team-a's layer IDs, read with pullgate inspect ($(tr -cd , <<<"$claims" | wc -c) commas)" test -n "$claims"
mk "$WORK/forged" --tag v1 --message "attacker" --extra-layers 1 --layer-mb 0.1 --seed 22 --claim-diff-ids "$claims"
FORGED=$REG_bad/c/forged:v1
push_image "$WORK/forged" v1 "$FORGED" || fail "push the forged image"
run_pod front app-c team-c || fail "RunPodSandbox for team-c/app-c"; SID_C=$SID
check_refused "5a: team-c's PullImage of the forged image fails: the config lies about its layers" "config claims" "" pull_as app-c team-c "$FORGED"
check "5a: no grant for team-c" not has_grant team-c
# The forged image on the node anyway (imported without unpacking, as a preloaded image would be).
tar -C "$WORK/forged" -cf "$WORK/forged.tar" .
ctr_ -n k8s.io images import --no-unpack --base-name "$REG_bad/c/forged" "$WORK/forged.tar" >/dev/null 2>&1 \
  || ctr_ -n k8s.io images import --no-unpack --index-name "$WORK/forged.tar" >/dev/null 2>&1
check "5a: the forged image is present in k8s.io anyway" bash -c "'${CTR[0]}' -a '$CTRD_SOCK' -n k8s.io images ls -q | grep -q forged"
fimg=$("${CTR[@]}" -n k8s.io images ls -q | grep forged | head -1)
check_refused "5a: its CreateContainer is refused, and shows nothing of team-a's" "$REFUSED team-c/app-c" "$PRIVMSG" \
  run_in front app-c team-c "$SID_C" c1 "$fimg" "cat /msg"
# 5b: team-a's manifest and blob digests, from the attacker's registry (which vouches for the blobs
# with HEAD 200 but serves none).
_launch_evil() {
  /usr/bin/python3 "$REPO/tests/evilregistry.py" --port "$PORT_1" --mode vouch --repo c/evil --tag v1 \
    --manifest "$WORK/priv/blobs/sha256/$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"][7:])' "$WORK/priv/index.json")" \
    --log "$WORK/evil.log" &
  PIDS+=($!); LAUNCHED+=($!)
  wait_serving 20 curl -s -o /dev/null "http://127.0.0.1:$PORT_1/v2/"
}
launch_on_free_ports 1 _launch_evil || fail "start the attacker's registry"
EVIL=127.0.0.1:$PORT_1; write_hosts_toml "$HOSTS" "$EVIL"
check_refused "5b: team-c's PullImage of team-a's manifest from the attacker's registry fails (the origin serves no byte)" \
  "not found|404|unknown blob" "" pull_as app-c team-c "$EVIL/c/evil:v1"
check "5b: no grant for team-c" not has_grant team-c
check_refused "5b: and team-c's CreateContainer of team-a's image (same manifest, present) is refused" "$REFUSED team-c/app-c" "$PRIVMSG" \
  run_in front app-c team-c "$SID_C" c2 "$PRIV"

# 5c: a checkpoint image (containerd 2.x restores it onto another image it pulls itself, which the
# front could not decide): refused on every version, before containerd sees it.
python3 - "$WORK/pub" "$WORK/ckpt" <<'PY'
import hashlib, json, shutil, sys
src, dst = sys.argv[1:3]
shutil.copytree(src, dst)
idx = json.load(open(f"{dst}/index.json"))
d = idx["manifests"][0]["digest"][7:]
m = json.load(open(f"{dst}/blobs/sha256/{d}"))
m["annotations"] = {"org.criu.checkpoint.container.name": "app"}
# Its own config (so its own image ID): an image ID groups every record of one config in CRI.
c = json.load(open(f"{dst}/blobs/sha256/{m['config']['digest'][7:]}"))
c.setdefault("config", {})["Labels"] = {"checkpoint": "yes"}
cb = json.dumps(c).encode(); ch = hashlib.sha256(cb).hexdigest()
open(f"{dst}/blobs/sha256/{ch}", "wb").write(cb)
m["config"].update(digest="sha256:" + ch, size=len(cb))
b = json.dumps(m).encode()
h = hashlib.sha256(b).hexdigest()
open(f"{dst}/blobs/sha256/{h}", "wb").write(b)
idx["manifests"][0].update(digest="sha256:" + h, size=len(b))
json.dump(idx, open(f"{dst}/index.json", "w"))
PY
CKPT=$REG_bad/c/ckpt:v1
push_image "$WORK/ckpt" v1 "$CKPT" || fail "5c: push the checkpoint image"
check_refused "5c: team-c's PullImage of a checkpoint image is refused" "checkpoint image" "" pull_as app-c team-c "$CKPT"
check "5c: and it is not on the node" lacks c/ckpt ctr_ -n k8s.io images ls -q
# On the node anyway (imported by an administrator): CreateContainer is refused.
tar -C "$WORK/ckpt" -cf "$WORK/ckpt.tar" .
ctr_ -n k8s.io images import --no-unpack --base-name "$REG_bad/c/ckpt" "$WORK/ckpt.tar" >/dev/null 2>&1
check "5c: imported by an administrator, the checkpoint image is present" bash -c "'${CTR[0]}' -a '$CTRD_SOCK' -n k8s.io images ls -q | grep -q c/ckpt"
cimg=$("${CTR[@]}" -n k8s.io images ls -q | grep c/ckpt | head -1)
check_refused "5c: its CreateContainer is refused: pullgate cannot decide a restore" "checkpoint image" "$PRIVMSG" \
  run_in front app-c team-c "$SID_C" c6 "$cimg"
check_refused "5d: a CreateContainer naming a file on the node (2.x: a checkpoint archive) is refused" "names a file on the node" "" \
  run_in front app-c team-c "$SID_C" c7 /etc/hostname
# A name that is an image name too (docker.io/etc/hostname) and, from containerd's working
# directory (/), a file: containerd 2.1 would restore from the file.
check_refused "5d: so is one naming a file from containerd's working directory (etc/hostname)" "names a file on the node" "" \
  run_in front app-c team-c "$SID_C" c7b etc/hostname
# The annotation's key written with a JSON escape ("org.criu.checkpoin\u0074..."): the same key
# to containerd, which decodes the document before it looks. A restore pulls the image its
# metadata names (PUB_REF, a repository nobody pulled; containerd 2.1 and 2.4 file it under that
# name) and, in later containerd, files it under a second name too (PLANTED, in team-a's registry).
PLANTED=$REG_h/private/planted:v1
push_image "$WORK/pub" v1 "$REG_pub/public/restore-base:v1" || fail "5c: push the image a checkpoint restores onto"
PUB_REF=$REG_pub/public/restore-base@$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' "$WORK/pub/index.json")
python3 "$REPO/tests/mkcheckpoint.py" "$WORK/ckpt-esc" --escaped --rootfs-ref "$PUB_REF" --rootfs-name "$PLANTED" >/dev/null
check "5c: the escaped checkpoint image's manifest spells its key escaped" grep -rqF 'checkpoin\u0074.container.name' "$WORK/ckpt-esc/blobs/sha256"
CKPT_ESC=$REG_bad/c/ckpt-esc:v1
push_image "$WORK/ckpt-esc" v1 "$CKPT_ESC" || fail "5c: push the escaped checkpoint image"
check_refused "5c: team-c's PullImage of a checkpoint image whose key is written with an escape is refused" "checkpoint image" "" \
  pull_as app-c team-c "$CKPT_ESC"
check "5c: the image listing works" ctr_ -n k8s.io images ls -q
check "5c: and it is not on the node" no_image k8s.io "$CKPT_ESC"
# Imported by an administrator and unpacked (through pullgate: a restore views its chain).
tar -C "$WORK/ckpt-esc" -cf "$WORK/ckpt-esc.tar" .
check "5c: an administrator imports and unpacks the escaped checkpoint image" \
  ctr_ -n k8s.io images import --snapshotter pullgate --base-name "$REG_bad/c/ckpt-esc" "$WORK/ckpt-esc.tar"
check "5c: it is present" has_image k8s.io "$CKPT_ESC"
check_refused "5c: its CreateContainer through the front is refused by the front: pullgate cannot decide a restore" "cannot decide a container .*checkpoint image" "" \
  run_in front app-c team-c "$SID_C" c8 "$CKPT_ESC"
check "5c: the image listing works" ctr_ -n k8s.io images ls -q
check "5c: no image record was filed under $PLANTED" no_image k8s.io "$PLANTED"
check "5c: nor under $PUB_REF" no_image k8s.io "$PUB_REF"

# 5f: an index that a looser platform match would read as team-a's: linux/amd64/v9 -> team-a's
# manifest, listed first; linux/amd64 -> the attacker's own (public) one. containerd chooses the
# exact linux/amd64 entry; were pullgate to choose the first amd64 of any variant (or the image
# record to point at the index), CRI would file the attacker's tag under team-a's image ID, and
# containerd could later build team-a's containers from whatever that tag names.
python3 - "$WORK/pub" "$WORK/priv" "$WORK/twofaced" <<'PY'
import hashlib, json, shutil, sys
pub, priv, dst = sys.argv[1:4]
shutil.copytree(pub, dst)
for f in __import__("os").listdir(f"{priv}/blobs/sha256"):
    shutil.copy(f"{priv}/blobs/sha256/{f}", f"{dst}/blobs/sha256/{f}")
def top(d):
    e = json.load(open(f"{d}/index.json"))["manifests"][0]
    return {"mediaType": e.get("mediaType", "application/vnd.oci.image.manifest.v1+json"), "digest": e["digest"], "size": e["size"]}
idx = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [
    dict(top(priv), platform={"os": "linux", "architecture": "amd64", "variant": "v9"}),
    dict(top(pub), platform={"os": "linux", "architecture": "amd64"})]}
b = json.dumps(idx).encode(); h = hashlib.sha256(b).hexdigest()
open(f"{dst}/blobs/sha256/{h}", "wb").write(b)
json.dump({"schemaVersion": 2, "manifests": [{"mediaType": idx["mediaType"], "digest": "sha256:" + h, "size": len(b),
           "annotations": {"org.opencontainers.image.ref.name": "v1"}}]}, open(f"{dst}/index.json", "w"))
PY
TWO=$REG_bad/c/twofaced:v1
DIFF_HOSTILE=1 push_image "$WORK/twofaced" v1 "$TWO" "" --all || fail "5f: push the two-faced index"
check "5f: team-c's PullImage of the two-faced index" pull_as app-c team-c "$TWO"
two_id=$(front ImageStatus "{\"image\":{\"image\":\"$TWO\"}}" | jget image.id 2>/dev/null)
check "5f: CRI does not file it under team-a's image ID ($two_id)" test -n "$two_id" -a "$two_id" != "$PRIV_ID"
check_out "5f: team-c's container of it runs the entry containerd chooses too (its own)" "public app" run_in front app-c team-c "$SID_C" c9 "$TWO"
check_out "5f: team-a still runs its own image by image ID" "$PRIVMSG" run_in front app-a team-a "$SID_A" a4 "$PRIV_ID"

log "12. one reading: documents containerd and pullgate would read differently are refused"
# Each served by an attacker's registry holding the attacker's own public image (tests/evilregistry.py
# --blobs), with one document crafted: (a) the manifest names the attacker's config as "config" and
# team-a's as a later "Config" (Go's reading: the last, case-insensitively); (b) the config lists
# the attacker's layers as "rootfs" and team-a's layer IDs as a later "RootFS"; (c) the manifest
# adds team-a's layers as "layer\u017f" (Go folds U+017F to "s": "layers"); (d) an index with an
# x86_64 and an amd64 entry (one platform to containerd) naming different manifests.
python3 - "$WORK/pub" "$WORK/priv" "$WORK/twoway" "$claims" <<'PY'
import hashlib, json, os, shutil, sys
pub, priv, out, claims = sys.argv[1:5]
def blob(d, h): return open(f"{d}/blobs/sha256/{h[7:] if h.startswith('sha256:') else h}", "rb").read()
def top(d): return json.load(open(f"{d}/index.json"))["manifests"][0]
def put(layout, b):
    h = hashlib.sha256(b).hexdigest(); open(f"{layout}/blobs/sha256/{h}", "wb").write(b); return "sha256:" + h
pm = json.loads(blob(pub, top(pub)["digest"]))
vm = json.loads(blob(priv, top(priv)["digest"]))
for name in ("manifest", "config", "fold", "index"):
    shutil.copytree(pub, f"{out}/{name}")
def open_end(b):   # the document without its closing brace, to append keys
    t = b.decode().rstrip(); return t[:t.rindex("}")]
text = open_end(blob(pub, top(pub)["digest"]))
# (a) "config" then "Config": team-a's config.
a = (text + ',"Config":' + json.dumps(vm["config"]) + "}").encode()
open(f"{out}/manifest.digest", "w").write(put(f"{out}/manifest", a))
# (b) "rootfs" then "RootFS": team-a's layer IDs.
ctext = open_end(blob(pub, pm["config"]["digest"]))
cb = (ctext + ',"RootFS":{"type":"layers","diff_ids":' + json.dumps(claims.split(",")) + "}}").encode()
cd = put(f"{out}/config", cb)
m = dict(pm); m["config"] = dict(pm["config"], digest=cd, size=len(cb))
open(f"{out}/config.digest", "w").write(put(f"{out}/config", json.dumps(m).encode()))
# (c) "layers" then "layer\u017f" (Go: layers): team-a's layers.
c = (text + ',"layer\\u017f":' + json.dumps(vm["layers"]) + "}").encode()
open(f"{out}/fold.digest", "w").write(put(f"{out}/fold", c))
# (d) one platform, two manifests.
e = lambda d, arch: {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": top(d)["digest"], "size": top(d)["size"],
                     "platform": {"os": "linux", "architecture": arch}}
idx = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [e(pub, "x86_64"), e(priv, "amd64")]}
open(f"{out}/index.digest", "w").write(put(f"{out}/index", json.dumps(idx).encode()))
PY
for kind in manifest config fold index; do
  eval "_launch_twoway_$kind() {
    /usr/bin/python3 '$REPO/tests/evilregistry.py' --port \"\$PORT_1\" --repo c/$kind --tag v1 --blobs '$WORK/twoway/$kind/blobs/sha256' \
      --manifest '$WORK/twoway/$kind/blobs/sha256/'\$(cut -c8- '$WORK/twoway/$kind.digest') --log '$WORK/twoway-$kind.log' &
    PIDS+=(\$!); LAUNCHED+=(\$!)
    wait_serving 20 curl -s -o /dev/null \"http://127.0.0.1:\$PORT_1/v2/\"
  }"
  launch_on_free_ports 1 "_launch_twoway_$kind" || fail "12: start the attacker's registry ($kind)"
  printf -v "TW_$kind" '%s' "127.0.0.1:$PORT_1/c/$kind:v1"; write_hosts_toml "$HOSTS" "127.0.0.1:$PORT_1"
done
TWO_WAYS='means two things'
grants_before=$(pg grants -n k8s.io 2>&1); gb_rc=$?
check_refused "12a: team-c's PullImage of a manifest with \"config\" and \"Config\" is refused" "key \"Config\".*$TWO_WAYS" "" pull_as app-c team-c "$TW_manifest"
check_refused "12a: so is pullgate pull of it in namespace tw" "key \"Config\".*$TWO_WAYS" "" pg pull -n tw --plain-http "$TW_manifest"
check_refused "12b: a config with \"rootfs\" and \"RootFS\" (team-a's layer IDs) is refused" "key \"RootFS\".*$TWO_WAYS" "" pull_as app-c team-c "$TW_config"
check_refused "12b: by pullgate pull too" "key \"RootFS\".*$TWO_WAYS" "" pg pull -n tw --plain-http "$TW_config"
check_refused "12c: a manifest with \"layer\\u017f\" (Go reads \"layers\") is refused" "$TWO_WAYS" "" pull_as app-c team-c "$TW_fold"
check_refused "12d: an index naming two manifests for one platform (x86_64 and amd64) is refused" "2 different manifests for platform linux/amd64" "" \
  pull_as app-c team-c "$TW_index"
check_refused "12d: by pullgate verify too" "2 different manifests for platform linux/amd64" "" pg verify -n tw --plain-http "$TW_index"
grants_after=$(pg grants -n k8s.io 2>&1); ga_rc=$?
# (Both listings must have worked: two failures with the same message are equal too.)
check "12: pullgate grants answers, and nothing was granted ($(wc -l <<<"$grants_after") lines, as before)" \
  bash -c "[ \"\$3\" -eq 0 ] && [ \"\$4\" -eq 0 ] || { echo \"pullgate grants: rc=\$3 (before: rc=\$4)\"; exit 1; }; [ -n \"\$1\" ] && [ \"\$1\" = \"\$2\" ]" \
  _ "$grants_after" "$grants_before" "$ga_rc" "$gb_rc"
tw_grants=$(pg grants -n tw 2>&1); tw_rc=$?
check "12: pullgate grants -n tw answers and lists nothing ($tw_grants)" bash -c "[ $tw_rc -eq 0 ] && ! grep -q 'c/' <<<\"\$1\"" _ "$tw_grants"
tw_images() { local l; l=$(ctr_ -n k8s.io images ls -q) || return 2; ! grep -qE '/c/(manifest|config|fold|index):' <<<"$l"; }
check "12: containerd's image list answers and holds none of the documents" tw_images
check_out "12: team-a's image still runs for team-a (no name of it was re-pointed)" "$PRIVMSG" run_in front app-a team-a "$SID_A" a6 "$PRIV"
check_out "12: and by its image ID" "$PRIVMSG" run_in front app-a team-a "$SID_A" a7 "$PRIV_ID"

if [ "$V" = 2.1 ] || [ "$V" = 2.4 ]; then
  log "5e. image volumes (containerd 2.1 and 2.4): each image a container mounts is decided too"
  vol() { printf ',"mounts":[{"container_path":"/vol","readonly":true,"image":{"image":"%s"}}]' "$1"; }
  check_refused "5e: team-c's public container with team-a's private image as a volume is refused" "$REFUSED team-c/app-c" "$PRIVMSG" \
    run_in front app-c team-c "$SID_C" c8 "$PUB" "cat /vol/msg" "$(vol "$PRIV")"
  check_out "5e: team-a's public container with the private image as a volume reads it" "$PRIVMSG" \
    run_in front app-a team-a "$SID_A" a3 "$PUB" "cat /vol/msg" "$(vol "$PRIV")"
  # The rootfs and a volume of one private image, in a new pod: containerd prepares the volume
  # first; each Prepare takes the admission made for it.
  run_pod front app-a5 team-a || fail "5e: RunPodSandbox for team-a/app-a5"; SID_A5=$SID
  check_out "5e: team-a's container whose rootfs and volume are the same private image runs" "rootfs=$PRIVMSG vol=$PRIVMSG" \
    run_in front app-a5 team-a "$SID_A5" a5 "$PRIV" 'echo rootfs=$(cat /msg) vol=$(cat /vol/msg)' "$(vol "$PRIV")"
  check_out "5e: the pod's next container reuses the mounted volume (no new Prepare) and runs" "rootfs=$PRIVMSG vol=$PRIVMSG" \
    run_in front app-a5 team-a "$SID_A5" a5b "$PRIV" 'echo rootfs=$(cat /msg) vol=$(cat /vol/msg)' "$(vol "$PRIV")"
  front StopPodSandbox "{\"pod_sandbox_id\":\"$SID_A5\"}" >/dev/null 2>&1; front RemovePodSandbox "{\"pod_sandbox_id\":\"$SID_A5\"}" >/dev/null 2>&1
  # A volume whose chain k8s.io adopted from pullgate's unpack in another namespace (containerd
  # links that namespace's snapshot): the pod's next container finds the mounted volume still.
  out=$(pg pull -n vol-first --user "alice:$PW_ALICE" "$VOLIMG" 2>&1)
  check "5e: namespace vol-first pulls the volume image first, pullgate unpacking it there ($(tail -n 1 <<<"$out"))" grep -q " [1-9][0-9]* layer(s) extracted" <<<"$out"
  run_pod front app-a6 team-a || fail "5e: RunPodSandbox for team-a/app-a6"; SID_A6=$SID
  check "5e: team-a's pod pulls it through the front" pull_as app-a6 team-a "$VOLIMG" "alice:$PW_ALICE"
  check "5e: k8s.io adopted vol-first's unpack (pullgate's log: the front's pull extracted no layer, adopted some)" \
    grep -qE "CRI PullImage.*private/vol:v1.*extracted=0 adopted=[1-9]|private/vol:v1.*extracted=0 adopted=[1-9].*CRI PullImage" "$PG/log"
  check_out "5e: the pod's container with the volume reads it" "vol=$VOLMSG" \
    run_in front app-a6 team-a "$SID_A6" a6v "$PUB" 'echo vol=$(cat /vol/msg)' "$(vol "$VOLIMG")"
  check_out "5e: and the pod's next container, on the mounted volume, too" "vol=$VOLMSG" \
    run_in front app-a6 team-a "$SID_A6" a6w "$PUB" 'echo vol=$(cat /vol/msg)' "$(vol "$VOLIMG")"
  front StopPodSandbox "{\"pod_sandbox_id\":\"$SID_A6\"}" >/dev/null 2>&1; front RemovePodSandbox "{\"pod_sandbox_id\":\"$SID_A6\"}" >/dev/null 2>&1
fi

if [ "$V" = 2.1 ]; then
  log "5h. race: another pod's image volume of team-a's image prepared while team-a's containers are created (30 rounds)"
  # The attacker's pod goes straight to containerd (as a kubelet bypassing the front would), so its
  # image volume's Prepare is one the front never decided; team-a's creations through the front
  # have their admissions on offer meanwhile. It must never take one.
  run_pod direct evil-v team-c || fail "5h: RunPodSandbox (direct) for team-c/evil-v"; SID_EV=$SID
  leaks=0; victim_ok=0; log_from=$(wc -l < "$PG/log")
  for r in $(seq 1 30); do
    run_in front app-a team-a "$SID_A" "race-a$r" "$PRIV" > "$WORK/race-a$r.out" 2>&1 & pa=$!
    run_in direct evil-v team-c "$SID_EV" "race-c$r" "$PUB" "cat /vol/msg" "$(vol "$PRIV")" > "$WORK/race-c$r.out" 2>&1 & pc=$!
    run_in direct evil-v team-c "$SID_EV" "race-d$r" "$PUB" "cat /vol/msg" "$(vol "$PRIV")" > "$WORK/race-d$r.out" 2>&1 & pd=$!
    wait $pa $pc $pd
    grep -qF "$PRIVMSG" "$WORK/race-c$r.out" "$WORK/race-d$r.out" && leaks=$((leaks + 1))
    grep -qF "$PRIVMSG" "$WORK/race-a$r.out" && victim_ok=$((victim_ok + 1))
  done
  # Overlap, from pullgate's own log: attacker volume Prepares made while one of team-a's
  # admissions was decided and its rootfs not yet prepared.
  overlap=$(tail -n +"$((log_from + 1))" "$PG/log" | python3 -c '
import re, sys
sb, opened, n = sys.argv[1], 0, 0
for line in sys.stdin:
    if "CRI CreateContainer admitted" in line and "principal=team-a" in line: opened += 1
    elif "create snapshot" in line:
        k = re.search(r"key=\"?([^\" ]+)", line)
        k = k.group(1) if k else ""
        if re.search(r"/[0-9a-f]{64}$", k) and "principal=team-a" in line: opened = max(0, opened - 1)
        elif "image-volumes/" + sb + "/" in k and opened > 0: n += 1
print(n)' "$SID_EV")
  check "5h: in 30 rounds no attacker volume showed team-a's private file (leaks: $leaks)" test "$leaks" -eq 0
  # Every one of the 60 attacker attempts must end in pullgate's refusal; any other end is shown.
  denials=$(grep -l 'pullgate denied' "$WORK"/race-[cd]*.out | wc -l)
  others=$(for f in "$WORK"/race-[cd]*.out; do grep -q 'pullgate denied' "$f" || { head -c 300 "$f" | tr '\n' ' '; echo; }; done \
    | sed -E 's/[0-9a-f]{64}/<id>/g; s/[0-9]{9,}/<n>/g' | sort | uniq -c)
  check "5h: pullgate refused every one of the attacker's 60 containers ($denials did; others: ${others:-none})" test "$denials" -eq 60
  check "5h: team-a's 30 containers all ran ($victim_ok)" test "$victim_ok" -eq 30
  check "5h: the operations overlapped: $overlap attacker volume Prepares came while a team-a admission was open" test "${overlap:-0}" -ge 1
  front StopPodSandbox "{\"pod_sandbox_id\":\"$SID_EV\"}" >/dev/null 2>&1; front RemovePodSandbox "{\"pod_sandbox_id\":\"$SID_EV\"}" >/dev/null 2>&1
fi

if [ "$V" = 2.1 ]; then
  log "5g. user-namespace pods (hostUsers: false; containerd 2.1 with runc 1.2)"
  # containerd copies the image's chain as <id>-remap (chowned into the pod's range), commits it,
  # and prepares the container on the copy: decided as the chain, for the pod's principal. (A
  # user-namespace pod needs a network namespace of its own, so these pods use CNI: see setup.)
  ns_opts='"namespace_options":{"network":0,"pid":1,"ipc":0,"userns_options":{"mode":0,"uids":[{"host_id":300000,"container_id":0,"length":65536}],"gids":[{"host_id":300000,"container_id":0,"length":65536}]}}'
  USERNS_POD="{\"config\":{\"linux\":{\"security_context\":{$ns_opts}}}}"
  USERNS_CTR=",\"linux\":{\"security_context\":{$ns_opts}}"
  USERNS_SB=",\"sandbox_config\":{\"linux\":{\"security_context\":{$ns_opts}}}"
  run_pod front app-u team-a "$USERNS_POD" > "$WORK/userns.out" 2>&1 || fail "5g: RunPodSandbox for team-a/app-u (user namespace): $(head -c 600 "$WORK/userns.out")"; SID_U=$SID
  check_out "5g: team-a's user-namespace container runs the private image" "$PRIVMSG" \
    run_in front app-u team-a "$SID_U" u1 "$PRIV" "cat /msg" "$USERNS_CTR" "$USERNS_SB"
  check_out "5g: its process runs as root of its own user namespace, mapped to 300000 on the node" "map= 0 300000 65536" \
    run_in front app-u team-a "$SID_U" u2 "$PRIV" 'echo map=$(cat /proc/self/uid_map)' "$USERNS_CTR" "$USERNS_SB"
  run_pod front app-u2 team-c "$USERNS_POD" || fail "5g: RunPodSandbox for team-c/app-u2 (user namespace)"; SID_U2=$SID
  check_refused "5g: team-c's user-namespace container of team-a's image is refused" "$REFUSED team-c/app-u2" "$PRIVMSG" \
    run_in front app-u2 team-c "$SID_U2" u3 "$PRIV" "cat /msg" "$USERNS_CTR" "$USERNS_SB"
  check_out "5g: team-c's user-namespace container of the public image runs" "public app" \
    run_in front app-u2 team-c "$SID_U2" u4 "$PUB" "cat /msg" "$USERNS_CTR" "$USERNS_SB"
  for s in "$SID_U" "$SID_U2"; do front StopPodSandbox "{\"pod_sandbox_id\":\"$s\"}" >/dev/null 2>&1; front RemovePodSandbox "{\"pod_sandbox_id\":\"$s\"}" >/dev/null 2>&1; done
fi

log "6. annotations claiming another principal or carrying containerd.io/snapshot.ref"
PRIV_CHAIN=$(image_top_chain k8s.io "$PRIV")
ANN_P='{"containerd.io/snapshot/pullgate.principal":"team-a","containerd.io/snapshot/pullgate.x":"y"}'
ANN_R="{\"containerd.io/snapshot.ref\":\"${PRIV_CHAIN:-sha256:0}\"}"
# no_pullgate_labels KEY: the snapshot KEY exists in k8s.io and carries no label of those keys.
# no_pullgate_labels KEY: snapshot KEY carries none of the pod's pullgate annotations: no
# containerd.io/snapshot.ref, and of pullgate's labels only the sandbox label the front adds.
no_pullgate_labels() {
  local l; l=$(snap_labels "$1" 2>&1) || { echo "$l"; return 1; }
  grep -q '"Kind"' <<<"$l" && ! grep -v '"containerd.io/snapshot/pullgate.sandbox": "true"' <<<"$l" | grep -qE 'containerd.io/snapshot.ref|snapshot/pullgate'
}
# containerd passes a pod's containerd.io/snapshot/ annotations to its sandbox's Prepare (1.6,
# 1.7, 2.1), and a container's to its rootfs Prepare on 1.6 only (containerd's CRI
# annotations): on 1.7 and 2.1 the container-annotation checks cannot fail whatever pullgate does, so
# they are reported as not applicable there (n/a, not counted), and run on 1.6.
# container_ann DESC CMD...: CMD (a check) on 1.6; an n/a line on 1.7 and 2.1.
container_ann() {
  local d=$1; shift
  if [ "$V" = 1.6 ]; then "$@"
  else na "$d: containerd $V passes container annotations to no Prepare, so this cannot fail here"; fi
}
run_pod front app-c2 team-c "{\"config\":{\"annotations\":$ANN_P}}" || fail "6: RunPodSandbox for team-c/app-c2 annotated with team-a's principal"; SID_C2=$SID
check "6: its sandbox's snapshot reached pullgate without the pullgate annotations" no_pullgate_labels "${SID_C2:-no-sandbox}"
container_ann "6: a container annotated as team-a's, in that pod, is refused" \
  check_refused "6: a container annotated as team-a's, in that pod, is refused" "$REFUSED team-c/app-c2" "$PRIVMSG" \
  run_in front app-c2 team-c "$SID_C2" c3 "$PRIV" "cat /msg" ",\"annotations\":$ANN_P"
# ... and containerd.io/snapshot.ref (containerd itself answers a Prepare carrying it with
# "already exists" when the target exists, so a pod carrying it would not even start).
run_pod front app-c3 team-c "{\"config\":{\"annotations\":$ANN_R}}" || fail "6: RunPodSandbox for team-c/app-c3 annotated with containerd.io/snapshot.ref"; SID_C3=$SID
check "6: its sandbox's snapshot reached pullgate without containerd.io/snapshot.ref" no_pullgate_labels "${SID_C3:-no-sandbox}"
container_ann "6: a container annotated with snapshot.ref, in that pod, is refused" \
  check_refused "6: a container annotated with snapshot.ref, in that pod, is refused" "$REFUSED team-c/app-c3" "$PRIVMSG" \
  run_in front app-c3 team-c "$SID_C3" c5 "$PRIV" "cat /msg" ",\"annotations\":$ANN_R"
check_out "6: a public container with both annotations runs" "public app" \
  run_in front app-c3 team-c "$SID_C3" c4 "$PUB" "cat /msg" ",\"annotations\":${ANN_P%\}},${ANN_R#\{}"
# (Only with the pod's ID: a filter with an empty one lists every pod's containers.)
C4=""; [ -n "${SID_C3:-}" ] && C4=$(direct ListContainers "{\"filter\":{\"pod_sandbox_id\":\"$SID_C3\"}}" | jget containers.0.id 2>/dev/null)
container_ann "6: its snapshot reached pullgate without them" \
  check "6: its snapshot reached pullgate without them" no_pullgate_labels "${C4:-no-container}"

log "7. kubelet pointed straight at containerd, bypassing the front"
run_pod direct app-a2 team-a || fail "RunPodSandbox (direct) for team-a/app-a2"; SID_A2=$SID
check_refused "7: team-a's private container is refused by the snapshotter (no admission, no principal)" "requires a principal" "$PRIVMSG" \
  run_in direct app-a2 team-a "$SID_A2" d1 "$PRIV"
# (containerd 1.6 hands this annotation to the rootfs Prepare as a label.)
check_refused "7: even when annotated with team-a's principal" "requires a principal" "$PRIVMSG" \
  run_in direct app-a2 team-a "$SID_A2" d2 "$PRIV" "cat /msg" ',"annotations":{"containerd.io/snapshot/pullgate.principal":"team-a"}'
# The snapshotter's refusal (which reaches the pod through containerd) names no image of another
# principal's grant: the image by its ID, which names no repository.
check_refused "7: refused by image ID, the refusal names no repository another pod pulled it from" "requires a principal" "private/app" \
  run_in direct app-a2 team-a "$SID_A2" d4 "$PRIV_ID"
check_out "7: a public container runs" "public app" run_in direct app-a2 team-a "$SID_A2" d3 "$PUB"
case $V in 2.1)
  # containerd 2.1's CRI restores a checkpoint image (2.4's no longer does: there it is an
  # ordinary image, and CreateContainer makes an ordinary container): it views the image's chain, reads the
  # checkpoint's metadata, pulls the image it names and files it under the name it names (here
  # PLANTED, in team-a's registry, which another pod could then run as team-a's image). Bypassing
  # the front, the snapshotter refuses the restore's view: nothing is pulled, nothing filed.
  check_refused "7: containerd's restore of the escaped checkpoint image, straight to containerd, is refused at its view" \
    "refuses to restore a container from a checkpoint" "" run_in direct app-a2 team-a "$SID_A2" d5 "$CKPT_ESC"
  check "7: the image listing works" ctr_ -n k8s.io images ls -q
  check "7: no image record was filed under $PLANTED" no_image k8s.io "$PLANTED"
  check "7: nor under $PUB_REF (nothing was pulled)" no_image k8s.io "$PUB_REF"
  ;;
esac
# ctr passes labels to the rootfs Prepare as given: in k8s.io no label is a principal.
check_refused "7: ctr run in k8s.io with the principal label team-a is refused too" "requires a principal" "$PRIVMSG" \
  ctr_ -n k8s.io run --rm --snapshotter pullgate --snapshotter-label containerd.io/snapshot/pullgate.principal=team-a "$PRIV" ctr-label

log "8. public images need no secret"
run_pod front app-d team-d || fail "RunPodSandbox for team-d/app-d"; SID_D=$SID
check "8: team-d's PullImage of the public image, no secret" pull_as app-d team-d "$PUB"
check_out "8: team-d's container runs it" "public app" run_in front app-d team-d "$SID_D" p1 "$PUB"

log "8b. pullgate check shows a namespace none of another's layer IDs"
out=$(pg check -n outsider "$PRIV" 2>&1); rc=$?
leaked=$(tr , '\n' <<<"$claims" | while read -r l; do grep -qF "${l#sha256:}" <<<"$out" && echo "$l"; done)
check "8b: pullgate check -n outsider says denied ($out), naming none of team-a's layer IDs (${leaked:-none})" \
  bash -c '[ "$1" -ne 2 ] && grep -q "^denied" <<<"$2" && [ -z "$3" ] && [ -n "$4" ]' _ "$rc" "$out" "$leaked" "$claims"

log "13. a PullImage naming no pod (crictl pull --creds) is the node's"
check "13: PullImage with carol's secret and no sandbox config" \
  front PullImage "{\"image\":{\"image\":\"$PRIV\"},\"auth\":{\"username\":\"carol\",\"password\":\"$PW_CAROL\"}}"
check_out "13: the grant is the node's (@node), no pod's" "@node" pg grants -n k8s.io
# principals_of REF: the principals of k8s.io's grants at REF's origin (sorted, one per line);
# fails when pullgate grants fails.
principals_of() {
  local j; j=$(pg grants -n k8s.io -o json) || return 1
  python3 -c 'import json,sys; o=sys.argv[1].rsplit(":",1)[0]; print("\n".join(sorted({g["principal"] for g in json.load(sys.stdin) if g["origin"] == o})))' "$1" <<<"$j"
}
p13=$(principals_of "$PRIV"); rc=$?
check "13: pullgate grants lists the private image's grants in k8s.io (${p13//$'\n'/, })" test $rc -eq 0 -a -n "$p13"
check "13: (@node among them)" grep -qx '@node' <<<"$p13"
check "13: (none namespace-wide)" not grep -qx '' <<<"$p13"
run_pod front app-n team-n || fail "13: RunPodSandbox for team-n/app-n"; SID_N=$SID
check_refused "13: team-n's pod (no secret of its own) is refused the image the node pulled: no grant of its principal" \
  "$REFUSED team-n/app-n \(principal \"team-n\"\) the image [^ ]*: no grant for this namespace and principal covers this private layer" "$PRIVMSG" \
  run_in front app-n team-n "$SID_N" n1 "$PRIV"

log "1b. streams and container calls pass through"
mapfile -t pa < <(podargs app-a team-a)
out=$(front "${pa[@]}" CreateContainer "{\"pod_sandbox_id\":\"$SID_A\",\"config\":{\"metadata\":{\"name\":\"long\"},\"image\":{\"image\":\"$PRIV\"},\"command\":[\"/bin/sleep\",\"300\"],\"log_path\":\"long.log\"}}" 2>&1)
LONG=$(jget container_id <<<"$out" 2>/dev/null)
check "a long-running container of team-a is created" test -n "$LONG"
if [ "$V" = 1.6 ]; then
  check_has "GetContainerEvents reaches containerd 1.6, which does not implement it" "method GetContainerEvents not implemented" front events --count 1 --timeout 10
  check "StartContainer passes" front StartContainer "{\"container_id\":\"$LONG\"}"
else
  front events --count 1 --fresh --timeout 30 > "$WORK/events.out" 2>&1 & EV=$!
  sleep 1
  check "StartContainer passes" front StartContainer "{\"container_id\":\"$LONG\"}"
  wait $EV; check "GetContainerEvents streams the container's start event through the front ($(head -c 200 "$WORK/events.out"))" \
    grep -qF "\"container_id\":\"$LONG\"" "$WORK/events.out"
fi
check_out "ExecSync passes (cat /msg in team-a's container)" "$PRIVMSG" front ExecSync "{\"container_id\":\"$LONG\",\"cmd\":[\"/bin/cat\",\"/msg\"],\"timeout\":10}"
check_out "ContainerStatus passes" '"state":1' front ContainerStatus "{\"container_id\":\"$LONG\"}"
check_out "ListContainers passes" "$LONG" front ListContainers

log "9. pullgate killed between PullImage and CreateContainer"
run_pod front app-e team-e || fail "RunPodSandbox for team-e/app-e"; SID_E=$SID
check "9: team-e's PullImage with carol's secret" pull_as app-e team-e "$PRIV" "carol:$PW_CAROL"
kill -9 "$PG_PID"; wait "$PG_PID" 2>/dev/null
start_pullgate "$PG" || exit 1
wait_for 30 front Version || fail "9: the front serves again after the restart"
wait_backend
check_out "9: team-e's container runs after the restart (the grant held)" "$PRIVMSG" run_in front app-e team-e "$SID_E" e1 "$PRIV"
b2_runs() { run_pod front app-b2 team-b2 && run_in front app-b2 team-b2 "$SID" b9 "$PRIV"; }
check_refused "9: team-b2 (no secret) is still refused" "$REFUSED team-b2/app-b2" "$PRIVMSG" b2_runs
check_out "9: team-a's running container kept running through the restart" '"state":1' front ContainerStatus "{\"container_id\":\"$LONG\"}"
# Admissions are not durable: a container whose creation the front checked keeps its principal
# across a kill, one whose creation it did not live to check loses it (pullgate stalled, at the
# stall point cri.created, after containerd created the container and before the front's check).
E2=$(create_in front app-e team-e "$SID_E" e2 "$PRIV") || fail "9: team-e's container e2 created through the front: $E2"
kill "$PG_PID"; wait "$PG_PID" 2>/dev/null
PULLGATE_STALL_AT=cri.created:60 start_pullgate "$PG" || exit 1
wait_for 30 front Version || fail "9: the front serves again (with a stall point)"
wait_backend
# stalled_create LABEL NAME: team-e's CreateContainer NAME through the front, pullgate (started
# with the stall point cri.created) stalled after containerd created it, then SIGKILLed and
# started again (as PG_SERVE_BIN says, unset: the release binary); sets STALLED to its ID.
stalled_create() {
  local stalls_before creator
  stalls_before=$(grep -c "stall point reached" "$PG/log")
  create_in front app-e team-e "$SID_E" "$2" "$PRIV" > "$WORK/$2.out" 2>&1 &
  creator=$!
  check "$1: team-e's CreateContainer $2 reaches the stall point after containerd created it" \
    wait_for 30 bash -c "[ \$(grep -c 'stall point reached' '$PG/log') -gt $stalls_before ]"
  STALLED=$(direct ListContainers "{\"filter\":{\"pod_sandbox_id\":\"$SID_E\"}}" | python3 -c 'import json,sys; print("".join(c["id"] for c in json.load(sys.stdin).get("containers") or [] if c["metadata"]["name"] == sys.argv[1]))' "$2")
  check "$1: containerd holds $2 (${STALLED:-none})" test -n "$STALLED"
  kill -9 "$PG_PID"; wait "$PG_PID" 2>/dev/null; wait "$creator" 2>/dev/null
  PG_SERVE_BIN= start_pullgate "$PG" || exit 1
  wait_for 30 front Version || fail "$1: the front serves again after the kill"
  wait_backend
}
stalled_create 9 e3; E3=$STALLED
check "9: pullgate's log names e3's snapshot as losing its unchecked admission" \
  grep -q "snapshot=k8s.io/[0-9]*/$E3.*a CRI CreateContainer was not checked to its end before pullgate stopped\|a CRI CreateContainer was not checked to its end before pullgate stopped.*snapshot=k8s.io/[0-9]*/$E3" "$PG/log"
check_out "9: e2, checked before the kill, starts after it (its principal kept)" "$PRIVMSG" start_in direct "$E2" app-e e2
check_refused "9: e3, created but never checked, is refused at its start: its snapshot has no principal" "requires a principal" "$PRIVMSG" \
  start_in direct "$E3" app-e e3
# The positive control: pullgate-defence-off with defence 'unchecked' off (an admitted principal
# counts at once, before the front's check): the same kill leaves e4 its principal, and it starts.
if [ -n "${DEFENCE_OFF_BIN:-}" ]; then
  kill "$PG_PID"; wait "$PG_PID" 2>/dev/null
  from=$(stat -c %s "$PG/log")
  PG_SERVE_BIN=$DEFENCE_OFF_BIN PULLGATE_DEFENCE_OFF=unchecked PULLGATE_STALL_AT=cri.created:60 start_pullgate "$PG" || exit 1
  wait_for 30 front Version || fail "9: the front serves again (pullgate-defence-off)"
  wait_backend
  check "9 control: pullgate-defence-off runs with defence 'unchecked' off (its log says so)" \
    bash -c 'tail -c +"$(($2 + 1))" "$1" | grep -qxF "pullgate-defence-off: a test build; defences turned off (PULLGATE_DEFENCE_OFF): unchecked"' _ "$PG/log" "$from"
  stalled_create "9 control" e4; E4=$STALLED
  check "9 control: pullgate's log names no snapshot of e4 losing an admission" \
    not grep -q "snapshot=k8s.io/[0-9]*/$E4.*not checked to its end\|not checked to its end.*snapshot=k8s.io/[0-9]*/$E4" "$PG/log"
  check_out "9 control: e4, created but never checked, starts after the kill and shows the private file" "$PRIVMSG" start_in direct "$E4" app-e e4
else
  na "9 control (defence 'unchecked' off): DEFENCE_OFF_BIN names no pullgate-defence-off (scripts/test.sh passes it under containerd 2.1)"
fi

log "10. pods stop and go"
for s in "$SID_FIRST" "$SID_A" "$SID_A2" "$SID_B" "$SID_C" "$SID_C2" "$SID_C3" "$SID_D" "$SID_E" "$SID_N"; do
  front StopPodSandbox "{\"pod_sandbox_id\":\"$s\"}" >/dev/null 2>&1 && front RemovePodSandbox "{\"pod_sandbox_id\":\"$s\"}" >/dev/null 2>&1 || fail "stop and remove pod $s"
done
left=$(front ListPodSandbox | python3 -c 'import json,sys; print(len([p for p in (json.load(sys.stdin).get("items") or []) if p["metadata"]["namespace"] != "team-b2"]))')
check "StopPodSandbox and RemovePodSandbox through the front leave no pod ($left)" test "$left" = 0
log "11. [cri] principal = \"pod\": each pod pulls for itself"
sed -i 's/^socket = "\(.*\)cri.sock"$/&\nprincipal = "pod"/' "$PG/config.toml"
check "11: the config says principal = \"pod\"" grep -q '^principal = "pod"' "$PG/config.toml"
kill "$PG_PID"; wait "$PG_PID" 2>/dev/null
start_pullgate "$PG" || exit 1
wait_for 30 front Version || fail "11: the front serves again"
wait_backend
run_pod front web-1 team-p || fail "11: RunPodSandbox team-p/web-1"; SID_P1=$SID
run_pod front web-2 team-p || fail "11: RunPodSandbox team-p/web-2"; SID_P2=$SID
check "11: team-p/web-1's PullImage with carol's secret" pull_as web-1 team-p "$PRIV" "carol:$PW_CAROL"
check_out "11: the grant is for principal team-p/web-1/uid-web-1 (the pod's namespace, name and UID)" "team-p/web-1/uid-web-1" pg grants -n k8s.io
check_out "11: web-1 runs the image" "$PRIVMSG" run_in front web-1 team-p "$SID_P1" p1 "$PRIV"
check_refused "11: web-2, in the same namespace but without its own pull, is refused" "$REFUSED team-p/web-2 \(principal \"team-p/web-2/uid-web-2\"\)" "$PRIVMSG" \
  run_in front web-2 team-p "$SID_P2" p2 "$PRIV"
# A later pod of the same name (another UID, as a StatefulSet's recreated pod) is another pod.
PODUID=uid-web-1-later run_pod front web-1 team-p || fail "11: RunPodSandbox team-p/web-1 (another UID)"; SID_P1L=$SID
run_in_later() { PODUID=uid-web-1-later run_in "$@"; }
check_refused "11: a later pod named web-1 (another UID), without its own pull, is refused" "$REFUSED team-p/web-1 \(principal \"team-p/web-1/uid-web-1-later\"\)" "$PRIVMSG" \
  run_in_later front web-1 team-p "$SID_P1L" p1l "$PRIV"
# A pod without a UID could not be told from a later pod of its name: refused its pull and its
# containers, and no grant is recorded for it.
PODUID= run_pod front web-3 team-p || fail "11: RunPodSandbox team-p/web-3 (no UID)"; SID_P3=$SID
no_uid() { PODUID= "$@"; }
check_refused "11: a pod without a UID is refused its PullImage" "pod .{0,2}web-3.{0,2} in namespace .{0,2}team-p.{0,2} has no UID" "" \
  no_uid pull_as web-3 team-p "$PRIV" "carol:$PW_CAROL"
check_refused "11: and its CreateContainer" "has no UID" "$PRIVMSG" no_uid run_in front web-3 team-p "$SID_P3" p3 "$PRIV"
check "11: no grant names team-p/web-3" not has_grant "team-p/web-3"
# A pod removed around the front (kubelet talking to containerd itself for a while, or the
# front unable to list the pods left) keeps its grant until the next removal through the front.
run_pod front web-4 team-p || fail "11: RunPodSandbox team-p/web-4"; SID_P4=$SID
check "11: team-p/web-4's PullImage with carol's secret" pull_as web-4 team-p "$PRIV" "carol:$PW_CAROL"
direct StopPodSandbox "{\"pod_sandbox_id\":\"$SID_P4\"}" >/dev/null && direct RemovePodSandbox "{\"pod_sandbox_id\":\"$SID_P4\"}" >/dev/null \
  || fail "11: web-4 removed straight through containerd"
check "11: web-4's grant stays while no removal went through the front" has_grant "team-p/web-4/uid-web-4"
for s in "$SID_P1" "$SID_P2" "$SID_P1L" "$SID_P3"; do front StopPodSandbox "{\"pod_sandbox_id\":\"$s\"}" >/dev/null 2>&1; front RemovePodSandbox "{\"pod_sandbox_id\":\"$s\"}" >/dev/null 2>&1; done
# A pod principal's grants go with its last sandbox (the documented pruning rule).
gl=$(pg grants -n k8s.io 2>&1); rc=$?
check "11: pullgate grants -n k8s.io works after the pods are removed (rc=$rc)" test $rc -eq 0 -a "$(head -1 <<<"$gl" | awk '{print $1}')" = NAMESPACE
check "11: and team-p/web-1's grant was pruned with its last sandbox" not grep -q "team-p/web-1" <<<"$gl"
check_has "11: pullgate's log says so" "pruned the grants of a pod whose last sandbox was removed" grep "team-p/web-1" "$PG/log"
check "11: and web-4's, removed around the front, with the next removal through it" not grep -q "team-p/web-4" <<<"$gl"
check_has "11: pullgate's log says so" "pruned the grants of a pod with no sandbox left, removed earlier" grep "team-p/web-4/uid-web-4" "$PG/log"
log "13b. require_principal turned off for k8s.io: the node's pull still lets no pod run the image"
# With require_principal off, a namespace-wide grant counts for every pod (doctor warns of it;
# a pod's principal is its own, as section 11 set [cri] principal = "pod"); the node's grant
# (@node) is no namespace-wide grant and must still count for no pod.
printf '\n[namespaces."k8s.io"]\nrequire_principal = false\n' >> "$PG/config.toml"
kill "$PG_PID"; wait "$PG_PID" 2>/dev/null
start_pullgate "$PG" || exit 1
wait_for 30 front Version || fail "13b: the front serves again"
wait_backend
doc=$("$PG_BIN" doctor --config "$PG/config.toml" --containerd-config "$WORK/containerd/config.toml" -o json 2>&1)
principals_check() { python3 -c 'import json,sys; c=[c for c in json.load(sys.stdin)["checks"] if c["name"] == "principals"]; print(c[0]["status"] + ": " + c[0]["message"] if c else "no principals check")' <<<"$doc"; }
check_out "13b: pullgate doctor warns that require_principal is off for k8s.io" "warning: require_principal is off for k8s.io" principals_check
check "13b: PullImage with carol's secret and no sandbox config, again" \
  front PullImage "{\"image\":{\"image\":\"$PRIV\"},\"auth\":{\"username\":\"carol\",\"password\":\"$PW_CAROL\"}}"
p13=$(principals_of "$PRIV"); rc=$?
check "13b: the node's grant is there, and no namespace-wide one (${p13//$'\n'/, })" test $rc -eq 0 -a -n "$p13"
check "13b: (@node among them)" grep -qx '@node' <<<"$p13"
check "13b: (none namespace-wide)" not grep -qx '' <<<"$p13"
run_pod front app-n2 team-n2 || fail "13b: RunPodSandbox for team-n2/app-n2"; SID_N2=$SID
check_refused "13b: team-n2's pod is refused the image the node pulled: no grant of its principal" \
  "$REFUSED team-n2/app-n2 \(principal \"team-n2/app-n2/uid-app-n2\"\) the image [^ ]*: no grant for this namespace and principal covers this private layer" "$PRIVMSG" \
  run_in front app-n2 team-n2 "$SID_N2" n2 "$PRIV"
# The positive control: a namespace-wide grant (pullgate verify without --principal) does let
# team-n2's pod run the image here, so the refusal above is the node's grant counting for no pod.
check "13b: pullgate verify -n k8s.io without --principal (a namespace-wide grant)" pg verify -n k8s.io --user "carol:$PW_CAROL" "$PRIV"
check_out "13b: team-n2's pod now runs the image on the namespace-wide grant (require_principal is off)" "$PRIVMSG" \
  run_in front app-n2 team-n2 "$SID_N2" n3 "$PRIV"
check "13b: pullgate revoke -n k8s.io --principal '' of the image's origin" pg revoke -n k8s.io --principal '' "$PRIV"
p13=$(principals_of "$PRIV"); rc=$?
check "13b: pullgate grants lists them after the revoke (${p13//$'\n'/, })" test $rc -eq 0 -a -n "$p13"
check "13b: (@node kept)" grep -qx '@node' <<<"$p13"
check "13b: (none namespace-wide)" not grep -qx '' <<<"$p13"
check_refused "13b: and team-n2's pod is refused again" \
  "$REFUSED team-n2/app-n2 \(principal \"team-n2/app-n2/uid-app-n2\"\) the image [^ ]*: no grant for this namespace and principal covers this private layer" "$PRIVMSG" \
  run_in front app-n2 team-n2 "$SID_N2" n4 "$PRIV"
for s in "$SID_N2"; do front StopPodSandbox "{\"pod_sandbox_id\":\"$s\"}" >/dev/null 2>&1; front RemovePodSandbox "{\"pod_sandbox_id\":\"$s\"}" >/dev/null 2>&1; done

log "14. pull secrets holding only an identity token or a registry token"
TOKLOG=$WORK/registry-t/token.log
grants_json() { pg grants -n k8s.io -o json; }
# grant_identity NS/POD: the identity of that pod's grant in k8s.io (its principal NS/POD/uid-POD).
grant_identity() { grants_json | python3 -c 'import json,sys; print(next((g["identity"] for g in json.load(sys.stdin) if g["principal"] == sys.argv[1] + "/uid-" + sys.argv[1].split("/")[1]), ""))' "$1"; }
# refused_unrecorded DESC PATTERN TOKEN POD NS: the pod's PullImage with the secret {"KIND": TOKEN}
# (TOKEN_KIND, default identity_token) fails saying PATTERN and not the token; pullgate grants
# does not change; the pod's CreateContainer is refused.
refused_unrecorded() {
  local d=$1 pat=$2 tok=$3 pod=$4 ns=$5 before
  run_pod front "$pod" "$ns" || fail "14: RunPodSandbox $ns/$pod"
  before=$(grants_json)
  check_refused "$d: PullImage fails naming the cause, not the token" "$pat" "$tok" pull_as "$pod" "$ns" "$TPRIV" "{\"${TOKEN_KIND:-identity_token}\":\"$tok\"}"
  check "$d: nothing recorded (pullgate grants unchanged)" test "$(grants_json)" = "$before" -a -n "$before"
  check_refused "$d: the pod's CreateContainer is refused" "$REFUSED $ns/$pod" "$TOKMSG" run_in front "$pod" "$ns" "$SID" "c-$pod" "$TPRIV"
}
IT=$(identity_token t alice "$PW_ALICE")
check "14: the token server gives alice an identity token (a refresh token, as a token login keeps)" test -n "$IT"
run_pod front tok-1 team-t1 || fail "14: RunPodSandbox team-t1/tok-1"; SID_T1=$SID
n0=$(grep -c 'user=alice grant=refresh_token' "$TOKLOG")
check_out "14: team-t1's PullImage with a secret holding only an identity token" '"image_ref":"sha256:' pull_as tok-1 team-t1 "$TPRIV" "{\"identity_token\":\"$IT\"}"
check "14: pullgate exchanged it at the token service with the refresh-token grant" test "$(grep -c 'user=alice grant=refresh_token' "$TOKLOG")" -gt "$n0"
ID_T1=$(grant_identity team-t1/tok-1)
check "14: team-t1/tok-1 holds a grant ($ID_T1)" test -n "$ID_T1"
check_out "14: tok-1 runs the image" "$TOKMSG" run_in front tok-1 team-t1 "$SID_T1" t1 "$TPRIV"
run_pod front tok-2 team-t2 || fail "14: RunPodSandbox team-t2/tok-2"; SID_T2=$SID
check_refused "14: team-t2's pod, without the token, is refused at CreateContainer" "$REFUSED team-t2/tok-2" "$TOKMSG" run_in front tok-2 team-t2 "$SID_T2" t2 "$TPRIV"
check_refused "14: and its PullImage without a secret fails as the registry says (anonymous: no access)" "no access to $REG_t/private/tok" "" pull_as tok-2 team-t2 "$TPRIV"
run_pod front tok-3 team-t3 || fail "14: RunPodSandbox team-t3/tok-3"
check "14: team-t3's PullImage with the same identity token" pull_as tok-3 team-t3 "$TPRIV" "{\"identity_token\":\"$IT\"}"
check "14: two tenants holding one token are one identity ($ID_T1, $(grant_identity team-t3/tok-3))" test "$(grant_identity team-t3/tok-3)" = "$ID_T1"
run_pod front tok-4 team-t4 || fail "14: RunPodSandbox team-t4/tok-4"
check "14: team-t4's PullImage with alice's password" pull_as tok-4 team-t4 "$TPRIV" "alice:$PW_ALICE"
ID_T4=$(grant_identity team-t4/tok-4)
check "14: alice's password is another identity than her identity token ($ID_T4)" test -n "$ID_T4" -a "$ID_T4" != "$ID_T1"
# A token that worked, then was revoked at the token service: the next pod's PullImage with it is
# refused, so nothing pullgate may keep from the earlier exchange (an access token, a verdict)
# stands in for asking the token service again.
IT_REVOKED=$(identity_token t alice "$PW_ALICE")
run_pod front tok-r team-tr || fail "14: RunPodSandbox team-tr/tok-r"
check_out "14: team-tr's PullImage with an identity token works before it is revoked" '"image_ref":"sha256:' pull_as tok-r team-tr "$TPRIV" "{\"identity_token\":\"$IT_REVOKED\"}"
revoke_token t "$IT_REVOKED"
n0=$(grep -c 'denied: the refresh token has been revoked' "$TOKLOG")
refused_unrecorded "14: the same identity token, revoked since" "refused the identity token: invalid_grant \\(expired, revoked" "$IT_REVOKED" tok-5 team-t5
check "14: the token service was asked again, and refused it" test "$(grep -c 'denied: the refresh token has been revoked' "$TOKLOG")" -gt "$n0"
token_acl t "acl['refresh_ttl'] = -60"; IT_EXPIRED=$(identity_token t alice "$PW_ALICE"); token_acl t "acl.pop('refresh_ttl')"
refused_unrecorded "14: an expired identity token" "refused the identity token: invalid_grant \\(expired, revoked" "$IT_EXPIRED" tok-6 team-t6
IT_OTHER=$(identity_token t alice "$PW_ALICE" other-service)
refused_unrecorded "14: an identity token issued for another service" "refused the identity token: invalid_grant \\(expired, revoked" "$IT_OTHER" tok-7 team-t7
token_acl t "acl['refresh_grant'] = False"
refused_unrecorded "14: a token service without the refresh-token grant" "does not support the OAuth2 refresh-token grant" "$IT" tok-8 team-t8
token_acl t "acl.pop('refresh_grant')"
RT=$(registry_token t alice "$PW_ALICE" private/tok)
run_pod front tok-9 team-t9 || fail "14: RunPodSandbox team-t9/tok-9"; SID_T9=$SID
n0=$(grep -c . "$TOKLOG")
check_out "14: team-t9's PullImage with a secret holding only a registry token" '"image_ref":"sha256:' pull_as tok-9 team-t9 "$TPRIV" "{\"registry_token\":\"$RT\"}"
check "14: the registry token went to the registry as it is (the token service saw no request)" test "$(grep -c . "$TOKLOG")" = "$n0"
ID_T9=$(grant_identity team-t9/tok-9)
check "14: its identity is another than the identity token's ($ID_T9)" test -n "$ID_T9" -a "$ID_T9" != "$ID_T1"
check_out "14: tok-9 runs the image" "$TOKMSG" run_in front tok-9 team-t9 "$SID_T9" t9 "$TPRIV"
token_acl t "acl['access_ttl'] = -300"; RT_EXPIRED=$(registry_token t alice "$PW_ALICE" private/tok); token_acl t "acl.pop('access_ttl')"
TOKEN_KIND=registry_token refused_unrecorded "14: an expired registry token" "rejected the registry token \\(invalid_token" "$RT_EXPIRED" tok-10 team-t10

# A pull secret's user name holding a colon ("ci:bot"): taken as kubelet sends it, as containerd
# takes it (the token service's password grant names user "ci:bot", not "ci" with password
# "bot:...").
run_pod front tok-c team-tc || fail "14: RunPodSandbox team-tc/tok-c"; SID_TC=$SID
check_out "14: team-tc's PullImage with a secret whose user name holds a colon" '"image_ref":"sha256:' \
  pull_as tok-c team-tc "$TPRIV" "{\"username\":\"ci:bot\",\"password\":\"$PW_CI\"}"
check_out "14: tok-c runs the image" "$TOKMSG" run_in front tok-c team-tc "$SID_TC" tc1 "$TPRIV"

log "15. an impostor on a plain-http registry's port gets nothing from the node"
run_pod front imp-a team-a || fail "15: RunPodSandbox team-a/imp-a"; SID_IA=$SID
check_out "15: team-a's PullImage of its image at the plain-http registry, with alice's secret" '"image_ref":"sha256:' pull_as imp-a team-a "$IMPRIV" "alice:$PW_ALICE"
check_out "15: team-a's container runs it" "$IMPMSG" run_in front imp-a team-a "$SID_IA" ia1 "$IMPRIV"
curl -sf -u "alice:$PW_ALICE" -H 'Accept: application/vnd.oci.image.manifest.v1+json' "http://$REG_imp/v2/private/imp/manifests/v1" > "$WORK/imp-manifest.json" \
  || fail "15: read team-a's manifest from the registry"
# The registry goes away; another process takes its port and answers as it: team-a's manifest
# without credentials, 200 to a HEAD of any blob, 404 to every blob GET.
kill "$IMP_PID"; wait_for 10 bash -c "! curl -s -o /dev/null http://$REG_imp/v2/"
/usr/bin/python3 "$REPO/tests/evilregistry.py" --port "${REG_imp#*:}" --repo private/imp --tag v1 --mode vouch \
  --manifest "$WORK/imp-manifest.json" --log "$WORK/impostor.log" & PIDS+=($!)
wait_for 10 curl -sf "http://$REG_imp/v2/" || fail "15: the impostor did not take the port"
for who in "imp-b team-b" "imp-c team-c mallory:made-Up-1"; do
  read -r pod ns secret <<<"$who"
  run_pod front "$pod" "$ns" || fail "15: RunPodSandbox $ns/$pod"
  check_refused "15: $ns's PullImage ${secret:+with a made-up secret }${secret:-without a secret} fails: the impostor serves no blob" \
    "blob sha256:[0-9a-f]+.*not found|not found.*blob sha256" "" pull_as "$pod" "$ns" "$IMPRIV" ${secret:+"$secret"}
  check_refused "15: $ns's CreateContainer of the image on the node is refused" "$REFUSED $ns/$pod" "$IMPMSG" run_in front "$pod" "$ns" "$SID" "c-$pod" "$IMPRIV"
  check "15: and containerd has no container for it" test "$(containers_of "$SID")" = 0
done
check "15: the impostor was asked for blobs (pullgate downloads them: nothing comes from the node)" grep -qE '^GET /v2/private/imp/blobs/' "$WORK/impostor.log"
gl=$(pg grants -n k8s.io 2>&1); rc=$?
check "15: pullgate grants -n k8s.io works (rc=$rc)" test $rc -eq 0 -a "$(head -1 <<<"$gl" | awk '{print $1}')" = NAMESPACE
check "15: and lists no grant of team-b's or team-c's pods here ($(grep -E 'team-(b|c)/imp-' <<<"$gl" | head -2))" not grep -qE 'team-(b|c)/imp-' <<<"$gl"

log "16. a public image preloaded on the node, the same bytes also in a private repository"
# Preloaded as a node preloads images: containerd's own CRI pull (not through the front). The
# layers are unknown to pullgate then: NeverVerifyPreloadedImages (the default) lets pods run it.
check "16: the node preloads $REG_pub/public/dup:v1 (containerd's own CRI pull)" direct PullImage "{\"image\":{\"image\":\"$REG_pub/public/dup:v1\"}}"
run_pod front pre-1 team-p1 || fail "16: RunPodSandbox team-p1/pre-1"
check_out "16: team-p1's pod runs the preloaded public image" "$DUPMSG" run_in front pre-1 team-p1 "$SID" p1 "$REG_pub/public/dup:v1"
run_pod front dup-a team-a || fail "16: RunPodSandbox team-a/dup-a"
check_out "16: team-a pulls the private name of the same bytes through the front, with alice's secret" '"image_ref":"sha256:' \
  pull_as dup-a team-a "$REG_h/private/dup:v1" "alice:$PW_ALICE"
check_out "16: pullgate now holds the layers as protected (pullgate inspect of the private name)" "protected" pg inspect "$REG_h/private/dup:v1"
run_pod front pre-2 team-p2 || fail "16: RunPodSandbox team-p2/pre-2"; SID_P2=$SID
mark=$(wc -l < "$PG/log"); pmark=$(wc -l < "$WORK/registry-pub/log")
check_out "16: team-p2's pod, without a secret, still runs the public image" "$DUPMSG" run_in front pre-2 team-p2 "$SID_P2" p2 "$REG_pub/public/dup:v1"
check "16: pullgate says why: the node held its layers before pullgate knew them (preloaded)" \
  grep -q "held unpacked before pullgate knew them (preloaded)" <(tail -n +"$((mark + 1))" "$PG/log")
# (The registry's log must be there and hold the earlier requests: a missing log finds nothing.)
check "16: it asked nothing of the image's origin (no manifest request in the public registry's log)" \
  bash -c '[ -s "$0" ] && ! tail -n +"$1" "$0" | grep -q "\"[A-Z]* /v2/public/dup/manifests/"' "$WORK/registry-pub/log" "$((pmark + 1))"
check_refused "16: team-p2's pod is still refused team-a's private image of 2 (its names verify nowhere without a credential)" \
  "$REFUSED team-p2/pre-2" "$PRIVMSG" run_in front pre-2 team-p2 "$SID_P2" p2x "$PRIV"
# The other order: the private name first, then the node preloads the public one.
check_out "16: team-a pulls the private name of another image first" '"image_ref":"sha256:' pull_as dup-a team-a "$REG_h/private/dup2:v1" "alice:$PW_ALICE"
check "16: then the node pulls its public name (containerd's own CRI pull)" direct PullImage "{\"image\":{\"image\":\"$REG_pub/public/dup2:v1\"}}"
run_pod front pre-3 team-p3 || fail "16: RunPodSandbox team-p3/pre-3"
mark=$(wc -l < "$PG/log"); pmark=$(wc -l < "$WORK/registry-pub/log")
check_out "16: team-p3's pod, without a secret, runs the public name" "$DUP2MSG" run_in front pre-3 team-p3 "$SID" p3 "$REG_pub/public/dup2:v1"
check "16: pullgate says why: public at its own origin ($REG_pub/public/dup2)" \
  grep -q "public at its own origin.*public_at=$REG_pub/public/dup2:v1" <(tail -n +"$((mark + 1))" "$PG/log")
check "16: it asked that origin without a credential (the public registry's log shows the manifest)" \
  grep -q '"[A-Z]* /v2/public/dup2/manifests/' <(tail -n +"$((pmark + 1))" "$WORK/registry-pub/log")
# The verify was of the name pinned to the record's manifest: inspect names it so.
DUP_MD=$(pg inspect "$REG_h/private/dup2:v1" | awk '/^manifest /{print $2; exit}')
out=$(pg inspect "$REG_pub/public/dup2@$DUP_MD" 2>&1); rc=$?
check "16: pullgate inspect of the public name shows every layer public (its bytes came from that origin without a credential; rc=$rc)" \
  bash -c '[ "$0" -eq 0 ] && grep -qE "\) public$" <<<"$1" && ! grep -qE "\) protected$" <<<"$1"' "$rc" "$out"

# A tenant names the public image's bytes in four repositories of its own (private, sorting
# before the public name), before the node pulls the public name: the pod asking for the
# public name still runs it.
run_pod front mal-1 team-m || fail "16: RunPodSandbox team-m/mal-1"
for i in 1 2 3 4; do
  check "16: team-m pulls the same bytes as $REG_x/aaa$i/dup3:v1 with its own secret" pull_as mal-1 team-m "$REG_x/aaa$i/dup3:v1" "mallory:$PW_MAL"
done
check "16: then the node pulls $REG_pub/public/dup3:v1 (containerd's own CRI pull)" direct PullImage "{\"image\":{\"image\":\"$REG_pub/public/dup3:v1\"}}"
names=$(front ImageStatus "{\"image\":{\"image\":\"$REG_pub/public/dup3:v1\"}}" | python3 -c 'import json,sys; print(" ".join(json.load(sys.stdin)["image"]["repo_tags"]))')
check "16: the image's names list team-m's four first ($names)" test "$(awk '{print $5}' <<<"$names")" = "$REG_pub/public/dup3:v1"
run_pod front pre-4 team-p4 || fail "16: RunPodSandbox team-p4/pre-4"
# As kubelet asks: the image's ID, and the pod's own name as user_specified_image.
DUP3_ID=$(front ImageStatus "{\"image\":{\"image\":\"$REG_pub/public/dup3:v1\"}}" | jget image.id)
check_out "16: team-p4's pod, without a secret, runs the public name all the same (its own name is asked first)" "$DUP3MSG" \
  run_in front pre-4 team-p4 "$SID" p4 "$DUP3_ID\",\"user_specified_image\":\"$REG_pub/public/dup3:v1"

log "17. an image preloaded from a registry that needs a login stays the node's, whatever tenants pull"
# The node preloads it with its own credential (containerd's own CRI pull): pullgate has no
# record of its layers, and pods need no secret to run it (NeverVerifyPreloadedImages).
check "17: the node preloads $QPRE with a credential of its own (containerd's own CRI pull)" \
  direct PullImage "{\"image\":{\"image\":\"$QPRE\"},\"auth\":{\"username\":\"alice\",\"password\":\"$PW_ALICE\"}}"
run_pod front q1 team-q1 || fail "17: RunPodSandbox team-q1/q1"
check_out "17: a pod without a secret runs it" "$PREMSG" run_in front q1 team-q1 "$SID" q1 "$QPRE"
# team-a pulls its own private image built FROM it, with alice's secret: pullgate now knows
# every layer of the preloaded image but its top one as private.
check "17: team-a pulls an image built FROM it ($REG_h/private/onpre:v1) with alice's secret" pull_as dup-a team-a "$REG_h/private/onpre:v1" "alice:$PW_ALICE"
run_pod front q2 team-q2 || fail "17: RunPodSandbox team-q2/q2"
check_out "17: a pod without a secret still runs the preloaded image" "$PREMSG" run_in front q2 team-q2 "$SID" q2 "$QPRE"
# The re-hosting attacker: mallory pulls the very same image from a repository of her own with
# her own secret. Every layer of it is now known to pullgate, as private.
run_pod front mal-2 team-m || fail "17: RunPodSandbox team-m/mal-2"
check "17: mallory pulls the same bytes as $REG_x/aaa5/pre:v1 with her own secret" pull_as mal-2 team-m "$REG_x/aaa5/pre:v1" "mallory:$PW_MAL"
out=$(pg inspect "$REG_x/aaa5/pre:v1" 2>&1); rc=$?
# (Its two middle layers are every test image's, public; its base, data and top layers are its own.)
check "17: pullgate holds its own three layers protected (inspect; rc=$rc)" \
  bash -c '[ "$0" -eq 0 ] && [ "$(grep -cE "\) protected$" <<<"$1")" -eq 3 ]' "$rc" "$out"
run_pod front q3 team-q3 || fail "17: RunPodSandbox team-q3/q3"; SID_Q3=$SID
mark=$(wc -l < "$PG/log")
check_out "17: a pod without a secret still runs the preloaded image" "$PREMSG" run_in front q3 team-q3 "$SID_Q3" q3 "$QPRE"
check "17: pullgate says why: the node held its layers before pullgate knew them (preloaded)" \
  grep -q "held unpacked before pullgate knew them (preloaded)" <(tail -n +"$((mark + 1))" "$PG/log")
# The control: the same attack on an image the node pulls only after mallory's pull. pullgate
# knew its layers as private first, so nothing makes them preloaded: the pod is refused.
check "17: mallory pulls $REG_x/aaa6/late:v1 with her own secret" pull_as mal-2 team-m "$REG_x/aaa6/late:v1" "mallory:$PW_MAL"
check "17: then the node pulls the same image as $REG_q/private/late:v1 (containerd's own CRI pull)" \
  direct PullImage "{\"image\":{\"image\":\"$REG_q/private/late:v1\"},\"auth\":{\"username\":\"alice\",\"password\":\"$PW_ALICE\"}}"
check_refused "17: a pod without a secret is refused that image (its layers were known as private before the node held them)" \
  "$REFUSED team-q3/q3" "$LATEMSG" run_in front q3 team-q3 "$SID_Q3" q3l "$REG_q/private/late:v1"
# The operator's way for such an image (docs/kubernetes.md): `pullgate preload` pulls it for the
# node with the node's credential and marks it preloaded in k8s.io, whoever pulled its bytes
# before or after.
check "17: the operator marks it: pullgate preload -n k8s.io --user alice $REG_q/private/late:v1" \
  pg preload -n k8s.io --user "alice:$PW_ALICE" "$REG_q/private/late:v1"
out=$(pg preload --list -n k8s.io -o json 2>&1); rc=$?
check "17: pullgate preload --list shows that one mark, with the image's layers (rc=$rc: $(shown 300 "$out"))" \
  python3 -c 'import json,sys; m=json.loads(sys.argv[1]); assert [p["reference"] for p in m]==[sys.argv[2]] and len(m[0]["diff_ids"])>=3 and m[0]["namespace"]=="k8s.io"' "$out" "$REG_q/private/late:v1"
# The pull recorded a grant for k8s.io as a whole, which this run's k8s.io (require_principal
# off) counts for every pod: revoked, so that only the mark speaks for the image.
check_out "17: the namespace-wide grant that pull recorded is revoked (the mark stays)" "revoked 1 grant(s)" \
  pg revoke -n k8s.io --principal '' "$REG_q/private/late:v1"
check_out "17: a pod without a secret runs it, preloaded by the operator" "$LATEMSG" run_in front q3 team-q3 "$SID_Q3" q3m "$REG_q/private/late:v1"
check_out "17: pullgate check answers that pod's principal: allowed" "allowed" pg check -n k8s.io --principal team-q3/q3/uid-q3 "$REG_q/private/late:v1"
check "17: mallory pulls the same bytes again with her own secret" pull_as mal-2 team-m "$REG_x/aaa6/late:v1" "mallory:$PW_MAL"
check_out "17: a pod without a secret still runs the image the operator preloaded" "$LATEMSG" run_in front q3 team-q3 "$SID_Q3" q3n "$REG_q/private/late:v1"
check_refused "17: the mark is k8s.io's: pullgate check in another namespace is denied" "^denied" "" \
  pg check -n elsewhere "$REG_q/private/late:v1"
check_out "17: pullgate preload --remove takes the mark away" "removed 1 preload mark" pg preload -n k8s.io --remove "$REG_q/private/late:v1"
out=$(pg preload --list -n k8s.io -o json 2>&1); rc=$?
check "17: pullgate preload --list is empty then (rc=$rc: $(shown 300 "$out"))" bash -c '[ "$1" -eq 0 ] && [ "$2" = "[]" ]' _ "$rc" "$out"
check_refused "17: then a pod without a secret is refused it again" \
  "$REFUSED team-q3/q3" "$LATEMSG" run_in front q3 team-q3 "$SID_Q3" q3o "$REG_q/private/late:v1"
# The origin goes down: the preloaded image needs nothing from it.
kill "$Q_PID"; wait "$Q_PID" 2>/dev/null
check "17: the preloaded image's registry is down" not curl -s -o /dev/null --cacert "$WORK/ca/ca.pem" "https://$REG_q/v2/"
run_pod front q4 team-q4 || fail "17: RunPodSandbox team-q4/q4"
check_out "17: a pod without a secret still runs the preloaded image, its origin down" "$PREMSG" run_in front q4 team-q4 "$SID" q4 "$QPRE"
check_refused "17: team-q4 is still refused team-a's image built FROM it" "$REFUSED team-q4/q4" "team-a's app" \
  run_in front q4 team-q4 "$SID" q4x "$REG_h/private/onpre:v1"

log "18. containers of the sandbox image created while other pods' sandboxes start"
# A sandbox's rootfs key is a 64-hex ID, as a container's is, on the sandbox image's chain: the
# front labels every pod it forwards, so that no sandbox takes a container's admission.
run_pod front ph-0 team-ph || fail "18: RunPodSandbox team-ph/ph-0"; SID_PH=$SID
check_out "18: the pod's sandbox snapshot carries pullgate's sandbox label" "containerd.io/snapshot/pullgate.sandbox" snap_labels "$SID_PH"
: > "$WORK/ph.out"; ph_pids=()
for i in $(seq 1 12); do
  ( mapfile -t pa < <(podargs "ph-s$i" team-ph)
    front "${pa[@]}" RunPodSandbox '{}' >/dev/null 2>&1 || echo "sandbox ph-s$i did not start" >> "$WORK/ph.out" ) &
  ph_pids+=($!)
  ( mapfile -t pa < <(podargs ph-0 team-ph)
    out=$(front "${pa[@]}" CreateContainer "{\"pod_sandbox_id\":\"$SID_PH\",\"config\":{\"metadata\":{\"name\":\"ph-c$i\"},\"image\":{\"image\":\"$PAUSE\"},\"command\":[\"/bin/sh\",\"-c\",\"true\"],\"log_path\":\"ph-c$i.log\"}}" 2>&1) \
      && grep -q container_id <<<"$out" || echo "container ph-c$i: $(shown 300 "$out")" >> "$WORK/ph.out" ) &
  ph_pids+=($!)
done
wait "${ph_pids[@]}"
check "18: 12 sandboxes started and 12 containers of the sandbox image created beside them, none undone ($(shown 400 "$(cat "$WORK/ph.out")"))" \
  test ! -s "$WORK/ph.out"
check "18: the pod holds its 12 containers" test "$(containers_of "$SID_PH")" -eq 12

log "19. 5,000 names on the public image of 16"
# What a tenant's pulls of the same manifest under names of its own leave, made here with ctr
# (the same records): the names sort before the image's own in containerd's order, so the name
# containerd builds the container from is one of them, and none verifies anywhere. containerd's
# CRI takes about 30 ms per name to learn of it (its own cost), so this runs on one version.
if [ "$V" = 2.1 ]; then
  calls_of() { tail -n +"$(( $1 + 1 ))" "$PG/log" | grep "the image's names and documents looked up" | grep -F "$2" | tail -1 | sed -n 's/.*containerd_calls=\([0-9]*\).*/\1/p'; }
  run_pod front many-p team-p5 || fail "19: RunPodSandbox team-p5/many-p"; SID_MP=$SID
  AS_KUBELET="$DUP3_ID\",\"user_specified_image\":\"$REG_pub/public/dup3:v1"
  mark=$(wc -l < "$PG/log")
  check_out "19: a pod without a secret runs it as kubelet asks (its ID, and its own name as user_specified_image)" "$DUP3MSG" \
    run_in front many-p team-p5 "$SID_MP" mp0 "$AS_KUBELET"
  c0=$(calls_of "$mark" "image=$REG_pub/public/dup3:v1 ")
  seq -f "$REG_pub/aaa-many/p%05g:v1" 1 5000 > "$WORK/many.names"
  t0=$(date +%s)
  check "19: 5,000 names made for the image" xargs -a "$WORK/many.names" -n 1000 "${CTR[@]}" -n k8s.io images tag --force "$REG_pub/public/dup3:v1"
  many_listed() { [ "$(front ImageStatus "{\"image\":{\"image\":\"$DUP3_ID\"}}" | grep -o 'aaa-many/p' | wc -l)" -eq 5000 ]; }
  # (Asked every 2 s: each answer lists every name, which containerd's CRI is busy adding.)
  for _ in $(seq 1 150); do many_listed && break; sleep 2; done
  check "19: CRI lists all 5,000 among the image's names ($(( $(date +%s) - t0 )) s)" many_listed
  mark=$(wc -l < "$PG/log")
  check_out "19: the pod without a secret still runs it as kubelet asks" "$DUP3MSG" run_in front many-p team-p5 "$SID_MP" mp1 "$AS_KUBELET"
  c1=$(calls_of "$mark" "image=$REG_pub/public/dup3:v1 ")
  check "19: that CreateContainer cost as many containerd calls as before the names, give or take the four names looked up (before: ${c0:-none}, with 5,000 names: ${c1:-none})" \
    bash -c '[ -n "$0" ] && [ -n "$1" ] && [ "$1" -le $(( $0 + 4 )) ]' "$c0" "$c1"
  # A kubelet older than 1.30 sends the ID alone. (The image's layers are public in the ledger
  # since its first verify at its origin: nothing is asked.)
  check_out "19: and by its ID alone, as a kubelet older than 1.30 asks" "$DUP3MSG" run_in front many-p team-p5 "$SID_MP" mp2 "$DUP3_ID"
  # kubelet asks for the image's status just before each CreateContainer: the front takes the
  # image's names from containerd's answer to that call instead of asking again.
  mark=$(wc -l < "$PG/log")
  front ImageStatus "{\"image\":{\"image\":\"$REG_pub/public/dup3:v1\"}}" >/dev/null
  check_out "19: after kubelet's ImageStatus, the pod runs it" "$DUP3MSG" run_in front many-p team-p5 "$SID_MP" mp3 "$AS_KUBELET"
  check "19: and its decision took the image's names from that answer (no call of its own)" \
    bash -c 'tail -n +"$(( $1 + 1 ))" "$2" | grep "the image'"'"'s names and documents looked up" | grep -F "image=$3 " | tail -1 | grep -q "status_reused=true"' _ "$mark" "$PG/log" "$REG_pub/public/dup3:v1"
  # That answer no longer holds: the name containerd builds from (a name made to sort before
  # every other in containerd's order) is removed after kubelet's call. The front reads the
  # names anew, and the pod runs.
  FIRST=0.invalid/first/dup3:v1
  "${CTR[@]}" -n k8s.io images tag --force "$REG_pub/public/dup3:v1" "$FIRST" >/dev/null
  # first_listed: CRI lists FIRST first among the image's names, in containerd's order.
  first_listed() {
    front ImageStatus "{\"image\":{\"image\":\"$DUP3_ID\"}}" | python3 -c '
import json, sys
i = json.load(sys.stdin)["image"]
names = (i.get("repo_tags") or []) + (i.get("repo_digests") or [])
def rank(n):
    tagged = ":" in n.split("/")[-1].split("@")[0]
    return (1 if "@" in n else 2) if tagged else 3
sys.exit(0 if names and min(names, key=lambda n: (rank(n), n)) == sys.argv[1] else 1)' "$FIRST"
  }
  wait_for 30 first_listed
  check "19: a name made for the image ($FIRST) comes first in containerd's order" first_listed
  mark=$(wc -l < "$PG/log")
  front ImageStatus "{\"image\":{\"image\":\"$REG_pub/public/dup3:v1\"}}" >/dev/null
  t0=$EPOCHREALTIME
  "${CTR[@]}" -n k8s.io images rm "$FIRST" >/dev/null
  took=$(printf %.2f "$(echo "$EPOCHREALTIME - $t0" | bc -l)")
  check_out "19: that name removed after kubelet's ImageStatus (in $took s): the pod still runs the image" "$DUP3MSG" run_in front many-p team-p5 "$SID_MP" mp4 "$AS_KUBELET"
  check_out "19: the front found kubelet's answer stale (the name has no record) and read the names anew" "reused=true" \
    bash -c 'tail -n +"$(( $1 + 1 ))" "$2" | grep -F "name=$3 " | grep "has no image record"' _ "$mark" "$PG/log" "$FIRST"
  xargs -a "$WORK/many.names" -n 1000 "${CTR[@]}" -n k8s.io images rm >/dev/null 2>&1
else
  na "19: 5,000 names on an image (run on containerd 2.1)"
fi

log "20. registry trouble does not spread"
# A pod holding a fresh grant keeps creating containers while its image's registry answers 429
# or is down; a pod without one is refused with a reason that says the registry could not be
# reached (not that it lacks a grant), and runs a public image once its origin answers again.
run_pod front tr-a team-a || fail "20: RunPodSandbox team-a/tr-a"; SID_TA=$SID
check "20: team-a's pod pulls its private image with alice's secret" pull_as tr-a team-a "$PRIV" "alice:$PW_ALICE"
check "20: and another, which no pod was refused yet" pull_as tr-a team-a "$REG_h/private/down:v1" "alice:$PW_ALICE"
check "20: team-a's pod pulls dup5's private name with alice's secret" pull_as tr-a team-a "$REG_h/private/dup5:v1" "alice:$PW_ALICE"
check "20: the node pulls dup5's public name, through a proxy that can answer 429 (containerd's own CRI pull)" \
  direct PullImage "{\"image\":{\"image\":\"$LIM/public/dup5:v1\"}}"
DUP5_ID=$(front ImageStatus "{\"image\":{\"image\":\"$LIM/public/dup5:v1\"}}" | jget image.id)
AS_KUBELET5="$DUP5_ID\",\"user_specified_image\":\"$LIM/public/dup5:v1"
touch "$WORK/limited"
check "20: the public origin now answers 429 to everything" test "$(curl -s -o /dev/null -w '%{http_code}' "http://$LIM/v2/")" = 429
run_pod front tr-b team-b || fail "20: RunPodSandbox team-b/tr-b"; SID_TB=$SID
check_refused "20: team-b's pod without a secret is refused dup5 while its origin answers 429, saying the registry could not be reached" \
  "$REFUSED team-b/tr-b .*for now: its registry could not be reached" "$DUP5MSG" run_in front tr-b team-b "$SID_TB" tb1 "$AS_KUBELET5"
check "20: pullgate asked the origin (the proxy answered 429)" grep -q "/v2/public/dup5/manifests/.* 429" "$WORK/limited.log"
for i in 1 2; do
  check_out "20: team-a's pod keeps running containers of its private image meanwhile ($i)" "$PRIVMSG" run_in front tr-a team-a "$SID_TA" "ta-l$i" "$PRIV"
done
rm -f "$WORK/limited"
# (An origin that could not be reached is asked again after 10 s.)
ran=
for i in $(seq 1 8); do
  out=$(run_in front tr-b team-b "$SID_TB" "tb2-$i" "$AS_KUBELET5" 2>&1) && grep -qF "$DUP5MSG" <<<"$out" && { ran=$i; break; }
  sleep 2
done
check "20: once the origin answers again, team-b's pod runs dup5 (public at its own origin; attempt ${ran:-none}: $(shown 300 "$out"))" test -n "$ran"
# The private image's registry goes down.
kill "$H_PID"; wait "$H_PID" 2>/dev/null
check "20: team-a's registry is down" not curl -s -o /dev/null --cacert "$WORK/ca/ca.pem" "https://$REG_h/v2/"
for i in 1 2; do
  check_out "20: team-a's pod keeps running containers of its private images with the registry down ($i)" "$DOWNMSG" run_in front tr-a team-a "$SID_TA" "ta-d$i" "$REG_h/private/down:v1"
done
check_out "20: (the other one too)" "$PRIVMSG" run_in front tr-a team-a "$SID_TA" ta-d3 "$PRIV"
# (An image refused lately, as 16 refused the other, is refused as before: the registry's last
# answer, that it needs a login, holds for a minute.)
check_refused "20: team-b's pod without a secret is refused the image no pod was refused yet, saying the registry could not be reached" \
  "$REFUSED team-b/tr-b .*for now: its registry could not be reached" "$DOWNMSG" run_in front tr-b team-b "$SID_TB" tb3 "$REG_h/private/down:v1"

log "21. the positive controls: the same attacks on containerd alone"
# containerd of this version alone (its CRI on its own overlayfs, no pullgate), the same
# registries and hosts.toml: team-a's pod pulls the private image with its secret, and then the
# attacks the front refuses above succeed, each showing team-a's private file: a namespace
# without the secret (3), annotations claiming team-a (6) and kubelet at containerd (7) are all
# a pod running an image on the node; a later pod of a name, and a pod without a UID (11); the
# image as another namespace's image volume (5e, 2.1 and 2.4).
alone() { "$CRI_BIN" --socket "$BASE_SOCK" "$@"; }
# Section 20 stopped team-a's registry: it serves again, from the same config and storage.
docker-registry serve "$WORK/registry-h/config.yml" >>"$WORK/registry-h/log" 2>&1 &
PIDS+=($!)
check "21: team-a's registry serves again" wait_for 20 curl -s -o /dev/null --cacert "$WORK/ca/ca.pem" "https://$REG_h/v2/"
if start_baseline_containerd "$V" "$WORK/alone" "$PAUSE" "$HOSTS"; then
  run_pod alone ctl-a team-a || fail "21: RunPodSandbox team-a/ctl-a on containerd alone"; SID_LA=$SID
  check "21: on containerd alone, team-a's PullImage with alice's secret" pull_via alone ctl-a team-a "$PRIV" "alice:$PW_ALICE"
  check_out "21: team-a's pod runs it" "$PRIVMSG" run_in alone ctl-a team-a "$SID_LA" la1 "$PRIV"
  run_pod alone ctl-b team-b || fail "21: RunPodSandbox team-b/ctl-b on containerd alone"
  check_out "21 (3, 7): team-b's pod, no secret and no pull, runs team-a's private image" "$PRIVMSG" run_in alone ctl-b team-b "$SID" lb1 "$PRIV"
  run_pod alone ctl-c team-c "{\"config\":{\"annotations\":$ANN_P}}" \
    || fail "21: RunPodSandbox team-c/ctl-c on containerd alone"
  SID_LC=$SID
  # (Without containerd.io/snapshot.ref: containerd 1.6's overlayfs would take a container's as
  # the name of an existing snapshot to use, and refuse the creation.)
  check_out "21 (6): team-c's pod claiming team-a in its annotations runs it" "$PRIVMSG" \
    run_in alone ctl-c team-c "$SID_LC" lc1 "$PRIV" "cat /msg" ",\"annotations\":$ANN_P"
  run_in_later_a() { PODUID=uid-ctl-a-later run_in "$@"; }
  PODUID=uid-ctl-a-later run_pod alone ctl-a team-a || fail "21: RunPodSandbox team-a/ctl-a (another UID) on containerd alone"
  check_out "21 (11): a later pod named ctl-a (another UID), without its own pull, runs it" "$PRIVMSG" \
    run_in_later_a alone ctl-a team-a "$SID" la2 "$PRIV"
  PODUID= run_pod alone ctl-n team-a || fail "21: RunPodSandbox team-a/ctl-n (no UID) on containerd alone"
  check_out "21 (11): a pod without a UID runs it" "$PRIVMSG" no_uid run_in alone ctl-n team-a "$SID" ln1 "$PRIV"
  if [ "$V" = 2.1 ] || [ "$V" = 2.4 ]; then
    check "21: team-c's PullImage of the public image" pull_via alone ctl-c team-c "$PUB"
    check_out "21 (5e): team-c's public container with team-a's private image as a volume reads it" "$PRIVMSG" \
      run_in alone ctl-c team-c "$SID_LC" lc2 "$PUB" "cat /vol/msg" "$(vol "$PRIV")"
  fi
  alone ListPodSandbox | python3 -c 'import json,sys; print("\n".join(p["id"] for p in json.load(sys.stdin).get("items") or []))' | while read -r p; do
    alone StopPodSandbox "{\"pod_sandbox_id\":\"$p\"}" >/dev/null 2>&1; alone RemovePodSandbox "{\"pod_sandbox_id\":\"$p\"}" >/dev/null 2>&1
  done
  kill "$BASE_PID" 2>/dev/null; wait "$BASE_PID" 2>/dev/null
else
  fail "21: containerd $V alone did not start"
fi

log "secrets: no password or token in pullgate's files, log or database, containerd's files, labels, or an error"
PATS=$WORK/secret-patterns
secret_patterns "$PATS" "alice:$PW_ALICE" "carol:$PW_CAROL" "admin:$PW_ADMIN" "ci:bot:$PW_CI"
# Every token the token server issued (identity tokens, registry tokens, the access tokens pullgate
# obtained): its signature, which any copy of the token contains.
awk '{n = split($2, a, "."); print a[n]}' "$WORK/registry-t/tokens.log" >> "$PATS"
ntok=$(grep -c . "$WORK/registry-t/tokens.log")
check "the token server recorded the tokens it issued ($ntok)" test "$ntok" -gt 5
leak=$(grep -rlaF -D skip -f "$PATS" "$PG" "$WORK/containerd" 2>/dev/null | head -5)
check "none in any file under pullgate's root, config or log, or containerd's root, state or log (found in: ${leak:-none})" test -z "$leak"
# (ns_labels fails when a listing fails: an empty text holds no secret either.)
labels=$(ns_labels k8s.io); lrc=$?
check "none in k8s.io's content, image or snapshot labels ($(wc -l <<<"$labels") lines)" \
  bash -c "[ $lrc -eq 0 ] || { echo 'a listing failed (rc=$lrc)'; exit 1; }; [ \$(wc -l <<<\"\$1\") -gt 5 ] && ! grep -qF -f '$PATS' <<<\"\$1\"" _ "$labels"

summary "e2e cri (containerd $V)"
