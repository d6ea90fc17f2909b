#!/usr/bin/env bash
# Writes a ledger fixture of a pullgate release for tests/e2e_upgrade.sh: the release's daemon
# (PG_BIN, the `pullgate` binary beside its `pullgated`) is run through one scenario on a real
# containerd 2.1 and real registries, then stopped cleanly, and OUT receives its root's
# metadata.redb (gzipped) and what that release said about it:
#   grants.json       `pullgate grants --all -o json`
#   checks.txt        `pullgate check` for every namespace, principal and reference of the
#                     scenario (allowed / denied: reason), one line each
#   inspect-*.json    `pullgate inspect -o json` of each image (manifests, layers, blob origins,
#                     pairings as that release recorded them)
#   release           the release's `pullgate --version`
# The scenario: a private image (htpasswd) pulled in namespace A with a credential and a second
# tag sharing its base layers; B verified for the first only; C verified for one pod (principal)
# only; a public image (an anonymous registry) pulled in P; D verified and then revoked; X never
# authenticated. The registries' ports are in the references, which the checks repeat; nothing
# of the scenario needs to run again to read the fixture.
# Usage: PG_BIN=/path/to/old/pullgate tests/mkledgerfixture.sh OUT
source "$(dirname "$0")/lib.sh"
OUT=${1:?usage: PG_BIN=RELEASE/pullgate tests/mkledgerfixture.sh OUT}
trap cleanup EXIT
PW=fixture-Alice-7q2m
mk() { python3 "$REPO/tests/mkimage.py" "$@" >/dev/null; }
mk "$WORK/app" --tag v1 --message "fixture app v1" --extra-layers 2 --layer-mb 0.1 --seed 71
mk "$WORK/app2" --tag v2 --message "fixture app v2" --extra-layers 2 --layer-mb 0.1 --seed 71
mk "$WORK/pub" --tag v1 --message "fixture public" --extra-layers 1 --layer-mb 0.1 --seed 72
start_registry p htpasswd alice "$PW" || exit 1
start_registry o || exit 1
APP1=$REG_p/private/app:v1 APP2=$REG_p/private/app:v2 PUB=$REG_o/public/pub:v1
push_image "$WORK/app" v1 "$APP1" "alice:$PW" && push_image "$WORK/app2" v2 "$APP2" "alice:$PW" && push_image "$WORK/pub" v1 "$PUB" || { echo "push failed"; exit 1; }
PG=$WORK/pullgate
pullgate_config "$PG"
start_pullgate "$PG" || exit 1
start_containerd 2.1 "$PG/snapshotter.sock" || exit 1
pg() { "$PG_BIN" --address "$PG/api.sock" "$@"; }
set -e
pg pull -q -n A --plain-http --user "alice:$PW" "$APP1" >/dev/null
pg pull -q -n A --plain-http --user "alice:$PW" "$APP2" >/dev/null
pg verify -n B --plain-http --user "alice:$PW" "$APP1" >/dev/null
pg verify -n C --plain-http --principal pod-c1 --user "alice:$PW" "$APP2" >/dev/null
pg pull -q -n P --plain-http "$PUB" >/dev/null
pg verify -n D --plain-http --user "alice:$PW" "$APP1" >/dev/null
pg revoke -n D "$APP1" >/dev/null
set +e
digest=$(pg inspect -o json "$APP1" | jq -r '.manifests[0].digest // .digest // empty')
kill -TERM "$PG_PID"; wait "$PG_PID" 2>/dev/null
# Read back with the daemon alone (no containerd, no registry), as tests/e2e_upgrade.sh does.
kill "$CTRD_PID" 2>/dev/null; wait "$CTRD_PID" 2>/dev/null
start_pullgate "$PG" || exit 1
mkdir -p "$OUT"
pg grants --all -o json > "$OUT/grants.json"
refs=("$APP1" "$APP2" "$PUB")
[ -n "$digest" ] && refs+=("$REG_p/private/app@$digest")
for ns in A B C D P X; do
  for pr in "" pod-c1 pod-other; do
    for r in "${refs[@]}"; do
      printf '%s\t%s\t%s\t%s\n' "$ns" "${pr:--}" "$r" "$(pg check -n "$ns" --principal "$pr" "$r" 2>&1)"
    done
  done
done > "$OUT/checks.txt"
pg inspect -o json "$APP1" > "$OUT/inspect-app1.json"
pg inspect -o json "$APP2" > "$OUT/inspect-app2.json"
pg inspect -o json "$PUB" > "$OUT/inspect-pub.json"
"$PG_BIN" --version > "$OUT/release"
kill -TERM "$PG_PID"; wait "$PG_PID" 2>/dev/null
gzip -n -9 -c "$PG/root/metadata.redb" > "$OUT/metadata.redb.gz"
ls -la "$PG/root" "$OUT"
