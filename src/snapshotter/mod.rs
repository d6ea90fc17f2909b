//! snapshotter: a complete overlayfs snapshotter (copying fallback where overlay cannot be
//! mounted) with its metadata in redb. It owns the snapshot lifecycle (Prepare, View, Mounts,
//! Commit, Remove, Stat, Update, Walk, Usage, Cleanup) with containerd's semantics and error
//! classes; `service` adapts it to containerd's Snapshots gRPC service.
pub mod filter;
mod layout;
pub mod rpc;
pub mod service;

pub use crate::metastore::Kind;
pub use filter::FilterError;
pub use layout::{probe_overlay, Driver, Mount};

use crate::gate::{ChainInfo, Gate, GateError, Subject};
use crate::metastore::{MetaStore, Record, StoreError};
use layout::Layout;
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::{Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// containerd's limit for one label (key plus value), `labels.Validate`.
pub const MAX_LABEL_SIZE: usize = 4096;
/// Limit for all labels of one snapshot together, so a client cannot bloat the metadata.
pub const MAX_LABELS_TOTAL: usize = 64 * 1024;
/// Longest key accepted.
pub const MAX_KEY_SIZE: usize = 4096;
/// The label through which a client names the principal (pod) inside a namespace.
pub const PRINCIPAL_LABEL: &str = "containerd.io/snapshot/pullgate.principal";
/// The label the CRI front puts on every pod it forwards (containerd passes a pod's
/// `containerd.io/snapshot/*` annotations to its sandbox's Prepare as labels): a Prepare that
/// carries it is a sandbox's, and never takes a container's admission. It can only take one
/// away from the Prepare that carries it, so whoever sets it gains nothing.
pub const SANDBOX_LABEL: &str = "containerd.io/snapshot/pullgate.sandbox";
/// The label containerd's unpacker (2.4 and later) sets to the diffID of the layer an extract
/// applies: a claim (see `Snapshotter::layer_hints`).
pub const DIFF_ID_LABEL: &str = "containerd.io/snapshot/diff-id";
/// The label CRI's pull (with snapshot annotations on) sets to the blob of the layer an extract
/// applies: a claim.
pub const LAYER_DIGEST_LABEL: &str = "containerd.io/snapshot/cri.layer-digest";
/// The label containerd's unpacker sets to the target chainID of an extract.
pub const SNAPSHOT_REF_LABEL: &str = crate::metastore::SNAPSHOT_REF_LABEL;

pub type Labels = BTreeMap<String, String>;

#[derive(Debug, thiserror::Error)]
pub enum SnapshotterError {
    #[error("snapshot {0:?}: not found")]
    NotFound(String),
    #[error("snapshot {0:?}: already exists")]
    AlreadyExists(String),
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("{0}")]
    InvalidArgument(String),
    #[error(transparent)]
    Filter(#[from] FilterError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Gate(#[from] GateError),
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
}

type Result<T> = std::result::Result<T, SnapshotterError>;

/// What a request's result meant to the gate (a metrics outcome): Ok, or AlreadyExists
/// (answered only after the gate allowed), is an allow; a gate refusal a deny with its reason
/// class; other errors were not the gate's.
pub fn gated<T>(out: &Result<T>) -> crate::metrics::Gated {
    use crate::metrics::Gated;
    match out {
        Ok(_) | Err(SnapshotterError::AlreadyExists(_)) => Gated::Allowed,
        Err(SnapshotterError::Gate(GateError::Denied(d))) => Gated::Denied(d.kind.as_str()),
        Err(SnapshotterError::Gate(GateError::Ledger(_))) => Gated::Denied("ledger_error"),
        Err(_) => Gated::NotDecided,
    }
}

impl crate::metrics::GaugeSource for Snapshotter {
    fn commits(&self) -> u64 {
        self.store.commits()
    }

    fn read_gauges(&self) -> std::result::Result<crate::metrics::DatabaseGauges, String> {
        let read = self.store.read(|tx| -> std::result::Result<_, StoreError> {
            let mut g = crate::metrics::DatabaseGauges { grants: crate::ledger::grants(tx, None)?.len() as i64, ..Default::default() };
            tx.each_snapshot("", None, &mut |_, r| {
                match r.kind {
                    Kind::Active => g.active += 1,
                    Kind::View => g.view += 1,
                    Kind::Committed => {
                        g.committed += 1;
                        g.committed_bytes += r.size.max(0);
                    }
                }
                Ok(std::ops::ControlFlow::Continue(()))
            })?;
            Ok(g)
        });
        read.map_err(|e| e.to_string())
    }
}

/// What Stat, Update and Walk report about a snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct Info {
    pub name: String,
    pub parent: String,
    pub kind: Kind,
    pub labels: Labels,
    pub created: SystemTime,
    pub updated: SystemTime,
}

impl filter::Adaptor for Info {
    fn field(&self, path: &[String]) -> Option<String> {
        match path.first()?.as_str() {
            "kind" => Some(match self.kind {
                Kind::Active => "active",
                Kind::View => "view",
                Kind::Committed => "committed",
            }
            .to_string()),
            "name" => Some(self.name.clone()),
            "parent" => Some(self.parent.clone()),
            "labels" => self.labels.get(&path[1..].join(".")).cloned(),
            _ => None,
        }
    }
}

pub struct Snapshotter {
    /// Shared with the chain index's worker, which reads the ledger ahead of decisions.
    store: std::sync::Arc<MetaStore>,
    layout: Layout,
    gate: std::sync::Arc<Gate>,
    /// Cleanup takes it exclusively so that no staged directory is mistaken for garbage.
    cleanup_lock: RwLock<()>,
    /// Unpack steps pullgate's own pull is making, by the key name it gives them.
    own: Mutex<HashMap<String, OwnExtraction>>,
    /// CreateContainers the CRI front decided and is forwarding, oldest first.
    admissions: Mutex<Vec<Admission>>,
    next_admission: std::sync::atomic::AtomicU64,
    /// Namespaces served by the CRI front (`k8s.io`): a container's principal there comes only
    /// from an admission, never from a label (which a pod author controls on containerd 1.6).
    admission_only: std::collections::HashSet<String>,
}

/// The CRI front's decision that `principal` may create a container on chain `chain` in
/// `namespace`, handed over in this process just before it forwards the CreateContainer, and
/// consumed by the one Prepare of that creation it was made for (containerd 1.7+ passes a
/// container's annotations to no Prepare, so nothing on the wire can carry it). A Prepare the
/// front did not decide never consumes one.
struct Admission {
    id: u64,
    namespace: String,
    chain: String,
    principal: String,
    target: AdmissionFor,
    /// The backend key of the Prepare that consumed it.
    consumed_by: Option<String>,
    /// Held until a Prepare consumes the admission (or it is withdrawn): the front's lock on
    /// the chain, so that the next container of the chain waits only for this one's Prepare.
    release: Option<Box<dyn std::any::Any + Send>>,
}

/// Which Prepare of a CreateContainer an admission is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdmissionFor {
    /// The container's rootfs: a Prepare whose key is a container ID (containerd's 64 hex
    /// characters) on the chain, or on containerd's user-namespace copy of the chain. The copy
    /// itself (key `<id>-remap` on the chain) is prepared under the admission without consuming
    /// it, and committed, is taken as that chain.
    Rootfs,
    /// An image volume of pod sandbox `sandbox`: containerd's key
    /// `<state dir>/image-volumes/<sandbox id>/<image>` on the chain.
    Volume { sandbox: String },
}

/// The pod sandbox an image volume's key names (`.../image-volumes/<sandbox>/<image>`).
pub fn image_volume_sandbox(name: &str) -> Option<&str> {
    let parts: Vec<&str> = name.rsplitn(4, '/').collect();
    match parts.as_slice() {
        [image, sandbox, "image-volumes", _] if !image.is_empty() && !sandbox.is_empty() => Some(sandbox),
        _ => None,
    }
}

/// Whether a key name is the mount point containerd 2.x's CRI views a checkpoint image's chain
/// on to restore a container from it (Go's `os.MkdirTemp("", "checkpoint")`: an absolute path
/// whose last element is `checkpoint` and digits).
pub fn is_restore_mount(name: &str) -> bool {
    let last = name.rsplit('/').next().unwrap_or_default();
    name.starts_with('/') && last.strip_prefix("checkpoint").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether a key name is a container ID as containerd's CRI makes them (64 lowercase hex).
pub fn is_container_id(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Keeps an admission offered while its CreateContainer is in flight; dropped, it withdraws an
/// admission no Prepare consumed, and takes back the principal of one a Prepare consumed unless
/// the front settled it (checked the creation to its end): a CreateContainer its caller dropped
/// half-way (kubelet's timeout), or whose answer could not be read, leaves no snapshot holding a
/// principal nobody checked it was made for.
pub struct AdmissionGuard {
    snap: std::sync::Arc<Snapshotter>,
    id: u64,
    settled: std::sync::atomic::AtomicBool,
}

impl AdmissionGuard {
    /// The backend key of the snapshot whose Prepare consumed the admission, if one did.
    pub fn consumer(&self) -> Option<String> {
        self.snap.admission_lock().iter().find(|a| a.id == self.id).and_then(|a| a.consumed_by.clone())
    }

    /// The front checked what consumed the admission: dropping the guard keeps its principal.
    pub fn settle(&self) {
        self.settled.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Drop for AdmissionGuard {
    fn drop(&mut self) {
        let gone: Vec<Admission> = {
            let mut all = self.snap.admission_lock();
            let (gone, kept) = std::mem::take(&mut *all).into_iter().partition(|a| a.id == self.id);
            *all = kept;
            gone
        };
        // (A rootfs only: an image volume's Prepare is bound to its pod by its key, and a pod
        // whose mounted volume lost its principal could create no container again.)
        let unchecked: Vec<String> = match self.settled.load(std::sync::atomic::Ordering::Relaxed) {
            true => vec![],
            false => gone.iter().filter(|a| a.target == AdmissionFor::Rootfs).filter_map(|a| a.consumed_by.clone()).collect(),
        };
        // (The chain lock a withdrawn admission still holds is released outside the list's lock.)
        drop(gone);
        for key in unchecked {
            tracing::warn!(snapshot = %key, "a CRI CreateContainer ended before pullgate checked its Prepare: the snapshot loses the principal it was admitted for");
            let snap = self.snap.clone();
            let withdraw = move || {
                if let Err(e) = snap.withdraw_admitted(&key) {
                    tracing::error!(snapshot = %key, error = %e, "cannot take back an admitted principal");
                }
            };
            match tokio::runtime::Handle::try_current() {
                Ok(h) => drop(h.spawn_blocking(withdraw)),
                Err(_) => withdraw(),
            }
        }
    }
}

/// An unpack step of pullgate's own pull, registered (in this process, never over the wire)
/// before its Prepare under its key name `extract-<random uuid> <chainID>`. Until the pull has
/// checked the applied layer against the blob's verified layer ID, nobody may mount or commit
/// it; once committed under its chainID on a parent that is itself pullgate's own chain, the
/// snapshot is recorded as an own chain, the only kind offered to other namespaces.
#[derive(Debug, Clone)]
struct OwnExtraction {
    namespace: String,
    chain: String,
    parent_chain: String,
    /// The directory id its Prepare created: a snapshot re-created under the same key (after a
    /// client removed the first) is not pullgate's.
    id: Option<u64>,
    applied: bool,
}

/// Keeps an own extraction registered while the pull works on it.
pub struct OwnExtractionGuard<'a> {
    snap: &'a Snapshotter,
    name: String,
}

impl OwnExtractionGuard<'_> {
    /// The pull applied the layer and checked the result against the blob's verified layer ID:
    /// the snapshot may now be committed.
    pub fn applied(&self) {
        if let Some(o) = self.snap.own_lock().get_mut(&self.name) {
            o.applied = true;
        }
    }
}

impl Drop for OwnExtractionGuard<'_> {
    fn drop(&mut self) {
        self.snap.own_lock().remove(&self.name);
    }
}

fn now_nanos() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0)
}

fn to_time(nanos: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(nanos.max(0) as u64)
}

/// The containerd namespace of a backend key `<namespace>/<seq>/<key>`.
pub fn namespace_of_key(key: &str) -> Option<&str> {
    let mut parts = key.splitn(3, '/');
    let (ns, seq, rest) = (parts.next()?, parts.next()?, parts.next()?);
    let ok = !ns.is_empty() && !seq.is_empty() && seq.bytes().all(|b| b.is_ascii_digit()) && !rest.is_empty();
    ok.then_some(ns)
}

/// Keys are opaque names (never used as paths), but a key that looks like an escape attempt or
/// carries control characters is refused outright. Absolute keys are allowed: containerd's
/// own test suite uses them.
pub fn validate_key(what: &str, key: &str) -> Result<()> {
    let bad = |why: &str| Err(SnapshotterError::InvalidArgument(format!("invalid {what} {key:?}: {why}")));
    if key.is_empty() {
        return bad("must not be empty");
    }
    if key.len() > MAX_KEY_SIZE {
        return bad(&format!("longer than {MAX_KEY_SIZE} bytes"));
    }
    if key.chars().any(char::is_control) {
        return bad("contains a control character");
    }
    if key.split('/').any(|c| c == "..") {
        return bad("contains a '..' path element");
    }
    Ok(())
}

/// A principal names a pod or workload inside a namespace: printable, no whitespace, at most
/// `MAX_PRINCIPAL` bytes; `/` separates parts (the CRI front's `<namespace>/<pod>/<uid>`), none
/// empty, `.` or `..`.
pub fn principal_is_valid(p: &str) -> bool {
    p.len() <= MAX_PRINCIPAL
        && !p.chars().any(|c| c.is_control() || c.is_whitespace())
        && (p.is_empty() || p.split('/').all(|part| !part.is_empty() && part != "." && part != ".."))
}

/// The longest principal: a Kubernetes namespace (63), a pod's name (253) and its UID (36),
/// with their separators.
pub const MAX_PRINCIPAL: usize = 360;

pub fn validate_principal(p: &str) -> Result<()> {
    if !principal_is_valid(p) {
        return Err(SnapshotterError::InvalidArgument(format!(
            "invalid principal {:?}: at most 360 printable characters, no whitespace, no empty, '.' or '..' part between '/'",
            crate::reference::excerpt(p)
        )));
    }
    Ok(())
}

/// The client's own name of a backend key `<namespace>/<seq>/<name>` (the whole key when it has
/// no such prefix, as from a client talking to the socket directly).
pub fn name_of_key(key: &str) -> &str {
    match namespace_of_key(key) {
        Some(ns) => key[ns.len() + 1..].split_once('/').map(|(_, rest)| rest).unwrap_or(key),
        None => key,
    }
}

/// The target chainID when this request is an unpack step: containerd's unpackers (and
/// pullgate's own) prepare `extract-<random> <chainID>`. Decided from the key alone: the
/// `containerd.io/snapshot.ref` label any client may set does not change which check applies.
pub fn extract_target(kind: Kind, key: &str) -> Option<String> {
    if kind != Kind::Active {
        return None;
    }
    let rest = name_of_key(key).strip_prefix("extract-")?;
    let (_, target) = rest.rsplit_once(' ')?;
    crate::reference::is_digest(target).then(|| target.to_string())
}

pub fn validate_labels(labels: &Labels) -> Result<()> {
    let mut total = 0;
    for (k, v) in labels {
        if k.is_empty() {
            return Err(SnapshotterError::InvalidArgument("label key must not be empty".into()));
        }
        if k.len() + v.len() > MAX_LABEL_SIZE {
            let short: String = k.chars().take(32).collect();
            return Err(SnapshotterError::InvalidArgument(format!(
                "label {short:?}: key and value longer than {MAX_LABEL_SIZE} bytes"
            )));
        }
        total += k.len() + v.len();
    }
    if total > MAX_LABELS_TOTAL {
        return Err(SnapshotterError::InvalidArgument(format!("labels total more than {MAX_LABELS_TOTAL} bytes")));
    }
    Ok(())
}

/// Snapshots a Walk hands over at once, at most.
pub const WALK_BATCH: usize = 100;
/// Label bytes after which a Walk hands a batch over (one record's labels are at most
/// [`MAX_LABELS_TOTAL`]).
pub const WALK_BATCH_BYTES: usize = 1024 * 1024;
/// Records a Walk reads in one read transaction, at most (a filter may match few of them).
const WALK_SCAN: usize = 1000;

fn info_of_owned(name: &str, r: Record) -> Info {
    Info { name: name.to_string(), parent: r.parent, kind: r.kind, labels: r.labels, created: to_time(r.created), updated: to_time(r.updated) }
}

fn info_of(name: &str, r: &Record) -> Info {
    Info {
        name: name.to_string(),
        parent: r.parent.clone(),
        kind: r.kind,
        labels: r.labels.clone(),
        created: to_time(r.created),
        updated: to_time(r.updated),
    }
}

impl Snapshotter {
    /// Opens (or creates) a snapshotter rooted at `root` and removes directories left over by
    /// a crash.
    pub fn open(root: &Path, driver: Driver, gate: std::sync::Arc<Gate>) -> Result<Snapshotter> {
        std::fs::create_dir_all(root)
            .map_err(|source| SnapshotterError::Io { context: format!("create {}", root.display()), source })?;
        let layout = Layout::new(root, driver)?;
        let store = std::sync::Arc::new(MetaStore::open(&root.join("metadata.redb"))?);
        if let Some((format, by)) = store.found_format().filter(|(f, by)| *f != crate::metastore::LEDGER_FORMAT || by != env!("CARGO_PKG_VERSION")) {
            tracing::info!(from_format = format, from_version = %by, format = crate::metastore::LEDGER_FORMAT, version = env!("CARGO_PKG_VERSION"),
                "ledger opened by another version: format {format} (last opened by pullgate {by}) is now format {} (pullgate {})", crate::metastore::LEDGER_FORMAT, env!("CARGO_PKG_VERSION"));
        }
        store.write(crate::ledger::upgrade)?;
        for key in store.write(|tx| tx.drop_unchecked_admissions())? {
            tracing::warn!(snapshot = %key, "a CRI CreateContainer was not checked to its end before pullgate stopped: the snapshot loses the principal it was admitted for");
        }
        let s = Snapshotter {
            store,
            layout,
            gate,
            cleanup_lock: RwLock::new(()),
            own: Mutex::new(HashMap::new()),
            admissions: Mutex::new(Vec::new()),
            next_admission: std::sync::atomic::AtomicU64::new(1),
            admission_only: Default::default(),
        };
        let removed = s.cleanup()?;
        if removed > 0 {
            tracing::info!(removed, "removed directories left over by an interrupted operation");
        }
        Ok(s)
    }

    pub fn driver(&self) -> Driver {
        self.layout.driver
    }

    /// The metastore, shared with the ledger's writers (pull, verify, revoke).
    pub fn store(&self) -> &MetaStore {
        &self.store
    }

    /// The metastore, as the chain index's worker holds it.
    #[doc(hidden)]
    pub fn store_arc(&self) -> &std::sync::Arc<MetaStore> {
        &self.store
    }

    fn read_lock(&self) -> std::sync::RwLockReadGuard<'_, ()> {
        self.cleanup_lock.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the CRI front serves `namespace` (its containers and views are decided there).
    pub fn serves_front(&self, namespace: &str) -> bool {
        self.admission_only.contains(namespace)
    }

    /// Makes `namespaces` take a container's principal only from the CRI front's admissions.
    pub fn with_admission_only(mut self, namespaces: impl IntoIterator<Item = String>) -> Snapshotter {
        self.admission_only.extend(namespaces);
        self
    }

    fn admission_lock(&self) -> std::sync::MutexGuard<'_, Vec<Admission>> {
        self.admissions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Offers an admission (see [`Admission`]) until the guard is dropped, holding `release`
    /// until a Prepare consumes it. The front offers one rootfs admission per chain at a time
    /// (the next waits for this one's `release`), and volume admissions bound to their pod;
    /// should a Prepare take an admission other than its container's (or the rootfs be prepared
    /// on another chain), the front sees from `AdmissionGuard::consumer` that its container did
    /// not consume it, and undoes the creation.
    pub fn admit(
        self: &std::sync::Arc<Self>,
        namespace: &str,
        chain: &str,
        principal: &str,
        target: AdmissionFor,
        release: Option<Box<dyn std::any::Any + Send>>,
    ) -> AdmissionGuard {
        let id = self.next_admission.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let a = Admission { id, namespace: namespace.into(), chain: chain.into(), principal: principal.into(), target, consumed_by: None, release };
        self.admission_lock().push(a);
        AdmissionGuard { snap: self.clone(), id, settled: Default::default() }
    }

    /// The admission, if any, a Prepare of `key` on `parent` (backend keys) in `namespace` is
    /// made under: its principal. `remap_of` is the chain the parent is containerd's
    /// user-namespace copy of, if it is one. Only the Prepare an admission is for consumes it:
    /// - a container ID's key, the rootfs admission on the parent's chain (or the chain the
    ///   parent is a copy of), releasing its chain;
    /// - an image volume's key, the volume admission of the pod its key names, on that chain;
    /// - containerd's user-namespace copy (`<id>-remap` on the chain) is made under the open
    ///   rootfs admission of the chain without consuming it;
    /// - any other Prepare, none.
    fn take_admission(&self, namespace: &str, key: &str, parent: &str, remap_of: Option<&str>) -> Option<(String, u64)> {
        let (name, chain) = (name_of_key(key), name_of_key(parent));
        let mut all = self.admission_lock();
        let open = |a: &Admission| a.consumed_by.is_none() && a.namespace == namespace;
        let a = if name.strip_suffix("-remap").is_some_and(|id| !id.is_empty()) {
            let a = all.iter().find(|a| open(a) && a.target == AdmissionFor::Rootfs && a.chain == chain)?;
            return Some((a.principal.clone(), a.id));
        } else if let Some(sandbox) = image_volume_sandbox(name) {
            all.iter_mut().find(|a| open(a) && a.chain == chain && matches!(&a.target, AdmissionFor::Volume { sandbox: s } if s == sandbox))?
        } else if is_container_id(name) {
            all.iter_mut()
                .find(|a| open(a) && a.target == AdmissionFor::Rootfs && (a.chain == chain || Some(a.chain.as_str()) == remap_of))?
        } else {
            return None;
        };
        a.consumed_by = Some(key.to_string());
        let release = a.release.take();
        let (principal, id) = (a.principal.clone(), a.id);
        drop(all);
        drop(release);
        Some((principal, id))
    }

    /// Whether admission `id` is still on offer (its CreateContainer has not ended).
    fn admission_listed(&self, id: u64) -> bool {
        self.admission_lock().iter().any(|a| a.id == id)
    }

    /// The principal a new snapshot is created for: in a namespace served by the CRI front, the
    /// admission its Prepare is made under (none: no principal), else the label.
    fn principal_of(&self, kind: Kind, is_extract: bool, namespace: &str, key: &str, parent: &str, labels: &Labels) -> Result<(String, Option<u64>)> {
        if self.admission_only.contains(namespace) {
            if labels.contains_key(PRINCIPAL_LABEL) {
                tracing::info!(%namespace, "ignoring a principal label: in a namespace served by the CRI front, principals come from its admissions only");
            }
            if kind != Kind::Active || is_extract || parent.is_empty() || labels.contains_key(SANDBOX_LABEL) {
                return Ok((String::new(), None));
            }
            let remap_of = match is_container_id(name_of_key(key)) {
                true => self.store.read(|tx| tx.remap_of(parent))?,
                false => None,
            };
            return Ok(match self.take_admission(namespace, key, parent, remap_of.as_deref()) {
                Some((principal, id)) => (principal, Some(id)),
                None => (String::new(), None),
            });
        }
        let principal = labels.get(PRINCIPAL_LABEL).cloned().unwrap_or_default();
        validate_principal(&principal)?;
        Ok((principal, None))
    }

    /// Takes back the principal snapshot `key` was prepared under (an admission it took that
    /// was not made for it): from now on it is decided, at Mounts, as having none.
    pub fn withdraw_admitted(&self, key: &str) -> Result<()> {
        self.store.write(|tx| -> Result<()> { Ok(tx.remove_admitted(key)?) })
    }

    /// The CRI front checked the creations these snapshots were prepared for: their admitted
    /// principals survive a restart of pullgate (unchecked ones do not).
    pub fn admissions_checked(&self, keys: &[String]) -> Result<()> {
        self.store.write(|tx| -> Result<()> {
            for k in keys {
                tx.set_admission_checked(k)?;
            }
            Ok(())
        })
    }

    /// Whether pod `sandbox` holds an image volume on chain `chain` in `namespace` prepared
    /// under an admission for `principal` (containerd reuses a mounted image volume for the
    /// pod's later containers without a new Prepare). The volume's parent is the namespace's
    /// snapshot of the chain, or pullgate's own unpack of it in another namespace, which
    /// containerd links when the namespace's unpack adopts it.
    pub fn volume_admitted(&self, namespace: &str, sandbox: &str, chain: &str, principal: &str) -> Result<bool> {
        self.store.read(|tx| -> Result<bool> {
            let mut parents = Self::chain_snapshots(tx, namespace, chain)?;
            parents.extend(tx.own_with_chain(chain)?.into_iter().filter(|(k, r)| r.kind == Kind::Committed && name_of_key(k) == chain));
            for (k, _) in parents {
                // (Only the namespace's own children: the range is its key prefix.)
                for child in tx.children_of_in(&k, &format!("{namespace}/"))? {
                    if image_volume_sandbox(name_of_key(&child)) == Some(sandbox) && tx.admitted(&child)?.as_deref() == Some(principal) {
                        return Ok(true);
                    }
                }
            }
            Ok(false)
        })
    }

    /// The committed snapshots of `namespace` named `chain` (those labelled with it, else all
    /// of the namespace's).
    fn chain_snapshots(tx: &crate::metastore::ReadTx, namespace: &str, chain: &str) -> Result<Vec<(String, Record)>> {
        let mut candidates = tx.with_ref_in(chain, namespace)?;
        if candidates.is_empty() {
            candidates.extend(Self::namespace_chain_snapshots(tx, namespace, chain)?);
        }
        Ok(candidates.into_iter().filter(|(k, r)| r.kind == Kind::Committed && name_of_key(k) == chain && namespace_of_key(k) == Some(namespace)).collect())
    }

    /// The committed snapshots of `namespace` named `chain`, read from the namespace's keys only.
    fn namespace_chain_snapshots(tx: &crate::metastore::ReadTx, namespace: &str, chain: &str) -> Result<Vec<(String, Record)>> {
        let mut out = Vec::new();
        tx.each_snapshot(&format!("{namespace}/"), None, &mut |k, r| {
            if r.kind == Kind::Committed && namespace_of_key(k) == Some(namespace) && name_of_key(k) == chain {
                out.push((k.to_string(), r));
            }
            Ok(std::ops::ControlFlow::Continue(()))
        })?;
        Ok(out)
    }

    /// The CRI front's decision for a container, in `namespace` by `principal`, of an image whose
    /// config claims layers `diff_ids`: the gate on the claimed chain, and on every committed
    /// snapshot of that chain's name the container's Prepare could get as its parent (the
    /// namespace's own, and pullgate's own unpacks it may adopt). Returns the chain's name.
    pub fn decide_container(&self, namespace: &str, principal: &str, diff_ids: &[String]) -> Result<String> {
        let top = crate::ledger::chain_ids(diff_ids).pop().unwrap_or_default();
        let subject = Subject { namespace, principal };
        self.store.read(|tx| -> Result<()> {
            // The namespace's own snapshots of the chain and pullgate's own unpacks of it,
            // never the records other namespaces labelled with it (a tenant may label thousands).
            let mut candidates = tx.with_ref_in(&top, namespace)?;
            if candidates.is_empty() {
                // A snapshot of the namespace without the label (committed by some client).
                candidates.extend(Self::namespace_chain_snapshots(tx, namespace, &top)?);
            }
            candidates.extend(tx.own_with_chain(&top)?.into_iter().filter(|(k, _)| namespace_of_key(k) != Some(namespace)));
            let mut chains = Vec::new();
            for (k, r) in candidates {
                let mine = namespace_of_key(&k) == Some(namespace);
                if r.kind != Kind::Committed || name_of_key(&k) != top || !(mine || tx.own_chain(&k)?.is_some()) {
                    continue;
                }
                chains.push((mine, self.chain_for_use_hinted(tx, &k, diff_ids)?));
            }
            // The layers this namespace held before pullgate knew them, as its own snapshot of
            // the chain establishes them (step by step, by chainID: the claimed layers' chain):
            // preloaded whichever snapshot containerd takes.
            let preloaded: Vec<String> =
                chains.iter().filter(|(mine, c)| *mine && c.chain_id == top && !c.unestablished).flat_map(|(_, c)| c.preloaded.clone()).collect();
            let claimed = ChainInfo { chain_id: top.clone(), diff_ids: diff_ids.to_vec(), preloaded: preloaded.clone(), ..Default::default() };
            self.gate.use_chain(tx, &subject, &claimed)?;
            for (_, c) in chains {
                self.gate.use_chain(tx, &subject, &ChainInfo { preloaded: preloaded.clone(), ..c })?;
            }
            if !preloaded.is_empty() && self.gate.preloaded_counts(&subject) {
                tracing::info!(%namespace, %principal, chain = %top, preloaded = preloaded.len(), "decided with layers the namespace held unpacked before pullgate knew them (preloaded)");
            }
            Ok(())
        })?;
        Ok(top)
    }

    fn own_lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, OwnExtraction>> {
        self.own.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers an unpack step of pullgate's own pull in `namespace`: key name `name`
    /// (`extract-<uuid> <chain>`), target `chain` on `parent_chain` ("" for the base layer).
    pub fn begin_own_extraction(&self, namespace: &str, name: &str, chain: &str, parent_chain: &str) -> OwnExtractionGuard<'_> {
        let o = OwnExtraction { namespace: namespace.into(), chain: chain.into(), parent_chain: parent_chain.into(), id: None, applied: false };
        self.own_lock().insert(name.to_string(), o);
        OwnExtractionGuard { snap: self, name: name.to_string() }
    }

    /// The own extraction that backend key `key` names, if any.
    fn own_extraction(&self, key: &str) -> Option<OwnExtraction> {
        self.own_lock().get(name_of_key(key)).cloned()
    }

    /// Binds a registered own extraction to the snapshot its Prepare is creating (directory
    /// `id`). Only its first Prepare, in its namespace, is pullgate's: any other is refused.
    fn bind_own_extraction(&self, key: &str, id: u64) -> Result<()> {
        let mut own = self.own_lock();
        if let Some(o) = own.get_mut(name_of_key(key)) {
            if o.id.is_some() || namespace_of_key(key).unwrap_or_default() != o.namespace {
                return Err(SnapshotterError::FailedPrecondition(format!("snapshot {key:?} is being unpacked by pullgate")));
            }
            o.id = Some(id);
        }
        Ok(())
    }

    /// Directory ids of `parent` and its ancestors, nearest first.
    fn chain(get: impl Fn(&str) -> std::result::Result<Option<Record>, StoreError>, parent: &str) -> Result<Vec<u64>> {
        Ok(Self::ancestors(get, parent)?.into_iter().map(|(_, r)| r.id).collect())
    }

    /// `key` and its ancestors with their records, nearest first.
    fn ancestors(get: impl Fn(&str) -> std::result::Result<Option<Record>, StoreError>, key: &str) -> Result<Vec<(String, Record)>> {
        let mut out = Vec::new();
        let mut next = key.to_string();
        while !next.is_empty() {
            let r = get(&next)?.ok_or_else(|| {
                SnapshotterError::Store(StoreError::Corrupt { key: next.clone(), reason: "ancestor missing".into() })
            })?;
            let parent = r.parent.clone();
            out.push((next, r));
            next = parent;
        }
        Ok(out)
    }

    pub fn prepare(&self, key: &str, parent: &str, labels: Labels, ns_hint: Option<&str>) -> Result<Vec<Mount>> {
        self.create(Kind::Active, key, parent, labels, ns_hint)
    }

    pub fn view(&self, key: &str, parent: &str, labels: Labels, ns_hint: Option<&str>) -> Result<Vec<Mount>> {
        self.create(Kind::View, key, parent, labels, ns_hint)
    }

    fn create(&self, kind: Kind, key: &str, parent: &str, labels: Labels, ns_hint: Option<&str>) -> Result<Vec<Mount>> {
        validate_key("key", key)?;
        if !parent.is_empty() {
            validate_key("parent", parent)?;
        }
        validate_labels(&labels)?;
        let namespace = namespace_of_key(key).or(ns_hint).unwrap_or_default().to_string();
        if kind == Kind::View && self.admission_only.contains(&namespace) && is_restore_mount(name_of_key(key)) {
            // The restore then pulls the image the checkpoint names and files it under a name
            // of its choosing, which another pod could then run as its own.
            return Err(SnapshotterError::FailedPrecondition(
                "pullgate refuses to restore a container from a checkpoint image: containerd would pull and name another image itself".into(),
            ));
        }
        let target = extract_target(kind, key);
        let (principal, admitted) = self.principal_of(kind, target.is_some(), &namespace, key, parent, &labels)?;
        tracing::debug!(%namespace, key, parent, ?kind, %principal, target = target.as_deref().unwrap_or(""), "create snapshot");
        let _g = self.read_lock();

        // Everything that can refuse the request is decided in one read transaction before any
        // disk work: the parent, the key, and the gate (which needs the ledger only). A grant
        // revoked between this decision and the insert below orders the Prepare before the
        // revoke, as if it had arrived a moment earlier.
        let subject = Subject { namespace: &namespace, principal: &principal };
        let mut unrecorded = false;
        // An unpack step applying a layer pullgate has no record of: where the protected-layer
        // log stood, so that a layer it learns of later is known to have been here before.
        let mut unknown_at = None;
        let (parent_id, chain) = self.store.read(|tx| -> Result<_> {
            let (parent_id, parent_chain) = match parent {
                "" => (None, ChainInfo::default()),
                p => {
                    let r = tx.get(p)?.ok_or_else(|| SnapshotterError::NotFound(p.into()))?;
                    if r.kind != Kind::Committed {
                        return Err(SnapshotterError::InvalidArgument(format!("parent {parent:?} is not a committed snapshot")));
                    }
                    (Some(r.id), Self::parent_chain(p, r))
                }
            };
            let chain = match &target {
                Some(t) => {
                    let hints = Self::layer_hints(tx, &labels)?;
                    // Decided on the parent's chain as it reads now (the layers its steps applied
                    // unknown looked up again), recorded as its own steps recorded it.
                    // The chain is the one its name gives (containerd computes the target from
                    // it), whatever snapshots below it were renamed.
                    let now_parent = match parent {
                        "" => parent_chain.clone(),
                        p => ChainInfo { chain_id: parent_chain.chain_id.clone(), unestablished: parent_chain.unestablished, ..self.chain_for_use(tx, p)? },
                    };
                    let decided = self.gate.extract_hinted(tx, &subject, &now_parent, t, &hints)?;
                    let next = Self::recorded_step(&parent_chain, &now_parent, decided);
                    unrecorded = crate::ledger::chain(tx, t)?.is_none();
                    if next.unknown_layers > parent_chain.unknown_layers {
                        unknown_at = Some(crate::ledger::protected_log_last(tx)?);
                    }
                    // An authorised unpack of a chain that pullgate's own pull unpacked (in any
                    // namespace): containerd adopts it. Only then does containerd look for the
                    // snapshot, so a snapshot a client made is never offered.
                    if labels.get(SNAPSHOT_REF_LABEL) == Some(t) && Self::find_own_chain(tx, t, parent)?.is_some() {
                        return Err(SnapshotterError::AlreadyExists(format!("target {t}")));
                    }
                    next
                }
                None => {
                    self.gate.use_chain(tx, &subject, &self.chain_for_use(tx, parent)?)?;
                    ChainInfo { chain_id: String::new(), preloaded: vec![], ..parent_chain }
                }
            };
            // After the gate: an existing key answers nothing before the gate has decided.
            if tx.get(key)?.is_some() {
                return Err(SnapshotterError::AlreadyExists(key.into()));
            }
            Ok((parent_id, chain))
        })?;
        let staged = self.layout.stage(kind, parent_id)?;
        let installed = Cell::new(None);
        let result = self.store.write(|tx| {
            if tx.get(key)?.is_some() {
                return Err(SnapshotterError::AlreadyExists(key.into()));
            }
            let parents = Self::chain(|k| tx.get(k), parent)?;
            if parents.first().copied() != parent_id {
                return Err(SnapshotterError::FailedPrecondition(format!("parent {parent:?} changed during prepare")));
            }
            let id = tx.next_id()?;
            let now = now_nanos();
            let rec = Record {
                id,
                kind,
                parent: parent.to_string(),
                labels,
                created: now,
                updated: now,
                size: 0,
                inodes: 0,
                namespace: namespace.clone(),
                chain_id: chain.chain_id,
                diff_ids: chain.diff_ids,
                unknown_layers: chain.unknown_layers,
            };
            self.bind_own_extraction(key, id)?;
            tx.put(key, &rec)?;
            if let Some(seq) = unknown_at {
                tx.set_unknown_at(key, seq)?;
            }
            // Only while the admission is still on offer: a CreateContainer that ended meanwhile
            // (its guard dropped unsettled) takes the principal back, and must not be outrun.
            // A container's rootfs stays unchecked until the front's check (a Prepare of any
            // container ID's key may take it); an image volume's key names its pod and a
            // `-remap` copy is made on the rootfs admission without taking it: bound by
            // their keys, they keep their principal whatever becomes of the creation.
            if admitted.is_some_and(|id| self.admission_listed(id)) {
                tx.set_admitted(key, &principal, is_container_id(name_of_key(key)) && !crate::defence::off(crate::defence::Defence::Unchecked))?;
            }
            self.layout.install(&staged, id)?;
            installed.set(Some(id));
            crate::crashpoint::hit("snapshot.prepare-installed");
            Ok(self.layout.mounts(kind, id, &parents))
        });
        if result.is_err() {
            match installed.get() {
                Some(id) => self.layout.uninstall(id),
                None => self.layout.discard(staged),
            }
        }
        if let (Ok(_), Some(t), true) = (&result, &target, unrecorded) {
            // An unpack of a chain the ledger does not record: its next step will be on this
            // chain, so the chain index builds its table while containerd applies this layer.
            self.gate.index.prefetch(&self.store, &namespace, t);
        }
        result
    }

    /// Layers an unpack step's labels say it applies, as diffIDs: containerd 2.4's unpacker
    /// labels the layer's diffID; CRI (with snapshot annotations on) labels its blob, which
    /// counts only through the layer ID pullgate computed for that blob. Claims all: the gate
    /// uses one only where the chain arithmetic confirms it.
    fn layer_hints(tx: &crate::metastore::ReadTx, labels: &Labels) -> Result<Vec<String>> {
        let mut out = Vec::new();
        if let Some(d) = labels.get(DIFF_ID_LABEL).filter(|d| crate::reference::is_digest(d)) {
            out.push(d.clone());
        }
        if let Some(b) = labels.get(LAYER_DIGEST_LABEL).filter(|b| crate::reference::is_digest(b)) {
            out.extend(crate::ledger::pairing(tx, b)?);
        }
        Ok(out)
    }

    /// The record of an unpack step on a parent recorded as `recorded` and decided as it reads
    /// now (`now`), the gate's answer being `decided`: the recorded parent's layers, and the
    /// applied layer when the gate knew it, else one more unknown one.
    fn recorded_step(recorded: &ChainInfo, now: &ChainInfo, decided: ChainInfo) -> ChainInfo {
        let mut next = ChainInfo { chain_id: decided.chain_id, diff_ids: recorded.diff_ids.clone(), unknown_layers: recorded.unknown_layers, ..Default::default() };
        match (decided.diff_ids.len() > now.diff_ids.len(), decided.diff_ids.last()) {
            (true, Some(d)) => next.diff_ids.push(d.clone()),
            _ => next.unknown_layers += 1,
        }
        next
    }

    /// What the gate takes as the chain under a new container or view on committed snapshot
    /// `key` ("" for none): its recorded chain ([`Self::parent_chain`]), with each layer one of
    /// its unpack steps applied while pullgate had no record of it looked up again (pullgate may
    /// know it now, as private), and marked preloaded when it entered the protected-layer log
    /// after that step (the namespace held it before pullgate knew it). A chain whose steps
    /// pullgate cannot follow keeps its record's reading, marked `unfollowed` for the gate.
    fn chain_for_use(&self, tx: &crate::metastore::ReadTx, key: &str) -> Result<ChainInfo> {
        self.chain_for_use_hinted(tx, key, &[])
    }

    /// [`Self::chain_for_use`], `hints` being the chain's layers as a caller claims them (the
    /// arithmetic confirms each).
    fn chain_for_use_hinted(&self, tx: &crate::metastore::ReadTx, key: &str, hints: &[String]) -> Result<ChainInfo> {
        if key.is_empty() {
            return Ok(ChainInfo::default());
        }
        let r = tx.get(key)?.ok_or_else(|| SnapshotterError::NotFound(key.into()))?;
        let thorough = self.gate.looks_up_thoroughly(&r.namespace);
        let namespace = r.namespace.clone();
        let recorded = Self::parent_chain(key, r);
        if recorded.unknown_layers == 0 {
            return Ok(recorded);
        }
        Ok(match self.unknown_steps_looked_up(tx, &namespace, key, hints, thorough)? {
            Some(c) => ChainInfo { unestablished: recorded.unestablished, ..c },
            None => ChainInfo { unfollowed: true, ..recorded },
        })
    }

    /// The chain of committed snapshot `key` read step by step from the base: a step that
    /// applied a known layer adds it, one that applied a layer pullgate had no record of adds
    /// the protected layer the gate now finds for it (preloaded if it entered the protected-layer
    /// log after the step), or stays unknown; a snapshot that added no layer (a copy, a commit
    /// of a container's changes) adds nothing. None when a step is not one pullgate can follow.
    fn unknown_steps_looked_up(&self, tx: &crate::metastore::ReadTx, namespace: &str, key: &str, hints: &[String], thorough: bool) -> Result<Option<ChainInfo>> {
        let steps = Self::ancestors(|k| tx.get(k), key)?;
        let mut out = ChainInfo::default();
        let (mut known, mut unknown) = (0usize, 0u32);
        // A snapshot that added no layer and whose chain cannot be established lies below: an
        // unpack on top of it did its arithmetic from another chain than the walk's.
        let mut base_lost = false;
        for (k, r) in steps.into_iter().rev() {
            let (added_known, added_unknown) = (r.diff_ids.len().checked_sub(known), r.unknown_layers.checked_sub(unknown));
            let (rec_known, rec_unknown) = (r.diff_ids.len(), r.unknown_layers);
            let applied = r.diff_ids.last().cloned();
            let step = Self::parent_chain(&k, r);
            match (added_known, added_unknown) {
                // No layer added (a copy, a container's changes committed): its name, when it is
                // a chainID, is the chain the next unpack on it is computed from.
                (Some(0), Some(0)) => {
                    match step.unestablished || step.chain_id.is_empty() {
                        true => base_lost = true,
                        false => (out.chain_id, base_lost) = (step.chain_id, false),
                    }
                    continue;
                }
                _ if base_lost || step.unestablished || step.chain_id.is_empty() => return Ok(None),
                (Some(1), Some(0)) => {
                    let Some(d) = applied.filter(|d| crate::ledger::chain_id(&out.chain_id, d) == step.chain_id) else { return Ok(None) };
                    out.diff_ids.push(d);
                }
                (Some(0), Some(1)) => match self.gate.layer_of_step(tx, namespace, &out.chain_id, &step.chain_id, hints, thorough)? {
                    Some(d) => {
                        let since = crate::ledger::protected_since(tx, &d)?;
                        if let (Some(at), Some(since)) = (tx.unknown_at(&k)?, since) {
                            if since > at {
                                out.preloaded.push(d.clone());
                            }
                        }
                        out.diff_ids.push(d);
                    }
                    None => out.unknown_layers += 1,
                },
                _ => return Ok(None),
            }
            (known, unknown) = (rec_known, rec_unknown);
            out.chain_id = step.chain_id;
        }
        Ok(Some(out))
    }

    /// What the gate may take as the chain of committed snapshot `key`: the chain recorded when
    /// it was prepared as an unpack step, and its committed name when that is a chainID (as
    /// containerd's unpackers name them, and compute the next layer's target from). When
    /// neither gives one, or they disagree, the chain is unestablished.
    fn parent_chain(key: &str, r: Record) -> ChainInfo {
        let name = name_of_key(key);
        let named = crate::reference::is_digest(name).then_some(name);
        let chain_id = match (r.chain_id.as_str(), named) {
            ("", Some(n)) => Some(n.to_string()),
            (c, Some(n)) if c != n => None,
            ("", None) => None,
            (c, _) => Some(c.to_string()),
        };
        ChainInfo {
            unestablished: chain_id.is_none(),
            chain_id: chain_id.unwrap_or_default(),
            diff_ids: r.diff_ids,
            unknown_layers: r.unknown_layers,
            preloaded: vec![],
            unfollowed: false,
        }
    }

    /// For each layer chain, whether pullgate holds it committed as its own pull unpacked it,
    /// on any parent (an unpack that reaches it adopts it, without the layer's blob); one read.
    pub fn holds_own_chains(&self, chains: &[String]) -> std::result::Result<Vec<bool>, StoreError> {
        self.store.read(|tx| chains.iter().map(|c| Self::own_chain_on(tx, c, None).map(|k| k.is_some())).collect())
    }

    /// A committed snapshot on `parent` that pullgate's own pull unpacked as chain `target`
    /// and labelled so (containerd's adoption looks it up by the label).
    fn find_own_chain(tx: &crate::metastore::ReadTx, target: &str, parent: &str) -> Result<Option<String>> {
        Ok(Self::own_chain_on(tx, target, Some(parent))?)
    }

    /// The key of a committed snapshot pullgate's own pull unpacked as chain `target`, on
    /// `parent` (any parent with None).
    fn own_chain_on(tx: &crate::metastore::ReadTx, target: &str, parent: Option<&str>) -> std::result::Result<Option<String>, StoreError> {
        for (k, r) in tx.own_with_chain(target)? {
            if r.kind == Kind::Committed && parent.is_none_or(|p| r.parent == p) {
                return Ok(Some(k));
            }
        }
        Ok(None)
    }

    pub fn mounts(&self, key: &str) -> Result<Vec<Mount>> {
        if self.own_extraction(key).is_some() {
            return Err(SnapshotterError::FailedPrecondition(format!(
                "snapshot {key:?} is being unpacked by pullgate: it cannot be mounted until it is committed"
            )));
        }
        self.store.read(|tx| {
            let r = tx.get(key)?.ok_or_else(|| SnapshotterError::NotFound(key.into()))?;
            if r.kind == Kind::Committed {
                return Err(SnapshotterError::FailedPrecondition(format!(
                    "snapshot {key:?} is committed: only active and view snapshots have mounts"
                )));
            }
            // Mounts is what a task start asks for: the gate decides again, so a container
            // prepared while a grant was fresh does not start once it is revoked or aged out.
            let principal = match self.admission_only.contains(&r.namespace) {
                true => tx.admitted(key)?.unwrap_or_default(),
                false => r.labels.get(PRINCIPAL_LABEL).cloned().unwrap_or_default(),
            };
            // A container or view: its parent's chain, as a new one on it would be decided; an
            // unpack step: its own chain, as it reads now; a snapshot on nothing: its record.
            let chain = match (extract_target(r.kind, key).is_some(), r.parent.is_empty()) {
                // An unpack step: its chain, itself included, as it reads now.
                (true, _) => self.chain_for_use(tx, key)?,
                (false, false) => self.chain_for_use(tx, &r.parent)?,
                (false, true) => ChainInfo { diff_ids: r.diff_ids.clone(), unknown_layers: r.unknown_layers, ..Default::default() },
            };
            if !crate::defence::off(crate::defence::Defence::Mounts) {
                self.gate.use_chain(tx, &Subject { namespace: &r.namespace, principal: &principal }, &chain)?;
            }
            let parents = Self::chain(|k| tx.get(k), &r.parent)?;
            Ok(self.layout.mounts(r.kind, r.id, &parents))
        })
    }

    pub fn commit(&self, name: &str, key: &str, labels: Labels) -> Result<()> {
        validate_key("name", name)?;
        validate_labels(&labels)?;
        let own = self.own_extraction(key);
        if let Some(o) = &own {
            let ns = namespace_of_key(key).unwrap_or_default();
            if !o.applied || o.namespace != ns || name_of_key(name) != o.chain || namespace_of_key(name).unwrap_or_default() != ns {
                return Err(SnapshotterError::FailedPrecondition(format!(
                    "snapshot {key:?} is being unpacked by pullgate: only pullgate commits it, as {}, once its layer is checked",
                    o.chain
                )));
            }
        }
        self.store.write(|tx| {
            let r = tx.get(key)?.ok_or_else(|| SnapshotterError::NotFound(key.into()))?;
            if r.kind != Kind::Active {
                return Err(SnapshotterError::FailedPrecondition(format!("snapshot {key:?} is not active")));
            }
            if tx.get(name)?.is_some() {
                return Err(SnapshotterError::AlreadyExists(name.into()));
            }
            if own.as_ref().is_some_and(|o| o.id != Some(r.id)) {
                return Err(SnapshotterError::FailedPrecondition(format!("snapshot {key:?} is not the one pullgate prepared and unpacked")));
            }
            let (size, inodes) = self.layout.usage(r.id)?;
            // containerd's user-namespace copy of a chain (prepared as `<id>-remap` under a CRI
            // admission, committed as `<id>`): a container on it is decided as that chain.
            let remap_of = match name_of_key(key).strip_suffix("-remap") {
                Some(id) if id == name_of_key(name) && !r.parent.is_empty() && tx.admitted(key)?.is_some() => Some(name_of_key(&r.parent).to_string()),
                _ => None,
            };
            let unknown_at = tx.unknown_at(key)?;
            tx.delete(key)?;
            if let Some(seq) = unknown_at {
                tx.set_unknown_at(name, seq)?;
            }
            if let Some(chain) = &remap_of {
                tx.set_remap_of(name, chain)?;
            }
            let now = now_nanos();
            // pullgate's own unpack of a verified layer, on nothing or on its own chain: the
            // one kind of snapshot another namespace may adopt.
            let own_chain = match &own {
                Some(o) if r.parent.is_empty() && o.parent_chain.is_empty() => Some(o.chain.clone()),
                Some(o) if !r.parent.is_empty() && tx.own_chain(&r.parent)?.as_deref() == Some(o.parent_chain.as_str()) => Some(o.chain.clone()),
                Some(o) => {
                    tracing::info!(key, chain = %o.chain, "own unpack on a parent pullgate did not unpack: kept in its namespace only");
                    None
                }
                None => None,
            };
            let rec = Record { kind: Kind::Committed, labels, created: now, updated: now, size, inodes, ..r };
            if let Some(c) = &own_chain {
                if rec.labels.get(SNAPSHOT_REF_LABEL) == Some(c) && rec.chain_id == *c {
                    tx.set_own_chain(name, c)?;
                }
            }
            tx.put(name, &rec)?;
            crate::crashpoint::hit("snapshot.commit-staged");
            Ok(())
        })
    }

    pub fn remove(&self, key: &str) -> Result<()> {
        let _g = self.read_lock();
        let retired = Cell::new(None);
        let result = self.store.write(|tx| {
            let r = tx.get(key)?.ok_or_else(|| SnapshotterError::NotFound(key.into()))?;
            if tx.has_children(key)? {
                return Err(SnapshotterError::FailedPrecondition(format!(
                    "cannot remove snapshot {key:?}: other snapshots have it as parent"
                )));
            }
            tx.delete(key)?;
            self.layout.retire(r.id)?;
            retired.set(Some(r.id));
            crate::crashpoint::hit("snapshot.remove-retired");
            Ok(r.id)
        });
        match result {
            Ok(id) => {
                self.layout.purge(id);
                Ok(())
            }
            Err(e) => {
                if let Some(id) = retired.get() {
                    self.layout.unretire(id);
                }
                Err(e)
            }
        }
    }

    pub fn stat(&self, key: &str) -> Result<Info> {
        let r = self.store.read(|tx| tx.get(key))?.ok_or_else(|| SnapshotterError::NotFound(key.into()))?;
        Ok(info_of(key, &r))
    }

    /// Updates the labels of `info.name`. `paths` as in containerd: empty (replace all labels),
    /// `labels` (replace all) or `labels.<key>` (set, or delete when absent from `info`).
    pub fn update(&self, info: &Info, paths: &[String]) -> Result<Info> {
        for p in paths {
            if p != "labels" && !p.starts_with("labels.") {
                return Err(SnapshotterError::InvalidArgument(format!(
                    "cannot update {p:?} of snapshot {:?}: only labels are mutable",
                    info.name
                )));
            }
        }
        self.store.write(|tx| {
            let mut r = tx.get(&info.name)?.ok_or_else(|| SnapshotterError::NotFound(info.name.clone()))?;
            if paths.is_empty() {
                r.labels = info.labels.clone();
            }
            for p in paths {
                match p.strip_prefix("labels.") {
                    None => r.labels = info.labels.clone(),
                    Some(k) => match info.labels.get(k) {
                        Some(v) => {
                            r.labels.insert(k.to_string(), v.clone());
                        }
                        None => {
                            r.labels.remove(k);
                        }
                    },
                }
            }
            validate_labels(&r.labels)?;
            if let Some(c) = tx.own_chain(&info.name)? {
                if r.labels.get(SNAPSHOT_REF_LABEL) != Some(&c) {
                    return Err(SnapshotterError::FailedPrecondition(format!(
                        "snapshot {:?} is layer chain {c} as pullgate unpacked it: its {SNAPSHOT_REF_LABEL} label cannot change",
                        info.name
                    )));
                }
            }
            r.updated = now_nanos();
            tx.put(&info.name, &r)?;
            Ok(info_of(&info.name, &r))
        })
    }

    /// Every snapshot matching any of `filters` (all when empty), collected; see
    /// [`Snapshotter::walk_batches`], which List streams from.
    pub fn walk(&self, filters: &[String]) -> Result<Vec<Info>> {
        let mut out = Vec::new();
        self.walk_batches(filters, &mut |b| {
            out.extend(b);
            true
        })?;
        Ok(out)
    }

    /// Hands every snapshot matching any of `filters` (all when empty) to `sink`, in key order,
    /// a batch at a time (at most [`WALK_BATCH`] snapshots or about [`WALK_BATCH_BYTES`] of
    /// labels), each batch read in its own read transaction from where the last one stopped, so
    /// that a Walk of every snapshot (containerd's GC makes one) holds one batch, not every
    /// record. `sink` returns false to stop. A snapshot created or removed during the walk is
    /// seen or not, as with any snapshotter whose Walk runs beside writes.
    pub fn walk_batches(&self, filters: &[String], sink: &mut dyn FnMut(Vec<Info>) -> bool) -> Result<()> {
        let filters = filter::parse_all(filters)?;
        // containerd's unpacker asks by snapshot.ref label: when every filter names one, read
        // only the snapshots carrying those values.
        let is_ref = |p: &[String]| p.first().is_some_and(|f| f == "labels") && p[1..].join(".") == SNAPSHOT_REF_LABEL;
        let by_ref: Option<Vec<&str>> =
            (!filters.is_empty()).then(|| filters.iter().map(|f| f.required_eq(is_ref)).collect::<Option<Vec<_>>>()).flatten();
        if let Some(targets) = by_ref {
            // A walk by `containerd.io/snapshot.ref` is containerd's adoption lookup (its own
            // listings Stat each key instead), which takes the first committed match from any
            // namespace: it sees pullgate's own chains only, never a snapshot a client labelled.
            let own = self.store.read(|tx| -> Result<Vec<(String, Record)>> {
                let mut own = Vec::new();
                for t in targets.iter().collect::<std::collections::BTreeSet<_>>() {
                    own.extend(tx.own_with_chain(t)?);
                }
                Ok(own)
            })?;
            let infos: Vec<Info> = own.into_iter().map(|(k, r)| info_of_owned(&k, r)).filter(|i| filter::matches_any(&filters, i)).collect();
            for b in infos.chunks(WALK_BATCH) {
                if !sink(b.to_vec()) {
                    break;
                }
            }
            return Ok(());
        }
        let mut cursor: Option<String> = None;
        loop {
            let (mut batch, mut bytes, mut examined, mut more) = (Vec::new(), 0usize, 0usize, false);
            let after = cursor.take();
            self.store.read(|tx| {
                tx.each_snapshot("", after.as_deref(), &mut |k, r| {
                    examined += 1;
                    let i = info_of_owned(k, r);
                    if filter::matches_any(&filters, &i) {
                        bytes += i.labels.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
                        batch.push(i);
                    }
                    if batch.len() >= WALK_BATCH || bytes >= WALK_BATCH_BYTES || examined >= WALK_SCAN {
                        cursor = Some(k.to_string());
                        more = true;
                        return Ok(std::ops::ControlFlow::Break(()));
                    }
                    Ok(std::ops::ControlFlow::Continue(()))
                })
            })?;
            if !batch.is_empty() && !sink(batch) {
                return Ok(());
            }
            if !more {
                return Ok(());
            }
        }
    }

    /// (bytes, inodes): measured now for an active snapshot, as recorded at commit otherwise.
    pub fn usage(&self, key: &str) -> Result<(i64, i64)> {
        let r = self.store.read(|tx| tx.get(key))?.ok_or_else(|| SnapshotterError::NotFound(key.into()))?;
        match r.kind {
            Kind::Active => self.layout.usage(r.id),
            _ => Ok((r.size, r.inodes)),
        }
    }

    /// Removes every directory that no snapshot references; returns how many.
    pub fn cleanup(&self) -> Result<usize> {
        let _g = self.cleanup_lock.write().unwrap_or_else(|p| p.into_inner());
        // The ids only (8 bytes a snapshot), read one record at a time.
        let mut ids: HashSet<u64> = HashSet::new();
        self.store.read(|tx| {
            tx.each_snapshot("", None, &mut |_, r| {
                ids.insert(r.id);
                Ok(std::ops::ControlFlow::Continue(()))
            })
        })?;
        self.layout.remove_orphans(&ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger;

    fn snap() -> (tempfile::TempDir, Snapshotter) {
        let dir = tempfile::tempdir().unwrap();
        let s = Snapshotter::open(dir.path(), Driver::Overlay { index_off: false }, std::sync::Arc::new(Gate::new(Default::default()))).unwrap();
        (dir, s)
    }

    #[test]
    fn namespace_from_key() {
        assert_eq!(namespace_of_key("default/12/extract-1 sha256:ab"), Some("default"));
        assert_eq!(namespace_of_key("k8s.io/3//abs/path"), Some("k8s.io"));
        assert_eq!(namespace_of_key("default/x/key"), None);
        assert_eq!(namespace_of_key("plainkey"), None);
        assert_eq!(namespace_of_key("/tmp/a/b"), None);
    }

    #[test]
    fn bad_keys_and_labels_are_refused() {
        let (dir, s) = snap();
        for k in ["", "a\0b", "../x", "a/../../etc", "x\ny"] {
            assert!(matches!(s.prepare(k, "", Labels::new(), None), Err(SnapshotterError::InvalidArgument(_))), "{k:?}");
        }
        let big = Labels::from([("k".to_string(), "v".repeat(MAX_LABEL_SIZE))]);
        assert!(matches!(s.prepare("a", "", big, None), Err(SnapshotterError::InvalidArgument(_))));
        assert!(s.walk(&[]).unwrap().is_empty());
        let entries: Vec<_> = std::fs::read_dir(dir.path().join("snapshots")).unwrap().collect();
        assert!(entries.is_empty(), "refused requests left {entries:?}");
    }

    #[test]
    fn lifecycle_and_error_classes() {
        let (dir, s) = snap();
        s.prepare("a", "", Labels::new(), None).unwrap();
        assert!(matches!(s.prepare("a", "", Labels::new(), None), Err(SnapshotterError::AlreadyExists(_))));
        assert!(matches!(s.prepare("b", "nope", Labels::new(), None), Err(SnapshotterError::NotFound(_))));
        assert!(matches!(s.prepare("b", "a", Labels::new(), None), Err(SnapshotterError::InvalidArgument(_))));
        s.commit("c", "a", Labels::new()).unwrap();
        assert!(matches!(s.commit("c2", "a", Labels::new()), Err(SnapshotterError::NotFound(_))));
        assert!(matches!(s.commit("c3", "c", Labels::new()), Err(SnapshotterError::FailedPrecondition(_))));
        let m = s.prepare("d", "c", Labels::new(), None).unwrap();
        assert!(m[0].options.iter().any(|o| o.starts_with("upperdir=")), "{m:?}");
        assert!(matches!(s.remove("c"), Err(SnapshotterError::FailedPrecondition(_))));
        assert!(matches!(s.mounts("c"), Err(SnapshotterError::FailedPrecondition(_))));
        s.remove("d").unwrap();
        s.remove("c").unwrap();
        assert!(s.walk(&[]).unwrap().is_empty());
        assert_eq!(std::fs::read_dir(dir.path().join("snapshots")).unwrap().count(), 0);
    }

    #[test]
    fn cleanup_removes_orphans_only() {
        let (dir, s) = snap();
        s.prepare("a", "", Labels::new(), None).unwrap();
        let snaps = dir.path().join("snapshots");
        std::fs::create_dir(snaps.join("new-crashed")).unwrap();
        std::fs::create_dir(snaps.join("999")).unwrap();
        assert_eq!(s.cleanup().unwrap(), 2);
        assert_eq!(std::fs::read_dir(&snaps).unwrap().count(), 1);
        s.mounts("a").unwrap();
        // A removal that died after renaming the directory but before its metadata commit:
        // the snapshot still exists, so its directory comes back; a committed removal's goes.
        let id = std::fs::read_dir(&snaps).unwrap().next().unwrap().unwrap().file_name();
        let id = id.to_str().unwrap();
        std::fs::write(snaps.join(id).join("fs/kept"), b"x").unwrap();
        std::fs::rename(snaps.join(id), snaps.join(format!("rm-{id}"))).unwrap();
        std::fs::create_dir(snaps.join("rm-999")).unwrap();
        assert_eq!(s.cleanup().unwrap(), 1);
        assert!(snaps.join(id).join("fs/kept").exists());
        assert!(!snaps.join("rm-999").exists());
    }

    #[test]
    fn snapshot_ref_lookups_follow_labels() {
        let (_d, s) = snap();
        let refl = |t: &str| Labels::from([(SNAPSHOT_REF_LABEL.to_string(), t.to_string())]);
        let names = |t: &str| {
            let mut v: Vec<String> = s.store.read(|tx| tx.with_ref(t)).unwrap().into_iter().map(|(k, _)| k).collect();
            v.sort();
            v
        };
        s.prepare("a", "", refl("t1"), None).unwrap();
        s.commit("A", "a", refl("t1")).unwrap();
        s.prepare("b", "A", refl("t2"), None).unwrap();
        s.prepare("c", "A", refl("t2"), None).unwrap();
        assert_eq!(names("t1"), vec!["A"]);
        assert_eq!(names("t2"), vec!["b", "c"]);
        // A walk by snapshot.ref (containerd's adoption lookup) sees no snapshot a client made.
        assert!(s.walk(&[r#"labels."containerd.io/snapshot.ref"==t1"#.into()]).unwrap().is_empty());
        // OR-ed filters, one of which names no snapshot.ref, read everything.
        let both = s.walk(&[r#"labels."containerd.io/snapshot.ref"==t1"#.into(), "name==c".into()]).unwrap();
        assert_eq!(both.len(), 2);
        // Relabelling and removal keep the index in step.
        let mut i = s.stat("b").unwrap();
        i.labels = refl("t3");
        s.update(&i, &["labels".into()]).unwrap();
        assert_eq!(names("t2"), vec!["c"]);
        assert_eq!(names("t3"), vec!["b"]);
        s.remove("c").unwrap();
        assert!(names("t2").is_empty());
        // Adoption offers none of these: a client made them, whatever their labels say.
        s.store.read(|tx| -> Result<()> {
            assert_eq!(Snapshotter::find_own_chain(tx, "t1", "")?, None);
            assert_eq!(Snapshotter::find_own_chain(tx, "t3", "A")?, None);
            Ok(())
        })
        .unwrap();
    }

    fn dg(c: char) -> String {
        format!("sha256:{}", c.to_string().repeat(64))
    }

    /// pullgate's own unpack of chain `chain` on `parent` (a backend key) in namespace `ns`,
    /// committed as `<ns>/<seq>/<chain>`; returns that key.
    fn own_unpack(s: &Snapshotter, ns: &str, seq: u32, chain: &str, parent: &str, parent_chain: &str) -> String {
        let name = format!("extract-{seq} {chain}");
        let key = format!("{ns}/{seq}/{name}");
        let refl = Labels::from([(SNAPSHOT_REF_LABEL.to_string(), chain.to_string())]);
        let own = s.begin_own_extraction(ns, &name, chain, parent_chain);
        s.prepare(&key, parent, refl.clone(), None).unwrap();
        // Nobody mounts or commits it before pullgate checked the applied layer.
        assert!(matches!(s.mounts(&key), Err(SnapshotterError::FailedPrecondition(_))));
        let committed = format!("{ns}/{}/{chain}", seq + 1);
        assert!(matches!(s.commit(&committed, &key, refl.clone()), Err(SnapshotterError::FailedPrecondition(_))));
        own.applied();
        // ...and then only under its chain's name.
        assert!(matches!(s.commit(&format!("{ns}/{}/other", seq + 1), &key, refl.clone()), Err(SnapshotterError::FailedPrecondition(_))));
        s.commit(&committed, &key, refl).unwrap();
        drop(own);
        committed
    }

    #[test]
    fn only_pullgates_own_unpacks_are_offered_to_other_namespaces() {
        let (_d, s) = snap();
        let (c1, c2) = (dg('a'), ledger::chain_id(&dg('a'), &dg('b')));
        let refl = |t: &str| Labels::from([(SNAPSHOT_REF_LABEL.to_string(), t.to_string())]);
        // A client's snapshots claiming chain c1: a relabelled one, and a hand-filled extraction
        // committed under the chain's name. Keys sort before the own chain's.
        s.prepare("B/1/poison", "", Labels::new(), None).unwrap();
        s.commit("B/2/poisoned", "B/1/poison", refl(&c1)).unwrap();
        s.prepare(&format!("B/3/extract-x {c1}"), "", refl(&c1), None).unwrap();
        s.commit(&format!("B/4/{c1}"), &format!("B/3/extract-x {c1}"), refl(&c1)).unwrap();
        s.store.read(|tx| -> Result<()> {
            assert_eq!(Snapshotter::find_own_chain(tx, &c1, "")?, None, "a client's snapshot is never adopted");
            Ok(())
        })
        .unwrap();
        // An extract Prepare in V is not answered ALREADY_EXISTS: V extracts its own.
        s.prepare(&format!("V/1/extract-y {c1}"), "", refl(&c1), None).unwrap();
        // pullgate's own unpack in A.
        let a1 = own_unpack(&s, "A", 10, &c1, "", "");
        let a2 = own_unpack(&s, "A", 20, &c2, &a1, &c1);
        s.store.read(|tx| -> Result<()> {
            assert_eq!(Snapshotter::find_own_chain(tx, &c1, "")?, Some(a1.clone()));
            assert_eq!(Snapshotter::find_own_chain(tx, &c2, &a1)?, Some(a2.clone()));
            assert_eq!(Snapshotter::find_own_chain(tx, &c2, "")?, None, "on its own parent only");
            Ok(())
        })
        .unwrap();
        assert!(matches!(s.prepare(&format!("W/1/extract-z {c1}"), "", refl(&c1), None), Err(SnapshotterError::AlreadyExists(_))));
        // containerd takes the first committed match of its Walk: it sees the own chain only.
        let found = s.walk(&[format!(r#"labels."containerd.io/snapshot.ref"=={c1},parent=="""#)]).unwrap();
        assert_eq!(found.into_iter().map(|i| i.name).collect::<Vec<_>>(), vec![a1.clone()]);
        // Its label cannot be changed (by any namespace that adopted it), others can.
        let mut i = s.stat(&a1).unwrap();
        i.labels.insert(SNAPSHOT_REF_LABEL.into(), dg('z'));
        assert!(matches!(s.update(&i, &["labels".into()]), Err(SnapshotterError::FailedPrecondition(_))));
        i.labels.insert(SNAPSHOT_REF_LABEL.into(), c1.clone());
        i.labels.insert("containerd.io/snapshot/x".into(), "1".into());
        s.update(&i, &["labels.containerd.io/snapshot/x".into()]).unwrap();
        // An own unpack on a parent a client made stays in its namespace.
        let b = own_unpack(&s, "B", 30, &c2, &format!("B/4/{c1}"), &c1);
        s.store.read(|tx| -> Result<()> {
            assert_eq!(tx.own_chain(&b)?, None);
            assert_eq!(tx.own_chain(&a2)?, Some(c2.clone()));
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn an_own_extraction_recreated_by_a_client_is_not_pullgates() {
        let (_d, s) = snap();
        let c1 = dg('a');
        let refl = Labels::from([(SNAPSHOT_REF_LABEL.to_string(), c1.clone())]);
        let name = format!("extract-u {c1}");
        let own = s.begin_own_extraction("A", &name, &c1, "");
        s.prepare(&format!("A/1/{name}"), "", refl.clone(), None).unwrap();
        // A client of namespace A removes it and prepares the same key again (to fill it by
        // hand): refused, and so is the same name in another namespace.
        s.remove(&format!("A/1/{name}")).unwrap();
        assert!(matches!(s.prepare(&format!("A/2/{name}"), "", refl.clone(), None), Err(SnapshotterError::FailedPrecondition(_))));
        assert!(matches!(s.prepare(&format!("B/2/{name}"), "", refl.clone(), None), Err(SnapshotterError::FailedPrecondition(_))));
        own.applied();
        drop(own);
        // Re-registered (as a retried pull would) and prepared again by a client before pullgate:
        // pullgate's Prepare is refused, so the client's snapshot is never committed as its own.
        let own = s.begin_own_extraction("A", &name, &c1, "");
        s.prepare(&format!("A/3/{name}"), "", refl.clone(), None).unwrap();
        s.remove(&format!("A/3/{name}")).unwrap();
        assert!(s.prepare(&format!("A/4/{name}"), "", refl.clone(), None).is_err());
        own.applied();
        drop(own);
        s.store.read(|tx| -> Result<()> {
            assert_eq!(Snapshotter::find_own_chain(tx, &c1, "")?, None);
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn the_parent_chain_comes_from_the_record_or_the_committed_name() {
        let (_d, s) = snap();
        let c1 = dg('a');
        // Committed outside an unpack under a chainID name: the name is the chain.
        s.prepare("B/1/x", "", Labels::new(), None).unwrap();
        s.commit(&format!("B/2/{c1}"), "B/1/x", Labels::new()).unwrap();
        // Under another name: unestablished.
        s.prepare("B/3/y", "", Labels::new(), None).unwrap();
        s.commit("B/4/made-up", "B/3/y", Labels::new()).unwrap();
        // An unpack step committed under a name that is not its chain: unestablished.
        s.prepare(&format!("B/5/extract-1 {c1}"), "", Labels::new(), None).unwrap();
        s.commit(&format!("B/6/{}", dg('c')), &format!("B/5/extract-1 {c1}"), Labels::new()).unwrap();
        s.store.read(|tx| -> Result<()> {
            let pc = |k: &str| Snapshotter::parent_chain(k, tx.get(k).unwrap().unwrap());
            assert_eq!((pc(&format!("B/2/{c1}")).chain_id, pc(&format!("B/2/{c1}")).unestablished), (c1.clone(), false));
            assert!(pc("B/4/made-up").unestablished);
            assert!(pc(&format!("B/6/{}", dg('c'))).unestablished);
            Ok(())
        })
        .unwrap();
        // So nothing is unpacked onto those two, whatever the layer.
        let t = ledger::chain_id("B/4/made-up", &dg('b'));
        let e = s.prepare(&format!("B/7/extract-2 {t}"), "B/4/made-up", Labels::new(), None).unwrap_err();
        assert!(matches!(e, SnapshotterError::Gate(_)), "{e}");
        // A container on top of them is the use check's business, as before.
        s.prepare("B/8/ctr", "B/4/made-up", Labels::new(), None).unwrap();
    }

    /// containerd 2.x's checkpoint restore views the checkpoint image's chain on a temporary
    /// directory, then pulls and names another image itself: refused where the CRI front serves.
    #[test]
    fn a_checkpoint_restore_view_is_refused_in_front_namespaces() {
        assert!(is_restore_mount("/tmp/checkpoint1234567"));
        assert!(is_restore_mount("/var/tmp/x/checkpoint9"));
        assert!(!is_restore_mount("checkpoint12"));
        assert!(!is_restore_mount("/tmp/checkpoint"));
        assert!(!is_restore_mount("/tmp/checkpoint12a"));
        let dir = tempfile::tempdir().unwrap();
        let s = Snapshotter::open(dir.path(), Driver::Overlay { index_off: false }, std::sync::Arc::new(Gate::new(Default::default())))
            .unwrap()
            .with_admission_only(["k8s.io".to_string()]);
        let chain = dg('c');
        for ns in ["k8s.io", "default"] {
            s.prepare(&format!("{ns}/1/base"), "", Labels::new(), None).unwrap();
            s.commit(&format!("{ns}/2/{chain}"), &format!("{ns}/1/base"), Labels::new()).unwrap();
        }
        let e = s.view("k8s.io/3//tmp/checkpoint4242", &format!("k8s.io/2/{chain}"), Labels::new(), None).unwrap_err();
        assert!(e.to_string().contains("checkpoint"), "{e}");
        s.view("k8s.io/4//tmp/other", &format!("k8s.io/2/{chain}"), Labels::new(), None).unwrap();
        s.view("default/3//tmp/checkpoint4242", &format!("default/2/{chain}"), Labels::new(), None).unwrap();
    }

    #[test]
    fn an_admission_the_front_never_checked_does_not_outlive_the_process() {
        let dir = tempfile::tempdir().unwrap();
        let open = || {
            Snapshotter::open(dir.path(), Driver::Overlay { index_off: false }, std::sync::Arc::new(Gate::new(Default::default())))
                .unwrap()
                .with_admission_only(["k8s.io".to_string()])
        };
        let chain = dg('c');
        let parent = format!("k8s.io/2/{chain}");
        let (checked, unchecked) = (format!("k8s.io/3/{}", "1".repeat(64)), format!("k8s.io/4/{}", "2".repeat(64)));
        {
            let s = std::sync::Arc::new(open());
            s.prepare("k8s.io/1/base", "", Labels::new(), None).unwrap();
            s.commit(&parent, "k8s.io/1/base", Labels::new()).unwrap();
            let a = s.admit("k8s.io", &chain, "team-b", AdmissionFor::Rootfs, None);
            s.prepare(&checked, &parent, Labels::new(), None).unwrap();
            s.admissions_checked(&[a.consumer().unwrap()]).unwrap();
            a.settle();
            drop(a);
            let b = s.admit("k8s.io", &chain, "team-c", AdmissionFor::Rootfs, None);
            s.prepare(&unchecked, &parent, Labels::new(), None).unwrap();
            // The process is killed here, before the front checked the creation: nothing
            // withdraws the principal (the guard made to keep it, as a kill would).
            b.settle();
            drop(b);
            let admitted = |k: &str| s.store.read(|tx| -> Result<_> { Ok(tx.admitted(k)?) }).unwrap();
            assert_eq!((admitted(&checked).as_deref(), admitted(&unchecked).as_deref()), (Some("team-b"), Some("team-c")));
            // An image volume's Prepare, bound to its pod by its key, keeps its principal even
            // when its creation goes unchecked (the pod reuses the mounted volume).
            let v = s.admit("k8s.io", &chain, "team-d", AdmissionFor::Volume { sandbox: "sb".into() }, None);
            s.prepare(VOLUME_KEY, &parent, Labels::new(), None).unwrap();
            drop(v);
            assert_eq!(admitted(VOLUME_KEY).as_deref(), Some("team-d"));
        }
        let s = open();
        let admitted = |k: &str| s.store.read(|tx| -> Result<_> { Ok(tx.admitted(k)?) }).unwrap();
        assert_eq!(admitted(&checked).as_deref(), Some("team-b"), "a checked admission's principal stays");
        assert_eq!(admitted(&unchecked), None, "an unchecked one is taken back at the next start");
        assert_eq!(admitted(VOLUME_KEY).as_deref(), Some("team-d"), "an image volume's stays");
        assert!(s.volume_admitted("k8s.io", "sb", &chain, "team-d").unwrap());
    }
    const VOLUME_KEY: &str = "k8s.io/5//state/image-volumes/sb/img";

    #[test]
    fn admissions_give_the_principal_once_and_labels_do_not_in_front_namespaces() {
        let dir = tempfile::tempdir().unwrap();
        let s = Snapshotter::open(dir.path(), Driver::Overlay { index_off: false }, std::sync::Arc::new(Gate::new(Default::default())))
            .unwrap()
            .with_admission_only(["k8s.io".to_string()]);
        let s = std::sync::Arc::new(s);
        let chain = dg('c');
        let id = |c: char| c.to_string().repeat(64);
        s.prepare("k8s.io/1/base", "", Labels::new(), None).unwrap();
        s.commit(&format!("k8s.io/2/{chain}"), "k8s.io/1/base", Labels::new()).unwrap();
        let parent = format!("k8s.io/2/{chain}");
        let admitted = |k: &str| s.store.read(|tx| -> Result<_> { Ok(tx.admitted(k)?) }).unwrap();
        // A pod author's label names a principal: ignored, nothing admitted.
        let label = Labels::from([(PRINCIPAL_LABEL.to_string(), "team-a".to_string())]);
        let c1 = format!("k8s.io/3/{}", id('1'));
        s.prepare(&c1, &parent, label.clone(), None).unwrap();
        assert_eq!(admitted(&c1), None);
        {
            let a = s.admit("k8s.io", &chain, "team-b", AdmissionFor::Rootfs, None);
            let other = s.admit("k8s.io", &dg('d'), "team-x", AdmissionFor::Rootfs, None);
            // Prepares the front did not decide never consume it: not a container ID's key,
            // another pod's image volume.
            s.prepare("k8s.io/4/not-a-container", &parent, Labels::new(), None).unwrap();
            s.prepare("k8s.io/5//state/image-volumes/sandbox-x/abc", &parent, Labels::new(), None).unwrap();
            assert_eq!((admitted("k8s.io/4/not-a-container"), admitted("k8s.io/5//state/image-volumes/sandbox-x/abc")), (None, None));
            // A pod sandbox's Prepare (its key is a 64-hex ID too, on the same chain when the
            // pod's container runs the sandbox image) never takes it.
            let sb = format!("k8s.io/13/{}", id('9'));
            s.prepare(&sb, &parent, Labels::from([(SANDBOX_LABEL.to_string(), "true".to_string())]), None).unwrap();
            assert_eq!((admitted(&sb), a.consumer()), (None, None));
            let c2 = format!("k8s.io/6/{}", id('2'));
            s.prepare(&c2, &parent, label.clone(), None).unwrap();
            assert_eq!(admitted(&c2).as_deref(), Some("team-b"));
            assert_eq!((a.consumer(), other.consumer()), (Some(c2.clone()), None));
            // Single use: the next container on the chain gets nothing.
            let c3 = format!("k8s.io/7/{}", id('3'));
            s.prepare(&c3, &parent, Labels::new(), None).unwrap();
            assert_eq!(admitted(&c3), None);
            a.settle();
        }
        assert_eq!(admitted(&format!("k8s.io/6/{}", id('2'))).as_deref(), Some("team-b"), "a settled admission's principal stays");
        {
            // A creation that ends before the front checked it (its caller gone): the Prepare
            // that consumed the admission loses its principal.
            let _a = s.admit("k8s.io", &chain, "team-b", AdmissionFor::Rootfs, None);
            let c7 = format!("k8s.io/14/{}", id('7'));
            s.prepare(&c7, &parent, Labels::new(), None).unwrap();
            assert_eq!(admitted(&c7).as_deref(), Some("team-b"));
            drop(_a);
            assert_eq!(admitted(&c7), None, "taken back when the guard goes unsettled");
        }
        // Dropped guards withdraw their admissions, consumed or not.
        assert!(s.admission_lock().is_empty());
        {
            // An image volume of pod "sb" and its rootfs on the same image: each Prepare takes
            // its own admission.
            let root = s.admit("k8s.io", &chain, "team-b", AdmissionFor::Rootfs, None);
            let vol = s.admit("k8s.io", &chain, "team-b", AdmissionFor::Volume { sandbox: "sb".into() }, None);
            let v = "k8s.io/8//state/image-volumes/sb/0123";
            s.prepare(v, &parent, Labels::new(), None).unwrap();
            let c4 = format!("k8s.io/9/{}", id('4'));
            s.prepare(&c4, &parent, Labels::new(), None).unwrap();
            assert_eq!((vol.consumer().as_deref(), root.consumer()), (Some(v), Some(c4.clone())));
            assert_eq!(admitted(v).as_deref(), Some("team-b"));
            // The front takes a principal back from a Prepare that took an admission not its own.
            s.withdraw_admitted(&c4).unwrap();
            assert_eq!(admitted(&c4), None);
            assert!(s.volume_admitted("k8s.io", "sb", &chain, "team-b").unwrap());
            assert!(!s.volume_admitted("k8s.io", "sb", &chain, "team-x").unwrap());
            assert!(!s.volume_admitted("k8s.io", "other", &chain, "team-b").unwrap());
        }
        {
            // A user-namespace pod: containerd's copy of the chain is prepared under the rootfs
            // admission without consuming it, and the container on the copy consumes it.
            let released = std::sync::Arc::new(());
            let a = s.admit("k8s.io", &chain, "team-u", AdmissionFor::Rootfs, Some(Box::new(released.clone())));
            let copy = dg('r');
            s.prepare(&format!("k8s.io/10/{copy}-remap"), &parent, Labels::new(), None).unwrap();
            assert_eq!(admitted(&format!("k8s.io/10/{copy}-remap")).as_deref(), Some("team-u"));
            assert_eq!(a.consumer(), None);
            s.commit(&format!("k8s.io/11/{copy}"), &format!("k8s.io/10/{copy}-remap"), Labels::new()).unwrap();
            assert_eq!(std::sync::Arc::strong_count(&released), 2, "held until the rootfs is prepared");
            let c5 = format!("k8s.io/12/{}", id('5'));
            s.prepare(&c5, &format!("k8s.io/11/{copy}"), Labels::new(), None).unwrap();
            assert_eq!((a.consumer(), admitted(&c5).as_deref()), (Some(c5.clone()), Some("team-u")));
            assert_eq!(std::sync::Arc::strong_count(&released), 1, "released by the consuming Prepare");
        }
        {
            let a = s.admit("k8s.io", &chain, "team-b", AdmissionFor::Rootfs, None);
            // Another namespace's container on a chain of that name does not consume it.
            s.prepare("other/1/base", "", Labels::new(), None).unwrap();
            s.commit(&format!("other/2/{chain}"), "other/1/base", Labels::new()).unwrap();
            s.prepare(&format!("other/3/{}", id('6')), &format!("other/2/{chain}"), Labels::new(), None).unwrap();
            assert_eq!(a.consumer(), None);
        }
        let c2 = format!("k8s.io/6/{}", id('2'));
        s.remove(&c2).unwrap();
        assert_eq!(admitted(&c2), None, "removed with its snapshot");
        // Outside the front's namespaces the label is the principal, as before.
        assert!(matches!(s.prepare("other/4/c", &format!("other/2/{chain}"), Labels::from([(PRINCIPAL_LABEL.to_string(), "a/../b".to_string())]), None),
            Err(SnapshotterError::InvalidArgument(_))));
    }

    #[test]
    fn layers_unpacked_before_pullgate_knew_them_are_looked_up_again_and_preloaded_only_where_no_principal_could_have_put_them() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = crate::gate::GateConfig { require_principal: ["t".to_string()].into(), no_preloaded: ["t".to_string()].into(), ..Default::default() };
        let s = Snapshotter::open(dir.path(), Driver::Overlay { index_off: false }, std::sync::Arc::new(Gate::new(cfg))).unwrap();
        let (a, b) = (dg('a'), dg('b'));
        let (c1, c2) = (ledger::chain_id("", &a), ledger::chain_id(&ledger::chain_id("", &a), &b));
        // Namespaces n (no principals) and t (principals required) unpack an image pullgate
        // has no record of (a plain ctr pull): both layers unknown.
        let unpack = |ns: &str| {
            s.prepare(&format!("{ns}/1/extract-1 {c1}"), "", Labels::new(), None).unwrap();
            s.commit(&format!("{ns}/2/{c1}"), &format!("{ns}/1/extract-1 {c1}"), Labels::new()).unwrap();
            s.prepare(&format!("{ns}/3/extract-2 {c2}"), &format!("{ns}/2/{c1}"), Labels::new(), None).unwrap();
            s.commit(&format!("{ns}/4/{c2}"), &format!("{ns}/3/extract-2 {c2}"), Labels::new()).unwrap();
        };
        unpack("n");
        unpack("t");
        // Then pullgate learns both layers as private (a credentialed pull of the same image),
        // and principal p1 of t holds a grant for it.
        s.store
            .write(|tx| -> std::result::Result<(), ledger::LedgerError> {
                for (blob, layer) in [('1', &a), ('2', &b)] {
                    ledger::record_pairing(tx, &crate::diffid::Verified::for_test(&dg(blob), layer))?;
                    ledger::record_blob(tx, &dg(blob), "reg:5000/x", "hmac-sha256:a", 1)?;
                }
                let rec = ledger::ManifestRec { layers: vec![dg('1'), dg('2')], diff_ids: vec![a.clone(), b.clone()], ..Default::default() };
                ledger::record_manifest(tx, &dg('m'), &rec)?;
                ledger::put_grant(tx, "t", "p1", "reg:5000/x", &dg('m'), "hmac-sha256:a", now_nanos())?;
                Ok(())
            })
            .unwrap();
        let p = |who: &str| Labels::from([(PRINCIPAL_LABEL.to_string(), who.to_string())]);
        // n held the layers before pullgate knew them: preloaded there, no grant needed.
        s.prepare("n/5/c", &format!("n/4/{c2}"), Labels::new(), None).unwrap();
        s.mounts("n/5/c").unwrap();
        // In t a principal may have pulled them itself: the layers are looked up again and p2,
        // without a grant, is refused the chain p1 unpacked; p1 runs it.
        let e = s.prepare("t/5/c", &format!("t/4/{c2}"), p("p2"), None).unwrap_err();
        assert!(e.to_string().contains("no grant"), "{e}");
        s.prepare("t/6/c", &format!("t/4/{c2}"), p("p1"), None).unwrap();
        s.mounts("t/6/c").unwrap();
        // An unpack-shaped snapshot on p1's chain (t may materialise: p1's grant is t's) is
        // decided at Mounts on its chain as it reads now: refused without a principal.
        let x = format!("t/7/extract-x {}", dg('e'));
        s.prepare(&x, &format!("t/4/{c2}"), Labels::new(), None).unwrap();
        let e = s.mounts(&x).unwrap_err();
        assert!(e.to_string().contains("requires a principal"), "{e}");
        // Committed under a name that is not its chain: the steps cannot be followed, and in t
        // that is refused rather than read as unknown.
        s.commit(&format!("t/8/{}", dg('d')), &x, Labels::new()).unwrap();
        let e = s.prepare("t/9/c", &format!("t/8/{}", dg('d')), p("p2"), None).unwrap_err();
        assert!(e.to_string().contains("cannot follow"), "{e}");
        // A namespace that unpacks them now that they are known needs a grant.
        let e = s.prepare(&format!("m/1/extract-1 {c1}"), "", Labels::new(), None).unwrap_err();
        assert!(e.to_string().contains("no grant"), "{e}");
        // The CRI front's decision reads the same: n's own snapshot of the chain makes them
        // preloaded; t's does not.
        assert_eq!(s.decide_container("n", "", &[a.clone(), b.clone()]).unwrap(), c2);
        assert!(s.decide_container("t", "p2", &[a.clone(), b.clone()]).is_err());
        // A container of n's chain committed under a chainID name, and the private layer b
        // unpacked on it: the unpack is decided on the chain the name gives, as containerd
        // computed its target, and refused (n holds no grant).
        s.prepare("n/20/k", &format!("n/2/{c1}"), Labels::new(), None).unwrap();
        let renamed = dg('f');
        s.commit(&format!("n/21/{renamed}"), "n/20/k", Labels::new()).unwrap();
        s.store.write(|tx| -> std::result::Result<(), ledger::LedgerError> {
            ledger::record_manifest(tx, &dg('0'), &ledger::ManifestRec { layers: vec![dg('2')], diff_ids: vec![b.clone()], ..Default::default() })?;
            Ok(())
        }).unwrap();
        let onto = ledger::chain_id(&renamed, &b);
        let e = s.prepare(&format!("n/22/extract-9 {onto}"), &format!("n/21/{renamed}"), Labels::new(), None).unwrap_err();
        assert!(e.to_string().contains("no grant"), "{e}");
        // A step recorded as unpacked after the layers entered the protected-layer log: looked
        // up again, not preloaded.
        s.store.write(|tx| -> Result<()> { Ok(tx.set_unknown_at(&format!("n/4/{c2}"), u64::MAX)?) }).unwrap();
        let e = s.prepare("n/6/c", &format!("n/4/{c2}"), Labels::new(), None).unwrap_err();
        assert!(e.to_string().contains("no grant"), "{e}");
    }

    /// Opens the snapshotter a test closed, once the chain index's worker let go of the store
    /// it was building a table from (a process opens its store once).
    fn reopen(dir: &Path, gate: std::sync::Arc<Gate>) -> Snapshotter {
        for _ in 0..500 {
            match Snapshotter::open(dir, Driver::Overlay { index_off: false }, gate.clone()) {
                Err(SnapshotterError::Store(StoreError::Db(redb::Error::DatabaseAlreadyOpen))) => std::thread::sleep(std::time::Duration::from_millis(10)),
                r => return r.unwrap(),
            }
        }
        panic!("the store stayed open");
    }

    #[test]
    fn always_verify_refuses_a_chain_with_unknown_steps() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dg('a'), dg('b'));
        let (c1, c2) = (ledger::chain_id("", &a), ledger::chain_id(&ledger::chain_id("", &a), &b));
        {
            let s = Snapshotter::open(dir.path(), Driver::Overlay { index_off: false }, std::sync::Arc::new(Gate::new(Default::default()))).unwrap();
            s.store
                .write(|tx| -> std::result::Result<(), ledger::LedgerError> {
                    ledger::record_pairing(tx, &crate::diffid::Verified::for_test(&dg('1'), &a))?;
                    ledger::record_blob(tx, &dg('1'), "reg:5000/x", crate::credential::ANONYMOUS, 1)?;
                    ledger::record_manifest(tx, &dg('m'), &ledger::ManifestRec { layers: vec![dg('1')], diff_ids: vec![a.clone()], ..Default::default() })?;
                    Ok(())
                })
                .unwrap();
            s.prepare(&format!("n/1/extract-1 {c1}"), "", Labels::new(), None).unwrap();
            s.commit(&format!("n/2/{c1}"), &format!("n/1/extract-1 {c1}"), Labels::new()).unwrap();
            s.prepare(&format!("n/3/extract-2 {c2}"), &format!("n/2/{c1}"), Labels::new(), None).unwrap();
            s.commit(&format!("n/4/{c2}"), &format!("n/3/extract-2 {c2}"), Labels::new()).unwrap();
            s.prepare("n/5/c", &format!("n/4/{c2}"), Labels::new(), None).unwrap();
        }
        let gate = std::sync::Arc::new(Gate::new(crate::gate::GateConfig { policy: crate::gate::Policy::AlwaysVerify, ..Default::default() }));
        let s = reopen(dir.path(), gate);
        let c = s.store.read(|tx| -> Result<_> { s.chain_for_use(tx, &format!("n/4/{c2}")) }).unwrap();
        assert_eq!((c.diff_ids.len(), c.unknown_layers), (1, 1), "{c:?}");
        let e = s.prepare("n/6/c", &format!("n/4/{c2}"), Labels::new(), None).unwrap_err();
        assert!(e.to_string().contains("no record"), "{e}");
        let e = s.mounts("n/5/c").unwrap_err();
        assert!(e.to_string().contains("no record"), "{e}");
    }

    #[test]
    fn always_verify_refuses_a_chain_of_unknown_steps_only() {
        let dir = tempfile::tempdir().unwrap();
        let ids: Vec<String> = ['a', 'b', 'c'].iter().map(|c| dg(*c)).collect();
        let chains = ledger::chain_ids(&ids);
        {
            let s = Snapshotter::open(dir.path(), Driver::Overlay { index_off: false }, std::sync::Arc::new(Gate::new(Default::default()))).unwrap();
            let mut parent = String::new();
            for (i, c) in chains.iter().enumerate() {
                let key = format!("n/{}/extract-{i} {c}", 2 * i + 1);
                s.prepare(&key, &parent, Labels::new(), None).unwrap();
                let name = format!("n/{}/{c}", 2 * i + 2);
                s.commit(&name, &key, Labels::new()).unwrap();
                parent = name;
            }
        }
        let gate = std::sync::Arc::new(Gate::new(crate::gate::GateConfig { policy: crate::gate::Policy::AlwaysVerify, ..Default::default() }));
        let s = reopen(dir.path(), gate);
        let top = format!("n/6/{}", chains[2]);
        let c = s.store.read(|tx| -> Result<_> { s.chain_for_use(tx, &top) }).unwrap();
        assert_eq!((c.diff_ids.len(), c.unknown_layers), (0, 3), "{c:?}");
        // Looked up from the ledger's chains only: no chain index table is built for a use
        // where a layer found there would change nothing.
        assert_eq!(s.gate.index.stats().built_in_decision, 0);
        let e = s.prepare("n/7/c", &top, Labels::new(), None).unwrap_err();
        assert!(e.to_string().contains("no record"), "{e}");
    }

    #[test]
    fn mounts_asks_the_gate_again() {
        let dir = tempfile::tempdir().unwrap();
        let gate = std::sync::Arc::new(Gate::new(crate::gate::GateConfig { policy: crate::gate::Policy::AlwaysVerify, ..Default::default() }));
        let s = reopen(dir.path(), gate);
        // A chain pullgate has no record of, prepared under NeverVerify's rules by a record
        // that says so: under AlwaysVerify its container may not start.
        s.prepare("n/1/base", "", Labels::new(), None).unwrap();
        s.store
            .write(|tx| -> Result<()> {
                let mut r = tx.get("n/1/base")?.unwrap();
                r.unknown_layers = 1;
                tx.put("n/1/base", &r)?;
                Ok(())
            })
            .unwrap();
        let e = s.mounts("n/1/base").unwrap_err();
        assert!(matches!(e, SnapshotterError::Gate(_)), "{e}");
    }

    #[test]
    fn unpacks_of_unrecorded_chains_are_decided_by_arithmetic_not_labels() {
        let (_d, s) = snap();
        // Private layer b (blob 1) of another tenant's image; public layer c (blob 2).
        s.store
            .write(|tx| -> std::result::Result<(), ledger::LedgerError> {
                for (blob, layer, m, who) in [('1', 'b', '3', "hmac-sha256:a"), ('2', 'c', '4', crate::credential::ANONYMOUS)] {
                    ledger::record_pairing(tx, &crate::diffid::Verified::for_test(&dg(blob), &dg(layer)))?;
                    ledger::record_blob(tx, &dg(blob), "reg:5000/x", who, 1)?;
                    let rec = ledger::ManifestRec { layers: vec![dg(blob)], diff_ids: vec![dg(layer)], ..Default::default() };
                    ledger::record_manifest(tx, &dg(m), &rec)?;
                }
                Ok(())
            })
            .unwrap();
        // An unknown base x, committed under its chainID (a client's own unpack).
        let x = dg('e');
        s.prepare(&format!("B/1/extract-0 {x}"), "", Labels::new(), None).unwrap();
        s.commit(&format!("B/2/{x}"), &format!("B/1/extract-0 {x}"), Labels::new()).unwrap();
        // Its unpack was allowed and its chain is not recorded: x's table is built ahead.
        s.gate.index.settle();
        assert_eq!(s.gate.index.stats().built_ahead, 1);
        // Private b on x, with containerd 2.4's diff-id label and CRI's blob label lying (they
        // name the public layer): refused, by the table built ahead.
        let t = ledger::chain_id(&x, &dg('b'));
        let lies = Labels::from([(DIFF_ID_LABEL.to_string(), dg('c')), (LAYER_DIGEST_LABEL.to_string(), dg('2')), (SNAPSHOT_REF_LABEL.to_string(), t.clone())]);
        let e = s.prepare(&format!("B/3/extract-1 {t}"), &format!("B/2/{x}"), lies, None).unwrap_err();
        assert!(matches!(&e, SnapshotterError::Gate(_)) && e.to_string().contains(&dg('b')), "{e}");
        assert_eq!((s.gate.index.stats().hits, s.gate.index.stats().built_in_decision), (1, 0));
        // The labels telling the truth refuse it too, without the table.
        let truth = Labels::from([(DIFF_ID_LABEL.to_string(), dg('b')), (LAYER_DIGEST_LABEL.to_string(), dg('1'))]);
        assert!(matches!(s.prepare(&format!("B/4/extract-2 {t}"), &format!("B/2/{x}"), truth, None), Err(SnapshotterError::Gate(_))));
        assert_eq!(s.gate.index.stats().hits, 1);
        // An unknown layer f on x is allowed (the default policy), with or without labels.
        let u = ledger::chain_id(&x, &dg('f'));
        s.prepare(&format!("B/5/extract-3 {u}"), &format!("B/2/{x}"), Labels::from([(DIFF_ID_LABEL.to_string(), dg('f'))]), None).unwrap();
    }

    #[test]
    fn walks_come_in_batches_in_key_order_with_every_match() {
        let (_d, s) = snap();
        let big = "v".repeat(3000);
        for i in 0..1234 {
            let mut l = Labels::from([("n".to_string(), (i % 7).to_string())]);
            if i % 100 == 0 {
                // Large labels: a batch ends on bytes before it reaches WALK_BATCH.
                for j in 0..20 {
                    l.insert(format!("big.{j}"), big.clone());
                }
            }
            s.prepare(&format!("ns/{i}/k{i:05}"), "", l, None).unwrap();
        }
        let mut keys: Vec<String> = (0..1234).map(|i| format!("ns/{i}/k{i:05}")).collect();
        keys.sort();
        for (filters, want) in [
            (vec![], keys.clone()),
            (vec!["labels.n==3".to_string()], keys.iter().filter(|k| k[k.len() - 5..].parse::<usize>().unwrap() % 7 == 3).cloned().collect()),
            (vec!["labels.n==3".to_string(), "name~=k0000".to_string()], keys.iter().filter(|k| { let i = k[k.len() - 5..].parse::<usize>().unwrap(); i % 7 == 3 || i < 10 }).cloned().collect()),
            (vec!["kind==committed".to_string()], vec![]),
        ] {
            let mut got = Vec::new();
            let mut sizes = Vec::new();
            s.walk_batches(&filters, &mut |b| {
                let bytes: usize = b.iter().flat_map(|i| i.labels.iter()).map(|(k, v)| k.len() + v.len()).sum();
                sizes.push((b.len(), bytes));
                got.extend(b.into_iter().map(|i| i.name));
                true
            })
            .unwrap();
            assert_eq!(got, want, "{filters:?}");
            assert!(sizes.iter().all(|&(n, bytes)| n > 0 && n <= WALK_BATCH && bytes < WALK_BATCH_BYTES + MAX_LABELS_TOTAL), "{sizes:?}");
            assert_eq!(s.walk(&filters).unwrap().into_iter().map(|i| i.name).collect::<Vec<_>>(), want);
        }
        // A sink that stops is asked for nothing more.
        let mut calls = 0;
        s.walk_batches(&[], &mut |_| {
            calls += 1;
            false
        })
        .unwrap();
        assert_eq!(calls, 1);
        // A malformed filter is refused.
        assert!(matches!(s.walk_batches(&["==".into()], &mut |_| true), Err(SnapshotterError::Filter(_))));
    }

    #[test]
    fn the_snapshot_ref_label_does_not_make_a_prepare_an_unpack() {
        assert_eq!(extract_target(Kind::Active, "ns/1/ctr-1"), None);
        assert_eq!(extract_target(Kind::Active, &format!("ns/1/extract-9 {}", dg('a'))), Some(dg('a')));
        assert_eq!(extract_target(Kind::View, &format!("ns/1/extract-9 {}", dg('a'))), None);
    }

    #[test]
    fn update_field_paths() {
        let (_d, s) = snap();
        s.prepare("a", "", Labels::from([("x".into(), "1".into()), ("y".into(), "2".into())]), None).unwrap();
        let mut i = s.stat("a").unwrap();
        i.labels = Labels::from([("x".into(), "9".into())]);
        let out = s.update(&i, &["labels.x".into(), "labels.y".into()]).unwrap();
        assert_eq!(out.labels, Labels::from([("x".into(), "9".into())]));
        assert!(matches!(s.update(&i, &["parent".into()]), Err(SnapshotterError::InvalidArgument(_))));
        assert!(out.updated > out.created);
    }
}
