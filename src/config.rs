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
    /// `auto` (overlayfs when it mounts in `root`, else copy), `overlay` or `copy`.
    #[serde(default)]
    pub driver: DriverChoice,
}

fn default_root() -> PathBuf { PathBuf::from("/var/lib/pullgate") }
fn default_snapshotter_socket() -> PathBuf { PathBuf::from("/run/pullgate/snapshotter.sock") }
fn default_api_socket() -> PathBuf { PathBuf::from("/run/pullgate/api.sock") }
fn default_containerd_address() -> PathBuf { PathBuf::from("/run/containerd/containerd.sock") }
fn default_log_level() -> String { "info".to_string() }

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            root: default_root(),
            snapshotter_socket: default_snapshotter_socket(),
            api_socket: default_api_socket(),
            containerd_address: default_containerd_address(),
            log_level: default_log_level(),
            driver: DriverChoice::Auto,
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
        if d.snapshotter_socket == d.api_socket {
            return Err(ConfigError::Invalid("[daemon] snapshotter_socket and api_socket must differ".into()));
        }
        tracing_subscriber::EnvFilter::try_new(&d.log_level)
            .map_err(|e| ConfigError::Invalid(format!("[daemon] log_level {:?}: {e}", d.log_level)))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }

    #[test]
    fn rejects_bad_input() {
        assert!(matches!(Config::parse("[daemon]\nroot='rel'"), Err(ConfigError::Invalid(_))));
        assert!(matches!(Config::parse("[daemon]\nbogus=1"), Err(ConfigError::Parse { .. })));
        assert!(matches!(Config::parse("[daemon]\nsnapshotter_socket='/x'\napi_socket='/x'"), Err(ConfigError::Invalid(_))));
        assert!(matches!(Config::parse("[daemon]\nlog_level='[[['"), Err(ConfigError::Invalid(_))));
    }
}
