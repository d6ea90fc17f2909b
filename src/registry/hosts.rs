//! hosts: containerd's `hosts.toml` (`<hosts_dir>/<host[:port]>/hosts.toml`) for the scheme,
//! address and TLS settings of a registry's own server. Mirrors (`[host."..."]` entries that
//! are not the server) are ignored on purpose: verification goes to the origin, never a mirror.
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
}

#[derive(Debug, Deserialize)]
struct HostsFile {
    server: Option<String>,
    #[serde(default)]
    skip_verify: bool,
    ca: Option<OneOrMany>,
    client: Option<toml::Value>,
    #[serde(default)]
    host: BTreeMap<String, HostEntry>,
}

#[derive(Debug, Deserialize)]
struct HostEntry {
    #[serde(default)]
    skip_verify: bool,
    ca: Option<OneOrMany>,
    client: Option<toml::Value>,
}

impl HostsFile {
    fn has_tls_settings(&self) -> bool {
        self.skip_verify || self.ca.is_some() || self.client.is_some() || self.host.values().any(|h| h.skip_verify || h.ca.is_some() || h.client.is_some())
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
    fn paths(self) -> Vec<PathBuf> {
        match self {
            OneOrMany::One(s) => vec![s.into()],
            OneOrMany::Many(v) => v.into_iter().map(PathBuf::from).collect(),
        }
    }
}

/// The endpoint for registry `host`: `server` (a request's, from [`request_server`]) if given,
/// with no TLS settings of its own; else `hosts.toml` in the operator's `hosts_dir` if it has
/// one for the host; else https. `--plain-http` forces http either way.
pub fn endpoint(host: &str, hosts_dir: Option<&Path>, plain_http: bool, server: Option<&str>) -> Result<Endpoint, HostsError> {
    if let Some(s) = server {
        let bad = |reason| HostsError::Invalid { path: PathBuf::from("(request)"), reason };
        return Ok(Endpoint { base: normalize_server(s, plain_http).map_err(bad)?, ..Endpoint::default() });
    }
    let default = Endpoint { base: format!("{}://{host}", if plain_http { "http" } else { "https" }), ..Endpoint::default() };
    let Some(dir) = hosts_dir else { return Ok(default) };
    let path = dir.join(host).join("hosts.toml");
    let Some(text) = read_hosts_file(&path)? else { return Ok(default) };
    parse(&text, host, plain_http).map_err(|reason| HostsError::Invalid { path, reason })
}

/// Reads a hosts.toml: None when there is none; an error unless it is a regular file (a
/// symlink to one is followed) of at most [`MAX_HOSTS_FILE`] bytes. Opened non-blocking, so a
/// FIFO put in its place cannot stall the reader.
pub fn read_hosts_file(path: &Path) -> Result<Option<String>, HostsError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let bad = |reason: String| HostsError::Invalid { path: path.to_path_buf(), reason };
    let file = match std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(bad(e.to_string())),
    };
    let meta = file.metadata().map_err(|e| bad(e.to_string()))?;
    if !meta.is_file() {
        return Err(bad("not a regular file".into()));
    }
    if meta.len() > MAX_HOSTS_FILE {
        return Err(bad(format!("larger than {MAX_HOSTS_FILE} bytes")));
    }
    let mut text = String::new();
    file.take(MAX_HOSTS_FILE + 1).read_to_string(&mut text).map_err(|e| bad(e.to_string()))?;
    if text.len() as u64 > MAX_HOSTS_FILE {
        return Err(bad(format!("larger than {MAX_HOSTS_FILE} bytes")));
    }
    Ok(Some(text))
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

/// `scheme://host[:port]` of a server URL, `--plain-http` forcing http.
fn normalize_server(server: &str, plain_http: bool) -> Result<String, String> {
    let shown = crate::reference::excerpt(server);
    let url = url::Url::parse(server).map_err(|e| format!("server {shown:?}: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!("server {shown:?} must be an http or https URL"));
    }
    if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() || url.password().is_some() || !matches!(url.path(), "" | "/" | "/v2" | "/v2/") {
        return Err(format!("server {shown:?} must not carry credentials, a path, query or fragment"));
    }
    let scheme = if plain_http { "http" } else { url.scheme() };
    let authority = match url.port() {
        Some(p) => format!("{}:{p}", url.host_str().unwrap_or_default()),
        None => url.host_str().unwrap_or_default().to_string(),
    };
    Ok(format!("{scheme}://{authority}"))
}

/// The server a request's hosts.toml names for registry `host` (None: the registry itself).
/// Only the server is taken from a request: TLS settings in it are refused.
pub fn request_server(text: &str, host: &str) -> Result<Option<String>, String> {
    let f = parse_toml(text)?;
    if f.has_tls_settings() {
        return Err("TLS settings (skip_verify, ca, client) come from the daemon's [registry] hosts_dir, not from a request's hosts.toml".into());
    }
    match &f.server {
        None => Ok(None),
        Some(s) => normalize_server(s, false).map(Some).map_err(|e| format!("{e} (registry {})", crate::reference::excerpt(host))),
    }
}

/// Parses the text of a hosts.toml for registry `host` (the operator's: TLS settings apply).
pub fn parse(text: &str, host: &str, plain_http: bool) -> Result<Endpoint, String> {
    let f = parse_toml(text)?;
    let server = f.server.clone().unwrap_or_else(|| format!("https://{host}"));
    let base = normalize_server(&server, plain_http)?;
    let mut ep = Endpoint { base, skip_verify: f.skip_verify, ca: f.ca.map(OneOrMany::paths).unwrap_or_default() };
    // TLS settings given under the server's own [host."..."] entry apply to it too.
    for (name, h) in f.host {
        if name.trim_end_matches('/') == server.trim_end_matches('/') {
            ep.skip_verify |= h.skip_verify;
            ep.ca.extend(h.ca.map(OneOrMany::paths).unwrap_or_default());
        }
    }
    Ok(ep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_and_tls() {
        let e = parse("server = \"http://127.0.0.1:5000\"\n", "127.0.0.1:5000", false).unwrap();
        assert_eq!(e.base, "http://127.0.0.1:5000");
        let e = parse(
            "server = \"https://reg.io\"\n[host.\"https://reg.io\"]\nskip_verify = true\nca = [\"/etc/ca.pem\"]\n[host.\"https://mirror.io\"]\nca = \"/m.pem\"\n",
            "reg.io",
            false,
        )
        .unwrap();
        assert_eq!(e.base, "https://reg.io");
        assert!(e.skip_verify);
        assert_eq!(e.ca, vec![PathBuf::from("/etc/ca.pem")]);
        assert_eq!(parse("", "reg.io", true).unwrap().base, "http://reg.io");
    }

    #[test]
    fn bad_files() {
        for bad in ["server = 5", "server = \"ftp://x\"", "server = \"http://x/path\"", "server = \"http://x?q\"", "[[[", "server = \"not a url\""] {
            assert!(parse(bad, "x", false).is_err(), "{bad}");
        }
    }

    #[test]
    fn missing_file_means_default() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(endpoint("reg.io", Some(d.path()), false, None).unwrap().base, "https://reg.io");
        assert_eq!(endpoint("reg.io", None, true, None).unwrap().base, "http://reg.io");
        assert_eq!(endpoint("reg.io", None, false, Some("http://10.0.0.1:5000")).unwrap(), Endpoint { base: "http://10.0.0.1:5000".into(), ..Default::default() });
    }

    #[test]
    fn a_request_names_a_server_and_nothing_else() {
        assert_eq!(request_server("server = \"http://127.0.0.1:5001\"\n[host.\"http://127.0.0.1:5001\"]\ncapabilities = [\"pull\"]\n", "r").unwrap(), Some("http://127.0.0.1:5001".into()));
        assert_eq!(request_server("", "r").unwrap(), None);
        for tls in ["skip_verify = true", "ca = \"/etc/ca.pem\"", "[host.\"https://m\"]\nskip_verify = true", "[host.\"https://m\"]\nclient = [\"/c.pem\", \"/k.pem\"]", "client = \"/c.pem\""] {
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
        let e = parse(&text, "r", false).unwrap_err();
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
}
