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
fail() { FAILS=$((FAILS + 1)); printf '  FAIL %s\n' "$*"; }
# check DESC CMD...: passes when CMD succeeds.
check() { local d=$1; shift; if "$@" >/dev/null 2>&1; then pass "$d"; else fail "$d"; fi; }
# check_out DESC WANT CMD...: passes when CMD succeeds and its output contains WANT.
check_out() {
  local d=$1 want=$2; shift 2
  local out; out=$("$@" 2>&1); local rc=$?
  if [ $rc -eq 0 ] && grep -qF -- "$want" <<<"$out"; then pass "$d"; else fail "$d (rc=$rc, want '$want', got: $(head -c 600 <<<"$out"))"; fi
}
# check_has DESC WANT CMD...: passes when CMD's output contains WANT, whatever its exit code.
check_has() {
  local d=$1 want=$2; shift 2
  local out; out=$("$@" 2>&1)
  if grep -qF -- "$want" <<<"$out"; then pass "$d"; else fail "$d (want '$want', got: $(head -c 600 <<<"$out"))"; fi
}
# check_err DESC PATTERN CMD...: passes when CMD fails and its output matches the ERE PATTERN.
check_err() {
  local d=$1 pat=$2; shift 2
  local out; out=$("$@" 2>&1); local rc=$?
  if [ $rc -ne 0 ] && grep -qiE -- "$pat" <<<"$out"; then pass "$d"; else fail "$d (rc=$rc, want /$pat/, got: $(head -c 600 <<<"$out"))"; fi
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_for() { # wait_for SECONDS CMD...
  local t=$1; shift; local end=$((SECONDS + t))
  until "$@" >/dev/null 2>&1; do [ $SECONDS -ge $end ] && return 1; sleep 0.1; done
}

cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  sleep 0.5
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  # containerd shims and their containers
  pkill -9 -f "containerd-shim-runc-v2 .*-address $WORK" 2>/dev/null
  grep -F " $WORK/" /proc/self/mounts | awk '{print $2}' | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
  if [ -z "${KEEP_WORK:-}" ]; then rm -rf "$WORK"; else echo "kept $WORK"; fi
}

# registry_config DIR PORT AUTH_YAML: a distribution config with an access log.
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
  addr: 127.0.0.1:$2
$3
YML
}

# start_registry NAME [htpasswd USER PASS [USER PASS...]]: anonymous (or Basic-auth) registry.
# Sets REG_<NAME>=127.0.0.1:PORT.
start_registry() {
  local name=$1 mode=${2:-} port; port=$(free_port)
  local dir=$WORK/registry-$name; mkdir -p "$dir/data"
  local auth=""
  if [ "$mode" = htpasswd ]; then
    htpasswd -Bbc "$dir/htpasswd" "$3" "$4" >/dev/null 2>&1
    local extra=("${@:5}") i
    for ((i = 0; i + 1 < ${#extra[@]}; i += 2)); do htpasswd -Bb "$dir/htpasswd" "${extra[i]}" "${extra[i+1]}" >/dev/null 2>&1; done
    auth="auth:
  htpasswd:
    realm: pullgate-test
    path: $dir/htpasswd"
  fi
  registry_config "$dir" "$port" "$auth"
  docker-registry serve "$dir/config.yml" >"$dir/log" 2>&1 &
  PIDS+=($!)
  wait_for 20 curl -sf -o /dev/null -w '' "http://127.0.0.1:$port/v2/" || wait_for 1 curl -s "http://127.0.0.1:$port/v2/" \
    || { echo "registry $name did not start:"; cat "$dir/log"; return 1; }
  printf -v "REG_$name" '%s' "127.0.0.1:$port"
}

# start_token_registry NAME ACL_JSON: a registry with token auth and its token server.
# Sets REG_<NAME>=127.0.0.1:PORT; the token server logs to $WORK/registry-NAME/token.log.
start_token_registry() {
  local name=$1 acl=$2 port tport; port=$(free_port); tport=$(free_port)
  local dir=$WORK/registry-$name; mkdir -p "$dir/data"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$dir/key.pem" -out "$dir/cert.pem" -days 2 \
    -subj "/CN=pullgate-test-token" >/dev/null 2>&1
  cp "$acl" "$dir/acl.json"
  /usr/bin/python3 "$REPO/tests/tokenserver.py" --port "$tport" --key "$dir/key.pem" --cert "$dir/cert.pem" \
    --config "$dir/acl.json" --log "$dir/token.log" >"$dir/token.out" 2>&1 &
  PIDS+=($!)
  registry_config "$dir" "$port" "auth:
  token:
    realm: http://127.0.0.1:$tport/token
    service: pullgate-test-registry
    issuer: pullgate-test-issuer
    rootcertbundle: $dir/cert.pem"
  docker-registry serve "$dir/config.yml" >"$dir/log" 2>&1 &
  PIDS+=($!)
  wait_for 20 bash -c "curl -s -o /dev/null http://127.0.0.1:$port/v2/ && curl -s -o /dev/null 'http://127.0.0.1:$tport/token?service=x'" \
    || { echo "token registry $name did not start:"; cat "$dir/log" "$dir/token.out"; return 1; }
  printf -v "REG_$name" '%s' "127.0.0.1:$port"
}

# push_image LAYOUT_DIR TAG HOST/REPO:TAG [USER:PASS] [--all]: with --all the layout's index
# is pushed too, so the tag names an index (platform selection is exercised).
push_image() {
  local creds=() all=()
  [ -n "${4:-}" ] && creds=(--dest-creds "$4")
  [ "${5:-}" = --all ] && all=(--all)
  skopeo copy --quiet "${all[@]}" --dest-tls-verify=false "${creds[@]}" "oci:$1:$2" "docker://$3" >/dev/null
}

# containerd_bindir VERSION
containerd_bindir() {
  case $1 in
    1.6) echo /usr/bin ;;
    1.7) echo "$DEPS/containerd-1.7/usr/bin" ;;
    2.1) echo "$DEPS/containerd-2.1/usr/bin" ;;
    *) echo "unknown containerd version $1" >&2; return 1 ;;
  esac
}

# pullgate_config DIR: writes DIR/config.toml for a pullgate rooted in DIR.
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
}

# start_pullgate DIR: (re)starts pullgate serving from DIR; sets PG_PID.
start_pullgate() {
  local d=$1; [ -f "$d/config.toml" ] || pullgate_config "$d"
  "$PG_BIN" serve --config "$d/config.toml" >>"$d/log" 2>&1 &
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

# containerd_config VERSION PG_SOCKET [keep-builtin]: the operator's fragment from plugin/,
# pointed at this run's sockets; CRI disabled (not under test here). With keep-builtin the
# built-in snapshotters stay enabled (benchmarks compare against overlayfs).
containerd_config() {
  local v=$1 sock=$2 keep=${3:-} frag cri
  case $v in
    1.6|1.7) frag=$REPO/plugin/containerd-1.x.toml; cri='"io.containerd.grpc.v1.cri"' ;;
    2.1) frag=$REPO/plugin/containerd-2.x.toml; cri='"io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime"' ;;
  esac
  local c=$WORK/containerd
  sed -e "s#/run/pullgate/snapshotter.sock#$sock#" \
      -e "/^version = /a root = \"$c/root\"\nstate = \"$c/state\"" \
      "$frag" > "$c/config.toml.tmp"
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
}

# start_containerd VERSION PG_SOCKET [keep-builtin]: sets CTRD_PID, CTRD_SOCK, CTR (a ctr
# command array).
start_containerd() {
  local v=$1 bin; bin=$(containerd_bindir "$v") || return 1
  local c=$WORK/containerd; mkdir -p "$c"
  containerd_config "$v" "$2" "${3:-}"
  PATH="$bin:$PATH" "$bin/containerd" --config "$c/config.toml" >>"$c/log" 2>&1 &
  CTRD_PID=$!; PIDS+=($CTRD_PID)
  CTRD_SOCK=$c/containerd.sock
  CTR=("$bin/ctr" -a "$CTRD_SOCK")
  wait_for 30 "${CTR[@]}" version || { echo "containerd $v did not start:"; tail -50 "$c/log"; return 1; }
}

ctr_() { "${CTR[@]}" "$@"; }

# settle_gc NS: makes containerd collect garbage now and waits for it (deleting a lease with
# --sync does both). Called after a refused unpack in NS: it had adopted layers into NS under
# its lease, and containerd's unpacker trusts a chain it finds by Stat without leasing it, so a
# collection racing the next unpack in NS fails that unpack with "parent snapshot does not
# exist" (containerd's race, not the gate's; seen once in CI under 2.1).
settle_gc() {
  local ns=$1 id="settle-$RANDOM$RANDOM"
  ctr_ -n "$ns" leases create --id "$id" >/dev/null && ctr_ -n "$ns" leases delete --sync "$id" >/dev/null
}

summary() {
  printf '\n%s: %d passed, %d failed\n' "${1:-e2e}" "$PASSES" "$FAILS"
  [ "$FAILS" -eq 0 ]
}
