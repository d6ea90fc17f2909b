#!/usr/bin/env bash
# End-to-end: `pullgate containerd-config` on config files written by a real containerd of the
# given version (1.6, 1.7, 2.1 or 2.4, `containerd config default`):
#   - the default file as it is: merged, and read back by that containerd (`config dump`);
#   - the default file with an operator's settings and comments (its own disabled_plugins, a
#     debug level, a registry config_path, root, state and socket under $WORK): --dry-run writes
#     nothing, the merge keeps every setting and comment, a second run changes nothing; that
#     containerd then runs from the merged file beside pullgate, and `pullgate doctor` finds no
#     problem; --undo refuses while the file was edited after the merge, then restores the
#     original bytes;
#   - the default file with another snapshotter pinned: refused, unchanged;
#   - a version 1 file refused with the way to migrate; a missing file created only for a named
#     containerd;
#   - merges that containerd's own reading (`config dump`, run by the command before it writes)
#     shows wrong, refused with the file unchanged: an imported drop-in pointing pullgate's proxy
#     plugin elsewhere, another proxy snapshotter, a version 2 file under a 2.x containerd (which
#     migrates it and would load erofs); a registry password (over several lines) and a header
#     in the file hidden in the diff.
# One containerd start. Usage: tests/e2e_ctrconf.sh VERSION
source "$(dirname "$0")/lib.sh"
V=${1:?usage: e2e_ctrconf.sh 1.6|1.7|2.1|2.4}
trap cleanup EXIT
C=$WORK/containerd; mkdir -p "$C"
BIN=$(containerd_bindir "$V") || exit 1
case $V in
  1.6|1.7) SERIES=1.x; CRI='"io.containerd.grpc.v1.cri"' ;;
  *) SERIES=2.x; CRI='"io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime"' ;;
esac
PG=$WORK/pullgate
pullgate_config "$PG"
D=$WORK/configs; mkdir -p "$D"

# cc ARGS...: `pullgate containerd-config` with this run's pullgate config; sets OUT and RC.
cc() { OUT=$("$PG_BIN" containerd-config -c "$PG/config.toml" --containerd-bin "$BIN/containerd" "$@" 2>&1); RC=$?; }
# rc_is WANT DESC: the last cc exited WANT.
rc_is() { if [ "$RC" -eq "$1" ]; then pass "$2 (exit $1)"; else fail "$2: exit $RC, want $1: $(shown 800 "$OUT")"; fi; }
# says DESC TEXT: the last cc's output contains TEXT.
says() { if grep -qF -- "$2" <<<"$OUT"; then pass "$1"; else fail "$1 (want '$2' in: $(shown 800 "$OUT"))"; fi; }
# same DESC A B: files A and B hold the same bytes.
same() { if cmp -s "$2" "$3"; then pass "$1"; else fail "$1 ($(cmp "$2" "$3" 2>&1 | head -c 200))"; fi; }
# absent DESC PATH...: none of the files exists.
absent() { local d=$1 p; shift; for p in "$@"; do [ -e "$p" ] && { fail "$d ($p exists)"; return; }; done; pass "$d"; }
# dump FILE: the effective config this containerd reads from FILE.
dump() { PATH="$BIN:$PATH" "$BIN/containerd" --config "$1" config dump 2>/dev/null; }
# q: a TOML string's quotes as containerd writes them (double on 1.x, single on 2.x).
q="[\"']"

log "containerd $V: its default config"
"$BIN/containerd" config default > "$D/default.toml" 2>/dev/null
check "containerd $V writes a default config" grep -q '^version = ' "$D/default.toml"
cp "$D/default.toml" "$D/default.orig"
cc --file "$D/default.toml"
rc_is 2 "the default's explicit content_sharing_policy \"shared\" is not replaced without --content-sharing"
says "the refusal names the key, both values and the flags" 'content_sharing_policy is '
says "  ... and how to choose" '--content-sharing isolated replaces it, --content-sharing shared keeps it'
same "the refused default file is unchanged" "$D/default.toml" "$D/default.orig"
absent "no backup after a refusal" "$D/default.toml.pullgate-backup" "$D/default.toml.pullgate-merged"
cc --file "$D/default.toml" --content-sharing isolated
rc_is 0 "merge into the default config"
check "the diff sets CRI's snapshotter" grep -qE "^\+ +snapshotter = ${q}pullgate${q}" <<<"$OUT"
says "the diff adds the proxy plugin" '+[proxy_plugins.pullgate]'
same "the backup holds the default's bytes" "$D/default.toml.pullgate-backup" "$D/default.orig"
d=$(dump "$D/default.toml")
check "containerd $V reads the merged default (config dump)" test -n "$d"
check "  CRI's snapshotter is pullgate" grep -qE "^ +snapshotter = ${q}pullgate${q}" <<<"$d"
check "  pullgate is a proxy plugin at pullgate's socket" grep -qE "address = ${q}$PG/snapshotter.sock${q}" <<<"$d"
check "  overlayfs is disabled" grep -qE "^disabled_plugins = \[.*io.containerd.snapshotter.v1.overlayfs" <<<"$d"
check "  the content store is isolated" grep -qE "content_sharing_policy = ${q}isolated${q}" <<<"$d"
check "  no snapshotter but pullgate anywhere" not grep -qE "snapshotter = ${q}overlayfs${q}" <<<"$d"

log "containerd $V: a config with an operator's settings and comments"
local_containerd_config "$D/default.orig" "$D/local.toml"
python3 - "$D/local.toml" "$D/operator.toml" "$WORK/certs.d" "$CRI" <<'PY'
import re, sys
src, dst, certs, cri = sys.argv[1:]
t = open(src).read()
q = "[\"']"
t = re.sub(r"(?m)^disabled_plugins = \[\]$", f"# operator: Kubernetes is not on this node yet\ndisabled_plugins = [{cri}]", t)
t, n = re.subn(r"(?m)^(\s*)level = " + q + q + "$", r'\1level = "debug" # operator: while we look into a pull', t, count=1)
assert n == 1, "no debug level"
t, n = re.subn(r"(?m)^(\s*)config_path = " + q + q + "$", rf'\1config_path = "{certs}"', t)
assert n >= 1, "no registry config_path"
t = re.sub(r"(?m)^(version = \d+)$", r"\1\n# operator: node 7, edited by hand; keep this line", t)
open(dst, "w").write(t)
PY
O=$D/operator.toml
cp "$O" "$D/operator.orig"
check "the operator's config differs from the default" not cmp -s "$O" "$D/default.orig"
cc --file "$O" --content-sharing isolated --dry-run
rc_is 0 "--dry-run"
says "--dry-run prints the diff" '+[proxy_plugins.pullgate]'
says "--dry-run says it wrote nothing" 'dry run:'
same "--dry-run leaves the file's bytes" "$O" "$D/operator.orig"
absent "--dry-run makes no backup" "$O.pullgate-backup" "$O.pullgate-merged"
cc --file "$O" --content-sharing isolated
rc_is 0 "merge into the operator's config"
says "it says where the previous bytes are" "its previous bytes are in $O.pullgate-backup"
same "the backup holds the operator's original bytes" "$O.pullgate-backup" "$D/operator.orig"
cp "$O" "$D/operator.merged"
for line in "# operator: node 7, edited by hand; keep this line" "# operator: Kubernetes is not on this node yet" \
  'level = "debug" # operator: while we look into a pull' "config_path = \"$WORK/certs.d\"" "root = \"$C/root\"" "state = \"$C/state\"" \
  "address = \"$C/containerd.sock\""; do
  check "kept: $line" grep -qF -- "$line" "$O"
done
check "the operator's disabled_plugins come first, in their order" grep -qF "disabled_plugins = [$CRI, \"io.containerd.snapshotter.v1.overlayfs\"" "$O"
# Every line of the original is still there, but the values the merge set.
lost=$(grep -vxF -f "$O" "$D/operator.orig" | grep -vE "^ *(snapshotter|content_sharing_policy) = |^disabled_plugins = ")
check "no other line of the original is lost" test -z "$lost"
cc --file "$O" --content-sharing isolated
rc_is 0 "a second run"
says "a second run says there is nothing to change" "already has pullgate's settings: nothing to change"
same "a second run leaves the file's bytes" "$O" "$D/operator.merged"
same "a second run leaves the backup" "$O.pullgate-backup" "$D/operator.orig"
cc --file "$O"
rc_is 0 "a run without --content-sharing on the merged file"
same "  leaves its bytes too" "$O" "$D/operator.merged"

log "containerd $V: that containerd from the merged config, and pullgate doctor"
start_pullgate "$PG" || exit 1
cp "$O" "$C/config.toml"
launch_containerd "$V" || exit 1
check_containerd_version "$V"
OUT=$("$PG_BIN" doctor --config "$PG/config.toml" --containerd-config "$O" 2>&1); RC=$?
rc_is 0 "pullgate doctor against the merged config"
says "doctor: no problem" ", 0 problem(s)"
says "doctor: pullgate registered at its socket" "pullgate is registered in containerd"
says "doctor: no other snapshotter loaded" "no snapshotter other than pullgate is loaded"
says "doctor: the content store is isolated" 'content_sharing_policy = "isolated"'
case $V in
  1.6) says "doctor: no transfer service on 1.6" "has no transfer service" ;;
  *) says "doctor: the transfer service unpacks into pullgate" "the transfer service unpacks $(node_platform) into pullgate" ;;
esac
if grep -qE '^(problem|warning) +config ' <<<"$OUT"; then fail "doctor: the file read is not the running containerd's: $(grep -E ' config ' <<<"$OUT")"; else pass "doctor: the file read is the running containerd's"; fi
check "a snapshot through pullgate" "${CTR[@]}" -n ctrconf snapshots --snapshotter pullgate prepare probe ""

log "containerd $V: --undo"
printf '# edited after the merge\n' >> "$O"
cp "$O" "$D/operator.edited"
cc --file "$O" --undo
rc_is 1 "--undo after an edit"
says "--undo says the file changed since the merge" "changed since pullgate merged into it"
same "--undo refused: the file stays as edited" "$O" "$D/operator.edited"
cp "$D/operator.merged" "$O"
cc --file "$O" --undo
rc_is 0 "--undo"
same "--undo restores the original bytes" "$O" "$D/operator.orig"
absent "--undo removes the backup" "$O.pullgate-backup" "$O.pullgate-merged"
cc --file "$O" --undo
rc_is 4 "--undo with nothing to undo"
says "  says so" "no merge to undo"

log "containerd $V: a conflicting snapshotter"
X=$D/conflict.toml
sed -E "s/^( *)snapshotter = ([\"'])overlayfs([\"'])/\1snapshotter = \2stargz\3/" "$D/default.orig" > "$X"
cp "$X" "$D/conflict.orig"
check "the conflicting config pins stargz" grep -qE "snapshotter = ${q}stargz${q}" "$X"
cc --file "$X" --content-sharing isolated
rc_is 2 "a pinned stargz is refused"
case $SERIES in
  1.x) says "the refusal names the key and both values" "plugins.\"io.containerd.grpc.v1.cri\".containerd.snapshotter is \"stargz\" in the file, pullgate needs \"pullgate\"" ;;
  2.x) says "the refusal names the key and both values" "plugins.\"io.containerd.cri.v1.images\".snapshotter is 'stargz' in the file, pullgate needs \"pullgate\"" ;;
esac
says "  and that nothing was written" "refused, nothing written"
same "the conflicting file is unchanged" "$X" "$D/conflict.orig"
absent "no backup of the conflicting file" "$X.pullgate-backup" "$X.pullgate-merged"

log "containerd $V: version 1, a missing file"
printf 'root = "/var/lib/containerd"\n' > "$D/v1.toml"
cc --file "$D/v1.toml"
rc_is 2 "a version 1 file is refused"
says "  with the way to migrate" "containerd config migrate"
cc --file "$D/new.toml"
rc_is 4 "a missing file without --containerd"
says "  says which flag creates it" "pass --containerd 1.x"
absent "  and creates nothing" "$D/new.toml"
cc --file "$D/new.toml" --containerd "$SERIES"
rc_is 0 "a missing file with --containerd $SERIES"
d=$(dump "$D/new.toml")
check "containerd $V reads the created file, pullgate its CRI snapshotter" grep -qE "^ +snapshotter = ${q}pullgate${q}" <<<"$d"
cc --file "$D/new.toml" --undo
rc_is 0 "--undo of a created file"
absent "  removes it" "$D/new.toml" "$D/new.toml.pullgate-merged"

log "containerd $V: the merge checked by containerd's own reading of it"
# A drop-in the file imports points pullgate's proxy plugin elsewhere: containerd reads it after
# the file, whatever the merge wrote there.
I=$D/imports; mkdir -p "$I/conf.d"
case $SERIES in 1.x) ver=2 ;; 2.x) ver=3 ;; esac
printf 'version = %s\nimports = ["%s/conf.d/*.toml"]\n' "$ver" "$I" > "$I/config.toml"
printf '[proxy_plugins.pullgate]\n  type = "snapshot"\n  address = "/tmp/elsewhere.sock"\n' > "$I/conf.d/10-elsewhere.toml"
cp "$I/config.toml" "$I/config.orig"
cc --file "$I/config.toml" --content-sharing isolated
rc_is 2 "a merge that an imported file overrides is refused"
says "  as containerd reads it" 'proxy_plugins.pullgate is type "snapshot" at "/tmp/elsewhere.sock"'
same "  the file is unchanged" "$I/config.toml" "$I/config.orig"
absent "  no backup" "$I/config.toml.pullgate-backup" "$I/config.toml.pullgate-merged"
# Another proxy snapshotter beside pullgate.
{ cat "$D/default.orig"; printf '\n[proxy_plugins.stargz]\n  type = "snapshot"\n  address = "/run/stargz.sock"\n'; } > "$D/stargz.toml"
cp "$D/stargz.toml" "$D/stargz.orig"
cc --file "$D/stargz.toml" --content-sharing isolated
rc_is 2 "another proxy snapshotter is refused"
says "  naming it" "proxy_plugins.stargz is another snapshotter"
same "  the file is unchanged" "$D/stargz.toml" "$D/stargz.orig"
if [ "$SERIES" = 2.x ]; then
  # A version 2 file: containerd $V migrates it, and the 1.x keys do not all carry over.
  printf 'version = 2\n' > "$D/v2.toml"; cp "$D/v2.toml" "$D/v2.orig"
  cc --file "$D/v2.toml" --content-sharing isolated
  rc_is 2 "a version 2 file, which containerd $V migrates, is refused"
  says "  erofs would load" "disabled_plugins lacks io.containerd.snapshotter.v1.erofs"
  same "  the file is unchanged" "$D/v2.toml" "$D/v2.orig"
fi
# A registry credential in the file is not shown in the diff: a password written over several
# lines, then a header carrying another.
case $SERIES in 1.x) reg='plugins."io.containerd.grpc.v1.cri".registry' ;; 2.x) reg="plugins.'io.containerd.cri.v1.images'.registry" ;; esac
# with_secret NAME BLOCK: the default file with BLOCK where the merge's change is near, so that
# the diff would show it (before 1.x's [proxy_plugins], at the end of a 2.x file; the default's
# own empty table of headers left out, as BLOCK may define it), in $D/NAME.toml.
with_secret() {
  case $SERIES in
    1.x) grep -vF "[$reg.headers]" "$D/default.orig" | awk -v a="$2" '/^\[proxy_plugins\]$/ {print a; print ""} {print}' > "$D/$1.toml" ;;
    2.x) { grep -vF "[$reg.headers]" "$D/default.orig"; printf '\n%s\n' "$2"; } > "$D/$1.toml" ;;
  esac
}
with_secret auth "$(printf '[%s.configs."registry.example".auth]\n  password = """\ns3cret-In-Config\nsecond-s3cret-line"""\n  username = "node"\n' "$reg")"
cc --file "$D/auth.toml" --content-sharing isolated --dry-run
rc_is 0 "--dry-run of a file holding a registry password over several lines"
check "  its diff shows the password's line hidden" grep -qE '^ +password = <hidden>$' <<<"$OUT"
check "  and no line of the password" not grep -qF "s3cret" <<<"$OUT"
with_secret header "$(printf '[%s.headers]\n  Authorization = ["Basic s3cret-In-Header"]\n' "$reg")"
cc --file "$D/header.toml" --content-sharing isolated --dry-run
rc_is 0 "--dry-run of a file holding a registry header"
check "  its diff shows the header's line hidden" grep -qE '^ +Authorization = <hidden>$' <<<"$OUT"
check "  and never the header's value" not grep -qF "s3cret" <<<"$OUT"

summary "e2e ctrconf containerd $V"
