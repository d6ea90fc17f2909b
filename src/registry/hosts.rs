//! hosts: containerd's registry host directories, read as containerd reads them, for the
//! scheme, address and TLS settings of a registry's own server. For registry `host` under a
//! hosts directory the first of `host_port_` (a host with a port), `host` and `_default` that
//! exists is the host's directory; in it `hosts.toml`, or without one Docker's certs.d layout
//! (`*.crt` CA files, `*.cert` client certificates with their `*.key`). Relative paths are
//! relative to that directory. Mirrors (`[host."..."]` entries that are not the server) are
//! ignored on purpose: verification goes to the origin, never a mirror.
//! Two sources, trusted differently: the daemon's `[registry] hosts_dir` (the operator's; every
//! setting applies) and a request's `--hosts-dir`, which the CLI reads in its own process and
//! from which only the `server` is taken (a request may not bring its own TLS trust). Files are
//! read only if they are regular files of at most 64 KiB, and errors never quote their content.
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum HostsError {
    #[error("{path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Endpoint {
    /// `http://host:port` or `https://host:port`, no trailing slash.
    pub base: String,
    pub skip_verify: bool,
    pub ca: Vec<PathBuf>,
    /// Client certificates for TLS client authentication, in the order given.
    pub client: Vec<ClientPair>,
    /// The registry this server is asked to answer for, when it is a mirror or proxy
    /// ([`is_proxy`]): containerd's `?ns=` on every manifest and blob request, and part of the
    /// origin (a proxy serves each registry its own content).
    pub ns: Option<String>,
    /// An `http://` server of the operator's hosts.toml with TLS settings of its own: its port
    /// as written (as Go's `net.SplitHostPort` reads it; empty without one). Whether it is asked
    /// over https first depends on the containerd version ([`Endpoint::read_as`]).
    pub tls_on_http: Option<String>,
    /// Set by [`Endpoint::read_as`] when `base` is the https form of such a server: the server
    /// as written (plain http), used when the https port answers plain http.
    pub plain_fallback: Option<String>,
    /// With `plain_fallback`: a refused connection or one not accepted in time falls back too
    /// (containerd 1.7.24 on and 2.x, a server written without a port: https on 443, then http
    /// on 80).
    pub refused_falls_back: bool,
    /// The registry's own server (no server named) for a loopback registry, as containerd's
    /// `docker.IsLocalhost` tells it ([`is_localhost`]): the registry's name as written and
    /// whether `--plain-http` was given. By version containerd asks it in plain http, over https
    /// first, or over https only ([`Endpoint::read_as`]).
    pub loopback: Option<(String, bool)>,
}

/// How a containerd version asks an `http://` server with TLS settings (its `explicitTLS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HttpWithTls {
    /// As written, plain http, and a loopback registry's own server over https like any
    /// other's (before 1.6.9: no loopback default yet).
    BeforeLoopback,
    /// As written, plain http (1.6.9 to 1.6.24, 1.7 before 1.7.7).
    AsWritten,
    /// Over https first when the server names a port other than 80 (1.6.25 on, 1.7.8 to 1.7.23).
    PortNot80,
    /// Over https first unless the port is 80; without a port https on 443, then plain http on
    /// 80 also when 443 refuses the connection (1.7.24 on, 2.x; also the reading when the version
    /// is not known: the probe carries no credential).
    #[default]
    UnlessPort80,
    /// Over https first whatever the port (1.7.7).
    Always,
}

impl Endpoint {
    /// The endpoint as a containerd reading `r` asks it: an http server with TLS settings
    /// becomes its https form with the server as written as `plain_fallback`, or stays as
    /// written. Nothing changes for any other endpoint.
    pub fn read_as(&mut self, r: HttpWithTls) {
        if let Some((host, plain_http)) = self.loopback.take() {
            if self.read_loopback_as(r, &host, plain_http) {
                return;
            }
        }
        let Some(port) = self.tls_on_http.take() else { return };
        let first = match r {
            HttpWithTls::BeforeLoopback | HttpWithTls::AsWritten => false,
            HttpWithTls::PortNot80 => !port.is_empty() && port != "80",
            HttpWithTls::UnlessPort80 => port != "80",
            HttpWithTls::Always => true,
        };
        let Some(https) = https_form(&self.base, &port).filter(|_| first) else { return };
        self.refused_falls_back = port.is_empty() && r == HttpWithTls::UnlessPort80;
        self.plain_fallback = Some(std::mem::replace(&mut self.base, https));
    }
}

impl Endpoint {
    /// containerd's default server for loopback registry `host` (`base` its plain http form):
    /// from 1.6.9 http with skip_verify, which is an http server with TLS settings (plain http
    /// before 1.6.25 and 1.7.7; 1.7.7 https first also with `--plain-http`); from 1.6.25 and
    /// 1.7.8, without `--plain-http`, https only when the port is none or 443, plain http on
    /// port 80, else https first again. pullgate checks the certificate all the same, unless
    /// the operator's hosts.toml says `skip_verify` (containerd skips it): a loopback port
    /// answers for whichever local process holds it, and what an unverified answer is worth
    /// must not be recorded beside what a verified one is. Its https forms keep the name as
    /// written (`localhost:443`, a port `05000`), as the registry's own server before this
    /// default did. True when the endpoint is settled (`read_as` has nothing left to do).
    fn read_loopback_as(&mut self, r: HttpWithTls, host: &str, plain_http: bool) -> bool {
        use HttpWithTls::*;
        let port = written_port(host);
        if plain_http {
            // DefaultScheme http: plain, or https first for TLS settings (parse and certs_d mark
            // them); 1.7.7 sets skip_verify there, which is one.
            if r == Always {
                self.tls_on_http = Some(port.to_string());
            }
            return false;
        }
        self.tls_on_http = None;
        let https = format!("https://{host}");
        match r {
            AsWritten => {}
            BeforeLoopback => self.base = https,
            PortNot80 | UnlessPort80 if matches!(port, "" | "443") => self.base = https,
            PortNot80 | UnlessPort80 if port == "80" => {}
            Always | PortNot80 | UnlessPort80 => self.plain_fallback = Some(std::mem::replace(&mut self.base, https)),
        }
        true
    }
}

/// The https form of http base `base` whose port is written `port` (empty: none): the base's
/// name with https when it writes the port so; else (a named server, its base normalized) no
/// port for https's own, a port written 0080 is 80. None if `base` cannot be read.
fn https_form(base: &str, port: &str) -> Option<String> {
    // The name as written when the base keeps it (the registry's own server; containerd swaps
    // the scheme alone): another spelling of it is another origin.
    let authority = base.strip_prefix("http://")?;
    if written_port(authority) == port {
        return Some(format!("https://{authority}"));
    }
    let u = url::Url::parse(base).ok()?;
    let host = u.host_str()?;
    match (port.is_empty(), u.port_or_known_default()) {
        (true, _) | (false, Some(443)) => Some(format!("https://{host}")),
        (false, Some(p)) => Some(format!("https://{host}:{p}")),
        (false, None) => None,
    }
}

/// containerd's `docker.IsLocalhost`: registry `host` (its port split off as Go's
/// `net.SplitHostPort` does; a bracketed address without a port is not split) is `localhost`
/// or a loopback address as Go's `net.ParseIP` reads it (an IPv4-mapped one too).
pub fn is_localhost(host: &str) -> bool {
    let name = split_host_port(host).map_or(host, |(name, _)| name);
    if name == "localhost" {
        return true;
    }
    match name.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(a)) => a.is_loopback(),
        Ok(std::net::IpAddr::V6(a)) => a.is_loopback() || a.to_ipv4_mapped().is_some_and(|m| m.is_loopback()),
        Err(_) => false,
    }
}

/// The port of `host[:port]` as Go's `net.SplitHostPort` gives it (as written; empty when it
/// names none or cannot be split, as containerd takes a failed split).
fn written_port(authority: &str) -> &str {
    split_host_port(authority).map_or("", |(_, port)| port)
}

/// Go's `net.SplitHostPort`: host and port, None where it fails (no port; a colon in an
/// unbracketed host; anything between `]` and the port's colon; a stray bracket).
fn split_host_port(hostport: &str) -> Option<(&str, &str)> {
    let colon = hostport.rfind(':')?;
    let (host, from, after) = if hostport.starts_with('[') {
        let end = hostport.find(']')?;
        if end + 1 != colon {
            return None;
        }
        (&hostport[1..end], 1, end + 1)
    } else {
        let host = &hostport[..colon];
        if host.contains(':') {
            return None;
        }
        (host, 0, 0)
    };
    if hostport[from..].contains('[') || hostport[after..].contains(']') {
        return None;
    }
    Some((host, &hostport[colon + 1..]))
}

/// A client certificate file and its private key's file (None: the key is in the
/// certificate's file).
#[derive(Debug, Clone, PartialEq)]
pub struct ClientPair {
    pub cert: PathBuf,
    pub key: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
struct HostsFile {
    server: Option<String>,
    /// Set at all (even false), it is a TLS setting to containerd (`Endpoint::tls_on_http`).
    skip_verify: Option<bool>,
    ca: Option<OneOrMany>,
    client: Option<toml::Value>,
    #[serde(default)]
    host: BTreeMap<String, HostEntry>,
    #[serde(flatten)]
    checked: Checked,
}

#[derive(Debug, Deserialize)]
struct HostEntry {
    skip_verify: Option<bool>,
    ca: Option<OneOrMany>,
    client: Option<toml::Value>,
    #[serde(flatten)]
    checked: Checked,
}

/// Settings pullgate does not use but containerd validates: a file containerd cannot read
/// (it then logs the error and falls back to the directory's certificate files and the
/// registry's default address) must not send pullgate elsewhere than containerd.
#[derive(Debug, Deserialize)]
struct Checked {
    capabilities: Option<Vec<String>>,
    #[allow(dead_code)]
    header: Option<BTreeMap<String, OneOrMany>>,
    #[allow(dead_code)]
    override_path: Option<bool>,
}

impl Checked {
    fn check(&self) -> Result<(), String> {
        for c in self.capabilities.iter().flatten() {
            if !matches!(c.to_ascii_lowercase().as_str(), "pull" | "resolve" | "push") {
                return Err(format!("unknown capability {:?}: containerd refuses this file (and falls back to the default server), so pullgate does too", crate::reference::excerpt(c)));
            }
        }
        Ok(())
    }
}

impl HostsFile {
    /// What containerd validates in every table (the server's and the mirrors').
    fn check(&self, base: &Path) -> Result<(), String> {
        self.checked.check()?;
        for h in self.host.values() {
            h.checked.check()?;
            if let Some(c) = &h.client {
                // A mirror's client setting is not used, but containerd refuses a malformed one.
                client_pairs(c.clone(), base)?;
            }
        }
        Ok(())
    }

    fn has_tls_settings(&self) -> bool {
        self.skip_verify.is_some() || self.ca.is_some() || self.client.is_some() || self.host.values().any(|h| h.skip_verify.is_some() || h.ca.is_some() || h.client.is_some())
    }
}

/// Largest hosts.toml read.
pub const MAX_HOSTS_FILE: u64 = 64 << 10;

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    /// The paths, relative ones taken from `base` (the host's directory), as containerd does.
    fn paths(self, base: &Path) -> Vec<PathBuf> {
        match self {
            OneOrMany::One(s) => vec![base.join(s)],
            OneOrMany::Many(v) => v.into_iter().map(|p| base.join(p)).collect(),
        }
    }
}

/// containerd's forms of `client`: one file holding certificate and key, a list of such files,
/// or a list of `[certificate, key]` pairs (an empty key: the key is in the certificate's file).
fn client_pairs(v: toml::Value, base: &Path) -> Result<Vec<ClientPair>, String> {
    use toml::Value;
    let one = |cert: &str, key: Option<&str>| ClientPair { cert: base.join(cert), key: key.map(|k| base.join(k)) };
    let bad = || "client must be a file, a list of files, or a list of [certificate, key] pairs of files".to_string();
    match v {
        Value::String(s) => Ok(vec![one(&s, None)]),
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(one(s, None)),
                Value::Array(pair) => match pair.as_slice() {
                    // containerd reads an empty key name as the host's directory, and fails.
                    [Value::String(_), Value::String(k)] if k.is_empty() => Err("client: a pair's key file is empty (containerd fails on it; give the key's file, or the certificate's file alone when it holds the key)".to_string()),
                    [Value::String(c), Value::String(k)] => Ok(one(c, Some(k))),
                    _ => Err(bad()),
                },
                _ => Err(bad()),
            })
            .collect(),
        _ => Err(bad()),
    }
}

/// Docker Hub's registry name, and the host that serves its API (containerd's ConfigureHosts
/// sends `docker.io` there, always over https, when no hosts.toml names a server; its resolver
/// counts the two as one host).
pub const DOCKER_HUB: &str = "docker.io";
pub const DOCKER_HUB_API: &str = "registry-1.docker.io";

/// The registry's own server when no hosts.toml names one: `host` over https (http with
/// `--plain-http`), but Docker Hub's API host over https whatever `--plain-http` says.
fn default_server(host: &str, plain_http: bool) -> String {
    if host == DOCKER_HUB {
        return format!("https://{DOCKER_HUB_API}");
    }
    format!("{}://{host}", if plain_http { "http" } else { "https" })
}

/// The registry's own server as an endpoint ([`default_server`]); a loopback registry's
/// ([`is_localhost`]) in its plain http form, marked for [`Endpoint::read_as`].
fn default_endpoint(host: &str, plain_http: bool) -> Endpoint {
    let loopback = host != DOCKER_HUB && is_localhost(host);
    Endpoint { base: default_server(host, plain_http || loopback), loopback: loopback.then(|| (host.to_string(), plain_http)), ..Endpoint::default() }
}

/// Whether requests for registry `registry` sent to a server that names itself `authority`
/// (`host[:port]` as the server value writes it, Go's `url.URL.Host`) go through a mirror or
/// proxy, as containerd's resolver decides when it adds `?ns=REGISTRY` to them: the server is
/// another host, and not Docker Hub's API host for docker.io. Only for a named server: without
/// one the registry's own server is used and nothing is added.
pub fn is_proxy(registry: &str, authority: &str) -> bool {
    registry != authority && !(registry == DOCKER_HUB && authority == DOCKER_HUB_API)
}

/// The endpoint at server `server` (a named one) for registry `host`, over the scheme it names
/// (https when none): `--plain-http` does not change a named server's scheme, as containerd's
/// `DefaultScheme` applies only to the registry's own server (a downgrade the operator's
/// hosts.toml did not ask for would send the tenant's credential in the clear).
fn at_server(server: &str, host: &str) -> Result<Endpoint, String> {
    let (base, authority) = normalize_server(server)?;
    let ns = is_proxy(host, &authority).then(|| host.to_string());
    Ok(Endpoint { base, ns, ..Endpoint::default() })
}

/// The endpoint for registry `host`: `server` (a request's, from [`request_server`]) if given,
/// with no TLS settings of its own; else `hosts.toml` in the operator's `hosts_dir` if it has
/// one for the host; else the registry's own server ([`default_server`]). `--plain-http`
/// applies to the registry's own server only.
pub fn endpoint(host: &str, hosts_dir: Option<&Path>, plain_http: bool, server: Option<&str>) -> Result<Endpoint, HostsError> {
    if let Some(s) = server {
        let bad = |reason| HostsError::Invalid { path: PathBuf::from("(request)"), reason };
        return at_server(s, host).map_err(bad);
    }
    let default = default_endpoint(host, plain_http);
    let Some(dir) = hosts_dir else { return Ok(default) };
    let Some(hdir) = host_dir(dir, host)? else { return Ok(default) };
    let path = hdir.join("hosts.toml");
    match read_hosts_file(&path)? {
        Some(text) if !text.is_empty() => parse(&text, host, plain_http, &hdir).map_err(|reason| HostsError::Invalid { path, reason }),
        _ => certs_d(&hdir, default),
    }
}

/// The directory containerd reads for registry `host` under `root`: the first of
/// `host_port_` (when `host` has a port), `host` and `_default` that exists. `host` is a
/// reference's registry name (no `/`, no `..`).
pub fn host_dir(root: &Path, host: &str) -> Result<Option<PathBuf>, HostsError> {
    let mut names = Vec::with_capacity(3);
    if let Some((name, port)) = host.rsplit_once(':').filter(|(n, _)| !n.is_empty()) {
        names.push(format!("{name}_{port}_"));
    }
    names.push(host.to_string());
    names.push("_default".to_string());
    for name in names {
        let path = root.join(name);
        match std::fs::metadata(&path) {
            Ok(m) if m.is_dir() => return Ok(Some(path)),
            Ok(_) => return Err(HostsError::Invalid { path, reason: "not a directory".into() }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(HostsError::Invalid { path, reason: e.to_string() }),
        }
    }
    Ok(None)
}

/// The registry a host directory's name stands for: `host_port_` is `host:port`; None for
/// `_default` (every registry without a directory of its own).
pub fn host_of_dir(name: &str) -> Option<String> {
    if name == "_default" {
        return None;
    }
    let port_form = name.strip_suffix('_').and_then(|n| n.rsplit_once('_')).filter(|(h, p)| !h.is_empty() && !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    Some(match port_form {
        Some((h, p)) => format!("{h}:{p}"),
        None => name.to_string(),
    })
}

/// A host directory without hosts.toml, read as Docker's certs.d (containerd's fallback):
/// every `*.crt` a CA file, every `*.cert` a client certificate with the `*.key` of the same
/// name if there is one (else the key is in the certificate's file); in file-name order.
fn certs_d(dir: &Path, mut ep: Endpoint) -> Result<Endpoint, HostsError> {
    let bad = |e: std::io::Error| HostsError::Invalid { path: dir.to_path_buf(), reason: e.to_string() };
    let mut names: Vec<String> = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(bad)? {
        let entry = entry.map_err(bad)?;
        if !entry.file_type().map_err(bad)?.is_dir() {
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    names.sort();
    for name in names {
        if name.ends_with(".crt") {
            ep.ca.push(dir.join(&name));
        } else if let Some(stem) = name.strip_suffix(".cert") {
            let key = dir.join(format!("{stem}.key"));
            let key = match std::fs::metadata(&key) {
                Ok(_) => Some(key),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(HostsError::Invalid { path: key, reason: e.to_string() }),
            };
            ep.client.push(ClientPair { cert: dir.join(&name), key });
        }
    }
    // Certificate files are TLS settings to containerd: an http server (`--plain-http`) with
    // them is asked as one (`read_as`).
    if !ep.ca.is_empty() || !ep.client.is_empty() {
        if let Some(authority) = ep.base.strip_prefix("http://") {
            ep.tls_on_http = Some(written_port(authority).to_string());
        }
    }
    Ok(ep)
}

/// Reads a hosts.toml: None when there is none; an error unless it is a regular file (a
/// symlink to one is followed) of at most [`MAX_HOSTS_FILE`] bytes.
pub fn read_hosts_file(path: &Path) -> Result<Option<String>, HostsError> {
    let bad = |reason: String| HostsError::Invalid { path: path.to_path_buf(), reason };
    match read_small_file(path, MAX_HOSTS_FILE) {
        Ok(bytes) => String::from_utf8(bytes).map(Some).map_err(|_| bad("not UTF-8 text".into())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(bad(e.to_string())),
    }
}

/// Largest CA, client certificate or key file read.
pub const MAX_CERT_FILE: u64 = 1 << 20;

/// A file of at most `max` bytes, only if it is a regular file (a symlink to one is followed).
/// Opened non-blocking, so a FIFO put in its place cannot stall the reader, and never read
/// past `max`. Errors say what is wrong, never the content.
pub fn read_small_file(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Error, ErrorKind, Read};
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY).open(path)?;
    let meta = file.metadata()?;
    let too_big = || Error::new(ErrorKind::InvalidData, format!("larger than {max} bytes"));
    if !meta.is_file() {
        return Err(Error::new(ErrorKind::InvalidInput, "not a regular file"));
    }
    if meta.len() > max {
        return Err(too_big());
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(too_big());
    }
    Ok(bytes)
}

/// The TOML, or an error that says where it is wrong without quoting the file (which may be
/// anything a symlink points at).
fn parse_toml(text: &str) -> Result<HostsFile, String> {
    toml::from_str(text).map_err(|e: toml::de::Error| {
        let at = e.span().map(|sp| {
            let line = text[..sp.start.min(text.len())].matches('\n').count() + 1;
            format!(" (line {line})")
        });
        format!("not valid TOML{}: {}", at.unwrap_or_default(), e.message())
    })
}

/// A server or `[host."..."]` name as containerd reads it: without a scheme (not starting with
/// "http"), https is meant.
fn with_scheme(server: &str) -> std::borrow::Cow<'_, str> {
    if server.starts_with("http") { server.into() } else { format!("https://{server}").into() }
}

/// `scheme://host[:port]` of a server URL (https when it names none, as containerd reads it),
/// and its `host[:port]` as written (what containerd compares with the registry's name).
fn normalize_server(server: &str) -> Result<(String, String), String> {
    // A value naming a user may hold a password: never quoted (errors reach tenants and logs).
    let shown = if server.contains('@') { "(not shown: it names a user)".to_string() } else { format!("{:?}", crate::reference::excerpt(server)) };
    let full = with_scheme(server);
    // Only what Go's url.Parse reads as the same scheme and host: the url crate would also take
    // "https:/h", "https:h", a backslash, a tab, a %-escape or a non-ASCII letter for a host
    // that containerd reads as none (the registry itself) or refuses.
    let plain = full.strip_prefix("https://").or_else(|| full.strip_prefix("http://"));
    if plain.is_none_or(|rest| rest.bytes().any(|b| !(b.is_ascii_graphic()) || matches!(b, b'\\' | b'%'))) {
        return Err(format!("server {shown} must be http://HOST[:PORT] or https://HOST[:PORT] (or HOST[:PORT], https), in plain ASCII without escapes"));
    }
    let url = url::Url::parse(&full).map_err(|e| format!("server {shown}: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!("server {shown} must be an http or https URL"));
    }
    if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() || url.password().is_some() || !matches!(url.path(), "" | "/" | "/v2" | "/v2/") {
        return Err(format!("server {shown} must not carry credentials, a path, query or fragment"));
    }
    let scheme = url.scheme();
    let authority = match url.port() {
        Some(p) => format!("{}:{p}", url.host_str().unwrap_or_default()),
        None => url.host_str().unwrap_or_default().to_string(),
    };
    if url.scheme() == "https" && authority == DOCKER_HUB {
        return Err(format!("server {shown}: docker.io serves no registry API; Docker Hub's is https://{DOCKER_HUB_API}, containerd's default for docker.io"));
    }
    // Userinfo, escapes and whitespace were refused above: the host as written is what comes
    // before the first '/'.
    let written = plain.unwrap_or_default().split('/').next().unwrap_or_default().to_string();
    Ok((format!("{scheme}://{authority}"), written))
}

/// The server a request's hosts.toml names for registry `host` (None: the registry itself).
/// Only the server is taken from a request: TLS settings in it are refused.
pub fn request_server(text: &str, host: &str) -> Result<Option<String>, String> {
    let f = parse_toml(text)?;
    f.check(Path::new("/"))?;
    if f.has_tls_settings() {
        return Err("TLS settings (skip_verify, ca, client) come from the daemon's [registry] hosts_dir, not from a request's hosts.toml".into());
    }
    match &f.server {
        None => Ok(None),
        // As written (with its scheme): the daemon normalizes it, and tells from the host as
        // written whether it is a proxy, as containerd does.
        Some(s) => normalize_server(s).map(|_| Some(with_scheme(s).into_owned())).map_err(|e| format!("{e} (registry {})", crate::reference::excerpt(host))),
    }
}

/// Parses the text of a hosts.toml for registry `host` (the operator's: TLS settings apply),
/// found in directory `base` (relative paths are relative to it).
pub fn parse(text: &str, host: &str, plain_http: bool, base: &Path) -> Result<Endpoint, String> {
    let f = parse_toml(text)?;
    f.check(base)?;
    let (server, mut ep) = match f.server.as_deref() {
        Some(s) => (with_scheme(s).into_owned(), at_server(s, host)?),
        None => {
            // As written, as without a hosts.toml: another spelling of the name is another
            // origin (a tenant's spelling must not reach another directory's trust under the
            // origin of this one's).
            (default_server(host, plain_http), default_endpoint(host, plain_http))
        }
    };
    // containerd's explicitTLS: skip_verify set at all, a ca (even an empty list), or (once
    // read, below) a client pair; `client = []` names none.
    let mut tls_set = f.skip_verify.is_some() || f.ca.is_some();
    ep.skip_verify = f.skip_verify.unwrap_or(false);
    ep.ca = f.ca.map(|c| c.paths(base)).unwrap_or_default();
    ep.client = f.client.map(|c| client_pairs(c, base)).transpose()?.unwrap_or_default();
    // TLS settings given under the server's own [host."..."] entry apply to it too.
    for (name, h) in f.host {
        if with_scheme(&name).trim_end_matches('/') == server.trim_end_matches('/') {
            tls_set |= h.skip_verify.is_some() || h.ca.is_some();
            ep.skip_verify |= h.skip_verify.unwrap_or(false);
            ep.ca.extend(h.ca.map(|c| c.paths(base)).unwrap_or_default());
            ep.client.extend(h.client.map(|c| client_pairs(c, base)).transpose()?.unwrap_or_default());
        }
    }
    if let Some(authority) = server.strip_prefix("http://").filter(|_| tls_set || !ep.client.is_empty()) {
        ep.tls_on_http = Some(written_port(authority.split('/').next().unwrap_or_default()).to_string());
    }
    Ok(ep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_and_tls() {
        let root = Path::new("/etc/containerd/certs.d/reg.io");
        let e = parse("server = \"http://127.0.0.1:5000\"\n", "127.0.0.1:5000", false, root).unwrap();
        assert_eq!(e.base, "http://127.0.0.1:5000");
        let e = parse(
            "server = \"https://reg.io\"\n[host.\"https://reg.io\"]\nskip_verify = true\nca = [\"/etc/ca.pem\"]\n[host.\"https://mirror.io\"]\nca = \"/m.pem\"\n",
            "reg.io",
            false,
            root,
        )
        .unwrap();
        assert_eq!(e.base, "https://reg.io");
        assert!(e.skip_verify);
        assert_eq!(e.ca, vec![PathBuf::from("/etc/ca.pem")]);
        assert_eq!(parse("", "reg.io", true, root).unwrap().base, "http://reg.io");
        // Without a scheme, https is meant (containerd's reading), for the server and the
        // [host."..."] entry whose TLS settings apply to it.
        let e = parse("server = \"reg.io:5000\"\n[host.\"reg.io:5000\"]\nskip_verify = true\n", "reg.io", false, root).unwrap();
        assert_eq!(e.base, "https://reg.io:5000");
        assert!(e.skip_verify);
        // --plain-http does not make a named server plain (containerd's DefaultScheme).
        assert_eq!(parse("server = \"reg.io\"\n", "reg.io", true, root).unwrap().base, "https://reg.io");
        assert_eq!(request_server("server = \"mirror.example:5000\"\n", "r").unwrap(), Some("https://mirror.example:5000".into()));
    }

    #[test]
    fn bad_files() {
        for bad in ["server = \"https:/evil.example\"", "server = \"https:evil.example\"", "server = \"http:\\\\\\\\evil.example\"", "server = \"evil.example\\\\\"", "server = \"evil.example\\t\"", "server = \"evil%2eexample\"", "server = \"\u{ff45}vil.example\"", "server = \"HTTP://x\"", "server = 5", "server = \"ftp://x\"", "server = \"http://x/path\"", "server = \"http://x?q\"", "[[[", "server = \"not a url\""] {
            assert!(parse(bad, "x", false, Path::new("/d")).is_err(), "{bad}");
        }
        // A password in a server is never quoted.
        for server in ["https://robot:S3cr3t@mirror.corp", "robot:S3cr3t@mirror.corp:5000", "https://robot:S3cr3t@mirror corp"] {
            let e = parse(&format!("server = \"{server}\"\n"), "x", false, Path::new("/d")).unwrap_err();
            assert!(!e.contains("S3cr3t") && e.contains("not shown"), "{e}");
        }
    }

    #[test]
    fn docker_hub_is_served_by_its_api_host_over_https() {
        let d = tempfile::tempdir().unwrap();
        for plain_http in [false, true] {
            assert_eq!(endpoint("docker.io", None, plain_http, None).unwrap().base, "https://registry-1.docker.io");
            assert_eq!(endpoint("docker.io", Some(d.path()), plain_http, None).unwrap().base, "https://registry-1.docker.io");
            assert_eq!(parse("", "docker.io", plain_http, d.path()).unwrap().base, "https://registry-1.docker.io");
        }
        // A hosts.toml naming a server is followed, for docker.io too.
        assert_eq!(parse("server = \"https://hub-mirror.corp\"\n", "docker.io", false, d.path()).unwrap().base, "https://hub-mirror.corp");
        assert!(!is_proxy("docker.io", "registry-1.docker.io"));
        assert!(!is_proxy("reg.io:5000", "reg.io:5000"));
        assert!(is_proxy("reg.io", "mirror.corp"));
        assert!(is_proxy("reg.io", "reg.io:5000"));
        assert!(is_proxy("registry-1.docker.io", "docker.io"));
    }

    #[test]
    fn missing_file_means_default() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(endpoint("reg.io", Some(d.path()), false, None).unwrap().base, "https://reg.io");
        assert_eq!(endpoint("reg.io", None, true, None).unwrap().base, "http://reg.io");
        assert_eq!(endpoint("reg.io", None, false, Some("http://10.0.0.1:5000")).unwrap(), Endpoint { base: "http://10.0.0.1:5000".into(), ns: Some("reg.io".into()), ..Default::default() });
    }

    /// An http server with TLS settings (any: even `skip_verify = false`, an empty ca list, at
    /// the top or under the server's own entry; never a request's) is asked as each containerd
    /// reads it: its port as written decides.
    #[test]
    fn an_http_server_with_tls_settings_is_asked_as_containerd_asks_it() {
        use HttpWithTls::*;
        let root = Path::new("/etc/containerd/certs.d/reg.io");
        let at = |text: &str, r: HttpWithTls| {
            let mut e = parse(text, "reg.io", false, root).unwrap();
            e.read_as(r);
            (e.base, e.plain_fallback, e.refused_falls_back)
        };
        let first = |https: &str, plain: &str, refused: bool| (https.to_string(), Some(plain.to_string()), refused);
        let written = |plain: &str| (plain.to_string(), None, false);
        let h5000 = "server = \"http://127.0.0.1:5000\"\n";
        for tls in ["ca = \"ca.pem\"\n", "ca = []\n", "skip_verify = false\n", "[host.\"http://127.0.0.1:5000\"]\nclient = \"c.pem\"\n"] {
            let text = format!("{h5000}{tls}");
            assert_eq!(at(&text, AsWritten), written("http://127.0.0.1:5000"), "{text}");
            for r in [PortNot80, UnlessPort80, Always] {
                assert_eq!(at(&text, r), first("https://127.0.0.1:5000", "http://127.0.0.1:5000", false), "{text} {r:?}");
            }
        }
        for not_tls in ["", "client = []\n", "[host.\"http://mirror:5000\"]\nca = \"ca.pem\"\n"] {
            assert_eq!(at(&format!("{h5000}{not_tls}"), Always), written("http://127.0.0.1:5000"), "{not_tls}");
        }
        // No port: 2.x tries https on 443, and falls back on a refused connection too.
        let none = "server = \"http://127.0.0.1\"\nca = \"ca.pem\"\n";
        assert_eq!(at(none, PortNot80), written("http://127.0.0.1"));
        assert_eq!(at(none, UnlessPort80), first("https://127.0.0.1", "http://127.0.0.1", true));
        assert_eq!(at(none, Always), first("https://127.0.0.1", "http://127.0.0.1", false));
        // Port 80 as Go reads it ("80"); 0080 is another string to Go, port 80 on the wire.
        let p80 = "server = \"http://127.0.0.1:80\"\nca = \"ca.pem\"\n";
        assert_eq!(at(p80, UnlessPort80), written("http://127.0.0.1"));
        assert_eq!(at(p80, Always), first("https://127.0.0.1:80", "http://127.0.0.1", false));
        assert_eq!(at("server = \"http://127.0.0.1:0080\"\nca = \"ca.pem\"\n", PortNot80), first("https://127.0.0.1:80", "http://127.0.0.1", false));
        // (As containerd: the scheme swapped, the name as written.)
        assert_eq!(at("server = \"http://127.0.0.1:443\"\nca = \"ca.pem\"\n", PortNot80), first("https://127.0.0.1:443", "http://127.0.0.1:443", false));
        assert_eq!(at("server = \"http://[::1]:5000\"\nca = \"ca.pem\"\n", PortNot80), first("https://[::1]:5000", "http://[::1]:5000", false));
        assert_eq!(at("server = \"https://127.0.0.1:5000\"\nca = \"ca.pem\"\n", Always), written("https://127.0.0.1:5000"));
        for (authority, port) in [("h", ""), ("h:5000", "5000"), ("h:", ""), ("[::1]:80", "80"), ("[::1]", ""), ("::1", "")] {
            assert_eq!(written_port(authority), port, "{authority}");
        }
        let mut req = endpoint("reg.io", None, false, Some("http://127.0.0.1:5000")).unwrap();
        req.read_as(Always);
        assert_eq!((req.base.as_str(), req.plain_fallback), ("http://127.0.0.1:5000", None), "a request's server");
    }

    /// A loopback registry with no server named is asked as containerd's default host asks it
    /// (core/remotes/docker/config/hosts.go, `docker.IsLocalhost`): by version in plain http,
    /// over https first, or over https only; its certificate checked all the same.
    #[test]
    fn a_loopback_registry_is_asked_as_containerd_asks_it() {
        use HttpWithTls::*;
        let d = tempfile::tempdir().unwrap();
        let at = |host: &str, plain_http: bool, dir: Option<&Path>, r: HttpWithTls| {
            let mut e = endpoint(host, dir, plain_http, None).unwrap();
            e.read_as(r);
            (e.base, e.skip_verify, e.plain_fallback, e.refused_falls_back)
        };
        let only = |base: &str| (base.to_string(), false, None, false);
        let first = |https: &str, http: &str| (https.to_string(), false, Some(http.to_string()), false);
        for host in ["localhost:5000", "127.0.0.1:5000", "127.9.8.7:5000", "[::1]:5000", "[::ffff:127.0.0.1]:5000", "127.0.0.1:05000"] {
            let (http, https) = (format!("http://{host}"), format!("https://{host}"));
            // Before 1.6.9: https like any registry; with --plain-http, plain.
            assert_eq!(at(host, false, None, BeforeLoopback), only(&https), "{host}");
            assert_eq!(at(host, true, None, BeforeLoopback), only(&http), "{host}");
            // 1.6.9 to 1.6.24, 1.7 before 1.7.7: plain http, with --plain-http or without.
            assert_eq!(at(host, false, None, AsWritten), only(&http), "{host}");
            assert_eq!(at(host, true, None, AsWritten), only(&http), "{host}");
            // 1.7.7: https first whatever --plain-http says, then plain http.
            assert_eq!(at(host, false, None, Always), first(&https, &http), "{host}");
            assert_eq!(at(host, true, None, Always).2, Some(http.clone()), "{host}");
            // From 1.6.25, 1.7.8 and in 2.x: https first without --plain-http, plain with it.
            for r in [PortNot80, UnlessPort80] {
                assert_eq!(at(host, false, None, r), first(&https, &http), "{host} {r:?}");
                assert_eq!(at(host, true, None, r), only(&http), "{host} {r:?}");
            }
        }
        for r in [PortNot80, UnlessPort80] {
            // No port, or 443: https only; port 80: plain http. The name as written.
            assert_eq!(at("localhost", false, None, r), only("https://localhost"), "{r:?}");
            assert_eq!(at("127.0.0.1:443", false, None, r), only("https://127.0.0.1:443"), "{r:?}");
            assert_eq!(at("localhost:80", false, None, r), only("http://localhost:80"), "{r:?}");
            // "0443" is not "443" to Go: https first.
            assert_eq!(at("localhost:0443", false, None, r), first("https://localhost:0443", "http://localhost:0443"), "{r:?}");
        }
        assert_eq!(at("localhost", false, None, AsWritten), only("http://localhost"));
        assert_eq!(at("localhost", false, None, Always), first("https://localhost", "http://localhost"));
        // Not loopback to containerd: asked over https.
        for host in ["LOCALHOST:5000", "localhost.example:5000", "[::1]", "127.0.0.01:5000", "0.0.0.0:5000", "10.0.0.1:5000", "128.0.0.1:5000", "[::1]:5]", "localhost:5]", "[[::1]]:5", "127.1:5000"] {
            assert_eq!(at(host, false, None, UnlessPort80), only(&format!("https://{host}")), "{host}");
            assert!(!is_localhost(host), "{host}");
        }
        for host in ["localhost", "localhost:", "127.0.0.1", "::1", "[::1]:80", "[::ffff:127.0.0.1]:1"] {
            assert!(is_localhost(host), "{host}");
        }
        // Its certs.d CA files are used, and only the operator's skip_verify skips the check.
        std::fs::create_dir_all(d.path().join("127.0.0.1_5000_")).unwrap();
        std::fs::write(d.path().join("127.0.0.1_5000_/ca.crt"), "x").unwrap();
        let mut e = endpoint("127.0.0.1:5000", Some(d.path()), false, None).unwrap();
        e.read_as(UnlessPort80);
        assert_eq!((e.base.as_str(), e.skip_verify, e.ca.len(), e.plain_fallback.as_deref()), ("https://127.0.0.1:5000", false, 1, Some("http://127.0.0.1:5000")));
        std::fs::write(d.path().join("127.0.0.1_5000_/hosts.toml"), "skip_verify = true\n").unwrap();
        assert_eq!(at("127.0.0.1:5000", false, Some(d.path()), UnlessPort80), ("https://127.0.0.1:5000".into(), true, Some("http://127.0.0.1:5000".into()), false));
        // With --plain-http, TLS settings make it an http server with TLS settings.
        std::fs::write(d.path().join("127.0.0.1_5000_/hosts.toml"), "ca = \"ca.crt\"\n").unwrap();
        assert_eq!(at("127.0.0.1:5000", true, Some(d.path()), UnlessPort80), first("https://127.0.0.1:5000", "http://127.0.0.1:5000"));
        assert_eq!(at("127.0.0.1:5000", true, Some(d.path()), AsWritten), only("http://127.0.0.1:5000"));
        // So do certs.d's files (containerd's explicit TLS), for any registry.
        std::fs::remove_file(d.path().join("127.0.0.1_5000_/hosts.toml")).unwrap();
        assert_eq!(at("127.0.0.1:5000", true, Some(d.path()), UnlessPort80), first("https://127.0.0.1:5000", "http://127.0.0.1:5000"));
        std::fs::create_dir_all(d.path().join("reg.io_5000_")).unwrap();
        std::fs::write(d.path().join("reg.io_5000_/ca.crt"), "x").unwrap();
        assert_eq!(at("reg.io:5000", true, Some(d.path()), UnlessPort80), first("https://reg.io:5000", "http://reg.io:5000"));
        assert_eq!(at("reg.io:5000", false, Some(d.path()), UnlessPort80), only("https://reg.io:5000"));
        // Another spelling of the name, reaching another directory's settings (here _default's
        // skip_verify), keeps its spelling in every form: never the origin of 127.0.0.1:5000.
        std::fs::create_dir_all(d.path().join("_default")).unwrap();
        std::fs::write(d.path().join("_default/hosts.toml"), "skip_verify = true\n").unwrap();
        for (host, plain_http) in [("127.0.0.1:05000", true), ("127.0.0.1:05000", false), ("reg.io:05000", true), ("reg.io:05000", false), ("localhost:443", true)] {
            let e = endpoint(host, Some(d.path()), plain_http, None).unwrap();
            for r in [AsWritten, Always, UnlessPort80] {
                let mut e = e.clone();
                e.read_as(r);
                for base in [Some(&e.base), e.plain_fallback.as_ref()].into_iter().flatten() {
                    assert!(base.ends_with(&format!("//{host}")), "{host} {plain_http} {r:?}: {base}");
                }
            }
        }
        // A server named for it is asked as named.
        std::fs::write(d.path().join("127.0.0.1_5000_/hosts.toml"), "server = \"https://127.0.0.1:5000\"\nca = \"ca.crt\"\n").unwrap();
        assert_eq!(at("127.0.0.1:5000", false, Some(d.path()), UnlessPort80), only("https://127.0.0.1:5000"));
    }

    /// As containerd's `DefaultScheme` (ctr's `--plain-http`): the registry's own server only;
    /// a named server keeps the scheme it names (https without one).
    #[test]
    fn plain_http_applies_to_the_registrys_own_server_only() {
        let d = tempfile::tempdir().unwrap();
        let dir = |text: &str| {
            std::fs::create_dir_all(d.path().join("reg.io")).unwrap();
            std::fs::write(d.path().join("reg.io/hosts.toml"), text).unwrap();
            d.path()
        };
        for (text, plain, want) in [
            ("server = \"https://reg.io\"\n", "https://reg.io", "https://reg.io"),
            ("server = \"reg.io:5000\"\n", "https://reg.io:5000", "https://reg.io:5000"),
            ("server = \"http://mirror.corp\"\n", "http://mirror.corp", "http://mirror.corp"),
            ("skip_verify = true\n", "http://reg.io", "https://reg.io"),
        ] {
            assert_eq!(endpoint("reg.io", Some(dir(text)), true, None).unwrap().base, plain, "{text} with --plain-http");
            assert_eq!(endpoint("reg.io", Some(dir(text)), false, None).unwrap().base, want, "{text}");
        }
        assert_eq!(endpoint("reg.io", None, true, Some("https://mirror.corp")).unwrap().base, "https://mirror.corp");
        assert_eq!(endpoint("reg.io", None, true, Some("mirror.corp:5000")).unwrap().base, "https://mirror.corp:5000");
    }

    #[test]
    fn a_request_names_a_server_and_nothing_else() {
        assert_eq!(request_server("server = \"http://127.0.0.1:5001\"\n[host.\"http://127.0.0.1:5001\"]\ncapabilities = [\"pull\"]\n", "r").unwrap(), Some("http://127.0.0.1:5001".into()));
        assert_eq!(request_server("", "r").unwrap(), None);
        for tls in ["skip_verify = true", "skip_verify = false", "ca = \"/etc/ca.pem\"", "[host.\"https://m\"]\nskip_verify = true", "[host.\"https://m\"]\nclient = [\"/c.pem\", \"/k.pem\"]", "client = \"/c.pem\""] {
            let e = request_server(tls, "r").unwrap_err();
            assert!(e.contains("TLS settings"), "{tls}: {e}");
        }
        assert!(request_server("server = \"http://u:p@h\"", "r").is_err());
    }

    #[test]
    fn only_small_regular_files_are_read_and_never_quoted() {
        let d = tempfile::tempdir().unwrap();
        let secret = d.path().join("secret");
        std::fs::write(&secret, "root:SECRET-line:1:2\n").unwrap();
        let link = d.path().join("hosts.toml");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        let text = read_hosts_file(&link).unwrap().unwrap();
        let e = request_server(&text, "r").unwrap_err();
        assert!(e.contains("not valid TOML (line 1)") && !e.contains("SECRET"), "{e}");
        let e = parse(&text, "r", false, d.path()).unwrap_err();
        assert!(!e.contains("SECRET"), "{e}");
        let fifo = d.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(read_hosts_file(&fifo).unwrap_err().to_string().contains("not a regular file"));
        assert!(read_hosts_file(d.path()).unwrap_err().to_string().contains("not a regular file"));
        assert!(read_hosts_file(Path::new("/dev/zero")).unwrap_err().to_string().contains("not a regular file"));
        let big = d.path().join("big");
        std::fs::write(&big, vec![b'#'; (MAX_HOSTS_FILE + 1) as usize]).unwrap();
        assert!(read_hosts_file(&big).unwrap_err().to_string().contains("larger than"));
        assert_eq!(read_hosts_file(&d.path().join("none")).unwrap(), None);
    }

    fn pair(cert: &str, key: Option<&str>) -> ClientPair {
        ClientPair { cert: cert.into(), key: key.map(PathBuf::from) }
    }

    #[test]
    fn client_certificates_in_containerds_forms_relative_to_the_host_directory() {
        let base = Path::new("/certs.d/reg.io");
        let e = parse("client = \"c.pem\"\nca = [\"ca.pem\", \"/abs/ca.pem\"]\n", "reg.io", false, base).unwrap();
        assert_eq!(e.client, vec![pair("/certs.d/reg.io/c.pem", None)]);
        assert_eq!(e.ca, vec![PathBuf::from("/certs.d/reg.io/ca.pem"), PathBuf::from("/abs/ca.pem")]);
        let e = parse("client = [\"/a.pem\", \"b.pem\"]\n", "reg.io", false, base).unwrap();
        assert_eq!(e.client, vec![pair("/a.pem", None), pair("/certs.d/reg.io/b.pem", None)]);
        let e = parse(
            "server = \"https://reg.io\"\n[host.\"https://reg.io\"]\nclient = [[\"c.cert\", \"c.key\"], \"d.pem\"]\ncapabilities = [\"Pull\", \"resolve\"]\n[host.\"https://mirror\"]\nclient = \"m.pem\"\nheader = { x-a = \"1\", x-b = [\"2\", \"3\"] }\n",
            "reg.io",
            false,
            base,
        )
        .unwrap();
        assert_eq!(e.client, vec![pair("/certs.d/reg.io/c.cert", Some("/certs.d/reg.io/c.key")), pair("/certs.d/reg.io/d.pem", None)]);
        // What containerd refuses (and then falls back from) pullgate refuses too.
        for bad in ["client = [[\"c.pem\", \"\"]]", "capabilities = [\"fetch\"]", "[host.\"https://m\"]\ncapabilities = [\"pull\", \"x\"]", "[host.\"https://m\"]\nclient = 5", "header = { a = 5 }", "override_path = \"yes\""] {
            assert!(parse(bad, "reg.io", false, base).is_err(), "{bad}");
        }
        for bad in ["client = 5", "client = [[\"only-one\"]]", "client = [[\"a\", \"b\", \"c\"]]", "client = [5]", "client = [[\"a\", 5]]", "client = { cert = \"a\" }"] {
            let e = parse(bad, "reg.io", false, base).unwrap_err();
            assert!(e.contains("client must be"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_host_directory_is_found_as_containerd_finds_it() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let mk = |name: &str, server: &str| {
            std::fs::create_dir_all(root.join(name)).unwrap();
            std::fs::write(root.join(name).join("hosts.toml"), format!("server = \"{server}\"\n")).unwrap();
        };
        assert_eq!(endpoint("reg.io:5000", Some(root), false, None).unwrap().base, "https://reg.io:5000");
        mk("_default", "https://default.example");
        assert_eq!(endpoint("reg.io:5000", Some(root), false, None).unwrap().base, "https://default.example");
        mk("reg.io:5000", "https://plain-name.example");
        assert_eq!(endpoint("reg.io:5000", Some(root), false, None).unwrap().base, "https://plain-name.example");
        mk("reg.io_5000_", "https://port-form.example");
        assert_eq!(endpoint("reg.io:5000", Some(root), false, None).unwrap().base, "https://port-form.example");
        assert_eq!(endpoint("other.io", Some(root), false, None).unwrap().base, "https://default.example");
        // A file where the directory should be is an error, not "no settings".
        std::fs::write(root.join("file.io"), "x").unwrap();
        assert!(endpoint("file.io", Some(root), false, None).unwrap_err().to_string().contains("not a directory"));
        assert_eq!(host_of_dir("reg.io_5000_").as_deref(), Some("reg.io:5000"));
        assert_eq!(host_of_dir("reg.io").as_deref(), Some("reg.io"));
        assert_eq!(host_of_dir("my_reg_").as_deref(), Some("my_reg_"));
        assert_eq!(host_of_dir("_default"), None);
    }

    #[test]
    fn without_hosts_toml_the_directory_is_read_as_dockers_certs_d() {
        let d = tempfile::tempdir().unwrap();
        let h = d.path().join("reg.io");
        std::fs::create_dir_all(h.join("sub.crt")).unwrap();
        for f in ["b.crt", "a.crt", "client.cert", "client.key", "solo.cert", "notes.txt"] {
            std::fs::write(h.join(f), "x").unwrap();
        }
        let e = endpoint("reg.io", Some(d.path()), false, None).unwrap();
        assert_eq!(e.base, "https://reg.io");
        assert_eq!(e.ca, vec![h.join("a.crt"), h.join("b.crt")]);
        assert_eq!(e.client, vec![ClientPair { cert: h.join("client.cert"), key: Some(h.join("client.key")) }, ClientPair { cert: h.join("solo.cert"), key: None }]);
        assert!(!e.skip_verify);
        // An empty hosts.toml is no hosts.toml (containerd's reading); a non-empty one wins.
        std::fs::write(h.join("hosts.toml"), "").unwrap();
        assert_eq!(endpoint("reg.io", Some(d.path()), true, None).unwrap().ca.len(), 2);
        std::fs::write(h.join("hosts.toml"), "# nothing\n").unwrap();
        assert_eq!(endpoint("reg.io", Some(d.path()), false, None).unwrap(), Endpoint { base: "https://reg.io".into(), ..Default::default() });
    }
}
