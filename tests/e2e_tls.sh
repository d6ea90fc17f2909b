#!/usr/bin/env bash
# End-to-end: a private registry over TLS that also requires a client certificate (mutual TLS)
# and a password, reached as an operator configures containerd for it: the daemon's
# `[registry] hosts_dir` read as containerd reads its `config_path`:
#   1. hosts.toml in the `host_port_` directory, `ca` and `client` ([certificate, key]) relative
#      to it: pull, then run the image through the gate;
#   2. refused and nothing recorded: no client certificate, one from another CA, a key that is
#      not the certificate's (a configuration error that quotes no key material), no CA;
#   3. Docker's certs.d layout (no hosts.toml: ca.crt, client.cert, client.key) in the `host:port`
#      directory, and `_default/hosts.toml` with certificate and key in one file;
#   4. a registry whose only access control is the client certificate: a pull without
#      credentials does not present the node's certificate, and nothing is recorded;
#   5. `pullgate doctor --registries` names the registry of a `host_port_` directory;
#   6. an http server with TLS settings, asked as the running containerd asks it (over https
#      first since 1.6.25/1.7.7, plain http when the port answers it): a TLS registry, a plain one;
#   7. a registry on the loopback whose server no hosts.toml names, asked as containerd asks it
#      without --plain-http: a plain http one (plain http, or https first then plain), a TLS one
#      with a certificate from a CA nothing trusts (containerd since 1.6.25/1.7.7 asks it over
#      https unverified; pullgate checks it, and reaches it once its CA is in its directory).
# The mutual-TLS registries listen on the node's own address: a loopback registry whose server no
# hosts.toml names is another case (7).
# Real containerd of the given version configured from plugin/, a real registry with TLS,
# clientcas and htpasswd, certificates made here with openssl; driven by ctr and pullgate's CLI.
# Usage: tests/e2e_tls.sh VERSION
source "$(dirname "$0")/lib.sh"
V=${1:?usage: e2e_tls.sh 1.6|1.7|2.1|2.4}
trap cleanup EXIT
PW=alice-Tls-4h7q

log "containerd $V (TLS registries): setup"
python3 "$REPO/tests/mkimage.py" "$WORK/img" --tag v1 --message "hello over mutual TLS" --extra-layers 1 --layer-mb 0.1 --seed 21 >/dev/null
T=$WORK/tls; mkdir -p "$T"
# cert NAME CA USAGE [SAN]: a key NAME.key and a certificate NAME.pem signed by CA.
cert() {
  openssl req -newkey rsa:2048 -nodes -keyout "$T/$1.key" -out "$T/$1.csr" -subj "/CN=pullgate-test-$1" >/dev/null 2>&1 &&
    openssl x509 -req -in "$T/$1.csr" -CA "$T/$2.pem" -CAkey "$T/$2.key" -CAcreateserial -days 2 \
      -extfile <(printf 'extendedKeyUsage=%s\n%s' "$3" "${4:+subjectAltName=$4}") -out "$T/$1.pem" >/dev/null 2>&1
}
for ca in ca otherca; do
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$T/$ca.key" -out "$T/$ca.pem" -days 2 -subj "/CN=pullgate-test-$ca" >/dev/null 2>&1
done
# The node's first global IPv4 address (not the loopback: see above).
NODE_IP=$(ip -4 -o addr show scope global | awk '{split($4, a, "/"); print a[1]; exit}')
[ -n "$NODE_IP" ] || { fail "this machine has no global IPv4 address for the TLS registries (ip -4 addr)"; exit 1; }
cert server ca serverAuth "IP:127.0.0.1,IP:$NODE_IP" && cert client ca clientAuth && cert stranger otherca clientAuth \
  && cert loopback otherca serverAuth IP:127.0.0.1 || { fail "make the certificates"; exit 1; }
# The key lines a leak would show (the middle of the client's key).
KEYLINE=$(sed -n 5p "$T/client.key")

# _launch_mtls_registry (REGDIR, and AUTH: its auth: block or nothing): a registry with TLS
# that requires a client certificate from the CA.
_launch_mtls_registry() {
  mkdir -p "$REGDIR/data"
  registry_config "$REGDIR" "$PORT_1" "  tls:
    certificate: $T/server.pem
    key: $T/server.key
    clientcas:
      - $T/ca.pem
$AUTH" "$NODE_IP"
  docker-registry serve "$REGDIR/config.yml" >>"$REGDIR/log" 2>&1 &
  PIDS+=($!); LAUNCHED+=($!)
  wait_serving 20 curl -s -o /dev/null --cacert "$T/ca.pem" --cert "$T/client.pem" --key "$T/client.key" "https://$NODE_IP:$PORT_1/v2/"
}
REGDIR=$WORK/registry-tls; mkdir -p "$REGDIR"
htpasswd -Bbc "$REGDIR/htpasswd" alice "$PW" >/dev/null 2>&1
AUTH="auth:
  htpasswd:
    realm: pullgate-test
    path: $REGDIR/htpasswd"
launch_on_free_ports 1 _launch_mtls_registry || { fail "the TLS registry did not start: $(tail -5 "$REGDIR/log")"; summary; exit 1; }
REG=$NODE_IP:$PORT_1
IMG=$REG/private/app:v1
check_out "the registry asks for a password from a client with the CA's certificate" 401 \
  curl -s -o /dev/null -w '%{http_code}' --cacert "$T/ca.pem" --cert "$T/client.pem" --key "$T/client.key" "https://$REG/v2/"
check "the registry refuses a TLS client without a certificate" \
  not curl -s -o /dev/null --cacert "$T/ca.pem" -u "alice:$PW" "https://$REG/v2/"
# skopeo reads Docker's certs.d layout too.
SK=$T/skopeo; mkdir -p "$SK"; cp "$T/ca.pem" "$SK/ca.crt"; cp "$T/client.pem" "$SK/client.cert"; cp "$T/client.key" "$SK/client.key"
skopeo copy --quiet --dest-cert-dir "$SK" --dest-creds "alice:$PW" "oci:$WORK/img:v1" "docker://$IMG" >/dev/null \
  || { fail "push the image over mutual TLS"; summary; exit 1; }

HOSTS=$WORK/hosts.d; mkdir -p "$HOSTS"
PG=$WORK/pullgate
pullgate_config "$PG"
printf '\n[registry]\nhosts_dir = "%s"\n' "$HOSTS" >> "$PG/config.toml"
start_pullgate "$PG" || exit 1
start_containerd "$V" "$PG/snapshotter.sock" || exit 1
check_containerd_version "$V"
pg() { local sub=$1; shift; "$PG_BIN" "$sub" --address "$PG/api.sock" "$@"; }

# hosts_toml DIR CLIENT: DIR/hosts.toml for the registry, its CA as ca.pem in DIR, and
# `client = CLIENT` (a TOML value; none when empty) under the server's own [host] entry.
hosts_toml() {
  rm -rf "$HOSTS"/*; mkdir -p "$1"; cp "$T/ca.pem" "$1/ca.pem"
  { printf 'server = "https://%s"\n\n[host."https://%s"]\n  capabilities = ["pull", "resolve"]\n  ca = "ca.pem"\n' "$REG" "$REG"
    [ -n "$2" ] && printf '  client = %s\n' "$2"; } > "$1/hosts.toml"
}
PORTDIR=$HOSTS/${REG%:*}_${REG#*:}_

log "1. hosts.toml in the host_port_ directory, relative ca and client [certificate, key]"
hosts_toml "$PORTDIR" '[["client.pem", "client.key"]]'
cp "$T/client.pem" "$T/client.key" "$PORTDIR/"
check "pullgate pull over mutual TLS (-n t1)" pg pull -n t1 --user "alice:$PW" "$IMG"
check_out "the image runs in t1 through the gate" "hello over mutual TLS" \
  ctr_ -n t1 run --rm --snapshotter pullgate "$IMG" tls-run-1
# (An https origin is shown without its scheme; plain http ones with it.)
# grant_origin NS ORIGIN: the first grant `pullgate grants` lists for NS names ORIGIN.
grant_origin() { [ "$(pg_grants "$1" | awk 'NR == 2 {print $3}')" = "$2" ]; }
check "t1's grant names the https origin" grant_origin t1 "$REG/private/app"
# --plain-http is for the registry's own server (containerd's DefaultScheme): the server the
# operator's hosts.toml names stays https, for ctr and for pullgate alike.
check "ctr content fetch --plain-http --hosts-dir: the named https server is used (-n t1c)" \
  ctr_ -n t1c content fetch --plain-http --hosts-dir "$HOSTS" --user "alice:$PW" "$IMG"
check "pullgate pull --plain-http: the named https server is used, not plain http (-n t1p)" pg pull -n t1p --plain-http --user "alice:$PW" "$IMG"
check "t1p's grant names the https origin" grant_origin t1p "$REG/private/app"

log "2. refused, nothing recorded"
# refused_no_grant DESC NS ERE: pullgate verify in NS fails with a message matching ERE, the
# namespace has no grant (after `grants` worked) and no image record, and no key line leaked.
refused_no_grant() {
  local out rc
  out=$(pg verify -n "$2" --user "alice:$PW" "$IMG" 2>&1); rc=$?
  if [ "$rc" -ne 0 ] && grep -qiE -- "$3" <<<"$out"; then pass "$1: refused (exit $rc: $out)"; else fail "$1: want a refusal matching /$3/, got exit $rc: $out"; fi
  check_no_grants "$1: no grant in $2" "$2"
  # (ctr's own log lines, such as 2.4's cgroup v1 warning, name no image.)
  local imgs; imgs=$(ctr_ -n "$2" images ls -q 2>&1); rc=$?
  if [ "$rc" -eq 0 ] && [ -z "$(grep -v 'level=' <<<"$imgs")" ]; then pass "$1: ctr lists no image in $2"; else fail "$1: ctr images ls in $2 (exit $rc): $imgs"; fi
  if grep -qF -- "$KEYLINE" - "$PG/log" <<<"$out"; then fail "$1: key material in the message or the log"; else pass "$1: no key material in the message or the log"; fi
}
hosts_toml "$PORTDIR" ""
refused_no_grant "no client certificate" t2 'certificate|tls|handshake|unavailable'
hosts_toml "$PORTDIR" '[["stranger.pem", "stranger.key"]]'
cp "$T/stranger.pem" "$T/stranger.key" "$PORTDIR/"
refused_no_grant "a client certificate of another CA" t3 'certificate|tls|handshake|unavailable'
hosts_toml "$PORTDIR" '[["client.pem", "stranger.key"]]'
cp "$T/client.pem" "$T/stranger.key" "$PORTDIR/"
refused_no_grant "a key that is not the certificate's" t4 'client certificate .*client.pem'
rm -rf "$HOSTS"/*; mkdir -p "$PORTDIR"
printf 'server = "https://%s"\nclient = [["%s", "%s"]]\n' "$REG" "$T/client.pem" "$T/client.key" > "$PORTDIR/hosts.toml"
refused_no_grant "no CA for the registry's certificate" t5 'certificate|tls|unavailable'

log "3. Docker's certs.d layout, and _default"
rm -rf "$HOSTS"/*; D=$HOSTS/$REG; mkdir -p "$D"
cp "$T/ca.pem" "$D/ca.crt"; cp "$T/client.pem" "$D/client.cert"; cp "$T/client.key" "$D/client.key"
check "certs.d layout (no hosts.toml): pullgate pull -n t6 (https by the registry's name)" pg pull -n t6 --user "alice:$PW" "$IMG"
check_out "the image runs in t6" "hello over mutual TLS" ctr_ -n t6 run --rm --snapshotter pullgate "$IMG" tls-run-6
rm -rf "$HOSTS"/*; mkdir -p "$HOSTS/_default"
cat "$T/client.pem" "$T/client.key" > "$HOSTS/_default/client-both.pem"; cp "$T/ca.pem" "$HOSTS/_default/ca.pem"
printf 'ca = "ca.pem"\nclient = "client-both.pem"\n' > "$HOSTS/_default/hosts.toml"
check "_default/hosts.toml, certificate and key in one file: pullgate pull -n t7" pg pull -n t7 --user "alice:$PW" "$IMG"
check_out "the image runs in t7" "hello over mutual TLS" ctr_ -n t7 run --rm --snapshotter pullgate "$IMG" tls-run-7

log "4. a registry whose only access control is the client certificate"
# The certificate is the node's, not a tenant's: a pull without credentials does not present it
# (the registry refuses), so nothing is recorded as served anonymously (public to every tenant).
REGDIR=$WORK/registry-certonly AUTH=""
launch_on_free_ports 1 _launch_mtls_registry || { fail "the certificate-only registry did not start: $(tail -5 "$REGDIR/log")"; summary; exit 1; }
CREG=$NODE_IP:$PORT_1
CIMG=$CREG/private/app:v1
skopeo copy --quiet --dest-cert-dir "$SK" "oci:$WORK/img:v1" "docker://$CIMG" >/dev/null || fail "push to the certificate-only registry"
check_out "the registry serves the manifest to the certificate alone (no password)" 200 \
  curl -s -o /dev/null -w '%{http_code}' --cacert "$T/ca.pem" --cert "$T/client.pem" --key "$T/client.key" \
  -H 'Accept: application/vnd.oci.image.manifest.v1+json' "https://$CREG/v2/private/app/manifests/v1"
rm -rf "$HOSTS"/*; D=$HOSTS/$CREG; mkdir -p "$D"
cp "$T/ca.pem" "$D/ca.crt"; cp "$T/client.pem" "$D/client.cert"; cp "$T/client.key" "$D/client.key"
out=$(pg pull -n a1 "$CIMG" 2>&1); rc=$?
# (The registry's refusal of a TLS handshake without a client certificate: bad_certificate, or
# TLS 1.3's certificate_required.)
if [ "$rc" -ne 0 ] && grep -qE 'received fatal alert: (BadCertificate|CertificateRequired)' <<<"$out"; then
  pass "a pull without credentials does not present the node's certificate: the registry refuses the handshake (exit $rc: $out)"
else fail "a pull without credentials: want the registry's refusal of a handshake without a certificate, got exit $rc: $out"; fi
check_no_grants "no grant in a1 after the credential-less pull" a1
check "control: containerd's own fetch without credentials (ctr content fetch --hosts-dir) presents the certificate and gets the image" \
  ctr_ -n c1 content fetch --hosts-dir "$HOSTS" "$CIMG"
check_refused_rc 4 "nothing of the image recorded by pullgate (inspect: not found)" 'not found|no record|unknown' '' pg inspect "$CIMG"
# With a credential the certificate is presented: the registry, which never asks for the
# credential, serves any (docs/using.md: such a registry is open to every tenant of the node,
# as it is to containerd's own pulls).
check "a pull with a credential presents the certificate and is served (-n a2)" pg pull -n a2 --user "alice:made-up" "$CIMG"
check "a2 holds a grant for it" eval '[ "$(pg_grants a2 | awk -v o="$CREG/private/app" '"'"'NR > 1 && $3 == o'"'"' | wc -l)" -ge 1 ]'
check_out "the image runs in a2" "hello over mutual TLS" ctr_ -n a2 run --rm --snapshotter pullgate "$CIMG" tls-run-a2
check_out "its layers are protected, not public (inspect)" "protected" pg inspect "$CIMG"

log "5. pullgate doctor --registries"
hosts_toml "$PORTDIR" '[["client.pem", "client.key"]]'
cp "$T/client.pem" "$T/client.key" "$PORTDIR/"
OUT=$("$PG_BIN" doctor --config "$PG/config.toml" --containerd-config "$WORK/containerd/config.toml" --registries 2>&1)
if grep -qE "ok +registry +registry $REG answers at https://$REG/v2/ \(HTTP 401\)" <<<"$OUT"; then pass "doctor: registry $REG (from ${PORTDIR##*/}) answers over mutual TLS"; else fail "doctor --registries: want $REG answering with 401 in:
$OUT"; fi

log "6. an http server with TLS settings: read as the running containerd reads it"
# containerd 1.6.25, 1.7.7 and 2.x ask `server = "http://HOST:PORT"` (a port other than 80)
# that has TLS settings over https first, and fall back to plain http only when the port
# answers plain http; earlier ones (Debian's 1.6.20) ask it as written. pullgate asks it as the
# running containerd does: with https first, ctr and pullgate reach the TLS registry, and
# pullgate names the origin that answered; as written, both are refused by its TLS port.
CV=$(ctr_ version 2>/dev/null | awk '/^Server:/ {s=1} s && $1=="Version:" {print $2; exit}')
FIRST=$(python3 -c 'import re,sys; v=tuple(int(x) for x in re.findall(r"\d+", sys.argv[1])[:3]); print(int(v >= (2,) or v[:2] == (1,7) and v[2] >= 7 or v[:2] == (1,6) and v[2] >= 25))' "$CV")
hosts_toml "$PORTDIR" '[["client.pem", "client.key"]]'
cp "$T/client.pem" "$T/client.key" "$PORTDIR/"
sed -i "s#https://$REG#http://$REG#g" "$PORTDIR/hosts.toml"
check "(the hosts.toml names http://$REG, with a ca and a client certificate)" grep -qxF "server = \"http://$REG\"" "$PORTDIR/hosts.toml"
# reached WHAT NS IMAGE ORIGIN URL: ctr (content fetch) and pullgate (pull, then a run through
# the gate) reach the registry through the hosts directory, pullgate's grant names ORIGIN (the
# scheme that answered), `pullgate inspect` finds it by the reference, and doctor --registries
# finds the registry answering at URL.
reached() {
  local what=$1 ns=$2 img=$3 origin=$4 url=$5 reg=${3%%/*}
  check "ctr content fetch reaches $what (-n ${ns}c)" ctr_ -n "${ns}c" content fetch --hosts-dir "$HOSTS" --user "alice:$PW" "$img"
  check "pullgate pull reaches $what (-n $ns)" pg pull -n "$ns" --user "alice:$PW" "$img"
  check "$ns's grant names the origin $origin" grant_origin "$ns" "$origin"
  check_out "the image runs in $ns" "hello over mutual TLS" ctr_ -n "$ns" run --rm --snapshotter pullgate "$img" "tls-run-$ns"
  check "pullgate inspect finds the image by its reference (names are looked up under the origin that answered)" pg inspect "$img"
  local out; out=$("$PG_BIN" doctor --config "$PG/config.toml" --containerd-config "$WORK/containerd/config.toml" --registries 2>&1)
  if grep -qE "ok +registry +registry $reg answers at $url \(HTTP 401\)" <<<"$out"; then pass "doctor: $what answers at $url"; else fail "doctor --registries: want $reg answering at $url in:
$out"; fi
}
if [ "$FIRST" = 1 ]; then
  reached "the TLS registry (containerd $CV: https first, answered)" t8 "$IMG" "$REG/private/app" "https://$REG/v2/"
else
  check_err "containerd $CV asks it as written: ctr content fetch is refused by the TLS port (-n t8c)" "400" \
    ctr_ -n t8c content fetch --hosts-dir "$HOSTS" --user "alice:$PW" "$IMG"
  check_err "and so does pullgate (plain http to the TLS port: HTTP 400) (-n t8)" "400" pg pull -n t8 --user "alice:$PW" "$IMG"
  check_no_grants "no grant in t8" t8
fi
start_registry plain htpasswd alice "$PW" || { fail "start a plain http registry"; summary; exit 1; }
push_image "$WORK/img" v1 "$REG_plain/private/app:v1" "alice:$PW" || fail "push to the plain http registry"
# Reached under another name (the server is then a mirror, told with ?ns=): its origin names
# the server that answered and the registry it answered for.
PIMG=plain.example:5000/private/app:v1
rm -rf "$HOSTS"/*; D=$HOSTS/plain.example_5000_; mkdir -p "$D"
# (The TLS setting under the server's own [host] table: containerd before 1.7.32 ignores a
# hosts.toml without one; to it the table is a mirror tried first, to pullgate the server.)
printf 'server = "http://%s"\n\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n  skip_verify = true\n' "$REG_plain" "$REG_plain" > "$D/hosts.toml"
reached "the plain http registry (skip_verify set: plain http, after https when asked first)" t9 "$PIMG" \
  "http://$REG_plain/private/app?ns=plain.example%3A5000" "http://$REG_plain/v2/"

log "7. a registry on the loopback whose server no hosts.toml names"
# containerd (docker.IsLocalhost: localhost or a loopback address) asks it without --plain-http
# in plain http (1.6 before 1.6.25), or over https without checking the certificate first and
# in plain http when the port answers plain http (1.6.25, 1.7.7 and later): pullgate as the
# running containerd.
rm -rf "${HOSTS:?}"/*
for name in "$REG_plain" "localhost:${REG_plain#*:}"; do
  ns=t10; [ "${name%%:*}" = localhost ] && ns=t11
  check "ctr content fetch without --plain-http reaches the plain http registry as $name (-n ${ns}c)" \
    ctr_ -n "${ns}c" content fetch --hosts-dir "$HOSTS" --user "alice:$PW" "$name/private/app:v1"
  check "pullgate pull without --plain-http reaches it (-n $ns)" pg pull -n "$ns" --user "alice:$PW" "$name/private/app:v1"
  check "$ns's grant names the plain http origin" grant_origin "$ns" "http://$name/private/app"
  check_out "the image runs in $ns" "hello over mutual TLS" ctr_ -n "$ns" run --rm --snapshotter pullgate "$name/private/app:v1" "tls-run-$ns"
done
_launch_loopback_tls() {
  registry_config "$LDIR" "$PORT_1" "  tls:
    certificate: $T/loopback.pem
    key: $T/loopback.key
auth:
  htpasswd:
    realm: pullgate-test
    path: $WORK/registry-tls/htpasswd"
  docker-registry serve "$LDIR/config.yml" >>"$LDIR/log" 2>&1 &
  PIDS+=($!); LAUNCHED+=($!)
  wait_serving 20 curl -sk -o /dev/null "https://127.0.0.1:$PORT_1/v2/"
}
LDIR=$WORK/registry-loopback-tls; mkdir -p "$LDIR/data"
launch_on_free_ports 1 _launch_loopback_tls || { fail "the loopback TLS registry did not start: $(tail -5 "$LDIR/log")"; summary; exit 1; }
LREG=127.0.0.1:$PORT_1
skopeo copy --quiet --dest-tls-verify=false --dest-creds "alice:$PW" "oci:$WORK/img:v1" "docker://$LREG/private/app:v1" >/dev/null \
  || fail "push to the loopback TLS registry"
check "(its certificate is from a CA nothing here trusts: curl refuses it)" not curl -s -o /dev/null "https://$LREG/v2/"
# --plain-http (containerd's DefaultScheme) asks it in plain http: refused by the TLS port.
check_err "ctr content fetch --plain-http is refused by the loopback TLS registry (-n t13c)" "400" \
  ctr_ -n t13c content fetch --plain-http --hosts-dir "$HOSTS" --user "alice:$PW" "$LREG/private/app:v1"
check_err "and so is pullgate pull --plain-http (-n t13)" "400" pg pull -n t13 --plain-http --user "alice:$PW" "$LREG/private/app:v1"
check_no_grants "no grant in t13" t13
LDIRH=$HOSTS/127.0.0.1_${LREG#*:}_
if [ "$FIRST" = 1 ]; then
  # containerd asks it over https without checking its certificate; pullgate checks it (a
  # loopback port answers for whichever local process holds it), and says how to trust it.
  check "ctr content fetch reaches the loopback TLS registry, unverified (containerd $CV) (-n t12c)" \
    ctr_ -n t12c content fetch --hosts-dir "$HOSTS" --user "alice:$PW" "$LREG/private/app:v1"
  check_err "pullgate pull checks its certificate: refused, saying where its CA goes (-n t12)" \
    "certificate.*put its CA in the registry's hosts directory" pg pull -n t12 --user "alice:$PW" "$LREG/private/app:v1"
  check_no_grants "no grant in t12" t12
  mkdir -p "$LDIRH"; cp "$T/otherca.pem" "$LDIRH/ca.crt"
  check "with its CA in the registry's directory (certs.d), pullgate pull reaches it (-n t12)" pg pull -n t12 --user "alice:$PW" "$LREG/private/app:v1"
  check "t12's grant names the https origin" grant_origin t12 "$LREG/private/app"
  check_out "the image runs in t12" "hello over mutual TLS" ctr_ -n t12 run --rm --snapshotter pullgate "$LREG/private/app:v1" tls-run-t12
  # A CA file is a TLS setting to containerd: with --plain-http too, https first.
  check "with the CA file, ctr content fetch --plain-http reaches it over https first (-n t14c)" \
    ctr_ -n t14c content fetch --plain-http --hosts-dir "$HOSTS" --user "alice:$PW" "$LREG/private/app:v1"
  check "and so does pullgate pull --plain-http (-n t14)" pg pull -n t14 --plain-http --user "alice:$PW" "$LREG/private/app:v1"
  check "t14's grant names the https origin" grant_origin t14 "$LREG/private/app"
else
  check_err "containerd $CV asks it in plain http: ctr content fetch is refused by the TLS port (-n t12c)" "400" \
    ctr_ -n t12c content fetch --hosts-dir "$HOSTS" --user "alice:$PW" "$LREG/private/app:v1"
  check_err "and so does pullgate (-n t12)" "400" pg pull -n t12 --user "alice:$PW" "$LREG/private/app:v1"
  check_no_grants "no grant in t12" t12
  mkdir -p "$LDIRH"; cp "$T/otherca.pem" "$LDIRH/ca.crt"
  check_err "with its CA file too, containerd $CV asks it in plain http: refused (-n t14c)" "400" \
    ctr_ -n t14c content fetch --plain-http --hosts-dir "$HOSTS" --user "alice:$PW" "$LREG/private/app:v1"
  check_err "and so does pullgate (-n t14)" "400" pg pull -n t14 --plain-http --user "alice:$PW" "$LREG/private/app:v1"
  check_no_grants "no grant in t14" t14
fi

summary "TLS registries (containerd $V)"
