//! chainindex: which protected layer an unpack of a chain the ledger never recorded applies,
//! found without testing every protected layer on the decision's path.
//!
//! An unpack step is `Prepare("extract-… T", P)`: it applies the layer d with
//! T = sha256(P + " " + d). For a chain no pull recorded, the gate must know whether d is one
//! of the protected layers, and sha256 cannot be inverted, so some work per protected layer is
//! unavoidable for each parent P; it is done once per parent, not per decision:
//! - a *table* for parent P holds, for every protected layer d, the first 8 bytes of
//!   chainID(P, d) and of d, sorted: a decision looks T up by binary search, finds the
//!   candidate layer's key in the ledger by its first bytes, and confirms it by hashing it
//!   (a table entry is a hint; only the arithmetic and the ledger decide);
//! - a table knows the protected-layer log's position it was built at: layers logged after it
//!   are tested one by one in the decision's own transaction, and a candidate counts only if
//!   that transaction still has it protected, so a table answers exactly as the scan
//!   ([`ledger::protected_layer_for_chain`]) would in that transaction, whatever was recorded,
//!   made public or forgotten since it was built;
//! - the snapshotter asks for P's table as soon as an unpack step creating P (a chain the
//!   ledger does not record) is allowed: a worker thread builds it while containerd applies
//!   that layer, so the next step, on P, finds it ready (or waits for that build rather than
//!   starting its own). A decision on a parent with no table builds one in its transaction.
//!
//! Tables live in memory (16 bytes per protected layer each, [`MAX_TABLES`] of them, least
//! recently used first out): nothing to upgrade or repair, and a restart starts empty.
use crate::ledger;
use crate::metastore::{Collection, LedgerRead, MetaStore, StoreError};
use sha2::Digest as _;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Tables kept at most (each 16 bytes per protected layer: 1.3 MB at 80,000).
pub const MAX_TABLES: usize = 8;
/// Table builds waiting for the worker, at most; more are dropped (a decision builds its own).
const QUEUE: usize = 16;
/// How long a decision waits for a build of its parent's table already under way before it
/// builds one itself.
const WAIT_FOR_BUILD: Duration = Duration::from_secs(2);
/// How long a decision waits for its namespace's table build under way before it builds too.
const BUILD_TURN: Duration = Duration::from_secs(30);
/// Layers logged after a table was built that a decision tests one by one; beyond that the
/// table is rebuilt.
const MAX_DELTA: usize = 256;

/// One parent's table.
struct Table {
    /// The protected-layer log's last sequence number when the table was built.
    seq: u64,
    /// (first 8 bytes of chainID(parent, d), first 8 bytes of d), sorted, for every protected
    /// sha256 layer d.
    entries: Vec<(u64, u64)>,
    /// Protected layers whose diffID is not sha256 (tested one by one).
    other: Vec<String>,
}

fn head(b: &[u8]) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[..8]);
    u64::from_be_bytes(x)
}

/// The first 8 bytes of a diffID in canonical form, None for any other form.
fn canonical_head(d: &str) -> Option<u64> {
    let hexd = d.strip_prefix("sha256:")?;
    if hexd.len() != 64 || !hexd.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return None;
    }
    u64::from_str_radix(&hexd[..16], 16).ok()
}

impl Table {
    fn build(tx: &impl LedgerRead, parent: &str) -> Result<Table, StoreError> {
        let seq = ledger::protected_log_last(tx)?;
        let prefix = ledger::chain_hasher(parent);
        let (mut entries, mut other) = (Vec::new(), Vec::new());
        tx.find_key(Collection::Protected, &mut |d| {
            // Keys in canonical form (`sha256:` and 64 lowercase hex digits) are found again by
            // their first 16 digits.
            match canonical_head(d) {
                Some(lead) => {
                    let mut h = prefix.clone();
                    h.update(d.as_bytes());
                    entries.push((head(h.finalize().as_slice()), lead));
                }
                None => other.push(d.to_string()),
            }
            false
        })?;
        entries.sort_unstable();
        Ok(Table { seq, entries, other })
    }

    /// The protected layer d with chainID(parent, d) == target in `tx`, if any.
    fn find(&self, tx: &impl LedgerRead, parent: &str, want: &[u8; 32]) -> Result<Found, StoreError> {
        let prefix = ledger::chain_hasher(parent);
        let is = |d: &str| {
            let mut h = prefix.clone();
            h.update(d.as_bytes());
            h.finalize().as_slice() == want
        };
        let key = head(want);
        let start = self.entries.partition_point(|e| e.0 < key);
        for &(_, layer) in self.entries[start..].iter().take_while(|e| e.0 == key) {
            // The ledger's protected keys that begin with those 8 bytes (one, but for a
            // collision of 64 bits).
            let lead = format!("sha256:{layer:016x}");
            let mut from = lead.clone();
            loop {
                let keys = tx.range_from::<()>(Collection::Protected, &from, 8)?;
                let n = keys.len();
                let mut past = false;
                for (d, ()) in &keys {
                    if !d.starts_with(&lead) {
                        past = true;
                        break;
                    }
                    if is(d) {
                        return Ok(Found::Layer(d.clone()));
                    }
                }
                match keys.last() {
                    Some((last, _)) if !past && n == 8 => from = format!("{last}\0"),
                    _ => break,
                }
            }
        }
        for d in &self.other {
            if is(d) && ledger::is_protected(tx, d)? {
                return Ok(Found::Layer(d.clone()));
            }
        }
        // Layers that entered the index after the table was built.
        let newer = ledger::protected_logged_after(tx, self.seq, MAX_DELTA + 1)?;
        if newer.len() > MAX_DELTA {
            return Ok(Found::Stale);
        }
        for (_, d) in newer {
            if is(&d) && ledger::is_protected(tx, &d)? {
                return Ok(Found::Layer(d));
            }
        }
        Ok(Found::None)
    }
}

enum Found {
    Layer(String),
    None,
    /// Too many layers were logged since the table was built: rebuild it.
    Stale,
}

/// A kept table: the tick it was last used at, and the namespace that used it last.
struct Kept {
    table: Arc<Table>,
    used: u64,
    namespace: String,
}

#[derive(Default)]
struct Tables {
    /// Parent chainID -> table.
    tables: HashMap<String, Kept>,
    tick: u64,
    /// Parents whose table the worker is building.
    building: HashSet<String>,
    /// Namespaces with a decision building a table now: a namespace builds one table at a time.
    building_in: HashSet<String>,
}

impl Tables {
    fn get(&mut self, parent: &str, namespace: &str) -> Option<Arc<Table>> {
        self.tick += 1;
        let tick = self.tick;
        self.tables.get_mut(parent).map(|k| {
            k.used = tick;
            if k.namespace != namespace {
                k.namespace = namespace.to_string();
            }
            k.table.clone()
        })
    }

    /// Keeps `t`. When full, the table that goes is the least recently used one of the
    /// namespace that used the most tables last (the newcomer's own on a tie): a namespace that
    /// cycles through many parents evicts its own tables, not those other namespaces use.
    fn put(&mut self, parent: &str, t: Arc<Table>, namespace: &str) {
        self.tick += 1;
        if !self.tables.contains_key(parent) && self.tables.len() >= MAX_TABLES {
            let mut per: HashMap<&str, usize> = HashMap::new();
            for k in self.tables.values() {
                *per.entry(k.namespace.as_str()).or_default() += 1;
            }
            let own = per.get(namespace).copied().unwrap_or(0);
            let most = per.iter().max_by_key(|(ns, n)| (**n, **ns == namespace)).map(|(ns, n)| (ns.to_string(), *n));
            let from = match most {
                Some((ns, n)) if n > own => ns,
                _ => namespace.to_string(),
            };
            let old = self.tables.iter().filter(|(_, k)| k.namespace == from).min_by_key(|(_, k)| k.used).map(|(p, _)| p.clone());
            if let Some(old) = old.or_else(|| self.tables.iter().min_by_key(|(_, k)| k.used).map(|(p, _)| p.clone())) {
                self.tables.remove(&old);
            }
        }
        self.tables.insert(parent.to_string(), Kept { table: t, used: self.tick, namespace: namespace.to_string() });
    }
}

/// Tells how a decision found its answer (for the benchmark and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Decisions answered from a table already built.
    pub hits: u64,
    /// Tables a decision built itself.
    pub built_in_decision: u64,
    /// Tables the worker built ahead of the decisions.
    pub built_ahead: u64,
}

/// Where table builds are asked of the building thread: the store, the namespace that asked and
/// the table's parent.
type BuildQueue = std::sync::mpsc::SyncSender<(Arc<MetaStore>, String, String)>;

#[derive(Default)]
pub struct ChainIndex {
    tables: Mutex<Tables>,
    built: Condvar,
    worker: Mutex<Option<BuildQueue>>,
    stats: Mutex<Stats>,
}

impl ChainIndex {
    fn lock(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn count(&self, f: impl FnOnce(&mut Stats)) {
        f(&mut self.stats.lock().unwrap_or_else(|p| p.into_inner()));
    }

    pub fn stats(&self) -> Stats {
        *self.stats.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets every table (the benchmark measures cold parents with it).
    pub fn clear(&self) {
        self.lock().tables.clear();
    }

    /// [`Self::protected_layer_for_chain_in`] for no namespace in particular (tests, benchmark).
    pub fn protected_layer_for_chain(&self, tx: &impl LedgerRead, parent: &str, target: &str) -> Result<Option<String>, StoreError> {
        self.protected_layer_for_chain_in(tx, "", parent, target)
    }

    /// The protected layer d with chainID(parent, d) == target, in `tx`: what
    /// [`ledger::protected_layer_for_chain`] answers, from `parent`'s table. A decision for
    /// `namespace` that must build a table first waits for any other build of that namespace
    /// (one at a time per namespace: a namespace that asks about many parents at once spends
    /// one core's worth at most, and its tables take the place of its own, see [`Tables::put`]).
    pub fn protected_layer_for_chain_in(&self, tx: &impl LedgerRead, namespace: &str, parent: &str, target: &str) -> Result<Option<String>, StoreError> {
        if parent.is_empty() {
            return Ok(if ledger::is_protected(tx, target)? { Some(target.to_string()) } else { None });
        }
        let Some(want) = ledger::sha256_bytes(target) else { return Ok(None) };
        let table = {
            let mut all = self.lock();
            if all.building.contains(parent) {
                // The worker is on it: wait for that build rather than hash every layer twice.
                let (guard, _) = self
                    .built
                    .wait_timeout_while(all, WAIT_FOR_BUILD, |t| t.building.contains(parent))
                    .unwrap_or_else(|p| p.into_inner());
                all = guard;
            }
            all.get(parent, namespace)
        };
        if let Some(t) = &table {
            match t.find(tx, parent, &want)? {
                Found::Layer(d) => {
                    self.count(|s| s.hits += 1);
                    return Ok(Some(d));
                }
                Found::None => {
                    self.count(|s| s.hits += 1);
                    return Ok(None);
                }
                Found::Stale => {}
            }
        }
        let t = self.build_in_decision(tx, namespace, parent, table)?;
        match t.find(tx, parent, &want)? {
            Found::Layer(d) => Ok(Some(d)),
            _ => Ok(None),
        }
    }

    /// A table for `parent` built by a decision of `namespace`, after that namespace's build
    /// under way (if any) ended; one another decision put meanwhile is taken instead, unless
    /// it is `stale` (the one the decision found too old).
    fn build_in_decision(&self, tx: &impl LedgerRead, namespace: &str, parent: &str, stale: Option<Arc<Table>>) -> Result<Arc<Table>, StoreError> {
        {
            let all = self.lock();
            let (mut all, _) = self.built.wait_timeout_while(all, BUILD_TURN, |t| t.building_in.contains(namespace)).unwrap_or_else(|p| p.into_inner());
            if let Some(t) = all.get(parent, namespace).filter(|t| stale.as_ref().is_none_or(|s| !Arc::ptr_eq(s, t))) {
                return Ok(t);
            }
            all.building_in.insert(namespace.to_string());
        }
        let built = Table::build(tx, parent).map(Arc::new);
        let mut all = self.lock();
        all.building_in.remove(namespace);
        if let Ok(t) = &built {
            self.count(|s| s.built_in_decision += 1);
            all.put(parent, t.clone(), namespace);
        }
        drop(all);
        self.built.notify_all();
        built
    }

    /// Builds `parent`'s table on the worker thread (started on first use), unless it exists or
    /// is being built: called when an unpack step creating chain `parent` was allowed and the
    /// ledger does not record that chain, so that the next step finds the table ready.
    pub fn prefetch(self: &Arc<Self>, store: &Arc<MetaStore>, namespace: &str, parent: &str) {
        if parent.is_empty() {
            return;
        }
        {
            let mut all = self.lock();
            if all.tables.contains_key(parent) || all.building.contains(parent) {
                return;
            }
            all.building.insert(parent.to_string());
        }
        let mut worker = self.worker.lock().unwrap_or_else(|p| p.into_inner());
        if worker.is_none() {
            let (tx, rx) = std::sync::mpsc::sync_channel::<(Arc<MetaStore>, String, String)>(QUEUE);
            let index = Arc::downgrade(self);
            let spawned = std::thread::Builder::new().name("chain-index".into()).spawn(move || {
                while let Ok((store, namespace, parent)) = rx.recv() {
                    let Some(index) = index.upgrade() else { return };
                    index.build_ahead(&store, &namespace, &parent);
                }
            });
            match spawned {
                Ok(_) => *worker = Some(tx),
                Err(e) => tracing::warn!(error = %e, "chain index: cannot start its worker; decisions build their own tables"),
            }
        }
        let queued = worker.as_ref().is_some_and(|w| w.try_send((store.clone(), namespace.to_string(), parent.to_string())).is_ok());
        drop(worker);
        if !queued {
            self.lock().building.remove(parent);
            self.built.notify_all();
        }
    }

    fn build_ahead(&self, store: &MetaStore, namespace: &str, parent: &str) {
        match store.read(|tx| Table::build(tx, parent)) {
            Ok(t) => {
                self.count(|s| s.built_ahead += 1);
                let mut all = self.lock();
                all.put(parent, Arc::new(t), namespace);
                all.building.remove(parent);
            }
            Err(e) => {
                // A decision on this parent builds its own (and fails closed if it cannot).
                tracing::warn!(%parent, error = %e, "chain index: building a table failed");
                self.lock().building.remove(parent);
            }
        }
        self.built.notify_all();
    }

    /// Waits until no table is being built ahead (tests and the benchmark).
    pub fn settle(&self) {
        let all = self.lock();
        let _ = self.built.wait_timeout_while(all, Duration::from_secs(60), |t| !t.building.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diffid::Verified;
    use crate::ledger::{chain_id, chain_ids, ManifestRec};

    fn dg(s: &str) -> String {
        format!("sha256:{}", hex::encode(sha2::Sha256::digest(s.as_bytes())))
    }

    /// Records manifest `m` of `layers` (names of layers; blob `B<name>`), served to a
    /// credential (protected) or anonymously (public).
    fn record(store: &MetaStore, m: &str, layers: &[&str], public: bool) {
        store
            .write(|tx| -> Result<(), ledger::LedgerError> {
                let (mut blobs, mut ids) = (vec![], vec![]);
                for l in layers {
                    let (b, d) = (dg(&format!("B{l}")), dg(l));
                    ledger::record_pairing(tx, &Verified::for_test(&b, &d))?;
                    ledger::record_blob(tx, &b, "reg:5000/app", if public { crate::credential::ANONYMOUS } else { "hmac-sha256:x" }, 1)?;
                    blobs.push(b);
                    ids.push(d);
                }
                ledger::record_manifest(tx, &dg(m), &ManifestRec { config: dg(&format!("C{m}")), layers: blobs, diff_ids: ids, ..Default::default() })?;
                Ok(())
            })
            .unwrap();
    }

    fn open(dir: &std::path::Path) -> MetaStore {
        let s = MetaStore::open(&dir.join("m.redb")).unwrap();
        s.write(ledger::upgrade).unwrap();
        s
    }

    /// A ledger of 40 private images of 5 layers and 5 public ones.
    fn ledger() -> (tempfile::TempDir, MetaStore) {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path());
        for i in 0..40 {
            let ls: Vec<String> = (0..5).map(|j| format!("p{i}-{j}")).collect();
            record(&s, &format!("m{i}"), &ls.iter().map(String::as_str).collect::<Vec<_>>(), false);
        }
        for i in 0..5 {
            record(&s, &format!("pub{i}"), &[&format!("q{i}")], true);
        }
        (dir, s)
    }

    /// Parents: unknown chains of every depth up to 6, and recorded chains.
    fn parents() -> Vec<String> {
        let mut out = Vec::new();
        let mut c = String::new();
        for k in 0..6 {
            c = chain_id(&c, &dg(&format!("x{k}")));
            out.push(c.clone());
        }
        out.extend(chain_ids(&(0..5).map(|j| dg(&format!("p3-{j}"))).collect::<Vec<_>>()));
        out
    }

    /// Targets on `parent`: each private layer at that depth, public ones, unknown ones.
    fn targets(parent: &str) -> Vec<String> {
        let mut layers: Vec<String> = (0..40).flat_map(|i| (0..5).map(move |j| dg(&format!("p{i}-{j}")))).collect();
        layers.extend((0..5).map(|i| dg(&format!("q{i}"))));
        layers.extend((0..5).map(|i| dg(&format!("unknown{i}"))));
        layers.iter().map(|d| chain_id(parent, d)).collect()
    }

    fn same_as_scan(index: &ChainIndex, s: &MetaStore) -> usize {
        let mut found = 0;
        s.read(|tx| -> Result<(), StoreError> {
            for p in parents() {
                for t in targets(&p) {
                    let want = ledger::protected_layer_for_chain(tx, &p, &t)?;
                    assert_eq!(index.protected_layer_for_chain(tx, &p, &t)?, want, "parent {p} target {t}");
                    found += want.is_some() as usize;
                }
            }
            Ok(())
        })
        .unwrap();
        found
    }

    #[test]
    fn the_index_answers_as_the_scan_at_every_depth() {
        let (_d, s) = ledger();
        let index = ChainIndex::default();
        // Every private layer on every parent is found (200 layers, 11 parents); public and
        // unknown ones are not.
        assert_eq!(same_as_scan(&index, &s), 200 * 11);
        let st = index.stats();
        assert_eq!(st.built_in_decision, parents().len() as u64, "one table per parent: {st:?}");
        assert_eq!(st.hits, 210 * 11 - 11);
        // A base layer's chainID is its diffID: no table needed.
        s.read(|tx| -> Result<(), StoreError> {
            assert_eq!(index.protected_layer_for_chain(tx, "", &dg("p0-0"))?, Some(dg("p0-0")));
            assert_eq!(index.protected_layer_for_chain(tx, "", &dg("q0"))?, None);
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn tables_follow_layers_recorded_made_public_and_forgotten_after_them() {
        let (_d, s) = ledger();
        let index = ChainIndex::default();
        let p = parents()[2].clone();
        let target = |l: &str| chain_id(&p, &dg(l));
        let ask = |l: &str| s.read(|tx| index.protected_layer_for_chain(tx, &p, &target(l))).unwrap();
        assert_eq!(ask("late"), None);
        let built = index.stats().built_in_decision;
        // Recorded after the table was built: found through the log, by the same table.
        record(&s, "late-m", &["late"], false);
        assert_eq!(ask("late"), Some(dg("late")));
        // Made public: no longer protected, as the scan says.
        s.write(|tx| ledger::mark_public(tx, &dg("p7-2"))).unwrap();
        assert_eq!(ask("p7-2"), None);
        // Forgotten (removed from the ledger's protected layers, as a GC of the ledger would),
        // then protected again: each time as the scan says.
        s.write(|tx| tx.delete_val(Collection::Protected, &dg("p9-4")).map(|_| ())).unwrap();
        assert_eq!(ask("p9-4"), None);
        s.write(|tx| {
            tx.put_val(Collection::Protected, &dg("p9-4"), &())?;
            let next = ledger::protected_log_last(tx)? + 1;
            tx.put_val(Collection::ProtectedLog, &ledger::log_key(next), &dg("p9-4"))
        })
        .unwrap();
        assert_eq!(ask("p9-4"), Some(dg("p9-4")));
        assert_eq!(index.stats().built_in_decision, built, "answered by the table built first");
        assert_eq!(same_as_scan(&index, &s), 199 * 11, "p7-2 is public now");
        // More layers than a table tests one by one: it is rebuilt, and still answers right.
        for i in 0..(MAX_DELTA + 10) {
            record(&s, &format!("burst{i}"), &[&format!("b{i}")], false);
        }
        assert_eq!(ask(&format!("b{}", MAX_DELTA + 5)), Some(dg(&format!("b{}", MAX_DELTA + 5))));
        assert_eq!(ask("p9-4"), Some(dg("p9-4")));
    }

    #[test]
    fn after_a_restart_and_for_an_older_ledger() {
        let (dir, s) = ledger();
        let index = ChainIndex::default();
        same_as_scan(&index, &s);
        drop(s);
        // Restarted: a new index over the same ledger.
        let s = open(dir.path());
        assert_eq!(same_as_scan(&ChainIndex::default(), &s), 200 * 11);
        // A ledger from before the log: the upgrade logs every protected layer.
        s.write(|tx| -> Result<(), StoreError> {
            let mut keys = Vec::new();
            tx.find_key(Collection::ProtectedLog, &mut |k| {
                keys.push(k.to_string());
                false
            })?;
            for k in keys {
                tx.delete_val(Collection::ProtectedLog, &k)?;
            }
            tx.set_counter("ledger_protected_log", 0)
        })
        .unwrap();
        drop(s);
        let s = open(dir.path());
        assert_eq!(s.read(|tx| ledger::protected_log_last(tx)).unwrap(), 200);
        assert_eq!(same_as_scan(&ChainIndex::default(), &s), 200 * 11);
    }

    #[test]
    fn a_namespace_cycling_through_parents_evicts_its_own_tables() {
        let (_d, s) = ledger();
        let index = ChainIndex::default();
        let ask = |ns: &str, p: &str| s.read(|tx| index.protected_layer_for_chain_in(tx, ns, p, &dg("nothing"))).unwrap();
        let victim = chain_ids(&[dg("v0"), dg("v1")])[1].clone();
        ask("victim", &victim);
        for i in 0..3 * MAX_TABLES {
            ask("evil", &chain_ids(&[dg(&format!("e{i}"))])[0]);
        }
        assert_eq!(index.stats().built_in_decision as usize, 1 + 3 * MAX_TABLES);
        // The victim's table is still there: its next look-up is a hit.
        let hits = index.stats().hits;
        ask("victim", &victim);
        assert_eq!((index.stats().hits, index.stats().built_in_decision as usize), (hits + 1, 1 + 3 * MAX_TABLES));
        let kept = index.lock().tables.values().filter(|k| k.namespace == "evil").count();
        assert_eq!(kept, MAX_TABLES - 1, "evil keeps the rest of the tables");
    }

    #[test]
    fn tables_built_ahead_answer_the_next_step() {
        let (_d, s) = ledger();
        let s = Arc::new(s);
        let index = Arc::new(ChainIndex::default());
        let p = parents()[4].clone();
        index.prefetch(&s, "", &p);
        index.settle();
        let found = s.read(|tx| index.protected_layer_for_chain(tx, &p, &chain_id(&p, &dg("p5-1")))).unwrap();
        assert_eq!(found, Some(dg("p5-1")));
        assert_eq!(index.stats(), Stats { hits: 1, built_in_decision: 0, built_ahead: 1 });
        // Asked again for a parent it has: nothing is built.
        index.prefetch(&s, "", &p);
        index.settle();
        assert_eq!(index.stats().built_ahead, 1);
    }
}
