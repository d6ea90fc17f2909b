#!/usr/bin/env bash
# Upgrade test. A ledger the previous release wrote (tests/fixtures/ledger-0.1.0: pullgate
# 0.1.0 ran tests/mkledgerfixture.sh's scenario on containerd and real registries, then said
# what its ledger held) is opened by this pullgate:
#   - its grants are the same, field for field (`pullgate grants --all -o json`);
#   - every decision is the same: `pullgate check` for each namespace, principal and reference
#     of the scenario (allowed where the release allowed, denied where it denied);
#   - what `pullgate inspect -o json` tells of each image is the same (manifests, configs,
#     layers and their blobs, public flags, the origins that served each blob, names, grants);
#   - pullgate says it upgraded the ledger (from which format and release), once: a restart
#     finds it in its own format and says nothing, and changes nothing of the above.
# Then the other way: a ledger in a format newer than this pullgate's (stamped by
# examples/ledgerformat, standing in for a newer release) is refused at start, the message
# naming both versions and both formats, and the file is left byte for byte as it was.
# Needs no containerd and no registry: decisions and grants are the ledger's.
# Usage: tests/e2e_upgrade.sh
source "$(dirname "$0")/lib.sh"
trap cleanup EXIT
FIX=${LEDGER_FIXTURE:-$REPO/tests/fixtures/ledger-0.1.0}
LEDGERFORMAT=${LEDGERFORMAT:-$REPO/target/release/examples/ledgerformat}
ours=$("$PG_BIN" --version | awk '{print $2}')
log "upgrade from $(cat "$FIX/release") to pullgate $ours"
[ -x "$LEDGERFORMAT" ] || { fail "examples/ledgerformat is not built at $LEDGERFORMAT"; summary "e2e upgrade"; exit 1; }
PG=$WORK/pullgate
pullgate_config "$PG"
mkdir -p "$PG/root" && chmod 700 "$PG/root"
gunzip -c "$FIX/metadata.redb.gz" > "$PG/root/metadata.redb"
check "the fixture is an unstamped ledger of 0.1.0 ($("$LEDGERFORMAT" "$PG/root/metadata.redb" 2>&1))" test "$("$LEDGERFORMAT" "$PG/root/metadata.redb")" = "1 0.1.0"
start_pullgate "$PG" || { fail "pullgate $ours did not start on the 0.1.0 ledger"; summary "e2e upgrade"; exit 1; }
pass "pullgate $ours started on the 0.1.0 ledger"
pg() { "$PG_BIN" --address "$PG/api.sock" "$@"; }

# compare_all LABEL: the fixture's grants, decisions and inspections against this pullgate's.
compare_all() {
  local label=$1 got want
  got=$(pg grants --all -o json | jq -S 'sort_by(.namespace, .principal, .origin, .manifest)') && want=$(jq -S 'sort_by(.namespace, .principal, .origin, .manifest)' "$FIX/grants.json")
  check "$label: the grants are the release's ($(jq length <<<"$want") grants)" test -n "$got" -a "$got" = "$want" -a "$(jq length <<<"$want")" -gt 3
  local n=0 same=0 reasons=0 ns pr ref said now
  while IFS=$'\t' read -r ns pr ref said; do
    n=$((n + 1))
    [ "$pr" = - ] && pr=
    now=$(pg check -n "$ns" --principal "$pr" "$ref" 2>&1)
    if [ "${now%%:*}" = "${said%%:*}" ]; then same=$((same + 1)); else echo "    $ns ${pr:--} $ref: the release said '$said', now '$now'"; fi
    [ "$now" = "$said" ] && reasons=$((reasons + 1))
  done < "$FIX/checks.txt"
  local allowed; allowed=$(grep -c $'\tallowed$' "$FIX/checks.txt")
  check "$label: every decision is the release's ($same of $n the same; $allowed allowed, $((n - allowed)) denied)" test "$n" -eq 72 -a "$same" -eq "$n" -a "$allowed" -gt 20 -a "$allowed" -lt "$n"
  echo "    $reasons of $n with the release's words"
  local f
  for f in app1 app2 pub; do
    local proj='[.manifests[] | {digest, config: .config.digest, config_by: .config.served_by,
      layers: [.layers[] | {blob, diff_id, public, served_by}], names, origins, grants}]'
    want=$(jq -S "$proj" "$FIX/inspect-$f.json")
    got=$(pg inspect -o json "$(reference_of "$f")" | jq -S "$proj")
    check "$label: inspect $f says what the release recorded ($(jq '[.[].layers[]] | length' <<<"$want") layers)" test -n "$got" -a "$got" = "$want"
  done
}
# reference_of app1|app2|pub: the fixture's reference of that image (the checks' third column).
reference_of() {
  case $1 in
    app1) awk -F'\t' '$3 ~ /\/private\/app:v1$/ {print $3; exit}' "$FIX/checks.txt" ;;
    app2) awk -F'\t' '$3 ~ /\/private\/app:v2$/ {print $3; exit}' "$FIX/checks.txt" ;;
    pub) awk -F'\t' '$3 ~ /\/public\/pub:v1$/ {print $3; exit}' "$FIX/checks.txt" ;;
  esac
}

log "the 0.1.0 ledger, opened by $ours"
upgraded="ledger opened by another version: format 1 (last opened by pullgate 0.1.0) is now format 2 (pullgate $ours)"
check "pullgate says it upgraded the ledger: $upgraded" grep -qF "$upgraded" "$PG/log"
compare_all "after the upgrade"

log "restarted on its own format"
kill -TERM "$PG_PID"; wait "$PG_PID"; rc=$?
check "pullgate stopped on SIGTERM (exit $rc)" test "$rc" -eq 0
check_out "the ledger is now format 2, last opened by $ours" "2 $ours" "$LEDGERFORMAT" "$PG/root/metadata.redb"
start_pullgate "$PG" || fail "pullgate did not start again"
check "no second upgrade is reported ($(grep -cF 'ledger opened by another version' "$PG/log") in the log)" test "$(grep -cF 'ledger opened by another version' "$PG/log")" -eq 1
compare_all "after a restart"

log "a ledger newer than this pullgate"
kill -TERM "$PG_PID"; wait "$PG_PID"
# The copy docs/install.md has an operator keep before an upgrade.
cp -p "$PG/root/metadata.redb" "$PG/root/metadata.redb.before-upgrade"
"$LEDGERFORMAT" "$PG/root/metadata.redb" --set 3 9.1.0 || fail "stamp the ledger as a newer release would"
before=$(sha256sum < "$PG/root/metadata.redb")
: > "$PG/log"
timeout 30 "$PG_BIN" serve --config "$PG/config.toml" > "$PG/log" 2>&1; rc=$?
check "pullgate refuses to start (exit $rc)" test "$rc" -ne 0 -a "$rc" -ne 124
want="ledger format 3 (last opened by pullgate 9.1.0); this is pullgate $ours, which reads formats up to 2"
check "it names both versions and formats: $want" grep -qF "$want" "$PG/log"
check "and says nothing was changed" grep -qF "Nothing was changed" "$PG/log"
echo "    $(grep -F "$want" "$PG/log" | head -n1 | cut -c1-400)"
check "the ledger is byte for byte as it was" test "$(sha256sum < "$PG/root/metadata.redb")" = "$before"
check "no socket was left listening" not test -S "$PG/snapshotter.sock"
check_out "its stamp is still the newer release's" "3 9.1.0" "$LEDGERFORMAT" "$PG/root/metadata.redb"

log "the copy kept before the upgrade put back"
cp -p "$PG/root/metadata.redb.before-upgrade" "$PG/root/metadata.redb"
start_pullgate "$PG" || fail "pullgate did not start on the copy"
compare_all "on the copy"

summary "e2e upgrade"
