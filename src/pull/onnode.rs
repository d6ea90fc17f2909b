//! pull::onnode: which image records of a namespace hold a layer chain, as containerd runs
//! them on this node: the names a refused Prepare or View asks at their own origins. Reading a
//! namespace's records costs containerd calls a tenant can multiply (records of its own, any
//! unpack target it picks), so the reading is shared by every refused request of the namespace
//! for a while, done by one request at a time, and bounded in records, documents and bytes.
//! Requests of other namespaces neither wait for it nor share it.

use super::containerd::Containerd;
use crate::registry::{self, MAX_MANIFEST};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a namespace's reading is used before it is read again.
pub const FRESH: Duration = Duration::from_secs(10);
/// Distinct image targets of a namespace read at most.
pub const MAX_TARGETS: usize = 512;
/// Bytes of documents (targets, index entries, configs) one reading reads at most.
pub const MAX_BYTES: u64 = 64 << 20;
/// Names kept per target (the most a refused request asks at their origins).
const NAMES_PER_TARGET: usize = 4;
/// Namespaces whose reading is kept at most (then the one used longest ago is forgotten).
const MAX_NAMESPACES: usize = 1024;
/// containerd's own limit on a message it sends: a namespace's list of image records is read
/// up to it (the client's 4 MiB default would fail on a namespace with many names).
const MAX_LIST: usize = 16 << 20;
/// The label containerd's CRI puts on the images it keeps (the sandbox image among them):
/// set by containerd itself, never by a pull.
const PINNED_FILTER: &str = r#"labels."io.cri-containerd.pinned"==pinned"#;

/// What one reading cost: containerd calls and document bytes (logged, and counted by the
/// benchmark).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Cost {
    pub calls: u64,
    pub bytes: u64,
}

/// One image target of the namespace: up to `NAMES_PER_TARGET` names pointing at it and the
/// chain IDs of the image it gives this node.
struct Target {
    digest: String,
    names: Vec<String>,
    chains: HashSet<String>,
}

struct Reading {
    at: Instant,
    targets: Vec<Target>,
}

/// Each namespace's latest reading, behind a lock of its own.
#[derive(Default)]
pub struct Readings {
    slots: Mutex<HashMap<String, (Instant, Arc<tokio::sync::Mutex<Option<Reading>>>)>>,
}

impl Readings {
    fn slot(&self, namespace: &str) -> Arc<tokio::sync::Mutex<Option<Reading>>> {
        let mut m = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if !m.contains_key(namespace) && m.len() >= MAX_NAMESPACES {
            if let Some(oldest) = m.iter().min_by_key(|(_, (at, _))| *at).map(|(k, _)| k.clone()) {
                m.remove(&oldest);
            }
        }
        let e = m.entry(namespace.to_string()).or_insert_with(|| (Instant::now(), Default::default()));
        e.0 = Instant::now();
        e.1.clone()
    }

    /// The image records of `namespace` whose image, as containerd runs it on this node, holds
    /// the layer chain `chain` (its own, or one below it): name and target digest. The images
    /// containerd's CRI keeps (the sandbox image) are read first when `pinned_first`. Records
    /// that cannot be read name nothing here. Returns what this request's reading cost (zero
    /// when it used one made shortly before).
    pub async fn names_on_chain(&self, cd: &Containerd, namespace: &str, chain: &str, pinned_first: bool) -> (Vec<(String, String)>, Cost) {
        let slot = self.slot(namespace);
        let mut cost = Cost::default();
        let mut held = slot.lock().await;
        if held.as_ref().is_none_or(|r| r.at.elapsed() >= FRESH) {
            *held = Some(Self::read(cd, namespace, pinned_first, &mut cost).await);
        }
        let out = held
            .as_ref()
            .map(|r| r.targets.iter().filter(|t| t.chains.contains(chain)).flat_map(|t| t.names.iter().map(|n| (n.clone(), t.digest.clone()))).collect())
            .unwrap_or_default();
        (out, cost)
    }

    async fn read(cd: &Containerd, namespace: &str, pinned_first: bool, cost: &mut Cost) -> Reading {
        let mut records = Vec::new();
        if pinned_first {
            cost.calls += 1;
            match cd.images_filtered(&[PINNED_FILTER], MAX_LIST).await {
                Ok(r) => records.extend(r),
                Err(e) => tracing::warn!(%namespace, error = %e, "cannot list the namespace's pinned images"),
            }
        }
        cost.calls += 1;
        match cd.images_filtered(&[], MAX_LIST).await {
            Ok(r) => records.extend(r),
            Err(e) => tracing::warn!(%namespace, error = %e, "cannot list the namespace's images"),
        }
        let platform = registry::host_platform();
        let mut targets: Vec<Target> = Vec::new();
        let mut at: HashMap<String, usize> = HashMap::new();
        if let Ok((os, arch, variant)) = registry::parse_platform(&platform) {
            for (name, target) in records {
                if let Some(i) = at.get(&target.digest) {
                    let t = &mut targets[*i];
                    if t.names.len() < NAMES_PER_TARGET && !t.names.contains(&name) {
                        t.names.push(name);
                    }
                    continue;
                }
                if targets.len() >= MAX_TARGETS || cost.bytes >= MAX_BYTES {
                    continue;
                }
                let chains = match read_on_node(cd, &target, (&os, &arch, variant.as_deref()), cost).await {
                    Ok(r) => crate::ledger::chain_ids(&r.diff_ids).into_iter().collect(),
                    Err(_) => HashSet::new(),
                };
                at.insert(target.digest.clone(), targets.len());
                targets.push(Target { digest: target.digest, names: vec![name], chains });
            }
        }
        tracing::debug!(%namespace, targets = targets.len(), calls = cost.calls, bytes = cost.bytes, "read the namespace's image records");
        Reading { at: Instant::now(), targets }
    }
}

/// An image record's target read as containerd runs it on `platform`, from the namespace's
/// content ([`crate::document::read_image`], given each document it asks for).
async fn read_on_node(cd: &Containerd, target: &containerd_client::types::Descriptor, platform: (&str, &str, Option<&str>), cost: &mut Cost) -> Result<crate::document::Reading, String> {
    cost.calls += 1;
    let root = cd.read_content(&target.digest, MAX_MANIFEST).await.map_err(|e| e.to_string())?;
    cost.bytes += root.len() as u64;
    let mut have: HashMap<String, Vec<u8>> = HashMap::new();
    // The target, an index's entry, the config: each round reads the document it lacked.
    for _ in 0..3 {
        let mut missing = None;
        let read = crate::document::read_image(&root, &target.media_type, platform, &mut |d| {
            let got = have.get(d).cloned();
            if got.is_none() {
                missing = Some(d.to_string());
            }
            got
        });
        match (read, missing) {
            (Ok(r), _) => return Ok(r),
            (Err(_), Some(d)) => {
                cost.calls += 1;
                let bytes = cd.read_content(&d, MAX_MANIFEST).await.map_err(|e| e.to_string())?;
                cost.bytes += bytes.len() as u64;
                have.insert(d, bytes);
            }
            (Err(e), None) => return Err(e),
        }
    }
    Err("too many documents".into())
}
