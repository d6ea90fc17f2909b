//! pull: `pullgate pull` and `pullgate verify`. Both resolve the reference at its origin (the
//! endpoint actually contacted) with the caller's credentials (the registry decides), make
//! sure the origin itself served every blob (downloading what it never served, or — at the
//! same endpoint — asking with an authenticated HEAD), compute the layer ID of every layer blob
//! not paired yet from its bytes (while downloading, or from containerd's content store),
//! refuse an image whose config claims other layer IDs, and record pairings, blob origins, the
//! manifest, its layers and chains, and the grant in one ledger transaction. `pull` also fetches the blobs the content store lacks
//! under a lease, labels them, creates the image record and unpacks into pullgate with
//! `containerd.io/snapshot.ref`, so an authorised namespace adopts a chain already unpacked.
pub mod containerd;
pub mod onnode;

use crate::credential::{short, Credential, IdentityKey, ANONYMOUS};
use crate::diffid::{self, DiffIdError, Verified};
use crate::ledger::{self, LedgerError, ManifestRec};
use crate::metastore::StoreError;
use crate::reference::Reference;
use crate::registry::{self, Options, RegistryError, Session, MAX_MANIFEST};
use crate::snapshotter::{Snapshotter, SNAPSHOT_REF_LABEL};
use containerd::{Containerd, ContainerdError};
use containerd_client::types::Descriptor;
use futures_util::StreamExt;
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

/// Content label prefix: `pullgate.io/origin.<host/repo>` = the credential identity (short
/// form) that fetched or verified the blob there, one label per origin.
pub const ORIGIN_LABEL_PREFIX: &str = "pullgate.io/origin.";

#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Containerd(#[from] ContainerdError),
    #[error("ledger: {0}")]
    Ledger(#[from] StoreError),
    #[error("ledger: {0}")]
    Rule(#[from] LedgerError),
    #[error(transparent)]
    Layer(#[from] DiffIdError),
    #[error("image {image}: layer {blob} is {actual} when pullgate decompresses and hashes it, but the config claims {claimed}; refusing an image whose config lies about its layers")]
    ForgedLayer { image: String, blob: String, claimed: String, actual: String },
    #[error("image {image}: {reason}")]
    BadImage { image: String, reason: String },
    #[error("namespace {namespace} holds {blobs} blob(s) that pullgate did not establish as public (the first: {first}); pullgate does not share it (it removes its shareable label): remove them (ctr -n {namespace} content rm ...) or name another [daemon] public_namespace")]
    PublicNamespaceTaken { namespace: String, blobs: usize, first: String },
    #[error("namespace {0} is pullgate's public namespace, which every namespace can read: pullgate puts there only blobs their origin serves without credentials, and pulls nothing into it")]
    PublicNamespace(String),
}

type Result<T> = std::result::Result<T, PullError>;

impl PullError {
    /// The result class of a failed pull or verify (a metrics label).
    pub fn outcome(&self) -> &'static str {
        match self {
            PullError::Registry(r) => r.outcome(),
            PullError::Rule(_) | PullError::ForgedLayer { .. } | PullError::PublicNamespace(_) => "denied",
            _ => "error",
        }
    }
}

/// The result class of a pull or verify (a metrics label).
fn outcome<T>(out: &Result<T>) -> &'static str {
    out.as_ref().err().map_or("ok", PullError::outcome)
}

#[derive(Debug, Clone)]
pub struct Request {
    pub reference: Reference,
    pub namespace: String,
    pub principal: String,
    pub cred: Option<Credential>,
    pub plain_http: bool,
    /// The server the request's own hosts.toml names for the registry (read by the CLI).
    pub server: Option<String>,
    pub platform: String,
    /// Labels of the image records a pull creates (the CRI front's `io.cri-containerd.image`).
    pub image_labels: HashMap<String, String>,
    /// More image records a pull creates for the same image, `{digest}` standing for the
    /// record's target digest and `{config}` for the config's (the CRI front's image ID and
    /// `repo@digest` records).
    pub extra_names: Vec<String>,
    /// A pull for pods (the CRI front): refuse a checkpoint image (containerd's CreateContainer
    /// would restore it onto an image pullgate never decided), and point the image records at
    /// the platform's manifest pullgate verified, never at an index (containerd's CRI would pick
    /// an index's entry by its own platform rules, and group the name with whatever image that
    /// entry is).
    pub for_pods: bool,
    /// Where the pull reports each blob's state and bytes (`pullgate pull` on a terminal).
    pub progress: Option<Arc<crate::progress::Progress>>,
}


#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub manifest: String,
    pub identity: String,
    /// Blobs downloaded from the registry.
    pub downloaded: Vec<String>,
    /// Blobs copied into the namespace from another namespace's content on the node.
    pub copied: Vec<String>,
    /// Public blobs taken (adopted, not copied) from pullgate's public namespace.
    pub public: Vec<String>,
    /// A verify's hold on the blobs it placed in the namespace ends then (RFC 3339).
    pub held_until: Option<String>,
    /// What the operator should know (a shareable namespace).
    pub warnings: Vec<String>,
    /// Layers unpacked (extracted) by this pull, and adopted from an existing chain.
    pub extracted: usize,
    pub adopted: usize,
    /// The config's digest (CRI's image ID).
    pub config: String,
    /// What the image records point at (a pull only).
    pub target: Option<Descriptor>,
}

pub struct Puller {
    pub containerd: PathBuf,
    pub snapshotter_name: String,
    pub snap: Arc<Snapshotter>,
    pub key: Arc<IdentityKey>,
    pub probe_anonymous: bool,
    pub hosts_dir: Option<PathBuf>,
    /// Registry timeout ([registry] timeout; None: the registry client's default).
    pub timeout: Option<std::time::Duration>,
    /// Set once the leases of a previous (killed) pullgate process have been deleted.
    pub stale_leases_gone: tokio::sync::OnceCell<()>,
    /// One connection to containerd for every pull and verify (reconnecting when containerd
    /// restarts).
    pub channel: tonic::transport::Channel,
    /// What containerd said of its node (`Containerd::node_facts`), and when.
    pub node: std::sync::Mutex<Option<(std::time::Instant, containerd::NodeFacts)>>,
    /// pullgate's public namespace (`[daemon] public_namespace`): under an isolated content store
    /// on containerd 1.7+, the blobs pullgate established as public at their origin are held
    /// there once, labelled shareable, and every namespace adopts them instead of a copy.
    pub public_namespace: Option<String>,
    /// Blobs of the public namespace found established as public (`public_namespace_ready`
    /// asks the ledger about each other one): a blob, once public, stays so in the ledger.
    pub public_checked: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Blob digest -> a namespace that held it when pullgate last placed it there
    /// (`holder_hints`), so that finding a blob on the node does not ask every namespace.
    pub holders: std::sync::Mutex<HashMap<String, String>>,
    /// Pinned references (`repo@digest`) whose anonymous verify failed lately, and until when
    /// they are not asked again (`public_at_own_origin`).
    pub not_public: Recent<String>,
    /// Of those, the ones whose origin could not be reached (for the refusal's reason).
    pub unreachable: Recent<String>,
    /// (namespace, chain) whose refused request found no image public at its own origin lately,
    /// and until when it is not worked out again (`establish`): a namespace's own records are
    /// read at most once per `UNREACHABLE_RETRY` for a chain, however often it is refused.
    pub no_public_names: Recent<(String, String)>,
    /// Each namespace's image records as containerd runs them, read for refused requests.
    pub on_node: onnode::Readings,
}

/// Holder hints kept at most (then forgotten at once and learnt again).
const MAX_HOLDER_HINTS: usize = 200_000;

/// Blobs of the public namespace remembered as checked, at most (then forgotten at once).
const MAX_PUBLIC_CHECKED: usize = 200_000;

/// How long what containerd said of its node is taken as still true.
const NODE_FACTS_TTL: std::time::Duration = std::time::Duration::from_secs(60);

/// Blobs downloaded at once.
const FETCH_CONCURRENCY: usize = 4;
/// Blobs copied between namespaces at once: a copy waits mostly on containerd's commit (the
/// blob's fsync and a metadata transaction), not on bytes, so more overlap well.
const COPY_CONCURRENCY: usize = 16;

fn now_nanos() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0)
}

#[derive(Clone)]
struct Blob {
    digest: String,
    size: u64,
    media_type: String,
}

/// How long an anonymous verify that failed is not tried again for the same pinned reference:
/// a request refused again and again costs the registry one anonymous verify a minute.
const PUBLIC_RETRY: std::time::Duration = std::time::Duration::from_secs(60);
/// The same for an origin that could not be reached (down, slow, refusing connections): asked
/// again sooner, so that a public image runs again soon after its registry is back, while image
/// records naming unreachable origins cost each of them one attempt (bounded by the registry
/// timeout) per this time, not one per refused request.
const UNREACHABLE_RETRY: std::time::Duration = std::time::Duration::from_secs(10);
/// Pinned references remembered as not public, at most; when full, the namespace whose
/// requests remembered the most forgets its soonest (a namespace filling it with names of its
/// own forgets its own, and cannot turn the memory off for others).
const MAX_NOT_PUBLIC: usize = 10_000;
/// Keys remembered until a moment each (what `public_at_own_origin` and `establish` do not ask
/// again for a while), at most `MAX_NOT_PUBLIC` of them: when full, the namespace holding the
/// most forgets the one whose moment comes soonest, for the newest.
pub struct Recent<K>(std::sync::Mutex<RecentKeys<K>>);

/// Each key's moment and the tenant whose request remembered it, and how many keys each tenant
/// holds.
pub struct RecentKeys<K> {
    until: HashMap<K, (std::time::Instant, String)>,
    held: HashMap<String, usize>,
}

impl<K> Default for Recent<K> {
    fn default() -> Self {
        Recent(std::sync::Mutex::new(RecentKeys { until: HashMap::new(), held: HashMap::new() }))
    }
}

impl<K: std::hash::Hash + Eq + Clone> Recent<K> {
    /// Whether `key` is remembered still (a key whose moment has passed is forgotten when the
    /// memory is full).
    fn holds(&self, key: &K) -> bool {
        let m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        m.until.get(key).is_some_and(|(until, _)| *until > std::time::Instant::now())
    }

    /// Remembers `key` for `time` from now, for a request of `owner` (a tenant: a namespace,
    /// or a pod's Kubernetes namespace). When the memory is full, the owner holding the most
    /// keys forgets the one whose moment comes soonest: a tenant filling it with names of its
    /// own forgets its own, not others'.
    fn remember(&self, key: K, owner: &str, time: std::time::Duration) {
        let mut guard = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let RecentKeys { until, held } = &mut *guard;
        let now = std::time::Instant::now();
        if let Some((_, owner)) = until.remove(&key) {
            count_down(held, &owner);
        }
        if until.len() >= MAX_NOT_PUBLIC {
            until.retain(|_, (t, owner)| {
                let live = *t > now;
                if !live {
                    count_down(held, owner);
                }
                live
            });
        }
        if until.len() >= MAX_NOT_PUBLIC {
            let most = held.iter().max_by_key(|(_, n)| **n).map(|(ns, _)| ns.clone());
            let soonest = most.and_then(|ns| until.iter().filter(|(_, (_, o))| *o == ns).min_by_key(|(_, (t, _))| *t).map(|(k, _)| k.clone()));
            if let Some((_, owner)) = soonest.and_then(|k| until.remove(&k)) {
                count_down(held, &owner);
            }
        }
        *held.entry(owner.to_string()).or_insert(0) += 1;
        until.insert(key, (now + time, owner.to_string()));
    }
}

/// One key fewer held by `owner`.
fn count_down(held: &mut HashMap<String, usize>, owner: &str) {
    if let Some(n) = held.get_mut(owner) {
        *n -= 1;
        if *n == 0 {
            held.remove(owner);
        }
    }
}

/// What the check of whether an image is public at its own origin found.
#[derive(Debug, Default)]
pub struct PublicCheck {
    /// The name that verified there without a credential.
    pub verified: Option<String>,
    /// The origins (repositories) of the names asked, now or lately, that could not be reached
    /// (down, too slow, or refusing with 429 or a server error).
    pub unreachable: Vec<String>,
}

/// At most this many of an image's names are asked whether the image is public there.
const PUBLIC_NAMES: usize = 4;

impl Puller {
    /// Whether an image is public at its own origin, established by pullgate itself: an
    /// anonymous verify, in `namespace` for `principal`, of one of its names pinned to the
    /// manifest that name points at (`names`: name, target digest). The names are an image
    /// record's claims and only say where to ask; what counts is the registry's answer there
    /// without a credential and the blobs served there (downloaded and hashed wherever the
    /// endpoint is not one pullgate verified; bytes received without a credential are what
    /// makes a layer public). The verify records its grant like any other. Names are asked in
    /// the order given (the caller puts the one the request named first), at most
    /// `PUBLIC_NAMES` of them asked anew; returns the first that verified. A name the registry
    /// refused is not asked again for a minute (one whose origin could not be reached, for
    /// `UNREACHABLE_RETRY`), and does
    /// not count against the others meanwhile: names another tenant added to the image record
    /// cannot crowd out the image's own.
    pub async fn public_at_own_origin(&self, namespace: &str, principal: &str, names: &[(String, String)], for_pods: bool) -> PublicCheck {
        let mut asked = std::collections::HashSet::new();
        let mut check = PublicCheck::default();
        let owner = Self::refusal_owner(namespace, principal, for_pods);
        for (name, target) in names {
            let Ok(r) = Reference::parse(name) else { continue };
            let pinned = format!("{}@{target}", r.origin());
            if self.not_public.holds(&pinned) {
                if self.unreachable.holds(&pinned) {
                    check.unreachable.push(r.origin());
                }
                continue;
            }
            if asked.len() >= PUBLIC_NAMES {
                break;
            }
            if !asked.insert(pinned.clone()) {
                continue;
            }
            let Ok(reference) = Reference::parse(&pinned) else { continue };
            let req = Request {
                reference,
                namespace: namespace.to_string(),
                principal: principal.to_string(),
                cred: None,
                plain_http: false,
                server: None,
                platform: registry::host_platform(),
                image_labels: HashMap::new(),
                extra_names: vec![],
                for_pods,
                progress: None,
            };
            let (since, out) = (std::time::Instant::now(), self.run(&req, false).await);
            crate::metrics::record_op("public_check", since, outcome(&out));
            match out {
                Ok(_) => {
                    check.verified = Some(name.clone());
                    return check;
                }
                Err(e) => {
                    tracing::info!(%namespace, %principal, name = %pinned, error = %e, "the image is not public at this name's origin (an anonymous verify failed)");
                    // Remembered for every namespace only when the registry itself answered so:
                    // a failure that came from the asking namespace (its content, its records,
                    // containerd's answers about them) says nothing of the image elsewhere.
                    use registry::RegistryError as R;
                    let retry = match &e {
                        PullError::Registry(R::Unavailable { .. }) => {
                            check.unreachable.push(r.origin());
                            self.unreachable.remember(pinned.clone(), &owner, UNREACHABLE_RETRY);
                            UNREACHABLE_RETRY
                        }
                        PullError::Registry(
                            R::AuthRequired { .. }
                            | R::NoAccess { .. }
                            | R::NotFound { .. }
                            | R::TokenRefused { .. }
                            | R::BadCredential { .. }
                            | R::Protocol { .. }
                            | R::DigestMismatch { .. },
                        ) => PUBLIC_RETRY,
                        _ => continue,
                    };
                    self.not_public.remember(pinned, &owner, retry);
                }
            }
        }
        check
    }

    /// Whose requests a name refused lately is counted against (`Recent`): the namespace's; for
    /// a pod's (`for_pods`: the CRI front's one namespace, whose tenants are Kubernetes
    /// namespaces) that of its Kubernetes namespace, the first part of its principal.
    fn refusal_owner(namespace: &str, principal: &str, for_pods: bool) -> String {
        match (for_pods, principal.split('/').next().filter(|t| !t.is_empty())) {
            (true, Some(tenant)) => format!("{namespace}/{tenant}"),
            _ => namespace.to_string(),
        }
    }

    pub async fn verify(&self, req: &Request) -> Result<Outcome> {
        let (since, out) = (std::time::Instant::now(), self.run(req, false).await);
        crate::metrics::record_op("verify", since, outcome(&out));
        out
    }

    pub async fn pull(&self, req: &Request) -> Result<Outcome> {
        let (since, out) = (std::time::Instant::now(), self.run(req, true).await);
        crate::metrics::record_op("pull", since, outcome(&out));
        out
    }

    async fn run(&self, req: &Request, full: bool) -> Result<Outcome> {
        self.stale_leases_gone
            .get_or_try_init(|| async {
                let n = Containerd::delete_stale_leases(&self.containerd).await?;
                if n > 0 {
                    tracing::info!(deleted = n, "deleted leases left by a previous pullgate process");
                }
                Ok::<(), PullError>(())
            })
            .await?;
        if self.public_namespace.as_deref() == Some(req.namespace.as_str()) {
            return Err(PullError::PublicNamespace(req.namespace.clone()));
        }
        let mut stages = Stages::new();
        let cd = Containerd::on(self.channel.clone(), &req.namespace);
        let node = self.node_facts(&cd).await;
        let mut cd = cd.with_blobs(node.blobs.clone());
        let opts = Options { plain_http: req.plain_http, hosts_dir: self.hosts_dir.as_deref(), server: req.server.as_deref(), timeout: self.timeout, http_with_tls: node.http_with_tls };
        let mut sess = Session::new(&req.reference, req.cred.clone(), &opts)?;
        sess.report_to(req.progress.clone());
        let resolved = sess.resolve(&req.reference, &req.platform).await?;
        stages.done("resolve");
        // Whether the namespace shares its blobs is asked beside the pull (a read of its labels).
        let asking = Containerd::on(self.channel.clone(), &req.namespace);
        let (out, warning) = tokio::join!(self.run_with(req, full, &mut sess, &resolved, &mut cd, &node, &mut stages), Self::shareable_warning(&asking, &req.namespace));
        cd.end_lease().await;
        stages.done("end-lease");
        let mut out = out?;
        out.warnings.extend(warning);
        tracing::debug!(namespace = %req.namespace, manifest = %out.manifest, op = if full { "pull" } else { "verify" }, stages = %stages, "stages took");
        Ok(out)
    }

    /// What containerd says of its node, asked again once `NODE_FACTS_TTL` has passed (a
    /// containerd upgraded or reconfigured under a running pullgate is read anew) and after a
    /// failed ask, which leaves every fact unknown for this pull: blobs read through containerd,
    /// the sharing policy found by trying, http servers with TLS settings read as 2.x reads them.
    async fn node_facts(&self, cd: &Containerd) -> containerd::NodeFacts {
        let known = self.node.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some((at, facts)) = &known {
            if at.elapsed() < NODE_FACTS_TTL {
                return facts.clone();
            }
        }
        let facts = match cd.node_facts().await {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(error = %e, "cannot ask containerd about its content store");
                return Default::default();
            }
        };
        if known.as_ref().is_none_or(|(_, k)| *k != facts) {
            match &facts.blobs {
                Some(b) => tracing::info!(path = %b.display(), "copies and hashes read blobs from their files in containerd's content store (through containerd when a file cannot be opened)"),
                None => tracing::info!("containerd names no local content store: copies and hashes read blobs through containerd"),
            }
            tracing::info!(shared = ?facts.shared, honours_shareable = facts.honours_shareable, http_with_tls = ?facts.http_with_tls, "containerd's content sharing policy, and its reading of http servers with TLS settings");
        }
        *self.node.lock().unwrap_or_else(|p| p.into_inner()) = Some((std::time::Instant::now(), facts.clone()));
        facts
    }

    /// pullgate's public namespace and the image's blobs pullgate established as public, when
    /// this node uses one: an isolated content store (content is not shared anyway otherwise)
    /// on containerd 1.7+ (1.6 ignores the shareable label), and the image has a public blob.
    /// The namespace is made shareable for the first such image, and again if its label went
    /// since; None (and a warning) if that fails.
    async fn public_placing(&self, cd: &Containerd, node: &containerd::NodeFacts, image: &Image) -> Result<Option<(&str, std::collections::HashSet<String>)>> {
        let Some(ns) = self.public_namespace.as_deref() else { return Ok(None) };
        if node.shared != Some(false) || !node.honours_shareable {
            return Ok(None);
        }
        let blobs = self.public_blobs(image)?;
        if blobs.is_empty() {
            return Ok(None);
        }
        match self.public_namespace_ready(cd, ns).await {
            Ok(()) => Ok(Some((ns, blobs))),
            Err(e) => {
                tracing::warn!(namespace = ns, error = %e, "pullgate's public namespace is not used: public blobs are copied like the others");
                Ok(None)
            }
        }
    }

    /// The public namespace may be shared. At each pull or verify of an image with a blob
    /// pullgate knows as public (under an isolated store on containerd 1.7+), everything it
    /// holds is checked to be public (a client with containerd's socket may have written there,
    /// labelled or not; the list grows with what it holds, at most the public blobs placed
    /// there in the last 24 hours); it is labelled shareable if it is not, and what it holds is
    /// looked at again (a write between the look and the label). Holding anything else, or
    /// when the check cannot be made, it is not shared: its label is taken away (the namespace
    /// is pullgate's by its config) and the pull copies public blobs like private ones.
    async fn public_namespace_ready(&self, cd: &Containerd, ns: &str) -> std::result::Result<(), PullError> {
        let there = cd.elsewhere(ns);
        let checked = async {
            self.held_only_public(&there).await?;
            // A pull dropped from here until the second look (a client gone, a CRI deadline)
            // would leave the label without it: the guard takes the label away then.
            let guard = UnshareOnDrop(Some(there.clone()));
            if there.make_shareable().await? {
                crate::crashpoint::stall("public.labelled").await;
                self.held_only_public(&there).await?;
                tracing::info!(namespace = ns, label = containerd::SHAREABLE_LABEL, "pullgate's public namespace labelled: everything it holds is public");
            }
            guard.disarm();
            Ok(())
        }
        .await;
        // (held_only_public took the label away itself if it found something not public.)
        if checked.as_ref().is_err_and(|e| !matches!(e, PullError::PublicNamespaceTaken { .. })) {
            let _ = there.make_unshareable().await;
        }
        checked
    }

    /// Everything namespace `there` holds is established as public; otherwise its shareable
    /// label is removed and the error names what is not.
    async fn held_only_public(&self, there: &Containerd) -> std::result::Result<(), PullError> {
        let held = there.all_content().await?;
        let unchecked: Vec<String> = {
            let known = self.public_checked.lock().unwrap_or_else(|p| p.into_inner());
            held.into_iter().filter(|d| !known.contains(d)).collect()
        };
        let (public, private) = self.snap.store().read(|tx| -> std::result::Result<_, StoreError> {
            let (mut public, mut private) = (Vec::new(), Vec::new());
            for d in unchecked {
                if ledger::served_anonymously(tx, &d)? { public.push(d) } else { private.push(d) }
            }
            Ok((public, private))
        })?;
        {
            let mut known = self.public_checked.lock().unwrap_or_else(|p| p.into_inner());
            if !public.is_empty() && known.len() + public.len() > MAX_PUBLIC_CHECKED {
                known.clear();
            }
            known.extend(public);
        }
        let Some(first) = private.first() else { return Ok(()) };
        let taken = PullError::PublicNamespaceTaken { namespace: there.namespace().to_string(), blobs: private.len(), first: first.clone() };
        if let Err(e) = there.make_unshareable().await {
            tracing::warn!(namespace = there.namespace(), error = %e, found = %taken, "cannot take the shareable label away from pullgate's public namespace, which holds blobs not established as public");
        }
        Err(taken)
    }

    /// A warning when the namespace is labelled shareable: containerd 1.7+ then lets every
    /// namespace read its blobs, whatever the content sharing policy, and pullgate cannot stop
    /// a client from setting the label.
    async fn shareable_warning(cd: &Containerd, namespace: &str) -> Option<String> {
        match cd.is_shareable().await {
            Ok(true) => Some(format!(
                "namespace {namespace} is labelled {}=true: containerd 1.7+ lets every namespace read its blobs, this image's included; \
                 remove the label to keep them to {namespace} (ctr namespaces label {namespace} {}=)",
                containerd::SHAREABLE_LABEL,
                containerd::SHAREABLE_LABEL
            )),
            Ok(false) => None,
            Err(e) => Some(format!("cannot tell whether namespace {namespace} shares its blobs: {e}")),
        }
    }

    /// A pull for pods refuses a checkpoint image: containerd 2.x restores it onto another image,
    /// which it pulls and names itself. Read from the decoded index and manifest, as containerd
    /// reads them.
    fn refuse_checkpoint(name: &str, resolved: &registry::Resolved) -> Result<()> {
        for f in resolved.index.iter().chain([&resolved.manifest]) {
            match crate::document::is_checkpoint(&f.bytes, &f.media_type) {
                Ok(false) => {}
                Ok(true) => {
                    return Err(PullError::BadImage {
                        image: name.to_string(),
                        reason: "it is a checkpoint image (containerd 2.x restores it onto another image, which it pulls itself): not pulled for pods".into(),
                    })
                }
                Err(e) => return Err(PullError::BadImage { image: name.to_string(), reason: format!("{} {}: {e}", f.media_type, f.digest) }),
            }
        }
        Ok(())
    }

    /// The stages of one pull or verify, in order. Nothing is written before every fact the
    /// grant rests on was established by pullgate itself.
    #[allow(clippy::too_many_arguments)]
    async fn run_with(
        &self,
        req: &Request,
        full: bool,
        sess: &mut Session,
        resolved: &registry::Resolved,
        cd: &mut Containerd,
        node: &containerd::NodeFacts,
        stages: &mut Stages,
    ) -> Result<Outcome> {
        let image = Image::of(req, resolved, sess)?;
        req.progress.iter().for_each(|p| p.announce(image.all().map(|b| (b.digest.as_str(), b.size))));
        if req.for_pods {
            Self::refuse_checkpoint(&image.name, resolved)?;
        }
        let identity = self.key.identity(&req.reference.host, req.cred.as_ref());
        let mut out = Outcome { manifest: resolved.manifest.digest.clone(), identity: identity.clone(), config: image.config.digest.clone(), ..Default::default() };
        let facts = self.facts(&image, &out.manifest, sess.verified(), !sess.has_credential())?;
        // Where the blobs came from, and for whom: set on each blob with the commit that puts it
        // in the namespace (download, copy, adoption), else by `label` once the grant stands.
        let who = HashMap::from([(format!("{ORIGIN_LABEL_PREFIX}{}", image.origin), short(&identity))]);
        let public = self.public_placing(cd, node, &image).await?;
        let placing = Placing { who: &who, shared: node.shared, public };
        let mut got = self.gather(&image, &facts, full, sess, resolved, cd, &placing).await?;
        stages.done("gather");
        out.downloaded = std::mem::take(&mut got.downloaded);
        crate::crashpoint::hit("pull.fetched");
        let diff_ids = self.check_claims(&image, &facts, &got, cd).await?;
        let public = self.probe_public(&image, &diff_ids, &identity, sess).await;
        stages.done("check");
        let (present, recorded) = tokio::join!(
            async {
                match got.present_later {
                    true => cd.present_labelled(&image.digests()).await.map(Some),
                    false => Ok(None),
                }
            },
            self.record(req, &image, &got, &diff_ids, &public, &out.manifest, &identity)
        );
        recorded?;
        if let Some(p) = present? {
            got.present.clear();
            got.found_present(&image.digests(), p, &who);
        }
        stages.done("record");
        // What is copied is written under the pull's lease (a verify begins one to copy).
        if !got.to_copy.is_empty() && !cd.has_lease() {
            cd.begin_lease((!full).then_some(out.manifest.as_str())).await?;
        }
        if !full {
            self.place(&mut got, sess, cd, &placing, req.progress.as_deref(), HashMap::new()).await?;
            stages.done("place");
            self.placed(req, &image, &identity, &mut got, &mut out);
            self.label(&image, &got, &who, cd).await?;
            stages.done("label");
            out.held_until = self.hold(&image, &got, &out.manifest, cd).await;
            return Ok(out);
        }
        // A pull copies, adopts and unpacks together: the unpack waits for a layer's copy or
        // adoption only when it must apply the layer after all (its chain is not held), and
        // the config's before its GC labels are set.
        let deferred = std::mem::take(&mut got.deferred);
        let (adopting, mut ready) = Self::adopt_beside(&deferred, cd, &who);
        let (copied, copying) = Self::outcome_channels(got.to_copy.iter().map(|(b, _, _)| b.digest.clone()));
        ready.extend(copying);
        let (cd, shared_sess) = (&*cd, &*sess);
        let (placed, adopted, done) = tokio::join!(
            async {
                let began = std::time::Instant::now();
                self.place(&mut got, shared_sess, cd, &placing, req.progress.as_deref(), copied).await?;
                self.label(&image, &got, &who, cd).await?;
                crate::crashpoint::hit("pull.labelled");
                Ok::<_, PullError>(began.elapsed())
            },
            adopting,
            async {
                let target = self.store_manifest(&image, resolved, &who, req.for_pods, cd).await?;
                stages.done("store");
                self.unpack(req, &image, &diff_ids, cd, shared_sess, &who, &mut ready, &mut out).await?;
                stages.done("unpack");
                // (Still to be told unless a layer of the same digest was waited for.)
                if let Some(config) = ready.remove(&image.config.digest) {
                    let _ = config.await;
                }
                self.label_config(&image, &diff_ids, &who, cd).await?;
                Ok::<_, PullError>(target)
            }
        );
        stages.beside("place", placed?);
        self.placed(req, &image, &identity, &mut got, &mut out);
        let (target, missed) = (done?, adopted?);
        // A layer containerd no longer had to adopt (and the unpack did not need) comes from
        // the origin, as it would have without the wait, before any image record names it.
        for b in deferred.iter().filter(|b| missed.contains(&b.digest)) {
            if Self::fetch_if_missing(sess, cd, b, &who).await? {
                out.downloaded.push(b.digest.clone());
            }
        }
        cd.put_image(&image.name, target.clone(), req.image_labels.clone()).await?;
        for name in &req.extra_names {
            let name = name.replace("{digest}", &target.digest).replace("{config}", &image.config.digest);
            cd.put_image(&name, target.clone(), req.image_labels.clone()).await?;
        }
        out.target = Some(target);
        stages.done("images");
        Ok(out)
    }

    /// Adopts `blobs` into the namespace together, once per digest, each with the labels
    /// `who`: each adoption is a metadata transaction of containerd's, and their round-trips
    /// overlap. Each runs to its end, an error or not (none is left half-done); returns per
    /// digest whether the namespace now holds it, or the first error.
    async fn adopt_together<'b>(cd: &Containerd, blobs: impl IntoIterator<Item = &'b Blob>, who: &HashMap<String, String>) -> Result<HashMap<&'b str, bool>> {
        let mut once: HashMap<&str, &Blob> = HashMap::new();
        for b in blobs {
            once.entry(b.digest.as_str()).or_insert(b);
        }
        let adoptions = once.into_values().map(|b| async move { cd.adopt_content(&b.digest, b.size, who).await.map(|a| (b.digest.as_str(), a)) });
        Ok(futures_util::future::join_all(adoptions).await.into_iter().collect::<std::result::Result<_, _>>()?)
    }

    /// Per digest, a sender a placing job tells its outcome by (true: the namespace holds the
    /// blob) and the receiver the unpack waits on.
    #[allow(clippy::type_complexity)]
    fn outcome_channels(digests: impl Iterator<Item = String>) -> (HashMap<String, tokio::sync::oneshot::Sender<bool>>, HashMap<String, tokio::sync::oneshot::Receiver<bool>>) {
        let (mut told, mut ready) = (HashMap::new(), HashMap::new());
        for d in digests {
            let (tx, rx) = tokio::sync::oneshot::channel();
            told.insert(d.clone(), tx);
            ready.insert(d, rx);
        }
        (told, ready)
    }

    /// Once `place` is done: what it placed goes into the outcome, the namespace is remembered
    /// as holding the blobs, and the grant is logged.
    fn placed(&self, req: &Request, image: &Image, identity: &str, got: &mut Gathered, out: &mut Outcome) {
        self.remember_holder(&req.namespace, &got.present);
        out.downloaded.append(&mut got.downloaded);
        out.copied = got.copied.clone();
        out.public = got.from_public.clone();
        tracing::info!(namespace = %req.namespace, principal = %req.principal, origin = %image.origin, manifest = %out.manifest,
            identity = %short(identity), downloaded = out.downloaded.len(), "grant recorded");
    }

    /// Adopts `blobs` into the namespace (a shared content store) together, each with its
    /// origin labels; returns that work and, per blob, where its outcome is told (true: the
    /// namespace holds it). The work's own answer lists the blobs containerd no longer had, or
    /// fails as the first failed adoption did (as an adoption before the grant would).
    #[allow(clippy::type_complexity)]
    fn adopt_beside<'a>(
        blobs: &'a [Blob],
        cd: &'a Containerd,
        who: &'a HashMap<String, String>,
    ) -> (impl std::future::Future<Output = Result<Vec<String>>> + 'a, HashMap<String, tokio::sync::oneshot::Receiver<bool>>) {
        let (mut told, ready) = Self::outcome_channels(blobs.iter().map(|b| b.digest.clone()));
        let mut jobs = Vec::new();
        for b in blobs {
            let tx = told.remove(&b.digest);
            jobs.push(async move {
                let adopted = cd.adopt_content(&b.digest, b.size, who).await;
                if let Some(tx) = tx {
                    let _ = tx.send(matches!(adopted, Ok(true)));
                }
                adopted.map(|a| (!a).then(|| b.digest.clone()))
            });
        }
        let work = async move {
            let mut missed = Vec::new();
            for r in futures_util::future::join_all(jobs).await {
                missed.extend(r?);
            }
            Ok(missed)
        };
        (work, ready)
    }

    /// A layer adopted beside the unpack that the namespace still lacks: fetched from the
    /// origin and kept (labelled `who`). True when it was fetched.
    async fn fetch_if_missing(sess: &mut Session, cd: &Containerd, b: &Blob, who: &HashMap<String, String>) -> Result<bool> {
        if cd.has_content(&b.digest).await? {
            return Ok(false);
        }
        Self::fetch(sess, cd, b, true, false, who, &Default::default()).await?;
        Ok(true)
    }

    /// What the ledger already knows of the image's blobs, read once. At an endpoint whose
    /// identity nothing checks (`verified` false: plain http, or https without verifying the
    /// certificate) what answered there before may not be what answers now: no blob counts as
    /// served there, so each is downloaded from it again in this session. Without a credential
    /// (`anonymous`) only what the origin served without one counts: what it served to a
    /// credential says nothing of what it serves to anyone.
    fn facts(&self, image: &Image, manifest: &str, verified: bool, anonymous: bool) -> Result<Facts> {
        Ok(self.snap.store().read(|tx| -> std::result::Result<Facts, StoreError> {
            let known = ledger::manifest(tx, manifest)?.filter(|m| m.diff_ids.len() == image.layers.len());
            let served_at = |b: &Blob| -> std::result::Result<bool, StoreError> {
                let served = ledger::blob_origin(tx, &b.digest, &image.origin)?;
                Ok(verified && served.is_some_and(|o| !anonymous || o.identities.contains(ANONYMOUS)))
            };
            let served = image.all().map(served_at).collect::<std::result::Result<_, _>>()?;
            let paired = image.layers.iter().map(|b| ledger::pairing(tx, &b.digest)).collect::<std::result::Result<_, _>>()?;
            Ok(Facts { known, served, paired })
        })?)
    }

    /// Makes sure the origin itself served every blob (downloading what it never served, or on
    /// the same endpoint asking with an authenticated HEAD), adopts by digest what a shared
    /// content store lets the namespace adopt, finds in other namespaces what an isolated store
    /// does not (copied by `place` once the grant stands), fetches what a pull still lacks and
    /// the node does not hold, and hashes every layer blob pullgate has not paired yet: while it
    /// downloads, or read back from containerd's content store when the bytes are on the node.
    #[allow(clippy::too_many_arguments)]
    async fn gather(
        &self,
        image: &Image,
        facts: &Facts,
        full: bool,
        sess: &mut Session,
        resolved: &registry::Resolved,
        cd: &mut Containerd,
        placing: &Placing<'_>,
    ) -> Result<Gathered> {
        let who = placing.who;
        let mut got = Gathered::default();
        let needs_hash = |i: usize| i > 0 && facts.paired[i - 1].is_none();
        let digests = image.digests();
        // A verify of a manifest whose blobs this origin all served, and pullgate all paired,
        // reads no content: it only places what the namespace lacks (below, and in `place`).
        got.needs_content = full || facts.known.is_none() || facts.served.iter().any(|s| !s) || facts.paired.iter().any(Option::is_none);
        if got.needs_content {
            // A verify's lease may stay behind, holding what it placed for the namespace's
            // next pull or run.
            cd.begin_lease((!full).then_some(resolved.manifest.digest.as_str())).await?;
            // What is present is held, then looked for again: what is still present stays so
            // (containerd's GC may take a blob between the two looks). What is written later
            // is held by being written under the lease.
            let mut all = digests.clone();
            all.push(&resolved.manifest.digest);
            all.extend(resolved.index.as_ref().map(|i| i.digest.as_str()));
            let found = cd.present(&all).await?;
            let found: Vec<&str> = all.iter().copied().filter(|d| found.contains(*d)).collect();
            if !found.is_empty() {
                cd.hold_content(&found).await?;
                let still = cd.present_labelled(&found).await?;
                got.found_present(&digests, still, who);
            }
        } else if placing.shared == Some(true) {
            // A verify under a shared store places nothing, whatever the namespace holds: what it
            // holds is asked beside the ledger's commit (`record`), for the labels and the hold.
            got.present_later = true;
        } else {
            let found = cd.present_labelled(&digests).await?;
            got.found_present(&digests, found, who);
        }
        let cd = &*cd;
        let mut jobs: Vec<Job> = Vec::new();
        // (blob, namespace holding it) to hash from the node's content.
        let mut from_store: Vec<(Blob, Option<String>)> = Vec::new();
        // Other namespaces' content, looked up once and only when a blob is missing here.
        let mut elsewhere: Option<HashMap<String, String>> = None;
        // Whether containerd lets this namespace adopt blobs by digest (a shared content store),
        // as the first attempt showed: under an isolated store the others are copied without
        // trying; under a shared one a verify leaves the rest to containerd, which lets the
        // namespace take them by digest on its own.
        let mut shared: Option<bool> = placing.shared;
        // Public blobs the namespace lacks that pullgate's public namespace holds: adopted
        // from there (containerd lets every namespace read a shareable namespace's blobs).
        let in_public = match &placing.public {
            Some((ns, public)) => {
                let wanted: Vec<&str> = digests.iter().copied().filter(|d| public.contains(*d) && !got.present.contains(*d)).collect();
                cd.elsewhere(ns).present(&wanted).await?
            }
            None => Default::default(),
        };
        // Those this origin served are adopted from there together.
        let served_public = image.all().zip(&facts.served).filter(|(b, served)| **served && in_public.contains(&b.digest) && !got.present.contains(&b.digest));
        let adopted_public = Self::adopt_together(cd, served_public.map(|(b, _)| b), who).await?;
        // Under a shared store (containerd says so), a pull adopts the blobs this origin served
        // together rather than one after another: each is a metadata transaction of
        // containerd's, and their round-trips overlap. A blob containerd no longer has is left
        // to the loop below (fetched).
        if got.needs_content && shared == Some(true) {
            let mut wanted: Vec<&Blob> = image.all().zip(&facts.served).filter(|(b, served)| **served && !got.present.contains(&b.digest)).map(|(b, _)| b).collect();
            // A pull of a manifest pullgate recorded, whose layers it paired and whose chains it
            // holds unpacked: nothing before the grant reads those layers' bytes, and the unpack
            // adopts the chains, so they are adopted beside the unpack (`adopt_beside`), which
            // waits for a layer only if it must apply it after all. (A layer whose chain is not
            // held is needed by the unpack: it is gathered now, with the others' downloads.)
            if let (true, Some(known)) = (full, &facts.known) {
                let held = self.snap.holds_own_chains(&ledger::chain_ids(&known.diff_ids))?;
                let (later, now): (Vec<&Blob>, Vec<&Blob>) = wanted.into_iter().partition(|b| {
                    b.digest != image.config.digest
                        && image.layers.iter().position(|l| l.digest == b.digest).is_some_and(|i| facts.paired[i].is_some() && held.get(i) == Some(&true))
                });
                got.deferred = later.into_iter().cloned().collect();
                wanted = now;
            }
            for (digest, _) in Self::adopt_together(cd, wanted, who).await?.into_iter().filter(|(_, adopted)| *adopted) {
                got.present.insert(digest.to_string());
                got.labelled.insert(digest.to_string());
            }
        }
        for (i, (b, served_here)) in image.all().zip(facts.served.iter().copied()).enumerate() {
            if got.deferred.iter().any(|d| d.digest == b.digest) {
                continue;
            }
            let in_ns = got.present.contains(&b.digest);
            let need_content = full || (i == 0 && facts.known.is_none());
            let hash = needs_hash(i);
            // This origin served the bytes before, or — at the same verified endpoint — an
            // authenticated HEAD at this repository stands in for a download. Without a
            // credential a HEAD stands in for nothing: what is served without one is public,
            // and public means pullgate received the bytes so.
            let head_vouches = sess.verified() && sess.has_credential() && self.same_endpoint_served(&b.digest, sess.endpoint())?;
            let vouched = served_here || (head_vouches && sess.blob_exists(&b.digest).await?);
            if vouched {
                // The namespace is entitled to these bytes: the origin accepted its credential
                // for a manifest naming them, and served them.
                let from_public = !in_ns
                    && in_public.contains(&b.digest)
                    && match adopted_public.get(b.digest.as_str()) {
                        Some(adopted) => *adopted,
                        None => cd.adopt_content(&b.digest, b.size, who).await?,
                    };
                let tried = !in_ns && !from_public && shared != Some(false) && (got.needs_content || shared.is_none());
                let adopted = tried && cd.adopt_content(&b.digest, b.size, who).await?;
                if adopted {
                    shared = Some(true);
                }
                if adopted || from_public {
                    got.labelled.insert(b.digest.clone());
                }
                if from_public {
                    got.from_public.push(b.digest.clone());
                }
                if in_ns || adopted || from_public {
                    got.present.insert(b.digest.clone());
                    if hash {
                        from_store.push((b.clone(), None));
                    }
                } else if !got.needs_content && shared == Some(true) {
                    // A verify under a shared store: nothing to place.
                } else {
                    if elsewhere.is_none() {
                        elsewhere = Some(cd.holders_elsewhere(&digests, &self.holder_hints(&digests)).await?);
                    }
                    match elsewhere.as_ref().and_then(|h| h.get(&b.digest)) {
                        Some(from) => {
                            // On the node, yet not adoptable: an isolated store.
                            if tried {
                                shared = Some(false);
                            }
                            got.to_copy.push((b.clone(), from.clone(), need_content));
                            if hash {
                                from_store.push((b.clone(), Some(from.clone())));
                            }
                        }
                        None if need_content || hash => jobs.push(Job::Fetch { blob: b.clone(), keep: need_content, hash }),
                        None => {}
                    }
                }
            } else if in_ns || cd.adopt_content(&b.digest, b.size, &HashMap::new()).await? {
                // containerd holds the bytes, but this origin never served them: fetch them from
                // it and compare, rather than trust a manifest that merely names them.
                got.present.insert(b.digest.clone());
                jobs.push(Job::Fetch { blob: b.clone(), keep: false, hash });
            } else {
                jobs.push(Job::Fetch { blob: b.clone(), keep: true, hash });
            }
            if !served_here {
                got.newly_served.push(b.digest.clone());
            }
        }
        let done = Job::run_all(jobs, sess, cd, who, FETCH_CONCURRENCY, &got.budget).await;
        for d in done {
            got.took(d?);
        }
        for (b, holder) in from_store {
            let hashed = match &holder {
                None => Self::hash_from_store(cd, &b.digest, b.size, &got.budget).await,
                Some(ns) => Self::hash_from_store(&cd.elsewhere(ns), &b.digest, b.size, &got.budget).await,
            };
            match hashed {
                Ok(v) => got.verified.push(v),
                Err(e) if holder.is_some() => {
                    tracing::warn!(digest = %b.digest, error = %e, "cannot read the blob in another namespace; fetching it from the origin");
                    got.fetch_instead(b, true, sess, cd, who).await?;
                }
                Err(e) => return Err(e),
            }
        }
        // The config of a manifest pullgate never recorded is read for the layer IDs it claims
        // (`check_claims`) before the grant stands, so before `place` could copy it: it is read
        // where it is now.
        if facts.known.is_none() {
            if let Some((b, holder, _)) = got.to_copy.iter().find(|(b, _, _)| b.digest == image.config.digest).cloned() {
                match cd.elsewhere(&holder).read_content(&b.digest, MAX_MANIFEST).await {
                    Ok(bytes) => got.config = Some(bytes),
                    Err(e) => {
                        tracing::warn!(digest = %b.digest, error = %e, "cannot read the config in another namespace; fetching it from the origin");
                        got.fetch_instead(b, false, sess, cd, who).await?;
                    }
                }
            }
        }
        Ok(got)
    }

    /// Once the grant stands: copies into the namespace the blobs it is entitled to that other
    /// namespaces hold (an isolated content store), reading them there and writing them here
    /// with the expected digest, which containerd checks; a blob whose copy fails comes from
    /// the origin instead when the pull needs it. A pull or verify refused before this copies
    /// nothing. `told` hears, per blob, whether the namespace holds it, as each copy ends.
    #[allow(clippy::too_many_arguments)]
    async fn place(
        &self,
        got: &mut Gathered,
        sess: &Session,
        cd: &Containerd,
        placing: &Placing<'_>,
        progress: Option<&crate::progress::Progress>,
        mut told: HashMap<String, tokio::sync::oneshot::Sender<bool>>,
    ) -> Result<()> {
        if got.to_copy.is_empty() {
            return Ok(());
        }
        // Public blobs are copied once, into pullgate's public namespace (under a lease of
        // its own there), and adopted from there: the next namespace adopts them without a copy.
        let mut public_cd = None;
        if let Some((ns, public)) = &placing.public {
            if got.to_copy.iter().any(|(b, _, _)| public.contains(&b.digest)) {
                let mut p = cd.elsewhere(ns);
                match p.begin_public_lease().await {
                    Ok(()) => public_cd = Some((p, public)),
                    Err(e) => tracing::warn!(namespace = %ns, error = %e, "cannot hold blobs in pullgate's public namespace: copying them into the namespace instead"),
                }
            }
        }
        let jobs = std::mem::take(&mut got.to_copy).into_iter().map(|(blob, from, keep)| {
            let publish = public_cd.as_ref().filter(|(_, public)| public.contains(&blob.digest)).map(|(p, _)| p.clone());
            Job::Copy { blob, from, keep, publish }
        });
        let budget = got.budget.clone();
        let mut done = Job::stream(jobs, sess, cd, placing.who, COPY_CONCURRENCY, &budget);
        let mut failed = None;
        while let Some((digest, d)) = done.next().await {
            // Whether the namespace now holds the blob is told at once (a failed job's
            // receiver sees its sender dropped).
            let held = matches!(d, Ok(Done::Copied(_)) | Ok(Done::Fetched { keep: true, .. }));
            if let Some(tx) = told.remove(&digest) {
                let _ = tx.send(held);
            }
            match d {
                Ok(d) => {
                    if let (Done::Copied(digest), Some(p)) = (&d, progress) {
                        p.copied(digest);
                    }
                    got.took(d);
                }
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// The layer IDs the image claims (from its recorded manifest, or its config), each checked
    /// against the layer ID pullgate computed from that blob's bytes.
    async fn check_claims(&self, image: &Image, facts: &Facts, got: &Gathered, cd: &Containerd) -> Result<Vec<String>> {
        let bad = |reason: String| PullError::BadImage { image: image.name.clone(), reason };
        let claimed: Vec<String> = match &facts.known {
            Some(m) => m.diff_ids.clone(),
            None => {
                // (Read by `gather` when it is in another namespace only.)
                let cfg_bytes = match &got.config {
                    Some(bytes) => bytes.clone(),
                    None => cd.read_content(&image.config.digest, MAX_MANIFEST).await?,
                };
                if registry::sha256_digest(&cfg_bytes) != image.config.digest {
                    return Err(bad(format!("config {} in the content store does not match its digest", image.config.digest)));
                }
                let image_cfg = crate::document::config(&cfg_bytes).map_err(|e| bad(e.to_string()))?;
                image_cfg.rootfs().diff_ids().to_vec()
            }
        };
        if claimed.len() != image.layers.len() || !claimed.iter().all(|d| crate::reference::is_digest(d)) {
            return Err(bad(format!("config lists {} diffIDs for {} layers", claimed.len(), image.layers.len())));
        }
        for ((b, claim), known) in image.layers.iter().zip(&claimed).zip(&facts.paired) {
            let actual = known.clone().or_else(|| got.verified.iter().find(|v| v.blob() == b.digest).map(|v| v.diff_id().to_string()));
            match actual {
                Some(a) if &a == claim => {}
                Some(a) => return Err(PullError::ForgedLayer { image: image.name.clone(), blob: b.digest.clone(), claimed: claim.clone(), actual: a }),
                None => return Err(bad(format!("layer {} was not hashed", b.digest))),
            }
        }
        Ok(claimed)
    }

    /// Which layers an anonymous client can read at the origin (public), when asked to probe.
    async fn probe_public(&self, image: &Image, diff_ids: &[String], identity: &str, sess: &Session) -> Vec<String> {
        let mut public = Vec::new();
        if self.probe_anonymous && identity != ANONYMOUS {
            for (b, d) in image.layers.iter().zip(diff_ids) {
                if sess.anonymous_serves(&b.digest, b.size).await {
                    public.push(d.clone());
                }
            }
        }
        public
    }

    /// Writes the grant and what this pull established (pairings, origins, the manifest, the
    /// public blobs) in one fsync'd ledger commit, on the blocking pool: the commit must not
    /// hold a runtime worker, or the containerd request `run_with` sends beside it waits for it.
    /// Once begun, the commit completes even if the caller goes away (a client that left, a
    /// CRI deadline): the state is then that of a pullgate stopped right after its commit
    /// (`tests/crash.sh`, point `pull.granted`), which the namespace's next pull or verify completes.
    #[allow(clippy::too_many_arguments)]
    async fn record(&self, req: &Request, image: &Image, got: &Gathered, diff_ids: &[String], public: &[String], manifest: &str, identity: &str) -> Result<()> {
        let now = now_nanos();
        let rec = ManifestRec {
            config: image.config.digest.clone(),
            layers: image.layers.iter().map(|b| b.digest.clone()).collect(),
            diff_ids: diff_ids.to_vec(),
            origins: BTreeSet::from([image.origin.clone()]),
            names: BTreeSet::from([ledger::name_entry(&image.origin, &image.name)]),
        };
        let (snap, verified, served, public) = (self.snap.clone(), got.verified.clone(), got.newly_served.clone(), public.to_vec());
        let (ns, principal, origin, manifest, identity) =
            (req.namespace.clone(), req.principal.clone(), image.origin.clone(), manifest.to_string(), identity.to_string());
        let write = move || {
            snap.store().write(|tx| -> std::result::Result<(), LedgerError> {
                for v in &verified {
                    ledger::record_pairing(tx, v)?;
                }
                for d in &served {
                    ledger::record_blob(tx, d, &origin, &identity, now)?;
                }
                ledger::record_manifest(tx, &manifest, &rec)?;
                if identity == ANONYMOUS {
                    ledger::record_manifest_served_anonymously(tx, &manifest, &origin, now)?;
                }
                for d in &public {
                    ledger::mark_public(tx, d)?;
                }
                ledger::put_grant(tx, &ns, &principal, &origin, &manifest, &identity, now)?;
                crate::crashpoint::hit("ledger.grant-staged");
                Ok(())
            })
        };
        match tokio::task::spawn_blocking(write).await {
            Ok(r) => r?,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => return Err(StoreError::Db(redb::Error::Io(std::io::Error::other(format!("the ledger's commit did not run: {e}")))).into()),
        }
        crate::crashpoint::hit("pull.granted");
        Ok(())
    }

    /// Labels in the namespace's content store: where the blobs came from, and for whom (a
    /// copied blob got them with its commit).
    async fn label(&self, image: &Image, got: &Gathered, who: &HashMap<String, String>, cd: &Containerd) -> Result<()> {
        for b in image.all().filter(|b| got.present.contains(&b.digest) && !got.labelled.contains(&b.digest)) {
            match cd.label_content(&b.digest, who).await {
                // A verify that placed nothing holds no lease: containerd's GC may have just
                // taken a blob no image referenced. The labels only describe; the grant stands.
                // So too when the blobs found present were not held (a verify that needed no
                // content, whose lease `place` began only to copy what was missing): seen when a
                // client's refused unpack had left the blobs to containerd's GC (nerdctl pull).
                Err(e) if (!cd.has_lease() || !got.needs_content) && e.code == tonic::Code::NotFound => {
                    tracing::debug!(digest = %b.digest, "blob collected before it could be labelled");
                }
                r => r?,
            }
        }
        Ok(())
    }

    /// After a verify: the blobs it placed in the namespace stay there, under its lease, until
    /// the lease expires (an image record of the namespace's next pull or run then holds them),
    /// and the namespace's earlier holds for the same manifest go. A verify that placed nothing
    /// renews an earlier verify's hold on the manifest, if there is one: a new hold on what the
    /// namespace has of the image replaces it. Returns when the hold ends.
    async fn hold(&self, image: &Image, got: &Gathered, manifest: &str, cd: &mut Containerd) -> Option<String> {
        let present: Vec<&str> = image.all().map(|b| b.digest.as_str()).filter(|d| got.present.contains(*d)).collect();
        if present.is_empty() {
            return None;
        }
        if !cd.has_lease() {
            if cd.holds(manifest).await.map_or(true, |h| h.is_empty()) {
                return None;
            }
            // Renewal is a convenience: if it fails, the earlier hold stands until it expires.
            let renewed = match cd.begin_lease(Some(manifest)).await {
                Ok(()) => cd.hold_content(&present).await,
                Err(e) => Err(e),
            };
            if let Err(e) = renewed {
                tracing::warn!(manifest, error = %e, "cannot renew the verify's hold");
                cd.end_lease().await;
                return None;
            }
        }
        let lease = cd.keep_lease()?;
        cd.drop_holds(manifest, &lease).await;
        Some(humantime::format_rfc3339_seconds(std::time::SystemTime::now() + containerd::HOLD_FOR).to_string())
    }

    /// Manifest (and index) content with containerd's GC references; returns what the image
    /// record points at.
    async fn store_manifest(&self, image: &Image, resolved: &registry::Resolved, who: &HashMap<String, String>, for_pods: bool, cd: &Containerd) -> Result<Descriptor> {
        let mut mlabels = who.clone();
        mlabels.insert("containerd.io/gc.ref.content.config".into(), image.config.digest.clone());
        for (i, b) in image.layers.iter().enumerate() {
            mlabels.insert(format!("containerd.io/gc.ref.content.l.{i}"), b.digest.clone());
        }
        cd.write_bytes(&resolved.manifest.digest, &resolved.manifest.bytes, mlabels).await?;
        let mut target = Descriptor {
            media_type: resolved.manifest.media_type.clone(),
            digest: resolved.manifest.digest.clone(),
            size: resolved.manifest.bytes.len() as i64,
            annotations: HashMap::new(),
        };
        if let Some(idx) = resolved.index.as_ref().filter(|_| !for_pods) {
            let mut ilabels = who.clone();
            ilabels.insert("containerd.io/gc.ref.content.m.0".into(), resolved.manifest.digest.clone());
            cd.write_bytes(&idx.digest, &idx.bytes, ilabels).await?;
            target = Descriptor { media_type: idx.media_type.clone(), digest: idx.digest.clone(), size: idx.bytes.len() as i64, annotations: HashMap::new() };
        }
        Ok(target)
    }

    /// The config's GC reference to the image's top chain (the config is in the namespace).
    async fn label_config(&self, image: &Image, diff_ids: &[String], who: &HashMap<String, String>, cd: &Containerd) -> Result<()> {
        let top = ledger::chain_ids(diff_ids).last().cloned().unwrap_or_default();
        let mut clabels = who.clone();
        clabels.insert(format!("containerd.io/gc.ref.snapshot.{}", self.snapshotter_name), top);
        Ok(cd.label_content(&image.config.digest, &clabels).await?)
    }

    /// Unpacks into pullgate through containerd (the gate sees these Prepares). Each step is
    /// registered as pullgate's own, so that, once its applied layer matches the blob's verified
    /// layer ID, the snapshotter records the committed chain as one other namespaces may adopt.
    #[allow(clippy::too_many_arguments)]
    async fn unpack(
        &self,
        req: &Request,
        image: &Image,
        diff_ids: &[String],
        cd: &Containerd,
        sess: &Session,
        who: &HashMap<String, String>,
        ready: &mut HashMap<String, tokio::sync::oneshot::Receiver<bool>>,
        out: &mut Outcome,
    ) -> Result<()> {
        let sn = &self.snapshotter_name;
        let chains = ledger::chain_ids(diff_ids);
        // The image's own chain found here (held, then looked for again) is all there is to do:
        // containerd keeps no snapshot without its parent, and the lease holding the top keeps
        // its parents from GC. One look instead of three per layer.
        if let Some(top) = chains.last() {
            if Self::held_here(cd, sn, top).await? {
                return Ok(());
            }
        }
        // Once a chain is missing here, so is every chain above it (containerd keeps no
        // snapshot without its parent): they are not looked for.
        let mut missing = false;
        for (i, b) in image.layers.iter().enumerate() {
            let chain = &chains[i];
            // A chain found here is held, then looked for again: it stays until the image holds
            // it. One made below is made under the lease.
            if !missing && Self::held_here(cd, sn, chain).await? {
                continue;
            }
            missing = true;
            let parent = if i == 0 { "" } else { chains[i - 1].as_str() };
            let labels = HashMap::from([(SNAPSHOT_REF_LABEL.to_string(), chain.clone())]);
            let key = format!("extract-{} {chain}", uuid::Uuid::new_v4().simple());
            let own = self.snap.begin_own_extraction(&req.namespace, &key, chain, parent);
            let Some(mounts) = cd.prepare(sn, &key, parent, labels.clone()).await? else {
                out.adopted += 1;
                continue;
            };
            // A layer still being adopted beside the unpack is waited for; one not adopted is
            // fetched from the origin first (the apply reads it in the namespace).
            if let Some(rx) = ready.remove(&b.digest) {
                if !rx.await.unwrap_or(false) {
                    match Self::fetch_if_missing(&mut sess.clone(), cd, b, who).await {
                        Ok(true) => out.downloaded.push(b.digest.clone()),
                        Ok(false) => {}
                        Err(e) => {
                            cd.remove_snapshot(sn, &key).await;
                            return Err(e);
                        }
                    }
                }
            }
            let desc = Descriptor { media_type: b.media_type.clone(), digest: b.digest.clone(), size: b.size as i64, annotations: HashMap::new() };
            let applied = match cd.apply(desc, mounts).await {
                Ok(a) => a,
                Err(e) => {
                    cd.remove_snapshot(sn, &key).await;
                    return Err(e.into());
                }
            };
            if applied != diff_ids[i] {
                cd.remove_snapshot(sn, &key).await;
                return Err(PullError::BadImage { image: image.name.clone(), reason: format!("layer {} unpacks to {applied}, not to its layer ID {}", b.digest, diff_ids[i]) });
            }
            own.applied();
            match cd.commit(sn, chain, &key, labels).await {
                Ok(()) => {
                    out.extracted += 1;
                    crate::crashpoint::hit("pull.layer-committed");
                }
                // A concurrent unpack of the same chain in this namespace committed first: its
                // snapshot is the same layer, so ours is dropped, as containerd's unpacker does.
                Err(e) if e.code == tonic::Code::AlreadyExists => cd.remove_snapshot(sn, &key).await,
                Err(e) => {
                    cd.remove_snapshot(sn, &key).await;
                    return Err(e.into());
                }
            }
        }
        Ok(())
    }

    /// Whether `chain` is a snapshot of the namespace that stays: found, put under the pull's
    /// lease, then found again (GC may take it between the first look and the hold).
    async fn held_here(cd: &Containerd, sn: &str, chain: &str) -> Result<bool> {
        Ok(cd.snapshot_exists(sn, chain).await? && {
            cd.hold_snapshot(sn, chain).await?;
            cd.snapshot_exists(sn, chain).await?
        })
    }

    /// The image's blobs pullgate established as public: these very bytes were served by an
    /// origin to pullgate without credentials. Not a blob of a public layer: another
    /// compression of a public layer may carry private bytes in its framing (a gzip header's
    /// name, comment or extra field). A registry's or image's word plays no part.
    fn public_blobs(&self, image: &Image) -> Result<std::collections::HashSet<String>> {
        Ok(self.snap.store().read(|tx| -> std::result::Result<_, StoreError> {
            let mut out = std::collections::HashSet::new();
            for b in image.all() {
                if ledger::served_anonymously(tx, &b.digest)? {
                    out.insert(b.digest.clone());
                }
            }
            Ok(out)
        })?)
    }


    /// For blobs the namespace lacks: the namespace where pullgate last saw each, looked at
    /// first (a hint: containerd is asked, and every namespace only if it does not hold them).
    fn holder_hints(&self, digests: &[&str]) -> HashMap<String, String> {
        let holders = self.holders.lock().unwrap_or_else(|p| p.into_inner());
        digests.iter().filter_map(|d| holders.get(*d).map(|ns| (d.to_string(), ns.clone()))).collect()
    }

    /// Remembers that `namespace` holds these blobs (for `holder_hints`); bounded.
    fn remember_holder(&self, namespace: &str, digests: &std::collections::HashSet<String>) {
        let mut holders = self.holders.lock().unwrap_or_else(|p| p.into_inner());
        if holders.len() + digests.len() > MAX_HOLDER_HINTS {
            holders.clear();
        }
        for d in digests {
            holders.insert(d.clone(), namespace.to_string());
        }
    }

    /// Whether another repository at this endpoint served the blob's bytes.
    fn same_endpoint_served(&self, digest: &str, endpoint: &str) -> Result<bool> {
        let origins = self.snap.store().read(|tx| ledger::blob_origins(tx, digest))?;
        Ok(origins.iter().any(|(o, _)| registry::origin_endpoint(o) == endpoint))
    }

    /// Streams one blob from the origin (checked against its digest) into the content store,
    /// or, when `keep` is false, only reads and checks it; with `hash`, computes its layer ID
    /// from the same bytes.
    async fn fetch(sess: &mut Session, cd: &Containerd, b: &Blob, keep: bool, hash: bool, labels: &HashMap<String, String>, budget: &Arc<diffid::Budget>) -> Result<Option<Verified>> {
        let mut reader = sess.open_blob(&b.digest, b.size).await?;
        let mut hasher = hash.then(|| BackgroundHasher::new(&b.digest, budget.clone()));
        let mut w = keep.then(|| cd.writer(&b.digest, b.size));
        while let Some(chunk) = reader.next_chunk().await? {
            if let Some(h) = &mut hasher {
                if !h.update(chunk.clone()).await {
                    // Hashing failed (a decompression bomb, a corrupt stream): nothing more is
                    // downloaded, nothing committed; `finish` says why.
                    let stopped_early = || PullError::BadImage { image: String::new(), reason: format!("layer {}: hashing stopped early", b.digest) };
                    let failed = match hasher.take() {
                        Some(h) => h.finish().await.err(),
                        None => None,
                    };
                    return Err(failed.unwrap_or_else(stopped_early));
                }
            }
            if let Some(w) = &mut w {
                w.write(&chunk).await?;
            }
        }
        if let Some(w) = w {
            w.commit(labels.clone()).await?;
        }
        crate::metrics::record_downloaded(b.size);
        match hasher {
            Some(h) => Ok(Some(h.finish().await?)),
            None => Ok(None),
        }
    }

    /// The layer ID of a blob already in the namespace's content store (local work only).
    async fn hash_from_store(cd: &Containerd, digest: &str, size: u64, budget: &Arc<diffid::Budget>) -> Result<Verified> {
        let mut h = BackgroundHasher::new(digest, budget.clone());
        let mut r = cd.blob_bytes(digest, size).await?;
        while let Some(c) = r.next_chunk().await? {
            if !h.update(bytes::Bytes::from(c)).await {
                break;
            }
        }
        h.finish().await
    }
}

/// Takes the public namespace's shareable label away if dropped armed: a check of the public
/// namespace that did not run to its end (its future dropped) leaves no label behind. The
/// removal runs as a task of its own (Drop cannot wait), on the runtime the drop happens in.
struct UnshareOnDrop(Option<Containerd>);

impl UnshareOnDrop {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for UnshareOnDrop {
    fn drop(&mut self) {
        let Some(there) = self.0.take() else { return };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    match there.make_unshareable().await {
                        Ok(()) => tracing::info!(namespace = there.namespace(), "a check of pullgate's public namespace was cancelled: its shareable label is taken away until the next one completes"),
                        Err(e) => tracing::warn!(namespace = there.namespace(), error = %e, "a check of pullgate's public namespace was cancelled, and its shareable label cannot be taken away"),
                    }
                });
            }
            Err(_) => tracing::warn!(namespace = there.namespace(), "a check of pullgate's public namespace was cancelled outside the runtime: its shareable label stays until the next check"),
        }
    }
}

/// The node's permits to decompress and hash layer bytes: all cores but one (at least one).
fn hashing_permits() -> &'static tokio::sync::Semaphore {
    static PERMITS: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    PERMITS.get_or_init(|| {
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        tokio::sync::Semaphore::new(cores.saturating_sub(1).max(1))
    })
}

/// A [`diffid::Hasher`] fed from async code but run on the blocking pool: decompressing is CPU
/// work (and a hostile layer may be a decompression bomb), which must not hold the runtime's
/// workers that serve containerd's snapshot requests.
struct BackgroundHasher {
    tx: Option<tokio::sync::mpsc::Sender<bytes::Bytes>>,
    task: tokio::task::JoinHandle<std::result::Result<Verified, DiffIdError>>,
}

impl BackgroundHasher {
    fn new(blob: &str, budget: Arc<diffid::Budget>) -> BackgroundHasher {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(8);
        let mut h = diffid::Hasher::within(blob, budget);
        let rt = tokio::runtime::Handle::current();
        let task = tokio::task::spawn_blocking(move || {
            while let Some(c) = rx.blocking_recv() {
                // One chunk at a time under the node's hashing permits (a slow download holds
                // none while it waits): however many pulls hash at once, decompressing takes
                // at most all cores but one, and the runtime serving containerd keeps one.
                let _permit = rt.block_on(hashing_permits().acquire());
                h.update(&c)?;
            }
            h.finish()
        });
        BackgroundHasher { tx: Some(tx), task }
    }

    /// Queues a chunk; false once hashing has failed (the chunk is dropped: `finish` says why).
    async fn update(&mut self, chunk: bytes::Bytes) -> bool {
        if let Some(tx) = &self.tx {
            if tx.send(chunk).await.is_err() {
                self.tx = None;
            }
        }
        self.tx.is_some()
    }

    async fn finish(mut self) -> Result<Verified> {
        self.tx = None;
        match self.task.await {
            Ok(r) => Ok(r?),
            Err(e) => Err(PullError::BadImage { image: String::new(), reason: format!("layer hashing failed: {e}") }),
        }
    }
}

/// The image a manifest describes, as this pull sees it.
struct Image {
    /// The reference's image name, for the image record and messages.
    name: String,
    /// Where this session's answers are recorded: the endpoint contacted plus the repository.
    origin: String,
    config: Blob,
    layers: Vec<Blob>,
}

impl Image {
    fn of(req: &Request, resolved: &registry::Resolved, sess: &Session) -> Result<Image> {
        let m = &resolved.parsed;
        let name = req.reference.image_name();
        let bad = |reason: String| PullError::BadImage { image: name.clone(), reason };
        let blob = |d: &oci_spec::image::Descriptor| Blob { digest: d.digest().to_string(), size: d.size(), media_type: d.media_type().to_string() };
        let image = Image { name: name.clone(), origin: sess.origin(), config: blob(m.config()), layers: m.layers().iter().map(blob).collect() };
        if image.layers.is_empty() {
            return Err(bad("manifest has no layers".into()));
        }
        // (Described, never quoted: a descriptor's digest is the registry's text.)
        if let Some(b) = image.all().find(|b| !crate::reference::is_digest(&b.digest)) {
            return Err(bad(format!("a descriptor's digest is not a sha256 digest ({} characters)", b.digest.chars().count())));
        }
        Ok(image)
    }

    /// The config, then the layers.
    fn all(&self) -> impl Iterator<Item = &Blob> {
        std::iter::once(&self.config).chain(&self.layers)
    }

    /// Their digests, in the same order.
    fn digests(&self) -> Vec<&str> {
        self.all().map(|b| b.digest.as_str()).collect()
    }
}

/// How long each stage of a pull or verify took, logged at debug level when it ends: where a
/// slow pull's time went.
struct Stages {
    last: std::time::Instant,
    took: Vec<(&'static str, std::time::Duration)>,
}

impl Stages {
    fn new() -> Stages {
        Stages { last: std::time::Instant::now(), took: Vec::new() }
    }

    fn done(&mut self, stage: &'static str) {
        let now = std::time::Instant::now();
        self.took.push((stage, now - self.last));
        self.last = now;
    }

    /// A stage that ran beside the others (it does not move the mark).
    fn beside(&mut self, stage: &'static str, took: std::time::Duration) {
        self.took.push((stage, took));
    }
}

impl std::fmt::Display for Stages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (stage, d)) in self.took.iter().enumerate() {
            write!(f, "{}{stage}={:.1}ms", if i == 0 { "" } else { " " }, d.as_secs_f64() * 1e3)?;
        }
        Ok(())
    }
}

/// What the ledger knew before this pull: the recorded manifest (its layer IDs are verified
/// pairings), and per blob (config first) whether this origin served it, per layer its pairing.
struct Facts {
    known: Option<ManifestRec>,
    served: Vec<bool>,
    paired: Vec<Option<String>>,
}

/// What `gather` established.
#[derive(Default)]
struct Gathered {
    /// Whether the pull reads or writes content (a lease holds it from the start); a verify of
    /// a manifest pullgate knows in full only places what the namespace lacks.
    needs_content: bool,
    /// Blobs the namespace's content store holds.
    present: std::collections::HashSet<String>,
    /// Blobs this origin served for the first time (downloaded or vouched for by HEAD).
    newly_served: Vec<String>,
    /// Blobs downloaded from the registry.
    downloaded: Vec<String>,
    /// Blobs copied into the namespace from another namespace's content.
    copied: Vec<String>,
    /// Blobs this pull put in the namespace with its origin labels (downloaded, copied,
    /// adopted): `label` leaves them alone.
    labelled: std::collections::HashSet<String>,
    /// Public blobs adopted from pullgate's public namespace.
    from_public: Vec<String>,
    /// Blobs to copy from another namespace once the grant stands: (blob, that namespace,
    /// whether the pull needs them if the copy fails).
    to_copy: Vec<(Blob, String, bool)>,
    /// Layer IDs computed from blobs' bytes in this pull.
    verified: Vec<Verified>,
    /// How far this pull's layers may expand together while they are hashed.
    budget: Arc<diffid::Budget>,
    /// Layers a pull adopts beside its unpack (a shared content store; `adopt_beside`).
    deferred: Vec<Blob>,
    /// What the namespace holds is asked beside the ledger's commit (a verify under a shared
    /// store, which places nothing).
    present_later: bool,
    /// The config's bytes, read in another namespace (a manifest pullgate never recorded, whose
    /// config the namespace lacks).
    config: Option<Vec<u8>>,
}

/// Where a pull puts blobs, and what they carry there.
struct Placing<'a> {
    /// Origin labels set on every blob put in the namespace.
    who: &'a HashMap<String, String>,
    /// containerd's content sharing policy (Some(true): shared), when it says.
    shared: Option<bool>,
    /// pullgate's public namespace, when this node uses one, and the image's blobs pullgate
    /// established as public at their origin.
    public: Option<(&'a str, std::collections::HashSet<String>)>,
}

/// Getting one blob's bytes for a pull or verify.
enum Job {
    /// From another namespace's content on the node (a public blob by way of pullgate's public
    /// namespace, `publish`, then adopted from there); if that fails and `keep`, from the origin.
    Copy { blob: Blob, from: String, keep: bool, publish: Option<Containerd> },
    /// From the origin: kept in the content store, or only compared; hashed, or not.
    Fetch { blob: Blob, keep: bool, hash: bool },
}

enum Done {
    Copied(String),
    Fetched { digest: String, keep: bool, verified: Option<Verified> },
    Skipped,
}

impl Job {
    /// Runs jobs, `at_once` at a time; what they keep is committed with `labels`.
    async fn run_all(jobs: impl IntoIterator<Item = Job>, sess: &Session, cd: &Containerd, labels: &HashMap<String, String>, at_once: usize, budget: &Arc<diffid::Budget>) -> Vec<Result<Done>> {
        Self::stream(jobs, sess, cd, labels, at_once, budget).map(|(_, d)| d).collect().await
    }

    /// Runs jobs, `at_once` at a time, each outcome as it comes, with its blob's digest.
    fn stream<'a>(
        jobs: impl IntoIterator<Item = Job> + 'a,
        sess: &'a Session,
        cd: &'a Containerd,
        labels: &'a HashMap<String, String>,
        at_once: usize,
        budget: &'a Arc<diffid::Budget>,
    ) -> impl futures_util::Stream<Item = (String, Result<Done>)> + 'a {
        futures_util::stream::iter(jobs)
            .map(move |job| {
                let mut s = sess.clone();
                let digest = match &job {
                    Job::Copy { blob, .. } | Job::Fetch { blob, .. } => blob.digest.clone(),
                };
                async move { (digest, job.run(&mut s, cd, labels, budget).await) }
            })
            .buffer_unordered(at_once)
    }

    async fn run(self, sess: &mut Session, cd: &Containerd, labels: &HashMap<String, String>, budget: &Arc<diffid::Budget>) -> Result<Done> {
        let (blob, keep, hash) = match self {
            Job::Copy { blob, from, keep, publish } => match Self::copy(cd, publish.as_ref(), &from, &blob, labels).await {
                Ok(()) => return Ok(Done::Copied(blob.digest)),
                Err(e) => {
                    tracing::warn!(digest = %blob.digest, from = %from, error = %e, "cannot copy the blob from another namespace on the node");
                    if !keep {
                        return Ok(Done::Skipped);
                    }
                    (blob, true, false)
                }
            },
            Job::Fetch { blob, keep, hash } => (blob, keep, hash),
        };
        let verified = Puller::fetch(sess, cd, &blob, keep, hash, labels, budget).await?;
        Ok(Done::Fetched { digest: blob.digest, keep, verified })
    }

    /// Copies a blob from namespace `from` into the namespace, or, with `publish`, into
    /// pullgate's public namespace and then adopts it from there (containerd checks the digest
    /// of what is written either way). A public namespace that cannot be adopted from (its
    /// label removed meanwhile) leaves the blob there and the copy comes to the namespace.
    async fn copy(cd: &Containerd, publish: Option<&Containerd>, from: &str, blob: &Blob, labels: &HashMap<String, String>) -> Result<()> {
        if let Some(p) = publish {
            p.copy_from(from, &blob.digest, blob.size, &HashMap::new()).await?;
            if cd.adopt_content(&blob.digest, blob.size, labels).await? {
                return Ok(());
            }
            tracing::warn!(digest = %blob.digest, namespace = %p.namespace(), "cannot adopt the blob from pullgate's public namespace; copying it");
        }
        Ok(cd.copy_from(from, &blob.digest, blob.size, labels).await?)
    }
}

impl Gathered {
    /// Of `digests`, those the namespace holds (`found`, with their labels): present, and
    /// labelled already where they carry `who` (`label` writes nothing for them).
    fn found_present(&mut self, digests: &[&str], found: HashMap<String, HashMap<String, String>>, who: &HashMap<String, String>) {
        for d in digests.iter().copied() {
            let Some(labels) = found.get(d) else { continue };
            self.present.insert(d.to_string());
            if who.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                self.labelled.insert(d.to_string());
            }
        }
    }

    /// The other namespace's copy of `b` went (deleted, collected) or cannot be read: the origin
    /// serves the bytes instead (hashed when `hash`), kept if the pull needs them; no copy.
    async fn fetch_instead(&mut self, b: Blob, hash: bool, sess: &Session, cd: &Containerd, labels: &HashMap<String, String>) -> Result<()> {
        let keep = self.to_copy.iter().any(|(c, _, keep)| c.digest == b.digest && *keep);
        self.to_copy.retain(|(c, _, _)| c.digest != b.digest);
        let budget = self.budget.clone();
        self.took(Job::Fetch { blob: b, keep, hash }.run(&mut sess.clone(), cd, labels, &budget).await?);
        Ok(())
    }

    fn took(&mut self, d: Done) {
        match d {
            Done::Copied(digest) => {
                self.present.insert(digest.clone());
                self.labelled.insert(digest.clone());
                self.copied.push(digest);
            }
            Done::Fetched { digest, keep, verified } => {
                if keep {
                    self.present.insert(digest.clone());
                    self.labelled.insert(digest.clone());
                }
                self.verified.extend(verified);
                self.downloaded.push(digest);
            }
            Done::Skipped => {}
        }
    }
}

#[tonic::async_trait]
impl crate::snapshotter::service::PublicAtOrigin for Puller {
    async fn establish(&self, namespace: &str, principal: &str, chain: &str, sandbox: bool) -> Option<String> {
        let key = (namespace.to_string(), chain.to_string());
        if self.no_public_names.holds(&key) {
            return None;
        }
        let cd = Containerd::on(self.channel.clone(), namespace);
        let (names, cost) = self.on_node.names_on_chain(&cd, namespace, chain, sandbox).await;
        crate::metrics::record_containerd_reads("refused_request", cost.calls, cost.bytes);
        let found = match names.is_empty() {
            true => None,
            false => self.public_at_own_origin(namespace, principal, &names, false).await.verified,
        };
        if found.is_none() {
            self.no_public_names.remember(key, namespace, UNREACHABLE_RETRY);
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_filling_the_refusal_memory_forgets_its_own() {
        let recent: Recent<String> = Recent::default();
        let minute = std::time::Duration::from_secs(60);
        recent.remember("victim@sha256:1".into(), "team-b", minute);
        // Remembered sooner to end than every one of the filler's: the old rule forgot it first.
        recent.remember("victim@sha256:2".into(), "team-b", std::time::Duration::from_secs(1));
        for i in 0..MAX_NOT_PUBLIC + 500 {
            recent.remember(format!("filler{i}@sha256:0"), "team-a", minute);
        }
        assert!(recent.holds(&"victim@sha256:1".to_string()));
        assert!(recent.holds(&"victim@sha256:2".to_string()));
        let m = recent.0.lock().unwrap();
        assert_eq!(m.until.len(), MAX_NOT_PUBLIC);
        assert_eq!(m.held.get("team-b"), Some(&2));
        assert_eq!(m.held.get("team-a"), Some(&(MAX_NOT_PUBLIC - 2)));
        // The filler's newest are held, its oldest forgotten.
        assert!(m.until.contains_key(&format!("filler{}@sha256:0", MAX_NOT_PUBLIC + 499)));
        assert!(!m.until.contains_key("filler0@sha256:0"));
    }

    #[test]
    fn pods_count_against_their_kubernetes_namespace() {
        assert_eq!(Puller::refusal_owner("k8s.io", "team-a/web/uid-1", true), "k8s.io/team-a");
        assert_eq!(Puller::refusal_owner("k8s.io", "team-a", true), "k8s.io/team-a");
        assert_eq!(Puller::refusal_owner("k8s.io", "", true), "k8s.io");
        // Outside the CRI front a principal is whatever the API's caller names: the namespace.
        assert_eq!(Puller::refusal_owner("tenant-x", "p1", false), "tenant-x");
    }

    #[test]
    fn remembering_a_key_again_moves_it_and_its_count() {
        let recent: Recent<String> = Recent::default();
        let minute = std::time::Duration::from_secs(60);
        recent.remember("x@sha256:1".into(), "team-a", minute);
        recent.remember("x@sha256:1".into(), "team-b", minute);
        let m = recent.0.lock().unwrap();
        assert_eq!(m.until.len(), 1);
        assert_eq!(m.held.get("team-a"), None);
        assert_eq!(m.held.get("team-b"), Some(&1));
    }
}
