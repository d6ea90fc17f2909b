//! metastore: the only module that touches redb. It owns the database (`<root>/metadata.redb`)
//! holding the snapshot metadata and the ledger (blob origins, manifests, layers, chains,
//! grants), and hands out read and write transactions whose methods speak in snapshots and
//! ledger collections, never in tables. One write transaction per logical change; a closure
//! that returns an error aborts its transaction, so nothing half-done is ever committed.
use redb::{ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Snapshot records by key: [`Record`], encoded as [`encode`] says.
const SNAPSHOTS: TableDefinition<&str, &[u8]> = TableDefinition::new("snapshots");
/// (parent key, child key) for every snapshot that has a parent.
const CHILDREN: TableDefinition<(&str, &str), ()> = TableDefinition::new("children");
/// (`containerd.io/snapshot.ref` label value, key) for every snapshot carrying that label: the
/// lookups of an unpack's adoption and of containerd's `labels."containerd.io/snapshot.ref"==X`
/// filter, without reading every record.
const SNAPSHOT_REFS: TableDefinition<(&str, &str), ()> = TableDefinition::new("snapshot_refs");
/// The label [`SNAPSHOT_REFS`] indexes.
pub const SNAPSHOT_REF_LABEL: &str = "containerd.io/snapshot.ref";
/// Marker (in COUNTERS) that SNAPSHOT_REFS holds every record written before it existed.
const SNAPSHOT_REFS_BUILT: &str = "snapshot_refs_index";
/// Committed snapshots that pullgate's own pull unpacked from blobs whose layer IDs it verified,
/// on a parent that is itself one (or none): key -> chainID. Written only by the snapshotter's
/// Commit of an extraction the puller registered and checked; no request, label or Update can
/// set or change it. Only these snapshots are offered to another namespace for adoption.
const OWN_CHAINS: TableDefinition<&str, &str> = TableDefinition::new("own_chains");
/// (chainID, key) for every entry of [`OWN_CHAINS`]: the snapshots offered for adoption of a
/// chain, read without the records of every snapshot a client labelled with that chain (a
/// tenant may label thousands). Rebuilt from OWN_CHAINS at every open, so that a version that
/// did not keep it (a rollback) leaves nothing stale.
const OWN_CHAIN_KEYS: TableDefinition<(&str, &str), ()> = TableDefinition::new("own_chain_keys");
/// Container snapshots prepared on the CRI front's admission: key -> the principal the front
/// decided for (the pod's). Written only by the Prepare that consumed the admission; no label,
/// request or Update can set or change it. Task start (Mounts) decides again with it.
const ADMITTED: TableDefinition<&str, &str> = TableDefinition::new("admitted_principals");
/// The keys of [`ADMITTED`] whose creation the CRI front has not checked to its end yet. The
/// front's check removes a key; one still here when pullgate starts belongs to a creation its
/// process did not live to check (killed), and its snapshot loses the admitted principal. (A
/// table that earlier versions do not read: a rollback ignores it.)
const ADMITTED_UNCHECKED: TableDefinition<&str, ()> = TableDefinition::new("admitted_unchecked");
/// containerd's user-namespace copies of a chain (CRI's `<id>-remap` Prepare on the chain under
/// the front's admission, committed as `<id>`): committed key -> the chain's name. Written only
/// by that Commit; a container prepared on the copy is decided as the chain.
const REMAPS: TableDefinition<&str, &str> = TableDefinition::new("remapped_chains");
/// Unpack steps whose layer pullgate had no record of when the gate let them apply it: key ->
/// the protected-layer log's last sequence number then (`ledger::protected_log_last`). Written
/// only by that Prepare, carried by its Commit; no request, label or Update can set or change
/// it. A layer that entered the log later was on the node before pullgate knew it.
const UNKNOWN_STEPS: TableDefinition<&str, u64> = TableDefinition::new("unknown_steps");
/// Named counters ("next_id", markers of one-time upgrades).
/// redb's page cache. Its default, 1 GiB, lets a Walk of every snapshot (containerd's GC makes
/// one) or a large ledger grow the daemon's resident memory with the database up to that; this
/// bounds it. 128 MiB holds the pages the gate reads at 100,000 blobs, 10,000 manifests and
/// 1,000 namespaces (`cargo bench --bench gate`): at 32 MiB the decisions' p99 doubled and a
/// chain index table took eight times as long to build, reading pages back from the file.
pub const CACHE_BYTES: usize = 128 * 1024 * 1024;
const COUNTERS: TableDefinition<&str, u64> = TableDefinition::new("counters");
/// Which format the database is in and which pullgate last opened it: `format` -> the number
/// ([`LEDGER_FORMAT`]), `opened_by` -> that pullgate's version. Read before anything is
/// written, so that a pullgate older than the database refuses it and changes nothing.
const FORMAT: TableDefinition<&str, &str> = TableDefinition::new("ledger_format");

/// The database's format. A version that stores something an older one would misread or
/// lose (a table's or value's meaning changed, a decision that depends on a table it does not
/// know) raises it; a version that only adds what an older one may ignore keeps it.
/// 1: databases of pullgate 0.1.0, which carry no [`FORMAT`] table.
/// 2: the [`FORMAT`] table itself; otherwise as 1.
pub const LEDGER_FORMAT: u64 = 2;

/// The ledger's collections. Values are encoded as [`encode`] says; composite keys join their
/// parts with NUL, which no validated name can contain.
#[derive(Debug, Clone, Copy)]
pub enum Collection {
    /// `digest NUL origin` -> who fetched the blob's bytes from that origin.
    BlobOrigins,
    /// manifest digest -> config, layers, diffIDs.
    Manifests,
    /// diffID -> compressed blobs, public flag, manifests containing it.
    Layers,
    /// chainID -> (parent chainID, diffID).
    Chains,
    /// `namespace NUL principal NUL origin NUL manifest` -> identity and time verified.
    Grants,
    /// diffID -> () for every layer that is not public: the keys the chainID test walks.
    Protected,
    /// `<16 hex digits of a sequence number>` -> diffID, appended whenever a layer enters
    /// `Protected`: which protected layers are newer than a chain index's table.
    ProtectedLog,
    /// blob digest -> its layer ID (diffID), as pullgate computed it from the blob's bytes
    /// (`diffid::Verified`); never from an image config.
    Pairings,
    /// `namespace NUL diffID NUL principal NUL origin NUL manifest` -> (): the grants whose
    /// manifest contains each layer, so that an unpack step reads the grants of the layers it
    /// decides, not every grant of the namespace (`ledger::grants_with_layer`).
    GrantLayers,
    /// diffID -> the sequence number under which the layer first entered `ProtectedLog`: when
    /// pullgate first knew it as private.
    ProtectedSince,
    /// `origin NUL name NUL manifest` -> (): every name a manifest was fetched as, with the
    /// origin that answered (a manifest's own record keeps a few, for messages).
    Names,
    /// `namespace NUL manifest` -> an image the operator marked preloaded in the namespace
    /// (`pullgate preload`): its reference, and its layers as pullgate established them.
    Preloads,
}

impl Collection {
    const ALL: [Collection; 12] = [
        Collection::BlobOrigins,
        Collection::Manifests,
        Collection::Layers,
        Collection::Chains,
        Collection::Grants,
        Collection::Protected,
        Collection::Pairings,
        Collection::ProtectedLog,
        Collection::GrantLayers,
        Collection::ProtectedSince,
        Collection::Names,
        Collection::Preloads,
    ];
    fn def(self) -> TableDefinition<'static, &'static str, &'static [u8]> {
        match self {
            Collection::BlobOrigins => TableDefinition::new("ledger_blob_origins"),
            Collection::Manifests => TableDefinition::new("ledger_manifests"),
            Collection::Layers => TableDefinition::new("ledger_layers"),
            Collection::Chains => TableDefinition::new("ledger_chains"),
            // "_v2": layers as one byte string (`ledger::Grant`); `ledger_grants`, the earlier
            // layout, is moved here by `ledger::upgrade`. A table holds one layout only, so no
            // version of pullgate reads a grant in the other's layout.
            Collection::Grants => TableDefinition::new("ledger_grants_v2"),
            Collection::Protected => TableDefinition::new("ledger_protected"),
            Collection::Pairings => TableDefinition::new("ledger_pairings"),
            Collection::ProtectedLog => TableDefinition::new("ledger_protected_log"),
            Collection::GrantLayers => TableDefinition::new("ledger_grant_layers"),
            Collection::ProtectedSince => TableDefinition::new("ledger_protected_since"),
            Collection::Names => TableDefinition::new("ledger_names"),
            Collection::Preloads => TableDefinition::new("ledger_preloads"),
        }
    }
}

/// Joins composite key parts.
pub fn key(parts: &[&str]) -> String {
    parts.join("\0")
}

/// Splits a composite key.
pub fn split_key(k: &str) -> Vec<&str> {
    k.split('\0').collect()
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("metadata database: {0}")]
    Db(#[from] redb::Error),
    #[error("metadata record for {key:?} is unreadable: {reason}")]
    Corrupt { key: String, reason: String },
    #[error(
        "{path} is in ledger format {found} (last opened by pullgate {opened_by}); this is pullgate {ours}, which reads formats up to {LEDGER_FORMAT}: run pullgate {opened_by} or later on it, or put back the copy of metadata.redb taken before the upgrade. Nothing was changed."
    )]
    TooNew { path: String, found: u64, opened_by: String, ours: &'static str },
}

macro_rules! redb_errors {
    ($($t:ty),*) => {$(
        impl From<$t> for StoreError {
            fn from(e: $t) -> Self { StoreError::Db(redb::Error::from(e)) }
        }
    )*};
}
redb_errors!(redb::DatabaseError, redb::TransactionError, redb::TableError, redb::StorageError, redb::CommitError);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    View,
    Active,
    Committed,
}

/// What the metadata says about one snapshot. `id` names its directory `snapshots/<id>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub id: u64,
    pub kind: Kind,
    /// Key of the parent snapshot, empty for none.
    pub parent: String,
    pub labels: BTreeMap<String, String>,
    /// Nanoseconds since the Unix epoch.
    pub created: i64,
    pub updated: i64,
    /// Disk usage recorded at commit (bytes, inodes).
    pub size: i64,
    pub inodes: i64,
    /// containerd namespace the snapshot was made in ("" if unknown).
    #[serde(default)]
    pub namespace: String,
    /// chainID of the image chain this snapshot materialises ("" if none or unknown).
    #[serde(default)]
    pub chain_id: String,
    /// diffIDs of the ledger-known layers in the snapshot, base first.
    #[serde(default)]
    pub diff_ids: Vec<String>,
    /// Layers in the snapshot that pullgate has no record of.
    #[serde(default)]
    pub unknown_layers: u32,
}

pub struct MetaStore {
    db: redb::Database,
    /// Write transactions committed since the store was opened: readers that cache what they
    /// computed from the database (the metrics gauges) know when it changed.
    commits: std::sync::atomic::AtomicU64,
    /// The format of the database as found when opened, and the pullgate that last opened it
    /// (None: created by this open).
    found: Option<(u64, String)>,
}

/// A read transaction. Ledger tables are opened once per transaction and reused: a gate
/// decision reads several collections many times.
pub struct ReadTx(redb::ReadTransaction, [std::cell::OnceCell<redb::ReadOnlyTable<&'static str, &'static [u8]>>; Collection::ALL.len()]);

/// What `each_snapshot` calls with each record, until it says Break.
pub type SnapshotVisitor<'a> = &'a mut dyn FnMut(&str, Record) -> Result<std::ops::ControlFlow<()>, StoreError>;

pub struct WriteTx(redb::WriteTransaction);

impl MetaStore {
    pub fn open(path: &Path) -> Result<MetaStore, StoreError> {
        let existed = path.exists();
        if existed {
            refuse_newer(path)?;
        }
        let db = redb::Builder::new().set_cache_size(CACHE_BYTES).create(path)?;
        // Create the tables once so that read transactions never meet a missing table.
        let txn = db.begin_write()?;
        txn.open_table(SNAPSHOTS)?;
        txn.open_table(CHILDREN)?;
        txn.open_table(COUNTERS)?;
        txn.open_table(SNAPSHOT_REFS)?;
        txn.open_table(OWN_CHAINS)?;
        txn.open_table(OWN_CHAIN_KEYS)?;
        txn.open_table(ADMITTED)?;
        txn.open_table(ADMITTED_UNCHECKED)?;
        txn.open_table(REMAPS)?;
        txn.open_table(UNKNOWN_STEPS)?;
        for c in Collection::ALL {
            txn.open_table(c.def())?;
        }
        let found = stamp_format(&txn, path)?;
        txn.commit()?;
        let store = MetaStore { db, commits: Default::default(), found: existed.then_some(found) };
        store.write(|tx| {
            tx.once(SNAPSHOT_REFS_BUILT, |tx| {
                for (k, r) in scan_in::<Record, _>(&tx.0.open_table(SNAPSHOTS)?, "")? {
                    if let Some(t) = r.labels.get(SNAPSHOT_REF_LABEL) {
                        tx.0.open_table(SNAPSHOT_REFS)?.insert((t.as_str(), k.as_str()), ())?;
                    }
                }
                Ok(())
            })?;
            tx.0.delete_table(OWN_CHAIN_KEYS)?;
            let own: Vec<(String, String)> = {
                let t = tx.0.open_table(OWN_CHAINS)?;
                let mut v = Vec::new();
                for item in t.iter()? {
                    let (k, c) = item?;
                    v.push((k.value().to_string(), c.value().to_string()));
                }
                v
            };
            let mut keys = tx.0.open_table(OWN_CHAIN_KEYS)?;
            for (k, c) in &own {
                keys.insert((c.as_str(), k.as_str()), ())?;
            }
            Ok::<(), StoreError>(())
        })?;
        Ok(store)
    }

    /// The format the database was in when opened, and the pullgate that last opened it before
    /// (None: this open created it).
    pub fn found_format(&self) -> Option<&(u64, String)> {
        self.found.as_ref()
    }

    /// The database's format and the version of pullgate that last opened it.
    pub fn format(&self) -> Result<(u64, String), StoreError> {
        let tx = self.db.begin_read()?;
        read_format(&tx.open_table(FORMAT)?)
    }

    pub fn read<T, E: From<StoreError>>(&self, f: impl FnOnce(&ReadTx) -> Result<T, E>) -> Result<T, E> {
        let tx = ReadTx(self.db.begin_read().map_err(StoreError::from)?, Default::default());
        f(&tx)
    }

    /// Runs `f` in one write transaction, committed only if `f` succeeds.
    pub fn write<T, E: From<StoreError>>(&self, f: impl FnOnce(&mut WriteTx) -> Result<T, E>) -> Result<T, E> {
        let mut tx = WriteTx(self.db.begin_write().map_err(StoreError::from)?);
        let out = f(&mut tx)?;
        tx.0.commit().map_err(StoreError::from)?;
        self.commits.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(out)
    }

    /// How many write transactions were committed since the store was opened.
    pub fn commits(&self) -> u64 {
        self.commits.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Refuses a database a newer pullgate wrote, reading it without writing: redb opened read-only
/// takes no write lock and changes no byte. A database that needs repair (its last writer was
/// killed) cannot be opened read-only; the writable open that follows repairs it, which
/// changes no record, and [`stamp_format`] checks again before its transaction commits.
fn refuse_newer(path: &Path) -> Result<(), StoreError> {
    let db = match redb::ReadOnlyDatabase::open(path) {
        Ok(db) => db,
        Err(redb::DatabaseError::RepairAborted) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let tx = db.begin_read()?;
    let found = match tx.open_table(FORMAT) {
        Ok(t) => read_format(&t)?,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    check_format(path, found)
}

fn read_format(t: &impl ReadableTable<&'static str, &'static str>) -> Result<(u64, String), StoreError> {
    let get = |k: &str| -> Result<Option<String>, StoreError> { Ok(t.get(k)?.map(|v| v.value().to_string())) };
    let format = match get("format")? {
        Some(f) => f.parse().map_err(|_| StoreError::Corrupt { key: "ledger_format|format".into(), reason: format!("not a number: {f:?}") })?,
        None => 1,
    };
    Ok((format, get("opened_by")?.unwrap_or_else(|| "0.1.0".into())))
}

fn check_format(path: &Path, (found, opened_by): (u64, String)) -> Result<(), StoreError> {
    if found > LEDGER_FORMAT {
        return Err(StoreError::TooNew { path: path.display().to_string(), found, opened_by, ours: env!("CARGO_PKG_VERSION") });
    }
    Ok(())
}

/// Records this version's format and version in the opening transaction (after checking the
/// database is not newer: see [`refuse_newer`]); returns what the database said before.
fn stamp_format(txn: &redb::WriteTransaction, path: &Path) -> Result<(u64, String), StoreError> {
    let mut t = txn.open_table(FORMAT)?;
    let found = read_format(&t)?;
    check_format(path, found.clone())?;
    t.insert("format", LEDGER_FORMAT.to_string().as_str())?;
    t.insert("opened_by", env!("CARGO_PKG_VERSION"))?;
    Ok(found)
}

/// Leading byte of a value in pullgate's binary format: postcard (compact, and several times
/// faster to decode than JSON, which matters on the gate's path). Values written before it
/// existed are JSON objects and start with `{`; both are read, and every write uses postcard.
/// A change to a stored type's fields takes a new format byte with its own decoder.
const FORMAT_POSTCARD_V1: u8 = 1;

/// Decodes a stored value; `key` names it in the error.
fn decode<V: serde::de::DeserializeOwned>(key: &str, bytes: &[u8]) -> Result<V, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt { key: key.replace('\0', "|"), reason };
    match bytes.split_first() {
        Some((&FORMAT_POSTCARD_V1, rest)) => postcard::from_bytes(rest).map_err(|e| corrupt(e.to_string())),
        Some((b'{', _)) => serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string())),
        Some((b, _)) => Err(corrupt(format!("unknown value format {b:#04x}"))),
        None => Err(corrupt("empty value".into())),
    }
}

fn encode<V: Serialize>(key: &str, v: &V) -> Result<Vec<u8>, StoreError> {
    let mut out = vec![FORMAT_POSTCARD_V1];
    postcard::to_io(v, &mut out).map_err(|e| StoreError::Corrupt { key: key.replace('\0', "|"), reason: e.to_string() })?;
    Ok(out)
}

fn has_children_in<T: ReadableTable<(&'static str, &'static str), ()>>(t: &T, key: &str) -> Result<bool, StoreError> {
    Ok(t.range((key, "")..)?.next().transpose()?.is_some_and(|(k, _)| k.value().0 == key))
}

fn get_val_in<V: serde::de::DeserializeOwned, T: ReadableTable<&'static str, &'static [u8]>>(
    t: &T,
    k: &str,
) -> Result<Option<V>, StoreError> {
    match t.get(k)? {
        Some(v) => decode(k, v.value()).map(Some),
        None => Ok(None),
    }
}

fn scan_in<V: serde::de::DeserializeOwned, T: ReadableTable<&'static str, &'static [u8]>>(
    t: &T,
    prefix: &str,
) -> Result<Vec<(String, V)>, StoreError> {
    let mut out = Vec::new();
    for item in t.range(prefix..)? {
        let (k, v) = item?;
        if !k.value().starts_with(prefix) {
            break;
        }
        out.push((k.value().to_string(), decode(k.value(), v.value())?));
    }
    Ok(out)
}

fn find_key_in<T: ReadableTable<&'static str, &'static [u8]>>(t: &T, pred: &mut dyn FnMut(&str) -> bool) -> Result<Option<String>, StoreError> {
    for item in t.iter()? {
        let (k, _) = item?;
        if pred(k.value()) {
            return Ok(Some(k.value().to_string()));
        }
    }
    Ok(None)
}

fn range_from_in<V: serde::de::DeserializeOwned, T: ReadableTable<&'static str, &'static [u8]>>(
    t: &T,
    start: &str,
    limit: usize,
) -> Result<Vec<(String, V)>, StoreError> {
    let mut out = Vec::new();
    for item in t.range(start..)?.take(limit) {
        let (k, v) = item?;
        out.push((k.value().to_string(), decode(k.value(), v.value())?));
    }
    Ok(out)
}

fn last_key_in<T: ReadableTable<&'static str, &'static [u8]>>(t: &T) -> Result<Option<String>, StoreError> {
    Ok(t.last()?.map(|(k, _)| k.value().to_string()))
}

/// Reads of ledger collections, in a read or a write transaction.
pub trait LedgerRead {
    /// Up to `limit` entries whose keys sort at or after `start`, in key order.
    fn range_from<V: serde::de::DeserializeOwned>(&self, c: Collection, start: &str, limit: usize) -> Result<Vec<(String, V)>, StoreError>;
    /// The collection's last key, in key order.
    fn last_key(&self, c: Collection) -> Result<Option<String>, StoreError>;
    /// The first key of the collection, in key order, for which `pred` holds; values unread.
    fn find_key(&self, c: Collection, pred: &mut dyn FnMut(&str) -> bool) -> Result<Option<String>, StoreError>;
    fn get_val<V: serde::de::DeserializeOwned>(&self, c: Collection, k: &str) -> Result<Option<V>, StoreError>;
    /// Every entry whose key starts with `prefix`, in key order.
    fn scan<V: serde::de::DeserializeOwned>(&self, c: Collection, prefix: &str) -> Result<Vec<(String, V)>, StoreError>;
}

impl ReadTx {
    fn table(&self, c: Collection) -> Result<&redb::ReadOnlyTable<&'static str, &'static [u8]>, StoreError> {
        let cell = &self.1[c as usize];
        if let Some(t) = cell.get() {
            return Ok(t);
        }
        let t = self.0.open_table(c.def())?;
        Ok(cell.get_or_init(|| t))
    }
}

impl LedgerRead for ReadTx {
    fn range_from<V: serde::de::DeserializeOwned>(&self, c: Collection, start: &str, limit: usize) -> Result<Vec<(String, V)>, StoreError> {
        range_from_in(self.table(c)?, start, limit)
    }
    fn last_key(&self, c: Collection) -> Result<Option<String>, StoreError> {
        last_key_in(self.table(c)?)
    }
    fn find_key(&self, c: Collection, pred: &mut dyn FnMut(&str) -> bool) -> Result<Option<String>, StoreError> {
        find_key_in(self.table(c)?, pred)
    }
    fn get_val<V: serde::de::DeserializeOwned>(&self, c: Collection, k: &str) -> Result<Option<V>, StoreError> {
        get_val_in(self.table(c)?, k)
    }
    fn scan<V: serde::de::DeserializeOwned>(&self, c: Collection, prefix: &str) -> Result<Vec<(String, V)>, StoreError> {
        scan_in(self.table(c)?, prefix)
    }
}

impl LedgerRead for WriteTx {
    fn range_from<V: serde::de::DeserializeOwned>(&self, c: Collection, start: &str, limit: usize) -> Result<Vec<(String, V)>, StoreError> {
        range_from_in(&self.0.open_table(c.def())?, start, limit)
    }
    fn last_key(&self, c: Collection) -> Result<Option<String>, StoreError> {
        last_key_in(&self.0.open_table(c.def())?)
    }
    fn find_key(&self, c: Collection, pred: &mut dyn FnMut(&str) -> bool) -> Result<Option<String>, StoreError> {
        find_key_in(&self.0.open_table(c.def())?, pred)
    }
    fn get_val<V: serde::de::DeserializeOwned>(&self, c: Collection, k: &str) -> Result<Option<V>, StoreError> {
        get_val_in(&self.0.open_table(c.def())?, k)
    }
    fn scan<V: serde::de::DeserializeOwned>(&self, c: Collection, prefix: &str) -> Result<Vec<(String, V)>, StoreError> {
        scan_in(&self.0.open_table(c.def())?, prefix)
    }
}

impl WriteTx {
    /// Puts `v` under `k`, unless `k` holds exactly these bytes already: writing them again
    /// would copy the value's page, and the pages above it, into the commit for nothing (a
    /// verify of a known manifest then writes its grant alone).
    pub fn put_val<V: Serialize>(&mut self, c: Collection, k: &str, v: &V) -> Result<(), StoreError> {
        let bytes = encode(k, v)?;
        let mut table = self.0.open_table(c.def())?;
        if table.get(k)?.is_some_and(|old| old.value() == bytes.as_slice()) {
            return Ok(());
        }
        table.insert(k, bytes.as_slice())?;
        Ok(())
    }
    pub fn delete_val(&mut self, c: Collection, k: &str) -> Result<bool, StoreError> {
        Ok(self.0.open_table(c.def())?.remove(k)?.is_some())
    }

    /// Writes `v` into a table by `name`, as an earlier version wrote it (tests of upgrades).
    #[cfg(test)]
    pub fn put_retired<V: Serialize>(&mut self, name: &str, k: &str, v: &V) -> Result<(), StoreError> {
        let bytes = encode(k, v)?;
        self.0.open_table(TableDefinition::<&str, &[u8]>::new(name))?.insert(k, bytes.as_slice())?;
        Ok(())
    }

    /// Makes an empty table by `name`, as an earlier version's start-up does (tests of upgrades).
    #[cfg(test)]
    pub fn make_retired(&mut self, name: &str) -> Result<(), StoreError> {
        self.0.open_table(TableDefinition::<&str, &[u8]>::new(name))?;
        Ok(())
    }

    /// Every value of the table an earlier version named `name`, decoded as `V`, and the
    /// table deleted; None when there is no such table. For upgrades.
    pub fn take_retired<V: serde::de::DeserializeOwned>(&mut self, name: &str) -> Result<Option<Vec<(String, V)>>, StoreError> {
        use redb::TableHandle as _;
        if !self.0.list_tables().map_err(redb::Error::from)?.any(|t| t.name() == name) {
            return Ok(None);
        }
        let def: TableDefinition<&str, &[u8]> = TableDefinition::new(name);
        let all = scan_in(&self.0.open_table(def)?, "")?;
        self.0.delete_table(def)?;
        Ok(Some(all))
    }

    /// Removes every value of collection `c`.
    pub fn clear(&mut self, c: Collection) -> Result<(), StoreError> {
        self.0.delete_table(c.def())?;
        self.0.open_table(c.def())?;
        Ok(())
    }
}

impl ReadTx {
    pub fn get(&self, key: &str) -> Result<Option<Record>, StoreError> {
        get_val_in(&self.0.open_table(SNAPSHOTS)?, key)
    }

    /// The chainID pullgate's own unpack established for committed snapshot `key`, if any.
    pub fn own_chain(&self, key: &str) -> Result<Option<String>, StoreError> {
        Ok(self.0.open_table(OWN_CHAINS)?.get(key)?.map(|v| v.value().to_string()))
    }
    /// The principal the CRI front admitted snapshot `key` for, if it was prepared on one.
    pub fn admitted(&self, key: &str) -> Result<Option<String>, StoreError> {
        Ok(self.0.open_table(ADMITTED)?.get(key)?.map(|v| v.value().to_string()))
    }
    pub fn all(&self) -> Result<Vec<(String, Record)>, StoreError> {
        scan_in(&self.0.open_table(SNAPSHOTS)?, "")
    }

    /// Calls `f` on the snapshots whose keys start with `prefix` and sort after `after` (all of
    /// them when None), in key order, one record in memory at a time, until `f` says Break.
    pub fn each_snapshot(
        &self,
        prefix: &str,
        after: Option<&str>,
        f: SnapshotVisitor<'_>,
    ) -> Result<(), StoreError> {
        use std::ops::Bound;
        let t = self.0.open_table(SNAPSHOTS)?;
        let start: Bound<&str> = match after {
            Some(a) if a >= prefix => Bound::Excluded(a),
            _ => Bound::Included(prefix),
        };
        let range: (Bound<&str>, Bound<&str>) = (start, Bound::Unbounded);
        for item in t.range::<&str>(range)? {
            let (k, v) = item?;
            let k = k.value();
            if !k.starts_with(prefix) {
                break;
            }
            if f(k, decode(k, v.value())?)?.is_break() {
                break;
            }
        }
        Ok(())
    }

    /// For an unpack step that applied a layer pullgate had no record of: the protected-layer
    /// log's last sequence number when the gate let it (see [`UNKNOWN_STEPS`]).
    pub fn unknown_at(&self, key: &str) -> Result<Option<u64>, StoreError> {
        Ok(self.0.open_table(UNKNOWN_STEPS)?.get(key)?.map(|v| v.value()))
    }

    /// The chain committed snapshot `key` is containerd's user-namespace copy of, if it is one.
    pub fn remap_of(&self, key: &str) -> Result<Option<String>, StoreError> {
        Ok(self.0.open_table(REMAPS)?.get(key)?.map(|v| v.value().to_string()))
    }

    /// The children of `key` whose keys begin with `prefix` (a namespace's `<namespace>/`):
    /// what other namespaces made on it is not read.
    pub fn children_of_in(&self, key: &str, prefix: &str) -> Result<Vec<String>, StoreError> {
        let t = self.0.open_table(CHILDREN)?;
        let mut out = Vec::new();
        for item in t.range((key, prefix)..)? {
            let (k, _) = item?;
            let (parent, child) = k.value();
            if parent != key || !child.starts_with(prefix) {
                break;
            }
            out.push(child.to_string());
        }
        Ok(out)
    }

    /// The keys of the snapshots whose parent is `key`.
    pub fn children_of(&self, key: &str) -> Result<Vec<String>, StoreError> {
        self.children_of_in(key, "")
    }

    /// The snapshots of `namespace` whose `containerd.io/snapshot.ref` label is `target` (keys
    /// `<namespace>/...`): what other namespaces labelled is not read.
    pub fn with_ref_in(&self, target: &str, namespace: &str) -> Result<Vec<(String, Record)>, StoreError> {
        let prefix = format!("{namespace}/");
        self.records_indexed(SNAPSHOT_REFS, target, &prefix, "indexed by its snapshot.ref label but missing")
    }

    /// Every snapshot whose `containerd.io/snapshot.ref` label is `target` (tests).
    #[cfg(test)]
    pub fn with_ref(&self, target: &str) -> Result<Vec<(String, Record)>, StoreError> {
        self.records_indexed(SNAPSHOT_REFS, target, "", "indexed by its snapshot.ref label but missing")
    }

    /// The committed snapshots pullgate's own pulls unpacked as chain `target` (in any
    /// namespace), with their records.
    pub fn own_with_chain(&self, target: &str) -> Result<Vec<(String, Record)>, StoreError> {
        if crate::defence::off(crate::defence::Defence::OwnChains) {
            // The positive control (test binary only): every snapshot labelled with the chain.
            let mut all = Vec::new();
            self.each_snapshot("", None, &mut |k, r| {
                if r.labels.get(SNAPSHOT_REF_LABEL).map(String::as_str) == Some(target) {
                    all.push((k.to_string(), r));
                }
                Ok(std::ops::ControlFlow::Continue(()))
            })?;
            return Ok(all);
        }
        self.records_indexed(OWN_CHAIN_KEYS, target, "", "indexed as an own chain but missing")
    }

    /// The records of the keys `index` holds under `target` that begin with `prefix`.
    fn records_indexed(&self, index: TableDefinition<(&str, &str), ()>, target: &str, prefix: &str, missing: &str) -> Result<Vec<(String, Record)>, StoreError> {
        let refs = self.0.open_table(index)?;
        let snaps = self.0.open_table(SNAPSHOTS)?;
        let mut out = Vec::new();
        for item in refs.range((target, prefix)..)? {
            let (k, _) = item?;
            let (t, key) = k.value();
            if t != target || !key.starts_with(prefix) {
                break;
            }
            match get_val_in::<Record, _>(&snaps, key)? {
                Some(r) => out.push((key.to_string(), r)),
                None => return Err(StoreError::Corrupt { key: key.to_string(), reason: missing.into() }),
            }
        }
        Ok(out)
    }
}

impl WriteTx {
    pub fn get(&self, key: &str) -> Result<Option<Record>, StoreError> {
        get_val_in(&self.0.open_table(SNAPSHOTS)?, key)
    }

    pub fn own_chain(&self, key: &str) -> Result<Option<String>, StoreError> {
        Ok(self.0.open_table(OWN_CHAINS)?.get(key)?.map(|v| v.value().to_string()))
    }

    /// Records that committed snapshot `key` is pullgate's own unpack of chain `chain`.
    pub fn set_own_chain(&mut self, key: &str, chain: &str) -> Result<(), StoreError> {
        let old = self.0.open_table(OWN_CHAINS)?.insert(key, chain)?.map(|v| v.value().to_string());
        let mut keys = self.0.open_table(OWN_CHAIN_KEYS)?;
        if let Some(o) = old {
            keys.remove((o.as_str(), key))?;
        }
        keys.insert((chain, key), ())?;
        Ok(())
    }

    /// Records that unpack step `key` applied a layer pullgate had no record of, when the
    /// protected-layer log's last sequence number was `seq`.
    pub fn set_unknown_at(&mut self, key: &str, seq: u64) -> Result<(), StoreError> {
        self.0.open_table(UNKNOWN_STEPS)?.insert(key, seq)?;
        Ok(())
    }

    pub fn unknown_at(&self, key: &str) -> Result<Option<u64>, StoreError> {
        Ok(self.0.open_table(UNKNOWN_STEPS)?.get(key)?.map(|v| v.value()))
    }

    /// Records that committed snapshot `key` is containerd's user-namespace copy of `chain`.
    pub fn set_remap_of(&mut self, key: &str, chain: &str) -> Result<(), StoreError> {
        self.0.open_table(REMAPS)?.insert(key, chain)?;
        Ok(())
    }

    pub fn admitted(&self, key: &str) -> Result<Option<String>, StoreError> {
        Ok(self.0.open_table(ADMITTED)?.get(key)?.map(|v| v.value().to_string()))
    }

    /// Forgets the principal snapshot `key` was admitted for.
    pub fn remove_admitted(&mut self, key: &str) -> Result<(), StoreError> {
        self.0.open_table(ADMITTED)?.remove(key)?;
        self.0.open_table(ADMITTED_UNCHECKED)?.remove(key)?;
        Ok(())
    }

    /// Records that snapshot `key` was prepared on the CRI front's admission for `principal`;
    /// `unchecked`: until the front checked its creation ([`ADMITTED_UNCHECKED`]).
    pub fn set_admitted(&mut self, key: &str, principal: &str, unchecked: bool) -> Result<(), StoreError> {
        self.0.open_table(ADMITTED)?.insert(key, principal)?;
        if unchecked {
            self.0.open_table(ADMITTED_UNCHECKED)?.insert(key, ())?;
        }
        Ok(())
    }

    /// The CRI front checked the creation snapshot `key` was admitted for: its principal stays.
    pub fn set_admission_checked(&mut self, key: &str) -> Result<(), StoreError> {
        self.0.open_table(ADMITTED_UNCHECKED)?.remove(key)?;
        Ok(())
    }

    /// Takes back the principal of every snapshot whose creation was never checked (at start:
    /// the process that admitted them is gone); returns their keys.
    pub fn drop_unchecked_admissions(&mut self) -> Result<Vec<String>, StoreError> {
        let keys: Vec<String> = {
            let t = self.0.open_table(ADMITTED_UNCHECKED)?;
            let mut keys = Vec::new();
            for item in t.iter()? {
                keys.push(item?.0.value().to_string());
            }
            keys
        };
        for k in &keys {
            self.remove_admitted(k)?;
        }
        Ok(keys)
    }

    pub fn has_children(&self, key: &str) -> Result<bool, StoreError> {
        has_children_in(&self.0.open_table(CHILDREN)?, key)
    }

    /// A named counter (0 when never set), for ids and one-time upgrades.
    pub fn counter(&self, name: &str) -> Result<u64, StoreError> {
        Ok(self.0.open_table(COUNTERS)?.get(name)?.map(|v| v.value()).unwrap_or(0))
    }

    pub fn set_counter(&mut self, name: &str, v: u64) -> Result<(), StoreError> {
        self.0.open_table(COUNTERS)?.insert(name, v)?;
        Ok(())
    }

    /// Runs a one-time upgrade `f` (building an index an older database lacks) unless the
    /// counter `marker` says it ran, then sets it; all in this transaction.
    pub fn once(&mut self, marker: &str, f: impl FnOnce(&mut WriteTx) -> Result<(), StoreError>) -> Result<(), StoreError> {
        if self.counter(marker)? == 0 {
            f(self)?;
            self.set_counter(marker, 1)?;
        }
        Ok(())
    }

    pub fn next_id(&mut self) -> Result<u64, StoreError> {
        let mut t = self.0.open_table(COUNTERS)?;
        let next = t.get("next_id")?.map(|v| v.value()).unwrap_or(1);
        t.insert("next_id", next + 1)?;
        Ok(next)
    }

    /// Inserts or replaces `key`, keeping the parent→child and snapshot.ref indexes in step.
    pub fn put(&mut self, key: &str, rec: &Record) -> Result<(), StoreError> {
        let old = self.get(key)?;
        let mut children = self.0.open_table(CHILDREN)?;
        if let Some(old) = old.as_ref().filter(|o| !o.parent.is_empty() && o.parent != rec.parent) {
            children.remove((old.parent.as_str(), key))?;
        }
        if !rec.parent.is_empty() {
            children.insert((rec.parent.as_str(), key), ())?;
        }
        drop(children);
        let mut refs = self.0.open_table(SNAPSHOT_REFS)?;
        if let Some(t) = old.as_ref().and_then(|o| o.labels.get(SNAPSHOT_REF_LABEL)) {
            refs.remove((t.as_str(), key))?;
        }
        if let Some(t) = rec.labels.get(SNAPSHOT_REF_LABEL) {
            refs.insert((t.as_str(), key), ())?;
        }
        drop(refs);
        self.0.open_table(SNAPSHOTS)?.insert(key, encode(key, rec)?.as_slice())?;
        Ok(())
    }

    pub fn delete(&mut self, key: &str) -> Result<Option<Record>, StoreError> {
        let old = self.get(key)?;
        if let Some(old) = &old {
            if !old.parent.is_empty() {
                self.0.open_table(CHILDREN)?.remove((old.parent.as_str(), key))?;
            }
            if let Some(t) = old.labels.get(SNAPSHOT_REF_LABEL) {
                self.0.open_table(SNAPSHOT_REFS)?.remove((t.as_str(), key))?;
            }
            if let Some(c) = self.0.open_table(OWN_CHAINS)?.remove(key)?.map(|v| v.value().to_string()) {
                self.0.open_table(OWN_CHAIN_KEYS)?.remove((c.as_str(), key))?;
            }
            self.0.open_table(ADMITTED)?.remove(key)?;
            self.0.open_table(ADMITTED_UNCHECKED)?.remove(key)?;
            self.0.open_table(REMAPS)?.remove(key)?;
            self.0.open_table(UNKNOWN_STEPS)?.remove(key)?;
            self.0.open_table(SNAPSHOTS)?.remove(key)?;
        }
        Ok(old)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: u64, parent: &str) -> Record {
        Record { id, kind: Kind::Committed, parent: parent.into(), labels: BTreeMap::new(), created: 1, updated: 1, size: 0, inodes: 0, namespace: String::new(), chain_id: String::new(), diff_ids: vec![], unknown_layers: 0 }
    }

    #[test]
    fn children_index_follows_puts_and_deletes() {
        let dir = tempfile::tempdir().unwrap();
        let s = MetaStore::open(&dir.path().join("m.redb")).unwrap();
        s.write(|tx| -> Result<(), StoreError> {
            tx.put("a", &rec(1, ""))?;
            tx.put("ab", &rec(2, ""))?;
            tx.put("b", &rec(3, "a"))?;
            Ok(())
        })
        .unwrap();
        s.write(|tx| -> Result<(), StoreError> {
            assert!(tx.has_children("a")?);
            assert!(!tx.has_children("ab")?, "prefix of another key must not count");
            assert!(!tx.has_children("b")?);
            tx.delete("b")?;
            assert!(!tx.has_children("a")?);
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn commits_count_committed_writes_only() {
        let dir = tempfile::tempdir().unwrap();
        let s = MetaStore::open(&dir.path().join("m.redb")).unwrap();
        let before = s.commits();
        s.write(|tx| tx.put("a", &rec(1, ""))).unwrap();
        assert_eq!(s.commits(), before + 1);
        let failed: Result<(), StoreError> = s.write(|tx| {
            tx.put("b", &rec(2, ""))?;
            Err(StoreError::Corrupt { key: "b".into(), reason: "refused".into() })
        });
        assert!(failed.is_err());
        assert_eq!(s.commits(), before + 1, "a write that failed committed nothing");
        s.read(|tx| -> Result<(), StoreError> {
            assert_eq!(tx.get("b")?, None);
            Ok(())
        })
        .unwrap();
        assert_eq!(s.commits(), before + 1, "reads are not commits");
    }

    #[test]
    fn values_are_binary_and_json_records_stay_readable() {
        let dir = tempfile::tempdir().unwrap();
        let s = MetaStore::open(&dir.path().join("m.redb")).unwrap();
        s.write(|tx| tx.put("new", &rec(1, ""))).unwrap();
        // Records written as JSON (before the binary format) and a value in no known format.
        let legacy = serde_json::to_vec(&rec(2, "new")).unwrap();
        let txn = s.db.begin_write().unwrap();
        {
            let mut t = txn.open_table(SNAPSHOTS).unwrap();
            t.insert("old", legacy.as_slice()).unwrap();
            t.insert("bad", [0x7f_u8, 1, 2].as_slice()).unwrap();
            let raw = t.get("new").unwrap().unwrap().value().to_vec();
            assert_eq!(raw[0], FORMAT_POSTCARD_V1);
            assert!(raw.len() < legacy.len(), "binary {} bytes, JSON {}", raw.len(), legacy.len());
        }
        txn.commit().unwrap();
        s.read(|tx| -> Result<(), StoreError> {
            assert_eq!(tx.get("new")?, Some(rec(1, "")));
            assert_eq!(tx.get("old")?, Some(rec(2, "new")));
            let e = tx.get("bad").unwrap_err().to_string();
            assert!(e.contains("\"bad\"") && e.contains("unknown value format 0x7f"), "{e}");
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn chain_lookups_read_one_namespace_and_own_chains_only() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.redb");
        let mut r = rec(1, "");
        r.labels.insert(SNAPSHOT_REF_LABEL.into(), "sha256:t".into());
        {
            let s = MetaStore::open(&p).unwrap();
            s.write(|tx| -> Result<(), StoreError> {
                for k in ["a/1/x", "a/2/y", "ab/3/z", "b/4/w"] {
                    tx.put(k, &r)?;
                }
                tx.set_own_chain("b/4/w", "sha256:t")
            })
            .unwrap();
            s.read(|tx| -> Result<(), StoreError> {
                let keys = |v: Vec<(String, Record)>| v.into_iter().map(|(k, _)| k).collect::<Vec<_>>();
                assert_eq!(keys(tx.with_ref_in("sha256:t", "a")?), ["a/1/x", "a/2/y"]);
                assert_eq!(keys(tx.with_ref_in("sha256:t", "c")?), Vec::<String>::new());
                assert_eq!(keys(tx.own_with_chain("sha256:t")?), ["b/4/w"]);
                Ok(())
            })
            .unwrap();
            // A version that did not keep the index (a rollback) set another own chain.
            let txn = s.db.begin_write().unwrap();
            txn.open_table(OWN_CHAINS).unwrap().insert("a/1/x", "sha256:t").unwrap();
            txn.commit().unwrap();
        }
        let s = MetaStore::open(&p).unwrap();
        let own = |s: &MetaStore| s.read(|tx| tx.own_with_chain("sha256:t")).unwrap().into_iter().map(|(k, _)| k).collect::<Vec<_>>();
        assert_eq!(own(&s), ["a/1/x", "b/4/w"], "rebuilt at the open");
        s.write(|tx| tx.delete("b/4/w").map(|_| ())).unwrap();
        assert_eq!(own(&s), ["a/1/x"]);
    }

    #[test]
    fn snapshot_ref_index_is_built_for_an_older_database() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.redb");
        let mut r = rec(1, "");
        r.labels.insert(SNAPSHOT_REF_LABEL.into(), "sha256:t".into());
        {
            let s = MetaStore::open(&p).unwrap();
            s.write(|tx| tx.put("k", &r)).unwrap();
            // As a database written before the index existed: no rows, no marker.
            let txn = s.db.begin_write().unwrap();
            txn.open_table(SNAPSHOT_REFS).unwrap().remove(("sha256:t", "k")).unwrap();
            txn.open_table(COUNTERS).unwrap().remove(SNAPSHOT_REFS_BUILT).unwrap();
            txn.commit().unwrap();
            assert!(s.read(|tx| tx.with_ref("sha256:t")).unwrap().is_empty());
        }
        let s = MetaStore::open(&p).unwrap();
        assert_eq!(s.read(|tx| tx.with_ref("sha256:t")).unwrap(), vec![("k".to_string(), r)]);
    }

    #[test]
    fn failed_closure_commits_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let s = MetaStore::open(&dir.path().join("m.redb")).unwrap();
        let r: Result<(), StoreError> = s.write(|tx| {
            tx.put("a", &rec(1, ""))?;
            Err(StoreError::Corrupt { key: "x".into(), reason: "test".into() })
        });
        assert!(r.is_err());
        assert!(s.read(|tx| tx.get("a")).unwrap().is_none());
    }

    #[test]
    fn ids_increase_and_persist() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.redb");
        {
            let s = MetaStore::open(&p).unwrap();
            assert_eq!(s.write(|tx| tx.next_id()).unwrap(), 1);
            assert_eq!(s.write(|tx| tx.next_id()).unwrap(), 2);
        }
        let s = MetaStore::open(&p).unwrap();
        assert_eq!(s.write(|tx| tx.next_id()).unwrap(), 3);
    }

    #[test]
    fn format_is_stamped_and_a_newer_one_refused_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.redb");
        {
            let s = MetaStore::open(&p).unwrap();
            assert_eq!(s.format().unwrap(), (LEDGER_FORMAT, env!("CARGO_PKG_VERSION").to_string()));
            s.write(|tx| tx.put("a", &rec(1, ""))).unwrap();
        }
        // A database a newer pullgate opened: its format above ours.
        {
            let db = redb::Database::create(&p).unwrap();
            let tx = db.begin_write().unwrap();
            tx.open_table(FORMAT).unwrap().insert("format", (LEDGER_FORMAT + 1).to_string().as_str()).unwrap();
            tx.open_table(FORMAT).unwrap().insert("opened_by", "9.1.0").unwrap();
            tx.commit().unwrap();
        }
        let before = std::fs::read(&p).unwrap();
        let e = MetaStore::open(&p).err().expect("a newer format is refused").to_string();
        let want = format!("ledger format {} (last opened by pullgate 9.1.0); this is pullgate {}, which reads formats up to {LEDGER_FORMAT}", LEDGER_FORMAT + 1, env!("CARGO_PKG_VERSION"));
        assert!(e.contains(&want) && e.contains("Nothing was changed"), "{e}");
        assert!(std::fs::read(&p).unwrap() == before, "the refused database was changed");
        // A database of 0.1.0 (no format table): opened, stamped, its records kept.
        {
            let db = redb::Database::create(&p).unwrap();
            let tx = db.begin_write().unwrap();
            tx.delete_table(FORMAT).unwrap();
            tx.commit().unwrap();
        }
        let s = MetaStore::open(&p).unwrap();
        assert_eq!(s.format().unwrap().0, LEDGER_FORMAT);
        assert_eq!(s.read(|tx| tx.get("a")).unwrap().map(|r| r.id), Some(1));
    }
}
