# Shared helpers for pullgate's end-to-end tests and benchmarks (sourced, bash).
# Starts real registries, real containerd (1.6 bookworm, 1.7 trixie, 2.1 sid) with pullgate
# registered from plugin/ as an operator would, and real pullgate daemons, all under $WORK,
# all bound to 127.0.0.1 or to sockets under $WORK. `cleanup` (an EXIT trap) stops them.
set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEPS=${PULLGATE_DEPS:-/opt/pullgate-deps}
PG_BIN=${PG_BIN:-$REPO/target/release/pullgate}
WORK=${WORK:-$(mktemp -d /tmp/pullgate-e2e.XXXXXX)}
PIDS=()
FAILS=0
PASSES=0

log() { printf '\n=== %s\n' "$*"; }
pass() { PASSES=$((PASSES + 1)); printf '  ok   %s\n' "$*"; }
# Every failure is also kept in FAILED_CHECKS, which `summary` lists: a failure inside a helper
# that `check` runs (its output discarded) is otherwise counted without saying what it was.
FAILED_CHECKS=()
fail() { FAILS=$((FAILS + 1)); FAILED_CHECKS+=("$*"); printf '  FAIL %s\n' "$*"; }
# na DESC: a check that cannot apply here (a containerd version without the behaviour it tests):
# printed and listed by `summary`, never counted as a pass.
NAS=0
NA_CHECKS=()
na() { NAS=$((NAS + 1)); NA_CHECKS+=("$*"); printf '  n/a  %s\n' "$*"; }
# check DESC CMD...: passes when CMD succeeds.
# check DESC CMD...: passes when CMD succeeds; a failure quotes what CMD printed.
check() {
  local d=$1; shift
  local out; out=$("$@" 2>&1); local rc=$?
  if [ $rc -eq 0 ]; then pass "$d"; elif [ -n "$out" ]; then fail "$d (rc=$rc: $(shown 400 "$out"))"; else fail "$d"; fi
}
# shown N TEXT: TEXT as a failure message quotes it, at most N bytes, without the warning
# containerd 2.2 and later prints on every ctr call on a cgroup v1 host (it filled the quote and
# hid what a failing command had printed).
shown() { grep -v 'level=warning msg="DEPRECATION: The support for cgroup v1' <<<"$2" | head -c "$1"; }
# check_out DESC WANT CMD...: passes when CMD succeeds and its output contains WANT.
check_out() {
  local d=$1 want=$2; shift 2
  local out; out=$("$@" 2>&1); local rc=$?
  if [ $rc -eq 0 ] && grep -qF -- "$want" <<<"$out"; then pass "$d"; else fail "$d (rc=$rc, want '$want', got: $(shown 600 "$out"))"; fi
}
# check_has DESC WANT CMD...: passes when CMD's output contains WANT, whatever its exit code.
check_has() {
  local d=$1 want=$2; shift 2
  local out; out=$("$@" 2>&1)
  if grep -qF -- "$want" <<<"$out"; then pass "$d"; else fail "$d (want '$want', got: $(shown 600 "$out"))"; fi
}
# check_err DESC PATTERN CMD...: passes when CMD fails and its output matches the ERE PATTERN.
check_err() {
  local d=$1 pat=$2; shift 2
  local out; out=$("$@" 2>&1); local rc=$?
  if [ $rc -ne 0 ] && grep -qiE -- "$pat" <<<"$out"; then pass "$d"; else fail "$d (rc=$rc, want /$pat/, got: $(shown 600 "$out"))"; fi
}
# check_refused DESC PATTERN LEAK CMD...: passes when CMD fails, its output matches the ERE
# PATTERN, and it does not contain LEAK (what the refused container or image would have printed,
# e.g. its private /msg; empty: not checked). For refusals of a run or an unpack: the exit code
# and the message alone would pass a run that printed the private content and then failed.
check_refused() { check_refused_rc any "$@"; }
# check_refused_rc RC DESC PATTERN LEAK CMD...: check_refused, and CMD's exit code must be RC
# (`any`: any failure).
check_refused_rc() {
  local want=$1 d=$2 pat=$3 leak=$4; shift 4
  local out; out=$("$@" 2>&1); local rc=$?
  if [ $rc -eq 0 ] || { [ "$want" != any ] && [ $rc -ne "$want" ]; } || ! grep -qiE -- "$pat" <<<"$out"; then
    fail "$d (rc=$rc, want exit ${want/any/non-zero} saying /$pat/, got: $(shown 600 "$out"))"
  elif [ -n "$leak" ] && grep -qF -- "$leak" <<<"$out"; then fail "$d: refused, but the output carries '$leak': $(shown 600 "$out")"
  else pass "$d"; fi
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# launch_on_free_ports N FN: free_port only names a port that was free a moment ago; another
# process may bind it before our server does. So: picks N free ports into PORT_1..PORT_N and
# calls FN, which starts the server(s) on them in the background (appending each pid to PIDS and
# to LAUNCHED) and returns 0 once they answer. When FN fails, or a server it started has exited
# (lost its port: it answered only because another process holds that port), its servers are
# stopped and FN is called again on new ports; up to 5 tries.
launch_on_free_ports() {
  local n=$1 fn=$2 try i p alive
  for try in 1 2 3 4 5; do
    for ((i = 1; i <= n; i++)); do printf -v "PORT_$i" '%s' "$(free_port)"; done
    LAUNCHED=()
    if "$fn"; then
      sleep 0.2
      alive=1; for p in "${LAUNCHED[@]}"; do kill -0 "$p" 2>/dev/null || alive=0; done
      [ $alive -eq 1 ] && return 0
    fi
    for p in "${LAUNCHED[@]}"; do kill "$p" 2>/dev/null; done
    echo "  (try $try: a server on port(s) $(for ((i = 1; i <= n; i++)); do v=PORT_$i; printf '%s ' "${!v}"; done)did not come up; new ports)" >&2
  done
  return 1
}

# wait_serving SECONDS CMD...: like wait_for, but gives up at once when a server in LAUNCHED
# has exited (it could not bind its port).
wait_serving() {
  local t=$1; shift; local end=$((SECONDS + t)) p
  until "$@" >/dev/null 2>&1; do
    for p in "${LAUNCHED[@]}"; do kill -0 "$p" 2>/dev/null || return 1; done
    [ $SECONDS -ge $end ] && return 1; sleep 0.1
  done
}

wait_for() { # wait_for SECONDS CMD...
  local t=$1; shift; local end=$((SECONDS + t))
  until "$@" >/dev/null 2>&1; do [ $SECONDS -ge $end ] && return 1; sleep 0.1; done
}

cleanup() {
  local p
  set +e   # (a script under set -e, bench/snapshotter.sh, would stop at the first kill of a gone process)
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  sleep 0.5
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  # containerd shims and their containers
  pkill -9 -f "containerd-shim-runc-v2 .*-address $WORK" 2>/dev/null
  grep -F " $WORK/" /proc/self/mounts | awk '{print $2}' | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
  if [ -z "${KEEP_WORK:-}" ]; then rm -rf "$WORK"; else echo "kept $WORK"; fi
}

# registry_config DIR PORT AUTH_YAML [ADDRESS]: a distribution config with an access log,
# listening on ADDRESS (127.0.0.1 by default).
registry_config() {
  cat > "$1/config.yml" <<YML
version: 0.1
log:
  level: info
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: $1/data
  delete:
    enabled: true
http:
  addr: ${4:-127.0.0.1}:$2
$3
YML
}

# Registries over TLS. pullgate believes what an endpoint served only when it checked the
# endpoint's identity (https, its certificate verified): at a plain-http registry every pull and
# verify downloads the blobs again. A test of what a verified registry spares (no second
# download, copies between namespaces) calls use_tls_registries first: from then on
# start_registry and start_token_registry serve https with a certificate for 127.0.0.1 from this
# run's CA ($WORK/ca/ca.pem), and each writes REG_HOSTS/127.0.0.1:PORT/hosts.toml naming its
# https server and the CA, which pullgate's daemon reads as its [registry] hosts_dir
# (pullgate_config) and ctr as --hosts-dir. The flags that reach this run's registries
# with pullgate's CLI (REGF) and ctr (CTRF): --plain-http; under use_tls_registries none for
# pullgate (its daemon reads REG_HOSTS: a request brings no TLS trust of its own) and
# --hosts-dir REG_HOSTS for ctr.
REG_HOSTS=$WORK/registry-hosts
REGISTRY_TLS=
REGF=(--plain-http)
CTRF=(--plain-http)
use_tls_registries() {
  local d=$WORK/ca
  mkdir -p "$d" "$REG_HOSTS"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/ca.key" -out "$d/ca.pem" -days 2 -subj "/CN=pullgate-test-run-ca" >/dev/null 2>&1 \
    && openssl req -newkey rsa:2048 -nodes -keyout "$d/server.key" -out "$d/server.csr" -subj "/CN=pullgate-test-registry" >/dev/null 2>&1 \
    && openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial -days 2 \
      -extfile <(printf 'extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n') -out "$d/server.pem" >/dev/null 2>&1 \
    || { echo "cannot make this run's CA and registry certificate (openssl)"; return 1; }
  REGISTRY_TLS=1
  REGF=()
  CTRF=(--hosts-dir "$REG_HOSTS")
}
# registry_tls_yaml: the http.tls block of a registry's config under use_tls_registries (else
# nothing).
registry_tls_yaml() {
  [ -n "$REGISTRY_TLS" ] || return 0
  printf '  tls:\n    certificate: %s\n    key: %s\n' "$WORK/ca/server.pem" "$WORK/ca/server.key"
}
# registry_url HOST:PORT: the registry's base URL as this run serves it.
registry_url() { if [ -f "$REG_HOSTS/$1/hosts.toml" ]; then echo "https://$1"; else echo "http://$1"; fi; }
# reg_curl ARGS...: curl trusting this run's CA (for registry_url URLs).
reg_curl() { if [ -n "$REGISTRY_TLS" ]; then curl --cacert "$WORK/ca/ca.pem" "$@"; else curl "$@"; fi; }
# tls_hosts_toml DIR HOST:PORT: DIR/HOST:PORT/hosts.toml for a TLS registry of this run.
tls_hosts_toml() {
  mkdir -p "$1/$2"
  cat > "$1/$2/hosts.toml" <<TOML
server = "https://$2"

[host."https://$2"]
  capabilities = ["pull", "resolve", "push"]
  ca = "$WORK/ca/ca.pem"
TOML
}

# start_registry NAME [htpasswd USER PASS [USER PASS...]]: anonymous (or Basic-auth) registry
# (over TLS under use_tls_registries).
# Sets REG_<NAME>=127.0.0.1:PORT. A port taken between free_port and the bind is retried.
start_registry() {
  local name=$1 mode=${2:-}
  local dir=$WORK/registry-$name; mkdir -p "$dir/data"
  _REG_AUTH=""
  if [ "$mode" = htpasswd ]; then
    htpasswd -Bbc "$dir/htpasswd" "$3" "$4" >/dev/null 2>&1
    local extra=("${@:5}") i
    for ((i = 0; i + 1 < ${#extra[@]}; i += 2)); do htpasswd -Bb "$dir/htpasswd" "${extra[i]}" "${extra[i+1]}" >/dev/null 2>&1; done
    _REG_AUTH="auth:
  htpasswd:
    realm: pullgate-test
    path: $dir/htpasswd"
  fi
  _REG_DIR=$dir
  launch_on_free_ports 1 _launch_registry || { echo "registry $name did not start:"; cat "$dir/log"; return 1; }
  printf -v "REG_$name" '%s' "127.0.0.1:$PORT_1"
}
_launch_registry() {
  registry_config "$_REG_DIR" "$PORT_1" "$(registry_tls_yaml)
$_REG_AUTH"
  docker-registry serve "$_REG_DIR/config.yml" >>"$_REG_DIR/log" 2>&1 &
  PIDS+=($!); LAUNCHED+=($!)
  _registry_served "127.0.0.1:$PORT_1"
}
# _registry_served HOST:PORT: waits until the registry answers (and, over TLS, writes its hosts.toml).
_registry_served() {
  if [ -n "$REGISTRY_TLS" ]; then
    wait_serving 20 curl -s -o /dev/null --cacert "$WORK/ca/ca.pem" "https://$1/v2/" && tls_hosts_toml "$REG_HOSTS" "$1"
  else
    wait_serving 20 curl -s -o /dev/null "http://$1/v2/"
  fi
}

# start_token_registry NAME ACL_JSON: a registry with token auth and its token server.
# Sets REG_<NAME>=127.0.0.1:PORT; the token server logs requests to $WORK/registry-NAME/token.log
# and every token it issues (jti and the token itself) to $WORK/registry-NAME/tokens.log, which
# only the tests read (to search pullgate's and containerd's files for a leaked token).
start_token_registry() {
  local name=$1 acl=$2
  local dir=$WORK/registry-$name; mkdir -p "$dir/data"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$dir/key.pem" -out "$dir/cert.pem" -days 2 \
    -subj "/CN=pullgate-test-token" >/dev/null 2>&1
  cp "$acl" "$dir/acl.json"
  _REG_DIR=$dir
  launch_on_free_ports 2 _launch_token_registry || { echo "token registry $name did not start:"; cat "$dir/log" "$dir/token.out"; return 1; }
  printf -v "REG_$name" '%s' "127.0.0.1:$PORT_1"
}
_launch_token_registry() {
  local dir=$_REG_DIR port=$PORT_1 tport=$PORT_2
  /usr/bin/python3 "$REPO/tests/tokenserver.py" --port "$tport" --key "$dir/key.pem" --cert "$dir/cert.pem" \
    --config "$dir/acl.json" --log "$dir/token.log" --tokens "$dir/tokens.log" >>"$dir/token.out" 2>&1 &
  PIDS+=($!); LAUNCHED+=($!)
  registry_config "$dir" "$port" "$(registry_tls_yaml)
auth:
  token:
    realm: http://127.0.0.1:$tport/token
    service: pullgate-test-registry
    issuer: pullgate-test-issuer
    rootcertbundle: $dir/cert.pem"
  docker-registry serve "$dir/config.yml" >>"$dir/log" 2>&1 &
  PIDS+=($!); LAUNCHED+=($!)
  wait_serving 20 curl -s -o /dev/null "http://127.0.0.1:$tport/token?service=x" && _registry_served "127.0.0.1:$port"
}

# Tokens from token registry NAME's token server (tests/tokenserver.py), as a token login gets
# them. token_realm NAME: its realm URL.
token_realm() { sed -n 's/^ *realm: //p' "$WORK/registry-$1/config.yml"; }
# identity_token NAME USER PASS [SERVICE]: a refresh token (the identity token docker keeps
# after a token login): the password grant with access_type=offline.
identity_token() {
  curl -sf -X POST --data-urlencode "username=$2" --data-urlencode "password=$3" \
    -d "grant_type=password&access_type=offline&client_id=pullgate-test&service=${4:-pullgate-test-registry}" \
    "$(token_realm "$1")" | python3 -c 'import json,sys; print(json.load(sys.stdin)["refresh_token"])'
}
# registry_token NAME USER PASS REPO: a bearer token for pulling REPO at the registry.
registry_token() {
  curl -sf -u "$2:$3" "$(token_realm "$1")?service=pullgate-test-registry&scope=repository:$4:pull" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])'
}
# token_acl NAME PYTHON_EXPR: edits the token server's ACL (the dict `acl`) in place; it reads
# the file for every request.
token_acl() {
  python3 - "$WORK/registry-$1/acl.json" "$2" <<'PY'
import json, sys
p, expr = sys.argv[1:]
acl = json.load(open(p)); exec(expr); json.dump(acl, open(p + ".new", "w"))
import os; os.replace(p + ".new", p)
PY
}
# revoke_token NAME TOKEN: the token server refuses the refresh token from now on.
revoke_token() {
  local jti; jti=$(cut -d. -f2 <<<"$2" | python3 -c 'import base64,json,sys; s=sys.stdin.read().strip(); print(json.loads(base64.urlsafe_b64decode(s + "=" * (-len(s) % 4)))["jti"])') \
    && token_acl "$1" "acl.setdefault('revoked', []).append('$jti')"
}

# push_image LAYOUT_DIR TAG HOST/REPO:TAG [USER:PASS] [--all]: with --all the layout's index
# is pushed too, so the tag names an index (platform selection is exercised). Under
# DIFF_HOSTILE=1 the layout is an attack on one reading, which pullgate may refuse.
push_image() {
  # The differential test (tests/difftest/run.sh) reads every document the suite pushes: each
  # must be read as containerd reads it, unless it is marked hostile.
  if [ -n "${PULLGATE_DIFF_CORPUS:-}" ] && [ -f "$1/index.json" ]; then
    local keep; keep=$(mktemp -d "$PULLGATE_DIFF_CORPUS/layout.XXXXXX") && mkdir -p "$keep/blobs/sha256" \
      && cp "$1/index.json" "$keep/" && find "$1/blobs/sha256" -type f -size -4M -exec cp {} "$keep/blobs/sha256/" \;
    [ -n "${DIFF_HOSTILE:-}" ] && [ -n "$keep" ] && : > "$keep/hostile"
  fi
  local creds=() all=()
  [ -n "${4:-}" ] && creds=(--dest-creds "$4")
  [ "${5:-}" = --all ] && all=(--all)
  skopeo copy --quiet "${all[@]}" --dest-tls-verify=false "${creds[@]}" "oci:$1:$2" "docker://$3" >/dev/null
}

# secret_patterns FILE USER:PASSWORD...: writes FILE for `grep -f`, one fixed string a line:
# each password (after the last colon) and "user:password" in base64, as a Basic header carries it.
secret_patterns() {
  local f=$1 up; shift
  : > "$f"
  for up in "$@"; do
    printf '%s\n' "${up##*:}" >> "$f"
    printf '%s' "$up" | base64 -w0 >> "$f"; echo >> "$f"
  done
}

# containerd_bindir VERSION
containerd_bindir() {
  case $1 in
    1.6) echo /usr/bin ;;
    1.7) echo "$DEPS/containerd-1.7/usr/bin" ;;
    2.1) echo "$DEPS/containerd-2.1/usr/bin" ;;
    2.4) echo "$DEPS/containerd-2.4/usr/bin" ;;   # built from its Go module by scripts/setup.sh
    *) echo "unknown containerd version $1" >&2; return 1 ;;
  esac
}

# pullgate_config DIR [HOSTS_DIR]: writes DIR/config.toml for a pullgate rooted in DIR, its
# [registry] hosts_dir HOSTS_DIR (REG_HOSTS under use_tls_registries; else none).
pullgate_config() {
  local d=$1; mkdir -p "$d"
  cat > "$d/config.toml" <<TOML
[daemon]
root = "$d/root"
snapshotter_socket = "$d/snapshotter.sock"
api_socket = "$d/api.sock"
containerd_address = "$WORK/containerd/containerd.sock"
log_level = "${PG_LOG_LEVEL:-debug}"
TOML
  local hosts=${2:-}
  [ -z "$hosts" ] && [ -n "$REGISTRY_TLS" ] && hosts=$REG_HOSTS
  [ -n "$hosts" ] && printf '\n[registry]\nhosts_dir = "%s"\n' "$hosts" >> "$d/config.toml"
  return 0
}

# start_pullgate DIR: (re)starts pullgate serving from DIR; sets PG_PID. The daemon is
# PG_SERVE_BIN when set (the positive controls' pullgate-defence-off), else PG_BIN.
start_pullgate() {
  local d=$1; [ -f "$d/config.toml" ] || pullgate_config "$d"
  "${PG_SERVE_BIN:-$PG_BIN}" serve --config "$d/config.toml" >>"$d/log" 2>&1 &
  PG_PID=$!; PIDS+=($PG_PID)
  wait_for 20 test -S "$d/snapshotter.sock" || { echo "pullgate did not start:"; cat "$d/log"; return 1; }
}

# wait_backend NS: waits until containerd reaches pullgate again (after a pullgate restart;
# containerd's gRPC client reconnects with up to 3 s of backoff). Prepares NS/probe once.
wait_backend() {
  local ns=${1:-pullgate-probe}
  ctr_ -n "$ns" snapshots --snapshotter pullgate prepare probe "" >/dev/null 2>&1
  wait_for 30 ctr_ -n "$ns" snapshots --snapshotter pullgate mounts /tmp probe
}

# node_platform: this machine's platform as containerd names it (plugin/fragment.sh).
node_platform() { "$REPO/plugin/fragment.sh" --platform; }

# containerd_config VERSION PG_SOCKET [keep-builtin]: the operator's fragment (plugin/fragment.sh),
# pointed at this run's sockets; CRI disabled (not under test here). With keep-builtin the
# built-in snapshotters stay enabled (benchmarks compare against overlayfs).
# fragment 1.x|2.x PG_SOCKET: plugin/fragment.sh's fragment for this run: pullgate at PG_SOCKET,
# its root beside it (pullgate_config's layout), containerd's root and state under $WORK.
fragment() {
  local c=$WORK/containerd root; root=$(dirname "$2")/root
  "$REPO/plugin/fragment.sh" "$1" | sed -e "s#/run/pullgate/snapshotter.sock#$2#" -e "s#root = \"/var/lib/pullgate\"#root = \"$root\"#" \
      -e "/^version = /a root = \"$c/root\"\nstate = \"$c/state\""
}

containerd_config() {
  local v=$1 sock=$2 keep=${3:-} frag cri
  case $v in
    1.6|1.7) frag=1.x; cri='"io.containerd.grpc.v1.cri"' ;;
    2.1|2.4) frag=2.x; cri='"io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime"' ;;
  esac
  local c=$WORK/containerd
  fragment "$frag" "$sock" > "$c/config.toml.tmp"
  if [ -n "$keep" ]; then
    sed -i "s#^disabled_plugins = .*#disabled_plugins = [$cri]#" "$c/config.toml.tmp"
  else
    sed -i "s#^disabled_plugins = \[\(.*\)\]#disabled_plugins = [\1, $cri]#" "$c/config.toml.tmp"
  fi
  cat "$c/config.toml.tmp" - > "$c/config.toml" <<TOML

[grpc]
  address = "$c/containerd.sock"
TOML
  rm "$c/config.toml.tmp"
  # The fragments set content_sharing_policy = "isolated"; CONTENT_POLICY=shared runs a test
  # under containerd's default instead.
  if [ "${CONTENT_POLICY:-isolated}" = shared ]; then
    sed -i 's#content_sharing_policy = "isolated"#content_sharing_policy = "shared"#' "$c/config.toml"
  fi
  grep -q "content_sharing_policy = \"${CONTENT_POLICY:-isolated}\"" "$c/config.toml" || { echo "containerd config: policy ${CONTENT_POLICY:-isolated} not set"; return 1; }
}

# layout_tar DIR NAME: an archive of the OCI layout DIR's image, named NAME, as `ctr images
# import` reads it (an image's bytes reaching a namespace some other way than a pull); prints
# the archive's path.
layout_tar() {
  local dir=$1 name=$2 t; t=$(mktemp -d "$WORK/import.XXXXXX")
  cp -r "$dir/blobs" "$t/" && echo '{"imageLayoutVersion":"1.0.0"}' > "$t/oci-layout" || return 1
  python3 - "$dir/index.json" "$name" > "$t/index.json" <<'PY' || return 1
import json, sys
idx = json.load(open(sys.argv[1]))
e = idx["manifests"][0]
e["annotations"] = {"io.containerd.image.name": sys.argv[2], "org.opencontainers.image.ref.name": "v1"}
print(json.dumps({"schemaVersion": 2, "manifests": [e]}))
PY
  tar -C "$t" -cf "$t.tar" . && echo "$t.tar"
}

# local_containerd_config SRC DST: containerd's config file SRC (one `containerd config default`
# wrote, say) with its root, state and sockets under $WORK/containerd and no imports: an
# operator's file, made to run beside the other tests' containerds.
local_containerd_config() {
  python3 - "$1" "$2" "$WORK/containerd" <<'PY'
import re, sys
src, dst, c = sys.argv[1:]
t = open(src).read()
q = "[\"']"
t = re.sub(r"(?m)^root = " + q + ".*" + q + "$", f'root = "{c}/root"', t)
t = re.sub(r"(?m)^state = " + q + ".*" + q + "$", f'state = "{c}/state"', t)
t = re.sub(q + r"/run/containerd/containerd\.sock(\.ttrpc)?" + q, lambda m: f'"{c}/containerd.sock{m.group(1) or ""}"', t)
t = re.sub(r"(?m)^imports = \[.*\]$", "imports = []", t)
open(dst, "w").write(t)
PY
}

# start_containerd VERSION PG_SOCKET [keep-builtin]: sets CTRD_PID, CTRD_SOCK, CTR (a ctr
# command array).
start_containerd() {
  containerd_bindir "$1" >/dev/null || return 1
  mkdir -p "$WORK/containerd"
  containerd_config "$1" "$2" "${3:-}" && launch_containerd "$1"
}

# launch_containerd VERSION: starts containerd from the config already in
# $WORK/containerd/config.toml (containerd_config's, perhaps edited); sets what start_containerd sets.
launch_containerd() {
  local v=$1 bin; bin=$(containerd_bindir "$v") || return 1
  local c=$WORK/containerd; mkdir -p "$c"
  PATH="$bin:$PATH" "$bin/containerd" --config "$c/config.toml" >>"$c/log" 2>&1 &
  CTRD_PID=$!; PIDS+=($CTRD_PID)
  CTRD_SOCK=$c/containerd.sock
  CTR=("$bin/ctr" -a "$CTRD_SOCK")
  wait_for 30 "${CTR[@]}" version || { echo "containerd $v did not start:"; tail -50 "$c/log"; return 1; }
}

ctr_() { "${CTR[@]}" "$@"; }

# start_alone_containerd VERSION DIR: a second containerd of VERSION with no pullgate, its own
# overlayfs and the content policy the test runs under (CONTENT_POLICY), rooted in DIR: where a
# positive control shows an attack succeeding without pullgate. Sets ALONE (a ctr command array).
start_alone_containerd() {
  local v=$1 d=$2 bin cfg disabled; bin=$(containerd_bindir "$v") || return 1
  case $v in
    1.6|1.7) cfg=2; disabled='"io.containerd.grpc.v1.cri"' ;;
    *) cfg=3; disabled='"io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime"' ;;
  esac
  mkdir -p "$d"
  cat > "$d/config.toml" <<TOML
version = $cfg
root = "$d/root"
state = "$d/state"
disabled_plugins = [$disabled]
[grpc]
  address = "$d/containerd.sock"
[plugins."io.containerd.metadata.v1.bolt"]
  content_sharing_policy = "${CONTENT_POLICY:-isolated}"
TOML
  PATH="$bin:$PATH" "$bin/containerd" --config "$d/config.toml" >>"$d/log" 2>&1 &
  PIDS+=($!)
  ALONE=("$bin/ctr" -a "$d/containerd.sock")
  wait_for 30 "${ALONE[@]}" version || { echo "containerd $v alone did not start:"; tail -20 "$d/log"; return 1; }
}
# has_image NS REF: NS holds an image record named REF.
has_image() { ctr_ -n "$1" images ls -q | grep -qxF -- "$2"; }

# not CMD...: succeeds when CMD fails (for `check`, which runs a command, not a pipeline).
not() { ! "$@"; }

# Checks that something is absent, empty or counts 0 read a listing only after the command that
# listed worked: one that failed (containerd down, a wrong socket, a mistyped flag) lists nothing
# too, and an empty answer is not "none".
# listing CMD...: runs CMD, passing its output on; when CMD fails, also says so on stderr and
# fails with its status. Use: `l=$(listing CMD...) || return 1`, then look at $l.
listing() {
  "$@"; local rc=$?
  [ $rc -eq 0 ] || echo "$(shown 200 "$*") failed (rc=$rc)" >&2
  return $rc
}
# nlines TEXT: how many non-empty lines TEXT has (`wc -l <<<""` says 1).
nlines() { awk 'NF {n++} END {print n + 0}' <<<"$1"; }
# is_zero CMD...: CMD, which prints a count, succeeds and prints 0.
is_zero() { local n; n=$("$@") || return 1; [ "$n" = 0 ] || { echo "counted $n"; return 1; }; }
# lacks TEXT CMD...: CMD succeeds and no line of its output contains TEXT (a fixed string).
lacks() {
  local t=$1 l; shift
  l=$(listing "$@") || return 1
  if grep -qF -- "$t" <<<"$l"; then echo "listed: $(grep -F -- "$t" <<<"$l" | head -3 | paste -sd' ')"; return 1; fi
}
# no_image NS REF: NS's image listing works and names no image REF (`not has_image` passes when
# the listing fails).
no_image() {
  local l; l=$(listing ctr_ -n "$1" images ls -q) || return 1
  if grep -qxF -- "$2" <<<"$l"; then echo "$1 lists $2"; return 1; fi
}
# snapshot_count NS: how many (pullgate) snapshots containerd lists in NS; fails when ctr does.
snapshot_count() {
  local l; l=$(listing ctr_ -n "$1" snapshots --snapshotter pullgate ls) || return 1
  nlines "$(tail -n +2 <<<"$l")"
}
# ns_labels NS: NS's content and image listings and the info of each of its (pullgate)
# snapshots: every place containerd keeps NS's labels, for a search for secrets. Fails when a
# listing fails (an empty text holds no secret either); a snapshot removed since the listing
# ("not found") is skipped.
ns_labels() {
  local ns=$1 snaps k i
  listing ctr_ -n "$ns" content ls && listing ctr_ -n "$ns" images ls \
    && snaps=$(listing ctr_ -n "$ns" snapshots --snapshotter pullgate ls) || return 1
  for k in $(awk 'NR > 1 {print $1}' <<<"$snaps"); do
    if i=$(ctr_ -n "$ns" snapshots --snapshotter pullgate info "$k" 2>&1); then echo "$i"
    elif ! grep -q "not found" <<<"$i"; then echo "ctr snapshots info $k in $ns failed: $(shown 200 "$i")" >&2; return 1; fi
  done
}

# settle_gc NS: makes containerd collect garbage now and waits for it (deleting a lease with
# --sync does both). Called after a refused unpack in NS: it had adopted layers into NS under
# its lease, and containerd's unpacker trusts a chain it finds by Stat without leasing it, so a
# collection racing the next unpack in NS fails that unpack with "parent snapshot does not
# exist" (containerd's race, not the gate's; seen once in CI under 2.1).
settle_gc() {
  local ns=$1 id="settle-$RANDOM$RANDOM"
  ctr_ -n "$ns" leases create --id "$id" >/dev/null && ctr_ -n "$ns" leases delete --sync "$id" >/dev/null
}

# gc_all: settle_gc in every namespace: containerd collects garbage, and removes from pullgate
# the snapshots its own records no longer name (left by a request that failed midway).
gc_all() { local ns nss; nss=$(listing ctr_ namespaces ls -q) || return 1; for ns in $nss; do settle_gc "$ns" || return 1; done; }

# pg_grants NS: `pullgate grants -n NS` against this run's daemon ($PG).
pg_grants() { "$PG_BIN" grants --address "$PG/api.sock" -n "$1"; }

# grant_count NS: prints how many grants NS holds; fails (printing why on stderr) when
# `pullgate grants` fails or does not print its header: an empty answer is not "no grant".
grant_count() {
  local out rc; out=$(pg_grants "$1" 2>&1); rc=$?
  if [ $rc -ne 0 ] || [ "$(head -1 <<<"$out" | awk '{print $1}')" != NAMESPACE ]; then
    echo "pullgate grants -n $1 failed (rc=$rc): $(shown 300 "$out")" >&2; return 1
  fi
  echo $(($(wc -l <<<"$out") - 1))
}

# no_grants NS: `pullgate grants -n NS` succeeds, prints its header and lists no grant.
no_grants() { local n; n=$(grant_count "$1") && [ "$n" -eq 0 ]; }

# check_no_grants DESC NS: no_grants as a check, saying what it found when it fails.
check_no_grants() {
  local d=$1 n; n=$(grant_count "$2" 2>&1)
  if [ "$n" = 0 ]; then pass "$d"; else fail "$d (${n} grant(s))"; fi
}

# steal_blob NS DIGEST [OUT]: the digest-adoption attack: adopts a blob into NS by its digest
# alone (an empty write), pins it with a gc.root label and, with OUT, reads it into OUT.
# containerd's GC may collect the unreferenced blob between the ingest and the label (seen
# under 2.1), so the attacker simply tries again, as a real one would.
# Under the isolated content store the adoption must fail (a check, counted); the attack then
# goes on as if the bytes had leaked out of band (leak_blob): NS writes them in full, so every
# later check still asks whether pullgate refuses an attacker who holds the bytes.
steal_blob() {
  local ns=$1 d=$2 out=${3:-} try
  [ -f "$WORK/empty" ] || : > "$WORK/empty"   # a regular file: ctr's ingest seeks in its input
  if [ "${CONTENT_POLICY:-isolated}" = isolated ]; then
    # (A blob NS already holds, a base layer of its own image say, is not the attack's.)
    local listed rc; listed=$(ctr_ -n "$ns" content ls -q 2>&1); rc=$?
    [ $rc -eq 0 ] || { fail "steal_blob: ctr content ls -n $ns failed (rc=$rc): $(head -c 300 <<<"$listed")"; return 1; }
    # A blob in pullgate's public namespace (containerd 1.7+: shareable) is one an origin served
    # without credentials: every namespace may adopt it by digest, by design. Only such blobs
    # are exempt, and only when that namespace lists them.
    if ctr_ -n pullgate-public content ls -q 2>/dev/null | grep -xF "$d" >/dev/null; then
      pass "isolated store: $d is public (held in pullgate's public namespace): $ns may adopt it by digest"
    elif ! grep -qxF "$d" <<<"$listed"; then
      ctr_ -n "$ns" content ingest --expected-digest "$d" "steal-$d" <"$WORK/empty" >/dev/null 2>&1
      if ctr_ -n "$ns" content get "$d" >/dev/null 2>&1; then
        fail "isolated store: $ns adopted $d by its digest alone (not among the $(wc -l <<<"$listed") blob(s) it listed before; now: $(ctr_ -n "$ns" content ls 2>&1 | grep -F "$d" | head -c 300))"
        return 1
      fi
      pass "isolated store: $ns cannot adopt $d by its digest alone"
    fi
    # (As below, containerd's GC may take the unreferenced blob before the label: again.)
    for try in 1 2 3 4 5; do
      ctr_ -n "$ns" content ls -q 2>/dev/null | grep -xF "$d" >/dev/null || leak_blob "$ns" "$d" || return 1
      ctr_ -n "$ns" content label "$d" containerd.io/gc.root=stolen >/dev/null 2>&1 || continue
      [ -z "$out" ] && return 0
      ctr_ -n "$ns" content get "$d" >"$out" 2>/dev/null && return 0
    done
    return 1
  fi
  for try in 1 2 3 4 5; do
    ctr_ -n "$ns" content ingest --expected-digest "$d" "steal-$d" <"$WORK/empty" >/dev/null 2>&1
    ctr_ -n "$ns" content label "$d" containerd.io/gc.root=stolen >/dev/null 2>&1 || continue
    [ -z "$out" ] && return 0
    ctr_ -n "$ns" content get "$d" >"$out" 2>/dev/null && return 0
  done
  return 1
}

# leak_blob NS DIGEST: writes the blob's bytes into NS's content store in full, taken from this
# run's own copies (an OCI layout the test built, or a registry's storage): the attacker who
# got the bytes some other way.
leak_blob() {
  local ns=$1 d=$2 hex=${2#sha256:} f
  f=$(find "$WORK" \( -path "*/blobs/sha256/$hex" -o -path "*/blobs/sha256/${hex:0:2}/$hex/data" \) -type f -print -quit 2>/dev/null)
  [ -n "$f" ] || { echo "leak_blob: no copy of $d under $WORK" >&2; return 1; }
  ctr_ -n "$ns" content ingest --expected-digest "$d" "leak-$d" <"$f" >/dev/null 2>&1
}

# chain_of DIFFID...: the chainID of layers with these diffIDs, base first.
chain_of() {
  local c=$1 d; shift
  for d in "$@"; do c="sha256:$(printf '%s %s' "$c" "$d" | sha256sum | cut -d' ' -f1)"; done
  echo "$c"
}

# image_top_chain NS IMAGE: the chainID of IMAGE's top layer, from the manifest and config that
# containerd holds for it in NS (linux/amd64 of an index).
image_top_chain() {
  local ns=$1 im=$2 dig json
  dig=$(ctr_ -n "$ns" images ls | awk -v n="$im" 'NR>1 && $1==n {print $3}')
  [ -n "$dig" ] || return 1
  json=$(ctr_ -n "$ns" content get "$dig") || return 1
  if grep -q '"manifests"' <<<"$json"; then
    dig=$(python3 -c 'import json,sys; m=json.load(sys.stdin)["manifests"]; print(next(x["digest"] for x in m if x.get("platform",{}).get("architecture","amd64")=="amd64"))' <<<"$json") || return 1
    json=$(ctr_ -n "$ns" content get "$dig") || return 1
  fi
  dig=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["config"]["digest"])' <<<"$json") || return 1
  # shellcheck disable=SC2046
  chain_of $(ctr_ -n "$ns" content get "$dig" | python3 -c 'import json,sys; print(" ".join(json.load(sys.stdin)["rootfs"]["diff_ids"]))')
}

# image_unpacked NS IMAGE: containerd says IMAGE is complete and unpacked into pullgate in NS
# (`ctr images check`: STATUS "complete (n/n)", UNPACKED true), and the snapshot of its top
# chain is committed there (a Stat through containerd, in NS). Prints what it found on failure.
image_unpacked() {
  local ns=$1 im=$2 line chain
  line=$(ctr_ -n "$ns" images check --snapshotter pullgate "name==$im" 2>&1 | awk -v n="$im" '$1==n')
  if ! [[ "$line" =~ (^|[[:space:]])complete\ \(([0-9]+)/([0-9]+)\) ]] || [ "${BASH_REMATCH[2]}" != "${BASH_REMATCH[3]}" ] \
     || [ "$(awk '{print $NF}' <<<"$line")" != true ]; then
    echo "images check: ${line:-no line for $im}"; return 1
  fi
  chain=$(image_top_chain "$ns" "$im") || { echo "no top chain for $im"; return 1; }
  ctr_ -n "$ns" snapshots --snapshotter pullgate info "$chain" 2>&1 | grep '"Kind": "Committed"' >/dev/null \
    || { echo "top chain $chain is not a committed snapshot in $ns"; return 1; }
}

# conformance_bin: containerd's snapshotter conformance binary (tests/conformance), built once
# (as scripts/test.sh builds it); prints its path.
conformance_bin() {
  local c=$REPO/tests/conformance/conformance.test
  [ -x "$c" ] || (cd "$REPO/tests/conformance" && GOPATH=/usr/share/gocode GO111MODULE=off GOPROXY=off GOFLAGS= go test -c -o conformance.test .) >&2
  echo "$c"
}
# check_existing WHEN: containerd's conformance suite (TestExisting) passes against this run's
# daemon and its root ($PG) as they are now; WHEN says when ("after the crashes").
check_existing() {
  local what=$1 conf out rc npass; conf=$(conformance_bin)
  out=$("$conf" -test.root -test.v -test.run '^TestExisting$' -existing "$PG/snapshotter.sock" 2>&1); rc=$?
  npass=$(grep -cE '^\s*--- PASS: TestExisting/suite/' <<<"$out")
  if [ $rc -eq 0 ] && [ "$npass" -ge 20 ]; then pass "containerd's conformance suite passes against the daemon and its root $what ($npass subtests)"
  else fail "conformance $what: exit $rc, $npass passed: $(grep -E -- '--- FAIL|Error|\.go:[0-9]+:' <<<"$out" | head -20)"; fi
}
# check_consistency WHEN: pullgate agrees with containerd about every snapshot containerd lists
# in any namespace: kind, parent, directories (TestConsistency).
check_consistency() {
  local what=$1 conf out rc; conf=$(conformance_bin)
  out=$("$conf" -test.v -test.run '^TestConsistency$' -existing "$PG/snapshotter.sock" -containerd "$CTRD_SOCK" 2>&1); rc=$?
  if [ $rc -eq 0 ]; then pass "pullgate agrees with containerd on every snapshot $what: kind, parent, directories ($(grep -oE '[0-9]+ snapshots in containerd.s view across [0-9]+ namespaces' <<<"$out"))"
  else fail "consistency with containerd $what: $(grep -vE '^(=== RUN|PASS|FAIL$)' <<<"$out" | head -20)"; fi
}

# check_containerd_version V: the containerd this test started is the version it is named after.
check_containerd_version() {
  local v=$1 got
  got=$(ctr_ version 2>/dev/null | awk '/^Server:/ {s=1} s && $1=="Version:" {print $2; exit}')
  case $got in
    "$v".*) pass "the running containerd is $got (the test is for $v)" ;;
    *) fail "the running containerd is '${got:-unknown}', not $v" ;;
  esac
}

summary() {
  local f
  if [ "$FAILS" -gt 0 ]; then
    printf '\nfailed:\n'
    for f in "${FAILED_CHECKS[@]}"; do printf '  %s\n' "$f"; done
  fi
  if [ "$NAS" -gt 0 ]; then
    printf '\nnot applicable here (not counted):\n'
    for f in "${NA_CHECKS[@]}"; do printf '  %s\n' "$f"; done
  fi
  printf '\n%s: %d passed, %d failed%s\n' "${1:-e2e}" "$PASSES" "$FAILS" "$([ "$NAS" -gt 0 ] && echo ", $NAS not applicable")"
  [ "$FAILS" -eq 0 ]
}
