//! credential: registry credentials and the credential identities the ledger stores instead of
//! them. An identity is HMAC-SHA256 under a node-local key (`<root>/identity.key`, 32 random
//! bytes, created 0600 on first start) over host, user and secret; the raw secret is never
//! stored, logged, labelled or put in an error. `Secret` cannot be printed.
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::fmt;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The identity recorded for requests made without credentials.
pub const ANONYMOUS: &str = "anonymous";
const KEY_LEN: usize = 32;

/// A registry password or token. Debug prints `<redacted>`; there is no Display.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: String) -> Secret {
        Secret(s)
    }
    /// The raw secret, for the one place that sends it to the registry.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    pub user: String,
    pub secret: Secret,
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Exhaustive destructuring: a new field must be considered here before it can be printed.
        let Credential { user, secret: _ } = self;
        f.debug_struct("Credential").field("user", user).field("secret", &"<redacted>").finish()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("invalid --user: {0}")]
    Invalid(&'static str),
    #[error("identity key {path}: {reason}")]
    Key { path: String, reason: String },
}

impl Credential {
    /// Parses `USER:PASSWORD` as ctr's `--user` does.
    pub fn parse(s: &str) -> Result<Credential, CredentialError> {
        let (user, secret) = s.split_once(':').ok_or(CredentialError::Invalid("expected USER:PASSWORD"))?;
        if user.is_empty() {
            return Err(CredentialError::Invalid("empty user name"));
        }
        if user.chars().chain(secret.chars()).any(char::is_control) {
            return Err(CredentialError::Invalid("control characters are not allowed"));
        }
        Ok(Credential { user: user.to_string(), secret: Secret(secret.to_string()) })
    }
}

/// The node-local HMAC key.
pub struct IdentityKey([u8; KEY_LEN]);

impl IdentityKey {
    /// Reads the key, creating it (0600, random) if the file does not exist.
    pub fn load_or_create(path: &Path) -> Result<IdentityKey, CredentialError> {
        let err = |reason: String| CredentialError::Key { path: path.display().to_string(), reason };
        match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
            Ok(mut f) => {
                let mut k = [0u8; KEY_LEN];
                rand::Rng::fill(&mut rand::rngs::OsRng, &mut k[..]);
                f.write_all(&k).and_then(|_| f.sync_all()).map_err(|e| err(e.to_string()))?;
                return Ok(IdentityKey(k));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(err(e.to_string())),
        }
        let mut f = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
        let meta = f.metadata().map_err(|e| err(e.to_string()))?;
        if std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o077 != 0 {
            return Err(err("readable by others than root; chmod 600 it".into()));
        }
        let mut buf = Vec::new();
        f.read_to_end(&mut buf).map_err(|e| err(e.to_string()))?;
        let k: [u8; KEY_LEN] = buf.try_into().map_err(|_| err(format!("must hold exactly {KEY_LEN} bytes")))?;
        Ok(IdentityKey(k))
    }

    #[cfg(test)]
    pub fn fixed(b: u8) -> IdentityKey {
        IdentityKey([b; KEY_LEN])
    }

    /// The credential identity for `cred` at registry `host` ("anonymous" without one).
    pub fn identity(&self, host: &str, cred: Option<&Credential>) -> String {
        let Some(c) = cred else { return ANONYMOUS.to_string() };
        // Keys of any length are valid for HMAC.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0).unwrap_or_else(|_| unreachable!());
        for part in [host, &c.user, c.secret.expose()] {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part.as_bytes());
        }
        format!("hmac-sha256:{}", hex::encode(mac.finalize().into_bytes()))
    }
}

/// The short form of an identity shown in labels and messages.
pub fn short(identity: &str) -> String {
    match identity.strip_prefix("hmac-sha256:") {
        Some(h) => format!("id:{}", &h[..h.len().min(16)]),
        None => identity.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_are_keyed_and_distinct() {
        let k = IdentityKey::fixed(1);
        let a = Credential::parse("alice:pw").unwrap();
        let b = Credential::parse("alice:pw2").unwrap();
        let id = k.identity("h:5000", Some(&a));
        assert_eq!(id, k.identity("h:5000", Some(&a)));
        assert_ne!(id, k.identity("h:5000", Some(&b)));
        assert_ne!(id, k.identity("other:5000", Some(&a)));
        assert_ne!(id, IdentityKey::fixed(2).identity("h:5000", Some(&a)));
        assert_eq!(k.identity("h", None), ANONYMOUS);
        assert!(!id.contains("pw"));
        // Length-prefixed parts: moving a character between fields changes the identity.
        let c1 = Credential::parse("ab:c").unwrap();
        let c2 = Credential::parse("a:bc").unwrap();
        assert_ne!(k.identity("h", Some(&c1)), k.identity("h", Some(&c2)));
    }

    #[test]
    fn secrets_do_not_print() {
        let c = Credential::parse("alice:hunter2").unwrap();
        assert!(!format!("{c:?}").contains("hunter2"));
        assert!(matches!(Credential::parse("nopassword"), Err(CredentialError::Invalid(_))));
        assert!(matches!(Credential::parse(":pw"), Err(CredentialError::Invalid(_))));
    }

    #[test]
    fn key_file_created_private_and_reused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("identity.key");
        let k1 = IdentityKey::load_or_create(&p).unwrap();
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&p).unwrap().permissions());
        assert_eq!(mode & 0o777, 0o600);
        let k2 = IdentityKey::load_or_create(&p).unwrap();
        let c = Credential::parse("u:p").unwrap();
        assert_eq!(k1.identity("h", Some(&c)), k2.identity("h", Some(&c)));
        std::fs::write(&p, b"short").unwrap();
        assert!(IdentityKey::load_or_create(&p).is_err());
    }
}
