//! config: the daemon's TOML configuration file (`pullgate serve --config FILE`), its defaults
//! and its validation. Every key is documented in `config.toml.example`.
use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("invalid config file {path}: {source}")]
    Parse { path: PathBuf, source: toml::de::Error },
    #[error("invalid config: {0}")]
    Invalid(String),
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub daemon: DaemonConfig,
    #[serde(default)]
    pub policy: PolicyConfig,
    /// Per-namespace settings, `[namespaces."NAME"]`.
    #[serde(default)]
    pub namespaces: std::collections::BTreeMap<String, NamespaceConfig>,
    #[serde(default)]
    pub registry: RegistryConfig,
    #[serde(default)]
    pub cri: CriConfig,
    #[serde(default)]
    pub metrics: MetricsConfig,
}

/// The Prometheus endpoint (off by default).
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// `IP:PORT` serving `GET /metrics` over plain HTTP; unset: no endpoint.
    #[serde(default)]
    pub address: Option<String>,
}

impl MetricsConfig {
    /// The endpoint's address (validated by `parse`).
    pub fn socket_addr(&self) -> Option<std::net::SocketAddr> {
        self.address.as_deref().and_then(|a| a.parse().ok())
    }
}

/// The containerd namespace of every pod (CRI's).
pub const CRI_NAMESPACE: &str = "k8s.io";

/// Whose grant a pod's pull records, and whose grant its containers need.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum CriPrincipal {
    /// The pod's Kubernetes namespace (pull secrets are namespaced objects).
    #[default]
    Namespace,
    /// `<namespace>/<pod name>/<pod UID>` (`<namespace>/<pod name>` for a pod without a UID).
    Pod,
}

/// The CRI front (kubelet's `containerRuntimeEndpoint` and `imageServiceEndpoint`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CriConfig {
    /// Serve the CRI front (off by default).
    #[serde(default)]
    pub enable: bool,
    /// Unix socket kubelet talks to (0600).
    #[serde(default = "default_cri_socket")]
    pub socket: PathBuf,
    /// containerd's CRI (its gRPC socket); unset: `[daemon] containerd_address`.
    #[serde(default)]
    pub containerd_address: Option<PathBuf>,
    #[serde(default)]
    pub principal: CriPrincipal,
}

fn default_cri_socket() -> PathBuf { PathBuf::from("/run/pullgate/cri.sock") }

impl Default for CriConfig {
    fn default() -> Self {
        CriConfig { enable: false, socket: default_cri_socket(), containerd_address: None, principal: CriPrincipal::Namespace }
    }
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// KEP-2535 policy: NeverVerify, NeverVerifyPreloadedImages (default),
    /// NeverVerifyAllowlistedImages, AlwaysVerify.
    #[serde(default)]
    pub verification: crate::gate::Policy,
    /// Repositories (`host/path`) or prefixes (`host/path/*`) exempt under
    /// NeverVerifyAllowlistedImages.
    #[serde(default)]
    pub allowlist: Vec<String>,
    /// Grants older than this no longer count: `90s`, `15m`, `12h`, `7d`. Unset: never expire.
    #[serde(default)]
    pub reverify_after: Option<String>,
    /// After an authenticated fetch, ask the origin anonymously whether it serves the blob too;
    /// if so the layer is public.
    #[serde(default)]
    pub probe_anonymous: bool,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct NamespaceConfig {
    /// Containers in this namespace must name a principal, and only per-principal grants count.
    /// Unset: off, except for `k8s.io` when the CRI front is enabled (every pod lives there,
    /// and a namespace-wide grant would let any pod run what another pod's secret pulled).
    #[serde(default)]
    pub require_principal: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    /// containerd's hosts directory (read as containerd reads it: `registry::hosts`) for
    /// registries' scheme and TLS settings; a request's `--hosts-dir` may name only a server.
    #[serde(default)]
    pub hosts_dir: Option<PathBuf>,
    /// Longest wait for a connection or for the next bytes of an answer ("30s" when unset); a
    /// whole request (a blob's download included) may take twice that.
    #[serde(default)]
    pub timeout: Option<String>,
}

impl RegistryConfig {
    /// The registry timeout (validated by `parse`).
    pub fn timeout(&self) -> Option<std::time::Duration> {
        self.timeout.as_deref().and_then(parse_duration_secs).map(std::time::Duration::from_secs)
    }
}

/// Parses a positive duration such as `90s`, `15m`, `12h`, `7d` into whole seconds.
pub fn parse_duration_secs(s: &str) -> Option<u64> {
    humantime::parse_duration(s.trim()).ok().map(|d| d.as_secs()).filter(|n| *n > 0)
}

impl Config {
    /// The gate's configuration (validated by `parse`).
    pub fn gate(&self) -> crate::gate::GateConfig {
        let require_principal = self.namespaces_requiring_principal();
        // Principals are tenants of their own where they are required, and in k8s.io under the
        // CRI front (each pod's namespace is one) even where an operator turned that off.
        let mut tenant_principals = require_principal.clone();
        // In the CRI front's namespace pods never reach containerd themselves (their pulls go
        // through pullgate): what it holds unpacked before pullgate knew it was put there by the
        // node (its operator, containerd's own sandbox image pull), and may count as preloaded.
        let mut no_preloaded = require_principal.clone();
        if self.cri.enable {
            tenant_principals.insert(CRI_NAMESPACE.to_string());
            no_preloaded.remove(CRI_NAMESPACE);
        }
        crate::gate::GateConfig {
            policy: self.policy.verification,
            allowlist: self.policy.allowlist.iter().filter_map(|a| crate::reference::AllowPattern::parse(a).ok()).collect(),
            reverify_after_ns: self
                .policy
                .reverify_after
                .as_deref()
                .and_then(parse_duration_secs)
                .map(|s| (s as i64).saturating_mul(1_000_000_000)),
            require_principal,
            tenant_principals,
            no_preloaded,
        }
    }

    /// The namespaces whose containers must name a principal: those configured so, and
    /// `k8s.io` under the CRI front unless the operator turned it off for `k8s.io` explicitly.
    pub fn namespaces_requiring_principal(&self) -> std::collections::HashSet<String> {
        let mut out: std::collections::HashSet<String> =
            self.namespaces.iter().filter(|(_, n)| n.require_principal == Some(true)).map(|(k, _)| k.clone()).collect();
        if self.cri.enable && !self.cri_principal_turned_off() {
            out.insert(CRI_NAMESPACE.to_string());
        }
        out
    }

    /// Whether the CRI front is enabled and the operator turned `require_principal` off for
    /// `k8s.io` explicitly (`pullgate doctor` warns about it).
    pub fn cri_principal_turned_off(&self) -> bool {
        self.cri.enable && self.namespaces.get(CRI_NAMESPACE).is_some_and(|n| n.require_principal == Some(false))
    }
}

/// Storage driver: overlayfs, a copying fallback, or pick at start-up.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum DriverChoice {
    #[default]
    Auto,
    Overlay,
    Copy,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonConfig {
    /// Directory holding snapshots and metadata (created 0700).
    #[serde(default = "default_root")]
    pub root: PathBuf,
    /// Unix socket serving containerd's Snapshots service; containerd's `[proxy_plugins]` address.
    #[serde(default = "default_snapshotter_socket")]
    pub snapshotter_socket: PathBuf,
    /// Unix socket for pullgate's own API (the CLI talks to it).
    #[serde(default = "default_api_socket")]
    pub api_socket: PathBuf,
    /// containerd's gRPC socket, used to pull and unpack through containerd's API.
    #[serde(default = "default_containerd_address")]
    pub containerd_address: PathBuf,
    /// tracing filter: error, warn, info, debug, trace (or an EnvFilter directive).
    #[serde(default = "default_log_level")]
    pub log_level: String,
    /// `text` (one human-readable line per event) or `json` (one JSON object per line).
    #[serde(default)]
    pub log_format: LogFormat,
    /// `auto` (overlayfs when it mounts in `root`, else copy), `overlay` or `copy`.
    #[serde(default)]
    pub driver: DriverChoice,
    /// pullgate's own namespace in containerd, labelled shareable, where blobs pullgate
    /// established as public at their origin are held once for every namespace to adopt under
    /// an isolated content store on containerd 1.7+ (instead of a copy per namespace). Empty:
    /// none (public blobs are copied like private ones).
    #[serde(default = "default_public_namespace")]
    pub public_namespace: String,
}

/// The daemon's log format.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

fn default_root() -> PathBuf { PathBuf::from("/var/lib/pullgate") }
fn default_snapshotter_socket() -> PathBuf { PathBuf::from("/run/pullgate/snapshotter.sock") }
fn default_api_socket() -> PathBuf { PathBuf::from("/run/pullgate/api.sock") }
fn default_containerd_address() -> PathBuf { PathBuf::from("/run/containerd/containerd.sock") }
fn default_log_level() -> String { "info".to_string() }
fn default_public_namespace() -> String { "pullgate-public".to_string() }

/// containerd's rule for namespace names (its `identifiers.Validate`): up to 76 characters,
/// letters and digits in runs joined by single '.', '_' or '-'.
pub fn is_containerd_identifier(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 76
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
        && !b.windows(2).any(|w| !w[0].is_ascii_alphanumeric() && !w[1].is_ascii_alphanumeric())
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            root: default_root(),
            snapshotter_socket: default_snapshotter_socket(),
            api_socket: default_api_socket(),
            containerd_address: default_containerd_address(),
            log_level: default_log_level(),
            log_format: LogFormat::Text,
            driver: DriverChoice::Auto,
            public_namespace: default_public_namespace(),
        }
    }
}

impl Config {
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        Config::parse(&text).map_err(|e| match e {
            ConfigError::Parse { source, .. } => ConfigError::Parse { path: path.to_path_buf(), source },
            other => other,
        })
    }

    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let cfg: Config = toml::from_str(text)
            .map_err(|source| ConfigError::Parse { path: PathBuf::new(), source })?;
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let d = &self.daemon;
        for (name, p) in [
            ("root", &d.root),
            ("snapshotter_socket", &d.snapshotter_socket),
            ("api_socket", &d.api_socket),
            ("containerd_address", &d.containerd_address),
        ] {
            if !p.is_absolute() {
                return Err(ConfigError::Invalid(format!("[daemon] {name} must be an absolute path, got {}", p.display())));
            }
        }
        if !d.public_namespace.is_empty() && !is_containerd_identifier(&d.public_namespace) {
            return Err(ConfigError::Invalid(format!(
                "[daemon] public_namespace {:?} is not a containerd namespace name (letters and digits joined by single '.', '_' or '-', at most 76)",
                crate::reference::excerpt(&d.public_namespace)
            )));
        }
        if self.cri.enable && d.public_namespace == CRI_NAMESPACE {
            return Err(ConfigError::Invalid(format!("[daemon] public_namespace must not be the CRI namespace {CRI_NAMESPACE}")));
        }
        if d.snapshotter_socket == d.api_socket {
            return Err(ConfigError::Invalid("[daemon] snapshotter_socket and api_socket must differ".into()));
        }
        if self.cri.enable {
            let c = &self.cri;
            if !c.socket.is_absolute() || c.containerd_address.as_ref().is_some_and(|a| !a.is_absolute()) {
                return Err(ConfigError::Invalid("[cri] socket and containerd_address must be absolute paths".into()));
            }
            if c.socket == d.snapshotter_socket || c.socket == d.api_socket {
                return Err(ConfigError::Invalid("[cri] socket must differ from pullgate's other sockets".into()));
            }
            if Some(&c.socket) == c.containerd_address.as_ref() || c.socket == d.containerd_address {
                return Err(ConfigError::Invalid("[cri] socket is containerd's own socket: pullgate would forward CRI to itself".into()));
            }
        }
        tracing_subscriber::EnvFilter::try_new(&d.log_level)
            .map_err(|e| ConfigError::Invalid(format!("[daemon] log_level {:?}: {e}", d.log_level)))?;
        for a in &self.policy.allowlist {
            crate::reference::AllowPattern::parse(a).map_err(|e| ConfigError::Invalid(format!("[policy] allowlist: {e}")))?;
        }
        if let Some(r) = &self.policy.reverify_after {
            parse_duration_secs(r).ok_or_else(|| {
                ConfigError::Invalid(format!("[policy] reverify_after {r:?}: expected a positive duration like 90s, 15m, 12h, 7d"))
            })?;
        }
        if let Some(t) = &self.registry.timeout {
            parse_duration_secs(t)
                .ok_or_else(|| ConfigError::Invalid(format!("[registry] timeout {t:?}: expected a positive duration like 10s, 2m")))?;
        }
        if let Some(a) = &self.metrics.address {
            a.parse::<std::net::SocketAddr>()
                .map_err(|e| ConfigError::Invalid(format!("[metrics] address {a:?}: expected IP:PORT such as \"127.0.0.1:9464\" ({e})")))?;
        }
        for ns in self.namespaces.keys() {
            if ns.is_empty() || ns.chars().any(|c| c.is_control() || c == '/') {
                return Err(ConfigError::Invalid(format!("[namespaces] {ns:?} is not a containerd namespace name")));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_namespace_names_follow_containerd() {
        for ok in ["pullgate-public", "a", "p.q_r-s", "x9"] {
            assert!(is_containerd_identifier(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "a..b", "a/b", "a b", "ä", &"a".repeat(77)] {
            assert!(!is_containerd_identifier(bad), "{bad}");
        }
        assert!(Config::parse("[daemon]\npublic_namespace = 'bad name'\n").is_err());
        assert!(Config::parse("[daemon]\npublic_namespace = ''\n").is_ok());
        assert!(Config::parse("[daemon]\npublic_namespace = 'k8s.io'\n[cri]\nenable = true\n").is_err());
    }

    #[test]
    fn the_example_parses() {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config.toml.example")).unwrap();
        let c = Config::parse(&text).unwrap();
        assert_eq!(c.policy.verification, crate::gate::Policy::NeverVerifyPreloadedImages);
    }

    #[test]
    fn defaults_apply() {
        let c = Config::parse("").unwrap();
        assert_eq!(c.daemon.root, PathBuf::from("/var/lib/pullgate"));
        assert_eq!(c.daemon.driver, DriverChoice::Auto);
    }

    #[test]
    fn keys_parse() {
        let c = Config::parse(
            "[daemon]\nroot='/r'\nsnapshotter_socket='/s'\napi_socket='/a'\ncontainerd_address='/c'\nlog_level='debug'\ndriver='copy'\n",
        )
        .unwrap();
        assert_eq!(c.daemon.snapshotter_socket, PathBuf::from("/s"));
        assert_eq!(c.daemon.driver, DriverChoice::Copy);
        assert_eq!(c.daemon.log_format, LogFormat::Text);
        assert_eq!(Config::parse("[daemon]\nlog_format='json'").unwrap().daemon.log_format, LogFormat::Json);
        assert!(Config::parse("[daemon]\nlog_format='xml'").is_err());
    }

    #[test]
    fn gate_keys() {
        let c = Config::parse(
            "[policy]\nverification='AlwaysVerify'\nallowlist=['reg.io/pub/*']\nreverify_after='2m'\nprobe_anonymous=true\n[namespaces.\"team-b\"]\nrequire_principal=true\n[registry]\nhosts_dir='/etc/containerd/certs.d'\ntimeout='10s'\n",
        )
        .unwrap();
        let g = c.gate();
        assert_eq!(g.policy, crate::gate::Policy::AlwaysVerify);
        assert_eq!(g.reverify_after_ns, Some(120_000_000_000));
        assert_eq!(c.registry.timeout(), Some(std::time::Duration::from_secs(10)));
        assert!(g.require_principal.contains("team-b"));
        assert!(g.allowlist[0].matches("reg.io/pub/x"));
        // Plain-http origins carry their scheme: an https entry does not match them.
        assert!(!g.allowlist[0].matches("http://reg.io/pub/x"));
        let http = crate::reference::AllowPattern::parse("http://127.0.0.1:5000/pub/*").unwrap();
        assert!(http.matches("http://127.0.0.1:5000/pub/x") && !http.matches("127.0.0.1:5000/pub/x"));
        assert!(crate::reference::AllowPattern::parse("http://").is_err());
        assert_eq!(parse_duration_secs("7d"), Some(604800));
        assert_eq!(parse_duration_secs("0s"), None);
        for bad in ["[policy]\nverification='Sometimes'", "[policy]\nallowlist=['reg.io/app:v1']", "[policy]\nreverify_after='soon'", "[registry]\ntimeout='0s'"] {
            assert!(Config::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cri_keys() {
        let c = Config::parse("[cri]\nenable=true\nsocket='/run/x/cri.sock'\nprincipal='pod'\n").unwrap();
        assert!(c.cri.enable && c.cri.principal == CriPrincipal::Pod && c.cri.containerd_address.is_none());
        assert!(!Config::parse("").unwrap().cri.enable);
        for bad in ["[cri]\nenable=true\nsocket='rel'", "[cri]\nenable=true\nsocket='/run/containerd/containerd.sock'", "[cri]\nprincipal='node'"] {
            assert!(Config::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn metrics_keys() {
        assert!(Config::parse("").unwrap().metrics.socket_addr().is_none());
        let c = Config::parse("[metrics]\naddress = '127.0.0.1:9464'\n").unwrap();
        assert_eq!(c.metrics.socket_addr(), Some("127.0.0.1:9464".parse().unwrap()));
        for bad in ["[metrics]\naddress = 'localhost'", "[metrics]\naddress = ':9464'", "[metrics]\nport = 1"] {
            assert!(Config::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rejects_bad_input() {
        assert!(matches!(Config::parse("[daemon]\nroot='rel'"), Err(ConfigError::Invalid(_))));
        assert!(matches!(Config::parse("[daemon]\nbogus=1"), Err(ConfigError::Parse { .. })));
        assert!(matches!(Config::parse("[daemon]\nsnapshotter_socket='/x'\napi_socket='/x'"), Err(ConfigError::Invalid(_))));
        assert!(matches!(Config::parse("[daemon]\nlog_level='[[['"), Err(ConfigError::Invalid(_))));
    }
}
