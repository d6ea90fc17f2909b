//! api: pullgate's own gRPC service (proto/pullgate.proto) on `api_socket`: pull, verify,
//! check, grants, revoke, inspect. Thin adapters over `pull`, `ledger` and `gate`; every error
//! is mapped to a gRPC code once, in `From<ApiError> for Status`. Passwords arrive here over
//! the root-only socket and go only into the registry session.
pub mod proto {
    #![allow(clippy::all)]
    tonic::include_proto!("pullgate.v1");
}

use crate::credential::{short, Credential, CredentialError, Secret, TokenForm};
use crate::gate::{ChainInfo, Gate, GateError, Subject};
use crate::ledger;
use crate::metastore::StoreError;
use crate::pull::{self, PullError, Puller};
use crate::reference::{is_digest, Reference, ReferenceError};
use crate::registry::RegistryError;
use proto::pullgate_server::{Pullgate, PullgateServer};
use std::fmt::Write as _;
use std::sync::Arc;
use tonic::{Code, Request, Response, Status};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(transparent)]
    Reference(#[from] ReferenceError),
    #[error(transparent)]
    Credential(#[from] CredentialError),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Pull(#[from] PullError),
    #[error("ledger: {0}")]
    Ledger(#[from] StoreError),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Precondition(String),
}

impl From<ApiError> for Status {
    fn from(e: ApiError) -> Status {
        let code = match &e {
            ApiError::Reference(_) | ApiError::Credential(_) | ApiError::Invalid(_) => Code::InvalidArgument,
            ApiError::NotFound(_) => Code::NotFound,
            ApiError::Precondition(_) => Code::FailedPrecondition,
            ApiError::Ledger(_) => Code::Internal,
            ApiError::Pull(p) => match p {
                PullError::Registry(r) => match r {
                    RegistryError::BadCredential { .. } | RegistryError::AuthRequired { .. } | RegistryError::TokenRefused { .. } => Code::Unauthenticated,
                    RegistryError::UnusableCredential { .. } => Code::FailedPrecondition,
                    RegistryError::NoAccess { .. } => Code::PermissionDenied,
                    RegistryError::NotFound { .. } => Code::NotFound,
                    RegistryError::Unavailable { .. } => Code::Unavailable,
                    RegistryError::DigestMismatch { .. } => Code::DataLoss,
                    RegistryError::Protocol { .. } => Code::Unknown,
                    RegistryError::Config(_) => Code::InvalidArgument,
                },
                PullError::Containerd(c) => c.code,
                PullError::Ledger(_) | PullError::Rule(crate::ledger::LedgerError::Store(_)) => Code::Internal,
                // A write the ledger refused as resting on a claim, an image whose config lies
                // about its layers: refused, like a denial.
                PullError::Rule(_) | PullError::ForgedLayer { .. } => Code::PermissionDenied,
                PullError::Layer(_) => Code::DataLoss,
                PullError::BadImage { .. } => Code::InvalidArgument,
                PullError::PublicNamespace(_) => Code::PermissionDenied,
                PullError::PublicNamespaceTaken { .. } => Code::FailedPrecondition,
            },
        };
        Status::new(code, e.to_string())
    }
}

type Result<T> = std::result::Result<T, ApiError>;

/// Namespaces and principals: printable, no path separators (containerd's namespace rules are
/// stricter still; this keeps them safe as ledger key parts).
pub fn validate_name(what: &str, s: &str, allow_empty: bool) -> Result<()> {
    if s.is_empty() && allow_empty {
        return Ok(());
    }
    if s.is_empty() || s.len() > 253 || s.chars().any(|c| c.is_control() || c.is_whitespace() || c == '/') {
        let shown = crate::reference::excerpt(s);
        return Err(ApiError::Invalid(format!("invalid {what} {shown:?}: 1-253 printable characters without whitespace or '/'")));
    }
    Ok(())
}

/// Principals as the snapshotter accepts them (see `snapshotter::principal_is_valid`).
fn validate_principal(p: &str) -> Result<()> {
    if !crate::snapshotter::principal_is_valid(p) {
        let shown = crate::reference::excerpt(p);
        return Err(ApiError::Invalid(format!(
            "invalid principal {shown:?}: at most 360 printable characters without whitespace; '/' separates parts, none empty, '.' or '..'"
        )));
    }
    Ok(())
}

pub struct Api {
    pub puller: Arc<Puller>,
    pub gate: Arc<Gate>,
}

pub fn server(api: Api) -> PullgateServer<Api> {
    PullgateServer::new(api)
}

impl Api {
    fn pull_request(r: proto::PullRequest) -> Result<pull::Request> {
        validate_name("namespace", &r.namespace, false)?;
        validate_principal(&r.principal)?;
        let reference = Reference::parse(&r.reference)?;
        let cred = match (r.user.is_empty(), r.identity_token.is_empty(), r.registry_token.is_empty()) {
            (true, true, true) => None,
            (false, true, true) => match Credential::parse(&format!("{}:x", r.user))? {
                Credential::Password { user, .. } => Some(Credential::Password { user, secret: Secret::new(r.password) }),
                _ => return Err(ApiError::Invalid("a user name makes a password credential".into())),
            },
            (true, false, true) => Some(Credential::token(TokenForm::Identity, r.identity_token)?),
            (true, true, false) => Some(Credential::token(TokenForm::Registry, r.registry_token)?),
            _ => return Err(ApiError::Invalid("give one credential: a user, an identity token or a registry token".into())),
        };
        let platform = if r.platform.is_empty() { crate::registry::host_platform() } else { r.platform };
        crate::registry::parse_platform(&platform).map_err(ApiError::Invalid)?;
        if !r.hosts_dir.is_empty() {
            // The daemon reads no path a request names: the CLI reads --hosts-dir itself.
            return Err(ApiError::Invalid("hosts_dir is read by the pullgate CLI, which sends the server it names; update the client".into()));
        }
        let server = if r.server.is_empty() { None } else { Some(r.server) };
        if let Some(s) = &server {
            crate::registry::hosts::endpoint(&reference.host, None, r.plain_http, Some(s)).map_err(|e| ApiError::Invalid(e.to_string()))?;
        }
        Ok(pull::Request { reference, namespace: r.namespace, principal: r.principal, cred, plain_http: r.plain_http, server, platform, image_labels: Default::default(), extra_names: vec![], for_pods: false, progress: None })
    }

    /// Every origin a grant for `r` may be recorded under: origins name the endpoint that
    /// answered (https by the registry's name, plain http with its scheme, or wherever the
    /// daemon's hosts.toml sends the name, with or without `--plain-http`), and at a proxy the
    /// registry it answered for, or not (records made before pullgate told proxies); an http
    /// server with TLS settings under either scheme.
    fn origins_of(&self, r: &Reference) -> Vec<String> {
        let mut out = Vec::new();
        let operator = self.puller.hosts_dir.as_deref();
        for (hosts_dir, plain_http) in [(None, false), (None, true), (operator, false), (operator, true)] {
            let Ok(ep) = crate::registry::hosts::endpoint(&r.host, hosts_dir, plain_http, None) else { continue };
            // An http server with TLS settings answers over https or, as written, plain http.
            let mut https = ep.clone();
            https.read_as(crate::registry::hosts::HttpWithTls::Always);
            for ep in [ep, https] {
                out.push(crate::registry::origin_at(&ep, &r.repo));
                out.push(crate::registry::origin_at(&crate::registry::hosts::Endpoint { ns: None, ..ep }, &r.repo));
            }
        }
        out.sort();
        out.dedup();
        out
    }

    fn pull_response(o: pull::Outcome) -> proto::PullResponse {
        proto::PullResponse {
            manifest: o.manifest,
            identity: short(&o.identity),
            downloaded: o.downloaded,
            extracted: o.extracted as u32,
            adopted: o.adopted as u32,
            copied: o.copied,
            public: o.public,
            held_until: o.held_until.unwrap_or_default(),
            warnings: o.warnings,
        }
    }

    /// Would (namespace, principal) be allowed to run the image? The same decision the gate
    /// makes on a container's Prepare, from the ledger alone, over the manifests by that name
    /// the requester verified and the public ones: a name only other tenants pulled is answered
    /// as a name nobody pulled.
    fn check(&self, r: &proto::CheckRequest) -> Result<std::result::Result<(), String>> {
        validate_name("namespace", &r.namespace, false)?;
        validate_principal(&r.principal)?;
        let reference = Reference::parse(&r.reference)?;
        let subject = Subject { namespace: &r.namespace, principal: &r.principal };
        let decision = self.puller.snap.store().read(|tx| -> std::result::Result<_, StoreError> {
            // What the requester holds is read first, whatever the name: the time an answer
            // takes then does not grow with the requester's own grants only where another
            // tenant pulled the name.
            let granted = self.granted_to(tx, &subject)?;
            let origins = self.origins_of(&reference);
            let found = match &reference.digest {
                Some(d) => ledger::manifest(tx, d)?.map(|m| vec![(d.clone(), m)]).unwrap_or_default(),
                None => ledger::manifests_named(tx, &origins, &reference.image_name())?,
            };
            let found = self.own_or_public(tx, &granted, &origins, found)?;
            let chains: Vec<ChainInfo> = if found.is_empty() {
                // Nothing under that name the requester verified, nor a public image: the same
                // answer whether another tenant pulled it privately or nobody did.
                return Ok(self.gate.no_grant_for_image(&subject));
            } else {
                found
                    .into_iter()
                    .map(|(_, m)| ChainInfo {
                        chain_id: ledger::chain_ids(&m.diff_ids).last().cloned().unwrap_or_default(),
                        diff_ids: m.diff_ids,
                        ..Default::default()
                    })
                    .collect()
            };
            // Allowed if any recorded manifest for the name is allowed.
            let mut last = Ok(());
            for c in chains {
                last = self.gate.use_chain(tx, &subject, &c);
                if last.is_ok() {
                    break;
                }
            }
            Ok(last)
        })?;
        match decision {
            Ok(()) => Ok(Ok(())),
            // The requester named the image itself: the refusal and its fix may name it.
            Err(GateError::Denied(mut d)) => {
                if d.image.is_none() {
                    // The layer IDs recorded under that name are what other tenants (or other
                    // principals) pulled, not the requester's: the refusal names none of them.
                    d.subject = "a layer".into();
                    let shown = crate::reference::excerpt(&reference.to_string());
                    d.fix = d.fix.replace(" IMAGE", &format!(" {shown}"));
                    d.image = Some(shown);
                }
                Ok(Err(d.to_string()))
            }
            Err(e @ GateError::Ledger(_)) => Ok(Err(e.to_string())),
        }
    }

    /// Marks the manifest `r` pulled preloaded in its namespace, with its layers as pullgate
    /// established them (refused, marking nothing, when any layer's blob was not hashed by pullgate).
    /// Returns the manifests whose marks of the same name it replaced.
    fn mark_preloaded(&self, r: &pull::Request, manifest: &str) -> Result<Vec<String>> {
        let (ns, reference) = (r.namespace.as_str(), r.reference.to_string());
        let marked = self.puller.snap.store().write(|tx| -> std::result::Result<Option<(usize, Vec<String>)>, StoreError> {
            let Some(diff_ids) = ledger::established_layers(tx, manifest)? else { return Ok(None) };
            let n = diff_ids.len();
            let moved = ledger::mark_preloaded(tx, ns, manifest, &ledger::Preload { reference: reference.clone(), diff_ids, marked_at: crate::gate::now_nanos() })?;
            Ok(Some((n, moved)))
        })?;
        let Some((layers, moved)) = marked else {
            return Err(ApiError::Precondition(format!("pullgate has not hashed every layer of {manifest} itself, so it cannot say which layers the image holds: nothing was marked")));
        };
        tracing::info!(namespace = %ns, image = %reference, %manifest, layers, replaced = ?moved, "image marked preloaded");
        Ok(moved)
    }

    /// The manifests among `found` that `check` may decide: those the requester holds
    /// (`granted`, from [`Self::granted_to`]), and public ones:
    /// served without a credential at one of the name's `origins`, every layer public. What
    /// other tenants pulled privately stays out of the answer (even when each of its layers is
    /// public elsewhere), so that `check` tells nobody what others run.
    fn own_or_public(
        &self,
        tx: &impl crate::metastore::LedgerRead,
        granted: &std::collections::HashSet<String>,
        origins: &[String],
        found: Vec<(String, ledger::ManifestRec)>,
    ) -> std::result::Result<Vec<(String, ledger::ManifestRec)>, StoreError> {
        let mut out = Vec::new();
        for (d, m) in found {
            if granted.contains(&d) {
                out.push((d, m));
                continue;
            }
            let mut public = ledger::manifest_served_anonymously(tx, &d, origins)?;
            for l in &m.diff_ids {
                public = public && ledger::layer(tx, l)?.is_some_and(|r| r.public);
            }
            if public {
                out.push((d, m));
            }
        }
        Ok(out)
    }

    /// The manifests `s` holds for `check`: named by a grant of its own (or a namespace-wide
    /// one, where principals are not required), or marked preloaded in its namespace where that
    /// policy counts marks.
    fn granted_to(&self, tx: &impl crate::metastore::LedgerRead, s: &Subject) -> std::result::Result<std::collections::HashSet<String>, StoreError> {
        let mut granted: std::collections::HashSet<String> = ledger::grants_of(tx, s.namespace, s.principal)?.iter().map(|g| g.manifest().to_string()).collect();
        if !s.principal.is_empty() && !self.gate.cfg.require_principal.contains(s.namespace) {
            granted.extend(ledger::grants_of(tx, s.namespace, "")?.iter().map(|g| g.manifest().to_string()));
        }
        if self.gate.cfg.policy == crate::gate::Policy::NeverVerifyPreloadedImages {
            granted.extend(ledger::preloads(tx, Some(s.namespace))?.into_iter().map(|e| e.manifest));
        }
        Ok(granted)
    }

    /// What pullgate recorded about `target` (a reference, or a manifest, layer or blob
    /// digest), as data; `text` is rendered from it.
    fn inspect(&self, target: &str) -> Result<proto::InspectResponse> {
        let store = self.puller.snap.store();
        let mut out = store.read(|tx| -> std::result::Result<_, ApiError> {
            let mut out = proto::InspectResponse::default();
            let manifests = if is_digest(target) {
                ledger::manifest(tx, target)?.map(|m| vec![(target.to_string(), m)]).unwrap_or_default()
            } else {
                let r = Reference::parse(target)?;
                ledger::manifests_named(tx, &self.origins_of(&r), &r.image_name())?
            };
            let grants = if manifests.is_empty() { Vec::new() } else { ledger::grants(tx, None)? };
            for (digest, m) in &manifests {
                let mut layers = Vec::new();
                for (b, d) in m.layers.iter().zip(&m.diff_ids) {
                    let public = ledger::layer(tx, d)?.is_some_and(|l| l.public);
                    layers.push(proto::InspectedLayer { blob: b.clone(), diff_id: d.clone(), public, served_by: blob_origins(tx, b)? });
                }
                out.manifests.push(proto::InspectedManifest {
                    digest: digest.clone(),
                    names: m
                        .names
                        .iter()
                        .map(|e| {
                            let (origin, name) = ledger::split_name(e);
                            proto::InspectedName { name: name.to_string(), origin: origin.unwrap_or_default().to_string() }
                        })
                        .collect(),
                    origins: m.origins.iter().cloned().collect(),
                    config: Some(proto::InspectedBlob { digest: m.config.clone(), served_by: blob_origins(tx, &m.config)? }),
                    layers,
                    grants: grants.iter().filter(|g| g.manifest() == digest).map(grant_of).collect(),
                });
            }
            if manifests.is_empty() && is_digest(target) {
                if let Some(l) = ledger::layer(tx, target)? {
                    let mut blobs = Vec::new();
                    for b in &l.blobs {
                        blobs.push(proto::InspectedBlob { digest: b.clone(), served_by: blob_origins(tx, b)? });
                    }
                    out.layer = Some(proto::InspectedLayerId { diff_id: target.to_string(), public: l.public, manifests: l.manifests.iter().cloned().collect(), blobs });
                } else {
                    let served_by = blob_origins(tx, target)?;
                    if !served_by.is_empty() {
                        out.blob = Some(proto::InspectedBlob { digest: target.to_string(), served_by });
                    }
                }
            }
            Ok(out)
        })?;
        out.text = render_inspection(&out);
        if out.text.is_empty() {
            return Err(ApiError::NotFound(format!("pullgate has no record of {target}")));
        }
        Ok(out)
    }
}

fn grant_of(g: &ledger::GrantEntry) -> proto::Grant {
    proto::Grant {
        namespace: g.namespace().to_string(),
        principal: g.principal().to_string(),
        origin: g.origin().to_string(),
        manifest: g.manifest().to_string(),
        identity: short(&g.grant.identity),
        verified_at_unix: g.grant.verified_at / 1_000_000_000,
    }
}

fn blob_origins(tx: &impl crate::metastore::LedgerRead, blob: &str) -> std::result::Result<Vec<proto::BlobOrigin>, StoreError> {
    Ok(ledger::blob_origins(tx, blob)?
        .into_iter()
        .map(|(origin, o)| proto::BlobOrigin { origin, identities: o.identities.iter().map(|i| short(i)).collect() })
        .collect())
}

fn fmt_unix(secs: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

fn write_served_by(out: &mut String, served_by: &[proto::BlobOrigin], indent: &str) {
    for o in served_by {
        let _ = writeln!(out, "{indent}served by {} to {}", o.origin, o.identities.join(", "));
    }
}

/// `pullgate inspect`'s text.
fn render_inspection(r: &proto::InspectResponse) -> String {
    let mut out = String::new();
    for m in &r.manifests {
        let _ = writeln!(out, "manifest {}", m.digest);
        let names: Vec<String> =
            m.names.iter().map(|n| if n.origin.is_empty() { n.name.clone() } else { format!("{} (from {})", n.name, n.origin) }).collect();
        let _ = writeln!(out, "  names:   {}", names.join(", "));
        let _ = writeln!(out, "  origins: {}", m.origins.join(", "));
        if let Some(c) = &m.config {
            let _ = writeln!(out, "  config:  {}", c.digest);
            write_served_by(&mut out, &c.served_by, "    ");
        }
        for (i, l) in m.layers.iter().enumerate() {
            let _ = writeln!(out, "  layer {i}: {} (diffID {}) {}", l.blob, l.diff_id, if l.public { "public" } else { "protected" });
            write_served_by(&mut out, &l.served_by, "    ");
        }
        for g in &m.grants {
            let _ = writeln!(
                out,
                "  grant: namespace={} principal={:?} origin={} identity={} verified={}",
                g.namespace,
                g.principal,
                g.origin,
                g.identity,
                fmt_unix(g.verified_at_unix)
            );
        }
    }
    if let Some(l) = &r.layer {
        let _ = writeln!(out, "layer {} {}", l.diff_id, if l.public { "public" } else { "protected" });
        let _ = writeln!(out, "  in manifests: {}", l.manifests.join(", "));
        for b in &l.blobs {
            let _ = writeln!(out, "  blob {}", b.digest);
            write_served_by(&mut out, &b.served_by, "    ");
        }
    }
    if let Some(b) = &r.blob {
        let _ = writeln!(out, "blob {}", b.digest);
        write_served_by(&mut out, &b.served_by, "  ");
    }
    out
}

fn progress_event(p: &crate::progress::Progress) -> proto::PullEvent {
    let blobs = p
        .snapshot()
        .1
        .into_iter()
        .map(|e| proto::BlobProgress { digest: e.digest, state: e.state.as_str().to_string(), offset: e.offset, total: e.total })
        .collect();
    proto::PullEvent { event: Some(proto::pull_event::Event::Progress(proto::PullProgress { blobs })) }
}

/// How often a pull's progress is sent (when it changed).
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

type PullEvents = std::pin::Pin<Box<dyn tokio_stream::Stream<Item = std::result::Result<proto::PullEvent, Status>> + Send>>;

#[tonic::async_trait]
impl Pullgate for Api {
    type PullWithProgressStream = PullEvents;

    async fn pull_with_progress(&self, req: Request<proto::PullRequest>) -> std::result::Result<Response<PullEvents>, Status> {
        let mut r = Self::pull_request(req.into_inner())?;
        let progress = crate::progress::Progress::new();
        r.progress = Some(progress.clone());
        let puller = self.puller.clone();
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        tokio::spawn(async move {
            let pull = puller.pull(&r);
            tokio::pin!(pull);
            let mut tick = tokio::time::interval(PROGRESS_EVERY);
            let mut sent = None;
            let out = loop {
                tokio::select! {
                    out = &mut pull => break out,
                    // The client went away: drop the pull, as a unary call's is dropped.
                    _ = tx.closed() => return,
                    _ = tick.tick() => {
                        // Version 0: the manifest is not resolved yet, there is nothing to show.
                        let version = progress.snapshot().0;
                        if version > 0 && sent != Some(version) {
                            sent = Some(version);
                            // The client went away: drop the pull, as a unary call's is dropped.
                            if tx.send(Ok(progress_event(&progress))).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            };
            let last = match out {
                Ok(o) => {
                    progress.settle();
                    let _ = tx.send(Ok(progress_event(&progress))).await;
                    Ok(proto::PullEvent { event: Some(proto::pull_event::Event::Done(Self::pull_response(o))) })
                }
                Err(e) => Err(Status::from(ApiError::from(e))),
            };
            let _ = tx.send(last).await;
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }

    async fn pull(&self, req: Request<proto::PullRequest>) -> std::result::Result<Response<proto::PullResponse>, Status> {
        let r = Self::pull_request(req.into_inner())?;
        let out = self.puller.pull(&r).await.map_err(ApiError::from)?;
        Ok(Response::new(Self::pull_response(out)))
    }

    async fn verify(&self, req: Request<proto::PullRequest>) -> std::result::Result<Response<proto::PullResponse>, Status> {
        let r = Self::pull_request(req.into_inner())?;
        let out = self.puller.verify(&r).await.map_err(ApiError::from)?;
        Ok(Response::new(Self::pull_response(out)))
    }

    async fn check(&self, req: Request<proto::CheckRequest>) -> std::result::Result<Response<proto::CheckResponse>, Status> {
        let r = req.into_inner();
        Ok(Response::new(match self.check(&r)? {
            Ok(()) => proto::CheckResponse { allowed: true, reason: String::new() },
            Err(reason) => proto::CheckResponse { allowed: false, reason },
        }))
    }

    async fn grants(&self, req: Request<proto::GrantsRequest>) -> std::result::Result<Response<proto::GrantsResponse>, Status> {
        let r = req.into_inner();
        validate_name("namespace", &r.namespace, true)?;
        let ns = (!r.namespace.is_empty()).then_some(r.namespace.as_str());
        let grants = self.puller.snap.store().read(|tx| ledger::grants(tx, ns)).map_err(ApiError::from)?;
        Ok(Response::new(proto::GrantsResponse {
            grants: grants.iter().map(grant_of).collect(),
        }))
    }

    async fn revoke(&self, req: Request<proto::RevokeRequest>) -> std::result::Result<Response<proto::RevokeResponse>, Status> {
        let r = req.into_inner();
        validate_name("namespace", &r.namespace, false)?;
        validate_principal(&r.principal)?;
        let reference = if r.reference.is_empty() { None } else { Some(Reference::parse(&r.reference).map_err(ApiError::from)?) };
        // The origins the reference's endpoints name, and any naming its registry and repository
        // otherwise (another spelling of the registry, a proxy answering for it).
        let origins = reference.as_ref().map(|rf| self.origins_of(rf));
        let of_reference = |o: &str| {
            reference.as_ref().zip(origins.as_ref()).is_some_and(|(rf, known)| known.iter().any(|x| x == o) || crate::registry::origin_is_of(o, &rf.host, &rf.repo))
        };
        let principal = if r.all_principals { None } else { Some(r.principal.as_str()) };
        let origin = origins.as_ref().map(|o| o.join(" "));
        let n = self
            .puller
            .snap
            .store()
            .write(|tx| ledger::revoke(tx, &r.namespace, principal, reference.is_some().then_some(&of_reference as &dyn Fn(&str) -> bool)))
            .map_err(ApiError::from)?;
        tracing::info!(namespace = %r.namespace, principal = ?principal, origin = ?origin, revoked = n, "grants revoked");
        Ok(Response::new(proto::RevokeResponse { revoked: n as u32 }))
    }

    async fn preload(&self, req: Request<proto::PullRequest>) -> std::result::Result<Response<proto::PullResponse>, Status> {
        let r = req.into_inner();
        if !r.principal.is_empty() {
            return Err(ApiError::Invalid("an image is preloaded for the whole namespace (the node's): give no principal".into()).into());
        }
        let r = Self::pull_request(r)?;
        let mut out = self.puller.pull(&r).await.map_err(ApiError::from)?;
        for m in self.mark_preloaded(&r, &out.manifest)? {
            out.warnings.push(format!("{} named {m} when it was marked before: that mark was removed", r.reference));
        }
        if self.gate.cfg.policy != crate::gate::Policy::NeverVerifyPreloadedImages {
            out.warnings.push(format!("the policy is {:?}: the mark counts only under NeverVerifyPreloadedImages, so pods and principals still need a grant of their own", self.gate.cfg.policy));
        }
        Ok(Response::new(Self::pull_response(out)))
    }

    async fn preloads(&self, req: Request<proto::PreloadsRequest>) -> std::result::Result<Response<proto::PreloadsResponse>, Status> {
        let r = req.into_inner();
        validate_name("namespace", &r.namespace, true)?;
        let ns = (!r.namespace.is_empty()).then_some(r.namespace.as_str());
        let marks = self.puller.snap.store().read(|tx| ledger::preloads(tx, ns)).map_err(ApiError::from)?;
        Ok(Response::new(proto::PreloadsResponse {
            preloaded: marks
                .into_iter()
                .map(|e| proto::Preloaded {
                    namespace: e.namespace,
                    reference: e.preload.reference,
                    manifest: e.manifest,
                    diff_ids: e.preload.diff_ids,
                    marked_at_unix: e.preload.marked_at / 1_000_000_000,
                })
                .collect(),
        }))
    }

    async fn unpreload(&self, req: Request<proto::UnpreloadRequest>) -> std::result::Result<Response<proto::UnpreloadResponse>, Status> {
        let r = req.into_inner();
        validate_name("namespace", &r.namespace, false)?;
        // A manifest digest, or the reference as a mark records it (pullgate's reading of it).
        let named = if is_digest(&r.reference) { r.reference.clone() } else { Reference::parse(&r.reference).map_err(ApiError::from)?.to_string() };
        let which = |e: &ledger::PreloadEntry| e.manifest == named || e.preload.reference == named;
        let n = self.puller.snap.store().write(|tx| ledger::unmark_preloaded(tx, &r.namespace, &which)).map_err(ApiError::from)?;
        tracing::info!(namespace = %r.namespace, image = %crate::reference::excerpt(&r.reference), removed = n, "preload marks removed");
        Ok(Response::new(proto::UnpreloadResponse { removed: n as u32 }))
    }

    async fn inspect(&self, req: Request<proto::InspectRequest>) -> std::result::Result<Response<proto::InspectResponse>, Status> {
        let r = req.into_inner();
        Ok(Response::new(self.inspect(&r.target)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes() {
        let reg = |e: RegistryError| Status::from(ApiError::Pull(PullError::Registry(e))).code();
        let h = || "h".to_string();
        assert_eq!(reg(RegistryError::BadCredential { host: h(), credential: "u".into() }), Code::Unauthenticated);
        assert_eq!(reg(RegistryError::TokenRefused { host: h(), reason: "r".into() }), Code::Unauthenticated);
        assert_eq!(reg(RegistryError::UnusableCredential { host: h(), credential: "c".into(), reason: "r".into() }), Code::FailedPrecondition);
        assert_eq!(reg(RegistryError::AuthRequired { host: h(), repo: h() }), Code::Unauthenticated);
        assert_eq!(reg(RegistryError::NoAccess { host: h(), repo: h() }), Code::PermissionDenied);
        assert_eq!(reg(RegistryError::NotFound { host: h(), repo: h(), what: h() }), Code::NotFound);
        assert_eq!(reg(RegistryError::Unavailable { host: h(), reason: h() }), Code::Unavailable);
        assert_eq!(reg(RegistryError::DigestMismatch { what: h(), expected: h(), actual: h() }), Code::DataLoss);
        assert_eq!(reg(RegistryError::Protocol { host: h(), reason: h() }), Code::Unknown);
        assert_eq!(Status::from(ApiError::Invalid("x".into())).code(), Code::InvalidArgument);
        assert_eq!(Status::from(ApiError::NotFound("x".into())).code(), Code::NotFound);
    }

    #[test]
    fn names() {
        assert!(validate_name("namespace", "team-a", false).is_ok());
        assert!(validate_principal("").is_ok());
        assert!(validate_principal("team-a/web-0").is_ok());
        for bad in ["../x", "a//b", "a/", "/a", "a b", "./a"] {
            assert!(validate_principal(bad).is_err(), "{bad}");
        }
        for bad in ["", "a/b", "a b", "a\u{0}", "x\n"] {
            assert!(validate_name("namespace", bad, false).is_err(), "{bad:?}");
        }
    }
}
