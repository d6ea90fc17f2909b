#!/usr/bin/env bash
# End-to-end: nerdctl (a released version, built by scripts/setup.sh from its Go module) with
# pullgate as its snapshotter, on a real containerd of the given version configured from
# plugin/ (pullgate the only snapshotter, content_sharing_policy = "isolated"), a token-auth
# registry (alice, bob and carol may read private/*), as a nerdctl user works:
#   1. `nerdctl login` to the token registry; `pullgate pull` (no --user) picks that login up
#      from docker's config.json; `nerdctl --namespace A run --rm --net host` runs the image,
#      with nerdctl.toml's `snapshotter = "pullgate"` and with `--snapshotter pullgate`;
#   2. tenant B gets A's cached image onto the node without a credential (`nerdctl save` in A,
#      `nerdctl load` in B): B's `nerdctl run` is refused with pullgate's reason, nothing of the
#      image shown; B's `nerdctl pull` without a login is refused by the registry;
#   3. B logs in with nerdctl, `pullgate verify` (the login from config.json), then B's
#      `nerdctl run` works and the registry served no blob from the verify on;
#   4. `nerdctl pull` of private images straight (no pullgate CLI): an image pullgate pulled for
#      another tenant is refused at its unpack (the blobs were downloaded by containerd, pullgate
#      saw no credential); an image pullgate never saw is unpacked as a preloaded image
#      (NeverVerifyPreloadedImages, the default): pullgate has no record of it, and another
#      namespace that gets its bytes runs it too; with `verification = "AlwaysVerify"` that
#      second namespace is refused;
#   5. `nerdctl images`, `nerdctl rmi`, `nerdctl image prune --all`, containerd's GC: pullgate's
#      store stays consistent with containerd's (`pullgate doctor` exits 0 with no problem; every
#      snapshot directory under pullgate's root is one containerd lists, none staged or
#      half-removed left), down to zero when every image is gone.
# Usage: tests/e2e_clients.sh VERSION
source "$(dirname "$0")/lib.sh"
V=${1:?usage: e2e_clients.sh 1.7|2.1|2.4}
trap cleanup EXIT
CONTENT_POLICY=isolated
NERDCTL_VERSION=${NERDCTL_VERSION:-v2.1.3}
NERDCTL_BIN=${NERDCTL_BIN:-$DEPS/nerdctl-$NERDCTL_VERSION/nerdctl}
PW_ALICE=alice-Nerd-4k2p
PW_BOB=bob-Nerd-7d3q
PW_CAROL=carol-Nerd-9x1m
PRIVMSG="private nerdctl app"
DIRECTMSG="private app pullgate never saw"
DENIED='pullgate denied namespace'
# denied NS: pullgate's refusal for namespace NS as nerdctl prints it (inside its quoted message).
denied() { printf '%s [^[:alnum:]]*%s[^[:alnum:]]* \\(no principal\\): ' "$DENIED" "$1"; }

log "containerd $V, nerdctl $NERDCTL_VERSION: setup"
[ -x "$NERDCTL_BIN" ] || { fail "nerdctl is not built at $NERDCTL_BIN (scripts/setup.sh builds it)"; summary "e2e clients (containerd $V)"; exit 1; }
python3 "$REPO/tests/mkimage.py" "$WORK/priv" --tag v1 --message "$PRIVMSG" --extra-layers 1 --layer-mb 0.2 --seed 51 >/dev/null
python3 "$REPO/tests/mkimage.py" "$WORK/direct" --tag v1 --message "$DIRECTMSG" --extra-layers 1 --layer-mb 0.2 --seed 52 --base-note "never pulled by pullgate" --fixed-layers-note "direct" >/dev/null
# The same layers as DIRECT's but for mkimage's two fixed layers, which the private image has too.
python3 "$REPO/tests/mkimage.py" "$WORK/shared" --tag v1 --message "$DIRECTMSG" --extra-layers 1 --layer-mb 0.2 --seed 52 --base-note "never pulled by pullgate" >/dev/null
cat > "$WORK/acl.json" <<JSON
{"users": {"alice": "$PW_ALICE", "bob": "$PW_BOB", "carol": "$PW_CAROL"},
 "access": {"alice": ["private/*"], "bob": ["private/*"], "carol": ["private/*"]}, "push": ["alice"]}
JSON
# The registry serves TLS (use_tls_registries): what pullgate spares B in 3 (no blob from the
# verify on) it promises at an endpoint it verified.
use_tls_registries || exit 1
start_token_registry t "$WORK/acl.json" || exit 1
REG=$REG_t
IMG=$REG/private/app:v1
DIRECT=$REG/private/direct:v1
SHARED=$REG/private/shared:v1
push_image "$WORK/priv" v1 "$IMG" "alice:$PW_ALICE" || fail "push the private image"
push_image "$WORK/direct" v1 "$DIRECT" "alice:$PW_ALICE" || fail "push the second private image"
push_image "$WORK/shared" v1 "$SHARED" "alice:$PW_ALICE" || fail "push the third private image"
HOSTS=$REG_HOSTS   # the registry's hosts.toml: its https server and this run's CA
PG=$WORK/pg
start_pullgate "$PG" || exit 1
start_containerd "$V" "$PG/snapshotter.sock" || exit 1
check_containerd_version "$V"
mkdir -p "$WORK/cni/bin" "$WORK/cni/conf" "$WORK/nerdctl"
# nerdctl.toml as an operator writes it; the second one without the snapshotter line.
cat > "$WORK/nerdctl.toml" <<TOML
address = "$CTRD_SOCK"
snapshotter = "pullgate"
data_root = "$WORK/nerdctl"
hosts_dir = ["$HOSTS"]
cni_path = "$WORK/cni/bin"
cni_netconfpath = "$WORK/cni/conf"
TOML
grep -v '^snapshotter' "$WORK/nerdctl.toml" > "$WORK/nerdctl-nosnap.toml"
# nerd WHO ARGS...: nerdctl as user WHO (their own docker config dir), with nerdctl.toml.
nerd() { local who=$1; shift; NERDCTL_TOML=${NTOML:-$WORK/nerdctl.toml} DOCKER_CONFIG=$WORK/docker-$who "$NERDCTL_BIN" "$@"; }
nerd_nosnap() { NTOML=$WORK/nerdctl-nosnap.toml nerd "$@"; }
pg() { local sub=$1; shift; "$PG_BIN" "$sub" --address "$PG/api.sock" "$@"; }
# pg_as WHO SUB ARGS...: pullgate's CLI as user WHO (docker's config.json from nerdctl login).
pg_as() { local who=$1 sub=$2; shift 2; DOCKER_CONFIG=$WORK/docker-$who "$PG_BIN" "$sub" --address "$PG/api.sock" "$@"; }
mark() { wc -l < "$WORK/registry-t/log"; }
blob_gets() { tail -n +"$(($1 + 1))" "$WORK/registry-t/log" | grep -c '"GET /v2/[^ ]*/blobs/'; }
token_users() { tail -n +"$(($1 + 1))" "$WORK/registry-t/token.log" | grep -o 'user=[^ ]*' | sort -u | paste -sd' '; }
MD=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]+"/index.json"))["manifests"][0]["digest"])' "$WORK/priv")
check_out "nerdctl runs ($NERDCTL_VERSION)" "nerdctl version ${NERDCTL_VERSION#v}" "$NERDCTL_BIN" --version

log "1. nerdctl login; pullgate pull with that login; nerdctl run in A"
check_out "A's nerdctl login to the token registry" "Login Succeeded" bash -c "echo '$PW_ALICE' | NERDCTL_TOML='$WORK/nerdctl.toml' DOCKER_CONFIG='$WORK/docker-a' '$NERDCTL_BIN' login -u alice --password-stdin '$REG'"
check "it wrote docker's config.json with an entry for $REG" python3 -c 'import json,sys; assert sys.argv[2] in json.load(open(sys.argv[1]))["auths"]' "$WORK/docker-a/config.json" "$REG"
tm=$(wc -l < "$WORK/registry-t/token.log")
check_out "A's pullgate pull without --user (the login from config.json)" "$MD" pg_as a pull -n A "${REGF[@]}" "$IMG"
check "the token server saw alice, and only alice ($(token_users "$tm"))" test "$(token_users "$tm")" = "user=alice"
check_out "A holds a grant for the image" "$REG/private/app" pg grants -n A
check_out "nerdctl images in A lists it" "$REG/private/app" nerd a --namespace A images
check_out "A's nerdctl run --rm --net host (nerdctl.toml snapshotter = \"pullgate\")" "$PRIVMSG" nerd a --namespace A run --rm --net host "$IMG"
check_out "A's nerdctl run --snapshotter pullgate (nerdctl.toml without a snapshotter)" "$PRIVMSG" \
  nerd_nosnap a --namespace A run --rm --net host --snapshotter pullgate "$IMG"
# (Without either, nerdctl asks for overlayfs, which the shipped fragment disables: no way around.)
check_refused "A's nerdctl run with nerdctl's default snapshotter (overlayfs) fails: it is not loaded" \
  "snapshotter not loaded|not found|overlayfs" "$PRIVMSG" nerd_nosnap a --namespace A run --rm --net host "$IMG"

log "2. tenant B gets the cached image without a credential: refused"
check "A's nerdctl save of the image" nerd a --namespace A save -o "$WORK/priv-saved.tar" "$IMG"
out=$(nerd b --namespace B load -i "$WORK/priv-saved.tar" 2>&1); rc=$?
echo "         B's nerdctl load: rc=$rc: $(shown 400 "$out")"
check "B's nerdctl load shows nothing of the image" not grep -qF "$PRIVMSG" <<<"$out"
check "the image is in B's namespace now (ctr images ls)" bash -c "'${CTR[0]}' -a '$CTRD_SOCK' -n B images ls -q | grep -qxF '$IMG'"
m=$(mark)
check_refused "B's nerdctl run of the cached image is refused with pullgate's reason, nothing of it shown" \
  "$(denied B)" "$PRIVMSG" nerd b --namespace B run --rm --net host "$IMG"
out=$(nerd b --namespace B run --rm --net host "$IMG" 2>&1)
grep -m1 -oE "$DENIED.{0,260}" <<<"$out" | sed 's/^/         /'
check "the refusal names the fix (pullgate verify)" grep -q "pullgate verify" <<<"$out"
# committed_in NS: how many committed snapshots (with a parent) containerd lists in NS; fails when
# ctr does (lib.sh's `listing`).
committed_in() {
  local l; l=$(listing ctr_ -n "$1" snapshots --snapshotter pullgate ls) || return 1
  tail -n +2 <<<"$l" | awk '$3 == "Committed" {n++} END {print n + 0}'
}
check "B's refused run committed no snapshot of the image in B (snapshots in B: $(ctr_ -n B snapshots --snapshotter pullgate ls 2>/dev/null | tail -n +2 | wc -l))" \
  is_zero committed_in B
check_refused "B's nerdctl pull without a login is refused by the registry" "401|unauthorized|authoriz" "$PRIVMSG" \
  nerd b --namespace B pull "$IMG"
check_no_grants "B holds no grant" B

log "3. B logs in, pullgate verify, then B's nerdctl run works with no blob downloaded"
check_out "B's nerdctl login (bob)" "Login Succeeded" bash -c "echo '$PW_BOB' | NERDCTL_TOML='$WORK/nerdctl.toml' DOCKER_CONFIG='$WORK/docker-b' '$NERDCTL_BIN' login -u bob --password-stdin '$REG'"
m=$(mark); tm=$(wc -l < "$WORK/registry-t/token.log")
check_out "B's pullgate verify with that login" "$MD" pg_as b verify -n B "${REGF[@]}" "$IMG"
check "the token server saw bob, and only bob ($(token_users "$tm"))" test "$(token_users "$tm")" = "user=bob"
check_out "B's nerdctl run now works" "$PRIVMSG" nerd b --namespace B run --rm --net host "$IMG"
check "the registry saw B's manifest request" bash -c "tail -n +$((m + 1)) '$WORK/registry-t/log' | grep -q '\"[A-Z]* /v2/private/app/manifests/'"
check "and served no blob since the verify ($(blob_gets "$m") blob GETs)" test "$(blob_gets "$m")" = 0

log "4. nerdctl pull of private images straight, without pullgate's CLI"
check_out "C's nerdctl login (carol)" "Login Succeeded" bash -c "echo '$PW_CAROL' | NERDCTL_TOML='$WORK/nerdctl.toml' DOCKER_CONFIG='$WORK/docker-c' '$NERDCTL_BIN' login -u carol --password-stdin '$REG'"
# 4a: an image pullgate pulled for A: its layers are protected; containerd downloads the blobs
# with carol's login, pullgate sees no credential and holds no grant for C: the unpack is refused.
m=$(mark)
check_refused "4a: C's nerdctl pull of A's image is refused at the unpack with pullgate's reason" \
  "$(denied C)" "$PRIVMSG" nerd c --namespace C pull "$IMG"
check "4a: (containerd did download the blobs with carol's login: $(blob_gets "$m") blob GETs)" test "$(blob_gets "$m")" -gt 0
check_refused "4a: C's nerdctl run of it is refused too" "$(denied C)" "$PRIVMSG" nerd c --namespace C run --rm --net host "$IMG"
check_out "4a: after C's pullgate verify (carol's login)" "$MD" pg_as c verify -n C "${REGF[@]}" "$IMG"
check_out "4a: C's nerdctl run works" "$PRIVMSG" nerd c --namespace C run --rm --net host "$IMG"
# 4b: images pullgate never saw, pulled by nerdctl alone (C holds a grant for A's image since 4a).
# DIRECT shares no layer with any image pullgate pulled: pullgate has no record of its layers,
# so it is a preloaded image to the gate (NeverVerifyPreloadedImages, the default). SHARED
# has two layers of A's private image: pullgate knows those layers (by their layer IDs,
# wherever they appear) and gates them as A's.
check_out "4b: C's nerdctl pull of an image pullgate never saw succeeds" "$REG/private/direct" nerd c --namespace C pull "$DIRECT"
check_out "4b: and runs" "$DIRECTMSG" nerd c --namespace C run --rm --net host "$DIRECT"
check_out "4b: C's nerdctl pull of another, which has two of A's private layers, succeeds (C holds a grant for them)" "$REG/private/shared" nerd c --namespace C pull "$SHARED"
check_err "4b: pullgate has no record of the image (inspect)" "pullgate has no record of" pg inspect "$DIRECT"
check_no_grants "4b: D holds no grant" D
nerd c --namespace C save -o "$WORK/direct-saved.tar" "$DIRECT" >/dev/null 2>&1 || fail "4b: C's nerdctl save"
nerd c --namespace C save -o "$WORK/shared-saved.tar" "$SHARED" >/dev/null 2>&1 || fail "4b: C's nerdctl save"
nerd d --namespace D load -i "$WORK/direct-saved.tar" >/dev/null 2>&1
check_out "4b: so D, without any credential, runs it from its bytes (a preloaded image)" "$DIRECTMSG" \
  nerd d --namespace D run --rm --net host "$DIRECT"
nerd d --namespace D load -i "$WORK/shared-saved.tar" >/dev/null 2>&1
out=$(nerd d --namespace D run --rm --net host "$SHARED" 2>&1); rc=$?
l2=$(python3 -c 'import json,sys; d=sys.argv[1]; i=json.load(open(d+"/index.json")); b=lambda x: json.load(open(d+"/blobs/sha256/"+x.split(":")[1])); print(b(b(i["manifests"][0]["digest"])["config"]["digest"])["rootfs"]["diff_ids"][1])' "$WORK/priv")
if [ $rc -ne 0 ] && grep -qE "$(denied D)layer $l2: no grant" <<<"$out" && ! grep -qF "$DIRECTMSG" <<<"$out"; then
  pass "4b: but D's nerdctl run of the one with A's layers is refused on A's layer ($l2), nothing shown"
else fail "4b: D's nerdctl run of the image with A's layers: rc=$rc: $(shown 500 "$out")"; fi
# 4c: the same with verification = "AlwaysVerify": D is refused.
kill "$PG_PID"; wait "$PG_PID" 2>/dev/null
printf '\n[policy]\nverification = "AlwaysVerify"\n' >> "$PG/config.toml"
start_pullgate "$PG" || exit 1
wait_backend
nerd e --namespace E load -i "$WORK/direct-saved.tar" >/dev/null 2>&1
check "4c: the image is in E's namespace (nerdctl load; its unpack refused or not)" bash -c "'${CTR[0]}' -a '$CTRD_SOCK' -n E images ls -q | grep -qxF '$DIRECT'"
check_refused "4c: under AlwaysVerify, E's nerdctl run of that image (loaded from its bytes) is refused" "$(denied E)" "$DIRECTMSG" \
  nerd e --namespace E run --rm --net host "$DIRECT"
kill "$PG_PID"; wait "$PG_PID" 2>/dev/null
sed -i '/^\[policy\]$/,$d' "$PG/config.toml"
start_pullgate "$PG" || exit 1
wait_backend

log "5. nerdctl images, rmi, image prune, containerd's GC: pullgate's store stays consistent"
# snapshot_dirs: the snapshot directories under pullgate's root (numeric ids), and any other
# entry there (staged new-*, half-removed rm-*), which must not outlive an operation.
# Each fails when find does (an empty listing is not "none").
snapshot_entries() { listing find "$PG/root/snapshots" -mindepth 1 -maxdepth 1 -printf '%f\n'; }
snapshot_dirs() { local l; l=$(snapshot_entries) || return 1; awk '/^[0-9]+$/ {n++} END {print n + 0}' <<<"$l"; }
other_entries() { local l; l=$(snapshot_entries) || return 1; awk 'NF && !/^[0-9]+$/' <<<"$l" | paste -sd' '; }
no_snapshot_entries() { local l; l=$(snapshot_entries) || return 1; [ -z "$l" ] || { echo "entries: $(paste -sd' ' <<<"$l")"; return 1; }; }
# containerd's snapshotter conformance binary (tests/conformance, lib.sh's conformance_bin):
# its TestConsistency walks pullgate's own snapshots through its socket and every namespace's
# through containerd, and checks that each of containerd's has its counterpart in pullgate
# (same kind and parent, mounted directories present); it logs how many pullgate holds.
CONF=$(conformance_bin 2>/dev/null)
consistent() { # DESC
  gc_all || { fail "$1: containerd's GC (a lease deleted with --sync) failed"; return; }
  local out rc held d o
  out=$("$CONF" -test.v -test.run '^TestConsistency$' -existing "$PG/snapshotter.sock" -containerd "$CTRD_SOCK" 2>&1); rc=$?
  held=$(grep -oE 'which holds [0-9]+' <<<"$out" | grep -oE '[0-9]+$')
  d=$(snapshot_dirs 2>&1); o=$(other_entries 2>&1)
  if [ $rc -eq 0 ] && [ -n "$held" ] && [ "$d" = "$held" ] && [ -z "$o" ]; then
    pass "$1: pullgate agrees with containerd on every snapshot ($(grep -oE '[0-9]+ snapshots in containerd.s view across [0-9]+ namespaces' <<<"$out")), holds $held, with $d snapshot directories and nothing else"
  else fail "$1: consistency rc=$rc, pullgate holds ${held:-?}, $d snapshot directories, other entries: ${o:-none}: $(grep -vE '^(=== RUN|PASS|FAIL$)' <<<"$out" | head -10)"; fi
  out=$("$PG_BIN" doctor --config "$PG/config.toml" --containerd-config "$WORK/containerd/config.toml" 2>&1); rc=$?
  if [ $rc -eq 0 ] && grep -qE '^[0-9]+ ok, [0-9]+ warning\(s\), 0 problem\(s\)' <<<"$(sed 's/^ *//' <<<"$out")"; then pass "$1: pullgate doctor exits 0, no problem"
  else fail "$1: pullgate doctor rc=$rc: $(grep -E 'problem' <<<"$out" | head -5)"; fi
}
consistent "before any removal"
check_out "nerdctl images in B lists the image" "$REG/private/app" nerd b --namespace B images
check "A's nerdctl rmi of the image" nerd a --namespace A rmi "$IMG"
check "nerdctl images in A no longer lists it" lacks "$REG/private/app" env NERDCTL_TOML="$WORK/nerdctl.toml" "$NERDCTL_BIN" --namespace A images
consistent "after A's nerdctl rmi"
check_out "B still runs the image from its own snapshots" "$PRIVMSG" nerd b --namespace B run --rm --net host "$IMG"
check "B's nerdctl image prune --all --force" nerd b --namespace B image prune --all --force
check "nerdctl images in B lists nothing of it" lacks "$REG/private/app" env NERDCTL_TOML="$WORK/nerdctl.toml" "$NERDCTL_BIN" --namespace B images
consistent "after B's nerdctl image prune --all"
for ns in C D E; do nerd x --namespace "$ns" image prune --all --force >/dev/null 2>&1 || fail "$ns's nerdctl image prune --all --force"; done
for ns in $(ctr_ namespaces ls -q); do ctr_ -n "$ns" images ls -q | xargs -r "${CTR[@]}" -n "$ns" images rm >/dev/null 2>&1; done
# (and the probe snapshot wait_backend prepared after pullgate's restarts; and pullgate's verify
# holds: a verify that had to place blobs in a namespace keeps them, and through the config's
# gc.ref label the image's snapshots, under an expiring lease labelled pullgate.io/verified,
# so that the namespace's next pull or run finds them. Deleted here, as their expiry would.
# Seen when containerd's GC took C's blobs after its refused nerdctl pull, before C's verify.)
ctr_ -n pullgate-probe snapshots --snapshotter pullgate rm probe >/dev/null 2>&1
for ns in $(ctr_ namespaces ls -q); do
  for l in $(ctr_ -n "$ns" leases ls | awk '/pullgate.io\/verified=/ {print $1}'); do
    ctr_ -n "$ns" leases rm "$l" >/dev/null && echo "    (deleted pullgate's verify hold $l in $ns)"
  done
done
gc_all || fail "containerd's GC after every image is removed"
# all_snapshots: every namespace's snapshots as containerd lists them (NS KEY ...); fails when a
# listing fails.
all_snapshots() {
  local nss ns l; nss=$(listing ctr_ namespaces ls -q) || return 1
  for ns in $nss; do
    l=$(listing ctr_ -n "$ns" snapshots --snapshotter pullgate ls) || return 1
    tail -n +2 <<<"$l" | awk -v ns="$ns" 'NF {print ns, $0}'
  done
}
left=$(all_snapshots); lrc=$?
listed=$(nlines "$left"); [ $lrc -eq 0 ] || listed="unknown: a listing failed (rc=$lrc)"
check "after every image is removed (nerdctl image prune in C, D, E; ctr images rm of the rest): containerd lists no snapshot in any namespace ($listed)" test "$listed" = 0
if [ "$listed" != 0 ]; then   # (what holds them: containers, images, leases, per namespace)
  for ns in $(ctr_ namespaces ls -q); do
    echo "    namespace $ns: containers: $(ctr_ -n "$ns" containers ls -q | paste -sd' '); images: $(ctr_ -n "$ns" images ls -q | paste -sd' '); leases: $(ctr_ -n "$ns" leases ls -q | paste -sd' ')"
    ctr_ -n "$ns" snapshots --snapshotter pullgate ls | tail -n +2 | sed 's/^/      /'
  done
fi
check "and pullgate holds no snapshot directory ($(snapshot_dirs)) and nothing else ($(other_entries))" no_snapshot_entries
out=$("$PG_BIN" doctor --config "$PG/config.toml" --containerd-config "$WORK/containerd/config.toml" 2>&1); rc=$?
check "and pullgate doctor exits 0 with no problem (rc=$rc)" bash -c "[ $rc -eq 0 ] && grep -qE '0 problem\(s\)' <<<'$(tail -1 <<<"$out")'"
check "pullgate's daemon is still up" kill -0 "$PG_PID"

summary "e2e clients: nerdctl (containerd $V)"
