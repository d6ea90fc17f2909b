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
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::RwLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// containerd's limit for one label (key plus value), `labels.Validate`.
pub const MAX_LABEL_SIZE: usize = 4096;
/// Limit for all labels of one snapshot together, so a client cannot bloat the metadata.
pub const MAX_LABELS_TOTAL: usize = 64 * 1024;
/// Longest key accepted.
pub const MAX_KEY_SIZE: usize = 4096;
/// The label through which a client names the principal (pod) inside a namespace.
pub const PRINCIPAL_LABEL: &str = "containerd.io/snapshot/pullgate.principal";
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
    store: MetaStore,
    layout: Layout,
    gate: std::sync::Arc<Gate>,
    /// Cleanup takes it exclusively so that no staged directory is mistaken for garbage.
    cleanup_lock: RwLock<()>,
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

/// A principal names a pod or workload inside a namespace: printable, no path separators.
pub fn validate_principal(p: &str) -> Result<()> {
    if p.len() > 253 || p.chars().any(|c| c.is_control() || c == '/' || c.is_whitespace()) {
        return Err(SnapshotterError::InvalidArgument(format!(
            "invalid principal {p:?}: at most 253 printable characters, no whitespace or '/'"
        )));
    }
    Ok(())
}

/// The target chainID when this request is an unpack step: containerd's unpackers prepare
/// `extract-<random> <chainID>` and set `containerd.io/snapshot.ref` to it.
pub fn extract_target(kind: Kind, key: &str, labels: &Labels) -> Option<String> {
    if kind != Kind::Active {
        return None;
    }
    if let Some(t) = labels.get(SNAPSHOT_REF_LABEL) {
        return Some(t.clone());
    }
    let name = match namespace_of_key(key) {
        Some(ns) => key[ns.len() + 1..].split_once('/').map(|(_, rest)| rest).unwrap_or(key),
        None => key,
    };
    let rest = name.strip_prefix("extract-")?;
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
        let store = MetaStore::open(&root.join("metadata.redb"))?;
        store.write(crate::ledger::upgrade)?;
        let s = Snapshotter { store, layout, gate, cleanup_lock: RwLock::new(()) };
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

    fn read_lock(&self) -> std::sync::RwLockReadGuard<'_, ()> {
        self.cleanup_lock.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Directory ids of `parent` and its ancestors, nearest first.
    fn chain(get: impl Fn(&str) -> std::result::Result<Option<Record>, StoreError>, parent: &str) -> Result<Vec<u64>> {
        let mut ids = Vec::new();
        let mut next = parent.to_string();
        while !next.is_empty() {
            let r = get(&next)?.ok_or_else(|| {
                SnapshotterError::Store(StoreError::Corrupt { key: next.clone(), reason: "ancestor missing".into() })
            })?;
            ids.push(r.id);
            next = r.parent;
        }
        Ok(ids)
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
        let principal = labels.get(PRINCIPAL_LABEL).cloned().unwrap_or_default();
        validate_principal(&principal)?;
        let target = extract_target(kind, key, &labels);
        tracing::debug!(%namespace, key, parent, ?kind, %principal, target = target.as_deref().unwrap_or(""), "create snapshot");
        let _g = self.read_lock();

        // Everything that can refuse the request is decided in one read transaction before any
        // disk work: the parent, the key, and the gate (which needs the ledger only). A grant
        // revoked between this decision and the insert below orders the Prepare before the
        // revoke, as if it had arrived a moment earlier.
        let subject = Subject { namespace: &namespace, principal: &principal };
        let (parent_id, chain) = self.store.read(|tx| -> Result<_> {
            let (parent_id, parent_chain) = match parent {
                "" => (None, ChainInfo::default()),
                p => {
                    let r = tx.get(p)?.ok_or_else(|| SnapshotterError::NotFound(p.into()))?;
                    if r.kind != Kind::Committed {
                        return Err(SnapshotterError::InvalidArgument(format!("parent {parent:?} is not a committed snapshot")));
                    }
                    (Some(r.id), ChainInfo { chain_id: r.chain_id, diff_ids: r.diff_ids, unknown_layers: r.unknown_layers })
                }
            };
            if tx.get(key)?.is_some() {
                return Err(SnapshotterError::AlreadyExists(key.into()));
            }
            let chain = match &target {
                Some(t) => {
                    let next = self.gate.extract(tx, &subject, &parent_chain, t)?;
                    // An authorised unpack of a chain pullgate already holds: containerd adopts it.
                    if labels.get(SNAPSHOT_REF_LABEL) == Some(t) && Self::find_committed(tx, t, parent)?.is_some() {
                        return Err(SnapshotterError::AlreadyExists(format!("target {t}")));
                    }
                    next
                }
                None => {
                    self.gate.use_chain(tx, &subject, &parent_chain)?;
                    ChainInfo { chain_id: String::new(), ..parent_chain }
                }
            };
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
            tx.put(key, &rec)?;
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
        result
    }

    /// A committed snapshot carrying `containerd.io/snapshot.ref` = `target` on `parent`.
    fn find_committed(tx: &crate::metastore::ReadTx, target: &str, parent: &str) -> Result<Option<String>> {
        Ok(tx.with_ref(target)?.into_iter().find(|(_, r)| r.kind == Kind::Committed && r.parent == parent).map(|(k, _)| k))
    }

    pub fn mounts(&self, key: &str) -> Result<Vec<Mount>> {
        self.store.read(|tx| {
            let r = tx.get(key)?.ok_or_else(|| SnapshotterError::NotFound(key.into()))?;
            if r.kind == Kind::Committed {
                return Err(SnapshotterError::FailedPrecondition(format!(
                    "snapshot {key:?} is committed: only active and view snapshots have mounts"
                )));
            }
            let parents = Self::chain(|k| tx.get(k), &r.parent)?;
            Ok(self.layout.mounts(r.kind, r.id, &parents))
        })
    }

    pub fn commit(&self, name: &str, key: &str, labels: Labels) -> Result<()> {
        validate_key("name", name)?;
        validate_labels(&labels)?;
        self.store.write(|tx| {
            let r = tx.get(key)?.ok_or_else(|| SnapshotterError::NotFound(key.into()))?;
            if r.kind != Kind::Active {
                return Err(SnapshotterError::FailedPrecondition(format!("snapshot {key:?} is not active")));
            }
            if tx.get(name)?.is_some() {
                return Err(SnapshotterError::AlreadyExists(name.into()));
            }
            let (size, inodes) = self.layout.usage(r.id)?;
            tx.delete(key)?;
            let now = now_nanos();
            tx.put(name, &Record { kind: Kind::Committed, labels, created: now, updated: now, size, inodes, ..r })?;
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
            r.updated = now_nanos();
            tx.put(&info.name, &r)?;
            Ok(info_of(&info.name, &r))
        })
    }

    /// Every snapshot matching any of `filters` (all when empty).
    pub fn walk(&self, filters: &[String]) -> Result<Vec<Info>> {
        let filters = filter::parse_all(filters)?;
        // containerd's unpacker asks by snapshot.ref label: when every filter names one, read
        // only the snapshots carrying those values.
        let is_ref = |p: &[String]| p.first().is_some_and(|f| f == "labels") && p[1..].join(".") == SNAPSHOT_REF_LABEL;
        let by_ref: Option<Vec<&str>> =
            (!filters.is_empty()).then(|| filters.iter().map(|f| f.required_eq(is_ref)).collect::<Option<Vec<_>>>()).flatten();
        let all = self.store.read(|tx| match &by_ref {
            Some(targets) => {
                let mut out = Vec::new();
                for t in targets.iter().collect::<std::collections::BTreeSet<_>>() {
                    out.extend(tx.with_ref(t)?);
                }
                Ok(out)
            }
            None => tx.all(),
        })?;
        Ok(all
            .iter()
            .map(|(k, r)| info_of(k, r))
            .filter(|i| filter::matches_any(&filters, i))
            .collect())
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
        let ids: HashSet<u64> = self.store.read(|tx| tx.all())?.into_iter().map(|(_, r)| r.id).collect();
        self.layout.remove_orphans(&ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let names = |f: &str| {
            let mut v: Vec<String> = s.walk(&[f.to_string()]).unwrap().into_iter().map(|i| i.name).collect();
            v.sort();
            v
        };
        s.prepare("a", "", refl("t1"), None).unwrap();
        s.commit("A", "a", refl("t1")).unwrap();
        s.prepare("b", "A", refl("t2"), None).unwrap();
        s.prepare("c", "A", refl("t2"), None).unwrap();
        assert_eq!(names(r#"labels."containerd.io/snapshot.ref"==t1"#), vec!["A"]);
        assert_eq!(names(r#"labels."containerd.io/snapshot.ref"==t2,parent==A"#), vec!["b", "c"]);
        assert_eq!(names(r#"labels."containerd.io/snapshot.ref"==t2,name==c"#), vec!["c"]);
        // OR-ed filters, one of which names no snapshot.ref, read everything.
        let both = s.walk(&[r#"labels."containerd.io/snapshot.ref"==t1"#.into(), "name==c".into()]).unwrap();
        assert_eq!(both.len(), 2);
        // Relabelling and removal keep the index in step.
        let mut i = s.stat("b").unwrap();
        i.labels = refl("t3");
        s.update(&i, &["labels".into()]).unwrap();
        assert_eq!(names(r#"labels."containerd.io/snapshot.ref"==t2"#), vec!["c"]);
        assert_eq!(names(r#"labels."containerd.io/snapshot.ref"==t3"#), vec!["b"]);
        s.remove("c").unwrap();
        assert!(names(r#"labels."containerd.io/snapshot.ref"==t2"#).is_empty());
        // Adoption finds the committed one on its parent only.
        s.store.read(|tx| -> Result<()> {
            assert_eq!(Snapshotter::find_committed(tx, "t1", "")?, Some("A".to_string()));
            assert_eq!(Snapshotter::find_committed(tx, "t1", "A")?, None);
            assert_eq!(Snapshotter::find_committed(tx, "t3", "A")?, None, "active, not committed");
            Ok(())
        })
        .unwrap();
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
