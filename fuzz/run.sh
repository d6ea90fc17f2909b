#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (default 60 s each). Not part of CI.
# Needs cargo-fuzz (`cargo install cargo-fuzz`); on a stable toolchain RUSTC_BOOTSTRAP=1 lets it
# use the sanitizer flags it needs.
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:-60}
export RUSTC_BOOTSTRAP=${RUSTC_BOOTSTRAP:-1}
for t in reference www_authenticate manifest hosts_toml filter diffid; do
  echo "== $t ($secs s)"
  cargo fuzz run "$t" -- -max_total_time="$secs" -max_len=4096
done
