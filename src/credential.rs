//! credential: registry credentials and the credential identities the ledger stores instead of
//! them. An identity is HMAC-SHA256 under a node-local key (`<root>/identity.key`, 32 random
//! bytes, created 0600 on first start) over host, user and secret, or over the form and the
//! token for identity and registry tokens; the raw secret is never
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

/// A registry credential, in each form registries and Kubernetes hand over.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    /// A user name and password (docker's `auth`, `--user`, a pull secret's username/password):
    /// Basic, or the token service's OAuth2 password grant.
    Password { user: String, secret: Secret },
    /// An identity token (docker config.json `identitytoken`, a credential helper's user
    /// `<token>`, CRI `identity_token`): the OAuth2 refresh token of the registry's token
    /// service, exchanged with the refresh-token grant.
    IdentityToken(Secret),
    /// A registry token (CRI `registry_token`, config.json `registrytoken`): a bearer token
    /// sent to the registry as it is.
    RegistryToken(Secret),
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Exhaustive matching: a new form must be considered here before it can be printed.
        match self {
            Credential::Password { user, secret: _ } => f.debug_struct("Password").field("user", &shown_user(user)).field("secret", &"<redacted>").finish(),
            Credential::IdentityToken(_) => f.write_str("IdentityToken(<redacted>)"),
            Credential::RegistryToken(_) => f.write_str("RegistryToken(<redacted>)"),
        }
    }
}

impl Credential {
    /// The credential as messages name it, never quoting a secret: `the credentials of user
    /// "alice"`, `the identity token`, `the registry token`.
    pub fn describe(&self) -> String {
        match self {
            Credential::Password { user, .. } => format!("the credentials of user {:?}", shown_user(user)),
            Credential::IdentityToken(_) => "the identity token".into(),
            Credential::RegistryToken(_) => "the registry token".into(),
        }
    }

    /// The secret the registry or its token service is shown.
    pub fn secret(&self) -> &Secret {
        match self {
            Credential::Password { secret, .. } | Credential::IdentityToken(secret) | Credential::RegistryToken(secret) => secret,
        }
    }

    /// A token of `form` (an identity or registry token), checked as docker and CRI carry one:
    /// not empty, no whitespace or control characters (it goes into a form field or a header).
    pub fn token(form: TokenForm, token: String) -> Result<Credential, CredentialError> {
        if token.is_empty() {
            return Err(CredentialError::InvalidToken("it is empty"));
        }
        if token.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(CredentialError::InvalidToken("it holds whitespace or control characters"));
        }
        Ok(match form {
            TokenForm::Identity => Credential::IdentityToken(Secret(token)),
            TokenForm::Registry => Credential::RegistryToken(Secret(token)),
        })
    }
}

/// The two token forms of a credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenForm {
    Identity,
    Registry,
}

#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("invalid --user: {0}")]
    Invalid(&'static str),
    #[error("invalid token: {0}")]
    InvalidToken(&'static str),
    #[error("identity key {path}: {reason}")]
    Key { path: String, reason: String },
}

impl Credential {
    /// Parses `USER:PASSWORD` as ctr's `--user` does (at the first colon).
    pub fn parse(s: &str) -> Result<Credential, CredentialError> {
        let (user, secret) = s.split_once(':').ok_or(CredentialError::Invalid("expected USER:PASSWORD"))?;
        Credential::password(user, secret)
    }

    /// A user name and password given apart (a pull secret's `username` and `password`, as
    /// kubelet sends them): taken as they are, a colon in the user name included, as containerd
    /// takes them; never joined and split again.
    pub fn password(user: &str, secret: &str) -> Result<Credential, CredentialError> {
        if user.is_empty() {
            return Err(CredentialError::Invalid("empty user name"));
        }
        if user.chars().chain(secret.chars()).any(char::is_control) {
            return Err(CredentialError::Invalid("control characters are not allowed"));
        }
        Ok(Credential::Password { user: user.to_string(), secret: Secret(secret.to_string()) })
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

    /// The credential identity for `cred` at registry `host` ("anonymous" without one): the
    /// HMAC of length-prefixed parts, `[host, user, password]` for a password (as identities
    /// were before tokens, so recorded grants keep their identity) and `[form tag, host, token]`
    /// for a token. Length prefixes make the encoding uniquely decodable, so three parts never
    /// equal four: no token collides with a password, and the two token forms differ by tag.
    pub fn identity(&self, host: &str, cred: Option<&Credential>) -> String {
        let Some(c) = cred else { return ANONYMOUS.to_string() };
        let parts: Vec<&str> = match c {
            Credential::Password { user, secret } => vec![host, user, secret.expose()],
            Credential::IdentityToken(t) => vec!["pullgate.identity-token", host, t.expose(), ""],
            Credential::RegistryToken(t) => vec!["pullgate.registry-token", host, t.expose(), ""],
        };
        // Keys of any length are valid for HMAC.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0).unwrap_or_else(|_| unreachable!());
        for part in parts {
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

/// A user name as messages and logs show it: up to its first colon. A pull secret written as
/// `"username": "alice:PASSWORD"` (the password misplaced) would otherwise show the password.
fn shown_user(user: &str) -> String {
    match user.split_once(':') {
        Some((name, _)) => format!("{name}:..."),
        None => user.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_name_is_shown_up_to_its_first_colon() {
        let c = Credential::Password { user: "alice:Secret-Pw-1".into(), secret: Secret(String::new()) };
        assert_eq!(c.describe(), "the credentials of user \"alice:...\"");
        assert!(!format!("{c:?}").contains("Secret-Pw-1"));
        assert_eq!(Credential::parse("alice:pw").unwrap().describe(), "the credentials of user \"alice\"");
    }

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
    fn token_identities_are_domain_separated() {
        let k = IdentityKey::fixed(1);
        let it = |t: &str| Credential::token(TokenForm::Identity, t.into()).unwrap();
        let rt = |t: &str| Credential::token(TokenForm::Registry, t.into()).unwrap();
        // The same token held by two tenants is one identity; another token is another.
        assert_eq!(k.identity("h", Some(&it("tok-1"))), k.identity("h", Some(&it("tok-1"))));
        assert_ne!(k.identity("h", Some(&it("tok-1"))), k.identity("h", Some(&it("tok-2"))));
        assert_ne!(k.identity("h", Some(&it("tok-1"))), k.identity("h2", Some(&it("tok-1"))));
        // The same string as an identity token, a registry token, or a password never collides.
        assert_ne!(k.identity("h", Some(&it("tok-1"))), k.identity("h", Some(&rt("tok-1"))));
        let tag = "pullgate.identity-token";
        // (`<token>` is the user name credential helpers give identity tokens under.)
        for pw in [Credential::parse(&format!("{tag}:tok-1")).unwrap(), Credential::parse("h:tok-1").unwrap(), Credential::parse("<token>:tok-1").unwrap()] {
            assert_ne!(k.identity("h", Some(&it("tok-1"))), k.identity(tag, Some(&pw)));
            assert_ne!(k.identity("h", Some(&it("tok-1"))), k.identity("h", Some(&pw)));
        }
        // Password identities are what they were before tokens (grants recorded then stay).
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&[1u8; KEY_LEN]).unwrap();
        for part in ["h", "alice", "pw"] {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part.as_bytes());
        }
        let old = format!("hmac-sha256:{}", hex::encode(mac.finalize().into_bytes()));
        assert_eq!(k.identity("h", Some(&Credential::parse("alice:pw").unwrap())), old);
        for bad in ["", "a b", "a\nb"] {
            assert!(Credential::token(TokenForm::Identity, bad.into()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn secrets_do_not_print() {
        let c = Credential::parse("alice:hunter2").unwrap();
        assert!(!format!("{c:?}").contains("hunter2"));
        for t in [Credential::token(TokenForm::Identity, "Tok-hunter3".into()).unwrap(), Credential::token(TokenForm::Registry, "Tok-hunter3".into()).unwrap()] {
            assert!(!format!("{t:?}").contains("hunter3") && !t.describe().contains("hunter3"));
        }
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
