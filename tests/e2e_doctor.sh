#!/usr/bin/env bash
# End-to-end: `pullgate doctor` against a real containerd of the given version (1.6, 1.7 or
# 2.1) and a real pullgate: first configured soundly (the shipped fragment from plugin/, plus
# content_sharing_policy = "isolated"), then wrongly (built-in snapshotters loaded, no CRI
# snapshotter, the transfer service unpacking into overlayfs, shared content), with labelled
# namespaces, wrong permissions, pullgate stopped and containerd unreachable. Each finding is
# asserted by its line (status, check name, what it says), and the JSON output is parsed.
# Usage: tests/e2e_doctor.sh VERSION
source "$(dirname "$0")/lib.sh"
V=${1:?usage: e2e_doctor.sh 1.6|1.7|2.1|2.4}
trap cleanup EXIT
C=$WORK/containerd; mkdir -p "$C"

log "containerd $V: setup"
python3 "$REPO/tests/mkimage.py" "$WORK/img" --tag v1 --message "hello from doctor e2e" >/dev/null
start_registry pub || exit 1
IMG=$REG_pub/public/app:v1
push_image "$WORK/img" v1 "$IMG" || { fail "push test image"; exit 1; }
# The operator's hosts directory: the registry, and one that nothing answers for (--registries).
HOSTS=$WORK/hosts.d
DEAD=127.0.0.1:$(free_port)
for h in "$REG_pub" "$DEAD"; do mkdir -p "$HOSTS/$h"; printf 'server = "http://%s"\n' "$h" > "$HOSTS/$h/hosts.toml"; done
PG=$WORK/pullgate
pullgate_config "$PG"
printf '\n[registry]\nhosts_dir = "%s"\n' "$HOSTS" >> "$PG/config.toml"
start_pullgate "$PG" || exit 1

# isolate: content_sharing_policy = "isolated" in $C/config.toml, whether or not the shipped
# fragment already sets it.
isolate() {
  if ! grep -q '^ *content_sharing_policy *= *"isolated"' "$C/config.toml"; then
    printf '\n[plugins."io.containerd.metadata.v1.bolt"]\n  content_sharing_policy = "isolated"\n' >> "$C/config.toml"
  fi
}

# sound_config: the shipped fragment (lib.sh's containerd_config), isolated.
sound_config() { containerd_config "$V" "$PG/snapshotter.sock" && isolate; }

# edit_config EDIT...: edits $C/config.toml: no-cri-snapshotter (CRI's snapshotter line
# removed), transfer-overlayfs (the transfer service unpacks into overlayfs), shared
# (content_sharing_policy = "shared").
edit_config() {
  python3 - "$C/config.toml" "$@" <<'PY'
import re, sys
p, edits = sys.argv[1], set(sys.argv[2:]); out = []; table = ""
for l in open(p).read().splitlines():
    m = re.match(r'\s*\[+(.*?)\]+\s*$', l)
    if m: table = m.group(1)
    if "shared" in edits and re.match(r'\s*content_sharing_policy\s*=', l): continue
    if re.match(r'\s*snapshotter\s*=', l):
        if "no-cri-snapshotter" in edits and table in ('plugins."io.containerd.grpc.v1.cri".containerd', 'plugins."io.containerd.cri.v1.images"'): continue
        if "transfer-overlayfs" in edits and table == 'plugins."io.containerd.transfer.v1.local".unpack_config': l = l.replace('"pullgate"', '"overlayfs"')
    out.append(l)
    if "shared" in edits and m and table == 'plugins."io.containerd.metadata.v1.bolt"': out.append('  content_sharing_policy = "shared"')
text = "\n".join(out) + "\n"
if "shared" in edits and 'content_sharing_policy = "shared"' not in text:
    text += '\n[plugins."io.containerd.metadata.v1.bolt"]\n  content_sharing_policy = "shared"\n'
open(p, "w").write(text)
PY
}

# broken_config: built-in snapshotters left on, CRI's snapshotter line removed, the transfer
# service unpacking into overlayfs, and content_sharing_policy = "shared".
broken_config() {
  containerd_config "$V" "$PG/snapshotter.sock" keep-builtin && edit_config no-cri-snapshotter transfer-overlayfs shared
}

restart_containerd() {
  kill "$CTRD_PID" 2>/dev/null; wait "$CTRD_PID" 2>/dev/null
  launch_containerd "$V"
}

# doctor ARGS...: runs `pullgate doctor` on this run's pullgate and containerd (its config:
# $CCFG when set); sets OUT and RC.
doctor() {
  OUT=$("$PG_BIN" doctor --config "$PG/config.toml" --containerd-config "${CCFG:-$C/config.toml}" "$@" 2>&1); RC=$?
}
# line DESC ERE: a line of the last doctor output matches ERE.
line() { if grep -qE -- "$2" <<<"$OUT"; then pass "$1"; else fail "$1 (want /$2/ in:
$OUT)"; fi; }
# no_line DESC ERE: no line of the last doctor output matches ERE.
no_line() { if grep -qE -- "$2" <<<"$OUT"; then fail "$1 (found /$2/ in:
$OUT)"; else pass "$1"; fi; }
rc_is() { if [ "$RC" -eq "$1" ]; then pass "doctor exits $1 ($2)"; else fail "doctor exits $RC, want $1 ($2):
$OUT"; fi; }

log "containerd $V: sound config (the shipped fragment, isolated content)"
sound_config
launch_containerd "$V" || exit 1
check_containerd_version "$V"
ctr_ namespaces create team-a containerd.io/defaults/snapshotter=pullgate
check "pullgate pull into team-a (one grant)" "$PG_BIN" pull --address "$PG/api.sock" -n team-a --plain-http "$IMG"
doctor
printf '%s\n' "$OUT" | sed "s#$WORK#\$WORK#g" > "$WORK/sound.txt"
rc_is 0 "sound config"
no_line "no problem reported" '^problem'
line "containerd answers" "^ok +containerd +containerd v?$V\.[^ ]+ answers at $C/containerd.sock"
line "pullgate registered at its socket" "^ok +snapshotter +pullgate is registered in containerd .*$PG/snapshotter.sock"
line "no other snapshotter loaded" '^ok +bypass +no snapshotter other than pullgate is loaded'
no_line "no bypass warning" '^(warning|problem) +bypass'
line "CRI's snapshotter is pullgate (CRI itself disabled here)" '^ok +cri +CRI is not loaded; when enabled it goes through pullgate'
case $V in
  1.6) line "no transfer service on 1.6" '^ok +transfer +containerd [^ ]+ has no transfer service' ;;
  *) line "the transfer service unpacks into pullgate" '^ok +transfer +the transfer service unpacks linux/[a-z0-9]+ into pullgate' ;;
esac
line "content sharing isolated" '^ok +sharing +content_sharing_policy = "isolated"'
case $V in
  1.6) line "the image filesystem: 1.6 reads no exported root (a warning, with the fix)" "^warning +imagefs +containerd's CRI reports the image filesystem at <containerd root>/io.containerd.snapshotter.v1.pullgate.*containerd 1.6.*fix: upgrade containerd to 1.7" ;;
  *) line "the image filesystem is pullgate's root (the fragment's exports)" "^ok +imagefs +containerd's CRI reports the image filesystem at pullgate's root $PG/root " ;;
esac
line "team-a defaults to pullgate" '^ok +namespaces +namespaces that default to pullgate: team-a$'
line "pullgate serving from its metadata" "^ok +serving +pullgate answers on $PG/snapshotter.sock"
grants=$("$PG_BIN" grants --address "$PG/api.sock" --all -o json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
line "the ledger reads, with the grants grants --all lists ($grants)" "^ok +ledger +pullgate's API answers at $PG/api.sock and its ledger reads \(${grants:-x} grant\(s\)\)"
check "that is one grant" test "${grants:-0}" -eq 1
line "pullgate's files and sockets root-only" '^ok +permissions +root-only: root/ 0700, identity.key 0600, metadata.redb 0600, snapshotter.sock 0600, pullgate/ 0755, api.sock 0600$'
line "summary: no problem" '^[0-9]+ ok, [0-9]+ warning\(s\), 0 problem\(s\)$'

log "containerd $V: namespaces (unlabelled, shareable)"
ctr_ namespaces create plain
ctr_ namespaces create opened containerd.io/defaults/snapshotter=pullgate containerd.io/namespace.shareable=true
doctor
rc_is 0 "warnings only"
line "an unlabelled namespace is a warning with the fix" '^warning +namespaces +namespaces without containerd.io/defaults/snapshotter=pullgate: plain .*fix: ctr namespaces label plain containerd.io/defaults/snapshotter=pullgate'
line "a shareable namespace is reported" '^warning +shareable +namespace opened is labelled containerd.io/namespace.shareable=true: .*by digest'
line "labelled namespaces listed" '^ok +namespaces +namespaces that default to pullgate: opened, team-a$'
printf '%s\n' "$OUT" | sed "s#$WORK#\$WORK#g" > "$WORK/namespaces.txt"

log "containerd $V: JSON output (sound config)"
doctor -o json
rc_is 0 "-o json, sound config"
check "JSON: fields and counts" python3 - "$OUT" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
checks = d["checks"]
assert all(set(c) == {"name", "status", "message", "fix"} for c in checks), checks
assert all(c["status"] in ("ok", "warning", "problem") for c in checks)
assert all((c["fix"] is None) == (c["status"] == "ok") for c in checks)
for s, k in (("ok", "ok"), ("warning", "warnings"), ("problem", "problems")):
    assert d[k] == sum(c["status"] == s for c in checks), (k, d)
assert d["problems"] == 0
by = {c["name"]: c for c in checks}
for n in ("containerd", "snapshotter", "bypass", "cri", "transfer", "sharing", "serving", "ledger", "permissions"):
    assert by[n]["status"] == "ok", by.get(n)
assert any(c["name"] == "shareable" and "opened" in c["message"] for c in checks)
PY

log "containerd $V: wrong permissions"
chmod 0644 "$PG/root/identity.key"
doctor
rc_is 1 "a readable key file"
line "the key file is a problem with the fix" "^problem +permissions +file $PG/root/identity.key is 0644: others can read or use it; fix: chmod 600 $PG/root/identity.key"
chmod 0600 "$PG/root/identity.key"
chmod 0666 "$PG/api.sock"
doctor
rc_is 1 "a world-writable API socket"
line "the API socket is a problem" "^problem +permissions +socket $PG/api.sock is 0666"
chmod 0600 "$PG/api.sock"
doctor
rc_is 0 "permissions restored"

log "containerd $V: --registries"
doctor --registries
rc_is 1 "one registry does not answer"
line "the registry answers" "^ok +registry +registry $REG_pub answers at http://$REG_pub/v2/ \(HTTP 200\)"
line "the dead registry is a problem" "^problem +registry +registry $DEAD does not answer at http://$DEAD/v2/"
# _default (every registry without a directory of its own) is read too, as containerd reads it.
mkdir -p "$HOSTS/_default"
printf 'server = "http://%s"\ncapabilities = ["fetch"]\n' "$REG_pub" > "$HOSTS/_default/hosts.toml"
doctor --registries
rc_is 1 "a _default containerd would refuse"
line "the refused _default is a problem" "^problem +registry +registry _default: $HOSTS/_default/hosts.toml: unknown capability \"fetch\""
line "the registry still answers" "^ok +registry +registry $REG_pub answers at http://$REG_pub/v2/"
printf 'server = "http://%s"\n' "$REG_pub" > "$HOSTS/_default/hosts.toml"
doctor --registries
line "_default's server answers" "^ok +registry +registry _default answers at http://$REG_pub/v2/ \(HTTP 200\)"
# A server without a scheme is https to containerd, and to pullgate.
printf 'server = "%s"\n' "$REG_pub" > "$HOSTS/_default/hosts.toml"
doctor --registries
line "a server without a scheme is tried with https" "^problem +registry +registry _default does not answer at https://$REG_pub/v2/"
printf 'skip_verify = false\n' > "$HOSTS/_default/hosts.toml"
doctor --registries
rc_is 1 "only the dead registry is a problem"
line "_default naming no server" "^ok +registry +_default \(every registry without a directory of its own\) reads well and names no server: pullgate asks each registry itself"
rm -r "$HOSTS/_default"

log "containerd $V: wrong config (built-in snapshotters, no CRI snapshotter, shared content)"
broken_config
restart_containerd || exit 1
doctor
printf '%s\n' "$OUT" | sed "s#$WORK#\$WORK#g" > "$WORK/broken.txt"
rc_is 1 "built-in snapshotters loaded"
line "overlayfs is a problem, with the fix" '^problem +bypass +snapshotter overlayfs is loaded: .*fix: add "io.containerd.snapshotter.v1.overlayfs" to disabled_plugins in '"$C/config.toml"
line "native is a problem" '^problem +bypass +snapshotter native is loaded'
no_line "no 'no other snapshotter' line" '^ok +bypass'
line "CRI's snapshotter unset (CRI not loaded here: warning)" "^warning +cri +CRI's snapshotter is unset \(containerd's default, overlayfs\)"
no_line "nothing said of the image filesystem when CRI does not use pullgate" '^[a-z]+ +imagefs '
line "shared content is a warning saying what it means" '^warning +sharing +content_sharing_policy is "shared": any namespace can read another.s blobs by digest.*fix: set content_sharing_policy = "isolated"'
case $V in
  1.6) line "no transfer service on 1.6" '^ok +transfer' ;;
  *) line "the transfer service unpacking into overlayfs is a problem" '^problem +transfer +the transfer service unpacks linux/[a-z0-9]+ into snapshotter "overlayfs"' ;;
esac
line "pullgate still registered" '^ok +snapshotter'
doctor -o json
check "JSON: the overlayfs problem and its fix" python3 - "$OUT" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
assert d["problems"] >= 2
o = [c for c in d["checks"] if c["name"] == "bypass" and "overlayfs" in c["message"]]
assert len(o) == 1 and o[0]["status"] == "problem" and "disabled_plugins" in o[0]["fix"], o
s = [c for c in d["checks"] if c["name"] == "sharing"]
assert len(s) == 1 and s[0]["status"] == "warning", s
PY

log "containerd $V: a drop-in the config imports turns content sharing back on"
sound_config
mkdir -p "$C/conf.d"
sed -i "/^version = /a imports = [\"$C/conf.d/*.toml\"]" "$C/config.toml"
printf '[plugins."io.containerd.metadata.v1.bolt"]\n  content_sharing_policy = "shared"\n' > "$C/conf.d/50-shared.toml"
restart_containerd || exit 1
# containerd itself merges the drop-in: a namespace adopts another's blob by its digest alone.
ctr_ namespaces create team-a >/dev/null 2>&1
blob=$(ctr_ -n team-a content ls -q | head -1)
: > "$WORK/empty"
# (containerd's GC may take the unreferenced adopted blob before anything holds it: a gc.root
# label holds it, and is only accepted on a blob the namespace has.)
for try in 1 2 3 4 5; do
  ctr_ -n rt-adopt content ingest --expected-digest "$blob" adopt <"$WORK/empty" >/dev/null 2>&1
  ctr_ -n rt-adopt content label "$blob" containerd.io/gc.root=adopted >/dev/null 2>&1 && break
done
check "containerd reads the drop-in (an empty ingest by digest adopts $blob)" ctr_ -n rt-adopt content get "$blob"
doctor
line "doctor reads it too: shared content is a warning" '^warning +sharing +content_sharing_policy is "shared"'
no_line "and does not say isolated" '^ok +sharing'
ctr_ namespaces label team-a "containerd.io/defaults/snapshotter=$(printf 'x\033[2K\r\033[5A\nok       sharing      content_sharing_policy = "isolated"')" >/dev/null
doctor
check "a namespace label with control characters draws no line of its own (no escape byte in the output)" not grep -q $'\033' <<<"$OUT"
no_line "(no injected ok line)" '^ok +sharing'
ctr_ namespaces label team-a containerd.io/defaults/snapshotter=pullgate >/dev/null
sound_config
restart_containerd || exit 1

log "containerd $V: CRI enabled (tests/cri_lib.sh's config: the shipped fragment, CRI on)"
source "$REPO/tests/cri_lib.sh"
containerd_cri_config "$V" "$PG/snapshotter.sock" "$REG_pub/pause:none" "$WORK/cri-hosts" && isolate
restart_containerd || exit 1
ctr_ namespaces create k8s.io 2>/dev/null   # CRI's namespace (created by its first pod otherwise)
doctor
rc_is 0 "CRI through pullgate"
line "CRI's snapshotter is pullgate, CRI loaded" '^ok +cri +CRI unpacks and runs through pullgate'
no_line "k8s.io follows CRI's setting" '^warning +namespaces .*k8s\.io'
no_line "pullgate's own CRI front is off here: nothing said of principals" '^[a-z]+ +principals '
# pullgate's config with its CRI front on: k8s.io requires a principal unless turned off.
cp "$PG/config.toml" "$WORK/pg-cri.toml"
printf '\n[cri]\nenable = true\nsocket = "%s"\n' "$PG/cri.sock" >> "$WORK/pg-cri.toml"
OUT=$("$PG_BIN" doctor --config "$WORK/pg-cri.toml" --containerd-config "$C/config.toml" 2>&1); RC=$?
line "CRI front on: k8s.io requires a principal by default" '^ok +principals +k8s\.io requires a principal'
printf '\n[namespaces."k8s.io"]\nrequire_principal = false\n' >> "$WORK/pg-cri.toml"
OUT=$("$PG_BIN" doctor --config "$WORK/pg-cri.toml" --containerd-config "$C/config.toml" 2>&1); RC=$?
line "turned off for k8s.io: a warning saying what it lets pods do, with the fix" '^warning +principals +require_principal is off for k8s\.io: .*fix: remove require_principal = false'
edit_config no-cri-snapshotter
restart_containerd || exit 1
doctor
rc_is 1 "CRI without a snapshotter setting"
line "CRI's snapshotter unset is a problem where CRI runs (or fails to load)" "^problem +cri +CRI's snapshotter is unset \(containerd's default, overlayfs\): Kubernetes pods would not go through pullgate.*fix: set \[plugins"
line "k8s.io no longer exempt" '^warning +namespaces +namespaces without .*k8s\.io'

log "containerd $V: pullgate stopped, containerd unreachable, no config"
sound_config
restart_containerd || exit 1
kill "$PG_PID"; wait "$PG_PID" 2>/dev/null
doctor
rc_is 1 "pullgate stopped"
line "the snapshotter socket does not answer" "^problem +serving +cannot reach pullgate's snapshotter at $PG/snapshotter.sock"
line "the API does not answer" "^problem +ledger +cannot reach pullgate's API at $PG/api.sock.*fix: start pullgate"
line "containerd still lists pullgate" '^ok +snapshotter'
doctor --containerd-address "$WORK/no-such.sock"
rc_is 1 "containerd unreachable"
line "containerd unreachable is a problem" "^problem +containerd +cannot reach containerd at $WORK/no-such.sock: .*fix: start containerd"
line "the config is still checked" '^ok +cri '
CCFG=$WORK/no-such.toml doctor
rc_is 1 "no containerd config"
line "a missing config is a problem" "^problem +config +cannot read $WORK/no-such.toml: No such file"
line "containerd is still asked" '^ok +bypass'
start_pullgate "$PG" || exit 1
wait_for 10 test -S "$PG/api.sock"
doctor
rc_is 0 "pullgate restarted"

log "containerd $V: the two binaries (pullgate serve and doctor become pullgated)"
if [ "$(readlink "/proc/$PG_PID/exe")" = "$(dirname "$(readlink -f "$PG_BIN")")/pullgated" ]; then pass "pullgate serve became pullgated in the same process"
else fail "pullgate serve (pid $PG_PID) runs $(readlink "/proc/$PG_PID/exe"), not pullgated"; fi
mkdir -p "$WORK/lonely"; cp "$PG_BIN" "$WORK/lonely/pullgate"
OUT=$("$WORK/lonely/pullgate" check --address "$PG/api.sock" -n team-a "$IMG" 2>&1); RC=$?
if [ "$RC" -eq 0 ] && [ "$OUT" = allowed ]; then pass "a client command needs no pullgated"; else fail "pullgate check without pullgated: rc $RC: $OUT"; fi
OUT=$("$WORK/lonely/pullgate" doctor --config "$PG/config.toml" 2>&1); RC=$?
rc_is 127 "pullgate without pullgated beside it"
line "doctor says pullgated is missing, and where" "^pullgate: cannot run $WORK/lonely/pullgated: No such file or directory .*installed beside pullgate"
OUT=$("$WORK/lonely/pullgate" serve --config "$PG/config.toml" 2>&1); RC=$?
if [ "$RC" -eq 127 ] && grep -q "cannot run $WORK/lonely/pullgated" <<<"$OUT"; then pass "serve says pullgated is missing"; else fail "serve without pullgated: rc $RC: $OUT"; fi
# pullgated being pullgate itself (a link or copy) is refused, not exec'd in a loop.
ln -s pullgate "$WORK/lonely/pullgated"
OUT=$(timeout 10 "$WORK/lonely/pullgate" doctor --config "$PG/config.toml" 2>&1); RC=$?
rc_is 126 "pullgated is pullgate itself"
line "says pullgated is pullgate" "^pullgate: the pullgated beside pullgate is pullgate itself"
# A pullgated of another version than the pullgate that runs it refuses.
OUT=$(PULLGATE_EXEC_VERSION=0.0.0-other "$(dirname "$PG_BIN")/pullgated" doctor --config "$PG/config.toml" 2>&1); RC=$?
rc_is 126 "pullgated of another version than its pullgate"
line "says to install one build" "^pullgate: pullgate 0.0.0-other ran pullgated [0-9.]+: install both binaries of one build"

for f in sound namespaces broken; do printf '\n--- doctor output (%s):\n' "$f"; cat "$WORK/$f.txt"; done
summary "e2e doctor (containerd $V)"
