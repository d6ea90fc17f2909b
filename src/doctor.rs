//! doctor: `pullgate doctor`, the node check. It owns the facts it gathers (the running
//! containerd's plugins, version and namespaces through its Introspection, Version and
//! Namespaces services; containerd's config file; pullgate's config, sockets, files and API;
//! optionally the registries of the hosts directory), the checks made on them (pure functions
//! of the facts, unit-tested below) and their rendering as aligned text or JSON. It changes
//! nothing. Every check is ok, warning or problem, and says what fixes it; a problem makes the
//! command exit 1 (`EXIT_PROBLEM`).
use crate::config::{Config, ConfigError};
use crate::daemon::SNAPSHOTTER_NAME;
use containerd_client::services::v1::{
    introspection_client::IntrospectionClient, namespaces_client::NamespacesClient, snapshots::snapshots_client::SnapshotsClient,
    snapshots::StatSnapshotRequest, version_client::VersionClient, ListNamespacesRequest, PluginsRequest,
};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Exit code of `pullgate doctor` when a check found a problem (0: only ok and warnings).
pub const EXIT_PROBLEM: i32 = 1;

const SNAPSHOTTER_TYPE: &str = "io.containerd.snapshotter.v1";
/// The namespace label that makes a namespace's clients use a snapshotter with no flag.
pub const DEFAULT_SNAPSHOTTER_LABEL: &str = "containerd.io/defaults/snapshotter";
pub use crate::pull::containerd::SHAREABLE_LABEL;
/// Every snapshotter built into containerd 1.6 to 2.x on Linux: each one is a way around the gate.
const BUILTIN_SNAPSHOTTERS: [&str; 8] = ["overlayfs", "native", "btrfs", "zfs", "devmapper", "aufs", "blockfile", "erofs"];
const BOLT: &str = "io.containerd.metadata.v1.bolt";
const TRANSFER: &str = "io.containerd.transfer.v1.local";
/// How long one question to containerd or pullgate may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum DoctorError {
    #[error("cannot reach {what} at {address}: {reason}")]
    Connect { what: &'static str, address: PathBuf, reason: String },
    #[error("{what}: {code:?}: {message}")]
    Call { what: String, code: tonic::Code, message: String },
    #[error("{what}: no answer within {}s", CALL_TIMEOUT.as_secs())]
    Timeout { what: String },
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path} is not a valid containerd config: {reason}")]
    Parse { path: PathBuf, reason: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    Ok,
    Warning,
    Problem,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warning => "warning",
            Status::Problem => "problem",
        }
    }
}

/// One finding: `name` is the check's (stable) name; `fix` what to do, unless ok.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    pub message: String,
    pub fix: Option<String>,
}

fn ok(name: &'static str, message: impl Into<String>) -> Check {
    Check { name, status: Status::Ok, message: message.into(), fix: None }
}
fn warning(name: &'static str, message: impl Into<String>, fix: impl Into<String>) -> Check {
    Check { name, status: Status::Warning, message: message.into(), fix: Some(fix.into()) }
}
fn problem(name: &'static str, message: impl Into<String>, fix: impl Into<String>) -> Check {
    Check { name, status: Status::Problem, message: message.into(), fix: Some(fix.into()) }
}

/// What `pullgate doctor` was asked to look at.
#[derive(Debug, Clone)]
pub struct Options {
    /// pullgate's config file (its root and sockets; defaults when the file does not exist).
    pub pullgate_config: PathBuf,
    /// pullgate's API socket, when given on the command line (else the config's).
    pub api_address: Option<PathBuf>,
    /// containerd's socket, when given (else the config's `[daemon] containerd_address`).
    pub containerd_address: Option<PathBuf>,
    pub containerd_config: PathBuf,
    /// Also try every registry of `[registry] hosts_dir`.
    pub registries: bool,
}

// ---------------------------------------------------------------------------------------------
// containerd's config file

/// The parts of containerd's config.toml (version 2 or 3) that decide whether pullgate is the
/// only way to a rootfs.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ContainerdConfig {
    pub version: i64,
    pub disabled_plugins: Vec<String>,
    /// `[proxy_plugins.NAME]`: (type, address).
    pub proxy_plugins: BTreeMap<String, (String, String)>,
    /// CRI's snapshotter setting (None: unset, i.e. containerd's default, overlayfs).
    pub cri_snapshotter: Option<String>,
    /// The transfer service's `unpack_config` entries: (platform, snapshotter).
    pub unpack: Vec<(String, String)>,
    /// `content_sharing_policy` of the bolt metadata plugin (None: unset, i.e. shared).
    pub sharing_policy: Option<String>,
    /// `[grpc] address` (None: containerd's default).
    pub grpc_address: Option<String>,
}

/// The files a config's `imports` name, as containerd resolves them.
fn imports_of(v: &toml::Value, path: &Path) -> Result<Vec<PathBuf>, String> {
    let Some(list) = v.get("imports") else { return Ok(Vec::new()) };
    let list = list.as_array().ok_or("imports must be a list")?;
    let dir = path.parent().unwrap_or(Path::new("/"));
    let mut out = Vec::new();
    for i in list {
        let i = i.as_str().ok_or("imports must list strings")?;
        let pattern = dir.join(i);
        let found = glob::glob(&pattern.to_string_lossy()).map_err(|e| format!("import {i}: {e}"))?;
        let mut files: Vec<PathBuf> = found.filter_map(Result::ok).collect();
        files.sort();
        out.extend(files);
    }
    Ok(out)
}

/// Merges an imported config over `to` as containerd does: `disabled_plugins` and other
/// top-level lists are appended to, other tables merged key by key, other values replaced. A
/// proxy plugin's section is replaced whole; a plugin's too by containerd 1.x (its sections
/// are TOML trees), merged key by key by 2.x (`deep_plugins`: maps, merged as maps).
fn merge_config(to: &mut toml::Value, from: toml::Value, deep_plugins: bool) {
    let (Some(to), toml::Value::Table(from)) = (to.as_table_mut(), from) else { return };
    for (k, v) in from {
        match (to.get_mut(&k), v) {
            (Some(toml::Value::Array(a)), toml::Value::Array(b)) => a.extend(b),
            (Some(t @ toml::Value::Table(_)), toml::Value::Table(b)) if k == "proxy_plugins" || (k == "plugins" && !deep_plugins) => {
                if let Some(t) = t.as_table_mut() {
                    t.extend(b);
                }
            }
            (Some(t @ toml::Value::Table(_)), v @ toml::Value::Table(_)) => merge_tables(t, v),
            (_, v) => {
                to.insert(k, v);
            }
        }
    }
}

fn merge_tables(to: &mut toml::Value, from: toml::Value) {
    let (Some(to), toml::Value::Table(from)) = (to.as_table_mut(), from) else { return };
    for (k, v) in from {
        match to.get_mut(&k) {
            Some(t @ toml::Value::Table(_)) if v.is_table() => merge_tables(t, v),
            _ => {
                to.insert(k, v);
            }
        }
    }
}

fn lookup<'a>(v: &'a toml::Value, path: &[&str]) -> Option<&'a toml::Value> {
    path.iter().try_fold(v, |v, k| v.get(*k))
}

fn string_at(v: &toml::Value, path: &[&str]) -> Result<Option<String>, String> {
    match lookup(v, path) {
        None => Ok(None),
        Some(toml::Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("{} must be a string", path.join("."))),
    }
}

impl ContainerdConfig {
    pub fn parse(text: &str) -> Result<ContainerdConfig, String> {
        ContainerdConfig::of(&toml::from_str(text).map_err(|e: toml::de::Error| e.message().to_string())?)
    }

    fn of(v: &toml::Value) -> Result<ContainerdConfig, String> {
        let version = match v.get("version") {
            None => 1,
            Some(toml::Value::Integer(n)) => *n,
            Some(_) => return Err("version must be an integer".into()),
        };
        if !(2..=4).contains(&version) {
            return Err(format!(
                "config version {version} is not checked (containerd 1.6/1.7 take version 2, 2.x version 3, or 4 as 2.4 writes it); `containerd config migrate` converts it"
            ));
        }
        let disabled_plugins = match v.get("disabled_plugins") {
            None => Vec::new(),
            Some(toml::Value::Array(a)) => a.iter().map(|x| x.as_str().map(str::to_string).ok_or("disabled_plugins must list strings")).collect::<Result<_, _>>()?,
            Some(_) => return Err("disabled_plugins must be a list".into()),
        };
        let mut proxy_plugins = BTreeMap::new();
        if let Some(t) = v.get("proxy_plugins").and_then(toml::Value::as_table) {
            for (name, p) in t {
                let ty = string_at(p, &["type"])?.unwrap_or_default();
                let address = string_at(p, &["address"])?.unwrap_or_default();
                proxy_plugins.insert(name.clone(), (ty, address));
            }
        }
        // Version 3 is containerd 2.x's own layout (4, which 2.4 writes, keeps these keys); 2.x
        // migrates a version 2 file from the 1.x keys, so those are the ones to read in a
        // version 2 file whatever the daemon.
        let cri_snapshotter = if version >= 3 {
            string_at(v, &["plugins", "io.containerd.cri.v1.images", "snapshotter"])?
        } else {
            string_at(v, &["plugins", "io.containerd.grpc.v1.cri", "containerd", "snapshotter"])?
        };
        let mut unpack = Vec::new();
        match lookup(v, &["plugins", TRANSFER, "unpack_config"]) {
            None => {}
            Some(toml::Value::Array(a)) => {
                for e in a {
                    let platform = string_at(e, &["platform"])?.unwrap_or_default();
                    let snapshotter = string_at(e, &["snapshotter"])?.unwrap_or_default();
                    unpack.push((platform, snapshotter));
                }
            }
            Some(_) => return Err(format!("plugins.\"{TRANSFER}\".unpack_config must be an array of tables ([[...]])")),
        }
        Ok(ContainerdConfig {
            version,
            disabled_plugins,
            proxy_plugins,
            cri_snapshotter,
            unpack,
            sharing_policy: string_at(v, &["plugins", BOLT, "content_sharing_policy"])?,
            // Version 4 moved the socket into the server plugin's table.
            grpc_address: if version == 4 { string_at(v, &["plugins", "io.containerd.server.v1.grpc", "address"])? } else { string_at(v, &["grpc", "address"])? },
        })
    }

    /// The config as containerd reads it: the file, then every file its `imports` name
    /// (globs, relative to the importing file; their own imports too, each file once), merged
    /// over it in that order, as `containerd` (its version, when known) merges them; an
    /// unknown version is taken from the file's (3 and later: 2.x).
    pub fn load(path: &Path, containerd: Option<&str>) -> Result<ContainerdConfig, DoctorError> {
        let read = |p: &Path| -> Result<toml::Value, DoctorError> {
            let text = std::fs::read_to_string(p).map_err(|source| DoctorError::Read { path: p.to_path_buf(), source })?;
            toml::from_str(&text).map_err(|e: toml::de::Error| DoctorError::Parse { path: p.to_path_buf(), reason: e.message().to_string() })
        };
        let mut merged = toml::Value::Table(Default::default());
        let mut pending = std::collections::VecDeque::from([path.to_path_buf()]);
        let mut seen = std::collections::HashSet::new();
        while let Some(p) = pending.pop_front() {
            if !seen.insert(p.clone()) {
                continue;
            }
            let v = read(&p)?;
            pending.extend(imports_of(&v, &p).map_err(|reason| DoctorError::Parse { path: p.clone(), reason })?);
            let major = containerd.map(crate::pull::containerd::version_parts).filter(|v| *v != (0, 0, 0)).map(|(m, _, _)| m);
            let two_x = match major {
                Some(m) => m >= 2,
                None => merged.get("version").or(v.get("version")).and_then(toml::Value::as_integer).is_some_and(|n| n >= 3),
            };
            merge_config(&mut merged, v, two_x);
        }
        ContainerdConfig::of(&merged).map_err(|reason| DoctorError::Parse { path: path.to_path_buf(), reason })
    }

    fn disables(&self, plugin_type: &str, id: &str) -> bool {
        let full = format!("{plugin_type}.{id}");
        self.disabled_plugins.contains(&full)
    }
}

// ---------------------------------------------------------------------------------------------
// Facts

/// A plugin as containerd's Introspection service (`ctr plugins ls`) reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plugin {
    pub r#type: String,
    pub id: String,
    /// Its initialisation error (`ctr plugins ls` shows it as skip or error): not usable.
    pub init_err: Option<String>,
    pub address: Option<String>,
    /// The root directory it exports (a proxy plugin's `exports = { root = ... }`, 1.7+).
    pub root: Option<String>,
}

/// What the running containerd says about itself.
#[derive(Debug, Clone, Default)]
pub struct Daemon {
    pub version: String,
    pub plugins: Vec<Plugin>,
    /// (name, labels)
    pub namespaces: Vec<(String, BTreeMap<String, String>)>,
}

impl Daemon {
    fn present(&self, plugin_type: &str, id: &str) -> Option<&Plugin> {
        self.plugins.iter().find(|p| p.r#type == plugin_type && p.id == id)
    }
    /// containerd 1.6 ignores the namespace label that re-opens sharing.
    fn honours_shareable(&self) -> bool {
        crate::pull::containerd::honours_shareable(&self.version)
    }
}

async fn timed<T>(what: &str, f: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>) -> Result<T, DoctorError> {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Err(_) => Err(DoctorError::Timeout { what: what.to_string() }),
        Ok(Err(s)) => Err(DoctorError::Call { what: what.to_string(), code: s.code(), message: s.message().to_string() }),
        Ok(Ok(r)) => Ok(r.into_inner()),
    }
}

/// The error and its causes on one line (tonic's transport error alone says "transport error").
pub fn causes(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        // (hyper and std repeat a cause's text one level down: once is enough.)
        let text = c.to_string();
        if !s.ends_with(&text) {
            let _ = write!(s, ": {text}");
        }
        src = c.source();
    }
    s
}

async fn channel(what: &'static str, address: &Path) -> Result<tonic::transport::Channel, DoctorError> {
    let bad = |reason: String| DoctorError::Connect { what, address: address.to_path_buf(), reason };
    match tokio::time::timeout(CALL_TIMEOUT, crate::pull::containerd::channel(address)).await {
        Err(_) => Err(bad(format!("no answer within {}s", CALL_TIMEOUT.as_secs()))),
        Ok(Err(e)) => Err(bad(causes(&e))),
        Ok(Ok(ch)) => Ok(ch),
    }
}

/// Asks the running containerd for its version, plugins and namespaces.
pub async fn ask_containerd(address: &Path) -> Result<Daemon, DoctorError> {
    let ch = channel("containerd", address).await?;
    let version = timed("containerd version", VersionClient::new(ch.clone()).version(())).await?.version;
    let plugins = timed("containerd plugins", IntrospectionClient::new(ch.clone()).plugins(PluginsRequest { filters: vec![] }))
        .await?
        .plugins
        .into_iter()
        .map(|p| Plugin {
            init_err: p.init_err.map(|e| if e.message.is_empty() { format!("code {}", e.code) } else { e.message }),
            address: p.exports.get("address").cloned(),
            root: p.exports.get("root").cloned(),
            r#type: p.r#type,
            id: p.id,
        })
        .collect();
    let namespaces = timed("containerd namespaces", NamespacesClient::new(ch).list(ListNamespacesRequest { filter: String::new() }))
        .await?
        .namespaces
        .into_iter()
        .map(|n| (n.name, n.labels.into_iter().collect()))
        .collect();
    Ok(Daemon { version, plugins, namespaces })
}

/// pullgate's snapshotter socket answers a Snapshots call from its metadata (a Stat of a key
/// that does not exist: NotFound).
pub async fn ask_snapshotter(socket: &Path) -> Result<(), DoctorError> {
    let ch = channel("pullgate's snapshotter", socket).await?;
    let req = StatSnapshotRequest { snapshotter: SNAPSHOTTER_NAME.to_string(), key: "pullgate-doctor/0/probe".to_string() };
    match timed("pullgate's snapshotter (Stat)", SnapshotsClient::new(ch).stat(req)).await {
        Ok(_) => Ok(()),
        Err(DoctorError::Call { code: tonic::Code::NotFound, .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// pullgate's API answers `grants --all` from its ledger; the number of grants.
pub async fn ask_ledger(api: &Path) -> Result<usize, DoctorError> {
    use crate::api::proto::{pullgate_client::PullgateClient, GrantsRequest};
    let ch = channel("pullgate's API", api).await?;
    Ok(timed("pullgate's API (grants --all)", PullgateClient::new(ch).grants(GrantsRequest { namespace: String::new() })).await?.grants.len())
}

// ---------------------------------------------------------------------------------------------
// Checks on containerd (pure)

fn restart(cfg_path: &Path) -> String {
    format!("in {}, then restart containerd", cfg_path.display())
}

/// pullgate registered as a proxy snapshotter, at the socket pullgate serves on.
pub fn check_registration(d: &Daemon, cfg: Option<&ContainerdConfig>, cfg_path: &Path, socket: &Path) -> Check {
    let fix_add = format!(
        "add [proxy_plugins.pullgate] type = \"snapshot\", address = \"{}\" (plugin/containerd-1.x.toml or -2.x.toml) {}",
        socket.display(),
        restart(cfg_path)
    );
    let Some(p) = d.present(SNAPSHOTTER_TYPE, SNAPSHOTTER_NAME) else {
        return problem("snapshotter", "containerd has no snapshotter named pullgate", fix_add);
    };
    if let Some(e) = &p.init_err {
        return problem("snapshotter", format!("containerd's pullgate snapshotter did not load: {e}"), fix_add);
    }
    let address = p.address.clone().or_else(|| cfg.and_then(|c| c.proxy_plugins.get(SNAPSHOTTER_NAME)).map(|(_, a)| a.clone()));
    match address {
        Some(a) if Path::new(&a) != socket => problem(
            "snapshotter",
            format!("containerd reaches pullgate at {a}, but pullgate serves on {}", socket.display()),
            format!("set [proxy_plugins.pullgate] address = \"{}\" {} (or [daemon] snapshotter_socket in pullgate's config)", socket.display(), restart(cfg_path)),
        ),
        Some(a) => ok("snapshotter", format!("pullgate is registered in containerd {} ({SNAPSHOTTER_TYPE}, {a})", d.version)),
        None => ok("snapshotter", format!("pullgate is registered in containerd {} ({SNAPSHOTTER_TYPE})", d.version)),
    }
}

/// Where containerd's CRI reports the image filesystem (ImageFsInfo), which kubelet's image
/// garbage collection and eviction measure: the root pullgate's proxy plugin exports (read by
/// containerd 1.7 and later), which should be pullgate's own root. None when CRI does not go
/// through pullgate.
pub fn check_image_fs(d: &Daemon, cfg: &ContainerdConfig, cfg_path: &Path, pg_root: &Path) -> Option<Check> {
    if cfg.cri_snapshotter.as_deref() != Some(SNAPSHOTTER_NAME) {
        return None;
    }
    let p = d.present(SNAPSHOTTER_TYPE, SNAPSHOTTER_NAME)?;
    let missing = "containerd's CRI reports the image filesystem at <containerd root>/io.containerd.snapshotter.v1.pullgate, which a proxy snapshotter does not have: \
                   kubelet's image garbage collection and its eviction on the image filesystem fail";
    let add = format!("add exports = {{ root = \"{}\" }} to [proxy_plugins.pullgate] {}", pg_root.display(), restart(cfg_path));
    Some(match p.root.as_deref() {
        _ if !d.honours_shareable() => warning(
            "imagefs",
            format!("{missing} (containerd 1.6 does not read a proxy snapshotter's exported root)"),
            "upgrade containerd to 1.7 or later, whose CRI reads the root pullgate's fragment exports",
        ),
        None => warning("imagefs", missing, add),
        Some(r) if Path::new(r) != pg_root => warning(
            "imagefs",
            format!("containerd's CRI reports the image filesystem at {r}, but pullgate keeps its snapshots under {}", pg_root.display()),
            format!("set exports = {{ root = \"{}\" }} in [proxy_plugins.pullgate] {}", pg_root.display(), restart(cfg_path)),
        ),
        Some(r) => ok("imagefs", format!("containerd's CRI reports the image filesystem at pullgate's root {r} (kubelet's image garbage collection measures it)")),
    })
}

/// Every snapshotter other than pullgate that containerd loaded is a way around the gate.
pub fn check_bypass(d: &Daemon, cfg: Option<&ContainerdConfig>, cfg_path: &Path) -> Vec<Check> {
    let mut out = Vec::new();
    for p in d.plugins.iter().filter(|p| p.r#type == SNAPSHOTTER_TYPE && p.id != SNAPSHOTTER_NAME) {
        let proxy = cfg.is_some_and(|c| c.proxy_plugins.contains_key(&p.id));
        let fix = if proxy {
            format!("remove [proxy_plugins.{}] {}", p.id, restart(cfg_path))
        } else {
            format!("add \"{SNAPSHOTTER_TYPE}.{}\" to disabled_plugins {}", p.id, restart(cfg_path))
        };
        match &p.init_err {
            None => out.push(problem(
                "bypass",
                format!("snapshotter {} is loaded: `ctr run` or an unpack that names it (or finds it as the default) gets a rootfs of any cached image around the gate", p.id),
                fix,
            )),
            Some(e) => out.push(warning("bypass", format!("snapshotter {} is not disabled; it did not load here ({e}) but would where it can", p.id), fix)),
        }
    }
    if out.is_empty() {
        out.push(ok("bypass", "no snapshotter other than pullgate is loaded"));
    }
    out.sort_by_key(|c| std::cmp::Reverse(c.status));
    out
}

/// Without containerd's answer: the built-in snapshotters the config leaves enabled.
pub fn check_bypass_from_config(cfg: &ContainerdConfig, cfg_path: &Path) -> Vec<Check> {
    let mut out: Vec<Check> = BUILTIN_SNAPSHOTTERS
        .iter()
        .filter(|id| !cfg.disables(SNAPSHOTTER_TYPE, id))
        .map(|id| {
            problem(
                "bypass",
                format!("snapshotter {id} is not in disabled_plugins: where it loads, it unpacks any cached image around the gate"),
                format!("add \"{SNAPSHOTTER_TYPE}.{id}\" to disabled_plugins {}", restart(cfg_path)),
            )
        })
        .collect();
    for name in cfg.proxy_plugins.iter().filter(|(n, (t, _))| *n != SNAPSHOTTER_NAME && t == "snapshot").map(|(n, _)| n) {
        out.push(problem("bypass", format!("proxy snapshotter {name} is configured: a way around the gate"), format!("remove [proxy_plugins.{name}] {}", restart(cfg_path))));
    }
    if out.is_empty() {
        out.push(ok("bypass", "the config disables every built-in snapshotter (containerd not asked)"));
    }
    out
}

/// CRI's snapshotter. Checked in the config whether or not CRI is loaded (a disabled CRI may
/// be enabled later); a wrong one is a problem only where CRI runs.
pub fn check_cri(d: Option<&Daemon>, cfg: &ContainerdConfig, cfg_path: &Path) -> Check {
    let key = if cfg.version == 3 {
        "[plugins.\"io.containerd.cri.v1.images\"] snapshotter"
    } else {
        "[plugins.\"io.containerd.grpc.v1.cri\".containerd] snapshotter"
    };
    // containerd 1.x: io.containerd.grpc.v1 cri; 2.x: io.containerd.cri.v1 images (and the
    // grpc.v1 cri server on top). Unknown without containerd's answer: assume it runs.
    let plugins: Vec<&Plugin> = d.map_or_else(Vec::new, |d| {
        [("io.containerd.grpc.v1", "cri"), ("io.containerd.cri.v1", "images")].iter().filter_map(|(t, id)| d.present(t, id)).collect()
    });
    let failed = plugins.iter().find_map(|p| p.init_err.clone());
    let absent = d.is_some() && plugins.is_empty();
    let fix = format!("set {key} = \"pullgate\" {}", restart(cfg_path));
    match (cfg.cri_snapshotter.as_deref(), failed) {
        (Some(SNAPSHOTTER_NAME), None) if absent => ok("cri", format!("CRI is not loaded; when enabled it goes through pullgate ({key} = \"pullgate\")")),
        (Some(SNAPSHOTTER_NAME), None) => ok("cri", format!("CRI unpacks and runs through pullgate ({key} = \"pullgate\")")),
        (Some(SNAPSHOTTER_NAME), Some(e)) => {
            problem("cri", format!("CRI is set to pullgate but did not load: {e}"), "read containerd's log (journalctl -u containerd) and fix what it names")
        }
        (other, failed) => {
            let what = other.map_or("unset (containerd's default, overlayfs)".to_string(), |s| format!("\"{s}\""));
            let state = match (&failed, absent) {
                (Some(e), _) => format!(" (CRI did not load: {e})"),
                (None, true) => " (CRI is not loaded)".to_string(),
                (None, false) => String::new(),
            };
            let message = format!("CRI's snapshotter is {what}: Kubernetes pods would not go through pullgate{state}");
            if absent { warning("cri", message, fix) } else { problem("cri", message, fix) }
        }
    }
}

/// This machine's platform as containerd names it (`linux/amd64`).
pub fn local_platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    };
    format!("linux/{arch}")
}

/// The transfer service's unpack targets (containerd 1.7+; `ctr images pull` on 2.x).
pub fn check_transfer(d: Option<&Daemon>, cfg: &ContainerdConfig, cfg_path: &Path, platform: &str) -> Vec<Check> {
    let fix_add = format!(
        "add [[plugins.\"{TRANSFER}\".unpack_config]] platform = \"{platform}\", snapshotter = \"pullgate\" {}",
        restart(cfg_path)
    );
    let plugin = d.and_then(|d| d.present("io.containerd.transfer.v1", "local"));
    if let (Some(d), None) = (d, plugin) {
        return vec![ok("transfer", format!("containerd {} has no transfer service (1.6, or disabled): nothing unpacks through it", d.version))];
    }
    if let Some(e) = plugin.and_then(|p| p.init_err.as_ref()) {
        return vec![warning("transfer", format!("the transfer service did not load ({e}): `ctr images pull` on 2.x fails"), fix_add)];
    }
    let mut out: Vec<Check> = cfg
        .unpack
        .iter()
        .filter(|(_, s)| s != SNAPSHOTTER_NAME)
        .map(|(p, s)| {
            problem(
                "transfer",
                format!("the transfer service unpacks {p} into snapshotter \"{s}\", not pullgate"),
                format!("set snapshotter = \"pullgate\" in that [[plugins.\"{TRANSFER}\".unpack_config]] {}", restart(cfg_path)),
            )
        })
        .collect();
    let ours: Vec<&str> = cfg.unpack.iter().filter(|(_, s)| s == SNAPSHOTTER_NAME).map(|(p, _)| p.as_str()).collect();
    if cfg.unpack.is_empty() {
        out.push(problem("transfer", "the transfer service has no unpack_config: it unpacks into containerd's default snapshotter", fix_add));
    } else if !ours.is_empty() && !ours.iter().any(|p| p.starts_with(platform)) {
        out.push(warning("transfer", format!("the transfer service unpacks {} into pullgate, but this machine is {platform}", ours.join(", ")), fix_add));
    } else if out.is_empty() {
        out.push(ok("transfer", format!("the transfer service unpacks {} into pullgate", ours.join(", "))));
    }
    out
}

/// The content sharing policy (shared: any namespace reads another's blobs by digest).
pub fn check_sharing(cfg: &ContainerdConfig, cfg_path: &Path) -> Check {
    let fix = format!("set content_sharing_policy = \"isolated\" under [plugins.\"{BOLT}\"] {}", restart(cfg_path));
    match cfg.sharing_policy.as_deref() {
        Some("isolated") => ok("sharing", "content_sharing_policy = \"isolated\": a namespace reads only blobs it wrote or was given"),
        Some("shared") | None => warning(
            "sharing",
            format!(
                "content_sharing_policy is {}: any namespace can read another's blobs by digest through the content API (pullgate still refuses to unpack or run them; the bytes stay readable)",
                if cfg.sharing_policy.is_some() { "\"shared\"" } else { "unset (containerd's default, shared)" }
            ),
            fix,
        ),
        Some(other) => problem("sharing", format!("content_sharing_policy = \"{other}\" is not a policy containerd knows"), fix),
    }
}

/// Namespaces that default to pullgate, those that do not, and those whose blobs every
/// namespace may read.
pub fn check_namespaces(d: &Daemon, cri_is_pullgate: bool, public_namespace: &str) -> Vec<Check> {
    let mut out = Vec::new();
    let (mut ours, mut unlabelled, mut others) = (Vec::new(), Vec::new(), Vec::new());
    for (name, labels) in d.namespaces.iter().filter(|(n, _)| public_namespace.is_empty() || n != public_namespace) {
        match labels.get(DEFAULT_SNAPSHOTTER_LABEL).map(String::as_str) {
            Some(SNAPSHOTTER_NAME) => ours.push(name.as_str()),
            // CRI's own setting decides for its namespace.
            None if name == "k8s.io" && cri_is_pullgate => {}
            None => unlabelled.push(name.as_str()),
            Some(s) => others.push((name.as_str(), s)),
        }
    }
    let label_fix = |ns: &str| format!("ctr namespaces label {ns} {DEFAULT_SNAPSHOTTER_LABEL}={SNAPSHOTTER_NAME}");
    if !ours.is_empty() {
        out.push(ok("namespaces", format!("namespaces that default to pullgate: {}", ours.join(", "))));
    }
    if !unlabelled.is_empty() {
        out.push(warning(
            "namespaces",
            format!("namespaces without {DEFAULT_SNAPSHOTTER_LABEL}=pullgate: {} (their clients must pass --snapshotter pullgate)", unlabelled.join(", ")),
            label_fix(unlabelled[0]),
        ));
    }
    for (ns, s) in others {
        out.push(warning("namespaces", format!("namespace {ns} defaults to snapshotter {s}"), label_fix(ns)));
    }
    if out.is_empty() {
        out.push(ok("namespaces", format!("no namespace yet; label new ones {DEFAULT_SNAPSHOTTER_LABEL}=pullgate")));
    }
    for (name, labels) in &d.namespaces {
        if !public_namespace.is_empty() && name == public_namespace {
            out.push(ok(
                "shareable",
                format!(
                    "namespace {name} is pullgate's public namespace ([daemon] public_namespace): pullgate puts there only blobs their origin served it \
                     without credentials, so that under an isolated content store every namespace takes them without a copy; it refuses pulls and \
                     verifies there, and each pull or verify of an image with a blob it knows as public (isolated store) checks that everything there \
                     is public and takes the shareable label away otherwise (doctor does not look at what it holds; a client with containerd's \
                     socket can write there between two such pulls, as into any namespace){}",
                    if labels.get(SHAREABLE_LABEL).map(String::as_str) == Some("true") {
                        ""
                    } else {
                        "; it is not labelled shareable now: the next pull that needs it labels it, once everything in it is found public"
                    }
                ),
            ));
            continue;
        }
        if labels.get(SHAREABLE_LABEL).map(String::as_str) == Some("true") {
            let effect = if d.honours_shareable() {
                "every namespace can read its blobs by digest, even under the isolated policy"
            } else {
                "containerd 1.6 ignores it, 1.7+ lets every namespace read its blobs by digest"
            };
            out.push(warning(
                "shareable",
                format!("namespace {name} is labelled {SHAREABLE_LABEL}=true: {effect} (any client may set this label)"),
                format!("ctr namespaces label {name} {SHAREABLE_LABEL}= (removes it), unless sharing its blobs is intended"),
            ));
        }
    }
    out
}

/// The config file doctor read is the running containerd's (its `[grpc] address` is the socket
/// doctor asked).
pub fn check_config_matches(cfg: &ContainerdConfig, cfg_path: &Path, address: &Path) -> Option<Check> {
    let configured = cfg.grpc_address.clone().unwrap_or_else(|| "/run/containerd/containerd.sock".to_string());
    (Path::new(&configured) != address).then(|| {
        warning(
            "config",
            format!("{} serves on {configured}, but the containerd asked is at {}: the config read may not be the running containerd's", cfg_path.display(), address.display()),
            "pass the running containerd's config with --containerd-config and its socket with --containerd-address",
        )
    })
}

// ---------------------------------------------------------------------------------------------
// pullgate's files

/// A path that must be root-only: `0o077` for files, sockets and the root, `0o022` for the
/// directories that hold the sockets (others must not replace them).
fn check_mode(path: &Path, forbidden: u32, missing_ok: bool) -> Result<Option<String>, Check> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && missing_ok => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(warning(
            "permissions",
            format!("{} does not exist (has pullgate started with this config?)", path.display()),
            "start pullgate, or pass its config with --config",
        )),
        Err(e) => Err(warning("permissions", format!("cannot inspect {}: {e}", path.display()), "run pullgate doctor as root")),
        Ok(m) => {
            let mode = m.mode() & 0o7777;
            let kind = if m.file_type().is_socket() { "socket" } else if m.is_dir() { "directory" } else { "file" };
            let want = if m.is_dir() && forbidden == 0o022 { "0755 or stricter" } else if m.is_dir() { "0700" } else { "0600" };
            if m.uid() != 0 {
                return Err(problem(
                    "permissions",
                    format!("{kind} {} is owned by uid {}, not root", path.display(), m.uid()),
                    format!("chown root:root {}", path.display()),
                ));
            }
            if mode & forbidden != 0 {
                return Err(problem(
                    "permissions",
                    format!("{kind} {} is {mode:04o}: others can {}", path.display(), if forbidden == 0o022 { "replace what it holds" } else { "read or use it" }),
                    format!("chmod {} {}", if want == "0600" { "600" } else if want == "0700" { "700" } else { "go-w" }, path.display()),
                ));
            }
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| path.display().to_string());
            Ok(Some(format!("{name}{} {mode:04o}", if m.is_dir() { "/" } else { "" })))
        }
    }
}

/// pullgate's root, key file, metadata and sockets are root-only.
pub fn check_permissions(cfg: &Config) -> Vec<Check> {
    let root = &cfg.daemon.root;
    let mut paths: Vec<(PathBuf, u32, bool)> = vec![
        (root.clone(), 0o077, false),
        (root.join("identity.key"), 0o077, false),
        (root.join("metadata.redb"), 0o077, false),
    ];
    let mut sockets = vec![cfg.daemon.snapshotter_socket.clone(), cfg.daemon.api_socket.clone()];
    if cfg.cri.enable {
        sockets.push(cfg.cri.socket.clone());
    }
    for s in &sockets {
        paths.push((s.clone(), 0o077, true));
        if let Some(dir) = s.parent() {
            if !paths.iter().any(|(p, _, _)| p == dir) {
                paths.push((dir.to_path_buf(), 0o022, true));
            }
        }
    }
    let mut out = Vec::new();
    let mut fine = Vec::new();
    for (p, forbidden, missing_ok) in paths {
        match check_mode(&p, forbidden, missing_ok) {
            Ok(Some(s)) => fine.push(s),
            Ok(None) => {}
            Err(c) => out.push(c),
        }
    }
    if out.is_empty() {
        out.push(ok("permissions", format!("root-only: {}", fine.join(", "))));
    }
    out
}

/// Under the CRI front, whether pods of one Kubernetes namespace can run what another's pull
/// secret pulled: `k8s.io` requires a principal unless the operator turned that off.
pub fn check_cri_principals(cfg: &Config) -> Option<Check> {
    if !cfg.cri.enable {
        return None;
    }
    Some(if cfg.cri_principal_turned_off() {
        warning(
            "principals",
            "require_principal is off for k8s.io: a namespace-wide grant there (one made by ctr or pullgate's CLI without --principal) counts for every pod, so a pod may run a private image no secret of its own opened",
            "remove require_principal = false from [namespaces.\"k8s.io\"] in pullgate's config (it is on by default with the CRI front)",
        )
    } else {
        ok("principals", "k8s.io requires a principal: a pod runs a private image only on a grant of its own")
    })
}

// ---------------------------------------------------------------------------------------------
// Registries

/// The hosts directory's entry for every registry without a directory of its own.
const DEFAULT_DIR: &str = "_default";

/// `reading`: how the running containerd asks an http server with TLS settings, as pulls ask it.
async fn check_registries(cfg: &Config, reading: crate::registry::hosts::HttpWithTls) -> Vec<Check> {
    let Some(dir) = cfg.registry.hosts_dir.as_deref() else {
        return vec![warning("registry", "no [registry] hosts_dir in pullgate's config: no registry to try", "set [registry] hosts_dir, or drop --registries")];
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => return vec![problem("registry", format!("cannot read the hosts directory {}: {e}", dir.display()), "fix [registry] hosts_dir in pullgate's config")],
    };
    // Every registry directory (`host`, or `host_port_`), with a hosts.toml or certificate files.
    // `_default` (every registry without a directory of its own) is read as containerd reads it
    // too: its hosts.toml must parse, and the server it names (if any) answer.
    let names: Vec<String> = entries.filter_map(|e| e.ok()).filter(|e| e.path().is_dir()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    let mut hosts: Vec<String> = names.iter().filter_map(|n| crate::registry::hosts::host_of_dir(n)).collect();
    hosts.sort();
    hosts.dedup();
    if names.iter().any(|n| n == DEFAULT_DIR) {
        hosts.push(DEFAULT_DIR.to_string());
    }
    if hosts.is_empty() {
        return vec![warning("registry", format!("{} names no registry (no <host> directory)", dir.display()), "add DIR/<host>/hosts.toml for each registry")];
    }
    let mut out = Vec::new();
    for host in hosts {
        let mut ep = match crate::registry::hosts::endpoint(&host, Some(dir), false, None) {
            Ok(ep) => ep,
            Err(e) => {
                out.push(problem("registry", format!("registry {host}: {e}"), "fix its hosts.toml"));
                continue;
            }
        };
        ep.read_as(reading);
        let client = match crate::registry::http_client(&ep, Some(CALL_TIMEOUT)) {
            Ok(c) => c,
            Err(e) => {
                out.push(problem("registry", format!("registry {host}: {e}"), "fix its hosts.toml"));
                continue;
            }
        };
        if host == DEFAULT_DIR && ep.base == format!("https://{DEFAULT_DIR}") {
            // (Its TLS files were read above.) pullgate uses no [host."..."] mirrors.
            out.push(ok("registry", format!("{DEFAULT_DIR} (every registry without a directory of its own) reads well and names no server: pullgate asks each registry itself")));
            continue;
        }
        let mut url = format!("{}/v2/", ep.base);
        let mut answer = tokio::time::timeout(CALL_TIMEOUT * 2, client.get(&url).send()).await;
        // An http server with TLS settings is asked over https first, as pulls ask it.
        if let (Ok(Err(e)), Some(plain)) = (&answer, &ep.plain_fallback) {
            if crate::registry::falls_back(e, ep.refused_falls_back) {
                url = format!("{plain}/v2/");
                answer = tokio::time::timeout(CALL_TIMEOUT * 2, client.get(&url).send()).await;
            }
        }
        match answer {
            Ok(Ok(r)) => out.push(ok("registry", format!("registry {host} answers at {url} (HTTP {})", r.status().as_u16()))),
            Ok(Err(e)) => out.push(problem("registry", format!("registry {host} does not answer at {url}: {}", causes(&e)), "check the network, the registry and its hosts.toml")),
            Err(_) => out.push(problem("registry", format!("registry {host} does not answer at {url} within {}s", (CALL_TIMEOUT * 2).as_secs()), "check the network and the registry")),
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The whole check

/// Runs every check; never fails (what cannot be asked or read is itself a finding).
pub async fn run(opts: &Options) -> Vec<Check> {
    let mut out = Vec::new();
    let pg = match Config::load(&opts.pullgate_config) {
        Ok(c) => c,
        Err(ConfigError::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            out.push(warning(
                "pullgate",
                format!("no pullgate config at {}: checking the default paths", opts.pullgate_config.display()),
                "pass pullgate's config with --config",
            ));
            Config::default()
        }
        Err(e) => {
            out.push(problem("pullgate", e.to_string(), "fix pullgate's config (see config.toml.example); the default paths are checked"));
            Config::default()
        }
    };
    let api = opts.api_address.clone().unwrap_or_else(|| pg.daemon.api_socket.clone());
    let address = opts.containerd_address.clone().unwrap_or_else(|| pg.daemon.containerd_address.clone());
    let socket = &pg.daemon.snapshotter_socket;

    let daemon = match ask_containerd(&address).await {
        Ok(d) => {
            out.push(ok("containerd", format!("containerd {} answers at {}", d.version, address.display())));
            Some(d)
        }
        Err(e) => {
            out.push(problem(
                "containerd",
                format!("{e}; pullgate's registration, loaded snapshotters and namespaces are not checked"),
                "start containerd, or pass its socket with --containerd-address",
            ));
            None
        }
    };
    let cfg = match ContainerdConfig::load(&opts.containerd_config, daemon.as_ref().map(|d| d.version.as_str())) {
        Ok(c) => {
            out.push(ok("config", format!("read {} (version {})", opts.containerd_config.display(), c.version)));
            out.extend(check_config_matches(&c, &opts.containerd_config, &address));
            Some(c)
        }
        Err(e) => {
            out.push(problem(
                "config",
                format!("{e}; CRI, transfer and content-sharing settings are not checked"),
                "pass containerd's config with --containerd-config (containerd --config PATH)",
            ));
            None
        }
    };
    if let Some(d) = &daemon {
        out.push(check_registration(d, cfg.as_ref(), &opts.containerd_config, socket));
        out.extend(cfg.as_ref().and_then(|c| check_image_fs(d, c, &opts.containerd_config, &pg.daemon.root)));
        out.extend(check_bypass(d, cfg.as_ref(), &opts.containerd_config));
    } else if let Some(c) = &cfg {
        out.extend(check_bypass_from_config(c, &opts.containerd_config));
    }
    if let Some(c) = &cfg {
        out.push(check_cri(daemon.as_ref(), c, &opts.containerd_config));
        out.extend(check_transfer(daemon.as_ref(), c, &opts.containerd_config, &local_platform()));
        out.push(check_sharing(c, &opts.containerd_config));
    }
    if let Some(d) = &daemon {
        let cri_is_pullgate = cfg.as_ref().and_then(|c| c.cri_snapshotter.as_deref()) == Some(SNAPSHOTTER_NAME);
        out.extend(check_namespaces(d, cri_is_pullgate, &pg.daemon.public_namespace));
    }
    out.push(match ask_snapshotter(socket).await {
        Ok(()) => ok("serving", format!("pullgate answers on {} from its metadata", socket.display())),
        Err(e) => problem("serving", e.to_string(), "start pullgate (systemctl start pullgate) and read its log; or pass its config with --config"),
    });
    out.push(match ask_ledger(&api).await {
        Ok(n) => ok("ledger", format!("pullgate's API answers at {} and its ledger reads ({n} grant(s))", api.display())),
        Err(e @ DoctorError::Call { .. }) => problem("ledger", e.to_string(), "read pullgate's log; a damaged ledger fails closed"),
        Err(e) => problem("ledger", e.to_string(), "start pullgate, or pass its API socket with --address"),
    });
    out.extend(check_permissions(&pg));
    out.extend(check_cri_principals(&pg));
    if opts.registries {
        let reading = crate::pull::containerd::http_with_tls(daemon.as_ref().map(|d| d.version.as_str()).unwrap_or_default());
        out.extend(check_registries(&pg, reading).await);
    }
    out
}

/// The exit code for these findings.
pub fn exit_code(checks: &[Check]) -> i32 {
    if checks.iter().any(|c| c.status == Status::Problem) { EXIT_PROBLEM } else { 0 }
}

fn counts(checks: &[Check]) -> [usize; 3] {
    let n = |s| checks.iter().filter(|c| c.status == s).count();
    [n(Status::Ok), n(Status::Warning), n(Status::Problem)]
}

/// One line per check (status, name, message; fix), then the summary.
pub fn render_text(checks: &[Check]) -> String {
    let width = checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
    let mut s = String::new();
    for c in checks {
        // Messages quote what containerd holds (namespace labels any client may set): control
        // characters are escaped, so that no value can draw lines of its own on a terminal.
        let _ = write!(s, "{:<8} {:<width$}  {}", c.status.as_str(), c.name, printable(&c.message));
        if let Some(f) = &c.fix {
            let _ = write!(s, "; fix: {}", printable(f));
        }
        s.push('\n');
    }
    let [o, w, p] = counts(checks);
    let _ = writeln!(s, "\n{o} ok, {w} warning(s), {p} problem(s){}", if p > 0 { "; fix the problems and run pullgate doctor again" } else { "" });
    s
}

/// `text` with every control character escaped (`\n`, `\u{1b}`).
fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if text.chars().any(char::is_control) {
        text.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect::<String>().into()
    } else {
        text.into()
    }
}

/// `{"checks": [{"name", "status", "message", "fix"}], "ok", "warnings", "problems"}`;
/// `fix` is null for an ok check.
pub fn render_json(checks: &[Check]) -> serde_json::Value {
    let [o, w, p] = counts(checks);
    serde_json::json!({
        "checks": checks.iter().map(|c| serde_json::json!({
            "name": c.name, "status": c.status.as_str(), "message": c.message, "fix": c.fix,
        })).collect::<Vec<_>>(),
        "ok": o, "warnings": w, "problems": p,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const V2: &str = include_str!("../plugin/containerd-1.x.toml");
    const V3: &str = include_str!("../plugin/containerd-2.x.toml");

    fn plugin(t: &str, id: &str, err: Option<&str>) -> Plugin {
        Plugin { r#type: t.into(), id: id.into(), init_err: err.map(Into::into), address: None, root: None }
    }

    fn daemon(plugins: Vec<Plugin>) -> Daemon {
        Daemon { version: "1.7.24".into(), plugins, namespaces: vec![] }
    }

    fn statuses(c: &[Check]) -> Vec<Status> {
        c.iter().map(|c| c.status).collect()
    }

    #[test]
    fn imports_are_read_and_merged() {
        let d = tempfile::tempdir().unwrap();
        let main = d.path().join("config.toml");
        std::fs::create_dir(d.path().join("conf.d")).unwrap();
        std::fs::write(&main, format!("imports = [\"conf.d/*.toml\"]\n{V2}")).unwrap();
        std::fs::write(
            d.path().join("conf.d/10-shared.toml"),
            "version = 2\ndisabled_plugins = [\"x.y\"]\n[plugins.\"io.containerd.metadata.v1.bolt\"]\ncontent_sharing_policy = \"shared\"\n[[plugins.\"io.containerd.transfer.v1.local\".unpack_config]]\nplatform = \"linux/amd64\"\nsnapshotter = \"overlayfs\"\n",
        )
        .unwrap();
        let c = ContainerdConfig::load(&main, Some("1.7.24")).unwrap();
        assert_eq!(c.sharing_policy.as_deref(), Some("shared"));
        assert_eq!(c.unpack, vec![("linux/amd64".to_string(), "overlayfs".to_string())]);
        assert!(c.disables("io.containerd.snapshotter.v1", "overlayfs") && c.disabled_plugins.iter().any(|p| p == "x.y"));
        assert_eq!(c.proxy_plugins.get("pullgate").map(|p| p.0.as_str()), Some("snapshot"));
        // An import that names itself is read once.
        std::fs::write(&main, format!("imports = [\"config.toml\"]\n{V2}")).unwrap();
        assert!(ContainerdConfig::load(&main, None).is_ok());
    }

    #[test]
    fn a_plugins_section_imported_replaces_it_on_1x_and_merges_into_it_on_2x() {
        let d = tempfile::tempdir().unwrap();
        let main = d.path().join("config.toml");
        std::fs::create_dir(d.path().join("site")).unwrap();
        let images = "[plugins.\"io.containerd.cri.v1.images\"]";
        std::fs::write(&main, format!("imports = [\"site/*.toml\"]\nversion = 3\n{images}\nsnapshotter = \"pullgate\"\n")).unwrap();
        std::fs::write(d.path().join("site/sandbox.toml"), "version = 3\n[plugins.\"io.containerd.cri.v1.images\".pinned_images]\nsandbox = \"reg/pause:v1\"\n").unwrap();
        // As containerd 2.1's own `config dump` reads it: both keys.
        for version in [Some("2.1.4"), Some("v2.4.0"), None] {
            assert_eq!(ContainerdConfig::load(&main, version).unwrap().cri_snapshotter.as_deref(), Some("pullgate"), "{version:?}");
        }
        // containerd 1.x replaces the section whole (its sections are TOML trees).
        let v1 = |cri: &str| format!("imports = [\"site/*.toml\"]\nversion = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n{cri}");
        std::fs::write(&main, v1("sandbox_image = \"x\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\nsnapshotter = \"pullgate\"\n")).unwrap();
        std::fs::write(d.path().join("site/sandbox.toml"), "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\nsandbox_image = \"reg/pause:v1\"\n").unwrap();
        assert_eq!(ContainerdConfig::load(&main, Some("1.7.24")).unwrap().cri_snapshotter, None);
        // A proxy plugin's section is replaced whole by every version.
        std::fs::write(&main, "imports = [\"site/*.toml\"]\nversion = 3\n[proxy_plugins.pullgate]\ntype = \"snapshot\"\naddress = \"/a.sock\"\n").unwrap();
        std::fs::write(d.path().join("site/sandbox.toml"), "version = 3\n[proxy_plugins.pullgate]\naddress = \"/b.sock\"\n").unwrap();
        for version in [Some("2.1.4"), Some("1.7.24"), Some(""), None] {
            let c = ContainerdConfig::load(&main, version).unwrap();
            assert_eq!(c.proxy_plugins.get("pullgate").map(|p| p.0.as_str()), Some(""), "{version:?}: {:?}", c.proxy_plugins);
        }
    }

    #[test]
    fn values_from_containerd_cannot_draw_lines() {
        let label = "x\u{1b}[2K\r\nok       sharing      fine";
        let out = render_text(&[ok("namespaces", format!("namespace e defaults to {label}"))]);
        assert_eq!(out.lines().filter(|l| l.starts_with("ok")).count(), 1, "{out}");
        assert!(!out.contains('\u{1b}') && out.contains("\\u{1b}[2K\\r\\nok"), "{out}");
    }

    #[test]
    fn shipped_fragments_are_sound() {
        let p = Path::new("/etc/containerd/config.toml");
        for (text, version) in [(V2, 2), (V3, 3)] {
            let c = ContainerdConfig::parse(text).unwrap();
            assert_eq!(c.version, version);
            assert_eq!(c.proxy_plugins.get("pullgate").unwrap(), &("snapshot".to_string(), "/run/pullgate/snapshotter.sock".to_string()));
            assert_eq!(check_cri(None, &c, p).status, Status::Ok, "{text}");
            assert_eq!(statuses(&check_transfer(None, &c, p, "linux/amd64")), vec![Status::Ok]);
            // Every built-in the version has is disabled (2.x adds erofs).
            let left: Vec<_> = check_bypass_from_config(&c, p).into_iter().filter(|c| c.status != Status::Ok).map(|c| c.message).collect();
            if version == 3 {
                assert!(left.is_empty(), "{left:?}");
            } else {
                assert!(left.len() == 1 && left[0].contains("erofs"), "{left:?}");
            }
            // Right whether or not the fragment sets the isolated policy.
            let want = if c.sharing_policy.as_deref() == Some("isolated") { Status::Ok } else { Status::Warning };
            assert_eq!(check_sharing(&c, p).status, want);
        }
    }

    #[test]
    fn config_keys_by_version() {
        let c = ContainerdConfig::parse("version = 3\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\nsnapshotter = \"pullgate\"\n").unwrap();
        assert_eq!(c.cri_snapshotter, None, "a version 3 file's CRI key is io.containerd.cri.v1.images");
        let c = ContainerdConfig::parse(
            "version = 2\n[grpc]\naddress = \"/x.sock\"\n[plugins.\"io.containerd.metadata.v1.bolt\"]\ncontent_sharing_policy = \"isolated\"\n",
        )
        .unwrap();
        assert_eq!((c.sharing_policy.as_deref(), c.grpc_address.as_deref()), (Some("isolated"), Some("/x.sock")));
        assert_eq!(check_sharing(&c, Path::new("/c")).status, Status::Ok);
        assert!(ContainerdConfig::parse("root = \"/x\"\n").unwrap_err().contains("version 1"));
        assert!(ContainerdConfig::parse("version = 5\n").unwrap_err().contains("version 5"));
        let c = ContainerdConfig::parse("version = 4\n[plugins.\"io.containerd.cri.v1.images\"]\nsnapshotter = \"pullgate\"\n").unwrap();
        assert_eq!(c.cri_snapshotter.as_deref(), Some("pullgate"), "2.4's version 4 reads as 3");
        let c = ContainerdConfig::parse("version = 4\n[plugins.'io.containerd.server.v1.grpc']\naddress = '/y.sock'\n").unwrap();
        assert_eq!(c.grpc_address.as_deref(), Some("/y.sock"));
        assert!(ContainerdConfig::parse("version = 2\ndisabled_plugins = \"x\"\n").is_err());
        assert!(ContainerdConfig::parse("version = 2\n[plugins.\"io.containerd.transfer.v1.local\"]\nunpack_config = 3\n").is_err());
        assert!(ContainerdConfig::parse("[[[").is_err());
        let shared = ContainerdConfig::parse("version = 2\n[plugins.\"io.containerd.metadata.v1.bolt\"]\ncontent_sharing_policy = \"shared\"\n").unwrap();
        let c = check_sharing(&shared, Path::new("/c"));
        assert!(c.status == Status::Warning && c.message.contains("by digest") && c.fix.unwrap().contains("isolated"));
    }

    #[test]
    fn loaded_snapshotters_are_a_bypass() {
        let p = Path::new("/c");
        let d = daemon(vec![
            plugin(SNAPSHOTTER_TYPE, "pullgate", None),
            plugin(SNAPSHOTTER_TYPE, "overlayfs", None),
            plugin(SNAPSHOTTER_TYPE, "btrfs", Some("not a btrfs filesystem")),
            plugin("io.containerd.content.v1", "content", None),
        ]);
        let c = check_bypass(&d, None, p);
        assert_eq!(statuses(&c), vec![Status::Problem, Status::Warning]);
        assert!(c[0].message.contains("overlayfs") && c[0].fix.as_deref().unwrap().contains("\"io.containerd.snapshotter.v1.overlayfs\" to disabled_plugins"));
        let cfg = ContainerdConfig::parse("version = 2\n[proxy_plugins.stargz]\ntype = \"snapshot\"\naddress = \"/s\"\n").unwrap();
        let c = check_bypass(&daemon(vec![plugin(SNAPSHOTTER_TYPE, "stargz", None)]), Some(&cfg), p);
        assert!(c[0].status == Status::Problem && c[0].fix.as_deref().unwrap().contains("remove [proxy_plugins.stargz]"));
        assert_eq!(statuses(&check_bypass(&daemon(vec![plugin(SNAPSHOTTER_TYPE, "pullgate", None)]), None, p)), vec![Status::Ok]);
    }

    #[test]
    fn registration() {
        let p = Path::new("/c");
        let sock = Path::new("/run/pullgate/snapshotter.sock");
        assert_eq!(check_registration(&daemon(vec![]), None, p, sock).status, Status::Problem);
        assert_eq!(check_registration(&daemon(vec![plugin(SNAPSHOTTER_TYPE, "pullgate", Some("boom"))]), None, p, sock).status, Status::Problem);
        let mut pl = plugin(SNAPSHOTTER_TYPE, "pullgate", None);
        pl.address = Some("/elsewhere.sock".into());
        let c = check_registration(&daemon(vec![pl.clone()]), None, p, sock);
        assert!(c.status == Status::Problem && c.message.contains("/elsewhere.sock"));
        pl.address = Some(sock.display().to_string());
        assert_eq!(check_registration(&daemon(vec![pl]), None, p, sock).status, Status::Ok);
    }

    #[test]
    fn image_fs() {
        let (p, root) = (Path::new("/c"), Path::new("/var/lib/pullgate"));
        let cfg = ContainerdConfig::parse(V3).unwrap();
        let mut pl = plugin(SNAPSHOTTER_TYPE, "pullgate", None);
        // The shipped fragments export pullgate's default root.
        for f in [V2, V3] {
            assert!(f.contains("exports = { root = \"/var/lib/pullgate\" }"));
        }
        let c = check_image_fs(&daemon(vec![pl.clone()]), &cfg, p, root).unwrap();
        assert!(c.status == Status::Warning && c.fix.as_deref().is_some_and(|f| f.contains("exports = { root = \"/var/lib/pullgate\" }")), "{c:?}");
        pl.root = Some("/elsewhere".into());
        let c = check_image_fs(&daemon(vec![pl.clone()]), &cfg, p, root).unwrap();
        assert!(c.status == Status::Warning && c.message.contains("/elsewhere"), "{c:?}");
        pl.root = Some("/var/lib/pullgate".into());
        assert_eq!(check_image_fs(&daemon(vec![pl.clone()]), &cfg, p, root).map(|c| c.status), Some(Status::Ok));
        // containerd 1.6 reads no exported root.
        let old = Daemon { version: "1.6.20".into(), ..daemon(vec![pl.clone()]) };
        assert!(check_image_fs(&old, &cfg, p, root).is_some_and(|c| c.status == Status::Warning && c.fix.is_some_and(|f| f.contains("1.7"))));
        // Nothing to say when CRI does not use pullgate.
        let unset = ContainerdConfig::parse("version = 2\n").unwrap();
        assert!(check_image_fs(&daemon(vec![pl]), &unset, p, root).is_none());
    }

    #[test]
    fn cri_and_transfer() {
        let p = Path::new("/c");
        let unset = ContainerdConfig::parse("version = 2\n").unwrap();
        let cri = daemon(vec![plugin("io.containerd.grpc.v1", "cri", None), plugin("io.containerd.transfer.v1", "local", None)]);
        assert_eq!(check_cri(Some(&cri), &unset, p).status, Status::Problem);
        assert_eq!(check_cri(Some(&daemon(vec![])), &unset, p).status, Status::Warning, "CRI not loaded");
        let failed = daemon(vec![plugin("io.containerd.grpc.v1", "cri", Some("no snapshotter overlayfs"))]);
        let c = check_cri(Some(&failed), &unset, p);
        assert!(c.status == Status::Problem && c.message.contains("did not load: no snapshotter overlayfs"), "{c:?}");
        let set = ContainerdConfig::parse(V2).unwrap();
        assert_eq!(check_cri(Some(&failed), &set, p).status, Status::Problem);
        assert_eq!(check_cri(Some(&cri), &set, p).status, Status::Ok);
        assert_eq!(statuses(&check_transfer(Some(&cri), &unset, p, "linux/amd64")), vec![Status::Problem]);
        assert_eq!(statuses(&check_transfer(Some(&daemon(vec![])), &unset, p, "linux/amd64")), vec![Status::Ok], "1.6: no transfer service");
        let other = ContainerdConfig::parse(
            "version = 2\n[[plugins.\"io.containerd.transfer.v1.local\".unpack_config]]\nplatform = \"linux/amd64\"\nsnapshotter = \"overlayfs\"\n",
        )
        .unwrap();
        assert_eq!(statuses(&check_transfer(Some(&cri), &other, p, "linux/amd64")), vec![Status::Problem]);
        let c = ContainerdConfig::parse(V2).unwrap();
        assert_eq!(statuses(&check_transfer(Some(&cri), &c, p, "linux/arm64")), vec![Status::Warning]);
    }

    #[test]
    fn namespaces_and_shareable() {
        let labels = |kv: &[(&str, &str)]| kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mut d = daemon(vec![]);
        assert_eq!(statuses(&check_namespaces(&d, false, "pullgate-public")), vec![Status::Ok]);
        d.namespaces = vec![
            ("a".into(), labels(&[(DEFAULT_SNAPSHOTTER_LABEL, "pullgate")])),
            ("b".into(), labels(&[])),
            ("k8s.io".into(), labels(&[])),
            ("s".into(), labels(&[(DEFAULT_SNAPSHOTTER_LABEL, "pullgate"), (SHAREABLE_LABEL, "true")])),
            ("pullgate-public".into(), labels(&[(SHAREABLE_LABEL, "true")])),
        ];
        let c = check_namespaces(&d, true, "pullgate-public");
        assert_eq!(statuses(&c), vec![Status::Ok, Status::Warning, Status::Warning, Status::Ok]);
        assert!(c[0].message.ends_with("a, s"));
        assert!(c[1].message.contains(": b (") && !c[1].message.contains("k8s.io") && !c[1].message.contains("pullgate-public"));
        assert!(c[2].name == "shareable" && c[2].message.contains("namespace s"));
        assert!(c[3].name == "shareable" && c[3].message.contains("pullgate's public namespace") && !c[3].message.contains("not labelled"));
        // Its label removed: still pullgate's, and doctor says the next pull puts it back.
        d.namespaces[4].1.clear();
        let c = check_namespaces(&d, true, "pullgate-public");
        assert!(c[3].name == "shareable" && c[3].status == Status::Ok && c[3].message.contains("not labelled shareable now"), "{:?}", c[3]);
        d.namespaces[4].1 = labels(&[(SHAREABLE_LABEL, "true")]);
        // Without a public namespace configured, the same namespace is any shareable one.
        let c = check_namespaces(&d, true, "");
        assert_eq!(statuses(&c).last(), Some(&Status::Warning));
    }

    #[test]
    fn permissions() {
        use std::os::unix::fs::PermissionsExt;
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("root");
        std::fs::create_dir(&root).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).unwrap();
        for f in ["identity.key", "metadata.redb"] {
            std::fs::write(root.join(f), b"x").unwrap();
            std::fs::set_permissions(root.join(f), std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let mut cfg = Config::default();
        cfg.daemon.root = root.clone();
        cfg.daemon.snapshotter_socket = d.path().join("s.sock");
        cfg.daemon.api_socket = d.path().join("a.sock");
        assert_eq!(statuses(&check_permissions(&cfg)), vec![Status::Ok]);
        std::fs::set_permissions(root.join("identity.key"), std::fs::Permissions::from_mode(0o644)).unwrap();
        let c = check_permissions(&cfg);
        assert!(c.len() == 1 && c[0].status == Status::Problem && c[0].message.contains("identity.key is 0644"), "{c:?}");
        std::fs::remove_file(root.join("metadata.redb")).unwrap();
        let c = check_permissions(&cfg);
        assert!(c.len() == 2 && c[1].status == Status::Warning && c[1].message.contains("metadata.redb does not exist"), "{c:?}");
    }

    #[test]
    fn rendering() {
        let c = vec![ok("cri", "fine"), problem("bypass", "overlayfs is loaded", "disable it")];
        let t = render_text(&c);
        assert!(t.contains("ok       cri     fine\n") && t.contains("problem  bypass  overlayfs is loaded; fix: disable it\n"), "{t}");
        assert!(t.contains("1 ok, 0 warning(s), 1 problem(s)"));
        let j = render_json(&c);
        assert_eq!(j["checks"][1]["status"], "problem");
        assert_eq!(j["checks"][0]["fix"], serde_json::Value::Null);
        assert_eq!(j["problems"], 1);
        assert_eq!(exit_code(&c), EXIT_PROBLEM);
        assert_eq!(exit_code(&c[..1]), 0);
    }
}
