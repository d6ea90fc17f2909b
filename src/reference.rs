//! reference: image references (`host[:port]/path[:tag][@sha256:hex]`) and digests, strictly
//! validated. Unlike docker, no default registry is assumed: the registry host is what the
//! gate's origins are made of, so it must be explicit. Also the allowlist patterns of KEP-2535.
use std::fmt;

/// The `sha256:<hex>` digest of `b`.
pub fn sha256_digest(b: &[u8]) -> String {
    format!("sha256:{}", hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b)))
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid image reference {input:?}: {reason}")]
pub struct ReferenceError {
    pub input: String,
    pub reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// `host[:port]`
    pub host: String,
    /// repository path, e.g. `private/app`
    pub repo: String,
    pub tag: Option<String>,
    pub digest: Option<String>,
}

// The grammar's four parts are checked by hand, each a few lines that follow the regular
// expression in its comment (a test holds them to it): a CLI command parses one reference and
// exits, and compiling the expressions and building their automata was a sixth of its own time.

/// `^sha256:[a-f0-9]{64}$`: whether `s` is a sha256 digest in canonical form.
pub fn is_digest(s: &str) -> bool {
    s.strip_prefix("sha256:").is_some_and(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'a'..=b'f' | b'0'..=b'9')))
}

/// `[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?`: one label of a host name.
fn is_host_label(l: &str) -> bool {
    let b = l.as_bytes();
    !b.is_empty() && b[0].is_ascii_alphanumeric() && b[b.len() - 1].is_ascii_alphanumeric() && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
}

/// `^LABEL(?:\.LABEL)*(?::[0-9]{1,5})?$`: a registry host with an optional port.
fn is_host(s: &str) -> bool {
    let name = match s.rsplit_once(':') {
        Some((name, port)) if (1..=5).contains(&port.len()) && port.bytes().all(|b| b.is_ascii_digit()) => name,
        Some(_) => return false,
        None => s,
    };
    name.split('.').all(is_host_label)
}

/// `^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$`: one component of a repository path.
fn is_path_component(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let b = s.as_bytes();
    if b.is_empty() || !alnum(b[0] as char) || !alnum(b[b.len() - 1] as char) {
        return false;
    }
    // Every run of separators between two alphanumeric runs: ".", "_", "__" or dashes only.
    s.split(alnum).all(|sep| sep.is_empty() || matches!(sep, "." | "_" | "__") || sep.bytes().all(|c| c == b'-'))
}

/// `^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`: a tag.
fn is_tag(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=128).contains(&b.len())
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

/// What an error message quotes of an input: all of it when short, else its first 64
/// characters and its length, so that a hostile input cannot make a huge message.
pub fn excerpt(input: &str) -> String {
    const SHOWN: usize = 64;
    if input.chars().count() <= SHOWN {
        return input.to_string();
    }
    format!("{}… ({} bytes)", input.chars().take(SHOWN).collect::<String>(), input.len())
}

impl Reference {
    pub fn parse(input: &str) -> Result<Reference, ReferenceError> {
        let bad = |reason| Err(ReferenceError { input: excerpt(input), reason });
        if input.is_empty() || input.len() > 512 {
            return bad("must be 1 to 512 characters");
        }
        if input.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return bad("contains whitespace or control characters");
        }
        let (rest, digest) = match input.split_once('@') {
            Some((r, d)) => {
                if !is_digest(d) {
                    return bad("digest must be sha256: followed by 64 lowercase hex digits");
                }
                (r, Some(d.to_string()))
            }
            None => (input, None),
        };
        let Some((host, path)) = rest.split_once('/') else {
            return bad("must name a registry host, e.g. registry.example.com:5000/repo:tag");
        };
        if !(host.contains('.') || host.contains(':') || host == "localhost") || !is_host(host) {
            return bad("must start with a registry host (a name with a dot or a port, or localhost)");
        }
        if let Some((_, port)) = host.rsplit_once(':') {
            if port.parse::<u16>().map_or(true, |p| p == 0) {
                return bad("port must be 1-65535");
            }
        }
        let (repo, tag) = match path.rsplit_once(':') {
            Some((r, t)) if !t.contains('/') => {
                if !is_tag(t) {
                    return bad("tag must match [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}");
                }
                (r, Some(t.to_string()))
            }
            _ => (path, None),
        };
        if repo.is_empty() || repo.len() > 255 || !repo.split('/').all(is_path_component) {
            return bad("repository path must be lowercase components [a-z0-9] separated by / . _ -");
        }
        Ok(Reference { host: host.to_string(), repo: repo.to_string(), tag, digest })
    }

    /// The origin: registry host plus repository.
    pub fn origin(&self) -> String {
        format!("{}/{}", self.host, self.repo)
    }

    /// What to ask the registry for: the digest if given, else the tag (default `latest`).
    pub fn object(&self) -> &str {
        self.digest.as_deref().or(self.tag.as_deref()).unwrap_or("latest")
    }

    /// The name containerd's image record gets (the reference as given, `latest` filled in).
    pub fn image_name(&self) -> String {
        match (&self.tag, &self.digest) {
            (None, None) => format!("{}:latest", self.origin()),
            _ => self.to_string(),
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.origin())?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

/// One KEP-2535 allowlist entry: an exact repository (`host/path`) or a prefix ending `/*`.
/// Tags and digests are not allowed. Origins name the endpoint that answered, so an entry
/// matches https origins; `http://host:port/...` matches a plain-http registry's origins; a
/// `?ns=REGISTRY` suffix, a proxy's origins for that registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowPattern {
    prefix: String,
    wildcard: bool,
    /// `?ns=REGISTRY` (encoded) for a proxy's origins, else empty.
    query: String,
}

/// `?ns=REGISTRY`, encoded as Go's url.Values encodes it: what containerd (and pullgate) add to
/// requests to a server that is a proxy for `registry`, and what ends such a server's origins.
pub fn ns_query(registry: &str) -> String {
    format!("?ns={}", url::form_urlencoded::byte_serialize(registry.as_bytes()).collect::<String>())
}

/// Whether `s` names a registry host as a reference's first component does.
fn is_registry_host(s: &str) -> bool {
    is_host(s) && (s.contains('.') || s.contains(':') || s == "localhost")
}

impl AllowPattern {
    pub fn parse(s: &str) -> Result<AllowPattern, ReferenceError> {
        let bad = |reason| Err(ReferenceError { input: s.to_string(), reason });
        // `...?ns=REGISTRY`: origins at a proxy answering for REGISTRY (only those; a pattern
        // without it matches no proxy's origin).
        if let Some((body, registry)) = s.split_once("?ns=") {
            if !is_registry_host(registry) {
                return bad("?ns= must name a registry host");
            }
            let p = Self::parse(body)?;
            return Ok(AllowPattern { query: ns_query(registry), ..p });
        }
        if s.contains('?') {
            return bad("allowlist entries may carry no query but ?ns=REGISTRY");
        }
        if let Some(rest) = s.strip_prefix("http://") {
            let p = Self::parse(rest)?;
            return Ok(AllowPattern { prefix: format!("http://{}", p.prefix), ..p });
        }
        let (body, wildcard) = match s.strip_suffix("/*") {
            Some(b) => (b, true),
            None => (s, false),
        };
        if body.contains('*') {
            return bad("allowlist entries may only end in /*");
        }
        if body.contains('@') {
            return bad("allowlist entries may not carry a digest");
        }
        // A bare host with a wildcard (`registry.example.com/*`) is allowed.
        if wildcard && !body.contains('/') {
            if is_registry_host(body) {
                return Ok(AllowPattern { prefix: body.to_string(), wildcard, query: String::new() });
            }
            return bad("allowlist entry must start with a registry host");
        }
        match Reference::parse(body) {
            Ok(r) if r.tag.is_none() && r.digest.is_none() => Ok(AllowPattern { prefix: r.origin(), wildcard, query: String::new() }),
            Ok(_) => bad("allowlist entries may not carry a tag"),
            Err(e) => Err(ReferenceError { input: s.to_string(), reason: e.reason }),
        }
    }

    /// Whether an origin (`host/repo`, `proxy/repo?ns=REGISTRY`) is allowed: its query must be
    /// the pattern's (a proxy answers each registry with its own content).
    pub fn matches(&self, origin: &str) -> bool {
        let (origin, query) = origin.split_at(origin.find('?').unwrap_or(origin.len()));
        if query != self.query {
            return false;
        }
        if self.wildcard {
            origin.strip_prefix(&self.prefix).is_some_and(|rest| rest.starts_with('/'))
        } else {
            origin == self.prefix
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hand-written checks accept exactly what the grammar's regular expressions accept:
    /// every string of up to 4 characters over an alphabet of the grammar's classes and
    /// neighbours, plus longer edge cases.
    #[test]
    fn checks_match_the_grammar() {
        let re = |p: &str| regex::Regex::new(p).unwrap();
        let host = re(r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?))*(?::[0-9]{1,5})?$");
        let path = re(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$");
        let tag = re(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$");
        let digest = re(r"^sha256:[a-f0-9]{64}$");
        let alphabet = ['a', 'Z', '0', '.', '_', '-', ':', '/', 'é', ' '];
        let mut words = vec![String::new()];
        let mut frontier = vec![String::new()];
        for _ in 0..4 {
            frontier = frontier.iter().flat_map(|w| alphabet.iter().map(move |c| format!("{w}{c}"))).collect();
            words.extend(frontier.iter().cloned());
        }
        let hex = "ab12".repeat(16);
        words.extend([
            "a:12345".into(), "a:123456".into(), "a.b.c:1".into(), "a-.b".into(), "a--b.c-d".into(), "a___b".into(), "a__b".into(), "a---b".into(),
            "_".repeat(128), "_".repeat(129), format!("a{}", "-".repeat(127)), format!("sha256:{hex}"), format!("sha256:{}", hex.to_uppercase()),
            format!("sha256:{hex}0"), format!("sha256:{}", &hex[1..]), format!("sha512:{hex}"), format!("sha256:{hex}\n"),
        ]);
        for w in &words {
            assert_eq!(is_host(w), host.is_match(w), "host {w:?}");
            assert_eq!(is_path_component(w), path.is_match(w), "path component {w:?}");
            assert_eq!(is_tag(w), tag.is_match(w), "tag {w:?}");
            assert_eq!(is_digest(w), digest.is_match(w), "digest {w:?}");
        }
    }

    #[test]
    fn parses_references() {
        let r = Reference::parse("127.0.0.1:5000/private/app:v1").unwrap();
        assert_eq!((r.host.as_str(), r.repo.as_str(), r.tag.as_deref()), ("127.0.0.1:5000", "private/app", Some("v1")));
        assert_eq!(r.origin(), "127.0.0.1:5000/private/app");
        let d = format!("sha256:{}", "a".repeat(64));
        let r = Reference::parse(&format!("reg.example.com/a/b@{d}")).unwrap();
        assert_eq!(r.object(), d);
        let r = Reference::parse("localhost/x").unwrap();
        assert_eq!(r.image_name(), "localhost/x:latest");
        assert_eq!(r.to_string(), "localhost/x");
    }

    #[test]
    fn rejects_malformed_references() {
        for bad in [
            "", "alpine", "library/alpine:3", "reg.io/UPPER", "reg.io/a:b:c", "reg.io/a@sha256:short", "reg.io//a",
            "reg.io/a b", "reg.io/a\n", "reg.io:0/a", "reg.io:99999/a", "reg.io/../etc", "-reg.io/a", "reg.io/a:-bad",
            "reg.io/a@md5:abc",
        ] {
            assert!(Reference::parse(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn allowlist_rules() {
        let exact = AllowPattern::parse("reg.io/team/app").unwrap();
        assert!(exact.matches("reg.io/team/app"));
        assert!(!exact.matches("reg.io/team/app2"));
        assert!(!exact.matches("reg.io/team/app/sub"));
        let pre = AllowPattern::parse("reg.io/team/*").unwrap();
        assert!(pre.matches("reg.io/team/app"));
        assert!(pre.matches("reg.io/team/a/b"));
        assert!(!pre.matches("reg.io/team"));
        assert!(!pre.matches("reg.io/teamx/app"));
        let host = AllowPattern::parse("reg.io:5000/*").unwrap();
        assert!(host.matches("reg.io:5000/x"));
        assert!(!host.matches("reg.io:50001/x"));
        for bad in ["reg.io/app:v1", "reg.io/a*", "reg.io/*/x", "app", "reg.io/app@sha256:".to_string().as_str(), "*", "reg.io/a?q=1", "reg.io/a?ns=", "reg.io/a?ns=x", "reg.io/a?ns=r.io?ns=s.io", "reg.io/a?ns=r.io/b"] {
            assert!(AllowPattern::parse(bad).is_err(), "{bad}");
        }
        // A proxy's origins carry the registry it answered for: a pattern without ?ns= matches
        // none of them, one with it only that registry's.
        assert!(!pre.matches("reg.io/team/app?ns=evil.example"));
        assert!(!exact.matches("reg.io/team/app?ns=reg.io"));
        let via = AllowPattern::parse("proxy.corp/library/*?ns=docker.io").unwrap();
        assert!(via.matches("proxy.corp/library/alpine?ns=docker.io"));
        assert!(!via.matches("proxy.corp/library/alpine?ns=private.corp"));
        assert!(!via.matches("proxy.corp/library/alpine"));
        let http = AllowPattern::parse("http://10.0.0.1:5000/app?ns=reg.io:5000").unwrap();
        assert!(http.matches("http://10.0.0.1:5000/app?ns=reg.io%3A5000"));
        assert!(!http.matches("http://10.0.0.1:5000/app?ns=reg.io"));
    }
}
