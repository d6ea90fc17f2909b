//! dockerconfig: registry credentials where docker and nerdctl keep them, for the CLI's `pull`
//! and `verify` when no `--user` is given: `$DOCKER_CONFIG/config.json` (default
//! `~/.docker/config.json`), looked up as docker does: `credHelpers` for the registry, else
//! `credsStore`, else `auths` (`identitytoken`, else `registrytoken`, else `auth` = base64
//! `USER:PASSWORD`, or `username` and `password`). A helper runs as docker runs it:
//! `docker-credential-<name> get`, the server on stdin, JSON `{"Username", "Secret"}` on stdout;
//! the user name `<token>` means the secret is an identity token. Secrets come back as [`Secret`]s and are never printed;
//! errors never quote the file or a helper's output.
use crate::credential::{Credential, Secret, TokenForm};
use base64::Engine;
use serde::Deserialize;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

#[derive(Debug, thiserror::Error)]
pub enum DockerConfigError {
    #[error("docker config {path}: {reason}")]
    Config { path: String, reason: String },
    #[error("credential helper docker-credential-{helper}: {reason}")]
    Helper { helper: String, reason: String },
}

#[derive(Debug, Default, Deserialize)]
struct File {
    #[serde(default)]
    auths: HashMap<String, Auth>,
    #[serde(default, rename = "credsStore")]
    creds_store: Option<String>,
    #[serde(default, rename = "credHelpers")]
    cred_helpers: HashMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
struct Auth {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    /// What `docker login` keeps for a registry whose token service hands out refresh tokens
    /// (its `auth` then holds a placeholder user name).
    #[serde(default)]
    identitytoken: Option<String>,
    #[serde(default)]
    registrytoken: Option<String>,
}

#[derive(Deserialize)]
struct HelperAnswer {
    #[serde(rename = "Username")]
    username: String,
    #[serde(rename = "Secret")]
    secret: String,
}

/// Docker Hub's names for one registry.
const DOCKER_HUB: [&str; 3] = ["docker.io", "index.docker.io", "registry-1.docker.io"];

/// The config file docker would read.
fn config_path() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("DOCKER_CONFIG").filter(|d| !d.is_empty()) {
        return Some(Path::new(&d).join("config.json"));
    }
    std::env::var_os("HOME").map(|h| Path::new(&h).join(".docker").join("config.json"))
}

/// The registry host an `auths` or `credHelpers` key names (`https://host/v1/` -> `host`).
fn key_host(key: &str) -> &str {
    let k = key.strip_prefix("https://").or_else(|| key.strip_prefix("http://")).unwrap_or(key);
    k.split('/').next().unwrap_or(k)
}

fn same_registry(key: &str, host: &str) -> bool {
    let k = key_host(key);
    k == host || (DOCKER_HUB.contains(&k) && DOCKER_HUB.contains(&host))
}

/// The credential docker would use for registry `host`, if any.
pub fn lookup(host: &str) -> Result<Option<Credential>, DockerConfigError> {
    let Some(path) = config_path() else { return Ok(None) };
    let shown = path.display().to_string();
    let bad = |reason: String| DockerConfigError::Config { path: shown.clone(), reason };
    let text = match std::fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(bad(e.to_string())),
    };
    let file = parse(&text).map_err(bad)?;
    if let Some((key, helper)) = file.cred_helpers.iter().find(|(k, _)| same_registry(k, host)) {
        return run_helper(helper, key);
    }
    let auth = file.auths.iter().find(|(k, _)| same_registry(k, host));
    if let Some(store) = &file.creds_store {
        let server = auth.map(|(k, _)| k.as_str()).unwrap_or(host);
        return run_helper(store, server);
    }
    let Some((key, a)) = auth else { return Ok(None) };
    let tokens = [(TokenForm::Identity, &a.identitytoken), (TokenForm::Registry, &a.registrytoken)];
    if let Some((form, Some(t))) = tokens.into_iter().find(|(_, t)| t.as_ref().is_some_and(|t| !t.is_empty())) {
        return Credential::token(form, t.clone()).map(Some).map_err(|e| bad(format!("the token of {key:?}: {e}")));
    }
    let (user, secret) = match (&a.auth, &a.username, &a.password) {
        (Some(b64), _, _) if !b64.is_empty() => {
            let raw = base64::engine::general_purpose::STANDARD.decode(b64.trim()).map_err(|_| bad(format!("the auth of {key:?} is not base64")))?;
            let pair = String::from_utf8(raw).map_err(|_| bad(format!("the auth of {key:?} is not USER:PASSWORD")))?;
            let (u, p) = pair.split_once(':').ok_or_else(|| bad(format!("the auth of {key:?} is not USER:PASSWORD")))?;
            (u.to_string(), p.to_string())
        }
        (_, Some(u), Some(p)) => (u.clone(), p.clone()),
        _ => return Ok(None),
    };
    credential(user, secret).map(Some).map_err(bad)
}

/// config.json's content. serde_json's messages quote a value of the wrong type (a password,
/// an `auth`): only the kind of error and its position are said.
fn parse(text: &[u8]) -> Result<File, String> {
    serde_json::from_slice(text).map_err(|e| {
        let what = match e.classify() {
            serde_json::error::Category::Data => "not docker's layout (a value of the wrong type)",
            _ => "not valid JSON",
        };
        format!("{what} at line {} column {}", e.line(), e.column())
    })
}

/// A user name and password, or (user name `<token>`, as credential helpers answer for a token
/// login) an identity token.
fn credential(user: String, secret: String) -> Result<Credential, String> {
    if user == "<token>" {
        return Credential::token(TokenForm::Identity, secret).map_err(|e| format!("the stored identity token: {e}"));
    }
    if user.is_empty() || user.chars().chain(secret.chars()).any(char::is_control) {
        return Err("the stored credential is not a user name and password".into());
    }
    Ok(Credential::Password { user, secret: Secret::new(secret) })
}

/// Asks `docker-credential-<name> get` for `server`'s credential.
fn run_helper(name: &str, server: &str) -> Result<Option<Credential>, DockerConfigError> {
    let err = |reason: String| DockerConfigError::Helper { helper: crate::reference::excerpt(name), reason };
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)) {
        return Err(err("not a helper name".into()));
    }
    let mut child = Command::new(format!("docker-credential-{name}"))
        .arg("get")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| err(format!("cannot run it: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(server.as_bytes()).map_err(|e| err(format!("cannot write to it: {e}")))?;
    }
    let out = child.wait_with_output().map_err(|e| err(format!("it failed: {e}")))?;
    if !out.status.success() {
        // docker's helpers answer "credentials not found in native keychain" on stdout.
        if String::from_utf8_lossy(&out.stdout).contains("credentials not found") {
            return Ok(None);
        }
        return Err(err(format!("it exited with {}", out.status)));
    }
    let a: HelperAnswer = serde_json::from_slice(&out.stdout).map_err(|_| err("its answer is not the JSON docker expects".into()))?;
    credential(a.username, a.secret).map(Some).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_registries_as_docker_does() {
        assert!(same_registry("https://index.docker.io/v1/", "docker.io"));
        assert!(same_registry("127.0.0.1:5000", "127.0.0.1:5000"));
        assert!(same_registry("http://127.0.0.1:5000/", "127.0.0.1:5000"));
        assert!(!same_registry("127.0.0.1:5001", "127.0.0.1:5000"));
        assert!(!same_registry("evil.io/127.0.0.1:5000", "127.0.0.1:5000"));
    }

    #[test]
    fn stored_credentials_are_checked() {
        assert!(credential("alice".into(), "pw".into()).is_ok());
        assert_eq!(credential("<token>".into(), "Secret-2".into()), Ok(Credential::token(TokenForm::Identity, "Secret-2".into()).unwrap()));
        for (u, p) in [("", "Secret-1"), ("<token>", "Secret 2"), ("a\nb", "Secret-3")] {
            let e = credential(u.into(), p.into()).unwrap_err();
            assert!(!e.contains(p), "{e}");
        }
        assert!(credential("<token>".into(), String::new()).is_err());
        assert!(run_helper("../../bin/sh", "x").is_err());
    }

    #[test]
    fn a_malformed_file_is_not_quoted() {
        for text in [
            r#"{"auths":{"r.io":"YWxpY2U6U2VjcmV0LTQ="}}"#,
            r#"{"auths":{"r.io":{"username":"alice","password":918273645}}}"#,
            r#"{"auths":{"r.io":{"auth":"YWxpY2U6U2VjcmV0LTQ=""#,
        ] {
            let e = parse(text.as_bytes()).err().unwrap_or_default();
            assert!(e.contains("line 1 column"), "{e}");
            assert!(!e.contains("YWxpY2U6U2VjcmV0LTQ") && !e.contains("918273645"), "{e}");
        }
    }
}
