#!/usr/bin/env bash
# End-to-end: operating pullgate on a real containerd of the given version, through
# the real binary: the Prometheus endpoint scraped after real work (a pull with credentials, a
# `ctr run` the gate refuses, a verify, a run it allows), the JSON log format, `inspect -o json`,
# `--user USER` prompting on a terminal, and the progress display of `pull` under a
# pseudo-terminal (and its absence when not on one). Usage: tests/e2e_ops.sh VERSION
source "$(dirname "$0")/lib.sh"
V=${1:?usage: e2e_ops.sh 1.6|1.7|2.1|2.4}
trap cleanup EXIT
PW=alice-Ops-Secret-5t9w

log "containerd $V (operations): setup"
python3 "$REPO/tests/mkimage.py" "$WORK/priv" --tag v1 --message "private ops app" --extra-layers 2 --layer-mb 3 --seed 61 >/dev/null
# The registry serves TLS (use_tls_registries): a second namespace's pull copies every blob from
# the node only where pullgate verified the endpoint.
use_tls_registries || exit 1
start_registry h htpasswd alice "$PW" || exit 1
IMG=$REG_h/private/app:v1
python3 "$REPO/tests/mkimage.py" "$WORK/big" --tag v1 --message "big ops app" --extra-layers 2 --layer-mb 8 --seed 67 >/dev/null
BIG=$REG_h/private/big:v1
push_image "$WORK/priv" v1 "$IMG" "alice:$PW" && push_image "$WORK/big" v1 "$BIG" "alice:$PW" || { fail "push the test images"; exit 1; }
PG=$WORK/pullgate
pullgate_config "$PG"
MPORT=$(free_port)
sed -i '/^\[daemon\]/a log_format = "json"' "$PG/config.toml"
cat >> "$PG/config.toml" <<TOML

[metrics]
address = "127.0.0.1:$MPORT"
TOML
start_pullgate "$PG" || exit 1
start_containerd "$V" "$PG/snapshotter.sock" || exit 1
wait_backend
check_containerd_version "$V"
pg() { local sub=$1; shift; "$PG_BIN" "$sub" --address "$PG/api.sock" "$@"; }
scrape() { curl -sf "http://127.0.0.1:$MPORT/metrics"; }
# metric NAME{LABELS}: the value of one sample in a fresh scrape (0 when absent from it);
# nothing, and a failure, when the scrape fails (an empty answer is not 0).
metric() { local s; s=$(listing scrape) || return 1; awk -v k="$1" '$1 == k {print $2; found=1} END {if (!found) print 0}' <<<"$s"; }
DENY='pullgate_gate_decisions_total{verb="prepare",result="deny",reason="no_grant"}'

log "1. metrics: the endpoint, then the numbers after real work"
check_out "GET /metrics answers with build info" "pullgate_build_info{version=\"$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO/Cargo.toml" | head -1)\"} 1" scrape
check_out "its content type is OpenMetrics text" "application/openmetrics-text" curl -sfI "http://127.0.0.1:$MPORT/metrics"
check "another path is 404" test "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$MPORT/")" = 404
check "before any pull, nothing was downloaded" is_zero metric 'pullgate_blob_bytes_total{source="downloaded"}'
check "pullgate pull -n A --user alice" pg pull -n A "${REGF[@]}" --user "alice:$PW" "$IMG"
dl=$(metric 'pullgate_blob_bytes_total{source="downloaded"}')
check "downloaded bytes grew past the image's 7 MB of layers ($dl)" test "${dl%.*}" -gt 7000000
check "the pull is one observation of the pull histogram, result ok" test "$(metric 'pullgate_operation_duration_seconds_count{op="pull",result="ok"}')" = 1
check "registry requests: successes counted" test "$(metric 'pullgate_registry_requests_total{kind="registry",outcome="success"}')" -gt 0
check "registry requests: the 401 challenge counted" test "$(metric 'pullgate_registry_requests_total{kind="registry",outcome="unauthorized"}')" -ge 1
check "pullgate's own unpack: prepares allowed" test "$(metric 'pullgate_gate_decisions_total{verb="prepare",result="allow",reason="none"}')" -ge 3
check "one grant" test "$(metric pullgate_grants)" = 1
check "committed snapshots counted (the image's 6 layers)" test "$(metric 'pullgate_snapshots{kind="committed"}')" -ge 6
check "committed snapshots' disk usage > 7 MB" test "$(metric pullgate_snapshots_committed_bytes)" -gt 7000000
check "the metadata database size is reported" test "$(metric pullgate_metadata_database_bytes)" -gt 0
# Tenant B gets the image as a tarball from A (no password) and tries to run it.
check "A exports the image to a tarball" ctr_ -n A images export "$WORK/img.tar" "$IMG"
check "B imports the tarball without unpacking" ctr_ -n B images import --no-unpack "$WORK/img.tar"
check "B has an image record of it" has_image B "$IMG"
d0=$(metric "$DENY")
check_refused "B's ctr run is refused by the gate" "pullgate denied namespace \"B\"" "private ops app" \
  ctr_ -n B run --rm --snapshotter pullgate "$IMG" b1
settle_gc B
d1=$(metric "$DENY")
check "the deny counter (prepare, no_grant) went up by one ($d0 -> $d1)" test "$d1" = $((d0 + 1))
check "pullgate verify -n B --user alice" pg verify -n B "${REGF[@]}" --user "alice:$PW" "$IMG"
check "the verify is one observation of the verify histogram, result ok" test "$(metric 'pullgate_operation_duration_seconds_count{op="verify",result="ok"}')" = 1
check "two grants" test "$(metric pullgate_grants)" = 2
check_out "B runs it now" "private ops app" ctr_ -n B run --rm --snapshotter pullgate "$IMG" b2
check "the run's Mounts was allowed" test "$(metric 'pullgate_gate_decisions_total{verb="mounts",result="allow",reason="none"}')" -ge 1
check "B's unpack adopted A's chains: no new bytes downloaded" test "$(metric 'pullgate_blob_bytes_total{source="downloaded"}')" = "$dl"
check "a verify with a wrong password: result unauthenticated" bash -c \
  "! '$PG_BIN' verify --address '$PG/api.sock' -n C ${REGF[*]} --user alice:wrong '$IMG' >/dev/null 2>&1"
check "counted as verify, result unauthenticated" test "$(metric 'pullgate_operation_duration_seconds_count{op="verify",result="unauthenticated"}')" = 1
check "the refused run's anonymous verify of the image's own name counted as public_check, result unauthenticated" \
  test "$(metric 'pullgate_operation_duration_seconds_count{op="public_check",result="unauthenticated"}')" = 1
scrape > "$WORK/scrape.txt"; src=$?
# (Both read the scrape only if it worked: a failed one leaves an empty file.)
scraped="[ $src -eq 0 ] || { echo 'GET /metrics failed (rc=$src)'; exit 1; }"
check "no secret, user or image name in the scrape" bash -c "$scraped; ! grep -qE -- '$PW|alice|private/app|wrong' '$WORK/scrape.txt'"
check "every label value comes from a fixed set" bash -c \
  "$scraped; ! grep -vE '^#' '$WORK/scrape.txt' | grep -oE '[a-z_]+=\"[^\"]*\"' | grep -vE '^(verb|result|reason|op|kind|outcome|source|le|version)=' | grep -vxE 'purpose=\"(create_container|refused_request)\"' | grep -q ."

log "2. log_format = \"json\""
check "the daemon's log has lines" test "$(wc -l < "$PG/log")" -gt 5
check "every log line is a JSON object (python3 json.loads)" python3 -c '
import json, sys
n = 0
for line in open(sys.argv[1]):
    v = json.loads(line); assert isinstance(v, dict) and "level" in v and "fields" in v, line; n += 1
assert n > 5' "$PG/log"
check_out "a grant is logged with its fields" '"message":"grant recorded"' cat "$PG/log"
check "the password appears nowhere in the log" not grep -qF "$PW" "$PG/log"

log "3. inspect -o json"
json_is() { python3 -c "import json,sys; v=json.loads(sys.stdin.read()); sys.exit(0 if ($1) else 1)"; }
out=$(pg inspect -o json "$IMG"); printf "%s\n" "$out" > "$WORK/inspect.json"
check "inspect -o json of the reference: one manifest with its name, origin, config and its 6 layers, protected, served by the origin" json_is "
len(v['manifests']) == 1 and v['layer'] is None and v['blob'] is None
and (m := v['manifests'][0])['digest'].startswith('sha256:')
and m['names'] == [{'name': '$IMG', 'origin': '$REG_h/private/app'}] and m['origins'] == ['$REG_h/private/app']
and m['config']['digest'].startswith('sha256:') and m['config']['served_by'][0]['origin'] == '$REG_h/private/app'
and len(m['layers']) == 6 and all(l['public'] is False and l['diff_id'].startswith('sha256:') and l['blob'].startswith('sha256:')
  and l['served_by'][0]['identities'][0].startswith('id:') for l in m['layers'])" <<<"$out"
check "and its grants, A's and B's, with the fields of grants -o json" json_is "
sorted(g['namespace'] for g in v['manifests'][0]['grants']) == ['A', 'B']
and all(set(g) == {'namespace', 'principal', 'origin', 'manifest', 'identity', 'verified_at'} and g['verified_at'].endswith('Z') for g in v['manifests'][0]['grants'])" <<<"$out"
DIFF0=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["manifests"][0]["layers"][0]["diff_id"])' "$out")
MDIG=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["manifests"][0]["digest"])' "$out")
check "inspect -o json of a layer ID: the layer, its manifest and blob" json_is \
  "v['manifests'] == [] and v['layer']['diff_id'] == '$DIFF0' and v['layer']['manifests'] == ['$MDIG'] and len(v['layer']['blobs']) == 1" <<<"$(pg inspect -o json "$DIFF0")"
check_out "the text form is unchanged: layer lines" "  layer 2: sha256:" pg inspect "$IMG"
pg inspect -o json "$REG_h/private/none:v1" >/dev/null 2>&1; check "inspect -o json of something unknown: exit 4" test $? -eq 4

log "4. --user USER asks for the password on a terminal"
out=$(python3 "$REPO/tests/ptyrun.py" --answer "Password:" "$PW" -- "$PG_BIN" verify --address "$PG/api.sock" -n P "${REGF[@]}" --user alice "$IMG" 2>&1); rc=$?
prompted_ok() { [ "$1" -eq 0 ] && grep -q 'Password:' <<<"$2" && tr -d '\r' <<<"$2" | grep '^sha256:' >/dev/null; }
check "verify --user alice on a terminal prompts, takes the typed password and succeeds (rc=$rc)" prompted_ok "$rc" "$out"
check "the typed password is not echoed" not grep -qF "$PW" <<<"$out"
check "P holds the grant" test "$(grant_count P)" = 1
out=$(python3 "$REPO/tests/ptyrun.py" --answer "Password:" "not-$PW" -- "$PG_BIN" verify --address "$PG/api.sock" -n P2 "${REGF[@]}" --user alice "$IMG" 2>&1); rc=$?
check "a wrong typed password: refused by the registry, exit 3 (rc=$rc)" test $rc -eq 3

log "5. pull shows per-blob progress on a terminal, and nothing else when not on one"
ptyrun() { python3 "$REPO/tests/ptyrun.py" "$@"; }
ptyrun -- "$PG_BIN" pull --address "$PG/api.sock" -n Q1 "${REGF[@]}" --user "alice:$PW" "$BIG" > "$WORK/progress1.raw" 2>&1; rc=$?
tr -d '\r' < "$WORK/progress1.raw" | sed 's/\x1b\[[0-9]*[A-Z]//g' > "$WORK/progress1.txt"
NBIG=$(python3 -c "import json,sys; print(len(json.loads(sys.argv[1])['manifests'][0]['layers']))" "$(pg inspect -o json "$BIG")")
check "pull on a terminal succeeds (rc=$rc)" test $rc -eq 0
check "it redraws in place (cursor-up escapes)" grep -qP '\x1b\[[0-9]+A' "$WORK/progress1.raw"
# The last frame: one line per blob (config and $NBIG layers), each done, its bytes in full.
last=$(grep -E '^sha256:[0-9a-f]{12}: ' "$WORK/progress1.txt" | tail -n $((NBIG + 1)))
# The base layers it shares with the first image are on the node already (copied from the
# first image's namespace under the isolated store); its own two 8 MiB layers are downloaded
# (done).
check "the last frame lists the config and the $NBIG layers, each done or copied, with every byte" bash -c "
  [ \$(grep -cE '^sha256:[0-9a-f]{12}: (done|copied) +\|\+{40}\| ([0-9.]+ [KMG]?i?B)/\\2\$' <<<'$last') -eq $((NBIG + 1)) ]"
check "its two 8 MiB layers were downloaded, and show their size" test "$(grep -cE '^sha256:[0-9a-f]{12}: done +\|\+{40}\| 8\.0 MiB/8\.0 MiB$' <<<"$last")" -eq 2
check "an elapsed/downloaded line" grep -qE '^elapsed: [0-9.]+ s +downloaded: [0-9.]+ MiB' "$WORK/progress1.txt"
check "then the manifest digest and the summary, as without progress" bash -c "grep -qE '^sha256:[0-9a-f]{64}\$' '$WORK/progress1.txt' && grep -q 'blob(s) downloaded' '$WORK/progress1.txt'"
ptyrun -- "$PG_BIN" pull --address "$PG/api.sock" -n Q2 "${REGF[@]}" --user "alice:$PW" "$BIG" > "$WORK/progress2.raw" 2>&1
tr -d '\r' < "$WORK/progress2.raw" | sed 's/\x1b\[[0-9]*[A-Z]//g' > "$WORK/progress2.txt"
check "a second namespace's pull: every blob copied from the node, nothing downloading" bash -c "
  [ \$(grep -E '^sha256:[0-9a-f]{12}: ' '$WORK/progress2.txt' | tail -n $((NBIG + 1)) | grep -cE ': copied ') -eq $((NBIG + 1)) ] && ! grep -q ': done ' '$WORK/progress2.txt'"
ptyrun -- "$PG_BIN" pull --address "$PG/api.sock" -n Q3 -q "${REGF[@]}" --user "alice:$PW" "$BIG" > "$WORK/progress3.raw" 2>&1; rc=$?
check "pull -q on a terminal: no progress, the digest (rc=$rc)" bash -c "[ $rc -eq 0 ] && ! grep -qE '\|\+|elapsed:|\x1b\[' '$WORK/progress3.raw' && grep -qE '^sha256:[0-9a-f]{64}' '$WORK/progress3.raw'"
ptyrun --stdout-file "$WORK/progress4.out" -- "$PG_BIN" pull --address "$PG/api.sock" -n Q4 "${REGF[@]}" --user "alice:$PW" "$BIG" > "$WORK/progress4.tty" 2>&1; rc=$?
check "pull > file from a terminal: the file holds the digest alone, the terminal the summary (rc=$rc)" bash -c \
  "[ $rc -eq 0 ] && grep -qxE 'sha256:[0-9a-f]{64}' '$WORK/progress4.out' && [ \$(wc -l < '$WORK/progress4.out') -eq 1 ] && ! grep -qE '\|\+|elapsed:' '$WORK/progress4.tty'"
pg pull -n Q5 "${REGF[@]}" --user "alice:$PW" "$BIG" > "$WORK/progress5.out" 2> "$WORK/progress5.err"; rc=$?
check "pull with no terminal at all: stdout is the digest alone, stderr the one summary line (rc=$rc)" bash -c \
  "[ $rc -eq 0 ] && grep -qxE 'sha256:[0-9a-f]{64}' '$WORK/progress5.out' && [ \$(wc -l < '$WORK/progress5.out') -eq 1 ] && [ \$(wc -l < '$WORK/progress5.err') -eq 1 ] && grep -q 'blob(s) downloaded' '$WORK/progress5.err'"
out=$(ptyrun -- "$PG_BIN" pull --address "$PG/api.sock" -n Q6 "${REGF[@]}" --user "alice:wrong" "$BIG" 2>&1); rc=$?
check "a refused pull on a terminal: the error and exit 3, as without progress (rc=$rc)" bash -c "[ $rc -eq 3 ] && grep -q 'rejected the credentials' <<<'$out'"
# A client that goes away mid-pull: the daemon drops the pull (its registry connection) as it
# does a unary call's, rather than pulling on for nobody. The registry trickles the manifest.
_launch_trickle() {
  /usr/bin/python3 "$REPO/tests/evilregistry.py" --port "$PORT_1" --mode trickle --repo slow/app --tag v1 \
    --manifest "$WORK/big/index.json" --log "$WORK/trickle.log" &
  PIDS+=($!); LAUNCHED+=($!)
  wait_serving 10 curl -s -o /dev/null "http://127.0.0.1:$PORT_1/v2/"
}
launch_on_free_ports 1 _launch_trickle || fail "start the trickling registry"
TPORT=$PORT_1
# no_conns: ss lists the established connections to the trickling registry, and there are none.
no_conns() { local l; l=$(listing ss -Htn state established "( dport = :$TPORT )") && [ -z "$l" ]; }
ptyrun --timeout 4 -- "$PG_BIN" pull --address "$PG/api.sock" -n Q7 --plain-http --user "alice:$PW" "127.0.0.1:$TPORT/slow/app:v1" >/dev/null 2>&1; rc=$?
check "a pull on a terminal killed after 4 s (rc=$rc) had reached the trickling registry" grep -q '/v2/slow/app/manifests/' "$WORK/trickle.log"
check "and the daemon drops its connection there within 10 s" wait_for 10 no_conns

log "6. the transfer service's unpack platform is this machine's"
check "dpkg's architecture maps to a containerd platform ($(node_platform))" test -n "$(node_platform)"
check "the containerd config made from plugin/ names it" grep -qx "  platform = \"$(node_platform)\"" "$WORK/containerd/config.toml"
if [ "$V" != 1.6 ]; then
  check_out "containerd $V loaded its transfer service (it does not without a valid unpack target)" "io.containerd.transfer.v1" ctr_ plugins ls
  check "and it is ok" bash -c "'${CTR[0]}' -a '${CTR[2]}' plugins ls | awk '\$1 ~ /transfer.v1/ {print \$NF}' | grep -qx ok"
fi
check_out "pullgate pull's --platform defaults to it" "[default: $(node_platform)]" "$PG_BIN" pull --help

summary "e2e ops (containerd $V)"
