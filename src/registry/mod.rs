//! registry: a client for the distribution API, for pulls and verifications at an origin.
//! Basic auth and the token flow (401 -> `WWW-Authenticate: Bearer` -> token by OAuth2
//! password-grant POST, falling back to GET with Basic; an identity token by the OAuth2
//! refresh-token grant POST, with no fallback; a registry token sent as the bearer token as it
//! is), manifests and indexes with platform
//! selection and a size cap, blob HEAD and streamed GETs checked against their digest,
//! redirects followed by hand so credentials never go to another host. Errors keep apart what
//! the gate must tell apart: bad credential, no access, not found, unavailable, digest mismatch.
pub mod auth;
pub mod hosts;

use crate::credential::Credential;
use crate::reference::Reference;
use auth::{choose_challenge, Challenge, Scheme};
use base64::Engine;
use futures_util::StreamExt;
use reqwest::{header, Method, StatusCode};
use sha2::{Digest as _, Sha256};
use std::path::Path;
use std::time::Duration;

/// Largest manifest or index accepted (containerd's limit is 4 MiB too).
pub const MAX_MANIFEST: usize = 4 << 20;
/// Largest token response accepted.
const MAX_TOKEN_RESPONSE: usize = 1 << 20;
const MAX_REDIRECTS: usize = 5;
/// Slowest blob download accepted (bytes per second) once the base deadline has passed, so a
/// registry that trickles bytes cannot hold a pull forever.
const MIN_BLOB_RATE: u64 = 256 * 1024;

pub const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, \
application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.docker.distribution.manifest.v2+json";

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// `credential` is [`Credential::describe`]: never the secret.
    #[error("registry {host} rejected {credential}")]
    BadCredential { host: String, credential: String },
    /// The token service refused an identity token (OAuth2 `invalid_grant` and the like);
    /// `reason` names the cause as far as the token service told it.
    #[error("the token service of registry {host} refused the identity token: {reason}")]
    TokenRefused { host: String, reason: String },
    /// The credential's form cannot be used with this registry (no refresh-token grant at its
    /// token service, a token where only Basic authentication is offered).
    #[error("registry {host} cannot use {credential}: {reason}")]
    UnusableCredential { host: String, credential: String, reason: String },
    #[error("registry {host} requires credentials for {repo} (none given)")]
    AuthRequired { host: String, repo: String },
    #[error("the credentials give no access to {host}/{repo}")]
    NoAccess { host: String, repo: String },
    #[error("{what} not found at {host}/{repo}")]
    NotFound { host: String, repo: String, what: String },
    #[error("registry {host} unavailable: {reason}")]
    Unavailable { host: String, reason: String },
    #[error("digest mismatch for {what}: expected {expected}, got {actual}")]
    DigestMismatch { what: String, expected: String, actual: String },
    #[error("registry {host} sent an invalid response: {reason}")]
    Protocol { host: String, reason: String },
    #[error("registry configuration: {0}")]
    Config(String),
}

type Result<T> = std::result::Result<T, RegistryError>;

impl RegistryError {
    /// The result class of a pull or verify that failed so (a metrics label).
    pub fn outcome(&self) -> &'static str {
        match self {
            RegistryError::BadCredential { .. } | RegistryError::AuthRequired { .. } | RegistryError::TokenRefused { .. } => "unauthenticated",
            RegistryError::NoAccess { .. } => "denied",
            RegistryError::NotFound { .. } => "not_found",
            RegistryError::Unavailable { .. } => "unavailable",
            _ => "error",
        }
    }
}

/// Bytes fetched by digest: a manifest or index.
#[derive(Debug, Clone)]
pub struct Fetched {
    pub digest: String,
    pub media_type: String,
    pub bytes: Vec<u8>,
}

/// What a reference resolved to at the registry.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The index the tag pointed at, if any.
    pub index: Option<Fetched>,
    /// The platform's image manifest.
    pub manifest: Fetched,
    pub parsed: oci_spec::image::ImageManifest,
}

/// How origins name an endpoint base URL (`https://host[:port]` or `http://host:port`):
/// `host[:port]` for https, `http://host:port` for plain http.
pub fn endpoint_name(base: &str) -> &str {
    match base.strip_prefix("https://") {
        // Docker Hub's API host is named as the registry it serves (containerd's resolver
        // counts the two as one host), so that origins, allowlist entries and messages say
        // docker.io.
        Some(hosts::DOCKER_HUB_API) => hosts::DOCKER_HUB,
        Some(name) => name,
        None => base,
    }
}

/// `?ns=REGISTRY` for an endpoint that is a proxy ([`hosts::Endpoint::ns`]), encoded as Go's
/// url.Values encodes it (as containerd sends it); empty otherwise.
fn ns_query(ep: &hosts::Endpoint) -> String {
    ep.ns.as_deref().map(crate::reference::ns_query).unwrap_or_default()
}

/// How origins name an endpoint: [`endpoint_name`] of its base, then `?ns=REGISTRY` when it is
/// a proxy answering for that registry (a proxy serves each registry its own content, so each
/// is an endpoint of its own).
pub fn endpoint_of(ep: &hosts::Endpoint) -> String {
    format!("{}{}", endpoint_name(&ep.base), ns_query(ep))
}

/// The origin of repository `repo` at endpoint `ep`: `registry.example/team/app`,
/// `http://127.0.0.1:5000/team/app`, `proxy.corp/team/app?ns=registry.example`.
pub fn origin_at(ep: &hosts::Endpoint, repo: &str) -> String {
    format!("{}/{repo}{}", endpoint_name(&ep.base), ns_query(ep))
}

/// A registry name as the URL parser reads it (lower case, `127.1` as `127.0.0.1`, a port
/// written `0443` as 443), with no port for 443 or 80, and Docker Hub's three names as one: the
/// registry a name stands for, as far as names tell (a DNS alias is another name).
fn canonical_registry(h: &str) -> String {
    let host = match url::Url::parse(&format!("https://{h}")) {
        Ok(u) => match (u.host_str(), u.port()) {
            (Some(name), None | Some(80) | Some(443)) => name.to_string(),
            (Some(name), Some(p)) => format!("{name}:{p}"),
            (None, _) => h.to_ascii_lowercase(),
        },
        Err(_) => h.to_ascii_lowercase(),
    };
    match host.as_str() {
        hosts::DOCKER_HUB_API | "index.docker.io" => hosts::DOCKER_HUB.to_string(),
        _ => host,
    }
}

/// Whether `origin` (made by [`origin_at`]) is repository `repo` of registry `host` under any
/// spelling: the same repository, and the registry the origin stood for (a proxy's `?ns=`, else
/// its endpoint) the same as `host` by [`canonical_registry`]. For revoking by reference: a grant
/// recorded under another spelling of the registry (`REG.example`, `reg.example:443`, a
/// hosts.toml server naming it so) or through a proxy answering for it is revoked too.
pub fn origin_is_of(origin: &str, host: &str, repo: &str) -> bool {
    let o = OriginParts::of(origin);
    let ns = url::form_urlencoded::parse(o.query.trim_start_matches('?').as_bytes()).find(|(k, _)| k == "ns").map(|(_, v)| v.into_owned());
    o.repo == Some(repo) && canonical_registry(ns.as_deref().unwrap_or(o.host)) == canonical_registry(host)
}

/// An origin made by [`origin_at`], taken apart: `origin` is `{scheme}{host}/{repo}{query}`.
struct OriginParts<'a> {
    /// `http://`, or empty for https.
    scheme: &'a str,
    /// The endpoint's `host[:port]` (for https, as [`endpoint_name`] names it).
    host: &'a str,
    /// None when the origin has no `/`.
    repo: Option<&'a str>,
    /// `?ns=REGISTRY` at a proxy, else empty (a repository holds no `?`).
    query: &'a str,
}

impl<'a> OriginParts<'a> {
    fn of(origin: &'a str) -> OriginParts<'a> {
        let (scheme, rest) = match origin.strip_prefix("http://") {
            Some(r) => ("http://", r),
            None => ("", origin),
        };
        let (path, query) = rest.split_at(rest.find('?').unwrap_or(rest.len()));
        let (host, repo) = match path.split_once('/') {
            Some((h, r)) => (h, Some(r)),
            None => (path, None),
        };
        OriginParts { scheme, host, repo, query }
    }
}

/// The endpoint of an origin made by [`origin_at`], as [`endpoint_of`] names it: everything
/// before the repository, and the query after it.
pub fn origin_endpoint(origin: &str) -> std::borrow::Cow<'_, str> {
    let o = OriginParts::of(origin);
    let host = &origin[..o.scheme.len() + o.host.len()];
    if o.query.is_empty() { host.into() } else { format!("{host}{}", o.query).into() }
}

pub use crate::reference::sha256_digest;

/// The HTTP client for one registry endpoint: its TLS settings, no redirects followed
/// (`Session` follows them itself), `timeout` for a connection (at most 5 s) and for the next
/// bytes of an answer (default 30 s). Clients are kept by these settings (the CA files' bytes,
/// read again at every call, not their names), so a pull or verify reuses the connections an
/// earlier one left open to the registry and its token service instead of opening new ones.
/// A connection carries nothing of a request but its bytes: each request sends its own
/// authorization, no cookies are kept, and a connection goes back to the pool only once an
/// answer was read to its end.
pub fn http_client(ep: &hosts::Endpoint, timeout: Option<Duration>) -> Result<reqwest::Client> {
    let key = ClientKey::of(ep, timeout)?;
    if let Some(c) = CLIENTS.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(c.clone());
    }
    let mut b = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(timeout.unwrap_or(Duration::from_secs(5)).min(Duration::from_secs(5)))
        .read_timeout(timeout.unwrap_or(Duration::from_secs(30)))
        .pool_idle_timeout(POOL_IDLE)
        .pool_max_idle_per_host(POOL_IDLE_PER_HOST)
        .user_agent(concat!("pullgate/", env!("CARGO_PKG_VERSION")))
        .danger_accept_invalid_certs(ep.skip_verify);
    b = with_env_proxies(b)?;
    for (pem, ca) in key.cas.iter().zip(&ep.ca) {
        let cert = reqwest::Certificate::from_pem(pem).map_err(|e| RegistryError::Config(format!("ca {}: {e}", ca.display())))?;
        b = b.add_root_certificate(cert);
    }
    if let (Some(id), Some(pair)) = (&key.client, ep.client.first()) {
        // The parser's message names what is wrong (no key, an unknown key form), never the
        // files' content.
        let id = reqwest::Identity::from_pem(&id.0).map_err(|e| RegistryError::Config(format!("{}: {}", ClientIdentity::files(pair), error_chain(&e))))?;
        b = b.identity(id);
    }
    // rustls checks the key against the certificate here.
    let client = b.build().map_err(|e| RegistryError::Config(match ep.client.first() {
        Some(pair) => format!("{}: {}", ClientIdentity::files(pair), error_chain(&e)),
        None => error_chain(&e),
    }))?;
    let mut clients = CLIENTS.lock().unwrap_or_else(|p| p.into_inner());
    if clients.len() >= MAX_CLIENTS {
        clients.clear();
    }
    clients.insert(key, client.clone());
    Ok(client)
}

/// The environment's proxies as Go's `http.ProxyFromEnvironment` (containerd's transport) reads
/// them, decided for each request's URL: `HTTP_PROXY` for http (not under CGI, where
/// `REQUEST_METHOD` is set), `HTTPS_PROXY` for https, upper case first, `NO_PROXY`'s exceptions,
/// and never for `localhost` or a loopback address (reqwest's own reading would proxy those
/// unless NO_PROXY named them). A value is never quoted: it may hold the proxy's password.
fn with_env_proxies(b: reqwest::ClientBuilder) -> Result<reqwest::ClientBuilder> {
    let var = |name: &str| std::env::var(name).or_else(|_| std::env::var(name.to_ascii_lowercase())).ok().filter(|v| !v.is_empty());
    let exceptions = var("NO_PROXY").into_iter().chain(["localhost", "127.0.0.0/8", "::1"].map(String::from)).collect::<Vec<_>>().join(",");
    let mut b = b.no_proxy();
    let cgi = std::env::var_os("REQUEST_METHOD").is_some();
    let http = var("HTTP_PROXY").filter(|_| !cgi).map(|v| ("HTTP_PROXY", reqwest::Proxy::http(v.as_str())));
    let https = var("HTTPS_PROXY").map(|v| ("HTTPS_PROXY", reqwest::Proxy::https(v.as_str())));
    for (name, proxy) in http.into_iter().chain(https) {
        let proxy = proxy.map_err(|_| RegistryError::Config(format!("{name} (or its lower-case form) is not a proxy URL")))?;
        b = b.proxy(proxy.no_proxy(reqwest::NoProxy::from_string(&exceptions)));
    }
    Ok(b)
}

/// What makes two endpoints' HTTP clients the same: every setting `http_client` takes from
/// the endpoint or the caller (a new one must be added here, or endpoints would share clients
/// built for another).
#[derive(Debug, PartialEq, Eq, Hash)]
struct ClientKey {
    skip_verify: bool,
    cas: Vec<Vec<u8>>,
    client: Option<ClientIdentity>,
    timeout: Option<Duration>,
}

impl ClientKey {
    /// The key of an endpoint's client, with its CA and client certificate files as they are now.
    fn of(ep: &hosts::Endpoint, timeout: Option<Duration>) -> Result<ClientKey> {
        let mut cas = Vec::with_capacity(ep.ca.len());
        for ca in &ep.ca {
            cas.push(hosts::read_small_file(ca, hosts::MAX_CERT_FILE).map_err(|e| RegistryError::Config(format!("ca {}: {e}", ca.display())))?);
        }
        let client = ep.client.first().map(ClientIdentity::read).transpose()?;
        Ok(ClientKey { skip_verify: ep.skip_verify, cas, client, timeout })
    }
}

/// The client certificate a registry's client presents, with its private key (PEM: the
/// certificate file, then the key file when it is another). Only the first pair of a
/// hosts.toml is presented: rustls takes one identity per client, and Go (containerd) offers
/// its first certificate too unless the server names other issuers. Its Debug never shows
/// the bytes (they hold a private key).
#[derive(PartialEq, Eq, Hash)]
struct ClientIdentity(Vec<u8>);

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientIdentity(..)")
    }
}

impl ClientIdentity {
    fn read(pair: &hosts::ClientPair) -> Result<ClientIdentity> {
        let read = |p: &std::path::Path| hosts::read_small_file(p, hosts::MAX_CERT_FILE).map_err(|e| RegistryError::Config(format!("{}: {e}", Self::files(pair))));
        let mut pem = read(&pair.cert)?;
        if let Some(key) = &pair.key {
            pem.push(b'\n');
            pem.extend(read(key)?);
        }
        Ok(ClientIdentity(pem))
    }

    /// The files of `pair`, as errors name them.
    fn files(pair: &hosts::ClientPair) -> String {
        match &pair.key {
            Some(k) => format!("client certificate {} (key {})", pair.cert.display(), k.display()),
            None => format!("client certificate {} (key in the same file)", pair.cert.display()),
        }
    }
}

static CLIENTS: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<ClientKey, reqwest::Client>>> = std::sync::LazyLock::new(Default::default);
/// Distinct TLS settings kept at once; then every client is dropped (and built again on use).
const MAX_CLIENTS: usize = 64;
/// How long an idle connection is kept, and how many per host: long enough for the pulls and
/// verifies of one burst of pod starts, short enough that a registry answering with redirects
/// through many hosts leaves few sockets open for long (each hop's connection is kept too), and
/// shorter than the idle time after which common registries and load balancers close a
/// connection (a request written into such a close fails as "unavailable").
const POOL_IDLE: Duration = Duration::from_secs(5);
const POOL_IDLE_PER_HOST: usize = 2;

/// The last challenge each registry endpoint gave for each repository (`send`), keyed by
/// origin ([`origin_at`]: scheme, endpoint, repository, and the registry a proxy answered for).
/// Only challenges a registry gave itself (never a host it redirected to) are kept; at most
/// `MAX_CHALLENGES`, then forgotten at once. An endpoint whose identity nothing checks (plain
/// http, or https without verification) is whichever process answers there at the time: its
/// challenge is kept for [`UNVERIFIED_CHALLENGE_TTL`] only, so that what answered there once
/// cannot name, long after, the realm a later verify sends its credential to.
static CHALLENGES: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<String, Remembered>>> = std::sync::LazyLock::new(Default::default);
/// A challenge, and until when it is kept (None: as long as there is room).
type Remembered = (Challenge, Option<std::time::Instant>);
const MAX_CHALLENGES: usize = 10_000;
/// As long as an idle connection is kept ([`POOL_IDLE`]): a burst of pod starts.
const UNVERIFIED_CHALLENGE_TTL: Duration = POOL_IDLE;

fn remembered_challenge(origin: &str) -> Option<Challenge> {
    let map = CHALLENGES.lock().unwrap_or_else(|p| p.into_inner());
    let (c, until) = map.get(origin)?;
    until.is_none_or(|t| std::time::Instant::now() < t).then(|| Challenge { error: None, ..c.clone() })
}

/// Remembers `ch`, given at `given`, for `origin`; `verified`: the endpoint's identity was
/// checked (https with its certificate verified). A challenge naming a token service in plain
/// http is kept for moments too, whoever gave it (that service's port may be anyone's later).
fn remember_challenge(origin: &str, ch: &Challenge, verified: bool, given: std::time::Instant) {
    let mut map = CHALLENGES.lock().unwrap_or_else(|p| p.into_inner());
    if map.len() >= MAX_CHALLENGES {
        map.clear();
    }
    let checked = verified && (ch.scheme == Scheme::Basic || ch.realm.starts_with("https://"));
    let until = (!checked).then(|| given + UNVERIFIED_CHALLENGE_TTL);
    map.insert(origin.to_string(), (ch.clone(), until));
}

fn forget_challenge(origin: &str) {
    CHALLENGES.lock().unwrap_or_else(|p| p.into_inner()).remove(origin);
}

/// One authenticated conversation with one repository of one registry. Clones share the
/// HTTP client and the authorization obtained so far (for concurrent blob downloads).
#[derive(Clone)]
pub struct Session {
    http: reqwest::Client,
    /// The same TLS trust without the operator's client certificate: for a session without
    /// credentials, the anonymous probe, and hosts other than the registry's own (redirect
    /// targets, a token service elsewhere). The certificate is the node's, not a tenant's:
    /// a registry that lets it in without asking for credentials must not make its content
    /// anyone's (as "anonymous", public) through pullgate.
    bare: reqwest::Client,
    base: String,
    host: String,
    repo: String,
    /// `?ns=REGISTRY` when the server is a mirror or proxy for the registry
    /// ([`hosts::is_proxy`]): containerd adds it to every manifest and blob request so that a
    /// proxy serving several registries answers for this one, and so must pullgate, or it would
    /// verify what the proxy serves for another.
    ns_query: String,
    /// [`endpoint_of`] and [`origin_at`] this session's endpoint and repository.
    endpoint: String,
    origin: String,
    /// The endpoint to use instead if `base` answers plain http ([`hosts::Endpoint::plain_fallback`]),
    /// and whether a refused connection falls back too; taken by the first request
    /// ([`Session::settle_scheme`]).
    plain_fallback: Option<(hosts::Endpoint, bool)>,
    cred: Option<Credential>,
    /// Authorization header value that worked last (Basic or Bearer).
    authz: Option<String>,
    /// Set once the credentials have been used for a token or Basic, so a second 401 is final.
    authenticated: bool,
    /// The endpoint's identity is checked: https with its certificate verified.
    verified: bool,
    /// The endpoint is a loopback registry's own server ([`hosts::Endpoint::loopback`]): Some,
    /// with whether CA files were given for it (for the hint of a refused certificate).
    loopback_default: Option<bool>,
    /// Deadline for a whole answer (manifests, tokens) and base deadline for a blob.
    total: Duration,
    /// Where blob downloads report their bytes (a pull shown on a terminal).
    progress: Option<std::sync::Arc<crate::progress::Progress>>,
}

#[derive(Debug, Clone, Default)]
pub struct Options<'a> {
    pub plain_http: bool,
    /// The operator's hosts directory (`[registry] hosts_dir`).
    pub hosts_dir: Option<&'a Path>,
    /// The server a request's own hosts.toml names (no TLS settings come with it).
    pub server: Option<&'a str>,
    /// Longest wait for a connection or for the next bytes of an answer (default 30 s).
    pub timeout: Option<Duration>,
    /// How the node's containerd asks an http server with TLS settings ([`hosts::Endpoint::read_as`]).
    pub http_with_tls: hosts::HttpWithTls,
}

impl Session {
    pub fn new(r: &Reference, cred: Option<Credential>, opts: &Options) -> Result<Session> {
        let mut ep = hosts::endpoint(&r.host, opts.hosts_dir, opts.plain_http, opts.server).map_err(|e| RegistryError::Config(e.to_string()))?;
        let loopback_default = ep.loopback.is_some().then_some(!ep.ca.is_empty());
        ep.read_as(opts.http_with_tls);
        let bare = http_client(&hosts::Endpoint { client: vec![], ..ep.clone() }, opts.timeout)?;
        let http = if cred.is_some() && !ep.client.is_empty() { http_client(&ep, opts.timeout)? } else { bare.clone() };
        let total = opts.timeout.map(|t| t * 2).unwrap_or(Duration::from_secs(60));
        let (ns_query, endpoint, origin) = (ns_query(&ep), endpoint_of(&ep), origin_at(&ep, &r.repo));
        let verified = ep.base.starts_with("https://") && !ep.skip_verify;
        let plain_fallback = ep.plain_fallback.clone().map(|base| (hosts::Endpoint { base, ns: ep.ns.clone(), ..Default::default() }, ep.refused_falls_back));
        Ok(Session {
            http,
            bare,
            base: ep.base,
            host: r.host.clone(),
            repo: r.repo.clone(),
            ns_query,
            endpoint,
            origin,
            plain_fallback,
            cred,
            authz: None,
            authenticated: false,
            verified,
            loopback_default,
            total,
            progress: None,
        })
    }

    /// For an http server with TLS settings (tried over https first, as containerd does): one
    /// request without credentials to `/v2/` over https; when the port answers plain http
    /// there ([`falls_back`]), the session goes to the server as written (plain http, and its
    /// origin with it);
    /// any other answer or failure keeps https (a certificate the settings do not trust fails
    /// the requests that follow, as in containerd). Decided before any credential is sent.
    async fn settle_scheme(&mut self) {
        let Some((plain, refused_too)) = self.plain_fallback.take() else { return };
        let url = format!("{}/v2/", self.base);
        match self.bare.get(&url).timeout(self.total).send().await {
            Err(e) if falls_back(&e, refused_too) => {
                tracing::debug!(server = %plain.base, error = %error_chain(&e), "https there answers plain http (or, without a port, refuses): asked as written, as containerd falls back");
                (self.base, self.endpoint, self.origin, self.verified) = (plain.base.clone(), endpoint_of(&plain), origin_at(&plain, &self.repo), false);
            }
            _ => {}
        }
    }

    /// Blob downloads from now on (and from clones made after) report to `progress`.
    pub fn report_to(&mut self, progress: Option<std::sync::Arc<crate::progress::Progress>>) {
        self.progress = progress;
    }

    /// The endpoint this session talks to, as origins name it: `host[:port]` for https (the
    /// registry's own name when no hosts.toml redirects it), `http://host:port` for plain http,
    /// so that a plain-http answer never counts as the https registry of the same name.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The origin this session's answers are recorded under: the endpoint actually contacted
    /// plus the repository (`registry.example/team/app`, `http://127.0.0.1:5000/private/app`),
    /// never the name a hosts.toml or `--plain-http` sent elsewhere.
    pub fn origin(&self) -> String {
        self.origin.clone()
    }

    fn unavailable(&self, e: impl std::fmt::Display) -> RegistryError {
        RegistryError::Unavailable { host: self.host.clone(), reason: e.to_string() }
    }
    /// A request that got no answer; an https request answered in plain http says what to do.
    fn request_failed(&self, e: &reqwest::Error) -> RegistryError {
        let own_certificate_refused = || untrusted_certificate(e) && e.url().is_some_and(|u| same_origin(u, &self.base));
        let hint = match self.loopback_default {
            _ if falls_back(e, false) => " (the server answers plain http there: ask it with --plain-http, or name it http://... in its hosts.toml)",
            Some(true) if own_certificate_refused() => " (pullgate checks a loopback registry's certificate, which containerd does not: the CA files in its hosts directory do not verify it)",
            Some(false) if own_certificate_refused() => " (pullgate checks a loopback registry's certificate, which containerd does not: put its CA in the registry's hosts directory, or skip_verify = true in its hosts.toml)",
            _ => "",
        };
        let at = match e.url() {
            Some(u) if !same_origin(u, &self.base) => " (at a host the registry redirected to)",
            _ => "",
        };
        self.unavailable(format!("{}{at}{hint}", net_error(e)))
    }
    fn protocol(&self, reason: impl Into<String>) -> RegistryError {
        RegistryError::Protocol { host: self.host.clone(), reason: reason.into() }
    }
    fn no_access(&self) -> RegistryError {
        RegistryError::NoAccess { host: self.host.clone(), repo: self.repo.clone() }
    }
    fn bad_credential(&self) -> RegistryError {
        match &self.cred {
            Some(c) => RegistryError::BadCredential { host: self.host.clone(), credential: c.describe() },
            None => RegistryError::AuthRequired { host: self.host.clone(), repo: self.repo.clone() },
        }
    }

    fn unusable(&self, reason: &str) -> RegistryError {
        let credential = self.cred.as_ref().map(Credential::describe).unwrap_or_default();
        RegistryError::UnusableCredential { host: self.host.clone(), credential, reason: reason.into() }
    }

    /// The Basic header of a user name and password; None without a credential. A token
    /// cannot answer Basic authentication.
    fn basic_header(&self) -> Result<Option<String>> {
        match &self.cred {
            None => Ok(None),
            Some(Credential::Password { user, secret }) => {
                let raw = format!("{user}:{}", secret.expose());
                Ok(Some(format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(raw))))
            }
            Some(Credential::IdentityToken(_) | Credential::RegistryToken(_)) => {
                Err(self.unusable("it asks for a user name and password (Basic authentication), which a token cannot answer"))
            }
        }
    }

    /// Sends one request to the registry, going through the auth dance as needed, following
    /// redirects (without credentials to other hosts). Returns a 2xx or 404 response.
    async fn send(&mut self, method: Method, path: &str, accept: Option<&str>) -> Result<reqwest::Response> {
        let url = format!("{}/v2/{}/{}{}", self.base, self.repo, path, self.ns_query);
        // Blob bodies get a size-dependent deadline in BlobReader; everything else one deadline.
        let whole = !path.starts_with("blobs/") || method == Method::HEAD;
        // The challenge this registry gave for this repository last time is answered before the
        // first request, which saves the round-trip that would only fetch it again. If the
        // answer is refused, it is forgotten and the registry's fresh challenge followed.
        let mut remembered = false;
        if self.authz.is_none() && self.cred.is_some() {
            if let Some(ch) = remembered_challenge(&self.origin) {
                if self.authenticate(&ch).await.is_ok() {
                    remembered = true;
                } else {
                    forget_challenge(&self.origin);
                    (self.authz, self.authenticated) = (None, false);
                }
            }
        }
        for _attempt in 0..4 {
            let resp = self.send_following(method.clone(), &url, accept, whole).await?;
            match resp.status() {
                StatusCode::UNAUTHORIZED if remembered => {
                    forget_challenge(&self.origin);
                    (self.authz, self.authenticated, remembered) = (None, false, false);
                }
                StatusCode::UNAUTHORIZED => {
                    let given = std::time::Instant::now();
                    // Only the registry's own challenge is answered: a host it redirected to (a
                    // blob store, a CDN) gets no credential, nor does the realm it would name.
                    if !same_origin(resp.url(), &self.base) {
                        return Err(self.protocol(format!(
                            "{method} {path}: a host the registry redirected to asks for credentials; pullgate offers them only to the registry itself"
                        )));
                    }
                    let challenge = choose_challenge(resp.headers().get_all(header::WWW_AUTHENTICATE).iter().filter_map(|v| v.to_str().ok()))
                        .ok_or_else(|| self.protocol("401 without a usable WWW-Authenticate challenge"))?;
                    if self.authenticated {
                        // Our credentials (or token for them) were used and still refused. A
                        // registry token is the bearer token itself: `invalid_token` refuses it
                        // (expired, or issued by another service), anything else is a scope.
                        let registry_token = matches!(self.cred, Some(Credential::RegistryToken(_)));
                        return Err(match (&challenge.scheme, challenge.error.as_deref()) {
                            (Scheme::Bearer, Some("invalid_token")) if registry_token => RegistryError::BadCredential {
                                host: self.host.clone(),
                                credential: "the registry token (invalid_token: expired, or not issued for this registry)".into(),
                            },
                            (Scheme::Bearer, _) => self.no_access(),
                            (Scheme::Basic, _) => self.bad_credential(),
                        });
                    }
                    self.authenticate(&challenge).await?;
                    remember_challenge(&self.origin, &challenge, self.verified, given);
                }
                StatusCode::FORBIDDEN => return Err(self.no_access()),
                s if s.is_success() || s == StatusCode::NOT_FOUND => return Ok(resp),
                s if s.is_server_error() || s == StatusCode::TOO_MANY_REQUESTS => {
                    return Err(self.unavailable(format!("{method} {path}: HTTP {s}")))
                }
                s => return Err(self.protocol(format!("{method} {path}: unexpected HTTP {s}"))),
            }
        }
        Err(self.protocol("authentication did not converge"))
    }

    async fn send_following(&self, method: Method, url: &str, accept: Option<&str>, whole: bool) -> Result<reqwest::Response> {
        let origin = url::Url::parse(url).map_err(|e| self.protocol(e.to_string()))?;
        let mut current = origin.clone();
        for _ in 0..=MAX_REDIRECTS {
            // The client certificate (with credentials) only to the registry's own origin.
            let client = if current.origin() == origin.origin() { &self.http } else { &self.bare };
            let mut req = client.request(method.clone(), current.clone());
            if whole {
                req = req.timeout(self.total);
            }
            if let Some(a) = accept {
                req = req.header(header::ACCEPT, a);
            }
            // Credentials go only to the registry's own scheme, host and port.
            if current.origin() == origin.origin() {
                if let Some(z) = &self.authz {
                    req = req.header(header::AUTHORIZATION, z);
                }
            }
            let resp = req.send().await;
            crate::metrics::record_request("registry", resp.as_ref().ok().map(|r| r.status().as_u16()));
            let resp = resp.map_err(|e| self.request_failed(&e))?;
            if !resp.status().is_redirection() {
                return Ok(resp);
            }
            let loc = resp
                .headers()
                .get(header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .ok_or_else(|| self.protocol("redirect without Location"))?;
            let next = current.join(loc).map_err(|_| self.protocol("a redirect whose Location is not a URL"))?;
            if !matches!(next.scheme(), "http" | "https") {
                return Err(self.protocol("a redirect to a URL that is not http(s)"));
            }
            current = next;
        }
        Err(self.protocol(format!("more than {MAX_REDIRECTS} redirects")))
    }

    async fn authenticate(&mut self, ch: &Challenge) -> Result<()> {
        match ch.scheme {
            Scheme::Basic => {
                self.authz = Some(self.basic_header()?.ok_or_else(|| self.bad_credential())?);
            }
            Scheme::Bearer if matches!(self.cred, Some(Credential::RegistryToken(_))) => {
                let token = self.cred.as_ref().map(|c| c.secret().expose()).unwrap_or_default();
                self.authz = Some(format!("Bearer {token}"));
            }
            Scheme::Bearer => {
                let scope = ch.scope.clone().unwrap_or_else(|| format!("repository:{}:pull", self.repo));
                let token = self.fetch_token(ch, &scope).await?;
                self.authz = Some(format!("Bearer {token}"));
            }
        }
        self.authenticated = true;
        Ok(())
    }

    async fn fetch_token(&self, ch: &Challenge, scope: &str) -> Result<String> {
        let realm = url::Url::parse(&ch.realm).map_err(|_| self.protocol("the challenge's token realm is not a URL"))?;
        if !matches!(realm.scheme(), "http" | "https") {
            return Err(self.protocol("the challenge's token realm is not an http(s) URL"));
        }
        let service = ch.service.clone().unwrap_or_default();
        let own = url::Url::parse(&self.base).is_ok_and(|b| b.origin() == realm.origin());
        let tokens = if own { self.http.clone() } else { self.bare.clone() };
        let post = |form: Vec<(&'static str, &str)>| {
            let req = tokens.post(realm.clone()).timeout(self.total).form(&form);
            async move {
                let r = req.send().await;
                crate::metrics::record_request("token", r.as_ref().ok().map(|r| r.status().as_u16()));
                r.map_err(|e| self.unavailable(format!("token server: {}", net_error(&e))))
            }
        };
        let common = [("service", service.as_str()), ("scope", scope), ("client_id", "pullgate")];
        let resp = match &self.cred {
            // OAuth2 refresh-token grant, as containerd and docker use an identity token. There
            // is no other way to present one: no fallback.
            Some(Credential::IdentityToken(t)) => {
                let r = post([vec![("grant_type", "refresh_token"), ("refresh_token", t.expose())], common.to_vec()].concat()).await?;
                return self.refresh_answer(r).await;
            }
            // OAuth2 password grant, as containerd does when it has a secret; GET with Basic
            // where the token service has no POST.
            Some(Credential::Password { user, secret }) => {
                let r = post([vec![("grant_type", "password"), ("username", user.as_str()), ("password", secret.expose())], common.to_vec()].concat()).await?;
                if matches!(r.status(), StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED | StatusCode::BAD_REQUEST) { None } else { Some(r) }
            }
            // (A registry token never reaches the token service.)
            Some(Credential::RegistryToken(_)) | None => None,
        };
        let resp = match resp {
            Some(r) => r,
            None => {
                let mut req = tokens.get(realm).timeout(self.total).query(&[("service", service.as_str()), ("scope", scope)]);
                if let Some(b) = self.basic_header()? {
                    req = req.header(header::AUTHORIZATION, b);
                }
                let r = req.send().await;
                crate::metrics::record_request("token", r.as_ref().ok().map(|r| r.status().as_u16()));
                r.map_err(|e| self.unavailable(format!("token server: {}", net_error(&e))))?
            }
        };
        match resp.status() {
            s if s.is_success() => {}
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => return Err(self.bad_credential()),
            s if s.is_server_error() => return Err(self.unavailable(format!("token server: HTTP {s}"))),
            s => return Err(self.protocol(format!("token server answered HTTP {s}"))),
        }
        self.token_of(resp).await
    }

    /// The token service's answer to a refresh-token grant: the token, or a refusal naming the
    /// cause (OAuth2's error code; never its description, which could carry the secret).
    async fn refresh_answer(&self, resp: reqwest::Response) -> Result<String> {
        let status = resp.status();
        if status.is_success() {
            return self.token_of(resp).await;
        }
        if status.is_server_error() {
            return Err(self.unavailable(format!("token server: HTTP {status}")));
        }
        if matches!(status, StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED) {
            return Err(self.unusable(&format!("its token service does not take OAuth2 token requests (HTTP {status} to POST), so it has no refresh-token grant")));
        }
        let body = read_capped(resp, MAX_TOKEN_RESPONSE).await.map_err(|e| self.token_read_error(e))?;
        let code = oauth_error(&body);
        let told = code.clone().unwrap_or_else(|| format!("HTTP {status}"));
        Err(match code.as_deref() {
            Some("unsupported_grant_type") => self.unusable(&format!("its token service does not support the OAuth2 refresh-token grant ({told})")),
            // What the grant's refusal can mean (the service's own words are not quoted).
            Some("invalid_grant") | None if matches!(status, StatusCode::BAD_REQUEST | StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) => {
                RegistryError::TokenRefused { host: self.host.clone(), reason: format!("{told} (expired, revoked, or issued for another service or client)") }
            }
            _ => RegistryError::TokenRefused { host: self.host.clone(), reason: told },
        })
    }

    /// The token in a token service's successful answer.
    async fn token_of(&self, resp: reqwest::Response) -> Result<String> {
        let body = read_capped(resp, MAX_TOKEN_RESPONSE).await.map_err(|e| self.token_read_error(e))?;
        #[derive(serde::Deserialize)]
        struct TokenResponse {
            token: Option<String>,
            access_token: Option<String>,
        }
        // serde_json's messages may quote a value: only the position is said.
        let t: TokenResponse = serde_json::from_slice(&body)
            .map_err(|e| self.protocol(format!("token response is not the JSON of a token (line {} column {})", e.line(), e.column())))?;
        let token = t.access_token.or(t.token).filter(|t| !t.is_empty()).ok_or_else(|| self.protocol("token response has no token"))?;
        if token.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(self.protocol("token contains whitespace or control characters"));
        }
        Ok(token)
    }

    fn token_read_error(&self, e: ReadError) -> RegistryError {
        match e {
            ReadError::TooLarge(n) => self.protocol(format!("token response larger than {n} bytes")),
            ReadError::Net(e) => self.unavailable(format!("token server: {e}")),
        }
    }

    /// GETs a manifest or index by tag or digest, checking its digest and size.
    pub async fn get_manifest(&mut self, object: &str) -> Result<Fetched> {
        let resp = self.send(Method::GET, &format!("manifests/{object}"), Some(MANIFEST_ACCEPT)).await?;
        if resp.status() == StatusCode::NOT_FOUND {
            return Err(RegistryError::NotFound { host: self.host.clone(), repo: self.repo.clone(), what: format!("manifest {object}") });
        }
        let media_type = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|s| s.split(';').next().unwrap_or("").trim().to_string())
            .unwrap_or_default();
        let claimed = resp.headers().get("docker-content-digest").and_then(|v| v.to_str().ok()).map(str::to_string);
        let bytes = read_capped(resp, MAX_MANIFEST).await.map_err(|e| match e {
            ReadError::TooLarge(n) => self.protocol(format!("manifest {object} larger than {n} bytes")),
            ReadError::Net(e) => self.unavailable(e),
        })?;
        let digest = sha256_digest(&bytes);
        // The registry's Docker-Content-Digest is its own text: only a sha256 digest is taken
        // (and may be quoted); anything else is described, never repeated.
        if let Some(c) = claimed.as_deref().filter(|c| !crate::reference::is_digest(c)) {
            return Err(self.protocol(format!("manifest {object}: the registry's Docker-Content-Digest is not a sha256 digest ({} characters)", c.chars().count())));
        }
        let expected = if crate::reference::is_digest(object) { Some(object.to_string()) } else { claimed };
        if let Some(exp) = expected {
            if exp != digest {
                return Err(RegistryError::DigestMismatch { what: format!("manifest {object}"), expected: exp, actual: digest });
            }
        }
        // One reading: the document must be what it was served as, in containerd's reading too.
        let media_type = crate::document::media_type_of(&bytes, &media_type).map_err(|e| self.protocol(format!("manifest {object}: {e}")))?;
        Ok(Fetched { digest, media_type, bytes })
    }

    /// Resolves a reference to the image manifest for `platform` (`os/arch[/variant]`).
    pub async fn resolve(&mut self, r: &Reference, platform: &str) -> Result<Resolved> {
        self.settle_scheme().await;
        let top = self.get_manifest(r.object()).await?;
        if is_index(&top.media_type) {
            let idx = crate::document::index(&top.bytes, &top.media_type).map_err(|e| self.protocol(format!("index {}: {e}", top.digest)))?;
            let (os, arch, variant) = parse_platform(platform).map_err(RegistryError::Config)?;
            let chosen = crate::document::select_platform(&idx, &os, &arch, variant.as_deref())
                .map_err(|e| self.protocol(format!("index {}: {e}", top.digest)))?
                .ok_or_else(|| RegistryError::NotFound {
                    host: self.host.clone(),
                    repo: self.repo.clone(),
                    what: format!("a manifest for platform {platform} in index {}", top.digest),
                })?;
            let digest = chosen.digest().to_string();
            // An entry's digest is the registry's text until it is one pullgate can check.
            if !crate::reference::is_digest(&digest) {
                return Err(self.protocol(format!("index {}: the entry for platform {platform} names no sha256 digest ({} characters)", top.digest, digest.chars().count())));
            }
            let manifest = self.get_manifest(&digest).await?;
            let parsed = parse_manifest(&manifest).map_err(|e| self.protocol(e))?;
            return Ok(Resolved { index: Some(top), manifest, parsed });
        }
        let parsed = parse_manifest(&top).map_err(|e| self.protocol(e))?;
        Ok(Resolved { index: None, manifest: top, parsed })
    }

    /// Whether the repository has the blob (HEAD, authenticated like every request).
    pub async fn blob_exists(&mut self, digest: &str) -> Result<bool> {
        let resp = self.send(Method::HEAD, &format!("blobs/{digest}"), None).await?;
        Ok(resp.status().is_success())
    }

    /// Opens a blob for streaming. The reader fails (at the end) if the bytes do not hash to
    /// `digest` or are not exactly `size` long, and as soon as they exceed `size`.
    pub async fn open_blob(&mut self, digest: &str, size: u64) -> Result<BlobReader> {
        let resp = self.send(Method::GET, &format!("blobs/{digest}"), None).await?;
        if resp.status() == StatusCode::NOT_FOUND {
            return Err(RegistryError::NotFound { host: self.host.clone(), repo: self.repo.clone(), what: format!("blob {digest}") });
        }
        // A registry that says how long the body is says it before any byte is read: a length
        // other than the descriptor's is refused at once (a body sent without one is still
        // counted as it arrives).
        if let Some(n) = resp.content_length().filter(|n| *n != size) {
            return Err(RegistryError::DigestMismatch {
                what: format!("blob {digest}"),
                expected: format!("{size} bytes (the size the manifest gives)"),
                actual: format!("{n} bytes (its Content-Length says)"),
            });
        }
        let deadline = std::time::Instant::now() + self.total + Duration::from_secs(size / MIN_BLOB_RATE);
        if let Some(p) = &self.progress {
            p.start(digest, size);
        }
        Ok(BlobReader {
            progress: self.progress.clone(),
            deadline,
            stream: Box::pin(resp.bytes_stream()),
            hasher: Sha256::new(),
            got: 0,
            size,
            digest: digest.to_string(),
            host: self.host.clone(),
            done: false,
        })
    }

    /// Whether this endpoint's identity is checked (https with its certificate verified). What
    /// answers at any other endpoint is whichever process holds its port: it vouches for
    /// nothing it did not send in this session.
    pub fn verified(&self) -> bool {
        self.verified
    }

    /// Whether this session carries a credential.
    pub fn has_credential(&self) -> bool {
        self.cred.is_some()
    }

    /// Whether an anonymous client receives the blob's bytes here (for the public-layer rule):
    /// the bytes are downloaded without credentials and checked against the digest and size.
    /// A HEAD's answer alone never makes a blob public (a registry may answer one for bytes
    /// it would not serve); it only spares the download when it says no.
    pub async fn anonymous_serves(&self, digest: &str, size: u64) -> bool {
        let mut anon = Session {
            http: self.bare.clone(),
            bare: self.bare.clone(),
            base: self.base.clone(),
            host: self.host.clone(),
            repo: self.repo.clone(),
            ns_query: self.ns_query.clone(),
            endpoint: self.endpoint.clone(),
            origin: self.origin.clone(),
            plain_fallback: None,
            cred: None,
            authz: None,
            authenticated: false,
            verified: self.verified,
            loopback_default: self.loopback_default,
            total: self.total,
            progress: None,
        };
        if !matches!(anon.blob_exists(digest).await, Ok(true)) {
            return false;
        }
        let Ok(mut reader) = anon.open_blob(digest, size).await else { return false };
        loop {
            match reader.next_chunk().await {
                Ok(Some(_)) => {}
                Ok(None) => return true,
                Err(_) => return false,
            }
        }
    }
}

/// A blob being streamed from the registry, checked as it goes.
pub struct BlobReader {
    deadline: std::time::Instant,
    stream: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    hasher: Sha256,
    got: u64,
    size: u64,
    digest: String,
    host: String,
    done: bool,
    progress: Option<std::sync::Arc<crate::progress::Progress>>,
}

impl BlobReader {
    /// The next chunk; None once every byte arrived and matched the digest.
    pub async fn next_chunk(&mut self) -> Result<Option<bytes::Bytes>> {
        if self.done {
            return Ok(None);
        }
        let left = self.deadline.saturating_duration_since(std::time::Instant::now());
        let next = match tokio::time::timeout(left, self.stream.next()).await {
            Ok(n) => n,
            Err(_) => {
                self.done = true;
                return Err(RegistryError::Unavailable {
                    host: self.host.clone(),
                    reason: format!("blob {}: slower than {} KiB/s, gave up", self.digest, MIN_BLOB_RATE / 1024),
                });
            }
        };
        match next {
            Some(Ok(chunk)) => {
                self.got += chunk.len() as u64;
                if self.got > self.size {
                    self.done = true;
                    return Err(RegistryError::DigestMismatch {
                        what: format!("blob {}", self.digest),
                        expected: format!("{} bytes", self.size),
                        actual: format!("more than {} bytes", self.size),
                    });
                }
                self.hasher.update(&chunk);
                if let Some(p) = &self.progress {
                    p.advance(&self.digest, chunk.len() as u64);
                }
                Ok(Some(chunk))
            }
            Some(Err(e)) => {
                self.done = true;
                Err(RegistryError::Unavailable { host: self.host.clone(), reason: format!("blob {}: {}", self.digest, net_error(&e)) })
            }
            None => {
                self.done = true;
                let actual = format!("sha256:{}", hex::encode(std::mem::take(&mut self.hasher).finalize()));
                if self.got != self.size {
                    // (The manifest may name the right digest with a wrong size.)
                    return Err(RegistryError::DigestMismatch {
                        what: format!("blob {}", self.digest),
                        expected: format!("{} bytes (the size the manifest gives)", self.size),
                        actual: format!("{} bytes ({actual})", self.got),
                    });
                }
                if actual != self.digest {
                    return Err(RegistryError::DigestMismatch { what: format!("blob {}", self.digest), expected: self.digest.clone(), actual });
                }
                if let Some(p) = &self.progress {
                    p.finish(&self.digest);
                }
                Ok(None)
            }
        }
    }
}

enum ReadError {
    TooLarge(usize),
    Net(String),
}

async fn read_capped(resp: reqwest::Response, cap: usize) -> std::result::Result<Vec<u8>, ReadError> {
    if resp.content_length().is_some_and(|n| n > cap as u64) {
        return Err(ReadError::TooLarge(cap));
    }
    let mut out = Vec::new();
    let mut stream = resp.bytes_stream();
    while let Some(c) = stream.next().await {
        let c = c.map_err(|e| ReadError::Net(net_error(&e)))?;
        if out.len() + c.len() > cap {
            return Err(ReadError::TooLarge(cap));
        }
        out.extend_from_slice(&c);
    }
    Ok(out)
}

/// Whether `url` is at the origin (scheme, host, port) of the endpoint base URL `base`.
fn same_origin(url: &reqwest::Url, base: &str) -> bool {
    url::Url::parse(base).is_ok_and(|b| b.origin() == url.origin())
}

/// The OAuth2 error codes (RFC 6749 5.2) a token service's refusal is reported by.
const OAUTH_ERRORS: [&str; 6] = ["invalid_request", "invalid_client", "invalid_grant", "unauthorized_client", "unsupported_grant_type", "invalid_scope"];

/// The OAuth2 error code of a token service's refusal, when it is one of the codes RFC 6749
/// defines. Its `error_description` is never quoted: the service was sent the secret, and free
/// text can carry it (in pieces, spelled out, encoded) into the refusal a client, kubelet's
/// events and logs show; the code says the cause, and pullgate adds what it can mean.
fn oauth_error(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct OAuthError {
        error: Option<String>,
    }
    let e = serde_json::from_slice::<OAuthError>(body).ok()?;
    e.error.filter(|c| OAUTH_ERRORS.contains(&c.as_str()))
}

/// Whether a request over https to an http server with TLS settings goes to the server as
/// written instead, as containerd's fallback decides: the server answered with something that
/// is not TLS (rustls reads the first bytes of `HTTP/1.1 400` as a record of no known type;
/// containerd takes a `tls.RecordHeaderError` reading `HTTP/`, so any other non-TLS answer
/// falls back here where it fails there: the server is the operator's), or, with
/// `refused_too` (2.x, no port written), the connection was refused or its opening timed out
/// (containerd's isPortError; not a slow answer once connected, nor an unreachable host).
pub fn falls_back(e: &reqwest::Error, refused_too: bool) -> bool {
    if refused_too && e.is_connect() && e.is_timeout() {
        return true;
    }
    causes(e).any(|x| {
        let refused = x.downcast_ref::<std::io::Error>().is_some_and(|io| matches!(io.kind(), std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::TimedOut));
        (refused_too && e.is_connect() && refused) || matches!(x.downcast_ref::<rustls::Error>(), Some(rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType)))
    })
}

/// Whether `e` is a certificate the TLS settings do not trust.
fn untrusted_certificate(e: &reqwest::Error) -> bool {
    causes(e).any(|x| matches!(x.downcast_ref::<rustls::Error>(), Some(rustls::Error::InvalidCertificate(_))))
}

/// `e` and its causes, an io::Error's inner error among them (an io::Error's `source` is its
/// inner error's source: the inner error itself, here rustls's, is its `get_ref`).
fn causes<'a>(e: &'a (dyn std::error::Error + 'static)) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(e), |x| match x.downcast_ref::<std::io::Error>().and_then(std::io::Error::get_ref) {
        Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
        None => x.source(),
    })
}

/// A failed request's error, without the URL it was for: a registry chooses the URLs it
/// redirects to (and the token realms it names), and may write into one what it was just sent
/// (a password, a token), for the refusal to show it. Messages name the registry instead.
fn net_error(e: &reqwest::Error) -> String {
    let s = error_chain(e);
    match e.url() {
        Some(u) => {
            let s = s.replace(&format!(" for url ({u})"), "").replace(u.as_str(), "(a URL)");
            // A TLS error names the host it was for (a certificate not valid for it).
            match u.host_str().filter(|h| !h.is_empty()) {
                Some(h) => s.replace(h, "(the host)"),
                None => s,
            }
        }
        None => s,
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(x) = src {
        s.push_str(": ");
        s.push_str(&x.to_string());
        src = x.source();
    }
    s
}

pub use crate::document::is_index;

/// Parses an image manifest (what `resolve` does with the bytes it fetched), as containerd
/// reads it.
pub fn parse_manifest(f: &Fetched) -> std::result::Result<oci_spec::image::ImageManifest, String> {
    crate::document::manifest(&f.bytes, &f.media_type).map_err(|e| format!("manifest {}: {e}", f.digest))
}

/// `os/arch[/variant]`.
/// The platform this machine runs, as containerd names it and pulls select it (`linux/amd64`,
/// `linux/arm64`, `linux/arm/v7`).
pub fn host_platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "arm" => "arm/v7",
        "x86" => "386",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "riscv64" => "riscv64",
        "s390x" => "s390x",
        a => a,
    };
    format!("linux/{arch}")
}

pub fn parse_platform(p: &str) -> std::result::Result<(String, String, Option<String>), String> {
    let parts: Vec<&str> = p.split('/').collect();
    let ok = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
    match parts.as_slice() {
        [os, arch] if ok(os) && ok(arch) => Ok((os.to_string(), arch.to_string(), None)),
        [os, arch, v] if ok(os) && ok(arch) && ok(v) => Ok((os.to_string(), arch.to_string(), Some(v.to_string()))),
        _ => Err(format!("invalid platform {p:?}: expected os/arch[/variant]")),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_token_services_refusal_is_told_by_its_error_code_alone() {
        // The description is never quoted, whatever it holds (the secret in pieces, spelled out).
        let body = |d: &str| format!("{{\"error\":\"invalid_grant\",\"error_description\":{}}}", serde_json::json!(d));
        assert_eq!(oauth_error(body("ZqX and eight and vT and two").as_bytes()), Some("invalid_grant".into()));
        assert_eq!(oauth_error(body("the refresh token has been revoked").as_bytes()), Some("invalid_grant".into()));
        // An unknown error code is not quoted either.
        assert_eq!(oauth_error(br#"{"error":"ZqX8vT2mK9pL4wR7","error_description":"x"}"#), None);
        assert_eq!(oauth_error(b"not json"), None);
    }

    use super::*;

    /// A challenge is kept as long as there is room only when the endpoint was verified and the
    /// token service it names is https (or it is Basic: the registry itself); else for
    /// moments, counted from when it was given.
    #[test]
    fn challenges_from_unchecked_endpoints_or_naming_plain_token_services_are_kept_for_moments() {
        let ch = |scheme, realm: &str| Challenge { scheme, realm: realm.into(), service: None, scope: None, error: None };
        let long_ago = std::time::Instant::now() - UNVERIFIED_CHALLENGE_TTL - Duration::from_millis(100);
        let now = std::time::Instant::now();
        for (i, (c, verified, kept)) in [
            (ch(Scheme::Bearer, "https://auth.example/token"), true, true),
            (ch(Scheme::Basic, ""), true, true),
            (ch(Scheme::Bearer, "http://127.0.0.1:6000/token"), true, false),
            (ch(Scheme::Bearer, "https://auth.example/token"), false, false),
            (ch(Scheme::Basic, ""), false, false),
        ]
        .into_iter()
        .enumerate()
        {
            let origin = format!("ttl.test/{i}");
            remember_challenge(&origin, &c, verified, long_ago);
            assert_eq!(remembered_challenge(&origin).is_some(), kept, "{i}");
            remember_challenge(&origin, &c, verified, now);
            assert!(remembered_challenge(&origin).is_some(), "{i}: just given");
        }
    }

    #[test]
    fn docker_hubs_api_host_is_named_docker_io_in_origins() {
        let at = |base: &str, ns: Option<&str>, repo: &str| {
            let ep = hosts::Endpoint { base: base.into(), ns: ns.map(str::to_string), ..Default::default() };
            let o = origin_at(&ep, repo);
            assert_eq!(origin_endpoint(&o), endpoint_of(&ep), "{o}");
            o
        };
        assert_eq!(at("https://registry-1.docker.io", None, "library/alpine"), "docker.io/library/alpine");
        assert_eq!(at("http://registry-1.docker.io", None, "library/alpine"), "http://registry-1.docker.io/library/alpine");
        assert_eq!(at("https://registry-1.docker.io:5000", None, "a"), "registry-1.docker.io:5000/a");
        assert_eq!(at("https://reg.io", None, "a/b"), "reg.io/a/b");
        // A proxy's origin names the registry it answered for: two registries through one
        // proxy are two origins, and two endpoints.
        assert_eq!(at("https://proxy.corp", Some("reg-a.example:5000"), "team/app"), "proxy.corp/team/app?ns=reg-a.example%3A5000");
        assert_eq!(at("http://10.0.0.1:5000", Some("reg-b.example"), "team/app"), "http://10.0.0.1:5000/team/app?ns=reg-b.example");
        assert_ne!(at("https://proxy.corp", Some("a.example"), "x"), at("https://proxy.corp", Some("b.example"), "x"));
        assert_ne!(at("https://proxy.corp", Some("a.example"), "x"), at("https://proxy.corp", None, "x"));
    }

    #[test]
    fn an_origin_is_of_a_registry_under_any_spelling() {
        for origin in ["reg.example/team/app", "REG.example/team/app", "reg.example:443/team/app", "http://reg.example/team/app", "proxy.corp/team/app?ns=reg.example", "proxy.corp/team/app?ns=Reg.Example%3A443", "http://10.0.0.1:5000/team/app?ns=reg.example"] {
            assert!(origin_is_of(origin, "reg.example", "team/app"), "{origin}");
            assert!(origin_is_of(origin, "reg.example:443", "team/app"), "{origin}");
            assert!(!origin_is_of(origin, "reg.example", "team/app2"), "{origin}");
            assert!(!origin_is_of(origin, "reg.example:5000", "team/app"), "{origin}");
        }
        for origin in ["proxy.corp/team/app", "proxy.corp/team/app?ns=other.example", "reg.example.evil/team/app", "reg.example/team/app/x"] {
            assert!(!origin_is_of(origin, "reg.example", "team/app"), "{origin}");
        }
        assert!(origin_is_of("docker.io/library/alpine", "registry-1.docker.io", "library/alpine"));
        assert!(origin_is_of("proxy.corp/library/alpine?ns=docker.io", "registry-1.docker.io:443", "library/alpine"));
        assert!(origin_is_of("proxy.corp/x?ns=reg.example%3A5000", "reg.example:5000", "x"));
        // Spellings the URL parser reads as one server (helper-20): a port written 0443, IPv4
        // shorthand, plain http's default port, Docker Hub's third name.
        assert!(origin_is_of("reg.example:0443/team/app", "reg.example", "team/app"));
        assert!(origin_is_of("reg.example/team/app", "reg.example:0443", "team/app"));
        assert!(origin_is_of("proxy.corp/team/app?ns=reg.example%3A0443", "reg.example", "team/app"));
        assert!(origin_is_of("http://127.0.0.1:5000/x", "127.1:5000", "x"));
        assert!(origin_is_of("http://127.1:5000/x", "127.0.0.1:5000", "x"));
        assert!(origin_is_of("http://reg.example:80/x", "reg.example", "x"));
        assert!(origin_is_of("index.docker.io/library/alpine", "docker.io", "library/alpine"));
        assert!(!origin_is_of("http://127.0.0.1:5001/x", "127.1:5000", "x"));
        assert!(!origin_is_of("", "reg.example", "x"));
        assert!(!origin_is_of("?ns=reg.example", "reg.example", ""));
    }

    #[test]
    fn platforms() {
        assert_eq!(parse_platform("linux/amd64").unwrap(), ("linux".into(), "amd64".into(), None));
        assert!(parse_platform("linux/arm64/v8").is_ok());
        for bad in ["linux", "linux/", "/amd64", "linux/amd64/v8/x", "linux/am d64"] {
            assert!(parse_platform(bad).is_err(), "{bad}");
        }
    }

    /// A kept HTTP client is used again only under the same TLS settings: the CA files' bytes
    /// as they are at each use (an operator's new CA is not answered by a client built with the
    /// old one), skip_verify, and the timeout.
    #[test]
    fn kept_clients_follow_their_settings() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "first").unwrap();
        let ep = |skip_verify: bool| hosts::Endpoint { base: "https://r.example".into(), skip_verify, ca: vec![ca.clone()], ..Default::default() };
        let t = Some(Duration::from_secs(5));
        let first = ClientKey::of(&ep(false), t).unwrap();
        assert_eq!(first, ClientKey::of(&ep(false), t).unwrap());
        assert_ne!(first, ClientKey::of(&ep(true), t).unwrap());
        assert_ne!(first, ClientKey::of(&ep(false), None).unwrap());
        std::fs::write(&ca, "second").unwrap();
        assert_ne!(first, ClientKey::of(&ep(false), t).unwrap());
        std::fs::remove_file(&ca).unwrap();
        assert!(matches!(ClientKey::of(&ep(false), t), Err(RegistryError::Config(_))));
        // A FIFO in the CA file's place is refused at once, not waited on; so is a huge file.
        nix::unistd::mkfifo(&ca, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(ClientKey::of(&ep(false), t).unwrap_err().to_string().contains("not a regular file"));
        std::fs::remove_file(&ca).unwrap();
        std::fs::File::create(&ca).unwrap().set_len(hosts::MAX_CERT_FILE + 1).unwrap();
        assert!(ClientKey::of(&ep(false), t).unwrap_err().to_string().contains("larger than"));
    }

    /// The client certificate and key join the key as the files' bytes at each use, and what is
    /// wrong with them is said without their content (a key file holds a secret).
    #[test]
    fn client_certificates_join_the_key_and_stay_out_of_errors() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("c.cert"), dir.path().join("c.key"));
        std::fs::write(&cert, "-----BEGIN CERTIFICATE-----\nQ0VSVA==\n-----END CERTIFICATE-----\n").unwrap();
        std::fs::write(&key, "SECRET-KEY-MATERIAL-7q2\n").unwrap();
        let ep = |key: Option<&std::path::Path>| hosts::Endpoint {
            base: "https://r.example".into(),
            client: vec![hosts::ClientPair { cert: cert.clone(), key: key.map(|k| k.to_path_buf()) }],
            ..Default::default()
        };
        let t = Some(Duration::from_secs(5));
        let first = ClientKey::of(&ep(Some(&key)), t).unwrap();
        assert_eq!(first, ClientKey::of(&ep(Some(&key)), t).unwrap());
        assert_ne!(first, ClientKey::of(&ep(None), t).unwrap());
        assert_ne!(first, ClientKey::of(&hosts::Endpoint { base: "https://r.example".into(), ..Default::default() }, t).unwrap());
        assert!(!format!("{first:?}").contains("SECRET"));
        std::fs::write(&key, "SECRET-KEY-MATERIAL-other\n").unwrap();
        assert_ne!(first, ClientKey::of(&ep(Some(&key)), t).unwrap());
        // Not a key: the client cannot be built; the error names the files, not their bytes.
        let e = http_client(&ep(Some(&key)), t).unwrap_err().to_string();
        assert!(e.contains("c.cert") && e.contains("c.key") && !e.contains("SECRET"), "{e}");
        std::fs::remove_file(&key).unwrap();
        let e = ClientKey::of(&ep(Some(&key)), t).unwrap_err().to_string();
        assert!(e.contains("c.key") && !e.contains("SECRET"), "{e}");
    }
}
