//! hosts: containerd's `hosts.toml` (`<hosts_dir>/<host[:port]>/hosts.toml`) for the scheme,
//! address and TLS settings of a registry's own server. Mirrors (`[host."..."]` entries that
//! are not the server) are ignored on purpose: verification goes to the origin, never a mirror.
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
    #[serde(default)]
    host: BTreeMap<String, HostEntry>,
}

#[derive(Debug, Deserialize)]
struct HostEntry {
    #[serde(default)]
    skip_verify: bool,
    ca: Option<OneOrMany>,
}

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

/// The endpoint for registry `host`: `--plain-http` forces http; else `hosts.toml` in
/// `hosts_dir` if it has one for the host; else https.
pub fn endpoint(host: &str, hosts_dir: Option<&Path>, plain_http: bool) -> Result<Endpoint, HostsError> {
    let default = Endpoint { base: format!("{}://{host}", if plain_http { "http" } else { "https" }), ..Endpoint::default() };
    let Some(dir) = hosts_dir else { return Ok(default) };
    let path = dir.join(host).join("hosts.toml");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(default),
        Err(e) => return Err(HostsError::Invalid { path, reason: e.to_string() }),
    };
    parse(&text, host, plain_http).map_err(|reason| HostsError::Invalid { path, reason })
}

/// Parses the text of a hosts.toml for registry `host`.
pub fn parse(text: &str, host: &str, plain_http: bool) -> Result<Endpoint, String> {
    let f: HostsFile = toml::from_str(text).map_err(|e| e.to_string())?;
    let server = f.server.unwrap_or_else(|| format!("https://{host}"));
    let url = url::Url::parse(&server).map_err(|e| format!("server {server:?}: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!("server {server:?} must be an http or https URL"));
    }
    if url.query().is_some() || url.fragment().is_some() || !matches!(url.path(), "" | "/" | "/v2" | "/v2/") {
        return Err(format!("server {server:?} must not carry a path, query or fragment"));
    }
    let scheme = if plain_http { "http" } else { url.scheme() };
    let authority = match url.port() {
        Some(p) => format!("{}:{p}", url.host_str().unwrap_or_default()),
        None => url.host_str().unwrap_or_default().to_string(),
    };
    let mut ep = Endpoint { base: format!("{scheme}://{authority}"), skip_verify: f.skip_verify, ca: f.ca.map(OneOrMany::paths).unwrap_or_default() };
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
        assert_eq!(endpoint("reg.io", Some(d.path()), false).unwrap().base, "https://reg.io");
        assert_eq!(endpoint("reg.io", None, true).unwrap().base, "http://reg.io");
    }
}
