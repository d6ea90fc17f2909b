# containerd with its CRI plugin enabled, for pullgate's Kubernetes (CRI) tests (sourced, bash,
# after tests/lib.sh). The config is lib.sh's (the operator's fragment from plugin/: pullgate is
# the only snapshotter) with CRI left on and set up for these machines:
#   - CRI's snapshotter is pullgate (the fragment's own setting);
#   - restrict_oom_score_adj = true: the machines lack CAP_SYS_RESOURCE, and runc cannot give
#     the sandbox its oom_score_adj of -998 otherwise;
#   - NRI disabled on 1.7/2.1, or it listens on /var/run/nri (shared by every containerd);
#   - the sandbox (pause) image from a local registry, pulled by CRI itself when first needed;
#   - registry config_path = hosts.toml dirs (write_hosts_toml) for plain-http local registries;
#   - stream server on 127.0.0.1 port 0 (several containerds may run at once);
#   - CNI bin/conf dirs: empty dirs under $WORK (host-network pods need no CNI; the pod
#     network stays "not ready", which does not stop host-network pods).
# Pods must be host-network pods with an empty hostname, as kubelet sends them (examples/cri.rs
# --pod builds one); the cri client talks to containerd's own socket ($CTRD_SOCK).

# write_hosts_toml HOSTS_DIR HOST:PORT [NAME]: HOSTS_DIR/NAME/hosts.toml (NAME: HOST:PORT by
# default) sending the registry NAME to the plain-http registry at HOST:PORT (to its https
# server with this run's CA, when HOST:PORT is a TLS registry: use_tls_registries).
# The [host] table is needed: containerd 1.6 rejects a hosts.toml without one ("failed to decode
# hosts.toml: invalid `host` tree") and silently falls back to its default hosts.
write_hosts_toml() {
  local name=${3:-$2}
  if [ "$name" = "$2" ] && [ -f "$REG_HOSTS/$2/hosts.toml" ]; then
    tls_hosts_toml "$1" "$2"   # a TLS registry of this run (use_tls_registries)
    return
  fi
  mkdir -p "$1/$name"
  cat > "$1/$name/hosts.toml" <<TOML
server = "http://$2"

[host."http://$2"]
  capabilities = ["pull", "resolve", "push"]
TOML
}

# containerd_cri_config VERSION PG_SOCKET SANDBOX_IMAGE HOSTS_DIR: writes $WORK/containerd/config.toml.
containerd_cri_config() {
  local v=$1 sock=$2 sandbox=$3 hosts=$4 frag
  case $v in
    1.6|1.7) frag=1.x ;;
    2.1|2.4) frag=2.x ;;
    *) echo "unknown containerd version $v" >&2; return 1 ;;
  esac
  local c=$WORK/containerd
  mkdir -p "$c" "$WORK/cni/bin" "$WORK/cni/conf" "$hosts"
  fragment "$frag" "$sock" > "$c/config.toml"
  cat >> "$c/config.toml" <<TOML

[grpc]
  address = "$c/containerd.sock"
TOML
  case $v in
    1.6|1.7) cat >> "$c/config.toml" <<TOML

# CRI (version 2 config: one plugin, io.containerd.grpc.v1.cri)
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$sandbox"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "$WORK/cni/bin"
  conf_dir = "$WORK/cni/conf"

[plugins."io.containerd.grpc.v1.cri".registry]
  config_path = "$hosts"
TOML
      ;;
    2.1|2.4) cat >> "$c/config.toml" <<TOML

# CRI (version 3 config: split into images, runtime and the gRPC server)
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "$sandbox"

[plugins."io.containerd.cri.v1.images".registry]
  config_path = "$hosts"

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true

# runc 1.2 (scripts/setup.sh builds it): user-namespace pods need it.
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  BinaryName = "$DEPS/runc-1.2.6/runc"

[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = ["$WORK/cni/bin"]
  conf_dir = "$WORK/cni/conf"

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
TOML
      ;;
  esac
  if [ "$v" != 1.6 ]; then   # 1.6 has no NRI
    cat >> "$c/config.toml" <<TOML

[plugins."io.containerd.nri.v1.nri"]
  disable = true
TOML
  fi
}

# start_containerd_cri VERSION PG_SOCKET SANDBOX_IMAGE HOSTS_DIR: like start_containerd (sets
# CTRD_PID, CTRD_SOCK, CTR), with CRI on; waits until CRI answers on CTRD_SOCK (CRI_BIN, the
# examples/cri client, default target/release/examples/cri; unset CRI_BIN=: skip that wait).
CRI_BIN=${CRI_BIN-$REPO/target/release/examples/cri}
start_containerd_cri() {
  local v=$1 c=$WORK/containerd
  mkdir -p "$c"
  containerd_cri_config "$v" "$2" "$3" "$4" && launch_containerd "$v" || return 1
  if [ -n "$CRI_BIN" ]; then
    wait_for 30 "$CRI_BIN" --socket "$CTRD_SOCK" --timeout 5 Version \
      || { echo "containerd $v: CRI does not answer:"; grep -iE 'level=(error|fatal|warn)' "$c/log" | tail -20; return 1; }
  fi
}

# pullgate_cri_config DIR HOSTS_DIR: pullgate's config (lib.sh's pullgate_config) with the CRI
# front on at DIR/cri.sock and the registries as HOSTS_DIR says; append more tables after it.
pullgate_cri_config() {
  pullgate_config "$1" "$2"
  cat >> "$1/config.toml" <<TOML

[cri]
enable = true
socket = "$1/cri.sock"
TOML
}

# start_cri_stack VERSION SANDBOX_IMAGE REGISTRY...: the stack a CRI test runs on: hosts.toml
# for each plain-http REGISTRY under HOSTS ($WORK/hosts), pullgate with its CRI front in PG
# ($WORK/pg; pullgate_cri_config, then start_pullgate), and containerd VERSION with its CRI
# plugin on pullgate's snapshotter (start_containerd_cri), checked to be that version.
start_cri_stack() {
  local v=$1 pause=$2 r; shift 2
  HOSTS=$WORK/hosts
  for r in "$@"; do write_hosts_toml "$HOSTS" "$r"; done
  PG=$WORK/pg
  pullgate_cri_config "$PG" "$HOSTS"
  start_pullgate "$PG" || return 1
  start_containerd_cri "$v" "$PG/snapshotter.sock" "$pause" "$HOSTS" || return 1
  check_containerd_version "$v"
}

# cri ARGS...: the CRI client against this run's containerd.
cri() { "$CRI_BIN" --socket "$CTRD_SOCK" "$@"; }

# start_baseline_containerd VERSION DIR SANDBOX_IMAGE HOSTS_DIR: containerd VERSION alone, the
# reference a pullgate run is compared with: no proxy plugin, CRI on its built-in overlayfs (the
# default snapshotter), every other CRI setting as containerd_cri_config writes it (runtime,
# registries from HOSTS_DIR, $WORK/cni's network); its root, state, socket and log under
# DIR/containerd. Sets BASE_PID, BASE_SOCK and BASE_CTR (a ctr command array).
start_baseline_containerd() {
  local v=$1 d=$2 bin; bin=$(containerd_bindir "$v") || return 1
  mkdir -p "$d" "$WORK/cni"
  ln -sfn "$WORK/cni" "$d/cni"
  # containerd_cri_config in a subshell, rooted in DIR, with the fragment (pullgate's
  # registration) reduced to the config version and containerd's own root and state.
  ( WORK=$d
    fragment() { printf 'version = %s\nroot = "%s"\nstate = "%s"\n' "$([ "$1" = 1.x ] && echo 2 || echo 3)" "$WORK/containerd/root" "$WORK/containerd/state"; }
    containerd_cri_config "$v" "" "$3" "$4" ) || return 1
  PATH="$bin:$PATH" "$bin/containerd" --config "$d/containerd/config.toml" >>"$d/containerd/log" 2>&1 &
  BASE_PID=$!; PIDS+=($BASE_PID)
  BASE_SOCK=$d/containerd/containerd.sock
  BASE_CTR=("$bin/ctr" -a "$BASE_SOCK")
  wait_for 30 "${BASE_CTR[@]}" version || { echo "baseline containerd $v did not start:"; tail -50 "$d/containerd/log"; return 1; }
}
